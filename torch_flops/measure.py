"""Timers and memory probes, chosen once per run from the device the inputs live on.

A :class:`Timer` is ``tick() -> token`` (cheap, called right before and after every node) and
``elapsed_ms(start, end)`` (called after ``finish()``, which waits for the device once per run).
Pass your own to ``TorchFLOPsByFX(timer=...)`` (an object, or a function of the device).

* CPU: ``time.perf_counter_ns`` tokens.
* CUDA and other accelerators with events: one start/end event pair per node recorded on the
  current stream, no synchronisation between nodes, one synchronisation at the end of the run.
  On CUDA, when a profile repeats its runs (``warmup`` + ``repeat`` > 1), every run after the first
  starts with a GPU-side wait of twice the shortest host time of a run so far
  (:class:`CudaEventTimer`), so that the GPU runs the kernels back to back from a full queue and
  each event pair times its kernels, not the profiler's own Python between launches; a single run
  (``repeat=1``, no warm-up) has no such estimate.
* meta: no time (``None``).

Memory (:class:`MemoryProbe`): on CUDA the allocator's own counter
(``torch.cuda.memory_allocated`` or ``max_memory_allocated``) is read before and after every node;
everywhere else :class:`LiveTensors` counts the bytes of tensors the graph holds (storages counted
once, released when the interpreter drops a value after its last use), replayed from the storages
each node's value holds.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import torch

__all__ = [
    "MEMORY_FUNCTIONS",
    "CudaEventTimer",
    "DeviceTimer",
    "LiveTensors",
    "MemoryProbe",
    "NullTimer",
    "PerfCounterTimer",
    "StorageEntries",
    "Timer",
    "batch_size_of",
    "cuda_index",
    "cuda_memory_reader",
    "input_device",
    "make_memory_probe",
    "make_timer",
    "storage_entries",
    "storage_key",
    "tensor_nbytes",
    "tensors_of",
]

Tensor = torch.Tensor


class Timer(Protocol):
    """What the interpreter needs of a timer (see the module docstring)."""

    def tick(self) -> Any: ...

    def finish(self) -> None: ...

    def elapsed_ms(self, start: Any, end: Any) -> float | None: ...


class PerfCounterTimer:
    """Host wall clock: right for CPU tensors, whose kernels run synchronously."""

    tick: Callable[[], Any] = staticmethod(time.perf_counter_ns)

    def finish(self) -> None:
        pass

    @staticmethod
    def elapsed_ms(start: int, end: int) -> float:
        return (end - start) / 1e6


class NullTimer:
    """No time where nothing runs (meta tensors)."""

    @staticmethod
    def tick() -> None:
        return None

    def finish(self) -> None:
        pass

    @staticmethod
    def elapsed_ms(start: Any, end: Any) -> None:
        return None


class DeviceTimer:
    """Device events (``torch.cuda.Event`` and the same API of other accelerator backends)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        backend = getattr(torch, device.type)
        self._event_cls = backend.Event
        self._synchronize = backend.synchronize

    def tick(self) -> Any:
        event = self._event_cls(enable_timing=True)
        event.record()
        return event

    def finish(self) -> None:
        self._synchronize(self.device)

    @staticmethod
    def elapsed_ms(start: Any, end: Any) -> float:
        return float(start.elapsed_time(end))


class CudaEventTimer(DeviceTimer):
    """``torch.cuda.Event`` pairs, recorded on the stream current at each tick, and, with
    ``queue_ahead``, each run after the first queued behind a GPU-side wait.

    Events: ``Event.record()`` without a stream builds a ``Stream`` object through
    ``torch.cuda.current_stream()`` each time (8.7 us a tick measured on an H100 host, two ticks a
    node; 3.7 us here). The current stream's identity is read from the binding that function reads
    and the ``Stream`` object is rebuilt only when it changes (a model that switches streams), so
    each event still lands on the stream its node's kernels were launched on.

    The wait (``queue_ahead``: the repeated runs of one profile, ``Options.timer_for(queued=True)``;
    never a timer of the user's): the profiler spends tens of microseconds of Python on each node;
    when that is longer than the node's kernels, the GPU drains its queue between nodes and an event
    pair measures the launch of the next kernel as well as the kernel. So the first tick of every
    run after the first enqueues ``torch.cuda._sleep`` on the timer's stream for twice the shortest
    host time of a run so far (at most 2 s): the host launches the whole run while the GPU waits,
    then the GPU runs it as it runs the model, kernel after kernel. The outputs are the same; the
    run's wall time grows by about its host time. The shortest run counts: the first one pays
    CUDA's set-up, and a run that synchronises in the middle (``.item()``) waits for the sleep
    there, so its host time would feed back into the next wait (from that point on it is timed from
    a drained queue). A run whose host time outlasts the wait (the counting run does more work per
    node) is queued for its first part only. ``_sleep`` counts SM clock cycles: the cycles per
    millisecond come from one timed sleep after the first run and, after each queued run, from its
    own wait timed by the events around it, the highest rate kept (on a freshly started H100 the
    calibration ran before the clock rose, and every wait fell short: ResNet-50's per-node times
    summed to 1.9x its forward)."""

    HOLD_FACTOR = 2.0
    MAX_HOLD_MS = 2000.0
    _clock = staticmethod(time.perf_counter)  # host seconds (a test may script it)

    def __init__(self, device: torch.device, queue_ahead: bool = False) -> None:
        super().__init__(device)
        self.queue_ahead = queue_ahead
        self._index = cuda_index(device)
        self._current = torch._C._cuda_getCurrentStream
        self._key: Any = None
        self._stream: Any = None
        self._sleep = getattr(torch.cuda, "_sleep", None)
        self._run_start: float | None = None  #: host clock at the current run's first tick
        self._host_ms: float | None = None  #: the shortest host time of a finished run
        self._cycles_per_ms: float | None = None
        self._slept: tuple[Any, Any, int] | None = None  #: (event before, event after, cycles) of this run's wait

    def tick(self) -> Any:
        key = self._current(self._index)
        if key != self._key:
            self._key = key
            self._stream = torch.cuda.Stream(stream_id=key[0], device_index=key[1], device_type=key[2])
        slept = None
        if self._run_start is None:
            self._run_start = self._clock()
            if self.queue_ahead and self._host_ms and self._cycles_per_ms and self._sleep is not None:
                hold_ms = min(self._host_ms * self.HOLD_FACTOR, self.MAX_HOLD_MS)
                cycles = round(hold_ms * self._cycles_per_ms)
                slept = self._event_cls(enable_timing=True)
                with torch.cuda.stream(self._stream):  # the timer's device and stream, whatever is current
                    slept.record(self._stream)
                    self._sleep(cycles)
        event = self._event_cls(enable_timing=True)
        event.record(self._stream)
        if slept is not None:
            self._slept = (slept, event, cycles)
        return event

    def finish(self) -> None:
        if self._run_start is not None:
            host_ms = (self._clock() - self._run_start) * 1e3
            self._host_ms = host_ms if self._host_ms is None else min(self._host_ms, host_ms)
            self._run_start = None
        self._synchronize(self.device)
        if self._slept is not None:  # the wait as it ran: the SM clock may have risen since the calibration
            start, end, cycles = self._slept
            self._slept = None
            ms = float(start.elapsed_time(end))
            if ms > 0 and self._cycles_per_ms is not None:
                self._cycles_per_ms = max(self._cycles_per_ms, cycles / ms)
        if self.queue_ahead and self._cycles_per_ms is None and self._stream is not None and self._sleep is not None:
            self._cycles_per_ms = self._calibrate()

    def _calibrate(self) -> float:
        """GPU clock cycles per millisecond of ``torch.cuda._sleep`` (it spins on the SM clock): one
        timed sleep of 1e6 cycles on the timer's stream, between two runs."""
        cycles = 1_000_000
        start, end = self._event_cls(enable_timing=True), self._event_cls(enable_timing=True)
        with torch.cuda.stream(self._stream):
            start.record(self._stream)
            self._sleep(cycles)  # type: ignore[misc]
            end.record(self._stream)
        end.synchronize()
        ms = float(start.elapsed_time(end))
        return cycles / ms if ms > 0 else 0.0


def make_timer(device: torch.device, queue_ahead: bool = False) -> Timer:
    """The right timer for tensors on ``device``; ``queue_ahead``: for the repeated runs of one
    profile (:class:`CudaEventTimer`; nothing elsewhere)."""
    if device.type == "meta":
        return NullTimer()
    if device.type == "cpu":
        return PerfCounterTimer()
    if device.type == "cuda" and hasattr(torch._C, "_cuda_getCurrentStream"):
        return CudaEventTimer(device, queue_ahead)
    backend = getattr(torch, device.type, None)
    if backend is not None and hasattr(backend, "Event") and hasattr(backend, "synchronize"):
        return DeviceTimer(device)
    return PerfCounterTimer()  # an accelerator without events: host time (documented fallback)


# ---------------------------------------------------------------------------------------------
# memory
# ---------------------------------------------------------------------------------------------

MEMORY_FUNCTIONS = ("memory_allocated", "max_memory_allocated")


@dataclass(frozen=True)
class MemoryProbe:
    """How a run measures memory: ``read`` (the allocator's counter, read before and after every
    node) or, when it is None, live-tensor accounting excluding the ``model_storages``."""

    source: str  #: "cuda.memory_allocated", "cuda.max_memory_allocated" or "live_tensors"
    read: Callable[[], int] | None = None
    model_storages: frozenset[int] = frozenset()


def make_memory_probe(device: torch.device, mem_func_name: str,
                      model_storages: frozenset[int] = frozenset()) -> MemoryProbe:
    """The allocator counter for CUDA devices; elsewhere live-tensor accounting that leaves out
    ``model_storages`` (:meth:`LiveTensors.storage_keys` of the model's parameters and buffers)."""
    if device.type == "cuda":
        return MemoryProbe(f"cuda.{mem_func_name}", read=cuda_memory_reader(mem_func_name, cuda_index(device)))
    return MemoryProbe("live_tensors", model_storages=model_storages)


def cuda_index(device: torch.device) -> int:
    """The index of a CUDA device (``cuda`` alone: the current device)."""
    return device.index if device.index is not None else torch.cuda.current_device()


def cuda_memory_reader(mem_func_name: str, index: int) -> Callable[[], int]:
    """A reader of ``torch.cuda.<mem_func_name>(index)``, read twice per node.

    The public function flattens the caching allocator's whole nested statistics dict in Python to
    return one entry of it: 147 us a call measured on an H100 host (torch 2.11), twice a node, which
    made the profiled run many times slower than the model on a GPU. The same number is read here
    from the nested dict itself (``allocated_bytes.all.current``, or ``.peak`` for the maximum: the
    keys ``memory_allocated`` and ``max_memory_allocated`` read), 11.5 us a call there. Before CUDA
    is initialised the counter is 0, as the public function says. Where the binding is missing,
    the public function."""
    fn = getattr(torch.cuda, mem_func_name)
    stats = getattr(torch._C, "_cuda_memoryStats", None)
    if stats is None:
        return lambda: int(fn(index))
    key = "peak" if mem_func_name == "max_memory_allocated" else "current"

    def read() -> int:
        if not torch.cuda.is_initialized():
            return 0
        return int(stats(index)["allocated_bytes"]["all"][key])

    return read


F = TypeVar("F", bound=Callable[..., Any])


def functions_off(fn: F) -> F:
    """``fn`` run with torch functions off: the profiler's own reads of tensors (sizes, storages,
    devices) reach no ``TorchFunctionMode`` of the user's and no subclass's ``__torch_function__``,
    which in the plain call would see only the model's calls (about 0.2 us a call)."""
    @functools.wraps(fn)
    def plain(*args: Any, **kwargs: Any) -> Any:
        with torch._C.DisableTorchFunction():
            return fn(*args, **kwargs)

    return plain  # type: ignore[return-value]


@functions_off
def input_device(inputs: Any, model: torch.nn.Module) -> torch.device:
    """Where a run happens: the first input tensor's device, else the model's, else the CPU."""
    for t in tensors_of(inputs):
        return t.device
    for t in itertools.chain(model.parameters(), model.buffers()):
        return t.device
    return torch.device("cpu")


@functions_off
def batch_size_of(value: Any) -> int | None:
    """The first dimension of the first tensor in ``value`` that has one (a strided nested
    tensor, which has no sizes to read: its number of components); None without one."""
    for t in tensors_of(value):
        if t.dim() > 0:
            return int(t.size(0)) if t.is_nested else int(t.shape[0])
    return None


def tensor_nbytes(t: Tensor) -> int:
    """The bytes ``t`` holds: ``t.nbytes``; for a sparse tensor (which has no ``nbytes``) the
    bytes of its index and value tensors; for another storage-less layout, its elements'."""
    layout = t.layout
    if layout is torch.strided:
        return t.nbytes
    if layout is torch.sparse_coo:
        parts: tuple[Tensor, ...] = (t._indices(), t._values())
    elif layout in (torch.sparse_csr, torch.sparse_bsr):
        parts = (t.crow_indices(), t.col_indices(), t.values())
    elif layout in (torch.sparse_csc, torch.sparse_bsc):
        parts = (t.ccol_indices(), t.row_indices(), t.values())
    else:
        return t.numel() * t.element_size()
    return sum(p.nbytes for p in parts)


@functions_off
def storage_key(t: Tensor) -> tuple[int, int]:
    """(identity of the storage behind ``t``, its size in bytes): views share one key."""
    try:
        storage = t.untyped_storage()
    except (RuntimeError, NotImplementedError):  # sparse, nested, or other storage-less tensors
        return id(t), tensor_nbytes(t)
    return storage._cdata, storage.nbytes()


def tensors_of(value: Any) -> list[Tensor]:
    """The tensors inside a node's value (tensor, tuple/list/dict nesting, or any pytree)."""
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors_of(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_of(v)]
    if value is None or isinstance(value, (int, float, bool, str, torch.dtype, torch.device, torch.Size)):
        return []
    from torch.utils import _pytree

    return [leaf for leaf in _pytree.tree_leaves(value) if isinstance(leaf, Tensor)]


#: what a node's value holds: one (storage key, bytes) pair, several, or None (no tensor)
StorageEntries = tuple[int, int] | tuple[tuple[int, int], ...] | None


def storage_entries(value: Any) -> StorageEntries:
    """The storages behind a node's value, captured while it is alive (cheap for one tensor)."""
    if type(value) is Tensor:
        return storage_key(value)
    tensors = tensors_of(value)
    if not tensors:
        return None
    return tuple(storage_key(t) for t in tensors)


class LiveTensors:
    """Bytes of tensor storage held by the graph's live values.

    ``hold(key, entries)`` adds the storages of a new value (a storage already held, e.g. by a view
    or an in-place result, is not added twice); ``release(key)`` drops one value. Storages of the
    model's parameters and buffers are never counted: they are the model, not the run. The
    interpreter captures each value's :func:`storage_entries` during the run and replays holds and
    releases in node order afterwards (:meth:`timeline`), which gives the same bytes as counting
    live but keeps the run itself lean.
    """

    __slots__ = ("_by_value", "_excluded", "_held", "_kept", "_outside", "_sizes", "bytes", "made", "made_peak")

    def __init__(self, excluded_keys: frozenset[int] = frozenset(), kept_keys: frozenset[int] = frozenset(),
                 outside_keys: frozenset[int] = frozenset()) -> None:
        self.bytes = 0
        #: of ``bytes``, those of storages not in ``outside_keys`` (held by values the run made itself,
        #: not by its inputs or the constants it read), and the peak of that count over :meth:`timeline`
        self.made = 0
        self.made_peak = 0
        self._outside = outside_keys
        self._held: dict[int, int] = {}  # storage key -> how many live values hold it
        #: storage key -> the bytes counted for it: the largest any value holding it saw (a storage that
        #: grows in place, ``out=`` resizing it or ``resize_``, counts its growth where it grew, and is
        #: released with what was counted)
        self._sizes: dict[int, int] = {}
        #: value -> the (storage key, bytes) pairs it holds: one pair, or a tuple of pairs
        self._by_value: dict[Any, Any] = {}
        self._excluded = excluded_keys
        #: storages something outside the graph keeps alive to the end (what autograd saved for
        #: the backward of a training step): held once more than the graph's values hold them
        self._kept = kept_keys

    @staticmethod
    def storage_keys(tensors: Iterable[Tensor]) -> frozenset[int]:
        """Keys of the storages behind ``tensors`` (e.g. a model's parameters and buffers), to exclude."""
        return frozenset(storage_key(t)[0] for t in tensors)

    def hold(self, key: Any, entries: StorageEntries) -> None:
        if entries is None:
            return
        pairs = (entries,) if type(entries[0]) is int else entries
        kept = []
        held, sizes = self._held, self._sizes
        for pair in pairs:  # type: ignore[union-attr]
            skey, nbytes = pair  # type: ignore[misc]
            if skey in self._excluded:
                continue
            count = held.get(skey)
            grown = 0
            if count is None:
                held[skey] = 2 if skey in self._kept else 1
                sizes[skey] = grown = nbytes
            else:
                held[skey] = count + 1
                if nbytes > sizes[skey]:  # (grown in place)
                    grown = nbytes - sizes[skey]
                    sizes[skey] = nbytes
            self.bytes += grown
            if skey not in self._outside:
                self.made += grown
            kept.append(pair)
        if kept:
            self._by_value[key] = tuple(kept)

    def release(self, key: Any) -> None:
        pairs = self._by_value.pop(key, None)
        if pairs is None:
            return
        held = self._held
        for skey, _ in ((pairs,) if type(pairs[0]) is int else pairs):
            count = held[skey] - 1
            if count:
                held[skey] = count
            else:
                del held[skey]
                nbytes = self._sizes.pop(skey)
                self.bytes -= nbytes
                if skey not in self._outside:
                    self.made -= nbytes

    def timeline(self, entries: Sequence[StorageEntries],
                 frees: Sequence[Iterable[int]]) -> tuple[list[int], list[int]]:
        """Replay a run: node ``i`` holds ``entries[i]``, then the values ``frees[i]`` are released.
        Returns the live bytes before and after every node, and leaves in :attr:`made_peak` the peak
        of the bytes held by storages outside ``outside_keys``. (The :meth:`hold` / :meth:`release`
        steps, inlined for the common case of a node holding one tensor: this runs once per node
        of every profile.)"""
        before: list[int] = []
        after: list[int] = []
        held, by_value, excluded, first = self._held, self._by_value, self._excluded, 2 if self._kept else 1
        sizes, kept, outside = self._sizes, self._kept, self._outside
        live, made, peak = self.bytes, self.made, self.made_peak
        for i, value in enumerate(entries):
            before.append(live)
            if value is not None:
                if type(value[0]) is int:  # one storage: (key, nbytes), kept as it is
                    skey = value[0]
                    if skey not in excluded:
                        count = held.get(skey)
                        grown = 0
                        if count is None:
                            held[skey] = first if skey in kept else 1
                            sizes[skey] = grown = value[1]  # type: ignore[misc]
                        else:
                            held[skey] = count + 1
                            if value[1] > sizes[skey]:  # type: ignore[misc]  # (grown in place)
                                grown = value[1] - sizes[skey]  # type: ignore[misc]
                                sizes[skey] = value[1]  # type: ignore[misc]
                        if grown:
                            live += grown
                            if skey not in outside:
                                made += grown
                                peak = max(peak, made)
                        by_value[i] = value
                else:
                    self.bytes, self.made = live, made
                    self.hold(i, value)
                    live, made = self.bytes, self.made
                    peak = max(peak, made)
            after.append(live)
            for dead in frees[i]:
                pairs = by_value.pop(dead, None)
                if pairs is None:
                    continue
                if type(pairs[0]) is int:
                    skey = pairs[0]
                    count = held[skey] - 1
                    if count:
                        held[skey] = count
                    else:
                        del held[skey]
                        nbytes = sizes.pop(skey)
                        live -= nbytes
                        if skey not in outside:
                            made -= nbytes
                else:
                    self.bytes, self.made = live, made
                    by_value[dead] = pairs
                    self.release(dead)
                    live, made = self.bytes, self.made
        self.bytes, self.made, self.made_peak = live, made, peak
        return before, after

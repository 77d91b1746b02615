"""Timers and memory probes, chosen once per run from the device the inputs live on.

A :class:`Timer` is ``tick() -> token`` (cheap, called right before and after every node) and
``elapsed_ms(start, end)`` (called after ``finish()``, which waits for the device once per run).
Pass your own to ``TorchFLOPsByFX(timer=...)`` (an object, or a function of the device).

* CPU: ``time.perf_counter_ns`` tokens.
* CUDA and other accelerators with events: one start/end event pair per node recorded on the
  current stream, no synchronisation between nodes, one synchronisation at the end of the run.
* meta: no time (``None``).

Memory (:class:`MemoryProbe`): on CUDA the allocator's own counter
(``torch.cuda.memory_allocated`` or ``max_memory_allocated``) is read before and after every node;
everywhere else :class:`LiveTensors` counts the bytes of tensors the graph holds (storages counted
once, released when the interpreter drops a value after its last use), replayed from the storages
each node's value holds.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

__all__ = [
    "MEMORY_FUNCTIONS",
    "DeviceTimer",
    "LiveTensors",
    "MemoryProbe",
    "NullTimer",
    "PerfCounterTimer",
    "StorageEntries",
    "Timer",
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


def make_timer(device: torch.device) -> Timer:
    """The right timer for tensors on ``device``."""
    if device.type == "meta":
        return NullTimer()
    if device.type == "cpu":
        return PerfCounterTimer()
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
        fn = getattr(torch.cuda, mem_func_name)
        index = device.index if device.index is not None else torch.cuda.current_device()
        return MemoryProbe(f"cuda.{mem_func_name}", read=lambda: int(fn(index)))
    return MemoryProbe("live_tensors", model_storages=model_storages)


def input_device(inputs: Any, model: torch.nn.Module) -> torch.device:
    """Where a run happens: the first input tensor's device, else the model's, else the CPU."""
    for t in tensors_of(inputs):
        return t.device
    for t in itertools.chain(model.parameters(), model.buffers()):
        return t.device
    return torch.device("cpu")


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

    __slots__ = ("_by_value", "_excluded", "_held", "_kept", "bytes")

    def __init__(self, excluded_keys: frozenset[int] = frozenset(), kept_keys: frozenset[int] = frozenset()) -> None:
        self.bytes = 0
        self._held: dict[int, int] = {}  # storage key -> how many live values hold it
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
        held = self._held
        for pair in pairs:  # type: ignore[union-attr]
            skey, nbytes = pair  # type: ignore[misc]
            if skey in self._excluded:
                continue
            count = held.get(skey)
            if count is None:
                held[skey] = 2 if skey in self._kept else 1
                self.bytes += nbytes
            else:
                held[skey] = count + 1
            kept.append(pair)
        if kept:
            self._by_value[key] = tuple(kept)

    def release(self, key: Any) -> None:
        pairs = self._by_value.pop(key, None)
        if pairs is None:
            return
        held = self._held
        for skey, nbytes in ((pairs,) if type(pairs[0]) is int else pairs):
            count = held[skey] - 1
            if count:
                held[skey] = count
            else:
                del held[skey]
                self.bytes -= nbytes

    def timeline(self, entries: Sequence[StorageEntries],
                 frees: Sequence[Iterable[int]]) -> tuple[list[int], list[int]]:
        """Replay a run: node ``i`` holds ``entries[i]``, then the values ``frees[i]`` are released.
        Returns the live bytes before and after every node. (The :meth:`hold` / :meth:`release`
        steps, inlined for the common case of a node holding one tensor: this runs once per node
        of every profile.)"""
        before: list[int] = []
        after: list[int] = []
        held, by_value, excluded, first = self._held, self._by_value, self._excluded, 2 if self._kept else 1
        kept = self._kept
        live = self.bytes
        for i, value in enumerate(entries):
            before.append(live)
            if value is not None:
                if type(value[0]) is int:  # one storage: (key, nbytes), kept as it is
                    skey = value[0]
                    if skey not in excluded:
                        count = held.get(skey)
                        if count is None:
                            held[skey] = first if skey in kept else 1
                            live += value[1]  # type: ignore[misc]
                        else:
                            held[skey] = count + 1
                        by_value[i] = value
                else:
                    self.bytes = live
                    self.hold(i, value)
                    live = self.bytes
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
                        live -= pairs[1]
                else:
                    self.bytes = live
                    by_value[dead] = pairs
                    self.release(dead)
                    live = self.bytes
        self.bytes = live
        return before, after

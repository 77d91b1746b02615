"""Measuring one node, and what a run measured (the run layer's data).

:class:`NodeMeasurer` is the one place that measures a node once it has run: its output's shape,
bytes and storages, its compute dtype, a gather's or scatter's traffic and its FLOPs (through
:func:`torch_flops.formulas.evaluate`). The graph interpreter (:mod:`torch_flops.interpreter`) and
the eager recorder (:mod:`torch_flops.recorder`) both fill its per-node lists. What a run measured is
frozen into a :class:`GraphRun` per graph execution and a :class:`Measurements` per profile, built
by :meth:`Measurements.of` only; :class:`~torch_flops.records.Profile` turns them into records.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import fx

from torch_flops.backward import BackwardRun, SequenceMap
from torch_flops.comm import comm_bytes, is_dtensor_value, local_value
from torch_flops.errors import UnsupportedOpError, UnsupportedOpWarning, add_note, caller_stacklevel
from torch_flops.formulas import evaluate
from torch_flops.measure import (
    LiveTensors,
    MemoryProbe,
    StorageEntries,
    Timer,
    storage_entries,
    storage_key,
    tensor_nbytes,
    tensors_of,
)
from torch_flops.plan import NodeKind, NodeRef, Plan, Traffic

__all__ = ["GraphRun", "Measurements", "NodeMeasurer", "add_note", "describe_inputs", "median", "node_traffic", "output_shape",
           "traffic_table"]

_COUNTED = NodeKind.COUNTED
_COMMUNICATION = NodeKind.COMMUNICATION
_FLOATS = frozenset({torch.float32, torch.float16, torch.bfloat16, torch.float64})  # the usual compute dtypes
_DEFAULT, _INPLACE, _OVERWRITE, _GATHER, _SCATTER, _CREATE = range(6)
_TRAFFIC_MODES = {Traffic.DEFAULT: _DEFAULT, Traffic.INPLACE: _INPLACE, Traffic.OVERWRITE: _OVERWRITE,
                  Traffic.GATHER: _GATHER, Traffic.SCATTER: _SCATTER, Traffic.CREATE: _CREATE, Traffic.NONE: -1}
_UNSEEN: tuple[Any, int, StorageEntries, torch.dtype | None] = (None, 0, None, None)  # a node that did not run


def median(values: Sequence[float | None]) -> float | None:
    """The median of the values that are not None (None when there are none)."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def medians(runs: Sequence[Sequence[float | None]]) -> list[float | None]:
    """Per position, the median over several runs' lists (one run: its list)."""
    if len(runs) == 1:
        return list(runs[0])
    return [median(column) for column in zip(*runs)]


@dataclass(frozen=True, eq=False)
class GraphRun:
    """What was measured for every node of one planned graph, in graph order (index = position)."""

    #: the plan (an eager recording builds it when the records are first read: see :attr:`plan`)
    plan_of: Callable[[], Plan] = field(repr=False)
    graph: int  #: which graph of the capture ran (a graph may run several times in one forward)
    flops: Sequence[int | None]  #: None where no formula counted the node
    macs: Sequence[int | None]
    dot_outputs: Sequence[int | None]  #: see formulas.Count; None where the formula did not say
    mm_macs: Sequence[int | None]
    time_ms: Sequence[float | None]  #: median over the timed runs; None where nothing was timed
    shapes: Sequence[Any]  #: the output's shape (nested for tuple/dict outputs)
    dtypes: Sequence[torch.dtype | None]  #: the dtype the node computes in (see _compute_dtype)
    errors: Mapping[int, str]  #: position -> why the node's formula failed
    skipped: Mapping[int, str]  #: position -> why the node was not run (meta only)
    #: computes (bytes read, bytes written) per node (see :func:`node_traffic`) and the memory
    #: before and after every node (bytes, see ``Measurements.memory_source``); each is called
    #: once, when the records are built, so a ``propagate`` whose records are never read does not
    #: pay for them
    traffic: Callable[[], tuple[list[int], list[int]]] = field(repr=False, default=lambda: ([], []))
    memory: Callable[[], tuple[list[int | None], list[int | None]]] = field(repr=False, default=lambda: ([], []))
    #: computes the peak of the live tensor bytes made during the run: the replay of :attr:`memory`
    #: without the storages of its inputs and of the tensors it read that were made before it (a
    #: decode step's cache); None with the allocator's readings (CUDA), which say nothing of storages
    made_peak: Callable[[], int | None] = field(repr=False, default=lambda: None)
    #: what the backward of this run did per node (torch_flops.backward), and its times per node
    #: (medians over the timed runs); None when no backward ran
    backward: BackwardRun | None = None
    backward_times: Sequence[float | None] | None = None
    unattributed_time_ms: float | None = None  #: of the backward's work no forward node caused
    backward_comm_time_ms: float | None = None  #: of the backward's collectives
    #: ``flops``/``macs`` already hold the plan's fills (0 or None) for nodes no formula counted
    filled: bool = False
    #: per node: a collective's bytes (None elsewhere); an op on DTensors' logical work (None
    #: elsewhere); None when the run had neither
    comm_bytes: Sequence[int | None] | None = None
    global_flops: Sequence[int | None] | None = None
    global_macs: Sequence[int | None] | None = None
    #: per node, the phase it ran in ("forward", "loss", "optimizer": torch_flops.session); None:
    #: every node is the forward's
    phases: Sequence[str] | None = None
    #: whether a node may lack a count (no formula, or one failed): when False, finding the
    #: unsupported nodes needs no plan (an eager recording builds its plan when first read)
    maybe_unsupported: bool = True

    @functools.cached_property
    def plan(self) -> Plan:
        return self.plan_of()

    def with_backward(self, run: BackwardRun, timer: Timer,
                      times: Sequence[float | None] | None = None) -> GraphRun:
        """This run with the backward that followed it (``times``: per node, the medians over several
        steps; by default ``run``'s own)."""
        return dataclasses.replace(
            self, backward=run, backward_times=run.times(timer) if times is None else times,
            unattributed_time_ms=run.unattributed_time(timer), backward_comm_time_ms=run.comm_time(timer))

    @functools.cached_property
    def _bytes(self) -> tuple[list[int], list[int]]:
        return self.traffic()

    @functools.cached_property
    def _memory(self) -> tuple[list[int | None], list[int | None]]:
        return self.memory()

    @property
    def mem_before(self) -> Sequence[int | None]:
        return self._memory[0]

    @property
    def mem_after(self) -> Sequence[int | None]:
        return self._memory[1]

    @property
    def bytes_read(self) -> Sequence[int]:
        """Bytes each node read (see :func:`node_traffic`)."""
        return self._bytes[0]

    @property
    def bytes_written(self) -> Sequence[int]:
        return self._bytes[1]


@dataclass(frozen=True, eq=False)
class Measurements:
    """Everything one profile measured: one :class:`GraphRun` per graph execution, in order. Made
    by :meth:`of` only."""

    runs: tuple[GraphRun, ...]
    device: str
    memory_source: str
    #: the accelerator's own name ("NVIDIA H100 80GB HBM3"), for recognising it in hardware specs
    device_name: str = ""
    #: per timed call, the time of its nodes (the model's own work, forward and backward), summed:
    #: the spread of the latency over ``repeat`` calls; empty when untimed or timed once
    run_times_ms: tuple[float, ...] = ()

    @classmethod
    def of(cls, runs: Sequence[GraphRun], device: torch.device, memory_source: str,
           run_times_ms: Sequence[float] = ()) -> Measurements:
        """The measurements of ``runs`` on ``device`` (its accelerator's name read here)."""
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
        return cls(runs=tuple(runs), device=str(device), memory_source=memory_source, device_name=name,
                   run_times_ms=tuple(run_times_ms))

    def warn_unsupported(self, warned: set[str]) -> None:
        """One :class:`UnsupportedOpWarning` per target without a count not in ``warned`` (which it
        joins), at the user's line."""
        for target, nodes in self.unsupported().items():
            if target in warned:
                continue
            warned.add(target)
            listed = ", ".join(name for name, _ in nodes[:5]) + (", ..." if len(nodes) > 5 else "")
            warnings.warn(
                f"torch_flops: no FLOPs formula for {target} ({len(nodes)} node(s): {listed}; {nodes[0][1]}); "
                "these nodes are excluded from the totals. Register one with torch_flops.register_function/"
                "register_method/register_module/register_aten, or pass ignore_ops / strict=True.",
                UnsupportedOpWarning, stacklevel=caller_stacklevel(through_torch=True))
        for op, why in self.backward_unsupported().items():
            if f"backward {op}" in warned:
                continue
            warned.add(f"backward {op}")
            warnings.warn(
                f"torch_flops: {why} in the backward; those ops are excluded from the backward totals. Register "
                "a formula with torch_flops.register_aten, or pass strict=True.",
                UnsupportedOpWarning, stacklevel=caller_stacklevel(through_torch=True))

    def backward_unsupported(self) -> dict[str, str]:
        """The backward's aten ops without a count (no formula, or a formula that failed) -> why."""
        found: dict[str, str] = {}
        for graph_run in self.runs:
            run = graph_run.backward
            if run is None:
                continue
            for op, n in run.unsupported.items():
                found.setdefault(op, f"no FLOPs formula for {op} ({n} op(s))")
            for op, message in run.errors.items():
                found.setdefault(op, f"the formula for {op} failed ({message})")
        return found

    def unsupported(self) -> dict[str, list[tuple[str, str]]]:
        """Readable target -> ``(node name, why)`` for nodes without a count (no formula, or a
        formula that failed), in execution order."""
        found: dict[str, list[tuple[str, str]]] = {}
        for graph_run in self.runs:
            errors = graph_run.errors
            if not (graph_run.maybe_unsupported or errors):
                continue
            nodes = graph_run.plan.nodes
            missing = [(p.position, f"no formula for {p.key!r}") for p in graph_run.plan.unsupported]
            for i, why in sorted(missing + list(errors.items())):  # execution order
                p = nodes[i]
                found.setdefault(p.target, []).append((p.node.name, why))
        return found


class NodeMeasurer:
    """The per-node measurements of one counting run, indexed by node position, and the one place
    that measures a node once it has run (:meth:`measure`). Shared by the interpreter and the eager
    recorder, which fill the same lists (the recorder grows them as the model runs).

    ``measure`` reads a node's plan through the attributes :class:`~torch_flops.plan.NodePlan` and
    the recorder's per-target plans share: ``kind``, ``formula``, ``module``, ``holds``,
    ``param_dtype``, ``indexed``, ``traffic``, ``key``, ``target``."""

    _timer: Timer
    _memory: MemoryProbe
    _strict: bool
    #: storages autograd keeps for the backward (a training step): live to the end of the replay
    kept_storages: frozenset[int] = frozenset()
    #: with a backward to follow: which node made each autograd node (torch_flops.backward)
    sequences: SequenceMap | None = None

    def reset(self, n: int, fills: list[int | None] | None = None) -> None:
        """Fresh per-node lists for ``n`` nodes (the recorder starts at 0 and grows); ``fills``: the
        plan's FLOPs of the nodes no formula counts (``RecordColumns.fills``), so that the records
        take the run's lists as they are."""
        self.flops: list[int | None] = [None] * n if fills is None else list(fills)
        self.macs: list[int | None] = [None] * n if fills is None else list(fills)
        self.filled = fills is not None
        self._dots: dict[int, tuple[int | None, int | None]] = {}  #: position -> (dot outputs, mm MACs)
        self._starts: list[Any] = [None] * n
        self._ends: list[Any] = [None] * n
        self._mem_before: list[int | None] = [None] * n
        self._mem_after: list[int | None] = [None] * n
        #: (output shape, bytes, storages, compute dtype) per node of the counting run; split into
        #: the lists below when it ends (one store per node while it runs)
        self._seen: list[tuple[Any, int, StorageEntries, torch.dtype | None]] = [_UNSEEN] * n
        self.shapes: list[Any] = [None] * n
        self.dtypes: list[torch.dtype | None] = [None] * n
        #: storages behind each node's value, captured during the counting run (live-tensor memory)
        self._storages: list[StorageEntries] = [None] * n
        #: bytes of the tensors each node's value holds (as views: numel * element size)
        self._out_bytes: list[int] = [0] * n
        #: (bytes read, bytes written) of the gathers and scatters, from their operands
        self._moved: dict[int, tuple[int, int]] = {}
        self.errors: dict[int, str] = {}
        self._comm: dict[int, int] = {}  #: position -> a collective's bytes
        self._global: dict[int, tuple[int, int]] = {}  #: position -> an op on DTensors' (global FLOPs, MACs)
        self.formula_exceptions: dict[int, Exception] = {}  # what each failed formula raised
        #: nodes not run (meta tensors cannot run data-dependent ops such as item() or nonzero);
        #: only allowed for nodes the output does not depend on
        self.skipped: dict[int, str] = {}

    def split_seen(self) -> None:
        """After a counting run: the shapes, bytes, storages and dtypes as lists."""
        if self._seen:
            shapes, out_bytes, storages, dtypes = map(list, zip(*self._seen))
            self.shapes, self._out_bytes, self._storages, self.dtypes = shapes, out_bytes, storages, dtypes

    def times(self) -> list[float | None]:
        """The last run's time per node (after the run waited for the device)."""
        elapsed = self._timer.elapsed_ms
        return [elapsed(s, e) if s is not None else None for s, e in zip(self._starts, self._ends)]

    def memory(self, plan: Callable[[], Plan], frees: Sequence[Sequence[int]] | Callable[[], Sequence[Sequence[int]]]
               ) -> tuple[Callable[[], tuple[list[int | None], list[int | None]]], Callable[[], int | None]]:
        """What gives the bytes before and after every node of the counting run (the allocator's
        readings, or the live tensor bytes replayed in node order from the storages each value held;
        ``frees``: each node's last uses, or what gives them), and what gives the peak of the live
        tensor bytes the run made itself (:attr:`GraphRun.made_peak`: the same replay, counting
        neither the storages of the placeholders nor those of the tensors read as attributes or
        constants, made before the run, as the model's own are not counted). One replay gives both."""
        if self._memory.read is not None:
            readings = (self._mem_before, self._mem_after)
            return (lambda: readings), (lambda: None)
        storages, model, kept = self._storages, self._memory.model_storages, self.kept_storages
        done: list[Any] = []

        def replay() -> Any:
            if not done:
                outside: set[int] = set()
                for p, entries in zip(plan().nodes, storages):
                    if entries is not None and p.node.op in ("placeholder", "get_attr"):
                        pairs: Any = (entries,) if type(entries[0]) is int else entries
                        outside.update(key for key, _ in pairs)
                live = LiveTensors(model, kept, frozenset(outside))
                before, after = live.timeline(storages, frees() if callable(frees) else frees)
                done.append(((before, after), live.made_peak))
            return done[0]

        return (lambda: replay()[0]), (lambda: replay()[1])

    def traffic(self, table: Callable[[], _TrafficTable]) -> Callable[[], tuple[list[int], list[int]]]:
        """What computes the counting run's bytes read and written per node (:func:`node_traffic`)
        from the sizes and storages it saw; each run gets fresh lists, so it stays valid."""
        n, out_bytes, storages, shapes = len(self.shapes), self._out_bytes, self._storages, self.shapes
        skipped, moved = dict(self.skipped), self._moved
        return lambda: node_traffic(table(), n, out_bytes, storages, shapes, skipped, moved)

    def graph_run(self, plan: Callable[[], Plan], graph: int, times: Sequence[float | None],
                  table: Callable[[], _TrafficTable], frees: Sequence[Sequence[int]] | Callable[[], Any],
                  phases: Sequence[str] | None = None, maybe_unsupported: bool = True) -> GraphRun:
        """What the counting run measured, frozen (``times``: the medians over the timed runs)."""
        n = len(self.flops)
        dot_outputs: list[int | None] = [None] * n
        mm_macs: list[int | None] = [None] * n
        for i, (d, m) in self._dots.items():
            dot_outputs[i], mm_macs[i] = d, m
        memory, made_peak = self.memory(plan, frees)
        return GraphRun(
            plan_of=plan, graph=graph, flops=self.flops, macs=self.macs, dot_outputs=dot_outputs, mm_macs=mm_macs,
            time_ms=times, shapes=self.shapes, dtypes=self.dtypes, errors=dict(self.errors),
            skipped=dict(self.skipped), traffic=self.traffic(table), memory=memory, made_peak=made_peak,
            filled=self.filled, comm_bytes=_sparse(self._comm, n),
            global_flops=_sparse({k: v[0] for k, v in self._global.items()}, n),
            global_macs=_sparse({k: v[1] for k, v in self._global.items()}, n), phases=phases,
            maybe_unsupported=maybe_unsupported,
        )

    def measure(self, i: int, plan: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        """Record what node ``i`` (planned by ``plan``) did on the counting run, from its arguments
        and output."""
        # the bytes the value holds: numel * element size, but never more than its storage (an
        # expanded view, a broadcast bias, has fewer bytes behind it than elements)
        shape: Any
        dtype: torch.dtype | None
        if type(out) is torch.Tensor:
            try:
                shape = out.shape
            except RuntimeError:  # a strided nested tensor has no sizes: its components' (no cost when it has)
                shape = output_shape(out)
            nbytes = out.nbytes if out.layout is torch.strided else tensor_nbytes(out)  # sparse: no nbytes
            entries: StorageEntries = None
            if plan.holds:
                try:  # storage_key(out), inlined: this runs for every node
                    storage = out.untyped_storage()
                    entries = (storage._cdata, storage.nbytes())
                except (RuntimeError, NotImplementedError):
                    entries = storage_key(out)
                nbytes = min(nbytes, entries[1])
        else:
            shape = output_shape(out)
            nbytes = sum(min(tensor_nbytes(t), key[1]) for t in tensors_of(out) for key in (storage_key(t),))
            entries = storage_entries(out) if plan.holds else None
        first = args[0] if args else None
        if type(first) is torch.Tensor and first.dtype in _FLOATS:  # most nodes: no call
            dtype = first.dtype
        else:
            dtype = _compute_dtype(args, out, plan.param_dtype)
        if plan.indexed:
            self._moved[i] = _indexed_traffic(plan, args, kwargs, out)
        kind = plan.kind
        if kind is _COUNTED:
            try:
                flops, macs, dots, mm = evaluate(plan.formula, plan.module, out, args, kwargs)
                if _peek_transform() is not None:  # inside torch.vmap/grad (torch.func): rare
                    # (a module's own weights may be the batched ones: a vmap ensemble's functional_call)
                    module = plan.module
                    copies = vmap_copies((args, kwargs) if module is None else
                                         (args, kwargs, [*module.parameters(), *module.buffers()]))
                    if copies != 1:
                        flops, macs = flops * copies, macs * copies
                        dots, mm = (None if v is None else v * copies for v in (dots, mm))
                        if macs and mm == 0:  # a matrix-vector product or dot, batched: an mm/bmm kernel
                            mm = macs
                self.flops[i], self.macs[i] = flops, macs
                if dots is not None or mm is not None:
                    self._dots[i] = (dots, mm)
                if macs and type(out) is torch.Tensor:
                    # a dot product computes in its narrowest float: bf16 under autocast from fp32
                    # inputs (a bf16 output), fp8 for fp8 inputs with a bf16 output
                    od = out.dtype
                    if od is not dtype and od in _FLOATS and dtype is not None and od.itemsize < dtype.itemsize:
                        dtype = od
                if type(out) is not torch.Tensor and is_dtensor_value(out):
                    self._local_work(i, plan, out, args, kwargs, mm)
            except Exception as e:  # noqa: BLE001  (a broken formula marks its node unsupported, never stops the run)
                self._formula_failed(i, plan, e)
        elif kind is _COMMUNICATION:
            self._comm[i] = comm_bytes(plan.call_target, args, kwargs, out)
        self._seen[i] = (shape, nbytes, entries, dtype)

    def _local_work(self, i: int, plan: Any, out: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                    global_mm: int | None) -> None:
        """An op on DTensors: what the formula counted on their (global) shapes is the logical
        op's work; this rank's is the same formula on the local shards. The MACs FlopCounterMode
        counts (``mm_macs``, the ``flop_counter`` convention) stay the logical op's: it counts the
        DTensor op, not the local kernels DTensor runs for it (``global_mm``; None: all its MACs)."""
        global_macs = self.macs[i]
        self._global[i] = (self.flops[i], global_macs)  # type: ignore[assignment]
        flops, macs, dots, _ = evaluate(plan.formula, plan.module, local_value(out), local_value(args),
                                        local_value(kwargs))
        self.flops[i], self.macs[i] = flops, macs
        self._dots[i] = (dots, global_macs if global_mm is None else global_mm)

    def node_name(self, i: int) -> str:
        """The name of node ``i`` (for messages)."""
        return f"#{i}"

    def _formula_failed(self, i: int, plan: Any, e: Exception) -> None:
        formula = plan.formula
        message = f"formula {getattr(formula, '__qualname__', formula)} failed: {type(e).__name__}: {e}"
        if self._strict:
            raise UnsupportedOpError(f"node '{self.node_name(i)}' ({plan.target}): {message}") from e
        self.errors[i] = message
        self.formula_exceptions[i] = e


_peek_transform = torch._C._functorch.peek_interpreter_stack  # None outside every torch.func transform


def vmap_copies(values: Any) -> int:
    """How many times an op runs whose inputs are ``values``, seen under ``torch.vmap``: a function
    called inside vmap sees each tensor's per-example view (a batched tensor), and the op runs once
    per example of every vmap level one of its inputs is batched at, so its count is the
    per-example count times the product of those levels' batch sizes (1 outside vmap)."""
    functorch = torch._C._functorch
    sizes: dict[int, int] = {}
    for t in tensors_of(values):
        while functorch.is_functorch_wrapped_tensor(t):  # a vmap level's batched tensor, or grad's wrapper
            if functorch.is_batchedtensor(t):
                inner = functorch.get_unwrapped(t)
                sizes[functorch.maybe_get_level(t)] = inner.shape[functorch.maybe_get_bdim(t)]
                t = inner
            else:
                t = functorch.get_unwrapped(t)
    copies = 1
    for size in sizes.values():
        copies *= size
    return copies


def _sparse(values: dict[int, int], n: int) -> list[int | None] | None:
    """A per-node list from the few nodes that have a value (None when none has)."""
    if not values:
        return None
    column: list[int | None] = [None] * n
    for k, v in values.items():
        column[k] = v
    return column


class _TrafficTable(NamedTuple):
    #: counted nodes of the default kind (most nodes): (position, input positions, parameter
    #: bytes, first input's position or -1)
    plain: list[tuple[int, tuple[int, ...], int, int]]
    #: the rest: (position, mode, inputs, parameter bytes, may alias an input, x[i] = v's value position)
    other: list[tuple[int, int, tuple[int, ...], int, bool, int]]


def traffic_table(plan: Plan) -> _TrafficTable:
    """The plan's nodes that can move bytes, by how (``plan.Traffic``)."""
    table = _TrafficTable([], [])
    by_node = plan.by_node
    for p in plan.nodes:
        traffic = p.traffic
        if traffic is Traffic.NONE:
            continue
        if traffic is Traffic.DEFAULT and p.kind is _COUNTED:
            table.plain.append((p.position, p.inputs, p.param_bytes, p.inputs[0] if p.inputs else -1))
            continue
        value = p.node.args[-1] if p.node.args else None
        if isinstance(value, NodeRef):  # a recorded graph's reference to another node's value
            source = value.position
        else:
            source = by_node[value].position if isinstance(value, fx.Node) and value in by_node else -1
        table.other.append((p.position, _TRAFFIC_MODES[traffic], p.inputs, p.param_bytes,
                            traffic is not Traffic.INPLACE and p.kind is not _COUNTED, source))
    return table


def node_traffic(table: _TrafficTable, n: int, out_bytes: Sequence[int], storages: Sequence[StorageEntries],
                 shapes: Sequence[Any], skipped: Mapping[int, str],
                 moved: Mapping[int, tuple[int, int]]) -> tuple[list[int], list[int]]:
    """Bytes each node of a counting run read and wrote (see ``plan.Traffic``): a node reads its
    inputs' tensors (each input once, and a module's own parameters and buffers) and writes its
    output; a view or alias (a 0-FLOP node whose output shares an input's storage) moves nothing;
    an in-place update reads its inputs and writes its tensor; an overwrite (``copy_``, ``fill_``,
    ``x[i] = v``) reads only its other operands; a gather reads only what it gathers (its output)
    and its indices, a scatter its indices and source (``moved``, counted as it ran); a creation
    op only writes; a counted op that returns its input (dropout in eval) moves nothing; nodes
    that did not run, or made nothing, move nothing."""
    read, written = [0] * n, [0] * n
    size = out_bytes.__getitem__
    for i, inputs, param_bytes, first in table.plain:
        made = out_bytes[i]
        if (made or shapes[i] is not None) and (first < 0 or storages[i] is None or storages[i] != storages[first]):
            read[i] = sum(map(size, inputs)) + param_bytes
            written[i] = made
    for i, mode, inputs, param_bytes, may_alias, value in table.other:
        if mode == _SCATTER:
            read[i], written[i] = moved.get(i, (0, 0))
            continue
        if mode == _OVERWRITE:
            read[i] = sum(map(size, inputs[1:]))
            # copy_/fill_ write the tensor; x[i] = v (no output) writes v's bytes, 0 for a number
            written[i] = out_bytes[i] if shapes[i] is not None else (out_bytes[value] if value >= 0 else 0)
            continue
        made = out_bytes[i]
        if not made and shapes[i] is None:
            continue
        if may_alias and _aliases(storages[i], [storages[j] for j in inputs]):
            continue  # a view of, or the very tensor of, an input
        if mode == _GATHER:
            read[i], written[i] = moved.get(i, (made, made))
            continue
        if mode != _CREATE:
            read[i] = sum(map(size, inputs)) + param_bytes
        written[i] = made
    for i in skipped:
        read[i] = written[i] = 0
    return read, written


_ACCUMULATING = frozenset({"index_add_", "scatter_add_", "scatter_reduce_", "index_reduce_"})


def _indexed_traffic(plan: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> tuple[int, int]:
    """(bytes read, bytes written) of a gather or a scatter, from its operands as it ran.

    A gather reads the rows it gathers (its output's bytes) and its integer (or bool) index
    operands in full; it writes its output. A scatter (``index_copy_``, ``index_put_``...) reads
    its index operands and its source and writes the source's elements into the tensor (a scalar
    source: one element per index); an accumulating one (``index_add_``, ``index_put_(...,
    accumulate=True)``) also reads the elements it updates."""
    scatter = plan.traffic is Traffic.SCATTER
    operands = tensors_of((args[1:], kwargs)) if scatter else tensors_of((args, kwargs))
    index = sum(tensor_nbytes(t) for t in operands if not (t.is_floating_point() or t.is_complex()))
    if not scatter:
        made = sum(tensor_nbytes(t) for t in tensors_of(out))
        return made + index, made
    dest = args[0] if args and isinstance(args[0], torch.Tensor) else None
    sources = [t for t in operands if t.is_floating_point() or t.is_complex()]
    source_bytes = sum(tensor_nbytes(t) for t in sources)
    if dest is None:
        return index + source_bytes, 0
    if sources:
        written = sum(t.numel() for t in sources) * dest.element_size()
    else:  # a number: one element per index entry
        written = max((t.numel() for t in operands), default=0) * dest.element_size()
    name = plan.key.rpartition(".")[2]
    accumulate = name in _ACCUMULATING or kwargs.get("accumulate") is True or (
        name in ("index_put_", "_index_put_impl_") and len(args) > 3 and args[3] is True)
    return index + source_bytes + (written if accumulate else 0), written


def output_shape(value: Any) -> tuple[Any, ...] | None:
    """A tensor's shape; nested tuples for tuple/list/dict outputs; None for no tensor."""
    if isinstance(value, torch.Tensor):
        if value.is_nested and value.layout is torch.strided:  # no sizes of its own: its components'
            return tuple(tuple(c.shape) for c in value.unbind())
        return tuple(value.shape)
    if isinstance(value, (tuple, list)):
        shapes = tuple(output_shape(v) for v in value)
        return shapes if any(s is not None for s in shapes) else None
    if isinstance(value, dict):
        return output_shape(tuple(value.values()))
    return None


def _compute_dtype(args: tuple[Any, ...], out: Any, param_dtype: torch.dtype | None) -> torch.dtype | None:
    """The dtype a node computes in: its first floating (or complex) tensor argument's, else its
    module's first floating parameter's (an embedding looks up floats by integer ids), else its
    first tensor argument's, else its output's. So fp8 in, bf16 out is an fp8 matmul, a comparison
    of floats computes in float, and a cast computes in the dtype it reads."""
    first = None
    for a in args:
        if isinstance(a, torch.Tensor):  # an nn.Parameter too (F.embedding's weight)
            if a.is_floating_point() or a.is_complex():
                return a.dtype
            if first is None:
                first = a.dtype
    if param_dtype is not None:
        return param_dtype
    if first is not None:
        return first
    if type(out) is torch.Tensor:
        return out.dtype
    if out is None or isinstance(out, (int, float, bool, str)):
        return None
    tensors = tensors_of(out)
    return tensors[0].dtype if tensors else None


def _aliases(own: StorageEntries, inputs: Any) -> bool:
    """Whether a value's storages are all among its inputs' (a view, or the input itself)."""
    if own is None:
        return True
    keys = {own[0]} if type(own[0]) is int else {k for k, _ in own}  # type: ignore[union-attr,misc]
    seen: set[int] = set()
    for entries in inputs:
        if entries is not None:
            seen.update((entries[0],) if type(entries[0]) is int else (k for k, _ in entries))  # type: ignore[union-attr,misc]
    return keys <= seen


def describe_inputs(args: Any) -> str:
    shapes = []
    for a in args:
        if isinstance(a, torch.Tensor):
            shapes.append(f"{tuple(a.shape)} {str(a.dtype).replace('torch.', '')} on {a.device}")
        elif isinstance(a, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in a):
            shapes.append("[" + ", ".join(str(tuple(x.shape)) for x in a if isinstance(x, torch.Tensor)) + "]")
        else:
            shapes.append(repr(a) if len(repr(a)) < 40 else type(a).__name__)
    return ", ".join(shapes)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__

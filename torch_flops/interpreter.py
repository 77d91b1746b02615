"""Run: execute a planned graph node by node on real (or meta) tensors, measuring every node.

:meth:`Runner.run` (or :func:`run` for a one-off) owns the runs of one ``propagate``: ``warmup``
untimed runs, the counting run (FLOPs, memory, shapes, dtypes and time of every node),
``repeat - 1`` more timed runs, one device synchronisation per run and the median time per node.
It returns the model's output and frozen :class:`Measurements`. A :class:`Runner` keeps one
:class:`FlopsInterpreter` per plan, so fx's per-graph setup is paid once, not per call; runs of
one runner are serialised by a lock. :class:`FlopsInterpreter` overrides
``fx.Interpreter.run_node`` only and passes every ``call_*`` result on untouched, so the graph
computes exactly what the model does.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import fx, nn

from torch_flops.backward import BackwardRun, SequenceMap
from torch_flops.distributed import comm_bytes, is_dtensor_value, local_value
from torch_flops.errors import NodeExecutionError, UnsupportedOpError
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
from torch_flops.plan import FlatArgs, NodeKind, NodePlan, Plan, Traffic
from torch_flops.progress import Progress
from torch_flops.state import ExtraRuns, copy_inputs

__all__ = ["FlopsInterpreter", "GraphRun", "Measurements", "Runner", "run"]

_COUNTED = NodeKind.COUNTED
_COMMUNICATION = NodeKind.COMMUNICATION
_FLOATS = frozenset({torch.float32, torch.float16, torch.bfloat16, torch.float64})  # the usual compute dtypes
_DEFAULT, _INPLACE, _OVERWRITE, _GATHER, _SCATTER, _CREATE = range(6)
_TRAFFIC_MODES = {Traffic.DEFAULT: _DEFAULT, Traffic.INPLACE: _INPLACE, Traffic.OVERWRITE: _OVERWRITE,
                  Traffic.GATHER: _GATHER, Traffic.SCATTER: _SCATTER, Traffic.CREATE: _CREATE, Traffic.NONE: -1}
_NODES, _NODES_AND_CONSTANTS = FlatArgs.NODES, FlatArgs.NODES_AND_CONSTANTS
_UNSEEN: tuple[Any, int, StorageEntries, torch.dtype | None] = (None, 0, None, None)  # a node that did not run


@dataclass(frozen=True, eq=False)
class GraphRun:
    """What was measured for every node of one planned graph, in graph order (index = position)."""

    plan: Plan
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
    """Everything one ``propagate`` measured: one :class:`GraphRun` per graph execution, in order."""

    runs: tuple[GraphRun, ...]
    device: str
    memory_source: str
    #: the accelerator's own name ("NVIDIA H100 80GB HBM3"), for recognising it in hardware specs
    device_name: str = ""

    def unsupported(self) -> dict[str, list[tuple[str, str]]]:
        """Readable target -> ``(node name, why)`` for nodes without a count (no formula, or a
        formula that failed), in execution order."""
        found: dict[str, list[tuple[str, str]]] = {}
        for graph_run in self.runs:
            errors = graph_run.errors
            for p in graph_run.plan.nodes:
                if p.kind is NodeKind.UNSUPPORTED:
                    found.setdefault(p.target, []).append((p.node.name, f"no formula for {p.key!r}"))
                elif p.position in errors:
                    found.setdefault(p.target, []).append((p.node.name, errors[p.position]))
        return found


class Runner:
    """Runs one plan as often as asked, measuring every node (see the module docstring)."""

    def __init__(self, plan: Plan, graph: int = 0) -> None:
        self.plan = plan
        self.graph = graph  #: the plan's graph's index in its capture
        self._interpreter = FlopsInterpreter(plan)
        self._lock = threading.Lock()

    def run(self, inputs: Sequence[Any], *, device: torch.device, warmup: int, repeat: int, timer: Timer,
            memory: MemoryProbe, strict: bool, progress: Progress | None = None,
            model: nn.Module | None = None, sequences: SequenceMap | None = None) -> tuple[Any, Measurements]:
        """Run the graph on the bound ``inputs`` (its placeholder values): ``warmup`` untimed runs,
        the counting run, ``repeat - 1`` more timed runs (meta tensors: the counting run only);
        ``sequences``: mark the autograd nodes each node of the counting run makes (a backward follows).
        Returns the counting run's output and the measurements (time: the median per node). The
        extra runs get copies of the inputs, and the buffers and RNG state of ``model`` (and of the
        graph) are put back after each (:class:`~torch_flops.state.ExtraRuns`): only the counting
        run leaves its effects, as one eager call would."""
        timed = device.type != "meta"
        warmups, repeats = (warmup, repeat - 1) if timed else (0, 0)
        total = warmups + 1 + repeats
        step = progress.step if progress is not None else (lambda text: None)
        with self._lock:
            interp = self._interpreter
            interp.start(timer, memory, strict, skip_unneeded=not timed)
            holders = (self.plan.graph.graph_module,) if model is None else (model, self.plan.graph.graph_module)
            saved = ExtraRuns(*holders) if warmups else None
            for i in range(warmups):
                step(f"run {i + 1}/{total} (warmup)")
                interp.execute(copy_inputs(list(inputs)), count=False)
                saved.undo()  # type: ignore[union-attr]
            step(f"run {warmups + 1}/{total}")
            interp.sequences = sequences  # (a backward follows the counting run: mark its autograd nodes)
            try:
                output = interp.execute(inputs, count=True)
            finally:
                interp.sequences = None
            runs = [interp.times()]
            saved = ExtraRuns(*holders) if repeats else None
            for i in range(repeats):
                step(f"run {warmups + 2 + i}/{total}")
                interp.execute(copy_inputs(list(inputs)), count=False)
                saved.undo()  # type: ignore[union-attr]
                runs.append(interp.times())
            times = runs[0] if len(runs) == 1 else [median(column) for column in zip(*runs)]
            graph_run = interp.graph_run(self.graph, times, interp.traffic_rows)
        device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
        return output, Measurements(runs=(graph_run,), device=str(device), memory_source=memory.source,
                                    device_name=device_name)


def run(plan: Plan, inputs: Sequence[Any], *, device: torch.device, warmup: int, repeat: int, timer: Timer,
        memory: MemoryProbe, strict: bool) -> tuple[Any, Measurements]:
    """:meth:`Runner.run` of a new runner for ``plan`` (keep a :class:`Runner` to run a plan often)."""
    return Runner(plan).run(inputs, device=device, warmup=warmup, repeat=repeat, timer=timer, memory=memory,
                            strict=strict)


def median(values: Sequence[float | None]) -> float | None:
    """The median of the values that are not None (None when there are none)."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


class NodeMeasurer:
    """The per-node measurements of one counting run, indexed by plan position, and the one place
    that measures a node once it has run (:meth:`measure`): its output's shape, bytes and storages,
    its compute dtype, a gather's or scatter's traffic and its FLOPs. Shared by the interpreter and
    the eager front end (``torch_flops.eager``), which fill the same lists."""

    _plan: Plan
    _timer: Timer
    _memory: MemoryProbe
    _strict: bool
    #: storages autograd keeps for the backward (a training step): live to the end of the replay
    kept_storages: frozenset[int] = frozenset()
    #: with a backward to follow: which node made each autograd node (torch_flops.backward)
    sequences: SequenceMap | None = None

    def reset(self, n: int, fills: list[int | None] | None = None) -> None:
        """Fresh per-node lists for ``n`` nodes (the eager front end starts at 0 and grows);
        ``fills``: the plan's FLOPs of the nodes no formula counts (``RecordColumns.fills``), so
        that the records take the run's lists as they are."""
        self.flops: list[int | None] = [None] * n if fills is None else list(fills)
        self.macs: list[int | None] = [None] * n if fills is None else list(fills)
        self.filled = fills is not None
        self.dot_outputs: list[int | None] = [None] * n
        self.mm_macs: list[int | None] = [None] * n
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

    def grow(self) -> None:
        """One more node (the eager front end adds nodes as the model runs)."""
        for values in (self.flops, self.macs, self.dot_outputs, self.mm_macs, self._starts, self._ends,
                       self._mem_before, self._mem_after):
            values.append(None)
        self._seen.append(_UNSEEN)

    def split_seen(self) -> None:
        """After a counting run: the shapes, bytes, storages and dtypes as lists."""
        if self._seen:
            shapes, out_bytes, storages, dtypes = map(list, zip(*self._seen))
            self.shapes, self._out_bytes, self._storages, self.dtypes = shapes, out_bytes, storages, dtypes

    def times(self) -> list[float | None]:
        """The last run's time per node (after the run waited for the device)."""
        elapsed = self._timer.elapsed_ms
        return [elapsed(s, e) if s is not None else None for s, e in zip(self._starts, self._ends)]

    def memory(self) -> Callable[[], tuple[list[int | None], list[int | None]]]:
        """What gives the bytes before and after every node of the counting run: the allocator's
        readings, or the live tensor bytes replayed in node order from the storages each value held."""
        if self._memory.read is not None:
            readings = (self._mem_before, self._mem_after)
            return lambda: readings
        live = LiveTensors(self._memory.model_storages, self.kept_storages)
        return functools.partial(live.timeline, self._storages, self._plan.frees)  # type: ignore[return-value]

    def traffic(self, table: _TrafficTable) -> Callable[[], tuple[list[int], list[int]]]:
        """What computes the counting run's bytes read and written per node (:func:`node_traffic`)
        from the sizes and storages it saw; each run gets fresh lists, so it stays valid."""
        return functools.partial(node_traffic, table, len(self.shapes), self._out_bytes, self._storages, self.shapes,
                                 dict(self.skipped), self._moved)

    def graph_run(self, graph: int, times: Sequence[float | None], table: _TrafficTable) -> GraphRun:
        """What the counting run measured, frozen (``times``: the medians over the timed runs)."""
        return GraphRun(
            plan=self._plan, graph=graph, flops=self.flops, macs=self.macs, dot_outputs=self.dot_outputs,
            mm_macs=self.mm_macs, time_ms=times, shapes=self.shapes, dtypes=self.dtypes, errors=dict(self.errors),
            skipped=dict(self.skipped), traffic=self.traffic(table), memory=self.memory(),
            filled=self.filled, comm_bytes=_sparse(self._comm, len(self.flops)),
            global_flops=_sparse({k: v[0] for k, v in self._global.items()}, len(self.flops)),
            global_macs=_sparse({k: v[1] for k, v in self._global.items()}, len(self.flops)),
        )

    def measure(self, n: fx.Node, plan: NodePlan, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        """Record what node ``n`` did on the counting run, from its arguments and output."""
        i = plan.position
        # the bytes the value holds: numel * element size, but never more than its storage (an
        # expanded view, a broadcast bias, has fewer bytes behind it than elements)
        shape: Any
        dtype: torch.dtype | None
        if type(out) is torch.Tensor:
            shape = out.shape
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
        if plan.kind is _COUNTED:
            if kwargs and "out" in kwargs:  # an out= tensor is the node's output, never a formula argument
                kwargs = {k: v for k, v in kwargs.items() if k != "out"}
            try:
                result = plan.formula(plan.module, out, *args, **kwargs)  # type: ignore[misc]
                if isinstance(result, tuple):  # (flops, macs[, dot_outputs, mm_macs]), or a formulas.Count
                    flops, macs = result[0], result[1]
                    self.flops[i] = flops if type(flops) is int else int(flops)
                    self.macs[i] = macs if type(macs) is int else int(macs)
                    if len(result) > 2:
                        self.dot_outputs[i], self.mm_macs[i] = result[2], result[3]  # type: ignore[misc]
                    if result[1] and type(out) is torch.Tensor:
                        # a dot product computes in its narrowest float: bf16 under autocast from fp32
                        # inputs (a bf16 output), fp8 for fp8 inputs with a bf16 output
                        od = out.dtype
                        if od is not dtype and od in _FLOATS and dtype is not None and od.itemsize < dtype.itemsize:
                            dtype = od
                else:
                    self.flops[i] = int(result)  # type: ignore[arg-type]
                    self.macs[i] = 0
                if type(out) is not torch.Tensor and is_dtensor_value(out):
                    self._local_work(i, plan, out, args, kwargs)
            except Exception as e:  # noqa: BLE001  (a broken formula marks its node unsupported, never stops the run)
                self._formula_failed(n, plan, e)
        elif plan.kind is _COMMUNICATION:
            self._comm[i] = comm_bytes(plan.node.target, args, kwargs, out)
        self._seen[i] = (shape, nbytes, entries, dtype)

    def _local_work(self, i: int, plan: NodePlan, out: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """An op on DTensors: what the formula counted on their (global) shapes is the logical
        op's work; this rank's is the same formula on the local shards."""
        self._global[i] = (self.flops[i], self.macs[i])  # type: ignore[assignment]
        result = plan.formula(plan.module, local_value(out), *local_value(args), **local_value(kwargs))  # type: ignore[misc]
        if isinstance(result, tuple):
            self.flops[i], self.macs[i] = int(result[0]), int(result[1])
            if len(result) > 2:
                self.dot_outputs[i], self.mm_macs[i] = result[2], result[3]  # type: ignore[misc]
        else:
            self.flops[i], self.macs[i] = int(result), 0  # type: ignore[arg-type]

    def _formula_failed(self, n: fx.Node, plan: NodePlan, e: Exception) -> None:
        formula = plan.formula
        message = f"formula {getattr(formula, '__qualname__', formula)} failed: {type(e).__name__}: {e}"
        if self._strict:
            raise UnsupportedOpError(f"node '{n.name}' ({plan.target}): {message}") from e
        self.errors[plan.position] = message
        self.formula_exceptions[plan.position] = e


def _sparse(values: dict[int, int], n: int) -> list[int | None] | None:
    """A per-node list from the few nodes that have a value (None when none has)."""
    if not values:
        return None
    column: list[int | None] = [None] * n
    for k, v in values.items():
        column[k] = v
    return column


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
        table.other.append((p.position, _TRAFFIC_MODES[traffic], p.inputs, p.param_bytes,
                            traffic is not Traffic.INPLACE and p.kind is not _COUNTED,
                            by_node[value].position if isinstance(value, fx.Node) and value in by_node else -1))
    return table


class FlopsInterpreter(fx.Interpreter, NodeMeasurer):
    """An ``fx.Interpreter`` that measures every node it runs (see :func:`run`).

    A counting run records FLOPs, memory, output shapes, dtypes and time; the other runs record
    time only. Everything measured lives in per-node lists indexed by the node's plan position.
    """

    def __init__(self, plan: Plan) -> None:
        super().__init__(plan.graph.graph_module, garbage_collect_values=True)
        self.extra_traceback = False  # our own error names the node
        self._plans = plan.by_node
        self._plan = plan
        self._count = True
        self.traffic_rows = traffic_table(plan)

    def start(self, timer: Timer, memory: MemoryProbe, strict: bool, skip_unneeded: bool) -> None:
        """Set up the measurements of one ``Runner.run``: fresh per-node lists."""
        self._timer = timer
        self._tick = timer.tick
        self._memory = memory
        self._read_memory = memory.read
        self._strict = strict
        self._skip_unneeded = skip_unneeded
        self.reset(len(self._plan.nodes), self._plan.record_columns.fills)

    def execute(self, inputs: Sequence[Any], count: bool) -> Any:
        """One run of the graph; a counting run also records FLOPs, memory, shapes and dtypes."""
        self._count = count
        try:
            output = self.run(*inputs)
            if count:
                self.split_seen()
            return output
        finally:
            self.env.clear()  # drop the run's last values
            self._timer.finish()

    def run_node(self, n: fx.Node) -> Any:
        # The steps of fx.Interpreter.run_node (fetch args, dispatch on n.op), inlined so that the
        # fetched args also feed the formula without a second fetch. fx's _set_current_node
        # context (metadata for re-tracing through an interpreter) is left out: nothing is traced
        # here, and it cost about 2 us a node.
        plan = self._plans[n]
        i = plan.position
        flat = plan.flat_args
        kwargs: dict[str, Any]
        if flat is _NODES:  # the arguments are earlier nodes' values (and plain constants): fetched directly
            args, kwargs = tuple(map(self.env.__getitem__, n.args)), {}  # type: ignore[arg-type]
        elif flat is _NODES_AND_CONSTANTS:
            env = self.env
            args, kwargs = tuple([env[a] if type(a) is fx.Node else a for a in n.args]), {}
        else:
            args, kwargs = self.fetch_args_kwargs_from_env(n)
        count = self._count
        read = self._read_memory
        if read is not None and count:
            self._mem_before[i] = read()
        tick = self._tick
        start = tick()
        try:
            out = getattr(self, n.op)(n.target, args, kwargs)
        except Exception as e:  # noqa: BLE001  (any op failure is reported with the node that raised it)
            return self._failed(n, plan, args, e)
        end = tick()
        self._starts[i] = start
        self._ends[i] = end
        if not count:
            return out
        # The counting run also records memory, the output shape and dtype, and the node's FLOPs.
        if read is not None:
            self._mem_after[i] = read()
        self.measure(n, plan, args, kwargs, out)
        if self.sequences is not None:  # a backward follows: the autograd nodes made so far are this node's
            self.sequences.close(i)
        return out

    def _failed(self, n: fx.Node, plan: NodePlan, args: tuple[Any, ...], e: Exception) -> None:
        if self._skip_unneeded and not plan.needed:
            self.skipped[plan.position] = f"not run ({type(e).__name__}: {_first_line(e)}); the output does not need it"
            return
        location = plan.location.path
        raise NodeExecutionError(
            f"running node '{n.name}' ({plan.target}{f' in module {location!r}' if location else ''}) failed "
            f"with inputs ({describe_inputs(args)}): {type(e).__name__}: {e}\n"
            f"  node: {n.format_node()}"
        ) from e


class _TrafficTable(NamedTuple):
    #: counted nodes of the default kind (most nodes): (position, input positions, parameter
    #: bytes, first input's position or -1)
    plain: list[tuple[int, tuple[int, ...], int, int]]
    #: the rest: (position, mode, inputs, parameter bytes, may alias an input, x[i] = v's value position)
    other: list[tuple[int, int, tuple[int, ...], int, bool, int]]


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


def _indexed_traffic(plan: NodePlan, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> tuple[int, int]:
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

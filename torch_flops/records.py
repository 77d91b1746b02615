"""Immutable results of one profile: a :class:`NodeRecord` per executed graph node and the
:class:`Profile` that holds them with what is needed to roll them up (module structure,
parameters, settings). Everything here is data; roll-ups are pure functions of the records and
never re-run a model.

Adding a per-node number (bytes moved, backward FLOPs, ...) means: a field on :class:`NodeRecord`
(with a default, at the end), the one place that measures it, :meth:`Profile.from_measurements`
copying it over, and a column in :mod:`torch_flops.report`.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import os
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from torch_flops._gc import gc_paused
from torch_flops._validate import check_choice, check_depth, check_int
from torch_flops.conventions import CONVENTIONS, recount, recount_backward
from torch_flops.paths import ancestors, depth, module_chain
from torch_flops.plan import INTERNAL_TARGETS as _INTERNAL_TARGETS
from torch_flops.plan import Status

if TYPE_CHECKING:
    from torch_flops.measuring import Measurements

__all__ = ["SCHEMA_NAME", "SCHEMA_VERSION", "ModuleStats", "NodeRecord", "OperatorStats", "Profile", "Status",
           "is_internal"]

#: ``"schema"`` and ``"version"`` of :meth:`Profile.to_dict` (the schema is described in :mod:`torch_flops.report`)
SCHEMA_NAME = "torch_flops.profile"
SCHEMA_VERSION = 5

TopBy = Literal["flops", "macs", "params", "time"]
_TOP_BY = ("flops", "macs", "params", "time")
_NON_OPERATOR_OPS = ("placeholder", "get_attr", "output")


class NodeRecord(NamedTuple):
    """What happened at one executed graph node. Immutable; read its fields by name.

    ``flops``/``macs`` are None only for unsupported nodes. ``time_ms`` is None where time is not
    measured (meta tensors). ``mem_*`` are bytes: ``torch.cuda.memory_allocated`` (or the function
    named by ``mem_func_name``) on CUDA, else the profiler's count of live tensor bytes held by the
    graph (inputs and activations; parameters and buffers excluded; a storage shared by views
    counted once); None where not measured.
    """

    index: int  # type: ignore[assignment]  # position in the profile (execution order); shadows tuple.index
    name: str  #: the graph node's name (unique within its graph)
    op: str  #: placeholder, get_attr, call_module, call_function, call_method, output
    target: str  #: readable target: ``Linear``, ``torch.relu``, ``Tensor.view``, ``aten.mm``
    module_path: str  #: innermost module ("" = the root)
    module_type: str
    flops: int | None
    macs: int | None
    status: Status
    time_ms: float | None
    mem_before: int | None
    mem_after: int | None
    mem_delta: int | None
    output_shape: tuple[Any, ...] | None  #: nested for tuple/dict outputs
    #: every enclosing module path, outermost first, ending with ``module_path`` ("" excluded)
    module_stack: tuple[str, ...] = ()
    #: why a node is unsupported (no formula, or the formula's error) or skipped
    note: str = ""
    #: "forward" (later: "backward", "optimizer")
    phase: str = "forward"
    #: the dtype the node computes in, e.g. "bfloat16": its floating point operands' (a cast: its
    #: source's; a module call: its parameters'), else its output's; None without tensors
    dtype: str | None = None
    #: which captured graph the node belongs to (0 for single-graph front ends)
    graph: int = 0
    #: the outputs the node's MACs are summed into (one dot product each); None: unknown
    dot_outputs: int | None = None
    #: of ``macs``, those a matrix-multiply kernel does (what FlopCounterMode counts); None: all
    mm_macs: int | None = None
    #: bytes of the tensors the node reads (its inputs, each once; a module's parameters too) and
    #: writes (its output; in place too); a view moves 0, a gather reads what it gathers
    #: (plan.Traffic); None where not known (records read from older files)
    bytes_read: int | None = None
    bytes_written: int | None = None
    #: the work autograd did for this node's gradients (counted from the backward's own aten ops,
    #: see torch_flops.backward); None when no backward ran. Recompute (activation checkpointing)
    #: is included, and also given apart in ``recompute_*``.
    backward_flops: int | None = None
    backward_macs: int | None = None
    backward_time_ms: float | None = None  #: None also where untimed (meta) or no backward op ran
    recompute_flops: int | None = None
    recompute_macs: int | None = None
    #: bytes of activations this node saved for backward (parameters excluded, a storage once)
    saved_bytes: int | None = None
    #: a collective's bytes this rank sends (torch_flops.comm); None for other nodes
    comm_bytes: int | None = None
    #: an op on DTensors: the logical (unsharded) operation's work; ``flops``/``macs`` are then this
    #: rank's local shard's. None for ops on plain tensors (their work is the rank's own)
    global_flops: int | None = None
    global_macs: int | None = None
    #: after a backward: the bytes of the collectives this node's backward ran (None elsewhere)
    backward_comm_bytes: int | None = None
    #: of ``backward_macs``, those of the matrix-multiply kernels FlopCounterMode counts on this
    #: device (as ``mm_macs`` for the forward); None: all of them (or no backward)
    backward_mm_macs: int | None = None

    @property
    def step_flops(self) -> int | None:
        """Forward + backward FLOPs of the node (``flops`` when no backward ran)."""
        if self.flops is None:
            return None
        return self.flops + (self.backward_flops or 0)

    def as_dict(self) -> dict[str, Any]:
        data = self._asdict()
        data["status"] = self.status.value
        data["output_shape"] = _jsonable_shape(self.output_shape)
        data["module_stack"] = list(self.module_stack)
        return data

    @property
    def module_chain(self) -> tuple[str, ...]:
        """Every module the node runs inside, outermost first, root ("") excluded: ``module_stack``
        with any missing dotted prefix filled in (records from older files may lack them)."""
        return module_chain(self.module_stack or (self.module_path,))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodeRecord:
        """Inverse of :meth:`as_dict` (unknown keys are ignored; fields added since version 1
        take their defaults)."""
        return cls(
            index=int(data["index"]), name=data["name"], op=data["op"], target=data["target"],
            module_path=data["module_path"], module_type=data["module_type"], flops=data["flops"],
            macs=data["macs"], status=Status(data["status"]), time_ms=data["time_ms"],
            mem_before=data["mem_before"], mem_after=data["mem_after"], mem_delta=data["mem_delta"],
            output_shape=_tuple_shape(data["output_shape"]), module_stack=tuple(data.get("module_stack", ())),
            note=data.get("note", ""), phase=data.get("phase", "forward"), dtype=data.get("dtype"),
            graph=int(data.get("graph", 0)), dot_outputs=data.get("dot_outputs"), mm_macs=data.get("mm_macs"),
            bytes_read=data.get("bytes_read"), bytes_written=data.get("bytes_written"),
            backward_flops=data.get("backward_flops"), backward_macs=data.get("backward_macs"),
            backward_time_ms=data.get("backward_time_ms"), recompute_flops=data.get("recompute_flops"),
            recompute_macs=data.get("recompute_macs"), saved_bytes=data.get("saved_bytes"),
            comm_bytes=data.get("comm_bytes"), global_flops=data.get("global_flops"),
            global_macs=data.get("global_macs"), backward_comm_bytes=data.get("backward_comm_bytes"),
            backward_mm_macs=data.get("backward_mm_macs"),
        )


def _backward_summary(measurements: Measurements) -> dict[str, Any] | None:
    """What a backward did beyond the forward nodes' records (see ``Profile.backward``)."""
    runs = [r.backward for r in measurements.runs if r.backward is not None]
    if not runs:
        return None
    unsupported: dict[str, int] = {}
    times = [r.unattributed_time_ms for r in measurements.runs if r.backward is not None]
    for run in runs:
        for name, count in run.unsupported.items():
            unsupported[name] = unsupported.get(name, 0) + count
    return {
        "unattributed_flops": sum(r.unattributed_flops for r in runs),
        "unattributed_macs": sum(r.unattributed_macs for r in runs),
        "unattributed_mm_macs": sum(r.unattributed_mm_macs for r in runs),
        "unattributed_time_ms": _total(times),
        "unsupported": unsupported,
        "errors": {k: v for r in runs for k, v in r.errors.items()},
        "ops": sum(r.ops for r in runs),
        "comm_bytes": sum(r.comm_bytes for r in runs),  # the backward's collectives (FSDP, DDP)
        "comm_time_ms": _total([r.backward_comm_time_ms for r in measurements.runs if r.backward is not None]),
    }


def _total(values: list[float | None]) -> float | None:
    """The sum of the values that are not None; None when all are."""
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _read_backward(summary: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``Profile.backward`` from a document's ``summary.backward`` (version 4)."""
    if not summary:
        return None
    defaults: dict[str, Any] = {"unattributed_flops": 0, "unattributed_macs": 0, "unattributed_time_ms": None,
                                "unsupported": {}, "errors": {}, "ops": 0, "comm_bytes": 0, "comm_time_ms": None}
    backward = {k: summary.get(k, default) for k, default in defaults.items()}
    if "unattributed_mm_macs" in summary:  # since the backward's kernel split (older files: all its MACs)
        backward["unattributed_mm_macs"] = summary["unattributed_mm_macs"]
    return backward


def _tuple_shape(shape: Any) -> Any:
    if isinstance(shape, list):
        return tuple(_tuple_shape(s) for s in shape)
    return shape


def _jsonable_shape(shape: Any) -> Any:
    if isinstance(shape, tuple):
        return [_jsonable_shape(s) for s in shape]
    return shape


@functools.lru_cache(maxsize=64)
def _dtype_name(dtype: Any) -> str | None:
    if dtype is None:
        return None
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


_DTYPE_NAMES: dict[Any, str] = {}  # torch.float32 -> "float32", filled as met (str() of a dtype costs ~0.4 us)


# NodeRecord's fields in order. Profile.from_measurements builds its records positionally in this
# order, in that one place: a keyword call costs about 1 us a record, as much as running a small
# node. The assert keeps the two in step when a field is added.
_RECORD_FIELDS = ("index", "name", "op", "target", "module_path", "module_type", "flops", "macs", "status",
                  "time_ms", "mem_before", "mem_after", "mem_delta", "output_shape", "module_stack", "note",
                  "phase", "dtype", "graph", "dot_outputs", "mm_macs", "bytes_read", "bytes_written",
                  "backward_flops", "backward_macs", "backward_time_ms", "recompute_flops", "recompute_macs",
                  "saved_bytes", "comm_bytes", "global_flops", "global_macs", "backward_comm_bytes",
                  "backward_mm_macs")
assert NodeRecord._fields == _RECORD_FIELDS, "update _RECORD_FIELDS and Profile.from_measurements"


# ---------------------------------------------------------------------------------------------
# roll-ups
# ---------------------------------------------------------------------------------------------

def is_internal(r: NodeRecord) -> bool:
    """A node of the graph's plumbing, not of the model: a parameter or buffer read (``get_attr``),
    torch.export's input guard and assertions. Text tables leave them out unless asked, and their
    time counts toward no module's latency (nor the total): it is the interpreter's, not the model's."""
    return r.op == "get_attr" or r.target in _INTERNAL_TARGETS or (r.op == "call_module" and
                                                                   r.name.startswith("_guards"))


@dataclass(slots=True)
class _Sums:
    """What a roll-up adds up over its nodes."""

    flops: int = 0  #: unsupported nodes excluded
    macs: int = 0
    time_ms: float | None = None  #: None while no node was timed
    nodes: int = 0
    unsupported: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    backward_flops: int | None = None  #: None while no node had a backward
    backward_macs: int | None = None
    backward_time_ms: float | None = None
    optimizer_flops: int | None = None  #: None while no optimizer record was added
    optimizer_time_ms: float | None = None
    comm_bytes: int = 0  #: collectives' bytes (torch_flops.comm)
    comm_time_ms: float | None = None
    backward_comm_bytes: int = 0

    def add(self, r: NodeRecord) -> None:
        if r.backward_comm_bytes is not None:
            self.backward_comm_bytes += r.backward_comm_bytes
        if r.comm_bytes is not None:
            self.comm_bytes += r.comm_bytes
            if r.time_ms is not None:
                self.comm_time_ms = (self.comm_time_ms or 0.0) + r.time_ms
        if r.phase == "optimizer":  # a training step's optimizer work: its own columns
            self.optimizer_flops = (self.optimizer_flops or 0) + (r.flops or 0)
            if r.time_ms is not None:
                self.optimizer_time_ms = (self.optimizer_time_ms or 0.0) + r.time_ms
            self.nodes += 1
            return
        if r.backward_flops is not None:
            self.backward_flops = (self.backward_flops or 0) + r.backward_flops
            self.backward_macs = (self.backward_macs or 0) + (r.backward_macs or 0)
            if r.backward_time_ms is not None:
                self.backward_time_ms = (self.backward_time_ms or 0.0) + r.backward_time_ms
        if r.flops is not None:
            self.flops += r.flops
        if r.macs is not None:
            self.macs += r.macs
        if r.bytes_read:
            self.bytes_read += r.bytes_read
        if r.bytes_written:
            self.bytes_written += r.bytes_written
        if r.time_ms is not None and not is_internal(r):
            self.time_ms = r.time_ms if self.time_ms is None else self.time_ms + r.time_ms
        self.nodes += 1
        if r.status is Status.UNSUPPORTED:
            self.unsupported += 1


@dataclass(frozen=True, slots=True)
class ModuleStats:
    """One module's roll-up: every node that ran inside it (its children's included), counted per
    call; ``params`` is what it and its submodules own (shared parameters once)."""

    path: str  #: dotted module path, "" for the root
    module_type: str  #: class name
    depth: int  #: 0 for the root, 1 for its children, ...
    params: int  #: parameters of this module and all its submodules
    own_params: int  #: parameters this module owns directly
    flops: int  #: FLOPs of all its nodes (unsupported nodes excluded)
    macs: int
    time_ms: float | None  #: summed node times; None when none of its nodes was timed
    nodes: int  #: graph nodes run inside it (a module called twice counts its nodes twice)
    unsupported: int = 0  #: of which without a FLOPs formula
    bytes_read: int = 0  #: summed over its nodes (see NodeRecord.bytes_read)
    bytes_written: int = 0
    #: with a backward: its nodes' backward work and time (None without one)
    backward_flops: int | None = None
    backward_macs: int | None = None
    backward_time_ms: float | None = None
    #: in a training step: the optimizer's work on the parameters it owns (None without one)
    optimizer_flops: int | None = None
    optimizer_time_ms: float | None = None
    #: its collectives' bytes (this rank sends) and time (torch_flops.comm); and those its
    #: nodes' backward ran
    comm_bytes: int = 0
    comm_time_ms: float | None = None
    backward_comm_bytes: int = 0

    @property
    def step_flops(self) -> int:
        """Forward + backward + optimizer FLOPs."""
        return self.flops + (self.backward_flops or 0) + (self.optimizer_flops or 0)

    @property
    def flops_per_s(self) -> float | None:
        """Achieved FLOP/s: ``flops / (time_ms / 1e3)``; None when untimed or timed at 0."""
        if self.time_ms is None or self.time_ms <= 0:
            return None
        return self.flops * 1e3 / self.time_ms

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path, "module_type": self.module_type, "depth": self.depth, "params": self.params,
            "own_params": self.own_params, "flops": self.flops, "macs": self.macs, "time_ms": self.time_ms,
            "nodes": self.nodes, "unsupported": self.unsupported, "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written, "backward_flops": self.backward_flops,
            "backward_macs": self.backward_macs, "backward_time_ms": self.backward_time_ms,
            "optimizer_flops": self.optimizer_flops, "optimizer_time_ms": self.optimizer_time_ms,
            "comm_bytes": self.comm_bytes, "comm_time_ms": self.comm_time_ms,
            "backward_comm_bytes": self.backward_comm_bytes,
        }


@dataclass(frozen=True, slots=True)
class OperatorStats:
    """One operator's roll-up over all nodes calling it."""

    operator: str  #: module class, ``torch.relu``/``F.linear``, ``Tensor.view``, ``aten.mm``, or the node op
    flops: int  #: unsupported nodes excluded
    macs: int
    calls: int  #: nodes
    time_ms: float | None  #: None when none of its nodes was timed
    unsupported: int = 0  #: nodes without a FLOPs formula
    bytes_read: int = 0
    bytes_written: int = 0
    backward_flops: int | None = None  #: with a backward: what its nodes' backward did
    backward_macs: int | None = None
    backward_time_ms: float | None = None
    #: in a training step: its optimizer nodes' work (``OptimizerClass.step``), kept out of
    #: ``flops``/``time_ms`` as a module's is; None without optimizer nodes
    optimizer_flops: int | None = None
    optimizer_time_ms: float | None = None

    @property
    def step_flops(self) -> int:
        """Forward + backward (+ optimizer) FLOPs of its nodes."""
        return self.flops + (self.backward_flops or 0) + (self.optimizer_flops or 0)

    def as_dict(self) -> dict[str, Any]:
        return {"operator": self.operator, "flops": self.flops, "macs": self.macs, "calls": self.calls,
                "time_ms": self.time_ms, "unsupported": self.unsupported, "bytes_read": self.bytes_read,
                "bytes_written": self.bytes_written, "backward_flops": self.backward_flops,
                "backward_macs": self.backward_macs, "backward_time_ms": self.backward_time_ms,
                "optimizer_flops": self.optimizer_flops, "optimizer_time_ms": self.optimizer_time_ms}


@dataclass(frozen=True)
class Profile:
    """All records of one ``propagate`` plus the model facts the roll-ups need."""

    records: tuple[NodeRecord, ...]
    #: device the inputs lived on ("cpu", "cuda:0", "meta")
    device: str = "cpu"
    #: front end that produced the graph: "fx", "export" or "graph_module"
    tracer: str = "fx"
    #: how ``mem_*`` were measured: "cuda.memory_allocated", "live_tensors", ...
    memory_source: str = "live_tensors"
    #: module path -> class name, for every module of the model ("" = the root)
    module_types: Mapping[str, str] = field(default_factory=dict)
    #: module path -> parameters owned directly by that module (shared parameters counted once)
    module_params: Mapping[str, int] = field(default_factory=dict)
    batch_size: int | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    #: how ``flops``/``macs`` are counted (:mod:`torch_flops.conventions`); see :meth:`with_convention`
    convention: str = "torch_flops"
    #: the ``torch_flops`` profile a converted one was made from
    source: Profile | None = field(default=None, compare=False, repr=False)
    #: when a backward ran: its work that no forward node caused (``unattributed_flops``,
    #: ``unattributed_macs``, ``unattributed_time_ms``: gradient accumulation, the seed gradient),
    #: ``unsupported`` (aten op -> backward ops without a formula) and ``ops`` (aten ops run)
    backward: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "records", tuple(self.records))
        if self.backward is not None and not isinstance(self.backward, MappingProxyType):
            object.__setattr__(self, "backward", MappingProxyType(dict(self.backward)))
        for name in ("module_types", "module_params", "settings"):
            value = getattr(self, name)
            if not isinstance(value, MappingProxyType):
                object.__setattr__(self, name, MappingProxyType(dict(value)))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled and deep-copied with plain dicts for its read-only mappings (views cannot be
        pickled), read-only again when loaded; roll-ups are computed anew."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for name in ("module_types", "module_params", "settings", "backward"):
            if fields[name] is not None:
                fields[name] = dict(fields[name])
        return (_profile_of, (type(self), fields))

    @classmethod
    def from_measurements(cls, measurements: Measurements, *, tracer: str, module_types: Mapping[str, str],
                          module_params: Mapping[str, int], batch_size: int | None,
                          settings: Mapping[str, Any]) -> Profile:
        """The records of every executed node, in execution order, from what a run measured (the
        totals and the memory peak are summed on the way)."""
        with gc_paused():  # thousands of small tuples: no collection passes while they are made
            return cls._from_measurements(measurements, tracer=tracer, module_types=module_types,
                                          module_params=module_params, batch_size=batch_size, settings=settings)

    @classmethod
    def _from_measurements(cls, measurements: Measurements, *, tracer: str, module_types: Mapping[str, str],
                           module_params: Mapping[str, int], batch_size: int | None,
                           settings: Mapping[str, Any]) -> Profile:
        # Column by column: each field a list (most straight from the plan or the run), zipped
        # into records at the end; Python loops only where a node differs from its plan (a formula
        # that failed, a node not run). A loop over the nodes building each record costs ~3x more.
        records: list[NodeRecord] = []
        totals = _Sums()
        total_flops = total_macs = 0
        total_time: float | None = None
        peak: int | None = None
        for graph_run in measurements.runs:
            cols = graph_run.plan.record_columns
            n = len(cols.names)
            changed = bool(graph_run.errors or graph_run.skipped)
            status: list[Status] = list(cols.statuses)  # (list copies run at C speed)
            flops: list[int | None]
            macs: list[int | None]
            if graph_run.filled:  # the run's lists hold the plan's 0/None already
                flops, macs = list(graph_run.flops), list(graph_run.macs)
            else:
                flops = [f if c else z for f, c, z in zip(graph_run.flops, cols.counted, cols.fills)]
                macs = [m if c else z for m, c, z in zip(graph_run.macs, cols.counted, cols.fills)]
            notes = cols.notes
            if changed:
                notes = list(notes)
                for i, message in graph_run.errors.items():  # a formula that failed: unsupported
                    if cols.counted[i]:
                        flops[i], macs[i], status[i], notes[i] = None, None, Status.UNSUPPORTED, message
                for i, message in graph_run.skipped.items():  # not run (meta): 0, with the reason
                    flops[i], macs[i], status[i], notes[i] = 0, 0, Status.SKIPPED, message
            befores, afters, times = graph_run.mem_before, graph_run.mem_after, graph_run.time_ms
            deltas = [None if b is None or a is None else a - b for b, a in zip(befores, afters)]
            dtype_names = [_DTYPE_NAMES.get(d) or _dtype_name(d) for d in graph_run.dtypes]
            start = len(records)
            bw = graph_run.backward
            none: Any = itertools.repeat(None)
            backward: tuple[Iterable[Any], ...] = (itertools.repeat(None),) * 6 if bw is None else (
                bw.flops, bw.macs, graph_run.backward_times or itertools.repeat(None), bw.recompute_flops,
                bw.recompute_macs, bw.saved_bytes)
            records.extend(map(tuple.__new__, itertools.repeat(NodeRecord), zip(  # the order of _RECORD_FIELDS
                range(start, start + n), cols.names, cols.ops, cols.targets, cols.paths, cols.module_types, flops,
                macs, status, times, befores, afters, deltas, graph_run.shapes, cols.chains, notes,
                graph_run.phases or itertools.repeat("forward"), dtype_names, itertools.repeat(graph_run.graph), graph_run.dot_outputs,
                graph_run.mm_macs, graph_run.bytes_read, graph_run.bytes_written, *backward,
                graph_run.comm_bytes or none, graph_run.global_flops or none, graph_run.global_macs or none,
                none if bw is None or not bw.comm_by_owner else
                [bw.comm_by_owner.get(k) for k in range(n)],
                none if bw is None or len(bw.mm_macs) < n else bw.mm_macs)))
            total_flops += sum(filter(None, flops))
            total_macs += sum(filter(None, macs))
            totals.unsupported += status.count(Status.UNSUPPORTED)
            timed = [t for t, internal in zip(times, cols.internal) if t is not None and not internal]
            if timed:
                total_time = sum(timed) + (total_time or 0.0)
            for values in (befores, afters):  # the memory peak, over every node's before and after
                found = max([v for v in values if v is not None], default=None)
                if found is not None and (peak is None or found > peak):
                    peak = found
        profile = cls(records=tuple(records), device=measurements.device, tracer=tracer,
                      memory_source=measurements.memory_source, module_types=module_types,
                      module_params=module_params, batch_size=batch_size, settings=settings,
                      backward=_backward_summary(measurements))
        totals.flops, totals.macs, totals.time_ms, totals.nodes = total_flops, total_macs, total_time, len(records)
        profile.__dict__["_totals"] = totals  # the cached properties, already known
        profile.__dict__["max_memory"] = peak
        return profile

    def with_convention(self, name: str) -> Profile:
        """The same profile with every record's FLOPs (and MACs) as the convention ``name``
        counts them: ``"torch_flops"``, ``"flop_counter"``, ``"macs"`` or ``"exact"`` (see
        :mod:`torch_flops.conventions`). Nothing runs again."""
        check_choice("convention", name, tuple(CONVENTIONS))
        base = self.source if self.source is not None else self
        if name == base.convention:
            return base
        if base.convention != "torch_flops":
            raise ValueError(f"this profile is counted in the {base.convention!r} convention; re-express the "
                             f"'torch_flops' profile it came from (a read-back file keeps only its own convention)")
        return dataclasses.replace(base, records=recount(base.records, name), convention=name, source=base,
                                   backward=recount_backward(base.backward, name))

    # ------------------------------------------------------------------ totals
    @functools.cached_property
    def _totals(self) -> _Sums:
        sums = _Sums()
        for r in self.records:
            sums.add(r)
        return sums

    @property
    def total_flops(self) -> int:
        return self._totals.flops

    @property
    def total_macs(self) -> int:
        return self._totals.macs

    @property
    def total_time_ms(self) -> float | None:
        return self._totals.time_ms

    @functools.cached_property
    def max_memory(self) -> int | None:
        values = [m for r in self.records for m in (r.mem_before, r.mem_after) if m is not None]
        return max(values) if values else None

    # ------------------------------------------------------------------ the backward
    @property
    def has_backward(self) -> bool:
        """Whether a backward ran (``propagate(..., backward=True)``, a training step)."""
        return self.backward is not None

    def _backward_sum(self, field_name: str, unattributed: str | None = None) -> int:
        if self.backward is None:
            return 0
        total = sum(v for r in self.records if (v := getattr(r, field_name)) is not None)
        return total + (self.backward.get(unattributed, 0) if unattributed else 0)

    @property
    def total_backward_flops(self) -> int:
        """FLOPs of the backward: every node's ``backward_flops`` plus the unattributed work
        (gradient accumulation); recompute included. 0 when no backward ran."""
        return self._backward_sum("backward_flops", "unattributed_flops")

    @property
    def total_backward_macs(self) -> int:
        return self._backward_sum("backward_macs", "unattributed_macs")

    @property
    def total_recompute_flops(self) -> int:
        """The forward work activation checkpointing ran again inside the backward."""
        return self._backward_sum("recompute_flops")

    @property
    def total_recompute_macs(self) -> int:
        return self._backward_sum("recompute_macs")

    @property
    def total_saved_bytes(self) -> int:
        """Bytes of activations the forward saved for backward (each storage once)."""
        return self._backward_sum("saved_bytes")

    @property
    def total_backward_time_ms(self) -> float | None:
        """Summed backward op times (None when untimed or no backward ran)."""
        if self.backward is None:
            return None
        times = [r.backward_time_ms for r in self.records if r.backward_time_ms is not None]
        extra = self.backward.get("unattributed_time_ms")
        if not times and extra is None:
            return None
        return sum(times) + (extra or 0.0)

    @property
    def total_params(self) -> int:
        return sum(self.module_params.values())

    @property
    def unsupported(self) -> dict[str, int]:
        """Unsupported targets and how many nodes each has."""
        return dict(Counter(r.target for r in self.records if r.status is Status.UNSUPPORTED))

    @property
    def flops_per_s(self) -> float | None:
        """Achieved FLOP/s over the whole graph; None when untimed."""
        t = self.total_time_ms
        return self.total_flops * 1e3 / t if t is not None and t > 0 else None

    # ------------------------------------------------------------------ roll-ups
    def by_module(self) -> dict[str, ModuleStats]:
        """Every module path ("" = root) -> its :class:`ModuleStats`, in the model's order.

        Each node counts in its module and in every enclosing one, so a parent includes its
        children and the root's FLOPs are :attr:`total_flops`. A module called several times
        counts every call; its parameters count once. Modules that never ran appear with their
        parameters and zero nodes; paths seen only in the records come last.
        """
        types = dict(self.module_types)
        sums: dict[str, _Sums] = {path: _Sums() for path in ("", *types)}
        seen_type: dict[str, str] = {}
        for r in self.records:
            for path in ("", *r.module_chain):
                s = sums.get(path)
                if s is None:
                    s = sums[path] = _Sums()
                s.add(r)
            if r.module_path and r.module_path not in types:
                seen_type.setdefault(r.module_path, r.module_type)
        params = dict.fromkeys(sums, 0)
        for path, n in self.module_params.items():
            for ancestor in ancestors(path):
                params[ancestor] = params.get(ancestor, 0) + n
        return {
            path: ModuleStats(
                path=path, module_type=types.get(path, seen_type.get(path, "")), depth=depth(path),
                params=params.get(path, 0), own_params=self.module_params.get(path, 0), flops=s.flops,
                macs=s.macs, time_ms=s.time_ms, nodes=s.nodes, unsupported=s.unsupported, bytes_read=s.bytes_read,
                bytes_written=s.bytes_written, backward_flops=s.backward_flops, backward_macs=s.backward_macs,
                backward_time_ms=s.backward_time_ms, optimizer_flops=s.optimizer_flops,
                optimizer_time_ms=s.optimizer_time_ms, comm_bytes=s.comm_bytes, comm_time_ms=s.comm_time_ms,
                backward_comm_bytes=s.backward_comm_bytes,
            )
            for path, s in sums.items()
        }

    def by_operator(self) -> dict[str, OperatorStats]:
        """Operator -> :class:`OperatorStats`, most FLOPs first (ties: first run first).

        The operator is the node's readable target (``Conv2d``, ``F.linear``, ``Tensor.view``,
        ``aten.mm``); placeholder, get_attr and output nodes are grouped under their op name, so
        the operators' sums equal the totals.
        """
        sums: dict[str, _Sums] = {}
        for r in self.records:
            key = r.op if r.op in _NON_OPERATOR_OPS else r.target
            s = sums.get(key)
            if s is None:
                s = sums[key] = _Sums()
            s.add(r)
        stats = [OperatorStats(operator=k, flops=s.flops, macs=s.macs, calls=s.nodes, time_ms=s.time_ms,
                               unsupported=s.unsupported, bytes_read=s.bytes_read, bytes_written=s.bytes_written,
                               backward_flops=s.backward_flops, backward_macs=s.backward_macs,
                               backward_time_ms=s.backward_time_ms, optimizer_flops=s.optimizer_flops,
                               optimizer_time_ms=s.optimizer_time_ms)
                 for k, s in sums.items()]
        stats.sort(key=lambda o: -o.flops)  # stable: ties keep first-run order
        return {o.operator: o for o in stats}

    def top_modules(self, k: int = 3, depth: int = -1, by: TopBy = "flops") -> list[ModuleStats]:
        """The ``k`` modules with the most ``by`` among those at ``depth`` (0 = the root, 1 = its
        children, ...; -1 = the innermost modules, those without submodules). Ties keep the
        model's order; with ``by="time"`` untimed modules come last."""
        check_int("k", k, 0)
        check_depth("depth", depth)
        check_choice("by", by, _TOP_BY)
        modules = self.by_module()
        if depth == -1:
            parents = {p.rpartition(".")[0] if "." in p else "" for p in modules if p}
            candidates = [m for p, m in modules.items() if p not in parents]
        else:
            candidates = [m for m in modules.values() if m.depth == depth]

        def key(m: ModuleStats) -> float:
            value = m.time_ms if by == "time" else getattr(m, by)
            return float("inf") if value is None else -value

        return sorted(candidates, key=key)[:k]

    def summary(self) -> dict[str, Any]:
        """Totals and run facts (raw numbers), as in the JSON ``summary``."""
        return {
            "params": self.total_params, "flops": self.total_flops, "macs": self.total_macs,
            "time_ms": self.total_time_ms, "flops_per_s": self.flops_per_s, "max_memory": self.max_memory,
            "memory_source": self.memory_source, "batch_size": self.batch_size, "device": self.device,
            "tracer": self.tracer, "nodes": len(self.records),
            "unsupported_nodes": sum(self.unsupported.values()), "unsupported": self.unsupported,
            "convention": self.convention,
            "backward": None if self.backward is None else {
                "flops": self.total_backward_flops, "macs": self.total_backward_macs,
                "time_ms": self.total_backward_time_ms, "recompute_flops": self.total_recompute_flops,
                "recompute_macs": self.total_recompute_macs, "saved_bytes": self.total_saved_bytes,
                **self.backward},
        }

    # ------------------------------------------------------------------ serialization
    def to_dict(self) -> dict[str, Any]:
        """The versioned JSON document (schema in :mod:`torch_flops.report`)."""
        return {
            "schema": SCHEMA_NAME, "version": SCHEMA_VERSION, "settings": dict(self.settings),
            "summary": self.summary(),
            "records": [r.as_dict() for r in self.records],
            "modules": {path: {k: v for k, v in m.as_dict().items() if k != "path"}
                        for path, m in self.by_module().items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Profile:
        """Rebuild a profile from :meth:`to_dict`'s document (any version up to this one's);
        ``ValueError`` for another schema or a newer version."""
        if not isinstance(data, Mapping) or data.get("schema") != SCHEMA_NAME:
            raise ValueError(f"not a torch_flops profile: expected \"schema\": \"{SCHEMA_NAME}\"")
        version = data.get("version")
        if not isinstance(version, int) or not 1 <= version <= SCHEMA_VERSION:
            raise ValueError(f"unsupported torch_flops profile version {version!r} (this reader knows 1 to "
                             f"{SCHEMA_VERSION})")
        summary = data.get("summary", {})
        modules = data.get("modules", {})
        return cls(
            records=tuple(NodeRecord.from_dict(r) for r in data["records"]),
            device=summary.get("device", "cpu"), tracer=summary.get("tracer", "fx"),
            memory_source=summary.get("memory_source", "live_tensors"),
            module_types={p: m.get("module_type", "") for p, m in modules.items()},
            module_params={p: int(m.get("own_params", 0)) for p, m in modules.items()},
            batch_size=summary.get("batch_size"), settings=data.get("settings", {}),
            convention=summary.get("convention", "torch_flops"),
            backward=_read_backward(summary.get("backward")),
        )

    @classmethod
    def from_json(cls, source: str | os.PathLike[str] | Mapping[str, Any]) -> Profile:
        """:meth:`from_dict` of a parsed document, a JSON string, or the path of a JSON file.
        ``TypeError`` for another kind of source (an int is no file descriptor here); ``ValueError``
        naming the file for a document that is no JSON or no torch_flops profile."""
        if isinstance(source, Mapping):
            data: Any = source
            where = "the document"
        elif isinstance(source, str) and source.lstrip().startswith("{"):
            where = "the JSON string"
            try:
                data = json.loads(source)
            except ValueError as e:
                raise ValueError(f"{where} is no JSON ({e})") from e
        elif isinstance(source, (str, os.PathLike)):
            where = os.fspath(source)
            with open(source, encoding="utf-8") as f:  # as write_atomic writes it, whatever the locale
                try:
                    data = json.load(f)
                except ValueError as e:
                    raise ValueError(f"{where}: no JSON ({e})") from e
        else:
            raise TypeError(f"Profile.from_json takes the path of a JSON file, a JSON string or a parsed dict, "
                            f"got {type(source).__name__}")
        if not isinstance(data, Mapping):  # (a ValueError: the file's content is wrong, not the argument)
            raise ValueError(f"{where}: not a torch_flops profile (a JSON {type(data).__name__}, not an object)")  # noqa: TRY004
        try:
            return cls.from_dict(data)
        except (KeyError, TypeError, AttributeError, IndexError) as e:
            raise ValueError(f"{where}: not a readable torch_flops profile ({type(e).__name__}: {e})") from e
        except ValueError as e:  # (not a profile's schema: named with the file)
            raise ValueError(f"{where}: {e}") from e

    # ------------------------------------------------------------------ at a REPL, in a notebook
    def __repr__(self) -> str:
        """One line: ``Profile(ResNet: 8.24 GFLOPs, 4.09 GMACs, 189 nodes, cpu)``."""
        extra = "" if self.convention == "torch_flops" else f", {self.convention} convention"
        backward = f", backward {_short(self.total_backward_flops)}FLOPs" if self.has_backward else ""
        return (f"Profile({self.module_types.get('', '') or 'model'}: {_short(self.total_flops)}FLOPs, "
                f"{_short(self.total_macs)}MACs{backward}, {len(self.records)} nodes, {self.device}{extra})")

    def _repr_html_(self) -> str | None:
        """A notebook's view: the summary and the top modules (torch_flops.html renders it)."""
        render = VIEWS.get("repr_html")
        return render(self) if render is not None else None

    def to_html(self, path: str | os.PathLike[str], hardware: Any = None) -> str:
        """Write the one-file HTML report (:mod:`torch_flops.html`) to ``path``, with the roofline on
        ``hardware`` (a name of ``torch_flops.hardware.names()`` or a spec) when given; returns the
        path written."""
        render = VIEWS.get("html")
        if render is None:
            raise RuntimeError("the HTML view is not loaded: import torch_flops.html")
        return str(render(self, path, hardware=hardware))


def _profile_of(cls: type[Profile], fields: dict[str, Any]) -> Profile:
    """A pickled :class:`Profile` loaded (see ``Profile.__reduce__``)."""
    return cls(**fields)


def _short(n: float) -> str:
    """``8239659496 -> '8.24 G'`` (three significant digits and a prefix, then the unit)."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= scale:
            value = n / scale
            digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2
            return f"{value:.{digits}f} {prefix}"
    return f"{n:g} "


#: renderers the views layer registers at import (records never imports a view): "html" writes the
#: one-file report of a profile, "repr_html" gives a notebook's summary (see torch_flops.html)
VIEWS: dict[str, Callable[..., Any]] = {}

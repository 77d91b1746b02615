"""Immutable results of one profile: a :class:`NodeRecord` per graph node and the :class:`Profile`
that holds them with what is needed to roll them up (module structure, parameters, settings).
Everything here is data; roll-ups are pure functions of the records and never re-run a model."""

from __future__ import annotations

import enum
import json
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

__all__ = ["SCHEMA_NAME", "SCHEMA_VERSION", "ModuleStats", "NodeRecord", "OperatorStats", "Profile", "Status"]

#: ``"schema"`` and ``"version"`` of :meth:`Profile.to_dict` (the schema is described in :mod:`torch_flops.report`)
SCHEMA_NAME = "torch_flops.profile"
SCHEMA_VERSION = 1

TopBy = Literal["flops", "macs", "params", "time"]
_TOP_BY = ("flops", "macs", "params", "time")
_NON_OPERATOR_OPS = ("placeholder", "get_attr", "output")


class Status(str, enum.Enum):
    """How a node's FLOPs were obtained."""

    COUNTED = "counted"  #: a formula from the tables computed them
    ZERO = "zero"  #: 0 by definition (views, copies, placeholders, get_attr, output)
    IGNORED = "ignored"  #: the user asked to ignore this op (``ignore_ops``): 0
    UNSUPPORTED = "unsupported"  #: no formula: excluded from totals, warned about

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """What happened at one node of the traced graph.

    ``flops``/``macs`` are None only for unsupported nodes. ``time_ms`` is None where time is not
    measured (meta tensors). ``mem_*`` are bytes: ``torch.cuda.memory_allocated`` (or the function
    named by ``mem_func_name``) on CUDA, else the profiler's count of live tensor bytes held by the
    graph (inputs and activations; parameters and buffers excluded; a storage shared by views
    counted once); None where not measured.
    """

    index: int
    name: str
    op: str
    target: str
    module_path: str
    module_type: str
    flops: int | None
    macs: int | None
    status: Status
    time_ms: float | None
    mem_before: int | None
    mem_after: int | None
    mem_delta: int | None
    output_shape: tuple[Any, ...] | None
    #: every enclosing module path, outermost first, ending with ``module_path`` ("" excluded)
    module_stack: tuple[str, ...] = ()
    #: why a node is unsupported (no formula, or the formula's error)
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index, "name": self.name, "op": self.op, "target": self.target,
            "module_path": self.module_path, "module_type": self.module_type, "flops": self.flops,
            "macs": self.macs, "status": self.status.value, "time_ms": self.time_ms,
            "mem_before": self.mem_before, "mem_after": self.mem_after, "mem_delta": self.mem_delta,
            "output_shape": _jsonable_shape(self.output_shape), "module_stack": list(self.module_stack),
            "note": self.note,
        }

    @property
    def module_chain(self) -> tuple[str, ...]:
        """Every module the node runs inside, outermost first, root ("") excluded.

        ``module_stack`` with the missing dotted prefixes filled in: fx does not list containers
        that are iterated rather than called (``h`` of ``h.0.attn``), so ``("h.0", "h.0.attn")``
        becomes ``("h", "h.0", "h.0.attn")``.
        """
        chain: list[str] = []
        for path in self.module_stack or ((self.module_path,) if self.module_path else ()):
            parts = path.split(".")
            for i in range(1, len(parts) + 1):
                prefix = ".".join(parts[:i])
                if prefix not in chain:
                    chain.append(prefix)
        return tuple(chain)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodeRecord:
        """Inverse of :meth:`as_dict` (unknown keys are ignored)."""
        return cls(
            index=int(data["index"]), name=data["name"], op=data["op"], target=data["target"],
            module_path=data["module_path"], module_type=data["module_type"], flops=data["flops"],
            macs=data["macs"], status=Status(data["status"]), time_ms=data["time_ms"],
            mem_before=data["mem_before"], mem_after=data["mem_after"], mem_delta=data["mem_delta"],
            output_shape=_tuple_shape(data["output_shape"]), module_stack=tuple(data.get("module_stack", ())),
            note=data.get("note", ""),
        )


def _tuple_shape(shape: Any) -> Any:
    if isinstance(shape, list):
        return tuple(_tuple_shape(s) for s in shape)
    return shape


def _path_depth(path: str) -> int:
    return 0 if path == "" else path.count(".") + 1


def _ancestors(path: str) -> list[str]:
    """``"a.b.c" -> ["", "a", "a.b", "a.b.c"]``."""
    if path == "":
        return [""]
    parts = path.split(".")
    return [""] + [".".join(parts[: i + 1]) for i in range(len(parts))]


def _add_time(total: float | None, t: float | None) -> float | None:
    if t is None:
        return total
    return t if total is None else total + t


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
            "nodes": self.nodes, "unsupported": self.unsupported,
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

    def as_dict(self) -> dict[str, Any]:
        return {"operator": self.operator, "flops": self.flops, "macs": self.macs, "calls": self.calls,
                "time_ms": self.time_ms, "unsupported": self.unsupported}


def _jsonable_shape(shape: Any) -> Any:
    if isinstance(shape, tuple):
        return [_jsonable_shape(s) for s in shape]
    return shape


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

    def __post_init__(self) -> None:
        object.__setattr__(self, "module_types", MappingProxyType(dict(self.module_types)))
        object.__setattr__(self, "module_params", MappingProxyType(dict(self.module_params)))
        object.__setattr__(self, "settings", MappingProxyType(dict(self.settings)))

    @property
    def total_flops(self) -> int:
        return sum(r.flops for r in self.records if r.flops is not None)

    @property
    def total_macs(self) -> int:
        return sum(r.macs for r in self.records if r.macs is not None)

    @property
    def total_time_ms(self) -> float | None:
        times = [r.time_ms for r in self.records if r.time_ms is not None]
        return sum(times) if times else None

    @property
    def max_memory(self) -> int | None:
        values = [m for r in self.records for m in (r.mem_before, r.mem_after) if m is not None]
        return max(values) if values else None

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
        order: dict[str, None] = {"": None}
        order.update(dict.fromkeys(types))
        acc: dict[str, list[Any]] = {}  # path -> [flops, macs, time, nodes, unsupported]
        seen_type: dict[str, str] = {}
        for r in self.records:
            for path in ("", *r.module_chain):
                a = acc.get(path)
                if a is None:
                    a = acc[path] = [0, 0, None, 0, 0]
                    if path not in order:
                        order[path] = None
                if r.flops is not None:
                    a[0] += r.flops
                if r.macs is not None:
                    a[1] += r.macs
                a[2] = _add_time(a[2], r.time_ms)
                a[3] += 1
                if r.status is Status.UNSUPPORTED:
                    a[4] += 1
            if r.module_path and r.module_path not in types:
                seen_type.setdefault(r.module_path, r.module_type)
        params = dict.fromkeys(order, 0)
        for path, n in self.module_params.items():
            for ancestor in _ancestors(path):
                params[ancestor] = params.get(ancestor, 0) + n
        result: dict[str, ModuleStats] = {}
        for path in order:
            flops, macs, time_ms, nodes, unsupported = acc.get(path, (0, 0, None, 0, 0))
            result[path] = ModuleStats(
                path=path, module_type=types.get(path, seen_type.get(path, "")), depth=_path_depth(path),
                params=params.get(path, 0), own_params=self.module_params.get(path, 0), flops=flops,
                macs=macs, time_ms=time_ms, nodes=nodes, unsupported=unsupported,
            )
        return result

    def by_operator(self) -> dict[str, OperatorStats]:
        """Operator -> :class:`OperatorStats`, most FLOPs first (ties: first run first).

        The operator is the node's readable target (``Conv2d``, ``F.linear``, ``Tensor.view``,
        ``aten.mm``); placeholder, get_attr and output nodes are grouped under their op name, so
        the operators' sums equal the totals.
        """
        acc: dict[str, list[Any]] = {}
        for r in self.records:
            key = r.op if r.op in _NON_OPERATOR_OPS else r.target
            a = acc.get(key)
            if a is None:
                a = acc[key] = [0, 0, 0, None, 0]
            if r.flops is not None:
                a[0] += r.flops
            if r.macs is not None:
                a[1] += r.macs
            a[2] += 1
            a[3] = _add_time(a[3], r.time_ms)
            if r.status is Status.UNSUPPORTED:
                a[4] += 1
        stats = [OperatorStats(k, *v) for k, v in acc.items()]
        stats.sort(key=lambda s: -s.flops)  # stable: ties keep first-run order
        return {s.operator: s for s in stats}

    def top_modules(self, k: int = 3, depth: int = -1, by: TopBy = "flops") -> list[ModuleStats]:
        """The ``k`` modules with the most ``by`` among those at ``depth`` (0 = the root, 1 = its
        children, ...; -1 = the innermost modules, those without submodules). Ties keep the
        model's order; with ``by="time"`` untimed modules come last."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"k must be an int >= 0, got {k!r}")
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < -1:
            raise ValueError(f"depth must be an int >= 0, or -1 for the innermost modules, got {depth!r}")
        if by not in _TOP_BY:
            raise ValueError(f"by must be one of {_TOP_BY}, got {by!r}")
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
        """Rebuild a profile from :meth:`to_dict`'s document; ``ValueError`` for another schema or
        a newer version."""
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
        )

    @classmethod
    def from_json(cls, source: str | os.PathLike[str] | Mapping[str, Any]) -> Profile:
        """:meth:`from_dict` of a parsed document, a JSON string, or the path of a JSON file."""
        if isinstance(source, Mapping):
            return cls.from_dict(source)
        if isinstance(source, str) and source.lstrip().startswith("{"):
            return cls.from_dict(json.loads(source))
        with open(source) as f:
            return cls.from_dict(json.load(f))

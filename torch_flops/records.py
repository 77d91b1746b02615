"""Immutable results of one profile: a :class:`NodeRecord` per graph node and the :class:`Profile`
that holds them with what is needed to roll them up (module structure, parameters, settings).
Everything here is data; roll-ups are pure functions of the records and never re-run a model."""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["NodeRecord", "Profile", "Status"]


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

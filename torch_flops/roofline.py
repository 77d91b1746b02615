"""The roofline model of a profile on an accelerator: for every node and module, how long it should
take there, whether its arithmetic or its memory traffic bounds it, and, where it was timed on
that hardware, how far it is from that.

Per node, with ``flops`` and ``macs`` in the profile's ``torch_flops`` convention, ``bytes =
bytes_read + bytes_written`` and the peaks of the dtype the node computes in::

    intensity        = flops / bytes                                (FLOP per byte)
    compute_time     = 2 * macs / peak(dtype) + (flops - 2 * macs) / vector(dtype)
    memory_time      = bytes / bandwidth
    roofline_time    = max(compute_time, memory_time)
    bound            = "compute" if compute_time >= memory_time else "memory"
                       (None for a node that does neither)

``peak`` is the dense matrix (tensor-core) rate of the dtype, which dot products reach;
``vector`` the rate of the other FLOPs (bias adds, elementwise ops, norms, softmax), which run on
the vector units: the part's float32 figure (``HardwareSpec.vector_flops``). So for a matmul
without bias ``compute_time = flops / peak``, and an elementwise op, whose 1 FLOP per element
meets 2 or 3 elements of traffic, is memory-bound on every part here.
    achieved FLOP/s  = flops / measured time;  achieved bytes/s = bytes / measured time
    % of roofline    = roofline_time / measured time * 100
    lost time        = measured time - roofline_time

A module's roofline time is the sum of its nodes' (they run one after another); its bound is the
one that accounts for more of that time. The graph's inputs and output are no rows; a node
without a FLOPs formula (unsupported) has ``flops_known=False``, its memory time as its roofline
time and no bound (``Roofline.unknown_flops_nodes`` counts them).

What the model leaves out: kernel launch and framework overhead (which dominate small ops), caches (data re-read from L2 moves fewer DRAM
bytes than counted; data that spills moves more), overlap between kernels and streams, and
efficiency below peak (tile quantisation, occupancy, clocks under power limits). So the roofline
time is a lower bound on what a node can take, and a prediction of a whole model that is only as
good as its nodes are large.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from torch_flops.hardware import HardwareSpec, get, spec_for_device_name
from torch_flops.records import NodeRecord, Profile, is_internal

__all__ = ["Roofline", "RooflineRow", "roofline"]

_NOT_WORK = ("placeholder", "output")  # the graph's inputs and its return: no work of the model


@dataclass(frozen=True, slots=True)
class RooflineRow:
    """One node (or module) on the roofline."""

    name: str  #: the node's record name (a module row: its path, "" for the root)
    module_path: str
    target: str  #: the node's target (a module row: its class)
    dtype: str | None
    flops: int
    bytes: int  #: read + written
    intensity: float | None  #: FLOP per byte; None without bytes
    bound: str | None  #: "compute", "memory", or None for a node that does neither
    roofline_time_ms: float  #: max(flops / peak, bytes / bandwidth)
    compute_time_ms: float  #: flops / peak
    memory_time_ms: float  #: bytes / bandwidth
    time_ms: float | None  #: measured on this hardware; None otherwise
    achieved_flops_per_s: float | None
    achieved_bytes_per_s: float | None
    pct_of_roofline: float | None  #: roofline / measured time * 100
    lost_time_ms: float | None  #: measured - roofline time
    #: False for a node without a FLOPs formula (unsupported): its time is its memory time alone
    #: and its bound None (a module row: False when any of its nodes is so)
    flops_known: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Roofline:
    """A profile on a hardware spec: a row per (non-plumbing) node in execution order and per module."""

    hardware: HardwareSpec
    nodes: tuple[RooflineRow, ...]
    modules: dict[str, RooflineRow]
    timed: bool  #: the profile was timed on this hardware (measured columns are filled)
    #: the modules that call at least one node themselves (not only through submodules)
    callers: frozenset[str] = frozenset()

    def __repr__(self) -> str:
        return (f"Roofline({self.hardware.name}, {len(self.nodes)} nodes, {len(self.modules)} modules, "
                f"predicted {self.total_roofline_ms:.4g} ms, timed={self.timed})")

    @property
    def total_roofline_ms(self) -> float:
        return sum(r.roofline_time_ms for r in self.nodes)

    @property
    def total_time_ms(self) -> float | None:
        times = [r.time_ms for r in self.nodes if r.time_ms is not None]
        return sum(times) if times else None

    @property
    def memory_bound_share(self) -> float:
        """The share (0 to 1) of the roofline time spent in memory-bound nodes."""
        total = self.total_roofline_ms
        return sum(r.roofline_time_ms for r in self.nodes if r.bound == "memory") / total if total else 0.0

    def ranked(self, k: int | None = None, modules: bool = False) -> list[RooflineRow]:
        """The rows losing most time (measured - roofline) when timed, else the predicted slowest.
        Module rows leave out the root and pure containers (a ``ModuleList`` that calls nothing
        itself), whose sums would head every list."""
        rows = [r for path, r in self.modules.items() if path in self.callers] if modules else list(self.nodes)
        if self.timed:
            rows.sort(key=lambda r: -(r.lost_time_ms or 0.0))
        else:
            rows.sort(key=lambda r: -r.roofline_time_ms)
        return rows[:k] if k is not None else rows

    @property
    def unknown_flops_nodes(self) -> int:
        """Nodes without a FLOPs formula: their compute time is unknown, so is their bound."""
        return sum(1 for r in self.nodes if not r.flops_known)

    def summary(self) -> dict[str, Any]:
        return {"hardware": self.hardware.name, "roofline_time_ms": self.total_roofline_ms,
                "time_ms": self.total_time_ms, "memory_bound_share": self.memory_bound_share, "timed": self.timed,
                "unknown_flops_nodes": self.unknown_flops_nodes}

    def as_dict(self) -> dict[str, Any]:
        return {"hardware": self.hardware.as_dict(), "summary": self.summary(),
                "nodes": [r.as_dict() for r in self.nodes],
                "modules": {path: r.as_dict() for path, r in self.modules.items()}}


def _timed_here(profile: Profile, spec: HardwareSpec) -> bool:
    """Whether the profile's times were measured on ``spec``'s hardware: a CPU profile on a
    ``kind="cpu"`` spec (the CPU you described); a CUDA profile on the spec its device name
    matches, or on a spec of your own that names no device (you chose it for this GPU)."""
    if profile.device.startswith("cpu"):
        return spec.kind == "cpu"
    device_name = str(profile.settings.get("device_name", ""))
    if not device_name or spec.kind == "cpu":
        return False
    if spec.matches(device_name) or not spec.device_names:  # every spec of the table names its devices
        return True
    try:
        return spec_for_device_name(device_name).name == spec.name
    except ValueError:
        return False



def _row(name: str, module_path: str, target: str, dtype: str | None, flops: int | None, nbytes: int,
         compute_s: float, memory_s: float, time_ms: float | None) -> RooflineRow:
    roofline_s = max(compute_s, memory_s)
    known = flops is not None
    flops = flops or 0
    bound = None if not known or flops == 0 and nbytes == 0 else ("compute" if compute_s >= memory_s else "memory")
    timed = time_ms is not None and time_ms > 0
    seconds = time_ms / 1e3 if timed else None  # type: ignore[operator]
    return RooflineRow(
        name=name, module_path=module_path, target=target, dtype=dtype, flops=flops, bytes=nbytes,
        intensity=flops / nbytes if nbytes else None, bound=bound, roofline_time_ms=roofline_s * 1e3,
        compute_time_ms=compute_s * 1e3, memory_time_ms=memory_s * 1e3, time_ms=time_ms if timed else None,
        achieved_flops_per_s=flops / seconds if seconds else None,
        achieved_bytes_per_s=nbytes / seconds if seconds else None,
        pct_of_roofline=100 * roofline_s / seconds if seconds else None,
        lost_time_ms=(time_ms - roofline_s * 1e3) if timed else None,  # type: ignore[operator]
        flops_known=known,
    )


def roofline(profile: Profile, hardware: str | HardwareSpec) -> Roofline:
    """The roofline of ``profile`` (in its ``torch_flops`` convention) on ``hardware``."""
    if not isinstance(profile, Profile):
        raise TypeError(f"roofline takes a Profile (counter.profile, torch_flops.profile(...)), got "
                        f"{type(profile).__name__}")
    spec = get(hardware)
    base = profile.with_convention("torch_flops")
    timed = _timed_here(base, spec)
    bandwidth = spec.memory_bandwidth
    nodes: list[RooflineRow] = []
    records: list[NodeRecord] = [r for r in base.records if not is_internal(r) and r.op not in _NOT_WORK]
    if any(r.bytes_read is None for r in records):
        raise ValueError("this profile has no byte counts (a file written before torch_flops' schema version 3): "
                         "profile the model again for its roofline")
    for r in records:
        flops = r.flops
        nbytes = r.bytes_read + r.bytes_written  # type: ignore[operator]
        compute_s = 0.0
        if flops and r.dtype is not None:
            dot = min(2 * (r.macs or 0), flops)
            compute_s = dot / spec.peak_flops(r.dtype) + (flops - dot) / spec.vector_flops(r.dtype)
        nodes.append(_row(r.name, r.module_path, r.target, r.dtype, flops, nbytes, compute_s, nbytes / bandwidth,
                          r.time_ms if timed else None))
    callers = frozenset(r.module_path for r in records if r.module_path) - {""}
    return Roofline(hardware=spec, nodes=tuple(nodes), modules=_modules(base, records, nodes), timed=timed,
                    callers=callers)


def _modules(profile: Profile, records: Sequence[NodeRecord], rows: Sequence[RooflineRow]) -> dict[str, RooflineRow]:
    """Per module: its nodes' sums (times included: they run one after another); its bound the
    one that accounts for more of its roofline time."""
    # path -> [flops, bytes, compute, memory, roofline, compute-bound, memory-bound, time (ms), all known]
    sums: dict[str, list[Any]] = {}
    for r, row in zip(records, rows):
        for path in ("", *r.module_chain):
            acc = sums.setdefault(path, [0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, None, True])
            acc[0] += row.flops
            acc[1] += row.bytes
            acc[2] += row.compute_time_ms
            acc[3] += row.memory_time_ms
            acc[4] += row.roofline_time_ms
            if row.bound == "compute":
                acc[5] += row.roofline_time_ms
            elif row.bound == "memory":
                acc[6] += row.roofline_time_ms
            if row.time_ms is not None:
                acc[7] = row.time_ms if acc[7] is None else acc[7] + row.time_ms
            acc[8] = acc[8] and row.flops_known
    types = profile.module_types
    result: dict[str, RooflineRow] = {}
    for path, (flops, nbytes, compute_ms, memory_ms, roofline_ms, compute_bound_ms, memory_bound_ms, time_ms,
               known) in sums.items():
        bound = None if not (compute_bound_ms or memory_bound_ms) else (
            "compute" if compute_bound_ms >= memory_bound_ms else "memory")
        seconds = time_ms / 1e3 if time_ms else None
        result[path] = RooflineRow(
            name=path, module_path=path, target=types.get(path, ""), dtype=None, flops=flops, bytes=nbytes,
            intensity=flops / nbytes if nbytes else None, bound=bound, roofline_time_ms=roofline_ms,
            compute_time_ms=compute_ms, memory_time_ms=memory_ms, time_ms=time_ms,
            achieved_flops_per_s=flops / seconds if seconds else None,
            achieved_bytes_per_s=nbytes / seconds if seconds else None,
            pct_of_roofline=100 * roofline_ms / time_ms if time_ms else None,
            lost_time_ms=time_ms - roofline_ms if time_ms is not None else None,
            flops_known=known,
        )
    return result

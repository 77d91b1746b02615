"""One report from the profiles of a distributed run's ranks (:func:`merge_profiles`, ``torch-flops
merge``): a view over :class:`~torch_flops.records.Profile` s. The rules for collectives (which ops
communicate and how many bytes) are :mod:`torch_flops.comm`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tabulate import tabulate

from torch_flops.comm import comm_bytes, rank_path
from torch_flops.records import Profile, Status
from torch_flops.report import format_bytes, format_count, format_time_ms

__all__ = ["MergedProfile", "comm_bytes", "merge_profiles", "rank_path"]


@dataclass(frozen=True)
class MergedProfile:
    """One report from the profiles of a distributed run's ranks (:func:`merge_profiles`)."""

    profiles: tuple[Any, ...]  #: one ``Profile`` per rank, in rank order
    ranks: tuple[int, ...]
    #: the work the ranks did, summed: every rank's local FLOPs/MACs
    total_flops: int
    total_macs: int
    #: the model's work: a DTensor op's global work once (every rank runs the same logical op),
    #: plus the work of plain-tensor ops on every rank (each rank's own data under data parallel;
    #: a layer left unsharded and replicated under tensor parallel counts once per rank)
    global_flops: int
    global_macs: int
    rank_flops: tuple[int, ...]
    rank_time_ms: tuple[float | None, ...]
    #: max / mean over the ranks (1.0: perfectly balanced); None where untimed
    flops_imbalance: float | None
    time_imbalance: float | None
    comm_bytes: int  #: summed over the ranks, the backwards' collectives included
    comm_time_ms: float | None
    #: module path -> summed ``flops``, ``macs``, ``comm_bytes``, ``comm_time_ms`` over the ranks
    modules: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "ranks": list(self.ranks), "total_flops": self.total_flops, "total_macs": self.total_macs,
            "global_flops": self.global_flops, "global_macs": self.global_macs,
            "rank_flops": list(self.rank_flops), "rank_time_ms": list(self.rank_time_ms),
            "flops_imbalance": self.flops_imbalance, "time_imbalance": self.time_imbalance,
            "comm_bytes": self.comm_bytes, "comm_time_ms": self.comm_time_ms,
        }

    def to_json(self) -> str:
        return json.dumps({"schema": "torch_flops.merged", "version": 1, "summary": self.summary(),
                           "modules": {k: dict(v) for k, v in self.modules.items()}}, indent=2)

    def text(self, depth: int = -1) -> str:
        """The merged summary and the module tree of the merged view, as text."""
        lines = [
            f"torch_flops merged profile: {len(self.ranks)} ranks",
            (f"  total (summed local work): {format_count(self.total_flops, 'FLOPs')}, "
             f"{format_count(self.total_macs, 'MACs')}"),
            (f"  global (DTensor ops once, plain-tensor ops of every rank): {format_count(self.global_flops, 'FLOPs')}, "
             f"{format_count(self.global_macs, 'MACs')}"),
            "  per rank: " + ", ".join(f"rank {r}: {format_count(f, 'FLOPs')} {format_time_ms(t)}"
                                       for r, f, t in zip(self.ranks, self.rank_flops, self.rank_time_ms)),
            (f"  imbalance (max / mean): FLOPs {_ratio_text(self.flops_imbalance)}, time "
             f"{_ratio_text(self.time_imbalance)}"),
            f"  communication: {format_bytes(self.comm_bytes)} sent, {format_time_ms(self.comm_time_ms)}",
            "",
        ]
        rows = []
        for path, m in self.modules.items():
            if depth >= 0 and m["depth"] > depth:
                continue
            name = path.rpartition(".")[2] if path else "(root)"
            label = "  " * m["depth"] + (f"{name} ({m['module_type']})" if m["module_type"] else name)
            rows.append([label, format_count(m["flops"]), format_count(m["macs"]), format_time_ms(m["time_ms"]),
                         format_bytes(m["comm_bytes"]), format_time_ms(m["comm_time_ms"])])
        table = tabulate(rows, headers=["module", "FLOPs (all ranks)", "MACs", "time (summed)", "comm", "comm time"],
                         tablefmt="simple", disable_numparse=True,
                         colalign=("left", "right", "right", "right", "right", "right"))
        return "\n".join(lines) + table


def _ratio_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _imbalance(values: list[float]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    mean = sum(values) / len(values)
    return max(values) / mean if mean > 0 else None


def merge_profiles(paths_or_profiles: Iterable[Any]) -> MergedProfile:
    """One report from the ranks' profiles: ``Profile`` objects or the JSON files each rank wrote
    (``to_json("profile-{rank}.json")``). Ranks come from each profile's ``settings["rank"]``
    (their order in the argument when absent); ``ValueError`` for two profiles of one rank."""
    if isinstance(paths_or_profiles, (str, os.PathLike)):
        raise TypeError("merge_profiles takes a list of the ranks' profiles or JSON paths, got one path")
    loaded: list[Profile] = []
    for item in paths_or_profiles:
        if isinstance(item, Profile):
            loaded.append(item)
        elif isinstance(item, (str, os.PathLike)):
            loaded.append(Profile.from_json(item))  # (ValueError naming the file for a bad one)
        else:
            raise TypeError(f"merge_profiles takes Profiles or JSON paths, got {type(item).__name__}")
    if not loaded:
        raise ValueError("merge_profiles needs at least one profile")
    ranks = []
    for i, p in enumerate(loaded):
        rank = p.settings.get("rank", i)
        if isinstance(rank, bool) or not isinstance(rank, int):
            raise ValueError(f"profile {i} has settings.rank {rank!r}, not a rank number")  # noqa: TRY004  (a bad document, not a bad argument)
        ranks.append(rank)
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"two profiles of the same rank: ranks {ranks}")
    worlds = set()
    for i, p in enumerate(loaded):
        if "world_size" in p.settings:  # (a profile recorded without a process group has none)
            w = p.settings["world_size"]
            if isinstance(w, bool) or not isinstance(w, int) or w < 1:
                raise ValueError(f"profile {i} has settings.world_size {w!r}, not a rank count")
            worlds.add(w)
    if len(worlds) > 1:
        raise ValueError(f"the profiles come from runs of different sizes: world_size {sorted(worlds)}")
    world = next(iter(worlds), None)
    if world is not None and sorted(ranks) != list(range(world)):
        raise ValueError(f"a run of world_size {world} needs one profile per rank 0...{world - 1}, "
                         f"got ranks {sorted(ranks)}")
    roots = {p.module_types.get("", "") for p in loaded}
    if len(roots) > 1:
        raise ValueError(f"the profiles are of different models: {sorted(roots)}")
    order = sorted(range(len(loaded)), key=lambda i: ranks[i])
    profiles = [loaded[i] for i in order]
    ranks = [ranks[i] for i in order]
    global_flops = global_macs = 0
    for k, p in enumerate(profiles):
        for r in p.records:
            if r.flops is None or r.phase == "optimizer":  # (as the ranks' totals: the loss's work in, the
                continue  # optimizer's in its own column)
            if r.global_flops is not None:  # a DTensor op: the same logical op on every rank, once
                if k == 0:
                    global_flops += r.global_flops
                    global_macs += r.global_macs or 0
            else:
                global_flops += r.flops
                global_macs += r.macs or 0
    modules: dict[str, dict[str, Any]] = {}
    for p in profiles:
        for path, m in p.by_module().items():
            entry = modules.setdefault(path, {"module_type": m.module_type, "depth": m.depth, "flops": 0, "macs": 0,
                                              "time_ms": None, "comm_bytes": 0, "comm_time_ms": None,
                                              "backward_comm_bytes": 0})
            entry["flops"] += m.flops
            entry["macs"] += m.macs
            entry["comm_bytes"] += m.comm_bytes
            entry["backward_comm_bytes"] += m.backward_comm_bytes
            for key, value in (("time_ms", m.time_ms), ("comm_time_ms", m.comm_time_ms)):
                if value is not None:
                    entry[key] = (entry[key] or 0.0) + value
    rank_flops = [p.total_flops for p in profiles]
    rank_time = [p.total_time_ms for p in profiles]
    comm_times = [r.time_ms for p in profiles for r in p.records
                  if r.status is Status.COMMUNICATION and r.time_ms is not None]
    # the backward's collectives too (DDP's all-reduces, FSDP's reduce-scatters): as their bytes are
    comm_times += [p.backward["comm_time_ms"] for p in profiles
                   if p.backward is not None and p.backward.get("comm_time_ms") is not None]
    return MergedProfile(
        profiles=tuple(profiles), ranks=tuple(ranks), total_flops=sum(rank_flops),
        total_macs=sum(p.total_macs for p in profiles), global_flops=global_flops, global_macs=global_macs,
        rank_flops=tuple(rank_flops), rank_time_ms=tuple(rank_time),
        flops_imbalance=_imbalance([float(f) for f in rank_flops]),
        time_imbalance=_imbalance(rank_time),  # type: ignore[arg-type]
        comm_bytes=sum(r.comm_bytes or 0 for p in profiles for r in p.records)
        + sum(p.backward.get("comm_bytes", 0) for p in profiles if p.backward is not None),
        comm_time_ms=sum(comm_times) if comm_times else None, modules=modules)

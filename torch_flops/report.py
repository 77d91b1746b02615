"""Turns records into text and files. Computes nothing about the model; never runs it.

Numbers are shown readable (``4.09 G``, ``25.6 M``, ``3.21 ms``, ``1.50 MiB``); every function
that returns rows returns raw numbers, formatting happens only in the ``*_table``/``*_text`` ones.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable, Sequence
from typing import Any

from tabulate import tabulate

from torch_flops.records import NodeRecord, Profile, Status

__all__ = [
    "NODE_COLUMNS",
    "format_bytes",
    "format_count",
    "format_time_ms",
    "max_memory_text",
    "node_rows",
    "node_table",
    "total_flops_text",
    "total_time_text",
    "write_csv",
]

NODE_COLUMNS: tuple[str, ...] = (
    "node", "op", "target", "module_path", "module_type", "status", "flops", "macs", "time_ms",
    "mem_before", "mem_after", "mem_delta", "output_shape",
)

_SUFFIXES = ((10**15, "P"), (10**12, "T"), (10**9, "G"), (10**6, "M"), (10**3, "K"))


def format_count(n: float | None, unit: str = "") -> str:
    """``4089184256 -> '4.09 G'`` (three significant digits); ``None -> '-'``."""
    if n is None:
        return "-"
    for scale, suffix in _SUFFIXES:
        if abs(n) >= scale:
            return f"{_three_digits(n / scale)} {suffix}{unit}"
    if isinstance(n, float) and not n.is_integer():
        return f"{_three_digits(n)} {unit}".rstrip()
    return f"{int(n)} {unit}".rstrip()


def _three_digits(x: float) -> str:
    if abs(x) >= 100:
        return f"{x:.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def format_bytes(n: int | None) -> str:
    """Binary units: ``1572864 -> '1.50 MiB'``; signed for deltas."""
    if n is None:
        return "-"
    sign = "-" if n < 0 else ""
    value = float(abs(n))
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{sign}{int(value)} B" if unit == "B" else f"{sign}{_three_digits(value)} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_time_ms(ms: float | None) -> str:
    """``3.2104 -> '3.21 ms'``, ``0.0123 -> '12.3 us'``, ``1530.0 -> '1.53 s'``."""
    if ms is None:
        return "-"
    if ms >= 1000:
        return f"{_three_digits(ms / 1000)} s"
    if ms >= 1:
        return f"{_three_digits(ms)} ms"
    return f"{_three_digits(ms * 1000)} us"


def _shape_text(shape: Any) -> str:
    if shape is None:
        return "-"
    if all(isinstance(s, int) for s in shape):
        return "(" + ", ".join(str(s) for s in shape) + ")"
    return "[" + ", ".join(_shape_text(s) for s in shape) + "]"


def node_rows(records: Iterable[NodeRecord]) -> list[list[Any]]:
    """One list per node, in ``NODE_COLUMNS`` order, raw values."""
    return [
        [r.name, r.op, r.target, r.module_path, r.module_type, r.status.value, r.flops, r.macs, r.time_ms,
         r.mem_before, r.mem_after, r.mem_delta, r.output_shape]
        for r in records
    ]


def node_table(records: Sequence[NodeRecord]) -> str:
    """The per-node table as text, with readable numbers and a total row."""
    headers = ["node", "target", "module", "status", "FLOPs", "MACs", "time", "mem after", "mem delta",
               "output shape"]
    rows = [
        [r.name, r.target, r.module_path or "-", r.status.value if r.status is not Status.COUNTED else "",
         format_count(r.flops), format_count(r.macs), format_time_ms(r.time_ms), format_bytes(r.mem_after),
         format_bytes(r.mem_delta), _shape_text(r.output_shape)]
        for r in records
    ]
    flops = sum(r.flops for r in records if r.flops is not None)
    macs = sum(r.macs for r in records if r.macs is not None)
    times = [r.time_ms for r in records if r.time_ms is not None]
    rows.append(["total", "", "", "", format_count(flops), format_count(macs),
                 format_time_ms(sum(times) if times else None), "", "", ""])
    return tabulate(rows, headers=headers, disable_numparse=True,
                    colalign=("left", "left", "left", "left", "right", "right", "right", "right", "right",
                              "left"))


def total_flops_text(profile: Profile) -> str:
    text = (f"Total FLOPs: {profile.total_flops:,} ({format_count(profile.total_flops, 'FLOPs')}), "
            f"MACs: {profile.total_macs:,} ({format_count(profile.total_macs, 'MACs')})")
    unsupported = profile.unsupported
    if unsupported:
        nodes = sum(unsupported.values())
        listed = ", ".join(f"{t} x{c}" for t, c in sorted(unsupported.items()))
        text += f"\n{nodes} unsupported node(s) excluded from the total: {listed}"
    return text


def total_time_text(profile: Profile) -> str:
    t = profile.total_time_ms
    if t is None:
        return f"Total time: not measured (device {profile.device})"
    return f"Total time: {t:.3f} ms ({format_time_ms(t)}) on {profile.device}"


def max_memory_text(profile: Profile) -> str:
    m = profile.max_memory
    if m is None:
        return "Max memory: not measured"
    return f"Max memory: {m:,} bytes ({format_bytes(m)}, {profile.memory_source})"


def write_csv(records: Iterable[NodeRecord], path: str | os.PathLike[str], mode: str = "w") -> None:
    append = mode == "a" and os.path.exists(path) and os.path.getsize(path) > 0
    with open(path, mode, newline="") as f:
        writer = csv.writer(f)
        if not append:
            writer.writerow(NODE_COLUMNS)
        for row in node_rows(records):
            writer.writerow(["" if v is None else v for v in row])

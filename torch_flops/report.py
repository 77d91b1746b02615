"""Turns a :class:`~torch_flops.records.Profile` into text and files. Computes nothing about the
model; never runs it.

Every view (per node, per module, per operator, the module tree) is one tuple of :class:`Column`
specs: a name (the raw key of rows, CSV, dataframes), a header (the text tables'), a getter, a
formatter and an alignment. The same spec feeds :func:`rows_for` (raw numbers), the text tables
(:func:`table_text`, :func:`module_tree`), :func:`markdown`, :func:`csv_text` / :func:`write_csv`,
:func:`to_dataframe` and :func:`format_rows`. Numbers are shown readable (``4.09 G``, ``25.6 M``,
``3.21 ms``, ``1.50 MiB``); raw rows keep them as numbers.

Every text view opens with the model-level summary (:func:`model_summary` -> :class:`ModelSummary`,
rendered by :func:`summary_text`) and tables end with a short legend (:func:`legend_text`). Time
columns that no row has a value in (meta tensors) are left out. A profile timed with no warm-up
call (:func:`is_cold`) says so wherever a time is printed, with the hint :data:`WARM_HINT`.

Files are written atomically: to a temporary file in the same directory, then renamed over the
target, so a failed write leaves an earlier file intact.

JSON schema ``torch_flops.profile``, version 5
----------------------------------------------

One object::

    {
      "schema": "torch_flops.profile",   # always this string
      "version": 5,                      # int; readers refuse versions newer than they know
      "settings": {...},                 # the analyzer's options: warmup, repeat, strict,
                                         #   ignore_ops, mem_func_name, tracer (free-form object);
                                         #   under torch.distributed also rank, world_size
      "summary": {
        "params": int, "flops": int, "macs": int,          # totals (unsupported nodes excluded)
        "time_ms": float | null, "flops_per_s": float | null,
        "max_memory": int | null, "memory_source": str,    # bytes; how memory was measured
        "batch_size": int | null, "device": str, "tracer": str,   # "fx" | "export" | "graph_module"
        "nodes": int, "unsupported_nodes": int,
        "unsupported": {target: node count},
        "convention": str,               # since version 2: how flops/macs are counted
                                         #   ("torch_flops" | "flop_counter" | "macs" | "exact")
        "backward": null | {             # since version 4: after a backward (propagate(loss_fn=...))
          "flops": int, "macs": int, "time_ms": float | null, "recompute_flops": int,
          "recompute_macs": int, "saved_bytes": int, "unattributed_flops": int,
          "unattributed_macs": int, "unattributed_time_ms": float | null,
          "unattributed_mm_macs": int,   # since version 5 (absent in older documents): of
                                         #   unattributed_macs, FlopCounterMode's kernels'
          "unsupported": {aten op: count}, "errors": {aten op: message}, "ops": int,
          "comm_bytes": int, "comm_time_ms": float | null},
        "model": {                       # since version 5, in files written by profile_to_json
                                         #   (to_json, --format json): report.model_summary's numbers
          "model": str, "inputs": [{"name": str, "shape": [int, ...] | null, "dtype": str | null}],
          "params": int, "params_by_dtype": {dtype | "unknown": {"params": int, "bytes": int | null}},
          "model_bytes": int | null, "peak_memory": int | null, "memory_source": str,
          "macs": int, "flops": int, "step_flops": int,   # step: + backward + optimizer
          "phases": str,                 # what the latency covers: "forward", "forward + backward", ...
          "latency_ms": float | null,    # median; null untimed
          "latency_source": "calls" | "nodes" | null,   # per-call times, or the nodes' medians summed
          "spread_ms": [min, max] | null, "timed_calls": int,
          "warm": bool | null,           # a warm-up call ran first (null: unknown or untimed)
          "timing_note": str | null,     # set when the times include a cold first call
          "batch_size": int | null, "samples_per_s": float | null, "tokens": int | null,
          "tokens_per_s": float | null, "flops_per_s": float | null,   # achieved
          "device": str, "tracer": str}
      },
      "records": [                       # one per executed graph node, in execution order
        {"index": int, "name": str, "op": str, "target": str, "module_path": str,
         "module_type": str, "flops": int | null, "macs": int | null,
         "status": "counted" | "zero" | "ignored" | "unsupported" | "skipped"
                   | "communication",    # "communication": since version 4 (a collective)
         "time_ms": float | null,
         "mem_before": int | null, "mem_after": int | null, "mem_delta": int | null,
         "output_shape": [int, ...] | [shape | null, ...] | null,   # nested for tuple outputs
         "module_stack": [str, ...], "note": str,
         "phase": "forward" | "optimizer",   # since version 2; "optimizer" (version 4): a
                                         #   training step's update (torch_flops.training)
         "dtype": str | null,            # since version 2: the dtype the node computes in (its
                                         #   float operands'; a cast: its source's), e.g. "bfloat16";
                                         #   version 2 wrote the output's (they differ for casts and
                                         #   comparisons only)
         "graph": int,                   # since version 2: which captured graph (0 for one graph)
         "dot_outputs": int | null,      # since version 2: outputs the MACs are summed into
         "mm_macs": int | null,          # since version 2: MACs of matrix-multiply kernels
         "bytes_read": int | null,       # since version 3: bytes of the tensors it reads (inputs
                                         #   once, a module's parameters; see torch_flops.formulas)
         "bytes_written": int | null,    # since version 3: bytes it writes (null: older documents)
         # since version 4, null where they do not apply (and in older documents):
         "backward_flops": int | null, "backward_macs": int | null, "backward_time_ms": float | null,
         "recompute_flops": int | null, "recompute_macs": int | null, "saved_bytes": int | null,
         "comm_bytes": int | null,       # a collective's bytes this rank sends (distributed.py)
         "global_flops": int | null, "global_macs": int | null,   # an op on DTensors: the logical op
         "backward_comm_bytes": int | null,   # the collectives its backward ran
         "backward_mm_macs": int | null}  # since version 5: of backward_macs, those of the
                                         #   kernels FlopCounterMode counts on the device (the
                                         #   flop_counter convention's backward; null: all of them)
      ],
      "modules": {                       # every module path ("" = root), in the model's order
        path: {"module_type": str, "depth": int, "params": int, "own_params": int,
               "flops": int, "macs": int, "time_ms": float | null, "nodes": int,
               "unsupported": int, "bytes_read": int, "bytes_written": int,   # bytes: version 3
               "backward_flops": int | null, "backward_macs": int | null,      # version 4 from here
               "backward_time_ms": float | null, "optimizer_flops": int | null,
               "optimizer_time_ms": float | null, "comm_bytes": int, "comm_time_ms": float | null,
               "backward_comm_bytes": int}
      },
      "roofline": {                      # optional (to_json(hardware=...), --hardware): the
                                         #   profile on one part, see torch_flops.roofline
        "hardware": {"name": str, "description": str, "kind": "gpu" | "cpu" | "accelerator",
                     "peak": {dtype: FLOP/s}, "memory_bandwidth": float, "memory_bytes": int,
                     "sources": {figure: str}},
        "summary": {"hardware": str, "roofline_time_ms": float, "time_ms": float | null,
                    "memory_bound_share": float, "timed": bool},
        "nodes": [row, ...],             # one per node but the graph's plumbing, in order
        "modules": {path: row},
        # row: {"name", "module_path", "target", "dtype", "flops", "bytes", "intensity" (FLOP/B),
        #       "bound" ("compute" | "memory" | null), "roofline_time_ms", "compute_time_ms",
        #       "memory_time_ms", "time_ms", "achieved_flops_per_s", "achieved_bytes_per_s",
        #       "pct_of_roofline", "lost_time_ms"}   (the measured ones null unless timed there)
      }
    }

``summary`` and ``modules`` are derived from ``records`` (plus the parameter counts in
``modules[*].own_params``) and are there for readers that do not want to recompute them.

How the schema grows: a new field is added with a default that describes documents written
before it (``phase`` "forward", ``dtype`` null, ``graph`` 0, bytes null) and the version goes up
by one; readers fill the default in for older documents and ignore keys they do not know.
Removing or redefining a field is a new schema name, never a new version. (One exception, made
before any reader depended on it: version 3 sharpened ``dtype`` from the output's dtype to the
compute dtype the roofline needs; the two agree except for casts and comparisons.)

Chrome trace
------------

:func:`chrome_trace` builds a Trace Event Format document (``chrome://tracing``, Perfetto):
complete events (``"ph": "X"``, ``ts``/``dur`` in microseconds) on one thread, the nodes laid end
to end in execution order with their measured times, each nested in one slice per enclosing
module call (``"cat": "module"``) and in a root slice for the model; node slices have
``"cat": "node"`` and carry flops, macs, bytes read and written, target, status and output shape
in ``args``. Two counter tracks (``"ph": "C"``), "achieved FLOP/s" ("achieved MAC/s" in the
``macs`` convention) and "achieved bytes/s", step
to each node's FLOPs and bytes over its measured time as it starts and drop to 0 at the end.
"""

from __future__ import annotations

import csv
import dataclasses
import errno
import io
import json
import os
import stat
import sys
import tempfile
import textwrap
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from tabulate import tabulate

from torch_flops import hardware
from torch_flops._validate import check_choice, check_depth, check_int
from torch_flops.comm import rank_path
from torch_flops.hardware import HardwareSpec
from torch_flops.paths import parent as parent_module
from torch_flops.records import SCHEMA_NAME, SCHEMA_VERSION, ModuleStats, NodeRecord, Profile, is_internal
from torch_flops.roofline import Roofline

__all__ = [
    "GROUP_BY",
    "MODULE_COLUMNS",
    "NODE_COLUMNS",
    "OPERATOR_COLUMNS",
    "SCHEMA_NAME",
    "SCHEMA_VERSION",
    "TREE_COLUMNS",
    "WARM_HINT",
    "Column",
    "InputSummary",
    "ModelSummary",
    "Rows",
    "Text",
    "check_writable",
    "chrome_trace",
    "compiled_text",
    "csv_text",
    "format_bytes",
    "format_count",
    "format_percent",
    "format_rows",
    "format_time_ms",
    "hardware_text",
    "is_cold",
    "legend_text",
    "markdown",
    "max_memory_text",
    "model_profile_text",
    "model_summary",
    "module_tree",
    "node_rows",
    "node_table",
    "profile_from_json",
    "profile_to_json",
    "roofline_text",
    "rows_for",
    "snap",
    "summary_lines",
    "summary_text",
    "table_text",
    "timing_note",
    "to_dataframe",
    "top_modules_text",
    "total_flops_text",
    "total_time_text",
    "tree_rows",
    "write_atomic",
    "write_chrome_trace",
    "write_csv",
]

GroupBy = Literal["node", "module", "operator"]
GROUP_BY: tuple[str, ...] = ("node", "module", "operator")

# ---------------------------------------------------------------------- number formats
_SUFFIXES = ((10**15, "P"), (10**12, "T"), (10**9, "G"), (10**6, "M"), (10**3, "K"))


def format_count(n: float | None, unit: str = "") -> str:
    """``4089184256 -> '4.09 G'`` (three significant digits); ``None -> '-'``. The unit is the one the
    rounded number needs: ``999999 -> '1.00 M'``, not ``'1000 K'``."""
    if n is None:
        return "-"
    if isinstance(n, float):
        n = snap(n)  # the unit too is chosen from the snapped value
    k = next((k for k, (scale, _) in enumerate(_SUFFIXES) if abs(n) >= scale), len(_SUFFIXES))
    if k == len(_SUFFIXES):
        if isinstance(n, float) and not n.is_integer():
            text = _three_digits(n)
            if abs(float(text)) < 1000:
                return f"{text} {unit}".rstrip()
        elif abs(n) < 1000:
            return f"{int(n)} {unit}".rstrip()
    k = min(k, len(_SUFFIXES) - 1)
    text = _three_digits(n / _SUFFIXES[k][0])
    if abs(float(text)) >= 1000 and k > 0:  # (999999: '1000 K' is '1.00 M')
        k -= 1
        text = _three_digits(n / _SUFFIXES[k][0])
    return f"{text} {_SUFFIXES[k][1]}{unit}"


def snap(x: float) -> float:
    """``x`` read to 12 significant digits, before any number is rounded for print: a total that lands
    on a rounding edge (4.865) prints the same whichever order its terms were added in (Python
    3.12's ``sum`` compensates, 3.11's does not). The HTML report snaps the same way
    (``toPrecision(12)``)."""
    return float(f"{x:.12g}")


def _three_digits(x: float) -> str:
    """Three significant digits (four for 1000 to 1023, in binary units), the digits after the point
    chosen from the rounded number: ``9.996 -> '10.0'``, ``99.95 -> '100'``."""
    x = snap(x)
    if abs(float(f"{x:.1f}")) >= 100:
        return f"{x:.0f}"
    if abs(float(f"{x:.2f}")) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def _in_units(value: float, units: Sequence[tuple[float, str]], step: float) -> str:
    """``value`` in the largest of ``units`` (ascending ``(size, name)``) it reaches, moved one up when its
    three digits round to ``step`` (the ratio of two units) or more: ``999.9 ms -> '1.00 s'``."""
    k = max((k for k, (size, _) in enumerate(units) if value >= size), default=0)
    text = _three_digits(value / units[k][0])
    if float(text) >= step and k + 1 < len(units):
        k += 1
        text = _three_digits(value / units[k][0])
    return f"{text} {units[k][1]}"


_BINARY = ((1, "B"), (1024, "KiB"), (1024**2, "MiB"), (1024**3, "GiB"), (1024**4, "TiB"))
_TIMES = ((1e-6, "ns"), (1e-3, "us"), (1.0, "ms"), (1000.0, "s"))


def format_bytes(n: int | None) -> str:
    """Binary units: ``1572864 -> '1.50 MiB'``; signed for deltas. The unit is the one the rounded
    number needs: ``1048572 -> '1.00 MiB'``, not ``'1024 KiB'``."""
    if n is None:
        return "-"
    sign = "-" if n < 0 else ""
    if abs(n) < 1024:
        return f"{sign}{int(abs(n))} B"
    return sign + _in_units(float(abs(n)), _BINARY, 1024)


def format_time_ms(ms: float | None) -> str:
    """``3.2104 -> '3.21 ms'``, ``0.0123 -> '12.3 us'``, ``0.0000042 -> '4.20 ns'``, ``1530.0 -> '1.53 s'``;
    a negative time (a node faster than its roofline) keeps its sign. The unit is the one the rounded
    number needs: ``999.9 -> '1.00 s'``."""
    if ms is None:
        return "-"
    ms = snap(ms)  # the unit too is chosen from the snapped value
    if ms < 0:
        return "-" + format_time_ms(-ms)
    if ms == 0:
        return "0.00 us"
    return _in_units(ms, _TIMES, 1000)


def format_percent(part: float | None, whole: float | None) -> str:
    """``(1, 8) -> '12.50%'``; ``'-'`` when either is None or the whole is 0."""
    return _format_pct(_percent(part, whole))


def _percent(part: float | None, whole: float | None) -> float | None:
    if part is None or not whole:
        return None
    return 100 * part / whole


def _format_pct(value: float | None) -> str:
    return "-" if value is None else f"{snap(value):.2f}%"


def _plain_shape(shape: Any) -> Any:
    """A shape as plain nested tuples (``torch.Size`` is a tuple whose text differs), None kept."""
    return tuple(_plain_shape(s) for s in shape) if isinstance(shape, tuple) else shape


def _shape_text(shape: Any) -> str:
    """``(2, 4)``; several outputs ``[(2, 4), (4)]``; a symbolic size (a compiled graph's with
    dynamic shapes, kept as its text: ``s33``) as it is."""
    if shape is None:
        return "-"
    if isinstance(shape, str):
        return shape
    if all(isinstance(s, (int, str)) for s in shape):
        return "(" + ", ".join(str(s) for s in shape) + ")"
    return "[" + ", ".join(_shape_text(s) for s in shape) + "]"


def _blank_zero(n: int | None) -> str:
    return str(n) if n else ""


def _blank_zero_count(n: int | None) -> str:
    """A count, blank when 0 or None (a column shown only where something happened)."""
    return format_count(n) if n else ""


def _blank_none_count(n: int | None) -> str:
    return "" if n is None else format_count(n)


def _blank_none_bytes(n: int | None) -> str:
    return "" if n is None else format_bytes(n)


def _blank_zero_bytes(n: int | None) -> str:
    return format_bytes(n) if n else ""


def _unsupported_list(unsupported: Mapping[str, int]) -> str:
    """``"torch.mystery x1, Foo x2"``: the one way unsupported targets are listed."""
    return ", ".join(f"{target} x{count}" for target, count in sorted(unsupported.items()))


# ---------------------------------------------------------------------- column specs
@dataclass(frozen=True)
class Column:
    """One column of one view."""

    name: str  #: raw key: rows_for / CSV / dataframe column, format_rows key
    header: str | None  #: text-table header; None: a raw-only column
    get: Callable[[Any, Any], Any]  #: (row item, view context) -> raw value
    fmt: Callable[[Any], str] = str  #: raw value -> table text
    align: Literal["left", "right"] = "right"
    raw: bool = True  #: part of the raw rows (False: a text-only column such as "% time")
    optional: bool = False  #: left out of text tables when empty in every row
    #: a measured time (or a number made from one): left out of text tables when no row has a value
    #: (a profile on meta tensors, a backward that was not timed), rather than a column of "-"
    timed: bool = False


def _attr(name: str) -> Callable[[Any, Any], Any]:
    return lambda item, _ctx: getattr(item, name)


def _not_optimizer(name: str) -> Callable[[Any, Any], Any]:
    """A node's forward field: None on a training step's optimizer node, whose work the
    ``optimizer_*`` columns show (as the module and operator views keep it out of ``flops``)."""
    return lambda r, _c: None if r.phase == "optimizer" else getattr(r, name)


def _optimizer(name: str) -> Callable[[Any, Any], Any]:
    """An optimizer node's own field (``flops`` -> ``optimizer_flops``); None on other nodes."""
    return lambda r, _c: getattr(r, name) if r.phase == "optimizer" else None


def _pct_of_root(name: str) -> Callable[[Any, Any], Any]:
    return lambda m, root: _percent(getattr(m, name), getattr(root, name))


def _pct_of_total(name: str) -> Callable[[Any, Any], Any]:
    return lambda o, total: _percent(getattr(o, name), total[name])


NODE_VIEW: tuple[Column, ...] = (
    Column("node", "node", _attr("name"), align="left"),
    Column("op", None, _attr("op")),
    Column("target", "target", _attr("target"), align="left"),
    Column("module_path", "module", _attr("module_path"), lambda p: p or "-", "left"),
    Column("module_type", None, _attr("module_type")),
    Column("status", "status", lambda r, _c: r.status.value, align="left"),
    Column("flops", "FLOPs", _not_optimizer("flops"), format_count),
    Column("macs", "MACs", _not_optimizer("macs"), format_count),
    Column("time_ms", "time", _not_optimizer("time_ms"), format_time_ms, timed=True),
    Column("mem_before", "mem before", _attr("mem_before"), format_bytes),
    Column("mem_after", "mem after", _attr("mem_after"), format_bytes),
    Column("mem_delta", "mem delta", _attr("mem_delta"), format_bytes),
    Column("output_shape", "output shape", lambda r, _c: _plain_shape(r.output_shape), _shape_text, "left"),
    Column("phase", None, _attr("phase")),
    Column("dtype", None, _attr("dtype")),
    Column("bytes_read", None, _attr("bytes_read"), format_bytes),
    Column("bytes_written", None, _attr("bytes_written"), format_bytes),
)
MODULE_VIEW: tuple[Column, ...] = (
    Column("module", "module", _attr("path"), lambda p: p or "(root)", "left"),
    Column("module_type", "type", _attr("module_type"), align="left"),
    Column("depth", None, _attr("depth")),
    Column("nodes", "nodes", _attr("nodes")),
    Column("params", "params", _attr("params"), format_count),
    Column("own_params", None, _attr("own_params"), format_count),
    Column("flops", "FLOPs", _attr("flops"), format_count),
    Column("macs", "MACs", _attr("macs"), format_count),
    Column("time_ms", "time", _attr("time_ms"), format_time_ms, timed=True),
    Column("time_pct", "% time", _pct_of_root("time_ms"), _format_pct, raw=False, timed=True),
    Column("unsupported", "unsupported", _attr("unsupported"), _blank_zero, optional=True),
    Column("bytes_read", None, _attr("bytes_read"), format_bytes),
    Column("bytes_written", None, _attr("bytes_written"), format_bytes),
)
OPERATOR_VIEW: tuple[Column, ...] = (
    Column("operator", "operator", _attr("operator"), align="left"),
    Column("calls", "calls", _attr("calls")),
    Column("flops", "FLOPs", _attr("flops"), format_count),
    Column("flops_pct", "% FLOPs", _pct_of_total("flops"), _format_pct, raw=False),
    Column("macs", "MACs", _attr("macs"), format_count),
    Column("time_ms", "time", _attr("time_ms"), format_time_ms, timed=True),
    Column("time_pct", "% time", _pct_of_total("time_ms"), _format_pct, raw=False, timed=True),
    Column("unsupported", "unsupported", _attr("unsupported"), _blank_zero, optional=True),
    Column("bytes_read", None, _attr("bytes_read"), format_bytes),
    Column("bytes_written", None, _attr("bytes_written"), format_bytes),
)


@dataclass(frozen=True)
class _TreeRow:
    module: ModuleStats | _OwnParameters
    label: str  #: indented name and type, as the tree shows it
    text_only: bool = False  #: not one of the raw rows


@dataclass(frozen=True)
class _OwnParameters:
    """The tree's row for the parameters a module with submodules owns itself (a ViT's class
    token), so that its children's rows add up to it; it counts nothing else."""

    path: str
    depth: int
    params: int
    module_type: str = ""
    macs: None = None
    flops: None = None
    time_ms: None = None
    flops_per_s: None = None


TREE_VIEW: tuple[Column, ...] = (
    Column("label", "module", lambda t, _root: t.label, align="left", raw=False),
    Column("module", None, lambda t, _root: t.module.path),
    Column("module_type", None, lambda t, _root: t.module.module_type),
    Column("depth", None, lambda t, _root: t.module.depth),
    Column("params", "params", lambda t, _root: t.module.params, format_count),
    Column("params_pct", "% params", lambda t, root: _percent(t.module.params, root.params), _format_pct),
    Column("macs", "MACs", lambda t, _root: t.module.macs, format_count),
    Column("macs_pct", "% MACs", lambda t, root: _percent(t.module.macs, root.macs), _format_pct),
    Column("flops", "FLOPs", lambda t, _root: t.module.flops, format_count),
    Column("flops_pct", "% FLOPs", lambda t, root: _percent(t.module.flops, root.flops), _format_pct),
    Column("time_ms", "latency", lambda t, _root: t.module.time_ms, format_time_ms, timed=True),
    Column("time_pct", "% latency", lambda t, root: _percent(t.module.time_ms, root.time_ms), _format_pct,
           timed=True),
    Column("flops_per_s", "FLOP/s", lambda t, _root: t.module.flops_per_s, format_count, timed=True),
)


def _get(name: str) -> Callable[[Any, Any], Any]:
    """A field that some rows lack (the tree's own-parameters row): None there."""
    return lambda item, _ctx: getattr(item, name, None)


def _tree_get(name: str) -> Callable[[Any, Any], Any]:
    return lambda t, _root: getattr(t.module, name, None)


#: the columns a view gains when a backward ran (``Profile.has_backward``); the optimizer's only
#: show in a training step (optional: left out of text when empty)
NODE_BACKWARD: tuple[Column, ...] = (
    Column("backward_flops", "bwd FLOPs", _get("backward_flops"), format_count),
    Column("backward_macs", "bwd MACs", _get("backward_macs"), format_count),
    Column("backward_time_ms", "bwd time", _get("backward_time_ms"), format_time_ms, timed=True),
    Column("recompute_flops", "recompute FLOPs", _get("recompute_flops"), _blank_zero_count, optional=True),
    Column("recompute_macs", None, _get("recompute_macs")),
    Column("saved_bytes", "saved", _get("saved_bytes"), format_bytes),
    Column("optimizer_flops", "optim FLOPs", _optimizer("flops"), _blank_none_count, optional=True),
    Column("optimizer_time_ms", None, _optimizer("time_ms")),
    Column("step_flops", "step FLOPs", _get("step_flops"), format_count),  # an optimizer node's: its update
)
MODULE_BACKWARD: tuple[Column, ...] = (
    Column("backward_flops", "bwd FLOPs", _get("backward_flops"), format_count),
    Column("backward_macs", "bwd MACs", _get("backward_macs"), format_count),
    Column("backward_time_ms", "bwd time", _get("backward_time_ms"), format_time_ms, timed=True),
    Column("optimizer_flops", "optim FLOPs", _get("optimizer_flops"), _blank_none_count, optional=True),
    Column("optimizer_time_ms", None, _get("optimizer_time_ms")),
    Column("step_flops", "step FLOPs", _get("step_flops"), format_count),
)
OPERATOR_BACKWARD: tuple[Column, ...] = (
    Column("backward_flops", "bwd FLOPs", _get("backward_flops"), format_count),
    Column("backward_macs", "bwd MACs", _get("backward_macs"), format_count),
    Column("backward_time_ms", "bwd time", _get("backward_time_ms"), format_time_ms, timed=True),
    Column("optimizer_flops", "optim FLOPs", _get("optimizer_flops"), _blank_none_count, optional=True),
    Column("optimizer_time_ms", None, _get("optimizer_time_ms")),
    Column("step_flops", "step FLOPs", _get("step_flops"), format_count),
)
TREE_BACKWARD: tuple[Column, ...] = (
    Column("backward_flops", "bwd FLOPs", _tree_get("backward_flops"), format_count),
    Column("backward_time_ms", "bwd latency", _tree_get("backward_time_ms"), format_time_ms, timed=True),
    Column("optimizer_flops", "optim FLOPs", _tree_get("optimizer_flops"), _blank_none_count, optional=True),
    Column("step_flops", "step FLOPs", _tree_get("step_flops"), format_count),
)


#: the columns a view gains when collectives ran (torch_flops.comm)
NODE_COMM: tuple[Column, ...] = (
    Column("comm_bytes", "comm", _get("comm_bytes"), _blank_none_bytes),
    Column("backward_comm_bytes", "bwd comm", _get("backward_comm_bytes"), _blank_none_bytes, optional=True),
    Column("global_flops", "global FLOPs", _get("global_flops"), _blank_none_count),
    Column("global_macs", None, _get("global_macs")),
)
MODULE_COMM: tuple[Column, ...] = (
    Column("comm_bytes", "comm", _get("comm_bytes"), format_bytes),
    Column("comm_time_ms", "comm time", _get("comm_time_ms"), format_time_ms, timed=True),
    Column("backward_comm_bytes", "bwd comm", _get("backward_comm_bytes"), _blank_zero_bytes, optional=True),
)


TREE_COMM: tuple[Column, ...] = (
    Column("comm_bytes", "comm", _tree_get("comm_bytes"), _blank_none_bytes),
    Column("comm_time_ms", "comm time", _tree_get("comm_time_ms"), format_time_ms, timed=True),
    Column("backward_comm_bytes", "bwd comm", _tree_get("backward_comm_bytes"), _blank_zero_bytes, optional=True),
)


def _view(view: tuple[Column, ...], extra: tuple[Column, ...], backward: bool) -> tuple[Column, ...]:
    return view + extra if backward else view


def _has_comm(records: Sequence[NodeRecord]) -> bool:
    return any(r.comm_bytes is not None or r.global_flops is not None or r.backward_comm_bytes is not None
               for r in records)


def _raw_names(view: Sequence[Column]) -> tuple[str, ...]:
    return tuple(c.name for c in view if c.raw)


NODE_COLUMNS: tuple[str, ...] = _raw_names(NODE_VIEW)
MODULE_COLUMNS: tuple[str, ...] = _raw_names(MODULE_VIEW)
OPERATOR_COLUMNS: tuple[str, ...] = _raw_names(OPERATOR_VIEW)
TREE_COLUMNS: tuple[str, ...] = _raw_names(TREE_VIEW)

_FORMATTERS: dict[str, Callable[[Any], str]] = {
    c.name: c.fmt for view in (TREE_VIEW, OPERATOR_VIEW, MODULE_VIEW, NODE_VIEW, NODE_BACKWARD, MODULE_BACKWARD,
                               NODE_COMM, MODULE_COMM)
    for c in view
    if c.fmt is not str and c.name not in ("module", "module_path", "status", "unsupported")
}


# ---------------------------------------------------------------------- one dispatcher
@dataclass(frozen=True)
class _Table:
    """A view's items, its columns and the context their getters need, plus an optional total row
    (raw values by column name)."""

    columns: tuple[Column, ...]
    items: list[Any]
    context: Any = None
    total: Mapping[str, Any] | None = None

    def raw_rows(self) -> list[list[Any]]:
        columns = [c for c in self.columns if c.raw]
        ctx = self.context
        return [[c.get(item, ctx) for c in columns] for item in self.items if not getattr(item, "text_only", False)]

    def text(self) -> tuple[list[str], list[list[str]], list[str]]:
        """(headers, formatted rows with the total row, alignments) of the text columns."""
        columns = [c for c in self.columns if c.header is not None]
        ctx = self.context
        rows = [[c.fmt(c.get(item, ctx)) for c in columns] for item in self.items]
        if self.total is not None:
            total = self.total
            rows.append([c.fmt(total[c.name]) if c.name in total else "" for c in columns])
        keep = [i for i, c in enumerate(columns) if (not c.optional or any(row[i] for row in rows))
                and not (c.timed and all(row[i] in ("-", "") for row in rows))]
        return ([columns[i].header for i in keep], [[row[i] for i in keep] for row in rows],  # type: ignore[misc]
                [columns[i].align for i in keep])


def _node_table(records: Sequence[NodeRecord], all_nodes: bool = True) -> _Table:
    """The node view; without ``all_nodes`` the graph's plumbing (records.is_internal) is left
    out. The total row sums the model's nodes either way."""
    forward = [r for r in records if r.phase != "optimizer"]  # the optimizer's: their own columns
    flops = sum(r.flops for r in forward if r.flops is not None)
    macs = sum(r.macs for r in forward if r.macs is not None)
    times = [r.time_ms for r in forward if r.time_ms is not None and not is_internal(r)]
    total = {"node": "total", "flops": flops, "macs": macs, "time_ms": sum(times) if times else None}
    backward = _has_backward(records)
    if backward:
        bw_times = [r.backward_time_ms for r in records if r.backward_time_ms is not None]
        optimizer = [r for r in records if r.phase == "optimizer"]
        optimizer_flops = sum(r.flops or 0 for r in optimizer) if optimizer else None
        optimizer_times = [r.time_ms for r in optimizer if r.time_ms is not None]
        total.update(backward_flops=sum(r.backward_flops or 0 for r in records),
                     backward_macs=sum(r.backward_macs or 0 for r in records),
                     backward_time_ms=sum(bw_times) if bw_times else None,
                     saved_bytes=sum(r.saved_bytes or 0 for r in records),
                     optimizer_flops=optimizer_flops,
                     optimizer_time_ms=sum(optimizer_times) if optimizer_times else None,
                     step_flops=flops + sum(r.backward_flops or 0 for r in records) + (optimizer_flops or 0))
    shown = list(records) if all_nodes else [r for r in records if not is_internal(r)]
    columns = _view(_view(NODE_VIEW, NODE_BACKWARD, backward), NODE_COMM, _has_comm(records))
    return _Table(columns, shown, total=total)


def _has_backward(records: Sequence[NodeRecord]) -> bool:
    return any(r.backward_flops is not None or r.phase != "forward" for r in records)


def _module_table(profile: Profile, depth: int = -1) -> _Table:
    modules = profile.by_module()
    columns = _view(_view(MODULE_VIEW, MODULE_BACKWARD, profile.has_backward), MODULE_COMM,
                    _has_comm(profile.records))
    shown = [m for m in modules.values() if depth < 0 or m.depth <= depth]
    return _Table(columns, shown, context=modules[""])


def _operator_table(profile: Profile) -> _Table:
    ops = profile.by_operator()
    total = {"operator": "total", "calls": len(profile.records), "flops": profile.total_flops,
             "macs": profile.total_macs, "time_ms": profile.total_time_ms,
             "unsupported": sum(o.unsupported for o in ops.values())}
    if profile.has_backward:
        root = profile.by_module()[""]
        total.update(backward_flops=profile.total_backward_flops, backward_macs=profile.total_backward_macs,
                     backward_time_ms=profile.total_backward_time_ms, optimizer_flops=root.optimizer_flops,
                     optimizer_time_ms=root.optimizer_time_ms, step_flops=root.step_flops)
    return _Table(_view(OPERATOR_VIEW, OPERATOR_BACKWARD, profile.has_backward), list(ops.values()),
                  context=total, total=total)


def _tree_table(profile: Profile, depth: int) -> _Table:
    check_depth("depth", depth)
    modules = profile.by_module()
    order = _tree_order(modules)
    has_children = {parent for _, parent, level in order if level}
    rows = []
    for path, parent, level in order:
        m = modules[path]
        if depth >= 0 and m.depth > depth:
            continue
        if path == "":
            label = m.module_type or "(root)"
        else:
            name = path[len(parent) + 1:] if parent else path
            label = f"{name} ({m.module_type})" if m.module_type else name
        rows.append(_TreeRow(m, "  " * level + label))
        if m.own_params and path in has_children and (depth < 0 or m.depth < depth):
            rows.append(_TreeRow(_OwnParameters(path, m.depth + 1, m.own_params), "  " * (level + 1) +
                                 "(own parameters)", text_only=True))
    columns = _view(_view(TREE_VIEW, TREE_BACKWARD, profile.has_backward), TREE_COMM, _has_comm(profile.records))
    if is_cold(profile):  # the tree says so in its header; the legend and the summary give the hint
        columns = tuple(dataclasses.replace(c, header="latency (cold)") if c.name == "time_ms" else c
                        for c in columns)
    return _Table(columns, rows, context=modules[""])


def _table_for(profile: Profile, group_by: GroupBy, all_nodes: bool = True, depth: int = -1,
               sort_by: str | None = None, top: int | None = None) -> _Table:
    """The one ``group_by`` dispatcher; ``depth`` (modules only), ``sort_by`` and ``top`` as in
    :func:`table_text`."""
    check_depth("depth", depth)
    if depth != -1 and group_by != "module":
        raise ValueError(f"depth applies to group_by='module' (the module tree has its own depth), not "
                         f"group_by={group_by!r}")
    if group_by == "node":
        table = _node_table(profile.records, all_nodes)
    elif group_by == "module":
        table = _module_table(profile, depth)
    elif group_by == "operator":
        table = _operator_table(profile)
    else:
        raise ValueError(f"group_by must be one of {GROUP_BY}, got {group_by!r}")
    return _ranked(table, sort_by, top)


#: short names ``sort_by`` takes besides the raw column names
_SORT_ALIASES = {"time": "time_ms", "bwd_time": "backward_time_ms", "bytes": "bytes_read"}


def _ranked(table: _Table, sort_by: str | None, top: int | None) -> _Table:
    """The rows by ``sort_by`` (largest first, None last; text ascending), then the first ``top``;
    ``top`` alone ranks by FLOPs. The total row stays the whole table's, and says so when rows
    were left out."""
    if sort_by is None and top is None:
        return table
    if top is not None:
        check_int("top", top, 1)
    key = sort_by if sort_by is not None else "flops"
    name = _SORT_ALIASES.get(key, key)
    column = next((c for c in table.columns if c.name == name and c.raw), None)
    if column is None:
        choices = sorted({c.name for c in table.columns if c.raw} | {a for a, n in _SORT_ALIASES.items()
                                                                      if any(c.name == n for c in table.columns)})
        raise ValueError(f"sort_by must be one of {tuple(choices)} for this table, got {key!r}")
    ctx = table.context

    def order(item: Any) -> tuple[int, Any]:
        value = column.get(item, ctx)
        if value is None:
            return (2, 0)
        return (1, value) if isinstance(value, str) else (0, -value)

    items = sorted(table.items, key=order)
    total = table.total
    if top is not None and top < len(items):
        if total is not None:
            first = table.columns[0].name
            total = {**total, first: f"total of all {len(items)}"}
        items = items[:top]
    return _Table(table.columns, items, ctx, total)


def markdown_cell(text: str) -> str:
    """``text`` safe in one cell (or bullet) of a GitHub Markdown table: ``|`` escaped, line breaks
    (a module name may hold one) as ``<br>``, so that a row stays one row."""
    return text.replace("|", "\\|").replace("\r\n", "<br>").replace("\n", "<br>").replace("\r", "<br>")


def _tabulated(table: _Table, tablefmt: str = "simple", escape: bool = False) -> str:
    headers, rows, aligns = table.text()
    if escape:
        rows = [[markdown_cell(cell) for cell in row] for row in rows]
    return tabulate(rows, headers=headers, tablefmt=tablefmt, disable_numparse=True, colalign=aligns)


# ---------------------------------------------------------------------- rows
class Rows(list):  # type: ignore[type-arg]
    """What the ``print_*`` methods return: a plain list of row lists (compare it, index it, hand it
    to pandas), whose repr is one line, so that a REPL does not echo thousands of rows after the
    printed table. ``str(rows)`` and ``list(rows)`` show every row; ``columns`` names them."""

    def __init__(self, rows: Iterable[Any] = (), columns: Sequence[str] = ()) -> None:
        super().__init__(rows)
        self.columns: tuple[str, ...] = tuple(columns)

    def __repr__(self) -> str:
        names = ", ".join(self.columns[:5]) + (", ..." if len(self.columns) > 5 else "")
        return f"<{len(self)} rows x {len(self.columns)} columns ({names}): list(rows) for the values>"

    def __str__(self) -> str:
        return list.__repr__(self)


class Text(str):
    """Printed text that a method also returns: a ``str`` whose repr is one line at a REPL."""

    __slots__ = ()

    def __repr__(self) -> str:
        first = self.split("\n", 1)[0]
        return f"<text, {self.count(chr(10)) + 1} lines: {first[:60]!r}{'...' if len(first) > 60 else ''}>"


def rows_for(profile: Profile, group_by: GroupBy = "node", all_nodes: bool = True, *, depth: int = -1,
             sort_by: str | None = None, top: int | None = None) -> tuple[tuple[str, ...], list[list[Any]]]:
    """``(columns, raw rows)`` of one grouping: ``"node"`` (every node, or without ``all_nodes``
    only the model's: see ``records.is_internal``), ``"module"`` (down to ``depth``; -1 = all) or
    ``"operator"``; ``sort_by`` a raw column (largest first) and ``top`` the first rows only."""
    table = _table_for(profile, group_by, all_nodes, depth, sort_by, top)
    return _raw_names(table.columns), table.raw_rows()


def node_rows(records: Sequence[NodeRecord]) -> list[list[Any]]:
    """One list per node, in ``node_columns(records)`` order (``NODE_COLUMNS``, plus the
    backward's when one ran), raw values."""
    return _node_table(records).raw_rows()


def node_columns(records: Sequence[NodeRecord]) -> tuple[str, ...]:
    """The columns of :func:`node_rows`: ``NODE_COLUMNS``, plus ``NODE_BACKWARD``'s with a
    backward and ``NODE_COMM``'s with collectives or DTensors."""
    return _raw_names(_node_table(records).columns)


def tree_columns(profile: Profile) -> tuple[str, ...]:
    """The columns of :func:`tree_rows`: ``TREE_COLUMNS``, plus ``TREE_BACKWARD``'s with a backward
    and ``TREE_COMM``'s with collectives."""
    return _raw_names(_view(_view(TREE_VIEW, TREE_BACKWARD, profile.has_backward), TREE_COMM,
                            _has_comm(profile.records)))


def tree_rows(profile: Profile, depth: int = -1) -> list[list[Any]]:
    """The module tree (:func:`tree_columns`, raw values; percentages of the root as 0-100 floats,
    None where undefined), depth first, down to ``depth`` (0 = root only, -1 = all)."""
    return _tree_table(profile, depth).raw_rows()


def format_rows(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[list[Any]]:
    """The same rows with the numbers as the tables show them (``'4.09 G'``, ``'3.21 ms'``,
    ``'1.50 MiB'``, ``'12.50%'``); other values unchanged."""
    formatters = [_FORMATTERS.get(c) for c in columns]
    return [[f(v) if f is not None else v for f, v in zip(formatters, row)] for row in rows]


# ---------------------------------------------------------------------- tables and text
def node_table(records: Sequence[NodeRecord], all_nodes: bool = False) -> str:
    """The per-node table as text, with readable numbers and a total row (the graph's plumbing,
    parameter reads and export's checks, only with ``all_nodes``)."""
    return _tabulated(_node_table(records, all_nodes))


def table_text(profile: Profile, group_by: GroupBy = "node", all_nodes: bool = False, *, depth: int = -1,
               sort_by: str | None = None, top: int | None = None) -> str:
    """One row per node (with a total row; the graph's plumbing only with ``all_nodes``), per
    module (full paths in the model's order, each including its submodules; down to ``depth``,
    -1 = all) or per operator (most FLOPs first, with a total row). ``sort_by``: a raw column
    name (``"flops"``, ``"macs"``, ``"time"``, ``"params"``, ...), largest first; ``top``: only the
    first rows (by FLOPs when no ``sort_by`` is given); the total row stays the whole model's.
    Time columns that no row has a value in (meta tensors) are left out."""
    return _tabulated(_table_for(profile, group_by, all_nodes, depth, sort_by, top))


def _tree_order(modules: Mapping[str, ModuleStats]) -> list[tuple[str, str, int]]:
    """``(path, parent, level)`` depth first in the model's order; a path's parent is its longest
    dotted prefix that is a module ("" when none)."""
    children: dict[str, list[str]] = {}
    parents: dict[str, str] = {}
    for path in modules:
        if path == "":
            continue
        up = parents[path] = parent_module(path, modules)
        children.setdefault(up, []).append(path)
    order: list[tuple[str, str, int]] = []
    stack: list[tuple[str, int]] = [("", 0)]
    while stack:
        path, level = stack.pop()
        order.append((path, parents.get(path, ""), level))
        stack.extend((c, level + 1) for c in reversed(children.get(path, ())))
    return order


def module_tree(profile: Profile, depth: int = -1, roofline: Roofline | None = None) -> str:
    """The module tree in the model's structure: per module its parameters, MACs, FLOPs and
    latency with their share of the whole model, and the achieved FLOP/s; with a ``roofline``
    (:func:`torch_flops.roofline.roofline`), each module's roofline time and bound too, and its %
    of roofline when it was timed on that hardware."""
    table = _tree_table(profile, depth)
    if roofline is not None:
        extra: tuple[Column, ...] = (Column("roofline", "roofline", lambda t, _c: _roof(roofline, t, "roofline_time_ms"), format_time_ms),
                 Column("bound", "bound", lambda t, _c: _roof(roofline, t, "bound") or "-", align="left"))
        if roofline.timed:
            extra += (Column("pct", "% roofline", lambda t, _c: _roof(roofline, t, "pct_of_roofline"), _format_pct),)
        table = _Table(table.columns + extra, table.items, table.context, table.total)
    headers, rows, aligns = table.text()
    # a plain table (tabulate's "simple" look) that keeps the labels' leading spaces
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if a == "left" else c.rjust(w) for c, w, a in zip(cells, widths, aligns)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def _roof(roofline: Roofline, row: _TreeRow, attr: str) -> Any:
    found = roofline.modules.get(row.module.path) if not row.text_only else None
    return getattr(found, attr) if found is not None else None


def hardware_text(specs: Sequence[HardwareSpec]) -> str:
    """The hardware table: each spec's dense peaks (TFLOP/s), memory bandwidth and size."""
    keys = [k for k in hardware.DTYPES if any(k in spec.peak for spec in specs)]
    short = {"float64": "fp64", "float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
    headers = ["name", *(short.get(k, k) for k in keys), "TB/s", "GiB", "description"]
    rows = [[spec.name, *(f"{spec.peak[k] / 1e12:g}" if k in spec.peak else "-" for k in keys),
             f"{spec.memory_bandwidth / 1e12:g}", f"{spec.memory_bytes / 2**30:g}", spec.description] for spec in specs]
    return tabulate(rows, headers=headers, disable_numparse=True) + (
        "\ndense peak TFLOP/s per dtype (no 2:4 sparsity; int8 in TOP/s), memory bandwidth (TB/s, 10^12 bytes/s) "
        "and size (GiB, 2^30 bytes: a vendor's \"80GB\" of memory); each figure's source: "
        "torch_flops.hardware.get(name).sources")


def roofline_text(roofline: Roofline, top: int = 10) -> str:
    """The roofline summary and the ``top`` nodes and modules losing most time (measured -
    roofline, when timed on this hardware) or predicted slowest."""
    spec = roofline.hardware
    total = roofline.total_roofline_ms
    peaks = ", ".join(f"{k} {format_count(v, 'FLOP/s' if k != 'int8' else 'OP/s')}" for k, v in spec.peak.items())
    unknown = roofline.unknown_flops_nodes
    lines = [f"Roofline on {spec.name} ({spec.description}): {format_count(spec.memory_bandwidth, 'B/s')} memory, "
             + f"dense peaks {peaks}",
             f"predicted {format_time_ms(total)}"
             + (f", measured {format_time_ms(roofline.total_time_ms)}" if roofline.timed else "")
             + f"; {100 * roofline.memory_bound_share:.1f}% of the predicted time is memory-bound"
             + (f"; {unknown} node(s) without a FLOPs formula priced by their bytes alone" if unknown else "")]
    what = "losing most time" if roofline.timed else "predicted slowest"
    for title, rows, is_module in ((f"Top {top} nodes {what}:", roofline.ranked(top), False),
                                   (f"Top {top} modules {what}:", roofline.ranked(top, modules=True), True)):
        if not rows:  # a model without submodules has no module ranking
            continue
        headers = ["module" if is_module else "node", "target", "FLOPs", "bytes", "FLOP/B", "bound", "roofline"]
        if roofline.timed:
            headers += ["measured", "% roofline", "lost"]
        body = []
        for r in rows:
            cells = [r.name or "(root)", r.target, format_count(r.flops), format_bytes(r.bytes),
                     _format_intensity(r.intensity), r.bound or "-",
                     format_time_ms(r.roofline_time_ms)]
            if roofline.timed:
                cells += [format_time_ms(r.time_ms), _format_pct(r.pct_of_roofline), format_time_ms(r.lost_time_ms)]
            body.append(cells)
        aligns = ["left", "left"] + ["right"] * (len(headers) - 2)
        aligns[5] = "left"
        lines += ["", title, tabulate(body, headers=headers, disable_numparse=True, colalign=aligns)]
    return "\n".join(lines)


def _format_intensity(value: float | None) -> str:
    """FLOP per byte: 3 significant digits, whole numbers from 1000 up (1,555 rather than 1.56e+03)."""
    if value is None:
        return "-"
    value = snap(value)  # (as every number before it is rounded for print: the HTML page does the same)
    return f"{value:,.0f}" if value >= 999.5 else f"{value:.3g}"  # (999.6: '1,000', not '1e+03')


#: what each column header means, for the legend (units last)
_LEGEND: tuple[tuple[tuple[str, ...], str], ...] = (
    (("params",), "parameters"),
    (("MACs",), "multiply-accumulates"),
    (("FLOPs",), "2 x MACs + other float ops"),
    (("% params", "% MACs", "% FLOPs", "% latency", "% time"), "share of the whole model"),
    (("latency", "latency (cold)", "time"), "sum of the nodes' times"),
    (("FLOP/s",), "FLOPs / latency"),
    (("mem before", "mem after", "mem delta"), "live bytes"),
    (("bwd FLOPs", "bwd MACs", "bwd time", "bwd latency"), "its backward's"),
    (("saved",), "activations saved for backward"),
    (("fwd+bwd FLOPs", "step FLOPs"), "forward + backward (+ optimizer)"),
    (("optim FLOPs",), "the optimizer's update"),
    (("comm", "bwd comm"), "bytes its collectives send"),
    (("roofline",), "the hardware's lower bound on its time"),
)


def legend_text(profile: Profile, view: Literal["tree", "node", "module", "operator"] = "tree",
                roofline: Roofline | None = None, width: int = 110) -> str:
    """A short legend of the columns ``view``'s table shows and of the units, wrapped to ``width``
    (with the cold-call note when the times include one)."""
    check_choice("view", view, ("tree", *GROUP_BY))
    table = _tree_table(profile, -1) if view == "tree" else _table_for(profile, view)  # type: ignore[arg-type]
    headers = set(table.text()[0]) | ({"roofline"} if roofline is not None else set())
    timed = bool(headers & {"latency", "latency (cold)", "time", "bwd time", "bwd latency"})
    note = " (the first, cold, call: warmup=1 gives warm times)" if timed and is_cold(profile) else ""
    entries: list[str] = []
    for names, meaning in _LEGEND:
        shown = [n for n in names if n in headers]
        if not shown:
            continue
        if shown[0].startswith("% "):
            entries.append(f"% = {meaning}")
        elif shown[0] in ("latency", "latency (cold)", "time"):
            entries.append(f"{shown[0]} = {meaning}{note}")
        else:
            extra = f" ({profile.memory_source})" if shown[0] == "mem before" else ""
            entries.append(f"{', '.join(shown)} = {meaning}{extra}")
    entries.append("K, M, G, T = 10^3, 10^6, 10^9, 10^12; KiB, MiB, GiB = 2^10, 2^20, 2^30 bytes")
    return textwrap.fill("Legend: " + "; ".join(entries) + ".", width=width, break_long_words=False,
                         break_on_hyphens=False, subsequent_indent="  ")


def total_flops_text(profile: Profile) -> str:
    text = (f"Total FLOPs: {profile.total_flops:,} ({format_count(profile.total_flops, 'FLOPs')}), "
            f"MACs: {profile.total_macs:,} ({format_count(profile.total_macs, 'MACs')})")
    unsupported = profile.unsupported
    if unsupported:
        text += (f"\n{sum(unsupported.values())} unsupported node(s) excluded from the total: "
                 f"{_unsupported_list(unsupported)}")
    return text


def total_time_text(profile: Profile) -> str:
    t = profile.total_time_ms
    if t is None:
        return f"Total time: not measured (device {profile.device})"
    note = timing_note(profile)
    return f"Total time: {snap(t):.3f} ms ({format_time_ms(t)}) on {profile.device}" + (f"; {note}" if note else "")


def max_memory_text(profile: Profile) -> str:
    m = profile.max_memory
    if m is None:
        return "Max memory: not measured"
    return f"Max memory: {m:,} bytes ({format_bytes(m)}, {profile.memory_source})"


# ---------------------------------------------------------------------- the model-level summary
#: the hint every cold timing carries
WARM_HINT = "warmup=1 (CLI: --warmup 1) gives warm timings"


def is_cold(profile: Profile) -> bool:
    """Timed with no warm-up run (``settings["warmup"] == 0``): the times include a first call's
    one-off costs (allocator, caches, lazy initialisation), often many times a warm call's."""
    return profile.total_time_ms is not None and profile.settings.get("warmup") == 0


def timing_note(profile: Profile) -> str | None:
    """How to read the profile's times when they include a cold first call (see :func:`is_cold`);
    None when warm, untimed, or not known (a training step, an older file)."""
    if not is_cold(profile):
        return None
    repeat = profile.settings.get("repeat", 1)
    if isinstance(repeat, int) and repeat > 1:
        return f"no warm-up: the first of the {repeat} timed calls was cold; {WARM_HINT}"
    return f"first (cold) call: no warm-up ran; {WARM_HINT}"


@dataclass(frozen=True)
class InputSummary:
    """One input of the model as its graph's input node recorded it."""

    name: str
    shape: tuple[Any, ...] | None
    dtype: str | None

    @property
    def is_tokens(self) -> bool:
        """Token ids: an integer tensor of 2 dimensions (batch x tokens)."""
        return (self.dtype in _INTEGER_DTYPES and isinstance(self.shape, tuple) and len(self.shape) == 2
                and all(isinstance(d, int) for d in self.shape))


_INTEGER_DTYPES = ("int64", "int32", "int16", "int8", "uint8")


@dataclass(frozen=True)
class ModelSummary:
    """The model-level numbers a profile comes down to (what profiling guides list first).

    Every number is computed from the profile; None where it cannot be (untimed, unknown batch)."""

    model: str  #: the root module's class
    inputs: tuple[InputSummary, ...]
    params: int
    #: parameter dtype -> (parameters, bytes); "unknown" holds the parameters of modules that ran no
    #: node (their dtype is not in the profile). The dtype is the one the module's own nodes compute
    #: in (a module call's is its parameters'), so a mixed-precision module counts in its compute dtype.
    params_by_dtype: Mapping[str, tuple[int, int | None]]
    model_bytes: int | None  #: bytes of the parameters of known dtype
    peak_memory: int | None  #: peak activation memory (bytes), as ``memory_source`` measures it
    memory_source: str
    macs: int
    flops: int  #: forward; ``step_flops`` adds the backward and the optimizer
    step_flops: int
    phases: str  #: what the latency covers: "forward", "forward + backward", "... + optimizer"
    latency_ms: float | None  #: median over the timed calls (see ``latency_source``); None untimed
    #: "calls": the median over the timed calls of each one's time (its nodes' times summed:
    #: ``settings["run_times_ms"]``);
    #: "nodes": the sum of each node's median time (the model's own work; no per-call times kept)
    latency_source: str | None
    spread_ms: tuple[float, float] | None  #: (min, max) over the timed calls; None with fewer than 2
    timed_calls: int  #: how many calls were timed (``repeat``); 0 untimed
    warm: bool | None  #: a warm-up call ran first; None when not known or untimed
    timing_note: str | None  #: see :func:`timing_note`
    batch_size: int | None
    samples_per_s: float | None  #: batch / latency
    tokens: int | None  #: tokens per call (batch x sequence of the first token-id input)
    tokens_per_s: float | None
    flops_per_s: float | None  #: achieved: step FLOPs / latency
    device: str
    tracer: str

    def as_dict(self) -> dict[str, Any]:
        """Raw numbers, as in the JSON's ``summary.model``."""
        data = dataclasses.asdict(self)
        data["inputs"] = [{"name": i.name, "shape": None if i.shape is None else list(i.shape), "dtype": i.dtype}
                          for i in self.inputs]
        data["params_by_dtype"] = {k: {"params": n, "bytes": b} for k, (n, b) in self.params_by_dtype.items()}
        data["spread_ms"] = None if self.spread_ms is None else list(self.spread_ms)
        return data


def _dtype_bytes(name: str) -> int | None:
    dtype = getattr(torch, name, None)
    return dtype.itemsize if isinstance(dtype, torch.dtype) else None


def _params_by_dtype(profile: Profile) -> dict[str, tuple[int, int | None]]:
    """Parameters per dtype: as the profile recorded them (``settings["param_dtypes"]``, each
    parameter once); for profiles without (older files), each module's own parameters in the dtype
    its own call computes in (a module call's record: its parameters'), else the commonest dtype of
    its nodes."""
    recorded = profile.settings.get("param_dtypes")
    if isinstance(recorded, Mapping) and recorded:
        return {k: (int(n), None if _dtype_bytes(k) is None else int(n) * _dtype_bytes(k))  # type: ignore[operator]
                for k, n in sorted(recorded.items(), key=lambda kv: -int(kv[1]))}
    seen: dict[str, Counter[str]] = {}
    calls: dict[str, str] = {}
    for r in profile.records:
        if r.dtype is None or r.phase != "forward":
            continue
        if r.op == "call_module":
            calls.setdefault(r.module_path, r.dtype)
        seen.setdefault(r.module_path, Counter())[r.dtype] += 1
    counts: Counter[str] = Counter()
    for path, n in profile.module_params.items():
        if not n:
            continue
        dtype = calls.get(path) or (seen[path].most_common(1)[0][0] if path in seen else "unknown")
        counts[dtype] += n
    return {k: (n, None if k == "unknown" or _dtype_bytes(k) is None else n * _dtype_bytes(k))  # type: ignore[operator]
            for k, n in counts.most_common()}


def _inputs(profile: Profile) -> tuple[InputSummary, ...]:
    return tuple(InputSummary(r.name, _plain_shape(r.output_shape) if isinstance(r.output_shape, tuple) else None,
                              r.dtype)
                 for r in profile.records if r.op == "placeholder" and r.graph == 0)


def model_summary(profile: Profile) -> ModelSummary:
    """The model-level summary of a profile (see :class:`ModelSummary`).

    Latency: with ``settings["run_times_ms"]`` (each timed call's end-to-end time, when the run
    recorded them) its median and (min, max); otherwise the sum of the nodes' median times, with no
    spread. A profile with a backward covers the whole step (forward, backward and optimizer times
    and FLOPs). Throughput is per second of that latency: samples (the batch) and, for token ids
    (an integer input of 2 dimensions), tokens."""
    root = profile.by_module()[""]
    settings = profile.settings
    phases = "forward"
    step_flops = profile.total_flops
    latency = profile.total_time_ms
    if profile.has_backward:
        phases = "forward + backward"
        step_flops += profile.total_backward_flops
        backward_time = profile.total_backward_time_ms
        latency = None if latency is None else latency + (backward_time or 0.0)
    if root.optimizer_flops is not None:
        phases += " + optimizer"
        step_flops += root.optimizer_flops
        latency = None if latency is None else latency + (root.optimizer_time_ms or 0.0)
    runs = settings.get("run_times_ms")
    source: str | None = None if latency is None else "nodes"
    spread = None
    repeat = settings.get("repeat", 1)
    timed_calls = 0 if latency is None else repeat if isinstance(repeat, int) else 1
    if isinstance(runs, (list, tuple)) and runs and all(isinstance(t, (int, float)) for t in runs):
        ordered = sorted(float(t) for t in runs)
        middle = len(ordered) // 2
        latency = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
        spread = (ordered[0], ordered[-1]) if len(ordered) > 1 else None
        source, timed_calls = "calls", len(ordered)
    warmup = settings.get("warmup")
    warm = None if latency is None or not isinstance(warmup, int) else warmup > 0
    inputs = _inputs(profile)
    tokens = next((i.shape[0] * i.shape[1] for i in inputs if i.is_tokens), None)  # type: ignore[index]
    seconds = latency / 1e3 if latency else None
    if "generation_steps" in settings:  # every step of a generation merged: no one call's throughput
        tokens = None
    by_dtype = _params_by_dtype(profile)
    known = [b for _, b in by_dtype.values() if b is not None]
    return ModelSummary(
        model=profile.module_types.get("", "") or "model", inputs=inputs, params=profile.total_params,
        params_by_dtype=by_dtype, model_bytes=sum(known) if known else None, peak_memory=profile.max_memory,
        memory_source=profile.memory_source, macs=profile.total_macs, flops=profile.total_flops,
        step_flops=step_flops, phases=phases, latency_ms=latency, latency_source=source, spread_ms=spread,
        timed_calls=timed_calls, warm=warm, timing_note=timing_note(profile), batch_size=profile.batch_size,
        samples_per_s=profile.batch_size / seconds if seconds and profile.batch_size
        and "generation_steps" not in settings else None,
        tokens=tokens, tokens_per_s=tokens / seconds if seconds and tokens else None,
        flops_per_s=step_flops / seconds if seconds else None, device=profile.device, tracer=profile.tracer)


def _input_text(i: InputSummary) -> str:
    shape = _shape_text(i.shape) if i.shape is not None else "-"
    return f"{i.name} {shape} {i.dtype or ''}".rstrip() + (" (token ids)" if i.is_tokens else "")


def _model_size_text(s: ModelSummary) -> str:
    if not s.params:
        return "0 B (no parameters)"
    parts = [f"{dtype} {format_count(n)} params x {b // n} B" for dtype, (n, b) in s.params_by_dtype.items()
             if dtype != "unknown" and b is not None and n]
    unknown = s.params_by_dtype.get("unknown")
    if s.model_bytes is None:
        return f"unknown (no node shows the dtype of the {format_count(s.params)} params)"
    text = f"{format_bytes(s.model_bytes)} ({', '.join(parts)})"
    return text + (f" + {format_count(unknown[0])} params of unknown dtype" if unknown else "")


def _latency_text(s: ModelSummary, device: str) -> str:
    if s.latency_ms is None:
        return f"not measured ({device})"
    text = format_time_ms(s.latency_ms)
    if s.phases != "forward":
        text += f" ({s.phases})"
    if s.latency_source == "calls" and s.timed_calls > 1 and s.spread_ms is not None:
        text += (f", median of {s.timed_calls} calls (min {format_time_ms(s.spread_ms[0])}, "
                 f"max {format_time_ms(s.spread_ms[1])})")
    elif s.timed_calls > 1:
        text += f", each node's median over {s.timed_calls} calls, summed"
    if s.timing_note:
        text += f"; {s.timing_note}"
    return text


def _throughput_text(s: ModelSummary) -> str:
    if s.latency_ms is None:
        return "-"
    parts = []
    if s.samples_per_s is not None:
        parts.append(f"{format_count(s.samples_per_s)} samples/s")
    if s.tokens_per_s is not None:
        parts.append(f"{format_count(s.tokens_per_s)} tokens/s")
    return ", ".join(parts) or "- (batch size unknown)"


def compiled_text(settings: Mapping[str, Any]) -> str:
    """The compiled program's facts, when the profile has them: a ``torch.compile``'d model's call
    (``settings["compiled_call"]``: its nodes are the original module's eager run) or the regions
    of :func:`torch_flops.profile_compiled` (``settings["compiled"]``)."""
    call = settings.get("compiled_call")
    if isinstance(call, Mapping):
        if not call.get("calls"):
            return f"{call.get('backend')}; not run ({call.get('nodes', '')})"
        compile_s = call.get("compile_s")
        backward = call.get("backward_ms")
        unforeseen = call.get("compiled_in_timed_calls") or 0
        return (f"{call.get('backend')}: forward {format_time_ms(call.get('forward_ms'))}"
                + (f", backward {format_time_ms(backward)}" if backward is not None else "")
                + f" ({call.get('time')}); compile "
                + (f"{compile_s:.2f} s (untimed warm-up)" if compile_s is not None else "done before")
                + f"; {call.get('frames_compiled', 0)} frame(s) compiled, {call.get('graph_breaks', 0)} graph "
                  f"break(s), {len(call.get('recompile_reasons') or ())} recompile(s)"
                + (f", {unforeseen} compile(s) inside the timed calls" if unforeseen else "")
                + "; node times: the original module's eager run")
    regions = settings.get("compiled")
    if isinstance(regions, Mapping) and "frames" in regions:
        return (f"Inductor regions: call {format_time_ms(regions.get('call_ms'))}; compile "
                f"{regions.get('compile_s', 0.0):.2f} s; {len(regions.get('frames') or ())} frame(s), "
                f"{len(regions.get('graph_breaks') or ())} graph break(s), {regions.get('recompiles', 0)} recompile(s)"
                + _eager_ops_text(regions))
    return ""


def _eager_ops_text(regions: Mapping[str, Any]) -> str:
    """The ops of a compiled program that ran eagerly outside its graphs: how many, their FLOPs,
    how many are not counted (a profile from before they were counted has only that number)."""
    uncounted = regions.get("eager_uncounted") or 0
    ops = regions.get("eager_ops", uncounted)
    if not ops:
        return ""
    frames = regions.get("frames_eager")
    text = f"; {ops} op(s) ran eagerly outside the compiled graphs" + (
        f" ({frames} frame(s) Dynamo did not compile)" if frames else "")
    if "eager_flops" in regions and uncounted < ops:
        text += f": {format_count(regions['eager_flops'], 'FLOPs')} counted"
        return text + (f", {uncounted} not counted" if uncounted else "")
    return text + ": timed, FLOPs not counted"


def summary_lines(profile: Profile) -> list[tuple[str, str]]:
    """``(label, text)`` of each line of :func:`summary_text` (the HTML header shows the same)."""
    s = model_summary(profile)
    unsupported = profile.unsupported
    n_unsupported = sum(unsupported.values())
    memory = s.peak_memory
    lines = [
        ("Model", s.model),
        ("Inputs", ", ".join(_input_text(i) for i in s.inputs) or "-"),
        ("Params", format_count(s.params)),
        ("Model size", _model_size_text(s)),
        ("MACs", format_count(s.macs, "MACs")),
        ("FLOPs", format_count(s.flops, "FLOPs") + (
            f" (step: {format_count(s.step_flops, 'FLOPs')}, {s.phases})" if s.phases != "forward" else "")),
        ("Latency", _latency_text(s, profile.device)),
        ("Throughput", "- (a generation's steps summed: see its tokens/s)"
         if "generation_steps" in profile.settings else _throughput_text(s)),
        ("FLOP/s", format_count(s.flops_per_s, "FLOP/s") + (" achieved" if s.flops_per_s is not None else "")),
        ("Peak memory", f"{format_bytes(memory)} ({profile.memory_source})" if memory is not None else "-"),
        ("Batch size", "unknown" if profile.batch_size is None else str(profile.batch_size)),
        ("Device", profile.device),
        ("Tracer", profile.tracer),
        *((("Compiled", compiled_text(profile.settings)),) if compiled_text(profile.settings) else ()),
        *((("Convention", profile.convention),) if profile.convention != "torch_flops" else ()),
        ("Nodes", str(len(profile.records))),
        ("Unsupported", (f"{n_unsupported} node(s), excluded: {_unsupported_list(unsupported)}"
                         if n_unsupported else "0") + _backward_unsupported_text(profile)),
    ]
    return lines


def _backward_unsupported_text(profile: Profile) -> str:
    """The backward's aten ops without a count (no formula, or one that failed), after the forward's."""
    backward = profile.backward or {}
    missing = dict(backward.get("unsupported") or {})
    for op in backward.get("errors") or {}:
        missing.setdefault(op, 0)
    if not missing:
        return ""
    listed = ", ".join(f"{op} x{n}" if n else f"{op} (formula failed)" for op, n in sorted(missing.items()))
    return f"; backward ops excluded: {listed}"


def summary_text(profile: Profile) -> str:
    """The model-level summary (:func:`model_summary`: model, inputs, parameters and model size by
    dtype, MACs, FLOPs, latency with its spread, throughput, achieved FLOP/s, peak memory) and the
    run facts, one per line."""
    lines = summary_lines(profile)
    width = max(len(k) for k, _ in lines) + 2
    title = "torch_flops profile"
    return "\n".join([title, "=" * len(title), *(f"{k + ':':<{width}}{v}" for k, v in lines)])


_TOP_METRICS = (("flops", "FLOPs", format_count), ("macs", "MACs", format_count), ("params", "params", format_count),
                ("time_ms", "latency", format_time_ms))


def top_modules_text(profile: Profile, k: int = 3, depth: int = -1) -> str:
    """Aggregated profile: the top ``k`` modules at ``depth`` (-1 = innermost; 0, the root alone,
    lists its children instead) by FLOPs, MACs, parameters and latency (latency only when timed),
    with their share of the model."""
    root = profile.by_module()[""]
    depth = 1 if depth == 0 else depth
    where = "innermost modules" if depth == -1 else f"modules at depth {depth}"
    lines = [f"Top {k} {where}:"]
    for attr, title, fmt in _TOP_METRICS:
        if attr == "time_ms" and root.time_ms is None:
            continue
        top = profile.top_modules(k, depth, "time" if attr == "time_ms" else attr)  # type: ignore[arg-type]
        items = [f"{m.path or '(root)'} ({m.module_type}) {fmt(getattr(m, attr))} "
                 f"{format_percent(getattr(m, attr), getattr(root, attr))}" for m in top]
        lines.append(f"  by {title + ':':<9} " + (", ".join(items) if items else "-"))
    return "\n".join(lines)


def model_profile_text(profile: Profile, depth: int = -1, top: int = 0, roofline: Roofline | None = None) -> str:
    """:func:`summary_text`, :func:`module_tree` down to ``depth`` (with roofline columns when a
    ``roofline`` is given) with its :func:`legend_text` and, when ``top`` > 0,
    :func:`top_modules_text` at the same depth."""
    parts = [summary_text(profile), module_tree(profile, depth, roofline) + "\n\n" + legend_text(profile, "tree",
                                                                                               roofline=roofline)]
    if top:
        parts.append(top_modules_text(profile, top, depth))
    return "\n\n".join(parts)


# ---------------------------------------------------------------------- exports
def markdown(profile: Profile, group_by: GroupBy = "node", all_nodes: bool = False, *, depth: int = -1,
             sort_by: str | None = None, top: int | None = None) -> str:
    """A one-line summary and the ``group_by`` table (as in :func:`table_text`) as GitHub-flavoured
    Markdown."""
    t = profile.total_time_ms
    summary = (f"**torch_flops profile**: {format_count(profile.total_params)} params, "
               f"{format_count(profile.total_macs, 'MACs')}, {format_count(profile.total_flops, 'FLOPs')}, "
               f"latency {format_time_ms(t) if t is not None else 'not measured'}"
               f"{' (first call, cold)' if is_cold(profile) else ''} on {profile.device} "
               f"(tracer {profile.tracer}, {sum(profile.unsupported.values())} unsupported node(s)"
               f"{'' if profile.convention == 'torch_flops' else f', convention {profile.convention}'})")
    table = _table_for(profile, group_by, all_nodes, depth, sort_by, top)
    return summary + "\n\n" + _tabulated(table, tablefmt="github", escape=True)


def _csv(columns: Sequence[str], rows: Iterable[Sequence[Any]], header: bool = True) -> str:
    """CSV text; None is an empty cell and a shape is written as the tables show it, ``(2, 4)``."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    # csv quotes a field holding a character of its line terminator, so a row with a lone "\r" (a
    # module name may hold one) goes through a "\r\n" writer, its own terminator put back to "\n"
    quoting_cr = csv.writer(row_buffer := io.StringIO(), lineterminator="\r\n")
    if header:
        writer.writerow(columns)
    shape = columns.index("output_shape") if "output_shape" in columns else -1
    for row in rows:
        cells = ["" if v is None else v for v in row]
        if shape >= 0 and row[shape] is not None:
            cells[shape] = _shape_text(row[shape])
        if any(isinstance(c, str) and "\r" in c for c in cells):
            row_buffer.seek(0)
            row_buffer.truncate()
            quoting_cr.writerow(cells)
            buffer.write(row_buffer.getvalue()[:-2] + "\n")
        else:
            writer.writerow(cells)
    return buffer.getvalue()


def csv_text(profile: Profile, group_by: GroupBy = "node", all_nodes: bool = True, depth: int = -1) -> str:
    """The raw rows of one grouping as CSV text (header first; None as an empty cell); ``depth``:
    with ``group_by="module"``, the modules down to that depth only."""
    columns, rows = rows_for(profile, group_by, all_nodes, depth=depth)
    return _csv(columns, rows)


def write_csv(records: Sequence[NodeRecord], path: str | os.PathLike[str], mode: str = "w") -> None:
    """The node rows as CSV; ``mode="a"`` appends to an existing file without a second header
    (``ValueError`` when its header names other columns: a profile with a backward has more); a
    device or a pipe is written into, with the header (without it onto a stream redirected to a
    file holding lines already: ``/dev/stdout >> rows.csv``)."""
    existing, header = "", True
    columns = node_columns(records)
    if mode == "a" and os.path.exists(path):
        target, special = write_target(path)
        if special:
            fd = _stream_fd(target)
            header = fd is None or not _appends_to_a_file(fd)
        else:
            with open(path, encoding="utf-8", newline="") as f:
                existing = f.read()
            found = next(csv.reader(io.StringIO(existing)), None) if existing else None
            names = list(columns)
            if found is not None and found != names:
                raise ValueError(f"cannot append to {os.fspath(path)!r}: its header has {len(found)} columns "
                                 f"({', '.join(found[:4])}...), these rows {len(names)} ({', '.join(names[:4])}...): "
                                 "write them to another file, or with mode='w'")
            header = not existing
    text = _csv(columns, node_rows(records), header=header)
    if existing and not existing.endswith("\n"):
        existing += "\n"
    write_atomic(path, existing + text)


def to_dataframe(profile: Profile, group_by: GroupBy = "node") -> Any:
    """The raw rows of one grouping as a ``pandas.DataFrame`` (pandas is an optional extra)."""
    columns, rows = rows_for(profile, group_by)
    try:
        import pandas as pd
    except ImportError as e:
        raise ImportError("to_dataframe needs pandas: pip install pandas (or torch_flops[pandas])") from e
    return pd.DataFrame(rows, columns=list(columns))


def _is_special(target: str) -> bool:
    """Whether ``target`` exists and is neither a regular file nor a directory (a device, a pipe)."""
    try:
        mode = os.stat(target).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def write_target(path: str | os.PathLike[str]) -> tuple[str, bool]:
    """Where writing ``path`` writes, and whether it is written into as it is (a device or a pipe,
    also through a link: ``/dev/stdout``); a symbolic link to a file is resolved (the file it
    points to is replaced, the link stays). ``OSError`` naming the cause for an empty path, a
    path naming a directory (``out.json/``) or a loop of links."""
    given = os.fspath(path)
    if not given:
        raise FileNotFoundError("cannot write '': the path is empty")
    if _is_special(given) or _stream_fd(given) is not None:  # (stat follows the links: /dev/stdout -> a pipe)
        return given, True
    target = given
    if os.path.islink(given):
        try:
            os.stat(given)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise OSError(errno.ELOOP, f"cannot write {given!r}: its symbolic links form a loop") from None
        target = os.path.realpath(given)
    if os.path.isdir(target):
        raise IsADirectoryError(f"cannot write {given!r}: it is a directory")
    if given.endswith(("/", os.sep)):
        raise IsADirectoryError(f"cannot write {given!r}: it names a directory (it ends with {given[-1]!r})")
    return target, False


def _stream_fd(path: str) -> int | None:
    """The file descriptor a path of the process's own streams names (``/dev/stdout``,
    ``/dev/stderr``, ``/dev/fd/N``, ``/proc/self/fd/N``, ``/proc/thread-self/fd/N``,
    ``/proc/<this pid>/fd/N``, however spelled), else None: written through it, so a redirection to a
    file (``>> run.log``) is appended to, not replaced or truncated."""
    path = os.path.normpath(os.path.abspath(path))
    if path.startswith("//"):  # (POSIX keeps a leading '//': the same root here)
        path = "/" + path.lstrip("/")
    if os.path.islink(path) and not path.startswith(("/dev/", "/proc/")):  # a link of one's own to a stream
        path = os.path.normpath(os.path.join(os.path.dirname(path), os.readlink(path)))
    if path in ("/dev/stdout", "/dev/stderr"):
        return 1 if path == "/dev/stdout" else 2
    parts = path.split("/")
    if len(parts) == 4 and parts[:3] == ["", "dev", "fd"] and parts[3].isdigit():
        return int(parts[3])
    if len(parts) == 5 and parts[:2] == ["", "proc"] and parts[3] == "fd" and parts[4].isdigit() \
            and parts[2] in ("self", "thread-self", str(os.getpid())):
        return int(parts[4])
    return None


def _appends_to_a_file(fd: int) -> bool:
    """Whether descriptor ``fd`` leads to a regular file that holds something already."""
    try:
        info = os.fstat(fd)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size > 0


def _fd_writable(fd: int) -> bool:
    """Whether descriptor ``fd`` is open for writing (where the system can tell)."""
    try:
        import fcntl
    except ImportError:  # (not POSIX: the write will tell)
        return True
    try:
        return fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR)
    except OSError:  # closed
        return False


def check_writable(path: str | os.PathLike[str]) -> None:
    """An ``OSError`` naming the cause unless a file can be written at ``path``: its directory
    exists and is writable, and ``path`` is not a directory (checked before long work)."""
    given = os.fspath(path)
    target, special = write_target(path)
    if special:  # /dev/null, a pipe: written into where it is, not replaced
        fd = _stream_fd(target)
        if not os.access(target, os.W_OK) or (fd is not None and not _fd_writable(fd)):
            raise PermissionError(f"cannot write {given!r}: it is not writable")
        return
    directory = os.path.dirname(os.path.abspath(target))
    if target != given:  # (a link: the messages name it, and where it points)
        given = f"{given} -> {target}"
    literal = os.path.dirname(target)  # (as the system resolves it: 'missing/..' needs 'missing')
    if literal and not os.path.isdir(literal):
        raise FileNotFoundError(f"cannot write {given!r}: no such directory {literal!r}")
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"cannot write {given!r}: no such directory {directory!r}")
    if not os.access(directory, os.W_OK):
        raise PermissionError(f"cannot write {given!r}: directory {directory!r} is not writable")
    try:  # what os.access cannot tell (root; /proc, a read-only mount): make the temporary file write_atomic would
        fd, probe = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=directory)
    except OSError as e:
        raise PermissionError(f"cannot write {given!r}: no file can be made in {directory!r} ({e.strerror})") from None
    os.close(fd)
    os.unlink(probe)


def write_atomic(path: str | os.PathLike[str], text: str | bytes) -> None:
    """Write ``text`` (or bytes) to a temporary file next to ``path``, then rename it over
    ``path``: a failure leaves whatever was at ``path`` untouched and no partial file behind. A
    path that is no regular file (``/dev/null``, ``/dev/stdout``, a named pipe) is written into as
    it is: renaming over it would replace the device or pipe with a file. A symbolic link is
    followed: the file it points to is replaced, the link stays."""
    check_writable(path)
    target, special = write_target(path)
    if special and (fd := _stream_fd(target)) is not None:  # through the descriptor: appended where it points
        data = text if isinstance(text, bytes) else text.encode("utf-8")
        for stream in (sys.stdout, sys.stderr):  # (what Python buffered for it goes first)
            if stream is not None:
                stream.flush()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        return
    if special:
        with open(target, "wb") as out:
            out.write(text if isinstance(text, bytes) else text.encode("utf-8"))  # never the locale's encoding
        return
    directory = os.path.dirname(os.path.abspath(target))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=directory)
    try:
        if isinstance(text, bytes):
            with os.fdopen(fd, "wb") as fb:
                fb.write(text)
                fb.flush()
                os.fsync(fb.fileno())
        else:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:  # never the locale's encoding
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
        # the permissions a plain open() would give (mkstemp makes the file private), or the old file's
        os.chmod(tmp, os.stat(target).st_mode & 0o7777 if os.path.exists(target) else 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _umask() -> int:
    """The process umask, read without changing it where the OS allows (Linux: /proc)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere reading it means setting it: put it straight back
    os.umask(mask)
    return mask


def profile_to_json(profile: Profile, path: str | os.PathLike[str] | None = None, indent: int | None = 2,
                    roofline: Roofline | None = None) -> str:
    """The profile as a ``torch_flops.profile`` JSON document (schema above), with the
    ``"roofline"`` object of a :class:`~torch_flops.roofline.Roofline` when given; also written to
    ``path`` when given."""
    doc = profile.to_dict()
    doc["summary"]["model"] = model_summary(profile).as_dict()
    if roofline is not None:
        doc["roofline"] = roofline.as_dict()
    text = json.dumps(doc, indent=indent, default=str)
    if path is not None:
        write_atomic(rank_path(path), text + "\n")
    return text


def profile_from_json(source: str | os.PathLike[str] | dict[str, Any]) -> Profile:
    """Read a profile back from :func:`profile_to_json`'s text, a file path or the parsed object."""
    return Profile.from_json(source)


def chrome_trace(profile: Profile) -> dict[str, Any]:
    """The Trace Event Format document described above; ``ValueError`` when no node was timed."""
    timed = [r for r in profile.records if r.time_ms is not None and not is_internal(r)]
    if not timed:
        why = "meta tensors are never timed: profile on cpu or an accelerator" if profile.device == "meta" else \
            "the model ran no op, or the timer gave no time"
        raise ValueError(f"a chrome trace needs measured times, and no node of this profile was timed ({why})")
    spans: list[tuple[int, int, int, dict[str, Any]]] = []  # (start ns, duration ns, level, event)
    open_modules: list[tuple[str, int]] = []  # (path, start ns)
    position = 0
    module_types = profile.module_types

    def close_to(level: int) -> None:
        while len(open_modules) > level:
            path, start = open_modules.pop()
            spans.append((start, position - start, len(open_modules) + 1, {
                "name": path, "cat": "module",
                "args": {"module_type": module_types.get(path, ""), "path": path}}))

    for r in timed:
        chain = r.module_chain
        same = 0
        while same < min(len(chain), len(open_modules)) and open_modules[same][0] == chain[same]:
            same += 1
        close_to(same)
        open_modules.extend((path, position) for path in chain[same:])
        duration = max(0, round(r.time_ms * 1e6))  # type: ignore[operator]
        spans.append((position, duration, len(chain) + 1, {
            "name": r.name, "cat": "node",
            "args": {"target": r.target, "op": r.op, "module": r.module_path, "status": r.status.value,
                     "flops": r.flops, "macs": r.macs, "time_ms": r.time_ms, "bytes_read": r.bytes_read or 0,
                     "bytes_written": r.bytes_written or 0, "output_shape": _shape_text(r.output_shape),
                     **({} if r.backward_flops is None else {  # after a backward: what this node's cost there
                         "backward_flops": r.backward_flops, "backward_macs": r.backward_macs,
                         "backward_time_ms": r.backward_time_ms, "saved_bytes": r.saved_bytes})}}))
        position += duration
    close_to(0)
    root_type = module_types.get("", "") or "model"
    spans.append((0, position, 0, {"name": root_type, "cat": "module",
                                   "args": {"module_type": root_type, "path": "", "flops": profile.total_flops,
                                            "macs": profile.total_macs}}))
    spans.sort(key=lambda s: (s[0], -s[1], s[2]))
    flop_track = "achieved MAC/s" if profile.convention == "macs" else "achieved FLOP/s"  # the unit counted
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "torch_flops"}},
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": f"forward on {profile.device}"}},
    ]
    for start, duration, _, event in spans:
        events.append({"name": event["name"], "cat": event["cat"], "ph": "X", "ts": start / 1000,
                       "dur": duration / 1000, "pid": 0, "tid": 0, "args": event["args"]})
        if event["cat"] == "node":
            # two counter tracks: what each node achieved while it ran (nodes run back to back)
            seconds = duration / 1e9
            args = event["args"]
            moved = args["bytes_read"] + args["bytes_written"]
            for track, value in ((flop_track, args["flops"] or 0), ("achieved bytes/s", moved)):
                events.append({"name": track, "ph": "C", "ts": start / 1000, "pid": 0, "tid": 0,
                               "args": {track.partition(" ")[2]: value / seconds if seconds else 0}})
    for track in (flop_track, "achieved bytes/s"):  # both drop to 0 when the run ends
        events.append({"name": track, "ph": "C", "ts": position / 1000, "pid": 0, "tid": 0,
                       "args": {track.partition(" ")[2]: 0}})
    return {
        "traceEvents": events, "displayTimeUnit": "ms",
        "otherData": {"source": "torch_flops", "device": profile.device, "tracer": profile.tracer,
                      "flops": profile.total_flops, "macs": profile.total_macs, "params": profile.total_params,
                      "time_ms": profile.total_time_ms},
    }


def write_chrome_trace(profile: Profile, path: str | os.PathLike[str]) -> None:
    """Write :func:`chrome_trace` as JSON to ``path`` (open it in chrome://tracing or ui.perfetto.dev)."""
    write_atomic(path, json.dumps(chrome_trace(profile)))

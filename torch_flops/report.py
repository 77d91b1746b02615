"""Turns records into text and files. Computes nothing about the model; never runs it.

Numbers are shown readable (``4.09 G``, ``25.6 M``, ``3.21 ms``, ``1.50 MiB``); every function
that returns rows returns raw numbers, formatting happens only in the ``*_table``/``*_text`` ones
(and in :func:`format_rows`, for callers that want the strings).

Views of one :class:`~torch_flops.records.Profile`:

* per node: :func:`node_rows`, :func:`node_table`, :func:`write_csv`
* per module: :func:`module_rows`, :func:`module_table`; as a tree: :func:`tree_rows`,
  :func:`module_tree`, with :func:`summary_text` above it in :func:`model_profile_text`
* per operator: :func:`operator_rows`, :func:`operator_table`
* top-k modules at a depth: :func:`top_modules_text`
* exports: :func:`profile_to_json` / :func:`profile_from_json`, :func:`markdown`,
  :func:`to_dataframe` (needs pandas), :func:`csv_text`, :func:`chrome_trace` /
  :func:`write_chrome_trace`

JSON schema ``torch_flops.profile``, version 1
----------------------------------------------

One object::

    {
      "schema": "torch_flops.profile",   # always this string
      "version": 1,                      # int; readers refuse versions newer than they know
      "settings": {...},                 # the analyzer's options: warmup, repeat, strict,
                                         #   ignore_ops, mem_func_name, tracer (free-form object)
      "summary": {
        "params": int, "flops": int, "macs": int,          # totals (unsupported nodes excluded)
        "time_ms": float | null, "flops_per_s": float | null,
        "max_memory": int | null, "memory_source": str,    # bytes; how memory was measured
        "batch_size": int | null, "device": str, "tracer": str,   # "fx" | "export" | "graph_module"
        "nodes": int, "unsupported_nodes": int,
        "unsupported": {target: node count}
      },
      "records": [                       # one per graph node, in execution order
        {"index": int, "name": str, "op": str, "target": str, "module_path": str,
         "module_type": str, "flops": int | null, "macs": int | null,
         "status": "counted" | "zero" | "ignored" | "unsupported", "time_ms": float | null,
         "mem_before": int | null, "mem_after": int | null, "mem_delta": int | null,
         "output_shape": [int, ...] | [shape | null, ...] | null,   # nested for tuple outputs
         "module_stack": [str, ...], "note": str}
      ],
      "modules": {                       # every module path ("" = root), in the model's order
        path: {"module_type": str, "depth": int, "params": int, "own_params": int,
               "flops": int, "macs": int, "time_ms": float | null, "nodes": int,
               "unsupported": int}
      }
    }

``summary`` and ``modules`` are derived from ``records`` (plus the parameter counts in
``modules[*].own_params``) and are there for readers that do not want to recompute them.
Adding keys does not change the version; removing or redefining one does. Readers ignore
unknown keys.

Chrome trace
------------

:func:`chrome_trace` builds a Trace Event Format document (``chrome://tracing``, Perfetto):
complete events (``"ph": "X"``, ``ts``/``dur`` in microseconds) on one thread, the nodes laid end
to end in execution order with their measured times, each nested in one slice per enclosing
module call (``"cat": "module"``) and in a root slice for the model; node slices have
``"cat": "node"`` and carry flops, macs, target, status and output shape in ``args``.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from tabulate import tabulate

from torch_flops.records import SCHEMA_NAME, SCHEMA_VERSION, ModuleStats, NodeRecord, Profile, Status

__all__ = [
    "GROUP_BY",
    "MODULE_COLUMNS",
    "NODE_COLUMNS",
    "OPERATOR_COLUMNS",
    "SCHEMA_NAME",
    "SCHEMA_VERSION",
    "TREE_COLUMNS",
    "chrome_trace",
    "csv_text",
    "format_bytes",
    "format_count",
    "format_percent",
    "format_rows",
    "format_time_ms",
    "markdown",
    "max_memory_text",
    "model_profile_text",
    "module_rows",
    "module_table",
    "module_tree",
    "node_rows",
    "node_table",
    "operator_rows",
    "operator_table",
    "profile_from_json",
    "profile_to_json",
    "rows_for",
    "summary_text",
    "table_text",
    "to_dataframe",
    "top_modules_text",
    "total_flops_text",
    "total_time_text",
    "tree_rows",
    "write_chrome_trace",
    "write_csv",
]

GroupBy = Literal["node", "module", "operator"]
GROUP_BY: tuple[str, ...] = ("node", "module", "operator")

NODE_COLUMNS: tuple[str, ...] = (
    "node", "op", "target", "module_path", "module_type", "status", "flops", "macs", "time_ms",
    "mem_before", "mem_after", "mem_delta", "output_shape",
)
MODULE_COLUMNS: tuple[str, ...] = (
    "module", "module_type", "depth", "nodes", "params", "own_params", "flops", "macs", "time_ms", "unsupported",
)
OPERATOR_COLUMNS: tuple[str, ...] = ("operator", "calls", "flops", "macs", "time_ms", "unsupported")
TREE_COLUMNS: tuple[str, ...] = (
    "module", "module_type", "depth", "params", "params_pct", "macs", "macs_pct", "flops", "time_ms",
    "time_pct", "flops_per_s",
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
    headers, rows, colalign = _node_view(records)
    return tabulate(rows, headers=headers, disable_numparse=True, colalign=colalign)


_View = tuple[list[str], list[list[str]], tuple[str, ...]]


def _node_view(records: Sequence[NodeRecord]) -> _View:
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
    return headers, rows, ("left", "left", "left", "left", "right", "right", "right", "right", "right", "left")


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


# ---------------------------------------------------------------------- rows and formatting
def format_percent(part: float | None, whole: float | None) -> str:
    """``(1, 8) -> '12.50%'``; ``'-'`` when either is None or the whole is 0."""
    if part is None or not whole:
        return "-"
    return f"{100 * part / whole:.2f}%"


def _percent(part: float | None, whole: float | None) -> float | None:
    if part is None or not whole:
        return None
    return 100 * part / whole


_FORMATTERS: dict[str, Callable[[Any], str]] = {
    **dict.fromkeys(("flops", "macs", "params", "own_params", "flops_per_s"), format_count),
    "time_ms": format_time_ms,
    **dict.fromkeys(("mem_before", "mem_after", "mem_delta"), format_bytes),
    **dict.fromkeys(("params_pct", "macs_pct", "time_pct"), lambda v: "-" if v is None else f"{v:.2f}%"),
    "output_shape": lambda v: _shape_text(v),
}


def format_rows(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[list[Any]]:
    """The same rows with the numbers as the tables show them (``'4.09 G'``, ``'3.21 ms'``,
    ``'1.50 MiB'``, ``'12.50%'``); other values unchanged."""
    formatters = [_FORMATTERS.get(c) for c in columns]
    return [[f(v) if f is not None else v for f, v in zip(formatters, row)] for row in rows]


def module_rows(profile: Profile) -> list[list[Any]]:
    """One list per module (``MODULE_COLUMNS``, raw values), in the model's order."""
    return [[m.path, m.module_type, m.depth, m.nodes, m.params, m.own_params, m.flops, m.macs, m.time_ms,
             m.unsupported] for m in profile.by_module().values()]


def operator_rows(profile: Profile) -> list[list[Any]]:
    """One list per operator (``OPERATOR_COLUMNS``, raw values), most FLOPs first."""
    return [[o.operator, o.calls, o.flops, o.macs, o.time_ms, o.unsupported]
            for o in profile.by_operator().values()]


def rows_for(profile: Profile, group_by: GroupBy = "node") -> tuple[tuple[str, ...], list[list[Any]]]:
    """``(columns, raw rows)`` of one grouping: ``"node"``, ``"module"`` or ``"operator"``."""
    if group_by == "node":
        return NODE_COLUMNS, node_rows(profile.records)
    if group_by == "module":
        return MODULE_COLUMNS, module_rows(profile)
    if group_by == "operator":
        return OPERATOR_COLUMNS, operator_rows(profile)
    raise ValueError(f"group_by must be one of {GROUP_BY}, got {group_by!r}")


def _tree_order(modules: dict[str, ModuleStats]) -> list[tuple[str, str, int]]:
    """``(path, parent, level)`` depth first in the model's order; a path's parent is its longest
    dotted prefix that is a module ("" when none)."""
    children: dict[str, list[str]] = {}
    parents: dict[str, str] = {}
    for path in modules:
        if path == "":
            continue
        parent = path
        while True:
            parent = parent.rpartition(".")[0]
            if parent == "" or parent in modules:
                break
        parents[path] = parent
        children.setdefault(parent, []).append(path)
    order: list[tuple[str, str, int]] = []
    stack: list[tuple[str, int]] = [("", 0)]
    while stack:
        path, level = stack.pop()
        order.append((path, parents.get(path, ""), level))
        stack.extend((c, level + 1) for c in reversed(children.get(path, ())))
    return order


def tree_rows(profile: Profile, depth: int = -1) -> list[list[Any]]:
    """The module tree (``TREE_COLUMNS``, raw values; percentages of the root as 0-100 floats,
    None where undefined), depth first, down to ``depth`` (0 = root only, -1 = all)."""
    _check_depth(depth)
    modules = profile.by_module()
    root = modules[""]
    rows = []
    for path, _, _ in _tree_order(modules):
        m = modules[path]
        if depth >= 0 and m.depth > depth:
            continue
        rows.append([m.path, m.module_type, m.depth, m.params, _percent(m.params, root.params), m.macs,
                     _percent(m.macs, root.macs), m.flops, m.time_ms, _percent(m.time_ms, root.time_ms),
                     m.flops_per_s])
    return rows


def _check_depth(depth: int) -> None:
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < -1:
        raise ValueError(f"depth must be an int >= 0, or -1 for all levels, got {depth!r}")


def _aligned(headers: Sequence[str], rows: Sequence[Sequence[str]], aligns: str) -> str:
    """A plain table (``tabulate``'s "simple" look) that keeps leading spaces, for the tree."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(cells, widths, aligns)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def module_tree(profile: Profile, depth: int = -1) -> str:
    """The module tree in the model's structure: per module its parameters, MACs, FLOPs and
    latency with their share of the whole model, and the achieved FLOP/s."""
    _check_depth(depth)
    modules = profile.by_module()
    root = modules[""]
    rows = []
    for path, parent, level in _tree_order(modules):
        m = modules[path]
        if depth >= 0 and m.depth > depth:
            continue
        if path == "":
            label = m.module_type or "(root)"
        else:
            name = path[len(parent) + 1:] if parent else path
            label = f"{name} ({m.module_type})" if m.module_type else name
        rows.append(["  " * level + label, format_count(m.params), format_percent(m.params, root.params),
                     format_count(m.macs), format_percent(m.macs, root.macs), format_count(m.flops),
                     format_time_ms(m.time_ms), format_percent(m.time_ms, root.time_ms),
                     format_count(m.flops_per_s)])
    headers = ["module", "params", "% params", "MACs", "% MACs", "FLOPs", "latency", "% latency", "FLOP/s"]
    return _aligned(headers, rows, "lrrrrrrrr")


def summary_text(profile: Profile) -> str:
    """The totals and run facts, one per line."""
    t = profile.total_time_ms
    unsupported = profile.unsupported
    n_unsupported = sum(unsupported.values())
    memory = profile.max_memory
    lines = [
        ("Params", format_count(profile.total_params)),
        ("MACs", format_count(profile.total_macs, "MACs")),
        ("FLOPs", format_count(profile.total_flops, "FLOPs")),
        ("Latency", format_time_ms(t) if t is not None else f"not measured ({profile.device})"),
        ("FLOP/s", format_count(profile.flops_per_s, "FLOP/s")),
        ("Max memory", f"{format_bytes(memory)} ({profile.memory_source})" if memory is not None else "-"),
        ("Batch size", "unknown" if profile.batch_size is None else str(profile.batch_size)),
        ("Device", profile.device),
        ("Tracer", profile.tracer),
        ("Nodes", str(len(profile.records))),
        ("Unsupported", str(n_unsupported) if not n_unsupported else
         f"{n_unsupported} node(s), excluded: " + ", ".join(f"{k} x{v}" for k, v in sorted(unsupported.items()))),
    ]
    width = max(len(k) for k, _ in lines) + 2
    title = "torch_flops profile"
    return "\n".join([title, "=" * len(title), *(f"{k + ':':<{width}}{v}" for k, v in lines)])


_TOP_METRICS = (("flops", "FLOPs"), ("macs", "MACs"), ("params", "params"), ("time", "latency"))


def top_modules_text(profile: Profile, k: int = 3, depth: int = -1) -> str:
    """Aggregated profile: the top ``k`` modules at ``depth`` (-1 = innermost) by FLOPs, MACs,
    parameters and latency (latency only when timed), with their share of the model."""
    root = profile.by_module()[""]
    where = "innermost modules" if depth == -1 else f"modules at depth {depth}"
    lines = [f"Top {k} {where}:"]
    for by, title in _TOP_METRICS:
        if by == "time" and root.time_ms is None:
            continue
        top = profile.top_modules(k, depth, by)  # type: ignore[arg-type]
        fmt = format_time_ms if by == "time" else format_count
        items = []
        for m in top:
            value = m.time_ms if by == "time" else getattr(m, by)
            whole = root.time_ms if by == "time" else getattr(root, by)
            items.append(f"{m.path or '(root)'} ({m.module_type}) {fmt(value)} {format_percent(value, whole)}")
        lines.append(f"  by {title + ':':<9} " + (", ".join(items) if items else "-"))
    return "\n".join(lines)


def model_profile_text(profile: Profile, depth: int = -1, top: int = 0) -> str:
    """:func:`summary_text`, :func:`module_tree` down to ``depth`` and, when ``top`` > 0,
    :func:`top_modules_text` at the same depth."""
    parts = [summary_text(profile), module_tree(profile, depth)]
    if top:
        parts.append(top_modules_text(profile, top, depth))
    return "\n\n".join(parts)


# ---------------------------------------------------------------------- grouped tables
def _module_view(profile: Profile) -> _View:
    modules = profile.by_module()
    total = modules[""].time_ms
    rows = [[m.path or "(root)", m.module_type, str(m.nodes), format_count(m.params), format_count(m.flops),
             format_count(m.macs), format_time_ms(m.time_ms), format_percent(m.time_ms, total),
             str(m.unsupported) if m.unsupported else ""] for m in modules.values()]
    headers = ["module", "type", "nodes", "params", "FLOPs", "MACs", "time", "% time", "unsupported"]
    return _drop_empty_last((headers, rows, ("left", "left", "right", "right", "right", "right", "right", "right",
                                             "right")))


def _drop_empty_last(view: _View) -> _View:
    """Leave the trailing "unsupported" column out when no row has anything in it."""
    headers, rows, colalign = view
    if any(row[-1] for row in rows):
        return view
    return headers[:-1], [row[:-1] for row in rows], colalign[:-1]


def _operator_view(profile: Profile) -> _View:
    ops = profile.by_operator()
    flops, time_ms = profile.total_flops, profile.total_time_ms
    rows = [[o.operator, str(o.calls), format_count(o.flops), format_percent(o.flops, flops), format_count(o.macs),
             format_time_ms(o.time_ms), format_percent(o.time_ms, time_ms),
             str(o.unsupported) if o.unsupported else ""] for o in ops.values()]
    unsupported = sum(o.unsupported for o in ops.values())
    rows.append(["total", str(len(profile.records)), format_count(flops), "", format_count(profile.total_macs),
                 format_time_ms(time_ms), "", str(unsupported) if unsupported else ""])
    headers = ["operator", "calls", "FLOPs", "% FLOPs", "MACs", "time", "% time", "unsupported"]
    return _drop_empty_last((headers, rows, ("left", "right", "right", "right", "right", "right", "right", "right")))


def _view(profile: Profile, group_by: GroupBy) -> _View:
    if group_by == "node":
        return _node_view(profile.records)
    if group_by == "module":
        return _module_view(profile)
    if group_by == "operator":
        return _operator_view(profile)
    raise ValueError(f"group_by must be one of {GROUP_BY}, got {group_by!r}")


def module_table(profile: Profile) -> str:
    """One row per module (full paths, the model's order), each including its submodules."""
    headers, rows, colalign = _module_view(profile)
    return tabulate(rows, headers=headers, disable_numparse=True, colalign=colalign)


def operator_table(profile: Profile) -> str:
    """One row per operator, most FLOPs first, with a total row."""
    headers, rows, colalign = _operator_view(profile)
    return tabulate(rows, headers=headers, disable_numparse=True, colalign=colalign)


def table_text(profile: Profile, group_by: GroupBy = "node") -> str:
    """:func:`node_table`, :func:`module_table` or :func:`operator_table`."""
    headers, rows, colalign = _view(profile, group_by)
    return tabulate(rows, headers=headers, disable_numparse=True, colalign=colalign)


# ---------------------------------------------------------------------- exports
def markdown(profile: Profile, group_by: GroupBy = "node") -> str:
    """A one-line summary and the ``group_by`` table as GitHub-flavoured Markdown."""
    headers, rows, colalign = _view(profile, group_by)
    t = profile.total_time_ms
    summary = (f"**torch_flops profile**: {format_count(profile.total_params)} params, "
               f"{format_count(profile.total_macs, 'MACs')}, {format_count(profile.total_flops, 'FLOPs')}, "
               f"latency {format_time_ms(t) if t is not None else 'not measured'} on {profile.device} "
               f"(tracer {profile.tracer}, {sum(profile.unsupported.values())} unsupported node(s))")
    rows = [[c.replace("|", "\\|") for c in row] for row in rows]
    return summary + "\n\n" + tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True,
                                       colalign=colalign)


def csv_text(profile: Profile, group_by: GroupBy = "node") -> str:
    """The raw rows of one grouping as CSV text (header first; None as an empty cell)."""
    columns, rows = rows_for(profile, group_by)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if v is None else v for v in row])
    return buffer.getvalue()


def to_dataframe(profile: Profile, group_by: GroupBy = "node") -> Any:
    """The raw rows of one grouping as a ``pandas.DataFrame`` (pandas is an optional extra)."""
    columns, rows = rows_for(profile, group_by)
    try:
        import pandas as pd
    except ImportError as e:
        raise ImportError("to_dataframe needs pandas: pip install pandas (or torch_flops[pandas])") from e
    return pd.DataFrame(rows, columns=list(columns))


def profile_to_json(profile: Profile, path: str | os.PathLike[str] | None = None, indent: int | None = 2) -> str:
    """The profile as a ``torch_flops.profile`` JSON document (schema above); also written to
    ``path`` when given."""
    text = json.dumps(profile.to_dict(), indent=indent, default=str)
    if path is not None:
        with open(path, "w") as f:
            f.write(text + "\n")
    return text


def profile_from_json(source: str | os.PathLike[str] | dict[str, Any]) -> Profile:
    """Read a profile back from :func:`profile_to_json`'s text, a file path or the parsed object."""
    return Profile.from_json(source)


def chrome_trace(profile: Profile) -> dict[str, Any]:
    """The Trace Event Format document described above; ``ValueError`` when no node was timed."""
    timed = [r for r in profile.records if r.time_ms is not None]
    if not timed:
        raise ValueError(f"a chrome trace needs measured times, and no node was timed on device {profile.device!r} "
                         "(meta tensors are never timed): profile on cpu or an accelerator")
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
                     "flops": r.flops, "macs": r.macs, "time_ms": r.time_ms,
                     "output_shape": _shape_text(r.output_shape)}}))
        position += duration
    close_to(0)
    root_type = module_types.get("", "") or "model"
    spans.append((0, position, 0, {"name": root_type, "cat": "module",
                                   "args": {"module_type": root_type, "path": "", "flops": profile.total_flops,
                                            "macs": profile.total_macs}}))
    spans.sort(key=lambda s: (s[0], -s[1], s[2]))
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "torch_flops"}},
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": f"forward on {profile.device}"}},
    ]
    for start, duration, _, event in spans:
        events.append({"name": event["name"], "cat": event["cat"], "ph": "X", "ts": start / 1000,
                       "dur": duration / 1000, "pid": 0, "tid": 0, "args": event["args"]})
    return {
        "traceEvents": events, "displayTimeUnit": "ms",
        "otherData": {"source": "torch_flops", "device": profile.device, "tracer": profile.tracer,
                      "flops": profile.total_flops, "macs": profile.total_macs, "params": profile.total_params,
                      "time_ms": profile.total_time_ms},
    }


def write_chrome_trace(profile: Profile, path: str | os.PathLike[str]) -> None:
    """Write :func:`chrome_trace` as JSON to ``path`` (open it in chrome://tracing or ui.perfetto.dev)."""
    trace = chrome_trace(profile)
    with open(path, "w") as f:
        json.dump(trace, f)

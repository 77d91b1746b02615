"""Compare two profiles, module by module and operator by operator, and gate on the change.

:func:`diff` takes two :class:`~torch_flops.records.Profile` objects (or their JSON files) and
returns a :class:`ProfileDiff`: one :class:`DiffRow` per module (matched by module path; a module
found in one profile only is ``added`` or ``removed``, and one that moved to a new path with the
same class and the same numbers, with its whole subtree, is ``renamed``) and per operator, with
the FLOPs, MACs, parameters, bytes moved and time of each side, their change and relative change,
plus the backward's and the optimizer's when a profile has them. Rows are sorted by absolute
change (FLOPs first, then parameters, bytes, time). Views: :meth:`ProfileDiff.text`,
:meth:`~ProfileDiff.markdown` (a table to paste into a pull request), :meth:`~ProfileDiff.to_json`
and :meth:`~ProfileDiff.to_html` (sortable, filterable).

The gate, :meth:`ProfileDiff.check`, takes expressions ``METRIC[@SCOPE] OP THRESHOLD``:

* ``METRIC``: ``flops``, ``macs``, ``params``, ``bytes``, ``time`` (and ``backward_flops``,
  ``backward_time``, ``optimizer_flops``);
* ``SCOPE``: the whole model when left out, a module path (``@layers.0.mlp``), or ``@*`` for
  every module (each module that crosses is a violation);
* ``OP``: ``>``, ``>=``, ``<``, ``<=``; ``THRESHOLD``: a signed number, relative with ``%``.

``flops>+1%`` fails when FLOPs grew by more than 1%; ``params>0`` when any parameter was added;
``time>+10%`` when the latency grew by more than 10%; ``flops@*<-50%`` when a module lost more than
half its FLOPs. FLOPs, MACs, parameters and bytes are exact, so their gates need no noise band.
Time gates compare medians and apply only when both profiles were timed with ``repeat >= 3``
(``settings["repeat"]``): otherwise :meth:`check` raises ``ValueError`` naming the profile, rather
than passing a gate it cannot judge.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tabulate import tabulate

from torch_flops import report
from torch_flops.html import render_diff
from torch_flops.paths import depth as path_depth
from torch_flops.records import ModuleStats, Profile

__all__ = ["METRICS", "DiffRow", "ProfileDiff", "Violation", "diff", "parse_check"]

#: every metric a diff may carry -> its label
METRICS: dict[str, str] = {
    "flops": "FLOPs", "macs": "MACs", "params": "params", "bytes": "bytes", "time_ms": "time",
    "backward_flops": "bwd FLOPs", "backward_time_ms": "bwd time", "optimizer_flops": "optim FLOPs",
}
#: names the gate takes for the metrics
_GATE_NAMES = {"flops": "flops", "macs": "macs", "params": "params", "bytes": "bytes", "time": "time_ms",
               "time_ms": "time_ms", "backward_flops": "backward_flops", "backward_time": "backward_time_ms",
               "backward_time_ms": "backward_time_ms", "optimizer_flops": "optimizer_flops"}
_TIMES = ("time_ms", "backward_time_ms")

#: the least ``settings["repeat"]`` of both profiles for a time gate
MIN_REPEAT_FOR_TIME = 3

_CHECK = re.compile(r"^\s*(?P<metric>[a-z_]+)\s*(?:@\s*(?P<scope>[^<>=\s]+))?\s*(?P<op>>=|<=|>|<)\s*"
                    r"(?P<value>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<pct>%)?\s*$")


def _metric_name(metric: str) -> str:
    """The key of :data:`METRICS` for ``metric`` (a key, or a name the gate takes); a clear error otherwise,
    where a silent None would read as "not measured"."""
    name = _GATE_NAMES.get(metric)
    if name is None:
        raise ValueError(f"unknown metric {metric!r}: expected one of {', '.join(sorted(_GATE_NAMES))}")
    return name


@dataclass(frozen=True)
class DiffRow:
    """One module or operator in both profiles."""

    kind: str  #: "module" or "operator"
    key: str  #: module path (B's for a renamed one; "" = the whole model) or operator
    status: str  #: "changed", "unchanged", "added", "removed" or "renamed"
    type: str  #: the module's class (B's, or A's when removed); "" for operators
    a: Mapping[str, float | None]  #: metric -> A's value (None: not in A, or not measured)
    b: Mapping[str, float | None]
    old_key: str | None = None  #: A's path of a renamed module

    def delta(self, metric: str) -> float | None:
        """B - A (a side missing counts 0); None when neither side has the metric. ``metric``: a key of
        :data:`METRICS` or a name the gate takes (``"time"`` is ``"time_ms"``); another is a ValueError."""
        metric = _metric_name(metric)
        a, b = self.a.get(metric), self.b.get(metric)
        if a is None and b is None:
            return None
        return (b or 0) - (a or 0)

    def relative(self, metric: str) -> float | None:
        """The change in % of A; ``inf`` for something from nothing; None without a value."""
        change = self.delta(metric)
        if change is None:
            return None
        base = self.a.get(_metric_name(metric)) or 0
        if base == 0:
            return 0.0 if change == 0 else math.copysign(math.inf, change)
        return 100.0 * change / abs(base)

    def as_dict(self, metrics: Sequence[str]) -> dict[str, Any]:
        return {"kind": self.kind, "key": self.key, "old_key": self.old_key, "status": self.status,
                "type": self.type, "a": {m: self.a.get(m) for m in metrics}, "b": {m: self.b.get(m) for m in metrics},
                "delta": {m: self.delta(m) for m in metrics},
                "relative": {m: _finite(self.relative(m)) for m in metrics}}


@dataclass(frozen=True)
class Violation:
    """One gate expression crossed, by one module (or the whole model)."""

    expr: str
    metric: str
    scope: str  #: the module path ("" = the whole model)
    a: float | None
    b: float | None
    delta: float
    relative: float | None  #: in %
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {"expr": self.expr, "metric": self.metric, "scope": self.scope, "a": self.a, "b": self.b,
                "delta": self.delta, "relative": _finite(self.relative), "message": self.message}


@dataclass(frozen=True)
class _Check:
    expr: str
    metric: str
    scope: str | None  #: None: the whole model; "*": every module
    op: str
    value: float
    relative: bool


def parse_check(expr: str) -> _Check:
    """``"flops>+1%"`` -> its parts; ``ValueError`` naming what is wrong."""
    if not isinstance(expr, str):
        raise TypeError(f"a check is a string such as 'flops>+1%', got {type(expr).__name__}")
    found = _CHECK.match(expr)
    if found is None:
        raise ValueError(f"bad check {expr!r}: expected METRIC[@SCOPE] OP THRESHOLD, e.g. 'flops>+1%', "
                         "'params>0', 'time>+10%', 'flops@layers.0<-5%'")
    name = found["metric"]
    if name not in _GATE_NAMES:
        raise ValueError(f"bad check {expr!r}: unknown metric {name!r}; one of {', '.join(sorted(_GATE_NAMES))}")
    return _Check(expr=expr.strip(), metric=_GATE_NAMES[name], scope=found["scope"], op=found["op"],
                  value=float(found["value"]), relative=found["pct"] is not None)


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


_OPS = {">": lambda x, t: x > t, ">=": lambda x, t: x >= t, "<": lambda x, t: x < t, "<=": lambda x, t: x <= t}


def _module_values(m: ModuleStats | None) -> dict[str, float | None]:
    if m is None:
        return {}
    return {"flops": m.flops, "macs": m.macs, "params": m.params, "bytes": m.bytes_read + m.bytes_written,
            "time_ms": m.time_ms, "backward_flops": m.backward_flops, "backward_time_ms": m.backward_time_ms,
            "optimizer_flops": m.optimizer_flops}


def _signature(m: ModuleStats) -> tuple[Any, ...]:
    """What a renamed module keeps: its class and its numbers."""
    return (m.module_type, m.params, m.flops, m.macs, m.nodes, m.bytes_read + m.bytes_written)


def _renames(a: Mapping[str, ModuleStats], b: Mapping[str, ModuleStats]) -> dict[str, str]:
    """A's path -> B's path for modules that only moved: a removed and an added module of the same
    class and numbers (one under the same parent first, then at the same depth, then anywhere),
    shallowest first; a child of a renamed module moves with it."""
    removed = [p for p in a if p not in b]
    added = {p for p in b if p not in a}
    renames: dict[str, str] = {}
    for old in sorted(removed, key=path_depth):
        parent = old.rpartition(".")[0]
        if parent in renames:  # moved with its parent
            new = renames[parent] + old[len(parent):]
            if new in added and _signature(a[old]) == _signature(b[new]):
                renames[old] = new
                added.discard(new)
            continue
        candidates = [p for p in b if p in added and _signature(b[p]) == _signature(a[old])]
        same_parent = [p for p in candidates if p.rpartition(".")[0] == parent]
        same_depth = [p for p in candidates if path_depth(p) == path_depth(old)]
        chosen = (same_parent or same_depth or candidates)[:1]
        if chosen:
            renames[old] = chosen[0]
            added.discard(chosen[0])
    return renames


class ProfileDiff:
    """Two profiles compared (see :func:`diff`)."""

    def __init__(self, a: Profile, b: Profile, labels: tuple[str, str] = ("A", "B"),
                 include_unchanged: bool = False) -> None:
        self.a, self.b = a, b
        self.labels = labels
        mods_a, mods_b = a.by_module(), b.by_module()
        self.renamed: dict[str, str] = _renames(mods_a, mods_b)
        backward = a.has_backward or b.has_backward
        optimizer = mods_a[""].optimizer_flops is not None or mods_b[""].optimizer_flops is not None
        timed = a.total_time_ms is not None or b.total_time_ms is not None
        self.metrics: tuple[str, ...] = tuple(
            m for m in METRICS if (m != "time_ms" or timed) and (not m.startswith("backward") or backward)
            and (m != "backward_time_ms" or timed) and (m != "optimizer_flops" or optimizer))
        rows = self._module_rows(mods_a, mods_b) + self._operator_rows()
        self.all_rows: tuple[DiffRow, ...] = tuple(sorted(rows, key=self._order))
        #: the rows that changed (added, removed, renamed or with a different number), largest first
        self.rows: tuple[DiffRow, ...] = self.all_rows if include_unchanged else tuple(
            r for r in self.all_rows if r.status != "unchanged")

    # ------------------------------------------------------------------ rows
    def _row(self, kind: str, key: str, values_a: dict[str, float | None], values_b: dict[str, float | None],
             type_: str, present: tuple[bool, bool], old_key: str | None = None) -> DiffRow:
        a = {m: values_a.get(m) for m in self.metrics} if present[0] else {}
        b = {m: values_b.get(m) for m in self.metrics} if present[1] else {}
        if not present[0]:
            status = "added"
        elif not present[1]:
            status = "removed"
        elif old_key is not None:
            status = "renamed"
        else:
            status = "changed" if any(a.get(m) != b.get(m) for m in self.metrics) else "unchanged"
        return DiffRow(kind=kind, key=key, status=status, type=type_, a=a, b=b, old_key=old_key)

    def _module_rows(self, mods_a: Mapping[str, ModuleStats], mods_b: Mapping[str, ModuleStats]) -> list[DiffRow]:
        rows = []
        new_of = self.renamed
        moved_to = set(new_of.values())
        for path, m in mods_a.items():
            if path in new_of:
                target = mods_b[new_of[path]]
                rows.append(self._row("module", new_of[path], _module_values(m), _module_values(target),
                                      target.module_type, (True, True), old_key=path))
            elif path == "":  # the whole model's time: its median latency (of the calls, when the run kept
                # them), one number for its row, its change and its gate
                a, b = _module_values(m), _module_values(mods_b[""])
                a["time_ms"], b["time_ms"] = (report.model_summary(p).latency_ms for p in (self.a, self.b))
                rows.append(self._row("module", "", a, b, m.module_type, (True, True)))
            else:
                other = mods_b.get(path)
                rows.append(self._row("module", path, _module_values(m), _module_values(other),
                                      (other or m).module_type, (True, other is not None)))
        for path, m in mods_b.items():
            if path not in mods_a and path not in moved_to:
                rows.append(self._row("module", path, {}, _module_values(m), m.module_type, (False, True)))
        return rows

    def _operator_rows(self) -> list[DiffRow]:
        ops_a, ops_b = self.a.by_operator(), self.b.by_operator()

        def values(o: Any) -> dict[str, float | None]:
            return {} if o is None else {"flops": o.flops, "macs": o.macs, "bytes": o.bytes_read + o.bytes_written,
                                         "time_ms": o.time_ms, "backward_flops": o.backward_flops,
                                         "backward_time_ms": o.backward_time_ms}

        keys = list(ops_a) + [k for k in ops_b if k not in ops_a]
        return [self._row("operator", k, values(ops_a.get(k)), values(ops_b.get(k)), "",
                          (k in ops_a, k in ops_b)) for k in keys]

    @staticmethod
    def _order(row: DiffRow) -> tuple[Any, ...]:
        """Largest absolute change first (FLOPs, then parameters, bytes, time); modules before
        operators on ties; then the model's order (the sort is stable)."""
        return (*(-abs(row.delta(m) or 0) for m in ("flops", "params", "bytes", "time_ms")),
                row.status == "unchanged", row.kind != "module")

    def module(self, path: str) -> DiffRow | None:
        """The row of a module (B's path, or A's path of a renamed one)."""
        for row in self.all_rows:
            if row.kind == "module" and (row.key == path or row.old_key == path):
                return row
        return None

    @property
    def total(self) -> DiffRow:
        """The whole model's row."""
        row = self.module("")
        assert row is not None
        return row

    # ------------------------------------------------------------------ the gate
    def check(self, checks: Iterable[str]) -> list[Violation]:
        """The violations of the gate expressions ``checks`` (see the module docstring); empty when
        all pass. ``ValueError`` for a bad expression, an unknown module, a time gate on
        profiles not timed with ``repeat >= 3``, a backward or optimizer gate on profiles without
        one, or a FLOPs gate on profiles counted in different conventions."""
        if isinstance(checks, str):
            checks = [checks]
        parsed = [parse_check(c) for c in checks]
        for c in parsed:
            if c.metric in _TIMES:
                self._check_timed(c.expr)
            if c.metric in ("backward_flops", "backward_time_ms") and not (self.a.has_backward or self.b.has_backward):
                raise ValueError(f"check {c.expr!r}: neither profile has a backward (profile a training step: "
                                 "propagate(x, loss_fn=...), TrainingProfiler or --train)")
            if c.metric == "optimizer_flops" and not any(r.phase == "optimizer" for p in (self.a, self.b)
                                                         for r in p.records):
                raise ValueError(f"check {c.expr!r}: neither profile has an optimizer step (TrainingProfiler, or "
                                 "--train --optimizer NAME)")
            if c.metric in ("flops", "macs", "backward_flops", "optimizer_flops") \
                    and self.a.convention != self.b.convention:
                raise ValueError(f"check {c.expr!r}: the profiles count in different conventions ({self.labels[0]} "
                                 f"{self.a.convention}, {self.labels[1]} {self.b.convention}): re-express one "
                                 "(Profile.with_convention) before gating on FLOPs")
            if c.scope not in (None, "*") and self.module(c.scope) is None:
                raise ValueError(f"check {c.expr!r}: no module {c.scope!r} in either profile")
        found: list[Violation] = []
        for c in parsed:
            if c.scope is None:
                rows = [self.total]
            elif c.scope == "*":
                rows = [r for r in self.all_rows if r.kind == "module"]
            else:
                rows = [self.module(c.scope)]  # type: ignore[list-item]
            for row in rows:
                violation = self._violation(c, row)
                if violation is not None:
                    found.append(violation)
        return found

    def _check_timed(self, expr: str) -> None:
        for label, profile in zip(self.labels, (self.a, self.b)):
            repeat = profile.settings.get("repeat")
            if profile.total_time_ms is None:
                raise ValueError(f"check {expr!r}: {label} was not timed (device {profile.device}); time gates need "
                                 f"both profiles timed with repeat >= {MIN_REPEAT_FOR_TIME}")
            if not isinstance(repeat, int) or repeat < MIN_REPEAT_FOR_TIME:
                raise ValueError(f"check {expr!r}: {label} was timed with repeat={repeat}; time gates compare medians "
                                 f"and need both profiles timed with repeat >= {MIN_REPEAT_FOR_TIME}")
            timed = report.model_summary(profile).timed_calls
            if timed < MIN_REPEAT_FOR_TIME:  # (a timed call raised: the times are fewer calls')
                raise ValueError(f"check {expr!r}: {label}'s times come from {timed} call(s) of the {repeat} asked for "
                                 "(a timed call raised, or ran other ops than the real call); time gates compare "
                                 f"medians of at least {MIN_REPEAT_FOR_TIME}")

    def _violation(self, c: _Check, row: DiffRow) -> Violation | None:
        a, b = row.a.get(c.metric), row.b.get(c.metric)
        if a is None and b is None:
            return None
        change = (b or 0) - (a or 0)
        base = a or 0
        relative = (100.0 * change / abs(base) if base else (0.0 if change == 0 else math.copysign(math.inf, change)))
        measured = relative if c.relative else change
        if not _OPS[c.op](measured, c.value):
            return None
        where = "the model" if row.key == "" else f"module {row.key!r}"
        fmt = _formatter(c.metric)
        threshold = f"{c.value:+g}{'%' if c.relative else ''}"
        if not row.b:
            what = f"{METRICS[c.metric]} of {where} ({fmt(a)}) went: the module was removed"
        elif not row.a:
            what = f"{METRICS[c.metric]} of {where} is new ({fmt(b)}): the module was added"
        else:
            what = f"{METRICS[c.metric]} of {where} went from {fmt(a)} to {fmt(b)} ({_pct_text(relative)})"
        message = f"{what}; crossed {c.op} {threshold}"
        return Violation(expr=c.expr, metric=c.metric, scope=row.key, a=a, b=b, delta=change, relative=relative,
                         message=message)

    # ------------------------------------------------------------------ views
    def as_dict(self, checks: Sequence[str] = ()) -> dict[str, Any]:
        """The JSON document (``"schema": "torch_flops.diff"``); with ``checks``, the gate's results."""
        violations = self.check(checks) if checks else []
        total = self.total

        def side(profile: Profile, label: str) -> dict[str, Any]:
            return {"label": label, "model": profile.module_types.get("", ""), "device": profile.device,
                    "tracer": profile.tracer, "convention": profile.convention, "nodes": len(profile.records),
                    "settings": dict(profile.settings)}

        return {
            "schema": "torch_flops.diff", "version": 1,
            "a": side(self.a, self.labels[0]), "b": side(self.b, self.labels[1]),
            "metrics": list(self.metrics), "labels": {m: METRICS[m] for m in self.metrics},
            "totals": {m: {"a": total.a.get(m), "b": total.b.get(m), "delta": total.delta(m),
                           "relative": _finite(total.relative(m))} for m in self.metrics},
            "renamed": dict(self.renamed),
            "rows": [r.as_dict(self.metrics) for r in self.rows],
            "checks": list(checks), "violations": [v.as_dict() for v in violations],
            "notes": self._notes(),
        }

    def to_json(self, checks: Sequence[str] = (), indent: int | None = 2) -> str:
        return json.dumps(self.as_dict(checks), indent=indent, default=str)

    def _notes(self) -> list[str]:
        notes = []
        if "time_ms" in self.metrics:
            repeats = [p.settings.get("repeat") for p in (self.a, self.b)]
            notes.append(f"times are medians over the timed calls (repeat: A {repeats[0]}, B {repeats[1]}); time gates "
                         f"need repeat >= {MIN_REPEAT_FOR_TIME} on both")
            for label, p in zip(self.labels, (self.a, self.b)):
                note = report.timing_note(p)
                if note:
                    notes.append(f"{label}: {note}")
        if self.a.convention != self.b.convention:
            notes.append(f"the profiles count in different conventions (A {self.a.convention}, B {self.b.convention})")
        return notes

    def _table(self, rows: Sequence[DiffRow], fmt: str) -> str:
        """One row per change: the FLOPs change, then each metric as ``A -> B (change %)``."""
        headers = ["", "module / operator", "status", "Δ FLOPs", *(METRICS[m] for m in self.metrics)]
        body = []
        for r in rows:
            name = r.key
            if r.old_key is not None:
                name = f"{r.old_key} -> {name}"
            if r.type:
                name += f" ({r.type})"
            cells = [r.kind, name, r.status, _signed(report.format_count, r.delta("flops"))]
            for m in self.metrics:
                cells.append(_change_text(r, m))
            body.append(cells)
        if fmt == "github":
            body = [[report.markdown_cell(c) for c in row] for row in body]
        aligns = ["left", "left", "left"] + ["right"] * (len(headers) - 3)
        return tabulate(body, headers=headers, tablefmt=fmt, disable_numparse=True, colalign=aligns)

    def _selected(self, top: int | None, depth: int) -> tuple[list[DiffRow], int]:
        """The rows of the text tables: the whole model's is the totals table above them."""
        rows = [r for r in self.rows if r.kind == "operator" or (r.key != "" and (depth < 0 or path_depth(r.key) <= depth))]
        if top is not None and top < len(rows):
            return rows[:top], len(rows) - top
        return rows, 0

    def _totals_lines(self) -> list[list[str]]:
        total = self.total
        lines = []
        for m in self.metrics:
            f = _formatter(m)
            change = total.delta(m)
            lines.append([METRICS[m], f(total.a.get(m)), f(total.b.get(m)), _signed(f, change),
                          _pct_text(total.relative(m))])
        return lines

    def _gate_lines(self, checks: Sequence[str]) -> list[str]:
        if not checks:
            return []
        violations = self.check(checks)
        lines = []
        for c in checks:
            crossed = [v for v in violations if v.expr == parse_check(c).expr]
            lines.append(f"FAIL {c}: " + "; ".join(v.message for v in crossed) if crossed else f"pass {c}")
        return lines

    def _facts(self) -> list[str]:
        facts = []
        for old, new in self.renamed.items():
            if old.rpartition(".")[0] not in self.renamed:
                facts.append(f"renamed: {old} -> {new}")
        for r in self.rows:
            if r.kind == "module" and r.status in ("added", "removed"):
                parent = r.key.rpartition(".")[0]
                if self.module(parent) is None or self.module(parent).status != r.status:  # type: ignore[union-attr]
                    facts.append(f"{r.status}: {r.key} ({r.type})")
        return facts

    def text(self, top: int | None = 30, depth: int = -1, checks: Sequence[str] = ()) -> str:
        """Totals, renamed/added/removed modules, the gate's results (with ``checks``) and the
        ``top`` largest changes (modules down to ``depth``, and operators) as plain text."""
        _check_top(top)
        a, b = self.labels
        title = (f"torch_flops diff: A = {a} ({self.a.module_types.get('', '')}, {self.a.device}), "
                 f"B = {b} ({self.b.module_types.get('', '')}, {self.b.device})")
        lines = [title, "",
                 tabulate(self._totals_lines(), headers=["total", "A", "B", "change", "change %"],
                          disable_numparse=True, colalign=("left", "right", "right", "right", "right"))]
        facts = self._facts()
        if facts:
            lines += ["", *facts]
        gate = self._gate_lines(checks)
        if gate:
            lines += ["", *gate]
        rows, more = self._selected(top, depth)
        lines += ["", "no module or operator changed" if not rows else "changes, largest first:"]
        if rows:
            lines.append(self._table(rows, "simple"))
        if more:
            lines.append(f"... and {more} more row(s) (top=None shows all)")
        lines += [f"note: {n}" for n in self._notes()]
        return "\n".join(lines)

    def markdown(self, top: int | None = 30, depth: int = -1, checks: Sequence[str] = ()) -> str:
        """The same as GitHub-flavoured Markdown, to paste into a pull request."""
        _check_top(top)
        a, b = self.labels
        totals = tabulate(self._totals_lines(), headers=["total", "A", "B", "change", "change %"], tablefmt="github",
                          disable_numparse=True, colalign=("left", "right", "right", "right", "right"))
        parts = [f"**torch_flops diff**: A = `{a}`, B = `{b}`", totals]
        facts = self._facts()
        if facts:
            parts.append("\n".join(f"- {report.markdown_cell(f)}" for f in facts))
        gate = self._gate_lines(checks)
        if gate:
            parts.append("\n".join(f"- {'❌' if g.startswith('FAIL') else '✅'} {g}" for g in gate))
        rows, more = self._selected(top, depth)
        if rows:
            parts.append(self._table(rows, "github") + (f"\n\n... and {more} more row(s)" if more else ""))
        else:
            parts.append("No module or operator changed.")
        notes = self._notes()
        if notes:
            parts.append("\n".join(f"_{n}_" for n in notes))
        return "\n\n".join(parts)

    def to_html(self, path: str | os.PathLike[str], checks: Sequence[str] = ()) -> str:
        """Write the diff view (one self-contained HTML file) to ``path``; returns the path."""
        report.check_writable(path)
        report.write_atomic(path, self.html(checks))
        return os.fspath(path)

    def html(self, checks: Sequence[str] = ()) -> str:
        """The diff view as an HTML string."""
        return render_diff(self.as_dict(checks), title=f"torch_flops diff: {self.labels[0]} -> {self.labels[1]}")

    def __repr__(self) -> str:
        total = self.total
        change = total.delta("flops") or 0
        return (f"ProfileDiff({self.labels[0]} -> {self.labels[1]}: FLOPs {'+' if change >= 0 else ''}"
                f"{report.format_count(change)} ({_pct_text(total.relative('flops'))}), {len(self.rows)} changed rows)")


def _change_text(row: DiffRow, metric: str) -> str:
    """``"8.45 K -> 16.9 K (+100.00%)"``; one value when it did not change; "-" when unknown."""
    f = _formatter(metric)
    a, b = row.a.get(metric) if row.a else None, row.b.get(metric) if row.b else None
    if not row.a:
        return "-" if b is None else f"new: {f(b)}"
    if not row.b:
        return "-" if a is None else f"{f(a)} -> gone"
    if a == b:
        return f(a)
    return f"{f(a)} -> {f(b)} ({_pct_text(row.relative(metric))})"


def _signed(fmt: Any, change: float | None) -> str:
    """A change with its sign: ``+1.20 K``, ``-3``, ``0``; ``-`` when unknown."""
    if change is None:
        return "-"
    return "0" if change == 0 else ("+" if change > 0 else "") + fmt(change)


def _pct_text(value: float | None) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "new" if value > 0 else "gone"
    return f"{report.snap(value):+.2f}%"


def _formatter(metric: str) -> Any:
    if metric in _TIMES:
        return report.format_time_ms
    if metric == "bytes":
        return report.format_bytes
    return report.format_count


def _load(source: Profile | str | os.PathLike[str], name: str) -> tuple[Profile, str]:
    if isinstance(source, Profile):
        return source, ""
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{name}: no such profile file: {path}")
        return Profile.from_json(path), os.path.basename(path)
    raise TypeError(f"{name} must be a torch_flops Profile or the path of its JSON file, got {type(source).__name__}")


def diff(a: Profile | str | os.PathLike[str], b: Profile | str | os.PathLike[str], *,
         labels: tuple[str, str] | None = None, include_unchanged: bool = False) -> ProfileDiff:
    """Compare profile ``a`` (before) with ``b`` (after): Profiles or the paths of their JSON files
    (``to_json``, ``--format json``). ``labels`` name them in the views (default: the file names, or
    "A" and "B")."""
    if labels is not None and (not isinstance(labels, (tuple, list)) or len(labels) != 2
                               or not all(isinstance(label, str) for label in labels)):
        raise TypeError(f"labels must be two strings (a's name, b's name), got {type(labels).__name__} {labels!r}")
    pa, name_a = _load(a, "a")
    pb, name_b = _load(b, "b")
    if labels is None:
        labels = (name_a or "A", name_b or "B")
        if labels[0] == labels[1]:
            labels = (f"A ({labels[0]})", f"B ({labels[1]})")
    return ProfileDiff(pa, pb, (labels[0], labels[1]), include_unchanged)


def _check_top(top: Any) -> None:
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 0):
        raise (TypeError if not isinstance(top, int) or isinstance(top, bool) else ValueError)(
            f"top must be None or an int >= 0, got {top!r}")

"""One self-contained HTML file of a profile (and of a diff of two): no network, no dependency.

The page is data plus a small renderer: the profile is embedded as compact JSON (columns once, one
array per node, targets and module chains interned) in a ``<script type="application/json">``,
and plain JavaScript inlined in the same file draws it in the browser: a summary header, phase
tabs (one per ``phase`` the records carry, plus "backward" when the nodes carry a backward and
"all phases" when there is more than one), the module tree (collapsible, sortable, % of the
total; a parent lists its first 500 children until asked for all), an icicle of the tree sized by a chosen metric (click to zoom), the node table (filter,
sort, pages, status colours, unsupported nodes highlighted), the operator table, the memory
curve over the nodes and, with a hardware, the roofline scatter. Only the visible rows are
built, so a 4,000-node profile opens in well under two seconds.

A document holds one or more *sections*, each a titled profile with its own header and tabs
(:func:`render_document`), so that a generation run (a prefill profile and one per decoding
step) becomes one page with a section selector. Nothing here runs a model: views take a
:class:`~torch_flops.records.Profile` (or its JSON file) and return strings or write files.
"""

from __future__ import annotations

import html as std_html
import json
import math
import os
import platform
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from torch_flops import records, report
from torch_flops.hardware import HardwareSpec
from torch_flops.paths import parent
from torch_flops.records import Profile, is_internal
from torch_flops.roofline import Roofline
from torch_flops.roofline import roofline as roofline_of

__all__ = ["profile_data", "render_diff", "render_document", "render_html", "summary_html", "write_html"]

#: the columns of each node in the embedded data, in order
NODE_FIELDS = ("index", "name", "op", "target", "module", "chain", "status", "flops", "macs", "time_ms",
               "mem_before", "mem_after", "output_shape", "phase", "dtype", "bytes", "backward_flops",
               "backward_macs", "backward_time_ms", "saved_bytes", "note", "internal", "graph")

Section = tuple[str, Profile] | tuple[str, Profile, Roofline | None]


# ---------------------------------------------------------------------- the data
def _parents(paths: Sequence[str]) -> list[int]:
    """Each path's parent in the tree: its longest dotted prefix that is a module (-1 for the root)."""
    index = {p: i for i, p in enumerate(paths)}
    return [-1 if path == "" else index[parent(path, index)] for path in paths]


def _roofline_data(profile: Profile, line: Roofline) -> dict[str, Any]:
    """The scatter's points: (node index, FLOP/B, FLOP/s, roofline ms, measured ms, bound), the
    FLOP/s achieved when timed on that hardware, else the roofline's own (the point sits on the roof)."""
    work = [r.index for r in profile.records if not is_internal(r) and r.op not in ("placeholder", "output")]
    points = []
    for index, row in zip(work, line.nodes):
        if row.intensity is None or not row.flops:
            continue
        rate = row.achieved_flops_per_s if line.timed else (
            row.flops / (row.roofline_time_ms / 1e3) if row.roofline_time_ms else None)
        if rate:
            points.append([index, row.intensity, rate, row.roofline_time_ms, row.time_ms, row.bound])
    spec = line.hardware
    dtypes = Counter(r.dtype for r in line.nodes if r.dtype is not None and r.flops)
    dtype = dtypes.most_common(1)[0][0] if dtypes else "float32"
    try:
        peak = spec.peak_flops(dtype)
    except ValueError:
        peak = max(spec.peak.values())
    return {"hardware": spec.name, "description": spec.description, "dtype": dtype, "peak": peak,
            "vector": spec.vector_flops(dtype), "bandwidth": spec.memory_bandwidth, "timed": line.timed,
            "points": points,
            "summary": [["predicted", report.format_time_ms(line.total_roofline_ms)],
                        ["measured", report.format_time_ms(line.total_time_ms)] if line.timed else None,
                        ["memory-bound share", f"{100 * line.memory_bound_share:.1f}%"]]}


def _versions(settings: Mapping[str, Any]) -> dict[str, str]:
    """The versions that made the profile (its settings), else the ones rendering it."""
    from torch_flops._version import __version__

    return {"torch_flops": str(settings.get("torch_flops_version", __version__)),
            "torch": str(settings.get("torch_version", torch.__version__)), "python": platform.python_version()}


_UNATTRIBUTED_NOTE = ("the backward's work that no forward node caused (gradients accumulated into an existing "
                      ".grad, the seed gradient)")


def profile_data(profile: Profile, roofline: Roofline | None = None, title: str | None = None) -> dict[str, Any]:
    """The JSON a page section is drawn from (compact: the page holds it inline)."""
    modules = profile.by_module()
    paths = list(modules)
    index = {p: i for i, p in enumerate(paths)}
    chains: dict[tuple[int, ...], int] = {}
    targets: dict[str, int] = {}
    rows = []
    for r in profile.records:
        chain = tuple(index[p] for p in r.module_chain)
        nbytes = None if r.bytes_read is None else r.bytes_read + (r.bytes_written or 0)
        rows.append([r.index, r.name, r.op, targets.setdefault(r.target, len(targets)),
                     index.get(r.module_path, 0), chains.setdefault(chain, len(chains)), r.status.value, r.flops,
                     r.macs, r.time_ms, r.mem_before, r.mem_after,
                     None if r.output_shape is None else report._shape_text(report._plain_shape(r.output_shape)),
                     r.phase, r.dtype, nbytes, r.backward_flops, r.backward_macs, r.backward_time_ms, r.saved_bytes,
                     r.note, 1 if is_internal(r) else 0, r.graph])
    backward = profile.backward or {}
    if backward.get("unattributed_flops") or backward.get("unattributed_time_ms"):
        # the backward's work no forward node caused (gradients accumulated into an existing .grad, the
        # seed gradient): in the totals, so a row of the model's own, as the tables' totals count it
        rows.append([len(profile.records), "backward_unattributed", "backward", targets.setdefault(
            "gradient accumulation, seed gradient", len(targets)), index.get("", 0), chains.setdefault((), len(chains)),
            "counted", None, None, None, None, None, None, None, None, None,  # (no phase: the backward tab's alone)
            backward.get("unattributed_flops", 0), backward.get("unattributed_macs", 0),
            backward.get("unattributed_time_ms"), None,
            _UNATTRIBUTED_NOTE, 0, 0])
    summary = report.model_summary(profile)
    model = summary.model
    return {
        "title": title or model,
        "header": {
            "model": model, "summary": report.summary_lines(profile), "note": report.timing_note(profile),
            "device": profile.device, "tracer": profile.tracer, "convention": profile.convention,
            "dtypes": Counter(r.dtype for r in profile.records if r.dtype is not None).most_common(),
            "settings": {k: v for k, v in profile.settings.items()}, "versions": _versions(profile.settings),
            "memory_source": profile.memory_source,
        },
        "modules": {"path": paths, "type": [modules[p].module_type for p in paths],
                    "params": [modules[p].params for p in paths], "parent": _parents(paths)},
        "chains": [list(c) for c in chains],
        "targets": list(targets),
        "fields": list(NODE_FIELDS),
        "nodes": rows,
        "roofline": None if roofline is None else _roofline_data(profile, roofline),
    }


def _page(data: Mapping[str, Any], title: str) -> str:
    """The HTML page: style, the data, the script."""
    try:
        payload = json.dumps(data, separators=(",", ":"), default=str, allow_nan=False)
    except ValueError:  # a NaN or an infinity somewhere (JSON has neither): shown as "-"
        payload = json.dumps(_finite(data), separators=(",", ":"), default=str, allow_nan=False)
    # nothing in the data may end the script element or open a comment: "\/" and "\u0021" are JSON escapes
    payload = payload.replace("</", "<\\/").replace("<!--", "<\\u0021--")
    # the page is ASCII (the JSON is, by json.dumps; the title's other characters become references), so it
    # reads the same whatever encoding the locale writes the file in (a C locale, Windows' code pages)
    title = std_html.escape(title).encode("ascii", "xmlcharrefreplace").decode("ascii")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{title}</title><style>{_CSS}</style></head>"
            f'<body><div id="app"><noscript>This report draws itself with JavaScript.</noscript></div>'
            f'<script type="application/json" id="tf-data">{payload}</script>'
            f"<script>{_JS}</script></body></html>\n")


def _finite(value: Any) -> Any:
    """``value`` with every NaN and infinity replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def render_document(sections: Sequence[Section], title: str | None = None) -> str:
    """A page of one or more titled profiles (each with an optional roofline), with a section
    selector when there are several (a generation run: prefill and decoding steps)."""
    if not sections:
        raise ValueError("render_document needs at least one (title, profile) section")
    data = []
    for section in sections:
        name, profile = section[0], section[1]
        if not isinstance(profile, Profile):
            raise TypeError(f"section {name!r}: expected a torch_flops Profile, got {type(profile).__name__}")
        line = section[2] if len(section) > 2 else None  # type: ignore[misc]
        data.append(profile_data(profile, line, name))
    page_title = title or (f"{data[0]['title']} - torch_flops report" if len(data) == 1 else "torch_flops report")
    return _page({"kind": "profile", "title": page_title, "sections": data}, page_title)


def render_html(profile: Profile, roofline: Roofline | None = None, title: str | None = None) -> str:
    """The one-file report of one profile."""
    return render_document([(title or profile.module_types.get("", "") or "model", profile, roofline)])


def write_html(profile: Profile | str | os.PathLike[str], path: str | os.PathLike[str],
               roofline: Roofline | None = None, hardware: str | HardwareSpec | None = None) -> str:
    """Write :func:`render_html` of ``profile`` (a Profile or its JSON file) to ``path`` atomically,
    with the roofline on ``hardware`` (or the given ``roofline``); returns the path written."""
    if not isinstance(profile, Profile):
        profile = Profile.from_json(profile)
    if roofline is None and hardware is not None:
        roofline = roofline_of(profile, hardware)
    report.check_writable(path)
    report.write_atomic(path, render_html(profile, roofline))
    return os.fspath(path)


def render_diff(data: Mapping[str, Any], title: str = "torch_flops diff") -> str:
    """The page of a diff (:meth:`torch_flops.diff.ProfileDiff.as_dict`): totals, the gate's
    results, and the module and operator rows in one sortable, filterable table."""
    return _page({"kind": "diff", "title": title, **data}, title)


# ---------------------------------------------------------------------- a notebook's view
def summary_html(profile: Profile, top: int = 5) -> str:
    """A compact view for notebooks (``Profile._repr_html_``): the summary lines and the ``top``
    modules at depth 1 by FLOPs. Plain HTML, no script (notebooks may not run one)."""
    esc = std_html.escape
    cell = 'style="text-align:left;padding:1px 8px 1px 0"'
    num = 'style="text-align:right;padding:1px 6px"'
    rows = "".join(f"<tr><th {cell}>{esc(k)}</th><td {cell}>{esc(v)}</td></tr>"
                   for k, v in report.summary_lines(profile))
    root = profile.by_module()[""]
    mods = profile.top_modules(top, depth=1) if root.nodes else []
    top_rows = "".join(
        f"<tr><td {cell}>{esc(m.path)}</td><td {cell}>{esc(m.module_type)}</td><td {num}>{report.format_count(m.flops)}"
        f"</td><td {num}>{report.format_percent(m.flops, root.flops)}</td><td {num}>{report.format_count(m.params)}</td>"
        f"<td {num}>{report.format_time_ms(m.time_ms)}</td></tr>" for m in mods)
    top_table = (f"<table><thead><tr><th {cell}>module</th><th {cell}>type</th><th {num}>FLOPs</th>"
                 f"<th {num}>% FLOPs</th><th {num}>params</th><th {num}>latency</th></tr></thead>"
                 f"<tbody>{top_rows}</tbody></table>") if top_rows else ""
    return (f'<div class="torch-flops-profile"><strong>{esc(repr(profile))}</strong>'
            f"<table>{rows}</table>{'<p>Top modules at depth 1 by FLOPs</p>' + top_table if top_table else ''}"
            "</div>")


def _write_profile(profile: Profile, path: str | os.PathLike[str], hardware: Any = None) -> str:
    return write_html(profile, path, hardware=hardware)


records.VIEWS["html"] = _write_profile  # Profile.to_html and Profile._repr_html_ (records imports no view)
records.VIEWS["repr_html"] = summary_html


# ---------------------------------------------------------------------- style
_CSS = """
:root{--fg:#1d2330;--muted:#5d6675;--line:#d9dde4;--bg:#fff;--panel:#f6f7f9;--accent:#2f6fde;--bad:#c62828;
--good:#2e7d32;--warn:#8a5a00}
*{box-sizing:border-box}body{margin:0;font:13px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
color:var(--fg);background:var(--bg)}#app{max-width:1400px;margin:0 auto;padding:12px 18px 40px}
h1{font-size:19px;margin:6px 0 8px}h2{font-size:15px;margin:18px 0 6px}
.muted{color:var(--muted)}.banner{background:#fff4e0;border:1px solid #f0c36d;color:var(--warn);padding:6px 10px;
border-radius:4px;margin:6px 0}.error{background:#fde8e8;border:1px solid #e99;color:var(--bad);padding:8px;
white-space:pre-wrap}
.summary{display:grid;grid-template-columns:max-content 1fr;gap:1px 14px;background:var(--panel);padding:8px 12px;
border-radius:6px;border:1px solid var(--line)}.summary dt{color:var(--muted)}.summary dd{margin:0}
details{margin:6px 0}summary{cursor:pointer;color:var(--muted)}
.tabs{display:flex;gap:4px;flex-wrap:wrap;margin:12px 0 4px;border-bottom:1px solid var(--line)}
.tabs button{border:1px solid var(--line);border-bottom:none;background:var(--panel);padding:5px 12px;cursor:pointer;
border-radius:5px 5px 0 0;font:inherit}.tabs button.active{background:var(--bg);color:var(--accent);font-weight:600;
position:relative;top:1px}
.sections button{font-size:14px}
.controls{display:flex;gap:10px;align-items:center;flex-wrap:wrap;margin:4px 0}
.controls input[type=search]{padding:3px 6px;min-width:220px}.controls .info{color:var(--muted)}
button{font:inherit}
.scroll{max-height:520px;overflow:auto;border:1px solid var(--line);border-radius:4px}
table.data{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
table.data th{position:sticky;top:0;background:#eef1f5;text-align:left;padding:4px 6px;cursor:pointer;
white-space:nowrap;border-bottom:1px solid var(--line);user-select:none}
table.data th.num,table.data td.num{text-align:right}
table.data th.asc::after{content:" \\25B2"}table.data th.desc::after{content:" \\25BC"}
table.data td{padding:2px 6px;border-bottom:1px solid #eef0f3;white-space:nowrap}
table.data tr:hover td{background:#f3f7ff}
td.label{font-family:ui-monospace,SFMono-Regular,Menlo,monospace}
.toggle{display:inline-block;width:14px;cursor:pointer;color:var(--muted)}
tr.st-unsupported td{background:#fde8e8}tr.st-unsupported td.status{color:var(--bad);font-weight:600}
tr.st-zero td,tr.st-skipped td,tr.st-ignored td{color:#8a919c}tr.st-communication td.status{color:#6a1b9a}
td.status{font-weight:500}td.up{color:var(--bad)}td.down{color:var(--good)}
.bar{display:inline-block;height:8px;background:var(--accent);opacity:.55;vertical-align:middle;margin-right:4px}
.icicle{position:relative;border:1px solid var(--line);border-radius:4px;overflow:hidden;background:var(--panel)}
.icicle div{position:absolute;height:21px;border:1px solid rgba(255,255,255,.9);overflow:hidden;white-space:nowrap;
text-overflow:ellipsis;font-size:11px;padding:2px 4px;cursor:pointer;color:#10131a}
.crumbs a,a.show-all{cursor:pointer;color:var(--accent)}
.grid2{display:grid;grid-template-columns:1fr 1fr;gap:16px}@media (max-width:1000px){.grid2{grid-template-columns:1fr}}
svg text{font:11px system-ui,sans-serif;fill:var(--muted)}svg .axis{stroke:#9aa3af}
.tip{position:fixed;pointer-events:none;background:#1d2330;color:#fff;padding:3px 7px;border-radius:3px;font-size:12px;
display:none;z-index:9}
.untimed .t{display:none}
.pass{color:var(--good);font-weight:600}.fail{color:var(--bad);font-weight:600}
"""

# ---------------------------------------------------------------------- script
_JS = r"""
"use strict";
(function () {
const T0 = performance.now();
const DOC = JSON.parse(document.getElementById("tf-data").textContent);
const app = document.getElementById("app");
const SVG = "http://www.w3.org/2000/svg";
const tip = document.createElement("div"); tip.className = "tip"; document.body.appendChild(tip);

function h(tag, attrs, kids) {
  const e = document.createElement(tag);
  setAttrs(e, attrs); add(e, kids); return e;
}
function sv(tag, attrs, kids) {
  const e = document.createElementNS(SVG, tag);
  setAttrs(e, attrs); add(e, kids); return e;
}
function setAttrs(e, attrs) {
  if (!attrs) return;
  for (const k of Object.keys(attrs)) {
    const v = attrs[k];
    if (v === null || v === undefined || v === false) continue;
    if (k === "text") e.textContent = v;
    else if (k.slice(0, 2) === "on") e.addEventListener(k.slice(2), v);
    else e.setAttribute(k === "cls" ? "class" : k, v === true ? "" : v);
  }
}
function add(e, kids) {
  if (!kids) return;
  for (const c of kids) if (c !== null && c !== undefined) e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
}
// a box's children replaced by many nodes: replaceChildren(...nodes) passes each as an argument, and past
// about 120,000 of them (a tree row per module) that overflows the stack
function fill(box, nodes) { const f = document.createDocumentFragment(); for (const e of nodes) f.appendChild(e); box.replaceChildren(f); }
function showTip(ev, text) { tip.textContent = text; tip.style.display = "block";
  tip.style.left = (ev.clientX + 12) + "px"; tip.style.top = (ev.clientY + 12) + "px"; }
function hideTip() { tip.style.display = "none"; }

// ------------------------------------------------------------ numbers, as torch_flops.report writes them
const PREFIX = [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "K"]];
// x with d decimals as Python's f"{x:.{d}f}" writes it: toFixed rounds an exact tie (424.5, 10.25, 0.125) up,
// Python to even; a tie is exact only when x * 2^(d+1) is an integer (scaling by a power of 2 is exact).
// x is first read to 12 significant digits, as report.snap does, so that a sum's last-bit noise never decides.
function fixed(x, d) {
  x = Number(x.toPrecision(12));
  const a = Math.abs(x), s = a * Math.pow(10, d);
  if (Number.isInteger(a * Math.pow(2, d + 1)) && s % 1 === 0.5) {
    const n = Math.floor(s) + Math.floor(s) % 2;
    return (x < 0 ? "-" : "") + (n / Math.pow(10, d)).toFixed(d);
  }
  return x.toFixed(d);
}
function three(x) {  // report._three_digits: the decimals chosen from the rounded number (9.996 -> "10.0")
  x = Number(x.toPrecision(12));
  return fixed(x, Math.abs(Number(fixed(x, 1))) >= 100 ? 0 : Math.abs(Number(fixed(x, 2))) >= 10 ? 1 : 2);
}
function count(n) {  // report.format_count: the unit the rounded number needs (999999 -> "1.00 M")
  if (n === null || n === undefined) return "-";
  if (!Number.isInteger(n)) n = Number(n.toPrecision(12));  // report.snap: the unit from the snapped value
  let k = PREFIX.findIndex(([s]) => Math.abs(n) >= s);
  if (k === -1) {
    if (!Number.isInteger(n)) { const t = three(n); if (Math.abs(Number(t)) < 1000) return t; }
    else if (Math.abs(n) < 1000) return String(n);
    k = PREFIX.length - 1;
  }
  let t = three(n / PREFIX[k][0]);
  if (Math.abs(Number(t)) >= 1000 && k > 0) { k -= 1; t = three(n / PREFIX[k][0]); }
  return t + " " + PREFIX[k][1];
}
// report._in_units: v in the largest unit it reaches, one up when its three digits round to step or more
function inUnits(v, units, step) {
  let k = 0;
  units.forEach(([size], i) => { if (v >= size) k = i; });
  let t = three(v / units[k][0]);
  if (Number(t) >= step && k + 1 < units.length) { k += 1; t = three(v / units[k][0]); }
  return t + " " + units[k][1];
}
const TIMES = [[1e-6, "ns"], [1e-3, "us"], [1, "ms"], [1000, "s"]];
const BINARY = [[1, "B"], [1024, "KiB"], [1024 ** 2, "MiB"], [1024 ** 3, "GiB"], [1024 ** 4, "TiB"]];
function time(ms) {
  if (ms === null || ms === undefined) return "-";
  ms = Number(ms.toPrecision(12));  // report.snap: the unit from the snapped value
  if (ms < 0) return "-" + time(-ms);
  return ms === 0 ? "0.00 us" : inUnits(ms, TIMES, 1000);
}
function bytes(n) {
  if (n === null || n === undefined) return "-";
  const sign = n < 0 ? "-" : "", v = Math.abs(n);
  return v < 1024 ? sign + Math.round(v) + " B" : sign + inUnits(v, BINARY, 1024);
}
function pct(part, whole) { return part === null || part === undefined || !whole ? "-" : fixed(100 * part / whole, 2) + "%"; }
// a change in % as torch_flops.diff writes it: f"{v:+.2f}%" ("+0.00%", "-0.00%" for a tiny fall), and "new" /
// "gone" for a change from nothing (the data carries that infinite ratio as null beside its non-zero delta d)
function changePct(v, d) {
  if (v === null || v === undefined) return d === null || d === undefined || d === 0 ? "-" : d > 0 ? "new" : "gone";
  return (v < 0 ? "" : Object.is(v, -0) ? "-" : "+") + fixed(v, 2) + "%";
}
// diff._signed: "+1.20 K", "-3", and "0" for no change (in any unit)
function signed(fmt) { return v => v === null || v === undefined ? "-" : v === 0 ? "0" : (v > 0 ? "+" : "") + fmt(v); }
// report._format_intensity: FLOP per byte, whole numbers with thousands separators from 1000 up, else Python's
// f"{v:.3g}" (three significant digits, trailing zeros dropped, an exponent below 1e-4)
function intensity(v) {
  if (v === null || v === undefined) return "-";
  v = Number(v.toPrecision(12));  // report.snap
  if (v >= 999.5) {  // the whole number, rounded half to even as Python's f"{v:,.0f}", every digit of it
    let r = Math.round(v);
    if (r - v === 0.5 && r % 2 !== 0) r -= 1;
    return BigInt(r).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  }
  if (v === 0) return "0";
  // three significant digits through fixed(), which rounds an exact tie to even as Python does (0.3125: 0.312)
  let e = Math.floor(Math.log10(Math.abs(v)));
  if (e < -4) {  // Python's exponent form, 1.2e-05, from toExponential (rounded from the exact value)
    const [m, x] = v.toExponential(2).split("e");
    if (Number(x) >= -4) return intensity(Number(v.toPrecision(3)));  // (9.995e-05 rounds to 0.0001)
    return m.replace(/\.?0+$/, "") + "e-" + String(-Number(x)).padStart(2, "0");
  }
  let t = fixed(v, Math.max(2 - e, 0));
  if (Math.abs(Number(t)) >= Math.pow(10, e + 1)) { e += 1; t = fixed(v, Math.max(2 - e, 0)); }  // (9.996: 10.0)
  return t.includes(".") ? t.replace(/\.?0+$/, "") : t;
}
function plus(a, b) { return a === null || a === undefined ? (b === null || b === undefined ? null : b) : a + (b || 0); }

// ------------------------------------------------------------ a sortable, filterable table that builds one page of rows
function DataTable(o) {
  const st = {key: o.sort ? o.sort[0] : null, desc: o.sort ? o.sort[1] : true, text: "", page: 0,
              values: (o.filters || []).map(f => f.initial || "")};
  const size = o.pageSize || 100;
  const cols = o.columns;
  const root = h("div", {cls: "tbl", id: o.id});
  const controls = h("div", {cls: "controls"});
  if (o.search) {
    const input = h("input", {type: "search", cls: "filter", placeholder: o.placeholder || "filter rows",
      oninput: () => { st.text = input.value.toLowerCase(); st.page = 0; draw(); }});
    controls.appendChild(input);
  }
  (o.filters || []).forEach((f, i) => {
    const sel = h("select", {cls: "select-" + f.name, onchange: () => { st.values[i] = sel.value; st.page = 0; draw(); }},
                  f.options.map(([v, l]) => h("option", {value: v, text: l})));
    sel.value = st.values[i];
    controls.appendChild(h("label", null, [f.label + " ", sel]));
  });
  const info = h("span", {cls: "info"});
  const prev = h("button", {text: "\u2039 prev", cls: "prev", onclick: () => { st.page--; draw(); }});
  const next = h("button", {text: "next \u203a", cls: "next", onclick: () => { st.page++; draw(); }});
  add(controls, [info, prev, next]);
  const head = h("tr");
  const ths = cols.map(c => h("th", {"data-key": c.key, cls: ((c.num ? "num" : "") + (c.timed ? " t" : "")).trim() || null, title: c.title || null,
    onclick: () => { if (st.key === c.key) st.desc = !st.desc; else { st.key = c.key; st.desc = !!c.num; }
                     st.page = 0; draw(); }}, [c.label]));
  add(head, ths);
  const body = h("tbody");
  add(root, [controls, h("div", {cls: "scroll"}, [h("table", {cls: "data"}, [h("thead", null, [head]), body])])]);
  let rows = o.rows || [];
  function order(a, b) {
    const an = a === null || a === undefined || a === "", bn = b === null || b === undefined || b === "";
    if (an || bn) return an === bn ? 0 : (an ? 1 : -1);  // empty last, either way
    const r = (typeof a === "string" || typeof b === "string") ? String(a).localeCompare(String(b)) : a - b;
    return st.desc ? -r : r;
  }
  function draw() {
    let shown = rows;
    if (st.text && o.search) shown = shown.filter(r => o.search(r).toLowerCase().includes(st.text));
    (o.filters || []).forEach((f, i) => { if (st.values[i] !== "") shown = shown.filter(r => f.test(r, st.values[i])); });
    if (st.key !== null) { const c = cols.find(c => c.key === st.key); shown = shown.slice().sort((a, b) => order(c.get(a), c.get(b))); }
    const pages = Math.max(1, Math.ceil(shown.length / size));
    st.page = Math.min(Math.max(st.page, 0), pages - 1);
    const part = shown.slice(st.page * size, (st.page + 1) * size);
    const trs = part.map(r => {
      const tr = h("tr", {cls: o.rowClass ? o.rowClass(r) : null});
      for (const c of cols) {
        const v = c.get(r);
        const cls = [c.num ? "num" : "", c.timed ? "t" : "", c.cls ? (typeof c.cls === "function" ? c.cls(v, r) : c.cls) : ""].join(" ").trim();
        tr.appendChild(h("td", {cls: cls || null, title: c.tip ? c.tip(r) : null}, [c.fmt ? c.fmt(v, r) : (v === null || v === undefined ? "-" : String(v))]));
      }
      return tr;
    });
    body.replaceChildren(...trs);
    info.textContent = shown.length + " of " + rows.length + " rows" + (pages > 1 ? " \u00b7 page " + (st.page + 1) + " of " + pages : "");
    prev.disabled = st.page === 0; next.disabled = st.page >= pages - 1;
    ths.forEach((th, i) => { th.classList.toggle("asc", cols[i].key === st.key && !st.desc);
                             th.classList.toggle("desc", cols[i].key === st.key && st.desc); });
  }
  draw();
  return {el: root, setRows(r) { rows = r; st.page = 0; draw(); }};
}

// ------------------------------------------------------------ a profile section
const PHASE_ORDER = ["forward", "loss", "backward", "optimizer", "prefill", "decode"];
function phaseRank(p) { const i = PHASE_ORDER.indexOf(p); return i < 0 ? PHASE_ORDER.length : i; }

function views(nodes) {
  const phases = Array.from(new Set(nodes.filter(r => r.phase !== null).map(r => r.phase))).sort((a, b) => phaseRank(a) - phaseRank(b) || a.localeCompare(b));
  const out = phases.map(p => ({id: p, label: p, test: r => r.phase === p, flops: r => r.flops, macs: r => r.macs,
                                time: r => r.time_ms, bytes: r => r.bytes}));
  if (!phases.includes("backward") && nodes.some(r => r.backward_flops !== null)) {
    const at = out.findIndex(v => phaseRank(v.id) > phaseRank("backward"));
    out.splice(at < 0 ? out.length : at, 0, {id: "backward", label: "backward", test: r => r.backward_flops !== null,
      flops: r => r.backward_flops, macs: r => r.backward_macs, time: r => r.backward_time_ms, bytes: r => r.saved_bytes,
      bytesLabel: "saved"});
  }
  if (!out.length) out.push({id: "forward", label: "forward", test: () => true, flops: r => r.flops, macs: r => r.macs,
                             time: r => r.time_ms, bytes: r => r.bytes});
  if (out.length > 1) out.push({id: "all", label: "all phases", test: () => true, flops: r => plus(r.flops, r.backward_flops),
    macs: r => plus(r.macs, r.backward_macs), time: r => plus(r.time_ms, r.backward_time_ms), bytes: r => r.bytes});
  return out;
}

function section(sec, root, k) {
  const sid = k ? "-" + k : "";  // element ids of the first section stay plain
  const F = sec.fields, M = sec.modules, chains = sec.chains, targets = sec.targets;
  const nodes = sec.nodes.map(a => { const r = {}; F.forEach((f, i) => { r[f] = a[i]; });
    r.target = targets[r.target]; r.chain = chains[r.chain]; r.path = M.path[r.module]; return r; });
  const n = M.path.length;
  const kids = Array.from({length: n}, () => []);
  const depth = new Int32Array(n);
  for (let i = 1; i < n; i++) { const p = M.parent[i]; if (p >= 0) kids[p].push(i); }
  (function walk(i, d) { depth[i] = d; for (const k of kids[i]) walk(k, d + 1); })(0, 0);
  const maxDepth = depth.reduce((a, b) => Math.max(a, b), 0);
  const vs = views(nodes);
  // a parent shows its first MAX_KIDS children (in the sorted order) until "show all" or "expand all": a tree
  // of 10,000 modules side by side opens in a fraction of a second
  const MAX_KIDS = 500;
  const state = {view: vs[0], metric: "flops", zoom: 0, sortKey: null, desc: true, expanded: new Set([0]), all: new Set()};
  if (kids[0].length <= 30) for (const k of kids[0]) if (kids[k].length <= 60) state.expanded.add(k);
  let sums = null;

  // header
  const head = sec.header;
  root.appendChild(h("h1", {text: sec.title + " \u2014 torch_flops report"}));
  if (head.note) root.appendChild(h("div", {cls: "banner", id: "cold-note" + sid, text: "Times: " + head.note}));
  const dl = h("dl", {cls: "summary"});
  for (const [k, v] of head.summary) add(dl, [h("dt", {text: k}), h("dd", {text: v})]);
  add(dl, [h("dt", {text: "Compute dtypes"}), h("dd", {text: head.dtypes.map(([d, c]) => d + " (" + c + " nodes)").join(", ") || "-"})]);
  root.appendChild(dl);
  const settings = h("details", null, [h("summary", {text: "Settings and versions"}),
    h("dl", {cls: "summary"}, Object.entries(head.settings).concat(Object.entries(head.versions).map(([k, v]) => [k + " version", v]))
      .flatMap(([k, v]) => [h("dt", {text: k}), h("dd", {text: typeof v === "string" ? v : JSON.stringify(v)})]))]);
  root.appendChild(settings);

  // phase tabs and the metric
  const tabs = h("div", {cls: "tabs phases", role: "tablist"});
  const tabButtons = vs.map(v => h("button", {text: v.label, "data-view": v.id, cls: v === state.view ? "active" : null,
    onclick: () => { state.view = v; tabButtons.forEach(b => b.classList.toggle("active", b.dataset.view === v.id)); update(); }}));
  add(tabs, tabButtons);
  if (vs.length > 1) root.appendChild(tabs);

  // module tree
  const METRICS = [["flops", "FLOPs"], ["macs", "MACs"], ["params", "params"], ["time", "time"], ["bytes", "bytes"]];
  const treeCols = [
    ["params", "params", i => M.params[i], count], ["params_pct", "% params", i => 100 * M.params[i] / M.params[0], null],
    ["flops", "FLOPs", i => sums.flops[i], count], ["flops_pct", "% FLOPs", i => 100 * sums.flops[i] / sums.flops[0], null],
    ["macs", "MACs", i => sums.macs[i], count], ["time", "time", i => sums.timed[i] ? sums.time[i] : null, time, true],
    ["time_pct", "% time", i => sums.timed[i] && sums.time[0] ? 100 * sums.time[i] / sums.time[0] : null, null, true],
    ["flops_per_s", "FLOP/s", i => sums.timed[i] && sums.time[i] > 0 ? sums.flops[i] * 1e3 / sums.time[i] : null, count, true],
    ["bytes", "bytes", i => sums.bytes[i], bytes], ["nodes", "nodes", i => sums.nodes[i], String]];
  const treeHead = h("tr", null, [h("th", {text: "module", "data-key": "", onclick: () => { state.sortKey = null; drawTree(); }})]
    .concat(treeCols.map(([key, label, , , timed]) => h("th", {cls: timed ? "num t" : "num", "data-key": key, text: label,
      onclick: () => { if (state.sortKey === key) state.desc = !state.desc; else { state.sortKey = key; state.desc = true; } drawTree(); }}))));
  const treeBody = h("tbody");
  const depthSel = h("select", {cls: "depth", onchange: () => { const d = +depthSel.value; state.expanded = new Set();
    for (let i = 0; i < n; i++) if (depth[i] < d) state.expanded.add(i); drawTree(); }},
    [h("option", {value: "", text: "expand to depth\u2026"})].concat(Array.from({length: maxDepth}, (_, d) => h("option", {value: d + 1, text: String(d + 1)}))));
  root.appendChild(h("h2", {text: "Module tree"}));
  root.appendChild(h("div", {cls: "controls"}, [
    h("button", {text: "expand all", cls: "expand-all", onclick: () => { for (let i = 0; i < n; i++) if (kids[i].length) { state.expanded.add(i); state.all.add(i); } drawTree(); }}),
    h("button", {text: "collapse all", cls: "collapse-all", onclick: () => { state.expanded = new Set([0]); state.all = new Set(); drawTree(); }}), depthSel,
    h("span", {cls: "info", text: "click a header to sort siblings; click \u25b8 to open"})]));
  const treeBox = h("div", {cls: "scroll", id: "tree" + sid}, [h("table", {cls: "data tree"}, [h("thead", null, [treeHead]), treeBody])]);
  root.appendChild(treeBox);

  function treeValue(i, key) { const c = treeCols.find(c => c[0] === key); return c[2](i); }
  function drawTree() {
    const trs = [];
    const visit = (i, level) => {
      const name = i === 0 ? (M.type[0] || "(root)") : M.path[i].slice(M.parent[i] > 0 ? M.path[M.parent[i]].length + 1 : 0);
      const open = state.expanded.has(i);
      const toggle = h("span", {cls: "toggle", text: kids[i].length ? (open ? "\u25be" : "\u25b8") : ""});
      const label = h("td", {cls: "label", style: "padding-left:" + (6 + 14 * level) + "px", title: M.path[i] || "(root)"},
        [toggle, i === 0 ? name : name + (M.type[i] ? " (" + M.type[i] + ")" : "")]);
      if (kids[i].length) label.addEventListener("click", () => { if (open) state.expanded.delete(i); else state.expanded.add(i); drawTree(); });
      const tr = h("tr", {"data-path": M.path[i], "data-depth": depth[i]}, [label]);
      for (const [, , get, fmt, timed] of treeCols) {
        const v = get(i);
        tr.appendChild(h("td", {cls: timed ? "num t" : "num", text: fmt ? fmt(v) : (v === null || v === undefined || !isFinite(v) ? "-" : fixed(v, 2) + "%")}));
      }
      trs.push(tr);
      if (!open) return;
      let order = kids[i];
      if (state.sortKey) { const k = state.sortKey, s = state.desc ? -1 : 1;
        order = order.slice().sort((a, b) => { const x = treeValue(a, k), y = treeValue(b, k);
          if (x === null || y === null) return x === y ? 0 : (x === null ? 1 : -1); return s * (x - y); }); }
      const shown = state.all.has(i) ? order.length : MAX_KIDS;
      for (const k of order.slice(0, shown)) visit(k, level + 1);
      if (order.length > shown) trs.push(h("tr", {cls: "more"}, [h("td", {cls: "label", colspan: treeCols.length + 1,
        style: "padding-left:" + (20 + 14 * level) + "px"}, [h("a", {cls: "show-all", text: "\u2026 and " + (order.length - shown) +
        " more (show all; sort a column to see its largest first)", onclick: () => { state.all.add(i); drawTree(); }})])]));
    };
    visit(0, 0);
    fill(treeBody, trs);
    treeHead.querySelectorAll("th").forEach(th => { const on = th.dataset.key === (state.sortKey || "__");
      th.classList.toggle("desc", on && state.desc); th.classList.toggle("asc", on && !state.desc); });
  }

  // icicle
  const metricSel = h("select", {cls: "metric", onchange: () => { state.metric = metricSel.value; drawIcicle(); }},
                      METRICS.map(([v, l]) => h("option", {value: v, text: l})));
  const crumbs = h("span", {cls: "crumbs"});
  const icicle = h("div", {cls: "icicle", id: "icicle" + sid});
  root.appendChild(h("h2", {text: "Icicle of the module tree"}));
  root.appendChild(h("div", {cls: "controls"}, [h("label", null, ["size by ", metricSel]), crumbs]));
  root.appendChild(icicle);
  function metricOf(i) {
    const m = state.metric;
    if (m === "params") return M.params[i];
    if (m === "time") return sums.timed[i] ? sums.time[i] : 0;
    return sums[m][i];
  }
  function hueOf(type) { let x = 7; for (let k = 0; k < type.length; k++) x = (x * 31 + type.charCodeAt(k)) % 3607; return x % 360; }
  function metricText(v) { return state.metric === "time" ? time(v) : state.metric === "bytes" ? bytes(v) : count(v); }
  function drawIcicle() {
    const width = icicle.clientWidth || 1000, rowH = 22, cells = [];
    const z = state.zoom, top = metricOf(z), base = depth[z];
    let deepest = 0;
    const place = (i, x, w) => {
      const d = depth[i] - base; deepest = Math.max(deepest, d);
      const v = metricOf(i);
      const light = Math.min(90, 62 + 4 * d), sat = i === 0 ? 0 : 55;  // a hue per module type: the same layers look alike
      const label = i === 0 ? (M.type[0] || "(root)") : M.path[i] + (M.type[i] ? " (" + M.type[i] + ")" : "");
      const text = label + ": " + metricText(v) + " (" + pct(v, top) + ")";
      cells.push(h("div", {style: "left:" + x.toFixed(1) + "px;top:" + (d * rowH) + "px;width:" + Math.max(w, 1).toFixed(1) +
        "px;background:hsl(" + hueOf(M.type[i]) + "," + sat + "%," + light + "%)", "data-path": M.path[i], text: w > 36 ? label : "",
        onmousemove: ev => showTip(ev, text), onmouseleave: hideTip, onclick: () => { state.zoom = i; hideTip(); drawIcicle(); }}));
      const total = kids[i].reduce((s, k) => s + Math.max(metricOf(k), 0), 0);
      const scale = w / Math.max(v, total, 1e-300);
      let cx = x;
      for (const k of kids[i]) { const cw = Math.max(metricOf(k), 0) * scale; if (cw >= 0.5) place(k, cx, cw); cx += cw; }
    };
    if (top > 0) place(z, 0, width);
    icicle.style.height = ((deepest + 1) * rowH + 2) + "px";
    fill(icicle, cells);
    const trail = []; for (let i = z; i >= 0; i = M.parent[i]) trail.unshift(i);
    crumbs.replaceChildren(...trail.flatMap((i, k) => [k ? " \u203a " : "zoom: ", h("a", {text: i === 0 ? (M.type[0] || "(root)") : M.path[i].split(".").pop(),
      onclick: () => { state.zoom = i; drawIcicle(); }})]));
    if (!(top > 0)) icicle.replaceChildren(h("div", {style: "position:static;border:none;cursor:default", text: "nothing to show for this metric"}));
  }

  // node table
  const statuses = Array.from(new Set(nodes.map(r => r.status)));
  const view = () => state.view;
  const nodeCols = [
    {key: "index", label: "#", num: true, get: r => r.index},
    {key: "name", label: "node", get: r => r.name},
    {key: "target", label: "target", get: r => r.target},
    {key: "path", label: "module", get: r => r.path, fmt: v => v || "-"},
    {key: "status", label: "status", get: r => r.status, cls: "status", tip: r => r.note || null},
    {key: "flops", label: "FLOPs", num: true, get: r => view().flops(r), fmt: count},
    {key: "macs", label: "MACs", num: true, get: r => view().macs(r), fmt: count},
    {key: "time", label: "time", num: true, timed: true, get: r => view().time(r), fmt: time},
    {key: "bytes", label: "bytes", num: true, get: r => view().bytes(r), fmt: bytes, title: "bytes read + written (saved, in the backward tab)"},
    {key: "mem", label: "mem after", num: true, get: r => r.mem_after, fmt: bytes},
    {key: "shape", label: "output shape", get: r => r.output_shape},
    {key: "dtype", label: "dtype", get: r => r.dtype},
    {key: "note", label: "note", get: r => r.note, fmt: v => v ? (v.length > 60 ? v.slice(0, 60) + "\u2026" : v) : ""}];
  const nodeTable = DataTable({id: "nodes" + sid, columns: nodeCols, pageSize: 100, search: r => r.name + " " + r.target + " " + r.path + " " + M.type[r.module],
    placeholder: "filter: node, target, module", rowClass: r => "st-" + r.status + (r.internal ? " internal" : ""),
    filters: [{name: "status", label: "status", options: [["", "all"]].concat(statuses.map(s => [s, s])), test: (r, v) => r.status === v},
              {name: "plumbing", label: "nodes", initial: "model", options: [["model", "the model's"], ["", "+ graph plumbing"]],
               test: r => !r.internal}]});
  root.appendChild(h("h2", {text: "Nodes"}));
  root.appendChild(nodeTable.el);

  // operators
  const opTotal = {flops: 0, time: 0};
  const opCols = [
    {key: "op", label: "operator", get: o => o.op}, {key: "calls", label: "calls", num: true, get: o => o.calls},
    {key: "flops", label: "FLOPs", num: true, get: o => o.flops, fmt: count},
    {key: "flops_pct", label: "% FLOPs", num: true, get: o => 100 * o.flops / opTotal.flops, fmt: v => isFinite(v) ? fixed(v, 2) + "%" : "-"},
    {key: "macs", label: "MACs", num: true, get: o => o.macs, fmt: count},
    {key: "time", label: "time", num: true, timed: true, get: o => o.time, fmt: time},
    {key: "time_pct", label: "% time", num: true, timed: true, get: o => o.time === null ? null : 100 * o.time / opTotal.time, fmt: v => v === null || !isFinite(v) ? "-" : fixed(v, 2) + "%"},
    {key: "bytes", label: "bytes", num: true, get: o => o.bytes, fmt: bytes},
    {key: "unsupported", label: "unsupported", num: true, get: o => o.unsupported || null, fmt: v => v ? String(v) : ""}];
  const opTable = DataTable({id: "operators" + sid, columns: opCols, pageSize: 200, sort: ["flops", true], search: o => o.op,
                             placeholder: "filter operators", rowClass: o => o.unsupported ? "st-unsupported" : null});
  root.appendChild(h("h2", {text: "Operators"}));
  root.appendChild(opTable.el);

  // memory and roofline
  const charts = h("div", {cls: "grid2"});
  const memBox = h("div", {id: "memory" + sid});
  add(charts, [h("div", null, [h("h2", {text: "Memory over the nodes"}), memBox])]);
  let roofBox = null;
  if (sec.roofline) { roofBox = h("div", {id: "roofline" + sid}); add(charts, [h("div", null, [h("h2", {text: "Roofline on " + sec.roofline.hardware}), roofBox])]); }
  root.appendChild(charts);
  if (sec.roofline) drawRoofline(roofBox, sec.roofline, nodes);

  function drawMemory() {
    const pts = nodes.filter(r => state.view.test(r) && (r.mem_after !== null || r.mem_before !== null))
                     .map(r => [r.index, r.mem_after !== null ? r.mem_after : r.mem_before, r]);
    if (!pts.length) { memBox.replaceChildren(h("p", {cls: "muted", text: "no memory measured for these nodes"})); return; }
    const W = 620, H = 230, L = 62, B = 24, x0 = pts[0][0], x1 = Math.max(pts[pts.length - 1][0], x0 + 1);
    let peak = pts[0]; for (const p of pts) if (p[1] > peak[1]) peak = p;
    const ymax = Math.max(peak[1], 1);
    const X = i => L + (W - L - 8) * (i - x0) / (x1 - x0), Y = v => H - B - (H - B - 8) * v / ymax;
    const line = pts.map(p => X(p[0]).toFixed(1) + "," + Y(p[1]).toFixed(1)).join(" ");
    const svg = sv("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H, cls: "memory-curve"}, [
      sv("line", {x1: L, y1: H - B, x2: W - 8, y2: H - B, cls: "axis"}), sv("line", {x1: L, y1: 8, x2: L, y2: H - B, cls: "axis"}),
      sv("text", {x: L - 4, y: 12, "text-anchor": "end", text: bytes(ymax)}), sv("text", {x: L - 4, y: H - B, "text-anchor": "end", text: "0"}),
      sv("text", {x: L, y: H - 6, text: "node " + x0}), sv("text", {x: W - 8, y: H - 6, "text-anchor": "end", text: "node " + x1}),
      sv("polyline", {points: line, fill: "none", stroke: "#2f6fde", "stroke-width": 1.5}),
      sv("circle", {cx: X(peak[0]), cy: Y(peak[1]), r: 4, fill: "#c62828"}),
      sv("text", {x: Math.min(X(peak[0]) + 6, W - 150), y: Math.max(Y(peak[1]) + 4, 20), text: "peak " + bytes(peak[1]) + " at " + peak[2].name})]);
    svg.addEventListener("mousemove", ev => { const box = svg.getBoundingClientRect();
      const i = x0 + (ev.clientX - box.left - L) / (W - L - 8) * (x1 - x0);
      let lo = 0, hi = pts.length - 1; while (lo < hi) { const mid = (lo + hi) >> 1; if (pts[mid][0] < i) lo = mid + 1; else hi = mid; }
      const p = pts[lo]; showTip(ev, "#" + p[0] + " " + p[2].name + " (" + (p[2].path || "root") + "): " + bytes(p[1])); });
    svg.addEventListener("mouseleave", hideTip);
    memBox.replaceChildren(svg, h("p", {cls: "muted", text: "live bytes after each node (" + head.memory_source + ")"}));
  }

  function update() {
    const v = state.view;
    sums = {flops: new Float64Array(n), macs: new Float64Array(n), time: new Float64Array(n), timed: new Uint8Array(n),
            bytes: new Float64Array(n), nodes: new Int32Array(n)};
    const shown = [];
    const ops = new Map();
    for (const r of nodes) {
      if (!v.test(r)) continue;
      shown.push(r);
      const f = v.flops(r), m = v.macs(r), t = r.internal ? null : v.time(r), b = v.bytes(r);
      const addTo = i => { sums.flops[i] += f || 0; sums.macs[i] += m || 0; sums.bytes[i] += b || 0; sums.nodes[i] += 1;
                           if (t !== null && t !== undefined) { sums.time[i] += t; sums.timed[i] = 1; } };
      addTo(0); for (const i of r.chain) addTo(i);
      const key = (r.op === "placeholder" || r.op === "get_attr" || r.op === "output") ? r.op : r.target;
      let o = ops.get(key);
      if (!o) { o = {op: key, calls: 0, flops: 0, macs: 0, time: null, bytes: 0, unsupported: 0}; ops.set(key, o); }
      o.calls++; o.flops += f || 0; o.macs += m || 0; o.bytes += b || 0; if (r.status === "unsupported") o.unsupported++;
      if (t !== null && t !== undefined) o.time = (o.time || 0) + t;
    }
    opTotal.flops = sums.flops[0]; opTotal.time = sums.timed[0] ? sums.time[0] : null;
    for (const box of [treeBox, nodeTable.el, opTable.el]) box.classList.toggle("untimed", !sums.timed[0]);  // no "-" columns on meta
    drawTree(); drawIcicle(); nodeTable.setRows(shown); opTable.setRows(Array.from(ops.values())); drawMemory();
  }
  update();
}

function drawRoofline(box, R, nodes) {
  const W = 620, H = 300, L = 64, B = 34;
  const pts = R.points;
  if (!pts.length) { box.replaceChildren(h("p", {cls: "muted", text: "no node with FLOPs and bytes"})); return; }
  const ridge = R.peak / R.bandwidth;
  let xmin = ridge, xmax = ridge, ymin = R.peak, ymax = R.peak;
  for (const p of pts) { xmin = Math.min(xmin, p[1]); xmax = Math.max(xmax, p[1]); ymin = Math.min(ymin, p[2]); ymax = Math.max(ymax, p[2]); }
  const lx0 = Math.floor(Math.log10(xmin)), lx1 = Math.ceil(Math.log10(xmax)) + (xmax === xmin ? 1 : 0);
  const ly0 = Math.floor(Math.log10(ymin)), ly1 = Math.ceil(Math.log10(ymax * 1.5));
  const X = v => L + (W - L - 10) * (Math.log10(v) - lx0) / Math.max(lx1 - lx0, 1);
  const Y = v => H - B - (H - B - 10) * (Math.log10(v) - ly0) / Math.max(ly1 - ly0, 1);
  const kids = [sv("line", {x1: L, y1: H - B, x2: W - 10, y2: H - B, cls: "axis"}), sv("line", {x1: L, y1: 10, x2: L, y2: H - B, cls: "axis"})];
  for (let e = lx0; e <= lx1; e++) kids.push(sv("text", {x: X(Math.pow(10, e)), y: H - B + 14, "text-anchor": "middle", text: "1e" + e}));
  for (let e = ly0; e <= ly1; e += Math.max(1, Math.round((ly1 - ly0) / 6))) kids.push(sv("text", {x: L - 4, y: Y(Math.pow(10, e)) + 4, "text-anchor": "end", text: count(Math.pow(10, e))}));
  kids.push(sv("text", {x: (L + W) / 2, y: H - 4, "text-anchor": "middle", text: "intensity (FLOP per byte)"}));
  const roof = [];
  for (let e = lx0; e <= lx1; e += 0.05) { const x = Math.pow(10, e); roof.push(X(x).toFixed(1) + "," + Y(Math.min(R.peak, R.bandwidth * x)).toFixed(1)); }
  kids.push(sv("polyline", {points: roof.join(" "), fill: "none", stroke: "#1d2330", "stroke-width": 1.5}));
  kids.push(sv("text", {x: W - 12, y: Y(R.peak) - 4, "text-anchor": "end", text: R.dtype + " peak " + count(R.peak) + "FLOP/s"}));
  const total = pts.reduce((s, p) => s + (p[3] || 0), 0) || 1;
  const byIndex = new Map(nodes.map(r => [r.index, r]));
  for (const p of pts) {
    const r = byIndex.get(p[0]);
    const text = "#" + p[0] + " " + r.name + " (" + r.target + "): " + intensity(p[1]) + " FLOP/B, " + count(p[2]) + "FLOP/s, roofline " + time(p[3]) + (p[4] !== null ? ", measured " + time(p[4]) : "") + ", " + (p[5] || "-");
    kids.push(sv("circle", {cx: X(p[1]).toFixed(1), cy: Y(p[2]).toFixed(1), r: (2 + 10 * Math.sqrt(p[3] / total)).toFixed(1),
      fill: p[5] === "memory" ? "rgba(198,40,40,.45)" : "rgba(47,111,222,.45)", onmousemove: ev => showTip(ev, text), onmouseleave: hideTip}));
  }
  const svg = sv("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H, cls: "roofline-plot"}, kids);
  box.replaceChildren(svg, h("p", {cls: "muted", text: R.summary.filter(x => x).map(([k, v]) => k + " " + v).join("; ") +
    (R.timed ? "; points at their achieved FLOP/s" : "; not timed there: points on the roof (their predicted rate)") +
    "; red: memory-bound, blue: compute-bound; size: predicted time"}));
}

// ------------------------------------------------------------ a diff
function diffPage(D) {
  app.appendChild(h("h1", {text: D.title}));
  app.appendChild(h("p", {cls: "muted", text: "A: " + D.a.label + " (" + D.a.model + ", " + D.a.device + ")  \u2192  B: " + D.b.label + " (" + D.b.model + ", " + D.b.device + ")"}));
  const fmtOf = m => m.endsWith("time_ms") ? time : m === "bytes" ? bytes : count;
  const totals = h("table", {cls: "data", id: "totals"}, [h("thead", null, [h("tr", null, ["metric", "A", "B", "change", "change %"].map((t, i) => h("th", {cls: i ? "num" : null, text: t})))]),
    h("tbody", null, D.metrics.map(m => { const t = D.totals[m]; const d = t.delta;
      return h("tr", null, [h("td", {text: D.labels[m]}), h("td", {cls: "num", text: fmtOf(m)(t.a)}), h("td", {cls: "num", text: fmtOf(m)(t.b)}),
        h("td", {cls: "num " + (d > 0 ? "up" : d < 0 ? "down" : ""), text: signed(fmtOf(m))(d)}), h("td", {cls: "num", text: changePct(t.relative, d)})]); }))]);
  app.appendChild(h("div", {cls: "scroll"}, [totals]));
  if (D.checks && D.checks.length) {
    const bad = D.violations || [];
    app.appendChild(h("h2", {text: "Gate"}));
    app.appendChild(h("ul", {id: "gate"}, D.checks.map(c => { const v = bad.filter(x => x.expr === c);
      return h("li", {cls: v.length ? "fail" : "pass", text: c + ": " + (v.length ? v.map(x => x.message).join("; ") : "passed")}); })));
  }
  if (D.notes && D.notes.length) app.appendChild(h("ul", {cls: "muted"}, D.notes.map(t => h("li", {text: t}))));
  const cols = [{key: "kind", label: "kind", get: r => r.kind}, {key: "key", label: "module / operator", get: r => r.key,
                 fmt: (v, r) => r.old_key ? r.old_key + " \u2192 " + v : (v || "(root)")},
                {key: "status", label: "status", get: r => r.status}, {key: "type", label: "type", get: r => r.type}];
  for (const m of D.metrics) {
    const f = fmtOf(m);
    cols.push({key: m + "_a", label: D.labels[m] + " A", num: true, get: r => r.a[m], fmt: f});
    cols.push({key: m + "_b", label: D.labels[m] + " B", num: true, get: r => r.b[m], fmt: f});
    cols.push({key: m + "_d", label: "\u0394 " + D.labels[m], num: true, get: r => r.delta[m], fmt: signed(f),
               cls: v => v > 0 ? "up" : v < 0 ? "down" : ""});
    cols.push({key: m + "_r", label: "\u0394%", num: true, get: r => r.relative[m], fmt: (v, r) => changePct(v, r.delta[m])});
  }
  const kinds = Array.from(new Set(D.rows.map(r => r.kind))), statuses = Array.from(new Set(D.rows.map(r => r.status)));
  const table = DataTable({id: "diff", columns: cols, rows: D.rows, pageSize: 200, search: r => (r.old_key || "") + " " + r.key + " " + (r.type || ""),
    placeholder: "filter: module, operator, type", rowClass: r => "diff-" + r.status,
    filters: [{name: "kind", label: "rows", options: [["", "all"]].concat(kinds.map(k => [k, k + "s"])), test: (r, v) => r.kind === v},
              {name: "status", label: "status", options: [["", "all"]].concat(statuses.map(s => [s, s])), test: (r, v) => r.status === v}]});
  app.appendChild(h("h2", {text: "Changes (largest first)"}));
  app.appendChild(table.el);
}

function main() {
  if (DOC.kind === "diff") { diffPage(DOC); return; }
  const secs = DOC.sections;
  const boxes = secs.map(() => h("div", {cls: "section"}));
  if (secs.length > 1) {
    const nav = h("div", {cls: "tabs sections"});
    const buttons = secs.map((s, i) => h("button", {text: s.title, "data-section": i, cls: i ? null : "active", onclick: () => {
      buttons.forEach((b, k) => b.classList.toggle("active", k === i));
      boxes.forEach((b, k) => { b.style.display = k === i ? "" : "none"; });
      if (!boxes[i].firstChild) section(secs[i], boxes[i], i); }}));
    add(nav, buttons); app.appendChild(nav);
  }
  boxes.forEach((b, i) => { if (i) b.style.display = "none"; app.appendChild(b); });
  section(secs[0], boxes[0], 0);
}

try {
  app.replaceChildren();
  main();
} catch (e) {
  app.appendChild(h("div", {cls: "error", text: "This report failed to draw: " + (e && e.stack || e)}));
  console.error(e);
}
document.body.setAttribute("data-render-ms", (performance.now() - T0).toFixed(1));
document.body.setAttribute("data-ready", "1");
})();
"""

"""Tests for ``torch_flops.report``: golden text for the tree and the tables (records with injected
times, so the output is stable), the JSON document against its schema, the chrome trace, the
optional pandas export and the facade's wrappers."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import tabulate as tabulate_module
import torch
from torch import nn

import torch_flops
from torch_flops import Profile, TorchFLOPsByFX, report

MiB = 1 << 20


def lines(text: str) -> list[str]:
    """Compare tables line by line without trailing blanks (tabulate pads the last column)."""
    return [line.rstrip() for line in text.splitlines()]


# ---------------------------------------------------------------------- golden text
PROFILE_GOLDEN = """\
torch_flops profile
===================
Model:       Net
Inputs:      x (4, 10)
Params:      137
Model size:  unknown (no node shows the dtype of the 137 params)
MACs:        560 MACs
FLOPs:       1.26 KFLOPs
Latency:     4.87 ms; first (cold) call: no warm-up ran; warmup=1 (CLI: --warmup 1) gives warm timings
Throughput:  822 samples/s
FLOP/s:      258 KFLOP/s achieved
Peak memory: 3.00 MiB (live_tensors)
Batch size:  4
Device:      cpu
Tracer:      fx
Nodes:       8
Unsupported: 1 node(s), excluded: torch.mystery x1

module                  params  % params  MACs   % MACs   FLOPs  % FLOPs  latency (cold)  % latency  FLOP/s
----------------------  ------  --------  ----  -------  ------  -------  --------------  ---------  ------
Net                        137   100.00%   560  100.00%  1.26 K  100.00%         4.87 ms    100.00%   258 K
  encoder (Sequential)     110    80.29%   400   71.43%     880   70.06%         2.50 ms     51.39%   352 K
    0 (Linear)             110    80.29%   400   71.43%     840   66.88%         2.00 ms     41.11%   420 K
    1 (ReLU)                 0     0.00%     0    0.00%      40    3.18%          500 us     10.28%  80.0 K
  head (Linear)             22    16.06%   160   28.57%     336   26.75%         2.00 ms     41.11%   168 K
  unused (Linear)            5     3.65%     0    0.00%       0    0.00%               -          -       -

Legend: params = parameters; MACs = multiply-accumulates; FLOPs = 2 x MACs + other float ops; % = share of the
  whole model; latency (cold) = sum of the nodes' times (the first, cold, call: warmup=1 gives warm times);
  FLOP/s = FLOPs / latency; K, M, G, T = 10^3, 10^6, 10^9, 10^12; KiB, MiB, GiB = 2^10, 2^20, 2^30 bytes.

Top 2 innermost modules:
  by FLOPs:    encoder.0 (Linear) 840 66.88%, head (Linear) 336 26.75%
  by MACs:     encoder.0 (Linear) 400 71.43%, head (Linear) 160 28.57%
  by params:   encoder.0 (Linear) 110 80.29%, head (Linear) 22 16.06%
  by latency:  encoder.0 (Linear) 2.00 ms 41.11%, head (Linear) 2.00 ms 41.11%
"""

UNTIMED_GOLDEN = """\
torch_flops profile
===================
Model:       Net
Inputs:      x (4, 10)
Params:      137
Model size:  unknown (no node shows the dtype of the 137 params)
MACs:        560 MACs
FLOPs:       1.26 KFLOPs
Latency:     not measured (meta)
Throughput:  -
FLOP/s:      -
Peak memory: 3.00 MiB (live_tensors)
Batch size:  4
Device:      meta
Tracer:      fx
Nodes:       8
Unsupported: 1 node(s), excluded: torch.mystery x1

module                  params  % params  MACs   % MACs   FLOPs  % FLOPs
----------------------  ------  --------  ----  -------  ------  -------
Net                        137   100.00%   560  100.00%  1.26 K  100.00%
  encoder (Sequential)     110    80.29%   400   71.43%     880   70.06%
  head (Linear)             22    16.06%   160   28.57%     336   26.75%
  unused (Linear)            5     3.65%     0    0.00%       0    0.00%

Legend: params = parameters; MACs = multiply-accumulates; FLOPs = 2 x MACs + other float ops; % = share of the
  whole model; K, M, G, T = 10^3, 10^6, 10^9, 10^12; KiB, MiB, GiB = 2^10, 2^20, 2^30 bytes.

Top 2 modules at depth 1:
  by FLOPs:    encoder (Sequential) 880 70.06%, head (Linear) 336 26.75%
  by MACs:     encoder (Sequential) 400 71.43%, head (Linear) 160 28.57%
  by params:   encoder (Sequential) 110 80.29%, head (Linear) 22 16.06%
"""

MODULE_TABLE_GOLDEN = """\
module     type          nodes    params    FLOPs    MACs     time    % time    unsupported
---------  ----------  -------  --------  -------  ------  -------  --------  -------------
(root)     Net               8       137   1.26 K     560  4.87 ms   100.00%              1
encoder    Sequential        2       110      880     400  2.50 ms    51.39%
encoder.0  Linear            1       110      840     400  2.00 ms    41.11%
encoder.1  ReLU              1         0       40       0   500 us    10.28%
head       Linear            2        22      336     160  2.00 ms    41.11%
unused     Linear            0         5        0       0        -         -
"""

OPERATOR_TABLE_GOLDEN = """\
operator         calls    FLOPs    % FLOPs    MACs     time    % time    unsupported
-------------  -------  -------  ---------  ------  -------  --------  -------------
Linear               3   1.18 K     93.63%     560  4.00 ms    82.22%
ReLU                 1       40      3.18%       0   500 us    10.28%
operator.add         1       40      3.18%       0   100 us     2.06%
placeholder          1        0      0.00%       0  10.0 us     0.21%
torch.mystery        1        0      0.00%       0   250 us     5.14%              1
output               1        0      0.00%       0  5.00 us     0.10%
total                8   1.26 K                560  4.87 ms                        1
"""

NODE_TABLE_GOLDEN = """\
node       target         module     status         FLOPs    MACs     time    mem before    mem after    mem delta  output shape
---------  -------------  ---------  -----------  -------  ------  -------  ------------  -----------  -----------  --------------
x          x              -          zero               0       0  10.0 us           0 B     1.00 MiB     1.00 MiB  (4, 10)
encoder_0  Linear         encoder.0  counted          840     400  2.00 ms      1.00 MiB     3.00 MiB     2.00 MiB  (4, 10)
encoder_1  ReLU           encoder.1  counted           40       0   500 us      3.00 MiB     2.00 MiB    -1.00 MiB  (4, 10)
add        operator.add   -          counted           40       0   100 us             -            -            -  (4, 10)
head       Linear         head       counted          168      80  1.00 ms             -            -            -  (4, 2)
mystery    torch.mystery  -          unsupported        -       -   250 us             -            -            -  (4, 10)
head_1     Linear         head       counted          168      80  1.00 ms             -            -            -  (4, 2)
output     output         -          zero               0       0  5.00 us             -            -            -  [(4, 2), -]
total                                              1.26 K     560  4.87 ms
"""

MARKDOWN_GOLDEN = """\
**torch_flops profile**: 137 params, 560 MACs, 1.26 KFLOPs, latency 4.87 ms (first call, cold) on cpu (tracer fx, 1 unsupported node(s))

| module    | type       |   nodes |   params |   FLOPs |   MACs |    time |   % time |   unsupported |
|-----------|------------|---------|----------|---------|--------|---------|----------|---------------|
| (root)    | Net        |       8 |      137 |  1.26 K |    560 | 4.87 ms |  100.00% |             1 |
| encoder   | Sequential |       2 |      110 |     880 |    400 | 2.50 ms |   51.39% |               |
| encoder.0 | Linear     |       1 |      110 |     840 |    400 | 2.00 ms |   41.11% |               |
| encoder.1 | ReLU       |       1 |        0 |      40 |      0 |  500 us |   10.28% |               |
| head      | Linear     |       2 |       22 |     336 |    160 | 2.00 ms |   41.11% |               |
| unused    | Linear     |       0 |        5 |       0 |      0 |       - |        - |               |
"""

CSV_GOLDEN = """\
operator,calls,flops,macs,time_ms,unsupported,bytes_read,bytes_written
Linear,3,1176,560,4.0,0,0,0
ReLU,1,40,0,0.5,0,0,0
operator.add,1,40,0,0.1,0,0,0
placeholder,1,0,0,0.01,0,0,0
torch.mystery,1,0,0,0.25,1,0,0
output,1,0,0,0.005,0,0,0
"""


def test_model_profile_golden(hand_profile: Any) -> None:
    assert lines(report.model_profile_text(hand_profile(), top=2)) == PROFILE_GOLDEN.splitlines()


def test_untimed_profile_golden(hand_profile: Any) -> None:
    assert lines(report.model_profile_text(hand_profile(timed=False), depth=1, top=2)) == \
        UNTIMED_GOLDEN.splitlines()


def test_tree_depth_limits_rows(hand_profile: Any) -> None:
    text = report.module_tree(hand_profile(), depth=1)
    tree_lines = PROFILE_GOLDEN.split("\n\n")[1].splitlines()
    assert lines(text) == [line for line in tree_lines if not line.startswith("    ")]
    assert lines(report.module_tree(hand_profile(), depth=0))[2].startswith("Net ")
    with pytest.raises(ValueError, match="depth must be"):
        report.module_tree(hand_profile(), depth=-3)


def test_grouped_tables_golden(hand_profile: Any) -> None:
    p = hand_profile()
    assert lines(report.table_text(p, "module")) == MODULE_TABLE_GOLDEN.splitlines()
    assert lines(report.table_text(p, "operator")) == OPERATOR_TABLE_GOLDEN.splitlines()
    with pytest.raises(ValueError, match="group_by must be one of"):
        report.table_text(p, "layer")  # type: ignore[arg-type]


def test_node_table_golden(hand_profile: Any) -> None:
    p = hand_profile()
    assert lines(report.node_table(p.records)) == NODE_TABLE_GOLDEN.splitlines()
    assert report.table_text(p, "node") == report.node_table(p.records)


def test_markdown_and_csv_golden(hand_profile: Any) -> None:
    p = hand_profile()
    assert lines(report.markdown(p, "module")) == MARKDOWN_GOLDEN.splitlines()
    assert report.csv_text(p, "operator").splitlines() == CSV_GOLDEN.splitlines()
    rows = list(csv.reader(io.StringIO(report.csv_text(p, "node"))))
    assert rows[0] == list(report.NODE_COLUMNS) and len(rows) == 1 + len(p.records)


def test_tabulate_globals_untouched(hand_profile: Any) -> None:
    before = tabulate_module.PRESERVE_WHITESPACE
    p = hand_profile()
    report.model_profile_text(p, top=3)
    report.markdown(p)
    for group_by in report.GROUP_BY:
        report.table_text(p, group_by)  # type: ignore[arg-type]
    assert tabulate_module.PRESERVE_WHITESPACE is before


# ---------------------------------------------------------------------- rows
def test_tree_rows_raw_and_formatted(hand_profile: Any) -> None:
    rows = report.tree_rows(hand_profile(), depth=1)
    assert [r[0] for r in rows] == ["", "encoder", "head", "unused"]
    root = dict(zip(report.TREE_COLUMNS, rows[0]))
    assert root["params"] == 137 and root["macs"] == 560 and root["flops"] == 1256
    assert root["params_pct"] == 100.0 and root["time_ms"] == pytest.approx(4.865)
    assert root["flops_per_s"] == pytest.approx(1256 / 4.865e-3)
    unused = dict(zip(report.TREE_COLUMNS, rows[3]))
    assert unused["time_ms"] is None and unused["time_pct"] is None and unused["flops_per_s"] is None
    text = report.format_rows(report.TREE_COLUMNS, rows)
    # 4.865 ms in all: "4.87 ms" whichever order the node times are summed in (the sum is read to 12 digits)
    assert text[0][3:] == ["137", "100.00%", "560", "100.00%", "1.26 K", "100.00%", "4.87 ms", "100.00%", "258 K"]
    assert text[3][-3:] == ["-", "-", "-"]


def test_format_helpers() -> None:
    assert report.format_count(4_089_184_256, "MACs") == "4.09 GMACs"
    assert report.format_count(25_557_032) == "25.6 M"
    assert report.format_time_ms(3.2) == "3.20 ms"
    # one sum, added in two orders (Python 3.11's sum and 3.12's compensated one differ in the last bit):
    # 4.865 either way, which prints as the double nearest 4.865 does
    assert report.format_time_ms(4.864999999999999) == report.format_time_ms(4.865000000000001) == "4.87 ms"
    assert report.format_percent(1, 8) == "12.50%"
    assert report.format_percent(None, 8) == report.format_percent(1, 0) == "-"


@pytest.mark.parametrize(("value", "formatter", "text"), [
    # the unit is the one the rounded number needs: 999,999 is 999.999 K, three digits 1000 K = 1.00 M
    (999_999, report.format_count, "1.00 M"), (999_999_999, report.format_count, "1.00 G"),
    (99_950, report.format_count, "100 K"),  # 99.95 K: three digits 100 (not 100.0)
    (9.996, report.format_count, "10.0"), (999, report.format_count, "999"), (999.6, report.format_count, "1.00 K"),
    (1_048_572, report.format_bytes, "1.00 MiB"),  # 1023.996 KiB: 1024 KiB = 1.00 MiB
    (1_073_741_823, report.format_bytes, "1.00 GiB"), (10_238, report.format_bytes, "10.0 KiB"),  # 9.998 KiB
    (1_047_552, report.format_bytes, "1023 KiB"), (1023, report.format_bytes, "1023 B"),
    (999.9, report.format_time_ms, "1.00 s"), (0.99996, report.format_time_ms, "1.00 ms"),
    (0.0009995, report.format_time_ms, "1.00 us"),  # 0.9995 us: 1.00 us
])
def test_numbers_at_a_unit_s_edge_print_in_the_unit_their_rounding_needs(value: float, formatter: Any,
                                                                           text: str) -> None:
    assert formatter(value) == text


def test_the_html_page_prints_numbers_as_the_report_does(tmp_path: Any) -> None:
    # the page's JavaScript formatters (torch_flops/html.py) against report's, on the edges above and
    # random values, run in node where it is installed
    import random
    import shutil
    import subprocess

    from torch_flops import html
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    source = Path(html.__file__).read_text(encoding="utf-8")
    script = source[source.index("const PREFIX"):source.index("function plus(a, b)")]
    rng = random.Random(0)
    counts = [999_999, 99_950, 9.996, 999, 999.6, 10.25, 424.5, 0.125, 99.95] + \
        [rng.choice([1, 1e3, 1e6, 1e9]) * rng.random() * 1000 for _ in range(200)]
    counts += [round(c) for c in counts]
    sizes = [1_048_572, 1_073_741_823, 10_238, 1_047_552, 1023, -1_048_572] + [round(abs(c)) for c in counts]
    times = [999.9, 0.99996, 0.0009995, 0.0] + [abs(c) / 1e4 for c in counts]
    # the roofline's FLOP per byte (the plot's tooltips) and a diff's signed changes, 0 among them
    intensities = [0.25, 16.0, 62.1, 1365.3, 999.96, 1e-5, 0.0, 0.3125, 1.125, 100.5, 9.996] + \
        [10 ** rng.uniform(-6, 6) for _ in range(200)] + [rng.randrange(8000) / 8 for _ in range(200)] + \
        [1e21, 3.7e25, 1e-99, 1e-300, 9.995e-05, 1000000000.5, 51091551885.472565,  # (exact ties, extremes,
         12350000000001 / 1e12, 999.499999999999, 1.2350000000001e-4]  # near-ties: read to 12 digits first)
    changes = [0, 5, -5, 1.5e6, -2048, 0.25]
    run = script + f"console.log(JSON.stringify([{json.dumps(counts)}.map(count), {json.dumps(sizes)}.map(bytes), " \
                   f"{json.dumps(times)}.map(time), {json.dumps(intensities)}.map(intensity), " \
                   f"{json.dumps(changes)}.map(signed(count)), {json.dumps(changes)}.map(signed(time))]));"
    page = json.loads(subprocess.run(["node", "-e", run], capture_output=True, text=True, check=True).stdout)
    from torch_flops.diff import _signed
    assert page == [[report.format_count(c) for c in counts], [report.format_bytes(b) for b in sizes],
                    [report.format_time_ms(t) for t in times], [report._format_intensity(v) for v in intensities],
                    [_signed(report.format_count, c) for c in changes],
                    [_signed(report.format_time_ms, c) for c in changes]]


def test_rows_for_each_grouping(hand_profile: Any) -> None:
    p = hand_profile()
    columns, rows = report.rows_for(p, "operator")
    assert columns == report.OPERATOR_COLUMNS
    assert rows[0] == ["Linear", 3, 1176, 560, 4.0, 0, 0, 0]  # hand-made records move no bytes
    columns, rows = report.rows_for(p, "module")
    assert columns == report.MODULE_COLUMNS
    assert rows[-1] == ["unused", "Linear", 1, 0, 5, 5, 0, 0, None, 0, 0, 0]
    assert report.rows_for(p, "node") == (report.NODE_COLUMNS, report.node_rows(p.records))


# ---------------------------------------------------------------------- JSON
_RECORD_KEYS = {"index", "name", "op", "target", "module_path", "module_type", "flops", "macs", "status", "time_ms",
                "phase", "dtype", "graph", "dot_outputs", "mm_macs", "bytes_read", "bytes_written",
                "mem_before", "mem_after", "mem_delta", "output_shape", "module_stack", "note",
                # version 4: the backward of each node (null without one)
                "backward_flops", "backward_macs", "backward_time_ms", "recompute_flops", "recompute_macs",
                "saved_bytes",
                # version 4 too: a collective's bytes; an op on DTensors' logical work
                "comm_bytes", "global_flops", "global_macs", "backward_comm_bytes",
                # version 5: of the backward's MACs, FlopCounterMode's kernels' (null without a backward)
                "backward_mm_macs"}
_MODULE_KEYS = {"module_type", "depth", "params", "own_params", "flops", "macs", "time_ms", "nodes", "unsupported",
                "bytes_read", "bytes_written", "backward_flops", "backward_macs", "backward_time_ms",
                "optimizer_flops", "optimizer_time_ms", "comm_bytes", "comm_time_ms",
                "backward_comm_bytes"}
_SUMMARY_KEYS = {"params", "flops", "macs", "time_ms", "flops_per_s", "max_memory", "memory_source", "batch_size",
                 "device", "tracer", "nodes", "unsupported_nodes", "unsupported", "convention", "backward",
                 "model"}  # version 5: the model-level summary


def _check_schema(doc: dict[str, Any]) -> None:
    """The documented schema of ``torch_flops.profile`` version 5."""
    assert doc["schema"] == "torch_flops.profile" and doc["version"] == 5
    assert isinstance(doc["settings"], dict)
    assert set(doc["summary"]) == _SUMMARY_KEYS
    for r in doc["records"]:
        assert set(r) == _RECORD_KEYS
        assert r["status"] in ("counted", "zero", "ignored", "unsupported", "skipped")
        assert r["phase"] == "forward" and isinstance(r["graph"], int)
        assert r["dtype"] is None or isinstance(r["dtype"], str)
        assert r["flops"] is None or isinstance(r["flops"], int)
        assert r["time_ms"] is None or isinstance(r["time_ms"], float)
        assert isinstance(r["module_stack"], list)
    assert "" in doc["modules"]
    for m in doc["modules"].values():
        assert set(m) == _MODULE_KEYS


def test_json_round_trips_through_its_schema(tmp_path: Any, hand_profile: Any) -> None:
    p = hand_profile()
    path = tmp_path / "profile.json"
    text = report.profile_to_json(p, path)
    doc = json.loads(path.read_text())
    assert doc == json.loads(text)
    _check_schema(doc)
    assert doc["summary"]["max_memory"] == 3 * MiB and doc["summary"]["unsupported_nodes"] == 1
    back = report.profile_from_json(path)
    assert back.records == p.records and back == p
    assert report.profile_from_json(text) == p


def test_json_of_a_real_model(tmp_path: Any) -> None:
    counter = TorchFLOPsByFX(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5)))
    counter.propagate(torch.randn(2, 3, 8, 8))
    text = counter.to_json(str(tmp_path / "p.json"))
    doc = json.loads(text)
    _check_schema(doc)
    assert doc["summary"]["flops"] == counter.total_flops and doc["summary"]["batch_size"] == 2
    back = Profile.from_json(tmp_path / "p.json")
    assert back.records == counter.records
    assert back.by_module() == counter.profile.by_module()


# ---------------------------------------------------------------------- chrome trace
def _x_events(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def _check_nesting(events: list[dict[str, Any]]) -> None:
    """Any two slices of the thread are disjoint or one contains the other."""
    spans = [(round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)) for e in events]
    for i, (a0, a1) in enumerate(spans):
        for b0, b1 in spans[i + 1:]:
            assert a1 <= b0 or b1 <= a0 or (a0 <= b0 and b1 <= a1) or (b0 <= a0 and a1 <= b1)


def test_chrome_trace_of_injected_times(tmp_path: Any, hand_profile: Any) -> None:
    p = hand_profile()
    path = tmp_path / "trace.json"
    report.write_chrome_trace(p, path)
    trace = json.loads(path.read_text())
    assert trace["displayTimeUnit"] == "ms"
    events = _x_events(trace)
    nodes = [e for e in events if e["cat"] == "node"]
    assert [e["name"] for e in nodes] == [r.name for r in p.records]  # one per timed node, in order
    # laid end to end: x 10 us, encoder_0 2000 us, encoder_1 500 us, add 100 us, head 1000 us, ...
    assert [(e["ts"], e["dur"]) for e in nodes[:5]] == [(0, 10), (10, 2000), (2010, 500), (2510, 100), (2610, 1000)]
    assert nodes[1]["args"]["flops"] == 840 and nodes[1]["args"]["macs"] == 400
    assert nodes[1]["args"]["target"] == "Linear" and nodes[1]["args"]["output_shape"] == "(4, 10)"
    modules = [(e["name"], e["ts"], e["dur"]) for e in events if e["cat"] == "module"]
    # the root spans everything; "head" runs twice, around the root-level "mystery": two slices
    assert modules == [("Net", 0, 4865), ("encoder", 10, 2500), ("encoder.0", 10, 2000), ("encoder.1", 2010, 500),
                       ("head", 2610, 1000), ("head", 3860, 1000)]
    _check_nesting(events)


def test_chrome_trace_needs_times(hand_profile: Any) -> None:
    with pytest.raises(ValueError, match="needs measured times"):
        report.chrome_trace(hand_profile(timed=False))


def test_chrome_trace_of_a_real_model(tmp_path: Any) -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))
            self.norm = nn.LayerNorm(8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.norm(self.body(x) + x).softmax(-1)

    counter = TorchFLOPsByFX(Net())
    counter.propagate(torch.randn(3, 8))
    path = tmp_path / "trace.json"
    counter.export_chrome_trace(str(path))
    events = _x_events(json.loads(path.read_text()))
    timed = [r for r in counter.records if r.time_ms is not None]
    # one slice per timed node: every call (the input and output nodes run nothing)
    assert len([e for e in events if e["cat"] == "node"]) == len(timed) == len(counter.records) - 2
    assert all(e["dur"] >= 0 for e in events)
    _check_nesting(events)
    (root,) = [e for e in events if e["cat"] == "module" and e["args"]["path"] == ""]
    assert root["dur"] == pytest.approx(counter.total_time_ms * 1000, abs=0.01)


# ---------------------------------------------------------------------- pandas
def test_to_dataframe(hand_profile: Any) -> None:
    pytest.importorskip("pandas")
    p = hand_profile()
    df = report.to_dataframe(p)
    assert list(df.columns) == list(report.NODE_COLUMNS) and len(df) == len(p.records)
    df = report.to_dataframe(p, "module")
    assert df.set_index("module").loc["encoder", "flops"] == 880
    assert report.to_dataframe(p, "operator")["calls"].sum() == len(p.records)


def test_to_dataframe_without_pandas(monkeypatch: pytest.MonkeyPatch, hand_profile: Any) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match="pip install pandas"):
        report.to_dataframe(hand_profile())


# ---------------------------------------------------------------------- facade wrappers
@pytest.fixture(scope="module")
def counter() -> TorchFLOPsByFX:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 8), nn.Tanh()), nn.Linear(8, 2))
    c = TorchFLOPsByFX(model)
    c.propagate(torch.randn(5, 4))
    return c


def test_print_result_table_group_by(counter: TorchFLOPsByFX, capsys: pytest.CaptureFixture[str]) -> None:
    rows = counter.print_result_table()
    assert rows == report.node_rows(counter.records)
    legend = report.legend_text(counter.profile, "node")
    assert capsys.readouterr().out.strip() == report.node_table(counter.records).strip() + "\n\n" + legend
    rows = counter.print_result_table(group_by="module")
    assert capsys.readouterr().out.strip() == (report.table_text(counter.profile, "module").strip() + "\n\n"
                                               + report.legend_text(counter.profile, "module"))
    by_path = {r[0]: dict(zip(report.MODULE_COLUMNS, r)) for r in rows}
    assert by_path[""]["flops"] == counter.total_flops
    assert by_path["2"]["flops"] == by_path["2.0"]["flops"] + by_path["2.1"]["flops"]
    rows = counter.print_result_table(show=False, group_by="operator", as_string=True)
    assert capsys.readouterr().out == ""
    # Linear 4->8, 8->8, 8->2 on 5 rows: 160 + 320 + 80 = 560 MACs; FLOPs 2*560 + bias 40+40+10 = 1210
    assert rows[0][:4] == ["Linear", 3, "1.21 K", "560"]
    with pytest.raises(ValueError, match="group_by"):
        counter.print_result_table(show=False, group_by="layer")  # type: ignore[arg-type]


def test_print_model_profile(counter: TorchFLOPsByFX, capsys: pytest.CaptureFixture[str]) -> None:
    rows = counter.print_model_profile(depth=1, top_modules=2)
    out = capsys.readouterr().out
    assert out.startswith("torch_flops profile\n") and "Top 2 modules at depth 1:" in out
    assert "Tracer:      eager" in out and "Batch size:  5" in out
    assert [r[0] for r in rows] == ["", "0", "1", "2", "3"]
    # Linear layers 1210 (as above) + ReLU 5*8 + Tanh 5*8 (one FLOP per element each)
    assert rows[0][report.TREE_COLUMNS.index("flops")] == 1210 + 40 + 40
    strings = counter.print_model_profile(show=False, as_string=True)
    assert capsys.readouterr().out == ""
    assert strings[0][report.TREE_COLUMNS.index("flops")] == "1.29 K"
    assert len(strings) == 7  # root, 0, 1, 2, 2.0, 2.1, 3


def test_markdown_and_csv_wrappers(counter: TorchFLOPsByFX, tmp_path: Any) -> None:
    text = counter.to_markdown(group_by="operator")
    assert text.startswith("**torch_flops profile**") and "| Linear" in text
    counter.save_result_to_csv(str(tmp_path / "nodes.csv"))
    rows = list(csv.reader((tmp_path / "nodes.csv").open()))
    assert rows[0] == counter.result_header and len(rows) == 1 + len(counter.records)
    pytest.importorskip("pandas")
    assert len(counter.to_dataframe(group_by="module")) == len(counter.profile.by_module())


# ---------------------------------------------------------------------- the graph's plumbing, own parameters
def test_internal_rows_hidden_and_not_timed_into_modules() -> None:
    from torch_flops.records import is_internal

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    counter = TorchFLOPsByFX(model, tracer="export")
    counter.propagate(torch.randn(2, 4))
    internal = [r for r in counter.records if is_internal(r)]
    # export lifts the parameters to get_attr reads (0.weight, 0.bias) and adds its input guard
    assert sorted(r.target for r in internal) == ["0.bias", "0.weight", "GuardsFn"]
    assert {r.module_path for r in internal if r.op == "get_attr"} == {"0"}  # read for module 0
    model_time = sum(r.time_ms for r in counter.records if not is_internal(r))
    assert counter.total_time_ms == pytest.approx(model_time)
    assert counter.profile.by_module()["0"].time_ms == pytest.approx(
        sum(r.time_ms for r in counter.records if r.module_path == "0" and not is_internal(r)))
    text = report.table_text(counter.profile)
    assert "0.weight" not in text and "_guards_fn" not in text and "linear" in text
    assert "0.weight" in report.table_text(counter.profile, all_nodes=True)
    assert len(report.rows_for(counter.profile)[1]) == len(counter.records)  # raw rows keep every node


def test_tree_shows_a_modules_own_parameters() -> None:
    class WithToken(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.token = nn.Parameter(torch.zeros(1, 4))  # 4 parameters the root owns
            self.fc = nn.Linear(4, 4)  # 20

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x + self.token)

    counter = TorchFLOPsByFX(WithToken())
    counter.propagate(torch.randn(2, 4))
    tree = report.module_tree(counter.profile)
    lines = tree.splitlines()
    assert lines[2].split()[:2] == ["WithToken", "24"]
    assert lines[3].split()[:4] == ["(own", "parameters)", "4", "16.67%"]  # 4 of 24
    assert lines[4].split()[:3] == ["fc", "(Linear)", "20"]
    assert [row[0] for row in report.tree_rows(counter.profile)] == ["", "fc"]  # raw rows: modules only


def test_progress_line_only_on_a_terminal_after_a_delay() -> None:
    from torch_flops.progress import Progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    shown = Terminal()
    progress = Progress(stream=shown, delay_s=0.0)
    progress.step("run 1/3")
    progress.done()
    assert shown.getvalue() == "\rtorch_flops: run 1/3...\033[K\r\033[K"
    quiet = Terminal()
    Progress(stream=quiet, delay_s=60.0).step("run 1/3")  # not a second old yet
    Progress(False, stream=quiet, delay_s=0.0).step("run 1/3")  # switched off
    piped = io.StringIO()
    Progress(stream=piped, delay_s=0.0).step("run 1/3")  # not a terminal
    assert quiet.getvalue() == piped.getvalue() == ""


def test_exports_are_utf8_whatever_the_locale(tmp_path: Any) -> None:
    """CSV, Markdown and JSON are written (and JSON read back) as UTF-8 even where the locale's
    encoding is ASCII (LC_ALL=C with Python's UTF-8 mode and locale coercion off): a module named
    'größe' used to raise UnicodeEncodeError there."""
    import os
    import subprocess

    script = (
        "import sys, torch\n"
        "from torch import nn\n"
        "from torch_flops import TorchFLOPsByFX, report\n"
        "m = nn.Sequential(); m.add_module('gr\\u00f6\\u00dfe', nn.Linear(3, 2))\n"  # ASCII argv
        "c = TorchFLOPsByFX(m); c.propagate(torch.randn(1, 3))\n"
        "d = sys.argv[1]\n"
        "c.save_result_to_csv(d + '/p.csv'); c.to_json(d + '/p.json')\n"
        "report.write_atomic(d + '/p.md', report.markdown(c.profile))\n"
        "print(*sorted({r.module_path for r in report.profile_from_json(d + '/p.json').records} - {''}))\n"
    )
    env = dict(os.environ, LC_ALL="C", LANG="C", PYTHONUTF8="0", PYTHONCOERCECLOCALE="0", PYTHONIOENCODING="utf-8")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")[-2000:]
    for name in ("p.csv", "p.md"):
        assert "größe" in (tmp_path / name).read_bytes().decode("utf-8"), name
    assert "größe" in json.loads((tmp_path / "p.json").read_bytes().decode("utf-8"))["modules"]
    assert done.stdout.decode("utf-8").strip() == "größe"


def test_line_breaks_in_module_names_keep_csv_and_markdown_rows_whole() -> None:
    model = nn.Sequential()
    model.add_module("cr\rx", nn.Linear(2, 2))  # names nn.Module accepts; a row each all the same
    model.add_module("new\nline", nn.Linear(2, 2))
    model.add_module("pi|pe", nn.Linear(2, 2))
    profile = torch_flops.profile(model, torch.randn(1, 2))
    # Linear(2, 2) on one row: 4 MACs -> 8 FLOPs + 2 bias adds = 10 each
    for group_by, column in (("node", "module_path"), ("module", "module")):
        rows = list(csv.DictReader(io.StringIO(report.csv_text(profile, group_by), newline="")))
        assert [r[column] for r in rows if r[column] in model._modules] == ["cr\rx", "new\nline", "pi|pe"]
        assert sum(int(r["flops"] or 0) for r in rows if r[column] in model._modules) == 30
    table = report.markdown(profile, "module").split("\n\n")[1].splitlines()
    assert len(table) == 2 + 4  # header, rule, the root and three Linears
    assert "| cr<br>x " in table[3] and "| new<br>line " in table[4] and "| pi\\|pe " in table[5]
    diff = torch_flops.diff(torch_flops.profile(nn.Sequential(nn.Linear(2, 2)), torch.randn(1, 2)), profile)
    assert "- renamed: 0 -> cr<br>x" in diff.markdown().splitlines()


def test_symbolic_sizes_in_a_shape_are_shown_as_text(tmp_path: Any) -> None:
    # profile_compiled with dynamic shapes keeps a kernel's symbolic sizes as text ('s33', 's69 - 2')
    from dataclasses import replace

    profile = torch_flops.profile(nn.Sequential(nn.Linear(2, 2)), torch.randn(1, 2))
    records = list(profile.records)
    i = next(k for k, r in enumerate(records) if r.target == "Linear")
    records[i] = records[i]._replace(output_shape=(("s33", 8, "s69 - 2"), ("2", 4)))
    symbolic = replace(profile, records=tuple(records))
    assert report._shape_text(report._plain_shape(records[i].output_shape)) == "[(s33, 8, s69 - 2), (2, 4)]"
    assert "(s33, 8, s69 - 2)" in report.csv_text(symbolic) and "s69 - 2" in report.table_text(symbolic)
    symbolic.to_html(tmp_path / "p.html")

"""The model-level summary (``report.model_summary``), derived by hand for small models with a
fixed clock; the legend, cold-call labels, % FLOPs in the tree, time columns on meta, table
sorting/top/depth, one CSV shape format, and the REPL reprs (``Profile``, the ``print_*`` rows)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
import torch
from torch import nn

from torch_flops import Profile, TorchFLOPsByFX, report
from torch_flops.records import NodeRecord, Status


class HalfMillisecond:
    """A clock that says every node took 0.5 ms."""

    def tick(self) -> int:
        return 0

    def finish(self) -> None:
        pass

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return 0.5


def _mlp_counter(warmup: int = 1) -> TorchFLOPsByFX:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    counter = TorchFLOPsByFX(model, warmup=warmup, timer=HalfMillisecond())
    with torch.no_grad():
        counter.propagate(torch.randn(2, 8))
    return counter


def test_summary_of_a_small_model_by_hand() -> None:
    counter = _mlp_counter()
    s = report.model_summary(counter.profile)
    assert s.model == "Sequential"
    assert [(i.name, i.shape, i.dtype, i.is_tokens) for i in s.inputs] == [("input_1", (2, 8), "float32", False)]
    assert s.params == 8 * 16 + 16 + 16 * 4 + 4 == 212
    assert s.params_by_dtype == {"float32": (212, 212 * 4)} and s.model_bytes == 848  # 4 bytes a float32
    assert s.macs == 2 * 8 * 16 + 2 * 16 * 4 == 384
    # 2 x 384 MACs + the biases' adds (2*16 + 2*4) + one FLOP per ReLU element (2*16)
    assert s.flops == s.step_flops == 2 * 384 + 40 + 32 == 840
    # three nodes run (Linear, ReLU, Linear; the input and output nodes run nothing), 0.5 ms each
    assert [r.time_ms for r in counter.records] == [None, 0.5, 0.5, 0.5, None]
    assert s.latency_ms == 1.5 and s.latency_source == "nodes" and s.spread_ms is None and s.timed_calls == 1
    assert s.warm is True and s.timing_note is None
    assert s.samples_per_s == pytest.approx(2 / 1.5e-3)  # batch 2 in 1.5 ms: 1333 samples/s
    assert s.tokens is None and s.tokens_per_s is None
    assert s.flops_per_s == pytest.approx(840 / 1.5e-3)  # 560 KFLOP/s
    # live tensors: x (2x8 float32 = 64 B); + Linear's output 128 B = 192, x freed: 128; + ReLU's
    # output 128 B = 256, the peak; Linear's output freed: 128; + the last Linear's 32 B = 160
    assert [(r.mem_before, r.mem_after) for r in counter.records[1:4]] == [(64, 192), (128, 256), (128, 160)]
    assert s.peak_memory == 256
    text = report.summary_text(counter.profile)
    for line in ("Model:       Sequential", "Inputs:      input_1 (2, 8) float32", "Params:      212",
                 "Model size:  848 B (float32 212 params x 4 B)", "MACs:        384 MACs", "FLOPs:       840 FLOPs",
                 "Latency:     1.50 ms", "Throughput:  1.33 K samples/s", "FLOP/s:      560 KFLOP/s achieved",
                 "Peak memory: 256 B (live_tensors)"):
        assert line in text.splitlines(), line


def test_token_throughput_by_hand() -> None:
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 2))
    counter = TorchFLOPsByFX(model, warmup=1, timer=HalfMillisecond())
    with torch.no_grad():
        counter.propagate(torch.zeros(2, 5, dtype=torch.long))
    s = report.model_summary(counter.profile)
    assert s.inputs[0].is_tokens and s.tokens == 2 * 5
    assert s.latency_ms == 1.0  # Embedding and Linear, 0.5 ms each
    assert s.tokens_per_s == pytest.approx(10 / 1e-3) and s.samples_per_s == pytest.approx(2 / 1e-3)
    assert "Throughput:  2.00 K samples/s, 10.0 K tokens/s" in report.summary_text(counter.profile)


def test_latency_from_the_calls_times_when_the_run_kept_them(hand_profile: Any) -> None:
    # the contract for the run loop: settings["run_times_ms"], each timed call's end-to-end time
    p = hand_profile()
    timed = Profile(records=p.records, module_types=p.module_types, module_params=p.module_params,
                    batch_size=4, settings={"warmup": 1, "repeat": 3, "run_times_ms": [6.0, 5.0, 9.0]})
    s = report.model_summary(timed)
    assert s.latency_ms == 6.0 and s.spread_ms == (5.0, 9.0) and s.timed_calls == 3 and s.latency_source == "calls"
    assert s.samples_per_s == pytest.approx(4 / 6e-3)
    assert "Latency:     6.00 ms, median of 3 calls (min 5.00 ms, max 9.00 ms)" in report.summary_text(timed)
    nodes_only = Profile(records=p.records, module_types=p.module_types, settings={"warmup": 1, "repeat": 3})
    assert report.model_summary(nodes_only).spread_ms is None
    assert "each node's median over 3 calls, summed" in report.summary_text(nodes_only)


def test_model_size_by_dtype_with_a_module_that_never_ran() -> None:
    class Mixed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.low = nn.Linear(4, 4).to(torch.bfloat16)  # 20 params x 2 B
            self.full = nn.Linear(4, 4)  # 20 params x 4 B
            self.spare = nn.Linear(4, 2)  # 10 params, never called

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.full(self.low(x).float())

    p = TorchFLOPsByFX(Mixed())
    with torch.no_grad():
        p.propagate(torch.randn(3, 4, dtype=torch.bfloat16))
    s = report.model_summary(p.profile)
    # each parameter in its own dtype, the module that never ran included: 20 + 10 float32 (4 B each)
    # = 120 B, 20 bfloat16 (2 B each) = 40 B -> 160 B
    assert s.params_by_dtype == {"float32": (30, 120), "bfloat16": (20, 40)}
    assert s.model_bytes == 160
    assert "Model size:  160 B (float32 30 params x 4 B, bfloat16 20 params x 2 B)" in report.summary_text(p.profile)


def test_training_step_summary_covers_the_step() -> None:
    model = nn.Sequential(nn.Linear(4, 3))
    counter = TorchFLOPsByFX(model, timer=HalfMillisecond())
    counter.propagate(torch.randn(2, 4), loss_fn=lambda out: out.sum())
    s = report.model_summary(counter.profile)
    assert s.phases == "forward + backward"
    # forward: 2*4*3 = 24 MACs, 2*24 + 6 bias = 54 FLOPs; backward: dW 24 MACs = 48 FLOPs + the bias
    # gradient's sum over the batch (3 outputs x (2 - 1) adds), computed here from the records
    assert s.step_flops == counter.total_flops + counter.total_backward_flops
    assert s.latency_ms == pytest.approx(counter.profile.total_time_ms + counter.profile.total_backward_time_ms)


# ---------------------------------------------------------------------- cold timings, labelled
def test_cold_first_call_is_labelled_everywhere(tmp_path: Any) -> None:
    counter = _mlp_counter(warmup=0)
    p = counter.profile
    assert report.is_cold(p) and "first (cold) call" in report.timing_note(p)  # type: ignore[operator]
    assert "warmup=1" in report.summary_text(p).split("Latency:")[1].splitlines()[0]
    assert "  latency (cold)  " in report.module_tree(p).splitlines()[0]
    assert "the first, cold, call: warmup=1 gives warm times" in report.legend_text(p, "node").replace("\n  ", " ")
    assert "(first call, cold)" in report.markdown(p).splitlines()[0]
    assert "warmup=1" in report.total_time_text(p)
    doc = json.loads(report.profile_to_json(p))
    assert doc["summary"]["model"]["warm"] is False and "warmup=1" in doc["summary"]["model"]["timing_note"]
    warm = _mlp_counter(warmup=1).profile
    assert not report.is_cold(warm) and "cold" not in report.model_profile_text(warm)


# ---------------------------------------------------------------------- tables
def test_tree_gains_flops_share_and_meta_drops_time_columns(hand_profile: Any) -> None:
    header = report.module_tree(hand_profile()).splitlines()[0].split()
    assert header[header.index("FLOPs") + 1:header.index("FLOPs") + 3] == ["%", "FLOPs"]
    rows = report.tree_rows(hand_profile(), depth=1)
    encoder = dict(zip(report.TREE_COLUMNS, rows[1]))
    assert encoder["flops_pct"] == pytest.approx(100 * 880 / 1256)  # 840 + 40 of 1256
    meta = hand_profile(timed=False)
    for text in (report.module_tree(meta), report.table_text(meta, "module"), report.table_text(meta, "operator"),
                 report.table_text(meta, "node"), report.markdown(meta, "module").split("\n\n")[1]):
        header = text.splitlines()[0]
        assert "time" not in header and "latency" not in header and "FLOP/s" not in header, header
    assert "time" in report.table_text(hand_profile(), "module").splitlines()[0]


def test_sort_by_top_and_depth(hand_profile: Any) -> None:
    p = hand_profile()
    columns, rows = report.rows_for(p, "node", sort_by="flops", top=2)
    assert [r[columns.index("node")] for r in rows] == ["encoder_0", "head"]  # 840, then 168 (first of two)
    text = report.table_text(p, "node", top=2)
    assert text.splitlines()[-1].split()[:4] == ["total", "of", "all", "8"]  # the whole model's total, said so
    columns, rows = report.rows_for(p, "module", sort_by="time")
    assert [r[0] for r in rows][:3] == ["", "encoder", "encoder.0"]  # 4.86, 2.50, 2.00 ms (ties: model order)
    assert rows[-1][0] == "unused"  # untimed last
    columns, rows = report.rows_for(p, "operator", sort_by="operator")
    assert [r[0] for r in rows][:2] == ["Linear", "ReLU"]  # text ascending
    assert [r[0] for r in report.rows_for(p, "module", depth=1)[1]] == ["", "encoder", "head", "unused"]
    assert "encoder.0" not in report.markdown(p, "module", depth=1)
    with pytest.raises(ValueError, match="sort_by must be one of"):
        report.rows_for(p, "node", sort_by="params")
    with pytest.raises(ValueError, match="depth applies to group_by='module'"):
        report.table_text(p, "node", depth=1)
    with pytest.raises(ValueError, match="top must be an int >= 1"):
        report.rows_for(p, "node", top=0)


def test_print_result_table_top_and_sort_by(capsys: pytest.CaptureFixture[str]) -> None:
    counter = _mlp_counter()
    rows = counter.print_result_table(top=2, sort_by="flops")
    out = capsys.readouterr().out
    names = [r[0] for r in rows]
    assert names == ["_0", "_2"]  # Linear 8->16: 2*256 + 32 = 544 FLOPs; Linear 16->4: 2*128 + 8 = 264
    table = out.split("\n\nLegend:")[0].splitlines()
    assert [line.split()[0] for line in table[2:]] == ["_0", "_2", "total"]
    assert "Legend:" in out and "K, M, G, T" in out


def test_csv_output_shape_in_one_format(tmp_path: Any) -> None:
    class TwoOutputs(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x * 2, x.sum(0)

    counter = TorchFLOPsByFX(TwoOutputs())
    counter.propagate(torch.randn(2, 4))
    # the eager front end records torch.Size shapes; the CSV writes every shape as the tables do
    assert any(type(r.output_shape).__name__ == "Size" for r in counter.records)
    path = tmp_path / "nodes.csv"
    counter.save_result_to_csv(str(path))
    shapes = [row["output_shape"] for row in csv.DictReader(path.open())]
    assert "(2, 4)" in shapes and "(4)" in shapes and "[(2, 4), (4)]" in shapes
    assert not any("Size" in s for s in shapes)
    assert shapes == [row["output_shape"] for row in csv.DictReader(io.StringIO(report.csv_text(counter.profile)))]


# ---------------------------------------------------------------------- at the REPL
def test_reprs_are_one_line(hand_profile: Any) -> None:
    counter = _mlp_counter()
    assert repr(counter.profile) == "Profile(Sequential: 840 FLOPs, 384 MACs, 5 nodes, cpu)"
    assert repr(hand_profile()) == "Profile(Net: 1.26 KFLOPs, 560 MACs, 8 nodes, cpu)"
    assert repr(hand_profile().with_convention("macs")) == "Profile(Net: 560 FLOPs, 560 MACs, 8 nodes, cpu, macs " \
                                                            "convention)"
    big = Profile(records=(NodeRecord(0, "mm", "call_function", "aten.mm", "", "ResNet", 8_239_659_496, 4_089_184_256,
                                      Status.COUNTED, None, None, None, None, None),) * 189, device="cpu",
                  module_types={"": "ResNet"})
    assert repr(big).startswith("Profile(ResNet: ") and repr(big).endswith(" 189 nodes, cpu)")
    rows = counter.print_result_table(show=False)
    assert len(repr(rows).splitlines()) == 1 and repr(rows).startswith("<5 rows x ")
    assert rows == [list(r) for r in rows] and isinstance(rows, list)
    assert str(rows) == list.__repr__(rows)  # print(rows) still shows the values
    tree = counter.print_model_profile(show=False)
    assert repr(tree).startswith("<4 rows x ") and tree[0][0] == ""
    assert repr(report.Text("a\nb")) == "<text, 2 lines: 'a'>"


def test_repr_html_is_a_compact_summary() -> None:
    counter = _mlp_counter()
    html = counter.profile._repr_html_()
    assert html is not None and html.startswith('<div class="torch-flops-profile">')
    assert "<script" not in html and "Model size" in html and "848 B (float32 212 params x 4 B)" in html
    assert "Top modules at depth 1 by FLOPs" in html and "<td" in html


class _SlowerEachCall:
    """A clock whose nodes take 1 ms in the first timed call, 2 ms in the second, 4 ms in the third."""

    def __init__(self) -> None:
        self.calls = 0

    def tick(self) -> int:
        return self.calls

    def finish(self) -> None:
        self.calls += 1

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(2 ** (start % 3))


def test_latency_median_and_spread_over_repeated_calls() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    counter = TorchFLOPsByFX(model, repeat=3, timer=_SlowerEachCall())
    with torch.no_grad():
        counter.propagate(torch.randn(2, 8))
    s = report.model_summary(counter.profile)
    # three nodes a call: 3 x 1, 3 x 2 and 3 x 4 ms -> calls of 3, 6 and 12 ms: median 6, spread 3 .. 12
    assert counter.profile.settings["run_times_ms"] == [12.0, 3.0, 6.0]  # the counting call (last) first
    assert (s.latency_ms, s.spread_ms, s.latency_source, s.timed_calls) == (6.0, (3.0, 12.0), "calls", 3)
    assert "Latency:     6.00 ms, median of 3 calls (min 3.00 ms, max 12.0 ms)" in report.summary_text(counter.profile)

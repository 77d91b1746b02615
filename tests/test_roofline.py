"""Tests for the roofline (``torch_flops.roofline``) and its views: predicted times derived by hand
for a matmul, an elementwise op and a small network on meta tensors, a hand-made timed profile
on a toy CPU spec (achieved rates, % of roofline, lost time, ranking), a real CPU run, a
Llama-2-70B prefill on ``h100-sxm``, and the table, tree, JSON, chrome trace, PNG and CLI."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from torch_flops import Profile, Roofline, RooflineRow, TorchFLOPsByFX, hardware, report, roofline, zoo
from torch_flops.cli import main
from torch_flops.hardware import HardwareSpec

H100 = hardware.get("h100-sxm")
BF16_PEAK, FP32_PEAK, BANDWIDTH = 989.5e12, 67e12, 3.35e12  # H100 SXM datasheet (dense)


def _meta(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


class _MatMul(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


class _Add(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


def _row(line: Roofline, name: str) -> RooflineRow:
    (row,) = [r for r in line.nodes if r.name == name]
    return row


# ----------------------------------------------------------------------------- predicted times


def test_large_bf16_matmul_is_compute_bound_at_the_dense_peak() -> None:
    counter = TorchFLOPsByFX(_MatMul())
    counter.propagate(_meta(8192, 8192), _meta(8192, 8192))
    row = _row(counter.roofline("h100-sxm"), "matmul")
    flops = 2 * 8192**3  # 1,099,511,627,776: 8192^3 MACs, no bias
    nbytes = 3 * 8192 * 8192 * 2  # reads a and b, writes the product, 2 bytes each: 402,653,184
    assert (row.flops, row.bytes, row.dtype) == (flops, nbytes, "bfloat16")
    assert row.roofline_time_ms == pytest.approx(flops / BF16_PEAK * 1e3, rel=1e-12)  # 1.111 ms
    assert row.memory_time_ms == pytest.approx(nbytes / BANDWIDTH * 1e3, rel=1e-12)  # 0.120 ms
    assert row.bound == "compute" and row.intensity == pytest.approx(flops / nbytes)  # 2730.7 FLOP/B
    assert row.time_ms is None and row.lost_time_ms is None  # meta: nothing measured


def test_elementwise_op_is_memory_bound_at_the_bandwidth() -> None:
    counter = TorchFLOPsByFX(_Add())
    counter.propagate(_meta(4096, 4096), _meta(4096, 4096))
    row = _row(counter.roofline("h100-sxm"), "add")
    n = 4096 * 4096  # 16,777,216 elements, one add each
    assert (row.flops, row.bytes) == (n, 3 * n * 2)  # reads a and b, writes the sum: 100,663,296 bytes
    assert row.roofline_time_ms == pytest.approx(3 * n * 2 / BANDWIDTH * 1e3, rel=1e-12)  # 30.0 us
    # its FLOPs run on the vector units (the float32 rate), not the tensor cores: 0.25 us
    assert row.compute_time_ms == pytest.approx(n / FP32_PEAK * 1e3, rel=1e-12)
    assert row.bound == "memory" and row.intensity == pytest.approx(1 / 6)


def test_modules_and_total_sum_their_nodes() -> None:
    model = nn.Sequential(nn.Linear(4096, 4096), nn.ReLU()).to(device="meta", dtype=torch.bfloat16)
    counter = TorchFLOPsByFX(model)
    counter.propagate(_meta(2048, 4096))
    line = counter.roofline(H100)
    # Linear(4096, 4096) on (2048, 4096): 2048*4096*4096 = 34,359,738,368 MACs on the tensor cores,
    # 2048*4096 = 8,388,608 bias adds on the vector units; reads x 16,777,216 + W 33,554,432 +
    # b 8,192 bytes, writes 16,777,216
    linear = _row(line, "_0")
    linear_s = 2 * 34_359_738_368 / BF16_PEAK + 8_388_608 / FP32_PEAK
    assert linear.bytes == 16_777_216 + 33_554_432 + 8_192 + 16_777_216
    assert linear.roofline_time_ms == pytest.approx(linear_s * 1e3, rel=1e-12) and linear.bound == "compute"
    # ReLU: 8,388,608 FLOPs; reads and writes 16,777,216 bytes: memory-bound, 10.0 us
    relu = _row(line, "_1")
    relu_s = 2 * 16_777_216 / BANDWIDTH
    assert relu.roofline_time_ms == pytest.approx(relu_s * 1e3, rel=1e-12) and relu.bound == "memory"
    assert line.modules["0"].roofline_time_ms == linear.roofline_time_ms
    assert line.modules[""].roofline_time_ms == pytest.approx(line.total_roofline_ms)
    assert line.total_roofline_ms == pytest.approx((linear_s + relu_s) * 1e3, rel=1e-12)
    assert line.memory_bound_share == pytest.approx(relu_s / (linear_s + relu_s), rel=1e-12)
    assert line.modules[""].bound == "compute"  # the Linear is most of the time
    assert [r.name for r in line.ranked()][:2] == ["_0", "_1"]  # predicted slowest first
    assert [r.name for r in line.ranked(modules=True)] == ["0", "1"]  # the root is no ranking entry


# ----------------------------------------------------------------------------- timed on the hardware

TOY_CPU = HardwareSpec("toy-cpu", "1 MFLOP/s, 1 MB/s", {"float32": 1e6}, 1e6, 1 << 30,
                       {"peak": "made up for the test", "memory_bandwidth": "made up for the test"}, kind="cpu")


def _with_bytes(profile: Profile) -> Profile:
    """The hand profile of conftest (timed on CPU) with bytes moved and dtypes."""
    moved = {"encoder_0": (600, 400), "encoder_1": (160, 160), "add": (40, 20), "head": (120, 80),
             "head_1": (120, 80)}
    records = tuple(r._replace(bytes_read=moved.get(r.name, (0, 0))[0], bytes_written=moved.get(r.name, (0, 0))[1],
                               dtype="float32") for r in profile.records)
    return Profile(records=records, device=profile.device, module_types=profile.module_types,
                   module_params=profile.module_params, batch_size=profile.batch_size, settings=profile.settings)


def test_timed_profile_on_its_own_hardware(hand_profile: Any) -> None:
    line = roofline(_with_bytes(hand_profile()), TOY_CPU)
    assert line.timed
    # encoder_0 (Linear 10->10, 400 MACs, 840 FLOPs, 2.0 ms measured, 1000 bytes):
    # compute 800/1e6 + 40/1e6 s = 0.84 ms; memory 1000/1e6 s = 1.0 ms -> memory-bound, 1.0 ms
    enc0 = _row(line, "encoder_0")
    assert (enc0.compute_time_ms, enc0.roofline_time_ms, enc0.bound) == (
        pytest.approx(0.84), pytest.approx(1.0), "memory")
    assert enc0.achieved_flops_per_s == pytest.approx(840 / 2e-3)  # 420,000 FLOP/s
    assert enc0.achieved_bytes_per_s == pytest.approx(1000 / 2e-3)  # 500,000 B/s
    assert enc0.pct_of_roofline == pytest.approx(50.0) and enc0.lost_time_ms == pytest.approx(1.0)
    # head (Linear 10->2, 168 FLOPs, 1.0 ms, 200 bytes): memory 0.2 ms > compute 0.168 ms; lost 0.8 ms
    assert _row(line, "head").lost_time_ms == pytest.approx(0.8)
    # the unsupported node counted nothing: no roofline, all of its 0.25 ms lost
    mystery = _row(line, "mystery")
    assert (mystery.bound, mystery.roofline_time_ms, mystery.lost_time_ms) == (None, 0.0, pytest.approx(0.25))
    # ranked by lost time: encoder_0 1.0, head 0.8, head_1 0.8, mystery 0.25, encoder_1 0.5 - 0.32 = 0.18
    assert [r.name for r in line.ranked(5)] == ["encoder_0", "head", "head_1", "mystery", "encoder_1"]
    # modules: head ran twice (0.4 ms roofline, 2.0 measured, 1.6 lost); encoder (a Sequential that
    # calls nothing itself) is no ranking entry
    assert line.modules["head"].lost_time_ms == pytest.approx(1.6)
    assert line.modules["encoder"].roofline_time_ms == pytest.approx(1.32)
    assert [r.name for r in line.ranked(modules=True)] == ["head", "encoder.0", "encoder.1"]
    assert line.total_time_ms == pytest.approx(4.85)  # 4.865 less the input (0.010) and output (0.005) nodes
    assert [r.name for r in line.nodes] == ["encoder_0", "encoder_1", "add", "head", "mystery", "head_1"]
    assert line.unknown_flops_nodes == 1 and not line.modules[""].flops_known and line.modules["head"].flops_known


def test_a_profile_timed_elsewhere_is_only_predicted(hand_profile: Any) -> None:
    line = roofline(_with_bytes(hand_profile()), "h100-sxm")  # timed on a CPU, not on an H100
    assert not line.timed and all(r.time_ms is None and r.lost_time_ms is None for r in line.nodes)
    assert line.total_time_ms is None


def test_real_cpu_run_on_a_cpu_spec() -> None:
    model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 32))
    counter = TorchFLOPsByFX(model)
    counter.propagate(torch.randn(16, 64))
    line = counter.roofline(TOY_CPU)
    assert line.timed
    timed = [r for r in line.nodes if r.time_ms is not None]
    assert {r.name for r in timed} >= {"_0", "_1", "_2"}
    for r in timed:
        assert r.lost_time_ms == pytest.approx(r.time_ms - r.roofline_time_ms)
        assert r.pct_of_roofline == pytest.approx(100 * r.roofline_time_ms / r.time_ms)
        assert r.achieved_flops_per_s == pytest.approx(r.flops / (r.time_ms / 1e3))
    # the first Linear moves x 16*64*4 + W 128*64*4 + b 128*4 + out 16*128*4 = 4096 + 32768 + 512 + 8192
    assert _row(line, "_0").bytes == 45_568
    with pytest.raises(ValueError, match="name the hardware for a profile on cpu"):
        counter.roofline()


def test_a_profile_without_bytes_is_refused(hand_profile: Any) -> None:
    with pytest.raises(ValueError, match="no byte counts.*profile the model again"):
        roofline(hand_profile(), "h100-sxm")  # bytes None, as read from a version-2 file


def test_a_model_without_submodules_has_no_module_ranking() -> None:
    counter = TorchFLOPsByFX(_Add())
    counter.propagate(_meta(64, 64), _meta(64, 64))
    text = report.roofline_text(counter.roofline("h100-sxm"))
    assert "Top 10 nodes predicted slowest:" in text and "modules" not in text
    assert report.format_time_ms(4.2e-6) == "4.20 ns" and report.format_time_ms(-1.5) == "-1.50 ms"


def test_unknown_hardware_is_refused() -> None:
    counter = TorchFLOPsByFX(_Add())
    counter.propagate(torch.randn(2, 2), torch.randn(2, 2))
    with pytest.raises(ValueError, match="unknown hardware 'h100'"):
        counter.roofline("h100")
    with pytest.raises(TypeError, match="roofline takes a Profile .*, got int"):
        roofline(3, "h100-sxm")  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- a 70B prefill


def test_llama2_70b_prefill_on_h100_is_predicted_per_node_module_and_total() -> None:
    config = zoo.llama2_70b_config()
    with torch.device("meta"):
        model = zoo.llama(config).to(torch.bfloat16).eval()
    (ids,) = zoo.llama_example_inputs(batch_size=1, device="meta", seq_len=2048)
    counter = TorchFLOPsByFX(model)
    counter.propagate(ids)
    line = counter.roofline("h100-sxm")
    # the LM head: 2048 x 8192 x 32000 MACs, no bias: 1.074e12 FLOPs / 989.5e12 = 1.085 ms
    head = _row(line, "lm_head")
    assert head.roofline_time_ms == pytest.approx(2 * 2048 * 8192 * 32000 / BF16_PEAK * 1e3, rel=1e-12)
    # q_proj: 2048 x 8192 x 8192 MACs; reads x (2048*8192*2) and W (8192*8192*2), writes 2048*8192*2
    q = _row(line, "layers_0_self_attn_q_proj")
    assert q.bytes == 2 * 2048 * 8192 * 2 + 8192 * 8192 * 2 and q.bound == "compute"
    linears = [r for r in line.nodes if r.target == "Linear"]
    assert len(linears) == 80 * 7 + 1 and all(r.bound == "compute" for r in linears)
    # every Linear is above the knee (989.5e12 / 3.35e12 = 295 FLOP/B); the norms' and SwiGLU's
    # elementwise nodes are below it
    assert all(r.intensity > 295 for r in linears)
    assert all(r.bound == "memory" for r in line.nodes if r.target in ("operator.mul", "torch.rsqrt"))
    # the total lies between the dot products alone at peak and all work done serially on both roofs
    flops_bound = sum(2 * (r.macs or 0) for r in counter.records) / BF16_PEAK * 1e3
    serial = sum(r.compute_time_ms + r.memory_time_ms for r in line.nodes)
    assert flops_bound < line.total_roofline_ms < serial
    assert line.modules[""].roofline_time_ms == pytest.approx(line.total_roofline_ms)
    assert 0.02 < line.memory_bound_share < 0.5
    blocks = [line.modules[f"layers.{i}"].roofline_time_ms for i in range(80)]
    assert max(blocks) == pytest.approx(min(blocks))  # 80 identical blocks
    text = report.roofline_text(line, top=3)
    assert "predicted slowest" in text and f"predicted {report.format_time_ms(line.total_roofline_ms)}" in text


# ----------------------------------------------------------------------------- views


def _small_meta_counter() -> TorchFLOPsByFX:
    model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 256)).to("meta", torch.bfloat16)
    counter = TorchFLOPsByFX(model)
    counter.propagate(_meta(4096, 1024))
    return counter


def test_print_roofline_and_the_tree_columns() -> None:
    counter = _small_meta_counter()
    out = io.StringIO()
    with redirect_stdout(out):
        line = counter.print_roofline("h100-sxm", top=2)
        counter.print_model_profile(hardware="h100-sxm")
    text = out.getvalue()
    assert "Top 2 nodes predicted slowest:" in text and "Top 2 modules predicted slowest:" in text
    tree = text.splitlines()
    start = next(i for i, row in enumerate(tree) if row.startswith("module") and "params" in row)
    assert tree[start].split()[-2:] == ["roofline", "bound"]
    # the root row: the predicted total; compute-bound: the first Linear (4096 x 1024 x 1024 MACs over
    # 8 MiB x + 2 MiB W + 8 MiB out = 455 FLOP/B, above the 295 knee) takes 8.7 us of its 17 us
    assert tree[start + 2].split()[-3:] == [*report.format_time_ms(line.total_roofline_ms).split(), "compute"]
    assert tree[start + 3].split()[:2] == ["0", "(Linear)"]


def test_timed_views_show_measured_and_lost(hand_profile: Any) -> None:
    text = report.roofline_text(roofline(_with_bytes(hand_profile()), TOY_CPU), top=3)
    assert "Top 3 nodes losing most time:" in text
    # roofline 1.0 + 0.32 + 0.06 + 0.2 + 0.2 ms (every node memory-bound on the toy part); measured
    # 4.85 ms (the nodes but the input and the output)
    assert text.splitlines()[1] == ("predicted 1.78 ms, measured 4.85 ms; 100.0% of the predicted time is memory-bound; "
                                    "1 node(s) without a FLOPs formula priced by their bytes alone")
    table = text[text.index("Top 3 nodes"):].splitlines()
    assert table[1].split() == ["node", "target", "FLOPs", "bytes", "FLOP/B", "bound", "roofline", "measured", "%",
                                "roofline", "lost"]
    assert table[3].split() == ["encoder_0", "Linear", "840", "1000", "B", "0.84", "memory", "1.00", "ms", "2.00", "ms",
                                "50.00%", "1.00", "ms"]


def test_json_carries_bytes_and_the_roofline(tmp_path: Path) -> None:
    counter = _small_meta_counter()
    path = tmp_path / "p.json"
    text = counter.to_json(str(path), hardware="h100-sxm")
    doc = json.loads(path.read_text())
    assert doc == json.loads(text)
    first = {r["name"]: r for r in doc["records"]}["_0"]
    # Linear(1024, 1024) on (4096, 1024) bf16: reads 8 MiB x + 2 MiB W + 2 KiB b, writes 8 MiB
    assert (first["bytes_read"], first["bytes_written"], first["dtype"]) == (8388608 + 2097152 + 2048, 8388608,
                                                                             "bfloat16")
    roof = doc["roofline"]
    assert roof["hardware"]["name"] == "h100-sxm" and roof["hardware"]["peak"]["bfloat16"] == BF16_PEAK
    assert roof["summary"]["roofline_time_ms"] == pytest.approx(counter.roofline("h100-sxm").total_roofline_ms)
    node = {n["name"]: n for n in roof["nodes"]}["_0"]
    assert set(node) >= {"intensity", "bound", "roofline_time_ms", "lost_time_ms", "pct_of_roofline",
                         "achieved_flops_per_s", "achieved_bytes_per_s"}
    assert roof["modules"]["0"]["bound"] == "compute"
    loaded = report.profile_from_json(text)  # the roofline object does not stop a load
    assert loaded.by_module()[""].bytes_read == counter.profile.by_module()[""].bytes_read


def test_chrome_trace_counter_tracks(hand_profile: Any) -> None:
    trace = report.chrome_trace(_with_bytes(hand_profile()))
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    flops = [(e["ts"], e["args"]["FLOP/s"]) for e in counters if e["name"] == "achieved FLOP/s"]
    moved = [(e["ts"], e["args"]["bytes/s"]) for e in counters if e["name"] == "achieved bytes/s"]
    # encoder_0 starts at 10 us (after x) and runs 2 ms: 840 FLOPs / 2e-3 s, 1000 bytes / 2e-3 s
    assert (10.0, pytest.approx(420_000)) in flops and (10.0, pytest.approx(500_000)) in moved
    # encoder_1 at 2010 us: 40 FLOPs and 320 bytes in 0.5 ms
    assert (2010.0, pytest.approx(80_000)) in flops and (2010.0, pytest.approx(640_000)) in moved
    assert flops[-1] == (4865.0, 0) and moved[-1] == (4865.0, 0)  # both tracks drop to 0 at the end
    assert len(flops) == len(moved) == len(hand_profile().records) + 1


def test_png_is_written_and_shows_the_points(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib import image

    counter = _small_meta_counter()
    path = tmp_path / "roofline.png"
    fig = counter.save_roofline_plot(str(path), "h100-sxm")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = image.imread(str(path))
    assert pixels.shape == (550, 800, 4)  # 8 x 5.5 inches at 100 dpi
    ax = fig.axes[0]
    line = counter.roofline("h100-sxm")

    def colour_at(row: Any) -> Any:
        x, y = ax.transData.transform((row.intensity, row.flops / (row.roofline_time_ms / 1e3)))
        return pixels[550 - round(y) - 5, round(x), :3]  # 5 px above the centre: clear of the roof lines

    # inside a point (at least 9 px across): its colour at alpha 0.6 over white (0.6 c + 0.4)
    blue = 0.6 * torch.tensor([0x1F, 0x77, 0xB4]) / 255 + 0.4  # compute-bound
    red = 0.6 * torch.tensor([0xD6, 0x27, 0x28]) / 255 + 0.4  # memory-bound
    relu, linear = _row(line, "_1"), _row(line, "_0")
    assert (relu.bound, linear.bound) == ("memory", "compute")
    for row, expected in ((relu, red), (linear, blue)):
        assert torch.allclose(torch.tensor(colour_at(row)[:3].tolist()), expected.float(), atol=0.06), row.name
    assert (pixels[5, 5, :3] == 1.0).all()  # the margin is white
    counter.save_roofline_plot(str(tmp_path / "by_module.png"), "h100-sxm", color_by="module")
    assert (tmp_path / "by_module.png").stat().st_size > 10_000
    with pytest.raises(ValueError, match="color_by"):
        counter.save_roofline_plot(str(path), "h100-sxm", color_by="dtype")
    with pytest.raises(FileNotFoundError, match="no such directory"):
        counter.save_roofline_plot(str(tmp_path / "no" / "x.png"), "h100-sxm")


# ----------------------------------------------------------------------------- CLI


def _cli(args: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(args)
    return code, out.getvalue()


def test_cli_list_hardware() -> None:
    code, text = _cli(["--list-hardware"])
    assert code == 0
    rows = {line.split()[0]: line.split() for line in text.splitlines()[2:] if line and not line.startswith("dense")}
    assert set(rows) == set(hardware.names())
    assert rows["h100-sxm"][4] == "989.5"  # the bf16 column, dense
    header = text.splitlines()[0].split()
    assert rows["h100-sxm"][header.index("GiB")] == "80"  # its "80GB": 80 x 2^30 bytes, shown in GiB


def test_cli_hardware_roofline_and_plot(tmp_path: Path) -> None:
    png = tmp_path / "gpt2.png"
    code, text = _cli(["gpt2", "--meta", "--tokens", "1,64", "--dtype", "bfloat16", "--depth", "1", "--hardware",
                       "h100-sxm", "--roofline", "--plot", str(png), "--top", "2", "--quiet"])
    assert code == 0
    assert "Roofline on h100-sxm" in text and "Top 2 nodes predicted slowest:" in text
    header = next(row for row in text.splitlines() if row.startswith("module") and "params" in row)
    assert header.split()[-2:] == ["roofline", "bound"]
    assert png.read_bytes()[:4] == b"\x89PNG"
    # json: the roofline is an object of the document (--roofline adds no text that would break it)
    code, text = _cli(["gpt2", "--meta", "--tokens", "1,64", "--format", "json", "--hardware", "h100-sxm", "--quiet",
                       "--roofline"])
    assert code == 0 and json.loads(text)["roofline"]["summary"]["hardware"] == "h100-sxm"


@pytest.mark.parametrize(("args", "message"), [
    (["gpt2", "--meta", "--hardware", "h1000"], "--hardware: unknown hardware 'h1000'"),
    (["gpt2", "--meta", "--roofline"], "--roofline needs --hardware NAME on meta"),
    (["unet", "--plot", "x.png"], "--plot needs --hardware NAME on cpu"),
    (["gpt2", "--meta", "--hardware", "h100-sxm", "--roofline", "--format", "csv"], "would break --format csv"),
    (["gpt2", "--meta", "--hardware", "h100-sxm", "--plot", "/no/such/dir/x.png"],
     "--plot: cannot write '/no/such/dir/x.png': no such directory"),
])
def test_cli_roofline_errors(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    assert message in capsys.readouterr().err

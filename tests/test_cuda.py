"""CUDA-only checks: device-event times, the allocator's memory counters, eager equality and
FlopCounterMode agreement on a GPU. Skipped where no CUDA device is present."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from torch_flops import TorchFLOPsByFX
from torch_flops.measure import DeviceTimer, make_memory_probe, make_timer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

MiB4 = 1024 * 1024 * 4  # a (1024, 1024) float32 tensor: 4,194,304 B, a multiple of the 512 B blocks


@pytest.fixture
def cuda() -> Iterator[torch.device]:
    device = torch.device("cuda")
    deterministic = torch.backends.cudnn.deterministic
    torch.backends.cudnn.deterministic = True  # same conv algorithm in eager and in the graph
    try:
        yield device
    finally:
        torch.backends.cudnn.deterministic = deterministic
        torch.cuda.synchronize()


class ConvLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).flatten(1))


class BigLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(1024, 1024)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def test_cuda_timer_and_memory_reader_chosen(cuda: torch.device) -> None:
    assert isinstance(make_timer(cuda), DeviceTimer)
    probe = make_memory_probe(cuda, "memory_allocated")
    assert probe.read is not None and probe.read() == torch.cuda.memory_allocated()
    assert probe.source == "cuda.memory_allocated"


def test_event_times_for_every_call_node(cuda: torch.device) -> None:
    model = ConvLinear().to(cuda).eval()
    counter = TorchFLOPsByFX(model, warmup=1, repeat=3)
    with torch.no_grad():
        counter.propagate(torch.randn(2, 3, 8, 8, device=cuda))
    for r in counter.records:
        assert isinstance(r.time_ms, float) and r.time_ms >= 0.0, r.name
    kernels = {r.name: r.time_ms for r in counter.records if r.name in ("conv", "relu", "fc")}
    assert len(kernels) == 3 and all(t is not None and t > 0 for t in kernels.values())  # each launches a kernel
    assert counter.total_time_ms is not None and counter.total_time_ms > 0
    assert counter.profile.device.startswith("cuda")
    assert counter.profile.memory_source == "cuda.memory_allocated"


def test_memory_allocated_delta_of_a_known_output(cuda: torch.device) -> None:
    model = BigLinear().to(cuda).eval()
    x = torch.randn(1024, 1024, device=cuda)
    with torch.no_grad():
        model(x)  # cuBLAS workspace and handles allocated once, before measuring
        torch.cuda.synchronize()
        counter = TorchFLOPsByFX(model)
        counter.propagate(x)
    rec = {r.name: r for r in counter.records}
    # fc allocates its (1024, 1024) float32 output, 4 MiB; nothing is freed inside the node (x is
    # released after mem_after is read, and the caller still holds it anyway)
    assert rec["fc"].mem_delta == MiB4
    assert rec["fc"].mem_before is not None
    assert rec["fc"].mem_after == rec["fc"].mem_before + MiB4
    assert rec["x"].mem_delta == 0  # the input was allocated before the run
    # Linear(1024, 1024) on (1024, 1024): macs = 1024**3; flops = 2*macs + 1024*1024 bias adds
    assert (rec["fc"].macs, rec["fc"].flops) == (1024**3, 2 * 1024**3 + 1024**2)
    assert counter.max_memory is not None and counter.max_memory >= rec["fc"].mem_after


def test_max_memory_allocated(cuda: torch.device) -> None:
    model = BigLinear().to(cuda).eval()
    x = torch.randn(1024, 1024, device=cuda)
    with torch.no_grad():
        model(x)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        counter = TorchFLOPsByFX(model, mem_func_name="max_memory_allocated")
        counter.propagate(x)
    assert counter.profile.memory_source == "cuda.max_memory_allocated"
    values = [(r.mem_before, r.mem_after) for r in counter.records]
    assert all(isinstance(b, int) and isinstance(a, int) and a >= b for b, a in values)  # a peak never drops
    rec = {r.name: r for r in counter.records}
    assert rec["fc"].mem_after is not None and rec["fc"].mem_after >= base + MiB4


def test_output_equals_eager(cuda: torch.device) -> None:
    model = ConvLinear().to(cuda).eval()
    x = torch.randn(2, 3, 8, 8, device=cuda)
    with torch.no_grad():
        reference = model(x)
        out = TorchFLOPsByFX(model).propagate(x)
    assert out.device.type == "cuda"
    assert torch.equal(out, reference)


def test_macs_match_flop_counter_mode_on_cuda(cuda: torch.device) -> None:
    model = ConvLinear().to(cuda).eval()
    x = torch.randn(2, 3, 8, 8, device=cuda)
    counter = TorchFLOPsByFX(model)
    with torch.no_grad():
        counter.propagate(x)
        with FlopCounterMode(display=False) as mode:
            model(x)
    # conv 3->8, 3x3, pad 1 on (2, 3, 8, 8): 2*8*8*8 = 1024 outputs * 3*3*3 = 27648 MACs;
    # fc 512 -> 10 on (2, 512): 2*10*512 = 10240 MACs; total 37888 MACs = 75776 FLOPs for FlopCounterMode
    assert counter.total_macs == 27648 + 10240
    assert 2 * counter.total_macs == mode.get_total_flops() == 75776


def test_roofline_of_a_cuda_run_is_timed_on_its_own_device(cuda: torch.device) -> None:
    from torch_flops import hardware

    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).to(cuda, torch.bfloat16)
    counter = TorchFLOPsByFX(model, warmup=2, repeat=5)
    with torch.no_grad():
        counter.propagate(torch.randn(2048, 1024, device=cuda, dtype=torch.bfloat16))
    name = torch.cuda.get_device_name(cuda)
    assert counter.profile.settings["device_name"] == name
    try:
        spec = hardware.spec_for_device_name(name)
    except ValueError:  # a GPU the table does not know: the facade says so, naming the device
        with pytest.raises(ValueError, match="is not in the hardware table"):
            counter.roofline()
        return
    line = counter.roofline()  # the device it ran on, recognised by name
    assert line.hardware is spec and line.timed
    fc0 = next(r for r in line.nodes if r.name == "_0")
    # 2048 x 1024 x 4096 MACs in bf16: the measured time is at least the roofline (within timer noise)
    assert fc0.bound == "compute" and fc0.time_ms is not None and fc0.pct_of_roofline is not None
    assert fc0.pct_of_roofline < 110
    assert fc0.achieved_flops_per_s == pytest.approx(fc0.flops / (fc0.time_ms / 1e3))
    assert fc0.lost_time_ms == pytest.approx(fc0.time_ms - fc0.roofline_time_ms)

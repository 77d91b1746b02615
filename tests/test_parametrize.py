"""Modules with parametrized tensors (torch.nn.utils.parametrize): the parametrization runs as often
as in the eager call (spectral_norm's power iteration updates its buffers once a call), and its work
is counted (the flop_counter convention equals FlopCounterMode)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import orthogonal, spectral_norm, weight_norm
from torch.utils.flop_counter import FlopCounterMode

from torch_flops import TorchFLOPsByFX, TrainingProfiler


def _fcm(model: nn.Module, x: torch.Tensor, backward: bool = False) -> int:
    with FlopCounterMode(display=False) as counter:
        out = model(x)
        if backward:
            out.sum().backward()
    return counter.get_total_flops()


class _Draws(nn.Module):
    """A parametrization that draws random numbers and counts its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return w + 0.01 * torch.randn_like(w)


@pytest.mark.parametrize("tracer", ["auto", "fx"])
@pytest.mark.parametrize("make", [lambda: nn.Conv1d(3, 4, 3), lambda: nn.LayerNorm(6), lambda: nn.GroupNorm(1, 3),
                                  lambda: nn.Linear(6, 4)], ids=["conv", "layernorm", "groupnorm", "linear"])
def test_a_parametrization_runs_once_per_call(tracer: str, make) -> None:
    torch.manual_seed(0)
    layer = make()
    parametrize.register_parametrization(layer, "weight", _Draws())
    model = nn.Sequential(layer)  # (inside a model: the root is never one node)
    x = torch.randn(2, 3, 6)
    plain, profiled = copy.deepcopy(model), copy.deepcopy(model)
    torch.manual_seed(1)
    expected = plain(x)
    rng = torch.get_rng_state()
    torch.manual_seed(1)
    out = TorchFLOPsByFX(profiled, tracer=tracer).propagate(x)
    assert torch.equal(out, expected)
    assert torch.equal(torch.get_rng_state(), rng)  # as many numbers drawn as in one call
    # as many calls of the parametrization as the plain call made; before, the formula read the
    # weight again after the call
    calls, expected_calls = profiled[0].parametrizations.weight[0].calls, plain[0].parametrizations.weight[0].calls
    assert calls == expected_calls


def test_spectral_norm_buffers_updated_once_per_call_and_step() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(spectral_norm(nn.Conv2d(3, 4, 3)), nn.ReLU(), nn.Flatten(), nn.Linear(64, 2)).train()
    x = torch.randn(2, 3, 6, 6)
    plain, profiled = copy.deepcopy(model), copy.deepcopy(model)
    plain(x)
    TorchFLOPsByFX(profiled).propagate(x)
    u = lambda m: m[0].parametrizations.weight[0]._u
    assert torch.equal(u(profiled), u(plain))

    def loop(m: nn.Module, profile: bool) -> nn.Module:
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        profiler = TrainingProfiler(m, opt) if profile else None
        if profiler is not None:
            profiler.start_profile()
        for _ in range(2):
            m(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
        if profiler is not None:
            profiler.end_profile()
        return m

    a, b = loop(copy.deepcopy(model), False), loop(copy.deepcopy(model), True)
    assert torch.equal(u(a), u(b))
    assert torch.equal(a[0].parametrizations.weight.original, b[0].parametrizations.weight.original)


def test_parametrization_work_counted_as_flop_counter_mode() -> None:
    x = torch.randn(2, 8)
    for wrap in (orthogonal, spectral_norm, weight_norm):
        torch.manual_seed(0)
        model = nn.Sequential(wrap(nn.Linear(8, 8))).eval()
        reference = _fcm(copy.deepcopy(model), x)
        counter = TorchFLOPsByFX(model)
        counter.propagate(x)
        assert counter.profile.with_convention("flop_counter").total_flops == reference, wrap.__name__
    # orthogonal: FlopCounterMode counts its 8x8 @ 8x8 product: 2*8*8*8 = 1024, + the linear's 2*2*8*8 = 256
    torch.manual_seed(0)
    assert _fcm(nn.Sequential(orthogonal(nn.Linear(8, 8))), x) == 1280


def test_weight_norm_counted_forward_and_backward() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(weight_norm(nn.Linear(8, 6)))
    x = torch.randn(3, 8)
    counter = TorchFLOPsByFX(model)
    counter.propagate(x, loss_fn=lambda out: out.sum())
    (node,) = [r for r in counter.records if r.target == "torch._weight_norm"]
    # v (6, 8), g (6, 1): forward 3*48 + 6 = 150 (the norms' squares and adds and sqrts: 2*48,
    # g / norm: 6, the scaling: 48); backward 5*48 + 3*6 = 258
    assert node.flops == 150
    assert node.backward_flops == 258
    # the linear: 2*3*8*6 = 288 + 18 bias adds; the loss: a sum of 18 elements
    assert counter.profile.total_flops == 150 + 306 + 18


def test_training_step_of_parametrized_layers_equals_flop_counter_mode() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(weight_norm(nn.Linear(8, 6)), nn.ReLU(), nn.Unflatten(1, (6, 1)),
                          spectral_norm(nn.Conv1d(6, 4, 1)))
    x = torch.randn(3, 8)
    reference = _fcm(copy.deepcopy(model), x, backward=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    profiler = TrainingProfiler(model, opt)
    profiler.start_profile()
    model(x).sum().backward()
    profiler.stop_profile()
    profile = profiler.profiles[-1].with_convention("flop_counter")
    profiler.end_profile()
    assert profile.total_flops + sum(r.backward_flops or 0 for r in profile.records) == reference


def test_a_parametrized_leaf_asked_for_reads_no_weight() -> None:
    # kept whole on request (leaf_modules): its formula takes the weight's shape from the
    # module's configuration, without running the parametrization a second time
    torch.manual_seed(0)
    conv = nn.Conv1d(4, 6, 3, groups=2)
    parametrize.register_parametrization(conv, "weight", _Draws())
    model = nn.Sequential(conv)
    x = torch.randn(2, 4, 5)
    before = conv.parametrizations.weight[0].calls  # (register_parametrization calls it once)
    counter = TorchFLOPsByFX(model, leaf_modules=["0"])
    counter.propagate(x)
    assert conv.parametrizations.weight[0].calls == before + 1
    (node,) = [r for r in counter.records if r.op == "call_module"]
    # weight (6, 2, 3): 2 * (batch 2 x 36 weight elements x 3 output positions) = 432, + 36 bias adds
    assert node.flops == 2 * 2 * 36 * 3 + 2 * 6 * 3


class _Noise(nn.Module):
    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return w + 0.01 * torch.randn_like(w)


def test_a_parametrized_fast_path_module_stays_whole_and_runs_as_without_the_profiler() -> None:
    # nn.MultiheadAttention picks its fused kernel by what is installed around it: traced through, it
    # would run the unfused ops; it stays one node, bit-identical to the plain call
    torch.manual_seed(0)

    class Wrapper(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = nn.MultiheadAttention(8, 2, batch_first=True)
            parametrize.register_parametrization(self.attention.out_proj, "weight", _Draws())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.attention(x, x, x, need_weights=False)[0]

    wrapper, x = Wrapper().eval(), torch.randn(2, 5, 8)
    counter = TorchFLOPsByFX(wrapper)
    with torch.no_grad():
        torch.manual_seed(1)
        expected = wrapper(x)
        torch.manual_seed(1)
        out = counter.propagate(x)
    assert torch.equal(out, expected)
    assert [r.target for r in counter.records if r.op == "call_module"] == ["MultiheadAttention"]


def test_parametrize_cached_with_extra_runs() -> None:
    # the undone warm-up filled parametrize's cache: the real call computed nothing of its own
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4))
    parametrize.register_parametrization(model[0], "weight", _Noise())
    x = torch.randn(2, 4)
    twin = copy.deepcopy(model)
    with parametrize.cached():
        torch.manual_seed(1)
        expected = twin(x)
    rng = torch.get_rng_state()
    counter = TorchFLOPsByFX(model, warmup=1, repeat=2)
    with parametrize.cached():
        torch.manual_seed(1)
        out = counter.propagate(x)
    assert torch.equal(out, expected) and torch.equal(torch.get_rng_state(), rng)
    # the real call's parametrization: randn_like (0), mul 16, add 16; the linear 2*2*4*4 + 8
    assert counter.profile.total_flops == 16 + 16 + 64 + 8


def test_fx_says_when_it_keeps_a_parametrized_module_whole() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(orthogonal(nn.Linear(8, 8)), nn.BatchNorm1d(8)).eval()
    parametrize.register_parametrization(model[1], "weight", _Noise())  # (fx cannot trace BatchNorm's checks)
    with pytest.warns(UserWarning, match="could not trace through the parametrized module"):
        TorchFLOPsByFX(model, tracer="fx").propagate(torch.randn(3, 8))


def test_an_unsafe_parametrization_changing_the_kernel_counts_the_kernel_used() -> None:
    class Pad(nn.Module):  # 3x3 kernel padded to 5x5
        def forward(self, w: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.pad(w, (1, 1, 1, 1))

    torch.manual_seed(0)
    conv = nn.Conv2d(3, 4, 3, padding=2)
    parametrize.register_parametrization(conv, "weight", Pad(), unsafe=True)
    model, x = nn.Sequential(conv), torch.randn(1, 3, 8, 8)
    counter = TorchFLOPsByFX(model, leaf_modules=["0"])
    counter.propagate(x)
    # weight (4, 3, 5, 5) over an 8x8 output: 2 * 300 * 64 = 38400 + 256 bias adds
    (node,) = [r for r in counter.records if r.op == "call_module"]
    assert node.flops == 2 * 4 * 3 * 5 * 5 * 64 + 4 * 64
    assert counter.profile.with_convention("flop_counter").total_flops == _fcm(copy.deepcopy(model), x)

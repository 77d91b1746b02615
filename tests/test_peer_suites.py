"""Two peers' own test suites, rebuilt against torch_flops.

PyTorch's FlopCounterMode suite (``test/test_flop_counter.py``): each case it checks (the matmul
and convolution families, their backward, attention on every backend the device has, custom
mappings, the module hierarchy, view ops, ``out=``, inference mode, fp8 matmuls, ...) is run here
side by side with FlopCounterMode itself, on the same call, and our ``flop_counter`` convention
must give its numbers: totals, forward and backward, and the per-module totals of its
``get_flop_counts()`` (named ``Root.child.grandchild``) against ``Profile.by_module()``.

ptflops' suite (sovrasov/flops-counter.pytorch ``tests/``): its cases rebuilt where our API has an
equivalent. ptflops' "MACs" are the dot-product MACs plus one per bias element (and, with its
pytorch backend, one or two per element for norms, activations, pools and upsampling); our
``macs`` are the dot products alone. Each case asserts our own number by hand next to the one
ptflops' own tests assert, with the arithmetic of the difference.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import torch_flops
from torch_flops import Profile, Status, TorchFLOPsByFX, TrainingProfiler, zoo

DEVICES = ["cpu", "meta"]


# --------------------------------------------------------------------------- helpers
class Call(nn.Module):
    """A module running one function of its inputs (our recording profiles modules)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs: Any) -> Any:
        return self.fn(*xs)


def _clear_grads(model: nn.Module, args: tuple[Any, ...]) -> None:
    for t in [*model.parameters(), *(a for a in args if isinstance(a, torch.Tensor))]:
        t.grad = None


def _reference(model: nn.Module, *args: Any, backward: bool = False, **mode_kwargs: Any) -> FlopCounterMode:
    """FlopCounterMode over one eager call (and ``output.sum().backward()``); gradients cleared after."""
    with FlopCounterMode(display=False, **mode_kwargs) as mode:
        out = model(*args)
        if backward:
            out.sum().backward()
    _clear_grads(model, args)
    return mode


def _ours(model: nn.Module, *args: Any, backward: bool = False, **options: Any) -> Profile:
    """Our profile of the same call (and backward), in the flop_counter convention."""
    counter = TorchFLOPsByFX(model, **options)
    if backward:
        counter.propagate(*args, loss_fn=lambda out: out.sum())
    else:
        with torch.no_grad():
            counter.propagate(*args)
    _clear_grads(model, args)
    return counter.profile.with_convention("flop_counter")


def _step(p: Profile) -> int:
    """Forward + backward FLOPs of a profile (what FlopCounterMode's total holds)."""
    return p.total_flops + p.total_backward_flops


def _per_module(p: Profile, root: str) -> dict[str, int]:
    """Our module roll-up keyed as FlopCounterMode names modules ("Root", "Root.a.b"): forward +
    backward FLOPs, modules that count nothing left out (FlopCounterMode has no entry for them)."""
    out = {}
    for path, stats in p.by_module().items():
        flops = stats.flops + (stats.backward_flops or 0)
        # (a ModuleList is never called: FlopCounterMode's module tracker has no entry for it; our roll-up
        # by path counts its layers' work in it too)
        if flops and stats.module_type not in ("ModuleList", "ModuleDict"):
            out[root if path == "" else f"{root}.{path}"] = flops
    return out


def _reference_per_module(mode: FlopCounterMode) -> dict[str, int]:
    return {name: total for name, ops in mode.get_flop_counts().items()
            if name != "Global" and (total := sum(ops.values()))}


def side_by_side(model: nn.Module, *args: Any, backward: bool = False, modules: bool = True) -> tuple[int, Profile]:
    """Run FlopCounterMode and torch_flops on the same call; assert the same total (and per-module
    totals); return FlopCounterMode's total and our profile."""
    mode = _reference(model, *args, backward=backward)
    p = _ours(model, *args, backward=backward)
    assert _step(p) == mode.get_total_flops()
    if not backward:
        assert p.total_backward_flops == 0
    if modules:
        assert _per_module(p, type(model).__name__) == _reference_per_module(mode)
    return mode.get_total_flops(), p


def T(*shape: int, device: str = "cpu", grad: bool = False) -> torch.Tensor:
    return torch.randn(*shape, device=device, requires_grad=grad)


# =========================================================================== PyTorch: FlopCounterMode
@pytest.mark.parametrize("device", DEVICES)
def test_a_mix_of_matmul_calls_and_a_linear(device: str) -> None:
    model = Call(lambda a, b, c, e, f, g, h, x: (
        torch.mm(a, b), torch.addmm(c, a, b, beta=0.5, alpha=0.5), torch.matmul(e, f),
        torch.einsum("ab,bc->ac", g, h), model.lin(x)))
    model.lin = nn.Linear(9, 10)
    model.to(device)

    shapes = [(4, 5), (5, 6), (4, 6), (5, 6), (6, 7), (6, 7), (7, 8), (8, 9)]
    total, p = side_by_side(model, *(T(*s, device=device) for s in shapes))
    # 2 x MACs: mm 4*5*6 = 120, addmm 120 (alpha/beta are not MACs), matmul 5*6*7 = 210,
    # einsum 6*7*8 = 336, Linear(9, 10) on 8 rows 720; the bias adds are not counted here
    assert total == 2 * (120 + 120 + 210 + 336 + 720) == 3012
    assert p.by_module()["lin"].flops == 1440


_OPS: dict[str, tuple[Callable[..., Any], list[tuple[int, ...]]]] = {
    "mm": (torch.mm, [(4, 5), (5, 6)]),
    "bmm": (torch.bmm, [(3, 4, 5), (3, 5, 6)]),
    "addmm_full_bias": (torch.addmm, [(4, 6), (4, 5), (5, 6)]),
    "addmm_column_bias": (torch.addmm, [(4, 1), (4, 5), (5, 6)]),
    "addmm_row_bias": (torch.addmm, [(6,), (4, 5), (5, 6)]),
    "baddbmm": (torch.baddbmm, [(3, 4, 6), (3, 4, 5), (3, 5, 6)]),
    "linear": (F.linear, [(3, 4), (5, 4), (5,)]),
    "conv1d_padded": (lambda x, w: F.conv1d(x, w, padding=1), [(2, 3, 6), (6, 3, 4)]),
    "conv2d_padded": (lambda x, w: F.conv2d(x, w, padding=1), [(2, 3, 6, 6), (6, 3, 4, 4)]),
    "conv3d_strided": (lambda x, w: F.conv3d(x, w, padding=1, stride=2), [(1, 2, 5, 5, 5), (4, 2, 3, 3, 3)]),
    "conv_transpose1d": (lambda x, w: F.conv_transpose1d(x, w, stride=2), [(2, 3, 5), (3, 4, 3)]),
    "conv_transpose2d": (lambda x, w: F.conv_transpose2d(x, w, padding=1), [(1, 2, 4, 4), (2, 3, 3, 3)]),
    "conv_transpose3d": (lambda x, w: F.conv_transpose3d(x, w, stride=2), [(1, 2, 3, 3, 3), (2, 4, 2, 2, 2)]),
}
# A few by hand (2 x MACs): mm 4*6 outputs x 5 = 120 MACs -> 240; bmm 3 x 120 -> 720; every
# addmm 240 whatever the bias broadcast; conv2d (2, 6, 5, 5) outputs x 3*4*4 = 14,400 MACs ->
# 28,800 (padding does not change the count); conv1d (2, 6, 5) x 3*4 -> 1,440; a transposed
# convolution counts its input: conv_transpose1d (2, 3, 5) inputs x 4*3 -> 720.
_BY_HAND = {"mm": 240, "bmm": 720, "addmm_full_bias": 240, "addmm_column_bias": 240, "addmm_row_bias": 240,
            "conv2d_padded": 28_800, "conv1d_padded": 1_440, "conv_transpose1d": 720}


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(_OPS))
def test_each_matmul_and_convolution_op(name: str, device: str, backward: bool) -> None:
    fn, shapes = _OPS[name]
    total, p = side_by_side(Call(fn), *(T(*s, device=device, grad=backward) for s in shapes), backward=backward)
    if name in _BY_HAND:
        # every operand needs a gradient: the backward is one product per operand (2 x the forward)
        assert total == _BY_HAND[name] * (3 if backward else 1)
    assert p.total_flops == total // (3 if backward else 1)


@pytest.mark.parametrize("device", DEVICES)
def test_backward_of_a_chain_where_only_some_operands_need_gradients(device: str) -> None:
    def chain(a, w1, w2):
        h = torch.mm(a, w1).unsqueeze(0).expand(7, 4, 6)
        return torch.bmm(h, w2)

    total, p = side_by_side(Call(chain), T(4, 5, device=device, grad=True), T(5, 6, device=device),
                            T(7, 6, 7, device=device), backward=True)
    # forward: mm 4*5*6 = 120 MACs, bmm 7*4*6*7 = 1,176 MACs -> 2,592; backward: only the
    # gradients towards `a` (w1, w2 need none): 120 + 1,176 MACs more -> 2,592
    assert (p.total_flops, p.total_backward_flops, total) == (2_592, 2_592, 5_184)


def test_two_backwards_are_two_training_steps() -> None:
    a = T(4, 5, grad=True)
    model = Call(lambda x: x.mm(x.t()))
    with FlopCounterMode(display=False) as mode:
        for _ in range(2):
            model(a).sum().backward()
    a.grad = None
    prof = TrainingProfiler(model)
    prof.start_profile()
    for _ in range(2):
        model(a).sum().backward()
    prof.stop_profile()
    steps = [q.with_convention("flop_counter") for q in prof.profiles]
    # per step: forward 4*5*4 = 80 MACs -> 160; backward: both operands are `a` -> 2 x 160
    assert [_step(q) for q in steps] == [480, 480]
    assert sum(_step(q) for q in steps) == mode.get_total_flops() == 960
    prof.end_profile()


@pytest.mark.parametrize("device", DEVICES)
def test_accumulating_into_an_existing_grad_is_no_matrix_product(device: str) -> None:
    x, w = torch.rand(1, 1, 4, 4, device=device, requires_grad=True), T(1, 1, 2, 2, device=device, grad=True)
    model = Call(F.conv_transpose2d)
    with FlopCounterMode(display=False) as mode:
        x.grad = torch.ones_like(x)
        model(x, w).sum().backward()
    x.grad, w.grad = torch.ones_like(x), None
    counter = TorchFLOPsByFX(model)
    counter.propagate(x, w, loss_fn=lambda out: out.sum())
    p = counter.profile
    # x's gradient (16 elements) is added into the existing .grad: 16 FLOPs in torch_flops, owned
    # by no node; no matrix product, so 0 in flop_counter (as FlopCounterMode counts it)
    assert p.backward is not None and p.backward["unattributed_flops"] == 16
    fc = p.with_convention("flop_counter")
    assert fc.backward is not None and fc.backward["unattributed_flops"] == 0
    # forward 16 inputs x 4 taps = 64 MACs -> 128; both gradients -> 256
    assert _step(fc) == mode.get_total_flops() == 128 + 256
    assert p.with_convention("macs").total_backward_flops == 128


def test_flop_counter_backward_survives_json() -> None:
    x, w = torch.rand(1, 4, 4, 4, requires_grad=True), T(2, 2, 2, 2, grad=True)
    counter = TorchFLOPsByFX(Call(lambda x, w: F.conv2d(x, w, groups=2)))
    counter.propagate(x, w, loss_fn=lambda out: out.sum())
    back = Profile.from_json(counter.to_json())
    assert back.records == counter.profile.records
    assert _step(back.with_convention("flop_counter")) == _step(counter.profile.with_convention("flop_counter"))


def test_scripted_function_counts_as_its_eager_twin() -> None:
    scripted = torch.jit.script(_square_mm)
    eager_total, _ = side_by_side(Call(_square_mm), T(5, 5))
    scripted_total, _ = side_by_side(Call(scripted), T(5, 5))
    assert scripted_total == eager_total == 2 * 125


def _square_mm(x: torch.Tensor) -> torch.Tensor:
    return torch.mm(x, x)


class _TwoProductBackward(torch.autograd.Function):
    """x @ x forward; a backward of two g @ g products (a made-up gradient: only its work matters)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return torch.mm(x, x)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return torch.mm(g, g) + torch.mm(g, g)


@pytest.mark.parametrize("device", DEVICES)
def test_custom_autograd_function_counts_its_own_backward(device: str) -> None:
    total, p = side_by_side(Call(_TwoProductBackward.apply), T(5, 5, device=device, grad=True), backward=True)
    # forward 125 MACs -> 250; its backward runs two 5x5x5 products -> 500
    assert (p.total_flops, p.total_backward_flops, total) == (250, 500, 750)


class _ConvByConvs(torch.autograd.Function):
    """conv_transpose1d whose backward is written with forward convolutions only."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        return F.conv_transpose1d(x, w)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, w = ctx.saved_tensors
        grad_x = F.conv1d(g, w)
        grad_w = F.conv1d(g.transpose(0, 1), x.transpose(0, 1)).transpose(0, 1)
        return grad_x, grad_w


def test_convolution_backward_written_as_forward_convolutions() -> None:
    x = torch.randn(2, 3, 16, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 4, 4, dtype=torch.float64, requires_grad=True)
    builtin = Call(F.conv_transpose1d)
    by_convs = Call(_ConvByConvs.apply)
    total_builtin, p_builtin = side_by_side(builtin, x, w, backward=True)
    total_convs, p_convs = side_by_side(by_convs, x, w, backward=True)
    # the gradients are the same (the decomposition is right) ...
    gx, gw = torch.autograd.grad(F.conv_transpose1d(x, w).pow(2).sum(), (x, w))
    hx, hw = torch.autograd.grad(_ConvByConvs.apply(x, w).pow(2).sum(), (x, w))
    torch.testing.assert_close((gx, gw), (hx, hw))
    # ... and so is the work: forward (2, 3, 16) = 96 inputs x 4 output channels x 4 taps =
    # 1,536 MACs -> 3,072; the two gradients are one such product each -> 6,144
    assert total_builtin == total_convs == 3_072 + 6_144
    assert p_builtin.total_backward_flops == p_convs.total_backward_flops == 6_144


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("c_in,c_out,groups", [(1, 1, 1), (1, 3, 1), (3, 1, 1), (3, 7, 1), (2, 4, 2), (4, 2, 2)])
@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "transposed"])
def test_convolution_backward_against_its_forward(device: str, c_in: int, c_out: int, groups: int,
                                                  transposed: bool) -> None:
    x = torch.rand(1, c_in, 4, 4, device=device, requires_grad=True)
    if transposed:
        w = T(c_in, c_out // groups, 2, 2, device=device, grad=True)
        fn = lambda x, w: F.conv_transpose2d(x, w, groups=groups)
    else:
        w = T(c_out, c_in // groups, 2, 2, device=device, grad=True)
        fn = lambda x, w: F.conv2d(x, w, groups=groups)
    total, p = side_by_side(Call(fn), x, w, backward=True)
    forward = p.total_flops
    if groups == 1:  # both gradients: twice the forward
        assert total == 3 * forward
        assert p.source is not None and p.source.total_backward_macs == 2 * p.source.total_macs
    else:
        # FlopCounterMode counts the input gradient of a grouped convolution as if every group saw
        # all channels (x groups), and our flop_counter convention follows it; torch_flops' own
        # count stays 2 x the forward's MACs. Conv2d(2, 4, 2, groups=2) on 4x4: 36 outputs x 1
        # channel x 4 taps = 144 MACs -> 288; weight gradient 288, input gradient 2 x 288
        assert total > 3 * forward
        if (c_in, c_out, transposed) == (2, 4, False):
            assert (forward, total) == (288, 288 + 288 + 2 * 288)
        assert p.source is not None and p.source.total_backward_macs == 2 * p.source.total_macs


def test_the_smallest_convolutions_by_hand() -> None:
    x, w = torch.rand(1, 1, 2, 2, requires_grad=True), T(1, 1, 2, 2, grad=True)
    # transposed: 4 inputs x 4 kernel taps = 16 MACs -> 32, backward 64
    assert side_by_side(Call(F.conv_transpose2d), x, w, backward=True)[0] == 32 + 64
    # 1x1 kernel over 2x2: 4 MACs -> 8, backward 16
    assert side_by_side(Call(F.conv2d), x, T(1, 1, 1, 1, grad=True), backward=True)[0] == 8 + 16


class _Block(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.norm = nn.BatchNorm2d(c)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.norm(self.conv(x)))


class _Chain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, stride=2)
        self.body = nn.Sequential(_Block(8), _Block(8))
        self.head = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.stem(x)).mean((2, 3)))


@pytest.mark.parametrize("device", DEVICES)
def test_module_hierarchy_forward_and_backward(device: str) -> None:
    model, x = _Chain().to(device), T(2, 3, 17, 17, device=device, grad=True)
    total, p = side_by_side(model, x, backward=True)  # per module: _Chain, _Chain.body.0.conv, ...
    # stem: (2, 8, 8, 8) outputs x 3*9 = 27,648 MACs; each block conv (2, 8, 8, 8) x 8*9 =
    # 73,728; head 2*5*8 = 80 -> forward 2 x 175,184 MACs; backward 2 x as much
    assert p.total_flops == 2 * (27_648 + 2 * 73_728 + 80)
    assert total == 3 * p.total_flops
    assert p.by_module()["body.1.conv"].flops == 2 * 73_728


def test_module_hierarchy_of_a_resnet_on_meta() -> None:
    model = zoo.resnet50().to("meta")
    x = T(2, 3, 32, 32, device="meta", grad=True)
    side_by_side(model, x)  # forward: every module's total equals
    total, p = side_by_side(model, x, backward=True, modules=False)
    assert total == 3 * p.total_flops
    # FlopCounterMode's per-module split of the backward is its module tracker's: a module stays
    # "open" in the backward until the gradient of every one of its inputs is done, so a block's
    # first conv, whose input also feeds the downsample branch, also collects that branch's
    # backward, and the nn.Identity downsamples (output is input) collect whatever runs while
    # they are open. Ours attributes each backward op to the forward node that made it:
    ours = p.by_module()
    mode = _reference(model, x, backward=True)
    counts = mode.get_flop_counts()
    first_conv = ours["layer2.0.conv1"]
    assert first_conv.backward_flops == 2 * first_conv.flops  # its own two gradients, nothing else
    assert sum(counts["ResNet.layer2.0.conv1"].values()) > 3 * first_conv.flops
    assert ours["layer2.1.downsample"].flops == ours["layer2.1.downsample"].backward_flops == 0
    assert sum(counts["ResNet.layer2.1.downsample"].values()) > 0


def test_conv_transpose_training_loop() -> None:
    x = torch.rand(1, 4, 30, 2)
    model = nn.ConvTranspose2d(4, 8, (2, 2), stride=2)
    with FlopCounterMode(display=False) as mode:
        for _ in range(3):
            model(x).sum().backward()
    model.zero_grad(set_to_none=True)
    prof = TrainingProfiler(model)
    prof.start_profile()
    for _ in range(3):
        model(x).sum().backward()
    prof.stop_profile()
    steps = [_step(q.with_convention("flop_counter")) for q in prof.profiles]
    # per step: 240 inputs x 8*2*2 = 7,680 MACs -> 15,360; backward: the weight's gradient only
    # (x needs none; the bias gradient is a sum) -> 15,360. The second and third steps also add
    # into the existing .grad: no matrix product, 0 here.
    assert steps == [30_720] * 3
    assert sum(steps) == mode.get_total_flops()
    prof.end_profile()


def test_custom_mapping_against_custom_formulas() -> None:
    model, a = Call(lambda a: a + a), T(4, 5)
    fixed = _reference(model, a, custom_mapping={torch.ops.aten.add: lambda *args, out_shape: 5})
    assert fixed.get_total_flops() == 5

    def numel(*args: Any, out_val: torch.Tensor) -> int:
        return out_val.numel()

    numel._get_raw = True  # type: ignore[attr-defined]
    raw = _reference(model, a, custom_mapping={torch.ops.aten.add: numel})
    assert raw.get_total_flops() == 20
    # Ours: `a + a` is recorded as the method `Tensor.add`, so the formula is keyed by the method
    # name; it returns FLOPs in the torch_flops convention (an int: FLOPs, no MACs)
    p5 = torch_flops.profile(model, a, custom_formulas={"add": lambda module, out, *args, **kwargs: 5})
    p20 = torch_flops.profile(model, a, custom_formulas={"add": lambda module, out, *args, **kwargs: out.numel()})
    assert (p5.total_flops, p20.total_flops) == (5, 20)
    # Deliberate difference: the flop_counter convention counts 2 x the MACs of matrix products
    # only, so a user formula without MACs is 0 there; FlopCounterMode counts whatever its custom
    # mapping returns. A formula that declares MACs is counted there: (flops, macs) = (10, 5)
    assert p5.with_convention("flop_counter").total_flops == 0
    p_macs = torch_flops.profile(model, a, custom_formulas={"add": lambda module, out, *args, **kwargs: (10, 5)})
    assert p_macs.with_convention("flop_counter").total_flops == 10


@pytest.mark.parametrize("device", DEVICES)
def test_elementwise_and_view_ops_count_nothing_there(device: str) -> None:
    x = T(4, 5, device=device)
    assert side_by_side(Call(torch.cos), x)[0] == 0
    assert torch_flops.profile(Call(torch.cos), x).total_flops == 20  # ours: 1 per element (a transcendental)
    views = Call(lambda x: x.view(20).reshape(5, 4).t().unsqueeze(0).expand(3, 4, 5))
    total, p = side_by_side(views, x)
    assert total == p.source.total_flops == 0  # type: ignore[union-attr]
    assert {r.status for r in p.records if r.op.startswith("call")} == {Status.ZERO}


def _attention(device: str, heads: int, kv_heads: int, q_len: int, kv_len: int, dim: int, v_dim: int,
               grad: bool) -> tuple[torch.Tensor, ...]:
    return (T(2, heads, q_len, dim, device=device, grad=grad), T(2, kv_heads, kv_len, dim, device=device, grad=grad),
            T(2, kv_heads, kv_len, v_dim, device=device, grad=grad))


_SHAPES = {  # heads, kv heads, query length, key length, head dim, value head dim
    "uniform": (4, 4, 8, 8, 16, 16),
    "non_uniform": (4, 4, 8, 12, 16, 8),
    "grouped_query": (4, 2, 8, 8, 16, 16),
}


@contextlib.contextmanager
def _backend(name: str) -> Iterator[None]:
    if name == "default":
        yield
        return
    with sdpa_kernel({"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION}[name]):
        yield


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", list(_SHAPES))
@pytest.mark.parametrize("backend", ["default", "math", "flash"])
@pytest.mark.parametrize("device", DEVICES)
def test_scaled_dot_product_attention(device: str, backend: str, shape: str, causal: bool, backward: bool) -> None:
    heads, kv_heads, q_len, kv_len, dim, v_dim = _SHAPES[shape]
    q, k, v = _attention(device, heads, kv_heads, q_len, kv_len, dim, v_dim, backward)
    kwargs = {"is_causal": causal, "enable_gqa": kv_heads != heads}
    model = Call(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kwargs))
    with _backend(backend):
        if device == "cpu" and backend == "flash" and v_dim != dim:
            with pytest.raises(RuntimeError, match="No available kernel"):  # as plain PyTorch
                torch_flops.profile(model, q, k, v)
            return
        total, p = side_by_side(model, q, k, v, backward=backward)
    # the two products over all query heads (causal counted in full): 2 x 4 heads x 8 queries x
    # kv_len x (dim + v_dim): uniform 2 x 4 x 8 x 8 x 32 = 16,384 MACs
    macs = 2 * heads * q_len * kv_len * (dim + v_dim)
    assert p.source is not None and p.source.total_macs == macs
    if device == "cpu" and p.total_flops == 0:
        # the CPU flash kernel ran (torch picks it by default where it can): FlopCounterMode has no
        # formula for it, nor for its backward
        assert backend in ("default", "flash") and v_dim == dim and total == 0
        return
    assert p.total_flops == 2 * macs
    if backward:  # the math path's backward: four products, twice the forward
        assert total == 3 * 2 * macs


def test_nested_jagged_attention_counts_each_sequence() -> None:
    # FlopCounterMode cannot run jagged attention on CPU (its matmul decomposition asks the
    # ragged size); ours counts each sequence as the dense attention it is
    lengths = (3, 5)
    values = [torch.randn(n, 2, 8) for n in lengths]
    q = torch.nested.nested_tensor(values, layout=torch.jagged).transpose(1, 2)  # (2, 2 heads, j, 8)
    model = Call(lambda q: F.scaled_dot_product_attention(q, q, q))
    p = torch_flops.profile(model, q)
    dense = sum(_ours(model, v.transpose(0, 1).unsqueeze(0)).source.total_macs for v in values)  # type: ignore[union-attr]
    # per sequence of n tokens: 2 heads x n x n x (8 + 8) MACs -> 2*9*16 + 2*25*16 = 1,088
    assert p.total_macs == dense == 1_088
    assert [r.status for r in p.records if r.op.startswith("call")] == [Status.COUNTED]


@pytest.mark.parametrize("device", DEVICES)
def test_out_argument_does_not_change_the_count(device: str) -> None:
    def mm_out(x):
        return torch.mm(x, x, out=torch.zeros(10, 10, device=device))

    assert side_by_side(Call(mm_out), T(10, 10, device=device))[0] == 2 * 1_000


def test_global_hooks_are_left_as_found() -> None:
    hooks = nn.modules.module
    before = (dict(hooks._global_forward_pre_hooks), dict(hooks._global_forward_hooks))
    model = nn.Linear(100, 100)
    side_by_side(model, T(3, 100), backward=True)
    assert (dict(hooks._global_forward_pre_hooks), dict(hooks._global_forward_hooks)) == before


class _DictStep(nn.Module):
    def forward(self, x: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        y = x["a"].relu_()
        return {"a": torch.mm(y, y)}


class _DictModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = _DictStep(), _DictStep()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a({"a": x.clone()}))["a"]


class _TupleModel(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        return (torch.mm(x, x),)


def test_dict_and_tuple_inputs_and_outputs() -> None:
    total, p = side_by_side(_DictModel(), T(10, 10, grad=True), backward=True)
    # two 10x10x10 products (2,000 each), each with both operands' gradients: 3 x 4,000
    assert total == 12_000 and _per_module(p, "_DictModel")["_DictModel.b"] == 6_000
    model, x = _TupleModel(), T(10, 10, grad=True)
    mode = _reference(Call(lambda x: model(x)[0]), x, backward=True)
    counter = TorchFLOPsByFX(model)
    counter.propagate(x, loss_fn=lambda out: out[0].sum())
    assert _step(counter.profile.with_convention("flop_counter")) == mode.get_total_flops() == 6_000


def test_custom_op_with_its_own_formula() -> None:
    @torch.library.custom_op("torch_flops_peers::sine", mutates_args=())
    def sine(x: torch.Tensor) -> torch.Tensor:
        return x.sin()

    x = T(3)
    mode = _reference(Call(sine), x, custom_mapping={torch.ops.torch_flops_peers.sine: lambda *a, **k: 9001})
    p = torch_flops.profile(Call(sine), x, custom_formulas={torch.ops.torch_flops_peers.sine: lambda m, o, *a, **k: 9001})
    assert p.total_flops == mode.get_total_flops() == 9001
    assert torch_flops.profile(Call(sine), x).unsupported == {"torch_flops_peers.sine.default": 1}


def test_inference_mode_counts_the_same() -> None:
    model, x = _Chain().eval(), T(2, 3, 17, 17)
    standard = side_by_side(model, x)
    with torch.inference_mode():
        inference = side_by_side(model, x)
    assert standard[0] == inference[0]
    assert _per_module(standard[1], "_Chain") == _per_module(inference[1], "_Chain")


@pytest.mark.parametrize("device", DEVICES)
def test_fp8_scaled_mm(device: str) -> None:
    a = T(48, 80, device=device).to(torch.float8_e4m3fn)
    b = T(112, 80, device=device).to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=device)
    model = Call(lambda a, b, sa, sb: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16))
    total, _ = side_by_side(model, a, b, one, one)
    assert total == 2 * 48 * 80 * 112 == 860_160


def test_depth_of_the_module_table() -> None:
    # FlopCounterMode's table shows modules down to `depth`; our tree at the same depth has the
    # same modules with the same numbers
    model, x = _Chain().eval(), T(2, 3, 17, 17)
    mode = _reference(model, x)
    p = _ours(model, x)
    for depth in (1, 2, 3):
        theirs = {k: v for k, v in _reference_per_module(mode).items() if k.count(".") < depth}
        ours = {k: v for k, v in _per_module(p, "_Chain").items() if k.count(".") < depth}
        assert ours == theirs
        rows = mode.get_table(depth).splitlines()
        assert all(any(line.strip().startswith(name) for line in rows) for name in ours)


# =========================================================================== ptflops
# ptflops counts "MACs": dot-product MACs + 1 per bias element of convolutions and Linear (both
# of its backends); its pytorch backend also counts norms, activations, pools and upsampling 1 per
# element (2 for an affine norm). Its aten backend counts only matrix products and convolutions,
# bias included. Our `macs` are the dot products alone; our FLOPs follow the torch_flops convention.
IMAGE = (1, 3, 224, 224)


def test_ptflops_conv() -> None:
    p = torch_flops.profile(nn.Sequential(nn.Conv2d(3, 2, 3, bias=True)), torch.randn(IMAGE))
    outputs = 2 * 222 * 222  # 98,568
    # ptflops: 2,759,904 = 98,568 outputs x (27 MACs + 1 bias)
    assert p.total_macs == outputs * 3 * 3 * 3 == 2_759_904 - outputs
    assert p.total_params == 3 * 3 * 2 * 3 + 2
    assert p.total_flops == 2 * p.total_macs + outputs


def test_ptflops_transposed_conv() -> None:
    p = torch_flops.profile(nn.ConvTranspose2d(3, 2, 3, stride=(2, 2), bias=True), torch.randn(IMAGE))
    # every input pixel (224 x 224 x 3 channels) meets 2 x 3 x 3 weights: 2,709,504 MACs; the output
    # is 2 x 449 x 449 = 403,202 (ptflops: 3,112,706 = MACs + one bias add per output)
    assert p.total_macs == 224 * 224 * 3 * 2 * 9 == 3_112_706 - 2 * 449 * 449
    assert p.total_params == 56


@pytest.mark.parametrize("bias", [True, False])
def test_ptflops_linear(bias: bool) -> None:
    p = torch_flops.profile(nn.Sequential(nn.Linear(3, 2, bias=bias)), torch.randn(1, 3))
    # 2 outputs x 3 = 6 MACs (ptflops: 8 with the bias, 6 without)
    assert (p.total_macs, p.total_params) == (6, 8 if bias else 6)
    assert p.with_convention("macs").total_flops == 6


def test_ptflops_linear_on_many_dimensions() -> None:
    p = torch_flops.profile(nn.Sequential(nn.Linear(3, 2, bias=False)), torch.randn(1, 4, 5, 3))
    assert (p.total_macs, p.total_params) == (3 * 2 * 4 * 5, 6)  # equal to ptflops' 120


def test_ptflops_input_constructors() -> None:
    class Keyword(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(3, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(x)

    # ptflops builds the input from a constructor (a tensor, or a dict of keyword arguments); ours
    # takes the call's own arguments, positional or keyword, and the DeepSpeed-style input_shape
    assert torch_flops.profile(Keyword(), torch.ones(1, 3)).total_macs == 6
    assert torch_flops.profile(Keyword(), x=torch.ones(1, 3)).total_macs == 6
    flops, macs, params = torch_flops.get_model_profile(Keyword(), input_shape=(1, 3), print_profile=False,
                                                        as_string=False)
    assert (macs, params, flops) == (6, 8, 2 * 6 + 2)


@pytest.mark.parametrize("how", [{"size": (20, 20)}, {"size": 20}, {"scale_factor": 2}])
def test_ptflops_bilinear_interpolate(how: dict[str, Any]) -> None:
    model = Call(lambda x: F.interpolate(x, mode="bilinear", align_corners=False, **how))
    p = torch_flops.profile(model, torch.randn(1, 3, 10, 10))
    # ptflops: 1,200 (one per output: 3 x 20 x 20). Ours: no MACs; 3 lerps of 3 FLOPs (sub, mul,
    # add) per output -> 9 x 1,200
    assert (p.total_macs, p.total_flops, p.total_params) == (0, 9 * 1_200, 0)


class _SelfProduct(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.matmul(x.t())


def test_ptflops_matmul_ignore_and_custom() -> None:
    x = torch.randn(1, 10)
    assert torch_flops.profile(_SelfProduct(), x).total_macs == 10  # (1, 10) @ (10, 1), as ptflops
    # ptflops ignores aten.mm/matmul by name (aten backend) or functional calls (pytorch backend);
    # ours ignores a recorded target by name
    ignored = torch_flops.profile(_SelfProduct(), x, ignore_ops=("matmul",))
    assert (ignored.total_macs, ignored.total_flops) == (0, 0)
    assert [r.status for r in ignored.records if r.target.endswith("matmul")] == [Status.IGNORED]
    # ptflops' custom hook returns 42 MACs; ours returns (flops, macs)
    custom = torch_flops.profile(_SelfProduct(), x, custom_formulas={"matmul": lambda m, out, *a, **k: (84, 42)})
    assert (custom.total_macs, custom.total_flops) == (42, 84)


@pytest.mark.parametrize("layer,ptflops_pytorch,our_flops", [
    # (the layer on a (1, 3, 8, 8) input: 192 elements; ptflops' pytorch backend; ours by hand)
    (nn.BatchNorm2d(3), 2 * 192, 4 * 192),  # running statistics: sub, mul + weight, bias -> 4
    (nn.BatchNorm2d(3, affine=False), 192, 2 * 192),  # sub, mul rstd -> 2
    (nn.ReLU(), 192, 192),  # one compare per element
    (nn.MaxPool2d(2), 192, 3 * 48),  # 48 outputs, 3 compares over each 2x2 window
    (nn.AvgPool2d(2), 192, 4 * 48),  # 48 outputs, 3 adds + 1 divide each
    (nn.AdaptiveAvgPool2d(1), 192, 192),  # 3 outputs, 63 adds + 1 divide each
    (nn.Upsample(scale_factor=2, mode="nearest"), 768, 0),  # 768 outputs, copies
    (nn.Upsample(scale_factor=2, mode="bilinear"), 768, 9 * 768),  # 3 lerps x 3 per output
], ids=["bn", "bn_no_affine", "relu", "maxpool", "avgpool", "adaptive_avgpool", "nearest", "bilinear"])
def test_ptflops_elementwise_layers(layer: nn.Module, ptflops_pytorch: int, our_flops: int) -> None:
    # ptflops' aten backend counts all of these 0 (no matrix products), as our macs do; its
    # pytorch backend counts `ptflops_pytorch` (1 per element, 2 for an affine batch norm; per
    # output for upsampling), a per-element convention of its own
    p = torch_flops.profile(nn.Sequential(layer).eval(), torch.randn(1, 3, 8, 8))
    assert (p.total_macs, p.total_flops) == (0, our_flops)
    assert p.with_convention("macs").total_flops == 0


def test_ptflops_grouped_and_1d_convolutions() -> None:
    grouped = torch_flops.profile(nn.Conv2d(4, 8, 3, groups=2), torch.randn(1, 4, 8, 8))
    # (8, 6, 6) = 288 outputs x (4 / 2 groups) x 9 = 5,184 MACs; ptflops 5,472 = + 288 bias
    assert grouped.total_macs == 5_184 == 5_472 - 288
    conv1d = torch_flops.profile(nn.Conv1d(3, 4, 3), torch.randn(1, 3, 10))
    # (4, 8) = 32 outputs x 3 x 3 = 288 MACs; ptflops 320 = + 32 bias
    assert conv1d.total_macs == 288 == 320 - 32


@pytest.mark.parametrize("model", ["transformer", "encoder layer in a model"])
def test_transformer_layers_count_per_module_as_flop_counter_mode_sees_them(model: str) -> None:
    # in training (no fused fast path), each layer, its attention and its linears hold their own FLOPs in the
    # module tree, as FlopCounterMode's get_flop_counts() says (they were 0: the stack was one node)
    torch.manual_seed(0)
    if model == "transformer":
        net: nn.Module = nn.Transformer(d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                                        dim_feedforward=32, dropout=0.0, batch_first=True)
        args: tuple[Any, ...] = (T(2, 5, 16), T(2, 4, 16))
    else:
        net = nn.Sequential(nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True))
        args = (T(2, 5, 16),)
    total, p = side_by_side(net, *args)
    assert total > 0 and p.by_module()["0.self_attn" if model != "transformer" else "encoder.layers.0.self_attn"].flops > 0


@pytest.mark.parametrize("mask", [False, True])
def test_an_encoder_with_a_hooked_layer_counts_what_flop_counter_mode_sees(mask: bool) -> None:
    # eval, no gradients: layer 1 takes its fused path (0 for FlopCounterMode); layer 0, hooked, runs its
    # ops: with a mask its attention gets a float mask (the layer's canonical one) and runs no fused path
    # either, so its projections count, 2*2*6*16*48 + 2*2*6*16*16 = 24,576, beside its linears 24,576
    # (the kept-whole encoder's count had the attention fused: 24,576 in all)
    torch.manual_seed(1)
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 32, batch_first=True), 2,
                                    enable_nested_tensor=False).eval()
    encoder.layers[0].register_forward_pre_hook(lambda module, args: None)
    x = torch.randn(2, 6, 16)
    kwargs = {"mask": nn.Transformer.generate_square_subsequent_mask(6)} if mask else {}
    with torch.no_grad():
        with FlopCounterMode(display=False) as reference:
            encoder(x, **kwargs)
        counter = TorchFLOPsByFX(encoder)
        counter.propagate(x, **kwargs)
    assert counter.profile.with_convention("flop_counter").total_flops == reference.get_total_flops()
    assert reference.get_total_flops() == (49152 if mask else 24576)

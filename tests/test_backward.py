"""The backward per forward node (``propagate(..., loss_fn=, backward=)``): hand-derived counts for
a Linear, a conv and attention, frozen layers, gradients equal to an eager twin, totals equal to
FlopCounterMode for the zoo and the transformers test models, activation checkpointing, errors,
and the JSON/tables it adds."""

from __future__ import annotations

import copy
import csv
import json
import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch.utils.flop_counter import FlopCounterMode

from torch_flops import LossError, Profile, TorchFLOPsByFX, report, zoo


def _mlp() -> nn.Sequential:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _fcm_backward(model: nn.Module, args: tuple[Any, ...], loss: Callable[[Any], torch.Tensor],
                  kwargs: dict[str, Any] | None = None) -> int:
    """FlopCounterMode's backward: its forward+backward total minus its forward total."""
    kwargs = kwargs or {}
    with FlopCounterMode(display=False) as forward:
        model(*args, **kwargs)
    with FlopCounterMode(display=False) as both:
        loss(model(*args, **kwargs)).backward()
    model.zero_grad(set_to_none=True)
    for a in args:
        if isinstance(a, torch.Tensor):
            a.grad = None
    return both.get_total_flops() - forward.get_total_flops()


def test_linear_backward_by_hand(records_by_name: Any) -> None:
    x = torch.randn(3, 8)  # needs no grad: the first Linear computes no dX
    counter = TorchFLOPsByFX(_mlp())
    counter.propagate(x, loss_fn=lambda out: out.sum())
    r = records_by_name(counter.records)
    # first Linear(8, 16): dW = dY^T (16x3) @ X (3x8): 16*3*8 = 384 MACs; no dX; db = dY summed
    # over the batch: 3*16 = 48 adds -> 2*384 + 48 = 816 FLOPs
    assert (r["_0"].backward_macs, r["_0"].backward_flops) == (384, 816)
    # ReLU: dX = dY * (Y > 0): one select per element, 3*16 = 48
    assert (r["_1"].backward_macs, r["_1"].backward_flops) == (0, 48)
    # second Linear(16, 4): dX = dY (3x4) @ W (4x16): 192 MACs; dW = dY^T (4x3) @ X (3x16): 192;
    # db: 3*4 = 12 -> 2*384 + 12 = 780
    assert (r["_2"].backward_macs, r["_2"].backward_flops) == (384, 780)
    # sum(): its backward only expands the ones: 0
    assert (r["sum_1"].backward_macs, r["sum_1"].backward_flops) == (0, 0)
    assert r["input_1"].backward_flops == 0  # the placeholder (nn.Sequential's argument is "input")
    assert counter.total_backward_macs == 768 and counter.total_backward_flops == 816 + 48 + 780
    # the first Linear saved its input X (3*8*4 = 96 B), the second the ReLU output (3*16*4 = 192 B,
    # ReLU's own saved result is the same storage, counted once for the earlier node)
    assert (r["_0"].saved_bytes, r["_1"].saved_bytes, r["_2"].saved_bytes) == (96, 192, 0)
    assert all(rec.backward_time_ms is not None and rec.backward_time_ms > 0 for rec in (r["_0"], r["_2"]))
    # live tensor bytes with what autograd keeps for the backward: after the ReLU, X (96 B, saved by
    # the first Linear) + the first Linear's output (192) + the ReLU's (192, saved) = 480; after the
    # second Linear the first's output is gone: 96 + 192 + 48 = 336
    assert (r["_1"].mem_after, r["_2"].mem_after, counter.max_memory) == (480, 336, 480)
    forward_only = TorchFLOPsByFX(_mlp())
    forward_only.propagate(x)
    assert forward_only.max_memory == 384  # X is freed after its last use: 192 + 192


def test_frozen_layer_and_input_that_needs_grad(records_by_name: Any) -> None:
    model = _mlp()
    model[2].requires_grad_(False)  # frozen head: dX only (the first layer still needs it)
    x = torch.randn(3, 8, requires_grad=True)  # now the first Linear computes dX too
    counter = TorchFLOPsByFX(model)
    counter.propagate(x, loss_fn=lambda out: out.sum())
    r = records_by_name(counter.records)
    # frozen Linear(16, 4): dX = dY (3x4) @ W (4x16) = 192 MACs, no dW, no db
    assert (r["_2"].backward_macs, r["_2"].backward_flops) == (192, 384)
    # first Linear: dX = dY (3x16) @ W (16x8) = 384 MACs + dW 384 MACs, db 48
    assert (r["_0"].backward_macs, r["_0"].backward_flops) == (768, 2 * 768 + 48)
    # all frozen and an input that needs none: no backward at all
    frozen = _mlp().requires_grad_(False)
    with pytest.raises(LossError, match="does not require grad") as info:
        TorchFLOPsByFX(frozen).propagate(torch.randn(3, 8), loss_fn=lambda out: out.sum())
    # what eager `loss.backward()` raises here (a RuntimeError), and a bad argument (a ValueError)
    with pytest.raises(RuntimeError):
        frozen(torch.randn(3, 8)).sum().backward()
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, ValueError)


def test_conv_backward_by_hand(records_by_name: Any) -> None:
    conv = nn.Sequential(nn.Conv2d(3, 4, 3))
    x = torch.randn(1, 3, 8, 8, requires_grad=True)
    counter = TorchFLOPsByFX(conv)
    counter.propagate(x, loss_fn=lambda out: out.sum())
    r = records_by_name(counter.records)["_0"]
    # output 1x4x6x6; forward MACs = 4*36 outputs * 3*3*3 = 3888. dX (a transposed conv of dY
    # with W) = 3888 MACs, dW (dY correlated with X) = 3888 MACs; db = dY summed: 4*36 = 144
    assert r.macs == 3888
    assert (r.backward_macs, r.backward_flops) == (2 * 3888, 4 * 3888 + 144)
    assert 2 * counter.total_backward_macs == _fcm_backward(conv, (x,), lambda out: out.sum())


def test_depthwise_conv_backward_and_flop_counter_mode() -> None:
    # depthwise 3x3, 32 channels, 8x8, padding 1: forward 32*64*9 = 18432 MACs; dX and dW the same
    conv = nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False)
    x = torch.randn(1, 32, 8, 8, requires_grad=True)
    counter = TorchFLOPsByFX(nn.Sequential(conv))
    counter.propagate(x, loss_fn=lambda out: out.sum())
    assert counter.total_backward_macs == 2 * 18432
    # FlopCounterMode's convolution_backward counts dX as if the conv were not grouped:
    # (32 * 18432 + 18432) MACs = 1216512 FLOPs. That is its bug, documented in the README.
    assert _fcm_backward(conv, (x,), lambda out: out.sum()) == 2 * (32 * 18432 + 18432)


def test_attention_backward_on_meta_matches_flop_counter_mode() -> None:
    class Attention(nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return F.scaled_dot_product_attention(q, k, v)

    b, h, length, e = 2, 4, 16, 8
    q, k, v = (torch.randn(b, h, length, e, device="meta", requires_grad=True) for _ in range(3))
    counter = TorchFLOPsByFX(Attention())
    counter.propagate(q, k, v, loss_fn=lambda out: out.sum())
    # forward: Q K^T and P V, each B*H*L*L*E = 2*4*16*16*8 = 16384 MACs
    assert counter.total_macs == 2 * 16384
    # backward: dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q: four of them
    assert counter.total_backward_macs == 4 * 16384
    assert 2 * counter.total_backward_macs == _fcm_backward(Attention(), (q, k, v), lambda out: out.sum())


def test_gradients_equal_an_eager_twin_with_extra_runs(same_state: Any) -> None:
    model = _mlp()
    twin = copy.deepcopy(model)
    x = torch.randn(3, 8, requires_grad=True)
    x_twin = x.detach().clone().requires_grad_(True)
    # gradients already there: the step accumulates into them, as eager does, once
    for p in list(model.parameters()) + list(twin.parameters()):
        p.grad = torch.ones_like(p)
    grads = [p.grad for p in model.parameters()]
    counter = TorchFLOPsByFX(model, warmup=1, repeat=3)
    out = counter.propagate(x, loss_fn=lambda o: (o ** 2).mean())
    expected = twin(x_twin)
    (expected ** 2).mean().backward()
    assert torch.equal(out, expected)
    for a, b, g in zip(model.parameters(), twin.parameters(), grads, strict=True):
        assert torch.equal(a.grad, b.grad)
        assert a.grad is g  # accumulated into the same tensor, as eager
    assert torch.equal(x.grad, x_twin.grad)
    same_state(model, twin)
    # accumulation into existing .grad is not a forward node's work: unattributed, 1 add per element
    assert counter.profile.backward["unattributed_flops"] == sum(p.numel() for p in model.parameters())


def test_loss_is_the_scalar_output_or_a_clear_error() -> None:
    model = nn.Sequential(nn.Linear(4, 1), nn.Flatten(0))
    counter = TorchFLOPsByFX(model)
    with pytest.raises(LossError, match=r"scalar loss.*\(2,\)") as info:
        counter.propagate(torch.randn(2, 4), backward=True)
    assert isinstance(info.value, RuntimeError)  # as eager `model(x).backward()` raises for 2 elements
    out = counter.propagate(torch.randn(1, 4), backward=True)  # a 1-element output is its own loss
    assert out.shape == (1,) and model[0].weight.grad is not None
    with pytest.raises(TypeError, match="loss_fn must be a callable"):
        counter.propagate(torch.randn(1, 4), loss_fn="mse")
    with pytest.raises(TypeError, match="backward must be True or False"):
        counter.propagate(torch.randn(1, 4), backward=1)
    with pytest.raises(ValueError, match="needs the eager front end"):
        TorchFLOPsByFX(_mlp(), tracer="fx").propagate(torch.randn(3, 8), backward=True)


def test_a_backward_op_without_a_count_is_warned_about_and_summarised() -> None:
    """A backward op whose formula fails (or that has none) is left out of the backward totals with
    one warning naming it, and the summary's Unsupported line lists it, as for a forward node."""
    from torch_flops import UnsupportedOpWarning, report

    class MatMul(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (x @ self.w).relu()

    counter = TorchFLOPsByFX(MatMul(), custom_formulas={torch.ops.aten.mm: lambda *args, **kwargs: 10.5})
    with pytest.warns(UnsupportedOpWarning, match=r"the formula for aten.mm failed \(TypeError: the formula "
                                                  r"returned 10.5 \(float\).*\) in the backward") as caught:
        counter.propagate(torch.randn(2, 4), loss_fn=lambda out: out.sum())
    assert caught[0].filename == __file__
    # forward: x @ w (the matmul's own formula) 2*2*4*4 = 64, relu 8, the loss's sum 8; backward: the relu's 8
    # (threshold_backward), the weight's gradient mm left out
    assert counter.total_flops == 80 and counter.total_backward_flops == 8
    assert dict(report.summary_lines(counter.profile))["Unsupported"] == "0; backward ops excluded: aten.mm (formula failed)"


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpointed_recompute_is_counted(reentrant: bool) -> None:
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(torch.relu(self.a(x)))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block, self.head = Block(), nn.Linear(8, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(checkpoint(self.block, x, use_reentrant=reentrant))

    model = Model()
    x = torch.randn(4, 8, requires_grad=True)
    reference = _fcm_backward(model, (x,), lambda out: out.sum())
    counter = TorchFLOPsByFX(model)
    counter.propagate(x, loss_fn=lambda out: out.sum())
    profile = counter.profile
    # forward: two Linear(8, 8) at 4 rows (4*8*8 = 256 MACs each) and the head (4*8*2 = 64)
    assert counter.total_macs == 2 * 256 + 64
    # the backward of the three Linears (dX and dW: 2*(256+256+64) = 1152 MACs) plus what the
    # checkpoint recomputes; FlopCounterMode sees the recompute too
    assert 2 * counter.total_backward_macs == reference
    assert counter.total_backward_macs == 1152 + profile.total_recompute_macs
    # non-reentrant recomputes until what it needs is back (here the second Linear's input path:
    # one 256-MAC Linear); reentrant reruns the whole block (both)
    assert profile.total_recompute_macs == (512 if reentrant else 256)


def test_zoo_backward_on_meta_matches_flop_counter_mode() -> None:
    for name in ("resnet50", "vit_b16", "gpt2", "llama", "unet"):
        entry = zoo.get(name)
        with torch.device("meta"):
            model = entry.build()
        inputs = entry.example_inputs(batch_size=1, device="meta")

        def loss(out: Any) -> torch.Tensor:
            return (out if isinstance(out, torch.Tensor) else out[0]).float().sum()

        reference = _fcm_backward(model, inputs, loss)
        counter = TorchFLOPsByFX(model)
        counter.propagate(*inputs, loss_fn=loss)
        assert 2 * counter.total_backward_macs == reference, name
        assert counter.profile.backward["unsupported"] == {}, name


def test_mobilenet_backward_is_twice_its_forward_but_the_first_conv() -> None:
    # every layer computes dX and dW (each as many MACs as its forward) except the stem, whose
    # input needs no gradient (no dX): backward = 2 * forward - stem
    entry = zoo.get("mobilenet_v3_large")
    with torch.device("meta"):
        model = entry.build()
    counter = TorchFLOPsByFX(model)
    counter.propagate(*entry.example_inputs(batch_size=1, device="meta"), loss_fn=lambda out: out.sum())
    stem = next(r for r in counter.records if r.target == "Conv2d")
    assert counter.total_backward_macs == 2 * counter.total_macs - stem.macs


def test_json_csv_and_tables_carry_the_backward(tmp_path: Any) -> None:
    counter = TorchFLOPsByFX(_mlp())
    counter.propagate(torch.randn(3, 8), loss_fn=lambda out: out.sum())
    doc = json.loads(report.profile_to_json(counter.profile))
    assert doc["version"] == 5
    assert doc["summary"]["backward"]["macs"] == 768 and doc["summary"]["backward"]["flops"] == 1644
    assert doc["modules"]["0"]["backward_macs"] == 384
    back = Profile.from_json(doc)
    assert back.total_backward_macs == 768 and back.total_backward_flops == 1644
    assert [r.backward_flops for r in back.records] == [r.backward_flops for r in counter.records]
    path = tmp_path / "nodes.csv"
    counter.save_result_to_csv(path)
    header, *rows = list(csv.reader(path.read_text().splitlines()))
    assert header[-9:] == ["backward_flops", "backward_macs", "backward_time_ms", "recompute_flops",
                           "recompute_macs", "saved_bytes", "optimizer_flops", "optimizer_time_ms", "step_flops"]
    first_linear = dict(zip(header, next(row for row in rows if row[0] == "_0")))
    assert first_linear["step_flops"] == str(816 + 816)  # forward 2*384 + 48 bias adds, backward the same
    text = report.model_profile_text(counter.profile, -1, 0)
    assert "bwd FLOPs" in text and "step FLOPs" in text
    # the module tree's step column: forward + backward; root 1.28 K + 1.64 K = 2.92 K
    rows = counter.print_model_profile(show=False)
    root = dict(zip(report.tree_columns(counter.profile), rows[0]))
    assert root["step_flops"] == counter.total_flops + 1644
    trace = report.chrome_trace(counter.profile)
    first = next(e for e in trace["traceEvents"] if e.get("name") == "_0" and e.get("ph") == "X")
    assert first["args"]["backward_macs"] == 384
    # a forward-only profile has none of these columns
    plain = TorchFLOPsByFX(_mlp())
    plain.propagate(torch.randn(3, 8))
    assert "bwd FLOPs" not in report.model_profile_text(plain.profile, -1, 0)
    assert json.loads(report.profile_to_json(plain.profile))["summary"]["backward"] is None


def test_what_is_not_a_forward_node_s_backward() -> None:
    upstream = nn.Linear(8, 8)  # runs before propagate: its backward is unattributed
    model = _mlp()
    h = upstream(torch.randn(3, 8))
    counter = TorchFLOPsByFX(model)
    counter.propagate(h, loss_fn=lambda out: out.sum())
    profile = counter.profile
    # the model's first Linear now computes dX as well: 384 + 384 (+ 384 for the second layer)
    first = next(r for r in counter.records if r.name == "_0")
    assert first.backward_macs == 768
    # upstream's dW (8x3 @ 3x8: 192 MACs) and db (24 adds) belong to no node of this profile
    assert profile.backward["unattributed_macs"] == 192
    assert upstream.weight.grad is not None


def test_create_graph_work_is_not_recompute_and_external_leaves_keep_one_gradient() -> None:
    model = _mlp()
    scale = torch.ones((), requires_grad=True)  # a learnable scalar outside the model
    x = torch.randn(3, 8)
    twin, twin_scale = copy.deepcopy(model), scale.detach().clone().requires_grad_(True)
    counter = TorchFLOPsByFX(model, warmup=1, repeat=3)
    counter.propagate(x, loss_fn=lambda out: (out * scale).sum())
    (twin(x) * twin_scale).sum().backward()
    assert torch.equal(scale.grad, twin_scale.grad)  # once, not once per extra run
    assert counter.profile.total_recompute_macs == 0
    # a gradient penalty: backward with create_graph=True runs every op with grad mode on
    from torch_flops.backward import BackwardCounter, BackwardRun, SequenceMap
    from torch_flops.measure import PerfCounterTimer

    table = counter.tables
    sequences = SequenceMap()
    w = torch.randn(4, 4, requires_grad=True)
    loss = (torch.randn(3, 4) @ w).pow(2).sum()
    run = BackwardRun.empty(1)
    backward = BackwardCounter(table, sequences, run, PerfCounterTimer())
    from torch.utils._python_dispatch import TorchDispatchMode

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            return backward.op(func, args, kwargs or {})

    with Mode():
        torch.autograd.grad(loss, w, create_graph=True)
    assert run.ops > 0 and sum(run.recompute_macs) == 0


def test_no_grad_is_refused_before_anything_runs() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    before = model[1].running_mean.clone()
    with torch.no_grad(), pytest.raises(ValueError, match="no_grad"):
        TorchFLOPsByFX(model, warmup=2).propagate(torch.randn(3, 4), loss_fn=lambda out: out.sum())
    assert torch.equal(model[1].running_mean, before)


def test_conventions_recount_the_backward() -> None:
    counter = TorchFLOPsByFX(_mlp())
    counter.propagate(torch.randn(3, 8), loss_fn=lambda out: out.sum())
    macs = counter.profile.with_convention("macs")
    assert macs.total_backward_flops == 768 and macs.total_backward_macs == 768
    assert counter.profile.with_convention("flop_counter").total_backward_flops == 2 * 768
    assert Profile.from_json(counter.profile.to_dict()).backward == counter.profile.backward


def test_a_loss_fn_that_raises_is_named() -> None:
    with pytest.raises(ZeroDivisionError) as info:  # the loss's own exception, named in a note
        TorchFLOPsByFX(_mlp()).propagate(torch.randn(3, 8), loss_fn=lambda out: 1 / 0)
    assert "loss_fn raised ZeroDivisionError" in "\n".join(info.value.__notes__)
    # an op of the loss that fails is named as such, with its inputs
    with pytest.raises(ValueError, match="batch_size") as failed:
        TorchFLOPsByFX(_mlp()).propagate(torch.randn(3, 8),
                                         loss_fn=lambda out: F.cross_entropy(out, torch.zeros(5, dtype=torch.long)))
    assert re.search(r"cross_entropy.*\(3, 4\)", "\n".join(failed.value.__notes__))


def test_the_profiler_s_own_checks_are_no_nodes_of_the_program() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    counter = TorchFLOPsByFX(model)
    counter.propagate(torch.randn(2, 8), loss_fn=lambda out: out.sum())
    # the loss check (numel) and the saved-bytes reads (untyped_storage) ran while recording
    assert [r.target for r in counter.records] == ["input", "Linear", "ReLU", "Linear", "Tensor.sum", "output"]
    assert [r.phase for r in counter.records].count("loss") == 1


@pytest.mark.parametrize("extra", [{"warmup": 1}, {"repeat": 2}])
def test_extra_calls_on_an_input_made_from_a_leaf_that_needs_a_gradient(extra: dict[str, int]) -> None:
    """The extra calls' input copies are leaves (cut from the caller's graph): their backward does not
    run through the caller's graph, which the real call's backward then found freed."""
    torch.manual_seed(0)
    model = nn.Linear(4, 4)
    twin = copy.deepcopy(model)
    w = torch.randn(2, 4, requires_grad=True)
    w_twin = w.detach().clone().requires_grad_(True)
    twin(w_twin.exp()).sum().backward()
    TorchFLOPsByFX(model, **extra).propagate(w.exp(), loss_fn=lambda out: out.sum())
    assert w.grad is not None and torch.equal(w.grad, w_twin.grad)
    assert torch.equal(model.weight.grad, twin.weight.grad)

"""The ``_foreach_*`` aten ops count, per tensor of their lists, what their single-tensor op counts
(by hand below); FlopCounterMode has no formula for them (0 in the ``flop_counter`` convention)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import torch_flops
from torch_flops import TrainingProfiler
from torch_flops.records import Status


class _Call(nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def _profile(fn, *args) -> torch_flops.Profile:
    profile = torch_flops.profile(_Call(fn), *args)
    assert all(r.status is not Status.UNSUPPORTED for r in profile.records), \
        [(r.target, r.status) for r in profile.records]
    with FlopCounterMode(display=False) as reference:
        _Call(fn)(*args)
    assert profile.with_convention("flop_counter").total_flops == reference.get_total_flops() == 0
    return profile


def test_foreach_elementwise_ops_count_each_tensor_s_elements() -> None:
    a, b = [torch.randn(3, 4), torch.randn(5)], [torch.randn(3, 4), torch.randn(5)]
    # 12 + 5 = 17 elements: mul by a scalar 17, add of two lists 17, lerp (x + w * (y - x): 3 each) 51
    assert _profile(lambda x, y: torch._foreach_mul(x, 2.0), a, b).total_flops == 17
    assert _profile(lambda x, y: torch._foreach_add(x, y), a, b).total_flops == 17
    lerp = _profile(lambda x, y: torch._foreach_lerp_([t.clone() for t in x], y, 0.5), a, b)
    assert sum(r.flops for r in lerp.records if "foreach" in r.target) == 51


def test_foreach_norm_is_each_tensor_s_vector_norm() -> None:
    # linalg_vector_norm of order 2 counts 2I + O (the I squares, the adds of their sum, a root per
    # output), I elements into O = 1: (2*12 + 1) + (2*5 + 1) = 36, foreach or one by one
    tensors = [torch.randn(3, 4), torch.randn(5)]
    single = sum(_profile(torch.linalg.vector_norm, t).total_flops for t in tensors)
    assert single == 36
    assert _profile(lambda *ts: torch._foreach_norm(list(ts)), *tensors).total_flops == 36


def test_clip_grad_norm_s_foreach_kernels_count_as_its_per_tensor_loop() -> None:
    # Linear(8, 16) + Linear(16, 3): 128 + 16 + 48 + 3 = 195 gradient elements in 4 tensors.
    # clip_grad_norm_(max_norm=0.5): the 4 norms 2 * 195 + 4 = 394, the norm of the 4 norms 2 * 4 + 1 = 9,
    # max_norm / (total + 1e-6) and its clamp 3, the scaling of every gradient 195: 601, whether torch
    # runs the foreach kernels (its default on CPU) or the loop
    counts = []
    for foreach in (None, False):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        with TrainingProfiler(model, optimizer) as prof:
            F.cross_entropy(model(torch.randn(4, 8)), torch.tensor([0, 1, 2, 0])).backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.5, foreach=foreach)
            optimizer.step()
        clipping = [r for r in prof.profiles[0].records if r.phase == "optimizer" and r.op != "optimizer_step"]
        assert all(r.status is not Status.UNSUPPORTED for r in clipping), [(r.target, r.status) for r in clipping]
        counts.append(sum(r.flops for r in clipping))
    assert counts == [601, 601]


def test_grad_scaler_s_unscale_kernel_is_a_multiply_and_a_check_per_element() -> None:
    # _amp_foreach_non_finite_check_and_unscale_ over the 4 gradients (195 elements): 2 each = 390
    grads = [torch.randn(16, 8), torch.randn(16), torch.randn(3, 16), torch.randn(3)]
    found, inv = torch.zeros(1), torch.full((1,), 0.5)
    profile = _profile(lambda *g: torch._amp_foreach_non_finite_check_and_unscale_(list(g), found, inv), *grads)
    assert profile.total_flops == 390

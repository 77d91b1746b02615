"""Hand-derived FLOPs of the normalisation family (torch_flops/formulas/norm.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from torch_flops.formulas import (
    FUNCTION_FLOPs_MAPPING,
    METHOD_FLOPs_MAPPING,
    MODULE_FLOPs_MAPPING,
)

CLAIMED_MODULES = [
    "LayerNorm", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d",
    "LazyInstanceNorm1d", "LazyInstanceNorm2d", "LazyInstanceNorm3d",
    "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm",
    "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d",
    "RMSNorm", "LocalResponseNorm",
]
CLAIMED_FUNCTIONS = [
    "layer_norm", "group_norm", "batch_norm", "instance_norm", "rms_norm",
    "local_response_norm", "normalize", "_weight_norm",
]

NCHW = (2, 4, 3, 3)  # 72 elements


def _randn(*shape: int) -> torch.Tensor:
    torch.manual_seed(sum(shape))
    return torch.randn(shape)


def _module_flops(mod: nn.Module, x: torch.Tensor, key: str | None = None) -> tuple[int, int]:
    out = mod(x)
    return MODULE_FLOPs_MAPPING[key or type(mod).__name__](mod, out, x)


# --------------------------------------------------------------------------- #
# Modules: (key, module factory, input shape, train mode, expected)
# --------------------------------------------------------------------------- #

MODULE_CASES: list[tuple[str, Any, tuple[int, ...], bool, int]] = [
    # LayerNorm on (2, 3, 4) = 24 elements
    ("LayerNorm", lambda: nn.LayerNorm(4), (2, 3, 4), False, 168),  # 24 x (5 + w + b) = 24 x 7
    ("LayerNorm", lambda: nn.LayerNorm(4, bias=False), (2, 3, 4), False, 144),  # 24 x 6
    ("LayerNorm", lambda: nn.LayerNorm((3, 4), elementwise_affine=False), (2, 3, 4), False, 120),  # 24 x 5
    # GroupNorm on (2, 4, 3, 3) = 72
    ("GroupNorm", lambda: nn.GroupNorm(2, 4), NCHW, False, 504),  # 72 x 7
    ("GroupNorm", lambda: nn.GroupNorm(2, 4, affine=False), NCHW, True, 360),  # 72 x 5
    # InstanceNorm (affine=False, track_running_stats=False by default)
    ("InstanceNorm2d", lambda: nn.InstanceNorm2d(4), NCHW, False, 360),  # 72 x 5
    ("InstanceNorm2d", lambda: nn.InstanceNorm2d(4, affine=True), NCHW, True, 504),  # 72 x 7
    # running stats in eval: 72 x (2 + w + b) = 72 x 4
    ("InstanceNorm2d", lambda: nn.InstanceNorm2d(4, affine=True, track_running_stats=True), NCHW, False, 288),
    # same module in training uses the input stats: 72 x 7
    ("InstanceNorm2d", lambda: nn.InstanceNorm2d(4, affine=True, track_running_stats=True), NCHW, True, 504),
    ("InstanceNorm1d", lambda: nn.InstanceNorm1d(3), (3, 5), False, 75),  # unbatched (3, 5) = 15 x 5
    ("InstanceNorm3d", lambda: nn.InstanceNorm3d(2), (1, 2, 2, 2, 2), False, 80),  # 16 x 5
    # the Lazy forms default to affine=True, track_running_stats=True
    ("LazyInstanceNorm1d", lambda: nn.LazyInstanceNorm1d(), (2, 3, 5), True, 210),  # 30 x 7 (training)
    ("LazyInstanceNorm2d", lambda: nn.LazyInstanceNorm2d(), NCHW, False, 288),  # 72 x 4 (running stats)
    ("LazyInstanceNorm3d", lambda: nn.LazyInstanceNorm3d(track_running_stats=False),
     (1, 2, 2, 2, 2), False, 112),  # 16 x 7 (input stats, affine)
    # BatchNorm: batch stats in training (5 + w + b), running stats in eval (2 + w + b)
    ("BatchNorm2d", lambda: nn.BatchNorm2d(4), NCHW, True, 504),  # 72 x 7
    ("BatchNorm2d", lambda: nn.BatchNorm2d(4), NCHW, False, 288),  # 72 x 4
    ("BatchNorm2d", lambda: nn.BatchNorm2d(4, affine=False), NCHW, False, 144),  # 72 x 2
    ("BatchNorm2d", lambda: nn.BatchNorm2d(4, affine=False), NCHW, True, 360),  # 72 x 5
    # no running stats: batch stats even in eval, 72 x 7
    ("BatchNorm2d", lambda: nn.BatchNorm2d(4, track_running_stats=False), NCHW, False, 504),
    ("BatchNorm1d", lambda: nn.BatchNorm1d(3), (4, 3), False, 48),  # 12 x 4
    ("BatchNorm1d", lambda: nn.BatchNorm1d(3), (4, 3, 5), True, 420),  # 60 x 7
    ("BatchNorm3d", lambda: nn.BatchNorm3d(2), (2, 2, 2, 2, 2), True, 224),  # 32 x 7
    ("SyncBatchNorm", lambda: nn.SyncBatchNorm(4), NCHW, False, 288),  # 72 x 4
    ("LazyBatchNorm1d", lambda: nn.LazyBatchNorm1d(), (4, 3), False, 48),  # 12 x 4
    ("LazyBatchNorm2d", lambda: nn.LazyBatchNorm2d(), NCHW, True, 504),  # 72 x 7
    ("LazyBatchNorm3d", lambda: nn.LazyBatchNorm3d(affine=False), (2, 2, 2, 2, 2), False, 64),  # 32 x 2
    # RMSNorm: 3 + w
    ("RMSNorm", lambda: nn.RMSNorm(4), (2, 3, 4), False, 96),  # 24 x 4
    ("RMSNorm", lambda: nn.RMSNorm([3, 4], elementwise_affine=False), (2, 3, 4), False, 72),  # 24 x 3
    # LocalResponseNorm: size + 4 (square, size-1 adds, mul alpha/n, add k, pow beta, div)
    ("LocalResponseNorm", lambda: nn.LocalResponseNorm(3), NCHW, False, 504),  # 72 x (3 + 4)
    ("LocalResponseNorm", lambda: nn.LocalResponseNorm(2), (2, 4, 5), False, 240),  # 40 x (2 + 4)
]


@pytest.mark.parametrize("key,factory,shape,train,expected", MODULE_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(MODULE_CASES)])
def test_module(key: str, factory: Any, shape: tuple[int, ...], train: bool, expected: int) -> None:
    mod = factory().train(train)
    assert _module_flops(mod, _randn(*shape), key) == (expected, 0)


@pytest.mark.parametrize("key,factory,shape,train,expected",
                         [c for c in MODULE_CASES if not c[0].startswith("Lazy")],
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(MODULE_CASES) if not c[0].startswith("Lazy")])
def test_module_meta_matches_cpu(key: str, factory: Any, shape: tuple[int, ...], train: bool,
                                 expected: int) -> None:
    with torch.device("meta"):
        mod = factory().train(train)
    x = torch.empty(shape, device="meta")
    out = mod(x)
    assert out.is_meta
    assert MODULE_FLOPs_MAPPING[key](mod, out, x) == (expected, 0)


def test_module_input_as_keyword() -> None:
    mod = nn.LayerNorm(4)
    x = _randn(2, 3, 4)
    assert MODULE_FLOPs_MAPPING["LayerNorm"](mod, mod(input=x), input=x) == (168, 0)  # 24 x 7


def test_claimed_modules_registered() -> None:
    for name in CLAIMED_MODULES:
        assert hasattr(nn, name), name
        assert name in MODULE_FLOPs_MAPPING, name
    for name in CLAIMED_FUNCTIONS:
        assert getattr(F, name, None) is None or getattr(F, name).__name__ == name  # (torch._weight_norm: torch's)
        assert name in FUNCTION_FLOPs_MAPPING, name


# --------------------------------------------------------------------------- #
# Functions
# --------------------------------------------------------------------------- #

def _function_flops(fn: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    out = fn(*args, **kwargs)
    # keyed by the function itself: F.batch_norm and torch.batch_norm share a name, not an argument order
    assert fn.__name__ in FUNCTION_FLOPs_MAPPING
    return FUNCTION_FLOPs_MAPPING[fn](out, *args, **kwargs)


def test_layer_norm_function() -> None:
    x = _randn(2, 3, 4)  # 24 elements
    w, b = torch.ones(4), torch.zeros(4)
    assert _function_flops(F.layer_norm, x, (4,), w, b) == (168, 0)  # 24 x 7
    assert _function_flops(F.layer_norm, x, (4,), weight=w) == (144, 0)  # 24 x 6
    assert _function_flops(F.layer_norm, input=x, normalized_shape=(3, 4)) == (120, 0)  # 24 x 5
    assert _function_flops(torch.layer_norm, x, [4], w, b, 1e-5, False) == (168, 0)  # 24 x 7


def test_group_norm_function() -> None:
    x = _randn(*NCHW)  # 72 elements
    w, b = torch.ones(4), torch.zeros(4)
    assert _function_flops(F.group_norm, x, 2, w, b) == (504, 0)  # 72 x 7
    assert _function_flops(F.group_norm, x, 2, bias=b) == (432, 0)  # 72 x 6
    assert _function_flops(torch.group_norm, x, 2) == (360, 0)  # 72 x 5


def test_batch_norm_function() -> None:
    x = _randn(*NCHW)  # 72 elements
    rm, rv = torch.zeros(4), torch.ones(4)
    w, b = torch.ones(4), torch.zeros(4)
    # eval with running stats, positional weight/bias: 72 x (2 + 1 + 1) = 288
    assert _function_flops(F.batch_norm, x, rm.clone(), rv.clone(), w, b) == (288, 0)
    # training=True: batch stats, 72 x (5 + 1 + 1) = 504
    assert _function_flops(F.batch_norm, x, rm.clone(), rv.clone(), w, b, True) == (504, 0)
    # training=True by keyword, no affine: 72 x 5 = 360
    assert _function_flops(F.batch_norm, x, rm.clone(), rv.clone(), training=True) == (360, 0)
    # eval, no affine: 72 x 2 = 144
    assert _function_flops(F.batch_norm, x, rm.clone(), rv.clone(), training=False) == (144, 0)
    # no running stats (only allowed with training=True): batch stats, 72 x 5 = 360
    assert _function_flops(F.batch_norm, x, None, None, training=True) == (360, 0)
    assert FUNCTION_FLOPs_MAPPING["batch_norm"](x, x, None, None) == (360, 0)  # formula alone: 72 x 5
    # torch.batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps,
    # cudnn_enabled): eval with weight only, 72 x (2 + 1) = 216; training, 72 x (5 + 1) = 432
    assert _function_flops(torch.batch_norm, x, w, None, rm.clone(), rv.clone(), False, 0.1, 1e-5,
                           False) == (216, 0)
    assert _function_flops(torch.batch_norm, x, w, None, rm.clone(), rv.clone(), True, 0.1, 1e-5,
                           False) == (432, 0)


def test_instance_norm_function() -> None:
    x = _randn(*NCHW)  # 72 elements
    rm, rv = torch.zeros(4), torch.ones(4)
    w, b = torch.ones(4), torch.zeros(4)
    assert _function_flops(F.instance_norm, x) == (360, 0)  # 72 x 5
    assert _function_flops(F.instance_norm, x, weight=w, bias=b) == (504, 0)  # 72 x 7
    # running stats (use_input_stats=False): 72 x 2 = 144
    assert _function_flops(F.instance_norm, x, rm, rv, use_input_stats=False) == (144, 0)
    # torch.instance_norm(input, weight, bias, running_mean, running_var, use_input_stats, ...):
    # 72 x (5 + 1 + 1) = 504
    assert _function_flops(torch.instance_norm, x, w, b, None, None, True, 0.1, 1e-5, False) == (504, 0)


def test_rms_norm_function() -> None:
    x = _randn(2, 3, 4)  # 24 elements
    assert _function_flops(F.rms_norm, x, (4,)) == (72, 0)  # 24 x 3
    assert _function_flops(F.rms_norm, x, (4,), torch.ones(4)) == (96, 0)  # 24 x 4
    assert _function_flops(F.rms_norm, x, normalized_shape=(4,), weight=torch.ones(4), eps=1e-6) == (96, 0)
    assert _function_flops(torch.rms_norm, x, [4], None, None) == (72, 0)  # 24 x 3


def test_local_response_norm_function() -> None:
    x = _randn(*NCHW)  # 72 elements
    assert _function_flops(F.local_response_norm, x, 2) == (432, 0)  # 72 x (2 + 4)
    assert _function_flops(F.local_response_norm, x, size=5, alpha=1e-3) == (648, 0)  # 72 x (5 + 4)


def test_normalize_function() -> None:
    x = _randn(2, 3, 4)  # 24 elements
    assert _function_flops(F.normalize, x) == (72, 0)  # 24 x 3
    assert _function_flops(F.normalize, x, 1.0, -1) == (72, 0)  # 24 x 3
    assert _function_flops(F.normalize, input=x, p=3.0, dim=0) == (72, 0)  # 24 x 3


def test_weight_norm_function() -> None:
    v, g = _randn(6, 8), _randn(6, 1)  # 48 elements in 6 slices (dim 0)
    assert _function_flops(torch._weight_norm, v, g, 0) == (150, 0)  # 3 x 48 + 6
    g_all = _randn(1, 1)  # dim -1: one norm over the whole tensor
    assert _function_flops(torch._weight_norm, v, g_all, -1) == (145, 0)  # 3 x 48 + 1


def test_function_meta_matches_cpu() -> None:
    x = torch.empty(NCHW, device="meta")
    rm, rv = torch.zeros(4, device="meta"), torch.ones(4, device="meta")
    w = torch.ones(4, device="meta")
    assert _function_flops(F.batch_norm, x, rm, rv, w, w, True) == (504, 0)  # 72 x 7
    assert _function_flops(F.batch_norm, x, rm, rv, w, w) == (288, 0)  # 72 x 4
    assert _function_flops(F.layer_norm, x, (3, 3)) == (360, 0)  # 72 x 5
    assert _function_flops(F.group_norm, x, 2, w, w) == (504, 0)  # 72 x 7
    assert _function_flops(F.instance_norm, x) == (360, 0)  # 72 x 5
    assert _function_flops(F.rms_norm, x, (3,)) == (216, 0)  # 72 x 3
    assert _function_flops(F.normalize, x) == (216, 0)  # 72 x 3


def test_int_tensors_give_zero() -> None:
    # Norms do not run on integer data; the formulas still must answer 0 for non-floating input.
    x = torch.ones(NCHW, dtype=torch.int64)
    assert MODULE_FLOPs_MAPPING["BatchNorm2d"](nn.BatchNorm2d(4), x, x) == (0, 0)
    assert MODULE_FLOPs_MAPPING["LayerNorm"](nn.LayerNorm(3), x, x) == (0, 0)
    assert FUNCTION_FLOPs_MAPPING["layer_norm"](x, x, (3,)) == (0, 0)
    assert FUNCTION_FLOPs_MAPPING["normalize"](x, x) == (0, 0)


def test_every_registered_key_is_tested() -> None:
    own = "torch_flops.formulas.norm"
    assert {k for k, f in MODULE_FLOPs_MAPPING.items() if f.__module__ == own} == set(CLAIMED_MODULES)
    assert {c[0] for c in MODULE_CASES} == set(CLAIMED_MODULES)
    assert {k for k, f in FUNCTION_FLOPs_MAPPING.items() if f.__module__ == own} == set(CLAIMED_FUNCTIONS)
    assert not {k for k, f in METHOD_FLOPs_MAPPING.items() if f.__module__ == own}


def test_module_deepcopy_independent() -> None:
    # The formula reads module.training at call time.
    mod = nn.BatchNorm2d(4)
    x = _randn(*NCHW)
    assert _module_flops(copy.deepcopy(mod).train(), x) == (504, 0)  # 72 x 7
    assert _module_flops(copy.deepcopy(mod).eval(), x) == (288, 0)  # 72 x 4

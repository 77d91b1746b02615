"""Hand-derived FLOPs of the pooling family (torch_flops/formulas/pooling.py)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from torch_flops.formulas import (
    FUNCTION_FLOPs_MAPPING,
    METHOD_FLOPs_MAPPING,
    MODULE_FLOPs_MAPPING,
    zero_flops,
)

CLAIMED_MODULES = [
    "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d",
    "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d",
    "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d",
    "LPPool1d", "LPPool2d", "LPPool3d", "FractionalMaxPool2d", "FractionalMaxPool3d",
    "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d",
]
ZERO_MODULES = ["MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d"]
ZERO_FUNCTIONS = ["max_unpool1d", "max_unpool2d", "max_unpool3d"]


def _randn(*shape: int) -> torch.Tensor:
    torch.manual_seed(sum(shape))
    return torch.randn(shape)


# --------------------------------------------------------------------------- #
# Modules: (module factory, input shape, expected)
# --------------------------------------------------------------------------- #

MODULE_CASES: list[tuple[Any, tuple[int, ...], int]] = [
    # max pool: K - 1 per output
    (lambda: nn.MaxPool2d(2), (1, 2, 4, 4), 24),  # out (1, 2, 2, 2) = 8 x (4 - 1)
    # out side floor((7 + 2 - 3) / 2) + 1 = 4: (2, 3, 4, 4) = 96 x (9 - 1) = 768
    (lambda: nn.MaxPool2d(3, stride=2, padding=1), (2, 3, 7, 7), 768),
    # ceil_mode: side ceil((6 - 3) / 2) + 1 = 3 -> 9 outputs x 8 = 72 (floor mode: 2 -> 4 x 8 = 32)
    (lambda: nn.MaxPool2d(3, stride=2, ceil_mode=True), (1, 1, 6, 6), 72),
    (lambda: nn.MaxPool2d(3, stride=2), (1, 1, 6, 6), 32),
    # dilation 2: side floor((5 - 2 * (2 - 1) - 1) / 1) + 1 = 3 -> 9 x (4 - 1) = 27
    (lambda: nn.MaxPool2d(2, stride=1, dilation=2), (1, 1, 5, 5), 27),
    (lambda: nn.MaxPool2d(2, return_indices=True), (1, 2, 4, 4), 24),  # out[0] (1, 2, 2, 2) = 8 x 3
    (lambda: nn.MaxPool1d(3), (2, 9), 12),  # unbatched (C=2, 9) -> (2, 3) = 6 x (3 - 1)
    (lambda: nn.MaxPool3d(2), (1, 1, 4, 4, 4), 56),  # out 2^3 = 8 x (8 - 1)
    (lambda: nn.MaxPool3d((1, 2, 2)), (3, 2, 4, 4), 72),  # unbatched: (3, 2, 2, 2) = 24 x (4 - 1)
    # avg pool: K per output
    (lambda: nn.AvgPool1d(2), (1, 2, 8), 16),  # out (1, 2, 4) = 8 x 2
    (lambda: nn.AvgPool2d((2, 3)), (1, 1, 4, 6), 24),  # out (1, 1, 2, 2) = 4 x 6
    (lambda: nn.AvgPool2d(3, stride=1, padding=1), (1, 1, 4, 4), 144),  # out 4 x 4 = 16 x 9
    (lambda: nn.AvgPool3d(2), (1, 1, 4, 4, 4), 64),  # out 8 x 8
    # LP pool: 2K + 1 per output
    (lambda: nn.LPPool1d(2, 3), (1, 2, 9), 42),  # out (1, 2, 3) = 6 x (2 * 3 + 1)
    (lambda: nn.LPPool2d(2, 2), (1, 2, 4, 4), 72),  # out (1, 2, 2, 2) = 8 x (2 * 4 + 1)
    (lambda: nn.LPPool3d(1, 2), (1, 1, 4, 4, 4), 136),  # out 8 x (2 * 8 + 1)
    # fractional max pool: K - 1 per output
    (lambda: nn.FractionalMaxPool2d(2, output_size=3), (1, 2, 7, 7), 54),  # (1, 2, 3, 3) = 18 x 3
    (lambda: nn.FractionalMaxPool2d(3, output_ratio=0.5, return_indices=True), (1, 1, 8, 8), 128),
    # ^ out[0] (1, 1, 4, 4) = 16 x (9 - 1)
    (lambda: nn.FractionalMaxPool3d(2, output_size=2), (1, 1, 5, 5, 5), 56),  # 8 x (8 - 1)
    # adaptive avg: N*C * prod_d S_d; 7 -> 3 windows [0,3) [2,5) [4,7): S = 3 + 3 + 3 = 9
    (lambda: nn.AdaptiveAvgPool1d(3), (1, 2, 7), 18),  # 2 x 9
    (lambda: nn.AdaptiveMaxPool1d(3), (1, 2, 7), 12),  # 2 x (9 - 3)
    # 5 -> 2: [0,3) [2,5): S = 6; (7, 5) -> (3, 2): 9 x 6 = 54 per slice, 6 slices
    (lambda: nn.AdaptiveAvgPool2d((3, 2)), (2, 3, 7, 5), 324),  # 6 x 54
    (lambda: nn.AdaptiveMaxPool2d((3, 2)), (2, 3, 7, 5), 288),  # 6 x (54 - 3 * 2)
    (lambda: nn.AdaptiveAvgPool2d(1), (2, 4, 3, 3), 72),  # global: 8 slices x 9
    (lambda: nn.AdaptiveMaxPool2d(1), (2, 4, 3, 3), 64),  # 8 x (9 - 1)
    # None keeps the size: 4 -> 4 is S = 4; 5 -> 2 is S = 6: 24 per slice
    (lambda: nn.AdaptiveAvgPool2d((None, 2)), (1, 1, 4, 5), 24),
    # unbatched (C=3, 5, 5) -> (3, 2, 2), indices returned: 3 x (6 * 6 - 2 * 2) = 96
    (lambda: nn.AdaptiveMaxPool2d(2, return_indices=True), (3, 5, 5), 96),
    # (5, 4, 3) -> (2, 2, 2): S = 6 ([0,3) [2,5)), 4 ([0,2) [2,4)), 4 ([0,2) [1,3)) -> 96 per slice
    (lambda: nn.AdaptiveAvgPool3d(2), (1, 1, 5, 4, 3), 96),
    (lambda: nn.AdaptiveMaxPool3d(2), (1, 1, 5, 4, 3), 88),  # 96 - 8
    # upsampling 3 -> 5: windows [0,1) [0,2) [1,2) [1,3) [2,3): S = 1+2+1+2+1 = 7
    (lambda: nn.AdaptiveAvgPool1d(5), (1, 1, 3), 7),
    (lambda: nn.AdaptiveMaxPool1d(5), (1, 1, 3), 2),  # 7 - 5
]


def _name(factory: Any) -> str:
    return type(factory()).__name__


@pytest.mark.parametrize("factory,shape,expected", MODULE_CASES,
                         ids=[f"{_name(c[0])}-{i}" for i, c in enumerate(MODULE_CASES)])
def test_module(factory: Any, shape: tuple[int, ...], expected: int) -> None:
    mod = factory()
    x = _randn(*shape)
    out = mod(x)
    assert MODULE_FLOPs_MAPPING[type(mod).__name__](mod, out, x) == (expected, 0)


@pytest.mark.parametrize("factory,shape,expected", MODULE_CASES,
                         ids=[f"{_name(c[0])}-{i}" for i, c in enumerate(MODULE_CASES)])
def test_module_meta_matches_cpu(factory: Any, shape: tuple[int, ...], expected: int) -> None:
    mod = factory()
    x = torch.empty(shape, device="meta")
    out = mod(x)
    assert (out[0] if isinstance(out, tuple) else out).is_meta
    assert MODULE_FLOPs_MAPPING[type(mod).__name__](mod, out, x) == (expected, 0)


def test_module_input_as_keyword() -> None:
    mod = nn.MaxPool2d(2)
    x = _randn(1, 2, 4, 4)
    assert MODULE_FLOPs_MAPPING["MaxPool2d"](mod, mod(input=x), input=x) == (24, 0)  # 8 x 3


def test_max_unpool_is_zero() -> None:
    x = _randn(1, 2, 4, 4)
    pooled, idx = F.max_pool2d(x, 2, return_indices=True)
    mod = nn.MaxUnpool2d(2)
    out = mod(pooled, idx)
    assert MODULE_FLOPs_MAPPING["MaxUnpool2d"](mod, out, pooled, idx) == (0, 0)  # a scatter
    assert FUNCTION_FLOPs_MAPPING["max_unpool2d"](out, pooled, idx, 2) == (0, 0)
    p1, i1 = F.max_pool1d(x[0], 2, return_indices=True)
    assert FUNCTION_FLOPs_MAPPING[F.max_unpool1d.__name__](F.max_unpool1d(p1, i1, 2), p1, i1, 2) == (0, 0)
    for key in ZERO_MODULES:
        assert MODULE_FLOPs_MAPPING[key] is zero_flops
    for key in ZERO_FUNCTIONS:
        assert getattr(F, key).__name__ == key
        assert FUNCTION_FLOPs_MAPPING[key] is zero_flops


def test_claimed_modules_registered() -> None:
    for name in CLAIMED_MODULES:
        assert hasattr(nn, name), name
        assert name in MODULE_FLOPs_MAPPING, name


# --------------------------------------------------------------------------- #
# Functions: (function, args, kwargs, expected); the key is fn's real __name__
# --------------------------------------------------------------------------- #

FUNCTION_CASES: list[tuple[Any, tuple[Any, ...], dict[str, Any], int]] = [
    (F.max_pool1d, (_randn(1, 2, 9), 3), {}, 12),  # (1, 2, 3) = 6 x 2
    (F.max_pool1d, (_randn(1, 2, 9), 3), {"return_indices": True}, 12),  # out[0] 6 x 2
    (F.max_pool1d_with_indices, (_randn(2, 9),), {"kernel_size": 3}, 12),  # unbatched 6 x 2
    (F.max_pool2d, (_randn(1, 2, 4, 4), 2), {}, 24),  # (1, 2, 2, 2) = 8 x 3
    (F.max_pool2d, (_randn(2, 3, 7, 7),), {"kernel_size": 3, "stride": 2, "padding": 1}, 768),  # 96 x 8
    (F.max_pool2d, (_randn(1, 1, 6, 6), 3, 2, 0, 1, True), {}, 72),  # ceil_mode: 9 x 8
    (torch.max_pool2d, (_randn(1, 2, 4, 4), [2, 2]), {}, 24),  # 8 x 3
    (F.max_pool2d_with_indices, (_randn(1, 2, 4, 4), (2, 2)), {"return_indices": True}, 24),  # 8 x 3
    (F.max_pool3d, (_randn(1, 1, 4, 4, 4), 2), {}, 56),  # 8 x 7
    (F.max_pool3d_with_indices, (_randn(1, 1, 4, 4, 4), 2), {}, 56),  # 8 x 7
    (F.avg_pool1d, (_randn(1, 2, 8), 2), {}, 16),  # (1, 2, 4) = 8 x 2
    (F.avg_pool2d, (_randn(1, 1, 4, 6),), {"kernel_size": (2, 3)}, 24),  # 4 x 6
    (F.avg_pool2d, (_randn(1, 1, 5, 5), 2), {"ceil_mode": True}, 36),  # ceil: 3 x 3 = 9 x 4
    (F.avg_pool3d, (_randn(1, 1, 4, 4, 4), 2), {}, 64),  # 8 x 8
    (F.lp_pool1d, (_randn(1, 2, 9), 2, 3), {}, 42),  # 6 x (2 * 3 + 1)
    (F.lp_pool2d, (_randn(1, 2, 4, 4),), {"norm_type": 2, "kernel_size": 2}, 72),  # 8 x 9
    (F.lp_pool3d, (_randn(1, 1, 4, 4, 4), 1.5, 2), {}, 136),  # 8 x 17
    (F.adaptive_avg_pool1d, (_randn(1, 2, 7), 3), {}, 18),  # 2 x (3 + 3 + 3)
    (F.adaptive_avg_pool2d, (_randn(2, 3, 7, 5), (3, 2)), {}, 324),  # 6 x 9 x 6
    (F.adaptive_avg_pool3d, (_randn(1, 1, 5, 4, 3),), {"output_size": 2}, 96),  # 6 x 4 x 4
    (F.adaptive_max_pool1d, (_randn(1, 2, 7), 3), {}, 12),  # 2 x (9 - 3)
    (F.adaptive_max_pool1d_with_indices, (_randn(1, 2, 7), 3), {}, 12),  # 2 x (9 - 3)
    (F.adaptive_max_pool2d, (_randn(3, 5, 5), 2), {"return_indices": True}, 96),  # 3 x (36 - 4)
    (F.adaptive_max_pool2d_with_indices, (_randn(2, 3, 7, 5), (3, 2)), {}, 288),  # 6 x (54 - 6)
    (F.adaptive_max_pool3d, (_randn(1, 1, 5, 4, 3), 2), {}, 88),  # 96 - 8
    (F.adaptive_max_pool3d_with_indices, (_randn(1, 1, 5, 4, 3), 2), {}, 88),  # 96 - 8
    (F.fractional_max_pool2d, (_randn(1, 2, 7, 7), 2), {"output_size": 3}, 54),  # 18 x 3
    (F.fractional_max_pool2d_with_indices, (_randn(1, 2, 7, 7), 2), {"output_size": 3}, 54),  # 18 x 3
    (F.fractional_max_pool3d, (_randn(1, 1, 5, 5, 5), 2), {"output_size": 2}, 56),  # 8 x 7
    (F.fractional_max_pool3d_with_indices, (_randn(1, 1, 5, 5, 5),),
     {"kernel_size": 2, "output_size": 2}, 56),  # 8 x 7
]

# The key fx records: F.max_pool2d(..., return_indices=True) is recorded as
# max_pool2d_with_indices (boolean_dispatch); the table must serve both.
_DISPATCH_KEY = {
    (F.max_pool1d, True): "max_pool1d_with_indices",
    (F.max_pool2d, True): "max_pool2d_with_indices",
    (F.adaptive_max_pool2d, True): "adaptive_max_pool2d_with_indices",
}


@pytest.mark.parametrize("fn,args,kwargs,expected", FUNCTION_CASES,
                         ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(FUNCTION_CASES)])
def test_function(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], expected: int) -> None:
    out = fn(*args, **kwargs)
    keys = {fn.__name__, _DISPATCH_KEY.get((fn, bool(kwargs.get("return_indices"))), fn.__name__)}
    for key in keys:
        assert FUNCTION_FLOPs_MAPPING[key](out, *args, **kwargs) == (expected, 0), key


def test_function_names_are_what_fx_records() -> None:
    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> Any:
            return (F.max_pool2d(x, 2), F.max_pool2d(x, 2, return_indices=True),
                    F.adaptive_max_pool2d(x, 1), F.avg_pool2d(x, 2), F.lp_pool2d(x, 2, 2))

    graph = torch.fx.symbolic_trace(M()).graph
    names = [n.target.__name__ for n in graph.nodes
             if n.op == "call_function" and n.target.__name__ != "getitem"]
    assert names == ["max_pool2d", "max_pool2d_with_indices", "adaptive_max_pool2d", "avg_pool2d",
                     "lp_pool2d"]
    assert all(name in FUNCTION_FLOPs_MAPPING for name in names)


def test_function_meta_matches_cpu() -> None:
    x = torch.empty(2, 3, 7, 5, device="meta")
    out = F.adaptive_max_pool2d(x, (3, 2))
    assert FUNCTION_FLOPs_MAPPING["adaptive_max_pool2d"](out, x, (3, 2)) == (288, 0)  # 6 x (54 - 6)
    out = F.max_pool2d(x, 3, 2, 1)  # (2, 3, 4, 3) = 72 outputs x 8
    assert FUNCTION_FLOPs_MAPPING["max_pool2d"](out, x, 3, 2, 1) == (576, 0)
    out = F.avg_pool2d(x, 2)  # (2, 3, 3, 2) = 36 x 4
    assert FUNCTION_FLOPs_MAPPING["avg_pool2d"](out, x, 2) == (144, 0)


def test_int_tensors_give_zero() -> None:
    x = torch.arange(32).reshape(1, 2, 4, 4)
    assert MODULE_FLOPs_MAPPING["MaxPool2d"](nn.MaxPool2d(2), F.max_pool2d(x.float(), 2).long(), x) == (0, 0)
    out = F.adaptive_max_pool2d(x.float(), 1).long()
    assert FUNCTION_FLOPs_MAPPING["adaptive_max_pool2d"](out, x, 1) == (0, 0)
    assert FUNCTION_FLOPs_MAPPING["adaptive_avg_pool2d"](out, x, 1) == (0, 0)


def test_every_registered_key_is_tested() -> None:
    own = "torch_flops.formulas.pooling"
    tested_fns = {c[0].__name__ for c in FUNCTION_CASES} | set(_DISPATCH_KEY.values())
    assert {k for k, f in MODULE_FLOPs_MAPPING.items() if f.__module__ == own} | set(ZERO_MODULES) \
        == set(CLAIMED_MODULES)
    assert {_name(c[0]) for c in MODULE_CASES} | set(ZERO_MODULES) == set(CLAIMED_MODULES)
    assert {k for k, f in FUNCTION_FLOPs_MAPPING.items() if f.__module__ == own} == tested_fns
    assert not {k for k, f in METHOD_FLOPs_MAPPING.items() if f.__module__ == own}


# --------------------------------------------------------------------------- #
# Adaptive windows: the factorised formula against brute-force enumeration, with the 1-D windows
# read back from torch's own adaptive_avg_pool1d.
# --------------------------------------------------------------------------- #

def _torch_windows(in_size: int, out_size: int) -> list[tuple[int, int]]:
    """The adaptive windows torch uses, recovered from adaptive_avg_pool1d of one-hot rows.

    Row ``j`` of ``eye(I)`` is ``e_j``; its pooled value at output ``i`` is ``1 / len_i`` if ``j``
    lies in window ``i``, else 0.
    """
    pooled = F.adaptive_avg_pool1d(torch.eye(in_size, dtype=torch.float64).unsqueeze(0), out_size)[0]
    windows = []
    for i in range(out_size):
        members = torch.nonzero(pooled[:, i] > 0).flatten().tolist()
        assert members == list(range(members[0], members[-1] + 1))  # contiguous
        assert round(1.0 / float(pooled[members[0], i])) == len(members)
        windows.append((members[0], members[-1] + 1))
    return windows


def _brute_force(in_sizes: tuple[int, ...], out_sizes: tuple[int, ...]) -> tuple[int, int]:
    """(sum of window sizes, sum of (window size - 1)) over all output positions of one slice."""
    per_dim = [_torch_windows(i, o) for i, o in zip(in_sizes, out_sizes)]
    avg = mx = 0
    for combo in itertools.product(*per_dim):
        size = 1
        for start, end in combo:
            size *= end - start
        avg += size
        mx += size - 1
    return avg, mx


def test_adaptive_window_example() -> None:
    assert _torch_windows(7, 3) == [(0, 3), (2, 5), (4, 7)]  # lengths 3 + 3 + 3 = 9
    assert _brute_force((7,), (3,)) == (9, 6)


@settings(max_examples=60, deadline=None)
# lead: the (C,) of an unbatched input or the (N, C) of a batched one
@given(n=st.integers(1, 3), lead=st.sampled_from([(1,), (2,), (2, 3)]),
       sizes=st.lists(st.tuples(st.integers(1, 12), st.integers(1, 12)), min_size=3, max_size=3))
def test_adaptive_formula_matches_brute_force(n: int, lead: tuple[int, ...],
                                              sizes: list[tuple[int, int]]) -> None:
    in_sizes = tuple(s[0] for s in sizes[:n])
    out_sizes = tuple(s[1] for s in sizes[:n])
    slices = 1
    for d in lead:
        slices *= d
    avg, mx = _brute_force(in_sizes, out_sizes)
    x = torch.empty(*lead, *in_sizes, device="meta")
    for kind, expected in (("Avg", avg), ("Max", mx)):
        mod = getattr(nn, f"Adaptive{kind}Pool{n}d")(out_sizes)
        out = mod(x)
        assert MODULE_FLOPs_MAPPING[type(mod).__name__](mod, out, x) == (slices * expected, 0)
        fn = getattr(F, f"adaptive_{kind.lower()}_pool{n}d")
        assert FUNCTION_FLOPs_MAPPING[fn.__name__](out, x, out_sizes) == (slices * expected, 0)

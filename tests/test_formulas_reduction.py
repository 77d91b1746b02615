"""Hand-derived FLOPs of the reduction family (torch_flops/formulas/reduction.py).

Input ``x`` is (2, 3, 4): I = 24 input elements. O = result elements.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from torch_flops import TorchFLOPsByFX
from torch_flops.formulas import (
    FUNCTION_FLOPs_MAPPING,
    METHOD_FLOPs_MAPPING,
    MODULE_FLOPs_MAPPING,
)

SHAPE = (2, 3, 4)  # I = 24


def _x(device: str = "cpu") -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(SHAPE).to(device)


def _y(device: str = "cpu") -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(SHAPE).to(device)


# --------------------------------------------------------------------------- #
# Functions: (function, extra args after x, kwargs, expected)
# --------------------------------------------------------------------------- #

FUNCTION_CASES: list[tuple[Any, tuple[Any, ...], dict[str, Any], int]] = [
    (torch.sort, (), {}, 48),  # last dim n=4: (4-1).bit_length() = 2 comparisons per element: 24 x 2
    (torch.sort, (0,), {}, 24),  # dim 0, n=2: 1 comparison per element: 24 x 1
    (torch.argsort, (), {"dim": 1}, 48),  # dim 1, n=3: (3-1).bit_length() = 2: 24 x 2
    (torch.msort, (), {}, 24),  # msort sorts along dim 0, n=2: 1 comparison per element: 24 x 1
    (torch.topk, (2,), {}, 24),  # one pass over the input: I
    (torch.kthvalue, (2,), {}, 24),  # I
    (torch.histc, (), {"bins": 5}, 48),  # 2 per element (sub, mul): 2 x 24
    (torch.sum, (), {}, 24),  # I
    (torch.sum, (1,), {}, 24),  # I
    (torch.sum, (), {"dim": (0, 2), "keepdim": True}, 24),  # I
    (torch.nansum, (-1,), {}, 24),  # I
    (torch.prod, (1,), {}, 24),  # I
    (torch.amax, (-1,), {}, 24),  # I
    (torch.amin, (), {"dim": (0, 1)}, 24),  # I
    (torch.argmax, (), {}, 24),  # I
    (torch.argmin, (), {"dim": 1}, 24),  # I
    (torch.aminmax, (), {}, 48),  # 2I = 2 x 24
    (torch.aminmax, (), {"dim": 0}, 48),  # 2I
    (torch.cumsum, (0,), {}, 24),  # I
    (torch.cumprod, (), {"dim": 1}, 24),  # I
    (torch.cummax, (1,), {}, 24),  # I
    (torch.cummin, (2,), {}, 24),  # I
    (torch.logcumsumexp, (2,), {}, 96),  # 4I = 4 x 24
    (torch.mean, (), {}, 25),  # I + O = 24 + 1
    (torch.mean, (-1,), {}, 30),  # 24 + (2, 3) = 24 + 6
    (torch.mean, ((0, 1),), {"keepdim": True}, 28),  # 24 + (1, 1, 4) = 24 + 4
    (torch.nanmean, (), {"dim": 1}, 32),  # 24 + (2, 4) = 24 + 8
    (torch.var, (), {}, 97),  # 4I + O = 96 + 1
    (torch.var, (1,), {}, 104),  # 96 + 8
    (torch.std, (), {}, 98),  # 4I + 2O = 96 + 2
    (torch.std, (), {"dim": 1, "correction": 0}, 112),  # 96 + 2 x 8
    (torch.var_mean, (1,), {}, 104),  # 4I + O = 96 + 8
    (torch.std_mean, (), {"dim": 2}, 108),  # 4I + 2O = 96 + 2 x 6
    (torch.norm, (), {}, 49),  # 'fro': 2I + O = 48 + 1
    (torch.norm, (2,), {"dim": 1}, 56),  # 48 + 8
    (torch.norm, (), {"p": "fro", "dim": (1, 2)}, 50),  # 48 + 2
    (torch.norm, (1,), {}, 48),  # p = 1: 2I
    (torch.norm, (math.inf,), {"dim": 0}, 48),  # p = inf: 2I
    (torch.norm, (0,), {}, 48),  # p = 0: 2I (compare, add)
    (torch.norm, (3,), {"dim": 2}, 78),  # other p: 3I + O = 72 + 6
    (torch.linalg.vector_norm, (), {}, 49),  # ord 2: 2I + O = 48 + 1
    (torch.linalg.vector_norm, (), {"ord": 1, "dim": 0}, 48),  # ord 1: 2I
    (torch.linalg.vector_norm, (-math.inf,), {}, 48),  # ord -inf: 2I
    (torch.linalg.vector_norm, (3.0, (1, 2)), {}, 74),  # 3I + O = 72 + 2
    (torch.norm, ("nuc",), {"dim": (1, 2)}, 222),  # 2 x (singular values of 3 x 4, 108, + their sum, 3)
    (torch.linalg.norm, (), {}, 49),  # no ord, no dim: the vector 2-norm of all 24 elements, 48 + 1
    (torch.linalg.norm, (1,), {"dim": 2}, 48),  # a vector norm over one dim: ord 1, 2I
    (torch.linalg.norm, (), {"dim": (1, 2)}, 50),  # 'fro' of 2 matrices of 3 x 4: 2 x (24 + 1)
    # the nuclear norm of 2 matrices 3 x 4 (linalg.matrix_norm_count): the singular values,
    # 4Mk^2 - 4k^3/3 = 144 - 36 = 108, + their sum (3), 2 x 111
    (torch.linalg.norm, ("nuc", (1, 2)), {}, 222),
    (torch.logsumexp, (1,), {}, 112),  # 4I + 2O = 96 + 2 x 8
    (torch.special.logsumexp, (), {"dim": -1}, 108),  # 96 + 2 x 6
    (torch.median, (), {}, 24),  # I
    (torch.median, (1,), {}, 24),  # I
    (torch.nanmedian, (), {"dim": 0}, 24),  # I
    (torch.mode, (), {}, 24),  # I: one pass over the sorted values of each row
    (torch.all, (), {}, 24),  # float input: I compares with 0
    (torch.any, (1,), {}, 24),  # I
    (torch.count_nonzero, (), {}, 24),  # I
    (torch.count_nonzero, (), {"dim": 2}, 24),  # I
    (torch.max, (), {}, 24),  # reduction: I
    (torch.max, (1,), {}, 24),  # (values, indices): I
    (torch.max, (), {"dim": 2, "keepdim": True}, 24),  # I
    (torch.min, (0,), {}, 24),  # I
    (torch.min, (), {}, 24),  # I
]

# Keys whose function has a different __name__ from the torch attribute.
NAME_OF = {torch.linalg.vector_norm: "linalg_vector_norm", torch.special.logsumexp: "special_logsumexp",
           torch.linalg.norm: "linalg_norm"}


@pytest.mark.parametrize("fn,args,kwargs,expected", FUNCTION_CASES,
                         ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(FUNCTION_CASES)])
def test_function(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], expected: int) -> None:
    assert fn.__name__ == NAME_OF.get(fn, fn.__name__)
    x = _x()
    out = fn(x, *args, **kwargs)
    assert FUNCTION_FLOPs_MAPPING[fn.__name__](out, x, *args, **kwargs) == (expected, 0)


def test_function_input_as_keyword() -> None:
    x = _x()
    out = torch.sum(input=x, dim=1)
    assert FUNCTION_FLOPs_MAPPING["sum"](out, input=x, dim=1) == (24, 0)  # I
    out = torch.mean(input=x, dim=1)
    assert FUNCTION_FLOPs_MAPPING["mean"](out, input=x, dim=1) == (32, 0)  # 24 + 8
    out = torch.norm(input=x, p=1)
    assert FUNCTION_FLOPs_MAPPING["norm"](out, input=x, p=1) == (48, 0)  # 2I
    out = torch.linalg.vector_norm(x=x, ord=2, dim=0)  # the first parameter is x= or input=
    assert FUNCTION_FLOPs_MAPPING["linalg_vector_norm"](out, x=x, ord=2, dim=0) == (60, 0)  # 48 + 12
    out = torch.linalg.vector_norm(input=x)
    assert FUNCTION_FLOPs_MAPPING["linalg_vector_norm"](out, input=x) == (49, 0)  # 48 + 1
    out = torch.max(input=x, dim=0)
    assert FUNCTION_FLOPs_MAPPING["max"](out, input=x, dim=0) == (24, 0)  # I
    out = torch.var_mean(input=x, dim=0)
    assert FUNCTION_FLOPs_MAPPING["var_mean"](out, input=x, dim=0) == (108, 0)  # 96 + 12


def test_function_meta_matches_cpu() -> None:
    x = _x("meta")
    for fn, args, kwargs, expected in FUNCTION_CASES:
        out = fn(x, *args, **kwargs)
        assert FUNCTION_FLOPs_MAPPING[fn.__name__](out, x, *args, **kwargs) == (expected, 0), fn


def test_max_min_elementwise_vs_reduction() -> None:
    x, y = _x(), _y()
    # elementwise max(a, b): 1 per output element = 24
    assert FUNCTION_FLOPs_MAPPING["max"](torch.max(x, y), x, y) == (24, 0)
    assert FUNCTION_FLOPs_MAPPING["min"](torch.min(x, other=y), x, other=y) == (24, 0)
    # broadcast (2, 3, 4) with (4,): out 24 elements
    assert FUNCTION_FLOPs_MAPPING["max"](torch.max(x, y[0, 0]), x, y[0, 0]) == (24, 0)
    # broadcast (3, 1) with (4,): out (3, 4) = 12 elements, although each input is smaller
    a, b = torch.randn(3, 1), torch.randn(4)
    assert FUNCTION_FLOPs_MAPPING["max"](torch.max(a, b), a, b) == (12, 0)
    # reduction max(x, dim): I = 24 (not O = 6)
    assert FUNCTION_FLOPs_MAPPING["max"](torch.max(x, 1), x, 1) == (24, 0)
    # methods: a.max(b) elementwise 24; a.max(dim=1) reduction 24; a.min() 24
    assert METHOD_FLOPs_MAPPING["max"](x, x.max(y), y) == (24, 0)
    assert METHOD_FLOPs_MAPPING["max"](x, x.max(dim=1), dim=1) == (24, 0)
    assert METHOD_FLOPs_MAPPING["min"](a, a.min(b), b) == (12, 0)  # (3, 4) = 12
    # integer data: 0 either way
    i, j = torch.arange(24).reshape(SHAPE), torch.ones(SHAPE, dtype=torch.int64)
    assert FUNCTION_FLOPs_MAPPING["max"](torch.max(i, j), i, j) == (0, 0)
    assert FUNCTION_FLOPs_MAPPING["max"](torch.max(i), i) == (0, 0)


def test_int_tensors_give_zero() -> None:
    i = torch.arange(24).reshape(SHAPE)
    b = i > 3
    assert FUNCTION_FLOPs_MAPPING["sum"](torch.sum(i), i) == (0, 0)
    assert FUNCTION_FLOPs_MAPPING["cumsum"](torch.cumsum(i, 0), i, 0) == (0, 0)
    assert FUNCTION_FLOPs_MAPPING["argmax"](torch.argmax(i), i) == (0, 0)
    assert FUNCTION_FLOPs_MAPPING["all"](torch.all(b), b) == (0, 0)
    assert FUNCTION_FLOPs_MAPPING["any"](torch.any(i, 1), i, 1) == (0, 0)
    assert FUNCTION_FLOPs_MAPPING["count_nonzero"](torch.count_nonzero(i), i) == (0, 0)
    assert METHOD_FLOPs_MAPPING["sum"](i, i.sum()) == (0, 0)
    # integer input summed in float: 24 float adds
    out = torch.sum(i, dtype=torch.float32)
    assert FUNCTION_FLOPs_MAPPING["sum"](out, i, dtype=torch.float32) == (24, 0)


# --------------------------------------------------------------------------- #
# Methods: (name, args, kwargs, expected)
# --------------------------------------------------------------------------- #

METHOD_CASES: list[tuple[str, tuple[Any, ...], dict[str, Any], int]] = [
    ("sort", (), {"descending": True}, 48),  # n=4 along the last dim: 24 x 2
    ("argsort", (0,), {}, 24),  # n=2: 24 x 1
    ("msort", (), {}, 24),  # along dim 0 (n=2): 24 x 1
    ("topk", (3,), {"dim": 1}, 24),  # I
    ("kthvalue", (1,), {}, 24),  # I
    ("histc", (), {}, 48),  # 2I
    ("sum", (), {}, 24),  # I
    ("sum", (1,), {"keepdim": True}, 24),  # I
    ("nansum", (), {}, 24),  # I
    ("prod", (2,), {}, 24),  # I
    ("max", (), {}, 24),  # I
    ("max", (1,), {}, 24),  # I
    ("min", (), {"dim": 0}, 24),  # I
    ("amax", (1,), {}, 24),  # I
    ("amin", (), {}, 24),  # I
    ("argmax", (), {"dim": -1}, 24),  # I
    ("argmin", (), {}, 24),  # I
    ("aminmax", (), {}, 48),  # 2I
    ("cumsum", (1,), {}, 24),  # I
    ("cumsum_", (1,), {}, 24),  # I, in place
    ("cumprod", (), {"dim": 0}, 24),  # I
    ("cumprod_", (0,), {}, 24),  # I, in place
    ("cummax", (2,), {}, 24),  # I
    ("cummin", (0,), {}, 24),  # I
    ("logcumsumexp", (1,), {}, 96),  # 4I
    ("mean", (), {}, 25),  # 24 + 1
    ("mean", ((1, 2),), {}, 26),  # 24 + 2
    ("nanmean", (0,), {}, 36),  # 24 + (3, 4) = 24 + 12
    ("var", (), {"dim": 2}, 102),  # 96 + 6
    ("std", (1,), {}, 112),  # 96 + 2 x 8
    ("norm", (), {}, 49),  # 48 + 1
    ("norm", (1,), {}, 48),  # 2I
    ("norm", (), {"p": 2, "dim": 1}, 56),  # 48 + 8
    ("norm", ("nuc", (1, 2)), {}, 222),  # 2 x (singular values of 3 x 4, 108, + their sum, 3)
    ("logsumexp", (0,), {}, 120),  # 96 + 2 x 12
    ("median", (), {}, 24),  # I
    ("nanmedian", (1,), {}, 24),  # I
    ("mode", (1,), {}, 24),  # I
    ("all", (), {}, 24),  # I
    ("any", (), {"dim": 0}, 24),  # I
    ("count_nonzero", (1,), {}, 24),  # I
]


@pytest.mark.parametrize("name,args,kwargs,expected", METHOD_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(METHOD_CASES)])
def test_method(name: str, args: tuple[Any, ...], kwargs: dict[str, Any], expected: int) -> None:
    x = _x()
    out = getattr(x, name)(*args, **kwargs)
    assert METHOD_FLOPs_MAPPING[name](x, out, *args, **kwargs) == (expected, 0)


def test_method_meta_matches_cpu() -> None:
    x = _x("meta")
    for name, args, kwargs, expected in METHOD_CASES:
        out = getattr(x.clone(), name)(*args, **kwargs)
        assert METHOD_FLOPs_MAPPING[name](x, out, *args, **kwargs) == (expected, 0), name


def test_every_registered_key_is_tested() -> None:
    own = "torch_flops.formulas.reduction"
    assert {k for k, f in FUNCTION_FLOPs_MAPPING.items() if f.__module__ == own} \
        == {c[0].__name__ for c in FUNCTION_CASES} | {"bincount", "equal", "histogram"}  # (their own tests, below)
    assert {k for k, f in METHOD_FLOPs_MAPPING.items() if f.__module__ == own} \
        == {c[0] for c in METHOD_CASES} | {"bincount", "equal", "histogram"}
    # no nn module is a reduction
    assert not {k for k, f in MODULE_FLOPs_MAPPING.items() if f.__module__ == own}


def test_bincount_counts_an_add_per_weight() -> None:
    ids = torch.tensor([0, 2, 2, 5, 1, 2])
    weights = torch.randn(6)
    # out[ids[i]] += weights[i]: 6 float adds; without weights, integer counting: 0
    assert FUNCTION_FLOPs_MAPPING["bincount"](torch.bincount(ids, weights), ids, weights) == (6, 0)
    assert FUNCTION_FLOPs_MAPPING["bincount"](torch.bincount(ids), ids) == (0, 0)
    # (the method form: self, then the output)
    assert METHOD_FLOPs_MAPPING["bincount"](ids, ids.bincount(weights=weights, minlength=8), weights=weights,
                                            minlength=8) == (6, 0)
    counter = TorchFLOPsByFX(_Bincount())
    counter.propagate(ids, weights)
    assert counter.profile.total_flops == 6


def test_histogram_counts_bin_indices_searches_weights_and_density() -> None:
    x, w = _x(), _y()  # I = 24
    # 5 equal bins: 2 per element (as histc): 48; with weight, + 1 each: 72; density: + 3 x 5 bins: 87
    assert FUNCTION_FLOPs_MAPPING["histogram"](torch.histogram(x, 5), x, 5) == (48, 0)
    assert FUNCTION_FLOPs_MAPPING["histogram"](torch.histogram(x, 5, weight=w), x, 5, weight=w) == (72, 0)
    assert FUNCTION_FLOPs_MAPPING["histogram"](torch.histogram(x, bins=5, weight=w, density=True), x, bins=5,
                                               weight=w, density=True) == (87, 0)
    # 9 edges (8 bins): a binary search, (8).bit_length() = 4 comparisons per element: 96
    edges = torch.linspace(-3, 3, 9)
    assert METHOD_FLOPs_MAPPING["histogram"](x, x.histogram(edges), edges) == (96, 0)
    counter = TorchFLOPsByFX(_Histogram())
    counter.propagate(x)
    assert counter.profile.total_flops == 48 and not counter.profile.unsupported  # (was: no formula)


class _Histogram(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        return torch.histogram(x, 5)


class _Bincount(torch.nn.Module):
    def forward(self, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        return torch.bincount(ids, weights=weights, minlength=4)


def test_equal_compares_each_element() -> None:
    x = torch.randn(2, 3, 4)
    # torch.equal -> bool: one comparison per element, 24; integer data: 0
    assert FUNCTION_FLOPs_MAPPING["equal"](torch.equal(x, x), x, x) == (24, 0)
    assert METHOD_FLOPs_MAPPING["equal"](x, x.equal(x), x) == (24, 0)  # (self, the output, other)
    ints = torch.ones(5, dtype=torch.long)
    assert FUNCTION_FLOPs_MAPPING["equal"](torch.equal(ints, ints), ints, ints) == (0, 0)


def test_a_reduction_in_an_integer_dtype_is_integer_work() -> None:
    # torch casts the float input to dtype= first: integer adds, 0 (it counted 16 float adds each); the
    # float sum beside them: one add per input element, I = 16
    class Casts(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return torch.cumsum(x, dim=0, dtype=torch.int32), x.sum(dtype=torch.int64), x.sum()

    counter = TorchFLOPsByFX(Casts())
    with torch.no_grad():
        counter.propagate(torch.randn(16) * 10)
    assert [r.flops for r in counter.records if r.op in ("call_function", "call_method")] == [0, 0, 16]

"""Hand-derived FLOPs of the activation family (torch_flops/formulas/activation.py)."""

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

SHAPE = (2, 3, 4)  # 24 elements


def _x() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(SHAPE)


# --------------------------------------------------------------------------- #
# Modules: (module, expected FLOPs on a (2, 3, 4) input = 24 elements)
# --------------------------------------------------------------------------- #

MODULE_CASES: list[tuple[nn.Module, int]] = [
    (nn.ReLU(), 24),  # 24 x 1
    (nn.ReLU6(), 48),  # 24 x 2
    (nn.Hardtanh(), 48),  # 24 x 2
    (nn.LeakyReLU(0.1), 48),  # 24 x 2
    (nn.PReLU(), 48),  # 24 x 2
    (nn.RReLU(), 48),  # 24 x 2
    (nn.ELU(), 96),  # 24 x 4
    (nn.CELU(), 120),  # 24 x 5
    (nn.SELU(), 120),  # 24 x 5
    (nn.GELU(), 120),  # 24 x 5 (erf form)
    (nn.GELU(approximate="tanh"), 216),  # 24 x 9 (tanh form)
    (nn.SiLU(), 96),  # 24 x 4
    (nn.Mish(), 120),  # 24 x 5
    (nn.Sigmoid(), 72),  # 24 x 3
    (nn.LogSigmoid(), 96),  # 24 x 4
    (nn.Tanh(), 24),  # 24 x 1
    (nn.Softplus(beta=2.0), 120),  # 24 x 5
    (nn.Softsign(), 72),  # 24 x 3
    (nn.Hardswish(), 120),  # 24 x 5
    (nn.Hardsigmoid(), 96),  # 24 x 4
    (nn.Hardshrink(), 48),  # 24 x 2
    (nn.Softshrink(), 72),  # 24 x 3
    (nn.Tanhshrink(), 48),  # 24 x 2
    (nn.Threshold(0.1, 20.0), 24),  # 24 x 1
    (nn.GLU(), 48),  # out (2, 3, 2) = 12 elements x 4
    (nn.GLU(dim=1), 64),  # on a (2, 4, 4) input (MODULE_INPUT_SHAPES): out (2, 2, 4) = 16 x 4
    (nn.Softmax(dim=-1), 120),  # 24 x 5
    (nn.LogSoftmax(dim=1), 120),  # 24 x 5
    (nn.Softmin(dim=0), 144),  # 24 x 6
    (nn.Softmax2d(), 120),  # (3, 4) per channel of an unbatched (C=2, 3, 4) input: 24 x 5
]
# Inputs other than (2, 3, 4), by case index: GLU(dim=1) needs an even dim 1.
MODULE_INPUT_SHAPES = {25: (2, 4, 4)}

CLAIMED_MODULES = [
    "ReLU", "ReLU6", "LeakyReLU", "PReLU", "RReLU", "ELU", "CELU", "SELU", "GELU", "SiLU",
    "Mish", "Sigmoid", "LogSigmoid", "Tanh", "Softplus", "Softsign", "Hardswish", "Hardsigmoid",
    "Hardtanh", "Hardshrink", "Softshrink", "Tanhshrink", "Threshold", "GLU", "Softmax",
    "LogSoftmax", "Softmin", "Softmax2d",
]


def _module_input(i: int) -> torch.Tensor:
    torch.manual_seed(i)
    return torch.randn(MODULE_INPUT_SHAPES.get(i, SHAPE))


@pytest.mark.parametrize("i", range(len(MODULE_CASES)), ids=lambda i: type(MODULE_CASES[i][0]).__name__)
def test_module(i: int) -> None:
    mod, expected = MODULE_CASES[i]
    x = _module_input(i)
    out = mod(x)
    assert MODULE_FLOPs_MAPPING[type(mod).__name__](mod, out, x) == (expected, 0)


@pytest.mark.parametrize("i", range(len(MODULE_CASES)), ids=lambda i: type(MODULE_CASES[i][0]).__name__)
def test_module_meta_matches_cpu(i: int) -> None:
    mod, expected = MODULE_CASES[i]
    meta_mod = copy.deepcopy(mod).to("meta")
    x = _module_input(i).to("meta")
    out = meta_mod(x)
    assert out.is_meta
    assert MODULE_FLOPs_MAPPING[type(mod).__name__](meta_mod, out, x) == (expected, 0)


def test_module_input_as_keyword() -> None:
    mod = nn.ReLU()
    x = _x()
    out = mod(input=x)
    assert MODULE_FLOPs_MAPPING["ReLU"](mod, out, input=x) == (24, 0)  # 24 x 1


def test_claimed_modules_registered() -> None:
    for name in CLAIMED_MODULES:
        assert hasattr(nn, name), name
        assert name in MODULE_FLOPs_MAPPING, name


# --------------------------------------------------------------------------- #
# Functions: (key, function, extra args, kwargs, in-place, expected) on 24 elements
# --------------------------------------------------------------------------- #

FUNCTION_CASES: list[tuple[str, Any, tuple[Any, ...], dict[str, Any], int]] = [
    ("relu", F.relu, (), {}, 24),  # 24 x 1
    ("relu", torch.relu, (), {}, 24),  # 24 x 1
    ("relu_", torch.relu_, (), {}, 24),  # 24 x 1, in place
    ("relu_", F.relu_, (), {}, 24),  # 24 x 1, in place
    ("relu6", F.relu6, (), {}, 48),  # 24 x 2
    ("relu6_", torch._C._nn.relu6_, (), {}, 48),  # 24 x 2
    ("hardtanh", F.hardtanh, (-0.5, 0.5), {}, 48),  # 24 x 2
    ("hardtanh_", F.hardtanh_, (), {}, 48),  # 24 x 2
    ("leaky_relu", F.leaky_relu, (0.2,), {}, 48),  # 24 x 2
    ("leaky_relu_", F.leaky_relu_, (), {"negative_slope": 0.2}, 48),  # 24 x 2
    ("prelu", F.prelu, (torch.tensor([0.25]),), {}, 48),  # 24 x 2
    ("rrelu", F.rrelu, (), {"training": True}, 48),  # 24 x 2
    ("rrelu_", F.rrelu_, (), {}, 48),  # 24 x 2
    ("elu", F.elu, (), {"alpha": 0.5}, 96),  # 24 x 4
    ("elu_", F.elu_, (), {}, 96),  # 24 x 4
    ("celu", F.celu, (), {}, 120),  # 24 x 5
    ("celu_", F.celu_, (), {}, 120),  # 24 x 5
    ("selu", F.selu, (), {}, 120),  # 24 x 5
    ("selu_", F.selu_, (), {}, 120),  # 24 x 5
    ("gelu", F.gelu, (), {}, 120),  # 24 x 5 (approximate='none')
    ("gelu", F.gelu, (), {"approximate": "none"}, 120),  # 24 x 5
    ("gelu", F.gelu, (), {"approximate": "tanh"}, 216),  # 24 x 9
    ("gelu_", torch._C._nn.gelu_, (), {"approximate": "tanh"}, 216),  # 24 x 9
    ("silu", F.silu, (), {}, 96),  # 24 x 4
    ("silu_", torch._C._nn.silu_, (), {}, 96),  # 24 x 4
    ("sigmoid", torch.sigmoid, (), {}, 72),  # 24 x 3
    ("sigmoid", F.sigmoid, (), {}, 72),  # 24 x 3
    ("sigmoid_", torch.sigmoid_, (), {}, 72),  # 24 x 3
    ("special_expit", torch.special.expit, (), {}, 72),  # 24 x 3
    ("log_sigmoid", F.logsigmoid, (), {}, 96),  # 24 x 4
    ("tanh", torch.tanh, (), {}, 24),  # 24 x 1
    ("tanh", F.tanh, (), {}, 24),  # 24 x 1
    ("tanh_", torch.tanh_, (), {}, 24),  # 24 x 1
    ("mish", F.mish, (), {}, 120),  # 24 x 5
    ("mish_", torch._C._nn.mish_, (), {}, 120),  # 24 x 5
    ("softplus", F.softplus, (), {"beta": 2.0}, 120),  # 24 x 5
    ("softsign", F.softsign, (), {}, 72),  # 24 x 3
    ("hardswish", F.hardswish, (), {}, 120),  # 24 x 5
    ("hardswish_", torch._C._nn.hardswish_, (), {}, 120),  # 24 x 5
    ("hardsigmoid", F.hardsigmoid, (), {}, 96),  # 24 x 4
    ("hardsigmoid_", torch._C._nn.hardsigmoid_, (), {}, 96),  # 24 x 4
    ("hardshrink", F.hardshrink, (), {}, 48),  # 24 x 2
    ("softshrink", F.softshrink, (0.5,), {}, 72),  # 24 x 3
    ("tanhshrink", F.tanhshrink, (), {}, 48),  # 24 x 2
    ("_threshold", F.threshold, (0.1, 0.0), {}, 24),  # 24 x 1
    ("threshold", torch.threshold, (0.1, 0.0), {}, 24),  # 24 x 1
    ("threshold_", F.threshold_, (0.1, 0.0), {}, 24),  # 24 x 1
    ("glu", F.glu, (), {}, 48),  # out (2, 3, 2) = 12 x 4
    ("softmax", F.softmax, (-1,), {}, 120),  # 24 x 5
    ("softmax", torch.softmax, (), {"dim": 1}, 120),  # 24 x 5
    ("special_softmax", torch.special.softmax, (0,), {}, 120),  # 24 x 5
    ("log_softmax", F.log_softmax, (), {"dim": -1}, 120),  # 24 x 5
    ("log_softmax", torch.log_softmax, (2,), {}, 120),  # 24 x 5
    ("special_log_softmax", torch.special.log_softmax, (1,), {}, 120),  # 24 x 5
    ("softmin", F.softmin, (), {"dim": -1}, 144),  # 24 x 6
]


@pytest.mark.parametrize("key,fn,args,kwargs,expected", FUNCTION_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(FUNCTION_CASES)])
def test_function(key: str, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], expected: int) -> None:
    assert fn.__name__ == key  # the key is what fx records as the target's __name__
    x = _x()
    out = fn(x, *args, **kwargs)
    assert FUNCTION_FLOPs_MAPPING[key](out, x, *args, **kwargs) == (expected, 0)


def test_function_input_as_keyword() -> None:
    x = _x()
    out = F.softmax(input=x, dim=-1)
    assert FUNCTION_FLOPs_MAPPING["softmax"](out, input=x, dim=-1) == (120, 0)  # 24 x 5
    out = F.gelu(input=x, approximate="tanh")
    assert FUNCTION_FLOPs_MAPPING["gelu"](out, input=x, approximate="tanh") == (216, 0)  # 24 x 9


def test_function_softmax_int_input_with_float_dtype_counts() -> None:
    x = torch.arange(24).reshape(SHAPE)
    out = torch.softmax(x, -1, dtype=torch.float32)
    assert FUNCTION_FLOPs_MAPPING["softmax"](out, x, -1, dtype=torch.float32) == (120, 0)  # 24 x 5


def test_function_meta_matches_cpu() -> None:
    x = _x()
    xm = x.to("meta")
    for key, fn, args, kwargs, expected in FUNCTION_CASES:
        margs = tuple(a.to("meta") if isinstance(a, torch.Tensor) else a for a in args)
        out = fn(xm.clone(), *margs, **kwargs)
        assert FUNCTION_FLOPs_MAPPING[key](out, xm, *margs, **kwargs) == (expected, 0), key


# --------------------------------------------------------------------------- #
# Methods: (name, args, kwargs, expected) on 24 elements
# --------------------------------------------------------------------------- #

METHOD_CASES: list[tuple[str, tuple[Any, ...], dict[str, Any], int]] = [
    ("relu", (), {}, 24),  # 24 x 1
    ("relu_", (), {}, 24),  # 24 x 1
    ("prelu", (torch.tensor([0.25]),), {}, 48),  # 24 x 2
    ("sigmoid", (), {}, 72),  # 24 x 3
    ("sigmoid_", (), {}, 72),  # 24 x 3
    ("tanh", (), {}, 24),  # 24 x 1
    ("tanh_", (), {}, 24),  # 24 x 1
    ("hardshrink", (0.3,), {}, 48),  # 24 x 2
    ("softmax", (-1,), {}, 120),  # 24 x 5
    ("softmax", (), {"dim": 0}, 120),  # 24 x 5
    ("log_softmax", (1,), {}, 120),  # 24 x 5
]


@pytest.mark.parametrize("name,args,kwargs,expected", METHOD_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(METHOD_CASES)])
def test_method(name: str, args: tuple[Any, ...], kwargs: dict[str, Any], expected: int) -> None:
    x = _x()
    out = getattr(x, name)(*args, **kwargs)
    assert METHOD_FLOPs_MAPPING[name](x, out, *args, **kwargs) == (expected, 0)


# --------------------------------------------------------------------------- #
# Non-floating data, and every registered key is exercised above
# --------------------------------------------------------------------------- #

def test_int_tensors_give_zero() -> None:
    x = torch.arange(-12, 12).reshape(SHAPE)
    assert MODULE_FLOPs_MAPPING["ReLU"](nn.ReLU(), torch.relu(x), x) == (0, 0)
    assert FUNCTION_FLOPs_MAPPING["relu"](F.relu(x), x) == (0, 0)
    assert METHOD_FLOPs_MAPPING["relu"](x, x.relu()) == (0, 0)
    assert FUNCTION_FLOPs_MAPPING["_threshold"](F.threshold(x, 1, 0), x, 1, 0) == (0, 0)
    assert FUNCTION_FLOPs_MAPPING["hardtanh"](F.hardtanh(x), x) == (0, 0)


def _own_keys(table: dict[str, Any]) -> set[str]:
    return {k for k, f in table.items() if getattr(f, "__module__", "") == "torch_flops.formulas.activation"}


def test_every_registered_key_is_tested() -> None:
    assert _own_keys(MODULE_FLOPs_MAPPING) == set(CLAIMED_MODULES)
    assert {type(m).__name__ for m, _ in MODULE_CASES} == set(CLAIMED_MODULES)
    assert _own_keys(FUNCTION_FLOPs_MAPPING) == {c[0] for c in FUNCTION_CASES}
    assert _own_keys(METHOD_FLOPs_MAPPING) == {c[0] for c in METHOD_CASES}

"""Hand-derived FLOPs of elementwise arithmetic, clamp, dropout (torch_flops/formulas/elementwise.py)
and of upsampling / interpolation (torch_flops/formulas/resample.py), whose cost is per output
element too. Elementwise work has no MACs, so FlopCounterMode counts none of it."""

from __future__ import annotations

import operator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torch_flops
from torch_flops.formulas import FORMULAS, FUNCTION_FLOPs_MAPPING, METHOD_FLOPs_MAPPING, MODULE_FLOPs_MAPPING
from torch_flops.formulas import elementwise as elementwise_module
from torch_flops.formulas.elementwise import div_flops, elementwise_flops, mul_flops


def _randn(*shape: int) -> torch.Tensor:
    torch.manual_seed(len(shape) + sum(shape))
    return torch.randn(shape)


def _fn(name: str, out: Any, *args: Any, **kwargs: Any) -> Any:
    return FUNCTION_FLOPs_MAPPING[name](out, *args, **kwargs)


def _method(name: str, out: Any, self: Any, *args: Any, **kwargs: Any) -> Any:
    return METHOD_FLOPs_MAPPING[name](self, out, *args, **kwargs)  # the original's order: self, out, args


# --------------------------------------------------------------------------- #
# arithmetic: float counts, int and bool do not, broadcasting counts outputs
# --------------------------------------------------------------------------- #

def test_broadcast_add_counts_output_elements() -> None:
    x, y = _randn(4, 1), _randn(1, 5)
    out = operator.add(x, y)  # what fx records for `x + y`
    assert _fn(operator.add.__name__, out, x, y) == 20  # (4,1) + (1,5) -> (4,5): 20 adds
    assert _method("add", x.add(y), x, y) == 20
    assert _method("__radd__", y.__radd__(x), y, x) == 20


def test_scalar_operands() -> None:
    x = _randn(3, 4)
    assert _fn("mul", 2 * x, 2, x) == 12  # operator.mul(2, x): the first *tensor* input decides
    assert _fn("truediv", x / 3, x, 3) == 12
    assert _method("__rsub__", x.__rsub__(1.0), x, 1.0) == 12


def test_add_with_alpha_counts_the_scale() -> None:
    x, y = _randn(3, 4), _randn(3, 4)
    assert _fn("add", torch.add(x, y, alpha=2), x, y, alpha=2) == 24  # 12 multiplies + 12 adds
    assert _fn("sub", torch.sub(x, y, alpha=2), x, y, alpha=2) == 24


def test_inplace_operator() -> None:
    x, y = _randn(4, 5), _randn(1, 5)
    out = operator.iadd(x, y)  # `x += y`: 20 adds into x
    assert _fn("iadd", out, x, y) == 20
    z = _randn(4, 5)
    assert _method("mul_", z.mul_(2.0), z, 2.0) == 20


def test_integer_and_boolean_data_are_free() -> None:
    i = torch.arange(6)
    assert _fn("add", i + 1, i, 1) == 0  # integer index arithmetic
    assert _fn("floordiv", i // 2, i, 2) == 0
    assert _fn("lt", i < 3, i, 3) == 0  # a comparison of ints
    b1, b2 = i < 3, i > 1
    assert _fn("logical_and", torch.logical_and(b1, b2), b1, b2) == 0  # mask logic
    assert _fn("logical_not", torch.logical_not(b1), b1) == 0
    # an integer tensor divided truly becomes float: the 6 divides are floating point work
    assert _fn("truediv", i / 2, i, 2) == 6


def test_float_comparisons_count() -> None:
    x, y = _randn(3, 4), _randn(3, 4)
    assert _fn("lt", x < 0.5, x, 0.5) == 12  # bool out, float input: 12 compares
    assert _fn("eq", torch.eq(x, y), x, y) == 12
    assert _method("ge", x.ge(y), x, y) == 12
    assert _fn("isnan", torch.isnan(x), x) == 12
    assert _fn("logical_and", torch.logical_and(x, y), x, y) == 12  # of floats: each is a compare to 0


@pytest.mark.parametrize("name", ["and_", "or_", "xor", "invert", "bitwise_and", "bitwise_not"])
def test_boolean_mask_logic_is_zero(name: str) -> None:
    b1, b2 = torch.arange(6) < 3, torch.arange(6) > 1
    args = (b1,) if name in ("invert", "bitwise_not") else (b1, b2)
    fn = getattr(operator, name, None) or getattr(torch, name)
    out = fn(*args)
    assert _fn(name, out, *args) in (0, (0, 0))


def test_unary() -> None:
    x = _randn(2, 3)
    assert _fn("exp", torch.exp(x), x) == 6  # a transcendental is 1 FLOP
    assert _method("sqrt", x.abs().sqrt(), x.abs()) == 6
    assert _fn("neg", -x, x) == 6  # operator.neg
    assert _method("__neg__", x.__neg__(), x) == 6


def test_every_listed_name_maps_to_the_elementwise_formula() -> None:
    # one formula object behind every front door of these names (the views adapt it to their
    # historical convention, so compare in the one table)
    # (multiply and divide have formulas of their own, which differ only for complex data)
    own = {**dict.fromkeys(["mul", "multiply", "imul", "__rmul__", "mul_", "multiply_"], mul_flops),
           **dict.fromkeys(["div", "divide", "true_divide", "truediv", "itruediv", "__rtruediv__", "div_", "divide_",
                            "true_divide_"], div_flops)}
    for name in elementwise_module._UNARY_BINARY + elementwise_module._OPERATORS:
        assert FORMULAS.formula_named("function", name) is own.get(name, elementwise_flops), name
    for name in elementwise_module._UNARY_BINARY + elementwise_module._INPLACE + elementwise_module._METHOD_ONLY:
        assert FORMULAS.formula_named("method", name) is own.get(name, elementwise_flops), name
    assert FORMULAS.resolve_function(torch.mul) is FORMULAS.resolve_method("mul_") is mul_flops
    assert FORMULAS.resolve_aten(torch.ops.aten.mul.Tensor) is mul_flops
    assert FORMULAS.resolve_function(torch.exp) is FORMULAS.resolve_aten(torch.ops.aten.exp.default) is elementwise_flops


def test_non_tensor_output_is_free() -> None:
    assert _fn("mul", 6, 2, 3) == 0  # size arithmetic on Python ints


# --------------------------------------------------------------------------- #
# where, masked_fill, addcmul/addcdiv/lerp
# --------------------------------------------------------------------------- #

def test_where_broadcasts() -> None:
    cond, x = _randn(4, 1) > 0, _randn(1, 5)
    out = torch.where(cond, x, 0.0)  # (4, 5): one select per output
    assert _fn("where", out, cond, x, 0.0) == 20
    assert _method("where", x.where(cond, 0.0), x, cond, 0.0) == 20
    i = torch.arange(5)
    assert _fn("where", torch.where(cond, i, 0), cond, i, 0) == 0  # integer data


def test_masked_fill() -> None:
    x = _randn(3, 4)
    mask = x > 0
    assert _fn("masked_fill", x.masked_fill(mask, 0.0), x, mask, 0.0) == 12
    assert _method("masked_fill", x.masked_fill(mask, 0.0), x, mask, 0.0) == 12
    y = x.clone()
    assert _method("masked_fill_", y.masked_fill_(mask, 0.0), y, mask, 0.0) == 12


@pytest.mark.parametrize("name", ["addcmul", "addcdiv"])
def test_addcmul_addcdiv(name: str) -> None:
    x, a, b = _randn(2, 3), _randn(2, 3), _randn(2, 3).abs() + 1
    out = getattr(torch, name)(x, a, b, value=0.5)
    assert _fn(name, out, x, a, b, value=0.5) == 18  # x + v * (a op b): 3 per element, 6 elements
    assert _method(name, getattr(x, name)(a, b), x, a, b) == 18


def test_lerp() -> None:
    x, y = _randn(2, 3), _randn(2, 3)
    assert _fn("lerp", torch.lerp(x, y, 0.3), x, y, 0.3) == 18  # x + w * (y - x): 3 per element


# --------------------------------------------------------------------------- #
# clamp
# --------------------------------------------------------------------------- #

def test_clamp_counts_one_compare_per_bound() -> None:
    x = _randn(3, 4)
    assert _fn("clamp", torch.clamp(x, min=-0.5), x, min=-0.5) == 12  # one bound: 12 compares
    assert _fn("clamp", torch.clamp(x, max=0.5), x, max=0.5) == 12
    assert _fn("clamp", torch.clamp(x, None, 0.5), x, None, 0.5) == 12
    assert _fn("clamp", torch.clamp(x, -0.5, 0.5), x, -0.5, 0.5) == 24  # two bounds: 24
    assert _fn("clip", torch.clip(x, -0.5, 0.5), x, -0.5, 0.5) == 24
    assert _method("clamp", x.clamp(min=-0.5, max=0.5), x, min=-0.5, max=0.5) == 24
    lo, hi = _randn(3, 4), _randn(3, 4) + 2
    assert _fn("clamp", torch.clamp(x, lo, hi), x, lo, hi) == 24  # tensor bounds
    assert _fn("clamp_min", torch.clamp_min(x, 0.0), x, 0.0) == 12
    y = x.clone()
    assert _method("clamp_max_", y.clamp_max_(0.0), y, 0.0) == 12
    i = torch.arange(6)
    assert _fn("clamp", torch.clamp(i, 1, 4), i, 1, 4) == 0  # integer data


# --------------------------------------------------------------------------- #
# dropout
# --------------------------------------------------------------------------- #

def test_dropout_module_train_vs_eval() -> None:
    x = _randn(3, 4)
    m = nn.Dropout(0.5)
    assert MODULE_FLOPs_MAPPING["Dropout"](m.train(), m(x), x) == 24  # mask multiply + rescale: 2 * 12
    assert MODULE_FLOPs_MAPPING["Dropout"](m.eval(), m(x), x) == 0
    m0 = nn.Dropout(0.0).train()
    assert MODULE_FLOPs_MAPPING["Dropout"](m0, m0(x), x) == 0  # p = 0 is the identity
    x4 = _randn(2, 3, 4, 4)
    m2 = nn.Dropout2d(0.2).train()
    assert MODULE_FLOPs_MAPPING["Dropout2d"](m2, m2(x4), x4) == 192  # 2 * 96


def test_functional_dropout() -> None:
    x = _randn(3, 4)
    assert _fn("dropout", F.dropout(x, 0.2), x, 0.2) == 24  # training=True by default: 2 * 12
    assert _fn("dropout", F.dropout(x, p=0.2), x, p=0.2) == 24
    assert _fn("dropout", F.dropout(x), x) == 24  # p = 0.5 by default
    assert _fn("dropout", F.dropout(x, 0.2, False), x, 0.2, False) == 0
    assert _fn("dropout", F.dropout(x, 0.2, training=False), x, 0.2, training=False) == 0
    assert _fn("dropout", F.dropout(x, p=0.0), x, p=0.0) == 0
    assert _fn("dropout", torch.dropout(x, 0.2, True), x, 0.2, True) == 24  # torch.dropout(input, p, train)


# --------------------------------------------------------------------------- #
# interpolate / Upsample (resample.py)
# --------------------------------------------------------------------------- #

X4 = (2, 3, 4, 4)


@pytest.mark.parametrize(
    ("mode", "flops"),
    [
        ("nearest", 0),  # a copy
        ("nearest-exact", 0),
        ("bilinear", 3456),  # out (2,3,8,8) = 384 outputs * 3 lerps of 3 FLOPs = 384 * 9
        ("bicubic", 13440),  # 384 * 35: 5 cubic interpolations of 4 mul + 3 add
        ("area", 384),  # 2x upsampling: every window is 1 input -> 1 per output
    ],
)
def test_interpolate_2d(mode: str, flops: int) -> None:
    x = _randn(*X4)
    out = F.interpolate(x, scale_factor=2, mode=mode)
    assert out.shape == (2, 3, 8, 8)
    assert _fn("interpolate", out, x, scale_factor=2, mode=mode) == flops
    assert _fn("interpolate", out, x, None, 2, mode) == flops  # interpolate(input, size, scale_factor, mode)


def test_interpolate_1d_3d_and_default_mode() -> None:
    x = _randn(2, 3, 4)
    out = F.interpolate(x, scale_factor=2, mode="linear")  # (2, 3, 8) = 48 outputs
    assert _fn("interpolate", out, x, scale_factor=2, mode="linear") == 144  # 48 * 3
    x = _randn(1, 2, 2, 2, 2)
    out = F.interpolate(x, scale_factor=2, mode="trilinear")  # (1, 2, 4, 4, 4) = 128 outputs
    assert _fn("interpolate", out, x, scale_factor=2, mode="trilinear") == 2688  # 128 * 7 lerps * 3
    x = _randn(*X4)
    assert _fn("interpolate", F.interpolate(x, scale_factor=2), x, scale_factor=2) == 0  # nearest


def _brute_area_window_total(in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> int:
    # Enumerate every output cell and every input cell; count the pairs whose scaled spans overlap:
    # input j of dim d lies in output i's window iff i*I < (j+1)*O and j*O < (i+1)*I.
    def inside(i: int, j: int, size_in: int, size_out: int) -> bool:
        return i * size_in < (j + 1) * size_out and j * size_out < (i + 1) * size_in

    (h, w), (oh, ow) = in_shape, out_shape
    return sum(
        1
        for i in range(oh) for k in range(ow)
        for j in range(h) for m in range(w)
        if inside(i, j, h, oh) and inside(k, m, w, ow)
    )


@pytest.mark.parametrize(("in_hw", "out_hw"), [((7, 5), (3, 2)), ((5, 7), (3, 4)), ((3, 3), (5, 2))])
def test_interpolate_area_non_divisible(in_hw: tuple[int, int], out_hw: tuple[int, int]) -> None:
    x = _randn(2, 3, *in_hw)
    out = F.interpolate(x, size=out_hw, mode="area")
    windows = _brute_area_window_total(in_hw, out_hw)
    # the real windows of ATen: pool one-hot images and count the outputs each input reaches
    one_hot = torch.eye(in_hw[0] * in_hw[1]).reshape(-1, 1, *in_hw)
    assert int((F.interpolate(one_hot, size=out_hw, mode="area") != 0).sum()) == windows
    # one add per window element (K - 1 adds + 1 divide per output), per (N, C) = 6 slices
    assert _fn("interpolate", out, x, size=out_hw, mode="area") == 6 * windows


def test_interpolate_area_by_hand() -> None:
    x = _randn(2, 3, 7, 5)
    out = F.interpolate(x, size=(3, 2), mode="area")
    # rows 7 -> 3: [0,3) [2,5) [4,7) = 9; cols 5 -> 2: [0,3) [2,5) = 6; 9 * 6 = 54 per slice; * 6 slices
    assert _fn("interpolate", out, x, size=(3, 2), mode="area") == 324


@pytest.mark.parametrize(
    ("module", "flops"),
    [
        (lambda: nn.Upsample(scale_factor=2, mode="bilinear"), 3456),  # 384 * 9
        (lambda: nn.Upsample(scale_factor=2), 0),  # nearest
        (lambda: nn.Upsample(scale_factor=2, mode="bicubic", align_corners=True), 13440),  # 384 * 35
        (lambda: nn.UpsamplingNearest2d(scale_factor=2), 0),
        (lambda: nn.UpsamplingBilinear2d(scale_factor=2), 3456),
        # 4 -> 3: [0,2) [1,3) [2,4) = 6; 4 -> 2: [0,2) [2,4) = 4; 6 * 4 = 24 per slice * 6 slices
        (lambda: nn.Upsample(size=(3, 2), mode="area"), 144),
    ],
)
def test_upsample_modules(module: Any, flops: int) -> None:
    m = module()
    x = _randn(*X4)
    out = m(x)
    assert MODULE_FLOPs_MAPPING[type(m).__name__](m, out, x) == flops


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_deprecated_upsample_functions() -> None:
    x = _randn(*X4)
    assert _fn("upsample", F.upsample(x, scale_factor=2, mode="bilinear"), x, scale_factor=2,
               mode="bilinear") == 3456
    assert _fn("upsample_nearest", F.upsample_nearest(x, scale_factor=2), x, scale_factor=2) == (0, 0)  # a copy
    assert _fn("upsample_bilinear", F.upsample_bilinear(x, scale_factor=2), x, scale_factor=2) == 3456


def test_unknown_interpolate_mode_raises() -> None:
    x = _randn(*X4)
    with pytest.raises(NotImplementedError, match="no formula"):
        _fn("interpolate", x, x, mode="cubic-spline")


def test_complex_elementwise_counts_real_flops() -> None:
    a, b = torch.randn(2, 3, dtype=torch.complex64), torch.randn(2, 3, dtype=torch.complex64)
    # 6 complex elements: add 2 real FLOPs each, multiply 6, divide 11, anything else 2
    assert _fn("add", a + b, a, b) == 12
    assert _fn("mul", a * b, a, b) == 36
    assert _fn("div", a / b, a, b) == 66
    assert _fn("exp", a.exp(), a) == 12
    assert _fn("add", torch.add(a, b, alpha=2), a, b, alpha=2) == 6 * (2 + 6)  # + a complex alpha multiply
    assert _method("sum", a.sum(), a) == (12, 0)  # 6 complex adds
    real = torch.randn(2, 3)
    assert _fn("mul", real * real, real, real) == 6  # real data unchanged


@pytest.mark.parametrize("index", ["rows", "mask"])
def test_index_put_accumulating_a_broadcast_value_adds_into_every_element_it_writes(index: str) -> None:
    # y (6, 8); a scalar added (accumulate=True) into rows 0..5 (6 x 8 = 48 elements) or under a mask of
    # 20 True elements: 48 or 20 adds (it counted the value's 1 element); y * 1.0 before it: 48
    class Put(nn.Module):
        def forward(self, y: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
            return (y * 1.0).index_put_((idx,), torch.tensor(1.0), accumulate=True)

    idx = torch.arange(6) if index == "rows" else torch.arange(48).reshape(6, 8) % 12 < 5  # 4 x 5 = 20 True
    with torch.no_grad():
        p = torch_flops.profile(Put(), torch.zeros(6, 8), idx)
    assert p.total_flops == 48 + (48 if index == "rows" else 20)


def test_scatter_add_adds_one_source_element_per_index_element() -> None:
    # scatter_add(y (4, 5), 1, index (2, 3), src (4, 5)): only src[:2, :3] is read, 6 adds (it counted
    # src's 20 elements)
    class Scatter(nn.Module):
        def forward(self, y: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
            return y.scatter_add(1, index, src)

    p = torch_flops.profile(Scatter(), torch.zeros(4, 5), torch.tensor([[0, 1, 2], [2, 3, 4]]), torch.ones(4, 5))
    assert p.total_flops == 6

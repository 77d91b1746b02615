"""Elementwise arithmetic: one FLOP per output element per arithmetic step, for floating point
data only (``_shapes.float_numel``). ``torch.*``, ``operator.*`` (``x + y``, ``x += 1``), Tensor
methods with their in-place ``_`` forms and the aten ops share these formulas. Complex data counts
real FLOPs (``_shapes.COMPLEX_*``): add/sub 2, multiply 6, divide 11, any other elementwise op 2
(one per component). Dropout lives here too: it is an elementwise mask multiply while active and
free otherwise."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from torch_flops.formulas import aten_ops, functions, methods, register
from torch_flops.formulas._shapes import (
    COMPLEX_ADD,
    COMPLEX_DIV,
    COMPLEX_MUL,
    COMPLEX_OTHER,
    arg,
    complex_factor,
    float_numel,
    numel,
    prod,
)

__all__ = ["add_flops", "clamp_flops", "div_flops", "dropout_flops", "elementwise_flops", "mul_flops"]

# One arithmetic step (or one transcendental call) per output element.
_UNARY_BINARY = [
    "mul", "multiply", "div", "divide", "true_divide", "floor_divide",
    "remainder", "fmod", "pow", "float_power", "square", "neg", "negative", "abs", "absolute", "reciprocal",
    "sqrt", "rsqrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "asin",
    "acos", "atan", "atan2", "arctan2", "sinh", "cosh", "asinh", "acosh", "atanh", "erf", "erfc", "erfinv",
    "sign", "sgn", "floor", "ceil", "round", "trunc", "frac", "maximum", "minimum", "fmax", "fmin",
    "eq", "ne", "lt", "le", "gt", "ge", "greater", "less", "greater_equal", "less_equal", "not_equal",
    "where", "masked_fill", "hypot", "logaddexp", "xlogy", "copysign", "nan_to_num", "heaviside",
    "isnan", "isinf", "isfinite", "logical_not", "logical_and", "logical_or", "logical_xor", "special_erf",
    "angle",  # atan2(imag, real) of complex data (one call); real data: a compare with 0 (0 or pi)
]
# operator-module names of the same operations (x * y, x /= y, x % y, ...)
_OPERATORS = ["imul", "truediv", "itruediv", "floordiv", "ifloordiv", "mod", "imod", "ipow"]
_METHOD_ONLY = ["__rmul__", "__rtruediv__", "__rpow__", "__neg__", "__abs__"]
_INPLACE = [f"{n}_" for n in _UNARY_BINARY if n not in ("where", "isnan", "isinf", "isfinite", "special_erf")]
# Bitwise/logical operators on masks: 0 for bool and integer data (float_numel), as the convention
# says; listed so that `a & b` or `~mask` are known rather than unsupported.
_BITWISE = ["and_", "or_", "xor", "invert", "inv", "not_", "lshift", "rshift", "bitwise_and", "bitwise_or",
            "bitwise_xor", "bitwise_not", "bitwise_left_shift", "bitwise_right_shift"]
_BITWISE_METHODS = ["__and__", "__or__", "__xor__", "__invert__", "__rand__", "__ror__", "__rxor__",
                    "__lshift__", "__rshift__", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
                    "bitwise_and_", "bitwise_or_", "bitwise_xor_", "bitwise_not_", "logical_not_"]
_ATEN_BITWISE = ["__and__", "__or__", "__xor__", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"]


# multiplies and divides: their own formulas, for the cost of complex data
_MUL = ["mul", "multiply"]
_DIV = ["div", "divide", "true_divide"]
_GENERIC = [n for n in _UNARY_BINARY if n not in _MUL + _DIV]


@register(*functions(*_GENERIC, *[o for o in _OPERATORS if o not in ("imul", "truediv", "itruediv")], *_BITWISE),
          *methods(*_GENERIC, *[f"{n}_" for n in _GENERIC if f"{n}_" in _INPLACE], "__rpow__", "__neg__", "__abs__",
                   *_BITWISE_METHODS),
          *aten_ops(*_GENERIC, *_ATEN_BITWISE))
def elementwise_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> int:
    # 1 per output element (broadcast included), 2 for complex data; 0 for integer/boolean data
    return float_numel(out, *args) * complex_factor(COMPLEX_OTHER, out)


@register(*functions(*_MUL, "imul"), *methods(*_MUL, "mul_", "multiply_", "__rmul__"), *aten_ops(*_MUL))
def mul_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> int:
    # 1 per output element; a complex multiply is 6 real FLOPs
    return float_numel(out, *args) * complex_factor(COMPLEX_MUL, out)


@register(*functions(*_DIV, "truediv", "itruediv"), *methods(*_DIV, "div_", "divide_", "true_divide_", "__rtruediv__"),
          *aten_ops(*_DIV))
def div_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> int:
    # 1 per output element; a complex divide is 11 real FLOPs
    return float_numel(out, *args) * complex_factor(COMPLEX_DIV, out)


_ADD_SUB = ["add", "sub", "subtract", "rsub"]


@register(*functions(*_ADD_SUB, "iadd", "isub"),
          *methods(*_ADD_SUB, *[f"{n}_" for n in _ADD_SUB], "__radd__", "__rsub__", "__iadd__", "__isub__"),
          *aten_ops(*_ADD_SUB))
def add_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> int:
    # x + alpha*y: 1 per output element, 2 when alpha scales the second operand; complex data:
    # 2 per add, + 6 per complex alpha multiply
    alpha = kwargs.get("alpha", args[2] if len(args) > 2 else 1)
    if type(out) is Tensor and out.is_complex():  # complex operands give a complex result
        return float_numel(out, *args) * (COMPLEX_ADD + (0 if alpha == 1 else COMPLEX_MUL))
    return float_numel(out, *args) * (1 if alpha == 1 else 2)


@register(*functions("diff"), *methods("diff"), *aten_ops("diff"))
def diff_flops(module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
    # n-th forward difference: n subtractions per output element (prepend/append are copies)
    n = arg(args, kwargs, 0, "n", 1)
    return float_numel(out, x) * int(n)


@register(*functions("clamp", "clip"), *methods("clamp", "clip", "clamp_", "clip_"), *aten_ops("clamp", "clip"))
def clamp_flops(module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
    # 1 comparison per output element per bound given (min and/or max)
    low = arg(args, kwargs, 0, "min")
    high = arg(args, kwargs, 1, "max")
    return float_numel(out, x) * ((low is not None) + (high is not None))


@register(*functions("clamp_min", "clamp_max"), *methods("clamp_min", "clamp_max", "clamp_min_", "clamp_max_"),
          *aten_ops("clamp_min", "clamp_max"))
def clamp_bound_flops(module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
    # 1 comparison per output element
    return float_numel(out, x)


@register(*functions("addcmul", "addcdiv", "lerp"), *methods("addcmul", "addcdiv", "lerp", "addcmul_", "addcdiv_",
                                                             "lerp_"),
          *aten_ops("addcmul", "addcdiv", "lerp"))
def fused3_flops(module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
    # 3 per output element: addcmul = x + v*(a*b); addcdiv = x + v*(a/b); lerp = x + w*(y-x)
    return 3 * float_numel(out, x)


@register(nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout,
          *functions("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"),
          *aten_ops("dropout", "alpha_dropout", "feature_alpha_dropout"))
def dropout_flops(module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
    # while active: the random mask multiply and the 1/(1-p) rescale, 2 per element; else free.
    # A module knows p and its training flag; F.dropout(input, p=0.5, training=True, inplace=False)
    # and aten.dropout(input, p, train) take them as arguments.
    if module is not None:
        p, active = module.p, module.training
    else:
        p, active = arg(args, kwargs, 0, "p", 0.5), bool(arg(args, kwargs, 1, "training", kwargs.get("train", True)))
    return 2 * float_numel(out, x) if active and p > 0 else 0


@register(*aten_ops("native_dropout"))
def native_dropout_flops(module: Any, out: Any, x: Any, p: float, train: bool | None, *args: Any,
                         **kwargs: Any) -> int:
    # native_dropout(input, p, train) -> (out, mask): mask multiply and rescale while training
    return 2 * float_numel(out[0], x) if train and p > 0 else 0


def _accumulate(name: str, value_pos: int, flag_pos: int | None, targets: tuple[Any, ...]) -> None:
    def formula(module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
        # one add per accumulated source element (when the op accumulates), else a copy (0)
        accumulate = True if flag_pos is None else bool(arg(args, kwargs, flag_pos, "accumulate", False))
        return float_numel(args[value_pos], x) if accumulate and len(args) > value_pos else 0

    formula.__name__ = formula.__qualname__ = f"{name}_flops"
    register(*targets)(formula)


@register(*functions("index_put"), *methods("index_put", "index_put_"), *aten_ops("index_put", "_unsafe_index_put"))
def index_put_flops(module: Any, out: Any, x: Any, indices: Any, values: Any, *args: Any, **kwargs: Any) -> int:
    # index_put(input, indices, values, accumulate=False): when accumulating, one add per element written
    # (values broadcast to the indexed elements: a scalar added into 48 of them is 48 adds), else a copy (0)
    if not bool(arg(args, kwargs, 0, "accumulate", False)):
        return 0
    written = _indexed_elements(x, indices)
    return (written if written is not None else numel(values)) * (1 if float_numel(x) else 0)


def _indexed_elements(x: Any, indices: Any) -> int | None:
    """How many elements of ``x`` an index_put's ``indices`` (a tensor or None per leading dimension; a
    boolean mask covering as many dimensions as it has) select: the broadcast index tensors' elements
    times the sizes of the dimensions left whole. A mask's count is its True elements (None on meta,
    which has no values)."""
    shapes: list[tuple[int, ...]] = []
    whole = 1
    dim = 0
    for index in (indices if isinstance(indices, (list, tuple)) else (indices,)):
        if index is None:
            whole *= x.shape[dim]
            dim += 1
        elif index.dtype in (torch.bool, torch.uint8):
            if index.is_meta:
                return None
            shapes.append((int(index.count_nonzero()),))
            dim += index.dim()
        else:
            shapes.append(tuple(index.shape))
            dim += 1
    selected = prod(torch.broadcast_shapes(*shapes)) if shapes else 1
    return selected * whole * prod(x.shape[dim:])


# index_add(input, dim, index, source): one add per source element
_accumulate("index_add", 2, None, (*functions("index_add"), *methods("index_add", "index_add_"),
                                   *aten_ops("index_add")))
# scatter_add(input, dim, index, src): one add per element of index (src may be larger: the rest unused)
_accumulate("scatter_add", 1, None, (*functions("scatter_add"), *methods("scatter_add", "scatter_add_"),
                                     *aten_ops("scatter_add")))


def _reduce_into(name: str) -> None:
    def formula(module: Any, out: Any, x: Any, dim: Any, index: Any, src: Any, *args: Any, **kwargs: Any) -> int:
        # (input, dim, index, src, reduce, include_self=True): one add, multiply or compare per
        # source element ("sum", "prod", "amax", "amin"); "mean" also divides each output
        # element by its count (the counts are integers: 0)
        reduce = arg(args, kwargs, 0, "reduce", "sum")
        per_source = float_numel(src, x) if hasattr(src, "shape") else 0
        return per_source + (float_numel(out, x) if reduce == "mean" else 0)

    formula.__name__ = formula.__qualname__ = f"{name}_flops"
    register(*functions(name), *methods(name, f"{name}_"), *aten_ops(name))(formula)


_reduce_into("scatter_reduce")
_reduce_into("index_reduce")


@register(*functions("cross", "linalg_cross"), *methods("cross"), *aten_ops("cross", "linalg_cross"))
def cross_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> int:
    # a x b of 3-vectors: each output component is a_j*b_k - a_k*b_j, 2 multiplies + 1 subtract = 3
    # per output element; complex data: 2 complex multiplies (6 each) + 1 subtract (2) = 14
    if isinstance(out, Tensor) and out.is_complex():
        return out.numel() * (2 * COMPLEX_MUL + COMPLEX_ADD)
    return 3 * float_numel(out, *args)


@register(*functions("polar"), *aten_ops("polar"))
def polar_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> int:
    # torch.polar(abs, angle) = abs*cos(angle) + i*abs*sin(angle): cos, sin and 2 multiplies, 4
    # per complex output element
    return 4 * float_numel(out, *args)

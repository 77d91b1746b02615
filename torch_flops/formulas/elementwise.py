"""Elementwise arithmetic: one FLOP per output element per arithmetic step, for floating point
data only (``_shapes.float_numel``). ``torch.*``, ``operator.*`` (``x + y``, ``x += 1``), and
Tensor methods with their in-place ``_`` forms share these formulas. Dropout lives here too: it is
an elementwise mask multiply while active and free otherwise."""

from __future__ import annotations

from typing import Any

from torch import nn

from torch_flops.formulas import register_function, register_method, register_module
from torch_flops.formulas._shapes import arg, float_numel

__all__ = ["clamp_flops", "dropout_flops", "elementwise_flops"]

# One arithmetic step (or one transcendental call) per output element.
_UNARY_BINARY = [
    "mul", "multiply", "div", "divide", "true_divide", "floor_divide",
    "remainder", "fmod", "pow", "float_power", "square", "neg", "negative", "abs", "absolute", "reciprocal",
    "sqrt", "rsqrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "asin",
    "acos", "atan", "atan2", "arctan2", "sinh", "cosh", "asinh", "acosh", "atanh", "erf", "erfc", "erfinv",
    "sign", "sgn", "floor", "ceil", "round", "trunc", "frac", "maximum", "minimum", "fmax", "fmin",
    "eq", "ne", "lt", "le", "gt", "ge", "greater", "less", "greater_equal", "less_equal", "not_equal",
    "where", "masked_fill", "hypot", "logaddexp", "xlogy", "copysign", "nan_to_num", "heaviside",
    "isnan", "isinf", "isfinite", "logical_not", "logical_and", "logical_or", "logical_xor",
]
# operator-module names of the same operations (x + y, x += y, -x, x < y, ...)
_OPERATORS = [
    "imul", "truediv", "itruediv", "floordiv", "ifloordiv", "mod", "imod", "ipow",
]
_METHOD_ONLY = ["__rmul__", "__rtruediv__", "__rpow__", "__neg__", "__abs__"]
_INPLACE = [f"{n}_" for n in _UNARY_BINARY if n not in ("where", "isnan", "isinf", "isfinite")]


@register_function(*_UNARY_BINARY, *_OPERATORS)
@register_method(*_UNARY_BINARY, *_INPLACE, *_METHOD_ONLY)
def elementwise_flops(out: Any, *args: Any, **kwargs: Any) -> int:
    # 1 per output element (broadcast included); 0 for integer/boolean data
    return float_numel(out, *args)


_ADD_SUB = ["add", "sub", "subtract", "rsub"]


@register_function(*_ADD_SUB, "iadd", "isub")
@register_method(*_ADD_SUB, *[f"{n}_" for n in _ADD_SUB], "__radd__", "__rsub__", "__iadd__", "__isub__")
def add_flops(out: Any, *args: Any, **kwargs: Any) -> int:
    # x + alpha*y: 1 per output element, 2 when alpha scales the second operand
    alpha = kwargs.get("alpha", args[2] if len(args) > 2 else 1)
    return float_numel(out, *args) * (1 if alpha == 1 else 2)


# Bitwise/logical operators on masks: 0 for bool and integer data (float_numel), as the convention
# says; listed so that `a & b` or `~mask` are known rather than unsupported.
_BITWISE = ["and_", "or_", "xor", "invert", "inv", "not_", "lshift", "rshift", "bitwise_and", "bitwise_or",
            "bitwise_xor", "bitwise_not", "bitwise_left_shift", "bitwise_right_shift"]
_BITWISE_METHODS = ["__and__", "__or__", "__xor__", "__invert__", "__rand__", "__ror__", "__rxor__",
                    "__lshift__", "__rshift__", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
                    "bitwise_and_", "bitwise_or_", "bitwise_xor_", "bitwise_not_", "logical_not_"]
register_function(*_BITWISE)(elementwise_flops)
register_method(*_BITWISE_METHODS)(elementwise_flops)


@register_function("diff")
@register_method("diff")
def diff_flops(out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
    # n-th forward difference: n subtractions per output element (prepend/append are copies)
    n = arg(args, kwargs, 0, "n", 1)
    return float_numel(out, x) * int(n)


@register_function("clamp", "clip")
@register_method("clamp", "clip", "clamp_", "clip_")
def clamp_flops(out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
    # 1 comparison per output element per bound given (min and/or max)
    low = arg(args, kwargs, 0, "min")
    high = arg(args, kwargs, 1, "max")
    return float_numel(out, x) * ((low is not None) + (high is not None))


@register_function("clamp_min", "clamp_max")
@register_method("clamp_min", "clamp_max", "clamp_min_", "clamp_max_")
def clamp_bound_flops(out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
    # 1 comparison per output element
    return float_numel(out, x)


@register_function("addcmul", "addcdiv", "lerp")
@register_method("addcmul", "addcdiv", "lerp", "addcmul_", "addcdiv_", "lerp_")
def fused3_flops(out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
    # 3 per output element: addcmul = x + v*(a*b); addcdiv = x + v*(a/b); lerp = x + w*(y-x)
    return 3 * float_numel(out, x)


def _dropout(out: Any, x: Any, p: float, active: bool) -> int:
    # while active: the random mask multiply and the 1/(1-p) rescale, 2 per element; else free
    return 2 * float_numel(out, x) if active and p > 0 else 0


@register_module(nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
def dropout_module_flops(module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
    return _dropout(out, x, module.p, module.training)


@register_function("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout")
def dropout_flops(out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
    # F.dropout(input, p=0.5, training=True, inplace=False)
    return _dropout(out, x, arg(args, kwargs, 0, "p", 0.5), bool(arg(args, kwargs, 1, "training", True)))

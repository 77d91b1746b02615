"""FLOPs of activation functions and of softmax / log-softmax / softmin.

Every activation is elementwise, so one formula per activation serves all its front doors
(``nn`` module, ``torch``/``F`` function and in-place ``_`` form, Tensor method, aten op):
``cost per output element * output elements``, 0 for non-floating data. The costs follow the
package convention (``torch_flops.formulas``): a transcendental call (exp, log, tanh, erf) is one
FLOP, as an add, a multiply, a compare or a division is. No MACs anywhere here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from torch_flops.formulas import aten_ops, functions, methods, register
from torch_flops.formulas._shapes import arg, float_numel

__all__ = ["gelu_flops"]


def _activation_flops(out: Any, x: Any, cost: int) -> tuple[int, int]:
    """``cost`` FLOPs per output element of an elementwise activation (0 unless floating point)."""
    return (cost * float_numel(out, x), 0)


def _register_activation(name: str, cost: int, modules: Sequence[str] = (), function_names: Sequence[str] = (),
                         method_names: Sequence[str] = (), aten: Sequence[str] = ()) -> None:
    """One formula of fixed ``cost`` for every front door of an activation."""

    def formula(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
        return _activation_flops(out, arg(args, kwargs, 0, "input"), cost)

    formula.__name__ = formula.__qualname__ = f"{name}_flops"
    formula.__doc__ = f"{name}: {cost} FLOPs per output element."
    register(*(getattr(nn, m) for m in modules), *functions(*function_names), *methods(*method_names),
             *aten_ops(*aten))(formula)


# ---------------------------------------------------------------------------------------------
# Fixed-cost activations: (name, FLOPs per output element, front doors). The arithmetic of each
# cost is the comment above its line. aten forms take the function's arguments.
# ---------------------------------------------------------------------------------------------

# 1 per element: max(x, 0)
_register_activation("relu", 1, ("ReLU",), ("relu", "relu_"), ("relu", "relu_"), ("relu",))
# 2 per element: max(x, 0), min(., 6)
_register_activation("relu6", 2, ("ReLU6",), ("relu6", "relu6_"), (), ("relu6",))
# 2 per element: max(x, min_val), min(., max_val)
_register_activation("hardtanh", 2, ("Hardtanh",), ("hardtanh", "hardtanh_"), (), ("hardtanh",))
# 2 per element: compare, mul by negative_slope
_register_activation("leaky_relu", 2, ("LeakyReLU",), ("leaky_relu", "leaky_relu_"), (), ("leaky_relu",))
# 2 per element: compare, mul by the learned slope
_register_activation("prelu", 2, ("PReLU",), ("prelu",), ("prelu",), ("prelu", "_prelu_kernel"))
# 2 per element: compare, mul by the (random in training) slope
_register_activation("rrelu", 2, ("RReLU",), ("rrelu", "rrelu_"), (), ("rrelu", "rrelu_with_noise"))
# 4 per element: compare, exp, sub 1, mul alpha
_register_activation("elu", 4, ("ELU",), ("elu", "elu_"), (), ("elu",))
# 5 per element: elu 4 (compare, exp, sub, mul) + div of x by alpha
_register_activation("celu", 5, ("CELU",), ("celu", "celu_"), (), ("celu",))
# 5 per element: elu 4 (compare, exp, sub, mul alpha) + mul by scale
_register_activation("selu", 5, ("SELU",), ("selu", "selu_"), (), ("selu",))
# 4 per element: sigmoid 3 (exp(-x), add 1, reciprocal) + mul by x
_register_activation("silu", 4, ("SiLU",), ("silu", "silu_"), (), ("silu",))
# 3 per element: exp(-x), add 1, reciprocal (torch.special.expit is the same op)
_register_activation("sigmoid", 3, ("Sigmoid",), ("sigmoid", "sigmoid_", "special_expit"), ("sigmoid", "sigmoid_"),
                     ("sigmoid", "special_expit"))
# 4 per element: -softplus(-x) = exp, add 1, log, neg (F.logsigmoid.__name__ is "log_sigmoid")
_register_activation("logsigmoid", 4, ("LogSigmoid",), ("logsigmoid", "log_sigmoid"), (), ("log_sigmoid",))
# 1 per element: tanh
_register_activation("tanh", 1, ("Tanh",), ("tanh", "tanh_"), ("tanh", "tanh_"), ("tanh",))
# 5 per element: softplus 3 (exp, add 1, log) + tanh 1 + mul by x 1
_register_activation("mish", 5, ("Mish",), ("mish", "mish_"), (), ("mish",))
# 5 per element: mul beta, exp, add 1, log, div beta (the linear branch above threshold ignored)
_register_activation("softplus", 5, ("Softplus",), ("softplus",), (), ("softplus",))
# 3 per element: abs, add 1, div
_register_activation("softsign", 3, ("Softsign",), ("softsign",), (), ())
# 5 per element: x * relu6(x + 3) / 6 = add, min, max, mul, div
_register_activation("hardswish", 5, ("Hardswish",), ("hardswish", "hardswish_"), (), ("hardswish",))
# 4 per element: relu6(x + 3) / 6 = add, min, max, div
_register_activation("hardsigmoid", 4, ("Hardsigmoid",), ("hardsigmoid", "hardsigmoid_"), (), ("hardsigmoid",))
# 2 per element: compare x > lambd, compare x < -lambd
_register_activation("hardshrink", 2, ("Hardshrink",), ("hardshrink",), ("hardshrink",), ("hardshrink",))
# 3 per element: two compares, one add/sub of lambd
_register_activation("softshrink", 3, ("Softshrink",), ("softshrink",), (), ("softshrink",))
# 2 per element: tanh, sub
_register_activation("tanhshrink", 2, ("Tanhshrink",), ("tanhshrink",), (), ())
# 1 per element: compare with threshold (F.threshold.__name__ is "_threshold")
_register_activation("threshold", 1, ("Threshold",), ("threshold", "_threshold", "threshold_"), (), ("threshold",))
# 4 per OUTPUT element: sigmoid 3 on the gate half + mul 1 (out has half the input elements)
_register_activation("glu", 4, ("GLU",), ("glu",), (), ("glu",))
# 5 per element: max, sub max, exp, sum, div by the sum
_register_activation("softmax", 5, ("Softmax", "Softmax2d"), ("softmax", "special_softmax"), ("softmax",),
                     ("softmax", "_softmax", "_safe_softmax", "special_softmax"))
# 5 per element: max, sub max, exp, sum, sub of log(sum) (one log per row is not counted)
_register_activation("log_softmax", 5, ("LogSoftmax",), ("log_softmax", "special_log_softmax"), ("log_softmax",),
                     ("log_softmax", "_log_softmax", "special_log_softmax"))
# 6 per element: neg + softmax 5 (max, sub, exp, sum, div)
_register_activation("softmin", 6, ("Softmin",), ("softmin",), (), ())


# ---------------------------------------------------------------------------------------------
# GELU: the cost depends on ``approximate``.
# ---------------------------------------------------------------------------------------------

def _gelu_cost(approximate: Any) -> int:
    # 'none': x * 0.5 * (1 + erf(x / sqrt 2)) = div, erf, add, mul, mul = 5
    # 'tanh': x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
    #         = cube 2, mul, add, mul, tanh, add, mul, mul = 9
    return 9 if approximate == "tanh" else 5


@register(nn.GELU, *functions("gelu", "gelu_"), *aten_ops("gelu"))
def gelu_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # 5 per element (exact erf form) or 9 (tanh approximation), from module.approximate or the
    # approximate argument
    approximate = getattr(module, "approximate", "none") if module is not None else \
        arg(args, kwargs, 1, "approximate", "none")
    return _activation_flops(out, arg(args, kwargs, 0, "input"), _gelu_cost(approximate))

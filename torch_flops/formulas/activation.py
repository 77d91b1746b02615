"""FLOPs of activation functions and of softmax / log-softmax / softmin.

Every activation is elementwise, so one shape helper (:func:`_activation_flops`) serves all the
front doors: ``cost per output element * output elements``, 0 for non-floating data. The costs
follow the package convention (``torch_flops.formulas``): a transcendental call (exp, log, tanh,
erf) is one FLOP, as an add, a multiply, a compare or a division is. No MACs anywhere here.

Front doors registered per op: the ``nn`` module class name, every function ``__name__`` fx can
record for it (``torch.X``, ``torch.nn.functional.X`` and their in-place ``X_`` forms; note that
``F.threshold.__name__ == "_threshold"`` and ``F.logsigmoid.__name__ == "log_sigmoid"``), and the
``Tensor`` methods that exist (``relu``, ``sigmoid``, ``tanh``, ``softmax``, ...).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch_flops.formulas import register_function, register_method, register_module
from torch_flops.formulas._shapes import arg, float_numel

__all__: list[str] = []


def _activation_flops(out: Any, x: Any, cost: int) -> tuple[int, int]:
    """``cost`` FLOPs per output element of an elementwise activation (0 unless floating point)."""
    return (cost * float_numel(out, x), 0)


def _register_activation(name: str, cost: int, modules: Sequence[str] = (),
                         functions: Sequence[str] = (), methods: Sequence[str] = ()) -> None:
    """Register the module / function / method formulas of an activation of fixed ``cost``."""

    def module_formula(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
        return _activation_flops(out, arg(args, kwargs, 0, "input"), cost)

    def function_formula(out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
        return _activation_flops(out, arg(args, kwargs, 0, "input"), cost)

    def method_formula(out: Any, self: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
        return _activation_flops(out, self, cost)

    for fn, kind in ((module_formula, "module"), (function_formula, "function"),
                     (method_formula, "method")):
        fn.__name__ = f"{name}_{kind}_flops"
        fn.__qualname__ = fn.__name__
        fn.__doc__ = f"{name}: {cost} FLOPs per output element."
    if modules:
        register_module(*modules)(module_formula)
    if functions:
        register_function(*functions)(function_formula)
    if methods:
        register_method(*methods)(method_formula)


# ---------------------------------------------------------------------------------------------
# Fixed-cost activations: (name, FLOPs per output element, front doors). The arithmetic of each
# cost is the comment above its line.
# ---------------------------------------------------------------------------------------------

# 1 per element: max(x, 0)
_register_activation("relu", 1, modules=("ReLU",), functions=("relu", "relu_"),
                     methods=("relu", "relu_"))
# 2 per element: max(x, 0), min(., 6)
_register_activation("relu6", 2, modules=("ReLU6",), functions=("relu6", "relu6_"))
# 2 per element: max(x, min_val), min(., max_val)
_register_activation("hardtanh", 2, modules=("Hardtanh",), functions=("hardtanh", "hardtanh_"))
# 2 per element: compare, mul by negative_slope
_register_activation("leaky_relu", 2, modules=("LeakyReLU",),
                     functions=("leaky_relu", "leaky_relu_"))
# 2 per element: compare, mul by the learned slope
_register_activation("prelu", 2, modules=("PReLU",), functions=("prelu",), methods=("prelu",))
# 2 per element: compare, mul by the (random in training) slope
_register_activation("rrelu", 2, modules=("RReLU",), functions=("rrelu", "rrelu_"))
# 4 per element: compare, exp, sub 1, mul alpha
_register_activation("elu", 4, modules=("ELU",), functions=("elu", "elu_"))
# 5 per element: elu 4 (compare, exp, sub, mul) + div of x by alpha
_register_activation("celu", 5, modules=("CELU",), functions=("celu", "celu_"))
# 5 per element: elu 4 (compare, exp, sub, mul alpha) + mul by scale
_register_activation("selu", 5, modules=("SELU",), functions=("selu", "selu_"))
# 4 per element: sigmoid 3 (exp(-x), add 1, reciprocal) + mul by x
_register_activation("silu", 4, modules=("SiLU",), functions=("silu", "silu_"))
# 3 per element: exp(-x), add 1, reciprocal (torch.special.expit is the same op)
_register_activation("sigmoid", 3, modules=("Sigmoid",),
                     functions=("sigmoid", "sigmoid_", "special_expit"),
                     methods=("sigmoid", "sigmoid_"))
# 4 per element: -softplus(-x) = exp, add 1, log, neg
_register_activation("logsigmoid", 4, modules=("LogSigmoid",), functions=("log_sigmoid",))
# 1 per element: tanh
_register_activation("tanh", 1, modules=("Tanh",), functions=("tanh", "tanh_"),
                     methods=("tanh", "tanh_"))
# 5 per element: softplus 3 (exp, add 1, log) + tanh 1 + mul by x 1
_register_activation("mish", 5, modules=("Mish",), functions=("mish", "mish_"))
# 5 per element: mul beta, exp, add 1, log, div beta (the linear branch above threshold ignored)
_register_activation("softplus", 5, modules=("Softplus",), functions=("softplus",))
# 3 per element: abs, add 1, div
_register_activation("softsign", 3, modules=("Softsign",), functions=("softsign",))
# 5 per element: x * relu6(x + 3) / 6 = add, min, max, mul, div
_register_activation("hardswish", 5, modules=("Hardswish",),
                     functions=("hardswish", "hardswish_"))
# 4 per element: relu6(x + 3) / 6 = add, min, max, div
_register_activation("hardsigmoid", 4, modules=("Hardsigmoid",),
                     functions=("hardsigmoid", "hardsigmoid_"))
# 2 per element: compare x > lambd, compare x < -lambd
_register_activation("hardshrink", 2, modules=("Hardshrink",), functions=("hardshrink",),
                     methods=("hardshrink",))
# 3 per element: two compares, one add/sub of lambd
_register_activation("softshrink", 3, modules=("Softshrink",), functions=("softshrink",))
# 2 per element: tanh, sub
_register_activation("tanhshrink", 2, modules=("Tanhshrink",), functions=("tanhshrink",))
# 1 per element: compare with threshold (F.threshold.__name__ is "_threshold")
_register_activation("threshold", 1, modules=("Threshold",),
                     functions=("threshold", "_threshold", "threshold_"))
# 4 per OUTPUT element: sigmoid 3 on the gate half + mul 1 (out has half the input elements)
_register_activation("glu", 4, modules=("GLU",), functions=("glu",))
# 5 per element: max, sub max, exp, sum, div by the sum
_register_activation("softmax", 5, modules=("Softmax", "Softmax2d"),
                     functions=("softmax", "special_softmax"), methods=("softmax",))
# 5 per element: max, sub max, exp, sum, sub of log(sum) (one log per row is not counted)
_register_activation("log_softmax", 5, modules=("LogSoftmax",),
                     functions=("log_softmax", "special_log_softmax"), methods=("log_softmax",))
# 6 per element: neg + softmax 5 (max, sub, exp, sum, div)
_register_activation("softmin", 6, modules=("Softmin",), functions=("softmin",))


# ---------------------------------------------------------------------------------------------
# GELU: the cost depends on ``approximate``.
# ---------------------------------------------------------------------------------------------

def _gelu_cost(approximate: Any) -> int:
    # 'none': x * 0.5 * (1 + erf(x / sqrt 2)) = div, erf, add, mul, mul = 5
    # 'tanh': x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
    #         = cube 2, mul, add, mul, tanh, add, mul, mul = 9
    return 9 if approximate == "tanh" else 5


@register_module("GELU")
def gelu_module_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # 5 per element (exact erf form) or 9 (tanh approximation), from module.approximate
    return _activation_flops(out, arg(args, kwargs, 0, "input"),
                             _gelu_cost(getattr(module, "approximate", "none")))


@register_function("gelu", "gelu_")
def gelu_function_flops(out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # 5 per element (exact erf form) or 9 (tanh approximation), from the approximate kwarg
    return _activation_flops(out, arg(args, kwargs, 0, "input"),
                             _gelu_cost(arg(args, kwargs, 1, "approximate", "none")))

"""FLOPs of reductions and scans: sum, prod, max/min and friends, cumulative ops, mean, var/std,
norms, logsumexp, median, all/any and count_nonzero.

One shape helper (:func:`_reduction_flops`) serves every front door (``torch.X(input, ...)``
functions and ``input.X(...)`` methods): ``per_input * I + per_output * O`` with ``I`` the
elements of the reduced input and ``O`` the elements of the result values (``out[0]`` when the op
returns ``(values, indices)`` or ``(var, mean)``). Non-floating data costs 0: an op counts when
its input or its result values are floating point (``sum(int_tensor, dtype=float32)`` does float
adds; ``argmax(float_tensor)`` does float compares; ``max(int_tensor)`` does none).

``torch.max(a, b)`` / ``torch.min(a, b)`` with a tensor second argument are elementwise, not
reductions: 1 FLOP per output element.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from torch_flops.formulas import aten_ops, functions, methods, register
from torch_flops.formulas._shapes import COMPLEX_OTHER, arg, complex_factor, first_output, float_numel, is_float, numel
from torch_flops.formulas.linalg import matrix_norm_count

__all__: list[str] = []

Tensor = torch.Tensor


def _reduction_flops(out: Any, x: Any, per_input: int, per_output: int = 0) -> tuple[int, int]:
    """``per_input * I + per_output * O`` FLOPs (0 unless the input or the values are floating)."""
    values = first_output(out)
    if not (is_float(x) or is_float(values)):
        return (0, 0)
    # complex data: 2 real FLOPs per step (one per component)
    return ((per_input * numel(x) + per_output * numel(values)) * complex_factor(COMPLEX_OTHER, x), 0)


def _register_reduction(name: str, per_input: int, per_output: int = 0, function_names: tuple[str, ...] = (),
                        method_names: tuple[str, ...] = ()) -> None:
    """One formula for ``torch.X(input, ...)``, ``input.X(...)`` and ``aten.X(self, ...)``."""

    def formula(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
        dtype = kwargs.get("dtype")
        if isinstance(dtype, torch.dtype) and not (dtype.is_floating_point or dtype.is_complex):
            return (0, 0)  # (dtype=torch.int32: the input is cast first, the arithmetic is integer)
        return _reduction_flops(out, arg(args, kwargs, 0, "input"), per_input, per_output)

    formula.__name__ = formula.__qualname__ = f"{name}_flops"
    formula.__doc__ = f"{name}: {per_input} FLOPs per input element + {per_output} per result."
    register(*functions(*function_names), *methods(*method_names), *aten_ops(*function_names))(formula)


# ---------------------------------------------------------------------------------------------
# Fixed costs. I = input elements, O = result elements.
# ---------------------------------------------------------------------------------------------

# I: one add (or multiply) per input element
for _name in ("sum", "nansum", "prod"):
    _register_reduction(_name, 1, function_names=(_name,), method_names=(_name,))
# I: one comparison per input element
for _name in ("amax", "amin", "argmax", "argmin"):
    _register_reduction(_name, 1, function_names=(_name,), method_names=(_name,))
# 2I: a min and a max comparison per input element
_register_reduction("aminmax", 2, function_names=("aminmax",), method_names=("aminmax",))
# I: one add / multiply / comparison per element of the scan (cumsum_ / cumprod_ in place)
for _name in ("cumsum", "cumprod"):
    _register_reduction(_name, 1, function_names=(_name,), method_names=(_name, f"{_name}_"))
for _name in ("cummax", "cummin"):
    _register_reduction(_name, 1, function_names=(_name,), method_names=(_name,))
# 4I: max, sub, exp, add per element (the running log-sum-exp of the scan)
_register_reduction("logcumsumexp", 4, function_names=("logcumsumexp",), method_names=("logcumsumexp",))
# I + O: one add per element, one div per result
for _name in ("mean", "nanmean"):
    _register_reduction(_name, 1, 1, function_names=(_name,), method_names=(_name,))
# 4I + O: mean add, sub mean, square, add per element; div per result
_register_reduction("var", 4, 1, function_names=("var",), method_names=("var",))
# 4I + 2O: var (4I + O) + sqrt per result
_register_reduction("std", 4, 2, function_names=("std",), method_names=("std",))
# 4I + O: the var above (its mean is the first add per element; no div counted twice)
_register_reduction("var_mean", 4, 1, function_names=("var_mean",))
# 4I + 2O: var_mean + sqrt per result
_register_reduction("std_mean", 4, 2, function_names=("std_mean",))
# 4I + 2O: max, sub max, exp, add per element; log and add back the max per result
_register_reduction("logsumexp", 4, 2, function_names=("logsumexp", "special_logsumexp"),
                    method_names=("logsumexp",))
# I: one comparison per input element (selection of the median)
for _name in ("median", "nanmedian", "mode"):  # (mode: the most frequent value, by one pass over sorted values)
    _register_reduction(_name, 1, function_names=(_name,), method_names=(_name,))
# I: one comparison with 0 per input element, 0 for non-floating input
for _name in ("all", "any", "count_nonzero"):
    _register_reduction(_name, 1, function_names=(_name,), method_names=(_name,))

del _name


# ---------------------------------------------------------------------------------------------
# max / min: a reduction, or elementwise with a tensor second argument.
# ---------------------------------------------------------------------------------------------

def _max_min_flops(out: Any, x: Any, other: Any) -> tuple[int, int]:
    if isinstance(other, Tensor):
        # elementwise max(a, b): 1 comparison per output element
        return (float_numel(out, x, other), 0)
    # reduction max(x) / max(x, dim): 1 comparison per input element
    return _reduction_flops(out, x, 1)


@register(*functions("max", "min"), *methods("max", "min"), *aten_ops("max", "min"))
def max_min_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # I for torch.max(x[, dim]) / x.max([dim]); 1 per output element for torch.max(a, b) / a.max(b)
    return _max_min_flops(out, arg(args, kwargs, 0, "input"), arg(args, kwargs, 1, "other"))


# ---------------------------------------------------------------------------------------------
# Norms: the cost depends on the order p.
# ---------------------------------------------------------------------------------------------

def _norm_costs(p: Any) -> tuple[int, int]:
    """``(per_input, per_output)`` of a p-norm reduction."""
    if p is None or p == "fro" or p == 2:
        return (2, 1)  # 2I + O: square, add per element; sqrt per result
    if p == 1 or p == math.inf or p == -math.inf:
        return (2, 0)  # 2I: abs, add (or max / min) per element
    if p == 0:
        return (2, 0)  # 2I: compare with 0, add per element
    return (3, 1)  # 3I + O: abs, pow p, add per element; pow 1/p per result


def _values_need_grad(out: Any) -> bool:
    # autograd records the call: an SVD inside computes its vectors too (linalg.matrix_norm_count)
    return isinstance(out, Tensor) and out.requires_grad


def _p_norm_flops(out: Any, x: Any, p: Any) -> tuple[int, int]:
    per_input, per_output = _norm_costs(p)
    return _reduction_flops(out, x, per_input, per_output)


@register(*functions("norm"), *methods("norm"), *aten_ops("norm"))
def norm_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # torch.norm(input, p='fro', dim=None, ...) / input.norm(p='fro', ...): p = 2 / 'fro' (default):
    # 2I + O (square, add; sqrt); p = 1, inf: 2I; other p: 3I + O; 'nuc': the nuclear norm of the
    # matrices over dim (default the last two): linalg.matrix_norm_count
    x, p = arg(args, kwargs, 0, "input"), arg(args, kwargs, 1, "p", "fro")
    if p == "nuc":
        return (matrix_norm_count(x, "nuc", arg(args, kwargs, 2, "dim", None) or (-2, -1), _values_need_grad(out)), 0)
    return _p_norm_flops(out, x, p)


@register(*functions("linalg_norm"), *aten_ops("linalg_norm"))
def linalg_norm_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # torch.linalg.norm(A, ord=None, dim=None, keepdim=False, *, dtype=None): a matrix norm
    # (linalg.matrix_norm_count) over a 2-tuple dim, or over a 2-D A with an ord and no dim; else a
    # vector norm of order ord (default 2) over dim (default: all of A)
    x, order, dim = arg(args, kwargs, 0, "input", kwargs.get("A")), arg(args, kwargs, 1, "ord"), arg(args, kwargs, 2, "dim")
    dims = (dim,) if isinstance(dim, int) else dim
    if (dims is not None and len(dims) == 2) or (dims is None and order is not None and x.dim() == 2):
        return (matrix_norm_count(x, "fro" if order is None else order, dims or (-2, -1), _values_need_grad(out)), 0)
    return _p_norm_flops(out, x, 2 if order is None else order)


@register(*functions("linalg_vector_norm"), *aten_ops("linalg_vector_norm"))
def vector_norm_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # torch.linalg.vector_norm(x, ord=2, ...): ord 2: 2I + O; ord 1, inf: 2I; other ord: 3I + O
    x = arg(args, kwargs, 0, "input", kwargs.get("x"))  # the first parameter binds as x= or input=
    return _p_norm_flops(out, x, arg(args, kwargs, 1, "ord", 2))


# ---------------------------------------------------------------------------------------------
# Sorting, selection and histograms: float comparisons are FLOPs, as relu's max(x, 0) is.
# ---------------------------------------------------------------------------------------------

def _sort(x: Any, dim: Any) -> tuple[int, int]:
    # a comparison sort of n values along a dim: ceil(log2 n) comparisons per element
    if not is_float(x) or x.dim() == 0:
        return (0, 0)
    n = x.shape[dim] if isinstance(dim, int) else x.shape[-1]
    return ((numel(x) * (n - 1).bit_length()) if n > 1 else 0, 0)


@register(*functions("sort", "argsort"), *methods("sort", "argsort"), *aten_ops("sort", "argsort"))
def sort_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    return _sort(arg(args, kwargs, 0, "input"), arg(args, kwargs, 1, "dim", -1))


@register(*functions("msort"), *methods("msort"), *aten_ops("msort"))
def msort_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    return _sort(arg(args, kwargs, 0, "input"), 0)  # msort sorts along the first dim


@register(*functions("topk", "kthvalue"), *methods("topk", "kthvalue"), *aten_ops("topk", "kthvalue"))
def topk_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # one pass comparing every value against the running k-th value: 1 per input element
    return (numel(arg(args, kwargs, 0, "input")) if is_float(arg(args, kwargs, 0, "input")) else 0, 0)


@register(*functions("bincount"), *methods("bincount"), *aten_ops("bincount"))
def bincount_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # bincount(input, weights=None, minlength=0): out[input[i]] += weights[i], one add per weight
    # (counting integer occurrences without weights is integer work: 0)
    weights = arg(args, kwargs, 1, "weights")
    return (numel(weights) if isinstance(weights, Tensor) and is_float(weights) else 0, 0)


@register(*functions("equal"), *methods("equal"), *aten_ops("equal"))
def equal_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # torch.equal(a, b) -> bool: one comparison per element, as eq (0 for integer and boolean data)
    x = arg(args, kwargs, 0, "input")
    return (numel(x) if isinstance(x, Tensor) and is_float(x) else 0, 0)


@register(*functions("histogram"), *methods("histogram"), *aten_ops("histogram"))
def histogram_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # histogram(input, bins, *, range=None, weight=None, density=False), per input element: with a
    # number of equal bins, the bin index as histc's (subtract, multiply: 2); with a tensor of n + 1
    # edges, a binary search ((n).bit_length() comparisons); with weight, its add (1). density divides
    # the n counts by their sum times each bin's width: the sum (n adds) and a multiply and a divide
    # per bin (3n in all)
    x = arg(args, kwargs, 0, "input")
    if not is_float(x):
        return (0, 0)
    bins, weight = arg(args, kwargs, 1, "bins", 100), arg(args, kwargs, 3, "weight")
    n = bins.numel() - 1 if isinstance(bins, Tensor) else int(bins)
    per_element = n.bit_length() if isinstance(bins, Tensor) else 2
    if isinstance(weight, Tensor):
        per_element += 1
    return (numel(x) * per_element + (3 * n if arg(args, kwargs, 4, "density", False) else 0), 0)


@register(*functions("histc"), *methods("histc"), *aten_ops("histc"))
def histc_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # bin index per element: subtract min, multiply by bins/(max-min) (the floor is a cast): 2 each
    x = arg(args, kwargs, 0, "input")
    return (2 * numel(x) if is_float(x) else 0, 0)


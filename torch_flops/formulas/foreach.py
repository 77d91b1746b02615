"""The ``_foreach_*`` aten ops, and GradScaler's two kernels.

A foreach op is one kernel launch over a list of tensors (``clip_grad_norm_``'s norms and scaling, an
EMA's ``_foreach_lerp_``, an optimizer's foreach step run by hand), each doing per tensor what its
single-tensor op does: it counts the sum, over the list, of its single-tensor op's formula
(``_foreach_mul_(grads, c)``: one multiply per element of every gradient; ``_foreach_norm``:
``linalg_vector_norm`` of each), looked up in the counter's own table, so a formula of the user's for
the single op counts its foreach form too. FlopCounterMode has no formula for any of them: 0 in the
``flop_counter`` convention (no matrix-multiply kernel's MACs)."""

from __future__ import annotations

from typing import Any

import torch

from torch_flops.formulas import register
from torch_flops.formulas._shapes import float_numel
from torch_flops.formulas.evaluate import evaluate
from torch_flops.formulas.table import Composite, Count, FormulaTable

__all__ = ["FOREACH_OPS"]

#: a foreach op whose single-tensor op is named otherwise
_SINGLE = {"norm": "linalg_vector_norm", "zero": "zero", "copy": "copy", "clone": "clone"}


def _foreach_names() -> list[str]:
    """The ``_foreach_*`` aten ops this torch has (their in-place ``_`` forms included)."""
    found = {name.split("::", 1)[1].split(".", 1)[0] for name in torch._C._dispatch_get_all_op_names()
             if name.startswith("aten::_foreach_")}
    return sorted(name for name in found if getattr(torch.ops.aten, name, None) is not None)


def _per_tensor(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> list[tuple[Any, tuple[Any, ...],
                                                                                       dict[str, Any]]]:
    """``(out_i, args_i, kwargs_i)`` of each tensor of the list(s): a list argument of the list's
    length gives its i-th item (``other``, ``scalars``, ``exponent``), anything else is passed whole
    (a scalar, one tensor broadcast to all). The i-th output is ``out[i]``, or, for an in-place op
    (which returns nothing), the i-th tensor it updated."""
    lists = [a for a in (*args, *kwargs.values()) if isinstance(a, (list, tuple)) and a
             and isinstance(a[0], torch.Tensor)]
    if not lists:
        return []
    n = len(lists[0])

    def item(value: Any, i: int) -> Any:
        return value[i] if isinstance(value, (list, tuple)) and len(value) == n else value

    outs = out if isinstance(out, (list, tuple)) and len(out) == n else lists[0]
    return [(outs[i], tuple(item(a, i) for a in args), {k: item(v, i) for k, v in kwargs.items()})
            for i in range(n)]


def _summed(table: FormulaTable, single: Any, name: str, out: Any, args: tuple[Any, ...],
            kwargs: dict[str, Any]) -> Count:
    formula = table.resolve_aten(single)
    if formula is None:
        raise NotImplementedError(f"no formula for aten.{single.__name__}, which {name} runs on each tensor")
    flops = macs = 0
    dots: int | None = 0
    for out_i, args_i, kwargs_i in _per_tensor(args, kwargs, out):
        f, m, d, _ = evaluate(formula, None, out_i, args_i, kwargs_i)
        flops, macs = flops + f, macs + m
        dots = None if d is None or dots is None else dots + d
    return Count(flops, macs, dots if macs else None, 0)


def _formula(name: str) -> Composite:
    base = name[len("_foreach_"):].rstrip("_")
    single = getattr(torch.ops.aten, _SINGLE.get(base, base), None)

    def foreach_flops(table: FormulaTable, module: Any, out: Any, *args: Any, **kwargs: Any) -> Count:
        # the sum over the list of the single-tensor op's count
        if single is None:
            raise NotImplementedError(f"torch has no single-tensor op of {name}")
        return _summed(table, single, name, out, args, kwargs)

    foreach_flops.__name__ = foreach_flops.__qualname__ = f"{name.rstrip('_')}_flops"
    return Composite(foreach_flops)


def _powsum_flops(module: Any, out: Any, tensors: Any, *args: Any, **kwargs: Any) -> int:
    # sum(|x| ** p) of each tensor of I elements: I powers and the I - 1 adds of their sum: 2I - 1
    return sum(max(2 * float_numel(t) - 1, 0) for t in tensors)


def _unscale_flops(module: Any, out: Any, tensors: Any, *args: Any, **kwargs: Any) -> int:
    # GradScaler.unscale_'s kernel, _amp_foreach_non_finite_check_and_unscale_(grads, found_inf,
    # inv_scale): per element a multiply by inv_scale and a finiteness check: 2 FLOPs
    return sum(2 * float_numel(t) for t in tensors)


def _update_scale_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> int:
    # GradScaler.update()'s kernel, _amp_update_scale_(scale, growth_tracker, found_inf, growth, backoff,
    # interval): one number's update: the found_inf test and the scale's multiply (by backoff, or by growth
    # once the tracker reaches the interval; the tracker's count is integer work): 2 FLOPs
    return 2


_NAMES = _foreach_names()
FOREACH_OPS = tuple(getattr(torch.ops.aten, name) for name in _NAMES)
for _name, _op in zip(_NAMES, FOREACH_OPS):
    register(_op)(_powsum_flops if _name.rstrip("_") == "_foreach_powsum" else _formula(_name))
_AMP_UNSCALE = getattr(torch.ops.aten, "_amp_foreach_non_finite_check_and_unscale_", None)
if _AMP_UNSCALE is not None:
    register(_AMP_UNSCALE)(_unscale_flops)
_AMP_UPDATE = getattr(torch.ops.aten, "_amp_update_scale_", None)
if _AMP_UPDATE is not None:
    register(_AMP_UPDATE)(_update_scale_flops)

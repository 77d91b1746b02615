"""The one way a formula's result becomes a :class:`~torch_flops.formulas.table.Count`: the forward
of a node, each backward op and the local shard of a DTensor op are all counted through
:func:`evaluate`, so every return form a formula may use (see :data:`FlopCount`) is decoded in one
place."""

from __future__ import annotations

import math
import numbers
from typing import Any

from torch_flops.formulas.table import Count, Formula

__all__ = ["evaluate"]


def evaluate(formula: Formula, module: Any, out: Any, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> tuple[int, int, int | None, int | None]:
    """``formula(module, out, *args, **kwargs)`` as ``(flops, macs, dot_outputs, mm_macs)`` (a
    :class:`Count`, or a plain tuple of the same four: this runs for every counted node). An
    ``out=`` keyword is the op's output, never an operand: it is left out of the call. A bare int
    is ``(flops, 0)``; a pair is ``(flops, macs)`` with nothing known of the dot products (None,
    None); four values say how many outputs the MACs go into and how many a matrix-multiply
    kernel does. A count is an int, or a float holding a whole number; anything else (a bool, a
    string, a tensor, a fraction) is a ``TypeError``, a negative count or fewer FLOPs than MACs a
    ``ValueError``: the node's formula failed, and its message says what the formula returned."""
    if kwargs and "out" in kwargs:
        kwargs = {k: v for k, v in kwargs.items() if k != "out"}
    result: Any = formula(module, out, *args, **kwargs)
    kind = type(result)
    if kind is Count:
        return result  # type: ignore[no-any-return]
    if kind is int:
        if result < 0:
            raise ValueError(f"the formula returned a negative count ({result})")
        return (result, 0, None, None)
    if isinstance(result, tuple) and len(result) in (2, 4):
        flops, macs = _count(result[0]), _count(result[1])
        if flops < macs:
            raise ValueError(f"the formula returned fewer FLOPs than MACs ({result[0]}, {result[1]}): a "
                             "multiply-accumulate is 2 FLOPs")
        if len(result) > 2:
            return (flops, macs, result[2], result[3])
        return (flops, macs, None, None)
    return (_count(result), 0, None, None)


def _count(value: Any) -> int:
    """A formula's count as an int: an int, or a float (or NumPy number) holding a whole number;
    ``ValueError`` for a negative one; ``TypeError`` for anything else (a bool, a string, a tensor,
    a fraction, None), which no count is."""
    if type(value) is int:
        count = value
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
        count = int(value)
    elif isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) \
            and float(value).is_integer():
        count = int(float(value))
    else:
        raise TypeError(f"the formula returned {value!r} ({type(value).__name__}): a count is an int, or a pair "
                        "(flops, macs) of ints")
    if count < 0:
        raise ValueError(f"the formula returned a negative count ({value})")
    return count

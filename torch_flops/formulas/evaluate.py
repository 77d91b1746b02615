"""The one way a formula's result becomes a :class:`~torch_flops.formulas.table.Count`: the forward
of a node, each backward op and the local shard of a DTensor op are all counted through
:func:`evaluate`, so every return form a formula may use (see :data:`FlopCount`) is decoded in one
place."""

from __future__ import annotations

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
    kernel does. A negative count is a ``ValueError`` (the node's formula failed)."""
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
    if isinstance(result, tuple):
        flops, macs = result[0], result[1]
        flops = flops if type(flops) is int else int(flops)
        macs = macs if type(macs) is int else int(macs)
        if flops < 0 or macs < 0:
            raise ValueError(f"the formula returned a negative count ({result[0]}, {result[1]})")
        if len(result) > 2:
            return (flops, macs, result[2], result[3])
        return (flops, macs, None, None)
    flops = int(result)
    if flops < 0:
        raise ValueError(f"the formula returned a negative count ({result})")
    return (flops, 0, None, None)

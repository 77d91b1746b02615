"""Counting conventions: one profile's numbers re-expressed as another tool counts them, without
running anything again (``Profile.with_convention(name)``).

===============  ==========================================================  ========================
name             a node's FLOPs                                              who counts this way
===============  ==========================================================  ========================
``torch_flops``  2 x MACs + every other floating point operation (bias adds,  torch_flops (default),
                 elementwise, norms, softmax, reductions, activations)        DeepSpeed's profiler
``flop_counter`` 2 x the MACs of matrix-multiply kernels only (mm, bmm,       PyTorch's
                 addmm, baddbmm, convolution, attention, ``_scaled_mm``);     ``FlopCounterMode``
                 0 for everything else, including mv, dot, addmv, addbmm,
                 bilinear, ``_int_mm`` and grouped mm; attention counted in
                 full (causal too); complex convolutions as 3 real ones
``macs``         the MACs themselves (1 per multiply-accumulate), nothing     fvcore, thop, ptflops
                 else
``exact``        a dot product of length K is K multiplies and K - 1 adds:    (the arithmetic count)
                 2K - 1 per output instead of 2K, so ``flops - dot outputs``,
                 plus the rest as in ``torch_flops``
===============  ==========================================================  ========================

Each record carries what the conversions need: ``macs``, ``dot_outputs`` (the outputs those MACs
are summed into) and ``mm_macs`` (the MACs a matrix-multiply kernel does). A record whose formula
did not say (a user's formula returning ``(flops, macs)``) keeps its FLOPs in ``exact`` and counts
all its MACs in ``flop_counter``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar


class NodeRecord(Protocol):
    """What a convention reads of a record (``torch_flops.records.NodeRecord`` has it; this module
    sits below records and does not import it)."""

    @property
    def flops(self) -> int | None: ...
    @property
    def macs(self) -> int | None: ...
    @property
    def dot_outputs(self) -> int | None: ...
    @property
    def mm_macs(self) -> int | None: ...
    @property
    def backward_macs(self) -> int | None: ...
    @property
    def recompute_macs(self) -> int | None: ...



R = TypeVar("R", bound=NodeRecord)

__all__ = ["CONVENTIONS", "Convention", "recount"]


@dataclass(frozen=True)
class Convention:
    """One way of counting: how a record's ``(flops, macs)`` read in it."""

    name: str
    description: str
    used_by: str
    recount: Callable[[NodeRecord], tuple[int | None, int | None]]


def _same(r: NodeRecord) -> tuple[int | None, int | None]:
    return r.flops, r.macs


def _flop_counter(r: NodeRecord) -> tuple[int | None, int | None]:
    if r.macs is None:
        return r.flops, r.macs
    macs = r.macs if r.mm_macs is None else r.mm_macs
    return 2 * macs, macs


def _macs(r: NodeRecord) -> tuple[int | None, int | None]:
    return (r.macs, r.macs) if r.macs is not None else (r.flops, r.macs)


def _exact(r: NodeRecord) -> tuple[int | None, int | None]:
    if r.flops is None or not r.macs or r.dot_outputs is None:
        return r.flops, r.macs
    return r.flops - r.dot_outputs, r.macs


CONVENTIONS: dict[str, Convention] = {c.name: c for c in (
    Convention("torch_flops", "2 x MACs + every other floating point operation", "torch_flops, DeepSpeed", _same),
    Convention("flop_counter", "2 x the MACs of matrix-multiply kernels only", "torch.utils.flop_counter",
               _flop_counter),
    Convention("macs", "multiply-accumulates only, 1 each", "fvcore, thop, ptflops", _macs),
    Convention("exact", "2K - 1 per dot product of length K, plus the rest", "arithmetic count", _exact),
)}


def recount(records: tuple[R, ...], name: str) -> tuple[R, ...]:
    """``records`` (counted in ``torch_flops``) with their ``flops``/``macs`` as ``name`` counts them."""
    convert = CONVENTIONS[name].recount
    if convert is _same:
        return records
    out = []
    for r in records:
        flops, macs = convert(r)
        if r.backward_macs is not None and name in _BACKWARD:
            r = r._replace(backward_flops=_BACKWARD[name](r.backward_macs),  # type: ignore[attr-defined]
                           recompute_flops=_BACKWARD[name](r.recompute_macs or 0))
        out.append(r if (flops, macs) == (r.flops, r.macs) else r._replace(flops=flops, macs=macs))  # type: ignore[attr-defined]
    return tuple(out)


#: a node's backward in another convention, from its backward MACs (the backward keeps no
#: per-kernel split): ``macs`` counts them once, ``flop_counter`` twice (its matrix-multiply
#: kernels: it also counts grouped-convolution gradients and skips mv/dot backward, see the README);
#: ``exact`` keeps torch_flops' count
_BACKWARD: dict[str, Callable[[int], int]] = {"macs": lambda m: m, "flop_counter": lambda m: 2 * m}

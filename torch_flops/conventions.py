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

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar


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
    @property
    def backward_mm_macs(self) -> int | None: ...



R = TypeVar("R", bound=NodeRecord)

__all__ = ["CONVENTIONS", "Convention", "recount", "recount_backward"]


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
            # flop_counter: the backward's matrix-multiply kernels as FlopCounterMode counts them
            # on the device (backward_mm_macs; records without it: all the backward's MACs)
            kernel_macs = r.backward_mm_macs if name == "flop_counter" and r.backward_mm_macs is not None \
                else r.backward_macs
            r = r._replace(backward_flops=_BACKWARD[name](kernel_macs),  # type: ignore[attr-defined]
                           recompute_flops=_BACKWARD[name](r.recompute_macs or 0))
        out.append(r if (flops, macs) == (r.flops, r.macs) else r._replace(flops=flops, macs=macs))  # type: ignore[attr-defined]
    return tuple(out)


#: a node's backward in another convention, from its backward MACs: ``macs`` counts them once,
#: ``flop_counter`` twice the MACs of the matrix-multiply kernels FlopCounterMode counts on the
#: device (``backward_mm_macs``: a grouped convolution's input gradient as FlopCounterMode counts
#: it, 0 for the CPU flash attention kernel's backward, mv/dot backward); ``exact`` keeps
#: torch_flops' count
_BACKWARD: dict[str, Callable[[int], int]] = {"macs": lambda m: m, "flop_counter": lambda m: 2 * m}


def recount_backward(summary: Mapping[str, Any] | None, name: str) -> dict[str, Any] | None:
    """A profile's backward summary (``Profile.backward``) with its unattributed work (gradient
    accumulation, the seed gradient: no forward node's) as ``name`` counts it: ``macs`` its MACs,
    ``flop_counter`` 2 x its matrix-multiply kernels' MACs (an accumulation add is 0 there, as in
    FlopCounterMode), ``exact`` and ``torch_flops`` unchanged."""
    if summary is None or name not in _BACKWARD:
        return None if summary is None else dict(summary)
    macs = int(summary.get("unattributed_macs", 0))
    kernel_macs = int(summary.get("unattributed_mm_macs", macs)) if name == "flop_counter" else macs
    return {**summary, "unattributed_flops": _BACKWARD[name](kernel_macs)}

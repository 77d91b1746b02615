"""Shape-only arithmetic shared by every formula family and every front door (module, function,
method, aten). Pure integer maths: nothing here runs a kernel, times or prints."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch.nn.utils import parametrize

__all__ = [
    "COMPLEX_ADD",
    "COMPLEX_DIV",
    "COMPLEX_MAC",
    "COMPLEX_MUL",
    "COMPLEX_OTHER",
    "aa_window_total",
    "adaptive_window_total",
    "arg",
    "as_tuple",
    "broadcast",
    "complex_factor",
    "conv_macs",
    "einsum_macs",
    "first_output",
    "float_numel",
    "has_tensor",
    "is_float",
    "matmul_macs",
    "numel",
    "parametrized_shape",
    "prod",
    "sdpa_backward_macs",
    "sdpa_macs",
]

Tensor = torch.Tensor
prod = math.prod


def broadcast(*shapes: Any) -> tuple[int, ...]:
    """The broadcast of shapes, by numpy's rule (align on the right; a 1 stretches to the other
    size): plain Python, so a formula never imports torch's reference implementations (a first call
    of ``torch.broadcast_shapes`` imports them: a fraction of a second inside the first timed node)."""
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for shape in shapes:
        for i, size in enumerate(shape, rank - len(shape)):
            size = int(size)
            if size != 1:
                if out[i] not in (1, size):
                    raise ValueError(f"shapes {shapes} do not broadcast")
                out[i] = size
    return tuple(out)


def arg(args: Sequence[Any], kwargs: dict[str, Any], index: int, name: str, default: Any = None) -> Any:
    """The argument at position ``index`` or keyword ``name`` (as a Python signature would bind it)."""
    if len(args) > index:
        return args[index]
    return kwargs.get(name, default)


def has_tensor(module: Any, name: str) -> bool:
    """Whether ``module`` has a tensor ``name`` (an affine weight, a bias), read without computing it:
    a parametrized one (``torch.nn.utils.parametrize``) is computed by its parametrization on every
    read, which may draw random numbers or update buffers (``spectral_norm``'s power iteration),
    so its presence is taken from the parametrization itself."""
    return parametrize.is_parametrized(module, name) or getattr(module, name, None) is not None


def parametrized_shape(module: Any, name: str) -> Any:
    """The shape of ``module.<name>`` when a parametrization computes it, without computing it: its
    original's (a parametrization registered without ``unsafe=True`` keeps the shape; one with
    several originals, or unsafe, is computed: its value tells); None when ``name`` is not parametrized
    or no original tells."""
    if not parametrize.is_parametrized(module, name):
        return None
    holder = module.parametrizations[name]
    if getattr(holder, "unsafe", False):
        return getattr(module, name).shape
    original = holder.__dict__.get("_parameters", {}).get("original")
    if original is None:
        original = holder.__dict__.get("_buffers", {}).get("original")
    return None if original is None else original.shape


def as_tuple(value: Any, n: int) -> tuple[int, ...]:
    """``3 -> (3, 3)`` for ``n == 2``; sequences pass through (as for kernel_size)."""
    if isinstance(value, (tuple, list)):
        return tuple(int(v) for v in value)
    return (int(value),) * n


def first_output(out: Any) -> Any:
    """The values of an op that may also return indices: ``out[0]`` of a tuple, else ``out``."""
    if isinstance(out, (tuple, list)):
        return out[0] if out else None
    return out


#: Real FLOPs of one complex operation (a complex number is two reals):
#: add/sub (a+c) + (b+d)i = 2; multiply (ac-bd) + (ad+bc)i = 4 mul + 2 add = 6; divide by c+di:
#: numerator 6, c^2 + d^2 3, two divisions 2 = 11; a complex multiply-accumulate is 4 real MACs
#: (4 mul, then 2 + 2 adds). Other elementwise functions count one real FLOP per component, 2.
COMPLEX_ADD, COMPLEX_MUL, COMPLEX_DIV, COMPLEX_OTHER, COMPLEX_MAC = 2, 6, 11, 2, 4


def complex_factor(cost: int, *tensors: Any) -> int:
    """``cost`` when any of ``tensors`` is complex, else 1: the real-FLOP multiplier of one op
    (pass the output alone where complex inputs make a complex output: it is checked first)."""
    for t in tensors:
        if isinstance(t, Tensor) and t.is_complex():
            return cost
    return 1


def is_float(t: Any) -> bool:
    return isinstance(t, Tensor) and (t.is_floating_point() or t.is_complex())


def numel(t: Any) -> int:
    return t.numel() if isinstance(t, Tensor) else 0


def float_numel(out: Any, *inputs: Any) -> int:
    """Output elements of an elementwise op, 0 unless its data is floating point.

    A boolean output (a comparison) counts when the first tensor input is floating point.
    Non-tensor outputs (Python numbers from size arithmetic) are 0.
    """
    if not isinstance(out, Tensor):
        return 0
    if out.is_floating_point() or out.is_complex():
        return out.numel()
    for x in inputs:
        if isinstance(x, Tensor):
            return out.numel() if (x.is_floating_point() or x.is_complex()) else 0
    return 0


def matmul_macs(a: Sequence[int], b: Sequence[int]) -> int:
    """MACs of ``torch.matmul(a, b)`` with its 1-D and broadcasting rules.

    ``(..., m, k) @ (..., k, n)``: ``prod(broadcast batch) * m * k * n`` (one MAC per product term).
    A 1-D left operand is ``(1, k)``, a 1-D right operand is ``(k, 1)`` (dot: ``k``; mv: ``m * k``).
    """
    a = tuple(a)
    b = tuple(b)
    if len(a) == 1:
        a = (1,) + a
    if len(b) == 1:
        b = b + (1,)
    m, k = a[-2], a[-1]
    n = b[-1]
    batch = broadcast(a[:-2], b[:-2]) if (len(a) > 2 or len(b) > 2) else ()
    return prod(batch) * m * k * n


def conv_macs(x_shape: Sequence[int], w_shape: Sequence[int], out_shape: Sequence[int],
              transposed: bool) -> int:
    """MACs of an N-d convolution, groups/stride/padding/dilation included through the shapes.

    Direct: every output position of every output channel is a dot product over
    ``C_in/groups * prod(kernel)`` inputs, so ``N * prod(w_shape) * prod(out_spatial)``
    (``w_shape = (C_out, C_in/groups, *kernel)``). Transposed: every *input* position is scattered
    through the kernel, so ``N * prod(w_shape) * prod(in_spatial)``
    (``w_shape = (C_in, C_out/groups, *kernel)``). Same counting as FlopCounterMode's
    ``conv_flop_count``. An unbatched input (one fewer dim than the weight) has ``N = 1``.
    """
    spatial = len(w_shape) - 2
    batch = x_shape[0] if len(x_shape) == spatial + 2 else 1
    positions = prod(x_shape[-spatial:]) if transposed else prod(out_shape[-spatial:])
    return batch * prod(w_shape) * positions


def sdpa_macs(q: Sequence[int], k: Sequence[int], v: Sequence[int],
              out: Sequence[int] | None = None) -> tuple[int, int]:
    """MACs of attention ``softmax(Q K^T [+ mask]) V`` and the number of attention scores.

    ``Q: (..., Hq, L, E)``, ``K: (..., Hk, S, E)``, ``V: (..., Hk, S, Ev)``; leading dims broadcast
    (as the math kernel, and FlopCounterMode on meta, compute it): ``Q K^T`` runs over the
    broadcast of Q's and K's leading dims, with grouped-query attention (``Hk`` divides ``Hq``)
    every query head doing its own products; the mask (and V) may broadcast the scores further,
    to the output's leading dims, over which softmax and ``P V`` run. So
    MACs ``= prod(bcast(Q, K)[:-2]) * L * S * E + scores * Ev`` with
    ``scores = prod(out[:-2]) * L * S`` (without ``out``: the broadcast of Q's, K's and V's).
    """
    q_lead, k_lead, v_lead = tuple(q[:-2]), _heads_as(tuple(k[:-2]), q), _heads_as(tuple(v[:-2]), q)
    length, s = q[-2], k[-2]
    qk_rows = prod(broadcast(q_lead, k_lead)) * length
    lead = out[:-2] if out is not None else broadcast(q_lead, k_lead, v_lead)
    scores = prod(lead) * length * s
    return qk_rows * s * q[-1] + scores * v[-1], scores


def _heads_as(lead: tuple[int, ...], q: Sequence[int]) -> tuple[int, ...]:
    """Key/value leading dims with grouped-query heads (a divisor of the query's) repeated."""
    heads = q[-3] if len(q) >= 3 else None
    if lead and heads is not None and lead[-1] not in (1, heads) and heads % lead[-1] == 0:
        return (*lead[:-1], heads)
    return lead


def einsum_macs(equation: str, shapes: Sequence[Sequence[int]]) -> tuple[int, int]:
    """MACs of ``torch.einsum`` contracted left to right, and its other FLOPs, as torch computes it.

    Each pairwise step that sums an index of size > 1 shared by both operands is a batched
    matmul: ``prod(size of every index in either operand)`` MACs. A step that sums nothing (an
    outer or elementwise product) is a broadcast multiply: that many FLOPs and no MACs.
    Sums torch does first, one add per element of the operand summed (FLOPs, no MACs):
    an index found in one operand only and neither in the output nor a later operand; and a summed
    index that broadcasts (size 1 in one operand, n in the other), which the operand of size n
    sums out before the product (so "ij,jk->ik" with j of sizes 1 and 3 is a sum and a multiply,
    no MACs, as FlopCounterMode sees it on meta tensors). One operand alone has no MACs: a
    transpose is free, a sum over indices is one add per element. A step with an index of size 0
    in either operand does no arithmetic (its product is empty, or all zeros when the size-0 index
    is summed), while the steps before and after it still count, as FlopCounterMode counts them:
    "ij,jk,kl->il" of (3,0), (0,2), (2,5) is 0 + 3*2*5 MACs. Returns ``(macs, extra_flops)``.
    """
    eq = equation.replace(" ", "")
    if "->" in eq:
        lhs, out = eq.split("->")
    else:
        # implicit output: the broadcast "..." dims first, then indices used once, alphabetically
        lhs = eq
        letters = [c for c in lhs.replace(",", "").replace(".", "") if c.isalpha()]
        out = ("..." if "..." in lhs else "") + "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    terms = lhs.split(",")
    if "..." in eq:
        terms, out = _expand_ellipsis(terms, out, shapes)
    operands = [dict(zip(term, (int(d) for d in shape))) for term, shape in zip(terms, shapes)]

    extra = 0
    for i, dims in enumerate(operands):
        needed = set(out).union(*(o for j, o in enumerate(operands) if j != i))
        lone = dims.keys() - needed
        if lone and len(operands) > 1:
            extra += prod(dims.values())
            operands[i] = {c: n for c, n in dims.items() if c not in lone}
    if len(operands) == 1:
        # one operand: a transpose/diagonal is free; summing indices out is one add per element
        dims = operands[0]
        return 0, (prod(dims.values()) if dims.keys() - set(out) else 0)
    macs = 0
    current = operands[0]
    for i in range(1, len(operands)):
        other = dict(operands[i])
        later = set(out).union(*operands[i + 1:])
        summed = (current.keys() & other.keys()) - later
        for c in summed:  # a broadcast contraction index: the operand where it is > 1 sums it out first
            if current[c] == 1 and other[c] > 1:
                extra += prod(other.values())
                other[c] = 1
            elif other[c] == 1 and current[c] > 1:
                extra += prod(current.values())
                current = {**current, c: 1}
        # an index's size in the product: the larger where one operand broadcasts it (size 1), but 0
        # where either operand is empty along it (an empty operand makes an empty or all-zero product)
        step = {c: _joint(current.get(c, 1), other.get(c, 1)) for c in (*current, *other)}
        if any(step[c] > 1 for c in summed):
            macs += prod(step.values())
        else:
            # nothing (left) to accumulate: torch multiplies elementwise (broadcast), one FLOP a product
            extra += prod(step.values())
        current = {c: n for c, n in step.items() if c in later}
    return macs, extra


def _joint(a: int, b: int) -> int:
    # the size of an index shared by two operands: 0 if either is 0, else the broadcast size
    return 0 if a == 0 or b == 0 else max(a, b)


def _expand_ellipsis(terms: list[str], out: str, shapes: Sequence[Sequence[int]]) -> tuple[list[str], str]:
    # Replace "..." with fresh upper-case-free placeholder letters, right-aligned as broadcasting is.
    spare = [chr(c) for c in range(0x100, 0x200)]
    width = max((len(s) - (len(t) - 3) for t, s in zip(terms, shapes) if "..." in t), default=0)
    fill = "".join(spare[:width])
    new_terms = []
    for t, s in zip(terms, shapes):
        if "..." in t:
            n = len(s) - (len(t) - 3)
            t = t.replace("...", fill[width - n:])
        new_terms.append(t)
    return new_terms, out.replace("...", fill)


def adaptive_window_total(in_size: int, out_size: int) -> int:
    """Sum of window lengths of an adaptive pool along one dim.

    Window ``i`` spans ``[floor(i*I/O), ceil((i+1)*I/O))`` (as ATen's adaptive pooling does).
    """
    return sum(-(-(i + 1) * in_size // out_size) - (i * in_size // out_size) for i in range(out_size))


def sdpa_backward_macs(q: Sequence[int], k: Sequence[int], v: Sequence[int],
                       grad_out: Sequence[int]) -> tuple[int, int]:
    """MACs of attention's backward and the number of attention scores.

    A fused backward (FlashAttention-2, Dao 2023, Algorithm 2) recomputes ``S = Q K^T``, then
    ``dP = dO V^T``, ``dV = P^T dO``, ``dQ = dS K`` and ``dK = dS^T Q``: the forward's two
    matmuls (:func:`sdpa_macs`, with the gradient of the output as the output) plus
    ``scores * (Ev + 2 E)``; ``scores * (3 E + 2 Ev)`` without broadcasting, as FlopCounterMode's
    ``sdpa_backward_flop_count``. Grouped-query key/value heads count per query head.
    """
    forward, scores = sdpa_macs(q, k, v, grad_out)
    return forward + scores * (v[-1] + 2 * q[-1]), scores


def aa_window_total(in_size: int, out_size: int, interp_size: int, align_corners: bool,
                    scale: float | None = None) -> int:
    """Sum over the outputs along one dim of the input taps of an antialiased interpolation
    (``interpolate(..., antialias=True)``; ``interp_size`` 2 bilinear, 4 bicubic).

    As ATen's ``_compute_indices_min_size_weights_aa``: ``scale`` is ``in/out`` (``(in-1)/(out-1)``
    with ``align_corners``, ``1/scale_factor`` when given); the filter's support is
    ``interp_size/2``, widened by ``scale`` when downsampling; output ``i`` reads the inputs in
    ``[center - support + 0.5, center + support + 0.5)`` around ``center = scale * (i + 0.5)``,
    clipped to the input.
    """
    if align_corners:
        ratio = (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    else:
        ratio = 1.0 / scale if scale is not None and scale > 0 else in_size / out_size
    support = interp_size * 0.5 * ratio if ratio >= 1.0 else interp_size * 0.5
    total = 0
    for i in range(out_size):
        center = ratio * (i + 0.5)
        low = max(int(center - support + 0.5), 0)
        total += max(min(int(center + support + 0.5), in_size) - low, 0)
    return total

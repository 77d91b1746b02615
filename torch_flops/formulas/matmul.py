"""Linear layers and the matmul family: linear, bilinear, matmul/@, mm, bmm, mv, dot, addmm,
baddbmm, addbmm, addmv, einsum, outer and addr, the fp8/int8 matmuls (``_scaled_mm``, ``_int_mm``),
grouped matmuls of mixture-of-experts layers, and the distances (cdist, pdist, dist). All MACs go through
``_shapes.matmul_macs``/``einsum_macs``; with complex operands every MAC is 4 real MACs and every
add 2 real FLOPs (``_shapes.COMPLEX_*``)."""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.modules.linear import NonDynamicallyQuantizableLinear

from torch_flops.formulas import Count, FlopCount, Name, aten_ops, functions, methods, modules, register
from torch_flops.formulas._shapes import (
    COMPLEX_ADD,
    COMPLEX_MAC,
    COMPLEX_MUL,
    arg,
    broadcast,
    complex_factor,
    einsum_macs,
    first_output,
    float_numel,
    has_tensor,
    is_float,
    matmul_macs,
    numel,
    prod,
)

__all__ = ["addmm_flops", "addr_flops", "bilinear_flops", "dist_flops", "einsum_flops", "grouped_mm_flops",
           "linear_flops", "matmul_flops", "pdist_flops"]


@register(*modules("Linear", "LazyLinear"), NonDynamicallyQuantizableLinear, *functions("linear"), *aten_ops("linear"))
def linear_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> FlopCount:
    # macs = output elements * in_features; flops = 2*macs + one bias add per output element.
    # nn.Linear: in_features is a plain attribute (parameters go through nn.Module.__getattr__,
    # slow: read the dict once); F.linear(input, weight, bias): weight is (out, in).
    if module is not None:
        in_features, has_bias = module.in_features, module._parameters.get("bias") is not None
    else:
        in_features = arg(args, kwargs, 1, "weight").shape[-1]
        has_bias = arg(args, kwargs, 2, "bias") is not None
    n = out.numel()
    macs = n * in_features
    if out.is_complex():  # complex: 4 real MACs a MAC, 2 real adds a bias add; a complex output is 2 real
        return _dots(2 * COMPLEX_MAC * macs + (COMPLEX_ADD * n if has_bias else 0), COMPLEX_MAC * macs, n, mm=macs)
    return (2 * macs + n if has_bias else 2 * macs), macs, n, macs  # a plain Count: this runs for every Linear


@register(Name("module", "transformers.pytorch_utils.Conv1D"))
def hf_conv1d_flops(module: Any, out: Any, x: Any) -> FlopCount:
    # transformers' Conv1D (GPT-2's projections): out = bias + x @ weight, weight (nx, nf): a Linear
    # with its weight transposed, so macs = output elements * nx; flops = 2*macs + one bias add per
    # output element (the addmm's bias)
    n = out.numel()
    macs = n * module.nx
    return 2 * macs + n, macs, n, macs


def _dots(flops: int, macs: int, outputs: int, mm: int | None = None) -> Count:
    """A count of ``outputs`` dot products (two real ones each when ``macs`` are complex: see
    ``mm``): ``mm`` is what a matrix-multiply kernel counts (FlopCounterMode: one per complex MAC,
    0 for mv/dot/...); by default all ``macs``."""
    complex_ = mm is not None and mm > 0 and macs == COMPLEX_MAC * mm
    return Count(flops, macs, 2 * outputs if complex_ else outputs, macs if mm is None else mm)


@register(*modules("Bilinear"), *functions("bilinear"), *aten_ops("bilinear"))
def bilinear_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> Count | tuple[int, int]:
    # y_k = x1^T W_k x2: W_k x2 is in1*in2 MACs, then the dot with x1 is in1 MACs, per output.
    # (FlopCounterMode counts aten._trilinear as 0; we count the real work.)
    # F.bilinear(input1, input2, weight, bias) with weight (out, in1, in2)
    if module is not None:
        in1, in2, has_bias = module.in1_features, module.in2_features, has_tensor(module, "bias")
    else:
        weight = arg(args, kwargs, 2, "weight")
        in1, in2, has_bias = weight.shape[1], weight.shape[2], arg(args, kwargs, 3, "bias") is not None
    macs = numel(out) * (in1 * in2 + in1)
    # per output: in1 dot products of length in2, then one of length in1; FlopCounterMode counts
    # aten._trilinear as 0
    return Count(2 * macs + (numel(out) if has_bias else 0), macs, numel(out) * (in1 + 1), 0)


_MATMUL = ("matmul", "mm", "bmm", "mv", "dot", "vdot")


def _operands(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """The two matrices of a matmul-like call, given by position or by any of torch's keywords."""
    a = args[0] if args else kwargs.get("input", kwargs.get("self"))
    b = args[1] if len(args) > 1 else next(kwargs[k] for k in ("other", "mat2", "vec", "tensor") if k in kwargs)
    return a, b


@register(*functions(*_MATMUL, "linalg_matmul"), *methods(*_MATMUL, "__matmul__"), *aten_ops(*_MATMUL, "linalg_matmul"))
def matmul_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> Count | tuple[int, int]:
    # 2*M*K*N per (broadcast) batch: one mul + one add per MAC; see _shapes.matmul_macs
    # (FlopCounterMode counts mv/dot as 0; they are real MACs here.)
    a, b = _operands(args, kwargs)
    if a.dim() == 1 and b.dim() == 1:
        macs = a.shape[0]  # dot / inner of vectors: k MACs
    else:
        macs = matmul_macs(a.shape, b.shape)
    factor = complex_factor(COMPLEX_MAC, a, b)
    if a.layout != torch.strided or b.layout != torch.strided:  # a sparse factor: its kernel's MACs are
        # those of its stored elements (as torch.sparse.mm); FlopCounterMode counts the dense product
        sparse = sparse_macs(a, b) * factor
        return _dots(2 * sparse, sparse, max(numel(first_output(out)), 1), 0 if b.dim() == 1 else macs)
    # which kernel runs decides FlopCounterMode's count: a matrix-vector product (aten mv/dot) counts 0
    mv = _runs_mv(a, b, kwargs.get("out") is not None)
    return _dots(2 * macs * factor, macs * factor, max(numel(first_output(out)), 1), 0 if mv else macs)


def _runs_mv(a: Any, b: Any, has_out: bool) -> bool:
    """Whether ``torch.matmul(a, b)`` runs a matrix-vector kernel (mv, dot) rather than a bmm, as
    ATen's ``matmul`` chooses (``should_fold`` in aten/src/ATen/native/LinearAlgebra.cpp): a vector
    with a vector or a matrix, mv; a vector with a batch (3-D or more) is folded into one mv when the
    vector requires grad (and there is no ``out=``), when the batch is empty, or when its batch
    dimensions view as one without a copy (the batch on the right is read transposed); else the
    vector is broadcast into a bmm."""
    if b.dim() == 1:
        if a.dim() <= 2:
            return True
        big, small = a, b
    elif a.dim() == 1 and b.dim() >= 3:
        big, small = b.mT, a
    else:
        return False
    if (small.requires_grad and not has_out) or big.numel() == 0:
        return True
    shape, strides = big.shape, big.stride()
    return all(strides[i] == strides[i + 1] * shape[i + 1] for i in range(big.dim() - 2))


@register(*methods("__rmatmul__"))
def rmatmul_flops(module: Any, out: Any, a: Any, b: Any) -> Count | tuple[int, int]:
    # a.__rmatmul__(b) computes b @ a
    return matmul_flops(module, out, b, a)


@register(torch._scaled_mm, *aten_ops("_scaled_mm", "_scaled_mm_v2"))
def scaled_mm_flops(module: Any, out: Any, a: Any, b: Any, *args: Any, **kwargs: Any) -> Count | tuple[int, int]:
    # fp8 (M, K) x (K, N): 2*M*K*N, + 2 per output element for the two scales (scale_a, scale_b)
    # applied to the accumulator, + 1 bias add per output element when a bias is given
    # (_scaled_mm(self, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype, ...))
    macs = matmul_macs(a.shape, b.shape)
    bias = arg(args, kwargs, 2, "bias")
    n = numel(first_output(out))
    return _dots(2 * macs + 2 * n + (n if bias is not None else 0), macs, n)


@register(torch._int_mm, *aten_ops("_int_mm"))
def int_mm_flops(module: Any, out: Any, a: Any, b: Any, *args: Any, **kwargs: Any) -> Count | tuple[int, int]:
    # int8 (M, K) x (K, N) -> int32: M*K*N integer multiply-accumulates. Counted as MACs like any
    # other dot product (they are the matmul's work); FlopCounterMode counts _int_mm as 0.
    macs = matmul_macs(a.shape, b.shape)
    return _dots(2 * macs, macs, numel(out), 0)


@register(*functions("inner"), *methods("inner"), *aten_ops("inner"))
def inner_flops(module: Any, out: Any, a: Any, b: Any) -> Count | tuple[int, int]:
    # inner contracts the last dim of both operands: every output element is a K-term dot product
    if a.dim() == 0 or b.dim() == 0:
        return numel(out), 0  # a scalar operand: a plain multiply
    outputs = max(numel(out), 1)
    macs = outputs * a.shape[-1]
    return _dots(2 * macs, macs, outputs, 0 if a.dim() == 1 and b.dim() == 1 else macs)  # 1-D: aten.dot


def _scaled_add(out: Any, kwargs: Any) -> int:
    # the add of `input` (1 per output element), plus one multiply per output element for each
    # of alpha/beta that is not 1 (beta == 0 skips the input entirely)
    n = numel(out)
    beta = kwargs.get("beta", 1)
    alpha = kwargs.get("alpha", 1)
    if beta == 0:
        return n if alpha != 1 else 0
    return n + (n if beta != 1 else 0) + (n if alpha != 1 else 0)


_ADDMM = ("addmm", "addmv", "baddbmm", "addbmm")
_ADDMM_KEYWORDS = (("mat1", "mat2"), ("mat", "vec"), ("batch1", "batch2"))


def _addmm_operands(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """The two factors of addmm(input, mat1, mat2) / addmv(input, mat, vec) / (add)baddbmm(input,
    batch1, batch2), by position or keyword."""
    for first, second in _ADDMM_KEYWORDS:
        if len(args) >= 3 or first in kwargs or second in kwargs:
            return arg(args, kwargs, 1, first), arg(args, kwargs, 2, second)
    raise TypeError(f"no matrix operands among {len(args)} argument(s) and keywords {sorted(kwargs)}")


@register(*functions(*_ADDMM), *methods(*_ADDMM),
          *(op for op in (getattr(torch.ops.aten, n, None) for n in _ADDMM) if op is not None))
def addmm_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> Count | tuple[int, int]:
    # beta*input + alpha*(a @ b): 2*M*K*N for the product (addbmm sums the batch of products: its
    # batch sum is part of the accumulation, B*M*K*N MACs), + the scaled add per output element
    a, b = _addmm_operands(args, kwargs)
    factor = complex_factor(COMPLEX_MAC, a, b)
    macs = matmul_macs(a.shape, b.shape)
    # dot outputs: one per product element (addbmm's batch sum is part of each dot product);
    # FlopCounterMode counts addmm and baddbmm, but addmv and addbmm as 0 (and a sparse factor's
    # product as dense)
    counted = 0 if b.dim() == 1 or (a.dim() == 3 and out.dim() == 2) else macs
    if a.layout != torch.strided or b.layout != torch.strided:  # the stored elements' MACs (sparse_macs)
        macs = sparse_macs(a, b)
    return _dots(2 * macs * factor + _scaled_add(out, kwargs) * (COMPLEX_ADD if factor > 1 else 1), macs * factor,
                 numel(out), counted)


@register(*methods(*(f"{n}_" for n in _ADDMM)),
          *(op for op in (getattr(torch.ops.aten, f"{n}_", None) for n in _ADDMM) if op is not None))
def addmm_inplace_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> Count:
    # x.addmm_(a, b), ...: the work of addmm; FlopCounterMode's table holds the functional packets only
    # (aten.addmm, aten.baddbmm), so its kernels' count of the in-place forms is 0
    count = addmm_flops(module, out, *args, **kwargs)
    return count._replace(mm_macs=0) if isinstance(count, Count) else Count(*count, None, 0)


def _stored(t: Any) -> int:
    """The values a sparse tensor stores (a block layout's: its blocks' elements; a hybrid COO's: its
    dense parts' elements too)."""
    return int((t._values() if t.layout == torch.sparse_coo else t.values()).numel())


def sparse_macs(a: Any, b: Any) -> int:
    """MACs of ``a @ b`` with a sparse factor, as its kernel does them: each stored element of a
    sparse ``a`` (M x K) meets one row of ``b`` (N of them; a vector: 1); each stored element of a
    sparse ``b`` (K x N) meets every row of ``a`` (its elements / K; a vector: 1); two sparse factors:
    per k, the stored elements of a's column k times those of b's row k (read from their indices)."""
    if a.layout != torch.strided and b.layout != torch.strided:
        k = a.shape[-1]
        cols = (a if a.layout == torch.sparse_coo else a.to_sparse()).coalesce().indices()[-1]
        rows = (b if b.layout == torch.sparse_coo else b.to_sparse()).coalesce().indices()[-2]
        return int((torch.bincount(cols, minlength=k) * torch.bincount(rows, minlength=k)).sum())
    if a.layout != torch.strided:
        return _stored(a) * (b.shape[-1] if b.dim() > 1 else 1)
    return _stored(b) * (numel(a) // a.shape[-1] if a.dim() > 1 and a.shape[-1] else 1)


@register(*aten_ops("_sparse_addmm", "_sparse_mm", "_sparse_sparse_matmul"), torch.sparse.mm, torch.sparse.addmm)
def sparse_mm_flops(module: Any, out: Any, *args: Any, **kwargs: Any) -> Count:
    # torch.sparse.mm / torch.sparse.addmm (aten._sparse_addmm(input, sparse, dense, beta, alpha),
    # _sparse_mm(sparse, dense), _sparse_sparse_matmul(sparse, sparse)): the stored elements' MACs
    # (sparse_macs; 4 real ones a complex one) + the scaled add of addmm per output element.
    # FlopCounterMode: 0. (The torch functions too: a graph front end keeps them as one call.)
    a, b = (args[1], args[2]) if len(args) >= 3 else (args[0], args[1])
    factor = complex_factor(COMPLEX_MAC, a, b)
    macs = sparse_macs(a, b) * factor
    extra = _scaled_add(out, kwargs) * (COMPLEX_ADD if factor > 1 else 1) if len(args) >= 3 else 0
    return _dots(2 * macs + extra, macs, numel(out), 0)


@register(*functions("einsum"), *aten_ops("einsum"))
def einsum_flops(module: Any, out: Any, equation: str, *operands: Any, **kwargs: Any) -> Count | tuple[int, int]:
    # pairwise left to right; see _shapes.einsum_macs
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)) or operands and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    macs, extra = einsum_macs(equation, [o.shape for o in operands])
    outputs = numel(out) if macs else 0  # the MAC steps' outputs (exact only for one step)
    if any(o.is_complex() for o in operands):  # 4 real MACs a complex MAC, 2 real FLOPs an add
        return _dots(2 * COMPLEX_MAC * macs + COMPLEX_ADD * extra, COMPLEX_MAC * macs, outputs, macs)
    return _dots(2 * macs + extra, macs, outputs)


@register(*functions("linalg_vecdot"), *aten_ops("linalg_vecdot"))
def vecdot_flops(module: Any, out: Any, x: Any, y: Any, *args: Any, **kwargs: Any) -> Count | tuple[int, int]:
    # torch.linalg.vecdot(x, y, *, dim=-1): every output element is the dot product of conj(x) and
    # y along dim, n MACs (n: their broadcast size there); FlopCounterMode sees a mul and a sum (0)
    n = broadcast(tuple(x.shape), tuple(y.shape))[int(kwargs.get("dim", -1))]
    factor = complex_factor(COMPLEX_MAC, x, y)
    macs = numel(out) * n
    return _dots(2 * macs * factor, macs * factor, numel(out), 0)


@register(*functions("outer", "ger"), *methods("outer", "ger"), *aten_ops("outer", "ger"))
def outer_flops(module: Any, out: Any, a: Any, b: Any) -> Count | tuple[int, int]:
    # an outer product sums nothing: one multiply per output element, no MACs
    return numel(out), 0


@register(*functions("addr"), *methods("addr", "addr_"), *aten_ops("addr"))
def addr_flops(module: Any, out: Any, x: Any, vec1: Any, vec2: Any, *args: Any, **kwargs: Any) -> int:
    # beta*input + alpha*outer(vec1, vec2): one multiply per output element (an outer product sums
    # nothing: no MACs) + the scaled add (_scaled_add); complex data: 6 per multiply, 2 per add
    n = float_numel(out, vec1)
    if n and out.is_complex():
        return n * COMPLEX_MUL + _scaled_add(out, kwargs) * COMPLEX_ADD
    return n + (_scaled_add(out, kwargs) if n else 0)


@register(*aten_ops("_grouped_mm", "_scaled_grouped_mm"), Name("aten", "transformers.grouped_mm_fallback"),
          Name("aten", "transformers.grouped_mm"))
def grouped_mm_flops(module: Any, out: Any, a: Any, b: Any, *args: Any, **kwargs: Any) -> Count | tuple[int, int]:
    # grouped matmul of token rows by per-group weights: (M, K) x (G, K, N) with offsets puts every
    # row through exactly one group's (K, N) matrix: M*K*N MACs. 3-D x 3-D is a plain batched mm.
    # (_scaled_grouped_mm: the same products in fp8; its per-output scaling is not counted.)
    if a.dim() == 2 and b.dim() == 3:
        macs = a.shape[0] * a.shape[1] * b.shape[-1]
    elif a.dim() == 2 and b.dim() == 2:  # (M, K) x (K, N_total) grouped along N, or (K, M)^T x ...
        macs = a.shape[0] * a.shape[1] * b.shape[-1] if a.shape[1] == b.shape[0] else numel(out) * a.shape[0]
    else:
        macs = numel(out) * a.shape[-1]
    return _dots(2 * macs, macs, numel(first_output(out)), 0)  # FlopCounterMode: 0 for grouped mm


# ---------------------------------------------------------------------------------------------
# Pairwise distances (torch.cdist). x1 (B.., P, M), x2 (B.., R, M) -> (B.., P, R).
# ---------------------------------------------------------------------------------------------

@register(*aten_ops("_euclidean_dist"))
def euclidean_dist_flops(module: Any, out: Any, x1: Any, x2: Any, *args: Any, **kwargs: Any) -> Count:
    # cdist's p=2 matmul path (ATen Distance.cpp): the squared norms of x1's and x2's rows (square
    # + add: 2 per element), x1 * -2 (1 per element), then one matmul of [-2 x1, |x1|^2, 1] by
    # [x2, 1, |x2|^2]^T, (M + 2) MACs per output, then clamp_min(0) and sqrt, 2 per output.
    # FlopCounterMode counts this op as 0 (mm_macs 0).
    if not torch.is_floating_point(out):
        return Count(0, 0, 0, 0)
    m = int(x1.shape[-1])
    outputs = numel(out)
    macs = outputs * (m + 2)
    return Count(2 * macs + 3 * numel(x1) + 2 * numel(x2) + 2 * outputs, macs, outputs, 0)


def _p_distances(outputs: int, m: int, p: float) -> int:
    # per output and dim, a subtract, then |d| (p=1, inf), d*d (p=2), d != 0 (p=0) or |d|^p (other
    # p: abs and pow, 2) and the sum (or max, p=inf); then the root: sqrt (p=2) or ^(1/p) (other
    # p), 1 per output. Not dot products: FLOPs only.
    if p in (0, 1, float("inf")):
        return outputs * 3 * m
    if p == 2:
        return outputs * (3 * m + 1)
    return outputs * (4 * m + 1)


@register(*aten_ops("_cdist_forward"))
def cdist_forward_flops(module: Any, out: Any, x1: Any, x2: Any, p: float, *args: Any, **kwargs: Any) -> int:
    # cdist's direct path: _p_distances of rows of length M, one per output
    if not torch.is_floating_point(out):
        return 0
    return _p_distances(numel(out), int(x1.shape[-1]), p)


@register(*functions("pdist"), *aten_ops("pdist", "_pdist_forward"))
def pdist_flops(module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
    # F.pdist(input (N, M), p=2) / aten._pdist_forward(self, p): the N(N-1)/2 distances between
    # rows, each _p_distances of rows of length M
    if not is_float(out):
        return 0
    return _p_distances(numel(out), int(x.shape[-1]), float(arg(args, kwargs, 0, "p", 2.0)))


@register(*functions("dist"), *methods("dist"), *aten_ops("dist"))
def dist_flops(module: Any, out: Any, x: Any, other: Any, *args: Any, **kwargs: Any) -> int:
    # torch.dist(input, other, p=2): the p-norm of input - other, one distance over the M elements
    # of their broadcast: _p_distances with one output
    if not is_float(out):
        return 0
    m = prod(broadcast(tuple(x.shape), tuple(getattr(other, "shape", ()))))
    return _p_distances(1, m, float(arg(args, kwargs, 0, "p", 2)))

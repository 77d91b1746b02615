"""Linear algebra beyond matmuls: triangular solves; the LU, Cholesky, LDL and QR factorizations and
what is built on them (solve, inverse, det, slogdet, lstsq, Householder products); the symmetric and
general eigenvalue problems; the SVD and what is built on it (svdvals, pinv, matrix norms, cond,
matrix_rank); the matrix exponential; the trace. (The matmul family is in matmul.py; the checks linalg runs,
``_linalg_check_errors``, and ``lu_unpack`` are 0 in zero.py.)

FLOPs, not MACs. A factorization's work is rank-1 and rank-k updates, reflections and iterations,
stated in the literature as operation counts: it is counted in FLOPs (one add, multiply, divide or
square root each) with ``macs`` 0, so the ``flop_counter`` convention counts it 0, as
FlopCounterMode does (it has no entry for any of these ops, on any device). Only a fixed matrix
product that an op runs inside itself (the matrix exponential's Taylor products, the product of
the pseudo-inverse's factors) is counted as MACs, with ``mm_macs`` 0: FlopCounterMode does not see
a product inside an op either.

The counts, per matrix (a batch multiplies them; ``k = min(m, n)``, ``M = max(m, n)``):

* substitution (a triangular solve by forward or back substitution; Golub & Van Loan, *Matrix
  Computations*, 4th ed., section 3.1.2: "forward substitution requires n^2 flops"): per right-hand
  side of length ``n``, ``n(n-1)/2`` multiplies, as many subtractions and ``n`` divisions, ``n^2``
  in all (``n(n-1)`` when the diagonal is known to be 1, ``unitriangular``). A solution of ``R``
  right-hand sides has ``R*n`` elements, so the count is ``n`` FLOPs per solution element (``n - 1``
  unitriangular). Complex data counts each operation's real FLOPs (``_shapes.COMPLEX_*``).
* LU with partial pivoting of an ``m x n`` matrix (LAPACK getrf; GVL section 3.2, "2n^3/3 flops"):
  step ``j`` computes ``m-1-j`` multipliers and updates the ``(m-1-j) x (n-1-j)`` block below and
  right of the pivot with one multiply and one subtract per element, ``sum_j (m-1-j)(2(n-1-j)+1)``
  exactly: ``2n^3/3 - n^2/2 - n/6`` for a square matrix, LAPACK Working Note 41's count for getrf.
  Pivot searches are comparisons, not counted.
* Cholesky (potrf; GVL algorithm 4.2.1, "n^3/3 flops"): column ``j`` has ``n-j`` entries of ``j``
  multiply-subtract pairs and one square root or divide: ``n(n+1)(2n+1)/6`` exactly
  (``n^3/3 + n^2/2 + n/6``, LAWN 41's count for potrf).
* LDL^T with Bunch-Kaufman pivoting (sytrf; GVL section 4.4.4): ``n^3/3``.
* Householder QR (geqrf; GVL algorithm 5.2.1, ``2n^2(m - n/3)`` for ``m >= n``), forming ``Q`` from
  ``k`` reflectors (orgqr) and applying them (ormqr), as LAWN 41 counts them: ``k`` reflectors on
  an ``m x n`` matrix cost ``4mnk - 2(m+n)k^2 + 4k^3/3`` (geqrf: ``k = min(m, n)``; orgqr: ``Q`` is
  ``m x n``); applying ``k`` reflectors of length ``m`` to ``p`` vectors ``4mpk - 2pk^2``.
* the inverse of a Cholesky factor's matrix (potri; LAWN 41): ``2n^3/3``.
* the symmetric eigenvalue problem (syevd; GVL section 8.3, the symmetric QR algorithm): ``4n^3/3``
  for the eigenvalues, ``9n^3`` with the eigenvectors.
* the general eigenvalue problem (geev; GVL section 7.5.6, the practical QR algorithm): ``10n^3``
  for the eigenvalues, ``25n^3`` for the Schur form and its vectors, then the eigenvectors of the
  triangular factor by back substitution (the ``i``-th one a triangular solve of order ``i``, about
  ``n^3/3`` in all) and their transformation by the Schur vectors (``n^3``; LAPACK trevc): ``79n^3/3``.
* the SVD (GVL section 8.6.3, the Golub-Reinsch table): singular values ``4Mk^2 - 4k^3/3``; with
  the thin ``U`` and ``V`` ``14Mk^2 + 8k^3``; with the full ``U`` and ``V`` ``4M^2k + 8Mk^2 + 9k^3``.

Where a count is an integer polynomial (substitution, LU, Cholesky) it is exact; elsewhere it is the
leading term, kept in thirds of a FLOP and rounded once per node. Complex data counts 4 times the
real count (LAWN 41 counts a complex multiply as 6 real FLOPs and a complex add as 2: a
multiply-add is 8 against 2), the substitutions excepted (counted per operation, above).

When autograd records the call (its output requires grad), torch computes what the backward needs:
``svdvals``, ``eigvalsh`` and ``eigvals`` then compute the vectors too, and are counted so.
"""

from __future__ import annotations

from typing import Any

import torch

from torch_flops.formulas import Count, aten_ops, functions, methods, register
from torch_flops.formulas._shapes import (
    COMPLEX_ADD,
    COMPLEX_DIV,
    COMPLEX_MAC,
    COMPLEX_MUL,
    COMPLEX_OTHER,
    arg,
    broadcast,
    first_output,
    float_numel,
    is_float,
    numel,
    prod,
)

__all__ = [
    "cholesky_flops", "cond_flops", "det_flops", "eig_flops", "eigh_flops", "inverse_flops", "lstsq_flops",
    "lu_factor_flops", "matrix_exp_flops", "matrix_norm_count", "matrix_norm_flops", "matrix_rank_flops",
    "pinv_flops", "qr_flops", "solve_flops", "solve_triangular_flops", "svd_flops", "trace_flops",
    "triangular_solve_flops",
]

Tensor = torch.Tensor


# ---------------------------------------------------------------------------------------------
# Shape arithmetic: counts per matrix (leading terms in thirds of a FLOP), batches, complex data
# ---------------------------------------------------------------------------------------------

def _per_element(n: int, unitriangular: bool, complex_: bool) -> int:
    # one substitution, per solution element: (n-1) multiply-subtract pairs + 1 divide (none
    # unitriangular), so n - 1 + 1 = n real FLOPs; complex data: a pair is 6 + 2, a divide 11
    if complex_:
        return (n - 1) * (COMPLEX_MUL + COMPLEX_ADD) // 2 + (0 if unitriangular else COMPLEX_DIV)
    return n - 1 + (0 if unitriangular else 1)


def _substitution(solution: Any, a: Any, unitriangular: bool) -> int:
    # _per_element for every element of the solution (0 unless its data is floating point)
    elements = float_numel(solution, a)
    return elements * _per_element(int(a.shape[-1]), unitriangular, bool(elements) and solution.is_complex())


def _lu_substitutions(solution: Any, lu: Any) -> int:
    # L y = P b (L unit lower triangular), then U x = y: (n - 1) + n per solution element
    return _substitution(solution, lu, True) + _substitution(solution, lu, False)


def _lu(m: int, n: int) -> int:
    # sum over the k = min(m, n) steps j of (m-1-j) multipliers + 2 (m-1-j)(n-1-j) updates, in closed
    # form: with a = m-1-j, b = n-1-j, sum a(1 + 2b) = sum (m-1) - j + 2[(m-1)(n-1) - j(m+n-2) + j^2]
    k = min(m, n)
    s1, s2 = k * (k - 1) // 2, (k - 1) * k * (2 * k - 1) // 6  # sum of j, of j^2 over j < k
    return k * (m - 1) - s1 + 2 * (k * (m - 1) * (n - 1) - s1 * (m + n - 2) + s2)


def _cholesky(n: int) -> int:
    # sum over columns j of (n - j) entries x (j multiply-subtract pairs + 1 sqrt or divide)
    return n * (n + 1) * (2 * n + 1) // 6


def _reflectors3(m: int, n: int, k: int) -> int:
    # thirds of 4mnk - 2(m+n)k^2 + 4k^3/3: k Householder reflectors on an m x n matrix (geqrf, orgqr)
    return 12 * m * n * k - 6 * (m + n) * k * k + 4 * k ** 3


def _apply_reflectors3(length: int, vectors: int, k: int) -> int:
    # thirds of 4 m p k - 2 p k^2: k reflectors of length m applied to p vectors (ormqr)
    return 3 * (4 * length * vectors * k - 2 * vectors * k * k)


def _svd3(m: int, n: int, vectors: str | None) -> int:
    # thirds of GVL's Golub-Reinsch counts, M x k with M >= k (a wide matrix as its transpose):
    # values 4Mk^2 - 4k^3/3; thin U, V 14Mk^2 + 8k^3; full U, V 4M^2k + 8Mk^2 + 9k^3
    big, k = max(m, n), min(m, n)
    if vectors is None:
        return 12 * big * k * k - 4 * k ** 3
    if vectors == "thin":
        return 42 * big * k * k + 24 * k ** 3
    return 12 * big * big * k + 24 * big * k * k + 27 * k ** 3


def _eigh3(n: int, vectors: bool) -> int:
    # thirds of 4n^3/3 (eigenvalues) or 9n^3 (with eigenvectors): GVL's symmetric QR algorithm
    return (27 if vectors else 4) * n ** 3


def _eig3(n: int, vectors: bool) -> int:
    # thirds of 10n^3 (eigenvalues) or 25n^3 + n^3/3 + n^3 = 79n^3/3 (with eigenvectors)
    return (79 if vectors else 30) * n ** 3


def _batch(a: Any) -> int:
    """The matrices of a batch: the product of the leading dims of ``a`` (1 for one matrix)."""
    return prod(int(d) for d in a.shape[:-2])


def _factor(a: Any) -> int:
    # 4 real FLOPs a FLOP for complex data (LAWN 41: a complex multiply-add is 8 real FLOPs against 2)
    return COMPLEX_MAC if a.is_complex() else 1


def _total(thirds: int, a: Any, batch: int | None = None) -> int:
    """A per-matrix count in thirds of a FLOP, over the batch of ``a`` (or ``batch``), times the
    complex factor, rounded to the nearest FLOP once per node; 0 unless ``a`` is floating point."""
    if not is_float(a):
        return 0
    return (thirds * (_batch(a) if batch is None else batch) * _factor(a) + 1) // 3


def _square(a: Any) -> int:
    return int(a.shape[-1])


def _needs_vectors(out: Any) -> bool:
    """Whether autograd recorded the call (its values output requires grad): then svdvals, eigvalsh
    and eigvals compute the vectors too, for the backward."""
    values = first_output(out)
    return isinstance(values, Tensor) and values.requires_grad


@register(*functions("trace"), *methods("trace"), *aten_ops("trace"))
def trace_flops(module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
    # the sum of the min(rows, cols) diagonal elements of a matrix: one add each, as sum counts
    # (complex data: 2 per add)
    if not is_float(x) or x.dim() != 2:
        return 0
    return min(int(x.shape[0]), int(x.shape[1])) * (COMPLEX_OTHER if x.is_complex() else 1)


# ---------------------------------------------------------------------------------------------
# Triangular solves
# ---------------------------------------------------------------------------------------------

@register(*functions("linalg_solve_triangular"), *aten_ops("linalg_solve_triangular"))
def solve_triangular_flops(module: Any, out: Any, a: Any, b: Any, *args: Any, **kwargs: Any) -> int:
    # torch.linalg.solve_triangular(A, B, *, upper, left=True, unitriangular=False): n FLOPs per
    # element of X (A X = B, or X A = B)
    return _substitution(first_output(out), a, arg(args, kwargs, 2, "unitriangular", False))


@register(*functions("triangular_solve"), *methods("triangular_solve"), *aten_ops("triangular_solve"))
def triangular_solve_flops(module: Any, out: Any, b: Any, a: Any, *args: Any, **kwargs: Any) -> int:
    # torch.triangular_solve(b, A, upper=True, transpose=False, unitriangular=False) -> (X, A clone)
    return _substitution(first_output(out), a, arg(args, kwargs, 2, "unitriangular", False))


# ---------------------------------------------------------------------------------------------
# LU and what is built on it: lu_factor, lu, lu_solve, solve, inverse, det, slogdet, logdet
# ---------------------------------------------------------------------------------------------

@register(*functions("linalg_lu_factor", "linalg_lu_factor_ex", "linalg_lu", "lu"), *methods("lu"),
          *aten_ops("linalg_lu_factor", "linalg_lu_factor_ex", "linalg_lu", "_lu_with_info"))
def lu_factor_flops(module: Any, out: Any, a: Any, *args: Any, **kwargs: Any) -> int:
    # LU of each m x n matrix of A (_lu, exact); linalg.lu's unpacking into P, L, U is a copy
    return _total(3 * _lu(int(a.shape[-2]), int(a.shape[-1])), a)


@register(*functions("linalg_lu_solve"), *aten_ops("linalg_lu_solve"))
def lu_solve_flops(module: Any, out: Any, lu: Any, pivots: Any, b: Any, *args: Any, **kwargs: Any) -> int:
    # torch.linalg.lu_solve(LU, pivots, B, *, left=True, adjoint=False): a unit lower and an upper
    # substitution per solution element, (n - 1) + n
    return _lu_substitutions(first_output(out), lu)


@register(*functions("lu_solve"), *methods("lu_solve"), *aten_ops("lu_solve"))
def lu_solve_legacy_flops(module: Any, out: Any, b: Any, lu: Any, *args: Any, **kwargs: Any) -> int:
    # torch.lu_solve(b, LU_data, LU_pivots): as linalg.lu_solve, (n - 1) + n per solution element
    return _lu_substitutions(first_output(out), lu)


@register(*functions("linalg_solve", "linalg_solve_ex"), *aten_ops("linalg_solve", "linalg_solve_ex", "_linalg_solve_ex"))
def solve_flops(module: Any, out: Any, a: Any, b: Any, *args: Any, **kwargs: Any) -> int:
    # torch.linalg.solve(A, B, *, left=True): the LU of each matrix of A (a B batched over more
    # matrices reuses it), then (n - 1) + n per solution element
    n = _square(a)
    return _total(3 * _lu(n, n), a) + _lu_substitutions(first_output(out), a)


@register(*functions("linalg_inv", "linalg_inv_ex", "inverse"), *methods("inverse"),
          *aten_ops("linalg_inv", "linalg_inv_ex", "inverse"))
def inverse_flops(module: Any, out: Any, a: Any, *args: Any, **kwargs: Any) -> int:
    # ATen inverts by solving A X = I with the LU (getrf + getrs, as linalg.solve(A, I)): the LU,
    # then (n - 1) + n per element of X: 2n^3/3 + 2n^3 = 8n^3/3 leading, not an explicit inverse
    # from the factors' 2n^3 (getri)
    n = _square(a)
    return _total(3 * _lu(n, n), a) + _lu_substitutions(first_output(out), a)


@register(*functions("linalg_det", "det"), *methods("det"), *aten_ops("linalg_det", "_linalg_det", "det"))
def det_flops(module: Any, out: Any, a: Any, *args: Any, **kwargs: Any) -> int:
    # the LU, then the product of U's n diagonal elements (n, as prod counts) times the
    # permutation's sign (1): LU + n + 1
    n = _square(a)
    return _total(3 * (_lu(n, n) + n + 1), a)


@register(*functions("linalg_slogdet", "slogdet"), *methods("slogdet"),
          *aten_ops("linalg_slogdet", "_linalg_slogdet", "slogdet"))
def slogdet_flops(module: Any, out: Any, a: Any, *args: Any, **kwargs: Any) -> int:
    # the LU, then over U's diagonal: the signs (n) and their product (n), times the permutation's
    # sign (1), and log|u| (abs, log: 2n) summed (n): LU + 5n + 1
    n = _square(a)
    return _total(3 * (_lu(n, n) + 5 * n + 1), a)


@register(*functions("logdet"), *methods("logdet"), *aten_ops("logdet"))
def logdet_flops(module: Any, out: Any, a: Any, *args: Any, **kwargs: Any) -> int:
    # slogdet (LU + 5n + 1), then per matrix: real data, sign == -1 and a select of nan (2);
    # complex data, log(sign) + logabsdet (2): LU + 5n + 3
    n = _square(a)
    return _total(3 * (_lu(n, n) + 5 * n + 3), a)


# ---------------------------------------------------------------------------------------------
# Cholesky and LDL^T
# ---------------------------------------------------------------------------------------------

@register(*functions("linalg_cholesky", "linalg_cholesky_ex", "cholesky"), *methods("cholesky"),
          *aten_ops("linalg_cholesky", "linalg_cholesky_ex", "cholesky"))
def cholesky_flops(module: Any, out: Any, a: Any, *args: Any, **kwargs: Any) -> int:
    # n(n+1)(2n+1)/6 per matrix (_cholesky, exact)
    return _total(3 * _cholesky(_square(a)), a)


@register(*functions("cholesky_solve"), *methods("cholesky_solve"), *aten_ops("cholesky_solve", "_cholesky_solve_helper"))
def cholesky_solve_flops(module: Any, out: Any, b: Any, factor: Any, *args: Any, **kwargs: Any) -> int:
    # torch.cholesky_solve(B, L, upper=False): L y = B, then L^H x = y: 2n per solution element
    return 2 * _substitution(first_output(out), factor, False)


@register(*functions("cholesky_inverse"), *methods("cholesky_inverse"), *aten_ops("cholesky_inverse"))
def cholesky_inverse_flops(module: Any, out: Any, factor: Any, *args: Any, **kwargs: Any) -> int:
    # torch.cholesky_inverse(L, upper=False): potri, 2n^3/3 per matrix
    return _total(2 * _square(factor) ** 3, factor)


@register(*functions("linalg_ldl_factor", "linalg_ldl_factor_ex"), *aten_ops("linalg_ldl_factor", "linalg_ldl_factor_ex"))
def ldl_factor_flops(module: Any, out: Any, a: Any, *args: Any, **kwargs: Any) -> int:
    # Bunch-Kaufman LDL^T: n^3/3 per matrix
    return _total(_square(a) ** 3, a)


@register(*functions("linalg_ldl_solve"), *aten_ops("linalg_ldl_solve"))
def ldl_solve_flops(module: Any, out: Any, ld: Any, pivots: Any, b: Any, *args: Any, **kwargs: Any) -> int:
    # L z = P b (unit lower: n - 1), D w = z (1 per element with 1 x 1 pivots), L^H x = w (n - 1):
    # 2n - 1 per solution element, as an LU solve
    return _lu_substitutions(first_output(out), ld)


# ---------------------------------------------------------------------------------------------
# Householder QR: geqrf, householder_product (orgqr), ormqr, qr
# ---------------------------------------------------------------------------------------------

def _qr3(m: int, n: int, mode: str) -> int:
    # geqrf (k = min(m, n) reflectors on m x n), then Q from them: m x k ('reduced'), m x m
    # ('complete'), none ('r')
    k = min(m, n)
    q = {"reduced": _reflectors3(m, k, k), "complete": _reflectors3(m, m, k)}.get(mode, 0)
    return _reflectors3(m, n, k) + q


@register(*functions("linalg_qr"), *aten_ops("linalg_qr"))
def qr_flops(module: Any, out: Any, a: Any, *args: Any, **kwargs: Any) -> int:
    # torch.linalg.qr(A, mode='reduced'): reduced 4mn^2 - 4n^3/3 for m >= n (GVL: factorization and
    # thin Q, 2n^2(m - n/3) each)
    return _total(_qr3(int(a.shape[-2]), int(a.shape[-1]), arg(args, kwargs, 0, "mode", "reduced")), a)


@register(*functions("qr"), *methods("qr"), *aten_ops("qr"))
def qr_legacy_flops(module: Any, out: Any, a: Any, *args: Any, **kwargs: Any) -> int:
    # torch.qr(A, some=True): some is linalg.qr's 'reduced', else 'complete'
    mode = "reduced" if arg(args, kwargs, 0, "some", True) else "complete"
    return _total(_qr3(int(a.shape[-2]), int(a.shape[-1]), mode), a)


@register(*functions("geqrf"), *methods("geqrf"), *aten_ops("geqrf"))
def geqrf_flops(module: Any, out: Any, a: Any, *args: Any, **kwargs: Any) -> int:
    # the k = min(m, n) reflectors of A: 2mn^2 - 2n^3/3 for m >= n
    m, n = int(a.shape[-2]), int(a.shape[-1])
    return _total(_reflectors3(m, n, min(m, n)), a)


@register(*functions("linalg_householder_product", "orgqr"), *methods("orgqr"),
          *aten_ops("linalg_householder_product", "orgqr"))
def householder_product_flops(module: Any, out: Any, a: Any, tau: Any, *args: Any, **kwargs: Any) -> int:
    # the m x n Q of tau's k reflectors (orgqr): 4mnk - 2(m+n)k^2 + 4k^3/3
    return _total(_reflectors3(int(a.shape[-2]), int(a.shape[-1]), int(tau.shape[-1])), a)


@register(*functions("ormqr"), *methods("ormqr"), *aten_ops("ormqr"))
def ormqr_flops(module: Any, out: Any, a: Any, tau: Any, c: Any, *args: Any, **kwargs: Any) -> int:
    # torch.ormqr(A, tau, C, left=True, transpose=False): k reflectors applied to C, from the left
    # (length rows(C), to cols(C) vectors) or the right (length cols(C), to rows(C) vectors)
    rows, cols = int(c.shape[-2]), int(c.shape[-1])
    length, vectors = (rows, cols) if arg(args, kwargs, 0, "left", True) else (cols, rows)
    return _total(_apply_reflectors3(length, vectors, int(tau.shape[-1])), c)


# ---------------------------------------------------------------------------------------------
# The SVD and what is built on it
# ---------------------------------------------------------------------------------------------

def _svd_total(a: Any, vectors: str | None) -> int:
    return _total(_svd3(int(a.shape[-2]), int(a.shape[-1]), vectors), a)


@register(*aten_ops("_linalg_svd"))
def svd_flops(module: Any, out: Any, a: Any, *args: Any, **kwargs: Any) -> int:
    # aten._linalg_svd(A, full_matrices=False, compute_uv=True, *, driver): the Golub-Reinsch count
    # for what it computes (_svd3)
    full, vectors = arg(args, kwargs, 0, "full_matrices", False), arg(args, kwargs, 1, "compute_uv", True)
    return _svd_total(a, ("full" if full else "thin") if vectors else None)


@register(*functions("linalg_svd"), *aten_ops("linalg_svd"))
def linalg_svd_flops(module: Any, out: Any, a: Any, *args: Any, **kwargs: Any) -> int:
    # torch.linalg.svd(A, full_matrices=True, *, driver=None)
    return _svd_total(a, "full" if arg(args, kwargs, 0, "full_matrices", True) else "thin")


@register(*functions("svd"), *methods("svd"), *aten_ops("svd"))
def svd_legacy_flops(module: Any, out: Any, a: Any, *args: Any, **kwargs: Any) -> int:
    # torch.svd(A, some=True, compute_uv=True): some is the thin U, V; compute_uv=False: the values
    # (the U and V it returns are zeros)
    if not arg(args, kwargs, 1, "compute_uv", True):
        return _svd_total(a, None)
    return _svd_total(a, "thin" if arg(args, kwargs, 0, "some", True) else "full")


@register(*functions("linalg_svdvals"), *aten_ops("linalg_svdvals"))
def svdvals_flops(module: Any, out: Any, a: Any, *args: Any, **kwargs: Any) -> int:
    # the singular values, 4Mk^2 - 4k^3/3 (with the thin U, V when autograd records the call)
    return _svd_total(a, "thin" if _needs_vectors(out) else None)


@register(*functions("linalg_pinv", "pinverse"), *methods("pinverse"), *aten_ops("linalg_pinv", "pinverse"))
def pinv_flops(module: Any, out: Any, a: Any, *args: Any, **kwargs: Any) -> Count:
    # ATen's pinv: U S V^H = svd(A) thin (or A = V diag(S) V^H by eigh when hermitian, then |S| and
    # its max: 2k); the tolerance max(atol, rtol * max S) (2); S > tol, 1/S and the select (3k);
    # V scaled by them (n k); then (V S^+) U^H: an (n x k) x (k x m) product, n k m MACs
    hermitian = kwargs.get("hermitian", next((x for x in args if isinstance(x, bool)), False))
    m, n = int(a.shape[-2]), int(a.shape[-1])
    k = min(m, n)
    if hermitian:
        factor, extra = _eigh3(n, True), 2 * k
    else:
        factor, extra = _svd3(m, n, "thin"), 0
    batch, complex_ = _batch(a), _factor(a)
    macs = batch * n * k * m * complex_
    other = _total(factor + 3 * (extra + 2 + 3 * k + n * k), a)
    outputs = batch * n * m * (2 if a.is_complex() else 1)
    return Count(2 * macs + other, macs, outputs, 0) if is_float(a) else Count(0, 0, 0, 0)


def matrix_norm_count(a: Any, ord: Any, dim: Any = (-2, -1), vectors: bool = False) -> int:
    """FLOPs of the matrix norm of ``a`` over the two dims ``dim`` (torch.linalg.matrix_norm):
    'fro' square and add per element, a sqrt per matrix (2mn + 1); 'nuc' the singular values and
    their sum (+ k); 2 / -2 the singular values and their max / min (+ k); 1 / -1 |a| summed over
    the rows (2mn) and the max / min of the n sums; inf / -inf the same over the columns (2mn + m).
    The elementwise parts count 2 per step on complex data, the singular values 4 times;
    ``vectors``: the SVD computes the thin U and V too (autograd records the call)."""
    if not is_float(a):
        return 0
    d0, d1 = (int(d) % a.dim() for d in dim)
    m, n = int(a.shape[d0]), int(a.shape[d1])
    batch = numel(a) // (m * n) if m * n else prod(int(s) for i, s in enumerate(a.shape) if i not in (d0, d1))
    elementwise = COMPLEX_OTHER if a.is_complex() else 1
    if ord in ("nuc", 2, -2):
        return (_svd3(m, n, "thin" if vectors else None) * batch * _factor(a) + 1) // 3 + batch * min(m, n)
    if ord in (1, -1):
        return batch * (2 * m * n + n) * elementwise
    if ord in (float("inf"), float("-inf")):
        return batch * (2 * m * n + m) * elementwise
    if ord == "fro":
        return batch * (2 * m * n + 1) * elementwise
    raise ValueError(f"matrix norm order {ord!r} has no formula")


@register(*functions("linalg_matrix_norm"), *aten_ops("linalg_matrix_norm"))
def matrix_norm_flops(module: Any, out: Any, a: Any, *args: Any, **kwargs: Any) -> int:
    # torch.linalg.matrix_norm(A, ord='fro', dim=(-2, -1), keepdim=False, *, dtype=None)
    return matrix_norm_count(a, arg(args, kwargs, 0, "ord", "fro"), arg(args, kwargs, 1, "dim", (-2, -1)),
                             _needs_vectors(out))


@register(*functions("linalg_cond"), *aten_ops("linalg_cond"))
def cond_flops(module: Any, out: Any, a: Any, *args: Any, **kwargs: Any) -> int:
    # torch.linalg.cond(A, p=None): p None, 2, -2: the singular values (with the thin U, V when
    # autograd records the call) and one divide per matrix; other p: the inverse, the p-norms of A
    # and of the inverse, and their product (1)
    p = arg(args, kwargs, 0, "p", None)
    if not is_float(a):
        return 0
    if p in (None, 2, -2):
        return _svd_total(a, "thin" if _needs_vectors(out) else None) + _batch(a)
    n = _square(a)
    inverse = _total(3 * _lu(n, n), a) + _batch(a) * n * n * (_per_element(n, True, a.is_complex())
                                                              + _per_element(n, False, a.is_complex()))
    return inverse + 2 * matrix_norm_count(a, p, vectors=_needs_vectors(out)) + _batch(a)


@register(*functions("linalg_matrix_rank"), *aten_ops("linalg_matrix_rank"))
def matrix_rank_flops(module: Any, out: Any, a: Any, *args: Any, **kwargs: Any) -> int:
    # torch.linalg.matrix_rank(A, *, atol, rtol, hermitian=False): the singular values (hermitian:
    # the eigenvalues, then |.| and their max, 2k), the tolerance max(atol, rtol * max) (2), and one
    # compare per value (k); counting the values above it is integer work
    if not is_float(a) or numel(a) == 0:
        return 0
    hermitian = kwargs.get("hermitian", next((x for x in args if isinstance(x, bool)), False))
    m, n = int(a.shape[-2]), int(a.shape[-1])
    k = min(m, n)
    values = _eigh3(n, False) + 3 * 2 * k if hermitian else _svd3(m, n, None)
    return _total(values, a) + _batch(a) * (k + 2)


# ---------------------------------------------------------------------------------------------
# Eigenvalues
# ---------------------------------------------------------------------------------------------

@register(*aten_ops("_linalg_eigh"))
def eigh_flops(module: Any, out: Any, a: Any, *args: Any, **kwargs: Any) -> int:
    # aten._linalg_eigh(A, UPLO='L', compute_v=True): 9n^3 with the eigenvectors, else 4n^3/3
    return _total(_eigh3(_square(a), bool(arg(args, kwargs, 1, "compute_v", True))), a)


@register(*functions("linalg_eigh"), *aten_ops("linalg_eigh"))
def linalg_eigh_flops(module: Any, out: Any, a: Any, *args: Any, **kwargs: Any) -> int:
    # torch.linalg.eigh(A, UPLO='L'): eigenvalues and eigenvectors, 9n^3
    return _total(_eigh3(_square(a), True), a)


@register(*functions("linalg_eigvalsh"), *aten_ops("linalg_eigvalsh"))
def eigvalsh_flops(module: Any, out: Any, a: Any, *args: Any, **kwargs: Any) -> int:
    # torch.linalg.eigvalsh(A, UPLO='L'): 4n^3/3 (9n^3 when autograd records the call)
    return _total(_eigh3(_square(a), _needs_vectors(out)), a)


@register(*functions("linalg_eig"), *aten_ops("linalg_eig"))
def eig_flops(module: Any, out: Any, a: Any, *args: Any, **kwargs: Any) -> int:
    # torch.linalg.eig(A): eigenvalues and eigenvectors, 79n^3/3
    return _total(_eig3(_square(a), True), a)


@register(*functions("linalg_eigvals"), *aten_ops("linalg_eigvals", "_linalg_eigvals"))
def eigvals_flops(module: Any, out: Any, a: Any, *args: Any, **kwargs: Any) -> int:
    # torch.linalg.eigvals(A): 10n^3 (79n^3/3 when autograd records the call)
    return _total(_eig3(_square(a), _needs_vectors(out)), a)


# ---------------------------------------------------------------------------------------------
# Least squares
# ---------------------------------------------------------------------------------------------

@register(*functions("linalg_lstsq"), *aten_ops("linalg_lstsq"))
def lstsq_flops(module: Any, out: Any, a: Any, b: Any, *args: Any, **kwargs: Any) -> int:
    # torch.linalg.lstsq(A (m x n), B (m x r, or a vector m), rcond=None, *, driver=None), over
    # the broadcast batch of A and B. Drivers gels and gelsy (the defaults: CUDA and CPU) factor A
    # by Householder QR (LQ when m < n; gelsy's column pivoting and, for a rank-deficient A, its
    # complete orthogonal factorization are not counted), then per right-hand side apply Q^H
    # (4Mk - 2k^2) and solve with the k x k triangle (k^2). Drivers gelsd and gelss take the SVD
    # with V, U^H b formed on the fly (GVL section 8.6.3's table, "Sigma, V": 4Mk^2 + 8k^3), then
    # per right-hand side U^H b (2Mk), the division by the singular values (k) and the product by
    # V (2k^2).
    m, n = int(a.shape[-2]), int(a.shape[-1])
    big, k = max(m, n), min(m, n)
    vector = b.dim() == a.dim() - 1
    rhs = 1 if vector else int(b.shape[-1])
    batch = prod(broadcast(tuple(a.shape[:-2]), tuple(b.shape[:-1] if vector else b.shape[:-2])))
    if kwargs.get("driver") in ("gelsd", "gelss"):
        per_matrix = 3 * (4 * big * k * k + 8 * k ** 3) + 3 * rhs * (2 * big * k + k + 2 * k * k)
    else:
        per_matrix = _reflectors3(m, n, k) + _apply_reflectors3(big, rhs, k) + 3 * rhs * k * k
    return _total(per_matrix, a, batch)


# ---------------------------------------------------------------------------------------------
# The matrix exponential
# ---------------------------------------------------------------------------------------------

@register(*functions("linalg_matrix_exp", "matrix_exp"), *methods("matrix_exp"),
          *aten_ops("linalg_matrix_exp", "matrix_exp"))
def matrix_exp_flops(module: Any, out: Any, a: Any, *args: Any, **kwargs: Any) -> Count:
    # ATen evaluates a Taylor polynomial of degree 1 to 18 by the schemes of Bader, Blanes and
    # Casas ("Computing the matrix exponential with an optimized Taylor polynomial approximation",
    # Mathematics 7(12), 2019), degree 18 in 5 matrix products, the most a matrix of norm up to
    # theta_18 needs; the degree, and the squarings of a matrix of a larger norm, depend on the
    # values, which a shape formula does not read: counted as the 5 products, 5 n^3 MACs per matrix
    # (the polynomial's O(n^2) scaled additions and the norm are not counted). A 1 x 1 matrix is an
    # exp per element (1; complex data 2). FlopCounterMode does not see the products: mm_macs 0.
    if not is_float(a):
        return Count(0, 0, 0, 0)
    n = _square(a)
    if n == 1:
        return Count(numel(a) * (COMPLEX_OTHER if a.is_complex() else 1), 0, 0, 0)
    complex_ = a.is_complex()
    macs = 5 * _batch(a) * n ** 3 * (COMPLEX_MAC if complex_ else 1)
    return Count(2 * macs, macs, 5 * _batch(a) * n * n * (2 if complex_ else 1), 0)

"""Linear algebra beyond matmuls: triangular solves. (The matmul family is in matmul.py; the
checks linalg runs, ``_linalg_check_errors``, are 0 in zero.py.)

A triangular solve by forward or back substitution (Golub & Van Loan, *Matrix Computations*,
4th ed., section 3.1.2: "forward substitution requires n^2 flops") costs, per right-hand side of
length ``n``: ``n(n-1)/2`` multiplies, ``n(n-1)/2`` subtractions and ``n`` divisions, ``n^2`` in
all (``n(n-1)`` when the diagonal is known to be 1, ``unitriangular``). A solution of ``R``
right-hand sides has ``R*n`` elements, so the count is ``n`` FLOPs per solution element (``n - 1``
unitriangular). These are FLOPs, not MACs: only dot products of the matmul family, convolutions
and attention are MACs here.
"""

from __future__ import annotations

from typing import Any

from torch_flops.formulas import aten_ops, functions, register
from torch_flops.formulas._shapes import (
    COMPLEX_ADD,
    COMPLEX_DIV,
    COMPLEX_MUL,
    arg,
    complex_factor,
    first_output,
    float_numel,
)

__all__ = ["solve_triangular_flops", "triangular_solve_flops"]


def _substitution(solution: Any, a: Any, unitriangular: bool) -> int:
    # per solution element: (n-1)/2 multiply-subtract pairs + 1 divide (none unitriangular), so
    # n - 1 + 1 = n real FLOPs; complex data: a pair is 6 + 2, a divide 11 (_shapes.COMPLEX_*)
    n = int(a.shape[-1])
    elements = float_numel(solution, a)
    if complex_factor(2, solution) == 2:
        return elements * ((n - 1) * (COMPLEX_MUL + COMPLEX_ADD) // 2 + (0 if unitriangular else COMPLEX_DIV))
    return elements * (n - 1 + (0 if unitriangular else 1))


@register(*functions("linalg_solve_triangular"), *aten_ops("linalg_solve_triangular"))
def solve_triangular_flops(module: Any, out: Any, a: Any, b: Any, *args: Any, **kwargs: Any) -> int:
    # torch.linalg.solve_triangular(A, B, *, upper, left=True, unitriangular=False): n FLOPs per
    # element of X (A X = B, or X A = B)
    return _substitution(first_output(out), a, arg(args, kwargs, 2, "unitriangular", False))


@register(*functions("triangular_solve"), *aten_ops("triangular_solve"))
def triangular_solve_flops(module: Any, out: Any, b: Any, a: Any, *args: Any, **kwargs: Any) -> int:
    # torch.triangular_solve(b, A, upper=True, transpose=False, unitriangular=False) -> (X, A clone)
    return _substitution(first_output(out), a, arg(args, kwargs, 2, "unitriangular", False))

"""FLOPs of pooling: max / average / LP / fractional max pools, their adaptive forms, and max
unpooling (a scatter: 0 FLOPs).

Fixed-window pools cost a fixed amount per *output* element, with ``K = prod(kernel_size)``;
stride, padding, dilation and ``ceil_mode`` reach the count only through the real output shape:

* max (and fractional max) pool: ``K - 1`` comparisons per output;
* average pool: ``K`` per output (``K - 1`` adds + 1 div);
* LP pool: ``2K + 1`` per output (``K`` pows ``x^p``, ``K - 1`` adds, 1 scale of the window
  average back to a sum, 1 root ``^(1/p)``).

Adaptive pools (``torch.nn.AdaptiveAvgPool2d`` docs; the windows are those of ATen's
``start_index = floor(i * I / O)``, ``end_index = ceil((i + 1) * I / O)``) have windows whose size
varies along each dim; since a window is the product of one window per dim, the total of window
sizes over all outputs factorises to ``prod_d S_d`` with ``S_d`` the sum of window lengths along
dim ``d`` (:func:`_shapes.adaptive_window_total`). Per leading ``(N, C)`` slice:
adaptive avg = ``prod_d S_d`` (``K_i - 1`` adds + 1 div per window), adaptive max =
``prod_d S_d - prod_d O_d`` (``K_i - 1`` comparisons per window).

Unbatched inputs need no special case: the count is per output element (fixed pools) or per
leading slice of the input (adaptive pools). ``return_indices=True`` makes ``out`` a tuple; the
values are ``out[0]``.
"""

from __future__ import annotations

from typing import Any

import torch

from torch_flops.formulas import aten_ops, functions, modules, register, zero_flops
from torch_flops.formulas._shapes import adaptive_window_total, arg, as_tuple, first_output, float_numel, is_float, prod

__all__: list[str] = []

Tensor = torch.Tensor


# ---------------------------------------------------------------------------------------------
# Shape helpers
# ---------------------------------------------------------------------------------------------

def _window_pool_flops(out: Any, x: Any, kernel_size: Any, n: int, kind: str) -> tuple[int, int]:
    """FLOPs of a fixed-window ``n``-d pool of kind ``"max"``, ``"avg"`` or ``"lp"``."""
    k = prod(as_tuple(kernel_size, n))
    per_output = {"max": k - 1, "avg": k, "lp": 2 * k + 1}[kind]
    return (per_output * float_numel(first_output(out), x), 0)


def _adaptive_pool_flops(out: Any, x: Any, n: int, kind: str) -> tuple[int, int]:
    """FLOPs of an adaptive ``n``-d pool of kind ``"avg"`` or ``"max"`` (see the module doc)."""
    values = first_output(out)
    if not (isinstance(values, Tensor) and isinstance(x, Tensor) and is_float(x)):
        return (0, 0)
    in_spatial = tuple(x.shape[-n:])
    out_spatial = tuple(values.shape[-n:])
    lead = prod(x.shape[:-n])  # N * C, or C when unbatched
    windows = prod(adaptive_window_total(int(i), int(o)) for i, o in zip(in_spatial, out_spatial))
    if kind == "avg":
        return (lead * windows, 0)
    return (lead * (windows - prod(out_spatial)), 0)


# ---------------------------------------------------------------------------------------------
# Registration: one formula per pool serves the module (its attributes), the torch/F functions and
# the aten op (their positional or keyword arguments).
# ---------------------------------------------------------------------------------------------

def _register_window_pool(label: str, n: int, kind: str, module_names: tuple[str, ...],
                          function_names: tuple[str, ...], kernel_index: int) -> None:
    def formula(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
        kernel = module.kernel_size if module is not None else arg(args, kwargs, kernel_index, "kernel_size")
        return _window_pool_flops(out, arg(args, kwargs, 0, "input"), kernel, n, kind)

    formula.__name__ = formula.__qualname__ = f"{label}_flops"
    register(*modules(*module_names), *functions(*function_names), *aten_ops(*function_names))(formula)


def _register_adaptive_pool(n: int, kind: str) -> None:
    def formula(module: Any, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
        return _adaptive_pool_flops(out, arg(args, kwargs, 0, "input"), n, kind)

    formula.__name__ = formula.__qualname__ = f"adaptive_{kind}_pool{n}d_flops"
    names = [f"adaptive_{kind}_pool{n}d"] + ([f"adaptive_max_pool{n}d_with_indices"] if kind == "max" else [])
    register(*modules(f"Adaptive{kind.capitalize()}Pool{n}d"), *functions(*names),
             *aten_ops(*names, f"_adaptive_{kind}_pool{n}d"))(formula)


for _n in (1, 2, 3):
    # K - 1 comparisons per output; F.max_pool{n}d records as "max_pool{n}d" or, with
    # return_indices=True, "max_pool{n}d_with_indices"; torch.max_pool{n}d has the same arg order.
    _register_window_pool(f"max_pool{_n}d", _n, "max", (f"MaxPool{_n}d",),
                          (f"max_pool{_n}d", f"max_pool{_n}d_with_indices"), kernel_index=1)
    # K per output: K - 1 adds + 1 div
    _register_window_pool(f"avg_pool{_n}d", _n, "avg", (f"AvgPool{_n}d",), (f"avg_pool{_n}d",), kernel_index=1)
    # 2K + 1 per output: K pows, K - 1 adds, 1 scale, 1 root; F.lp_pool{n}d(input, norm_type,
    # kernel_size, ...) has the kernel third
    _register_window_pool(f"lp_pool{_n}d", _n, "lp", (f"LPPool{_n}d",), (f"lp_pool{_n}d",), kernel_index=2)
    # adaptive avg: prod_d S_d per (N, C) slice (K_i - 1 adds + 1 div per window)
    _register_adaptive_pool(_n, "avg")
    # adaptive max: prod_d S_d - prod_d O_d per (N, C) slice (K_i - 1 compares per window)
    _register_adaptive_pool(_n, "max")

for _n in (2, 3):
    # fractional max pool: K - 1 comparisons per output, as a max pool with its kernel
    _register_window_pool(f"fractional_max_pool{_n}d", _n, "max", (f"FractionalMaxPool{_n}d",),
                          (f"fractional_max_pool{_n}d", f"fractional_max_pool{_n}d_with_indices"),
                          kernel_index=1)

# 0: max unpooling scatters values to their indices; no arithmetic
register(*modules("MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d"),
         *functions("max_unpool1d", "max_unpool2d", "max_unpool3d"),
         *aten_ops("max_unpool2d", "max_unpool3d"))(zero_flops)

del _n

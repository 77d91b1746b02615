"""Upsampling and interpolation. Per output element: nearest modes copy (0); one linear
interpolation (lerp: sub, mul, add) is 3 FLOPs, so linear 3, bilinear 3 lerps = 9, trilinear
7 lerps = 21; bicubic interpolates 4 rows of 4 taps then one column of 4 (5 x (4 mul + 3 add)) = 35;
area is an adaptive average pool (one add per window element + one divide)."""

from __future__ import annotations

from typing import Any

from torch import nn

from torch_flops.formulas import aten_ops, functions, register, zero_flops
from torch_flops.formulas._shapes import adaptive_window_total, arg, float_numel, prod

__all__ = ["interpolate_flops"]

_PER_OUTPUT = {"nearest": 0, "nearest-exact": 0, "linear": 3, "bilinear": 9, "trilinear": 21, "bicubic": 35}


def _interpolate(out: Any, x: Any, mode: str) -> int:
    if mode == "area":
        # adaptive avg pool: sum of all window lengths over the output grid, per (N, C)
        windows = prod(adaptive_window_total(i, o) for i, o in zip(x.shape[2:], out.shape[2:]))
        return float_numel(out, x) // max(prod(out.shape[2:]), 1) * windows
    if mode not in _PER_OUTPUT:
        raise NotImplementedError(f"interpolate mode {mode!r} has no formula")
    return _PER_OUTPUT[mode] * float_numel(out, x)


@register(nn.Upsample, nn.UpsamplingNearest2d, nn.UpsamplingBilinear2d, *functions("interpolate", "upsample"))
def interpolate_flops(module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
    # the module's mode, or F.interpolate(input, size=None, scale_factor=None, mode='nearest', ...)
    mode = module.mode if module is not None else arg(args, kwargs, 2, "mode", "nearest")
    return _interpolate(out, x, mode)


register(*functions("upsample_nearest"))(zero_flops)  # a copy


def _fixed_mode(mode: str, names: tuple[str, ...]) -> None:
    def formula(module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
        return _interpolate(out, x, mode)  # see the per-output cost of each mode above

    formula.__name__ = formula.__qualname__ = f"upsample_{mode}_flops"
    register(*functions(*names), *aten_ops(*names))(formula)


_fixed_mode("linear", ("upsample_linear1d",))
_fixed_mode("bilinear", ("upsample_bilinear", "upsample_bilinear2d", "_upsample_bilinear2d_aa"))
_fixed_mode("trilinear", ("upsample_trilinear3d",))
_fixed_mode("bicubic", ("upsample_bicubic2d", "_upsample_bicubic2d_aa"))

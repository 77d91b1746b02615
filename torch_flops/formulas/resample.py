"""Upsampling and interpolation. Per output element: nearest modes copy (0); one linear
interpolation (lerp: sub, mul, add) is 3 FLOPs, so linear 3, bilinear 3 lerps = 9, trilinear
7 lerps = 21; bicubic interpolates 4 rows of 4 taps then one column of 4 (5 x (4 mul + 3 add)) = 35;
area is an adaptive average pool (one add per window element + one divide)."""

from __future__ import annotations

from typing import Any

from torch import nn

from torch_flops.formulas import Count, aten_ops, functions, register, zero_flops
from torch_flops.formulas._shapes import adaptive_window_total, arg, first_output, float_numel, is_float, numel, prod

__all__ = ["affine_grid_flops", "grid_sample_flops", "grid_sampler_flops", "interpolate_flops"]

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


# ---------------------------------------------------------------------------------------------
# grid_sample: sampling an input at the (x, y[, z]) points of a float grid in [-1, 1].
# Per output point (N x H_out x W_out [x D_out], shared by the channels): each coordinate is
# unnormalised, ((c + 1) * size - 1) / 2 or (c + 1) / 2 * (size - 1): 3 FLOPs; padding "border"
# clamps it (2 compares), "reflection" reflects then clamps (abs, fmod, compare, subtract + 2
# compares: 6). Per output element (x C): the interpolation, as for upsampling above: bilinear 9
# (3 lerps), trilinear 21 (7), bicubic 35, nearest 0 (a copy).
# ---------------------------------------------------------------------------------------------

_GRID_MODES = {0: "bilinear", 1: "nearest", 2: "bicubic"}  # aten's interpolation_mode
_GRID_PADDINGS = {0: "zeros", 1: "border", 2: "reflection"}  # aten's padding_mode
_GRID_PADDING_COST = {"zeros": 0, "border": 2, "reflection": 6}


def _grid_sample(out: Any, x: Any, grid: Any, mode: str, padding: str) -> int:
    if not is_float(out):
        return 0
    coords = grid.shape[-1]  # 2 (x, y) or 3 (x, y, z)
    points = numel(grid) // max(coords, 1)
    per_point = coords * (3 + _GRID_PADDING_COST.get(padding, 0))
    per_element = {"bilinear": 21 if coords == 3 else 9, "nearest": 0, "bicubic": 35}.get(mode)
    if per_element is None:
        raise NotImplementedError(f"grid_sample mode {mode!r} has no formula")
    return points * per_point + per_element * numel(out)


@register(*functions("grid_sample"))
def grid_sample_flops(module: Any, out: Any, x: Any, grid: Any, *args: Any, **kwargs: Any) -> int:
    # F.grid_sample(input, grid, mode='bilinear', padding_mode='zeros', align_corners=None): see above
    return _grid_sample(out, x, grid, arg(args, kwargs, 0, "mode", "bilinear"),
                        arg(args, kwargs, 1, "padding_mode", "zeros"))


@register(*aten_ops("grid_sampler", "grid_sampler_2d", "grid_sampler_3d", "_grid_sampler_2d_cpu_fallback",
                    "cudnn_grid_sampler"))
def grid_sampler_flops(module: Any, out: Any, x: Any, grid: Any, *args: Any, **kwargs: Any) -> int:
    # aten.grid_sampler*(input, grid, interpolation_mode, padding_mode, align_corners), modes as ints
    # (cudnn_grid_sampler(input, grid): bilinear, zeros); the count of F.grid_sample above
    mode = _GRID_MODES.get(int(arg(args, kwargs, 0, "interpolation_mode", 0)), "bilinear")
    padding = _GRID_PADDINGS.get(int(arg(args, kwargs, 1, "padding_mode", 0)), "zeros")
    return _grid_sample(first_output(out), x, grid, mode, padding)


# ---------------------------------------------------------------------------------------------
# affine_grid: the sampling grid of an affine transform, theta (N, 2, 3) -> (N, H, W, 2) (3-D:
# (N, 3, 4) -> (N, D, H, W, 3)). ATen builds a base grid of normalised coordinates [x, y, 1] (or
# [x, y, z, 1]), one row per output point, and multiplies it by theta^T in one batched matmul:
# (N, H*W, 3) x (N, 3, 2). Every output element is a dot product of length theta.shape[-1]: that
# many MACs each. The base grid's coordinates (a linspace per size: O(H + W + D) values) are not
# counted, as values computed once per row are not in norm.py. FlopCounterMode does not see the
# matmul inside the op (it counts 0): mm_macs 0.
# ---------------------------------------------------------------------------------------------

@register(*functions("affine_grid", "affine_grid_generator"),
          *aten_ops("affine_grid_generator", "cudnn_affine_grid_generator"))
def affine_grid_flops(module: Any, out: Any, theta: Any, *args: Any, **kwargs: Any) -> Count:
    # numel(out) outputs x theta.shape[-1] MACs (3 in 2-D, 4 in 3-D); 2 FLOPs a MAC
    if not is_float(out):
        return Count(0, 0, 0, 0)
    outputs = numel(out)
    macs = outputs * int(theta.shape[-1])
    return Count(2 * macs, macs, outputs, 0)

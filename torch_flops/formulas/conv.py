"""Convolutions of every rank, direct and transposed, grouped, strided, dilated and padded.
Module, functional, ``torch.convolution`` and aten forms share ``_shapes.conv_macs``."""

from __future__ import annotations

from typing import Any

from torch.nn.utils import parametrize

from torch_flops.formulas import Count, aten_ops, functions, modules, register
from torch_flops.formulas._shapes import (
    COMPLEX_ADD,
    COMPLEX_MAC,
    arg,
    conv_macs,
    has_tensor,
    numel,
    parametrized_shape,
)

__all__ = ["conv_flops", "conv_module_flops", "conv_transpose_flops", "convolution_flops"]


def _conv(out: Any, x: Any, weight_shape: Any, has_bias: bool, transposed: bool) -> Count:
    # 2*macs (see conv_macs) + one bias add per output element; every output element is one dot
    # product (a transposed convolution's scattered contributions summed into it). Complex data:
    # 4 real MACs a MAC and 2 real adds a bias add; FlopCounterMode counts the 3 real
    # convolutions torch runs for one complex one.
    macs = conv_macs(x.shape, weight_shape, out.shape, transposed)
    if out.is_complex():
        return Count(2 * COMPLEX_MAC * macs + (COMPLEX_ADD * numel(out) if has_bias else 0), COMPLEX_MAC * macs,
                     2 * numel(out), 3 * macs)
    return Count(2 * macs + (numel(out) if has_bias else 0), macs, numel(out), macs)


@register(*modules("Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
                   "LazyConv1d", "LazyConv2d", "LazyConv3d", "LazyConvTranspose1d", "LazyConvTranspose2d",
                   "LazyConvTranspose3d"))
def conv_module_flops(module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> Count:
    # the weight, bias and direction come from the module; a parametrized weight's shape from its
    # configuration, (C_out, C_in/groups, *kernel) or transposed (C_in, C_out/groups, *kernel):
    # reading it would run its parametrization once more than the call did (see has_tensor)
    transposed = bool(module.transposed)
    weight_shape = parametrized_shape(module, "weight")
    if weight_shape is None and parametrize.is_parametrized(module, "weight"):  # (several originals: weight_norm's)
        c_in, c_out, groups = module.in_channels, module.out_channels, module.groups
        weight_shape = ((c_in, c_out // groups) if transposed else (c_out, c_in // groups)) + tuple(module.kernel_size)
    elif weight_shape is None:
        weight_shape = module.weight.shape
    return _conv(out, x, weight_shape, has_tensor(module, "bias"), transposed)


@register(*functions("conv1d", "conv2d", "conv3d"), *aten_ops("conv1d", "conv2d", "conv3d"))
def conv_flops(module: Any, out: Any, x: Any, weight: Any, bias: Any = None, *args: Any,
               **kwargs: Any) -> Count:
    # F.conv2d(input, weight, bias, stride, padding, dilation, groups)
    return _conv(out, x, weight.shape, bias is not None, transposed=False)


@register(*functions("conv_transpose1d", "conv_transpose2d", "conv_transpose3d"),
          *aten_ops("conv_transpose1d", "conv_transpose2d", "conv_transpose3d"))
def conv_transpose_flops(module: Any, out: Any, x: Any, weight: Any, bias: Any = None, *args: Any,
                         **kwargs: Any) -> Count:
    # F.conv_transpose2d(input, weight, bias, stride, padding, output_padding, groups, dilation)
    return _conv(out, x, weight.shape, bias is not None, transposed=True)


@register(*functions("convolution", "_convolution"), *aten_ops("convolution", "_convolution"))
def convolution_flops(module: Any, out: Any, x: Any, weight: Any, bias: Any = None, *args: Any,
                      **kwargs: Any) -> Count:
    # torch.convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    transposed = bool(arg(args, kwargs, 3, "transposed", False))
    return _conv(out, x, weight.shape, bias is not None, transposed)

"""Convolutions of every rank, direct and transposed, grouped, strided, dilated and padded.
Module, functional and ``torch.convolution`` forms share ``_shapes.conv_macs``."""

from __future__ import annotations

from typing import Any

from torch import nn

from torch_flops.formulas import register_function, register_module
from torch_flops.formulas._shapes import arg, conv_macs, numel

__all__ = ["conv_flops", "conv_module_flops", "conv_transpose_flops", "convolution_flops"]


def _conv(out: Any, x: Any, weight_shape: Any, has_bias: bool, transposed: bool) -> tuple[int, int]:
    # 2*macs (see conv_macs) + one bias add per output element
    macs = conv_macs(x.shape, weight_shape, out.shape, transposed)
    return 2 * macs + (numel(out) if has_bias else 0), macs


@register_module(nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d,
                 nn.ConvTranspose3d, "LazyConv1d", "LazyConv2d", "LazyConv3d",
                 "LazyConvTranspose1d", "LazyConvTranspose2d", "LazyConvTranspose3d")
def conv_module_flops(module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    return _conv(out, x, module.weight.shape, module.bias is not None, bool(module.transposed))


@register_function("conv1d", "conv2d", "conv3d")
def conv_flops(out: Any, x: Any, weight: Any, bias: Any = None, *args: Any, **kwargs: Any) -> tuple[int, int]:
    return _conv(out, x, weight.shape, bias is not None, transposed=False)


@register_function("conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
def conv_transpose_flops(out: Any, x: Any, weight: Any, bias: Any = None, *args: Any,
                         **kwargs: Any) -> tuple[int, int]:
    return _conv(out, x, weight.shape, bias is not None, transposed=True)


@register_function("convolution", "_convolution")
def convolution_flops(out: Any, x: Any, weight: Any, bias: Any = None, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # torch.convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    transposed = bool(arg(args, kwargs, 3, "transposed", False))
    return _conv(out, x, weight.shape, bias is not None, transposed)

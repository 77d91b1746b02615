"""Linear layers and the matmul family: linear, bilinear, matmul/@, mm, bmm, mv, dot, addmm,
baddbmm, addbmm, addmv, einsum. All MACs go through ``_shapes.matmul_macs``/``einsum_macs``."""

from __future__ import annotations

from typing import Any

from torch import nn

from torch_flops.formulas import register_function, register_method, register_module
from torch_flops.formulas._shapes import einsum_macs, matmul_macs, numel

__all__ = ["addmm_flops", "bilinear_flops", "einsum_flops", "linear_flops", "matmul_flops"]


def _linear(out: Any, in_features: int, has_bias: bool) -> tuple[int, int]:
    # macs = output elements * in_features; flops = 2*macs + one bias add per output element
    n = out.numel()
    macs = n * in_features
    return (2 * macs + n, macs) if has_bias else (2 * macs, macs)


@register_module(nn.Linear, "LazyLinear", "NonDynamicallyQuantizableLinear")
def linear_module_flops(module: nn.Linear, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # in_features is a plain attribute; parameters go through nn.Module.__getattr__ (slow): read once
    return _linear(out, module.in_features, module._parameters.get("bias") is not None)


@register_function("linear")
def linear_flops(out: Any, input: Any, weight: Any, bias: Any = None) -> tuple[int, int]:
    return _linear(out, weight.shape[-1], bias is not None)


def _bilinear(out: Any, in1: int, in2: int, has_bias: bool) -> tuple[int, int]:
    # y_k = x1^T W_k x2: W_k x2 is in1*in2 MACs, then the dot with x1 is in1 MACs, per output.
    # (FlopCounterMode counts aten._trilinear as 0; we count the real work.)
    macs = numel(out) * (in1 * in2 + in1)
    return 2 * macs + (numel(out) if has_bias else 0), macs


@register_module(nn.Bilinear)
def bilinear_module_flops(module: nn.Bilinear, out: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    return _bilinear(out, module.in1_features, module.in2_features, module.bias is not None)


@register_function("bilinear")
def bilinear_flops(out: Any, input1: Any, input2: Any, weight: Any, bias: Any = None) -> tuple[int, int]:
    return _bilinear(out, weight.shape[1], weight.shape[2], bias is not None)


@register_function("matmul", "mm", "bmm", "mv", "dot", "vdot")
@register_method("matmul", "mm", "bmm", "mv", "dot", "vdot", "__matmul__")
def matmul_flops(out: Any, a: Any, b: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # 2*M*K*N per (broadcast) batch: one mul + one add per MAC; see _shapes.matmul_macs
    # (FlopCounterMode counts mv/dot as 0; they are real MACs here.)
    if a.dim() == 1 and b.dim() == 1:
        macs = a.shape[0]  # dot / inner of vectors: k MACs
    else:
        macs = matmul_macs(a.shape, b.shape)
    return 2 * macs, macs


@register_method("__rmatmul__")
def rmatmul_flops(out: Any, a: Any, b: Any) -> tuple[int, int]:
    # a.__rmatmul__(b) computes b @ a
    return matmul_flops(out, b, a)


@register_function("inner")
@register_method("inner")
def inner_flops(out: Any, a: Any, b: Any) -> tuple[int, int]:
    # inner contracts the last dim of both operands: every output element is a K-term dot product
    if a.dim() == 0 or b.dim() == 0:
        return numel(out), 0  # a scalar operand: a plain multiply
    macs = max(numel(out), 1) * a.shape[-1]
    return 2 * macs, macs


def _scaled_add(out: Any, args: Any, kwargs: Any) -> int:
    # the add of `input` (1 per output element), plus one multiply per output element for each
    # of alpha/beta that is not 1 (beta == 0 skips the input entirely)
    n = numel(out)
    beta = kwargs.get("beta", 1)
    alpha = kwargs.get("alpha", 1)
    if beta == 0:
        return n if alpha != 1 else 0
    return n + (n if beta != 1 else 0) + (n if alpha != 1 else 0)


@register_function("addmm", "addmv", "baddbmm")
@register_method("addmm", "addmm_", "addmv", "addmv_", "baddbmm", "baddbmm_")
def addmm_flops(out: Any, input: Any, a: Any, b: Any, **kwargs: Any) -> tuple[int, int]:
    # beta*input + alpha*(a @ b): 2*M*K*N for the product, + the scaled add per output element
    macs = matmul_macs(a.shape, b.shape)
    return 2 * macs + _scaled_add(out, (), kwargs), macs


@register_function("addbmm")
@register_method("addbmm", "addbmm_")
def addbmm_flops(out: Any, input: Any, a: Any, b: Any, **kwargs: Any) -> tuple[int, int]:
    # sum over the batch of a[i] @ b[i] (B*M*K*N MACs, the batch sum is part of the
    # accumulation), then the scaled add of input
    macs = matmul_macs(a.shape, b.shape)
    return 2 * macs + _scaled_add(out, (), kwargs), macs


@register_function("einsum")
def einsum_flops(out: Any, equation: str, *operands: Any) -> tuple[int, int]:
    # pairwise left to right; see _shapes.einsum_macs
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    macs, extra = einsum_macs(equation, [o.shape for o in operands])
    return 2 * macs + extra, macs


@register_function("outer", "ger")
@register_method("outer", "ger")
def outer_flops(out: Any, a: Any, b: Any) -> tuple[int, int]:
    # an outer product sums nothing: one multiply per output element, no MACs
    return numel(out), 0



"""FLOPs of the aten ops autograd runs in backward: the gradients of convolutions, attention,
norms, activations, softmax, embeddings, pooling, upsampling, losses and dropout, and the
accumulating scatters some views and pads turn into (a backward profiler looks each op's packet
up in the same table as the forward ops; mm/bmm/addmm, sum, mul and the views autograd also runs
are counted by their own families).

Dot products are MACs as everywhere (convolution_backward, the attention backward kernels,
``_trilinear``). The MACs of ``convolution_backward`` and of the attention backward ops are what
FlopCounterMode counts divided by 2, with two exceptions stated where they arise: it counts the
weight gradient of a grouped convolution ``groups`` times (that count is the formula's
``mm_macs``, the true one its ``macs``), and it reads the (B, M, H, K) tensors of the raw
``_flash_attention_backward`` / ``_efficient_attention_backward`` kernels as (B, H, M, K) (both
are counted here in their real layout; the two agree when H == M == S). FlopCounterMode has no
entry for the CPU kernel ``_scaled_dot_product_flash_attention_for_cpu_backward``: its MACs are
the same attention MACs, none of them ``mm_macs``, as for the forward CPU kernel (FlopCounterMode
counts both 0).

Everything else is FLOPs, counted per element by these rules, one FLOP per add, multiply,
divide, compare/select or transcendental call (as the forward families count):

* an elementwise gradient ``dx = f'(x) * dy`` costs the operations of the derivative
  (``tools/autograd/derivatives.yaml`` or the ATen kernel named next to it) + 1 for the multiply
  by ``dy``; scalar factors (a constant, a loss's ``1/N``, ``beta``) are folded into that one
  multiply, and a value computed once per row or channel (``rstd``, ``w * invstd``) is O(rows),
  not counted, as in norm.py;
* a gradient accumulated into a tensor (a scatter-add: max pooling, embeddings, nearest
  upsampling, pads, unfold) costs one add per gradient element scattered, as ``index_add`` does
  in elementwise.py; an interpolation's backward scatters every output gradient to each of its
  taps with one multiply per weight factor and one add;
* integer and boolean data cost 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from torch_flops.formulas import Count, aten_ops, register
from torch_flops.formulas._shapes import (
    aa_window_total,
    adaptive_window_total,
    arg,
    conv_macs,
    einsum_macs,
    float_numel,
    is_float,
    numel,
    prod,
    sdpa_backward_macs,
)

__all__ = ["convolution_backward_flops", "trilinear_flops"]

Tensor = torch.Tensor


def _grad_numel(grad: Any) -> int:
    """Elements of a floating point gradient (0 for integer/boolean data or a non-tensor)."""
    return numel(grad) if is_float(grad) else 0


def _mask(value: Any, n: int) -> tuple[bool, ...]:
    """An ``output_mask`` argument as ``n`` booleans (all true when not given)."""
    if value is None:
        return (True,) * n
    return tuple(bool(m) for m in value)


# ---------------------------------------------------------------------------------------------
# Convolution: aten.convolution_backward(grad_output, input, weight, bias_sizes, stride, padding,
# dilation, transposed, output_padding, groups, output_mask) -> (grad_input, grad_weight, grad_bias)
# ---------------------------------------------------------------------------------------------

@register(*aten_ops("convolution_backward"))
def convolution_backward_flops(module: Any, out: Any, grad_output: Any, x: Any, weight: Any, *args: Any,
                               **kwargs: Any) -> Count:
    # dX (output_mask[0]) is a convolution of dY with the weight in the other direction and dW
    # (output_mask[1]) one of the input with dY: each has one MAC per forward MAC (conv_macs of
    # the forward, whose output has dY's shape); every dX and every dW element is one dot product.
    # dBias (output_mask[2]) sums dY over batch and space: one add per dY element.
    # FlopCounterMode counts dW of a grouped convolution `groups` times (it convolves all C_in
    # with all C_out channels): that is its mm_macs, the true MACs are macs.
    transposed = bool(arg(args, kwargs, 4, "transposed", False))
    groups = int(arg(args, kwargs, 6, "groups", 1))
    d_input, d_weight, d_bias = _mask(arg(args, kwargs, 7, "output_mask"), 3)
    forward = conv_macs(x.shape, weight.shape, grad_output.shape, transposed)
    macs = forward * (d_input + d_weight)
    dots = numel(x) * d_input + numel(weight) * d_weight
    flops = 2 * macs + (numel(grad_output) if d_bias else 0)
    return Count(flops, macs, dots, forward * d_input + forward * groups * d_weight)


# ---------------------------------------------------------------------------------------------
# Linear: aten.linear_backward(input, grad_output, weight, output_mask) -> (grad_input,
# grad_weight, grad_bias), what autograd runs for a linear over a nested (jagged) tensor; a dense
# one's backward is its mm/sum ops
# ---------------------------------------------------------------------------------------------

@register(*aten_ops("linear_backward"))
def linear_backward_flops(module: Any, out: Any, x: Any, grad_output: Any, weight: Any, *args: Any,
                          **kwargs: Any) -> Count:
    # over T rows (input elements / in_features): dX = dY @ W, T*out*in MACs, and dW = dY^T @ X,
    # out*in*T MACs, one dot product per dX and dW element; dBias sums dY over the rows, one add per
    # dY element. FlopCounterMode has no formula for it: 0 in its convention
    d_input, d_weight, d_bias = _mask(arg(args, kwargs, 0, "output_mask"), 3)
    rows = numel(x) // max(weight.shape[-1], 1)
    forward = rows * weight.shape[0] * weight.shape[-1]
    macs = forward * (d_input + d_weight)
    dots = numel(x) * d_input + numel(weight) * d_weight
    return Count(2 * macs + (numel(grad_output) if d_bias else 0), macs, dots, 0)


# ---------------------------------------------------------------------------------------------
# Bilinear: aten._trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim) is
# sum over sumdim of i1 * i2 * i3, each unsqueezed at its expand dims (F.bilinear and its
# gradients). It contracts i1 with i2, then with i3: an einsum (see _shapes.einsum_macs).
# ---------------------------------------------------------------------------------------------

@register(*aten_ops("_trilinear"))
def trilinear_flops(module: Any, out: Any, i1: Any, i2: Any, i3: Any, expand1: Sequence[int],
                    expand2: Sequence[int], expand3: Sequence[int], sumdim: Sequence[int], *args: Any,
                    **kwargs: Any) -> Count:
    # MACs of the pairwise contractions + the products that sum nothing; FlopCounterMode counts
    # _trilinear as 0 (as the bilinear forward, matmul.py)
    rank = i1.dim() + len(expand1)
    letters = [chr(ord("a") + d) for d in range(rank)]

    def term(dropped: Sequence[int]) -> str:
        return "".join(c for d, c in enumerate(letters) if d not in set(dropped))

    equation = f"{term(expand1)},{term(expand2)},{term(expand3)}->{term(sumdim)}"
    macs, extra = einsum_macs(equation, [i1.shape, i2.shape, i3.shape])
    return Count(2 * macs + extra, macs, numel(out) if macs else 0, 0)


# ---------------------------------------------------------------------------------------------
# Attention. Per score (FlashAttention-2, Dao 2023, Algorithm 2): recompute the scaled score 1
# (+ mask add 1), P = exp(S - logsumexp) 2, dS = P * (dP - D) 2, the scale of dS 1 = 6
# (+ 1 mask) (+ 2 dropout: the mask multiply on P for dV and on dP); D = rowsum(dO * O) 2 per
# output-gradient element; grouped-query heads: each key/value gradient summed over its query
# heads (1 add per extra head element). Causal attention counts the full L x S scores, as the
# forward and FlopCounterMode do.
# ---------------------------------------------------------------------------------------------

_SCORE_BACKWARD = 6  # recompute scale, sub logsumexp, exp; dP - D, * P, scale of dS


def _bhmk(shape: Sequence[int]) -> tuple[int, ...]:
    """A (B, M, H, K) layout of the raw flash/efficient kernels as (B, H, M, K)."""
    s = tuple(shape)
    return (*s[:-3], s[-2], s[-3], s[-1])


def _varlen(shape: Sequence[int], cu_seqlens: Any, max_len: Any) -> tuple[int, ...]:
    """A packed (total, H, K) variable-length tensor as (B, H, max_len, K), an upper bound (as
    FlopCounterMode counts it on meta tensors: a formula reads no offsets)."""
    return (max(numel(cu_seqlens) - 1, 0), shape[-2], int(max_len), shape[-1])


def _attention_backward(grad_out: Sequence[int], query: Sequence[int], key: Sequence[int],
                             value: Sequence[int], masked: bool, dropout: bool) -> Count:
    """The count of one attention backward from the (B..., H, L, E) shapes of dO, Q, K, V."""
    macs, scores = sdpa_backward_macs(query, key, value, grad_out)
    lead = prod(grad_out[:-2])
    length, s, e, ev = query[-2], key[-2], query[-1], value[-1]
    # per query head: dQ (L*E), dK (S*E), dV (S*Ev) elements, each one dot product, and one per
    # score for the recomputed Q K^T and for dP = dO V^T
    d_key, d_value = lead * s * e, lead * s * ev
    dots = 2 * scores + lead * length * e + d_key + d_value
    group_adds = max(d_key - prod(key), 0) + max(d_value - prod(value), 0)
    per_score = _SCORE_BACKWARD + int(masked) + 2 * int(dropout)
    flops = 2 * macs + scores * per_score + 2 * prod(grad_out) + group_adds
    return Count(flops, macs, dots, macs)


def _shape(t: Any) -> tuple[int, ...]:
    return tuple(t.shape)


def _set(value: Any) -> bool:
    return value is not None and value is not False and value != 0


@register(*aten_ops("_scaled_dot_product_flash_attention_for_cpu_backward"))
def sdpa_flash_cpu_backward_flops(module: Any, out: Any, grad_out: Any, query: Any, key: Any, value: Any,
                                  *args: Any, **kwargs: Any) -> Count:
    # (grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *, attn_mask, scale);
    # FlopCounterMode has no entry for this CPU kernel (it counts 0): mm_macs 0
    dropout_p, is_causal = arg(args, kwargs, 2, "dropout_p", 0.0), arg(args, kwargs, 3, "is_causal", False)
    masked = _set(is_causal) or kwargs.get("attn_mask") is not None
    return _attention_backward(_shape(grad_out), _shape(query), _shape(key), _shape(value), masked,
                               _set(dropout_p))._replace(mm_macs=0)


@register(*aten_ops("_scaled_dot_product_efficient_attention_backward"))
def sdpa_efficient_backward_flops(module: Any, out: Any, grad_out: Any, query: Any, key: Any, value: Any,
                                  *args: Any, **kwargs: Any) -> Count:
    # (grad_out, query, key, value, attn_bias, out, logsumexp, philox_seed, philox_offset,
    # dropout_p, grad_input_mask, is_causal=False, *, scale)
    masked = arg(args, kwargs, 0, "attn_bias") is not None or _set(arg(args, kwargs, 7, "is_causal", False))
    return _attention_backward(_shape(grad_out), _shape(query), _shape(key), _shape(value), masked,
                                    _set(arg(args, kwargs, 5, "dropout_p", 0.0)))


@register(*aten_ops("_scaled_dot_product_flash_attention_backward"))
def sdpa_flash_backward_flops(module: Any, out: Any, grad_out: Any, query: Any, key: Any, value: Any,
                              *args: Any, **kwargs: Any) -> Count:
    # (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
    # is_causal, philox_seed, philox_offset, *, scale)
    return _attention_backward(_shape(grad_out), _shape(query), _shape(key), _shape(value),
                                    _set(arg(args, kwargs, 7, "is_causal", False)),
                                    _set(arg(args, kwargs, 6, "dropout_p", 0.0)))


@register(*aten_ops("_scaled_dot_product_cudnn_attention_backward"))
def sdpa_cudnn_backward_flops(module: Any, out: Any, grad_out: Any, query: Any, key: Any, value: Any,
                              *args: Any, **kwargs: Any) -> Count:
    # (grad_out, query, key, value, out, logsumexp, philox_seed, philox_offset, attn_bias,
    # cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, *, scale)
    masked = arg(args, kwargs, 4, "attn_bias") is not None or _set(arg(args, kwargs, 10, "is_causal", False))
    return _attention_backward(_shape(grad_out), _shape(query), _shape(key), _shape(value), masked,
                                    _set(arg(args, kwargs, 9, "dropout_p", 0.0)))


def _raw_shapes(tensors: Sequence[Any], cu_q: Any, cu_k: Any, max_q: Any, max_k: Any) -> list[tuple[int, ...]]:
    """dO, Q, K, V of the raw kernels, (B, M, H, K) or packed (total, H, K), as (B, H, M, K)."""
    if cu_q is not None:  # packed: (total, H, K), or (1, total, H, K) for the efficient kernel
        lengths = (max_q, max_q, max_k, max_k)
        return [_varlen(_shape(t), cu_q if i < 2 else cu_k, n) for i, (t, n) in enumerate(zip(tensors, lengths))]
    return [_bhmk(_shape(t)) for t in tensors]


@register(*aten_ops("_flash_attention_backward"))
def flash_attention_backward_flops(module: Any, out: Any, grad_out: Any, query: Any, key: Any, value: Any,
                                   *args: Any, **kwargs: Any) -> Count:
    # (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
    # is_causal, rng_state, unused, *, scale, window_size_left, window_size_right); tensors are
    # (B, M, H, K). FlopCounterMode reads dense ones as (B, H, M, K): it agrees when H == M == S.
    g, q, k, v = _raw_shapes((grad_out, query, key, value), arg(args, kwargs, 2, "cum_seq_q"),
                             arg(args, kwargs, 3, "cum_seq_k"), arg(args, kwargs, 4, "max_q", 0),
                             arg(args, kwargs, 5, "max_k", 0))
    return _attention_backward(g, q, k, v, _set(arg(args, kwargs, 7, "is_causal", False)),
                                    _set(arg(args, kwargs, 6, "dropout_p", 0.0)))


@register(*aten_ops("_efficient_attention_backward"))
def efficient_attention_backward_flops(module: Any, out: Any, grad_out: Any, query: Any, key: Any, value: Any,
                                       *args: Any, **kwargs: Any) -> Count:
    # (grad_out, query, key, value, bias, out, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
    # max_seqlen_k, logsumexp, dropout_p, philox_seed, philox_offset, custom_mask_type, ...);
    # tensors are (B, M, H, K), as _flash_attention_backward; custom_mask_type != 0 is causal
    cu_q = arg(args, kwargs, 2, "cu_seqlens_q")
    g, q, k, v = _raw_shapes((grad_out, query, key, value), cu_q, arg(args, kwargs, 3, "cu_seqlens_k"),
                             arg(args, kwargs, 4, "max_seqlen_q", 0), arg(args, kwargs, 5, "max_seqlen_k", 0))
    masked = arg(args, kwargs, 0, "bias") is not None or _set(arg(args, kwargs, 10, "custom_mask_type", 0))
    return _attention_backward(g, q, k, v, masked, _set(arg(args, kwargs, 7, "dropout_p", 0.0)))


# ---------------------------------------------------------------------------------------------
# Norms. With statistics of the input (layer, group, batch norm in training): x_hat =
# (x - mean) * rstd 2 per element when dX or dW is wanted; dX = rstd * (g - mean(g) - x_hat *
# mean(g * x_hat)) with g = dY * weight: sum g 1, g * x_hat 1, its sum 1, x_hat * . 1, two subs 2,
# * rstd 1 = 7 (+ 1 for the weight multiply); dW = sum(dY * x_hat) 2; dBias = sum(dY) 1.
# With running statistics (batch norm in eval): dX = dY * (weight * invstd) 1, a per-channel
# factor; dW needs x_hat 2 + 2. RMS norm: x_hat = x * rstd 1; dX = rstd * (g - x_hat *
# mean(g * x_hat)) 5 (+ 1 weight); dW 2.
# (Derivation: torch/csrc/autograd/FunctionsManual.cpp layer_norm_backward / batchnorm_double_backward.)
# ---------------------------------------------------------------------------------------------

_DX_INPUT_STATS = 7
_DX_RMS = 5


def _norm_backward(x: Any, weight: Any, mask: tuple[bool, ...], input_stats: bool = True, rms: bool = False) -> int:
    n = _grad_numel(x)
    d_input, d_weight = mask[0], len(mask) > 1 and mask[1]
    d_bias = len(mask) > 2 and mask[2]
    has_weight = weight is not None
    flops = 0
    if (d_input and input_stats) or d_weight:
        flops += (1 if rms else 2) * n  # x_hat
    if d_input and input_stats:
        flops += ((_DX_RMS if rms else _DX_INPUT_STATS) + has_weight) * n
    elif d_input:
        flops += n  # dY * (weight * invstd), one factor per channel
    if d_weight:
        flops += 2 * n  # dY * x_hat, summed
    if d_bias:
        flops += n  # dY summed
    return flops


@register(*aten_ops("native_layer_norm_backward"))
def native_layer_norm_backward_flops(module: Any, out: Any, grad_out: Any, x: Any, normalized_shape: Any,
                                     mean: Any, rstd: Any, weight: Any = None, bias: Any = None, *args: Any,
                                     **kwargs: Any) -> int:
    # (grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask): see above
    return _norm_backward(x, weight, _mask(arg(args, kwargs, 0, "output_mask"), 3))


@register(*aten_ops("native_group_norm_backward"))
def native_group_norm_backward_flops(module: Any, out: Any, grad_out: Any, x: Any, mean: Any, rstd: Any,
                                     weight: Any = None, *args: Any, **kwargs: Any) -> int:
    # (grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask): as layer norm
    return _norm_backward(x, weight, _mask(arg(args, kwargs, 4, "output_mask"), 3))


@register(*aten_ops("_weight_norm_interface_backward"))
def weight_norm_backward_flops(module: Any, out: Any, grad_w: Any, v: Any, g: Any, *args: Any,
                               **kwargs: Any) -> int:
    # (grad_w, saved_v, saved_g, saved_norms, dim) -> (grad_v, grad_g), w = v * g / n per slice:
    # grad_g = sum(grad_w * v) / n: numel(v) multiplies + numel(v) adds + numel(g) divides;
    # grad_v = (g / n) * (grad_w - v * (grad_g / n)): 2*numel(g) divides + 3*numel(v) (mul, sub, mul)
    return 5 * numel(v) + 3 * numel(g)


@register(*aten_ops("native_batch_norm_backward", "batch_norm_backward"))
def native_batch_norm_backward_flops(module: Any, out: Any, grad_out: Any, x: Any, weight: Any = None,
                                     *args: Any, **kwargs: Any) -> int:
    # native_batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean,
    # save_invstd, train, eps, output_mask); batch_norm_backward(..., save_var, update, eps,
    # output_mask, reserve): batch statistics when training (every _native_batch_norm_legit form)
    training = bool(arg(args, kwargs, 4, "train", kwargs.get("update", True)))
    return _norm_backward(x, weight, _mask(arg(args, kwargs, 6, "output_mask"), 3), input_stats=training)


@register(*aten_ops("cudnn_batch_norm_backward", "miopen_batch_norm_backward"))
def cudnn_batch_norm_backward_flops(module: Any, out: Any, x: Any, grad_out: Any, weight: Any, *args: Any,
                                    **kwargs: Any) -> int:
    # (input, grad_output, weight, running_mean, running_var, save_mean, save_var, epsilon, ...):
    # training, all three gradients
    return _norm_backward(x, weight, (True, True, True))


@register(*aten_ops("batch_norm_backward_reduce"))
def batch_norm_backward_reduce_flops(module: Any, out: Any, grad_out: Any, x: Any, *args: Any,
                                     **kwargs: Any) -> int:
    # (grad_out, input, mean, invstd, weight, input_g, weight_g, bias_g) -> (sum_dy, sum_dy_xmu,
    # grad_weight, grad_bias), SyncBatchNorm: sum dY 1, (x - mean) * dY summed 3 per element
    wanted = any(bool(arg(args, kwargs, i, name, True)) for i, name in ((3, "input_g"), (4, "weight_g"),
                                                                        (5, "bias_g")))
    return 4 * _grad_numel(x) if wanted else 0


@register(*aten_ops("batch_norm_backward_elemt"))
def batch_norm_backward_elemt_flops(module: Any, out: Any, grad_out: Any, x: Any, *args: Any,
                                    **kwargs: Any) -> int:
    # dX = (dY - mean_dy - (x - mean) * invstd^2 * mean_dy_xmu) * (invstd * weight): sub, sub, mul,
    # sub, mul = 5 per element (the per-channel factors are O(C))
    return 5 * _grad_numel(x)


@register(*aten_ops("_fused_rms_norm_backward"))
def fused_rms_norm_backward_flops(module: Any, out: Any, grad_out: Any, x: Any, normalized_shape: Any,
                                  rstd: Any, weight: Any = None, *args: Any, **kwargs: Any) -> int:
    # (grad_out, input, normalized_shape, rstd, weight, output_mask[2]): see above
    return _norm_backward(x, weight, _mask(arg(args, kwargs, 0, "output_mask"), 2), rms=True)


# ---------------------------------------------------------------------------------------------
# Activations and softmax: ``cost`` FLOPs per element of the gradient, each op's arithmetic in the
# comment above its line (derivatives.yaml / ATen's cpu/Activation.cpp).
# ---------------------------------------------------------------------------------------------

def _register_pointwise(name: str, cost: int, *ops: str) -> None:
    def formula(module: Any, out: Any, grad_output: Any, *args: Any, **kwargs: Any) -> int:
        return cost * _grad_numel(grad_output)  # dX has dY's elements

    formula.__name__ = formula.__qualname__ = f"{name}_flops"
    formula.__doc__ = f"{name}: {cost} FLOPs per gradient element."
    register(*aten_ops(*ops))(formula)


# dx = x <= threshold ? 0 : dy: 1 compare/select (ReLU, Threshold)
_register_pointwise("threshold_backward", 1, "threshold_backward")
# dx = (x <= min || x >= max) ? 0 : dy: 2 compares (Hardtanh, ReLU6)
_register_pointwise("hardtanh_backward", 2, "hardtanh_backward")
# dx = x > 0 ? dy : dy * slope: compare, mul
_register_pointwise("leaky_relu_backward", 2, "leaky_relu_backward")
# dx = x > 0 ? dy : w * dy, dw = x > 0 ? 0 : x * dy: compare, 2 muls (dw is summed by aten.sum)
_register_pointwise("prelu_kernel_backward", 3, "_prelu_kernel_backward")
# dx = dy * (1 - y) * y: sub, 2 muls
_register_pointwise("sigmoid_backward", 3, "sigmoid_backward")
# dx = dy * (1 - y^2): square, sub, mul
_register_pointwise("tanh_backward", 3, "tanh_backward")
# dx = dy * s * (1 + x * (1 - s)), s = sigmoid(x): sigmoid 3 + sub, mul, add, mul, mul = 8
_register_pointwise("silu_backward", 8, "silu_backward")
# dx = dy * sigmoid(-x): sigmoid 3 (exp, add, reciprocal) + mul
_register_pointwise("log_sigmoid_backward", 4, "log_sigmoid_backward")
# dx = dy * (t + x * sigmoid(x) * (1 - t^2)), t = tanh(softplus(x)): softplus 3, tanh 1,
# sigmoid 3, square, sub, 2 muls, add, mul dy = 13
_register_pointwise("mish_backward", 13, "mish_backward")
# dx = beta x > threshold ? dy : dy * z / (z + 1), z = exp(beta x): mul, compare, exp, add, div, mul
_register_pointwise("softplus_backward", 6, "softplus_backward")
# dx = x < -3 ? 0 : x <= 3 ? dy * (x / 3 + 0.5) : dy: 2 compares, div, add, mul
_register_pointwise("hardswish_backward", 5, "hardswish_backward")
# dx = -3 < x < 3 ? dy / 6 : 0: 2 compares, mul
_register_pointwise("hardsigmoid_backward", 3, "hardsigmoid_backward")
# dx = -lambd <= x <= lambd ? 0 : dy: 2 compares (hardshrink and softshrink alike)
_register_pointwise("shrink_backward", 2, "hardshrink_backward", "softshrink_backward")
# dx = y * (dy - sum(dy * y, dim)): mul, sum add, sub, mul (Softmax, Softmin, attention's math path)
_register_pointwise("softmax_backward_data", 4, "_softmax_backward_data")
# dx = dy - exp(y) * sum(dy, dim): sum add, exp, mul, sub (LogSoftmax, cross entropy)
_register_pointwise("log_softmax_backward_data", 4, "_log_softmax_backward_data")
# dx = dy * mask * scale: 2 muls, as the forward's mask multiply and rescale (elementwise.py)
_register_pointwise("dropout_backward", 2, "native_dropout_backward", "_masked_scale")


@register(*aten_ops("elu_backward"))
def elu_backward_flops(module: Any, out: Any, grad_output: Any, alpha: Any = 1.0, scale: Any = 1.0,
                       input_scale: Any = 1.0, is_result: Any = False, *args: Any, **kwargs: Any) -> int:
    # (grad_output, alpha, scale, input_scale, is_result, self_or_result); ELU, CELU, SELU; the
    # costlier branch + the compare: from the result y: y <= 0 ? dy * input_scale * (y + alpha *
    # scale) : dy * scale = compare, add, 2 muls = 4; from the input x: x <= 0 ? dy * c * exp(x *
    # input_scale) : dy * scale = compare, mul, exp, 2 muls = 5
    return (4 if is_result else 5) * _grad_numel(grad_output)


@register(*aten_ops("gelu_backward"))
def gelu_backward_flops(module: Any, out: Any, grad_output: Any, x: Any, *args: Any, **kwargs: Any) -> int:
    # 'none': dx = dy * (cdf + x * pdf), cdf = 0.5 (1 + erf(x / sqrt 2)) 4 (div, erf, add, mul),
    # pdf = exp(-x^2 / 2) / sqrt(2 pi) 4 (square, mul, exp, mul), x * pdf, add, mul dy = 11.
    # 'tanh' (ATen cpu/Activation.cpp GeluBackwardKernelImpl): x^2, x^3, kappa x^3, add, * beta,
    # tanh, 0.5 x, 1 + t, 0.5 (1 + t), t^2, 1 - t^2, 3 kappa x^2, 1 + ., * beta, two products, add,
    # * dy = 18
    approximate = arg(args, kwargs, 0, "approximate", "none")
    return (18 if approximate == "tanh" else 11) * _grad_numel(grad_output)


@register(*aten_ops("rrelu_with_noise_backward"))
def rrelu_backward_flops(module: Any, out: Any, grad_output: Any, x: Any, noise: Any, lower: Any = 0.125,
                         upper: Any = 1 / 3, training: Any = False, *args: Any, **kwargs: Any) -> int:
    # training (lower < upper): dx = dy * noise, 1 mul (noise holds 1 where x > 0); otherwise
    # leaky_relu_backward with slope (lower + upper) / 2: compare, mul = 2
    random = bool(training) and float(upper) - float(lower) > 1e-6
    return (1 if random else 2) * _grad_numel(grad_output)


@register(*aten_ops("glu_backward"))
def glu_backward_flops(module: Any, out: Any, grad_output: Any, *args: Any, **kwargs: Any) -> int:
    # out = a * s, s = sigmoid(b): per dY element da = dy * s and db = dy * a * s * (1 - s):
    # sigmoid 3, mul, sub, 3 muls = 8 (dX has twice dY's elements)
    return 8 * _grad_numel(grad_output)


@register(*aten_ops("logit_backward"))
def logit_backward_flops(module: Any, out: Any, grad_output: Any, x: Any, eps: Any = None, *args: Any,
                         **kwargs: Any) -> int:
    # dx = dy / (x * (1 - x)): sub, mul, div = 3; with eps, 0 outside [eps, 1 - eps]: + 2 compares
    return (3 if eps is None else 5) * _grad_numel(grad_output)


@register(*aten_ops("logit"))
def logit_flops(module: Any, out: Any, x: Any, eps: Any = None, *args: Any, **kwargs: Any) -> int:
    # logit(x) = log(x / (1 - x)): sub, div, log = 3; eps clamps x first: + 2 (BCE's gradient with
    # respect to its target runs it)
    return (3 if eps is None else 5) * float_numel(out, x)


# ---------------------------------------------------------------------------------------------
# Embeddings: the gradient rows are accumulated into the weight's gradient.
# ---------------------------------------------------------------------------------------------

@register(*aten_ops("embedding_dense_backward", "embedding_backward"))
def embedding_backward_flops(module: Any, out: Any, grad_output: Any, indices: Any, num_weights: Any,
                             padding_idx: Any = -1, scale_grad_by_freq: Any = False, *args: Any,
                             **kwargs: Any) -> int:
    # one add per gradient element into its row (embedding_backward with sparse=True: the rows
    # are kept apart, no adds); scale_grad_by_freq: + 1 divide per gradient element
    sparse = bool(arg(args, kwargs, 0, "sparse", False))
    n = _grad_numel(grad_output)
    return (0 if sparse else n) + (n if scale_grad_by_freq else 0)


@register(*aten_ops("embedding_sparse_backward"))
def embedding_sparse_backward_flops(module: Any, out: Any, grad_output: Any, indices: Any, num_weights: Any,
                                    padding_idx: Any = -1, scale_grad_by_freq: Any = False, *args: Any,
                                    **kwargs: Any) -> int:
    # the gradient rows become the sparse gradient's values (no adds); scale_grad_by_freq: 1 divide each
    return _grad_numel(grad_output) if scale_grad_by_freq else 0


_BAG_MODES = {0: "sum", 1: "mean", 2: "max"}


def _bag_backward(grad: Any, indices: Any, mode: Any, per_sample_weights: Any, scale_grad_by_freq: Any,
                  sparse: bool) -> int:
    # sum/mean: each looked-up row (I x D) receives its bag's gradient row, / bag size (mean) 1,
    # * its per-sample weight 1, / its frequency 1 (scale_grad_by_freq), then one add into the
    # weight's gradient (dense). max: each bag's gradient (B x D) goes to its arg-max row: 1 add.
    if not is_float(grad):
        return 0
    dim = grad.shape[-1] if grad.dim() else 1
    mode = _BAG_MODES.get(int(mode), "sum") if not isinstance(mode, str) else mode
    if mode == "max":
        return 0 if sparse else numel(grad)
    looked_up = numel(indices) * dim
    cost = (mode == "mean") + (per_sample_weights is not None) + bool(scale_grad_by_freq) + (not sparse)
    return cost * looked_up


@register(*aten_ops("_embedding_bag_backward"))
def embedding_bag_backward_flops(module: Any, out: Any, grad: Any, indices: Any, *args: Any, **kwargs: Any) -> int:
    # (grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
    # scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx)
    return _bag_backward(grad, indices, arg(args, kwargs, 6, "mode", 0), arg(args, kwargs, 8, "per_sample_weights"),
                         arg(args, kwargs, 5, "scale_grad_by_freq", False), bool(arg(args, kwargs, 7, "sparse", False)))


@register(*aten_ops("_embedding_bag_dense_backward"))
def embedding_bag_dense_backward_flops(module: Any, out: Any, grad: Any, indices: Any, *args: Any,
                                       **kwargs: Any) -> int:
    # (grad, indices, offset2bag, bag_size, maximum_indices, num_weights, scale_grad_by_freq, mode,
    # per_sample_weights, padding_idx)
    return _bag_backward(grad, indices, arg(args, kwargs, 5, "mode", 0), arg(args, kwargs, 6, "per_sample_weights"),
                         arg(args, kwargs, 4, "scale_grad_by_freq", False), False)


@register(*aten_ops("_embedding_bag_sparse_backward"))
def embedding_bag_sparse_backward_flops(module: Any, out: Any, grad: Any, indices: Any, *args: Any,
                                        **kwargs: Any) -> int:
    # (grad, indices, offsets, offset2bag, bag_size, num_weights, scale_grad_by_freq, mode,
    # per_sample_weights, padding_idx)
    return _bag_backward(grad, indices, arg(args, kwargs, 5, "mode", 0), arg(args, kwargs, 6, "per_sample_weights"),
                         arg(args, kwargs, 4, "scale_grad_by_freq", False), True)


@register(*aten_ops("_embedding_bag_per_sample_weights_backward"))
def embedding_bag_per_sample_weights_backward_flops(module: Any, out: Any, grad: Any, weight: Any, indices: Any,
                                                    *args: Any, **kwargs: Any) -> int:
    # the gradient of each per-sample weight is the dot of its bag's gradient row with its
    # looked-up row: mul + add per element of the I x D looked-up rows (a gather then a row-wise
    # product, counted as FLOPs like (a * b).sum(-1), not as matmul MACs)
    return 2 * numel(indices) * weight.shape[-1] if is_float(grad) else 0


# ---------------------------------------------------------------------------------------------
# Pooling
# ---------------------------------------------------------------------------------------------

def _scatter_grad(module: Any, out: Any, grad_output: Any, *args: Any, **kwargs: Any) -> int:
    # every output gradient is added to the input position it came from (the arg-max): 1 add each
    return _grad_numel(grad_output)


register(*aten_ops("max_pool2d_with_indices_backward", "max_pool3d_with_indices_backward",
                   "adaptive_max_pool2d_backward", "adaptive_max_pool3d_backward",
                   "fractional_max_pool2d_backward", "fractional_max_pool3d_backward",
                   # nearest upsampling: each output gradient added to its source input element
                   "upsample_nearest1d_backward", "upsample_nearest2d_backward", "upsample_nearest3d_backward",
                   "_upsample_nearest_exact1d_backward", "_upsample_nearest_exact2d_backward",
                   "_upsample_nearest_exact3d_backward"))(_scatter_grad)


@register(*aten_ops("max_pool2d_backward"))
def max_pool2d_backward_flops(module: Any, out: Any, grad_output: Any, x: Any, kernel_size: Any, *args: Any,
                              **kwargs: Any) -> int:
    # without saved indices (the MPS form): the arg-max again, K - 1 compares, and the add: K per
    # output gradient
    kernel = kernel_size if isinstance(kernel_size, (list, tuple)) else (kernel_size,) * 2
    return prod(kernel) * _grad_numel(grad_output)


@register(*aten_ops("avg_pool2d_backward", "avg_pool3d_backward"))
def avg_pool_backward_flops(module: Any, out: Any, grad_output: Any, x: Any, kernel_size: Any, *args: Any,
                            **kwargs: Any) -> int:
    # each output gradient / its divisor 1, then added to its K window elements: K + 1
    # (avg_pool1d and lp_pool/local_response_norm run through these with a kernel of 1 in a dim)
    return (prod(kernel_size) + 1) * _grad_numel(grad_output)


def _adaptive_avg_backward(n: int) -> Callable[..., int]:
    def formula(module: Any, out: Any, grad_output: Any, x: Any, *args: Any, **kwargs: Any) -> int:
        # per (N, C) slice: each output gradient / its window size (O divides), added to every
        # element of its window (prod_d S_d adds, see pooling.py and _shapes.adaptive_window_total)
        if not is_float(grad_output):
            return 0
        in_spatial, out_spatial = tuple(x.shape[-n:]), tuple(grad_output.shape[-n:])
        windows = prod(adaptive_window_total(int(i), int(o)) for i, o in zip(in_spatial, out_spatial))
        return prod(x.shape[:-n]) * (windows + prod(out_spatial))

    formula.__name__ = formula.__qualname__ = f"adaptive_avg_pool{n}d_backward_flops"
    return formula


register(*aten_ops("_adaptive_avg_pool2d_backward"))(_adaptive_avg_backward(2))
register(*aten_ops("_adaptive_avg_pool3d_backward"))(_adaptive_avg_backward(3))


# ---------------------------------------------------------------------------------------------
# Upsampling: (grad_output, output_size, input_size, align_corners, scales...). Each output
# gradient goes to every tap of its interpolation: (dims) weight multiplies + 1 add per tap.
# linear 2 taps x 2 = 4, bilinear 4 x 3 = 12, trilinear 8 x 4 = 32, bicubic 16 x 3 = 48.
# ---------------------------------------------------------------------------------------------

_INTERPOLATION_BACKWARD = {
    "upsample_linear1d_backward": 4,
    "upsample_bilinear2d_backward": 12,
    "upsample_trilinear3d_backward": 32,
    "upsample_bicubic2d_backward": 48,
}


def _interpolation_backward(name: str, cost: int) -> None:
    def formula(module: Any, out: Any, grad_output: Any, *args: Any, **kwargs: Any) -> int:
        return cost * _grad_numel(grad_output)

    formula.__name__ = formula.__qualname__ = f"{name}_flops"
    formula.__doc__ = f"{name}: {cost} FLOPs per output gradient element."
    register(*aten_ops(name))(formula)


for _name, _cost in _INTERPOLATION_BACKWARD.items():
    _interpolation_backward(_name, _cost)


def _antialiased_backward(interp_size: int) -> Callable[..., int]:
    def formula(module: Any, out: Any, grad_output: Any, output_size: Sequence[int], input_size: Sequence[int],
                align_corners: Any = False, *scales: Any, **kwargs: Any) -> int:
        # separable taps per output (_shapes.aa_window_total along H and W), each tap 2 weight
        # multiplies + 1 add (ATen's cpu_upsample_genNd_backward_aa)
        if not is_float(grad_output):
            return 0
        given = list(scales) + [kwargs.get("scales_h"), kwargs.get("scales_w")][len(scales):]
        taps = prod(aa_window_total(int(i), int(o), interp_size, bool(align_corners), s)
                    for i, o, s in zip(input_size[-2:], output_size, given))
        return 3 * prod(grad_output.shape[:-2]) * taps

    formula.__name__ = formula.__qualname__ = f"upsample_aa{interp_size}_backward_flops"
    return formula


register(*aten_ops("_upsample_bilinear2d_aa_backward"))(_antialiased_backward(2))
register(*aten_ops("_upsample_bicubic2d_aa_backward"))(_antialiased_backward(4))


# ---------------------------------------------------------------------------------------------
# Losses: (grad_output, self, target, ...) -> dX; the derivative's ops + 1 multiply by dY, into
# which the mean's 1/N and the constants are folded (a reduced loss's dY is one number).
# ---------------------------------------------------------------------------------------------

def _loss_backward(name: str, cost: int, *ops: str) -> None:
    def formula(module: Any, out: Any, grad_output: Any, x: Any, *args: Any, **kwargs: Any) -> int:
        return cost * _grad_numel(x)

    formula.__name__ = formula.__qualname__ = f"{name}_flops"
    formula.__doc__ = f"{name}: {cost} FLOPs per input element."
    register(*aten_ops(*ops))(formula)


# dx = (x - y) * (2 dy / N): sub, mul
_loss_backward("mse_loss_backward", 2, "mse_loss_backward")
# d = x - y; |d| < beta ? d * (dy / beta) : sign(d) * dy: sub, 2 compares, mul (Smooth L1, Huber)
_loss_backward("smooth_l1_loss_backward", 4, "smooth_l1_loss_backward", "huber_loss_backward")
# dx = -y / (1 + exp(y x)) * dy: mul, exp, add, div, mul
_loss_backward("soft_margin_loss_backward", 5, "soft_margin_loss_backward")


@register(*aten_ops("binary_cross_entropy_backward"))
def binary_cross_entropy_backward_flops(module: Any, out: Any, grad_output: Any, x: Any, target: Any,
                                        weight: Any = None, *args: Any, **kwargs: Any) -> int:
    # dx = (x - y) / max(x (1 - x), eps) * dy [* w]: sub, sub, mul, max, div, mul dy = 6, + 1 weight
    return (6 + (weight is not None)) * _grad_numel(x)


@register(*aten_ops("nll_loss_backward", "nll_loss2d_backward"))
def nll_loss_backward_flops(module: Any, out: Any, grad_output: Any, x: Any, target: Any, weight: Any = None,
                            *args: Any, **kwargs: Any) -> int:
    # dx is 0 but at each target: -w[t] * dy / total_weight: per target element the ignore_index
    # compare and the multiply by dy (the mean's 1 / total_weight folded in) 2, + 1 weight (as
    # the forward, loss.py); filling the zeros is free
    return (2 + (weight is not None)) * numel(target) if is_float(x) else 0


@register(*aten_ops("multi_margin_loss_backward"))
def multi_margin_loss_backward_flops(module: Any, out: Any, grad_output: Any, x: Any, target: Any, p: Any = 1,
                                     margin: Any = 1.0, weight: Any = None, *args: Any, **kwargs: Any) -> int:
    # per element: z = margin - x[y] + x[i] 2, z > 0 1, * dy 1, the sum into the target's
    # gradient 1 = 5; p = 2: * 2 z 1; weight: * w[y] 1
    return (5 + (int(p) == 2) + (weight is not None)) * _grad_numel(x)


# ---------------------------------------------------------------------------------------------
# Accumulating scatters that views, pads and gathers turn into in backward: one add per
# gradient element that lands on an element already written.
# ---------------------------------------------------------------------------------------------

@register(*aten_ops("reflection_pad1d_backward", "reflection_pad2d_backward", "reflection_pad3d_backward",
                    "replication_pad1d_backward", "replication_pad2d_backward", "replication_pad3d_backward"))
def pad_backward_flops(module: Any, out: Any, grad_output: Any, x: Any, *args: Any, **kwargs: Any) -> int:
    # (grad_output, self, padding): every padded position's gradient is added to the input
    # element it copied: numel(dY) - numel(x) adds
    return max(_grad_numel(grad_output) - numel(x), 0)


@register(*aten_ops("unfold_backward"))
def unfold_backward_flops(module: Any, out: Any, grad_in: Any, *args: Any, **kwargs: Any) -> int:
    # (grad_in, input_sizes, dim, size, step): every window element's gradient is added to the
    # input element it viewed: 1 add each (overlapping windows sum)
    return _grad_numel(grad_in)


@register(*aten_ops("col2im"))
def col2im_flops(module: Any, out: Any, columns: Any, *args: Any, **kwargs: Any) -> int:
    # (input, output_size, kernel_size, dilation, padding, stride): nn.Unfold's gradient (and
    # nn.Fold): every column element is added into its image position, 1 add each
    return _grad_numel(columns)


@register(*aten_ops("index_select_backward"))
def index_select_backward_flops(module: Any, out: Any, grad: Any, *args: Any, **kwargs: Any) -> int:
    # (grad, self_sizes, dim, index): an index_add of the gradient: 1 add per gradient element
    return _grad_numel(grad)


@register(*aten_ops("put"))
def put_flops(module: Any, out: Any, x: Any, index: Any, source: Any, accumulate: Any = False, *args: Any,
              **kwargs: Any) -> int:
    # put(self, index, source, accumulate): 1 add per source element when accumulating (take's
    # gradient), else a copy
    return float_numel(source, x) if bool(accumulate or kwargs.get("accumulate", False)) else 0


@register(*aten_ops("_pdist_backward"))
def pdist_backward_flops(module: Any, out: Any, grad: Any, x: Any, p: float, dist: Any, *args: Any,
                         **kwargs: Any) -> int:
    # (grad, self (N, M), p, pdist): per pair and dim, as ATen's kernel: the difference d (1), its
    # gradient (p=1: sign(d) * g, 2; p=2: d * g / dist, 2; p=inf: sign(d) * g * (|d| == dist), 4;
    # other p: d * |d|^(p-2) * g / dist^(p-1), abs, pow, 2 multiplies, divide, 5 (dist^(p-1) is
    # once per pair: not counted)), then added into both rows (2); p=0: the gradient is zeros (0)
    if not is_float(x) or p == 0:
        return 0
    per_dim = 3 + (2 if p in (1, 2) else 4 if p == float("inf") else 5)
    return numel(dist) * int(x.shape[-1]) * per_dim


del _name, _cost

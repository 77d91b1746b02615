"""The aten-op table, for graphs from ``torch.export`` (whose nodes call ``torch.ops.aten.*``).

One formula, several front doors: most aten ops take exactly the arguments of their
``torch``/``torch.nn.functional`` namesakes, so they are served by the very same formulas from the
function table (:data:`_SAME_AS_FUNCTION`). Ops whose arguments or outputs differ (tuples from
``native_*`` ops, the backend variants of attention, ``upsample_*``, ``_embedding_bag``) get a thin
adapter here that calls the family's shape helper. Zero-FLOP aten ops are an explicit list.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torch_flops.formulas import FUNCTION_FLOPs_MAPPING, METHOD_FLOPs_MAPPING, register_aten, zero_flops
from torch_flops.formulas._shapes import arg, float_numel, numel, sdpa_macs
from torch_flops.formulas.attention import _score_flops
from torch_flops.formulas.embedding import _bag
from torch_flops.formulas.norm import _INPUT_STATS, _RUNNING_STATS, _norm_flops
from torch_flops.formulas.resample import _interpolate

__all__ = ["ATEN_ZERO_OPS", "aten_sdpa_flops"]

aten = torch.ops.aten

# aten op name -> key in the function (or method) table whose formula takes the same arguments.
_SAME_AS_FUNCTION: dict[str, str] = {
    name: name
    for name in [
        # matmul family and convolutions
        "linear", "matmul", "mm", "bmm", "mv", "dot", "inner", "vdot", "addmm", "addmv", "baddbmm", "addbmm",
        "einsum", "outer", "bilinear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
        "conv_transpose3d", "convolution", "_convolution", "scaled_dot_product_attention",
        # norms (batch_norm/instance_norm formulas also accept the aten argument order)
        "layer_norm", "group_norm", "batch_norm", "instance_norm", "rms_norm", "local_response_norm",
        # activations
        "relu", "relu6", "gelu", "silu", "sigmoid", "tanh", "hardswish", "hardsigmoid", "hardtanh", "leaky_relu",
        "elu", "selu", "celu", "mish", "softplus", "softsign", "prelu", "glu", "threshold", "hardshrink",
        "softshrink", "log_sigmoid", "softmax", "log_softmax",
        # elementwise
        "add", "sub", "rsub", "mul", "div", "true_divide", "floor_divide", "remainder", "fmod", "pow",
        "float_power", "square", "neg", "abs", "reciprocal", "sqrt", "rsqrt", "exp", "exp2", "expm1", "log", "log2",
        "log10", "log1p", "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "erf", "erfc",
        "erfinv", "sign", "sgn", "floor", "ceil", "round", "trunc", "frac", "maximum", "minimum", "fmax", "fmin",
        "eq", "ne", "lt", "le", "gt", "ge", "where", "masked_fill", "clamp", "clip", "clamp_min", "clamp_max",
        "addcmul", "addcdiv", "lerp", "nan_to_num", "logical_not", "logical_and", "logical_or", "logical_xor",
        "isnan", "isinf", "hypot", "logaddexp", "xlogy", "dropout", "alpha_dropout", "feature_alpha_dropout",
        # reductions
        "sum", "nansum", "prod", "mean", "nanmean", "var", "std", "var_mean", "std_mean", "amax", "amin", "max",
        "min", "argmax", "argmin", "aminmax", "cumsum", "cumprod", "cummax", "cummin", "logcumsumexp", "norm",
        "linalg_vector_norm", "logsumexp", "all", "any", "median", "count_nonzero", "sort", "argsort", "msort",
        "topk", "histc", "diff",
        # pooling
        "max_pool1d", "max_pool2d", "max_pool3d", "max_pool1d_with_indices", "max_pool2d_with_indices",
        "max_pool3d_with_indices", "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d",
        "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d",
        "adaptive_max_pool3d",
    ]
}
_SAME_AS_FUNCTION.update({
    "_softmax": "softmax", "_log_softmax": "log_softmax", "_adaptive_avg_pool2d": "adaptive_avg_pool2d",
    "_adaptive_avg_pool3d": "adaptive_avg_pool3d", "__and__": "logical_and", "__or__": "logical_or",
    "__xor__": "logical_xor", "bitwise_and": "logical_and", "bitwise_or": "logical_or",
    "bitwise_xor": "logical_xor", "bitwise_not": "logical_not", "divide": "div", "multiply": "mul",
    "subtract": "sub", "greater": "gt", "less": "lt", "special_erf": "erf",
})

#: aten ops that are 0 FLOPs by definition: views, copies, casts, creation, indexing, checks.
ATEN_ZERO_OPS: list[str] = [
    "view", "_unsafe_view", "view_as", "reshape", "permute", "transpose", "t", "expand", "expand_as",
    "contiguous", "clone", "alias", "detach", "detach_", "lift_fresh_copy", "lift_fresh", "_to_copy", "to",
    "type_as", "unsqueeze", "unsqueeze_", "squeeze", "squeeze_", "flatten", "unflatten", "slice", "select",
    "index", "index_select", "gather", "take", "cat", "concat", "stack", "split", "split_with_sizes",
    "tensor_split", "chunk", "unbind", "narrow", "repeat", "repeat_interleave", "tile", "flip", "roll", "tril",
    "triu", "diagonal", "diag", "unfold", "as_strided", "view_as_real", "view_as_complex", "arange", "zeros",
    "ones", "empty", "full", "zeros_like", "ones_like", "empty_like", "full_like", "new_zeros", "new_ones",
    "new_empty", "new_full", "scalar_tensor", "rand", "randn", "rand_like", "randn_like", "randint",
    "linspace", "copy", "copy_", "fill", "fill_", "zero_", "_assert_tensor_metadata", "_assert_scalar",
    "_assert_async", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "sym_constrain_range",
    "sym_constrain_range_for_size", "_local_scalar_dense", "item", "pad", "constant_pad_nd",
    "reflection_pad1d", "reflection_pad2d", "reflection_pad3d", "replication_pad1d", "replication_pad2d",
    "replication_pad3d", "pixel_shuffle", "pixel_unshuffle", "channel_shuffle", "native_channel_shuffle",
    "one_hot", "embedding", "masked_select", "nonzero", "argwhere", "bincount", "scatter", "index_copy",
    "index_fill", "masked_scatter", "_unsafe_index", "upsample_nearest1d", "upsample_nearest2d",
    "upsample_nearest3d", "_upsample_nearest_exact1d", "_upsample_nearest_exact2d", "_upsample_nearest_exact3d",
    "resolve_conj", "resolve_neg", "set_", "resize_", "empty_strided", "new_empty_strided", "slice_scatter",
    "select_scatter", "diagonal_scatter", "as_strided_scatter", "unsafe_split", "unsafe_chunk", "movedim",
    "swapaxes", "swapdims", "broadcast_to", "atleast_1d", "atleast_2d", "atleast_3d", "_reshape_alias",
    "_empty_affine_quantized",
]


def _first(formula: Callable[..., Any]) -> Callable[..., Any]:
    """Adapt a formula to an op returning a tuple whose first element is the result."""
    def adapted(out: Any, *args: Any, **kwargs: Any) -> Any:
        return formula(out[0] if isinstance(out, (tuple, list)) else out, *args, **kwargs)
    adapted.__qualname__ = f"first_output({getattr(formula, '__qualname__', formula)})"
    return adapted


# ---------------------------------------------------------------------------- attention backends
# aten op -> (position of dropout_p, of is_causal, of the mask/bias) after (query, key, value)
_SDPA_BACKENDS: dict[str, tuple[int | None, int | None, int | None]] = {
    # (query, key, value, dropout_p, is_causal, *, attn_mask, scale)
    "_scaled_dot_product_flash_attention_for_cpu": (0, 1, None),
    # (query, key, value, dropout_p, is_causal, return_debug_mask, *, scale)
    "_scaled_dot_product_flash_attention": (0, 1, None),
    # (query, key, value, attn_bias, compute_log_sumexp, dropout_p, is_causal, *, scale)
    "_scaled_dot_product_efficient_attention": (2, 3, 0),
    # (query, key, value, attn_bias, compute_log_sumexp, dropout_p, is_causal, return_debug_mask, *, scale)
    "_scaled_dot_product_cudnn_attention": (2, 3, 0),
    # (query, key, value, attn_mask, dropout_p, is_causal, dropout_mask, *, scale, enable_gqa)
    "_scaled_dot_product_attention_math": (1, 2, 0),
    "_scaled_dot_product_attention_math_for_mps": (1, 2, 0),
}


def _make_sdpa(positions: tuple[int | None, int | None, int | None]) -> Callable[..., tuple[int, int]]:
    p_drop, p_causal, p_mask = positions

    def aten_sdpa_flops(out: Any, query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
        # same count as scaled_dot_product_attention: 2*(scores*E + scores*Ev) + per-score extras
        dropout_p = args[p_drop] if p_drop is not None and len(args) > p_drop else kwargs.get("dropout_p", 0.0)
        is_causal = args[p_causal] if p_causal is not None and len(args) > p_causal else kwargs.get("is_causal", False)
        mask = args[p_mask] if p_mask is not None and len(args) > p_mask else kwargs.get(
            "attn_mask", kwargs.get("attn_bias"))
        macs, scores = sdpa_macs(query.shape, key.shape, value.shape)
        return 2 * macs + _score_flops(scores, mask is not None or bool(is_causal), bool(dropout_p)), macs

    return aten_sdpa_flops


aten_sdpa_flops = _make_sdpa((1, 2, 0))

# ---------------------------------------------------------------------------- norms returning tuples


def _native_layer_norm(out: Any, x: Any, normalized_shape: Any, weight: Any = None, bias: Any = None,
                       *args: Any, **kwargs: Any) -> tuple[int, int]:
    # native_layer_norm(input, normalized_shape, weight, bias, eps) -> (out, mean, rstd): as layer_norm
    return _norm_flops(x, _INPUT_STATS, weight, bias)


def _native_group_norm(out: Any, x: Any, weight: Any = None, bias: Any = None, *args: Any,
                       **kwargs: Any) -> tuple[int, int]:
    # native_group_norm(input, weight, bias, N, C, HxW, group, eps) -> (out, mean, rstd)
    return _norm_flops(x, _INPUT_STATS, weight, bias)


def _native_batch_norm(out: Any, x: Any, weight: Any = None, bias: Any = None, running_mean: Any = None,
                       running_var: Any = None, training: bool = False, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # native_batch_norm / _native_batch_norm_legit(input, weight, bias, running_mean, running_var,
    # training, momentum, eps): batch statistics when training or no running stats
    batch_stats = bool(training) or running_mean is None
    return _norm_flops(x, _INPUT_STATS if batch_stats else _RUNNING_STATS, weight, bias)


def _native_batch_norm_no_training(out: Any, x: Any, weight: Any = None, bias: Any = None,
                                   *args: Any, **kwargs: Any) -> tuple[int, int]:
    # _native_batch_norm_legit_no_training(input, weight, bias, running_mean, running_var, momentum, eps)
    return _norm_flops(x, _RUNNING_STATS, weight, bias)


def _native_dropout(out: Any, x: Any, p: float, train: bool | None, *args: Any, **kwargs: Any) -> int:
    # native_dropout(input, p, train) -> (out, mask): mask multiply and rescale while training
    return 2 * float_numel(out[0], x) if train and p > 0 else 0


def _embedding_bag(out: Any, weight: Any, indices: Any, *args: Any, **kwargs: Any) -> int:
    # _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode (0 sum, 1 mean, 2 max), sparse,
    #                per_sample_weights, ...) -> (out, offset2bag, bag_size, max_indices)
    mode = {0: "sum", 1: "mean", 2: "max"}[int(arg(args, kwargs, 2, "mode", 0))]
    weights = arg(args, kwargs, 4, "per_sample_weights")
    return _bag(out[0], indices, weight.shape[-1], mode, weights is not None)


def _upsample(mode: str) -> Callable[..., int]:
    def upsample_flops(out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
        return _interpolate(out, x, mode)  # see resample.py for the per-output cost of each mode
    upsample_flops.__qualname__ = f"upsample_{mode}_flops"
    return upsample_flops


def _accumulate(value_pos: int, flag_pos: int | None) -> Callable[..., int]:
    def accumulate_flops(out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
        # one add per accumulated source element (when the op accumulates), else a copy
        accumulate = True if flag_pos is None else bool(arg(args, kwargs, flag_pos, "accumulate", False))
        return float_numel(args[value_pos], x) if accumulate and len(args) > value_pos else 0
    return accumulate_flops


def _grouped_mm(out: Any, a: Any, b: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # grouped matmul of token rows by per-group weights: (M, K) x (G, K, N) with offsets puts every
    # row through exactly one group's (K, N) matrix: M*K*N MACs. 3-D x 3-D is a plain batched mm.
    if a.dim() == 2 and b.dim() == 3:
        macs = a.shape[0] * a.shape[1] * b.shape[-1]
    elif a.dim() == 2 and b.dim() == 2:  # (M, K) x (K, N_total) grouped along N, or (K, M)^T x ...
        macs = a.shape[0] * a.shape[1] * b.shape[-1] if a.shape[1] == b.shape[0] else numel(out) * a.shape[0]
    else:
        macs = numel(out) * a.shape[-1]
    return 2 * macs, macs


def _register_all() -> None:
    for aten_name, key in _SAME_AS_FUNCTION.items():
        formula = FUNCTION_FLOPs_MAPPING.get(key) or METHOD_FLOPs_MAPPING.get(key)
        assert formula is not None, f"aten.{aten_name}: no function formula {key!r}"
        for name in (aten_name, f"{aten_name}_"):  # in-place variants share the formula
            packet = getattr(aten, name, None)
            if packet is not None and packet not in _REGISTERED:
                register_aten(packet)(formula)
                _REGISTERED.add(packet)
    for name in ATEN_ZERO_OPS:
        packet = getattr(aten, name, None)
        if packet is not None and packet not in _REGISTERED:
            register_aten(packet)(zero_flops)
            _REGISTERED.add(packet)
    special: dict[str, Callable[..., Any]] = {
        "native_layer_norm": _native_layer_norm,
        "native_group_norm": _native_group_norm,
        "native_batch_norm": _native_batch_norm,
        "_native_batch_norm_legit": _native_batch_norm,
        "_native_batch_norm_legit_functional": _native_batch_norm,
        "_native_batch_norm_legit_no_training": _native_batch_norm_no_training,
        "native_dropout": _native_dropout,
        "_embedding_bag": _embedding_bag,
        "embedding_bag": _embedding_bag,  # aten order: (weight, indices, ...), unlike F.embedding_bag
        "_embedding_bag_forward_only": _embedding_bag,
        "upsample_linear1d": _upsample("linear"),
        "upsample_bilinear2d": _upsample("bilinear"),
        "_upsample_bilinear2d_aa": _upsample("bilinear"),
        "upsample_trilinear3d": _upsample("trilinear"),
        "upsample_bicubic2d": _upsample("bicubic"),
        "_upsample_bicubic2d_aa": _upsample("bicubic"),
        "index_put": _accumulate(1, 2),
        "index_put_": _accumulate(1, 2),
        "_unsafe_index_put": _accumulate(1, 2),
        "index_add": _accumulate(2, None),
        "index_add_": _accumulate(2, None),
        "scatter_add": _accumulate(2, None),
        "scatter_add_": _accumulate(2, None),
        "_grouped_mm": _grouped_mm,
    }
    special.update({name: _make_sdpa(pos) for name, pos in _SDPA_BACKENDS.items()})
    for name, formula in special.items():
        packet = getattr(aten, name, None)
        if packet is not None:
            register_aten(packet, override=True)(formula)
    # Custom ops of optional libraries, keyed by "namespace.name" so nothing is imported here.
    register_aten("transformers.grouped_mm_fallback", "transformers.grouped_mm")(_grouped_mm)


_REGISTERED: set[Any] = set()
_register_all()

"""Attention: ``F.scaled_dot_product_attention`` and its aten backends, ``nn.MultiheadAttention``
and the composite ``nn.Transformer*`` layers, which ``torch.fx`` keeps as leaf modules.

The two matmuls of attention are MACs (``_shapes.sdpa_macs``). Every attention score also costs
one scale multiply and 5 softmax FLOPs (max, sub, exp, sum, div), plus one add when a mask or
causal masking is applied and one multiply when dropout is active. Causal attention is counted over
the full ``L x S`` score matrix, as FlopCounterMode counts it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn.attention import SDPBackend

from torch_flops.formulas import Count, aten_ops, functions, register
from torch_flops.formulas._shapes import arg, first_output, numel, sdpa_macs
from torch_flops.formulas.table import Composite, FormulaTable

__all__ = ["mha_flops", "sdpa_flops", "transformer_layer_flops"]

_SOFTMAX = 5  # per score: max, sub, exp, sum, div
_SCALE = 1  # per score: the 1/sqrt(E) multiply


def _score_flops(scores: int, masked: bool, dropout: bool) -> int:
    # per score: scale 1 + softmax 5 (+ mask add 1) (+ dropout multiply 1)
    return scores * (_SCALE + _SOFTMAX + int(masked) + int(dropout))


def _sdpa(out: Any, query: Any, key: Any, value: Any, masked: bool, dropout: bool, kernel_counted: bool = True) -> Count:
    # 2 * (Q K^T MACs + P V MACs) + per-score scale/softmax/mask/dropout; leading dims broadcast
    # (see _shapes.sdpa_macs); the output (the first of a backend's tuple) has the broadcast shape.
    # Dot products: one per Q K^T score (length E) and one per output element (length S).
    # Jagged nested tensors: the sum of each sequence's dense attention.
    if getattr(query, "is_nested", False):
        per_sequence = zip(_jagged_shapes(query), _jagged_shapes(key), _jagged_shapes(value))
        parts = [_sdpa_shapes(q, k, v, None) for q, k, v in per_sequence]
        macs, scores, dots = (sum(column) for column in zip(*parts)) if parts else (0, 0, 0)
    else:
        result = first_output(out)
        shape = result.shape if isinstance(result, torch.Tensor) else None
        macs, scores, dots = _sdpa_shapes(query.shape, key.shape, value.shape, shape)
    return Count(2 * macs + _score_flops(scores, masked, dropout), macs, dots, macs if kernel_counted else 0)


def _sdpa_shapes(q: Any, k: Any, v: Any, out: Any) -> tuple[int, int, int]:
    # (MACs, scores, dot products) of dense attention over these shapes
    macs, scores = sdpa_macs(q, k, v, out)
    qk_dots = (macs - scores * v[-1]) // max(q[-1], 1)
    return macs, scores, qk_dots + scores // max(k[-2], 1) * v[-1]


def _host(t: torch.Tensor) -> Any:
    # a small index tensor as a numpy array (CPU: its own memory, no op dispatched)
    return (t if t.device.type == "cpu" else t.cpu()).numpy()


def _jagged_shapes(t: Any) -> list[tuple[int, ...]]:
    """The dense shape of each sequence of a jagged nested tensor ``(B, ..., j, ...)``: the batch
    dim dropped, the ragged dim at its length (read from the offsets, or the lengths of a
    non-contiguous one, on the host: no op runs)."""
    ragged = t._ragged_idx
    if t._lengths is not None:
        sizes = _host(t._lengths).tolist()
    else:
        offsets = _host(t._offsets)
        sizes = (offsets[1:] - offsets[:-1]).tolist()
    dims = list(t.shape)
    return [tuple(int(n) if d == ragged else int(dims[d]) for d in range(1, len(dims))) for n in sizes]


def _kernel_counted(query: Any, key: Any, value: Any, attn_mask: Any, dropout_p: Any, is_causal: Any, scale: Any,
                    enable_gqa: Any) -> bool:
    """Whether FlopCounterMode counts this call on its device (the ``mm_macs`` of the count, read by
    the ``flop_counter`` convention): it has a formula for every CUDA backend and for the math
    path's bmm, none for the CPU flash kernel (``_scaled_dot_product_flash_attention_for_cpu``).
    On CPU the kernel is the one torch picks for these arguments (``torch._fused_sdp_choice``,
    which follows ``sdpa_kernel`` contexts), asked while the call's own context is still on."""
    if not isinstance(query, torch.Tensor) or query.device.type != "cpu":
        return True
    if torch.is_autocast_enabled("cpu"):  # the kernel sees its inputs as autocast casts them (fp32 -> bf16)
        query, key, value = (_autocast_like(t) for t in (query, key, value))
    try:
        choice = torch._fused_sdp_choice(query, key, value, attn_mask=attn_mask, dropout_p=float(dropout_p),
                                         is_causal=bool(is_causal), scale=scale, enable_gqa=bool(enable_gqa))
    except Exception:  # noqa: BLE001 - an argument this torch's chooser refuses: the call ran, count it
        return True
    return bool(choice != SDPBackend.FLASH_ATTENTION.value)


def _autocast_like(t: Any) -> Any:
    """``t`` as CPU autocast hands it to attention, for asking the kernel choice: a floating tensor
    other than float64 in the autocast dtype (an uninitialised one of the same shape: only its
    metadata is read)."""
    dtype = torch.get_autocast_dtype("cpu")
    if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype not in (torch.float64, dtype):
        return torch.empty_strided(t.shape, t.stride(), dtype=dtype, device=t.device)
    return t


@register(*functions("scaled_dot_product_attention"), *aten_ops("scaled_dot_product_attention"))
def sdpa_flops(module: Any, out: Any, query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> Count:
    # F.scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
    # scale=None, enable_gqa=False); mm_macs 0 where FlopCounterMode counts 0 (CPU flash kernel)
    attn_mask = arg(args, kwargs, 0, "attn_mask")
    dropout_p = arg(args, kwargs, 1, "dropout_p", 0.0)
    is_causal = arg(args, kwargs, 2, "is_causal", False)
    counted = _kernel_counted(query, key, value, attn_mask, dropout_p, is_causal, arg(args, kwargs, 3, "scale"),
                              arg(args, kwargs, 4, "enable_gqa", False))
    return _sdpa(out, query, key, value, attn_mask is not None or bool(is_causal), dropout_p > 0, counted)


# aten backend op -> (position of dropout_p, of is_causal, of the mask/bias) after (query, key, value)
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


#: backends FlopCounterMode has no formula for (it counts them 0: their count's mm_macs are 0)
_UNCOUNTED_BACKENDS = frozenset({"_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_attention_math_for_mps"})


def _sdpa_backend(name: str, positions: tuple[int | None, int | None, int | None]) -> Callable[..., Count]:
    p_drop, p_causal, p_mask = positions

    def backend_flops(module: Any, out: Any, query: Any, key: Any, value: Any, *args: Any,
                      **kwargs: Any) -> Count:
        # the same count as scaled_dot_product_attention, reading this backend's argument positions
        dropout_p = args[p_drop] if p_drop is not None and len(args) > p_drop else kwargs.get("dropout_p", 0.0)
        is_causal = args[p_causal] if p_causal is not None and len(args) > p_causal else kwargs.get("is_causal", False)
        mask = args[p_mask] if p_mask is not None and len(args) > p_mask else kwargs.get(
            "attn_mask", kwargs.get("attn_bias"))
        return _sdpa(out, query, key, value, mask is not None or bool(is_causal), bool(dropout_p),
                     name not in _UNCOUNTED_BACKENDS)

    backend_flops.__name__ = backend_flops.__qualname__ = f"{name}_flops"
    return backend_flops


for _name, _positions in _SDPA_BACKENDS.items():
    register(*aten_ops(_name))(_sdpa_backend(_name, _positions))


# What FlopCounterMode counts of an nn.MultiheadAttention call (the mm_macs of its Count), by the path
# its forward takes: the fused fast path (torch._native_multi_head_attention; inside an encoder layer
# torch._transformer_encoder_layer_fwd), which it has no formula for: nothing; without the weights,
# F.multi_head_attention_forward's F.scaled_dot_product_attention, uncounted where its kernel is (CPU
# flash): the projections; else (bmm with the weights, or a counted kernel) every matrix multiply.
_ALL, _PROJECTIONS, _NONE = "all", "projections", "none"


def _fused_eligible(tensors: tuple[Any, ...], out: Any) -> bool:
    """The tensor checks of torch's fused MHA / encoder-layer fast paths (torch 2.x ``nn``
    sources): plain tensors (a subclass has ``__torch_function__``) on CPU or CUDA, none needing a
    gradient while grad is enabled. That last one is read from the output, which needs a gradient
    exactly then (the formula runs later, maybe under another grad mode)."""
    present = [t for t in tensors if t is not None]
    if any(type(t) not in (torch.Tensor, nn.Parameter) for t in present):
        return False
    if any(t.device.type not in ("cpu", "cuda") for t in present):
        return False
    result = first_output(out)
    return not (isinstance(result, torch.Tensor) and result.requires_grad)


def _mha_native(module: nn.MultiheadAttention, out: Any, query: Any, key: Any, value: Any,
                key_padding_mask: Any = None, attn_mask: Any = None) -> bool:
    """Whether ``MultiheadAttention.forward`` took its fused fast path: its own conditions (self-attention
    on one batched tensor, eval, even heads, batch_first, packed projections with biases, no float
    mask, no autocast) and the tensor checks."""
    if not isinstance(query, torch.Tensor) or any(
            m is not None and torch.is_floating_point(m) for m in (attn_mask, key_padding_mask)):
        return False
    weight, bias = module.in_proj_weight, module.in_proj_bias
    if (not torch.backends.mha.get_fastpath_enabled() or query.dim() != 3 or query is not key or key is not value
            or weight is None or bias is None or query.dtype != weight.dtype or query.dtype != bias.dtype
            or module.training or module.num_heads % 2 or not module.batch_first or module.bias_k is not None
            or module.bias_v is not None or module.add_zero_attn or not module._qkv_same_embed_dim
            or (query.is_nested and (key_padding_mask is not None or attn_mask is not None))
            or torch.is_autocast_enabled()):
        return False
    return _fused_eligible((query, weight, bias, module.out_proj.weight, module.out_proj.bias), out)


def _mha_counted(module: nn.MultiheadAttention, out: Any, query: Any, key: Any, value: Any, need_weights: bool,
                 masked: bool, key_padding_mask: Any = None, attn_mask: Any = None) -> str:
    """What FlopCounterMode counts of this call (see _ALL/_PROJECTIONS/_NONE above)."""
    if _mha_native(module, out, query, key, value, key_padding_mask, attn_mask):
        return _NONE
    if need_weights or not isinstance(query, torch.Tensor) or query.device.type != "cpu":
        return _ALL
    # the views F.multi_head_attention_forward hands scaled_dot_product_attention: (N, H, L, head_dim)
    # and a float mask (N, H, L, S); its dropout only in training
    if query.dim() == 3:
        n, tgt_len, s_len = ((query.shape[0], query.shape[1], key.shape[1]) if module.batch_first
                             else (query.shape[1], query.shape[0], key.shape[0]))
    else:
        n, tgt_len, s_len = 1, query.shape[0], key.shape[0]
    heads = module.num_heads
    head_dim = module.embed_dim // heads
    q = query.new_empty((n, heads, tgt_len, head_dim))
    k = query.new_empty((n, heads, s_len, head_dim))
    mask = query.new_zeros((n, heads, tgt_len, s_len)) if masked else None
    dropout = module.dropout if module.training else 0.0
    return _ALL if _kernel_counted(q, k, k, mask, dropout, False, None, False) else _PROJECTIONS


def _mha(module: nn.MultiheadAttention, q_shape: tuple[int, ...], k_shape: tuple[int, ...],
         masked: bool, need_weights: bool, average: bool, counted: str = _ALL) -> Count:
    # Shapes are (L, N, E) / (S, N, kdim), or (N, L, E) with batch_first, or unbatched (L, E).
    if len(q_shape) == 3:
        if module.batch_first:
            n, tgt_len, s_len = q_shape[0], q_shape[1], k_shape[1]
        else:
            tgt_len, n, s_len = q_shape[0], q_shape[1], k_shape[0]
    else:
        n, tgt_len, s_len = 1, q_shape[0], k_shape[0]
    e = module.embed_dim
    # in-projections: L*N*E*E (q) + S*N*kdim*E (k) + S*N*vdim*E (v); out-projection L*N*E*E
    proj_macs = tgt_len * n * e * e + s_len * n * module.kdim * e + s_len * n * module.vdim * e
    proj_macs += tgt_len * n * e * e
    bias = 0
    if module.in_proj_bias is not None:
        bias += (tgt_len + 2 * s_len) * n * e
    if module.out_proj.bias is not None:
        bias += tgt_len * n * e
    # add_bias_kv / add_zero_attn each append one key position
    s_att = s_len + int(module.bias_k is not None) + int(module.add_zero_attn)
    scores = n * module.num_heads * tgt_len * s_att
    attn_macs = 2 * n * tgt_len * s_att * e  # Q K^T and P V over all heads (H * head_dim = E)
    dropout = module.training and module.dropout > 0
    extra = bias + _score_flops(scores, masked, dropout)
    if need_weights and average:
        extra += scores  # mean of the attention weights over heads: one add (or div) per score
    macs = proj_macs + attn_macs
    # dot products: the projections' outputs ((L + S + S + L) * N * E), one per score (Q K^T) and
    # one per attention output element (P V: L * N * E)
    dots = (2 * tgt_len + 2 * s_len) * n * e + scores + tgt_len * n * e
    mm_macs = {_ALL: macs, _PROJECTIONS: proj_macs, _NONE: 0}[counted]
    return Count(2 * macs + extra, macs, dots, mm_macs)


@register(nn.MultiheadAttention)
def mha_flops(module: nn.MultiheadAttention, out: Any, query: Any, key: Any, value: Any,
              *args: Any, **kwargs: Any) -> Count:
    # forward(query, key, value, key_padding_mask, need_weights, attn_mask, average_attn_weights, is_causal)
    key_padding_mask = arg(args, kwargs, 0, "key_padding_mask")
    need_weights = arg(args, kwargs, 1, "need_weights", True)
    attn_mask = arg(args, kwargs, 2, "attn_mask")
    average = arg(args, kwargs, 3, "average_attn_weights", True)
    is_causal = arg(args, kwargs, 4, "is_causal", False)
    masked = key_padding_mask is not None or attn_mask is not None or bool(is_causal)
    counted = _mha_counted(module, out, query, key, value, bool(need_weights), masked, key_padding_mask, attn_mask)
    return _mha(module, tuple(query.shape), tuple(key.shape), masked, bool(need_weights), bool(average), counted)


# ---------------------------------------------------------------------------------------------
# nn.Transformer*: composites counted by their children's formulas from the counter's own table.
# ---------------------------------------------------------------------------------------------

def _as_count(result: Any) -> Count:
    if isinstance(result, int):
        return Count(result, 0, 0, 0)
    return Count(*result) if len(result) > 2 else Count(result[0], result[1], None, None)


def _sub(table: FormulaTable, module: nn.Module | None, x: torch.Tensor, inp: torch.Tensor | None = None) -> Count:
    """A child module's own formula, evaluated on meta tensors of the right shapes: its output ``x``
    and its input ``inp`` (by default of the output's shape), as the child's own call passes them."""
    if module is None:
        return Count(0, 0, 0, 0)
    formula = table.resolve_module(type(module))
    if formula is None:
        raise NotImplementedError(f"no formula for {type(module).__name__} inside a Transformer layer")
    return _as_count(formula(module, x, x if inp is None else inp))


def _activation(table: FormulaTable, layer: Any, x: torch.Tensor) -> Count:
    act = layer.activation
    if isinstance(act, nn.Module):
        return _sub(table, act, x)
    formula = table.resolve_function(act)
    if formula is None:
        raise NotImplementedError(f"no formula for activation {act!r} inside a Transformer layer")
    return _as_count(formula(None, x, x))


def _add(*counts: Any) -> Count:
    """The sum of counts; a dot-output or mm-MAC total is known when every part knows it (a part
    without MACs has none)."""
    parts = [_as_count(c) for c in counts]

    def total(index: int) -> int | None:
        values = [p[index] if p[index] is not None else (0 if p.macs == 0 else None) for p in parts]
        return None if None in values else sum(values)  # type: ignore[arg-type]

    return Count(sum(p.flops for p in parts), sum(p.macs for p in parts), total(2), total(3))


def _ffn(table: FormulaTable, layer: Any, x: torch.Tensor) -> Count:
    # linear1 -> activation -> dropout -> linear2 (-> dropout2), + the residual add
    hidden = x.new_empty((*x.shape[:-1], layer.linear1.out_features))
    return _add(_sub(table, layer.linear1, hidden, x), _activation(table, layer, hidden),
                _sub(table, layer.dropout, hidden), _sub(table, layer.linear2, x, hidden), Count(numel(x), 0, 0, 0))


_FLOAT_MASK = torch.empty(0)  #: a mask as a layer passes it to its attention (its presence, not its values)


def _attn_block(attn: nn.MultiheadAttention, x: torch.Tensor, mem: torch.Tensor, masked: bool,
                real: tuple[Any, Any, Any] | None = None) -> Count:
    # attention (weights not needed inside the layers) + the residual add; ``real``: the layer's real
    # (output, query, key) tensors (shape, dtype, device, needing a gradient), from which
    # FlopCounterMode's share is read
    # (a layer hands its attention float masks, F._canonical_mask: with one, MHA takes no fused path)
    counted = _ALL if real is None else _mha_counted(attn, real[0], real[1], real[2], real[2], False, masked,
                                                     attn_mask=_FLOAT_MASK if masked else None)
    count = _mha(attn, tuple(x.shape), tuple(mem.shape), masked, need_weights=False, average=False, counted=counted)
    return _add(count, Count(numel(x), 0, 0, 0))


def _encoder_native(layer: nn.TransformerEncoderLayer, out: Any, src: Any, masked: bool) -> bool:
    """Whether ``TransformerEncoderLayer.forward`` took its fused fast path
    (``torch._transformer_encoder_layer_fwd``, which FlopCounterMode counts 0): its conditions."""
    attn = layer.self_attn
    if (not isinstance(src, torch.Tensor) or not torch.backends.mha.get_fastpath_enabled() or src.dim() != 3
            or layer.training or not attn.batch_first or attn.in_proj_bias is None or not attn._qkv_same_embed_dim
            or not layer.activation_relu_or_gelu or layer.norm1.eps != layer.norm2.eps
            or (src.is_nested and masked) or attn.num_heads % 2 == 1 or torch.is_autocast_enabled()
            or any(m._forward_hooks or m._forward_pre_hooks for m in layer.modules())):
        return False
    return _fused_eligible((src, attn.in_proj_weight, attn.in_proj_bias, attn.out_proj.weight, attn.out_proj.bias,
                            layer.norm1.weight, layer.norm1.bias, layer.norm2.weight, layer.norm2.bias,
                            layer.linear1.weight, layer.linear1.bias, layer.linear2.weight, layer.linear2.bias), out)


def _uncounted(count: Count) -> Count:
    """A count FlopCounterMode gives nothing of (a fused kernel it has no formula for)."""
    return Count(count.flops, count.macs, count.dot_outputs, 0)


def _users(table: FormulaTable, module: nn.Module) -> Any:
    """The formula of the user's (custom_formulas, register_module) for ``module``'s class, if any: a
    stack kept whole counts that layer or attention by it, as the layer on its own is counted."""
    formula = table.resolve_module(type(module))
    return None if formula is None or table.is_builtin(formula) else formula


def _attention(table: FormulaTable, attn: nn.MultiheadAttention, x: torch.Tensor, mem: torch.Tensor, masked: bool,
               real: tuple[Any, Any, Any]) -> Count:
    """A layer's attention block (see :func:`_attn_block`), by the user's formula for its class if any
    (called as on the layer's tensors, ``(attn, out, query, key, value)``) + the residual add."""
    mine = _users(table, attn)
    if mine is None:
        return _attn_block(attn, x, mem, masked, real)
    # as the layer calls it: (output, no weights) from (query, key, value), weights not needed (the masks'
    # tensors are not known here: None)
    count = mine(attn, (x, None), x, mem, mem, key_padding_mask=None, need_weights=False, attn_mask=None,
                 is_causal=False)
    return _add(_as_count(count), Count(numel(x), 0, 0, 0))


def _encoder_layer(table: FormulaTable, layer: nn.TransformerEncoderLayer, src: torch.Tensor,
                   masked: bool, out: Any = None) -> Count:
    # ``out``: the output of the call (a layer's inside a stack has its shape and grad need)
    x = src.new_empty(src.shape, device="meta")
    mine = _users(table, layer)
    if mine is not None:  # (a formula of the user's for the layer class: it counts each layer of a stack)
        return _as_count(mine(layer, x, x))
    count = _add(_attention(table, layer.self_attn, x, x, masked, (out, src, src)), _sub(table, layer.dropout1, x),
                 _sub(table, layer.norm1, x), _ffn(table, layer, x), _sub(table, layer.dropout2, x),
                 _sub(table, layer.norm2, x))
    return _uncounted(count) if _encoder_native(layer, out, src, masked) else count


def _decoder_layer(table: FormulaTable, layer: nn.TransformerDecoderLayer, tgt: torch.Tensor,
                   memory: torch.Tensor, masked: bool, memory_masked: bool, out: Any = None) -> Count:
    x = tgt.new_empty(tgt.shape, device="meta")
    mem = memory.new_empty(memory.shape, device="meta")
    mine = _users(table, layer)
    if mine is not None:
        return _as_count(mine(layer, x, x, mem))
    return _add(_attention(table, layer.self_attn, x, x, masked, (out, tgt, tgt)), _sub(table, layer.dropout1, x),
                _sub(table, layer.norm1, x),
                _attention(table, layer.multihead_attn, x, mem, memory_masked, (out, tgt, memory)),
                _sub(table, layer.dropout2, x), _sub(table, layer.norm2, x), _ffn(table, layer, x),
                _sub(table, layer.dropout3, x), _sub(table, layer.norm3, x))


def _masked(args: tuple[Any, ...], kwargs: dict[str, Any], *slots: tuple[int, str]) -> bool:
    """Whether any mask/causal argument, each given as (position after the tensors, keyword), is set."""
    for position, name in slots:
        value = args[position] if len(args) > position else kwargs.get(name)
        if value is not None and value is not False:
            return True
    return False


# forward(src, src_mask, src_key_padding_mask, is_causal) of the encoder layer and the encoder
_ENCODER_SLOTS = ((0, "src_mask"), (1, "src_key_padding_mask"), (2, "is_causal"))
_ENCODER_STACK_SLOTS = ((0, "mask"), (1, "src_key_padding_mask"), (2, "is_causal"))
# forward(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask,
#         tgt_is_causal, memory_is_causal) of the decoder layer and the decoder
_DECODER_SELF_SLOTS = ((0, "tgt_mask"), (2, "tgt_key_padding_mask"), (4, "tgt_is_causal"))
_DECODER_CROSS_SLOTS = ((1, "memory_mask"), (3, "memory_key_padding_mask"), (5, "memory_is_causal"))
# nn.Transformer.forward(src, tgt, src_mask, tgt_mask, memory_mask, src_key_padding_mask,
#                        tgt_key_padding_mask, memory_key_padding_mask, src_is_causal, tgt_is_causal,
#                        memory_is_causal)
_T_SRC_SLOTS = ((0, "src_mask"), (3, "src_key_padding_mask"), (6, "src_is_causal"))
_T_TGT_SLOTS = ((1, "tgt_mask"), (4, "tgt_key_padding_mask"), (7, "tgt_is_causal"))
_T_MEMORY_SLOTS = ((2, "memory_mask"), (5, "memory_key_padding_mask"), (8, "memory_is_causal"))


def transformer_layer_flops(table: FormulaTable, module: nn.TransformerEncoderLayer, out: Any, src: Any,
                            *args: Any, **kwargs: Any) -> Count:
    # self-attention block + norms + feed-forward block, each by its own formula
    return _encoder_layer(table, module, src, _masked(args, kwargs, *_ENCODER_SLOTS), out)


def transformer_decoder_layer_flops(table: FormulaTable, module: nn.TransformerDecoderLayer, out: Any, tgt: Any,
                                    memory: Any, *args: Any, **kwargs: Any) -> Count:
    return _decoder_layer(table, module, tgt, memory, _masked(args, kwargs, *_DECODER_SELF_SLOTS),
                          _masked(args, kwargs, *_DECODER_CROSS_SLOTS), out)


def transformer_encoder_flops(table: FormulaTable, module: nn.TransformerEncoder, out: Any, src: Any, *args: Any,
                              **kwargs: Any) -> Count:
    # every layer + the optional final norm
    masked = _masked(args, kwargs, *_ENCODER_STACK_SLOTS)
    x = src.new_empty(src.shape, device="meta")
    # each layer's input has src's shape, dtype and device (what its count reads of it)
    return _add(*(_encoder_layer(table, layer, src, masked, out) for layer in module.layers),
                _sub(table, module.norm, x))


def transformer_decoder_flops(table: FormulaTable, module: nn.TransformerDecoder, out: Any, tgt: Any, memory: Any,
                              *args: Any, **kwargs: Any) -> Count:
    masked = _masked(args, kwargs, *_DECODER_SELF_SLOTS)
    memory_masked = _masked(args, kwargs, *_DECODER_CROSS_SLOTS)
    x = tgt.new_empty(tgt.shape, device="meta")
    return _add(*(_decoder_layer(table, layer, tgt, memory, masked, memory_masked, out) for layer in module.layers),
                _sub(table, module.norm, x))


def transformer_flops(table: FormulaTable, module: nn.Transformer, out: Any, src: Any, tgt: Any, *args: Any,
                      **kwargs: Any) -> Count:
    # encoder over src, decoder over tgt attending to the encoder output (same shape as src)
    src_masked = _masked(args, kwargs, *_T_SRC_SLOTS)
    tgt_masked = _masked(args, kwargs, *_T_TGT_SLOTS)
    memory_masked = _masked(args, kwargs, *_T_MEMORY_SLOTS)
    enc = module.encoder
    dec = module.decoder
    x = src.new_empty(src.shape, device="meta")
    y = tgt.new_empty(tgt.shape, device="meta")
    return _add(
        *(_encoder_layer(table, layer, src, src_masked, out) for layer in enc.layers), _sub(table, enc.norm, x),
        *(_decoder_layer(table, layer, tgt, src, tgt_masked, memory_masked, out) for layer in dec.layers),
        _sub(table, dec.norm, y),
    )


register(nn.TransformerEncoderLayer)(Composite(transformer_layer_flops))
register(nn.TransformerDecoderLayer)(Composite(transformer_decoder_layer_flops))
register(nn.TransformerEncoder)(Composite(transformer_encoder_flops))
register(nn.TransformerDecoder)(Composite(transformer_decoder_flops))
register(nn.Transformer)(Composite(transformer_flops))
del _name, _positions

"""fvcore's counting rules (``fvcore.nn.FlopCountAnalysis``), as formulas of the table's calling
convention, for the drop-in :class:`torch_flops.FlopCountAnalysis`. The arithmetic is fvcore's
documented estimate for each op it handles, derived here from its definitions (one per
multiply-accumulate; "5 is just a rough estimate" for a normalisation):

* convolutions, linear, matmul, mm, addmm, bmm, einsum: their multiply-accumulates, which are
  torch_flops' own MACs (the drop-in reads those);
* ``batch_norm``: per input element 1 (eval) or 4 (training, the statistics too), + 1 with an
  affine weight (eval 2, training 5); ``group_norm``, ``layer_norm``, ``instance_norm``: 4 per
  input element, 5 with an affine weight;
* ``upsample_nearest2d`` 1 and ``upsample_bilinear2d`` 4 per output element; ``grid_sampler`` 4
  per output element (fvcore assumes bilinear); ``adaptive_avg_pool2d`` 1 per input element.

Every other op fvcore either ignores (its list of ops that do no arithmetic, :data:`IGNORED`) or
reports as unsupported, counting 0.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from torch_flops.formulas import aten_ops, functions
from torch_flops.formulas._shapes import arg, first_output, has_tensor, numel

__all__ = ["HANDLED", "IGNORED", "MAC_OPS", "OVERRIDES", "SPLIT_MODULES", "TRACED_THROUGH", "op_targets", "snake"]

#: fvcore's ops counted by their multiply-accumulates (torch_flops' MACs), as fvcore names them
MAC_OPS: dict[str, str] = {"aten::_convolution": "conv", "aten::addmm": "addmm", "aten::bmm": "bmm",
                           "aten::einsum": "einsum", "aten::matmul": "matmul", "aten::mm": "mm",
                           "aten::linear": "linear"}

#: ops fvcore ignores (0 FLOPs, never reported unsupported): its list, by TorchScript name
IGNORED: frozenset[str] = frozenset("aten::" + n for n in (
    "Int", "ScalarImplicit", "__and__", "arange", "bitwise_not", "cat", "chunk", "clamp", "clamp_",
    "constant_pad_nd", "contiguous", "copy_", "detach", "dropout", "empty", "eq", "expand", "flatten", "floor",
    "floor_divide", "full", "full_like", "gather", "ge", "gt", "index", "index_put_", "masked_fill", "max", "narrow",
    "new_empty", "new_full", "new_zeros", "nonzero", "ones", "permute", "relu", "relu_", "remainder", "reshape",
    "roll", "select", "size", "slice", "split", "split_with_sizes", "squeeze", "stack", "t", "to", "transpose",
    "type_as", "unsqueeze", "view", "zeros", "zeros_like"))


def _norm(weight_given: Any, x: Any, training: bool = True) -> int:
    # per input element: 4 (mean, var, normalise), 5 with an affine weight; batch norm in eval:
    # 1 (the folded normalise), 2 with an affine weight
    if training:
        return numel(x) * (5 if weight_given else 4)
    return numel(x) * (2 if weight_given else 1)


def batch_norm_fvcore(module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
    # the module (its affine weight; training, or no running statistics), or F.batch_norm(input,
    # running_mean, running_var, weight, bias, training)
    if module is not None:
        return _norm(has_tensor(module, "weight"), x, module.training or not module.track_running_stats)
    return _norm(arg(args, kwargs, 2, "weight") is not None, x, bool(arg(args, kwargs, 4, "training", False)))


def aten_batch_norm_fvcore(module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
    # torch.batch_norm / aten.batch_norm(input, weight, bias, running_mean, running_var, training, ...)
    return _norm(arg(args, kwargs, 0, "weight") is not None, x, bool(arg(args, kwargs, 4, "training", False)))


def group_layer_norm_fvcore(module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
    # 4 per input element, 5 with an affine weight; F.group_norm(input, num_groups, weight, bias),
    # F.layer_norm(input, normalized_shape, weight, bias)
    if module is not None:
        return _norm(has_tensor(module, "weight"), x)
    return _norm(arg(args, kwargs, 1, "weight") is not None, x)


def instance_norm_fvcore(module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
    # 4 per input element, 5 with an affine weight: the module, or F.instance_norm(input,
    # running_mean, running_var, weight, bias, ...)
    if module is not None:
        return _norm(has_tensor(module, "weight"), x)
    return _norm(arg(args, kwargs, 2, "weight") is not None, x)


def aten_instance_norm_fvcore(module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
    # torch.instance_norm / aten.instance_norm(input, weight, bias, running_mean, ...)
    return _norm(arg(args, kwargs, 0, "weight") is not None, x)


def upsample_fvcore(module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
    # 2-D nearest: 1 per output element; 2-D bilinear: 4; other modes and ranks: not fvcore's (0,
    # reported unsupported)
    mode = module.mode if module is not None else arg(args, kwargs, 2, "mode", "nearest")
    if numel(out) and out.dim() == 4 and mode in ("nearest", "bilinear"):
        return numel(out) * (1 if mode == "nearest" else 4)
    return 0


def grid_sampler_fvcore(module: Any, out: Any, *args: Any, **kwargs: Any) -> int:
    # 4 per output element (bilinear assumed)
    return 4 * numel(first_output(out))


def adaptive_avg_pool2d_fvcore(module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> int:
    # 1 per input element
    return numel(x)


def _mha_parts(module: nn.MultiheadAttention, query: Any, key: Any, args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> tuple[int, int, int, int, int, int, bool, bool]:
    # (batch N, target length L, source length S, S' = S + the appended key positions, E, heads,
    # need_weights, a mask given): forward(query, key, value, key_padding_mask, need_weights,
    # attn_mask, ...); shapes (L, N, E) / (S, N, kdim), (N, L, E) with batch_first, or unbatched (L, E)
    q, k = tuple(query.shape), tuple(key.shape)
    if len(q) == 3:
        n, tgt, src = (q[0], q[1], k[1]) if module.batch_first else (q[1], q[0], k[0])
    else:
        n, tgt, src = 1, q[0], k[0]
    src_att = src + int(module.bias_k is not None) + int(module.add_zero_attn)
    masked = arg(args, kwargs, 0, "key_padding_mask") is not None or arg(args, kwargs, 2, "attn_mask") is not None
    return (n, tgt, src, src_att, module.embed_dim, module.num_heads, bool(arg(args, kwargs, 1, "need_weights", True)),
            masked)


def mha_fvcore(module: nn.MultiheadAttention, out: Any, query: Any, key: Any, value: Any, *args: Any,
               **kwargs: Any) -> tuple[int, int]:
    # fvcore traces F.multi_head_attention_forward into ops: the projections are aten::linear,
    # L*N*E*E (q) + S*N*kdim*E (k) + S*N*vdim*E (v) + L*N*E*E (out) MACs; with need_weights the
    # scores and the weighted sum are aten::bmm, N*L*S'*E MACs each (the scores are aten::baddbmm
    # under a mask: unsupported, 0), else one scaled_dot_product_attention (unsupported, 0).
    # Returned as (linear + bmm, linear): the drop-in splits the two
    n, tgt, src, src_att, e, _, need_weights, masked = _mha_parts(module, query, key, args, kwargs)
    linear = tgt * n * e * e + src * n * module.kdim * e + src * n * module.vdim * e + tgt * n * e * e
    bmm = n * tgt * src_att * e * (1 if masked else 2) if need_weights else 0
    return linear + bmm, linear


def mha_activations_fvcore(module: nn.MultiheadAttention, out: Any, query: Any, key: Any, value: Any, *args: Any,
                           **kwargs: Any) -> tuple[int, int]:
    # fvcore's activations of the same ops: the projections' outputs L*N*E + S*N*E + S*N*E + L*N*E;
    # with need_weights the scores' N*H*L*S' (bmm, not baddbmm under a mask) and the weighted sum's
    # N*L*E. Returned as (linear + bmm, linear), as mha_fvcore
    n, tgt, src, src_att, e, heads, need_weights, masked = _mha_parts(module, query, key, args, kwargs)
    linear = 2 * tgt * n * e + 2 * src * n * e
    bmm = (0 if masked else n * heads * tgt * src_att) + n * tgt * e if need_weights else 0
    return linear + bmm, linear


#: modules fvcore's trace splits into two ops it counts, ``aten::linear`` and ``aten::bmm``: their
#: formula returns (both counts, the linear one), for FlopCountAnalysis and ActivationCountAnalysis
#: modules fvcore's trace shows as their ops (no op of their own): the drop-ins record them through
TRACED_THROUGH: tuple[type, ...] = (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer, nn.TransformerEncoder,
                                    nn.TransformerDecoder, nn.Transformer)

SPLIT_MODULES: dict[type, tuple[Callable[..., tuple[int, int]], Callable[..., tuple[int, int]]]] = {
    nn.MultiheadAttention: (mha_fvcore, mha_activations_fvcore)}

#: fvcore op -> [(the targets that run it, the formula counting them as fvcore does)]
OVERRIDES: dict[str, list[tuple[tuple[Any, ...], Callable[..., int]]]] = {
    "aten::batch_norm": [((nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm, F.batch_norm),
                          batch_norm_fvcore),
                         ((torch.batch_norm, *aten_ops("batch_norm")), aten_batch_norm_fvcore)],
    "aten::group_norm": [((nn.GroupNorm, *functions("group_norm"), *aten_ops("group_norm")),
                          group_layer_norm_fvcore)],
    "aten::layer_norm": [((nn.LayerNorm, *functions("layer_norm"), *aten_ops("layer_norm")),
                          group_layer_norm_fvcore)],
    "aten::instance_norm": [((nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d, F.instance_norm),
                             instance_norm_fvcore),
                            ((torch.instance_norm, *aten_ops("instance_norm")), aten_instance_norm_fvcore)],
    # nearest and bilinear share their targets (the mode decides which op fvcore sees)
    "aten::upsample_nearest2d": [((nn.Upsample, nn.UpsamplingNearest2d, nn.UpsamplingBilinear2d,
                                   *functions("interpolate", "upsample")), upsample_fvcore)],
    "aten::upsample_bilinear2d": [],
    "aten::adaptive_avg_pool2d": [((nn.AdaptiveAvgPool2d, *functions("adaptive_avg_pool2d"),
                                    *aten_ops("adaptive_avg_pool2d", "_adaptive_avg_pool2d")),
                                   adaptive_avg_pool2d_fvcore)],
    "aten::grid_sampler": [((*functions("grid_sample"), *aten_ops("grid_sampler", "grid_sampler_2d")),
                            grid_sampler_fvcore)],
}

#: every op fvcore counts by default
HANDLED: frozenset[str] = frozenset(MAC_OPS) | frozenset(OVERRIDES)


def op_targets(name: str) -> tuple[Any, ...]:
    """The targets (module classes, functions, aten packets) of fvcore's op ``name``
    (``"aten::batch_norm"``): those listed above, else the aten op of that name, if any."""
    if name == "aten::upsample_bilinear2d":
        name = "aten::upsample_nearest2d"
    if OVERRIDES.get(name):
        return tuple(key for keys, _ in OVERRIDES[name] for key in keys)
    if name == "aten::_convolution":  # what every convolution (module, function, aten op) records in a trace
        convs = tuple(c for c in vars(nn).values() if isinstance(c, type) and issubclass(c, nn.modules.conv._ConvNd))
        return (*convs, *functions(*_CONV_FUNCTIONS), *aten_ops("convolution", "_convolution", *_CONV_FUNCTIONS))
    op = name.removeprefix("aten::")
    classes = tuple(c for c in vars(nn).values() if isinstance(c, type) and issubclass(c, nn.Module)
                    and snake(c.__name__) == op)  # nn.MaxPool2d for aten::max_pool2d
    found = [f for f in functions(op) if callable(f)]
    return (*classes, *found, *aten_ops(op))


_CONV_FUNCTIONS = ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")


def snake(name: str) -> str:
    """``MaxPool2d`` -> ``max_pool2d``: a module class's name as its op's."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()

"""Bags of embeddings: a lookup (free, see zero.py for plain Embedding) followed by a reduction."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from torch_flops.formulas import aten_ops, register
from torch_flops.formulas._shapes import arg, float_numel, numel

__all__ = ["embedding_bag_flops"]


def _bag(out: Any, indices: Any, dim: int, mode: str, weighted: bool) -> int:
    # every looked-up row of `dim` values is accumulated once (sum: add, max: compare) = I*D;
    # per_sample_weights multiply each looked-up row first (+I*D); mean divides each result (+O)
    looked_up = numel(indices) * dim
    flops = looked_up + (looked_up if weighted else 0)
    if mode == "mean":
        flops += float_numel(out)
    return flops


@register(nn.EmbeddingBag, F.embedding_bag)
def embedding_bag_flops(module: Any, out: Any, input: Any, *args: Any, **kwargs: Any) -> int:
    # nn.EmbeddingBag(input, offsets, per_sample_weights); F.embedding_bag(input, weight, offsets,
    # max_norm, norm_type, scale_grad_by_freq, mode, sparse, per_sample_weights, ...)
    if module is not None:
        return _bag(out, input, module.embedding_dim, module.mode, arg(args, kwargs, 1, "per_sample_weights") is not None)
    weights = arg(args, kwargs, 7, "per_sample_weights")
    return _bag(out, input, arg(args, kwargs, 0, "weight").shape[-1], arg(args, kwargs, 5, "mode", "mean"),
                weights is not None)


@register(torch.embedding_bag, *aten_ops("embedding_bag", "_embedding_bag", "_embedding_bag_forward_only"))
def aten_embedding_bag_flops(module: Any, out: Any, weight: Any, indices: Any, *args: Any, **kwargs: Any) -> int:
    # torch./aten._embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode (0 sum, 1 mean,
    # 2 max), sparse, per_sample_weights, ...) -> (out, offset2bag, bag_size, max_indices)
    mode = {0: "sum", 1: "mean", 2: "max"}[int(arg(args, kwargs, 2, "mode", 0))]
    weights = arg(args, kwargs, 4, "per_sample_weights")
    return _bag(out[0], indices, weight.shape[-1], mode, weights is not None)

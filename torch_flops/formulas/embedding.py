"""Bags of embeddings: a lookup (free, see zero.py for plain Embedding) followed by a reduction."""

from __future__ import annotations

from typing import Any

from torch import nn

from torch_flops.formulas import register_function, register_module
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


@register_module(nn.EmbeddingBag)
def embedding_bag_module_flops(module: nn.EmbeddingBag, out: Any, input: Any, *args: Any, **kwargs: Any) -> int:
    weights = arg(args, kwargs, 1, "per_sample_weights")
    return _bag(out, input, module.embedding_dim, module.mode, weights is not None)


@register_function("embedding_bag")
def embedding_bag_flops(out: Any, input: Any, weight: Any, *args: Any, **kwargs: Any) -> int:
    # F.embedding_bag(input, weight, offsets, max_norm, norm_type, scale_grad_by_freq, mode, sparse,
    #                 per_sample_weights, ...)
    mode = arg(args, kwargs, 4, "mode", "mean")
    weights = arg(args, kwargs, 6, "per_sample_weights")
    return _bag(out, input, weight.shape[-1], mode, weights is not None)

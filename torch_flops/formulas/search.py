"""Searching, membership, uniqueness and sampling: ``bucketize``/``searchsorted``, ``isin``,
``unique`` (aten ``_unique2``, ``unique_dim``, ``unique_consecutive``) and ``multinomial``.
Float comparisons and arithmetic are FLOPs, as a sort's comparisons are (reduction.py); integer
and boolean data (token ids, masks) cost 0."""

from __future__ import annotations

from typing import Any

import torch

from torch_flops.formulas import aten_ops, functions, methods, register
from torch_flops.formulas._shapes import arg, is_float, numel

__all__: list[str] = []

Tensor = torch.Tensor


# ---------------------------------------------------------------------------------------------
# Searching, membership, uniqueness, sampling: float comparisons and arithmetic, as a sort.
# Integer and boolean data (token ids, masks) cost 0.
# ---------------------------------------------------------------------------------------------

def _search(values: Any, length: int) -> tuple[int, int]:
    # a binary search over `length` sorted boundaries: ceil(log2(length + 1)) comparisons per value
    if isinstance(values, (int, float)):
        return (length.bit_length() if isinstance(values, float) else 0, 0)
    return (numel(values) * length.bit_length() if is_float(values) else 0, 0)


@register(*functions("bucketize"), *aten_ops("bucketize"))
def bucketize_flops(module: Any, out: Any, x: Any, boundaries: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # torch.bucketize(input, boundaries, ...): a binary search of each input value (see _search)
    return _search(x, int(boundaries.shape[-1]))


@register(*functions("searchsorted"), *aten_ops("searchsorted"))
def searchsorted_flops(module: Any, out: Any, sorted_sequence: Any, values: Any, *args: Any,
                       **kwargs: Any) -> tuple[int, int]:
    # torch.searchsorted(sorted_sequence, input, ...): a binary search of each value along the
    # last dim of the sequence (see _search)
    return _search(values, int(sorted_sequence.shape[-1]))


@register(*functions("isin"), *aten_ops("isin"))
def isin_flops(module: Any, out: Any, elements: Any, test_elements: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # torch.isin(elements, test_elements): ATen compares every element with every test element
    # (N*M) while M < 10 * N^0.145, else sorts the N + M values together and compares neighbours
    # ((N+M) * ceil(log2(N+M)) + (N+M)); float data only
    if not (is_float(elements) or is_float(test_elements)):
        return (0, 0)
    n = numel(elements) if isinstance(elements, Tensor) else 1
    m = numel(test_elements) if isinstance(test_elements, Tensor) else 1
    if m < 10.0 * n ** 0.145:
        return (n * m, 0)
    total = n + m
    return (total * (total - 1).bit_length() + total, 0)


def _unique_flops(x: Any, along: int) -> tuple[int, int]:
    # sort the values (ceil(log2 n) comparisons per element, as sort) + one comparison of each
    # element with its neighbour; float data only
    if not is_float(x):
        return (0, 0)
    return (numel(x) * ((along - 1).bit_length() + 1) if along > 1 else numel(x), 0)


@register(*aten_ops("_unique", "_unique2"))
def unique_flops(module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # aten._unique2(self, sorted, return_inverse, return_counts) (torch.unique without dim): a sort
    # of all the elements + neighbour comparisons (see _unique_flops)
    return _unique_flops(x, numel(x))


@register(*aten_ops("unique_dim"))
def unique_dim_flops(module: Any, out: Any, x: Any, dim: int, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # aten.unique_dim(self, dim, sorted, return_inverse, return_counts): the slices along dim are
    # sorted (ceil(log2 n) comparisons of each of their elements) and compared with their neighbour
    return _unique_flops(x, int(x.shape[dim]) if x.dim() else 1)


@register(*functions("unique"), *methods("unique"))
def unique_call_flops(module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # torch.unique(input, sorted, return_inverse, return_counts, dim) as one node (fx keeps the call
    # whole): aten._unique2's count without dim, aten.unique_dim's with it (the op the call runs)
    dim = arg(args, kwargs, 3, "dim")
    return _unique_flops(x, numel(x)) if dim is None else _unique_flops(x, int(x.shape[dim]) if x.dim() else 1)


@register(*functions("unique_consecutive"), *methods("unique_consecutive"), *aten_ops("unique_consecutive"))
def unique_consecutive_flops(module: Any, out: Any, x: Any, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # one comparison of each element with its neighbour; float data only
    return (numel(x) if is_float(x) else 0, 0)


@register(*functions("multinomial"), *methods("multinomial"), *aten_ops("multinomial"))
def multinomial_flops(module: Any, out: Any, probs: Any, num_samples: int, *args: Any, **kwargs: Any) -> tuple[int, int]:
    # torch.multinomial(input (.., K), num_samples, replacement=False): per row of K weights,
    # without replacement (ATen: topk of w / Exp(1) noise) K divides + K comparisons; with
    # replacement the cumulative sum K adds, its normalisation K divides and a binary search per
    # sample (ceil(log2(K + 1)) comparisons); the random numbers themselves: 0, as rand's
    if not is_float(probs):
        return (0, 0)
    k = int(probs.shape[-1])
    rows = numel(probs) // max(k, 1)
    if arg(args, kwargs, 0, "replacement", False):
        return (rows * (2 * k + int(num_samples) * k.bit_length()), 0)
    return (rows * 2 * k, 0)

"""The KV cache of a generation, read from the live cache object: its tensors per layer and the
bytes they hold, and the bytes the model's shape says they should hold.

What is read (:func:`cache_layers`):

* a transformers ``Cache`` (``DynamicCache``, ``StaticCache``, ``SlidingWindowCache``, quantized
  caches, ...): its ``layers``, each layer's ``keys`` and ``values`` (or, for a layer without
  them, every tensor the layer holds); an ``EncoderDecoderCache``: its self-attention layers
  followed by its cross-attention layers; an older ``Cache`` with ``key_cache``/``value_cache``
  lists: one layer per list item;
* legacy tuples: one item per layer, each a ``(key, value)`` tuple (or any tuple of tensors);
* what a user's own ``kv_cache`` callable returns: any of the above, a sequence with one item per
  layer (a tensor, or a tuple/list/dict of tensors), or a mapping layer name -> tensors.

Bytes held are the bytes of the tensors' storages, each storage once (a ``StaticCache`` holds its
whole preallocated length from the first step). The formula a measured cache is checked against
(:func:`kv_cache_formula_bytes`)::

    2 (keys and values) x layers x kv_heads x head_dim x tokens x batch x dtype bytes

with the layers, KV heads (``num_key_value_heads``: fewer than the query heads under grouped-query
attention) and head dimension read off the model's config.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from torch_flops.measure import storage_key, tensor_nbytes, tensors_of

__all__ = ["KVCacheState", "cache_layers", "kv_cache_formula_bytes", "kv_cache_shape", "read_cache"]


@dataclass(frozen=True)
class KVCacheState:
    """The KV cache after one step: bytes held per layer (each storage once, across layers too)."""

    layer_bytes: tuple[int, ...]
    #: the cache's own type name ("DynamicCache", "tuple", ...)
    kind: str
    #: tokens the cache holds per sequence (the keys' sequence dimension of the first layer), when it has keys
    tokens: int | None = None
    #: the length a preallocating cache (StaticCache) holds whatever it was filled with, else None
    max_length: int | None = None

    @property
    def total_bytes(self) -> int:
        return sum(self.layer_bytes)

    def as_dict(self) -> dict[str, Any]:
        return {"layer_bytes": list(self.layer_bytes), "kind": self.kind, "tokens": self.tokens,
                "max_length": self.max_length, "total_bytes": self.total_bytes}


def cache_layers(cache: Any) -> list[list[torch.Tensor]]:
    """The tensors of each layer of ``cache`` (see the module docstring); ``TypeError`` for an
    object this cannot read."""
    if cache is None:
        return []
    if isinstance(cache, torch.Tensor):
        return [[cache]]
    inner = [getattr(cache, name, None) for name in ("self_attention_cache", "cross_attention_cache")]
    if inner[0] is not None:  # EncoderDecoderCache: the decoder's own cache, then the cross-attention one
        return [layer for part in inner if part is not None for layer in cache_layers(part)]
    layers = getattr(cache, "layers", None)
    if isinstance(layers, (list, tuple)) and not isinstance(cache, (list, tuple)):
        return [_layer_tensors(layer) for layer in layers]
    keys, values = getattr(cache, "key_cache", None), getattr(cache, "value_cache", None)
    if isinstance(keys, (list, tuple)) and isinstance(values, (list, tuple)):
        return [[t for t in (k, v) if isinstance(t, torch.Tensor)] for k, v in zip(keys, values)]
    if isinstance(cache, Mapping):
        return [tensors_of(v) for v in cache.values()]
    if isinstance(cache, Sequence) and not isinstance(cache, (str, bytes)):
        return [tensors_of(item) for item in cache]
    raise TypeError(f"cannot read a KV cache from a {type(cache).__name__}: expected a transformers Cache, legacy "
                    "tuples (one (key, value) per layer), or a sequence/mapping of tensors per layer")


def _layer_tensors(layer: Any) -> list[torch.Tensor]:
    keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
    if isinstance(keys, torch.Tensor) or isinstance(values, torch.Tensor):
        return [t for t in (keys, values) if isinstance(t, torch.Tensor)]
    # a layer that stores something else (quantized keys, a state): every tensor it holds
    return [v for v in vars(layer).values() if isinstance(v, torch.Tensor)]


def read_cache(cache: Any) -> KVCacheState:
    """The bytes ``cache`` holds now, per layer (a storage shared between layers is counted in
    the first that holds it)."""
    seen: set[int] = set()
    per_layer: list[int] = []
    layers = cache_layers(cache)
    for tensors in layers:
        total = 0
        for t in tensors:
            key, nbytes = storage_key(t)
            if key in seen:
                continue
            seen.add(key)
            total += nbytes if t.layout is torch.strided else tensor_nbytes(t)
        per_layer.append(total)
    first = next((ts[0] for ts in layers if ts and ts[0].dim() >= 2), None)
    max_length = getattr(cache, "max_cache_len", None)
    if max_length is None:  # transformers 5: each layer of a preallocating cache knows its length
        max_length = getattr(next(iter(getattr(cache, "layers", None) or ()), None), "max_cache_len", None)
    return KVCacheState(layer_bytes=tuple(per_layer), kind=type(cache).__name__,
                        tokens=int(first.shape[-2]) if first is not None else None,
                        max_length=max_length if isinstance(max_length, int) and max_length > 0 else None)


def kv_cache_shape(config: Any) -> tuple[int, int, int] | None:
    """``(layers, kv_heads, head_dim)`` of a transformers config (its text config for a
    multimodal one), or None when the config does not say."""
    if config is None:
        return None
    get_text = getattr(config, "get_text_config", None)
    if callable(get_text):
        config = get_text()

    def first(*names: str) -> int | None:
        for name in names:
            value = getattr(config, name, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None

    layers = first("num_hidden_layers", "n_layer", "num_layers", "n_layers")
    heads = first("num_attention_heads", "n_head", "num_heads")
    kv_heads = first("num_key_value_heads", "n_kv_heads", "num_kv_heads", "multi_query_group_num") or heads
    hidden = first("hidden_size", "n_embd", "d_model")
    head_dim = first("head_dim") or (hidden // heads if hidden and heads else None)
    if layers is None or kv_heads is None or head_dim is None:
        return None
    return layers, kv_heads, head_dim


def kv_cache_formula_bytes(config: Any, tokens: int, batch: int, dtype: torch.dtype) -> int | None:
    """``2 x layers x kv_heads x head_dim x tokens x batch x dtype bytes`` from ``config`` (None
    when the config does not give the shape)."""
    shape = kv_cache_shape(config)
    if shape is None:
        return None
    layers, kv_heads, head_dim = shape
    return 2 * layers * kv_heads * head_dim * tokens * batch * dtype.itemsize

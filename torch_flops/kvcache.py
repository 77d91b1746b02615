"""The KV cache of a generation, read from the live cache object: its tensors per layer and the
bytes they hold, and the bytes the model's shape says they should hold.

What is read (:func:`cache_layers`):

* a transformers ``Cache`` (``DynamicCache``, ``StaticCache``, ``SlidingWindowCache``, quantized
  caches, ...): its ``layers``, each layer's ``keys`` and ``values`` and a recurrent layer's
  state (Mamba, linear attention: its ``conv_states`` and ``recurrent_states``, beside keys and
  values in a hybrid layer), or, for a layer with none of these, every tensor the layer holds;
  an ``EncoderDecoderCache``: its self-attention layers
  followed by its cross-attention layers; an older ``Cache`` with ``key_cache``/``value_cache``
  lists: one layer per list item;
* legacy tuples: one item per layer, each a ``(key, value)`` tuple (or any tuple of tensors);
* what a user's own ``kv_cache`` callable returns: any of the above, a sequence with one item per
  layer (a tensor, or a tuple/list/dict of tensors), or a mapping layer name -> tensors;
* a recurrent model's own cache object (xLSTM's ``xLSTMCache``): its per-layer state, the first
  attribute named ``*_state``/``*_states`` holding a mapping layer -> tensors or one item per layer;
* a recurrent state kept as a few tensors with every layer's slice on their last dimension (RWKV's
  ``state``: five ``(batch, hidden, layers)`` tensors), found by :func:`found_state` and read as a
  :class:`StackedState`.

Bytes held are the bytes of the tensors' storages, each storage once (a ``StaticCache`` holds its
whole preallocated length from the first step). The tokens a cache has been filled with are its own
count (transformers' ``get_seq_length()``: a ``StaticCache``'s used slots, not its length; an
``EncoderDecoderCache``'s self-attention's), read right after a call: what that call attended
over, the candidate tokens a speculative step fed included, those dropped before it not. The
formula a measured cache is checked against (:func:`kv_cache_formula_bytes`; not for a cache
holding a recurrent state, nor under multi-head latent attention)::

    2 (keys and values) x layers x kv_heads x head_dim x tokens x batch x dtype bytes

with the layers (less the ``num_kv_shared_layers`` that reuse an earlier layer's keys and values:
Gemma 3n), KV heads (``num_key_value_heads``: fewer than the query heads under grouped-query
attention) and head dimension read off the model's config.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from torch_flops.measure import storage_key, tensor_nbytes, tensors_of

__all__ = ["CACHE_NAMES", "KVCacheState", "StackedState", "cache_argument", "cache_layers", "found_cache",
           "found_state", "kv_cache_formula_bytes", "kv_cache_shape", "read_cache"]

#: the names a transformers model gives its cache, in its forward's arguments and in its output:
#: ``cache`` (transformers 5.24 renamed it), ``past_key_values`` (before, and still accepted as an
#: argument), ``cache_params`` (Mamba's recurrent state)
CACHE_NAMES = ("cache", "past_key_values", "cache_params")


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
    #: layers holding a recurrent state (Mamba, linear attention), which no KV formula describes
    recurrent_layers: int = 0
    #: tokens per sequence the cache has been filled with, as it counts them itself (transformers'
    #: ``get_seq_length()``: a StaticCache's used length, not ``max_length``), else None
    seq_length: int | None = None
    #: the smallest sliding window of its layers (they keep that many tokens at most), else None
    sliding_window: int | None = None

    @property
    def total_bytes(self) -> int:
        return sum(self.layer_bytes)

    def window_full(self, tokens: int | None = None) -> bool:
        """Whether a sliding-window layer holds its whole window at ``tokens`` per sequence (default:
        the count the cache gives, assumed full when it gives none): from then on it keeps its last
        ``sliding_window - 1`` tokens whatever the context, so no bytes-per-token figure describes it."""
        tokens = self.seq_length if tokens is None else tokens
        return self.sliding_window is not None and (tokens is None or tokens >= self.sliding_window)

    def as_dict(self) -> dict[str, Any]:
        return {"layer_bytes": list(self.layer_bytes), "kind": self.kind, "tokens": self.tokens,
                "max_length": self.max_length, "recurrent_layers": self.recurrent_layers,
                "seq_length": self.seq_length, "sliding_window": self.sliding_window, "total_bytes": self.total_bytes}


def found_cache(holder: Any) -> Any:
    """The cache in a model's output or in the keyword arguments of its call (an attribute or a
    mapping key named as in :data:`CACHE_NAMES`), or None. A value under the generic name ``cache``
    counts only when it looks like one (a transformers ``Cache``, or tuples of layers)."""
    for name in CACHE_NAMES:
        value = holder.get(name) if isinstance(holder, Mapping) else None
        if value is None:
            try:
                value = getattr(holder, name, None)
            except Exception:  # noqa: BLE001  (an output whose attributes raise: no cache there)
                value = None
        if value is None or (name == "cache" and not _cache_like(value)):
            continue
        return value
    return None


@dataclass(frozen=True)
class StackedState:
    """A recurrent state held as a few tensors, each with one slice per layer on its last dimension
    (RWKV's ``state``: its attention's and feed-forward's running values, ``(batch, hidden,
    layers)`` each)."""

    tensors: tuple[torch.Tensor, ...]

    @property
    def layers(self) -> int:
        return int(self.tensors[0].shape[-1])


def found_state(holder: Any) -> StackedState | None:
    """A :class:`StackedState` under the name ``state`` in a model's output or call keywords: a
    list or tuple of two or more tensors of at least two dimensions with the same last one (the
    layers), else None."""
    value = holder.get("state") if isinstance(holder, Mapping) else None
    if value is None:
        try:
            value = getattr(holder, "state", None)
        except Exception:  # noqa: BLE001  (an output whose attributes raise: no state there)
            return None
    if not isinstance(value, (list, tuple)) or len(value) < 2:
        return None
    if not all(isinstance(t, torch.Tensor) and t.dim() >= 2 for t in value):
        return None
    if len({int(t.shape[-1]) for t in value}) != 1:
        return None
    return StackedState(tuple(value))


def _cache_like(value: Any) -> bool:
    return isinstance(value, (tuple, list)) or any(
        hasattr(value, attribute) for attribute in ("layers", "get_seq_length", "key_cache"))


def cache_argument(model: Any) -> str:
    """The keyword ``model``'s forward takes its cache by: ``cache`` where its signature names it
    (transformers >= 5.24), else ``past_key_values``."""
    try:
        parameters = inspect.signature(model.forward).parameters
    except (TypeError, ValueError, AttributeError):
        return "past_key_values"
    return "cache" if "cache" in parameters and "past_key_values" not in parameters else "past_key_values"


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
    state = _recurrent_state(cache)
    if state is not None:
        return state
    raise TypeError(f"cannot read a KV cache from a {type(cache).__name__}: expected a transformers Cache, legacy "
                    "tuples (one (key, value) per layer), or a sequence/mapping of tensors per layer")


def _recurrent_state(cache: Any) -> list[list[torch.Tensor]] | None:
    """The per-layer state of a recurrent model's own cache object (xLSTM's ``rnn_state``: a mapping
    layer -> tensors; a sequence with one item per layer): its first attribute named ``*_state`` or
    ``*_states`` holding one, else None."""
    for name, value in getattr(cache, "__dict__", {}).items():
        if name.endswith(("_state", "_states")) and isinstance(value, (Mapping, list, tuple)) and value:
            items = value.values() if isinstance(value, Mapping) else value
            layers = [tensors_of(item) for item in items]
            if all(layers):
                return layers
    return None


def _layer_tensors(layer: Any) -> list[torch.Tensor]:
    keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
    tensors = [t for t in (keys, values) if isinstance(t, torch.Tensor)]
    # a recurrent (Mamba, linear attention) layer's state, held beside or instead of keys and values:
    # ``conv_states``/``recurrent_states``, one tensor per state index
    held = getattr(layer, "__dict__", {})
    tensors += [t for name, v in held.items() if name.endswith("_states") for t in tensors_of(v)]
    if tensors:
        return tensors
    # a layer that stores something else (quantized keys): every tensor it holds
    return [t for v in held.values() for t in tensors_of(v)]


def _tokens(cache: Any, layers: list[list[torch.Tensor]]) -> int | None:
    """Tokens per sequence: the sequence dimension of the first layer's keys (a recurrent layer's
    state has none); for tuples and the user's own tensors, of the first layer's first tensor."""
    cache_layers = getattr(cache, "layers", None)
    if isinstance(cache_layers, (list, tuple)) and not isinstance(cache, (list, tuple)):
        keys = next((k for layer in cache_layers if isinstance(k := getattr(layer, "keys", None), torch.Tensor)
                     and k.dim() >= 2), None)
        return None if keys is None else int(keys.shape[-2])
    first = next((ts[0] for ts in layers if ts and ts[0].dim() >= 2), None)
    return None if first is None else int(first.shape[-2])


def read_cache(cache: Any) -> KVCacheState:
    """The bytes ``cache`` holds now, per layer (a storage shared between layers is counted in
    the first that holds it)."""
    if isinstance(cache, StackedState):  # each layer: its slice of every tensor (numel / layers elements)
        n = cache.layers
        per = sum(t.numel() // n * t.element_size() for t in cache.tensors)
        return KVCacheState(layer_bytes=(per,) * n, kind="StackedState", tokens=None, recurrent_layers=n)
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
    # (an EncoderDecoderCache's length is its self-attention cache's: the cross-attention's is the encoder's)
    own = getattr(cache, "self_attention_cache", None)
    own = cache if own is None else own
    max_length = getattr(own, "max_cache_len", None)
    if max_length is None:  # transformers 5: each layer of a preallocating cache knows its length
        max_length = getattr(next(iter(getattr(own, "layers", None) or ()), None), "max_cache_len", None)
    recurrent = sum(any(tensors_of(v) for name, v in getattr(layer, "__dict__", {}).items() if name.endswith("_states"))
                    for layer in _cache_layer_objects(cache))
    # a recurrent model's own cache object (xLSTM): every layer a state, no tokens dimension
    own_state = not recurrent and not isinstance(cache, (torch.Tensor, Mapping, Sequence)) \
        and getattr(cache, "layers", None) is None and getattr(cache, "key_cache", None) is None \
        and _recurrent_state(cache) is not None
    windows = [w for w in map(_window, _cache_layer_objects(cache)) if w is not None]
    return KVCacheState(layer_bytes=tuple(per_layer), kind=type(cache).__name__,
                        tokens=None if own_state else _tokens(cache, layers),
                        max_length=max_length if isinstance(max_length, int) and max_length > 0 else None,
                        recurrent_layers=len(layers) if own_state else recurrent, seq_length=_seq_length(cache),
                        sliding_window=min(windows) if windows else None)


def state_holders(modules: Iterable[torch.nn.Module]) -> list[torch.nn.Module]:
    """Those of ``modules`` holding an attribute named ``*_state``/``*_states`` (see
    :func:`with_module_states`)."""
    return [m for m in modules if any(name.endswith(("_state", "_states")) for name in vars(m))]


def with_module_states(state: KVCacheState, cache: Any, model: torch.nn.Module,
                       holders: Iterable[torch.nn.Module] | None = None) -> KVCacheState:
    """``state`` with the recurrent state a model keeps on its own modules, beside its cache object:
    tensors held as plain attributes named ``*_state``/``*_states`` (RecurrentGemma's
    ``recurrent_states`` and ``conv1d_state``, whose cache layers hold none), each storage once and
    none the cache holds, added to the cache layer of the decoder layer that holds it (when the
    model has a list of as many layers as the cache), else as layers of their own. ``holders``: the
    modules to look at (:func:`state_holders`; by default all of the model's)."""
    held = [(m, [v for name, v in vars(m).items() if name.endswith(("_state", "_states"))
                 and isinstance(v, torch.Tensor)]) for m in (model.modules() if holders is None else holders)]
    held = [(m, tensors) for m, tensors in held if tensors]
    if not held:
        return state
    seen = {storage_key(t)[0] for layer in cache_layers(cache) for t in layer} if cache is not None else set()
    per_layer = list(state.layer_bytes)
    # the list of as many layers as the cache that holds the stateful modules (not another of that length)
    holding = {id(m) for m, _ in held}
    owner: dict[int, int] = {}
    for stack in (m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == len(per_layer)):
        found = {id(sub): i for i, layer in enumerate(stack) for sub in layer.modules()}
        if len(holding & found.keys()) > len(holding & owner.keys()):
            owner = found
    extra: list[int] = []
    recurrent: set[int] = set()
    for module, tensors in held:
        total = 0
        for t in tensors:
            key, nbytes = storage_key(t)
            if key not in seen:
                seen.add(key)
                total += nbytes
        i = owner.get(id(module))
        if i is None:
            extra.append(total)
        else:
            per_layer[i] += total
            recurrent.add(i)
    return dataclasses.replace(state, layer_bytes=tuple(per_layer + extra),
                               recurrent_layers=state.recurrent_layers + len(recurrent) + len(extra))


def _window(layer: Any) -> int | None:
    """A sliding layer's window: its own, or a static one's length (the window it preallocates)."""
    if not getattr(layer, "is_sliding", False) and getattr(layer, "sliding_window", None) is None:
        return None
    window = getattr(layer, "sliding_window", None) or getattr(layer, "max_cache_len", None)
    return window if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None


def _seq_length(cache: Any) -> int | None:
    """Tokens per sequence a transformers ``Cache`` has been filled with, by its own count
    (``get_seq_length()``; an EncoderDecoderCache's: its self-attention cache's): a StaticCache's used
    slots, a sliding window's every token (not the window it keeps). None for tuples and tensors
    of one's own, a cache of recurrent states alone (it raises), or a count on the meta device."""
    get = getattr(cache, "get_seq_length", None)
    if not callable(get) or isinstance(cache, (torch.Tensor, Mapping, Sequence)):
        return None
    try:
        n = get()
        if isinstance(n, torch.Tensor):  # a StaticCache's running count: a 0-d tensor
            n = None if n.numel() != 1 or n.is_meta or n.is_floating_point() else int(n)
    except Exception:  # noqa: BLE001  (a cache that cannot count: the tokens fed say instead)
        return None
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None


def _cache_layer_objects(cache: Any) -> list[Any]:
    """The layer objects of a transformers ``Cache`` (an ``EncoderDecoderCache``'s parts'), else none."""
    parts = [getattr(cache, name, None) for name in ("self_attention_cache", "cross_attention_cache")]
    out: list[Any] = []
    for part in parts if parts[0] is not None else [cache]:
        layers = getattr(part, "layers", None)
        if isinstance(layers, (list, tuple)) and not isinstance(part, (list, tuple)):
            out += layers
    return out


class _Heterogeneous(Exception):
    """A config whose layers differ in a shape attribute: no one shape for all its layers."""


def kv_cache_shape(config: Any) -> tuple[int, int, int] | None:
    """``(layers, kv_heads, head_dim)`` of a transformers config (its text config for a
    multimodal one), or None when the config does not say, or its layers differ (a per-layer
    config refusing one global value)."""
    if config is None:
        return None
    get_text = getattr(config, "get_text_config", None)
    if callable(get_text):
        config = get_text()

    def first(*names: str) -> int | None:
        for name in names:
            try:
                value = getattr(config, name, None)
            except AttributeError:
                value = None
            except Exception as e:  # transformers' per-layer configs: AmbiguousGlobalPerLayerAttributeError
                raise _Heterogeneous from e
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None

    try:
        layers = first("num_hidden_layers", "n_layer", "num_layers", "n_layers")
        shared = first("num_kv_shared_layers")  # Gemma 3n: the last layers reuse earlier layers' keys and values
        if layers is not None and shared is not None and shared < layers:
            layers -= shared
        heads = first("num_attention_heads", "n_head", "num_heads")
        kv_heads = first("num_key_value_heads", "n_kv_heads", "num_kv_heads", "multi_query_group_num") or heads
        if getattr(config, "multi_query", None) is True and not getattr(config, "new_decoder_architecture", False):
            kv_heads = 1  # Falcon's multi-query attention: one KV head (num_kv_heads counts only with the new architecture)
        hidden = first("hidden_size", "n_embd", "d_model")
        head_dim = first("head_dim") or (hidden // heads if hidden and heads else None)
    except _Heterogeneous:
        return None
    if layers is None or kv_heads is None or head_dim is None:
        return None
    return layers, kv_heads, head_dim


def kv_cache_formula_bytes(config: Any, tokens: int, batch: int, dtype: torch.dtype) -> int | None:
    """``2 x layers x kv_heads x head_dim x tokens x batch x dtype bytes`` from ``config`` (None
    when the config does not give the shape)."""
    shape = kv_cache_shape(config)
    if shape is None or _latent_attention(config):
        return None
    layers, kv_heads, head_dim = shape
    return 2 * layers * kv_heads * head_dim * tokens * batch * dtype.itemsize


def _latent_attention(config: Any) -> bool:
    """Multi-head latent attention (DeepSeek V2/V3: a ``kv_lora_rank``): its cache holds keys and
    values of their own widths, laid out as the implementation chooses, which the formula does not describe."""
    get_text = getattr(config, "get_text_config", None)
    try:
        rank = getattr(get_text() if callable(get_text) else config, "kv_lora_rank", None)
    except Exception:  # noqa: BLE001  (a per-layer config)
        return False
    return isinstance(rank, int) and not isinstance(rank, bool) and rank > 0

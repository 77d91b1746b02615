"""Generation sweeps on the meta device: batch sizes x prompt lengths x generated lengths for a model
that never runs (a Llama-2-70B shape costs no memory), each point priced from the real graph of
one prefill and one decode step of the model itself on a hardware spec's roofline.

Per point ``(B, P, G)``:

* **prefill**: one call with ``B x P`` token ids, which returns the cache (shared by the points of
  the same ``B`` and ``P``);
* **decode**: one call with ``B x 1`` token ids over a cache of ``L = P + (G - 2) // 2`` tokens
  (built on meta with the prefill cache's per-layer shapes; its context is ``L + 1`` tokens). The
  decode steps of a generation run over caches of ``P`` to ``P + G - 2`` tokens, and a step's
  FLOPs and bytes grow linearly with its cache (attention over it), so this middle step is their
  mean step (exactly, for even ``G``);
* ``TTFT`` = the prefill's roofline time, ``TPOT`` = the decode step's, ``tokens/s`` =
  ``B x G / (TTFT + (G - 1) x TPOT)``, decode tokens/s = ``B / TPOT``;
* memory: weights, KV cache at the end, ``P + G - 1`` tokens (the last token generated is never fed
  back: the measured cache's bytes per token, times ``B x (P + G - 1)``, as
  ``GenerationProfile.predict`` prices a generation's own), and the larger of the two calls' peak
  activations; ``fits`` when their sum is within the part's memory.

A transformers causal LM (a config, or a model built on meta) needs nothing more. Any other model
on meta takes ``inputs(batch, tokens_in, cache_length) -> kwargs`` (its meta inputs for a call
feeding ``tokens_in`` tokens over a cache of ``cache_length``) and, to measure its cache,
``kv_cache(kwargs, output)`` returning it (default: the cache of the output or of the kwargs,
``cache`` from transformers 5.24, ``past_key_values`` before).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from torch_flops import formulas, generation_report, report
from torch_flops.capture import ModelIndex
from torch_flops.generation import activation_bytes, profile_one_call, weights_bytes
from torch_flops.hardware import HardwareSpec
from torch_flops.hardware import get as get_hardware
from torch_flops.kvcache import KVCacheState, cache_argument, found_cache, read_cache
from torch_flops.records import Profile
from torch_flops.roofline import roofline

__all__ = ["GenerationSweep", "SweepPoint", "sweep_generation"]

InputsFn = Callable[[int, int, int], Mapping[str, Any]]


@dataclass(frozen=True)
class SweepPoint:
    """One point of a sweep (see the module docstring)."""

    batch: int
    prompt: int
    generated: int
    decode_context: int  #: tokens the measured decode step attends over (its cache + itself)
    prefill_flops: int
    prefill_bytes: int
    decode_flops: int  #: one decode step
    decode_bytes: int
    ttft_ms: float
    tpot_ms: float
    decode_memory_bound_share: float
    weights_bytes: int
    kv_cache_bytes: int | None  #: at the end: prompt + generated - 1 tokens (the cache after the last step)
    activation_bytes: int | None
    memory_bytes: int  #: the part's

    @property
    def decode_tokens_per_s(self) -> float | None:
        return self.batch * 1e3 / self.tpot_ms if self.tpot_ms else None

    @property
    def total_ms(self) -> float:
        return self.ttft_ms + (self.generated - 1) * self.tpot_ms

    @property
    def tokens_per_s(self) -> float | None:
        return self.batch * self.generated * 1e3 / self.total_ms if self.total_ms else None

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + (self.kv_cache_bytes or 0) + (self.activation_bytes or 0)

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.memory_bytes

    def as_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d.update(decode_tokens_per_s=self.decode_tokens_per_s, total_ms=self.total_ms, tokens_per_s=self.tokens_per_s,
                 total_bytes=self.total_bytes, fits=self.fits)
        return d


@dataclass(frozen=True)
class GenerationSweep:
    """The points of :func:`sweep_generation`, and the profiles they come from."""

    model_name: str
    hardware: str
    dtype: str | None
    points: list[SweepPoint]
    #: (batch, prompt) -> the prefill's profile
    prefill: dict[tuple[int, int], Profile] = field(repr=False)
    #: (batch, cache length) -> the decode step's profile
    decode: dict[tuple[int, int], Profile] = field(repr=False)
    elapsed_s: float = 0.0  #: wall time of the sweep

    def rows(self) -> list[dict[str, Any]]:
        return [p.as_dict() for p in self.points]

    def text(self) -> str:
        title = (f"Generation sweep of {self.model_name} ({self.dtype}) on {self.hardware}: {len(self.points)} points "
                 f"from {len(self.prefill)} prefill and {len(self.decode)} decode graphs "
                 f"(roofline times, lower bounds; {self.elapsed_s:.1f} s)")
        return title + "\n\n" + generation_report.sweep_table(self.rows())

    def markdown(self) -> str:
        return (f"**Generation sweep** of {self.model_name} ({self.dtype}) on {self.hardware}\n\n"
                + generation_report.sweep_table(self.rows(), "github"))

    def csv_text(self) -> str:
        return generation_report.sweep_csv(self.rows())

    def to_dict(self) -> dict[str, Any]:
        return {"schema": "torch_flops.generation_sweep", "version": 1, "model": self.model_name,
                "hardware": self.hardware, "dtype": self.dtype, "elapsed_s": self.elapsed_s, "points": self.rows()}

    def to_json(self, path: str | None = None, indent: int | None = 2) -> str:
        import json

        text = json.dumps(self.to_dict(), indent=indent)
        if path is not None:
            report.write_atomic(path, text + "\n")
        return text

    def save_plot(self, path: str) -> Any:
        """A PNG of three panels: decode throughput vs batch per context, memory (weights, KV
        cache, activations) per point against the part's memory, and time per output token vs
        context per batch (needs matplotlib). Returns the figure."""
        from torch_flops.generation_plot import save_sweep_plot

        return save_sweep_plot(self.rows(), path, f"{self.model_name} ({self.dtype}) on {self.hardware}")


def _positive_ints(name: str, values: Any) -> tuple[int, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
        raise TypeError(f"{name} must be a non-empty sequence of positive ints, got {values!r}")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must hold positive ints, got {v!r}")
    return tuple(dict.fromkeys(values))


def _build(model_or_config: Any, dtype: torch.dtype | None) -> nn.Module:
    if isinstance(model_or_config, nn.Module):
        model = model_or_config
        live = [(name, t.device) for name, t in (*model.named_parameters(), *model.named_buffers())
                if t.device.type != "meta"]
        if live:
            raise ValueError(f"sweep_generation runs on the meta device, but {type(model).__name__}.{live[0][0]} is on "
                             f"{live[0][1]}: build the model under `with torch.device('meta'):` or pass its config")
        if dtype is not None:
            model = model.to(dtype)
        return model.eval()
    if not hasattr(model_or_config, "to_dict") or not hasattr(model_or_config, "model_type"):
        raise TypeError(f"model_or_config must be a model built on meta or a transformers config, got "
                        f"{type(model_or_config).__name__}")
    try:
        from transformers import AutoModelForCausalLM
    except ImportError:  # pragma: no cover - a config without transformers cannot be
        raise ImportError("sweep_generation of a config needs transformers: pip install transformers") from None
    config = model_or_config
    if dtype is None:
        named = getattr(config, "dtype", None) if hasattr(config, "dtype") else getattr(config, "torch_dtype", None)
        dtype = getattr(torch, named) if isinstance(named, str) else named if isinstance(named, torch.dtype) else \
            torch.bfloat16
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return model.to(dtype).eval()


def _check_positions(model: nn.Module, longest: int) -> None:
    config = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions"):
        limit = getattr(config, name, None)
        if isinstance(limit, int) and not isinstance(limit, bool) and 0 < limit < longest:
            raise ValueError(f"prompt + generated reaches {longest} tokens, but {type(model).__name__} takes at most "
                             f"{limit} ({name} = {limit})")


def _meta_ids(batch: int, tokens: int) -> torch.Tensor:
    return torch.empty((batch, tokens), dtype=torch.long, device="meta")


def _grown(template: Any, length: int, config: Any) -> Any:
    """A cache of ``length`` tokens on meta, of the same kind and per-layer shapes as ``template``
    (a transformers cache with ``layers``); None when it is of another kind."""
    layers = getattr(template, "layers", None)
    if not isinstance(layers, (list, tuple)) or not hasattr(template, "update"):
        return None
    if not all(isinstance(getattr(layer, "keys", None), torch.Tensor) for layer in layers):
        return None
    try:
        cache = type(template)(config=config)
    except TypeError:
        return None
    for i, layer in enumerate(layers):
        k, v = layer.keys, layer.values
        cache.update(torch.empty((*k.shape[:-2], length, k.shape[-1]), dtype=k.dtype, device="meta"),
                     torch.empty((*v.shape[:-2], length, v.shape[-1]), dtype=v.dtype, device="meta"), i)
    return cache


def _default_kv(kwargs: Mapping[str, Any], output: Any) -> Any:
    cache = found_cache(output)
    return cache if cache is not None else found_cache(kwargs)


def sweep_generation(model_or_config: Any, batch_sizes: Sequence[int], prompt_lengths: Sequence[int],
                     generated_lengths: Sequence[int], *, hardware: str | HardwareSpec, dtype: torch.dtype | None = None,
                     inputs: InputsFn | None = None,
                     kv_cache: Callable[[Mapping[str, Any], Any], Any] | None = None) -> GenerationSweep:
    """Every point of ``batch_sizes x prompt_lengths x generated_lengths`` on ``hardware``, from
    the model's own prefill and decode graphs on the meta device (see the module docstring).

    >>> from transformers import LlamaConfig
    >>> sweep = sweep_generation(LlamaConfig(num_hidden_layers=80, hidden_size=8192, ...), [1, 8, 64],
    ...                          [128, 2048], [128, 512], hardware="h100-sxm")
    >>> print(sweep.text()); sweep.save_plot("sweep.png")

    ``model_or_config``: a transformers config (the causal LM is built on meta, in ``dtype``,
    default the config's own or bfloat16) or a model built on meta (``dtype``: moved to it when
    given). ``inputs``/``kv_cache``: for a model that is not a transformers causal LM.
    """
    batches = _positive_ints("batch_sizes", batch_sizes)
    prompts = _positive_ints("prompt_lengths", prompt_lengths)
    generated = _positive_ints("generated_lengths", generated_lengths)
    spec = get_hardware(hardware)
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype (torch.bfloat16), got {dtype!r}")
    if inputs is not None and not callable(inputs):
        raise TypeError(f"inputs must be a callable (batch, tokens_in, cache_length) -> kwargs, got {inputs!r}")
    if kv_cache is not None and not callable(kv_cache):
        raise TypeError(f"kv_cache must be a callable (kwargs, output) -> cache, got {kv_cache!r}")
    start = time.perf_counter()
    # (the user's model: every module's training flag as it was, on every exit path; _build sets eval)
    training = [(m, m.training) for m in model_or_config.modules()] if isinstance(model_or_config, nn.Module) else []
    try:
        return _sweep(model_or_config, batches, prompts, generated, spec, dtype, inputs, kv_cache, start)
    finally:
        for module, flag in training:
            module.training = flag


def _sweep(model_or_config: Any, batches: tuple[int, ...], prompts: tuple[int, ...], generated: tuple[int, ...],
           spec: HardwareSpec, dtype: torch.dtype | None, inputs: InputsFn | None,
           kv_cache: Callable[[Mapping[str, Any], Any], Any] | None, start: float) -> GenerationSweep:
    model = _build(model_or_config, dtype)
    config = getattr(model, "config", None)
    if inputs is None and config is None:
        raise TypeError(f"{type(model).__name__} is not a transformers model: pass inputs=(batch, tokens_in, "
                        "cache_length) -> its keyword arguments on meta")
    _check_positions(model, max(prompts) + max(generated))
    table = formulas.FORMULAS.copy()
    index = ModelIndex(model, table)
    weights = weights_bytes(model)
    read_kv = kv_cache or _default_kv
    model_dtype = next((t.dtype for t in model.parameters() if t.is_floating_point()), None)
    prefill: dict[tuple[int, int], Profile] = {}
    templates: dict[tuple[int, int], Any] = {}
    decode: dict[tuple[int, int], Profile] = {}
    decode_kv: dict[tuple[int, int], KVCacheState | None] = {}
    rooflines: dict[int, Any] = {}

    def line(profile: Profile) -> Any:
        key = id(profile)
        if key not in rooflines:
            rooflines[key] = roofline(profile, spec)
        return rooflines[key]

    warned: set[str] = set()  # (one warning per target for the whole sweep)

    def call(kwargs: Mapping[str, Any], phase: str) -> tuple[Any, Profile]:
        return profile_one_call(model, kwargs, table=table, index=index, settings={"generation_phase": phase},
                                warned=warned)

    # what generate() passes: the cache, and logits for the last position alone where the model can
    extra: dict[str, Any] = {"use_cache": True}
    cache_name = cache_argument(model)  # ``cache`` (transformers >= 5.24) or ``past_key_values``
    if "logits_to_keep" in inspect.signature(model.forward).parameters:
        extra["logits_to_keep"] = 1
    points: list[SweepPoint] = []
    for b in batches:
        for p in prompts:
            if (b, p) not in prefill:
                kwargs = inputs(b, p, 0) if inputs is not None else {"input_ids": _meta_ids(b, p), **extra}
                out, prefill[(b, p)] = call(kwargs, "prefill")
                templates[(b, p)] = read_kv(kwargs, out) if inputs is None else None
            for g in generated:
                length = p + max(g - 2, 0) // 2
                if (b, length) not in decode:
                    decode[(b, length)], decode_kv[(b, length)] = _decode(
                        call, read_kv, inputs, templates[(b, p)], b, length, config, extra, cache_name)
                pre, dec = prefill[(b, p)], decode[(b, length)]
                pre_line, dec_line = line(pre), line(dec)
                state = decode_kv[(b, length)]
                kv_total = None
                if state is not None and state.window_full(p + g - 1):
                    state = None  # (its sliding layers hold their window at that length: no per-token extrapolation)
                if state is not None:
                    held = state.tokens or (length + 1)
                    kv_total = round(state.total_bytes / held * (p + g - 1)) if state.max_length is None else \
                        state.total_bytes
                activations = [m for m in (activation_bytes(pre), activation_bytes(dec)) if m is not None]
                points.append(SweepPoint(
                    batch=b, prompt=p, generated=g, decode_context=length + 1, prefill_flops=pre.total_flops,
                    prefill_bytes=_bytes(pre), decode_flops=dec.total_flops, decode_bytes=_bytes(dec),
                    ttft_ms=pre_line.total_roofline_ms, tpot_ms=dec_line.total_roofline_ms,
                    decode_memory_bound_share=dec_line.memory_bound_share, weights_bytes=weights,
                    kv_cache_bytes=kv_total, activation_bytes=max(activations) if activations else None,
                    memory_bytes=spec.memory_bytes))
    return GenerationSweep(model_name=type(model).__name__, hardware=spec.name,
                           dtype=None if model_dtype is None else str(model_dtype).removeprefix("torch."),
                           points=points, prefill=prefill, decode=decode, elapsed_s=time.perf_counter() - start)


def _decode(call: Callable[[Mapping[str, Any], str], tuple[Any, Profile]],
            read_kv: Callable[[Mapping[str, Any], Any], Any], inputs: InputsFn | None, template: Any, batch: int,
            length: int, config: Any, extra: Mapping[str, Any],
            cache_name: str = "past_key_values") -> tuple[Profile, KVCacheState | None]:
    """One decode step over a cache of ``length`` tokens: its profile and the cache after it."""
    if inputs is not None:
        kwargs: Mapping[str, Any] = inputs(batch, 1, length)
    else:
        cache = _grown(template, length, config)
        if cache is None:  # another kind of cache: a prefill of `length` tokens makes one
            out, _ = call({"input_ids": _meta_ids(batch, length), **extra}, "prefill")
            cache = found_cache(out)
        kwargs = {"input_ids": _meta_ids(batch, 1), cache_name: cache, **extra}
    out, profile = call(kwargs, "decode")
    found = read_kv(kwargs, out)
    return profile, None if found is None else read_cache(found)


def _bytes(profile: Profile) -> int:
    return sum((r.bytes_read or 0) + (r.bytes_written or 0) for r in profile.records)

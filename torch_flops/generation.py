"""LLM inference as the user runs it: :func:`profile_generate` records ``model.generate(...)`` (or
any decode loop of your own) step by step, with the KV cache read from the live cache object,
and prices the measured graphs on any accelerator of the hardware table.

One :class:`~torch_flops.session.Recording` with ``steps=Steps.CALL`` and ``outside=False``: every
call of the model is one step, and only the model's own work is recorded (``generate``'s sampling
and logits processing between forwards run as they are, unrecorded). The first call is the
**prefill** (the prompt); every later call is a **decode** step. Nothing runs twice inside the
profiled run: the tokens, the cache object and the random numbers drawn are those of the same
``generate`` without the profiler.

Time, per call ``i`` starting at ``b_i`` (wall clock; on CUDA the device is synchronised at the end
of each call), with ``t0`` when ``generate`` is called and ``b_n`` when it returns::

    TTFT (time to first token)  = b_1 - t0       (set-up, the prefill and the first sampling)
    step i's latency            = b_(i+1) - b_i  (its forward and the sampling of its token)
    TPOT (time per output token) = (b_n - b_1) / (n - 1)   (the mean decode step)
    tokens/s                    = sequences x new tokens / (b_n - t0)

The profiler's own cost inflates the profiled run's times; with ``baseline=True`` (the default
where it is safe: ``generate`` without a cache object, streamer, logits processor or stopping criterion
of yours, on a model without forward hooks) the same call runs a second time without the recording, from the same random state (which is put back as the profiled
run left it), and the times above come from that run; ``overhead`` is the ratio of the two.

Memory: the weights (every parameter and buffer storage once), the KV cache (bytes held by the
live cache after each step, per layer: :mod:`torch_flops.kvcache`), and the activations (the peak
of the live tensors each step made on CPU and meta, its inputs and the cache tensors earlier steps
made left out; on CUDA the allocator's peak in the step above what was allocated when it began) are
kept apart.

Prediction (:meth:`GenerationProfile.predict`): each step's measured graph on the roofline of a
hardware spec (:func:`torch_flops.roofline.roofline`): prefill time (the predicted TTFT), decode
time per step, tokens/s, the memory-bound share of decode, and the largest batch whose weights and
KV cache fit the part's memory at a context length (KV bytes per token from the measured cache).
The roofline is a lower bound (see :mod:`torch_flops.roofline`); it prices the graph as it ran,
in its dtypes: profile the model in the dtype you will serve it in, or sweep it on the meta device
(:func:`torch_flops.generation_sweep.sweep_generation`).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import os
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from torch_flops import formulas, generation_report, report
from torch_flops._gc import gc_paused
from torch_flops.capture import ModelIndex
from torch_flops.formulas import FormulaTable
from torch_flops.hardware import HardwareSpec
from torch_flops.hardware import get as get_hardware
from torch_flops.kvcache import (
    CACHE_NAMES,
    KVCacheState,
    StackedState,
    cache_layers,
    found_cache,
    found_state,
    kv_cache_formula_bytes,
    kv_cache_shape,
    read_cache,
    state_holders,
    with_module_states,
)
from torch_flops.measure import Timer, functions_off, input_device, make_memory_probe, make_timer, storage_key
from torch_flops.records import NodeRecord, Profile
from torch_flops.roofline import roofline
from torch_flops.session import Recording, Step, Steps
from torch_flops.state import ExtraRuns

__all__ = ["GenerationPrediction", "GenerationProfile", "GenerationStep", "GenerationTiming", "activation_bytes",
           "context_lengths", "max_batch", "profile_generate", "profile_generation_call", "profile_one_call", "tokens_in",
           "weights_bytes"]

PREFILL, DECODE = "prefill", "decode"


# ---------------------------------------------------------------------------------------------
# the data
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GenerationStep:
    """One call of the model in a generation: a row of :attr:`GenerationProfile.steps`."""

    step: int  #: 0 = the prefill
    phase: str  #: "prefill" or "decode"
    tokens_in: int | None  #: tokens per sequence fed to this call (the prompt; 1 for a plain decode step)
    #: tokens per sequence this call attended over: its cache's length before it + the tokens fed to it (the
    #: length of the cache it filled, by the cache's own count, where there is one: not a StaticCache's size)
    context_length: int | None
    batch_size: int | None
    flops: int
    macs: int
    bytes_read: int
    bytes_written: int
    kv_cache_bytes: int | None  #: bytes the live cache holds after the call (None: no cache read)
    kv_cache_formula_bytes: int | None  #: 2 x layers x kv_heads x head_dim x tokens x batch x dtype bytes
    forward_ms: float | None  #: the model's call, wall clock (profiled run)
    latency_ms: float | None  #: wall clock from this call's start to the next call's start (or generate's end)
    node_time_ms: float | None  #: the recorded nodes' summed times
    activation_bytes: int | None  #: peak activation memory in the step

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class GenerationTiming:
    """Wall-clock times of one run of the generation (see the module docstring)."""

    total_ms: float  #: from the call to its return
    latency_ms: tuple[float, ...]  #: per step: b_(i+1) - b_i (step 0: b_1 - t0, the TTFT)
    forward_ms: tuple[float, ...]  #: per step: the model's call alone
    profiled: bool  #: measured under the profiler (its own cost included)

    @property
    def ttft_ms(self) -> float | None:
        return self.latency_ms[0] if self.latency_ms else None

    @property
    def tpot_ms(self) -> float | None:
        decode = self.latency_ms[1:]
        return sum(decode) / len(decode) if decode else None

    def as_dict(self) -> dict[str, Any]:
        return {"total_ms": self.total_ms, "ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms,
                "latency_ms": list(self.latency_ms), "forward_ms": list(self.forward_ms), "profiled": self.profiled}


@dataclass(frozen=True)
class GenerationPrediction:
    """A generation's measured graphs on one hardware spec's roofline (:meth:`GenerationProfile.predict`)."""

    hardware: str
    batch_size: int
    prefill_ms: float  #: the prefill graph's roofline time: the predicted time to first token
    decode_ms: tuple[float, ...]  #: each decode step's roofline time
    decode_memory_bound_share: float | None  #: share of the decode steps' roofline time in memory-bound nodes
    new_tokens: int  #: tokens per sequence the generation made
    weights_bytes: int
    kv_bytes_per_token: float | None  #: KV-cache bytes per token of context per sequence (measured)
    context_length: int  #: the context the memory figures are for
    memory_bytes: int  #: the part's memory
    #: the largest batch whose weights + KV cache at ``context_length`` fit ``memory_bytes``
    max_batch: int | None
    #: the sequences the generation returns (the batch but for beams: beams x prompts run, prompts come out)
    sequences: int | None = None
    #: KV-cache bytes per sequence that do not grow with the context (an encoder-decoder's cross-attention
    #: keys and values, over the encoder's tokens), measured
    kv_fixed_bytes: float = 0.0

    @property
    def ttft_ms(self) -> float:
        return self.prefill_ms

    @property
    def tpot_ms(self) -> float | None:
        """The mean decode step: time per output token of each sequence."""
        return sum(self.decode_ms) / len(self.decode_ms) if self.decode_ms else None

    @property
    def decode_tokens_per_s(self) -> float | None:
        """Tokens per second of the batch while decoding: batch / TPOT."""
        tpot = self.tpot_ms
        return self.batch_size * 1e3 / tpot if tpot else None

    @property
    def total_ms(self) -> float:
        return self.prefill_ms + sum(self.decode_ms)

    @property
    def tokens_per_s(self) -> float | None:
        """End to end, as the measured figure: sequences x new tokens / (prefill + every decode step)
        (beam search runs beams x prompts, and returns the prompts' sequences)."""
        sequences = self.sequences if self.sequences is not None else self.batch_size
        return sequences * self.new_tokens * 1e3 / self.total_ms if self.total_ms else None

    @property
    def kv_cache_bytes(self) -> float | None:
        """The KV cache of the batch at ``context_length``: per sequence, what each token adds x the
        context, and what does not grow with it (an encoder-decoder's cross-attention cache)."""
        per = self.kv_bytes_per_token
        return None if per is None else (per * self.context_length + self.kv_fixed_bytes) * self.batch_size

    def as_dict(self) -> dict[str, Any]:
        return {"hardware": self.hardware, "batch_size": self.batch_size, "prefill_ms": self.prefill_ms,
                "ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms, "decode_ms": list(self.decode_ms),
                "decode_tokens_per_s": self.decode_tokens_per_s, "tokens_per_s": self.tokens_per_s,
                "total_ms": self.total_ms, "decode_memory_bound_share": self.decode_memory_bound_share,
                "new_tokens": self.new_tokens, "weights_bytes": self.weights_bytes,
                "kv_bytes_per_token": self.kv_bytes_per_token, "kv_cache_bytes": self.kv_cache_bytes,
                "context_length": self.context_length, "memory_bytes": self.memory_bytes,
                "max_batch": self.max_batch, "sequences": self.sequences, "kv_fixed_bytes": self.kv_fixed_bytes}

    def text(self) -> str:
        return generation_report.prediction_text(self.as_dict())


@dataclass(frozen=True)
class GenerationProfile:
    """What :func:`profile_generate` measured (see the module docstring)."""

    output: Any  #: what ``generate``/``loop`` returned
    prefill: Profile  #: the first call of the model
    decode: list[Profile]  #: every later call, in order
    steps: list[GenerationStep]  #: one row per call
    kv_cache: list[KVCacheState | None]  #: the live cache after each call (per layer)
    timing: GenerationTiming | None  #: the profiled run (None on meta)
    baseline: GenerationTiming | None  #: the same call run without the profiler (None: not run)
    baseline_matches: bool | None  #: the unprofiled run made the same tokens (None: not compared)
    new_tokens: int  #: tokens per sequence generated
    sequences: int  #: sequences the output holds (the batch, times num_return_sequences)
    weights_bytes: int
    model_name: str
    device: str
    dtype: str | None  #: the model's (first floating parameter's) dtype
    kv_shape: tuple[int, int, int] | None  #: (layers, kv_heads, head_dim) from the model's config
    notes: tuple[str, ...] = ()
    #: tokens per sequence of the ``input_ids`` a decoder-only model's ``generate`` was given (None: not known)
    input_length: int | None = None
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __repr__(self) -> str:
        return (f"GenerationProfile({self.model_name}, batch {self.batch_size}, prompt {self.prompt_length}, "
                f"{self.new_tokens} new tokens, {len(self.steps)} steps, {self.device})")

    def with_convention(self, name: str) -> GenerationProfile:
        """The same generation with every step's FLOPs (and MACs) as the convention ``name``
        counts them (:meth:`Profile.with_convention`: ``"flop_counter"`` is FlopCounterMode's);
        nothing runs again."""
        prefill = self.prefill.with_convention(name)
        decode = [p.with_convention(name) for p in self.decode]
        steps = [dataclasses.replace(row, flops=p.total_flops, macs=p.total_macs)
                 for row, p in zip(self.steps, [prefill, *decode])]
        return dataclasses.replace(self, prefill=prefill, decode=decode, steps=steps, _cache={})

    # ------------------------------------------------------------------ per step
    @property
    def profiles(self) -> list[Profile]:
        """Every step's profile: the prefill, then each decode step."""
        return [self.prefill, *self.decode]

    @property
    def kv_cache_bytes(self) -> list[int | None]:
        """Bytes the live cache holds after each step (None where it could not be read)."""
        return [None if s is None else s.total_bytes for s in self.kv_cache]

    @property
    def batch_size(self) -> int:
        return self.steps[0].batch_size or 1

    @property
    def prompt_length(self) -> int | None:
        """Tokens per sequence of the prompt: those fed to the prefill, less the candidate tokens that
        speculative decoding (prompt lookup, an assistant model) fed with it, past the ``input_ids``."""
        fed = self.steps[0].tokens_in
        return self.input_length if fed is not None and self.input_length is not None and fed > self.input_length \
            else fed

    @property
    def context_length(self) -> int | None:
        """Tokens per sequence the model has seen at the end."""
        return self.steps[-1].context_length

    # ------------------------------------------------------------------ time
    @property
    def measured(self) -> GenerationTiming | None:
        """The timing the figures come from: the unprofiled run when there is one."""
        return self.baseline if self.baseline is not None else self.timing

    @property
    def ttft_ms(self) -> float | None:
        t = self.measured
        return None if t is None else t.ttft_ms

    @property
    def tpot_ms(self) -> float | None:
        t = self.measured
        return None if t is None else t.tpot_ms

    @property
    def tokens_per_s(self) -> float | None:
        """Sequences x new tokens / the generation's wall time."""
        t = self.measured
        return None if t is None or not t.total_ms else self.sequences * self.new_tokens * 1e3 / t.total_ms

    @property
    def overhead(self) -> float | None:
        """The profiled run's wall time / the unprofiled run's (None without a baseline)."""
        if self.timing is None or self.baseline is None or not self.baseline.total_ms:
            return None
        return self.timing.total_ms / self.baseline.total_ms

    # ------------------------------------------------------------------ per token
    def _decode_tokens(self) -> int:
        return sum((s.tokens_in or 1) * (s.batch_size or 1) for s in self.steps[1:])

    @property
    def decode_flops_per_token(self) -> float | None:
        """FLOPs of the decode steps per token they processed (one per sequence per step)."""
        n = self._decode_tokens()
        return sum(s.flops for s in self.steps[1:]) / n if n else None

    @property
    def decode_bytes_per_token(self) -> float | None:
        """Bytes read + written by the decode steps per token they processed."""
        n = self._decode_tokens()
        return sum(s.bytes_read + s.bytes_written for s in self.steps[1:]) / n if n else None

    @property
    def prefill_flops_per_token(self) -> float | None:
        s = self.steps[0]
        n = (s.tokens_in or 0) * (s.batch_size or 1)
        return s.flops / n if n else None

    @property
    def kv_bytes_per_token(self) -> float | None:
        """KV-cache bytes per token of context per sequence, from the cache after the last step
        (a preallocating cache: per slot of its length); None once a sliding-window layer held its
        window (it keeps no more tokens)."""
        states = [s for s in self.kv_cache if s is not None and s.tokens]
        if not states or any(s.window_full() for s in states):
            return None  # (a sliding window's layers keep their window of tokens only: no one figure per token)
        first, last = states[0], states[-1]
        if last.tokens > first.tokens and last.total_bytes > first.total_bytes:  # type: ignore[operator]
            # what a token adds (an encoder-decoder's cross-attention cache is fixed: not per token)
            return (last.total_bytes - first.total_bytes) / ((last.tokens - first.tokens)  # type: ignore[operator]
                                                             * self.batch_size)
        return last.total_bytes / (last.tokens * self.batch_size)  # type: ignore[operator]

    @property
    def kv_fixed_bytes(self) -> float:
        """KV-cache bytes per sequence that do not grow with the context (an encoder-decoder's
        cross-attention keys and values): the last cache less what its tokens add; 0 without a figure
        per token."""
        per = self.kv_bytes_per_token
        states = [s for s in self.kv_cache if s is not None and s.tokens]
        if per is None or not states:
            return 0.0
        last = states[-1]
        return max(0.0, last.total_bytes / self.batch_size - per * last.tokens)  # type: ignore[operator]

    # ------------------------------------------------------------------ memory
    @property
    def peak_activation_bytes(self) -> int | None:
        values = [s.activation_bytes for s in self.steps if s.activation_bytes is not None]
        return max(values) if values else None

    def memory(self) -> dict[str, int | None]:
        """Weights, the KV cache at the end, and the peak activations, in bytes."""
        kv = [b for b in self.kv_cache_bytes if b is not None]
        return {"weights": self.weights_bytes, "kv_cache": max(kv) if kv else None,
                "activations": self.peak_activation_bytes}

    @property
    def kv_cache_matches_formula(self) -> bool | None:
        """Every step's measured KV bytes equal the formula (None when either is unknown)."""
        pairs = [(s.kv_cache_bytes, s.kv_cache_formula_bytes) for s in self.steps]
        if any(a is None or b is None for a, b in pairs):
            return None
        return all(a == b for a, b in pairs)

    # ------------------------------------------------------------------ the whole generation
    @property
    def total(self) -> Profile:
        """One profile of the whole generation: every step's records (``graph`` = the step), so
        its totals and module roll-ups are summed over the steps (DeepSpeed's view of ``generate``)."""
        if "total" not in self._cache:
            records: list[NodeRecord] = []
            for step, p in enumerate(self.profiles):
                records += [r._replace(index=len(records) + k, graph=step) for k, r in enumerate(p.records)]
            first = self.prefill
            self._cache["total"] = Profile(
                records=tuple(records), device=first.device, tracer=first.tracer, memory_source=first.memory_source,
                module_types=first.module_types, module_params=first.module_params, batch_size=first.batch_size,
                settings={**{k: v for k, v in first.settings.items() if not k.startswith("generation_")},
                          "generation_steps": len(self.steps)})
        return self._cache["total"]  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ prediction
    def predict(self, hardware: str | HardwareSpec, context_length: int | None = None) -> GenerationPrediction:
        """Each step's measured graph on ``hardware``'s roofline (see the module docstring);
        ``context_length``: the context the largest batch that fits is found for (default: the
        generation's own at its end, what the cache then holds: prompt + new tokens - 1, the last
        token generated being never fed back)."""
        spec = get_hardware(hardware)
        if context_length is not None and (isinstance(context_length, bool) or not isinstance(context_length, int)
                                           or context_length < 1):
            raise ValueError(f"context_length must be an int >= 1, got {context_length!r}")
        context = context_length or self.context_length or 1
        per_token = self.kv_bytes_per_token
        fixed = self.kv_fixed_bytes if per_token is not None else 0.0
        if any(s is not None and s.window_full(context) for s in self.kv_cache):  # (no figure per token there)
            per_token = None
        prefill = roofline(self.prefill, spec)
        decode = [roofline(p, spec) for p in self.decode]
        decode_ms = tuple(r.total_roofline_ms for r in decode)
        total = sum(decode_ms)
        share = sum(r.memory_bound_share * r.total_roofline_ms for r in decode) / total if total else None
        return GenerationPrediction(
            hardware=spec.name, batch_size=self.batch_size, prefill_ms=prefill.total_roofline_ms,
            decode_ms=decode_ms, decode_memory_bound_share=share, new_tokens=self.new_tokens,
            weights_bytes=self.weights_bytes, kv_bytes_per_token=per_token,
            context_length=context, memory_bytes=spec.memory_bytes,
            max_batch=max_batch(spec.memory_bytes, self.weights_bytes, per_token, context, fixed),
            sequences=self.sequences, kv_fixed_bytes=fixed)

    # ------------------------------------------------------------------ export
    def summary(self) -> dict[str, Any]:
        """The generation's figures (raw numbers), as in the JSON ``summary``."""
        timing, base = self.timing, self.baseline
        return {
            "model": self.model_name, "device": self.device, "dtype": self.dtype, "batch_size": self.batch_size,
            "sequences": self.sequences, "prompt_length": self.prompt_length, "new_tokens": self.new_tokens,
            "context_length": self.context_length, "steps": len(self.steps), "params": self.prefill.total_params,
            "prefill_flops": self.prefill.total_flops, "prefill_macs": self.prefill.total_macs,
            "decode_flops": sum(p.total_flops for p in self.decode),
            "decode_macs": sum(p.total_macs for p in self.decode),
            "total_flops": sum(s.flops for s in self.steps), "total_macs": sum(s.macs for s in self.steps),
            "prefill_flops_per_token": self.prefill_flops_per_token,
            "decode_flops_per_token": self.decode_flops_per_token,
            "decode_bytes_per_token": self.decode_bytes_per_token,
            "ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms, "tokens_per_s": self.tokens_per_s,
            "timing_source": None if self.measured is None else ("profiled" if self.measured.profiled else "baseline"),
            "profiled_total_ms": None if timing is None else timing.total_ms,
            "baseline_total_ms": None if base is None else base.total_ms,
            "overhead": self.overhead, "baseline_matches": self.baseline_matches,
            "weights_bytes": self.weights_bytes, "kv_cache_bytes": self.memory()["kv_cache"],
            "activation_bytes": self.peak_activation_bytes, "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_cache_kind": next((s.kind for s in self.kv_cache if s is not None), None),
            "kv_shape": None if self.kv_shape is None else dict(zip(("layers", "kv_heads", "head_dim"), self.kv_shape)),
            "kv_cache_matches_formula": self.kv_cache_matches_formula,
            #: the steps whose measured KV bytes differ from the formula: [step, measured, formula] each
            "kv_cache_differs": [[s.step, s.kv_cache_bytes, s.kv_cache_formula_bytes] for s in self.steps
                                 if s.kv_cache_bytes is not None and s.kv_cache_formula_bytes is not None
                                 and s.kv_cache_bytes != s.kv_cache_formula_bytes],
            "notes": list(self.notes),
        }

    def to_dict(self, profiles: bool = True) -> dict[str, Any]:
        """The summary, the per-step rows, the KV cache per layer per step and (``profiles``)
        each step's full profile document."""
        doc: dict[str, Any] = {
            "schema": "torch_flops.generation", "version": 1, "summary": self.summary(),
            "steps": [s.as_dict() for s in self.steps],
            "kv_cache": [None if s is None else s.as_dict() for s in self.kv_cache],
            "timing": None if self.timing is None else self.timing.as_dict(),
            "baseline": None if self.baseline is None else self.baseline.as_dict(),
        }
        if profiles:
            doc["prefill"] = self.prefill.to_dict()
            doc["decode"] = [p.to_dict() for p in self.decode]
        return doc

    def to_json(self, path: str | None = None, profiles: bool = True, indent: int | None = 2) -> str:
        """:meth:`to_dict` as JSON, written atomically to ``path`` when given. Returns the text."""
        import json

        text = json.dumps(self.to_dict(profiles), indent=indent, default=str)
        if path is not None:
            report.write_atomic(path, text + "\n")
        return text

    def steps_text(self, tablefmt: str = "simple") -> str:
        """The per-step table."""
        return generation_report.steps_table([s.as_dict() for s in self.steps], tablefmt)

    def text(self, depth: int = 1, hardware: str | HardwareSpec | None = None, steps: bool = True) -> str:
        """The summary, the per-step table (``steps``), the prediction on ``hardware`` (when
        given) and the prefill's and the first decode step's module trees down to ``depth``."""
        parts = [generation_report.summary_text(self.summary())]
        if steps:
            parts.append(self.steps_text())
        if hardware is not None:
            parts.append(self.predict(hardware).text())
        if depth != 0:
            parts.append("Prefill (step 0):\n" + report.module_tree(self.prefill, depth))
            if self.decode:
                parts.append("Decode (step 1):\n" + report.module_tree(self.decode[0], depth))
        return "\n\n".join(parts)

    def print_profile(self, depth: int = 1, hardware: str | HardwareSpec | None = None, steps: bool = True,
                      output_file: str | None = None) -> str:
        """Print :meth:`text` (or write it atomically to ``output_file``) and return it."""
        text = self.text(depth, hardware, steps)
        if output_file is not None:
            report.write_atomic(output_file, text + "\n")
        else:
            print(text)
        return text

    def markdown(self, hardware: str | HardwareSpec | None = None) -> str:
        """The summary and the per-step table as GitHub-flavoured Markdown (with the prediction on
        ``hardware`` when given)."""
        return generation_report.markdown(self.summary(), [s.as_dict() for s in self.steps],
                                          None if hardware is None else self.predict(hardware).as_dict())

    def csv_text(self) -> str:
        """The per-step table as CSV."""
        return generation_report.steps_csv([s.as_dict() for s in self.steps])

    def html_sections(self, hardware: str | HardwareSpec | None = None,
                      max_decode_steps: int = 32) -> list[tuple[str, Profile, Any]]:
        """The sections of :meth:`to_html`: the whole generation (every step's nodes, ``graph`` =
        the step), the prefill, and the decode steps (all of them up to ``max_decode_steps``, else
        that many evenly spread, the first and the last included), each titled with its step, its
        tokens and its context, with its roofline on ``hardware`` when given."""
        if isinstance(max_decode_steps, bool) or not isinstance(max_decode_steps, int) or max_decode_steps < 0:
            raise ValueError(f"max_decode_steps must be an int >= 0, got {max_decode_steps!r}")
        spec = None if hardware is None else get_hardware(hardware)
        n = len(self.decode)
        if n <= max_decode_steps:
            chosen = list(range(n))
        elif max_decode_steps == 1:
            chosen = [0]
        else:  # evenly spread: 0, ..., n - 1
            chosen = sorted({round(k * (n - 1) / (max_decode_steps - 1)) for k in range(max_decode_steps)})

        def title(row: GenerationStep) -> str:
            context = "" if row.context_length is None else f", context {row.context_length}"
            tokens = "" if row.tokens_in is None else f", {row.tokens_in} token{'s' if row.tokens_in != 1 else ''} in"
            return f"{row.phase} (step {row.step}{tokens}{context})"

        sections: list[tuple[str, Profile, Any]] = []
        whole = self.total
        steps = len(self.steps)
        sections.append((f"whole generation ({steps} step{'s' if steps != 1 else ''})", whole,
                         None if spec is None else roofline(whole, spec)))
        for i, profile in [(0, self.prefill), *((k + 1, self.decode[k]) for k in chosen)]:
            sections.append((title(self.steps[i]), profile, None if spec is None else roofline(profile, spec)))
        return sections

    def to_html(self, path: str | os.PathLike[str], hardware: str | HardwareSpec | None = None,
                max_decode_steps: int = 32) -> str:
        """Write the one-file HTML report of the generation to ``path`` (atomically): a section per
        :meth:`html_sections` (the whole run, the prefill, the decode steps) with a selector, each
        with the module tree, icicle, node and operator tables, memory curve and, on ``hardware``,
        the roofline. Returns the path written."""
        from torch_flops import html

        report.check_writable(path)
        sections = self.html_sections(hardware, max_decode_steps)
        page = html.render_document(sections, title=f"{self.model_name} generate: {self.new_tokens} new tokens "
                                                    f"- torch_flops report")
        report.write_atomic(path, page)
        return os.fspath(path)


def max_batch(memory_bytes: int, weights: int, kv_per_token: float | None, context: int,
              kv_fixed: float = 0.0) -> int | None:
    """The largest batch whose weights + KV cache (``kv_per_token`` bytes per token per sequence
    x ``context`` tokens each, and ``kv_fixed`` bytes per sequence that do not grow with it) fit
    ``memory_bytes``; 0 when the weights alone do not."""
    if kv_per_token is None or kv_per_token <= 0:
        return None
    free = memory_bytes - weights
    return max(0, math.floor(free / (kv_per_token * context + kv_fixed))) if free > 0 else 0


def weights_bytes(model: nn.Module) -> int:
    """Bytes of the model's parameters and buffers, each storage once (tied weights once)."""
    seen: dict[int, int] = {}
    for t in (*model.parameters(), *model.buffers()):
        key, nbytes = storage_key(t)
        seen[key] = nbytes
    return sum(seen.values())


# ---------------------------------------------------------------------------------------------
# the session
# ---------------------------------------------------------------------------------------------

class _CallLog:
    """Hooks on the model's root alone: each call's start and end (wall clock; CUDA synchronised
    at the end), tokens in, batch and (CUDA) the memory allocated when it began. Light enough
    for the unprofiled run too."""

    def __init__(self, model: nn.Module, device: torch.device) -> None:
        self.model = model
        self.device = device
        self.thread = threading.get_ident()
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.inputs: list[tuple[int | None, int | None]] = []  # (batch, tokens) per call
        self.mask_lengths: list[int | None] = []  # per call: the length of its 2-D attention mask
        self.no_cache: list[bool] = []  # per call: called with use_cache=False
        self.cache: Any = None  # the cache the latest call was given (only the latest: not every step's)
        self.allocated: list[int] = []
        self._cuda = device.type == "cuda"
        self._read_allocated = make_memory_probe(device, "memory_allocated").read if self._cuda else None
        self._handles: list[Any] = []

    def install(self) -> None:
        self._handles = [self.model.register_forward_pre_hook(self._pre, with_kwargs=True),
                         self.model.register_forward_hook(self._post)]

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self.cache = None

    @functions_off
    def _pre(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if threading.get_ident() != self.thread:
            return
        self.inputs.append(tokens_in(args, kwargs))
        mask = kwargs.get("attention_mask")
        # (a shape read only, as in tokens_in)
        self.mask_lengths.append(int(mask.shape[-1]) if isinstance(mask, torch.Tensor) and len(mask.shape) == 2
                                 else None)
        self.cache = found_cache(kwargs)
        self.no_cache.append(kwargs.get("use_cache") is False)
        if self._read_allocated is not None:
            self.allocated.append(self._read_allocated())
        self.starts.append(time.perf_counter())

    @functions_off
    def _post(self, module: nn.Module, args: Any, output: Any) -> None:
        if threading.get_ident() != self.thread:
            return
        if self._cuda:
            torch.cuda.synchronize(self.device)
        self.ends.append(time.perf_counter())

    def timing(self, t0: float, t_end: float, profiled: bool) -> GenerationTiming:
        bounds = [t0, *self.starts[1:], t_end]
        latency = tuple((b - a) * 1e3 for a, b in itertools.pairwise(bounds))
        forward = tuple((e - s) * 1e3 for s, e in zip(self.starts, self.ends))
        return GenerationTiming(total_ms=(t_end - t0) * 1e3, latency_ms=latency, forward_ms=forward,
                                profiled=profiled)


def context_lengths(tokens: Sequence[int | None], mask_lengths: Sequence[int | None],
                    fresh: Sequence[bool], cached: Sequence[int | None] | None = None) -> list[int | None]:
    """Tokens per sequence each call has seen (its cache's length before it + the tokens fed to it).

    ``cached``: per call, the length of the cache it filled, read right after it (None: not read),
    is the context where it covers the tokens fed (a cache cropped between calls, as speculative
    decoding crops the candidates it rejected, counts what it kept). Else from the tokens fed to
    each call, the length of its 2-D attention mask (None: none given) and whether it starts afresh
    (``fresh``: no cache, or an empty one: a model without a cache is fed the whole sequence again
    at each step): the tokens fed for a call starting afresh, else the previous context plus the
    tokens fed (a decode step over a cache), or the mask's length where that is shorter and covers
    the tokens fed (a mask longer than that, padded to a preallocated cache, does not count)."""
    contexts: list[int | None] = []
    context = 0
    measured = list(cached) if cached is not None else [None] * len(tokens)
    for fed, mask, new, held in zip(tokens, mask_lengths, fresh, measured):
        if held is not None and (fed is None or held >= fed):
            context = held
        elif fed is None:
            contexts.append(None)
            continue
        else:
            context = fed if new else context + fed
            if mask is not None and fed <= mask < context:
                context = mask
        contexts.append(context)
    return contexts


def tokens_in(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """``(batch, tokens per sequence)`` of one call: from ``decoder_input_ids``, ``input_ids`` or
    ``inputs_embeds``, else the first tensor argument (integer ids ``(B, S)``, embeddings
    ``(B, S, H)``, or ``(S,)``)."""
    t = next((v for name in ("decoder_input_ids", "input_ids", "inputs_embeds")
              if isinstance(v := kwargs.get(name), torch.Tensor)), None)
    if t is None:
        t = next((v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor)), None)
    # (shape and dtype reads only: a Tensor method called here would be recorded as one of the model's nodes)
    shape = None if t is None else t.shape
    if shape is None or len(shape) == 0:
        return None, None
    if len(shape) == 1:
        return 1, int(shape[0])
    if t.dtype.is_floating_point and len(shape) >= 3:  # type: ignore[union-attr]
        return int(shape[0]), int(shape[1])
    return int(shape[0]), int(shape[-1])


class _Session:
    """One profiled run: the recording, the call log, the KV cache read after every step."""

    def __init__(self, model: nn.Module, device: torch.device, kv_cache: Callable[[], Any] | None,
                 ignored: tuple[str, ...] = ()) -> None:
        self.model = model
        self.ignored = ignored
        self.device = device
        self.table = formulas.FORMULAS.copy()
        self.index = ModelIndex(model, self.table)  # (a lazy module: ValueError, before anything runs)
        self.timer: Timer = make_timer(device)
        self.kv_reader = kv_cache
        self.kv: list[KVCacheState | None] = []
        self._holders: list[nn.Module] | None = None  #: the modules that may hold a state (kvcache.state_holders)
        self.kv_error: str | None = None
        self.log = _CallLog(model, device)

    def run(self, call: Callable[[], Any]) -> tuple[Any, list[Step], GenerationTiming | None]:
        index, device = self.index, self.device
        recording = Recording(index, self.table, timer=self.timer,
                              memory=make_memory_probe(device, "memory_allocated", index.storages), device=device,
                              ignored=self.ignored, steps=Steps.CALL, outside=False, on_step=self._step_done)
        self.log.install()
        try:
            # (no cyclic collection meanwhile: the recording makes thousands of small objects per step,
            # and each collection would walk them all again, in the middle of a timed step)
            with gc_paused():
                recording.start()
                try:
                    t0 = time.perf_counter()
                    output = call()
                    t_end = time.perf_counter()
                finally:
                    recording.stop()
        finally:
            self.log.remove()
        if not recording.steps:
            raise RuntimeError(f"the model ({type(self.model).__name__}) was never called: nothing to profile"
                               + (f" (it ran {recording.other_thread_calls} time(s) in other threads; profile "
                                  "in the thread that runs the generation)" if recording.other_thread_calls else ""))
        timing = None if device.type == "meta" else self.log.timing(t0, t_end, profiled=True)
        return output, recording.steps, timing

    @functions_off
    def _step_done(self, step: Step) -> None:
        """Right after the model's call returned: read the cache it left (the profiler's own calls,
        unrecorded), and let go of the output (the logits of every step need not stay alive)."""
        state = None
        if self.kv_error is None:
            try:
                if self.kv_reader is not None:
                    try:
                        cache = self.kv_reader()
                    except Exception as e:
                        raise RuntimeError(f"your kv_cache callable raised {type(e).__name__}: {e}") from e
                    if cache is not None and not any(cache_layers(cache)) and not isinstance(cache, StackedState):
                        raise TypeError(f"your kv_cache callable returned {type(cache).__name__}, which holds no "
                                        "tensors: return the cache object (a transformers Cache, the tuple of (key, "
                                        "value) tensors per layer, or your own tensors)")
                else:  # what the model returned; else the cache it was given (one it filled in place, or left empty)
                    cache = found_cache(step.output)
                    cache = cache if cache is not None else found_state(step.output)  # RWKV's stacked state
                    cache = cache if cache is not None else self.log.cache
                if self._holders is None or len(self.kv) < 2:  # (attributes a model makes are made by its
                    self._holders = state_holders(self.model.modules())  # first calls: looked for then only)
                state = None if cache is None else with_module_states(read_cache(cache), cache, self.model,
                                                                      self._holders)
            except Exception as e:  # noqa: BLE001  (the user's generation must not fail on the profiler's reading)
                self.kv_error = f"{type(e).__name__}: {e}"
        self.kv.append(state)
        step.output = None


def _step_profile(step: Step, index: ModelIndex, timer: Timer, device: torch.device,
                  settings: Mapping[str, Any], warned: set[str]) -> Profile:
    """A step's profile; a target without a formula is warned about unless in ``warned`` (which it joins).
    Its settings hold ``activation_bytes``: the peak of the live tensors the step made itself (its inputs,
    and the cache tensors earlier steps made, left out: they are the KV cache's), on CPU and meta."""
    measurements = step.measurements(timer, device)
    measurements.warn_unsupported(warned)
    made = [run.made_peak() for run in measurements.runs]
    if made and all(m is not None for m in made):
        settings = {**settings, "activation_bytes": max(m for m in made if m is not None)}
    return Profile.from_measurements(measurements, tracer="eager", module_types=index.types,
                                     module_params=index.params, batch_size=step.batch_size, settings=settings)


def activation_bytes(profile: Profile) -> int | None:
    """A generation step's peak activations (see :func:`_step_profile`); the profile's peak memory for
    one recorded without that figure."""
    made = profile.settings.get("activation_bytes")
    return made if isinstance(made, int) else profile.max_memory


def profile_one_call(model: nn.Module, kwargs: Mapping[str, Any], *, table: FormulaTable | None = None,
                     index: ModelIndex | None = None, settings: Mapping[str, Any] | None = None,
                     warned: set[str] | None = None) -> tuple[Any, Profile]:
    """One call ``model(**kwargs)`` recorded (on meta: counted): its output and profile. Used by
    the sweeps for one prefill or one decode step (``warned``: the targets without a formula already
    warned about, shared by a sweep's calls)."""
    table = table if table is not None else formulas.FORMULAS.copy()
    index = index if index is not None else ModelIndex(model, table)
    device = input_device(((), kwargs), model)
    timer = make_timer(device)
    recording = Recording(index, table, timer=timer, memory=make_memory_probe(device, "memory_allocated",
                                                                              index.storages), device=device)
    with torch.no_grad():
        recording.start()
        try:
            output, _ = recording.record_call((), dict(kwargs))
        except Exception:
            if recording.needs_values:
                raise RuntimeError(f"{type(model).__name__} reads tensor values in Python (.item(), if tensor:), "
                                   "which tensors on the meta device do not have: this model cannot be swept on "
                                   "meta") from None
            raise
        finally:
            recording.stop()
    step = recording.steps[0]
    return output, _step_profile(step, index, timer, device, settings or {}, warned if warned is not None else set())


def _sequences(output: Any) -> torch.Tensor | None:
    if isinstance(output, torch.Tensor):
        return output
    seqs = getattr(output, "sequences", None)
    return seqs if isinstance(seqs, torch.Tensor) else None


@functions_off
def _model_dtype(model: nn.Module) -> torch.dtype | None:
    return next((t.dtype for t in (*model.parameters(), *model.buffers()) if t.is_floating_point()), None)


class _RandomState:
    """The random number generators a generation draws from: the CPU's and, when initialised, CUDA's."""

    def __init__(self) -> None:
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() \
            else None

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)


def _same_output(a: Any, b: Any) -> bool | None:
    sa, sb = _sequences(a), _sequences(b)
    if sa is None or sb is None:
        return None
    return sa.shape == sb.shape and bool(torch.equal(sa, sb))


def profile_generate(model: nn.Module, input_ids: torch.Tensor | None = None, *, max_new_tokens: int | None = None,
                     loop: Callable[[], Any] | None = None, kv_cache: Callable[[], Any] | None = None,
                     baseline: bool | None = None, **generate_kwargs: Any) -> GenerationProfile:
    """Profile a generation, step by step (see the module docstring).

    >>> gp = profile_generate(model, input_ids, max_new_tokens=32, do_sample=False)
    >>> gp.prefill.total_flops, [p.total_flops for p in gp.decode], gp.kv_cache_bytes
    >>> gp.ttft_ms, gp.tpot_ms, gp.tokens_per_s, gp.overhead
    >>> gp.predict("h100-sxm").tokens_per_s
    >>> gp.print_profile(hardware="h100-sxm")

    Args:
        model: the model; ``model.generate(input_ids, max_new_tokens=..., **generate_kwargs)`` runs
            unless ``loop`` is given.
        input_ids, max_new_tokens, generate_kwargs: ``generate``'s own arguments, passed as they
            are (``max_new_tokens=None``: the model's generation config decides).
        loop: instead of ``generate``, any callable running your own decode loop over ``model``
            (called once, without arguments; what it returns is :attr:`GenerationProfile.output`).
            ``max_new_tokens`` then only says how many tokens it makes (default: one per call).
        kv_cache: a callable returning the KV cache now (a transformers ``Cache``, legacy tuples,
            or your own tensors: a sequence with one item per layer, or a mapping layer -> tensors),
            read after every call of the model. Default: the cache in the model's output (``cache``,
            ``past_key_values`` before transformers 5.24, Mamba's ``cache_params``), else the one it was given.
        baseline: also run the same call without the profiler, from the same random state, for
            the measured times and the profiler's overhead (see the module docstring). Default:
            for ``generate`` without a cache object, streamer, logits processor, stopping criterion
            or ``prefix_allowed_tokens_fn`` of yours, on a model without forward hooks (each would
            see the call twice); never for a ``loop``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if max_new_tokens is not None:
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
            raise TypeError(f"max_new_tokens must be an int or None, got {type(max_new_tokens).__name__}")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if kv_cache is not None and not callable(kv_cache):
        raise TypeError(f"kv_cache must be a callable returning the cache (or its tensors), got "
                        f"{type(kv_cache).__name__}")
    if baseline is not None and not isinstance(baseline, bool):
        raise TypeError(f"baseline must be a bool or None, got {type(baseline).__name__}")
    if input_ids is not None and not isinstance(input_ids, torch.Tensor):
        raise TypeError(f"input_ids must be a tensor of token ids, got {type(input_ids).__name__}")
    if input_ids is not None and loop is None and getattr(model, "main_input_name", None) == "input_ids":
        # (a transformers model whose generate() takes token ids: an encoder-decoder's may take pixel_values or
        # input_features there; dtype and shape reads only, checked before the model runs)
        if input_ids.dtype == torch.bool or input_ids.dtype.is_floating_point or input_ids.dtype.is_complex:
            raise TypeError(f"input_ids must hold integer token ids (torch.long), got a {input_ids.dtype} tensor")
        if input_ids.dim() != 2 or input_ids.shape[-1] < 1:
            raise ValueError(f"input_ids must be (batch, tokens) with at least one token, got shape "
                             f"{tuple(input_ids.shape)}")
    if loop is not None:
        if not callable(loop):
            raise TypeError(f"loop must be a callable running your decode loop, got {type(loop).__name__}")
        if input_ids is not None or generate_kwargs:
            raise TypeError("with loop=, pass no input_ids or generate() arguments: the loop holds its own inputs "
                            f"(got {', '.join([*(['input_ids'] if input_ids is not None else []), *generate_kwargs])})")
        call: Callable[[], Any] = loop
        run_baseline = bool(baseline)
    else:
        generate = getattr(model, "generate", None)
        if not callable(generate):
            raise TypeError(f"{type(model).__name__} has no generate(): pass loop= (a callable running your decode "
                            "loop over the model)")
        kwargs = dict(generate_kwargs)
        if max_new_tokens is not None:
            kwargs["max_new_tokens"] = max_new_tokens
        call = functools.partial(generate, input_ids, **kwargs) if input_ids is not None else \
            functools.partial(generate, **kwargs)
        # objects of the user's that a baseline would run through a second time: a cache, a streamer,
        # processors and criteria, an assistant, a custom_generate, any callable
        shared = [name for name, value in kwargs.items()
                  if value is not None and (name in (*CACHE_NAMES, "streamer", "logits_processor", "stopping_criteria",
                                                     "prefix_allowed_tokens_fn", "assistant_model", "custom_generate")
                                            or (callable(value) and not isinstance(value, torch.Tensor)))]
        if baseline and shared:
            raise ValueError(f"baseline=True would run generate() twice on your {' and '.join(shared)}: pass "
                             "baseline=False (the times are then the profiled run's)")
        # (forward hooks of the user's, on the model or global, and the user's torch function or dispatch
        # modes around the call would see a baseline's calls too: none by default then)
        hooked = any(m._forward_hooks or m._forward_pre_hooks for m in model.modules()) or _user_watches()
        run_baseline = (not shared and not hooked) if baseline is None else baseline
    device = input_device(((input_ids,), generate_kwargs), model)
    run_baseline = run_baseline and device.type != "meta"
    profile = _profile(model, call, device, kv_cache=kv_cache, baseline=run_baseline,
                       input_length=None if input_ids is None or input_ids.dim() < 2 else int(input_ids.shape[-1]),
                       max_new_tokens=max_new_tokens if loop is not None else None)
    assistant = generate_kwargs.get("assistant_model") if loop is None else None
    if isinstance(assistant, nn.Module) and assistant is not model:
        profile = dataclasses.replace(profile, notes=(*profile.notes, (
            f"assisted decoding: the steps are {type(model).__name__}'s forwards; the assistant model's "
            f"({type(assistant).__name__}) drafting calls are not in them (profile it on its own), and each step's "
            "context counts the candidate tokens it was fed, which the cache drops after it where they are rejected")))
    return profile


def _user_watches() -> bool:
    """Whether something of the user's sees every call of every model now: a global module hook
    (``register_module_forward_hook``), a torch function or dispatch mode (a ``FlopCounterMode``)."""
    from torch.nn.modules import module as module_globals
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
    return bool(module_globals._global_forward_hooks or module_globals._global_forward_pre_hooks
                or torch.overrides._get_current_function_mode_stack() or _get_current_dispatch_mode_stack())


def profile_generation_call(model: nn.Module, call: Callable[[], Any], *, kv_cache: Callable[[], Any] | None = None,
                            ignored: Sequence[str] = ()) -> GenerationProfile:
    """``call()`` (which calls ``model``: its ``generate``, a loop) profiled as
    :func:`profile_generate` profiles a ``loop``, without a baseline; ``ignored``: module class
    names whose calls count 0 FLOPs (``get_model_profile``'s ``ignore_modules``)."""
    return _profile(model, call, input_device(((), {}), model), kv_cache=kv_cache, baseline=False, input_length=None,
                    max_new_tokens=None, ignored=tuple(ignored))


def _profile(model: nn.Module, call: Callable[[], Any], device: torch.device, *, kv_cache: Callable[[], Any] | None,
             baseline: bool, input_length: int | None, max_new_tokens: int | None,
             ignored: tuple[str, ...] = ()) -> GenerationProfile:
    session = _Session(model, device, kv_cache, ignored)
    before = _RandomState() if baseline else None
    output, steps, timing = session.run(call)
    base_timing, matches = None, None
    if before is not None:
        after = _RandomState()
        # what the second run changes in the model (a buffer it updates, an attribute, a gradient) is
        # put back as the profiled run left it, as is the random state
        undo = ExtraRuns(session.index.tensors, modules=session.index.modules)
        before.restore()
        log = _CallLog(model, device)
        log.install()
        try:
            t0 = time.perf_counter()
            base_output = call()
            t_end = time.perf_counter()
        finally:
            log.remove()
            try:
                undo.undo()
            finally:
                after.restore()
        base_timing = log.timing(t0, t_end, profiled=False)
        matches = _same_output(output, base_output)
        del base_output
    return _assemble(session, output, steps, timing, base_timing, matches, input_length, max_new_tokens)


def _assemble(session: _Session, output: Any, steps: list[Step], timing: GenerationTiming | None,
              base_timing: GenerationTiming | None, matches: bool | None, input_length: int | None,
              max_new_tokens: int | None) -> GenerationProfile:
    model, device, index, log = session.model, session.device, session.index, session.log
    notes: list[str] = []
    inputs = log.inputs if len(log.inputs) == len(steps) else [(s.batch_size, None) for s in steps]
    if len(log.inputs) != len(steps):
        notes.append("the tokens fed to each call could not be matched to the recorded calls")
    dtype = _model_dtype(model)
    config = getattr(model, "config", None)
    kv_shape = kv_cache_shape(config)
    kv_states = session.kv if len(session.kv) == len(steps) else [None] * len(steps)
    if session.kv_error is not None:
        notes.append(f"the KV cache could not be read: {session.kv_error}")
        advice = "" if session.kv_reader is not None else "; pass kv_cache= (a callable returning it)"
        warnings.warn(f"torch_flops: the KV cache could not be read ({session.kv_error}){advice}", stacklevel=3)
    masks = log.mask_lengths if len(log.mask_lengths) == len(steps) else [None] * len(steps)
    # a call starts afresh without a cache (use_cache=False), or after a step that left the cache empty
    fresh = [i == 0 or (i < len(log.no_cache) and log.no_cache[i])
             or ((before := kv_states[i - 1]) is not None and before.total_bytes == 0) for i in range(len(steps))]
    # the context of a call: the length of the cache it filled, by the cache's own count, read right
    # after it (not after a call with use_cache=False: a cache it was given stays as it was)
    cached = [None if state is None or (i < len(log.no_cache) and log.no_cache[i]) else state.seq_length
              for i, state in enumerate(kv_states)]
    contexts = context_lengths([tokens for _, tokens in inputs], masks, fresh, cached)
    for i, state in enumerate(kv_states):  # a cache of tuples or tensors given to the call held tokens fed before it
        if state is not None and cached[i] is None and state.tokens and state.max_length is None \
                and not state.recurrent_layers and contexts[i] is not None \
                and state.tokens > contexts[i]:  # type: ignore[operator]
            contexts[i] = state.tokens
    warned: set[str] = set()  # (one warning per target for the whole generation)
    with gc_paused():  # (thousands of records per step)
        profiles = [_step_profile(step, index, session.timer, device, {
            "generation_step": i, "generation_phase": PREFILL if i == 0 else DECODE, "tokens_in": inputs[i][1],
            "context_length": contexts[i]}, warned) for i, step in enumerate(steps)]
    rows: list[GenerationStep] = []
    for i, step in enumerate(steps):
        batch, tokens = inputs[i]
        batch = batch if batch is not None else step.batch_size
        phase = PREFILL if i == 0 else DECODE
        profile = profiles[i]
        state = kv_states[i]
        formula = None
        held = state.max_length if state is not None and state.max_length is not None else contexts[i]
        # (an encoder-decoder's cache also holds the cross-attention's keys, which the formula leaves out; a
        # sliding-window layer keeps its window of tokens only)
        if state is not None and not state.recurrent_layers and not state.window_full() and dtype is not None \
                and batch is not None \
                and held is not None and not getattr(config, "is_encoder_decoder", False):
            formula = kv_cache_formula_bytes(config, held, batch, dtype)
        activation = activation_bytes(profile)
        if device.type == "cuda" and step.peak_memory is not None and i < len(log.allocated):
            activation = max(0, step.peak_memory - log.allocated[i])
        rows.append(GenerationStep(
            step=i, phase=phase, tokens_in=tokens, context_length=contexts[i],
            batch_size=batch, flops=profile.total_flops, macs=profile.total_macs,
            bytes_read=sum(r.bytes_read or 0 for r in profile.records),
            bytes_written=sum(r.bytes_written or 0 for r in profile.records),
            kv_cache_bytes=None if state is None else state.total_bytes, kv_cache_formula_bytes=formula,
            forward_ms=timing.forward_ms[i] if timing is not None and i < len(timing.forward_ms) else None,
            latency_ms=timing.latency_ms[i] if timing is not None and i < len(timing.latency_ms) else None,
            node_time_ms=profile.total_time_ms, activation_bytes=activation))
    sequences = _sequences(output)
    encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
    # the prompt the sequences start with: the input ids; an encoder-decoder's sequences are the
    # decoder's, which start with the decoder prompt its first call was fed (the start token)
    prompt = inputs[0][1] if encoder_decoder else input_length
    if sequences is not None and prompt is not None and input_length is not None and sequences.dim() == 2:
        new_tokens = int(sequences.shape[1]) - prompt
        n_sequences = int(sequences.shape[0])
    else:
        new_tokens = max_new_tokens if max_new_tokens is not None else len(steps)
        n_sequences = rows[0].batch_size or 1
    return GenerationProfile(
        output=output, prefill=profiles[0], decode=profiles[1:], steps=rows, kv_cache=list(kv_states),
        timing=timing, baseline=base_timing, baseline_matches=matches, new_tokens=new_tokens, sequences=n_sequences,
        weights_bytes=weights_bytes(model), model_name=type(model).__name__, device=str(device),
        dtype=None if dtype is None else str(dtype).removeprefix("torch."), kv_shape=kv_shape, notes=tuple(notes),
        input_length=None if encoder_decoder else input_length)


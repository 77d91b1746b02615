"""Every transformers causal-LM architecture, shrunk, generating on CPU: ``profile_generate`` against
the plain ``generate`` under FlopCounterMode, step by step.

    python benchmarks/sweep_generate.py                      # all causal-LM model types (tens of minutes)
    python benchmarks/sweep_generate.py llama gpt2 mamba     # some
    python benchmarks/sweep_generate.py --jsonl /tmp/gensweep.jsonl --timeout 60

Each model type of ``transformers.models.auto.modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` is
built from its default config shrunk to toy sizes (the shrinking of ``sweep_transformers.py``;
random weights, nothing read from a hub), in eval mode, float32, on CPU, with eager attention where
the config accepts it. The prompt: batch 2, 5 ids in [1, vocab), an attention mask of ones; greedy
``generate(max_new_tokens=3, min_new_tokens=3, do_sample=False, pad_token_id=<a valid id>)``.

* the reference: the plain ``generate`` under FlopCounterMode, the counter read before and after
  each call of the model (its FLOPs per call) and over the whole call;
* ours: ``profile_generate(model, ids, attention_mask=..., baseline=False, **greedy)``, each step's
  profile re-read in the ``flop_counter`` convention.

One line per architecture: ``exact`` (same tokens, as many profiles as calls, each step's FLOPs
equal to the reference's for that call), ``tokens-differ``, ``flops-differ`` (ours / the reference
per step), ``kv-missing`` (a step without KV-cache bytes although the model was given or returned
a cache), ``crash`` (the exception and the last frames inside torch_flops), or ``skip`` (the
architecture cannot be built, or its plain ``generate`` fails, at toy sizes: not torch_flops'
business). A profiler left installed after the run is named in the line. The totals close the output.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep_transformers import _deadline, _Timeout, parameters_frozen, tiny_from_config

BATCH, PROMPT, NEW = 2, 5, 3
#: the names a model's cache goes by in its arguments and output (attention KV; recurrent state)
_CACHES = ("past_key_values", "cache_params", "mems", "past_buckets_states")


@dataclass
class Outcome:
    """One architecture."""

    status: str  # exact | tokens-differ | flops-differ | kv-missing | crash | skip
    detail: str = ""
    ours: list[int] = field(default_factory=list)  #: per step, flop_counter convention
    reference: list[int] = field(default_factory=list)  #: FlopCounterMode per call of the model
    whole: int | None = None  #: FlopCounterMode over the whole generate
    kv_cache_bytes: list[int | None] = field(default_factory=list)
    kv_matches_formula: bool | None = None  #: GenerationProfile.kv_cache_matches_formula
    contexts: list[int | None] = field(default_factory=list)  #: context length per step (expected: prompt + i)
    frames: list[str] = field(default_factory=list)  #: last frames inside torch_flops (crash)
    leaked: str = ""  #: what of the profiler stayed installed
    trace: str = ""  #: the crash's traceback (its last frames)
    seconds: float = 0.0


def model_types() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def tiny_causal_lm(model_type: str) -> nn.Module:
    """The causal LM of ``model_type`` at toy sizes, float32, eager attention where accepted."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]
    try:
        model = tiny_from_config(model_type, name, attn_implementation="eager", dtype=torch.float32)
    except (ValueError, ImportError, TypeError):  # the config refuses eager attention
        model = tiny_from_config(model_type, name, dtype=torch.float32)
    return model.float()


def _valid_id(value: Any, vocab: int) -> int | None:
    for v in value if isinstance(value, (list, tuple)) else [value]:
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < vocab:
            return v
    return None


def prompt_and_greedy(model: nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    config = model.config
    text = config.get_text_config() if callable(getattr(config, "get_text_config", None)) else config
    vocab = getattr(text, "vocab_size", None) or getattr(config, "vocab_size", None)
    out = model.get_output_embeddings() if callable(getattr(model, "get_output_embeddings", None)) else None
    if isinstance(getattr(out, "out_features", None), int):
        vocab = min(vocab or out.out_features, out.out_features)
    vocab = int(vocab or 99)
    ids = torch.randint(1, vocab, (BATCH, PROMPT), generator=torch.Generator().manual_seed(1))
    gen = getattr(model, "generation_config", None)
    pad = next((p for p in (_valid_id(getattr(c, name, None), vocab) for c in (text, config, gen)
                            for name in ("pad_token_id", "eos_token_id")) if p is not None), 0)
    greedy = {"max_new_tokens": NEW, "min_new_tokens": NEW, "do_sample": False, "pad_token_id": pad}
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, greedy


def _sequences(output: Any) -> torch.Tensor | None:
    if isinstance(output, torch.Tensor):
        return output
    seqs = getattr(output, "sequences", None)
    return seqs if isinstance(seqs, torch.Tensor) else None


def reference_per_call(model: nn.Module, run: Callable[[], Any]) -> tuple[Any, list[int], int, bool]:
    """``run()`` under FlopCounterMode: its output, the FLOPs of each call of ``model`` (the
    counter read before and after it), the whole run's, and whether a call was given or returned
    a cache."""
    per_call: list[int] = []
    cached = [False]

    def pre(m: nn.Module, args: Any, kwargs: dict[str, Any]) -> None:
        per_call.append(-counter.get_total_flops())
        cached[0] |= any(kwargs.get(name) is not None for name in _CACHES)

    def post(m: nn.Module, args: Any, output: Any) -> None:
        per_call[-1] += counter.get_total_flops()
        cached[0] |= any(getattr(output, name, None) is not None for name in _CACHES)

    with FlopCounterMode(display=False) as counter:
        handles = [model.register_forward_pre_hook(pre, with_kwargs=True), model.register_forward_hook(post)]
        try:
            out = run()
        finally:
            for h in handles:
                h.remove()
    return out, per_call, counter.get_total_flops(), cached[0]


def _reference(model: nn.Module, inputs: dict[str, torch.Tensor],
               greedy: dict[str, Any]) -> tuple[tuple[Any, list[int], int, bool], str]:
    """:func:`reference_per_call` of the plain greedy ``generate`` (seed 0), and a note.
    FlopCounterMode's module tracker asserts on a grad_fn in some models (dbrx: "Expected gradient
    function to be set"): then once more with the parameters frozen (no count changes), said in
    the note; the first error when that fails too."""
    def run() -> tuple[Any, list[int], int, bool]:
        torch.manual_seed(0)
        with torch.no_grad():
            return reference_per_call(model, lambda: model.generate(**inputs, **greedy))

    try:
        return run(), ""
    except _Timeout:
        raise
    except Exception as e:  # noqa: BLE001
        try:
            with parameters_frozen(model):
                return run(), f" (reference with frozen parameters: FlopCounterMode raised {_error(e)[:80]})"
        except _Timeout:
            raise
        except Exception:  # noqa: BLE001 - the first error says more
            raise e from None


def _error(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300]}" if text else type(e).__name__


def _our_frames(e: BaseException, n: int = 4) -> list[str]:
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "/torch_flops/" in f.filename.replace("\\", "/")]
    return [f"{Path(f.filename).name}:{f.lineno} {f.name}: {(f.line or '').strip()[:120]}" for f in frames[-n:]]


def _leaked(model: nn.Module) -> str:
    from torch_flops.session import installed

    state = {k: v for k, v in installed().items() if v}
    if model._forward_hooks or model._forward_pre_hooks:
        state["model_hooks"] = len(model._forward_hooks) + len(model._forward_pre_hooks)
    return ", ".join(f"{k}={v}" for k, v in state.items())


def run_one(model_type: str, timeout: int) -> Outcome:
    import torch_flops

    start = time.perf_counter()
    try:
        with _deadline(timeout), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outcome = _run(model_type, torch_flops.profile_generate)
    except _Timeout as e:  # a timeout outside the profiled run: while building or plain generate
        outcome = Outcome("skip", f"timeout before profiling: {e}")
    outcome.seconds = round(time.perf_counter() - start, 2)
    return outcome


def _run(model_type: str, profile_generate: Callable[..., Any]) -> Outcome:
    try:
        model = tiny_causal_lm(model_type)
        inputs, greedy = prompt_and_greedy(model)
    except _Timeout:
        raise
    except Exception as e:  # noqa: BLE001 - not torch_flops' business
        return Outcome("skip", f"build: {_error(e)}")
    try:
        (plain, per_call, whole, cached), note = _reference(model, inputs, greedy)
    except _Timeout:
        raise
    except Exception as e:  # noqa: BLE001
        try:
            torch.manual_seed(0)
            with torch.no_grad():
                model.generate(**inputs, **greedy)
        except _Timeout:
            raise
        except Exception as e2:  # noqa: BLE001
            return Outcome("skip", f"generate: {_error(e2)}")
        return Outcome("skip", f"generate under FlopCounterMode: {_error(e)}")
    try:
        torch.manual_seed(0)
        gp = profile_generate(model, inputs["input_ids"], attention_mask=inputs["attention_mask"], baseline=False,
                              **greedy)
    except Exception as e:  # noqa: BLE001 - _Timeout included: it fired inside the profiled run
        return Outcome("crash", _error(e), reference=per_call, whole=whole, frames=_our_frames(e),
                       leaked=_leaked(model), trace="".join(traceback.format_exception(e, limit=-12)))
    leaked = _leaked(model)
    ours = [p.with_convention("flop_counter").total_flops for p in gp.profiles]
    kv = gp.kv_cache_bytes
    out = Outcome("exact", ours=ours, reference=per_call, whole=whole, kv_cache_bytes=kv, leaked=leaked,
                  kv_matches_formula=gp.kv_cache_matches_formula, contexts=[s.context_length for s in gp.steps])
    a, b = _sequences(gp.output), _sequences(plain)
    if a is None or b is None or a.shape != b.shape or not torch.equal(a, b):
        out.status = "tokens-differ"
        out.detail = (f"ours {None if a is None else a.tolist()} / plain {None if b is None else b.tolist()}")
    elif len(ours) != len(per_call) or ours != per_call:
        out.status = "flops-differ"
        steps = [f"{o:,}/{r:,}" if o != r else "=" for o, r in zip(ours, per_call)]
        out.detail = (f"{len(ours)} profiles / {len(per_call)} calls; per step ours/reference: " + " ".join(steps)
                      + f"; sum {sum(ours):,} / whole {whole:,}")
    elif cached and any(k is None for k in kv):
        out.status = "kv-missing"
        out.detail = f"kv bytes {kv}; notes {list(gp.notes)}"
    else:
        out.detail = f"{sum(ours):,} FLOPs in {len(ours)} steps; kv {kv}"
    if out.kv_matches_formula is False:
        out.detail += " (kv != formula)"
    out.detail += note
    first = gp.steps[0].tokens_in or PROMPT  # (a model may add tokens to the prompt: XLM)
    if out.contexts != list(range(first, first + len(out.contexts))):
        out.detail += f" (context lengths {out.contexts})"
    return out


def _line(model_type: str, o: Outcome) -> str:
    detail = o.detail + (f" [in torch_flops: {' <- '.join(reversed(o.frames))}]" if o.frames else "")
    if o.leaked:
        detail += f" [LEFT INSTALLED: {o.leaked}]"
    return f"{model_type:32s} {o.status:14s} {o.seconds:6.1f}s {detail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("types", nargs="*", help="model types (default: every causal LM)")
    parser.add_argument("--timeout", type=int, default=60, help="seconds per architecture")
    parser.add_argument("--jsonl", help="also write one JSON line per architecture here")
    parser.add_argument("-v", action="store_true", help="print crashes' tracebacks")
    args = parser.parse_args(argv)
    try:
        import transformers
    except ImportError:
        print("transformers is not installed: nothing to sweep")
        return 0
    transformers.logging.set_verbosity_error()
    known = model_types()
    unknown = [t for t in args.types if t not in known]
    if unknown:
        parser.error(f"not causal-LM model types: {', '.join(unknown)}")
    types = args.types or known
    totals: Counter[str] = Counter()
    sink = open(args.jsonl, "w") if args.jsonl else None  # noqa: SIM115
    start = time.perf_counter()
    try:
        for model_type in types:
            outcome = run_one(model_type, args.timeout)
            totals[outcome.status] += 1
            print(_line(model_type, outcome), flush=True)
            if args.v and outcome.trace:
                print(outcome.trace, flush=True)
            if sink:
                sink.write(json.dumps({"type": model_type, **asdict(outcome)}) + "\n")
                sink.flush()
    finally:
        if sink:
            sink.close()
    print(f"\n{len(types)} model types in {time.perf_counter() - start:.0f} s")
    print(", ".join(f"{k} {totals[k]}" for k in ("exact", "tokens-differ", "flops-differ", "kv-missing", "crash",
                                                   "skip")))
    return 0


if __name__ == "__main__":
    sys.exit(main())

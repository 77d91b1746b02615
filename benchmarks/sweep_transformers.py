"""Every transformers architecture, shrunk, profiled on CPU and on meta against FlopCounterMode.

    python benchmarks/sweep_transformers.py                  # all model types (tens of minutes)
    python benchmarks/sweep_transformers.py llama bert t5    # some
    python benchmarks/sweep_transformers.py --devices cpu --jsonl sweep.jsonl

Each model type of ``transformers.models.auto.modeling_auto.MODEL_MAPPING_NAMES`` (the base model
of each architecture) is built from its default config shrunk to toy sizes (hidden 32, 4 heads,
2 KV heads, 2 layers, intermediate 64, small images, short audio; random weights, nothing read from
a hub), fed the smallest inputs its ``forward`` runs on in plain eager PyTorch, then on each device:

* FlopCounterMode over one eager call: its total;
* ``torch_flops.profile(model, **inputs)`` (the default front end) over one more eager call, re-read
  in the ``flop_counter`` convention: its total, and the nodes without a formula.

One line per architecture: ``exact``, ``differs`` (with ours / FlopCounterMode), ``unsupported``
(the ops) or ``crash`` (the exception); ``skip`` when the architecture cannot be built or run at
toy sizes in plain eager PyTorch (not torch_flops' business). The totals close the output.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import signal
import sys
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

#: config attribute -> toy value (only attributes the config already has are changed)
_SIZES: dict[str, int] = {
    "hidden_size": 32, "d_model": 32, "n_embd": 32, "embed_dim": 32, "dim": 32, "word_embed_proj_dim": 32,
    "rotary_dim": 8, "projection_dim": 16, "text_embed_dim": 32, "vision_embed_dim": 32, "projection_size": 32,
    "num_attention_heads": 4, "n_head": 4, "n_heads": 4, "encoder_attention_heads": 4,
    "decoder_attention_heads": 4, "num_heads": 4, "num_key_value_heads": 2, "num_kv_heads": 2,
    "head_dim": 8, "kv_channels": 8, "attention_head_dim": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8,
    "v_head_dim": 8, "kv_lora_rank": 16, "q_lora_rank": 16,
    "num_hidden_layers": 2, "n_layer": 2, "n_layers": 2, "num_layers": 2, "encoder_layers": 2,
    "decoder_layers": 2, "num_encoder_layers": 2, "num_decoder_layers": 2,
    "intermediate_size": 64, "ffn_dim": 64, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "n_inner": 64,
    "d_ff": 64, "d_kv": 8, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
    "expert_intermediate_size": 32, "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4,
    "num_experts_per_tok": 2, "moe_topk": 2, "top_k": 2, "n_group": 1, "topk_group": 1,
    "image_size": 32, "patch_size": 8, "embedding_size": 16, "num_mel_bins": 16, "max_source_positions": 16,
    "conv_dim_size": 32, "max_position_embeddings": 512, "audio_seq_length": 16,
    "state_size": 16, "mamba_d_state": 16, "ssm_state_size": 16, "time_step_rank": 8, "mamba_dt_rank": 8,
    "num_experts_per_token": 2, "num_expert_group": 1, "shared_intermediate_size": 32, "linear_head_dim": 8,
    "linear_num_heads": 4,
}
#: config attribute -> toy value where the default config has it unset (None) and its model needs a number
#: (DeepSeek V2's and dots.llm1's routers)
_UNSET: dict[str, int] = {"num_experts_per_tok": 2, "n_routed_experts": 4, "n_shared_experts": 1}
#: widths a config keeps at a multiple of its hidden size (RWKV's attention, xLSTM's embedding, Zamba's
#: attention over the concatenated embeddings): the same multiple of the toy hidden size
_HIDDEN_MULTIPLES = ("attention_hidden_size", "embedding_dim")
#: Mamba2-style mixers (heads, head width, expansion, groups): heads x head width = expansion x hidden
_MAMBA2 = (("num_heads", "head_dim", "expand", "n_groups"),
           ("mamba_n_heads", "mamba_d_head", "mamba_expand", "mamba_n_groups"),
           ("n_mamba_heads", "mamba_headdim", "mamba_expand", "mamba_ngroups"),
           ("mamba_num_heads", "mamba_head_dim", "expand", "n_groups"))
#: list-valued attributes: each entry shrunk to this (their lengths kept)
_LISTS: dict[str, int] = {"hidden_sizes": 16, "conv_dim": 32, "embed_dims": 16, "depths": 1, "dims": 16,
                          "num_channels_list": 16, "encoder_hidden_sizes": 16, "decoder_hidden_sizes": 16}
#: model type -> config attributes set after the shrink, where its default config cannot build or run a
#: toy model (or has no layer of some kind to exercise)
_OVERRIDES: dict[str, dict[str, Any]] = {
    # a hybrid whose default is all Mamba layers: one attention layer too
    "bamba": {"attn_layer_indices": [1]},
    "granitemoehybrid": {"layer_types": ["linear_attention", "full_attention"]},
    # no default layer types at all; a mixture-of-experts layer after the dense ones
    "lfm2_moe": {"num_hidden_layers": 3, "num_dense_layers": 1, "layer_types": ["conv", "full_attention", "conv"]},
    # the hybrid layers share one transformer block, tied from the first into the others: two of them
    "zamba": {"num_hidden_layers": 3, "layers_block_type": ["linear_attention", "hybrid", "hybrid"]},
    # the attention reads a rope_theta its config class does not define, clamps to a clip_qkv left unset
    # (num_key_value_heads: the top config's copy of kv_n_heads, which from_dict would keep at the default's)
    "dbrx": {"num_key_value_heads": 2, "attn_config": {"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8.0},
             "ffn_config": {"ffn_hidden_size": 64, "moe_top_k": 2}},
    # the last layers reuse the keys and values of the last earlier layer of their type: one of each kind
    "gemma3n_text": {"num_hidden_layers": 4, "layer_types": ["sliding_attention", "full_attention"] * 2,
                     "intermediate_size": [64] * 4, "activation_sparsity_pattern": [0.95, 0.95, 0.0, 0.0],
                     "num_kv_shared_layers": 2, "vocab_size_per_layer_input": 99, "hidden_size_per_layer_input": 8,
                     "laurel_rank": 8},
    # its indexed attention's sizes are unset; the rest at toy sizes
    "qwen4_exp_text": {"indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": 8, "indexer_budget": 8,
                       "indexer_compress_ratio": 2, "hc_lowrank": 8, "ple_embed_dim": 32, "linear_key_head_dim": 8,
                       "linear_value_head_dim": 8, "linear_num_key_heads": 2, "linear_num_value_heads": 4},
    # generate builds its cache from a layer count the top config lacks; the local models' view of the
    # global width; the hash embeddings' vocabulary
    "blt": {"num_hidden_layers": 2, "encoder_hash_byte_group_vocab": 101,
            "encoder_config": {"hidden_size_global": 32}, "decoder_config": {"hidden_size_global": 32}},
    # the cache rounds the query/key and value widths up to 64 (hidden x 0.5, hidden x 1), the layers do not
    "xlstm": {"hidden_size": 128, "embedding_dim": 128, "num_blocks": 2},
}
_SEQ = 8
_AUDIO = 4000


def _shrink(d: dict[str, Any]) -> dict[str, Any]:
    """A config dict at toy sizes (nested configs too); vocabularies just above the token ids used."""
    out = dict(d)
    for key, value in d.items():
        if isinstance(value, dict) and "model_type" in value:
            out[key] = _shrink(value)
        elif key in _SIZES and isinstance(value, int) and not isinstance(value, bool) and value > _SIZES[key]:
            out[key] = _SIZES[key]
        elif key in _LISTS and isinstance(value, (list, tuple)) and value and all(isinstance(v, int) for v in value):
            out[key] = [min(v, _LISTS[key]) for v in value]
    ids = [v for k, v in d.items() if k.endswith(("token_id", "token_index"))]
    ids = [i for v in ids for i in (v if isinstance(v, list) else [v]) if isinstance(i, int)]
    if isinstance(d.get("vocab_size"), int):
        out["vocab_size"] = min(d["vocab_size"], max([99, *(i + 1 for i in ids)]))
    if "kv_lora_rank" in d:  # multi-head latent attention: every head has its keys, and a derived query width
        if isinstance(out.get("num_key_value_heads"), int) and isinstance(out.get("num_attention_heads"), int):
            out["num_key_value_heads"] = out["num_attention_heads"]
        if isinstance(d.get("qk_head_dim"), int):
            out["qk_head_dim"] = out.get("qk_nope_head_dim", 0) + out.get("qk_rope_head_dim", 0)
    for period, offset in (("attn_layer_period", "attn_layer_offset"), ("expert_layer_period", "expert_layer_offset")):
        if isinstance(d.get(period), int) and isinstance(d.get(offset), int):  # Jamba: one such layer in two
            out[period], out[offset] = 2, 1
    if isinstance(d.get("block_types"), list) and isinstance(out.get("num_hidden_layers"), int):
        out["num_hidden_layers"] = max(out["num_hidden_layers"], len(d["block_types"]))  # every block type once
    _consistent_widths(d, out)
    _select_layers(d, out)
    return out


def _override(d: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """``d`` with ``changes``; a nested config's changes merged into it."""
    out = dict(d)
    for key, value in changes.items():
        out[key] = _override(d[key], value) if isinstance(value, dict) and isinstance(d.get(key), dict) else value
    return out


def _consistent_widths(d: dict[str, Any], out: dict[str, Any]) -> None:
    """Widths of ``out`` that must agree with its shrunk hidden size, and defaults left unset."""
    hidden, new_hidden = d.get("hidden_size"), out.get("hidden_size")
    if not (isinstance(hidden, int) and isinstance(new_hidden, int)) or hidden <= 0:
        return
    for key in _HIDDEN_MULTIPLES:
        if isinstance(d.get(key), int) and d[key] % hidden == 0:
            out[key] = d[key] // hidden * new_hidden
    for heads, width, expand, groups in _MAMBA2:
        if all(isinstance(d.get(k), int) for k in (heads, width, expand)):
            out[width] = min(d[width], 8)
            out[heads] = max(1, d[expand] * new_hidden // out[width])
            if isinstance(d.get(groups), int):
                out[groups] = 1
            if isinstance(d.get("mamba_d_ssm"), int):  # Falcon-H1: the mixer's width, heads x head width
                out["mamba_d_ssm"] = out[heads] * out[width]
    for key, value in _UNSET.items():  # counts a default config leaves unset although its model reads them
        if key in d and d[key] is None:
            out[key] = value
    if "head_dim" in d and d["head_dim"] is None and isinstance(out.get("num_attention_heads"), int):
        out["head_dim"] = new_hidden // out["num_attention_heads"]  # the usual default, left unset (HunYuan)
    if "num_key_value_heads" in d and d["num_key_value_heads"] is None and "num_attention_heads" in out:
        out["num_key_value_heads"] = out["num_attention_heads"]  # multi-head attention, left unset (Nemotron)


#: the config attributes counting a model's (decoder's) layers
_LAYER_COUNTS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers")
_MAX_LAYERS = 4
#: how the names of config attributes listing layer indices end (``hybrid_layer_ids``, ``attn_layer_indices``)
_INDEX_LISTS = ("layer_ids", "layer_indices", "layers_idx", "attn_idxs", "layer_idxs")


def _select_layers(d: dict[str, Any], out: dict[str, Any]) -> None:
    """Per-layer attributes of ``d`` (lists as long as its layer count: ``layer_types``,
    ``mlp_layer_types``, heads per layer, ...; dicts keyed by layer index) cut down to a few layers
    of ``out``: the first layer of each distinct combination of their values (a hybrid keeps an
    attention layer and a recurrent one; at most 4 layers), topped up to the shrunk layer count."""
    count_key = next((k for k in _LAYER_COUNTS if isinstance(d.get(k), int) and not isinstance(d.get(k), bool)), None)
    if count_key is None:
        return
    total, wanted = d[count_key], out[count_key]
    if wanted >= total:
        return
    lists = {k: v for k, v in d.items() if isinstance(v, (list, tuple)) and len(v) == total and k not in _LISTS}
    indices = {k: set(v) for k, v in d.items() if k.endswith(_INDEX_LISTS) and isinstance(v, (list, tuple)) and v
               and all(isinstance(i, int) and 0 <= i < total for i in v) and k not in lists}
    chosen: list[int] = []
    seen: set[tuple[str, ...]] = set()
    for i in range(total):
        combo = (*(repr(v[i]) for v in lists.values()), *(repr(i in v) for v in indices.values()))
        if combo not in seen and len(chosen) < _MAX_LAYERS:
            seen.add(combo)
            chosen.append(i)
    rest = [i for i in range(total) if i not in chosen]
    chosen = sorted(chosen + rest[:max(0, wanted - len(chosen))])
    out[count_key] = len(chosen)
    for key, values in lists.items():
        base = key.removesuffix("_per_layer")
        picked = [values[i] for i in chosen]
        if base in _SIZES and all(isinstance(v, int) and not isinstance(v, bool) for v in picked):
            picked = [min(v, _SIZES[base]) for v in picked]
        out[key] = picked
    position = {i: n for n, i in enumerate(chosen)}
    for key, members in indices.items():  # lists of layer indices (Zamba2's hybrid layers): renumbered
        out[key] = [position[i] for i in chosen if i in members]
    for key, value in d.items():  # per-layer settings keyed by layer index (``per_layer_config``)
        if "layer" in key and isinstance(value, dict) and value and all(str(k).isdigit() and int(k) < total
                                                                         for k in value):
            out[key] = {type(k)(position[int(k)]): v for k, v in value.items() if int(k) in position}


def model_types() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES
    return sorted(MODEL_MAPPING_NAMES)


def tiny_model(model_type: str, device: str = "cpu") -> torch.nn.Module:
    """The base model of ``model_type`` at toy sizes, random weights, in eval mode."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    return tiny_from_config(model_type, MODEL_MAPPING_NAMES[model_type], device)


def tiny_from_config(model_type: str, class_name: str | tuple[str, ...], device: str = "cpu",
                     **from_config: Any) -> torch.nn.Module:
    """``transformers.<class_name>`` built from ``model_type``'s default config shrunk to toy sizes,
    random weights (seed 0), in eval mode; ``from_config``: keyword arguments of the model class's
    ``_from_config`` (``attn_implementation``, ``dtype``), when given."""
    import transformers
    from transformers import CONFIG_MAPPING

    cls = getattr(transformers, class_name if isinstance(class_name, str) else class_name[0])
    config_cls = CONFIG_MAPPING[model_type]
    config = config_cls.from_dict(_override(_shrink(config_cls().to_dict()), _OVERRIDES.get(model_type, {})))
    torch.manual_seed(0)
    with torch.device(device):
        model = cls._from_config(config, **from_config) if from_config else cls(config)
    return model.eval()


def _config_value(config: Any, name: str, default: Any) -> Any:
    for c in (config, *(getattr(config, k, None) for k in ("vision_config", "audio_config", "encoder_config",
                                                           "backbone_config", "text_config"))):
        if c is not None and getattr(c, name, None) is not None:
            return getattr(c, name)
    return default


def _candidates(model: torch.nn.Module) -> Iterator[dict[str, Any]]:
    """Input sets to try, smallest first (CPU tensors)."""
    config = model.config
    params = inspect.signature(model.forward).parameters
    vocab = min(int(_config_value(config, "vocab_size", 99) or 99), 99)
    ids = torch.randint(3, max(vocab, 4), (1, _SEQ))
    size = _config_value(config, "image_size", 32)
    size = size if isinstance(size, int) else (size[0] if isinstance(size, (list, tuple)) else 32)
    pixels = torch.randn(1, int(_config_value(config, "num_channels", 3)), size, size)
    mels = int(_config_value(config, "num_mel_bins", 16))
    frames = 2 * int(_config_value(config, "max_source_positions", 16))
    main = getattr(model, "main_input_name", "input_ids")
    base: dict[str, Any] = {}
    if main == "input_ids" or "input_ids" in params and main not in params:
        base["input_ids"] = ids
    elif main == "pixel_values":
        base["pixel_values"] = pixels
    elif main == "input_values":
        base["input_values"] = torch.randn(1, _AUDIO)
    elif main == "input_features":
        base["input_features"] = torch.randn(1, mels, frames)
    elif main in params:
        return
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in params:
        base["decoder_input_ids"] = ids[:, :4]
    yield base
    extra = {"pixel_values": pixels, "input_ids": ids, "attention_mask": torch.ones_like(ids),
             "input_features": torch.randn(1, mels, frames), "input_values": torch.randn(1, _AUDIO)}
    for name, value in extra.items():
        if name in params and name not in base:
            base = {**base, name: value}
            yield base


def _to(value: Any, device: str) -> Any:
    if isinstance(value, torch.Tensor):
        return torch.empty_like(value, device=device) if device == "meta" else value.to(device)
    return value


class _Timeout(Exception):
    pass


@contextlib.contextmanager
def _deadline(seconds: int) -> Iterator[None]:
    def fire(signum: int, frame: Any) -> None:
        raise _Timeout(f"took more than {seconds} s")
    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@dataclass
class Outcome:
    """One architecture on one device."""

    status: str  # exact | differs | unsupported | crash | skip
    ours: int | None = None
    reference: int | None = None
    unsupported: dict[str, int] = field(default_factory=dict)
    error: str = ""


def reference_flops(model: torch.nn.Module, inputs: dict[str, Any], as_meta: bool = False) -> int:
    """FlopCounterMode's total over one eager call. ``as_meta``: a CPU call counted as on meta
    (where FlopCounterMode sees attention's and the LSTM's matmuls: math attention, no mkldnn)."""
    with contextlib.ExitStack() as stack:
        if as_meta:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            stack.enter_context(sdpa_kernel(SDPBackend.MATH))
            stack.enter_context(torch.backends.mkldnn.flags(enabled=False))
        with torch.no_grad(), FlopCounterMode(display=False) as mode:
            model(**inputs)
    return mode.get_total_flops()


def counted_reference(model: torch.nn.Module, inputs: dict[str, Any], as_meta: bool = False) -> tuple[int, str]:
    """:func:`reference_flops` after ``torch.manual_seed(0)``, and a note. FlopCounterMode's module
    tracker asserts on a grad_fn in some models (dbrx: "Expected gradient function to be set"):
    then it counts once more with the parameters frozen (which changes no count), and says so."""
    torch.manual_seed(0)
    try:
        return reference_flops(model, inputs, as_meta), ""
    except Exception as e:  # noqa: BLE001 - FlopCounterMode's own failure
        with parameters_frozen(model):
            torch.manual_seed(0)
            flops = reference_flops(model, inputs, as_meta)
        return flops, f"reference with frozen parameters (FlopCounterMode raised {type(e).__name__}: {str(e)[:80]})"


@contextlib.contextmanager
def parameters_frozen(model: torch.nn.Module) -> Iterator[None]:
    """``model``'s trainable parameters with ``requires_grad=False`` in the body, back after."""
    frozen = [p for p in model.parameters() if p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in frozen:
            p.requires_grad_(True)


def compare(model: torch.nn.Module, inputs: dict[str, Any], reference: int | None = None) -> Outcome:
    """FlopCounterMode over one eager call (or ``reference``), torch_flops (flop_counter convention)
    over another."""
    import torch_flops
    from torch_flops.records import Status

    # the same seed before both calls: a model that samples (vits' stochastic duration predictor
    # sets its output length by a random draw) runs the same program in both
    note = ""
    if reference is None:
        reference, note = counted_reference(model, inputs)
    try:
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            profile = torch_flops.profile(model, **inputs)
    except _Timeout:
        raise
    except Exception as e:  # noqa: BLE001 - the sweep reports every failure
        advice = [n for n in getattr(e, "__notes__", ()) if n.startswith("torch_flops: ") and "cannot" in n
                  or "runs in bfloat16" in n or "makes CPU tensors" in n]
        error = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}" if str(e) else type(e).__name__
        return Outcome("crash", reference=reference, error=error + (f" ({advice[-1][:300]})" if advice else ""))
    ours = profile.with_convention("flop_counter").total_flops
    unsupported = Counter(r.target for r in profile.records if r.status is Status.UNSUPPORTED)
    if unsupported:
        return Outcome("unsupported", ours, reference, dict(unsupported))
    return Outcome("exact" if ours == reference else "differs", ours, reference, error=note)


def run_one(model_type: str, devices: tuple[str, ...], timeout: int) -> dict[str, Outcome]:
    results: dict[str, Outcome] = {}
    try:
        with _deadline(timeout), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = tiny_model(model_type)
            last = "no input set for its forward"
            for inputs in _candidates(model):
                try:
                    with torch.no_grad():
                        model(**inputs)
                    break
                except Exception as e:  # noqa: BLE001 - try the next input set
                    last = f"{type(e).__name__}: {str(e).splitlines()[0][:150] if str(e) else ''}"
            else:
                raise RuntimeError(f"no input set runs in eager PyTorch ({last})")
    except Exception as e:  # noqa: BLE001
        return {d: Outcome("skip", error=f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
                for d in devices}
    for device in devices:
        try:
            with _deadline(timeout):
                reference = None
                if device == "cpu":
                    m, x = model, inputs
                else:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        m = tiny_model(model_type, device)
                    x = {k: _to(v, device) for k, v in inputs.items()}
                    try:
                        with torch.no_grad():
                            m(**x)
                    except _Timeout:
                        raise
                    except Exception as e:  # noqa: BLE001 - eager itself fails on meta (reads values)
                        # torch_flops may still profile it (torch.export): compare with the CPU call
                        # counted as FlopCounterMode counts on meta
                        reference, _ = counted_reference(model, inputs, as_meta=True)
                        eager_error = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
                        outcome = compare(m, x, reference)
                        if outcome.status == "crash":
                            outcome.error += f" [eager on meta: {eager_error}]"
                        else:
                            outcome.error = f"eager fails on meta ({eager_error}); reference: the CPU call"
                        results[device] = outcome
                        continue
                results[device] = compare(m, x, reference)
        except Exception as e:  # noqa: BLE001
            results[device] = Outcome("crash", error=f"{type(e).__name__}: {str(e)[:200]}")
            if "-v" in sys.argv:
                traceback.print_exc()
    return results


def _line(model_type: str, device: str, o: Outcome) -> str:
    if o.status == "differs":
        ratio = o.ours / o.reference if o.reference else float("inf")
        detail = f"ours {o.ours:,} / FlopCounterMode {o.reference:,} = {ratio:.4f}"
    elif o.status == "unsupported":
        detail = ", ".join(f"{k} x{v}" for k, v in sorted(o.unsupported.items()))
    elif o.status == "exact":
        detail = f"{o.ours:,}" + (f" ({o.error})" if o.error else "")
    else:
        detail = o.error
    return f"{model_type:40s} {device:5s} {o.status:12s} {detail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("types", nargs="*", help="model types (default: all)")
    parser.add_argument("--devices", default="cpu,meta")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per architecture and device")
    parser.add_argument("--jsonl", help="also write one JSON line per architecture here")
    parser.add_argument("-v", action="store_true", help="tracebacks of crashes")
    args = parser.parse_args(argv)
    devices = tuple(args.devices.split(","))
    types = args.types or model_types()
    totals: dict[str, Counter[str]] = {d: Counter() for d in devices}
    sink = open(args.jsonl, "w") if args.jsonl else None  # noqa: SIM115
    start = time.perf_counter()
    try:
        for model_type in types:
            results = run_one(model_type, devices, args.timeout)
            for device, outcome in results.items():
                totals[device][outcome.status] += 1
                print(_line(model_type, device, outcome), flush=True)
            if sink:
                sink.write(json.dumps({"type": model_type, **{d: asdict(o) for d, o in results.items()}}) + "\n")
                sink.flush()
    finally:
        if sink:
            sink.close()
    print(f"\n{len(types)} model types in {time.perf_counter() - start:.0f} s")
    for device, counts in totals.items():
        ran = sum(counts.values()) - counts["skip"]
        print(f"{device}: {ran} build and run; exact {counts['exact']}, differs {counts['differs']}, "
              f"unsupported {counts['unsupported']}, crash {counts['crash']}; skipped {counts['skip']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

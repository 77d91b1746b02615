"""Fault cases of the generation entry points found by a fault matrix: what the profiler leaves
behind (the user's objects seen once, the model's flags) and bad input refused before the model
runs. Models are built from transformers configs (no download); those tests skip without it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from torch_flops import get_model_profile, profile_generate, sweep_generation
from torch_flops.session import installed


@pytest.fixture(scope="module")
def hf() -> Any:
    return pytest.importorskip("transformers")


def tiny_llama(hf: Any, device: str | None = None) -> nn.Module:
    config = hf.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, vocab_size=128, max_position_embeddings=64,
                            attn_implementation="eager", pad_token_id=0)
    torch.manual_seed(0)
    if device == "meta":
        with torch.device("meta"):
            return hf.LlamaForCausalLM(config)
    return hf.LlamaForCausalLM(config).eval()


def ids(batch: int = 2, length: int = 5) -> torch.Tensor:
    return torch.randint(3, 128, (batch, length), generator=torch.Generator().manual_seed(1))


GREEDY = {"max_new_tokens": 3, "min_new_tokens": 3, "do_sample": False, "pad_token_id": 0}


def test_users_processor_criterion_and_hooks_see_the_generation_once(hf: Any) -> None:
    model = tiny_llama(hf)
    calls = {"processor": 0, "criterion": 0, "hook": 0}

    class Count(hf.LogitsProcessor):
        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            calls["processor"] += 1
            return scores

    class Never(hf.StoppingCriteria):
        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
            calls["criterion"] += 1
            return torch.zeros(input_ids.shape[0], dtype=torch.bool)

    def run(**kw: Any) -> dict[str, int]:
        for k in calls:
            calls[k] = 0
        model.generate(ids(), **GREEDY, **kw)
        plain = dict(calls)
        for k in calls:
            calls[k] = 0
        gp = profile_generate(model, ids(), **GREEDY, **kw)
        assert gp.baseline is None  # no second generate() by default: it would call the user's objects again
        return plain

    # 3 new tokens: the processor and the criterion run once per token, as in the plain generate
    assert run(logits_processor=hf.LogitsProcessorList([Count()])) == calls and calls["processor"] == 3
    assert run(stopping_criteria=hf.StoppingCriteriaList([Never()])) == calls and calls["criterion"] == 3
    handle = model.model.layers[0].register_forward_hook(lambda *a: calls.__setitem__("hook", calls["hook"] + 1))
    try:
        assert run() == calls and calls["hook"] == 3  # one prefill + 2 decode forwards
    finally:
        handle.remove()
    with pytest.raises(ValueError, match="logits_processor"):
        profile_generate(model, ids(), baseline=True, logits_processor=hf.LogitsProcessorList([Count()]), **GREEDY)
    assert installed() == {"threads": 0, "recordings": 0, "global_hooks": 0}


@pytest.mark.parametrize(("input_ids", "error", "match"), [
    (torch.rand(2, 5), TypeError, "integer token ids"),
    (torch.ones(2, 5, dtype=torch.bool), TypeError, "integer token ids"),
    (torch.zeros(2, 5, 1, dtype=torch.long), ValueError, r"\(batch, tokens\)"),
    (torch.tensor(3), ValueError, r"\(batch, tokens\)"),
    (torch.zeros(2, 0, dtype=torch.long), ValueError, "at least one token"),
])
def test_bad_input_ids_refused_before_the_model_runs(hf: Any, input_ids: torch.Tensor, error: type,
                                                      match: str) -> None:
    model = tiny_llama(hf)
    ran: list[int] = []
    handle = model.register_forward_pre_hook(lambda *a: ran.append(1))
    try:
        with pytest.raises(error, match=match):
            profile_generate(model, input_ids, max_new_tokens=2)
    finally:
        handle.remove()
    assert ran == []


def test_get_model_profile_output_file_checked_before_the_model_runs(hf: Any, tmp_path: Path) -> None:
    model = tiny_llama(hf)
    ran: list[int] = []
    handle = model.register_forward_pre_hook(lambda *a: ran.append(1))
    missing = tmp_path / "no-such-dir" / "profile.txt"
    try:
        for mode, kwargs in (("generate", GREEDY), ("forward", {})):
            with pytest.raises(FileNotFoundError, match="no such directory"):
                get_model_profile(model, args=(ids(),), kwargs=kwargs, mode=mode, output_file=str(missing))
    finally:
        handle.remove()
    assert ran == []  # neither the warm-up nor the profiled call ran


def test_sweep_leaves_the_models_training_flags(hf: Any) -> None:
    model = tiny_llama(hf, "meta")
    model.train()
    model.model.layers[1].eval()  # mixed flags, as a user may leave them
    flags = [m.training for m in model.modules()]
    sweep_generation(model, [1], [4], [2], hardware="h100-sxm")
    assert [m.training for m in model.modules()] == flags
    model.get_submodule("model.layers.0.mlp").register_forward_hook(lambda *a: (_ for _ in ()).throw(KeyError("x")))
    with pytest.raises(KeyError):
        sweep_generation(model, [1], [4], [2], hardware="h100-sxm")
    assert [m.training for m in model.modules()] == flags


def test_what_sees_every_model_call_sees_the_generation_once(hf: Any) -> None:
    # a global forward hook, a mode of the user's around the call, a custom_generate, a cache under
    # cache_params=: no default second (baseline) run, which each would see again
    model = tiny_llama(hf)
    seen: list[int] = []
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda m, a, o: seen.append(1) if m is model else None)
    try:
        gp = profile_generate(model, ids(), **GREEDY)
    finally:
        handle.remove()
    assert len(seen) == 3 and gp.baseline is None  # one prefill + 2 decode calls, once
    with FlopCounterMode(display=False) as reference:
        model.generate(ids(), **GREEDY)
    with FlopCounterMode(display=False) as around:
        gp = profile_generate(model, ids(), **GREEDY)
    assert around.get_total_flops() == reference.get_total_flops() and gp.baseline is None
    calls: list[int] = []

    def my_generate(model: nn.Module, input_ids: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        calls.append(1)
        return model.generate(input_ids, max_new_tokens=2, do_sample=False, pad_token_id=0)

    assert profile_generate(model, ids(), custom_generate=my_generate).baseline is None and calls == [1]
    try:  # (a Llama takes its cache under cache_params= from transformers 5.24 on; 5.17 refuses the keyword)
        model.generate(ids(), cache_params=hf.DynamicCache(config=model.config), **GREEDY)
    except ValueError as e:
        assert "cache_params" in str(e)
        return
    cache = hf.DynamicCache(config=model.config)
    gp = profile_generate(model, ids(), cache_params=cache, **GREEDY)
    assert gp.baseline is None and cache.get_seq_length() == 5 + 3 - 1  # prompt + the tokens fed after it


def test_the_baseline_run_leaves_the_models_state_as_the_profiled_run(hf: Any) -> None:
    class CountsTokens(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(16, 8)
            self.head = nn.Linear(8, 16)
            self.register_buffer("tokens_seen", torch.zeros((), dtype=torch.long))

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            self.tokens_seen += input_ids.shape[-1]
            return self.head(self.emb(input_ids))

        def generate(self, input_ids: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
            for _ in range(max_new_tokens):  # no cache: the whole sequence each call
                token = self(input_ids)[:, -1].argmax(-1, keepdim=True)
                input_ids = torch.cat([input_ids, token], dim=-1)
            return input_ids

    torch.manual_seed(0)
    model, prompt = CountsTokens(), torch.randint(0, 16, (1, 4))
    gp = profile_generate(model, prompt, max_new_tokens=3)
    assert gp.baseline is not None  # (the default second run, timed without the profiler)
    assert int(model.tokens_seen) == 4 + 5 + 6  # one generation's calls: 4, 5 and 6 tokens


def test_an_encoder_decoders_new_tokens_are_the_decoders(hf: Any) -> None:
    config = hf.T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                         decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    torch.manual_seed(0)
    model = hf.T5ForConditionalGeneration(config).eval()
    for n in (4, 3):  # the sequences: the decoder's start token + n new ones
        gp = profile_generate(model, ids(2, 5) % 100, max_new_tokens=n, min_new_tokens=n, do_sample=False)
        assert gp.output.shape == (2, n + 1) and gp.new_tokens == n and len(gp.steps) == n
        assert gp.tokens_per_s is not None and gp.tokens_per_s > 0


def tiny_mistral(hf: Any) -> nn.Module:
    """A two-layer Mistral whose layers keep a sliding window of 4 tokens."""
    config = hf.MistralConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                              num_key_value_heads=2, vocab_size=128, sliding_window=4, attn_implementation="eager",
                              pad_token_id=0)
    torch.manual_seed(0)
    return hf.MistralForCausalLM(config).eval()


def test_a_sliding_window_cache_is_not_checked_against_the_full_formula(hf: Any) -> None:
    model = tiny_mistral(hf)
    gp = profile_generate(model, ids(1, 5), max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=0)
    # each layer keeps sliding_window - 1 = 3 tokens once full, whatever the context: the formula over the
    # context (2 x layers x KV heads x head dim x tokens x batch x 4 B) does not describe it, nor one figure per token
    assert all(s.sliding_window == 4 for s in gp.kv_cache)
    assert gp.kv_cache_matches_formula is None and all(r.kv_cache_formula_bytes is None for r in gp.steps)
    assert gp.kv_bytes_per_token is None and gp.predict("h100-sxm").kv_cache_bytes is None
    markdown = gp.markdown("h100-sxm")  # (no largest batch without a per-token figure: a dash, as the text says)
    assert "largest batch at context 8: -" in markdown and "None" not in markdown


def test_a_static_sliding_window_cache_is_seen(hf: Any) -> None:
    model = tiny_mistral(hf)
    gp = profile_generate(model, ids(1, 5), max_new_tokens=3, min_new_tokens=3, do_sample=False, pad_token_id=0,
                          cache_implementation="static")
    # its sliding layers preallocate their window (4 slots) whatever the context: no formula, no per token
    assert {s.sliding_window for s in gp.kv_cache} == {4} and gp.kv_cache_matches_formula is None
    assert gp.kv_bytes_per_token is None


def test_a_sweep_does_not_extrapolate_a_sliding_window_cache(hf: Any) -> None:
    config = hf.MistralConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                              num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                              sliding_window=4)
    with torch.device("meta"):
        model = hf.MistralForCausalLM(config).eval()
    sweep = sweep_generation(model, [1], [2, 8], [2], hardware="h100-sxm")
    # prompt 2 + 2 generated - 1 = 3 tokens: within the window, the per-token figure holds (2 layers x K and V
    # x 1 KV head x head dim 8 x 3 tokens x 4 B = 384); prompt 8: past it, each layer keeps its window: None
    assert [p.kv_cache_bytes for p in sweep.points] == [384, None]

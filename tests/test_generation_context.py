"""The context length of each generation step follows the live cache: speculative decoding
(prompt lookup, an assistant model) crops the candidates it rejected from the cache, and a static
cache's allocated length is not the tokens it holds. Each step's context is (the cache's length
before the call) + (the tokens fed), and the KV formula is built on it.

Every transformers model here is built from a config object (no download); the tests skip without
transformers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from torch_flops import profile_generate
from torch_flops.generation import context_lengths
from torch_flops.kvcache import read_cache


@pytest.fixture(scope="module")
def hf() -> Any:
    return pytest.importorskip("transformers")


GREEDY = {"max_new_tokens": 4, "min_new_tokens": 4, "do_sample": False, "pad_token_id": 0}


def tiny_gpt2(hf: Any) -> nn.Module:
    # 2 layers, 4 heads of 64 / 4 = 16 dims
    config = hf.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=64, bos_token_id=0,
                           eos_token_id=0, attn_implementation="eager")
    torch.manual_seed(0)
    return hf.GPT2LMHeadModel(config).eval()


def tiny_llama(hf: Any, layers: int = 2, seed: int = 0) -> nn.Module:
    # grouped-query attention: 4 query heads share 2 KV heads of 64 / 4 = 16 dims
    config = hf.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=layers, num_attention_heads=4,
                            num_key_value_heads=2, vocab_size=100, max_position_embeddings=64,
                            attn_implementation="eager")
    torch.manual_seed(seed)
    return hf.LlamaForCausalLM(config).eval()


def attended(model: nn.Module, call: Callable[[], Any]) -> tuple[Any, list[int]]:
    """``call()``'s output, unprofiled, and per call of ``model`` the tokens it attended over, read by a
    forward pre-hook: the length of the cache it was given + the tokens it was fed."""
    seen: list[int] = []

    def pre(module: nn.Module, args: Any, kwargs: dict[str, Any]) -> None:
        cache = kwargs.get("cache", kwargs.get("past_key_values"))  # (transformers >= 5.24 names it cache)
        ids = kwargs.get("decoder_input_ids", kwargs.get("input_ids"))
        seen.append((0 if cache is None else int(cache.get_seq_length())) + int(ids.shape[-1]))

    handle = model.register_forward_pre_hook(pre, with_kwargs=True)
    try:
        return call(), seen
    finally:
        handle.remove()


def test_prompt_lookup_context_is_the_cache_kept_plus_the_tokens_fed(hf: Any) -> None:
    model = tiny_gpt2(hf)
    base = torch.tensor([[99, 19, 57, 70, 53, 70]])
    ids = torch.cat([base, base], 1)  # 12 tokens: the bigram "53 70" ends the prompt and comes earlier
    kwargs = {"attention_mask": torch.ones_like(ids), "max_new_tokens": 6, "do_sample": False, "pad_token_id": 0,
              "prompt_lookup_num_tokens": 2}
    plain, reference = attended(model, lambda: model.generate(ids, **kwargs))
    assert plain[0, 12:].tolist() == [70] * 6  # the random model answers 70 whatever it is shown
    gp = profile_generate(model, ids, **kwargs)
    assert torch.equal(gp.output, plain) and gp.baseline_matches is True and gp.new_tokens == 6
    # step 0: the 12-token prompt + 2 candidates (99 19, which followed the earlier "53 70") = 14; both
    #   rejected (the model says 70): the cache is cut back to the prompt, 12 tokens, and 1 new token made;
    # step 1: fed 70 + 2 candidates (53 70, after the first 70 of the prompt): 12 + 3 = 15; both rejected:
    #   the cache is cut back to 13;
    # step 2: fed 70 + 1 candidate (70, after the earlier "70 70"): 13 + 2 = 15; accepted: 2 new tokens,
    #   the cache keeps 15;
    # step 3: fed 70 + 2 candidates (70 70): 15 + 3 = 18; the last 2 new tokens (4 + 2 = 6)
    # (counting every token fed, rejected ones included, gave 14, 17, 19, 22)
    assert [s.tokens_in for s in gp.steps] == [14, 3, 2, 3]
    assert [s.context_length for s in gp.steps] == [14, 15, 15, 18] == reference
    # KV after each call: 2 (K, V) x 2 layers x 4 heads x 16 head dim x tokens x batch 1 x 4 B = 1024 x tokens
    assert gp.kv_cache_bytes == [1024 * t for t in (14, 15, 15, 18)]
    assert [s.kv_cache_formula_bytes for s in gp.steps] == gp.kv_cache_bytes and gp.kv_cache_matches_formula
    assert gp.summary()["kv_cache_differs"] == [] and "measured equals" in gp.text(depth=0)
    # the prompt is the 12 tokens given, not the 14 the prefill was fed with its candidates
    assert gp.prompt_length == 12 and "batch 1, prompt 12 tokens, 6 new tokens" in gp.text(depth=0)


def test_assisted_decoding_context_follows_the_target_s_cache(hf: Any) -> None:
    model, assistant = tiny_llama(hf), tiny_llama(hf, layers=1, seed=1)
    assistant.generation_config.num_assistant_tokens_schedule = "constant"  # the same candidates in both runs
    ids = torch.randint(1, 100, (1, 5), generator=torch.Generator().manual_seed(1))
    kwargs = {**GREEDY, "max_new_tokens": 8, "min_new_tokens": 8, "assistant_model": assistant}
    plain, reference = attended(model, lambda: model.generate(ids, **kwargs))
    gp = profile_generate(model, ids, **kwargs)
    assert torch.equal(gp.output, plain)
    contexts = [s.context_length for s in gp.steps]
    # each step attends over the tokens its cache kept + the last token and the candidates it is fed
    assert contexts == reference
    assert sum(s.tokens_in for s in gp.steps[1:]) > len(gp.steps) - 1  # candidates were fed
    assert contexts[-1] < sum(s.tokens_in for s in gp.steps)  # and some were dropped again
    assert gp.steps[0].tokens_in > 5 and gp.prompt_length == 5  # the prompt fed with the first candidates
    # KV: 2 (K, V) x 2 layers x 2 KV heads x 16 head dim x tokens x batch 1 x 4 B = 512 x tokens
    assert gp.kv_cache_bytes == [512 * t for t in contexts] and gp.kv_cache_matches_formula is True


@pytest.mark.parametrize("kind", ["t5", "bart"])
def test_an_encoder_decoder_s_static_cache_counts_the_decoder_tokens(hf: Any, kind: str) -> None:
    if kind == "t5":  # 2 decoder layers, 4 heads of 8 dims
        config = hf.T5Config(d_model=32, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4, d_kv=8,
                             vocab_size=100, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
        cls = hf.T5ForConditionalGeneration
    else:
        config = hf.BartConfig(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                               decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=100,
                               max_position_embeddings=64, forced_eos_token_id=None)
        cls = hf.BartForConditionalGeneration
    torch.manual_seed(0)
    model = cls(config).eval()
    model.set_attn_implementation("eager")
    ids = torch.randint(3, 100, (2, 6), generator=torch.Generator().manual_seed(1))  # 6 encoder tokens each
    profiles = {}
    for cache in ("static", None):
        kwargs = {**GREEDY, "attention_mask": torch.ones_like(ids), "cache_implementation": cache}
        plain, reference = attended(model, lambda: model.generate(ids, **kwargs))  # noqa: B023
        gp = profiles[cache] = profile_generate(model, ids, baseline=False, **kwargs)
        assert torch.equal(gp.output, plain)
        # the decoder is fed its start token, then each token it made: 1, 2, 3, 4 tokens seen (the static
        # cache's 4 slots are not the tokens it holds)
        assert [s.tokens_in for s in gp.steps] == [1, 1, 1, 1]
        assert [s.context_length for s in gp.steps] == [1, 2, 3, 4] == reference
        assert [None if s is None else s.seq_length for s in gp.kv_cache] == [1, 2, 3, 4]
    last = profiles["static"].kv_cache[-1]
    assert last is not None and last.kind == "EncoderDecoderCache"
    # the self-attention cache's slots: the 4 tokens the decoder is fed (start + 3 made; the 4th made is not fed)
    assert last.max_length == 4 and last.tokens == 4
    # self-attention, per layer: 2 (K, V) x 4 heads x 8 dims x 4 slots x batch 2 x 4 B = 2048, preallocated;
    # cross-attention: 2 x 4 x 8 x 6 encoder tokens x 2 x 4 B = 3072, from the first step on
    assert [None if s is None else s.layer_bytes for s in profiles["static"].kv_cache] == \
        [(2048, 2048, 3072, 3072)] * 4


def test_continuing_from_a_static_cache_counts_its_tokens(hf: Any) -> None:
    model = tiny_llama(hf)
    ids = torch.randint(1, 100, (1, 5), generator=torch.Generator().manual_seed(1))

    def first() -> tuple[torch.Tensor, Any]:  # 5 + 4 tokens, 8 of them in a 16-slot static cache
        cache = hf.StaticCache(config=model.config, max_cache_len=16)
        return model.generate(ids, past_key_values=cache, **GREEDY), cache

    sequence, cache = first()
    more = torch.cat([sequence, torch.tensor([[7, 8]])], 1)  # 11 tokens, 8 already in the cache
    plain, reference = attended(model, lambda: model.generate(more, past_key_values=cache, **GREEDY))
    sequence, cache = first()
    gp = profile_generate(model, more, past_key_values=cache, **GREEDY)
    assert torch.equal(gp.output, plain) and gp.output.shape[1] == 15
    # the first call attends over the 8 cached + 3 new tokens; each later one adds its token (counting
    # only the tokens fed gave 3, 4, 5, 6)
    assert [s.tokens_in for s in gp.steps] == [3, 1, 1, 1]
    assert [s.context_length for s in gp.steps] == [11, 12, 13, 14] == reference
    # preallocated: 2 (K, V) x 2 layers x 2 KV heads x 16 head dim x 16 slots x batch 1 x 4 B = 8192 each step
    assert gp.kv_cache_bytes == [8192] * 4 and gp.kv_cache_matches_formula is True


def test_read_cache_counts_a_static_cache_s_used_slots(hf: Any) -> None:
    config = hf.LlamaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                            vocab_size=100)
    cache = hf.StaticCache(config=config, max_cache_len=10)
    k = torch.zeros(1, 2, 3, 8)  # batch 1, 2 KV heads, 3 tokens, head dim 32 / 4 = 8
    for layer in range(2):
        cache.update(k, k, layer)
    state = read_cache(cache)
    # 3 of 10 slots used; each layer holds 2 (K, V) x 2 heads x 10 slots x 8 dims x 4 B = 1280
    assert (state.seq_length, state.tokens, state.max_length, state.layer_bytes) == (3, 10, 10, (1280, 1280))
    both = read_cache(hf.EncoderDecoderCache(cache, hf.DynamicCache()))
    assert (both.seq_length, both.max_length) == (3, 10)  # the self-attention's: the cross-attention's is empty
    # tuples and tensors of one's own have no count of their own
    assert read_cache(((k, k), (k, k))).seq_length is None and read_cache([k, k]).seq_length is None
    # on meta a static cache's count is a tensor without a value: not read
    meta = hf.StaticCache(config=config, max_cache_len=10)
    meta.update(k.to("meta"), k.to("meta"), 0)
    assert read_cache(meta).seq_length is None


def test_context_lengths_follow_the_cache_where_it_was_read() -> None:
    fed, masks = [12, 3, 2, 3, 1], [None] * 5
    fresh = [True, False, False, False, False]
    # from the tokens fed alone: each adds to the last
    assert context_lengths(fed, masks, fresh) == [12, 15, 17, 20, 21]
    # the cache read after a call says its context; the next call unread goes on from there: 15 + 1
    assert context_lengths(fed, masks, fresh, [12, 13, 13, 15, None]) == [12, 13, 13, 15, 16]
    # a count below the tokens fed (a cache the model left empty, fed the whole sequence) is not the context
    assert context_lengths([5, 6], [None, None], [True, True], [0, 0]) == [5, 6]

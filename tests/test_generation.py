"""Generation profiling (torch_flops.generation, generation_sweep): the prefill and every decode
step of the user's own ``generate`` or decode loop against FlopCounterMode over the same forward,
identical tokens and random state, the KV cache per step against its formula, the roofline
prediction derived by hand, the meta sweep, the DeepSpeed drop-in and the command line.

Every transformers model here is built from a config object (no download); those tests skip
without transformers."""

from __future__ import annotations

import itertools
import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from _flop_counts import flop_counter_per_call  # tests/_flop_counts.py (pytest puts tests/ on sys.path)
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from torch_flops import UnsupportedOpWarning, get_model_profile, hardware, profile_generate, sweep_generation
from torch_flops.cli import main
from torch_flops.generation import max_batch
from torch_flops.generation_report import sweep_table
from torch_flops.kvcache import read_cache
from torch_flops.session import installed


@pytest.fixture(scope="module")
def hf() -> Any:
    return pytest.importorskip("transformers")


def assert_clean(model: nn.Module) -> None:
    """Nothing of the profiler stays installed (modes, global hooks, the model's own hooks)."""
    assert installed() == {"threads": 0, "recordings": 0, "global_hooks": 0}
    assert not model._forward_hooks and not model._forward_pre_hooks


def tiny_llama(hf: Any) -> nn.Module:
    # grouped-query attention: 4 query heads share 2 KV heads; head_dim = 64 / 4 = 16
    config = hf.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, vocab_size=100, max_position_embeddings=64,
                            attn_implementation="eager")
    torch.manual_seed(0)
    return hf.LlamaForCausalLM(config).eval()


def tiny_gpt2(hf: Any) -> nn.Module:
    config = hf.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=64, bos_token_id=0,
                           eos_token_id=0, attn_implementation="eager")
    torch.manual_seed(0)
    return hf.GPT2LMHeadModel(config).eval()


def prompt(batch: int = 2, length: int = 5) -> dict[str, torch.Tensor]:
    ids = torch.randint(1, 100, (batch, length), generator=torch.Generator().manual_seed(1))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


GREEDY = {"max_new_tokens": 4, "min_new_tokens": 4, "do_sample": False, "pad_token_id": 0}


def greedy_against_flop_counter(model: nn.Module) -> Any:
    """Greedy ``generate`` of :func:`prompt`, plain under FlopCounterMode and then profiled: the same
    tokens, and each step's FLOPs (``flop_counter`` convention) equal FlopCounterMode's over that call
    of the model, their sum its count over the whole call. The generation profile."""
    inputs = prompt()
    plain, per_call, whole = flop_counter_per_call(model, lambda: model.generate(**inputs, **GREEDY))
    gp = profile_generate(model, inputs["input_ids"], attention_mask=inputs["attention_mask"], baseline=False,
                          **GREEDY)
    assert torch.equal(gp.output, plain)
    counted = [p.with_convention("flop_counter").total_flops for p in gp.profiles]
    assert counted == per_call and sum(counted) == whole
    return gp


# --------------------------------------------------------------------------- transformers generate


def test_llama_gqa_greedy_steps_against_flop_counter_and_kv_formula(hf: Any) -> None:
    model = tiny_llama(hf)
    inputs = prompt()
    plain, per_call, whole = flop_counter_per_call(model, lambda: model.generate(**inputs, **GREEDY))
    gp = profile_generate(model, inputs["input_ids"], attention_mask=inputs["attention_mask"], **GREEDY)
    assert_clean(model)
    assert torch.equal(gp.output, plain) and gp.baseline_matches is True
    # one prefill over the 5-token prompt, then 3 decode steps of 1 token each
    assert [s.phase for s in gp.steps] == ["prefill", "decode", "decode", "decode"]
    assert [s.tokens_in for s in gp.steps] == [5, 1, 1, 1] and [s.context_length for s in gp.steps] == [5, 6, 7, 8]
    assert gp.new_tokens == 4 and gp.batch_size == 2 and len(gp.decode) == 3
    # each step's FLOPs equal FlopCounterMode's over that step's forward; summed, over the whole generate
    counted = [p.with_convention("flop_counter").total_flops for p in gp.profiles]
    assert counted == per_call and sum(counted) == whole
    assert counted[1] < counted[2] < counted[3]  # attention over a longer cache each step
    # KV cache after each step, per layer: 2 (K, V) x 2 KV heads x 16 head_dim x tokens x batch 2 x 4 bytes
    # = 512 x tokens; both layers: 1024 x tokens (with 4 KV heads, no GQA, it would be twice that)
    assert gp.kv_cache_bytes == [1024 * t for t in (5, 6, 7, 8)]
    assert [s.layer_bytes for s in gp.kv_cache] == [(512 * t, 512 * t) for t in (5, 6, 7, 8)]
    assert gp.kv_cache_matches_formula is True and gp.kv_shape == (2, 2, 16)
    assert gp.kv_bytes_per_token == 512  # 1024 x 8 tokens / (8 tokens x batch 2)
    # weights: every parameter in float32, plus the rotary buffers inv_freq and original_inv_freq
    # (head_dim / 2 = 8 floats each)
    assert gp.weights_bytes == 4 * sum(p.numel() for p in model.parameters()) + 2 * 4 * 8
    memory = gp.memory()
    assert memory["kv_cache"] == 8192 and memory["activations"] is not None and memory["activations"] > 0
    assert gp.ttft_ms is not None and gp.tpot_ms is not None and gp.tokens_per_s is not None
    assert gp.overhead is not None and gp.baseline is not None and not gp.baseline.profiled
    # per token: decode FLOPs over 3 steps x 2 sequences
    assert gp.decode_flops_per_token == sum(p.total_flops for p in gp.decode) / 6


def test_sampling_with_a_seed_same_tokens_and_random_state(hf: Any) -> None:
    model = tiny_llama(hf)
    inputs = prompt()
    sampling = {"max_new_tokens": 5, "do_sample": True, "top_k": 20, "temperature": 0.9, "pad_token_id": 0}
    torch.manual_seed(123)
    plain = model.generate(**inputs, **sampling)
    after_plain = torch.rand(4)
    for baseline in (None, False):  # the baseline's second run must leave the random state as one run does
        torch.manual_seed(123)
        gp = profile_generate(model, inputs["input_ids"], attention_mask=inputs["attention_mask"], baseline=baseline,
                              **sampling)
        assert torch.equal(torch.rand(4), after_plain)
        assert torch.equal(gp.output, plain)
    assert_clean(model)


def test_gpt2_steps_against_flop_counter_and_kv_formula(hf: Any) -> None:
    model = tiny_gpt2(hf)
    inputs = prompt(batch=1, length=6)
    plain, per_call, whole = flop_counter_per_call(model, lambda: model.generate(**inputs, **GREEDY))
    gp = profile_generate(model, inputs["input_ids"], attention_mask=inputs["attention_mask"], baseline=False,
                          **GREEDY)
    assert torch.equal(gp.output, plain) and gp.baseline is None and gp.overhead is None
    counted = [p.with_convention("flop_counter").total_flops for p in gp.profiles]
    assert counted == per_call and sum(counted) == whole
    # GPT-2 (every head has its K and V): 2 x 2 layers x 4 heads x 16 head_dim x tokens x batch 1 x 4 bytes
    # = 1024 x tokens
    assert gp.kv_cache_bytes == [1024 * t for t in (6, 7, 8, 9)] and gp.kv_cache_matches_formula is True
    # the summed profile of the whole generation (what DeepSpeed's drop-in reports)
    assert gp.total.total_flops == sum(s.flops for s in gp.steps)
    assert_clean(model)


def test_static_cache_object_is_the_users_and_holds_its_length(hf: Any) -> None:
    model = tiny_llama(hf)
    inputs = prompt()
    expected = model.generate(**inputs, past_key_values=hf.StaticCache(config=model.config, max_cache_len=16),
                              **GREEDY)
    cache = hf.StaticCache(config=model.config, max_cache_len=16)
    gp = profile_generate(model, inputs["input_ids"], attention_mask=inputs["attention_mask"], past_key_values=cache,
                          return_dict_in_generate=True, **GREEDY)
    assert gp.output.past_key_values is cache and torch.equal(gp.output.sequences, expected)
    assert gp.baseline is None  # the user's cache object: generate runs once
    # preallocated: 2 x 2 layers x 2 KV heads x 16 head_dim x 16 slots x batch 2 x 4 bytes = 16384 at every step
    assert gp.kv_cache_bytes == [16384] * 4 and gp.kv_cache_matches_formula is True
    assert gp.kv_cache[0].kind == "StaticCache"
    with pytest.raises(ValueError, match="twice on your past_key_values"):
        profile_generate(model, inputs["input_ids"], past_key_values=cache, baseline=True, **GREEDY)


def test_read_cache_kinds(hf: Any) -> None:
    k, v = torch.zeros(2, 3, 5, 4), torch.zeros(2, 3, 5, 4)  # 2 x 3 x 5 x 4 floats = 480 bytes each
    legacy = read_cache(((k, v), (k.clone(), v.clone())))
    assert legacy.layer_bytes == (960, 960) and legacy.tokens == 5 and legacy.kind == "tuple"
    shared = read_cache([(k, v), (k, v[:, :, :2])])  # storages already counted in layer 0 count once
    assert shared.layer_bytes == (960, 0)
    assert read_cache({"layer0": [k], "layer1": v}).layer_bytes == (480, 480)
    self_attention, cross_attention = hf.DynamicCache(), hf.DynamicCache()
    self_attention.update(k, v, 0)
    cross_attention.update(torch.zeros(2, 3, 7, 4), torch.zeros(2, 3, 7, 4), 0)
    both = read_cache(hf.EncoderDecoderCache(self_attention, cross_attention))
    assert both.layer_bytes == (960, 2 * 2 * 3 * 7 * 4 * 4) and both.kind == "EncoderDecoderCache"
    with pytest.raises(TypeError, match="cannot read a KV cache from a int"):
        read_cache(3)


def test_mamba_state_from_cache_params(hf: Any) -> None:
    # a recurrent model: its cache is ``cache_params`` (no past_key_values), each layer a conv and an SSM state
    config = hf.MambaConfig(hidden_size=32, state_size=16, expand=2, conv_kernel=4, num_hidden_layers=2,
                            vocab_size=100)
    torch.manual_seed(0)
    gp = greedy_against_flop_counter(hf.MambaForCausalLM(config).eval())
    # per layer: conv state batch 2 x (expand 2 x hidden 32 = 64 channels) x kernel 4 = 512 floats, SSM state
    # 2 x 64 x state 16 = 2048 floats: 2560 x 4 bytes = 10240; two layers 20480, the same after every step
    assert gp.kv_cache_bytes == [20480] * 4 and [s.layer_bytes for s in gp.kv_cache] == [(10240, 10240)] * 4
    assert gp.kv_cache[0].recurrent_layers == 2 and gp.kv_cache[0].tokens is None
    assert gp.kv_cache_matches_formula is None  # no KV formula describes a recurrent state
    assert [s.context_length for s in gp.steps] == [5, 6, 7, 8]


def test_xlstm_state_from_its_own_cache_object(hf: Any) -> None:
    # xLSTM's cache is no transformers Cache: an xLSTMCache whose ``rnn_state`` maps each layer to its
    # (C, n, m) state; the widths are multiples of 64 (the cache rounds hidden x 0.5 and hidden x 1 up to 64)
    config = hf.xLSTMConfig(hidden_size=128, embedding_dim=128, num_heads=4, num_hidden_layers=2, num_blocks=2,
                            vocab_size=100)
    torch.manual_seed(0)
    gp = greedy_against_flop_counter(hf.xLSTMForCausalLM(config).eval())
    # per layer, batch 2 x 4 heads: C 16 (qk 64 / 4) x 32 (v 128 / 4) = 512, n 16, m 1: 2 x 4 x 529 = 4232
    # floats = 16928 bytes; the same after every step
    assert [s.layer_bytes for s in gp.kv_cache] == [(16928, 16928)] * 4 and gp.kv_cache[0].kind == "xLSTMCache"
    assert gp.kv_cache[0].recurrent_layers == 2 and gp.kv_cache[0].tokens is None
    assert gp.kv_cache_matches_formula is None and not gp.notes


def test_rwkv_stacked_state(hf: Any) -> None:
    # RWKV's cache is ``state``: five (batch, hidden, layers) tensors, every layer's slice on the last
    # dimension (its attention's x, numerator, denominator, running max, and the feed-forward's x)
    config = hf.RwkvConfig(hidden_size=32, attention_hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                           vocab_size=100, context_length=64)
    torch.manual_seed(0)
    gp = greedy_against_flop_counter(hf.RwkvForCausalLM(config).eval())
    # per layer: 5 tensors x batch 2 x hidden 32 = 320 floats = 1280 bytes; 3 layers 3840, after every step
    assert [s.layer_bytes for s in gp.kv_cache] == [(1280, 1280, 1280)] * 4 and gp.kv_cache_bytes == [3840] * 4
    assert gp.kv_cache[0].recurrent_layers == 3 and gp.kv_cache[0].tokens is None
    assert gp.kv_cache_matches_formula is None and not gp.notes
    assert [s.context_length for s in gp.steps] == [5, 6, 7, 8]


def test_model_without_a_cache_sees_the_whole_sequence(hf: Any) -> None:
    # without a cache generate feeds the whole sequence at every step: its context is what it is fed
    model = tiny_gpt2(hf)
    inputs = prompt()
    no_cache = {**GREEDY, "use_cache": False}
    plain, per_call, _ = flop_counter_per_call(model, lambda: model.generate(**inputs, **no_cache))
    gp = profile_generate(model, inputs["input_ids"], attention_mask=inputs["attention_mask"], baseline=False,
                          **no_cache)
    assert torch.equal(gp.output, plain)
    assert [p.with_convention("flop_counter").total_flops for p in gp.profiles] == per_call
    assert [s.tokens_in for s in gp.steps] == [5, 6, 7, 8] and [s.context_length for s in gp.steps] == [5, 6, 7, 8]
    assert gp.kv_cache_bytes == [None] * 4
    # a model that cannot use one is given an empty DynamicCache, which stays empty: 0 bytes, the sequence fed again
    config = hf.OpenAIGPTConfig(n_embd=32, n_layer=2, n_head=4, vocab_size=100, n_positions=64)
    torch.manual_seed(0)
    gpt = hf.OpenAIGPTLMHeadModel(config).eval()
    plain, per_call, _ = flop_counter_per_call(gpt, lambda: gpt.generate(**inputs, **GREEDY))
    gp = profile_generate(gpt, inputs["input_ids"], attention_mask=inputs["attention_mask"], baseline=False, **GREEDY)
    assert torch.equal(gp.output, plain)
    assert [p.with_convention("flop_counter").total_flops for p in gp.profiles] == per_call
    assert [s.tokens_in for s in gp.steps] == [5, 6, 7, 8] and [s.context_length for s in gp.steps] == [5, 6, 7, 8]
    assert gp.kv_cache_bytes == [0] * 4 and gp.kv_cache_matches_formula is False
    # the text names where: 2 x 2 layers x 4 heads x 8 head dim x tokens x batch 2 x 4 bytes = 1 KiB a token,
    # 5 to 8 tokens
    assert ("at step 0 (0 B held, 5.00 KiB by the formula), step 1 (0 B held, 6.00 KiB by the formula), step 2 "
            "(0 B held, 7.00 KiB by the formula) and 1 more") in gp.text()


def test_per_layer_shapes_and_multi_query_kv(hf: Any) -> None:
    # Gemma 4: the full-attention layer has its own head_dim (512), so the config refuses one global
    # head_dim: the cache is still read per layer, with no single formula
    config = hf.Gemma4TextConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                 num_key_value_heads=2, head_dim=8, vocab_size=100,
                                 layer_types=["sliding_attention", "full_attention"], vocab_size_per_layer_input=100,
                                 hidden_size_per_layer_input=8, attn_implementation="eager")
    torch.manual_seed(0)
    model = hf.Gemma4ForCausalLM(config).eval()
    inputs = prompt(length=5)
    plain, per_call, _ = flop_counter_per_call(model, lambda: model.generate(**inputs, **GREEDY))
    gp = profile_generate(model, inputs["input_ids"], attention_mask=inputs["attention_mask"], baseline=False,
                          **GREEDY)
    assert torch.equal(gp.output, plain)
    assert [p.with_convention("flop_counter").total_flops for p in gp.profiles] == per_call
    # per layer 2 (K, V) x 2 KV heads x head_dim x tokens x batch 2 x 4 bytes: head_dim 8: 256 x tokens;
    # head_dim 512: 16384 x tokens
    assert [s.layer_bytes for s in gp.kv_cache] == [(256 * t, 16384 * t) for t in (5, 6, 7, 8)]
    assert gp.kv_shape is None and gp.kv_cache_matches_formula is None
    # Falcon's multi-query attention (the old architecture): one KV head whatever num_kv_heads says
    falcon = hf.FalconConfig(hidden_size=32, num_attention_heads=4, num_hidden_layers=2, vocab_size=100,
                             multi_query=True, new_decoder_architecture=False, attn_implementation="eager")
    torch.manual_seed(0)
    model = hf.FalconForCausalLM(falcon).eval()
    gp = profile_generate(model, inputs["input_ids"], attention_mask=inputs["attention_mask"], baseline=False,
                          **GREEDY)
    # 2 (K, V) x 2 layers x 1 KV head x head_dim 8 x tokens x batch 2 x 4 bytes = 256 x tokens
    assert gp.kv_shape == (2, 1, 8) and gp.kv_cache_bytes == [256 * t for t in (5, 6, 7, 8)]
    assert gp.kv_cache_matches_formula is True


def test_kv_shared_layers_hold_no_cache_of_their_own(hf: Any) -> None:
    # Gemma 3n: the last num_kv_shared_layers layers reuse the keys and values of the last earlier layer
    # of their type, so only 4 - 2 = 2 layers hold a cache
    config = hf.Gemma3nTextConfig(hidden_size=32, intermediate_size=[64] * 4, num_hidden_layers=4,
                                  num_attention_heads=4, num_key_value_heads=2, head_dim=8, vocab_size=100,
                                  layer_types=["sliding_attention", "full_attention"] * 2, num_kv_shared_layers=2,
                                  activation_sparsity_pattern=[0.95, 0.95, 0.0, 0.0], vocab_size_per_layer_input=100,
                                  hidden_size_per_layer_input=8, laurel_rank=8, attn_implementation="eager")
    torch.manual_seed(0)
    gp = greedy_against_flop_counter(hf.Gemma3nForCausalLM(config).eval())
    # 2 (K, V) x 2 layers x 2 KV heads x head_dim 8 x tokens x batch 2 x 4 bytes = 512 x tokens
    assert gp.kv_shape == (2, 2, 8) and gp.kv_cache_bytes == [512 * t for t in (5, 6, 7, 8)]
    assert gp.kv_cache_matches_formula is True


def test_multi_head_latent_attention_steps(hf: Any) -> None:
    # DeepSeek V3 at toy sizes: compressed queries and keys (ranks 16), one dense layer then one MoE layer
    config = hf.DeepseekV3Config(hidden_size=32, intermediate_size=64, moe_intermediate_size=32, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=16,
                                 qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, head_dim=8,
                                 n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
                                 first_k_dense_replace=1, vocab_size=100, attn_implementation="eager")
    torch.manual_seed(0)
    gp = greedy_against_flop_counter(hf.DeepseekV3ForCausalLM(config).eval())
    assert all(b is not None and b > 0 for b in gp.kv_cache_bytes) and gp.kv_cache[3].tokens == 8
    assert gp.kv_cache_matches_formula is None  # keys and values of their own widths: no 2 x heads x head_dim


# --------------------------------------------------------------------------- a decode loop of one's own


class Decoder(nn.Module):
    """Two single-head attention layers (d = 32, no bias) over a KV cache the caller holds: a list
    with one (keys, values) tuple per layer, each (batch, tokens, 32), grown by concatenation."""

    def __init__(self, d: int = 32, layers: int = 2) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.ModuleDict({n: nn.Linear(d, d, bias=False) for n in "qkvo"})
                                    for _ in range(layers))

    def forward(self, x: torch.Tensor, cache: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            q = layer["q"](x)
            k = torch.cat([cache[i][0], layer["k"](x)], 1)
            v = torch.cat([cache[i][1], layer["v"](x)], 1)
            cache[i] = (k, v)
            x = x + layer["o"](torch.softmax(q @ k.transpose(1, 2), -1) @ v)
        return x


def decode_loop(model: Decoder, cache: list[Any], x0: torch.Tensor, steps: int = 4) -> Callable[[], torch.Tensor]:
    def loop() -> torch.Tensor:
        x, outs = x0, []
        with torch.no_grad():
            for _ in range(steps):
                x = model(x, cache)[:, -1:]
                outs.append(x)
        return torch.cat(outs, 1)

    return loop


def empty_cache() -> list[Any]:
    return [(torch.zeros(1, 0, 32), torch.zeros(1, 0, 32)) for _ in range(2)]


def test_hand_written_loop_with_own_cache_tensors() -> None:
    torch.manual_seed(0)
    model = Decoder().eval()
    x0 = torch.randn(1, 5, 32)
    reference_cache = empty_cache()
    expected, per_call, whole = flop_counter_per_call(model, decode_loop(model, reference_cache, x0))
    cache = empty_cache()
    gp = profile_generate(model, loop=decode_loop(model, cache, x0), kv_cache=lambda: cache)
    assert_clean(model)
    assert torch.equal(gp.output, expected)
    assert all(torch.equal(a, b) for layer, ref in zip(cache, reference_cache) for a, b in zip(layer, ref))
    assert [s.tokens_in for s in gp.steps] == [5, 1, 1, 1] and gp.new_tokens == 4 and gp.baseline is None
    counted = [p.with_convention("flop_counter").total_flops for p in gp.profiles]
    assert counted == per_call and sum(counted) == whole
    # decode step 1 (cache of 5 -> 6 tokens), FlopCounterMode's matmuls per layer: 4 Linear 2*32*32 = 8192,
    # q @ k^T 2*32*6 = 384, attention @ v 2*6*32 = 384: 8960; two layers 17920
    assert counted[1] == 17920
    # KV bytes: 2 layers x (K, V) x tokens x 32 x 4 bytes = 512 x tokens, read from the user's own tensors
    assert gp.kv_cache_bytes == [512 * t for t in (5, 6, 7, 8)]
    assert gp.kv_cache[0].kind == "list" and gp.kv_cache_matches_formula is None  # no config to check against
    assert "KV cache:         512 B per token per sequence (no config to check it by)\n" in gp.text()
    assert gp.weights_bytes == 8 * 32 * 32 * 4  # 8 Linear(32, 32) weights


class ArgumentCacheDecoder(Decoder):
    """The decoder with its cache passed as ``past_key_values``, filled in place, not returned."""

    def forward(self, x: torch.Tensor, past_key_values: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        return super().forward(x, past_key_values)


def test_cache_given_as_an_argument_and_filled_in_place() -> None:
    torch.manual_seed(0)
    model = ArgumentCacheDecoder().eval()
    x0 = torch.randn(1, 5, 32)
    cache = empty_cache()

    def loop() -> torch.Tensor:
        x, outs = x0, []
        with torch.no_grad():
            for _ in range(4):
                x = model(x, past_key_values=cache)[:, -1:]
                outs.append(x)
        return torch.cat(outs, 1)

    gp = profile_generate(model, loop=loop)  # no kv_cache=: read from the call's past_key_values
    # 2 layers x (K, V) x tokens x 32 x 4 bytes = 512 x tokens
    assert gp.kv_cache_bytes == [512 * t for t in (5, 6, 7, 8)] and gp.kv_cache[0].tokens == 5
    assert [s.context_length for s in gp.steps] == [5, 6, 7, 8]


def test_modes_off_between_the_models_calls_and_back_on_inside() -> None:
    # between two calls of the model nothing is recorded (outside=False): the recording's function
    # and dispatch modes are off there (the loop's own ops run natively) and back on in the next
    # call; the records are FlopCounterMode's per call all the same, and a loop that raises
    # between calls leaves nothing installed
    torch.manual_seed(0)
    model = Decoder().eval()
    x0 = torch.randn(1, 5, 32)
    depths: list[tuple[str, int, int]] = []

    def depth(where: str) -> None:
        depths.append((where, torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()))

    handle = model.register_forward_pre_hook(lambda m, a: depth("inside"))  # (after torch's global hooks)
    try:
        expected, per_call, _ = flop_counter_per_call(model, decode_loop(model, empty_cache(), x0))
        depths.clear()
        cache = empty_cache()

        def loop() -> torch.Tensor:
            depth("before")
            x, outs = x0, []
            with torch.no_grad():
                for _ in range(3):
                    x = model(x, cache)[:, -1:]
                    depth("between")
                    x = torch.cat([x * 1.0], 1)  # a function with a formula, run between the calls
                    outs.append(x)
                x = model(x, cache)[:, -1:]
                outs.append(x)
            return torch.cat(outs, 1)

        gp = profile_generate(model, loop=loop, kv_cache=lambda: cache)
    finally:
        handle.remove()
    assert_clean(model)
    assert torch.equal(gp.output, expected)
    assert [p.with_convention("flop_counter").total_flops for p in gp.profiles] == per_call
    assert depths == [("before", 1, 1)] + [("inside", 1, 1), ("between", 0, 0)] * 3 + [("inside", 1, 1)]

    def failing() -> torch.Tensor:
        model(x0, empty_cache())
        raise KeyError("the loop's own error")

    with pytest.raises(KeyError, match="the loop's own error"):
        profile_generate(model, loop=failing)
    assert_clean(model)


def test_decode_step_prediction_on_h100_by_hand() -> None:
    torch.manual_seed(0)
    model = Decoder().eval()
    cache = empty_cache()
    gp = profile_generate(model, loop=decode_loop(model, cache, torch.randn(1, 5, 32)), kv_cache=lambda: cache)
    pred = gp.predict("h100-sxm", context_length=1000)
    # Decode step 1 at batch 1, float32: every node is memory-bound on h100-sxm (its largest intensity,
    # a Linear's 2048 FLOPs / 4352 bytes, is far below 67 TFLOP/s / 3.35 TB/s = 20 FLOP/byte), so its
    # time is its bytes / 3.35e12 B/s. Bytes moved, both layers:
    #   weights:     8 Linear(32, 32) weights, 4096 bytes each, read once           = 32768
    #   KV cache:    cat reads the old K and V (5 x 32 x 4 = 640 each) and writes the new (6 x 32 x 4 = 768
    #                each); attention reads the new K and V (768 each): 2 x (1280 + 1536 + 1536)  =  8704
    #   activations: per layer, 4 Linear in/out 4 x 256 = 1024, the new k, v into cat 2 x 128 = 256,
    #                q @ k^T reads q 128 and writes 6 scores 24, softmax 24 + 24, @ v reads 24 and
    #                writes 128, x + out 3 x 128 = 384: 2016; both layers                   =  4032
    #   total                                                                               = 45504
    assert pred.decode_ms[0] == pytest.approx(45504 / 3.35e12 * 1e3, rel=1e-12)
    assert pred.decode_memory_bound_share == 1.0 and pred.batch_size == 1
    assert pred.decode_tokens_per_s == pytest.approx(1e3 / pred.tpot_ms)  # type: ignore[operator]
    # the largest batch at context 1000: (80 GiB - 32768 bytes of weights) / (512 B per token x 1000)
    assert pred.max_batch == (80 * 2**30 - 32768) // (512 * 1000) == 167772
    assert max_batch(100, 200, 1.0, 1) == 0 and max_batch(100, 0, None, 1) is None
    assert "largest batch 167772" in pred.text()


def test_prediction_of_beam_search_and_of_an_encoder_decoder_s_cache(hf: Any) -> None:
    """Beam search runs beams x prompts and returns the prompts: the predicted end-to-end tokens/s
    counts the returned sequences, as the measured one. An encoder-decoder's cache holds the
    cross-attention's keys and values over the encoder's tokens, which do not grow with the context:
    the predicted cache at the generation's context is the cache measured after its last step."""
    gp = profile_generate(tiny_llama(hf), **prompt(), max_new_tokens=4, num_beams=2, do_sample=False, pad_token_id=0)
    pred = gp.predict("h100-sxm")
    assert (gp.sequences, gp.batch_size, gp.new_tokens) == (2, 4, 4)  # 2 prompts x 2 beams run, 2 sequences out
    assert pred.tokens_per_s == pytest.approx(2 * 4 * 1e3 / pred.total_ms)
    config = hf.T5Config(d_model=32, d_ff=64, d_kv=8, num_layers=2, num_decoder_layers=2, num_heads=4,
                         vocab_size=100, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    torch.manual_seed(0)
    t5 = hf.T5ForConditionalGeneration(config).eval()
    gp = profile_generate(t5, torch.randint(3, 100, (2, 64)), max_new_tokens=4, min_new_tokens=4, do_sample=False)
    pred = gp.predict("h100-sxm")
    # per sequence and layer, float32: self-attention K and V of 4 heads x 8 = 32 per token (256 B a token
    # for both, 512 B for the 2 layers), cross-attention K and V over the 64 encoder tokens: 2 x 64 x 32 x 4
    # x 2 layers = 32768 B; at context 4 (the 4 decoder tokens held): 2 x (4 x 512 + 32768) = 69632 B
    assert gp.kv_bytes_per_token == 512 and gp.kv_fixed_bytes == 32768
    assert pred.kv_cache_bytes == gp.kv_cache_bytes[-1] == 69632
    assert pred.max_batch == (80 * 2**30 - gp.weights_bytes) // (4 * 512 + 32768)


def test_errors_before_anything_runs_and_exceptions_as_themselves() -> None:
    model = Decoder()
    with pytest.raises(TypeError, match="has no generate"):
        profile_generate(model, torch.zeros(1, 2, dtype=torch.long), max_new_tokens=2)
    with pytest.raises(TypeError, match=r"with loop=, pass no input_ids .*\(got input_ids\)$"):
        profile_generate(model, torch.zeros(1, 2, dtype=torch.long), loop=lambda: None)
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        profile_generate(model, loop=lambda: None, max_new_tokens=0)
    with pytest.raises(TypeError, match="kv_cache must be a callable"):
        profile_generate(model, loop=lambda: None, kv_cache=[1])  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="never called"):
        profile_generate(model, loop=lambda: None)

    class Boom(Exception):
        pass

    def loop() -> None:
        model(torch.zeros(1, 1, 32), empty_cache())
        raise Boom("the user's own")

    with pytest.raises(Boom, match="the user's own"):
        profile_generate(model, loop=loop)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):  # the model's own error, through the recording
        profile_generate(model, loop=lambda: model(torch.zeros(1, 1, 8), empty_cache()))
    assert_clean(model)
    with pytest.warns(UserWarning, match="KV cache could not be read"):
        gp = profile_generate(model, loop=lambda: model(torch.zeros(1, 1, 32), empty_cache()), kv_cache=lambda: 3)
    assert gp.kv_cache_bytes == [None] and "could not be read" in gp.text(depth=0)


def test_exports() -> None:
    torch.manual_seed(0)
    model = Decoder().eval()
    cache = empty_cache()
    gp = profile_generate(model, loop=decode_loop(model, cache, torch.randn(1, 3, 32), steps=3), kv_cache=lambda: cache)
    doc = json.loads(gp.to_json())
    assert doc["summary"]["new_tokens"] == 3 and [s["kv_cache_bytes"] for s in doc["steps"]] == [1536, 2048, 2560]
    assert len(doc["decode"]) == 2 and doc["prefill"]["summary"]["flops"] == gp.prefill.total_flops
    assert "| step | phase" in gp.markdown("h100-sxm").replace("   ", " ").replace("  ", " ")
    assert gp.csv_text().splitlines()[0].startswith("step,phase,tokens_in,context_length,batch_size,flops")
    text = gp.text(depth=1, hardware="h200")
    assert "Predicted on h200" in text and "Prefill (step 0):" in text and "Decode (step 1):" in text


# --------------------------------------------------------------------------- the meta sweep


def test_meta_sweep_decode_grows_with_context(hf: Any, tmp_path: Path) -> None:
    config = hf.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, vocab_size=100, max_position_embeddings=256,
                            attn_implementation="eager")
    sweep = sweep_generation(config, [1, 2], [8, 32], [2, 8, 40], hardware="h100-sxm")
    assert len(sweep.points) == 12 and sweep.dtype == "bfloat16" and len(sweep.prefill) == 4
    for batch in (1, 2):
        points = sorted((p for p in sweep.points if p.batch == batch), key=lambda p: p.decode_context)
        contexts = [p.decode_context for p in points]
        # decode cache L = prompt + (generated - 2) // 2, context L + 1: prompt 8: 9, 12, 28; prompt 32: 33, 36, 52
        assert contexts == [9, 12, 28, 33, 36, 52]
        assert all(a.decode_flops < b.decode_flops for a, b in itertools.pairwise(points))
        assert all(a.tpot_ms < b.tpot_ms for a, b in itertools.pairwise(points))
        for p in points:
            # KV at the end, prompt + generated - 1 tokens (the last one is never fed back):
            # 2 x 2 layers x 2 KV heads x 16 head_dim x tokens x batch x 2 bytes (bf16)
            assert p.kv_cache_bytes == 256 * (p.prompt + p.generated - 1) * batch
    # one decode step against FlopCounterMode over the same call on meta: a cache of 35 tokens, batch 2
    with torch.device("meta"):
        model = hf.LlamaForCausalLM(config).to(torch.bfloat16).eval()
    cache = hf.DynamicCache(config=config)
    for i in range(2):
        cache.update(torch.empty(2, 2, 35, 16, dtype=torch.bfloat16, device="meta"),
                     torch.empty(2, 2, 35, 16, dtype=torch.bfloat16, device="meta"), i)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(input_ids=torch.empty(2, 1, dtype=torch.long, device="meta"), past_key_values=cache, use_cache=True,
              logits_to_keep=1)
    assert sweep.decode[(2, 35)].with_convention("flop_counter").total_flops == counter.get_total_flops()
    assert "decode ctx" in sweep.text() and json.loads(sweep.to_json())["points"][0]["batch"] == 1
    pytest.importorskip("matplotlib")
    sweep.save_plot(str(tmp_path / "sweep.png"))
    assert (tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"


def test_sweep_refuses_a_model_with_weights_and_bad_axes() -> None:
    with pytest.raises(ValueError, match="runs on the meta device"):
        sweep_generation(Decoder(), [1], [4], [2], hardware="h100-sxm")
    with torch.device("meta"):
        model = Decoder()
    with pytest.raises(ValueError, match="batch_sizes must hold positive ints"):
        sweep_generation(model, [0], [4], [2], hardware="h100-sxm")
    with pytest.raises(ValueError, match="unknown hardware|no hardware"):
        sweep_generation(model, [1], [4], [2], hardware="no-such-part")
    with pytest.raises(TypeError, match="pass inputs="):
        sweep_generation(model, [1], [4], [2], hardware="h100-sxm")


def test_meta_sweep_of_a_plain_module() -> None:
    with torch.device("meta"):
        model = Decoder()

    def inputs(batch: int, tokens: int, cached: int) -> dict[str, Any]:
        empty = [(torch.empty(batch, cached, 32, device="meta"),) * 2 for _ in range(2)]
        return {"x": torch.empty(batch, tokens, 32, device="meta"), "cache": empty}

    sweep = sweep_generation(model, [1], [5, 9], [4], hardware="h100-sxm", inputs=inputs,
                             kv_cache=lambda kwargs, out: kwargs["cache"])
    # decode over a cache of L = prompt + 1 tokens, attending over L + 1: per layer 4 Linear 2*32*32 = 8192 and
    # the two attention matmuls 2 x 2*32*(L + 1); two layers: prompt 5 (L + 1 = 7) 18176, prompt 9 (11) 19200
    flops = [sweep.decode[(1, p + 1)].with_convention("flop_counter").total_flops for p in (5, 9)]
    assert flops == [2 * (8192 + 128 * 7), 2 * (8192 + 128 * 11)] == [18176, 19200]
    # 512 bytes per token (as measured above), at the end: prompt + generated - 1 tokens, 8 and 12
    assert [p.kv_cache_bytes for p in sweep.points] == [512 * 8, 512 * 12]


# --------------------------------------------------------------------------- drop-in and command line


def test_get_model_profile_generate_sums_every_step(hf: Any, capsys: pytest.CaptureFixture[str]) -> None:
    model = tiny_gpt2(hf)
    inputs = prompt(batch=1, length=4)
    kwargs = {**GREEDY, "attention_mask": inputs["attention_mask"]}
    gp = profile_generate(model, inputs["input_ids"], baseline=False, **kwargs)
    flops, macs, params = get_model_profile(model, args=[inputs["input_ids"]], kwargs=kwargs, mode="generate",
                                            warm_up=1, as_string=False, module_depth=1)
    assert flops == sum(s.flops for s in gp.steps) and macs == sum(s.macs for s in gp.steps)
    assert params == sum(p.numel() for p in model.parameters())
    out = capsys.readouterr().out
    assert "1 prefill + 3 decode" in out and "The whole generation (every step summed)" in out
    # input_shape builds token ids (ones); kwargs are generate's options; ignore_modules, as DeepSpeed's,
    # leaves the totals as they are (an ignored module's own work is its caller's)
    ones = torch.ones(1, 4, dtype=torch.long)
    flops_ones = sum(s.flops for s in profile_generate(model, ones, baseline=False, **GREEDY).steps)
    assert get_model_profile(model, input_shape=(1, 4), kwargs=GREEDY, mode="generate", warm_up=0,
                             print_profile=False, as_string=False)[0] == flops_ones
    ignored = get_model_profile(model, input_shape=(1, 4), kwargs=GREEDY, mode="generate", warm_up=0,
                                print_profile=False, as_string=False, ignore_modules=[nn.LayerNorm])
    assert ignored[0] == flops_ones
    with pytest.raises(ValueError, match="mode must be 'forward' or 'generate'"):
        get_model_profile(model, args=[inputs["input_ids"]], mode="backward")
    with pytest.raises(ValueError, match="calls model.generate\\(\\), which it does not have"):
        get_model_profile(Decoder(), input_shape=(1, 2), mode="generate")
    assert_clean(model)


def test_cli_generate_and_sweep(hf: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hf.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, vocab_size=100, max_position_embeddings=128,
                   architectures=["LlamaForCausalLM"]).save_pretrained(tmp_path)
    config = str(tmp_path / "config.json")
    assert main([config, "--generate", "3", "--tokens", "2,4", "--hardware", "h100-sxm", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["new_tokens"] == 3 and [s["tokens_in"] for s in doc["steps"]] == [4, 1, 1]
    # the cache holds the prompt and the tokens fed back (the last one made is never fed): 4 + 2
    assert doc["summary"]["kv_cache_bytes"] == 2 * 2 * 2 * 16 * 6 * 2 * 4 and doc["prediction"]["hardware"] == "h100-sxm"
    assert main([config, "--meta", "--generate", "4", "--sweep", "batch=1,2", "prompt=4,8", "--hardware",
                 "h100-sxm"]) == 0
    out = capsys.readouterr().out
    assert "4 points from 4 prefill and 4 decode graphs" in out
    for argv, message in (([config, "--generate", "2", "--sweep", "batch=1", "--hardware", "l4"], "add --meta"),
                          ([config, "--meta", "--generate", "2"], "drop --meta"),
                          ([config, "--meta", "--generate", "2", "--sweep", "batch=1"], "give --hardware"),
                          ([config, "--meta", "--generate", "2", "--sweep", "size=1", "--hardware", "l4"],
                           "bad --sweep"),
                          ([config, "--generate", "0"], "--generate must be >= 1"),
                          (["unet", "--generate", "2"], "--generate needs a causal LM: the zoo's gpt2 or llama")):
        assert main(argv) == 2
        assert message in capsys.readouterr().err
    # a config.json naming no architectures builds the base model, which cannot generate: the error names the class
    bare = tmp_path / "bare"
    hf.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, vocab_size=100, max_position_embeddings=128).save_pretrained(bare)
    assert main([str(bare / "config.json"), "--generate", "2", "--tokens", "1,4"]) == 2
    assert "LlamaModel has no generate(); build its causal LM with --model-class LlamaForCausalLM" in (
        capsys.readouterr().err)
    assert hardware.get("h100-sxm").memory_bandwidth == 3.35e12  # the figure the hand derivation above uses


def test_sweep_table_rates_keep_three_digits() -> None:
    # 4 new tokens x batch 2 in 0.5333 s = 15.0 tokens/s, printed "15.0" beside "10.9", never "15"
    point = {"batch": 2, "prompt": 8, "generated": 4, "decode_context": 9, "prefill_flops": 1, "decode_flops": 1,
             "ttft_ms": 1.0, "tpot_ms": 1.0, "decode_tokens_per_s": 10.9, "tokens_per_s": 8 / 0.5333333333,
             "decode_memory_bound_share": 1.0, "weights_bytes": 1, "kv_cache_bytes": 1, "activation_bytes": 1,
             "fits": True}
    cells = sweep_table([point]).splitlines()[-1].split()
    assert "15.0" in cells and "10.9" in cells and "15" not in cells
    point.update(decode_tokens_per_s=99.96, tokens_per_s=1953.4)  # 3 digits would read "100." : a whole number
    cells = sweep_table([point]).splitlines()[-1].split()
    assert "100" in cells and "1,953" in cells


def test_the_cache_is_found_under_either_transformers_name(hf: Any) -> None:
    from torch_flops.kvcache import cache_argument, found_cache

    cache = hf.DynamicCache()
    # transformers 5.24 calls it ``cache`` (argument and output field), earlier versions ``past_key_values``;
    # Mamba's state is ``cache_params``
    assert found_cache({"cache": cache}) is cache and found_cache({"past_key_values": cache}) is cache
    assert found_cache({"cache_params": cache, "logits": None}) is cache
    legacy = ((torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4)),)
    assert found_cache({"cache": legacy}) is legacy
    # under the generic name only what looks like a cache counts: a user's output may hold anything there
    assert found_cache({"cache": "a note"}) is None and found_cache(torch.zeros(2)) is None

    class New(nn.Module):
        def forward(self, x: torch.Tensor, cache: Any = None) -> torch.Tensor:
            return x

    class Old(nn.Module):
        def forward(self, x: torch.Tensor, past_key_values: Any = None) -> torch.Tensor:
            return x

    assert cache_argument(New()) == "cache" and cache_argument(Old()) == "past_key_values"


def test_a_kv_cache_callable_that_fails_is_named_in_one_warning(hf: Any) -> None:
    model = tiny_gpt2(hf)
    inputs = prompt()
    plain = model.generate(**inputs, max_new_tokens=3, do_sample=False, pad_token_id=0)

    def broken() -> Any:
        raise LookupError("no cache here")

    for reader, said in ((broken, "your kv_cache callable raised LookupError: no cache here"),
                         (lambda: "junk", "cannot read a KV cache from a str")):
        with pytest.warns(UserWarning, match="the KV cache could not be read") as caught:
            gp = profile_generate(model, inputs["input_ids"], attention_mask=inputs["attention_mask"],
                                  max_new_tokens=3, do_sample=False, pad_token_id=0, kv_cache=reader, baseline=False)
        text = [str(w.message) for w in caught if "KV cache" in str(w.message)]
        assert len(text) == 1 and said in text[0] and "pass kv_cache=" not in text[0]
        assert torch.equal(gp.output, plain)  # the generation itself as without the profiler
        assert gp.kv_cache_bytes == [None, None, None]


def test_a_draft_model_called_in_the_loop_leaves_the_target_s_steps_whole() -> None:
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(16, 16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.lin(x)
            return torch.softmax(h @ h.transpose(-1, -2), -1) @ h

    torch.manual_seed(0)
    target, draft = Block().eval(), Block().eval()  # the draft: a model with submodules, not profiled
    x = torch.randn(1, 4, 16)

    def loop() -> None:
        with torch.no_grad():
            for _ in range(3):
                draft(x)  # (its calls end outside the target: the profiler steps aside twice in a row)
                target(x)

    gp = profile_generate(target, loop=loop)
    # each target call: Linear 4x16x16 = 1024 MACs, h @ h^T 4x16x4 = 256, P @ h 4x4x16 = 256 -> 2 x 1536
    assert [p.total_flops for p in gp.with_convention("flop_counter").profiles] == [3072] * 3
    with FlopCounterMode(display=False) as mode, torch.no_grad():
        target(x)
    assert mode.get_total_flops() == 3072
    assert installed() == {"threads": 0, "recordings": 0, "global_hooks": 0}


def test_continuing_from_a_cache_counts_its_tokens_in_the_context(hf: Any) -> None:
    model = tiny_llama(hf)
    ids = prompt(1, 5)["input_ids"]
    first = model.generate(ids, return_dict_in_generate=True, **GREEDY)  # 5 + 4 tokens, 8 of them cached
    more = torch.cat([first.sequences, torch.tensor([[7, 8]])], 1)  # 11 tokens fed, 8 already in the cache
    gp = profile_generate(model, more, past_key_values=first.past_key_values, baseline=False, **GREEDY)
    # the first call attends over the 8 cached + 3 new tokens; each later one adds its token
    assert [s.context_length for s in gp.steps] == [11, 12, 13, 14]
    # KV: 2 (K, V) x 2 layers x 2 KV heads x 16 head dim x 4 B = 512 B per token, batch 1
    assert gp.kv_cache_bytes == [512 * n for n in (11, 12, 13, 14)] and gp.kv_cache_matches_formula


def test_an_encoder_decoder_s_kv_cache_per_token_leaves_the_cross_attention_out(hf: Any) -> None:
    config = hf.BartConfig(vocab_size=64, d_model=32, encoder_layers=1, decoder_layers=2, encoder_attention_heads=4,
                           decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)
    torch.manual_seed(0)
    model = hf.BartForConditionalGeneration(config).eval()
    ids = torch.randint(3, 64, (1, 6), generator=torch.Generator().manual_seed(0))
    gp = profile_generate(model, ids, baseline=False, max_new_tokens=4, min_new_tokens=4, do_sample=False)
    # self-attention: 2 (K, V) x 2 layers x 4 heads x 8 head dim x 4 B = 512 B per decoder token; the
    # cross-attention's keys of the 6 encoder tokens (6 x 512 B) are fixed, not per token
    assert gp.kv_bytes_per_token == 512
    steps = gp.kv_cache_bytes
    assert [b - a for a, b in itertools.pairwise(steps)] == [512] * (len(steps) - 1)
    # the formula (self-attention alone) does not describe this cache: not checked, not "differs"
    assert gp.kv_cache_matches_formula is None


def test_assisted_decoding_is_said_and_runs_once(hf: Any) -> None:
    model = tiny_llama(hf)
    config = hf.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                            num_key_value_heads=2, vocab_size=100, max_position_embeddings=64,
                            attn_implementation="eager")
    torch.manual_seed(1)
    assistant = hf.LlamaForCausalLM(config).eval()
    assistant.generation_config.num_assistant_tokens_schedule = "heuristic"  # adapted by each generate call
    before = assistant.generation_config.num_assistant_tokens
    plain = model.generate(prompt(1, 5)["input_ids"], assistant_model=assistant, **GREEDY)
    adapted = assistant.generation_config.num_assistant_tokens
    assistant.generation_config.num_assistant_tokens = before
    gp = profile_generate(model, prompt(1, 5)["input_ids"], assistant_model=assistant, **GREEDY)
    assert torch.equal(gp.output, plain)
    assert gp.baseline is None  # a second generate would adapt the assistant twice
    assert assistant.generation_config.num_assistant_tokens == adapted
    assert any(n.startswith("assisted decoding: the steps are LlamaForCausalLM's forwards") for n in gp.notes)


def test_the_whole_generation_s_summary_claims_no_one_call_throughput(hf: Any) -> None:
    gp = profile_generate(tiny_gpt2(hf), prompt(1, 5)["input_ids"], baseline=False, **GREEDY)
    from torch_flops import report

    summary = report.summary_text(gp.total)  # every step merged: batch x prompt / summed node times is no rate
    assert "Throughput:  - (a generation's steps summed: see its tokens/s)" in summary
    assert report.model_summary(gp.total).tokens_per_s is None and gp.tokens_per_s is not None


@torch.library.custom_op("torch_flops_generation_test::twice", mutates_args=())
def _twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def test_an_op_without_a_formula_is_warned_about_once_for_the_whole_generation() -> None:
    # three calls (a prefill and two decode steps) each run the op: one UnsupportedOpWarning, at the
    # user's profile_generate line, as propagate warns once per target
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return _twice(self.l(x))

    model = Twice()

    def loop() -> list[torch.Tensor]:
        return [model(torch.randn(1, 8)) for _ in range(3)]

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        gp = profile_generate(model, loop=loop)
    unsupported = [w for w in seen if issubclass(w.category, UnsupportedOpWarning)]
    assert len(unsupported) == 1 and "torch_flops_generation_test.twice" in str(unsupported[0].message)
    assert unsupported[0].filename == __file__
    assert len(gp.decode) == 2


def test_a_step_s_activations_are_the_tensors_it_made_not_the_cache_it_read() -> None:
    # each call: new = cat(cache, x) along the tokens, returned with new.sum(1). float32, width 16: a
    # token is 64 B. Prefill, 4 tokens into an empty cache: new 256 B + its sum 64 = 320. Decode steps, one
    # token into a cache of 4 and 5: new 320 / 384 B + 64 = 384 / 448. The input x and the cache read were
    # made before the step (the cache is the KV cache's figure), and counted in the activations before
    class Cat(nn.Module):
        def forward(self, x: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            new = torch.cat([cache, x], 1)
            return new.sum(1), new

    model = Cat()
    held = [torch.zeros(1, 0, 16)]

    def loop() -> torch.Tensor:
        x = torch.randn(1, 4, 16)
        for _ in range(3):
            out, held[0] = model(x, held[0])
            x = out[:, None]
        return held[0]

    gp = profile_generate(model, loop=loop, kv_cache=lambda: held[0])
    assert [s.activation_bytes for s in gp.steps] == [320, 384, 448]
    # the whole peak, with them: at the cat, x + cache + new: 256 + 0 + 256, 64 + 256 + 320, 64 + 320 + 384
    assert [p.max_memory for p in gp.profiles] == [512, 640, 768]


def test_a_recurrent_state_kept_on_the_model_s_modules_is_in_the_cache_bytes() -> None:
    # RecurrentGemma keeps its recurrent layers' state on its modules (recurrent_states, conv1d_state), its
    # cache layers for them hold nothing. Batch 2, float32; 2 recurrent layers of lru_width 32: the LRU
    # state 2 x 32 x 4 B = 256, the conv state 2 x 32 x (conv width 4 - 1) x 4 B = 768: 2 x 1024 = 2048 B;
    # the attention layer (1 KV head of 8) after the prompt of 6: 2 x 2 x 6 x 8 x 4 B = 768. Prefill:
    # 2816 (768 alone before). Decode steps: keys and values + 128 B a token, and each conv state a view of
    # its 2 x 32 x 4 concatenation, whose 1024 B storage it keeps alive (+256 a layer): 896 + 2560, 1024 + 2560
    T = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = T.RecurrentGemmaForCausalLM(T.RecurrentGemmaConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=1, lru_width=32, attention_window_size=8, head_dim=8,
        block_types=["recurrent", "attention"])).eval()
    ids = torch.randint(1, 128, (2, 6), generator=torch.Generator().manual_seed(1))
    gp = profile_generate(model, ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, min_new_tokens=3,
                          do_sample=False, pad_token_id=0, baseline=False)
    assert gp.kv_cache_bytes == [2816, 3456, 3584]
    assert gp.kv_cache[0].layer_bytes == (1024, 768, 1024) and gp.kv_cache[0].recurrent_layers == 2


@pytest.mark.parametrize("adapters", [False, True])
def test_a_module_held_state_goes_to_its_own_decoder_layer_s_cache_entry(adapters: bool) -> None:
    # each of 2 layers keeps conv_state (1, 1, 32) float32 = 128 B beside its keys and values, (1, T, 32) each:
    # 256 T B. After 4 tokens: 1024 + 128 = 1152 per layer; after 5: 1280 + 128 = 1408. Another list of two
    # modules (adapters) made the states layers of their own: (1024, 1024, 128, 128)
    width = 32

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q = nn.Linear(width, width)
            self.conv_state: torch.Tensor | None = None

        def forward(self, x: torch.Tensor, kv: Any) -> tuple[torch.Tensor, Any]:
            h = self.q(x)
            self.conv_state = h[:, -1:].clone()
            return h, (torch.cat([kv[0], h], 1), torch.cat([kv[1], h], 1))

    class Decoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            if adapters:
                self.adapters = nn.ModuleList([nn.Identity(), nn.Identity()])
            self.layers = nn.ModuleList([Layer(), Layer()])

        def forward(self, x: torch.Tensor, cache: list[Any]) -> torch.Tensor:
            for i, layer in enumerate(self.layers):
                x, cache[i] = layer(x, cache[i])
            return x

    model = Decoder().eval()
    cache = [(torch.zeros(1, 0, width), torch.zeros(1, 0, width)) for _ in range(2)]

    def loop() -> torch.Tensor:
        x = torch.randn(1, 4, width)
        with torch.no_grad():
            for _ in range(2):
                x = model(x, cache)[:, -1:]
        return x

    gp = profile_generate(model, loop=loop, kv_cache=lambda: cache)
    assert [s.layer_bytes for s in gp.kv_cache] == [(1152, 1152), (1408, 1408)]

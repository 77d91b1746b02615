"""The zoo's decoders with a KV cache: ``zoo.generate`` (greedy, one prefill then one call per token),
checked against decoding without a cache; profiled by ``profile_generate`` step by step against
FlopCounterMode and the KV formula; ``torch-flops gpt2/llama --generate`` and its meta sweep."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from torch_flops import profile_generate, sweep_generation, zoo
from torch_flops.cli import main


def _gpt2() -> zoo.GPT2:
    torch.manual_seed(0)
    return zoo.gpt2(n_layer=2, n_embd=64, n_head=4, vocab_size=1000).eval()


def _llama() -> zoo.Llama:  # grouped-query attention: 4 query heads share 2 KV heads
    torch.manual_seed(0)
    return zoo.llama(num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, intermediate_size=128,
                     vocab_size=1000).eval()


def _ids(batch: int = 2, tokens: int = 7) -> torch.Tensor:
    return torch.randint(0, 1000, (batch, tokens), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("build", [_gpt2, _llama])
def test_cached_decoding_equals_decoding_without_a_cache(build: Any) -> None:
    model, ids = build(), _ids()
    out = zoo.generate(model, ids, 5)
    expected = ids
    with torch.no_grad():  # the reference: the whole sequence again at every step, no cache
        for _ in range(5):
            expected = torch.cat([expected, model(expected)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, expected)
    # several tokens over a cache (the masked path): the logits of one call over all of them
    cache = zoo.KVCache()
    with torch.no_grad():
        chunks = torch.cat([model(ids[:, :4], cache=cache), model(ids[:, 4:], cache=cache)], dim=1)
        torch.testing.assert_close(chunks, model(ids), rtol=1e-5, atol=1e-5)
    assert cache.length == 7 and len(cache.layers) == 2
    with torch.no_grad():  # the logits of the last position only (a decode loop's), from the same forward
        last = model(ids, logits_to_keep=1)
        torch.testing.assert_close(last, model(ids)[:, -1:], rtol=1e-5, atol=1e-5)
    # the LM head's work for 1 position instead of 7: 2 sequences x (7 - 1) x 64 x 1000 MACs fewer
    with FlopCounterMode(display=False) as full, torch.no_grad():
        model(ids)
    with FlopCounterMode(display=False) as kept, torch.no_grad():
        model(ids, logits_to_keep=1)
    assert full.get_total_flops() - kept.get_total_flops() == 2 * 2 * 6 * 64 * 1000
    with pytest.raises(ValueError, match="logits_to_keep must be an int >= 1 or None, got 0"):
        model(ids, logits_to_keep=0)


@pytest.mark.parametrize("build", [_gpt2, _llama])
def test_profiled_steps_against_flop_counter_mode_and_the_kv_formula(build: Any) -> None:
    model, ids = build(), _ids()
    cache = zoo.KVCache()
    gp = profile_generate(model, loop=lambda: zoo.generate(model, ids, 5, cache=cache), kv_cache=lambda: cache,
                          max_new_tokens=5)
    assert torch.equal(gp.output, zoo.generate(model, ids, 5))
    # the reference: FlopCounterMode over each call of the same loop, run again by hand
    expected, reference = [], zoo.KVCache()
    with torch.no_grad():
        step_ids = ids
        for _ in range(5):
            with FlopCounterMode(display=False) as counter:
                logits = model(step_ids, cache=reference, logits_to_keep=1)
            expected.append(counter.get_total_flops())
            step_ids = logits[:, -1:].argmax(-1)
    assert [p.with_convention("flop_counter").total_flops for p in gp.profiles] == expected
    # each decode step attends over one more key (FlopCounterMode leaves CPU's flash attention kernel
    # out; torch_flops counts it): per layer batch 2 x 4 query heads = 8 more scores, each with 16 MACs
    # in QK^T and 16 in PV and 6 FLOPs of scale and softmax: 2 layers x 8 x (2 x 32 + 6) = 1120
    decode = [p.total_flops for p in gp.decode]
    assert [b - a for a, b in itertools.pairwise(decode)] == [1120, 1120, 1120]
    # KV bytes after each step: 2 (K, V) x 2 layers x kv_heads x 16 head dim x tokens x batch 2 x 4 bytes,
    # tokens = 7 after the prefill, one more per decode step; kv_heads 4 (GPT-2), 2 (Llama, GQA)
    kv_heads = 4 if isinstance(model, zoo.GPT2) else 2
    assert gp.kv_cache_bytes == [2 * 2 * kv_heads * 16 * t * 2 * 4 for t in range(7, 12)]
    assert gp.kv_cache_matches_formula is True


def test_refusals() -> None:
    model, ids = _gpt2(), _ids()
    with pytest.raises(TypeError, match="cache must be a torch_flops.zoo.KVCache, got list"):
        model(ids, cache=[])
    full = zoo.KVCache()
    with torch.no_grad():
        model(ids, cache=full)
    with pytest.raises(ValueError, match="starts from an empty cache; this one holds 7 tokens"):
        zoo.generate(model, ids, 2, cache=full)
    with pytest.raises(ValueError, match="max_new_tokens must be an int >= 1, got 0"):
        zoo.generate(model, ids, 0)


def test_meta_sweep_of_a_zoo_decoder() -> None:
    with torch.device("meta"):
        model = zoo.llama(num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, intermediate_size=128,
                          vocab_size=1000)
    sweep = sweep_generation(model, [1, 2], [8], [4, 12], hardware="h100-sxm", inputs=zoo.generation_inputs(model))
    decode = {(p.batch, p.decode_context): p.decode_flops for p in sweep.points}
    # generated 4 -> the decode step at context 8 + (4 - 2) // 2 + 1 = 10; generated 12 -> 8 + 5 + 1 = 14
    assert sorted(decode) == [(1, 10), (1, 14), (2, 10), (2, 14)]
    assert decode[(1, 14)] > decode[(1, 10)] and decode[(2, 14)] > decode[(2, 10)]
    # the KV cache at the end, 8 + 12 - 1 = 19 tokens (the last one is never fed back):
    # 2 x 2 layers x 2 KV heads x 16 x 19 x batch x 4 bytes
    assert [p.kv_cache_bytes for p in sweep.points if p.generated == 12] == [2 * 2 * 2 * 16 * 19 * b * 4
                                                                            for b in (1, 2)]


def test_cli_generates_with_a_zoo_decoder(capsys: pytest.CaptureFixture[str]) -> None:
    # the zoo's default Llama: 4 layers, 2 KV heads of 256 / 8 = 32
    assert main(["llama", "--generate", "3", "--tokens", "2,4", "--format", "json", "--hardware", "h100-sxm"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [s["tokens_in"] for s in doc["steps"]] == [4, 1, 1]
    # the cache holds the prompt and the tokens fed back: 4 + 2 = 6 tokens; 2 x 4 x 2 x 32 x 6 x 2 x 4 bytes
    assert doc["summary"]["kv_cache_bytes"] == 2 * 4 * 2 * 32 * 6 * 2 * 4 and doc["summary"]["kv_cache_differs"] == []
    assert doc["prediction"]["hardware"] == "h100-sxm"
    assert main(["llama", "--meta", "--generate", "4", "--sweep", "batch=1,2", "prompt=4,8", "--hardware",
                 "h100-sxm"]) == 0
    assert "4 points from 4 prefill and 4 decode graphs" in capsys.readouterr().out


def test_cli_hardware_prices_generation_in_every_format_that_shows_it(capsys: pytest.CaptureFixture[str]) -> None:
    # a --sweep is priced on --hardware whatever the format; a run in every format but csv
    assert main(["gpt2", "--meta", "--generate", "4", "--sweep", "batch=1,2", "prompt=8", "--hardware", "l4",
                 "--format", "csv"]) == 0
    rows = capsys.readouterr().out.strip().splitlines()
    assert rows[0].startswith("batch,prompt,generated,decode_context,") and len(rows) == 3
    assert main(["llama", "--generate", "2", "--tokens", "1,4", "--hardware", "l4", "--format", "markdown"]) == 0
    assert "**Predicted on l4**" in capsys.readouterr().out
    assert main(["llama", "--generate", "2", "--tokens", "1,4", "--hardware", "l4", "--format", "csv"]) == 2
    assert "--format csv holds the measured steps only" in capsys.readouterr().err


def test_cli_generation_in_flop_counter_convention_and_refusals(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["llama", "--generate", "2", "--tokens", "1,4", "--convention", "flop_counter", "--format",
                 "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    expected, cache = [], zoo.KVCache()  # FlopCounterMode over the same two calls of the zoo's default Llama
    model = zoo.llama().eval()
    with torch.no_grad():
        for ids in (torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 1, dtype=torch.long)):
            with FlopCounterMode(display=False) as counter:
                model(ids, cache=cache, logits_to_keep=1)
            expected.append(counter.get_total_flops())
    assert [s["flops"] for s in doc["steps"]] == expected
    assert doc["summary"]["prefill_flops"] == expected[0]
    for option in (["--repeat", "3"], ["--warmup", "2"], ["--tracer", "fx"], ["--top", "5"], ["--roofline"],
                   ["--group-by", "module", "--format", "table"]):
        assert main(["llama", "--generate", "2", "--tokens", "1,4", *option]) == 2
        assert f"{option[0]} does not apply to --generate" in capsys.readouterr().err
    assert main(["llama", "--meta", "--generate", "2", "--sweep", "batch=1", "--hardware", "l4", "--convention",
                 "flop_counter"]) == 2
    assert "--sweep prices the torch_flops count of every point" in capsys.readouterr().err

"""What profiling ``generate`` costs, and how long a 70B-shaped meta sweep takes.

1. A GPT-2-small-shaped model (transformers ``GPT2Config()``: 12 layers, 768 wide, random weights,
   float32, CPU), prompt 128, 32 new tokens, greedy: ``model.generate`` plain and under
   :func:`torch_flops.profile_generate` (``baseline=False``: one run), interleaved in one process,
   medians. Two ratios: the profiled ``generate`` call alone (the recording's cost while the model
   runs) and the whole ``profile_generate`` call (the per-step profiles built afterwards included).
2. cProfile of one profiled run: where the time goes.
3. ``sweep_generation`` of a Llama-2-70B shape on the meta device: batch {1, 8, 64} x prompt
   {128, 2048} x generated {128, 512} = 12 points, on h100-sxm.

    python benchmarks/bench_generate.py [--reps 5] [--new-tokens 32] [--prompt 128] [--skip-sweep]

Prints, never asserts.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import time

import torch

from torch_flops import profile_generate, sweep_generation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--skip-sweep", action="store_true")
    parser.add_argument("--skip-cprofile", action="store_true")
    args = parser.parse_args()
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).eval()
    ids = torch.randint(0, 50257, (1, args.prompt), generator=torch.Generator().manual_seed(0))
    kwargs = {"attention_mask": torch.ones_like(ids), "max_new_tokens": args.new_tokens,
              "min_new_tokens": args.new_tokens, "do_sample": False, "pad_token_id": 50256}

    def plain() -> torch.Tensor:
        return model.generate(ids, **kwargs)

    expected = plain()  # warm up both paths (allocator, transformers' first-call set-up, lazy imports)
    gp = profile_generate(model, ids, baseline=False, **kwargs)
    assert torch.equal(gp.output, expected)
    plain_s, recorded_s, whole_s = [], [], []
    for _ in range(args.reps):
        start = time.perf_counter()
        plain()
        plain_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        gp = profile_generate(model, ids, baseline=False, **kwargs)
        whole_s.append(time.perf_counter() - start)
        assert gp.timing is not None
        recorded_s.append(gp.timing.total_ms / 1e3)
    base = statistics.median(plain_s)
    print(f"GPT-2 small (124 M params, float32, CPU, {torch.get_num_threads()} threads), prompt {args.prompt}, "
          f"{args.new_tokens} new tokens, {args.reps} interleaved repetitions, medians:")
    print(f"  generate, plain:                      {base * 1e3:8.1f} ms")
    print(f"  generate, recorded (profiled run):    {statistics.median(recorded_s) * 1e3:8.1f} ms   "
          f"ratio {statistics.median(recorded_s) / base:.2f}x")
    print(f"  profile_generate (+ building the {len(gp.steps)} step profiles): {statistics.median(whole_s) * 1e3:8.1f} ms"
          f"   ratio {statistics.median(whole_s) / base:.2f}x")
    nodes = [len(p.records) for p in gp.profiles]
    print(f"  nodes recorded: prefill {nodes[0]}, decode step {nodes[1]} (x {len(nodes) - 1}); "
          f"prefill {gp.prefill.total_flops / 1e9:.1f} GFLOPs, decode {gp.decode_flops_per_token / 1e6:.0f} MFLOPs/token")

    if not args.skip_cprofile:
        profiler = cProfile.Profile()
        profiler.enable()
        profile_generate(model, ids, baseline=False, **kwargs)
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(18)
        print("\ncProfile of one profile_generate call, by own time:")
        print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:6000])

    if not args.skip_sweep:
        config = LlamaConfig(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
                             num_key_value_heads=8, vocab_size=32000, max_position_embeddings=4096)
        start = time.perf_counter()
        sweep = sweep_generation(config, [1, 8, 64], [128, 2048], [128, 512], hardware="h100-sxm")
        elapsed = time.perf_counter() - start
        print(f"\nLlama-2-70B shape on meta, {len(sweep.points)} points ({len(sweep.prefill)} prefill + "
              f"{len(sweep.decode)} decode graphs recorded): {elapsed:.1f} s")


if __name__ == "__main__":
    main()

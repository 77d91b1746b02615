"""Profile a Llama-2-70B-shaped decoder on the meta device (no weights, no compute) and print the
cost of the profile itself: trace time, propagate time, total wall time and peak RSS, next to the
total FLOPs and an analytic estimate. Repeats at 40 and 160 layers to show linear growth.

    python benchmarks/bench_meta_llm.py            # 40, 80 and 160 layers, 1 x 2048 tokens
    python benchmarks/bench_meta_llm.py --layers 80

Then, when transformers is installed, the same shape as a transformers LlamaForCausalLM (80 layers,
meta, 1 x 2048 tokens, its default config, use_cache on): torch_flops' default front end (a new
counter each call, the model as it runs, with its records) against FlopCounterMode over the same
eager meta forward, interleaved in one process, model construction excluded (target: at most
FlopCounterMode's time). And forward +
loss + backward of the 80-layer shape on the default front end against its forward alone, in one
process (target: at most 3x).

Each depth runs in a fresh subprocess so its peak RSS is its own. "total s" is build + trace +
propagate; "process s" is the whole subprocess, Python start-up and imports included.
Prints, never asserts.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def analytic_flops(layers: int, hidden: int, heads: int, kv_heads: int, inter: int, vocab: int,
                   tokens: int) -> int:
    """2 x non-embedding matmul parameters x tokens + attention (Kaplan et al. 2020, sec. 2.1).

    Non-embedding matmul params per layer: q, o = H*H each; k, v = H*(kv_heads*head_dim) each;
    MLP (gate, up, down) = 3*H*I. The LM head (V*H) is a matmul too; the embedding lookup is not.
    Attention: Q K^T and P V are 2 * tokens^2 * H MACs per layer (full, uncausal matrix).
    """
    head_dim = hidden // heads
    per_layer = 2 * hidden * hidden + 2 * hidden * kv_heads * head_dim + 3 * hidden * inter
    matmul_params = layers * per_layer + vocab * hidden
    attention_macs = layers * 2 * tokens * tokens * hidden
    return 2 * matmul_params * tokens + 2 * attention_macs


def run_one(layers: int, tokens: int) -> dict[str, float]:
    import torch

    from torch_flops import TorchFLOPsByFX, zoo

    t0 = time.perf_counter()
    config = zoo.llama2_70b_config()
    config.num_layers = layers
    with torch.device("meta"):
        model = zoo.llama(config).eval()
    ids = zoo.llama_example_inputs(batch_size=1, device="meta", seq_len=tokens)
    t1 = time.perf_counter()
    counter = TorchFLOPsByFX(model, tracer="fx")
    t2 = time.perf_counter()
    counter.propagate(*ids)
    _ = counter.records  # the records are assembled on first access: count that too
    t3 = time.perf_counter()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    estimate = analytic_flops(layers, config.hidden_size, config.num_heads, config.num_kv_heads,
                              config.intermediate_size, config.vocab_size, tokens)
    return {
        "layers": layers, "build_s": t1 - t0, "trace_s": t2 - t1, "propagate_s": t3 - t2, "total_s": t3 - t0,
        "peak_rss_mb": rss_mb, "flops": counter.total_flops, "macs": counter.total_macs,
        "analytic_flops": estimate, "nodes": len(counter.records),
        "max_live_gib": (counter.max_memory or 0) / 2**30, "unsupported": sum(counter.unsupported.values()),
    }


def run_transformers(layers: int, tokens: int, runs: int) -> dict[str, float]:
    """The transformers model on meta with its default config (use_cache on), like for like in one
    process, interleaved: its eager forward, FlopCounterMode over that eager forward, and
    torch_flops' default front end (a new counter each call, with its records); medians."""
    import statistics

    import torch
    import transformers
    from torch.utils.flop_counter import FlopCounterMode

    from torch_flops import TorchFLOPsByFX

    transformers.logging.set_verbosity_error()
    config = transformers.LlamaConfig(hidden_size=8192, intermediate_size=28672, num_hidden_layers=layers,
                                      num_attention_heads=64, num_key_value_heads=8, vocab_size=32000,
                                      max_position_embeddings=4096)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.empty(1, tokens, dtype=torch.long, device="meta")
    found: dict[str, float] = {}

    def eager() -> None:
        model(input_ids=ids)

    def flop_counter() -> None:
        with FlopCounterMode(display=False) as mode:
            model(input_ids=ids)
        found["fcm_flops"] = mode.get_total_flops()

    def torch_flops() -> None:
        counter = TorchFLOPsByFX(model)
        counter.propagate(input_ids=ids)
        _ = counter.records
        found["ours_flops"] = counter.profile.with_convention("flop_counter").total_flops
        found["nodes"] = len(counter.records)

    paths = {"eager": eager, "flop_counter": flop_counter, "torch_flops": torch_flops}
    times: dict[str, list[float]] = {name: [] for name in paths}
    with torch.no_grad():
        for fn in paths.values():
            fn()
        for _ in range(runs):
            for name, fn in paths.items():
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    return {**{name: statistics.median(v) for name, v in times.items()}, **found,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_training(layers: int, tokens: int) -> dict[str, float]:
    """The zoo's 70B shape on meta, default front end: forward-only propagate, then forward +
    loss + backward (``propagate(..., loss_fn=...)``), each with its records, in one process."""
    import torch

    from torch_flops import TorchFLOPsByFX, zoo

    config = zoo.llama2_70b_config()
    config.num_layers = layers
    with torch.device("meta"):
        model = zoo.llama(config)
    ids = zoo.llama_example_inputs(batch_size=1, device="meta", seq_len=tokens)
    start = time.perf_counter()
    forward = TorchFLOPsByFX(model)
    forward.propagate(*ids)
    _ = forward.records
    middle = time.perf_counter()
    step = TorchFLOPsByFX(model)
    step.propagate(*ids, loss_fn=lambda logits: logits.float().sum())
    _ = step.records
    end = time.perf_counter()
    return {"forward_s": middle - start, "step_s": end - middle, "forward_macs": forward.total_macs,
            "backward_macs": step.total_backward_macs, "saved_gib": step.profile.total_saved_bytes / 2**30,
            "unsupported": len(step.profile.backward["unsupported"]),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def compare_training(layers: int, tokens: int) -> None:
    out = subprocess.run([sys.executable, __file__, "--child-train", "--layers", str(layers), "--tokens", str(tokens)],
                         check=True, capture_output=True, text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    print(f"forward + backward, Llama-2-70B shape, {layers} layers, meta, 1 x {tokens} tokens (tracer='auto', with "
          "records):")
    print(f"  forward only {r['forward_s']:.2f} s; forward + loss + backward {r['step_s']:.2f} s: ratio "
          f"{r['step_s'] / r['forward_s']:.2f} (target <= 3); peak RSS {r['peak_rss_mb']:.0f} MB")
    print(f"  backward MACs {r['backward_macs'] / 1e12:.2f} T = {r['backward_macs'] / r['forward_macs']:.3f} x the "
          f"forward's (dX and dW of every matmul); saved for backward "
          f"{r['saved_gib']:.1f} GiB; backward ops without a formula: {r['unsupported']}")


def compare_transformers(layers: int, tokens: int, runs: int = 3) -> None:
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("transformers comparison: transformers is not installed")
        return
    out = subprocess.run([sys.executable, __file__, "--child-hf", "--layers", str(layers), "--tokens", str(tokens),
                          "--runs", str(runs)], check=True, capture_output=True, text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    print(f"transformers LlamaForCausalLM, {layers} layers, meta, 1 x {tokens} tokens, default config (use_cache on), "
          f"medians of {runs} interleaved calls in one process:")
    print(f"  eager forward {r['eager']:.2f} s; FlopCounterMode over it {r['flop_counter']:.2f} s; torch_flops "
          f"(tracer='auto', a new counter, with its {int(r['nodes'])} records) {r['torch_flops']:.2f} s")
    print(f"  torch_flops / FlopCounterMode = {r['torch_flops'] / r['flop_counter']:.2f} (target <= 1); overheads "
          f"over the eager forward: {r['torch_flops'] - r['eager']:.2f} s vs {r['flop_counter'] - r['eager']:.2f} s; "
          f"counts equal: {r['ours_flops'] == r['fcm_flops']} ({r['fcm_flops'] / 1e12:.2f} TFLOPs); peak RSS "
          f"{r['peak_rss_mb']:.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="*", default=[40, 80, 160])
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-hf", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--runs", type=int, default=3, help="interleaved calls of the transformers comparison")
    parser.add_argument("--child-train", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-training", action="store_true", help="skip the forward + backward comparison")
    parser.add_argument("--no-transformers", action="store_true", help="skip the transformers comparison")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_one(args.layers[0], args.tokens)))
        return
    if args.child_train:
        print(json.dumps(run_training(args.layers[0], args.tokens)))
        return
    if args.child_hf:
        print(json.dumps(run_transformers(args.layers[0], args.tokens, args.runs)))
        return
    print(f"Llama-2-70B shape on meta, 1 x {args.tokens} tokens (hidden 8192, 64 heads, 8 KV heads, "
          "intermediate 28672, vocab 32000)")
    header = (f"{'layers':>6} {'nodes':>6} {'trace s':>8} {'propagate s':>12} {'total s':>8} {'process s':>10} "
              f"{'peak RSS MB':>12} "
              f"{'TFLOPs':>9} {'analytic TFLOPs':>16} {'2*MACs/analytic':>16}")
    print(header)
    rows = []
    for layers in args.layers:
        started = time.perf_counter()
        out = subprocess.run([sys.executable, __file__, "--child", "--layers", str(layers), "--tokens",
                              str(args.tokens)], check=True, capture_output=True, text=True).stdout
        process_s = time.perf_counter() - started  # with Python start-up and `import torch`
        r = json.loads(out.strip().splitlines()[-1])
        rows.append(r)
        print(f"{r['layers']:>6} {r['nodes']:>6} {r['trace_s']:>8.2f} {r['propagate_s']:>12.2f} {r['total_s']:>8.2f} "
              f"{process_s:>10.2f} {r['peak_rss_mb']:>12.0f} {r['flops'] / 1e12:>9.2f} {r['analytic_flops'] / 1e12:>16.2f} "
              f"{2 * r['macs'] / r['analytic_flops']:>16.4f}")
    if len(rows) > 1:
        # trace + propagate is the profiler's own work; building the model is torch's
        base = rows[0]
        base_s = base["trace_s"] + base["propagate_s"]
        for r in rows[1:]:
            print(f"{r['layers']}/{base['layers']} layers: depth x{r['layers'] / base['layers']:.2f}, nodes "
                  f"x{r['nodes'] / base['nodes']:.2f}, trace+propagate time x{(r['trace_s'] + r['propagate_s']) / base_s:.2f}")
    if not args.no_training:
        compare_training(80, args.tokens)
    if not args.no_transformers:
        compare_transformers(80, args.tokens)


if __name__ == "__main__":
    main()

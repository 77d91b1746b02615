"""The roofline model against measured time, and its prediction for a model no GPU here can hold
(prints, never asserts).

(a) any machine: Llama-2-70B (bf16) prefill of 1 x 2048 tokens on the meta device, predicted on
    several parts: total, memory-bound share, the split between the decoder blocks' matmuls,
    attention and the rest, and the cost of the profile and of the roofline themselves;
(b) CUDA only: ResNet-50 (batch 64) and a GPT-2-small-shaped model (batch 8, 512 tokens), both
    bf16, timed per node (CUDA events, median of --repeat runs) next to the roofline of the
    device they ran on: measured / predicted in total, the distribution of % of roofline
    (weighted by measured time), the share of time in nodes below 10% of roofline, and the top
    nodes by lost time (measured - roofline).

    python benchmarks/bench_roofline.py [--repeat 10] [--hardware NAME]

``--hardware`` names the spec for (b) when the device is not in the table; without CUDA, (b) says
so and the script exits 0.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

from torch_flops import TorchFLOPsByFX, hardware, report, zoo
from torch_flops.roofline import Roofline

PARTS = ("h100-sxm", "h200", "a100-sxm-80gb", "mi300x", "b200", "l4")


def llama70b_prefill(tokens: int) -> None:
    config = zoo.llama2_70b_config()
    t0 = time.perf_counter()
    with torch.device("meta"):
        model = zoo.llama(config).to(torch.bfloat16).eval()
    (ids,) = zoo.llama_example_inputs(batch_size=1, device="meta", seq_len=tokens)
    counter = TorchFLOPsByFX(model)
    counter.propagate(ids)
    t1 = time.perf_counter()
    lines = {}
    for part in PARTS:
        start = time.perf_counter()
        lines[part] = counter.roofline(part)
        cost = time.perf_counter() - start
    print(f"(a) Llama-2-70B bf16 prefill, 1 x {tokens} tokens, meta: {counter.total_flops / 1e12:.1f} TFLOPs, "
          f"{len(counter.records)} nodes; build + trace + propagate {t1 - t0:.2f} s, one roofline {cost * 1e3:.0f} ms")
    print(f"    {'part':<15} {'predicted':>10} {'memory-bound':>13} {'matmuls':>9} {'attention':>10} {'other':>7}"
          f" {'TFLOP/s':>8}")
    for part, line in lines.items():
        split = _split(line)
        total = line.total_roofline_ms
        print(f"    {part:<15} {report.format_time_ms(total):>10} {100 * line.memory_bound_share:>12.1f}% "
              f"{100 * split['matmul'] / total:>8.1f}% {100 * split['attention'] / total:>9.1f}% "
              f"{100 * split['other'] / total:>6.1f}% {counter.total_flops / total / 1e9:>8.0f}")


def _split(line: Roofline) -> dict[str, float]:
    """Roofline time (ms) of the Linear layers, of attention (the scaled_dot_product_attention node
    or the matmuls/softmax of an explicit one), and of everything else."""
    split = {"matmul": 0.0, "attention": 0.0, "other": 0.0}
    for r in line.nodes:
        if r.target == "Linear":
            split["matmul"] += r.roofline_time_ms
        elif "attention" in r.target or ".attn" in r.module_path and r.target in ("torch.matmul", "softmax"):
            split["attention"] += r.roofline_time_ms
        else:
            split["other"] += r.roofline_time_ms
    return split


def measured_vs_predicted(name: str, model: torch.nn.Module, inputs: tuple[Any, ...], spec: Any,
                          repeat: int) -> None:
    counter = TorchFLOPsByFX(model, warmup=2, repeat=repeat)
    with torch.no_grad():
        counter.propagate(*inputs)
    line = counter.roofline(spec)
    rows = [r for r in line.nodes if r.time_ms is not None and r.time_ms > 0]
    measured = sum(r.time_ms for r in rows)  # type: ignore[misc]
    predicted = sum(r.roofline_time_ms for r in rows)
    weighted = sorted((r.pct_of_roofline or 0.0, r.time_ms) for r in rows)
    print(f"(b) {name} on {spec.name}: {len(rows)} timed nodes, measured {measured:.3f} ms, roofline {predicted:.3f} "
          f"ms: measured / roofline = {measured / predicted:.2f} (roofline is a lower bound: >= 1)")
    print(f"    % of roofline, weighted by measured time: p10 {_quantile(weighted, 0.1):.1f}%, median "
          f"{_quantile(weighted, 0.5):.1f}%, p90 {_quantile(weighted, 0.9):.1f}%")
    low = sum(t for pct, t in weighted if pct < 10)
    print(f"    time in nodes below 10% of roofline: {100 * low / measured:.1f}% (launch-bound small ops); "
          f"memory-bound share of the roofline {100 * line.memory_bound_share:.1f}%; "
          f"unweighted median {statistics.median(p for p, _ in weighted):.1f}%")
    print("    top nodes by lost time:")
    for r in line.ranked(8):
        print(f"      {r.name:<32} {r.target:<28} {r.bound or '-':<8} roofline {report.format_time_ms(r.roofline_time_ms):>9}"
              f"  measured {report.format_time_ms(r.time_ms):>9}  {r.pct_of_roofline or 0:6.1f}%  "
              f"lost {report.format_time_ms(r.lost_time_ms):>9}")


def _quantile(weighted: list[tuple[float, float]], q: float) -> float:
    """The value below which a share ``q`` of the total weight lies (``weighted`` sorted by value)."""
    total = sum(w for _, w in weighted)
    running = 0.0
    for value, w in weighted:
        running += w
        if running >= q * total:
            return value
    return weighted[-1][0] if weighted else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--hardware", default=None, help="spec for (b) when the CUDA device is not in the table")
    args = parser.parse_args()
    llama70b_prefill(args.tokens)
    if not torch.cuda.is_available():
        print("(b) no CUDA device here: measured vs predicted needs a GPU")
        return
    device = torch.device("cuda")
    try:
        spec = hardware.get(args.hardware) if args.hardware else hardware.detect(device)
    except ValueError as e:
        print(f"(b) {e}")
        return
    print(f"(b) device: {torch.cuda.get_device_name(device)} -> {spec.name}")
    resnet = zoo.resnet50().to(device, torch.bfloat16).eval()
    images = torch.randn(64, 3, 224, 224, device=device, dtype=torch.bfloat16)
    measured_vs_predicted("ResNet-50 bf16, batch 64", resnet, (images,), spec, args.repeat)
    del resnet, images
    gpt2 = zoo.gpt2().to(device, torch.bfloat16).eval()
    (ids,) = zoo.gpt2_example_inputs(batch_size=8, device=device, seq_len=512)
    measured_vs_predicted("GPT-2 small bf16, 8 x 512 tokens", gpt2, (ids,), spec, args.repeat)


if __name__ == "__main__":
    main()

"""What profiling a training step costs, and how much of the step the per-node times cover: a
GPT-2-small step (forward, cross entropy, backward, AdamW) on CPU, timed plain and under
``TrainingProfiler``, interleaved in one process; then, for the profiled steps, the forward,
backward and optimizer node times summed against the step's wall time.

    python benchmarks/bench_training.py [--steps 5] [--seq 128] [--model gpt2]

On a CUDA machine add ``--device cuda`` (CUDA events per node, one synchronise per step).
Prints, never asserts.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from torch_flops import TrainingProfiler, zoo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt2", choices=("gpt2", "llama"))
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.manual_seed(0)
    device = torch.device(args.device)
    entry = zoo.get(args.model)
    model = entry.build().to(device)
    ids = torch.randint(0, 1000, (1, args.seq), device=device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        logits = model(ids)
        F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1)).backward()
        optimizer.step()
        optimizer.zero_grad()

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    step()  # warm up both paths (allocator, optimizer state)
    plain, profiled = [], []
    prof = TrainingProfiler(model, optimizer)
    for _ in range(args.steps):
        sync()
        start = time.perf_counter()
        step()
        sync()
        plain.append(time.perf_counter() - start)
        prof.start_profile()
        start = time.perf_counter()
        step()
        sync()
        profiled.append(time.perf_counter() - start)
        prof.stop_profile()
    p, q = statistics.median(plain), statistics.median(profiled)
    print(f"{args.model} training step (1 x {args.seq} tokens, cross entropy, AdamW) on {device}, median of "
          f"{args.steps} interleaved steps:")
    print(f"  plain {p * 1e3:.1f} ms; under TrainingProfiler {q * 1e3:.1f} ms: x{q / p:.2f}")
    last = prof.profiles[-1]
    forward = last.total_time_ms or 0.0
    backward = last.total_backward_time_ms or 0.0
    optimizer_ms = sum(r.time_ms or 0.0 for r in last.records if r.phase == "optimizer")
    wall = prof._durations[-1]
    print(f"  last profiled step: forward nodes {forward:.1f} ms + backward ops {backward:.1f} ms + optimizer "
          f"{optimizer_ms:.1f} ms = {forward + backward + optimizer_ms:.1f} ms of {wall:.1f} ms wall "
          f"({(forward + backward + optimizer_ms) / wall * 100:.0f}%)")
    print(f"  step FLOPs {prof.profiles[-1].total_flops / 1e9:.2f} G forward + "
          f"{last.total_backward_flops / 1e9:.2f} G backward; MFU on a 1 TFLOP/s peak: "
          f"{prof.get_mfu(1e12) * 100:.1f}%")


if __name__ == "__main__":
    main()

"""What profiling costs: time per node of a deep model of tiny ops, run (a) eagerly, (b) through a
bare ``torch.fx.Interpreter`` and (c) through ``TorchFLOPsByFX.propagate`` (FLOPs, time and memory
recorded), medians over several runs in one process; then ``propagate`` / eager for ResNet-50.

    python benchmarks/bench_overhead.py [--blocks 500] [--runs 15]

Target: (c)/(b) <= 1.2. ``propagate`` measures every node (time, FLOPs, the storages behind each
value); the NodeRecord objects and the live-memory timeline are assembled on first access, so (d)
adds that cost. Prints, never asserts.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import fx, nn

from torch_flops import TorchFLOPsByFX, zoo


class TinyBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)) + 1


def median_seconds(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=500)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--resnet-runs", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)

    model = nn.Sequential(*[TinyBlock() for _ in range(args.blocks)]).eval()
    x = torch.randn(1, 16)
    gm = fx.symbolic_trace(model)
    counter = TorchFLOPsByFX(model)
    nodes = len(gm.graph.nodes)
    def propagate_and_read() -> None:
        counter.propagate(x)
        _ = counter.records  # assemble the NodeRecords and the live-memory timeline

    with torch.no_grad():
        for _ in range(2):  # warm caches of all paths
            model(x)
            fx.Interpreter(gm).run(x)
            propagate_and_read()
        # Interleave the paths so that machine noise (this VM's clock drifts) hits them alike.
        eager, bare, prof, full = [], [], [], []
        for _ in range(args.runs):
            eager.append(median_seconds(lambda: model(x), 1))
            bare.append(median_seconds(lambda: fx.Interpreter(gm).run(x), 1))
            prof.append(median_seconds(lambda: counter.propagate(x), 1))
            full.append(median_seconds(propagate_and_read, 1))
    e, b, p, f = (statistics.median(v) / nodes * 1e6 for v in (eager, bare, prof, full))
    print(f"{args.blocks} x [Linear(16,16), relu, +1], batch 1: {nodes} graph nodes, median of {args.runs} runs")
    print(f"  (a) eager forward           {e:8.2f} us/node")
    print(f"  (b) bare fx.Interpreter     {b:8.2f} us/node")
    print(f"  (c) propagate()             {p:8.2f} us/node   (FLOPs {counter.total_flops:,}, "
          f"max live {counter.max_memory:,} B)")
    print(f"  (d) propagate() + records   {f:8.2f} us/node   (first access assembles the records and replays "
          "live memory)")
    print(f"  (c)/(b) = {p / b:.3f}   (target <= 1.2)    (d)/(b) = {f / b:.3f}    (c)/(a) = {p / e:.3f}")

    resnet = zoo.resnet50().eval()
    images = zoo.resnet50_example_inputs(batch_size=8)
    resnet_counter = TorchFLOPsByFX(resnet)
    with torch.no_grad():
        resnet(*images)
        resnet_counter.propagate(*images)
        eager_s, prof_s = [], []
        for _ in range(args.resnet_runs):
            eager_s.append(median_seconds(lambda: resnet(*images), 1))
            prof_s.append(median_seconds(lambda: resnet_counter.propagate(*images), 1))
    re, rp = statistics.median(eager_s), statistics.median(prof_s)
    print(f"ResNet-50, batch 8, 224x224: eager {re * 1e3:.1f} ms, propagate {rp * 1e3:.1f} ms, "
          f"propagate/eager = {rp / re:.3f} (median of {args.resnet_runs})")


if __name__ == "__main__":
    main()

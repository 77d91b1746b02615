"""What profiling costs: time per node of a deep model of tiny ops, run (a) eagerly, (b) through a
bare ``torch.fx.Interpreter`` (built per run, and (b') one reused), (c) through
``TorchFLOPsByFX(tracer="fx").propagate`` (FLOPs, time and memory of every node measured) and (d)
``propagate`` plus reading ``counter.records`` and the totals; (e) the default front end, which
records the model as it runs (``tracer="auto"``), with its records; medians over interleaved runs
in one process, repeated in rounds to show the spread; then ``propagate`` / eager for ResNet-50
on both front ends.

    python benchmarks/bench_overhead.py [--blocks 500] [--runs 15] [--rounds 5]

Target: (d)/(b) <= 1.1 (the interpreter's overhead). (e) builds a new graph of 1502 tiny nodes
on every call: its cost per node is what the tiny-op model shows at its worst; real models'
nodes are large (see bench_capture.py). Prints, never asserts.
"""

from __future__ import annotations

import argparse
import gc
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
    parser.add_argument("--runs", type=int, default=15, help="interleaved runs per round (medians)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, for the spread of the ratios")
    parser.add_argument("--resnet-runs", type=int, default=3, help="0 leaves ResNet-50 out")
    args = parser.parse_args()
    torch.manual_seed(0)

    model = nn.Sequential(*[TinyBlock() for _ in range(args.blocks)]).eval()
    x = torch.randn(1, 16)
    gm = fx.symbolic_trace(model)
    counter = TorchFLOPsByFX(model, tracer="fx")
    eager_counter = TorchFLOPsByFX(model)
    reused = fx.Interpreter(gm)
    nodes = len(gm.graph.nodes)

    def propagate_and_read() -> None:
        counter.propagate(x)
        _ = (counter.records, counter.total_flops, counter.total_macs, counter.total_time_ms, counter.max_memory)

    paths = {
        "eager": lambda: model(x),
        "bare": lambda: fx.Interpreter(gm).run(x),
        "bare_reused": lambda: reused.run(x),
        "propagate": lambda: counter.propagate(x),
        "full": propagate_and_read,
    }
    rounds: list[dict[str, float]] = []
    with torch.no_grad():
        for fn in paths.values():  # warm caches of all paths
            fn()
            fn()
        for _ in range(args.rounds):
            # Interleave the paths so that machine noise (this VM's clock drifts) hits them alike.
            samples: dict[str, list[float]] = {name: [] for name in paths}
            for _ in range(args.runs):
                for name, fn in paths.items():
                    samples[name].append(median_seconds(fn, 1))
            rounds.append({name: statistics.median(v) / nodes * 1e6 for name, v in samples.items()})
    # (e) apart, after the rounds: each call leaves a graph of 1502 nodes (reference cycles) for the
    # garbage collector, which would otherwise run inside the other paths' samples
    gc.collect()
    with torch.no_grad():
        eager_full = median_seconds(lambda: (eager_counter.propagate(x), eager_counter.records), args.runs)
    gc.collect()
    last = rounds[len(rounds) // 2]
    last["eager_full"] = eager_full / nodes * 1e6
    c_b = sorted(r["propagate"] / r["bare"] for r in rounds)
    d_b = sorted(r["full"] / r["bare"] for r in rounds)
    d_b2 = sorted(r["full"] / r["bare_reused"] for r in rounds)
    print(f"{args.blocks} x [Linear(16,16), relu, +1], batch 1: {nodes} graph nodes; {args.rounds} rounds of "
          f"{args.runs} interleaved runs (medians); the middle round:")
    print(f"  (a) eager forward                 {last['eager']:8.2f} us/node")
    print(f"  (b) bare fx.Interpreter           {last['bare']:8.2f} us/node   (built for each run, as "
          "fx.Interpreter(gm).run(x))")
    print(f"  (b') bare fx.Interpreter, reused  {last['bare_reused']:8.2f} us/node")
    print(f"  (c) propagate()                   {last['propagate']:8.2f} us/node   (FLOPs {counter.total_flops:,}, "
          f"max live {counter.max_memory:,} B)")
    print(f"  (d) propagate() + records, totals {last['full']:8.2f} us/node   (records assembled on first access)")
    print(f"  (e) tracer='auto' (eager), records {last['eager_full']:8.2f} us/node   (the graph recorded on every call; "
          f"FLOPs {eager_counter.total_flops:,})")
    print(f"  (c)/(b) = {statistics.median(c_b):.3f} [{c_b[0]:.3f} .. {c_b[-1]:.3f}]   "
          f"(d)/(b) = {statistics.median(d_b):.3f} [{d_b[0]:.3f} .. {d_b[-1]:.3f}] (target <= 1.1)   "
          f"(d)/(b') = {statistics.median(d_b2):.3f} [{d_b2[0]:.3f} .. {d_b2[-1]:.3f}]   "
          f"(c)/(a) = {last['propagate'] / last['eager']:.3f}   (e)/(a) = {last['eager_full'] / last['eager']:.2f}")
    compare_peers(model, x, args.runs, args.rounds)
    if args.resnet_runs > 0:
        compare_resnet(args.resnet_runs)


def compare_peers(model: nn.Module, x: torch.Tensor, runs: int, rounds: int) -> None:
    """The default front end (tracer="auto": the model run as it is, recorded) against the counters
    that also follow an eager call: torch's FlopCounterMode (a dispatch mode and module tracker,
    FLOPs only) and, when installed, ptflops' aten backend (a dispatch mode counting FLOPs, no time
    or memory). One thread; rounds of interleaved calls; medians per node."""
    from torch.utils.flop_counter import FlopCounterMode

    try:
        from ptflops import get_model_complexity_info
    except ImportError:
        get_model_complexity_info = None
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    counter = TorchFLOPsByFX(model)

    def flop_counter() -> None:
        with FlopCounterMode(display=False) as mode:
            model(x)
        mode.get_total_flops()

    def ours_new() -> None:
        c = TorchFLOPsByFX(model)
        c.propagate(x)
        _ = c.total_flops

    paths: dict[str, Callable[[], object]] = {
        "eager": lambda: model(x),
        "flop_counter": flop_counter,
        "ours": lambda: counter.propagate(x),
        "ours_records": lambda: (counter.propagate(x), counter.records, counter.total_flops),
        "ours_new_counter": ours_new,
    }
    if get_model_complexity_info is not None:
        paths["ptflops_aten"] = lambda: get_model_complexity_info(
            model, tuple(x.shape), input_constructor=lambda _: {"input": x}, backend="aten",
            print_per_layer_stat=False, as_strings=False, verbose=False)
    nodes = 3 * len(model)
    per_round: list[dict[str, float]] = []
    try:
        with torch.no_grad():
            for fn in paths.values():
                fn()
            for _ in range(rounds):
                samples: dict[str, list[float]] = {name: [] for name in paths}
                for _ in range(runs):
                    for name, fn in paths.items():
                        samples[name].append(median_seconds(fn, 1))
                per_round.append({name: statistics.median(v) / nodes * 1e6 for name, v in samples.items()})
                gc.collect()
    finally:
        torch.set_num_threads(threads)
    mid = per_round[len(per_round) // 2]

    def ratio(a: str, b: str) -> str:
        values = sorted(r[a] / r[b] for r in per_round)
        return f"{statistics.median(values):.2f} [{values[0]:.2f} .. {values[-1]:.2f}]"

    print(f"Following the eager call, 1 thread, {nodes} nodes ({rounds} rounds of {runs} interleaved calls), "
          "us per node in the middle round:")
    for name in paths:
        print(f"  {name:18s} {mid[name]:8.2f}")
    print(f"  default front end / FlopCounterMode: propagate {ratio('ours', 'flop_counter')}, with its records "
          f"{ratio('ours_records', 'flop_counter')}, a new counter each call {ratio('ours_new_counter', 'flop_counter')}"
          " (target <= 1)")
    if "ptflops_aten" in paths:
        print(f"  default front end / ptflops' aten counter: {ratio('ours', 'ptflops_aten')} (aim: <= 2)")
    else:
        print("  (ptflops is not installed: pip install ptflops to compare with its aten counter)")


def compare_resnet(runs: int) -> None:
    """propagate + records over eager on ResNet-50 at batch 8, both front ends."""
    resnet = zoo.resnet50().eval()
    images = zoo.resnet50_example_inputs(batch_size=8)
    fx_counter, auto_counter = TorchFLOPsByFX(resnet, tracer="fx"), TorchFLOPsByFX(resnet)
    with torch.no_grad():
        resnet(*images)
        fx_counter.propagate(*images)
        auto_counter.propagate(*images)
        eager_s, fx_s, auto_s = [], [], []
        for _ in range(runs):
            eager_s.append(median_seconds(lambda: resnet(*images), 1))
            fx_s.append(median_seconds(lambda: (fx_counter.propagate(*images), fx_counter.records), 1))
            auto_s.append(median_seconds(lambda: (auto_counter.propagate(*images), auto_counter.records), 1))
    re, rf, ra = statistics.median(eager_s), statistics.median(fx_s), statistics.median(auto_s)
    print(f"ResNet-50, batch 8, 224x224: eager {re * 1e3:.1f} ms; propagate + records: fx {rf * 1e3:.1f} ms "
          f"({rf / re:.3f}x), auto/eager front end {ra * 1e3:.1f} ms ({ra / re:.3f}x) (median of {runs})")


if __name__ == "__main__":
    main()

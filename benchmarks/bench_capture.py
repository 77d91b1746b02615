"""What a user feels the first time: a new counter's first ``propagate`` plus reading its records,
against one eager forward of the same model, side by side in one process (medians of --runs,
each with a new counter), with FlopCounterMode's eager run as the peer. transformers models built
from their default configs (BERT-base at 128 tokens, GPT-2 small at 256), batch 1, CPU, no grad.

    python benchmarks/bench_capture.py [--runs 5]

Target: torch_flops / eager <= 1.5 (peers: 1.1-1.2). Prints, never asserts; skips without
transformers.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from torch_flops import TorchFLOPsByFX


def interleaved(fns: list[Callable[[], Any]], runs: int) -> list[float]:
    """The median seconds of each function, run in turn (a, b, c, a, b, c, ...): a slow patch of
    the machine slows all of them, not one."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(runs):
        for fn, column in zip(fns, times):
            start = time.perf_counter()
            fn()
            column.append(time.perf_counter() - start)
    return [statistics.median(column) for column in times]


def first_call(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> int:
    counter = TorchFLOPsByFX(model)  # a new counter: nothing captured or cached yet
    counter.propagate(**inputs)
    _ = counter.records
    return counter.total_macs


def flop_counter(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> int:
    with FlopCounterMode(display=False) as mode:
        model(**inputs)
    return int(mode.get_total_flops())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    try:
        import transformers
    except ImportError:
        print("bench_capture: transformers is not installed")
        return
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    cases = {
        "BERT-base, 1 x 128 tokens": (transformers.BertModel(transformers.BertConfig()),
                                      {"input_ids": torch.randint(0, 30000, (1, 128))}),
        "GPT-2 small, 1 x 256 tokens": (transformers.GPT2LMHeadModel(transformers.GPT2Config()),
                                        {"input_ids": torch.randint(0, 50000, (1, 256))}),
    }
    print(f"first propagate of a new counter + its records, vs one eager forward (median of {args.runs}, interleaved, CPU, "
          f"{torch.get_num_threads()} threads)")
    with torch.no_grad():
        for name, (model, inputs) in cases.items():
            model.eval()
            model(**inputs)  # warm: allocator, kernels, and torch's dispatch-mode machinery for both tools
            flop_counter(model, inputs)
            first_call(model, inputs)
            eager, ours, peer = interleaved([lambda m=model, x=inputs: m(**x),
                                             lambda m=model, x=inputs: first_call(m, x),
                                             lambda m=model, x=inputs: flop_counter(m, x)], args.runs)
            macs = first_call(model, inputs)
            print(f"  {name}: eager {eager * 1e3:.1f} ms; torch_flops {ours * 1e3:.1f} ms = {ours / eager:.2f}x "
                  f"(target <= 1.5); FlopCounterMode {peer * 1e3:.1f} ms = {peer / eager:.2f}x; "
                  f"2*MACs {2 * macs / 1e9:.2f} G, FlopCounterMode {flop_counter(model, inputs) / 1e9:.2f} G")


if __name__ == "__main__":
    main()

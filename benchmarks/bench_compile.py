"""Compiled vs eager, and what profiling the compiled model costs: for each model, on CPU,

* the eager call and the ``torch.compile`` d call (medians), and the compile time (first call);
* the compiled call plain and under the region profiler (``torch.profiler`` with our call markers,
  as ``torch_flops.profile_compiled`` times it), interleaved in blocks in one process, medians:
  the per-call overhead (target: <= 1.3x), and the fixed cost of one ``profile_compiled`` beyond
  its calls (compiling our private copy, reading the profiler's events, building the records).

    python benchmarks/bench_compile.py [--models mlp,gpt2-tiny,gpt2-test-size] [--calls 20] [--rounds 5] [--threads 1]

``--threads 1`` (the default) keeps Inductor's OpenMP kernels off a second core that other
processes may hold (on a shared 2-core machine a parallel region waits for a scheduler slot,
which swamps microsecond kernels). Prints, never asserts.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import torch_flops
from torch_flops.compiled import mark, profile_compiled


def _mlp() -> tuple[nn.Module, tuple[Any, ...]]:
    layers: list[nn.Module] = []
    for _ in range(4):
        layers += [nn.Linear(1024, 1024), nn.GELU(), nn.LayerNorm(1024)]
    return nn.Sequential(*layers).eval(), (torch.randn(64, 1024),)


def _gpt2_tiny() -> tuple[nn.Module, tuple[Any, ...]]:
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=512, n_positions=128)).eval()
    return model, (torch.randint(0, 512, (4, 64)),)


def _gpt2_test_size() -> tuple[nn.Module, tuple[Any, ...]]:
    """The GPT-2 config of tests/test_compiled.py: microsecond kernels, the profiler's worst case."""
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=32)).eval()
    return model, (torch.randint(0, 64, (2, 8)),)


MODELS: dict[str, Callable[[], tuple[nn.Module, tuple[Any, ...]]]] = {
    "mlp": _mlp, "gpt2-tiny": _gpt2_tiny, "gpt2-test-size": _gpt2_test_size}


def _median_ms(fn: Callable[[], Any], calls: int) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        fn()
        times.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(times)


def bench(name: str, calls: int, rounds: int) -> None:
    torch.manual_seed(0)
    model, args = MODELS[name]()
    with torch.no_grad():
        compiled = torch.compile(model)
        start = time.perf_counter()
        compiled(*args)
        compile_s = time.perf_counter() - start
        for _ in range(3):
            compiled(*args)
            model(*args)
        eager_ms = statistics.median(_median_ms(lambda: model(*args), calls) for _ in range(rounds))
        plain, profiled = [], []
        for _ in range(rounds):  # interleaved blocks: plain calls, then calls under the profiler
            plain.append(_median_ms(lambda: compiled(*args), calls))
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
                def marked() -> None:
                    with mark("torch_flops.compiled.forward"):  # the marker profile_compiled puts around a call
                        compiled(*args)
                profiled.append(_median_ms(marked, calls))
    p, q = statistics.median(plain), statistics.median(profiled)
    print(f"{name}: eager {eager_ms:.3f} ms, compiled {p:.3f} ms per call (x{eager_ms / p:.2f} faster); "
          f"first call (compile) {compile_s:.1f} s")
    print(f"  compiled call under the region profiler {q:.3f} ms: x{q / p:.2f} the plain compiled call "
          f"(median of {rounds} interleaved blocks of {calls} calls; target <= 1.3)")
    start = time.perf_counter()
    result = profile_compiled(model, *args, warmup=1, repeat=calls)
    total = time.perf_counter() - start
    own = result.compile_s + (1 + 2 * calls) * (result.call_ms or 0) / 1e3
    kernels = sum(1 for r in result.profile.records if r.op in ("kernel", "extern_kernel"))
    eager = torch_flops.profile(model, *args)
    print(f"  profile_compiled: {total:.1f} s in all, of which {result.compile_s:.1f} s compiling its private copy "
          f"and ~{total - own:.2f} s reading events and building {kernels} region records; regions' FLOPs "
          f"{result.profile.total_flops} vs eager's {eager.total_flops}; in it: plain {result.call_ms:.3f} ms, "
          f"profiled {result.profiled_call_ms:.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,gpt2-tiny,gpt2-test-size")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    options = parser.parse_args()
    if options.threads > 0:
        torch.set_num_threads(options.threads)
    print(f"torch {torch.__version__}, CPU, {torch.get_num_threads()} thread(s)")
    for name in options.models.split(","):
        bench(name.strip(), options.calls, options.rounds)


if __name__ == "__main__":
    main()

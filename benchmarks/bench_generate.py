"""What profiling ``generate`` costs, and how long a 70B-shaped meta sweep takes.

1. A GPT-2-small-shaped model (transformers ``GPT2Config()``: 12 layers, 768 wide, random weights,
   float32, CPU), prompt 128, 32 new tokens, greedy: ``model.generate`` plain and under
   :func:`torch_flops.profile_generate` (``baseline=False``: one run), interleaved in one process,
   medians. Two ratios: the profiled ``generate`` call alone (the recording's cost while the model
   runs) and the whole ``profile_generate`` call (the per-step profiles built afterwards included).
   Beside them, the floor of following the model op by op from Python: the same ``generate`` with
   only an empty ``TorchFunctionMode`` on while the model runs (taken off inside the modules the
   recording keeps whole, as the recording does) and a pair of do-nothing global module hooks:
   what any per-op recorder in Python pays before it records anything. And the peer: the same
   ``generate`` under ``torch.utils.flop_counter.FlopCounterMode`` (FLOPs only: no times, bytes,
   memory or graph), what the reference counter costs on the same call.
2. cProfile of one profiled run: where the time goes.
3. ``sweep_generation`` of a Llama-2-70B shape on the meta device: batch {1, 8, 64} x prompt
   {128, 2048} x generated {128, 512} = 12 points, on h100-sxm.

    python benchmarks/bench_generate.py [--reps 5] [--new-tokens 32] [--prompt 128] [--skip-sweep]
                                        [--device cuda] [--dtype bfloat16]

With ``--device cuda`` part 1 runs on the GPU (each timing ends with a synchronise) and also prints
the measured TTFT and time per output token next to the roofline's prediction for the device.

Prints, never asserts.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import pstats
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from torch_flops import profile_generate, sweep_generation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--skip-sweep", action="store_true")
    parser.add_argument("--skip-cprofile", action="store_true")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: nothing to measure")
        return
    dtype = getattr(torch, args.dtype)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).to(device, dtype).eval()
    ids = torch.randint(0, 50257, (1, args.prompt), generator=torch.Generator().manual_seed(0)).to(device)
    kwargs = {"attention_mask": torch.ones_like(ids), "max_new_tokens": args.new_tokens,
              "min_new_tokens": args.new_tokens, "do_sample": False, "pad_token_id": 50256}

    def plain() -> torch.Tensor:
        out = model.generate(ids, **kwargs)
        sync()
        return out

    floor = _interception_floor(model)

    def counted() -> torch.Tensor:
        with FlopCounterMode(display=False):
            out = model.generate(ids, **kwargs)
        sync()
        return out

    def intercepted() -> torch.Tensor:
        with floor():
            out = model.generate(ids, **kwargs)
        sync()
        return out

    expected = plain()  # warm up both paths (allocator, transformers' first-call set-up, lazy imports)
    gp = profile_generate(model, ids, baseline=False, **kwargs)
    assert torch.equal(gp.output, expected)
    intercepted()
    counted()
    plain_s, recorded_s, whole_s, floor_s, peer_s = [], [], [], [], []
    for _ in range(args.reps):
        start = time.perf_counter()
        plain()
        plain_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        intercepted()
        floor_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        counted()
        peer_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        gp = profile_generate(model, ids, baseline=False, **kwargs)
        whole_s.append(time.perf_counter() - start)
        assert gp.timing is not None
        recorded_s.append(gp.timing.total_ms / 1e3)
    base = statistics.median(plain_s)
    where = f"{torch.cuda.get_device_name(device)}" if device.type == "cuda" else \
        f"CPU, {torch.get_num_threads()} threads"
    print(f"GPT-2 small (124 M params, {args.dtype}, {where}), prompt {args.prompt}, "
          f"{args.new_tokens} new tokens, {args.reps} interleaved repetitions, medians:")
    print(f"  generate, plain:                      {base * 1e3:8.1f} ms")
    print(f"  generate, intercepted only (floor):   {statistics.median(floor_s) * 1e3:8.1f} ms   "
          f"ratio {statistics.median(floor_s) / base:.2f}x")
    print(f"  generate, recorded (profiled run):    {statistics.median(recorded_s) * 1e3:8.1f} ms   "
          f"ratio {statistics.median(recorded_s) / base:.2f}x")
    print(f"  generate under FlopCounterMode (peer): {statistics.median(peer_s) * 1e3:8.1f} ms   "
          f"ratio {statistics.median(peer_s) / base:.2f}x")
    print(f"  profile_generate (+ building the {len(gp.steps)} step profiles): {statistics.median(whole_s) * 1e3:8.1f} ms"
          f"   ratio {statistics.median(whole_s) / base:.2f}x")
    nodes = [len(p.records) for p in gp.profiles]
    print(f"  nodes recorded: prefill {nodes[0]}, decode step {nodes[1]} (x {len(nodes) - 1}); "
          f"prefill {gp.prefill.total_flops / 1e9:.1f} GFLOPs, decode {gp.decode_flops_per_token / 1e6:.0f} MFLOPs/token")

    if device.type == "cuda":
        measured = profile_generate(model, ids, **kwargs)  # with the baseline: the unprofiled run's times
        name = torch.cuda.get_device_name(device)
        from torch_flops import hardware

        try:
            spec = hardware.spec_for_device_name(name)
        except ValueError:
            spec = hardware.get("h100-sxm")
        predicted = measured.predict(spec)
        base = measured.baseline
        print(f"  measured without the profiler: TTFT {base.ttft_ms:.2f} ms, TPOT {base.tpot_ms:.2f} ms; "
              f"roofline on {spec.name}: TTFT {predicted.ttft_ms:.3f} ms, TPOT {predicted.tpot_ms:.3f} ms "
              f"(measured / predicted: {base.ttft_ms / predicted.ttft_ms:.1f}x, {base.tpot_ms / predicted.tpot_ms:.1f}x)")

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


def _interception_floor(model: torch.nn.Module) -> Callable[[], contextlib.AbstractContextManager[None]]:
    """A context in which ``model``'s calls run under an empty function mode (off inside the
    modules a recording keeps whole) and two do-nothing global module hooks: the cost of being
    called back for every torch function and module call, with nothing recorded."""
    from torch.nn.modules import module as module_hooks
    from torch.overrides import TorchFunctionMode

    from torch_flops.capture import ModelIndex
    from torch_flops.formulas import FORMULAS

    leaves = ModelIndex(model, FORMULAS.copy()).leaves

    class Empty(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            return func(*args, **(kwargs or {}))

    state: dict[str, Any] = {"mode": None, "leaf": None}

    def pre(module: torch.nn.Module, inputs: Any) -> None:
        if module is model:
            state["mode"] = Empty()
            state["mode"].__enter__()
        elif state["mode"] is not None and state["leaf"] is None and id(module) in leaves:
            state["leaf"] = module
            torch._C._pop_torch_function_stack()

    def post(module: torch.nn.Module, inputs: Any, output: Any) -> None:
        if module is model and state["mode"] is not None:
            state["mode"].__exit__(None, None, None)
            state["mode"] = None
        elif module is state["leaf"]:
            state["leaf"] = None
            torch._C._push_on_torch_function_stack(state["mode"])

    @contextlib.contextmanager
    def installed() -> Iterator[None]:
        handles = [module_hooks.register_module_forward_pre_hook(pre), module_hooks.register_module_forward_hook(post)]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    return installed


if __name__ == "__main__":
    main()

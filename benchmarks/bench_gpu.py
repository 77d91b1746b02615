"""What only a CUDA GPU can check, measured side by side in one process (prints, never asserts):

(i)   the per-node CUDA-event times of one ``propagate()`` summed, against the same forward timed end
      to end with one event pair (target: within 10%), for ResNet-50 at batch 64 and a GPT-2-small
      forward (batch 8, 256 tokens);
(ii)  timed ``propagate()`` (wall clock, one synchronise at the end) / the eager forward for
      ResNet-50 at batch 64 (target <= 1.3); beside it the floor: the eager forward with only the
      per-node primitives of the CUDA path (two timing events and two allocator readings around
      each leaf module, from global module hooks), what any such recorder pays first;
(iii) each node's ``torch.cuda.memory_allocated`` delta against the bytes of the new tensor storages
      it created (rounded up to the caching allocator's 512-byte blocks), per node: how many agree,
      and how many differ only by a cached block the allocator did not split (large pool).

    python benchmarks/bench_gpu.py [--batch 64] [--runs 10]

Without a CUDA device it says so and exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import fx, nn

from torch_flops import TorchFLOPsByFX, zoo
from torch_flops.measure import cuda_index, cuda_memory_reader, make_timer

BLOCK = 512  # the CUDA caching allocator rounds every allocation up to a multiple of 512 bytes
LARGE = 1 << 20  # above 1 MiB an allocation comes from the large pool, which keeps no remainder of <= 1 MiB


def event_ms(fn: Callable[[], Any], runs: int) -> float:
    """Median over ``runs`` of one start/end event pair around ``fn`` (after one warm run)."""
    fn()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def wall_ms(fn: Callable[[], Any], runs: int) -> float:
    """Median wall time of ``fn`` followed by one synchronise."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def node_sum_vs_end_to_end(name: str, model: nn.Module, inputs: tuple[Any, ...], runs: int) -> None:
    counter = TorchFLOPsByFX(model, warmup=1, repeat=runs)
    with torch.no_grad():
        counter.propagate(*inputs)
        eager = event_ms(lambda: model(*inputs), runs)
    summed = counter.total_time_ms or 0.0
    print(f"(i) {name}: per-node events summed {summed:.3f} ms (median per node over {runs} runs), forward end to "
          f"end {eager:.3f} ms; ratio {summed / eager:.3f} (target within 10%: 0.90 .. 1.10)")


@contextlib.contextmanager
def _per_node_primitives(model: nn.Module) -> Iterator[None]:
    """What any per-node recorder on CUDA pays before it records anything: around every module
    without children, one timing event and one allocator reading before it and after it (the
    profiler's own timer and reader, through a pair of global module hooks)."""
    device = next(model.parameters()).device
    timer, read = make_timer(device), cuda_memory_reader("memory_allocated", cuda_index(device))
    leaves = {id(m) for m in model.modules() if not m._modules}
    marks: list[Any] = []

    def before(module: nn.Module, args: Any) -> None:
        if id(module) in leaves:
            marks.append((read(), timer.tick()))

    def after(module: nn.Module, args: Any, output: Any) -> None:
        if id(module) in leaves:
            marks.append((timer.tick(), read()))

    hooks = (torch.nn.modules.module.register_module_forward_pre_hook(before),
             torch.nn.modules.module.register_module_forward_hook(after))
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()


def propagate_vs_eager(model: nn.Module, inputs: tuple[Any, ...], runs: int) -> None:
    counter = TorchFLOPsByFX(model)
    with torch.no_grad():
        eager = wall_ms(lambda: model(*inputs), runs)
        profiled = wall_ms(lambda: counter.propagate(*inputs), runs)
        with _per_node_primitives(model):
            floor = wall_ms(lambda: model(*inputs), runs)
    print(f"(ii) ResNet-50 batch {inputs[0].shape[0]}: eager {eager:.2f} ms, propagate {profiled:.2f} ms, "
          f"propagate/eager = {profiled / eager:.3f} (target <= 1.3); the floor (the eager forward with only two "
          f"events and two allocator readings per leaf module) {floor:.2f} ms = {floor / eager:.3f}x")


class _NewStorageBytes(fx.Interpreter):
    """Runs the graph and notes, per node, the bytes of the storages its value holds that no
    earlier value held (what the node allocated), rounded up to the allocator's blocks."""

    def __init__(self, gm: fx.GraphModule) -> None:
        super().__init__(gm, garbage_collect_values=False)  # nothing freed: no address is reused
        self.seen: set[int] = set()
        self.created: dict[str, int] = {}

    def run_node(self, n: fx.Node) -> Any:
        out = super().run_node(n)
        tensors = [t for t in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(t, torch.Tensor)]
        total = 0
        for t in tensors:
            storage = t.untyped_storage()
            if storage.data_ptr() not in self.seen and n.op not in ("placeholder", "get_attr"):
                self.seen.add(storage.data_ptr())
                total += -(-storage.nbytes() // BLOCK) * BLOCK
        self.created[n.name] = total
        return out


def memory_deltas(model: nn.Module, inputs: tuple[Any, ...]) -> None:
    counter = TorchFLOPsByFX(model)
    with torch.no_grad():
        model(*inputs)  # cuDNN / cuBLAS workspaces and handles exist before measuring
        torch.cuda.synchronize()
        counter.propagate(*inputs)
        reference = _NewStorageBytes(fx.symbolic_trace(model))
        reference.run(*inputs)
    rows = [(r.name, r.mem_delta, reference.created.get(r.name)) for r in counter.records if r.mem_delta is not None]
    agree = [row for row in rows if row[1] == row[2]]
    # The allocator hands out a whole cached block when splitting it would leave a remainder it does
    # not keep apart (in the large pool, above 1 MiB, a remainder of 1 MiB or less): the counter then
    # grows by the block, up to 1 MiB more than the new storage.
    unsplit = [row for row in rows if row[1] != row[2] and row[2] is not None and row[2] > LARGE
               and 0 < row[1] - row[2] <= LARGE]
    print(f"(iii) ResNet-50: memory_allocated delta == bytes of new storages for {len(agree)} of {len(rows)} nodes; "
          f"{len(unsplit)} more are a new storage over 1 MiB given a whole cached block (delta - storage <= 1 MiB)")
    for name, delta, created in [row for row in rows if row[1] != row[2] and row not in unsplit][:10]:
        print(f"      differs otherwise: {name}: delta {delta} B, new storages {created} B")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_gpu: no CUDA device here; nothing measured")
        return
    device = torch.device("cuda")
    torch.backends.cudnn.benchmark = False
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    resnet = zoo.resnet50().to(device).eval()
    images = zoo.resnet50_example_inputs(batch_size=args.batch, device=device)
    gpt2 = zoo.gpt2().to(device).eval()
    ids = zoo.gpt2_example_inputs(batch_size=8, device=device, seq_len=256)
    node_sum_vs_end_to_end(f"ResNet-50 batch {args.batch}", resnet, images, args.runs)
    node_sum_vs_end_to_end("GPT-2 small batch 8 x 256", gpt2, ids, args.runs)
    propagate_vs_eager(resnet, images, args.runs)
    memory_deltas(resnet, zoo.resnet50_example_inputs(batch_size=8, device=device))


if __name__ == "__main__":
    main()

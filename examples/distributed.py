"""Profile a tensor-parallel MLP on two CPU processes (gloo) and merge the ranks' profiles.

Run (from anywhere): torchrun --standalone --nproc-per-node 2 examples/distributed.py [OUT_DIR]

Each rank profiles its own shard (``flops``/``macs`` are its local work, ``global_*`` the logical
op's) and writes ``OUT_DIR/profile-{rank}.json`` (default ``OUT_DIR``: ``examples/out/``, next to
this file, which git ignores); rank 0 then prints the merged report: summed and global work,
per-rank FLOPs and time with the imbalance, and the all-reduce's bytes, and says where the files are.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from torch_flops import TorchFLOPsByFX
from torch_flops.distributed import merge_profiles

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")


def main() -> None:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else OUT_DIR
    os.makedirs(out_dir, exist_ok=True)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256))
    parallelize_module(model, init_device_mesh("cpu", (dist.get_world_size(),)),
                       {"0": ColwiseParallel(), "2": RowwiseParallel()})
    counter = TorchFLOPsByFX(model)
    counter.propagate(torch.randn(8, 256))
    counter.to_json(os.path.join(out_dir, "profile-{rank}.json"))  # {rank}: this process's rank
    dist.barrier()
    if dist.get_rank() == 0:
        files = [os.path.join(out_dir, f"profile-{r}.json") for r in range(dist.get_world_size())]
        merged = merge_profiles(files)
        print(merged.text(depth=1))
        print(f"\nwrote {', '.join(files)} (merge them again: torch-flops merge {' '.join(files)})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

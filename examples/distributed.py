"""Profile a tensor-parallel MLP on two CPU processes (gloo) and merge the ranks' profiles.

Run: torchrun --standalone --nproc-per-node 2 examples/distributed.py

Each rank profiles its own shard (``flops``/``macs`` are its local work, ``global_*`` the logical
op's), writes ``profile-{rank}.json``; rank 0 then prints the merged report: summed and global
work, per-rank FLOPs and time with the imbalance, and the all-reduce's bytes.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from torch_flops import TorchFLOPsByFX
from torch_flops.distributed import merge_profiles


def main() -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256))
    parallelize_module(model, init_device_mesh("cpu", (dist.get_world_size(),)),
                       {"0": ColwiseParallel(), "2": RowwiseParallel()})
    counter = TorchFLOPsByFX(model)
    counter.propagate(torch.randn(8, 256))
    counter.to_json("profile-{rank}.json")  # {rank}: this process's rank
    dist.barrier()
    if dist.get_rank() == 0:
        merged = merge_profiles([f"profile-{r}.json" for r in range(dist.get_world_size())])
        print(merged.text(depth=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""One rank of the distributed tests (tests/test_distributed.py), started by ``torchrun
--standalone --nproc-per-node N tests/_distributed_worker.py CASE OUTDIR``: profiles the case's
model under the gloo process group torchrun set up (loopback only) and writes this rank's profile
(``OUTDIR/CASE-{rank}.json``) and the numbers the test checks (``OUTDIR/CASE-{rank}.facts.json``)."""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from torch_flops import TorchFLOPsByFX


class Attention(nn.Module):
    """Multi-head self-attention whose head count follows its projections' width, so that the
    same code runs whole or with its heads split over ranks (tensor parallel)."""

    def __init__(self, dim: int = 16, head_dim: int = 4) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, length, _ = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, length, -1, self.head_dim).transpose(1, 2)

        out = F.scaled_dot_product_attention(heads(self.q(x)), heads(self.k(x)), heads(self.v(x)))
        return self.o(out.transpose(1, 2).reshape(b, length, -1))


class Collectives(nn.Module):
    """Every collective once, on a (4, 8) float32 tensor (128 B)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import torch.distributed._functional_collectives as fc

        n = dist.get_world_size()
        y = x.clone()
        dist.all_reduce(y)
        gathered = torch.empty(4 * n, 8)
        dist.all_gather_into_tensor(gathered, x)
        scattered = torch.empty(4 // 2, 8) if n == 2 else torch.empty(4, 8)
        dist.reduce_scatter_tensor(scattered, torch.cat([x] * (scattered.shape[0] * n // 4)))
        dist.broadcast(y, src=0)
        swapped = torch.empty_like(x)
        dist.all_to_all_single(swapped, x)
        z = fc.all_reduce(x, "sum", dist.group.WORLD)
        passed = x.clone()
        if dist.get_rank() == 0:
            dist.send(passed, dst=1)
        elif dist.get_rank() == 1:
            dist.recv(passed, src=0)
        return y.sum() + gathered.sum() + scattered.sum() + swapped.sum() + z.sum() + passed.sum()


class SubGroup(nn.Module):
    """An all-reduce over a group of two of the ranks (128 B)."""

    def __init__(self, group: object) -> None:
        super().__init__()
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        if dist.get_rank() < 2:
            dist.all_reduce(y, group=self.group)
        return y


def _facts(counter: TorchFLOPsByFX) -> dict[str, object]:
    records = counter.records
    return {
        "macs": counter.total_macs, "flops": counter.total_flops, "params": counter.profile.total_params,
        "global_macs": sum(r.global_macs if r.global_macs is not None else (r.macs or 0) for r in records),
        "comm": [[r.target, r.module_path, r.comm_bytes] for r in records if r.comm_bytes is not None],
        "backward_macs": counter.total_backward_macs if counter.profile.has_backward else None,
        "settings": {k: counter.profile.settings.get(k) for k in ("rank", "world_size")},
        "node_macs": {r.name: [r.macs, r.global_macs] for r in records if r.macs},
    }


def main() -> None:
    case, out = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    facts: dict[str, object] = {}
    if case == "tp_train":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        from torch_flops import TrainingProfiler

        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
        parallelize_module(model, init_device_mesh("cpu", (world,)), {"0": ColwiseParallel(), "2": RowwiseParallel()})
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(4, 16)
        with TrainingProfiler(model, optimizer) as prof:
            model(x).sum().backward()
            optimizer.step()
        step = prof.profiles[0]
        with FlopCounterMode(display=False) as reference:  # the same step's forward and backward
            model(x).sum().backward()
        counted = step.with_convention("flop_counter")
        facts.update(flop_counter=counted.total_flops + counted.total_backward_flops,
                     flop_counter_mode=reference.get_total_flops())
        facts.update(macs=step.total_macs, backward_macs=step.total_backward_macs,
                     optimizer_flops=sum(r.flops for r in step.records if r.phase == "optimizer"),
                     optimizer_paths=[r.module_path for r in step.records if r.op == "optimizer_step"])
        with open(os.path.join(out, f"{case}-{rank}.facts.json"), "w") as f:
            json.dump(facts, f)
        dist.barrier()
        dist.destroy_process_group()
        return
    if case in ("tp_mlp", "tp_attention"):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        if case == "tp_mlp":
            model: nn.Module = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
            plan = {"0": ColwiseParallel(), "2": RowwiseParallel()}
            x = torch.randn(4, 16)
        else:
            model = Attention()
            plan = {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(), "o": RowwiseParallel()}
            x = torch.randn(2, 8, 16)
        whole = TorchFLOPsByFX(model)  # the unsharded model, before parallelize_module
        whole.propagate(x)
        facts["unsharded_macs"] = whole.total_macs
        parallelize_module(model, init_device_mesh("cpu", (world,)), plan)
        counter = TorchFLOPsByFX(model)
        counter.propagate(x)
        with FlopCounterMode(display=False) as reference:
            model(x)
        facts.update(flop_counter=counter.profile.with_convention("flop_counter").total_flops,
                     flop_counter_mode=reference.get_total_flops())
    elif case == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
        x = torch.randn(4, 16)
        whole = TorchFLOPsByFX(model)
        whole.propagate(x, loss_fn=lambda out: out.sum())
        facts["unsharded_macs"], facts["unsharded_backward_macs"] = whole.total_macs, whole.total_backward_macs
        model.zero_grad(set_to_none=True)
        # a CPU mesh named outright: without one fully_shard takes the accelerator when there is one, and a
        # machine with one GPU has no device for rank 1
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (world,))
        for layer in (model[0], model[2]):
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        counter = TorchFLOPsByFX(model)
        counter.propagate(x, loss_fn=lambda out: out.sum())
        facts["backward_comm_bytes"] = counter.profile.backward["comm_bytes"]
        facts["module_backward_comm"] = {p: m.backward_comm_bytes for p, m in counter.profile.by_module().items()}
    elif case == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)))
        counter = TorchFLOPsByFX(model)
        counter.propagate(torch.randn(4, 16), loss_fn=lambda out: out.sum())
        facts["backward_comm_bytes"] = counter.profile.backward["comm_bytes"]
        facts["backward_errors"] = counter.profile.backward["errors"]
    elif case == "subgroup":
        pair = dist.new_group([0, 1])  # every rank makes it; ranks 0 and 1 use it
        counter = TorchFLOPsByFX(SubGroup(pair))
        counter.propagate(torch.ones(4, 8))
    elif case == "collectives":
        counter = TorchFLOPsByFX(Collectives())
        counter.propagate(torch.full((4, 8), float(rank)))
    else:
        raise SystemExit(f"unknown case {case}")
    facts.update(_facts(counter))
    counter.to_json(os.path.join(out, f"{case}-{{rank}}.json"))
    with open(os.path.join(out, f"{case}-{rank}.facts.json"), "w") as f:
        json.dump(facts, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

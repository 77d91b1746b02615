"""Distributed runs (gloo on CPU, loopback only): per-rank profiles, tensor-parallel local and
global work, collectives' bytes, FSDP2, and the merged report. Each case runs
``tests/_distributed_worker.py`` under ``torchrun --standalone`` (its own process group, bounded
in time) and checks the numbers it wrote; the per-rank MACs are derived by hand below."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from torch_flops import TorchFLOPsByFX
from torch_flops.cli import main
from torch_flops.distributed import comm_bytes, merge_profiles, rank_path

pytestmark = pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")

WORKER = Path(__file__).with_name("_distributed_worker.py")


@cache
def _run(case: str, ranks: int, out: str) -> tuple[dict[str, Any], ...]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                           str(ranks), str(WORKER), case, out], check=False, capture_output=True, text=True, timeout=150,
                          env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return tuple(json.loads(Path(out, f"{case}-{r}.facts.json").read_text()) for r in range(ranks))


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("ranks"))


def test_tensor_parallel_mlp(out_dir: str) -> None:
    facts = _run("tp_mlp", 2, out_dir)
    # Linear(16, 32) colwise, ReLU, Linear(32, 8) rowwise, batch 4, 2 ranks. Unsharded:
    # 4*16*32 + 4*32*8 = 2048 + 1024 = 3072 MACs. Each rank: its 16 output columns of the first
    # (4*16*16 = 1024) and its 16 input rows of the second (4*16*8 = 512) = 1536
    for rank, f in enumerate(facts):
        assert f["settings"] == {"rank": rank, "world_size": 2}
        assert f["unsharded_macs"] == 3072 and f["macs"] == 1536
        assert f["node_macs"]["linear"] == [1024, 2048] and f["node_macs"]["linear_1"] == [512, 1024]
        assert f["params"] == 16 * 32 + 32 + 32 * 8 + 8  # 808: the DTensor parameters, counted once
        # FlopCounterMode counts each DTensor op's logical work on every rank: 2 x 3072 = 6144, and so
        # does the flop_counter convention (it counted the local shards, 3072)
        assert f["flop_counter"] == f["flop_counter_mode"] == 6144
        # the rowwise output's all-reduce: 4x8 floats = 128 B, ring 2(n-1)/n x 128 = 128 B
        assert f["comm"] == [["_c10d_functional.all_reduce.default", "", 128]]
    assert sum(f["macs"] for f in facts) == 3072
    merged = merge_profiles([os.path.join(out_dir, f"tp_mlp-{r}.json") for r in (1, 0)])
    assert merged.ranks == (0, 1)
    assert (merged.total_macs, merged.global_macs) == (3072, 3072)
    assert merged.flops_imbalance == 1.0 and merged.comm_bytes == 256


def test_tensor_parallel_attention(out_dir: str) -> None:
    facts = _run("tp_attention", 2, out_dir)
    # dim 16, 4 heads of 4, batch 2, length 8, 2 ranks (2 heads each). Unsharded: q, k, v, o
    # 2*8*16*16 = 4096 MACs each, attention Q K^T and P V 2 * (2*4*8*8*4) = 4096 -> 20480.
    # Each rank: q, k, v its 8 columns (2048 each), o its 8 input rows (2048), attention over its
    # 2 heads (2048) -> 10240
    for f in facts:
        assert f["unsharded_macs"] == 20480 and f["macs"] == 10240
        assert f["node_macs"]["scaled_dot_product_attention"] == [2048, None]  # on local tensors
        assert f["comm"] == [["_c10d_functional.all_reduce.default", "", 2 * 8 * 16 * 4]]  # 1024 B, ring 2(n-1)/n
    merged = merge_profiles([os.path.join(out_dir, f"tp_attention-{r}.json") for r in (0, 1)])
    assert merged.total_macs == 20480 and merged.global_macs == 20480


def test_tensor_parallel_training_step_is_each_rank_s_share(out_dir: str) -> None:
    facts = _run("tp_train", 2, out_dir)
    for f in facts:
        # forward 1536 (above); backward: the colwise layer's dW over its 16 columns (4*16*16 =
        # 1024; its input needs no grad), the rowwise layer's dX and dW over its 16 rows (512 + 512)
        assert (f["macs"], f["backward_macs"]) == (1536, 2048)
        # SGD, 2 FLOPs per element of this rank's shards: 16x16 + 16 (colwise weight and bias),
        # 8x16 + 8 (rowwise weight; its bias is replicated, whole on every rank) = 408 elements
        assert f["optimizer_flops"] == 2 * 408
        assert f["optimizer_paths"] == ["0", "0", "2", "2"]  # in the modules owning the (sharded) parameters
        # FlopCounterMode on the same rank: the logical ops, forward 2 x 3072 and backward 2 x (4*16*32 dW of
        # the first + 4*32*8 dX and 4*32*8 dW of the second = 4096): 6144 + 8192 = 14336
        assert f["flop_counter"] == f["flop_counter_mode"] == 14336


def test_fsdp2_counts_as_one_device(out_dir: str) -> None:
    facts = _run("fsdp2", 2, out_dir)
    for f in facts:
        assert f["macs"] == f["unsharded_macs"] == 3072
        assert f["backward_macs"] == f["unsharded_backward_macs"] == 4096
        assert f["params"] == 808  # sharded parameters counted once, globally
        # all-gather of each layer's flat parameters before its forward: (n-1)/n of the whole
        # (544 floats = 2176 B -> 1088 B; 264 floats = 1056 B -> 528 B), in the module they serve
        assert f["comm"] == [["c10d._allgather_base_.default", "0", 1088], ["c10d._allgather_base_.default", "2", 528]]
        # backward: the all-gathers again (resharded after forward) and the gradients'
        # reduce-scatter, (n-1)/n of each: 2 * (1088 + 528)
        assert f["backward_comm_bytes"] == 2 * (1088 + 528)
        # per module: what ran during each node's backward. The last layer's backward runs its own
        # all-gather (528), its gradients' reduce-scatter (528) and the prefetch of the first
        # layer's parameters (1088); the first layer's reduce-scatter runs in FSDP's final
        # callback, after every node's backward: in the total only
        assert f["module_backward_comm"] == {"": 2144, "0": 0, "1": 0, "2": 528 + 528 + 1088}


def test_collectives_and_their_bytes(out_dir: str) -> None:
    facts = _run("collectives", 2, out_dir)
    s = 4 * 8 * 4  # a (4, 8) float32 tensor: 128 B; n = 2
    assert facts[0]["comm"] == [
        ["c10d.allreduce_.default", "", s],  # 2(n-1)/n S
        ["c10d._allgather_base_.default", "", s],  # (n-1)/n of the gathered 2S
        ["c10d._reduce_scatter_base_.default", "", s // 2],  # (n-1)/n of the input S
        ["c10d.broadcast_.default", "", s],  # S
        ["c10d.alltoall_base_.default", "", s // 2],  # (n-1)/n S
        ["_c10d_functional.all_reduce.default", "", s],
        ["c10d.send.default", "", s],  # S
    ]
    assert facts[1]["comm"][-1] == ["c10d.recv_.default", "", s]
    assert facts[0]["macs"] == 0


def test_ddp_backward_all_reduce(out_dir: str) -> None:
    facts = _run("ddp", 2, out_dir)
    for f in facts:
        # DDP all-reduces the gradients in backward: 808 floats = 3232 B in one bucket, ring
        # 2(n-1)/n x 3232 = 3232 B; FLOPs as on one device
        assert f["backward_comm_bytes"] == 3232 and f["backward_errors"] == {}
        assert f["macs"] == 3072 and f["backward_macs"] == 4096
    merged = merge_profiles([os.path.join(out_dir, f"ddp-{r}.json") for r in (0, 1)])
    assert merged.comm_bytes == 2 * 3232  # the backwards' collectives, both ranks
    # and their time: the same collectives as the bytes (it left the backward's out: None)
    backward_times = [p.backward["comm_time_ms"] for p in merged.profiles]
    assert all(t is not None and t > 0 for t in backward_times)
    assert merged.comm_time_ms == pytest.approx(sum(backward_times))


def test_a_sub_group_s_size_is_its_own(out_dir: str) -> None:
    facts = _run("subgroup", 3, out_dir)
    # 3 ranks, an all-reduce over 2 of them: 2(2-1)/2 x 128 B = 128 (not 2(3-1)/3 x 128)
    assert facts[0]["comm"] == facts[1]["comm"] == [["c10d.allreduce_.default", "", 128]]
    assert facts[2]["comm"] == []
    assert facts[2]["settings"] == {"rank": 2, "world_size": 3}


def test_merge_refuses_inconsistent_ranks(out_dir: str) -> None:
    _run("tp_mlp", 2, out_dir)
    _run("fsdp2", 2, out_dir)
    with pytest.raises(ValueError, match=r"one profile per rank 0\.\.\.1, got ranks \[0\]"):
        merge_profiles([os.path.join(out_dir, "tp_mlp-0.json")])
    with pytest.raises(TypeError, match="got one path"):
        merge_profiles(os.path.join(out_dir, "tp_mlp-0.json"))  # type: ignore[arg-type]


def test_merge_cli_and_rank_paths(out_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    _run("tp_mlp", 2, out_dir)
    files = [os.path.join(out_dir, f"tp_mlp-{r}.json") for r in (0, 1)]
    assert main(["merge", *files, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["global_macs"] == 3072 and doc["summary"]["ranks"] == [0, 1]
    assert main(["merge", *files]) == 0
    text = capsys.readouterr().out
    assert "2 ranks" in text and "imbalance" in text
    assert main(["merge", files[0], files[0]]) == 2  # two profiles of rank 0: bad input, as diff's
    assert "same rank" in capsys.readouterr().err
    assert rank_path("p-{rank}.json") == "p-0.json"  # no process group here: rank 0


def test_rank_from_the_launcher_s_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # torchrun sets RANK and WORLD_SIZE before any process group exists (the CLI makes none)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert rank_path("p-{rank}.json") == "p-3.json"


def test_comm_bytes_of_a_group_of_one() -> None:
    # no group larger than one rank: nothing moves (and no process group is needed to say so)
    assert comm_bytes(torch.ops._c10d_functional.all_reduce.default, (torch.ones(4), "sum", "unused"),
                      {}, torch.ones(4)) == 0


@pytest.mark.parametrize("world", ["2", 2.5, None, [2], True, 0])
def test_merge_refuses_a_world_size_that_is_no_rank_count(world: Any) -> None:
    # a damaged document is refused as a bad rank is, not merged as if it had no world_size
    counter = TorchFLOPsByFX(nn.Linear(2, 2))
    counter.propagate(torch.randn(1, 2))
    good = dataclasses.replace(counter.profile, settings={"rank": 0, "world_size": 2})
    bad = dataclasses.replace(counter.profile, settings={"rank": 1, "world_size": world})
    with pytest.raises(ValueError, match=rf"profile 1 has settings.world_size {re.escape(repr(world))}, not a rank count"):
        merge_profiles([good, bad])


def test_merged_global_work_keeps_every_phase_of_the_plain_tensor_work() -> None:
    # no DTensor: global_flops is the ranks' summed work. Per rank: Linear(4, 3) on (2, 4): 2*2*4*3 = 48 +
    # bias 6 = 54 in the forward; the loss (o ** 2).mean() on 6 outputs: 6 squares, the mean's 6 adds and
    # 1 divide = 13: 67 per rank, 134 merged (the global figure dropped the loss phase: 108)
    profiles = []
    for rank in range(2):
        torch.manual_seed(0)
        counter = TorchFLOPsByFX(nn.Linear(4, 3))
        counter.propagate(torch.randn(2, 4), loss_fn=lambda o: (o ** 2).mean())
        assert {r.phase for r in counter.records if r.flops} == {"forward", "loss"}
        profiles.append(dataclasses.replace(counter.profile, settings={"rank": rank, "world_size": 2}))
    merged = merge_profiles(profiles)
    assert merged.global_flops == merged.total_flops == 2 * profiles[0].total_flops == 134


def test_merged_global_work_leaves_the_optimizer_s_out_as_the_totals_do() -> None:
    # a training step: forward, loss and the optimizer's own column (Profile.optimizer_flops, not in
    # total_flops). Without DTensors the merged global work is the ranks' totals, optimizer left out
    from torch_flops import TrainingProfiler

    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with TrainingProfiler(model, optimizer) as prof:
        (model(torch.randn(2, 4)) ** 2).mean().backward()
        optimizer.step()
    step = dataclasses.replace(prof.profiles[0], settings={"rank": 0, "world_size": 1})
    assert any(r.phase == "optimizer" and r.flops for r in step.records)
    merged = merge_profiles([step])
    # forward 54 + the loss's 13 (see above); SGD's 2 x 15 parameters = 30 FLOPs in the optimizer's column
    assert merged.global_flops == merged.total_flops == step.total_flops == 67

"""``TrainingProfiler`` in the user's own loop (forward, loss, backward, optimizer step as three
phases of one step's records), bit-identical to the loop without it, nothing left installed;
``utilization`` (MFU/HFU) arithmetic."""

from __future__ import annotations

import copy
import csv
import io
import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import _get_current_function_mode_stack
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
from torch.utils.flop_counter import FlopCounterMode

from torch_flops import (
    TorchFLOPsByFX,
    TrainingProfiler,
    UnsupportedOptimizerError,
    UnsupportedOpWarning,
    hardware,
    report,
    utilization,
)

PARAMS = 8 * 16 + 16 + 16 * 4 + 4  # 212


def _mlp() -> nn.Sequential:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _loop(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    for x, y in batches:
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def _batches(n: int = 2) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(3, 8, generator=g), torch.randn(3, 4, generator=g)) for _ in range(n)]


def test_two_adamw_steps_match_the_loop_without_the_profiler(same_state: Any, capture_state: Any) -> None:
    model = _mlp()
    twin = copy.deepcopy(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    twin_optimizer = torch.optim.AdamW(twin.parameters(), lr=1e-2)
    batches = _batches()
    hooks_before = capture_state(nn.Linear(1, 1))  # global hooks: none added, none left
    with TrainingProfiler(model, optimizer) as prof:
        _loop(model, optimizer, batches)
    _loop(twin, twin_optimizer, batches)
    same_state(model, twin)
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(optimizer.state[p][key], twin_optimizer.state[q][key])
    hooks_before()
    assert not optimizer._optimizer_step_pre_hooks and not optimizer._optimizer_step_post_hooks
    assert not _get_current_dispatch_mode_stack() and not _get_current_function_mode_stack()

    assert len(prof.profiles) == 2
    step = prof.profiles[0]
    # forward MACs: 3*8*16 + 3*16*4 = 384 + 192 = 576; backward (the input needs no grad): the
    # first Linear dW 384, the second dX 192 + dW 192 -> 768
    assert (step.total_macs, step.total_backward_macs) == (576, 768)
    assert prof.get_total_macs() == 576 + 768
    # AdamW (torch_flops.optim): 14 FLOPs per element -> 14 * 212 = 2968, one record per parameter
    optimizer_records = [r for r in step.records if r.phase == "optimizer"]
    assert [r.module_path for r in optimizer_records] == ["0", "0", "2", "2"]
    assert sum(r.flops for r in optimizer_records) == 14 * PARAMS
    assert prof.get_total_flops() == step.total_flops + step.total_backward_flops + 14 * PARAMS
    assert prof.get_total_params() == PARAMS
    assert step.batch_size == 3
    assert prof.get_total_duration() > 0
    assert prof.get_total_macs(as_string=True) == "1.34 KMACs"  # 576 + 768
    # the loss (mse_loss) is a node of the step: 3*4 elements, subtract, square, mean
    assert any(r.target == "F.mse_loss" or "mse_loss" in r.target for r in step.records)
    modules = step.by_module()
    assert modules["0"].optimizer_flops == 14 * (8 * 16 + 16) and modules["2"].backward_macs == 384


def test_every_view_keeps_the_optimizer_s_flops_in_its_own_column() -> None:
    model = _mlp()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    with TrainingProfiler(model, optimizer) as prof:
        _loop(model, optimizer, _batches(1))
    step = prof.profiles[0]
    update = 14 * PARAMS  # AdamW: 14 FLOPs per element (torch_flops.optim) -> 2968
    # the node CSV's `flops` column is the forward's, as the module and operator views count it
    rows = list(csv.DictReader(io.StringIO(report.csv_text(step, "node"))))
    assert sum(int(r["flops"] or 0) for r in rows) == step.total_flops
    assert sum(int(r["optimizer_flops"] or 0) for r in rows) == update
    assert {r["flops"] for r in rows if r["phase"] == "optimizer"} == {""}
    operator = step.by_operator()["AdamW.step"]
    assert (operator.flops, operator.optimizer_flops, operator.calls) == (0, update, 4)
    step_flops = step.total_flops + step.total_backward_flops + update
    assert step.by_module()[""].step_flops == step_flops
    for group_by in ("node", "operator"):  # the text tables' total rows: FLOPs, optim FLOPs, step FLOPs
        total = next(line for line in report.table_text(step, group_by).splitlines() if line.startswith("total"))
        assert report.format_count(step.total_flops) in total and report.format_count(update) in total
        assert total.endswith(" " + report.format_count(step_flops))


def test_print_model_profile_and_its_file(tmp_path: Any, capsys: Any) -> None:
    model = _mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    prof = TrainingProfiler(model, optimizer)
    prof.start_profile()
    _loop(model, optimizer, _batches(1))
    prof.stop_profile()
    text = prof.print_model_profile(profile_step=1, module_depth=1, top_modules=1)
    assert capsys.readouterr().out.strip() == text.strip()
    # SGD without momentum: p -= lr * g, 2 FLOPs per element -> 424
    assert "optimizer FLOPs:   424" in text and "bwd FLOPs" in text
    path = tmp_path / "profile.txt"
    prof.print_model_profile(output_file=str(path))
    assert path.read_text().startswith("Training step 1")
    with pytest.raises(ValueError, match="between 1 and 1"):
        prof.print_model_profile(profile_step=2)
    with pytest.raises(ValueError, match=r"^top_modules must be an int >= 0, got -1$"):  # (was named k)
        prof.print_model_profile(top_modules=-1)
    with pytest.raises(TypeError, match=r"^module_depth must be an int >= 0, or -1, got str '2'$"):  # (was depth)
        prof.print_model_profile(module_depth="2")  # type: ignore[arg-type]
    prof.end_profile()
    with pytest.raises(RuntimeError, match="no training step"):
        prof.get_total_flops()


def test_without_an_optimizer_a_new_forward_after_a_backward_is_a_new_step() -> None:
    model = _mlp()
    batches = _batches(3)  # made before: everything this thread runs while profiling is recorded
    with TrainingProfiler(model) as prof:
        for x, y in batches:
            F.mse_loss(model(x), y).backward()
    assert len(prof.profiles) == 3
    assert all(p.total_backward_macs == 768 for p in prof.profiles)
    # without zero_grad, steps 2 and 3 add their gradients into .grad: one add per element (212),
    # work of no forward node (unattributed), in the backward totals
    first, second, third = prof.profiles
    assert first.backward["unattributed_flops"] == 0
    assert second.backward["unattributed_flops"] == third.backward["unattributed_flops"] == PARAMS
    assert second.total_backward_flops == first.total_backward_flops + PARAMS
    assert prof.get_total_flops() == round(sum(p.total_flops + p.total_backward_flops for p in prof.profiles) / 3)


def test_bad_arguments_and_unknown_optimizers() -> None:
    class Mine(torch.optim.Optimizer):
        def step(self, closure: Any = None) -> None:
            pass

    model = _mlp()
    with pytest.raises(UnsupportedOptimizerError, match="Mine"):
        TrainingProfiler(model, Mine(model.parameters(), {}))
    with pytest.raises(TypeError, match="model must be"):
        TrainingProfiler("model")  # type: ignore[arg-type]
    prof = TrainingProfiler(model)
    prof.start_profile()
    try:
        with pytest.raises(RuntimeError, match="already profiling"):
            prof.start_profile()
    finally:
        prof.end_profile()


def test_utilization_arithmetic() -> None:
    # 1e12 FLOPs in 1 s on a 2e12 FLOP/s part: 50%
    assert utilization(10**12, 1000.0, 2e12) == pytest.approx(0.5)
    # by name: the H100 SXM's dense bf16 peak (989.5e12 FLOP/s); 989.5e9 FLOPs in 2 ms -> 50%
    h100 = hardware.get("h100-sxm").peak_flops(torch.bfloat16)
    assert utilization(round(h100 * 1e-3), 2.0, "h100-sxm", torch.bfloat16) == pytest.approx(0.5)
    assert utilization(10, None, 1e12) is None  # untimed (meta)
    with pytest.raises(ValueError, match="positive"):
        utilization(10, 1.0, 0)
    with pytest.raises(TypeError, match="peak"):
        utilization(10, 1.0, [1])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="flops must be >= 0"):
        utilization(-5, 1.0, 1e9)
    with pytest.raises(TypeError, match="flops must be an int"):
        utilization("5", 1.0, 1e9)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="time_ms"):
        utilization(5, "1", 1e9)  # type: ignore[arg-type]


def test_mfu_and_hfu_of_a_profiled_loop() -> None:
    model = _mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with TrainingProfiler(model, optimizer) as prof:
        _loop(model, optimizer, _batches(2))
    step = prof.profiles[0]
    model_flops = sum(p.total_flops + p.total_backward_flops for p in prof.profiles) / 2
    seconds = prof.get_total_duration()
    assert prof.get_mfu(1e9) == pytest.approx(model_flops / (seconds * 1e9), rel=1e-6)
    assert prof.get_hfu(1e9) == pytest.approx(prof.get_mfu(1e9))  # no checkpointing: no recompute
    assert step.total_recompute_flops == 0


# ---------------------------------------------------------------------- what a real loop does
class _CountedBlock(nn.Module):
    """Linear + BatchNorm; counts its forward calls (a recompute calls it again)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc, self.bn, self.calls = nn.Linear(8, 8), nn.BatchNorm1d(8), 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return torch.relu(self.bn(self.fc(x)))


class _Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block, self.head = _CountedBlock(), nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        return self.head(checkpoint(self.block, x, use_reentrant=False))


def test_non_reentrant_checkpoint_runs_as_without_the_profiler(same_state: Any) -> None:
    model = _Checkpointed()
    twin = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    twin_optimizer = torch.optim.SGD(twin.parameters(), lr=0.1)
    batches = _batches(2)
    with TrainingProfiler(model, optimizer) as prof:
        _loop(model, optimizer, batches)
    _loop(twin, twin_optimizer, batches)
    assert model.block.calls == twin.block.calls == 4  # a forward and a recompute per step
    same_state(model, twin)  # BatchNorm's running statistics too
    # the recompute (one Linear(8, 8) at 3 rows: 192 MACs) is counted and shown apart
    assert prof.profiles[0].total_recompute_macs == 192
    assert prof.get_hfu(1e12) > prof.get_mfu(1e12)


def test_saved_tensor_hooks_of_the_user_are_not_unpacked() -> None:
    store: dict[int, torch.Tensor] = {}

    def pack(t: torch.Tensor) -> int:
        store[len(store)] = t
        return len(store) - 1

    def unpack(key: int) -> torch.Tensor:
        return store.pop(key)  # one-shot, as offloading code is

    model = _mlp()
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        counter = TorchFLOPsByFX(model)
        counter.propagate(torch.randn(3, 8), loss_fn=lambda out: out.sum())
    assert not store  # every saved tensor unpacked exactly once, by the backward
    assert counter.total_backward_macs == 768
    assert counter.profile.total_saved_bytes == 0  # the hooks hold them: not ours to measure


def test_other_threads_calling_the_model_are_not_recorded() -> None:
    import threading

    model = _mlp()
    batches = _batches(3)
    errors: list[BaseException] = []

    def other() -> None:
        try:
            for _ in range(20):
                with torch.no_grad():
                    model(torch.randn(2, 8))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    with TrainingProfiler(model) as prof:
        thread = threading.Thread(target=other)
        thread.start()
        for x, y in batches:
            F.mse_loss(model(x), y).backward()
        thread.join()
    assert not errors
    assert len(prof.profiles) == 3 and all(p.total_macs == 576 for p in prof.profiles)
    assert not _get_current_dispatch_mode_stack() and not _get_current_function_mode_stack()


def test_step_with_a_closure_and_a_step_that_raises() -> None:
    model = _mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = _batches(1)[0]

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        return loss

    with TrainingProfiler(model, optimizer) as prof:
        optimizer.step(closure)
    step = prof.profiles[0]
    # the closure's forward and backward are the step's; SGD: 2 FLOPs per element
    assert (step.total_macs, step.total_backward_macs) == (576, 768)
    assert sum(r.flops for r in step.records if r.phase == "optimizer") == 2 * PARAMS

    class Failing(torch.optim.SGD):
        def step(self, closure: Any = None) -> Any:
            raise RuntimeError("boom")

    failing = Failing(model.parameters(), lr=0.1)
    with TrainingProfiler(model, failing) as prof:
        for x, y in _batches(2):
            F.mse_loss(model(x), y).backward()
            with pytest.raises(RuntimeError, match="boom"):
                failing.step()
    # the failed step ended its step; the next forward is recorded in full
    assert [p.total_macs for p in prof.profiles] == [576, 576]


def test_clipping_between_backward_and_step_is_the_update_s_work() -> None:
    model = _mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = _batches(1)[0]
    with TrainingProfiler(model, optimizer) as prof:
        F.mse_loss(model(x), y).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    step = prof.profiles[0]
    clipping = [r for r in step.records if r.phase == "optimizer" and r.op != "optimizer_step"]
    assert clipping  # the norm and the scaling of the gradients
    assert step.total_macs == 576  # not in the forward (nor in MFU)


def test_meta_steps_have_no_mfu_and_bad_peaks_are_refused() -> None:
    with torch.device("meta"):
        model = _mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(3, 8, device="meta"), torch.randn(3, 4, device="meta")
    with TrainingProfiler(model, optimizer) as prof:
        _loop(model, optimizer, [(x, y)])
    assert prof.profiles[0].total_backward_macs == 768
    assert prof.get_mfu(1e12) is None  # nothing ran on meta: no time
    assert prof.get_total_duration() is None and prof.get_total_duration(as_string=True) == "-"  # (it gave the
    assert "step duration:     not measured (meta)" in str(prof.print_model_profile())  # profiler's own time)
    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(ValueError, match="positive, finite"):
            utilization(10, 1.0, bad)
        with pytest.raises(ValueError, match="time_ms must be a finite number of milliseconds >= 0"):
            utilization(10, bad, 1e12)  # (NaN gave nan, inf 0.0, a negative time None: 'untimed')


def test_lazy_modules_get_a_clear_error() -> None:
    with pytest.raises(ValueError, match="lazy module"):
        TrainingProfiler(nn.LazyLinear(4)).start_profile()
    with pytest.raises(ValueError, match="lazy module"):  # the default (eager) front end too
        TorchFLOPsByFX(nn.LazyLinear(4)).propagate(torch.randn(2, 3))


def test_the_seed_gradient_of_loss_backward_is_no_node_of_the_loss() -> None:
    model = _mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = _batches(1)
    with TrainingProfiler(model, optimizer) as prof:
        _loop(model, optimizer, batches)
    step = prof.profiles[0]
    # the loss is mse_loss alone (and the target it reads, a constant of the graph, in its phase);
    # backward()'s ones_like seed belongs to the backward (as in propagate)
    assert [r.target for r in step.records if r.phase == "loss" and r.op != "get_attr"] == ["F.mse_loss"]
    assert [r.op for r in step.records if r.phase == "loss"] == ["get_attr", "call_function"]


def test_a_step_measures_what_the_forward_saved_as_propagate_does() -> None:
    torch.manual_seed(0)
    model = _mlp()
    x, y = _batches(1)[0]
    counter = TorchFLOPsByFX(model)
    counter.propagate(x, loss_fn=lambda out: F.mse_loss(out, y))
    model.zero_grad()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    with TrainingProfiler(model, optimizer) as prof:
        _loop(model, optimizer, [(x, y)])
    step = prof.profiles[0]
    reference = counter.profile
    # the same forward saves the same tensors for its backward; so the same peak of live memory
    assert step.total_saved_bytes == reference.total_saved_bytes > 0
    assert step.max_memory == reference.max_memory


def test_a_gradient_penalty_is_loss_work_inside_the_forward_or_in_the_loop() -> None:
    # torch.autograd.grad inside the forward was taken as the step's backward, so the loss after the forward
    # (out.pow(2).sum(): 1 + 1 FLOPs) was filed as optimizer work; in the loop, a penalty computed between an
    # autograd.grad and the backward likewise. Ops that feed a later backward are the loss's; clipping after
    # the last backward stays the optimizer's
    class GP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = nn.Linear(3, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x.requires_grad_()
            y = self.l(x).tanh()
            (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
            return y.sum() + g.pow(2).sum()

    torch.manual_seed(0)
    model, x = GP(), torch.randn(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    profiler = TrainingProfiler(model, opt)
    profiler.start_profile()
    model(x).pow(2).sum().backward()
    opt.step()
    profiler.stop_profile()
    [step] = profiler.profiles
    profiler.end_profile()
    outside = [(r.target, r.phase) for r in step.records if r.module_path == "" and r.phase in ("loss", "optimizer")]
    assert outside == [("Tensor.pow", "loss"), ("Tensor.sum", "loss")]

    plain = nn.Linear(3, 1)
    opt = torch.optim.SGD(plain.parameters(), lr=0.1)
    profiler = TrainingProfiler(plain, opt)
    profiler.start_profile()
    xr = x.clone().requires_grad_()
    out = plain(xr).sum()
    (g,) = torch.autograd.grad(out, xr, create_graph=True)
    (out + g.pow(2).sum()).backward()  # the penalty: pow, sum, add
    torch.nn.utils.clip_grad_norm_(plain.parameters(), 1.0)
    opt.step()
    profiler.stop_profile()
    [step] = profiler.profiles
    profiler.end_profile()
    phases = {r.name: r.phase for r in step.records}
    assert (phases["pow_1"], phases["sum_2"], phases["add"]) == ("loss", "loss", "loss")  # the penalty
    assert (phases["linalg_vector_norm"], phases["clamp"]) == ("optimizer", "optimizer")  # the clipping
    # and the items of its _foreach_norm it reads, in its phase (they were 'forward')
    assert (phases["getitem"], phases["getitem_1"]) == ("optimizer", "optimizer")


@torch.library.custom_op("torch_flops_training_test::twice", mutates_args=())
def _twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


_twice.register_autograd(lambda ctx, grad: grad * 2)


def test_an_op_without_a_formula_is_warned_about_once_at_the_user_s_line() -> None:
    # as propagate warns: once per target for the whole recording (two steps here), at the line of the
    # user's that ended the step (optimizer.step(), where the step's profile is made)
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = nn.Linear(8, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return _twice(self.l(x))

    model = Twice()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with TrainingProfiler(model, optimizer) as prof:
            for _ in range(2):
                model(torch.randn(4, 8)).sum().backward()
                optimizer.step()
                optimizer.zero_grad()
    unsupported = [w for w in seen if issubclass(w.category, UnsupportedOpWarning)]
    assert len(unsupported) == 1 and "torch_flops_training_test.twice" in str(unsupported[0].message)
    assert unsupported[0].filename == __file__
    assert len(prof.profiles) == 2


def test_a_forward_that_raises_and_is_caught_ends_its_step() -> None:
    # iteration 2's forward raises after its first Linear (8 -> 16 on 4 rows: 2*4*8*16 = 1024 FLOPs plus
    # the bias 64: FlopCounterMode counts the mm only, 1024) and the loop goes on: that iteration is a step
    # of its own, as FlopCounterMode around each iteration sees it, not added to iteration 3's
    class Flaky(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b, self.calls = nn.Linear(8, 16), nn.Linear(16, 3), 0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            h = F.relu(self.a(x))
            if self.calls == 2:
                raise ValueError("bad batch")
            return self.b(h)

    x, y = torch.randn(4, 8), torch.randint(0, 3, (4,))

    def loop(model: nn.Module, optimizer: torch.optim.Optimizer, per_step: list[int] | None) -> None:
        for _ in range(4):
            with FlopCounterMode(display=False) as counted:
                try:
                    F.cross_entropy(model(x), y).backward()
                    optimizer.step()
                except ValueError:
                    pass
                optimizer.zero_grad()
            if per_step is not None:
                per_step.append(counted.get_total_flops())

    reference: list[int] = []
    torch.manual_seed(0)
    model = Flaky()
    loop(model, torch.optim.SGD(model.parameters(), lr=0.1), reference)
    torch.manual_seed(0)
    model = Flaky()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with TrainingProfiler(model, optimizer) as prof:
        loop(model, optimizer, None)
    steps = [p.with_convention("flop_counter") for p in prof.profiles]
    assert [s.total_flops + s.total_backward_flops for s in steps] == reference
    assert reference[1] == 1024 and len(reference) == 4


def test_the_loop_s_own_work_before_a_forward_is_loss_work_in_every_step() -> None:
    # the next batch's inputs, made between one step and the next forward ((raw - 0.5) * 2: 2 x 8*4 = 64
    # FLOPs): "loss" (the loop's own) in every step, as before the first; it was "optimizer" work from
    # the second step on (the optimizer's FLOPs then 2 x 212 + 64). GradScaler's update after the step
    # stays optimizer work (its _amp_update_scale_)
    torch.manual_seed(0)
    model = _mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    raw = torch.randn(3, 8, 8)
    with TrainingProfiler(model, optimizer) as prof:
        for batch in raw:
            x = (batch - 0.5) * 2.0
            scaler.scale(F.mse_loss(model(x), torch.zeros(8, 4))).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    for step in prof.profiles:
        prep = [(r.target, r.phase, r.flops) for r in step.records if r.target in ("Tensor.sub", "Tensor.mul")][:2]
        assert prep == [("Tensor.sub", "loss", 64), ("Tensor.mul", "loss", 64)]
        assert sum(r.flops for r in step.records if r.op == "optimizer_step") == 2 * PARAMS  # SGD: 2 per element
    updates = [(r.phase, r.flops) for step in prof.profiles for r in step.records if "amp_update_scale" in r.target]
    # (the last step's update is after the recording's last step; its found_inf test and scale's multiply: 2)
    assert updates == [("optimizer", 2), ("optimizer", 2)]


@pytest.mark.parametrize("where", ["loss", "backward"])
def test_a_loss_or_backward_that_raises_and_is_caught_ends_its_step(where: str) -> None:
    # iteration 2 of 3 raises outside the model (a target of the wrong shape in the loss; a tensor hook in
    # the backward) and the loop goes on: a step of its own, as FlopCounterMode around each iteration sees
    # it; it was added to the next step
    torch.manual_seed(0)
    model = _mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(3, 8)

    def loop(per_step: list[int] | None) -> None:
        for i in range(3):
            with FlopCounterMode(display=False) as counted:
                try:
                    out = model(x)
                    target = torch.zeros(3, 5 if (i == 1 and where == "loss") else 4)
                    loss = F.mse_loss(out, target)
                    if i == 1 and where == "backward":
                        out.register_hook(lambda grad: (_ for _ in ()).throw(ValueError("bad gradient")))
                    loss.backward()
                    optimizer.step()
                except (RuntimeError, ValueError):
                    pass
                optimizer.zero_grad()
            if per_step is not None:
                per_step.append(counted.get_total_flops())

    reference: list[int] = []
    loop(reference)
    with TrainingProfiler(model, optimizer) as prof:
        loop(None)
    steps = [p.with_convention("flop_counter") for p in prof.profiles]
    assert [s.total_flops + s.total_backward_flops for s in steps] == reference
    assert len(reference) == 3 and reference[1] < reference[0]


@pytest.mark.parametrize("where", ["forward hook", "gradient hook", "step pre-hook", "step post-hook"])
def test_a_step_that_raises_past_the_profiler_s_hooks_ends_its_step(where: str) -> None:
    """Iteration 2 of 3 raises where the profiler's own hooks see nothing (a KeyboardInterrupt from a
    forward hook or a gradient hook skips torch's always-called hooks; a user's optimizer step pre-hook
    runs before the profiler's; a user's post-hook raises after the update) and the loop goes on: each
    iteration is a step, as FlopCounterMode around each sees it, and an update made is recorded."""
    torch.manual_seed(0)
    model = _mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(3, 8)
    calls = [0]
    error = KeyboardInterrupt if "hook" in where and "step" not in where else RuntimeError

    def maybe_raise(*args: Any) -> None:
        if calls[0] == 1:
            raise error("skip this batch")

    if where == "forward hook":
        model[1].register_forward_hook(maybe_raise)
    elif where == "gradient hook":
        model[0].weight.register_hook(maybe_raise)
    elif where == "step pre-hook":
        optimizer.register_step_pre_hook(maybe_raise)
    else:
        optimizer.register_step_post_hook(maybe_raise)

    def iteration() -> None:
        try:
            F.mse_loss(model(x), torch.zeros(3, 4)).backward()
            optimizer.step()
        except error:
            pass
        optimizer.zero_grad()
        calls[0] = (calls[0] + 1) % 3

    reference, steps, prof = _iterations_and_steps(model, optimizer, iteration, 3)
    assert steps == reference and len(steps) == 3
    updates = [sum(r.flops for r in p.records if r.op == "optimizer_step") for p in prof.profiles]
    # SGD: 2 FLOPs per parameter element; the post-hook raises after the update (made: recorded)
    assert updates == [2 * PARAMS, 2 * PARAMS if where == "step post-hook" else 0, 2 * PARAMS]


@pytest.mark.parametrize("case", ["closure raises", "interrupted, then called from deeper"])
def test_a_raised_step_ends_whatever_follows_it(case: str) -> None:
    """Iteration 2 of 3 raises and the loop goes on: in a closure of optimizer.step(closure) after its
    backward (the next forward is inside the next closure), or from a forward hook as a
    KeyboardInterrupt, with the next iteration calling the model from a deeper function (a call that
    never returned is told from a model calling itself by torch's call frames, not by depth)."""
    torch.manual_seed(0)
    model = _mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(3, 8), torch.zeros(3, 4)
    state = {"i": 0}

    def maybe_raise(*args: Any) -> None:
        if state["i"] == 1:
            raise KeyboardInterrupt("skip")

    if case != "closure raises":
        model[1].register_forward_hook(maybe_raise)

    def step() -> None:
        F.mse_loss(model(x), y).backward()
        optimizer.step()

    def deeper() -> None:
        step()

    def iteration() -> None:
        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            if state["i"] == 1:
                raise RuntimeError("non-finite loss")
            return loss

        try:
            if case == "closure raises":
                optimizer.step(closure)
            elif state["i"] == 2:
                deeper()  # one frame deeper than the interrupted call
            else:
                step()
        except (RuntimeError, KeyboardInterrupt):
            pass
        optimizer.zero_grad()
        state["i"] = (state["i"] + 1) % 3

    reference, steps, prof = _iterations_and_steps(model, optimizer, iteration, 3)
    assert steps == reference and len(steps) == 3
    updates = [sum(r.flops for r in p.records if r.op == "optimizer_step") for p in prof.profiles]
    assert updates == [2 * PARAMS, 0, 2 * PARAMS]  # SGD: 2 FLOPs per parameter element; none where it raised


@pytest.mark.parametrize("hook", ["post-hook after start", "pre-hook calling the model",
                                  "post-hook calling the model"])
def test_step_hooks_of_the_user_s_stay_in_their_step(hook: str) -> None:
    """A step post-hook registered after start_profile() (its work is the step's optimizer work), and a
    step hook that calls the model (no-grad, a check): every iteration is one step, as FlopCounterMode
    around each counts it, with its update (the model call in a hook split every step)."""
    torch.manual_seed(0)
    model = _mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(3, 8), torch.zeros(3, 4)
    w = torch.randn(16, 16)

    def work(*args: Any) -> None:
        if "model" in hook:
            with torch.no_grad():
                model(x)
        else:
            torch.mm(w, w)

    if "model" in hook:
        getattr(optimizer, f"register_step_{hook.split('-')[0]}_hook")(work)

    def iteration() -> None:
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()

    reference = []
    for _ in range(3):
        with FlopCounterMode(display=False) as counted:
            if hook == "post-hook after start" and not reference:
                handle = optimizer.register_step_post_hook(work)
            iteration()
        reference.append(counted.get_total_flops())
    if hook == "post-hook after start":
        handle.remove()
    with TrainingProfiler(model, optimizer) as prof:
        if hook == "post-hook after start":
            optimizer.register_step_post_hook(work)
        for _ in range(3):
            iteration()
    steps = [p.with_convention("flop_counter") for p in prof.profiles]
    hook_work = 8192 if hook == "post-hook after start" else 0  # its mm, 2*16*16*16: optimizer work, not in totals
    assert [s.total_flops + s.total_backward_flops + hook_work for s in steps] == reference
    assert [sum(r.flops for r in p.records if r.phase == "optimizer" and r.op != "optimizer_step")
            for p in steps] == [hook_work] * 3
    assert [sum(r.flops for r in p.records if r.op == "optimizer_step") for p in prof.profiles] == [2 * PARAMS] * 3


def test_a_step_post_hook_s_work_is_its_step_s_optimizer_work() -> None:
    """A post-hook of the user's on optimizer.step() (registered before the profiler) runs after the
    update, inside step(): its ops are that step's optimizer work, as FlopCounterMode around each
    iteration counts them (they went to the next step's loss work, the last step's to none)."""
    torch.manual_seed(0)
    model = _mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    w = torch.randn(16, 16)
    optimizer.register_step_post_hook(lambda *args: torch.mm(w, w))  # 2*16*16*16 = 8192 FLOPs
    x, y = torch.randn(3, 8), torch.zeros(3, 4)

    def iteration() -> None:
        F.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()

    reference, steps, prof = _iterations_and_steps(model, optimizer, iteration, 3)
    optimizer_work = [sum(r.flops for r in p.with_convention("flop_counter").records if r.phase == "optimizer"
                          and r.op != "optimizer_step") for p in prof.profiles]
    assert optimizer_work == [8192] * 3
    assert [s + 8192 for s in steps] == reference  # (steps: the forward and backward)


def test_an_error_the_loop_recovers_from_inside_a_step_ends_nothing() -> None:
    # one update from 2 micro-batches; in each, a bad sample the loop replaces before the forward and a
    # loss that raises before a fallback loss is backpropagated: the loop recovered both times, so each
    # iteration is one step (the errors split every update in two: 4 profiles for 2)
    torch.manual_seed(0)
    model = _mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(3, 8)

    def iteration() -> None:
        for _ in range(2):
            try:
                batch = torch.cat([x, torch.randn(3, 9)])
            except RuntimeError:
                batch = x
            out = model(batch)
            try:
                loss = F.mse_loss(out, torch.zeros(3, 5))
            except RuntimeError:
                loss = F.mse_loss(out, torch.zeros(3, 4))
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    reference, steps, prof = _iterations_and_steps(model, optimizer, iteration, 2)
    assert steps == reference
    assert [sum(r.flops for r in p.records if r.op == "optimizer_step") for p in prof.profiles] == [2 * PARAMS] * 2


def _iterations_and_steps(model: nn.Module, optimizer: torch.optim.Optimizer, iteration: Any,
                          n: int) -> tuple[list[int], list[int], TrainingProfiler]:
    """FlopCounterMode's FLOPs around each of ``n`` calls of ``iteration()``, then the ``flop_counter``
    forward + backward FLOPs of each step a TrainingProfiler records over ``n`` more (and the profiler)."""
    reference = []
    for _ in range(n):
        with FlopCounterMode(display=False) as counted:
            iteration()
        reference.append(counted.get_total_flops())
    with TrainingProfiler(model, optimizer) as prof:
        for _ in range(n):
            iteration()
    steps = [p.with_convention("flop_counter") for p in prof.profiles]
    return reference, [s.total_flops + s.total_backward_flops for s in steps], prof


@pytest.mark.parametrize("attack", ["autograd.grad", "backward then zero_grad"])
def test_an_adversarial_step_s_extra_backward_stays_in_its_step(attack: str) -> None:
    # each iteration: a forward and backward for the attack (torch.autograd.grad, or loss.backward() whose
    # parameter gradients zero_grad then drops), then the training forward, backward and step: one step an
    # iteration, as FlopCounterMode around each sees it (a rule ending the step where gradients were dropped
    # split every iteration in two)
    torch.manual_seed(0)
    model = _mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(3, 8), torch.zeros(3, 4)

    def iteration() -> None:
        xa = x.clone().requires_grad_() * 1.0
        loss = F.mse_loss(model(xa), y)
        if attack == "autograd.grad":
            (g,) = torch.autograd.grad(loss, xa)
        else:
            loss.backward()
            g = xa.grad if xa.grad is not None else torch.ones_like(x)
            optimizer.zero_grad()
        F.mse_loss(model((x + 0.1 * g.sign()).detach()), y).backward()
        optimizer.step()
        optimizer.zero_grad()

    reference, steps, _ = _iterations_and_steps(model, optimizer, iteration, 3)
    assert steps == reference and len(steps) == 3

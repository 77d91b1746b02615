"""The one recording (torch_flops.session): phases and steps by event (gradient accumulation,
GradScaler's skipped steps, clipping), recordings that stack in one thread, nothing left installed
after any sequence of profiles, errors and interrupts, exceptions that come out as themselves,
optimizer bytes and a training step's roofline."""

from __future__ import annotations

import copy
import sys
import threading
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as module_hooks
from torch.overrides import _get_current_function_mode_stack
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

from torch_flops import TorchFLOPsByFX, TrainingProfiler, roofline
from torch_flops.session import installed

PARAMS = 8 * 16 + 16 + 16 * 4 + 4  # 212 parameters of the MLP below
# one micro-batch of 3 rows: forward MACs 3*8*16 + 3*16*4 = 384 + 192 = 576; FLOPs: Linear(8,16)
# 2*384 + 3*16 bias = 816, ReLU 3*16 = 48, Linear(16,4) 2*192 + 3*4 = 396 -> 1260. Backward (the
# input needs no gradient): first Linear dW 384, second dX 192 + dW 192 -> 768 MACs.
FORWARD_MACS, FORWARD_FLOPS, BACKWARD_MACS = 576, 1260, 768


def _mlp(seed: int = 0, hidden: int = 16) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 4))


def _data(n: int, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(3, 8, generator=g), torch.randn(3, 4, generator=g)) for _ in range(n)]


def _hooks_and_modes() -> tuple[Any, ...]:
    """What torch holds process-wide (global module hooks) and per thread (mode stacks)."""
    return (tuple(module_hooks._global_forward_pre_hooks), tuple(module_hooks._global_forward_hooks),
            tuple(module_hooks._global_forward_hooks_with_kwargs), tuple(module_hooks._global_forward_hooks_always_called),
            tuple(_get_current_dispatch_mode_stack()), tuple(_get_current_function_mode_stack()))


def _forward(profile: Any) -> list[Any]:
    return [r for r in profile.records if r.phase == "forward" and r.op not in ("placeholder", "get_attr", "output")]


def _optimizer_flops(profile: Any) -> int:
    return sum(r.flops for r in profile.records if r.op == "optimizer_step")


def test_gradient_accumulation_counts_every_micro_batch(same_state: Any) -> None:
    model, twin = _mlp(), _mlp()
    optimizer, twin_optimizer = (torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, twin))
    data = _data(4)

    def loop(m: nn.Module, opt: torch.optim.Optimizer) -> None:
        for i, (x, y) in enumerate(data):  # two micro-batches per optimizer step
            (F.mse_loss(m(x), y) / 2).backward()
            if i % 2 == 1:
                opt.step()
                opt.zero_grad()

    before = _hooks_and_modes()
    with TrainingProfiler(model, optimizer) as prof:
        loop(model, optimizer)
    loop(twin, twin_optimizer)
    assert _hooks_and_modes() == before
    same_state(model, twin)  # parameters, gradients (None after zero_grad), buffers
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(optimizer.state[p]["momentum_buffer"], twin_optimizer.state[q]["momentum_buffer"])

    assert len(prof.profiles) == 2
    for step in prof.profiles:
        # both micro-batches' forward and backward are the step's: 2 x 576 and 2 x 768 MACs
        assert (step.total_macs, step.total_backward_macs) == (2 * FORWARD_MACS, 2 * BACKWARD_MACS)
        assert sum(r.flops for r in _forward(step)) == 2 * FORWARD_FLOPS
        # the loss (mse_loss and the division by 2) of each micro-batch: the loss phase, twice
        assert [r.target for r in step.records if r.phase == "loss" and r.target == "F.mse_loss"] == ["F.mse_loss"] * 2
        # SGD with momentum: buf = m*buf + g (2 FLOPs, the first step copies g: 0), p -= lr*buf (2)
        # -> step 1: 2 x 212 = 424; step 2: 4 x 212 = 848. One update per step, not per micro-batch.
    assert [_optimizer_flops(p) for p in prof.profiles] == [2 * PARAMS, 4 * PARAMS]
    # the second micro-batch's backward accumulates into .grad: one add per element, unattributed
    assert all(p.backward["unattributed_flops"] == PARAMS for p in prof.profiles)


def test_a_step_grad_scaler_skips_counts_its_forward_and_backward_but_no_update(same_state: Any) -> None:
    model, twin = _mlp(), _mlp()
    optimizer, twin_optimizer = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, twin))
    scalers = [torch.amp.GradScaler("cpu", init_scale=2.0**4) for _ in range(2)]
    (x1, y), (x3, _) = _data(2)
    xs = [x1, torch.full((3, 8), float("inf")), x3]  # the second step's gradients are inf: skipped

    def loop(m: nn.Module, opt: torch.optim.Optimizer, scaler: torch.amp.GradScaler) -> None:
        for x in xs:
            scaler.scale(F.mse_loss(m(x), y)).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()

    with TrainingProfiler(model, optimizer) as prof:
        loop(model, optimizer, scalers[0])
    loop(twin, twin_optimizer, scalers[1])
    same_state(model, twin)
    assert scalers[0].get_scale() == scalers[1].get_scale() == 2.0**4 / 2  # halved once, by the skip
    assert len(prof.profiles) == 3
    for step in prof.profiles:  # every step's forward and backward are counted
        assert (step.total_macs, step.total_backward_macs) == (FORWARD_MACS, BACKWARD_MACS)
    # SGD: p -= lr * g, 2 FLOPs per element: 424 for the steps that ran, none for the skipped one
    assert [_optimizer_flops(p) for p in prof.profiles] == [2 * PARAMS, 0, 2 * PARAMS]
    assert [p.settings.get("skipped_update", False) for p in prof.profiles] == [False, True, False]
    # unscaling is the step's update machinery; GradScaler's update runs after the optimizer's step,
    # so it is counted at the start of the next step (the skipped step's own update ends that step)
    updates = [[r.target for r in step.records if r.phase == "optimizer" and r.target.startswith("aten._amp")]
               for step in prof.profiles]
    unscale, update = "aten._amp_foreach_non_finite_check_and_unscale_", "aten._amp_update_scale_"
    assert updates == [[unscale], [update, unscale, update], [unscale]]
    for step in prof.profiles:
        assert all(r.module_path == "" for r in step.records if r.phase in ("loss", "optimizer")
                   and r.op != "optimizer_step")


def test_two_training_profilers_interleaved_in_one_thread() -> None:
    a, b = _mlp(0), _mlp(1, hidden=32)
    opt_a, opt_b = torch.optim.SGD(a.parameters(), lr=0.1), torch.optim.SGD(b.parameters(), lr=0.1)
    (x, y), = _data(1)
    before = _hooks_and_modes()
    prof_a, prof_b = TrainingProfiler(a, opt_a), TrainingProfiler(b, opt_b)
    prof_a.start_profile()
    prof_b.start_profile()
    for model, opt in ((a, opt_a), (b, opt_b), (a, opt_a)):
        F.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    prof_a.stop_profile()  # stopped in the order they were started: not a stack
    F.mse_loss(b(x), y).backward()
    opt_b.step()
    prof_b.stop_profile()
    assert _hooks_and_modes() == before and installed() == {"threads": 0, "recordings": 0, "global_hooks": 0}
    with torch.no_grad():
        a(x), b(x)  # the models run as before
    # a: 2 steps of its own (576 MACs forward, 768 backward); b (hidden 32): 3*8*32 + 3*32*4 = 1152
    # forward, dW 768 + dX 384 + dW 384 = 1536 backward; neither saw the other's work
    assert [(p.total_macs, p.total_backward_macs) for p in prof_a.profiles] == [(576, 768)] * 2
    assert [(p.total_macs, p.total_backward_macs) for p in prof_b.profiles] == [(1152, 1536)] * 2
    assert [_optimizer_flops(p) for p in prof_a.profiles] == [2 * PARAMS] * 2


def test_a_propagate_nested_in_a_profiled_step_and_one_inside_a_model() -> None:
    a, b = _mlp(0), _mlp(1, hidden=32)
    opt_a = torch.optim.SGD(a.parameters(), lr=0.1)
    (x, y), = _data(1)
    alone = TorchFLOPsByFX(b)
    alone.propagate(x)
    with TrainingProfiler(a, opt_a) as prof:
        loss = F.mse_loss(a(x), y)
        counter = TorchFLOPsByFX(b)
        counter.propagate(x)  # another model profiled in the middle of a's step
        loss.backward()
        opt_a.step()
    assert (prof.profiles[0].total_macs, prof.profiles[0].total_backward_macs) == (576, 768)
    assert counter.total_flops == alone.total_flops and counter.total_macs == 1152

    class Outer(nn.Module):  # a model whose forward profiles a submodel of its own
        def __init__(self) -> None:
            super().__init__()
            self.inner = _mlp(2)
            self.inner_counter = TorchFLOPsByFX(self.inner)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner_counter.propagate(x) * 2

    outer = Outer()
    outer_counter = TorchFLOPsByFX(outer)
    outer_counter.propagate(x)
    assert outer.inner_counter.total_macs == 576  # the inner recording: its model's work
    assert outer_counter.total_macs == 576  # the outer one: its forward ran the inner model too
    assert installed()["recordings"] == 0


def test_nothing_stays_installed_after_many_profiles_errors_and_interrupts() -> None:
    model = _mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = _data(1)
    before = _hooks_and_modes()

    class Interrupts(nn.Module):
        def __init__(self, error: BaseException) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)
            self.error = error

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise self.error

    counter = TorchFLOPsByFX(model)
    for i in range(200):
        counter.propagate(data[0][0], loss_fn=(lambda out: out.sum()) if i % 2 else None)
    with TrainingProfiler(model, optimizer) as prof:
        for _ in range(200):
            x, y = data[0]
            F.mse_loss(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
    assert len(prof.profiles) == 200
    for error in (RuntimeError("boom"), KeyboardInterrupt(), SystemExit(3)):
        with pytest.raises(type(error)):
            TorchFLOPsByFX(Interrupts(error)).propagate(data[0][0])
    assert _hooks_and_modes() == before
    assert installed() == {"threads": 0, "recordings": 0, "global_hooks": 0}
    assert torch.equal(counter.propagate(data[0][0]), model(data[0][0]))  # and profiling still works


class _RaisesIn(nn.Module):
    """Raises ``error`` inside a module kept whole (a Linear: its node's ops run natively) or in its
    own forward."""

    def __init__(self, error: BaseException, in_leaf: bool) -> None:
        super().__init__()
        self.fc = _RaisingLinear(8, 8, error) if in_leaf else nn.Linear(8, 8)
        self.error, self.in_leaf = error, in_leaf

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.fc(x))
        if not self.in_leaf:
            raise self.error
        return y


class _RaisingLinear(nn.Linear):
    def __init__(self, n: int, m: int, error: BaseException) -> None:
        super().__init__(n, m)
        self.error = error

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # overrides forward: recorded op by op
        super().forward(x)
        raise self.error


@pytest.mark.parametrize("in_leaf", [False, True])
def test_keyboard_interrupt_and_out_of_memory_come_out_as_themselves(in_leaf: bool) -> None:
    x = torch.randn(2, 8)
    before = _hooks_and_modes()
    with pytest.raises(KeyboardInterrupt) as interrupt:
        TorchFLOPsByFX(_RaisesIn(KeyboardInterrupt(), in_leaf)).propagate(x)
    assert type(interrupt.value) is KeyboardInterrupt and not getattr(interrupt.value, "__notes__", None)
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    caught = None
    try:  # a user's back-off, as written around a plain call
        TorchFLOPsByFX(_RaisesIn(oom, in_leaf)).propagate(x)
    except torch.OutOfMemoryError as e:
        caught = e
    assert caught is oom  # the very exception, with a note naming where it happened
    assert any("torch_flops:" in note for note in caught.__notes__)
    assert _hooks_and_modes() == before
    assert TorchFLOPsByFX(_mlp()).propagate(x).shape == (2, 4)  # nothing left half-installed


def test_a_recording_started_in_another_thread_says_so() -> None:
    model, data = _mlp(), _data(2)
    prof = TrainingProfiler(model)
    prof.start_profile()

    def loop() -> None:
        for x, y in data:
            F.mse_loss(model(x), y).backward()

    thread = threading.Thread(target=loop)
    thread.start()
    thread.join()
    prof.stop_profile()
    with pytest.raises(RuntimeError, match=r"the model ran 2 time\(s\) in other threads.*start_profile\(\) in the "
                                           r"thread that runs the training loop"):
        prof.get_total_flops()


def test_an_optimizer_of_another_model_is_refused_before_the_first_step() -> None:
    model, other = _mlp(0), _mlp(1)
    with pytest.raises(ValueError, match="holds none of the model's parameters"):
        TrainingProfiler(model, torch.optim.SGD(other.parameters(), lr=0.1))
    TrainingProfiler(model, torch.optim.SGD([*other.parameters(), *model.parameters()], lr=0.1))  # some: fine


@pytest.mark.parametrize("name, make, read, written", [
    # SGD without momentum: read p and g, write p: 212 float32 elements -> 2*848 = 1696 read, 848 written
    ("sgd", lambda ps: torch.optim.SGD(ps, lr=0.1), 2 * 4 * PARAMS, 4 * PARAMS),
    # AdamW: read p, g, exp_avg, exp_avg_sq; write p, exp_avg, exp_avg_sq -> 4*848 = 3392 read, 2544 written
    ("adamw", lambda ps: torch.optim.AdamW(ps, lr=0.1), 4 * 4 * PARAMS, 3 * 4 * PARAMS),
])
def test_optimizer_records_carry_bytes_and_a_step_has_a_roofline(name: str, make: Any, read: int,
                                                                 written: int) -> None:
    model = _mlp()
    optimizer = make(model.parameters())
    (x, y), = _data(1)
    with TrainingProfiler(model, optimizer) as prof:
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    step = prof.profiles[0]
    updates = [r for r in step.records if r.op == "optimizer_step"]
    assert sum(r.bytes_read for r in updates) == read and sum(r.bytes_written for r in updates) == written
    # the first Linear's weight alone: 8*16 = 128 elements of 4 bytes, read twice (SGD) or 4 times (AdamW)
    assert updates[0].bytes_read == read // PARAMS * 128
    line = roofline(step, "h100-sxm")
    by_name = {row.name: row for row in line.nodes}
    h100 = line.hardware
    row = by_name[updates[0].name]
    # memory time = bytes / bandwidth: (read + written) of the weight's update over 3.35 TB/s
    assert row.memory_time_ms == pytest.approx((updates[0].bytes_read + updates[0].bytes_written) / h100.memory_bandwidth
                                               * 1e3)
    assert row.bound == "memory"
    assert sum(r.roofline_time_ms for r in line.nodes) == pytest.approx(line.total_roofline_ms)


def test_phases_of_a_propagate_with_a_loss() -> None:
    counter = TorchFLOPsByFX(_mlp())
    (x, y), = _data(1)
    counter.propagate(x, loss_fn=lambda out: F.mse_loss(out, y))
    phases = {r.name: r.phase for r in counter.records}
    assert phases["mse_loss"] == "loss" and phases["_0"] == "forward"
    # the model's nodes carry the backward; the loss node its own (mse backward: no MACs)
    assert counter.total_backward_macs == BACKWARD_MACS
    assert counter.total_macs == FORWARD_MACS


def test_twin_models_under_two_counters_give_the_same_profile() -> None:
    model = _mlp()
    x = torch.randn(3, 8)
    twin = copy.deepcopy(model)
    first, second = TorchFLOPsByFX(model), TorchFLOPsByFX(twin)
    first.propagate(x)
    second.propagate(x)
    assert [(r.name, r.flops) for r in first.records] == [(r.name, r.flops) for r in second.records]


def test_the_cli_prints_a_training_steps_roofline(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from torch_flops.cli import main

    (tmp_path / "mlp_for_roofline.py").write_text(
        "from torch import nn\n\ndef build():\n    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code = main(["mlp_for_roofline:build", "--input-shape", "3,8", "--train", "--optimizer", "adamw", "--loss", "mse",
                 "--hardware", "h100-sxm", "--roofline", "--quiet"])
    out = capsys.readouterr().out
    assert code == 0
    # AdamW on Linear(8, 16)'s weight (128 float32 elements): read p, g, m, v = 4*512 = 2048 B; write
    # p, m, v = 1536 B -> 3584 B = 3.50 KiB, predicted memory-bound, listed among the slowest nodes
    row = next(line for line in out.splitlines() if line.startswith("adamw_0_weight"))
    assert "3.50 KiB" in row and "memory" in row


def test_a_long_run_shows_its_nodes_on_a_terminal() -> None:
    import io

    from torch_flops.progress import Progress

    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.fc(x)) + 1

    model = nn.Sequential(*[Tiny() for _ in range(200)])  # 3 nodes a block: 600 nodes and the input/output
    for tracer in ("auto", "fx"):
        stream = io.StringIO()
        progress = Progress(True, stream, delay_s=0.0, interval_s=0.0)
        counter = TorchFLOPsByFX(model, tracer=tracer)
        counter._front.call((torch.randn(1, 4),), {}, loss_fn=None, backward=False, progress=progress)
        progress.done()
        text = stream.getvalue()
        # every 256 nodes, rewritten in place: "run 1/1: 256 nodes, 0.0 s", then cleared
        assert "torch_flops: run 1/1: 256 nodes, " in text and text.endswith("\r\033[K")
    quiet = io.StringIO()
    Progress(None, quiet).nodes(256)  # not a terminal: nothing
    assert quiet.getvalue() == ""


def test_steps_share_a_plan_only_when_they_ran_the_same_nodes() -> None:
    from torch_flops.generation import _Session

    class Switch(nn.Module):
        """Each call: x @ w, then relu (calls 1, 2) or times the call's number minus 1 (calls 3, 4, 5:
        the same nodes, with another argument each time)."""

        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(8, 8))
            self.calls = 0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            y = x @ self.w
            return y.relu() if self.calls < 3 else y * self.calls - 1

    model = Switch()
    x = torch.randn(4, 8)
    session = _Session(model, torch.device("cpu"), None)
    _, steps, _ = session.run(lambda: [model(x) for _ in range(5)])
    plans = [step.graph.plan for step in steps]
    # calls 1 and 2 ran the same nodes: one plan; calls 3, 4, 5 each differ from the one before (relu -> mul,
    # then another factor: 3, 4, 5), so each builds its own
    assert plans[1] is plans[0] and len({id(p) for p in plans}) == 4
    targets = [[p.target for p in plan.nodes if p.node.op.startswith("call_")] for plan in plans]
    assert targets == [["Tensor.matmul", "Tensor.relu"]] * 2 + [["Tensor.matmul", "Tensor.mul", "Tensor.sub"]] * 3
    assert [plan.nodes[-3].node.args[1] for plan in plans[2:]] == [3, 4, 5]


class DropsAValueTheGraphStillReads(nn.Module):
    """``torch.topk(x, 2)[1]`` drops the values at once while the graph's tuple output lives on
    (its item 1 is read later); the next tensor of the same size gets the freed address from the
    allocator. (MoE routers of transformers do exactly this.)"""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idx = torch.topk(x, 2)[1]  # values (4, 2) float32, 32 bytes, freed here; indices (4, 2) int64
        z = torch.zeros(4, 2)  # 32 bytes: a new storage, maybe at the values' old address
        return z + idx


def test_a_new_storage_at_a_freed_address_is_counted() -> None:
    counter = TorchFLOPsByFX(DropsAValueTheGraphStillReads())
    counter.propagate(torch.randn(4, 8))
    zeros = next(r for r in counter.records if r.target == "torch.zeros")
    assert zeros.mem_delta == 4 * 2 * 4  # its own 32 bytes, whatever address the allocator gave it
    # x is freed after topk (its last reader); topk's pair (the graph holds it for item 1) and z live
    assert zeros.mem_after == (4 * 2 * 4 + 4 * 2 * 8) + 4 * 2 * 4


def test_a_training_profiler_stopped_from_another_thread_says_so_and_stays_whole() -> None:
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    prof = TrainingProfiler(model, optimizer)
    prof.start_profile()
    errors: list[BaseException] = []

    def stop() -> None:
        try:
            prof.end_profile()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    thread = threading.Thread(target=stop)
    thread.start()
    thread.join()
    assert len(errors) == 1 and "thread that called start_profile" in str(errors[0])
    assert installed()["recordings"] == 1  # still running, and said so
    prof.end_profile()  # from its own thread: everything comes off
    assert installed() == {"threads": 0, "recordings": 0, "global_hooks": 0}
    assert not _get_current_dispatch_mode_stack() and not _get_current_function_mode_stack()


def test_propagate_called_from_inside_its_own_model_is_refused() -> None:
    class CallsItsProfiler(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.counter: Any = None

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.counter.propagate(x)
            return self.lin(x)

    model = CallsItsProfiler()
    model.counter = TorchFLOPsByFX(model)
    with pytest.raises(RuntimeError, match="from inside the model it is profiling"):
        model.counter.propagate(torch.randn(2, 4))
    assert installed() == {"threads": 0, "recordings": 0, "global_hooks": 0}
    model.counter = TorchFLOPsByFX(nn.Linear(4, 4))  # another counter inside: fine
    outer = TorchFLOPsByFX(model)
    outer.propagate(torch.randn(2, 4))
    assert outer.total_flops > 0


def test_a_model_nested_as_deep_as_eager_allows_is_profiled() -> None:
    limit = sys.getrecursionlimit()
    depth = (limit - 100) // 4  # each level is 3 frames eagerly (Module.__call__, _call_impl, forward)
    model = nn.Sequential()
    inner = model
    for _ in range(depth):
        inner.add_module("d", nn.Sequential())
        inner = inner.d
    inner.add_module("lin", nn.Linear(2, 2))
    x = torch.ones(1, 2)
    assert model(x).shape == (1, 2)  # eager runs it
    counter = TorchFLOPsByFX(model)
    counter.propagate(x)
    assert counter.total_flops == 2 * 2 * 2 + 2  # the one Linear: 4 MACs x 2 + 2 bias adds
    assert sys.getrecursionlimit() == limit  # put back


def test_the_recursion_limit_comes_back_whatever_the_order_of_stops() -> None:
    limit = sys.getrecursionlimit()
    m1, m2 = nn.Sequential(nn.Linear(4, 4)), nn.Sequential(nn.Sequential(nn.Linear(4, 4)))
    a, b = TrainingProfiler(m1), TrainingProfiler(m2)
    a.start_profile()
    b.start_profile()
    # raised by the most the running recordings need: 2 frames a level + 100 (m2 is 2 levels deep)
    assert sys.getrecursionlimit() == limit + 2 * 2 + 100
    a.stop_profile()  # stopped in start order, not last-in first-out
    assert sys.getrecursionlimit() == limit + 2 * 2 + 100
    b.stop_profile()
    assert sys.getrecursionlimit() == limit
    a.end_profile()
    b.end_profile()

    def work() -> None:  # overlapping recordings in threads
        model = nn.Sequential(nn.Linear(4, 4))
        for _ in range(5):
            TorchFLOPsByFX(model).propagate(torch.randn(2, 4))

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sys.getrecursionlimit() == limit


def test_a_finished_recording_leaves_no_reference_cycle() -> None:
    """The thread's hub and its two modes are freed as the recording ends, by reference counting
    alone, not left as a cycle for some later garbage collection (inside the user's code)."""
    import gc
    import weakref

    from torch_flops import session

    hubs: list[Any] = []

    class Spy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            hub = session._HUBS[threading.get_ident()]
            hubs.extend(weakref.ref(o) for o in (hub, hub.function_mode, hub.dispatch_mode))
            return self.fc(x)

    enabled = gc.isenabled()
    gc.disable()
    try:
        TorchFLOPsByFX(Spy()).propagate(torch.randn(2, 4))
        assert len(hubs) == 3 and all(ref() is None for ref in hubs)  # nothing waits for a collection
    finally:
        if enabled:
            gc.enable()

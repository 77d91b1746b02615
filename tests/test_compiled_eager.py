"""profile_compiled counts the ops that run eagerly outside the compiled graphs.

Code between graph breaks, a frame Dynamo gives up on, a ``torch.compiler.disable``'d function and
autograd's own nodes leave only profiler events; profile_compiled counts their aten ops in one more
untimed call (torch_flops.compiled._EagerOps). Each test compares the compiled profile's totals
with hand arithmetic, with torch_flops' eager profile of the same model and with PyTorch's
FlopCounterMode run live on the same eager call (in the flop_counter convention: matmuls only).
Two Inductor compiles in all (forward; forward + backward); the other models compile nothing.
"""

from __future__ import annotations

import copy
import itertools
import threading
import warnings
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import torch_flops
from torch_flops import compiled as C
from torch_flops.report import compiled_text

pytestmark = pytest.mark.usefixtures("inductor_on_cpu")  # conftest: skips without Inductor on CPU


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> None:
    """Each test counts its own graph breaks and recompiles: what earlier tests compiled in this
    process (Dynamo's caches, its recompile counts) is forgotten first."""
    torch._dynamo.reset()


class Broken(nn.Module):
    """Two Linear layers with, between them, a ``print`` (a graph break), an ``.item()``-driven
    branch (a graph break) and a ``torch.compiler.disable``'d function whose two matmuls run eagerly.
    ``scalar``: the output summed (a loss for ``backward=True``)."""

    def __init__(self, scalar: bool = False) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 4)
        self.scalar = scalar

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x)
        print("torch_flops test: a graph break between the layers")
        if y.sum().item() > -1e30:  # always true
            y = y * 2.0
        out = self.b(self.mix(y))
        return out.sum() if self.scalar else out

    @torch.compiler.disable
    def mix(self, y: torch.Tensor) -> torch.Tensor:
        return y @ y.t() @ y


class Routed(nn.Module):
    """A routing loop over ``nonzero()`` indices: Dynamo gives up on the frame (it compiles no
    graph), and the whole forward runs as plain Python."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(8, 3)
        self.experts = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idx = self.gate(x).argmax(-1)
        out = torch.zeros_like(x)
        for e in range(3):
            rows = (idx == e).nonzero().squeeze(1)
            if rows.numel():
                out[rows] = self.experts[e](x[rows])
        return out.sum()


def _profile(model: nn.Module, x: torch.Tensor, backward: bool) -> SimpleNamespace:
    """The compiled profile (its warnings kept), and the eager references on copies of the model."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = C.profile_compiled(model, x, warmup=0, repeat=2, backward=backward)
    eager = torch_flops.TorchFLOPsByFX(copy.deepcopy(model))
    with torch.set_grad_enabled(backward):
        eager.propagate(x, backward=backward)
    reference = copy.deepcopy(model)
    with FlopCounterMode(display=False) as flop_counter, torch.set_grad_enabled(backward):
        out = reference(x)
        if backward:
            out.backward()
    return SimpleNamespace(result=result, eager_total=eager.total_flops + eager.total_backward_flops,
                           flop_counter=flop_counter.get_total_flops(),
                           unsupported=[w for w in caught if issubclass(w.category, torch_flops.UnsupportedOpWarning)])


def _eager(result: C.CompiledProfile, phase: str | None = None) -> list[Any]:
    return [r for r in result.profile.records if r.op == "eager" and (phase is None or r.phase == phase)]


@pytest.fixture(scope="module")
def broken() -> SimpleNamespace:
    torch.manual_seed(0)
    x = torch.randn(2, 8)
    return SimpleNamespace(forward=_profile(Broken(), x, backward=False),
                           backward=_profile(Broken(scalar=True), x, backward=True))


def test_graph_breaks_forward_counted(broken: SimpleNamespace) -> None:
    run = broken.forward
    result = run.result
    assert len(result.graph_breaks) >= 3 and result.recompiles == 0  # print, .item(), the disabled call
    # x (2, 8). a: addmm 2*2*8*8 = 256 + bias 2*8 = 16 -> 272; y.sum() for .item(): 16 adds; y * 2.0: 16;
    # mix (eager): y @ y.t() 2*2*2*8 = 64, then (2, 2) @ (2, 8) 2*2*8*2 = 64; b: 2*2*8*4 = 128 + 8 -> 136
    assert result.profile.total_flops == 272 + 16 + 16 + 64 + 64 + 136 == run.eager_total
    # flop_counter convention: the matmuls only, 256 + 64 + 64 + 128 = 512, as FlopCounterMode counts live
    assert result.profile.with_convention("flop_counter").total_flops == run.flop_counter == 512
    eager = {r.target: r for r in _eager(result)}
    assert [r.flops for r in _eager(result) if r.target == "aten.matmul"] == [64, 64]
    assert eager["aten.item"].flops == 0 and eager["aten.t"].flops == 0
    assert all(r.time_ms is not None for r in _eager(result))  # timed by the profiled calls
    assert not run.unsupported  # everything is counted: nothing to warn about
    text = compiled_text(result.profile.settings)
    assert "4 op(s) ran eagerly outside the compiled graphs: 128 FLOPs counted" in text and "not counted" not in text


def test_graph_breaks_backward_counted(broken: SimpleNamespace) -> None:
    run = broken.backward
    result = run.result
    # forward as above + the loss's sum, 2*4 = 8 adds: 568 + 8 = 576. Backward: b's input and weight
    # gradients 2*2*4*8 = 128 each + its bias gradient 8 = 264; mix's (eager, autograd's own nodes)
    # four mms of 2*2*2*8 = 64 + y's three gradients added, 2 * 16 = 32 -> 288; the * 2.0: 16;
    # a's weight gradient 2*8*2*8 = 256 + bias 16 = 272 (x needs none)
    assert result.profile.total_flops == 576 + 264 + 288 + 16 + 272 == run.eager_total
    assert sum(r.flops for r in _eager(result, "backward")) == 288
    assert result.profile.with_convention("flop_counter").total_flops == run.flop_counter == 512 + 3 * 256
    assert not run.unsupported


def test_frame_dynamo_gives_up_on_counted() -> None:
    torch.manual_seed(0)
    x = torch.randn(16, 8)
    for backward in (False, True):
        run = _profile(Routed(), x, backward)
        result = run.result
        assert result.dynamo.frames_total == 1 and result.dynamo.frames_ok == 0  # no graph: all of it ran eagerly
        assert result.profile.total_flops == run.eager_total and not run.unsupported
        assert result.profile.with_convention("flop_counter").total_flops == run.flop_counter
        # the gate, 16 rows x 8 x 3 MACs, and each expert on its rows, 16 rows in all x 8 x 8 MACs; the
        # backward: the experts' weight gradients, 16 x 8 x 8 MACs again (x needs no gradient, and none
        # reaches the gate through argmax)
        assert result.profile.total_macs == 16 * 8 * 3 + 16 * 8 * 8 + (16 * 8 * 8 if backward else 0)
        assert "1 frame(s) Dynamo did not compile" in compiled_text(result.profile.settings)


def test_loss_counted_as_eager_counts_it() -> None:
    """The loss (``loss_fn``) runs eagerly too: its ops are records of phase "loss", as in eager's
    profile. A forward Dynamo does not compile (disabled): no compile here."""

    class Off(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(8, 4)

        @torch.compiler.disable
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.a(x)

    torch.manual_seed(0)
    model, x = Off(), torch.randn(2, 8)
    result = C.profile_compiled(model, x, warmup=0, repeat=1, loss_fn=lambda out: out.pow(2).sum())
    eager = torch_flops.TorchFLOPsByFX(copy.deepcopy(model))
    eager.propagate(x, loss_fn=lambda out: out.pow(2).sum())
    loss = _eager(result, "loss")
    assert [r.target for r in loss] == ["aten.pow", "aten.sum"]
    assert sum(r.flops for r in loss) == sum(r.flops or 0 for r in eager.records if r.phase == "loss") > 0
    # forward 2*2*8*4 + 8 = 136; the loss on (2, 4): pow 8 + sum 8 = 16; the backward: pow's, grad * 2 *
    # out^1, 3 x 8 = 24, and a's weight gradient 2*4*2*8 = 128 + its bias's 8 = 136 (x needs none)
    assert result.profile.total_flops == 136 + 16 + 24 + 136 == eager.total_flops + eager.total_backward_flops
    assert not [r for r in result.profile.records if r.op == "overhead" and r.phase == "loss"]


def test_ops_left_uncounted_are_named() -> None:
    """A program whose eager ops change from call to call: the counting call ran other ops than the
    profiled calls, so its counts are not used; the eager ops stay uncounted and are named."""

    class Alternating(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(8, 8)
            self.calls = itertools.count(1)

        @torch.compiler.disable
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            n = next(self.calls)  # a counter inside an object of its own: what the extra calls cannot undo
            y = self.a(x)
            return y.relu() if n % 2 else y.sigmoid()

    with pytest.warns(torch_flops.UnsupportedOpWarning, match=r"ran eagerly outside the compiled graphs") as caught:
        result = C.profile_compiled(Alternating(), torch.randn(2, 8), warmup=0, repeat=1)
    message = str(caught[0].message)
    assert "ran other ops outside the graphs than the profiled calls" in message and "aten.linear" in message
    assert all(r.flops is None for r in _eager(result)) and result.profile.total_flops == 0
    assert "not counted" in compiled_text(result.profile.settings)


class _MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


class _Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.Linear(8, 8)
        self.sub = torch.compile(_MLP())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.sub(self.pre(x))


def test_a_compiled_submodule_in_a_training_step_and_a_generation_loop() -> None:
    # forward: 2 x (8x8 + 8x16 + 16x4) MACs x 2 = 1024, bias adds 2 x 28 = 56, relu 32 -> 1112
    torch.manual_seed(0)
    model = _Outer()
    x = torch.randn(2, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with torch_flops.TrainingProfiler(model, optimizer) as prof:
        torch.nn.functional.mse_loss(model(x), torch.zeros(2, 4)).backward()
        optimizer.step()
    forward = [r for r in prof.profiles[0].records if r.phase == "forward"]
    assert sum(r.flops or 0 for r in forward) == 1112

    def loop() -> None:
        with torch.no_grad():
            for _ in range(2):
                model(x)

    gp = torch_flops.profile_generate(model, loop=loop)
    assert [p.total_flops for p in gp.profiles] == [1112, 1112]


def test_a_compiled_submodule_of_an_eager_model_is_recorded_eagerly() -> None:
    class Outer(_Outer):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.compile(torch.tanh)(super().forward(x))  # and a compiled function

    torch.manual_seed(0)
    model = Outer()
    x = torch.randn(2, 8)
    with torch.no_grad():
        expected = model(x)
        profile = torch_flops.profile(model, x)
    # Linears on 2 rows: 2 x (8x8 + 8x16 + 16x4) MACs x 2 = 1024, + bias adds 2 x (8 + 16 + 4) = 56,
    # + relu 2 x 16 = 32, + tanh 2 x 4 = 8 (Dynamo traced the profiler's hooks into its graph and failed)
    assert profile.total_flops == 1024 + 56 + 32 + 8
    assert {"pre", "sub._orig_mod.a", "sub._orig_mod.b"} <= {r.module_path for r in profile.records}
    from torch._dynamo import eval_frame

    assert eval_frame._stance.stance == "default"  # the stance is put back
    with torch.no_grad():
        assert torch.allclose(model(x), expected)  # still runs compiled afterwards


def test_dynamo_s_stance_is_force_eager_while_recording_and_put_back() -> None:
    # once Dynamo is loaded any model may call compiled code (a compiled function): eager while recording
    from torch._dynamo import eval_frame

    seen: list[str] = []

    class Plain(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(eval_frame._stance.stance)  # (the stance is process-wide: other threads see it)
            return x * 2

    torch_flops.profile(Plain(), torch.randn(2))
    torch_flops.profile(_Outer(), torch.randn(2, 8))
    assert seen == ["force_eager"] and eval_frame._stance.stance == "default"


def test_a_compiled_function_the_forward_calls_compiles_as_before_after_a_profile() -> None:
    # called under the recording's dispatch mode, Dynamo skipped it and marked its code never to compile again:
    # every later plain call ran it eagerly, a new shape included
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    @torch.compile(backend="eager")
    def gram(y: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(y @ y.T)

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return gram(self.l(x))

    torch.manual_seed(0)
    model, x = M(), torch.randn(4, 8)
    code = gram._torchdynamo_orig_callable.__code__  # type: ignore[attr-defined]
    expected = model(x)  # compiled: one cache entry
    counter = torch_flops.TorchFLOPsByFX(model)
    assert torch.equal(counter.propagate(x), expected)
    # the Linear 4x8x8 = 256 MACs, the gram product 4x8x4 = 128 MACs, run eagerly and recorded
    assert counter.total_macs == 256 + 128
    model(torch.randn(6, 8))  # a new shape: compiled again, as without the profile
    assert len(_debug_get_cache_entry_list(code)) == 2


def test_a_compiled_submodule_is_counted_and_no_warning_filter_is_left() -> None:
    """torch's OptimizedModule warns at each call while global module hooks exist (under a recording,
    the profiler's: README says so); the counts are the eager module's, and the warning filters are
    left as found (a filter hiding it outlived a recording stopped inside a catch_warnings block)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    model[0] = torch.compile(model[0], backend="eager")
    x = torch.randn(2, 8)
    expected = model(x)
    filters = list(warnings.filters)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        counter = torch_flops.TorchFLOPsByFX(model)
        assert torch.equal(counter.propagate(x), expected)
    assert [w.filename for w in caught if "global hooks" in str(w.message)]  # torch's, for the profiler's hooks
    assert counter.total_flops == 2 * 2 * 8 * 8 + 2 * 8 + 2 * 8  # linear 256 + bias 16 + relu 16
    assert warnings.filters == filters


def _compiled_function_model() -> tuple[nn.Module, Any, list[tuple[int, ...]]]:
    compiles: list[tuple[int, ...]] = []

    def backend(gm: Any, example: Any) -> Any:
        compiles.append(tuple(example[0].shape))
        return gm.forward

    @torch.compile(backend=backend, dynamic=False)
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x) * 2

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return f(self.l(x))

    torch.manual_seed(0)
    return M(), f, compiles


def test_the_profilers_own_eager_calls_leave_a_compiled_function_able_to_compile() -> None:
    # TrainingProfiler's eager shadow of a compiled model and compare_compiled's count of eager kernels ran the
    # model under a dispatch mode without the force_eager stance: f was marked never to compile again
    model, f, compiles = _compiled_function_model()
    compiled = torch.compile(model, backend="eager")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with torch_flops.TrainingProfiler(compiled, optimizer):
        compiled(torch.randn(2, 4)).sum().backward()
        optimizer.step()
    before = len(compiles)
    f(torch.randn(3, 4))
    assert compiles[before:] == [(3, 4)]
    model, f, compiles = _compiled_function_model()
    torch_flops.compare_compiled(model, torch.randn(2, 4), warmup=0, repeat=1)
    before = len(compiles)
    f(torch.randn(5, 4))
    assert compiles[before:] == [(5, 4)]


def test_a_stance_the_user_sets_while_recording_is_kept_and_a_dead_threads_recording_can_be_stopped() -> None:
    from torch._dynamo import eval_frame

    model = nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    profiler = torch_flops.TrainingProfiler(model, optimizer)
    profiler.start_profile()
    try:
        torch.compiler.set_stance("force_eager")  # (equal to the profiler's own: it was put back to default)
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()
    finally:
        profiler.stop_profile()
    try:
        assert eval_frame._stance.stance == "force_eager"
    finally:
        torch.compiler.set_stance("default")
    # a recording whose thread ended without stopping it: any thread stops it now (its hooks and the stance
    # were left to the process, and stop_profile() refused from the main thread)
    held: list[torch_flops.TrainingProfiler] = []

    def worker() -> None:
        profiler = torch_flops.TrainingProfiler(nn.Linear(2, 2))
        profiler.start_profile()
        held.append(profiler)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert eval_frame._stance.stance == "force_eager" and torch.nn.modules.module._global_forward_hooks
    held[0].stop_profile()
    assert eval_frame._stance.stance == "default" and not torch.nn.modules.module._global_forward_hooks


def test_a_function_compiled_inside_the_forward_before_dynamo_was_loaded_compiles_after_the_profile() -> None:
    """Dynamo loaded (or a function first compiled) inside the recording: no stance could be set before, so
    Dynamo met the function under the recording's dispatch mode and marked it never to compile again; the
    codes it first met while the recording ran get their default strategy back."""
    import subprocess
    import sys

    script = """
import sys, torch, torch.nn as nn
from torch_flops import TorchFLOPsByFX
frames = []
def backend(gm, ex):
    frames.append(1)
    return gm.forward
def helper(x):
    return torch.sin(x) * 2
class M(nn.Module):
    def __init__(s):
        super().__init__(); s.l = nn.Linear(4, 4); s.fn = None
    def forward(s, x):
        if s.fn is None:
            s.fn = torch.compile(helper, backend=backend)
        return s.fn(s.l(x))
m = M()
assert "torch._dynamo.eval_frame" not in sys.modules
TorchFLOPsByFX(m).propagate(torch.randn(2, 4))
m(torch.randn(2, 4)); m(torch.randn(3, 4))
print(len(frames))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "2"  # (eagerly in the profile; compiled by the two plain calls after it)


def test_dynamo_s_own_decisions_during_a_compiled_models_profile_stay_its_own() -> None:
    # resetting every code Dynamo first met during a recording (a compiled model profiled by TrainingProfiler)
    # also undid its own decisions: a frame past the recompile limit tried again on the next new shape
    import torch._dynamo
    from torch._dynamo.utils import counters

    def run(profiled: bool) -> dict[str, int]:
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
        compiled = torch.compile(model, dynamic=False, backend="eager")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

        def loop(sizes: list[int]) -> None:
            for n in sizes:
                optimizer.zero_grad()
                compiled(torch.randn(n, 8)).sum().backward()
                optimizer.step()

        with torch._dynamo.config.patch(recompile_limit=2):
            if profiled:
                with torch_flops.TrainingProfiler(compiled, optimizer):
                    loop([2, 3, 4])
            else:
                loop([2, 3, 4])
            counters.clear()
            loop([5, 6])
            return dict(counters["frames"])

    assert run(True) == run(False) == {}

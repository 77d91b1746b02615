"""A torch.compile'd model given to the facade and to the training profiler (item 1 of issue 20).

``TorchFLOPsByFX(torch.compile(model))`` and ``TrainingProfiler(torch.compile(model), optimizer)``
count on the original module's eager run and run the compiled program with nothing of torch_flops
installed. Each test compares with an independent path: the same calls without any profiler (a
plain compiled call or loop, on a deep copy of the model; Dynamo's counters and warnings recorded
around it) and the eager model profiled by torch_flops. Compiles are cheap here (tiny models,
Inductor's on-disk cache); ``torch._dynamo.reset()`` before each compiled run makes every run
compile from scratch, so that Dynamo's counters of two runs compare.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

from torch_flops import Profile, TorchFLOPsByFX, report
from torch_flops.cli import main
from torch_flops.compiled import DynamoStats
from torch_flops.session import installed
from torch_flops.training import TrainingProfiler

pytestmark = pytest.mark.usefixtures("inductor_on_cpu")  # conftest: skips without Inductor on CPU


class Net(nn.Module):
    """Linear(16, 32), BatchNorm (running statistics: a forward's effect), ReLU, Dropout (random
    numbers: the RNG's state), Linear(32, 4)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.bn = nn.BatchNorm1d(32)
        self.drop = nn.Dropout(0.25)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(torch.relu(self.bn(self.fc1(x)))))



def _compiles() -> int:
    from torch._dynamo.utils import counters, get_compilation_metrics

    return len(list(get_compilation_metrics())) + int(counters["frames"]["total"])


class CompileWatch:
    """A wall-clock timer whose marks also note how many frames Dynamo had begun and graphs it had
    compiled: every span torch_flops times (a node, a compiled call) is checked for a compile inside."""

    def __init__(self) -> None:
        self.spans_with_compile = 0
        self.spans = 0

    def tick(self) -> tuple[int, int]:
        return time.perf_counter_ns(), _compiles()

    def finish(self) -> None:
        pass

    def elapsed_ms(self, start: tuple[int, int], end: tuple[int, int]) -> float:
        self.spans += 1
        self.spans_with_compile += end[1] != start[1]
        return (end[0] - start[0]) / 1e6


def _run(fn: Callable[[], Any]) -> tuple[Any, DynamoStats, list[str]]:
    """``fn()`` after ``torch._dynamo.reset()``: its result, Dynamo's counters over it, its warnings."""
    with warnings.catch_warnings():  # Inductor's first import warns (a deprecation inside torch): not the run's
        warnings.simplefilter("ignore")
        import torch._inductor.compile_fx
    torch._dynamo.reset()
    before = DynamoStats.now()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    return result, DynamoStats.now() - before, [str(w.message) for w in caught]


def _counters(stats: DynamoStats) -> tuple[Any, ...]:
    return stats.frames_total, stats.frames_ok, stats.unique_graphs, dict(stats.graph_breaks)


def _nothing_installed() -> bool:
    return installed() == {"threads": 0, "recordings": 0, "global_hooks": 0} and \
        not nn.modules.module._has_any_global_hook()


# ------------------------------------------------------------------ the recording steps aside


def test_recording_steps_aside_and_back() -> None:
    """What a compiled call runs inside: no mode of torch_flops on the stacks (a mode the user pushed
    above ours stays, in place), no global module hook, no hook on the model; all back after. Time
    spent in ``untimed()`` is not the step's."""
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

    from torch_flops.capture import ModelIndex
    from torch_flops.formulas import FORMULAS
    from torch_flops.measure import PerfCounterTimer, make_memory_probe
    from torch_flops.session import Recording

    class UserMode(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            return func(*args, **(kwargs or {}))

    model, x = nn.Linear(4, 4), torch.randn(2, 4)
    table = FORMULAS.copy()
    index = ModelIndex(model, table)
    recording = Recording(index, table, timer=PerfCounterTimer(), device=torch.device("cpu"),
                          memory=make_memory_probe(torch.device("cpu"), "memory_allocated", index.storages))
    with recording, UserMode() as user:
        ours = _get_current_dispatch_mode_stack()[0]
        assert _get_current_dispatch_mode_stack() == [ours, user] and len(_get_current_function_mode_stack()) == 1
        with recording.stepped_aside():
            assert _get_current_dispatch_mode_stack() == [user] and _get_current_function_mode_stack() == []
            assert not nn.modules.module._has_any_global_hook() and not model._forward_pre_hooks
            with recording.stepped_aside(modes=False, hooks=False):  # everything back, for a shadow call
                assert _get_current_dispatch_mode_stack() == [ours, user] and model._forward_pre_hooks
                assert nn.modules.module._has_any_global_hook()
            assert _get_current_dispatch_mode_stack() == [user] and not model._forward_pre_hooks
            model(x)  # not recorded
        assert _get_current_dispatch_mode_stack() == [ours, user] and model._forward_pre_hooks
        with recording.untimed():
            time.sleep(0.3)
        model(x)  # recorded
    assert _nothing_installed() and not model._forward_pre_hooks
    (step,) = recording.steps
    assert step.calls == 1 and step.duration_ms < 150  # the 300 ms asleep left out of the step


# ------------------------------------------------------------------ TorchFLOPsByFX(compiled).propagate


@pytest.fixture(scope="module")
def facade() -> SimpleNamespace:
    torch.manual_seed(0)
    model, x = Net(), torch.randn(8, 16)
    twin = copy.deepcopy(model)
    watch = CompileWatch()

    def profiled() -> tuple[Any, Any]:
        torch.manual_seed(1)
        counter = TorchFLOPsByFX(torch.compile(model), repeat=2, timer=watch)
        return counter, counter.propagate(x)

    def plain() -> Any:
        torch.manual_seed(1)
        return torch.compile(twin)(x)

    (counter, out), stats, caught = _run(profiled)
    rng = torch.get_rng_state()
    plain_out, plain_stats, plain_caught = _run(plain)
    return SimpleNamespace(model=model, twin=twin, x=x, counter=counter, out=out, stats=stats, caught=caught,
                           rng=rng, plain_out=plain_out, plain_stats=plain_stats, plain_caught=plain_caught,
                           plain_rng=torch.get_rng_state(), watch=watch)


def test_propagate_causes_no_graph_break_and_no_warning(facade: SimpleNamespace) -> None:
    # one frame, one graph, no break: as the plain compiled call (before the fix: 7 frames, 6 breaks
    # at the profiler's own hooks and modes, and torch's "global hooks" warning)
    assert _counters(facade.stats) == _counters(facade.plain_stats) == (1, 1, 1, {})
    assert set(facade.caught) <= set(facade.plain_caught)
    assert not any("global hooks" in w or "torch_flops" in w for w in facade.caught)
    assert _nothing_installed()


def test_propagate_counts_equal_eager_under_the_original_paths(facade: SimpleNamespace) -> None:
    eager = TorchFLOPsByFX(copy.deepcopy(facade.model))
    eager.propagate(facade.x)
    nodes = [(r.name, r.module_path, r.target, r.flops, r.macs) for r in facade.counter.records]
    assert nodes == [(r.name, r.module_path, r.target, r.flops, r.macs) for r in eager.records]
    assert (facade.counter.total_flops, facade.counter.total_macs) == (eager.total_flops, eager.total_macs)
    by_path = {r.module_path: r for r in facade.counter.records}
    # fc1: addmm (8, 16) x (16, 32) + bias: 2*8*16*32 + 8*32 = 8448 FLOPs, 4096 MACs;
    # fc2: 2*8*32*4 + 8*4 = 2080 FLOPs, 1024 MACs
    assert (by_path["fc1"].flops, by_path["fc1"].macs) == (8448, 4096)
    assert (by_path["fc2"].flops, by_path["fc2"].macs) == (2080, 1024)
    profile = facade.counter.profile
    assert "_orig_mod" not in " ".join([*profile.module_types, *(r.name for r in profile.records)])
    assert profile.module_types[""] == "Net"


def test_propagate_returns_the_compiled_programs_output_and_effects(facade: SimpleNamespace) -> None:
    # the real call is the compiled model's: its dropout mask (Inductor's random numbers, not
    # eager's), its BatchNorm update, once; the extra runs (eager records, warm-up, timed copies) undone
    assert torch.equal(facade.out, facade.plain_out)
    assert torch.equal(facade.model.bn.running_mean, facade.twin.bn.running_mean)
    assert int(facade.model.bn.num_batches_tracked) == int(facade.twin.bn.num_batches_tracked) == 1
    assert torch.equal(facade.rng, facade.plain_rng)


def test_compile_is_in_an_untimed_warmup(facade: SimpleNamespace) -> None:
    facts = facade.counter.profile.settings["compiled_call"]
    assert facts["frames_compiled"] == 1 and facts["compile_s"] is not None and facts["compile_s"] > 0
    assert facts["compiled_in_timed_calls"] == 0 and facts["calls"] == 2 and facts["forward_ms"] > 0
    # every span the profile timed had no compile inside: each node of the eager records (all but
    # the input and the output, over the 2 runs of repeat=2) and each of the 2 timed compiled calls
    assert facade.watch.spans >= 2 * (len(facade.counter.records) - 2) + 2
    assert facade.watch.spans_with_compile == 0
    text = report.summary_text(facade.counter.profile)
    assert "Compiled:" in text and "untimed warm-up" in text and "1 frame(s) compiled, 0 graph break(s)" in text
    again = Profile.from_json(report.profile_to_json(facade.counter.profile))  # the facts survive JSON
    assert again.settings["compiled_call"] == facts


def test_propagate_with_loss_fn_leaves_the_compiled_steps_gradients() -> None:
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 2)), torch.randn(4, 8)
    twin, reference = copy.deepcopy(model), copy.deepcopy(model)

    def profiled() -> TorchFLOPsByFX:
        counter = TorchFLOPsByFX(torch.compile(model))
        counter.propagate(x, loss_fn=lambda out: out.pow(2).sum())
        return counter

    def plain() -> None:
        torch.compile(twin)(x).pow(2).sum().backward()

    counter, stats, caught = _run(profiled)
    _, plain_stats, plain_caught = _run(plain)
    assert _counters(stats) == _counters(plain_stats) and set(caught) <= set(plain_caught)
    for p, q in zip(model.parameters(), twin.parameters()):
        assert torch.equal(p.grad, q.grad)  # one compiled step's gradients (not two: the eager run's are undone)
    eager = TorchFLOPsByFX(reference)
    eager.propagate(x, loss_fn=lambda out: out.pow(2).sum())
    assert (counter.total_flops, counter.total_backward_flops) == (eager.total_flops, eager.total_backward_flops)
    # the backward's two weight-gradient mms, 2*8*4*16 = 1024 and 2*16*4*2 = 256 FLOPs, and the
    # second Linear's input gradient, 2*4*2*16 = 256, are in it
    assert counter.total_backward_flops > 1024 + 256 + 256
    facts = counter.profile.settings["compiled_call"]
    assert facts["backward_ms"] is not None and facts["compiled_in_timed_calls"] == 0
    assert _nothing_installed()


def test_compiled_model_on_meta_and_with_a_graph_tracer() -> None:
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU()).to("meta")
    counter = TorchFLOPsByFX(torch.compile(model))
    counter.propagate(torch.empty(4, 16, device="meta"))
    assert counter.total_flops == 2 * 4 * 16 * 32 + 4 * 32 + 4 * 32  # addmm + bias, then ReLU's 128 compares
    assert counter.profile.settings["compiled_call"]["calls"] == 0  # no compiled program runs on meta
    with pytest.raises(ValueError, match="_orig_mod"):
        TorchFLOPsByFX(torch.compile(model), tracer="fx")


# ------------------------------------------------------------------ TrainingProfiler(compiled, optimizer)


def _mean_square(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x).pow(2).mean()


def _training(base: nn.Module, batches: list[torch.Tensor], compiled: bool, profiled: bool,
              loss: Callable[[nn.Module, torch.Tensor], torch.Tensor] = _mean_square) -> SimpleNamespace:
    """A copy of ``base`` trained one step per batch with AdamW: eager or compiled, with or
    without a TrainingProfiler around the loop."""
    model = copy.deepcopy(base)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    called = torch.compile(model) if compiled else model

    def run() -> TrainingProfiler | None:
        torch.manual_seed(1)  # the same random numbers for every loop (dropout)
        prof = TrainingProfiler(called, optimizer) if profiled else None
        with prof if prof is not None else contextlib.nullcontext():
            for x in batches:
                loss(called, x).backward()
                optimizer.step()
                optimizer.zero_grad()
        return prof

    prof, stats, caught = _run(run)
    return SimpleNamespace(model=model, optimizer=optimizer, prof=prof, stats=stats, caught=caught)


def _step_counts(prof: TrainingProfiler) -> list[tuple[int, int, int]]:
    return [(p.total_flops, p.total_backward_flops, sum(r.flops or 0 for r in p.records if r.phase == "optimizer"))
            for p in prof.profiles]


def _same_state(a: SimpleNamespace, b: SimpleNamespace) -> bool:
    same_model = all(torch.equal(p, q) for p, q in zip(a.model.state_dict().values(), b.model.state_dict().values()))
    states = zip(a.optimizer.state_dict()["state"].values(), b.optimizer.state_dict()["state"].values())
    return same_model and all(torch.equal(s[k], t[k]) for s, t in states for k in ("exp_avg", "exp_avg_sq"))


@pytest.fixture(scope="module")
def training() -> SimpleNamespace:
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 4))
    batches = [torch.randn(8, 16) for _ in range(2)]
    return SimpleNamespace(eager=_training(base, batches, compiled=False, profiled=True),
                           plain=_training(base, batches, compiled=True, profiled=False),
                           profiled=_training(base, batches, compiled=True, profiled=True))


def test_training_profiler_counts_a_compiled_step_as_eager(training: SimpleNamespace) -> None:
    counts = _step_counts(training.profiled.prof)
    assert len(counts) == 2 and counts == _step_counts(training.eager.prof)
    # forward: two addmm, 2*8*16*32 + 8*32 = 8448 and 2*8*32*4 + 8*4 = 2080, plus BatchNorm, ReLU
    # and the loss (the eager profile's, compared above)
    assert counts[0][0] > 8448 + 2080
    profile = training.profiled.prof.profiles[0]
    assert {r.module_path for r in profile.records} >= {"0", "1", "2", "3"}
    assert "_orig_mod" not in " ".join(profile.module_types)


def test_training_profiler_leaves_the_compiled_loops_state(training: SimpleNamespace) -> None:
    assert _same_state(training.profiled, training.plain)
    assert _counters(training.profiled.stats) == _counters(training.plain.stats) == (1, 1, 1, {})
    assert set(training.profiled.caught) <= set(training.plain.caught)
    assert _nothing_installed()


def test_training_profiler_times_the_compiled_program_untimed_compile(training: SimpleNamespace) -> None:
    first, second = (p.settings["compiled_call"] for p in training.profiled.prof.profiles)
    assert first["compile_s"] is not None and first["frames_compiled"] == 1 and second["compile_s"] is None
    for facts in (first, second):
        assert facts["calls"] == 1 and facts["forward_ms"] > 0 and facts["backward_ms"] > 0
        assert facts["compiled_in_timed_calls"] == 0
    text = training.profiled.prof.print_model_profile(detailed=False, output_file=os.devnull)
    assert "compiled:" in text and "untimed warm-up" in text


def test_training_profiler_over_a_graph_break_and_a_recompile(models: Any) -> None:
    torch.manual_seed(0)
    base, batches = models.Breaks(), [torch.randn(4, 8) for _ in range(2)]
    plain = _training(base, batches, compiled=True, profiled=False)
    profiled = _training(base, batches, compiled=True, profiled=True)
    eager = _training(base, batches, compiled=False, profiled=True)
    # 2 frames (the break) in step 1, the frame after it compiled again for step 2's value: the
    # program's own recompile, done by the profiler in the warm-up, outside the step's times
    assert _counters(profiled.stats) == _counters(plain.stats)
    assert (plain.stats.frames_ok, plain.stats.total_graph_breaks, len(plain.stats.recompile_reasons)) == (3, 1, 1)
    assert _step_counts(profiled.prof) == _step_counts(eager.prof) and _same_state(profiled, plain)
    first, second = (p.settings["compiled_call"] for p in profiled.prof.profiles)
    assert (first["frames_compiled"], first["graph_breaks"], second["frames_compiled"]) == (2, 1, 1)
    assert "item()" in next(iter(first["graph_break_reasons"]))
    assert len(second["recompile_reasons"]) == 1 and second["compile_s"] is not None
    assert first["compiled_in_timed_calls"] == second["compiled_in_timed_calls"] == 0
    assert _nothing_installed()


# ------------------------------------------------------------------ the CLI


TINY = '''
import torch
from torch import nn


class ScaleShiftReLU(nn.Module):
    def forward(self, x):
        return torch.relu(x * 2.0 + 1.0)


def build():
    return nn.Sequential(nn.Linear(16, 32), ScaleShiftReLU(), nn.Linear(32, 8))
'''


@pytest.fixture
def tiny_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "tinycompiled_cli.py").write_text(TINY)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path


def test_cli_compiled(capsys: pytest.CaptureFixture[str], tiny_module: Path) -> None:
    code = main(["tinycompiled_cli:build", "--input-shape", "4,16", "--compiled", "--hardware", "a100-sxm-80gb",
                 "--warmup", "0", "--repeat", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.splitlines()
    assert "saved by fusion" in lines[0] and "1 frame(s), 0 graph break(s)" in lines[0]
    # module 1's mul, add and relu: eager launches 3 kernels, each reading and writing a (4, 32)
    # float32 tensor (512 B): 3 * 1024 B = 3.00 KiB; compiled, one fused kernel reads fc1's output
    # once and writes once: 1.00 KiB, 2.00 KiB saved by fusion; 3 * 4 * 32 = 384 FLOPs on both sides
    row = next(line for line in lines if line.startswith("1 "))
    assert re.search(r"ScaleShiftReLU .* 3 -> 1 +3\.00 KiB +1\.00 KiB +2\.00 KiB +384 +384$", row), row
    assert "compiled program: 1 frame(s)" in out and "Roofline on a100-sxm-80gb" in out
    code = main(["tinycompiled_cli:build", "--input-shape", "4,16", "--compiled", "--train"])
    assert code == 2 and "--train does not apply" in capsys.readouterr().err



def test_training_profiler_over_compiled_gpt2() -> None:
    """transformers' GPT-2 (tiny config) trained with labels: the model computes its loss from its
    logits after graph breaks of its own (a logging call), so the loss's gradient reaches the logits
    inside the compiled program; ``labels`` is the same tensor as ``input_ids``, and Dynamo guards
    on that aliasing (copies for the warm-up keep it)."""
    T = pytest.importorskip("transformers")
    torch.manual_seed(0)
    base = T.GPT2LMHeadModel(T.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=32)).train()
    base.set_attn_implementation("sdpa")
    batches = [torch.randint(0, 64, (2, 8)) for _ in range(2)]

    def lm_loss(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
        return model(ids, labels=ids).loss

    eager, plain, profiled = (_training(base, batches, compiled, profiled, lm_loss)
                              for compiled, profiled in ((False, True), (True, False), (True, True)))
    assert _counters(profiled.stats) == _counters(plain.stats) and plain.stats.total_graph_breaks >= 1
    assert not profiled.stats.recompile_reasons and set(profiled.caught) <= set(plain.caught)
    assert _step_counts(profiled.prof) == _step_counts(eager.prof)
    assert _same_state(profiled, plain)
    assert all(p.settings["compiled_call"]["compiled_in_timed_calls"] == 0 for p in profiled.prof.profiles)
    assert _nothing_installed()


def test_under_inference_mode_the_profiler_s_extra_calls_compile_no_graph_of_their_own() -> None:
    # under torch.inference_mode() a plain clone is an inference tensor, whose dispatch keys differ from
    # the caller's ordinary tensor: the input copies of the warm-up, timed and shadow calls compiled one
    # graph and the real call another (the user's model kept a graph plain calls never make)
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)), torch.randn(3, 8)
    twin = copy.deepcopy(model)

    def plain() -> Any:
        compiled = torch.compile(twin, backend="eager")
        with torch.inference_mode():
            return [compiled(x) for _ in range(3)]

    def profiled() -> Any:
        compiled = torch.compile(model, backend="eager")
        with torch.inference_mode():
            counter = TorchFLOPsByFX(compiled, warmup=1, repeat=2)
            out = counter.propagate(x)
            return [out, compiled(x), counter.profile]

    expected, plain_stats, _ = _run(plain)
    got, stats, _ = _run(profiled)
    assert _counters(stats) == _counters(plain_stats) and plain_stats.unique_graphs == 1
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    # 3 x 16 outputs x 8 MACs + 3 x 4 x 16: 384 + 192 = 576 MACs; FLOPs 2 x 576 + the biases 48 + 12 + ReLU 48
    assert got[2].total_flops == 2 * 576 + 48 + 12 + 48

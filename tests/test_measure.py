"""Tests for time and memory measurement: live-tensor bytes per node (CPU and meta), timers,
warmup/repeat and the median over repeats."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from torch_flops import Status, TorchFLOPsByFX
from torch_flops.measure import (
    CudaEventTimer,
    LiveTensors,
    NullTimer,
    PerfCounterTimer,
    make_memory_probe,
    make_timer,
    storage_entries,
)

# --------------------------------------------------------------------------- live tensor bytes

# MemoryChain (tests/conftest.py) on a float32 (4, 256) input: 4*256*4 = 4096 B. A value is freed
# right after the node that uses it last, so the next node's mem_before drops. Parameters never count.
#            node:     (mem_before, mem_after, mem_delta)
CHAIN_MEMORY = {
    "x": (0, 4096, 4096),  # the input becomes live: 4096 B
    "mul": (4096, 8192, 4096),  # x * 2: new (4, 256) storage +4096; x freed after (last use)
    "view": (4096, 4096, 0),  # a view shares mul's storage: +0; mul's value freed, storage kept by view
    "add_": (4096, 4096, 0),  # in place on the same storage: +0; view's value freed, add_ keeps it
    "w": (4096, 4096, 0),  # get_attr of a parameter (128*128*4 = 65536 B): excluded, +0
    "matmul": (4096, 8192, 4096),  # (8, 128) @ (128, 128) -> (8, 128): 8*128*4 = 4096 B; add_ freed after
    "relu": (4096, 8192, 4096),  # new (8, 128) storage; matmul freed after
    "sum_1": (4096, 4128, 32),  # (8,) float32 = 32 B; relu freed after
    "output": (32, 32, 0),  # the output node holds nothing new
}
CHAIN_FLOPS = {
    "mul": 1024,  # 4*256 products
    "add_": 1024,  # 4*256 adds
    "matmul": 2 * 8 * 128 * 128,  # 2*M*K*N = 262144
    "relu": 1024,  # 8*128
    "sum_1": 1024,  # one add per input element
}


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_live_tensor_bytes_per_node_by_hand(models: Any, device: str) -> None:
    model = models.MemoryChain().to(device)
    counter = TorchFLOPsByFX(model)
    with torch.no_grad():
        out = counter.propagate(torch.randn(4, 256, device=device))
    assert out.shape == (8,) and out.device.type == device
    assert [r.target for r in counter.records][1:8] == [
        "Tensor.mul", "Tensor.view", "Tensor.add_", "w", "Tensor.matmul", "torch.relu", "Tensor.sum"]
    got = {r.name: (r.mem_before, r.mem_after, r.mem_delta) for r in counter.records}
    assert list(got) == list(CHAIN_MEMORY)  # the node order the table above assumes
    assert got == CHAIN_MEMORY
    assert counter.max_memory == 8192  # max over every node's before/after
    assert counter.print_max_memory(show=False) == 8192
    assert counter.profile.memory_source == "live_tensors"
    flops = {r.name: r.flops for r in counter.records if r.status is Status.COUNTED}
    assert flops == CHAIN_FLOPS
    assert counter.total_macs == 8 * 128 * 128  # 131072


def test_meta_and_cpu_memory_agree_on_a_zoo_model() -> None:
    from torch_flops import zoo

    results = []
    for device in ("cpu", "meta"):
        with torch.device(device):
            model = zoo.unet(base_channels=4, depth=2).eval()
        (x,) = zoo.unet_example_inputs(1, device=device, image_size=16)
        counter = TorchFLOPsByFX(model)
        with torch.no_grad():
            counter.propagate(x)
        results.append([(r.name, r.mem_before, r.mem_after, r.flops) for r in counter.records])
    assert results[0] == results[1]


def test_values_without_users_are_freed_at_once() -> None:
    class Unused(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (4, 256) float32, 4096 B
            a = x * 2  # +4096
            a.add_(1)  # in place; the returned value is discarded
            b = a * 3  # +4096; a (mul) used for the last time here
            return b.sum()  # 4 B

    counter = TorchFLOPsByFX(Unused())
    counter.propagate(torch.randn(4, 256))
    got = {r.name: (r.mem_before, r.mem_after) for r in counter.records}
    assert got["mul_1"] == (4096, 8192)
    # after mul_1, the storage of a (held by mul and add_) is no longer used: only b is live
    assert got["sum_1"] == (4096, 4100)
    assert got["output"] == (4, 4)


def test_live_tensors_counts_storages_once() -> None:
    live = LiveTensors()
    t = torch.zeros(4, 8)  # 128 B
    live.hold("a", storage_entries(t))
    live.hold("b", storage_entries(t.view(32)))  # same storage
    live.hold("c", storage_entries((t[0], torch.zeros(2, dtype=torch.float64))))  # view + a new 16 B storage
    assert live.bytes == 128 + 16
    live.release("a")
    live.release("b")
    assert live.bytes == 128 + 16  # still held by c's view
    live.release("c")
    assert live.bytes == 0
    live.release("never-held")  # releasing an unknown key is a no-op
    assert live.bytes == 0


def test_live_tensors_excludes_parameters() -> None:
    fc = nn.Linear(4, 4)
    live = LiveTensors(LiveTensors.storage_keys(fc.parameters()))
    live.hold("w", storage_entries(fc.weight))
    live.hold("wt", storage_entries(fc.weight.t()))
    assert live.bytes == 0
    live.hold("x", storage_entries(torch.zeros(3)))  # 12 B
    assert live.bytes == 12


def test_live_tensors_made_peak_leaves_outside_storages_out() -> None:
    """One replay gives the live bytes and the peak of those the run made itself: storages of its
    inputs (outside) count in the first, never in the second, also through a view or a value
    holding an input's storage beside a new one."""
    live = LiveTensors(outside_keys=frozenset({1}))
    entries = [
        (1, 100),  # 0: the input (outside)
        (2, 40),  # 1: a new 40 B storage
        ((1, 100), (3, 60)),  # 2: a tuple: a view of the input + a new 60 B storage
        (4, 10),  # 3: a new 10 B storage, after node 1 died
        (1, 120),  # 4: the input grown in place to 120 B (outside: not made)
    ]
    frees = [[], [], [1], [2], []]
    before, after = live.timeline(entries, frees)
    # live: 0 -> 100 -> 140 -> 200 (then 40 freed: 160) -> 170 (then node 2's 60 freed: 110) -> 130
    assert before == [0, 100, 140, 160, 110] and after == [100, 140, 200, 170, 130]
    # made: 0, 40, 100 (40 + 60: the peak), then 60, 70, then 10, 10
    assert live.made_peak == 100 and live.made == 10


# --------------------------------------------------------------------------- time


def test_cpu_time_for_every_call_node(models: Any) -> None:
    counter = TorchFLOPsByFX(models.MixedModel())
    counter.propagate(torch.randn(4, 16))
    for r in counter.records:  # the input and output nodes run nothing: no time
        if r.op.startswith("call_"):
            assert isinstance(r.time_ms, float) and r.time_ms > 0, r.name
        else:
            assert r.time_ms is None
    total = counter.total_time_ms
    assert total is not None and total > 0
    assert total == pytest.approx(sum(r.time_ms or 0.0 for r in counter.records))
    assert counter.print_total_time(show=False) == total


def test_meta_has_no_time(models: Any, capsys: Any) -> None:
    counter = TorchFLOPsByFX(models.MixedModel().to("meta"))
    counter.propagate(torch.randn(4, 16, device="meta"))
    assert all(r.time_ms is None for r in counter.records)
    assert counter.total_time_ms is None
    assert counter.print_total_time() is None
    assert "not measured" in capsys.readouterr().out
    assert counter.total_flops == 4480  # the same count as on CPU (test_analyzer)
    assert counter.profile.device == "meta"


def test_timer_choice() -> None:
    assert isinstance(make_timer(torch.device("cpu")), PerfCounterTimer)
    assert isinstance(make_timer(torch.device("meta")), NullTimer)
    assert make_memory_probe(torch.device("cpu"), "memory_allocated").read is None  # live tensors
    assert make_memory_probe(torch.device("meta"), "max_memory_allocated").source == "live_tensors"
    timer = PerfCounterTimer()
    assert timer.elapsed_ms(1_000_000, 3_500_000) == 2.5  # ns -> ms


# --------------------------------------------------------------------------- warmup and repeat


def _counting(models: Any, **kwargs: Any) -> tuple[TorchFLOPsByFX, Any]:
    model = models.CountingModel()
    counter = TorchFLOPsByFX(model, leaf_modules=(models.CountingLeaf,), ignore_ops=("CountingLeaf",), **kwargs)
    return counter, model


@pytest.mark.parametrize(("warmup", "repeat", "calls"), [(0, 1, 1), (2, 1, 3), (0, 3, 3), (2, 3, 5)])
def test_model_runs_warmup_plus_repeat_times(models: Any, warmup: int, repeat: int, calls: int) -> None:
    counter, model = _counting(models, warmup=warmup, repeat=repeat)
    seen: list[int] = []
    model.leaf.register_forward_hook(lambda *_: seen.append(1))  # counted outside the model
    counter.propagate(torch.randn(2, 8))
    assert len(seen) == calls  # warmup + repeat forward calls of the leaf
    assert model.leaf.calls == 1  # and the model's own counter as one call leaves it (the extra runs undone)
    assert all(isinstance(r.time_ms, float) for r in counter.records if r.op.startswith("call_"))


def test_meta_runs_once_whatever_warmup_and_repeat(models: Any) -> None:
    counter, model = _counting(models, warmup=2, repeat=3)
    model.to("meta")
    counter.propagate(torch.randn(2, 8, device="meta"))
    assert model.leaf.calls == 1  # nothing to time on meta: one counting run


def test_repeat_keeps_flops_and_memory(models: Any) -> None:
    x = torch.randn(4, 256)
    once = TorchFLOPsByFX(models.MemoryChain())
    once.propagate(x)
    model = models.MemoryChain()
    model.load_state_dict(once.model.state_dict())
    thrice = TorchFLOPsByFX(model, warmup=1, repeat=3)
    out = thrice.propagate(x)
    key = [(r.name, r.flops, r.macs, r.mem_before, r.mem_after, r.output_shape) for r in once.records]
    assert [(r.name, r.flops, r.macs, r.mem_before, r.mem_after, r.output_shape) for r in thrice.records] == key
    with torch.no_grad():
        assert torch.equal(out, model(x))  # the input was not modified by the extra runs


class _ScriptedTimer:
    """Each node costs ``per_run_ms[k]`` in the k-th run. The timer contract (measure.py) is one
    ``tick`` right before and one right after every node, so run k owns ticks
    ``[k * ticks_per_run, (k + 1) * ticks_per_run)``."""

    def __init__(self, per_run_ms: list[float], ticks_per_run: int) -> None:
        self.per_run_ms = per_run_ms
        self.ticks_per_run = ticks_per_run
        self.ticks = 0

    def tick(self) -> int:
        self.ticks += 1
        return self.ticks - 1

    def finish(self) -> None:
        pass

    def elapsed_ms(self, start: int, end: int) -> float:
        run = start // self.ticks_per_run
        assert end // self.ticks_per_run == run
        return self.per_run_ms[run]


@pytest.mark.parametrize("as_factory", [False, True])
def test_time_is_the_median_over_repeats_fx(models: Any, as_factory: bool) -> None:
    n_nodes = 6  # MixedModel: x, fc, relu, sum_1, view, output
    # run 0 is the warmup (never used); runs 1..3 are timed: 1, 2, 9 ms per node
    timer = _ScriptedTimer([100.0, 1.0, 2.0, 9.0], ticks_per_run=2 * n_nodes)
    seen: list[torch.device] = []

    def factory(device: torch.device) -> _ScriptedTimer:
        seen.append(device)
        return timer

    counter = TorchFLOPsByFX(models.MixedModel(), warmup=1, repeat=3, timer=factory if as_factory else timer,
                             tracer="fx")
    counter.propagate(torch.randn(4, 16))
    assert len(counter.records) == n_nodes
    assert seen == ([torch.device("cpu")] if as_factory else [])
    assert timer.ticks == 4 * 2 * n_nodes  # 4 runs of 6 nodes, 2 ticks each
    # median(1, 2, 9) = 2 (the mean would be 4, the first 1, the last 9)
    assert [r.time_ms for r in counter.records] == [2.0] * n_nodes
    assert counter.total_time_ms == 2.0 * n_nodes  # 12.0


@pytest.mark.parametrize("as_factory", [False, True])
def test_time_is_the_median_over_repeats_eager(models: Any, as_factory: bool) -> None:
    n_timed = 4  # MixedModel as it runs: fc, relu, sum_1, view (the input and output run nothing)
    # the warmup call is not recorded (no ticks); the three recorded calls take 1, 2, 9 ms per node
    timer = _ScriptedTimer([1.0, 2.0, 9.0], ticks_per_run=2 * n_timed)
    seen: list[torch.device] = []

    def factory(device: torch.device) -> _ScriptedTimer:
        seen.append(device)
        return timer

    counter = TorchFLOPsByFX(models.MixedModel(), warmup=1, repeat=3, timer=factory if as_factory else timer)
    counter.propagate(torch.randn(4, 16))
    # one timer per propagate, as with the fx front end: the timed calls share it
    assert seen == ([torch.device("cpu")] if as_factory else [])
    assert timer.ticks == 3 * 2 * n_timed  # 24
    # median(1, 2, 9) = 2 for every timed node
    assert [r.time_ms for r in counter.records] == [None, 2.0, 2.0, 2.0, 2.0, None]
    assert counter.total_time_ms == 2.0 * n_timed  # 8.0


def test_a_timer_lacking_a_method_is_refused_before_the_model_runs(models: Any) -> None:
    class Half:  # no elapsed_ms
        def tick(self) -> int:
            return 0

        def finish(self) -> None:
            pass

    model, calls = models.MixedModel(), []
    model.register_forward_hook(lambda *args: calls.append(1))
    with pytest.raises(TypeError, match=r"^timer must be a Timer, .*: Half has no elapsed_ms$"):
        TorchFLOPsByFX(model, timer=Half())
    counter = TorchFLOPsByFX(model, timer=lambda device: None)
    with pytest.raises(TypeError, match=r"^timer\(cpu\) \(your timer function's result\) must be a Timer"):
        counter.propagate(torch.randn(4, 16))
    assert calls == []


# --------------------------------------------------------------------------- the CUDA timer's logic, scripted


class _CudaScript:
    """What :class:`CudaEventTimer` calls in torch.cuda, scripted on a machine without CUDA: the
    current stream's key, ``_sleep`` calls, the streams the events land on. The GPU's clock: a sleep
    of c cycles moves it on by c / ``rate`` ms (2e6 cycles per ms: the calibration's 1e6 cycles take
    0.5 ms); an event reads it when recorded."""

    def __init__(self) -> None:
        self.current = (7, 0, 1)  # (stream id, device index, device type), as the binding returns it
        self.sleeps: list[int] = []
        self.rate = 2e6
        self.gpu_ms = 0.0
        self.recorded: list[Any] = []
        self.built: list[int] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import contextlib

        script = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                pass

            def record(self, stream: Any = None) -> None:
                script.recorded.append(stream)
                self.at = script.gpu_ms

            def synchronize(self) -> None:
                pass

            def elapsed_time(self, other: Any) -> float:
                return other.at - self.at

        def sleep(cycles: int) -> None:
            script.sleeps.append(cycles)
            script.gpu_ms += cycles / script.rate

        def stream(stream_id: int, device_index: int, device_type: int) -> tuple[str, int]:
            script.built.append(stream_id)
            return ("stream", stream_id)

        monkeypatch.setattr(torch._C, "_cuda_getCurrentStream", lambda index: script.current, raising=False)
        monkeypatch.setattr(torch.cuda, "Stream", stream)
        monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
        monkeypatch.setattr(torch.cuda, "_sleep", sleep, raising=False)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
        monkeypatch.setattr(torch.cuda, "Event", Event)


def _scripted_timer(monkeypatch: pytest.MonkeyPatch, queue_ahead: bool) -> tuple[CudaEventTimer, _CudaScript,
                                                                                   list[float]]:
    script = _CudaScript()
    script.install(monkeypatch)
    timer = CudaEventTimer(torch.device("cuda", 0), queue_ahead=queue_ahead)
    clock = [0.0]
    timer._clock = lambda: clock[0]  # type: ignore[method-assign]
    return timer, script, clock


def _run(timer: CudaEventTimer, clock: list[float], host_s: float, nodes: int = 1) -> None:
    """One run of ``nodes`` nodes (two ticks each) whose host time is ``host_s``."""
    for _ in range(nodes):
        timer.tick()
        timer.tick()
    clock[0] += host_s
    timer.finish()


def test_cuda_timer_queues_each_run_after_the_first(monkeypatch: pytest.MonkeyPatch) -> None:
    timer, script, clock = _scripted_timer(monkeypatch, queue_ahead=True)
    _run(timer, clock, 0.010)  # run 1: 10 ms of host time, no wait before it
    assert script.sleeps == [1_000_000]  # only the calibration (1e6 cycles in 0.5 ms: 2e6 cycles a ms)
    _run(timer, clock, 0.004)  # run 2: waits 2 x 10 ms x 2e6 = 40e6 cycles; 4 ms of host time
    _run(timer, clock, 0.030)  # run 3: the shortest run counts: 2 x 4 ms x 2e6 = 16e6 cycles
    _run(timer, clock, 0.004)  # run 4: still 16e6 (a 30 ms run, one that synchronised, does not feed back)
    assert script.sleeps == [1_000_000, 40_000_000, 16_000_000, 16_000_000]
    assert all(s == ("stream", 7) for s in script.recorded) and script.built == [7]


def test_cuda_timer_waits_longer_when_the_gpu_clock_rises_after_its_calibration(monkeypatch: pytest.MonkeyPatch) -> None:
    timer, script, clock = _scripted_timer(monkeypatch, queue_ahead=True)
    _run(timer, clock, 0.010)  # run 1; the calibration at an idle clock: 1e6 cycles in 0.5 ms, 2e6 a ms
    script.rate = 8e6  # the SM clock rises 4x: a cycle takes a quarter of the time
    _run(timer, clock, 0.010)  # run 2 waits 2 x 10 ms x 2e6 = 40e6 cycles, which run 5 ms, not 20: 8e6 a ms
    _run(timer, clock, 0.010)  # run 3: 2 x 10 ms x 8e6 = 160e6 cycles (20 ms at the new clock)
    script.rate = 4e6  # the clock falls back: the highest rate seen is kept (a longer wait costs nothing)
    _run(timer, clock, 0.010)  # run 4: 160e6 again, which took 40 ms
    _run(timer, clock, 0.010)  # run 5: still 160e6
    assert script.sleeps == [1_000_000, 40_000_000, 160_000_000, 160_000_000, 160_000_000]


def test_cuda_timer_wait_is_capped_and_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    timer, script, clock = _scripted_timer(monkeypatch, queue_ahead=True)
    _run(timer, clock, 5.0)  # a 5 s run: the wait is capped at 2 s = 2000 ms x 2e6 = 4e9 cycles
    _run(timer, clock, 5.0)
    assert script.sleeps == [1_000_000, 4_000_000_000]
    timer, script, clock = _scripted_timer(monkeypatch, queue_ahead=False)  # a generation's, or the user's
    for _ in range(3):
        _run(timer, clock, 0.010)
    assert script.sleeps == []  # neither a wait nor a calibration


def test_cuda_timer_events_follow_the_current_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    timer, script, _ = _scripted_timer(monkeypatch, queue_ahead=False)
    timer.tick()
    script.current = (9, 0, 1)  # the model switches to a side stream ...
    timer.tick()
    timer.tick()
    script.current = (7, 0, 1)  # ... and back
    timer.tick()
    assert script.recorded == [("stream", 7), ("stream", 9), ("stream", 9), ("stream", 7)]
    assert script.built == [7, 9, 7]  # a Stream object built only when the current one changes


def test_a_storage_grown_in_place_counts_its_growth_and_is_released_with_it() -> None:
    # x (4, 8) float32: 128 B. f = x.new_empty(0): 0 B; f.resize_(64): the same storage, 256 B now,
    # counted where it grew (128 + 256 = 384 live); fill_ holds it again; f.sum(): 4 B more (388, the
    # peak). It was released with its 256 B where only 0 B had been counted: -244 B live at the end,
    # a 132 B peak
    class Resize(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            f = x.new_empty(0)
            f.resize_(64).fill_(1.0)
            return f.sum() + x.sum()

    counter = TorchFLOPsByFX(Resize())
    with torch.no_grad():
        counter.propagate(torch.randn(4, 8))
    after = {r.name: r.mem_after for r in counter.records}
    assert (after["new_empty"], after["resize_"], after["fill_"], after["sum_1"]) == (128, 384, 384, 388)
    assert all(r.mem_before >= 0 and r.mem_after >= 0 for r in counter.records)
    assert counter.profile.max_memory == 388

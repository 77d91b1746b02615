"""Training steps in the user's own loop: :class:`TrainingProfiler` (DeepSpeed's verbs) and MFU.

Between ``start_profile()`` and ``stop_profile()`` the loop runs unchanged (forward, loss,
``loss.backward()``, ``optimizer.step()``) while the eager front end records it
(:mod:`torch_flops.eager`): every forward node (the loss's too), the backward each caused
(:mod:`torch_flops.backward`) and the optimizer's step, three phases of one step's records. A
step ends when the optimizer steps (without an optimizer: when a forward starts after a backward,
or at ``stop_profile()``). Nothing runs twice, so model, optimizer and gradients end exactly as
the loop without the profiler leaves them; ``end_profile()`` removes every hook and mode.

Utilisation (the definitions of the PaLM paper, Chowdhery et al. 2022, appendix B)::

    MFU = model FLOPs per step / (step time x peak FLOP/s)
    HFU = hardware FLOPs per step / (step time x peak FLOP/s)

model FLOPs = forward + backward FLOPs without activation-checkpointing recompute; hardware FLOPs
include the recompute. The optimizer's FLOPs are in neither (they are not the model's).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from typing import Any

import torch
from torch import nn

from torch_flops import formulas, hardware, report
from torch_flops.backward import BackwardCounter, BackwardRun, saved_bytes
from torch_flops.comm import distributed_settings
from torch_flops.eager import EagerRecording, ModelIndex
from torch_flops.interpreter import Measurements
from torch_flops.measure import input_device, make_memory_probe, make_timer, tensors_of
from torch_flops.optim import formula_for, optimizer_step_flops
from torch_flops.paths import module_chain
from torch_flops.records import NodeRecord, Profile, Status
from torch_flops.report import format_count, format_time_ms

__all__ = ["TrainingProfiler", "utilization"]


def utilization(flops: int, time_ms: float | None, peak: float | str | hardware.HardwareSpec,
                dtype: Any = torch.float32) -> float | None:
    """``flops / (time_ms / 1e3 x peak)``: the share of the peak the step achieved. ``peak``: FLOP/s,
    or a hardware name/spec (its peak for ``dtype``). None when untimed."""
    if isinstance(flops, bool) or not isinstance(flops, int):
        raise TypeError(f"flops must be an int, got {type(flops).__name__}")
    if flops < 0:
        raise ValueError(f"flops must be >= 0, got {flops}")
    if time_ms is not None and (isinstance(time_ms, bool) or not isinstance(time_ms, (int, float))):
        raise TypeError(f"time_ms must be a number of milliseconds or None, got {type(time_ms).__name__}")
    if isinstance(peak, bool) or not isinstance(peak, (int, float, str, hardware.HardwareSpec)):
        raise TypeError(f"peak must be FLOP/s (a number) or a hardware name, got {type(peak).__name__}")
    rate = float(peak) if isinstance(peak, (int, float)) else hardware.get(peak).peak_flops(dtype)
    if not math.isfinite(rate) or rate <= 0:
        raise ValueError(f"peak must be a positive, finite FLOP/s, got {peak!r}")
    if time_ms is None or time_ms <= 0:
        return None
    return flops / (time_ms / 1e3 * rate)


class TrainingProfiler:
    """Profile the training steps of your own loop (see the module docstring).

    >>> prof = TrainingProfiler(model, optimizer)
    >>> prof.start_profile()
    >>> for x, y in batches:
    ...     loss = loss_fn(model(x), y); loss.backward(); optimizer.step(); optimizer.zero_grad()
    >>> prof.stop_profile()
    >>> prof.get_total_flops(), prof.get_total_duration()
    >>> prof.print_model_profile(profile_step=1)
    >>> prof.end_profile()

    or ``with TrainingProfiler(model, optimizer) as prof: ...``.
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer or None, got {type(optimizer).__name__}")
        if optimizer is not None:
            formula_for(type(optimizer))  # UnsupportedOptimizerError now, not inside the user's step
        self.model = model
        self.optimizer = optimizer
        self.tables = formulas.FORMULAS.copy()
        #: one profile per finished step, in order
        self.profiles: list[Profile] = []
        self._durations: list[float] = []  # ms per step, wall clock
        self._recording: EagerRecording | None = None
        self._handles: list[Any] = []
        self._started = False
        self._backward_seen = False
        self._step_start = 0.0
        self._optimizer_counts: list[tuple[torch.Tensor, int]] = []
        self._optimizer_marks: tuple[Any, Any] | None = None
        self._pause: Any = None
        self._thread = 0  # the thread that started profiling: the only one recorded
        self._in_closure = False  # inside an optimizer.step(closure)'s closure
        self._batch: int | None = None  # the step's first forward's batch size
        self._backward_start: int | None = None  # forward nodes recorded once the backward began
        self._peaks: list[int | None] = []

    # ------------------------------------------------------------------ DeepSpeed's verbs
    def start_profile(self) -> None:
        """Start recording steps (``RuntimeError`` when already started)."""
        if self._started:
            raise RuntimeError("the TrainingProfiler is already profiling: call stop_profile() first")
        model = self.model
        self._index = ModelIndex(model, self.tables)  # (a lazy module: ValueError, before any hook)
        self._device = input_device(((), {}), model)
        self._timer = make_timer(self._device)
        # (no trace gate held: a torch.fx trace in another thread is transparent to this one, and
        # holding the gate for a whole training window would block it that long)
        self._thread = threading.get_ident()
        if self.optimizer is not None:
            self._handles = [self.optimizer.register_step_pre_hook(self._before_step),
                             self.optimizer.register_step_post_hook(self._after_step)]
        self._handles += [model.register_forward_pre_hook(self._before_forward, with_kwargs=True),
                          model.register_forward_hook(self._after_forward)]
        self._started = True
        self._begin_step()

    def stop_profile(self) -> None:
        """Stop recording; a step under way is kept when a forward of it ran. The profiles stay."""
        if not self._started:
            return
        try:
            self._unpause()  # an optimizer step that raised never reached its post-hook
            self._finish_step(keep=True)
        finally:
            for handle in self._handles:
                handle.remove()
            self._handles = []
            self._started = False

    def end_profile(self) -> None:
        """Stop and forget everything (hooks, modes and the profiles)."""
        self.stop_profile()
        self.profiles.clear()
        self._durations.clear()
        self._peaks.clear()

    def __enter__(self) -> TrainingProfiler:  # noqa: PYI034  (typing_extensions is no dependency)
        self.start_profile()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_profile()

    # ------------------------------------------------------------------ the numbers
    def _profiles(self) -> list[Profile]:
        if not self.profiles:
            raise RuntimeError("no training step was profiled: run a step between start_profile() and "
                               "stop_profile()")
        return self.profiles

    def get_total_flops(self, as_string: bool = False) -> int | str:
        """FLOPs of one training step: forward + backward + optimizer (the mean over the steps)."""
        value = round(sum(step_flops(p) for p in self._profiles()) / len(self.profiles))
        return format_count(value, "FLOPs") if as_string else value

    def get_total_macs(self, as_string: bool = False) -> int | str:
        """MACs of one step: forward + backward (the optimizer does none)."""
        value = round(sum(p.total_macs + p.total_backward_macs for p in self._profiles()) / len(self.profiles))
        return format_count(value, "MACs") if as_string else value

    def get_total_params(self, as_string: bool = False) -> int | str:
        value = self._profiles()[0].total_params
        return format_count(value) if as_string else value

    def get_total_duration(self, as_string: bool = False) -> float | str:
        """Seconds per step, wall clock from the step's first forward to the end of its
        optimizer step (the mean over the steps)."""
        self._profiles()
        value = sum(self._durations) / len(self._durations) / 1e3
        return format_time_ms(value * 1e3) if as_string else value

    def get_mfu(self, peak: float | str | hardware.HardwareSpec, dtype: Any = torch.float32) -> float | None:
        """Model FLOPs utilisation per step (see the module docstring); None on meta."""
        profiles = self._profiles()
        flops = sum(model_flops(p) for p in profiles) / len(profiles)
        return utilization(round(flops), self._step_time(), peak, dtype)

    def _step_time(self) -> float | None:
        """Mean wall milliseconds per step; None on meta (nothing ran)."""
        return None if self._device.type == "meta" else sum(self._durations) / len(self._durations)

    def get_hfu(self, peak: float | str | hardware.HardwareSpec, dtype: Any = torch.float32) -> float | None:
        """Hardware FLOPs utilisation per step: recompute included."""
        profiles = self._profiles()
        flops = sum(model_flops(p) + p.total_recompute_flops for p in profiles) / len(profiles)
        return utilization(round(flops), self._step_time(), peak, dtype)

    def print_model_profile(self, profile_step: int = 1, module_depth: int = -1, top_modules: int = 1,
                            detailed: bool = True, output_file: str | None = None) -> str:
        """The step's summary (forward, backward, optimizer, duration, MFU inputs) and, with
        ``detailed``, its module tree down to ``module_depth``; printed, or written atomically to
        ``output_file``. Returns the text."""
        profiles = self._profiles()
        if isinstance(profile_step, bool) or not isinstance(profile_step, int):
            raise TypeError(f"profile_step must be an int, got {type(profile_step).__name__}")
        if not 1 <= profile_step <= len(profiles):
            raise ValueError(f"profile_step must be between 1 and {len(profiles)} (the steps profiled), "
                             f"got {profile_step}")
        profile = profiles[profile_step - 1]
        text = step_summary_text(profile, self._durations[profile_step - 1], self._peaks[profile_step - 1])
        if detailed:
            text += "\n\n" + report.model_profile_text(profile, module_depth, top_modules)
        if output_file is not None:
            report.write_atomic(output_file, text + "\n")
        else:
            print(text)
        return text

    # ------------------------------------------------------------------ the steps
    def _begin_step(self) -> None:
        index = self._index
        recording = EagerRecording(self.model, index, self.tables, (), self._timer,
                                   make_memory_probe(self._device, "memory_allocated", index.storages), False, backward=True)
        counter = BackwardCounter(self.tables, recording.sequences, BackwardRun.empty(0), self._timer)  # type: ignore[arg-type]
        counter.first_op = self._first_backward_op
        recording.backward_counter = counter
        self._recording = recording
        self._backward_seen = False
        self._backward_start = None
        self._batch = None
        self._optimizer_counts = []
        self._optimizer_marks = None
        self._step_start = time.perf_counter()
        if self._device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self._device)
        recording.begin()

    def _first_backward_op(self, node: Any) -> None:
        """At the backward's first op, before autograd frees what the forward saved."""
        recording = self._recording
        assert recording is not None and recording.sequences is not None
        self._backward_seen = True
        if self._backward_start is None:
            self._backward_start = len(recording.plans)
        counter = recording.backward_counter
        assert counter is not None
        n = len(recording.plans)
        counter.run.grow(n)
        counter.run.saved_bytes, recording.kept_storages = saved_bytes([node], recording.sequences, n,
                                                                       self._index.storages)

    def _before_forward(self, module: nn.Module, args: Any, kwargs: Any) -> None:
        if threading.get_ident() != self._thread or torch._C._current_graph_task_id() != -1:
            return  # another thread's call, or a recompute inside the backward
        if self._pause is not None and not self._in_closure:  # the last optimizer step raised: it is over
            self._unpause()
            self._finish_step(keep=True)
            self._begin_step()
        elif self.optimizer is None and self._backward_seen:
            self._finish_step(keep=True)  # a new forward after a backward: without an optimizer, a new step
            self._begin_step()
        if self._recording is not None:
            if self._batch is None:
                self._batch = next((int(t.shape[0]) for t in tensors_of((args, kwargs)) if t.dim() > 0), None)
            self._recording.add_call_inputs(args, kwargs)

    def _after_forward(self, module: nn.Module, args: Any, output: Any) -> None:
        if self._recording is not None and threading.get_ident() == self._thread:
            self._recording.set_call_output(output)

    def _unpause(self) -> None:
        if self._pause is not None:
            self._pause.__exit__(None, None, None)
            self._pause = None

    def _before_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> Any:
        if self._recording is None or threading.get_ident() != self._thread:
            return None
        # args: (the optimizer, *step's own arguments) as the step wrapper passes them
        closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
        self._pause = self._recording.paused()
        self._pause.__enter__()
        self._optimizer_start = self._timer.tick()
        if closure is None:
            self._optimizer_counts = optimizer_step_flops(optimizer)
            return None
        # step(closure): the closure's forward and backward are the step's own; the update's FLOPs
        # are counted once it has made the gradients (the optimizer calls it before updating)
        self._optimizer_counts = []

        def recorded_closure() -> Any:
            assert self._pause is not None
            self._pause.__exit__(None, None, None)
            self._in_closure = True
            try:
                return closure()
            finally:
                self._in_closure = False
                self._pause.__enter__()
                self._optimizer_counts = optimizer_step_flops(optimizer)

        return args[:1] + args[2:], {**{k: v for k, v in kwargs.items() if k != "closure"},
                                     "closure": recorded_closure}

    def _after_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self._recording is None or self._pause is None or threading.get_ident() != self._thread:
            return
        end = self._timer.tick()
        self._unpause()
        self._optimizer_marks = (self._optimizer_start, end)
        self._finish_step(keep=True)
        self._begin_step()

    def _finish_step(self, keep: bool) -> None:
        recording, self._recording = self._recording, None
        if recording is None:
            return
        recording.end()
        if self._device.type == "cuda":
            torch.cuda.synchronize(self._device)
        duration = (time.perf_counter() - self._step_start) * 1e3
        if not keep or recording.last_output is None:  # no forward in it (stopped right after a step)
            return
        recording.capture()
        graph_run = recording.measured()
        counter = recording.backward_counter
        assert counter is not None
        run = counter.run
        run.grow(len(recording.plans))
        if len(run.saved_bytes) < len(recording.plans):
            run.saved_bytes = run.saved_bytes + [0] * (len(recording.plans) - len(run.saved_bytes))
        graph_run = graph_run.with_backward(run, self._timer)
        measurements = Measurements(runs=(graph_run,), device=str(self._device), memory_source=recording.memory_source)
        index = self._index
        profile = Profile.from_measurements(
            measurements, tracer="eager", module_types=index.types, module_params=index.params, batch_size=self._batch,
            settings={**distributed_settings(), "training_step": len(self.profiles) + 1,
                      "optimizer": type(self.optimizer).__name__ if self.optimizer is not None else None})
        optimizer_records = self._optimizer_records(len(profile.records))
        start = self._backward_start
        if start is not None and self.optimizer is not None and any(
                r.index >= start and r.op not in ("output", "placeholder", "get_attr") for r in profile.records):
            # recorded after the backward began and before the optimizer stepped (gradient clipping,
            # unscaling): the update's work, not the model's (no MFU)
            relabelled = tuple(r._replace(phase="optimizer") if r.index >= start and r.op not in (
                "output", "placeholder", "get_attr") else r for r in profile.records)
            profile = dataclasses.replace(profile, records=relabelled)
        if optimizer_records:
            profile = dataclasses.replace(profile, records=profile.records + tuple(optimizer_records))
        self.profiles.append(profile)
        self._durations.append(duration)
        self._peaks.append(torch.cuda.max_memory_allocated(self._device) if self._device.type == "cuda"
                           else profile.max_memory)

    def _optimizer_records(self, start: int) -> list[NodeRecord]:
        """One ``phase="optimizer"`` record per parameter the step updated, in the module that owns
        it; the step's measured time shared out in proportion to each parameter's FLOPs."""
        if not self._optimizer_counts:
            return []
        marks = self._optimizer_marks
        step_ms = self._timer.elapsed_ms(*marks) if marks is not None else None
        total = sum(f for _, f in self._optimizer_counts) or 1
        name = type(self.optimizer).__name__
        records = []
        for k, (param, flops) in enumerate(self._optimizer_counts):
            attribute = self._index.attrs.get(id(param), f"param{k}")
            path = attribute.rpartition(".")[0]
            records.append(NodeRecord(
                index=start + k, name=f"{name.lower()}_{attribute.replace('.', '_')}", op="optimizer_step",
                target=f"{name}.step", module_path=path, module_type=self._index.types.get(path, ""), flops=flops,
                macs=0, status=Status.COUNTED, time_ms=None if step_ms is None else step_ms * flops / total,
                mem_before=None, mem_after=None, mem_delta=None, output_shape=tuple(param.shape),
                module_stack=module_chain((path,)), phase="optimizer", dtype=str(param.dtype).removeprefix("torch.")))
        return records


def step_flops(profile: Profile) -> int:
    """Forward + backward + optimizer FLOPs of one step's profile."""
    return profile.total_flops + profile.total_backward_flops + optimizer_flops(profile)


def optimizer_flops(profile: Profile) -> int:
    return sum(r.flops or 0 for r in profile.records if r.phase == "optimizer")


def model_flops(profile: Profile) -> int:
    """Forward + backward FLOPs without recompute (MFU's numerator)."""
    return profile.total_flops + profile.total_backward_flops - profile.total_recompute_flops


def step_summary_text(profile: Profile, duration_ms: float, peak: int | None) -> str:
    """The numbers of one training step, one per line."""
    optimizer_times = [r.time_ms for r in profile.records if r.phase == "optimizer" and r.time_ms is not None]
    lines = [
        f"Training step {profile.settings.get('training_step', '')}",
        f"  params:            {format_count(profile.total_params)}",
        f"  forward FLOPs:     {format_count(profile.total_flops)}  (MACs {format_count(profile.total_macs)})",
        (f"  backward FLOPs:    {format_count(profile.total_backward_flops)}  "
         f"(MACs {format_count(profile.total_backward_macs)}; recompute {format_count(profile.total_recompute_flops)})"),
        (f"  optimizer FLOPs:   {format_count(optimizer_flops(profile))}"
         + (f"  ({profile.settings.get('optimizer')})" if profile.settings.get("optimizer") else "")),
        f"  step FLOPs:        {format_count(step_flops(profile))}",
        f"  forward time:      {format_time_ms(profile.total_time_ms)}",
        f"  backward time:     {format_time_ms(profile.total_backward_time_ms)}",
        f"  optimizer time:    {format_time_ms(sum(optimizer_times) if optimizer_times else None)}",
        f"  step duration:     {format_time_ms(duration_ms)} (wall clock)",
        f"  saved for backward: {report.format_bytes(profile.total_saved_bytes)}",
        f"  peak memory:       {report.format_bytes(peak)} ({profile.memory_source})",
    ]
    return "\n".join(lines)

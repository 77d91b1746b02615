"""Training steps in the user's own loop: :class:`TrainingProfiler` (DeepSpeed's verbs) and MFU.

Between ``start_profile()`` and ``stop_profile()`` the loop runs unchanged (forward, loss,
``loss.backward()``, ``optimizer.step()``) while a recording
(:class:`torch_flops.session.Recording`) follows it: every forward node (the loss's too), the backward each caused
(:mod:`torch_flops.backward`) and the optimizer's step, three phases of one step's records. A
step ends when the optimizer steps (without an optimizer: when a forward starts after a backward,
or at ``stop_profile()``). Nothing runs twice, so model, optimizer and gradients end exactly as
the loop without the profiler leaves them; ``end_profile()`` removes every hook and mode.

A ``torch.compile``'d model (``OptimizedModule``) runs compiled, with nothing of torch_flops
installed during its calls and the autograd nodes they make; the step's records come from an eager
shadow call of its original module per call, recorded, and its backward, driven by the gradients
that reach the compiled outputs (:class:`torch_flops.compiled.CompiledCalls`). So the counts are
eager's, the model and optimizer end as the compiled loop leaves them, compilation happens in
untimed warm-ups, and each step's profile has the compiled program's own times in
``settings["compiled_call"]``.

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
from typing import Any

import torch
from torch import nn

from torch_flops import _validate, formulas, hardware, report
from torch_flops._version import versions
from torch_flops.calls import reads_values
from torch_flops.capture import ModelIndex
from torch_flops.comm import distributed_settings
from torch_flops.compiled import CompiledCalls, split_compiled
from torch_flops.measure import input_device, make_memory_probe, make_timer
from torch_flops.measuring import add_note
from torch_flops.optim import formula_for
from torch_flops.paths import module_chain
from torch_flops.records import NodeRecord, Profile, Status
from torch_flops.report import format_count, format_time_ms
from torch_flops.session import Recording, Step, Steps

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
    if time_ms is not None and (not math.isfinite(time_ms) or time_ms < 0):
        raise ValueError(f"time_ms must be a finite number of milliseconds >= 0 (or None: untimed), got {time_ms!r}")
    if time_ms is None or time_ms == 0:
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
            owned = {id(p) for p in model.parameters()}
            if not any(id(p) in owned for group in optimizer.param_groups for p in group["params"]):
                raise ValueError(f"the optimizer ({type(optimizer).__name__}) holds none of the model's parameters "
                                 f"({type(model).__name__}): pass the optimizer made from this model's parameters")
        self.model = model
        self.optimizer = optimizer
        self.tables = formulas.FORMULAS.copy()
        #: one profile per finished step, in order
        self.profiles: list[Profile] = []
        self._warned: set[str] = set()  #: the targets without a formula warned about
        self._durations: list[float | None] = []  # ms per step, wall clock; None on meta (nothing ran)
        self._peaks: list[int | None] = []
        self._recording: Recording | None = None
        self._compiled: CompiledCalls | None = None
        self._thread = 0
        self._other_thread_calls = 0

    # ------------------------------------------------------------------ DeepSpeed's verbs
    def start_profile(self) -> None:
        """Start recording steps (``RuntimeError`` when already started)."""
        if self._recording is not None:
            raise RuntimeError("the TrainingProfiler is already profiling: call stop_profile() first")
        # a torch.compile'd model (OptimizedModule): recorded on its original module (module paths
        # without "_orig_mod."), each call run as compiled beside an eager shadow (CompiledCalls)
        model, compiled = split_compiled(self.model)
        index = ModelIndex(model, self.tables)  # (a lazy module: ValueError, before any hook)
        device = input_device(((), {}), model)
        self._device = device
        self._timer = make_timer(device)
        # (no trace gate held: a torch.fx trace in another thread is transparent to this one, and
        # holding the gate for a whole training window would block it that long)
        recording = Recording(index, self.tables, timer=self._timer,
                              memory=make_memory_probe(device, "memory_allocated", index.storages), device=device,
                              backward=True, optimizer=self.optimizer, steps=Steps.OPTIMIZER, on_step=self._step_done,
                              compiled_eagerly=compiled is None)  # (a compiled model's calls run compiled)
        recording.start()
        if compiled is not None:
            calls = CompiledCalls(recording, compiled)
            try:
                calls.start()
            except BaseException:
                recording.stop()
                raise
            self._compiled = calls
        self._recording = recording
        self._thread = threading.get_ident()

    def stop_profile(self) -> None:
        """Stop recording; a step under way is kept when a forward of it ran. The profiles stay.
        ``RuntimeError`` from another thread than the one that started it while that one runs (its
        modes are on that thread's stacks, which no other thread can reach): nothing is stopped
        then. Once that thread has ended (its stacks with it), any thread stops it: the global
        hooks and process-wide settings the recording held are given back."""
        recording = self._recording
        if recording is not None and threading.get_ident() != self._thread \
                and any(t.ident == self._thread for t in threading.enumerate()):
            raise RuntimeError("stop_profile()/end_profile() must be called in the thread that called start_profile(): "
                               "the profiler's modes are on that thread's stacks (nothing was stopped)")
        if recording is not None:
            try:
                if self._compiled is not None:
                    self._compiled.stop()
            finally:
                try:
                    recording.stop()  # (the step under way is finished: its compiled facts are still there)
                finally:
                    self._recording = None
                    self._compiled = None
                    self._other_thread_calls += recording.other_thread_calls

    def end_profile(self) -> None:
        """Stop and forget everything (hooks, modes and the profiles)."""
        self.stop_profile()
        self.profiles.clear()
        self._durations.clear()
        self._peaks.clear()
        self._other_thread_calls = 0

    def __enter__(self) -> TrainingProfiler:  # noqa: PYI034  (typing_extensions is no dependency)
        self.start_profile()
        return self

    def __exit__(self, *exc: object) -> None:
        error, recording = exc[1], self._recording
        if isinstance(error, Exception) and recording is not None and (
                recording.needs_values or (self._device.type == "meta" and reads_values(error))):
            add_note(error, f"{recording.failure_note(error)}: the model reads tensor values in Python (.item(), "
                            ".tolist(), nonzero, a boolean mask...), which meta tensors do not have, so its step "
                            "cannot be profiled on meta. Run it on CPU with small shapes (its counts depend on "
                            "shapes only).")
        self.stop_profile()

    # ------------------------------------------------------------------ the numbers
    def _profiles(self) -> list[Profile]:
        if not self.profiles:
            calls = self._other_thread_calls + (self._recording.other_thread_calls if self._recording else 0)
            if calls:
                raise RuntimeError(
                    f"no training step was profiled: the model ran {calls} time(s) in other threads, and a "
                    f"TrainingProfiler records only the thread that called start_profile() (thread {self._thread}); "
                    "call start_profile() in the thread that runs the training loop")
            raise RuntimeError("no training step was profiled: run a step between start_profile() and "
                               "stop_profile()")
        return self.profiles


    def get_total_flops(self, as_string: bool = False) -> int | str:
        """FLOPs of one training step: forward + backward + optimizer (the mean over the steps)."""
        _validate.check_bool("as_string", as_string)
        value = round(sum(step_flops(p) for p in self._profiles()) / len(self.profiles))
        return format_count(value, "FLOPs") if as_string else value

    def get_total_macs(self, as_string: bool = False) -> int | str:
        """MACs of one step: forward + backward + optimizer (an element-wise update does none; Muon's
        Newton-Schulz products do) (the mean over the steps)."""
        _validate.check_bool("as_string", as_string)
        value = round(sum(p.total_macs + p.total_backward_macs + optimizer_macs(p) for p in self._profiles())
                      / len(self.profiles))
        return format_count(value, "MACs") if as_string else value

    def get_total_params(self, as_string: bool = False) -> int | str:
        _validate.check_bool("as_string", as_string)
        value = self._profiles()[0].total_params
        return format_count(value) if as_string else value

    def get_total_duration(self, as_string: bool = False) -> float | str | None:
        """Seconds per step, wall clock from the step's first forward to the end of its
        optimizer step (the mean over the steps); None on meta, where nothing ran."""
        _validate.check_bool("as_string", as_string)
        self._profiles()
        step = self._step_time()
        value = None if step is None else step / 1e3
        return format_time_ms(None if value is None else value * 1e3) if as_string else value

    def get_mfu(self, peak: float | str | hardware.HardwareSpec, dtype: Any = torch.float32) -> float | None:
        """Model FLOPs utilisation per step (see the module docstring); None on meta."""
        profiles = self._profiles()
        flops = sum(model_flops(p) for p in profiles) / len(profiles)
        return utilization(round(flops), self._step_time(), peak, dtype)

    def _step_time(self) -> float | None:
        """Mean wall milliseconds per step; None on meta (nothing ran)."""
        durations = [d for d in self._durations if d is not None]
        return None if self._device.type == "meta" or not durations else sum(durations) / len(durations)

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
        _validate.check_bool("detailed", detailed)
        _validate.check_depth("module_depth", module_depth)
        _validate.check_int("top_modules", top_modules, 0)
        if output_file is not None:
            report.check_writable(output_file)  # (before the text is built)
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
        return report.Text(text)

    # ------------------------------------------------------------------ the steps
    def _step_done(self, step: Step) -> None:
        """A step of the recording finished: its profile, with one optimizer record per parameter."""
        measurements = step.measurements(self._timer, self._device)
        measurements.warn_unsupported(self._warned)  # (once per target for the whole recording)
        index = step.graph.index
        profile = Profile.from_measurements(
            measurements, tracer="eager", module_types=index.types, module_params=index.params,
            batch_size=step.batch_size,
            settings={**distributed_settings(), **versions(), "param_dtypes": dict(index.param_dtypes),
                      "training_step": len(self.profiles) + 1,
                      "optimizer": type(self.optimizer).__name__ if self.optimizer is not None else None,
                      **({"skipped_update": True} if step.skipped_update else {}),
                      **({"compiled_call": self._compiled.step_facts()} if self._compiled else {})})
        records = optimizer_records(step, self.optimizer, len(profile.records))
        if records:
            profile = dataclasses.replace(profile, records=profile.records + tuple(records))
        self.profiles.append(profile)
        self._durations.append(None if self._device.type == "meta" else step.duration_ms)
        self._peaks.append(step.peak_memory if step.peak_memory is not None else profile.max_memory)


def optimizer_records(step: Step, optimizer: torch.optim.Optimizer | None, start: int) -> list[NodeRecord]:
    """One ``phase="optimizer"`` record per parameter the step updated, in the module that owns it:
    its FLOPs and bytes (:mod:`torch_flops.optim`), the step's measured time shared out in
    proportion to each parameter's FLOPs."""
    if not step.updates or optimizer is None:
        return []
    index = step.graph.index
    total = sum(u.flops for u in step.updates) or 1
    name = type(optimizer).__name__
    step_ms = step.optimizer_ms
    records = []
    for k, update in enumerate(step.updates):
        param = update.param
        attribute = index.attrs.get(id(param), f"param{k}")
        path = attribute.rpartition(".")[0]
        records.append(NodeRecord(
            index=start + k, name=f"{name.lower()}_{attribute.replace('.', '_')}", op="optimizer_step",
            target=f"{name}.step", module_path=path, module_type=index.types.get(path, ""), flops=update.flops,
            macs=update.macs, status=Status.COUNTED, time_ms=None if step_ms is None else step_ms * update.flops / total,
            mem_before=None, mem_after=None, mem_delta=None, output_shape=tuple(param.shape),
            module_stack=module_chain((path,)), phase="optimizer", dtype=str(param.dtype).removeprefix("torch."),
            bytes_read=update.bytes_read, bytes_written=update.bytes_written))
    return records


def step_flops(profile: Profile) -> int:
    """Forward + backward + optimizer FLOPs of one step's profile."""
    return profile.total_flops + profile.total_backward_flops + optimizer_flops(profile)


def optimizer_flops(profile: Profile) -> int:
    return sum(r.flops or 0 for r in profile.records if r.phase == "optimizer")


def optimizer_macs(profile: Profile) -> int:
    """MACs of the optimizer's updates (Muon's Newton-Schulz products; 0 for an element-wise rule)."""
    return sum(r.macs or 0 for r in profile.records if r.phase == "optimizer")


def model_flops(profile: Profile) -> int:
    """Forward + backward FLOPs without recompute (MFU's numerator)."""
    return profile.total_flops + profile.total_backward_flops - profile.total_recompute_flops


def step_summary_text(profile: Profile, duration_ms: float | None, peak: int | None) -> str:
    """The numbers of one training step, one per line."""
    optimizer_times = [r.time_ms for r in profile.records if r.phase == "optimizer" and r.time_ms is not None]
    lines = [
        f"Training step {profile.settings.get('training_step', '')}",
        f"  params:            {format_count(profile.total_params)}",
        f"  forward FLOPs:     {format_count(profile.total_flops)}  (MACs {format_count(profile.total_macs)})",
        (f"  backward FLOPs:    {format_count(profile.total_backward_flops)}  "
         f"(MACs {format_count(profile.total_backward_macs)}; recompute {format_count(profile.total_recompute_flops)})"),
        (f"  optimizer FLOPs:   {format_count(optimizer_flops(profile))}"
         + (f"  (MACs {format_count(optimizer_macs(profile))})" if optimizer_macs(profile) else "")
         + (f"  ({profile.settings.get('optimizer')})" if profile.settings.get("optimizer") else "")),
        f"  step FLOPs:        {format_count(step_flops(profile))}",
        f"  forward time:      {format_time_ms(profile.total_time_ms)}",
        f"  backward time:     {format_time_ms(profile.total_backward_time_ms)}",
        f"  optimizer time:    {format_time_ms(sum(optimizer_times) if optimizer_times else None)}",
        "  step duration:     " + (f"{format_time_ms(duration_ms)} (wall clock)" if duration_ms is not None
                                    else f"not measured ({profile.device})"),
        f"  saved for backward: {report.format_bytes(profile.total_saved_bytes)}",
        f"  peak memory:       {report.format_bytes(peak)} ({profile.memory_source})",
    ]
    compiled = report.compiled_text(profile.settings)
    if compiled:  # a torch.compile'd model: the compiled program's own times, beside the eager shadow's nodes
        lines.append(f"  compiled:          {compiled}")
    return "\n".join(lines)

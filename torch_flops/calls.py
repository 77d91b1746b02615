"""One profiled call of the model (what ``TorchFLOPsByFX.propagate`` runs), on either front end,
driven by the one run loop (:func:`torch_flops.runloop.run_repeated`):

* :class:`EagerFront` (the default): every run is one call of the model as it is, recorded by a
  :class:`~torch_flops.session.Recording`; with a backward, the loss and ``loss.backward()`` are
  recorded in the same recording;
* :class:`GraphFront` (``tracer="fx"``/``"export"``, a GraphModule, and the meta fallback): the
  graph is captured once (again when the model changed since) and run by one
  :class:`~torch_flops.interpreter.GraphRunner` per graph; a backward is recorded by a
  backward-only recording over the autograd nodes the interpreter marked;
* :class:`CompiledFront` (what ``torch.compile`` returns): the records come from the eager
  recording of the original module, an extra run on copies of the inputs (undone); the call whose
  output is returned is the compiled model's own, with nothing of torch_flops installed, after an
  untimed warm-up that compiles it, timed end to end.

Both return the model's output, the capture (a function: an eager capture is built when first
asked for) and the :class:`~torch_flops.measuring.Measurements`.
"""

from __future__ import annotations

import dataclasses
import statistics
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

import torch
from torch import fx, nn

from torch_flops._gc import gc_paused
from torch_flops.backward import SequenceMap
from torch_flops.capture import (
    TRACE_GATE,
    Capture,
    CapturedGraph,
    CaptureOptions,
    FxBinder,
    ModelIndex,
    capture_export,
    capture_fx,
)
from torch_flops.compiled import (
    DynamoStats,
    backend_name,
    call_facts,
    check_nothing_installed,
    compile_warmup,
    split_compiled,
)
from torch_flops.errors import DroppedOutputWarning, LossError, TracingError, caller_stacklevel
from torch_flops.formulas import FormulaTable
from torch_flops.interpreter import GraphRunner
from torch_flops.measure import CudaEventTimer, LiveTensors, NullTimer, Timer, input_device, make_memory_probe
from torch_flops.measuring import GraphRun, Measurements
from torch_flops.plan import make_plan
from torch_flops.progress import Progress
from torch_flops.recorder import check_call, check_leaves
from torch_flops.runloop import RunTimes, run_repeated
from torch_flops.session import Recording, Step
from torch_flops.state import ExtraRuns, LeafGrads, copy_inputs, training_flags_restored

__all__ = ["CallSettings", "CompiledFront", "EagerFront", "GraphFront", "checked_loss", "makes_cpu_tensors", "meta_advice",
           "reads_values"]

_NO_SETTINGS: Mapping[str, Any] = MappingProxyType({})


class Result(NamedTuple):
    """One profiled call: the model's output, its measurements, the module facts the records need,
    and the capture (a function: the fx graph of an eager recording is built only when asked for)."""

    output: Any
    measurements: Measurements
    front_end: str  #: "eager", "fx", "export" or "graph_module"
    module_types: Mapping[str, str]
    module_params: Mapping[str, int]
    capture: Callable[[], Capture]
    param_dtypes: Mapping[str, int]  #: parameter dtype -> elements (ModelIndex.param_dtypes)
    settings: Mapping[str, Any] = _NO_SETTINGS  #: what the front end adds to the profile's settings


@dataclass(frozen=True)
class CallSettings:
    """What a profiled call takes from the counter's options."""

    table: FormulaTable
    capture: CaptureOptions  #: leaf modules (and, for fx, concrete arguments)
    ignored: tuple[str, ...]
    warmup: int
    repeat: int
    strict: bool
    mem_func_name: str
    timer_for: Callable[..., Timer]  #: (device, queued=False) -> Timer: Options.timer_for


def checked_loss(value: Any, from_loss_fn: bool) -> torch.Tensor:
    """The loss to run ``backward()`` on: a scalar tensor that needs a gradient, or a clear error."""
    what = "loss_fn(output)" if from_loss_fn else "the model's output (no loss_fn given)"
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        raise LossError(f"backward=True needs a scalar loss, but {what} is {shape}: pass loss_fn=, e.g. "
                         "loss_fn=lambda out: out.sum()")
    if not value.requires_grad:
        raise LossError(f"{what} does not require grad (no parameter or input that needs a gradient "
                         "reaches it, or it ran under torch.no_grad()): there is no backward to profile")
    return value


#: what torch raises when code reads the value of a meta tensor (which has none)
_VALUE_READS = ("cannot be called on meta tensors", "Cannot copy out of meta tensor", "data-dependent",
                "register_meta function for torch.nonzero", "does not have data", "no data!")


def reads_values(e: BaseException) -> bool:
    """Whether ``e`` is meta's refusal to give a value (``.item()``, ``.tolist()``, ``nonzero``,
    a boolean mask): a model that reads values cannot run on meta, its exported graph may."""
    text = str(e)
    return any(marker in text for marker in _VALUE_READS)


def makes_cpu_tensors(e: BaseException) -> bool:
    """Whether a model failed on meta because a CPU tensor it made met a meta tensor (torch's own
    two messages for it)."""
    text = str(e)
    return "Tensor on device cpu is not on the expected device meta" in text or (
        "to be on same device" in text and isinstance(e, RuntimeError))


def meta_advice(e: BaseException) -> str | None:
    """What to do when a model fails on meta for a reason no front end can remove, or None."""
    text = str(e)
    if makes_cpu_tensors(e) or ("device" in text and "meta" in text and "cpu" in text):
        return ("torch_flops: the model makes CPU tensors in its forward (torch.arange or torch.tensor without "
                "device=...), which cannot meet meta tensors: profile it on CPU with small shapes (its counts depend "
                "on shapes only), or make those tensors on the inputs' device.")
    if "Expected inputs of BF16 type" in text:
        return ("torch_flops: the model's grouped matmul (torch._grouped_mm, an MoE's experts) runs in bfloat16 only: "
                "build the meta model in bfloat16 (torch_dtype=torch.bfloat16, or model.to(torch.bfloat16)); its "
                "counts depend on shapes only.")
    return None


class EagerFront:
    """The front end that follows the real execution (see the module docstring)."""

    def __init__(self, model: nn.Module, settings: CallSettings, shadow: bool = False) -> None:
        self.model = model
        self.settings = settings
        #: the last call read a value of a meta tensor (``.item()``), which no run on meta can give
        self.needs_values = False
        #: a shadow of the real call (:class:`CompiledFront`): its backward leaves no gradient behind
        #: outside the model either (the caller undoes the model's)
        self.shadow = shadow

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any], *, loss_fn: Callable[[Any], Any] | None,
             backward: bool, progress: Progress) -> Result:
        model, s = self.model, self.settings
        check_call(model, args, kwargs)
        device = input_device((args, kwargs), model)
        index = ModelIndex(model, s.table, s.capture.leaf_types, s.capture.leaf_paths, s.capture.leaf_names)
        if s.strict:
            check_leaves(index, s.table, s.ignored)
        runner = _EagerRunner(index, s, device, loss_fn, backward, progress)
        runner.restore_grads = self.shadow
        self.needs_values = False
        try:
            # (the training flags the real call leaves stay: an extra run's are put back by ExtraRuns)
            with TRACE_GATE.running(), gc_paused():  # no trace meanwhile
                output, measurements = run_repeated(runner, (args, kwargs), warmup=s.warmup, repeat=s.repeat,
                                                    device=device,
                                                    extra_runs=lambda: ExtraRuns(index.tensors, modules=index.modules),
                                                    progress=progress)
        finally:
            self.needs_values = runner.needs_values
        step = runner.counted
        assert step is not None
        if s.strict:
            step.graph.check_strict()
        return Result(output, measurements, "eager", index.types, index.params, step.graph.capture,
                      index.param_dtypes)


class _EagerRunner:
    """Each run: one call of the model (and its loss and backward) under a new recording."""

    def __init__(self, index: ModelIndex, settings: CallSettings, device: torch.device,
                 loss_fn: Callable[[Any], Any] | None, backward: bool, progress: Progress | None = None) -> None:
        self.index, self.settings, self.device, self.progress = index, settings, device, progress
        self.loss_fn, self.backward = loss_fn, backward
        self.memory = make_memory_probe(device, settings.mem_func_name, index.storages)
        self.memory_source = self.memory.source
        self.timer: Timer | None = None  # one for all the runs of this call (a CUDA timer of ours learns the host time)
        self._warmup_timer: Timer = NullTimer()
        self.counted: Step | None = None
        self.needs_values = False
        self.restore_grads = False  #: the counting run's backward, too, leaves no gradient behind
        self._planned: dict[Any, Any] = {}  # each target's plan, shared by this call's runs
        self._last: tuple[Step, Timer] | None = None

    def call(self, inputs: tuple[tuple[Any, ...], dict[str, Any]], *, count: bool, timed: bool) -> Any:
        args, kwargs = inputs
        loss_fn = self.loss_fn
        self._last = None
        s = self.settings
        warmup = not (count or timed)  # recorded too, so that an error names its node; never timed
        if self.timer is None:
            self.timer = s.timer_for(self.device, queued=True)
            # a warm-up is untimed, except by a CUDA timer of ours that queues the runs: it learns the
            # host's launch time there, so that every timed run is queued (as in the fx front end)
            self._warmup_timer = self.timer if isinstance(self.timer, CudaEventTimer) and self.timer.queue_ahead \
                else NullTimer()
        recording = Recording(self.index, s.table, timer=self._warmup_timer if warmup else self.timer,
                              memory=self.memory, device=self.device, ignored=s.ignored, backward=self.backward,
                              progress=self.progress, planned=self._planned)
        grads: LeafGrads | None = None
        recording.start()
        try:
            output, loss = recording.record_call(
                args, kwargs, (loss_fn if loss_fn is not None else _identity) if self.backward else None)
            if self.backward:
                with recording.paused():  # the profiler's own checks are no node of the program
                    loss = checked_loss(loss, loss_fn is not None)
                    if not count or self.restore_grads:  # an extra step leaves no gradient behind
                        grads = LeafGrads(loss)
                recording.run_backward(loss)
        finally:
            recording.stop()
            self.needs_values = recording.needs_values
            if grads is not None:
                grads.restore()
        if warmup:
            return output
        if not recording.steps:
            raise RuntimeError(f"{type(self.index.model).__name__} ran without nn.Module.__call__ (its own __call__ does not "
                               "call super().__call__?): no module call was seen, so nothing was recorded; profile "
                               "the module its __call__ runs")
        step = recording.steps[0]
        self._last = (step, recording.timer)
        if count:
            self.counted = step
        return output

    def run_times(self) -> RunTimes | None:
        if self._last is None:
            return None
        step, timer = self._last
        backward = step.backward.times(timer) if step.backward is not None else None
        return RunTimes(step.graph.times(), backward, step.graph.program())

    def measured(self, times: RunTimes) -> GraphRun:
        assert self._last is not None and self.counted is not None
        return self.counted.graph_run(self._last[1], times.forward, times.backward)


class GraphFront:
    """The fx and export front ends (see the module docstring): ``tracer`` is ``"fx"`` (a graph
    captured now, for any inputs) or ``"export"`` (captured on the first call, for its inputs).
    ``fx_error``: why fx failed, when export is the fallback; ``counts_only``: see the attribute."""

    def __init__(self, model: nn.Module, settings: CallSettings, tracer: str, fx_error: TracingError | None = None,
                 progress: Progress | None = None, counts_only: bool = False) -> None:
        self.model = model
        self.settings = settings
        self.tracer = tracer
        self.fx_error = fx_error
        #: the meta fallback of tracer='auto' (the model cannot run): changes of module state the
        #: export graph does not replay are warned about, not refused (capture_export)
        self.counts_only = counts_only
        self._capture: Capture | None = None
        self._runners: dict[CapturedGraph, tuple[GraphRunner, frozenset[int]]] = {}
        #: fx graphs traced again with optional arguments a call leaves out fixed to None (by their names)
        self._variants: dict[frozenset[str], Capture] = {}
        if tracer == "fx":
            self._capture = self._capture_fx(progress or Progress(False))

    @property
    def capture(self) -> Capture | None:
        return self._capture

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any], *, loss_fn: Callable[[Any], Any] | None,
             backward: bool, progress: Progress) -> Result:
        s = self.settings
        check_call(self.model, args, kwargs)  # (the TypeError eager raises, not a trace's failure)
        capture = self._capture_for(args, kwargs, progress)
        graph = capture.graphs[0]
        binder = graph.binder
        ignored = binder.ignored(args, kwargs) if isinstance(binder, FxBinder) else []
        if ignored:
            warnings.warn(f"torch_flops: the fx graph does not use {', '.join(map(repr, ignored))} (traced with its "
                          "default None, no node reads it), so the value passed changes nothing here, though the "
                          "model's own forward may branch on it: the default front end runs the model as it is.",
                          UserWarning, stacklevel=caller_stacklevel())
        progress.step("planning")
        runner, storages = self._runner(graph)
        if s.strict:
            runner.plan.check_strict()
        inputs = graph.bind(args, kwargs)
        device = input_device((args, kwargs), self.model)
        snapshot = capture.snapshot
        assert snapshot is not None
        sequences = SequenceMap() if backward else None
        memory = make_memory_probe(device, s.mem_func_name, storages)
        gm = graph.graph_module
        with TRACE_GATE.running(), training_flags_restored(snapshot.modules), gc_paused(), runner.lock:
            runner.prepare(timer=s.timer_for(device, queued=True), memory=memory, strict=s.strict,
                           timed=device.type != "meta", sequences=sequences, progress=progress)
            output, measurements = run_repeated(
                runner, inputs, warmup=s.warmup, repeat=s.repeat, device=device,
                extra_runs=lambda: ExtraRuns(snapshot.index.tensors, gm, modules=snapshot.index.modules),
                progress=progress)
            capture.check_output(output)  # (export: the forward's autograd state, replayed or refused)
            output = _plain_containers(output)
            if sequences is not None:
                loss = checked_loss(output if loss_fn is None else loss_fn(output), loss_fn is not None)
                n = len(runner.plan.nodes)
                recording = Recording(snapshot.index, s.table, timer=s.timer_for(device), memory=memory,
                                      device=device, sequences=sequences, forward_nodes=n, backward=True)
                with recording:
                    recording.run_backward(loss)
                assert recording.backward_run is not None
                graph_run = measurements.runs[0].with_backward(recording.backward_run, recording.timer)
                measurements = Measurements.of([graph_run], device, measurements.memory_source)
        return Result(output, measurements, capture.front_end, capture.module_types, capture.module_params,
                      lambda: capture, snapshot.index.param_dtypes)

    def _capture_fx(self, progress: Progress) -> Capture:
        progress.step("capturing (torch.fx)")
        return capture_fx(self.model, self.settings.capture)

    def _capture_for(self, args: tuple[Any, ...], kwargs: dict[str, Any], progress: Progress) -> Capture:
        capture = self._capture
        if capture is not None and capture.snapshot is not None and not capture.snapshot.holds():
            # train()/eval(), a dtype or device move, replaced parameters or modules since the capture:
            # the graph may hold a branch or tensors the model no longer has; capture again
            capture = self._capture = None
            self._runners, self._variants = {}, {}
            if self.tracer == "fx":
                capture = self._capture = self._capture_fx(progress)
        if capture is not None and capture.front_end == "fx":
            capture = self._fx_variant(capture, args, kwargs, progress)
        if capture is not None and capture.accepts(args, kwargs):
            return capture
        progress.step("capturing (torch.export)")
        capture = capture_export(self.model, args, kwargs, fx_error=self.fx_error, counts_only=self.counts_only,
                                 options=self.settings.capture)
        if capture.dropped_outputs:
            warnings.warn("torch_flops: the returned output leaves out what torch.export cannot carry through a "
                          f"graph: {', '.join(capture.dropped_outputs)} (set to None); everything else is the "
                          "model's output.", DroppedOutputWarning, stacklevel=caller_stacklevel())
        self._capture, self._runners = capture, {}
        return capture

    def _fx_variant(self, capture: Capture, args: tuple[Any, ...], kwargs: dict[str, Any],
                    progress: Progress) -> Capture:
        """The fx graph for a call that leaves out (or gives as None) arguments whose default is None
        and which the graph uses (``forward(x, mask=None)`` called as ``propagate(x)``): fx traced ``mask`` as an
        input, so its ``if mask is not None`` branch is in the graph; traced again with those
        arguments None (``concrete_args``), once per set of names. A trace that fails keeps the
        graph as it is (its error then names the node)."""
        binder = capture.graphs[0].binder
        omitted = binder.omitted(args, kwargs) if isinstance(binder, FxBinder) else frozenset()
        if not omitted:
            return capture
        variant = self._variants.get(omitted)
        if variant is None:
            options = self.settings.capture
            fixed = {**(options.concrete_args or {}), **dict.fromkeys(sorted(omitted))}
            progress.step("capturing (torch.fx)")
            try:
                variant = capture_fx(self.model, dataclasses.replace(options, concrete_args=fixed))
            except Exception:  # noqa: BLE001  (TracingError, or the forward's own error while traced)
                variant = capture
            self._variants[omitted] = variant
        return variant

    def _runner(self, graph: CapturedGraph) -> tuple[GraphRunner, frozenset[int]]:
        if graph not in self._runners:  # once per graph: the plan, its interpreter, the model's storages
            gm = graph.graph_module
            storages = LiveTensors.storage_keys([*gm.parameters(), *gm.buffers()])
            plan = make_plan(graph, self.settings.table, self.settings.ignored, through_aten=not self.settings.strict)
            self._runners[graph] = (GraphRunner(plan), storages)
        return self._runners[graph]


class CompiledFront:
    """A ``torch.compile``'d model (see the module docstring). Nothing of torch_flops is installed
    while the compiled model runs: under a dispatch mode Dynamo would run it eagerly, and our
    function mode and module hooks would break its graphs and make ``OptimizedModule`` warn."""

    def __init__(self, model: nn.Module, settings: CallSettings) -> None:
        original, compiled = split_compiled(model)
        if compiled is None:
            raise TypeError(f"CompiledFront needs what torch.compile returns, got {type(model).__name__}")
        self.model, self.original, self.compiled = model, original, compiled
        self.settings = settings
        self.eager = EagerFront(original, settings, shadow=True)  #: the records' front end

    @property
    def needs_values(self) -> bool:
        return self.eager.needs_values

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any], *, loss_fn: Callable[[Any], Any] | None,
             backward: bool, progress: Progress) -> Result:
        s = self.settings
        check_call(self.original, args, kwargs)
        device = input_device((args, kwargs), self.original)
        backend = backend_name(self.compiled)
        if device.type == "meta":  # no compiled program runs on meta tensors: the original module's run
            result = self.eager.call(args, kwargs, loss_fn=loss_fn, backward=backward, progress=progress)
            return result._replace(settings={"compiled_call": call_facts(
                backend, calls=0, timing="", forward_ms=None, backward_ms=None, compile_s=0.0, warm_compiles=0,
                stats=DynamoStats(), nodes="meta tensors: the original module's eager run (no compiled program runs "
                                           "on meta)")})
        # the records: the original module, recorded eagerly on copies of the inputs, undone
        saved = ExtraRuns((), self.original)
        try:
            shadow_args, shadow_kwargs = copy_inputs((args, kwargs))
            shadow = self.eager.call(shadow_args, shadow_kwargs, loss_fn=loss_fn, backward=backward, progress=progress)
        finally:
            saved.undo()
        progress.step("compiling (torch.compile warm-up)")
        before = DynamoStats.now()
        compile_s = compile_warmup(self.compiled, args, kwargs, calls=max(s.warmup, 1), backward=backward,
                                   loss_fn=loss_fn)
        warm = DynamoStats.now() - before
        # the compiled program: repeat - 1 timed calls on copies (undone), then the real one
        timer = s.timer_for(device)
        marks: list[tuple[Any, Any, Any, Any]] = []
        for i in range(s.repeat - 1):
            progress.step(f"compiled call {i + 1}/{s.repeat}")
            extra = ExtraRuns((), self.original)
            grads: list[LeafGrads] = []
            try:
                call_args, call_kwargs = copy_inputs((args, kwargs))
                self._step(call_args, call_kwargs, loss_fn, backward, timer, marks, grads)
            finally:
                for g in grads:
                    g.restore()
                extra.undo()
        progress.step(f"compiled call {s.repeat}/{s.repeat}")
        output = self._step(args, kwargs, loss_fn, backward, timer, marks, None)
        timer.finish()
        forward = [timer.elapsed_ms(a, b) for a, b, _, _ in marks]
        back = [timer.elapsed_ms(c, d) for _, _, c, d in marks] if backward else []
        facts = call_facts(
            backend, calls=len(marks), timing=f"median of {len(marks)} timed call(s)", forward_ms=_median(forward),
            backward_ms=_median(back) if backward else None, compile_s=compile_s, warm_compiles=warm.compiles,
            stats=DynamoStats.now() - before,
            nodes="the original module's eager run (counts, bytes, eager times); forward_ms and backward_ms: the "
                  "compiled program's (medians over the timed calls)")
        return shadow._replace(output=output, settings={"compiled_call": facts})

    def _step(self, args: tuple[Any, ...], kwargs: dict[str, Any], loss_fn: Callable[[Any], Any] | None,
              backward: bool, timer: Timer, marks: list[tuple[Any, Any, Any, Any]], grads: list[LeafGrads] | None
              ) -> Any:
        """One call of the compiled model (and its loss and ``loss.backward()``), nothing of ours
        installed; its timer marks: the call, the backward."""
        check_nothing_installed()
        start = timer.tick()
        output = self.compiled(*args, **kwargs)
        end = timer.tick()
        back: tuple[Any, Any] = (None, None)
        if backward:
            loss = checked_loss(output if loss_fn is None else loss_fn(output), loss_fn is not None)
            if grads is not None:
                grads.append(LeafGrads(loss))
            first = timer.tick()
            loss.backward()
            back = (first, timer.tick())
        marks.append((start, end, *back))
        return output


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known and len(known) == len(values) else None


def _identity(value: Any) -> Any:
    return value


def _plain_containers(value: Any) -> Any:
    """fx hands back its read-only ``immutable_dict``/``immutable_list``: the model's own output
    has plain ones (``out[k] = v`` works on it)."""
    if isinstance(value, fx.immutable_collections.immutable_dict):
        return {k: _plain_containers(v) for k, v in value.items()}
    if isinstance(value, fx.immutable_collections.immutable_list):
        return [_plain_containers(v) for v in value]
    if type(value) is tuple:
        return tuple(_plain_containers(v) for v in value)
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):  # a namedtuple: its own type, items plain
        return type(value)(*(_plain_containers(v) for v in value))
    if type(value) is list:
        return [_plain_containers(v) for v in value]
    if type(value) is dict:
        return {k: _plain_containers(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # (built by the graph: its fields, in place)
        for f in dataclasses.fields(value):
            item = getattr(value, f.name, None)
            plain = _plain_containers(item)
            if plain is not item:
                object.__setattr__(value, f.name, plain)
    return value

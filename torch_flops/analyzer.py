"""``TorchFLOPsByFX``: the facade over capture -> plan -> run -> Profile -> report.

It keeps the checked :class:`~torch_flops.options.Options`, the capture and one
:class:`~torch_flops.interpreter.Runner` (a plan and its interpreter) per graph, and wraps the
report functions. Each step is a function of the one before: ``capture_fx``/``capture_export``
give a :class:`~torch_flops.capture.Capture`, ``make_plan`` a :class:`~torch_flops.plan.Plan`,
``Runner.run`` the output and frozen :class:`~torch_flops.interpreter.Measurements`,
:meth:`Profile.from_measurements` the records; :mod:`torch_flops.report` turns those into text.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

import torch
from torch import fx, nn

from torch_flops import formulas, report
from torch_flops._gc import gc_paused
from torch_flops.backward import SequenceMap, run_backward
from torch_flops.capture import TRACE_GATE, Capture, CapturedGraph, capture_export, capture_fx
from torch_flops.distributed import distributed_settings
from torch_flops.eager import EagerRecording, ModelIndex, check_call, check_leaves
from torch_flops.errors import (
    DroppedOutputWarning,
    NodeExecutionError,
    TracerFallbackWarning,
    TracingError,
    UnsupportedOpWarning,
)
from torch_flops.hardware import HardwareSpec, names, spec_for_device_name
from torch_flops.html import write_html
from torch_flops.interpreter import Measurements, Runner, median
from torch_flops.measure import LiveTensors, Timer, input_device, make_memory_probe, tensors_of
from torch_flops.options import Options, TracerName
from torch_flops.plan import make_plan
from torch_flops.progress import Progress
from torch_flops.records import NodeRecord, Profile
from torch_flops.roofline import Roofline, roofline
from torch_flops.state import ExtraRuns, LeafGrads, copy_inputs, model_state_restored

__all__ = ["TorchFLOPsByFX"]


class TorchFLOPsByFX:
    """Count FLOPs/MACs and measure time and memory of every node of a model's graph.

    >>> counter = TorchFLOPsByFX(model)
    >>> out = counter.propagate(x)          # the model's real output
    >>> counter.print_result_table()        # one row per node
    >>> total = counter.print_total_flops()

    Args:
        model: an ``nn.Module`` (traced with ``torch.fx.symbolic_trace``) or a ``fx.GraphModule``.
        ignore_ops: module class names, module paths, function or method names whose nodes get
            status ``ignored`` and 0 FLOPs (a module class named here is kept as one node).
        mem_func_name: on CUDA, ``"memory_allocated"`` or ``"max_memory_allocated"``.
        strict: raise :class:`UnsupportedOpError` for nodes without a formula instead of warning.
        warmup: untimed runs before measuring.
        repeat: timed runs; each node's time is the median over them. FLOPs come from one run.
        leaf_modules: module classes or paths kept as single nodes by the fx tracer. Classes the
            user registered a formula for are kept whole automatically.
        concrete_args: arguments fixed while tracing (``torch.fx.symbolic_trace``'s own).
        tracer: ``"fx"`` (symbolic tracing), ``"export"`` (``torch.export``, traced on the first
            ``propagate``) or ``"auto"`` (fx, falling back to export with a warning).
        timer: a :class:`~torch_flops.measure.Timer` (``tick``/``finish``/``elapsed_ms``) or a
            function ``device -> Timer``; default: events on accelerators, ``perf_counter_ns`` on CPU.
        progress: a progress line on stderr for steps that take more than a second (None: only
            when stderr is a terminal).
    """

    #: column names of :meth:`print_result_table`'s rows and of the CSV file
    result_header: ClassVar[list[str]] = list(report.NODE_COLUMNS)

    def __init__(self, model: nn.Module, *, ignore_ops: Iterable[str] = (),
                 mem_func_name: str = "memory_allocated", strict: bool = False, warmup: int = 0,
                 repeat: int = 1, leaf_modules: Iterable[type | str] = (),
                 concrete_args: Mapping[str, Any] | None = None, tracer: TracerName = "auto",
                 timer: Timer | Callable[[torch.device], Timer] | None = None, progress: bool | None = None) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        self.options = Options(ignore_ops=ignore_ops, mem_func_name=mem_func_name, strict=strict, warmup=warmup,
                               repeat=repeat, leaf_modules=leaf_modules, concrete_args=concrete_args, tracer=tracer,
                               timer=timer, progress=progress)
        if isinstance(model, torch.jit.ScriptModule):
            raise TypeError("torch_flops profiles a model's Python code, and a TorchScript model (torch.jit.ScriptModule) "
                            "has none: profile the nn.Module before scripting it")
        self.model = model
        self.tables = formulas.FORMULAS.copy()  # this counter's own formulas: later edits do not leak in
        self._capture: Capture | None = None  # the capture of the last propagate (or fx's, made here)
        self._graph: Capture | None = None  # the fx or export graph(s), kept across calls
        self._data_fallback = False  # meta inputs the model reads values of: torch.export instead
        self._fx_first = False  # an fx graph was captured (so a stale one is captured again by fx)
        self._snapshot: _Snapshot | None = None  # the model's state when the graph was captured
        self._fx_error: TracingError | None = None
        self._runners: dict[CapturedGraph, tuple[Runner, frozenset[int]]] = {}
        self._measured: tuple[Capture, Measurements, int | None] | None = None
        self._profile: Profile | None = None
        self._warned: set[str] = set()  # unsupported targets already warned about (once per counter)
        self._distributed: dict[str, int] = {}  # rank and world size of the last propagate (none: {})
        #: the front end that follows the real execution (a GraphModule is its own program: run as
        #: is); "auto" prefers a graph only for formulas of Python functions or Tensor methods the
        #: user registered, which the aten ops of an eager run cannot show
        self._eager = not isinstance(model, fx.GraphModule) and (
            tracer == "eager" or tracer == "auto" and not self.tables.user_graph_keys())
        if not self._eager and tracer != "export":
            shown = Progress(progress)
            shown.step("capturing (torch.fx)")
            try:
                self._capture = self._graph = capture_fx(model, self.options.capture_options(self.tables))
                self._fx_first = True
                self._snapshot = _Snapshot(model, self._graph.graph_module)
            except TracingError as e:
                if tracer == "fx":
                    raise
                self._fx_error = e
            finally:
                shown.done()

    @property
    def capture(self) -> Capture | None:
        """The graph(s) being profiled (None until an export capture has run)."""
        return self._capture

    @property
    def graph_module(self) -> fx.GraphModule | None:
        return self._capture.graph_module if self._capture is not None else None

    @property
    def tracer_used(self) -> str | None:
        return self._capture.front_end if self._capture is not None else None

    # ------------------------------------------------------------------ running
    def propagate(self, *args: Any, loss_fn: Callable[[Any], Any] | None = None, backward: bool = False,
                  **kwargs: Any) -> Any:
        """Run the model on these inputs, measuring every node; return the model's output.

        On the default front end (``tracer="auto"``/``"eager"``) this *is* one call of the model,
        with everything one call does (hooks, in-place updates, buffers, random numbers); extra
        ``warmup``/``repeat`` calls get copies of the inputs and leave no trace.

        ``backward=True`` (implied by ``loss_fn``) also runs the loss (``loss_fn(output)``, or the
        output itself when it is a scalar tensor) and ``loss.backward()``: the gradients land in
        ``.grad`` as one eager forward + backward would put them, and every forward node's record
        gets the work, time and saved bytes of its own backward (``backward_flops``, ...)."""
        if loss_fn is not None and not callable(loss_fn):
            raise TypeError(f"loss_fn must be a callable taking the model's output, got {type(loss_fn).__name__}")
        if not isinstance(backward, bool):
            raise TypeError(f"backward must be True or False, got {type(backward).__name__}")
        backward = backward or loss_fn is not None
        if backward and not torch.is_grad_enabled():
            raise ValueError("backward=True under torch.no_grad() or torch.inference_mode(): the forward would "
                             "record no graph to run backward on; call propagate outside it")
        if backward and not self._eager and (self.options.tracer != "auto" or isinstance(self.model, fx.GraphModule)):
            raise ValueError(f"backward=True profiles the backward autograd runs, which needs the eager front end "
                             f"(tracer='auto' or 'eager'), not tracer={self.options.tracer!r}")
        progress = Progress(self.options.progress)
        try:
            if backward:
                output, capture, measurements = self._propagate_backward(args, kwargs, progress, loss_fn)
            else:
                output, capture, measurements = self._propagate(args, kwargs, progress)
        finally:
            progress.done()
        self._measured, self._profile = (capture, measurements, _batch_size((args, kwargs))), None
        self._distributed = distributed_settings()  # rank and world size, while the group is up
        self._warn_unsupported(measurements)
        return output

    def _propagate(self, args: tuple[Any, ...], kwargs: dict[str, Any],
                   progress: Progress) -> tuple[Any, Capture, Measurements]:
        """The front end for these inputs: eager (falling back to torch.export for meta inputs the
        model reads values of), or the fx/export graph."""
        options = self.options
        if not self._eager and self._graph is None and self._fx_error is not None and options.tracer == "auto":
            self._eager = True
            warnings.warn("torch_flops: torch.fx cannot trace this model, so it is profiled as it runs (eagerly), "
                          "where the formulas you registered for Python functions or Tensor methods do not apply "
                          "(their aten ops are counted instead).", TracerFallbackWarning, stacklevel=3)
        meta = input_device((args, kwargs), self.model).type == "meta"
        if not self._eager or (meta and self._data_fallback):
            return self._propagate_graph(args, kwargs, progress)
        try:
            return self._propagate_eager(args, kwargs, progress)
        except NodeExecutionError as e:
            if not (meta and options.tracer == "auto" and getattr(e, "needs_values", False)):
                raise
        self._data_fallback = True
        warnings.warn("torch_flops: the model reads tensor values in Python (.item(), if tensor: ...), which meta "
                      "tensors do not have, so this meta profile comes from the graph torch.export traces instead of "
                      "from a run.", TracerFallbackWarning, stacklevel=3)
        return self._propagate_graph(args, kwargs, progress)

    def _warn_unsupported(self, measurements: Measurements) -> None:
        """One warning per target without a formula, per counter, at the caller's line."""
        for target, nodes in measurements.unsupported().items():
            if target in self._warned:
                continue
            self._warned.add(target)
            names = ", ".join(name for name, _ in nodes[:5]) + (", ..." if len(nodes) > 5 else "")
            warnings.warn(
                f"torch_flops: no FLOPs formula for {target} ({len(nodes)} node(s): {names}; {nodes[0][1]}); "
                "these nodes are excluded from the totals. Register one with torch_flops.register_function/"
                "register_method/register_module/register_aten, or pass ignore_ops / strict=True.",
                UnsupportedOpWarning, stacklevel=3)

    def _propagate_backward(self, args: tuple[Any, ...], kwargs: dict[str, Any], progress: Progress,
                            loss_fn: Callable[[Any], Any] | None) -> tuple[Any, Capture, Measurements]:
        """Forward, loss and backward: on the eager front end; for meta inputs that the model reads
        values of (which no run can give), through the graph torch.export traces."""
        meta = input_device((args, kwargs), self.model).type == "meta"
        if not (meta and self._data_fallback):
            try:
                return self._propagate_eager(args, kwargs, progress, (loss_fn,))
            except NodeExecutionError as e:
                if not (meta and getattr(e, "needs_values", False)):
                    raise
            self._data_fallback = True
            warnings.warn("torch_flops: the model reads tensor values in Python (.item(), if tensor: ...), which meta "
                          "tensors do not have, so this meta forward and backward run the graph torch.export traces "
                          "(its gradients land on the graph's own parameters, not the model's).",
                          TracerFallbackWarning, stacklevel=4)
        return self._propagate_graph(args, kwargs, progress, (loss_fn,))

    def _propagate_graph(self, args: tuple[Any, ...], kwargs: dict[str, Any], progress: Progress,
                         backward: tuple[Callable[[Any], Any] | None] | None = None,
                         ) -> tuple[Any, Capture, Measurements]:
        """The fx and export front ends: run the captured graph with the interpreter."""
        options = self.options
        capture = self._capture_for(args, kwargs, progress)
        graph = capture.graphs[0]
        progress.step("planning")
        runner, model_storages = self._runner(graph)
        if options.strict:
            runner.plan.check_strict()
        inputs = graph.bind(args, kwargs)
        device = input_device((args, kwargs), self.model)
        modules = self._snapshot.modules if self._snapshot is not None else None
        sequences = SequenceMap() if backward is not None else None
        with TRACE_GATE.running(), model_state_restored(self.model, modules), gc_paused():  # no trace meanwhile
            output, measurements = runner.run(
                inputs, device=device, warmup=options.warmup, repeat=options.repeat, strict=options.strict,
                timer=options.timer_for(device), progress=progress, model=self.model,
                memory=make_memory_probe(device, options.mem_func_name, model_storages), sequences=sequences)
            output = _plain_containers(output)
            if backward is not None and sequences is not None:
                loss_fn = backward[0]
                loss = _checked_loss(output if loss_fn is None else loss_fn(output), loss_fn is not None)
                timer = options.timer_for(device)
                graph_run = measurements.runs[0]
                run, _ = run_backward(loss, self.tables, sequences, len(graph_run.plan.nodes), model_storages, timer)
                measurements = dataclasses.replace(measurements, runs=(graph_run.with_backward(run, timer),))
        return output, capture, measurements

    def _propagate_eager(self, args: tuple[Any, ...], kwargs: dict[str, Any], progress: Progress,
                         backward: tuple[Callable[[Any], Any] | None] | None = None,
                         ) -> tuple[Any, Capture, Measurements]:
        """The eager front end: the extra calls first (on copies, undone), then the one real call.
        ``backward``: ``(loss_fn,)`` to run the loss and its backward after each call."""
        model, options = self.model, self.options
        check_call(model, args, kwargs)
        device = input_device((args, kwargs), model)
        timed = device.type != "meta"
        warmups, repeats = (options.warmup, options.repeat - 1) if timed else (0, 0)
        leaf = options.capture_options(self.tables)
        index = ModelIndex(model, self.tables, leaf.leaf_types, leaf.leaf_paths, leaf.leaf_names)
        if options.strict:
            check_leaves(index, self.tables, options.ignore_ops)

        def recording() -> EagerRecording:
            return EagerRecording(model, index, self.tables, options.ignore_ops, options.timer_for(device),
                                  make_memory_probe(device, options.mem_func_name, index.storages), options.strict,
                                  backward=backward is not None)

        def step(run: EagerRecording, call_args: tuple[Any, ...], call_kwargs: dict[str, Any],
                 extra: bool = False) -> tuple[Any, Any]:
            if backward is None:
                return run.run(call_args, call_kwargs), None
            loss_fn = backward[0]
            output = run.run(call_args, call_kwargs, loss_fn if loss_fn is not None else _identity)
            loss = _checked_loss(run.loss, loss_fn is not None)
            if not extra:
                return output, run.backward(loss, self.tables)
            grads = LeafGrads(loss)  # every leaf it reaches, in the model or not: put back after
            try:
                return output, run.backward(loss, self.tables)
            finally:
                grads.restore()

        total = warmups + repeats + 1
        extra: list[tuple[EagerRecording, Any]] = []
        with TRACE_GATE.running(), model_state_restored(model, index.modules), gc_paused():  # no trace meanwhile
            saved = ExtraRuns(model) if warmups or repeats else None
            for i in range(warmups + repeats):
                progress.step(f"run {i + 1}/{total}" + (" (warmup)" if i < warmups else ""))
                copies, kwcopies = copy_inputs(args), copy_inputs(kwargs)
                try:
                    if i < warmups and backward is None:
                        model(*copies, **kwcopies)
                    else:
                        run = recording()
                        _, backward_run = step(run, copies, kwcopies, extra=True)
                        if i >= warmups:
                            extra.append((run, backward_run))
                finally:  # also when the call failed: buffers, gradients and RNG as they were
                    saved.undo()  # type: ignore[union-attr]
            progress.step(f"run {total}/{total}")
            real = recording()
            output, backward_run = step(real, args, kwargs)
            capture = real.capture()
        times = real.times()
        same = [(run, bw) for run, bw in extra if run.targets() == real.targets()]
        if same:  # the same program each time: the median per node
            times = [_median(column) for column in zip(times, *(run.times() for run, _ in same))]
        real.check_strict()
        graph_run = real.measured(times)
        if backward_run is not None:
            timer = options.timer_for(device)
            backward_times = backward_run.times(timer)
            if same:
                backward_times = [_median(column) for column in zip(
                    backward_times, *(bw.times(timer) for _, bw in same if len(bw.flops) == len(backward_run.flops)))]
            graph_run = graph_run.with_backward(backward_run, timer, backward_times)
        measurements = Measurements(runs=(graph_run,), device=str(device),
                                    memory_source=real.memory_source,
                                    device_name=torch.cuda.get_device_name(device) if device.type == "cuda" else "")
        self._capture = capture
        return output, capture, measurements

    def _capture_for(self, args: tuple[Any, ...], kwargs: dict[str, Any], progress: Progress) -> Capture:
        graph = self._graph
        if graph is not None and self._snapshot is not None and not self._snapshot.holds():
            # train()/eval(), a dtype or device move, replaced parameters or modules since the capture:
            # the graph may hold a branch or tensors the model no longer has; capture again
            graph = self._graph = None
            self._runners = {}
            if self.options.tracer == "fx" or self._fx_first:
                progress.step("capturing (torch.fx)")
                graph = self._graph = capture_fx(self.model, self.options.capture_options(self.tables))
                self._snapshot = _Snapshot(self.model, graph.graph_module)
        if graph is not None and graph.accepts(args, kwargs):
            self._capture = graph
            return graph
        progress.step("capturing (torch.export)")
        capture = capture_export(self.model, args, kwargs, fx_error=self._fx_error)
        self._snapshot = _Snapshot(self.model)  # export holds its own copies: the flags alone
        if capture.dropped_outputs:
            warnings.warn("torch_flops: the returned output leaves out what torch.export cannot carry through a "
                          f"graph: {', '.join(capture.dropped_outputs)} (set to None); everything else is the "
                          "model's output.", DroppedOutputWarning, stacklevel=5)
        self._capture, self._graph, self._runners = capture, capture, {}
        return capture

    def _runner(self, graph: CapturedGraph) -> tuple[Runner, frozenset[int]]:
        if graph not in self._runners:  # once per graph: the plan, its interpreter, the model's storages
            gm = graph.graph_module
            storages = LiveTensors.storage_keys([*gm.parameters(), *gm.buffers()])
            self._runners[graph] = (Runner(make_plan(graph, self.tables, self.options.ignore_ops)), storages)
        return self._runners[graph]

    # ------------------------------------------------------------------ results
    @property
    def profile(self) -> Profile:
        """The immutable result of the last ``propagate`` (records and roll-ups)."""
        if self._profile is None:
            if self._measured is None:
                raise RuntimeError("no results yet: call propagate(*inputs) first")
            capture, measurements, batch_size = self._measured
            self._profile = Profile.from_measurements(
                measurements, tracer=capture.front_end, module_types=capture.module_types,
                module_params=capture.module_params, batch_size=batch_size,
                settings={**self.options.settings(), "memory_source": measurements.memory_source,
                          **({"device_name": measurements.device_name} if measurements.device_name else {}),
                          **self._distributed})
        return self._profile

    @property
    def records(self) -> tuple[NodeRecord, ...]:
        return self.profile.records

    @property
    def total_flops(self) -> int:
        return self.profile.total_flops

    @property
    def total_backward_flops(self) -> int:
        """FLOPs of the last ``propagate``'s backward (0 without ``backward=True``): see
        :attr:`Profile.total_backward_flops`."""
        return self.profile.total_backward_flops

    @property
    def total_backward_macs(self) -> int:
        return self.profile.total_backward_macs

    @property
    def total_macs(self) -> int:
        return self.profile.total_macs

    @property
    def total_time_ms(self) -> float | None:
        return self.profile.total_time_ms

    @property
    def max_memory(self) -> int | None:
        return self.profile.max_memory

    @property
    def unsupported(self) -> dict[str, int]:
        return self.profile.unsupported

    def in_convention(self, convention: str = "torch_flops") -> Profile:
        """:attr:`profile` counted in another convention (:mod:`torch_flops.conventions`): the
        ``convention=`` argument of the print and export methods."""
        return self.profile.with_convention(convention)

    def print_result_table(self, show: bool = True, group_by: report.GroupBy = "node",
                           as_string: bool = False, convention: str = "torch_flops", top: int | None = None,
                           sort_by: str | None = None) -> list[list[Any]]:
        """Print one row per node (``group_by="node"``), per module (``"module"``, each including
        its submodules) or per operator (``"operator"``), with a legend, and return the rows: raw
        numbers, or as printed with ``as_string=True`` (a list with a one-line repr). ``sort_by``:
        a column (``"flops"``, ``"time"``, ...), largest first; ``top``: the first rows only (by
        FLOPs without ``sort_by``). Columns: ``report.NODE_COLUMNS`` / ``MODULE_COLUMNS`` /
        ``OPERATOR_COLUMNS``."""
        profile = self.in_convention(convention)
        columns, rows = report.rows_for(profile, group_by, sort_by=sort_by, top=top)
        if show:
            print(report.table_text(profile, group_by, sort_by=sort_by, top=top) + "\n\n"
                  + report.legend_text(profile, group_by))
        return report.Rows(report.format_rows(columns, rows) if as_string else rows, columns)

    def print_total_flops(self, show: bool = True, convention: str = "torch_flops") -> int:
        profile = self.in_convention(convention)
        if show:
            print(report.total_flops_text(profile))
        return profile.total_flops

    def print_total_time(self, show: bool = True) -> float | None:
        return self._show(report.total_time_text, show, self.profile.total_time_ms)

    def print_max_memory(self, show: bool = True) -> int | None:
        return self._show(report.max_memory_text, show, self.profile.max_memory)

    def _show(self, text: Callable[[Profile], str], show: bool, value: Any) -> Any:
        if show:
            print(text(self.profile))
        return value

    def save_result_to_csv(self, path: str, mode: str = "w", convention: str = "torch_flops") -> None:
        """Write the node table (raw numbers) as CSV; ``mode='a'`` appends without a second header."""
        if mode not in ("w", "a"):
            raise ValueError(f"mode must be 'w' or 'a', got {mode!r}")
        report.write_csv(self.in_convention(convention).records, path, mode)

    def print_model_profile(self, depth: int = -1, show: bool = True, as_string: bool = False,
                            top_modules: int = 0, convention: str = "torch_flops",
                            hardware: str | HardwareSpec | None = None) -> list[list[Any]]:
        """Print the summary and the module tree down to ``depth`` (0 = root, -1 = all), with
        roofline columns on ``hardware`` when given, and with ``top_modules=k`` the top k modules
        at that depth. Returns the tree's rows (``report.TREE_COLUMNS``): raw numbers, or as
        printed with ``as_string=True``."""
        profile = self.in_convention(convention)
        rows = report.tree_rows(profile, depth)
        if show:
            line = self.roofline(hardware) if hardware is not None else None
            print(report.model_profile_text(profile, depth, top_modules, roofline=line))
        columns = report.tree_columns(profile)
        return report.Rows(report.format_rows(columns, rows) if as_string else rows, columns)

    def roofline(self, hardware: str | HardwareSpec | None = None) -> Roofline:
        """This profile on ``hardware`` (a name of ``torch_flops.hardware.names()`` or a spec;
        default: the CUDA device it ran on): per node and module its bytes, intensity, bound and
        roofline time, and, when it was timed there, achieved FLOP/s and bytes/s, % of roofline
        and lost time (:mod:`torch_flops.roofline`)."""
        if hardware is None:
            device_name = self.profile.settings.get("device_name")
            if not device_name:
                raise ValueError(f"name the hardware for a profile on {self.profile.device}: one of "
                                 f"{', '.join(names())} or a torch_flops.hardware.HardwareSpec")
            hardware = spec_for_device_name(str(device_name))
        return roofline(self.profile, hardware)

    def print_roofline(self, hardware: str | HardwareSpec | None = None, top: int = 10,
                       show: bool = True) -> Roofline:
        """Print the ``top`` nodes and modules losing most time on ``hardware`` (predicted slowest
        when not timed there), with the predicted total and its memory-bound share."""
        line = self.roofline(hardware)
        if show:
            print(report.roofline_text(line, top))
        return line

    def save_roofline_plot(self, path: str, hardware: str | HardwareSpec | None = None,
                           color_by: str = "bound") -> Any:
        """Write a PNG of the roofline on ``hardware``, every node a point sized by its time and
        coloured by its bound or top-level module (``color_by="module"``); needs matplotlib.
        Returns the matplotlib figure."""
        from torch_flops.plot import save_roofline_plot

        return save_roofline_plot(self.roofline(hardware), path, color_by)

    def to_json(self, path: str | None = None, convention: str = "torch_flops",
                hardware: str | HardwareSpec | None = None) -> str:
        """The profile as a versioned JSON document (schema in :mod:`torch_flops.report`), with its
        roofline on ``hardware`` when given; also written to ``path`` when given (``{rank}`` in it:
        this process's rank, so that each rank of a distributed run writes its own file)."""
        line = self.roofline(hardware) if hardware is not None else None
        return report.profile_to_json(self.in_convention(convention), path, roofline=line)

    def to_dataframe(self, group_by: report.GroupBy = "node", convention: str = "torch_flops") -> Any:
        """The raw rows per node, module or operator as a ``pandas.DataFrame`` (needs pandas)."""
        return report.to_dataframe(self.in_convention(convention), group_by)

    def to_markdown(self, group_by: report.GroupBy = "node", convention: str = "torch_flops") -> str:
        """A summary line and the node, module or operator table as GitHub Markdown."""
        return report.markdown(self.in_convention(convention), group_by)

    def export_chrome_trace(self, path: str, convention: str = "torch_flops") -> None:
        """Write a Trace Event Format file (chrome://tracing, Perfetto); ``ValueError`` untimed."""
        report.write_chrome_trace(self.in_convention(convention), path)

    def to_html(self, path: str, hardware: str | HardwareSpec | None = None, convention: str = "torch_flops") -> str:
        """Write the one-file HTML report (:mod:`torch_flops.html`: summary, module tree, icicle,
        node and operator tables, memory curve, phase tabs; the roofline on ``hardware`` when
        given) to ``path``; returns the path."""
        line = self.roofline(hardware) if hardware is not None else None
        return write_html(self.in_convention(convention), path, roofline=line)

    def save_html(self, path: str, hardware: str | HardwareSpec | None = None, convention: str = "torch_flops") -> str:
        """The same as :meth:`to_html`."""
        return self.to_html(path, hardware, convention)


class _Snapshot:
    """What a captured graph depends on beyond the objects it shares with the model: the training
    flag of every module (the branch fx took) and, for every module and tensor the graph calls or
    reads, the object at each step of its path (a replaced module, parameter or buffer is not the
    graph's). A move to another dtype or device keeps the objects, and the graph sees it. Taken
    once per capture; :meth:`holds` is a few C-level scans on every call."""

    def __init__(self, model: nn.Module, graph: fx.GraphModule | None = None) -> None:
        self.modules = list(model.modules())  #: the model's modules, in model.modules() order
        self._flags = [m.training for m in self.modules]
        links: dict[int, tuple[dict[str, Any], str, Any]] = {}
        if graph is not None:  # fx: what the graph calls and reads
            targets = [str(n.target) for n in graph.graph.nodes if n.op in ("call_module", "get_attr")]
        else:  # export: the graph was traced from every parameter and buffer
            targets = [name for name, _ in itertools.chain(model.named_parameters(), model.named_buffers())]
        for target in targets:
            owner: Any = model
            for name in target.split("."):
                store = next((d for d in (owner._modules, owner._parameters, owner._buffers) if name in d), None) \
                    if isinstance(owner, nn.Module) else None
                if store is None:  # not the model's (a constant of the graph's own)
                    break
                owner = store[name]
                links[id(owner)] = (store, name, owner)
        self._stores = [store for store, _, _ in links.values()]
        self._names = [name for _, name, _ in links.values()]
        self._objects = [obj for _, _, obj in links.values()]

    def holds(self) -> bool:
        return ([m.training for m in self.modules] == self._flags
                and all(map(operator.is_, map(dict.get, self._stores, self._names), self._objects)))


def _identity(value: Any) -> Any:
    return value


def _checked_loss(value: Any, from_loss_fn: bool) -> torch.Tensor:
    """The loss to run ``backward()`` on: a scalar tensor that needs a gradient, or a clear error."""
    what = "loss_fn(output)" if from_loss_fn else "the model's output (no loss_fn given)"
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        raise ValueError(f"backward=True needs a scalar loss, but {what} is {shape}: pass loss_fn=, e.g. "
                         "loss_fn=lambda out: out.sum()")
    if not value.requires_grad:
        raise ValueError(f"{what} does not require grad (no parameter or input that needs a gradient "
                         "reaches it, or it ran under torch.no_grad()): there is no backward to profile")
    return value


def _median(values: tuple[float | None, ...]) -> float | None:
    return median(values)


def _plain_containers(value: Any) -> Any:
    """fx hands back its read-only ``immutable_dict``/``immutable_list``: the model's own output
    has plain ones (``out[k] = v`` works on it)."""
    if isinstance(value, fx.immutable_collections.immutable_dict):
        return {k: _plain_containers(v) for k, v in value.items()}
    if isinstance(value, fx.immutable_collections.immutable_list):
        return [_plain_containers(v) for v in value]
    if type(value) is tuple:
        return tuple(_plain_containers(v) for v in value)
    return value


def _batch_size(inputs: Any) -> int | None:
    for t in tensors_of(inputs):
        return int(t.shape[0]) if t.dim() > 0 else None
    return None

"""``TorchFLOPsByFX``: the facade over capture -> plan -> run -> Profile -> report.

It keeps the checked :class:`~torch_flops.options.Options`, the capture and one
:class:`~torch_flops.interpreter.Runner` (a plan and its interpreter) per graph, and wraps the
report functions. Each step is a function of the one before: ``capture_fx``/``capture_export``
give a :class:`~torch_flops.capture.Capture`, ``make_plan`` a :class:`~torch_flops.plan.Plan`,
``Runner.run`` the output and frozen :class:`~torch_flops.interpreter.Measurements`,
:meth:`Profile.from_measurements` the records; :mod:`torch_flops.report` turns those into text.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

import torch
from torch import fx, nn

from torch_flops import formulas, report
from torch_flops.capture import Capture, CapturedGraph, capture_export, capture_fx
from torch_flops.errors import DroppedOutputWarning, TracerFallbackWarning, TracingError, UnsupportedOpWarning
from torch_flops.hardware import HardwareSpec, names, spec_for_device_name
from torch_flops.interpreter import Measurements, Runner
from torch_flops.measure import LiveTensors, Timer, input_device, make_memory_probe, tensors_of
from torch_flops.options import Options, TracerName
from torch_flops.plan import make_plan
from torch_flops.progress import Progress
from torch_flops.records import NodeRecord, Profile
from torch_flops.roofline import Roofline, roofline
from torch_flops.state import model_state_restored

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
        self.model = model
        self.tables = formulas.FORMULAS.copy()  # this counter's own formulas: later edits do not leak in
        self._capture: Capture | None = None
        self._fx_error: TracingError | None = None
        self._runners: dict[CapturedGraph, tuple[Runner, frozenset[int]]] = {}
        self._measured: tuple[Capture, Measurements, int | None] | None = None
        self._profile: Profile | None = None
        if tracer != "export":
            shown = Progress(progress)
            shown.step("capturing (torch.fx)")
            try:
                self._capture = capture_fx(model, self.options.capture_options(self.tables))
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
    def propagate(self, *args: Any, **kwargs: Any) -> Any:
        """Run the model's graph on these inputs, measuring every node; return the model's output."""
        options = self.options
        progress = Progress(options.progress)
        try:
            capture = self._capture_for(args, kwargs, progress)
            graph = capture.graphs[0]
            progress.step("planning")
            runner, model_storages = self._runner(graph)
            if options.strict:
                runner.plan.check_strict()
            inputs = graph.bind(args, kwargs)
            device = input_device((args, kwargs), self.model)
            with model_state_restored(self.model):
                output, measurements = runner.run(
                    inputs, device=device, warmup=options.warmup, repeat=options.repeat, strict=options.strict,
                    timer=options.timer_for(device), progress=progress,
                    memory=make_memory_probe(device, options.mem_func_name, model_storages))
        finally:
            progress.done()
        self._measured, self._profile = (capture, measurements, _batch_size((args, kwargs))), None
        for target, nodes in measurements.unsupported().items():
            names = ", ".join(name for name, _ in nodes[:5]) + (", ..." if len(nodes) > 5 else "")
            warnings.warn(
                f"torch_flops: no FLOPs formula for {target} ({len(nodes)} node(s): {names}; {nodes[0][1]}); "
                "these nodes are excluded from the totals. Register one with torch_flops.register_function/"
                "register_method/register_module, or pass ignore_ops / strict=True.", UnsupportedOpWarning, stacklevel=2)
        return output

    def _capture_for(self, args: tuple[Any, ...], kwargs: dict[str, Any], progress: Progress) -> Capture:
        if self._capture is not None and self._capture.accepts(args, kwargs):
            return self._capture
        progress.step("capturing (torch.export)")
        capture = capture_export(self.model, args, kwargs, fx_error=self._fx_error)
        if self._fx_error is not None and self._capture is None:
            warnings.warn(f"torch_flops: profiling the torch.export graph because symbolic tracing failed: "
                          f"{str(self._fx_error).splitlines()[0]}", TracerFallbackWarning, stacklevel=3)
        if capture.dropped_outputs:
            warnings.warn("torch_flops: the returned output leaves out what torch.export cannot carry through a "
                          f"graph: {', '.join(capture.dropped_outputs)} (set to None); everything else is the "
                          "model's output.", DroppedOutputWarning, stacklevel=3)
        self._capture, self._runners = capture, {}
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
                          **({"device_name": measurements.device_name} if measurements.device_name else {})})
        return self._profile

    @property
    def records(self) -> tuple[NodeRecord, ...]:
        return self.profile.records

    @property
    def total_flops(self) -> int:
        return self.profile.total_flops

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
                           as_string: bool = False, convention: str = "torch_flops") -> list[list[Any]]:
        """Print one row per node (``group_by="node"``), per module (``"module"``, each including
        its submodules) or per operator (``"operator"``) and return the rows: raw numbers, or as
        printed with ``as_string=True``. Columns: ``report.NODE_COLUMNS`` / ``MODULE_COLUMNS`` /
        ``OPERATOR_COLUMNS``."""
        profile = self.in_convention(convention)
        columns, rows = report.rows_for(profile, group_by)
        if show:
            print(report.table_text(profile, group_by))
        return report.format_rows(columns, rows) if as_string else rows

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
        return report.format_rows(report.TREE_COLUMNS, rows) if as_string else rows

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
        roofline on ``hardware`` when given; also written to ``path`` when given."""
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


def _batch_size(inputs: Any) -> int | None:
    for t in tensors_of(inputs):
        return int(t.shape[0]) if t.dim() > 0 else None
    return None

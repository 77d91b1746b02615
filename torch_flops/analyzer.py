"""``TorchFLOPsByFX``: the facade. It keeps the checked :class:`~torch_flops.options.Options`,
chooses the front end (:mod:`torch_flops.calls`: the eager recording by default, the fx or export
graph when asked or needed), and wraps the views (:mod:`torch_flops.report`,
:mod:`torch_flops.roofline`) around the :class:`~torch_flops.records.Profile` of the last call.
It runs no loop of its own: one ``propagate`` is :meth:`EagerFront.call
<torch_flops.calls.EagerFront.call>` or :meth:`GraphFront.call <torch_flops.calls.GraphFront.call>`.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

import torch
from torch import fx, nn

from torch_flops import _validate, formulas, report
from torch_flops._version import versions
from torch_flops.calls import (
    CompiledFront,
    EagerFront,
    GraphFront,
    Result,
    makes_cpu_tensors,
    meta_advice,
    reads_values,
)
from torch_flops.capture import Capture, split_leaf_modules
from torch_flops.comm import distributed_settings
from torch_flops.compiled import is_compiled
from torch_flops.errors import TracerFallbackWarning, TracingError, caller_stacklevel
from torch_flops.hardware import HardwareSpec, names, spec_for_device_name
from torch_flops.html import write_html
from torch_flops.measure import Timer, batch_size_of, input_device
from torch_flops.measuring import add_note
from torch_flops.options import Options, TracerName
from torch_flops.progress import Progress
from torch_flops.records import NodeRecord, Profile, Status
from torch_flops.roofline import Roofline, roofline

__all__ = ["TorchFLOPsByFX"]


def _warn_unknown_leaf_paths(model: nn.Module, paths: frozenset[str]) -> None:
    """One warning naming the ``leaf_modules`` paths that are no module of ``model`` (a typo keeps
    nothing whole, silently otherwise)."""
    if not paths:
        return
    original = getattr(model, "_orig_mod", model)  # (a torch.compile'd model: its module's paths)
    known = {name for name, _ in model.named_modules()} | {name for name, _ in original.named_modules()}
    unknown = sorted(paths - known)
    if not unknown:
        return
    first = {id(m): name for name, m in original.named_modules()}  # a module registered twice: its first path
    second = {name: first[id(m)] for name, m in original.named_modules(remove_duplicate=False) if name in unknown}
    missing = [name for name in unknown if name not in second]
    text = [f"leaf_modules {missing} name no module of {type(original).__name__}"] if missing else []
    text += [f"leaf_modules path {name!r} is a second name of module {second[name]!r}, which the profile names by "
             "that first path" for name in unknown if name in second]
    warnings.warn(f"torch_flops: {'; '.join(text)}: give module paths as named_modules() lists them ('layer1.0') "
                  "or module classes", UserWarning, stacklevel=caller_stacklevel())


class TorchFLOPsByFX:
    """Count FLOPs/MACs and measure time and memory of every node of a model's graph.

    >>> counter = TorchFLOPsByFX(model)
    >>> out = counter.propagate(x)          # the model's real output
    >>> counter.print_result_table()        # one row per node
    >>> total = counter.print_total_flops()

    Args:
        model: an ``nn.Module`` (run as it is, recorded) or a ``fx.GraphModule`` (run as a graph).
        ignore_ops: module class names, module paths, function or method names whose nodes get
            status ``ignored`` and 0 FLOPs (a module class named here is kept as one node).
        mem_func_name: on CUDA, ``"memory_allocated"`` or ``"max_memory_allocated"``.
        strict: raise :class:`UnsupportedOpError` for nodes without a formula instead of warning.
        warmup: untimed runs before measuring.
        repeat: timed runs; each node's time is the median over them. FLOPs come from one run.
        leaf_modules: module classes or paths kept as single nodes. Classes the user registered a
            formula for are kept whole automatically.
        concrete_args: arguments fixed while tracing (``torch.fx.symbolic_trace``'s own; fx only).
        tracer: ``"auto"`` (the default: the model as it runs, see the README), ``"eager"``,
            ``"fx"`` (symbolic tracing) or ``"export"`` (``torch.export``, traced on the first
            ``propagate``).
        timer: a :class:`~torch_flops.measure.Timer` (``tick``/``finish``/``elapsed_ms``) or a
            function ``device -> Timer``; default: events on accelerators, ``perf_counter_ns`` on CPU.
        progress: a progress line on stderr for steps that take more than a second (None: only
            when stderr is a terminal).
        custom_formulas: this counter's own formulas, merged over the package's table (each
            replacing the entry of its key): keys are module classes, Python functions, Tensor
            method names (str) and aten ops (``torch.ops.aten.mm`` or ``.default``); values are
            ``formula(module, out, *args, **kwargs)`` returning ``(flops, macs)`` or an int
            (``module`` is None but for modules), or None to drop a key's formula.
    """

    #: column names of :meth:`print_result_table`'s rows and of the CSV file
    result_header: ClassVar[list[str]] = list(report.NODE_COLUMNS)

    def __init__(self, model: nn.Module, *, ignore_ops: Iterable[str] = (),
                 mem_func_name: str = "memory_allocated", strict: bool = False, warmup: int = 0,
                 repeat: int = 1, leaf_modules: Iterable[type | str] = (),
                 concrete_args: Mapping[str, Any] | None = None, tracer: TracerName = "auto",
                 timer: Timer | Callable[[torch.device], Timer] | None = None, progress: bool | None = None,
                 custom_formulas: Mapping[Any, Callable[..., Any] | None] | None = None) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        self.options = Options(ignore_ops=ignore_ops, mem_func_name=mem_func_name, strict=strict, warmup=warmup,
                               repeat=repeat, leaf_modules=leaf_modules, concrete_args=concrete_args, tracer=tracer,
                               timer=timer, progress=progress, custom_formulas=custom_formulas)
        if isinstance(model, torch.jit.ScriptModule):
            raise TypeError("torch_flops profiles a model's Python code, and a TorchScript model (torch.jit.ScriptModule) "
                            "has none: profile the nn.Module before scripting it")
        self.model = model
        _warn_unknown_leaf_paths(model, split_leaf_modules(self.options.leaf_modules)[1])
        self.tables = self.options.formula_table(formulas.FORMULAS)  # this counter's own: later edits do not leak in
        self._measured: tuple[Result, int | None] | None = None
        self._propagating: int | None = None  # the thread inside propagate() (a re-entrant call is refused)
        self._profile: Profile | None = None
        self._warned: set[str] = set()  # unsupported targets already warned about (once per counter)
        self._distributed: dict[str, int] = {}  # rank and world size of the last propagate (none: {})
        self._fx_error: TracingError | None = None
        self._meta_graph: GraphFront | None = None  # meta inputs the model reads values of: torch.export
        self._ignores_checked = False
        settings = self.options.call_settings(self.tables)
        self._settings = settings
        self._front: EagerFront | GraphFront | CompiledFront
        if is_compiled(model):  # torch.compile's OptimizedModule: counted on its original module, run compiled
            if tracer in ("fx", "export"):
                raise ValueError(f"tracer={tracer!r} traces a graph of its own, and a torch.compile'd model is "
                                 "profiled as it runs (tracer='auto' or 'eager'): pass the original module "
                                 "(model._orig_mod) to trace it")
            self._front = CompiledFront(model, settings)
        # the default front end follows the real execution (a GraphModule is its own program: run as
        # is); "auto" prefers a graph only for formulas of Python functions or Tensor methods the
        # user registered, which the aten ops of an eager run cannot show
        elif isinstance(model, fx.GraphModule) or tracer == "fx" or (
                tracer == "auto" and self.tables.user_graph_keys()):
            shown = Progress(progress)
            try:
                self._front = GraphFront(model, settings, "fx", progress=shown)
            except Exception as e:  # TracingError, or the forward's own error while traced
                if tracer == "fx" or isinstance(model, fx.GraphModule):
                    raise
                self._fx_error = e if isinstance(e, TracingError) else TracingError(
                    f"torch.fx.symbolic_trace could not trace {type(model).__name__}: the forward raised "
                    f"{type(e).__name__}: {e}")
                self._front = EagerFront(model, settings)
            finally:
                shown.done()
        elif tracer == "export":
            self._front = GraphFront(model, settings, "export")
        else:
            self._front = EagerFront(model, settings)
        if self.options.concrete_args and isinstance(self._front, EagerFront):
            warnings.warn("torch_flops: concrete_args fixes arguments of a symbolic trace (tracer='fx'); the "
                          "default front end runs the model as it is, so they are not used: pass the values as "
                          "inputs to propagate(), or use tracer='fx'.", UserWarning, stacklevel=2)

    @property
    def capture(self) -> Capture | None:
        """The graph(s) of the last ``propagate`` (fx: the traced graph, also before any call)."""
        if self._measured is not None:
            return self._measured[0].capture()
        return self._front.capture if isinstance(self._front, GraphFront) else None

    @property
    def graph_module(self) -> fx.GraphModule | None:
        capture = self.capture
        return capture.graph_module if capture is not None else None

    @property
    def tracer_used(self) -> str | None:
        if self._measured is not None:
            return self._measured[0].front_end
        capture = self.capture
        return capture.front_end if capture is not None else None

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
        gets the work, time and saved bytes of its own backward (``backward_flops``, ...).
        An exception of the model comes out as itself, with a note naming the node that raised."""
        return self.propagate_inputs(args, kwargs, loss_fn=loss_fn, backward=backward)

    def propagate_inputs(self, args: tuple[Any, ...] | list[Any] = (), kwargs: Mapping[str, Any] | None = None, *,
                         loss_fn: Callable[[Any], Any] | None = None, backward: bool = False) -> Any:
        """:meth:`propagate` with the model's inputs as a sequence and a mapping: ``model(*args,
        **kwargs)``, whatever the keywords are named (a model argument named ``loss_fn`` or
        ``backward`` goes to the model here)."""
        if not isinstance(args, (tuple, list)):
            raise TypeError(f"args must be a tuple or list of the model's positional inputs, got {type(args).__name__} "
                            "(one tensor x: (x,))")
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise TypeError(f"kwargs must be a mapping of the model's keyword inputs, got {type(kwargs).__name__}")
        args, kwargs = tuple(args), dict(kwargs or {})
        if loss_fn is not None and not callable(loss_fn):
            raise TypeError(f"loss_fn must be a callable taking the model's output, got {type(loss_fn).__name__}")
        if not isinstance(backward, bool):
            raise TypeError(f"backward must be True or False, got {type(backward).__name__}")
        backward = backward or loss_fn is not None
        if backward and not torch.is_grad_enabled():
            raise ValueError("backward=True under torch.no_grad() or torch.inference_mode(): the forward would "
                             "record no graph to run backward on; call propagate outside it")
        if backward and isinstance(self._front, GraphFront):
            raise ValueError(f"backward=True profiles the backward autograd runs, which needs the eager front end "
                             f"(tracer='auto' or 'eager'), not tracer={self.options.tracer!r}")
        if self._propagating == threading.get_ident():
            raise RuntimeError("propagate() of this counter was called from inside the model it is profiling (a "
                               "forward that calls it): profile the inner call with a TorchFLOPsByFX of its own")
        progress = Progress(self.options.progress)
        outer, self._propagating = self._propagating, threading.get_ident()
        try:
            result = self._call(args, kwargs, loss_fn, backward, progress)
        finally:
            self._propagating = outer
            progress.done()
        # (the output is the caller's: the counter keeps what it measured, never the model's values, which in
        # grad mode hold every activation autograd saved)
        self._measured, self._profile = (result._replace(output=None), batch_size_of((args, kwargs))), None
        self._distributed = distributed_settings()  # rank and world size, while the group is up
        result.measurements.warn_unsupported(self._warned)  # once per target, per counter
        if self.options.ignore_ops and not self._ignores_checked:
            self._warn_unmatched_ignores()
        return result.output

    def _warn_unmatched_ignores(self) -> None:
        """One warning, after the first call, naming the ``ignore_ops`` entries no node matched
        (a typo ignores nothing, silently otherwise)."""
        self._ignores_checked = True
        names = set(self.options.ignore_ops)
        matched: set[str] = set()
        for r in self.profile.records:
            if r.status is Status.IGNORED:
                matched |= names & {r.module_type, r.module_path, r.target, r.target.rpartition(".")[2], r.name}
        unmatched = sorted(names - matched)
        if unmatched:
            warnings.warn(f"torch_flops: ignore_ops {unmatched} matched no node of this call: give module class names "
                          "('ReLU'), module paths ('layer1.0'), function or method names ('relu', 'view') or aten op "
                          "names ('aten.relu')", UserWarning, stacklevel=caller_stacklevel())

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any], loss_fn: Callable[[Any], Any] | None,
              backward: bool, progress: Progress) -> Result:
        """The front end for these inputs; meta inputs that the model reads values of (which no run
        can give) go through the graph torch.export traces, with one warning."""
        front = self._front
        if self._fx_error is not None and self._measured is None:
            warnings.warn("torch_flops: torch.fx cannot trace this model, so it is profiled as it runs (eagerly), "
                          "where the formulas you registered for Python functions or Tensor methods do not apply "
                          "(their aten ops are counted instead).", TracerFallbackWarning, stacklevel=caller_stacklevel())
        if isinstance(front, (GraphFront, CompiledFront)):
            return front.call(args, kwargs, loss_fn=loss_fn, backward=backward, progress=progress)
        meta = input_device((args, kwargs), self.model).type == "meta"
        if meta and self._meta_graph is not None:
            return self._meta_graph.call(args, kwargs, loss_fn=loss_fn, backward=backward, progress=progress)
        try:
            return front.call(args, kwargs, loss_fn=loss_fn, backward=backward, progress=progress)
        except Exception as e:
            if not meta:
                raise
            if makes_cpu_tensors(e) and self.options.tracer == "auto":
                retried: Result | None = None
                try:  # tensors made without device= (torch.arange(n)) are made on meta, as on the inputs' device
                    with torch.device("meta"):
                        retried = front.call(args, kwargs, loss_fn=loss_fn, backward=backward, progress=progress)
                except Exception:  # noqa: BLE001  (the first error, with its advice, is the one to show)
                    retried = None
                if retried is not None:
                    warnings.warn("torch_flops: the model makes tensors in forward without device= (torch.arange, "
                                  "torch.tensor), which are CPU tensors and cannot meet its meta tensors, so its "
                                  "forward ran a second time with meta as the default device, and this profile is of "
                                  "that call (what the failed first call changed in Python, a counter, a list, stays "
                                  "changed).", TracerFallbackWarning, stacklevel=caller_stacklevel())
                    return retried
            if not ((front.needs_values or reads_values(e)) and self.options.tracer == "auto"):
                advice = meta_advice(e)
                if advice:
                    add_note(e, advice)
                elif front.needs_values or reads_values(e):
                    add_note(e, "torch_flops: the model reads tensor values in Python (.item(), .tolist(), nonzero, a "
                                "boolean mask...), which meta tensors do not have: it cannot run on meta with "
                                f"tracer={self.options.tracer!r}. tracer='auto' tries the graph torch.export traces; "
                                "or run it on CPU with small shapes (its counts depend on shapes only).")
                raise
            error = e
        graph = GraphFront(self.model, self._settings, "export", fx_error=self._fx_error, counts_only=True)
        try:
            result = graph.call(args, kwargs, loss_fn=loss_fn, backward=backward, progress=progress)
        except Exception as export_error:
            why = (f"torch.export cannot trace it either ({str(export_error).splitlines()[0]})"
                   if isinstance(export_error, TracingError) else
                   f"the graph torch.export traces needs those values too ({type(export_error).__name__}: "
                   f"{str(export_error).splitlines()[0]})")
            add_note(error, "torch_flops: the model reads tensor values in Python (.item(), .tolist(), nonzero, a "
                            f"boolean mask...), which meta tensors do not have, and {why}: this model cannot be "
                            "profiled on meta. Run it on CPU with small shapes (its counts depend on shapes only), or "
                            "give it the concrete sizes it reads.")
            raise error from export_error
        self._meta_graph = graph
        warnings.warn("torch_flops: the model reads tensor values in Python (.item(), if tensor: ...), which meta "
                      "tensors do not have, so this meta profile comes from the graph torch.export traces instead "
                      "of from a run" + (" (loss_fn's own ops are not recorded there: the loss phase is missing, its "
                                         "backward is in the backward's unattributed work)" if loss_fn is not None
                                         else "") + ".", TracerFallbackWarning, stacklevel=caller_stacklevel())
        return result

    # ------------------------------------------------------------------ results
    @property
    def profile(self) -> Profile:
        """The immutable result of the last ``propagate`` (records and roll-ups)."""
        if self._profile is None:
            if self._measured is None:
                raise RuntimeError("no results yet: call propagate(*inputs) first")
            result, batch_size = self._measured
            measurements = result.measurements
            self._profile = Profile.from_measurements(
                measurements, tracer=result.front_end, module_types=result.module_types,
                module_params=result.module_params, batch_size=batch_size,
                settings={**self.options.settings(), **versions(), "param_dtypes": dict(result.param_dtypes),
                          **({"run_times_ms": list(measurements.run_times_ms)} if measurements.run_times_ms else {}),
                          "memory_source": measurements.memory_source,
                          **({"device_name": measurements.device_name} if measurements.device_name else {}),
                          **self._distributed, **result.settings})
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
        _validate.check_bool("show", show)
        _validate.check_bool("as_string", as_string)
        profile = self.in_convention(convention)
        columns, rows = report.rows_for(profile, group_by, sort_by=sort_by, top=top)
        if show:
            print(report.table_text(profile, group_by, sort_by=sort_by, top=top) + "\n\n"
                  + report.legend_text(profile, group_by))
        return report.Rows(report.format_rows(columns, rows) if as_string else rows, columns)

    def print_total_flops(self, show: bool = True, convention: str = "torch_flops") -> int:
        _validate.check_bool("show", show)
        profile = self.in_convention(convention)
        if show:
            print(report.total_flops_text(profile))
        return profile.total_flops

    def print_total_time(self, show: bool = True) -> float | None:
        return self._show(report.total_time_text, show, self.profile.total_time_ms)

    def print_max_memory(self, show: bool = True) -> int | None:
        return self._show(report.max_memory_text, show, self.profile.max_memory)

    def _show(self, text: Callable[[Profile], str], show: bool, value: Any) -> Any:
        _validate.check_bool("show", show)
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
        _validate.check_bool("show", show)
        _validate.check_bool("as_string", as_string)
        _validate.check_depth("depth", depth)
        _validate.check_int("top_modules", top_modules, 0)
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
        _validate.check_int("top", top, 0)
        _validate.check_bool("show", show)
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

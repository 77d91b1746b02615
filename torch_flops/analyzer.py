"""``TorchFLOPsByFX``: trace a model once, profile it with real inputs, print or export results.

Data flow: model -> tracing (GraphModule) -> interpreter (records) -> Profile -> report. This
class only wires those steps together, checks arguments up front and keeps the user's model as it
was; it computes nothing itself.
"""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Literal

import torch
from torch import fx, nn

from torch_flops import formulas, report
from torch_flops.interpreter import (
    FlopsInterpreter,
    FormulaTables,
    NodePlan,
    build_records,
    check_strict,
    plan_graph,
    warn_unsupported,
)
from torch_flops.measure import MEMORY_FUNCTIONS, LiveTensors, make_memory_reader, make_timer, tensors_of
from torch_flops.records import NodeRecord, Profile
from torch_flops.tracing import EXPORT_ROOT, TracingError, bind_inputs, split_leaf_modules, trace_export, trace_fx

__all__ = ["DroppedOutputWarning", "TorchFLOPsByFX", "TracerFallbackWarning"]

class TracerFallbackWarning(UserWarning):
    """``tracer='auto'`` profiled the torch.export graph because symbolic tracing failed."""


class DroppedOutputWarning(UserWarning):
    """Part of the model's output (e.g. a transformers cache object) could not be returned."""


TracerName = Literal["auto", "fx", "export"]
_TRACERS = ("auto", "fx", "export")


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
        leaf_modules: module classes or paths kept as single nodes by the fx tracer. Classes whose
            name the user registered in ``MODULE_FLOPs_MAPPING`` are kept whole automatically.
        concrete_args: arguments fixed while tracing (``torch.fx.symbolic_trace``'s own).
        tracer: ``"fx"`` (symbolic tracing), ``"export"`` (``torch.export``, traced on the first
            ``propagate``) or ``"auto"`` (fx, falling back to export with a warning).
    """

    #: column names of :meth:`print_result_table`'s rows and of the CSV file
    result_header: ClassVar[list[str]] = list(report.NODE_COLUMNS)

    def __init__(self, model: nn.Module, *, ignore_ops: Iterable[str] = (),
                 mem_func_name: str = "memory_allocated", strict: bool = False, warmup: int = 0,
                 repeat: int = 1, leaf_modules: Iterable[type | str] = (),
                 concrete_args: Mapping[str, Any] | None = None, tracer: TracerName = "auto") -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if isinstance(ignore_ops, str) or not all(isinstance(o, str) for o in ignore_ops):
            raise TypeError("ignore_ops must be an iterable of names (str), e.g. ('relu', 'Dropout')")
        if mem_func_name not in MEMORY_FUNCTIONS:
            raise ValueError(f"mem_func_name must be one of {MEMORY_FUNCTIONS}, got {mem_func_name!r}")
        if not isinstance(strict, bool):
            raise TypeError(f"strict must be a bool, got {type(strict).__name__}")
        for name, value, low in (("warmup", warmup, 0), ("repeat", repeat, 1)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
            if value < low:
                raise ValueError(f"{name} must be >= {low}, got {value}")
        if tracer not in _TRACERS:
            raise ValueError(f"tracer must be one of {_TRACERS}, got {tracer!r}")
        if concrete_args is not None and not isinstance(concrete_args, Mapping):
            raise TypeError("concrete_args must be a mapping of argument name -> value")
        leaf_modules = tuple(leaf_modules)
        split_leaf_modules(leaf_modules)  # raises TypeError naming a bad entry

        self.model = model
        self.ignore_ops = tuple(ignore_ops)
        self.mem_func_name = mem_func_name
        self.strict = strict
        self.warmup = warmup
        self.repeat = repeat
        self.leaf_modules = leaf_modules
        self.concrete_args = dict(concrete_args) if concrete_args else None
        self.tracer = tracer
        # Each counter works on its own copy of the tables, taken now.
        self.tables = FormulaTables(
            modules=dict(formulas.MODULE_FLOPs_MAPPING), functions=dict(formulas.FUNCTION_FLOPs_MAPPING),
            methods=dict(formulas.METHOD_FLOPs_MAPPING), aten=dict(formulas.ATEN_FLOPs_MAPPING),
        )
        self.graph_module: fx.GraphModule | None = None
        self.tracer_used: str | None = None
        self._fx_error: TracingError | None = None
        self._export_signature: Any = None
        self._module_types: dict[str, str] = {}
        self._module_params: dict[str, int] = {}
        self._model_storages: frozenset[int] = frozenset()
        self._plans: dict[fx.Node, NodePlan] | None = None
        self._profile: Profile | None = None
        self._pending: tuple[Any, ...] | None = None
        self._modules: list[nn.Module] = []
        if tracer in ("fx", "auto"):
            try:
                # A module class the user gave a formula of its own is counted by it: keep it whole.
                # A class named in ignore_ops is likewise one (ignored) node.
                registered = [name for name, formula in self.tables.modules.items()
                              if formula is not formulas.DEFAULT_MODULE_FORMULAS.get(name)]
                registered += self.ignore_ops
                self.graph_module = trace_fx(model, leaf_modules=leaf_modules, concrete_args=concrete_args,
                                             leaf_class_names=registered)
                self.tracer_used = "graph_module" if isinstance(model, fx.GraphModule) else "fx"
            except TracingError as e:
                if tracer == "fx":
                    raise
                self._fx_error = e

    # ------------------------------------------------------------------ running
    def propagate(self, *args: Any, **kwargs: Any) -> Any:
        """Run the model's graph on these inputs, measuring every node; return the model's output."""
        gm = self._graph_for(args, kwargs)
        if self._plans is None:
            # Facts about the graph and the model that do not change between runs: computed once.
            prefix = EXPORT_ROOT if self.tracer_used == "export" else ""
            self._module_types = _module_types(self.model)
            self._module_params = _module_params(self.model)
            self._modules = list(self.model.modules())
            self._plans = plan_graph(gm, self.tables, self.ignore_ops, self._module_types, prefix)
            self._model_storages = LiveTensors.storage_keys([*gm.parameters(), *gm.buffers()])
        plans = self._plans
        if self.strict:
            check_strict(plans)
        flat = self._bind_inputs(gm, args, kwargs)
        device = _input_device(args, kwargs, self.model)
        timer = make_timer(device)
        reader = make_memory_reader(device, self.mem_func_name)
        interp = FlopsInterpreter(gm, plans, timer, self._model_storages, reader, self.strict,
                                  skip_unneeded_failures=device.type == "meta")
        timed = device.type != "meta"
        runs: list[list[float | None]] = []
        state = _ModelState(self._modules)
        try:
            interp.count = False
            for _ in range(self.warmup if timed else 0):
                interp.run(*flat)
            timer.finish()
            interp.count = True
            output = interp.run(*flat)
            timer.finish()
            runs.append([timer.elapsed_ms(s, e) for s, e in zip(interp.starts, interp.ends)])
            interp.count = False
            for _ in range((self.repeat - 1) if timed else 0):
                interp.run(*flat)
                timer.finish()
                runs.append([timer.elapsed_ms(s, e) for s, e in zip(interp.starts, interp.ends)])
        finally:
            state.restore()
        interp.env.clear()  # drop the run's last values; the measurements stay in interp's lists
        times = runs[0] if len(runs) == 1 else [_median(col) for col in zip(*runs)]
        facts: dict[str, Any] = {
            "device": str(device), "tracer": self.tracer_used or "fx",
            "memory_source": f"cuda.{self.mem_func_name}" if reader is not None else "live_tensors",
            "module_types": self._module_types, "module_params": self._module_params,
            "batch_size": _batch_size(args, kwargs),
            "settings": {"warmup": self.warmup, "repeat": self.repeat, "strict": self.strict,
                         "ignore_ops": list(self.ignore_ops), "mem_func_name": self.mem_func_name,
                         "tracer": self.tracer},
        }
        # Everything is measured now; the NodeRecord objects are assembled on first access
        # (self.profile), so a caller that only wants the output pays nothing more here.
        self._profile = None
        self._pending = (plans, interp, times, facts)
        warn_unsupported(plans, interp)
        return output

    def _graph_for(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> fx.GraphModule:
        if self.graph_module is not None and self.tracer_used != "export":
            return self.graph_module
        signature = _input_signature(args, kwargs)
        if self.graph_module is not None and signature == self._export_signature:
            return self.graph_module
        try:
            gm, dropped = trace_export(self.model, args, kwargs)
        except TracingError as e:
            if self._fx_error is not None:
                raise TracingError(
                    "neither front end could trace the model.\n"
                    f"  fx: {str(self._fx_error).splitlines()[0]}\n  export: {str(e).splitlines()[0]}\n"
                    "What to try: leaf_modules / concrete_args for fx; check the example inputs for export."
                ) from e
            raise
        if self._fx_error is not None and self.graph_module is None:
            warnings.warn(
                f"torch_flops: profiling the torch.export graph because symbolic tracing failed: "
                f"{str(self._fx_error).splitlines()[0]}", TracerFallbackWarning, stacklevel=3,
            )
        if dropped:
            warnings.warn(
                "torch_flops: the returned output leaves out what torch.export cannot carry through a "
                f"graph: {', '.join(dropped)} (set to None); everything else is the model's output.",
                DroppedOutputWarning, stacklevel=3,
            )
        self.graph_module = gm
        self.tracer_used = "export"
        self._export_signature = signature
        self._plans = None
        return gm

    def _bind_inputs(self, gm: fx.GraphModule, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        return bind_inputs(gm, args, kwargs, self.concrete_args)

    # ------------------------------------------------------------------ results
    @property
    def profile(self) -> Profile:
        """The immutable result of the last ``propagate`` (records and roll-ups)."""
        if self._profile is None:
            if self._pending is None:
                raise RuntimeError("no results yet: call propagate(*inputs) first")
            plans, interp, times, facts = self._pending
            self._profile = Profile(records=build_records(plans, interp, times), **facts)
            self._pending = None
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

    def print_result_table(self, show: bool = True, group_by: report.GroupBy = "node",
                           as_string: bool = False) -> list[list[Any]]:
        """Print one row per node (``group_by="node"``), per module (``"module"``, each including
        its submodules) or per operator (``"operator"``) and return the rows: raw numbers, or as
        printed with ``as_string=True``. Columns: ``result_header``, ``report.MODULE_COLUMNS``,
        ``report.OPERATOR_COLUMNS``."""
        columns, rows = report.rows_for(self.profile, group_by)
        if show:
            print(report.table_text(self.profile, group_by))
        return report.format_rows(columns, rows) if as_string else rows

    def print_total_flops(self, show: bool = True) -> int:
        profile = self.profile
        if show:
            print(report.total_flops_text(profile))
        return profile.total_flops

    def print_total_time(self, show: bool = True) -> float | None:
        profile = self.profile
        if show:
            print(report.total_time_text(profile))
        return profile.total_time_ms

    def print_max_memory(self, show: bool = True) -> int | None:
        profile = self.profile
        if show:
            print(report.max_memory_text(profile))
        return profile.max_memory

    def save_result_to_csv(self, path: str, mode: str = "w") -> None:
        """Write the node table (raw numbers) as CSV; ``mode='a'`` appends without a second header."""
        if mode not in ("w", "a"):
            raise ValueError(f"mode must be 'w' or 'a', got {mode!r}")
        report.write_csv(self.profile.records, path, mode)

    def print_model_profile(self, depth: int = -1, show: bool = True, as_string: bool = False,
                            top_modules: int = 0) -> list[list[Any]]:
        """Print the summary (params, MACs, FLOPs, latency, FLOP/s, batch size, device, tracer,
        unsupported nodes) and the module tree down to ``depth`` (0 = root, -1 = all) with each
        module's params, MACs, FLOPs, latency, their shares and the achieved FLOP/s; with
        ``top_modules=k``, also the top k modules at that depth. Returns the tree's rows
        (``report.TREE_COLUMNS``): raw numbers, or as printed with ``as_string=True``."""
        rows = report.tree_rows(self.profile, depth)
        if show:
            print(report.model_profile_text(self.profile, depth, top_modules))
        return report.format_rows(report.TREE_COLUMNS, rows) if as_string else rows

    def to_json(self, path: str | None = None) -> str:
        """The profile as a versioned ``torch_flops.profile`` JSON document (schema in
        :mod:`torch_flops.report`), also written to ``path`` when given; read it back with
        ``Profile.from_json``."""
        return report.profile_to_json(self.profile, path)

    def to_dataframe(self, group_by: report.GroupBy = "node") -> Any:
        """The raw rows per node, module or operator as a ``pandas.DataFrame`` (needs pandas)."""
        return report.to_dataframe(self.profile, group_by)

    def to_markdown(self, group_by: report.GroupBy = "node") -> str:
        """A summary line and the node, module or operator table as GitHub Markdown."""
        return report.markdown(self.profile, group_by)

    def export_chrome_trace(self, path: str) -> None:
        """Write a Trace Event Format file (chrome://tracing, Perfetto): one slice per node on the
        measured timeline, nested in its modules' slices. ``ValueError`` when nothing was timed."""
        report.write_chrome_trace(self.profile, path)


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _input_device(args: tuple[Any, ...], kwargs: dict[str, Any], model: nn.Module) -> torch.device:
    for t in tensors_of((args, kwargs)):
        return t.device
    for t in model.parameters():
        return t.device
    for t in model.buffers():
        return t.device
    return torch.device("cpu")


def _input_signature(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    from torch.utils import _pytree

    leaves, spec = _pytree.tree_flatten((args, kwargs))
    return spec, tuple((tuple(v.shape), v.dtype, v.device.type) if isinstance(v, torch.Tensor) else v
                       for v in leaves)


def _batch_size(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    for t in tensors_of((args, kwargs)):
        return int(t.shape[0]) if t.dim() > 0 else None
    return None


def _module_types(model: nn.Module) -> dict[str, str]:
    return {path: type(m).__name__ for path, m in model.named_modules()}


def _module_params(model: nn.Module) -> dict[str, int]:
    """Parameters each module owns directly; a parameter shared by several modules counts once."""
    seen: set[int] = set()
    owned: dict[str, int] = {}
    for path, module in model.named_modules():
        count = 0
        for p in module.parameters(recurse=False):
            if id(p) not in seen:
                seen.add(id(p))
                count += p.numel()
        owned[path] = count
    return owned


class _ModelState:
    """What propagate must give back unchanged: every module's training flag and, for modules in
    training mode, their buffers (BatchNorm running statistics move on every training forward)."""

    def __init__(self, modules: list[nn.Module]) -> None:
        self._flags = [(m, m.training) for m in modules]
        self._buffers: list[tuple[torch.Tensor, torch.Tensor]] = []
        if any(flag for _, flag in self._flags):
            with torch.no_grad():
                self._buffers = [(b, b.clone()) for m in modules for b in m.buffers(recurse=False)
                                 if b.device.type != "meta"]

    def restore(self) -> None:
        for module, flag in self._flags:
            if module.training is not flag:
                module.training = flag
        with torch.no_grad():
            for buffer, saved in self._buffers:
                buffer.copy_(saved)

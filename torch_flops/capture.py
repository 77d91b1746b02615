"""Capture: turn a model into graph(s) the interpreter can run, each node with its module.

* :func:`capture_fx`: ``torch.fx`` symbolic tracing (no inputs needed). ``leaf_modules`` keeps
  chosen modules whole (one node each); ``concrete_args`` fixes Python-level arguments.
* :func:`capture_export`: ``torch.export.export(..., strict=False)`` on real example inputs, for
  models symbolic tracing cannot handle (most transformers models).

Both return a :class:`Capture`: one or more :class:`CapturedGraph` s, each a GraphModule with a
clean :class:`NodeLocation` per node (module path, type and enclosing modules, with the front end's
spelling of paths already undone) and an input binder (``propagate``'s arguments -> the graph's
placeholders). Nothing is stored on the GraphModules. Failures raise :class:`TracingError` naming
the cause and what the user can do.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import logging
import operator
import re
import sys
import threading
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx, nn
from torch.fx.proxy import ParameterProxy
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.utils import parametrize
from torch.nn.utils.parametrize import ParametrizationList
from torch.utils import _pytree
from torch.utils._python_dispatch import TorchDispatchMode

from torch_flops.errors import TracerFallbackWarning, TracingError, UnsupportedOpWarning, add_note, caller_stacklevel
from torch_flops.formulas import FormulaTable, Name
from torch_flops.measure import functions_off, storage_key
from torch_flops.modelstate import ABSENT, ALL_KINDS, ENTRIES, ModelSnapshot, StateChange, StateKind
from torch_flops.paths import module_chain

__all__ = [
    "ABSENT",
    "ONE_KERNEL_MODULES",
    "TRACE_GATE",
    "Capture",
    "CaptureOptions",
    "CapturedGraph",
    "ExportBinder",
    "FxBinder",
    "ModelIndex",
    "NodeLocation",
    "Snapshot",
    "TraceGate",
    "bind_inputs",
    "capture_export",
    "capture_fx",
    "check_module_initialized",
    "split_leaf_modules",
    "trace_fx",
    "traced_through_now",
]

_FX_HINTS = (
    "What to try: pass leaf_modules=(SomeModule, 'path.to.module') to keep the module that fails "
    "tracing as one opaque node; pass concrete_args={'flag': value} to fix Python-level arguments; "
    "or use tracer='export' (torch.export, which traces with the real example inputs)."
)


# ---------------------------------------------------------------------------------------------
# What a capture hands on
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class NodeLocation:
    """Where a node runs in the model."""

    path: str  #: the innermost module's dotted path ("" for the root)
    module_type: str  #: that module's class name
    chain: tuple[str, ...]  #: every enclosing module path, outermost first, root excluded
    #: a get_attr node's parameter or buffer, as the model names it ("0.weight")
    attribute: str | None = None


@dataclass(frozen=True)
class CaptureOptions:
    """How to capture: the fx tracer's leaf modules and concrete arguments."""

    leaf_types: tuple[type, ...] = ()
    leaf_paths: frozenset[str] = frozenset()
    #: classes kept whole by name: those the user asked to ignore (``ignore_ops``)
    leaf_names: frozenset[str] = frozenset()
    concrete_args: Mapping[str, Any] | None = None
    #: the counter's formula table: a module whose class it resolves to a formula of the user's is kept
    #: whole (registered for the class, a base class whose forward it runs, or its name; not one the
    #: user dropped), as :meth:`FormulaTable.resolve_module` finds it for every front end
    table: FormulaTable | None = None
    #: the Python functions the user registered a formula for (function objects, or names): each
    #: call the forwards make by a global name is one node (fx's ``autowrap_functions``)
    formula_functions: tuple[Any, ...] = ()
    #: fx traces through torch's classes whose formula the table drops (custom_formulas {nn.Linear: None}),
    #: but these, which it could not trace through (fx's own rule keeps them whole: see trace_fx)
    kept_dropped: frozenset[type] = frozenset()

    def keeps_whole(self, module: nn.Module) -> bool:
        """Whether ``module`` is one of the leaves these options ask for by class."""
        if self.leaf_types and isinstance(module, self.leaf_types):
            return True
        table = self.table
        if table is None:
            return False
        formula = table.resolve_module(type(module))
        return formula is not None and not table.is_builtin(formula)


@dataclass(frozen=True)
class FxBinder:
    """Binds ``propagate(*args, **kwargs)`` to an fx graph's placeholders, in their order.

    A placeholder takes the next positional argument, else the keyword of its name, else the value
    it was traced with (``concrete_args``) or its default. Unknown keywords and missing inputs raise
    ``TypeError`` naming them.
    """

    names: tuple[str, ...]
    #: per placeholder: (has a value to fall back on, that value)
    fallbacks: tuple[tuple[bool, Any], ...]
    #: the placeholders of arguments with the default None that the graph uses (``mask=None``):
    #: fx traced them as inputs, so a call leaving one out needs a graph traced with it None
    optional: tuple[str, ...] = ()
    #: the placeholders of arguments with the default None that no node uses: a value given for
    #: one changes nothing in the graph (though the model's Python may branch on it when it runs)
    unused: tuple[str, ...] = ()
    #: the placeholders fixed by ``concrete_args`` (the graph holds their value: a call giving another is refused)
    concrete: tuple[str, ...] = ()
    #: the forward's defaults of the arguments fixed by ``concrete_args``: what eager runs a call leaving
    #: one out with (a call whose default is not the fixed value is refused)
    concrete_defaults: Mapping[str, Any] = field(default_factory=dict)
    #: the placeholders of the forward's ``*args`` and ``**kwargs`` (None: it has none): they take the
    #: positional arguments after the named ones (a tuple), the keywords of no other name (a dict)
    var_positional: str | None = None
    var_keyword: str | None = None
    #: the placeholders of the forward's keyword-only parameters (after ``*args``: no position reaches them)
    keyword_only: frozenset[str] = frozenset()

    @classmethod
    def for_graph(cls, gm: fx.GraphModule, concrete_args: Mapping[str, Any] | None = None,
                  defaults: Mapping[str, Any] | None = None, keyword_only: frozenset[str] = frozenset()) -> FxBinder:
        concrete = dict(concrete_args or {})
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        names = tuple(_source_name(str(n.target).lstrip("*"), concrete) for n in placeholders)
        fallbacks = tuple(
            (True, concrete[name]) if name in concrete else ((True, node.args[0]) if node.args else (False, None))
            for node, name in zip(placeholders, names))
        optional = tuple(name for node, name in zip(placeholders, names)
                         if name not in concrete and node.args == (None,) and node.users)
        unused = tuple(name for node, name in zip(placeholders, names)
                       if name not in concrete and node.args == (None,) and not node.users)
        stars = {str(n.target).count("*", 0, 2): name for n, name in zip(placeholders, names)
                 if str(n.target).startswith("*")}
        return cls(names, fallbacks, optional, unused, tuple(name for name in names if name in concrete),
                   {name: value for name, value in (defaults or {}).items() if name in concrete},
                   stars.get(1), stars.get(2), frozenset(keyword_only) & frozenset(names))

    def ignored(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[str]:
        """The :attr:`unused` arguments this call gives a value other than None."""
        given = self._given(args, kwargs) if self.unused else {}
        return [name for name in self.unused if given.get(name) is not None]

    def omitted(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> frozenset[str]:
        """The :attr:`optional` arguments this call leaves out or gives as None."""
        given = self._given(args, kwargs) if self.optional else {}
        return frozenset(name for name in self.optional if given.get(name) is None)

    def _given(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """Placeholder name -> the value this call gives it (by position or keyword)."""
        return dict(zip(self._positional(), args)) | dict(kwargs)

    def _positional(self) -> list[str]:
        """The placeholders a positional argument goes to, in order (fx puts keyword-only ones
        before ``*args``)."""
        skipped = {self.var_positional, self.var_keyword, *self.keyword_only}
        return [name for name in self.names if name not in skipped]

    def bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[Any]:
        names, starred, double = self.names, self.var_positional, self.var_keyword
        positional = self._positional()
        extra_args: tuple[Any, ...] = ()
        if len(args) > len(positional):
            if starred is None:
                raise TypeError(f"the graph takes {len(positional)} input(s) ({', '.join(positional)}) "
                                f"but {len(args)} positional argument(s) were given")
            args, extra_args = args[:len(positional)], args[len(positional):]
        given = dict(zip(positional, args))
        extra_kwargs: dict[str, Any] = {}
        unknown = []
        for key, value in kwargs.items():
            if key in given:
                raise TypeError(f"input {key!r} given both by position and by keyword")
            if key in names and key not in (starred, double):
                given[key] = value
            elif double is not None:
                extra_kwargs[key] = value
            else:
                unknown.append(key)
        if unknown:
            raise TypeError(f"unexpected keyword input(s) {unknown}; the graph's inputs are {list(names)}")
        flat: list[Any] = []
        for name, (has_fallback, fallback) in zip(names, self.fallbacks):
            if name == starred or name == double:
                flat.append(extra_args if name == starred else extra_kwargs)
            elif name in given:
                value = given[name]
                if name in self.concrete and not _same_value(value, fallback):
                    raise TracingError(
                        f"input {name!r} was fixed to {fallback!r} by concrete_args when torch.fx traced the model, "
                        f"and this call gives {value!r}: the graph holds the traced value. Give concrete_args="
                        f"{{{name!r}: {value!r}}} for these calls, or profile with the default front end "
                        "(tracer='auto')")
                flat.append(value)
            elif name in self.concrete_defaults and not _same_value(self.concrete_defaults[name], fallback):
                raise TracingError(
                    f"input {name!r} was fixed to {fallback!r} by concrete_args when torch.fx traced the model, and "
                    f"this call leaves it out, which the model runs with its default {self.concrete_defaults[name]!r}: "
                    f"the graph holds the traced value. Pass {name}={fallback!r}, or profile with the default front "
                    "end (tracer='auto')")
            elif has_fallback:
                flat.append(fallback)  # the concrete value fx specialised to, or the recorded default
            else:
                raise TypeError(f"missing input {name!r}; the graph's inputs are {list(names)}")
        return flat


def _same_value(given: Any, fixed: Any) -> bool:
    """Whether a value given for a concrete argument is the one fx traced with (the same object, or
    an equal plain value)."""
    if given is fixed or (isinstance(given, torch.Tensor) and isinstance(fixed, torch.Tensor)):
        return True  # (two tensors: fx's own check, in the graph, decides)
    if isinstance(given, torch.Tensor) or isinstance(fixed, torch.Tensor):
        return False  # (a tensor for a value fixed None, or a plain value for a tensor)
    try:
        return bool(given == fixed)
    except Exception:  # noqa: BLE001  (an == that is no bool: not known to be the same)
        return False


@dataclass(frozen=True)
class ExportBinder:
    """Binds inputs to a torch.export graph: the leaves of ``(args, kwargs)`` in the exported
    structure, checked against the shapes and dtypes the graph was exported for."""

    in_spec: Any
    forward_names: tuple[str, ...]
    expected: tuple[Any, ...]  #: per placeholder: its exported example value (meta ``val``)

    def bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[Any]:
        import torch.fx._pytree as fx_pytree

        positional = self.in_spec.child(0).num_children
        if len(args) > positional:
            raise TypeError(f"the graph was exported with {positional} positional input(s) "
                            f"({', '.join(self.forward_names[:positional])}) but {len(args)} were given")
        known = self.in_spec.child(1).context or []
        unknown = [k for k in kwargs if k not in known]
        if unknown:
            raise TypeError(f"unexpected keyword input(s) {unknown}: the graph was exported with the keyword "
                            f"inputs {list(known)}")
        try:
            flat = fx_pytree.tree_flatten_spec((tuple(args), dict(kwargs)), self.in_spec)
            # the same structure holding each input's readable name, flattened in the same order
            labels = _pytree.tree_map_with_path(lambda path, _: _pytree.keystr(path), (tuple(args), dict(kwargs)))
            names = [_readable_input(str(x), self.forward_names)
                     for x in fx_pytree.tree_flatten_spec(labels, self.in_spec)]
        except Exception as e:
            raise TypeError(
                f"the inputs ({_describe(args, kwargs)}) do not match the inputs the graph was exported with: {e}"
            ) from e
        for expected, value, name in zip(self.expected, flat, names):
            if (isinstance(expected, torch.Tensor) and isinstance(value, torch.Tensor)
                    and (tuple(expected.shape) != tuple(value.shape) or expected.dtype != value.dtype)):
                raise ValueError(
                    f"input {name!r} has shape {tuple(value.shape)} {value.dtype} but the graph was "
                    f"exported for {tuple(expected.shape)} {expected.dtype}"
                )
        return list(flat)


@dataclass(frozen=True, eq=False)
class CapturedGraph:
    """One graph of a capture, ready to plan and run."""

    graph_module: fx.GraphModule
    locations: Mapping[fx.Node, NodeLocation]
    #: ``propagate``'s arguments -> the placeholders; None for a graph of what ran (eager), which
    #: is a record, not a program to run again
    binder: FxBinder | ExportBinder | None

    def bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[Any]:
        """The graph's placeholder values for ``model(*args, **kwargs)``."""
        if self.binder is None:
            raise TypeError("this graph records one eager call; it has no inputs to bind")
        return self.binder.bind(args, kwargs)


@dataclass(frozen=True, eq=False)
class Capture:
    """What a front end produced: the graphs run in sequence for one forward, the front end used,
    and the parts of the model's output it could not carry (returned as None)."""

    graphs: tuple[CapturedGraph, ...]
    front_end: str  #: "eager", "fx", "export" or "graph_module" (the model was a GraphModule already)
    #: module path ("" = root) -> class name, for every module of the model
    module_types: Mapping[str, str]
    #: module path -> parameters it owns directly (a shared parameter counted once)
    module_params: Mapping[str, int]
    dropped_outputs: tuple[str, ...] = ()
    #: the inputs an export graph is specialised to (see :meth:`accepts`); None: any inputs
    signature: Any = field(default=None, compare=False)
    #: the model's state the graph depends on (fx, export: see :class:`Snapshot`); None for a
    #: graph of what ran (eager), which is never run again
    snapshot: Snapshot | None = field(default=None, compare=False, repr=False)
    #: export: (requires_grad, is an inference tensor) of each tensor of the output as the forward made
    #: it while traced, for :meth:`check_output` (None: not checked)
    output_flags: tuple[tuple[bool, bool], ...] | None = field(default=None, compare=False, repr=False)

    def check_output(self, output: Any) -> None:
        """``TracingError`` when the graph's output lost the autograd state the forward gave it while
        traced (torch.export replays neither an ``inference_mode`` region nor the gradient of an
        ``autograd.Function`` whose forward runs without grad, e.g. ``checkpoint(use_reentrant=True)``)."""
        expected = self.output_flags
        if expected is None:
            return
        flags = tuple(_output_flags(output))
        # (once, on the first replay: a later call may differ from the traced one in what requires grad,
        # a frozen model or an input that now needs its gradient, which the same graph replays as eager does)
        object.__setattr__(self, "output_flags", None)
        if flags == expected:
            return
        traced, ran = next(((a, b) for a, b in zip(expected, flags) if a != b), (None, None))
        what = "" if traced is None or ran is None else (
            f": the forward made an output {'that requires grad' if traced[0] else 'that requires no grad'}"
            f"{' (an inference tensor)' if traced[1] else ''}, the graph one "
            f"{'that requires grad' if ran[0] else 'that requires no grad'}{' (an inference tensor)' if ran[1] else ''}")
        raise TracingError(
            "the torch.export graph does not replay the forward's autograd state" + what + ". torch.export "
            "keeps neither a torch.inference_mode() region nor the gradient of an autograd.Function whose "
            "forward runs without grad (torch.utils.checkpoint with use_reentrant=True). Profile it with the "
            "default front end (tracer='auto'), which runs the model as it is")

    @property
    def graph_module(self) -> fx.GraphModule:
        """The graph of a single-graph capture (fx, export)."""
        return self.graphs[0].graph_module

    def accepts(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
        """Whether these inputs can run on the captured graphs without capturing again."""
        return self.signature is None or self.signature == input_signature(args, kwargs)


def _output_flags(output: Any) -> list[tuple[bool, bool]]:
    """(requires_grad, is an inference tensor) of each tensor of ``output``, in pytree order."""
    return [(t.requires_grad, t.is_inference()) for t in _pytree.tree_leaves(output) if isinstance(t, torch.Tensor)]


def input_signature(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    """The structure of the inputs with each tensor's shape, dtype and device type, and the grad
    mode (an export graph holds the forward's grad-mode switches relative to the one it was traced under)."""
    leaves, spec = _pytree.tree_flatten((tuple(args), dict(kwargs)))
    return spec, tuple((tuple(v.shape), v.dtype, v.device.type) if isinstance(v, torch.Tensor) else v
                       for v in leaves), torch.is_grad_enabled()


# ---------------------------------------------------------------------------------------------
# fx
# ---------------------------------------------------------------------------------------------

class _ShapedParameterProxy(ParameterProxy):
    """fx's ParameterProxy (a parameter's real shape, size(), dim()), whose size() also takes a dimension."""

    def size(self, dim: int | None = None) -> Any:  # type: ignore[override]
        return self.param.size() if dim is None else self.param.size(dim)


class _LeafTracer(fx.Tracer):
    """fx's tracer with extra leaf modules, given by class, by dotted path or by class name."""

    def __init__(self, options: CaptureOptions, functions: tuple[Any, ...] = ()) -> None:
        super().__init__(autowrap_functions=functions)
        # buffers read in forward become graph nodes (fx's default leaves them as constants): an
        # update in forward (`self.calls.add_(1)`) is then in the graph and runs on every call
        self.proxy_buffer_attributes = True
        self._options = options
        self._leaf_paths = options.leaf_paths
        self._leaf_names = options.leaf_names
        self._tensor_paths: tuple[nn.Module, dict[int, str]] | None = None
        self._thread = threading.get_ident()
        #: what the graph cannot replay, watched while tracing (set by trace_fx, see _FxGuard)
        self.guard: _FxGuard | None = None
        #: ids of the ParametrizationLists and their parametrizations: traced through (their work is
        #: the parametrized tensor's, counted like any other), unless asked for as leaves
        self.parametrized: frozenset[int] = frozenset()
        self._in_parametrization = 0

    # torch.fx patches nn.Module.__call__ and __getattr__ for the whole process while it traces:
    # a model that another thread calls meanwhile reaches this tracer. Calls from any thread but
    # the tracing one run as they would without it.
    def trace(self, root: Any, concrete_args: dict[str, Any] | None = None) -> fx.Graph:
        self._thread = threading.get_ident()
        return super().trace(root, concrete_args)

    def call_module(self, m: nn.Module, forward: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if threading.get_ident() != self._thread:
            return forward(*args, **kwargs)
        if self.guard is not None:
            self.guard.called(m, self)
        if id(m) not in self.parametrized:
            return super().call_module(m, forward, args, kwargs)
        self._in_parametrization += 1
        try:
            return super().call_module(m, forward, args, kwargs)
        finally:
            self._in_parametrization -= 1

    def create_node(self, *args: Any, **kwargs: Any) -> fx.Node:
        if self.guard is not None and threading.get_ident() == self._thread:
            self.guard.check_grad_mode()
        return super().create_node(*args, **kwargs)

    def getattr(self, attr: str, attr_val: Any, parameter_proxy_cache: dict[str, Any]) -> Any:
        if threading.get_ident() != self._thread:
            return attr_val
        # fx finds the path of a parameter (or buffer) read in forward by scanning all of the root's
        # named_parameters() on every read: O(parameters) a read, quadratic in depth for a deep
        # model whose own modules read `self.weight`. Look the path up once instead; same first
        # name for a shared tensor, same get_attr node, same cache.
        if isinstance(attr_val, torch.Tensor) and not self.param_shapes_constant:
            if self._tensor_paths is None or self._tensor_paths[0] is not self.root:
                paths: dict[int, str] = {}
                for name, param in self.root.named_parameters():
                    paths.setdefault(id(param), name)
                if self.proxy_buffer_attributes:
                    for name, buffer in self.root.named_buffers():
                        paths.setdefault(id(buffer), name)
                self._tensor_paths = (self.root, paths)
            path = self._tensor_paths[1].get(id(attr_val))
            if path is not None:
                if path not in parameter_proxy_cache:
                    # inside a parametrization a parameter's shape is read in Python (orthogonal's
                    # `n < k`): fx's ParameterProxy answers shape, size() and dim() with the real ones
                    factory = None
                    if self._in_parametrization and isinstance(attr_val, nn.Parameter):
                        def factory(node: fx.Node, name: str = path, param: nn.Parameter = attr_val) -> fx.Proxy:
                            return _ShapedParameterProxy(self, node, name, param)
                    parameter_proxy_cache[path] = self.create_proxy("get_attr", path, (), {},
                                                                    proxy_factory_fn=factory)
                    if self.guard is not None:
                        self.guard.read(parameter_proxy_cache[path])
                return parameter_proxy_cache[path]
        return super().getattr(attr, attr_val, parameter_proxy_cache)

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        if self._options.keeps_whole(m):
            return True
        if module_qualified_name in self._leaf_paths or type(m).__name__ in self._leaf_names:
            return True
        if id(m) in self.parametrized:
            return False
        table = self._options.table
        if table is not None and table.drops(type(m)) and type(m) not in self._options.kept_dropped:
            return False  # (fx keeps torch.nn's own classes whole by default)
        return super().is_leaf_module(m, module_qualified_name)


def split_leaf_modules(leaf_modules: Iterable[type | str]) -> tuple[tuple[type, ...], frozenset[str]]:
    """``leaf_modules`` as (module classes, module paths); ``TypeError`` naming a bad entry."""
    if isinstance(leaf_modules, (str, bytes)) or not isinstance(leaf_modules, Iterable):
        raise TypeError(f"leaf_modules must be an iterable of nn.Module classes or module paths, got {leaf_modules!r}")
    types: list[type] = []
    paths: set[str] = set()
    for item in leaf_modules:
        if isinstance(item, type) and issubclass(item, nn.Module):
            types.append(item)
        elif isinstance(item, str):
            paths.add(item)
        else:
            raise TypeError(f"leaf_modules entries must be nn.Module classes or module paths, got {item!r}")
    return tuple(types), frozenset(paths)


def trace_fx(model: nn.Module, options: CaptureOptions | None = None, *,
             leaf_modules: Iterable[type | str] = ()) -> fx.GraphModule:
    """Symbolically trace ``model`` into a GraphModule; an existing GraphModule is returned as it is."""
    if isinstance(model, fx.GraphModule):
        return model
    if options is None:
        types, paths = split_leaf_modules(leaf_modules)
        options = CaptureOptions(leaf_types=types, leaf_paths=paths)
    if isinstance(model, torch.jit.ScriptModule):
        raise TracingError(f"{type(model).__name__} is a TorchScript module: torch_flops profiles nn.Module "
                           "models (pass the eager model, not its torch.jit.script/trace)")
    parametrized = frozenset(id(m) for p in model.modules() if isinstance(p, ParametrizationList) for m in p.modules())
    parametrized |= parametrized_holders(model)  # (their formula would not count the parametrization)
    if parametrized:  # traced through first; one fx cannot trace is kept whole (one node, uncounted, as before)
        try:
            return _trace_fx(model, options, parametrized)
        except Exception as e:  # noqa: BLE001  (traced again below: an error not from them recurs)
            gm = _trace_fx(model, options, frozenset())
            holders = [path for path, m in model.named_modules() if path and parametrize.is_parametrized(m)]
            warnings.warn(f"torch_flops: torch.fx could not trace through the parametrized module(s) "
                          f"{', '.join(holders[:5]) or type(model).__name__} ({type(e).__name__}: {_first_line(e)}): "
                          "each is one node, its parametrization's work uncounted. The default front end "
                          "(tracer='auto') counts it.", UnsupportedOpWarning, stacklevel=caller_stacklevel())
            return gm
    table = options.table
    if table is not None and any(table.drops(type(m)) for m in model.modules()):
        while True:  # a class whose formula custom_formulas dropped that fx cannot trace through (BatchNorm
            try:  # branches on its flags) is kept whole again, each such class once, the others traced through
                return _trace_fx(model, options, frozenset())
            except TracingError as e:
                found = next((kind for kind in reversed(getattr(e, "module_types", ()))
                              if table.drops(kind) and kind not in options.kept_dropped), None)
                if found is None:
                    raise
                options = dataclasses.replace(options, kept_dropped=options.kept_dropped | {found})
    return _trace_fx(model, options, frozenset())


def _formula_functions(model: nn.Module, keys: tuple[Any, ...]) -> tuple[Any, ...]:
    """The Python functions of ``keys`` (a user's formula keys: functions, or names looked up among
    the functions the model's forwards see as globals), for fx to keep whole wherever a forward
    calls them by a global name."""
    if not keys:
        return ()
    found = {f: None for f in keys if inspect.isfunction(f)}
    names = {key.name for key in keys if isinstance(key, Name)}
    if names:
        for klass in {type(m) for m in model.modules()}:
            scope = getattr(getattr(klass, "forward", None), "__globals__", {})
            found.update((value, None) for name, value in scope.items()
                         if inspect.isfunction(value) and value.__name__ in names)
    return tuple(found)


def _trace_fx(model: nn.Module, options: CaptureOptions, parametrized: frozenset[int]) -> fx.GraphModule:
    tracer = _LeafTracer(options, _formula_functions(model, options.formula_functions))
    tracer.parametrized = parametrized
    concrete = dict(options.concrete_args) if options.concrete_args else None
    try:
        # fx patches torch process-wide while it traces (Module.__call__, wrapped functions):
        # one trace at a time; and what the forward does to real buffers while tracing is undone
        with TRACE_GATE.tracing(), _buffers_kept(model):
            snapshot = ModelSnapshot(model.named_modules(), _FX_WATCHED, keep_data=True)
            with _random_draws_undone() as drawn, _attributes_kept(snapshot) as assigned, \
                    _fx_guarded(snapshot, model, tracer):
                graph = tracer.trace(model, concrete_args=concrete)
    except TracingError:  # what the graph could not replay (_FxGuard)
        raise
    except Exception as e:  # fx raises TraceError, TypeError, NotImplementedError, ...
        where = _innermost_module(tracer)
        if (_models_own(e) or _raised_in_forward(e, traced=True)) and not _raised_by_fx(e) \
                and not _ABOUT_A_PROXY.search(str(e)) and not isinstance(e, SyntaxError):
            # (not torch's check of a traced value, while_loop's; nor fx's generated code, which a
            # module name with quotes in it breaks)
            add_note(e, f"torch_flops: raised by {type(model).__name__}'s forward while torch.fx traced it"
                        f"{f' (inside {where})' if where else ''}")
            raise
        error = TracingError(
            f"torch.fx.symbolic_trace could not trace {type(model).__name__}"
            f"{f' (inside {where})' if where else ''}: {type(e).__name__}: {_first_line(e)}\n{_FX_HINTS}")
        # (the classes of the modules being traced when it failed, innermost last: see trace_fx's retry)
        error.module_types = tuple(  # type: ignore[attr-defined]
            kind for _, kind in (getattr(tracer, "module_stack", None) or {}).values() if isinstance(kind, type))
        raise error from e
    written = _constants_written(graph)
    if written:
        raise TracingError(
            f"{type(model).__name__}'s forward writes into a tensor it made without the inputs ({written}): "
            "torch.fx runs such a tensor's code once, at trace time, and keeps the tensor as a constant, so "
            "what the forward reads back from it afterwards would be stale. Profile it with the default front end "
            "(tracer='auto'), which runs the model as it is")
    if assigned:
        names = ", ".join(f"{path + '.' if path else ''}{name}" for path, name in assigned[:5])
        raise TracingError(
            f"{type(model).__name__}'s forward assigns module attributes ({names}{' and more' if len(assigned) > 5 else ''}"
            ", e.g. self.count += 1 on a buffer): a torch.fx graph cannot replay an assignment, so it would run a "
            "different program (they were left as they were). Profile it with the default front end "
            "(tracer='auto'), which runs the model as it is")
    if drawn:
        raise TracingError(
            f"{type(model).__name__}'s forward draws random numbers without the inputs ({drawn[0]}: e.g. torch.randn "
            "with plain sizes, or a layer built in forward): torch.fx runs such a call once, at trace time, and keeps its result "
            "as a constant, so every call would reuse one draw where eager draws anew (the random generators were "
            "left as they were). Profile it with the default front end (tracer='auto'), which runs the model as it is")
    try:
        return fx.GraphModule(tracer.root, graph, model.__class__.__name__)
    except (SyntaxError, NameError) as e:  # fx's generated code (a module or attribute name it cannot write; a
        # tensor default of an argument, which it writes as a constant it never defines)
        raise TracingError(f"torch.fx could not write the code of {type(model).__name__}'s graph: "
                           f"{type(e).__name__}: {e}\n{_FX_HINTS}") from e


class _RandomDraws(TorchDispatchMode):
    """The random aten ops (tagged ``nondeterministic_seeded``: randn, rand, normal_, bernoulli, ...) that
    run for real in this thread while fx traces: a random call with plain arguments (``torch.randn(3,
    4)``, a layer built in forward, ``if torch.rand(1) < p``) runs once, at trace time, and its result is
    a constant of the graph, where each eager call draws anew. (Traced calls are Proxies: no aten op.)"""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:  # (see session._DispatchMode: nothing here is compiled)
        return False

    def __init__(self) -> None:
        super().__init__()
        self.drawn: list[str] = []
        #: the torch.Generator objects the draws were given (``generator=``), with their state before the first
        self.generators: dict[int, tuple[torch.Generator, torch.Tensor]] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if torch.Tag.nondeterministic_seeded in func.tags:
            self.drawn.append(str(func.overloadpacket))
            generator = kwargs.get("generator")
            if isinstance(generator, torch.Generator) and id(generator) not in self.generators:
                self.generators[id(generator)] = (generator, generator.get_state())
        return func(*args, **kwargs)


@contextlib.contextmanager
def _random_draws_undone() -> Iterator[list[str]]:
    """The random ops tracing ran (see :class:`_RandomDraws`), once the block ends; torch's random
    generators are then put back as they were before it."""
    cuda = torch.cuda.is_initialized()
    before = torch.get_rng_state(), (torch.cuda.get_rng_state_all() if cuda else [])
    mode = _RandomDraws()
    try:
        with mode:
            yield mode.drawn
    finally:
        if mode.drawn:
            torch.set_rng_state(before[0])
            if cuda:
                torch.cuda.set_rng_state_all(before[1])
            for generator, state in mode.generators.values():  # (a model's own torch.Generator)
                generator.set_state(state)


_HOOKS = (("_forward_pre_hooks", "forward pre-hook"), ("_forward_hooks", "forward hook"),
          ("_backward_pre_hooks", "backward pre-hook"), ("_backward_hooks", "backward hook"))
_GLOBAL_HOOKS = ("_global_forward_pre_hooks", "_global_forward_hooks", "_global_backward_pre_hooks",
                 "_global_backward_hooks")


def _package(hook: Any) -> str:
    """The top-level package a hook is defined in ("" when it says none)."""
    return str(getattr(hook, "__module__", "") or "").partition(".")[0]


def _foreign(hooks: Mapping[Any, Any]) -> bool:
    """Whether a hook dictionary holds a hook other than torch_flops' own (a recording's)."""
    return any(_package(h) != "torch_flops" for h in hooks.values())


class _FxGuard:
    """What a torch.fx graph cannot replay, watched while fx traces ``model``: fx traces the root's
    ``forward`` (the root's hooks never run) and runs the Python of every module it traces through
    once, with Proxies (their hooks run then, not in the graph); it records neither grad-mode
    changes nor what the forward does to the model's objects (a parameter swapped for one call by
    ``torch.func.functional_call``, ``param.data = ...``, ``.eval()``/``.train()``, a submodule
    replaced). Each raises :class:`TracingError` naming it, as soon as it is seen; :meth:`restore`
    puts the model's flags, tensors and submodules back as they were before the trace. The model's
    state is ``snapshot`` (taken before the trace, with ``keep_data``); this guard adds the grad mode
    and the per-call checks."""

    def __init__(self, snapshot: ModelSnapshot, model: nn.Module) -> None:
        self.name = type(model).__name__
        self.grad = torch.is_grad_enabled()
        self.inference = torch.is_inference_mode_enabled()
        self.autocast = _autocast_state()
        self.snapshot = snapshot
        self.proxies: list[fx.Proxy] = []  #: the get_attr proxies of the model's tensors

    def refuse(self, what: str, left: str = "the model was left as it was") -> TracingError:
        return TracingError(
            f"{self.name}'s forward {what}: a torch.fx graph cannot replay that, so tracer='fx' would profile a "
            f"different program ({left}). Profile it with the default front end (tracer='auto'), which runs the "
            "model as it is")

    def check_before(self, model: nn.Module) -> None:
        hooks = [kind for attr, kind in _HOOKS if _foreign(getattr(model, attr))]
        if hooks:
            raise TracingError(
                f"{self.name} has {' and '.join(hooks)}(s) on the root module (e.g. nn.utils.spectral_norm, "
                "prune, register_forward_pre_hook): torch.fx traces the root's forward alone, so they would not "
                "run. Profile it with the default front end (tracer='auto'), which runs the model as it is")
        table = nn.modules.module
        found = [name for name in _GLOBAL_HOOKS if _foreign(getattr(table, name, {}))]
        if found:
            raise TracingError(
                f"a global module hook is registered ({', '.join(found)}, by "
                "torch.nn.modules.module.register_module_forward_hook & co.): under torch.fx it would not run for "
                f"{self.name} itself and run once, at trace time, for the modules traced through. Profile it "
                "with the default front end (tracer='auto'), which runs the model as it is")

    def called(self, m: nn.Module, tracer: _LeafTracer) -> None:
        """A module call while tracing: its hooks (traced through), flags and objects (a leaf's:
        the whole subtree, which the graph calls as it will be then)."""
        path = self.snapshot.path(m)
        if path is None:  # made or installed in forward: a fresh one on each eager call, one in the graph
            raise self.refuse(f"calls a {type(m).__name__} module that was not one of its submodules when the "
                              "trace began (made or installed while it runs)")
        leaf = tracer.is_leaf_module(m, path)
        if not leaf:
            hooks = [kind for attr, kind in _HOOKS if _foreign(getattr(m, attr))]
            if hooks:
                raise TracingError(
                    f"{self.name} has {' and '.join(hooks)}(s) on {path!r} ({type(m).__name__}), a module torch.fx "
                    "traces through: they would run once, at trace time, with traced values, not on each call. "
                    f"Keep it whole with leaf_modules=('{path}',) (its hooks then run), or profile it with the "
                    "default front end (tracer='auto'), which runs the model as it is")
        for sub in (m.modules() if leaf else (m,)):
            changes = self.snapshot.module_changes(sub, _FX_PER_CALL)
            if any(change.kind is StateKind.TRAINING for change in changes):
                raise self.refuse(f"switches {changes[0].path or 'the root'!r}'s training flag (.eval()/.train()) "
                                  "while it runs")
            entry = next((change for change in changes if change.kind in ENTRIES), None)
            if entry is not None:
                raise self.refuse(f"swaps or replaces {entry.qualified_name!r} while it runs "
                                  "(torch.func.functional_call, nn.utils.stateless, or an assignment)")

    def check_grad_mode(self) -> None:
        if torch.is_grad_enabled() != self.grad or torch.is_inference_mode_enabled() != self.inference:
            raise self.refuse("changes grad mode (torch.no_grad(), torch.enable_grad(), set_grad_enabled, "
                              "inference_mode)")
        if _autocast_state() != self.autocast:  # the graph would run its ops in the caller's dtypes
            raise self.refuse("enters or leaves torch.autocast")

    def read(self, proxy: fx.Proxy) -> None:
        self.proxies.append(proxy)

    def check_after(self) -> None:
        self.check_grad_mode()
        for proxy in self.proxies:  # `self.w.data = t`, `self.w.requires_grad = False` set it on the Proxy
            extra = sorted(set(vars(proxy)) - {"node", "tracer", "param", "name"})
            if extra:
                raise self.refuse(f"assigns {', '.join('.' + e for e in extra)} of {str(proxy.node.target)!r} "
                                  f"(e.g. param.data = ...)")
        changes = self.snapshot.changes(_FX_REFUSED)
        for change in changes:
            if change.kind is StateKind.TRAINING:
                raise self.refuse(f"switches {change.path or 'the root'!r}'s training flag (.eval()/.train())")
        for change in changes:
            if change.kind is StateKind.SUBMODULE:
                raise self.refuse(f"adds, removes or replaces submodules of {change.path or 'the root'!r}")
        for change in changes:
            name = change.qualified_name
            if change.kind is StateKind.REQUIRES_GRAD:
                raise self.refuse(f"sets requires_grad of {name!r}")
            if change.kind is StateKind.DATA:
                raise self.refuse(f"rebinds the data of {name!r} (param.data = ...)")
            if change.kind is StateKind.VERSION:
                # (the write ran once, on the real tensor, while fx traced: as one eager call writes it)
                raise self.refuse(f"writes into {name!r} outside the traced values (e.g. through "
                                  "self.parameters() or self.buffers()), which the graph would not do",
                                  left=f"the write into {name!r} ran once while fx traced the forward, as one "
                                       "eager call would run it; the rest of the model was left as it was")

    def restore(self) -> None:
        torch._C._set_grad_enabled(self.grad)
        # (the parameter and buffer entries, and attributes now Proxies: _attributes_kept)
        self.snapshot.restore(_FX_RESTORED)


def _autocast_state() -> tuple[Any, ...]:
    """Whether autocast is on, and in which dtype when it is, for the CPU and CUDA (what an autocast
    region changes; fx records none of it; a region with ``enabled=False`` in autocast's absence
    changes nothing that runs)."""
    return tuple((True, torch.get_autocast_dtype(device)) if torch.is_autocast_enabled(device) else (False, None)
                 for device in ("cpu", "cuda"))


#: the model's state the fx trace watches (all but containers changed in place: export alone refuses those)
_FX_WATCHED = ALL_KINDS - {StateKind.CONTAINER}
#: what the fx guard refuses of a module it sees called (of a leaf: of its whole subtree)
_FX_PER_CALL = ENTRIES | {StateKind.TRAINING}
#: what the fx guard refuses after the trace, and what it puts back (in-place writes stay: they ran once)
_FX_REFUSED = frozenset({StateKind.TRAINING, StateKind.SUBMODULE, StateKind.REQUIRES_GRAD, StateKind.DATA,
                         StateKind.VERSION})
_FX_RESTORED = frozenset({StateKind.TRAINING, StateKind.SUBMODULE, StateKind.REQUIRES_GRAD, StateKind.DATA})


@contextlib.contextmanager
def _fx_guarded(snapshot: ModelSnapshot, model: nn.Module, tracer: _LeafTracer) -> Iterator[None]:
    """While ``tracer`` traces ``model``: refuses what its graph cannot replay (see :class:`_FxGuard`)."""
    guard = _FxGuard(snapshot, model)
    guard.check_before(model)
    tracer.guard = guard
    try:
        yield
        guard.check_after()
    finally:
        tracer.guard = None
        guard.restore()


def _raised_by_fx(e: BaseException) -> bool:
    """Whether torch.fx's own code raised ``e`` (its innermost frame is in torch/fx), e.g. ``NameError:
    module is not installed as a submodule``: a limit of tracing, not the model's error."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and "/torch/fx/" in tb.tb_frame.f_code.co_filename.replace("\\", "/")


def _constants_written(graph: fx.Graph) -> str:
    """The first traced call that writes into a tensor constant fx folded at trace time (``y =
    torch.empty(4, 4); torch.mm(x, w, out=y)``, ``y.add_(x)``), readably, or "" when none does.
    (A buffer's in-place update writes a get_attr of the model's own, which is fine.)"""
    def folded(value: Any) -> bool:
        return isinstance(value, fx.Node) and value.op == "get_attr" and str(value.target).startswith("_tensor_constant")

    for node in graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
        if folded(node.kwargs.get("out")):
            return f"{name}(..., out=...)"
        if name.endswith("_") and not name.endswith("__") and node.args and folded(node.args[0]):
            return f"Tensor.{name}"
    return ""


@contextlib.contextmanager
def _attributes_kept(snapshot: ModelSnapshot) -> Iterator[list[tuple[str, str]]]:
    """While fx traces, ``self.count += 1`` on a buffer (or ``self.cache = x``) assigns a Proxy to the
    real module, and ``self.calls += 1`` on a plain number runs once, at trace time: each parameter
    or buffer rebound meanwhile, and each attribute now a Proxy or holding state another value (a
    tensor, a module, a number: :func:`_is_state`), gets its value back (``snapshot``: the model
    before the trace), even when the trace fails, and the list yielded names them (path,
    attribute) after the trace."""
    assigned: list[tuple[str, str]] = []
    try:
        yield assigned
    finally:
        for change in snapshot.changes((StateKind.PARAMETER, StateKind.BUFFER, StateKind.ATTRIBUTE)):
            if change.kind is StateKind.ATTRIBUTE and not isinstance(change.now, fx.Proxy) and (
                    _same_number(change.before, change.now) or change.name.startswith("_tensor_constant")
                    or not (_is_state(change.before) or _is_state(change.now))):
                continue  # an equal number written back; a constant fx itself keeps on the root for its graph
            assigned.append((change.path, change.name))
            change.restore()


class TraceGate:
    """torch.fx (and torch.export) patch torch for the whole process while they trace
    (``Module.__call__``, wrapped functions): a model called in another thread meanwhile would be
    traced instead of run. Traces take the gate alone (:meth:`tracing`); runs of a model
    (:meth:`running`, any number at once in as many threads) wait for a trace to finish, and a
    trace for the runs under way. A thread that already holds the gate may enter again."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._runs: dict[int, int] = {}  # thread -> how deep it is in running()
        self._tracer: int | None = None
        self._depth = 0

    @contextlib.contextmanager
    def tracing(self) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:
            while (self._tracer not in (None, me)) or any(t != me for t in self._runs):
                self._cond.wait()
            self._tracer, self._depth = me, self._depth + 1
        try:
            yield
        finally:
            with self._cond:
                self._depth -= 1
                if self._depth == 0:
                    self._tracer = None
                self._cond.notify_all()

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:
            while self._tracer not in (None, me):
                self._cond.wait()
            self._runs[me] = self._runs.get(me, 0) + 1
        try:
            yield
        finally:
            with self._cond:
                self._runs[me] -= 1
                if not self._runs[me]:
                    del self._runs[me]
                self._cond.notify_all()


#: the one gate of the process (see :class:`TraceGate`)
TRACE_GATE = TraceGate()


@contextlib.contextmanager
def _quiet_torch_logs() -> Iterator[None]:
    """torch.export logs warnings of its own to stderr ("Unable to find user code..."): errors only
    while it traces (what went wrong reaches the user as a TracingError), and not FakeTensor's
    traceback of a refused op; levels restored after."""
    loggers = [logging.getLogger(name) for name in ("torch", "torch._export", "torch.export", "torch._dynamo",
                                                    "torch.fx.experimental.symbolic_shapes")]
    # and the traceback FakeTensor logs at ERROR when an op's meta kernel refuses its shapes (a wrong
    # input): the same error reaches the user as the TracingError's cause
    fake = logging.getLogger("torch._subclasses.fake_tensor")
    loggers.append(fake)
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(max(logger.level, logging.CRITICAL if logger is fake else logging.ERROR))
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


class _PartialGraphDropped:
    """``sys.stderr`` while torch.export traces: everything passes through but the partial graph
    torch prints there when tracing fails (``print(e.partial_fx_graph, file=sys.stderr)``: the
    generated ``def forward(...)`` code, tens of kB for a real model), which would bury the error
    torch_flops raises about it."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._dropped = False  # the graph was just dropped: print's newline after it goes too

    def write(self, text: str) -> int:
        dropped, self._dropped = self._dropped, False
        if text.lstrip("\n").startswith("def forward(self"):
            self._dropped = True
            return len(text)
        if dropped and text == "\n":
            return len(text)
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def _partial_graph_dropped() -> Iterator[None]:
    stream = sys.stderr
    proxy = _PartialGraphDropped(stream)
    sys.stderr = proxy
    try:
        yield
    finally:
        if sys.stderr is proxy:  # (something else that replaced it meanwhile keeps its place)
            sys.stderr = stream


@contextlib.contextmanager
def _buffers_kept(model: nn.Module) -> Iterator[None]:
    """Symbolic tracing runs the forward's Python code, and an in-place update of a real buffer
    (``self.calls.add_(1)``) then happens for real: such buffers get their values back."""
    buffers = [b for b in model.buffers() if b.device.type != "meta"]
    versions = [b._version for b in buffers]
    with torch.no_grad():
        saved = [b.clone() for b in buffers]
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, version, copy in zip(buffers, versions, saved):
                if buffer._version != version:
                    buffer.copy_(copy)


def check_module_initialized(path: str, module: nn.Module) -> None:
    """``ValueError`` naming a lazy module whose parameters do not exist yet (``nn.LazyLinear`` and
    friends get their shapes from their first input): they cannot be counted before."""
    if isinstance(module, LazyModuleMixin) and module.has_uninitialized_params():  # type: ignore[misc]
        raise ValueError(
            f"module {path or '(root)'!r} ({type(module).__name__}) is a lazy module whose parameters are not "
            "initialised yet: run the model once on an example input (model(x)), then profile it")


def capture_fx(model: nn.Module, options: CaptureOptions) -> Capture:
    """The fx front end: one graph, valid for any inputs."""
    index = ModelIndex(model)  # (a lazy module: ValueError, before tracing)
    defaults, keyword_only = _forward_parameters(model, options.concrete_args or {})
    gm = trace_fx(model, options)
    graph = CapturedGraph(gm, _locations(gm, index.types),
                          FxBinder.for_graph(gm, options.concrete_args, defaults, keyword_only))
    return Capture(graphs=(graph,), front_end="graph_module" if gm is model else "fx", module_types=index.types,
                   module_params=index.params, snapshot=Snapshot(index, gm))


def _forward_parameters(model: nn.Module, concrete: Mapping[str, Any]) -> tuple[dict[str, Any], frozenset[str]]:
    """From the forward's signature: the defaults of the arguments ``concrete_args`` fixes (what eager
    runs a call leaving one out with) and the names of its keyword-only parameters; ``ValueError``
    naming a ``concrete_args`` key that is no argument of the forward (a typo would fix nothing),
    before tracing."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # no signature: fx tells
        return {}, frozenset()
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        unknown = []
    else:
        unknown = [name for name in concrete if name not in params or params[name].kind is params[name].VAR_POSITIONAL]
    if unknown:
        raise ValueError(f"concrete_args names {', '.join(map(repr, unknown))}, which is no argument of "
                         f"{type(model).__name__}.forward ({', '.join(params)})")
    defaults = {name: params[name].default for name in concrete
                if name in params and params[name].default is not inspect.Parameter.empty}
    return defaults, frozenset(p.name for p in params.values() if p.kind is p.KEYWORD_ONLY)


#: what tracing itself raises, besides torch's own exception classes: a traced value used where a
#: real one is needed (len(), bool(), a shape in a torch call) fails with one of these
_TRACING_ERRORS = (TypeError, RuntimeError, NotImplementedError, AttributeError, ValueError, IndexError)


def _eager_error(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Exception | None:
    """After torch.export failed with one of the errors an op raises (``RuntimeError``, ``ValueError``,
    ...), the error the same eager call raises, if any: an op's own error (a matmul of shapes that do
    not fit) reaches torch.export through fake tensors, in their words. The call runs on a copy of the
    model without its hooks (a forward's writes to buffers and attributes, a hook's effects, stay out
    of the user's model) and on copies of the input tensors, under the caller's grad mode, with torch's
    random generator put back after it. None also when the model cannot be copied."""
    def copy_tensor(t: torch.Tensor) -> torch.Tensor:
        c = t.detach().clone()
        if t.requires_grad:
            c.requires_grad_(True)
            return c if t.is_leaf else c.clone()
        return c

    rng = torch.get_rng_state()
    try:
        try:
            twin = copy.deepcopy(model)
            copied_args, copied_kwargs = _pytree.tree_map_only(torch.Tensor, copy_tensor, (tuple(args), dict(kwargs)))
        except Exception:  # noqa: BLE001  (a model that cannot be copied: its error stays torch.export's)
            return None
        for m in twin.modules():
            for attr in _MODULE_HOOK_DICTS:
                hooks = getattr(m, attr, None)
                if hooks:
                    hooks.clear()
        try:
            twin(*copied_args, **copied_kwargs)
        except Exception as eager:  # noqa: BLE001  (the forward's own error, whatever it is)
            return eager
    finally:
        torch.set_rng_state(rng)
    return None


#: a module's hook dictionaries (cleared on the copy :func:`_eager_error` runs)
_MODULE_HOOK_DICTS = ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks",
                      "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_backward_hooks",
                      "_backward_pre_hooks")


def _models_own(e: BaseException) -> bool:
    """Whether an exception raised while tracing is the model's own (a class of the user's or of a
    library's that is neither torch's nor one of the built-in errors a traced value causes, e.g. a
    ``KeyError`` or ``AssertionError`` the forward raises): it then comes out as itself."""
    kind = type(e)
    if kind in _TRACING_ERRORS or kind.__module__.startswith("torch"):
        return False
    return isinstance(e, Exception)


def _raised_in_forward(e: BaseException, traced: bool = False) -> bool:
    """For torch.export, which runs the forward on the real inputs' shapes: whether ``e`` is the
    forward's own error (what the same eager call raises): an exception class that is not torch's,
    raised where the forward's own Python code was running (its innermost frame is neither torch's
    nor this package's; an op's error, such as mismatched shapes, is raised from the forward's frame).
    ``traced`` (torch.fx, whose values are Proxies): not an error about a Proxy either (an op given
    one, ``zeros(x.shape[0])``, fails in the forward's frame too: a limit of tracing). An
    out-of-memory error is one the forward raised itself (traced values take no memory)."""
    if not isinstance(e, Exception) or (type(e).__module__.startswith("torch")
                                        and not isinstance(e, torch.OutOfMemoryError)):
        return False
    if traced and _ABOUT_A_PROXY.search(str(e)):
        return False
    frames = []
    tb = e.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    # (``self.missing`` in the forward raises from nn.Module.__getattr__, under fx through its
    # wrapper of it: the forward's own error)
    while len(frames) > 1 and isinstance(e, AttributeError) and (frames[-1].f_code.co_name, frames[-1].f_code.co_filename
                                                                  .replace("\\", "/").rsplit("/torch/", 1)[-1]) in (
            ("__getattr__", "nn/modules/module.py"), ("module_getattr_wrapper", "fx/_symbolic_trace.py")):
        frames.pop()
    if not frames:
        return False
    where = frames[-1].f_code.co_filename.replace("\\", "/")
    return not any(part in where for part in ("/torch/", "/torch_flops/"))


#: how Python and torch word an error about a torch.fx Proxy given where a value is needed
_ABOUT_A_PROXY = re.compile(r"'Proxy'|\bProxy object|type Proxy\b|not Proxy\b|Proxy\) |\(Proxy\b|\bProxy\(")


def _innermost_module(tracer: fx.Tracer) -> str:
    stack = getattr(tracer, "module_stack", None)
    if not stack:
        return ""
    path, kind = list(stack.values())[-1]
    kind_name = getattr(kind, "__name__", str(kind))
    return f"module '{path}' ({kind_name})" if path else ""


def _source_name(placeholder: str, concrete: Mapping[str, Any]) -> str:
    # fx renames the placeholder of a concrete argument "double" to "double_1"
    if placeholder not in concrete:
        base, _, suffix = placeholder.rpartition("_")
        if suffix.isdigit() and base in concrete:
            return base
    return placeholder


def bind_inputs(gm: fx.GraphModule, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                concrete_args: Mapping[str, Any] | None = None) -> list[Any]:
    """Bind inputs to an fx graph's placeholders (see :class:`FxBinder`)."""
    return FxBinder.for_graph(gm, concrete_args).bind(args, kwargs)


# ---------------------------------------------------------------------------------------------
# torch.export
# ---------------------------------------------------------------------------------------------

_EXPORT_ROOT = "model"  # the attribute under which _ExportWrapper holds the user's model

_PLAIN_LEAVES = (torch.Tensor, int, float, bool, str, complex, type(None), torch.dtype, torch.device)


class _ExportWrapper(nn.Module):
    """Exports ``model`` with the parts of its output that torch.export cannot flatten (for
    example a transformers ``DynamicCache``) replaced by None, and remembers what was dropped."""

    def __init__(self, model: nn.Module, dropped: list[str], assigned: list[tuple[str, str]] | None = None,
                 flags: list[tuple[tuple[bool, bool], ...]] | None = None) -> None:
        super().__init__()
        setattr(self, _EXPORT_ROOT, model)
        # torch.export restores module attributes after tracing, so the record of what was dropped
        # lives in a list owned by the caller (held in a closure, not as a module attribute).
        self._record_drop = dropped.append
        self._record_flags = (flags if flags is not None else []).append  #: the output's autograd flags as traced
        self._record_assigned: list[tuple[str, str]] = assigned if assigned is not None else []

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        model = getattr(self, _EXPORT_ROOT)
        state = _export_state(model)  # (the traced tensors stand in for the parameters and buffers now)
        out = model(*args, **kwargs)
        # what the forward changed in the model (torch.export puts some of it back after tracing,
        # and leaves the rest as traced tensors: seen here, where it happened)
        self._record_assigned.extend(_export_changes(state))
        leaves, spec = _pytree.tree_flatten_with_path(out)
        kept = []
        for path, leaf in leaves:
            if isinstance(leaf, _PLAIN_LEAVES):
                kept.append(leaf)
            else:
                self._record_drop(f"{_pytree.keystr(path) or 'output'} ({type(leaf).__name__})")
                kept.append(None)
        self._record_flags(tuple(_output_flags(kept)))
        return _pytree.tree_unflatten(kept, spec)


def capture_export(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                   fx_error: TracingError | None = None, counts_only: bool = False,
                   options: CaptureOptions | None = None) -> Capture:
    """``torch.export.export(model, args, kwargs, strict=False)`` as one runnable graph,
    specialised to these inputs' shapes and to the grad mode it is captured under.

    The graph is traced under the caller's grad mode, as the eager call would run: a ``torch.no_grad()``
    (or ``enable_grad()``) region of the forward, which torch.export wraps in a higher-order op, is put
    back in line between two grad-mode switches, and a ``torch.autocast`` region between autocast's
    enter and exit (see :func:`_inline_regions`). The model is
    left exactly as it was (its structure, flags and tensors: see :class:`ModelSnapshot`), and a
    forward that changes it (registers, replaces or deletes a parameter, buffer or submodule, assigns
    a tensor or counter attribute, flips ``requires_grad``, assigns ``.data``, switches train/eval)
    is refused with a :class:`TracingError` naming what it changed: the graph would not replay that.
    When ``fx_error`` is given (``tracer='auto'`` after symbolic tracing failed), a failure names both causes.
    ``counts_only`` (the meta fallback of ``tracer='auto'``, where the model cannot run at all and the
    graph is wanted for its counts): such changes are named in a warning instead, the model still left
    as it was. ``options``: the modules kept whole (``leaf_modules``, classes with a formula of the
    user's, classes named in ``ignore_ops``) are one ``call_module`` node each, as fx keeps them
    (see :func:`_keep_whole`).
    """
    if isinstance(model, torch.jit.ScriptModule):
        raise TracingError(f"{type(model).__name__} is a TorchScript module: torch_flops profiles nn.Module "
                           "models (pass the eager model, not its torch.jit.script/trace)")
    index = ModelIndex(model)  # (a lazy module: ValueError, before tracing)
    hooked = _export_hooks(model)
    if hooked:
        message = (f"{hooked}: torch.export runs a hook once, while it traces, on fake tensors, and its graph keeps only "
                   "the tensor ops the hook did (a backward hook not at all), so what the hook does on each call (a "
                   "feature stored, a count, a gradient changed) would not happen")
        if not counts_only:
            raise TracingError(f"{message}. Profile it with the default front end (tracer='auto'), which runs the "
                               "model and its hooks as they are")
        warnings.warn(f"torch_flops: {message}: the counts on meta are the traced graph's, the hooks' work in them "
                      "as they did it once.", TracerFallbackWarning, stacklevel=caller_stacklevel())
    whole = _whole_paths(model, options) if options is not None else []
    not_whole: dict[str, str] = {}  # path -> why the graph traces through it
    dropped: list[str] = []
    assigned: list[tuple[str, str]] = []  # (name, what) the forward changed in the model while traced
    flags: list[tuple[tuple[bool, bool], ...]] = []  # the output's autograd flags, as the forward made them, per trace
    wrapper = _ExportWrapper(model, dropped, assigned, flags)
    grad_mode = torch.is_grad_enabled()
    saved = _export_state(model, keep_data=True)
    try:
        with TRACE_GATE.tracing(), _quiet_torch_logs(), _partial_graph_dropped():
            try:
                # the calls of the modules kept whole keep their signatures (inputs and outputs by
                # node), to be made one node each below
                program = torch.export.export(wrapper, tuple(args), dict(kwargs), strict=False,
                                              preserve_module_call_signature=tuple(f"{_EXPORT_ROOT}.{p}" for p in whole))
            except Exception as e:
                if not whole:
                    raise
                # (torch.export refuses a module called with two different argument structures): traced
                # through, said below; a forward that fails fails again here, as itself
                not_whole.update(dict.fromkeys(whole, f"torch.export could not keep its calls' signatures: "
                                                      f"{type(e).__name__}: {_first_line(e)}"))
                saved.restore()
                program = torch.export.export(wrapper, tuple(args), dict(kwargs), strict=False)
    except Exception as e:
        if _models_own(e) or _raised_in_forward(e):
            add_note(e, f"torch_flops: raised by {type(model).__name__}'s forward while torch.export traced it "
                        f"with inputs ({_describe(args, kwargs)})")
            raise
        eager = _eager_error(model, args, kwargs) if type(e) in _TRACING_ERRORS and not counts_only else None
        if eager is not None:  # an op's error (shapes that do not fit), worded by torch's fake tensors
            add_note(eager, f"torch_flops: raised by {type(model).__name__}'s forward, which torch.export could not "
                            f"trace with inputs ({_describe(args, kwargs)}); the same call raises it without the profiler")
            raise eager from None
        error = TracingError(
            f"torch.export could not trace {type(model).__name__} with inputs "
            f"({_describe(args, kwargs)}): {type(e).__name__}: {_first_line(e)}\n"
            "What to try: check the input names and shapes against the model's forward(); for "
            "data-dependent Python control flow use tracer='auto' (the model as it runs) on real tensors."
        )
        if fx_error is not None:
            raise TracingError(
                "neither front end could trace the model.\n"
                f"  fx: {str(fx_error).splitlines()[0]}\n  export: {str(error).splitlines()[0]}\n"
                "What to try: leaf_modules / concrete_args for fx; check the example inputs for export."
            ) from e
        raise error from e
    finally:
        saved.restore()  # what the trace left (traced tensors registered, flags, attributes) undone
        torch.set_grad_enabled(grad_mode)
    if assigned:
        changes = list(dict.fromkeys(assigned))
        names = ", ".join(dict.fromkeys(name for name, _ in changes[:5]))
        more = " and more" if len(changes) > 5 else ""
        what = "; ".join(f"{name}: {kind}" for name, kind in changes[:5])
        if counts_only:
            warnings.warn(f"torch_flops: {type(model).__name__}'s forward changes module state ({what}{more}), which "
                          "the graph torch.export traced does not replay: its counts are those of the traced "
                          "forward, and the model was left as it was.", TracerFallbackWarning, stacklevel=caller_stacklevel())
            assigned.clear()
    if assigned:
        raise TracingError(
            f"{type(model).__name__}'s forward assigns module state ({names}{more}) while it runs ({what}{more}): "
            "a torch.export graph replays the forward's tensor operations, not changes to the model's parameters, "
            "buffers, submodules, attributes or flags, so it would run a different program (the model was left as "
            "it was). Profile it with the default front end (tracer='auto'), which runs the model as it is")
    gm = program.module()
    _inline_regions(gm, grad_mode)
    _pin_default_dtypes(gm)
    if any(n.op == "call_function" and getattr(n.target, "__name__", "") == "_enter_dual_level" for n in gm.graph.nodes):
        message = (f"{type(model).__name__}'s forward runs forward-mode AD (torch.func.jvp, jacfwd, a forward_ad "
                   "dual level): the torch.export graph's ops on dual tensors count the primal's work only, not "
                   "the tangents'. Profile it with the default front end (tracer='auto'), which counts both")
        if not counts_only:
            raise TracingError(message)
        warnings.warn(f"torch_flops: {message}.", TracerFallbackWarning, stacklevel=caller_stacklevel())
    if whole and not not_whole:
        _drop_tracepoints(gm)
        not_whole = _keep_whole(program, gm, model, whole)
    if not_whole:
        listed = "; ".join(f"{p or type(model).__name__} ({type(model.get_submodule(p)).__name__}): {why}"
                           for p, why in list(not_whole.items())[:3])
        warnings.warn(f"torch_flops: the torch.export graph traces through module(s) kept whole elsewhere, so their "
                      f"aten ops are counted, not the module's formula: {listed}. The default front end "
                      "(tracer='auto') or tracer='fx' keeps them whole.", UnsupportedOpWarning, stacklevel=caller_stacklevel())
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    binder = ExportBinder(program.call_spec.in_spec, _forward_names(model),
                          tuple(n.meta.get("val") for n in placeholders))
    graph = CapturedGraph(gm, _locations(gm, index.types, prefix=_EXPORT_ROOT), binder)
    return Capture(graphs=(graph,), front_end="export", module_types=index.types, module_params=index.params,
                   dropped_outputs=tuple(dict.fromkeys(dropped)), signature=input_signature(args, kwargs),
                   snapshot=Snapshot(index), output_flags=flags[-1] if flags and not counts_only else None)


def _whole_paths(model: nn.Module, options: CaptureOptions) -> list[str]:
    """The paths of the model's modules that fx keeps whole (``leaf_modules``, classes with a formula
    of the user's or named in ``ignore_ops``): every name of a shared one, nested ones too (a call
    inside a kept call goes with it; one the model makes itself is kept on its own); never the root."""
    return [path for path, module in model.named_modules(remove_duplicate=False)
            if path and (options.keeps_whole(module) or path in options.leaf_paths
                         or type(module).__name__ in options.leaf_names)]


#: packages whose module hooks are their own machinery, not the user's: torch's (FlopCounterMode's
#: module tracker, the old-style spectral_norm/weight_norm/prune, refused for what they assign) and
#: torch_flops' (a recording); of transformers', the output capturing its forward installs itself
#: (a debugging or training hook of transformers' that the user attaches, such as
#: DebugUnderflowOverflow or NEFTune's noise, is the user's)
_LIBRARY_HOOKS = ("torch", "torch_flops")


def _is_users_hook(hook: Any) -> bool:
    """Whether a module hook is the user's (see :data:`_LIBRARY_HOOKS`), by the package it is defined in."""
    package = _package(hook)
    if package in _LIBRARY_HOOKS:
        return False
    return not (package == "transformers" and "output_capturing_hook" in str(getattr(hook, "__qualname__", "")))


def _users_hooks(hooks: Mapping[Any, Any]) -> bool:
    """Whether a hook dictionary holds a hook of the user's."""
    return any(map(_is_users_hook, hooks.values()))


def _export_hooks(model: nn.Module) -> str:
    """The user's module hooks on ``model`` or its submodules, or registered globally, described
    (the first three); "" without any."""
    table = nn.modules.module
    found = [f"a global module hook ({name})" for name in _GLOBAL_HOOKS if _users_hooks(getattr(table, name, {}))]
    for path, module in model.named_modules():
        kinds = [kind for attr, kind in _HOOKS if _users_hooks(getattr(module, attr))]
        if kinds:
            found.append(f"{' and '.join(kinds)}(s) on {repr(path) if path else 'the root'} ({type(module).__name__})")
    if not found:
        return ""
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return f"{type(model).__name__} has {'; '.join(found[:3])}{more}"


def _has_hooks(module: nn.Module) -> bool:
    """Forward or backward hooks on ``module``, or global module hooks: torch.export traces what a
    hook does around the call (outside its signature), so the module cannot run as one node."""
    return bool(module._forward_pre_hooks or module._forward_hooks or module._backward_hooks
                or module._backward_pre_hooks or nn.modules.module._has_any_global_hook())


def _drop_tracepoints(gm: fx.GraphModule) -> None:
    """Take out the module-boundary marks torch.export leaves inside the subgraphs of higher-order
    ops (a kept module called in a ``no_grad`` region): each passes its arguments through."""
    for module in gm.modules():
        if not isinstance(module, fx.GraphModule):
            continue
        graph = module.graph
        marks = [n for n in graph.nodes if n.op == "call_function"
                 and getattr(n.target, "__name__", "") == "_export_tracepoint"]
        for mark in marks:
            for user in list(mark.users):
                if user.target is operator.getitem and isinstance(user.args[1], int):
                    user.replace_all_uses_with(mark.args[user.args[1]])  # type: ignore[arg-type]
                    graph.erase_node(user)
            if not mark.users:
                graph.erase_node(mark)
        if marks:
            module.recompile()


def _keep_whole(program: Any, gm: fx.GraphModule, model: nn.Module, paths: list[str]) -> dict[str, str]:
    """Make each call of a module at ``paths`` one ``call_module`` node of ``gm``, as fx records it:
    the call's arguments and results are the nodes torch.export kept in its module call graph
    (``preserve_module_call_signature``); the call's own nodes (``nn_module_stack``) go. The module
    itself runs then, so its formula counts it, as the default front end does. Returns the paths
    that stay traced through, with why."""
    failed: dict[str, str] = {}
    nodes = {n.name: n for n in gm.graph.nodes}
    wanted = {f"{_EXPORT_ROOT}.{p}": p for p in paths}
    kept: list[str] = []  # the calls made one node so far
    first = {id(m): p for p, m in model.named_modules()}  # a shared module's node: under its first name
    for entry in program.module_call_graph:
        fqn = entry.fqn
        path = wanted.get(fqn.split("@")[0])
        if path is None or path in failed:
            continue
        key = f"L__self__{fqn}"
        if not any(key in (n.meta.get("nn_module_stack") or {}) for n in gm.graph.nodes) and any(
                fqn.startswith(k + ".") for k in kept):
            continue  # a call inside a call already made one node: it went with it
        module = model.get_submodule(path)
        if _has_hooks(module):
            failed[path] = "it has hooks (torch.export traces them around the call)"
            continue
        why = _call_as_one_node(gm, nodes, entry, fqn, first.get(id(module), path), module)
        if why is not None:
            failed[path] = why
        else:
            kept.append(fqn)
    return failed


def _call_as_one_node(gm: fx.GraphModule, nodes: dict[str, fx.Node], entry: Any, fqn: str, path: str,
                      module: nn.Module) -> str | None:
    """One call of ``module`` (its module call graph ``entry``) made one node; None, or why not (the
    graph then left as it was)."""
    from torch.export.graph_signature import ConstantArgument, SymIntArgument, TensorArgument

    signature = entry.signature
    if signature is None:
        return "no signature recorded"
    if not signature.inputs and not signature.outputs and signature.in_spec.num_leaves:
        return "a call inside a torch.no_grad()/enable_grad() region, where torch.export keeps no signature"
    key = f"L__self__{fqn}"
    inside = [n for n in gm.graph.nodes if key in (n.meta.get("nn_module_stack") or {})]
    if not inside:
        return "its call has no nodes"
    inside_set = set(inside)
    order = {n: i for i, n in enumerate(gm.graph.nodes)}

    def value(arg: Any) -> Any:
        if isinstance(arg, ConstantArgument):
            return arg.value
        if isinstance(arg, (TensorArgument, SymIntArgument)) and arg.name in nodes:
            node = nodes[arg.name]
            if node in inside_set or order[node] > order[inside[0]]:
                raise LookupError(f"argument {arg.name!r} is made inside the call")
            return node
        raise LookupError(f"an argument of kind {type(arg).__name__} ({getattr(arg, 'name', '')!r})")

    try:
        call_args, call_kwargs = _pytree.tree_unflatten([value(a) for a in signature.inputs], signature.in_spec)
        outputs = [nodes[a.name] if isinstance(a, TensorArgument) and a.name in nodes else None
                   for a in signature.outputs]
        accesses = _pytree.tree_flatten_with_path(_pytree.tree_unflatten(list(range(len(outputs))),
                                                                          signature.out_spec))[0]
    except Exception as e:  # noqa: BLE001  (a signature this cannot read: the graph stays as it is)
        return str(e) if isinstance(e, LookupError) else f"{type(e).__name__}: {_first_line(e)}"
    if any(o is None for o in outputs):
        return "an output that is not a tensor"
    if any(not isinstance(k, (_pytree.SequenceKey, _pytree.MappingKey)) for keys, _ in accesses for k in keys):
        return "an output structure other than tuples, lists and dicts"
    # every value of the call used after it must be one of its outputs, or one of its module's buffers
    # it updated in place (num_batches_tracked.add_(1)): read after the call, the module's own buffer
    # holds that value, as the module updates it when it runs
    own = f"{_EXPORT_ROOT}.{path}."
    buffers: dict[fx.Node, fx.Node] = {}
    for n in inside:
        if any(u not in inside_set for u in n.users) and n not in outputs:
            first = n.args[0] if n.args else None
            schema = getattr(n.target, "_schema", None)
            if (isinstance(first, fx.Node) and first.op == "get_attr" and str(first.target).startswith(own)
                    and schema is not None and schema.is_mutable):
                buffers[n] = first
            else:
                return f"node {n.name!r} of the call is used after it, and is not one of its outputs"
    parent, _, name = f"{_EXPORT_ROOT}.{path}".rpartition(".")
    setattr(gm.get_submodule(parent), name, module)  # the model's own module (its parameters are the graph's)
    stack = inside[0].meta.get("nn_module_stack") or {}
    outer = dict(list(stack.items())[:list(stack).index(key)])
    with gm.graph.inserting_before(inside[0]):
        call = gm.graph.call_module(f"{_EXPORT_ROOT}.{path}", tuple(call_args), dict(call_kwargs))
        call.meta["nn_module_stack"] = outer
        if hasattr(call, "_rename"):  # named as fx names it ("b", not "model_b")
            call._rename(path.replace(".", "_"))
        for keys, i in accesses:
            node = call
            for k in keys:
                item = k.idx if isinstance(k, _pytree.SequenceKey) else k.key  # type: ignore[attr-defined]
                node = gm.graph.call_function(operator.getitem, (node, item))
                node.meta["nn_module_stack"] = outer
            out = outputs[i]
            if out in inside_set:
                out.replace_all_uses_with(node, delete_user_cb=lambda user: user not in inside_set)
                nodes[out.name] = node  # (a later call's signature names the value by its old node)
    for n, buffer in buffers.items():
        n.replace_all_uses_with(buffer, delete_user_cb=lambda user: user not in inside_set)
    reads = {a for n in inside for a in n.all_input_nodes if a.op == "get_attr"}
    for n in reversed(inside):
        gm.graph.erase_node(n)
    for n in reads:
        if not n.users:
            gm.graph.erase_node(n)
    gm.recompile()
    return None


def _export_state(model: nn.Module, keep_data: bool = False) -> ModelSnapshot:
    """The model's state as the export front end watches it: every kind (:class:`ModelSnapshot`),
    of every module but a TorchScript one (its entries are views of its C++ module: not ours to put
    back). Taken inside the trace (the traced tensors stand in for the model's) to say what the
    forward changed (:func:`_export_changes`); taken before it, with ``keep_data``, to put back
    everything the trace left."""
    return ModelSnapshot(((path, m) for path, m in model.named_modules() if not isinstance(m, torch.jit.ScriptModule)),
                         keep_data=keep_data)


def _export_changes(snapshot: ModelSnapshot) -> list[tuple[str, str]]:
    """(name, what the forward did) for each change a torch.export graph would not replay, in the
    model's order."""
    found: list[tuple[str, str]] = []
    for change in snapshot.changes():
        what = _export_refuses(change)
        if what:
            found.append((change.qualified_name, what))
    return found


def _export_refuses(change: StateChange) -> str:
    """What ``change`` did, or "" when the graph replays it (an in-place write of a tensor), or it is
    no change of state (a proxy standing in for a module, a container's items that are no state)."""
    kind, old, now = change.kind, change.before, change.now
    if kind is StateKind.TRAINING:
        return f"switched to {'train' if now else 'eval'} mode"
    if kind is StateKind.ATTRIBUTE:
        if not (_is_state(old) or _is_state(now)) or _same_number(old, now):
            return ""
        return "a tensor attribute rebound" if isinstance(now, torch.Tensor) else "an attribute assigned"
    if kind in ENTRIES:
        if kind is StateKind.SUBMODULE and _same_module(old, now):
            return ""
        return f"a {kind.value} {'registered' if old is ABSENT else 'deleted' if now is ABSENT else 'replaced'}"
    if kind is StateKind.CONTAINER:
        kept = set(map(id, old)) & set(map(id, now))
        return "its items changed" if any(_is_state(v) for v in [*old, *now] if id(v) not in kept) else ""
    if kind is StateKind.REQUIRES_GRAD:
        return f"requires_grad set to {now}"
    if kind is StateKind.DATA:
        return "its .data assigned"
    return ""  # an in-place write: the graph holds it


def _same_module(a: Any, b: Any) -> bool:
    """Whether two submodule entries are one module: torch.export's non-strict tracer stands a
    proxy in for a module registered under two names (it shares the module's ``__dict__``)."""
    return isinstance(a, nn.Module) and isinstance(b, nn.Module) and vars(a) is vars(b)


def _same_number(a: Any, b: Any) -> bool:
    """Whether a plain number was written back equal (``self.scaling = self.head_dim ** -0.5`` each
    call: a new float object, the same value), which is no change of state."""
    return type(a) is type(b) and isinstance(a, (int, float)) and a == b


def _is_state(value: Any) -> bool:
    """A plain attribute whose change a graph would not replay: a tensor, a module or a number (a
    counter, a flag), e.g. ``self.weight = w / sigma`` in a hook, ``self.calls += 1``."""
    return isinstance(value, (torch.Tensor, nn.Module, int, float))


def _pin_default_dtypes(gm: fx.GraphModule) -> None:
    """A tensor the forward made with torch's default dtype while it had changed it
    (``torch.set_default_dtype(torch.float64)`` and back): torch.export's node names no dtype and
    would make it in the default of the call that runs the graph. Such a node gets the dtype it
    was traced with, as the forward made it."""
    default = torch.get_default_dtype()
    changed = False
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        schema = getattr(node.target, "_schema", None)
        if (node.op != "call_function" or schema is None or not isinstance(val, torch.Tensor)
                or not val.dtype.is_floating_point or val.dtype == default or node.kwargs.get("dtype") is not None
                or not any(a.name == "dtype" and a.kwarg_only for a in schema.arguments)
                or node.all_input_nodes):  # (made from tensors: their dtype decides)
            continue
        node.kwargs = {**node.kwargs, "dtype": val.dtype}
        changed = True
    if changed:
        gm.recompile()


def _inline_regions(gm: fx.GraphModule, ambient: bool) -> None:
    """torch.export wraps each region of the forward run under another grad mode (``with
    torch.no_grad():``, ``@torch.no_grad()``) in a ``wrap_with_set_grad_enabled`` higher-order op
    calling a submodule, and each ``torch.autocast`` region in a ``wrap_with_autocast`` one. Each is
    put back in line, so that every node is counted and runs as the forward ran it: a grad-mode
    region between ``torch._C._set_grad_enabled(mode)`` and ``torch._C._set_grad_enabled(ambient)``
    (the grad mode the graph was captured under; an in-place update of a parameter under no_grad stays
    out of autograd, as in the eager call), an autocast region between ``_enter_autocast(device, dtype,
    enabled, cache)`` and ``_exit_autocast`` (its ops cast as autocast casts them in the eager call)."""
    grad_hop = getattr(torch.ops.higher_order, "wrap_with_set_grad_enabled", None)
    autocast_hop = getattr(torch.ops.higher_order, "wrap_with_autocast", None)
    hops = {hop for hop in (grad_hop, autocast_hop) if hop is not None}
    graph = gm.graph
    changed = False
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in hops:
            continue
        if node.target is grad_hop:
            enabled, body_node, *operands = node.args
            inner_ambient = bool(enabled)
        else:  # wrap_with_autocast(device_type, dtype, enabled, cache_enabled, body, *operands)
            device_type, dtype, on, cache, body_node, *operands = node.args
            autocast_args = (device_type, dtype, on, cache)
            inner_ambient = ambient
        body = gm.get_submodule(str(body_node.target))
        assert isinstance(body, fx.GraphModule)
        _inline_regions(body, inner_ambient)  # nested regions first
        env: dict[fx.Node, Any] = {}
        results: Any = ()
        placeholders = iter(operands)
        with graph.inserting_before(node):
            if node.target is grad_hop:
                graph.call_function(torch._C._set_grad_enabled, (inner_ambient,))
            else:
                entered = graph.call_function(torch.amp.autocast_mode._enter_autocast, autocast_args)
            for inner in body.graph.nodes:
                if inner.op == "placeholder":
                    env[inner] = next(placeholders)
                elif inner.op == "output":
                    results = fx.map_arg(inner.args[0], env.__getitem__)
                elif inner.op == "get_attr":
                    raise TracingError(f"torch.export's region {body_node.target} reads {inner.target} "
                                       "of its own: torch_flops cannot put it in line")
                else:
                    env[inner] = graph.node_copy(inner, env.__getitem__)
            if node.target is grad_hop:
                graph.call_function(torch._C._set_grad_enabled, (ambient,))
            else:
                graph.call_function(torch.amp.autocast_mode._exit_autocast, (entered,))
        for user in list(node.users):
            if user.op != "call_function" or user.target is not operator.getitem:
                raise TracingError(f"torch.export's region {body_node.target} is used by "
                                   f"{user.format_node()}: torch_flops cannot put it in line")
            user.replace_all_uses_with(results[user.args[1]])
            graph.erase_node(user)
        graph.erase_node(node)
        if not body_node.users:
            graph.erase_node(body_node)
            gm.delete_submodule(str(body_node.target))
        changed = True
    if changed:
        graph.lint()
        gm.recompile()


def _forward_names(model: nn.Module) -> tuple[str, ...]:
    try:
        params = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        return ()
    return tuple(p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def _readable_input(keypath: str, forward_names: Sequence[str]) -> str:
    """``"[0][1]"`` -> the forward's second parameter name; ``"[1]['input_ids']"`` -> ``input_ids``."""
    match = re.match(r"\[0\]\[(\d+)\](.*)", keypath)
    if match:
        position = int(match.group(1))
        base = forward_names[position] if position < len(forward_names) else f"args[{position}]"
        return base + match.group(2)
    match = re.match(r"\[1\]\['([^']+)'\](.*)", keypath)
    if match:
        return match.group(1) + match.group(2)
    return keypath


# ---------------------------------------------------------------------------------------------
# Module attribution
# ---------------------------------------------------------------------------------------------

def parametrized_holders(model: nn.Module) -> frozenset[int]:
    """The ids of the modules with a parametrized tensor (``torch.nn.utils.parametrize``) of their own
    or in a submodule, but those of :data:`ONE_KERNEL_MODULES`: traced through rather than kept whole by
    their class's formula."""
    # (parametrize.is_parametrized, read from the dictionary it registers in: getattr on a module
    # without it raises inside nn.Module.__getattr__, ~2 us a module on every call)
    held = {id(m) for m in model.modules() if "parametrizations" in m._modules
            and isinstance(p := m._modules["parametrizations"], nn.ModuleDict) and len(p) > 0}
    if not held:
        return frozenset()
    return frozenset(id(m) for m in model.modules() if not isinstance(m, ONE_KERNEL_MODULES)
                     and any(id(sub) in held for sub in m.modules()))


#: modules that run one fused kernel of torch's, chosen by what is installed around them (the
#: attention fast paths, see _root_kept_whole) or called through torch._VF (RNNs): traced through, they
#: would run other kernels than without the profiler (their parametrizations stay uncounted)
ONE_KERNEL_MODULES = (nn.RNNBase, nn.MultiheadAttention, nn.TransformerEncoderLayer, nn.TransformerEncoder)


def _root_kept_whole(root: nn.Module) -> bool:
    """Whether the model itself is recorded as one node, with the modes off and no hooks on it: a
    model that picks its kernels by what is installed around it, so it runs the kernels it runs
    without the profiler: ``nn.MultiheadAttention`` (its fused fast path needs ``has_torch_function``
    False), and an ``nn.TransformerEncoderLayer`` / ``nn.TransformerEncoder`` that can take its fast
    path now (in eval, no gradient to record, on a device with its kernels: it also needs no forward
    hook on the layer, no mode for the encoder's nested-tensor path; in training they run their
    unfused ops, recorded one by one); and an RNN layer (see below)."""
    if isinstance(root, nn.MultiheadAttention):
        return True
    if isinstance(root, nn.RNNBase):
        # (its forward calls torch's fused RNN op through torch._VF, which no function mode sees: as the
        # model it would be recorded as the kernel's aten ops, not as the one node it is in any model)
        return True
    if isinstance(root, nn.TransformerEncoderLayer) and any(m._forward_hooks or m._forward_pre_hooks
                                                            for m in root.modules()):
        return False  # (a hook of the user's on the layer or inside it turns its fast path off)
    if isinstance(root, (nn.TransformerEncoderLayer, nn.TransformerEncoder)):
        params = list(root.parameters())
        # the fast path also needs its tensors on a device it has kernels for (torch's check names
        # cpu, cuda and the private-use backend): on meta the layer runs its unfused ops
        fast_devices = ("cpu", "cuda", torch._C._get_privateuse1_backend_name())
        return (not root.training and not (torch.is_grad_enabled() and any(p.requires_grad for p in params))
                and all(p.device.type in fast_devices for p in params))
    return False


_TRANSFORMERS = (nn.TransformerEncoderLayer, nn.TransformerEncoder, nn.TransformerDecoderLayer, nn.TransformerDecoder,
                 nn.Transformer)


def traced_through_now(module: nn.Module) -> bool:
    """Whether a transformer module with a formula (kept whole by the graph front ends, counted by its
    children's formulas) is recorded through its ops in this eager call, its layers and their linears in
    the module tree: a decoder (layer) or ``nn.Transformer`` always (no fused kernel of torch's runs it
    whole), an encoder (layer) when it cannot take its fused fast path now (:func:`_root_kept_whole`:
    training, a gradient to record; for a layer, a forward hook on it)."""
    if not isinstance(module, _TRANSFORMERS):
        return False
    if isinstance(module, nn.TransformerEncoderLayer):
        return not _root_kept_whole(module)
    if isinstance(module, nn.TransformerEncoder):
        # (an encoder whose layer has a hook stays whole: traced through, its own nested-tensor path, which
        # a function mode turns off, would not run, and the padded positions' values would differ)
        return not _root_kept_whole(module)
    return True


class ModelIndex:
    """One walk over the model's modules, shared by everything that needs them for one capture (or
    one eager call): each module's path and class, each parameter's and buffer's name, the
    parameters each module owns (a shared one counted once), the storages to leave out of
    live-tensor memory, and, given a formula ``table``, the modules recorded as one node each:
    those whose class has a formula, plus the classes, paths and class names asked for
    (``leaf_*``). The root is not one node (its forward is what runs), except the models
    :func:`_root_kept_whole` names. A lazy module whose parameters do not exist yet is refused here
    (``ValueError``)."""

    @functions_off
    def __init__(self, model: nn.Module, table: FormulaTable | None = None, leaf_types: tuple[type, ...] = (),
                 leaf_paths: Iterable[str] = (), leaf_names: Iterable[str] = ()) -> None:
        paths, names = set(leaf_paths), set(leaf_names)
        self.model = model
        self.paths: dict[int, str] = {}  #: id(module) -> its path ("" = the root)
        self.types: dict[str, str] = {}  #: path -> class name
        self.attrs: dict[int, str] = {}  #: id(parameter or buffer) -> its name ("0.weight"), first path
        self.params: dict[str, int] = {}  #: path -> parameters it owns directly (shared ones once)
        self.leaf_classes: dict[str, type] = {}  #: path -> class of each module recorded as one node
        self.modules: list[nn.Module] = []  #: in ``model.modules()`` order
        #: (name, tensor, is a parameter) of every parameter and buffer, each tensor once
        self.tensors: list[tuple[str, torch.Tensor, bool]] = []
        #: parameter dtype ("bfloat16") -> elements, each parameter once (the model's size by dtype)
        self.param_dtypes: dict[str, int] = {}
        leaves: set[int] = set()
        asked: set[int] = set()
        through = parametrized_holders(model) if table is not None else frozenset()
        named = list(model.named_modules())
        # a tensor that is a parameter of some module is one wherever else it is registered (a parent's
        # buffer aliasing a child's bias was met first, as a buffer, and the parameter went uncounted)
        parameters = {id(t) for _, m in named for t in m._parameters.values() if t is not None}
        for path, module in named:
            check_module_initialized(path, module)  # a lazy module's parameters do not exist yet
            self.modules.append(module)
            self.paths[id(module)] = path
            self.types[path] = type(module).__name__
            owned = 0
            for store, is_param in ((module._parameters, True), (module._buffers, False)):
                for name, t in store.items():
                    if t is None or id(t) in self.attrs or (not is_param and id(t) in parameters):
                        continue
                    full = f"{path}.{name}" if path else name
                    self.attrs[id(t)] = full
                    self.tensors.append((full, t, is_param))
                    if is_param:
                        owned += t.numel()
                        dtype = str(t.dtype).removeprefix("torch.")
                        self.param_dtypes[dtype] = self.param_dtypes.get(dtype, 0) + t.numel()
            self.params[path] = owned
            if table is None or (not path and not _root_kept_whole(module)):
                continue
            # a module whose parameters are DTensors (tensor parallel, FSDP2) is recorded through
            # its ops: they see each shard (local work) and the logical tensor (global work), and
            # the collectives between them
            # so is a module with a parametrized tensor (torch.nn.utils.parametrize), its own or a
            # submodule's: the parametrization's work is the forward's, and a formula reading the
            # tensor would run it once more (unless asked for as a leaf by name, path or class)
            sharded = any(type(t).__name__ == "DTensor" for t in module._parameters.values() if t is not None)
            formula = table.resolve_module(type(module))
            # (asked for: a leaf by class, path or name, or a class counted by a formula of the user's,
            # however found: by the class, a base class, a name)
            chosen = isinstance(module, leaf_types) or path in paths or type(module).__name__ in names \
                or (formula is not None and not table.is_builtin(formula))
            if not sharded and (chosen or (id(module) not in through and formula is not None)):
                leaves.add(id(module))
                self.leaf_classes[path] = type(module)
                if chosen:
                    asked.add(id(module))
        self.leaves = frozenset(leaves)  #: ids of the modules recorded as one node each
        #: of those, the ones the user asked for (leaf_modules, a formula or ignore_ops of theirs): one node,
        #: whatever hooks they have
        self.chosen = frozenset(asked)
        self.storages = frozenset(storage_key(t)[0] for _, t, _ in self.tensors)  #: their storages' keys

    @property
    def parameters(self) -> list[torch.Tensor]:
        """The model's parameters, each once."""
        return [t for _, t, is_param in self.tensors if is_param]


class Snapshot:
    """What a captured graph depends on beyond the objects it shares with the model: the training
    flag of every module (the branch fx took) and, for every module and tensor the graph calls or
    reads, the object at each step of its path (a replaced module, parameter or buffer is not the
    graph's). A move to another dtype or device keeps the objects, and the graph sees it. Taken
    once per capture; :meth:`holds` is a few C-level scans on every call."""

    def __init__(self, index: ModelIndex, graph: fx.GraphModule | None = None) -> None:
        model = index.model
        self.index = index  #: the model's walk this snapshot was taken from
        self.modules = index.modules  #: the model's modules, in model.modules() order
        self._flags = [m.training for m in self.modules]
        links: dict[int, tuple[dict[str, Any], str, Any]] = {}
        if graph is not None:  # fx: what the graph calls and reads
            targets = [str(n.target) for n in graph.graph.nodes if n.op in ("call_module", "get_attr")]
        else:  # export: the graph was traced from every parameter and buffer
            targets = [name for name, _, _ in index.tensors]
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
        #: every module's hook dictionaries (each module keeps its own for its life; registering adds to them)
        self._hook_dicts = [getattr(m, attr) for m in self.modules for attr, _ in _HOOKS]
        self._hooks = self._hook_keys()

    def _hook_keys(self) -> list[int]:
        """The handles of the user's module hooks (each module's and the global ones; not those of
        torch, such as FlopCounterMode's, nor torch_flops'): a hook registered or removed since the
        capture changes them (a graph traced through a module keeps what its hooks did then; a front
        end refuses, or runs the hook, on a new capture)."""
        table = nn.modules.module
        held = [d for d in (getattr(table, name, None) for name in _GLOBAL_HOOKS) if d]
        held += filter(None, self._hook_dicts)  # (the empty ones, nearly all, skipped in C)
        return [k for d in held for k, h in d.items() if _is_users_hook(h)]

    def holds(self) -> bool:
        return ([m.training for m in self.modules] == self._flags
                and all(map(operator.is_, map(dict.get, self._stores, self._names), self._objects))
                and self._hook_keys() == self._hooks)


def _locations(gm: fx.GraphModule, module_types: Mapping[str, str], prefix: str = "") -> dict[fx.Node, NodeLocation]:
    """Each node's innermost module, its type and every enclosing module path.

    The paths come from ``nn_module_stack`` (both front ends record it), spelled as fx does
    (``layers.0.attn``); ``prefix`` (the export wrapper's attribute) is removed.
    """
    root_type = module_types.get("", type(gm).__name__)
    locations: dict[fx.Node, NodeLocation] = {}
    for node in gm.graph.nodes:
        if node.op == "call_module" and str(node.target).startswith("_guards"):
            locations[node] = NodeLocation("", root_type, ())  # torch.export's input guard check
            continue
        if node.op == "get_attr" and not node.meta.get("nn_module_stack"):
            # a parameter or buffer read at the top of the graph (torch.export lifts them): its owner
            attribute = _clean_path(str(node.target), prefix)
            owner = attribute.rpartition(".")[0]
            locations[node] = NodeLocation(owner, module_types.get(owner, root_type), module_chain((owner,)),
                                           attribute)
            continue
        stack = node.meta.get("nn_module_stack") or {}
        paths = [_clean_path(v[0] if isinstance(v, tuple) else k, prefix) for k, v in stack.items()]
        if node.op == "call_module":
            paths.append(_clean_path(str(node.target), prefix))
        paths = [p for p in paths if p]
        path = paths[-1] if paths else ""
        if node.op == "call_module":
            module_type = type(gm.get_submodule(str(node.target))).__name__
        elif path in module_types:
            module_type = module_types[path]
        else:
            module_type = _stack_type(stack) if path else root_type
        locations[node] = NodeLocation(path, module_type, module_chain(paths))
    return locations


def _clean_path(path: str, prefix: str) -> str:
    # torch.export spells paths as "L['self'].layers[0].attn" or "layers.0.attn"; fx as "layers.0.attn"
    if "[" in path or path.startswith("L__self__"):
        path = path.replace("L['self']", "").replace("L__self__", "")
        for a, b in (("['", "."), ("']", ""), ("[", "."), ("]", ""), ("._modules", ""), ("_modules", "")):
            path = path.replace(a, b)
        path = path.strip(".")
    if prefix:
        if path == prefix:
            return ""
        if path.startswith(prefix + "."):
            return path[len(prefix) + 1:]
    return path


def _stack_type(stack: Mapping[str, Any]) -> str:
    if not stack:
        return ""
    last = list(stack.values())[-1]
    kind = last[1] if isinstance(last, tuple) else last
    if isinstance(kind, type):
        return kind.__name__
    return str(kind).rsplit(".", 1)[-1].strip("'>")


# ---------------------------------------------------------------------------------------------
# messages
# ---------------------------------------------------------------------------------------------

def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _describe(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    def one(v: Any) -> str:
        if isinstance(v, torch.Tensor):
            if v.is_nested:  # (a strided nested tensor has no sizes to read)
                return f"nested {str(v.dtype).replace('torch.', '')}"
            return f"{tuple(v.shape)} {str(v.dtype).replace('torch.', '')}"
        return type(v).__name__
    parts = [one(a) for a in args] + [f"{k}={one(v)}" for k, v in kwargs.items()]
    return ", ".join(parts)

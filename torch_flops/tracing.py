"""Front ends that turn a model into a ``torch.fx.GraphModule``.

* :func:`trace_fx`: ``torch.fx`` symbolic tracing (no inputs needed). ``leaf_modules`` keeps
  chosen modules whole (one node each); ``concrete_args`` fixes Python-level arguments.
* :func:`trace_export`: ``torch.export.export(..., strict=False)`` on real example inputs, for
  models symbolic tracing cannot handle (data-dependent control flow, most transformers models).

Failures raise :class:`TracingError` naming the cause and what the user can do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import fx, nn

__all__ = ["EXPORT_ROOT", "TracingError", "bind_inputs", "trace_export", "trace_fx"]


class TracingError(RuntimeError):
    """The model could not be turned into a graph; the message says why and what to try."""


_FX_HINTS = (
    "What to try: pass leaf_modules=(SomeModule, 'path.to.module') to keep the module that fails "
    "tracing as one opaque node; pass concrete_args={'flag': value} to fix Python-level arguments; "
    "or use tracer='export' (torch.export, which traces with the real example inputs)."
)


class _LeafTracer(fx.Tracer):
    """fx's tracer with extra leaf modules, given by class or by dotted path."""

    def __init__(self, leaf_types: tuple[type, ...], leaf_paths: frozenset[str],
                 leaf_names: frozenset[str] = frozenset()) -> None:
        super().__init__()
        self._leaf_types = leaf_types
        self._leaf_paths = leaf_paths
        self._leaf_names = leaf_names
        self._tensor_paths: tuple[nn.Module, dict[int, str]] | None = None

    def getattr(self, attr: str, attr_val: Any, parameter_proxy_cache: dict[str, Any]) -> Any:
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
                    parameter_proxy_cache[path] = self.create_proxy("get_attr", path, (), {})
                return parameter_proxy_cache[path]
        return super().getattr(attr, attr_val, parameter_proxy_cache)

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        if self._leaf_types and isinstance(m, self._leaf_types):
            return True
        if module_qualified_name in self._leaf_paths or type(m).__name__ in self._leaf_names:
            return True
        return super().is_leaf_module(m, module_qualified_name)


def split_leaf_modules(leaf_modules: Iterable[type | str]) -> tuple[tuple[type, ...], frozenset[str]]:
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


def trace_fx(model: nn.Module, *, leaf_modules: Iterable[type | str] = (),
             concrete_args: Mapping[str, Any] | None = None,
             leaf_class_names: Iterable[str] = ()) -> fx.GraphModule:
    """Symbolically trace ``model``; an existing GraphModule is returned as it is.

    ``leaf_class_names``: classes (by exact name) kept as one node, e.g. those a user registered a
    module formula for.
    """
    if isinstance(model, fx.GraphModule):
        return model
    leaf_types, leaf_paths = split_leaf_modules(leaf_modules)
    tracer = _LeafTracer(leaf_types, leaf_paths, frozenset(leaf_class_names))
    try:
        graph = tracer.trace(model, concrete_args=dict(concrete_args) if concrete_args else None)
    except Exception as e:  # fx raises TraceError, TypeError, NotImplementedError, ...
        where = _innermost_module(tracer)
        raise TracingError(
            f"torch.fx.symbolic_trace could not trace {type(model).__name__}"
            f"{f' (inside {where})' if where else ''}: {type(e).__name__}: {_first_line(e)}\n{_FX_HINTS}"
        ) from e
    name = model.__class__.__name__
    return fx.GraphModule(tracer.root, graph, name)


def _innermost_module(tracer: fx.Tracer) -> str:
    stack = getattr(tracer, "module_stack", None)
    if not stack:
        return ""
    path, kind = list(stack.values())[-1]
    kind_name = getattr(kind, "__name__", str(kind))
    return f"module '{path}' ({kind_name})" if path else ""


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


#: attribute under which :func:`trace_export` wraps the user's model; stripped from module paths
EXPORT_ROOT = "model"

_PLAIN_LEAVES = (torch.Tensor, int, float, bool, str, complex, type(None), torch.dtype, torch.device)


class _ExportWrapper(nn.Module):
    """Exports ``model`` with the parts of its output that torch.export cannot flatten (for
    example a transformers ``DynamicCache``) replaced by None, and remembers what was dropped."""

    def __init__(self, model: nn.Module, dropped: list[str]) -> None:
        super().__init__()
        setattr(self, EXPORT_ROOT, model)
        # torch.export restores module attributes after tracing, so the record of what was dropped
        # lives in a list owned by the caller (held in a closure, not as a module attribute).
        self._record_drop = dropped.append

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        from torch.utils import _pytree

        out = getattr(self, EXPORT_ROOT)(*args, **kwargs)
        leaves, spec = _pytree.tree_flatten_with_path(out)
        kept = []
        for path, leaf in leaves:
            if isinstance(leaf, _PLAIN_LEAVES):
                kept.append(leaf)
            else:
                self._record_drop(f"{_pytree.keystr(path) or 'output'} ({type(leaf).__name__})")
                kept.append(None)
        return _pytree.tree_unflatten(kept, spec)


def trace_export(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[fx.GraphModule, list[str]]:
    """``torch.export.export(model, args, kwargs, strict=False)`` as a runnable GraphModule.

    The graph is traced under ``torch.no_grad()``: it is a forward (inference) graph, without the
    autograd regions that would otherwise appear as higher-order ops. Returns the graph and the
    output parts it had to leave out (see :class:`_ExportWrapper`). Module paths in the graph's
    ``nn_module_stack`` are prefixed with :data:`EXPORT_ROOT`.
    """
    dropped: list[str] = []
    wrapper = _ExportWrapper(model, dropped)
    was_training = [(m, m.training) for m in model.modules()]
    try:
        with torch.no_grad():
            program = torch.export.export(wrapper, tuple(args), dict(kwargs), strict=False)
    except Exception as e:
        raise TracingError(
            f"torch.export could not trace {type(model).__name__} with inputs "
            f"({_describe(args, kwargs)}): {type(e).__name__}: {_first_line(e)}\n"
            "What to try: check the input names and shapes against the model's forward(); for "
            "data-dependent Python control flow use tracer='fx' with concrete_args or leaf_modules."
        ) from e
    finally:
        for m, flag in was_training:
            m.training = flag
    gm = program.module()
    setattr(gm, "_torch_flops_input_names", _forward_names(model))  # for errors that name inputs  # noqa: B010
    return gm, list(dict.fromkeys(dropped))


def _forward_names(model: nn.Module) -> tuple[str, ...]:
    import inspect

    try:
        params = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        return ()
    return tuple(p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def _describe(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    def one(v: Any) -> str:
        if isinstance(v, torch.Tensor):
            return f"{tuple(v.shape)} {str(v.dtype).replace('torch.', '')}"
        return type(v).__name__
    parts = [one(a) for a in args] + [f"{k}={one(v)}" for k, v in kwargs.items()]
    return ", ".join(parts)


def bind_inputs(gm: fx.GraphModule, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                concrete_args: Mapping[str, Any] | None = None) -> list[Any]:
    """Match ``propagate(*args, **kwargs)`` to the graph's placeholders, in their order.

    A placeholder takes the next positional argument, else the keyword of its name, else the value
    it was traced with (``concrete_args``) or its default. Unknown keywords and missing inputs raise
    ``TypeError`` naming them.
    """
    in_spec = getattr(gm, "_in_spec", None)
    if in_spec is not None:  # a torch.export graph: inputs are the leaves of (args, kwargs)
        return _bind_exported(gm, in_spec, args, kwargs)
    concrete = dict(concrete_args or {})
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    names = [_source_name(str(n.target).lstrip("*"), concrete) for n in placeholders]
    if len(args) > len(placeholders):
        raise TypeError(f"the graph takes {len(placeholders)} input(s) ({', '.join(names)}) "
                        f"but {len(args)} positional argument(s) were given")
    unknown = [k for k in kwargs if k not in names]
    if unknown:
        raise TypeError(f"unexpected keyword input(s) {unknown}; the graph's inputs are {names}")
    flat: list[Any] = []
    for i, (node, name) in enumerate(zip(placeholders, names)):
        if i < len(args):
            if name in kwargs:
                raise TypeError(f"input {name!r} given both by position and by keyword")
            flat.append(args[i])
        elif name in kwargs:
            flat.append(kwargs[name])
        elif name in concrete:
            flat.append(concrete[name])  # fx specialised the graph to this value
        elif node.args:
            flat.append(node.args[0])  # the default value fx recorded
        else:
            raise TypeError(f"missing input {name!r}; the graph's inputs are {names}")
    return flat


def _source_name(placeholder: str, concrete: Mapping[str, Any]) -> str:
    # fx renames the placeholder of a concrete argument "double" to "double_1"
    if placeholder not in concrete:
        base, _, suffix = placeholder.rpartition("_")
        if suffix.isdigit() and base in concrete:
            return base
    return placeholder


def _bind_exported(gm: fx.GraphModule, in_spec: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[Any]:
    forward_names: Sequence[str] = getattr(gm, "_torch_flops_input_names", ())
    import torch.fx._pytree as fx_pytree
    from torch.utils import _pytree

    try:
        flat = fx_pytree.tree_flatten_spec((tuple(args), dict(kwargs)), in_spec)
        # the same structure holding each input's readable name, flattened in the same order
        labels = _pytree.tree_map_with_path(lambda path, _: _pytree.keystr(path), (tuple(args), dict(kwargs)))
        names = [_readable_input(str(x), forward_names) for x in fx_pytree.tree_flatten_spec(labels, in_spec)]
    except Exception as e:
        raise TypeError(
            f"the inputs ({_describe(args, kwargs)}) do not match the inputs the graph was exported with: {e}"
        ) from e
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, value, name in zip(placeholders, flat, names):
        expected = node.meta.get("val")
        if (isinstance(expected, torch.Tensor) and isinstance(value, torch.Tensor)
                and (tuple(expected.shape) != tuple(value.shape) or expected.dtype != value.dtype)):
            raise ValueError(
                f"input {name!r} has shape {tuple(value.shape)} {value.dtype} but the graph was "
                f"exported for {tuple(expected.shape)} {expected.dtype}"
            )
    return list(flat)


def _readable_input(keypath: str, forward_names: Sequence[str]) -> str:
    """``"[0][1]"`` -> the forward's second parameter name; ``"[1]['input_ids']"`` -> ``input_ids``."""
    import re

    match = re.match(r"\[0\]\[(\d+)\](.*)", keypath)
    if match:
        position = int(match.group(1))
        base = forward_names[position] if position < len(forward_names) else f"args[{position}]"
        return base + match.group(2)
    match = re.match(r"\[1\]\['([^']+)'\](.*)", keypath)
    if match:
        return match.group(1) + match.group(2)
    return keypath

"""Front ends that turn a model into a ``torch.fx.GraphModule``.

* :func:`trace_fx`: ``torch.fx`` symbolic tracing (no inputs needed). ``leaf_modules`` keeps
  chosen modules whole (one node each); ``concrete_args`` fixes Python-level arguments.
* :func:`trace_export`: ``torch.export.export(..., strict=False)`` on real example inputs, for
  models symbolic tracing cannot handle (data-dependent control flow, most transformers models).

Failures raise :class:`TracingError` naming the cause and what the user can do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import fx, nn

__all__ = ["TracingError", "trace_fx"]


class TracingError(RuntimeError):
    """The model could not be turned into a graph; the message says why and what to try."""


_FX_HINTS = (
    "What to try: pass leaf_modules=(SomeModule, 'path.to.module') to keep the module that fails "
    "tracing as one opaque node; pass concrete_args={'flag': value} to fix Python-level arguments; "
    "or use tracer='export' (torch.export, which traces with the real example inputs)."
)


class _LeafTracer(fx.Tracer):
    """fx's tracer with extra leaf modules, given by class or by dotted path."""

    def __init__(self, leaf_types: tuple[type, ...], leaf_paths: frozenset[str]) -> None:
        super().__init__()
        self._leaf_types = leaf_types
        self._leaf_paths = leaf_paths

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        if self._leaf_types and isinstance(m, self._leaf_types):
            return True
        if module_qualified_name in self._leaf_paths:
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
             concrete_args: Mapping[str, Any] | None = None) -> fx.GraphModule:
    """Symbolically trace ``model``; an existing GraphModule is returned as it is."""
    if isinstance(model, fx.GraphModule):
        return model
    leaf_types, leaf_paths = split_leaf_modules(leaf_modules)
    tracer = _LeafTracer(leaf_types, leaf_paths)
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


def bind_inputs(gm: fx.GraphModule, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[Any]:
    """Match ``propagate(*args, **kwargs)`` to the graph's placeholders, in their order.

    A placeholder takes the next positional argument, else the keyword of its name, else its
    traced default. Unknown keywords and missing inputs raise ``TypeError`` naming them.
    """
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    names = [str(n.target).lstrip("*") for n in placeholders]
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
        elif node.args:
            flat.append(node.args[0])  # the default value fx recorded
        else:
            raise TypeError(f"missing input {name!r}; the graph's inputs are {names}")
    return flat

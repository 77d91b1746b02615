"""The front end that follows the real execution (``tracer="eager"``, the first choice of ``"auto"``).

``model(*args, **kwargs)`` runs exactly as the user runs it: plain eager PyTorch, Python control
flow on real values, hooks, custom autograd Functions, in-place updates of inputs and buffers,
all of it once. While it runs, a ``TorchDispatchMode`` sees every aten op and a pair of global
module hooks see every module call, and the two build the graph of what ran:

* a call of a module whose class has a formula (``nn.Linear``, ``nn.Conv2d``, a class you
  registered) becomes one ``call_module`` node, timed from its pre-hook to its hook, counted by
  the module's formula; the aten ops inside it run unrecorded;
* every other aten op becomes a ``call_function`` node on the op overload, timed around the op,
  counted by the aten formulas; the model's inputs become placeholders, parameters and buffers
  ``get_attr`` nodes, an item of a tuple output a ``getitem`` node.

Each node is planned (:func:`torch_flops.plan.plan_node`) and measured
(:meth:`torch_flops.interpreter.NodeMeasurer.measure`) the moment it has run, by the same code
the fx interpreter uses, so FLOPs, bytes, memory and records mean the same on every front end.
Nothing is replayed: the output is the model's own. The hooks answer only to this thread and to
this model's modules, and are removed when the call ends, even when it fails.
"""

from __future__ import annotations

import functools
import inspect
import operator
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import fx, nn
from torch.fx._lazy_graph_module import _LazyGraphModule
from torch.nn.modules import module as module_hooks
from torch.overrides import TorchFunctionMode
from torch.overrides import _get_current_function_mode as _current_function_mode
from torch.utils import _pytree
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._python_dispatch import _get_current_dispatch_mode as _current_dispatch_mode

from torch_flops.backward import (
    BackwardCounter,
    BackwardRun,
    SequenceMap,
    graph_task,
    run_backward,
)
from torch_flops.capture import Capture, CapturedGraph, NodeLocation, check_module_initialized
from torch_flops.errors import NodeExecutionError, UnsupportedOpError
from torch_flops.formulas import FormulaTable
from torch_flops.interpreter import GraphRun, NodeMeasurer, describe_inputs, traffic_table
from torch_flops.measure import LiveTensors, MemoryProbe, Timer
from torch_flops.paths import module_chain
from torch_flops.plan import NodePlan, Plan, build_node_plan, decide, finish_plan, readable_target

__all__ = ["EagerRecording", "ModelIndex", "check_call", "check_leaves"]


class ModelIndex:
    """One walk over the model's modules: each module's path and class, each parameter's and
    buffer's name, the parameters each module owns (a shared one counted once), the storages to
    leave out of live-tensor memory, and the modules recorded as one node each: those whose class
    has a formula, plus the classes, paths and class names asked for (``leaf_modules``,
    ``ignore_ops``). The root is never one node: its forward is what runs."""

    def __init__(self, model: nn.Module, table: FormulaTable, leaf_types: tuple[type, ...] = (),
                 leaf_paths: Iterable[str] = (), leaf_names: Iterable[str] = ()) -> None:
        paths, names = set(leaf_paths), set(leaf_names)
        self.paths: dict[int, str] = {}
        self.types: dict[str, str] = {}
        self.attrs: dict[int, str] = {}
        self.params: dict[str, int] = {}
        self.leaf_classes: dict[str, type] = {}  #: path -> class of each module recorded as one node
        self.modules: list[nn.Module] = []
        leaves: set[int] = set()
        tensors: list[torch.Tensor] = []
        for path, module in model.named_modules():
            check_module_initialized(path, module)  # a lazy module's parameters do not exist yet
            self.modules.append(module)
            self.paths[id(module)] = path
            self.types[path] = type(module).__name__
            owned = 0
            for kind in (module._parameters, module._buffers):
                for name, t in kind.items():
                    if t is None or id(t) in self.attrs:
                        continue
                    self.attrs[id(t)] = f"{path}.{name}" if path else name
                    tensors.append(t)
                    if kind is module._parameters:
                        owned += t.numel()
            self.params[path] = owned
            # a module whose parameters are DTensors (tensor parallel, FSDP2) is recorded through
            # its ops: they see each shard (local work) and the logical tensor (global work), and
            # the collectives between them
            sharded = any(type(t).__name__ == "DTensor" for t in module._parameters.values() if t is not None)
            if path and not sharded and (table.resolve_module(type(module)) is not None
                                         or isinstance(module, leaf_types) or path in paths
                                         or type(module).__name__ in names):
                leaves.add(id(module))
                self.leaf_classes[path] = type(module)
        self.leaves = frozenset(leaves)
        self.storages = LiveTensors.storage_keys(tensors)


class EagerRecording(NodeMeasurer):
    """One eager call of the model, recorded node by node (see the module docstring)."""

    def __init__(self, model: nn.Module, index: ModelIndex, table: FormulaTable, ignored: Iterable[str],
                 timer: Timer, memory: MemoryProbe, strict: bool, backward: bool = False) -> None:
        self._model = model
        #: with ``backward``: which forward node made each autograd node (torch_flops.backward)
        self.sequences: SequenceMap | None = SequenceMap() if backward else None
        self.loss: Any = None  #: what ``loss_fn`` returned (or the output), with ``backward``
        #: while set (a training step being recorded), the ops autograd runs are this counter's,
        #: and no module, function or op seen in a backward becomes a forward node
        self.backward_counter: BackwardCounter | None = None
        self._handles: list[Any] = []
        self.last_output: Any = None  #: the model's last output (an open-ended recording's output node)
        self._in_loss = False  # loss_fn is running (for the message of what it raises)
        self._index = index
        self._table = table
        self._ignored = set(ignored)
        self._leaves = index.leaves
        self._timer = timer
        self._tick = timer.tick
        self._memory = memory
        self._read = memory.read
        # strict=True raises after the call (check_strict), never inside the model's own code
        self._strict = False
        self._raise_unsupported = strict
        self._thread = threading.get_ident()
        self._paths = index.paths
        self._types = index.types
        self._attrs = index.attrs
        self.graph = fx.Graph()
        self.plans: list[NodePlan] = []
        self._decided: dict[tuple[Any, ...], Any] = {}  # per target: what plan.decide said
        self.locations: dict[fx.Node, NodeLocation] = {}
        self._positions: dict[fx.Node, int] = {}
        #: id(tensor) -> (a weak reference to it, the node that made it, its index in a tuple output)
        self._values: dict[int, tuple[weakref.ref[torch.Tensor], fx.Node, int | None]] = {}
        self._getitems: dict[tuple[fx.Node, int], fx.Node] = {}
        self._attr_nodes: dict[str, fx.Node] = {}
        self._owners: dict[str, Any] = {}  # what the graph module holds: called modules, parameters, constants
        self._constants = 0
        self._root = NodeLocation("", self._types.get("", type(model).__name__), ())
        self._location = self._root
        self._stack: list[NodeLocation] = []  # the locations of the enclosing module calls, outermost first
        #: the module (or torch function) node being timed: the calls inside it are its own
        self._open: Any = None
        self._function_targets: dict[Any, Any] = {}
        self._open_args: Any = None
        self._failed: tuple[str, Any] | None = None  # the last op that raised, and its arguments
        self._dispatch_mode = _Recorder(self)
        self._function_mode = _Functions(self)
        self._suspended: tuple[bool, bool] = (False, False)  # the modes taken off while a module node runs
        #: the model read a value of a meta tensor (``.item()``, ``if tensor:``): it cannot run on meta
        self.needs_values = False
        self._open_level = 0
        self._open_start: Any = None
        self._open_before: int | None = None
        self.reset(0)

    # ------------------------------------------------------------------ the call
    def run(self, args: tuple[Any, ...], kwargs: dict[str, Any],
            loss_fn: Callable[[Any], Any] | None = None) -> Any:
        """Call the model once, recording it; returns its output (untouched). ``loss_fn(output)``,
        when given, runs in the same recording (its nodes are the step's too) and is kept as
        :attr:`loss`. An exception of the model comes out as :class:`NodeExecutionError` naming
        the op or module that raised and its input shapes, with the original as its cause."""
        if self.sequences is not None:
            self.sequences.open()
        self._add_inputs(args, kwargs)
        handles = [module_hooks.register_module_forward_pre_hook(self._pre_hook),
                   module_hooks.register_module_forward_hook(self._hook, with_kwargs=True, always_call=True)]
        try:
            with self._dispatch_mode, self._function_mode:
                output = self._model(*args, **kwargs)
                if loss_fn is not None:
                    self._in_loss = True
                    self.loss = loss_fn(output)
        except Exception as e:
            error = NodeExecutionError(self._failure_message(e))
            error.needs_values = self.needs_values  # type: ignore[attr-defined]
            raise error from e
        finally:
            for handle in handles:
                handle.remove()
            self._timer.finish()
        self._add_output(output)
        return output

    def begin(self) -> None:
        """Start an open-ended recording (a training step, see ``torch_flops.training``): every
        call of this thread is recorded until :meth:`end`; each call of the model adds its inputs."""
        if self.sequences is not None:
            self.sequences.open()
        self._handles = [module_hooks.register_module_forward_pre_hook(self._pre_hook),
                         module_hooks.register_module_forward_hook(self._hook, with_kwargs=True, always_call=True)]
        self._dispatch_mode.__enter__()
        self._function_mode.__enter__()

    def end(self) -> None:
        """Stop the recording :meth:`begin` started; the output node holds the model's last output."""
        try:
            self._function_mode.__exit__(None, None, None)
            self._dispatch_mode.__exit__(None, None, None)
        finally:
            for handle in self._handles:
                handle.remove()
            self._handles = []
            self._timer.finish()
        self._add_output(self.last_output)

    def add_call_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """A call of the model starts (an open-ended recording): its inputs become placeholders."""
        if threading.get_ident() == self._thread and graph_task() == -1:
            outer, self._open = self._open, _SELF
            try:
                self._add_inputs(args, kwargs)
            finally:
                self._open = outer

    def set_call_output(self, output: Any) -> None:
        """A call of the model returned ``output`` (the open-ended recording's output node)."""
        if threading.get_ident() == self._thread and graph_task() == -1:
            self.last_output = output

    def paused(self) -> _Paused:
        """A context in which nothing is recorded (the optimizer's step)."""
        return _Paused(self)

    def _failure_message(self, e: Exception) -> str:
        if self._in_loss and self._failed is None:  # the model returned; loss_fn's own code raised
            return f"loss_fn raised {type(e).__name__} on the model's output: {e}"
        where = self._location
        module = f" in module {where.path!r} ({where.module_type})" if where.path else ""
        if self._failed is None:  # raised by the model's Python code, between calls
            return (f"the model raised {type(e).__name__}{module} after {len(self.plans)} recorded node(s): {e}")
        what, inputs = self._failed
        return (f"running {what}{'' if ' in module ' in what else module} failed with inputs "
                f"({describe_inputs(inputs)}): {type(e).__name__}: {e}")

    def capture(self) -> Capture:
        """The graph of what ran, as a one-graph :class:`Capture` (front end ``"eager"``)."""
        gm = _LazyGraphModule(self._owners, self.graph, type(self._model).__name__)
        graph = CapturedGraph(graph_module=gm, locations=self.locations, binder=None)
        self._plan = finish_plan(graph, self.plans)
        return Capture(graphs=(graph,), front_end="eager", module_types=self._index.types,
                       module_params=self._index.params)

    @property
    def plan(self) -> Plan:
        return self._plan

    def check_strict(self) -> None:
        """With ``strict=True``: :class:`UnsupportedOpError` for the nodes of the call without a
        formula, or the first formula that failed (its exception as the cause)."""
        if not self._raise_unsupported:
            return
        self._plan.check_strict()
        for i, e in self.formula_exceptions.items():
            p = self._plan.nodes[i]
            raise UnsupportedOpError(f"node '{p.node.name}' ({p.target}): {self.errors[i]}") from e

    @property
    def memory_source(self) -> str:
        return self._memory.source

    def measured(self, times: list[float | None] | None = None) -> GraphRun:
        """What the call measured (after :meth:`capture`); ``times``: medians over several calls."""
        self.split_seen()
        return self.graph_run(0, self.times() if times is None else times, traffic_table(self._plan))

    def backward(self, loss: Any, table: FormulaTable) -> BackwardRun:
        """``loss.backward()``, every aten op it runs counted and timed for the forward node that
        caused it (:mod:`torch_flops.backward`); the gradients land in ``.grad`` as eager's do."""
        assert self.sequences is not None, "recorded without backward=True"
        run, self.kept_storages = run_backward(loss, table, self.sequences, len(self.plans), self._index.storages,
                                               self._timer)
        return run

    def targets(self) -> list[Any]:
        """The node targets in order: two calls ran the same program when these are equal."""
        return [p.node.target for p in self.plans]

    # ------------------------------------------------------------------ module hooks
    def _pre_hook(self, module: nn.Module, args: Any) -> None:
        if threading.get_ident() != self._thread or (self.backward_counter is not None
                                                     and graph_task() != -1):
            return
        path = self._paths.get(id(module))
        if path is None:  # a module of another model, or made inside forward: its ops are its caller's
            return
        self._push(path)
        if self._open is None and id(module) in self._leaves:
            self._open, self._open_level, self._open_args = module, len(self._stack), args
            self._open_before = self._read() if self._read is not None else None
            self._suspended = self._suspend(True)
            self._open_start = self._tick()

    def _hook(self, module: nn.Module, args: Any, *kwargs_result: Any) -> None:
        # (kwargs, result) after a forward; (result,) alone when the forward raised (torch calls an
        # always-called global hook so then): the stack unwinds, the open module stays for the message
        if threading.get_ident() != self._thread or id(module) not in self._paths or (
                self.backward_counter is not None and graph_task() != -1):
            return
        if len(kwargs_result) != 2:
            if module is self._open and len(self._stack) == self._open_level:
                self._resume(self._suspended)
                path = self._paths[id(module)]
                self._failed = (f"node {path.replace('.', '_')!r} ({type(module).__name__} in module {path!r})",
                                self._open_args)
                self._open = self._open_args = None  # the model may catch it and go on: record again
            self._pop()
            return
        kwargs, result = kwargs_result
        if module is self._open and len(self._stack) == self._open_level:
            end = self._tick()
            self._resume(self._suspended)
            after = self._read() if self._read is not None else None
            self._open = self._open_args = None
            self._add("call_module", self._paths[id(module)], args, kwargs or {}, result, module,
                      self._open_start, end, self._open_before, after)
        self._pop()

    def _suspend(self, functions: bool) -> tuple[bool, bool]:
        """Take this recording's modes off their stacks while a node's own calls run, so they run
        at native speed rather than through Python: only a mode on top of its stack (a mode the
        model pushed itself stays above ours, and ours then passes its calls through)."""
        dispatch = _current_dispatch_mode() is self._dispatch_mode
        function = functions and _current_function_mode() is self._function_mode
        if function:
            self._function_mode.__exit__(None, None, None)
        if dispatch:
            self._dispatch_mode.__exit__(None, None, None)
        return dispatch, function

    def _resume(self, suspended: tuple[bool, bool]) -> None:
        dispatch, function = suspended
        if dispatch:
            self._dispatch_mode.__enter__()
        if function:
            self._function_mode.__enter__()

    def _push(self, path: str) -> None:
        outer = self._location
        self._stack.append(outer)
        if not path:
            self._location = NodeLocation(path, self._types.get(path, ""), outer.chain)
            return
        self._location = _location(outer.chain, path, self._types.get(path, ""))

    def _pop(self) -> None:
        self._location = self._stack.pop() if self._stack else self._root

    # ------------------------------------------------------------------ torch functions
    def function_target(self, func: Any) -> tuple[str, Any] | None:
        """``(op, target)`` of the graph node a torch function or Tensor method call becomes, or
        None when the call has no formula of its own (its aten ops are recorded instead). Cached."""
        found = self._function_targets.get(func, _UNKNOWN)
        if found is _UNKNOWN:
            found = self._function_targets[func] = _function_target(func, self._table)
        return found  # type: ignore[return-value]

    def function(self, op: str, target: Any, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run one torch function or Tensor method (outside any module node) as one node."""
        read = self._read
        before = read() if read is not None else None
        self._open = func  # the aten ops inside are this node's
        suspended = self._suspend(False)  # (this mode is off its stack already, inside its handler)
        start = self._tick()
        try:
            out = func(*args, **kwargs)
        except Exception:
            name = target if op == "call_method" else _op_name(target)
            readable = f"Tensor.{target}" if op == "call_method" else _readable(target)
            self._failed = (f"node {self._next_name(name)!r} ({readable})", args)
            raise
        finally:
            end = self._tick()
            self._resume(suspended)
            self._open = None
        self._failed = None
        after = read() if read is not None else None
        self._add(op, target, args, kwargs, out, None, start, end, before, after)
        return out

    # ------------------------------------------------------------------ aten ops
    def op(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run one aten op (outside any module or function node) and record it."""
        read = self._read
        before = read() if read is not None else None
        start = self._tick()
        try:
            out = func(*args, **kwargs)
        except Exception:
            # for the message; the model itself sees the very same exception
            self._failed = (f"node {self._next_name(_op_name(func))!r} (aten.{_op_name(func)})", args)
            if _op_name(func) in _NEEDS_VALUES and any(isinstance(a, torch.Tensor) and a.is_meta for a in args):
                self.needs_values = True
            raise
        self._failed = None
        end = self._tick()
        after = read() if read is not None else None
        self._add("call_function", func, args, kwargs, out, None, start, end, before, after)
        return out

    # ------------------------------------------------------------------ building the graph
    def _add(self, op: str, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any,
             module: nn.Module | None, start: Any, end: Any, before: int | None, after: int | None) -> fx.Node:
        outer, self._open = self._open, _SELF  # the profiler's own tensor calls are no nodes
        try:
            return self._add_node(op, target, args, kwargs, out, module, start, end, before, after)
        finally:
            self._open = outer

    def _add_node(self, op: str, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any,
                  module: nn.Module | None, start: Any, end: Any, before: int | None, after: int | None) -> fx.Node:
        if op == "call_module":  # the graph module holds it under a flat name: no containers to build
            target = self._own(target, module)
            name = target
        else:
            name = target if op == "call_method" else _op_name(target)
        node_args = self._arg(args)  # first: a parameter read or tuple item it needs goes before it
        node_kwargs = self._arg(kwargs) if kwargs else None
        node = self.graph.create_node(op, target, name=name or None)
        # set afterwards: create_node scans non-empty arguments for SymInts, and a real run has none
        node.args = node_args
        if node_kwargs:
            node.kwargs = node_kwargs
        i = len(self.plans)
        plan = self._plan_node(node, i, module)
        self._starts[i], self._ends[i] = start, end
        self._mem_before[i], self._mem_after[i] = before, after
        self.measure(node, plan, args, kwargs, out)
        self._bind(out, node)
        if self.sequences is not None:  # the autograd nodes made so far (and not claimed) are this node's
            self.sequences.close(i)
        return node

    def _next_name(self, candidate: str) -> str:
        """The name the graph would give the next node called ``candidate`` (for messages)."""
        return self.graph._graph_namespace.create_name(candidate, None)

    def _own(self, path: str, value: Any) -> str:
        """The flat attribute name the graph module holds ``value`` (a module or tensor at
        ``path``) under: ``encoder_0`` for ``encoder.0``."""
        flat = path.replace(".", "_") or "root"
        name, n = flat, 1
        while name in self._owners and self._owners[name] is not value:
            name, n = f"{flat}_{n}", n + 1
        self._owners[name] = value
        return name

    def _plan_node(self, node: fx.Node, i: int, module: nn.Module | None,
                   location: NodeLocation | None = None) -> NodePlan:
        location = location if location is not None else self._location
        self._positions[node] = i
        self.locations[node] = location
        self.grow()
        cache_key = (node.op, type(module) if module is not None else node.target,
                     location.path if self._ignored else None, location.attribute)
        decided = self._decided.get(cache_key)
        if decided is None:
            decided = self._decided[cache_key] = decide(node, module, self._table, self._ignored, location)
        plan = build_node_plan(node, i, module, location, decided, self._positions)
        self.plans.append(plan)
        return plan

    def _quiet_node(self, node: fx.Node, value: Any, location: NodeLocation | None = None) -> None:
        """A node that runs nothing (a placeholder, a parameter read, a tuple item, the output)."""
        plan = self._plan_node(node, len(self.plans), None, location)
        self.measure(node, plan, (value,) if node.op == "output" else (), {}, value)

    def _add_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        for name, value in _named_inputs(self._model, args, kwargs):
            for suffix, leaf in _tensor_leaves(value):
                node = self.graph.placeholder(f"{name}{suffix}")
                self._quiet_node(node, leaf, self._root)
                self._bind(leaf, node)

    def _add_output(self, output: Any) -> None:
        node = self.graph.output(self._arg(output))
        self._quiet_node(node, output, self._root)

    def _bind(self, value: Any, node: fx.Node) -> None:
        if isinstance(value, torch.Tensor):
            self._values[id(value)] = (weakref.ref(value), node, None)
        elif isinstance(value, (tuple, list)):
            for k, item in enumerate(value):
                if isinstance(item, torch.Tensor):
                    self._values[id(item)] = (weakref.ref(item), node, k)

    def _arg(self, value: Any) -> Any:
        """``value`` with every tensor replaced by the node it comes from."""
        if isinstance(value, torch.Tensor):
            return self._node_of(value)
        if isinstance(value, (tuple, list)):
            mapped = [self._arg(v) for v in value]
            return tuple(mapped) if isinstance(value, tuple) else mapped
        if isinstance(value, dict):
            return {k: self._arg(v) for k, v in value.items()}
        return value

    def _node_of(self, t: torch.Tensor) -> fx.Node:
        entry = self._values.get(id(t))
        if entry is not None and entry[0]() is t:
            node, k = entry[1], entry[2]
            return node if k is None else self._getitem(node, k, t)
        attribute = self._attrs.get(id(t))
        name = attribute
        if name is None:  # a tensor the model holds as a plain attribute, or made outside the call
            name = f"_tensor_constant{self._constants}"
            self._constants += 1
        found = self._attr_nodes.get(name)
        if found is None:
            found = self._attr_nodes[name] = self.graph.get_attr(self._own(name, t))
            self._quiet_node(found, t, NodeLocation("", self._root.module_type, (), attribute=attribute))
        node = found
        self._values[id(t)] = (weakref.ref(t), node, None)
        return node

    def _getitem(self, node: fx.Node, k: int, item: torch.Tensor) -> fx.Node:
        found: fx.Node | None = self._getitems.get((node, k))
        if found is None:
            found = self._getitems[(node, k)] = self.graph.call_function(operator.getitem, (node, k))
            self._quiet_node(found, item, self.locations[node])
            self._values[id(item)] = (weakref.ref(item), found, None)
        return found


class _Recorder(TorchDispatchMode):
    """Hands every aten op of this thread to the recording, except inside a module node."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ in a torch._dynamo guard unless this says no; the
        # guard imports torch._dynamo on first use (about a second, inside the first timed node)
        # and costs microseconds on every op. Nothing here is compiled.
        return False

    def __init__(self, recording: EagerRecording) -> None:
        super().__init__()
        self.recording = recording

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        recording = self.recording
        if recording.backward_counter is not None and graph_task() != -1:
            return recording.backward_counter.op(func, args, kwargs or {})  # run by autograd: a backward op
        if recording._open is not None or func.namespace == "profiler":  # inside a module node; a
            return func(*args, **(kwargs or {}))  # record_function marker of the autograd profiler
        return recording.op(func, args, kwargs or {})


class _Functions(TorchFunctionMode):
    """Hands every torch function and Tensor method call of this thread with a formula of its own
    (``torch.relu``, ``F.scaled_dot_product_attention``, ``x.view``, ``x[i]``) to the recording,
    as one node: counted as the fx graph counts it, the same on every device (the aten ops under
    an attention call differ between a CPU kernel and the math of the meta device)."""

    def __init__(self, recording: EagerRecording) -> None:
        super().__init__()
        self.recording = recording

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        recording = self.recording
        if recording._open is not None or func.__name__ == "__get__" or (  # inside a node; a property read
                recording.backward_counter is not None and graph_task() != -1):  # a backward
            return func(*args, **kwargs)
        target = recording.function_target(func)
        if target is None:
            return func(*args, **kwargs)
        return recording.function(target[0], target[1], func, args, kwargs)


class _Paused:
    """While inside: the recording records nothing (the calls run as without it)."""

    def __init__(self, recording: EagerRecording) -> None:
        self._recording = recording
        self._outer: Any = None

    def __enter__(self) -> None:
        self._outer, self._recording._open = self._recording._open, _SELF

    def __exit__(self, *exc: object) -> None:
        self._recording._open = self._outer


_UNKNOWN = object()
#: aten ops that read tensor values into Python (meta tensors have none)
_NEEDS_VALUES = frozenset({"_local_scalar_dense", "item", "is_nonzero", "equal", "nonzero", "nonzero_static",
                           "masked_select", "unique", "_unique", "_unique2", "unique_consecutive", "unique_dim",
                           "repeat_interleave", "bincount", "allclose"})
_SELF = object()  # "inside a node": the profiler's own bookkeeping
#: Tensor dunder methods that fx records as the ``operator`` function
_DUNDERS = {"__getitem__": operator.getitem, "__setitem__": operator.setitem}


def _function_target(func: Any, table: FormulaTable) -> tuple[str, Any] | None:
    name = getattr(func, "__name__", "")
    qualname = getattr(func, "__qualname__", "")
    if getattr(func, "__module__", "").startswith("torch.distributed"):
        return None  # dist.scatter is no torch.scatter: its collective is recorded at the dispatcher
    if qualname.startswith(("TensorBase.", "Tensor.")):  # a Tensor method
        if name in _DUNDERS:
            return "call_function", _DUNDERS[name]
        if table.resolve_method(name) is not None:
            return "call_method", name
        return None
    if table.resolve_function(func) is not None:
        return "call_function", func
    return None


def check_leaves(index: ModelIndex, table: FormulaTable, ignored: Iterable[str]) -> None:
    """``strict=True``, before anything runs: :class:`UnsupportedOpError` naming the modules kept
    whole (``leaf_modules``) that have no formula. Calls found without one while the model runs
    are reported after it."""
    skip = set(ignored)
    missing = [f"'{path.replace('.', '_')}' ({cls.__name__})" for path, cls in index.leaf_classes.items()
               if table.resolve_module(cls) is None and cls.__name__ not in skip and path not in skip]
    if missing:
        raise UnsupportedOpError(f"strict=True: {len(missing)} module(s) kept whole have no FLOPs formula: "
                                 f"{'; '.join(missing[:10])}{' and more' if len(missing) > 10 else ''}")


def check_call(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    """``TypeError`` naming the problem when ``model(*args, **kwargs)`` cannot bind to its forward
    (too many inputs, an unknown keyword, one given twice, a missing one), before anything runs."""
    try:
        signature = inspect.signature(model.forward)
    except (TypeError, ValueError):  # a forward without a signature: the call itself will tell
        return
    params = list(signature.parameters.values())
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names = [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if not any(p.kind is p.VAR_POSITIONAL for p in params) and len(args) > len(positional):
        raise TypeError(f"the model takes {len(positional)} input(s) ({', '.join(positional)}) but {len(args)} "
                        "positional argument(s) were given")
    for name in positional[:len(args)]:
        if name in kwargs:
            raise TypeError(f"input {name!r} given both by position and by keyword")
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        unknown = [k for k in kwargs if k not in names]
        if unknown:
            raise TypeError(f"unexpected keyword input(s) {unknown}; the model's inputs are {names}")
    given = set(positional[:len(args)]) | set(kwargs)
    for p in params:
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in given:
            raise TypeError(f"missing input {p.name!r}; the model's inputs are {names}")


@functools.lru_cache(maxsize=1 << 16)
def _location(outer: tuple[str, ...], path: str, module_type: str) -> NodeLocation:
    """The location inside module ``path`` called within the modules ``outer``: its chain has every
    dotted prefix too (an iterated ModuleList still encloses its items). A function of strings
    only, so one cache serves every model and call (layers repeat the same locations)."""
    return NodeLocation(path, module_type, module_chain((*outer, path)))


def _readable(target: Any) -> str:
    node = fx.Graph().create_node("call_function", target)
    return readable_target(node, None)


def _op_name(target: Any) -> str:
    packet = getattr(target, "overloadpacket", None)
    return getattr(packet, "__name__", None) or getattr(target, "__name__", "") or "op"


def _named_inputs(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Each argument with the forward's parameter name (``x``, ``mask``; ``args_0`` for ``*args``)."""
    try:
        bound = inspect.signature(model.forward).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return [(f"input_{i}", a) for i, a in enumerate(args)] + list(kwargs.items())
    named: list[tuple[str, Any]] = []
    for name, value in bound.arguments.items():
        kind = inspect.signature(model.forward).parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            named += [(f"{name}_{i}", v) for i, v in enumerate(value)]
        elif kind is inspect.Parameter.VAR_KEYWORD:
            named += list(value.items())
        else:
            named.append((name, value))
    return named


def _tensor_leaves(value: Any) -> list[tuple[str, torch.Tensor]]:
    """The tensors inside an argument, with a name suffix for nested ones (``_0``, ``_key``)."""
    if isinstance(value, torch.Tensor):
        return [("", value)]
    leaves, spec = _pytree.tree_flatten(value)
    tensors = [(f"_{i}", leaf) for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    return tensors if spec is not None else []

"""Runs a GraphModule node by node on real (or meta) tensors, measuring each node.

Planning (:func:`plan_graph`) resolves, once per graph, which formula every node uses, so the
per-node cost at run time is a lookup, one timer tick either side of the op, the live-tensor
update and one formula call. :class:`FlopsInterpreter` overrides ``run_node`` only; everything it
measures goes into flat per-node lists that :func:`build_records` turns into records afterwards.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import fx, nn

from torch_flops.formulas import Formula, zero_flops
from torch_flops.measure import LiveTensors, StorageEntries, Timer, storage_entries
from torch_flops.records import NodeRecord, Status

__all__ = [
    "FlopsInterpreter",
    "FormulaTables",
    "NodeExecutionError",
    "NodePlan",
    "UnsupportedOpError",
    "UnsupportedOpWarning",
    "plan_graph",
]

# NodePlan.kind
MODULE, CALL, ZERO, IGNORED, UNSUPPORTED = range(5)


class UnsupportedOpWarning(UserWarning):
    """A graph node has no FLOPs formula (silence with ``warnings.simplefilter('ignore', ...)``)."""


class UnsupportedOpError(RuntimeError):
    """Raised instead of :class:`UnsupportedOpWarning` when ``strict=True``."""


class NodeExecutionError(RuntimeError):
    """Running one graph node failed; the message names the node and its input shapes."""


@dataclass(frozen=True)
class FormulaTables:
    """The tables one analyzer works with: its own copies, so users' later edits do not leak in."""

    modules: Mapping[str, Formula]
    functions: Mapping[str, Formula]
    methods: Mapping[str, Formula]
    aten: Mapping[Any, Formula]


class NodePlan(NamedTuple):
    position: int  # the node's place in the graph (index into the interpreter's lists)
    kind: int
    formula: Formula | None
    module: nn.Module | None
    target: str  # readable target
    key: str  # the table key looked up (class name, function name, method name, aten op)
    module_path: str
    module_type: str
    module_stack: tuple[str, ...]
    #: the graph's output depends on this node (False for checks such as export's assertions)
    needed: bool = True
    #: positions of the values no later node reads once this node has run (as fx.Interpreter
    #: frees them), and this node's own when nothing reads its value
    frees: tuple[int, ...] = ()
    #: whether the node's value is held by the graph (every node but the output)
    holds: bool = True


def readable_target(node: fx.Node, gm: fx.GraphModule) -> str:
    """``Linear``, ``torch.relu``, ``F.linear``, ``operator.add``, ``Tensor.view``, ``aten.mm``."""
    if node.op == "call_module":
        return type(gm.get_submodule(node.target)).__name__  # type: ignore[arg-type]
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    if node.op == "call_function":
        target = node.target
        if isinstance(target, torch._ops.OpOverload):
            return f"aten.{target.overloadpacket.__name__}" if target.namespace == "aten" else str(target)
        if isinstance(target, torch._ops.OpOverloadPacket):
            return str(target)
        name = getattr(target, "__name__", str(target))
        module = getattr(target, "__module__", None)
        if module in (None, "torch", "torch._C._VariableFunctions", "torch.functional"):
            return f"torch.{name}"
        if module in ("torch._C._nn", "torch.nn.functional"):
            return f"F.{name}"
        if module in ("_operator", "operator"):
            return f"operator.{name}"
        if module == "builtins":
            return name
        return f"{module}.{name}"
    return str(node.target)


def _table_key(node: fx.Node, gm: fx.GraphModule) -> str:
    if node.op == "call_module":
        return type(gm.get_submodule(node.target)).__name__  # type: ignore[arg-type]
    if node.op == "call_method":
        return str(node.target)
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return str(target.overloadpacket)
    return getattr(target, "__name__", str(target))


def _lookup_module(cls: type, table: Mapping[str, Formula]) -> Formula | None:
    # MRO fallback: a subclass of nn.Linear is counted as a Linear unless it has its own entry.
    for klass in cls.__mro__:
        formula = table.get(klass.__name__)
        if formula is not None:
            return formula
        if klass is nn.Module:
            break
    return None


def module_location(node: fx.Node, prefix: str = "") -> tuple[str, tuple[str, ...]]:
    """The innermost owning module path and every enclosing path (outermost first).

    ``prefix`` (a wrapper's attribute name, see ``tracing.EXPORT_ROOT``) is removed from paths.
    """
    if node.op == "call_module" and str(node.target).startswith("_guards"):
        return "", ()  # torch.export's input guard check: part of no module
    stack = node.meta.get("nn_module_stack") or {}
    paths = [_clean_path(v[0] if isinstance(v, tuple) else k) for k, v in stack.items()]
    if prefix:
        paths = [p[len(prefix) + 1:] if p.startswith(prefix + ".") else ("" if p == prefix else p) for p in paths]
    if node.op == "call_module":
        paths.append(str(node.target))
    # Containers that are iterated rather than called (a ModuleList "h" of "h.0.attn") are not in
    # nn_module_stack: every dotted prefix is an enclosing module too, so add them all.
    chain: dict[str, None] = {}
    for path in paths:
        parts = path.split(".") if path else []
        for i in range(1, len(parts) + 1):
            chain[".".join(parts[:i])] = None
    innermost = paths[-1] if paths else ""
    return innermost, tuple(chain)


def _clean_path(path: str) -> str:
    # torch.export spells paths as "L['self'].layers[0].attn" or "layers.0.attn"; fx as "layers.0.attn"
    if "[" not in path and not path.startswith("L__self__"):
        return path
    p = path.replace("L['self']", "").replace("L__self__", "")
    for a, b in (("['", "."), ("']", ""), ("[", "."), ("]", ""), ("._modules", ""), ("_modules", "")):
        p = p.replace(a, b)
    return p.strip(".")


def plan_graph(gm: fx.GraphModule, tables: FormulaTables, ignore_ops: Iterable[str] = (),
               module_types: Mapping[str, str] | None = None, path_prefix: str = "") -> dict[fx.Node, NodePlan]:
    """Decide, for every node, which formula counts it (or why none does)."""
    ignored = set(ignore_ops)
    needed = _output_ancestors(gm.graph)
    frees = _last_uses(gm.graph)
    plans: dict[fx.Node, NodePlan] = {}
    for index, node in enumerate(gm.graph.nodes):
        module = None
        key = _table_key(node, gm) if node.op.startswith("call_") else node.op
        formula: Formula | None = None
        if node.op in ("placeholder", "get_attr", "output") or (
                node.op == "call_module" and str(node.target).startswith("_guards")):
            kind = ZERO
        else:
            if node.op == "call_module":
                module = gm.get_submodule(node.target)  # type: ignore[arg-type]
                formula = _lookup_module(type(module), tables.modules)
            elif node.op == "call_method":
                formula = tables.methods.get(key)
            elif isinstance(node.target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
                packet = getattr(node.target, "overloadpacket", node.target)
                formula = tables.aten.get(packet) or tables.aten.get(str(packet))
            else:
                formula = tables.functions.get(key)
                if formula is None and node.target is operator.getitem:
                    formula = zero_flops
            if key in ignored or (node.op == "call_module" and str(node.target) in ignored):
                kind, formula = IGNORED, None
            elif formula is None:
                kind = UNSUPPORTED
            elif formula is zero_flops:
                kind = ZERO
            else:
                kind = MODULE if node.op == "call_module" else CALL
        path, stack = module_location(node, path_prefix)
        if module is not None:
            module_type = type(module).__name__
        elif module_types is not None and path in module_types:
            module_type = module_types[path]
        else:
            module_type = _stack_type(node) if path else type(gm).__name__
        plans[node] = NodePlan(index, kind, formula, module, readable_target(node, gm), key, path,
                               module_type, stack, node in needed, frees.get(node, ()), node.op != "output")
    return plans


def _last_uses(graph: fx.Graph) -> dict[fx.Node, tuple[int, ...]]:
    """For each node, the positions of the values whose last reader it is (fx.Interpreter's own
    rule), plus its own position when nothing reads its value."""
    position = {node: i for i, node in enumerate(graph.nodes)}
    seen: set[fx.Node] = set()
    frees: dict[fx.Node, list[int]] = {}
    for node in reversed(graph.nodes):
        for parent in node.all_input_nodes:
            if parent not in seen:
                seen.add(parent)
                frees.setdefault(node, []).append(position[parent])
        if not node.users and node.op != "output":
            frees.setdefault(node, []).append(position[node])
    return {node: tuple(values) for node, values in frees.items()}


def _output_ancestors(graph: fx.Graph) -> set[fx.Node]:
    """Nodes the output depends on; the rest (e.g. runtime assertions of export) are checks."""
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    seen = {output}
    todo = [output]
    while todo:
        for parent in todo.pop().all_input_nodes:
            if parent not in seen:
                seen.add(parent)
                todo.append(parent)
    return seen


def _stack_type(node: fx.Node) -> str:
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return ""
    last = list(stack.values())[-1]
    kind = last[1] if isinstance(last, tuple) else last
    if isinstance(kind, type):
        return kind.__name__
    return str(kind).rsplit(".", 1)[-1].strip("'>")


def _describe_inputs(args: Any) -> str:
    shapes = []
    for a in args:
        if isinstance(a, torch.Tensor):
            shapes.append(f"{tuple(a.shape)} {str(a.dtype).replace('torch.', '')} on {a.device}")
        elif isinstance(a, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in a):
            shapes.append("[" + ", ".join(str(tuple(x.shape)) for x in a if isinstance(x, torch.Tensor)) + "]")
        else:
            shapes.append(repr(a) if len(repr(a)) < 40 else type(a).__name__)
    return ", ".join(shapes)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def output_shape(value: Any) -> tuple[Any, ...] | None:
    if isinstance(value, torch.Tensor):
        return tuple(value.shape)
    if isinstance(value, (tuple, list)):
        shapes = tuple(output_shape(v) for v in value)
        return shapes if any(s is not None for s in shapes) else None
    if isinstance(value, dict):
        return output_shape(tuple(value.values()))
    return None


class FlopsInterpreter(fx.Interpreter):
    """An ``fx.Interpreter`` that measures every node it runs.

    ``count=True`` runs record FLOPs, memory, output shapes and time; ``count=False`` runs (for
    ``warmup``/``repeat``) record time only. Values returned by the ``call_*`` methods are passed on
    untouched, so the graph computes exactly what the model computes.
    """

    def __init__(self, gm: fx.GraphModule, plans: Mapping[fx.Node, NodePlan], timer: Timer,
                 model_storages: frozenset[int], memory_reader: Callable[[], int] | None, strict: bool,
                 skip_unneeded_failures: bool = False) -> None:
        super().__init__(gm, garbage_collect_values=True)
        self.extra_traceback = False  # our own error names the node
        self._plans = plans
        self._timer = timer
        self._tick = timer.tick
        self._model_storages = model_storages
        self.reads_device_memory = memory_reader is not None
        self._memory_reader = memory_reader
        self._strict = strict
        n = len(plans)
        self.count = True
        self.flops: list[int | None] = [None] * n
        self.macs: list[int | None] = [None] * n
        self.starts: list[Any] = [None] * n
        self.ends: list[Any] = [None] * n
        self.mem_before: list[int | None] = [None] * n
        self.mem_after: list[int | None] = [None] * n
        self.shapes: list[Any] = [None] * n
        #: storages behind each node's value, captured during the counting run
        self.storages: list[StorageEntries] = [None] * n
        self.errors: dict[int, str] = {}
        #: nodes not run (meta tensors cannot run data-dependent ops such as item() or nonzero);
        #: only allowed for nodes the output does not depend on
        self.skipped: dict[int, str] = {}
        self._skip_unneeded = skip_unneeded_failures

    def run_node(self, n: fx.Node) -> Any:
        # The steps of fx.Interpreter.run_node (fetch args, dispatch on n.op), inlined so that the
        # fetched args also feed the formula without a second fetch. fx's _set_current_node
        # context (metadata for re-tracing through an interpreter) is left out: nothing is traced
        # here, and it cost about 2 us a node.
        plan = self._plans[n]
        i = plan.position
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        reader = self._memory_reader
        if reader is not None and self.count:
            self.mem_before[i] = reader()
        tick = self._tick
        start = tick()
        try:
            out = getattr(self, n.op)(n.target, args, kwargs)
        except Exception as e:  # noqa: BLE001  (any op failure is reported with the node that raised it)
            return self._failed(n, plan, args, e)
        end = tick()
        self.starts[i] = start
        self.ends[i] = end
        if not self.count:
            return out
        # A counting run also records memory, the output shape and the node's FLOPs.
        if reader is not None:
            self.mem_after[i] = reader()
        if plan.holds:
            self.storages[i] = storage_entries(out)
        self.shapes[i] = out.shape if type(out) is torch.Tensor else output_shape(out)
        kind = plan.kind
        if kind < ZERO:
            try:
                if kind == MODULE:
                    result = plan.formula(plan.module, out, *args, **kwargs)  # type: ignore[misc]
                else:
                    result = plan.formula(out, *args, **kwargs)  # type: ignore[misc]
                if type(result) is tuple:
                    self.flops[i] = int(result[0])
                    self.macs[i] = int(result[1])
                else:
                    self.flops[i] = int(result)  # type: ignore[arg-type]
                    self.macs[i] = 0
            except Exception as e:  # noqa: BLE001  (a broken formula marks its node unsupported, never stops the run)
                self._formula_failed(n, plan, e)
        return out

    def live_bytes(self) -> tuple[list[int], list[int]]:
        """Live tensor bytes before and after every node of the counting run, replayed in order."""
        live = LiveTensors(self._model_storages)
        plans = self._plans.values()
        return live.timeline((p.position, self.storages[p.position], p.frees) for p in plans)

    def _failed(self, n: fx.Node, plan: NodePlan, args: tuple[Any, ...], e: Exception) -> None:
        if self._skip_unneeded and not plan.needed:
            self.skipped[plan.position] = f"not run ({type(e).__name__}: {_first_line(e)}); the output does not need it"
            return
        raise NodeExecutionError(
            f"running node '{n.name}' ({plan.target}"
            f"{f' in module {plan.module_path!r}' if plan.module_path else ''}) failed "
            f"with inputs ({_describe_inputs(args)}): {type(e).__name__}: {e}\n"
            f"  node: {n.format_node()}"
        ) from e

    def _formula_failed(self, n: fx.Node, plan: NodePlan, e: Exception) -> None:
        formula = plan.formula
        message = f"formula {getattr(formula, '__qualname__', formula)} failed: {type(e).__name__}: {e}"
        if self._strict:
            raise UnsupportedOpError(f"node '{n.name}' ({plan.target}): {message}") from e
        self.errors[plan.position] = message


def build_records(plans: Mapping[fx.Node, NodePlan], interp: FlopsInterpreter,
                  times: list[float | None]) -> tuple[NodeRecord, ...]:
    records = []
    flops_of, macs_of, shapes = interp.flops, interp.macs, interp.shapes
    befores: list[int | None] | list[int]
    afters: list[int | None] | list[int]
    if interp.reads_device_memory:
        befores, afters = interp.mem_before, interp.mem_after
    else:
        befores, afters = interp.live_bytes()
    errors, skipped = interp.errors, interp.skipped
    counted, zero, ignored, unsupported = Status.COUNTED, Status.ZERO, Status.IGNORED, Status.UNSUPPORTED
    for node, plan in plans.items():
        i = plan.position
        note = ""
        kind = plan.kind
        if kind == UNSUPPORTED:
            status, flops, macs = unsupported, None, None
            note = f"no formula for {plan.key!r}"
        elif i in errors:
            status, flops, macs = unsupported, None, None
            note = errors[i]
        elif i in skipped:
            status, flops, macs = zero, 0, 0
            note = skipped[i]
        elif kind == IGNORED:
            status, flops, macs = ignored, 0, 0
        elif kind == ZERO:
            status, flops, macs = zero, 0, 0
        else:
            status, flops, macs = counted, flops_of[i], macs_of[i]
        before, after = befores[i], afters[i]
        shape = shapes[i]
        records.append(NodeRecord(
            i, node.name, node.op, plan.target, plan.module_path, plan.module_type, flops, macs, status, times[i],
            before, after, (after - before) if before is not None and after is not None else None,
            tuple(shape) if type(shape) is torch.Size else shape, plan.module_stack, note,
        ))
    return tuple(records)


def warn_unsupported(plans: Mapping[fx.Node, NodePlan], interp: FlopsInterpreter) -> None:
    """One warning per unsupported target, with its node count and the nodes' names."""
    by_target: dict[str, list[tuple[str, str]]] = {}
    for node, plan in plans.items():
        if plan.kind == UNSUPPORTED:
            by_target.setdefault(plan.target, []).append((node.name, f"no formula for {plan.key!r}"))
        elif plan.position in interp.errors:
            by_target.setdefault(plan.target, []).append((node.name, interp.errors[plan.position]))
    for target, nodes in by_target.items():
        names = ", ".join(name for name, _ in nodes[:5]) + (", ..." if len(nodes) > 5 else "")
        warnings.warn(
            f"torch_flops: no FLOPs formula for {target} ({len(nodes)} node(s): {names}; {nodes[0][1]}); "
            "these nodes are excluded from the totals. Register one with torch_flops.register_function/"
            "register_method/register_module, or pass ignore_ops / strict=True.",
            UnsupportedOpWarning, stacklevel=4,
        )


def check_strict(plans: Mapping[fx.Node, NodePlan]) -> None:
    missing = [(n, p) for n, p in plans.items() if p.kind == UNSUPPORTED]
    if missing:
        listed = "; ".join(f"'{n.name}' ({p.target})" for n, p in missing[:10])
        more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
        raise UnsupportedOpError(f"strict=True: {len(missing)} node(s) have no FLOPs formula: {listed}{more}")

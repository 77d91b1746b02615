"""Plan: decide once per captured graph how every node is counted and when values die.

A :class:`Plan` is made once per graph (the counter caches it) from the capture and the counter's
formula table, so that running a node costs a lookup, a formula call and the measurements:

* which formula counts the node, or why none does (:class:`NodeKind`);
* the node's readable target and its module (:class:`~torch_flops.capture.NodeLocation`);
* whether the graph's output needs the node (nodes that are only checks may be skipped on meta);
* which values no later node reads once it has run (as ``fx.Interpreter`` frees them), for the
  live-tensor memory count.
"""

from __future__ import annotations

import enum
import functools
import itertools
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import fx, nn

from torch_flops.capture import CapturedGraph, NodeLocation
from torch_flops.comm import is_communication
from torch_flops.errors import UnsupportedOpError
from torch_flops.formulas import Formula, FormulaTable, zero_flops
from torch_flops.formulas.zero import CREATES, GATHERS, INPLACE_OPERATORS, METADATA_INPLACE, OVERWRITES, SCATTERS

__all__ = ["INTERNAL_TARGETS", "FlatArgs", "NodeKind", "NodePlan", "Plan", "RecordColumns", "Status", "Traffic", "build_node_plan", "decide",
           "finish_plan", "make_plan", "plan_node", "readable_target"]


class Status(str, enum.Enum):
    """How a node's FLOPs were obtained."""

    COUNTED = "counted"  #: a formula from the tables computed them
    ZERO = "zero"  #: 0 by definition (views, copies, placeholders, get_attr, output)
    IGNORED = "ignored"  #: the user asked to ignore this op (``ignore_ops``): 0
    UNSUPPORTED = "unsupported"  #: no formula: excluded from totals, warned about
    SKIPPED = "skipped"  #: not run on meta tensors (a check the output does not need): 0, see ``note``
    COMMUNICATION = "communication"  #: a collective: 0 FLOPs, its bytes in ``comm_bytes``

    def __str__(self) -> str:
        return self.value


#: targets of graph plumbing rather than model work: torch.export's input checks and assertions
INTERNAL_TARGETS = frozenset({
    "aten._assert_tensor_metadata", "aten._assert_scalar", "aten._assert_async", "aten.sym_constrain_range",
    "aten.sym_constrain_range_for_size", "aten._functional_assert_async", "torch._assert", "GuardsFn",
})


class NodeKind(enum.Enum):
    """How a node is counted."""

    COUNTED = "counted"  #: a formula counts it
    ZERO = "zero"  #: 0 FLOPs by definition (views, copies, placeholders, get_attr, output)
    IGNORED = "ignored"  #: the user asked to ignore it (``ignore_ops``)
    UNSUPPORTED = "unsupported"  #: no formula
    COMMUNICATION = "communication"  #: a collective (torch_flops.comm): bytes, never FLOPs


@dataclass(frozen=True, slots=True)
class NodePlan:
    """Everything about one node that does not change from run to run."""

    node: fx.Node
    position: int  #: the node's place in the graph (index into a run's per-node values)
    kind: NodeKind
    formula: Formula | None  #: called as ``formula(module, out, *args, **kwargs)`` when COUNTED
    module: nn.Module | None  #: the called module of a ``call_module`` node
    target: str  #: readable target: ``Linear``, ``torch.relu``, ``Tensor.view``, ``aten.mm``
    key: str  #: what the table was searched for (class, function, method name, aten op)
    location: NodeLocation
    #: the graph's output depends on this node (False for checks such as export's assertions)
    needed: bool
    #: positions of the values no later node reads once this node has run, and this node's own
    #: when nothing reads its value
    frees: tuple[int, ...]
    #: whether the node's value is held by the graph (every node but the output)
    holds: bool
    #: graph plumbing, not model work (a get_attr, export's guard and assertions): see records.is_internal
    internal: bool
    #: how the interpreter may fetch the node's arguments (directly when they are flat)
    flat_args: FlatArgs
    #: positions of the nodes whose values this node reads (each once)
    inputs: tuple[int, ...]
    #: how the node moves bytes (see Traffic); a module call also reads ``param_bytes``
    traffic: Traffic
    #: bytes of the parameters and buffers of a called module (a leaf module reads all of them)
    param_bytes: int
    #: the dtype of a called module's first floating parameter (its compute dtype for integer inputs)
    param_dtype: torch.dtype | None
    #: a gather or a scatter: its bytes follow from its index operands as it runs
    indexed: bool = False


class RecordColumns(NamedTuple):
    """Per node, in plan order: the record fields a plan decides (see ``Plan.record_columns``)."""

    names: list[str]
    ops: list[str]
    targets: list[str]
    paths: list[str]
    module_types: list[str]
    chains: list[tuple[str, ...]]
    kinds: list[str]  #: NodeKind values
    counted: list[bool]  #: a formula counts the node
    internal: list[bool]  #: the graph's plumbing (its time counts toward no module)
    notes: list[str]  #: why an unsupported node has no count
    #: per node, the FLOPs (and MACs) a run leaves for it unless a formula counts it: 0 by
    #: definition, None for an unsupported node (a counted node's placeholder: None)
    fills: list[int | None]
    statuses: list[Status]  #: the records' status of each node, as the plan decides it


@dataclass(frozen=True, eq=False)
class Plan:
    """The plan of one captured graph: one :class:`NodePlan` per node, in graph order."""

    graph: CapturedGraph
    nodes: tuple[NodePlan, ...]
    by_node: Mapping[fx.Node, NodePlan]
    #: ``NodePlan.frees`` of every node, by position (what the live-tensor replay walks)
    frees: tuple[tuple[int, ...], ...]

    @property
    def unsupported(self) -> tuple[NodePlan, ...]:
        return tuple(p for p in self.nodes if p.kind is NodeKind.UNSUPPORTED)

    @functools.cached_property
    def record_columns(self) -> RecordColumns:
        """What the records take from the plan alone, column by column (built once, read on every
        run): :class:`RecordColumns`."""
        nodes = self.nodes
        return RecordColumns(
            names=[p.node.name for p in nodes], ops=[p.node.op for p in nodes], targets=[p.target for p in nodes],
            paths=[p.location.path for p in nodes], module_types=[p.location.module_type for p in nodes],
            chains=[p.location.chain for p in nodes], kinds=[p.kind.value for p in nodes],
            counted=[p.formula is not None for p in nodes], internal=[p.internal for p in nodes],
            notes=[f"no formula for {p.key!r}" if p.kind is NodeKind.UNSUPPORTED else "" for p in nodes],
            fills=[None if p.formula is not None or p.kind is NodeKind.UNSUPPORTED else 0 for p in nodes],
            statuses=[Status(p.kind.value) for p in nodes])

    def check_strict(self) -> None:
        """``UnsupportedOpError`` listing the nodes without a formula, before anything runs."""
        missing = self.unsupported
        if missing:
            listed = "; ".join(f"'{p.node.name}' ({p.target})" for p in missing[:10])
            more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
            raise UnsupportedOpError(f"strict=True: {len(missing)} node(s) have no FLOPs formula: {listed}{more}")


def make_plan(graph: CapturedGraph, table: FormulaTable, ignore_ops: Iterable[str] = ()) -> Plan:
    """Decide, for every node, which formula counts it (or why none does)."""
    gm = graph.graph_module
    ignored = set(ignore_ops)
    needed = _output_ancestors(gm.graph)
    frees = _last_uses(gm.graph)
    positions = {node: i for i, node in enumerate(gm.graph.nodes)}
    nodes = [plan_node(node, position, gm.get_submodule(str(node.target)) if node.op == "call_module" else None,
                       graph.locations[node], table, ignored, positions, needed=node in needed,
                       frees=frees.get(node, ()))
             for position, node in enumerate(gm.graph.nodes)]
    return Plan(graph=graph, nodes=tuple(nodes), by_node={p.node: p for p in nodes},
                frees=tuple(p.frees for p in nodes))


def plan_node(node: fx.Node, position: int, module: nn.Module | None, location: NodeLocation, table: FormulaTable,
              ignored: set[str], positions: Mapping[fx.Node, int], *, needed: bool = True,
              frees: tuple[int, ...] = ()) -> NodePlan:
    """One node's plan (``module``: the module a ``call_module`` node calls). ``needed`` and
    ``frees`` need the whole graph: :func:`finish_plan` fills them in for a graph built node by node."""
    return build_node_plan(node, position, module, location, decide(node, module, table, ignored, location),
                           positions, needed=needed, frees=frees)


def decide(node: fx.Node, module: nn.Module | None, table: FormulaTable, ignored: set[str],
           location: NodeLocation) -> tuple[str, NodeKind, Formula | None, str]:
    """What a node's target decides: (table key, kind, formula, readable target). The same for
    every node of one target (and module class, and path where ``ignored`` names paths), so the
    eager front end keeps it per target."""
    key = _table_key(node, module) if node.op.startswith("call_") else node.op
    kind, formula = _choose(node, module, key, table, ignored, location.path)
    if node.op == "get_attr" and location.attribute:
        target = location.attribute
    elif module is not None:
        target = type(module).__name__
    else:
        target = readable_target(node, None)
    return key, kind, formula, target


def build_node_plan(node: fx.Node, position: int, module: nn.Module | None, location: NodeLocation,
                    decided: tuple[str, NodeKind, Formula | None, str], positions: Mapping[fx.Node, int], *,
                    needed: bool = True, frees: tuple[int, ...] = ()) -> NodePlan:
    """A node's plan from what its target decided (:func:`decide`) and the node itself."""
    key, kind, formula, target = decided
    traffic = _traffic(node, key, module)
    return NodePlan(
        node=node, position=position, kind=kind, formula=formula, module=module, target=target, key=key,
        location=location, needed=needed, frees=frees, holds=node.op != "output",
        internal=node.op == "get_attr" or target in INTERNAL_TARGETS or (node.op == "call_module" and
                                                                 node.name.startswith("_guards")),
        flat_args=_flat_args(node), inputs=tuple(dict.fromkeys(positions[a] for a in node.all_input_nodes)),
        traffic=traffic, param_bytes=_param_bytes(module), param_dtype=_param_dtype(module),
        indexed=traffic is Traffic.GATHER or traffic is Traffic.SCATTER,
    )


def finish_plan(graph: CapturedGraph, nodes: Sequence[NodePlan]) -> Plan:
    """The plan of a graph whose nodes were planned one by one as it was built (the eager front
    end): which nodes the output needs and each value's last use, from the finished graph."""
    fx_graph = graph.graph_module.graph
    needed = _output_ancestors(fx_graph)
    frees = _last_uses(fx_graph)
    for p in nodes:  # plans nobody else holds yet: filled in place (a replace() each cost ~7 us)
        object.__setattr__(p, "needed", p.node in needed)
        object.__setattr__(p, "frees", frees.get(p.node, ()))
    return Plan(graph=graph, nodes=tuple(nodes), by_node={p.node: p for p in nodes},
                frees=tuple(p.frees for p in nodes))


class Traffic(enum.Enum):
    """How a node moves memory (the bytes of the roofline model; counted by the interpreter).

    DEFAULT: it reads every input tensor once (a module call: also its parameters and buffers) and
    writes its output; in place, it reads and writes the same storage; a 0-FLOP node whose output
    is a view of (or is) an input moves nothing, a copy (``contiguous`` of a strided tensor,
    ``cat``, ``clone``, a cast) reads and writes. INPLACE: an op that updates its first operand
    (``add_``, ``relu_``: a name ending in one ``_``) reads every input and writes the tensor,
    though its output is that input. OVERWRITE: ``copy_``, ``fill_``, ``zero_``, the random fills
    and ``x[i] = v`` (``zero.OVERWRITES``) read only their other operands and write the tensor
    (``x[i] = v``: as many bytes as ``v`` holds, 0 for a Python scalar). GATHER: an indexed read
    (``embedding``, ``index_select``, ``gather``...; ``zero.GATHERS``) reads the rows it gathers
    (its output's bytes) and its indices, not the whole table. CREATE: ``zeros``, ``randn_like``,
    ``arange``... (``zero.CREATES``) read nothing and write their output. NONE: placeholders, parameter
    reads, the output and metadata-only in-place ops (``requires_grad_``, ``unsqueeze_``...).
    SCATTER: an indexed in-place write (``index_copy_``, ``scatter_``, ``index_put_``...;
    ``zero.SCATTERS``) reads its indices and source and writes the source's elements. A counted
    node whose output is its first input's storage (dropout in eval mode returns its input) moves
    nothing unless it is in place (``inplace=True``, ``x += y``).
    """

    DEFAULT = "default"
    INPLACE = "inplace"
    OVERWRITE = "overwrite"
    GATHER = "gather"
    SCATTER = "scatter"
    CREATE = "create"
    NONE = "none"


def _traffic(node: fx.Node, key: str, module: nn.Module | None) -> Traffic:
    name = key.rpartition(".")[2] if module is None else key
    if node.op in ("placeholder", "get_attr", "output") or name in METADATA_INPLACE:
        return Traffic.NONE
    if name in OVERWRITES:
        return Traffic.OVERWRITE
    if name in SCATTERS:
        return Traffic.SCATTER
    if name in GATHERS:
        if name == "getitem" and not any(isinstance(a, fx.Node) for a in _flatten(node.args[1:])):
            return Traffic.DEFAULT  # a literal index: a view of a tensor, or an item of a tuple
        return Traffic.GATHER
    if name in CREATES:
        return Traffic.CREATE
    if (name.endswith("_") and not name.endswith("__") or name in INPLACE_OPERATORS
            or node.kwargs.get("inplace") is True or getattr(module, "inplace", False) is True):
        return Traffic.INPLACE
    return Traffic.DEFAULT


def _flatten(value: Any) -> list[Any]:
    """The leaves of nested tuples, lists and slices (an index like ``x[:, idx]``)."""
    if isinstance(value, (tuple, list)):
        return [leaf for v in value for leaf in _flatten(v)]
    if isinstance(value, slice):
        return _flatten((value.start, value.stop, value.step))
    return [value]


def _param_bytes(module: nn.Module | None) -> int:
    if module is None:
        return 0
    return sum(t.numel() * t.element_size() for t in itertools.chain(module.parameters(), module.buffers()))


def _param_dtype(module: nn.Module | None) -> torch.dtype | None:
    if module is None:
        return None
    return next((p.dtype for p in module.parameters() if p.is_floating_point() or p.is_complex()), None)


class FlatArgs(enum.Enum):
    """The shape of a node's arguments, for fetching them without fx's recursive map."""

    NODES = "nodes"  #: positional arguments only, every one a node
    NODES_AND_CONSTANTS = "nodes_and_constants"  #: positional only, nodes and plain constants
    NESTED = "nested"  #: keywords, containers, slices...: fx's own fetch


_CONSTANTS = (int, float, bool, str, type(None), torch.dtype, torch.device)


def _flat_args(node: fx.Node) -> FlatArgs:
    if not node.op.startswith("call_") or node.kwargs or not node.args:
        return FlatArgs.NESTED
    if all(type(a) is fx.Node for a in node.args):
        return FlatArgs.NODES
    if all(type(a) is fx.Node or isinstance(a, _CONSTANTS) for a in node.args):
        return FlatArgs.NODES_AND_CONSTANTS
    return FlatArgs.NESTED


def _choose(node: fx.Node, module: nn.Module | None, key: str, table: FormulaTable,
            ignored: set[str], path: str) -> tuple[NodeKind, Formula | None]:
    if node.op in ("placeholder", "get_attr", "output") or (
            node.op == "call_module" and str(node.target).startswith("_guards")):
        return NodeKind.ZERO, None
    if is_communication(node.target):
        return NodeKind.COMMUNICATION, None
    if key in ignored or (node.op == "call_module" and (str(node.target) in ignored or path in ignored)) or (
            key.startswith("aten.") and key[5:] in ignored):  # ignore_ops=("relu",) also means aten.relu
        return NodeKind.IGNORED, None
    target = node.target
    if module is not None:
        formula = table.resolve_module(type(module))
    elif node.op == "call_method":
        formula = table.resolve_method(str(target))
    elif isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        formula = table.resolve_aten(target)
    else:
        formula = table.resolve_function(target)
        if formula is None and target is operator.getitem:
            formula = zero_flops
    if formula is None:
        return NodeKind.UNSUPPORTED, None
    if formula is zero_flops:
        return NodeKind.ZERO, None
    return NodeKind.COUNTED, formula


def readable_target(node: fx.Node, gm: fx.GraphModule | None) -> str:
    """``Linear``, ``torch.relu``, ``F.linear``, ``operator.add``, ``Tensor.view``, ``aten.mm``."""
    if node.op == "call_module":
        return type(gm.get_submodule(str(node.target))).__name__ if gm is not None else str(node.target)
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


def _table_key(node: fx.Node, module: nn.Module | None) -> str:
    """The name a user gives ``ignore_ops`` (and the note of an unsupported node shows)."""
    if module is not None:
        return type(module).__name__
    if node.op == "call_method":
        return str(node.target)
    target: Any = node.target
    if isinstance(target, torch._ops.OpOverload):
        return str(target.overloadpacket)
    return getattr(target, "__name__", str(target))


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

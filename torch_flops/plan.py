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

import dataclasses
import enum
import functools
import itertools
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import fx, nn

from torch_flops.capture import CapturedGraph, NodeLocation
from torch_flops.comm import is_communication
from torch_flops.errors import UnsupportedOpError
from torch_flops.formulas import Formula, FormulaTable, zero_flops
from torch_flops.formulas.through_aten import through_aten_ops
from torch_flops.formulas.zero import CREATES, GATHERS, INPLACE_OPERATORS, METADATA_INPLACE, OVERWRITES, SCATTERS
from torch_flops.measure import functions_off

__all__ = ["INTERNAL_TARGETS", "FlatArgs", "NodeKind", "NodePlan", "NodeRef", "OpPlan", "Plan", "RecordColumns",
           "RecordedNode", "Status",
           "Traffic", "last_uses", "make_plan", "needed_nodes", "node_plan", "plan_op", "readable_op", "readable_target",
           "table_key", "traffic_of"]


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


class FlatArgs(enum.Enum):
    """The shape of a node's arguments, for fetching them without fx's recursive map."""

    NODES = "nodes"  #: positional arguments only, every one a node
    NODES_AND_CONSTANTS = "nodes_and_constants"  #: positional only, nodes and plain constants
    NESTED = "nested"  #: keywords, containers, slices...: fx's own fetch


class NodeRef:
    """A reference to the value of the node at ``position``, inside a recorded node's arguments."""

    __slots__ = ("position",)

    def __init__(self, position: int) -> None:
        self.position = position

    def __eq__(self, other: object) -> bool:  # (two recorded graphs compare equal node by node)
        return type(other) is NodeRef and other.position == self.position

    def __hash__(self) -> int:
        return hash(("NodeRef", self.position))

    def __repr__(self) -> str:
        return f"NodeRef({self.position})"


class RecordedNode:
    """A node of a graph recorded as it ran (the eager front end): what a plan and the records read
    of an ``fx.Node`` (its name, op, target and arguments, other nodes' values as
    :class:`NodeRef` s), without building one; the fx graph is built only when asked for."""

    __slots__ = ("args", "kwargs", "name", "op", "target")

    def __init__(self, name: str, op: str, target: Any, args: Any, kwargs: Any) -> None:
        self.name, self.op, self.target, self.args, self.kwargs = name, op, target, args, kwargs or {}

    def format_node(self) -> str:
        return f"%{self.name} : {self.op}[target={self.target}]"


class OpPlan(NamedTuple):
    """What a call target decides, the same for every node calling it (and, for a module, for
    every call of that module instance): the eager recorder plans each target once and measures
    its nodes with it as they run; :func:`node_plan` adds what depends on the node's place."""

    kind: NodeKind
    formula: Formula | None  #: called as ``formula(module, out, *args, **kwargs)`` when COUNTED
    module: nn.Module | None  #: the called module of a ``call_module`` node
    target: str  #: readable target: ``Linear``, ``torch.relu``, ``Tensor.view``, ``aten.mm``
    key: str  #: what the table was searched for (class, function, method name, aten op)
    call_target: Any  #: the graph node's own target (the op overload of a collective)
    #: how the node moves bytes (see Traffic); a module call also reads ``param_bytes``
    traffic: Traffic
    #: graph plumbing, not model work (a get_attr, export's guard and assertions): see records.is_internal
    internal: bool
    #: bytes of the parameters and buffers of a called module (a leaf module reads all of them)
    param_bytes: int
    #: the dtype of a called module's first floating parameter (its compute dtype for integer inputs)
    param_dtype: torch.dtype | None
    #: whether the node's value is held by the graph (every node but the output)
    holds: bool = True
    #: a gather or a scatter: its bytes follow from its index operands as it runs
    indexed: bool = False


class NodePlan(NamedTuple):
    """Everything about one node that does not change from run to run (its target's
    :class:`OpPlan`, with the node and its place in the graph)."""

    node: fx.Node | RecordedNode
    position: int  #: the node's place in the graph (index into a run's per-node values)
    kind: NodeKind
    formula: Formula | None
    module: nn.Module | None
    target: str
    key: str
    call_target: Any
    location: NodeLocation
    #: the graph's output depends on this node (False for checks such as export's assertions)
    needed: bool
    #: positions of the values no later node reads once this node has run, and this node's own
    #: when nothing reads its value
    frees: tuple[int, ...]
    holds: bool
    internal: bool
    #: how the interpreter may fetch the node's arguments (directly when they are flat)
    flat_args: FlatArgs
    #: positions of the nodes whose values this node reads (each once)
    inputs: tuple[int, ...]
    traffic: Traffic
    param_bytes: int
    param_dtype: torch.dtype | None
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

    #: the captured graph (None for a graph recorded as it ran, which is never run again)
    graph: CapturedGraph | None
    nodes: tuple[NodePlan, ...]
    by_node: Mapping[fx.Node | RecordedNode, NodePlan]
    #: ``NodePlan.frees`` of every node, by position (what the live-tensor replay walks)
    frees: tuple[tuple[int, ...], ...]

    @functools.cached_property
    def unsupported(self) -> tuple[NodePlan, ...]:
        """The nodes without a formula, in graph order."""
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

    def check_strict(self, called_as: Mapping[int, str] | None = None) -> None:
        """``UnsupportedOpError`` listing the nodes without a formula, before anything runs;
        ``called_as``: position -> the user's call an aten node ran under (``torch.inverse``)."""
        missing = self.unsupported
        if missing:
            via = called_as or {}
            listed = "; ".join(f"'{p.node.name}' ({p.target}{f', called as {via[p.position]}' if p.position in via else ''})"
                               for p in missing[:10])
            more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
            raise UnsupportedOpError(f"strict=True: {len(missing)} node(s) have no FLOPs formula: {listed}{more}")


def make_plan(graph: CapturedGraph, table: FormulaTable, ignore_ops: Iterable[str] = (),
              through_aten: bool = True) -> Plan:
    """Decide, for every node of a captured graph, which formula counts it (or why none does).
    ``through_aten``: a torch call without a formula of its own is counted by its aten ops
    (:func:`_through_aten_ops`; off under ``strict=True``, which refuses such a node before
    anything runs)."""
    gm = graph.graph_module
    ignored = set(ignore_ops)
    nodes = list(gm.graph.nodes)
    positions = {node: i for i, node in enumerate(nodes)}
    inputs = [tuple(dict.fromkeys(positions[a] for a in node.all_input_nodes)) for node in nodes]
    needed = needed_nodes(inputs, positions[next(n for n in reversed(nodes) if n.op == "output")],
                          [i for i, node in enumerate(nodes) if _writes(node)])
    frees = last_uses(inputs)
    plans = []
    for i, node in enumerate(nodes):
        module = gm.get_submodule(str(node.target)) if node.op == "call_module" else None
        op = plan_op(node.op, node.target, module, graph.locations[node], table, ignored, node.args, node.kwargs,
                     is_value=_is_node)
        if op.kind is NodeKind.UNSUPPORTED and through_aten:
            op = _through_aten_ops(op, node, module, table, ignored)
        plans.append(node_plan(op, node, i, graph.locations[node], inputs[i], needed[i], frees[i], _flat_args(node)))
    return Plan(graph=graph, nodes=tuple(plans), by_node={p.node: p for p in plans}, frees=tuple(frees))


def _writes(node: fx.Node) -> bool:
    """Whether a graph node writes into a tensor of its arguments (an aten op whose schema says so,
    ``index_put_``, ``copy_``; an in-place method or function, ``x.add_``; ``x[m] = v``): what it
    writes may be an input's or a buffer's, which the caller reads afterwards, output or not."""
    target = node.target
    if node.op == "call_function" and isinstance(target, torch._ops.OpOverload):
        return any(a.alias_info is not None and a.alias_info.is_write for a in target._schema.arguments)
    name = target if node.op == "call_method" else getattr(target, "__name__", "")
    return node.op in ("call_method", "call_function") and isinstance(name, str) and (
        target is operator.setitem or (name.endswith("_") and not name.endswith("__")))


def _through_aten_ops(op: OpPlan, node: fx.Node, module: nn.Module | None, table: FormulaTable,
                      ignored: set[str]) -> OpPlan:
    """A captured graph's call of torch's without a formula (a torch function, a Tensor method, a
    torch.nn module without parameters or buffers kept as a leaf, a composite aten op export
    keeps): counted as the eager front end counts it, by the aten ops it runs
    (:func:`through_aten_ops`, which refuses at run time a call on no tensor or on an object that
    is not one); ``torch.cond`` by the branch its predicate picks. The others (a user's own function
    or module, while_loop) stay unsupported."""
    target = node.target
    if target is torch.ops.higher_order.cond:  # the branch its predicate picks, as the kernel runs it
        def cond(_: Any, pred: Any, true_fn: Any, false_fn: Any, operands: Any) -> Any:
            return (true_fn if pred else false_fn)(*operands)
        return op._replace(kind=NodeKind.COUNTED, formula=through_aten_ops(table, cond, op.key, ignored, real=0))
    if isinstance(target, torch._ops.HigherOrderOperator):  # (while_loop: its iterations follow from values)
        return op
    if target is torch.nn.functional.multi_head_attention_forward:
        return op  # (its attention's kernel, and count, is the real device's: on meta, the math path)
    if node.op == "call_function" and _torchs_own(target):
        def call(_: Any, *args: Any, **kwargs: Any) -> Any:  # (torch's own: a user's function is never run twice)
            return target(*args, **kwargs)  # type: ignore[operator]
    elif node.op == "call_method":
        def call(_: Any, *args: Any, **kwargs: Any) -> Any:
            return getattr(args[0], str(target))(*args[1:], **kwargs)
    elif (node.op == "call_module" and module is not None and type(module).__module__.startswith("torch.nn.")
          and next(itertools.chain(module.parameters(), module.buffers()), None) is None):
        def call(_: Any, *args: Any, **kwargs: Any) -> Any:
            return type(module).forward(module, *args, **kwargs)  # (its forward alone: no hooks run twice)
    else:
        return op
    return op._replace(kind=NodeKind.COUNTED, formula=through_aten_ops(table, call, op.key, ignored,
                                                                      method=node.op == "call_method"))


def _torchs_own(function: Any) -> bool:
    """Whether ``function`` is torch's (its module ``torch`` or ``torch.*``: not ``torchvision`` nor
    a user's ``torchhelpers``), or an aten op."""
    module = getattr(function, "__module__", None) or ""
    return module == "torch" or module.startswith("torch.") or isinstance(function, torch._ops.OpOverload)


def node_plan(op: OpPlan, node: fx.Node | RecordedNode, position: int, location: NodeLocation, inputs: tuple[int, ...],
              needed: bool, frees: tuple[int, ...], flat_args: FlatArgs = FlatArgs.NESTED) -> NodePlan:
    """A node's plan: its target's :class:`OpPlan` at its place in the graph."""
    return NodePlan(node, position, op.kind, op.formula, op.module, op.target, op.key, op.call_target, location,
                    needed, frees, op.holds, op.internal, flat_args, inputs, op.traffic, op.param_bytes,
                    op.param_dtype, op.indexed)


@functions_off  # (reads parameters' sizes and dtypes: no mode or subclass of the user's sees them)
def plan_op(op: str, target: Any, module: nn.Module | None, location: NodeLocation, table: FormulaTable,
            ignored: set[str], args: Any = (), kwargs: Mapping[str, Any] | None = None,
            is_value: Callable[[Any], bool] | None = None) -> OpPlan:
    """What node ``op`` of ``target`` (``module``: the module a ``call_module`` node calls) decides:
    its kind and formula, readable target, traffic and parameter facts. ``args``/``kwargs`` matter
    only for the traffic of an indexing node (a tensor index gathers, a number views) and an
    ``inplace=True`` keyword; ``is_value`` says which arguments are values of other nodes."""
    key = table_key(op, target, module) if op.startswith("call_") else op
    kind, formula = _choose(op, target, module, key, table, ignored, location.path)
    if op == "get_attr" and location.attribute:
        readable = location.attribute
    elif module is not None:
        readable = type(module).__name__
    else:
        readable = readable_op(op, target)
    traffic = traffic_of(op, key, module, args, kwargs or {}, is_value or _is_tensor)
    return OpPlan(kind=kind, formula=formula, module=module, target=readable, key=key, call_target=target,
                  traffic=traffic, internal=op == "get_attr" or readable in INTERNAL_TARGETS or (
                      op == "call_module" and str(target).startswith("_guards")),
                  param_bytes=_param_bytes(module), param_dtype=_param_dtype(module), holds=op != "output",
                  indexed=traffic is Traffic.GATHER or traffic is Traffic.SCATTER)


def needed_nodes(inputs: Sequence[tuple[int, ...]], output: int, also: Iterable[int] = ()) -> list[bool]:
    """Per node, whether the output (at position ``output``), or one of the nodes ``also`` (those
    that write into a tensor: an input, a buffer), depends on it; the rest (e.g. runtime assertions
    of export) are checks."""
    needed = [False] * len(inputs)
    todo = [output, *also]
    for root in todo:
        needed[root] = True
    while todo:
        for parent in inputs[todo.pop()]:
            if not needed[parent]:
                needed[parent] = True
                todo.append(parent)
    return needed


def last_uses(inputs: Sequence[tuple[int, ...]], output: int | None = None) -> list[tuple[int, ...]]:
    """For each node, the positions of the values whose last reader it is (fx.Interpreter's own
    rule), plus its own position when nothing reads its value (the output node excepted: by
    default the last node)."""
    n = len(inputs)
    output = n - 1 if output is None else output
    read = [False] * n
    frees: list[tuple[int, ...]] = [()] * n
    for i in range(n - 1, -1, -1):
        mine = [p for p in inputs[i] if not read[p]]
        for p in mine:
            read[p] = True
        if not read[i] and i != output:
            mine.append(i)
        if mine:
            frees[i] = tuple(mine)
    return frees


def _is_node(value: Any) -> bool:
    return isinstance(value, fx.Node)


def _is_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor)


def traffic_of(op: str, key: str, module: nn.Module | None, args: Any, kwargs: Mapping[str, Any],
               is_value: Callable[[Any], bool]) -> Traffic:
    """How a node moves bytes (:class:`Traffic`), from its table key, its module and, for indexing
    and ``inplace=`` nodes, its arguments (``is_value``: an argument that is another node's value)."""
    name = key.rpartition(".")[2] if module is None else key
    if op in ("placeholder", "get_attr", "output") or name in METADATA_INPLACE:
        return Traffic.NONE
    if name in OVERWRITES:
        return Traffic.OVERWRITE
    if name in SCATTERS:
        return Traffic.SCATTER
    if name in GATHERS:
        if name == "getitem" and not any(map(is_value, _flatten(args[1:]))):
            return Traffic.DEFAULT  # a literal index: a view of a tensor, or an item of a tuple
        return Traffic.GATHER
    if name in CREATES:
        return Traffic.CREATE
    if (name.endswith("_") and not name.endswith("__") or name in INPLACE_OPERATORS
            or kwargs.get("inplace") is True or getattr(module, "inplace", False) is True):
        return Traffic.INPLACE
    return Traffic.DEFAULT


def _flatten(value: Any) -> list[Any]:
    """The leaves of nested tuples, lists and slices (an index like ``x[:, idx]``)."""
    if isinstance(value, (tuple, list)):
        return [leaf for v in value for leaf in _flatten(v)]
    if isinstance(value, slice):
        return _flatten((value.start, value.stop, value.step))
    return [value]


def _tensors(module: nn.Module) -> list[torch.Tensor]:
    """The parameters, then the buffers, of ``module`` and its submodules, each once (a module
    without submodules, most nodes', read from its own dictionaries: no walk)."""
    seen: dict[int, torch.Tensor] = {}
    if module._modules:
        for t in itertools.chain(module.parameters(), module.buffers()):
            seen.setdefault(id(t), t)
        return list(seen.values())
    for store in (module._parameters, module._buffers):
        for value in store.values():
            if value is not None:
                seen.setdefault(id(value), value)
    return list(seen.values())


def _param_bytes(module: nn.Module | None) -> int:
    if module is None:
        return 0
    return sum(t.numel() * t.element_size() for t in _tensors(module))


def _param_dtype(module: nn.Module | None) -> torch.dtype | None:
    if module is None:
        return None
    parameters = module.parameters() if module._modules else (p for p in module._parameters.values() if p is not None)
    return next((p.dtype for p in parameters if p.is_floating_point() or p.is_complex()), None)




_CONSTANTS = (int, float, bool, str, type(None), torch.dtype, torch.device)


def _flat_args(node: fx.Node) -> FlatArgs:
    if not node.op.startswith("call_") or node.kwargs or not node.args:
        return FlatArgs.NESTED
    if all(type(a) is fx.Node for a in node.args):
        return FlatArgs.NODES
    if all(type(a) is fx.Node or isinstance(a, _CONSTANTS) for a in node.args):
        return FlatArgs.NODES_AND_CONSTANTS
    return FlatArgs.NESTED


def _choose(op: str, target: Any, module: nn.Module | None, key: str, table: FormulaTable,
            ignored: set[str], path: str) -> tuple[NodeKind, Formula | None]:
    if op in ("placeholder", "get_attr", "output") or (op == "call_module" and str(target).startswith("_guards")):
        return NodeKind.ZERO, None
    if is_communication(target):
        return NodeKind.COMMUNICATION, None
    if key in ignored or (op == "call_module" and (str(target) in ignored or path in ignored)) or (
            key.startswith("aten.") and key[5:] in ignored):  # ignore_ops=("relu",) also means aten.relu
        return NodeKind.IGNORED, None
    if module is not None:
        formula = table.resolve_module(type(module))
    elif op == "call_method":
        formula = table.resolve_method(str(target))
    elif isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        formula = table.resolve_aten(target)
    else:
        formula = table.resolve_function(target)
        if formula is None and (target is operator.getitem or (isinstance(target, type) and dataclasses.is_dataclass(
                target) and op == "call_function")):  # (fx builds a dataclass the forward returns: a container)
            formula = zero_flops
    if formula is None:
        return NodeKind.UNSUPPORTED, None
    if formula is zero_flops:
        return NodeKind.ZERO, None
    return NodeKind.COUNTED, formula


def readable_target(node: fx.Node, gm: fx.GraphModule | None) -> str:
    """``Linear``, ``torch.relu``, ``F.linear``, ``operator.add``, ``Tensor.view``, ``aten.mm``."""
    if node.op == "call_module" and gm is not None:
        return type(gm.get_submodule(str(node.target))).__name__
    return readable_op(node.op, node.target)


def readable_op(op: str, target: Any) -> str:
    """:func:`readable_target` of a node ``op`` of ``target`` (a call_module's target: its path)."""
    if op == "call_method":
        return f"Tensor.{target}"
    if op == "call_function":
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
    return str(target)


def table_key(op: str, target: Any, module: nn.Module | None) -> str:
    """The name a user gives ``ignore_ops`` (and the note of an unsupported node shows)."""
    if module is not None:
        return type(module).__name__
    if op == "call_method":
        return str(target)
    if isinstance(target, torch._ops.OpOverload):
        return str(target.overloadpacket)
    return getattr(target, "__name__", str(target))

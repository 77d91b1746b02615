"""The eager recorder: the graph of what one recorded stretch of eager execution ran (one call of the
model, or a training step), built node by node as the recording (:mod:`torch_flops.session`)
hands it the calls it saw.

Only what needs the live tensors happens while the model runs: each node's target is planned once
per target (:func:`torch_flops.plan.plan_op`, cached), its inputs are looked up among the values of
earlier nodes, and it is measured (:meth:`NodeMeasurer.measure
<torch_flops.measuring.NodeMeasurer.measure>`, the interpreter's own code) and appended compactly.
The fx graph, the node plans, which nodes the output needs and when each value dies are built from
that compact list when first asked for (:attr:`EagerGraph.plan`, normally when the records are
first read), so a call whose records are never read does not pay for them.

Kinds of node: a call of a module kept whole (``call_module``), a torch function or Tensor method
with a formula of its own (``call_function``/``call_method``), an aten op (``call_function`` on the
overload), and the quiet nodes that run nothing: the model's inputs (``placeholder``), a parameter,
buffer or constant read (``get_attr``), an item of a tuple output (``getitem``) and the output.
"""

from __future__ import annotations

import inspect
import operator
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import fx, nn
from torch.fx._lazy_graph_module import _LazyGraphModule
from torch.nn.modules import module as module_hooks
from torch.utils import _pytree

from torch_flops.backward import SequenceMap
from torch_flops.capture import Capture, CapturedGraph, ModelIndex, NodeLocation
from torch_flops.errors import UnsupportedOpError
from torch_flops.formulas import FormulaTable
from torch_flops.measure import MemoryProbe, Timer, tensors_of
from torch_flops.measuring import GraphRun, NodeMeasurer, traffic_table
from torch_flops.plan import (
    NodeKind,
    NodeRef,
    OpPlan,
    Plan,
    RecordedNode,
    last_uses,
    needed_nodes,
    node_plan,
    plan_op,
    readable_op,
)
from torch_flops.progress import Progress

_COUNTED, _UNSUPPORTED = NodeKind.COUNTED, NodeKind.UNSUPPORTED
_NOT_SEEN: tuple[Any, int, Any, Any] = (None, 0, None, None)  # a node measured when it has run

__all__ = ["EagerGraph", "GraphMemo", "check_call", "check_leaves", "named_inputs", "op_name"]


class GraphMemo:
    """What the graphs of one recording keep of the last one built, for the next that repeats it
    (the decode steps of a generation, a training loop's steps): its shape (names, which nodes
    the output needs, when each value dies), a function of its name candidates and input
    positions alone, and its plan, for a graph that ran exactly the same nodes."""

    __slots__ = ("plan", "refs", "shape", "table")

    def __init__(self) -> None:
        #: NodeRef(i) at position i, made once and shared by the graphs (a reference is a position
        #: only); shared objects also make comparing two graphs' arguments an identity check
        self.refs: list[NodeRef] = []
        #: (name candidates, input positions) and (names, needed, frees)
        self.shape: tuple[Any, tuple[list[str], list[bool], list[tuple[int, ...]]]] | None = None
        #: (entries, target plans) and the plan built from them
        self.plan: tuple[list[Any], list[OpPlan], Plan] | None = None
        #: the last plan's traffic table (measuring.traffic_table: a function of the plan alone)
        self.table: tuple[Plan, Any] | None = None


class EagerGraph(NodeMeasurer):
    """The graph of one recorded stretch (see the module docstring). ``sequences``: with a backward
    to follow, which node made each autograd node (:class:`~torch_flops.backward.SequenceMap`)."""

    def __init__(self, index: ModelIndex, table: FormulaTable, ignored: Iterable[str], timer: Timer,
                 memory: MemoryProbe, sequences: SequenceMap | None = None, progress: Progress | None = None,
                 planned: dict[Any, OpPlan] | None = None, memo: GraphMemo | None = None) -> None:
        self._index = index
        self.index = index  #: the model walk this graph was recorded with
        self._table = table
        self._ignored = set(ignored)
        self._timer = timer
        self._memory = memory
        self._strict = False  # formulas that fail are recorded; strict=True raises after the call
        self.sequences = sequences
        self._attrs = index.attrs
        self._root_type = index.types.get("", type(index.model).__name__)
        self._root = NodeLocation("", self._root_type, ())
        #: per node: (op, target, location, node args, node kwargs, input positions, name candidate)
        self._entries: list[tuple[str, Any, NodeLocation, Any, Any, tuple[int, ...], str]] = []
        self._ops: list[OpPlan] = []  #: per node, its target's plan
        self.phases: list[str] = []  #: per node, the phase it ran in (see torch_flops.session)
        #: target (module, ...) -> its plan: shared by the graphs of one recording (a training or
        #: generation step repeats its targets) and of one propagate's calls
        self._planned: dict[Any, OpPlan] = {} if planned is None else planned
        self._memo = GraphMemo() if memo is None else memo  #: the last graph built: shared like ``planned``
        self._refs: list[NodeRef] = self._memo.refs  #: NodeRef(i) per position, shared (see GraphMemo)
        #: id(tensor) -> (a weak reference to it, the node that made it, its index in a tuple output)
        self._values: dict[int, tuple[weakref.ref[torch.Tensor], int, int | tuple[int, ...] | None]] = {}
        #: (node, index path) -> a tuple or list inside node's tuple output that holds tensors (an LSTM's
        #: ``(h, c)``), with weak references for its tensors (nothing kept alive): read through a getitem
        #: per level when one of its tensors is used
        self._nested: dict[tuple[int, tuple[int, ...]], Any] = {}
        #: the addresses (storage keys) of the storages recorded, each held by a weak reference until
        #: finish (see _keep_addresses); released when the graph is dropped unfinished too
        self._addresses: set[int] = set()
        self._release = weakref.finalize(self, _release_addresses, self._addresses)
        self._getitems: dict[tuple[int, int], int] = {}
        self._attr_nodes: dict[str, int] = {}
        self._owners: dict[str, Any] = {}  # what the graph module holds: called modules, parameters, constants
        self._constants = 0
        self._plan: Plan | None = None
        self._capture: Capture | None = None
        self.output_set = False
        self._unsupported = False  # a node without a formula was recorded
        #: position -> the torch function or Tensor method (without a formula of its own) an aten
        #: node ran under: the user's call, for messages
        self.called_as: dict[int, Any] = {}
        self._reads_memory = memory.read is not None
        self._progress = progress  # a live line on a terminal during a long recording (None: none)
        self._reading_phase = "forward"  #: the phase of the op whose inputs are being read (see _quiet)
        self.reset(0, [])

    @property
    def memory_source(self) -> str:
        return self._memory.source

    @property
    def n(self) -> int:
        """Nodes recorded so far."""
        return len(self._entries)

    # ------------------------------------------------------------------ adding nodes
    def add(self, op: str, target: Any, module: nn.Module | None, location: NodeLocation, phase: str,
            args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, start: Any, end: Any,
            before: int | None = None, after: int | None = None) -> None:
        """One node that ran: a module kept whole (``op="call_module"``, ``target`` its path), a torch
        function or Tensor method, or an aten op, with its real arguments and output, its timer
        marks and (CUDA) the memory before and after it."""
        inputs: list[int] = []
        # first: a parameter read or tuple item it needs goes before it (in its phase)
        self._reading_phase = phase
        node_args = self._flat(args, inputs) if type(args) is tuple else self._arg(args, inputs)
        node_kwargs = self._arg(kwargs, inputs) if kwargs else None
        if op == "call_module":  # the graph module holds it under a flat name: no containers to build
            target = self._own(target, module)
            key: Any = (module, location.path) if self._ignored else module
            name = target
        else:
            # what else a node's plan depends on besides its target: a tensor index (x[idx] gathers,
            # x[0] views) and an inplace= keyword; and, with ignore_ops naming paths, where it runs
            variant = None
            if target is operator.getitem or target is operator.setitem:
                variant = any(isinstance(a, torch.Tensor) for a in _pytree.tree_leaves(args[1:2]))
            elif kwargs and "inplace" in kwargs:
                variant = kwargs["inplace"] is True
            key = target if variant is None and not self._ignored else (op, target, location.path, variant)
            name = target if op == "call_method" else op_name(target)
        planned = self._planned.get(key)
        if planned is None:
            planned = self._planned[key] = plan_op(op, target, module, location, self._table, self._ignored,
                                                   args, kwargs)
        i = self._append(op, target, location, node_args, node_kwargs,
                         tuple(dict.fromkeys(inputs)) if len(inputs) > 1 else tuple(inputs), name, planned, phase,
                         start, end)
        if before is not None:
            self._mem_before[i], self._mem_after[i] = before, after
        self.measure(i, planned, args, kwargs, out)
        if self._seen[i][2] is not None:
            self._keep_addresses(i, out)
        self._bind(out, i)
        if self.sequences is not None:  # the autograd nodes made so far (and not claimed) are this node's
            self.sequences.close(i)
        if self._progress is not None and not i & 255:
            self._progress.nodes(i)

    def add_inputs(self, model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        """A call of the model starts: each tensor of its inputs becomes a placeholder."""
        for name, value in named_inputs(model, args, kwargs):
            for suffix, leaf in _tensor_leaves(value):
                i = self._quiet("placeholder", f"{name}{suffix}", self._root, (), leaf, f"{name}{suffix}")
                self._bind(leaf, i)

    def add_output(self, output: Any) -> None:
        """The output node: it reads the values of ``output`` (the last call's, for a training step)."""
        inputs: list[int] = []
        self._reading_phase = "forward"
        node_args = (self._arg(output, inputs),)
        self._quiet("output", "output", self._root, node_args, output, "output", tuple(dict.fromkeys(inputs)))
        self.output_set = True

    def _append(self, op: str, target: Any, location: NodeLocation, node_args: Any, node_kwargs: Any,
                inputs: tuple[int, ...], name: str, planned: OpPlan, phase: str, start: Any = None,
                end: Any = None) -> int:
        i = len(self._entries)
        self._entries.append((op, target, location, node_args, node_kwargs, inputs, name))
        self._ops.append(planned)
        self.phases.append(phase)
        refs = self._refs
        if i == len(refs):
            refs.append(NodeRef(i))
        self.flops.append(None)
        self.macs.append(None)
        self._starts.append(start)
        self._ends.append(end)
        if self._reads_memory:  # the allocator's readings (CUDA); else live-tensor memory, replayed later
            self._mem_before.append(None)
            self._mem_after.append(None)
        self._seen.append(_NOT_SEEN)
        kind = planned.kind
        if kind is not _COUNTED:  # the plan's fill: 0 by definition, None for an unsupported node
            if kind is _UNSUPPORTED:
                self._unsupported = True
            else:
                self.flops[i] = self.macs[i] = 0
        return i

    def _quiet(self, op: str, target: Any, location: NodeLocation, node_args: Any, value: Any, name: str,
               inputs: tuple[int, ...] = ()) -> int:
        """A node that runs nothing (a placeholder, a parameter read, a tuple item, the output)."""
        key = (op, target, location.attribute)
        planned = self._planned.get(key)
        if planned is None:
            planned = self._planned[key] = plan_op(op, target, None, location, self._table, self._ignored)
        # a tuple item or constant read by an op outside the model has that op's phase (an input, a
        # parameter read by the forward, the output: forward)
        phase = self._reading_phase if op in ("get_attr", "call_function") else "forward"
        i = self._append(op, target, location, node_args, None, inputs, name, planned, phase)
        self.measure(i, planned, (value,) if op == "output" else (), {}, value)
        if self._seen[i][2] is not None and op != "output":
            self._keep_addresses(i, value)
        return i

    def _keep_addresses(self, i: int, value: Any) -> None:
        """Keep the storages of node ``i``'s value from handing their addresses (their keys) on:
        a weak reference to a storage keeps its bookkeeping object, whose address is the key, from
        being freed, though its bytes are. Without it, when the model drops a value the graph still
        holds (the values of ``topk(x)[1]``), the allocator gives its address to the next storage,
        which the memory replay then counted as held already. Released by :meth:`finish`."""
        entries: Any = self._seen[i][2]
        held = self._addresses
        if type(entries[0]) is int:  # one storage: of ``value`` itself, or of its one tensor
            if entries[0] not in held:
                tensor = value if isinstance(value, torch.Tensor) else next(iter(tensors_of(value)), None)
                self._keep(entries[0], tensor)
            return
        if any(address not in held for address, _ in entries):
            for (address, _), tensor in zip(entries, tensors_of(value)):
                if address not in held:
                    self._keep(address, tensor)

    def _keep(self, address: int, tensor: torch.Tensor | None) -> None:
        try:
            storage = tensor.untyped_storage()  # type: ignore[union-attr]
        except Exception:  # noqa: BLE001  (no storage to keep: a subclass, a sparse tensor; its key is no address)
            return
        if storage._cdata == address:
            handle: Any = storage._weak_ref()  # an int: the address itself, its weak count raised
            self._addresses.add(handle)

    def _own(self, path: str, value: Any) -> str:
        """The flat attribute name the graph module holds ``value`` (a module or tensor at
        ``path``) under: ``encoder_0`` for ``encoder.0``."""
        flat = path.replace(".", "_") or "root"
        name, n = flat, 1
        while name in self._owners and self._owners[name] is not value:
            name, n = f"{flat}_{n}", n + 1
        self._owners[name] = value
        return name

    def _bind(self, value: Any, i: int) -> None:
        if isinstance(value, torch.Tensor):
            self._values[id(value)] = (weakref.ref(value), i, None)
        elif isinstance(value, (tuple, list)):
            for k, item in enumerate(value):
                if isinstance(item, torch.Tensor):
                    self._values[id(item)] = (weakref.ref(item), i, k)
                elif isinstance(item, (tuple, list)) and item:
                    self._bind_nested(item, i, (k,))

    def _bind_nested(self, value: Any, i: int, path: tuple[int, ...]) -> bool:
        """The tensors of ``value``, at ``path`` inside node ``i``'s tuple output (up to 4 levels
        deep), bound to that path; whether it holds any."""
        held = False
        for k, item in enumerate(value):
            if isinstance(item, torch.Tensor):
                self._values[id(item)] = (weakref.ref(item), i, (*path, k))
                held = True
            elif isinstance(item, (tuple, list)) and item and len(path) < 4:
                held = self._bind_nested(item, i, (*path, k)) or held
        if held:
            self._nested[(i, path)] = _weakly(value)
        return held

    def _flat(self, args: tuple[Any, ...], inputs: list[int]) -> tuple[Any, ...]:
        """:meth:`_arg` of a tuple of arguments (most nodes: tensors and plain values)."""
        mapped = []
        for a in args:
            if isinstance(a, torch.Tensor):
                i = self._node_of(a)
                inputs.append(i)
                mapped.append(self._refs[i])
            elif isinstance(a, (tuple, list, dict)):
                mapped.append(self._arg(a, inputs))
            else:
                mapped.append(a)
        return tuple(mapped)

    def _arg(self, value: Any, inputs: list[int]) -> Any:
        """``value`` with every tensor replaced by a reference to the node it comes from (whose
        position is added to ``inputs``)."""
        if isinstance(value, torch.Tensor):
            i = self._node_of(value)
            inputs.append(i)
            return self._refs[i]
        if isinstance(value, (tuple, list)):
            mapped = [self._arg(v, inputs) for v in value]
            return tuple(mapped) if isinstance(value, tuple) else mapped
        if isinstance(value, dict):
            return {k: self._arg(v, inputs) for k, v in value.items()}
        return value

    def _node_of(self, t: torch.Tensor) -> int:
        entry = self._values.get(id(t))
        if entry is not None and entry[0]() is t:
            i, k = entry[1], entry[2]
            if k is None:
                return i
            return self._getitem(i, k, t) if isinstance(k, int) else self._getitem_at(i, k, t)
        attribute = self._attrs.get(id(t))
        name = attribute
        if name is None:  # a tensor the model holds as a plain attribute, or made outside the call
            name = f"_tensor_constant{self._constants}"
            self._constants += 1
        found = self._attr_nodes.get(name)
        if found is None:
            target = self._own(name, t)
            location = NodeLocation("", self._root_type, (), attribute=attribute)
            found = self._attr_nodes[name] = self._quiet("get_attr", target, location, (), t, target)
        self._values[id(t)] = (weakref.ref(t), found, None)
        return found

    def _getitem_at(self, i: int, path: tuple[int, ...], item: torch.Tensor) -> int:
        """Item ``path`` of a tuple inside node ``i``'s tuple output: through a getitem per level."""
        node = i
        for depth in range(len(path) - 1):
            node = self._getitem(node, path[depth], _strongly(self._nested[(i, path[:depth + 1])]))
        return self._getitem(node, path[-1], item)

    def _getitem(self, i: int, k: int, item: Any) -> int:
        found = self._getitems.get((i, k))
        if found is None:
            found = self._getitems[(i, k)] = self._quiet(
                "call_function", operator.getitem, self._entries[i][2], (self._refs[i], k), item, "getitem", (i,))
            if isinstance(item, torch.Tensor):
                self._values[id(item)] = (weakref.ref(item), found, None)
        return found

    def made(self, t: torch.Tensor) -> bool:
        """Whether ``t`` is the value of a node this graph computed (not an input or a constant)."""
        entry = self._values.get(id(t))
        return entry is not None and entry[0]() is t and self._entries[entry[1]][0].startswith("call_")

    # ------------------------------------------------------------------ results
    def finish(self) -> None:
        """The recording is over (the timer has finished): the per-node lists as lists; what only
        adding nodes needs (each value's node, by the tensor's id) let go."""
        self.split_seen()
        self._seen = []
        self._values, self._getitems, self._attr_nodes, self._nested = {}, {}, {}, {}
        self._release()

    def program(self) -> list[Any]:
        """The node targets in order: two calls ran the same program when these are equal."""
        return [entry[1] for entry in self._entries]

    def next_name(self, candidate: str) -> str:
        """The name the graph will give the next node called ``candidate`` (for messages)."""
        namespace = fx.graph._Namespace()
        for entry in self._entries:
            namespace.create_name(entry[6], None)
        return namespace.create_name(candidate, None)

    @property
    def plan(self) -> Plan:
        """The plan of the recorded graph, built (once) from the compact list of nodes, without an
        fx graph (:meth:`capture` builds that, when asked for)."""
        if self._plan is None:
            self._plan = self._build()
        return self._plan

    def capture(self) -> Capture:
        """The graph of what ran, as a one-graph :class:`Capture` (front end ``"eager"``), with the
        same node names as the plan's."""
        if self._capture is None:
            self._capture = Capture(graphs=(self._fx_graph(),), front_end="eager", module_types=self._index.types,
                                    module_params=self._index.params)
        return self._capture

    def measured(self, times: list[float | None] | None = None) -> GraphRun:
        """What was recorded, frozen (``times``: per node, medians over several calls; by default
        this recording's own)."""
        phases = None if all(p == "forward" for p in self.phases) else list(self.phases)
        return self.graph_run(lambda: self.plan, 0, self.times() if times is None else times,
                              self._traffic_table, lambda: self.plan.frees, phases,
                              maybe_unsupported=self._unsupported)

    def _traffic_table(self) -> Any:
        """``traffic_table(self.plan)``, kept for the next graph with the same plan (decode steps)."""
        plan, memo = self.plan, self._memo
        if memo.table is None or memo.table[0] is not plan:
            memo.table = (plan, traffic_table(plan))
        return memo.table[1]

    def check_strict(self) -> None:
        """With ``strict=True``: :class:`UnsupportedOpError` for the nodes without a formula (with the
        user's call an aten node ran under), or the first formula that failed (its exception as the cause)."""
        self.plan.check_strict({i: readable_op("call_function", f) for i, f in self.called_as.items()})
        for i, e in self.formula_exceptions.items():
            p = self.plan.nodes[i]
            raise UnsupportedOpError(f"node '{p.node.name}' ({p.target}): {self.errors[i]}") from e

    def node_name(self, i: int) -> str:
        return self.plan.nodes[i].node.name

    def _names(self) -> list[str]:
        """Each node's name, as an fx graph names them (``add``, ``add_1``, ``_0`` for ``0``)."""
        return _names([entry[6] for entry in self._entries])

    def _build(self) -> Plan:
        entries, memo = self._entries, self._memo
        # a step that ran exactly the previous graph's nodes has its plan: the same nodes, arguments
        # and target plans
        last = memo.plan
        if last is not None and len(last[0]) == len(entries):
            try:
                same = last[1] == self._ops and last[0] == entries
            except Exception:  # noqa: BLE001  (an argument whose == is no bool, e.g. an array: not the same)
                same = False
            if same:
                return last[2]
        plan = self._new_plan()
        memo.plan = (entries, self._ops, plan)
        return plan

    def _new_plan(self) -> Plan:
        entries, memo = self._entries, self._memo
        inputs = tuple(entry[5] for entry in entries)
        key = (tuple(entry[6] for entry in entries), inputs)
        if memo.shape is None or memo.shape[0] != key:
            memo.shape = (key, (_names(key[0]), needed_nodes(inputs, len(inputs) - 1) if inputs else [],
                                last_uses(inputs)))
        names, needed, frees = memo.shape[1]
        nodes = [RecordedNode(name, op, target, node_args, node_kwargs)
                 for name, (op, target, _, node_args, node_kwargs, _, _) in zip(names, entries)]
        plans = [node_plan(op, node, i, entry[2], entry[5], needed[i], frees[i])
                 for i, (op, node, entry) in enumerate(zip(self._ops, nodes, entries))]
        return Plan(graph=None, nodes=tuple(plans), by_node={p.node: p for p in plans}, frees=tuple(frees))

    def _fx_graph(self) -> CapturedGraph:
        """The fx graph of the recorded nodes (for ``counter.graph_module``)."""
        graph = fx.Graph()
        nodes: list[fx.Node] = []

        def resolve(value: Any) -> Any:
            if type(value) is NodeRef:
                return nodes[value.position]
            if isinstance(value, (tuple, list)):
                mapped = [resolve(v) for v in value]
                return tuple(mapped) if isinstance(value, tuple) else mapped
            if isinstance(value, dict):
                return {k: resolve(v) for k, v in value.items()}
            return value

        locations: dict[fx.Node, NodeLocation] = {}
        for (op, target, location, node_args, node_kwargs, _, _), name in zip(self._entries, self._names()):
            if op == "output":
                node = graph.output(resolve(node_args[0]))
            else:
                node = graph.create_node(op, target, name=name)
                # set afterwards: create_node scans non-empty arguments for SymInts, and a real run has none
                if node_args:
                    node.args = resolve(node_args)
                if node_kwargs:
                    node.kwargs = resolve(node_kwargs)
            nodes.append(node)
            locations[node] = location
        gm = _LazyGraphModule(self._owners, graph, self._root_type)
        return CapturedGraph(graph_module=gm, locations=locations, binder=None)


def _weakly(value: Any) -> Any:
    """``value`` (a tuple or list, nested) with a weak reference in place of each tensor."""
    if isinstance(value, torch.Tensor):
        return weakref.ref(value)
    if isinstance(value, (tuple, list)):  # (a plain list or tuple: what a getitem reads is all it keeps)
        items = [_weakly(v) for v in value]
        return items if type(value) is list else tuple(items)
    return value


def _strongly(value: Any) -> Any:
    """:func:`_weakly` undone: each tensor still alive (None for one the model let go)."""
    if isinstance(value, weakref.ref):
        return value()
    if isinstance(value, (tuple, list)):
        items = [_strongly(v) for v in value]
        return items if type(value) is list else tuple(items)
    return value


def _release_addresses(addresses: set[int]) -> None:
    free = torch.UntypedStorage._free_weak_ref
    for address in addresses:
        free(address)
    addresses.clear()


def _names(candidates: Iterable[str]) -> list[str]:
    """Each node's name, as an fx graph names nodes with these name candidates, in order."""
    create = fx.graph._Namespace().create_name
    return [create(candidate, None) for candidate in candidates]


def op_name(target: Any) -> str:
    """The name a node of ``target`` is given: the op packet's or the function's name."""
    packet = getattr(target, "overloadpacket", None)
    return getattr(packet, "__name__", None) or getattr(target, "__name__", "") or "op"


def readable(op: str, target: Any) -> str:
    """The readable target of a node about to be recorded (for messages)."""
    return readable_op(op, target)


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
    """The ``TypeError`` eager PyTorch raises when ``model(*args, **kwargs)`` cannot bind to its
    forward (too many inputs, an unknown keyword, one given twice, a missing one), word for word,
    before anything runs: the call is bound to a function with the forward's own parameters and
    no body. Not checked (the call itself tells) where forward pre-hooks may change the inputs
    first, or forward is no plain Python function of the module."""
    if model._forward_pre_hooks or module_hooks._global_forward_pre_hooks:
        return
    forward = model.forward
    func = getattr(forward, "__func__", None)
    if getattr(forward, "__self__", None) is not model or not inspect.isfunction(func):
        return
    key = (func.__code__, func.__defaults__, dict(func.__kwdefaults__ or {}))  # (a copy: set in place too)
    found = _BINDERS.get(func)
    if found is None or found[0] != key:  # (a function's defaults, even its code, can be set anew)
        found = _BINDERS[func] = (key, _binder(func))
    stub = found[1]
    try:
        stub(model, *args, **kwargs)
    except TypeError as e:
        raise TypeError(*e.args) from None


#: a forward function -> (its code and defaults, a function binding the same parameters: see check_call)
_BINDERS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _binder(func: Any) -> Any:
    """A function with ``func``'s parameters (from its code: what Python binds a call by, whatever
    ``__signature__`` or ``__wrapped__`` say), its names, and no body."""
    code = func.__code__
    names = code.co_varnames
    n, n_kw = code.co_argcount, code.co_kwonlyargcount
    first_default = n - len(func.__defaults__ or ())
    params = [f"{name}=None" if k >= first_default else name for k, name in enumerate(names[:n])]
    if code.co_posonlyargcount:
        params.insert(code.co_posonlyargcount, "/")
    rest = n + n_kw
    if code.co_flags & inspect.CO_VARARGS:
        params.append(f"*{names[rest]}")
        rest += 1
    elif n_kw:
        params.append("*")
    defaults = func.__kwdefaults__ or {}
    params += [f"{name}=None" if name in defaults else name for name in names[n:n + n_kw]]
    if code.co_flags & inspect.CO_VARKEYWORDS:
        params.append(f"**{names[rest]}")
    namespace: dict[str, Any] = {}
    exec(f"def binder({', '.join(params)}):\n    pass\n", namespace)  # noqa: S102  (parameter names only)
    binder = namespace["binder"]
    binder.__name__, binder.__qualname__ = func.__name__, func.__qualname__
    return binder


def named_inputs(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Each argument with the forward's parameter name (``x``, ``mask``; ``args_0`` for ``*args``)."""
    try:
        signature = inspect.signature(model.forward)
        bound = signature.bind(*args, **kwargs)
    except (TypeError, ValueError):
        return [(f"input_{i}", a) for i, a in enumerate(args)] + list(kwargs.items())
    named: list[tuple[str, Any]] = []
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
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

"""What torch.compile makes of a model, read while it compiles: for every Dynamo frame, the FX
graphs AOTAutograd hands Inductor after its post-grad passes (the forward, and the backward when
one runs), the kernels Inductor emits for each, the post-grad nodes fused into each kernel, and the
FLOPs of every original aten op of the frame counted by our formulas.

How each piece is obtained (torch 2.13; the private names are listed here, in one place):

* **Frames.** :class:`RecordingBackend` is the ``backend=`` of a private ``torch.compile`` of the
  model (``isolate_recompiles=True``, so its cache entries never count against the user's
  recompile limit). Dynamo calls it once per frame with the frame's pre-grad FX graph, its real
  example inputs and ``gm.compile_subgraph_reason`` (a graph break: its reason and the user's stack).
  The compile id (``torch._guards.CompileContext.current_compile_id()``: frame / recompile) names
  the frame, as the profiler's ``Torch-Compiled Region: F/C`` events do.
* **Original FLOPs.** Before handing the frame to Inductor, its pre-grad graph runs once on fake
  tensors under a dispatch mode that counts every aten op with :data:`torch_flops.formulas.FORMULAS`
  (the ops eager would run: ``aten.addmm``, ``aten.gelu``, ``aten.native_layer_norm``) and keys it
  by (pre-grad node, op). The backward has no such reference (its ops exist only inside
  AOTAutograd's trace): backward kernels are counted on their decomposed post-grad nodes.
* **Post-grad graphs and kernels.** ``compile_fx(gm, inputs, inner_compile=...)`` runs AOTAutograd
  and calls our ``inner_compile`` with each graph (``is_backward`` says which); post-grad passes
  rewrite that graph module in place, so after ``compile_fx_inner`` returns it *is* the post-grad
  graph Inductor lowered. With ``config.trace.provenance_tracking_level = 1`` Inductor records,
  for every kernel it emits (``cpp_fused_*``, ``triton_*``, ``extern_kernels.addmm``,
  ``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default``) the post-grad nodes its
  scheduler nodes came from (``origins``), keyed ``"name:handle"`` with the handle counting call
  sites in emission order (``torch._inductor.debug._inductor_triton_kernel_to_post_grad_node_info``,
  private; read as the difference before and after each ``compile_fx_inner``, since the forward's
  copy in ``CompiledFxGraph.inductor_provenance_mapping_str`` is missing for a lazily compiled
  backward). Every post-grad node carries ``original_aten`` (the op it was decomposed from),
  ``from_node`` (its pre-grad node), ``seq_nr`` (the autograd node: backward nodes share their
  forward op's) and ``nn_module_stack`` (``fwd_nn_module_stack`` in the backward).
* **Module paths.** ``nn_module_stack`` names modules as Dynamo saw them (``L['self'].h[0].attn``);
  :class:`ModuleResolver` turns them into the original model's dotted paths (a frame that starts in
  a submodule after a graph break is resolved by the module types and the parameters it reads).

The FX graph cache and AOTAutograd's cache are off while compiling (a cache hit would skip the
code generation that records provenance), and ``cpp.enable_kernel_profile`` is on so that each
C++ kernel opens a profiler event named ``graph_<id>_<kernel>`` (a no-op unless a profiler runs).
Every config value is set with ``config.patch`` and restored on exit.
"""

from __future__ import annotations

import contextlib
import operator
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx, nn
from torch.utils._python_dispatch import TorchDispatchMode

from torch_flops.formulas import FormulaTable
from torch_flops.formulas.evaluate import evaluate

__all__ = ["CompiledGraph", "FrameCapture", "Kernel", "ModuleResolver", "OpCount", "PostGradNode", "RecordingBackend",
           "compile_config", "count_of", "event_name", "packet_name", "value_bytes"]


# ---------------------------------------------------------------------------------------------
# counting helpers
# ---------------------------------------------------------------------------------------------

@dataclass(slots=True)
class OpCount:
    """Summed work of some aten op calls (a formula's :class:`~torch_flops.formulas.Count` fields)."""

    flops: int = 0
    macs: int = 0
    dot_outputs: int | None = None
    mm_macs: int | None = None
    calls: int = 0
    unsupported: int = 0  #: calls without a formula (or whose formula failed): not in the sums

    def add(self, other: OpCount) -> None:
        self.flops += other.flops
        self.macs += other.macs
        self.calls += other.calls
        self.unsupported += other.unsupported
        if other.dot_outputs is not None:
            self.dot_outputs = (self.dot_outputs or 0) + other.dot_outputs
        if other.mm_macs is not None or self.mm_macs is not None:
            # None means "all MACs are matrix-kernel MACs": keep the sum exact when mixing
            self.mm_macs = (self.mm_macs if self.mm_macs is not None else self.macs - other.macs) + (
                other.mm_macs if other.mm_macs is not None else other.macs)

    def minus(self, other: OpCount) -> OpCount:
        """What ``self`` counts beyond ``other`` (for the rest of a split op)."""
        return OpCount(flops=self.flops - other.flops, macs=self.macs - other.macs, calls=0,
                       mm_macs=None if self.mm_macs is None and other.mm_macs is None else
                       (self.mm_macs if self.mm_macs is not None else self.macs)
                       - (other.mm_macs if other.mm_macs is not None else other.macs))


def count_of(formula: Any, out: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> OpCount:
    """One formula call (:func:`torch_flops.formulas.evaluate.evaluate`) as an :class:`OpCount`."""
    c = evaluate(formula, None, out, tuple(args), dict(kwargs))
    return OpCount(flops=c[0], macs=c[1], dot_outputs=c[2], mm_macs=c[3], calls=1)


def packet_name(op: Any) -> str:
    """``aten.addmm.default`` -> ``"aten.addmm"`` (the formula table's key); other targets by name."""
    if isinstance(op, torch._ops.OpOverload):
        op = op.overloadpacket
    if isinstance(op, torch._ops.OpOverloadPacket):
        return str(op)
    return getattr(op, "__name__", str(op))


def value_bytes(value: Any) -> int:
    """Bytes of the memory a (fake) tensor value spans, tuples summed: elements times item size,
    an expanded (stride 0) dimension counted once; 0 for anything that is not a tensor."""
    if isinstance(value, (tuple, list)):
        return sum(value_bytes(v) for v in value)
    if not isinstance(value, torch.Tensor):
        return 0
    try:
        if value.numel() == 0:
            return 0
        span = 1 + sum((s - 1) * abs(st) for s, st in zip(value.shape, value.stride()))
        return int(min(span, value.numel())) * value.element_size()
    except (RuntimeError, TypeError):  # symbolic sizes without a hint
        return 0


# ---------------------------------------------------------------------------------------------
# module paths
# ---------------------------------------------------------------------------------------------

_ROOT = re.compile(r"^L\['[^']*'\]")
_MODULES_ITEM = re.compile(r"\._modules\[['\"]([^'\"]*)['\"]\]")
_ITEM = re.compile(r"\[['\"]?([^'\"\]]*)['\"]?\]")


class ModuleResolver:
    """Dynamo's module names (``L['self'].h[0]``) -> the original model's dotted paths."""

    def __init__(self, model: nn.Module) -> None:
        self.types: dict[str, type] = {path: type(m) for path, m in model.named_modules(remove_duplicate=False)}
        #: parameter/buffer object id -> the module paths that own it
        self.owners: dict[int, set[str]] = {}
        for path, m in model.named_modules(remove_duplicate=False):
            for t in [*m._parameters.values(), *m._buffers.values()]:
                if t is not None:
                    self.owners.setdefault(id(t), set()).add(path)
        self._cache: dict[tuple[str, Any, frozenset[str]], str | None] = {}

    @staticmethod
    def dotted(name: str) -> str:
        """``L['self'].h[0]._modules['attn']`` -> ``h.0.attn`` (relative to the frame's root)."""
        s = _ROOT.sub("", name)
        s = _MODULES_ITEM.sub(r".\1", s)
        s = _ITEM.sub(r".\1", s)
        parts = [p for p in s.split(".") if p and p != "_orig_mod"]
        return ".".join(parts)

    def resolve(self, name: str, module_type: Any, frame_owners: frozenset[str]) -> str | None:
        """The original path of Dynamo's module ``name`` of class ``module_type`` in a frame whose
        inputs belong to the modules ``frame_owners``; None when no module (or more than one) fits."""
        key = (name, module_type, frame_owners)
        if key in self._cache:
            return self._cache[key]
        rel = self.dotted(name)
        found: str | None = None
        if rel in self.types and (module_type is None or self.types[rel] is module_type):
            found = rel
        else:
            candidates = [p for p, t in self.types.items()
                          if (module_type is None or t is module_type)
                          and (p == rel or not rel or p.endswith("." + rel))]
            if len(candidates) > 1 and frame_owners:
                near = [p for p in candidates if any(o == p or o.startswith(p + ".") for o in frame_owners)]
                candidates = near or candidates
            found = candidates[0] if len(candidates) == 1 else None
        self._cache[key] = found
        return found

    def path_of(self, node: fx.Node, frame_owners: frozenset[str]) -> str | None:
        """The innermost original module of a node ("" = the root; None: unknown)."""
        stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack")
        if not stack:
            return None
        name, module_type = list(stack.values())[-1]
        return self.resolve(str(name), module_type, frame_owners)


# ---------------------------------------------------------------------------------------------
# the pre-grad count: the frame's original aten ops on fake tensors
# ---------------------------------------------------------------------------------------------

#: (pre-grad node name or None, op packet name, "forward"/"backward")
GroupKey = tuple[str | None, str, str]


class _OpCounter(TorchDispatchMode):
    """Counts every aten op under the pre-grad node running now."""

    def __init__(self, table: FormulaTable) -> None:
        super().__init__()
        self.table = table
        self.node: str | None = None
        self.counts: dict[GroupKey, OpCount] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = self.table.resolve_aten(func)
        if formula is None and func.namespace in ("prim", "prims"):  # (prim.device, Inductor's seeds: no work)
            count = OpCount(calls=1)
        elif formula is None:
            count = OpCount(calls=1, unsupported=1)
        else:
            try:
                count = count_of(formula, out, args, kwargs)
            except Exception:  # noqa: BLE001  (a formula that fails on these values: unsupported, never fatal)
                count = OpCount(calls=1, unsupported=1)
        self.counts.setdefault((self.node, packet_name(func), "forward"), OpCount()).add(count)
        return out


class _NamedRun(fx.Interpreter):
    def __init__(self, gm: fx.GraphModule, counter: _OpCounter) -> None:
        super().__init__(gm, garbage_collect_values=True)
        self.counter = counter

    def run_node(self, n: fx.Node) -> Any:
        self.counter.node = n.name
        return super().run_node(n)


def count_pre_grad(gm: fx.GraphModule, example_inputs: Sequence[Any], table: FormulaTable
                   ) -> tuple[dict[GroupKey, OpCount], str]:
    """The frame's forward aten ops counted on fake copies of its inputs, keyed by (pre-grad node,
    op, "forward"). Returns the counts and "" or why they could not be made (then Inductor's
    post-grad nodes are counted instead)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    counter = _OpCounter(table)
    try:
        mode = FakeTensorMode(allow_non_fake_inputs=False)
        fake = [mode.from_tensor(t, static_shapes=True) if isinstance(t, torch.Tensor) else t for t in example_inputs]
        with mode, torch.no_grad(), counter:  # the forward's ops are the same with autograd on
            _NamedRun(gm, counter).run(*fake)
    except Exception as e:  # noqa: BLE001  (the graph failed on fake tensors: its post-grad nodes are counted)
        return {}, f"{type(e).__name__}: {e}"[:300]
    return counter.counts, ""


# ---------------------------------------------------------------------------------------------
# what one compile produced
# ---------------------------------------------------------------------------------------------

@dataclass(slots=True)
class Kernel:
    """One kernel call site of a compiled graph, in call order."""

    key: str  #: Inductor's provenance key, ``"name:handle"``
    name: str  #: ``cpp_fused_gelu_0``, ``extern_kernels.addmm``, ``torch.ops.aten.X.default``
    extern: bool  #: an ATen/extern kernel rather than one Inductor generated
    nodes: tuple[str, ...]  #: the post-grad nodes it computes (Inductor's ``origins``)

    @property
    def handle(self) -> int:
        tail = self.key.rpartition(":")[2]
        return int(tail) if tail.isdigit() else 0

    @property
    def target(self) -> str:
        """The record target: the kernel's name; an extern kernel under its op's name (``aten.mm``)."""
        if not self.extern:
            return self.name
        return packet_name_from_call(self.name) or self.name


def packet_name_from_call(name: str) -> str | None:
    """``extern_kernels.addmm`` -> ``aten.addmm``; ``torch.ops.aten.X.default`` -> ``aten.X``."""
    if name.startswith("extern_kernels."):
        return "aten." + name.removeprefix("extern_kernels.")
    parts = name.removeprefix("torch.ops.").split(".")
    if len(parts) >= 2 and parts[0].isidentifier():
        return f"{parts[0]}.{parts[1]}"
    return None


def event_name(kernel: Kernel, graph_id: int | None) -> str | None:
    """The profiler event a kernel opens: a generated CPU kernel ``graph_<id>_<name>`` (with
    ``cpp.enable_kernel_profile``), a Triton kernel its name, an extern kernel its ATen op
    (``aten::addmm``); None when unknown (any ATen event then matches)."""
    if not kernel.extern:
        if kernel.name.startswith("cpp") and graph_id is not None:
            return f"graph_{graph_id}_{kernel.name}"
        return kernel.name
    packet = packet_name_from_call(kernel.name)
    return None if packet is None else packet.replace(".", "::", 1)


@dataclass(slots=True)
class PostGradNode:
    """One call_function node of a post-grad graph, as the records need it."""

    name: str
    target: str  #: its op (``aten.mul``)
    original: str  #: the op it came from (``original_aten``: ``aten.gelu``)
    pre: str | None  #: the pre-grad node it came from (None: unknown)
    phase: str  #: whose work: "forward" or "backward" (a backward op the partitioner moved into the forward too)
    recompute: bool  #: a forward op the backward graph computes again
    module_path: str | None  #: the original model's module (None: unknown)
    count: OpCount | None  #: our formula on its own inputs (None: no formula, or it failed)
    out_bytes: int
    dtype: str | None
    shape: tuple[Any, ...] | None
    inputs: tuple[str, ...]  #: the nodes whose values it reads
    users: tuple[str, ...]  #: the nodes reading its value ("output" for the graph's output)
    is_view: bool


@dataclass
class CompiledGraph:
    """One graph Inductor compiled: a frame's forward or backward."""

    frame: FrameCapture
    phase: str  #: "forward" or "backward"
    graph_id: int | None  #: Inductor's graph id (the prefix of its CPU kernels' profiler events)
    nodes: dict[str, PostGradNode]  #: in graph order
    kernels: list[Kernel]  #: in call order
    input_bytes: dict[str, int]  #: placeholder name -> bytes
    compile_s: float
    source: str = ""  #: the generated wrapper (Python) code
    provenance: bool = True  #: False: Inductor recorded no kernel -> node mapping


@dataclass
class FrameCapture:
    """One Dynamo frame, as the backend saw it."""

    compile_id: str  #: "frame/recompile", as in the profiler's ``Torch-Compiled Region: F/C``
    frame_id: int | None
    frame_compile_id: int | None
    graph_break: bool  #: the frame ends at a graph break
    reason: str  #: why the frame ended (Dynamo's ``compile_subgraph_reason``)
    where: str  #: the user's code where it ended, ``file:line in function``
    pre_nodes: dict[str, str | None]  #: pre-grad node name -> module path
    counts: dict[GroupKey, OpCount]  #: the original aten ops' work (see count_pre_grad)
    count_error: str  #: why the original ops could not be counted ("" when they were)
    graph_id: int  #: id() of the pre-grad graph (the provenance of post-grad nodes points at it)
    owners: frozenset[str]  #: modules owning the frame's parameter and buffer inputs
    backend_s: float = 0.0  #: AOTAutograd + Inductor time for the forward (the backward's is its graph's)
    graphs: list[CompiledGraph] = field(default_factory=list)
    #: AOT sequence number -> pre-grad node, read off the forward graph (backward nodes carry their op's)
    sequence_owner: dict[int, str] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# the backend
# ---------------------------------------------------------------------------------------------

def _kernel_map() -> dict[str, list[str]]:
    """Inductor's record of kernels -> post-grad nodes for the compiles so far (private)."""
    from torch._inductor import debug

    mapping = getattr(debug, "_inductor_triton_kernel_to_post_grad_node_info", None)
    return mapping if isinstance(mapping, dict) else {}


@contextlib.contextmanager
def compile_config() -> Iterator[None]:
    """The Inductor/AOTAutograd settings a recorded compile needs, restored on exit."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    with inductor_config.patch({"trace.provenance_tracking_level": 1, "cpp.enable_kernel_profile": True,
                                "fx_graph_cache": False}), \
            functorch_config.patch(enable_autograd_cache=False):
        yield


class RecordingBackend:
    """A ``torch.compile`` backend: Inductor (``compile_fx`` with the given config patches), with
    every frame, graph and kernel recorded in :attr:`frames`."""

    def __init__(self, model: nn.Module, table: FormulaTable, config_patches: Mapping[str, Any] | None = None) -> None:
        self.resolver = ModuleResolver(model)
        self.table = table
        self.config_patches = dict(config_patches or {})
        self.frames: list[FrameCapture] = []
        self.by_compile_id: dict[str, FrameCapture] = {}
        self.calls = 0

    # Dynamo calls this once per frame
    def __call__(self, gm: fx.GraphModule, example_inputs: list[Any]) -> Any:
        from torch._inductor.compile_fx import compile_fx

        self.calls += 1
        compile_id = torch._guards.CompileContext.current_compile_id()
        frame_id = getattr(compile_id, "frame_id", None)
        frame_compile_id = getattr(compile_id, "frame_compile_id", None)
        reason_obj = getattr(gm, "compile_subgraph_reason", None)
        owners = frozenset(p for t in example_inputs if isinstance(t, torch.Tensor)
                           for p in self.resolver.owners.get(id(t), ()))
        pre_nodes = {n.name: self.resolver.path_of(n, owners) for n in gm.graph.nodes}
        counts, error = count_pre_grad(gm, example_inputs, self.table)  # before compile_fx's passes touch gm
        frame = FrameCapture(
            compile_id=str(compile_id) if compile_id is not None else f"?/{len(self.frames)}",
            frame_id=frame_id, frame_compile_id=frame_compile_id,
            graph_break=bool(getattr(reason_obj, "graph_break", False)),
            reason=str(getattr(reason_obj, "reason", "")), where=_where(getattr(reason_obj, "user_stack", None)),
            pre_nodes=pre_nodes, counts=counts, count_error=error, graph_id=id(gm.graph), owners=owners)
        self.frames.append(frame)
        self.by_compile_id[frame.compile_id] = frame
        start = time.perf_counter()

        def inner(graph: fx.GraphModule, inputs: Sequence[Any], **kw: Any) -> Any:
            return self._inner(frame, graph, inputs, **kw)

        compiled = compile_fx(gm, example_inputs, inner_compile=inner, config_patches=self.config_patches or None)
        frame.backend_s = time.perf_counter() - start
        return compiled

    def _inner(self, frame: FrameCapture, gm: fx.GraphModule, example_inputs: Sequence[Any], **kw: Any) -> Any:
        from torch._inductor.compile_fx import compile_fx_inner

        before = set(_kernel_map())
        start = time.perf_counter()
        out = compile_fx_inner(gm, example_inputs, **kw)
        elapsed = time.perf_counter() - start
        mapping = {k: list(v) for k, v in _kernel_map().items() if k not in before}
        phase = "backward" if kw.get("is_backward") else "forward"
        kernels = [Kernel(key=k, name=k.rpartition(":")[0] or k, extern=_is_extern(k.rpartition(":")[0] or k),
                          nodes=tuple(v)) for k, v in mapping.items()]
        kernels.sort(key=lambda k: k.handle)
        nodes = self._nodes(frame, gm, phase)
        for k in kernels:
            if k.extern and k.nodes and all(n in nodes and nodes[n].is_view for n in k.nodes):
                # Inductor's provenance can name a view of the extern kernel's result rather than the op it
                # ran ((a @ b) @ c: the first bmm named after the expand the second reads): the op the views
                # come from, as long as no other extern kernel names it
                sources = [src for n in k.nodes if (src := _view_source(nodes, n)) is not None]
                named = {n for other in kernels if other.extern and other is not k for n in other.nodes}
                if sources and not named.intersection(sources):
                    k.nodes = tuple(dict.fromkeys(sources))
        graph_id = kw.get("graph_id")
        graph = CompiledGraph(frame=frame, phase=phase, graph_id=graph_id if isinstance(graph_id, int) else None,
                              nodes=nodes, kernels=kernels,
                              input_bytes={n.name: value_bytes(n.meta.get("val")) for n in gm.graph.nodes
                                           if n.op == "placeholder"},
                              compile_s=elapsed, source=str(getattr(out, "source_code", "") or ""),
                              provenance=bool(mapping))
        frame.graphs.append(graph)
        return out

    def _nodes(self, frame: FrameCapture, gm: fx.GraphModule, phase: str) -> dict[str, PostGradNode]:
        nodes: dict[str, PostGradNode] = {}
        for n in gm.graph.nodes:
            if n.op != "call_function":
                continue
            pre = _pre_grad_name(n, frame.graph_id)
            seq = n.meta.get("seq_nr")
            if phase == "forward" and pre is not None and isinstance(seq, int) and seq >= 0:
                frame.sequence_owner.setdefault(seq, pre)
            tag = n.meta.get("partitioner_tag")
            if phase == "backward":  # the partitioner's copies of forward nodes are recompute
                recompute = tag == "is_forward" or tag is None and pre is not None
                own_backward = not recompute
            else:
                recompute = False
                own_backward = bool(n.meta.get("autograd_backward")) or tag == "is_backward"
            if own_backward and pre is None and isinstance(seq, int):
                pre = frame.sequence_owner.get(seq)
            original = n.meta.get("original_aten")
            path = self.resolver.path_of(n, frame.owners)
            if path is None and pre is not None:
                path = frame.pre_nodes.get(pre)
            val = n.meta.get("val")
            tensor = val if isinstance(val, torch.Tensor) else None
            nodes[n.name] = PostGradNode(
                name=n.name, target=packet_name(n.target),
                original=packet_name(original) if original is not None else packet_name(n.target),
                pre=pre, phase="backward" if own_backward else "forward", recompute=recompute, module_path=path,
                count=self._count(n), out_bytes=value_bytes(val),
                dtype=None if tensor is None else str(tensor.dtype).removeprefix("torch."),
                shape=None if tensor is None else tuple(int(s) if isinstance(s, int) else str(s) for s in tensor.shape),
                inputs=tuple(a.name for a in n.all_input_nodes), users=tuple(u.name for u in n.users),
                is_view=_is_view(n.target))
        return nodes

    def _count(self, n: fx.Node) -> OpCount | None:
        if not isinstance(n.target, torch._ops.OpOverload):
            return OpCount(calls=1) if n.target is operator.getitem else None
        formula = self.table.resolve_aten(n.target)
        if formula is None:
            return None

        def val(a: Any) -> Any:
            return a.meta.get("val") if isinstance(a, fx.Node) else a

        args = torch.utils._pytree.tree_map(val, n.args)
        kwargs = torch.utils._pytree.tree_map(val, n.kwargs)
        try:
            return count_of(formula, n.meta.get("val"), args, kwargs)
        except Exception:  # noqa: BLE001  (a formula failing on a decomposed node: that node is uncounted)
            return None


def _is_view(target: Any) -> bool:
    if target is operator.getitem:
        return True
    if isinstance(target, torch._ops.OpOverload):
        return bool(target.is_view)
    return False


def _view_source(nodes: Mapping[str, PostGradNode], name: str) -> str | None:
    """The node a chain of views starting at ``name`` reads (its first input, through views), or None."""
    node, seen = nodes.get(name), set()
    while node is not None and node.is_view and node.name not in seen:
        seen.add(node.name)
        node = next((nodes[i] for i in node.inputs if i in nodes), None)
    return None if node is None or node.is_view else node.name


def _is_extern(name: str) -> bool:
    return name.startswith(("extern_kernels.", "torch.ops.", "aten."))


def _pre_grad_name(node: fx.Node, graph_id: int) -> str | None:
    """The pre-grad node a post-grad node was made from (its ``from_node`` provenance)."""
    todo = list(node.meta.get("from_node") or ())
    seen = 0
    while todo and seen < 256:
        source = todo.pop(0)
        seen += 1
        if getattr(source, "graph_id", None) == graph_id:
            return str(source.name)
        todo.extend(getattr(source, "from_node", None) or ())
    return None


def _where(stack: Any) -> str:
    """``file:line in function`` of the innermost user frame of a stack summary."""
    if not stack:
        return ""
    frame = stack[-1]
    return f"{getattr(frame, 'filename', '?')}:{getattr(frame, 'lineno', '?')} in {getattr(frame, 'name', '?')}"

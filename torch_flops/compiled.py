"""torch.compile'd models: the compiled program region by region, as it runs, against eager.

:func:`profile_compiled` compiles the model (with Inductor, default options or ``compile_kwargs``;
an already compiled ``OptimizedModule`` is compiled again, privately, with the options it was
given), calls the compiled model once to compile it (untimed), and then profiles it. Its
:class:`Profile` has one record per kernel call Inductor's code makes:

* ``op``: ``"kernel"`` (a kernel Inductor generated: ``cpp_fused_*`` on CPU, ``triton_*`` on GPU),
  ``"extern_kernel"`` (an ATen kernel Inductor calls: its ``target`` is the op, ``aten.addmm``,
  ``aten._scaled_dot_product_flash_attention_for_cpu``), ``"eager"`` (an op that ran outside the
  compiled graphs: code between frames after a graph break, autograd's own nodes; counted on its
  aten ops, see below) and
  ``"overhead"`` (per phase, the call's time in no kernel: guards, Python wrappers, allocation).
* ``time_ms`` **measured**: the median over ``repeat`` calls of the kernel's profiler event
  (``torch.profiler``; on CPU the wall time of the call, with ``cpp.enable_kernel_profile`` making
  each generated C++ kernel an event; on CUDA the device time of the kernels it launched).
* ``flops``/``macs`` **counted**: the work of the original aten ops whose post-grad nodes the kernel
  computes, by our formula table, in the ``torch_flops`` convention, so that the regions add up to
  eager's count (see :mod:`torch_flops.inductor_capture`). An op whose nodes Inductor split over
  several kernels gives each kernel its own nodes' count, the rest of the op's count going to the
  kernel that computes its output. Work a kernel computes again (an elementwise producer Inductor
  inlines into several consumers, the partitioner's recomputation in the backward) is in
  ``recompute_flops``, never in ``flops``.
* ``bytes_read``/``bytes_written`` **estimated** from the post-grad graph after fusion: the tensors
  entering a kernel from outside it (graph inputs, other kernels' outputs) read once, the tensors it
  produces that something outside it uses written once, sizes from the nodes' fake values. Values
  that stay inside a fused kernel never reach memory. Caches and Inductor's buffer reuse are not
  modelled; an extern kernel reading part of a tensor is counted for the whole tensor.
* ``module_path``: the original model's module of the kernel's nodes (``nn_module_stack``); a
  kernel fusing nodes of several modules goes to their deepest common ancestor (views and work it
  recomputes do not widen it). Never spread.
* ``phase``: ``"forward"`` or ``"backward"`` (the AOTAutograd backward graph, with ``backward=True``);
  ``"loss"`` for the eager ops of ``loss_fn``.

Per frame (``CompiledProfile.frames``): its compile id, compile time, whether it ends at a graph
break and why and where, and its kernels. Ops no kernel computes (dead code Inductor removed,
constants folded) are in ``CompiledProfile.eliminated`` with their FLOPs.

The ops that run eagerly outside the compiled graphs (the code between graph breaks, a frame
Dynamo gives up on, a ``torch.compiler.disable``'d function, autograd's own nodes in the backward)
leave only profiler events, a name and a time. When Dynamo reported a graph break or a frame it did
not compile, or with ``backward=True``, they are counted in one more call, untimed and undone like
every extra call, under :class:`_EagerOps`: a ``TorchDispatchMode`` whose
``ignore_compile_internals()`` is True, so that Dynamo compiles and runs exactly as without it (its
frames, guards and cache entries are the same; it does not skip frames as it does under an
ordinary mode). The mode sees every aten op of that call with its real arguments, counts it with
the formula table (as eager's dispatch-level count would) and opens a profiler event around it. The
ops the compiled graphs run reach the mode too, but their events lie inside the graphs' events;
each eager record takes the counts of the events under its own profiler event, found by the same
walk as the timed calls' (same phase, name and occurrence), so inside and outside are told apart
by the profiler's tree, never guessed.

Why not simply count under a dispatch mode or module hooks while the compiled model runs (torch
2.13, measured): an active ``TorchDispatchMode`` makes Dynamo skip the frames (the model runs
eagerly, nothing is compiled; one with ``ignore_compile_internals()`` does not, but it is handed the
compiled graphs' own aten calls too, and its Python call per op would be in every time); a
``TorchFunctionMode`` is traced into, and each call in it Dynamo cannot trace
(``time.perf_counter_ns``) is a graph break and a warning; global module hooks make
``OptimizedModule`` warn on every call, and Dynamo graph-breaks at every hook calling something it
cannot trace (``_thread.get_ident``, ``time.perf_counter_ns``); a hook under
``torch._dynamo.disable`` is a graph break too, and one that returns early under
``torch.compiler.is_compiling()`` breaks nothing but still gets the warning. So nothing of ours is
installed while the compiled model runs: :func:`split_compiled`, :func:`compile_warmup`,
:class:`DynamoStats` and :func:`drop_stale_hook_flags` are the helpers a session uses to count on
the original module eagerly and time the compiled call on its own: ``TorchFLOPsByFX`` on a compiled
model (:class:`torch_flops.calls.CompiledFront`) and :class:`CompiledCalls`, a compiled model's calls
inside a recording (:class:`~torch_flops.training.TrainingProfiler`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import statistics
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from torch_flops import _validate
from torch_flops.backward import in_backward
from torch_flops.errors import LossError, UnsupportedOpWarning, add_note, caller_stacklevel
from torch_flops.formulas import FORMULAS, FormulaTable, zero_flops
from torch_flops.inductor_capture import (
    CompiledGraph,
    FrameCapture,
    GroupKey,
    Kernel,
    OpCount,
    PostGradNode,
    RecordingBackend,
    compile_config,
    count_of,
    event_name,
    packet_name,
)
from torch_flops.measure import input_device, tensors_of
from torch_flops.paths import ancestors, module_chain
from torch_flops.records import NodeRecord, Profile, Status
from torch_flops.report import format_bytes, format_count, format_time_ms
from torch_flops.session import Recording, compiled_code_eagerly
from torch_flops.state import ExtraRuns, LeafGrads, copy_inputs, training_flags_restored

__all__ = ["CompareRow", "CompiledCalls", "CompiledComparison", "CompiledProfile", "DynamoStats", "Eliminated",
           "FrameInfo", "GraphBreak", "Region", "backend_name", "call_facts", "call_signature",
           "check_nothing_installed", "compile_warmup",
           "drop_stale_hook_flags", "eager_call_ms", "eager_launches", "is_compiled", "mark", "profile_compiled",
           "split_compiled"]

_FWD_MARK = "torch_flops.compiled.forward"
_BWD_MARK = "torch_flops.compiled.backward"
_LOSS_MARK = "torch_flops.compiled.loss"
_PHASES = {_FWD_MARK: "forward", _LOSS_MARK: "loss", _BWD_MARK: "backward"}


# ---------------------------------------------------------------------------------------------
# helpers a session uses around a compiled model (see the module docstring)
# ---------------------------------------------------------------------------------------------

def is_compiled(model: Any) -> bool:
    """Whether ``model`` is what ``torch.compile(module)`` returns (an ``OptimizedModule``); cheap
    when Dynamo was never imported (then nothing can be compiled)."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    return eval_frame is not None and isinstance(model, eval_frame.OptimizedModule)


def split_compiled(model: nn.Module) -> tuple[nn.Module, nn.Module | None]:
    """``(original module, compiled module or None)``: count on the first (eager, module paths
    without ``_orig_mod.``), time the second with nothing of ours installed."""
    if is_compiled(model):
        return model._orig_mod, model  # type: ignore[return-value]
    return model, None


def _compile_kwargs_of(compiled: nn.Module) -> dict[str, Any]:
    """The options an ``OptimizedModule`` was compiled with (Inductor's config patches, dynamic,
    fullgraph); ``ValueError`` for another backend (its regions are not Inductor kernels)."""
    ctx = getattr(compiled, "dynamo_ctx", None)
    backend = _backend_object(compiled)
    name = getattr(backend, "compiler_name", None) or type(backend).__name__
    if name != "inductor" and type(backend).__name__ != "_TorchCompileInductorWrapper":
        raise ValueError(f"model was compiled with backend {name!r}: profile_compiled reads Inductor's kernels, "
                         "so it needs backend='inductor' (the default)")
    kwargs: dict[str, Any] = {"options": dict(getattr(backend, "config", {}) or {})}
    if getattr(ctx, "_dynamic", None) is not None:
        kwargs["dynamic"] = ctx._dynamic  # type: ignore[union-attr]
    if getattr(ctx, "fullgraph", False):
        kwargs["fullgraph"] = True
    return kwargs


@dataclass(frozen=True)
class DynamoStats:
    """A snapshot of Dynamo's counters (``torch._dynamo.utils.counters``) and compile metrics;
    ``after - before`` is what happened in between."""

    frames_total: int = 0  #: frames Dynamo was asked to convert
    frames_ok: int = 0  #: of which it compiled
    unique_graphs: int = 0  #: graphs it handed to a backend
    graph_breaks: Mapping[str, int] = field(default_factory=dict)  #: reason -> count
    compiles: int = 0  #: compile metrics recorded (one per frame compiled or recompiled)
    recompile_reasons: tuple[str, ...] = ()

    @classmethod
    def now(cls) -> DynamoStats:
        from torch._dynamo.utils import counters, get_compilation_metrics

        metrics = list(get_compilation_metrics())
        return cls(frames_total=int(counters["frames"]["total"]), frames_ok=int(counters["frames"]["ok"]),
                   unique_graphs=int(counters["stats"]["unique_graphs"]),
                   graph_breaks=dict(counters["graph_break"]), compiles=len(metrics),
                   recompile_reasons=tuple(str(m.recompile_reason) for m in metrics if m.recompile_reason))

    def __sub__(self, before: DynamoStats) -> DynamoStats:
        breaks = Counter(self.graph_breaks)
        breaks.subtract(before.graph_breaks)
        return DynamoStats(frames_total=self.frames_total - before.frames_total,
                           frames_ok=self.frames_ok - before.frames_ok,
                           unique_graphs=self.unique_graphs - before.unique_graphs,
                           graph_breaks={k: v for k, v in breaks.items() if v},
                           compiles=self.compiles - before.compiles,
                           recompile_reasons=self.recompile_reasons[len(before.recompile_reasons):])

    @property
    def total_graph_breaks(self) -> int:
        return sum(self.graph_breaks.values())


def drop_stale_hook_flags() -> None:
    """Remove the flags a removed global forward hook leaves behind. torch 2.13's
    ``register_module_forward_hook(..., with_kwargs=True)`` handle does not remove its entry of
    ``_global_forward_hooks_with_kwargs`` (only the ``always_call`` one), so after any such hook
    was removed ``_has_any_global_hook()`` stays true and every ``OptimizedModule`` call warns
    about global hooks (torch_flops' own recording session removes its entry itself; this cleans
    up after anyone's). Only entries whose hook is gone are dropped."""
    hooks = nn.modules.module
    for table in (hooks._global_forward_hooks_with_kwargs, hooks._global_forward_hooks_always_called):
        for key in [k for k in table if k not in hooks._global_forward_hooks]:
            del table[key]


def check_nothing_installed() -> None:
    """Raise when something would make the compiled call differ from the user's: a dispatch or
    function mode (Dynamo would not compile), a global module hook (a warning and graph breaks)."""
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    if _get_current_dispatch_mode_stack() or _get_current_function_mode_stack():
        raise RuntimeError("a TorchDispatchMode/TorchFunctionMode is active: Dynamo would run the compiled model "
                           "eagerly; call the compiled model outside any mode (FlopCounterMode included)")
    drop_stale_hook_flags()
    if nn.modules.module._has_any_global_hook():
        raise RuntimeError("a global module hook is registered (register_module_forward_hook & co.): "
                           "OptimizedModule warns on every call and Dynamo breaks graphs at hooks it cannot trace; "
                           "remove it before calling the compiled model")


def compile_warmup(compiled: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any],
                   calls: int = 1, *, backward: bool = False, loss_fn: Callable[[Any], Any] | None = None) -> float:
    """Call a compiled model ``calls`` times, untimed for the profile (the first call compiles), on
    copies of the inputs, with nothing of ours installed, leaving the model's buffers, gradients
    and RNG as they were; returns the first call's wall time in seconds (compile included).
    ``backward`` (under grad mode): each call also runs a backward, so that AOTAutograd compiles
    the backward graph too: ``loss_fn(output).backward()``, or without ``loss_fn`` the backward of
    every output tensor that needs a gradient, seeded with ones; every gradient it makes is put back."""
    check_nothing_installed()
    first = 0.0
    model = getattr(compiled, "_orig_mod", compiled)
    for i in range(calls):
        extra = ExtraRuns((), model) if isinstance(model, nn.Module) else None
        grads: list[LeafGrads] = []
        start = time.perf_counter()
        try:
            call_args, call_kwargs = copy_inputs((tuple(args), dict(kwargs)))
            out = compiled(*call_args, **call_kwargs)
            if backward and torch.is_grad_enabled():
                roots = [r for r in ([loss_fn(out)] if loss_fn is not None else tensors_of(out))
                         if isinstance(r, torch.Tensor) and r.requires_grad]
                grads = [LeafGrads(r) for r in roots]
                if roots:
                    torch.autograd.backward(roots, [torch.ones_like(r) for r in roots])
            if i == 0:
                first = time.perf_counter() - start
        finally:
            for saved in reversed(grads):
                saved.restore()
            if extra is not None:
                extra.undo()
    return first


def call_signature(model: nn.Module, args: Any, kwargs: Any) -> tuple[Any, ...]:
    """What decides, roughly, whether Dynamo compiles a call again: each tensor's type, shape,
    strides, dtype, device and ``requires_grad``, the other arguments' values (numbers are
    specialised), grad mode and the modules' training flags. A session warms a compiled model up
    once per signature; a compile it did not foresee shows in Dynamo's counters as a recompile."""
    first: dict[int, int] = {}

    def leaf(position: int, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            if first.setdefault(id(value), position) != position:  # the same tensor again (aliasing is guarded)
                return ("alias", first[id(value)])
            return (type(value), tuple(value.shape), value.stride() if value.layout == torch.strided else None,
                    value.dtype, value.device, value.requires_grad)
        if isinstance(value, (int, float, bool, str, type(None), torch.dtype, torch.device)):
            return value
        return (type(value), id(value))

    from torch.utils import _pytree

    leaves, spec = _pytree.tree_flatten((args, kwargs))
    return (str(spec), tuple(leaf(i, v) for i, v in enumerate(leaves)), torch.is_grad_enabled(),
            tuple(m.training for m in model.modules()))


def _backend_object(compiled: nn.Module) -> Any:
    """torch.compile's backend object of an ``OptimizedModule``, under Dynamo's debug wrappers."""
    ctx = getattr(compiled, "dynamo_ctx", None)
    backend: Any = getattr(getattr(ctx, "callback", None), "_torchdynamo_orig_backend", None)
    for _ in range(8):
        inner = getattr(backend, "_torchdynamo_orig_backend", None)
        if inner is None or inner is backend:
            break
        backend = inner
    return backend


def backend_name(compiled: nn.Module) -> str:
    """The backend a compiled model was compiled with (``"inductor"``, ``"eager"``, ...)."""
    backend = _backend_object(compiled)
    if type(backend).__name__ == "_TorchCompileInductorWrapper":
        return "inductor"
    name = getattr(backend, "compiler_name", None) or getattr(backend, "__name__", None) or type(backend).__name__
    return str(name)


# ---------------------------------------------------------------------------------------------
# a compiled model's calls inside a recording (the training profiler)
# ---------------------------------------------------------------------------------------------

@dataclass
class _Shadow:
    """One eager shadow call of the original module: its output and its leaves that need a
    gradient (the copies of the inputs), and what the compiled call's backward hands it."""

    output: Any
    leaves: list[torch.Tensor]
    #: the model's buffers and their version counters right after the shadow's forward (see
    #: CompiledCalls._shadow_backward)
    versions: list[tuple[torch.Tensor, int]] = field(default_factory=list)
    pairs: list[torch.Tensor] = field(default_factory=list)  #: shadow output tensors, by the compiled ones
    grads: list[torch.Tensor | None] = field(default_factory=list)
    #: per pair, the pairs whose compiled output was computed from its output inside the call (a
    #: loss the model computes from its logits, in a later frame): their gradient reaches it inside
    consumers: list[set[int]] = field(default_factory=list)
    queued: bool = False


@dataclass
class _Call:
    """A compiled call under way."""

    shadow: _Shadow | None
    aside: contextlib.AbstractContextManager[Any]
    sequence: int  #: autograd's sequence counter before the call: its autograd nodes are numbered from here
    start: Any = None


@dataclass
class _StepFacts:
    calls: int = 0
    forward: list[tuple[Any, Any]] = field(default_factory=list)  #: timer marks of each compiled call
    backward: list[tuple[Any, Any]] = field(default_factory=list)  #: of each compiled backward node
    compile_s: float = 0.0  #: wall time of the warm-ups that compiled
    warm_compiles: int = 0  #: graphs the warm-ups compiled


def call_facts(backend: str, *, calls: int, timing: str, forward_ms: float | None, backward_ms: float | None,
               compile_s: float, warm_compiles: int, stats: DynamoStats, nodes: str) -> dict[str, Any]:
    """A compiled model's call(s) as a profile's ``settings["compiled_call"]`` (the sessions that
    run one beside its original module's eager records). ``stats``: Dynamo's counters over the
    warm-ups and the calls; ``warm_compiles`` of them in the untimed warm-ups."""
    return {
        "backend": backend, "calls": calls, "time": timing, "forward_ms": forward_ms, "backward_ms": backward_ms,
        "compile_s": compile_s if warm_compiles else None, "compiles": stats.compiles,
        "frames_compiled": stats.frames_ok, "graph_breaks": stats.total_graph_breaks,
        "graph_break_reasons": {_first_line(k): v for k, v in stats.graph_breaks.items()},
        "recompile_reasons": [_first_line(r) for r in stats.recompile_reasons],
        # compiles the warm-ups did not foresee (a guard the call signature does not cover): in a timed span
        "compiled_in_timed_calls": max(stats.compiles - warm_compiles, 0),
        "nodes": nodes,
    }


class CompiledCalls:
    """A compiled model (``OptimizedModule``) called inside a :class:`~torch_flops.session.Recording`
    of its original module (what :class:`~torch_flops.training.TrainingProfiler` does with one).

    While started, the recording keeps its module hooks off (``OptimizedModule`` warns on every
    call while a global module hook exists); its modes stay on, recording the loop's own work
    (loss, optimizer). Each call of the compiled model, from its own forward hooks:

    1. an eager *shadow* call of the original module on copies of the inputs, recorded by the
       recording (the step's forward nodes: counts, bytes, eager times), its effects undone
       (buffers, RNG), its wall time left out of the step's duration;
    2. the first time a call signature is seen (:func:`call_signature`), a warm-up that compiles
       (forward, and under grad mode the backward), untimed, undone;
    3. the real call, with nothing of torch_flops installed: the compiled program, whose output
       and effects are the user's; timed (``forward`` marks).

    Its backward: each autograd node the compiled call created runs with the recording's modes off
    (timed: ``backward`` marks); when the gradients of the compiled outputs are known, the shadow's
    backward runs on them, recorded (the step's backward counts, per forward node) without
    accumulating into any ``.grad``, at the end of the user's ``backward()``. So the step's counts
    are eager's, its gradients, buffers and outputs the compiled program's."""

    def __init__(self, recording: Recording, compiled: nn.Module) -> None:
        original, again = split_compiled(compiled)
        if again is None:
            raise TypeError(f"CompiledCalls needs what torch.compile returns, got {type(compiled).__name__}")
        if recording.model is not original:
            raise ValueError("the recording must be of the compiled model's original module (model._orig_mod)")
        self.recording = recording
        self.compiled = compiled
        self.original = original
        self.backend = backend_name(compiled)
        self._handles: list[Any] = []
        self._graph_handles: list[Any] = []
        self._window: contextlib.AbstractContextManager[Any] | None = None
        self._thread = 0
        self._busy = False
        self._seen: set[tuple[Any, ...]] = set()
        self._call: _Call | None = None
        self._facts = _StepFacts()
        self._node_aside: list[contextlib.AbstractContextManager[Any]] = []
        self._node_start: list[Any] = []

    def start(self) -> None:
        """Hook the compiled model; the recording's module hooks off until :meth:`stop`."""
        if self._window is not None:
            raise RuntimeError("already started")
        self._thread = threading.get_ident()
        self._handles = [self.compiled.register_forward_pre_hook(self._before, with_kwargs=True),
                         self.compiled.register_forward_hook(self._after, with_kwargs=True, always_call=True)]
        self._window = self.recording.stepped_aside(modes=False, hooks=True)
        self._window.__enter__()
        self._since = DynamoStats.now()

    def stop(self) -> None:
        """Remove every hook (the compiled model's, and those on autograd graphs still alive); the
        recording's module hooks back. The facts of the step under way stay for :meth:`step_facts`."""
        for handle in self._handles + self._graph_handles:
            handle.remove()
        self._handles, self._graph_handles = [], []
        window, self._window = self._window, None
        if self._call is not None:  # stopped inside a call (it raised past its hooks)
            self._call.aside.__exit__(None, None, None)
            self._call = None
        while self._node_aside:
            self._node_aside.pop().__exit__(None, None, None)
        if window is not None:
            window.__exit__(None, None, None)

    def step_facts(self) -> dict[str, Any]:
        """The compiled calls since the last step's facts were taken (read after the recording's
        timer finished: at a step's end); the accumulators start again, and the hooks on the
        step's autograd graphs (their backward ran) are removed, letting the shadows go."""
        f, self._facts = self._facts, _StepFacts()
        now = DynamoStats.now()
        stats, self._since = now - self._since, now
        for handle in self._graph_handles:
            handle.remove()
        self._graph_handles = []
        timer = self.recording.timer
        forward = [timer.elapsed_ms(a, b) for a, b in f.forward]
        backward = [timer.elapsed_ms(a, b) for a, b in f.backward]
        return call_facts(
            self.backend, calls=f.calls, timing=f"the step's {f.calls} call(s), summed",
            forward_ms=sum(t for t in forward if t is not None) if forward and None not in forward else None,
            backward_ms=sum(t for t in backward if t is not None) if backward and None not in backward else None,
            compile_s=f.compile_s, warm_compiles=f.warm_compiles, stats=stats,
            nodes="the original module's eager shadow calls (counts, bytes, eager times); forward_ms and backward_ms: "
                  "the compiled program's (its calls, and the autograd nodes they made)")

    # ------------------------------------------------------------------ the compiled model's hooks
    def _active(self) -> bool:
        return self._window is not None and not self._busy and threading.get_ident() == self._thread

    def _before(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not self._active() or self._call is not None:
            return
        rec = self.recording
        self._busy = True
        aside = rec.stepped_aside()
        try:
            with rec.untimed():
                shadow = None if in_backward() else self._shadow(args, kwargs)
                aside.__enter__()
                try:
                    self._warm_up(args, kwargs)
                except BaseException:
                    aside.__exit__(None, None, None)
                    raise
        finally:
            self._busy = False
        self._call = _Call(shadow=shadow, aside=aside, sequence=torch.autograd._get_sequence_nr())
        self._call.start = rec.timer.tick()

    def _after(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        call = self._call
        if call is None or self._busy or threading.get_ident() != self._thread:
            return
        self._call = None
        end = self.recording.timer.tick()
        last = torch.autograd._get_sequence_nr()
        call.aside.__exit__(None, None, None)
        f = self._facts
        f.calls += 1
        f.forward.append((call.start, end))
        if call.shadow is not None and output is not None and torch.is_grad_enabled():
            self._link(call.shadow, output, call.sequence, last)

    def _shadow(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Shadow:
        """The original module called on copies of the inputs, recorded (the recording's hooks on
        for it), its effects on buffers and RNG undone."""
        rec = self.recording
        with rec.stepped_aside(modes=False, hooks=False):
            with rec.paused():
                saved = ExtraRuns(rec.index.tensors)
                call_args, call_kwargs = copy_inputs((args, kwargs))
            try:
                with compiled_code_eagerly():
                    output = self.original(*call_args, **call_kwargs)
                versions = [(t, t._version) for _, t, is_param in rec.index.tensors if not is_param]
            finally:
                with rec.paused():
                    saved.undo()
        return _Shadow(output=output, leaves=[t for t in tensors_of((call_args, call_kwargs)) if t.requires_grad],
                       versions=versions)

    def _warm_up(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Before every call, on copies, undone: the compiled forward, so that a compile for these
        inputs (a new signature, or a guard on values: a number read with ``.item()``) happens
        here, untimed; with the backward (seeded with ones) for a new signature, or when the
        forward compiled a graph, so that AOTAutograd compiles that graph's backward here too."""
        key = call_signature(self.original, args, kwargs)
        before = DynamoStats.now()
        seconds = compile_warmup(self.compiled, args, kwargs, backward=key not in self._seen)
        compiled = (DynamoStats.now() - before).compiles
        if compiled and key in self._seen and torch.is_grad_enabled():
            seconds += compile_warmup(self.compiled, args, kwargs, backward=True)
        self._seen.add(key)
        compiled = (DynamoStats.now() - before).compiles
        if compiled:
            self._facts.compile_s += seconds
            self._facts.warm_compiles += compiled

    # ------------------------------------------------------------------ the backward
    def _link(self, shadow: _Shadow, output: Any, first: int, last: int) -> None:
        """Hook the compiled output's autograd graph: its gradients go to the shadow's backward,
        and the nodes the compiled call created (numbered ``first`` to ``last``) run with nothing
        of ours installed."""
        outs, mirrors = tensors_of(output), tensors_of(shadow.output)
        if len(outs) != len(mirrors):
            return
        pairs = [(o, m) for o, m in zip(outs, mirrors)
                 if o.requires_grad and o.grad_fn is not None and m.requires_grad and o.shape == m.shape]
        if not pairs:
            return
        shadow.pairs = [m for _, m in pairs]
        shadow.grads = [None] * len(pairs)
        for i, (o, _) in enumerate(pairs):
            self._graph_handles.append(o.register_hook(functools.partial(self._grad_arrived, shadow, i)))
        inside: dict[int, Any] = {}  # the autograd nodes the call made
        edges: list[set[tuple[int, int]]] = []  # per pair, the (node, output) edges its graph uses inside the call
        for o, _ in pairs:
            used: set[tuple[int, int]] = set()
            stack, seen = [o.grad_fn], set()
            while stack:
                node = stack.pop()
                if node is None or id(node) in seen or not first <= node._sequence_nr() < last:
                    continue
                seen.add(id(node))
                inside[id(node)] = node
                for child, nr in node.next_functions:
                    if child is not None:
                        used.add((id(child), nr))
                        stack.append(child)
            edges.append(used)
        shadow.consumers = [{k for k, used in enumerate(edges) if k != i and (id(o.grad_fn), o.output_nr) in used}
                            for i, (o, _) in enumerate(pairs)]
        for node in inside.values():
            self._graph_handles += [node.register_prehook(self._node_begins), node.register_hook(self._node_ends)]

    def _node_begins(self, grad_outputs: Any) -> None:
        if self._window is None:
            return
        aside = self.recording.stepped_aside()
        aside.__enter__()
        self._node_aside.append(aside)
        self._node_start.append(self.recording.timer.tick())

    def _node_ends(self, grad_inputs: Any, grad_outputs: Any) -> None:
        if self._window is None or not self._node_aside:
            return
        end = self.recording.timer.tick()
        self._facts.backward.append((self._node_start.pop(), end))
        self._node_aside.pop().__exit__(None, None, None)

    def _grad_arrived(self, shadow: _Shadow, i: int, grad: torch.Tensor) -> None:
        if self._window is None:
            return
        shadow.grads[i] = grad
        if not shadow.queued:  # once per backward: the shadow's backward at its end, with every gradient known
            shadow.queued = True
            torch.autograd.Variable._execution_engine.queue_callback(  # type: ignore[attr-defined]
                functools.partial(self._shadow_backward, shadow))

    def _shadow_backward(self, shadow: _Shadow) -> None:
        shadow.queued = False
        grads, shadow.grads = shadow.grads, [None] * len(shadow.grads)
        if self._window is None:
            return
        # an output's gradient goes to the shadow unless outputs computed from it inside the call got
        # one: then the shadow's own backward brings it there (a gradient the loop added to it as
        # well is left out: its accumulation, one addition, is then not counted)
        known = [(m, g) for i, (m, g) in enumerate(zip(shadow.pairs, grads))
                 if g is not None and not any(grads[k] is not None for k in shadow.consumers[i])]
        inputs = [p for p in self.original.parameters() if p.requires_grad] + shadow.leaves
        if not known or not inputs:
            return
        rec = self.recording
        # the buffers the shadow saved for its backward (BatchNorm's running statistics) were written
        # in place since: put back by undo, updated by the compiled call, as the program updates them
        # in its forward. Eager's backward would find them updated by its forward, with the counter its
        # forward left: their counters are that one while the shadow's backward runs
        moved = [(t, v, t._version) for t, v in shadow.versions if t._version != v]
        set_versions = torch._C._autograd._unsafe_set_version_counter
        with rec.untimed():
            set_versions(tuple(t for t, _, _ in moved), tuple(v for _, v, _ in moved))
            try:
                rec.record_grad([m for m, _ in known], [g for _, g in known], inputs)
            finally:
                set_versions(tuple(t for t, _, _ in moved), tuple(now for _, _, now in moved))


# ---------------------------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GraphBreak:
    """Where Dynamo ended a frame before the end of the code, and why."""

    frame: str  #: compile id of the frame the break ends
    reason: str
    where: str  #: ``file:line in function`` of the user's code

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Eliminated:
    """An original aten op of a frame that no kernel computes (dead code Inductor removed, a
    constant it folded), with the FLOPs eager would spend on it."""

    frame: str
    node: str  #: the pre-grad (Dynamo) graph node it came from
    op: str
    phase: str
    flops: int
    macs: int
    module_path: str | None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class FrameInfo:
    """One Dynamo frame of the compiled program."""

    compile_id: str  #: ``frame/recompile`` (``Torch-Compiled Region: F/C`` in a profiler trace)
    graph_break: bool  #: the frame ends at a graph break (see ``reason``/``where``)
    reason: str
    where: str
    compile_s: float  #: AOTAutograd + Inductor for its forward, plus its backward's when compiled
    kernels: int  #: kernel call sites of its graphs
    graphs: tuple[str, ...]  #: the phases compiled ("forward", "backward")
    #: what could not be done as usual: its forward counted on Inductor's decomposed nodes (the
    #: pre-grad graph failed on fake tensors), a graph without kernel provenance
    count_note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Region:
    """A kernel of the compiled program as :func:`profile_compiled` built its record (what the
    record has no field for: the post-grad nodes, the bytes before fusion)."""

    name: str  #: the record's name
    kernel: str
    frame: str
    phase: str
    nodes: tuple[str, ...]  #: the post-grad nodes it computes
    ops: tuple[str, ...]  #: the original aten ops whose work it does
    unfused_bytes: int  #: its nodes' bytes counted op by op (each reading its inputs, writing its output)
    modules: tuple[str, ...]  #: the modules of its nodes (the record holds their common ancestor)


@dataclass(frozen=True)
class CompiledProfile:
    """What :func:`profile_compiled` measured (``profile`` is the data every view takes)."""

    profile: Profile
    frames: tuple[FrameInfo, ...]
    graph_breaks: tuple[GraphBreak, ...]
    eliminated: tuple[Eliminated, ...]
    regions: tuple[Region, ...]
    compile_s: float  #: the first call's wall time (Dynamo + AOTAutograd + Inductor + one run)
    call_ms: float | None  #: median wall time of the compiled call alone (no profiler)
    profiled_call_ms: float | None  #: the same under the profiler that timed the regions
    dynamo: DynamoStats  #: Dynamo's counters over the compile and every call
    recompiles: int  #: frames compiled again while profiling (the program's own guard failures)
    output: Any = field(default=None, repr=False, compare=False)  #: what the last profiled call returned

    @property
    def total_flops(self) -> int:
        return self.profile.total_flops

    @property
    def eliminated_flops(self) -> int:
        return sum(e.flops for e in self.eliminated)

    def text(self, top: int = 15) -> str:
        """Frames, graph breaks, the regions taking most time, and eliminated ops."""
        p = self.profile
        lines = [(f"compiled program: {len(self.frames)} frame(s), {len(self.graph_breaks)} graph break(s), "
                  f"{self.recompiles} recompile(s); compile {self.compile_s:.2f} s; call "
                  f"{format_time_ms(self.call_ms)} (profiled {format_time_ms(self.profiled_call_ms)}); "
                  f"{format_count(p.total_flops, 'FLOPs')}")]
        for f in self.frames:
            end = f"graph break at {f.where}: {_first_line(f.reason)}" if f.graph_break else "ends at return"
            lines.append(f"  frame {f.compile_id}: {f.kernels} kernels ({', '.join(f.graphs)}), compiled in "
                         f"{f.compile_s:.2f} s; {end}")
        rows = sorted((r for r in p.records if r.op in ("kernel", "extern_kernel", "eager")),
                      key=lambda r: -(r.time_ms or 0.0))[:top]
        if rows:
            lines.append(_table(["region", "phase", "module", "FLOPs", "read", "written", "time"],
                                [[r.target, r.phase, r.module_path or "(root)", format_count(r.flops),
                                  format_bytes(r.bytes_read), format_bytes(r.bytes_written),
                                  format_time_ms(r.time_ms)] for r in rows]))
        if self.eliminated:
            lines.append("eliminated by Inductor: " + ", ".join(
                f"{e.op} ({e.node}, {format_count(e.flops, 'FLOPs')})" for e in self.eliminated))
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# profile_compiled
# ---------------------------------------------------------------------------------------------

_COMPILE_KEYS = ("mode", "options", "dynamic", "fullgraph", "backend")


def profile_compiled(model: nn.Module, *args: Any, compile_kwargs: Mapping[str, Any] | None = None,
                     warmup: int = 1, repeat: int = 5, backward: bool = False,
                     loss_fn: Callable[[Any], Any] | None = None, **kwargs: Any) -> CompiledProfile:
    """Compile ``model`` with Inductor and profile ``model(*args, **kwargs)`` region by region.

    ``model``: an ``nn.Module`` (compiled here with ``torch.compile(model, **compile_kwargs)``:
    ``mode``, ``options``, ``dynamic``, ``fullgraph``) or what ``torch.compile`` returned (compiled
    again here, privately, with its own options; the caller's compiled object is not touched).
    ``warmup``: untimed calls after the first one (which compiles, untimed); ``repeat``: calls timed
    without the profiler, then the same number under it (medians). ``backward=True`` (implied by
    ``loss_fn``) profiles a training step: ``loss_fn(output)`` (or the output, when a scalar tensor)
    and ``loss.backward()``; the backward graph's kernels get ``phase="backward"``. Forward-only
    profiles run under ``torch.no_grad()``, as :func:`torch_flops.profile` does.

    The last profiled call uses the caller's tensors and is the one call whose effects stay
    (buffers, gradients, RNG); every other call gets copies and is undone. Nothing of ours stays
    installed in torch (configs are restored; the private compile's cache entries are isolated).

    Ops that run eagerly outside the compiled graphs (between graph breaks, in a frame Dynamo gives
    up on, autograd's own nodes, the loss) are counted on their aten ops in one more call, untimed
    and undone, before the last one, when the calls so far showed a graph break or a frame Dynamo
    did not compile, or with ``backward``; what still cannot be counted is named in an
    ``UnsupportedOpWarning`` (see the module docstring).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (or what torch.compile returns), got {type(model).__name__}")
    _validate.check_int("warmup", warmup, 0)
    _validate.check_int("repeat", repeat, 1)
    _validate.check_bool("backward", backward)
    if loss_fn is not None and not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable, got {type(loss_fn).__name__}")
    backward = backward or loss_fn is not None
    if backward and not torch.is_grad_enabled():
        raise ValueError("backward=True (or loss_fn) under torch.no_grad() or torch.inference_mode(): the forward "
                         "would record no graph to run backward on; call profile_compiled outside it")
    original, compiled_in = split_compiled(model)
    options = compile_options(compiled_in, compile_kwargs)
    with training_flags_restored(list(original.modules())):
        return _profile(original, args, kwargs, options, warmup, repeat, backward, loss_fn)


def compile_options(compiled: nn.Module | None, compile_kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """torch.compile's keywords for the profile: those ``compiled`` (a compiled wrapper, or None) was
    made with, updated by ``compile_kwargs``; a ``TypeError``/``ValueError`` for keys or a backend
    the profile cannot use."""
    if compile_kwargs is not None and not isinstance(compile_kwargs, Mapping):
        raise TypeError(f"compile_kwargs must be a dict of torch.compile's keywords, got {type(compile_kwargs).__name__}")
    given = dict(compile_kwargs or {})
    unknown = sorted(set(given) - set(_COMPILE_KEYS))
    if unknown:
        raise ValueError(f"compile_kwargs: unknown key(s) {unknown}; give any of {list(_COMPILE_KEYS)}")
    backend = given.pop("backend", "inductor")
    if backend != "inductor":
        raise ValueError(f"compile_kwargs: backend must be 'inductor' (its kernels are what is profiled), got {backend!r}")
    options = _compile_kwargs_of(compiled) if compiled is not None else {}
    options.update(given)
    if options.get("dynamic") not in (None, True, False):
        raise TypeError(f"compile_kwargs: dynamic must be None, True or False, got {options['dynamic']!r}")
    if not isinstance(options.get("fullgraph", False), bool):
        raise TypeError(f"compile_kwargs: fullgraph must be True or False, got {options['fullgraph']!r}")
    if options.get("options") is not None and not isinstance(options["options"], Mapping):
        raise TypeError(f"compile_kwargs: options must be a dict of Inductor settings, got "
                        f"{type(options['options']).__name__} {options['options']!r}")
    if options.get("mode") is not None and not isinstance(options["mode"], str):
        raise TypeError(f"compile_kwargs: mode must be a str, got {type(options['mode']).__name__} {options['mode']!r}")
    try:
        _config_patches(options)  # (an unknown mode: torch's own error)
    except Exception as e:
        add_note(e, f"torch_flops: from compile_kwargs {dict(given)!r}")
        raise
    return options


def _config_patches(options: Mapping[str, Any]) -> dict[str, Any]:
    """Inductor's config patches for ``mode`` and ``options``, as ``torch.compile`` makes them."""
    from torch._inductor import list_mode_options

    patches: dict[str, Any] = {}
    mode = options.get("mode")
    if mode is not None:
        patches.update(list_mode_options(mode, options.get("dynamic")))
    patches.update(options.get("options") or {})
    return patches


_ISOLATES_RECOMPILES = "isolate_recompiles" in inspect.signature(torch.compile).parameters


def _profile(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], options: Mapping[str, Any],
             warmup: int, repeat: int, backward: bool, loss_fn: Callable[[Any], Any] | None) -> CompiledProfile:
    device = input_device((args, kwargs), model)
    patches = _config_patches(options)
    backend = RecordingBackend(model, FORMULAS.copy(), patches)
    private: dict[str, Any] = {"backend": backend, "dynamic": options.get("dynamic"),
                               "fullgraph": bool(options.get("fullgraph", False))}
    if _ISOLATES_RECOMPILES:
        # (torch >= 2.13; not in torch.compile's typed overloads): our cache entries never count
        # against the recompile limit of the user's own compiled model. Older torch shares the limit.
        private["isolate_recompiles"] = True
    compiled = torch.compile(model, **private)
    cudagraphs = bool(patches.get("triton.cudagraphs")) and device.type == "cuda"
    grad = torch.enable_grad() if backward else torch.no_grad()
    before = DynamoStats.now()

    def step(call_args: tuple[Any, ...], call_kwargs: dict[str, Any], marks: bool = False) -> Any:
        with mark(_FWD_MARK) if marks else contextlib.nullcontext():
            out = compiled(*call_args, **call_kwargs)
        if backward:
            with mark(_LOSS_MARK) if marks else contextlib.nullcontext():  # eager ops: counted like the model's
                loss = _loss(out, loss_fn)
            with mark(_BWD_MARK) if marks else contextlib.nullcontext():
                loss.backward()
        return out

    def timed(call_args: tuple[Any, ...], call_kwargs: dict[str, Any], marks: bool) -> tuple[Any, float]:
        _sync(device)
        t0 = time.perf_counter_ns()
        out = step(call_args, call_kwargs, marks)
        _sync(device)
        return out, (time.perf_counter_ns() - t0) / 1e6

    def extra_run(marks: bool = False, around: contextlib.AbstractContextManager[Any] | None = None) -> float:
        """One call on copies of the inputs, undone after; its time (ms), copies and undo excluded.
        ``around``: a context the call (and its backward) runs in."""
        extra = ExtraRuns((), model)
        call_args, call_kwargs = copy_inputs((args, kwargs))
        try:
            with around if around is not None else contextlib.nullcontext():
                return timed(call_args, call_kwargs, marks)[1]
        finally:
            extra.undo()

    check_nothing_installed()
    with compile_config(), grad:
        start = time.perf_counter()
        extra_run()  # compiles (forward; the backward compiles in its first backward)
        compile_s = time.perf_counter() - start
        frames_after_compile = backend.calls
        for _ in range(warmup):
            extra_run()
        plain = [extra_run() for _ in range(repeat)]
        # ops outside the compiled graphs: counted in one more call, untimed, undone, before the
        # last call (whose effects stay); not needed when the calls so far ran whole compiled frames
        # only (every frame compiled, no graph break) and no backward (autograd's own nodes)
        so_far = DynamoStats.now() - before
        whole = so_far.frames_ok and so_far.frames_ok == so_far.frames_total and not so_far.total_graph_breaks
        eager_counts = None if whole and not backward else _count_eager(extra_run, backend.table)
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        profiled: list[float] = []
        with torch.profiler.profile(activities=activities) as prof:
            for _ in range(repeat - 1):
                profiled.append(extra_run(marks=True))
            output, last = timed(args, kwargs, True)  # the one call whose effects stay, on the caller's tensors
            profiled.append(last)
    stats = DynamoStats.now() - before
    recompiles = backend.calls - frames_after_compile
    graphs = [g for f in backend.frames for g in f.graphs]
    timings = _timings(prof.events(), graphs, device.type == "cuda")
    # the counting call must have run the same ops outside the graphs as the profiled calls
    counts_differ = eager_counts is not None and set(eager_counts) != set(timings.eager)
    records, regions, eliminated, in_kernels = _build(backend, graphs, timings, cudagraphs,
                                                      None if counts_differ else eager_counts)
    frames = tuple(FrameInfo(
        compile_id=f.compile_id, graph_break=f.graph_break, reason=f.reason, where=f.where,
        compile_s=f.backend_s + sum(g.compile_s for g in f.graphs if g.phase == "backward"),
        kernels=sum(len(g.kernels) for g in f.graphs), graphs=tuple(g.phase for g in f.graphs),
        count_note="; ".join(filter(None, [f.count_error, *(
            f"Inductor recorded no kernel provenance for the {g.phase} graph: its work is in no region"
            for g in f.graphs if not g.provenance and g.nodes)]))) for f in backend.frames)
    breaks = tuple(GraphBreak(frame=f.compile_id, reason=f.reason, where=f.where) for f in backend.frames
                   if f.graph_break)
    compiled_settings: dict[str, Any] = {
        "options": {k: _plain(v) for k, v in options.items() if k != "options"}
        | {"options": {k: _plain(v) for k, v in patches.items()}},
        "compile_s": compile_s, "call_ms": statistics.median(plain),
        "profiled_call_ms": statistics.median(profiled), "warmup": warmup, "repeat": repeat,
        "backward": backward, "recompiles": recompiles,
        "frames": [f.as_dict() for f in frames], "graph_breaks": [b.as_dict() for b in breaks],
        "dynamo_graph_breaks": dict(stats.graph_breaks),
        "eliminated": [e.as_dict() for e in eliminated],
        "time": "torch.profiler events, median of the profiled calls"
                + (" (device time)" if device.type == "cuda" else " (CPU wall time)"),
        "bytes": "estimated from the post-grad graph: tensors entering/leaving each kernel, once each",
    }
    settings = {
        "compiled": compiled_settings,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
    }
    eager = [r for r in records if r.op == "eager"]
    # not counted: no count for it (no counting call ran, or it ran other ops), or none of its aten
    # ops has a formula; partly counted: some of its aten ops have none (the rest is in the totals)
    uncounted = [r for r in eager if r.flops is None]
    partly = sorted({op for c in (eager_counts or {}).values() if c.count.calls and not counts_differ
                     for op in c.no_formula})
    eager_frames = max(stats.frames_total - stats.frames_ok, 0)
    if eager:
        compiled_settings.update(
            eager_ops=len(eager), eager_flops=sum(r.flops or 0 for r in eager), eager_uncounted=len(uncounted),
            frames_eager=eager_frames,
            eager_count="their aten ops counted in one more call, untimed and undone, under a dispatch mode "
                        "that Dynamo compiles under (ignore_compile_internals)" if eager_counts is not None
            else "not counted: the calls before showed no graph break, no frame left uncompiled, no backward")
    # ops inside a kernel with no formula: the kernel counts the rest of its work
    if in_kernels:
        warnings.warn(f"torch_flops: op(s) with no FLOPs formula ran inside the compiled kernels of "
                      f"{type(model).__name__}: {', '.join(in_kernels[:4])}; their work is not in the kernels' counts "
                      "(each such kernel's note names them). Register a formula with torch_flops.register_aten.",
                      UnsupportedOpWarning, stacklevel=caller_stacklevel())
    if uncounted or partly:
        # the regions count what Inductor's kernels computed; what ran outside them and could not be
        # counted is named, rather than a total that looks complete
        where = (f" (Dynamo compiled no graph for {eager_frames} frame(s): it ran them as plain Python)"
                 if eager_frames else " (the code between graph breaks)")
        parts = []
        if uncounted:
            parts.append(
                f"{len(uncounted)} op(s) of {type(model).__name__} ran eagerly outside the compiled graphs{where} "
                "without a count" + (" (the call that counts them ran other ops outside the graphs than the "
                                     "profiled calls did)" if counts_differ else "")
                + ", e.g. " + ", ".join(sorted({r.target for r in uncounted})[:4])
                + ": their time is measured, their FLOPs are not in this profile's totals. torch_flops.profile("
                "model, ...) counts the whole program as it runs eagerly")
        if partly:
            parts.append(f"aten op(s) with no formula ran eagerly outside the compiled graphs{where}: "
                         + ", ".join(partly[:4]) + " (not in this profile's totals)")
        warnings.warn("torch_flops: " + "; ".join(parts) + ".", UnsupportedOpWarning, stacklevel=caller_stacklevel())
    profile = Profile(records=tuple(records), device=str(device), tracer="inductor", memory_source="none",
                      module_types={p: type(m).__name__ for p, m in model.named_modules()},
                      module_params={p: sum(t.numel() for t in m.parameters(recurse=False))
                                     for p, m in model.named_modules()},
                      batch_size=_batch_size(args), settings=settings)
    return CompiledProfile(profile=profile, frames=frames, graph_breaks=breaks, eliminated=tuple(eliminated),
                           regions=tuple(regions), compile_s=compile_s, call_ms=statistics.median(plain),
                           profiled_call_ms=statistics.median(profiled), dynamo=stats, recompiles=recompiles,
                           output=output)


def mark(name: str) -> contextlib.AbstractContextManager[Any]:
    """A profiler event around a call: ``_RecordFunctionFast`` (what Inductor's own events use,
    ~25 us cheaper per call than ``torch.profiler.record_function``), else the public one."""
    fast = getattr(torch._C._profiler, "_RecordFunctionFast", None)
    return fast(name) if fast is not None else torch.profiler.record_function(name)


def _plain(value: Any) -> Any:
    """A settings value as JSON takes it (a config object by its repr)."""
    return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)


def _loss(out: Any, loss_fn: Callable[[Any], Any] | None) -> torch.Tensor:
    loss = loss_fn(out) if loss_fn is not None else out
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise LossError("backward=True needs a scalar loss: give loss_fn(output) -> scalar tensor (the output "
                        f"is {type(out).__name__}" + (f" of shape {tuple(out.shape)})" if isinstance(out, torch.Tensor)
                                                       else ")"))
    return loss


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _batch_size(args: Sequence[Any]) -> int | None:
    tensors = tensors_of(args)
    return int(tensors[0].shape[0]) if tensors and tensors[0].dim() > 0 else None


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


# ---------------------------------------------------------------------------------------------
# the profiler's events -> each kernel's time
# ---------------------------------------------------------------------------------------------

#: events of torch.compile's runtime that wrap the compiled graphs (their own ops are framework work)
_FRAMEWORK = ("TorchDynamo Cache Lookup", "Pregraph bytecode", "AOTDispatcher", "CompiledFunction",
              "Torch-Compiled Region")
_REGION = "Torch-Compiled Region: "
_GRAPH_CALL = "## Call CompiledFxGraph"
_ENGINE = "autograd::engine::evaluate_function: "


@dataclass
class _Timings:
    """Per run, what each item took (microseconds)."""

    kernels: dict[tuple[int, int], list[float]] = field(default_factory=dict)  #: (graph, kernel) -> times
    eager: dict[tuple[str, str, int], list[float]] = field(default_factory=dict)  #: (phase, name, nth) -> times
    #: (phase, name, nth) -> its event in the first run that had it (the counting call reads what is under it)
    eager_events: dict[tuple[str, str, int], Any] = field(default_factory=dict)
    windows: dict[str, list[float]] = field(default_factory=dict)  #: phase -> the marked window's times
    seen: dict[str, list[float]] = field(default_factory=dict)  #: phase -> per run, kernel + eager time
    device: bool = False  #: times are device times (CUDA): the call's overhead is then not derived


def _duration(e: Any, device: bool) -> float:
    if device:
        return float(getattr(e, "device_time_total", 0.0) or 0.0)
    return float(e.time_range.end - e.time_range.start)


def _timings(events: Iterable[Any], graphs: list[CompiledGraph], device: bool) -> _Timings:
    t = _Timings(device=device)
    index = {id(g): i for i, g in enumerate(graphs)}
    for marker in events:
        if marker.name not in _PHASES or marker.cpu_parent is not None and marker.cpu_parent.name in _PHASES:
            continue
        phase = _PHASES[marker.name]
        walk = _Walk(phase, graphs, index, t)
        for child in marker.cpu_children:
            walk.visit(child, False, None)
        t.windows.setdefault(phase, []).append(_duration(marker, False))
        t.seen.setdefault(phase, []).append(walk.seen)
    return t


class _Walk:
    """One marked call's events: compiled graph calls (their kernels), and the ops that ran eagerly."""

    def __init__(self, phase: str, graphs: list[CompiledGraph], index: dict[int, int], t: _Timings) -> None:
        self.phase, self.graphs, self.index, self.t = phase, graphs, index, t
        self.seen = 0.0  #: kernel + eager op time found so far
        self.nth: Counter[str] = Counter()  #: occurrences of each eager op so far
        self.used: set[int] = set()  #: graphs matched in this call

    def eager(self, label: str, e: Any) -> None:
        d = _duration(e, self.t.device)
        key = (self.phase, label, self.nth[label])
        self.t.eager.setdefault(key, []).append(d)
        self.t.eager_events.setdefault(key, e)
        self.nth[label] += 1
        self.seen += d

    def visit(self, e: Any, framework: bool, region: str | None) -> None:
        name = e.name
        if name.startswith(_GRAPH_CALL):
            self.seen += _graph_call(e, self.phase, region, self.graphs, self.index, self.used, self.t)
            return
        if name.startswith(_REGION):
            region = name[len(_REGION):].strip()
            framework = False
        elif name.startswith(_FRAMEWORK) or name.startswith(_ENGINE + "CompiledFunctionBackward") \
                or name == "CompiledFunctionBackward":
            framework = True
        elif name.startswith(_ENGINE) and not framework:  # an eager autograd node (AccumulateGrad, the loss's)
            self.eager(name[len(_ENGINE):], e)
            return
        elif not framework:  # an op the model ran eagerly (graph-break code, autograd's seed)
            self.eager(name, e)
            return
        for child in e.cpu_children:
            self.visit(child, framework, region)


def _graph_call(e: Any, phase: str, region: str | None, graphs: list[CompiledGraph], index: dict[int, int],
                used: set[int], t: _Timings) -> float:
    """Match one compiled graph call's kernel events to a graph's kernels; their time, summed."""
    children = list(e.cpu_children)
    candidates = [g for g in graphs if g.phase == phase and (region is None or g.frame.compile_id == region)]
    if not candidates:
        candidates = [g for g in graphs if g.phase == phase]
    best: CompiledGraph | None = None
    best_score = -1
    for g in candidates:
        score = sum(1 for k in g.kernels if any(c.name == event_name(k, g.graph_id) for c in children))
        if score > best_score or score == best_score and best is not None and id(best) in used and id(g) not in used:
            best, best_score = g, score
    if best is None:
        return 0.0
    used.add(id(best))
    total = 0.0
    position = 0
    gi = index[id(best)]
    for child in children:
        matched = None
        for j in range(position, len(best.kernels)):
            expected = event_name(best.kernels[j], best.graph_id)
            if child.name == expected or expected is None and child.name.startswith("aten::"):
                matched = j
                break
        if matched is None:  # a wrapper op no kernel claims (a copy into a mutated input): in the overhead
            continue
        d = _duration(child, t.device)
        t.kernels.setdefault((gi, matched), []).append(d)
        total += d
        position = matched + 1
    return total


def _median_ms(values: list[float] | None) -> float | None:
    return statistics.median(values) / 1e3 if values else None


# ---------------------------------------------------------------------------------------------
# the ops outside the compiled graphs, counted (see the module docstring)
# ---------------------------------------------------------------------------------------------

_OP_MARK = "torch_flops.compiled.op:"
_Key = tuple[str, str, int]  #: (phase, event name, occurrence), as the walk keys an eager op


@dataclass
class _EagerCount:
    """The aten ops under one eager op's profiler event in the counting call."""

    count: OpCount = field(default_factory=OpCount)  #: those with a formula, summed
    ops: Counter[str] = field(default_factory=Counter)  #: every op by name (``aten.mm``) -> calls
    no_formula: set[str] = field(default_factory=set)  #: those without a formula (or whose formula failed)


class _EagerOps(TorchDispatchMode):
    """Counts every aten op with its real arguments by the formula table, each run inside a
    profiler event ``_OP_MARK<index>``. Dynamo compiles and runs the compiled model as without it
    (``ignore_compile_internals``); the compiled graphs' own aten calls reach it as well, and are
    told apart by where their events lie (:meth:`under`)."""

    def __init__(self, table: FormulaTable) -> None:
        super().__init__()
        self.table = table
        self.ops: list[tuple[str, OpCount | None]] = []
        self._formulas: dict[Any, Any] = {}

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if not isinstance(func, torch._ops.OpOverload) or func.namespace == "profiler":  # record_function's own
            return func(*args, **kwargs)
        index = len(self.ops)
        self.ops.append((packet_name(func), None))
        with mark(_OP_MARK + str(index)):
            out = func(*args, **kwargs)
        formula = self._formulas.get(func, self)
        if formula is self:
            formula = self._formulas[func] = self.table.resolve_aten(func)
        if formula is not None:
            with contextlib.suppress(Exception):  # a formula that fails on these values: not counted, never fatal
                self.ops[index] = (self.ops[index][0], count_of(formula, out, args, kwargs))
        return out

    def under(self, event: Any) -> _EagerCount:
        """The ops whose events lie under ``event`` (the mode is off while an op runs: never nested)."""
        found = _EagerCount()
        stack = [event]
        while stack:
            e = stack.pop()
            if e.name.startswith(_OP_MARK):
                op, count = self.ops[int(e.name[len(_OP_MARK):])]
                found.ops[op] += 1
                if count is None:
                    found.no_formula.add(op)
                else:
                    found.count.add(count)
                continue
            stack.extend(e.cpu_children)
        return found


def _count_eager(run: Callable[[bool, contextlib.AbstractContextManager[Any]], float], table: FormulaTable
                 ) -> dict[_Key, _EagerCount]:
    """One call (``run(marks, around)``: on copies, undone) under :class:`_EagerOps` and the
    profiler: each op outside the compiled graphs, keyed as the timed calls' walk keys it, with the
    aten ops under its event."""
    ops = _EagerOps(table)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        run(True, ops)
    found = _timings(prof.events(), [], False)  # no graph: the graphs' events are not read here
    return {key: ops.under(e) for key, e in found.eager_events.items()}


# ---------------------------------------------------------------------------------------------
# kernels -> records
# ---------------------------------------------------------------------------------------------

@dataclass
class _Work:
    """What one kernel call site does, gathered before its record is made."""

    graph: CompiledGraph
    kernel: Kernel
    count: OpCount = field(default_factory=OpCount)
    recompute: OpCount = field(default_factory=OpCount)
    ops: dict[str, None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    uncounted: set[str] = field(default_factory=set)


def _build(backend: RecordingBackend, graphs: list[CompiledGraph], timings: _Timings, cudagraphs: bool,
           eager_counts: Mapping[_Key, _EagerCount] | None = None
           ) -> tuple[list[NodeRecord], list[Region], list[Eliminated], list[str]]:
    """The kernels' records and regions, the work no kernel kept, and the ops inside kernels that
    no formula counted (named in their kernels' notes)."""
    works: dict[tuple[int, int], _Work] = {}
    eliminated: list[Eliminated] = []
    for gi, g in enumerate(graphs):
        for ki, k in enumerate(g.kernels):
            works[(gi, ki)] = _Work(graph=g, kernel=k)
    index = {id(g): i for i, g in enumerate(graphs)}
    for frame in backend.frames:
        eliminated.extend(_assign(frame, [g for g in graphs if g.frame is frame], index, works))
    records: list[NodeRecord] = []
    regions: list[Region] = []
    frame_order = {id(f): i for i, f in enumerate(backend.frames)}
    order_keys: list[tuple[int, int, int]] = []
    for (gi, ki), w in works.items():
        g, k = w.graph, w.kernel
        times = timings.kernels.get((gi, ki))
        note = "; ".join(w.notes)
        if times is None:
            note = "; ".join(filter(None, [note, "not seen by the profiler" + (
                " (CUDA graph replay: not measurable per region)" if cudagraphs else "")]))
        paths = _kernel_paths(g, k)
        path = _common_ancestor(paths)
        reads, writes = _kernel_bytes(g, k)
        main = _main_node(g, k)
        counted = w.count.calls > 0 or not w.uncounted
        if w.uncounted:
            note = "; ".join(filter(None, [note, "no formula for " + ", ".join(sorted(w.uncounted))]))
        name = f"{g.frame.compile_id}:{g.phase[0]}:{k.key}"
        records.append(NodeRecord(
            index=len(records), name=name, op="extern_kernel" if k.extern else "kernel", target=k.target,
            module_path=path, module_type=backend.resolver.types[path].__name__ if path in backend.resolver.types else "",
            flops=w.count.flops if counted else None, macs=w.count.macs if counted else None,
            status=Status.COUNTED if counted else Status.UNSUPPORTED, time_ms=_median_ms(times), mem_before=None,
            mem_after=None, mem_delta=None, output_shape=None if main is None else main.shape,
            module_stack=module_chain((path,)), note=note, phase=g.phase, dtype=None if main is None else main.dtype,
            graph=gi, dot_outputs=w.count.dot_outputs, mm_macs=w.count.mm_macs, bytes_read=reads, bytes_written=writes,
            recompute_flops=w.recompute.flops or None, recompute_macs=w.recompute.macs or None))
        regions.append(Region(name=name, kernel=k.name, frame=g.frame.compile_id, phase=g.phase, nodes=k.nodes,
                              ops=tuple(w.ops), unfused_bytes=_unfused_bytes(g, k),
                              modules=tuple(sorted(p for p in set(paths) if p is not None))))
        backward = g.phase == "backward"
        f = frame_order[id(g.frame)]
        order_keys.append((int(backward), -f if backward else f, ki))
    # execution order: the forward graphs' kernels frame by frame, then the backward's (last frame first)
    order = sorted(range(len(records)), key=order_keys.__getitem__)
    records = [records[i]._replace(index=n) for n, i in enumerate(order)]
    regions = [regions[i] for i in order]
    records.extend(_eager_records(timings, len(records), eager_counts or {}))
    return records, regions, eliminated, sorted({op for w in works.values() for op in w.uncounted})


def _eager_records(t: _Timings, start: int, counts: Mapping[_Key, _EagerCount]) -> list[NodeRecord]:
    """The ops that ran outside the compiled graphs (counted where ``counts`` has them), and each
    phase's time in no kernel."""
    records: list[NodeRecord] = []
    for (phase, name, nth), times in t.eager.items():
        target = name.replace("::", ".", 1) if name.startswith("aten::") else name
        found = counts.get((phase, name, nth))
        if found is not None:
            records.append(_counted_eager(found, start + len(records), f"eager:{phase[0]}:{name}#{nth}", target,
                                          phase, _median_ms(times)))
            continue
        zero = target.startswith("aten.") and _is_zero(target)
        records.append(NodeRecord(
            index=start + len(records), name=f"eager:{phase[0]}:{name}#{nth}", op="eager", target=target,
            module_path="", module_type="", flops=0 if zero else None, macs=0 if zero else None,
            status=Status.ZERO if zero else Status.UNSUPPORTED, time_ms=_median_ms(times), mem_before=None,
            mem_after=None, mem_delta=None, output_shape=None,
            note="" if zero else "ran eagerly outside the compiled graphs (timed; its FLOPs are not counted here)",
            phase=phase, bytes_read=0, bytes_written=0))
    for phase, windows in t.windows.items():
        if phase == "loss":  # the loss's own Python: no compiled call there
            continue
        seen = t.seen.get(phase, [])
        rest = [w - s for w, s in zip(windows, seen)]
        records.append(NodeRecord(
            index=start + len(records), name=f"overhead:{phase}", op="overhead", target="compiled call overhead",
            module_path="", module_type="", flops=0, macs=0, status=Status.ZERO,
            time_ms=None if t.device else _median_ms(rest), mem_before=None, mem_after=None, mem_delta=None,
            output_shape=None, phase=phase, bytes_read=0, bytes_written=0,
            note="the call's time in no kernel: Dynamo's guards, AOTAutograd's and Inductor's Python wrappers, "
                 "allocation" + (" (not derived from device times)" if t.device else "")))
    return records


def _counted_eager(found: _EagerCount, index: int, name: str, target: str, phase: str, time_ms: float | None
                   ) -> NodeRecord:
    """An op outside the compiled graphs, with the work of its aten ops (not counted when none of
    them has a formula)."""
    c = found.count
    counted = c.calls > 0 or not found.no_formula
    ops = ", ".join(op if n == 1 else f"{op} x{n}" for op, n in list(found.ops.items())[:6]) + (
        ", ..." if len(found.ops) > 6 else "")
    note = ("ran eagerly outside the compiled graphs; counted on its aten ops in one more call, untimed"
            + (f" ({ops})" if ops else " (none)")) if counted else \
        "ran eagerly outside the compiled graphs (timed; not counted)"
    if found.no_formula:
        note += "; no formula for " + ", ".join(sorted(found.no_formula))
    status = Status.UNSUPPORTED if not counted else Status.COUNTED if c.flops or c.macs else Status.ZERO
    return NodeRecord(
        index=index, name=name, op="eager", target=target, module_path="", module_type="",
        flops=c.flops if counted else None, macs=c.macs if counted else None, status=status, time_ms=time_ms,
        mem_before=None, mem_after=None, mem_delta=None, output_shape=None, note=note, phase=phase,
        dot_outputs=c.dot_outputs if counted else None, mm_macs=c.mm_macs if counted else None,
        bytes_read=0, bytes_written=0)


def _is_zero(target: str) -> bool:
    packet = getattr(torch.ops.aten, target.removeprefix("aten."), None)
    return packet is not None and FORMULAS.resolve_aten(packet) is zero_flops


def _primary(graph: CompiledGraph) -> dict[str, int]:
    """Post-grad node -> the kernel that computes it: the extern kernel made for it, else the first
    generated kernel (in call order) that computes it. A generated kernel listing a node an extern
    kernel computes only prepares that kernel's operands (a layout copy for a convolution)."""
    first: dict[str, int] = {}
    for ki, k in enumerate(graph.kernels):
        for n in k.nodes:
            if k.extern:
                node = graph.nodes.get(n)
                if node is not None and not node.is_view:
                    first[n] = ki
                    continue
            first.setdefault(n, ki)
    return first


def _assign(frame: FrameCapture, graphs: list[CompiledGraph], index: Mapping[int, int],
            works: Mapping[tuple[int, int], _Work]) -> list[Eliminated]:
    """Give every kernel of the frame its share of the frame's work (see the module docstring);
    returns the original ops no kernel computes."""
    primaries = {id(g): _primary(g) for g in graphs}
    groups: dict[GroupKey, list[tuple[CompiledGraph, PostGradNode]]] = {}
    decomposed: list[tuple[CompiledGraph, PostGradNode]] = []
    for g in graphs:
        prim = primaries[id(g)]
        for n in g.nodes.values():
            home = prim.get(n.name)
            for ki, k in enumerate(g.kernels):  # work done again: in a generated kernel that is not its home
                if n.name in k.nodes and n.count is not None and not k.extern and (
                        n.recompute or home != ki and (home is None or not g.kernels[home].extern)):
                    works[(index[id(g)], ki)].recompute.add(n.count)
            if n.recompute:
                continue
            if n.phase == "forward" and frame.counts:
                groups.setdefault((n.pre, n.original, n.phase), []).append((g, n))
            else:  # the backward's own ops (and a frame whose forward could not be counted): as decomposed
                decomposed.append((g, n))
    for g, n in decomposed:
        _place(None, [(g, n)], n.original, primaries, index, works)
    counts = dict(frame.counts)
    matched: list[tuple[OpCount | None, list[tuple[CompiledGraph, PostGradNode]], str]] = []
    leftovers: dict[tuple[str | None, str], list[tuple[CompiledGraph, PostGradNode]]] = {}
    for key, members in groups.items():
        if key in counts and key[0] is not None:
            matched.append((counts.pop(key), members, key[1]))
        else:
            leftovers.setdefault((key[0], key[2]), []).extend(members)
    # the same pre-grad node, ops named differently on the two sides (a decomposition's original_aten)
    for (pre, phase), members in leftovers.items():
        rest = [key for key in counts if key[0] == pre and key[2] == phase and pre is not None]
        if rest:
            merged = OpCount()
            for key in rest:
                merged.add(counts.pop(key))
            matched.append((merged, members, "+".join(sorted({key[1] for key in rest}))))
        else:
            matched.append((None, members, ""))
    # an op the pre-grad graph holds under one node and the post-grad graph names after another (the
    # inside of a custom autograd.Function's forward, traced with its backward): the one count left of
    # that op and phase goes to the one group of it left without a count (it was listed as eliminated,
    # though a kernel computed it)
    alone = [i for i, (total, members, _) in enumerate(matched) if total is None]
    for i in alone:
        members = matched[i][1]
        originals, phase = {n.original for _, n in members}, members[0][1].phase
        rivals = [j for j in alone if j != i and matched[j][0] is None
                  and {n.original for _, n in matched[j][1]} & originals and matched[j][1][0][1].phase == phase]
        found = [key for key in counts if key[1] in originals and key[2] == phase and counts[key].flops]
        if len(found) > 1:  # (beside dead code of the same op: the one under a higher-order op is renamed)
            found = [key for key in found if str(key[0]).startswith("autograd_function_apply")]
        if len(found) == 1 and not rivals:
            matched[i] = (counts.pop(found[0]), members, found[0][1])
    # an op fused into another node's (Inductor's mm + add -> addmm, named after the add): the node's own
    # count holds the leftover's work beside what it was given; the one such node takes it
    # (two such nodes with the same surplus, equal layers: either takes it, the next the other)
    for key in [key for key, c in counts.items() if c.flops]:
        need = counts[key].flops
        surplus = {i: sum(n.count.flops for _, n in members if n.count is not None) - total.flops
                   for i, (total, members, _) in enumerate(matched)
                   if total is not None and members[0][1].phase == key[2]}
        fits = [i for i, extra in surplus.items() if extra == need] or [i for i, extra in surplus.items() if extra > need]
        if len(fits) == 1 or (fits and surplus[fits[0]] == need):
            given, members, op = matched[fits[0]]
            merged = OpCount()
            if given is not None:  # (always: fits holds only groups given a count)
                merged.add(given)
            merged.add(counts.pop(key))
            matched[fits[0]] = (merged, members, f"{op}+{key[1]}")
    for total, members, op in matched:
        _place(total, members, op, primaries, index, works)
    eliminated = []
    for (pre, op, phase), c in counts.items():  # zero-FLOP leftovers (prim.device, views) are not listed
        if c.flops:
            eliminated.append(Eliminated(frame=frame.compile_id, node=str(pre), op=op, phase=phase, flops=c.flops,
                                         macs=c.macs, module_path=frame.pre_nodes.get(pre) if pre else None))
    for total, members, op in matched:
        if total is not None and total.flops and not any(n.name in primaries[id(g)] for g, n in members):
            eliminated.append(Eliminated(frame=frame.compile_id, node=str(members[0][1].pre), op=op,
                                         phase=members[0][1].phase, flops=total.flops, macs=total.macs,
                                         module_path=members[0][1].module_path))
    return eliminated


def _place(total: OpCount | None, members: list[tuple[CompiledGraph, PostGradNode]], op: str,
           primaries: Mapping[int, Mapping[str, int]], index: Mapping[int, int],
           works: Mapping[tuple[int, int], _Work]) -> None:
    """Put one original op's work (``total``; None: count its post-grad nodes) on its kernels."""
    placed = [(g, n, primaries[id(g)].get(n.name)) for g, n in members]
    kernels = {(index[id(g)], ki) for g, _, ki in placed if ki is not None}
    if not kernels:
        return
    label = op or members[0][1].original
    for key in kernels:
        works[key].ops[label] = None
        if total is not None and total.unsupported:  # (some of its aten ops have no formula: not in the count)
            works[key].uncounted.add(label)
    if total is not None and len(kernels) == 1:
        works[next(iter(kernels))].count.add(total)
        return
    # split over kernels: each gets its own nodes' count, never more than the op's count left; the
    # rest goes to the kernel computing the op's last node (its output)
    rest = total
    last: tuple[int, int] | None = None
    for g, n, ki in placed:
        if ki is None:
            continue
        key = (index[id(g)], ki)
        last = key
        if n.count is None:
            if not n.is_view and total is None and not str(n.target).startswith(("prim.", "prims.")):
                works[key].uncounted.add(n.target)  # (prims: Inductor's seeds, a device: no work)
            continue
        part = n.count if rest is None else _take(rest, n.count)
        works[key].count.add(part)
        if rest is not None:
            rest = rest.minus(part)
    if rest is not None and last is not None and (rest.flops or rest.macs):
        works[last].count.add(rest)
        works[last].notes.append(f"with the rest of {label}'s count, split over {len(kernels)} kernels")


def _take(rest: OpCount, count: OpCount) -> OpCount:
    """``count``, capped at what is ``rest`` of an op's count."""
    flops, macs = min(count.flops, rest.flops), min(count.macs, rest.macs)
    mm = None if count.mm_macs is None and rest.mm_macs is None else min(
        count.mm_macs if count.mm_macs is not None else count.macs, rest.mm_macs if rest.mm_macs is not None
        else rest.macs, macs)
    return OpCount(flops=max(flops, 0), macs=max(macs, 0), mm_macs=mm, calls=1)


def _kernel_paths(g: CompiledGraph, k: Kernel) -> list[str | None]:
    """The modules a kernel's own work comes from (views and recomputed nodes left out, unless
    they are all it has)."""
    prim = _primary(g)
    ki = g.kernels.index(k)
    own = [g.nodes[n] for n in k.nodes if n in g.nodes and prim.get(n) == ki and not g.nodes[n].recompute]
    work = [n for n in own if not n.is_view] or own or [g.nodes[n] for n in k.nodes if n in g.nodes]
    return [n.module_path for n in work]


def _common_ancestor(paths: Sequence[str | None]) -> str:
    """The deepest module containing every path ("" when they share none, or one is unknown)."""
    if not paths or any(p is None for p in paths):
        return ""
    common = ancestors(paths[0])  # type: ignore[arg-type]
    for p in paths[1:]:
        chain = set(ancestors(p))  # type: ignore[arg-type]
        common = tuple(a for a in common if a in chain)
    return common[-1] if common else ""


def _kernel_bytes(g: CompiledGraph, k: Kernel) -> tuple[int, int]:
    """Bytes a kernel reads (tensors entering it) and writes (tensors it makes that are used
    outside it), each once; a view read or written counts its base tensor's span."""
    inside = set(k.nodes)
    reads: dict[str, int] = {}
    writes: dict[str, int] = {}
    for name in k.nodes:
        n = g.nodes.get(name)
        if n is None:
            continue
        for a in n.inputs:
            if a not in inside:
                reads[a] = g.nodes[a].out_bytes if a in g.nodes else g.input_bytes.get(a, 0)
        if any(u not in inside for u in n.users):
            base = n
            while base.is_view and base.inputs and base.inputs[0] in inside and base.inputs[0] in g.nodes:
                base = g.nodes[base.inputs[0]]
            if not base.is_view:
                writes[base.name] = base.out_bytes
    return sum(reads.values()), sum(writes.values())


def _unfused_bytes(g: CompiledGraph, k: Kernel) -> int:
    """The kernel's own nodes' bytes as eager would move them: each op reading its inputs and
    writing its output (views move none)."""
    prim = _primary(g)
    ki = g.kernels.index(k)
    total = 0
    for name in k.nodes:
        n = g.nodes.get(name)
        if n is None or n.is_view or prim.get(name) != ki:
            continue
        total += n.out_bytes + sum(g.nodes[a].out_bytes if a in g.nodes else g.input_bytes.get(a, 0)
                                   for a in dict.fromkeys(n.inputs))
    return total


def _main_node(g: CompiledGraph, k: Kernel) -> PostGradNode | None:
    nodes = [g.nodes[n] for n in k.nodes if n in g.nodes and not g.nodes[n].is_view]
    if not nodes:
        return None
    return max(nodes, key=lambda n: (n.count.flops if n.count else -1, n.out_bytes))


# ---------------------------------------------------------------------------------------------
# compare_compiled
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CompareRow:
    """One module, eager vs compiled (forward)."""

    path: str  #: "" = the whole model
    module_type: str
    eager_ms: float | None
    compiled_ms: float | None
    eager_launches: int  #: kernels eager runs in it (ATen ops that are not views)
    compiled_launches: int  #: kernel calls of the compiled program attributed to it (or below)
    eager_bytes: int  #: read + written, op by op
    compiled_bytes: int  #: read + written after fusion
    eager_flops: int
    compiled_flops: int

    @property
    def speedup(self) -> float | None:
        if not self.eager_ms or not self.compiled_ms:
            return None
        return self.eager_ms / self.compiled_ms

    @property
    def bytes_saved(self) -> int:
        """Bytes fusion saved: eager's traffic minus the compiled kernels'."""
        return self.eager_bytes - self.compiled_bytes

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["speedup"] = self.speedup
        d["bytes_saved"] = self.bytes_saved
        return d


@dataclass(frozen=True)
class CompiledComparison:
    """:func:`torch_flops.api.compare_compiled`'s result: ``rows`` per module, and both profiles."""

    rows: tuple[CompareRow, ...]
    eager: Profile
    compiled: Profile
    result: CompiledProfile
    eager_call_ms: float | None  #: median wall time of one plain eager call
    unaccounted_flops: int  #: eager's FLOPs no region nor eliminated op accounts for (code Dynamo dropped)

    def row(self, path: str) -> CompareRow:
        for r in self.rows:
            if r.path == path:
                return r
        raise KeyError(path)

    def text(self, depth: int = -1) -> str:
        c = self.result
        whole = self.row("")
        speed = f"{whole.speedup:.2f}x" if whole.speedup else "-"
        call_speed = (f"{self.eager_call_ms / c.call_ms:.2f}x" if self.eager_call_ms and c.call_ms else "-")
        head = (f"eager {format_time_ms(self.eager_call_ms)} per call vs compiled {format_time_ms(c.call_ms)} "
                f"({call_speed}); compile {c.compile_s:.2f} s; {len(c.frames)} frame(s), {len(c.graph_breaks)} graph "
                f"break(s), {c.recompiles} recompile(s); kernels {whole.eager_launches} -> {whole.compiled_launches}; "
                f"bytes {format_bytes(whole.eager_bytes)} -> {format_bytes(whole.compiled_bytes)} (saved by fusion "
                f"{format_bytes(whole.bytes_saved)}); FLOPs {format_count(whole.eager_flops)} eager, "
                f"{format_count(whole.compiled_flops)} compiled"
                + (f" + {format_count(c.eliminated_flops)} eliminated" if c.eliminated else "")
                + (f" ({format_count(self.unaccounted_flops)} not in any region)" if self.unaccounted_flops else ""))
        rows = [r for r in self.rows if depth < 0 or (r.path.count(".") + 1 if r.path else 0) <= depth]
        table = _table(
            ["module", "type", "eager", "compiled", "speed-up", "kernels", "bytes eager", "bytes compiled",
             "saved by fusion", "FLOPs eager", "FLOPs compiled"],
            [["  " * (r.path.count(".") + 1 if r.path else 0) + (r.path.rpartition(".")[2] or "(model)"),
              r.module_type, format_time_ms(r.eager_ms), format_time_ms(r.compiled_ms),
              f"{r.speedup:.2f}x" if r.speedup else "-", f"{r.eager_launches} -> {r.compiled_launches}",
              format_bytes(r.eager_bytes), format_bytes(r.compiled_bytes), format_bytes(r.bytes_saved),
              format_count(r.eager_flops), format_count(r.compiled_flops)] for r in rows])
        lines = [head, ("module times: eager = its nodes' times in torch_flops' eager profile; compiled = its kernels' "
                        f"times (the model row adds the call's overhead): {speed} for the model"), table]
        for b in c.graph_breaks:
            lines.append(f"graph break ({b.frame}) at {b.where}: {_first_line(b.reason)}")
        return "\n".join(lines)


class _Launches(TorchDispatchMode):
    """Counts the ATen ops (views excluded: they launch nothing) run under each module."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = [""]
        self.counts: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if not func.is_view and func not in _NO_KERNEL:
            for p in ancestors(self.stack[-1]):
                self.counts[p] += 1
        return func(*args, **(kwargs or {}))


#: ops that are no view by schema but launch no kernel either
_NO_KERNEL = frozenset({torch.ops.aten.lift_fresh.default, torch.ops.aten.lift_fresh_copy.default})


@contextlib.contextmanager
def _module_scopes(model: nn.Module, mode: _Launches) -> Iterator[None]:
    def enter(path: str) -> Callable[..., None]:
        def hook(*_: Any) -> None:
            mode.stack.append(path)
        return hook

    def leave(*_: Any) -> None:
        mode.stack.pop()

    handles = []
    for path, m in model.named_modules():
        handles.append(m.register_forward_pre_hook(enter(path)))
        handles.append(m.register_forward_hook(leave))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def eager_launches(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Counter[str]:
    """One extra eager call (undone), counting the kernels each module launches."""
    mode = _Launches()
    extra = ExtraRuns((), model)
    call_args, call_kwargs = copy_inputs((args, kwargs))
    try:
        with _module_scopes(model, mode), compiled_code_eagerly(), mode:
            model(*call_args, **call_kwargs)
    finally:
        extra.undo()
    return mode.counts


def eager_call_ms(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], warmup: int, repeat: int
                   ) -> float:
    device = input_device((args, kwargs), model)
    times = []
    for i in range(warmup + repeat):
        extra = ExtraRuns((), model)
        call_args, call_kwargs = copy_inputs((args, kwargs))
        _sync(device)
        t0 = time.perf_counter_ns()
        model(*call_args, **call_kwargs)
        _sync(device)
        if i >= warmup:
            times.append((time.perf_counter_ns() - t0) / 1e6)
        extra.undo()
    return statistics.median(times)


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    from tabulate import tabulate

    return tabulate(rows, headers=list(headers), tablefmt="simple", disable_numparse=True)

"""The recording: the one owner of what torch_flops installs while a model runs eagerly, of "where
am I" (which of the model's modules is running, whether autograd is in a backward) and of the
phase and step every recorded op belongs to. ``propagate`` (:mod:`torch_flops.calls`), the
training profiler (:mod:`torch_flops.training`) and the generation profiler all record through a
:class:`Recording`.

What is installed, and how recordings stack
-------------------------------------------
Per thread, one ``TorchDispatchMode`` and one ``TorchFunctionMode`` (pushed when the thread's first
recording starts, popped when its last one stops, wherever they then are on torch's mode stacks),
and, process-wide, one pair of global module hooks (registered while any recording is active; the
entries torch's handle forgets in ``_global_forward_hooks_with_kwargs`` are removed too). Each
recording adds its own hooks on its model's root (the inputs and output of each call) and on its
optimizer (the step). So two recordings in one thread, nested or started and stopped in any
order, each receive the events of their own model, and after the last one stops torch's hook
dictionaries and mode stacks are exactly as they were. Events are delivered to the recordings of
the thread that made them; a recording only ever sees its own thread (the model called from
another thread runs untouched, and is counted so a profiler can say so). When several recordings
of one thread want the same op, it runs once, each timing it around the others.

Phases, by event (never by position)
------------------------------------
* ``forward``: inside a call of one of the model's modules;
* ``loss``: outside the model, after a forward and before that step's next backward;
* ``backward``: inside autograd's graph task (:func:`torch_flops.backward.in_backward`): each op is
  counted for the forward node that created its autograd node (:class:`BackwardCounter`);
* ``optimizer``: inside ``optimizer.step`` (its update is counted per parameter by
  :mod:`torch_flops.optim`); work outside the model after a backward (gradient clipping,
  ``GradScaler.unscale_``) is decided when the next event comes: an optimizer step (or GradScaler's
  update, ``aten._amp_update_scale_``, with no step before it) makes it the update's, a forward
  (gradient accumulation) the loop's own ``loss`` phase work.

Steps (:class:`Steps`): ``ONE`` (the whole recording, e.g. one ``propagate``), ``OPTIMIZER`` (a
training step ends when the optimizer has stepped, when GradScaler's update shows it skipped the
step, or when the step raised; what runs outside the model between then and the next forward, such
as GradScaler's update, is optimizer work counted at the start of the next step; without an
optimizer, a forward after a backward begins a new step) and ``CALL`` (every call of the model is
a step: the prefill and decode steps of generation). Each finished :class:`Step` holds the graph
of what it ran, its backward, its optimizer updates and its wall time.

Exceptions raised by the model (or a loss function) come out as themselves; a recording adds a
note naming the op or module that raised and its inputs, and stops cleanly on every exit path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import operator
import sys
import threading
import time
import types
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch._C import DispatchKey
from torch._ops import HigherOrderOperator
from torch.nn.modules import module as module_hooks
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from torch_flops.backward import (
    BackwardCounter,
    BackwardRun,
    SequenceMap,
    autograd_nodes,
    current_autograd_node,
    in_backward,
    saved_bytes,
)
from torch_flops.capture import ONE_KERNEL_MODULES, ModelIndex, NodeLocation, traced_through_now
from torch_flops.errors import UnsupportedOpError
from torch_flops.formulas import FormulaTable
from torch_flops.formulas.zero import GRAPH_PLUMBING
from torch_flops.measure import MemoryProbe, Timer, batch_size_of, functions_off, tensors_of
from torch_flops.measuring import GraphRun, Measurements, add_note, describe_inputs
from torch_flops.optim import optimizer_step_counts, update_traffic
from torch_flops.paths import module_chain
from torch_flops.progress import Progress
from torch_flops.recorder import EagerGraph, GraphMemo, op_name, readable

__all__ = ["OptimizerUpdate", "Recording", "Step", "Steps", "installed"]

FORWARD, LOSS, OPTIMIZER = "forward", "loss", "optimizer"
_SELF = object()  # "inside a node": the profiler's own bookkeeping, or a paused recording
_COND = torch.ops.higher_order.cond
_WHILE_LOOP = torch.ops.higher_order.while_loop
#: forward-mode AD (torch.func.jvp, jacfwd, hessian; forward_ad.dual_level) computes each op's tangent
#: as more aten ops inside the op's call: while a dual level is open (``_current_level`` >= 0) no
#: module or function is kept whole, so the dispatch mode records the tangents' ops too
_FORWARD_AD = torch.autograd.forward_ad
#: aten ops that read tensor values into Python (meta tensors have none)
_NEEDS_VALUES = frozenset({"_local_scalar_dense", "item", "is_nonzero", "equal", "nonzero", "nonzero_static",
                           "masked_select", "unique", "_unique", "_unique2", "unique_consecutive", "unique_dim",
                           "repeat_interleave", "bincount", "allclose", "tolist",
                           # on meta these fail only in their value-reading forms: torch.where(cond),
                           # x[mask] and x[mask] = v (a boolean mask is a nonzero)
                           "where", "getitem", "setitem", "index", "index_put"})


def _meta_grouped_mm(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], error: RuntimeError) -> Any:
    """The output of a grouped matmul on meta in a dtype its meta kernel refuses, or None.

    ``torch._grouped_mm``'s meta kernel (torch 2.13) accepts bfloat16 only, as the CUDA kernel
    does, while the CPU kernel also runs float32 and float16: an MoE model (Mixtral, Qwen3-MoE,
    gpt-oss: transformers' ``grouped_mm`` experts) built on meta in float32 cannot run there. Its
    output's shape depends on the operands' shapes only, so it is what the kernel gives for the same
    shapes in bfloat16, cast to the operands' dtype (the CPU kernel's output dtype; it refuses another
    ``out_dtype``, and so does this). None, and the meta kernel's error stands, for anything else:
    another op or message, mixed dtypes, an ``out_dtype`` of another dtype, shapes the bfloat16
    kernel refuses."""
    if getattr(func, "_opname", None) != "_grouped_mm" or "Expected inputs of BF16 type" not in str(error):
        return None
    tensors = [a for a in args[:2] if isinstance(a, torch.Tensor)]
    if len(tensors) != 2 or not all(t.is_meta and t.dtype in (torch.float32, torch.float16) for t in tensors):
        return None
    dtype = tensors[0].dtype
    # aten::_grouped_mm(Tensor self, Tensor mat2, Tensor? offs=None, Tensor? bias=None, ScalarType? out_dtype=None)
    out_dtype = kwargs.get("out_dtype", args[4] if len(args) > 4 else None)
    if tensors[1].dtype is not dtype or out_dtype not in (None, dtype):
        return None
    rest = {k: v for k, v in kwargs.items() if k != "out_dtype"}
    try:
        return func(*(t.to(torch.bfloat16) for t in tensors), *args[2:4], **rest).to(dtype)
    except RuntimeError:  # (bfloat16's 16-byte stride rule on a narrow float32 matrix)
        return None


_TENSOR_BACKWARD = torch.Tensor.backward  # (its seed gradient is the backward's)
_AMP_UPDATE = "_amp_update_scale_"  # GradScaler.update(): the end of an AMP step, the optimizer's or not
#: Tensor dunder methods that fx records as the ``operator`` function
_DUNDERS = {"__getitem__": __import__("operator").getitem, "__setitem__": __import__("operator").setitem}


class Steps(enum.Enum):
    """How a recording splits into steps (see the module docstring)."""

    ONE = "one"
    OPTIMIZER = "optimizer"
    CALL = "call"


@dataclass(frozen=True)
class OptimizerUpdate:
    """One parameter's update in an optimizer step: its FLOPs (:mod:`torch_flops.optim`) and the
    bytes it reads (parameter, gradient, optimizer state) and writes (parameter, state)."""

    param: torch.Tensor
    flops: int
    bytes_read: int
    bytes_written: int
    macs: int = 0  #: the update's matrix products (Muon's Newton-Schulz iteration); 0 element-wise


@dataclass
class Step:
    """What one step of a recording ran (see :class:`Steps`)."""

    graph: EagerGraph  #: the forward, loss and clipping nodes, measured
    backward: BackwardRun | None  #: its backward, per forward node (None: no backward recorded)
    updates: list[OptimizerUpdate]  #: the optimizer's update of each parameter (empty: none ran)
    optimizer_ms: float | None  #: the optimizer step's measured time
    duration_ms: float  #: wall clock from the step's start to its end (its optimizer step's end)
    peak_memory: int | None  #: CUDA: the allocator's peak during the step; else None
    batch_size: int | None  #: the first dimension of the first call's first tensor input
    calls: int  #: calls of the model in the step
    output: Any = None  #: the model's last output in the step
    #: GradScaler's update ran without an optimizer step (inf/NaN gradients: the step was skipped)
    skipped_update: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  #: what a session adds (the KV cache after a decode step)

    def graph_run(self, timer: Timer, times: Sequence[float | None] | None = None,
                  backward_times: Sequence[float | None] | None = None) -> GraphRun:
        """The step's measurements (``times``: per node, medians over several steps)."""
        run = self.graph.measured(None if times is None else list(times))
        if self.backward is not None:
            run = run.with_backward(self.backward, timer, backward_times)
        return run

    def measurements(self, timer: Timer, device: torch.device, times: Sequence[float | None] | None = None,
                     backward_times: Sequence[float | None] | None = None) -> Measurements:
        return Measurements.of([self.graph_run(timer, times, backward_times)], device, self.graph.memory_source)


class Recording:
    """A recording of one model's eager execution in the thread that starts it (see the module
    docstring). ``index``: the model's :class:`ModelIndex`, made with the formula ``table`` (it
    says which modules are kept whole); ``backward``: count the backward of what is recorded;
    ``optimizer``: its steps are the optimizer phase; ``outside``: also record the ops that run
    outside the model (the loss, gradient clipping); ``on_step``: called with each finished step.
    ``sequences`` (with ``forward_nodes``): record only the backward of a forward the graph
    interpreter ran, which marked its ``forward_nodes`` nodes' autograd nodes there
    (:attr:`backward_run` holds it). ``compiled_eagerly``: once Dynamo is loaded, compiled code (a
    ``torch.compile``'d submodule, a compiled function the forward calls) runs eagerly while it
    records, its ops recorded (Dynamo's process-wide "force_eager" stance; compiled, Dynamo would
    trace the recording's own hooks into its graphs, and a compiled function it skips under the
    recording's dispatch mode stays marked never to compile again);
    False for a compiled model whose compiled calls are profiled beside it (TrainingProfiler)."""

    def __init__(self, index: ModelIndex, table: FormulaTable, *, timer: Timer, memory: MemoryProbe,
                 device: torch.device, ignored: Iterable[str] = (), backward: bool = False,
                 optimizer: torch.optim.Optimizer | None = None, steps: Steps = Steps.ONE, outside: bool = True,
                 on_step: Callable[[Step], None] | None = None, sequences: SequenceMap | None = None,
                 forward_nodes: int = 0, progress: Progress | None = None,
                 planned: dict[Any, Any] | None = None, compiled_eagerly: bool = True) -> None:
        self.index = index
        # (only once Dynamo is loaded, which torch.compile does: the stance is process-wide. A model may
        # call a compiled submodule or a compiled function; one called under the recording's dispatch
        # mode without the stance would be skipped by Dynamo, and marked never to compile again)
        self._compiled_eagerly = compiled_eagerly and "torch._dynamo.eval_frame" in sys.modules
        self._dynamo_loaded_inside = False  #: Dynamo was not loaded when it started (see start)
        self.model = index.model
        self._table = table
        self._ignored = tuple(ignored)
        self.timer = timer
        self._tick = timer.tick
        self._memory = memory
        self._read = memory.read
        self.device = device
        self._backward = backward
        self.optimizer = optimizer
        self._steps_rule = steps
        self._outside = outside
        self._on_step = on_step
        self._progress = progress if progress is not None and progress.enabled else None
        #: each target's plan, shared by the steps of this recording (given: by more recordings)
        self._planned: dict[Any, Any] = {} if planned is None else planned
        self._memo = GraphMemo()  #: the last graph its steps built (EagerGraph)
        self._record_forward = sequences is None
        self._sequences = sequences
        self._forward_nodes = forward_nodes
        self.backward_run: BackwardRun | None = None  #: the backward of a graph run (``sequences``)
        self.steps: list[Step] = []  #: the finished steps, in order
        self.needs_values = False  #: the model read a value of a meta tensor (``.item()``): it cannot run on meta
        self.other_thread_calls = 0  #: calls of the model made by other threads while recording
        self._paths = index.paths
        self._types = index.types
        self._leaves = index.leaves
        self._chosen = index.chosen  # (the leaves the user asked for: whole even with pre-hooks)
        #: the model itself is one node (capture._root_kept_whole: one that picks its kernels by what is
        #: installed on it, forward hooks included; an RNN layer): no hooks on it, its calls begin and end
        #: in post_module
        self._root_whole = id(self.model) in index.leaves
        self._root = NodeLocation("", index.types.get("", type(self.model).__name__), ())
        self._thread = 0
        self._hub: _Hub | None = None
        self._handles: list[Any] = []
        self._started = False
        self._function_targets: dict[Any, Any] = {}
        self._open: Any = None  # the module (or function) node being timed, or _SELF: the calls inside are its own
        self._failed: tuple[str, Any] | None = None  # the last op that raised, and its arguments (for the note)
        self._via: Any = None  # the torch function without a formula running now (its aten ops are recorded)
        self._updates: list[OptimizerUpdate] = []
        self._reset_stack()
        self._in_optimizer = False
        self._step_begun = False  # optimizer.step() was called (its first pre-hook ran) and has not returned
        self._stepped = False  # the update is recorded, and step() has not returned (the user's post-hooks run)
        self._returns_id: int | None = None  # the handle id of the post-hook that ends a step (_step_returns)
        self._graph: EagerGraph | None = None
        self._aside = (False, False)  # (modes off, hooks off): see stepped_aside
        self._untimed_depth = 0
        self._untimed_s = 0.0  # wall seconds of the step spent in untimed() work

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start recording this thread's calls (``RuntimeError`` when already started)."""
        if self._started:
            raise RuntimeError("this recording is already started")
        self._thread = threading.get_ident()
        self._begin_step()
        if self._record_forward:
            self._handles = self._model_hooks()
        if self.optimizer is not None:
            # four hooks: a first pre-hook marks the step begun (a pre-hook of the user's that raises before
            # the next one ends the step all the same); the last pre-hook counts the update (the user's may
            # change the gradients first); the first post-hook records it (a user's that raises comes after
            # it); the last post-hook ends the step, so what the user's post-hooks run is its optimizer work
            optimizer = self.optimizer
            begun = optimizer.register_step_pre_hook(self._step_begins)
            after = optimizer.register_step_post_hook(self._after_step)
            for hooks, handle in ((getattr(optimizer, "_optimizer_step_pre_hooks", None), begun),
                                  (getattr(optimizer, "_optimizer_step_post_hooks", None), after)):
                if isinstance(hooks, OrderedDict) and handle.id in hooks:  # (a wrapper's hooks may live elsewhere)
                    hooks.move_to_end(handle.id, last=False)
            returns = optimizer.register_step_post_hook(self._step_returns)
            self._returns_id = returns.id  # (kept last: see _step_begins)
            self._handles += [begun, optimizer.register_step_pre_hook(self._before_step), after, returns]
        try:
            self._hub = _Hub.join(self)
        except BaseException:
            self._remove_handles()
            raise
        self._started = True
        # each module call of the model goes through torch's hook path (one more frame a level) and
        # the profiler's own calls sit below the model: a model nested as deep as eager Python
        # allows would hit the recursion limit only under the profiler. Raised by as much meanwhile.
        depth = max((path.count(".") + 1 for path in self._paths.values() if path), default=0)
        _RECURSION.hold(self, 2 * depth + 100)
        if self._compiled_eagerly:
            _EAGER_STANCE.hold(self)
        # (Dynamo not loaded yet: no stance could be set, and a function first compiled inside the forward
        # meets the dispatch mode; once loaded, the stance keeps Dynamo out, or compiled calls run as they
        # do, a compiled model's in TrainingProfiler, whose frames Dynamo decides on as without us)
        self._dynamo_loaded_inside = "torch._dynamo.convert_frame" not in sys.modules

    def stop(self) -> None:
        """Stop recording: the step under way is finished (kept when the model ran in it), every
        mode and hook of this recording is removed. Safe to call twice, and on every exit path."""
        if not self._started:
            return
        if self._aside != (False, False):  # stopped while aside: back on, then off as usual
            self._set_aside((False, False))
        self._started = False
        _RECURSION.release(self)
        _EAGER_STANCE.release(self)
        if self._dynamo_loaded_inside:
            _forget_first_skips()
        try:
            if self._hub is not None:
                self._hub.leave(self)
        finally:
            self._hub = None
            self._remove_handles()
            self._open = None
            if self._in_optimizer:  # a step that raised never reached its post-hook: it updated nothing
                self._in_optimizer = False
                self._updates = []
            self._finish_step()

    def __enter__(self) -> Recording:  # noqa: PYI034  (typing_extensions is no dependency)
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _remove_handles(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Nothing this thread runs inside is recorded, by this recording or any other (the
        profiler's own work during a recording)."""
        hub, outer, self._open = self._hub, self._open, _SELF
        if hub is not None:
            hub.quiet += 1
        try:
            with torch._C.DisableTorchFunction():
                yield
        finally:
            if hub is not None:
                hub.quiet -= 1
            self._open = outer

    def _model_hooks(self) -> list[Any]:
        if self._root_whole:  # its calls begin and end at the hub's global hooks (post_module)
            return []
        return [self.model.register_forward_pre_hook(self._call_begins, with_kwargs=True),
                self.model.register_forward_hook(self._call_ends)]

    @contextlib.contextmanager
    def stepped_aside(self, *, modes: bool = True, hooks: bool = True) -> Iterator[None]:
        """Inside, what this recording installed is off torch, so that a ``torch.compile``'d call
        runs as it runs without a profiler (Dynamo runs a frame eagerly under a dispatch mode,
        traces into a function mode and breaks its graph at hooks it cannot trace;
        ``OptimizedModule`` warns while a global module hook exists). ``modes``: this thread's
        dispatch and function modes are off their stacks (no op is recorded, by any recording of
        the thread); ``hooks``: this recording's hooks on its model are removed, and so are the
        process-wide module hooks while no other thread records. On exit, exactly what was on
        before is put back: a nested ``stepped_aside(modes=False, hooks=False)`` puts everything
        back for its duration."""
        if not self._started:
            yield
            return
        before = self._aside
        self._set_aside((modes, hooks))
        try:
            yield
        finally:
            if self._started:
                self._set_aside(before)

    def _set_aside(self, state: tuple[bool, bool]) -> None:
        modes, hooks = state
        was_modes, was_hooks = self._aside
        hub = self._hub
        if hub is not None and modes != was_modes:
            if modes:
                hub.modes_off()
            else:
                hub.modes_on()
        if hooks != was_hooks:
            model_hooks = 2 if self._record_forward and not self._root_whole else 0
            if hooks:
                for handle in self._handles[:model_hooks]:
                    handle.remove()
                with _LOCK:
                    if set(_HUBS) <= {self._thread}:  # no other thread records: nobody needs them meanwhile
                        _remove_global_hooks()
            else:
                self._handles[:model_hooks] = self._model_hooks() if model_hooks else []
                with _LOCK:
                    _install_global_hooks()
        self._aside = state

    @contextlib.contextmanager
    def untimed(self) -> Iterator[None]:
        """What runs inside is the profiler's own work, not the step's (a shadow run, a compile):
        its wall time is left out of the step's duration."""
        self._untimed_depth += 1
        if self._untimed_depth == 1 and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        start = time.perf_counter()
        try:
            yield
        finally:
            self._untimed_depth -= 1
            if self._untimed_depth == 0:
                if self.device.type == "cuda":
                    torch.cuda.synchronize(self.device)
                self._untimed_s += time.perf_counter() - start

    def record_grad(self, outputs: Sequence[torch.Tensor], grad_outputs: Sequence[torch.Tensor],
                    inputs: Sequence[torch.Tensor]) -> None:
        """``torch.autograd.grad(outputs, inputs, grad_outputs)`` recorded as :meth:`run_backward`
        records ``loss.backward()``: the backward of recorded ``outputs`` (an eager shadow run's),
        counted per forward node, while nothing accumulates into any ``.grad``. Its graph is kept
        (a second backward of the program the shadow stands for can be recorded again)."""
        assert self._counter is not None, "a recording with backward=True"
        self._saved(*(o.grad_fn for o in outputs))
        try:
            torch.autograd.grad(list(outputs), list(inputs), list(grad_outputs), retain_graph=True,
                                allow_unused=True)
        finally:
            self.timer.finish()

    def record_call(self, args: tuple[Any, ...], kwargs: dict[str, Any],
                    loss_fn: Callable[[Any], Any] | None = None) -> tuple[Any, Any]:
        """While started: one call of the model, and ``loss_fn(output)`` when given, recorded;
        returns the output and the loss. An exception comes out as itself, with a note naming the
        op or module that raised."""
        self._in_loss = False
        try:
            output = self.model(*args, **kwargs)
            loss = None
            if loss_fn is not None:
                self._in_loss = True
                self._failed = None
                loss = loss_fn(output)
            return output, loss
        except Exception as e:
            add_note(e, f"torch_flops: {self._failure_message(e)}")
            raise
        finally:
            self._in_loss = False

    def run_backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()`` recorded: every op autograd runs is counted for the forward node that
        caused it; what the forward saved for it is measured first."""
        assert self._counter is not None, "a recording with backward=True"
        with self.paused():  # the profiler's own reads of what was saved are no node
            self._saved(loss.grad_fn)
        self._seeding = True  # the seed gradient (ones_like) is the backward's, not a loss node
        try:
            loss.backward()
        finally:
            self._seeding = False
            self.timer.finish()

    # ------------------------------------------------------------------ steps
    def _begin_step(self) -> None:
        if self._record_forward:
            sequences = self._sequences = SequenceMap() if self._backward else None
            self._graph = EagerGraph(self.index, self._table, self._ignored, self.timer, self._memory, sequences,
                                     self._progress, self._planned, self._memo)
        else:
            sequences, self._graph = self._sequences, None
        if sequences is not None:
            counter = BackwardCounter(self._table, sequences, BackwardRun.empty(self._forward_nodes), self.timer)
            counter.first_op = self._first_backward_op
            self._counter: BackwardCounter | None = counter
        else:
            self._counter = None
        self._step_start = time.perf_counter()
        self._untimed_s = 0.0
        self._calls = 0
        self._batch: int | None = None
        self._last_output: Any = None
        self._after_backward = False
        self._just_stepped = False  # the optimizer stepped and no forward since (its machinery may follow)
        self._skipped_update = False
        self._raised = False  # the model's last call raised (the step ends at the next forward)
        self._pending: list[int] = []
        self._in_optimizer = False
        self._in_closure = False
        self._updates = []
        self._optimizer_ms: float | None = None
        self._saved_keys: frozenset[int] = frozenset()
        self._seeding = False
        self._in_loss = False
        self._failed = None
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def _finish_step(self) -> None:
        with self.paused():  # the profiler's own tensor calls are no nodes
            self._close_step()

    def _close_step(self) -> None:
        graph, self._graph = self._graph, None
        if graph is None:
            if self._counter is not None and not self._record_forward:  # the backward of a graph run
                self.timer.finish()
                run = self.backward_run = self._counter.run
                run.grow(self._forward_nodes)
                run.saved_bytes += [0] * (self._forward_nodes - len(run.saved_bytes))
                self._counter = None
            return
        self.timer.finish()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        duration = (time.perf_counter() - self._step_start - self._untimed_s) * 1e3
        if not self._calls:  # the model did not run in it (stopped right after a step): no step
            return
        if self._pending:  # after the last backward, with no optimizer step: the loop's own work
            self._label(LOSS, graph)
        graph.add_output(self._last_output)
        graph.finish()
        backward = None
        if self._counter is not None:
            backward = self._counter.run
            backward.grow(graph.n)
            if len(backward.saved_bytes) < graph.n:
                backward.saved_bytes = backward.saved_bytes + [0] * (graph.n - len(backward.saved_bytes))
            graph.kept_storages = self._saved_keys
        step = Step(graph=graph, backward=backward, updates=self._updates, optimizer_ms=self._optimizer_ms,
                    duration_ms=duration, calls=self._calls, batch_size=self._batch, output=self._last_output,
                    peak_memory=torch.cuda.max_memory_allocated(self.device) if self.device.type == "cuda" else None,
                    skipped_update=self._skipped_update)
        self.steps.append(step)
        if self._on_step is not None:
            self._on_step(step)

    def _new_step(self) -> None:
        self._finish_step()
        self._begin_step()

    def _end_step(self) -> None:
        """The optimizer stepped (or GradScaler skipped its step, or the step raised): the step is
        over; what runs outside the model before the next forward is its machinery's."""
        if self._pending:
            self._label(OPTIMIZER)
        if self._steps_rule is Steps.OPTIMIZER:
            self._new_step()
        self._just_stepped = True

    def _label(self, phase: str, graph: EagerGraph | None = None) -> None:
        """The phase of the nodes recorded outside the model since the last backward, now known."""
        graph = graph or self._graph
        assert graph is not None
        phases = graph.phases
        for i in self._pending:
            phases[i] = phase
        self._pending = []

    def _forward_begins(self) -> None:
        """A call of one of the model's modules begins with none running (an event of the steps)."""
        if self._raised:  # the step raised, and the loop went on: that step is over (if the model ran in it)
            self._raised = False
            if self._calls:
                self._new_step()
        if self._pending:  # the loop's own work (the next batch's inputs), after a step as before the first
            self._label(LOSS)  # (GradScaler's update after a step is labelled at its op)
        if self._steps_rule is Steps.OPTIMIZER and self.optimizer is None and self._after_backward:
            self._new_step()  # without an optimizer, a forward after a backward begins a step
        self._after_backward = self._just_stepped = False

    # ------------------------------------------------------------------ the model's calls
    def _call_begins(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if threading.get_ident() != self._thread:
            self.other_thread_calls += 1
            return
        if in_backward() or self._graph is None or (self._open is not None and self._open is not module):
            return  # a recompute inside the backward; a call inside a node (paused); (the model kept whole is open)
        self._calls += 1
        with self.paused():  # the profiler's own tensor calls are no nodes
            if self._batch is None:
                self._batch = batch_size_of((args, kwargs))
            self._graph.add_inputs(self.model, args, kwargs)

    def _call_ends(self, module: nn.Module, args: Any, output: Any) -> None:
        if threading.get_ident() != self._thread or in_backward() or self._graph is None or self._open is not None:
            return
        self._last_output = output
        if self._steps_rule is Steps.CALL:
            self._new_step()

    # ------------------------------------------------------------------ module events (from the hub)
    def _reset_stack(self) -> None:
        self._location = self._root
        self._stack: list[NodeLocation] = []
        self._open = None  # the module (or function) node being timed: the calls inside it are its own
        self._open_level = 0
        self._open_start: Any = None
        self._open_before: int | None = None
        self._open_args: Any = None

    def inside(self) -> bool:
        """Whether one of the model's modules is running (its forward phase)."""
        return bool(self._stack)

    def pre_module(self, module: nn.Module) -> bool:
        """A module call begins; True when this recording opened a node for it (the ops inside
        are that node's)."""
        path = self._paths.get(id(module))
        if path is None or self._graph is None:  # a module of another model: its ops are its caller's
            return False
        # (a step hook of the user's may call the model: inside step(), nothing ended)
        if self._step_unreturned() and not _calls_running(_STEP_CALL, self.optimizer, 1):
            self._end_unreturned_step()
        if module is self.model and self._stack and self._hub is not None:
            # a call of the model while an earlier one never returned: from its own forward (a model
            # calling itself: torch's call of it still runs further up), or after it (a KeyboardInterrupt
            # went past its hooks, and the loop caught it: that call is over, and, as a step that raises,
            # its step)
            if not _calls_running(_CALL_IMPL, self.model, 2):  # (the first is this call's own)
                self._raised = True
            self._reset_stack()
            self._hub.resume(self._hub._suspended)
        if not self._stack:
            if self._open is not None:  # inside a paused stretch (the optimizer's step)
                return False
            self._forward_begins()
        outer = self._location
        self._stack.append(outer)
        self._location = _location(outer.chain, path, self._types.get(path, "")) if path else \
            NodeLocation(path, self._types.get(path, ""), outer.chain)
        # (a module with forward pre-hooks of the user's is recorded through its ops: its pre-hooks run
        # after this global one, and their work would be inside the node, uncounted; but a module the user
        # asked to keep whole, and those whose one kernel depends on what is installed around them)
        if self._open is None and id(module) in self._leaves and (_FORWARD_AD._current_level < 0 or (
                module is self.model and self._root_whole)) \
                and (not module._forward_pre_hooks or id(module) in self._chosen or isinstance(module, ONE_KERNEL_MODULES)) \
                and (id(module) in self._chosen or not traced_through_now(module)):
            self._open, self._open_level = module, len(self._stack)
            self._open_before = self._read() if self._read is not None else None
            self._open_start = self._tick()
            return True
        return False

    def post_module(self, module: nn.Module, args: Any, kwargs: Any, result: Any, failed: bool) -> None:
        """A module call ended (``failed``: it raised; the stack unwinds, the open module stays for
        the message)."""
        if id(module) not in self._paths or not self._stack:
            return
        if module is self._open and len(self._stack) == self._open_level:
            if failed:
                path = self._paths[id(module)]
                self._failed = (f"node {path.replace('.', '_')!r} ({type(module).__name__} in module {path!r})",
                                self._open_args if self._open_args is not None else args)
                self._open = None  # the model may catch it and go on: record again
            else:
                end = self._tick()
                after = self._read() if self._read is not None else None
                if module is self.model and self._root_whole:  # (its inputs: before its node)
                    self._call_begins(module, args, kwargs or {})
                self._open = None
                self._add("call_module", self._paths[id(module)], module, FORWARD, args, kwargs or {}, result,
                          self._open_start, end, self._open_before, after)
                if module is self.model and self._root_whole:
                    self._call_ends(module, args, result)
        self._location = self._stack.pop()
        if failed and not self._stack and not self._in_optimizer and threading.get_ident() == self._thread:
            # the model's call raised: a step that raises ends its step, as an optimizer step that raises
            # does; a loop that catches it and goes on starts the next step with its next forward
            self._raised = True

    # ------------------------------------------------------------------ op events (from the hub)
    def _phase(self) -> str | None:
        """The phase of an op about to run outside a node, or None when it is not recorded."""
        if self._stack:
            return FORWARD
        if self._in_optimizer or not self._outside or self._graph is None:
            return None
        if self._after_backward or self._just_stepped:
            return OPTIMIZER  # provisional: decided by the next event (see _label)
        return LOSS

    def wants(self) -> bool:
        """Whether an op about to run (outside the backward) would be recorded by this recording."""
        return self._open is None and (self._seeding or self._phase() is not None)

    def records_nothing_outside(self) -> bool:
        """Whether no call made outside the model's modules is recorded or counted by this recording
        now (``outside=False``, no backward counted, no seed gradient running): every op and torch
        function would only pass through it."""
        return not self._outside and self._counter is None and not self._seeding

    def stepping(self) -> bool:
        """Whether this recording's optimizer is stepping (outside a closure's forward and backward)."""
        return self._in_optimizer and not self._in_closure

    def counting_backward(self) -> bool:
        """Whether this recording counts the backward ops autograd runs now."""
        return self._counter is not None and (self._graph is not None or not self._record_forward)

    def op(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
           inner: Callable[[], Any] | None = None) -> Any:
        """Run one aten op (outside any node of this recording) and record it."""
        if self._open is not None or func.namespace == "profiler":  # inside a node; an autograd profiler marker
            return func(*args, **kwargs) if inner is None else inner()
        if self._seeding and self._counter is not None:  # the seed gradient of a backward we run
            return self._counter.op(func, args, kwargs, inner)
        phase = self._phase()
        if phase is None:
            return func(*args, **kwargs) if inner is None else inner()
        read = self._read
        before = read() if read is not None else None
        start = self._tick()
        try:
            out = func(*args, **kwargs) if inner is None else inner()
        except RuntimeError as e:
            out = _meta_grouped_mm(func, args, kwargs, e)
            if out is None:
                self._op_failed(func, args)
                raise
        except Exception:
            self._op_failed(func, args)
            raise
        end = self._tick()
        self._failed = None
        after = read() if read is not None else None
        self._add("call_function", func, None, phase, args, kwargs, out, start, end, before, after)
        if self._via is not None and self._graph is not None:
            self._graph.called_as[self._graph.n - 1] = self._via
        if func._opname == _AMP_UPDATE and self._steps_rule is Steps.OPTIMIZER and not self._just_stepped:
            # GradScaler.update() with no optimizer step since the forward: it skipped the step
            self._skipped_update = True
            self._end_step()
        elif func._opname == _AMP_UPDATE and self._pending:  # GradScaler.update() after a step: its machinery
            self._label(OPTIMIZER)
        return out

    def function(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                 inner: Callable[[], Any] | None = None, suspend: Callable[[], Any] | None = None,
                 resume: Callable[[Any], None] | None = None) -> Any:
        """Run one torch function or Tensor method: as one node when it has a formula of its own,
        else through (its aten ops are recorded)."""
        if func is _TENSOR_BACKWARD and self._counter is not None and not self._seeding \
                and isinstance(args[0], torch.Tensor) and self.counting_backward():
            # the user's loss.backward() (a training step): its seed gradient (ones_like) is the
            # backward's, not a node of the loss, as in a backward this recording runs itself, and
            # what the forward saved is measured first, as there (run_backward)
            with self.paused():
                self._saved(args[0].grad_fn)
            self._seeding = True
            self._raised = False  # (a backward: the loop goes on with this step, whatever raised before it)
            try:
                return func(*args, **kwargs) if inner is None else inner()
            except BaseException:  # (a KeyboardInterrupt the loop catches too)
                self._raised = not self._in_optimizer  # a backward that raises ends its step
                raise
            finally:
                self._seeding = False
        target = self._function_target(func) if self._open is None and not self._seeding \
            and _FORWARD_AD._current_level < 0 else None
        if target is None and self._open is None and self._via is None:  # its aten ops are recorded
            self._via = func  # (named after this call in messages)
            try:
                return func(*args, **kwargs) if inner is None else inner()
            finally:
                self._via = None
        phase = self._phase() if target is not None else None
        if phase is None:
            return func(*args, **kwargs) if inner is None else inner()
        op, fx_target = target  # type: ignore[misc]
        read = self._read
        before = read() if read is not None else None
        self._open = func  # the aten ops inside are this node's
        token = suspend() if suspend is not None else None
        start = self._tick()
        try:  # the dispatch mode stays off while the node is recorded too (the profiler's own ops, e.g.
            try:  # the attention formula's kernel choice, skip a Python dispatch each)
                out = func(*args, **kwargs) if inner is None else inner()
            except Exception:
                name = fx_target if op == "call_method" else op_name(fx_target)
                what = f"Tensor.{fx_target}" if op == "call_method" else readable(op, fx_target)
                self._failed = (f"node {self._next_name(name)!r} ({what})", args)
                if name in _NEEDS_VALUES and any(isinstance(a, torch.Tensor) and a.is_meta
                                                 for a in (*args, *kwargs.values())):
                    self.needs_values = True  # torch.masked_select, torch.repeat_interleave: a node of their own
                self._raised_outside()
                raise
            finally:
                end = self._tick()
                self._open = None
            self._failed = None
            after = read() if read is not None else None
            self._add(op, fx_target, None, phase, args, kwargs, out, start, end, before, after)
        finally:
            if resume is not None:
                resume(token)
        return out

    def backward_op(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                    inner: Callable[[], Any] | None = None) -> Any:
        """An op autograd runs: counted for the forward node that caused it."""
        counter = self._counter
        if not self.counting_backward():
            return func(*args, **kwargs) if inner is None else inner()
        assert counter is not None
        if not self._stack:  # (a torch.autograd.grad inside the forward is the forward's: no event of the steps)
            if self._pending:  # what ran outside the model since the last backward fed this one: loss work
                self._label(LOSS)
            self._after_backward = True
        return counter.op(func, args, kwargs, inner)

    def owns_backward(self, node: Any) -> bool:
        """Whether the autograd node running now is of this recording's forward (or accumulates
        into one of its model's parameters)."""
        if self._counter is None:
            return False
        if self._counter._sequences.owner(node) is not None:
            return True
        variable = getattr(node, "variable", None)
        return variable is not None and id(variable) in self.index.attrs

    def owns_values(self, args: Any) -> bool:
        """Whether any tensor of ``args`` is a value one of this recording's nodes computed, or its
        model's (a parameter, a buffer, a parameter's gradient)."""
        graph = self._graph
        if graph is None:
            return False
        attrs = self.index.attrs
        grads = {id(p.grad) for p in self.index.parameters if p.grad is not None}
        return any(graph.made(t) or id(t) in attrs or id(t) in grads for t in tensors_of(args))

    def _add(self, op: str, target: Any, module: nn.Module | None, phase: str, args: tuple[Any, ...],
             kwargs: dict[str, Any], out: Any, start: Any, end: Any, before: int | None, after: int | None) -> None:
        """Record a node that ran."""
        graph = self._graph
        assert graph is not None
        hub, outer, self._open = self._hub, self._open, _SELF  # the profiler's own tensor calls are no nodes
        if hub is not None:
            hub.quiet += 1
        try:
            # with torch functions off: neither a mode below ours (the user's: inside our handler, torch has
            # taken only ours off) nor a subclass's __torch_function__ sees the profiler's own tensor calls
            first = graph.n
            with torch._C.DisableTorchFunction():
                graph.add(op, target, module, self._location, phase, args, kwargs, out, start, end, before, after)
            if phase == OPTIMIZER and not self._in_optimizer:  # its node, and the constants or tuple items it
                self._pending.extend(range(first, graph.n))  # read, added before it

        finally:
            if hub is not None:
                hub.quiet -= 1
            self._open = outer

    def _op_failed(self, func: Any, args: tuple[Any, ...]) -> None:
        name = op_name(func)
        self._failed = (f"node {self._next_name(name)!r} (aten.{name})", args)
        self._raised_outside()
        if name in _NEEDS_VALUES and any(isinstance(a, torch.Tensor) and a.is_meta for a in args):
            self.needs_values = True

    def _raised_outside(self) -> None:
        """An op outside the model raised after a forward whose backward has not run (the loss of a bad
        batch): a step that raises ends its step, as one whose forward raises does, unless a backward
        follows (the loop recovered: a fallback loss). Before the step's forward (a bad sample the loop
        replaces) or after its backward, it ends nothing."""
        if not self._stack and not self._in_optimizer and self._calls and not self._after_backward:
            self._raised = True


    def _next_name(self, candidate: str) -> str:
        return self._graph.next_name(candidate) if self._graph is not None else candidate

    def _function_target(self, func: Any) -> tuple[str, Any] | None:
        """``(op, target)`` of the graph node a torch function or Tensor method call becomes, or
        None when the call has no formula of its own (its aten ops are recorded instead). Cached."""
        found = self._function_targets.get(func, _UNKNOWN)
        if found is _UNKNOWN:
            found = self._function_targets[func] = _function_target(func, self._table)
        return found  # type: ignore[return-value]

    def failure_note(self, e: BaseException) -> str:
        """The note naming the op or module whose call raised ``e`` (for an exception that left the
        model outside :meth:`record_call`, e.g. in the user's own training loop)."""
        return f"torch_flops: {self._failure_message(e)}"

    def _failure_message(self, e: BaseException) -> str:
        if self._in_loss and self._failed is None:  # the model returned; loss_fn's own code raised
            return f"loss_fn raised {type(e).__name__} on the model's output"
        where = self._location
        module = f" in module {where.path!r} ({where.module_type})" if where.path else ""
        n = self._graph.n if self._graph is not None else 0
        if self._failed is None:  # raised by the model's Python code, between calls
            return f"the model raised {type(e).__name__}{module} after {n} recorded node(s)"
        what, inputs = self._failed
        return f"running {what}{'' if ' in module ' in what else module} failed with inputs ({describe_inputs(inputs)})"

    # ------------------------------------------------------------------ the backward
    def _first_backward_op(self, node: Any) -> None:
        """At a backward's first op, before autograd frees what the forward saved."""
        self._saved(node)

    def _saved(self, *roots: Any) -> None:
        counter, sequences = self._counter, self._sequences
        assert counter is not None and sequences is not None
        if any(type(node).__name__ == "CondAutogradOpBackward" for node in autograd_nodes(list(roots))):
            # a torch.cond whose operand needed a gradient, run under this profiler's modes: its backward
            # would fail inside torch after some gradients were written (refused before any is)
            raise UnsupportedOpError(_COND_BACKWARD)
        n = self._graph.n if self._graph is not None else self._forward_nodes
        counter.run.grow(n)
        found, keys = saved_bytes(list(roots), sequences, n, self.index.storages)
        previous = counter.run.saved_bytes
        counter.run.saved_bytes = [a + b for a, b in zip(found, previous + [0] * (n - len(previous)))]
        self._saved_keys = self._saved_keys | keys

    # ------------------------------------------------------------------ the optimizer
    def _step_unreturned(self) -> bool:
        """Whether the last ``optimizer.step()`` began and never returned (outside its closure's calls)."""
        return (not self._in_closure and (self._in_optimizer or self._step_begun)) or self._stepped

    def _end_unreturned_step(self) -> None:
        """The last ``optimizer.step()`` raised: it ended its step, with the update recorded when a
        post-hook of the user's raised after it, without one when the step raised before it (in its
        body, its closure, a pre-hook of the user's)."""
        if not self._stepped:
            self._in_optimizer, self._open, self._updates = False, None, []
        self._stepped = self._step_begun = False
        self._end_step()

    def _step_begins(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if threading.get_ident() == self._thread and self._graph is not None:
            if self._step_unreturned():  # (its closure raised, and the loop went on to this step() without a
                self._end_unreturned_step()  # forward outside a closure)
            self._step_begun = True
            hooks = getattr(optimizer, "_optimizer_step_post_hooks", None)
            if isinstance(hooks, OrderedDict) and self._returns_id in hooks:  # after post-hooks added since start
                hooks.move_to_end(self._returns_id)

    @functions_off
    def _before_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> Any:
        if threading.get_ident() != self._thread or self._graph is None:
            return None
        if self._pending:  # clipping, unscaling: the update's work
            self._label(OPTIMIZER)
        self._in_optimizer = True
        self._open = _SELF  # paused: the update is counted per parameter, not op by op
        # args: (the optimizer, *step's own arguments) as the step wrapper passes them
        closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
        if closure is None:  # counted before the step's clock starts (it reads the gradients, it is no step work)
            self._counts = optimizer_step_counts(optimizer)
        self._optimizer_start = self._tick()
        if closure is None:
            return None
        # step(closure): the closure's forward and backward are the step's own; the update's FLOPs
        # are counted once it has made the gradients (the optimizer calls it before updating)
        self._counts = []

        def recorded_closure() -> Any:
            self._open, self._in_optimizer, self._in_closure = None, False, True
            try:
                return closure()
            finally:
                self._in_closure = False
                self._open, self._in_optimizer = _SELF, True
                self._counts = optimizer_step_counts(optimizer)

        return args[:1] + args[2:], {**{k: v for k, v in kwargs.items() if k != "closure"},
                                     "closure": recorded_closure}

    @functions_off
    def _after_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if threading.get_ident() != self._thread or not self._in_optimizer:
            return
        end = self._tick()
        self.timer.finish()
        self._optimizer_ms = self.timer.elapsed_ms(self._optimizer_start, end)
        self._updates = [OptimizerUpdate(param, flops, *update_traffic(optimizer, param), macs=macs)
                         for param, flops, macs in self._counts]
        self._open = None
        self._in_optimizer = self._step_begun = False
        self._stepped = True  # (the step ends when step() returns: the user's post-hooks run first)

    def _step_returns(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if threading.get_ident() == self._thread and self._stepped:
            self._stepped = False
            self._end_step()


# ---------------------------------------------------------------------------------------------
# the hub: what is installed per thread and process-wide
# ---------------------------------------------------------------------------------------------

_CALL_IMPL = nn.Module._call_impl.__code__
_STEP_CALL = torch.optim.Optimizer.profile_hook_step(lambda self: None).__code__  # (every step()'s wrapper)


def _calls_running(code: types.CodeType, owner: Any, enough: int) -> bool:
    """Whether at least ``enough`` frames of ``code`` run with ``self`` being ``owner`` up this
    thread's stack: torch's call of a module (``nn.Module._call_impl``), of an optimizer's step
    (``Optimizer.profile_hook_step``'s wrapper). Walked only on the rare events that need it."""
    found = 0
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code is code and frame.f_locals.get("self") is owner:
            found += 1
            if found == enough:
                return True
        frame = frame.f_back
    return False


_UNKNOWN = object()
_PLUMBING = frozenset(GRAPH_PLUMBING)
# torch's mode stacks, read and changed in C (the node's own calls then run natively)
_dispatch_depth, _dispatch_at = torch._C._len_torch_dispatch_stack, torch._C._get_dispatch_stack_at
_pop_dispatch, _push_dispatch = torch._C._pop_torch_dispatch_stack, torch._C._push_on_torch_dispatch_stack
_function_depth, _function_at = torch._C._len_torch_function_stack, torch._C._get_function_stack_at
_pop_function, _push_function = torch._C._pop_torch_function_stack, torch._C._push_on_torch_function_stack
_LOCK = threading.RLock()
_HUBS: dict[int, _Hub] = {}  # thread -> its hub, while it has recordings


class _HeldSetting:
    """A process-wide setting the running recordings (any threads, stopped in any order) hold: taken
    from ``read()`` when the first one starts, set to ``wanted(found, needs)`` for the needs of those
    running, put back when the last one stops. Left alone when not ours to change (``read()``
    None) and given up when someone else changed it meanwhile: it is then theirs."""

    def __init__(self, read: Callable[[], Any], write: Callable[[Any], None],
                 wanted: Callable[[Any, list[int]], Any], same: Callable[[Any, Any], bool] = operator.eq) -> None:
        # ``same``: whether what ``read()`` gives is still what this set (by identity where a value of
        # someone else's can be equal to ours: a stance the user sets while a recording runs)
        self._read, self._write, self._wanted, self._same = read, write, wanted, same
        self._needs: dict[int, int] = {}  # id(recording) -> what it needs
        self._found: Any = None
        self._set: Any = None  # the value this set last; None: not ours (any more)

    def hold(self, recording: object, need: int = 0) -> None:
        with _LOCK:
            if not self._needs:
                self._found = self._set = self._read()
            self._needs[id(recording)] = need
            self._apply()

    def release(self, recording: object) -> None:
        with _LOCK:
            if self._needs.pop(id(recording), None) is None:
                return
            if self._needs:
                self._apply()
            elif self._set is not None and self._same(self._read(), self._set):
                self._write(self._found)

    def _apply(self) -> None:
        if self._set is None or not self._same(self._read(), self._set):
            self._set = None  # set by someone else meanwhile (or never ours): left to them
            return
        self._set = self._wanted(self._found, list(self._needs.values()))
        self._write(self._set)


def _dynamo_stance() -> Any:
    """Dynamo's stance, when Dynamo is loaded (nothing was compiled otherwise), else None."""
    return getattr(sys.modules.get("torch._dynamo.eval_frame"), "_stance", None)


def _set_dynamo_stance(stance: Any) -> None:
    try:
        sys.modules["torch._dynamo.eval_frame"]._set_stance(stance)  # type: ignore[attr-defined]
    except RuntimeError:  # inside a compiled region: left as it is
        pass


#: each recording raises the recursion limit by what its model's nesting adds (the most of those running)
_RECURSION = _HeldSetting(sys.getrecursionlimit, sys.setrecursionlimit,
                          lambda found, needs: found + max(needs))
#: a recording runs compiled code eagerly once Dynamo is loaded (Recording), as the profiler's own eager
#: calls under a dispatch mode do (compiled_code_eagerly); from the default stance only: a stance the
#: user set is theirs
_EAGER_STANCE = _HeldSetting(_dynamo_stance, _set_dynamo_stance, lambda found, needs: dataclasses.replace(
    found, stance="force_eager") if found.stance == "default" else found, same=operator.is_)
_GLOBAL_HOOKS: list[Any] = []  # the module hooks' handles, while any hub exists


@contextlib.contextmanager
def compiled_code_eagerly() -> Iterator[None]:
    """Compiled code runs eagerly in the body (Dynamo's force_eager stance, held as a recording holds
    it): for an eager call of the profiler's own under a dispatch mode (the shadow of a compiled
    model's call, a count of eager kernels), where Dynamo would skip a compiled function the model
    calls and mark it never to compile again."""
    token = object()
    _EAGER_STANCE.hold(token)
    try:
        yield
    finally:
        _EAGER_STANCE.release(token)


class _Hub:
    """One thread's recordings and the modes that feed them."""

    def __init__(self, thread: int) -> None:
        self.thread = thread
        self.recordings: list[Recording] = []
        self.single: Recording | None = None  #: the only recording (the fast path), or None
        self.dispatch_mode = _DispatchMode(self)
        self.function_mode = _FunctionMode(self)
        self._suspended: tuple[bool, bool] | None = None  # the modes taken off their stacks while a node runs
        self.suspend_dispatch = functools.partial(self.suspend, False)  #: while a function node runs
        self.quiet = 0  #: > 0 while a recording does its own work: no recording sees those calls
        self.taken = 0  #: > 0 inside a torch function some recordings took whole (several recordings only)
        self._positions: tuple[int | None, int | None] = (None, None)  # where modes_off took the modes from

    @classmethod
    def join(cls, recording: Recording) -> _Hub:
        thread = threading.get_ident()
        with _LOCK:
            hub = _HUBS.get(thread)
            fresh = hub is None
            if hub is None:
                hub = _HUBS[thread] = cls(thread)
            _install_global_hooks()
        hub._resume_all()
        if fresh:
            _keep_dynamo_out()
            hub.dispatch_mode.__enter__()
            hub.function_mode.__enter__()
        hub.recordings.append(recording)
        hub.single = recording if len(hub.recordings) == 1 else None
        return hub

    def leave(self, recording: Recording) -> None:
        if recording in self.recordings:
            self.recordings.remove(recording)
        self.single = self.recordings[0] if len(self.recordings) == 1 else None
        if self.recordings:
            return
        try:
            self._suspended = None
            _exit_mode(self.function_mode, torch._C._len_torch_function_stack, torch._C._get_function_stack_at,
                       torch._C._pop_torch_function_stack, torch._C._push_on_torch_function_stack)
            _exit_mode(self.dispatch_mode, torch._C._len_torch_dispatch_stack, torch._C._get_dispatch_stack_at,
                       lambda: torch._C._pop_torch_dispatch_stack(None), torch._C._push_on_torch_dispatch_stack)
        finally:
            with _LOCK:
                _HUBS.pop(self.thread, None)
                if not _HUBS:
                    _remove_global_hooks()
            # the modes point at their hub: with the hub's references to them dropped, the hub and
            # its modes are freed now, not left as a cycle for a later garbage collection
            self.suspend_dispatch = None  # type: ignore[assignment]
            self.dispatch_mode = self.function_mode = None  # type: ignore[assignment]
            _forget_higher_order_compiles()

    # --- all modes off while a recording steps aside (Recording.stepped_aside)
    def modes_off(self) -> None:
        """Take this hub's modes off their stacks wherever they are (modes pushed above them stay,
        in order), remembering where, for :meth:`modes_on`."""
        self._resume_all()
        self._positions = (
            _take_off(self.function_mode, torch._C._len_torch_function_stack, torch._C._get_function_stack_at,
                      torch._C._pop_torch_function_stack, torch._C._push_on_torch_function_stack),
            _take_off(self.dispatch_mode, torch._C._len_torch_dispatch_stack, torch._C._get_dispatch_stack_at,
                      lambda: torch._C._pop_torch_dispatch_stack(None), torch._C._push_on_torch_dispatch_stack))

    def modes_on(self) -> None:
        function, dispatch = self._positions
        self._positions = (None, None)
        if function is not None:
            _put_back(self.function_mode, function, torch._C._len_torch_function_stack,
                      torch._C._pop_torch_function_stack, torch._C._push_on_torch_function_stack)
        if dispatch is not None:
            _put_back(self.dispatch_mode, dispatch, torch._C._len_torch_dispatch_stack,
                      lambda: torch._C._pop_torch_dispatch_stack(None), torch._C._push_on_torch_dispatch_stack)

    # --- taking the modes off while a node runs natively (one recording only)
    def suspend(self, function: bool = True) -> tuple[bool, bool]:
        """Take this hub's modes off their stacks while a node's own calls run, so they run at
        native speed: only a mode on top of its stack (a mode the model pushed itself stays above
        ours, and ours then passes its calls through)."""
        n = _dispatch_depth()
        dispatch = n > 0 and _dispatch_at(n - 1) is self.dispatch_mode
        func = False
        if function:
            m = _function_depth()
            func = m > 0 and _function_at(m - 1) is self.function_mode
            if func:
                _pop_function()
        if dispatch:
            _pop_dispatch(None)
        token = self._suspended = (dispatch, func)
        return token

    def resume(self, token: tuple[bool, bool] | None) -> None:
        suspended = self._suspended
        if token is None or suspended is None:
            return
        self._suspended = None
        if suspended[0]:
            _push_dispatch(self.dispatch_mode)
        if suspended[1]:
            _push_function(self.function_mode)

    def _resume_all(self) -> None:
        self.resume(self._suspended)

    # --- events
    def pre_module(self, module: nn.Module) -> None:
        single = self.single
        if single is not None:
            if self._suspended is not None and not single._stack:  # called again: the modes back on
                self.resume(self._suspended)
            if single.pre_module(module):
                self._leaf_token = self.suspend()
            return
        for r in self.recordings:
            r.pre_module(module)

    def post_module(self, module: nn.Module, args: Any, kwargs: Any, result: Any, failed: bool) -> None:
        single = self.single
        if single is not None:
            if module is single._open and len(single._stack) == single._open_level:
                try:  # (the node recorded with the modes still off: the profiler's own ops skip them)
                    single.post_module(module, args, kwargs, result, failed)
                finally:
                    self.resume(self._suspended)
            else:
                single.post_module(module, args, kwargs, result, failed)
            if not single._stack and single.records_nothing_outside() and self._suspended is None:
                # until the model is called again (pre_module): its calls pass the modes by (once: a
                # module of another model ends inside its parent's call, and suspending again with
                # the modes off would forget that they are to be put back)
                self.suspend()
            return
        for r in reversed(self.recordings):
            r.post_module(module, args, kwargs, result, failed)

    def op(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        wanting = self._claimants(args)
        return _nested(wanting, lambda r, inner: r.op(func, args, kwargs, inner), lambda: func(*args, **kwargs))

    def function(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        wanting = self._claimants(args)
        if not wanting:
            return func(*args, **kwargs)
        self.taken += 1  # the ops inside are the node's of the recordings that record this call (or its ops')
        try:
            return _nested(wanting, lambda r, inner: r.function(func, args, kwargs, inner),
                           lambda: func(*args, **kwargs))
        finally:
            self.taken -= 1

    @functions_off  # (autograd's engine runs these ops in C++: no subclass's __torch_function__ sees them)
    def backward_op(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        inside = [r for r in self.recordings if r.inside()]
        if inside:
            # torch.autograd.grad inside a model's forward (torch.func.grad, a gradient penalty): its ops
            # are that forward's own work, as FlopCounterMode counts them, also where the backward is
            # counted (the module hooks skip autograd's calls, so a recompute in a backward is no forward)
            wanting = [r for r in inside if r.wants()]
            return _nested(wanting, lambda r, inner: r.op(func, args, kwargs, inner), lambda: func(*args, **kwargs))
        counting = [r for r in self.recordings if r.counting_backward()]
        if not counting:
            return func(*args, **kwargs)
        if len(counting) > 1:
            node = current_autograd_node()
            owners = [r for r in counting if r.owns_backward(node)]
            counting = owners or counting[-1:]
        return _nested(counting, lambda r, inner: r.backward_op(func, args, kwargs, inner),
                       lambda: func(*args, **kwargs))

    def _claimants(self, args: Any) -> list[Recording]:
        """The recordings an op outside the backward belongs to: inside a model (its forward), the
        recordings of the models running that take ops now (none while a node of theirs runs);
        inside an optimizer's step, none (its recording counts the update per parameter); outside
        every model, those that made one of its inputs, or else the latest started."""
        if self.taken or any(r.stepping() for r in self.recordings):
            return []
        inside = [r for r in self.recordings if r.inside()]
        if inside:
            return [r for r in inside if r.wants()]
        wanting = [r for r in self.recordings if r.wants()]
        if len(wanting) <= 1:
            return wanting
        owners = [r for r in wanting if r.owns_values(args)]
        return owners or wanting[-1:]


def _nested(recordings: Sequence[Recording], call: Callable[[Recording, Callable[[], Any] | None], Any],
            run: Callable[[], Any]) -> Any:
    """Run ``run`` once, inside each recording's handling of it (the first outermost)."""
    if not recordings:
        return run()
    inner: Callable[[], Any] = run
    for r in reversed(recordings[1:]):
        inner = functools.partial(call, r, inner)
    return call(recordings[0], inner)


class _DispatchMode(TorchDispatchMode):
    """Hands every aten op of its thread to the hub's recordings."""

    #: torch.cond, while_loop and the other higher-order operators come here too: run as their eager
    #: kernels run them, with this mode on, so that the ops inside are recorded (_higher_order)
    supports_higher_order_operators = True

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ in a torch._dynamo guard unless this says no; the
        # guard imports torch._dynamo on first use (about a second, inside the first timed node)
        # and costs microseconds on every op. Nothing here is compiled.
        return False

    def __init__(self, hub: _Hub) -> None:
        super().__init__()
        self.hub = hub

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        hub = self.hub
        if isinstance(func, HigherOrderOperator):
            return _higher_order(self, func, args, kwargs or {})
        if hub.quiet:  # the profiler's own work
            return func(*args, **(kwargs or {}))
        if in_backward():  # run by autograd (maybe in its own thread): a backward op
            return hub.backward_op(func, args, kwargs or {})
        single = hub.single
        if _COMPOSITE.get(func) is not False and _composite(func):  # (cached: one lookup for most ops)
            # a composite op reaching the mode as itself (below autograd: in a torch.cond branch,
            # under inference_mode) without a formula: its parts are recorded, as autograd's
            # dispatch would have decomposed it
            recording = single if single is not None else next(iter(hub.recordings), None)
            if recording is not None and recording._table.resolve_aten(func) is None:
                with self:
                    out = func.decompose(*args, **(kwargs or {}))
                if out is not NotImplemented:
                    return out
        if single is not None:
            return single.op(func, args, kwargs or {})
        return hub.op(func, args, kwargs or {})


#: aten op -> whether it is CompositeImplicitAutograd (decomposes into other ops above autograd)
_COMPOSITE: dict[Any, bool] = {}


def _composite(func: Any) -> bool:
    found = _COMPOSITE.get(func)
    if found is None:
        try:
            found = bool(torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd"))
        except (AttributeError, RuntimeError):
            found = False
        _COMPOSITE[func] = found
    return found


_DYNAMO_KEPT_OUT = False


def _forget_higher_order_compiles() -> None:
    """After every recording, once torch's higher-order operators are loaded: torch runs
    ``torch.cond``, ``while_loop``, ``scan`` eagerly through a ``torch.compile`` of small functions
    nested in the operator's Python function; a call made while a dispatch mode was on (a cond
    recorded, refused, or raising inside torch's autograd of cond before it reached the mode) leaves
    Dynamo's frame strategy of those functions at "skip", and every later plain call of the model
    fails (torch's own behaviour after any dispatch mode, FlopCounterMode's too). Their strategy is
    set back to the default (a flag per code object, about 0.03 ms in all: nothing compiled is
    freed, so another thread running them is safe), and the next plain call compiles them as the
    first one did."""
    if "torch._higher_order_ops.cond" in sys.modules:
        _set_frame_action(_higher_order_codes(), "DEFAULT")


def _forget_first_skips() -> None:
    """After a recording during which Dynamo was first loaded (a function first compiled inside the
    forward, where no force_eager stance could be set beforehand): every code object Dynamo has met,
    all of them under the recording's dispatch mode, gets Dynamo's default strategy back. Dynamo
    skipped them there and marked them never to compile again; the next plain call compiles them as
    the first plain call would have."""
    convert_frame = sys.modules.get("torch._dynamo.convert_frame")
    codes = getattr(getattr(convert_frame, "input_codes", None), "seen", None)
    if codes:
        _set_frame_action([code for ref in list(codes) if (code := ref()) is not None], "DEFAULT")


def _set_frame_action(codes: Iterable[types.CodeType], action: str) -> None:
    """Dynamo's frame strategy of each of ``codes``, and of the frames they call: ``action``
    (``"SKIP"``: never compiled; ``"DEFAULT"``: as Dynamo decides). Through torch's private C API,
    which needs no import of Dynamo; a torch without it is left as it is."""
    try:
        eval_frame: Any = torch._C._dynamo.eval_frame  # type: ignore[attr-defined]
        chosen = getattr(eval_frame._FrameAction, action)
        strategy = eval_frame._FrameExecStrategy(chosen, chosen)
        for code in codes:
            eval_frame.set_code_exec_strategy(code, strategy)
    except (AttributeError, TypeError, RuntimeError):
        pass


_HOP_CODES: tuple[int, list[types.CodeType]] = (-1, [])


def _higher_order_codes() -> list[types.CodeType]:
    """The code objects nested in the functions of torch's loaded ``torch._higher_order_ops``
    modules (cond's ``_cond_op_wrapper``, scan's ``run_flattened_scan``), found again only when
    modules were imported since."""
    global _HOP_CODES
    loaded = len(sys.modules)
    if _HOP_CODES[0] != loaded:
        codes = []
        for name, module in list(sys.modules.items()):
            if not name.startswith("torch._higher_order_ops.") or module is None:
                continue
            for function in list(vars(module).values()):
                code = getattr(function, "__code__", None)
                for constant in code.co_consts if isinstance(code, types.CodeType) else ():
                    if isinstance(constant, types.CodeType):
                        codes.append(constant)
        _HOP_CODES = (loaded, codes)
    return _HOP_CODES[1]


def _keep_dynamo_out() -> None:
    """Mark the profiler's entry points from torch (the modes' handlers, the module hooks) as
    frames Dynamo never compiles, nor the frames they call (once per process; torch's C side, which
    needs no import of Dynamo). A ``torch.cond`` or ``while_loop`` called eagerly runs inside a
    ``torch.compile(fullgraph=True)`` that skips its own frame when a dispatch mode is on, but would
    compile the frames called from it: the mode's, which then fail to trace."""
    global _DYNAMO_KEPT_OUT
    if _DYNAMO_KEPT_OUT:
        return
    _DYNAMO_KEPT_OUT = True
    _set_frame_action((f.__code__ for f in (_DispatchMode.__torch_dispatch__, _FunctionMode.__torch_function__,
                                            _pre_hook, _post_hook, _higher_order)), "SKIP")


_COND_BACKWARD = (
    "torch_flops cannot record a backward through 'cond' (torch.cond, while_loop): under a profiler's dispatch "
    "mode torch runs it without the gradients of the parameters its functions use, or fails in its backward, so "
    "the step would differ from the plain one. Profile its forward alone (no backward=, loss_fn= or "
    "TrainingProfiler), or under torch.no_grad()")


def _higher_order(mode: _DispatchMode, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A higher-order operator (``torch.cond``, ``while_loop``, ...) reaching the dispatch mode: it
    runs what its eager (CPU/CUDA) kernel runs, with ``mode`` back on its stack for the body, so the
    ops of the branch taken / of every iteration are recorded as the model's, in order. ``cond``'s
    kernel is written out (it refuses to run under any mode): the branch ``pred`` picks, on
    ``operands``.

    In eager, torch runs these operators inside a ``torch.compile(fullgraph=True)`` call that skips
    its frame when a dispatch mode is on; the frames called from it (this profiler's) would still be
    compiled, and fail: Dynamo is kept out of them (:func:`_keep_dynamo_out`)."""
    if func is not _COND and func is not _WHILE_LOOP:
        raise UnsupportedOpError(f"torch_flops cannot record the higher-order operator {func.name()!r} (torch.cond and "
                                 "while_loop are recorded): its eager kernel refuses to run under a profiler's mode")
    if torch.is_grad_enabled() and any(r._counter is not None for r in mode.hub.recordings):
        # eager torch.cond lifts the parameters its branches close over into operands (through
        # Dynamo), so they get gradients; under a dispatch mode (this profiler's, FlopCounterMode's)
        # torch runs it without that, and they would get none
        raise UnsupportedOpError(_COND_BACKWARD.replace("'cond'", repr(func.name())))
    if func is _COND:
        pred, true_fn, false_fn, operands = args
        branch = true_fn if pred else false_fn  # (pred read with the mode off, as the kernel reads it)
        with mode:
            return branch(*operands)
    with mode:  # while_loop's eager kernel: its condition and body, iteration by iteration
        return func.py_kernels[DispatchKey.CompositeExplicitAutograd](*args, **kwargs)


class _FunctionMode(TorchFunctionMode):
    """Hands every torch function and Tensor method call of its thread to the hub's recordings:
    those with a formula of their own (``torch.relu``, ``F.scaled_dot_product_attention``,
    ``x.view``, ``x[i]``) become one node each, counted as the fx graph counts them, the same on
    every device (the aten ops under an attention call differ between a CPU kernel and the math of
    the meta device)."""

    def __init__(self, hub: _Hub) -> None:
        super().__init__()
        self.hub = hub

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func.__name__ == "__get__" or in_backward():  # a property read; a backward's own calls
            return func(*args, **kwargs)
        hub = self.hub
        single = hub.single
        if single is not None:
            if single._open is not None:
                return func(*args, **kwargs)
            return single.function(func, args, kwargs, None, hub.suspend_dispatch, hub.resume)
        return hub.function(func, args, kwargs)


def _pre_hook(module: nn.Module, args: Any) -> None:
    hub = _HUBS.get(threading.get_ident())
    if hub is not None and not in_backward():
        hub.pre_module(module)


def _post_hook(module: nn.Module, args: Any, *kwargs_result: Any) -> None:
    # (kwargs, result) after a forward; (result,) alone when the forward raised (torch calls an
    # always-called global hook so then)
    hub = _HUBS.get(threading.get_ident())
    if hub is None or in_backward():
        return
    if len(kwargs_result) == 2:
        hub.post_module(module, args, kwargs_result[0], kwargs_result[1], False)
    else:
        hub.post_module(module, args, None, None, True)


def _install_global_hooks() -> None:
    """Register the module hooks (under ``_LOCK``), unless they are."""
    if not _GLOBAL_HOOKS:
        _GLOBAL_HOOKS.extend((
            module_hooks.register_module_forward_pre_hook(_pre_hook),
            module_hooks.register_module_forward_hook(_post_hook, with_kwargs=True, always_call=True)))


def _take_off(mode: Any, length: Callable[[], int], at: Callable[[int], Any], pop: Callable[[], Any],
              push: Callable[[Any], None]) -> int | None:
    """Take ``mode`` off its stack, the modes above it staying in order; its position, or None
    when it is not on the stack."""
    stack = [at(i) for i in range(length())]
    position = next((i for i, m in enumerate(stack) if m is mode), None)
    if position is None:
        return None
    above = [pop() for _ in range(len(stack) - 1 - position)]
    pop()
    for m in reversed(above):
        push(m)
    return position


def _put_back(mode: Any, position: int, length: Callable[[], int], pop: Callable[[], Any],
              push: Callable[[Any], None]) -> None:
    """Push ``mode`` back at ``position`` (the modes above it now staying above it)."""
    above = [pop() for _ in range(max(length() - position, 0))]
    push(mode)
    for m in reversed(above):
        push(m)


def _remove_global_hooks() -> None:
    """Remove the module hooks, and the entries torch's handle leaves behind (a forward hook
    registered ``with_kwargs`` stays in ``_global_forward_hooks_with_kwargs``)."""
    for handle in _GLOBAL_HOOKS:
        handle.remove()
        module_hooks._global_forward_hooks_with_kwargs.pop(handle.id, None)
        module_hooks._global_forward_hooks_always_called.pop(handle.id, None)
    _GLOBAL_HOOKS.clear()


def _exit_mode(mode: Any, length: Callable[[], int], at: Callable[[int], Any], pop: Callable[[], Any],
               push: Callable[[Any], None]) -> None:
    """Take ``mode`` off its stack with its own ``__exit__`` (which keeps torch's mode flags right),
    wherever it is: modes pushed above it are set aside and put back; a mode already off the stack
    (suspended when the model raised past its node) is put on top first."""
    stack = [at(i) for i in range(length())]
    above: list[Any] = []
    if any(m is mode for m in stack):
        while at(length() - 1) is not mode:
            above.append(pop())
    else:
        push(mode)
    try:
        mode.__exit__(None, None, None)
    finally:
        for m in reversed(above):
            push(m)


def installed() -> dict[str, int]:
    """What torch_flops has installed in torch right now (for tests): recordings per thread,
    global hooks."""
    with _LOCK:
        return {"threads": len(_HUBS), "recordings": sum(len(h.recordings) for h in _HUBS.values()),
                "global_hooks": len(_GLOBAL_HOOKS)}


def _function_target(func: Any, table: FormulaTable) -> tuple[str, Any] | None:
    name = getattr(func, "__name__", "")
    qualname = getattr(func, "__qualname__", "")
    if getattr(func, "__module__", "").startswith("torch.distributed"):
        return None  # dist.scatter is no torch.scatter: its collective is recorded at the dispatcher
    if func in _PLUMBING:
        return None  # grad-mode and autocast switches: an exported graph's plumbing, nothing an eager run records
    if qualname.startswith(("TensorBase.", "Tensor.")):  # a Tensor method
        if name in _DUNDERS:
            return "call_function", _DUNDERS[name]
        if table.resolve_method(name) is not None:
            return "call_method", name
        return None
    if table.resolve_function(func) is not None:
        return "call_function", func
    return None


@functools.lru_cache(maxsize=1 << 16)
def _location(outer: tuple[str, ...], path: str, module_type: str) -> NodeLocation:
    """The location inside module ``path`` called within the modules ``outer``: its chain has every
    dotted prefix too (an iterated ModuleList still encloses its items). A function of strings
    only, so one cache serves every model and call (layers repeat the same locations)."""
    return NodeLocation(path, module_type, module_chain((*outer, path)))

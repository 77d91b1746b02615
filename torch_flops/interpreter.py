"""The graph runner: execute a planned fx/export graph node by node, measuring every node.

:class:`FlopsInterpreter` overrides ``fx.Interpreter.run_node`` only and passes every ``call_*``
result on untouched, so the graph computes exactly what the model does; each node's output is
measured by :meth:`NodeMeasurer.measure <torch_flops.measuring.NodeMeasurer.measure>`. A
:class:`GraphRunner` keeps one interpreter per plan (fx's per-graph set-up is paid once, not per
call) and is what :func:`torch_flops.runloop.run_repeated` drives: warmup and repeat runs, the
counting run, the medians. A node that raises re-raises the very same exception with a note naming
the node, its module and its inputs (``except torch.OutOfMemoryError`` still works around it).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import torch
from torch import fx

from torch_flops.backward import SequenceMap
from torch_flops.measure import MemoryProbe, Timer
from torch_flops.measuring import GraphRun, NodeMeasurer, add_note, describe_inputs, traffic_table
from torch_flops.plan import FlatArgs, NodePlan, Plan
from torch_flops.progress import Progress
from torch_flops.runloop import RunTimes

__all__ = ["FlopsInterpreter", "GraphRunner"]

_NODES, _NODES_AND_CONSTANTS = FlatArgs.NODES, FlatArgs.NODES_AND_CONSTANTS


class FlopsInterpreter(fx.Interpreter, NodeMeasurer):
    """An ``fx.Interpreter`` that measures every node it runs.

    A counting run records FLOPs, memory, output shapes, dtypes and time; the other runs record
    time only. Everything measured lives in per-node lists indexed by the node's plan position.
    """

    def __init__(self, plan: Plan) -> None:
        assert plan.graph is not None, "a captured graph's plan"
        super().__init__(plan.graph.graph_module, garbage_collect_values=True)
        self.extra_traceback = False  # our own note names the node
        self._plans = plan.by_node
        self._plan = plan
        self._count = True
        self._traffic_rows = traffic_table(plan)
        self.progress: Progress | None = None

    def start(self, timer: Timer, memory: MemoryProbe, strict: bool, skip_unneeded: bool) -> None:
        """Set up the measurements of one run loop: fresh per-node lists."""
        self._timer = timer
        self._tick = timer.tick
        self._memory = memory
        self._read_memory = memory.read
        self._strict = strict
        self._skip_unneeded = skip_unneeded
        self.reset(len(self._plan.nodes), self._plan.record_columns.fills)

    def execute(self, inputs: Sequence[Any], count: bool) -> Any:
        """One run of the graph; a counting run also records FLOPs, memory, shapes and dtypes."""
        self._count = count
        try:
            output = self.run(*inputs)
            if count:
                self.split_seen()
            return output
        finally:
            self.env.clear()  # drop the run's last values
            self._timer.finish()

    def placeholder(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # the forward's *args and **kwargs each take one value from the binder (FxBinder: a tuple, a
        # dict), as the graph module's generated forward receives them (fx's Interpreter hands a
        # starred placeholder every value left, as a list)
        if isinstance(target, str) and target.startswith("*"):
            return next(self.args_iter)
        return super().placeholder(target, args, kwargs)

    def run_node(self, n: fx.Node) -> Any:
        # The steps of fx.Interpreter.run_node (fetch args, dispatch on n.op), inlined so that the
        # fetched args also feed the formula without a second fetch. fx's _set_current_node
        # context (metadata for re-tracing through an interpreter) is left out: nothing is traced
        # here, and it cost about 2 us a node.
        plan = self._plans[n]
        i = plan.position
        flat = plan.flat_args
        kwargs: dict[str, Any]
        if flat is _NODES:  # the arguments are earlier nodes' values (and plain constants): fetched directly
            args, kwargs = tuple(map(self.env.__getitem__, n.args)), {}  # type: ignore[arg-type]
        elif flat is _NODES_AND_CONSTANTS:
            env = self.env
            args, kwargs = tuple([env[a] if type(a) is fx.Node else a for a in n.args]), {}
        else:
            args, kwargs = self.fetch_args_kwargs_from_env(n)
        count = self._count
        read = self._read_memory
        if read is not None and count:
            self._mem_before[i] = read()
        tick = self._tick
        start = tick()
        try:
            op = n.op
            if op == "call_function":  # what fx.Interpreter.call_function does
                out = n.target(*args, **kwargs)  # type: ignore[operator]
            elif op == "call_module" and plan.module is not None:  # fx's call_module without the path lookup:
                out = plan.module(*args, **kwargs)  # the plan holds the submodule the path names
            else:
                out = getattr(self, op)(n.target, args, kwargs)
        except Exception as e:  # noqa: BLE001  (named, then re-raised as itself)
            return self._failed(n, plan, args, e)
        end = tick()
        self._starts[i] = start
        self._ends[i] = end
        if not count:
            return out
        # The counting run also records memory, the output shape and dtype, and the node's FLOPs.
        if read is not None:
            self._mem_after[i] = read()
        with torch._C.DisableTorchFunction():  # (the profiler's own reads: no user mode or subclass sees them)
            self.measure(i, plan, args, kwargs, out)
        if self.sequences is not None:  # a backward follows: the autograd nodes made so far are this node's
            self.sequences.close(i)
        if self.progress is not None and not i & 255:  # a live line on a terminal during a long run
            self.progress.nodes(i)
        return out

    def node_name(self, i: int) -> str:
        return self._plan.nodes[i].node.name

    def _failed(self, n: fx.Node, plan: NodePlan, args: tuple[Any, ...], e: Exception) -> None:
        if self._skip_unneeded and not plan.needed:
            self.skipped[plan.position] = f"not run ({type(e).__name__}: {_first_line(e)}); the output does not need it"
            return
        location = plan.location.path
        add_note(e, f"torch_flops: running node '{n.name}' ({plan.target}{f' in module {location!r}' if location else ''}) "
                   f"failed with inputs ({describe_inputs(args)})\n  node: {n.format_node()}")
        raise e

    def measured(self, graph: int, times: Sequence[float | None]) -> GraphRun:
        """The counting run, frozen with the per-node ``times`` (medians over the timed runs)."""
        plan = self._plan
        rows = self._traffic_rows
        return self.graph_run(lambda: plan, graph, times, lambda: rows, plan.frees)


class GraphRunner:
    """Runs one plan for :func:`~torch_flops.runloop.run_repeated`: set it up with :meth:`prepare`
    (holding :attr:`lock`: the runs of one runner are serialised), then the loop calls :meth:`call`
    and reads :meth:`run_times` after each run, and :meth:`measured` after the counting run."""

    def __init__(self, plan: Plan, graph: int = 0) -> None:
        self.plan = plan
        self.graph = graph  #: the plan's graph's index in its capture
        self._interpreter = FlopsInterpreter(plan)
        self.lock = threading.Lock()

    def prepare(self, *, timer: Timer, memory: MemoryProbe, strict: bool, timed: bool,
                sequences: SequenceMap | None = None, progress: Progress | None = None) -> None:
        """Fresh measurements for the next runs; ``sequences``: a backward follows the counting run
        (its autograd nodes are marked per node); ``progress``: the live line of a long run."""
        self._interpreter.start(timer, memory, strict, skip_unneeded=not timed)
        self._interpreter.progress = progress if progress is not None and progress.enabled else None
        self._sequences = sequences

    def call(self, inputs: Sequence[Any], *, count: bool, timed: bool) -> Any:
        interp = self._interpreter
        interp.sequences = self._sequences if count else None
        try:
            return interp.execute(inputs, count=count)
        finally:
            interp.sequences = None

    def run_times(self) -> RunTimes:
        return RunTimes(self._interpreter.times())

    def measured(self, times: RunTimes) -> GraphRun:
        return self._interpreter.measured(self.graph, times.forward)

    @property
    def memory_source(self) -> str:
        return self._interpreter._memory.source


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__

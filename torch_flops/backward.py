"""The backward pass, per forward node: what autograd ran for each node's gradient.

How a backward op finds the forward node that caused it
-------------------------------------------------------
Autograd numbers every graph node it creates (``Node._sequence_nr()``) from a per-thread counter
that only goes up (``torch.autograd._get_sequence_nr()`` reads its next value). While the eager
front end records the forward, it notes that counter each time a forward node ends
(:meth:`SequenceMap.close`): the autograd nodes created while forward node ``i`` ran are exactly
those numbered from the previous mark up to this one. During ``backward()`` the
recording's ``TorchDispatchMode`` (:mod:`torch_flops.session`) hands every aten op autograd runs
to a :class:`BackwardCounter`, which asks
``torch._C._current_autograd_node()`` which autograd node runs it; its sequence number, looked up
between the marks, names the forward node. So a Linear's ``dX``/``dW`` matmuls and its bias's
``sum`` land on the Linear's record, counted by the same aten formulas as the forward
(``formulas/backward.py`` adds the ``*_backward`` ops), timed around each op.

What does not belong to a forward node: gradient accumulation into an existing ``.grad``
(``AccumulateGrad`` has no sequence number of its own) and the ``ones_like`` that seeds the
backward; their work is kept as *unattributed* and is in the totals.

Activation checkpointing (``torch.utils.checkpoint``): the recomputed forward runs inside the
backward with grad mode on (ordinary backward ops run with it off), so an op seen with grad mode
on is *recompute*; it is counted in the backward totals and, apart, as ``recompute_flops`` of the
forward node whose backward asked for it. The autograd nodes the recompute creates are marked
like the forward's, so their own backward lands on the same forward node.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from torch_flops.comm import comm_bytes, has_dtensor, is_communication, is_dtensor_value, local_value
from torch_flops.formulas import FormulaTable, evaluate, zero_flops
from torch_flops.measure import Timer, storage_key

__all__ = ["BackwardCounter", "BackwardRun", "SequenceMap", "autograd_nodes", "current_autograd_node", "formula_count",
           "graph_task", "in_backward", "saved_bytes"]

_sequence_nr: Callable[[], int] = torch.autograd._get_sequence_nr
#: the backward (graph task) running now; -1 outside one (its final callbacks are inside)
graph_task: Callable[[], int] = torch._C._current_graph_task_id
_graph_task = graph_task


def in_backward() -> bool:
    """Whether this thread is inside autograd's graph task (a ``backward()``, its final callbacks
    included): the one predicate every part of the package asks."""
    return _graph_task() != -1

#: the autograd node running now (None outside a backward)
current_autograd_node: Callable[[], Any] = torch._C._current_autograd_node


class SequenceMap:
    """Autograd sequence numbers -> forward node positions (see the module docstring)."""

    def __init__(self) -> None:
        self.ends: list[int] = []  #: the counter's value when each marked node ended (never goes down)
        self.owners: list[int] = []  #: the forward position of each mark
        #: the counter's value when the recording began: earlier autograd nodes are no node's
        self.start = _sequence_nr()

    def open(self) -> None:
        """The recording begins now (autograd nodes made before belong to no forward node)."""
        self.start = _sequence_nr()

    def close(self, position: int) -> None:
        """Forward node ``position`` has just ended: the autograd nodes made so far, and not
        claimed by an earlier mark, are its."""
        self.ends.append(_sequence_nr())
        self.owners.append(position)

    def owner(self, autograd_node: Any) -> int | None:
        """The forward position whose run created ``autograd_node``; None for nodes made outside
        the recorded forward (``AccumulateGrad``, a loss made after the recording)."""
        if autograd_node is None:
            return None
        sequence = autograd_node._sequence_nr()
        if sequence < self.start:
            return None
        k = bisect.bisect_right(self.ends, sequence)
        return self.owners[k] if k < len(self.owners) else None


def formula_count(formula: Any, out: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, int, int]:
    """``(flops, macs, mm_macs)`` of one backward op's formula (:func:`torch_flops.formulas.evaluate`;
    ``mm_macs``: the MACs FlopCounterMode counts for this kernel, all of them when the formula does
    not say); on DTensors, this rank's shard's work (the formula on the local tensors), and the MACs
    FlopCounterMode counts of the logical op (the formula on the DTensors: it counts the DTensor op)."""
    count = evaluate(formula, None, out, args, kwargs)
    mm = count[1] if count[3] is None else count[3]
    if is_dtensor_value(out) or has_dtensor(args):
        count = evaluate(formula, None, local_value(out), local_value(args), local_value(kwargs))
    return count[0], count[1], mm


@dataclass
class BackwardRun:
    """What one backward measured, per forward node position (lists as long as the forward)."""

    flops: list[int]
    macs: list[int]
    #: per position, the (start, end) timer marks of its backward ops (read after the timer finished)
    marks: list[list[tuple[Any, Any]]]
    recompute_flops: list[int]
    recompute_macs: list[int]
    #: of ``macs``, those of the matrix-multiply kernels FlopCounterMode counts on this device
    #: (the ``flop_counter`` convention's backward; see ``Count.mm_macs``)
    mm_macs: list[int] = field(default_factory=list)
    #: work not caused by a forward node: gradient accumulation, the seed gradient
    unattributed_flops: int = 0
    unattributed_macs: int = 0
    unattributed_mm_macs: int = 0
    unattributed_marks: list[tuple[Any, Any]] = field(default_factory=list)
    #: aten op name -> how many backward ops had no formula (excluded from the counts)
    unsupported: dict[str, int] = field(default_factory=dict)
    #: the formulas that failed: aten op name -> the first message
    errors: dict[str, str] = field(default_factory=dict)
    ops: int = 0  #: aten ops the backward ran
    #: bytes each forward position saved for backward (activations; see :func:`saved_bytes`)
    saved_bytes: list[int] = field(default_factory=list)
    #: collectives the backward ran (torch_flops.comm): bytes this rank sent, their marks
    comm_bytes: int = 0
    comm_marks: list[tuple[Any, Any]] = field(default_factory=list)
    #: forward position -> the bytes of the collectives its backward ran (FSDP2's reduce-scatter
    #: lands on the layer whose gradients it reduces)
    comm_by_owner: dict[int, int] = field(default_factory=dict)

    @classmethod
    def empty(cls, n: int) -> BackwardRun:
        return cls(flops=[0] * n, macs=[0] * n, marks=[[] for _ in range(n)], recompute_flops=[0] * n,
                   recompute_macs=[0] * n, mm_macs=[0] * n)

    def grow(self, n: int) -> None:
        """Room for forward positions up to ``n`` (recompute may add none; kept for safety)."""
        while len(self.flops) < n:
            self.flops.append(0)
            self.macs.append(0)
            self.marks.append([])
            self.recompute_flops.append(0)
            self.recompute_macs.append(0)
        while len(self.mm_macs) < n:
            self.mm_macs.append(0)

    def times(self, timer: Timer) -> list[float | None]:
        """Milliseconds of backward per forward position (None where no backward op ran)."""
        return [_summed(timer, marks) for marks in self.marks]

    def unattributed_time(self, timer: Timer) -> float | None:
        return _summed(timer, self.unattributed_marks)

    def comm_time(self, timer: Timer) -> float | None:
        """Milliseconds of the backward's collectives (None when none ran, or untimed)."""
        return _summed(timer, self.comm_marks)


def _summed(timer: Timer, marks: list[tuple[Any, Any]]) -> float | None:
    """Milliseconds between each (start, end) pair, summed; None when none or untimed (meta)."""
    total = 0.0
    for start, end in marks:
        ms = timer.elapsed_ms(start, end)
        if ms is None:
            return None
        total += ms
    return total if marks else None


class BackwardCounter:
    """Counts and times each backward aten op for the forward node that caused it: the recording
    (:mod:`torch_flops.session`) hands it every op autograd runs while it records a backward."""

    def __init__(self, table: FormulaTable, sequences: SequenceMap, run: BackwardRun, timer: Timer) -> None:
        self._table = table
        self._sequences = sequences
        self.run = run
        self._timer = timer
        self._formulas: dict[Any, Any] = {}
        #: called once, with the autograd node, before the first op runs (nothing freed yet)
        self.first_op: Callable[[Any], None] | None = None
        self._task: int | None = None  # the backward call (graph task) under way
        self._create_graph = False  # whether it builds a graph (grad mode on for every op)

    def _formula(self, func: Any) -> Any:
        packet = func.overloadpacket
        found = self._formulas.get(packet, _UNKNOWN)
        if found is _UNKNOWN:
            found = self._formulas[packet] = self._table.resolve_aten(packet)
        return found

    def op(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
           inner: Callable[[], Any] | None = None) -> Any:
        """Run ``func`` (or ``inner()``, what runs it for an outer recording) as a backward op: timed,
        counted for its forward node, or kept as unattributed work."""
        if func.namespace == "profiler":  # record_function markers (FSDP's): not the backward's work
            return func(*args, **kwargs) if inner is None else inner()
        task = _graph_task()
        if task != self._task:  # a new backward() call: its first op is the loss's, never a recompute,
            self._task = task   # so grad mode on there means create_graph=True (the engine's setting)
            self._create_graph = torch.is_grad_enabled()
        # the engine runs backward ops with grad mode off unless create_graph; on, they are the
        # recomputed forward of activation checkpointing
        recompute = not self._create_graph and torch.is_grad_enabled()
        node = current_autograd_node()
        if self.first_op is not None:
            first, self.first_op = self.first_op, None
            first(node)
        owner = self._sequences.owner(node)
        tick = self._timer.tick
        start = tick()
        out = func(*args, **kwargs) if inner is None else inner()
        end = tick()
        run = self.run
        run.ops += 1
        if recompute and owner is not None:  # the recompute's autograd nodes: their backward is the owner's too
            self._sequences.close(owner)
        if is_communication(func):  # FSDP's reduce-scatter of gradients, DDP's all-reduce: bytes, no FLOPs
            sent = comm_bytes(func, args, kwargs, out)
            run.comm_bytes += sent
            run.comm_marks.append((start, end))
            if owner is not None:  # the node whose backward ran it (else: only in the total)
                run.comm_by_owner[owner] = run.comm_by_owner.get(owner, 0) + sent
                run.grow(owner + 1)
                run.marks[owner].append((start, end))  # its time is the backward's
            else:
                run.unattributed_marks.append((start, end))
            return out
        formula = self._formula(func)
        flops = macs = mm_macs = 0
        if formula is None:
            name = f"aten.{func.overloadpacket.__name__}"
            run.unsupported[name] = run.unsupported.get(name, 0) + 1
        elif formula is not zero_flops:
            try:
                flops, macs, mm_macs = formula_count(formula, out, args, kwargs)
            except Exception as e:  # noqa: BLE001  (a broken formula never stops the user's backward)
                run.errors.setdefault(f"aten.{func.overloadpacket.__name__}", f"{type(e).__name__}: {e}")
        if owner is None:
            run.unattributed_flops += flops
            run.unattributed_macs += macs
            run.unattributed_mm_macs += mm_macs
            run.unattributed_marks.append((start, end))
            return out
        if owner >= len(run.flops) or owner >= len(run.mm_macs):
            run.grow(owner + 1)
        run.flops[owner] += flops
        run.macs[owner] += macs
        run.mm_macs[owner] += mm_macs
        run.marks[owner].append((start, end))
        if recompute:
            run.recompute_flops[owner] += flops
            run.recompute_macs[owner] += macs
        return out


def autograd_nodes(roots: Iterable[Any]) -> Iterator[Any]:
    """Every node of the autograd graph reachable from ``roots`` (``grad_fn`` s; None skipped), once."""
    seen: set[Any] = set()
    stack = [r for r in roots if r is not None]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        yield node
        stack.extend(nxt for nxt, _ in node.next_functions if nxt is not None and nxt not in seen)


def saved_bytes(roots: list[Any], sequences: SequenceMap, n: int,
                excluded: frozenset[int]) -> tuple[list[int], frozenset[int]]:
    """Bytes each forward position saved for backward: the storages held by the autograd graph
    reachable from ``roots`` (``grad_fn`` s), each storage once (for the earliest node saving it),
    the model's parameters and buffers (``excluded`` storage keys) left out. Read from the
    ``_raw_saved_*`` attributes autograd exposes on its nodes, before the backward frees them,
    without unpacking anything: a tensor saved through ``saved_tensors_hooks`` (activation
    checkpointing, offloading) is the hooks' business and is not counted (its unpack hook would
    run the user's code).
    Returns the bytes per position and the saved storages' keys (kept alive until the backward)."""
    first: dict[int, tuple[int, int]] = {}  # storage key -> (earliest forward position saving it, bytes)
    for node in autograd_nodes(roots):
        owner = None if type(node).__name__ == "AccumulateGrad" else sequences.owner(node)
        if owner is None or owner >= n:
            continue
        for attribute in dir(node):
            if not attribute.startswith("_raw_saved_"):
                continue
            try:
                value = getattr(node, attribute)
            except RuntimeError:  # freed already (retain_graph=False after an earlier backward)
                continue
            for saved in value if isinstance(value, (tuple, list)) else (value,):
                t = _saved_tensor(saved)
                if t is not None:
                    key, nbytes = storage_key(t)
                    if key not in excluded and (key not in first or first[key][0] > owner):
                        first[key] = (owner, nbytes)
    result = [0] * n
    for owner, nbytes in first.values():
        result[owner] += nbytes
    return result, frozenset(first)


def _saved_tensor(saved: Any) -> torch.Tensor | None:
    """The tensor a ``SavedTensor`` holds, when no hook packed it (else None: not ours to unpack)."""
    if getattr(saved, "unpack_hook", None) is not None:
        return None
    try:
        data = saved.data
    except (RuntimeError, AttributeError):  # freed, or not a saved tensor
        return None
    return data if isinstance(data, torch.Tensor) else None


_UNKNOWN = object()

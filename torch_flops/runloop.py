"""The one run loop: warm-up runs, repeated timed runs and the counting run of one profile, for every
way of running a model (the graph interpreter, :class:`torch_flops.interpreter.GraphRunner`; the
eager recording, :mod:`torch_flops.calls`).

Order: ``warmup`` untimed runs, ``repeat - 1`` more timed runs, then the counting run, last, whose
output is returned and whose effects stay (meta tensors: the counting run only). Every extra run
gets copies of the inputs, and what it changed (buffers, gradients, RNG state) is put back after it
(:class:`~torch_flops.state.ExtraRuns`), also when it fails; an extra run that raises ends the
extra runs, and the counting run follows at once: the model's own call raises its error as itself
and leaves what one call leaves. Each node's time is the median over
the timed runs that ran the counting run's program; one synchronisation per run (the runner's
timer). The measurements are frozen in one place, :meth:`Measurements.of`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple, Protocol

import torch
from torch.utils import _pytree

from torch_flops.errors import caller_stacklevel
from torch_flops.measuring import GraphRun, Measurements, medians
from torch_flops.progress import Progress
from torch_flops.state import ExtraRuns, copy_inputs

__all__ = ["RunTimes", "Runner", "run_repeated"]


class RunTimes(NamedTuple):
    """One run's time per node (ms; None where untimed), per node the time of its backward, and
    what it ran (runs of another program than the counting run's are left out of the medians)."""

    forward: Sequence[float | None]
    backward: Sequence[float | None] | None = None
    program: Any = None


class Runner(Protocol):
    """What :func:`run_repeated` drives."""

    @property
    def memory_source(self) -> str: ...

    def call(self, inputs: Any, *, count: bool, timed: bool) -> Any:
        """One run on ``inputs``; ``count``: the counting run (measured in full, kept);
        ``timed``: its times will be read (False for a warm-up)."""

    def run_times(self) -> RunTimes | None:
        """The last run's times (None: it was not timed)."""

    def measured(self, times: RunTimes) -> GraphRun:
        """The counting run's measurements with these (median) times."""


def run_repeated(runner: Runner, inputs: Any, *, warmup: int, repeat: int, device: torch.device,
                 extra_runs: Callable[[], ExtraRuns], progress: Progress | None = None) -> tuple[Any, Measurements]:
    """Drive ``runner`` (see the module docstring); returns the counting run's output and the
    measurements. ``extra_runs`` saves what an extra run may change (called once, only when there
    are extra runs)."""
    timed = device.type != "meta"
    warmups, repeats = (warmup, repeat - 1) if timed else (0, 0)
    total = warmups + repeats + 1
    step = progress.step if progress is not None else _quiet
    runs: list[RunTimes] = []
    failed = ""
    if warmups or repeats:
        leaves = _pytree.tree_leaves(inputs)
        used_up = next((leaf for leaf in leaves if isinstance(leaf, Iterator)), None)
        if used_up is not None:  # (checked before anything runs)
            raise ValueError(f"an input is an iterator ({type(used_up).__name__}), which the extra runs of warmup="
                             f"{warmup} / repeat={repeat} would use up before the real call: pass a list, or "
                             "profile one call (warmup=0, repeat=1)")
        generators = [(g, g.get_state()) for g in leaves if isinstance(g, torch.Generator)]
        saved = extra_runs()
        for i in range(warmups + repeats):
            step(f"run {i + 1}/{total}" + (" (warmup)" if i < warmups else ""))
            try:
                runner.call(copy_inputs(inputs), count=False, timed=i >= warmups)
                if i >= warmups:
                    times = runner.run_times()
                    if times is not None:
                        runs.append(times)
            except Exception as e:  # noqa: BLE001  (the model's own error: the real call below raises it, and
                # leaves buffers, statistics and RNG as one call does; undone first, as below)
                failed = f"{'warm-up' if i < warmups else 'timed'} call {i + 1} of {total} raised {type(e).__name__}: {e}"
                break
            finally:  # also when the run failed: buffers, gradients and RNG as they were
                for g, state in generators:  # a torch.Generator among the inputs: its draws too
                    g.set_state(state)
                saved.undo()
    step(f"run {total}/{total}")
    output = runner.call(inputs, count=True, timed=timed)
    counted = runner.run_times()
    assert counted is not None, "the counting run has times"
    same = [r for r in runs if r.program == counted.program and len(r.forward) == len(counted.forward)]
    # one warning for the timed calls left out, whatever left them out (the real call did not raise)
    causes = [f"the {failed}; the extra calls stopped there"] if failed else []
    if len(same) < len(runs):
        causes.append(f"{len(runs) - len(same)} timed call(s) ran other ops than the real call (the model's "
                      "program depends on its data or state): their times are left out")
    if causes:
        warnings.warn(f"torch_flops: {'; and '.join(causes)}; so the times come from {len(same) + 1} of the "
                      f"{repeats + 1} timed call(s) asked for (repeat={repeat})", UserWarning,
                      stacklevel=caller_stacklevel())
    runs = [counted, *same]
    forward = medians([r.forward for r in runs])
    backward = None
    if counted.backward is not None:
        backward = medians([r.backward for r in runs
                            if r.backward is not None and len(r.backward) == len(counted.backward)])
    graph_run = runner.measured(RunTimes(forward, backward))
    # per timed call, its total (with repeat > 1 even when one call is left of them: the calls timed are
    # then the times' own count, not repeat's)
    totals = [] if not timed or repeats == 0 else [sum(t for t in r.forward if t is not None)
                                                   + sum(t for t in (r.backward or ()) if t is not None) for r in runs]
    return output, Measurements.of([graph_run], device, runner.memory_source, totals)


def _quiet(text: str) -> None:
    return None

"""The knobs of a profile, checked once, up front (before anything is traced or run).

``Options`` is what ``TorchFLOPsByFX(model, **options)`` keeps. Each knob goes to one step:
``ignore_ops``, ``leaf_modules``, ``concrete_args`` and ``tracer`` to capture and plan;
``warmup``, ``repeat``, ``strict``, ``timer`` and ``mem_func_name`` to the run. The profile
records them as its ``settings``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch

from torch_flops._validate import check_bool, check_choice, check_int, check_names
from torch_flops.calls import CallSettings
from torch_flops.capture import CaptureOptions, split_leaf_modules
from torch_flops.formulas import FormulaTable, key_kind
from torch_flops.measure import MEMORY_FUNCTIONS, Timer, make_timer

__all__ = ["TRACERS", "Options", "TracerName"]

TracerName = Literal["auto", "eager", "fx", "export"]
TRACERS: tuple[str, ...] = ("auto", "eager", "fx", "export")


@dataclass(frozen=True)
class Options:
    """Every option of :class:`~torch_flops.TorchFLOPsByFX` (documented there), validated:
    ``TypeError`` for a value of the wrong type, ``ValueError`` for one out of range, naming it."""

    ignore_ops: Iterable[str] = ()
    mem_func_name: str = "memory_allocated"
    strict: bool = False
    warmup: int = 0
    repeat: int = 1
    leaf_modules: Iterable[type | str] = ()
    concrete_args: Mapping[str, Any] | None = None
    tracer: TracerName = "auto"
    timer: Timer | Callable[[torch.device], Timer] | None = None
    progress: bool | None = None
    custom_formulas: Mapping[Any, Callable[..., Any] | None] | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "ignore_ops", check_names("ignore_ops", self.ignore_ops, "('relu', 'Dropout')"))
        check_choice("mem_func_name", self.mem_func_name, MEMORY_FUNCTIONS)
        check_bool("strict", self.strict)
        check_int("warmup", self.warmup, 0)
        check_int("repeat", self.repeat, 1)
        check_choice("tracer", self.tracer, TRACERS)
        split_leaf_modules(self.leaf_modules)  # TypeError naming a bad entry
        set_(self, "leaf_modules", tuple(self.leaf_modules))
        if self.concrete_args is not None and not isinstance(self.concrete_args, Mapping):
            raise TypeError("concrete_args must be a mapping of argument name -> value")
        if self.progress is not None:
            check_bool("progress", self.progress)
        if self.timer is not None and not callable(self.timer) and not hasattr(self.timer, "tick"):
            raise TypeError(f"timer must be a Timer (tick/finish/elapsed_ms) or a function of the device, "
                            f"got {self.timer!r}")
        if self.timer is not None and hasattr(self.timer, "tick"):
            _check_timer(self.timer, "timer")
        if self.custom_formulas is not None:
            if not isinstance(self.custom_formulas, Mapping):
                raise TypeError("custom_formulas must be a mapping of target -> formula, got "
                                f"{type(self.custom_formulas).__name__}")
            set_(self, "custom_formulas", dict(self.custom_formulas))

    def formula_table(self, base: FormulaTable) -> FormulaTable:
        """A counter's own copy of ``base`` with ``custom_formulas`` over it (``TypeError`` naming a
        bad key or formula, before anything runs)."""
        return base.copy().with_overrides(self.custom_formulas)

    def call_settings(self, table: FormulaTable) -> CallSettings:
        """What each profiled call takes from these options (:mod:`torch_flops.calls`)."""
        return CallSettings(table=table, capture=self.capture_options(table), ignored=tuple(self.ignore_ops),
                            warmup=self.warmup, repeat=self.repeat, strict=self.strict,
                            mem_func_name=self.mem_func_name, timer_for=self.timer_for)

    def capture_options(self, table: FormulaTable) -> CaptureOptions:
        """The fx tracer's leaves: ``leaf_modules``, the module classes the user gave a formula
        (counted by it, so kept whole) and the classes named in ``ignore_ops`` (one ignored node)."""
        leaf_types, leaf_paths = split_leaf_modules(self.leaf_modules)
        return CaptureOptions(leaf_types=leaf_types, leaf_paths=leaf_paths, table=table,
                              leaf_names=frozenset(self.ignore_ops), concrete_args=self.concrete_args,
                              formula_functions=tuple(k for k in table.user_graph_keys() if key_kind(k) == "function"))

    def timer_for(self, device: torch.device, queued: bool = False) -> Timer:
        """The timer of a run on ``device``: the user's (or the one their function makes), else
        device events on accelerators and ``perf_counter_ns`` on CPU; ``queued``: the timer of the
        repeated runs of one profile (a CUDA timer of ours then queues each run after the first,
        see :class:`~torch_flops.measure.CudaEventTimer`; a timer of yours is used as it is, its
        readings that are no time left out)."""
        if self.timer is None:
            return make_timer(device, queue_ahead=queued)
        if hasattr(self.timer, "tick"):
            timer: Timer = self.timer  # type: ignore[assignment]
        else:
            timer = self.timer(device)  # type: ignore[operator]
            _check_timer(timer, f"timer({device}) (your timer function's result)")
        return _Checked(timer)

    def settings(self) -> dict[str, Any]:
        """What a profile records of the options it was made with (JSON ``settings``)."""
        return {"warmup": self.warmup, "repeat": self.repeat, "strict": self.strict,
                "ignore_ops": list(self.ignore_ops), "mem_func_name": self.mem_func_name, "tracer": self.tracer}


def _check_timer(timer: Any, what: str) -> None:
    """``TypeError`` naming what a timer lacks of :class:`~torch_flops.measure.Timer` (before the model runs)."""
    missing = [name for name in ("tick", "finish", "elapsed_ms") if not callable(getattr(timer, name, None))]
    if missing:
        raise TypeError(f"{what} must be a Timer, with methods tick(), finish() and elapsed_ms(start, end): "
                        f"{type(timer).__name__} has no {' and no '.join(missing)}")


class _Checked:
    """A timer of the user's, whose readings that are no time (NaN, infinite, negative, not a
    number) are no reading (None: the node shows untimed), so no table, JSON document or trace
    carries them."""

    __slots__ = ("_timer", "finish", "tick")

    def __init__(self, timer: Timer) -> None:
        self._timer = timer
        self.tick = timer.tick
        self.finish = timer.finish

    def elapsed_ms(self, start: Any, end: Any) -> float | None:
        ms = self._timer.elapsed_ms(start, end)
        if ms is None or isinstance(ms, bool):
            return None
        try:  # (a number of any kind: a numpy float32, a 0-d tensor)
            value = float(ms)
        except (TypeError, ValueError, RuntimeError):
            return None
        return value if math.isfinite(value) and value >= 0 else None

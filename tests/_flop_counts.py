"""A helper shared by test files (pytest puts tests/ on ``sys.path``): FlopCounterMode's count per
call of a model, the independent reference the generation tests compare each step with."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn
from torch.utils.flop_counter import FlopCounterMode


def flop_counter_per_call(model: nn.Module, run: Callable[[], Any]) -> tuple[Any, list[int], int]:
    """``run()`` under FlopCounterMode: its output, the FLOPs of each call of ``model`` in it (the
    counter read before and after the call) and the FLOPs of the whole run."""
    per_call: list[int] = []
    with FlopCounterMode(display=False) as counter:
        pre = model.register_forward_pre_hook(lambda m, a, k: per_call.append(-counter.get_total_flops()),
                                              with_kwargs=True)
        post = model.register_forward_hook(lambda m, a, o: per_call.__setitem__(-1, per_call[-1]
                                                                                + counter.get_total_flops()))
        try:
            out = run()
        finally:
            pre.remove()
            post.remove()
    return out, per_call, counter.get_total_flops()

"""What ``propagate`` gives back as it found it: the model's training flags and, for modules in
training mode, their buffers (BatchNorm running statistics move on every training forward, and
warmup/repeat run the forward more than once)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

__all__ = ["model_state_restored"]


@contextlib.contextmanager
def model_state_restored(model: nn.Module) -> Iterator[None]:
    """Restore every module's ``training`` flag and, where a module trains, its buffers, on exit
    (also when the body raises)."""
    modules = list(model.modules())
    flags = [(m, m.training) for m in modules]
    saved: list[tuple[torch.Tensor, torch.Tensor]] = []
    if any(flag for _, flag in flags):
        with torch.no_grad():
            saved = [(b, b.clone()) for m in modules for b in m.buffers(recurse=False) if b.device.type != "meta"]
    try:
        yield
    finally:
        for module, flag in flags:
            if module.training is not flag:
                module.training = flag
        with torch.no_grad():
            for buffer, copy in saved:
                buffer.copy_(copy)

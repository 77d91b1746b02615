"""Every error and warning the library raises, in one place, all importable from ``torch_flops``.

Errors of the library's own making derive from :class:`TorchFlopsError` (and from the built-in
class a caller would otherwise catch, e.g. ``RuntimeError``). Bad arguments are plain
``TypeError`` (wrong type) or ``ValueError`` (right type, bad value) naming the parameter; see
:mod:`torch_flops._validate`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

import torch

__all__ = [
    "DroppedOutputWarning",
    "DuplicateFormulaError",
    "LossError",
    "NodeExecutionError",
    "TorchFlopsError",
    "TracerFallbackWarning",
    "TracingError",
    "UnsupportedOpError",
    "UnsupportedOpWarning",
    "UnsupportedOptimizerError",
]


class TorchFlopsError(Exception):
    """Base class of the errors torch_flops raises itself (argument errors excepted)."""


class TracingError(TorchFlopsError, RuntimeError):
    """The model could not be turned into a graph; the message says why and what to try."""


class NodeExecutionError(TorchFlopsError, RuntimeError):
    """Running one graph node failed; the message names the node and its input shapes."""


class UnsupportedOpError(TorchFlopsError, RuntimeError):
    """A node has no FLOPs formula (or its formula failed) and ``strict=True`` was asked for."""


class LossError(TorchFlopsError, ValueError, RuntimeError):
    """``backward=True`` got a loss ``backward()`` cannot start from (not a scalar, or needing no
    gradient). Eager ``loss.backward()`` raises ``RuntimeError`` for both, so this is one too; it is
    also a ``ValueError``, as the loss is a bad argument of the profiled call."""


class UnsupportedOptimizerError(TorchFlopsError, TypeError):
    """An optimizer class (and every class of its MRO) has no step FLOPs formula
    (``torch_flops.optim.register_optimizer`` adds one)."""


class DuplicateFormulaError(TorchFlopsError, ValueError):
    """A formula was registered for a target that already has one, without ``override=True``."""


class UnsupportedOpWarning(UserWarning):
    """A graph node has no FLOPs formula (silence with ``warnings.simplefilter('ignore', ...)``)."""


class TracerFallbackWarning(UserWarning):
    """``tracer='auto'`` profiled the torch.export graph because symbolic tracing failed."""


class DroppedOutputWarning(UserWarning):
    """Part of the model's output (e.g. a transformers cache object) could not be returned."""


def add_note(e: BaseException, note: str) -> None:
    """``e.add_note(note)`` (Python 3.11), or the same ``__notes__`` list on 3.10: the exception
    keeps its type, and says where it was raised."""
    if hasattr(e, "add_note"):
        e.add_note(note)
    else:  # pragma: no cover  (Python 3.10)
        notes = getattr(e, "__notes__", None)
        if not isinstance(notes, list):
            notes = []
            e.__notes__ = notes  # type: ignore[attr-defined]
        notes.append(note)


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_PASSED_THROUGH = (_PACKAGE, os.path.abspath(contextlib.__file__))
_TORCH = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def caller_stacklevel(through_torch: bool = False) -> int:
    """The ``stacklevel`` for a ``warnings.warn`` in this package that names the user's line: the first
    frame outside it (and outside ``contextlib``, whose context managers it runs in; ``through_torch``:
    and outside torch, for a warning from a hook torch calls, e.g. at the end of ``optimizer.step()``),
    counted from the function that calls ``warnings.warn``."""
    passed = _PASSED_THROUGH + (_TORCH,) if through_torch else _PASSED_THROUGH
    frame: Any = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(passed):
        frame, level = frame.f_back, level + 1
    return level

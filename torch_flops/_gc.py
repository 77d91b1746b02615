"""Pausing Python's cyclic garbage collector around bulk work."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["gc_paused"]


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while the body builds thousands of records or graph nodes
    (each collection would walk them all again, and fx nodes form cycles with their graph);
    collection resumes, as it was, on exit, also when the body raises."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()

"""A one-line progress report on stderr for long profiles: the step running now (capture, plan,
run i/n), shown only when stderr is a terminal and only once a profile has taken about a second,
rewritten in place and cleared at the end."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """``progress.step("run 2/5")`` while working; ``progress.done()`` at the end."""

    def __init__(self, enabled: bool | None = None, stream: TextIO | None = None, delay_s: float = 1.0,
                 interval_s: float = 0.2) -> None:
        self._stream = stream if stream is not None else sys.stderr
        if enabled is None:
            isatty = getattr(self._stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self.enabled = enabled
        self._delay = delay_s
        self._start = time.perf_counter()
        self._shown = False
        self._text = ""
        self._last = 0.0
        self._interval = interval_s

    def step(self, text: str) -> None:
        self._text = text
        if not self.enabled or time.perf_counter() - self._start < self._delay:
            return
        self._stream.write(f"\rtorch_flops: {text}...\033[K")
        self._stream.flush()
        self._shown = True

    def nodes(self, done: int) -> None:
        """Inside a long run: ``done`` nodes so far (callers call it every few hundred nodes; the
        line is rewritten at most once per ``interval_s``)."""
        now = time.perf_counter()
        if not self.enabled or not done or now - self._start < self._delay or now - self._last < self._interval:
            return
        self._last = now
        self._stream.write(f"\rtorch_flops: {self._text}: {done:,} nodes, {now - self._start:.1f} s\033[K")
        self._stream.flush()
        self._shown = True

    def done(self) -> None:
        if self._shown:
            self._stream.write("\r\033[K")
            self._stream.flush()
            self._shown = False

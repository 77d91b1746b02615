"""Headless Chromium for the HTML tests, driven over the DevTools protocol through a pipe
(``--remote-debugging-pipe``: JSON messages ended by a NUL byte on file descriptors 3 and 4), with
the standard library alone. ``find_chromium()`` is None where no Chromium is installed (the tests
skip then).

    with Browser(find_chromium()) as browser:
        page = browser.open("file:///tmp/report.html")
        page.evaluate("document.title"), page.errors(), page.requests(), page.screenshot()
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

__all__ = ["Browser", "ChromiumError", "Page", "find_chromium"]

_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# flags that work as root in a container, with no network use of Chromium's own
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio", "--remote-debugging-pipe")
# the child: put the two pipe ends on descriptors 3 and 4 (through copies above 10, so that
# neither overwrites the other), then become Chromium
_TRAMPOLINE = ("import fcntl, os, sys\n"
               "r, w = (fcntl.fcntl(int(fd), fcntl.F_DUPFD, 10) for fd in sys.argv[1:3])\n"
               "os.dup2(r, 3); os.dup2(w, 4); os.close(r); os.close(w)\n"
               "os.execv(sys.argv[3], sys.argv[3:])\n")


class ChromiumError(RuntimeError):
    pass


def find_chromium() -> str | None:
    """The Chromium (or Chrome) executable on PATH, or None."""
    for name in _NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """One headless Chromium process; use as a context manager."""

    def __init__(self, executable: str, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self._profile_dir = tempfile.mkdtemp(prefix="torch-flops-chromium-")
        to_child, self._write_fd = os.pipe()
        self._read_fd, from_child = os.pipe()
        self._process = subprocess.Popen(
            [sys.executable, "-c", _TRAMPOLINE, str(to_child), str(from_child), executable, *FLAGS,
             f"--user-data-dir={self._profile_dir}", "about:blank"],
            pass_fds=(to_child, from_child), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_child)
        os.close(from_child)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []

    def __enter__(self) -> Browser:  # noqa: PYI034  (typing_extensions is no dependency)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._process.poll() is None:
            try:
                self.send("Browser.close", timeout_s=5)
            except (ChromiumError, TimeoutError, OSError):
                pass
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        for fd in (self._write_fd, self._read_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self._profile_dir, ignore_errors=True)

    # -------------------------------------------------------------- the protocol
    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout_s: float | None = None) -> dict[str, Any]:
        """Send one command and return its result (events that arrive meanwhile are kept)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self._write_fd, data):]
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise ChromiumError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._events.append(reply)

    def wait_for(self, method: str, session: str | None, timeout_s: float | None = None) -> dict[str, Any]:
        """The first event ``method`` of ``session`` (already received or to come)."""
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while True:
            for i, event in enumerate(self._events):
                if event.get("method") == method and event.get("sessionId") == session:
                    return self._events.pop(i)
            self._events.append(self._receive(deadline))

    def events(self, session: str) -> list[dict[str, Any]]:
        """Every event received so far for ``session`` (kept)."""
        return [e for e in self._events if e.get("sessionId") == session]

    def _receive(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer from Chromium in time")
            ready, _, _ = select.select([self._read_fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._read_fd, 1 << 20)
            if not chunk:
                raise ChromiumError(f"Chromium exited (status {self._process.poll()})")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)  # type: ignore[no-any-return]

    # -------------------------------------------------------------- pages
    def open(self, url: str, width: int = 1280, height: int = 900) -> Page:
        """A new tab of ``width`` x ``height`` CSS pixels showing ``url``, once its load event fired."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=session)
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session)
        self.send("Page.navigate", {"url": url}, session)
        self.wait_for("Page.loadEventFired", session)
        return Page(self, session)


class Page:
    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression (awaited when a promise); ``ChromiumError`` when it throws."""
        result = self.browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                        "awaitPromise": True}, self.session)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise ChromiumError(details.get("exception", {}).get("description") or details.get("text"))
        return result["result"].get("value")

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries of the page so far."""
        found = []
        for event in self.browser.events(self.session):
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(str(params["exceptionDetails"].get("exception", {}).get("description")
                                 or params["exceptionDetails"].get("text")))
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(" ".join(str(a.get("value", a.get("description"))) for a in params.get("args", [])))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                found.append(params["entry"].get("text", ""))
        return found

    def requests(self) -> list[str]:
        """The URL of every request the page made so far (its own file's included)."""
        return [event["params"]["request"]["url"] for event in self.browser.events(self.session)
                if event.get("method") == "Network.requestWillBeSent"]

    def screenshot(self, full_page: bool = True) -> bytes:
        """A PNG of the page (all of it with ``full_page``)."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            metrics = self.browser.send("Page.getLayoutMetrics", session=self.session)
            size = metrics.get("cssContentSize") or metrics["contentSize"]
            params.update(captureBeyondViewport=True, clip={"x": 0, "y": 0, "width": size["width"],
                                                            "height": size["height"], "scale": 1})
        return base64.b64decode(self.browser.send("Page.captureScreenshot", params, self.session)["data"])

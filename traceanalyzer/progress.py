"""Progress on the terminal for big inputs (over PROGRESS_MIN_BYTES), silent otherwise.

Shown on stderr only when stderr is a terminal, so pipes and CI logs stay clean. One line,
rewritten in place: the stage, how much of the input has been read (on-disk bytes, so a .gz
counts its compressed size; reading, gunzipping and decoding happen together), and the time
since the start. A background ticker keeps the time moving during stages that report nothing
themselves (analysis, rendering).
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from .inert import terminal

PROGRESS_MIN_BYTES = 100 * 1024 * 1024
_REFRESH_S = 0.25


class Progress:
    def __init__(self, paths: list[Path], stream: TextIO | None = None,
                 min_bytes: int = PROGRESS_MIN_BYTES) -> None:
        self.stream = stream or sys.stderr
        self.total_bytes = _size(paths)
        is_tty = getattr(self.stream, "isatty", lambda: False)()
        self.enabled = self.total_bytes >= min_bytes and bool(is_tty)
        self.done_bytes = 0
        self.started = time.monotonic()
        self._last = 0.0
        self._width = 0
        self.label = "reading"
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if self.enabled:
            self._ticker = threading.Thread(target=self._tick, name="progress", daemon=True)
            self._ticker.start()

    def advance(self, nbytes: int) -> None:
        """`nbytes` more of the input read (the callback readers get as ReadOptions.progress)."""
        self.done_bytes += nbytes
        self._show()

    def stage(self, label: str) -> None:
        self.label = label
        self._show(force=True)

    def done(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=1)
        if self.enabled:
            with self._lock:
                self.stream.write("\r" + " " * self._width + "\r")
                self.stream.flush()

    def line(self) -> str:
        elapsed = time.monotonic() - self.started
        if self.label == "reading":
            done_mb, total_mb = self.done_bytes / 1e6, self.total_bytes / 1e6
            if self.total_bytes and self.done_bytes <= self.total_bytes:
                pct = 100.0 * self.done_bytes / self.total_bytes
                return f"reading and decoding: {done_mb:,.0f} of {total_mb:,.0f} MB ({pct:.0f}%), {elapsed:.1f} s"
            return f"reading and decoding: {done_mb:,.0f} MB, {elapsed:.1f} s"
        return f"{self.label}... {elapsed:.1f} s"

    def _tick(self) -> None:
        while not self._stop.wait(_REFRESH_S * 2):
            self._show(force=True)

    def _show(self, force: bool = False) -> None:
        if not self.enabled or self._stop.is_set():
            return
        now = time.monotonic()
        if not force and now - self._last < _REFRESH_S:
            return
        with self._lock:
            self._last = now
            text = terminal(self.line())
            pad = max(self._width - len(text), 0)
            self._width = max(self._width, len(text))
            self.stream.write("\r" + text + " " * pad)
            self.stream.flush()


def _size(paths: list[Path]) -> int:
    total = 0
    for p in paths:
        try:
            if p.is_dir():
                total += sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
            else:
                total += p.stat().st_size
        except OSError:
            pass
    return total

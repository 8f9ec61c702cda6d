"""Progress on the terminal for big inputs (over PROGRESS_MIN_BYTES), silent otherwise.

Shown on stderr only when stderr is a terminal, so pipes and CI logs stay clean.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

PROGRESS_MIN_BYTES = 100 * 1024 * 1024
_REFRESH_S = 0.2


class Progress:
    def __init__(self, paths: list[Path], stream=None) -> None:  # type: ignore[no-untyped-def]
        self.stream = stream or sys.stderr
        total = 0
        for p in paths:
            try:
                total += sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size
            except OSError:
                pass
        self.enabled = total >= PROGRESS_MIN_BYTES and getattr(self.stream, "isatty", lambda: False)()
        self.done_bytes = 0
        self.started = time.monotonic()
        self._last = 0.0
        self.label = "decoding"

    def advance(self, nbytes: int) -> None:
        self.done_bytes += nbytes
        self._show()

    def stage(self, label: str) -> None:
        self.label = label
        self._show(force=True)

    def _show(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < _REFRESH_S:
            return
        self._last = now
        mb = self.done_bytes / 1e6
        self.stream.write(f"\r{self.label}: {mb:,.0f} MB decoded, {now - self.started:.1f} s   ")
        self.stream.flush()

    def done(self) -> None:
        if self.enabled:
            self.stream.write("\r" + " " * 60 + "\r")
            self.stream.flush()

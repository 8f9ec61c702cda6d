"""Writing a command's result: to a file (never over an existing one without --force) or stdout."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import UsageError


def check_target(target: Path, force: bool) -> None:
    if str(target) != "-" and target.exists() and not force:
        raise UsageError(f"{target} exists; pass --force to overwrite it or -o to choose another file")


def write(target: Path, data: bytes) -> None:
    if str(target) == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    try:
        target.write_bytes(data)
    except OSError as exc:
        raise UsageError(f"cannot write {target}: {exc.strerror or exc}") from None

"""Writing a command's result: to a file (never over an existing one without --force) or stdout.

The file named by `$GITHUB_STEP_SUMMARY` is the job summary of a GitHub Actions step, shared
with other steps: writing there appends instead of refusing or replacing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..errors import UsageError


def is_step_summary(target: Path) -> bool:
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if not summary or str(target) == "-":
        return False
    try:
        return Path(summary).resolve() == target.resolve()
    except OSError:
        return False


def check_target(target: Path, force: bool) -> None:
    if str(target) != "-" and target.exists() and not force and not is_step_summary(target):
        raise UsageError(f"{target} exists; pass --force to overwrite it or -o to choose another file")


def write(target: Path, data: bytes) -> None:
    if str(target) == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    try:
        if is_step_summary(target):
            with open(target, "ab") as fh:
                fh.write(data if data.startswith(b"\n") else b"\n" + data)
        else:
            target.write_bytes(data)
    except OSError as exc:
        raise UsageError(f"cannot write {target}: {exc.strerror or exc}") from None

"""Writing a command's result: to a file (never over an input, never over an existing file without
--force) or stdout.

An output path that is one of the inputs (the same file by any name: a relative path, a symlink, a
hard link) is refused, `--force` or not: trace files, every trace of every run of a log dir given,
trace and log files directly in a directory given, `--dmon` logs and nvidia-smi logs beside a trace.

The file named by `$GITHUB_STEP_SUMMARY` is the job summary of a GitHub Actions step, shared
with other steps: writing there appends instead of refusing or replacing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from ..errors import InputError, UsageError


def is_step_summary(target: Path) -> bool:
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if not summary or str(target) == "-":
        return False
    try:
        return Path(summary).resolve() == target.resolve()
    except OSError:
        return False


def _key(path: Path) -> tuple[int, int] | None:
    """The file's identity (device, inode), following symlinks; None when it is not a readable file."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino)


def _dir_inputs(folder: Path) -> Iterable[Path]:
    """The files a directory input stands for: every trace of every run of a log dir, and every
    trace or log file directly in it (what a plain directory is read as, by content: `folder_files`)."""
    from ..formats import logdir as L
    from ..formats.inputs import folder_files

    try:
        found = L.discover(folder)
    except (InputError, OSError, RecursionError):
        found = None  # the analysis says what is wrong with it
    for run in found.runs if found else ():
        yield from run.files
    try:
        yield from folder_files(folder)
    except OSError:
        return


def _beside_logs(trace: Path) -> Iterable[Path]:
    """nvidia-smi logs beside a trace file (the pipeline may pick them up without --dmon)."""
    from ..formats import COUNTER_LOG_SUFFIXES, is_counter_log

    try:
        yield from (f for f in trace.parent.iterdir() if f.name.endswith(COUNTER_LOG_SUFFIXES) and is_counter_log(f))
    except OSError:
        return


def input_clash(target: Path, inputs: Sequence[Path]) -> Path | None:
    """The input file `target` is (by identity, not by name), or None."""
    from ..formats import is_counter_log

    key = _key(target)
    if key is None:
        return None  # nothing there yet: writing it cannot replace an input
    for p in inputs:
        if p.is_dir():
            candidates: Iterable[Path] = _dir_inputs(p)
        else:
            candidates = [p, *(_beside_logs(p) if is_counter_log(target) else ())]
        for f in candidates:
            if _key(f) == key:
                return f
    return None


def option_inputs(options: Any) -> list[Path]:
    """Every path an Options instance names (counter logs today, any log a later option adds), so a
    new input option is protected without touching the commands."""
    found: list[Path] = []
    for f in fields(options):
        value = getattr(options, f.name)
        values = value if isinstance(value, (tuple, list)) else (value,)
        found += [Path(v) for v in values if isinstance(v, (Path, os.PathLike))]
    return found


def check_target(target: Path, force: bool, inputs: Sequence[Path] = ()) -> None:
    """Refuse a target that is an input (`--force` or not), or that exists without `--force`."""
    if str(target) == "-":
        return
    clash = input_clash(target, inputs)
    if clash is not None:
        same = "" if str(clash) == str(target) else f" (it is {clash})"
        raise UsageError(f"{target} is an input{same}; an output is never written over an input, "
                         f"--force or not: choose another file with -o")
    if target.exists() and not force and not is_step_summary(target):
        raise UsageError(f"{target} exists; pass --force to overwrite it or -o to choose another file")


def unique_targets(targets: list[Path]) -> list[Path]:
    """Distinct output paths: a later run whose name collides with an earlier one's (runs 'a/b' and
    'a_b' both make out.a_b.html) gets .2, .3... before its suffix, so no run overwrites another.
    Names are compared casefolded: 'Run' and 'run' are one file on macOS and Windows."""
    seen: set[str] = set()
    out: list[Path] = []
    for t in targets:
        candidate, n = t, 1
        while str(candidate).casefold() in seen:
            n += 1
            candidate = t.with_name(f"{t.stem}.{n}{t.suffix}")
        seen.add(str(candidate).casefold())
        out.append(candidate)
    return out


def write(target: Path, data: bytes) -> None:
    if str(target) == "-":
        if sys.stdout is None:
            raise UsageError("cannot write to standard output: it is closed")
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.flush()  # a closed pipe raises BrokenPipeError here, handled by the command line
        return
    try:
        if is_step_summary(target):
            with open(target, "ab") as fh:
                fh.write(data if data.startswith(b"\n") else b"\n" + data)
        else:
            target.write_bytes(data)
    except OSError as exc:
        raise UsageError(f"cannot write {target}: {exc.strerror or exc}") from None


def say(text: str, target: Path) -> None:
    """Print the terminal summary: on stdout, or on stderr when the result itself goes to stdout;
    nothing when that stream is closed."""
    stream = sys.stderr if str(target) == "-" else sys.stdout
    if stream is not None:
        stream.write(text)

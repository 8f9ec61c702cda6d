"""Whether worker processes may be started here without running the caller's script again.

A spawned worker imports the main script (as `__mp_main__`) before it runs its task. A script that calls
traceanalyzer at its top level, not under `if __name__ == "__main__":`, would call it again in every
worker, which then dies trying to start processes of its own ("An attempt has been made to start a new
process before the current process has finished its bootstrapping phase"), and the call broke with a
traceback. So the calls that would start processes first look at where they were called from: from a
top-level statement of the main script that is not under that test, the work is done in this one
process, and a warning says how to get the cores back. Interactive sessions, `python -c`, notebooks and
guarded scripts are not affected (a spawned worker runs nothing of theirs). `pid_alive` is the one check of
whether a process still runs (the service's claims, the temporary files a killed read left).
"""

from __future__ import annotations

import ast
import os
import sys
import warnings
from functools import cache
from types import FrameType

_warned: set[tuple[str, int]] = set()


def unguarded_main_call() -> tuple[str, int] | None:
    """(path, line) of the main script's top-level statement this call comes from when a spawned worker
    would run it again (not under `if __name__ == "__main__":`); None when starting processes is safe."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not isinstance(path, str):
        return None  # an interactive session, `python -c`, a notebook: a worker imports no script
    # What a spawned worker skips (multiprocessing.spawn): a package's `__main__` run with `python -m`
    # (`python -m traceanalyzer`), and IPython's launcher.
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None and (name == "__main__" or name.endswith(".__main__")):
        return None
    if os.path.splitext(os.path.basename(path))[0] == "ipython":
        return None
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is vars(main):
            break
        frame = frame.f_back
    if frame is None:
        return None  # not called while the script's top level runs (a thread, a callback of a guarded call)
    line = frame.f_lineno
    return None if _guarded(path, line) else (path, line)


@cache
def _guarded_lines(path: str) -> tuple[tuple[int, int], ...] | None:
    """The line spans of the bodies of the script's top-level `if __name__ == "__main__":` blocks; None
    when the script cannot be read or parsed (then no call counts as guarded)."""
    try:
        with open(path, "rb") as fh:
            tree = ast.parse(fh.read(), path)
    except (OSError, SyntaxError, ValueError):
        return None
    spans = []
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and _is_main_test(stmt.test) and stmt.body:
            spans.append((stmt.body[0].lineno, stmt.body[-1].end_lineno or stmt.body[-1].lineno))
    return tuple(spans)


def _is_main_test(test: ast.expr) -> bool:
    """`__name__ == "__main__"` (either side first)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = (test.left, test.comparators[0])
    return any(isinstance(a, ast.Name) and a.id == "__name__" and isinstance(b, ast.Constant) and b.value == "__main__"
               for a, b in (sides, sides[::-1]))


def _guarded(path: str, line: int) -> bool:
    spans = _guarded_lines(path)
    return spans is not None and any(lo <= line <= hi for lo, hi in spans)


def processes_allowed(wanted: int) -> int:
    """`wanted` processes, or 1 (with a warning, once per calling line) when the call comes from an
    unguarded top-level statement of the main script (`unguarded_main_call`)."""
    if wanted <= 1:
        return wanted
    where = unguarded_main_call()
    if where is None:
        return wanted
    if where not in _warned:
        _warned.add(where)
        # told at the script's own line (the line to move), not somewhere inside traceanalyzer
        warnings.warn_explicit(
            f"traceanalyzer ran in one process instead of {wanted}: {where[0]}, line {where[1]}, calls it at the "
            f"script's top level, which every worker process would run again; put the call under "
            f"`if __name__ == \"__main__\":` to use {wanted} processes", RuntimeWarning, where[0], where[1])
    return 1


def pid_alive(pid: int) -> bool:
    """Whether a process `pid` exists on this machine (one of another user counts: it is not ours to judge).
    On Windows every pid counts as alive: there `os.kill(pid, 0)` would end the process."""
    if os.name == "nt":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


__all__ = ["pid_alive", "processes_allowed", "unguarded_main_call"]

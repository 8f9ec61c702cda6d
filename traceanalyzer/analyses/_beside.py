"""Two independent analyses at once: one in a second thread, one here.

The figures' hot paths are numpy sorts, searches and ufuncs over millions of rows, which release the
interpreter lock, so a second thread runs much of its work on another core (measured: two rank analyses in
two threads take 1.2x the time of one). `beside(a, b)` runs `a()` in the second thread and `b()` here and
returns both results; with one thread allowed (`set_threads(1)`, the default, and always in the second
thread itself) both run here, one after the other. The analyses share the Timeline read-only; each builds
its own arrays. Only pairs whose temporaries are small beside the events table are run this way: the peak
memory of a big trace's analysis stays that of one analysis at a time (docs/inputs.md)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from ..heap import return_freed_memory

A = TypeVar("A")
B = TypeVar("B")

_local = threading.local()
_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def set_threads(n: int) -> None:
    """Threads the analyses called from this thread may use: 1 (one after the other) or 2."""
    _local.threads = max(1, min(2, n))


def threads() -> int:
    return getattr(_local, "threads", 1)  # type: ignore[no-any-return]


def beside(a: Callable[[], A], b: Callable[[], B]) -> tuple[A, B]:
    """(a(), b()): `a` in the second thread when two are allowed, `b` here meanwhile."""
    if threads() < 2:
        return a(), b()
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="traceanalyzer-figures")
        pool = _pool
    fut = pool.submit(a)
    try:
        got_b = b()
    except BaseException:
        try:
            fut.result()  # let it finish before the caller goes on (it reads what the caller may free)
        except BaseException:  # noqa: BLE001 - the caller's own error is the one raised
            pass
        raise
    got_a = fut.result()
    return_freed_memory()  # the second thread's heap keeps the pages it freed until asked
    return got_a, got_b


__all__ = ["beside", "set_threads", "threads"]

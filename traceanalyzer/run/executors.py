"""Where per-rank tasks run: in this process, in a pool of local processes, or on a Dask cluster.

One seam for `--jobs N` and `--scheduler ADDRESS`: `map_tasks(fn, tasks, ...)` returns `fn(task)`
for every task, in the tasks' order, whatever ran them. Tasks and results must pickle (plain
dataclasses of paths and options in, compact results out); `fn` must be a module-level function
(a spawned process or a Dask worker imports it by name). Dask is optional: `pip install
'traceanalyzer-ml[dask]'`.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from ..errors import UsageError
from ..processes import processes_allowed

T = TypeVar("T")
R = TypeVar("R")

DASK_CONNECT_TIMEOUT_S = 30


def workers(jobs: int | None, n_tasks: int) -> int:
    """Processes to start: `jobs` (None: the cores this process may use), never more than tasks."""
    if jobs is not None and jobs < 1:
        raise UsageError(f"--jobs must be at least 1, not {jobs}")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(jobs or cores, n_tasks))


def map_tasks(fn: Callable[[T], R], tasks: Sequence[T], jobs: int | None = None, scheduler: str | None = None,
              on_done: Callable[[int, int], None] | None = None,
              in_process: Callable[[T], R] | None = None) -> list[R]:
    """`fn(task)` for every task, in order. `scheduler`: a Dask scheduler address (the tasks run
    there); else `jobs` local processes (1, or a single task: this process, with `in_process`
    instead of `fn` when given, e.g. to keep progress callbacks). `on_done(done, total)` after each."""
    if scheduler:
        return _dask(fn, tasks, scheduler, on_done)
    n = processes_allowed(workers(jobs, len(tasks)))
    if n == 1:
        return _serial(in_process or fn, tasks, on_done)
    return _processes(fn, tasks, n, on_done)


def _serial(fn: Callable[[T], R], tasks: Sequence[T], on_done: Callable[[int, int], None] | None) -> list[R]:
    out = []
    for task in tasks:
        out.append(fn(task))
        if on_done:
            on_done(len(out), len(tasks))
    return out


def _processes(fn: Callable[[T], R], tasks: Sequence[T], n: int,
               on_done: Callable[[int, int], None] | None) -> list[R]:
    # "spawn": a fresh interpreter per worker, the same on every platform, and safe although this
    # process may run threads (the progress ticker), which fork is not.
    context = multiprocessing.get_context("spawn")
    results: list[Any] = [None] * len(tasks)
    with ProcessPoolExecutor(max_workers=n, mp_context=context) as pool:
        futures: dict[Future[R], int] = {pool.submit(fn, t): i for i, t in enumerate(tasks)}
        pending = set(futures)
        done_count = 0
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_EXCEPTION)
                for fut in done:
                    results[futures[fut]] = fut.result()  # re-raises a worker's exception here
                    done_count += 1
                    if on_done:
                        on_done(done_count, len(tasks))
        except BrokenProcessPool:
            raise UsageError(f"a worker process ended abruptly (out of memory?) while {n} ranks were read at "
                             f"once; retry with fewer --jobs") from None
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return results


def _dask(fn: Callable[[T], R], tasks: Sequence[T], address: str,
          on_done: Callable[[int, int], None] | None) -> list[R]:
    try:
        from distributed import Client
    except ImportError:
        raise UsageError("--scheduler needs Dask: pip install 'traceanalyzer-ml[dask]'") from None
    try:
        client = Client(address, timeout=DASK_CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise UsageError(f"cannot reach the Dask scheduler at {address}: {exc}") from None
    with client:
        futures = client.map(fn, list(tasks), pure=False)
        results: list[Any] = []
        try:
            for fut in futures:  # in order: progress moves when the next rank in line is done
                results.append(fut.result())  # re-raises a worker's exception here
                if on_done:
                    on_done(len(results), len(tasks))
        except BaseException:
            client.cancel(futures)
            raise
    return results


__all__ = ["map_tasks", "workers"]

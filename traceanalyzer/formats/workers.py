"""One file, many workers: a Chrome trace in which every process is a worker of one job (pid = the
data-parallel rank or worker, tid = pipeline stage x lane, coarse host-side events, no GPU kernels),
as production training frameworks write them. Such a file is split into one rank per process, so that
the job's checks (stragglers, per-rank table) see its workers instead of one CPU-only rank.

The file says its processes are workers when it has no GPU work, at least two processes hold events,
and every one of them is named as a rank or worker: a `process_name` metadata event naming a rank or
worker ("DP rank 3", "worker 3"), or `thread_name` metadata naming ranks or stages ("PP rank 0, TP
rank 0, compute"). A worker's rank number is the one its process name gives, else its pid when the
pids are small distinct numbers, else its order. Metadata events are not kept by the trace reader, so
they are read here from the file, only when the first two conditions already hold.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from .. import timeline as T
from ..timeline import Timeline
from ._base import ReadOptions
from ._io import read_input

PROCESS_NAMES_WORKER = re.compile(r"\b(?:rank|worker)\b", re.IGNORECASE)
THREAD_NAMES_WORKER = re.compile(r"\b(?:rank|stage)\b", re.IGNORECASE)
# the worker's own number in a process name: "DP rank 3" (data parallel first), "rank 3", "worker 3"
_NUMBER = (re.compile(r"\b(?:dp|data[ _-]?parallel)[ _-]?rank\s*[:#=]?\s*(\d+)", re.IGNORECASE),
           re.compile(r"\b(?:rank|worker)\s*[:#=]?\s*(\d+)", re.IGNORECASE))
_META_KEYS = (b'"process_name"', b'"thread_name"')
MAX_METADATA_EVENTS = 20_000  # metadata events looked at, at most
MAX_PID_AS_RANK = 1 << 16  # pids below this (and distinct) may be the workers' rank numbers


def metadata_names(data: bytes, limit: int = MAX_METADATA_EVENTS) -> tuple[dict[int, str], dict[int, list[str]]]:
    """Process names and thread names by pid, from the `process_name` / `thread_name` metadata events of
    a Chrome trace's text (each event decoded on its own; one that does not decode is skipped)."""
    processes: dict[int, str] = {}
    threads: dict[int, list[str]] = {}
    seen = 0
    for key in _META_KEYS:
        pos = data.find(key)
        while pos >= 0 and seen < limit:
            seen += 1
            event = _enclosing_object(data, pos)
            pos = data.find(key, pos + len(key))
            if not isinstance(event, dict) or event.get("ph") != "M" or not isinstance(event.get("args"), dict):
                continue
            pid, name = event.get("pid"), event["args"].get("name")
            if not isinstance(pid, int) or isinstance(pid, bool) or not isinstance(name, str):
                continue
            if event.get("name") == "process_name":
                processes[pid] = name
            elif event.get("name") == "thread_name":
                threads.setdefault(pid, []).append(name)
    return processes, threads


# a metadata event: an object holding one object (its args), in either order, each at most _SPAN bytes
_SPAN = 1024
_OBJ = rb"\{[^{}]{0,%d}\}" % _SPAN
_EVENT = re.compile(rb"\{[^{}]{0,%d}(?:%s[^{}]{0,%d})?\}" % (_SPAN, _OBJ, _SPAN))


def _enclosing_object(data: bytes, pos: int) -> object:
    """The small JSON object (at most one object inside) around byte `pos`, decoded; None when there is
    none or it does not decode. Looks at a bounded window only, so a hostile file costs no more."""
    lo = max(0, pos - 3 * _SPAN)
    window = data[lo:pos + 3 * _SPAN]
    for m in _EVENT.finditer(window):
        if m.start() <= pos - lo < m.end():
            try:
                return json.loads(m.group(0))
            except (ValueError, RecursionError):
                return None
    return None


def worker_numbers(pids: list[int], processes: dict[int, str]) -> list[int | None]:
    """Each worker's rank number (see the module text); None where it is not known (numbered later)."""
    numbers: list[int | None] = []
    for pid in pids:
        found = None
        for pattern in _NUMBER:
            m = pattern.search(processes.get(pid, ""))
            if m:
                found = int(m.group(1))
                break
        numbers.append(found)
    if any(n is None for n in numbers) or len(set(numbers)) < len(numbers):
        if all(0 <= p < MAX_PID_AS_RANK for p in pids):
            return list(pids)
        return [None] * len(pids)
    return numbers


def split_workers(tl: Timeline, path: Path, options: ReadOptions) -> Timeline:
    """`tl` (one file read as one rank) split into one rank per worker process when the file says its
    processes are workers (module text); else `tl` as it is."""
    ev = tl.events
    if len(tl.ranks) != 1 or not len(ev) or ev["kind"].isin(T.GPU_WORK_KINDS).any():
        return tl
    pid_col = ev["pid"].to_numpy()
    pids = sorted(int(p) for p in np.unique(pid_col[pid_col >= 0]))
    if len(pids) < 2 or (pid_col < 0).any():
        return tl
    processes, threads = metadata_names(read_input(path, options.max_input_bytes))
    named = all(PROCESS_NAMES_WORKER.search(processes.get(p, "")) for p in pids)
    laned = all(any(THREAD_NAMES_WORKER.search(n) for n in threads.get(p, ())) for p in pids)
    if not (named or laned):
        return tl
    numbers = worker_numbers(pids, processes)
    base = tl.ranks[0]
    world = base.world_size or len(pids)
    ranks = [dataclasses.replace(base, index=i, rank=n, world_size=world) for i, n in enumerate(numbers)]
    index = np.searchsorted(np.asarray(pids, dtype=np.int64), pid_col).astype(np.int32)
    events = ev.copy()
    events["rank"] = index
    other = (events["kind"] == T.OTHER).to_numpy()
    if other.any():  # the workers' own categories ("compute", "comm"): their host work
        kinds = events["kind"].astype(str).to_numpy()
        kinds[other] = T.CPU_OP
        events["kind"] = pd.Categorical(kinds, categories=T.EVENT_KINDS)
    taken = f"; {int(other.sum())} events of categories not recognised taken as their host work" if other.any() else ""
    said = ", ".join("?" if n is None else str(n) for n in numbers)
    how = "process names" if named else "thread names"
    note = (f"{path}: {len(pids)} worker processes in one file (their {how} name ranks): read as ranks {said} "
            f"of one job, one per process; no GPU kernels, so the verdict is on the workers' host-side "
            f"compute, communication and waits{taken}")
    tl.sources[0].warnings.append(note.split(": ", 1)[1])
    out = dataclasses.replace(tl, events=events, ranks=ranks, warnings=[*tl.warnings, note])
    return out.validate()


__all__ = ["metadata_names", "split_workers", "worker_numbers"]

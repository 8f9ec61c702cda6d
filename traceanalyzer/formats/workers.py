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

Such files give each event its step in args (`"args": {"step": 3}`, or `iteration`): a worker's steps are then
its step numbers, each a step span from the first to the last end of the worker's events of that number
(`step_spans`), added to the worker's events as step markers. A number that is not a whole number from 0 to
2^31 - 1 is skipped and counted in the note; a file that does not decode whole (cut off) gives no step spans, nor
one above MAX_STEP_ARGS_BYTES decompressed (said in the note: decoding it again would hold it in memory twice).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

import numpy as np
import orjson
import pandas as pd

from .. import timeline as T
from ..timeline import Timeline
from ._base import ReadOptions
from ._columns import us_to_ns
from ._io import TruncatedInput, iter_input_blocks
from .kineto import MAX_ABS_TIME_US

PROCESS_NAMES_WORKER = re.compile(r"\b(?:rank|worker)\b", re.IGNORECASE)
THREAD_NAMES_WORKER = re.compile(r"\b(?:rank|stage)\b", re.IGNORECASE)
# the worker's own number in a process name: "DP rank 3" (data parallel first), "rank 3", "worker 3"
_NUMBER = (re.compile(r"\b(?:dp|data[ _-]?parallel)[ _-]?rank\s*[:#=]?\s*(\d+)", re.IGNORECASE),
           re.compile(r"\b(?:rank|worker)\s*[:#=]?\s*(\d+)", re.IGNORECASE))
_META_KEYS = (b'"process_name"', b'"thread_name"')
MAX_METADATA_EVENTS = 20_000  # metadata events looked at, at most
MAX_PID_AS_RANK = 1 << 16  # pids below this (and distinct) may be the workers' rank numbers
STEP_ARGS = ("step", "iteration")  # the args that give an event's step number, the first present
MAX_STEP = 2**31 - 1  # a step number beyond int32 is not one
MAX_STEP_ARGS_BYTES = 512 * 1024**2  # a file above this is not decoded again for its step args (memory)


@dataclass(frozen=True)
class StepSpans:
    """Each worker's step spans from its events' step args: one row per (pid, step number)."""

    pid: np.ndarray  # int64
    step: np.ndarray  # int64
    start_us: np.ndarray  # float64, the trace's microseconds
    end_us: np.ndarray
    skipped: int = 0  # step args that were no step number (not a whole number from 0 to MAX_STEP)
    base_ns: int = 0  # the header's baseTimeNanoseconds, which the reader adds to every time


def step_spans(data: bytes) -> StepSpans | None:
    """The step spans the complete events of a Chrome trace's text give by their step args (module text); None
    when no event gives one, or the text does not decode whole."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        return None
    rows: list[tuple[int, int, float, float]] = []
    skipped = 0
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X" or not isinstance(e.get("args"), dict):
            continue
        value = next((e["args"][k] for k in STEP_ARGS if k in e["args"]), None)
        if value is None:
            continue
        pid, ts, dur = e.get("pid"), e.get("ts"), e.get("dur", 0)
        if not _is_int(pid) or not -(2**63) <= pid < 2**63 or not _is_number(ts) or not _is_number(dur) or dur < 0:
            continue
        if not _is_int(value) or not 0 <= value <= MAX_STEP:
            skipped += 1
            continue
        rows.append((pid, value, float(ts), float(ts) + float(dur)))
    if not rows:
        return None
    base = doc.get("baseTimeNanoseconds", 0) if isinstance(doc, dict) else 0
    frame = pd.DataFrame(rows, columns=["pid", "step", "start", "end"])
    spans = frame.groupby(["pid", "step"], sort=True).agg(start=("start", "min"), end=("end", "max")).reset_index()
    return StepSpans(spans["pid"].to_numpy(np.int64), spans["step"].to_numpy(np.int64),
                     spans["start"].to_numpy(np.float64), spans["end"].to_numpy(np.float64), skipped,
                     base if _is_int(base) and 0 <= base < 2**62 else 0)


def _is_int(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: object) -> TypeGuard[int | float]:
    """A time or duration the reader keeps: a number within the years it takes (not a bool, not NaN)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) <= MAX_ABS_TIME_US


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
    data = _content(path, options.max_input_bytes)
    processes, threads = metadata_names(data)
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
    stepped = ""
    spans = None
    if len(data) > MAX_STEP_ARGS_BYTES:
        stepped = f"; step args not read (the file is above {MAX_STEP_ARGS_BYTES >> 20} MB decompressed)"
    elif not (ev["kind"] == T.STEP).any():  # markers, when there are, are the steps
        spans = step_spans(data)
    if spans is not None:
        events, kept = _with_step_spans(events, spans, np.asarray(pids, dtype=np.int64))
        if kept:
            stepped = f"; steps from the events' step args ({kept} step spans)"
            if spans.skipped:
                stepped += f", {spans.skipped} step args that are no step number skipped"
    said = ", ".join("?" if n is None else str(n) for n in numbers)
    how = "process names" if named else "thread names"
    note = (f"{path}: {len(pids)} worker processes in one file (their {how} name ranks): read as ranks {said} "
            f"of one job, one per process; no GPU kernels, so the verdict is on the workers' host-side "
            f"compute, communication and waits{taken}{stepped}")
    tl.sources[0].warnings.append(note.split(": ", 1)[1])
    out = dataclasses.replace(tl, events=events, ranks=ranks, warnings=[*tl.warnings, note])
    return out.validate()


def _content(path: Path, max_bytes: int) -> bytes:
    """The file's content (gunzipped); of a gzip stream cut off, what it held before the cut (the reader kept the
    events complete there: their names are read from the same bytes)."""
    blocks: list[bytes] = []
    try:
        for block in iter_input_blocks(path, max_bytes):
            blocks.append(block)
    except TruncatedInput:
        pass
    return b"".join(blocks)


def _with_step_spans(events: pd.DataFrame, spans: StepSpans, pids: np.ndarray) -> tuple[pd.DataFrame, int]:
    """`events` with the workers' step spans added as step markers (those of the workers only)."""
    known = np.isin(spans.pid, pids)
    if not known.any():
        return events, 0
    start = us_to_ns(spans.start_us[known]) + np.int64(spans.base_ns)
    end = us_to_ns(spans.end_us[known]) + np.int64(spans.base_ns)
    steps = spans.step[known]
    rows = T.events_frame({
        "ts_ns": start, "dur_ns": end - start, "name": pd.Categorical([f"step {n}" for n in steps]),
        "category": "step_args", "kind": T.STEP, "rank": np.searchsorted(pids, spans.pid[known]).astype(np.int32),
        "pid": spans.pid[known], "step": steps.astype(np.int32)})
    return T._concat_frames([events, rows], T.EVENT_COLUMNS), int(known.sum())


__all__ = ["StepSpans", "metadata_names", "split_workers", "step_spans", "worker_numbers"]

"""Reader for TensorFlow / xprof trace-viewer JSON (`<host>.trace.json.gz`, `trace_viewer.json`).

A Chrome trace without `cat`: each pid is a plane named by an `M` process_name event
(`/host:CPU`, `/device:GPU:0`), each tid a line named by thread_name (a host thread, or a GPU
stream `Stream #17(Kernel)`). ts/dur are microseconds relative to the capture start. Stats of the
XSpace events appear as args (`step_num`, `correlation_id`, `memcpy_details`...). The events go
through the same mapping as XSpace (`_tf_mapping`), so both give the same table.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from ..timeline import DeviceInfo, RankInfo, Source, Timeline
from ._base import ReadOptions
from ._columns import to_float, to_int_id, us_to_ns
from ._counters import check_device_count
from ._tf_mapping import RawEvents, framework_of, to_events
from .chrome_json import DECODE_NOTES, iter_event_chunks, looks_like_json_object, parse_envelope
from .kineto import MAX_ABS_TIME_US, MAX_DURATION_US, add_decode_notes

FORMAT = "tf-trace-json"

# A process named like a TF device or host: what tells this format apart from Kineto's JSON.
_TF_PROCESS = re.compile(rb'"name"\s*:\s*"/(?:host|device):')
_EPOCH_US_FLOOR = 1e15  # ts above this (2001-09-09 in epoch microseconds) are epoch times


KIND = "trace"  # registry.KINDS: what its files are in a job


def sniff(head: bytes) -> bool:
    return looks_like_json_object(head) and _TF_PROCESS.search(head) is not None


def read(path: Path, data: bytes, options: ReadOptions) -> Timeline:
    env = parse_envelope(data, path)
    source = Source(path=str(path), format=FORMAT)
    process_names: dict[int, str] = {}
    thread_names: dict[tuple[int, int], str] = {}
    chunks: list[dict[str, np.ndarray]] = []
    not_kept: Counter[str] = Counter()
    raw = RawEvents()
    DECODE_NOTES.clear()
    for chunk in iter_event_chunks(env, path, progress=options.progress):
        source.events_read += len(chunk)
        xs = []
        for e in chunk:  # one pass to split phases (M events need per-event handling anyway)
            if e.ph == "X":
                xs.append(e)
            elif e.ph == "M":
                _metadata(e, process_names, thread_names)
                not_kept["metadata"] += 1
            else:
                not_kept[_phase_reason(e.ph)] += 1
        if xs:
            chunks.append(_columns(xs, raw, not_kept))
    # Plane and line names are known only once every M event is read (they may come last).
    for cols in chunks:
        pid, tid = cols.pop("pid"), cols.pop("tid")
        plane_codes = raw.planes.codes([process_names.get(int(p), f"pid {p}") for p in pid])
        line_names = [thread_names.get((int(p), int(t)), str(t)) for p, t in zip(pid, tid)]
        raw.add(plane=plane_codes, line=raw.lines.codes(line_names), line_id=tid, **cols)
    for reason, n in sorted(not_kept.items()):
        source.not_kept[reason] = n
        if reason in _DROPPED:
            source.warnings.append(f"{n} events dropped: {_DROPPED[reason]}")
    mapped = to_events(raw)
    events = mapped.events
    for reason, n in mapped.not_kept.items():
        source.not_kept[reason] = source.not_kept.get(reason, 0) + n
    source.warnings.extend(mapped.warnings)
    source.events_kept = len(events)
    add_decode_notes(source)
    ts = events["ts_ns"].to_numpy()
    epoch = bool(len(ts)) and float(np.median(ts)) / 1000 > _EPOCH_US_FLOOR
    tl = Timeline(events=events, sources=[source],
                  ranks=[RankInfo(index=0, rank=None, source=0, clock="epoch" if epoch else "relative",
                                  framework=framework_of(raw.names.values))])
    check_device_count(path, np.asarray(mapped.devices, dtype=np.int64))
    tl.devices = [DeviceInfo(rank=0, index=d) for d in mapped.devices]
    return tl.validate()


# Events dropped for their values (not their phase), with what the warning says.
_DROPPED = {"no_timestamp": "no timestamp (ts missing or not a number)",
            "time_out_of_range": "time out of range (beyond the year 2200)",
            "duration_out_of_range": "duration out of range (longer than about 28 hours)"}


def _columns(xs: list[Any], raw: RawEvents, not_kept: Counter[str]) -> dict[str, np.ndarray]:
    args = [e.args for e in xs]
    ts = to_float([e.ts for e in xs])
    dur = to_float([e.dur for e in xs])
    no_ts = ~np.isfinite(ts)
    far = ~no_ts & (np.abs(ts) > MAX_ABS_TIME_US)
    long = ~no_ts & ~far & (np.isinf(dur) | (np.nan_to_num(dur) > MAX_DURATION_US))
    for reason, mask in (("no_timestamp", no_ts), ("time_out_of_range", far), ("duration_out_of_range", long)):
        if mask.any():
            not_kept[reason] += int(mask.sum())
    ok = ~(no_ts | far | long)
    ts = np.where(ok, ts, 0.0)
    dur = np.where(ok & np.isfinite(dur), dur, np.nan)
    details = [(a.memcpy_details or a.memset_details) if a is not None else None for a in args]
    cols = {
        "ts_ns": us_to_ns(np.nan_to_num(ts)), "dur_ns": np.where(np.isnan(dur), 0, us_to_ns(np.nan_to_num(dur))),
        "name": raw.names.codes([e.name for e in xs]),
        "pid": to_int_id([e.pid for e in xs]), "tid": to_int_id([e.tid for e in xs]),
        "step_num": to_int_id([a.step_num if a is not None else None for a in args]),
        "correlation": to_int_id([a.correlation_id if a is not None else None for a in args]),
        "details": raw.details.codes(["" if d is None else str(d) for d in details]),
    }
    return {k: v[ok] for k, v in cols.items()}


def _metadata(e: Any, process_names: dict[int, str], thread_names: dict[tuple[int, int], str]) -> None:
    name = e.args.name if e.args is not None else None
    if not isinstance(name, str):
        return
    pid = int(to_int_id([e.pid])[0])
    if e.name == "process_name":
        process_names[pid] = name
    elif e.name == "thread_name":
        thread_names[(pid, int(to_int_id([e.tid])[0]))] = name


def _phase_reason(ph: Any) -> str:
    if ph is None:
        return "empty"
    if ph in ("i", "I"):
        return "instant"
    if ph in ("s", "f", "t"):
        return "flow"
    if ph == "C":
        return "counter"
    return f"phase_{str(ph)[:32] if isinstance(ph, (str, int, float)) else type(ph).__name__}"

"""Kineto JSON -> Perfetto protobuf (`.pftrace`), encoded as PyTorch's Perfetto backend does.

One process track per pid and one thread track per (pid, tid) below it (GPU streams are the threads
of the device's process), with the names, labels and sort order of the JSON `M` events; a tid or pid
that is a string ("stream 7", "Spans") becomes a track of that name. Complete events become slice
begin / end pairs; slices of one thread that overlap without nesting go to child tracks of the
thread (as Kineto's builder does), since a track's slices must nest. Names, categories and
debug-annotation names are interned on one packet sequence (cleared on its first packet); args
become typed debug annotations (lists and objects nested). Instants stay instants. Counter samples
of a "GPU N Counters" process (Kineto's hardware counters) become GpuCounterEvents of GPU N with
their names interned, as PyTorch's encoder writes them; other counter samples go to one counter track
per process, name and series ("name.series"). Flows become `flow_ids` / `terminating_flow_ids` on the
slices they leave and
enter. The JSON header becomes "trace_metadata" instants (each value JSON text) and one
"device_properties" instant, as in Kineto's builder. Times are absolute nanoseconds (the JSON base
time added), rounded as the Kineto reader rounds them.

For tests and samples: `python -m traceanalyzer.formats.pftrace_write IN.json[.gz] OUT.pftrace`.
"""

from __future__ import annotations

import gzip
import heapq
import math
import re
import sys
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from ._columns import us_to_ns
from ._io import read_input
from ._perfetto_pb import (
    SEQ_INCREMENTAL_STATE_CLEARED,
    SEQ_NEEDS_INCREMENTAL_STATE,
    TYPE_COUNTER,
    TYPE_INSTANT,
    TYPE_SLICE_BEGIN,
    TYPE_SLICE_END,
    f_bytes,
    f_double,
    f_fixed64,
    f_string,
    f_varint,
)

SEQUENCE_ID = 1
GPU_COUNTERS_PID = re.compile(r"^GPU (\d{1,9}) Counters$")  # Kineto 2026's process of a GPU's counters
_MAX_NESTING = 24  # args nested deeper are written as one JSON text (legacy_json_value)
_MAX_TS_US = 9e15  # beyond this the Kineto reader's nanosecond conversion gives up: not written


class _Interner:
    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.new: list[tuple[int, str]] = []

    def iid(self, value: str) -> int:
        found = self.ids.get(value)
        if found is None:
            found = self.ids[value] = len(self.ids) + 1
            self.new.append((found, value))
        return found

    def take(self) -> list[tuple[int, str]]:
        out, self.new = self.new, []
        return out


class _Writer:
    def __init__(self) -> None:
        self.names = _Interner()
        self.cats = _Interner()
        self.keys = _Interner()
        self.next_uuid = 1
        self.first = True

    def uuid(self) -> int:
        self.next_uuid += 1
        return self.next_uuid

    def packet(self, body: bytes, ts: int | None = None, interned: bool = False) -> bytes:
        head = f_varint(8, ts) if ts is not None else b""
        head += f_varint(10, SEQUENCE_ID)
        flags = SEQ_INCREMENTAL_STATE_CLEARED if self.first else 0
        if interned:
            flags |= SEQ_NEEDS_INCREMENTAL_STATE
        self.first = False
        if flags:
            head += f_varint(13, flags)
        data = b""
        for number, interner, message in ((1, self.cats, 2), (2, self.names, 2), (3, self.keys, 2)):
            for iid, value in interner.take():
                data += f_bytes(number, f_varint(1, iid) + f_string(message, value))
        if data:
            head += f_bytes(12, data)
        return f_bytes(1, head + body)

    def annotation(self, key: str | None, value: Any, depth: int = 0, interned_key: bool = True) -> bytes:
        out = b""
        if key is not None:
            out = f_varint(1, self.keys.iid(key)) if interned_key else f_string(10, key)
        if isinstance(value, bool):
            return out + f_varint(2, int(value))
        if isinstance(value, int):
            if -(2**63) <= value < 2**63:
                return out + f_varint(4, value)
            if 0 <= value < 2**64:
                return out + f_varint(3, value)
            return out + f_string(9, str(value))
        if isinstance(value, float) and math.isfinite(value):
            return out + f_double(5, value)
        if isinstance(value, str):
            return out + f_string(6, value)
        if depth < _MAX_NESTING and isinstance(value, list) and value:
            return out + b"".join(f_bytes(12, self.annotation(None, v, depth + 1)) for v in value)
        if depth < _MAX_NESTING and isinstance(value, dict) and value:
            return out + b"".join(f_bytes(11, self.annotation(str(k), v, depth + 1, interned_key=False))
                                  for k, v in value.items())
        return out + f_string(9, msgspec.json.encode(value).decode())

    def track_event(self, typ: int, track: int, name: str | None = None, cat: str | None = None,
                    args: dict[str, Any] | None = None, flows: list[int] | None = None,
                    ends: list[int] | None = None, counter: int | float | None = None) -> bytes:
        out = f_varint(9, typ) + f_varint(11, track)
        if cat:
            out += f_varint(3, self.cats.iid(cat))
        if name is not None:
            out += f_varint(10, self.names.iid(name))
        for key, value in (args or {}).items():
            out += f_bytes(4, self.annotation(str(key), value))
        for fid in flows or ():
            out += f_fixed64(47, fid)
        for fid in ends or ():
            out += f_fixed64(48, fid)
        if isinstance(counter, float):
            out += f_double(44, counter)
        elif counter is not None:
            out += f_varint(30, counter)
        return f_bytes(11, out)


def _descriptor(uuid: int, parent: int = 0, name: str | None = None, process: bytes | None = None,
                thread: bytes | None = None, counter: bool = False) -> bytes:
    out = f_varint(1, uuid)
    if parent:
        out += f_varint(5, parent)
    if name is not None:
        out += f_string(2, name)
    if process is not None:
        out += f_bytes(3, process)
    if thread is not None:
        out += f_bytes(4, thread)
    if counter:
        out += f_bytes(8, b"")
    return f_bytes(60, out)


def _is_int32(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -(2**31) <= v < 2**31


def _is_int64(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


def pftrace_bytes(doc: dict[str, Any]) -> bytes:
    """A Kineto JSON document (decoded) as Perfetto trace bytes."""
    events = doc.get("traceEvents")
    events = [e for e in events if isinstance(e, dict)] if isinstance(events, list) else []
    raw_base = doc.get("baseTimeNanoseconds")
    base_ns: int = raw_base if isinstance(raw_base, int) and _is_int64(raw_base) and raw_base >= 0 else 0
    w = _Writer()
    out: list[bytes] = []

    # Names, labels and order of processes and threads (M events).
    proc_meta: dict[Any, dict[str, Any]] = {}
    thread_meta: dict[tuple[Any, Any], dict[str, Any]] = {}
    for e in events:
        if e.get("ph") != "M" or not isinstance(e.get("args"), dict):
            continue
        key, args = e.get("name"), e["args"]
        pid, tid = _key(e.get("pid")), _key(e.get("tid"))
        if key == "process_name":
            proc_meta.setdefault(pid, {})["name"] = args.get("name")
        elif key == "process_labels":
            proc_meta.setdefault(pid, {})["labels"] = args.get("labels")
        elif key == "process_sort_index":
            proc_meta.setdefault(pid, {})["sort"] = args.get("sort_index")
        elif key == "thread_name":
            thread_meta.setdefault((pid, tid), {})["name"] = args.get("name")
        elif key == "thread_sort_index":
            thread_meta.setdefault((pid, tid), {})["sort"] = args.get("sort_index")

    processes: dict[Any, int] = {}
    threads: dict[tuple[Any, Any], int] = {}

    def process_track(pid: Any) -> int:
        found = processes.get(pid)
        if found is not None:
            return found
        uuid = processes[pid] = w.uuid()
        meta = proc_meta.get(pid, {})
        body = f_varint(1, pid) if _is_int32(pid) else b""
        if isinstance(meta.get("name"), str) and _is_int32(pid):
            body += f_string(6, meta["name"])
        if _is_int32(meta.get("sort")):
            body += f_varint(3, meta["sort"])
        if isinstance(meta.get("labels"), str):
            body += f_string(8, meta["labels"])
        name = None if _is_int32(pid) else str(pid)
        out.append(w.packet(_descriptor(uuid, name=name, process=body)))
        return uuid

    def thread_track(pid: Any, tid: Any) -> int:
        found = threads.get((pid, tid))
        if found is not None:
            return found
        parent = process_track(pid)
        uuid = threads[(pid, tid)] = w.uuid()
        meta = thread_meta.get((pid, tid), {})
        if _is_int64(tid):
            body = (f_varint(1, pid) if _is_int32(pid) else b"") + f_varint(2, tid)
            if isinstance(meta.get("name"), str):
                body += f_string(5, meta["name"])
            if _is_int32(meta.get("sort")):
                body += f_varint(3, meta["sort"])
            out.append(w.packet(_descriptor(uuid, parent=parent, thread=body)))
        else:
            out.append(w.packet(_descriptor(uuid, parent=parent, name=str(tid))))
        return uuid

    for pid in proc_meta:
        process_track(pid)
    for pid, tid in thread_meta:
        thread_track(pid, tid)

    # The header, as Kineto's builder writes it.
    meta_track = w.uuid()
    out.append(w.packet(_descriptor(meta_track, name="Kineto Trace", process=f_string(6, "Kineto Trace"))))
    for key, value in doc.items():
        if key in ("traceEvents", "deviceProperties", "baseTimeNanoseconds"):
            continue
        args = {key: msgspec.json.encode(value).decode()}
        out.append(w.packet(w.track_event(TYPE_INSTANT, meta_track, "trace_metadata", args=args), interned=True))
    if isinstance(doc.get("deviceProperties"), list):
        text = msgspec.json.encode(doc["deviceProperties"]).decode()[1:-1]
        out.append(w.packet(w.track_event(TYPE_INSTANT, meta_track, "device_properties",
                                          args={"properties": text}), interned=True))

    # Hardware counters of "GPU N Counters" processes: GpuCounterEvents, their names interned per GPU.
    gpu_counter_ids: dict[int, dict[str, int]] = {}
    for e in events:
        m = GPU_COUNTERS_PID.match(e["pid"]) if e.get("ph") == "C" and isinstance(e.get("pid"), str) else None
        if m and isinstance(e.get("args"), dict):
            ids = gpu_counter_ids.setdefault(int(m.group(1)), {})
            for series in e["args"]:
                ids.setdefault(_metric(e.get("name"), series), len(ids) + 1)
    if gpu_counter_ids:
        interned = b""
        for gpu, ids in gpu_counter_ids.items():
            specs = b"".join(f_bytes(1, f_varint(1, cid) + f_string(2, metric)) for metric, cid in ids.items())
            interned += f_bytes(47, f_varint(1, gpu + 1) + f_bytes(2, specs) + f_varint(3, gpu))
        out.append(f_bytes(1, f_varint(10, SEQUENCE_ID) + f_bytes(12, interned)))

    # Times, as the Kineto reader makes them.
    ts_us = np.array([_num(e.get("ts")) for e in events], dtype=np.float64)
    dur_us = np.array([_num(e.get("dur")) for e in events], dtype=np.float64)
    ok_ts = np.isfinite(ts_us) & (np.abs(ts_us) < _MAX_TS_US)
    ts_ns = us_to_ns(ts_us) + np.int64(base_ns)
    dur_ns = us_to_ns(dur_us)
    ok_dur = np.isfinite(dur_us) & (dur_us >= 0) & (dur_us < _MAX_TS_US)

    slices: dict[tuple[Any, Any], list[int]] = {}
    at_time: dict[tuple[Any, Any, int], int] = {}
    singles: list[tuple[int, int, bytes]] = []  # (ts, index, track-event bytes) of instants and counters
    counters: dict[tuple[Any, str], int] = {}
    flow_ids: dict[tuple[Any, Any], int] = {}
    flows: dict[int, list[int]] = {}
    ends: dict[int, list[int]] = {}
    for i, e in enumerate(events):
        ph = e.get("ph")
        if not ok_ts[i] or ts_ns[i] < 0:
            continue
        pid, tid = _key(e.get("pid")), _key(e.get("tid"))
        if ph == "X" and ok_dur[i]:
            slices.setdefault((pid, tid), []).append(i)
            at_time.setdefault((pid, tid, int(ts_ns[i])), i)
    for i, e in enumerate(events):
        ph = e.get("ph")
        if not ok_ts[i] or ts_ns[i] < 0:
            continue
        pid, tid = _key(e.get("pid")), _key(e.get("tid"))
        name = e.get("name") if isinstance(e.get("name"), str) else ""
        cat = e.get("cat") if isinstance(e.get("cat"), str) else None
        args = e.get("args") if isinstance(e.get("args"), dict) else None
        if ph in ("i", "I"):
            ev = w.track_event(TYPE_INSTANT, thread_track(pid, tid), name, cat, args)
            singles.append((int(ts_ns[i]), i, ev))
        elif ph == "C" and args and isinstance(pid, str) and GPU_COUNTERS_PID.match(pid):
            gpu = int(GPU_COUNTERS_PID.match(pid).group(1))  # type: ignore[union-attr]
            for series, value in args.items():
                if not isinstance(value, (int, float)) or isinstance(value, bool):
                    continue
                cid = gpu_counter_ids[gpu][_metric(e.get("name"), series)]
                sample = f_varint(2, value) if isinstance(value, int) and _is_int64(value) \
                    else f_double(3, float(value))
                body = f_varint(4, gpu + 1) + f_bytes(2, f_varint(1, cid) + sample)
                singles.append((int(ts_ns[i]), i, f_bytes(52, body)))
        elif ph == "C" and args:
            for series, value in args.items():
                if not isinstance(value, (int, float)) or isinstance(value, bool):
                    continue
                metric = _metric(name, series)
                track = counters.get((pid, metric))
                if track is None:
                    track = counters[(pid, metric)] = w.uuid()
                    out.append(w.packet(_descriptor(track, parent=process_track(pid), name=metric, counter=True)))
                value = value if _is_int64(value) or isinstance(value, float) else float(value)
                singles.append((int(ts_ns[i]), i, w.track_event(TYPE_COUNTER, track, counter=value)))
        elif ph in ("s", "t", "f") and e.get("id") is not None:
            target = at_time.get((pid, tid, int(ts_ns[i])))
            if target is None:
                continue
            fid = flow_ids.setdefault((cat, _key(e.get("id"))), len(flow_ids) + 1)
            (ends if ph == "f" else flows).setdefault(target, []).append(fid)

    # Slices: per thread, in lanes whose slices nest (the thread's track, then child tracks).
    lanes_out: list[list[tuple[int, int, int, int]]] = []  # (ts, index, type, track) per lane
    for (pid, tid), idx in slices.items():
        thread = thread_track(pid, tid)
        order = sorted(idx, key=lambda j: (int(ts_ns[j]), -int(ts_ns[j] + dur_ns[j]), j))
        stacks: list[list[int]] = []
        lanes: list[list[tuple[int, int, int, int]]] = []
        tracks: list[int] = []
        for j in order:
            start, end = int(ts_ns[j]), int(ts_ns[j] + dur_ns[j])
            placed = -1
            for li, stack in enumerate(stacks):
                while stack and int(ts_ns[stack[-1]] + dur_ns[stack[-1]]) <= start:
                    k = stack.pop()
                    lanes[li].append((int(ts_ns[k] + dur_ns[k]), k, TYPE_SLICE_END, tracks[li]))
                if not stack or int(ts_ns[stack[-1]] + dur_ns[stack[-1]]) >= end:
                    placed = li
                    break
            if placed < 0:
                stacks.append([])
                lanes.append([])
                if tracks:
                    lane = w.uuid()
                    out.append(w.packet(_descriptor(lane, parent=thread)))
                    tracks.append(lane)
                else:
                    tracks.append(thread)
                placed = len(stacks) - 1
            stacks[placed].append(j)
            lanes[placed].append((start, j, TYPE_SLICE_BEGIN, tracks[placed]))
        for li, stack in enumerate(stacks):
            while stack:
                k = stack.pop()
                lanes[li].append((int(ts_ns[k] + dur_ns[k]), k, TYPE_SLICE_END, tracks[li]))
        lanes_out.extend(lanes)

    singles.sort(key=lambda s: (s[0], s[1]))
    # (ts, event index, type, track; for instants and counters: their place in `singles`)
    merged = heapq.merge(*lanes_out, [(ts, i, 0, k) for k, (ts, i, _) in enumerate(singles)],
                         key=lambda s: (s[0], s[1]))
    for ts, i, typ, track in merged:
        e = events[i]
        if typ == 0:
            out.append(w.packet(singles[track][2], ts=ts, interned=True))
        elif typ == TYPE_SLICE_END:
            out.append(w.packet(w.track_event(TYPE_SLICE_END, track), ts=ts))
        else:
            name = e.get("name") if isinstance(e.get("name"), str) else ""
            cat = e.get("cat") if isinstance(e.get("cat"), str) else None
            args = e.get("args") if isinstance(e.get("args"), dict) else None
            ev = w.track_event(TYPE_SLICE_BEGIN, track, name, cat, args, flows.get(i), ends.get(i))
            out.append(w.packet(ev, ts=ts, interned=True))
    return b"".join(out)


def _metric(name: Any, series: str) -> str:
    """A counter sample's metric: its name, with the series unless that is "" (Kineto's hardware counters)."""
    name = name if isinstance(name, str) else ""
    return name if series == "" else f"{name}.{series}"


def _key(v: Any) -> Any:
    """A pid / tid / id usable as a dict key (lists and objects, which no writer uses, as their text)."""
    return v if isinstance(v, (int, str, float)) or v is None else msgspec.json.encode(v).decode()


def convert(src: Path, dst: Path) -> None:
    """Write the Kineto JSON trace `src` as a Perfetto trace `dst` (gzip-compressed when it ends in .gz)."""
    doc = msgspec.json.decode(read_input(src))
    if not isinstance(doc, dict):
        raise ValueError(f"{src}: not a Kineto JSON trace (no JSON object)")
    data = pftrace_bytes(doc)
    if dst.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    dst.write_bytes(data)


if __name__ == "__main__":  # pragma: no cover
    if len(sys.argv) != 3:
        sys.exit("usage: python -m traceanalyzer.formats.pftrace_write IN.json[.gz] OUT.pftrace[.gz]")
    convert(Path(sys.argv[1]), Path(sys.argv[2]))

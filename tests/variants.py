"""Transformations of a Kineto JSON trace (the dict `json.load` gives) whose effect on the verdict is known
in advance, for the metamorphic tests (issue 43 item 9b, `tests/test_metamorphic.py`).

Each returns a new trace and leaves its input alone:

- `add_warmup_step`: a copy of the first step, `factor` times longer, put before it (a warm-up step);
- `repeat_step`: one step said twice: a copy right after it, every later event shifted by its length;
- `scale_time`: every timestamp (from the first) and every duration times `k`;
- `insert_startup_stall`: a host-only stretch (a module load) before the first GPU work;
- `add_idle_stream`: a second stream on the busiest GPU with one tiny kernel beside busy work.

Inserting time (`shift_after`) moves every event that starts at or after the point and stretches every host
range across it; GPU work moves with its launch (by correlation), so a kernel launched before the point and
running after it stays where it ran. Copies get fresh correlation ids, External ids, Python ids and flow ids,
and the steps are renumbered so `ProfilerStep#N` stays in time order.
"""

from __future__ import annotations

import copy
import re
from typing import Any

Event = dict[str, Any]
Doc = dict[str, Any]

GPU_WORK_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"})
GPU_CATS = GPU_WORK_CATS | {"gpu_user_annotation"}
STEP = re.compile(r"^ProfilerStep#(\d+)$")
LAUNCH_FLOW = "ac2g"  # Kineto's flow from a runtime call to its GPU work: its id is the correlation


def _args(e: Event) -> dict[str, Any]:
    a = e.get("args")
    return a if isinstance(a, dict) else {}


def _is_gpu(e: Event) -> bool:
    return e.get("cat") in GPU_CATS


def _timed(e: Event) -> bool:
    return e.get("ph") != "M" and isinstance(e.get("ts"), (int, float))


def _corr(e: Event) -> int | None:
    """The correlation id linking a runtime call, its GPU work and the flow between them."""
    if e.get("cat") == LAUNCH_FLOW and e.get("ph") in ("s", "f", "t"):
        return int(e["id"]) if isinstance(e.get("id"), (int, float)) else None
    c = _args(e).get("correlation")
    return int(c) if isinstance(c, (int, float)) and c >= 0 else None


def _end(e: Event) -> float:
    return float(e["ts"]) + float(e.get("dur") or 0)


def steps(doc: Doc) -> list[tuple[int, float, float]]:
    """The host step markers (number, start, end), by start."""
    out = []
    for e in doc["traceEvents"]:
        m = STEP.match(str(e.get("name", "")))
        if m and e.get("ph") == "X" and not _is_gpu(e) and _timed(e):
            out.append((int(m.group(1)), float(e["ts"]), _end(e)))
    return sorted(out, key=lambda s: s[1])


def _launches(doc: Doc) -> dict[int, float]:
    """Correlation id -> start of the host call that launched it (runtime calls)."""
    out: dict[int, float] = {}
    for e in doc["traceEvents"]:
        c = _corr(e)
        if c is not None and e.get("ph") == "X" and not _is_gpu(e) and _timed(e):
            out[c] = float(e["ts"])
    return out


def _anchor(e: Event, launches: dict[int, float]) -> float:
    """The time that decides whether an event moves: GPU work and launch flows move with their launch."""
    if _is_gpu(e) or e.get("cat") == LAUNCH_FLOW:
        c = _corr(e)
        if c is not None and c in launches:
            return launches[c]
    return float(e["ts"])


def shift_after(doc: Doc, at: float, by: float) -> Doc:
    """`by` us of time inserted at `at`: events anchored at or after it move by `by`; host ranges and GPU-side
    ranges (not GPU work) open across it grow by `by`."""
    out = copy.deepcopy(doc)
    launches = _launches(doc)
    for e in out["traceEvents"]:
        if not _timed(e):
            continue
        if _anchor(e, launches) >= at:
            e["ts"] = e["ts"] + by
        elif e.get("ph") == "X" and e.get("cat") not in GPU_WORK_CATS and _end(e) > at:
            e["dur"] = e["dur"] + by
    return out


def _span_events(doc: Doc, start: float, end: float) -> list[Event]:
    """The events of one host span: host ranges inside it, the GPU work and launch flows of the calls among
    them, GPU-side ranges of their External ids, and the other timed events (flows, instants) inside it."""
    host = [e for e in doc["traceEvents"] if e.get("ph") == "X" and not _is_gpu(e) and _timed(e)
            and e.get("cat") != "Trace" and start <= e["ts"] and _end(e) <= end]
    corrs = {c for c in map(_corr, host) if c is not None}
    ext = {_args(e).get("External id") for e in host} - {None}
    picked = {id(e) for e in host}
    out = list(host)
    for e in doc["traceEvents"]:
        if id(e) in picked or not _timed(e):
            continue
        c = _corr(e)
        if ((_is_gpu(e) or e.get("cat") == LAUNCH_FLOW) and c is not None and c in corrs) \
                or (e.get("cat") == "gpu_user_annotation" and _args(e).get("External id") in ext) \
                or (not _is_gpu(e) and e.get("ph") != "X" and e.get("cat") != LAUNCH_FLOW and start <= e["ts"] < end):
            out.append(e)
    return out


def _max_ids(doc: Doc) -> dict[str, int]:
    """The largest id of each kind in the trace (fresh ones start above)."""
    top = {"correlation": 0, "External id": 0, "Python id": 0, "flow": 0}
    for e in doc["traceEvents"]:
        a = _args(e)
        for k in ("correlation", "External id", "Python id"):
            if isinstance(a.get(k), (int, float)):
                top[k] = max(top[k], int(a[k]))
        if e.get("ph") in ("s", "f", "t") and isinstance(e.get("id"), (int, float)):
            top["correlation" if e.get("cat") == LAUNCH_FLOW else "flow"] = max(
                top["correlation" if e.get("cat") == LAUNCH_FLOW else "flow"], int(e["id"]))
    return top


def _copied(events: list[Event], start: float, new_start: float, scale: float, ids: dict[str, int],
            step_number: int) -> list[Event]:
    """Deep copies of a span's events moved from `start` to `new_start`, times and durations scaled by `scale`
    around it, with fresh ids (above `ids`) and the step marker(s) named `ProfilerStep#step_number`."""
    py_ids = {int(_args(e)["Python id"]) for e in events if isinstance(_args(e).get("Python id"), (int, float))}
    out = []
    for e in events:
        c = copy.deepcopy(e)
        c["ts"] = new_start + (float(e["ts"]) - start) * scale
        if "dur" in c:
            c["dur"] = float(e["dur"]) * scale
        a = _args(c)
        if isinstance(a.get("correlation"), (int, float)) and a["correlation"] >= 0:
            a["correlation"] = int(a["correlation"]) + ids["correlation"] + 1
        if isinstance(a.get("External id"), (int, float)) and a["External id"] > 0:
            a["External id"] = int(a["External id"]) + ids["External id"] + 1
        if isinstance(a.get("Python id"), (int, float)):
            a["Python id"] = int(a["Python id"]) + ids["Python id"] + 1
        if isinstance(a.get("Python parent id"), (int, float)) and int(a["Python parent id"]) in py_ids:
            a["Python parent id"] = int(a["Python parent id"]) + ids["Python id"] + 1
        if c.get("ph") in ("s", "f", "t") and isinstance(c.get("id"), (int, float)):
            c["id"] = int(c["id"]) + ids["correlation" if c.get("cat") == LAUNCH_FLOW else "flow"] + 1
        if STEP.match(str(c.get("name", ""))):
            c["name"] = f"ProfilerStep#{step_number}"
        out.append(c)
    return out


def _renumber_steps(doc: Doc, from_number: int, by: int) -> None:
    """Steps numbered `from_number` or more (host and GPU-side markers) renumbered `by` up, in place."""
    for e in doc["traceEvents"]:
        m = STEP.match(str(e.get("name", "")))
        if m and int(m.group(1)) >= from_number:
            e["name"] = f"ProfilerStep#{int(m.group(1)) + by}"


def add_warmup_step(doc: Doc, factor: float = 4.0) -> Doc:
    """A warm-up step before the first: a copy of the first step with every time and duration `factor` times
    longer, taking the first step's number (the steps after it are renumbered one up)."""
    number, start, end = steps(doc)[0]
    part = _span_events(doc, start, end)
    out = shift_after(doc, start, factor * (end - start))
    ids = _max_ids(out)
    _renumber_steps(out, number, 1)
    out["traceEvents"] += _copied(part, start, start, factor, ids, number)
    return out


def repeat_step(doc: Doc, index: int | None = None) -> Doc:
    """Step `index` (of `steps`; default: the middle one) said twice: its copy right after it, every later event
    shifted by its length, the copy numbered next and the later steps renumbered one up."""
    all_steps = steps(doc)
    number, start, end = all_steps[len(all_steps) // 2 if index is None else index]
    part = _span_events(doc, start, end)
    out = shift_after(doc, end, end - start)
    ids = _max_ids(out)
    _renumber_steps(out, number + 1, 1)
    out["traceEvents"] += _copied(part, start, end, 1.0, ids, number + 1)
    return out


def scale_time(doc: Doc, k: float = 2.0) -> Doc:
    """Every timestamp (measured from the first) and every duration times `k`."""
    out = copy.deepcopy(doc)
    t0 = min(float(e["ts"]) for e in out["traceEvents"] if _timed(e))
    for e in out["traceEvents"]:
        if _timed(e):
            e["ts"] = t0 + (float(e["ts"]) - t0) * k
            if isinstance(e.get("dur"), (int, float)):
                e["dur"] = float(e["dur"]) * k
    return out


def first_launch(doc: Doc) -> Event:
    """The host call that launched the first GPU work (by launch time)."""
    work = {c for c in (_corr(e) for e in doc["traceEvents"] if e.get("cat") in GPU_WORK_CATS) if c is not None}
    calls = [e for e in doc["traceEvents"] if e.get("ph") == "X" and not _is_gpu(e) and _timed(e)
             and _corr(e) in work]
    return min(calls, key=lambda e: float(e["ts"]))


def insert_startup_stall(doc: Doc, stall_us: float) -> Doc:
    """A host-only stretch of `stall_us` just before the first GPU work is launched: a module load (a one-off
    start-up call: CUDA lazy loading, a first call's JIT) on the launching thread; all later work moves."""
    launch = first_launch(doc)
    at = float(launch["ts"])
    out = shift_after(doc, at, stall_us)
    hip = str(launch.get("name", "")).startswith("hip")
    out["traceEvents"].append({"ph": "X", "cat": "cuda_driver", "name": "hipModuleLoadData" if hip
                               else "cuModuleLoadData", "pid": launch["pid"], "tid": launch["tid"], "ts": at,
                               "dur": stall_us, "args": {}})
    return out


def add_idle_stream(doc: Doc, kernel_us: float = 1.0) -> Doc:
    """A second stream on the GPU of the longest kernel, holding one `kernel_us` kernel at that kernel's middle
    (beside busy work: the GPU's busy time and its gaps stay as they were)."""
    out = copy.deepcopy(doc)
    kernels = [e for e in out["traceEvents"] if e.get("cat") in ("kernel", "Kernel") and e.get("ph") == "X"]
    longest = max(kernels, key=lambda e: float(e.get("dur") or 0))
    streams = [int(_args(e)["stream"]) for e in kernels if isinstance(_args(e).get("stream"), (int, float))]
    tids = [int(e["tid"]) for e in kernels if isinstance(e.get("tid"), (int, float))]
    stream = max(streams + tids + [0]) + 1
    args = {k: v for k, v in _args(longest).items() if k in ("device", "context")}
    args.update({"stream": stream, "grid": [1, 1, 1], "block": [32, 1, 1]})
    out["traceEvents"].append({"ph": "X", "cat": longest["cat"], "name": "void tiny_idle_stream_kernel()",
                               "pid": longest["pid"], "tid": stream,
                               "ts": float(longest["ts"]) + float(longest["dur"]) / 2 - kernel_us / 2,
                               "dur": kernel_us, "args": args})
    return out

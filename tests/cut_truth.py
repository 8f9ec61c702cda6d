"""The truth of a cut trace, from its raw events alone (json, orjson and numpy; nothing of the package).

A file cut after `n` bytes keeps the events whose text ends before the cut, in the file's order: the whole
trace's first `kept` events. Knowing the whole trace, the events the cut lost are known exactly, so is the time
they covered; a window that survived is one in which no GPU-record event (runtime call, kernel, copy, memset) was
lost. `cut_truth` gives, for a window the analyzer reports, the device's idle share there from the whole trace's
GPU work (its busy union clipped to the window), and how much of the window lost GPU work covered (0 when the
window is one that survived); `complete_stretches` the stretches of the capture no lost event touches.

Used by the truncation tests (tests/test_truncated.py) and runnable alone for a table:

    python tests/cut_truth.py TRACE.json.gz [FRACTION ...]
"""

from __future__ import annotations

import gzip
import json
import sys
import zlib
from dataclasses import dataclass

import numpy as np
import orjson

WORK = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")
RUNTIME = ("cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver", "Runtime", "Driver")


def gzip_cut(packed: bytes, fraction: float) -> bytes:
    """The first `fraction` of a gzip file's bytes."""
    return packed[: int(len(packed) * fraction)]


def inflate_prefix(data: bytes) -> bytes:
    """What a cut gzip (or plain) file's bytes decompress to before the cut."""
    if data[:2] != b"\x1f\x8b":
        return data
    return zlib.decompressobj(31).decompress(data)


def events_kept(prefix: bytes) -> int:
    """How many of the `traceEvents` array's events are complete in a cut document's text."""
    text = prefix.decode("utf-8", errors="ignore")
    at = text.find('"traceEvents"')
    if at < 0:
        return 0
    at = text.find("[", at) + 1
    decoder = json.JSONDecoder()
    n = 0
    while True:
        while at < len(text) and text[at] in " \t\r\n,":
            at += 1
        if at >= len(text) or text[at] == "]":
            return n
        try:
            _, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            return n
        n += 1


def _union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if not len(start):
        return start, end
    order = np.argsort(start, kind="stable")
    start, reach = start[order], np.maximum.accumulate(end[order])
    first = np.r_[True, start[1:] > reach[:-1]]
    last = np.r_[np.flatnonzero(first)[1:] - 1, len(start) - 1]
    return start[first], reach[last]


def _clipped_total(lo: np.ndarray, hi: np.ndarray, a: float, b: float) -> float:
    return float(np.clip(np.minimum(hi, b) - np.maximum(lo, a), 0, None).sum())


@dataclass(frozen=True)
class CutTruth:
    events: int  # events of the whole trace
    kept: int  # events the cut kept
    idle: float  # the device's idle share of the window, from the whole trace's GPU work
    lost_share: float  # share of the window that the device's lost GPU work covered (0: its work there survived)
    lost_runtime_share: float  # share of the window that lost runtime calls covered
    stretches: list[tuple[float, float]]  # (start_us, end_us) of the capture no lost GPU-record event touches


def _ts(events: list[dict], cats: tuple[str, ...], device: int | None) -> tuple[np.ndarray, np.ndarray]:
    rows = [(float(e["ts"]), float(e.get("dur", 0) or 0)) for e in events
            if e.get("ph") == "X" and e.get("cat") in cats and "ts" in e
            and (device is None or (e.get("args") or {}).get("device") == device)]
    a = np.array(rows, dtype=np.float64).reshape(-1, 2)
    return a[:, 0], a[:, 0] + a[:, 1]


def cut_truth(whole: bytes, cut_file: bytes, device: int, lo_us: float, hi_us: float) -> CutTruth:
    """The truth over [lo_us, hi_us) (the trace's own clock, microseconds) for a file cut from `whole`
    (decompressed JSON)."""
    events = orjson.loads(whole)["traceEvents"]
    kept = events_kept(inflate_prefix(cut_file))
    s, e = _ts(events, WORK, device)
    busy = _clipped_total(*_union(s, e), lo_us, hi_us)
    lost = events[kept:]
    lost_work = _union(*_ts(lost, WORK, device))
    lost_runtime = _union(*_ts(lost, RUNTIME, None))
    lost_lo, lost_hi = _union(*_ts(lost, WORK + RUNTIME, None))
    span = max(hi_us - lo_us, 1e-9)
    host = [float(x["ts"]) for x in events if x.get("ph") == "X" and "ts" in x]
    ends = [float(x["ts"]) + float(x.get("dur", 0) or 0) for x in events if x.get("ph") == "X" and "ts" in x]
    edges = np.r_[min(host), lost_hi], np.r_[lost_lo, max(ends)]
    stretches = [(float(a), float(b)) for a, b in zip(*edges) if b > a]
    return CutTruth(len(events), kept, 1 - busy / span, _clipped_total(*lost_work, lo_us, hi_us) / span,
                    _clipped_total(*lost_runtime, lo_us, hi_us) / span, stretches)


def _main(argv: list[str]) -> None:
    import traceanalyzer as ta  # the analyzer, only to print its figures beside the truth

    path, fractions = argv[0], [float(f) for f in argv[1:]] or [0.4, 0.6, 0.8]
    packed = open(path, "rb").read()
    whole = gzip.decompress(packed) if packed[:2] == b"\x1f\x8b" else packed
    import tempfile
    from pathlib import Path
    for f in fractions:
        with tempfile.TemporaryDirectory() as tmp:
            cut = Path(tmp) / ("cut.json.gz" if packed[:2] == b"\x1f\x8b" else "cut.json")
            cut.write_bytes(gzip_cut(packed, f))
            a = ta.analyze(cut, ta.Options(cache=False, find_logs_beside=False))
        for r in a.ranks:
            if not r.devices:
                print(f"{path}\t{f:.0%}\tno GPU activity survived\t{r.capture.note if r.capture else ''}")
            for d in r.devices:
                lo = d.window_start_ns / 1000
                t = cut_truth(whole, cut.read_bytes() if cut.exists() else gzip_cut(packed, f),
                              int(d.device.split(":")[1]), lo, lo + d.window_us)
                longest = max(t.stretches, key=lambda x: x[1] - x[0], default=(0.0, 0.0))
                lt = cut_truth(whole, gzip_cut(packed, f), int(d.device.split(":")[1]), *longest)
                print(f"{path}\t{f:.0%}\t{d.device}\tours {d.gpu_idle_fraction:.3f} over {d.window_us / 1000:.1f} ms"
                      f"\ttruth there {t.idle:.3f} (lost: work {t.lost_share:.1%}, runtime {t.lost_runtime_share:.1%})\tlongest complete stretch "
                      f"{(longest[1] - longest[0]) / 1000:.1f} ms idle {lt.idle:.3f}")


if __name__ == "__main__":
    _main(sys.argv[1:])

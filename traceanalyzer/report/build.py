"""Analysis (+ Timeline metadata) -> Report: plain dicts and lists, the JSON interface.

This is the stable, versioned interface scripts depend on (`schema` = "traceanalyzer/1"):
times are floats in microseconds (`*_us`), fractions are floats in [0, 1] or null when the
figure has no meaning (e.g. an empty window). Renderers only format this structure: whatever a
page draws (the summary, per-rank `timeline` tracks, `charts` series) is shaped here, bounded
in size, so that no renderer computes a figure.

`report["diagnosis"]`, when a diagnosis is given (through `extra`), is linked in last:
timeline gaps take their cause from its gaps and the per-step chart splits idle time by cause.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import __version__
from ..analyses import figures as F
from ..analyses import tracks as TR
from ..analyses.summary import Analysis, DeviceAnalysis, RankAnalysis
from ..definitions import FIGURES
from ..timeline import Timeline

SCHEMA = "traceanalyzer/1"
Report = dict[str, Any]
MAX_STEP_BARS = 500  # per-step chart: the first steps when a trace has more
# A diagnosis gap belongs to a timeline gap of the same device when their starts agree this well.
GAP_MATCH_TOLERANCE_US = 1.0


def build_report(tl: Timeline, analysis: Analysis, extra: dict[str, Any] | None = None) -> Report:
    report: Report = {
        "schema": SCHEMA,
        "tool": {"name": "traceanalyzer", "version": __version__},
        "options": {"min_gap_us": _us(analysis.min_gap_ns)},
        "inputs": [
            {"path": s.path, "format": s.format, "events_read": s.events_read,
             "events_kept": s.events_kept, "not_kept": dict(sorted(s.not_kept.items())),
             "warnings": list(s.warnings)}
            for s in tl.sources
        ],
        "warnings": list(tl.warnings),
        "ranks": [_rank(tl, r) for r in analysis.ranks],
        "definitions": dict(FIGURES),
    }
    report["summary"] = _summary(report["ranks"])
    max_blocks = TR.blocks_per_track(TR.count_tracks(tl))
    for r, rank_report in zip(analysis.ranks, report["ranks"]):
        rank_report["timeline"] = _timeline(tl, r, analysis.min_gap_ns, max_blocks)
    if extra:
        report.update(extra)
    link_diagnosis(report)
    return report


def _us(ns: float | None) -> float | None:
    return None if ns is None else round(float(ns) / 1000.0, 3)


def _frac(x: float | None) -> float | None:
    return None if x is None else round(min(max(float(x), 0.0), 1.0), 6)


def _rank(tl: Timeline, r: RankAnalysis) -> dict[str, Any]:
    info = tl.ranks[r.index]
    return {
        "rank": r.rank,
        "input": tl.sources[info.source].path,
        "framework": info.framework,
        "clock": info.clock,
        "window_start_ns": r.window.start_ns,
        "window_us": _us(r.window.dur_ns),
        "window_basis": r.window.basis,
        "steps": r.steps,
        "gpu_activity": bool(r.devices),
        "dataloader_wait_us": _us(r.dataloader_wait_ns),
        "dataloader_wait_fraction": _frac(r.dataloader_wait_fraction),
        "per_step": [
            {"step": s.step, "start_us": _us(s.start_ns - r.window.start_ns), "duration_us": _us(s.dur_ns),
             "gpu_busy_us": _us(s.gpu_busy_ns), "memcpy_us": _us(s.memcpy_ns),
             "dataloader_wait_us": _us(s.dataloader_ns), "idle_us": _us(s.idle_ns)}
            for s in r.per_step
        ],
        "devices": [_device(d) for d in r.devices],
    }


def _device(d: DeviceAnalysis) -> dict[str, Any]:
    b, g, m = d.busy, d.gaps, d.memcpy
    w = b.window
    return {
        "device": f"cuda:{d.device}",
        "index": d.device,
        "name": d.name,
        "window_start_ns": w.start_ns,
        "window_us": _us(w.dur_ns),
        "window_basis": w.basis,
        "gpu_busy_us": _us(b.busy_ns),
        "gpu_idle_fraction": _frac(b.idle_fraction),
        "kernel_us": _us(b.kernel_ns),
        "communication_us": _us(b.comm_ns),
        "exposed_communication_us": _us(b.exposed_comm_ns),
        "memcpy_us": _us(m.union_ns),
        "memcpy_share_of_busy": _frac(m.share_of_busy),
        "memcpy_share_of_window": _frac(m.share_of_window),
        "memcpy": {
            "by_direction": [
                {"direction": c.direction, "count": c.count, "union_us": _us(c.union_ns), "bytes": c.bytes,
                 "copies_with_size": c.bytes_known,
                 "bandwidth_gbps": None if c.bandwidth_gbps is None else round(float(c.bandwidth_gbps), 3),
                 "pageable": c.pageable, "pinned": c.pinned}
                for c in m.directions
            ],
            "memset_us": _us(m.memset_ns), "memset_count": m.memset_count, "memset_bytes": m.memset_bytes,
        },
        "gaps": _gaps(g, w),
        "top_kernels": [
            {"name": k.name, "count": k.count, "total_us": _us(k.total_ns), "mean_us": _us(k.mean_ns),
             "communication": k.comm}
            for k in d.kernels
        ],
    }


def _gaps(g: F.GapStats, w: F.Window) -> dict[str, Any]:
    return {
        "min_gap_us": _us(g.min_gap_ns),
        "count": g.count,
        "total_us": _us(g.total_ns),
        "largest_us": _us(g.largest_ns),
        "histogram": [{"from_us": _us(h.lo_ns), "to_us": _us(h.hi_ns), "count": h.count, "total_us": _us(h.total_ns)}
                      for h in g.histogram],
        "top": [{"start_us": _us(x.start_ns - w.start_ns), "duration_us": _us(x.dur_ns), "step": x.step}
                for x in g.top],
    }


# --- summary --------------------------------------------------------------------------------------
def _sum(values: list[float | None]) -> float:
    return float(sum(v for v in values if v is not None))


def _ratio(num: float, den: float) -> float | None:
    return _frac(num / den) if den > 0 else None


def _summary(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    devices = [d for r in ranks for d in r["devices"]]
    busy = _sum([d["gpu_busy_us"] for d in devices])
    window = _sum([d["window_us"] for d in devices])
    memcpy = _sum([d["memcpy_us"] for d in devices])
    wait = _sum([r["dataloader_wait_us"] for r in ranks])
    rank_window = _sum([r["window_us"] for r in ranks])
    return {
        "ranks": len(ranks),
        "devices": len(devices),
        "steps": max((r["steps"] for r in ranks), default=0),
        "window_us": max((r["window_us"] or 0.0 for r in ranks), default=0.0),
        "gpu_busy_us": round(busy, 3),
        "gpu_idle_fraction": None if window <= 0 else _frac(1.0 - busy / window),
        "memcpy_us": round(memcpy, 3),
        "memcpy_share_of_busy": _ratio(memcpy, busy),
        "dataloader_wait_us": round(wait, 3),
        "dataloader_wait_fraction": _ratio(wait, rank_window),
        "gaps": sum(d["gaps"]["count"] for d in devices),
        "gaps_total_us": round(_sum([d["gaps"]["total_us"] for d in devices]), 3),
        # Needs the batch size (input shapes), which no reader records yet: null until one does.
        "samples_per_s": None,
    }


# --- timeline tracks ------------------------------------------------------------------------------
def _rel_us(ns: np.ndarray, origin_ns: int) -> list[float]:
    """Nanoseconds -> microseconds from `origin_ns`, rounded to 0.1 us (drawing precision)."""
    return np.round((np.asarray(ns, dtype=np.int64) - origin_ns) / 1000.0, 1).tolist()


def _dur_us(ns: np.ndarray) -> list[float]:
    return np.round(np.asarray(ns, dtype=np.int64) / 1000.0, 1).tolist()


def _blocks(b: TR.Blocks, origin_ns: int) -> dict[str, Any]:
    return {
        "start_us": _rel_us(b.start_ns, origin_ns),
        "dur_us": _dur_us(b.end_ns - b.start_ns),
        "covered_us": _dur_us(b.covered_ns),
        "count": b.count.tolist(),
        "name": b.name_idx.tolist(),
        "names": list(b.names),
        "intervals": b.intervals,
        "merged": b.intervals > len(b.start_ns),
    }


def _timeline(tl: Timeline, r: RankAnalysis, min_gap_ns: int, max_blocks: int) -> dict[str, Any]:
    w = r.window
    windows = {d.device: d.busy.window for d in r.devices}
    t = TR.rank_tracks(tl, r.index, w, windows, min_gap_ns, max_blocks)
    origin = w.start_ns
    return {
        "window_us": _us(w.dur_ns),
        "max_blocks": max_blocks,
        "steps": {"step": t.step_number.tolist(), "start_us": _rel_us(t.step_start_ns, origin),
                  "dur_us": _dur_us(t.step_end_ns - t.step_start_ns), "total": t.steps_total},
        "devices": [
            {"device": f"cuda:{d.device}",
             "busy": _blocks(d.busy, origin),
             "copies": _blocks(d.copies, origin),
             "gaps": {"start_us": _rel_us(d.gaps.start_ns, origin), "dur_us": _dur_us(d.gaps.dur_ns),
                      "step": [None if s < 0 else s for s in d.gaps.step.tolist()],
                      "cause": [None] * len(d.gaps.start_ns), "total": d.gaps.total}}
            for d in t.devices
        ],
        "host": [dict(kind=h.kind, **_blocks(h.blocks, origin)) for h in t.host],
        "counters": [
            {"device": f"cuda:{c.device}", "metric": c.metric, "t_us": _rel_us(c.ts_ns, origin),
             "value": [None if np.isnan(v) else round(float(v), 3) for v in c.value], "samples": c.samples}
            for c in t.counters
        ],
    }


# --- linking the diagnosis ------------------------------------------------------------------------
def _diagnosis_rank(report: Report, i: int) -> dict[str, Any] | None:
    """The diagnosis entry of report rank `i`: same position, else the same rank number."""
    diag = report.get("diagnosis") or {}
    entries = diag.get("ranks") or []
    if len(entries) == len(report["ranks"]):
        return entries[i]
    number = report["ranks"][i]["rank"]
    return next((e for e in entries if e.get("rank") == number and number is not None), None)


def link_diagnosis(report: Report) -> Report:
    """Gap causes onto the timeline and per-step chart series; idempotent, safe without a diagnosis.

    A timeline gap takes the cause of the diagnosis gap of the same device that starts at the same
    time: from the diagnosis device's `gap_causes` (its longest gaps), else from its listed `gaps`.
    Diagnosis gap starts are measured from the device's window start, timeline ones from the rank's.
    """
    for i, r in enumerate(report["ranks"]):
        dr = _diagnosis_rank(report, i) or {}
        if "timeline" in r:
            offsets = {d["device"]: (d["window_start_ns"] - r["window_start_ns"]) / 1000.0 for d in r["devices"]}
            diag_devices = {d.get("device"): d for d in dr.get("devices") or []}
            for dev in r["timeline"]["devices"]:
                name, shift = dev["device"], offsets.get(dev["device"], 0.0)
                known = (diag_devices.get(name) or {}).get("gap_causes") or {}
                pairs = list(zip(known.get("start_us") or [], known.get("cause") or []))
                pairs += [(g.get("start_us"), g.get("cause")) for g in dr.get("gaps") or [] if g.get("device") == name]
                pairs = [(float(s) + shift, c) for s, c in pairs if s is not None]
                dev["gaps"]["cause"] = _match_causes(dev["gaps"]["start_us"], pairs)
        r["charts"] = {"per_step": _per_step_chart(r, dr or None)}
    return report


def _match_causes(starts_us: list[float], known: list[tuple[float, str | None]]) -> list[str | None]:
    """For each start, the cause of the known gap starting within GAP_MATCH_TOLERANCE_US, else None."""
    if not known or not starts_us:
        return [None] * len(starts_us)
    known = sorted(known, key=lambda k: k[0])
    k_start = np.array([k[0] for k in known], dtype=np.float64)
    s = np.asarray(starts_us, dtype=np.float64)
    right = np.clip(np.searchsorted(k_start, s), 0, len(k_start) - 1)
    left = np.clip(right - 1, 0, len(k_start) - 1)
    nearest = np.where(np.abs(k_start[left] - s) <= np.abs(k_start[right] - s), left, right)
    ok = np.abs(k_start[nearest] - s) <= GAP_MATCH_TOLERANCE_US
    return [known[j][1] if hit else None for j, hit in zip(nearest.tolist(), ok.tolist())]


def _per_step_chart(r: dict[str, Any], dr: dict[str, Any] | None) -> dict[str, Any]:
    """Stacked bars per step: compute (busy without copies), memcpy, idle (by cause when diagnosed)."""
    steps = r["per_step"][:MAX_STEP_BARS]
    by_step = {s.get("step"): s.get("idle_by_cause_us") or {} for s in (dr or {}).get("per_step") or []}
    causes: list[str] = []
    for s in steps:
        for cause, v in by_step.get(s["step"], {}).items():
            if v and cause not in causes:
                causes.append(cause)
    series: list[dict[str, Any]] = [
        {"key": "compute", "values": [round(max((s["gpu_busy_us"] or 0) - (s["memcpy_us"] or 0), 0.0), 3)
                                      for s in steps]},
        {"key": "memcpy", "values": [s["memcpy_us"] or 0.0 for s in steps]},
    ]
    if causes:
        for cause in causes:
            series.append({"key": f"idle:{cause}",
                           "values": [round(float(by_step.get(s["step"], {}).get(cause) or 0.0), 3) for s in steps]})
        rest = [round(max((s["idle_us"] or 0) - sum(float(v or 0) for v in by_step.get(s["step"], {}).values()),
                          0.0), 3) for s in steps]
        if any(v > 0 for v in rest):
            series.append({"key": "idle:unattributed", "values": rest})
    else:
        series.append({"key": "idle", "values": [s["idle_us"] or 0.0 for s in steps]})
    return {
        "step": [s["step"] for s in steps],
        "duration_us": [s["duration_us"] for s in steps],
        "dataloader_wait_us": [s["dataloader_wait_us"] for s in steps],
        "series": series,
        "omitted": max(len(r["per_step"]) - len(steps), 0),
    }

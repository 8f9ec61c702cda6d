"""Analysis (+ Timeline metadata) -> Report: plain dicts and lists, the JSON interface.

This is the stable, versioned interface scripts depend on (`schema` = "traceanalyzer/1"):
times are floats in microseconds (`*_us`), fractions are floats in [0, 1] or null when the
figure has no meaning (e.g. an empty window). Renderers only format this structure.
"""

from __future__ import annotations

from typing import Any

from .. import __version__
from ..analyses import figures as F
from ..analyses.summary import Analysis, DeviceAnalysis, RankAnalysis
from ..definitions import FIGURES
from ..timeline import Timeline

SCHEMA = "traceanalyzer/1"
Report = dict[str, Any]


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
    if extra:
        report.update(extra)
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
                 "bandwidth_gbps": None if c.bandwidth_gbps is None else round(c.bandwidth_gbps, 3),
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

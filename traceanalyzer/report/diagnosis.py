"""Diagnosis -> the report's `diagnosis` section (plain dicts; times in us, shares in [0, 1])."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..analyses.tracks import MAX_BLOCKS_PER_TRACK
from ..diagnosis import Diagnosis, Finding, RankDiagnosis
from ..diagnosis import host as H
from ..diagnosis.attribution import AttributedGap, DeviceAttribution


def diagnosis_section(d: Diagnosis) -> dict[str, Any]:
    return {
        "primary": d.primary,
        "host_primary": d.host_primary,
        "headline": d.headline,
        "findings": [_finding(f) for f in d.findings],
        "ranks": [_rank(r) for r in d.ranks],
    }


def _us(ns: float | int) -> float:
    return round(float(ns) / 1000.0, 3)


def _causes(by_cause: dict[str, int]) -> dict[str, float]:
    return {c: _us(v) for c, v in by_cause.items()}


def _finding(f: Finding) -> dict[str, Any]:
    return {"id": f.id, "cause": f.cause, "title": f.title, "severity": f.severity,
            "explains_us": _us(f.explains_ns), "share_of_idle": round(f.share_of_idle, 6),
            "evidence": list(f.evidence), "advice": list(f.advice)}


def _gap(g: AttributedGap) -> dict[str, Any]:
    return {"device": f"cuda:{g.device}", "start_us": _us(g.start_ns - g.window_start_ns),
            "duration_us": _us(g.dur_ns), "step": g.step, "cause": g.cause,
            "evidence": [{"name": e.name, "share": e.share} for e in g.evidence]}


def _rank(r: RankDiagnosis) -> dict[str, Any]:
    s = r.host_shares
    return {
        "rank": r.rank,
        "primary": r.primary,
        "host_primary": r.host_primary,
        "reason": r.reason,
        "headline": r.headline,
        "lost_us": _us(r.lost_ns),
        "window_us": _us(r.window_ns),
        "idle_us": _us(r.idle_ns),
        "idle_by_cause_us": _causes(r.idle_by_cause),
        "exposed_memcpy_us": _us(r.exposed_memcpy_ns),
        "exposed_communication_us": _us(r.exposed_comm_ns),
        "launch_threads": [{"pid": p, "tid": t} for p, t in r.launch_threads],
        "launch_thread_basis": r.thread_basis,
        "periodic": None if r.periodic is None else {"steps": list(r.periodic.steps), "every": r.periodic.every},
        "host_shares": None if s is None else {
            "total_us": _us(s.total_ns), "data_wait_us": _us(s.data_wait_ns),
            "model_ops_us": _us(s.model_ops_ns), "other_us": _us(s.other_ns)},
        "findings": [_finding(f) for f in r.findings],
        "devices": [{"device": f"cuda:{d.device}", "window_us": _us(d.window.dur_ns), "idle_us": _us(d.idle_ns),
                     "gap_count": d.gap_count, "idle_by_cause_us": _causes(d.idle_by_cause),
                     "exposed_memcpy_us": _us(d.exposed_memcpy_ns),
                     "exposed_communication_us": _us(d.exposed_comm_ns),
                     "gap_causes": _gap_causes(d)} for d in r.devices],
        "per_step": [{"step": p.step, "idle_by_cause_us": _causes(p.idle_by_cause)} for p in r.per_step],
        "gaps": [_gap(g) for g in r.gaps],
    }


def _gap_causes(d: DeviceAttribution) -> dict[str, list[Any]]:
    """The cause of the device's longest gaps (those a timeline can draw), start from its window start.

    The longest gaps of at least any --min-gap are among the longest gaps overall, so the drawn
    timeline finds every gap it shows here.
    """
    keep = np.sort(np.argsort(-(d.ends - d.starts), kind="stable")[:MAX_BLOCKS_PER_TRACK])
    return {"start_us": np.round((d.starts[keep] - d.window.start_ns) / 1000.0, 3).tolist(),
            "cause": [H.CAUSES[int(c)] for c in d.causes[keep]]}

"""Figures + diagnosis + counter and host-log figures -> the typed result (traceanalyzer.result.types).

The last step of the pipeline: it converts units once (ns -> us rounded to whole ns, fractions
clamped to [0, 1]) and turns the tracks drawn where the events are (analyses/tracks.py) and the
per-step figures into the bounded drawing payloads; it never reads the Timeline. Each gap's
cause is read from the device's gap set, where the figures gave it (shown when the run is
diagnosed). Renderers only format what this returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from .. import intervals as iv
from ..align import Alignment
from ..analyses import DeviceAnalysis, Figures, RankAnalysis
from ..analyses import throughput as TP
from ..analyses import tracks as TR
from ..analyses.capture import capture_note, device_label, rank_device_label
from ..analyses.collectives_job import JobFigures
from ..analyses.counters import CROSS_CHECK_MARGIN_PCT, CounterFigures
from ..analyses.figures import TOP_KERNELS, Steps
from ..analyses.gaps import CausedGap, Evidence, GapSet
from ..analyses.host import HostShares
from ..analyses.host_logs import SERIES_METRICS, SERIES_POINTS, HostLogFigures
from ..analyses.memory import MemoryFigures
from ..analyses.requests import RequestFigures
from ..causes import CAUSES
from ..diagnosis import Diagnosis, Finding, RankDiagnosis
from ..diagnosis.stragglers import Straggler
from ..units import time_text
from . import types as R
from .types import us as _us
from .types import us0 as _us0

MAX_STEP_BARS = 500  # per-step chart: the first steps when a trace has more
MAX_GAP_ROWS = 10_000  # per device in the gap table: the longest when a device has more


def _frac(x: float | None) -> float | None:
    return None if x is None else round(min(max(float(x), 0.0), 1.0), 6)


def _r(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(float(x), digits)


# --- ranks and devices -----------------------------------------------------------------------------
def rank_result(r: RankAnalysis, dr: RankDiagnosis | None, number: int | None, timeline: dict[str, Any],
                counters: dict[int, R.DeviceCounters] | None = None, batch_size: int | None = None,
                requests: RequestFigures | None = None) -> R.RankResult:
    """One rank's typed result, made once when the job is combined: `number` its rank in the job, `dr` its
    diagnosis (with its input split), `timeline` its drawn tracks (`timeline_data`), `counters` its GPUs'
    counter-log figures by device index (when the logs are on the trace's clock)."""
    counters = counters or {}
    mem = r.memory
    mem_devices = mem.devices if mem else {}
    memory_series: dict[str, Any] = {}
    devices = []
    for d in r.devices:
        m = mem_devices.get(d.device)
        devices.append(_device(d, counters.get(d.device), m, r))
        if m is not None:
            memory_series[rank_device_label(r.capture, d.device)] = _memory_series(m, d.busy.window.start_ns)
    if mem and mem.host:
        memory_series["host"] = _memory_series(mem.host, r.window.start_ns)
    per_step = tuple(R.StepRow(s.step, _us0(s.start_ns - r.window.start_ns), _us0(s.dur_ns), _us0(s.gpu_busy_ns),
                               _us0(s.memcpy_ns), _us0(s.dataloader_ns), _us0(s.idle_ns), _us0(s.comm_ns),
                               _us0(s.exposed_comm_ns), _r(TP.samples_per_s(batch_size, s.dur_ns / 1000.0)))
                     for s in r.per_step)
    return R.RankResult(
        rank=number,
        input=r.input,
        framework=r.framework,
        clock=r.clock,
        window_start_ns=r.window.start_ns,
        window_us=_us(r.window.dur_ns),
        window_basis=r.window.basis,
        steps=r.steps,
        gpu_activity=bool(r.devices),
        dataloader_wait_us=_us(r.dataloader_wait_ns),
        dataloader_wait_fraction=_frac(r.dataloader_wait_fraction),
        per_step=per_step,
        devices=tuple(devices),
        host=r.host,
        host_memory=_memory(mem.host) if mem and mem.host else None,
        diagnosis=_rank_diagnosis(dr, r.capture.gpu_api if r.capture else "") if dr else None,
        step_source=_step_source(r),
        capture=_capture(r),
        operators=operator_view(r),
        critical_path=_critical_path(r),
        drawing=R.RankDrawing(timeline, {"per_step": _per_step_chart(per_step, dr)}, memory_series),
        serving=serving_result(r, requests),
    )


def serving_result(r: RankAnalysis, requests: RequestFigures | None = None) -> R.ServingResult | None:
    """The rank's serving iterations and phases (analyses/serving.py) and the requests joined to them
    (analyses/requests.py) in the report's units; None when no annotation of an engine names an iteration
    and no request span was given."""
    sp = r.causes.serving if r.causes is not None else None
    reqs = requests_result(requests, r.window.start_ns) if requests is not None else None
    if sp is None or not sp.all_phases:
        return R.ServingResult((), (), (), 0, reqs) if reqs is not None else None
    w0 = r.window.start_ns
    rows = tuple(R.IterationRow(i.phase, i.batch_size, i.tokens, _us0(i.start_ns - w0), _us0(i.duration_ns),
                                _us0(i.gpu_busy_ns), _us0(i.gpu_bubble_ns), _us(i.host_gap_before_ns), i.graph_replays)
                 for i in sp.iterations)
    phases = tuple(R.ServingPhaseRow(p.phase, p.iterations, _us0(p.median_iteration_ns), _us0(p.span_ns),
                                     _us0(p.gpu_busy_ns), _frac(p.gpu_busy_share), _us0(p.gpu_bubble_ns),
                                     _us(p.median_host_gap_ns), _us0(p.host_gap_ns), p.graph_replays,
                                     p.median_batch_size, _us(p.median_ns_per_token))
                   for p in sp.all_phases)
    return R.ServingResult(sp.sources, phases, rows, sp.iterations_omitted, reqs)


def requests_result(f: RequestFigures, window_start_ns: int) -> R.ServingRequests:
    """A run's requests in the report's units: arrivals from the rank's window start when joined to its
    iterations, else from the first request's arrival (the spans' clock is not the trace's)."""
    w0 = window_start_ns if f.joined else (f.rows[0].start_ns if f.rows else 0)
    rows = tuple(R.RequestRow(q.request_id, _us0(q.start_ns - w0), _us(q.queue_ns), _us(q.prefill_ns),
                              _us(q.decode_ns), _us(q.ttft_ns), _us0(q.e2e_ns), q.prompt_tokens, q.output_tokens,
                              q.iterations, q.first_iteration, q.last_iteration) for q in f.rows)
    stats = tuple(R.RequestStat(s.figure, s.requests, _us(s.median_ns), _us(s.p90_ns)) for s in f.stats)
    return R.ServingRequests(f.requests, stats, f.queued_longer_than_prefill, f.joined, f.with_iterations, rows,
                             f.rows_omitted)


def operator_view(r: RankAnalysis) -> R.OperatorView | None:
    """The rank's operator view (analyses/operators.py, analyses/frames.py) in the report's units."""
    o, fr = r.operators, r.frames
    if o is None:
        return None
    steps = o.steps or None
    ops = tuple(R.OperatorRow(x.name, x.kind, x.count, _us0(x.total_ns), _us0(x.self_ns),
                              _frac(x.steps_ns / o.steps_ns) if o.steps_ns > 0 else None,
                              _us0(x.total_ns / steps) if steps else None, _us0(x.steps_ns),
                              _us0(x.idle_ns) if o.idle_ns > 0 else None,
                              _frac(x.idle_ns / o.idle_ns) if o.idle_ns > 0 else None, x.top_level, x.threads)
                for x in o.ops)
    kernels = tuple(R.KernelLaunchRow(k.name, f"cuda:{k.device}", k.count, _us0(k.total_ns),
                                      _us0(k.total_ns / k.count), k.launched_by) for k in o.kernels)
    frames = tuple(R.FrameRow(x.frame, _us0(x.host_ns), _us0(x.idle_ns)) for x in fr.frames) if fr else ()
    return R.OperatorView(ops, kernels, frames, bool(fr and fr.has_stacks), o.ops_omitted, o.kernels_omitted,
                          fr.omitted if fr else 0, _us(o.steps_ns), _us(o.idle_ns) if r.devices else None,
                          _us(fr.idle_ns) if fr and r.devices else None)


def _critical_path(r: RankAnalysis) -> R.CriticalPathResult | None:
    """The rank's median step's critical path (definitions `critical_path`), in the report's units."""
    cp = r.critical_path
    step = cp.median_step() if cp is not None else None
    if cp is None or step is None or step.dur_ns <= 0:
        return None
    return R.CriticalPathResult(step.step, _us0(step.dur_ns), step.segments,
                                {k: _us0(ns) for k, ns in step.by_kind_ns}, dict(cp.assumptions))


def _step_source(r: RankAnalysis) -> R.StepSourceResult | None:
    """Where the rank's steps came from (definitions `step_source`)."""
    src = r.step_source
    if src is None:
        return None
    if not src.iterations:
        return R.StepSourceResult(src.kind)
    return R.StepSourceResult(src.kind, src.basis, _us(src.period_ns), src.iterations)


def _capture(r: RankAnalysis) -> R.CaptureResult | None:
    """What the capture says about its own completeness; None when nothing is known to be missing."""
    c = r.capture
    if c is None:
        return None
    note = capture_note(c)
    if note is None:
        return None
    return R.CaptureResult(gpus_listed=c.gpus_listed, gpu_events_lost=c.gpu_events_lost, note=note)


def _memory_series(m: MemoryFigures, origin_ns: int) -> dict[str, Any]:
    """The drawn memory series, in us from `origin_ns` (the window start)."""
    return {
        "t_us": _rel_us(m.series_ts_ns, origin_ns),
        "allocated_bytes": [int(v) for v in m.series_allocated.tolist()],
        "reserved_bytes": None if m.series_reserved is None else [int(v) for v in m.series_reserved.tolist()],
        "total_bytes": m.total_bytes,
        "samples": m.samples,
    }


def _memory(m: MemoryFigures) -> R.MemoryResult:
    """Memory figures in the report's units."""
    return R.MemoryResult(
        samples=m.samples, peak_allocated_bytes=m.peak_allocated_bytes, peak_reserved_bytes=m.peak_reserved_bytes,
        total_bytes=m.total_bytes, peak_allocated_fraction=_frac(m.peak_allocated_fraction),
        headroom_fraction=_frac(m.headroom_fraction),
        growth_per_step_bytes=_r(m.growth_per_step_bytes, 1),
        per_step=m.per_step[:MAX_STEP_BARS])


def memory_warnings(figures: Figures) -> list[str]:
    """GPU memory events that no reported GPU can show (the trace has no GPU work on that device)."""
    out = []
    for r in figures.ranks:
        if r.memory and r.memory.unmatched:
            gpus = ", ".join(rank_device_label(r.capture, d) for d in r.memory.unmatched)
            out.append(f"{r.input}: memory events of {gpus} not reported: the "
                       f"trace has no GPU work on it (profile with ProfilerActivity.CUDA for per-GPU figures)")
    return out


def shown_gaps(idle: GapSet, min_gap_ns: int) -> np.ndarray:
    """The positions in a device's idle set of the gaps its gap table shows: every gap at least `min_gap_ns`
    long; past MAX_GAP_ROWS the longest (ties: the earlier), by start time. The gap figures' top gaps are
    among them (the longest first, ties the same way)."""
    starts, ends = idle.start_ns, idle.end_ns
    keep = np.flatnonzero((ends - starts) >= max(min_gap_ns, 1))
    if len(keep) > MAX_GAP_ROWS:
        keep = np.sort(keep[np.argsort(-(ends[keep] - starts[keep]), kind="stable")[:MAX_GAP_ROWS]])
    return keep


def _gap_table(d: DeviceAnalysis, r: RankAnalysis, min_gap_ns: int) -> R.GapTable:
    """The gaps `shown_gaps` picks, with their step and the cause the figures gave them; `omitted`: the
    gaps the gap figures count beyond them."""
    starts, ends, causes = d.idle.start_ns, d.idle.end_ns, d.idle.cause
    keep = shown_gaps(d.idle, min_gap_ns)
    omitted = d.gaps.count - len(keep)
    s, e = starts[keep], ends[keep]
    spans = r.spans if r.spans is not None else Steps(*(np.zeros(0, dtype=np.int64),) * 3)
    st_start, st_end, st_num = spans.start_ns, spans.end_ns, spans.number
    at = iv.locate(s, st_start, st_end) if len(st_start) else np.full(len(s), -1)
    origin = d.busy.window.start_ns
    return R.GapTable(
        start_us=tuple(np.round((s - origin) / 1000.0, 3).tolist()),
        duration_us=tuple(np.round((e - s) / 1000.0, 3).tolist()),
        step=tuple(None if j < 0 else int(st_num[j]) for j in at.tolist()),
        cause=(tuple(str(c) for c in np.asarray(causes, dtype=object)[keep]) if causes is not None
               else (None,) * len(keep)),
        omitted=omitted)


def _device(d: DeviceAnalysis, counters: R.DeviceCounters | None, memory: MemoryFigures | None,
            rank: RankAnalysis) -> R.DeviceResult:
    b, g, m = d.busy, d.gaps, d.memcpy
    w = b.window
    causes = d.idle.cause
    return R.DeviceResult(
        device=rank_device_label(rank.capture, d.device),
        index=d.device,
        name=d.name,
        window_start_ns=w.start_ns,
        window_us=_us(w.dur_ns),
        window_basis=w.basis,
        gpu_busy_us=_us(b.busy_ns),
        gpu_idle_fraction=_frac(b.idle_fraction),
        kernel_us=_us(b.kernel_ns),
        communication_us=_us(b.comm_ns),
        exposed_communication_us=_us(b.exposed_comm_ns),
        memcpy_us=_us(m.union_ns),
        memcpy_share_of_busy=_frac(m.share_of_busy),
        memcpy_share_of_window=_frac(m.share_of_window),
        memcpy=R.MemcpyResult(
            m.directions,
            _us0(m.memset_ns), m.memset_count, m.memset_bytes),
        gaps=R.GapSummary(
            _us0(g.min_gap_ns), g.count, _us0(g.total_ns), _us0(g.largest_ns),
            g.histogram,
            tuple(R.GapRow(_us0(x.start_ns - w.start_ns), _us0(x.dur_ns), x.step,
                           None if causes is None else str(causes[x.index])) for x in g.top)),
        top_kernels=d.kernels[:TOP_KERNELS],
        counters=counters,
        kernel_table=d.kernels,
        memory=None if memory is None else _memory(memory),
        gap_table=_gap_table(d, rank, g.min_gap_ns),
        graphs=_graphs(d),
        trace_counters=tuple(R.TraceCounterSummary(c.metric, c.samples, _round(c.mean), _round(c.min), _round(c.max))
                             for c in d.trace_counters),
    )


def _round(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.6g}")


def _graphs(d: DeviceAnalysis) -> R.GraphSummary | None:
    """A device's CUDA graph replays (analyses/graphs.py) in microseconds."""
    gr = d.graphs
    if gr is None:
        return None
    return R.GraphSummary(
        gpu_us=_us0(gr.gpu_ns), share_of_busy=_frac(gr.gpu_ns / gr.busy_ns if gr.busy_ns > 0 else None),
        replays=gr.replays,
        graphs=tuple(R.GraphRow(g.graph_id, g.replays, round(g.nodes / g.replays, 3) if g.replays else 0.0,
                                _us0(g.replay_ns), _us0(g.gpu_ns)) for g in gr.graphs),
        captures=gr.captures, capture_us=_us0(gr.capture_ns))


def options_info(min_gap_ns: int, include_warmup: bool, batch_size: int | None) -> R.OptionsInfo:
    """The options that changed the figures, as the result states them."""
    return R.OptionsInfo(_us0(min_gap_ns), include_warmup, batch_size)


def _summary(ranks: tuple[R.RankResult, ...], logged_gpus: int = 0, rate: TP.Throughput | None = None) -> R.Summary:
    """`logged_gpus`: GPUs seen in nvidia-smi logs, counted when no trace shows any."""
    rate = rate or TP.throughput([])
    devices = [d for r in ranks for d in r.devices]
    busy = float(sum(d.gpu_busy_us or 0.0 for d in devices))
    window = float(sum(d.window_us or 0.0 for d in devices))
    memcpy = float(sum(d.memcpy_us or 0.0 for d in devices))
    wait = float(sum(r.dataloader_wait_us or 0.0 for r in ranks))
    rank_window = float(sum(r.window_us or 0.0 for r in ranks))
    return R.Summary(
        ranks=len(ranks),
        devices=len(devices) or logged_gpus,
        steps=max((r.steps for r in ranks), default=0),
        window_us=float(max((r.window_us or 0.0 for r in ranks), default=0.0)),
        gpu_busy_us=round(busy, 3),
        gpu_idle_fraction=None if window <= 0 else _frac(1.0 - busy / window),
        memcpy_us=round(memcpy, 3),
        memcpy_share_of_busy=_frac(memcpy / busy) if busy > 0 else None,
        dataloader_wait_us=round(wait, 3),
        dataloader_wait_fraction=_frac(wait / rank_window) if rank_window > 0 else None,
        gaps=sum(d.gaps.count for d in devices),
        gaps_total_us=round(float(sum(d.gaps.total_us for d in devices)), 3),
        # Needs the batch size, which no trace records reliably: null unless given.
        samples_per_s=_r(rate.samples_per_s),
        steps_per_s=_r(rate.steps_per_s, 6),
        step_time_median_us=_r(rate.step_time_median_us),
        step_time_p10_us=_r(rate.step_time_p10_us),
        step_time_p90_us=_r(rate.step_time_p90_us),
        batch_size=rate.batch_size,
    )


# --- timeline tracks and charts --------------------------------------------------------------------
def _rel_us(ns: np.ndarray, origin_ns: int) -> list[float]:
    """Nanoseconds -> microseconds from `origin_ns`, rounded to 0.1 us (drawing precision)."""
    return [float(v) for v in np.round((np.asarray(ns, dtype=np.int64) - origin_ns) / 1000.0, 1).tolist()]


def _dur_us(ns: np.ndarray) -> list[float]:
    return [float(v) for v in np.round(np.asarray(ns, dtype=np.int64) / 1000.0, 1).tolist()]


def _blocks(b: TR.Blocks, origin_ns: int) -> dict[str, Any]:
    return {
        "start_us": _rel_us(b.start_ns, origin_ns),
        "dur_us": _dur_us(b.end_ns - b.start_ns),
        "covered_us": _dur_us(b.covered_ns),
        "count": [int(v) for v in b.count.tolist()],
        "name": [int(v) for v in b.name_idx.tolist()],
        "names": list(b.names),
        "intervals": int(b.intervals),
        "merged": bool(b.intervals > len(b.start_ns)),
    }


def timeline_data(t: TR.RankTracks, max_blocks: int) -> dict[str, Any]:
    """A rank's drawn tracks as the result's `timeline` (microseconds from the rank's window start)."""
    w = t.window
    origin = w.start_ns
    return {
        "window_us": _us(w.dur_ns),
        "max_blocks": max_blocks,
        "steps": {"step": [int(v) for v in t.step_number.tolist()], "start_us": _rel_us(t.step_start_ns, origin),
                  "dur_us": _dur_us(t.step_end_ns - t.step_start_ns), "total": int(t.steps_total)},
        "devices": [
            {"device": f"cuda:{d.device}",
             "busy": _blocks(d.busy, origin),
             "copies": _blocks(d.copies, origin),
             "comm": _blocks(d.comm, origin),
             **({"graphs": _blocks(d.graphs, origin)} if d.graphs is not None else {}),  # CUDA graph replays
             "gaps": {"start_us": _rel_us(d.gaps.start_ns, origin), "dur_us": _dur_us(d.gaps.dur_ns),
                      "step": [None if s < 0 else int(s) for s in d.gaps.step.tolist()],
                      "cause": list(d.gaps.cause), "total": int(d.gaps.total)}}
            for d in t.devices
        ],
        "host": [dict(kind=h.kind, **_blocks(h.blocks, origin)) for h in t.host],
        "counters": [
            {"device": f"cuda:{c.device}", "metric": c.metric, "t_us": _rel_us(c.ts_ns, origin),
             "value": [None if np.isnan(v) else round(float(v), 3) for v in c.value], "samples": int(c.samples)}
            for c in t.counters
        ],
    }


def _per_step_chart(steps_all: tuple[R.StepRow, ...], dr: RankDiagnosis | None) -> dict[str, Any]:
    """Stacked bars per step: compute (busy without copies), memcpy, idle (by cause when diagnosed)."""
    steps = steps_all[:MAX_STEP_BARS]
    by_step = {p.step: p.idle_by_cause for p in dr.per_step} if dr else {}
    causes = [c for c in CAUSES if any(by_step.get(s.step, {}).get(c) for s in steps)]
    series: list[dict[str, Any]] = [
        {"key": "compute", "values": [round(max(s.gpu_busy_us - s.memcpy_us - s.exposed_comm_us, 0.0), 3)
                                      for s in steps]},
        {"key": "memcpy", "values": [s.memcpy_us for s in steps]},
    ]
    if any(s.exposed_comm_us > 0 for s in steps):  # communication no compute hides: its own series
        series.insert(1, {"key": "communication", "values": [s.exposed_comm_us for s in steps]})
    if causes:
        for cause in causes:
            series.append({"key": f"idle:{cause}",
                           "values": [_us0(by_step.get(s.step, {}).get(cause) or 0) for s in steps]})
        rest = [round(max(s.idle_us - _us0(sum(by_step.get(s.step, {}).values())), 0.0), 3) for s in steps]
        if any(v > 0 for v in rest):
            series.append({"key": "idle:unattributed", "values": rest})
    else:
        series.append({"key": "idle", "values": [s.idle_us for s in steps]})
    return {
        "step": [s.step for s in steps],
        "duration_us": [s.duration_us for s in steps],
        "dataloader_wait_us": [s.dataloader_wait_us for s in steps],
        "series": series,
        "omitted": max(len(steps_all) - len(steps), 0),
    }


# --- diagnosis -------------------------------------------------------------------------------------
def _host_op(e: Evidence) -> R.HostOp:
    return R.HostOp(e.name, e.share, _us0(e.time_ns) if e.time_ns else None)


def _finding(f: Finding) -> R.FindingResult:
    return R.FindingResult(
        id=f.id, cause=f.cause, title=f.title, severity=f.severity, explains_us=_us0(f.explains_ns),
        share_of_idle=round(f.share_of_idle, 6), evidence=tuple(f.evidence), advice=tuple(f.advice),
        share_of_window=f.share_of_window, gaps=f.gaps, host_ops=tuple(_host_op(e) for e in f.host_ops),
        figures={k: float(v) for k, v in f.figures.items()}, shares=tuple(f.shares))


finding_result = _finding  # for the job stage (run/combine.py), which adds the straggler's finding


def _causes_us(by_cause: dict[str, int]) -> dict[str, float]:
    return {c: _us0(v) for c, v in by_cause.items()}


def _gap(g: CausedGap, gpu_api: str = "") -> R.AttributedGap:
    return R.AttributedGap(device_label(gpu_api, g.device), _us0(g.start_ns - g.window_start_ns), _us0(g.dur_ns),
                           g.step, g.cause, tuple(R.HostOp(e.name, e.share) for e in g.evidence))


def _host_shares(s: HostShares) -> R.HostSharesResult:
    return R.HostSharesResult(
        _us0(s.total_ns), _us0(s.data_wait_ns), _us0(s.model_ops_ns), _us0(s.other_ns), _us0(s.optimizer_ns),
        _us0(s.annotations_ns), len(s.steps),
        tuple(R.HostStepParts(n, *(_us0(v) for v in parts)) for n, parts in zip(s.steps, s.per_step)),
        tuple(R.HostOp(name, round(ns / s.total_ns, 6), _us0(ns)) for name, ns in s.top_annotations),
        tuple(R.HostOp(name, round(ns / s.total_ns, 6), _us0(ns)) for name, ns in s.elsewhere_others))


def _rank_diagnosis(r: RankDiagnosis, gpu_api: str = "") -> R.RankDiagnosisResult:
    s = r.host_shares
    return R.RankDiagnosisResult(
        primary=r.primary, host_primary=r.host_primary, reason=r.reason, headline=r.headline,
        lost_us=_us0(r.lost_ns), window_us=_us0(r.window_ns), idle_us=_us0(r.idle_ns),
        idle_by_cause_us=_causes_us(r.idle_by_cause), exposed_memcpy_us=_us0(r.exposed_memcpy_ns),
        exposed_communication_us=_us0(r.exposed_comm_ns),
        launch_threads=tuple(R.LaunchThread(p, t) for p, t in r.launch_threads),
        launch_thread_basis=r.thread_basis,
        periodic=None if r.periodic is None else R.PeriodicResult(tuple(r.periodic.steps), r.periodic.every),
        host_shares=None if s is None else _host_shares(s),
        findings=tuple(_finding(f) for f in r.findings),
        devices=tuple(R.DeviceDiagnosis(device_label(gpu_api, d.device), _us0(d.window.dur_ns), _us0(d.idle_ns),
                                        d.gap_count, _causes_us(d.idle_by_cause), _us0(d.exposed_memcpy_ns),
                                        _us0(d.exposed_comm_ns)) for d in r.devices),
        per_step=tuple(R.StepCausesResult(p.step, _causes_us(p.idle_by_cause)) for p in r.per_step),
        gaps=tuple(_gap(g, gpu_api) for g in r.gaps),
        runner_up=r.runner_up, runner_up_share=r.runner_up_share, confidence=r.confidence,
        warmup_steps=tuple(r.warmup_steps), startup_us=_us0(r.startup_ns), input_split=r.input_split,
        headline_figures=dict(r.headline_figures), headline_shares=tuple(r.headline_shares),
        verdict_note=r.verdict_note, headline_detail=r.headline_detail,
    )


def diagnosis_result(d: Diagnosis, speaker: int | None = None) -> R.DiagnosisResult:
    """A job's diagnosis made in ns (logs alone: `diagnose_counters`) in the result's units; `speaker`: the
    index (into the result's ranks) of the rank whose verdict is the job's."""
    return R.DiagnosisResult(d.primary, d.host_primary, d.headline, tuple(_finding(f) for f in d.findings),
                             speaker, headline_figures=dict(d.headline_figures),
                             headline_shares=tuple(d.headline_shares), verdict_note=d.verdict_note,
                             headline_detail=d.headline_detail)


def rank_diagnosis(r: RankDiagnosis, gpu_api: str = "") -> R.RankDiagnosisResult:
    """One rank's typed diagnosis (combine makes it once the rank's input split is known); `gpu_api`: "hip"
    names the rank's devices rocm:N."""
    return _rank_diagnosis(r, gpu_api)


def job_diagnosis(ranks: tuple[R.RankResult, ...]) -> R.DiagnosisResult | None:
    """The job's diagnosis from its ranks' typed diagnoses: the same rule as `diagnosis.diagnose`
    (the rank losing the most GPU time speaks for the job), so a job analysed rank by rank in other
    processes gets the verdict it gets when analysed whole. None when no rank is diagnosed."""
    from ..diagnosis.rules import job_headline, job_rank

    diagnosed = [(i, r, r.diagnosis) for i, r in enumerate(ranks) if r.diagnosis is not None]
    if not diagnosed:
        return None
    k = job_rank([d.lost_us for _, _, d in diagnosed], [bool(d.devices) for _, _, d in diagnosed])
    index, rank, pick = diagnosed[k]
    host_primary = pick.host_primary
    if host_primary is None:
        host_primary = next((d.host_primary for _, _, d in diagnosed if d.host_primary), None)
    return R.DiagnosisResult(pick.primary, host_primary, job_headline(rank.rank, pick.headline, len(diagnosed)),
                             pick.findings, index, headline_figures=dict(pick.headline_figures),
                             headline_shares=pick.headline_shares, verdict_note=pick.verdict_note,
                             headline_detail=pick.headline_detail)


def summary(ranks: tuple[R.RankResult, ...], warmup: set[int] | None = None,
            batch_size: int | None = None, logged_gpus: int = 0) -> R.Summary:
    """The job's summary figures from its ranks' results (throughput over steps not in `warmup`);
    `logged_gpus`: GPUs seen in nvidia-smi logs, counted when no trace shows any."""
    rate = TP.throughput([{s.step: s.duration_us for s in r.per_step} for r in ranks], warmup or set(), batch_size)
    return _summary(ranks, logged_gpus, rate)


# --- the job: one clock, collectives, stragglers ------------------------------------------------------
def job_result(f: JobFigures) -> R.JobResult:
    """The job's clock and per-rank communication figures in the result's units."""
    from ..diagnosis.stragglers import min_lateness
    from ..diagnosis.thresholds import STRAGGLER_MIN_LATENESS_NS

    floor_us = min_lateness([_us0(r.step_time_ns) for r in f.ranks if r.step_time_ns],
                            STRAGGLER_MIN_LATENESS_NS / 1000.0)
    return R.JobResult(
        clocks=tuple(R.HostClock(c.host, c.ranks, _us0(c.offset_ns), c.method, c.collectives_used,
                                 _us(c.residual_ns)) for c in f.clocks),
        collectives_matched=f.collectives_matched,
        ranks=f.ranks,
        straggler_min_lateness_us=round(floor_us, 3),
        timeline_shift_us=tuple(_us0(s) for s in f.timeline_shift_ns))


def straggler_result(s: Straggler) -> R.StragglerResult:
    return R.StragglerResult(rank=s.rank, caused_wait_per_step_us=_us0(s.caused_wait_ns),
                             lateness_per_step_us=_us0(s.lateness_ns), collectives=s.collectives,
                             top_cause=s.top_cause, top_cause_per_step_us=_us(s.top_cause_ns), text=s.text)


# --- counter logs ----------------------------------------------------------------------------------
class LogSource(Protocol):
    """What the result says of a log file as read (the reader's `timeline.Source` has these fields)."""

    @property
    def path(self) -> str: ...
    @property
    def format(self) -> str: ...
    @property
    def clock(self) -> str: ...
    @property
    def events_read(self) -> int: ...
    @property
    def events_kept(self) -> int: ...
    @property
    def warnings(self) -> list[str]: ...


def counter_results(sources: Sequence[LogSource], figures: tuple[CounterFigures, ...],
                    alignments: tuple[Alignment, ...], aligned: bool,
                    trace_clock: str) -> tuple[tuple[R.CounterLog, ...], tuple[R.DeviceCounters, ...], list[str]]:
    """The counter logs (`sources`: theirs, which figures and alignments index) and their figures in the
    result's units, with the warnings they give. `aligned`: counters are on the trace clock (a trace was
    read with the logs), whose kind `trace_clock` is ("epoch" or "trace")."""
    by_source = {a.source: a for a in alignments}
    warnings: list[str] = []
    logs = []
    for i, src in enumerate(sources):
        if not src.clock:
            continue
        a = by_source.get(i)
        logs.append(_log(src, a))
        warnings.extend(f"{src.path}: {w}" for w in (a.warnings if a else ()))
    devices = []
    for d in figures:
        clock = trace_clock if aligned else sources[d.sources[0]].clock
        entry = _device_counters(sources, d, clock, by_source)
        devices.append(entry)
        cc = entry.cross_check
        if cc and cc.disagrees:
            warnings.append(
                f"GPU {d.device}: the trace says the GPU was busy {cc.trace_busy_pct:.1f}% of the "
                f"sampled periods inside the window, nvidia-smi says {cc.log_util_pct:.1f}% (more than "
                f"{CROSS_CHECK_MARGIN_PCT:.0f} points apart): another process on the GPU, or a wrong "
                f"alignment (see counter_logs[].fit)")
    return tuple(logs), tuple(devices), warnings


def _fit(a: Alignment | None) -> R.FitResult | None:
    f = None if a is None else a.fit
    if f is None:
        return None
    return R.FitResult(_r(f.correlation, 4), f.samples, _r(f.runner_up_correlation, 4),
                       None if f.runner_up_offset_ns is None else _r(f.runner_up_offset_ns / 1e9, 3), f.ambiguous)


def _log(src: LogSource, a: Alignment | None) -> R.CounterLog:
    return R.CounterLog(
        path=src.path, format=src.format, clock=src.clock, samples_read=src.events_read,
        samples_kept=src.events_kept,
        offset_s=None if a is None else _r(a.offset_ns / 1e9, 6),
        offset_method=None if a is None else a.method,
        clock_offset_s=None if a is None else _r(a.clock_offset_ns / 1e9, 6),
        zone=None if a is None else a.zone,
        skew_s=None if a is None else _r(a.skew_ns / 1e9, 6),
        fit=_fit(a),
        gpu_map=None if a is None else tuple(R.GpuMapping(g, d) for g, d in a.device_map),
        warnings=tuple(src.warnings) + (() if a is None else tuple(a.warnings)),
    )


def _device_counters(sources: Sequence[LogSource], d: CounterFigures, clock: str,
                     by_source: dict[int, Alignment]) -> R.DeviceCounters:
    a = next((by_source[s] for s in d.sources if s in by_source), None)
    z, cc = d.zero_runs, d.cross_check
    return R.DeviceCounters(
        device=d.device,
        sources=tuple(sources[s].path for s in d.sources),
        period_s=_r(d.period_ns / 1e9, 6),
        samples=d.samples,
        first_sample=time_text(d.first_ns, clock),
        last_sample=time_text(d.last_ns, clock),
        duration_s=_r((d.last_ns - d.first_ns) / 1e9, 3),
        offset_s=None if a is None else _r(a.offset_ns / 1e9, 6),
        offset_method=None if a is None else a.method,
        fit=_fit(a),
        metrics={m.metric: R.MetricSummary(m.samples, _r(m.mean), _r(m.min), _r(m.max), m.window_samples,
                                           _r(m.window_mean), m.outside_samples, _r(m.outside_mean))
                 for m in d.metrics},
        zero_util_runs=None if z is None else R.ZeroUtilRuns(
            z.runs, z.total_samples, _r(z.total_ns / 1e9, 3), z.longest_samples, _r(z.longest_ns / 1e9, 3),
            None if z.longest_first_ns is None else _r((z.longest_first_ns - d.first_ns) / 1e9, 3),
            None if z.longest_first_ns is None else time_text(z.longest_first_ns, clock),
            None if z.longest_last_ns is None else time_text(z.longest_last_ns, clock)),
        cross_check=None if cc is None else R.CrossCheck(
            cc.samples, _r(cc.trace_busy_pct, 2), _r(cc.log_util_pct, 2), _r(cc.difference_pct, 2),
            CROSS_CHECK_MARGIN_PCT, cc.disagrees),
        utilisation=tuple(R.UtilPoint(_r((t - d.first_ns) / 1e9, 3), _r(v, 2)) for t, v in d.utilisation),
    )


# --- host logs (glances) ----------------------------------------------------------------------------
def host_log_result(h: HostLogFigures, window: tuple[int, int] | None) -> tuple[R.HostLogResult, dict[str, Any]]:
    """A host log's figures, and its drawing payload in seconds from the trace window's start (`window`;
    None: no trace events, then the log's first sample): the CPU series, at most SERIES_POINTS samples,
    and the DataLoader-wait spans."""
    origin = window[0] if window else (int(h.ts_ns[0]) if len(h.ts_ns) else 0)
    step = max(1, -(-len(h.ts_ns) // SERIES_POINTS))
    pick = np.arange(0, len(h.ts_ns), step)
    to_s = lambda ns: [round(float(v), 3) for v in ((np.asarray(ns, dtype=np.int64) - origin) / 1e9).tolist()]  # noqa: E731
    series: dict[str, Any] = {
        "t_s": to_s(h.ts_ns[pick]),
        "period_s": None if h.period_ns is None else round(h.period_ns / 1e9, 3),
        "window_s": None if window is None else round((window[1] - window[0]) / 1e9, 3),
        "waits": {"start_s": to_s(h.wait_spans[0]), "end_s": to_s(h.wait_spans[1])},
    }
    for m in SERIES_METRICS:
        if m in h.values:
            series[m] = [None if np.isnan(v) else round(float(v), 2) for v in h.values[m][pick]]
    w = h.during_wait
    return R.HostLogResult(
        path=h.source.path, format=h.source.format, samples_read=h.source.events_read,
        samples_kept=h.source.events_kept,
        period_s=None if h.period_ns is None else _r(h.period_ns / 1e9, 6),
        offset_s=_r(h.offset_ns / 1e9, 6), offset_method=h.method,
        metrics={m.metric: R.MetricSummary(m.samples, _r(m.mean), _r(m.min), _r(m.max), m.window_samples,
                                           _r(m.window_mean), m.outside_samples, _r(m.outside_mean))
                 for m in h.metrics},
        during_dataloader_wait={k: round(v, 3) for k, v in w.means.items()},
        warnings=tuple(h.source.warnings) + tuple(h.warnings),
        clock=h.source.clock, zone=h.zone or None, cores=h.cores,
        wait_samples=w.samples, wait_covered_fraction=_frac(w.covered_fraction),
        not_kept=dict(sorted(h.source.not_kept.items())),
    ), series


__all__ = ["MAX_GAP_ROWS", "MAX_STEP_BARS", "counter_results", "diagnosis_result", "host_log_result",
           "job_diagnosis", "job_result", "options_info", "rank_diagnosis", "rank_result", "shown_gaps",
           "straggler_result", "summary", "timeline_data"]

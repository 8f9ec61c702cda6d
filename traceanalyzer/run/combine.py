"""The reduce: every rank's compact output (`map.RankOutput`, in input order) + what the job is besides
its ranks (`JobContext`: its files, options and logs) -> one `Analysis`. `combine` is the only
constructor of a job's Analysis, whatever the inputs and wherever the ranks were analysed (in the
manner of pyinstrument's `Session.combine`).

In order: the job checks (the same file twice, an unreadable file skipped, ranks that do not look like
one job, `--force-job`), the ranks' numbers, the timeline budget shared by all tracks; then the job
stages over the combined ranks: counter logs put on the trace's clock and figured against the ranks'
GPU work, host logs put on it and figured over the ranks' DataLoader waits (which also splits an
input-bound verdict), and `JOB_REDUCERS` (one clock, collectives, stragglers, workers: each gives its
part, a `JobStage`). Each rank's typed result is made once, here (`result.build.rank_result`), from its
figures, diagnosis and drawn tracks with what only the job knows, and the Analysis once, at the end.
Nothing here reads events: the ranks' figures carry what each stage needs (their GPU work and DataLoader
waits for the logs, `map.RANK_EXTRAS` for the job stages).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from .._version import __version__
from ..align import Alignment, AlignOptions, TraceClock, align_logs, place_counters, place_host_logs, place_requests
from ..analyses import tracks as TR
from ..analyses.collectives_job import job_figures, rank_job_facts
from ..analyses.counters import CounterFigures, counter_figures, job_window, merge_busy_sets
from ..analyses.host_logs import HostLogFigures, host_figures
from ..analyses.requests import request_figures
from ..diagnosis import RankDiagnosis
from ..diagnosis.stragglers import straggler_lead, stragglers
from ..errors import InputError
from ..formats import metas_mismatch, number_ranks, same_files
from ..formats.registry import ALONE
from ..result import Analysis
from ..result import types as R
from ..timeline import Timeline
from .map import AnalysisOptions, FileOutput, RankOutput


@dataclass(frozen=True)
class JobContext:
    """A job besides its ranks: its files, its options and its logs."""

    label: str  # what messages call the job
    files: tuple[Path, ...]  # its trace files, in order (none: logs alone)
    options: AnalysisOptions
    from_dir: bool = False  # files found in a directory: an unreadable one is skipped, not fatal
    warnings: tuple[str, ...] = ()  # the inputs' own (what a log dir skipped), after the ranks'
    notes: tuple[str, ...] = ()  # said after the logs' warnings (logs found beside the trace)
    implicit_logs: tuple[str, ...] = ()  # counter logs used without being named (beside a trace, in a folder)
    counter_logs: Timeline | None = None  # nvidia-smi / DCGM counters on their own clocks
    host_logs: Timeline | None = None  # host monitor logs on their own clocks
    requests: Timeline | None = None  # a serving engine's request spans (OpenTelemetry exports), epoch clock
    align: AlignOptions = AlignOptions()
    force_job: bool = False  # ranks that look like unrelated runs analysed as one job anyway
    # False: ranks split from a Timeline handed in: no job checks, rank numbers and counters as they are
    from_files: bool = True


def check_files(files: Sequence[Path]) -> None:
    """The job check that needs no reading: the same file given twice."""
    for first, again in same_files(list(files)):
        raise InputError(again, f"the same file is given twice ({first} and {again})")


def combine(outputs: Sequence[FileOutput], job: JobContext) -> Analysis:
    """The job's Analysis from its files' outputs, in input order (see the module text)."""
    from ..result.build import job_diagnosis, options_info, summary
    from ..result.definitions import FIGURES

    check_files(job.files)
    parts, warnings = _readable(outputs, job)
    ranks = [r for p in parts for r in p.ranks]
    numbers = _numbers(ranks, job, warnings)
    for read in (job.counter_logs, job.host_logs, job.requests):
        warnings += read.warnings if read is not None else []
    requests = _requests(ranks, job, warnings)
    o = job.options
    logs = _logs(ranks, job)
    warnings += list(job.notes) + logs.warnings + [w for p in parts for w in p.late_warnings] + logs.host_warnings
    rank_results = _rank_results(ranks, numbers, logs, job, requests)
    if ranks:
        diagnosis = job_diagnosis(rank_results) if o.diagnose else None
    else:
        diagnosis = _without_ranks(logs.counters) if o.diagnose and logs.any else None
    stage = JobStage()
    for reduce in JOB_REDUCERS:
        stage = reduce(tuple(ranks), rank_results, diagnosis, stage)
    return Analysis(
        schema=R.SCHEMA,
        tool=R.ToolInfo("traceanalyzer", __version__),
        options=options_info(o.min_gap_ns, o.include_warmup, o.batch_size),
        inputs=tuple(i for p in parts for i in p.inputs) + logs.inputs + _request_inputs(job.requests),
        warnings=tuple(warnings) + stage.warnings,
        ranks=rank_results,
        summary=summary(rank_results, {n for r in rank_results if r.diagnosis for n in r.diagnosis.warmup_steps},
                        o.batch_size, len(logs.devices)),
        definitions=dict(FIGURES),
        diagnosis=_judged(diagnosis, stage.verdict),
        job=stage.job,
        counter_logs=logs.counter_logs,
        counters=logs.devices,
        host_logs=logs.host_results,
        drawing=R.JobDrawing(host_logs=logs.host_drawing),
        implicit_logs=job.implicit_logs,
    )


def _numbers(ranks: list[RankOutput], job: JobContext, warnings: list[str]) -> list[int | None]:
    """The ranks' numbers in the job, after the check that they are ranks of one job (files only: a
    Timeline handed in keeps its ranks as they are); what was forced or renumbered goes to `warnings`."""
    metas = [r.meta for r in ranks]
    numbers: list[int | None] = [m.rank for m in metas]
    if not job.from_files:
        return numbers
    if len(ranks) > 1:
        why = metas_mismatch(metas)
        if why and not job.force_job:
            raise InputError(job.label, f"these files do not look like ranks of one job: {why}; compare two "
                                        f"runs with `traceanalyzer diff A B` or report them separately "
                                        f"(--force-job analyses them as one job anyway)")
        if why:
            warnings.append(f"analysed as one job although {why} (--force-job)")
    numbers, renumbered = number_ranks(numbers)
    warnings += renumbered
    return numbers


def _rank_results(ranks: list[RankOutput], numbers: list[int | None], logs: _Logs,
                  job: JobContext, requests: tuple[Timeline, bool] | None = None) -> tuple[R.RankResult, ...]:
    """Each rank's result, made once: its figures with its number, its tracks cut to the job's shared block
    budget (with the counter logs' samples drawn over them), its diagnosis with its input split, and the
    counter figures of its GPUs when the logs are on the trace's clock."""
    from ..result.build import rank_result, timeline_data

    max_blocks = TR.blocks_per_track(sum(r.tracks.count for r in ranks))
    by_device = {c.device: c for c in logs.devices} if logs.on_trace_clock else {}
    results = []
    for i, (r, number) in enumerate(zip(ranks, numbers)):
        tracks = r.tracks
        if logs.placed is not None and len(logs.placed.counters):
            drawn = TR.counter_tracks(logs.placed.counters, [d.device for d in tracks.devices],
                                      tracks.window.start_ns, tracks.window.end_ns)
            tracks = replace(tracks, counters=drawn)
        timeline = timeline_data(TR.recut_tracks(tracks, max_blocks), max_blocks)
        joined = None
        if requests is not None:
            sp = r.figures.causes.serving if r.figures.causes is not None else None
            joined = request_figures(requests[0].requests, sp.iterations if sp is not None else (), requests[1])
        results.append(rank_result(r.figures, _split(r, i, logs.hosts, job.host_logs), number, timeline, by_device,
                                   job.options.batch_size, joined))
    return tuple(results)


def _requests(ranks: list[RankOutput], job: JobContext, warnings: list[str]) -> tuple[Timeline, bool] | None:
    """The request spans on the trace's clock (align.place_requests) and whether they are; None without any.
    Spans alone (no trace) are refused: they hold no GPU work to judge."""
    if job.requests is None:
        return None
    if not ranks:
        raise InputError(job.requests.sources[0].path if job.requests.sources else job.label, ALONE)
    spans = [r.meta.span_ns for r in ranks if r.meta.span_ns is not None]
    span = (min(s[0] for s in spans), max(s[1] for s in spans)) if spans else None
    trace = TraceClock(span, all(r.meta.clock == "epoch" for r in ranks))
    placed, how = place_requests(job.requests, trace)
    warnings += list(how.warnings)
    return placed, how.on_trace_clock


def _request_inputs(requests: Timeline | None) -> tuple[R.InputInfo, ...]:
    """The request-span exports as inputs of the job."""
    if requests is None:
        return ()
    return tuple(R.InputInfo(s.path, s.format, s.events_read, s.events_kept, dict(sorted(s.not_kept.items())),
                             tuple(s.warnings)) for s in requests.sources)


def _readable(outputs: Sequence[FileOutput], job: JobContext) -> tuple[list[FileOutput], list[str]]:
    """The files read (an unreadable one stops the job, or, in a directory of several, is skipped and
    said) and the warnings so far: the files' own, the inputs', the skipped files."""
    skipped: list[str] = []
    parts: list[FileOutput] = []
    for out in outputs:
        if out.error_message is not None:
            if job.from_dir and len(job.files) > 1:
                skipped.append(f"{out.error_path}: {out.error_message}")
                continue
            raise InputError(out.error_path, out.error_message)
        parts.append(out)
    if not parts and job.files:
        raise InputError(job.files[0], "no readable trace: " + "; ".join(skipped))
    warnings = [w for p in parts for w in p.warnings] + list(job.warnings) + [f"skipped {s}" for s in skipped]
    return parts, warnings


@dataclass(frozen=True)
class _Logs:
    """The job's logs on the trace's clock and figured, in the result's units where they are shown."""

    any: bool = False  # the job has counter or host logs
    placed: Timeline | None = None  # counter logs (on the trace clock when `on_trace_clock`)
    on_trace_clock: bool = False
    counters: tuple[CounterFigures, ...] | None = None  # ns figures (None: no counter logs)
    counter_logs: tuple[R.CounterLog, ...] = ()
    devices: tuple[R.DeviceCounters, ...] = ()
    inputs: tuple[R.InputInfo, ...] = ()  # the counter logs as inputs
    warnings: list[str] = dataclasses.field(default_factory=list)  # alignment and cross-check warnings
    hosts: tuple[HostLogFigures, ...] = ()
    host_results: tuple[R.HostLogResult, ...] = ()
    host_drawing: dict[str, Any] = dataclasses.field(default_factory=dict)  # host log path -> its drawn series
    host_warnings: list[str] = dataclasses.field(default_factory=list)


def _logs(ranks: list[RankOutput], job: JobContext) -> _Logs:
    """The counter and host log stages over the combined ranks (their figures' GPU work and DataLoader waits)."""
    from ..result.build import counter_results, host_log_result

    if job.counter_logs is None and job.host_logs is None:
        return _Logs()
    spans = [r.meta.span_ns for r in ranks if r.meta.span_ns is not None]
    span = (min(s[0] for s in spans), max(s[1] for s in spans)) if spans else None
    epoch = bool(ranks) and all(r.meta.clock == "epoch" for r in ranks)
    window = job_window([r.window_ns for r in ranks]) if span is not None else None
    out = _Logs(any=True)
    if job.counter_logs is not None:
        aligned = job.from_files and bool(job.files)
        busy = merge_busy_sets([{d.device: d.busy.work for d in r.figures.devices} for r in ranks])
        alignments: tuple[Alignment, ...] = ()
        placed = job.counter_logs
        if aligned:
            alignments = align_logs(TraceClock(span, epoch, busy), job.counter_logs, job.align)
            placed = place_counters(job.counter_logs, alignments)
        counters = counter_figures(placed.counters, job_window([r.window_ns for r in ranks]) if aligned else None,
                                   busy)
        trace_clock = "epoch" if epoch else "trace"
        logs, devices, warnings = counter_results(placed.sources, counters, alignments, aligned, trace_clock)
        inputs = tuple(R.InputInfo(s.path, s.format, s.events_read, s.events_kept, dict(sorted(s.not_kept.items())),
                                   tuple(s.warnings)) for s in placed.sources if s.clock)
        out = replace(out, placed=placed, on_trace_clock=aligned, counters=counters, counter_logs=logs,
                      devices=devices, inputs=inputs, warnings=warnings)
    if job.host_logs is not None:
        trace = TraceClock(span, epoch) if span is not None else None
        hosts_tl, host_alignments = place_host_logs(job.host_logs, trace, job.align)
        waits = {i: r.figures.dataloader_waits for i, r in enumerate(ranks)} if span is not None else None
        hosts = host_figures(hosts_tl, host_alignments, waits, window)
        drawn = [host_log_result(h, window) for h in hosts]
        results = tuple(h for h, _ in drawn)
        out = replace(out, hosts=hosts, host_results=results, host_drawing={h.path: s for h, s in drawn},
                      host_warnings=[f"{h.path}: {w}" for h in results for w in h.warnings])
    return out


def _split(r: RankOutput, position: int, hosts: tuple[HostLogFigures, ...],
           host_logs: Timeline | None) -> RankDiagnosis | None:
    """A rank's diagnosis with its input split (by the host logs' figures over its waits)."""
    from ..diagnosis.input_split import split_rank

    if r.diagnosis is None:
        return None
    have_logs = host_logs is not None and bool(host_logs.host_logs)
    return split_rank(replace(r.diagnosis, index=position), hosts, have_logs)


def _without_ranks(counters: tuple[CounterFigures, ...] | None) -> R.DiagnosisResult:
    """The verdict of logs given without a trace: are the GPUs used (counter logs), else nothing to say."""
    from ..analyses import figures_of
    from ..diagnosis import diagnose
    from ..diagnosis.counters import diagnose_counters
    from ..result.build import diagnosis_result

    d = diagnose_counters(counters) if counters is not None else diagnose(figures_of(Timeline()))
    return diagnosis_result(d)


# --- the job stages: one clock, collectives, stragglers, workers ---------------------------------------
@dataclass(frozen=True)
class JobVerdict:
    """What a job stage says of the job's verdict: its stragglers and, when its rule puts one first, the
    headline (with its note) that replaces the ranks' and the findings that lead."""

    stragglers: tuple[R.StragglerResult, ...] = ()
    headline: str | None = None  # None: the ranks' verdict keeps its headline
    note: str | None = None  # why the verdict is not the top finding's (with `headline`)
    findings: tuple[R.FindingResult, ...] = ()  # put before the ranks' findings


@dataclass(frozen=True)
class JobStage:
    """What the job stages (`JOB_REDUCERS`) give the job's Analysis, gathered stage after stage; `combine`
    builds the Analysis once with it."""

    job: R.JobResult | None = None  # the job's clock and per-rank figures
    verdict: JobVerdict | None = None
    warnings: tuple[str, ...] = ()  # after the job's other warnings

    def then(self, job: R.JobResult | None = None, verdict: JobVerdict | None = None,
             warnings: Sequence[str] = ()) -> JobStage:
        """A later stage's part after this one's: its job figures and stragglers replace the earlier ones; its
        headline too, when it has one; the findings it puts first go before the earlier ones; its warnings
        follow."""
        if verdict is not None and self.verdict is not None:
            old = self.verdict
            lead = verdict.headline is not None
            verdict = JobVerdict(verdict.stragglers, verdict.headline if lead else old.headline,
                                 verdict.note if lead else old.note, verdict.findings + old.findings)
        return JobStage(job or self.job, verdict or self.verdict, self.warnings + tuple(warnings))


def _judged(diagnosis: R.DiagnosisResult | None, v: JobVerdict | None) -> R.DiagnosisResult | None:
    """The ranks' verdict with the job stages' part: their stragglers, the findings they put first and, when a
    stage leads, its headline and note."""
    if diagnosis is None or v is None:
        return diagnosis
    judged = replace(diagnosis, stragglers=v.stragglers, findings=v.findings + diagnosis.findings)
    if v.headline is None:
        return judged
    return replace(judged, headline=v.headline, headline_figures={}, headline_shares=(), verdict_note=v.note)


def _job(outputs: tuple[RankOutput, ...], ranks: tuple[R.RankResult, ...], diagnosis: R.DiagnosisResult | None,
         stage: JobStage) -> JobStage:
    """Many ranks: one clock, collectives matched, per-rank communication and stragglers, from the ranks'
    collective tables (their rank column set to the rank's number in the job, known only here) and job
    facts; nothing for fewer than two ranks."""
    from ..result.build import finding_result, job_result, straggler_result

    if len(outputs) < 2:
        return stage
    numbers = [r.rank if r.rank is not None else i for i, r in enumerate(ranks)]
    tables = [o.extras["collectives"].assign(rank=np.full(len(o.extras["collectives"]), n, dtype=np.int64))
              for o, n in zip(outputs, numbers)]
    warmups = [o.diagnosis.warmup_steps if o.diagnosis else () for o in outputs]
    figures = job_figures(tables, [rank_job_facts(o.figures) for o in outputs], numbers, warmups)
    verdict = None
    if diagnosis is not None:
        late = stragglers(figures, {n: o.diagnosis for n, o in zip(numbers, outputs)})
        verdict = JobVerdict(tuple(straggler_result(s) for s in late))
        at = diagnosis.rank
        speaker = numbers[at] if at is not None and at < len(numbers) else None
        framework = outputs[at].figures.framework if at is not None and at < len(outputs) else ""
        lead = straggler_lead(figures, speaker, diagnosis.primary, late, framework)
        if lead is not None:  # communication that is mostly waiting for a late rank: that rank leads
            verdict = JobVerdict(verdict.stragglers, lead.headline, lead.note, (finding_result(lead.finding),))
    return stage.then(job_result(figures), verdict, figures.warnings)


def _workers(outputs: tuple[RankOutput, ...], ranks: tuple[R.RankResult, ...], diagnosis: R.DiagnosisResult | None,
             stage: JobStage) -> JobStage:
    """Workers without GPU kernels: per-rank compute, communication and waits, compute stragglers."""
    from .workers import job_workers

    return job_workers(outputs, ranks, diagnosis, stage)


# fn(outputs, ranks, diagnosis, stage) -> stage, in order, over every rank's output in job order (`ranks[i]` is
# the result of `outputs[i]`; `diagnosis` the ranks' verdict) after the logs' stages: each returns the stage so
# far with its part (`JobStage.then`).
JOB_REDUCERS: list[Callable[[tuple[RankOutput, ...], tuple[R.RankResult, ...], R.DiagnosisResult | None, JobStage],
                            JobStage]] = [_job, _workers]


__all__ = ["JOB_REDUCERS", "JobContext", "JobStage", "JobVerdict", "check_files", "combine"]

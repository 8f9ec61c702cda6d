"""A job analysed rank by rank: each rank file read, figured and diagnosed on its own (in this
process, in local processes or on a Dask cluster, see `executors`), then the job put together here.

A per-rank task returns a compact `FileOutput` (typed results, the drawn tracks, a few facts for
the job-level checks), never the event table, so memory holds a few ranks at a time whatever the
job's size. The reduce (`reduce_job`) makes what needs every rank: the job checks (one job or
unrelated runs), rank numbers, the timeline budget shared by all tracks, the summary and the job's
verdict. The result is the one `analyze_timeline` gives for the same files read as one Timeline.

Extension seam for job-wide analyses (one clock, collectives, stragglers): register
`RANK_EXTRAS[name] = fn(tl, rank_index) -> compact, picklable value` (run in the worker, stored in
`RankOutput.extras[name]`) and append `fn(outputs, analysis) -> analysis` to `JOB_REDUCERS` (run
in the reduce, in order, over every rank's `RankOutput`). Register at import time of this module
or of one it imports: spawned processes and Dask workers import it afresh.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .._version import __version__
from ..analyses import tracks as TR
from ..errors import InputError
from ..formats import InputSet, RankMeta, metas_mismatch, number_ranks, same_files
from ..result import Analysis
from ..result import types as R
from ..timeline import Timeline

# Without --jobs, a job smaller than this is read in this process (a worker takes ~1 s to start).
PARALLEL_MIN_BYTES = 64 * 1024 * 1024



def _collectives(tl: Timeline, rank: int) -> Any:
    from ..analyses.collectives import collective_table

    return collective_table(tl, rank)


def _job(outputs: tuple[RankOutput, ...], analysis: Analysis) -> Analysis:
    """Many ranks: one clock, collectives matched, stragglers (`job.with_job`), from the ranks' tables;
    each table's rank column is set to the rank's number in the job (known only here)."""
    if len(outputs) < 2:
        return analysis
    import numpy as np

    from .combine import with_job

    tables = [o.extras["collectives"].assign(rank=np.full(len(o.extras["collectives"]), o.result.rank,
                                                          dtype=np.int64)) for o in outputs]
    return with_job(tables, analysis)


# Worker side: name -> fn(tl, rank_index) -> compact per-rank value (e.g. a rank's collective table).
RANK_EXTRAS: dict[str, Callable[[Timeline, int], Any]] = {"collectives": _collectives}
# Reduce side: fn(outputs, analysis) -> analysis, over every rank's output in job order.
JOB_REDUCERS: list[Callable[[tuple[RankOutput, ...], Analysis], Analysis]] = [_job]


@dataclass(frozen=True)
class RankTask:
    """What a worker needs to analyse one rank file: its path and the options that change figures."""

    path: str  # as given (results name it so); absolute for a Dask cluster
    min_gap_ns: int
    diagnose: bool
    include_warmup: bool
    max_input_bytes: int
    cache: bool
    batch_size: int | None = None  # samples per step (per-step samples/s)
    decode_workers: int = 1  # processes decoding this one file (a job of one big file: the cores)


@dataclass(frozen=True)
class RankOutput:
    """One rank analysed on its own: its typed results and what the job's reduce needs."""

    meta: RankMeta
    result: R.RankResult  # with its diagnosis; its drawn timeline left empty: the reduce draws it under the
    # job's block budget
    tracks: TR.RankTracks  # drawn at MAX_BLOCKS_PER_TRACK blocks, cut by the reduce
    tracks_count: int  # block tracks it draws (the job's budget is shared by all)
    extras: dict[str, Any] = field(default_factory=dict)  # RANK_EXTRAS results by name


@dataclass(frozen=True)
class FileOutput:
    """One input file analysed, or why it could not be read (`error_message` naming `error_path`)."""

    path: str
    inputs: tuple[R.InputInfo, ...] = ()
    warnings: tuple[str, ...] = ()
    ranks: tuple[RankOutput, ...] = ()
    error_path: str | None = None
    error_message: str | None = None
    late_warnings: tuple[str, ...] = ()  # warnings that follow the job's own (memory events not shown)


def analyze_file(task: RankTask, progress: Callable[[int], None] | None = None) -> FileOutput:
    """Read, figure and diagnose one rank file (runs in a worker): a compact FileOutput."""
    from ..formats import ReadOptions, read_file

    try:
        tl = read_file(Path(task.path), ReadOptions(max_input_bytes=task.max_input_bytes, progress=progress,
                                                    cache=task.cache, decode_workers=task.decode_workers))
    except InputError as exc:  # returned, not raised: the reduce decides (skip or stop), and says it as before
        return FileOutput(task.path, error_path=exc.path, error_message=exc.message)
    return analyze_rank_timeline(tl, task)


def analyze_rank_timeline(tl: Timeline, task: RankTask) -> FileOutput:
    """The per-rank results of a Timeline read from one file."""
    from ..analyses import figures_of
    from ..diagnosis import diagnose
    from ..diagnosis.input_split import split_input_bound
    from ..formats import rank_metas
    from ..result.build import memory_warnings, rank_result, rank_tracks

    figures = figures_of(tl, min_gap_ns=task.min_gap_ns, causes=task.diagnose)
    diagnosis = diagnose(figures, task.include_warmup) if task.diagnose else None
    diagnosis = split_input_bound(diagnosis, (), False)  # this path has no host logs: say which would tell
    by_index = {d.index: d for d in diagnosis.ranks} if diagnosis else {}
    metas = rank_metas(tl)
    ranks = []
    for r in figures.ranks:
        dr = by_index.get(r.index)
        tracks = rank_tracks(tl, r, task.min_gap_ns, TR.MAX_BLOCKS_PER_TRACK)
        ranks.append(RankOutput(
            meta=metas[r.index],
            result=rank_result(tl, r, dr, {}, {}, task.batch_size),
            tracks=tracks,
            tracks_count=TR.count_rank_tracks(tl, r.index),
            extras={name: fn(tl, r.index) for name, fn in RANK_EXTRAS.items()}))
    inputs = tuple(R.InputInfo(s.path, s.format, s.events_read, s.events_kept, dict(sorted(s.not_kept.items())),
                               tuple(s.warnings)) for s in tl.sources)
    return FileOutput(task.path, inputs, tuple(tl.warnings), tuple(ranks),
                      late_warnings=tuple(memory_warnings(tl, figures)))


def analyze_set(inputs: InputSet, options: Any, notes: tuple[str, ...] = ()) -> Analysis:
    """One job's trace files analysed rank by rank (`options`: pipeline.Options), as one Analysis."""
    from .executors import map_tasks

    files = inputs.files
    for first, again in same_files(files):
        raise InputError(again, f"the same file is given twice ({first} and {again})")
    remote = bool(options.scheduler)
    from .executors import workers

    # One file: its ranges are decoded by the processes that ranks would otherwise take.
    decode = workers(options.jobs, 1 << 30) if len(files) == 1 and not remote else 1
    tasks = [RankTask(os.path.abspath(f) if remote else str(f), options.min_gap_ns, options.diagnose,
                      options.include_warmup, options.max_input_bytes, options.cache, options.batch_size,
                      decode)
             for f in files]
    stage = options.stage

    def done(n: int, total: int) -> None:
        if stage and total > 1:
            stage(f"ranks read and analysed: {n} of {total}")

    def here(task: RankTask) -> FileOutput:
        return analyze_file(task, options.progress)

    jobs = options.jobs
    if jobs is None and _size(files) < PARALLEL_MIN_BYTES:
        jobs = 1  # starting processes costs more than reading a small job
    parallel = remote or (jobs != 1 and len(tasks) > 1)
    if parallel:
        done(0, len(tasks))
    outputs = map_tasks(analyze_file, tasks, jobs=jobs, scheduler=options.scheduler,
                        on_done=done if parallel else None, in_process=here)
    if stage:
        stage("analysing")
    return reduce_job(outputs, inputs, options.min_gap_ns, options.include_warmup, options.diagnose,
                      options.force_job, notes, options.batch_size)


def _size(files: list[Path]) -> int:
    total = 0
    for f in files:
        try:
            total += f.stat().st_size
        except OSError:
            pass
    return total


def reduce_job(outputs: list[FileOutput], inputs: InputSet, min_gap_ns: int, include_warmup: bool,
               diagnose: bool, force_job: bool, notes: tuple[str, ...] = (),
               batch_size: int | None = None) -> Analysis:
    """The job from its files' outputs, in input order: what `load_set` + `analyze_timeline` give."""
    from ..result.build import _us0, job_diagnosis, summary, timeline_data
    from ..result.definitions import FIGURES

    files = inputs.files
    skipped: list[str] = []
    parts: list[FileOutput] = []
    for out in outputs:
        if out.error_message is not None:
            if inputs.from_dir and len(files) > 1:
                skipped.append(f"{out.error_path}: {out.error_message}")
                continue
            raise InputError(out.error_path, out.error_message)
        parts.append(out)
    if not parts:
        raise InputError(files[0] if files else inputs.label, "no readable trace: " + "; ".join(skipped))
    ranks = [r for p in parts for r in p.ranks]
    warnings = [w for p in parts for w in p.warnings] + list(inputs.warnings) + [f"skipped {s}" for s in skipped]
    metas = [r.meta for r in ranks]
    if len(ranks) > 1:
        why = metas_mismatch(metas)
        if why and not force_job:
            raise InputError(inputs.label, f"these files do not look like ranks of one job: {why}; compare two "
                                           f"runs with `traceanalyzer diff A B` or report them separately "
                                           f"(--force-job analyses them as one job anyway)")
        if why:
            warnings.append(f"analysed as one job although {why} (--force-job)")
    numbers, renumbered = number_ranks([m.rank for m in metas])
    warnings += renumbered
    max_blocks = TR.blocks_per_track(sum(r.tracks_count for r in ranks))
    results = []
    for r, number in zip(ranks, numbers):
        timeline = timeline_data(TR.recut_tracks(r.tracks, max_blocks), max_blocks)
        drawing = replace(r.result.drawing, timeline=timeline) if r.result.drawing else None
        results.append(replace(r.result, rank=number, drawing=drawing))
    rank_results = tuple(results)
    warmup = {n for r in rank_results if r.diagnosis for n in r.diagnosis.warmup_steps}
    analysis = Analysis(
        schema=R.SCHEMA,
        tool=R.ToolInfo("traceanalyzer", __version__),
        options=R.OptionsInfo(_us0(min_gap_ns), include_warmup, batch_size),
        inputs=tuple(i for p in parts for i in p.inputs),
        warnings=tuple(warnings) + tuple(notes) + tuple(w for p in parts for w in p.late_warnings),
        ranks=rank_results,
        summary=summary(rank_results, warmup, batch_size),
        definitions=dict(FIGURES),
        diagnosis=job_diagnosis(rank_results) if diagnose else None,
        drawing=R.JobDrawing(),
    )
    final = tuple(replace(r, result=res) for r, res in zip(ranks, rank_results))
    for reduce in JOB_REDUCERS:
        analysis = reduce(final, analysis)
    return analysis


__all__ = ["JOB_REDUCERS", "RANK_EXTRAS", "FileOutput", "RankOutput", "RankTask", "analyze_file", "analyze_set",
           "reduce_job"]

"""The map: one rank's Timeline -> a compact, picklable `RankOutput` (its frozen figures, its diagnosis,
its drawn tracks), in this process, in local processes or on a Dask cluster (`executors`). A task returns
its rank's figures, never its event table, so memory holds a few ranks at a time whatever the job's size,
with or without logs. `combine.combine` puts the job together and makes the typed result, once.

Every input goes through here: rank files read by `analyze_file`, and a Timeline handed in by a
notebook, split by rank (`split_ranks`) and handed to `analyze_rank_timeline`.

Extension seam for job-wide analyses: register `RANK_EXTRAS[name] = fn(tl, rank_index) -> compact,
picklable value` (run in the worker, stored in `RankOutput.extras[name]`) and append
`fn(outputs, ranks, diagnosis, stage) -> stage` to `combine.JOB_REDUCERS` (`ranks[i]` is `outputs[i]`'s
result; the stage gathers what the stages give the Analysis: `JobStage.then`). Register at import time
of this module or of one it imports: spawned processes and Dask workers import it afresh.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from .. import intervals as iv
from ..analyses import RankAnalysis
from ..analyses import tracks as TR
from ..analyses.gaps import GapSet
from ..diagnosis import RankDiagnosis
from ..errors import InputError
from ..formats import RankMeta
from ..result import types as R
from ..timeline import Timeline


def _collectives(tl: Timeline, rank: int) -> Any:
    from ..analyses.collectives import collective_table

    return collective_table(tl, rank)


# Without --jobs, a job smaller than this is read in this process (a worker takes ~1 s to start).
PARALLEL_MIN_BYTES = 64 * 1024 * 1024

def _workers(tl: Timeline, rank: int) -> Any:
    from ..analyses.workers import worker_facts

    return worker_facts(tl, rank)


# Worker side: name -> fn(tl, rank_index) -> compact per-rank value (e.g. a rank's collective table).
RANK_EXTRAS: dict[str, Callable[[Timeline, int], Any]] = {"collectives": _collectives, "workers": _workers}


@dataclass(frozen=True)
class AnalysisOptions:
    """The part of `pipeline.Options` a rank's analysis needs (picklable: it travels to workers)."""

    min_gap_ns: int  # shortest idle stretch counted as a gap
    diagnose: bool  # False: figures only, no verdict
    include_warmup: bool  # keep slow leading (warm-up) steps in the verdict
    batch_size: int | None  # samples per step (per-step samples/s)
    max_input_bytes: int  # refuse a (decompressed) input larger than this
    cache: bool  # decoded columns of big traces cached
    log_extras: bool = False  # the job has logs: each rank's figures keep its GPU work and DataLoader waits


@dataclass(frozen=True)
class RankTask:
    """What a worker needs to analyse one rank file."""

    path: str  # as given (results name it so); absolute for a Dask cluster
    options: AnalysisOptions
    decode_workers: int = 1  # processes decoding this one file (a job of one big file: the cores)


@dataclass(frozen=True)
class RankOutput:
    """One rank analysed on its own, as it leaves the worker: its figures, its diagnosis and its drawn tracks.
    `combine` makes its typed result from them, once, with what only the job knows (its number, the shared
    block budget, the logs' figures and input split)."""

    meta: RankMeta
    figures: RankAnalysis  # ns, as `_travelling` leaves them: what the result and the job's stages read
    diagnosis: RankDiagnosis | None  # ns, its gap arrays left out; split by the host logs and typed in combine
    tracks: TR.RankTracks  # drawn at MAX_BLOCKS_PER_TRACK blocks (and counted), cut by combine
    extras: dict[str, Any] = field(default_factory=dict)  # RANK_EXTRAS results by name

    @property
    def window_ns(self) -> tuple[int, int] | None:
        """The rank's window (None: empty)."""
        w = self.figures.window
        return (w.start_ns, w.end_ns) if w.dur_ns > 0 else None


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
    from ..analyses import set_threads
    from ..formats import ReadOptions, read_file
    from ..heap import return_freed_memory

    o = task.options
    try:
        tl = read_file(Path(task.path), ReadOptions(max_input_bytes=o.max_input_bytes, progress=progress,
                                                    cache=o.cache, decode_workers=task.decode_workers))
    except InputError as exc:  # returned, not raised: combine decides (skip or stop), and says it
        return FileOutput(task.path, error_path=exc.path, error_message=exc.message)
    return_freed_memory()  # what reading freed, before the figures allocate theirs
    # the cores the file was read with (a job of one file in this process) serve its figures too
    set_threads(task.decode_workers)
    try:
        return analyze_rank_timeline(tl, o, task.path)
    finally:
        set_threads(1)


def analyze_rank_timeline(tl: Timeline, options: AnalysisOptions, path: str = "") -> FileOutput:
    """The per-rank outputs of a Timeline read from one file (or split from a notebook's Timeline): the
    figures and the diagnosis, then the drawing (a pass of its own over the rank's events, bounded blocks
    per track) and the `RANK_EXTRAS` (analyses of their own: a rank's collective table, its worker facts)."""
    from ..analyses import figures_of
    from ..diagnosis import diagnose
    from ..formats import rank_metas
    from ..result.build import memory_warnings

    figures = figures_of(tl, min_gap_ns=options.min_gap_ns, causes=options.diagnose)
    diagnosis = diagnose(figures, options.include_warmup) if options.diagnose else None
    by_index = {d.index: d for d in diagnosis.ranks} if diagnosis else {}
    metas = rank_metas(tl)
    ranks = []
    for r in figures.ranks:
        # drawn here, where the events are; the gaps carry the causes the figures gave them
        tracks = TR.rank_tracks(tl, r.index, r.window, {d.device: d.idle for d in r.devices}, options.min_gap_ns,
                                TR.MAX_BLOCKS_PER_TRACK, r.spans)
        ranks.append(RankOutput(metas[r.index], _travelling(r, options.log_extras), _compact(by_index.get(r.index)),
                                tracks, {name: fn(tl, r.index) for name, fn in RANK_EXTRAS.items()}))
    inputs = tuple(R.InputInfo(s.path, s.format, s.events_read, s.events_kept, dict(sorted(s.not_kept.items())),
                               tuple(s.warnings)) for s in tl.sources)
    return FileOutput(path, inputs, tuple(tl.warnings), tuple(ranks),
                      late_warnings=tuple(memory_warnings(figures)))


def map_files(files: list[Path], options: AnalysisOptions, jobs: int | None = None, scheduler: str | None = None,
              progress: Callable[[int], None] | None = None,
              stage: Callable[[str], None] | None = None) -> list[FileOutput]:
    """Every rank file analysed (`analyze_file`), in the files' order: here, in `jobs` local processes or
    on a Dask `scheduler` (`executors.map_tasks`). A single file has its ranges decoded by the
    processes that ranks would otherwise take."""
    from .executors import map_tasks, workers

    remote = bool(scheduler)
    decode = workers(jobs, 1 << 30) if len(files) == 1 and not remote else 1
    tasks = [RankTask(os.path.abspath(f) if remote else str(f), options, decode) for f in files]

    def done(n: int, total: int) -> None:
        if stage and total > 1:
            stage(f"ranks read and analysed: {n} of {total}")

    def here(task: RankTask) -> FileOutput:
        return analyze_file(task, progress)

    if jobs is None and _size(files) < PARALLEL_MIN_BYTES:
        jobs = 1  # starting processes costs more than reading a small job
    parallel = remote or (jobs != 1 and len(tasks) > 1)
    if parallel:
        done(0, len(tasks))
    return map_tasks(analyze_file, tasks, jobs=jobs, scheduler=scheduler, on_done=done if parallel else None,
                     in_process=here)


def _size(files: list[Path]) -> int:
    total = 0
    for f in files:
        try:
            total += f.stat().st_size
        except OSError:
            pass
    return total


def _travelling(r: RankAnalysis, logs: bool) -> RankAnalysis:
    """A rank's figures as they leave the worker: each device's idle set cut to the gaps its gap table shows
    (`shown_gaps`) and its top gaps (re-pointed into the cut set), the gap attribution holding that same cut
    set (the diagnosis is made), and each device's GPU work and the DataLoader waits kept only when the
    job's logs need them (`logs`)."""
    from ..result.build import shown_gaps

    devices = []
    for d in r.devices:
        keep = np.union1d(shown_gaps(d.idle, d.gaps.min_gap_ns), np.array([g.index for g in d.gaps.top], np.int64))
        idle = GapSet(d.idle.start_ns[keep], d.idle.end_ns[keep], None if d.idle.cause is None else d.idle.cause[keep])
        top = tuple(replace(g, index=int(np.searchsorted(keep, g.index))) for g in d.gaps.top)
        devices.append(replace(
            d, idle=idle, gaps=replace(d.gaps, top=top), busy=d.busy if logs else replace(d.busy, work=iv.empty()),
            attribution=None if d.attribution is None else replace(d.attribution, gaps=idle)))
    causes = r.causes
    if causes is not None:
        causes = replace(causes, devices=tuple(d.attribution for d in devices if d.attribution is not None))
    return replace(r, devices=tuple(devices), causes=causes,
                   dataloader_waits=r.dataloader_waits if logs else iv.empty())


def _compact(dr: RankDiagnosis | None) -> RankDiagnosis | None:
    """A rank's diagnosis without its per-gap arrays (drawn in the worker; the typed result needs none)."""
    if dr is None:
        return None
    empty = GapSet(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    return dataclasses.replace(dr, devices=tuple(dataclasses.replace(d, gaps=empty) for d in dr.devices))


def split_ranks(tl: Timeline) -> Iterator[Timeline]:
    """A Timeline of several ranks as one Timeline per rank, one at a time (its events, devices, memory
    and source; rank and source index 0), so that each goes through the map like a rank file, with the
    counters its own trace recorded. Counter logs, host logs and warnings are the job's: they stay with
    the caller."""
    if len(tl.ranks) == 1 and len(tl.sources) == 1 and not len(tl.counters) and not tl.host_logs and not tl.warnings:
        yield tl
        return
    ev_rank = tl.events["rank"].to_numpy()
    mem_rank = tl.memory["rank"].to_numpy()
    for r in tl.ranks:
        ev = tl.events[ev_rank == r.index].reset_index(drop=True)
        ev["rank"] = np.zeros(len(ev), dtype=np.int32)
        mem = tl.memory[mem_rank == r.index].reset_index(drop=True)
        mem["rank"] = np.zeros(len(mem), dtype=np.int32)
        own = tl.counters[tl.counters["source"].to_numpy() == r.source].reset_index(drop=True)  # the trace's own
        own["source"] = np.zeros(len(own), dtype=np.int32)
        yield Timeline(
            events=ev, memory=mem, counters=own, sources=[tl.sources[r.source]],
            ranks=[dataclasses.replace(r, index=0, source=0)],
            devices=[dataclasses.replace(d, rank=0) for d in tl.devices if d.rank == r.index]).validate()


__all__ = ["RANK_EXTRAS", "AnalysisOptions", "FileOutput", "RankOutput", "RankTask", "analyze_file",
           "analyze_rank_timeline", "map_files", "split_ranks"]

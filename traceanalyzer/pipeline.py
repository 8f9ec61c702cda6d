"""The public entry points: inputs -> one typed `Analysis` (and a saved report -> the same).

Every input takes one path: each rank is mapped on its own (`run.map`: read, figures, diagnosis ->
a compact rank result, in this process or in parallel) and `run.combine.combine` puts the job
together: the job checks, its counter and host logs on the trace's clock, the job stages.

Used by the command line, the tests and notebooks alike:

    import traceanalyzer as ta
    a = ta.analyze("trace.json.gz")            # or a list of paths, a log dir, a Timeline
    a.steps(); a.gaps(); a.kernels()            # DataFrames
    a.to_html("report.html"); ta.load("report.json")

`Options` holds every choice that changes a figure; the `report` command's flags map onto it.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Union

import numpy as np
import orjson

from .errors import InputError
from .result import Analysis, analysis_from_data
from .result.types import ResultFormatError
from .timeline import Timeline

if TYPE_CHECKING:
    from .align import AlignOptions
    from .formats import InputSet, ReadOptions
    from .run.map import AnalysisOptions

DEFAULT_MIN_GAP_NS = 100_000
DEFAULT_MAX_INPUT_BYTES = 16 * 1024**3

PathLike = Union[str, "os.PathLike[str]"]  # noqa: UP007
Inputs = Union[PathLike, Sequence[PathLike], Timeline]  # noqa: UP007


@dataclass(frozen=True)
class Options:
    """Everything that changes what an analysis finds (the report command's flags)."""

    min_gap_ns: int = DEFAULT_MIN_GAP_NS  # shortest idle stretch counted as a gap
    run: str | None = None  # log dirs: the run to analyse (None: the newest)
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES  # refuse a (decompressed) input larger than this
    diagnose: bool = True  # False: figures only, no verdict
    include_warmup: bool = False  # keep slow leading (warm-up) steps in the verdict
    force_job: bool = False  # analyse several files as one job even when they look like unrelated runs
    batch_size: int | None = None  # samples per step: throughput in samples/s (never guessed)
    jobs: int | None = None  # ranks read and analysed in parallel processes (None: the cores)
    scheduler: str | None = None  # a Dask distributed scheduler address: per-rank tasks run there
    cache: bool = True  # decoded columns of big traces cached in the user's cache directory
    # nvidia-smi / DCGM logs
    counter_logs: tuple[Path, ...] = ()  # logs to put on the trace's clock (besides those among the inputs)
    host_logs: tuple[Path, ...] = ()  # glances exports (besides those among the inputs), same clock options
    find_logs_beside: bool = True  # without counter_logs: use logs found beside the trace
    dmon_interval_ns: int | None = None  # sample period of a log without timestamps (None: 1 s, warned)
    dmon_start: tuple[int, str] | None = None  # first sample time of such a log: (ns, clock)
    dmon_tz: str | None = None  # zone of the machine that wrote the logs
    dmon_offset_ns: int | None = None  # log time + offset = trace time (None: found automatically)
    dmon_gpu: tuple[tuple[int, int], ...] = ()  # log GPU index -> trace device
    # Receive progress (bytes read) and notes (what a log dir holds); None: silent / stderr.
    progress: Callable[[int], None] | None = field(default=None, compare=False, repr=False)
    notify: Callable[[str], None] | None = field(default=None, compare=False, repr=False)
    stage: Callable[[str], None] | None = field(default=None, compare=False, repr=False)

    def analysis_options(self, log_extras: bool = False) -> AnalysisOptions:
        """What a rank's analysis needs of these options (picklable: it travels to workers)."""
        from .run.map import AnalysisOptions

        return AnalysisOptions(self.min_gap_ns, self.diagnose, self.include_warmup, self.batch_size,
                               self.max_input_bytes, self.cache, log_extras)

    def read_options(self) -> ReadOptions:
        """How the files are read."""
        from .formats import ReadOptions

        return ReadOptions(max_input_bytes=self.max_input_bytes, progress=self.progress, run=self.run,
                           notify=self.notify, dmon_interval_ns=self.dmon_interval_ns, dmon_start=self.dmon_start,
                           cache=self.cache)

    def align_options(self) -> AlignOptions:
        """How the logs are put on the trace's clock."""
        from .align import AlignOptions

        return AlignOptions(self.dmon_tz, self.dmon_offset_ns, tuple(self.dmon_gpu))


def _paths(inputs: PathLike | Sequence[PathLike]) -> list[Path]:
    if isinstance(inputs, (str, os.PathLike)):
        return [Path(inputs)]
    return [Path(p) for p in inputs]


def analyze(inputs: Inputs, options: Options | None = None) -> Analysis:
    """Analyse one job: a trace file, several rank files, a directory or log dir (its chosen run), or a
    Timeline already read. Counter logs among the inputs or beside the trace are aligned with it."""
    options = options or Options()
    if isinstance(inputs, Timeline):
        return _analyze_timeline(inputs, options)
    runs = analyze_runs(inputs, options, all_runs=False)
    return runs[0][1]


def analyze_runs(inputs: PathLike | Sequence[PathLike], options: Options | None = None,
                 all_runs: bool = True) -> list[tuple[str, Analysis]]:
    """One Analysis per run of a log dir (`all_runs`), labelled; else the one job of `analyze`."""
    return [(label, run()) for label, run in plan_runs(inputs, options, all_runs)]


def plan_runs(inputs: PathLike | Sequence[PathLike], options: Options | None = None,
              all_runs: bool = False) -> list[tuple[str, Callable[[], Analysis]]]:
    """The jobs the inputs stand for, each with the call that analyses it (so a caller can check
    every output path before the first, possibly long, analysis starts)."""
    from .formats import input_sets

    options = options or Options()
    sets = input_sets(_paths(inputs), options.read_options(), all_runs=all_runs)
    return [(s.label, functools.partial(_analyze_set, s, options)) for s in sets]


def _analyze_set(inputs: InputSet, options: Options) -> Analysis:
    """One job's files: traces mapped rank by rank, logs read here (they are small), then combined."""
    from .formats import classify_inputs, load_counter_logs, load_host_logs, load_request_logs
    from .run.combine import JobContext, check_files, combine
    from .run.map import map_files

    read = options.read_options()
    found = classify_inputs(inputs, list(options.counter_logs), list(options.host_logs),
                            find_beside=options.find_logs_beside)
    traces = found.traces.files
    check_files(traces)
    host_logs = load_host_logs(found.host_logs, read)
    counter_logs = load_counter_logs(found.counter_logs, read)
    requests = load_request_logs(found.request_logs, read)
    analysis = options.analysis_options(log_extras=counter_logs is not None or host_logs is not None)
    outputs = map_files(traces, analysis, options.jobs, options.scheduler, options.progress, options.stage)
    if options.stage:
        options.stage("analysing")
    return combine(outputs, JobContext(
        found.traces.label, tuple(traces), analysis, from_dir=found.traces.from_dir,
        warnings=tuple(found.traces.warnings), notes=found.notes(), counter_logs=counter_logs, host_logs=host_logs,
        requests=requests, implicit_logs=tuple(str(p) for p in (*found.found_beside, *found.found_in_folder)),
        align=options.align_options(), force_job=options.force_job))


def _analyze_timeline(tl: Timeline, options: Options) -> Analysis:
    """A Timeline handed in (a notebook's): split by rank, each mapped like a rank file, then combined with
    its counters (as they are) and host logs (put on the trace's clock)."""
    from .run.combine import JobContext, combine
    from .run.map import analyze_rank_timeline, split_ranks

    counters, hosts = _logs_of(tl)
    analysis = options.analysis_options(log_extras=counters is not None or hosts is not None)
    if options.stage:
        options.stage("analysing")
    outputs = [analyze_rank_timeline(part, analysis, part.sources[0].path) for part in split_ranks(tl)]
    return combine(outputs, JobContext("timeline", (), analysis, warnings=tuple(tl.warnings), counter_logs=counters,
                                       host_logs=hosts, requests=_requests_of(tl), align=options.align_options(),
                                       from_files=False))


def _requests_of(tl: Timeline) -> Timeline | None:
    """A Timeline's request spans as a Timeline of their own (sources renumbered), or None without any."""
    if not len(tl.requests):
        return None
    used = sorted(int(s) for s in np.unique(tl.requests["source"].to_numpy()))
    new = np.zeros(len(tl.sources), dtype=np.int32)
    new[used] = np.arange(len(used), dtype=np.int32)
    req = tl.requests.copy()
    req["source"] = new[req["source"].to_numpy()]
    return Timeline(requests=req, sources=[tl.sources[i] for i in used]).validate()


def _logs_of(tl: Timeline) -> tuple[Timeline | None, Timeline | None]:
    """A Timeline's counters and host logs, each as a Timeline of its own (sources renumbered)."""
    counters = hosts = None
    # a trace's own counters (Kineto "GPU N Counters": rows whose source is a rank's) stay with its rank
    logs = ~np.isin(tl.counters["source"].to_numpy(), [r.source for r in tl.ranks])
    if logs.any():
        co = tl.counters[logs].reset_index(drop=True)
        used = sorted(int(s) for s in np.unique(co["source"].to_numpy()))
        new = np.zeros(len(tl.sources), dtype=np.int32)
        new[used] = np.arange(len(used), dtype=np.int32)
        co["source"] = new[co["source"].to_numpy()]
        counters = Timeline(counters=co, sources=[tl.sources[i] for i in used]).validate()
    if tl.host_logs:
        used = [h.source for h in tl.host_logs]
        new = np.zeros(len(tl.sources), dtype=np.int32)
        new[used] = np.arange(len(used), dtype=np.int32)
        hm = tl.host_metrics.copy()
        hm["source"] = new[hm["source"].to_numpy()]
        hosts = Timeline(host_metrics=hm, sources=[tl.sources[i] for i in used],
                         host_logs=[replace(h, source=int(new[h.source])) for h in tl.host_logs]).validate()
    return counters, hosts


def load(path: PathLike) -> Analysis:
    """A saved JSON report (`traceanalyzer report ... --format json`, `Analysis.save`) as an Analysis."""
    p = Path(path)
    try:
        data = orjson.loads(p.read_bytes())
    except FileNotFoundError:
        raise InputError(p, "no such file or directory") from None
    except orjson.JSONDecodeError as exc:
        raise InputError(p, f"not a JSON report: {exc}") from None
    try:
        return analysis_from_data(data)
    except ResultFormatError as exc:
        raise InputError(p, str(exc)) from None


def is_saved_report(path: PathLike) -> bool:
    """A JSON report written by this tool: its first key is `schema` = "traceanalyzer/..."."""
    p = Path(path)
    if not p.is_file():
        return False
    with open(p, "rb") as fh:
        head = fh.read(256).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head.startswith(b"{") and b'"schema": "traceanalyzer/' in head.replace(b'":"', b'": "')

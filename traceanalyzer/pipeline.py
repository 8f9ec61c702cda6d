"""The one pipeline: inputs -> load -> align -> figures -> diagnosis -> typed `Analysis`.

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
from typing import Union

import orjson

from .errors import InputError
from .result import Analysis, analysis_from_data
from .result.types import ResultFormatError
from .timeline import Timeline

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
    dmon_interval_ns: int = 1_000_000_000  # sample period of a log without timestamps
    dmon_start: tuple[int, str] | None = None  # first sample time of such a log: (ns, clock)
    dmon_tz: str | None = None  # zone of the machine that wrote the logs
    dmon_offset_ns: int | None = None  # log time + offset = trace time (None: found automatically)
    dmon_gpu: tuple[tuple[int, int], ...] = ()  # log GPU index -> trace device
    # Receive progress (bytes read) and notes (what a log dir holds); None: silent / stderr.
    progress: Callable[[int], None] | None = field(default=None, compare=False, repr=False)
    notify: Callable[[str], None] | None = field(default=None, compare=False, repr=False)
    stage: Callable[[str], None] | None = field(default=None, compare=False, repr=False)


def _paths(inputs: PathLike | Sequence[PathLike]) -> list[Path]:
    if isinstance(inputs, (str, os.PathLike)):
        return [Path(inputs)]
    return [Path(p) for p in inputs]


def _read_options(options: Options):  # type: ignore[no-untyped-def]
    from .formats import ReadOptions

    return ReadOptions(max_input_bytes=options.max_input_bytes, progress=options.progress, run=options.run,
                       notify=options.notify, dmon_interval_ns=options.dmon_interval_ns,
                       dmon_start=options.dmon_start, force_job=options.force_job, cache=options.cache)


def analyze(inputs: Inputs, options: Options | None = None) -> Analysis:
    """Analyse one job: a trace file, several rank files, a directory or log dir (its chosen run), or a
    Timeline already read. Counter logs among the inputs or beside the trace are aligned with it."""
    options = options or Options()
    if isinstance(inputs, Timeline):
        return analyze_timeline(inputs, options)
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
    read = _read_options(options)
    sets = input_sets(_paths(inputs), read, all_runs=all_runs)
    return [(s.label, functools.partial(_analyze_set, s, options, read)) for s in sets]


def _analyze_set(inputs, options: Options, read) -> Analysis:  # type: ignore[no-untyped-def]
    from .align import AlignOptions, combine, combine_host_logs
    from .formats import load_counter_logs, load_host_logs, load_set, split_counter_logs, split_host_logs

    inputs, host_paths = split_host_logs(inputs, list(options.host_logs))
    host_logs = load_host_logs(host_paths, read)
    split = split_counter_logs(inputs, list(options.counter_logs), find_beside=options.find_logs_beside)
    notes = tuple(f"nvidia-smi log found beside the trace and used: {p}" for p in split.found_beside)
    if split.ignored_beside:
        shown = ", ".join(str(p) for p in split.ignored_beside[:10])
        more = f" and {len(split.ignored_beside) - 10} more" if len(split.ignored_beside) > 10 else ""
        notes += (f"nvidia-smi logs beside the trace not used (their names do not start with the trace's, "
                  f"so they may belong to other runs): {shown}{more}; pass the right one with --dmon",)
    if split.traces.files and not split.logs and host_logs is None:
        # Traces alone: rank by rank (in parallel with --jobs / --scheduler), memory bounded by a few ranks.
        from .run.map import analyze_set

        return analyze_set(split.traces, options, notes)
    # Counter and host logs are aligned with the whole job's trace: read as one Timeline.
    if len(split.traces.files) == 1:  # one file: its ranges decoded by the cores --jobs allows
        from .run.executors import workers

        read = replace(read, decode_workers=workers(options.jobs, 1 << 30))
    trace = load_set(split.traces, read) if split.traces.files else None
    logs = load_counter_logs(split.logs, read)
    align = AlignOptions(options.dmon_tz, options.dmon_offset_ns, tuple(options.dmon_gpu))
    tl, alignments = combine(trace, logs, align)
    tl, host_alignments = combine_host_logs(tl, host_logs, align)
    return analyze_timeline(tl, options, alignments=alignments, counters_aligned=trace is not None,
                            with_counters=logs is not None, warnings=notes, host_alignments=host_alignments)


def analyze_timeline(tl: Timeline, options: Options | None = None, alignments: tuple = (),
                     counters_aligned: bool = False, with_counters: bool | None = None,
                     warnings: tuple[str, ...] = (), host_alignments: tuple | None = None) -> Analysis:
    """The figures, diagnosis and counter figures of a Timeline, as one typed Analysis.
    `host_alignments`: how its host logs were put on the trace's clock (`align.combine_host_logs`);
    None: they are still on their own clocks and are placed here."""
    from .align import AlignOptions, place_host_logs
    from .analyses import figures_of
    from .analyses.counters import counter_figures, trace_window
    from .analyses.host_logs import host_figures
    from .diagnosis import diagnose
    from .diagnosis.input_split import split_input_bound
    from .result.build import assemble

    options = options or Options()
    if options.stage:
        options.stage("analysing")
    figures = figures_of(tl, min_gap_ns=options.min_gap_ns, causes=options.diagnose)
    diagnosis = diagnose(figures, options.include_warmup) if options.diagnose else None
    counters = None
    if with_counters if with_counters is not None else len(tl.counters) > 0:
        window = trace_window(tl) if counters_aligned else None
        counters = counter_figures(tl, window)
        if options.diagnose and not tl.ranks:  # logs alone: are the GPUs used at all?
            from .diagnosis.counters import diagnose_counters

            diagnosis = diagnose_counters(counters)
    if host_alignments is None:
        tl, host_alignments = place_host_logs(tl, AlignOptions(options.dmon_tz, options.dmon_offset_ns))
    hosts = host_figures(tl, host_alignments)
    diagnosis = split_input_bound(diagnosis, hosts, bool(tl.host_logs))
    analysis = assemble(tl, figures, diagnosis, counters, alignments, counters_aligned, warnings,
                        options.include_warmup, hosts, options.batch_size)
    if len(tl.ranks) > 1:  # many ranks: one clock, collectives matched, stragglers
        from .analyses.collectives import collective_table
        from .run.combine import with_job

        analysis = with_job([collective_table(tl, r.index) for r in tl.ranks], analysis)
    return analysis


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

"""Test helper: inputs read into one Timeline, one rank per trace file (what the figure and diagnosis tests
work on). The library reads a job rank by rank and never merges it; tests of one figure want the whole."""

from __future__ import annotations

from pathlib import Path

from traceanalyzer.errors import InputError
from traceanalyzer.formats import InputSet, ReadOptions, input_sets, number_ranks, read_file
from traceanalyzer.timeline import Timeline


def load_set(inputs: InputSet, options: ReadOptions) -> Timeline:
    """One job's files in one Timeline, its ranks numbered as the job would number them."""
    parts, skipped = [], []
    for f in inputs.files:
        try:
            parts.append(read_file(f, options))
        except InputError as exc:
            if not (inputs.from_dir and len(inputs.files) > 1):
                raise
            skipped.append(f"skipped {exc}")  # a directory's unreadable file, as a job skips it
    tl = Timeline.concat(parts) if len(parts) > 1 else parts[0]
    tl.warnings.extend(inputs.warnings)
    tl.warnings.extend(skipped)
    if len(tl.ranks) > 1:
        numbers, warnings = number_ranks([r.rank for r in tl.ranks])
        tl.warnings.extend(warnings)
        for r, n in zip(tl.ranks, numbers):
            r.rank = n
    return tl


def load_paths(paths: list[Path], options: ReadOptions | None = None) -> Timeline:
    """Every input in one Timeline, one rank per trace file (log dirs: the chosen run)."""
    options = options or ReadOptions()
    return load_set(input_sets(paths, options)[0], options)


def load_runs(paths: list[Path], options: ReadOptions | None = None) -> list[tuple[str, Timeline]]:
    """One Timeline per run of a log directory, labelled."""
    options = options or ReadOptions()
    return [(s.label, load_set(s, options)) for s in input_sets(paths, options, all_runs=True)]


def trace_clock(tl: Timeline):  # type: ignore[no-untyped-def]
    """What aligning a log needs of a (whole) trace Timeline, as `combine` gathers it from the ranks."""
    from traceanalyzer.align import TraceClock
    from traceanalyzer.analyses import figures_of
    from traceanalyzer.analyses.counters import merge_busy_sets, rank_busy_sets

    ev = tl.events
    span = None
    if len(ev):
        ts = ev["ts_ns"].to_numpy()
        span = (int(ts.min()), int((ts + ev["dur_ns"].to_numpy()).max()))
    epoch = bool(tl.ranks) and all(r.clock == "epoch" for r in tl.ranks)
    return TraceClock(span, epoch, merge_busy_sets([rank_busy_sets(r) for r in figures_of(tl, causes=False).ranks]))


def trace_window(tl: Timeline) -> tuple[int, int] | None:
    """The report's window over all ranks of `tl`."""
    from traceanalyzer.analyses import figures as F
    from traceanalyzer.analyses.counters import job_window

    windows = [F.rank_window(tl, r.index) for r in tl.ranks]
    return job_window([(w.start_ns, w.end_ns) if w.dur_ns > 0 else None for w in windows])

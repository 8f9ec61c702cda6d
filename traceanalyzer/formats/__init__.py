"""Readers: one module per input kind, each with `sniff(head) -> bool` and
`read(path, data, options) -> Timeline`. `load_paths` picks a reader by content, never by name.

To add a format: write a module with those two functions and put it in `readers()`, before any
reader whose sniff would also accept its files.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from ..errors import InputError, UsageError
from ..inert import terminal
from ..timeline import Timeline
from ._base import ReadOptions
from ._io import first_content, read_head, read_input


def readers() -> tuple[ModuleType, ...]:
    from . import dcgm_csv, dmon, kineto, smi_csv, tf_json, xplane

    # Text logs first (their sniffs never accept JSON or protobuf); tf_json before kineto:
    # kineto's sniff accepts any JSON object.
    return (dmon, smi_csv, dcgm_csv, xplane, tf_json, kineto)


TRACE_SUFFIXES = (".json", ".json.gz", ".gz", ".xplane.pb")


def read_file(path: Path, options: ReadOptions) -> Timeline:
    """Read one file with the first reader whose sniff accepts its content."""
    if not path.exists():
        raise InputError(path, "no such file or directory")
    if path.stat().st_size == 0:
        raise InputError(path, "empty file: expected a profiler trace")
    if options.cache:
        from ..cache import cached_read

        return cached_read(path, options.max_input_bytes, lambda: _read_file(path, options), options.progress)
    return _read_file(path, options)


def _read_file(path: Path, options: ReadOptions) -> Timeline:
    head = read_head(path)
    if not head.strip():  # blank start: find the content, holding none of the blanks
        head = first_content(path, options.max_input_bytes)  # raises the precise gzip error, if any
        if not head:
            raise InputError(path, "no content: expected a profiler trace")
    for reader in readers():
        if reader.sniff(head):
            read_path = getattr(reader, "read_path", None)
            if read_path is not None:  # a reader that streams the file itself
                return read_path(path, options)  # type: ignore[no-any-return]
            data = read_input(path, options.max_input_bytes)
            return reader.read(path, data, options)
    raise InputError(path, _unsupported(head))


def _unsupported(head: bytes) -> str:
    expected = ("expected Chrome-trace JSON (optionally gzip-compressed), an XSpace protobuf "
                "(<host>.xplane.pb), or an nvidia-smi dmon / --query-gpu CSV / DCGM CSV log")
    if _looks_binary(head[:64]):
        return (f"not a supported trace: binary data that is not an XSpace profile (TF profiler tool "
                f"outputs such as overview_page.pb or input_pipeline.pb are summaries, not traces); "
                f"{expected}; file starts with {head[:16]!r}")
    return f"not a supported trace: {expected}; file starts with {head[:16]!r}"


@dataclass
class InputSet:
    """The files of one job (one rank each), and what they are called in messages."""

    label: str
    files: list[Path]
    from_dir: bool  # files found in a directory: an unreadable one is skipped, not fatal
    warnings: list[str] = field(default_factory=list)


def _looks_binary(sample: bytes) -> bool:
    if any(b < 0x20 and b not in (0x09, 0x0A, 0x0D) for b in sample):
        return True
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start < len(sample) - 4  # not just a character cut at the sample's end
    return False


def input_sets(paths: list[Path], options: ReadOptions | None = None,
               all_runs: bool = False) -> list[InputSet]:
    """Resolve the command-line inputs to jobs.

    A file is itself. A directory is searched for a TensorBoard log-dir layout (`logdir`): the
    newest run by default, `options.run` to choose one, `all_runs` for one job per run; what was
    found and picked goes to `options.notify`. Without that layout a directory stands for every
    trace-like file directly in it, in name order. Several inputs form one job (all_runs then
    needs a single directory).
    """
    from . import logdir as L

    options = options or ReadOptions()
    notify = options.notify or _stderr
    dirs = [p for p in paths if p.is_dir()]
    if all_runs and (len(paths) != 1 or not dirs):
        raise UsageError("--all-runs needs exactly one log directory")
    if options.run is not None and not dirs:
        raise UsageError("--run names a run inside a log directory; no directory was given")
    merged = InputSet(label=_label(paths), files=[], from_dir=False)
    for p in paths:
        if not p.is_dir():
            merged.files.append(p)
            continue
        found = L.discover(p)
        if found is None:
            merged.files.extend(_plain_dir(p))
            merged.from_dir = True
            continue
        chosen = L.select(found, options.run, all_runs)
        for line in L.describe(found, chosen, all_runs):
            notify(line)
        notes = [f"skipped {s}" for s in found.skipped] + found.notes
        if all_runs:
            return [InputSet(label=r.label, files=list(r.files), from_dir=True, warnings=list(notes))
                    for r in chosen]
        merged.files.extend(chosen[0].files)
        merged.from_dir = True
        merged.warnings.extend(notes)
        if len(paths) == 1:
            merged.label = chosen[0].label
    return [merged]


def _plain_dir(p: Path) -> list[Path]:
    """Fallback without a log-dir layout: every trace-like file directly in the directory."""
    found = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(TRACE_SUFFIXES))
    found = sorted(found + _logs_in(p))  # counter logs in the folder go with its traces
    if not found:
        raise InputError(p, "directory holds no trace files (*.json, *.json.gz, *.xplane.pb), no "
                            "nvidia-smi logs and no TensorBoard log-dir layout (*.pt.trace.json[.gz], "
                            "plugins/profile/<run>/)")
    return found


def _label(paths: list[Path]) -> str:
    return paths[0].name if len(paths) == 1 else f"{paths[0].name} and {len(paths) - 1} more"


def _stderr(line: str) -> None:
    """Default `notify`: run and folder names come from the file system, so made inert."""
    sys.stderr.write(f"traceanalyzer: {terminal(line)}\n")


def counter_readers() -> tuple[ModuleType, ...]:
    """Readers of sampled-counter logs (nvidia-smi, DCGM): their files are aligned, not ranks."""
    from . import dcgm_csv, dmon, smi_csv

    return (dmon, smi_csv, dcgm_csv)


# Names a counter log found beside a trace (or in a trace directory) may have; content decides.
COUNTER_LOG_SUFFIXES = (".log", ".csv", ".txt")


def is_counter_log(path: Path) -> bool:
    """Whether the file's content is an nvidia-smi / DCGM counter log (by sniffing, not name)."""
    if not path.is_file():
        return False
    try:
        head = read_head(path, 4096)
    except InputError:
        return False
    return not _is_glances(path) and any(r.sniff(head) for r in counter_readers())


def _is_glances(path: Path) -> bool:
    from . import glances

    try:
        return path.is_file() and glances.sniff(read_head(path))
    except InputError:
        return False


def split_host_logs(inputs: InputSet, explicit: list[Path] | None = None) -> tuple[InputSet, list[Path]]:
    """Host monitor logs (glances exports, by content) taken out of the set, plus `explicit` ones
    (`--host-log`)."""
    logs = [f for f in inputs.files if _is_glances(f)]
    rest = InputSet(inputs.label, [f for f in inputs.files if f not in logs], inputs.from_dir, list(inputs.warnings))
    return rest, logs + list(explicit or [])


def load_host_logs(paths: list[Path], options: ReadOptions) -> Timeline | None:
    """Host monitor logs (glances CSV / JSON exports) into one Timeline of host metrics (one source
    each, on their own clocks), or None without any."""
    from . import glances

    parts = []
    for p in paths:
        if not p.exists():
            raise InputError(p, "no such file or directory")
        head = read_head(p)
        if not glances.sniff(head):
            raise InputError(p, "not a glances export: expected the CSV of `glances --export csv` (a header "
                                "starting with timestamp and naming cpu.user / cpu_user) or its JSON export")
        parts.append(glances.read(p, read_input(p, options.max_input_bytes), options))
    if not parts:
        return None
    return Timeline.concat(parts) if len(parts) > 1 else parts[0]


def _logs_in(folder: Path) -> list[Path]:
    return sorted(f for f in folder.iterdir()
                  if f.is_file() and f.name.endswith(COUNTER_LOG_SUFFIXES) and is_counter_log(f))


@dataclass
class CounterLogs:
    """An input set split into traces (ranks) and counter logs to align with them."""

    traces: InputSet  # the set without its counter logs (may have no files: logs only)
    logs: list[Path]
    found_beside: list[Path]  # picked up beside the traces, not named by the user
    ignored_beside: list[Path] = field(default_factory=list)  # beside the traces, not plainly theirs


def split_counter_logs(inputs: InputSet, explicit: list[Path] | None = None,
                       find_beside: bool = True) -> CounterLogs:
    """Counter logs among the set's files, plus `explicit` ones (`--dmon`); without explicit logs, a
    log beside a trace (*.log / *.csv / *.txt that sniffs as a counter log) only when it plainly
    belongs to it: its name starts with the trace's name (`run3.json` + `run3.dmon.log`), or it is
    the only log in the folder. Other logs there (an uploads folder holds many runs) are listed,
    not used."""
    logs = [f for f in inputs.files if is_counter_log(f)]
    traces = [f for f in inputs.files if f not in logs]
    explicit = list(explicit or [])
    found: list[Path] = []
    ignored: list[Path] = []
    if find_beside and not explicit and traces and not logs:
        for folder in sorted({f.parent for f in traces}):
            beside = [f for f in _logs_in(folder) if f not in found]
            stems = {_trace_stem(t) for t in traces if t.parent == folder}
            named = [f for f in beside if any(f.name.startswith(stem) for stem in stems if stem)]
            if named:
                found += named
                ignored += [f for f in beside if f not in named]
            elif len(beside) == 1:
                found += beside
            else:
                ignored += beside
    rest = InputSet(inputs.label, traces, inputs.from_dir, list(inputs.warnings))
    return CounterLogs(rest, logs + explicit + found, found, ignored)


def _trace_stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".json", ".pb", ".pt.trace", ".trace", ".xplane"):
        name = name.removesuffix(suffix)
    return name


def load_counter_logs(paths: list[Path], options: ReadOptions) -> Timeline | None:
    """Counter logs into one counters-only Timeline (one source each), or None without any."""
    if not paths:
        return None
    parts = [read_file(p, options) for p in paths]
    return Timeline.concat(parts) if len(parts) > 1 else parts[0]


def load_paths(paths: list[Path], options: ReadOptions | None = None) -> Timeline:
    """Read every input into one Timeline, one rank per trace file (log dirs: the chosen run)."""
    options = options or ReadOptions()
    return load_set(input_sets(paths, options)[0], options)


def load_runs(paths: list[Path], options: ReadOptions | None = None) -> list[tuple[str, Timeline]]:
    """One Timeline per run of a log directory (`--all-runs`), labelled."""
    options = options or ReadOptions()
    return [(s.label, load_set(s, options)) for s in input_sets(paths, options, all_runs=True)]


def load_set(inputs: InputSet, options: ReadOptions) -> Timeline:
    """Read one job's files into one Timeline, one rank per file."""
    files = inputs.files
    for first, again in same_files(files):
        raise InputError(again, f"the same file is given twice ({first} and {again})")
    parts: list[Timeline] = []
    skipped: list[str] = []
    for f in files:
        try:
            parts.append(read_file(f, options))
        except InputError as exc:
            if inputs.from_dir and len(files) > 1:
                skipped.append(str(exc))
                continue
            raise
    if not parts:
        raise InputError(files[0] if files else inputs.label, "no readable trace: " + "; ".join(skipped))
    tl = Timeline.concat(parts) if len(parts) > 1 else parts[0]
    tl.warnings.extend(inputs.warnings)
    tl.warnings.extend(f"skipped {s}" for s in skipped)
    if len(tl.ranks) > 1:
        why = job_mismatch(tl)
        if why and not options.force_job:
            raise InputError(inputs.label, f"these files do not look like ranks of one job: {why}; compare two "
                                           f"runs with `traceanalyzer diff A B` or report them separately "
                                           f"(--force-job analyses them as one job anyway)")
        if why:
            tl.warnings.append(f"analysed as one job although {why} (--force-job)")
    assign_ranks(tl)
    return tl


def same_files(files: list[Path]) -> list[tuple[Path, Path]]:
    """Pairs of inputs that are the same file (by resolved path)."""
    seen: dict[Path, Path] = {}
    pairs = []
    for f in files:
        key = f.resolve()
        if key in seen:
            pairs.append((seen[key], f))
        else:
            seen[key] = f
    return pairs


@dataclass(frozen=True)
class RankMeta:
    """What the job-level checks need of one rank, so they run on per-rank results as well."""

    name: str  # the rank's input file, as given
    rank: int | None  # from the trace (distributedInfo)
    world_size: int | None
    clock: str
    device_names: tuple[str, ...]  # of its devices, in the Timeline's order
    span_ns: tuple[int, int] | None  # first event start, last event end (None: no events)


def rank_metas(tl: Timeline) -> list[RankMeta]:
    """One RankMeta per rank of `tl`."""
    ev = tl.events
    ranks_col = ev["rank"].to_numpy()
    out = []
    for r in tl.ranks:
        mine = ranks_col == r.index
        span = None
        if mine.any():
            ts = ev["ts_ns"].to_numpy()[mine]
            span = (int(ts.min()), int((ts + ev["dur_ns"].to_numpy()[mine]).max()))
        out.append(RankMeta(tl.sources[r.source].path, r.rank, r.world_size, r.clock,
                            tuple(d.name for d in tl.devices if d.rank == r.index), span))
    return out


def job_mismatch(tl: Timeline) -> str | None:
    """Why the ranks of `tl` look like unrelated runs rather than one job, or None."""
    return metas_mismatch(rank_metas(tl))


def metas_mismatch(metas: list[RankMeta]) -> str | None:
    """Why these ranks look like unrelated runs rather than one job, or None.

    Ranks of one job share the world size their traces record, have distinct rank numbers, run on
    one GPU model, and (on epoch clocks) overlap in wall-clock time.
    """
    sizes = {m.world_size for m in metas if m.world_size is not None}
    if len(sizes) > 1:
        return f"their world sizes differ ({', '.join(str(s) for s in sorted(sizes))})"
    numbers: dict[int, str] = {}
    for m in metas:
        if m.rank is not None:
            if m.rank in numbers:
                return f"{numbers[m.rank]} and {m.name} are both rank {m.rank}"
            numbers[m.rank] = m.name
    models: dict[str, str] = {}
    for m in metas:
        for device_name in m.device_names:
            if device_name:
                models.setdefault(device_name, m.name)
    if len(models) > 1:
        return "they ran on different GPU models (" + ", ".join(f"{m} in {f}" for m, f in models.items()) + ")"
    if all(m.clock == "epoch" for m in metas):
        spans = [(m.span_ns[0], m.span_ns[1], m.name) for m in metas if m.span_ns is not None]
        if len(spans) > 1:
            latest_start = max(spans, key=lambda x: x[0])
            earliest_end = min(spans, key=lambda x: x[1])
            if latest_start[0] > earliest_end[1]:
                return (f"they do not overlap in time ({earliest_end[2]} ends before {latest_start[2]} starts)")
    return None


def assign_ranks(tl: Timeline) -> None:
    """Ranks from the traces' own distributedInfo; the rest numbered in name order, never twice."""
    if len(tl.ranks) < 2:
        return
    numbers, warnings = number_ranks([r.rank for r in tl.ranks])
    tl.warnings.extend(warnings)
    for r, n in zip(tl.ranks, numbers):
        r.rank = n


def number_ranks(found: list[int | None]) -> tuple[list[int | None], list[str]]:
    """Rank numbers for a job's ranks in order: the traces' own, the rest (and repeats) numbered in
    order with the numbers left free; with the warnings to give. One rank keeps what it has."""
    if len(found) < 2:
        return list(found), []
    seen: set[int] = set()
    numbers: list[int | None] = []
    warnings = []
    for n in found:
        if n is not None:
            if n in seen:
                warnings.append(f"rank {n} appears in more than one trace; renumbered in name order")
                n = None
            else:
                seen.add(n)
        numbers.append(n)
    free = (i for i in range(10**9) if i not in seen)
    return [next(free) if n is None else n for n in numbers], warnings

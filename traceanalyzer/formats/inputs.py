"""What the command line's inputs stand for: input sets (one job's files; a log dir's runs) and, within
a set, which files are traces, GPU counter logs or host monitor logs (`classify_inputs`, by content)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError, UsageError
from ..inert import terminal
from ..timeline import Timeline
from ._base import ReadOptions
from ._io import is_link_loop, resolved
from .registry import (
    COUNTER_LOG_SUFFIXES,
    COUNTERS,
    HOST,
    MAX_FOLDER_SNIFFS,
    REQUESTS,
    TRACE,
    TRACE_SUFFIXES,
    file_kind,
    read_file,
    read_host_log,
    read_request_log,
    sniffed_kind,
)


@dataclass
class InputSet:
    """The files of one job (one rank each), and what they are called in messages."""

    label: str
    files: list[Path]
    from_dir: bool  # files found in a directory: an unreadable one is skipped, not fatal
    warnings: list[str] = field(default_factory=list)


def input_sets(paths: list[Path], options: ReadOptions | None = None,
               all_runs: bool = False) -> list[InputSet]:
    """Resolve the command-line inputs to jobs.

    A file is itself. A directory is searched for a TensorBoard log-dir layout (`logdir`): the
    newest run by default, `options.run` to choose one, `all_runs` for one job per run; what was
    found and picked goes to `options.notify`. Without that layout a directory stands for every
    trace or counter log directly in it, found by content (`folder_files`), in name order. Several inputs
    form one job (all_runs then needs a single directory).
    """
    from . import logdir as L

    options = options or ReadOptions()
    notify = options.notify or _log
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
            merged.files.extend(_plain_dir(p, merged.warnings))
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


def _plain_dir(p: Path, warnings: list[str]) -> list[Path]:
    """Fallback without a log-dir layout: every trace or counter log directly in the directory, found by
    content (`folder_files`)."""
    found = folder_files(p, warnings)
    if not found:
        raise InputError(p, "directory holds no trace files (Chrome-trace JSON, an XSpace or Perfetto protobuf, "
                            "by content, whatever their names), no nvidia-smi logs and no TensorBoard log-dir "
                            "layout (*.pt.trace.json[.gz], plugins/profile/<run>/)")
    return found


def folder_files(p: Path, warnings: list[str] | None = None) -> list[Path]:
    """The files directly in a folder that stand for a job, in name order: those named like a trace (read,
    or said to be unreadable, as any trace), and every other file whose content a trace or counter-log
    reader's sniff accepts (`registry.sniffed_kind`: a `.csv` log, a trace without a suffix). Symbolic
    links that loop are left out, and at most MAX_FOLDER_SNIFFS other files are sniffed; both are counted
    in `warnings`. Host monitor logs are given with --host-log or beside a trace, not found in a folder."""
    warnings = warnings if warnings is not None else []
    entries = sorted(p.iterdir())
    loops = [f.name for f in entries if is_link_loop(f)]
    if loops:
        warnings.append(f"skipped {len(loops)} symbolic link(s) that loop in folder {p.name}: "
                        f"{', '.join(loops[:5])}")
    files = [f for f in entries if f.name not in loops and f.is_file()]
    named = [f for f in files if f.name.endswith(TRACE_SUFFIXES)]
    others = [f for f in files if not f.name.endswith(TRACE_SUFFIXES)]
    if len(others) > MAX_FOLDER_SNIFFS:
        warnings.append(f"folder {p.name}: only the first {MAX_FOLDER_SNIFFS} of its {len(others)} files not named "
                        f"like a trace were read to see whether they are traces or logs")
        others = others[:MAX_FOLDER_SNIFFS]
    return sorted(named + [f for f in others if sniffed_kind(f) in (TRACE, COUNTERS, REQUESTS)])


def _label(paths: list[Path]) -> str:
    return paths[0].name if len(paths) == 1 else f"{paths[0].name} and {len(paths) - 1} more"


def _log(line: str) -> None:
    """Default `notify`: the library prints nothing; the lines go to the `traceanalyzer` logger (INFO)."""
    logging.getLogger("traceanalyzer").info("%s", terminal(line))


def is_counter_log(path: Path) -> bool:
    """Whether the file's content is an nvidia-smi / DCGM counter log (by sniffing, not name)."""
    return file_kind(path) == COUNTERS


def _logs_in(folder: Path) -> list[Path]:
    """Counter logs directly in `folder`; none when it cannot be listed (a missing folder: the trace
    in it is then said to be missing when it is read)."""
    try:
        return sorted(f for f in folder.iterdir()
                      if f.is_file() and f.name.endswith(COUNTER_LOG_SUFFIXES) and is_counter_log(f))
    except OSError:
        return []


# How the notes on logs picked up implicitly begin (the path follows): the summary line names them.
FOUND_BESIDE = "nvidia-smi log found beside the trace and used: "
FOUND_IN_FOLDER = "nvidia-smi log found in the input folder and used: "
IMPLICIT_LOG_NOTES = (FOUND_BESIDE, FOUND_IN_FOLDER)


@dataclass
class JobInputs:
    """An input set sorted by content: the traces (one rank each) and the logs to put on their clock."""

    traces: InputSet  # the set without its logs (may have no files: logs only)
    counter_logs: list[Path]  # nvidia-smi / DCGM logs: among the inputs, given (--dmon), found beside
    host_logs: list[Path]  # host monitor logs: among the inputs, then given (--host-log)
    found_beside: list[Path] = field(default_factory=list)  # counter logs picked up beside the traces
    ignored_beside: list[Path] = field(default_factory=list)  # beside the traces, not plainly theirs

    found_in_folder: list[Path] = field(default_factory=list)  # counter logs in a folder given as input
    request_logs: list[Path] = field(default_factory=list)  # request-span exports (OpenTelemetry) among the inputs

    def notes(self) -> tuple[str, ...]:
        """What the job's report says about the logs it picked up without being named (beside its traces,
        or in a folder given as input): each starts with one of IMPLICIT_LOG_NOTES, then the path."""
        notes = tuple(f"{FOUND_BESIDE}{p}" for p in self.found_beside)
        notes += tuple(f"{FOUND_IN_FOLDER}{p}" for p in self.found_in_folder)
        if self.ignored_beside:
            shown = ", ".join(str(p) for p in self.ignored_beside[:10])
            more = f" and {len(self.ignored_beside) - 10} more" if len(self.ignored_beside) > 10 else ""
            notes += (f"nvidia-smi logs beside the trace not used (their names do not start with the trace's, "
                      f"so they may belong to other runs): {shown}{more}; pass the right one with --dmon",)
        return notes


def classify_inputs(inputs: InputSet, counter_logs: list[Path] | None = None, host_logs: list[Path] | None = None,
                    find_beside: bool = True) -> JobInputs:
    """The set's files sorted by content (`registry.file_kind`), plus the logs given explicitly (`--dmon`,
    `--host-log`). Without explicit counter logs, a counter log beside a trace (*.log / *.csv / *.txt)
    is used only when it plainly belongs to it: its name starts with the trace's name (`run3.json` +
    `run3.dmon.log`), or it is the only log in the folder. Other logs there (an uploads folder holds
    many runs) are listed, not used."""
    kinds = {f: file_kind(f) for f in inputs.files}
    hosts = [f for f in inputs.files if kinds[f] == HOST]
    logs = [f for f in inputs.files if kinds[f] == COUNTERS]
    spans = [f for f in inputs.files if kinds[f] == REQUESTS]
    traces = [f for f in inputs.files if f not in hosts and f not in logs and f not in spans]
    explicit = list(counter_logs or [])
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
    return JobInputs(rest, logs + explicit + found, hosts + list(host_logs or []), found, ignored,
                     list(logs) if inputs.from_dir and traces else [], spans)


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


def load_host_logs(paths: list[Path], options: ReadOptions) -> Timeline | None:
    """Host monitor logs into one Timeline of host metrics (one source each, on their own clocks), or
    None without any."""
    parts = [read_host_log(p, options) for p in paths]
    if not parts:
        return None
    return Timeline.concat(parts) if len(parts) > 1 else parts[0]


def load_request_logs(paths: list[Path], options: ReadOptions) -> Timeline | None:
    """Request-span exports into one Timeline of request spans (one source each, epoch clock), or None
    without any."""
    parts = [read_request_log(p, options) for p in paths]
    if not parts:
        return None
    return Timeline.concat(parts) if len(parts) > 1 else parts[0]


def same_files(files: list[Path]) -> list[tuple[Path, Path]]:
    """Pairs of inputs that are the same file (by resolved path)."""
    seen: dict[Path, Path] = {}
    pairs = []
    for f in files:
        key = resolved(f)
        if key in seen:
            pairs.append((seen[key], f))
        else:
            seen[key] = f
    return pairs


__all__ = ["InputSet", "JobInputs", "classify_inputs", "folder_files", "input_sets", "is_counter_log",
           "load_counter_logs", "load_host_logs", "load_request_logs", "same_files"]

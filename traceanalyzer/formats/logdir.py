"""TensorBoard log-dir discovery: which trace files under a directory make up which run.

Two layouts are recognised, anywhere below the directory given (or the directory itself):

* PyTorch `tensorboard_trace_handler`: `<worker>[.<span>].pt.trace.json[.gz]`. The files of one
  directory are grouped per worker; each worker's files in span-number order are its 1st, 2nd...
  span, and the k-th span of every worker is one run whose workers are the ranks of one job
  (span numbers are per-worker timestamps, so they are matched by order, not by value).
* TensorFlow / JAX profiler: `plugins/profile/<run>/<host>.xplane.pb` (or, older and converted,
  `<host>.trace.json[.gz]`); every host of a run folder is a rank. Tool outputs beside them
  (`overview_page.pb`, `input_pipeline.pb`, caches...) are summaries, not traces: skipped, said so.

Runs are ordered oldest first: by time when every run has one (TF run folders are named
`YYYY_MM_DD_HH_MM_SS`; PyTorch span numbers that are epoch ms/ns), else PyTorch spans by number,
else by the newest file modification time. `discover` returns None when the directory has neither
layout, so the caller can fall back to "every trace file directly in the directory".
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..errors import InputError
from ._io import is_link_loop
from .registry import COUNTER_LOG_SUFFIXES, TRACE_SUFFIXES

PT_TRACE = re.compile(r"^(?P<worker>.+?)(?:\.(?P<span>\d+))?\.pt\.trace\.json(?:\.gz)?$")
RUN_FOLDER_TIME = re.compile(r"^(\d{4})_(\d{2})_(\d{2})_(\d{2})_(\d{2})_(\d{2})$")
XPLANE_SUFFIX = ".xplane.pb"
TF_TRACE_SUFFIXES = (".trace.json.gz", ".trace.json")
# Span numbers at or above these are epoch timestamps (after 2001) in ns / ms.
_EPOCH_NS_FLOOR = 10**18
_EPOCH_MS_FLOOR = 10**12

# Folders deeper than this below the log dir are not searched (said in `skipped`): the walk
# stays bounded on a hostile tree thousands of levels deep.
MAX_DEPTH = 32
# ... unless nothing was found within MAX_DEPTH: then down to this depth (a run kept deep in a tree is read,
# said in a note; os.walk recurses once per level, so this stays far below the recursion limit).
MAX_DEPTH_FALLBACK = 256

TENSORFLOW = "tensorflow"
PYTORCH = "pytorch"


@dataclass(frozen=True)
class Run:
    """One profiling run: the files whose events form one job (one rank per file)."""

    name: str  # what --run matches: TF run folder name, or "span<k>" for PyTorch
    label: str  # where it is, relative to the log dir, for messages
    kind: str  # TENSORFLOW or PYTORCH
    files: tuple[Path, ...]
    time_s: float | None  # start time from the folder name / span number, when it says one
    mtime_s: float  # newest modification time of its files
    aliases: tuple[str, ...] = ()  # other names --run accepts (relative path, raw span numbers)
    index: int = 0  # PyTorch: span position within its directory


@dataclass
class LogDir:
    root: Path
    runs: list[Run]  # oldest first
    ordered_by: str  # how "newest" was decided, for the message
    skipped: list[str] = field(default_factory=list)  # files left out, with why
    notes: list[str] = field(default_factory=list)  # oddities that do not leave anything out
    left_out: list[str] = field(default_factory=list)  # run folders that could not be used (unreadable, no trace)

    def find(self, name: str) -> Run:
        for run in self.runs:
            if name == run.name or name == run.label or name in run.aliases:
                return run
        names = ", ".join(r.name for r in self.runs)
        raise InputError(self.root, f"no run named {name!r}; runs found: {names}")


def discover(root: Path) -> LogDir | None:
    """The runs under `root`, or None when it holds no log-dir layout (the caller then reads the
    folder's own trace files). Folders are searched MAX_DEPTH levels down; when no run is found there
    but deeper folders were left out, down to MAX_DEPTH_FALLBACK (said in a note)."""
    walk = _Walk(root, MAX_DEPTH)
    if not walk.tf_runs and not walk.pt_files and walk.too_deep:
        deeper = _Walk(root, MAX_DEPTH_FALLBACK)
        if deeper.tf_runs or deeper.pt_files:
            deeper.notes.append(f"no run within {MAX_DEPTH} levels of the log dir: searched down to "
                                f"{MAX_DEPTH_FALLBACK} levels, found {len(deeper.tf_runs) + len(deeper.pt_files)} "
                                f"folder(s) of traces below {MAX_DEPTH} levels")
            walk = deeper
    if walk.too_deep:
        walk.skipped.append(f"folders more than {walk.max_depth} levels below the log dir (not searched): "
                            f"{len(walk.too_deep)} below {walk.too_deep[0][:200]}")
    pt_runs = [run for d, files in sorted(walk.pt_files.items())
               for run in _pytorch_spans(root, d, files, walk.notes)]
    runs = walk.tf_runs + pt_runs
    if not runs:
        if walk.skipped and not _plain_traces(root):  # a folder with traces of its own is read as such
            raise InputError(root, "log dir holds no trace: " + "; ".join(walk.skipped))
        return None
    ordered_by = _order(runs, single_pt_dir=len(walk.pt_files) == 1 and not walk.tf_runs)
    return LogDir(root, runs, ordered_by, walk.skipped, walk.notes, walk.left_out)


class _Walk:
    """One bounded walk of a log dir: TF run folders, PyTorch trace files by folder, and what was left out."""

    def __init__(self, root: Path, max_depth: int) -> None:
        self.max_depth = max_depth
        self.tf_runs: list[Run] = []
        self.pt_files: dict[Path, list[Path]] = defaultdict(list)
        self.skipped: list[str] = []
        self.notes: list[str] = []
        self.too_deep: list[str] = []
        self.left_out: list[str] = []
        for dirpath, dirnames, filenames in os.walk(root, onerror=lambda exc: self._unreadable(root, exc)):
            dirnames.sort()
            here = Path(dirpath)
            loops = [name for name in filenames if is_link_loop(here / name)]
            if loops:  # links that lead back to themselves: no file to read
                self.skipped.append(f"{len(loops)} symbolic link(s) that loop left out in folder "
                                    f"{_relative(root, here) or '.'}: {', '.join(sorted(loops)[:5])}")
                filenames = [name for name in filenames if name not in loops]
            if dirnames and len(here.relative_to(root).parts) >= max_depth:
                self.too_deep.append(_relative(root, here))
                dirnames[:] = []
            if _is_run_folder(here):
                run = _tf_run(root, here, sorted(filenames), self.skipped)
                if run is not None:
                    self.tf_runs.append(run)
                else:
                    self.left_out.append(_relative(root, here) or here.name)
                continue
            for name in sorted(filenames):
                if PT_TRACE.match(name):
                    self.pt_files[here].append(here / name)

    def _unreadable(self, root: Path, exc: OSError) -> None:
        where = _relative(root, Path(exc.filename)) if exc.filename else "?"
        self.skipped.append(f"folder {where or '.'}: cannot be read ({exc.strerror or exc}); any run in it is "
                            f"left out, so the run analysed may not be the newest")
        self.left_out.append(where or ".")


def _plain_traces(root: Path) -> bool:
    """Whether `root` holds trace or log files of its own (not links that loop): read as a plain folder."""
    try:
        return any(f.is_file() and f.name.endswith(TRACE_SUFFIXES + COUNTER_LOG_SUFFIXES) for f in root.iterdir())
    except OSError:
        return False


def select(logdir: LogDir, run: str | None, all_runs: bool) -> list[Run]:
    if all_runs:
        return list(logdir.runs)
    if run is not None:
        return [logdir.find(run)]
    return [logdir.runs[-1]]


def describe(logdir: LogDir, chosen: list[Run], all_runs: bool) -> list[str]:
    """Lines for the terminal: what was found, what was picked and how to pick another."""
    kinds = {TENSORFLOW: "TensorFlow/JAX profile run", PYTORCH: "PyTorch profiler span"}
    found = []
    for kind, label in kinds.items():
        runs = [r for r in logdir.runs if r.kind == kind]
        if runs:
            listed = ", ".join(f"{r.label} ({len(r.files)} {'file' if len(r.files) == 1 else 'files'})"
                               for r in runs)
            found.append(f"{len(runs)} {label}{'s' if len(runs) > 1 else ''}: {listed}")
    lines = [f"{logdir.root}: found " + "; ".join(found)]
    if all_runs:
        lines.append(f"reporting each of the {len(chosen)} runs (--all-runs)")
    elif len(logdir.runs) > 1:
        run = chosen[0]
        how = "as asked (--run)" if run is not logdir.runs[-1] else f"the newest by {logdir.ordered_by}"
        if run is logdir.runs[-1] and logdir.left_out:
            how += (f" among the runs that could be used ({len(logdir.left_out)} left out: "
                    f"{', '.join(logdir.left_out[:3])}; see 'skipped' below)")
        lines.append(f"analysing {run.label}, {how}: {', '.join(f.name for f in run.files)}"
                     f" (--run NAME picks another, --all-runs reports each)")
    else:
        how = (f", the only run that could be used ({len(logdir.left_out)} left out: "
               f"{', '.join(logdir.left_out[:3])}; see 'skipped' below)") if logdir.left_out else ""
        lines.append(f"analysing {chosen[0].label}{how}: {', '.join(f.name for f in chosen[0].files)}")
    lines.extend(f"skipped {s}" for s in logdir.skipped)
    lines.extend(f"note: {s}" for s in logdir.notes)
    return lines


def _is_run_folder(path: Path) -> bool:
    return path.parent.name == "profile" and path.parent.parent.name == "plugins"


def _tf_run(root: Path, folder: Path, filenames: list[str], skipped: list[str]) -> Run | None:
    """A TF/JAX run folder: one xplane (else trace JSON) per host; the rest is skipped."""
    by_host: dict[str, Path] = {}
    others: list[str] = []
    for name in filenames:
        if name.endswith(XPLANE_SUFFIX):
            by_host[name[: -len(XPLANE_SUFFIX)]] = folder / name
    for name in filenames:
        suffix = next((s for s in TF_TRACE_SUFFIXES if name.endswith(s)), None)
        if name.endswith(XPLANE_SUFFIX):
            continue
        if suffix and not PT_TRACE.match(name):
            host = name[: -len(suffix)]
            if host in by_host:
                others.append(f"{name} (same capture as {host}{XPLANE_SUFFIX}, which is read)")
            else:
                by_host[host] = folder / name
        else:
            others.append(name)
    label = _relative(root, folder) or folder.name
    if others:
        skipped.append(f"in {label}: " + ", ".join(others) + " (profiler tool outputs or copies, not traces)")
    if not by_host:
        skipped.append(f"run {label}: no <host>.xplane.pb or <host>.trace.json.gz in it")
        return None
    files = tuple(by_host[h] for h in sorted(by_host))
    m = RUN_FOLDER_TIME.match(folder.name)
    time_s = None
    if m:
        try:
            y, mo, d, h, mi, sec = (int(g) for g in m.groups())
            time_s = datetime(y, mo, d, h, mi, sec, tzinfo=timezone.utc).timestamp()
        except ValueError:
            time_s = None
    return Run(name=folder.name, label=label, kind=TENSORFLOW, files=files, time_s=time_s,
               mtime_s=_mtime(files), aliases=(label,))


def _pytorch_spans(root: Path, folder: Path, files: list[Path], notes: list[str]) -> list[Run]:
    """Match the workers' files by position in span-number order: span k = k-th file of each."""
    per_worker: dict[str, list[tuple[int, Path]]] = defaultdict(list)
    for f in files:
        m = PT_TRACE.match(f.name)
        assert m is not None
        per_worker[m.group("worker")].append((int(m.group("span")) if m.group("span") else -1, f))
    for spans in per_worker.values():
        spans.sort()
    counts = {w: len(s) for w, s in per_worker.items()}
    n_spans = max(counts.values())
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{w}: {c}" for w, c in sorted(counts.items()))
        notes.append(f"in {_relative(root, folder) or '.'} the workers have different numbers of spans "
                     f"({listed}); spans are matched by order")
    runs = []
    where = _relative(root, folder)
    for k in range(n_spans):
        members = [(w, spans[k]) for w, spans in sorted(per_worker.items()) if k < len(spans)]
        numbers = [num for _, (num, _) in members if num >= 0]
        paths = tuple(p for _, (_, p) in members)
        name = f"span{k + 1}"
        label = f"{where}/{name}" if where else name
        runs.append(Run(name=name, label=label, kind=PYTORCH, files=paths,
                        time_s=_span_time(numbers), mtime_s=_mtime(paths),
                        aliases=tuple(sorted({str(n) for n in numbers})), index=k))
    return runs


def _span_time(numbers: list[int]) -> float | None:
    """Span numbers tensorboard_trace_handler writes are epoch ms (older) or ns (newer)."""
    if not numbers:
        return None
    n = max(numbers)
    if n >= _EPOCH_NS_FLOOR:
        return n / 1e9
    if n >= _EPOCH_MS_FLOOR:
        return n / 1e3
    return None


def _order(runs: list[Run], single_pt_dir: bool) -> str:
    if all(r.time_s is not None for r in runs):
        runs.sort(key=lambda r: (r.time_s, r.label))
        return "run time (folder name / span number)"
    if single_pt_dir:
        runs.sort(key=lambda r: r.index)
        return "span number"
    runs.sort(key=lambda r: (r.mtime_s, r.label))
    return "file modification time"


def _mtime(files: tuple[Path, ...]) -> float:
    times = []
    for f in files:
        try:
            times.append(f.stat().st_mtime)
        except OSError:
            pass
    return max(times, default=0.0)


def _relative(root: Path, path: Path) -> str:
    """`path` relative to `root`; "" for the root itself."""
    try:
        rel = path.relative_to(root)
    except ValueError:
        return path.name
    return "" if str(rel) == "." else rel.as_posix()

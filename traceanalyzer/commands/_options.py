"""Option types and option groups shared by the subcommands (so `report` and `diff` read inputs alike)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..inert import terminal

# Other names of the renderers' extensions (`report.RENDERERS`: the formats and their own extensions).
SUFFIX_ALIASES = {".htm": ".html", ".markdown": ".md"}
TERMINAL = "text"  # the terminal summary: printed, not a --format choice


# Accepted ranges of the duration options (ns): wider than any real use, narrow enough that no
# arithmetic on them overflows int64 or silently collapses samples.
HOUR_NS = 3_600_000_000_000
MIN_GAP_RANGE_NS = (0, 24 * HOUR_NS)
DMON_OFFSET_RANGE_NS = (-366 * 24 * HOUR_NS, 366 * 24 * HOUR_NS)  # clock skew after the zone: < a year
DMON_INTERVAL_RANGE_NS = (1_000_000, HOUR_NS)  # nvidia-smi samples every 1 ms (-lms) to every hour
MAX_INPUT_RANGE_BYTES = (1, 2**50)  # 1 byte to 1 PiB
MAX_BATCH_SIZE = 10**12  # samples per step; larger would overflow the JSON report's 64-bit integers
MAX_JOBS = 4096  # worker processes


class DurationType(click.ParamType):
    """A duration with a unit (0, 50us, 1ms, 0.5s) -> integer nanoseconds, within [low, high]."""

    name = "DURATION"

    def __init__(self, low: int, high: int) -> None:
        self.low, self.high = low, high

    def convert(self, value, param, ctx):  # type: ignore[no-untyped-def]
        from ..units import OutOfRange, format_duration, parse_duration_ns

        if isinstance(value, int):
            return value
        try:
            ns = parse_duration_ns(value)
        except OutOfRange:
            ns = None
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if ns is None or not self.low <= ns <= self.high:
            low = format_duration(self.low) if self.low >= 0 else "-" + format_duration(-self.low)
            self.fail(f"{value!r} is out of range: accepted {low} to {format_duration(self.high)}", param, ctx)
        return ns


class SizeType(click.ParamType):
    """A size with a unit (B, KB, MB, GB, KiB, MiB, GiB) -> bytes."""

    name = "SIZE"

    def convert(self, value, param, ctx):  # type: ignore[no-untyped-def]
        from ..units import OutOfRange, parse_size_bytes

        if isinstance(value, int):
            return value
        try:
            size = parse_size_bytes(value)
        except OutOfRange:
            size = None
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        low, high = MAX_INPUT_RANGE_BYTES
        if size is None or not low <= size <= high:
            self.fail(f"{value!r} is out of range: accepted 1B to 1PiB", param, ctx)
        return size


class ParsedType(click.ParamType):
    """A value checked (and converted) by a parser that raises ValueError with the message to show."""

    def __init__(self, name: str, parse: Callable[[str], Any]) -> None:
        self.name = name
        self.parse = parse

    def convert(self, value, param, ctx):  # type: ignore[no-untyped-def]
        try:
            return self.parse(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def _zone(text: str) -> str:
    from ..align import parse_zone

    parse_zone(text)
    return text


def _start(text: str) -> tuple[int, str]:
    from ..units import parse_start

    return parse_start(text)


def _gpu(text: str) -> tuple[int, int]:
    from ..align import parse_gpu_map

    return parse_gpu_map([text])[0]


def analysis_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Options that change what the analysis of one job finds (-> pipeline.Options)."""
    decorators = [
        click.option("--min-gap", "min_gap_ns", type=DurationType(*MIN_GAP_RANGE_NS), default="100us",
                     show_default=True,
                     help="Shortest GPU idle stretch counted as a gap, with a unit: 0, 50us, 1ms, 0.5s."),
        click.option("--run", "run", metavar="NAME",
                     help="Log dirs: the run to analyse (TF run folder name, PyTorch span<k> or span "
                          "number). Default: the newest."),
        click.option("--max-input-size", "max_input_bytes", type=SizeType(), default="16GiB", show_default=True,
                     help="Refuse an input whose (decompressed) content is larger: a guard against "
                          "gzip bombs and runaway memory. Units: B, KB, MB, GB, KiB, MiB, GiB."),
        click.option("--force-job", is_flag=True,
                     help="Analyse several files as ranks of one job even when they look like unrelated runs "
                          "(different world sizes, GPU models, the same rank twice, no common time)."),
        click.option("--include-warmup", is_flag=True,
                     help="Keep slow leading steps (warm-up: at least 2x the median step) in the verdict; by "
                          "default they are shown but left out, with one-off start-up costs."),
        click.option("--dmon", "dmon", multiple=True, type=click.Path(path_type=Path),
                     help="nvidia-smi dmon / --query-gpu CSV / DCGM CSV log to put on the trace's clock "
                          "(repeatable). Default: such logs found beside the trace."),
        click.option("--dmon-tz", type=ParsedType("ZONE", _zone),
                     help="Time zone of the machine that wrote the log (Europe/Berlin, UTC, +05:30). "
                          "Default: this machine's zone, with an automatic search of all zones."),
        click.option("--dmon-offset", "dmon_offset_ns", type=DurationType(*DMON_OFFSET_RANGE_NS),
                     help="Clock skew of the log after its zone, e.g. -2s: log time + offset = trace time. "
                          "Default: found automatically."),
        click.option("--dmon-interval", "dmon_interval_ns", type=DurationType(*DMON_INTERVAL_RANGE_NS),
                     help="Sample period of a log without timestamps (nvidia-smi dmon -d, --query-gpu -l). "
                          "Default: 1s, said in a warning."),
        click.option("--dmon-start", type=ParsedType("DATETIME", _start),
                     help="Time of the first sample of a log without timestamps (or the date of a time-only "
                          "log), local time of the logging machine: '2024-01-04 13:54:35'."),
        click.option("--dmon-gpu", "dmon_gpu", multiple=True, type=ParsedType("DMON_INDEX=DEVICE", _gpu),
                     help="Log GPU index -> trace device, when CUDA_VISIBLE_DEVICES renumbered them "
                          "(repeatable)."),
        click.option("--host-log", "host_log", multiple=True, type=click.Path(path_type=Path),
                     help="glances export (glances --export csv --export-csv-file FILE) recorded during "
                          "training, put on the trace's clock like nvidia-smi logs (--dmon-tz, --dmon-offset); "
                          "tells a CPU-bound input pipeline from a storage-bound one (repeatable). Such files "
                          "among the inputs are recognised by content too."),
        click.option("--batch-size", "batch_size", type=click.IntRange(min=1, max=MAX_BATCH_SIZE), metavar="N",
                     help="Samples each rank takes per step (the DataLoader's batch_size): adds samples/s "
                          "overall and per step. Never guessed from the trace."),
    ]
    for decorate in reversed(decorators):
        fn = decorate(fn)
    return fn


def execution_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Options that change where and how fast the analysis runs, never what it finds."""
    decorators = [
        click.option("-j", "--jobs", "jobs", type=click.IntRange(min=1, max=MAX_JOBS), metavar="N",
                     help="Rank files read and analysed in N parallel processes. Default: the cores "
                          "(capped by the ranks; a job under 64 MB is read in one process)."),
        click.option("--scheduler", "scheduler", metavar="ADDRESS",
                     help="Run the per-rank tasks on a Dask cluster (e.g. tcp://10.0.0.5:8786); the "
                          "workers must see the input files at the same absolute paths. Needs "
                          "pip install 'traceanalyzer-ml[dask]'."),
        click.option("--no-cache", "no_cache", is_flag=True,
                     help="Neither use nor fill the cache of decoded big traces (in $TRACEANALYZER_CACHE_DIR, "
                          "else $XDG_CACHE_HOME/traceanalyzer or ~/.cache/traceanalyzer)."),
    ]
    for decorate in reversed(decorators):
        fn = decorate(fn)
    return fn


def _notify(line: str) -> None:
    """Lines about the inputs (a log dir's runs, the one picked) on stderr; names from the file system
    are made inert."""
    sys.stderr.write(f"traceanalyzer: {terminal(line)}\n")


def build_options(params: dict[str, Any], **callbacks: Any) -> Any:
    """pipeline.Options from the parsed analysis (and execution) options (pops them from `params`)."""
    from ..pipeline import Options

    callbacks.update(jobs=params.pop("jobs", None), scheduler=params.pop("scheduler", None),
                     cache=not params.pop("no_cache", False))
    callbacks.setdefault("notify", _notify)  # what a log dir holds and what was picked: on stderr
    return Options(
        min_gap_ns=params.pop("min_gap_ns"), run=params.pop("run"), max_input_bytes=params.pop("max_input_bytes"),
        include_warmup=params.pop("include_warmup"), force_job=params.pop("force_job"),
        counter_logs=tuple(params.pop("dmon")), dmon_interval_ns=params.pop("dmon_interval_ns"),
        dmon_start=params.pop("dmon_start"), dmon_tz=params.pop("dmon_tz"),
        dmon_offset_ns=params.pop("dmon_offset_ns"), dmon_gpu=tuple(params.pop("dmon_gpu")),
        host_logs=tuple(params.pop("host_log")), batch_size=params.pop("batch_size"), **callbacks)


def file_formats(renderers: dict[str, Any]) -> tuple[str, ...]:
    """The `--format` choices: every renderer of the registry but the terminal summary."""
    return tuple(name for name in renderers if name != TERMINAL)


def output_options_for(renderers: dict[str, Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Where and in which format a command writes its result: the `--format` choices are the registry's
    (`report.RENDERERS` for report, `report.DIFF_RENDERERS` for diff)."""
    return lambda fn: _output_options(fn, file_formats(renderers))


def _output_options(fn: Callable[..., Any], formats: tuple[str, ...]) -> Callable[..., Any]:
    decorators = [
        click.option("-o", "--output", type=click.Path(path_type=Path),
                     help="Where to write ('-' for standard output). Default: <first input's name>.<command>."
                          "<format> in the current directory."),
        click.option("--format", "fmt", type=click.Choice(list(formats)),
                     help="Output format. Default: from the --output extension, else html."),
        click.option("--force", is_flag=True, help="Overwrite the output file if it exists (never an input)."),
        click.option("-q", "--quiet", is_flag=True, help="Do not print the summary on the terminal."),
    ]
    for decorate in reversed(decorators):
        fn = decorate(fn)
    return fn


def output_format(output: Path | None, fmt: str | None, renderers: dict[str, Any]) -> str:
    """The format asked for, else the one whose renderer's extension the output's name ends with (the longest:
    `run.bmf.json` is BMF), else html."""
    from ..report.base import format_of

    if fmt:
        return fmt
    if not output or str(output) == "-":
        return "html"
    name = output.name
    for alias, suffix in SUFFIX_ALIASES.items():
        if name.lower().endswith(alias):
            name = name[: -len(alias)] + suffix
    found = format_of(name, renderers)
    return found if found is not None and found != TERMINAL else "html"


def extension(renderers: dict[str, Any], fmt: str) -> str:
    """The file extension a format writes (its renderer's)."""
    return str(renderers[fmt].extension)


def stem(path: Path) -> str:
    name = path.resolve().name if path.is_dir() else path.name
    for suffix in (".gz", ".json", ".pb"):
        name = name.removesuffix(suffix)
    return name or "trace"

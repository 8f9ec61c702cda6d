"""Command line: `traceanalyzer report TRACE...`. Thin: load -> analyze -> build report -> render.

Errors in the input print one line (`traceanalyzer: error: FILE: what was wrong`) and exit 2;
no Python traceback reaches the user unless TRACEANALYZER_DEBUG=1.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from . import __version__
from .errors import InputError, UsageError

if TYPE_CHECKING:
    from .align import Alignment, AlignOptions

FORMAT_BY_SUFFIX = {".html": "html", ".htm": "html", ".json": "json", ".md": "md", ".markdown": "md"}
SUFFIX_BY_FORMAT = {"html": "html", "json": "json", "md": "md"}


class DurationType(click.ParamType):
    name = "DURATION"

    def convert(self, value, param, ctx):  # type: ignore[no-untyped-def]
        from .units import parse_duration_ns

        if isinstance(value, int):
            return value
        try:
            ns = parse_duration_ns(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if ns < 0 and not self.signed:
            self.fail(f"{value!r} is negative; a gap length must be >= 0", param, ctx)
        return ns

    def __init__(self, signed: bool = False) -> None:
        self.signed = signed


class ParsedType(click.ParamType):
    """A value checked by a parser that raises ValueError with the message to show."""

    def __init__(self, name: str, parse) -> None:  # type: ignore[no-untyped-def]
        self.name = name
        self.parse = parse

    def convert(self, value, param, ctx):  # type: ignore[no-untyped-def]
        try:
            self.parse(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        return value


@dataclass(frozen=True)
class CounterOptions:
    logs: list[Path]
    interval_ns: int
    start: tuple[int, str] | None
    align: AlignOptions


def _parse_zone(text: str) -> None:
    from .align import parse_zone

    parse_zone(text)


def _parse_start(text: str) -> None:
    from .units import parse_start

    parse_start(text)


def _parse_gpu(text: str) -> None:
    from .align import parse_gpu_map

    parse_gpu_map([text])



class SizeType(click.ParamType):
    name = "SIZE"

    def convert(self, value, param, ctx):  # type: ignore[no-untyped-def]
        from .units import parse_size_bytes

        if isinstance(value, int):
            return value
        try:
            return parse_size_bytes(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="traceanalyzer")
def main() -> None:
    """Why is my training slow? Reads profiler traces and names the bottleneck.

    \b
    Start with:
      traceanalyzer report trace.json            # writes trace.report.html
      traceanalyzer report trace.json.gz -o r.md # Markdown for a PR comment
      traceanalyzer report LOGDIR --format json  # a TensorBoard log dir (its newest run)
      traceanalyzer report trace.json --dmon gpu.log  # add nvidia-smi dmon on the same clock
    """


@main.command("report")
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path),
              help="Where to write the report ('-' for standard output). Default: "
                   "<first input's name>.report.<format> in the current directory.")
@click.option("--format", "fmt", type=click.Choice(["html", "json", "md"]),
              help="Report format. Default: from the --output extension, else html.")
@click.option("--min-gap", "min_gap_ns", type=DurationType(), default="100us", show_default=True,
              help="Shortest GPU idle stretch counted as a gap, with a unit: 0, 50us, 1ms, 0.5s.")
@click.option("--run", "run", metavar="NAME",
              help="Log dirs: the run to analyse (TF run folder name, PyTorch span<k> or span "
                   "number). Default: the newest.")
@click.option("--all-runs", is_flag=True,
              help="Log dirs: one report per run, named <output>.<run>.<format>.")
@click.option("--max-input-size", "max_input_bytes", type=SizeType(), default="16GiB", show_default=True,
              help="Refuse an input whose (decompressed) content is larger: a guard against "
                   "gzip bombs and runaway memory. Units: B, KB, MB, GB, KiB, MiB, GiB.")
@click.option("--force", is_flag=True, help="Overwrite the output file if it exists.")
@click.option("-q", "--quiet", is_flag=True, help="Do not print the summary on the terminal.")
@click.option("--dmon", "dmon", multiple=True, type=click.Path(path_type=Path),
              help="nvidia-smi dmon / --query-gpu CSV / DCGM CSV log to put on the trace's clock "
                   "(repeatable). Default: such logs found beside the trace.")
@click.option("--dmon-tz", type=ParsedType("ZONE", _parse_zone),
              help="Time zone of the machine that wrote the log (Europe/Berlin, UTC, +05:30). "
                   "Default: this machine's zone, with an automatic search of all zones.")
@click.option("--dmon-offset", "dmon_offset_ns", type=DurationType(signed=True),
              help="Clock skew of the log after its zone, e.g. -2s: log time + offset = trace time. "
                   "Default: found automatically.")
@click.option("--dmon-interval", "dmon_interval_ns", type=DurationType(), default="1s", show_default=True,
              help="Sample period of a log without timestamps (nvidia-smi dmon -d).")
@click.option("--dmon-start", type=ParsedType("DATETIME", _parse_start),
              help="Time of the first sample of a log without timestamps (or the date of a time-only "
                   "log), local time of the logging machine: '2024-01-04 13:54:35'.")
@click.option("--dmon-gpu", "dmon_gpu", multiple=True, type=ParsedType("DMON_INDEX=DEVICE", _parse_gpu),
              help="Log GPU index -> trace device, when CUDA_VISIBLE_DEVICES renumbered them (repeatable).")
def report_command(traces: tuple[Path, ...], output: Path | None, fmt: str | None, min_gap_ns: int,
                   run: str | None, all_runs: bool, force: bool, quiet: bool, dmon: tuple[Path, ...],
                   dmon_tz: str | None, dmon_offset_ns: int | None, dmon_interval_ns: int,
                   dmon_start: str | None, dmon_gpu: tuple[str, ...], max_input_bytes: int) -> None:
    """Analyse TRACES and write a report.

    \b
    TRACES are torch.profiler / Kineto Chrome-trace files (.json or .json.gz), TensorFlow/JAX
    profiles (.xplane.pb, .trace.json.gz; detected by content), or directories. A TensorBoard
    log dir is searched for PyTorch <worker>.<span>.pt.trace.json files and TF/JAX
    plugins/profile/<run>/ folders; the newest run is analysed unless --run or --all-runs says
    otherwise. Any other directory = every trace file directly in it. Several files = several
    ranks of one job.

    \b
    The report gives, per rank and GPU: GPU busy and idle time over the window (the host's
    ProfilerStep span), idle gaps of at least --min-gap with the step they fall in, memcpy time
    by direction, DataLoader wait, per-step breakdown and top kernels. Every figure is defined
    in the report and in the README.

    \b
    The verdict names one bottleneck per rank (input_bound, memcpy_bound, launch_bound,
    sync_bound, host_bound, periodic_stall, communication_bound, gpu_bound or undetermined),
    gives every idle gap a cause from what the host was doing, and says what to change and
    how much GPU time that could win at most. Exit status: 0 ok, 2 bad input or usage.

    \b
    nvidia-smi logs (dmon text, --query-gpu CSV, DCGM CSV; named with --dmon, given among
    TRACES, or found beside the trace) are put on the trace's clock (automatically unless
    --dmon-offset is given) and add per-GPU utilisation, power and clock figures, idle runs
    and a cross-check with the trace. A log alone is reported on its own clock.
    """
    from .align import AlignOptions, parse_gpu_map
    from .units import parse_start

    counters = CounterOptions(list(dmon), dmon_interval_ns, parse_start(dmon_start) if dmon_start else None,
                              AlignOptions(dmon_tz, dmon_offset_ns, parse_gpu_map(dmon_gpu)))
    _run_guarded(lambda: _report(list(traces), output, fmt, min_gap_ns, force, quiet, run, all_runs, counters,
                                 max_input_bytes))


def _report(traces: list[Path], output: Path | None, fmt: str | None, min_gap_ns: int,
            force: bool, quiet: bool, run: str | None = None, all_runs: bool = False,
            counters: CounterOptions | None = None, max_input_bytes: int | None = None) -> None:
    from .align import AlignOptions, combine
    from .formats import ReadOptions, input_sets, load_counter_logs, load_set, split_counter_logs
    from .progress import Progress

    fmt = fmt or (FORMAT_BY_SUFFIX.get(output.suffix.lower()) if output and str(output) != "-" else None) or "html"
    base = output or Path.cwd() / f"{_stem(traces[0])}.report.{SUFFIX_BY_FORMAT[fmt]}"
    if all_runs and str(base) == "-":
        raise UsageError("--all-runs writes one file per run; give -o a file name, not '-'")
    progress = Progress(traces)
    counters = counters or CounterOptions([], 1_000_000_000, None, AlignOptions())
    options = ReadOptions(progress=progress.advance, run=run, dmon_interval_ns=counters.interval_ns,
                          dmon_start=counters.start)
    if max_input_bytes is not None:
        options.max_input_bytes = max_input_bytes
    sets = input_sets(traces, options, all_runs=all_runs)
    for inputs in sets:
        target = _run_target(base, inputs.label) if all_runs else base
        if str(target) != "-" and target.exists() and not force:
            raise UsageError(f"{target} exists; pass --force to overwrite it or -o to choose another file")
    try:
        for inputs in sets:
            target = _run_target(base, inputs.label) if all_runs else base
            split = split_counter_logs(inputs, counters.logs)
            trace = load_set(split.traces, options) if split.traces.files else None
            tl, alignments = combine(trace, load_counter_logs(split.logs, options), counters.align)
            _one_report(tl, target, fmt, min_gap_ns, quiet, progress,
                        CounterResult(alignments, trace is not None, split.found_beside))
    finally:
        progress.done()  # clears the progress line before an error message, too


def _run_target(base: Path, label: str) -> Path:
    """out.json + run 'train/plugins/profile/2026_11_22' -> out.train_plugins_profile_2026_11_22.json"""
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in label).strip("_") or "run"
    return base.with_name(f"{base.stem}.{safe}{base.suffix}")


@dataclass(frozen=True)
class CounterResult:
    alignments: tuple[Alignment, ...]
    aligned: bool  # the counters are on a trace's clock
    found_beside: list[Path]


def _one_report(tl, target: Path, fmt: str, min_gap_ns: int, quiet: bool, progress,  # type: ignore[no-untyped-def]
                counters: CounterResult | None = None) -> None:
    from .analyses.counters import counter_figures, trace_window
    from .analyses.summary import analyze
    from .diagnosis import diagnose
    from .report import RENDERERS
    from .report.build import build_report
    from .report.counters import add_counters
    from .report.diagnosis import diagnosis_section
    from .report.text import render_text

    to_stdout = str(target) == "-"
    try:
        progress.stage("analysing")
        analysis = analyze(tl, min_gap_ns=min_gap_ns)
        report = build_report(tl, analysis, extra={"diagnosis": diagnosis_section(diagnose(tl, analysis))})
        if counters is not None:
            report["warnings"].extend(f"nvidia-smi log found beside the trace and used: {p}"
                                      for p in counters.found_beside)
            window = trace_window(tl) if counters.aligned else None
            add_counters(report, tl, counter_figures(tl, window), counters.alignments, counters.aligned)
        progress.stage("rendering the report")
        data = RENDERERS[fmt](report)
    finally:
        progress.done()
    if to_stdout:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        try:
            target.write_bytes(data)
        except OSError as exc:
            raise UsageError(f"cannot write {target}: {exc.strerror or exc}") from None
    if not quiet:
        stream = sys.stderr if to_stdout else sys.stdout
        stream.write(render_text(report))
        if not to_stdout:
            stream.write(f"Report ({fmt}) written to {target}\n")


def _stem(path: Path) -> str:
    name = path.resolve().name if path.is_dir() else path.name
    for suffix in (".gz", ".json", ".pb"):
        name = name.removesuffix(suffix)
    return name or "trace"


def _run_guarded(fn) -> None:  # type: ignore[no-untyped-def]
    try:
        fn()
    except (InputError, UsageError) as exc:
        click.echo(f"traceanalyzer: error: {exc}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("traceanalyzer: interrupted", err=True)
        sys.exit(130)
    except MemoryError:
        click.echo("traceanalyzer: error: out of memory while analysing the input", err=True)
        sys.exit(3)
    except Exception as exc:  # a bug: one line, unless debugging
        if os.environ.get("TRACEANALYZER_DEBUG"):
            raise
        click.echo(f"traceanalyzer: internal error: {type(exc).__name__}: {exc} "
                   f"(set TRACEANALYZER_DEBUG=1 for a traceback, and please report it)", err=True)
        sys.exit(3)


if __name__ == "__main__":  # pragma: no cover
    main()

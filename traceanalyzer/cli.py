"""Command line: `traceanalyzer report TRACE...`. Thin: load -> analyze -> build report -> render.

Errors in the input print one line (`traceanalyzer: error: FILE: what was wrong`) and exit 2;
no Python traceback reaches the user unless TRACEANALYZER_DEBUG=1.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from . import __version__
from .errors import InputError, UsageError

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
        if ns < 0:
            self.fail(f"{value!r} is negative; a gap length must be >= 0", param, ctx)
        return ns


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="traceanalyzer")
def main() -> None:
    """Why is my training slow? Reads profiler traces and names the bottleneck.

    \b
    Start with:
      traceanalyzer report trace.json            # writes trace.report.html
      traceanalyzer report trace.json.gz -o r.md # Markdown for a PR comment
      traceanalyzer report LOGDIR --format json  # every trace in a directory, one rank each
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
@click.option("--force", is_flag=True, help="Overwrite the output file if it exists.")
@click.option("-q", "--quiet", is_flag=True, help="Do not print the summary on the terminal.")
def report_command(traces: tuple[Path, ...], output: Path | None, fmt: str | None, min_gap_ns: int,
                   force: bool, quiet: bool) -> None:
    """Analyse TRACES and write a report.

    \b
    TRACES are torch.profiler / Kineto Chrome-trace files (.json or .json.gz, detected by
    content) or directories of them (each file one rank). Several files = several ranks of one job.

    \b
    The report gives, per rank and GPU: GPU busy and idle time over the window (the host's
    ProfilerStep span), idle gaps of at least --min-gap with the step they fall in, memcpy time
    by direction, DataLoader wait, per-step breakdown and top kernels. Every figure is defined
    in the report and in the README. Exit status: 0 ok, 2 bad input or usage.
    """
    _run_guarded(lambda: _report(list(traces), output, fmt, min_gap_ns, force, quiet))


def _report(traces: list[Path], output: Path | None, fmt: str | None, min_gap_ns: int,
            force: bool, quiet: bool) -> None:
    from .analyses.summary import analyze
    from .formats import ReadOptions, load_paths
    from .progress import Progress
    from .report import RENDERERS
    from .report.build import build_report
    from .report.text import render_text

    fmt = fmt or (FORMAT_BY_SUFFIX.get(output.suffix.lower()) if output and str(output) != "-" else None) or "html"
    target = output or Path.cwd() / f"{_stem(traces[0])}.report.{SUFFIX_BY_FORMAT[fmt]}"
    to_stdout = str(target) == "-"
    if not to_stdout and target.exists() and not force:
        raise UsageError(f"{target} exists; pass --force to overwrite it or -o to choose another file")

    progress = Progress(traces)  # shown only on a terminal, for inputs over 100 MB
    try:
        tl = load_paths(traces, ReadOptions(progress=progress.advance))
        progress.stage("analysing")
        analysis = analyze(tl, min_gap_ns=min_gap_ns)
        progress.stage("rendering the report")
        report = build_report(tl, analysis)
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
        if name.endswith(suffix):
            name = name[: -len(suffix)]
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

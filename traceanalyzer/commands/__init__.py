"""The command line: one module per subcommand, each a thin shell over the library pipeline.

Every error a user can cause is a `TraceAnalyzerError`: printed as one line on stderr
(`traceanalyzer: error: FILE: what was wrong`) and exiting with its `exit_code`. Anything else is
a bug: one line, exit 3, and a traceback only with TRACEANALYZER_DEBUG=1. Messages quote file
names and trace text, so they pass through `inert.terminal` (no escape sequence reaches the
terminal, a newline in a name shows as `\\n` instead of starting a line).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from .. import __version__
from ..errors import EXIT_INTERNAL, TraceAnalyzerError
from ..inert import terminal


class _Group(click.Group):
    """Runs subcommands with the one error policy."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TraceAnalyzerError as exc:
            click.echo(f"traceanalyzer: error: {terminal(exc)}", err=True)
            sys.exit(exc.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            click.echo("traceanalyzer: interrupted", err=True)
            sys.exit(130)
        except MemoryError:
            click.echo("traceanalyzer: error: out of memory while analysing the input", err=True)
            sys.exit(EXIT_INTERNAL)
        except Exception as exc:  # a bug: one line, unless debugging
            if os.environ.get("TRACEANALYZER_DEBUG"):
                raise
            click.echo(f"traceanalyzer: internal error: {type(exc).__name__}: {terminal(exc)} "
                       f"(set TRACEANALYZER_DEBUG=1 for a traceback, and please report it)", err=True)
            sys.exit(EXIT_INTERNAL)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="traceanalyzer")
def main() -> None:
    """Why is my training slow? Reads profiler traces and names the bottleneck.

    \b
    Start with:
      traceanalyzer report trace.json            # writes trace.report.html
      traceanalyzer report trace.json.gz -o r.md # Markdown for a PR comment
      traceanalyzer report LOGDIR --format json  # a TensorBoard log dir (its newest run)
      traceanalyzer report trace.json --dmon gpu.log  # add nvidia-smi dmon on the same clock
      traceanalyzer diff base.report.json head.json.gz -o diff.md  # did a change slow training?

    \b
    Exit status: 0 ok, 1 a gate (--fail-on) failed, 2 bad input or usage,
    3 internal error (a bug: please report it).
    """


def _register() -> None:
    from .diff import diff_command
    from .report import report_command

    main.add_command(report_command)
    main.add_command(diff_command)


_register()

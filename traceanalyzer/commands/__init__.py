"""The command line: one module per subcommand, each a thin shell over the library pipeline.

Every error a user can cause is a `TraceAnalyzerError`: printed as one line on stderr
(`traceanalyzer: error: FILE: what was wrong`) and exiting with its `exit_code`. Option errors
are one line too (`traceanalyzer: error: ... (see traceanalyzer report --help)`), exit 2. Anything
else is a bug: one line, exit 3, and a traceback only with TRACEANALYZER_DEBUG=1. When the reader
of standard output goes away (`... -o - | head -c1`), the command stops quietly with exit 141
(128 + SIGPIPE, what a shell reports for a process ended by a closed pipe). Messages quote file
names and trace text, so they pass through `inert.terminal` (no escape sequence reaches the
terminal, a newline in a name shows as `\\n` instead of starting a line).
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

import click

from .._version import __version__
from ..errors import EXIT_BAD_INPUT, EXIT_INTERNAL, TraceAnalyzerError
from ..inert import terminal

EXIT_BROKEN_PIPE = 128 + 13  # 128 + SIGPIPE: the reader of standard output went away


def _error(line: str) -> None:
    click.echo(f"traceanalyzer: {terminal(line)}", err=True)


def _stdout_gone() -> None:
    """The reader of stdout went away: send whatever is still buffered to /dev/null (so the
    interpreter's final flush cannot print a second error), then exit quietly."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):
        pass
    sys.exit(EXIT_BROKEN_PIPE)


class _Group(click.Group):
    """Runs subcommands with the one error policy."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        """click's main, with every option error on one line (click prints usage text over several)."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        quiet = not os.environ.get("TRACEANALYZER_DEBUG")
        saved = os.environ.get("PYTHONWARNINGS")
        try:
            with warnings.catch_warnings():
                # Safety net only: warnings are prevented where they arise (np.errstate, guarded
                # divisions); one that slips through must not print a source path on stderr, from
                # this process or from the worker processes of --jobs (they read PYTHONWARNINGS).
                if quiet:
                    warnings.simplefilter("ignore")
                    os.environ["PYTHONWARNINGS"] = "ignore"
                code = super().main(args, prog_name or "traceanalyzer", complete_var, False, **extra)
            if sys.stdout is not None:
                sys.stdout.flush()
        except BrokenPipeError:
            _stdout_gone()
        except click.exceptions.UsageError as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # bare `traceanalyzer`: the help text
                exc.show()
                sys.exit(exc.exit_code)
            where = f" (see {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
            _error(f"error: {exc.format_message()}{where}")
            sys.exit(EXIT_BAD_INPUT)
        except click.ClickException as exc:
            _error(f"error: {exc.format_message()}")
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            _error("aborted")
            sys.exit(1)
        finally:
            if quiet:  # as it was (the command line may run inside another program, e.g. a test)
                if saved is None:
                    os.environ.pop("PYTHONWARNINGS", None)
                else:
                    os.environ["PYTHONWARNINGS"] = saved
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TraceAnalyzerError as exc:
            _error(f"error: {exc}")
            sys.exit(exc.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except BrokenPipeError:
            _stdout_gone()
        except KeyboardInterrupt:
            _error("interrupted")
            sys.exit(130)
        except MemoryError:
            _error("error: out of memory while analysing the input")
            sys.exit(EXIT_INTERNAL)
        except Exception as exc:  # a bug: one line, unless debugging
            if os.environ.get("TRACEANALYZER_DEBUG"):
                raise
            if isinstance(exc, OSError) and exc.filename is not None:  # a file or folder missing, unreadable
                _error(f"error: {exc.filename}: {exc.strerror or exc}")  # or unwritable: the input's, not a bug
                sys.exit(EXIT_BAD_INPUT)
            _error(f"internal error: {type(exc).__name__}: {exc} "
                   f"(set TRACEANALYZER_DEBUG=1 for a traceback, and please report it)")
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
      traceanalyzer whatif trace.json --remove 'enumerate(DataLoader)*'  # what would no data wait save?

    \b
    Exit status: 0 ok, 1 a gate (--fail-on) failed, 2 bad input or usage,
    3 internal error (a bug: please report it), 141 standard output closed by its reader.
    """


def _register() -> None:
    from .diff import diff_command
    from .mcp import mcp_command
    from .report import report_command
    from .serve import serve_command
    from .upload import upload_command
    from .whatif import whatif_command

    main.add_command(report_command)
    main.add_command(diff_command)
    main.add_command(serve_command)
    main.add_command(upload_command)
    main.add_command(mcp_command)
    main.add_command(whatif_command)


_register()

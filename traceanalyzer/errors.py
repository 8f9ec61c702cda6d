"""The error types the command line turns into one line on stderr and an exit code.

Exit codes: 0 ok, 1 a gate failed (`--fail-on`), 2 bad input or usage, 3 internal error (a bug).
"""

from __future__ import annotations

EXIT_GATE_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3


class TraceAnalyzerError(Exception):
    """Base of every error the CLI reports as one line; `exit_code` is the process exit status."""

    exit_code = EXIT_BAD_INPUT


class InputError(TraceAnalyzerError):
    """Bad input: names the file (and where in it) and what was expected. Exit code 2."""

    def __init__(self, path: object, message: str) -> None:
        message = message.strip()  # parsers' messages may end in a newline: the CLI prints one line
        super().__init__(f"{path}: {message}")
        self.path = str(path)
        self.message = message


class UsageError(TraceAnalyzerError):
    """A request the CLI cannot carry out (e.g. output exists without --force). Exit code 2."""


class GateFailed(TraceAnalyzerError):
    """A `--fail-on` rule tripped: the report was written, the job should fail. Exit code 1."""

    exit_code = EXIT_GATE_FAILED

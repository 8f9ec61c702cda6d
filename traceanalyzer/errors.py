"""The one error type the CLI turns into a single line on stderr and an exit code."""

from __future__ import annotations


class InputError(Exception):
    """Bad input: names the file (and where in it) and what was expected. Exit code 2."""

    exit_code = 2

    def __init__(self, path: object, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = str(path)
        self.message = message


class UsageError(Exception):
    """A request the CLI cannot carry out (e.g. output exists without --force). Exit code 2."""

    exit_code = 2

"""Formatting helpers shared by the text and Markdown renderers (and their sections): durations,
shares, one-line inert text for the terminal and for Markdown, Markdown tables."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable

from .. import inert
from ..units import format_us as fmt_us  # noqa: F401  (the renderers' name for it)

WIDTH = 80  # terminal lines
MAX_CELL_CHARS = 160  # a Markdown cell


def fmt_pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _clean(text: object) -> str:
    """One line of printable text: terminal escapes removed, other control characters shown escaped."""
    return " ".join(inert.terminal(text).split())


def _wrap(text: str, first: str, rest: str) -> list[str]:
    return textwrap.wrap(_clean(text), WIDTH, initial_indent=first, subsequent_indent=rest,
                         break_long_words=True, break_on_hyphens=False) or [first.rstrip()]


def _md(text: object, limit: int = MAX_CELL_CHARS) -> str:
    """Inline-safe, inert text: one line, cut to `limit` characters (see `inert.markdown`)."""
    return inert.markdown(text, limit)


def _table(header: list[str], rows: Iterable[list[str]], limit: int, total: int, what: str) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    shown = 0
    for row in rows:
        if shown >= limit:
            break
        out.append("| " + " | ".join(row) + " |")
        shown += 1
    if total > shown:
        out += ["", f"_{total - shown} more {what} not shown; see the HTML or JSON report._"]
    return out + [""]

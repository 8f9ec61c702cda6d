"""Renderers: an Analysis -> bytes of one output format. They format; they never compute.

Every renderer is chosen by name from `RENDERERS` (one signature: the typed result in, bytes out) and
says the extension of the file it writes; `render(analysis, name)` is the one entry point, used by
`Analysis.to_html` / `to_markdown` / `to_text` / `to_json` and by the command line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..result.types import AnalysisData
from .html import render_html
from .jsonout import render_json
from .markdown import render_markdown
from .text import render_text


@dataclass(frozen=True)
class Renderer:
    """One output format: its name, the extension of the files it writes and its function."""

    name: str
    extension: str
    render: Callable[[AnalysisData], bytes]

    def __call__(self, analysis: AnalysisData) -> bytes:
        return self.render(analysis)


def _encode(fn: Callable[[AnalysisData], str]) -> Callable[[AnalysisData], bytes]:
    return lambda analysis: fn(analysis).encode("utf-8")


RENDERERS: dict[str, Renderer] = {r.name: r for r in (
    Renderer("html", "html", _encode(render_html)),
    Renderer("json", "json", render_json),
    Renderer("md", "md", _encode(render_markdown)),
    Renderer("text", "txt", _encode(render_text)),  # the terminal summary
)}


def render(analysis: AnalysisData, fmt: str) -> bytes:
    """`fmt` is a name in `RENDERERS`: "html", "json", "md" or "text"."""
    return RENDERERS[fmt].render(analysis)


__all__ = ["RENDERERS", "Renderer", "render"]

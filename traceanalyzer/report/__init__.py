"""Renderers: an Analysis -> bytes of one output format. They format; they never compute.

Every renderer is chosen by name from `RENDERERS` (one signature: the typed result in, bytes out;
`base.Renderer`) and says the extension of the file it writes; `render(analysis, name)` is the one
entry point, used by `Analysis.to_html` / `to_markdown` / `to_text` / `to_json` and by the command
line. The diff of two runs has its own registry of the same shape (`diff.RENDERERS`).
"""

from __future__ import annotations

from ..result.types import AnalysisData
from .base import Renderer, encoded, registry
from .bmf import render_bmf
from .html import render_html
from .jsonout import render_json
from .markdown import render_markdown
from .text import render_text

RENDERERS: dict[str, Renderer[AnalysisData]] = registry(
    Renderer("html", "html", encoded(render_html)),
    Renderer("json", "json", render_json),
    Renderer("md", "md", encoded(render_markdown)),
    Renderer("text", "txt", encoded(render_text)),  # the terminal summary
    Renderer("bmf", "bmf.json", render_bmf),  # Bencher Metric Format, for benchmark trackers
)


def render(analysis: AnalysisData, fmt: str) -> bytes:
    """`fmt` is a name in `RENDERERS`: "html", "json", "md", "text" or "bmf"."""
    return RENDERERS[fmt].render(analysis)


__all__ = ["RENDERERS", "Renderer", "render"]

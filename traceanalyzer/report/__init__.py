"""Renderers: an Analysis -> bytes of one output format. They format; they never compute.

Every renderer is chosen by name from `RENDERERS` (one signature: the typed result in, bytes out;
`base.Renderer`) and says the extension of the file it writes; `render(analysis, name)` is the one
entry point, used by `Analysis.to_html` / `to_markdown` / `to_text` / `to_json` and by the command
line, whose `--format` choices and output suffixes are these names and extensions. The diff of two
runs has its own registry of the same shape (`DIFF_RENDERERS`, also `diff.RENDERERS`). Each entry
names its module, imported when it first renders (`base.lazy`): reading the registry costs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Renderer, lazy, registry

if TYPE_CHECKING:
    from ..compare import Comparison
    from ..result.types import AnalysisData

RENDERERS: dict[str, Renderer[AnalysisData]] = registry(
    Renderer("html", "html", lazy(".html", "render_html", text=True)),
    Renderer("json", "json", lazy(".jsonout", "render_json")),
    Renderer("md", "md", lazy(".markdown", "render_markdown", text=True)),
    Renderer("text", "txt", lazy(".text", "render_text", text=True)),  # the terminal summary
    Renderer("bmf", "bmf.json", lazy(".bmf", "render_bmf")),  # Bencher Metric Format, for benchmark trackers
)

DIFF_RENDERERS: dict[str, Renderer[Comparison]] = registry(
    Renderer("html", "html", lazy(".diff", "render_diff_html", text=True)),
    Renderer("json", "json", lazy(".diff", "render_diff_json")),
    Renderer("md", "md", lazy(".diff", "render_diff_markdown", text=True)),
    Renderer("text", "txt", lazy(".diff", "render_diff_text", text=True)),  # the terminal summary
)


def render(analysis: AnalysisData, fmt: str) -> bytes:
    """`fmt` is a name in `RENDERERS`: "html", "json", "md", "text" or "bmf"."""
    return RENDERERS[fmt].render(analysis)


__all__ = ["DIFF_RENDERERS", "RENDERERS", "Renderer", "render"]

"""Renderers: an Analysis -> bytes of one output format. They format; they never compute."""

from __future__ import annotations

from collections.abc import Callable

from ..result.types import AnalysisData as Analysis
from .html import render_html
from .jsonout import render_json
from .markdown import render_markdown


def _encode(fn: Callable[[Analysis], str]) -> Callable[[Analysis], bytes]:
    return lambda analysis: fn(analysis).encode("utf-8")


RENDERERS: dict[str, Callable[[Analysis], bytes]] = {
    "html": _encode(render_html),
    "json": render_json,
    "md": _encode(render_markdown),
}


def render(analysis: Analysis, fmt: str) -> bytes:
    """`fmt` is "html", "json" or "md"."""
    return RENDERERS[fmt](analysis)

"""Renderers: a Report (plain data) -> bytes of one output format. No computation here."""

from __future__ import annotations

from collections.abc import Callable

from .build import Report
from .html import render_html
from .jsonout import render_json
from .markdown import render_markdown


def _encode(fn: Callable[[Report], str]) -> Callable[[Report], bytes]:
    return lambda report: fn(report).encode("utf-8")


RENDERERS: dict[str, Callable[[Report], bytes]] = {
    "html": _encode(render_html),
    "json": render_json,
    "md": _encode(render_markdown),
}

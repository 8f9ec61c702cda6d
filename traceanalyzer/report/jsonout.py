"""Report -> JSON text (stable key order, so the same input gives the same bytes)."""

from __future__ import annotations

import orjson

from .build import Report


def render_json(report: Report) -> bytes:
    return orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY) + b"\n"

"""Analysis -> JSON text: the result's one serialization (`Analysis.to_data`), keys in a fixed order
(dataclass fields in declaration order, `schema` first; mappings sorted), so the same input gives the
same bytes and `traceanalyzer.load` reads it back."""

from __future__ import annotations

import orjson

from ..result import AnalysisData as Analysis


def render_json(analysis: Analysis) -> bytes:
    return orjson.dumps(analysis.to_data(), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"

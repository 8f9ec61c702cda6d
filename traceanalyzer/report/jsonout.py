"""Analysis -> JSON text: the result's one serialization (`Analysis.to_data`), keys in a fixed order
(dataclass fields in declaration order, `schema` first; mappings sorted), so the same input gives the
same bytes and `traceanalyzer.load` reads it back. Invisible and control characters inside strings
are written as escapes (`inert.json_text`): the same values, nothing raw for a terminal."""

from __future__ import annotations

import orjson

from .. import inert
from ..result.types import AnalysisData


def render_json(analysis: AnalysisData) -> bytes:
    data = orjson.dumps(analysis.to_data(), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
    return inert.json_text(data) + b"\n"

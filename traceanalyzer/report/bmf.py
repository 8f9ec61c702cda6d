"""Analysis -> Bencher Metric Format (BMF) JSON: the run's headline figures for a benchmark tracker.

BMF (https://bencher.dev/docs/reference/bencher-metric-format) is one JSON object
`{"<benchmark>": {"<measure>": {"value": v, "lower_value": lo, "upper_value": hi}}}`; `value` is
required, the bounds optional. One benchmark, `BENCHMARK`, holds one measure per figure the run has
(a figure the run lacks, e.g. GPU idle of a CPU-only capture, is left out, never written as 0). Each
measure is a metric of `result/metrics.py` under a name that carries its unit (docs/ci.md lists them
with their definitions). Numbers only: no string from a trace is written, so the output is inert by
construction.
"""

from __future__ import annotations

import orjson

from ..result.metrics import METRICS, value
from ..result.types import AnalysisData

BENCHMARK = "traceanalyzer"

# measure -> what it is: the run's metrics (result/metrics.py; docs/ci.md lists them, generated)
MEASURES = {m.bmf: m.definition for m in METRICS}


def _metric(v: float | None, low: float | None = None, high: float | None = None) -> dict[str, float] | None:
    if v is None:
        return None
    out = {"value": round(float(v), 6)}
    if low is not None and high is not None:
        out |= {"lower_value": round(float(low), 6), "upper_value": round(float(high), 6)}
    return out


def bmf_figures(a: AnalysisData) -> dict[str, dict[str, float]]:
    """The measures of one run: the run's metrics under their BMF names (a metric the run lacks left out)."""
    values = {m.bmf: _metric(value(m, a), *(m.bounds(a) if m.bounds else (None, None))) for m in METRICS}
    return {k: v for k, v in values.items() if v is not None}


def render_bmf(a: AnalysisData) -> bytes:
    return orjson.dumps({BENCHMARK: bmf_figures(a)}, option=orjson.OPT_INDENT_2) + b"\n"

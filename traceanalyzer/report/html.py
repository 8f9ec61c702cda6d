"""Analysis -> one self-contained HTML page through the jinja2 templates (autoescaped).

The page is offline and deterministic: its CSS and JS (our own, in `templates/`) are inlined,
the data the scripts draw is embedded once with `|tojson` in a `<script type="application/json">`
block and read with JSON.parse, and every string from a trace is either autoescaped by jinja2 or
set with `textContent` by the scripts. Control, bidi and zero-width characters in those strings
are shown as visible escapes (`\\u202e`): for every `{{ ... }}` of the templates by the
environment's `finalize`, and in the scripts' data by `page_data`, so a kernel name cannot
reorder or hide what the page shows. Nothing here computes a figure: the templates read the typed
result (`AnalysisData`) by attribute, `page_data` only selects what the scripts need from it, and the
cause / verdict vocabulary below is presentation.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, TypedDict, TypeVar

import jinja2
import markupsafe

from .. import inert
from ..causes import PALETTE, page_registry
from ..result.types import AnalysisData, GapBin, PlainData, to_data
from ..units import format_bytes, format_rules
from ._format import (
    WHOLE_LOG,
    critical_path_strip,
    critical_path_text,
    fmt_ns,
    fmt_pct,
    fmt_pct_change,
    fmt_pct_points,
    fmt_s,
    fmt_us,
    rank_label,
    requests_line,
    serving_line,
    step_source_text,
)
from .capture import no_gpu_text
from .ranks import straggler_sentence
from .verdict import finding_parts, share_basis, top_advice

# Labels and colours of causes and verdicts come from the one registry (traceanalyzer/causes.py).
CAUSES: dict[str, dict[str, str]] = page_registry()["causes"]
VERDICTS: dict[str, dict[str, str]] = page_registry()["verdicts"]
HOST_LANES: dict[str, str] = {
    "ops": "host ops", "dataloader": "DataLoader wait", "sync": "sync calls", "copy": "copy calls",
}
TOP_FINDINGS = 3  # shown in full on the first screen; the rest are folded
SERVING_BARS = 500  # serving iterations drawn in the chart (the first; the table lists every one the result keeps)
V = TypeVar("V")


@lru_cache(maxsize=1)
def _loader() -> jinja2.BaseLoader:
    try:
        return jinja2.PackageLoader("traceanalyzer.templates", ".")
    except (ImportError, ValueError):  # running from a source checkout that is not installed
        return jinja2.FileSystemLoader(Path(__file__).resolve().parents[2] / "templates")


@lru_cache(maxsize=1)
def template_env() -> jinja2.Environment:
    """The templates' environment (made once: its filters and globals never change)."""
    loader = _loader()
    env = jinja2.Environment(loader=loader, autoescape=True, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             finalize=_visible_text)
    env.filters["us"] = fmt_us
    env.filters["ns_dur"] = fmt_ns
    env.filters["pct"] = fmt_pct
    env.filters["pct_change"] = fmt_pct_change
    env.filters["pct_points"] = fmt_pct_points
    env.filters["seconds"] = fmt_s
    env.filters["rank_label"] = rank_label
    env.filters["no_gpu"] = no_gpu_text
    env.filters["nbytes"] = fmt_bytes
    env.filters["gib"] = format_bytes
    env.filters["rate"] = fmt_rate
    env.filters["code_spans"] = code_spans
    env.filters["step_source"] = step_source_text
    env.filters["serving_line"] = serving_line
    env.filters["requests_line"] = requests_line
    env.filters["critical_path"] = critical_path_text
    env.filters["critical_path_strip"] = critical_path_strip
    env.globals["straggler_sentence"] = straggler_sentence
    env.filters["visible"] = inert.visible
    env.filters["by_key"] = by_key
    env.policies["json.dumps_function"] = page_json
    env.globals["top_advice"] = top_advice
    env.globals["finding_parts"] = finding_parts
    env.globals["share_basis"] = share_basis
    return env


def page_json(data: Any, **kwargs: Any) -> str:
    """`|tojson`'s encoder: always valid JSON. JSON has no NaN or infinity (Python would write `NaN`,
    which JSON.parse refuses, so the page would draw nothing): such numbers are written as null, and
    counted in a warning on the `traceanalyzer` logger."""
    try:
        return json.dumps(data, allow_nan=False, **kwargs)
    except ValueError:
        pass
    count = [0]

    def finite(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            count[0] += 1
            return None
        if isinstance(value, dict):
            return {k: finite(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [finite(v) for v in value]
        return value

    text = json.dumps(finite(data), allow_nan=False, **kwargs)
    logging.getLogger("traceanalyzer").warning(
        "%d numbers in the page's data are not finite (NaN or infinity): written as null", count[0])
    return text


def _visible_text(value: object) -> object:
    """Every plain string a template prints, with invisible characters shown (`inert.visible`);
    markup we made ourselves (inlined CSS/JS, `tojson`, `code_spans`) is left as it is."""
    return inert.visible(value) if type(value) is str else value


def code_spans(text: str) -> markupsafe.Markup:
    """`a` -> <code>a</code> for our own definition texts; every piece is escaped first."""
    parts = str(text).split("`")
    if len(parts) % 2 == 0:  # unbalanced: show as written
        return markupsafe.escape(inert.visible(text))
    return markupsafe.Markup("").join(
        markupsafe.Markup("<code>%s</code>") % inert.visible(p) if i % 2 else markupsafe.escape(inert.visible(p))
        for i, p in enumerate(parts))


def asset(name: str) -> str:
    """The text of one of our own files in `templates/` (CSS, JS), to inline into a page."""
    return _loader().get_source(template_env(), name)[0]


def by_key(mapping: Mapping[str, V]) -> Iterable[tuple[str, V]]:
    """A mapping's items in the order of its keys: the order a saved report holds them in (`to_data`),
    so a result renders alike fresh and loaded back."""
    return sorted(mapping.items(), key=lambda kv: str(kv[0]))


def fmt_bytes(n: int | None) -> str:
    if n is None or n < 0:
        return "n/a"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def fmt_rate(bytes_per_s: float) -> str:
    """A byte rate for tables: 1.5 MiB/s (the units of `format_bytes`, per second)."""
    return f"{format_bytes(bytes_per_s)}/s"


class PageRank(TypedDict):
    label: str
    timeline: PlainData | None  # RankDrawing.timeline (None: saved without drawing)
    charts: PlainData  # RankDrawing.charts
    devices: list[PlainData]  # per device: its name and gap-length histogram


class PageData(TypedDict):
    """The data `report.js` reads (embedded once in the page with `|tojson`)."""

    min_gap_us: float
    causes: dict[str, dict[str, str]]
    palette: dict[str, str]
    host_lanes: dict[str, str]
    format: dict[str, object]  # units.format_rules(): how the page writes durations and shares
    ranks: list[PageRank]
    job_shift_us: list[float]


def _histogram(bins: tuple[GapBin, ...]) -> list[PlainData]:
    return [to_data(b) for b in bins]  # its JSON keys: from_us, to_us, count, total_us


def page_data(analysis: AnalysisData) -> PageData:
    """What the page's scripts draw: a selection of the result, nothing computed; its strings
    with invisible characters shown (the scripts set them with textContent or draw them)."""
    data = PageData(
        min_gap_us=analysis.options.min_gap_us,
        causes=CAUSES,
        palette=PALETTE,
        host_lanes=HOST_LANES,
        format=format_rules(),
        ranks=[PageRank(label=rank_label(r), timeline=r.drawing.timeline if r.drawing else None,
                        charts=(r.drawing.charts if r.drawing else None) or {},
                        devices=[{"device": d.device, "histogram": _histogram(d.gaps.histogram)} for d in r.devices])
               for r in analysis.ranks],
        # many ranks: where each rank's window starts on the job clock (the timelines share it)
        job_shift_us=list(analysis.job.timeline_shift_us) if analysis.job else [],
    )
    visible: PageData = inert.visible_data(data)
    return visible


# Definitions shown only when the report has what they define (the others are always shown).
_DEFINITION_SHOWN_WHEN: dict[str, Callable[[AnalysisData], bool]] = {
    "communication": lambda a: any(d.communication_us for r in a.ranks for d in r.devices),
    **dict.fromkeys(("counter_alignment", "counter_metrics", "zero_util_runs", "counter_cross_check"),
                    lambda a: bool(a.counters or a.counter_logs)),
    **dict.fromkeys(("job_clock", "collectives", "rank_communication", "stragglers"),
                    lambda a: a.job is not None),
    **dict.fromkeys(("memory", "memory_per_step"),
                    lambda a: any(r.host_memory or any(d.memory for d in r.devices) for r in a.ranks)),
    **dict.fromkeys(("host_metrics", "host_alignment", "during_dataloader_wait"), lambda a: bool(a.host_logs)),
    "input_split": lambda a: any(r.diagnosis and r.diagnosis.input_split for r in a.ranks),
    "critical_path": lambda a: any(r.critical_path is not None for r in a.ranks),
    "host_loop": lambda a: bool(a.ranks) and not any(r.devices for r in a.ranks),  # the host-loop section
}


def shown_definitions(analysis: AnalysisData) -> list[tuple[str, str]]:
    """The definitions of the figures this report shows, in the saved report's order."""
    return [(k, v) for k, v in by_key(analysis.definitions)
            if k not in _DEFINITION_SHOWN_WHEN or _DEFINITION_SHOWN_WHEN[k](analysis)]


def render_html(analysis: AnalysisData) -> str:
    return template_env().get_template("report.html.j2").render(
        report=analysis, diagnosis=analysis.diagnosis, page=page_data(analysis),
        definitions=shown_definitions(analysis),
        causes=CAUSES, verdicts=VERDICTS, palette=PALETTE, top_findings=TOP_FINDINGS, whole_log=WHOLE_LOG,
        serving_bars=SERVING_BARS,
        css=asset("report.css"), js=asset("report.js"),
    )

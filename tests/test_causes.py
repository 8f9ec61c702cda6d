"""The cause registry is the one vocabulary: attribution, rules, advice and renderers agree with it."""

from __future__ import annotations

import re
from pathlib import Path

from traceanalyzer import causes as C
from traceanalyzer.diagnosis import host as H
from traceanalyzer.diagnosis import rules as R
from traceanalyzer.diagnosis.advice import ADVICE
from traceanalyzer.report import html, markdown

ROOT = Path(__file__).resolve().parent.parent


def test_every_cause_leads_to_a_registered_verdict_with_advice():
    for cause in C.CAUSE_LIST:
        assert cause.verdict in C.VERDICT_BY_ID, cause
        assert re.fullmatch(r"#[0-9a-f]{6}", cause.color), cause
    for verdict in C.VERDICT_LIST:
        assert verdict.advice_key in ADVICE, verdict
        assert verdict.cause == "" or verdict.cause in C.CAUSE_BY_ID, verdict


def test_diagnosis_and_renderers_use_the_registry():
    assert H.CAUSES == C.CAUSES
    assert R.VERDICTS == C.VERDICTS
    assert set(R.TITLES) == set(C.VERDICT_BY_ID)
    assert html.CAUSES == {c.id: {"label": c.label, "color": c.color} for c in C.CAUSE_LIST}
    assert set(markdown.CAUSE_LABELS) == set(C.CAUSES)
    assert set(markdown.VERDICT_LABELS) >= set(C.VERDICTS)


def test_every_cause_the_attribution_can_assign_is_registered():
    source = (ROOT / "traceanalyzer" / "diagnosis" / "attribution.py").read_text()
    assigned = set(re.findall(r"_CAUSE_CODE\[H\.([A-Z_]+)\]", source))
    assert assigned, "the attribution assigns causes through _CAUSE_CODE[H.NAME]"
    assert {getattr(H, name) for name in assigned} <= set(C.CAUSES)


def test_report_script_reads_colours_from_the_page_data_only():
    script = (ROOT / "templates" / "report.js").read_text()
    assert "DATA.causes" in script
    # No cause colour is spelled out in the script: they come from the registry.
    for cause in C.CAUSE_LIST:
        assert cause.color not in script, cause.id

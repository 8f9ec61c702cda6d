"""One number per cause: the headline quotes the verdict cause's time lost over the window and its share
of it (docs/figures.md, "One number per cause"), and the top finding (the verdict's own), the Markdown, the
terminal summary and the notebook card quote the same two, written the same way. Every headline fits in
200 characters; the advice to try first is on every face; the notebook's repr lists every view."""

from __future__ import annotations

import inspect
import re

import pandas as pd
import pytest
from conftest import SAMPLES

import traceanalyzer as ta
from traceanalyzer.report._format import fmt_pct, fmt_us
from traceanalyzer.report.notebook import MORE, render_card_html
from traceanalyzer.report.verdict import top_advice, verdict_finding
from traceanalyzer.result import Analysis

SAMPLE_INPUTS = sorted(p for p in SAMPLES.iterdir() if p.name.endswith((".json", ".json.gz"))
                       and not p.name.endswith(".expected.json"))


def _plain(text: str) -> str:
    """Markdown / HTML text with its escapes undone, for a substring check."""
    text = re.sub(r"\\(.)", r"\1", text)
    for escaped, char in (("&#39;", "'"), ("&#x27;", "'"), ("&quot;", '"'), ("&amp;", "&")):
        text = text.replace(escaped, char)
    return text


@pytest.mark.parametrize("path", SAMPLE_INPUTS, ids=lambda p: p.name)
def test_the_verdicts_number_is_the_same_on_every_face(path):
    a = ta.analyze(path, ta.Options(find_logs_beside=False))
    d = a.diagnosis
    assert d is not None and 0 < len(d.headline) <= 200, d.headline
    f = verdict_finding(d)
    assert f is not None
    number = fmt_us(f.explains_us)
    share = fmt_pct(f.share_of_window if f.share_of_window is not None else f.share_of_idle)
    assert number in d.headline and share in d.headline, (number, share, d.headline)
    label = "of the window" if f.share_of_window is not None else "of step time"
    header = f"{number} {'busy' if f.id == 'gpu_bound' else 'lost'}, {share} {label}" \
        if f.share_of_window is not None else f"{number}, {share} {label}"
    md = _plain(a.to_markdown())
    assert d.headline in md and f"({header})" in md
    text = " ".join(a.to_text().split())
    assert " ".join(d.headline.split()) in text and f"- {header}" in text
    card = _plain(render_card_html(a))
    assert d.headline in card
    advice = top_advice(d)
    assert advice and advice in card and advice in md and f"Try first: {advice}" in text.replace("  ", " ")
    html = a.to_html()
    assert f'<span class="explains">{header.replace(", ", " · ")}</span>' in html


@pytest.mark.slow
def test_a_16_rank_jobs_headline_names_the_rank_in_200_characters(tmp_path):
    from test_stragglers import write_job

    a = ta.analyze(write_job(tmp_path, world=16, slow=11))
    d = a.diagnosis
    # the job waits for its late rank: the straggler leads the headline (issue 32), within 200 characters
    assert d is not None and len(d.headline) <= 200 and "rank 11 " in d.headline.lower(), d.headline
    f = verdict_finding(d)
    assert f is not None


def test_the_repr_lists_every_dataframe_view():
    views = [name for name, fn in inspect.getmembers(Analysis, inspect.isfunction)
             if not name.startswith("_") and inspect.signature(fn).return_annotation in (pd.DataFrame, "pd.DataFrame")]
    assert {"ops", "frames", "gaps", "steps"} <= set(views)
    assert all(f"a.{v}(" in MORE for v in views), (views, MORE)
    a = ta.analyze(SAMPLES / "input_bound.json")
    assert MORE in repr(a) and "Try first: " in repr(a) and len(repr(a)) < 2000


def test_dataframes_carry_the_pages_cause_labels():
    a = ta.analyze(SAMPLES / "host_bound.json")
    gaps, findings = a.gaps(), a.findings()
    assert set(gaps["cause_label"]) >= {"host compute"} or "host_compute" not in set(gaps["cause"])
    row = findings[findings["cause"] == "host_compute"].iloc[0]
    from traceanalyzer.causes import CAUSE_BY_ID

    assert row["cause_label"] == CAUSE_BY_ID["host_compute"].label
    assert (gaps["cause_label"] == gaps["cause"].map(lambda c: CAUSE_BY_ID[c].label)).all()


def test_a_long_why_leaves_the_headline_for_its_detail():
    """No GPU verdict and a long reason: the headline keeps its sentence within 200 characters, the reason
    and its share move to the detail, and the shares left match the percentages left."""
    from traceanalyzer.diagnosis.rules import RankVerdict, within_headline_max
    from traceanalyzer.diagnosis.wording import Quoted

    q = Quoted()
    host = f"Host loop waits for data {q.ns(40, 'data_wait_us', 100, 'step_time_us')} of its step time"
    why = f"GPU busy only {q.ns(3, 'gpu_busy_us', 100, 'window_us')} of the window: " + "x" * 150
    v = within_headline_max(RankVerdict("undetermined", "cpu_input_bound", why, f"{host} ({why}).", (), quoted=q))
    assert v.headline == host + "." and len(v.headline) <= 200
    assert v.quoted.shares == [("data_wait_us", "step_time_us")] and set(v.quoted.figures) == {"data_wait_us",
                                                                                                  "step_time_us"}
    assert v.quoted.detail.startswith(f"Why there is no GPU verdict: {why}.")
    short = RankVerdict("undetermined", None, "x", "Short (why).", ())
    assert within_headline_max(short) is short

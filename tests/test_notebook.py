"""The notebook face: a short repr, a small escaped HTML card, no prints from the library, DataFrame
views that say what they leave out."""

from __future__ import annotations

import dataclasses
import logging
import warnings
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import ROOT

import traceanalyzer as ta

SAMPLES = ROOT / "sample_traces"
SAMPLE_FILES = sorted(p for p in SAMPLES.glob("*.json*") if not p.name.endswith(".expected.json"))


@pytest.mark.parametrize("sample", SAMPLE_FILES, ids=[p.name for p in SAMPLE_FILES])
def test_repr_is_short_and_html_small(sample: Path):
    a = ta.analyze(sample)
    text = repr(a)
    assert len(text) < 2000, len(text)
    assert text.startswith("<traceanalyzer.Analysis: ") and "Headline: GPU idle" in text
    if a.diagnosis:
        assert f"({a.diagnosis.primary}): " in text and text.count("Verdict: ") == 1
    page = a._repr_html_()
    assert len(page.encode()) < 50_000
    assert "GPU idle" in page


def test_a_big_job_with_long_names_stays_short():
    a = ta.analyze(SAMPLES / "input_bound.json")
    rank = dataclasses.replace(a.ranks[0], input="x" * 10_000 + ".json")
    big = dataclasses.replace(a, ranks=(rank,) * 500)
    assert len(repr(big)) < 2000 and "... and 492 more rank(s)" in repr(big)
    assert len(big._repr_html_().encode()) < 50_000


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [k for k, _ in attrs]


def test_the_html_card_escapes_a_hostile_trace():
    a = ta.analyze(SAMPLES / "hostile_names.json")
    page = a._repr_html_()
    parser = _Tags()
    parser.feed(page)
    assert set(parser.tags) <= {"div", "table", "tr", "th", "td", "code"}
    assert set(parser.attrs) <= {"style", "class", "align", "colspan"}
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # the kernel name is shown, as text
    weird = dataclasses.replace(a.ranks[0], input="evil\u202e\x1b[31m<b>.json")
    page = dataclasses.replace(a, ranks=(weird,))._repr_html_()
    assert "\u202e" not in page and "\x1b" not in page and "<b>" not in page
    assert "\u202e" not in repr(dataclasses.replace(a, ranks=(weird,)))


def test_the_library_prints_nothing(capfd, caplog, tmp_path):
    """What a log dir holds and what was picked goes to the `traceanalyzer` logger, not to stderr
    (the command line prints it: tests/test_logdir*.py)."""
    logdir = tmp_path / "logdir"
    logdir.mkdir()
    for f in sorted((SAMPLES / "torch_cpu_logdir").iterdir())[:1]:
        (logdir / f.name).write_bytes(f.read_bytes())
    with caplog.at_level(logging.INFO, logger="traceanalyzer"):
        a = ta.analyze(logdir)
        repr(a), a._repr_html_(), a.steps(), a.gaps(), a.kernels(), a.findings(), a.devices()
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    assert any("found" in r.getMessage() for r in caplog.records)


def test_kernels_top_none_gives_every_row_the_result_holds():
    a = ta.analyze(SAMPLES / "launch_bound.json.gz")
    held = sum(len(d.kernel_table or d.top_kernels) for r in a.ranks for d in r.devices)
    assert len(a.kernels(top=None)) == held
    assert len(a.kernels()) == sum(len(d.top_kernels) for r in a.ranks for d in r.devices)
    assert len(a.kernels(top=1)) == sum(1 for r in a.ranks for d in r.devices if d.kernel_table or d.top_kernels)


def test_gaps_say_when_the_result_left_some_out():
    a = ta.analyze(SAMPLES / "input_bound.json")
    d = a.ranks[0].devices[0]
    cut = dataclasses.replace(d, gap_table=dataclasses.replace(d.gap_table, omitted=7))
    b = dataclasses.replace(a, ranks=(dataclasses.replace(a.ranks[0], devices=(cut,)),))
    with pytest.warns(UserWarning, match="7 shorter gaps"):
        b.gaps()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a.gaps()

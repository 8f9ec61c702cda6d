"""One report, one number for one thing (issue 45): every place the Markdown, the terminal summary and the
HTML page quote the GPU's idle time, its lost time, the verdict cause's lost time or the idle time in gaps of
at least --min-gap, under that thing's label, shows the JSON's figure for it; no duration equal to one of
them appears on the first screen without a label saying which it is. Names copied from the rendered
Markdown are the trace's (escapes and code spans, no invisible characters inserted); gap tables name their
rank (its number, or its file without one); no finding badge reads "0 us"; log tables say they cover the
whole log (a finding speaking of the job inside it says "over the job"). Over every sample and every corpus
report: under each label that names one figure with its definition (idle of the window, lost in all, lost in
steady state, ...), the Markdown and the HTML text show one value; the Markdown holds no invisible character."""

from __future__ import annotations

import html as htmllib
import json
import re

import cmarkgfm
import pytest
from cmarkgfm.cmark import Options as CmarkOptions
from conftest import SAMPLES

import traceanalyzer as ta
from traceanalyzer.report._format import WHOLE_LOG, fmt_us
from traceanalyzer.report.verdict import verdict_finding

DUR = r"(?<![\d.,])\d[\d,]*(?:\.\d+)? (?:us|ms|s)\b"
# The first screen's durations, by what they are. Each pattern's group `v` is a duration under that label.
LABELS = {
    "idle": [rf"GPU idle (?P<v>{DUR})(?! busy)"],  # not the tile "GPU idle" over "15.5 ms busy"
    "lost": [rf"(?P<v>{DUR}) of GPU time lost in all", rf"of the (?P<v>{DUR}) lost\b"],
    "cause_lost": [rf"loses (?P<v>{DUR})", rf"(?<!of the )(?P<v>{DUR}) lost\b", rf"(?P<v>{DUR}) of it ",
                   rf"(?P<v>{DUR}) of GPU time \("],
    "gaps": [rf"idle gaps ≥ 100 us:? (?P<v>{DUR}) in total", rf"GPU idle gaps of 100 us or more: \d+, total (?P<v>{DUR})"],
}
# The steady-state sentence of the headline's detail speaks per steady step (medians): its figures are no
# capture totals, and test_the_steady_state_sentence_... checks it never reads as a second total.
STEADY = re.compile(r"The verdict weighs steady state[^.]*\.(?: [^.]*lost is spent[^.]*\.)?")


def gfm(md: str) -> str:
    return cmarkgfm.github_flavored_markdown_to_html(md, options=CmarkOptions.CMARK_OPT_UNSAFE)


def page_text(page: str, tables: bool = True) -> str:
    """What a reader sees of an HTML page: scripts, styles and tags dropped, entities read, spaces collapsed;
    without its tables when `tables` is false (a cell's label is its column: test_rank_tables_...)."""
    page = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S)
    if not tables:
        page = re.sub(r"<table\b.*?</table>", " ", page, flags=re.S)
    return " ".join(htmllib.unescape(re.sub(r"<[^>]+>", " ", page)).split())


@pytest.fixture(scope="module")
def sample():
    a = ta.analyze(SAMPLES / "input_bound.json", ta.Options(find_logs_beside=False))
    md = a.to_markdown()
    faces = {"markdown": page_text(gfm(md), tables=False), "text": " ".join(a.to_text().split()),
             "html": page_text(a.to_html(), tables=False)}
    return a, md, faces


def figures(a) -> dict[str, str]:
    """The JSON's figures for the four things, written as every face writes a duration."""
    data = json.loads(a.to_json())
    rank = data["ranks"][0]
    d = rank["diagnosis"]
    return {"idle": fmt_us(d["idle_us"]), "lost": fmt_us(d["lost_us"]),
            "cause_lost": fmt_us(verdict_finding(a.diagnosis).explains_us),
            "gaps": fmt_us(rank["devices"][0]["gaps"]["total_us"])}


def test_the_sample_has_four_different_figures(sample):
    a, _, _ = sample
    shown = figures(a)
    assert shown == {"idle": "34.5 ms", "lost": "35.0 ms", "cause_lost": "33.5 ms", "gaps": "34.2 ms"}


@pytest.mark.parametrize("face", ["markdown", "text", "html"])
def test_every_labelled_duration_is_the_json_figure(sample, face):
    a, _, faces = sample
    text = STEADY.sub(" ", faces[face])
    want = figures(a)
    labelled: set[tuple[int, int]] = set()
    seen = {k: 0 for k in LABELS}
    for what, patterns in LABELS.items():
        for pattern in patterns:
            for m in re.finditer(pattern, text):
                assert m.group("v") == want[what], f"{face}: {what} reads {m.group('v')} in {m.group(0)!r}"
                labelled.add(m.span("v"))
                seen[what] += 1
    assert seen["cause_lost"], seen  # every face quotes the headline's number
    assert (seen["gaps"] or face == "markdown") and (seen["lost"] or face == "text"), seen  # (else in tables only)
    # a duration equal to one of the four, but under no label: which of them it is cannot be told
    for m in re.finditer(DUR, text):
        if m.group(0) in want.values():
            assert m.span() in labelled, (
                f"{face}: {m.group(0)} without a label: ...{text[max(m.start() - 80, 0):m.end() + 40]}...")


def test_rank_tables_label_their_columns(sample):
    a, md, faces = sample
    want = figures(a)
    header = next(line for line in md.splitlines() if line.startswith("| rank | device | window"))
    row = md.splitlines()[md.splitlines().index(header) + 2]
    cells = {k.strip(): v.strip() for k, v in zip(header.strip("|").split("|"), row.strip("|").split("|"))}
    gaps = json.loads(a.to_json())["ranks"][0]["devices"][0]["gaps"]
    assert cells["idle gaps ≥ 100 us"].strip() == f"{gaps['count']} ({want['gaps']})"
    assert cells["GPU time lost"].strip() == want["lost"]
    page = page_text(a.to_html())
    assert "idle gaps ≥ 100 us largest gap GPU time lost" in page
    assert f"{gaps['count']} · {want['gaps']} 6.8 ms {want['lost']} Input bound" in page


def test_the_steady_state_sentence_quotes_no_second_lost_time(sample):
    a, _, faces = sample
    want = figures(a)
    m = re.search(rf"there (?P<v>{DUR}) of the ({DUR}) lost(?: in steady state)? is spent", faces["markdown"])
    assert m is None or m.group("v") == want["cause_lost"]
    assert "per steady step" in faces["markdown"]  # medians are said per step, never times the steps


def test_copied_names_are_the_trace_s(sample):
    a, md, _ = sample
    assert "&#8203;" not in md and "\u200b" not in md
    rendered = page_text(gfm(md))
    data = json.loads(a.to_json())
    names = [o["name"] for o in data["ranks"][0]["operators"]["ops"]] + [data["ranks"][0]["input"].rsplit("/", 1)[-1]]
    names += [e["name"] for g in data["ranks"][0]["diagnosis"]["gaps"] for e in g["evidence"]]
    assert "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__" in names
    for name in names:
        assert name in rendered, f"{name!r} is not in the rendered Markdown as written"


def test_gap_tables_name_the_rank(sample):
    a, md, faces = sample
    section = md.split("### Longest idle gaps")[1].split("<details>")[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]
    assert rows and all(line.startswith("| input\\_bound.json | cuda:0 |") for line in rows)
    for text in (md, *faces.values(), page_text(a.to_html())):
        assert "rank ?" not in text and "| ? |" not in text


@pytest.mark.parametrize("log", [SAMPLES / "dmon" / "idle_runs.log"], ids=lambda p: p.name)
def test_log_reports_label_the_span_of_each_figure(log):
    a = ta.analyze(log, ta.Options(find_logs_beside=False))
    md, text, page = a.to_markdown(), a.to_text(), page_text(a.to_html())
    for face in (md, text, page):
        assert WHOLE_LOG in face
        assert "0 us" not in re.sub(r"\d0 us", "", face)  # no badge or figure of no time
    # the table's figures are the result's, written as percentages and durations, under "over the whole log"
    gpu0 = json.loads(a.to_json())["counters"][0]
    assert gpu0["metrics"]["sm_util_pct"]["mean"] == 34.75 and gpu0["zero_util_runs"]["longest_s"] == 12.0
    assert "| 0 | 34.8% | n/a | 4 | 12.00 s from +12.00 s | n/a |" in md
    assert "0 40 34.8% n/a 4 12.00 s n/a" in page and "34.75" not in page
    assert "GPU 0 (log): SM util mean 34.8% over the whole log (40 samples)" in text
    # the findings speak of the job (the idle tail set apart), and say so
    assert "SM utilisation mean 40.9% over the job" in md


def test_a_finding_that_lost_no_time_has_no_time_badge():
    from traceanalyzer.report.verdict import finding_parts
    from traceanalyzer.result.types import FindingResult

    f = FindingResult(id="gpu_underused", cause=None, title="GPU 0 is underused", severity="medium",
                      explains_us=0.0, share_of_idle=0.711, evidence=(), advice=(), share_of_window=0.711)
    assert finding_parts(f, "samples") == ["71.1% of samples"]
    assert finding_parts(f, "GPU time lost") == ["71.1% of the window"]
    timed = FindingResult(id="input_bound", cause="dataloader", title="t", severity="high", explains_us=33500.0,
                          share_of_idle=0.96, evidence=(), advice=(), share_of_window=0.67)
    assert finding_parts(timed, "GPU time lost") == ["33.5 ms lost", "67.0% of the window"]


# --- every sample and corpus report: one value under one label --------------------------------------------
# Labels that name one figure of a report, each with its definition in its words: the GPU's idle time over
# the window, the time lost over the window ("in all") and in steady state (warm-up and start-up set apart),
# per steady step, the verdict's own, the window, the median step and the idle gaps of at least --min-gap.
# Two figures that differ by definition are told apart by their labels; under one label, one value.
ONE_VALUE = {
    "GPU idle of the window": [rf"GPU idle (?P<v>{DUR}) of the"],
    "GPU time lost in all": [rf"(?P<v>{DUR}) of GPU time lost in all", rf"of the (?P<v>{DUR}) lost\b(?! in steady)"],
    "lost in steady state": [rf"of the (?P<v>{DUR}) lost in steady state"],
    "lost each steady step": [rf"of the (?P<v>{DUR}) of GPU time lost each step"],
    "the verdict's lost time": [rf"loses (?P<v>{DUR})"],
    "window": [rf"of the (?P<v>{DUR}) window"],
    "median step": [rf"median step \**(?P<v>{DUR})"],
    "idle gaps of at least --min-gap": [rf"idle gaps ≥ 100 us:? (?P<v>{DUR}) in total"],
}
INVISIBLE = ("\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "&#8203;", "&#x200b;")


def one_value_breaches(a) -> list[str]:
    """Each label under which the Markdown or the HTML page's text shows two different values, and any
    invisible character in the Markdown (a name must copy back as the trace wrote it: escaped, not split)."""
    md = a.to_markdown()
    out = [f"invisible {c!r} in the Markdown" for c in INVISIBLE if c in md]
    for face, text in (("markdown", page_text(gfm(md))), ("html", page_text(a.to_html()))):
        for label, patterns in ONE_VALUE.items():
            values = {m.group("v") for p in patterns for m in re.finditer(p, text)}
            if len(values) > 1:
                out.append(f"{face}: {label!r} reads {sorted(values)}")
    return out


ALL_SAMPLES = sorted(p for p in SAMPLES.iterdir() if p.name.endswith((".json", ".json.gz", ".pftrace"))
                     and not p.name.endswith(".expected.json")) + [SAMPLES / "dmon" / "idle_runs.log"]


@pytest.mark.parametrize("path", ALL_SAMPLES, ids=lambda p: p.name)
def test_every_sample_report_has_one_value_under_each_label(path):
    a = ta.analyze(path, ta.Options(find_logs_beside=False))
    assert one_value_breaches(a) == []


def test_a_label_with_two_values_is_found():
    a = ta.analyze(SAMPLES / "input_bound.json", ta.Options(find_logs_beside=False))
    md = a.to_markdown() + "\nGPU idle 34.6 ms of the 50.0 ms window, said twice.\n"

    class Twisted:  # the report with its figure said again, otherwise, and a name split by a zero-width space
        def to_markdown(self) -> str:
            return md.replace("input\\_bound.json", "input\u200b\\_bound.json", 1)

        def to_html(self) -> str:
            return a.to_html()

    assert one_value_breaches(Twisted()) == ["invisible '\\u200b' in the Markdown",
                                            "markdown: 'GPU idle of the window' reads ['34.5 ms', '34.6 ms']"]


@pytest.mark.slow
def test_every_corpus_report_has_one_value_under_each_label():
    """Every file of the corpus's manifest that the tool reads (the rest are refused with one line)."""
    import csv

    from conftest import corpus_path

    from traceanalyzer.errors import TraceAnalyzerError

    corpus = corpus_path()
    with open(corpus / "MANIFEST.tsv", encoding="utf-8") as fh:
        files = sorted({f for row in csv.DictReader(fh, delimiter="\t") for f in row["file"].split(";")})
    read, breaches = 0, {}
    for name in files:
        try:
            a = ta.analyze(corpus / name, ta.Options(find_logs_beside=False, jobs=1))
        except TraceAnalyzerError:
            continue
        read += 1
        if found := one_value_breaches(a):
            breaches[name] = found
    assert read >= 40 and breaches == {}

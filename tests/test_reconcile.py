"""Every share a headline or a finding quotes is recomputed from the figures saved beside it.

Each headline and finding carries, per percentage in its text (a finding: title, then evidence lines),
the keys of the figures that percentage is of (`shares`: numerator, denominator; "" when the figure
is a fraction already, "%" when it is measured in percent). This test parses every "N%" of the saved
JSON and checks it equals numerator / denominator to the digits written, on every sample (fast) and
every corpus input (slow); then the known cases: a headline's share is of the figures it shows.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import CORPUS, SAMPLES
from kineto_builder import KinetoTrace

import traceanalyzer as ta

PERCENT = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)%")
SAMPLE_INPUTS = sorted(p for p in SAMPLES.iterdir() if p.name.endswith((".json", ".json.gz"))
                       and not p.name.endswith(".expected.json")) + [
    sorted((SAMPLES / "torch_cpu_logdir").glob("worker0.*"))[0], SAMPLES / "dmon" / "idle_runs.log"]


def _corpus_inputs() -> list[Path]:
    if not CORPUS.is_dir():
        return []
    return sorted(f for f in CORPUS.rglob("*") if f.is_file() and f.name.endswith((".json", ".json.gz", ".pb",
                                                                                      ".log", ".csv", ".txt")))


def _check(text: str, figures: dict[str, float], shares: list[list[str]], where: str) -> int:
    """Every percentage of `text` against its (numerator, denominator); returns how many were checked."""
    quoted = PERCENT.findall(text)
    assert len(quoted) == len(shares), f"{where}: {len(quoted)} percentages, {len(shares)} shares: {text!r}"
    for written, (num, den) in zip(quoted, shares):
        if den == "%":
            value = figures[num]
        elif den == "":
            value = 100 * figures[num]
        else:
            assert figures[den] > 0, f"{where}: {den} is {figures[den]}"
            value = 100 * figures[num] / figures[den]
        digits = len(written.split(".")[1]) if "." in written else 0
        assert abs(float(written) - value) <= 0.5 * 10 ** -digits + 1e-9, \
            f"{where}: {written}% written, {num}/{den or 'fraction'} gives {value:.4f}% in {text!r}"
    return len(quoted)


def _diagnoses(data: dict) -> list[tuple[str, dict]]:
    out = [("job", data["diagnosis"])] if data.get("diagnosis") else []
    return out + [(f"rank {i}", r["diagnosis"]) for i, r in enumerate(data["ranks"]) if r.get("diagnosis")]


def reconcile(data: dict) -> int:
    """Check every headline and finding of a report's JSON data; returns the number of shares checked."""
    n = 0
    for where, d in _diagnoses(data):
        n += _check(d["headline"], d["headline_figures"], d["headline_shares"], f"{where} headline")
        for f in d["findings"]:
            text = " ".join([f["title"], *f["evidence"]])
            n += _check(text, f["figures"], f["shares"], f"{where} finding {f['id']}")
    return n


def _analysed(path: Path) -> dict | None:
    try:
        return ta.analyze(path, ta.Options(find_logs_beside=False)).to_data()
    except ta.InputError:
        return None  # not a trace (summaries, look-alikes)


@pytest.mark.parametrize("path", SAMPLE_INPUTS, ids=lambda p: p.name)
def test_every_quoted_share_of_the_samples_reconciles(path):
    data = _analysed(path)
    assert data is not None
    assert reconcile(data) > 0  # every sample's headline quotes at least one share


@pytest.mark.slow
@pytest.mark.parametrize("path", _corpus_inputs(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_quoted_share_of_the_corpus_reconciles(path, corpus):
    data = _analysed(path)
    if data is not None:
        reconcile(data)


def test_a_wrong_share_is_caught():
    """The check fails on a share that does not equal its figures (it is not a test that cannot fail)."""
    with pytest.raises(AssertionError, match="60% written"):
        _check("60% of that idle time", {"a_us": 79.3, "b_us": 245.0}, [["a_us", "b_us"]], "x")
    with pytest.raises(AssertionError, match="percentages"):
        _check("32% of 245 ms, 10% more", {"a_us": 79.3, "b_us": 245.0}, [["a_us", "b_us"]], "x")
    assert _check("32% of that idle time", {"a_us": 79.3, "b_us": 245.0}, [["a_us", "b_us"]], "x") == 1


def _warmup_then_host_work(tmp_path: Path) -> Path:
    """A first (warm-up) step with a long GPU gap no host activity explains, then 8 steps that each lose
    4 ms to host work (PostProcess) between two kernels. Over the whole window host work is about
    two thirds of the idle time; in steady state, what the verdict counts, nearly all of it."""
    t = KinetoTrace()
    t.step(0, 0, 20_000)
    t.kernel(0, 5_000)
    for i in range(1, 9):
        s = 20_000 + (i - 1) * 10_000
        t.step(i, s, 10_000)
        t.kernel(s, 3_000)
        t.host("PostProcess", s + 3_000, 4_000)
        t.kernel(s + 7_000, 3_000)
    return t.write(tmp_path / "t.json")


def test_headline_share_is_of_the_figures_it_shows(tmp_path):
    """The headline quotes the verdict cause's one number: the GPU time it lost over the whole window (its
    finding's) and that as a share of the window; the steady-state figures the verdict weighed are in the
    headline's detail, as durations."""
    a = ta.analyze(_warmup_then_host_work(tmp_path))
    d = a.diagnosis
    r = a.ranks[0].diagnosis
    assert d.primary == "host_bound" and r.warmup_steps == (0,)
    assert reconcile(a.to_data()) >= 1
    f = d.headline_figures
    ((num, den),) = d.headline_shares
    assert (f[num], f[den]) == (32_000.0, 100_000.0) == (r.idle_by_cause_us["host_compute"], r.window_us)
    assert d.headline == "The GPU loses 32.0 ms (32.0% of the 100.0 ms window) in host work between GPU launches."
    assert d.findings[0].id == "host_bound" and d.findings[0].explains_us == 32_000.0 and d.verdict_note is None
    # the derivation: idle and lost time, then what the verdict weighed (warm-up set apart), durations only
    assert d.headline_detail.startswith("GPU idle 47.0 ms of the 100.0 ms window: 47.0 ms of GPU time lost in all")
    # the steady state per steady step (medians): 7 steady steps, each losing 4.0 ms to host work
    assert "first 1 warm-up step set apart" in d.headline_detail
    assert "per steady step, 4.0 ms of the 4.0 ms of GPU time lost each step" in d.headline_detail
    assert "%" not in d.headline_detail


def test_headline_share_of_idle_when_the_verdict_counts_the_window(tmp_path):
    """Without warm-up or per-step medians, the verdict weighs the whole window, and the detail says so."""
    t = KinetoTrace()
    for i in range(6):
        t.kernel(i * 7_000, 3_000)
        if i < 5:
            t.host("PostProcess", i * 7_000 + 3_000, 4_000)
    a = ta.analyze(t.write(tmp_path / "t.json"))
    d = a.diagnosis
    assert d.headline == "The GPU loses 20.0 ms (52.6% of the 38.0 ms window) in host work between GPU launches."
    assert d.headline_detail.endswith("The verdict weighs the whole window, each cause by the time it lost.")
    # job and rank: headline; finding: window, lost, the projected saving (of the step), one host op, and what
    # removing that host op (PostProcess) would save
    assert reconcile(a.to_data()) == 2 * (1 + 5)


def test_the_page_says_why_the_verdict_is_not_the_top_finding(tmp_path, monkeypatch):
    """Each step loses 5 ms with no traced host activity and 4 ms to host work: the top finding is the
    unexplained idle time, the verdict host_bound (an explained cause within 1.5x of it): one sentence says
    why, under the headline on the page, in the Markdown and in the terminal summary."""
    import jinja2

    from traceanalyzer.report import html as H

    t = KinetoTrace()
    for i in range(6):
        s = i * 12_000
        t.step(i, s, 12_000)
        t.kernel(s, 1_000)
        t.kernel(s + 6_000, 1_000)  # 5 ms before it: nothing on the host
        t.host("PostProcess", s + 7_000, 4_000)
        t.kernel(s + 11_000, 1_000)
    a = ta.analyze(t.write(tmp_path / "t.json"))
    d = a.diagnosis
    assert d.primary == "host_bound" and d.findings[0].id == "unexplained_idle"
    assert d.verdict_note is not None and d.verdict_note.startswith(
        "The top finding (unexplained idle) is not the verdict because unexplained idle time names nothing to "
        "change, and an explained cause loses nearly as much")
    assert reconcile(a.to_data()) > 0
    monkeypatch.setattr(H, "_loader", lambda: jinja2.FileSystemLoader(str(SAMPLES.parent / "templates")))
    H.template_env.cache_clear()
    try:
        assert f'<p class="verdict-note">{d.verdict_note}</p>' in H.render_html(a)
    finally:
        H.template_env.cache_clear()
    assert "The top finding (unexplained idle) is not the verdict" in a.to_markdown()


def test_a_medium_start_up_finding_does_not_say_it_dominates(tmp_path):
    """Start-up that loses a medium share of the window is a finding titled for its severity."""
    t = KinetoTrace()
    for i in range(8):
        t.step(i, i * 2_000, 2_000)
    t.runtime("cudaStreamCreate", 0, 1_500)  # a start-up call covering the first gap
    t.kernel(1_600, 400)
    for i in range(1, 8):
        t.kernel(i * 2_000, 1_900)
    a = ta.analyze(t.write(tmp_path / "t.json"))
    startup = [f for f in a.diagnosis.findings if f.id == "startup_dominated"]
    assert startup and startup[0].severity == "medium", [(f.id, f.severity) for f in a.diagnosis.findings]
    assert startup[0].title == "One-off start-up costs take a noticeable share of this capture"
    assert all("dominate" not in f.title for f in a.diagnosis.findings if f.severity != "high")

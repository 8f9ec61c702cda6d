"""CPU-only captures (no GPU listed, no GPU activity) as their own case: the host loop's step time split
into DataLoader wait, optimizer, named annotations, model ops and elsewhere (totals and per step), the
host loop's own verdicts (cpu_input_bound / cpu_compute_bound, never a GPU verdict's name), and a page
without GPU sections or the all-grey GPU chart (checked in headless Chromium, with a screenshot)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import jinja2
import pytest
from click.testing import CliRunner
from conftest import ROOT, SAMPLES
from kineto_builder import KinetoTrace
from test_browser_report import ARTIFACTS, browser, open_report  # noqa: F401  (browser: the Chromium fixture)

import traceanalyzer as ta
from traceanalyzer.causes import HOST_BOUND, INPUT_BOUND, VERDICT_OF_CAUSE, VERDICTS
from traceanalyzer.commands import main
from traceanalyzer.gates import parse_rule
from traceanalyzer.report import html as H

STEP_US = 10_000


def _cpu_trace(listed: bool = False) -> KinetoTrace:
    """4 steps of 10 ms: DataLoader 1 ms, forward ops 3 ms (an aten op nested in another), an optimizer
    step of 1 ms holding an aten op, a `postprocess` range of 4 ms holding an aten op, 1 ms of nothing."""
    t = KinetoTrace()
    if not listed:
        t.header.pop("deviceProperties")
    for i in range(4):
        s = 1_000 + i * STEP_US
        t.step(i, s, STEP_US, gpu_copy=False)
        t.dataloader(s, 1_000)
        t.host("aten::linear", s + 1_000, 3_000).host("aten::addmm", s + 1_500, 2_000)
        t.host("Optimizer.step#SGD.step", s + 4_000, 1_000, cat="user_annotation").host("aten::add_", s + 4_100, 500)
        t.host("postprocess", s + 5_000, 4_000 + 100 * i, cat="user_annotation")
        t.host("aten::copy_", s + 5_500, 1_000)
    return t


def test_host_loop_breakdown_of_a_built_capture(tmp_path):
    a = ta.analyze(_cpu_trace().write(tmp_path / "cpu.json"))
    r = a.ranks[0]
    hs = r.diagnosis.host_shares
    assert not r.devices and a.summary.devices == 0
    # each part claims what the earlier ones left: ops inside the optimizer and postprocess ranges are theirs
    assert (hs.data_wait_us, hs.model_ops_us, hs.optimizer_us, hs.annotations_us) == (4_000, 12_000, 4_000, 16_600)
    assert hs.other_us == 40_000 - 4_000 - 12_000 - 4_000 - 16_600 == 3_400 and hs.total_us == 40_000
    assert hs.steps == 4 and [p.step for p in hs.per_step] == [0, 1, 2, 3]
    assert [p.annotations_us for p in hs.per_step] == [4_000, 4_100, 4_200, 4_300]
    assert [p.other_us for p in hs.per_step] == [1_000, 900, 800, 700]
    assert all(p.data_wait_us + p.optimizer_us + p.annotations_us + p.model_ops_us + p.other_us == STEP_US
               for p in hs.per_step)
    assert [(x.name, x.time_us, x.share) for x in hs.top_annotations] == [("postprocess", 16_600, 0.415)]
    d = a.diagnosis
    # its own verdict: no GPU verdict reused with another meaning
    assert d.primary == d.host_primary == "cpu_compute_bound"
    assert d.headline == ("Host loop busy in its own work, 41.5% of its step time in named annotations (postprocess "
                          "42%): 16.6 ms of 40.0 ms over 4 steps (a CPU-only capture).")
    assert d.headline_detail.startswith("The host loop's 40.0 ms of step time over 4 steps: 16.6 ms in named "
                                        "annotations, 12.0 ms in model ops, 4.0 ms waiting for data, 4.0 ms in the "
                                        "optimizer and 3.4 ms outside any traced op.")
    top = d.findings[0]
    assert top.id == "cpu_annotation" and top.title == "The host loop is busy in postprocess"
    assert top.evidence[:2] == ("16.6 ms of 40.0 ms of step time over 4 steps (42%); 4.2 ms per step",
                                "postprocess: 16.6 ms (42% of step time)")
    assert top.figures["annotations_per_step_us"] == 4_150
    assert [f.id for f in d.findings] == ["cpu_annotation", "cpu_compute_bound", "cpu_input_bound", "cpu_optimizer",
                                          "cpu_elsewhere"]
    assert all(f.advice for f in d.findings)
    assert d.verdict_note is None  # every part but the data wait is the loop's own work


def test_input_bound_loop_and_gpus_listed_but_silent(tmp_path):
    t = KinetoTrace()
    t.header.pop("deviceProperties")
    for i in range(4):
        s = 1_000 + i * STEP_US
        t.step(i, s, STEP_US, gpu_copy=False)
        t.dataloader(s, 3_000).host("aten::linear", s + 3_000, 6_000)
    d = ta.analyze(t.write(tmp_path / "in.json")).diagnosis
    assert d.primary == "cpu_input_bound" and d.findings[0].id == "cpu_compute_bound"
    assert d.verdict_note == ("The largest part of the step (model ops) is not the verdict because a loop that waits "
                              "for data 20% or more of its step time is input-bound: faster input shortens every "
                              "step first.")
    # a GPU listed and none active is not a CPU-only capture: the GPU verdict is undetermined, the host
    # loop's verdict stands beside it under its own name
    listed = ta.analyze(_cpu_trace(listed=True).write(tmp_path / "listed.json")).diagnosis
    assert listed.primary == "undetermined" and listed.host_primary == "cpu_compute_bound"


def test_cpu_verdicts_are_their_own():
    for v in ("cpu_input_bound", "cpu_compute_bound"):
        assert v in VERDICTS and v not in VERDICT_OF_CAUSE.values()
        assert parse_rule(f"verdict={v}").value == v
    assert {INPUT_BOUND, HOST_BOUND} <= set(VERDICT_OF_CAUSE.values())  # the GPU meanings stay the GPU's
    helptext = CliRunner().invoke(main, ["report", "--help"]).output
    for v in VERDICTS:
        assert v in helptext


def _hand_count(path: Path, name: str) -> float:
    """`name`'s time inside the steps / the steps' time, from the raw events (what a user counts by hand)."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    inside = sum(max(0.0, min(e["ts"] + e["dur"], hi) - max(e["ts"], lo))
                 for e in events if e.get("name") == name and e.get("ph") == "X" for lo, hi in steps)
    return inside / sum(hi - lo for lo, hi in steps)


def test_real_postprocess_capture_names_its_annotation():
    path = SAMPLES / "torch_cpu_host_bound.json.gz"
    a = ta.analyze(path)
    d = a.diagnosis
    assert d.primary == "cpu_compute_bound"
    top = d.findings[0]
    assert top.id == "cpu_annotation" and "postprocess" in top.title
    hs = a.ranks[0].diagnosis.host_shares
    assert hs.top_annotations[0].name == "postprocess"
    assert hs.top_annotations[0].share == pytest.approx(_hand_count(path, "postprocess"), abs=0.05)
    assert hs.annotations_us / hs.total_us > 0.85


def _use_this_checkout_templates(monkeypatch):
    """Render with this checkout's templates (an editable install may point at another checkout's)."""
    monkeypatch.setattr(H, "_loader", lambda: jinja2.FileSystemLoader(str(ROOT / "templates")))
    H.template_env.cache_clear()


def test_markdown_and_page_have_no_gpu_sections(tmp_path, monkeypatch):
    _use_this_checkout_templates(monkeypatch)
    a = ta.analyze(_cpu_trace().write(tmp_path / "cpu.json"))
    md = a.to_markdown()
    assert "### Host loop" in md and "| named annotations | 16.6 ms | 41.5% | 4.2 ms |" in md
    assert "GPU busy" not in md and "GPU idle" not in md and "Top kernels" not in md
    page = H.render_html(a)
    for gone in ('id="gaps"', 'id="memcpy"', 'id="kernels"', 'class="chart stepchart"', "GPU idle</div>",
                 'id="ranks"'):
        assert gone not in page, gone
    assert 'id="hostloop"' in page and "<code>postprocess</code>" in page
    H.template_env.cache_clear()


@pytest.mark.slow
@pytest.mark.parametrize("which", ["sample", "corpus"])
def test_cpu_only_page_in_browser(which, browser, tmp_path, monkeypatch, request):  # noqa: F811
    _use_this_checkout_templates(monkeypatch)
    if which == "sample":
        path = SAMPLES / "torch_cpu_host_bound.json.gz"
    else:
        path = request.getfixturevalue("corpus") / "hta_cpu_only" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
    a = ta.analyze(path)
    # the corpus rank's step holds no traced op (HOST_UNTRACED_MAX_SHARE): no host verdict, the same page
    assert a.diagnosis.primary in (("cpu_compute_bound", "cpu_input_bound") if which == "sample" else ("undetermined",))
    html_path = tmp_path / "cpu.html"
    html_path.write_text(H.render_html(a), encoding="utf-8")
    page, errors, refused, dialogs = open_report(browser, html_path)
    try:
        for gone in ("#gaps", "#memcpy", "#kernels", "#ranks", ".stepchart", ".histchart"):
            assert page.locator(gone).count() == 0, gone
        assert "GPU idle" not in page.locator("#figures").text_content()
        loop = page.locator("#hostloop")
        assert loop.bounding_box()["height"] > 100
        rows = loop.locator("table.hostloop-table tbody tr")
        assert rows.count() == 6  # five parts and the step time
        hs = a.ranks[0].diagnosis.host_shares
        bars = loop.locator("svg rect[class^=part-]")
        assert bars.count() == sum(1 for p in hs.per_step for v in (p.data_wait_us, p.optimizer_us,
                                                                      p.annotations_us, p.model_ops_us, p.other_us)
                                   if v > 0)
        assert loop.locator("svg").bounding_box()["width"] > 300
        assert page.locator(".tl canvas").count() == 1  # the host timeline stays
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"report-cpu-only-{which}.png"), full_page=True)
    finally:
        page.close()
        H.template_env.cache_clear()
    assert errors == [] and refused == [] and dialogs == []


@pytest.mark.slow
def test_corpus_cpu_only_capture_names_what_other_threads_ran(corpus):
    """HTA's CPU-only rank of a gloo job: its loop thread runs no traced op in the step, while two gloo
    worker threads run all_reduce ranges. By hand from the raw events: their union inside the step is
    548353.3 -> 727130.7 us (the 3553 and 3554 ranges that start in it), 178777.4 us of the 210109.2 us step."""
    a = ta.analyze(corpus / "hta_cpu_only" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    d = a.diagnosis
    # the whole step is outside any traced op (HOST_UNTRACED_MAX_SHARE): no host-loop verdict of its own
    assert d.primary == "undetermined" and d.findings[0].id == "cpu_elsewhere"
    assert "outside any traced op 100" in d.headline
    hs = a.ranks[0].diagnosis.host_shares
    assert hs.other_us == hs.total_us == pytest.approx(210_109.162, abs=0.01)
    (other,) = hs.elsewhere_others
    assert other.name == "gloo:all_reduce" and other.time_us == pytest.approx(178_777.4, abs=0.1)
    assert "meanwhile on another thread: gloo:all_reduce for 178.8 ms (85% of step time)" in d.findings[0].evidence


def test_gpu_advice_only_without_a_listed_gpu(tmp_path):
    """'Move the model to a GPU' is advice for a capture without any GPU, never for one whose header lists
    GPUs that recorded nothing (a capture cut before its GPU events)."""
    def compute_advice(listed: bool) -> tuple[str, ...]:
        t = _cpu_trace(listed)
        d = ta.analyze(t.write(tmp_path / f"{listed}.json")).diagnosis
        return next(f.advice for f in d.findings if f.id == "cpu_compute_bound")

    assert any("move the model and batches to it" in a for a in compute_advice(listed=False))
    assert not any("GPU" in a for a in compute_advice(listed=True))

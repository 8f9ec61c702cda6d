"""`traceanalyzer diff` and `--fail-on` gates on pairs with known answers built in code.

Each trace: steps of (DataLoader wait + 700 us of kernels), the wait given per scenario, with a
small deterministic jitter so step times vary as real ones do.
"""

from __future__ import annotations

import json
from pathlib import Path

import cmarkgfm
import numpy as np
import pytest
from click.testing import CliRunner
from kineto_builder import KinetoTrace
from test_browser_report import browser as browser  # noqa: F401  (the fixture: a real Chromium)
from test_browser_report import open_report

import traceanalyzer as ta
from traceanalyzer.commands import main
from traceanalyzer.compare import compare, normalise_kernel
from traceanalyzer.report.diff import STICKY_MARKER, render_diff_html, render_diff_markdown


def training(path: Path, steps: int = 10, wait_us: float = 100.0, seed: int = 0, kernel_us: float = 100.0,
             kernel: str = "void gemm_kernel<float, 128>(float*, int)") -> Path:
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    t = KinetoTrace()
    ts = 0.0
    for i in range(steps):
        wait = wait_us * (1 + 0.01 * rng.standard_normal())
        k = kernel_us * (1 + 0.01 * rng.standard_normal())
        dur = wait + 7 * k + 20
        t.step(i + 1, ts, dur).dataloader(ts, wait)
        for j in range(7):
            t.launched(ts + wait + j * k - 8, 5, ts + wait + j * k + 10, k * 0.98, kernel)
        ts += dur
    return t.write(path)


def run(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, list(args))
    return res.exit_code, res.output


def test_same_run_twice_is_unchanged(tmp_path):
    a = training(tmp_path / "a.json", seed=1)
    b = training(tmp_path / "b.json", seed=2)  # the same job captured again: only jitter differs
    c = compare(ta.analyze(a), ta.analyze(b))
    assert c.change_verdict == "unchanged"
    assert c.step_time.base_steps == c.step_time.head_steps == 10
    assert -0.02 <= c.step_time.ci_low <= c.step_time.change <= c.step_time.ci_high <= 0.02
    assert c.headline.startswith("Unchanged: step time") and c.title.startswith("Unchanged")


def test_added_dataloader_wait_is_a_regression_carried_by_the_dataloader(tmp_path):
    base = training(tmp_path / "base.json", wait_us=40, seed=1)
    head = training(tmp_path / "head.json", wait_us=540, seed=2)  # +500 us of waiting per step
    c = compare(ta.analyze(base), ta.analyze(head))
    assert c.change_verdict == "regressed"
    # base step ~ 40 + 700 + 20 = 760 us, head ~ 1260 us
    assert c.step_time.change == pytest.approx(500 / 760, rel=0.05)
    assert c.step_time.ci_low > 0.5
    top = c.attribution[0]
    assert top.cause == "idle:dataloader"
    assert top.delta_per_step_us == pytest.approx(500, rel=0.05)
    assert top.share_of_change == pytest.approx(1.0, abs=0.05)
    # the parts add up to the change of the mean step
    assert sum(p.delta_per_step_us for p in c.attribution) == pytest.approx(c.mean_step_change_us, abs=0.01)
    # two lines: the verdict with the size, then the part that carries it; the detail below
    assert c.title == f"Regressed: HEAD is {c.step_time.change * 100:.1f}% slower per step"
    assert c.lead.startswith("GPU idle: DataLoader wait +") and "decisive" in c.lead
    assert c.headline == f"{c.title}. {c.lead}."
    assert (c.base.primary, c.head.primary) == ("gpu_bound", "input_bound") and c.verdict_changed
    assert "Verdict changed gpu_bound → input_bound" in c.detail


def test_fewer_than_three_steps_is_inconclusive(tmp_path):
    base = training(tmp_path / "base.json", steps=2)
    head = training(tmp_path / "head.json", steps=10, wait_us=900)
    c = compare(ta.analyze(base), ta.analyze(head))
    assert c.change_verdict == "inconclusive"
    assert c.step_time.ci_low is None and c.step_time.base_steps == 2
    assert "too few steps" in c.title and c.warnings


def test_faster_head_is_an_improvement(tmp_path):
    base = training(tmp_path / "base.json", kernel_us=150, seed=3)
    head = training(tmp_path / "head.json", kernel_us=100, seed=4)
    c = compare(ta.analyze(base), ta.analyze(head))
    assert c.change_verdict == "improved"
    assert c.attribution[0].cause == "gpu_compute" and c.attribution[0].delta_per_step_us < 0


def test_kernel_names_are_normalised():
    assert normalise_kernel("void gemm_kernel<float, 128>(float*, int)") == "void gemm_kernel"
    assert normalise_kernel("void at::native::f<at::native::g<float>, 4>(int)") == "void at::native::f"
    assert normalise_kernel("sm90_xmma_gemm_128x256_0x7f3a2b") == normalise_kernel("sm90_xmma_gemm_128x256_0x55aa")
    assert normalise_kernel("ncclKernel_AllReduce_RING_LL_Sum_float") == "ncclKernel_AllReduce_RING_LL_Sum_float"


def test_new_and_vanished_kernels(tmp_path):
    base = training(tmp_path / "base.json", kernel="volta_sgemm_128x64_nn")
    head = training(tmp_path / "head.json", kernel="void cutlass::Kernel<cutlass_80_tensorop_s1688gemm>(Params)")
    moves = {k.name: k.status for k in compare(ta.analyze(base), ta.analyze(head)).kernels}
    assert moves == {"volta_sgemm_128x64_nn": "vanished", "void cutlass::Kernel": "new"}


def test_saved_json_report_is_the_same_side_as_its_trace(tmp_path):
    base = training(tmp_path / "base.json", wait_us=100, seed=1)
    head = training(tmp_path / "head.json", wait_us=400, seed=2)
    assert run("report", str(base), "-o", str(tmp_path / "base.report.json"), "-q")[0] == 0
    code, _ = run("diff", str(base), str(head), "-o", str(tmp_path / "from_trace.json"), "-q")
    assert code == 0
    code, _ = run("diff", str(tmp_path / "base.report.json"), str(head), "-o", str(tmp_path / "from_json.json"), "-q")
    assert code == 0
    a = json.loads((tmp_path / "from_trace.json").read_text())
    b = json.loads((tmp_path / "from_json.json").read_text())
    assert b["base"].pop("inputs") == ["base.report.json (saved report of base.json)"]
    assert a["base"].pop("inputs") == ["base.json"]
    assert a == b  # every figure and word but the base's name
    assert a["schema"] == "traceanalyzer-diff/1" and a["change_verdict"] == "regressed"
    for key in ("base_median_us", "head_median_us", "change", "ci_low", "ci_high"):
        assert key in a["step_time"]
    assert a["attribution"][0]["cause"] == "idle:dataloader" and "delta_per_step_us" in a["attribution"][0]
    assert a["base"]["primary"] and a["head"]["inputs"] == ["head.json"]


def test_gates_on_diff(tmp_path):
    base = training(tmp_path / "base.json", wait_us=100, seed=1)
    head = training(tmp_path / "head.json", wait_us=600, seed=2)  # +500 us a step: beyond run-to-run variation
    out = tmp_path / "d.md"
    code, output = run("diff", str(base), str(head), "-o", str(out), "--fail-on", "step_time:+5%")
    assert code == 1 and "gate failed: step_time:+5%" in output
    assert out.exists() and "❌" in out.read_text()  # the output is written before the gate fails the job
    code, _ = run("diff", str(base), str(head), "-o", str(out), "--force", "--fail-on", "step_time:+90%")
    assert code == 0 and "✅" in out.read_text()
    code, _ = run("diff", str(base), str(head), "-o", str(out), "--force", "--fail-on", "verdict=input_bound")
    assert code == 1


@pytest.mark.parametrize("rule", ["step_time>5", "gpu_idle=0.3", "nonsense>1", "verdict=slow", "gpu_idle>abc"])
def test_a_bad_rule_is_a_usage_error_listing_the_metrics(tmp_path, rule):
    trace = training(tmp_path / "t.json")
    code, output = run("report", str(trace), "-o", str(tmp_path / "r.json"), "--fail-on", rule)
    assert code == 2
    line = output.strip().splitlines()[-1]
    assert "--fail-on" in line and "gpu_idle" in line and "step_time:+N%" in line


def test_gates_on_report(tmp_path):
    trace = training(tmp_path / "t.json", wait_us=900)  # ~55% of each step waiting
    code, output = run("report", str(trace), "-o", str(tmp_path / "r.json"), "--fail-on", "dataloader_wait>30%")
    assert code == 1 and "dataloader_wait>30%" in output and (tmp_path / "r.json").exists()
    code, _ = run("report", str(trace), "-o", str(tmp_path / "r2.json"), "--fail-on", "dataloader_wait>0.9")
    assert code == 0


def test_markdown_is_a_sticky_gfm_comment(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = training(tmp_path / "runs" / "base.json", wait_us=100, seed=1)
    head = training(tmp_path / "runs" / "head.json", wait_us=600, seed=2)
    c = compare(ta.analyze(base), ta.analyze(head), root=str(tmp_path))
    md = render_diff_markdown(c)
    assert md.startswith(STICKY_MARKER) and len(md) < 65_536
    assert str(tmp_path) not in md and "runs/base.json" in md.replace("\\_", "_")
    html = cmarkgfm.github_flavored_markdown_to_html(md)
    assert "<table>" in html and "regressed" in html.lower()
    assert html.count("<tr>") >= 8
    first = md.split("\n", 3)[1]
    assert "regressed" in first.lower()  # the verdict leads


def test_markdown_appends_to_the_github_step_summary(tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    summary.write_text("# other step's text\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    base = training(tmp_path / "base.json", seed=1)
    head = training(tmp_path / "head.json", seed=2)
    assert run("diff", str(base), str(head), "-o", str(summary), "-q")[0] == 0
    assert run("report", str(head), "-o", str(summary), "-q")[0] == 0
    text = summary.read_text()
    assert text.startswith("# other step's text\n") and STICKY_MARKER in text and "## traceanalyzer" in text


def test_hostile_names_in_the_comparison_are_inert(tmp_path):
    evil = "<script>alert(1)</script> @everyone [x](javascript:alert(2))"
    base = training(tmp_path / "base.json", kernel=evil)
    head = training(tmp_path / "head.json", kernel=evil + "2", wait_us=500)
    c = compare(ta.analyze(base), ta.analyze(head))
    page = render_diff_html(c)
    assert "<script" not in page.lower() and "@everyone" in page  # the page has no script at all; names are text
    html = cmarkgfm.github_flavored_markdown_to_html(render_diff_markdown(c))
    assert "<script>alert" not in html and 'href="javascript' not in html


@pytest.mark.slow
def test_diff_html_in_a_browser(tmp_path, browser):
    base = training(tmp_path / "base.json", wait_us=100, seed=1)
    head = training(tmp_path / "head.json", wait_us=600, seed=2)
    out = tmp_path / "d.html"
    assert run("diff", str(base), str(head), "-o", str(out), "-q")[0] == 0
    page, errors, refused, dialogs = open_report(browser, out)
    if True:
        assert not errors and not refused and not dialogs
        assert page.locator("#verdict .verdict-kind").inner_text().strip().lower() == "regressed"
        for section in ("verdict", "attribution", "steps", "kernels", "inputs"):
            assert page.locator(f"#{section}").bounding_box()["height"] > 40, section
        bars = page.locator(".track .pos")
        assert bars.count() >= 1 and bars.first.bounding_box()["width"] > 50  # the DataLoader bar is drawn
        assert page.locator(".steps").nth(1).locator(".s").count() == 10
        # axes with units: the step charts share one duration scale (top label = the longest step),
        # the attribution bars a signed per-step scale
        from traceanalyzer.units import format_us
        longest = max(max(s) for s in (c_side.step_durations_us for c_side in
                                       (compare(ta.analyze(base), ta.analyze(head)).base,
                                        compare(ta.analyze(base), ta.analyze(head)).head)))
        ys = page.locator(".yaxis").first.locator("span").all_text_contents()
        assert ys == [format_us(longest), format_us(longest / 2), "0"]
        for i in range(2):
            assert page.locator(".yaxis").nth(i).bounding_box()["height"] > 100
            assert "step duration" in page.locator(".xaxis").nth(i).inner_text()
        scale = page.locator("#attribution .scale span").all_text_contents()
        assert scale[1] == "0" and scale[0].startswith("−") and scale[2].startswith("+") and scale[2].endswith(("us", "ms", "s"))
        assert "per step" in page.locator("#attribution .axislabel").inner_text()
        artifacts = Path(__file__).resolve().parent.parent / "artifacts"
        artifacts.mkdir(exist_ok=True)
        page.screenshot(path=str(artifacts / "diff.png"), full_page=True)


@pytest.mark.slow
def test_diff_html_memory_and_straggler_rows_in_a_browser(tmp_path, browser):
    """The rows the Markdown has for the straggler ranks are drawn on the page, one per side."""
    from test_stragglers import write_job

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write_job(tmp_path / "a")
    write_job(tmp_path / "b", slow=None)
    out = tmp_path / "d.html"
    assert run("diff", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(out), "-q")[0] in (0, 1)
    page, errors, refused, dialogs = open_report(browser, out)
    assert not errors and not refused and not dialogs
    rows = page.locator("#steps tr", has_text="stragglers")
    assert rows.count() == 2
    assert rows.nth(0).inner_text().split("\t") == ["stragglers", "rank 5 (210.0 ms wait/step)"]
    assert rows.nth(1).inner_text().split("\t") == ["stragglers", "none"]
    assert rows.nth(0).bounding_box()["height"] > 5

@pytest.mark.slow
def test_memory_peak_and_stragglers_are_compared(tmp_path):
    """Both sides with memory events: the GPU memory peak in every format; a many-rank job whose
    straggler goes away: named on the base side, 'none' on the head."""
    from test_memory import MiB, gpu_trace
    from test_stragglers import write_job

    base = gpu_trace([(1500, 300 * MiB, 400 * MiB)], steps=5).write(tmp_path / "base.json")
    head = gpu_trace([(1500, 300 * MiB, 600 * MiB)], steps=5).write(tmp_path / "head.json")
    c = compare(ta.analyze(base), ta.analyze(head))
    assert (c.base.peak_memory_bytes, c.head.peak_memory_bytes) == (400 * MiB, 600 * MiB)
    md = render_diff_markdown(c)
    assert "| GPU memory peak | 400.0 MiB | 600.0 MiB | +50.0% |" in md
    assert c.to_data()["head"]["peak_memory_bytes"] == 600 * MiB
    from traceanalyzer.report.diff import render_diff_text

    assert "GPU memory peak 400.0 MiB -> 600.0 MiB" in render_diff_text(c)
    from traceanalyzer.report.diff import render_diff_html

    page = render_diff_html(c)
    assert page.count("<tr><td>GPU memory peak</td>") == 2
    assert "<td>GPU memory peak</td><td>400.0 MiB</td>" in page and "<td>600.0 MiB</td>" in page
    assert "<td>stragglers</td>" not in page

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    slow = ta.analyze(write_job(tmp_path / "a"))
    even = ta.analyze(write_job(tmp_path / "b", slow=None))
    c = compare(slow, even)
    assert c.base.stragglers == (5,) and c.head.stragglers == ()
    assert c.base.straggler_wait_per_step_us == pytest.approx(210_000, rel=0.01)
    assert "| stragglers | rank 5 (210.0 ms wait/step) | none | |" in render_diff_markdown(c)
    page = render_diff_html(c)
    assert "<tr><td>stragglers</td><td>rank 5 (210.0 ms wait/step)</td></tr>" in page
    assert "<tr><td>stragglers</td><td>none</td></tr>" in page
    assert "<td>GPU memory peak</td>" not in page


def test_a_saved_report_is_named_as_given(tmp_path):
    """A side read from a saved JSON report is named by that file, with the traces it was made from."""
    base_trace = training(tmp_path / "base_trace.json", wait_us=100, seed=1)
    saved = tmp_path / "base_saved.json"
    assert run("report", str(base_trace), "--format", "json", "-o", str(saved), "-q")[0] == 0
    head = training(tmp_path / "head.json", wait_us=100, seed=2)
    out = tmp_path / "d.md"
    assert run("diff", str(saved), str(head), "--format", "md", "-o", str(out), "-q")[0] in (0, 1)
    footer = [line for line in out.read_text().splitlines() if "base:" in line][0]
    assert "base: base\\_saved.json (saved report of base\\_trace.json) · head: head.json" in footer

"""Run-to-run variation in the change verdict, on real captures (sample_traces/make_torch_repeats.py: ten CPU
captures of one training loop with identical settings, and a DataLoader fix, num_workers 0 against 4, two
captures of each), and change points a person would mark on histories built here.

* Same setting, one capture a side, all 90 ordered pairs: `diff --fail-on step_time:+5%` passes on every one.
* The fix with two captures a side: regressed (the gate fails) one way, improved the other; with one capture a
  side, the slower head is never unchanged or improved, and the DataLoader wait is the part named.
* The allowance: from the runs' medians when there are enough (the formula, exactly), else the default; the
  words state each side's run count; `--fail-on-unconfirmed` makes a likely_slower change fail the gate.
* History: eight runs at ~126 ms then eight alternating 152 / 176 ms give a step-time change point at the 9th
  run; flat noisy series (alternating ones included) give none in at least 98 of 100; a figure that moves
  below its resolution (a memory peak by a few bytes) never gives one.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import SAMPLES
from verdict_builder import job

import traceanalyzer as ta
from traceanalyzer.changepoints import e_divisive
from traceanalyzer.commands import main
from traceanalyzer.compare import RUN_NOISE, compare, compare_runs, run_noise
from traceanalyzer.gates import evaluate_all, failed_message, parse_rules
from traceanalyzer.report.diff import render_diff_markdown
from traceanalyzer.serve import history as hist

REPEATS = SAMPLES / "torch_repeats"
OPTS = ta.Options(cache=False, jobs=1)
GATE = parse_rules(["step_time:+5%"])


def run(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, list(args))
    return res.exit_code, res.output


@pytest.fixture(scope="module")
def same():
    return [ta.analyze(REPEATS / f"same_{i:02d}.json.gz", OPTS) for i in range(10)]


@pytest.fixture(scope="module")
def fix():
    return {f"{w}{r}": ta.analyze(REPEATS / f"fix_workers{w}_{r}.json.gz", OPTS) for w in (0, 4) for r in "ab"}


def gate(bases, heads, **kw):
    c = compare_runs(bases, heads)
    return c, failed_message(evaluate_all(GATE, heads[-1], c, **kw))


# --- one setting: never a failed gate ------------------------------------------------------------------------
def test_every_pair_of_captures_of_one_setting_passes_the_step_time_gate(same):
    changes = []
    for (i, b), (j, h) in itertools.permutations(enumerate(same), 2):
        c, failed = gate([b], [h])
        assert failed is None, (i, j, c.headline)
        assert c.change_verdict not in ("regressed", "improved"), (i, j, c.headline)
        changes.append(abs(c.step_time.change))
    assert len(changes) == 90
    # the captures do differ: by 6% in the median pair, up to about a fifth (docs/ci.md: the allowance's basis)
    assert 0.03 < float(np.median(changes)) < 0.10 and 0.15 < max(changes) < RUN_NOISE


def test_the_command_gives_the_same_answer_on_a_pair_of_one_setting(tmp_path):
    for a, b in (("same_03", "same_07"), ("same_07", "same_03")):
        code, output = run("diff", str(REPEATS / f"{a}.json.gz"), str(REPEATS / f"{b}.json.gz"), "-o",
                           str(tmp_path / f"{a}-{b}.json"), "--fail-on", "step_time:+5%")
        assert code == 0, output


# --- a real DataLoader fix ------------------------------------------------------------------------------------
def test_the_fix_with_two_captures_a_side_is_regressed_one_way_and_improved_the_other(fix, tmp_path):
    c, failed = gate([fix["4a"], fix["4b"]], [fix["0a"], fix["0b"]])
    assert c.change_verdict == "regressed" and c.run_to_run_measured and failed, c.headline
    assert c.step_time.ci_low > 0.5  # more than 50% slower across runs
    back, failed = gate([fix["0a"], fix["0b"]], [fix["4a"], fix["4b"]])
    assert back.change_verdict == "improved" and failed is None, back.headline
    args = ["diff", "--base", str(REPEATS / "fix_workers4_a.json.gz"), "--base", str(REPEATS / "fix_workers4_b.json.gz"),
            "--head", str(REPEATS / "fix_workers0_a.json.gz"), "--head", str(REPEATS / "fix_workers0_b.json.gz"),
            "-o", str(tmp_path / "d.json"), "--fail-on", "step_time:+5%"]
    code, output = run(*args)
    assert code == 1 and "gate failed: step_time:+5%" in output
    assert json.loads((tmp_path / "d.json").read_text())["change_verdict"] == "regressed"


def test_the_fix_with_one_capture_a_side_never_calls_the_slower_head_unchanged_or_improved(fix):
    for fast, slow in itertools.product(("4a", "4b"), ("0a", "0b")):
        c = compare(fix[fast], fix[slow])
        assert c.change_verdict in ("regressed", "likely_slower"), (fast, slow, c.headline)
        assert c.step_time.change > RUN_NOISE  # far beyond what captures of one setting differ by
        assert "waiting for data" in c.lead and "decisive" in c.lead, c.lead  # the DataLoader is named
        assert c.attribution[0].cause == "host:dataloader_wait"
        assert compare(fix[slow], fix[fast]).change_verdict in ("improved", "likely_faster")


# --- the allowance ----------------------------------------------------------------------------------------------
def test_the_allowance_from_the_runs_medians_is_a_t_bound_and_else_the_default():
    noise = run_noise([100.0, 102.0, 98.0], [110.0])
    # deviations 0, +2%, -2% over 2 degrees of freedom: s = 2%; t(0.975, 2) = 4.303; sqrt(1/3 + 1/1)
    assert noise is not None and noise.basis == "history" and noise.runs == 3
    assert noise.spread == pytest.approx(0.02, abs=1e-6)
    assert noise.allowance == pytest.approx(4.303 * 0.02 * math.sqrt(4 / 3), abs=1e-6)
    assert run_noise([100.0], [110.0]) == run_noise([100.0, 101.0], [110.0])  # 1 degree of freedom: not enough
    assert run_noise([100.0], [110.0]).basis == "default" and run_noise([100.0], [110.0]).allowance == RUN_NOISE
    assert run_noise([100.0, 101.0], [110.0, 111.0]) is None  # several runs a side: the interval spans runs
    more = run_noise([100.0], [110.0], history=[100.0, 102.0, 98.0, 101.0])  # the base branch's runs
    assert more.basis == "history" and more.runs == 4


def test_five_base_runs_are_counted_as_five_in_every_word(same, fix):
    c = compare_runs(same[:5], [fix["4a"]])
    assert c.step_time.base_runs == 5 and c.run_noise.basis == "history" and c.run_noise.runs == 5
    detail = " ".join(c.detail)
    assert "5 base runs and 1 head run" in detail and "one run on a side" not in detail
    md = render_diff_markdown(c)
    assert "one run on a side" not in md and "one run a side" not in md
    assert "| runs | 5 | 1 | run-to-run ±" in md and "from 5 runs" in md
    assert "rank test over the pooled steps of 5 base runs and 1 head run" in md


def test_a_likely_slower_change_fails_only_when_asked(tmp_path):
    # +1.4 ms of DataLoader wait in every step of 7.1 ms: +20%, clear in the steps, within the 25% allowance
    base = str(job(tmp_path / "base.json", seed=1000, wait_us=100))
    head = str(job(tmp_path / "head.json", seed=1001, wait_us=1500))
    common = ["diff", base, head, "--fail-on", "step_time:+5%", "--force"]
    code, output = run(*common, "-o", str(tmp_path / "a.json"))
    doc = json.loads((tmp_path / "a.json").read_text())
    assert code == 0 and doc["change_verdict"] == "likely_slower" and doc["reason"] == "within_run_noise"
    assert "unconfirmed" in doc["headline"] and "not failed without --fail-on-unconfirmed" in output
    code, output = run(*common, "-o", str(tmp_path / "b.json"), "--fail-on-unconfirmed")
    assert code == 1 and "gate failed: step_time:+5%" in output
    code, _ = run(*common, "-o", str(tmp_path / "c.json"), "--run-noise", "10%")  # captures known to differ less
    assert code == 1 and json.loads((tmp_path / "c.json").read_text())["change_verdict"] == "regressed"
    assert run("diff", base, head, "--run-noise", "lots", "-o", str(tmp_path / "d.json"))[0] == 2


def test_the_markdown_headline_is_two_lines_then_the_detail(fix):
    c = compare(fix["4a"], fix["0a"])
    lines = render_diff_markdown(c).splitlines()
    assert lines[1].startswith("## ") and c.title in lines[1] and f"{c.step_time.change * 100:.1f}%" in lines[1]
    assert lines[2] == f"**{c.lead}**" and lines[3] == ""
    assert lines[4].startswith("Hodges–Lehmann shift of the step time") and lines[5] == ""


# --- change points ----------------------------------------------------------------------------------------------
def history_rows(step_ms: list[float], peak: list[float] | None = None) -> list[dict]:
    return [{"id": f"{i:012x}", "commit": f"c{i:02d}", "created_at": 1000.0 + i, "verdict": "input_bound",
             "commit_order": None,
             "metrics": {"step_time_ms": x, "peak_memory_bytes": None if peak is None else peak[i]}}
            for i, x in enumerate(step_ms)]


def test_a_shift_to_alternating_runs_is_a_step_time_change_point_between_the_8th_and_10th_run():
    rng = np.random.default_rng(126)
    before = 126 + rng.normal(0, 1.5, 8)
    after = np.tile([152.0, 176.0], 4) + rng.normal(0, 1.5, 8)
    peak = [40e9 + float(rng.integers(0, 4096)) for _ in range(16)]  # bytes apart: "+0.0%"
    h = hist.build(history_rows([float(v) for v in np.r_[before, after]], peak), None, "http://x", "demo", "main")
    points = [c for c in h["change_points"] if c["metric"] == "step_time_ms"]
    assert len(points) == 1 and points[0]["commit"] in ("c08", "c09"), h["change_points"]
    cp = points[0]
    assert cp["previous_commit"] == f"c{int(cp['commit'][1:]) - 1:02d}"  # the commit range
    assert cp["change"] == pytest.approx(38 / 126, abs=0.03) and cp["direction"] == "worse"
    assert all(c["change"] is None or abs(c["change"]) >= 0.001 for c in h["change_points"])
    assert not [c for c in h["change_points"] if c["metric"] == "peak_memory_bytes"]


def test_flat_noisy_series_alternating_ones_included_have_no_change_point_in_98_of_100():
    kinds = {
        "gaussian": lambda rng, n: 126 * (1 + 0.03 * rng.standard_normal(n)),
        "heavy tails": lambda rng, n: 126 * (1 + 0.03 * rng.standard_t(3, n)),
        "alternating": lambda rng, n: np.tile([152.0, 176.0], n // 2) + rng.normal(0, 1.5, n),
        "two settings at random": lambda rng, n: np.where(rng.random(n) < 0.5, 152.0, 176.0) + rng.normal(0, 3, n),
    }
    for name, make in kinds.items():
        flagged = sum(bool(e_divisive(make(np.random.default_rng(7000 + seed), (16, 24, 40)[seed % 3])))
                      for seed in range(100))
        assert flagged <= 2, (name, flagged)


def test_a_change_below_the_figures_resolution_is_never_a_change_point():
    x = np.r_[np.full(10, 1000.0), np.full(10, 1001.0)]  # no noise at all: a clean shift of 0.1%
    assert [c.index for c in e_divisive(x)] == [10]
    assert e_divisive(x, resolution=2.0) == []
    assert hist.resolution([40e9] * 5, "bytes") == pytest.approx(40e6)
    assert hist.resolution([0.1] * 5, "fraction") == 0.0005


def test_the_markdown_stays_under_its_limit_with_every_tag_closed(fix):
    c = compare(fix["4a"], fix["0a"])
    full = render_diff_markdown(c)
    for limit in (len(full) - 1, 2500, 1200):
        md = render_diff_markdown(c, max_chars=limit)
        assert len(md) <= limit and md.count("<details>") == md.count("</details>"), limit
        assert md.startswith("<!-- traceanalyzer-diff -->\n## ") and c.title in md


# --- the service's compare page: runs of one setting are the history, never a branch's other commits -------------
@pytest.mark.slow  # a real server analysing real uploads
def test_the_compare_page_takes_run_to_run_variation_from_runs_of_one_setting_only(tmp_path):
    from serve_helpers import Server

    server = Server(tmp_path / "data", None, "--jobs", "2").start()
    try:
        token = server.token("noise")

        def up(name, branch="main", **params):
            r = server.upload(token, REPEATS / f"{name}.json.gz", project="noise", branch=branch, **params)
            assert r.status_code == 201, r.text
            return r.json()["id"]

        main = [up(f"same_0{i}", commit=f"{i:040x}") for i in range(3)]  # three commits of main
        head = up("fix_workers0_a", branch="pr", commit="f" * 40)
        for run_id in [*main, head]:
            assert server.wait(run_id)["status"] == "done"
        doc = server.get("/api/v1/compare", params={"base": main[2], "head": head}).json()
        # main's earlier runs are other commits: no history, the default allowance (as `diff`)
        assert doc["run_noise"] == {"allowance": RUN_NOISE, "basis": "default", "runs": 0, "spread": None}, doc
        repeats = [up(f"same_0{i}", repeat_of=main[2]) for i in (3, 4)]  # two captures marked as repeats
        same_commit = [up(f"same_0{i}", commit=f"{0:040x}") for i in (5, 6)]  # main[0]'s commit again
        other = up("same_07", commit=f"{0:040x}", setting="batch 64")  # that commit, another setting
        for run_id in [*repeats, *same_commit, other]:
            assert server.wait(run_id)["status"] == "done"
        assert server.get(f"/api/v1/runs/{repeats[1]}").json()["repeat_of"] == main[2]
        doc = server.get("/api/v1/compare", params={"base": main[2], "head": head}).json()
        assert doc["run_noise"]["basis"] == "history" and doc["run_noise"]["runs"] == 3, doc["run_noise"]
        assert any("Run-to-run variation from 3 runs of one setting" in d for d in doc["detail"])
        doc = server.get("/api/v1/compare", params={"base": main[0], "head": head}).json()
        assert doc["run_noise"]["basis"] == "history" and doc["run_noise"]["runs"] == 3  # not the labelled one
        doc = server.get("/api/v1/compare", params={"base": main[1], "head": head}).json()
        assert doc["run_noise"]["basis"] == "default"
        bad = server.upload(token, REPEATS / "same_08.json.gz", project="noise", repeat_of="0" * 12)
        assert bad.status_code == 400 and "repeat_of" in bad.json()["error"]
    finally:
        server.stop()

"""nvidia-smi logs given without a trace: the idle head and tail outside the job are set apart (and said so), the
figures are of the job's span, headlines agree with the runs listed, and a GPU that holds memory but computes little
is underused. Built logs with exact figures; the corpus logs as reality checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import CORPUS
from dmon_builder import T0_NS, S, dmon_text
from test_reconcile import reconcile

import traceanalyzer as ta
from traceanalyzer.analyses.counters import IDLE_EDGE_UTIL_PCT

pytestmark = pytest.mark.usefixtures("machine_in_new_york")


def _dmon(path: Path, util: list[int] | np.ndarray, gpus: int = 1) -> Path:
    """A 1-Hz dated dmon log whose GPU 0 reads `util` (the others 0)."""
    u = np.asarray(util, dtype=int)
    ends = T0_NS + np.arange(1, len(u) + 1, dtype=np.int64) * S
    path.write_text(dmon_text(ends, u, "UTC", 0, gpus=gpus))
    return path


def _report(path: Path) -> dict:
    data = ta.analyze(path, ta.Options(find_logs_beside=False)).to_data()
    assert reconcile(data) > 0  # every quoted percentage is its figures' share
    return data["diagnosis"]


def test_idle_tail_after_the_job_does_not_pull_a_busy_run_under_the_healthy_threshold(tmp_path):
    # 120 s before the job, 300 s at 80%, 150 s after it: over the whole log the mean is 42%
    d = _report(_dmon(tmp_path / "g.log", [0] * 120 + [80] * 300 + [0] * 150))
    assert d["primary"] == "gpu_bound"
    assert d["headline_figures"]["sm_util_mean_pct"] == 80.0
    # the headline is one sentence; what was set apart is its detail, one click away
    assert d["headline"] == "1 GPU(s) busy: SM utilisation 80% on average over the job; no sample at 0%."
    assert d["headline_detail"] == (
        "The log's first 120 s and last 150 s are idle on every GPU (SM utilisation at most 1%): outside the job, "
        "set apart; the figures are of the job's 300 s.")


def test_idle_runs_inside_the_job_are_stated_beside_a_busy_headline(tmp_path):
    # 60 s idle before; 600 s at 91% with a 100-s stall in the middle; never "without idle runs" beside a listed run
    d = _report(_dmon(tmp_path / "g.log", [0] * 60 + [91] * 300 + [0] * 100 + [91] * 300))
    assert d["primary"] == "gpu_bound"
    assert d["headline_figures"]["sm_util_mean_pct"] == pytest.approx(91 * 600 / 700)
    assert (d["headline_figures"]["zero_util_samples"], d["headline_figures"]["samples"]) == (100, 700)
    assert "78% on average over the job; 14% of samples at 0% (under 25%), the longest run 100 s." in d["headline"]
    assert "The log's first 60 s is idle on every GPU" in d["headline_detail"] and "before the job" in d["headline_detail"]


def test_only_edges_idle_on_every_gpu_are_set_apart(tmp_path):
    # GPU 0 works from 30 s; GPU 1 never: the head is idle on both and set apart, GPU 1 stays unused over the job
    d = _report(_dmon(tmp_path / "g.log", [0] * 30 + [85] * 90, gpus=2))
    assert d["primary"] == "gpu_underused"
    (f,) = d["findings"]
    assert f["title"] == "GPU 1 is not used at all"
    assert f["evidence"][0] == ("GPU 1: 90 of 90 samples at 0% SM utilisation over the job (100%), in 1 run(s); "
                                "longest 90 samples (90 s)")
    assert "The log's first 30 s is idle on every GPU" in d["headline_detail"]


def test_near_zero_is_at_most_the_idle_edge_level(tmp_path):
    at, above = int(IDLE_EDGE_UTIL_PCT), int(IDLE_EDGE_UTIL_PCT) + 1
    d = _report(_dmon(tmp_path / "a.log", [at] * 20 + [90] * 80 + [at] * 20))
    assert "first 20 s and last 20 s are idle" in d["headline_detail"] and d["headline_figures"]["sm_util_mean_pct"] == 90
    d = _report(_dmon(tmp_path / "b.log", [above] * 20 + [90] * 80))
    assert "set apart" not in d["headline"] and "over the log" in d["headline"]
    assert d["headline_figures"]["sm_util_mean_pct"] == pytest.approx((20 * above + 80 * 90) / 100)


def test_a_log_idle_throughout_is_not_trimmed(tmp_path):
    d = _report(_dmon(tmp_path / "g.log", [0] * 50))
    assert d["findings"][0]["title"] == "GPU 0 is not used at all"
    assert "50 of 50 samples" in d["findings"][0]["evidence"][0] and "set apart" not in d["headline"]


def test_low_utilisation_with_memory_held_is_underused(tmp_path):
    # 27% utilisation, 75059 of 81920 MiB used (91.6%): a model is loaded, the GPU computes a quarter of the time
    path = tmp_path / "smi.csv"
    rows = [f"2024/03/05 10:00:{i:02d}.000, 0, NVIDIA Test GPU, 27 %, 75059 MiB, 81920 MiB" for i in range(40)]
    path.write_text("timestamp, index, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB]\n"
                    + "\n".join(rows) + "\n")
    d = _report(path)
    assert d["primary"] == "gpu_underused"
    (f,) = d["findings"]
    assert f["title"] == "GPU 0 is underused: memory held, little computed"
    assert f["evidence"][0] == ("GPU 0: SM utilisation 27.0% on average over the log (40 samples), with 75059 MiB "
                                "of memory held (91.6% of 81920 MiB): a model is loaded but the GPU computes only "
                                "part of the time")
    assert f["severity"] == "medium" and f["figures"]["memory_used_max_mib"] == 75059


# --- the corpus logs (MANIFEST notes) as reality checks ----------------------------------------------------------
def _corpus(name: str) -> Path:
    path = CORPUS / name
    if not path.is_file():
        pytest.skip(f"{name} not in the corpus")
    return path


def test_corpus_log_with_hours_idle_after_the_job():
    # 15-s samples for hours, the GPU at 0% for ~5.4 h after the job ended: set apart, not averaged in
    d = _report(_corpus("smi_csv_1gpu_15s/gpu_usage.csv"))
    assert d["primary"] == "gpu_underused"
    assert "last 19,426 s" in d["headline_detail"] and "the job's 5,115 s" in d["headline_detail"]
    idle = next(f for f in d["findings"] if f["title"] == "GPU 0 is idle for long runs")
    assert (idle["figures"]["zero_util_samples"], idle["figures"]["samples"]) == (139, 341)


def test_corpus_log_low_utilisation_with_memory_full():
    d = _report(_corpus("smi_csv_h100nvl_truncated/nvidia-smi.log"))
    titles = [f["title"] for f in d["findings"]]
    assert titles == ["GPU 0 is underused: memory held, little computed", "GPU 0 is idle for long runs"]
    assert "(94.0% of 95830 MiB)" in d["findings"][0]["evidence"][0]
    assert d["headline_figures"]["sm_util_mean_pct"] == pytest.approx(25.4, abs=0.05)
    assert "first 16 s is idle on every GPU" in d["headline_detail"]


def test_corpus_log_with_one_gpu_idle_throughout():
    d = _report(_corpus("smi_csv_a6000_2gpu/gpu_usage.csv"))
    (f,) = d["findings"]
    assert f["title"] == "GPU 1 is idle for long runs" and "over the log" in f["evidence"][0]


def test_the_documented_idle_edge_level_is_the_code_constant():
    from conftest import ROOT

    text = (ROOT / "docs" / "diagnosis.md").read_text()
    assert f"at most `IDLE_EDGE_UTIL_PCT` ({IDLE_EDGE_UTIL_PCT:g}%)" in text

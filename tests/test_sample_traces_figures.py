"""Our figures equal the hand-computed answers written beside every bundled sample trace, and
on the real torch 2.13 CPU traces the DataLoader wait matches the wall-clock measurement taken
inside the generating script within 0.01."""

from __future__ import annotations

import json

import pytest
from conftest import SAMPLES
from timelines import load_paths

from traceanalyzer.pipeline import Options, analyze

SYNTHETIC = sorted(p for p in SAMPLES.glob("*.expected.json")
                   if json.loads(p.read_text()).get("made_by", "").endswith("make_synthetic.py"))
TORCH = sorted(p for p in SAMPLES.glob("torch_cpu_*.expected.json") if "measured" in json.loads(p.read_text()))


def _report(path, min_gap_us):
    tl = load_paths([path])
    return analyze(tl, Options(min_gap_ns=int(min_gap_us * 1000), diagnose=False)).to_data()


@pytest.mark.parametrize("expected_path", SYNTHETIC, ids=lambda p: p.name.split(".")[0])
def test_synthetic_sample_figures_exact(expected_path):
    exp = json.loads(expected_path.read_text())
    report = _report(SAMPLES / exp["file"], exp.get("idle_gap_threshold_us", 100))
    (rank,) = report["ranks"]
    assert rank["window_us"] == exp["window"]["window_us"]
    assert rank["steps"] == exp["step_count"]
    assert rank["dataloader_wait_us"] == exp["dataloader_wait_us"]
    assert rank["dataloader_wait_fraction"] == pytest.approx(exp["dataloader_wait_fraction"], abs=1e-6)
    assert [s["duration_us"] for s in rank["per_step"]] == [s["duration_us"] for s in exp["steps"]]
    assert [s["dataloader_wait_us"] for s in rank["per_step"]] == [s["dataloader_wait_us"] for s in exp["steps"]]
    if exp["gpu_busy_us"] is None or not rank["devices"]:
        assert rank["devices"] == [] and exp["gpu_busy_us"] in (None, 0)
        return
    assert [s["gpu_busy_us"] for s in rank["per_step"]] == [s["gpu_busy_us"] for s in exp["steps"]]
    (d,) = rank["devices"]
    assert d["gpu_busy_us"] == exp["gpu_busy_us"]
    assert d["kernel_us"] == exp["kernel_busy_us"]
    assert d["memcpy"]["memset_us"] == exp["memset_busy_us"]
    assert d["gpu_idle_fraction"] == pytest.approx(exp["gpu_idle_fraction"], abs=1e-6)
    assert d["gaps"]["count"] == exp["idle_gap_count"]
    assert d["gaps"]["total_us"] == exp["idle_gaps_total_us"]
    longest = sorted((g["duration_us"] for g in exp["idle_gaps"]), reverse=True)[:10]
    assert [g["duration_us"] for g in d["gaps"]["top"]] == longest
    assert d["memcpy_us"] == exp["memcpy_us"]["total"]
    by_dir = {m["direction"]: m["union_us"] for m in d["memcpy"]["by_direction"]}
    assert by_dir == {k: v for k, v in exp["memcpy_us"].items() if k != "total" and v}
    assert d["memcpy_share_of_window"] == pytest.approx(exp["memcpy_fraction_of_window"], abs=1e-6)
    ours = [(k["name"], k["count"], k["total_us"]) for k in d["top_kernels"]]
    assert ours[: len(exp["top_kernels"])] == [(k["name"], k["count"], k["total_us"]) for k in exp["top_kernels"]]


@pytest.mark.parametrize("expected_path", TORCH, ids=lambda p: p.name.split(".")[0])
def test_torch_cpu_dataloader_wait_matches_wall_clock(expected_path):
    exp = json.loads(expected_path.read_text())
    (rank,) = _report(SAMPLES / exp["file"], 100)["ranks"]
    assert rank["devices"] == [] and rank["steps"] == exp["measured"]["active_steps"]
    assert rank["dataloader_wait_fraction"] == pytest.approx(exp["measured"]["dataloader_wait_fraction"], abs=0.01)


def test_bad_samples_are_rejected():
    from traceanalyzer.errors import InputError

    for name, what in json.loads((SAMPLES / "bad.expected.json").read_text()).items():
        if what.startswith("salvage"):
            tl = load_paths([SAMPLES / "bad" / name])
            assert "TRUNCATED" in tl.warnings[0] and len(tl.events) > 0, name
            continue
        with pytest.raises(InputError):
            load_paths([SAMPLES / "bad" / name])

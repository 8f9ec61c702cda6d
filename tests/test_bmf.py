"""`report --format bmf`: the run's headline figures as Bencher Metric Format JSON, on samples with known answers
(sample_traces/README.md) and built traces."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT, SAMPLES

import traceanalyzer as ta
from traceanalyzer.commands import main
from traceanalyzer.report.bmf import BENCHMARK, MEASURES, bmf_figures

OPTS = ta.Options(cache=False, jobs=1)


def bmf(*args: str) -> dict:
    res = CliRunner().invoke(main, ["report", *args, "--format", "bmf", "-o", "-", "-q"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def check_shape(doc: dict) -> dict:
    """The BMF schema: {benchmark: {measure: {value, [lower_value, upper_value]}}}, numbers only."""
    assert list(doc) == [BENCHMARK]
    measures = doc[BENCHMARK]
    assert measures and set(measures) <= set(MEASURES)
    for name, m in measures.items():
        assert len(name) <= 64 and re.fullmatch(r"[a-z0-9-]+", name)
        assert set(m) in ({"value"}, {"value", "lower_value", "upper_value"}), name
        assert all(isinstance(v, float | int) and not isinstance(v, bool) for v in m.values())
        if "lower_value" in m:
            assert m["lower_value"] <= m["value"] <= m["upper_value"]
    return measures


def test_input_bound_sample():
    # the sample's answers: 5 steps of 10 ms, GPU busy 15.5 of 50 ms, DataLoader 30 of 50 ms, memcpy 500 of 15,500 us
    m = check_shape(bmf(str(SAMPLES / "input_bound.json")))
    assert m["step-time-ms"] == {"value": 10.0, "lower_value": 10.0, "upper_value": 10.0}
    assert m["gpu-idle-fraction"] == {"value": 0.69}
    assert m["dataloader-wait-fraction"] == {"value": 0.6}
    assert m["memcpy-share-of-gpu-busy"]["value"] == pytest.approx(500 / 15_500, abs=1e-6)
    assert m["exposed-communication-fraction"] == {"value": 0.0}
    assert m["steps-per-s"] == {"value": 100.0}
    assert "samples-per-s" not in m and "peak-gpu-memory-bytes" not in m  # no batch size, no memory events


def test_batch_size_and_a_two_rank_job_with_communication():
    m = check_shape(bmf(str(SAMPLES / "comm_rank0.json"), str(SAMPLES / "comm_rank1.json"), "--batch-size", "8"))
    a = ta.analyze([SAMPLES / "comm_rank0.json", SAMPLES / "comm_rank1.json"], OPTS)
    devices = [d for r in a.ranks for d in r.devices]
    exposed = sum(d.exposed_communication_us for d in devices) / sum(d.window_us for d in devices)
    assert m["exposed-communication-fraction"]["value"] == pytest.approx(exposed, abs=1e-6)
    assert 0 < exposed < 1
    # samples/s = batch x ranks x steps/s
    assert m["samples-per-s"]["value"] == pytest.approx(8 * 2 * m["steps-per-s"]["value"])


def test_cpu_only_capture_leaves_gpu_measures_out():
    m = check_shape(bmf(str(SAMPLES / "cpu_only.json")))
    assert set(m) == {"step-time-ms", "dataloader-wait-fraction", "steps-per-s"}
    assert m["dataloader-wait-fraction"] == {"value": 0.25}


def test_memory_peak(tmp_path):
    from test_memory import MiB, gpu_trace

    trace = gpu_trace([(1500, 300 * MiB, 600 * MiB)], steps=5).write(tmp_path / "t.json")
    assert bmf_figures(ta.analyze(trace, OPTS))["peak-gpu-memory-bytes"] == {"value": 600 * MiB}


def test_real_capture_step_time_matches_the_report(tmp_path):
    trace = SAMPLES / "torch_workers" / "workers0_a.json.gz"
    a = ta.analyze(trace, OPTS)
    m = check_shape(bmf(str(trace)))
    s = a.summary
    assert m["step-time-ms"] == {"value": round(s.step_time_median_us / 1000, 6),
                                 "lower_value": round(s.step_time_p10_us / 1000, 6),
                                 "upper_value": round(s.step_time_p90_us / 1000, 6)}
    assert m["dataloader-wait-fraction"]["value"] == pytest.approx(s.dataloader_wait_fraction, abs=1e-6)
    assert m["dataloader-wait-fraction"]["value"] > 0.3  # the loop measured ~29 of ~54 ms waiting


def test_default_output_name_and_the_help(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["report", str(SAMPLES / "input_bound.json"), "--format", "bmf", "-q"])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "input_bound.report.bmf.json").read_text())[BENCHMARK]
    help_text = CliRunner().invoke(main, ["report", "--help"]).output
    assert "bmf" in help_text
    res = CliRunner().invoke(main, ["diff", "a", "b", "--format", "bmf"])
    assert res.exit_code == 2  # diff has no BMF output


def test_every_measure_is_documented():
    ci = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    table = ci.split("## Exports for a benchmark tracker")[1]
    for name in MEASURES:
        assert f"| `{name}` |" in table, name
    figures = (ROOT / "docs" / "figures.md").read_text(encoding="utf-8")
    assert all(name in figures for name in MEASURES)


def test_no_trace_string_reaches_the_output(tmp_path):
    evil = SAMPLES / "hostile_names.json"
    out = Path(tmp_path / "h.bmf.json")
    res = CliRunner().invoke(main, ["report", str(evil), "--format", "bmf", "-o", str(out), "-q"])
    assert res.exit_code == 0
    check_shape(json.loads(out.read_text()))
    assert "<" not in out.read_text() and "script" not in out.read_text()

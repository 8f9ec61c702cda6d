"""GPU and host memory from torch.profiler's [memory] events: reader, figures, findings, formats.

Exact figures on traces built here with known memory events; a real torch 2.13 CPU trace
(sample_traces/make_torch_memory.py) and real GPU traces of the corpus against references
computed in the test straight from the JSON (json module, not our reader).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ROOT
from kineto_builder import HOST_PID, HOST_TID, KinetoTrace

import traceanalyzer as ta
from traceanalyzer import timeline as T
from traceanalyzer.analyses import figures_of
from traceanalyzer.analyses.memory import MAX_SERIES_POINTS
from traceanalyzer.analyses.thresholds import WORKLOAD_MIN_OPS
from traceanalyzer.causes import ALLOCATOR_BOUND
from traceanalyzer.diagnosis import diagnose
from traceanalyzer.diagnosis.memory import HEADROOM, LEAK, PRESSURE, add_memory_findings
from traceanalyzer.diagnosis.thresholds import (
    MEMORY_HEADROOM_MAX_USED_FRACTION,
    MEMORY_LEAK_MIN_STEPS,
    MEMORY_PRESSURE_FRACTION,
)
from traceanalyzer.formats import kineto
from traceanalyzer.formats._base import ReadOptions
from traceanalyzer.report.html import render_html
from traceanalyzer.report.markdown import render_markdown
from traceanalyzer.report.text import render_text

SAMPLES = ROOT / "sample_traces"
MiB = 1 << 20
TOTAL = 1000 * MiB  # the test GPU's memory


def mem(t: KinetoTrace, ts: float, allocated: int, reserved: int | None = None, nbytes: int = 512,
        device_type: Any = 1, device: int = 0) -> KinetoTrace:
    """One [memory] instant as torch.profiler writes it."""
    args: dict[str, Any] = {"Device Type": device_type, "Device Id": device, "Addr": 140000000000 + int(ts),
                            "Bytes": nbytes, "Total Allocated": allocated}
    if reserved is not None:
        args["Total Reserved"] = reserved
    t.events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": HOST_PID,
                     "tid": HOST_TID, "ts": ts, "args": args})
    return t


def gpu_trace(allocs: list[tuple[float, int, int]], steps: int = 3, step_us: int = 1000,
              total: int | None = TOTAL) -> KinetoTrace:
    """`steps` steps of `step_us`, one kernel in each, and memory samples (ts, allocated, reserved)."""
    t = KinetoTrace()
    if total is not None:
        t.header["deviceProperties"] = [{"id": 0, "name": "Test GPU", "totalGlobalMem": total}]
    for i in range(steps):
        t.step(i + 1, 1000 + i * step_us, step_us)
        t.launched(1000 + i * step_us + 10, 5, 1000 + i * step_us + 20, step_us // 2)
    for ts, a, r in allocs:
        mem(t, ts, a, r)
    return t


def analyze(t: KinetoTrace, path: Path) -> ta.Analysis:
    return ta.analyze(t.write(path))


def gpu_memory(a: ta.Analysis, device: int = 0) -> Any:
    return next(d.memory for d in a.ranks[0].devices if d.index == device)


def gpu_series(a: ta.Analysis, device: int = 0) -> Any:
    """The drawn memory series of a device (presentation, under the rank's `drawing`)."""
    return a.ranks[0].drawing.memory[f"cuda:{device}"]


def memory_findings(a: ta.Analysis) -> dict[str, Any]:
    return {f.id: f for f in a.ranks[0].diagnosis.findings if f.id.startswith("memory")}


# --- the reader ----------------------------------------------------------------------------------------
def test_reader_keeps_memory_events_apart_by_device_type(tmp_path):
    t = gpu_trace([(1100, 10 * MiB, 20 * MiB), (1200.5, 30 * MiB, 40 * MiB)])
    mem(t, 1150, 4096, 0, device_type=0, device=-1)  # host
    mem(t, 1160, 7 * MiB, 8 * MiB, device_type=6, device=0)  # HIP: the GPU of ROCm builds
    mem(t, 1170, 5, 5, device_type=12, device=0)  # another accelerator: kept as "other"
    path = t.write(tmp_path / "t.json")
    for typed in (True, False):
        tl = kineto.read_path(path, ReadOptions(), typed=typed)
        m = tl.memory
        assert list(m["device_type"].astype(str)) == ["cuda", "cuda", "cpu", "cuda", "other"]
        assert m["device"].tolist() == [0, 0, -1, 0, 0]
        assert m["allocated_bytes"].tolist() == [10 * MiB, 30 * MiB, 4096, 7 * MiB, 5]
        assert m["ts_ns"].tolist()[:2] == [1_100_000, 1_200_500]
        src = tl.sources[0]
        assert "instant" not in src.not_kept  # every instant here is a memory event: kept
        assert src.events_kept == len(tl.events) + 5
        assert [d.properties.get("totalGlobalMem") for d in tl.devices] == [TOTAL]


def test_memory_events_without_totals_or_time_are_dropped_and_counted(tmp_path):
    t = gpu_trace([(1100, 10 * MiB, 20 * MiB)])
    t.events.append({"ph": "i", "name": "[memory]", "pid": HOST_PID, "tid": HOST_TID, "ts": 1200,
                     "args": {"Device Type": 1, "Device Id": 0}})  # no Total Allocated, no Bytes
    t.events.append({"ph": "i", "name": "Iteration Start: PyTorch Profiler", "pid": "Traces", "tid": "x",
                     "ts": 1000, "args": {}})
    tl = kineto.read_path(t.write(tmp_path / "t.json"), ReadOptions())
    assert len(tl.memory) == 1
    assert tl.sources[0].not_kept["memory_event_unusable"] == 1
    assert tl.sources[0].not_kept["instant"] == 1  # the other instant stays not kept


def test_ranks_concatenate_with_their_memory(tmp_path):
    a = gpu_trace([(1100, 10 * MiB, 20 * MiB)])
    a.header["distributedInfo"] = {"rank": 0, "world_size": 2}
    b = gpu_trace([(1100, 50 * MiB, 60 * MiB)])
    b.header["distributedInfo"] = {"rank": 1, "world_size": 2}
    res = ta.analyze([a.write(tmp_path / "r0.json"), b.write(tmp_path / "r1.json")])
    peaks = {r.rank: r.devices[0].memory.peak_allocated_bytes for r in res.ranks}
    assert peaks == {0: 10 * MiB, 1: 50 * MiB}


# --- figures ---------------------------------------------------------------------------------------------
def test_gpu_figures_exact(tmp_path):
    # steps: [1000, 2000), [2000, 3000), [3000, 4000); samples (ts, allocated, reserved)
    allocs = [(900, 100 * MiB, 200 * MiB),  # before the first step: carried into it
              (1500, 300 * MiB, 400 * MiB), (1900, 150 * MiB, 400 * MiB),  # step 1: peak 300, end 150
              (2500, 350 * MiB, 500 * MiB), (2999, 160 * MiB, 500 * MiB),  # step 2: peak 350, end 160
              (3300, 250 * MiB, 500 * MiB), (3700, 175 * MiB, 450 * MiB)]  # step 3: peak 250, end 175
    a = analyze(gpu_trace(allocs), tmp_path / "t.json")
    m = gpu_memory(a)
    assert m.samples == 7
    assert m.peak_allocated_bytes == 350 * MiB
    assert m.peak_reserved_bytes == 500 * MiB
    assert m.total_bytes == TOTAL
    assert m.peak_allocated_fraction == pytest.approx(0.35)
    assert m.headroom_fraction == pytest.approx(0.5)
    assert [(s.step, s.peak_allocated_bytes // MiB, s.end_allocated_bytes // MiB, s.growth_bytes // MiB)
            for s in m.per_step] == [(1, 300, 150, 0), (2, 350, 160, 10), (3, 250, 175, 15)]
    row = a.devices().iloc[0]  # the notebook view carries the same figures
    assert (row["memory_peak_allocated_bytes"], row["memory_peak_reserved_bytes"], row["memory_total_bytes"]) == (
        350 * MiB, 500 * MiB, TOTAL)
    assert row["memory_peak_allocated_fraction"] == pytest.approx(0.35)
    assert row["memory_headroom_fraction"] == pytest.approx(0.5)
    assert m.growth_per_step_bytes == pytest.approx(12.5 * MiB)  # median of 10 and 15 MiB
    s = gpu_series(a)
    assert s["allocated_bytes"][1] == 300 * MiB and s["reserved_bytes"][-1] == 450 * MiB
    assert s["t_us"][0] == pytest.approx(-100.0)  # 900 us: 100 us before the window start
    assert a.ranks[0].host_memory is None


def test_step_without_samples_holds_the_state_carried_in(tmp_path):
    a = analyze(gpu_trace([(1100, 300 * MiB, 300 * MiB), (1800, 200 * MiB, 300 * MiB)]), tmp_path / "t.json")
    assert [(s.peak_allocated_bytes // MiB, s.end_allocated_bytes // MiB) for s in gpu_memory(a).per_step] == [
        (300, 200), (200, 200), (200, 200)]
    # step 2 only frees: its peak is what it held from its start until the release
    b = analyze(gpu_trace([(1900, 300 * MiB, 300 * MiB), (2500, 100 * MiB, 300 * MiB)]), tmp_path / "u.json")
    assert [(s.peak_allocated_bytes // MiB, s.end_allocated_bytes // MiB) for s in gpu_memory(b).per_step] == [
        (300, 300), (300, 100), (100, 100)]


def test_no_reserved_total_and_no_device_total(tmp_path):
    t = gpu_trace([(1100, 10 * MiB, None), (1200, 30 * MiB, None)], total=None)
    a = analyze(t, tmp_path / "t.json")
    m = gpu_memory(a)
    assert m.peak_allocated_bytes == 30 * MiB
    assert m.peak_reserved_bytes is None and m.total_bytes is None
    assert m.peak_allocated_fraction is None and m.headroom_fraction is None
    assert gpu_series(a)["reserved_bytes"] is None


def test_headroom_uses_allocated_without_reserved(tmp_path):
    m = gpu_memory(analyze(gpu_trace([(1100, 250 * MiB, None)]), tmp_path / "t.json"))
    assert m.headroom_fraction == pytest.approx(0.75)


def test_cpu_memory_is_kept_apart_from_the_gpu(tmp_path):
    t = gpu_trace([(1100, 10 * MiB, 20 * MiB)])
    mem(t, 1200, 900 * MiB, 0, device_type=0, device=-1)
    mem(t, 2500, 800 * MiB, 0, device_type=0, device=-1)
    a = analyze(t, tmp_path / "t.json")
    assert gpu_memory(a).peak_allocated_bytes == 10 * MiB
    h = a.ranks[0].host_memory
    assert h.peak_allocated_bytes == 900 * MiB and h.samples == 2
    assert h.total_bytes is None and h.peak_reserved_bytes is None  # the host has no caching allocator
    assert PRESSURE not in memory_findings(a)


def test_memory_device_numbered_differently_from_the_work_gpu(tmp_path):
    t = KinetoTrace()
    t.header["deviceProperties"] = [{"id": 0, "totalGlobalMem": TOTAL}, {"id": 3, "totalGlobalMem": TOTAL}]
    t.step(1, 1000, 1000)
    t.launched(1010, 5, 1020, 500, device=3)
    mem(t, 1100, 100 * MiB, 120 * MiB, device=0)
    a = analyze(t, tmp_path / "t.json")
    assert [d.index for d in a.ranks[0].devices] == [3]
    assert gpu_memory(a, 3).peak_allocated_bytes == 100 * MiB


def test_gpu_memory_without_gpu_work_is_said(tmp_path):
    t = KinetoTrace()
    t.step(1, 1000, 1000)
    t.host("aten::mm", 1100, 100)
    mem(t, 1100, 100 * MiB, 120 * MiB, device=0)  # a CUDA model profiled with the CPU activity only
    a = analyze(t, tmp_path / "t.json")
    assert a.ranks[0].devices == () and a.ranks[0].host_memory is None
    assert any("memory events of cuda:0 not reported" in w for w in a.warnings)


def test_series_is_bounded_and_keeps_the_peak(tmp_path):
    n = 5 * MAX_SERIES_POINTS
    allocs = [(1000 + i * 0.5, (i % 97) * MiB, 200 * MiB) for i in range(n)]
    allocs[1234] = (allocs[1234][0], 999 * MiB, 999 * MiB)
    a = analyze(gpu_trace(allocs, steps=3, step_us=1000), tmp_path / "t.json")
    m, s = gpu_memory(a), gpu_series(a)
    assert m.samples == n
    assert len(s["t_us"]) <= MAX_SERIES_POINTS
    assert max(s["allocated_bytes"]) == 999 * MiB == m.peak_allocated_bytes
    assert s["t_us"] == sorted(s["t_us"])


# --- findings --------------------------------------------------------------------------------------------
def test_pressure_finding(tmp_path):
    a = analyze(gpu_trace([(1100, 900 * MiB, 960 * MiB)]), tmp_path / "t.json")
    f = memory_findings(a)
    assert set(f) == {PRESSURE}
    p = f[PRESSURE]
    assert p.cause is None and p.severity == "high"
    assert p.figures["peak_fraction"] == pytest.approx(0.96)
    assert p.figures["total_bytes"] == TOTAL and p.figures["peak_reserved_bytes"] == 960 * MiB
    assert "96%" in p.title and "checkpoint" in " ".join(p.advice)
    just_below = analyze(gpu_trace([(1100, 800 * MiB, int(MEMORY_PRESSURE_FRACTION * TOTAL) - 1)]),
                         tmp_path / "u.json")
    assert memory_findings(just_below) == {}


def test_headroom_finding(tmp_path):
    a = analyze(gpu_trace([(1100, 300 * MiB, 400 * MiB)]), tmp_path / "t.json")
    h = memory_findings(a)[HEADROOM]
    assert h.figures["headroom_fraction"] == pytest.approx(1 - MEMORY_HEADROOM_MAX_USED_FRACTION)
    assert h.title.startswith("Headroom 60%") and "batch" in h.title
    over = analyze(gpu_trace([(1100, 300 * MiB, 401 * MiB)]), tmp_path / "u.json")
    assert HEADROOM not in memory_findings(over)


def test_headroom_is_not_said_when_allocator_bound(tmp_path):
    t = gpu_trace([(1100, 100 * MiB, 100 * MiB)])
    tl = kineto.read_path(t.write(tmp_path / "t.json"), ReadOptions())
    fig = figures_of(tl)
    rd = diagnose(fig).ranks[0]
    plain = replace(rd, findings=())
    assert [f.id for f in add_memory_findings(plain, fig.ranks[0]).findings] == [HEADROOM]
    assert add_memory_findings(replace(plain, primary=ALLOCATOR_BOUND), fig.ranks[0]).findings == ()


def _leaky(growth: list[int]) -> list[tuple[float, int, int]]:
    out, end = [], 100 * MiB
    for i, g in enumerate([0, *growth]):
        end += g
        out += [(1000 + i * 1000 + 300, end + 50 * MiB, 600 * MiB), (1000 + i * 1000 + 900, end, 600 * MiB)]
    return out


def test_leak_finding_when_memory_grows_every_step(tmp_path):
    # six real steps (ProfilerStep markers), 2 MiB more left allocated at the end of each: five changes
    a = analyze(gpu_trace(_leaky([2 * MiB] * 5), steps=6), tmp_path / "t.json")
    m = gpu_memory(a)
    assert m.growth_per_step_bytes == 2 * MiB
    f = memory_findings(a)[LEAK]
    assert f.figures["growth_per_step_bytes"] == 2 * MiB and f.figures["steps"] == 6
    assert f.figures["grown_bytes"] == 2 * MiB * 5
    assert f.figures["steps_to_full"] == round((TOTAL - (100 + 2 * 5) * MiB) / (2 * MiB))
    assert f.severity == "high" and ".item()" in " ".join(f.advice)


@pytest.mark.parametrize("steps, found", [(4, False), (MEMORY_LEAK_MIN_STEPS, True), (6, True)])
def test_a_leak_needs_five_real_steps(tmp_path, steps, found):
    # the same growth every step: found over at least MEMORY_LEAK_MIN_STEPS (5) steps, not over 4
    a = analyze(gpu_trace(_leaky([2 * MiB] * (steps - 1)), steps=steps), tmp_path / "t.json")
    assert a.ranks[0].steps == steps
    assert (LEAK in memory_findings(a)) is found


def test_no_leak_when_one_step_does_not_grow(tmp_path):
    flat_once = [2 * MiB] * 4 + [0, 2 * MiB]  # seven steps, one of them back to where it was
    a = analyze(gpu_trace(_leaky(flat_once), steps=len(flat_once) + 1), tmp_path / "t.json")
    assert LEAK not in memory_findings(a)


def test_no_memory_events_no_memory(tmp_path):
    a = analyze(gpu_trace([]), tmp_path / "t.json")
    assert a.ranks[0].devices[0].memory is None and a.ranks[0].host_memory is None
    assert memory_findings(a) == {}
    assert "Memory" not in render_text(a) and "### Memory" not in render_markdown(a)
    assert 'id="memory"' not in render_html(a)


# --- every format ------------------------------------------------------------------------------------------
def test_memory_in_every_format(tmp_path):
    t = gpu_trace([(1100, 300 * MiB, 400 * MiB), (2100, 350 * MiB, 450 * MiB)])
    mem(t, 1200, 3 * MiB, 0, device_type=0, device=-1)
    a = analyze(t, tmp_path / "t.json")
    data = a.to_data()
    m = data["ranks"][0]["devices"][0]["memory"]
    assert (m["peak_allocated_bytes"], m["peak_reserved_bytes"], m["total_bytes"]) == (350 * MiB, 450 * MiB, TOTAL)
    assert data["ranks"][0]["host_memory"]["peak_allocated_bytes"] == 3 * MiB
    a.save(tmp_path / "r.json")
    assert ta.load(tmp_path / "r.json").ranks[0].devices[0].memory == a.ranks[0].devices[0].memory
    md = render_markdown(a)
    assert "### Memory" in md and "| cuda:0 | 300.0 MiB |" not in md
    assert "| 350.0 MiB | 450.0 MiB | 1000.0 MiB | 35.0% | 55.0% |" in md
    assert "host (CPU)" in md
    text = render_text(a)
    assert "cuda:0: peak 350.0 MiB allocated, 450.0 MiB reserved of 1000.0 MiB" in text
    assert all(len(line) <= 80 for line in text.splitlines())
    page = render_html(a)
    assert '<section id="memory">' in page and 'class="mem-allocated"' in page and 'class="mem-total"' in page
    assert "host (CPU)" in page and 'class="mem-reserved"' in page


# --- a real torch 2.13 CPU trace (sample_traces/make_torch_memory.py) ----------------------------------------
def _json_reference(path: Path, device_type: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Memory events of one device type and the ProfilerStep spans, straight from the JSON."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    events = doc["traceEvents"]
    memory = [e for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == device_type]
    steps = sorted((e for e in events if e.get("ph") == "X" and str(e.get("name")).startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    return memory, steps


def test_real_torch_cpu_trace_with_a_leak():
    path = SAMPLES / "torch_memory_leak.json.gz"
    side = json.loads((SAMPLES / "torch_memory_leak.expected.json").read_text())
    memory, steps = _json_reference(path, 0)
    values = [e["args"]["Total Allocated"] for e in memory]
    a = ta.analyze(path)
    h = a.ranks[0].host_memory
    assert a.ranks[0].devices == ()  # a CPU trace: host memory only
    assert h.samples == len(memory)
    assert h.peak_allocated_bytes == max(values)
    # per step: the last value at or before the step's end, from the JSON
    ends = [[e["args"]["Total Allocated"] for e in memory if e["ts"] <= s["ts"] + s["dur"]][-1] for s in steps]
    assert [s.end_allocated_bytes for s in h.per_step] == ends
    assert len(h.per_step) == side["active_steps"]
    growth = np.diff(ends)
    assert (growth >= side["leak_bytes_per_step"]).all()
    assert h.growth_per_step_bytes == float(np.median(growth))
    f = memory_findings(a)[LEAK]
    assert f.figures["growth_per_step_bytes"] >= side["leak_bytes_per_step"]
    assert "host" in f.title


def test_real_torch_cpu_trace_steady():
    path = SAMPLES / "torch_memory_steady.json.gz"
    memory, steps = _json_reference(path, 0)
    a = ta.analyze(path)
    h = a.ranks[0].host_memory
    assert abs(h.peak_allocated_bytes - max(e["args"]["Total Allocated"] for e in memory)) == 0
    assert h.growth_per_step_bytes == 0.0
    assert memory_findings(a) == {}


# --- real GPU traces of the corpus ----------------------------------------------------------------------------
def _corpus_reference(path: Path) -> tuple[int, int, dict[int, int]]:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    gpu = [e["args"] for e in doc["traceEvents"] if e.get("name") == "[memory]"
           and e["args"].get("Device Type") in (1, 6)]
    totals = {p["id"]: p["totalGlobalMem"] for p in doc.get("deviceProperties", [])}
    return max(a["Total Allocated"] for a in gpu), max(a["Total Reserved"] for a in gpu), totals


@pytest.mark.slow
def test_corpus_v100_memory_and_headroom(corpus):
    path = corpus / "hta_df_index_resolver" / "df_index_resolver.json.gz"
    peak_alloc, peak_res, totals = _corpus_reference(path)
    a = ta.analyze(path)
    (d,) = a.ranks[0].devices
    m = d.memory
    assert m.peak_allocated_bytes == peak_alloc and m.peak_reserved_bytes == peak_res
    assert m.total_bytes == totals[d.index]
    assert m.headroom_fraction == pytest.approx(1 - peak_res / totals[d.index], abs=1e-6)
    assert m.growth_per_step_bytes == 0.0  # steady training: the same bytes at every step's end
    assert HEADROOM in memory_findings(a) and LEAK not in memory_findings(a)


@pytest.mark.slow
def test_corpus_rocm_memory_pressure(corpus):
    """ROCm writes its GPU's memory events with device type 6 (HIP), numbered apart from the kernels."""
    path = corpus / "tl_vllm_graph_capture" / "graph_capture_rank_0.1773709742341309550.pt.trace.json.gz"
    peak_alloc, peak_res, totals = _corpus_reference(path)
    a = ta.analyze(path)
    (d,) = a.ranks[0].devices
    m = d.memory
    assert m.peak_allocated_bytes == peak_alloc and m.peak_reserved_bytes == peak_res
    assert m.total_bytes in totals.values()
    f = memory_findings(a)[PRESSURE]
    assert f.figures["peak_fraction"] == pytest.approx(peak_res / m.total_bytes, abs=1e-6)
    assert f.figures["peak_fraction"] >= MEMORY_PRESSURE_FRACTION
    assert HEADROOM not in memory_findings(a)


def test_timeline_contract_checks_memory():
    tl = T.Timeline()
    tl.memory = tl.memory.astype({"device": "int64"})
    with pytest.raises(T.TimelineError):
        tl.validate()


# --- every generation of [memory] events --------------------------------------------------------------
def test_2021_memory_events_without_totals_draw_a_curve_from_their_sizes(tmp_path):
    """PyTorch 1.8/1.9 wrote [memory] instants without a category and without totals: only Device Type,
    Device Id, Addr and Bytes. The allocated curve is their running sum per device, from 0 at the start."""
    t = KinetoTrace()
    t.header["deviceProperties"] = [{"id": 0, "name": "Tesla V100", "totalGlobalMem": TOTAL}]
    for i in range(3):
        t.step(i + 1, 1000 + i * 1000, 1000)
        t.launched(1000 + i * 1000 + 10, 5, 1000 + i * 1000 + 20, 500)
    sizes = [(1100, 1, 0, 8 * MiB), (1200, 1, 0, 4 * MiB), (1300, 1, 0, -8 * MiB), (2100, 1, 0, 16 * MiB),
             (2200, 1, 0, -4 * MiB), (3100, 0, -1, 4096), (3200, 1, 0, -16 * MiB), (3300, 1, 0, 2 * MiB)]
    for ts, dtype, dev, nbytes in sizes:
        t.events.append({"ph": "i", "s": "t", "name": "[memory]", "pid": str(HOST_PID), "tid": str(HOST_TID),
                         "ts": ts, "args": {"Device Type": dtype, "Device Id": dev, "Addr": 7 + ts,
                                            "Bytes": nbytes}})
    path = t.write(tmp_path / "t2021.json")
    for typed in (True, False):
        tl = kineto.read_path(path, ReadOptions(), typed=typed)
        gpu = tl.memory[tl.memory["device_type"].astype(str) == "cuda"]
        # running sums: 8, 12, 4, 20, 16, 0, 2 MiB
        assert gpu["allocated_bytes"].tolist() == [v * MiB for v in (8, 12, 4, 20, 16, 0, 2)]
        assert (gpu["reserved_bytes"] == -1).all()
        assert tl.memory[tl.memory["device_type"].astype(str) == "cpu"]["allocated_bytes"].tolist() == [4096]
        assert "memory_event_unusable" not in tl.sources[0].not_kept
        assert any("8 [memory] events carry no 'Total Allocated'" in w for w in tl.sources[0].warnings)
        assert tl.ranks[0].memory_from_sizes
    a = ta.analyze(path, ta.Options(cache=False))
    m = gpu_memory(a)
    assert m.peak_allocated_bytes == 20 * MiB
    assert m.total_bytes is None  # a relative curve says nothing of how full the device was
    assert [s.end_allocated_bytes for s in m.per_step] == [4 * MiB, 16 * MiB, 2 * MiB]
    assert PRESSURE not in memory_findings(a) and HEADROOM not in memory_findings(a)
    assert gpu_series(a)["allocated_bytes"][-1] == 2 * MiB


def test_memory_sizes_freeing_what_was_allocated_before_the_capture_stay_at_or_above_zero(tmp_path):
    t = gpu_trace([])
    for ts, nbytes in ((1100, -6 * MiB), (1200, 2 * MiB), (1300, -1 * MiB)):
        t.events.append({"ph": "i", "s": "t", "name": "[memory]", "pid": HOST_PID, "tid": HOST_TID, "ts": ts,
                         "args": {"Device Type": 1, "Device Id": 0, "Bytes": nbytes}})
    tl = kineto.read_path(t.write(tmp_path / "t.json"), ReadOptions())
    # -6, -4, -5 MiB raised by the 6 MiB freed before the capture: 0, 2, 1
    assert tl.memory["allocated_bytes"].tolist() == [0, 2 * MiB, 1 * MiB]


def test_inference_pressure_is_the_engine_s_reservation_not_training_advice(tmp_path):
    """An inference rank (no backward, no optimizer, WORKLOAD_MIN_OPS framework ops) at 96% of its memory: the
    engine's KV-cache reservation is by design, said at low severity, and no activation checkpointing is advised."""
    t = gpu_trace([(1100, 900 * MiB, 960 * MiB)])
    for i in range(WORKLOAD_MIN_OPS):
        t.host("aten::linear", 1000 + i, 0.5)
    f = memory_findings(analyze(t, tmp_path / "serve.json"))[PRESSURE]
    assert f.severity == "low"
    advice = " ".join(f.advice)
    assert "KV cache" in advice and "checkpoint" not in advice

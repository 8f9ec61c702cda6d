"""Every Kineto-like file in the corpus is read or rejected with a clear message, and on every
trace with GPU activity our figures agree with a slow, obviously correct reference computed
here from the raw JSON (plain Python, no traceanalyzer code)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from conftest import kineto_corpus_files
from timelines import load_paths

from traceanalyzer.errors import InputError
from traceanalyzer.formats import ReadOptions
from traceanalyzer.pipeline import Options, analyze

pytestmark = pytest.mark.slow  # every corpus trace: runs with the full suite

GPU_WORK = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}
LOADER = re.compile(r"^enumerate\(DataLoader\)#.*__next__$")
# Files the corpus manifest marks as not being Chrome traces (negative tests).
NOT_TRACES = ("benchmark_simple_add_et", "memory_timeline", "908_results", "data_tpu-training", "ground_truth",
              "framework_op_stats", "input_pipeline_analyzer", "overview_page")


def load_raw(path: Path):
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rb") as fh:
        return json.load(fh)


def union_length(intervals, lo, hi):
    """Sweep over sorted intervals, clipped to [lo, hi): the length covered."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted((max(s, lo), min(e, hi)) for s, e in intervals):
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def reference(doc):
    """Per device: window, busy fraction; per rank: dataloader fraction (all in us)."""
    xs = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in xs if e.get("cat") in ("user_annotation", "Operator", "cpu_op")
             and re.match(r"^ProfilerStep#\d+$", str(e.get("name")))]
    work = {}
    for e in xs:
        if e.get("cat") in GPU_WORK:
            dev = e.get("args", {}).get("device", e.get("pid"))
            work.setdefault(int(dev), []).append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))))
    out = {}
    for dev, ivs in work.items():
        if steps:
            lo = min(float(e["ts"]) for e in steps)
            hi = max(float(e["ts"]) + float(e["dur"]) for e in steps)
        else:
            lo, hi = min(s for s, _ in ivs), max(e for _, e in ivs)
        out[dev] = (hi - lo, union_length(ivs, lo, hi) / (hi - lo) if hi > lo else None)
    loader = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in xs
              if e.get("cat") in ("user_annotation", "Operator", "cpu_op") and LOADER.match(str(e.get("name")))]
    if steps:
        lo = min(float(e["ts"]) for e in steps)
        hi = max(float(e["ts"]) + float(e["dur"]) for e in steps)
        dl = union_length(loader, lo, hi) / (hi - lo)
    else:
        dl = None
    return out, dl


FILES = [p for p in kineto_corpus_files() if "xprof_converted" not in p.parts and "tf" not in p.parts[-2][:9]]


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_corpus_file_read_or_rejected(path):
    if any(tag in path.name for tag in NOT_TRACES):
        with pytest.raises(InputError) as exc:
            load_paths([path], ReadOptions())
        msg = str(exc.value)
        assert str(path) in msg and "\n" not in msg and ("not a trace" in msg or "expected" in msg)
        return
    tl = load_paths([path], ReadOptions())
    report = analyze(tl, Options(min_gap_ns=0, diagnose=False)).to_data()
    (rank,) = report["ranks"]
    ref_devices, ref_dl = reference(load_raw(path))
    ours = {d["index"]: d for d in rank["devices"]}
    assert set(ours) == set(ref_devices)
    detected = (rank.get("step_source") or {}).get("kind") == "detected"
    for dev, (window_us, busy_frac) in ref_devices.items():
        d = ours[dev]
        if detected:  # the window is the detected steps' span: from the first step's first launch, before its GPU work
            assert window_us - 0.01 <= d["window_us"] <= window_us * 1.01 + 1000
        else:
            assert d["window_us"] == pytest.approx(window_us, rel=1e-6, abs=0.01)
        if busy_frac is not None:
            assert d["gpu_busy_us"] == pytest.approx(busy_frac * window_us, rel=0.001, abs=0.01)
            # with --min-gap 0 the gaps add up to window - busy
            assert d["gaps"]["total_us"] == pytest.approx(d["window_us"] - d["gpu_busy_us"], abs=0.01)
    if ref_dl is not None:
        assert rank["dataloader_wait_fraction"] == pytest.approx(ref_dl, abs=0.001)


def test_corpus_has_files(corpus):
    assert len(FILES) >= 30


@pytest.mark.parametrize("vendor", ["h100", "mi300"])
def test_tracelens_reference_busy_idle(corpus, vendor):
    """With TraceLens' window (the GPU-side ProfilerStep span), busy and idle match its CSVs
    within 1%: a check of the interval algebra against an independent tool."""
    from traceanalyzer import timeline as T
    from traceanalyzer.analyses import figures as F

    folder = corpus / f"tl_{vendor}"
    checked = 0
    for csv in sorted(folder.glob("*.gpu_timeline.csv")):
        trace = csv.with_name(csv.name.replace(".gpu_timeline.csv", ".json.gz"))
        rows = dict(line.split(",")[:2] for line in csv.read_text().splitlines()[1:])
        tl = load_paths([trace])
        ev = tl.events
        ann = ev[(ev["kind"] == T.GPU_ANNOTATION).to_numpy() & ev["name"].astype(str).str.startswith("ProfilerStep#").to_numpy()]
        assert len(ann), "the GPU-side ProfilerStep annotation is missing"
        lo = int(ann["ts_ns"].min())
        hi = int((ann["ts_ns"] + ann["dur_ns"]).max())
        device = tl.device_indices(0)[0]
        busy = F.device_busy(tl, 0, device, F.Window(lo, hi, "custom"))
        assert (hi - lo) / 1e6 == pytest.approx(float(rows["total_time"]), rel=0.01)
        assert busy.busy_ns / 1e6 == pytest.approx(float(rows["busy_time"]), rel=0.01)
        assert (hi - lo - busy.busy_ns) / 1e6 == pytest.approx(float(rows["idle_time"]), rel=0.01)
        checked += 1
    assert checked == 5

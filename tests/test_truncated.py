"""Truncated and partial captures: a trace cut before its GPU events says so and gives no GPU advice.

Kineto writes the host's events first and the GPU's activity last, so a file cut mid-way keeps only
host events. The report must then say "GPU events lost to truncation: N GPUs listed, none of their
activity survived", never "no GPU activity", and never advise moving the model to a GPU.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import numpy as np
import pytest

import traceanalyzer as ta
from tests import cut_truth
from tests.conftest import CORPUS, corpus_path
from tests.kineto_builder import KinetoTrace

GPU_PLACEMENT = "move the model"
NO_GPU = "no GPU activity"


def _kineto_order_trace() -> KinetoTrace:
    """Three steps of host ops and launches, then the GPU activity, in the order Kineto writes them:
    the host's events first, the GPU's last. The header lists two GPUs."""
    t = KinetoTrace()
    t.header["deviceProperties"] = [{"id": 0, "name": "Test GPU"}, {"id": 1, "name": "Test GPU"}]
    kernels = []
    for i in range(3):
        start = 1_000_000 + i * 10_000
        t.host(f"ProfilerStep#{i + 1}", start, 9_000, cat="user_annotation")
        t.host("aten::mm", start + 100, 8_000)
        for k in range(10):
            t.runtime("cudaLaunchKernel", start + 200 + k * 700, 20, correlation=100 + i * 10 + k)
            kernels.append({"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7,
                            "ts": start + 300 + k * 700, "dur": 600,
                            "args": {"device": 0, "stream": 7, "correlation": 100 + i * 10 + k}})
    t.events += kernels
    return t


def _cut(data: bytes, fraction: float, path: Path) -> Path:
    path.write_bytes(data[:int(len(data) * fraction)])
    return path


def _texts(a: ta.Analysis) -> str:
    """What a reader is told: the summary, the Markdown report, and the diagnosis and ranks in JSON (the
    definitions, which quote "no GPU activity" as what a CPU-only trace says, are left out)."""
    data = a.to_data()
    return a.to_text() + a.to_markdown() + json.dumps([data["diagnosis"], data["ranks"]])


def test_cut_before_gpu_events_says_they_were_lost(tmp_path):
    data = json.dumps(_kineto_order_trace().document(), indent=1).encode()
    # The first kernel starts after 45% of the bytes: a cut at 30% keeps host events and launches only.
    assert data.find(b'"kernel"') > 0.45 * len(data)
    cut = _cut(data, 0.30, tmp_path / "cut.json")
    kept = cut.read_bytes()
    launches = kept[:kept.rfind(b"\n  }")].count(b"cudaLaunchKernel")  # in the events complete before the cut
    assert 0 < launches < 30
    a = ta.analyze(cut, ta.Options(cache=False, find_logs_beside=False))
    (r,) = a.ranks
    assert r.devices == ()
    assert r.capture is not None
    assert r.capture.gpus_listed == 2 and r.capture.gpu_events_lost is True
    assert r.capture.note == (f"GPU events lost to truncation: 2 GPUs listed, none of their activity survived "
                              f"({launches} GPU launches recorded by the host)")
    text = _texts(a)
    assert GPU_PLACEMENT not in text and NO_GPU not in text
    assert "GPU events lost to truncation: 2 GPUs listed, none of their activity survived" in a.to_text()
    assert a.diagnosis.findings[0].id == "capture_incomplete"
    assert "GPU events lost" in a.to_markdown()
    assert "GPU events lost to truncation" in a.to_html()


def test_cut_inside_gpu_events_is_noted_and_keeps_what_survived(tmp_path):
    data = json.dumps(_kineto_order_trace().document(), indent=1).encode()
    a = ta.analyze(_cut(data, 0.80, tmp_path / "cut.json"), ta.Options(cache=False, find_logs_beside=False))
    (r,) = a.ranks
    assert [d.device for d in r.devices] == ["cuda:0"]
    assert r.capture is not None and r.capture.gpu_events_lost is False
    assert r.capture.note.startswith("GPU events partly lost to truncation: the CUDA record is complete for the "
                                     "first ")
    assert any(f.id == "capture_incomplete" for f in a.diagnosis.findings)
    # the figures are the window's that survived: the steps whose kernels all survived, nothing after the cut
    survived = [s for s in r.per_step if s.gpu_busy_us == 10 * 600]
    assert r.steps == len(r.per_step) == len(survived) >= 1
    assert all(d.gpu_idle_fraction < 0.4 for d in r.devices)
    assert "The file was cut: these figures cover the " in a.diagnosis.headline


def test_whole_trace_has_no_capture_note(tmp_path):
    path = _kineto_order_trace().write(tmp_path / "whole.json")
    a = ta.analyze(path, ta.Options(cache=False, find_logs_beside=False))
    (r,) = a.ranks
    assert r.capture is None  # nothing missing: nothing to say
    assert len(r.devices) == 1
    assert not any(f.id == "capture_incomplete" for f in a.diagnosis.findings)


def test_cpu_only_trace_still_says_no_gpu_activity(tmp_path):
    """The control: a whole host-only capture whose header lists no GPU is a CPU run, said so."""
    t = KinetoTrace()
    t.header["deviceProperties"] = []
    for i in range(3):
        t.host(f"ProfilerStep#{i + 1}", 1000 + i * 10_000, 9_000, cat="user_annotation")
        t.host("aten::mm", 1100 + i * 10_000, 8_000)
    a = ta.analyze(t.write(tmp_path / "cpu.json"), ta.Options(cache=False, find_logs_beside=False))
    assert a.ranks[0].capture is None
    assert "no GPU activity in this trace" in a.to_text()


def test_launches_without_any_gpu_activity_are_missing_events(tmp_path):
    """A whole trace whose host launched kernels but holds none of their activity lost it too."""
    t = _kineto_order_trace()
    t.events = [e for e in t.events if e["cat"] != "kernel"]
    a = ta.analyze(t.write(tmp_path / "nokernels.json"), ta.Options(cache=False, find_logs_beside=False))
    c = a.ranks[0].capture
    assert c is not None and c.gpu_events_lost is True
    assert c.note.startswith("GPU events missing: 2 GPUs listed, 30 GPU launches recorded by the host")
    assert GPU_PLACEMENT not in _texts(a)


def _gpu_traces() -> list[Path]:
    """Corpus Kineto traces with GPU activity (by their manifest: kineto-json with a GPU named)."""
    manifest = CORPUS / "MANIFEST.tsv"
    if not manifest.is_file():
        return []
    out = []
    for line in manifest.read_text().splitlines()[1:]:
        cols = line.split("\t")
        if len(cols) > 8 and cols[7] == "kineto-json" and not cols[8].startswith(("none", "Meta MTIA")):
            out.append(CORPUS / cols[1])
    return sorted(set(out))


@pytest.mark.slow
@pytest.mark.parametrize("fraction", [0.3, 0.9])  # 0.4/0.6/0.8: the cut-truth tests
def test_corpus_traces_cut_never_say_no_gpu_or_advise_a_gpu(tmp_path, fraction):
    """Every GPU trace of the corpus is cut once, early (0.3) or late (0.9), by turns."""
    corpus_path()
    checked = 0
    for i, path in enumerate(_gpu_traces()):
        if (i % 2 == 0) != (fraction < 0.5):
            continue
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        full_has_gpu = b'"kernel"' in data or b'"Kernel"' in data or b'"gpu_memcpy"' in data
        if not full_has_gpu:
            continue
        cut = _cut(data, fraction, tmp_path / f"{path.stem}.cut.json")
        a = ta.analyze(cut, ta.Options(cache=False, find_logs_beside=False))
        for r in a.ranks:
            lists_gpus = r.capture is not None and r.capture.gpus_listed > 0
            if lists_gpus or not r.devices:
                text = a.to_text() + a.to_markdown()
                assert GPU_PLACEMENT not in text, (path, fraction)
                assert NO_GPU not in text, (path, fraction)
            if not r.devices:
                assert r.capture is not None and r.capture.gpu_events_lost, (path, fraction)
        checked += 1
        cut.unlink()
    assert checked >= 10


@pytest.mark.parametrize("tail", [
    b'{"ph": "X", "name": "b", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 100.',  # inside a number
    b'{"ph": "X", "name": "k", "cat": "kernel", "pid": 0, "tid": 7, "ts": 120, "dur": 5, '
    b'"args": {"grid": [1, 1, 1], "block": [128, 1, 1], "occupancy": 0}',  # just after an event's args
])
def test_cut_anywhere_keeps_the_complete_events(tmp_path, tail):
    head = (b'{"deviceProperties": [{"id": 0}], "traceEvents": [{"ph": "X", "name": "ProfilerStep#1", '
            b'"cat": "user_annotation", "pid": 1, "tid": 1, "ts": 100, "dur": 50}, ')
    path = tmp_path / "cut.json"
    path.write_bytes(head + tail)
    a = ta.analyze(path, ta.Options(cache=False, find_logs_beside=False))
    (inp,) = a.inputs
    assert inp.events_read == 1
    assert a.ranks[0].capture.note.startswith("GPU events lost to truncation: 1 GPU listed, none of their")


def test_log_picked_up_beside_the_trace_is_named_in_the_summary_line(tmp_path):
    trace = _kineto_order_trace().write(tmp_path / "run.json")
    (tmp_path / "run.gpu.csv").write_text("timestamp, index, utilization.gpu [%]\n"
                                          + "".join(f"2024/01/15 09:12:{s:02d}.000, 0, 50 %\n" for s in range(5)))
    a = ta.analyze(trace, ta.Options(cache=False))
    first = a.to_text().splitlines()[0]
    assert first.startswith("traceanalyzer ") and ": 2 input(s), 1 rank(s), with nvidia-smi log" in a.to_text()
    assert "run.gpu.csv" in " ".join(a.to_text().splitlines()[:2])
    named = ta.analyze([trace, tmp_path / "run.gpu.csv"], ta.Options(cache=False))
    assert "picked up" not in named.to_text()  # named on the command line: nothing implicit to say


def _idle_truth(doc: dict, device: int, lo_ns: int, hi_ns: int) -> float:
    """The idle share of [lo_ns, hi_ns) on one device from a whole trace's GPU events (plain numpy: the union
    of kernels, copies and memsets clipped to the window)."""
    work = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
            and (e.get("args") or {}).get("device") == device]
    start = np.clip(np.array([e["ts"] for e in work], dtype=np.float64) * 1000, lo_ns, hi_ns)
    end = np.clip(start + np.array([e["dur"] for e in work], dtype=np.float64) * 1000, lo_ns, hi_ns)
    order = np.argsort(start)
    start, reach = start[order], np.maximum.accumulate(end[order])
    first = np.r_[True, start[1:] > reach[:-1]]  # a new run of overlapping work starts here
    last = np.r_[np.flatnonzero(first)[1:] - 1, len(start) - 1]
    busy = float((reach[last] - start[first]).sum())
    return 1 - busy / (hi_ns - lo_ns)


def test_gzip_cut_at_60_percent_reports_the_window_that_survived(tmp_path):
    """A real trace whose gzip is cut at 60%: Kineto wrote its CUDA record buffer by buffer, so the cut loses
    most of the capture's middle and end. The figures are those of the window before the cut: the device's
    idle share there matches the whole trace's over the same window, and the verdict says how much was lost."""
    full = corpus_path() / "hta_nccl/nccl_data.json.gz"
    packed = full.read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(packed[: int(len(packed) * 0.6)])
    doc = json.loads(gzip.decompress(packed))
    a = ta.analyze(cut, ta.Options(cache=False, find_logs_beside=False))
    (r,) = a.ranks
    (d,) = r.devices
    c = r.capture
    assert c is not None and c.note.startswith("GPU events partly lost to truncation: the CUDA record is complete for "
                                               "the first ")
    lo, hi = d.window_start_ns, d.window_start_ns + round(d.window_us * 1000)
    whole = ta.analyze(full, ta.Options(cache=False, find_logs_beside=False)).ranks[0]
    assert d.window_us < 0.5 * whole.window_us  # most of the capture was lost: out of the figures
    truth = _idle_truth(doc, 0, lo, hi)
    assert d.gpu_idle_fraction == pytest.approx(truth, abs=0.1)
    # nothing after the cut: no gap longer than the window, no step beyond it
    assert d.gaps.largest_us <= d.window_us and all(s.start_us * 1000 < d.window_us * 1000 for s in r.per_step)
    assert "The file was cut: these figures cover the " in a.diagnosis.headline


# --- a record written buffer by buffer, not in time order, cut at a known event --------------------------------
STEP_US, STEP_RUN_US, KERNELS, KERNEL_US = 10_000, 9_500, 8, 800
T0 = 1_000_000


def _buffered_trace(steps: int = 6) -> tuple[KinetoTrace, dict[int, list[dict]], dict[int, list[dict]]]:
    """`steps` steps of host operators; each launches KERNELS kernels on stream 7 and makes one host-to-device copy
    on stream 9 (a stream busy once a step, as a data copy stream is). The host's events are the trace's events;
    the GPU record (runtime calls and GPU work) of each step is returned apart, compute and copies, for the test to
    write in the order it wants."""
    t = KinetoTrace()
    compute: dict[int, list[dict]] = {}
    copies: dict[int, list[dict]] = {}
    for i in range(steps):
        start = T0 + i * STEP_US
        t.host(f"ProfilerStep#{i + 1}", start, STEP_RUN_US, cat="user_annotation")
        t.host("aten::mm", start + 10, STEP_RUN_US - 20)
    host_events, t.events = t.events, []
    for i in range(steps):
        start = T0 + i * STEP_US
        t.copy(start + 90, 10, start + 100, 50, name="Memcpy HtoD (Pinned -> Device)", stream=9)
        copies[i] = t.events[-2:]
        t.events = []
        for k in range(KERNELS):
            t.launched(start + 150 + k * 1000, 20, start + 200 + k * 1000, KERNEL_US)
        compute[i] = t.events
        t.events = []
    t.events = host_events
    return t, compute, copies


def _write_cut(t: KinetoTrace, record: list[dict], last_kept: dict, path: Path) -> Path:
    """The trace with `record` written after the host's events, as a gzip cut just after `last_kept` (the stream is
    flushed there and never finished, as a process killed while writing leaves it)."""
    t.events = t.events + record
    text = json.dumps(t.document()).encode()
    mark = json.dumps(last_kept).encode()
    at = text.index(mark) + len(mark)
    packer = zlib.compressobj(6, zlib.DEFLATED, 31)
    path.write_bytes(packer.compress(text[:at + 2]) + packer.flush(zlib.Z_SYNC_FLUSH))
    return path


def _step_busy_us() -> int:
    return KERNELS * KERNEL_US + 50


def _kept(a: ta.Analysis) -> dict[str, float]:
    """The capture finding's figures: how much of the capture survived, was lost before it and after it (us)."""
    (f,) = [f for f in a.diagnosis.findings if f.id == "capture_incomplete"]
    return f.figures


def test_buffers_lost_at_the_start_and_end_leave_the_stretch_between(tmp_path):
    """Steps 3-4's record written first, then steps 5-6's, then steps 1-2's (Kineto hands buffers over as they
    fill, not in time order); the file is cut after step 5's record: steps 1-2 and 6 are lost. The record is trusted
    from the first GPU work launched after the hole (step 3's copy; work launched in the hole could run past it) to
    its last event (step 5's last kernel): the one step inside that stretch is step 4, the figures are its own."""
    t, compute, copies = _buffered_trace()
    order = [2, 3, 4, 5, 0, 1]
    record = [e for i in order for e in copies[i] + compute[i]]
    path = _write_cut(t, record, compute[4][-1], tmp_path / "cut.json.gz")
    a = ta.analyze(path, ta.Options(cache=False, find_logs_beside=False))
    (r,) = a.ranks
    c = r.capture
    assert c is not None and not c.gpu_events_lost
    kept_from_us, cut_us = 2 * STEP_US + 100, 4 * STEP_US + 200 + (KERNELS - 1) * 1000 + KERNEL_US
    assert c.note == (f"GPU events partly lost to truncation: the CUDA record is complete for "
                      f"{(cut_us - kept_from_us) / 1000:.1f} ms of the capture only, from {kept_from_us / 1000:.1f} ms "
                      f"into it; the {kept_from_us / 1000:.1f} ms before and the "
                      f"{(5 * STEP_US + STEP_RUN_US - cut_us) / 1000:.1f} ms after are out of every figure and of the "
                      f"verdict, which speak of the window that survived")
    assert _kept(a) == {"gpus_listed": 1, "survived_us": cut_us - kept_from_us, "lost_before_us": kept_from_us,
                        "lost_after_cut_us": 5 * STEP_US + STEP_RUN_US - cut_us}
    assert [s.step for s in r.per_step] == [4] and r.steps == 1
    (d,) = r.devices
    assert d.window_start_ns == (T0 + 3 * STEP_US) * 1000 and d.window_us == STEP_RUN_US
    assert d.gpu_idle_fraction == pytest.approx(1 - _step_busy_us() / STEP_RUN_US, abs=1e-6)
    assert d.gaps.largest_us == STEP_RUN_US - 200 - KERNELS * 1000 + (1000 - KERNEL_US)  # none made of lost buffers
    assert "The file was cut: these figures cover the 27.9 ms that survived whole; the 31.6 ms around it are " \
           "out of them." in a.diagnosis.headline


def test_a_stream_whose_buffers_were_lost_ends_the_window_there(tmp_path):
    """Every step's compute record survives, but the copy stream's record after step 2's copy was in the part the cut
    lost: after the copy stream's last surviving event the device's busy time is unknown (the copies of steps 3-6
    are missing), and the window ends there: step 1, the one step before it."""
    t, compute, copies = _buffered_trace()
    record = [e for i in range(6) for e in compute[i]] + [e for i in range(6) for e in copies[i]]
    path = _write_cut(t, record, copies[1][-1], tmp_path / "cut.json.gz")
    a = ta.analyze(path, ta.Options(cache=False, find_logs_beside=False))
    (r,) = a.ranks
    assert r.capture.note.startswith("GPU events partly lost to truncation: the CUDA record is complete for the "
                                     f"first {(STEP_US + 150) / 1000:.1f} ms of the capture only")
    # from the capture's start to the end of step 2's copy; from there to the end of step 6, lost
    assert _kept(a) == {"gpus_listed": 1, "survived_us": STEP_US + 150, "lost_after_cut_us": 4 * STEP_US + 9_350}
    assert [s.step for s in r.per_step] == [1]
    (d,) = r.devices
    assert d.window_us == STEP_RUN_US
    assert d.gpu_idle_fraction == pytest.approx(1 - _step_busy_us() / STEP_RUN_US, abs=1e-6)


def test_a_stream_busy_once_a_step_is_not_taken_for_a_lost_one(tmp_path):
    """The control: the copy stream falls silent for most of every step. Cut after step 4's last kernel, the record
    ends there; the copy stream's silence after step 4's copy is shorter than those between its copies: nothing of it
    was lost, the record is trusted up to its last kernel (not its last copy), and every step before has all its
    work."""
    t, compute, copies = _buffered_trace()
    record = [e for i in range(6) for e in copies[i] + compute[i]]
    path = _write_cut(t, record, compute[3][-1], tmp_path / "cut.json.gz")
    a = ta.analyze(path, ta.Options(cache=False, find_logs_beside=False))
    (r,) = a.ranks
    kept = 3 * STEP_US + 200 + (KERNELS - 1) * 1000 + KERNEL_US
    assert _kept(a) == {"gpus_listed": 1, "survived_us": kept, "lost_after_cut_us": 5 * STEP_US + STEP_RUN_US - kept}
    assert [s.step for s in r.per_step] == [1, 2, 3]  # step 4 runs on after its last kernel: not whole
    assert all(s.gpu_busy_us == _step_busy_us() for s in r.per_step)
    (d,) = r.devices
    assert d.gpu_idle_fraction == pytest.approx(1 - 3 * _step_busy_us() / (2 * STEP_US + STEP_RUN_US), abs=1e-6)


def test_work_launched_in_a_lost_buffer_is_out_of_the_stretch(tmp_path):
    """The host runs 15 ms (1.5 steps) ahead of the GPU; the runtime calls and the GPU work are written in buffers
    of their own (runtime calls of steps 3-6, the work they launched, then steps 1-2's): cut after the first two,
    steps 1-2's calls and work are lost. The work running when the surviving calls start was launched in the
    hole: the GPU's record is whole only from the first work launched after it (step 3's first kernel, 15 ms
    later), so the steps are 5 and 6, and the lost kernels of step 2 (running in step 4) are out of the figures."""
    lag = 15_000
    t, _, _ = _buffered_trace()
    calls: dict[int, list[dict]] = {}
    work: dict[int, list[dict]] = {}
    host = t.events
    for i in range(6):
        t.events = []
        start = T0 + i * STEP_US
        for k in range(KERNELS):
            t.launched(start + 150 + k * 1100, 20, start + 150 + k * 1100 + lag, KERNEL_US)
        work[i] = [e for e in t.events if e["cat"] == "kernel"]
        calls[i] = [e for e in t.events if e["cat"] != "kernel"]
    t.events = host
    record = ([e for i in range(2, 6) for e in calls[i]] + [e for i in range(2, 6) for e in work[i]]
              + [e for i in range(2) for e in calls[i] + work[i]])
    path = _write_cut(t, record, work[5][-1], tmp_path / "cut.json.gz")
    a = ta.analyze(path, ta.Options(cache=False, find_logs_beside=False))
    (r,) = a.ranks
    first_kept = 2 * STEP_US + 150 + lag
    assert _kept(a)["lost_before_us"] == first_kept
    assert [s.step for s in r.per_step] == [5, 6]
    (d,) = r.devices
    assert d.window_start_ns == (T0 + 4 * STEP_US) * 1000 and d.window_us == STEP_US + STEP_RUN_US
    # in the window: step 3's kernels from 350 us of its 5th on, step 4's 8, step 5's first 4
    busy = 350 + 3 * KERNEL_US + 8 * KERNEL_US + 4 * KERNEL_US
    assert d.gpu_idle_fraction == pytest.approx(1 - busy / (STEP_US + STEP_RUN_US), abs=1e-6)


# --- real traces cut at 40, 60 and 80% of their gzip bytes, against the truth of their raw events ---------------
CUT_TRACES = ("hta_trace_diff/control.json.gz", "hta_trace_diff/test.json.gz", "hta_nccl/nccl_data.json.gz",
              "hta_negq/rank0.json.gz", "hta_ns_resolution/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
              "hta_df_index_resolver/df_index_resolver.json.gz", "tl_mi300_resnet_ckpt/resnet_act_checkpoint.json.gz")


def _cut_against_truth(tmp_path: Path, name: str, fraction: float) -> list[tuple[float, cut_truth.CutTruth]]:
    """Each surviving device's idle share and the truth over its window (tests/cut_truth.py: the whole trace's
    events, read apart from the package), for `name` cut at `fraction` of its gzip bytes."""
    packed = (corpus_path() / name).read_bytes()
    cut = cut_truth.gzip_cut(packed, fraction)
    path = tmp_path / "cut.json.gz"
    path.write_bytes(cut)
    a = ta.analyze(path, ta.Options(cache=False, find_logs_beside=False))
    whole = gzip.decompress(packed)
    out = []
    for r in a.ranks:
        assert r.devices or (r.capture is not None and r.capture.gpu_events_lost)
        for d in r.devices:
            lo = d.window_start_ns / 1000
            out.append((d.gpu_idle_fraction, cut_truth.cut_truth(whole, cut, d.index, lo, lo + d.window_us)))
    return out


@pytest.mark.slow
def test_the_control_trace_cut_at_60_percent(tmp_path):
    """The known case: HTA's trace_diff control trace cut at 60% lost its first buffer (the capture's first 29 ms
    of GPU work); its idle was 0.55 over a window starting in that hole, 0.23 in truth there. The figures now
    speak of a window whose GPU work all survived, and match the truth there."""
    ((ours, truth),) = _cut_against_truth(tmp_path, "hta_trace_diff/control.json.gz", 0.6)
    assert truth.lost_share == 0
    assert ours == pytest.approx(truth.idle, abs=0.005)


@pytest.mark.slow
@pytest.mark.parametrize("name", CUT_TRACES)
def test_real_traces_cut_report_the_idle_of_the_window_that_survived(tmp_path, name):
    checked = 0
    for fraction in (0.4, 0.6, 0.8):
        for ours, truth in _cut_against_truth(tmp_path, name, fraction):
            assert truth.lost_share <= 0.1, (name, fraction)  # the window's GPU work survived (nearly all)
            assert ours == pytest.approx(truth.idle, abs=0.1), (name, fraction)
            checked += 1
    assert checked >= 1


@pytest.mark.slow
@pytest.mark.parametrize("layout,within", [("scrambled", 0.03), ("in order", 0.03), ("copies apart", 0.1)])
def test_built_trace_cut_after_any_event_reports_what_survived(tmp_path, layout, within):
    """The built trace, its record written in three layouts, cut after every third event of the record: the idle
    share is the truth's over the window reported (tests/cut_truth.py) within 0.03, never a window holding more
    than 5% of lost work. What is left: a loss at the record's end shorter than a hole (the last kernel of the last
    step), and a stream whose whole record was lost, of which nothing survives (the copies, written apart: within
    0.1, the copy 50 us of a window one kernel long)."""
    t, compute, copies = _buffered_trace()
    if layout == "copies apart":
        record = [e for i in range(6) for e in compute[i]] + [e for i in range(6) for e in copies[i]]
    else:
        order = [2, 3, 4, 5, 0, 1] if layout == "scrambled" else list(range(6))
        record = [e for i in order for e in copies[i] + compute[i]]
    host = list(t.events)
    whole = json.dumps({**t.header, "traceEvents": host + record}).encode()
    checked = 0
    for j in range(0, len(record), 3):
        t.events = list(host)
        path = _write_cut(t, record, record[j], tmp_path / f"cut{j}.json.gz")
        a = ta.analyze(path, ta.Options(cache=False, find_logs_beside=False))
        for r in a.ranks:
            for d in r.devices:
                lo = d.window_start_ns / 1000
                truth = cut_truth.cut_truth(whole, path.read_bytes(), d.index, lo, lo + d.window_us)
                assert truth.lost_share <= 0.05, j
                assert d.gpu_idle_fraction == pytest.approx(truth.idle, abs=within), j
                assert d.gaps.largest_us <= d.window_us
                checked += 1
    assert checked >= len(record) // 3 - 2

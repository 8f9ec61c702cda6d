"""Python frames (with_stack=True): the innermost user frames behind host time and behind host-compute /
unexplained GPU idle time, on a built trace with known answers, on a real with_stack capture (hand
count from its raw events) and on corpus traces; without stacks the report says what would name them."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from kineto_builder import HOST_PID, HOST_TID, KinetoTrace

import traceanalyzer as ta
from traceanalyzer.analyses.frames import frame_label, user_frame

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"


def _py(t: KinetoTrace, name: str, ts: float, dur: float, tid: int = HOST_TID) -> None:
    t.events.append({"ph": "X", "cat": "python_function", "name": name, "pid": HOST_PID, "tid": tid,
                     "ts": ts, "dur": dur, "args": {}})


@pytest.mark.parametrize("name,user", [
    ("train.py(30): postprocess", True),
    ("my_project/models/net.py(12): forward", True),
    ("torch/nn/modules/module.py(1501): _call_impl", False),
    ("/usr/lib/python3/dist-packages/foo.py(1): bar", False),
    ("venv/lib/python3.11/site-packages/numpy/core/x.py(1): f", False),
    ("<built-in method item of Tensor object at 0x7f00>", False),
    ("threading.py(359): wait", False),
    ("multiprocessing/spawn.py(122): spawn_main", False),
    ("nn.Module: Linear_0", False),
    ("<string>(1): <module>", False),
])
def test_user_frames(name, user):
    assert user_frame(name) is user


def test_frame_label():
    assert frame_label("train.py(30): postprocess") == "train.py:30 postprocess"
    assert frame_label("<built-in method item of Tensor object at 0x7f00ab>") == "<built-in method item of Tensor object>"


def _stack_trace(path: Path) -> Path:
    """Three 1000 us steps; per step one 100 us kernel at the start (launched by the loop), then host work
    under Python frames: train.py:5 loop [0,1000) > train.py:30 postprocess [200,800) > a built-in and a
    stdlib frame (not user code: their time stays with postprocess); a torch frame [10,90) under loop."""
    t = KinetoTrace()
    for k in range(3):
        b = 1000 * k
        t.step(k + 1, b, 1000)
        for j in range(2):
            t.kernel(b + 50 * j, 50)
            t.runtime("cudaLaunchKernel", b + 1 + 2 * j, 1, t._corr)
        _py(t, "train.py(5): loop", b, 1000)
        _py(t, "torch/nn/modules/module.py(1501): _call_impl", b + 10, 80)
        _py(t, "train.py(30): postprocess", b + 200, 600)
        _py(t, "<built-in method item of Tensor object at 0xdead>", b + 300, 10)
        _py(t, "threading.py(359): wait", b + 400, 100)
    return t.write(path)


def test_frames_exact_host_and_idle(tmp_path):
    a = ta.analyze(_stack_trace(tmp_path / "stack.json"))
    r = a.ranks[0]
    o = r.operators
    assert o.has_stacks
    frames = {f.frame: f for f in o.frames}
    assert set(frames) == {"train.py:5 loop", "train.py:30 postprocess"}
    # idle per step [100,1000): 900 us, host compute (Python frames on the launching thread)
    assert o.frames_idle_us == 2700
    pp, loop = frames["train.py:30 postprocess"], frames["train.py:5 loop"]
    assert (pp.host_us, pp.idle_us) == (1800, 1800)
    # loop's own time: [0,200) and [800,1000) per step; inside idle: [100,200) and [800,1000)
    assert (loop.host_us, loop.idle_us) == (1200, 900)
    assert [f.frame for f in o.frames] == ["train.py:30 postprocess", "train.py:5 loop"]  # by idle time
    df = a.frames()
    assert df["idle_us"].sum() == o.frames_idle_us  # every second of that idle time has a frame here
    f = next(f for f in r.diagnosis.findings if f.cause == "host_compute")
    line = next(x for x in f.evidence if x.startswith("user code running"))
    assert "2.7 ms of host-compute and unexplained idle time" in line
    assert "train.py:30 postprocess 1.8 ms (67%)" in line and "train.py:5 loop 900 us (33%)" in line


def test_without_stacks_the_report_says_what_would_name_them():
    a = ta.analyze(SAMPLES / "host_bound.json")
    o = a.ranks[0].operators
    assert not o.has_stacks and o.frames == ()
    f = next(f for f in a.ranks[0].diagnosis.findings if f.cause == "host_compute")
    assert any("with_stack=True" in x for x in f.evidence)
    assert "with_stack=True" in a.to_markdown()
    assert a.frames().empty


def _hand_frame_share(path: Path, func: str) -> float:
    """Self time of the frames of function `func` (their span minus the Python frames directly inside
    them) inside the steps / summed step time: no user frame runs inside this function."""
    ev = [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev if str(e["name"]).startswith("ProfilerStep#")]
    mine = [e for e in ev if e.get("cat") == "python_function" and str(e["name"]).endswith(f": {func}")]
    total = 0.0
    for e in mine:
        lo0, hi0 = e["ts"], e["ts"] + e["dur"]
        for lo, hi in steps:
            total += max(0.0, min(hi0, hi) - max(lo0, lo))
    return total / sum(hi - lo for lo, hi in steps)


def test_real_with_stack_capture_names_the_users_function():
    path = SAMPLES / "torch_cpu_stack.json.gz"
    expected = _hand_frame_share(path, "_spin")
    assert expected > 0.5
    a = ta.analyze(path)
    top = next(f for f in a.ranks[0].diagnosis.findings if f.id == "named_range")
    assert "make_torch_ops.py:" in top.title and "_spin" in top.title
    assert top.figures["share"] == pytest.approx(expected, abs=0.05)
    frames = a.frames()
    assert frames.iloc[0]["frame"].endswith(" _spin")
    assert not frames["frame"].str.startswith(("torch/", "<")).any()


def test_corpus_with_stack_gpu_trace(corpus):
    a = ta.analyze(corpus / "tl_h100" / "gaunernst_bert-small-uncased__1016001.json.gz")
    o = a.ranks[0].operators
    assert o.has_stacks and o.frames
    assert not any(f.frame.startswith(("torch/", "<", "nn.Module")) for f in o.frames)
    kept = sum(f.idle_us for f in o.frames)
    assert 0 < kept <= o.frames_idle_us + 0.01
    assert o.frames_omitted == 0 or kept < o.frames_idle_us

"""The operator view: nesting and self time per thread, kernels linked to their launching operator,
shares of the steps and of GPU idle, and the finding that names a dominant top-level range, on built
traces with known answers, on real CPU captures (hand counts from their raw events) and on the corpus."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from kineto_builder import HOST_TID, KinetoTrace

import traceanalyzer as ta
from traceanalyzer.analyses.operators import nest, self_time, union_pieces

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"


# --- nesting ------------------------------------------------------------------------------------------
def test_nest_parents_self_time_two_threads_and_zero_length():
    # thread 0: A [0,100) > B [10,60) > C [20,30); D [60,90) after B inside A; Z zero-length at 60: B has
    # ended, D starts there (same start, longer first): Z nests in D
    # thread 1: E [0,50) alone (overlaps A in time, other thread: not its child)
    ts = np.array([0, 10, 20, 60, 60, 0], dtype=np.int64)
    end = np.array([100, 60, 30, 90, 60, 50], dtype=np.int64)
    group = np.array([0, 0, 0, 0, 0, 1], dtype=np.int64)
    parent = nest(group, ts, end)
    assert parent.tolist() == [-1, 0, 1, 0, 3, -1]
    assert self_time(parent, ts, end).tolist() == [100 - 50 - 30, 50 - 10, 10, 30, 0, 50]


def test_nest_same_start_longer_first_and_siblings():
    # P [0,100) and Q [0,40) start together: Q nests in P; R [40,100) ends with P: R nests in P
    ts = np.array([0, 0, 40], dtype=np.int64)
    end = np.array([40, 100, 100], dtype=np.int64)
    parent = nest(np.zeros(3, dtype=np.int64), ts, end)
    assert parent.tolist() == [1, -1, 1]
    assert self_time(parent, ts, end).tolist() == [40, 0, 60]


def test_union_pieces_per_name():
    code = np.array([0, 0, 1, 0], dtype=np.int64)
    ts = np.array([0, 5, 0, 20], dtype=np.int64)
    end = np.array([10, 15, 10, 30], dtype=np.int64)
    lo, hi = union_pieces(code, ts, end)
    assert (hi - lo).tolist() == [10, 5, 10, 10]  # name 0: union 25 = 10 + 5 + 10


# --- a built GPU trace with known answers --------------------------------------------------------------
def _gpu_trace(path: Path, steps: int = 3) -> Path:
    t = KinetoTrace()
    for k in range(steps):
        b = 1000 * k
        t.step(k + 1, b, 1000)
        t.host("aten::linear", b + 10, 100)
        t.host("aten::addmm", b + 20, 80)
        t.kernel(b + 50, 100, "gemm")
        t.runtime("cudaLaunchKernel", b + 30, 5, t._corr)
        t.kernel(b + 150, 100, "gemm")
        t.runtime("cudaLaunchKernel", b + 40, 5, t._corr)
        t.host("postprocess_callback", b + 300, 600, cat="user_annotation")
        t.host("aten::sort", b + 400, 100)
    return t.write(path)


def test_operator_view_figures_exact(tmp_path):
    a = ta.analyze(_gpu_trace(tmp_path / "ops.json"))
    o = a.ranks[0].operators
    assert o is not None and o.steps_us == 3000 and o.idle_us == 2400
    ops = {x.name: x for x in o.ops}
    assert set(ops) == {"aten::linear", "aten::addmm", "postprocess_callback", "aten::sort"}
    lin, mm, pp, sort = ops["aten::linear"], ops["aten::addmm"], ops["postprocess_callback"], ops["aten::sort"]
    assert (lin.count, lin.total_us, lin.self_us, lin.top_level) == (3, 300, 60, True)
    assert (mm.count, mm.total_us, mm.self_us, mm.top_level) == (3, 240, 210, False)  # minus two 5 us launches
    assert (pp.kind, pp.total_us, pp.self_us, pp.per_step_us, pp.top_level) == ("annotation", 1800, 1500, 600, True)
    assert pp.share_of_steps == pytest.approx(0.6) and pp.idle_us == 1800 and pp.share_of_idle == pytest.approx(0.75)
    # aten::linear [10,110) per step is idle in [10,50) only: the first kernel starts at 50
    assert lin.idle_us == 120 and sort.idle_us == 300 and not sort.top_level
    assert [x.name for x in o.ops][:1] == ["postprocess_callback"]  # by total time
    (k,) = o.kernels
    assert (k.name, k.device, k.count, k.total_us, k.mean_us, k.launched_by) == ("gemm", "cuda:0", 6, 600, 100,
                                                                                 "aten::addmm")
    kernels = a.kernels(top=None)
    assert kernels.loc[kernels["name"] == "gemm", "launched_by"].tolist() == ["aten::addmm"]
    df = a.ops()
    assert df.set_index("name").loc["postprocess_callback", "share_of_idle"] == pytest.approx(0.75)
    assert list(df.columns) == ["rank", "name", "kind", "count", "total_us", "self_us", "per_step_us",
                                "share_of_steps", "idle_us", "share_of_idle", "top_level"]


def test_named_range_finding_on_gpu_idle_reconciles(tmp_path):
    a = ta.analyze(_gpu_trace(tmp_path / "ops.json"))
    named = [f for f in a.ranks[0].diagnosis.findings if f.id == "named_range"]
    assert len(named) == 1
    f = named[0]
    assert f.title == "postprocess_callback runs during 75% of the GPU idle time"
    # every share shown is computed from the figures shown next to it
    assert f.figures["op_us"] == 1800 and f.figures["basis_us"] == 2400
    assert f.figures["share"] == pytest.approx(f.figures["op_us"] / f.figures["basis_us"])
    assert "1.8 ms of the 2.4 ms of GPU idle time (75%)" in f.evidence[0]
    assert any("postprocess_callback" in x and "every N steps" in x for x in f.advice)
    assert f.explains_us == 1800


def test_no_named_range_for_a_range_around_the_whole_step(tmp_path):
    t = KinetoTrace()
    for k in range(3):
        b = 1000 * k
        t.step(k + 1, b, 1000)
        t.host("train_step", b, 1000, cat="user_annotation")
        for j in range(2):
            t.kernel(b + 100 + 300 * j, 100)
            t.runtime("cudaLaunchKernel", b + 10 + 10 * j, 5, t._corr)
    a = ta.analyze(t.write(tmp_path / "wrapped.json"))
    assert not [f for f in a.ranks[0].diagnosis.findings if f.id == "named_range"]


def test_kernel_launched_outside_any_op_has_no_launcher(tmp_path):
    t = KinetoTrace()
    t.step(1, 0, 1000)
    for j in range(5):
        t.kernel(100 + 100 * j, 50, "lonely")
        t.runtime("cudaLaunchKernel", 10 + 10 * j, 5, t._corr)
    a = ta.analyze(t.write(tmp_path / "lonely.json"))
    (k,) = a.ranks[0].operators.kernels
    assert (k.name, k.count, k.launched_by) == ("lonely", 5, None)


def test_operator_view_round_trips_through_json(tmp_path):
    a = ta.analyze(_gpu_trace(tmp_path / "ops.json"))
    b = ta.load(a.save(tmp_path / "ops.report.json"))
    assert b.ranks[0].operators == a.ranks[0].operators


def test_names_are_escaped_in_the_page(tmp_path):
    t = KinetoTrace()
    for k in range(3):
        b = 1000 * k
        t.step(k + 1, b, 1000)
        for j in range(2):
            t.kernel(b + 50 + 100 * j, 100)
            t.runtime("cudaLaunchKernel", b + 20 + 10 * j, 5, t._corr)
        t.host("<script>alert(1)</script>", b + 300, 600, cat="user_annotation", tid=HOST_TID)
    html = ta.analyze(t.write(tmp_path / "x.json")).to_html()
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


# --- real captures (torch 2.13 CPU; sample_traces/make_torch_ops.py) -------------------------------------
def _events(path: Path) -> list[dict]:
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def hand_share(path: Path, name: str) -> float:
    """Summed duration of `name`'s events inside the ProfilerStep spans / summed step duration."""
    ev = [e for e in _events(path) if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev if str(e["name"]).startswith("ProfilerStep#")]
    inside = sum(max(0.0, min(e["ts"] + e["dur"], hi) - max(e["ts"], lo))
                 for e in ev if e["name"] == name for lo, hi in steps)
    return inside / sum(hi - lo for lo, hi in steps)


def test_real_capture_postprocess_callback_named_with_its_share():
    path = SAMPLES / "torch_cpu_postprocess.json.gz"
    expected = hand_share(path, "postprocess_callback")
    assert expected > 0.5  # the capture is what it claims: the range fills most of each step
    a = ta.analyze(path)
    r = a.ranks[0]
    # the host loop's own finding names the range (one finding per figure); the operator view gives it the
    # specific advice first
    top = r.diagnosis.findings[0]
    assert "postprocess_callback" in top.title and top.id != "named_range"
    assert not [f for f in r.diagnosis.findings if f.id == "named_range"]
    assert top.advice[0] == ("postprocess_callback is a range of your own code: run it every N steps instead of every "
                             "step, move it to a background thread or process, or make it cheaper.")
    assert not any("larger batch" in x for x in top.advice)  # the generic CPU advice would not help
    ops = {x.name: x for x in r.operators.ops}
    assert ops["postprocess_callback"].share_of_steps == pytest.approx(expected, abs=0.05)
    assert f"postprocess_callback {100 * ops['postprocess_callback'].share_of_steps:.0f}%" in a.diagnosis.headline
    assert ops["postprocess_callback"].count == r.steps


def test_real_capture_zero_grad_and_item_get_their_fixes():
    path = SAMPLES / "torch_cpu_zero_grad_item.json.gz"
    zero_grad = next(e["name"] for e in _events(path) if str(e["name"]).startswith("Optimizer.zero_grad#"))
    expected = hand_share(path, zero_grad)
    a = ta.analyze(path)
    found = {f.id: f for f in a.ranks[0].diagnosis.findings}
    f = found["pattern_zero_grad"]
    assert zero_grad in f.title and f.figures["share"] == pytest.approx(expected, abs=0.05)
    assert "set_to_none=True" in f.advice[0]
    item = found["pattern_scalar_read"]
    assert "aten::item" in item.title and item.figures["calls"] >= a.ranks[0].steps
    assert "keep values on the device" in item.advice[0].lower()


# --- corpus ------------------------------------------------------------------------------------------------
def test_corpus_call_stack_kernel_launched_by_mm(corpus):
    a = ta.analyze(corpus / "hta_call_stack" / "backward_thread.json")
    o = a.ranks[0].operators
    (k,) = o.kernels
    assert k.name.startswith("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm") and k.launched_by == "aten::mm"
    ops = {x.name: x for x in o.ops}
    # self times from the file: AddmmBackward0 102 us holds aten::mm 58 us; aten::mm holds its 10 us launch
    assert ops["AddmmBackward0"].self_us == pytest.approx(102 - 58, abs=0.01)
    assert ops["aten::mm"].self_us == pytest.approx(58 - 10, abs=0.01)
    assert ops["## backward ##"].top_level and not ops["aten::mm"].top_level


@pytest.mark.slow
def test_corpus_kernel_launchers_cover_the_kernel_time(corpus):
    """On real GPU traces with correlation ids most kernel time is linked to an operator."""
    for rel in ("tl_h100/gaunernst_bert-small-uncased__1016001.json.gz", "hta_negq/rank0.json.gz"):
        a = ta.analyze(corpus / rel)
        ks = a.ranks[0].operators.kernels
        linked = sum(k.total_us for k in ks if k.launched_by)
        assert linked >= 0.9 * sum(k.total_us for k in ks), rel
        for x in a.ranks[0].operators.ops:
            assert 0 <= x.self_us <= x.total_us + 1e-6 and (x.share_of_steps or 0) <= 1


def test_a_phase_around_the_models_ops_gets_the_phase_advice_and_communication_is_not_named(tmp_path):
    t = KinetoTrace()
    for k in range(3):
        b = 1000 * k
        t.step(k + 1, b, 1000)
        t.host("## forward ##", b + 300, 400, cat="user_annotation")
        t.host("aten::linear", b + 305, 390)  # the phase's time is its operators'
        t.host("gloo:all_reduce", b + 720, 260, cat="user_annotation")  # communication: its own cause
        for j in range(2):
            t.kernel(b + 50 + 100 * j, 100)
            t.runtime("cudaLaunchKernel", b + 10 + 10 * j, 5, t._corr)
    a = ta.analyze(t.write(tmp_path / "phase.json"))
    named = [f for f in a.ranks[0].diagnosis.findings if f.id == "named_range"]
    assert [f.title for f in named] == ["## forward ## runs during 50% of the GPU idle time"]
    assert "framework operators it calls" in named[0].advice[0] and "torch.compile" in named[0].advice[0]
    assert not any("every N steps" in x for x in named[0].advice)


def test_a_backward_range_waiting_for_the_autograd_thread_is_a_phase(corpus):
    a = ta.analyze(corpus / "hta_call_stack" / "backward_thread.json")
    f = next(f for f in a.ranks[0].diagnosis.findings if f.id == "named_range")
    assert f.title.startswith("## backward ## runs during ")
    assert "framework operators it calls" in f.advice[0]

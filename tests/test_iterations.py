"""Iterations found without step markers (analyses/iterations.py): built loops with known answers, the
negatives (random work, one forward pass), markers untouched, per-step figures and `diff` on detected
steps, and what the detector finds on the corpus's traces without markers."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from conftest import CORPUS
from iterations_builder import PATTERN, blocks_trace, loop_trace, random_work, single_pass

import traceanalyzer as ta
from traceanalyzer.analyses import figures as F
from traceanalyzer.analyses.iterations import detect_iterations, find_steps
from traceanalyzer.compare import compare
from traceanalyzer.formats import ReadOptions, read_file
from traceanalyzer.report.diff import render_diff_markdown, render_diff_text

MIB = 1 << 20


def source(path):
    r = ta.analyze(path).ranks[0]
    return r, r.step_source


@pytest.mark.parametrize("kw", [
    {},
    {"head": 15},
    {"jitter": 0.3, "seed": 3},
    {"partial": 3},
    {"head": 9, "partial": 4, "jitter": 0.2, "seed": 5},
    {"wait_us": 0},  # no DataLoader: the copy and the synchronisation mark the boundary
    {"copy": False, "wait_us": 0},  # no copy either: the host's synchronisation
], ids=["plain", "warmup-head", "jitter", "partial-tail", "all", "no-wait", "sync-only"])
def test_a_pattern_repeated_n_times_gives_n_iterations(tmp_path, kw):
    r, src = source(loop_trace(tmp_path / "loop.json", iterations=8, **kw))
    assert (src.kind, src.basis, src.iterations) == ("detected", "kernel sequence", 8)
    assert r.steps == 8 and len(r.per_step) == 8
    assert [s.step for s in r.per_step] == list(range(8))


def test_period_and_steps_are_the_iterations(tmp_path):
    # without jitter each iteration is: wait 200 + 2, copy launch, 6 kernels of 50 us run back to back
    # (the GPU is the slower side), then the host waits for the GPU and synchronises
    r, src = source(loop_trace(tmp_path / "loop.json", iterations=6))
    durations = [s.duration_us for s in r.per_step]
    assert src.period_us == pytest.approx(np.median(durations), abs=0.01)
    # one iteration: wait (200) + 2 + copy starts 5 later and runs 20, 6 kernels x (50 + 1 spacing), + 1 to sync
    assert durations[:-1] == pytest.approx([200 + 2 + 5 + 20 + 1 + 6 * 51 + 1 - 1 + 1] * 5, abs=2)
    assert all(s.dataloader_wait_us == pytest.approx(200, abs=0.01) for s in r.per_step)
    assert all(s.gpu_busy_us == pytest.approx(20 + 6 * 50, abs=0.01) for s in r.per_step)


def test_random_work_gives_no_steps(tmp_path):
    for seed in range(5):
        _, src = source(random_work(tmp_path / f"r{seed}.json", seed=seed))
        assert src.kind == "window" and src.iterations is None


def test_one_forward_pass_of_identical_layers_gives_no_steps(tmp_path):
    r, src = source(single_pass(tmp_path / "pass.json", layers=24))
    assert src.kind == "window" and r.steps == 0


def test_two_iterations_are_not_enough(tmp_path):
    _, src = source(loop_trace(tmp_path / "two.json", iterations=2))
    assert src.kind == "window"


def test_a_recurring_annotation_gives_its_iterations(tmp_path):
    r, src = source(loop_trace(tmp_path / "ann.json", iterations=7, annotation="iteration", head=5))
    assert (src.kind, src.basis, src.iterations) == ("detected", "annotation iteration", 7)
    assert r.steps == 7


def test_one_marker_around_many_iterations_stays_one_step_holding_them(tmp_path):
    r, src = source(loop_trace(tmp_path / "one.json", iterations=9, one_marker=True))
    assert (src.kind, src.iterations) == ("markers", 9) and r.steps == 1


def test_markers_are_kept_and_their_figures_do_not_move(tmp_path):
    path = loop_trace(tmp_path / "steps.json", iterations=6, markers=True, jitter=0.2, seed=1)
    tl = read_file(path, ReadOptions())
    markers = F.steps(tl, 0)
    st, src = find_steps(tl, 0, markers)
    assert src.kind == "markers" and st is markers
    r = ta.analyze(path).ranks[0]
    assert r.step_source.kind == "markers" and r.steps == 6
    assert [s.duration_us for s in r.per_step] == pytest.approx(
        [round(float(d) / 1000, 3) for d in (markers.end_ns - markers.start_ns)], abs=0.001)


def test_a_single_marker_without_repetition_stays(tmp_path):
    path = random_work(tmp_path / "r.json", seed=1)
    tl = read_file(path, ReadOptions())
    _, src = find_steps(tl, 0, F.Steps(np.array([0]), np.array([0]), np.array([10**9])))
    assert src.kind == "markers"


def test_diff_of_detected_iterations_sees_a_clear_change(tmp_path):
    base = ta.analyze(loop_trace(tmp_path / "base.json", iterations=8, wait_us=100, jitter=0.05, seed=1))
    head = ta.analyze(loop_trace(tmp_path / "head.json", iterations=8, wait_us=900, jitter=0.05, seed=2))
    assert base.ranks[0].step_source.kind == head.ranks[0].step_source.kind == "detected"
    c = compare(base, head)
    assert c.change_verdict == "regressed"
    assert c.step_time.base_steps >= 6 and c.step_time.ci_low > 0.5
    same = compare(base, ta.analyze(loop_trace(tmp_path / "again.json", iterations=8, wait_us=100, jitter=0.05,
                                               seed=3)))
    assert same.change_verdict in ("unchanged", "inconclusive")


def test_renderers_say_the_steps_were_detected(tmp_path, monkeypatch):
    import jinja2

    from traceanalyzer.report import html
    # this checkout's templates (an installed package may point the package loader at another copy)
    root = Path(__file__).resolve().parent.parent / "templates"
    monkeypatch.setattr(html, "_loader", lambda: jinja2.FileSystemLoader(root))
    html.template_env.cache_clear()
    try:
        a = ta.analyze(loop_trace(tmp_path / "loop.json", iterations=5))
        line = f"steps detected from the kernel sequence, period {a.ranks[0].step_source.period_us:.0f} us (5 iterations)"
        for text in (a.to_markdown(), a.to_text(), a.to_html()):  # the terminal wraps lines
            assert line in " ".join(text.split())
    finally:
        html.template_env.cache_clear()


@pytest.mark.parametrize("name, kind, iterations", [
    # one ProfilerStep around the whole loop: one step, the iterations found inside it
    ("tl_h100/google_owlv2-large-patch14-ensemble__1016001.json.gz", "markers", 5),
    ("tl_mi300/google_owlv2-large-patch14-ensemble__1016001.json.gz", "markers", 5),
    ("tl_xdit_sd35/profile_trace_rank_0.json.gz", "markers", 4),
    ("tl_jax_te_xplane/934987a2fc2f.xplane.pb", "detected", 5),  # 150 kernels: one jitted step of 30, run 5 times
    # a serving loop on an accelerator the trace has no GPU events for: each task run is an iteration
    ("hta_mtia_inference/mtia_inference_rank_0.json.gz", "detected", 11),
    # one forward pass of a transformer (its layers repeat) and a prompt + a few tokens: no steps
    ("tl_h100/facebook_timesformer-base-finetuned-k400__1016002.json.gz", "markers", 0),
    ("tl_h100/Falconsai_nsfw_image_detection__1016002.json.gz", "markers", 0),
    ("tl_h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", "markers", 0),
    ("tl_mi210_gpu_only/gpu_only_trace.json.gz", "window", 0),
])
def test_corpus_traces_without_markers(corpus, name, kind, iterations):
    path = corpus / name
    tl = read_file(path, ReadOptions())
    st, src = find_steps(tl, 0, F.steps(tl, 0))
    assert (src.kind, src.iterations) == (kind, iterations)
    assert len(st) == (1 if kind == "markers" else iterations)  # a marker is a step, whatever it holds
    if name.startswith("tl_h100/google_owlv2"):
        # five images, each: ~122 ms waiting for the DataLoader, then ~115 ms of GPU work, in the one step
        assert src.period_ns / 1e6 == pytest.approx(241.7, abs=1)
        found = detect_iterations(tl, 0)
        assert found is not None
        d = (found[0].end_ns - found[0].start_ns) / 1e6
        assert d == pytest.approx([244.1, 237.3, 241.5, 241.7, 241.7], abs=1)
    if name.startswith("tl_xdit"):  # four denoising steps, one compiled-graph call each
        assert src.basis.startswith("annotation ## Call CompiledFxGraph")
        assert src.period_ns / 1e6 == pytest.approx(249, abs=2)


SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
CPU_CAPTURES = ("torch_cpu_input_bound", "torch_cpu_well_fed", "torch_cpu_multiworker", "torch_cpu_host_bound")


def without_markers(name: str, folder: Path) -> Path:
    """A real torch.profiler capture (sample_traces/make_torch_cpu.py) with its ProfilerStep spans removed."""
    import gzip
    import json

    doc = json.loads(gzip.decompress((SAMPLES / f"{name}.json.gz").read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]
    out = folder / f"{name}.json"
    out.write_text(json.dumps(doc))
    return out


@pytest.mark.parametrize("name", CPU_CAPTURES)
def test_real_cpu_captures_without_markers_get_their_steps_back(tmp_path, name):
    marked = ta.analyze(SAMPLES / f"{name}.json.gz").ranks[0]
    r, src = source(without_markers(name, tmp_path))
    assert (src.kind, src.basis, src.iterations) == ("detected", "host operations", 4)
    # the same four steps as the ProfilerStep spans: each from its DataLoader wait to the next one
    assert [s.duration_us for s in r.per_step] == pytest.approx([s.duration_us for s in marked.per_step], abs=1500)
    assert [s.dataloader_wait_us for s in r.per_step] == pytest.approx(
        [s.dataloader_wait_us for s in marked.per_step], abs=100)


@pytest.mark.slow
def test_diff_of_real_captures_without_markers_matches_the_diff_with_them(tmp_path):
    # num_workers=0 with a slow dataset (input_bound), workers (multiworker), a cheap dataset (well_fed)
    plain = {n: ta.analyze(without_markers(n, tmp_path)) for n in CPU_CAPTURES[:3]}
    marked = {n: ta.analyze(SAMPLES / f"{n}.json.gz") for n in CPU_CAPTURES[:3]}
    expected = {("torch_cpu_input_bound", "torch_cpu_multiworker"): "improved",
                ("torch_cpu_multiworker", "torch_cpu_input_bound"): "regressed",
                ("torch_cpu_well_fed", "torch_cpu_input_bound"): "regressed",
                ("torch_cpu_input_bound", "torch_cpu_well_fed"): "improved"}
    for (a, b), verdict in expected.items():
        with_markers = compare(marked[a], marked[b])
        c = compare(plain[a], plain[b])
        assert c.change_verdict == with_markers.change_verdict == verdict
        assert c.step_time.change == pytest.approx(with_markers.step_time.change, abs=0.02)


def test_pattern_of_the_builder_is_what_repeats():
    assert len(set(PATTERN)) == len(PATTERN)  # every kernel once per iteration: the count is exact


@pytest.mark.slow
def test_diff_of_two_real_captures_with_one_step_marker_each(corpus):
    # the same OWLv2 inference loop on an H100 and an MI300X, each one ProfilerStep around five images:
    # one step a side, by markers on both; the change is the step's, too few steps to judge it
    h100 = ta.analyze(corpus / "tl_h100/google_owlv2-large-patch14-ensemble__1016001.json.gz")
    mi300 = ta.analyze(corpus / "tl_mi300/google_owlv2-large-patch14-ensemble__1016001.json.gz")
    c = compare(h100, mi300)
    assert (c.step_time.base_steps, c.step_time.head_steps) == (1, 1)
    assert (c.base.step_basis, c.head.step_basis) == ("markers", "markers")
    assert (c.change_verdict, c.reason) == ("inconclusive", "too_few_steps")
    b, h = h100.ranks[0].per_step[0].duration_us, mi300.ranks[0].per_step[0].duration_us
    assert c.step_time.change == pytest.approx(h / b - 1, abs=1e-4)


# --- what a step is: a loop at the top level, never the blocks of one call ---------------------------------
def _leak(r) -> bool:
    return any(f.id == "memory_leak" for f in r.diagnosis.findings)


@pytest.mark.parametrize("wrap", ["module", "annotation"])
def test_the_blocks_of_one_forward_pass_are_no_steps(tmp_path, wrap):
    # eight identical MoE blocks, each with a small host-to-device copy and a `.item()` synchronisation (the
    # boundary evidence a loop shows), and memory growing 2 MiB a block, inside one `nn.Module: Model_0`
    # frame or one `forward` annotation: one call, no steps, no leak
    r, src = source(blocks_trace(tmp_path / "fwd.json", blocks=8, wrap=wrap, grow_bytes=2 * MIB))
    assert (src.kind, r.steps, r.per_step) == ("window", 0, ())
    assert r.devices[0].memory.per_step == () and not _leak(r)
    assert r.devices[0].memory.peak_allocated_bytes == 100 * MIB + 8 * 2 * MIB  # the growth is there


def test_a_recurring_annotation_inside_one_module_call_is_no_loop(tmp_path):
    # a compiled piece per block (vLLM's piecewise graphs), all inside one model call: the pieces of one pass
    path = blocks_trace(tmp_path / "pieces.json", blocks=8, wrap="module", block_annotation="## Call CompiledFxGraph ##")
    r, src = source(path)
    assert (src.kind, r.steps) == ("window", 0)
    # the same pieces at the top level (no enclosing call) are a loop: each occurrence is an iteration
    r, src = source(blocks_trace(tmp_path / "loop.json", blocks=8, wrap=None,
                                 block_annotation="## Call CompiledFxGraph ##"))
    assert (src.kind, src.basis, r.steps) == ("detected", "annotation ## Call CompiledFxGraph ##", 8)


@pytest.mark.parametrize("wrap, loop", [(None, "dataloader"), (None, "optimizer"), ("module", "optimizer"),
                                        ("annotation", "dataloader")])
def test_the_same_blocks_as_a_real_loop_are_its_steps(tmp_path, wrap, loop):
    # each block waits for the DataLoader or steps the optimizer: a loop, even inside one wrapping call
    r, src = source(blocks_trace(tmp_path / "loop.json", blocks=8, wrap=wrap, loop=loop))
    assert (src.kind, src.iterations, r.steps) == ("detected", 8, 8)
    assert [s.step for s in r.per_step] == list(range(8))


@pytest.mark.parametrize("blocks, leak", [(4, False), (5, True), (6, True)])
def test_a_leak_needs_five_real_steps_of_a_loop(tmp_path, blocks, leak):
    # memory kept by every iteration of a real loop (a DataLoader wait each): a leak from five steps on
    r, src = source(blocks_trace(tmp_path / "leak.json", blocks=blocks, wrap=None, loop="dataloader",
                                 grow_bytes=2 * MIB))
    assert (src.kind, r.steps) == ("detected", blocks)
    assert [s.growth_bytes for s in r.devices[0].memory.per_step] == [0] + [2 * MIB] * (blocks - 1)
    assert _leak(r) is leak


def test_diff_of_two_single_forward_captures_compares_whole_captures(tmp_path):
    base = ta.analyze(blocks_trace(tmp_path / "base.json", blocks=8))
    again = ta.analyze(blocks_trace(tmp_path / "again.json", blocks=9))  # a capture holding a ninth block
    slow = ta.analyze(blocks_trace(tmp_path / "slow.json", blocks=8, kernel_us=120))
    c = compare(base, again)
    assert c.compared == "whole_captures" and c.reason == "whole_captures"
    assert (c.step_time.base_steps, c.step_time.head_steps) == (1, 1)  # one capture a side, never "8 vs 9 steps"
    assert (c.base.steps, c.head.steps) == (0, 0) and c.base.step_basis == c.head.step_basis == "window"
    b, h = base.ranks[0].window_us, again.ranks[0].window_us
    assert c.step_time.change == pytest.approx(h / b - 1, abs=1e-4)
    assert c.change_verdict == "inconclusive"  # +12% of one capture: within run-to-run variation
    assert "whole captures compared" in c.title and "whole captures compared" in c.warnings[0]
    s = compare(base, slow)
    assert s.step_time.change == pytest.approx(slow.ranks[0].window_us / b - 1, abs=1e-4)
    assert (s.change_verdict, s.compared) == ("regressed", "whole_captures")
    assert s.title.startswith("Regressed: HEAD's whole capture is") and "whole captures compared" in s.title
    parts = {p.cause: p for p in s.attribution}
    assert parts["gpu_compute"].delta_per_step_us == pytest.approx(8 * 4 * 80, abs=1)  # 32 kernels, 80 us longer
    assert "| captures measured | 1 (whole capture, no steps) | 1 (whole capture, no steps) | |" in \
        render_diff_markdown(s)
    text = render_diff_text(s)
    assert "whole capture 1.6 ms -> 4.1 ms (1 vs 1 captures, no steps)" in text and "per step" not in text
    assert "per step" not in render_diff_markdown(s).split("<sub>share")[0]


def test_diff_of_a_loop_against_one_forward_pass_compares_whole_captures(tmp_path):
    loop = ta.analyze(loop_trace(tmp_path / "loop.json", iterations=8))
    one = ta.analyze(blocks_trace(tmp_path / "fwd.json", blocks=8))
    c = compare(loop, one)
    assert c.compared == "whole_captures" and c.base.steps == 8 and c.head.steps == 0
    assert c.warnings[0].startswith("no steps on the head")
    assert c.step_time.change == pytest.approx(one.ranks[0].window_us / loop.ranks[0].window_us - 1, abs=1e-4)


FETCHED = Path(os.environ.get("TRACEANALYZER_FETCHED", CORPUS.parent / "corpus_fetched"))


@pytest.mark.parametrize("row, kind, steps", [
    # vLLM compiling its model piecewise: 23 compiled pieces (one `## Call CompiledFxGraph ##` annotation each)
    # inside one `nn.Module: GptOssForCausalLM_0` call of a CUDA-graph capture: one forward, no steps
    ("tl_vllm_piecewise_capture/graph_capture_rank_0.1773709679453551615.pt.trace.json.gz", "window", 0),
    # a ResNet-18 training loop without markers (backward on its own thread): 4 iterations, still found
    ("tl_ddp_resnet18_no_pool/train_resnet18.json.gz", "detected", 4),
])
def test_fetched_traces_steps(row, kind, steps):
    path = FETCHED / row
    if not path.is_file():
        pytest.skip(f"fetched trace absent (run benchmarks/verdicts/fetch_traces.py): {row}")
    r = ta.analyze(path).ranks[0]
    assert (r.step_source.kind, r.steps) == (kind, steps)

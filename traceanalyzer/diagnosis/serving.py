"""Serving and inference processes: figures (analyses/serving.py) -> findings and advice; never a verdict of a
rank with GPU work.

* `serving_phases` finding: the phase mix of a serving loop, from its engine's own annotations only (by time,
  with requests and query tokens where the annotations write them; mixed batches counted as mixed), or that
  the phase is unknown when a serving engine ran without them.
* Advice by evidence: a precision (FP8, int8/int4), a fused attention kernel or compilation is proposed only
  when the kernels it would change take at least MATERIAL_GPU_SHARE of the phase's kernel time, and never when
  the run already uses it (GEMMs in 8-bit or narrower formats, fused attention kernels, torch.compile's code).
* The iterations' own findings (decode GPU-bound by kernel class, scheduling, sampling, graph bubbles, KV-cache
  copies): diagnosis/serving_iterations.py; the time per output token in the phase mix's evidence.
* A process with no GPU work and only Python frames is said to be a frontend or driver process, with the
  trace to analyse instead, in place of the host loop's verdict.
"""

from __future__ import annotations

from dataclasses import replace

from ..analyses import RankAnalysis
from ..analyses.serving import DECODE, MIXED, PREFILL, SOURCE_WORDS, FrontendFacts, KernelMix, ServingPhases
from ..causes import GPU_BOUND, HOST_BOUND, LAUNCH_BOUND, SYNC_BOUND, UNDETERMINED
from .advice import advice_for
from .rules import Finding, RankDiagnosis
from .serving_iterations import iteration_findings, tpot_line
from .thresholds import MATERIAL_GPU_SHARE
from .wording import Quoted, duration

SERVING_PHASES = "serving_phases"
FRONTEND_PROCESS = "frontend_process"

# Advice by the dominant phase and the verdict, only where the two together point at a fix; a lever that changes
# a kind of kernel is added by `_kernel_levers`, with its evidence.
SERVING_ADVICE = {
    (DECODE, "small_steps"): (
        "Decode dominates and its steps are too small to keep the GPU busy: keep CUDA graphs on for decode "
        "(no --disable-cuda-graph in SGLang, no enforce_eager=True in vLLM) and let more requests run per "
        "decode step (SGLang --max-running-requests, vLLM max_num_seqs), so each step does more work."),
    (DECODE, GPU_BOUND): (
        "Decode dominates a busy GPU: larger decode batches or speculative decoding raise the tokens each "
        "decode step produces."),
    (PREFILL, GPU_BOUND): (
        "Prefill dominates a busy GPU: prefix caching skips prompts already seen, and chunked prefill spreads "
        "long prompts over steps shared with decode."),
}
# Decode on a busy GPU whose attention (reading the KV cache) is material and not already in 8 bits.
FP8_KV_ADVICE = ("Attention, which reads the whole KV cache for every decoded token, takes a material share of "
                 "decode's GPU time: an FP8 KV cache (vLLM kv_cache_dtype='fp8', SGLang --kv-cache-dtype fp8_e4m3) "
                 "halves what it reads.")
FP32_ADVICE = ("Matrix multiplications and convolutions take a material share of the GPU time in FP32 (see the "
               "evidence), without tensor cores: allow TF32 (torch.backends.cuda.matmul.allow_tf32 = True, "
               "torch.backends.cudnn.allow_tf32 = True) or run them in bf16/fp16 (torch.autocast).")
PRECISION_ADVICE = ("Matrix multiplications take a material share of the GPU time in 16-bit or wider formats (see "
                    "the evidence): FP8, or int8/int4 weight-only quantisation, cuts their time where the model's "
                    "accuracy allows.")
ATTENTION_ADVICE = ("Attention runs unfused (softmax kernels, no fused attention kernel) and takes a material share "
                    "of the GPU time: use a fused attention kernel (torch.nn.functional.scaled_dot_product_attention, "
                    "FlashAttention).")
COMPILE_ADVICE = ("Memory-bound elementwise kernels take a material share of the GPU time and no torch.compile code "
                  "runs: compile the model (torch.compile) to fuse them.")
NO_PHASE_ADVICE = ("Capture with the serving engine's own profiler (vLLM's torch profiler, SGLang's /start_profile), "
                   "whose traces annotate each iteration with its prefill and decode requests, to split the GPU time "
                   "by phase.")
FRONTEND_ADVICE = ("Analyse the trace of the process that runs the model (the serving engine's core or worker "
                   "process, the training worker): this one hands work to it and waits for the results.")
FRONTEND_HEADLINE = ("No GPU work in this process: it is a frontend/driver process (Python frames only); analyse the "
                     "engine/worker process's trace instead.")


def material(ns: int, of_ns: int) -> bool:
    """A kind of kernel worth a lever: at least MATERIAL_GPU_SHARE of `of_ns` (the phase's kernel time). Not
    rules.material, which weighs a cause's lost time against the window."""
    return of_ns > 0 and ns >= MATERIAL_GPU_SHARE * of_ns


def _kernel_levers(k: KernelMix, framework: str, inference: bool = True) -> tuple[str, ...]:
    """The levers on kinds of kernels that the mix shows to be material and not already pulled (quantising
    16-bit GEMMs is an inference lever; training is told of FP32 ones only)."""
    out = []
    if material(k.gemm_ns, k.kernel_ns) and material(k.fp32_gemm_ns, k.gemm_ns):
        out.append(FP32_ADVICE)
    elif inference and material(k.gemm_ns, k.kernel_ns) and not material(k.low_precision_gemm_ns, k.gemm_ns):
        out.append(PRECISION_ADVICE)
    if material(k.attention_ns, k.kernel_ns) and k.fused_attention_ns == 0:
        out.append(ATTENTION_ADVICE)
    if material(k.memory_bound_ns, k.kernel_ns) and not k.compiled and framework.lower() in ("pytorch", "torch"):
        out.append(COMPILE_ADVICE)
    return tuple(out)


def mix_line(k: KernelMix, q: Quoted, where: str) -> str:
    """The kernel mix as one evidence line (its shares into `q`)."""
    formats = f"; {', '.join(k.formats)} GEMMs by name" if k.formats else ""
    gemm = q.ns(k.gemm_ns, 'gemm_us', k.kernel_ns, 'kernel_us')  # the shares in the order the text says them
    low = (f", {q.ns(k.low_precision_gemm_ns, 'low_precision_gemm_us', k.gemm_ns, 'gemm_us')} of it in 8-bit or "
           f"narrower formats{formats}" if k.gemm_ns else "")
    if k.fp32_gemm_ns:
        low += f", {q.ns(k.fp32_gemm_ns, 'fp32_gemm_us', k.gemm_ns, 'gemm_us')} in FP32"
    fused = "fused" if k.fused_attention_ns else "no fused kernel"
    return (f"kernels{where}: {duration(k.kernel_ns)}; GEMMs and convolutions {gemm}"
            f"{low}; attention {q.ns(k.attention_ns, 'attention_us', k.kernel_ns, 'kernel_us')} ({fused}); "
            f"memory-bound kernels {q.ns(k.memory_bound_ns, 'memory_bound_kernel_us', k.kernel_ns, 'kernel_us')}"
            f"{'; torch.compile code runs' if k.compiled else ''} (by kernel name)")


def _count(n: int | None, what: str) -> str:
    return "" if n is None else f"{n} {what}{'s' if n != 1 else ''}"


def serving_finding(p: ServingPhases, primary: str) -> Finding:
    """The serving loop's phase mix from its engine's annotations, with advice only where the dominant phase and the
    verdict together point at a fix and the kernels show the lever is material and not already pulled."""
    q = Quoted()
    top = p.dominant
    if top is None:
        u = p.unphased
        ran = (f"{u.iterations} iteration{'s' if u.iterations != 1 else ''} of vLLM's model runner (its execute_model "
               f"frames, median {duration(u.median_iteration_ns)}) ran" if u is not None
               else "a serving engine's attention kernels ran")
        return Finding(SERVING_PHASES, None, "Serving loop: phase unknown", "low", 0, 0.0, (
            f"{ran}, but no annotation of its iterations (vLLM execute_context_C"
            "(...)_generation_G(...), SGLang step[...], TensorRT-LLM _forward_step) is in the trace: the phase of "
            "its work is unknown; kernel names do not tell it (FlashInfer's decode kernel is named "
            "BatchPrefillWithPagedKVCache)",), (NO_PHASE_ADVICE,))
    total = p.time_ns
    parts = []
    for ph in p.phases:
        counts = [_count(ph.requests, "request"), _count(ph.tokens, "query token")]
        said = ", ".join(c for c in counts if c)
        parts.append(f"{ph.phase} {ph.iterations} iteration{'s' if ph.iterations != 1 else ''}, "
                     f"{duration(ph.time_ns)}" + (f" ({said})" if said else ""))
    share = q.ns(top.time_ns, f"{top.phase}_us", total, "annotated_us")
    lines = [f"{'; '.join(parts)}, by the engine's annotations ({', '.join(SOURCE_WORDS[s] for s in p.sources)}; "
             f"a batch with prefill and decode requests is mixed): {top.phase} is {share} of the annotated time"]
    k = top.kernels
    if k.kernel_ns:
        lines.append(mix_line(k, q, f" launched in {top.phase} iterations"))
    lines += [tpot_line(ph) for ph in p.phases if ph.phase == DECODE]
    key = (top.phase, "small_steps" if primary in (LAUNCH_BOUND, HOST_BOUND, SYNC_BOUND) else primary)
    advice = [SERVING_ADVICE[key]] if key in SERVING_ADVICE else []
    if key == (DECODE, GPU_BOUND) and material(k.attention_ns, k.kernel_ns) and not k.attention_formats:
        advice.append(FP8_KV_ADVICE)
    what = "mixed batches dominate" if top.phase == MIXED else f"{top.phase} dominates"
    return Finding(SERVING_PHASES, None, f"Serving loop: {what}", "low", 0, 0.0, tuple(lines), tuple(advice),
                   figures=q.figures, shares=tuple(q.shares))


def frontend_diagnosis(rd: RankDiagnosis, f: FrontendFacts) -> RankDiagnosis:
    """A process that only ran Python: what it is and which trace to analyse, in place of the host loop's verdict
    and its findings (its time is waiting on the engine, not a loop to speed up)."""
    frames = "; ".join(f"{name[:80]} {duration(ns)}" for name, ns in f.top_frames)
    evidence = [f"{f.python_events} Python frames on {f.threads} thread{'s' if f.threads != 1 else ''} over "
                f"{duration(f.span_ns)}; no GPU work, no framework operators and no GPU runtime calls in this process"]
    if frames:
        evidence.append(f"innermost frames with the most time: {frames}")
    finding = Finding(FRONTEND_PROCESS, None, "No GPU work in this process: a frontend or driver process", "low", 0,
                      0.0, tuple(evidence), (FRONTEND_ADVICE,))
    host_loop = {"cpu_input_bound", "cpu_compute_bound", "cpu_optimizer", "cpu_annotation", "cpu_elsewhere",
                 "named_range"}
    kept = tuple(x for x in rd.findings if x.id not in host_loop and not x.id.startswith("pattern_"))
    return replace(rd, primary=UNDETERMINED, host_primary=None,
                   reason="no GPU work in this process: only Python frames (a frontend or driver process)",
                   headline=FRONTEND_HEADLINE, findings=(finding, *kept), headline_figures={}, headline_shares=(),
                   verdict_note=None, headline_detail="")


def add_serving_findings(rd: RankDiagnosis, ra: RankAnalysis) -> RankDiagnosis:
    """The rank's diagnosis with its serving loop's phases, a GPU-bound inference finding's levers chosen by its
    kernels, and a frontend process said to be one."""
    c = ra.causes
    if c is None:
        return rd
    if c.frontend is not None and not ra.devices:
        return frontend_diagnosis(rd, c.frontend)
    findings = list(rd.findings)
    top = c.serving.dominant if c.serving is not None else None
    mix = top.kernels if top is not None and top.kernels.kernel_ns else c.kernels
    if mix is not None:
        where = f" launched in {top.phase} iterations" if top is not None and mix is top.kernels else ""
        # wherever the GPU-bound advice is given (the verdict's finding, the steady state after start-up)
        gpu_bound = set(advice_for(GPU_BOUND, ra.framework, c.workload))
        inference = c.workload == "inference"
        findings = [_with_levers(f, mix, ra.framework, where, inference) if gpu_bound & set(f.advice) else f
                    for f in findings]
    if c.serving is not None and ra.devices:
        findings.append(serving_finding(c.serving, rd.primary))
        findings += iteration_findings(c.serving)
    return replace(rd, findings=tuple(findings))


def _with_levers(f: Finding, mix: KernelMix, framework: str, where: str, inference: bool = True) -> Finding:
    """A GPU-bound finding with the kernel mix as evidence and the levers it shows first in its advice."""
    q = Quoted(dict(f.figures), list(f.shares))
    line = mix_line(mix, q, where)
    return replace(f, evidence=(*f.evidence, line), advice=(*_kernel_levers(mix, framework, inference), *f.advice),
                   figures=q.figures, shares=tuple(q.shares))

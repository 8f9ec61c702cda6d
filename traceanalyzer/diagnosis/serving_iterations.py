"""A serving engine's iterations (analyses/serving.py `PhaseFigures`) -> findings that say what sets the pace of its
iterations and what to change; the rank's verdict stays the rules' (diagnosis/rules.py).

* Decode GPU-bound: decode iterations whose GPU is busy at least SERVING_GPU_BOUND_SHARE of their time and the
  scheduling gaps before them, by the class of kernel that takes most of their kernel time (dense GEMMs,
  mixture-of-experts kernels, attention, communication; by kernel name), with the lever of that class.
* Scheduling-bound: the median time with no GPU work before an iteration (the engine scheduling its batch) is
  material (rules.material) against the phase's median iteration.
* Sampling / logits processing and KV-cache copies: those kernels take at least SERVING_AUX_KERNEL_SHARE of the
  phase's kernel time (work that is no model math).
* Graph bubbles: idle between the GPU work of iterations that replay CUDA graphs, material against their time.
* TPOT as the GPU timeline sees it: the median decode iteration (each request gets one token per iteration) and,
  with batch sizes, the iteration time per output token of the batch, in the evidence.
The phase of an iteration comes only from its engine's annotation, never from a kernel's name.
"""

from __future__ import annotations

from ..analyses.serving import DECODE, UNKNOWN, KernelMix, PhaseFigures, ServingPhases
from .rules import Finding, material
from .thresholds import MATERIAL_GPU_SHARE, SERVING_AUX_KERNEL_SHARE, SERVING_GPU_BOUND_SHARE
from .wording import Quoted, duration

DECODE_GPU_BOUND = "serving_decode_gpu_bound"
SCHEDULING = "serving_scheduling"
SAMPLING = "serving_sampling"
GRAPH_BUBBLES = "serving_graph_bubbles"
KV_CACHE_COPIES = "serving_kv_cache_copies"

# The lever of each class of kernel that sets a GPU-bound decode's pace.
CLASS_ADVICE = {
    "dense GEMMs": (
        "Dense GEMMs set decode's pace: a decode step reads every weight once for its whole batch, so more requests "
        "per step (vLLM max_num_seqs, SGLang --max-running-requests) add tokens at little cost until the GEMMs turn "
        "compute-bound; tensor parallelism splits them."),
    "mixture-of-experts kernels": (
        "Expert (MoE) kernels set decode's pace: tune the fused-MoE kernel's configuration for this GPU and batch "
        "sizes (vLLM ships per-GPU tuned configs), spread experts over GPUs (vLLM --enable-expert-parallel, SGLang "
        "--ep-size), or run the experts in FP8."),
    "attention": (
        "Attention sets decode's pace: it reads every request's whole KV cache each step, so it grows with context "
        "length; an FP8 KV cache (vLLM kv_cache_dtype='fp8', SGLang --kv-cache-dtype fp8_e4m3) halves what it reads, "
        "and a paged-attention backend tuned for decode (FlashInfer, FlashAttention 3) reads it faster."),
    "communication": (
        "Communication between tensor-parallel GPUs sets decode's pace: a smaller tensor-parallel size with more "
        "replicas (data parallel), the engine's custom all-reduce (no --disable-custom-all-reduce), or faster links "
        "(NVLink) shorten it."),
}
# Dense GEMMs in 16-bit or wider formats (not MATERIAL_GPU_SHARE of them in 8 bits or narrower already).
QUANTISE_ADVICE = ("Weight quantisation (FP8, int4 AWQ/GPTQ) cuts what decode's GEMMs read, where the model's "
                   "accuracy allows.")
SCHEDULING_ADVICE = (
    "The GPU waits while the engine schedules the next batch (preparing its inputs, sampling and detokenising on "
    "the host): overlap scheduling with the GPU's work (vLLM --async-scheduling; SGLang's overlap scheduler, on "
    "unless --disable-overlap-schedule), keep CUDA graphs on so each step launches at once, and keep request "
    "handling and detokenisation off the engine's loop.")
SAMPLING_ADVICE = (
    "Sampling and logits processing are no model math: use the engine's fused sampling kernels (FlashInfer's top-k / "
    "top-p sampling), avoid per-request logits processors and penalties where the application allows, and avoid "
    "returning log-probabilities that are not read.")
GRAPH_BUBBLE_ADVICE = (
    "The GPU idles between the work of iterations that replay CUDA graphs: work between the graphs is launched "
    "eagerly (piecewise graphs leave attention out): capture the whole decode step (vLLM cudagraph_mode "
    "FULL_AND_PIECEWISE or FULL_DECODE_ONLY), and keep batch sizes among the captured sizes "
    "(cudagraph_capture_sizes, SGLang --cuda-graph-max-bs).")
KV_CACHE_ADVICE = (
    "KV-cache writes and block copies take a material share of the kernel time: block copies and swaps come from "
    "preemption when the KV cache is full; give it more memory (vLLM gpu_memory_utilization, SGLang "
    "--mem-fraction-static), admit fewer concurrent requests, or use an FP8 KV cache.")


def iterations_of(phase: str) -> str:
    """How a text names a phase's iterations ("decode iterations", "iterations of unknown phase")."""
    return "iterations of unknown phase" if phase == UNKNOWN else f"{phase} iterations"


def kernel_classes(k: KernelMix) -> dict[str, int]:
    """The GPU time of the classes that can set a decode step's pace (by kernel name), largest first."""
    got = {"dense GEMMs": k.dense_gemm_ns, "mixture-of-experts kernels": k.moe_ns, "attention": k.attention_ns,
           "communication": k.comm_ns}
    return dict(sorted(got.items(), key=lambda x: -x[1]))


def tpot_line(p: PhaseFigures) -> str:
    """TPOT as the GPU timeline sees it: the median decode iteration, per output token of its batch when known."""
    line = (f"time per output token as the GPU timeline sees it: {duration(p.median_iteration_ns)} per decode "
            "iteration (the median; each request in the batch gets one token per iteration)")
    if p.median_ns_per_token is not None and p.median_batch_size is not None:
        line += (f"; median batch {p.median_batch_size:g}: {duration(p.median_ns_per_token)} of iteration time per "
                 "output token of the batch")
    return line


def iteration_findings(sp: ServingPhases) -> tuple[Finding, ...]:
    """The findings of the engine's iterations, phase by phase (PHASES order)."""
    out: list[Finding] = []
    for p in sp.all_phases:
        if p.phase == DECODE:
            out += _decode_gpu_bound(p)
        out += _scheduling(p) + _aux_kernels(p) + _graph_bubbles(p)
    return tuple(out)


def _decode_gpu_bound(p: PhaseFigures) -> list[Finding]:
    """Decode iterations whose GPU is busy SERVING_GPU_BOUND_SHARE of their time and of the scheduling gaps before
    them (the decode loop's time: busy iterations behind long gaps are no GPU-bound loop)."""
    loop_ns = p.span_ns + p.host_gap_ns
    k = p.kernels
    if not loop_ns or p.gpu_busy_ns < SERVING_GPU_BOUND_SHARE * loop_ns or not k.kernel_ns:
        return []
    q = Quoted()
    busy = q.ns(p.gpu_busy_ns, "decode_gpu_busy_us", loop_ns, "decode_loop_us")
    lines = [f"{p.iterations} decode iteration{'s' if p.iterations != 1 else ''} (by the engine's annotations), "
             f"median {duration(p.median_iteration_ns)}: the GPU busy {busy} of their time and the scheduling gaps "
             f"before them ({duration(p.host_gap_ns)})"]
    classes = kernel_classes(k)
    top = next(iter(classes))
    parts = ", ".join(f"{name} {q.ns(ns, name.split()[0].replace('-', '_') + '_us', k.kernel_ns, 'kernel_us')}"
                      for name, ns in classes.items() if ns or name == top)
    lines.append(f"kernels launched in them ({duration(k.kernel_ns)}): {parts} (by kernel name)")
    title_q = Quoted()
    title = (f"Decode is GPU-bound: {top} take {title_q.ns(classes[top], 'class_us', k.kernel_ns, 'kernel_us')} "
             "of its kernel time")
    title_q.extend(q)
    advice: tuple[str, ...] = (CLASS_ADVICE[top],) if classes[top] else ()
    if top == "dense GEMMs" and classes[top] and k.low_precision_gemm_ns < MATERIAL_GPU_SHARE * k.gemm_ns:
        advice += (QUANTISE_ADVICE,)
    return [Finding(DECODE_GPU_BOUND, None, title, "low", 0, 0.0, tuple(lines), advice, figures=title_q.figures,
                    shares=tuple(title_q.shares))]


def _scheduling(p: PhaseFigures) -> list[Finding]:
    gap = p.median_host_gap_ns
    if gap is None or not material(gap, p.median_iteration_ns):
        return []
    q = Quoted()
    share = q.ns(gap, f"{p.phase}_median_host_gap_us", p.median_iteration_ns, f"{p.phase}_median_iteration_us")
    its = iterations_of(p.phase)
    title = f"Scheduling between {its}: {duration(gap)} with no GPU work before each ({share} of a median iteration)"
    lines = [f"{duration(p.host_gap_ns)} with no GPU work at all before {its} that follow another, median "
             f"{duration(gap)}; median iteration {duration(p.median_iteration_ns)}"]
    return [Finding(SCHEDULING, None, title, "medium", 0, 0.0, tuple(lines), (SCHEDULING_ADVICE,),
                    figures=q.figures, shares=tuple(q.shares))]


def _aux_kernels(p: PhaseFigures) -> list[Finding]:
    k = p.kernels
    out = []
    for fid, ns, what, advice in ((SAMPLING, k.sampling_ns, "Sampling and logits processing", SAMPLING_ADVICE),
                                  (KV_CACHE_COPIES, k.kv_cache_ns, "KV-cache writes and copies", KV_CACHE_ADVICE)):
        if not k.kernel_ns or ns < SERVING_AUX_KERNEL_SHARE * k.kernel_ns:
            continue
        q = Quoted()
        share = q.ns(ns, f"{fid.removeprefix('serving_')}_us", k.kernel_ns, "kernel_us")
        title = f"{what} take {share} of the kernel time of {iterations_of(p.phase)}"
        lines = (f"{duration(ns)} of {duration(k.kernel_ns)} of kernels launched in {iterations_of(p.phase)}, by "
                 "kernel name",)
        out.append(Finding(fid, None, title, "low", 0, 0.0, lines, (advice,), figures=q.figures,
                           shares=tuple(q.shares)))
    return out


def _graph_bubbles(p: PhaseFigures) -> list[Finding]:
    if not p.graph_replays or not material(p.gpu_bubble_ns, p.span_ns):
        return []
    q = Quoted()
    share = q.ns(p.gpu_bubble_ns, f"{p.phase}_bubble_us", p.span_ns, f"{p.phase}_iterations_us")
    title = f"GPU bubbles inside {iterations_of(p.phase)}, which replay CUDA graphs: {share} of their time"
    lines = (f"{duration(p.gpu_bubble_ns)} idle between the first and last GPU work of {iterations_of(p.phase)} "
             f"({p.graph_replays} graph replay{'s' if p.graph_replays != 1 else ''} in them)",)
    return [Finding(GRAPH_BUBBLES, None, title, "low", 0, 0.0, lines, (GRAPH_BUBBLE_ADVICE,), figures=q.figures,
                    shares=tuple(q.shares))]

"""Serving and inference processes: Timeline -> frozen figures that choose advice, never a verdict.

* Phases of generation (prefill, decode, mixed) come ONLY from the engines' own annotations of their
  iterations: vLLM `execute_context_C(T...)_generation_G(T...)` and `execute_N_context_C(sqT...)_generation_G(sqT...)`
  (context = prefill requests, generation = decode requests), SGLang `step[DECODE bs=B]` / `step[EXTEND bs=B toks=T]`
  / `step[PREFILL ...]` / `step[MIXED ...]`, TensorRT-LLM `_forward_step N: C ctx reqs, G gen reqs`, and host
  ranges named prefill / decode (without any of them, vLLM's model-runner `execute_model` Python frames mark the
  iterations, of unknown phase). A batch with both prefill and decode requests is mixed. Kernel names never
  tell the phase: FlashInfer's decode kernel is `BatchPrefillWithPagedKVCache`; without annotations the phase
  is unknown.
* The engine's iterations, one row each (`IterationFigures`): its span (the annotated host range, stretched to the
  end of the GPU work launched inside it), the union of that GPU work (CUDA-graph replays included: CUPTI gives a
  replay's nodes the correlation of the `cudaGraphLaunch` that launched them), the GPU bubbles inside it, the
  time before it with no GPU work at all since the previous iteration's work ended (the engine's scheduling) and
  its graph replays; and per phase the medians of those (`PhaseFigures`).
* What the GPU time of a set of kernels is spent in, by kernel name (`KernelMix`): GEMMs and the share of
  them already in 8-bit or narrower formats, attention (fused kernels, softmax), memory-bound kernels, and
  whether torch.compile's code runs: the evidence advice needs before it proposes a precision, an attention
  kernel or compilation, and what says the run already uses one.
* A process with no GPU work, no framework operators and no runtime calls, only Python frames (a server's
  frontend, an API process waiting on its engine): `FrontendFacts`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import intervals as iv
from .. import timeline as T
from ..timeline import Timeline
from .figures import FP32_MATMUL_KERNEL, MEMORY_BOUND_KERNEL, launch_times
from .thresholds import MAX_ITERATION_ROWS

PREFILL, DECODE, MIXED = "prefill", "decode", "mixed"
PHASES = (PREFILL, DECODE, MIXED)
# An iteration whose range names no phase (an engine's model-runner range): its phase is unknown, never guessed.
UNKNOWN = "unknown"
ITERATION_PHASES = (*PHASES, UNKNOWN)

# --- the engines' annotations of one iteration ----------------------------------------------------------
# vLLM (and serving harnesses in its words): C context (prefill) requests with their query tokens first in the
# parentheses (`888_788544`: 888 tokens; `sq8155sk...`: 8155), G generation (decode) requests likewise.
VLLM_BATCH = re.compile(r"^execute_(?:\d+_)?context_(?P<pre_req>\d+)\((?:sq)?(?P<pre_tok>\d+)?[^)]*\)"
                        r"_generation_(?P<dec_req>\d+)\((?:sq)?(?P<dec_tok>\d+)?")
# SGLang's scheduler: the forward mode, the batch size and (extend) the tokens.
SGLANG_STEP = re.compile(r"^step\[(?P<mode>[A-Z_]+)(?:\s+bs=(?P<bs>\d+))?(?:\s+toks=(?P<toks>\d+))?")
SGLANG_MODES = {"DECODE": DECODE, "TARGET_VERIFY": DECODE, "EXTEND": PREFILL, "PREFILL": PREFILL,
                "DRAFT_EXTEND": PREFILL, "MIXED": MIXED}
# TensorRT-LLM's PyExecutor: `[Executor] _forward_step 12: 3 ctx reqs, 29 gen reqs`.
TRTLLM_STEP = re.compile(r"_forward_step(?:\s+\d+)?:\s*(?P<pre_req>\d+)\s+ctx reqs?,\s*(?P<dec_req>\d+)\s+gen reqs?")
# Host ranges named for a phase (`prefill`, `decode_step_3`); graph captures (`capture_32_DECODE`) are start-up.
NAMED_PREFILL = re.compile(r"^(?!capture_).*(?<![a-z])prefill(?![a-z])", re.IGNORECASE)
NAMED_DECODE = re.compile(r"^(?!capture_).*(?<![a-z])decode(?![a-z])", re.IGNORECASE)
# vLLM's model runner, one call per engine iteration (a with_stack capture's Python frames): the iterations where no
# annotation names them (vLLM V1 before its execute_context annotations), of unknown phase.
MODEL_RUNNER = re.compile(r"(?:^|/)(?:gpu_)?model_runner\.py\(\d+\): execute_model$")
SOURCE_WORDS = {"vllm": "vLLM execute_context_C(...)_generation_G(...)", "sglang": "SGLang step[MODE bs=...]",
                "tensorrt_llm": "TensorRT-LLM _forward_step: C ctx reqs, G gen reqs",
                "named": "host ranges named prefill / decode",
                "vllm_model_runner": "vLLM model runner execute_model frames (no phase)"}
_SOURCES = tuple(SOURCE_WORDS)

# Attention kernels of serving engines (paged / FlashInfer / TensorRT-LLM / unified): they show a serving engine
# ran, never which phase.
ENGINE_ATTENTION = re.compile(r"paged_attention|BatchPrefillWith|BatchDecodeWith|unified_attention|decode_attention"
                              r"|context_attention_fwd|context_fmha|masked_multihead_attention|mmha|xqa",
                              re.IGNORECASE)

# --- what kernels spend their time in, by name -----------------------------------------------------------
# Fused attention kernels (FlashAttention, FlashInfer, cuDNN / CK fmha, paged and unified attention, MLA).
FUSED_ATTENTION = re.compile(r"flash|fmha|attention|attn|mha|xqa|BatchPrefillWith|BatchDecodeWith|(?<![a-z])mla"
                             r"|sdpa", re.IGNORECASE)
# The unfused path's own kernel: softmax over the scores.
SOFTMAX = re.compile(r"softmax", re.IGNORECASE)
# Matrix multiplications and convolutions (cuBLAS / cuBLASLt / hipBLASLt / CUTLASS / Triton / MoE grouped GEMMs,
# cuDNN / MIOpen convolutions); attention first.
GEMM = re.compile(r"gemm|matmul|^Cijk_|nvjet|xmma|wgmma|cutlass|cublas|hipblaslt|bmm|scaled_mm|wvSplitK|_mm_|^mm_"
                  r"|marlin|machete|fused_moe|grouped_mm|conv|scudnn|winograd|fprop|miopen", re.IGNORECASE)
# Mixture-of-experts kernels: fused / grouped expert GEMMs, routing (top-k gating, token permutation), by name.
MOE = re.compile(r"moe|expert|grouped_(?:gemm|mm)|topk_softmax|topkGating|permute_|align_block_size", re.IGNORECASE)
# Token sampling and logits processing: samplers, top-k / top-p filtering, penalties, argmax, multinomial draws.
SAMPLING = re.compile(r"sampl|top_?p_|top_?k_?(?:renorm|mask|top_?p)|multinomial|argmax|gumbel|penalt"
                      r"|logits_?process|logprob|token_bitmask", re.IGNORECASE)
# Writes and copies of the KV cache: vLLM reshape_and_cache / copy_blocks / swap_blocks, SGLang's KV buffer
# writes, TensorRT-LLM's KV-cache transfers. Neither these nor the samplers are attention, whatever their names
# share with it (`reshape_and_cache_flash`, `flashinfer::sampling`).
# An attention kernel that reads the cache (`BatchPrefillWithPagedKVCache`) is none of them.
KV_CACHE = re.compile(r"reshape_and_cache|concat_and_cache|copy_blocks|swap_blocks|set_kv_buffer|store_kv"
                      r"|kv_?cache_?(?:copy|write|store|transfer|swap)|write_?(?:to_)?kv_?cache|copy_?kv",
                      re.IGNORECASE)
# 8-bit and narrower number formats in a GEMM's name.
LOW_PRECISION = {
    "fp8": re.compile(r"fp8|float8|e4m3|e5m2|f8f8|_f8_|w8a8", re.IGNORECASE),
    "fp4": re.compile(r"fp4|e2m1|float4", re.IGNORECASE),
    "int8": re.compile(r"int8|i8i8|s8s8|imma", re.IGNORECASE),
    "int4": re.compile(r"int4|w4a(?:8|16)|awq|gptq|marlin|machete", re.IGNORECASE),
}
# torch.compile's code: its generated Triton kernels and its compiled-graph annotations.
COMPILED = re.compile(r"^triton_(?:poi|red|per|tem)_fused|CompiledFxGraph|Torch-Compiled Region|CompiledFunction")


@dataclass(frozen=True)
class KernelMix:
    """Where a set of kernels spends its GPU time, by kernel name (summed durations, not a union)."""

    kernel_ns: int = 0
    gemm_ns: int = 0  # matrix multiplications (GEMM), attention kernels left out
    low_precision_gemm_ns: int = 0  # of them, in 8-bit or narrower formats by name
    fp32_gemm_ns: int = 0  # of them, in FP32 by name (figures.FP32_MATMUL_KERNEL: no tensor cores)
    attention_ns: int = 0  # fused attention kernels and softmax
    fused_attention_ns: int = 0  # fused attention kernels alone
    memory_bound_ns: int = 0  # elementwise, reductions, normalisation, copies: figures.MEMORY_BOUND_KERNEL, as
    # KernelTotals.memory_bound_ns counts them
    formats: tuple[str, ...] = ()  # the low-precision formats the GEMM names show ("fp8", "fp4", ...)
    attention_formats: tuple[str, ...] = ()  # those the fused attention kernels' names show (an FP8 KV cache)
    compiled: bool = False  # torch.compile's kernels or graphs in the trace
    moe_ns: int = 0  # mixture-of-experts kernels (MOE: expert GEMMs and routing), attention left out
    comm_ns: int = 0  # communication kernels (the timeline's `comm` column: names.COMM_KERNEL_NAMES)
    sampling_ns: int = 0  # sampling and logits processing (SAMPLING), attention and MoE left out
    kv_cache_ns: int = 0  # KV-cache writes and copies (KV_CACHE), attention left out
    moe_gemm_ns: int = 0  # of the GEMMs, those of experts (in both gemm_ns and moe_ns)

    @property
    def dense_gemm_ns(self) -> int:
        """GEMMs that are not a mixture of experts' (dense layers, the LM head)."""
        return max(self.gemm_ns - self.moe_gemm_ns, 0)


def kernel_mix(names: pd.Series, dur_ns: np.ndarray, compiled: bool = False,
               comm: np.ndarray | None = None) -> KernelMix:
    """The mix of kernels named `names` (a category) lasting `dur_ns`; `compiled`: torch.compile seen on the host;
    `comm`: which are communication kernels."""
    if not len(dur_ns):
        return KernelMix(compiled=compiled)
    codes = np.asarray(names.cat.codes.to_numpy(), dtype=np.int64)
    cats = names.cat.categories
    used = np.unique(codes[codes >= 0])
    text = [str(cats[c]) for c in used]

    def flags(pattern: re.Pattern[str]) -> np.ndarray:
        hit = np.zeros(len(cats) + 1, dtype=bool)
        hit[used] = [bool(pattern.search(n)) for n in text]
        return hit[codes]

    sampling_named, kv_named = flags(SAMPLING), flags(KV_CACHE)
    fused = flags(FUSED_ATTENTION) & ~sampling_named & ~kv_named
    attention = fused | (flags(SOFTMAX) & ~sampling_named)
    gemm = flags(GEMM) & ~attention
    formats = {f: flags(p) & gemm for f, p in LOW_PRECISION.items()}
    low = np.logical_or.reduce(list(formats.values()))
    seen = tuple(f for f, m in formats.items() if m.any())
    in_attention = tuple(f for f, p in LOW_PRECISION.items() if (flags(p) & fused).any())
    moe = flags(MOE) & ~attention
    comm_k = np.zeros(len(dur_ns), dtype=bool) if comm is None else np.asarray(comm, dtype=bool)
    sampling = sampling_named & ~moe & ~comm_k
    kv = kv_named & ~sampling & ~comm_k
    return KernelMix(int(dur_ns.sum()), int(dur_ns[gemm].sum()), int(dur_ns[low].sum()),
                     int(dur_ns[gemm & flags(FP32_MATMUL_KERNEL)].sum()), int(dur_ns[attention].sum()),
                     int(dur_ns[fused].sum()), int(dur_ns[flags(MEMORY_BOUND_KERNEL)].sum()),
                     seen, in_attention, compiled or bool(flags(COMPILED).any()), int(dur_ns[moe].sum()),
                     int(dur_ns[comm_k].sum()), int(dur_ns[sampling].sum()), int(dur_ns[kv].sum()),
                     int(dur_ns[moe & gemm].sum()))


@dataclass(frozen=True)
class IterationFigures:
    """One engine iteration: its innermost annotated host range and the GPU work launched inside it."""

    phase: str  # PREFILL, DECODE or MIXED, from the annotation
    batch_size: int | None  # requests in the batch (prefill + decode), where the annotation writes them
    tokens: int | None  # query tokens in it, likewise
    start_ns: int  # the host range's start (absolute)
    duration_ns: int  # the range's start to the later of its end and the end of the GPU work launched inside it
    gpu_busy_ns: int  # union of that GPU work (kernels, copies, memsets; graph replays' nodes), within the span
    gpu_bubble_ns: int  # idle between its first GPU work's start and its last's end (launch or graph bubbles)
    host_gap_before_ns: int | None  # no GPU work at all from the previous iteration's work end to this one's
    # start (the engine scheduling the batch; None for the first iteration)
    graph_replays: int  # CUDA-graph replays launched inside it


@dataclass(frozen=True)
class PhaseFigures:
    """The engine's annotated iterations of one phase."""

    phase: str  # PREFILL, DECODE or MIXED
    iterations: int
    time_ns: int  # the union of their spans (IterationFigures.duration_ns: to the end of their GPU work)
    requests: int | None  # requests in them, where every annotation writes it (None: not written)
    tokens: int | None  # query tokens in them, likewise
    kernels: KernelMix  # the GPU kernels launched inside them
    median_iteration_ns: int = 0  # median IterationFigures.duration_ns
    span_ns: int = 0  # summed iteration durations (IterationFigures.duration_ns)
    gpu_busy_ns: int = 0  # summed IterationFigures.gpu_busy_ns (each within its span: at most span_ns)
    gpu_bubble_ns: int = 0  # summed IterationFigures.gpu_bubble_ns
    median_host_gap_ns: int | None = None  # median host gap before its iterations that follow another
    host_gap_ns: int = 0  # summed host gaps before its iterations
    graph_replays: int = 0
    median_batch_size: float | None = None  # where every iteration writes it
    # decode: median of an iteration's duration over its batch size (GPU-timeline time per output token of
    # the batch; one token per request per decode iteration), where every iteration writes its batch size
    median_ns_per_token: int | None = None

    @property
    def gpu_busy_share(self) -> float | None:
        """Summed GPU busy over summed iteration time, in [0, 1]."""
        return self.gpu_busy_ns / self.span_ns if self.span_ns > 0 else None


@dataclass(frozen=True)
class ServingPhases:
    """A serving loop's phases, from its engine's annotations (innermost ranges, so an engine's own step inside a
    harness's range counts once)."""

    sources: tuple[str, ...]  # the annotation families read (keys of SOURCE_WORDS)
    phases: tuple[PhaseFigures, ...]  # those seen, in PHASES order; (): no annotation names a phase
    engine_kernels: bool = False  # a serving engine's attention kernels ran (they never tell the phase)
    # the iterations in start order, the first MAX_ITERATION_ROWS (the phases' figures count them all)
    iterations: tuple[IterationFigures, ...] = ()
    iterations_omitted: int = 0
    # iterations of unknown phase (model-runner ranges where no annotation names the phase), apart from `phases`
    unphased: PhaseFigures | None = None

    @property
    def all_phases(self) -> tuple[PhaseFigures, ...]:
        """The phases, then the iterations of unknown phase: what the iteration table summarises."""
        return self.phases + ((self.unphased,) if self.unphased is not None else ())

    @property
    def dominant(self) -> PhaseFigures | None:
        """The phase with the most annotated time (ties: PHASES order); None when no phase is annotated."""
        return max(self.phases, key=lambda p: (p.time_ns, -PHASES.index(p.phase)), default=None)

    @property
    def time_ns(self) -> int:
        return sum(p.time_ns for p in self.phases)


Parsed = tuple[int, int, int, int, int, int]


def _parse(name: str) -> Parsed | None:
    """(source, phase, prefill requests, decode requests, prefill tokens, decode tokens) of an iteration's
    annotation (-1: not written); None for any other name. A batch with no request of either kind is none."""
    m = VLLM_BATCH.match(name)
    if m:
        pre, dec = int(m["pre_req"]), int(m["dec_req"])
        counts = (pre, dec, int(m["pre_tok"]) if m["pre_tok"] else -1, int(m["dec_tok"]) if m["dec_tok"] else -1)
        return _with_phase(0, *counts)
    m = SGLANG_STEP.match(name)
    if m and m["mode"] in SGLANG_MODES:
        phase = SGLANG_MODES[m["mode"]]
        bs = int(m["bs"]) if m["bs"] else -1
        toks = int(m["toks"]) if m["toks"] else -1
        if phase == MIXED:  # SGLang's mixed chunked prefill: the split of its batch is not written
            return 1, PHASES.index(MIXED), -1, -1, -1, -1
        return (1, PHASES.index(phase), bs, 0, toks, 0) if phase == PREFILL else (1, PHASES.index(phase), 0, bs, 0, -1)
    m = TRTLLM_STEP.search(name)
    if m:
        return _with_phase(2, int(m["pre_req"]), int(m["dec_req"]), -1, -1)
    pre, dec = bool(NAMED_PREFILL.search(name)), bool(NAMED_DECODE.search(name))
    if pre or dec:
        return 3, PHASES.index(MIXED if pre and dec else PREFILL if pre else DECODE), -1, -1, -1, -1
    return None


def _with_phase(source: int, pre: int, dec: int, pre_tok: int, dec_tok: int) -> Parsed | None:
    if pre <= 0 and dec <= 0:
        return None
    phase = MIXED if pre > 0 and dec > 0 else PREFILL if pre > 0 else DECODE
    return source, PHASES.index(phase), pre, dec, pre_tok, dec_tok


def innermost(ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Flags of the ranges that contain no other range (an outer harness range around the engine's own step)."""
    order = np.lexsort((-end, ts))  # by start, the longer first among equal starts
    e = end[order]
    # the smallest end among the ranges that start at or after each one (and come later in that order)
    later_min = np.minimum.accumulate(e[::-1])[::-1]
    nxt = np.append(later_min[1:], np.iinfo(np.int64).max)
    keep = np.empty(len(ts), dtype=bool)
    keep[order] = nxt > e
    return keep


def serving_phases(tl: Timeline, rank: int) -> ServingPhases | None:
    """The rank's serving phases and iterations from its engine's annotations (else vLLM's model-runner frames, of
    unknown phase); None when neither is in the trace and no serving engine's attention kernel ran (then it is no
    serving loop as far as the trace tells)."""
    ev = tl.rank_events(rank)
    kind = ev["kind"].to_numpy()
    dev = ev["device"].to_numpy()
    kernels = ev[(kind == T.KERNEL) & (dev >= 0)]
    seen = kernels["name"].astype(str).unique() if len(kernels) else np.array([], dtype=object)
    engine = any(ENGINE_ATTENTION.search(n) for n in seen)
    rows = np.flatnonzero(((kind == T.ANNOTATION) | (kind == T.STEP)) & (dev < 0))
    parsed = _parse_rows(ev, rows) or _runner_rows(ev, kind)
    if parsed is None:
        return ServingPhases((), (), True) if engine else None
    rows, table = parsed
    ts = ev["ts_ns"].to_numpy()[rows]
    end = ts + ev["dur_ns"].to_numpy()[rows]
    keep = innermost(ts, end)
    order = np.argsort(ts[keep], kind="stable")  # the iterations in start order
    rows, table, ts, end = rows[keep][order], table[keep][order], ts[keep][order], end[keep][order]
    work = tl.gpu_work(rank)
    work = work[work["device"].to_numpy() >= 0]
    # each piece of GPU work in the (innermost) range its launch falls in (a graph replay's nodes: its
    # cudaGraphLaunch); ranges of different threads may overlap: the latest-starting one holds it
    w_ts = work["ts_ns"].to_numpy()
    launch = launch_times(ev, work["correlation"].to_numpy(), w_ts) if len(work) else np.zeros(0, np.int64)
    pos = np.searchsorted(ts, launch, side="right") - 1
    owner = np.where((pos >= 0) & (launch < end[np.clip(pos, 0, None)]), pos, -1)
    is_kernel = T.category_mask(work["kind"], (T.KERNEL,))
    compiled = _compiled_on_host(ev)
    k_names, k_dur = work["name"][is_kernel], work["dur_ns"].to_numpy()[is_kernel]
    k_comm, k_owner = work["comm"].to_numpy()[is_kernel], owner[is_kernel]
    it = _iteration_arrays(ts, end, w_ts, w_ts + work["dur_ns"].to_numpy(), owner, work["graph_id"].to_numpy(),
                           work["correlation"].to_numpy())
    span, busy, bubble, gap, replays = it
    batch = np.where((table[:, 2] >= 0) & (table[:, 3] >= 0), table[:, 2] + table[:, 3], -1)
    toks = np.where((table[:, 4] >= 0) & (table[:, 5] >= 0), table[:, 4] + table[:, 5], -1)
    phases = []
    for code, phase in enumerate(ITERATION_PHASES):
        mine = table[:, 1] == code
        if not mine.any():
            continue
        pre_req, dec_req, pre_tok, dec_tok = (table[mine, i] for i in (2, 3, 4, 5))
        requests = int(pre_req.sum() + dec_req.sum()) if (pre_req >= 0).all() and (dec_req >= 0).all() else None
        tokens = int(pre_tok.sum() + dec_tok.sum()) if (pre_tok >= 0).all() and (dec_tok >= 0).all() else None
        held = np.isin(k_owner, np.flatnonzero(mine))
        gaps = gap[mine][gap[mine] >= 0]
        known = bool((batch[mine] > 0).all())
        per_token = (int(np.median(span[mine] / batch[mine])) if known and phase == DECODE else None)
        phases.append(PhaseFigures(
            phase, int(mine.sum()), iv.total(iv.union(ts[mine], ts[mine] + span[mine])), requests, tokens,
            kernel_mix(k_names[held], k_dur[held], compiled, k_comm[held]), int(np.median(span[mine])),
            int(span[mine].sum()), int(busy[mine].sum()), int(bubble[mine].sum()),
            int(np.median(gaps)) if len(gaps) else None, int(gaps.sum()), int(replays[mine].sum()),
            float(np.median(batch[mine])) if known else None, per_token))
    unphased = phases.pop() if phases and phases[-1].phase == UNKNOWN else None
    rows_out = tuple(IterationFigures(ITERATION_PHASES[int(table[i, 1])], int(batch[i]) if batch[i] >= 0 else None,
                                      int(toks[i]) if toks[i] >= 0 else None, int(ts[i]), int(span[i]), int(busy[i]),
                                      int(bubble[i]), int(gap[i]) if gap[i] >= 0 else None, int(replays[i]))
                     for i in range(min(len(ts), MAX_ITERATION_ROWS)))
    sources = tuple(_SOURCES[s] for s in sorted(set(table[:, 0].tolist())))
    return ServingPhases(sources, tuple(phases), engine, rows_out, max(len(ts) - MAX_ITERATION_ROWS, 0), unphased)


def _iteration_arrays(ts: np.ndarray, end: np.ndarray, w_ts: np.ndarray, w_end: np.ndarray, owner: np.ndarray,
                      graph: np.ndarray, corr: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per iteration (host ranges `ts`..`end`, in start order) from the GPU work (`w_ts`..`w_end`) each holds
    (`owner`: its index, -1 none): span, busy (union of its work clipped to start at the range's start), bubbles
    (idle between its first work's start and its last's end), host gap before (idle of ALL the rank's GPU work
    from the previous iteration's last work end, or range end without work, to this one's first work start, or
    range start; -1 for the first) and graph replays (distinct graph launches among its work). int64 ns."""
    n = len(ts)
    mine = owner >= 0
    o, s, e = owner[mine], np.maximum(w_ts[mine], ts[owner[mine]]), w_end[mine]
    e = np.maximum(e, s)
    order = np.lexsort((s, o))
    o, s, e = o[order], s[order], e[order]
    busy = np.zeros(n, dtype=np.int64)
    first = ts.copy()
    last = end.copy()
    has = np.zeros(n, dtype=bool)
    if len(o):
        reach = pd.Series(e).groupby(o).cummax().to_numpy()  # the furthest end so far within its iteration
        new = np.r_[True, (o[1:] != o[:-1]) | (s[1:] > reach[:-1])]
        at = np.flatnonzero(new)
        seg_end = np.maximum.reduceat(e, at)
        busy = np.bincount(o[at], weights=(seg_end - s[at]).astype(np.float64), minlength=n).round().astype(np.int64)
        heads = np.flatnonzero(np.r_[True, o[1:] != o[:-1]])
        first[o[heads]] = s[heads]
        last_end = np.maximum.reduceat(e, heads)
        has[o[heads]] = True
        last[o[heads]] = last_end
    span = np.maximum(end, last) - ts
    work_last = np.where(has, last, end)
    bubble = np.where(has, (work_last - first) - busy, 0)
    gap = np.full(n, -1, dtype=np.int64)
    if n > 1:
        lo, hi = work_last[:-1], np.where(has, first, ts)[1:]
        hi = np.maximum(hi, lo)
        covered = iv.overlap_per_window(iv.union(w_ts, w_end), lo, hi)
        gap[1:] = (hi - lo) - covered
    replays = np.zeros(n, dtype=np.int64)
    g = mine & (graph != -1)
    if g.any():
        pairs = np.unique(np.stack([owner[g], graph[g], corr[g]], axis=1), axis=0)
        replays = np.bincount(pairs[:, 0], minlength=n).astype(np.int64)
    return span, busy, bubble, gap, replays


def _parse_rows(ev: pd.DataFrame, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The rows among `rows` whose names are an engine's iteration annotations, and their parsed figures (one
    row each: source, phase, prefill requests, decode requests, prefill tokens, decode tokens); None if none."""
    if not len(rows):
        return None
    codes = np.asarray(ev["name"].cat.codes.to_numpy()[rows], dtype=np.int64)
    cats = ev["name"].cat.categories
    found = {int(c): _parse(str(cats[c])) for c in np.unique(codes[codes >= 0])}
    found = {c: v for c, v in found.items() if v is not None}
    if not found:
        return None
    hit = np.isin(codes, list(found))
    table = np.array([found[int(c)] for c in codes[hit]], dtype=np.int64).reshape(-1, 6)
    return rows[hit], table


def _runner_rows(ev: pd.DataFrame, kind: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The model runner's execute_model frames (MODEL_RUNNER) as iterations of unknown phase, parsed as
    `_parse_rows` gives them; None when the capture has none."""
    rows = np.flatnonzero(kind == T.PYTHON)
    if not len(rows):
        return None
    codes = np.asarray(ev["name"].cat.codes.to_numpy()[rows], dtype=np.int64)
    cats = ev["name"].cat.categories
    hits = [int(c) for c in np.unique(codes[codes >= 0]) if MODEL_RUNNER.search(str(cats[c]))]
    if not hits:
        return None
    rows = rows[np.isin(codes, hits)]
    table = np.full((len(rows), 6), -1, dtype=np.int64)
    table[:, 0], table[:, 1] = _SOURCES.index("vllm_model_runner"), ITERATION_PHASES.index(UNKNOWN)
    return rows, table


def rank_kernel_mix(tl: Timeline, rank: int) -> KernelMix:
    """The mix of every kernel of the rank (all devices, the whole trace)."""
    ev = tl.rank_events(rank)
    kind = ev["kind"].to_numpy()
    k = ev[(kind == T.KERNEL) & (ev["device"].to_numpy() >= 0)]
    return kernel_mix(k["name"], k["dur_ns"].to_numpy(), _compiled_on_host(ev), k["comm"].to_numpy())


def _compiled_on_host(ev: pd.DataFrame) -> bool:
    """torch.compile's compiled-graph annotations among the host ranges."""
    host = ev[(ev["kind"] == T.ANNOTATION).to_numpy() & (ev["device"].to_numpy() < 0)]
    return bool(len(host)) and any(COMPILED.search(str(n)) for n in host["name"].unique())


@dataclass(frozen=True)
class FrontendFacts:
    """A process with no GPU work, no framework operators and no runtime calls: only Python frames."""

    python_events: int
    threads: int
    span_ns: int  # first frame's start to last frame's end
    # innermost frames (those holding no other frame of their thread) with the most time: (name, ns)
    top_frames: tuple[tuple[str, int], ...] = ()


FRONTEND_TOP_FRAMES = 3


def frontend_facts(tl: Timeline, rank: int) -> FrontendFacts | None:
    """The rank's facts when it only ran Python (a server's frontend, an API or driver process), else None."""
    ev = tl.rank_events(rank)
    kind = ev["kind"]
    if T.category_mask(kind, (*T.GPU_WORK_KINDS, T.CPU_OP, T.RUNTIME, T.DATALOADER)).any():
        return None
    py = ev[(kind == T.PYTHON).to_numpy()]
    if not len(py):
        return None
    pid, tid = py["pid"].to_numpy(), py["tid"].to_numpy()
    ts = py["ts_ns"].to_numpy()
    end = ts + py["dur_ns"].to_numpy()
    order = np.lexsort((-end, ts, tid, pid))
    p, t, s, e = pid[order], tid[order], ts[order], end[order]
    # innermost: the next frame of the same thread (in start order) starts at or after its end
    same_next = np.append((p[1:] == p[:-1]) & (t[1:] == t[:-1]), False)
    nxt_start = np.append(s[1:], np.iinfo(np.int64).max)
    leaf = ~same_next | (nxt_start >= e)
    names = py["name"].to_numpy()[order][leaf]
    dur = (e - s)[leaf]
    by_name = pd.Series(dur).groupby(pd.Series(names).astype(str)).sum()
    top = tuple((str(n), int(v)) for n, v in sorted(by_name.items(), key=lambda x: (-x[1], x[0]))[:FRONTEND_TOP_FRAMES])
    threads = len(set(zip(pid.tolist(), tid.tolist())))
    return FrontendFacts(len(py), threads, int(end.max() - ts.min()), top)

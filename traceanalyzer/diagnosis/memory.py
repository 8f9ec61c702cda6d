"""Memory findings: the memory figures of a rank (analyses/memory.py) -> findings with numbers.

Three findings, none a cause of idle time (they never change the verdict): memory nearly full
(activation checkpointing, mixed precision, a smaller batch), much memory left unused (a larger
batch may raise throughput; not said when the verdict is already allocator-bound), and memory
allocated at the end of every step growing from step to step over at least MEMORY_LEAK_MIN_STEPS real
steps (a leak: tensors kept across steps; a capture without steps has no leak finding).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..analyses import RankAnalysis
from ..analyses.capture import rank_device_label
from ..analyses.memory import MemoryFigures
from ..causes import ALLOCATOR_BOUND
from ..units import format_bytes
from .rules import Finding, RankDiagnosis
from .thresholds import (
    MEMORY_HEADROOM_MAX_USED_FRACTION,
    MEMORY_LEAK_MIN_GROWTH_BYTES,
    MEMORY_LEAK_MIN_STEPS,
    MEMORY_LEAK_SOON_STEPS,
    MEMORY_PRESSURE_FRACTION,
    MEMORY_PRESSURE_HIGH_FRACTION,
)
from .wording import FRACTION, percent

PRESSURE = "memory_pressure"
HEADROOM = "memory_headroom"
LEAK = "memory_leak"

ADVICE_PRESSURE = (
    "Recompute activations instead of keeping them: activation checkpointing "
    "(torch.utils.checkpoint.checkpoint on the large blocks).",
    "Mixed precision: torch.autocast(device_type='cuda', dtype=torch.bfloat16) halves activation memory.",
    "A smaller batch, with gradient accumulation to keep the effective batch size.",
    "When reserved is well above allocated (fragmentation): PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.",
)
ADVICE_HEADROOM = (
    "Raise the batch size (scale the learning rate with it) until the peak nears 80-90% of the device's "
    "memory, and compare samples per second.",
    "Or spend the memory on speed: turn off activation checkpointing, or use larger fused kernels.",
)
# Inference holds no activations across steps and no gradients: a serving engine reserves most of the GPU on
# purpose (its KV cache), and a larger batch means more concurrent requests, not a learning rate.
ADVICE_PRESSURE_INFERENCE = (
    "An inference engine reserves most of the GPU's memory on purpose, for its KV cache (vLLM "
    "gpu_memory_utilization, SGLang --mem-fraction-static): high reserved memory alone is by design. Lower "
    "that fraction only if other processes need the GPU or allocations fail; an eager model outside an engine "
    "frees memory with a smaller batch or torch.inference_mode().",
)
ADVICE_HEADROOM_INFERENCE = (
    "Batch more requests or tokens per step (more concurrent requests, a larger max_num_batched_tokens / "
    "max_num_seqs) until the peak nears 80-90% of the device's memory, and compare tokens per second.",
)
ADVICE_LEAK = (
    "Something keeps tensors from one step to the next: e.g. losses or outputs appended to a list "
    "without .item() / .detach() (total_loss += loss keeps every step's graph alive).",
    "Compare torch.cuda.memory_allocated() at the start of a few steps, or record a memory snapshot "
    "(torch.cuda.memory._record_memory_history) to see which allocation stays.",
)


def add_memory_findings(rd: RankDiagnosis, ra: RankAnalysis) -> RankDiagnosis:
    """The rank's diagnosis with its memory findings appended (unchanged when it has no memory events)."""
    mem = ra.memory
    if mem is None:
        return rd
    found: list[Finding] = []
    inference = ra.causes is not None and ra.causes.workload == "inference"
    for device, m in sorted(mem.devices.items()):
        label = rank_device_label(ra.capture, device)
        found += _pressure(m, label, inference)
        if rd.primary != ALLOCATOR_BOUND:
            found += _headroom(m, label, inference)
        found += _leak(m, label)
    if mem.host is not None:
        found += _leak(mem.host, "host")
    if not found:
        return rd
    return replace(rd, findings=(*rd.findings, *found))


def _device_figures(m: MemoryFigures) -> dict[str, float]:
    out = {"device": float(m.device), "peak_allocated_bytes": float(m.peak_allocated_bytes)}
    if m.peak_reserved_bytes is not None:
        out["peak_reserved_bytes"] = float(m.peak_reserved_bytes)
    if m.total_bytes is not None:
        out["total_bytes"] = float(m.total_bytes)
    return out


def _pct(x: float) -> str:  # finer than the rules' shares: memory fractions below 1% still say something
    return percent(x, small_below=0.01, small_digits=2)


def _used_text(m: MemoryFigures) -> str:
    what = "reserved" if m.peak_reserved_bytes is not None else "allocated"
    return f"{format_bytes(m.peak_used_bytes)} {what}"


def _pressure(m: MemoryFigures, label: str, inference: bool = False) -> list[Finding]:
    used = m.peak_used_fraction
    if used is None or used < MEMORY_PRESSURE_FRACTION:
        return []
    pct = _pct(used)
    evidence = (f"{label} peaked at {_used_text(m)}, {pct} of its {format_bytes(m.total_bytes)} "
                f"({format_bytes(m.peak_allocated_bytes)} allocated to tensors).",)
    return [Finding(PRESSURE, None, f"Peak {pct} of device memory on {label}",
                    "low" if inference else "high" if used >= MEMORY_PRESSURE_HIGH_FRACTION else "medium", 0, 0.0,
                    evidence, ADVICE_PRESSURE_INFERENCE if inference else ADVICE_PRESSURE,
                    figures={**_device_figures(m), "peak_fraction": round(used, 6)},
                    shares=(("peak_fraction", FRACTION),) * 2)]


def _headroom(m: MemoryFigures, label: str, inference: bool = False) -> list[Finding]:
    used, free = m.peak_used_fraction, m.headroom_fraction
    if used is None or free is None or used > MEMORY_HEADROOM_MAX_USED_FRACTION:
        return []
    pct = _pct(free)
    evidence = (f"{label} peaked at {_used_text(m)}, {_pct(used)} of its {format_bytes(m.total_bytes)}: "
                f"{pct} of the device's memory was never used.",)
    return [Finding(HEADROOM, None, f"Headroom {pct} on {label}: a larger batch may raise throughput", "low",
                    0, 0.0, evidence, ADVICE_HEADROOM_INFERENCE if inference else ADVICE_HEADROOM,
                    figures={**_device_figures(m), "headroom_fraction": round(free, 6),
                             "peak_fraction": round(used, 6)},
                    shares=(("headroom_fraction", FRACTION), ("peak_fraction", FRACTION),
                            ("headroom_fraction", FRACTION)))]


def _leak(m: MemoryFigures, label: str) -> list[Finding]:
    """A leak: the memory allocated at the end of a step grows in every step-to-step change, over at least
    MEMORY_LEAK_MIN_STEPS real steps (markers or a detected loop; `per_step` is empty without steps), so it
    never returns to a baseline. Growth through one forward pass (no steps) is never a leak."""
    growth = np.array([s.growth_bytes for s in m.per_step[1:]], dtype=np.int64)
    if len(m.per_step) < MEMORY_LEAK_MIN_STEPS or not (growth >= MEMORY_LEAK_MIN_GROWTH_BYTES).all():
        return []
    per_step = float(np.median(growth))
    first, last = m.per_step[0], m.per_step[-1]
    figures = {**_device_figures(m), "growth_per_step_bytes": per_step, "steps": float(len(m.per_step)),
               "grown_bytes": float(last.end_allocated_bytes - first.end_allocated_bytes)}
    severity = "medium"
    soon = ""
    if m.total_bytes:
        steps_left = max(m.total_bytes - last.end_allocated_bytes, 0) / per_step
        figures["steps_to_full"] = float(round(steps_left))
        soon = f"; at this rate the device is full in about {steps_left:,.0f} more steps"
        if steps_left < MEMORY_LEAK_SOON_STEPS:
            severity = "high"
    evidence = (f"Memory allocated on {label} at the end of a step grew in each of the {len(growth)} step-to-step "
                f"changes (steps {first.step}-{last.step}), by {format_bytes(per_step)} per step (median), "
                f"{format_bytes(figures['grown_bytes'])} in all{soon}.",)
    return [Finding(LEAK, None, f"Memory grows every step on {label}: a leak", severity, 0, 0.0, evidence,
                    ADVICE_LEAK, figures=figures)]

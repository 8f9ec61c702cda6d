"""The verdict's own finding and its first advice: what every face shows beside the headline.

The headline quotes one number per cause (docs/figures.md, "One number per cause"): the GPU time the
verdict's cause lost over the window, which is that cause's finding's `explains_us`, with its share of
the window (a CPU-only capture: the host loop part's time and share of step time). The faces show the
same finding's figures, the others only as labelled detail. Selection only: nothing is computed here.
"""

from __future__ import annotations

from ..causes import CPU_COMPUTE_BOUND, CPU_INPUT_BOUND, GPU_BOUND, UNDETERMINED, UNEXPLAINED
from ..result.types import AnalysisData, DiagnosisResult, FindingResult
from ._format import fmt_pct, fmt_us

# The host loop's findings that are its own work (a cpu_compute_bound verdict's number is the largest);
# workers without GPU kernels: a straggling worker's compute first (run/workers.py)
_HOST_WORK = ("straggler", "cpu_optimizer", "cpu_annotation", CPU_COMPUTE_BOUND, "cpu_elsewhere")


def verdict_id(d: DiagnosisResult) -> str:
    """The verdict the headline speaks for: the host loop's when there is no GPU verdict."""
    return d.host_primary if d.primary == UNDETERMINED and d.host_primary else d.primary


def verdict_finding(d: DiagnosisResult | None) -> FindingResult | None:
    """The finding whose number the headline quotes: the verdict's own (undetermined: the unexplained
    idle time; the host loop busy in its own work: its largest part), else the top finding."""
    if d is None or not d.findings:
        return None
    vid = verdict_id(d)
    wanted: tuple[str, ...] = (_HOST_WORK if vid == CPU_COMPUTE_BOUND else (UNEXPLAINED,) if vid == UNDETERMINED
                               else (vid,))
    found = next((f for f in d.findings if f.id in wanted), None)
    if found is None and vid == CPU_INPUT_BOUND:
        return None
    return found or d.findings[0]


# Findings the diagnosis puts ahead of the verdict's own because they say what to change first: a straggler the
# others wait for (fixing the transfers cannot help), the rest of a capture after its start-up, a model left on
# the CPU. The first thing to try is theirs, so it never contradicts a finding below it.
LEAD_FINDINGS = ("straggler", "steady_state", "model_on_cpu")


def top_advice(d: DiagnosisResult | None) -> str | None:
    """The first thing to try: a leading finding's first advice (LEAD_FINDINGS), else the verdict's finding's,
    else the first advice of any finding."""
    if d is not None and d.findings and d.findings[0].id in LEAD_FINDINGS and d.findings[0].advice:
        return d.findings[0].advice[0]
    f = verdict_finding(d)
    if f is not None and f.advice:
        return f.advice[0]
    return next((f.advice[0] for f in (d.findings if d else ()) if f.advice), None)


def share_basis(a: AnalysisData) -> str:
    """What a finding's share is of in this report: GPU time lost, the host loop's step time (no GPU), or
    the log samples (nvidia-smi logs alone)."""
    return ("GPU time lost" if a.summary.devices else "step time") if a.ranks else "samples"


def finding_parts(f: FindingResult, share_of: str) -> list[str]:
    """A finding's figures as every face writes them beside its title: the time the cause lost and that as a
    share of the window (the headline's number); without a GPU, the part's time and its share of step time;
    no time when the finding lost none (its share only), nothing for a finding that is neither (memory)."""
    if not f.share_of_idle and not f.explains_us:
        return []
    # no time for a finding that lost none (a log's GPU holding memory and computing little): never "0 us"
    time = [fmt_us(f.explains_us)] if f.explains_us else []
    if f.share_of_window is not None and share_of == "GPU time lost":
        return [f"{t} {'busy' if f.id == GPU_BOUND else 'lost'}" for t in time] + [
            f"{fmt_pct(f.share_of_window)} of the window"]
    return time + ([f"{fmt_pct(f.share_of_idle)} of {share_of}"] if f.share_of_idle is not None else [])

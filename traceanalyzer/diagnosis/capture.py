"""Capture findings: what a cut-off or incomplete capture means for the diagnosis.

A rank whose GPU activity was lost (its file cut before Kineto wrote the GPU events, or GPU
launches without any recorded activity) is no CPU-only run: the finding says what was lost, and
advice to move the model to a GPU is dropped from every finding (the GPU was there). A capture
cut after some GPU activity says that the figures near its end miss what was cut. Neither finding
is a cause of idle time: they never change the verdict.
"""

from __future__ import annotations

import re
from dataclasses import replace

from ..analyses import RankAnalysis
from ..analyses.capture import capture_note
from .rules import Finding, RankDiagnosis
from .wording import duration

CAPTURE_INCOMPLETE = "capture_incomplete"

# Advice that presumes the run had no GPU (what a CPU-only host loop is told).
_GPU_PLACEMENT = re.compile(r"\bmove the model\b", re.IGNORECASE)

ADVICE_LOST = (
    "Capture again and let the profiler finish writing: leave the `with torch.profiler.profile(...)` block "
    "(or call prof.stop()) before the process ends; Kineto writes the GPU activity last, so a process killed "
    "or a disk filled while it writes keeps only the host's events.",
    "Check the capture's activities include ProfilerActivity.CUDA, and that the file is whole "
    "(its size against what the profiler wrote, a gzip that decompresses).",
)
ADVICE_CUT = (
    "Capture again and let the profiler finish writing the file; until then, judge the GPU on the steps "
    "before the cut.",
)


def add_capture_findings(rd: RankDiagnosis, ra: RankAnalysis) -> RankDiagnosis:
    """The rank's diagnosis with a capture finding first (unchanged when nothing is known lost)."""
    c = ra.capture
    if c is None:
        return rd
    findings = rd.findings
    if c.gpu_events or c.gpu_events_lost or c.truncated:  # the run had a GPU, or may have had one
        findings = tuple(replace(f, advice=tuple(a for a in f.advice if not _GPU_PLACEMENT.search(a)))
                         for f in findings)
    note = capture_note(c)
    if note is None:
        return replace(rd, findings=findings) if findings != rd.findings else rd
    if c.gpu_events_lost:
        finding = Finding(CAPTURE_INCOMPLETE, None, "GPU events missing from the capture", "high", 0, 0.0,
                          (note,), ADVICE_LOST,
                          figures={"gpus_listed": float(c.gpus_listed), "gpu_launches": float(c.launches)})
        return replace(rd, findings=(finding, *findings))
    figures = {"gpus_listed": float(c.gpus_listed)}
    headline = rd.headline
    if c.cut_ns is not None and c.host_start_ns is not None:  # the verdict speaks of the window that survived
        kept, lost = c.kept_ns, c.lost_after_cut_ns
        figures.update(survived_us=round(kept / 1000, 3), lost_after_cut_us=round(lost / 1000, 3))
        if c.kept_from_ns is None:
            headline = (f"{headline} The file was cut: these figures cover the {duration(kept)} of the capture "
                        f"before the cut; the {duration(lost)} after it are out of them.")
        else:
            before = c.lost_before_ns
            figures["lost_before_us"] = round(before / 1000, 3)
            headline = (f"{headline} The file was cut: these figures cover the {duration(kept)} that survived "
                        f"whole; the {duration(before + lost)} around it are out of them.")
    finding = Finding(CAPTURE_INCOMPLETE, None, "The capture was cut off: its last GPU activity is missing",
                      "low", 0, 0.0, (note,), ADVICE_CUT, figures=figures)
    return replace(rd, findings=(*findings, finding), headline=headline)

"""Diagnosis: figures -> findings. Why the GPU waited, and what to do about it.

It reads only the figures (traceanalyzer.analyses), never the Timeline: the gaps arrive with their
causes (analyses/gaps.py, from the registry in traceanalyzer/causes.py). `rules` turns the time lost
per cause into a verdict and findings, `advice` holds the next steps per framework and `thresholds`
every constant the rules use. `diagnose` gives every rank's verdict (rules), its memory findings
(memory) and the rank that speaks for the job.
"""

from __future__ import annotations

from ..analyses import Figures, RankAnalysis
from ..causes import CAUSES
from .capture import add_capture_findings
from .capture_options import without_captured_requests
from .memory import add_memory_findings
from .operators import add_operator_findings
from .rules import UNDETERMINED, VERDICTS, Diagnosis, Finding, RankDiagnosis, diagnose_rank, job_headline, job_rank
from .serving import add_serving_findings


def diagnose(figures: Figures, include_warmup: bool = False) -> Diagnosis:
    """The verdict for every rank and for the job (the rank losing the most GPU time)."""
    ranks = tuple(_diagnose_rank(r, include_warmup) for r in figures.ranks)
    if not ranks:
        return Diagnosis(UNDETERMINED, None, "Nothing to diagnose: the input holds no events.", None, (), ())
    pick = ranks[job_rank([r.lost_ns for r in ranks], [bool(r.devices) for r in ranks])]
    headline = job_headline(pick.rank, pick.headline, len(ranks))
    host_primary = pick.host_primary
    if host_primary is None:
        host_primary = next((r.host_primary for r in ranks if r.host_primary), None)
    return Diagnosis(pick.primary, host_primary, headline, pick.index, pick.findings, ranks,
                     pick.headline_figures, pick.headline_shares, pick.verdict_note, pick.headline_detail)


def _diagnose_rank(r: RankAnalysis, include_warmup: bool) -> RankDiagnosis:
    """A rank's verdict and findings, then each pass that adds findings or makes advice specific; the last one
    leaves out advice asking for what the capture already has."""
    rd = add_serving_findings(add_operator_findings(diagnose_rank(r, include_warmup), r), r)
    return without_captured_requests(add_capture_findings(add_memory_findings(rd, r), r), r)


__all__ = ["CAUSES", "VERDICTS", "Diagnosis", "Finding", "RankDiagnosis", "diagnose"]

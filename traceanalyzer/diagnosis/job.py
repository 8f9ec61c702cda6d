"""The job's diagnosis: every rank's verdict (rules), its memory findings (memory), and the rank
that speaks for the job. Kept apart from `rules` so the finding modules can build on its types."""

from __future__ import annotations

from ..analyses.summary import Figures
from ..timeline import Timeline
from .memory import add_memory_findings
from .rules import UNDETERMINED, Diagnosis, diagnose_rank, job_headline, job_rank


def diagnose(tl: Timeline, analysis: Figures, include_warmup: bool = False) -> Diagnosis:
    """The verdict for every rank and for the job (the rank losing the most GPU time)."""
    ranks = tuple(add_memory_findings(diagnose_rank(tl, r, include_warmup), r) for r in analysis.ranks)
    if not ranks:
        return Diagnosis(UNDETERMINED, None, "Nothing to diagnose: the input holds no events.", None, (), ())
    pick = ranks[job_rank([r.lost_ns for r in ranks], [bool(r.devices) for r in ranks])]
    headline = job_headline(pick.rank, pick.headline, len(ranks))
    host_primary = pick.host_primary
    if host_primary is None:
        host_primary = next((r.host_primary for r in ranks if r.host_primary), None)
    return Diagnosis(pick.primary, host_primary, headline, pick.index, pick.findings, ranks)

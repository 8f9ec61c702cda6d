"""The job stage: per-rank collective tables + an Analysis of several ranks -> the same Analysis with
the job's clock, per-rank communication (`Analysis.job`) and stragglers (`diagnosis.stragglers`).

The split that lets ranks be analysed apart: where a rank is read, call
`analyses.collectives.collective_table(tl, rank_index)` (a small table); where the per-rank results
meet, call `with_job(tables, analysis)`. Nothing here looks at events.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pandas as pd

from ..analyses.collectives_job import job_figures, job_key
from ..diagnosis.stragglers import min_lateness_us, stragglers
from ..result import Analysis


def with_job(tables: Sequence[pd.DataFrame], analysis: Analysis) -> Analysis:
    """`analysis` with its job figures and stragglers; unchanged for fewer than two ranks."""
    if len(analysis.ranks) < 2:
        return analysis
    diag = analysis.diagnosis
    figures = job_figures(tables, analysis.ranks)
    job = dataclasses.replace(figures.job, straggler_min_lateness_us=round(min_lateness_us(figures.job), 3))
    by_rank = {job_key(r, i): r.diagnosis for i, r in enumerate(analysis.ranks)}
    new_diag = dataclasses.replace(diag, stragglers=stragglers(job, by_rank)) if diag else None
    return dataclasses.replace(analysis, job=job, diagnosis=new_diag,
                               warnings=analysis.warnings + figures.warnings)


__all__ = ["with_job"]

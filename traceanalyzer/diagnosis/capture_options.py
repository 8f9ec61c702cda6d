"""Advice never asks for what the capture already has: the profiler options a trace shows on, read from its own
content (figures, never metadata guesses), and every finding's advice rid of requests for them (advice.py
`without_captured`).

* `with_stack`: the trace holds Python frames (analyses/frames.py `has_stacks`).
* `profile_memory`: it holds the allocator's `[memory]` events (analyses/memory.py: a rank's memory figures).
* `record_shapes` (`Input Dims` / `Input type` args): no figure carries it and no advice asks for it; a line
  that would ask for it is kept until one does.
"""

from __future__ import annotations

from dataclasses import replace

from ..analyses import RankAnalysis
from .advice import without_captured
from .rules import RankDiagnosis


def captured_options(ra: RankAnalysis) -> frozenset[str]:
    """The profiler options the rank's trace shows on."""
    has = set()
    if ra.frames is not None and ra.frames.has_stacks:
        has.add("with_stack")
    if ra.memory is not None:
        has.add("profile_memory")
    return frozenset(has)


def without_captured_requests(rd: RankDiagnosis, ra: RankAnalysis) -> RankDiagnosis:
    """The rank's diagnosis with no advice asking for a profiler option its trace already has on."""
    has = captured_options(ra)
    if not has:
        return rd
    findings = tuple(replace(f, advice=without_captured(f.advice, has)) for f in rd.findings)
    return rd if findings == rd.findings else replace(rd, findings=findings)

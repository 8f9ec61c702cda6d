"""What removing each gap cause takes out of the median step's dependency graph, so that the replay
(analyses/critical_path.py) says how much shorter the step would be (the findings' savings,
diagnosis/savings.py).

A cause's GPU idle time is time the GPU had nothing to run while the host did the cause's work (waited
for the DataLoader, synchronised, launched, computed, or nothing traced): removing the cause removes the
host time inside its idle stretches, from whatever host piece holds it (but launch calls, which the work after
it still needs, unless the cause is launching itself); the work after it moves earlier
only as far as the graph lets it (another stream, another device, a later wait may still hold the step).
Removing the memcpy cause also removes every copy on the GPU. Not replayed, their savings stay projected:
start-up (one-off, outside the steady steps); device-side waits (the GPU waited with work queued: no host
time to remove, and the replay keeps queue lags as observed); communication (a collective's time on one rank
is mostly its wait for the other ranks, which the rank's own graph does not hold: on the corpus' single-rank
captures the replay found nothing to save where the GPU sat behind collectives for 10-35 ms a step, the
lags after them being kept as measured).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import causes as C
from .critical_path import Removal
from .critical_path_graph import union_sorted
from .gaps import GapSet

# Causes whose removal the replay does not model (see the module's words).
NOT_REPLAYED = (C.STARTUP, C.DEPENDENCY, C.COMMUNICATION)


def removals(idle: Sequence[GapSet]) -> dict[str, Removal]:
    """Per cause with idle time on the rank's devices (`idle`: each device's attributed gap set), or with copies
    to remove, what removing it takes out of the graph."""
    out = {}
    for code, cause in enumerate(C.CAUSES):
        if cause in NOT_REPLAYED:
            continue
        parts = [(g.start_ns[g.codes() == code], g.end_ns[g.codes() == code]) for g in idle if g.cause is not None]
        starts = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
        ends = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
        copies = cause == C.MEMCPY
        if not len(starts) and not copies:
            continue
        order = np.lexsort((ends, starts))
        lo, hi = union_sorted(starts[order].astype(np.int64), ends[order].astype(np.int64))
        out[cause] = Removal(lo, hi, copies, launches=cause == C.LAUNCH)
    return out

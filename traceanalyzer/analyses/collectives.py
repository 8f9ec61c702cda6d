"""One rank's collectives as a compact table: the per-rank half of the job analysis (analyses/job.py).

`collective_table(tl, rank)` keeps, per communication kernel of the rank, what matching it with the
same collective on the other ranks needs: its name, the host step it belongs to, its order among
the kernels of that name in that step (`seq`), its start and end on the rank's own clock, and its
message size when the trace records one. The table is small (a few rows per step) and picklable,
so a process that read a rank can hand it back instead of the rank's events.

A kernel belongs to the step whose host span holds the launch call that enqueued it (matched by
correlation id): kernels of step N run after the host has moved on, but they are still step N's.
Without a launch call the kernel's own start decides. Ranks running the same schedule number their
steps alike (ProfilerStep#N), so (group, name, step, seq) names the same collective on every rank
of its process group, even when the captures cover different stretches of the run. `group` is the
kernel's process group (the events' `comm_group`: "0,1" for the ranks 0 and 1, "pg:<name>", or ""
when the trace does not record it) and `seq` counts within (group, name, step): a tensor-parallel
all-reduce and a data-parallel one of the same kernel name are told apart.

When the trace records NCCL sequence numbers (Kineto 2026 `Seq` on the kernel: the collective's
number in its process group, the same on every rank), `nccl_seq` holds it and the job matches by
(group, nccl_seq) alone, whatever the steps are numbered; otherwise it is -1 and the key above is used.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import intervals as iv
from .. import timeline as T
from ..timeline import Timeline
from .figures import launch_times, steps

COLUMNS: dict[str, str] = {
    "rank": "int64",  # the job rank (RankInfo.rank; its index when unknown)
    "host": "object",  # the machine (RankInfo.host) or None
    "clock": "object",  # the rank's clock ("epoch" | "relative"): relative clocks never share an origin
    "group": "object",  # process group (events' comm_group): "0,1,2,3", "pg:<name>", "" unknown
    "name": "object",  # kernel name
    "step": "int64",  # host step number, -1 outside steps
    "seq": "int64",  # order of this name's kernels in the step on this rank, from 0
    "start_ns": "int64",  # on the rank's own clock
    "end_ns": "int64",
    "bytes": "int64",  # message size, -1 when the trace does not record it
    "nccl_seq": "int64",  # the collective's sequence number in its process group (trace `Seq`), -1 unknown
}


def empty_table() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in COLUMNS.items()})


def collective_table(tl: Timeline, rank: int) -> pd.DataFrame:
    """The communication kernels of rank index `rank` (on its first device that has any), in
    start order, with the columns of `COLUMNS`."""
    info = tl.ranks[rank]
    ev = tl.rank_events(rank)
    comm = ev[(ev["kind"] == T.KERNEL).to_numpy() & ev["comm"].to_numpy()]
    if not len(comm):
        return empty_table()
    device = int(comm["device"].to_numpy().min())
    comm = comm[comm["device"].to_numpy() == device]
    order = np.argsort(comm["ts_ns"].to_numpy(), kind="stable")
    comm = comm.iloc[order]
    start = comm["ts_ns"].to_numpy().astype(np.int64)
    end = start + comm["dur_ns"].to_numpy()
    st = steps(tl, rank)
    step = np.full(len(comm), -1, dtype=np.int64)
    if len(st):
        when = launch_times(ev, comm["correlation"].to_numpy(), comm["ts_ns"].to_numpy().astype(np.int64))
        idx = iv.locate(when, st.start_ns, st.end_ns) if _disjoint(st) else _last_started(when, st.start_ns)
        step = np.where(idx >= 0, st.number[np.clip(idx, 0, None)], -1).astype(np.int64)
    names = comm["name"].astype(str).to_numpy()
    groups = comm["comm_group"].astype(str).to_numpy()
    frame = pd.DataFrame({"group": groups, "name": names, "step": step})
    seq = frame.groupby(["group", "name", "step"], sort=False).cumcount().to_numpy().astype(np.int64)
    return pd.DataFrame({
        "rank": np.full(len(comm), info.rank if info.rank is not None else rank, dtype=np.int64),
        "host": pd.Series([info.host] * len(comm), dtype=object),
        "clock": pd.Series([info.clock] * len(comm), dtype=object),
        "group": pd.Series(groups, dtype=object),
        "name": pd.Series(names, dtype=object),
        "step": step,
        "seq": seq,
        "start_ns": start,
        "end_ns": end.astype(np.int64),
        "bytes": comm["bytes"].to_numpy().astype(np.int64),
        "nccl_seq": comm["comm_seq"].to_numpy().astype(np.int64),
    })


def _disjoint(st) -> bool:  # type: ignore[no-untyped-def]
    return bool(len(st) < 2 or (st.start_ns[1:] >= st.end_ns[:-1]).all())


def _last_started(points: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Overlapping step spans (nested or odd captures): the last step started at or before the point."""
    return np.searchsorted(starts, points, side="right") - 1


__all__ = ["COLUMNS", "collective_table", "empty_table"]

"""A many-rank job on one clock: the reduce half of the job analysis (per-rank half: collectives.py).

`job_figures(tables, ranks, numbers, warmups)` takes each rank's compact collective table and its
`RankJobFacts` (what the job needs of the rank's figures, taken from them when the job is combined:
`rank_job_facts`) and returns the job's figures in ns (`JobFigures`; `result.build` converts them)
plus warnings. It never sees events, so it runs wherever the per-rank results are gathered.

1. Clock. Ranks of one host share a clock. A collective ends at nearly the same moment on every
   rank (no rank leaves before the last one has sent its part), so each other host's offset is the
   median, over the collectives found on every rank, of (reference end - its end); the reference is
   the host of the lowest rank. Ranks whose host is unknown are taken as one host, unless their own
   medians disagree by more than CLOCK_SPLIT_TOLERANCE_NS: then each gets its own clock.
   Collectives whose aligned ends still spread by more than MATCH_END_TOLERANCE_NS are not the
   same collective (traces sampled or cut differently) and are left out; offsets are estimated
   once more from the rest.
2. Waiting. In each matched collective the rank that starts last holds everyone up: every other
   rank waits from its own start to that last start (at most its kernel's length). Per rank: the
   time it waited, the time the others waited for it (charged to the last arrival), its lateness
   (start minus the median rank's start), all summed and divided by the steps the collectives span.
3. Bandwidth: message bytes x the collective's bus factor (all-reduce 2(n-1)/n, all-gather,
   reduce-scatter and all-to-all (n-1)/n, others 1; n = ranks analysed) / the time from the last
   arrival to the end, where the trace records sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from . import RankAnalysis
from .collectives import COLUMNS

# Ranks said (or taken) to share a clock whose collectives end further apart than this (median)
# are on different clocks after all: each gets its own offset. Ends of one collective differ by
# microseconds on one clock; a clock step or a wrong host name by far more.
CLOCK_SPLIT_TOLERANCE_NS = 500_000
# A collective matched by (name, step, seq) whose ends, on the job clock, spread by more than this
# is not one collective (sampled or trimmed traces): left out of the figures.
MATCH_END_TOLERANCE_NS = 1_000_000


@dataclass(frozen=True)
class RankJobFacts:
    """What the job stage needs of one rank's figures (ns), small enough to travel with its results."""

    host: str | None
    clock: str
    window_start_ns: int
    step: np.ndarray  # per step: its number, duration, GPU busy, communication, exposed communication
    step_dur_ns: np.ndarray
    step_busy_ns: np.ndarray
    step_comm_ns: np.ndarray
    step_exposed_comm_ns: np.ndarray
    busy_ns: tuple[int, ...]  # per device (a rank without steps is figured over its window)
    comm_ns: tuple[int, ...]
    exposed_comm_ns: tuple[int, ...]


def rank_job_facts(r: RankAnalysis) -> RankJobFacts:
    """A rank's `RankJobFacts` from its figures."""
    def col(name: str) -> np.ndarray:
        return np.array([getattr(s, name) for s in r.per_step], dtype=np.int64)

    return RankJobFacts(r.host, r.clock, r.window.start_ns, col("step"), col("dur_ns"), col("gpu_busy_ns"),
                        col("comm_ns"), col("exposed_comm_ns"), tuple(int(d.busy.busy_ns) for d in r.devices),
                        tuple(int(d.busy.comm_ns) for d in r.devices),
                        tuple(int(d.busy.exposed_comm_ns) for d in r.devices))


@dataclass(frozen=True)
class ClockFigures:
    """How one host's clock was put on the job's clock."""

    host: str
    ranks: tuple[int, ...]
    offset_ns: int  # added to this host's times to put them on the job clock
    method: str  # "reference" (the first host) | "collectives" | "none"
    collectives_used: int
    residual_ns: float | None  # median |end-time difference| of matched collectives after the shift


@dataclass(frozen=True)
class RankComm:
    """One rank's communication figures, per steady-state step (medians over steps), in whole ns."""

    rank: int
    host: str | None
    step_time_ns: int | None
    compute_ns: int  # GPU busy minus exposed communication
    comm_ns: int
    exposed_comm_ns: int
    overlapped_comm_ns: int
    wait_ns: int  # time this rank sat in collectives waiting for later ranks
    caused_wait_ns: int  # time the other ranks waited for this one
    lateness_ns: int  # arrival at collectives vs the median rank (positive: late)
    bus_bandwidth_gbps: float | None
    last_arrivals: int  # matched collectives in which it started last and held others up


@dataclass(frozen=True)
class JobFigures:
    clocks: tuple[ClockFigures, ...]
    collectives_matched: int
    ranks: tuple[RankComm, ...]
    timeline_shift_ns: tuple[int, ...]  # each rank's window start on the job clock, from the earliest
    warnings: tuple[str, ...]


def job_figures(tables: Sequence[pd.DataFrame], ranks: Sequence[RankJobFacts], numbers: Sequence[int],
                warmups: Sequence[tuple[int, ...]] = ()) -> JobFigures:
    """The job's clock, matched collectives and per-rank communication (see the module text). `numbers`:
    each rank's number in the job (that of its collective table's rank column); `warmups`: each rank's
    warm-up steps, left out of its per-step figures."""
    numbers = list(numbers)
    host_of = {n: r.host for n, r in zip(numbers, ranks)}
    clock_of = {n: r.clock for n, r in zip(numbers, ranks)}
    warmup = {n: set(w) for n, w in zip(numbers, warmups)}
    parts = [t for t in tables if len(t)]
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame({c: [] for c in COLUMNS})
    taking = sorted(int(r) for r in pd.unique(table["rank"])) if len(table) else []
    warnings: list[str] = []
    groups = _groups(numbers, host_of, clock_of)
    m = _matrices(table, taking) if len(taking) >= 2 else None
    offsets: dict[int, int] = {n: 0 for n in numbers}
    keep = np.zeros(0, dtype=bool)
    used_of: dict[str, int] = {}
    if m is not None:
        ends = m.end
        groups, split = _split(groups, taking, ends, m.part)
        warnings += split
        offsets, used_of, keep = _offsets(groups, taking, ends, m.part, np.ones(len(ends), dtype=bool))
        if keep.any():
            offsets, used_of, keep = _offsets(groups, taking, ends, m.part, keep)
        dropped = int((~keep).sum())
        if dropped:
            warnings.append(f"{dropped} of {len(keep)} collectives found on every rank do not end together "
                            f"on the job clock (more than {MATCH_END_TOLERANCE_NS / 1e6:g} ms apart) and were "
                            f"left out: the traces may be sampled, trimmed or of different captures")
    clocks = _clocks(groups, taking, offsets, m, keep, used_of)
    figures = _waiting(m, keep, taking, offsets, warmup) if m is not None and keep.any() else {}
    rows = tuple(_row(n, r, warmup.get(n, set()), figures.get(n)) for n, r in zip(numbers, ranks))
    starts = [r.window_start_ns + offsets.get(n, 0) for n, r in zip(numbers, ranks)]
    first = min(starts)
    return JobFigures(tuple(clocks), int(keep.sum()), rows, tuple(s - first for s in starts), tuple(warnings))


# --- clocks -----------------------------------------------------------------------------------------
def _groups(numbers: list[int], host_of: dict[int, str | None],
            clock_of: dict[int, str]) -> list[tuple[str, list[int]]]:
    """(label, ranks) per clock: one per host; unknown hosts on epoch clocks together; a relative
    clock (unknown origin) alone."""
    out: dict[str, list[int]] = {}
    for n in sorted(numbers):
        if clock_of[n] != "epoch":
            label = f"rank {n} (own clock)"
        else:
            label = host_of[n] or "host not recorded"
        out.setdefault(label, []).append(n)
    return list(out.items())


@dataclass(frozen=True)
class _Matrices:
    start: np.ndarray  # [collectives, ranks taking part] on each rank's own clock
    end: np.ndarray
    nbytes: np.ndarray
    part: np.ndarray  # [collectives, ranks]: the rank takes part (its cells of the others hold copies)
    step: np.ndarray  # [collectives]
    name: np.ndarray
    group: np.ndarray


_FIRST = np.iinfo(np.int64).min
_LAST = np.iinfo(np.int64).max


def _matrices(table: pd.DataFrame, taking: list[int]) -> _Matrices | None:
    """Matched collectives as rank-by-collective matrices: a collective (group, name, step, seq)
    is matched when every rank that has collectives of its group has it (without group info:
    every rank that has any collective), and at least two do. A collective with an NCCL sequence
    number (`nccl_seq` >= 0) is matched by (group, nccl_seq) instead."""
    key = ["group", "k_name", "k_step", "k_seq"]
    if "group" not in table:
        table = table.assign(group="")
    table = _match_keys(table)
    size = table.groupby(key, sort=False)["rank"].transform("size").to_numpy()
    expected = table.groupby("group", sort=False)["rank"].transform("nunique").to_numpy()
    full = table[(size == expected) & (expected >= 2)]
    if not len(full):
        return None
    full = full.sort_values(key + ["rank"], kind="stable")
    row = full.groupby(key, sort=False).ngroup().to_numpy()
    col = np.searchsorted(np.asarray(taking), full["rank"].to_numpy())
    first = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
    shape = (len(first), len(taking))
    part = np.zeros(shape, dtype=bool)
    part[row, col] = True
    mats = []
    for c in ("start_ns", "end_ns", "bytes"):
        values = full[c].to_numpy().astype(np.int64)
        m = np.repeat(values[first][:, None], len(taking), axis=1)  # copies: min / max stay the participants'
        m[row, col] = values
        mats.append(m)
    start, end, nbytes = mats
    order = np.argsort(start.min(axis=1), kind="stable")
    head = full.iloc[first]
    return _Matrices(start[order], end[order], nbytes[order], part[order], head["step"].to_numpy()[order],
                     head["name"].to_numpy()[order], head["group"].to_numpy()[order])


def _match_keys(table: pd.DataFrame) -> pd.DataFrame:
    """The key columns that name one collective on every rank (k_name, k_step, k_seq): its NCCL
    sequence number when recorded ("", -1, nccl_seq), else (name, step, order in the step)."""
    nccl = table["nccl_seq"].to_numpy() if "nccl_seq" in table else np.full(len(table), -1, dtype=np.int64)
    by_seq = nccl >= 0
    return table.assign(k_name=np.where(by_seq, "", table["name"].to_numpy(dtype=object)),
                        k_step=np.where(by_seq, -1, table["step"].to_numpy()).astype(np.int64),
                        k_seq=np.where(by_seq, nccl, table["seq"].to_numpy()).astype(np.int64))


def _row_median(values: np.ndarray, part: np.ndarray) -> np.ndarray:
    """Median of each row over its participants (all cells when every rank takes part)."""
    if part.all():
        return np.median(values, axis=1)
    return np.nanmedian(np.where(part, values.astype(np.float64), np.nan), axis=1)


def _split(groups: list[tuple[str, list[int]]], taking: list[int], ends: np.ndarray,
           part: np.ndarray) -> tuple[list[tuple[str, list[int]]], list[str]]:
    """Groups whose ranks' collectives end apart (their own medians vs the first rank, over the
    collectives both take part in) split into one clock per rank."""
    col = {n: j for j, n in enumerate(taking)}
    ends = ends - int(ends.min())
    ref = ends[:, 0]
    out, warnings = [], []
    for label, members in groups:
        inside = [n for n in members if n in col]
        shared = [part[:, 0] & part[:, col[n]] for n in inside]
        med = [float(np.median(ends[s, col[n]] - ref[s])) for n, s in zip(inside, shared) if s.any()]
        if len(med) > 1 and max(med) - min(med) > CLOCK_SPLIT_TOLERANCE_NS:
            warnings.append(f"ranks {', '.join(str(n) for n in inside)} ({label}) were taken to share a clock, "
                            f"but their collectives end up to {(max(med) - min(med)) / 1e6:.3f} ms apart: "
                            f"each rank was put on the job clock by its own offset")
            out += [(f"{label} / rank {n}", [n]) for n in members]
        else:
            out.append((label, members))
    return out, warnings


def _offsets(groups: list[tuple[str, list[int]]], taking: list[int], ends: np.ndarray, part: np.ndarray,
             use: np.ndarray) -> tuple[dict[int, int], dict[str, int], np.ndarray]:
    """Each rank's offset (ns added to its times) from the collectives in `use`, the collectives
    each clock's offset was taken from, and which collectives end together once shifted.

    A clock's offset: the median of (reference end - its ranks' ends) over the collectives its
    ranks share with a rank already on the job clock (first the reference clock's, the lowest
    rank's; then, pass by pass, those placed by the one before: subgroups may join the reference
    host only through another host)."""
    col = {n: j for j, n in enumerate(taking)}
    ends = ends - int(ends.min())  # differences only: small numbers keep float64 medians exact
    offsets: dict[int, int] = {n: 0 for _label, members in groups for n in members}
    used: dict[str, int] = {}
    placed = np.zeros(len(taking), dtype=bool)
    shift = np.zeros(len(taking), dtype=np.int64)
    pending = []
    for label, members in groups:
        cols = [col[n] for n in members if n in col]
        if 0 in cols:
            placed[cols] = True
            used[label] = int((use & part[:, cols].any(axis=1)).sum())
        elif cols:
            pending.append((label, members, cols))
    rows = np.arange(len(ends))
    while pending:
        have = part & placed[None, :]
        first = have.argmax(axis=1)  # the lowest placed rank taking part
        ref = ends[rows, first] + shift[first]
        usable = use & have.any(axis=1)
        still = []
        for label, members, cols in pending:
            sel = usable[:, None] & part[:, cols]
            if not sel.any():
                still.append((label, members, cols))
                continue
            off = -int(np.round(np.median((ends[:, cols] - ref[:, None])[sel])))
            for n in members:
                offsets[n] = off
            shift[cols] = off
            used[label] = int(sel.any(axis=1).sum())
        if len(still) == len(pending):
            break
        placed[[c for _label, _members, cols in pending for c in cols]] = True
        placed[[c for _label, _members, cols in still for c in cols]] = False
        pending = still
    aligned = ends + shift[None, :]
    spread = np.where(part, aligned, _FIRST).max(axis=1) - np.where(part, aligned, _LAST).min(axis=1)
    return offsets, used, spread <= MATCH_END_TOLERANCE_NS


def _clocks(groups: list[tuple[str, list[int]]], taking: list[int], offsets: dict[int, int],
            m: _Matrices | None, keep: np.ndarray, used_of: dict[str, int]) -> list[ClockFigures]:
    col = {n: j for j, n in enumerate(taking)}
    out = []
    job_end = None
    if m is not None and keep.any():
        shift = np.array([offsets[n] for n in taking], dtype=np.int64)
        part = m.part[keep]
        aligned = m.end[keep] + shift[None, :] - int(m.end[keep].min())  # small numbers: exact medians
        job_end = _row_median(aligned, part)
    for label, members in groups:
        cols = [col[n] for n in members if n in col]
        residual = None
        if job_end is not None and cols:
            if part.all():
                residual = float(np.median(np.abs(aligned[:, cols] - job_end[:, None])))
            elif part[:, cols].any():
                residual = float(np.median(np.abs(aligned[:, cols] - job_end[:, None])[part[:, cols]]))
        used = used_of.get(label, 0) if cols and job_end is not None else 0
        method = "reference" if 0 in cols else ("collectives" if cols and used else "none")
        out.append(ClockFigures(label, tuple(members), offsets[members[0]], method, used, residual))
    return out


# --- waiting ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _RankWait:
    wait_ns: float  # per step
    caused_ns: float
    lateness_ns: float
    last: int  # collectives it arrived last in (and held someone up)
    bus_gbps: float | None


def _bus_factor(name: str, n: int) -> float:
    low = name.lower().replace("_", "")
    if "allreduce" in low:
        return 2.0 * (n - 1) / n
    if any(k in low for k in ("allgather", "reducescatter", "alltoall")):
        return (n - 1) / n
    return 1.0


def _waiting(m: _Matrices, keep: np.ndarray, taking: list[int], offsets: dict[int, int],
             warmup: dict[int, set[int]]) -> dict[int, _RankWait]:
    shift = np.array([offsets[n] for n in taking], dtype=np.int64)[None, :]
    base = int(m.start[keep].min())  # times from the first start: medians in float64 stay exact to the ns
    start, end, nbytes = m.start[keep] + shift - base, m.end[keep] + shift - base, m.nbytes[keep]
    step, name, group, part = m.step[keep], m.name[keep], m.group[keep], m.part[keep]
    skipped = set().union(*warmup.values()) if warmup else set()
    steady = ~np.isin(step, sorted(skipped)) if skipped else np.ones(len(step), dtype=bool)
    if steady.any():
        start, end, nbytes, step, name = start[steady], end[steady], nbytes[steady], step[steady], name[steady]
        group, part = group[steady], part[steady]
    steps = max(len(np.unique(step)), 1)
    latest = np.where(part, start, _FIRST).max(axis=1)
    wait = np.where(part, np.clip(latest[:, None] - start, 0, np.maximum(end - start, 0)), 0)
    held = wait.sum(axis=1)
    last = np.where(part, start, _FIRST).argmax(axis=1)
    caused = np.zeros(len(taking))
    arrivals = np.zeros(len(taking), dtype=np.int64)
    np.add.at(caused, last, held)
    np.add.at(arrivals, last[held > 0], 1)
    lateness = np.where(part, start - _row_median(start, part)[:, None], 0.0)
    if len(set(group.tolist())) > 1:
        lateness = _own_lateness(lateness, wait, start, part, step, group)
    n = part.sum(axis=1)
    factor = np.array([_bus_factor(str(x), int(k)) for x, k in zip(name, n)])[:, None]
    transfer = np.maximum(end - latest[:, None], 0)
    known = (nbytes >= 0) & (transfer > 0) & part
    moved = (nbytes * factor * known).sum(axis=0)
    took = (transfer * known).sum(axis=0)
    return {n: _RankWait(wait[:, j].sum() / steps, caused[j] / steps, lateness[:, j].sum() / steps,
                         int(arrivals[j]), round(float(moved[j] / took[j]), 3) if took[j] > 0 else None)
            for j, n in enumerate(taking)}


def _own_lateness(lateness: np.ndarray, wait: np.ndarray, start: np.ndarray, part: np.ndarray,
                  step: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Lateness less what the rank waited, earlier in the step, in collectives of its other groups:
    a rank held up in its tensor-parallel all-reduce reaches its data-parallel one late through no
    fault of its own (inside one group every collective ends together, so nothing carries over)."""
    rows, cols = np.nonzero(part)
    cells = pd.DataFrame({"rank": cols, "step": step[rows], "group": group[rows], "t": start[rows, cols],
                          "wait": wait[rows, cols].astype(np.float64), "row": rows})
    cells = cells.sort_values(["rank", "step", "t", "row"], kind="stable")
    before_all = cells.groupby(["rank", "step"], sort=False)["wait"].cumsum() - cells["wait"]
    before_own = cells.groupby(["rank", "step", "group"], sort=False)["wait"].cumsum() - cells["wait"]
    inherited = (before_all - before_own).to_numpy()
    r, c = cells["row"].to_numpy(), cells["rank"].to_numpy()
    out = lateness.copy()
    late = out[r, c]
    out[r, c] = late - np.minimum(inherited, np.maximum(late, 0.0))
    return out


# --- per rank ---------------------------------------------------------------------------------------
def _median(values: np.ndarray) -> float:
    return float(np.median(values)) if len(values) else 0.0


def _ns(x: float) -> int:
    return int(round(float(x)))


def _row(n: int, r: RankJobFacts, skip: set[int], w: _RankWait | None) -> RankComm:
    steady = ~np.isin(r.step, sorted(skip)) if skip else np.ones(len(r.step), dtype=bool)
    if not steady.any():
        steady = np.ones(len(r.step), dtype=bool)
    step_ns: float | None
    if len(r.step):
        step_ns = _median(r.step_dur_ns[steady])
        compute = _median(np.maximum(r.step_busy_ns[steady] - r.step_exposed_comm_ns[steady], 0))
        comm = _median(r.step_comm_ns[steady])
        exposed = _median(r.step_exposed_comm_ns[steady])
    else:  # no steps: over the window
        step_ns = None
        comm, exposed = float(sum(r.comm_ns)), float(sum(r.exposed_comm_ns))
        compute = max(float(sum(r.busy_ns)) - exposed, 0.0)
    return RankComm(
        rank=n, host=r.host, step_time_ns=None if step_ns is None else _ns(step_ns), compute_ns=_ns(compute),
        comm_ns=_ns(comm), exposed_comm_ns=_ns(exposed), overlapped_comm_ns=_ns(max(comm - exposed, 0.0)),
        wait_ns=_ns(w.wait_ns) if w else 0, caused_wait_ns=_ns(w.caused_ns) if w else 0,
        lateness_ns=_ns(w.lateness_ns) if w else 0, bus_bandwidth_gbps=w.bus_gbps if w else None,
        last_arrivals=w.last if w else 0)


__all__ = ["CLOCK_SPLIT_TOLERANCE_NS", "MATCH_END_TOLERANCE_NS", "ClockFigures", "JobFigures", "RankComm",
           "RankJobFacts", "job_figures", "rank_job_facts"]

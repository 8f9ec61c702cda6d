"""Ranks of a job: what the job checks need of each rank (`RankMeta`, read from its Timeline where the
rank is read), whether several ranks look like one job (`metas_mismatch`), and their numbers in it
(`number_ranks`)."""

from __future__ import annotations

from dataclasses import dataclass

from ..timeline import Timeline


@dataclass(frozen=True)
class RankMeta:
    """What the job-level checks need of one rank, so they run on per-rank results as well."""

    name: str  # the rank's input file, as given
    rank: int | None  # from the trace (distributedInfo)
    world_size: int | None
    clock: str
    device_names: tuple[str, ...]  # of its devices, in the Timeline's order
    span_ns: tuple[int, int] | None  # first event start, last event end (None: no events)


def rank_metas(tl: Timeline) -> list[RankMeta]:
    """One RankMeta per rank of `tl`."""
    ev = tl.events
    ranks_col = ev["rank"].to_numpy()
    out = []
    for r in tl.ranks:
        mine = ranks_col == r.index
        span = None
        if mine.any():
            ts = ev["ts_ns"].to_numpy()[mine]
            span = (int(ts.min()), int((ts + ev["dur_ns"].to_numpy()[mine]).max()))
        out.append(RankMeta(tl.sources[r.source].path, r.rank, r.world_size, r.clock,
                            tuple(d.name for d in tl.devices if d.rank == r.index), span))
    return out


def metas_mismatch(metas: list[RankMeta]) -> str | None:
    """Why these ranks look like unrelated runs rather than one job, or None.

    Ranks of one job share the world size their traces record, have distinct rank numbers, run on
    one GPU model, and (on epoch clocks) overlap in wall-clock time.
    """
    sizes = {m.world_size for m in metas if m.world_size is not None}
    if len(sizes) > 1:
        return f"their world sizes differ ({', '.join(str(s) for s in sorted(sizes))})"
    numbers: dict[int, str] = {}
    for m in metas:
        if m.rank is not None:
            if m.rank in numbers:
                return f"{numbers[m.rank]} and {m.name} are both rank {m.rank}"
            numbers[m.rank] = m.name
    models: dict[str, str] = {}
    for m in metas:
        for device_name in m.device_names:
            if device_name:
                models.setdefault(device_name, m.name)
    if len(models) > 1:
        return "they ran on different GPU models (" + ", ".join(f"{m} in {f}" for m, f in models.items()) + ")"
    if all(m.clock == "epoch" for m in metas):
        spans = [(m.span_ns[0], m.span_ns[1], m.name) for m in metas if m.span_ns is not None]
        if len(spans) > 1:
            latest_start = max(spans, key=lambda x: x[0])
            earliest_end = min(spans, key=lambda x: x[1])
            if latest_start[0] > earliest_end[1]:
                return (f"they do not overlap in time ({earliest_end[2]} ends before {latest_start[2]} starts)")
    return None


def number_ranks(found: list[int | None]) -> tuple[list[int | None], list[str]]:
    """Rank numbers for a job's ranks in order: the traces' own, the rest (and repeats) numbered in
    order with the numbers left free; with the warnings to give. One rank keeps what it has."""
    if len(found) < 2:
        return list(found), []
    seen: set[int] = set()
    numbers: list[int | None] = []
    warnings = []
    for n in found:
        if n is not None:
            if n in seen:
                warnings.append(f"rank {n} appears in more than one trace; renumbered in name order")
                n = None
            else:
                seen.add(n)
        numbers.append(n)
    free = (i for i in range(10**9) if i not in seen)
    return [next(free) if n is None else n for n in numbers], warnings


__all__ = ["RankMeta", "metas_mismatch", "number_ranks", "rank_metas"]

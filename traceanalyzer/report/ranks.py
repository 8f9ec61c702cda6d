"""Ranks and stragglers in words: the Markdown and terminal lines of a many-rank job (`AnalysisData.job`).

Formats what analyses/job.py and diagnosis/stragglers.py found; computes nothing. Every string
from a trace (host names) is escaped (`md` here, `clean` by the terminal's `wrap`).
"""

from __future__ import annotations

from ..result.types import AnalysisData, HostClock
from ._format import fmt_ns, fmt_us, md, table, wrap

MAX_CLOCK_LINES = 8  # host clocks listed on the terminal


def straggler_sentence(a: AnalysisData) -> str | None:
    """The stragglers, or that there is none; None for one rank."""
    job = a.job
    if not job:
        return None
    found = a.diagnosis.stragglers if a.diagnosis else ()
    if job.workers:  # workers without GPU kernels: judged on compute per step
        if found:
            return "Straggler" + ("s" if len(found) > 1 else "") + ": " + "; ".join(s.text for s in found) + "."
        return (f"No straggler: no worker computes {job.worker_straggler_factor:g}x the other workers' median compute "
                f"per step or more.")
    if not job.collectives_matched:
        return "Stragglers: not assessed (no collective was found on every rank and ending together)."
    if found:
        return ("Straggler" + ("s" if len(found) > 1 else "") + ": "
                + "; ".join(s.text for s in found) + ".")
    floor = job.straggler_min_lateness_us
    limit = f" {fmt_us(floor)} per step" if floor is not None else ""
    return (f"No straggler: no rank starts its collectives{limit} later than the median rank "
            f"({job.collectives_matched} collectives matched across ranks).")


def _clock_text(c: HostClock) -> str:
    if c.method == "reference":
        how = "reference clock"
    elif c.method == "collectives":
        how = f"offset {c.offset_us / 1e6:+.6f} s from {c.collectives_used} collectives"
    else:
        how = "not aligned (no collective shared with the other ranks)"
    fit = f", residual {fmt_us(c.residual_us)}" if c.residual_us is not None else ""
    ranks = ", ".join(str(r) for r in c.ranks[:16]) + (" ..." if len(c.ranks) > 16 else "")
    return f"{c.host} (ranks {ranks}): {how}{fit}"


def text_lines(a: AnalysisData) -> list[str]:
    """Terminal lines: the stragglers (or none) and, with several clocks, how each was aligned."""
    sentence = straggler_sentence(a)
    if sentence is None or a.job is None:
        return []
    lines = wrap(sentence, "", "  ")
    clocks = a.job.clocks
    if len(clocks) > 1:
        lines.append("Job clock:")
        for c in clocks[:MAX_CLOCK_LINES]:
            lines += wrap(_clock_text(c), "  ", "    ")
        if len(clocks) > MAX_CLOCK_LINES:
            lines.append(f"  ... and {len(clocks) - MAX_CLOCK_LINES} more clocks in the report")
    return lines


def markdown_lines(a: AnalysisData, limit: int) -> list[str]:
    """The "Ranks and stragglers" section: the sentence, the per-rank table (at most `limit` rows)
    and the host clocks when there are several."""

    sentence = straggler_sentence(a)
    job = a.job
    if sentence is None or job is None:
        return []
    out = ["### Ranks and stragglers", "", md(sentence, 2000), ""]
    if job.workers:  # workers without GPU kernels: their own per-rank table
        wrows = ([str(r.rank), str(r.steps), fmt_us(r.step_time_us), fmt_us(r.compute_us), fmt_us(r.comm_us),
                  fmt_us(r.wait_us), f"{r.compute_vs_median:.2f}x"]
                 for r in sorted(job.workers, key=lambda r: (-r.compute_us, r.rank)))
        out += ["_Per step, host-side events (no GPU kernels); slowest compute first._", ""]
        return out + table(["rank", "steps", "step", "compute", "comm", "wait", "compute vs median"], wrows, limit,
                           len(job.workers), "ranks")
    header = ["rank", "host", "step", "compute", "comm", "exposed comm", "waiting", "caused wait", "lateness",
              "bus bw"]

    def bw(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.2f} GB/s"

    rows = ([str(r.rank), md(r.host or "–", 60), fmt_ns(r.step_time_ns), fmt_ns(r.compute_ns),
             fmt_ns(r.comm_ns), fmt_ns(r.exposed_comm_ns), fmt_ns(r.wait_ns),
             fmt_ns(r.caused_wait_ns), fmt_ns(r.lateness_ns), bw(r.bus_bandwidth_gbps)]
            for r in sorted(job.ranks, key=lambda r: (-r.lateness_ns, r.rank)))
    out += ["_Per steady-state step; latest first._", ""]
    out += table(header, rows, limit, len(job.ranks), "ranks")
    if len(job.clocks) > 1:
        out += ["Job clock: " + "; ".join(md(_clock_text(c), 300) for c in job.clocks[:limit]), ""]
    return out


__all__ = ["markdown_lines", "straggler_sentence", "text_lines"]

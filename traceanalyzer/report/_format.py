"""Formatting helpers shared by the renderers (and their sections): durations, shares, one-line inert
text for the terminal and for Markdown, Markdown tables. The one place each of these formats is made."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable

from .. import inert
from ..result.types import us
from ..units import PERCENT_DECIMALS
from ..units import format_us as fmt_us

WIDTH = 80  # terminal lines
MAX_CELL_CHARS = 160  # a Markdown cell
# The span of the log figures (definitions `counter_metrics`, `zero_util_runs`): every sample of the log. A
# finding may speak of the job inside it (the idle head and tail set apart) and says so ("over the job").
WHOLE_LOG = "over the whole log"

__all__ = ["MAX_CELL_CHARS", "WHOLE_LOG", "WIDTH", "clean", "fmt_ns", "fmt_pct", "fmt_pct_change", "fmt_pct_points",
           "fmt_s", "fmt_us", "md", "rank_label", "rank_name", "requests_line", "serving_line", "step_source_text",
           "table", "wrap"]


def fmt_ns(ns: float | None) -> str:
    """A duration the result holds in nanoseconds, written as the saved report has it (`us`), as `fmt_us`."""
    return fmt_us(us(ns))


def fmt_pct(x: float | None) -> str:
    """A fraction in [0, 1] as a percentage with one decimal ("n/a" for None)."""
    return "n/a" if x is None else f"{100 * x:.{PERCENT_DECIMALS}f}%"


def fmt_pct_points(x: float | None) -> str:
    """A value already in percent (an nvidia-smi utilisation, 0-100) as `fmt_pct` writes a fraction: 34.8%."""
    return "n/a" if x is None else f"{x:.{PERCENT_DECIMALS}f}%"


def fmt_s(seconds: float | None) -> str:
    """A duration the result holds in seconds (logs' sample times), as `fmt_us` writes every duration."""
    return fmt_us(None if seconds is None else seconds * 1e6)


def fmt_pct_change(x: float | None) -> str:
    """A relative change (head / base - 1) as a signed percentage: +12.5%, -3.0% ("n/a" for None)."""
    return "n/a" if x is None else f"{x * 100:+.{PERCENT_DECIMALS}f}%"


def rank_name(rank: object) -> str:
    """What names a rank in every face: its number, or its input's file name when the trace records no rank
    (a single-process capture). Plain text: each renderer escapes it."""
    number = getattr(rank, "rank", None)
    if number is not None:
        return str(number)
    return str(getattr(rank, "input", None) or "trace").replace("\\", "/").rsplit("/", 1)[-1]


def rank_label(rank: object) -> str:
    """`rank N`, or the input's file name when the trace records no rank (prose and headings)."""
    name = rank_name(rank)
    return f"rank {name}" if getattr(rank, "rank", None) is not None else name


def clean(text: object) -> str:
    """One line of printable text: terminal escapes removed, other control characters shown escaped."""
    return " ".join(inert.terminal(text).split())


def wrap(text: str, first: str, rest: str) -> list[str]:
    """`text` cleaned and wrapped to the terminal width, `first` before the first line, `rest` before the others."""
    return textwrap.wrap(clean(text), WIDTH, initial_indent=first, subsequent_indent=rest,
                         break_long_words=True, break_on_hyphens=False) or [first.rstrip()]


def md(text: object, limit: int = MAX_CELL_CHARS) -> str:
    """Inline-safe, inert text: one line, cut to `limit` characters (see `inert.markdown`)."""
    return inert.markdown(text, limit)


def table(header: list[str], rows: Iterable[list[str]], limit: int, total: int, what: str) -> list[str]:
    """A Markdown table of at most `limit` rows, with a note on how many of `total` were left out."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    shown = 0
    for row in rows:
        if shown >= limit:
            break
        out.append("| " + " | ".join(row) + " |")
        shown += 1
    if total > shown:
        out += ["", f"_{total - shown} more {what} not shown; see the HTML or JSON report._"]
    return out + [""]


def step_source_text(source: object) -> str | None:
    """"steps detected from <basis>, period X" for a rank whose steps were detected, "one step marker
    holding N iterations detected from <basis>, ..." for a single marker with sub-iterations, "no loop in
    this capture: ..." for a rank without steps (a `StepSourceResult`, or its plain-data form), else None.
    Plain text: each renderer escapes it."""
    def get(key: str) -> object:
        return source.get(key) if isinstance(source, dict) else getattr(source, key, None)

    kind, n = get("kind"), get("iterations")
    if kind == "window":  # no markers and no loop: one window, said plainly
        return "no loop in this capture: figures over the whole window"
    if kind != "detected" and not (kind == "markers" and n):
        return None
    basis = str(get("basis") or "repeating work")
    basis = "the kernel sequence" if basis == "kernel sequence" else basis
    period = get("period_us")
    every = f"period {fmt_us(period if isinstance(period, (int, float)) else None)}"
    if kind == "markers":
        return f"one step marker, the step: it holds {n} iterations detected from {basis}, {every}"
    return f"steps detected from {basis}, {every}{f' ({n} iterations)' if n else ''}"


def serving_line(p: object) -> str:
    """One serving phase (result.types.ServingPhaseRow) in one line: "decode: 10 iterations, median 76.6 ms, GPU busy
    98.0%, 400 us scheduling between iterations (median), median batch 32, 2.4 ms per output token, 10 graph
    replays" (definitions: serving_iterations). Every face says a phase with this line."""
    n = getattr(p, "iterations", 0)
    phase = clean(getattr(p, "phase", ""))
    out = (f"{'unknown phase' if phase == 'unknown' else phase}: {n} iteration{'s' if n != 1 else ''}, median "
           f"{fmt_us(getattr(p, 'median_iteration_us', None))}, GPU busy {fmt_pct(getattr(p, 'gpu_busy_share', None))}")
    gap = getattr(p, "median_host_gap_us", None)
    if gap is not None:
        out += f", {fmt_us(gap)} scheduling between iterations (median)"
    batch = getattr(p, "median_batch_size", None)
    if batch is not None:
        out += f", median batch {batch:g}"
    per_token = getattr(p, "median_us_per_token", None)
    if per_token is not None:
        out += f", {fmt_us(per_token)} per output token"
    replays = getattr(p, "graph_replays", 0)
    if replays:
        out += f", {replays} graph replay{'s' if replays != 1 else ''}"
    return out


# What each kind of critical-path segment (analyses/critical_path.py SEGMENT_KINDS) is called in prose.
CRITICAL_PATH_WORDS = {
    "kernel": "GPU kernels", "copy": "GPU copies", "host op": "host work", "launch": "launch calls",
    "sync wait": "blocking calls", "peer wait": "waiting for", "idle": "untraced or idle time",
}
CRITICAL_PATH_PARTS = 4  # kinds named in the one line; the rest summed as "other"


def critical_path_parts(cp: object) -> list[tuple[str, float, str]]:
    """The median step's critical path by kind, largest first: (kind, share of the step, the longest segment's
    name of that kind, "" when none is named), from a `CriticalPathResult` or its plain-data form."""
    def get(obj: object, key: str) -> object:
        return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)

    by_kind = get(cp, "by_kind_us")
    step_us = get(cp, "step_us")
    if not isinstance(by_kind, dict) or not isinstance(step_us, (int, float)) or step_us <= 0:
        return []
    longest: dict[str, tuple[float, str]] = {}
    for seg in get(cp, "segments") or ():  # type: ignore[attr-defined]
        kind, name = str(get(seg, "kind")), str(get(seg, "name") or "")
        dur = get(seg, "duration_us") if isinstance(seg, dict) else us(getattr(seg, "dur_ns", 0))
        if name and name != "(other)" and isinstance(dur, (int, float)) and dur > longest.get(kind, (0.0, ""))[0]:
            longest[kind] = (float(dur), name)
    parts = sorted(((str(k), min(float(v) / step_us, 1.0)) for k, v in by_kind.items()), key=lambda x: -x[1])
    return [(k, share, longest.get(k, (0.0, ""))[1]) for k, share in parts]


def critical_path_text(cp: object) -> str | None:
    """One line: "the median step (step 3, 8.1 ms) is 62% GPU kernels (gemm), 30% host work (preprocess), 8%
    waiting for rank 1". Plain text: each renderer escapes it. None without a path."""
    parts = critical_path_parts(cp)
    if not parts:
        return None
    named = [p for p in parts[:CRITICAL_PATH_PARTS] if p[1] >= 0.005]
    words = []
    for kind, share, name in named:
        label = CRITICAL_PATH_WORDS.get(kind, kind)
        if kind == "peer wait":
            words.append(f"{share:.0%} {label} {name or 'other ranks'}")
        else:
            words.append(f"{share:.0%} {label}" + (f" ({inert.shorten(name, 80)})" if name else ""))
    rest = sum(share for _, share, _ in parts) - sum(share for _, share, _ in named)
    if rest >= 0.005:
        words.append(f"{rest:.0%} other")
    step = cp.get("step") if isinstance(cp, dict) else getattr(cp, "step", None)
    step_us = cp.get("step_us") if isinstance(cp, dict) else getattr(cp, "step_us", None)
    which = f"step {step}, " if step is not None else ""
    what = "the median step" if step is not None else "the window"
    return f"{what} ({which}{fmt_us(step_us)}) is " + ", ".join(words)


def critical_path_strip(cp: object) -> list[tuple[str, float, str]]:
    """The strip drawn under a rank's steps: (CSS class of the kind, width in % of the step, tooltip) per
    segment of the median step's path, in path order (a `CriticalPathResult`). Plain text: escaped by jinja."""
    segments = getattr(cp, "segments", None) or ()
    step_us = getattr(cp, "step_us", None)
    if not isinstance(step_us, (int, float)) or step_us <= 0:
        return []
    out = []
    for seg in segments:
        dur_us = us(seg.dur_ns) or 0.0
        kind = str(seg.kind)
        label = CRITICAL_PATH_WORDS.get(kind, kind)
        name = f" · {inert.shorten(str(seg.name), 120)}" if seg.name else ""
        out.append(("cp-" + kind.replace(" ", "-"), round(min(100.0 * dur_us / step_us, 100.0), 3),
                    f"{label}{name} · {fmt_us(dur_us)}"))
    return out


def requests_line(q: object) -> str:
    """A serving run's requests (result.types.ServingRequests) in one line: "requests: 12, median TTFT 180.0 ms
    (p90 240.0 ms), queue 40.0 ms, decode 1.2 s; 3 waited in the queue longer than their prefill" (definitions:
    serving_requests). Every face says the requests with this line; plain text (each renderer escapes it)."""
    n = getattr(q, "requests", 0)
    stats = {getattr(s, "figure", ""): s for s in getattr(q, "stats", ())}

    def median(figure: str) -> str | None:
        s = stats.get(figure)
        return None if s is None or getattr(s, "median_us", None) is None else fmt_us(s.median_us)

    out = f"requests: {n}"
    ttft = median("ttft")
    if ttft is not None:
        p90 = getattr(stats["ttft"], "p90_us", None)
        out += f", median TTFT {ttft}" + (f" (p90 {fmt_us(p90)})" if p90 is not None else "")
    parts = [f"{label} {v}" for label, v in (("queue", median("queue")), ("prefill", median("prefill")),
                                             ("decode", median("decode")), ("end-to-end", median("e2e")))
             if v is not None]
    out += "".join(f", {p}" for p in parts)
    longer = getattr(q, "queued_longer_than_prefill", 0)
    if longer:
        out += f"; {longer} waited in the queue longer than {'their' if longer != 1 else 'its'} prefill"
    if getattr(q, "joined", False):
        out += f"; {getattr(q, 'with_iterations', 0)} overlap the captured iterations"
    else:
        out += "; not on the trace's clock, so not joined to its iterations"
    return out

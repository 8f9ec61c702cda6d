"""A serving engine's requests (the Timeline's `requests`: spans of an OpenTelemetry export) joined to its
iterations (analyses/serving.py) on one clock -> frozen figures in ns.

Per request: the engine's own queue / prefill / decode / TTFT / end-to-end times, and the iterations (those
listed in `ServingPhases.iterations`, in start order) that overlap its life from arrival to finish: how many,
the first and the last. Per figure over all requests: count, median and p90 (linear interpolation between
ranks, numpy's default); how many requests waited in the queue longer than their prefill took.
Vectorized: the overlap counts are two searchsorted calls over the iterations' sorted starts and ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .serving import IterationFigures
from .thresholds import MAX_REQUEST_ROWS

# The per-request figures summarised, in the order every face says them.
REQUEST_FIGURES = ("queue", "prefill", "decode", "ttft", "e2e")


@dataclass(frozen=True)
class RequestSpan:
    """One request (definitions: serving_requests); durations None where the span does not carry them."""

    request_id: str
    start_ns: int  # arrival, on the trace's clock when `RequestFigures.joined`, else the span's epoch time
    end_ns: int
    queue_ns: int | None
    prefill_ns: int | None
    decode_ns: int | None
    ttft_ns: int | None
    e2e_ns: int
    prompt_tokens: int | None
    output_tokens: int | None
    iterations: int  # listed iterations overlapping [start_ns, end_ns) (0 when not joined)
    first_iteration: int | None  # index into the listed iterations
    last_iteration: int | None


@dataclass(frozen=True)
class FigureStat:
    """One per-request figure over the requests that carry it."""

    figure: str  # one of REQUEST_FIGURES
    requests: int
    median_ns: int | None
    p90_ns: int | None


@dataclass(frozen=True)
class RequestFigures:
    """The requests of a serving run and their join to the iterations (definitions: serving_requests)."""

    requests: int
    stats: tuple[FigureStat, ...]  # REQUEST_FIGURES order
    queued_longer_than_prefill: int  # requests whose queue time exceeds their prefill time (both known)
    joined: bool  # on the trace's clock: iterations joined
    with_iterations: int  # requests overlapping at least one listed iteration
    rows: tuple[RequestSpan, ...] = ()  # the first MAX_REQUEST_ROWS, in arrival order
    rows_omitted: int = 0


def request_figures(requests: pd.DataFrame, iterations: Sequence[IterationFigures], joined: bool) -> RequestFigures:
    """The requests' figures; `iterations` (start order) are joined when `joined` (the spans on their clock)."""
    req = requests.sort_values(["ts_ns", "request_id"], kind="stable")
    ts, end = req["ts_ns"].to_numpy(np.int64), req["end_ns"].to_numpy(np.int64)
    n = len(ts)
    count = np.zeros(n, dtype=np.int64)
    first = last = np.full(n, -1, dtype=np.int64)
    if joined and iterations and n:
        starts = np.array([i.start_ns for i in iterations], dtype=np.int64)
        ends = starts + np.array([i.duration_ns for i in iterations], dtype=np.int64)
        # overlapping [ts, end): started before the request's end, less those ended by its arrival (every one of
        # which started before its end too); exact for any intervals
        started = np.searchsorted(starts, end, side="left")
        count = started - np.searchsorted(np.sort(ends), ts, side="right")
        # in start order, the first overlapping is the first after those whose (running) end is at or before
        # arrival: iterations of one engine follow each other
        first = np.searchsorted(np.maximum.accumulate(ends), ts, side="right")
        last = started - 1
        none = count <= 0
        count = np.where(none, 0, count)
        first, last = np.where(none, -1, first), np.where(none, -1, last)
    cols = {c: req[f"{c}_ns"].to_numpy(np.int64) for c in REQUEST_FIGURES}
    stats = tuple(_stat(c, cols[c]) for c in REQUEST_FIGURES)
    known = (cols["queue"] >= 0) & (cols["prefill"] >= 0)
    longer = int((cols["queue"][known] > cols["prefill"][known]).sum())
    k = min(n, MAX_REQUEST_ROWS)
    ids = req["request_id"].to_numpy()
    prompt, output = req["prompt_tokens"].to_numpy(np.int64), req["output_tokens"].to_numpy(np.int64)
    rows = tuple(RequestSpan(str(ids[j]), int(ts[j]), int(end[j]), _opt(cols["queue"][j]), _opt(cols["prefill"][j]),
                            _opt(cols["decode"][j]), _opt(cols["ttft"][j]), int(cols["e2e"][j]), _opt(prompt[j]),
                            _opt(output[j]), int(count[j]), _opt(first[j]), _opt(last[j]))
                 for j in range(k))
    return RequestFigures(n, stats, longer, joined, int((count > 0).sum()), rows, n - k)


def _stat(figure: str, values: np.ndarray) -> FigureStat:
    v = values[values >= 0]
    if not len(v):
        return FigureStat(figure, 0, None, None)
    return FigureStat(figure, len(v), int(round(float(np.median(v)))), int(round(float(np.percentile(v, 90)))))


def _opt(x: np.integer) -> int | None:
    return None if x < 0 else int(x)


__all__ = ["REQUEST_FIGURES", "FigureStat", "RequestFigures", "RequestSpan", "request_figures"]

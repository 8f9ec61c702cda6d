"""The vectorized host-side helpers against plain per-event Python references (random tables)."""

import statistics

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceanalyzer import timeline as T
from traceanalyzer.analyses import gaps as A
from traceanalyzer.analyses import host as H
from traceanalyzer.analyses.thresholds import STARTUP_FIRST_FACTOR, STARTUP_MIN_CALLS, STARTUP_MIN_NS

NAMES = ["a", "b", "c", "d", None]
DURATIONS = [1, 10, 500_000, STARTUP_MIN_NS, 5_000_000, 20_000_000]


def first_calls_reference(names, ts, dur):
    """Per name: the earliest call (ties: the earlier row) flagged when long and >= factor x the median
    of the other calls, with at least STARTUP_MIN_CALLS calls."""
    out = [False] * len(names)
    for name in {n for n in names if n is not None}:
        rows = sorted((t, i) for i, (n, t) in enumerate(zip(names, ts)) if n == name)
        if len(rows) < STARTUP_MIN_CALLS:
            continue
        first = rows[0][1]
        median = statistics.median(dur[i] for _, i in rows[1:])
        out[first] = dur[first] >= STARTUP_MIN_NS and dur[first] >= STARTUP_FIRST_FACTOR * median
    return out


events_strategy = st.integers(0, 40).flatmap(lambda n: st.tuples(
    st.lists(st.sampled_from(NAMES), min_size=n, max_size=n),
    st.lists(st.integers(0, 20), min_size=n, max_size=n),
    st.lists(st.sampled_from(DURATIONS), min_size=n, max_size=n)))


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(events_strategy)
def test_first_call_costs_equal_a_per_name_reference(table):
    names, ts, dur = table
    ev = pd.DataFrame({"name": pd.Categorical(names, categories=["a", "b", "c", "d", "unused"]),
                       "ts_ns": np.array(ts, dtype=np.int64), "dur_ns": np.array(dur, dtype=np.int64)})
    assert H.first_call_costs(ev).tolist() == first_calls_reference(names, ts, dur)


def test_first_call_costs_flags_the_slow_first_call_only():
    ev = pd.DataFrame({"name": pd.Categorical(["conv", "conv", "conv", "relu", "conv"]),
                       "ts_ns": np.array([0, 10, 20, 5, 30]),
                       "dur_ns": np.array([50_000_000, 1_000, 3_000, 90_000_000, 2_000])})
    # conv: first 50 ms vs median 2.5 us of the others -> flagged; relu: one call -> never
    assert H.first_call_costs(ev).tolist() == [True, False, False, False, False]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-1, 6), st.sampled_from(T.COPY_KINDS), st.integers(-1, 10**6)),
                max_size=12),
       st.lists(st.integers(-2, 8), max_size=30))
def test_linked_copy_equals_a_dictionary_lookup(copies, correlation):
    n = len(copies)
    ev = pd.DataFrame({"kind": pd.Categorical([T.MEMCPY] * n, categories=T.EVENT_KINDS),
                       "correlation": np.array([c for c, _, _ in copies], dtype=np.int64),
                       "copy_kind": pd.Categorical([k for _, k, _ in copies], categories=T.COPY_KINDS),
                       "bytes": np.array([b for _, _, b in copies], dtype=np.int64),
                       "dur_ns": np.arange(n, dtype=np.int64) * 7 + 3})
    first = {}
    for i, (c, k, b) in enumerate(copies):
        if c >= 0 and c not in first:
            first[c] = (k, b, i * 7 + 3)
    direction, nbytes, dur = H.linked_copy(ev, np.array(correlation, dtype=np.int64))
    got = [(None if pd.isna(d) else d, int(b), int(u)) for d, b, u in zip(direction, nbytes, dur)]
    want = [first.get(c, (None, -1, -1)) for c in correlation]
    assert got == want


def test_evidence_sums_per_name_in_order_of_first_appearance():
    ev = pd.DataFrame({"name": pd.Categorical(["z", "y", "z", "x"], categories=["x", "y", "z"])})
    names, inside, dur = A.sum_by_name(ev, np.array([1, 2, 3, 4]), np.array([10, 20, 30, 40]))
    assert names == ["z", "y", "x"]
    assert inside.tolist() == [4, 2, 4] and dur.tolist() == [40, 20, 40]


def test_category_mask_equals_isin_and_leaves_missing_values_out():
    column = pd.Series(pd.Categorical(["kernel", None, "cpu_op", "memcpy", "kernel"],
                                      categories=list(T.EVENT_KINDS)))
    assert T.category_mask(column, T.GPU_WORK_KINDS).tolist() == column.isin(T.GPU_WORK_KINDS).tolist()
    assert T.category_mask(column, ("kernel", "not a kind")).tolist() == [True, False, False, False, True]
    assert T.category_mask(column, T.GPU_WORK_KINDS).tolist() == [True, False, False, True, True]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(NAMES), st.integers(0, 10**12), st.integers(1, 10**12)), max_size=40))
def test_evidence_sums_per_name_equal_a_groupby(rows):
    names = [n for n, _, _ in rows]
    ev = pd.DataFrame({"name": pd.Categorical(names, categories=["a", "b", "c", "d", "unused"])})
    inside = np.array([i for _, i, _ in rows], dtype=np.int64)
    dur = np.array([d for _, _, d in rows], dtype=np.int64)
    frame = pd.DataFrame({"code": ev["name"].cat.codes.to_numpy(), "inside": inside, "dur": dur})
    g = frame.groupby("code", sort=False).sum()
    want = ([("nan" if c < 0 else ["a", "b", "c", "d", "unused"][c]) for c in g.index.tolist()],
            g["inside"].tolist(), g["dur"].tolist())
    got_names, got_inside, got_dur = A.sum_by_name(ev, inside, dur)
    assert (got_names, got_inside.tolist(), got_dur.tolist()) == want

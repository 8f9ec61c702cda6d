"""Diagnosis on every real Kineto trace of the corpus: all idle time attributed, no verdict from
mere python frames, no GPU verdict without kernels."""

from __future__ import annotations

import pytest
from test_corpus_kineto import FILES, NOT_TRACES
from timelines import load_paths

from traceanalyzer import timeline as T
from traceanalyzer.analyses import figures_of
from traceanalyzer.diagnosis import CAUSES, VERDICTS
from traceanalyzer.diagnosis.thresholds import HOST_UNTRACED_MAX_SHARE, STARTUP_DOMINATED_MIN_SHARE
from traceanalyzer.pipeline import analyze

pytestmark = pytest.mark.slow  # every corpus trace: runs with the full suite

TRACES = [p for p in FILES if not any(tag in p.name for tag in NOT_TRACES)]


def _diagnosis(tl):
    """The job's verdict, and each rank's diagnosis as `ranks`."""
    data = analyze(tl).to_data()
    return dict(data["diagnosis"], ranks=[r["diagnosis"] for r in data["ranks"]])


@pytest.mark.parametrize("path", TRACES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_corpus_diagnosis(path):
    tl = load_paths([path])
    d = _diagnosis(tl)
    assert d["primary"] in VERDICTS
    (rank,) = d["ranks"]
    # all idle time is attributed: per device, the causes add up to window - busy (within 0.1%)
    report_devices = {x.device: x for x in figures_of(tl, min_gap_ns=0).ranks[0].devices}
    for dev in rank["devices"]:
        ours = report_devices[int(dev["device"].split(":")[1])]  # "cuda:N", or "rocm:N" on ROCm traces
        idle_us = (ours.busy.window.dur_ns - ours.busy.busy_ns) / 1000
        assert set(dev["idle_by_cause_us"]) <= set(CAUSES)  # the causes with idle time only
        assert sum(dev["idle_by_cause_us"].values()) == pytest.approx(idle_us, rel=1e-3, abs=0.01)
    ev = tl.events
    kernels = int((ev["kind"] == T.KERNEL).sum())
    if kernels == 0:  # CPU-only, CUPTI range profiler, MTIA: nothing to call GPU-bound
        assert d["primary"] in ("undetermined", d["host_primary"])
        shares = rank["host_shares"]
        if shares["other_us"] >= HOST_UNTRACED_MAX_SHARE * shares["total_us"]:  # its loop was not traced
            assert d["host_primary"] is None and "outside any traced op" in d["headline"]
        else:
            assert d["host_primary"] in ("cpu_input_bound", "cpu_compute_bound")
    if d["primary"] == "input_bound":
        # only from the DataLoader wait op, never from python frames mentioning torch/utils/data
        assert rank["idle_by_cause_us"]["dataloader"] > 0
        assert (ev["kind"] == T.DATALOADER).any()
        assert any(e.startswith("enumerate(DataLoader)#") for e in d["findings"][0]["evidence"])
    if d["primary"] == "startup_dominated":  # a capture of the first iterations: start-up is most of the loss
        assert rank["startup_us"] >= STARTUP_DOMINATED_MIN_SHARE * rank["lost_us"] > 0
        assert "profile steady-state steps" in d["headline"]
    elif d["primary"] == "undetermined" and "GPU busy only" in rank["reason"]:
        assert rank["startup_us"] < STARTUP_DOMINATED_MIN_SHARE * rank["lost_us"] or rank["lost_us"] == 0
    for f in d["findings"]:
        assert f["advice"] and f["evidence"]


@pytest.mark.parametrize("path", [p for p in TRACES if "owlv2" in p.name], ids=lambda p: p.parent.name)
def test_python_dataloader_frames_alone_are_not_input_bound(path):
    """The trap: with the DataLoader wait ops re-labelled as ordinary ops, only python frames from
    torch/utils/data remain, and they must not make the trace input-bound."""
    tl = load_paths([path])
    ev = tl.events
    assert ev["name"].astype(str).str.contains("torch/utils/data").any()
    kind = ev["kind"].astype(str).to_numpy()
    kind[kind == T.DATALOADER] = T.CPU_OP
    tl.events = ev.assign(kind=pd_categorical(kind))
    d = _diagnosis(tl)
    assert d["primary"] != "input_bound"
    assert "dataloader" not in d["ranks"][0]["idle_by_cause_us"]  # no time for it: not listed


def pd_categorical(values):
    import pandas as pd

    return pd.Categorical(values, categories=T.EVENT_KINDS)

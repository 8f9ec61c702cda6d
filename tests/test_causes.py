"""The cause registry is the one vocabulary: host classes, attribution, rules, advice and renderers
agree with it."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from traceanalyzer import causes as C
from traceanalyzer import intervals as iv
from traceanalyzer import timeline as T
from traceanalyzer.analyses import gaps as G
from traceanalyzer.analyses import host as H
from traceanalyzer.analyses import tracks as TR
from traceanalyzer.diagnosis import rules as R
from traceanalyzer.diagnosis.advice import ADVICE
from traceanalyzer.report import html, markdown

ROOT = Path(__file__).resolve().parent.parent


def test_every_cause_leads_to_a_registered_verdict_with_advice():
    for cause in C.CAUSE_LIST:
        assert cause.verdict in C.VERDICT_BY_ID, cause
        assert re.fullmatch(r"#[0-9a-f]{6}", cause.color), cause
    for cause in C.CAUSE_LIST:  # every cause's verdict is a finding id the rules give advice for
        assert cause.verdict in ADVICE, cause
    for verdict in C.VERDICT_LIST:
        assert verdict.cause == "" or verdict.cause in C.CAUSE_BY_ID, verdict
    for fid in (C.GPU_BOUND, C.GPU_UNDERUSED, C.CPU_INPUT_BOUND, C.CPU_COMPUTE_BOUND, "cpu_optimizer", "cpu_annotation",
                "cpu_elsewhere"):
        assert fid in ADVICE, fid


def test_diagnosis_and_renderers_use_the_registry():
    assert R.VERDICTS == C.VERDICTS
    assert html.CAUSES == {c.id: {"label": c.label, "color": c.color} for c in C.CAUSE_LIST}
    assert set(markdown.CAUSE_LABELS) == set(C.CAUSES)
    assert set(markdown.VERDICT_LABELS) >= set(C.VERDICTS)


def test_host_classes_come_from_the_registry_in_priority_order():
    host = [c for c in C.CAUSE_LIST if c.priority is not None]
    assert [c.id for c in C.host_causes()] == [c.id for c in sorted(host, key=lambda c: c.priority)]
    assert len({c.priority for c in host}) == len(host), "two host classes with one priority"
    for c in host:
        assert c.host_pattern is not None or c.host_kind in T.EVENT_KINDS, c.id
    # The six host classes that name a cause directly when they cover most of a gap.
    assert {c.id for c in C.CAUSE_LIST if c.direct} == {C.STARTUP, C.DATALOADER, C.COMMUNICATION, C.ALLOCATOR,
                                                        C.MEMCPY, C.SYNC}
    assert all(c.priority is not None for c in C.CAUSE_LIST if c.direct)


def _host(classes: tuple[str, ...], covering: str) -> H.HostActivity:
    """Host activity whose class `covering` covers [0, 1000) and nothing else is traced."""
    exclusive = {c: (np.array([0]), np.array([1000])) if c == covering else iv.empty() for c in classes}
    events = pd.DataFrame({c: pd.Series(dtype="int64") for c in H.HOST_EVENT_COLUMNS})
    return H.HostActivity(((1, 1),), "launches", classes, events, exclusive, iv.empty(), iv.empty(), 0)


def test_every_direct_cause_is_given_to_the_gaps_its_class_covers():
    classes = (*(c.id for c in C.host_causes()), H.OTHER_HOST)
    for cause in C.host_causes():
        got = G.classify_gaps(np.array([0]), np.array([1000]), _host(classes, cause.id))
        assert C.CAUSES[int(got[0])] == (cause.id if cause.direct else C.LAUNCH), cause.id
    got = G.classify_gaps(np.array([0]), np.array([1000]), _host(classes, H.OTHER_HOST))
    assert C.CAUSES[int(got[0])] == C.LAUNCH  # a short gap with the host busy: launch latency


def test_the_drawn_host_lanes_use_the_registry_patterns():
    patterns = dict(TR.HOST_LANES)
    assert patterns["copy"] is C.COPY_CALLS is C.CAUSE_BY_ID[C.MEMCPY].host_pattern
    assert patterns["sync"] is C.SYNCHRONIZE_CALLS
    sync = C.CAUSE_BY_ID[C.SYNC].host_pattern
    assert sync is not None
    for name in ("cudaStreamSynchronize", "hipDeviceSynchronize", "cudaMemcpy", "cuMemcpyDtoH_v2", "aten::item"):
        assert sync.search(name), name
    for name in ("cudaMemcpyAsync", "cudaLaunchKernel"):
        assert not sync.search(name), name
    assert C.SYNC_COPY_CALLS.search("cudaMemcpy") and not C.SYNC_COPY_CALLS.search("cudaMemcpyAsync")


def test_report_script_reads_colours_from_the_page_data_only():
    script = (ROOT / "templates" / "report.js").read_text()
    assert "DATA.causes" in script
    # No cause colour is spelled out in the script: they come from the registry.
    for cause in C.CAUSE_LIST:
        assert cause.color not in script, cause.id

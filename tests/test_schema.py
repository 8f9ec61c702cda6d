"""The result tree of schema `traceanalyzer/3`: each rank carries its diagnosis, each device a gap table of
every gap, drawing payloads only under `drawing` (and left out on request), and `/2` reports (saved by
version 0.2 of this tool, in tests/data/schema2) read through the migration, into `load` and `diff`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from conftest import ROOT, SAMPLES

import traceanalyzer as ta
from traceanalyzer import advice_patterns as AP
from traceanalyzer.analyses.collectives_job import RankComm
from traceanalyzer.analyses.figures import CopyDirection, GapBin, KernelRow
from traceanalyzer.commands import main
from traceanalyzer.result import build as B
from traceanalyzer.result.types import EDGE, SCHEMA, ResultFormatError, from_data, migrate, to_data

SCHEMA2 = Path(__file__).parent / "data" / "schema2"
# /3 reports saved (without drawing) before maps keyed by cause held only the causes present: they store zeros
SCHEMA3 = Path(__file__).parent / "data" / "schema3"
MADE_FROM_3 = {"input_bound": ["sample_traces/input_bound.json"],
               "comm_job": ["sample_traces/comm_rank0.json", "sample_traces/comm_rank1.json"]}
# The inputs each saved /2 report was made from (paths relative to the repository, as they were given).
MADE_FROM = {
    "basic": (["sample_traces/basic.json"], {}),
    "comm_job": (["sample_traces/comm_rank0.json", "sample_traces/comm_rank1.json"], {}),
    "glances": (["sample_traces/glances/cpu_aug.trace.json", "sample_traces/glances/cpu_aug.csv"], {}),
    "memory_leak": (["sample_traces/torch_memory_leak.json.gz"], {}),
    "cpu_only": (["sample_traces/cpu_only.json"], {}),
    "input_bound_undiagnosed": (["sample_traces/input_bound.json"], {"diagnose": False}),
}


def _fresh(name: str) -> ta.Analysis:
    paths, opts = MADE_FROM[name]
    return ta.analyze(paths if len(paths) > 1 else paths[0], ta.Options(cache=False, jobs=1, **opts))


# Made after the /2 reports were saved: the operator view, its definitions and what it adds to findings.
LATER_DEFINITIONS = ("operators", "kernel_launchers", "python_frames", "named_ranges", "critical_path")


def _without_operator_view(f):  # noqa: ANN001, ANN202
    fixes = {p.advice for p in AP.PATTERNS}
    labels = tuple(f" is {p.label}" for p in AP.PATTERNS)
    return dataclasses.replace(
        f, advice=tuple(x for x in f.advice if x not in fixes),
        evidence=tuple(x for x in f.evidence if not x.startswith(("no Python stacks", "user code running"))
                       and not x.endswith(labels)))


def _without_later_parts(a: ta.Analysis) -> ta.Analysis:
    """The analysis without what schema-2 reports could not hold: the operator view and its findings."""
    def diag(d):  # noqa: ANN001, ANN202
        if d is None:
            return None
        kept = tuple(_without_operator_view(f) for f in d.findings
                     if f.id != "named_range" and not f.id.startswith("pattern_"))
        return dataclasses.replace(d, findings=kept)

    ranks = tuple(dataclasses.replace(r, operators=None, critical_path=None, diagnosis=diag(r.diagnosis))
                  for r in a.ranks)
    return dataclasses.replace(a, ranks=ranks, diagnosis=diag(a.diagnosis),
                               definitions={k: v for k, v in a.definitions.items() if k not in LATER_DEFINITIONS})


def _fold(x, key: str = ""):  # noqa: ANN001, ANN202
    """`x` with the device-side cause (issue 32: gaps whose next work was queued before they began) folded
    into `unknown`, what the /2 reports' tool called those gaps: causes renamed, idle maps summed, its
    finding's time added to the unexplained-idle finding's."""
    dep, unk = "device_dependency", "unknown"
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        changes = {f.name: _fold(getattr(x, f.name), f.name) for f in dataclasses.fields(x)}
        if isinstance(changes.get("findings"), tuple):
            kept = [f for f in changes["findings"] if f.id != "dependency_bound"]
            extra = [f for f in changes["findings"] if f.id == "dependency_bound"]
            if extra:
                e = extra[0]
                kept = [dataclasses.replace(f, explains_us=f.explains_us + e.explains_us,
                                            share_of_idle=round(f.share_of_idle + e.share_of_idle, 6),
                                            share_of_window=round((f.share_of_window or 0) + (e.share_of_window or 0), 6),
                                            gaps=(f.gaps or 0) + (e.gaps or 0), host_ops=())
                        if f.id == "unexplained_idle" else f for f in kept]
            changes["findings"] = tuple(kept)
        return dataclasses.replace(x, **changes)
    if isinstance(x, dict):
        if dep in x and unk in x and isinstance(x[dep], (int, float)):
            out = {k: _fold(v, k) for k, v in x.items() if k != dep}
            out[unk] += x[dep]
            return out
        if x.get("key") == f"idle:{dep}":
            return dict(x, key=f"idle:{unk}")
        return {k: _fold(v, k) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        items = [_fold(v, key) for v in x]
        keys = [i.get("key") for i in items if isinstance(i, dict)]
        if keys.count(f"idle:{unk}") == 2:  # two series of the unknown cause: summed
            a, b = (i for i in items if isinstance(i, dict) and i.get("key") == f"idle:{unk}")
            items = [i for i in items if i is not b]
            a["values"] = [u + v for u, v in zip(a["values"], b["values"])]
        return type(x)(items)
    return unk if x == dep else x


def _without_gap_tables(a: ta.Analysis) -> ta.Analysis:
    a = _fold(_without_later_parts(a))
    # (and without where the steps came from, which a /2 report does not say, nor the definitions)
    ranks = tuple(dataclasses.replace(r, devices=tuple(dataclasses.replace(d, gap_table=None) for d in r.devices),
                                      diagnosis=_figures_of(r.diagnosis), step_source=None)
                  for r in a.ranks)
    return dataclasses.replace(a, ranks=ranks, tool=dataclasses.replace(a.tool, version=""),
                               diagnosis=_figures_of(a.diagnosis), definitions={})


def _figures_of(d):
    """A diagnosis without its prose and the figures written for it (headline, reasons, evidence, the
    shares' figures, the host loop's finer parts): the /2 report's wording is its own version's. The
    verdicts, the lost time by cause and each finding's id, severity and time stay compared; a CPU-only
    capture's verdict is the host loop's now (cpu_*), where /2 said undetermined, and the host loop's
    findings are one per part of its step time (/2: data wait and model ops only)."""
    if d is None:
        return None
    # (nor the findings' severity and the runner-up, which follow the projected savings since issue 32)
    out = dataclasses.replace(d, headline="", headline_figures={}, headline_shares=(), verdict_note=None,
                              headline_detail="",
                              findings=tuple(dataclasses.replace(f, title="", evidence=(), figures={}, shares=(),
                                                                 advice=(), severity="",
                                                                 host_ops=() if f.id == "unexplained_idle"
                                                                 else f.host_ops) for f in d.findings))
    if hasattr(d, "runner_up"):
        out = dataclasses.replace(out, runner_up=None, runner_up_share=None, confidence=None)
    if d.primary in ("cpu_input_bound", "cpu_compute_bound"):
        out = dataclasses.replace(out, primary="undetermined")
    if d.host_primary:  # the host loop's findings are one per part now (optimizer, annotations apart)
        out = dataclasses.replace(out, findings=())
    if hasattr(d, "reason"):
        hs = d.host_shares
        out = dataclasses.replace(out, reason="", host_shares=hs and type(hs)(hs.total_us, hs.data_wait_us, 0, 0))
    return out


@pytest.mark.parametrize("name", sorted(MADE_FROM))
def test_a_saved_schema2_report_loads_as_the_fresh_analysis(name, monkeypatch):
    monkeypatch.chdir(ROOT)
    old = ta.load(SCHEMA2 / f"{name}.json")
    new = _fresh(name)
    assert old.schema == new.schema == SCHEMA
    assert set(old.definitions) <= set(new.definitions)
    # every figure, verdict and drawing is where schema 3 keeps it; only the gap tables differ (a /2 report
    # holds the drawn gaps only) and the version that wrote it
    assert _without_gap_tables(old) == _without_gap_tables(new)
    for r_old, r_new in zip(old.ranks, new.ranks):
        assert (r_old.diagnosis is None) == (r_new.diagnosis is None) == (new.diagnosis is None)
        for d_old, d_new in zip(r_old.devices, r_new.devices):
            assert d_old.gap_table is not None and d_new.gap_table is not None
            # these small traces draw every gap: the migrated table has each, at drawing precision (0.1 us)
            assert len(d_old.gap_table.start_us) + d_old.gap_table.omitted == d_new.gap_table.omitted + len(
                d_new.gap_table.start_us) == d_new.gaps.count
            assert d_old.gap_table.cause == _fold(d_new.gap_table.cause)
            assert d_old.gap_table.step == d_new.gap_table.step
            assert d_old.gap_table.duration_us == pytest.approx(d_new.gap_table.duration_us, abs=0.05)
    assert old.diagnosis is None or old.diagnosis.headline in old.to_markdown().replace("\\", "")


@pytest.mark.parametrize("name", sorted(MADE_FROM_3))
def test_a_saved_schema3_report_loads_as_the_fresh_analysis_and_diffs(name, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    saved = SCHEMA3 / f"{name}.json"
    assert '": 0.0' in saved.read_text()  # it enumerates causes with no time (what reports of then stored)
    paths = MADE_FROM_3[name]
    fresh = ta.analyze(paths if len(paths) > 1 else paths[0], ta.Options(cache=False, jobs=1))
    loaded, now = ta.load(saved), fresh.without_drawing()
    # every figure the same and the zeros dropped; the diagnosis' wording and its later fields (savings,
    # headline detail) are those of the version that saved it
    assert loaded.summary == now.summary and len(loaded.ranks) == len(now.ranks)
    for r_saved, r_now in zip(loaded.ranks, now.ranks):
        assert r_saved.devices == r_now.devices and r_saved.per_step == r_now.per_step
        assert r_saved.diagnosis is not None and r_now.diagnosis is not None
        by_cause = r_saved.diagnosis.idle_by_cause_us
        assert by_cause and all(by_cause.values())  # the saved zeros dropped on load
        # the same idle time (this round splits some unexplained time into device-side dependency)
        assert sum(by_cause.values()) == pytest.approx(sum(r_now.diagnosis.idle_by_cause_us.values()))
        assert r_saved.diagnosis.primary == r_now.diagnosis.primary
    head = fresh.save(tmp_path / "head.json")
    res = CliRunner().invoke(main, ["diff", str(saved), str(head), "--format", "json", "-o", str(tmp_path / "d.json")])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "d.json").read_text())
    assert doc["change_verdict"] == "unchanged" and doc["step_time"]["change"] == 0.0
    def idle(parts: dict[str, list[float]]) -> list[float]:
        return [sum(v) for v in zip(*(x for k, x in parts.items() if k.startswith("idle:")))]
    base_parts, head_parts = doc["base"]["step_parts_us"], doc["head"]["step_parts_us"]
    assert {k: v for k, v in base_parts.items() if not k.startswith("idle:")} == {
        k: v for k, v in head_parts.items() if not k.startswith("idle:")}
    assert idle(base_parts) == pytest.approx(idle(head_parts))  # idle by cause: see above


def test_migration_moves_each_rank_diagnosis_into_its_rank_and_names_the_speaking_rank():
    data = orjson.loads((SCHEMA2 / "comm_job.json").read_bytes())
    job_findings = data["diagnosis"]["findings"]
    out = migrate(data)
    assert out["schema"] == SCHEMA and "ranks" not in out["diagnosis"]
    assert [r["diagnosis"]["primary"] for r in out["ranks"]] == [d["primary"] for d in data["diagnosis"]["ranks"]]
    assert all("rank" not in r["diagnosis"] for r in out["ranks"])
    k = out["diagnosis"]["rank"]
    assert out["ranks"][k]["diagnosis"]["findings"] == job_findings
    assert "chart" not in out["job"] and "timeline" not in out["ranks"][0]
    assert out["ranks"][0]["drawing"]["timeline"] == data["ranks"][0]["timeline"]
    assert migrate(out) is out  # data of this schema is left as it is


def test_diff_takes_a_schema2_report_on_one_side(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    head = _fresh("basic").save(tmp_path / "head.json")
    out = tmp_path / "diff.json"
    res = CliRunner().invoke(main, ["diff", str(SCHEMA2 / "basic.json"), str(head), "--format", "json", "-o", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["step_time"]["change"] == 0.0 and doc["change_verdict"] == "unchanged"
    assert doc["step_time"]["base_median_us"] == doc["step_time"]["head_median_us"] == 3000.0


def test_the_gap_table_holds_every_gap_with_its_cause():
    a = ta.analyze(SAMPLES / "input_bound.json", ta.Options(cache=False, jobs=1))
    (dev,) = a.ranks[0].devices
    g = dev.gap_table
    assert g is not None and g.omitted == 0
    # five DataLoader waits (the first from the window start) and the idle tail after the last step's kernels
    assert g.start_us == (0.0, 9250.0, 19250.0, 29250.0, 39250.0, 49250.0)
    assert g.duration_us == (6100.0, 6850.0, 6850.0, 6850.0, 6850.0, 750.0)
    assert g.step == (0, 0, 1, 2, 3, 4)
    assert g.cause == ("dataloader",) * 5 + ("unknown",)
    assert len(g.start_us) == dev.gaps.count == 6
    assert round(sum(g.duration_us), 3) == dev.gaps.total_us and max(g.duration_us) == dev.gaps.largest_us
    # the top gaps of the summary are rows of the table, with the same step and cause
    rows = set(zip(g.start_us, g.duration_us, g.step, g.cause))
    assert {(t.start_us, t.duration_us, t.step, t.cause) for t in dev.gaps.top} <= rows
    frame = a.gaps()
    assert len(frame) == 6 and frame["cause"].tolist() == list(g.cause)
    assert frame["duration_us"].sum() == pytest.approx(dev.gaps.total_us)


def test_the_gap_table_is_bounded_by_keeping_the_longest(monkeypatch):
    monkeypatch.setattr(B, "MAX_GAP_ROWS", 5)
    a = ta.analyze(SAMPLES / "input_bound.json", ta.Options(cache=False, jobs=1))
    (dev,) = a.ranks[0].devices
    g = dev.gap_table
    assert len(g.start_us) == 5 and g.omitted == dev.gaps.count - 5
    assert sorted(g.duration_us, reverse=True) == [t.duration_us for t in dev.gaps.top[:5]]
    assert list(g.start_us) == sorted(g.start_us)


def test_saved_without_drawing_keeps_every_figure(tmp_path):
    a = ta.analyze([SAMPLES / "glances" / "cpu_aug.trace.json", SAMPLES / "glances" / "cpu_aug.csv"],
                   ta.Options(cache=False, jobs=1))
    full, bare = a.save(tmp_path / "full.json"), a.save(tmp_path / "bare.json", drawing=False)
    doc = orjson.loads(bare.read_bytes())
    assert doc["drawing"] is None and all(r["drawing"] is None for r in doc["ranks"])
    whole = orjson.loads(full.read_bytes())
    assert whole["drawing"]["host_logs"] and whole["ranks"][0]["drawing"]["timeline"]["devices"]
    whole["drawing"] = None
    for r in whole["ranks"]:
        r["drawing"] = None
    assert doc == whole  # only the drawing is left out
    loaded = ta.load(bare)
    assert loaded == a.without_drawing() and loaded.to_markdown() == a.to_markdown()
    html = loaded.to_html()
    assert 'class="tl-canvas"' in html and "hostchart" not in html  # the section stays, nothing to draw


def test_the_speaking_rank_is_the_one_whose_verdict_the_job_carries():
    a = ta.analyze([SAMPLES / "comm_rank0.json", SAMPLES / "comm_rank1.json"], ta.Options(cache=False, jobs=1))
    speaker = a.speaking_rank
    assert speaker is not None and a.diagnosis is not None
    assert speaker.diagnosis is not None and speaker.diagnosis.findings == a.diagnosis.findings
    assert speaker.diagnosis.primary == a.diagnosis.primary


@pytest.mark.parametrize("body", [
    '{"schema": "traceanalyzer/2", "ranks": [1]}',
    '{"schema": "traceanalyzer/2", "ranks": [{"devices": [3]}]}',
    '{"schema": "traceanalyzer/2", "diagnosis": {"ranks": 5}, "ranks": []}',
    '{"schema": "traceanalyzer/2", "host_logs": [7]}',
    '{"schema": "traceanalyzer/2", "ranks": [{"timeline": {"devices": [{"device": "cuda:0", "gaps": '
    '{"start_us": [1]}}]}, "devices": [{"device": "cuda:0", "gaps": {"count": "a"}}]}]}',
])
def test_a_schema2_report_of_another_shape_is_one_line_naming_the_file(body, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(body)
    res = CliRunner().invoke(main, ["diff", str(bad), str(bad), "-o", "-", "--format", "md"])
    assert res.exit_code == 2, res.output
    assert str(bad) in res.stderr and "traceanalyzer/2 report of an unexpected shape" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr


def test_every_field_of_a_figure_type_held_as_computed_has_one_json_key():
    for cls, keys in EDGE.items():
        read = [k.field for k in keys if not k.derived]
        assert sorted(read) == sorted(f.name for f in dataclasses.fields(cls)), cls
        assert len({k.key for k in keys}) == len(keys), cls
        assert all(k.key.endswith("_us") == k.ns for k in keys), cls  # a duration is written in us, named so
        assert all(hasattr(cls, k.field) for k in keys if k.derived), cls


def test_kernel_rows_are_held_in_ns_and_written_in_us_under_the_keys_of_schema3():
    row = KernelRow("gemm", 3, 1_000_001, False)
    data = to_data(row)
    assert list(data) == ["name", "count", "total_us", "mean_us", "communication"]
    assert data == {"name": "gemm", "count": 3, "total_us": 1000.001, "mean_us": 333.334, "communication": False}
    assert from_data(KernelRow, data) == row  # the mean follows from the total, so it is not read
    assert from_data(KernelRow, dict(data, total_us=1000.0012)).total_ns == 1_000_001  # whole ns
    with pytest.raises(ResultFormatError, match=r"top_kernels\[0\].total_us: expected a number"):
        from_data(KernelRow, dict(data, total_us="1"), "top_kernels[0]")


def test_gap_bins_are_held_in_ns_and_written_in_us_with_an_open_last_bin():
    bins = (GapBin(100_000, 1_000_000, 2, 450_500), GapBin(1_000_000_000, None, 0, 0))
    data = [to_data(b) for b in bins]
    assert data == [{"from_us": 100.0, "to_us": 1000.0, "count": 2, "total_us": 450.5},
                    {"from_us": 1_000_000.0, "to_us": None, "count": 0, "total_us": 0.0}]
    assert tuple(from_data(GapBin, d) for d in data) == bins


def test_copy_directions_are_held_in_ns_and_written_under_their_schema3_keys():
    row = CopyDirection("HtoD", 4, 2_500, 1_000_000, 3, 0.4, 1, 3)
    data = to_data(row)
    assert data == {"direction": "HtoD", "count": 4, "union_us": 2.5, "bytes": 1_000_000, "copies_with_size": 3,
                    "bandwidth_gbps": 0.4, "pageable": 1, "pinned": 3}
    assert from_data(CopyDirection, data) == row


def test_a_rank_s_communication_row_is_held_in_ns_and_a_report_saved_before_last_arrivals_loads():
    row = RankComm(3, "node-1", None, 60_000_000, 40_000_000, 39_999_999, 1, 30_000_000, 0, -15_000_500, None, 2)
    data = to_data(row)
    assert data == {"rank": 3, "host": "node-1", "step_time_us": None, "compute_us": 60_000.0, "comm_us": 40_000.0,
                    "exposed_comm_us": 39_999.999, "overlapped_comm_us": 0.001, "wait_in_collectives_us": 30_000.0,
                    "caused_wait_us": 0.0, "lateness_us": -15_000.5, "bus_bandwidth_gbps": None, "last_arrivals": 2}
    assert from_data(RankComm, data) == row
    del data["last_arrivals"]  # reports saved before it was recorded
    assert from_data(RankComm, data).last_arrivals == 0
    with pytest.raises(ResultFormatError, match="missing field 'lateness_us'"):
        from_data(RankComm, {k: v for k, v in data.items() if k != "lateness_us"})


@pytest.mark.parametrize("name", sorted(MADE_FROM_3))
def test_a_saved_schema3_report_writes_its_figures_held_in_ns_back_byte_for_byte(name):
    doc = orjson.loads((SCHEMA3 / f"{name}.json").read_bytes())
    saved = [(d["top_kernels"], d["kernel_table"], d["gaps"]["histogram"], d["memcpy"]["by_direction"])
             for r in doc["ranks"] for d in r["devices"]]
    loaded = ta.load(SCHEMA3 / f"{name}.json")
    rows = [(d.top_kernels, d.kernel_table, d.gaps.histogram, d.memcpy.by_direction) for r in loaded.ranks
            for d in r.devices]
    assert saved and orjson.dumps(to_data(rows)) == orjson.dumps(saved)
    assert orjson.dumps(to_data(loaded.job.ranks if loaded.job else None)) == orjson.dumps((doc["job"] or {}).get("ranks"))

"""Many ranks on one clock: matched collectives, waiting figures, stragglers, host clock offsets.

The synthetic job: 8 ranks, steps of 100 ms. Every rank computes 60 ms, then all-reduces; the
all-reduce ends with the step on every rank (a collective ends together). The slow rank
first waits 30 ms for its DataLoader, so it computes until 90 ms and starts its all-reduce 30 ms
after the others, who wait inside theirs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import corpus_path
from kineto_builder import KinetoTrace

import traceanalyzer as ta
from traceanalyzer.analyses.collectives import collective_table
from traceanalyzer.diagnosis.stragglers import PHASES
from traceanalyzer.formats import ReadOptions, read_file
from traceanalyzer.pipeline import Options
from traceanalyzer.result.types import to_data

MS = 1000  # builder times are microseconds
STEP_US = 100 * MS
AR_NAME = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
BASE_NS = 1_700_000_000_000_000_000  # an epoch clock


def rank_trace(rank: int, world: int, steps: int, slow: bool, clock_us: int = 0, host: str | None = None,
               nelems: int | None = None, jitter: bool = False) -> KinetoTrace:
    tr = KinetoTrace(rank=rank, base_ns=BASE_NS)
    tr.header["distributedInfo"]["world_size"] = world
    if host:
        tr.header["hostname"] = host
    for s in range(steps):
        t = clock_us + s * STEP_US
        tr.step(s, t, STEP_US)
        late = 30 * MS if slow else 0
        if slow:
            tr.dataloader(t, late)
        tr.launched(t + late + 100, 50, t + late, 60 * MS, name="gemm_kernel")
        extra = {} if nelems is None else {"Collective_name": "allreduce", "In msg nelems": nelems,
                                           "Out msg nelems": nelems, "dtype": "Float"}
        early = (rank * 3 + s) % 7 if jitter else 0  # ends of one collective differ by a few us across ranks
        tr.launched(t + late + 200, 50, t + late + 60 * MS, STEP_US - late - 60 * MS - early, name=AR_NAME, **extra)
    return tr


def write_job(tmp: Path, world: int = 8, steps: int = 6, slow: int | None = 5, offsets_us: dict[int, int] | None = None,
              hosts: dict[int, str] | None = None, nelems: int | None = None, jitter: bool = False) -> list[Path]:
    paths = []
    for r in range(world):
        tr = rank_trace(r, world, steps, r == slow, (offsets_us or {}).get(r, 0), (hosts or {}).get(r), nelems,
                        jitter)
        paths.append(tr.write(tmp / f"rank{r}.json"))
    return paths


def test_straggler_named_with_its_cause_and_exact_waits(tmp_path: Path) -> None:
    a = ta.analyze(write_job(tmp_path))
    job = a.job
    assert job is not None
    assert job.collectives_matched == 6
    rows = {r["rank"]: r for r in to_data(job.ranks)}  # as saved (us)
    assert rows[5]["lateness_us"] == 30_000.0  # start 90 ms vs the median rank's 60 ms, once per step
    assert rows[5]["caused_wait_us"] == 7 * 30_000.0  # the 7 others wait 30 ms each, per step
    assert rows[5]["wait_in_collectives_us"] == 0.0
    assert rows[5]["last_arrivals"] == 6
    for r in (0, 1, 2, 3, 4, 6, 7):
        assert rows[r]["wait_in_collectives_us"] == 30_000.0
        assert rows[r]["caused_wait_us"] == 0.0
        assert rows[r]["lateness_us"] == 0.0
        assert rows[r]["comm_us"] == 40_000.0 and rows[r]["exposed_comm_us"] == 40_000.0
        assert rows[r]["compute_us"] == 60_000.0
        assert rows[r]["step_time_us"] == 100_000.0
    assert rows[5]["comm_us"] == 10_000.0
    st = a.diagnosis.stragglers
    assert [s.rank for s in st] == [5]
    s = st[0]
    assert s.top_cause == "dataloader" and s.top_cause_per_step_us == 30_000.0
    assert s.caused_wait_per_step_us == 210_000.0 and s.collectives == 6
    assert s.text.startswith("rank 5 is late by 30.0 ms per step; its DataLoader wait is 30.0 ms per step")
    (clock,) = job.clocks
    assert clock.method == "reference" and clock.ranks == tuple(range(8)) and clock.residual_us == 0.0
    assert [r.host for r in a.ranks] == [None] * 8


def test_no_straggler_without_the_slow_rank(tmp_path: Path) -> None:
    a = ta.analyze(write_job(tmp_path, slow=None))
    assert a.job is not None and a.job.collectives_matched == 6
    assert a.diagnosis.stragglers == ()
    assert all(r.wait_ns == 0 and r.caused_wait_ns == 0 and r.lateness_ns == 0 for r in a.job.ranks)
    assert "No straggler" in a.to_markdown()


def test_two_hosts_with_a_clock_offset_are_aligned(tmp_path: Path) -> None:
    offset_us = 3_217_000  # host B's clock runs 3.217 s ahead
    hosts = {r: ("node-a" if r < 4 else "node-b") for r in range(8)}
    offsets = {r: (offset_us if r >= 4 else 0) for r in range(8)}
    # Long enough (40 steps, 4 s) that the two hosts' captures overlap in time on their own clocks.
    a = ta.analyze(write_job(tmp_path, steps=40, offsets_us=offsets, hosts=hosts, jitter=True))
    job = a.job
    assert job is not None and job.collectives_matched == 40
    clocks = {c.host: c for c in job.clocks}
    assert clocks["node-a"].method == "reference" and clocks["node-a"].offset_us == 0.0
    assert clocks["node-b"].method == "collectives" and clocks["node-b"].ranks == (4, 5, 6, 7)
    assert clocks["node-b"].offset_us == pytest.approx(-offset_us, abs=50)
    assert clocks["node-b"].residual_us is not None and clocks["node-b"].residual_us <= 50
    assert [s.rank for s in a.diagnosis.stragglers] == [5]
    assert a.diagnosis.stragglers[0].lateness_per_step_us == pytest.approx(30_000, abs=50)
    assert [r.host for r in a.ranks] == [hosts[r] for r in range(8)]
    # the timeline draws every rank on the job clock: the ranks started together, so their windows
    # start within the alignment error of each other, though host B's own clock is 3.217 s ahead
    assert len(job.timeline_shift_us) == 8 and max(job.timeline_shift_us) <= 50 and min(job.timeline_shift_us) == 0
    assert abs(a.ranks[4].window_start_ns - a.ranks[0].window_start_ns) > 3e9


def test_unknown_hosts_on_different_clocks_are_split(tmp_path: Path) -> None:
    offsets = {r: (2_000_000 if r >= 4 else 0) for r in range(8)}
    a = ta.analyze(write_job(tmp_path, steps=30, offsets_us=offsets, slow=None))
    job = a.job
    assert job is not None and job.collectives_matched == 30
    assert len(job.clocks) == 8
    assert {c.offset_us for c in job.clocks if c.ranks[0] >= 4} == {-2_000_000.0}
    assert any("taken to share a clock" in w for w in a.warnings)
    assert a.diagnosis.stragglers == ()


def test_message_sizes_give_bus_bandwidth(tmp_path: Path) -> None:
    a = ta.analyze(write_job(tmp_path, nelems=1_000_000))
    rows = {r["rank"]: r for r in to_data(a.job.ranks)}  # as saved (us)
    # 4 MB x 2(n-1)/n = 7 MB over the 10 ms from the last arrival to the end: 0.7 GB/s on every rank.
    assert rows[0]["bus_bandwidth_gbps"] == pytest.approx(0.7)
    assert rows[5]["bus_bandwidth_gbps"] == pytest.approx(0.7)


def test_collective_table_of_one_rank(tmp_path: Path) -> None:
    (path,) = write_job(tmp_path, world=1, slow=None, nelems=10)[:1]
    tl = read_file(path, ReadOptions())
    t = collective_table(tl, 0)
    assert list(t["step"]) == list(range(6)) and list(t["seq"]) == [0] * 6
    assert list(t["bytes"]) == [40] * 6
    assert (t["end_ns"] - t["start_ns"]).tolist() == [40_000_000] * 6


def test_handler_file_name_gives_the_host(tmp_path: Path) -> None:
    p = rank_trace(0, 2, 2, False).write(tmp_path / "gpu-node-7_31337.1700000000123.pt.trace.json")
    tl = read_file(p, ReadOptions())
    assert tl.ranks[0].host == "gpu-node-7"
    q = rank_trace(1, 2, 2, False).write(tmp_path / "worker_3_1.pt.trace.json")
    assert read_file(q, ReadOptions()).ranks[0].host is None


def test_one_rank_has_no_job(tmp_path: Path) -> None:
    a = ta.analyze(write_job(tmp_path, world=1, slow=None)[0])
    assert a.job is None and a.diagnosis.stragglers == ()


def test_real_two_rank_pair() -> None:
    """A real pair of ranks (sampled traces): collectives are matched and those kept end together."""
    paths = [corpus_path() / "hta_sampled_2rank" / f"sampled_rank-{r}.json.gz" for r in (0, 1)]
    a = ta.analyze(paths, Options())
    job = a.job
    assert job is not None
    assert job.collectives_matched >= 1
    (clock,) = job.clocks
    assert clock.method == "reference" and clock.ranks == (0, 1)
    assert clock.residual_us is not None and clock.residual_us < 1000
    assert {r.rank for r in job.ranks} == {0, 1}
    assert all(r.comm_ns > 0 for r in job.ranks)


def test_message_bytes_on_the_loose_decoding_path(tmp_path: Path) -> None:
    from traceanalyzer.formats.kineto import read_path

    path = rank_trace(0, 1, 3, False, nelems=10).write(tmp_path / "r.json")
    for typed in (True, False):
        tl = read_path(path, ReadOptions(), typed=typed)
        assert list(collective_table(tl, 0)["bytes"]) == [40] * 3


def test_job_figures_survive_save_and_load(tmp_path: Path) -> None:
    a = ta.analyze(write_job(tmp_path))
    saved = a.save(tmp_path / "report.json")
    b = ta.load(saved)
    assert b.job == a.job and b.diagnosis.stragglers == a.diagnosis.stragglers


def _phase_rank(rank: int, phase: str | None, steps: int = 6) -> KinetoTrace:
    """A rank of a 2-rank job: each 100 ms step computes 60 ms, then all-reduces until the step's end. The late
    rank (`phase`) first spends 30 ms more: in its DataLoader ("data"), computing ("compute": a 90 ms kernel), or
    in host work with the GPU idle ("host": a `postprocess` range before it launches its kernel)."""
    tr = KinetoTrace(rank=rank, base_ns=BASE_NS)
    for s in range(steps):
        t = s * STEP_US
        tr.step(s, t, STEP_US)
        late = 30 * MS if phase else 0
        if phase == "data":
            tr.dataloader(t, late)
        if phase == "host":
            tr.host("postprocess", t, late, cat="user_annotation")
        start = t + (late if phase in ("data", "host") else 0)  # launched when the data or host work is done
        compute = 60 * MS + (late if phase == "compute" else 0)
        tr.launched(start + 1, 50, start + 100, compute - 100 - (start - t), name="gemm_kernel")
        tr.launched(t + late + 200, 50, t + late + 60 * MS, STEP_US - late - 60 * MS, name=AR_NAME)
    return tr


@pytest.mark.parametrize("phase", ["compute", "data", "host"])
def test_the_stragglers_phase_before_the_collective(tmp_path: Path, phase: str) -> None:
    """Rank 1 arrives 30 ms late at every all-reduce; its step figures against rank 0's say why: 30 ms more
    per step computing, or waiting for data (its 30 ms wait and the 100 us until its kernel starts, which rank 0
    spends in launch latency), or in host work with the GPU idle (30.1 ms against rank 0's 100 us)."""
    paths = [_phase_rank(r, phase if r == 1 else None).write(tmp_path / f"rank{r}.json") for r in (0, 1)]
    a = ta.analyze(paths)
    (s,) = a.diagnosis.stragglers
    assert s.rank == 1
    more = {"compute": "30.0 ms", "data": "30.1 ms", "host": "30.0 ms"}[phase]
    assert f"before its collectives it spends {more} more per step than the other ranks {PHASES[phase]}" in s.text

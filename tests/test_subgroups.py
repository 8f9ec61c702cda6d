"""Collectives of process subgroups: 8 ranks, tensor parallel 2 x data parallel 4.

Each 100 ms step, every rank runs three rounds of (15 ms of compute, a tensor-parallel all-reduce
within its pair {0,1}, {2,3}, {4,5}, {6,7}), then 10 ms of compute and one data-parallel all-reduce
within {0,2,4,6} or {1,3,5,7}. A collective starts when its rank is ready and ends 1 ms (2 ms for
the data-parallel one) after its last member is ready. The slow rank 5 first waits 30 ms for its
DataLoader: rank 4 waits 30 ms for it in their first tensor-parallel all-reduce, so both reach the
data-parallel all-reduces 30 ms after the others, where ranks 1, 3, 7 wait for rank 5 and 0, 2, 6
for rank 4 (which was late only because it waited for rank 5).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from kineto_builder import KinetoTrace
from test_stragglers import AR_NAME, BASE_NS, STEP_US, write_job

import traceanalyzer as ta
from traceanalyzer.analyses import figures_of
from traceanalyzer.analyses.collectives import collective_table
from traceanalyzer.analyses.collectives_job import job_figures, rank_job_facts
from traceanalyzer.formats import ReadOptions, read_file
from traceanalyzer.result.types import to_data

MS = 1000  # builder times are microseconds
WORLD, STEPS, TP_ROUNDS = 8, 6, 3
TP_GROUPS = [[0, 1], [2, 3], [4, 5], [6, 7]]
DP_GROUPS = [[0, 2, 4, 6], [1, 3, 5, 7]]


def _group_args(members: list[int], pg: str, desc: str) -> dict[str, Any]:
    return {"Collective name": "allreduce", "Process Group Name": pg, "Process Group Description": desc,
            "Process Group Ranks": str(members), "Group size": len(members)}


def _compute(traces: list[KinetoTrace], ready: list[int], launch: list[int], dur: int) -> None:
    """Every rank computes `dur` from when it is ready."""
    for r, tr in enumerate(traces):
        tr.launched(launch[r], 5, ready[r], dur, name="gemm_kernel")
        launch[r] += 10
        ready[r] += dur


def _collective(traces: list[KinetoTrace], ready: list[int], launch: list[int], sets: list[list[int]], pg: str,
                desc: str, transfer: int, groups: bool) -> None:
    """One all-reduce per group of `sets`: each member from when it is ready to `transfer` after the last."""
    for g, members in enumerate(sets):
        end = max(ready[m] for m in members) + transfer
        extra = _group_args(members, f"{pg}{g}", desc) if groups else {}
        for m in members:
            traces[m].launched(launch[m], 5, ready[m], end - ready[m], name=AR_NAME, **extra)
            launch[m] += 10
            ready[m] = end


def write_subgroup_job(tmp: Path, slow: int | None = 5, groups: bool = True) -> list[Path]:
    """The job of the module text, one trace per rank (`groups=False`: without the group args)."""
    traces = []
    for r in range(WORLD):
        tr = KinetoTrace(rank=r, base_ns=BASE_NS)
        tr.header["distributedInfo"]["world_size"] = WORLD
        traces.append(tr)
    for s in range(STEPS):
        t = s * STEP_US
        ready = [t + (30 * MS if r == slow else 0) for r in range(WORLD)]
        # the slow rank launches its work once it has its batch (queued work does not wait 30 ms on an idle GPU)
        launch = [t + 100 + (30 * MS - 200 if r == slow else 0) for r in range(WORLD)]
        for r, tr in enumerate(traces):
            tr.step(s, t, STEP_US)
            if r == slow:
                tr.dataloader(t, 30 * MS - 200)

        for _ in range(TP_ROUNDS):
            _compute(traces, ready, launch, 15 * MS)
            _collective(traces, ready, launch, TP_GROUPS, "tp", "tensor parallel", 1 * MS, groups)
        _compute(traces, ready, launch, 10 * MS)
        _collective(traces, ready, launch, DP_GROUPS, "dp", "data parallel", 2 * MS, groups)
    return [tr.write(tmp / f"rank{r}.json") for r, tr in enumerate(traces)]


def test_group_column_from_the_process_group_args(tmp_path: Path) -> None:
    paths = write_subgroup_job(tmp_path)
    t = collective_table(read_file(paths[5], ReadOptions()), 0)
    assert list(t["group"][:4]) == ["4,5", "4,5", "4,5", "1,3,5,7"]
    assert list(t["seq"][:4]) == [0, 1, 2, 0]  # numbered per (group, name, step)
    assert set(read_file(paths[5], ReadOptions()).events["comm_group"].astype(str)) == {"", "4,5", "1,3,5,7"}


def test_straggler_in_subgroups_with_exact_waits(tmp_path: Path) -> None:
    a = ta.analyze(write_subgroup_job(tmp_path))
    job = a.job
    assert job is not None
    assert job.collectives_matched == STEPS * (4 * TP_ROUNDS + 2)
    rows = {r["rank"]: r for r in to_data(job.ranks)}  # as saved (us)
    # rank 5: 30 ms held rank 4 in the first TP all-reduce + 3 x 30 ms held 1, 3, 7 in the DP one
    assert rows[5]["caused_wait_us"] == 120_000.0
    assert rows[5]["wait_in_collectives_us"] == 0.0
    # lateness vs the median member: +15 ms in its pair (median of 2), +30 ms in {1,3,5,7}
    assert rows[5]["lateness_us"] == 45_000.0
    assert rows[5]["last_arrivals"] == 2 * STEPS
    # rank 4 waits 30 ms for rank 5 in their TP all-reduce; it is then last in {0,2,4,6}, but that
    # lateness is the wait it inherited, not its own
    assert rows[4]["wait_in_collectives_us"] == 30_000.0
    assert rows[4]["caused_wait_us"] == 90_000.0
    assert rows[4]["lateness_us"] == -15_000.0
    for r in (1, 3, 7, 0, 2, 6):  # DP members wait 30 ms in their DP all-reduce (for 5 or for 4)
        assert rows[r]["wait_in_collectives_us"] == 30_000.0
        assert rows[r]["caused_wait_us"] == 0.0 and rows[r]["lateness_us"] == 0.0
    st = a.diagnosis.stragglers
    assert [s.rank for s in st] == [5]
    s = st[0]
    # its GPU idles 30 ms in step 0 and 40 ms in the later ones (from its all-reduce's end at 92 ms
    # to its next kernel at 130 ms and 2 ms at the step's end), all while waiting for its DataLoader
    assert s.top_cause == "dataloader" and s.top_cause_per_step_us == 38_333.333
    assert s.caused_wait_per_step_us == 120_000.0 and s.collectives == 2 * STEPS
    # its phase before the collectives: the median step's 40 ms of DataLoader idle, none on the other ranks
    assert s.text == ("rank 5 is late by 45.0 ms per step; its DataLoader wait is 38.3 ms per step; "
                      "before its collectives it spends 40.0 ms more per step than the other ranks waiting for "
                      "data (DataLoader); each of the other 7 ranks waits 17.1 ms per step for it on average")
    (clock,) = job.clocks
    assert clock.method == "reference" and clock.residual_us == 0.0


def test_tensor_parallel_collectives_alone(tmp_path: Path) -> None:
    """Only the TP all-reduces: rank 4 waits for rank 5; the other pairs wait for nobody."""
    paths = write_subgroup_job(tmp_path)
    a = ta.analyze(paths)
    tables, facts = [], []
    for i, p in enumerate(paths):
        tl = read_file(p, ReadOptions())
        t = collective_table(tl, 0)
        tables.append(t[t["group"].str.count(",") == 1])
        assert len(tables[-1]) == STEPS * TP_ROUNDS and tables[-1]["rank"].eq(i).all()
        facts.append(rank_job_facts(figures_of(tl).ranks[0]))
    warmups = [r.diagnosis.warmup_steps if r.diagnosis else () for r in a.ranks]
    rows = {r.rank: r for r in job_figures(tables, facts, [r.rank for r in a.ranks], warmups).ranks}
    assert rows[4].wait_ns == 30_000_000 and rows[5].caused_wait_ns == 30_000_000
    for r in (0, 1, 2, 3, 6, 7):
        assert rows[r].wait_ns == 0 and rows[r].caused_wait_ns == 0


def test_no_straggler_in_subgroups_without_the_slow_rank(tmp_path: Path) -> None:
    a = ta.analyze(write_subgroup_job(tmp_path, slow=None))
    assert a.job is not None and a.job.collectives_matched == STEPS * (4 * TP_ROUNDS + 2)
    assert a.diagnosis.stragglers == ()
    assert all(r.wait_ns == 0 and r.caused_wait_ns == 0 and r.lateness_ns == 0 for r in a.job.ranks)


@pytest.mark.slow
def test_without_group_args_every_rank_is_matched_as_before(tmp_path: Path) -> None:
    # The same job without the args: the four all-reduces of a step are matched by order across all
    # 8 ranks (the old matching), TP with DP ones alike: pairs that do not end together are dropped.
    paths = write_subgroup_job(tmp_path, groups=False)
    t = collective_table(read_file(paths[5], ReadOptions()), 0)
    assert set(t["group"]) == {""} and list(t["seq"][:4]) == [0, 1, 2, 3]
    a = ta.analyze(paths)
    assert a.job is not None and a.job.collectives_matched == 18
    # the all-rank job of test_stragglers: the same figures as before groups were read
    (tmp_path / "all").mkdir()
    b = ta.analyze(write_job(tmp_path / "all", steps=6))
    assert b.job is not None and b.job.collectives_matched == 6
    rows = {r["rank"]: r for r in to_data(b.job.ranks)}  # as saved (us)
    assert rows[5]["caused_wait_us"] == 210_000.0 and rows[5]["lateness_us"] == 30_000.0
    assert all(rows[r]["wait_in_collectives_us"] == 30_000.0 for r in (0, 1, 2, 3, 4, 6, 7))
    events = read_file(tmp_path / "all" / "rank0.json", ReadOptions()).events
    assert set(events["comm_group"].astype(str)) == {""}
    assert json.loads(b.to_json())["job"]["collectives_matched"] == 6


def test_group_identity_forms() -> None:
    from traceanalyzer.formats.kineto import group_identity

    assert group_identity("[0, 1, 2, 3]", "0") == "0,1,2,3"
    assert group_identity([4, 5], "3") == "4,5"
    assert group_identity(None, "7f3a1c") == "pg:7f3a1c"
    assert group_identity("[0, 1, ...]", 2) == "pg:2"  # ranks not all listed: by the group's name
    assert group_identity(None, None) == "" and group_identity("[]", "") == ""
    assert isinstance(pd.Series([group_identity([0], None)]).iloc[0], str)


def test_decoded_table_cache_keeps_the_group(tmp_path: Path) -> None:
    from traceanalyzer import cache

    path = write_subgroup_job(tmp_path)[5]
    tl = read_file(path, ReadOptions())
    ident = cache.identity(path, 10**9)
    cache.store(tmp_path / "entry.npz", ident, tl)
    back = cache.load(tmp_path / "entry.npz", ident)
    assert back is not None
    assert back.events["comm_group"].astype(str).tolist() == tl.events["comm_group"].astype(str).tolist()
    assert back.events["comm_group"].astype(str).value_counts().to_dict() == {"": 90, "4,5": 18, "1,3,5,7": 6}

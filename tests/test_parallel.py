"""Ranks read and analysed in parallel (--jobs, --scheduler) and the cache of decoded traces: every
input goes through the one per-rank map and `combine`, so the bytes are the same whatever runs the
per-rank tasks, with or without logs, and for a Timeline handed in."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import corpus_path
from kineto_builder import KinetoTrace
from timelines import load_set

import traceanalyzer as ta
from traceanalyzer import cache as C
from traceanalyzer import formats
from traceanalyzer.analyses import tracks as TR
from traceanalyzer.commands import main
from traceanalyzer.errors import InputError, UsageError
from traceanalyzer.formats import ReadOptions, input_sets
from traceanalyzer.pipeline import Options, analyze
from traceanalyzer.run import executors as X

# Worker processes take about a second each to start: the whole file runs with the full suite.
pytestmark = pytest.mark.slow


# --- a multi-rank job built in code ------------------------------------------------------------------
def _rank_trace(rank: int | None, world: int, steps: int = 4, kernels: int = 300, stall_us: int = 0) -> KinetoTrace:
    t = KinetoTrace(rank=rank, base_ns=1_700_000_000_000_000_000)
    if rank is not None:
        t.header["distributedInfo"]["world_size"] = world
    step_us = kernels * 30 + 2_000 + stall_us
    for s in range(steps):
        t0 = 1_000 + s * step_us
        t.step(s, t0, step_us - 10)
        t.dataloader(t0, 500 + stall_us)
        for k in range(kernels):  # many short kernels, gaps of varying length: more blocks than the budget
            ts = t0 + 600 + stall_us + k * 30
            t.launched(ts - 5, 3, ts, 10 + (k * 7 + rank_or(rank)) % 13, name=f"k{k % 5}")
        t.gpu("ncclDevKernel_AllReduce_Sum_f32_RING_LL", t0 + step_us - 300, 200, Collective_name="allreduce")
    return t


def rank_or(rank: int | None) -> int:
    return 0 if rank is None else rank


def _job(folder: Path, ranks: int = 4, stall_rank: int | None = 2, none_rank: int | None = None) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for r in range(ranks):
        trace = _rank_trace(None if r == none_rank else r, ranks, stall_us=5_000 if r == stall_rank else 0)
        paths.append(trace.write(folder / f"rank{r}.json"))
    return paths


def _as_timeline(paths: list[Path], options: Options) -> bytes:
    """The job read into one Timeline and handed in, as a notebook does: split by rank, then the same
    map and combine."""
    read = ReadOptions(max_input_bytes=options.max_input_bytes)
    tl = load_set(input_sets(list(paths), read)[0], read)
    return analyze(tl, options).to_json()


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> list[Path]:
    return _job(tmp_path_factory.mktemp("job"), none_rank=3)


def test_jobs_1_and_2_combine_to_the_same_bytes(job):
    one = ta.analyze(job, Options(jobs=1)).to_json()
    two = ta.analyze(job, Options(jobs=2)).to_json()
    assert one == two
    assert _as_timeline(job, Options()) == one  # a Timeline handed in: split by rank, mapped, combined alike
    a = ta.analyze(job, Options(jobs=2))
    # combine makes the job's figures, verdict and drawn tracks, not those of one rank:
    assert a.summary.ranks == 4 and a.summary.devices == 4
    assert [r.rank for r in a.ranks] == [0, 1, 2, 3]  # the rank without distributedInfo numbered last
    assert a.diagnosis is not None and a.diagnosis.headline.startswith("Rank ")
    assert a.job is not None and len(a.job.ranks) == 4  # job figures from the ranks' collective tables
    read = ReadOptions()
    limit = TR.blocks_per_track(TR.count_tracks(load_set(input_sets(list(job), read)[0], read)))
    assert a.ranks[0].drawing.timeline["max_blocks"] == limit < TR.MAX_BLOCKS_PER_TRACK
    busy = a.ranks[0].drawing.timeline["devices"][0]["busy"]
    assert busy["merged"] and len(busy["start_us"]) == limit  # cut to the job's budget afterwards


def test_options_that_change_figures_reach_the_workers(job):
    o = Options(jobs=2, min_gap_ns=0, include_warmup=True, diagnose=False)
    assert ta.analyze(job, o).to_json() == ta.analyze(job, replace(o, jobs=1)).to_json()
    assert ta.analyze(job, o).options.min_gap_us == 0.0
    assert ta.analyze(job, o).diagnosis is None


def test_progress_counts_ranks(job):
    seen: list[str] = []
    ta.analyze(job, Options(jobs=2, stage=seen.append))
    assert "ranks read and analysed: 4 of 4" in seen
    assert seen[-1] == "analysing"


def test_job_checks_run_on_per_rank_results(tmp_path):
    a = _rank_trace(0, 2).write(tmp_path / "a.json")
    b = _rank_trace(0, 2).write(tmp_path / "b.json")  # rank 0 twice: not one job
    for jobs in (1, 2):
        with pytest.raises(InputError, match="are both rank 0"):
            ta.analyze([a, b], Options(jobs=jobs))
    forced = ta.analyze([a, b], Options(jobs=2, force_job=True))
    assert forced.to_json() == ta.analyze([a, b], Options(jobs=1, force_job=True)).to_json()
    assert any("--force-job" in w for w in forced.warnings)
    assert any("renumbered" in w for w in forced.warnings)
    assert [r.rank for r in forced.ranks] == [0, 1]


def test_recoarsen_cuts_as_coarsen_would():
    rng = np.random.default_rng(7)
    for trial in range(30):
        n = int(rng.integers(1, 6000))
        starts = np.sort(rng.integers(0, 10_000_000, n)).astype(np.int64)
        ends = starts + rng.integers(0, 3000, n)
        if trial % 3 == 0:  # ties in separations and durations
            starts, ends = (starts // 1000) * 1000, (starts // 1000) * 1000 + 500
        names = np.array([f"n{int(x)}" for x in rng.integers(0, 50, n)], dtype=object)
        order = rng.permutation(n)  # events unsorted, as in a frame
        s, e, nm = starts[order], ends[order], names[order]
        fine = TR.coarsen(s, e, nm, 0, 10_010_000, TR.MAX_BLOCKS_PER_TRACK)
        for m in (1, 2, 200, 714, 1999):
            want, got = TR.coarsen(s, e, nm, 0, 10_010_000, m), TR.recoarsen(fine, m)
            for field in ("start_ns", "end_ns", "covered_ns", "count", "name_idx"):
                assert np.array_equal(getattr(want, field), getattr(got, field)), (trial, m, field)
            assert want.names == got.names and want.intervals == got.intervals


def test_number_ranks_as_before():
    assert formats.number_ranks([None]) == ([None], [])
    numbers, warnings = formats.number_ranks([3, None, 3, 0])
    assert numbers == [3, 1, 2, 0] and warnings == ["rank 3 appears in more than one trace; renumbered in name order"]


# --- errors in a worker ------------------------------------------------------------------------------
def test_worker_error_is_the_one_line_naming_the_file(tmp_path):
    good = _rank_trace(0, 2).write(tmp_path / "rank0.json")
    bad = tmp_path / "rank1.json"
    bad.write_bytes(b"\x00\x01\x02 not a trace")
    messages = []
    for jobs in (1, 2):
        with pytest.raises(InputError) as err:
            ta.analyze([good, bad], Options(jobs=jobs))
        messages.append(str(err.value))
        assert err.value.path == str(bad)
    assert messages[0] == messages[1] and messages[0].startswith(f"{bad}: ")
    result = CliRunner().invoke(main, ["report", str(good), str(bad), "--jobs", "2", "-o", str(tmp_path / "r.json")])
    assert result.exit_code == 2
    assert f"{bad}: " in result.output and "Traceback" not in result.output


def test_unreadable_file_in_a_folder_is_skipped_alike(tmp_path):
    folder = tmp_path / "ranks"
    _job(folder, ranks=2, stall_rank=None)
    (folder / "zz_broken.json").write_bytes(b"\x00\x01 not json")
    one = ta.analyze(folder, Options(jobs=1)).to_json()
    assert ta.analyze(folder, Options(jobs=2)).to_json() == one
    assert b"skipped " in one


def test_workers_capped_and_checked():
    assert X.workers(8, 3) == 3
    assert X.workers(1, 10) == 1
    assert X.workers(None, 1) == 1
    with pytest.raises(UsageError):
        X.workers(0, 4)


def test_map_tasks_keeps_order_and_reports_progress():
    done: list[tuple[int, int]] = []
    assert X.map_tasks(abs, [-3, -1, -2], jobs=2, on_done=lambda n, t: done.append((n, t))) == [3, 1, 2]
    assert done[-1] == (3, 3)


def test_unreachable_scheduler_is_a_usage_error(monkeypatch, tmp_path):
    pytest.importorskip("distributed")
    monkeypatch.setattr(X, "DASK_CONNECT_TIMEOUT_S", 1)
    with pytest.raises(UsageError, match="cannot reach the Dask scheduler"):
        X.map_tasks(abs, [1], scheduler="tcp://127.0.0.1:9")


# --- a Dask cluster, and a real multi-rank job -------------------------------------------------------
@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c:
        yield c


@pytest.mark.slow
def test_dask_local_cluster_gives_the_same_bytes(job, cluster):
    local = ta.analyze(job, Options(jobs=1)).to_json()
    assert ta.analyze(job, Options(scheduler=cluster.scheduler_address)).to_json() == local


@pytest.mark.slow
def test_dask_worker_error_names_the_file(tmp_path, cluster):
    good = _rank_trace(0, 2).write(tmp_path / "rank0.json")
    bad = tmp_path / "rank1.json"
    bad.write_bytes(b"\x00\x01\x02 not a trace")
    with pytest.raises(InputError) as local:
        ta.analyze([good, bad], Options(jobs=1))
    with pytest.raises(InputError) as remote:
        ta.analyze([good, bad], Options(scheduler=cluster.scheduler_address))
    assert str(remote.value) == str(local.value)


def _corpus_job() -> list[Path]:
    """The corpus's multi-rank job: files of one id whose ranks column says more than one."""
    import csv

    corpus = corpus_path()
    with open(corpus / "MANIFEST.tsv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh, delimiter="\t") if r["format"].startswith("kineto")]
    for row in rows:
        folder = corpus / row["id"]
        files = sorted(p for p in folder.iterdir() if p.name.endswith((".json", ".json.gz")))
        if len(files) > 1 and "rank" in row["ranks"]:
            return files
    pytest.skip("no multi-rank Kineto job in the corpus")


def test_corpus_job_jobs_1_and_2_agree():
    files = _corpus_job()
    one = ta.analyze(files, Options(jobs=1)).to_json()
    assert ta.analyze(files, Options(jobs=2)).to_json() == one
    assert ta.analyze(files, Options(jobs=2)).summary.ranks == len(files)


@pytest.mark.slow
def test_corpus_job_on_dask_agrees(cluster):
    files = _corpus_job()
    local = ta.analyze(files, Options(jobs=1)).to_json()
    assert ta.analyze(files, Options(scheduler=cluster.scheduler_address)).to_json() == local


def test_every_input_takes_the_one_map_and_combine(job, cluster, monkeypatch):
    """--jobs 1, --jobs 2, a Dask cluster and a job with an nvidia-smi log and a host log: each maps
    every rank file with the one per-rank function and builds its Analysis in one `combine`."""
    from conftest import SAMPLES

    from traceanalyzer import pipeline
    from traceanalyzer.result import build
    from traceanalyzer.run import combine as CB
    from traceanalyzer.run import map as M

    mapped: list[tuple[object, int, bool]] = []
    combined: list[int] = []
    real_map, real_combine = X.map_tasks, CB.combine

    def map_tasks(fn, tasks, **kw):  # type: ignore[no-untyped-def]
        mapped.append((fn, len(tasks), all(t.options.log_extras for t in tasks)))
        return real_map(fn, tasks, **kw)

    def combine(outputs, inputs):  # type: ignore[no-untyped-def]
        combined.append(sum(len(o.ranks) for o in outputs))
        return real_combine(outputs, inputs)

    monkeypatch.setattr(X, "map_tasks", map_tasks)
    monkeypatch.setattr(CB, "combine", combine)
    logs = Options(jobs=1, counter_logs=(SAMPLES / "dmon" / "idle_runs.log",),
                   host_logs=(SAMPLES / "glances" / "cpu_aug.csv",))
    for options in (Options(jobs=1), Options(jobs=2), Options(scheduler=cluster.scheduler_address), logs):
        a = ta.analyze(job, options)
        assert a.summary.ranks == 4
    assert [(fn, n) for fn, n, _ in mapped] == [(M.analyze_file, 4)] * 4
    assert [extras for _, _, extras in mapped] == [False, False, False, True]  # logs: ranks carry busy + waits
    assert combined == [4] * 4
    assert a.counter_logs and a.host_logs  # the logs were combined with the mapped ranks
    assert not hasattr(pipeline, "analyze_timeline") and not hasattr(build, "assemble")  # no whole-Timeline path


# --- the cache of decoded traces ---------------------------------------------------------------------
@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("TRACEANALYZER_CACHE_DIR", str(folder))
    monkeypatch.setattr(C, "CACHE_MIN_BYTES", 0)
    return folder


@pytest.fixture
def reads(monkeypatch) -> list[Path]:
    """Every real decode of a file (cache misses)."""
    seen: list[Path] = []
    real = formats.registry._read_file

    def counting(path, options):  # type: ignore[no-untyped-def]
        seen.append(path)
        return real(path, options)

    monkeypatch.setattr(formats.registry, "_read_file", counting)
    return seen


def test_cache_hit_gives_the_same_analysis(tmp_path, cache_dir, reads):
    path = _rank_trace(0, 1).write(tmp_path / "t.json")
    first = ta.analyze(path, Options(jobs=1)).to_json()
    second = ta.analyze(path, Options(jobs=1)).to_json()
    assert first == second == ta.analyze(path, Options(jobs=1, cache=False)).to_json()
    assert reads == [path, path]  # the second analysis did not decode; --no-cache always does
    assert len(list(cache_dir.glob("*.npz"))) == 1
    assert C.cache_dir() == cache_dir
    fresh = formats.read_file(path, ReadOptions())
    cached = formats.read_file(path, ReadOptions(cache=True))
    pd.testing.assert_frame_equal(cached.events, fresh.events)
    pd.testing.assert_frame_equal(cached.counters, fresh.counters)
    assert (cached.sources, cached.ranks, cached.devices, cached.warnings) == \
        (fresh.sources, fresh.ranks, fresh.devices, fresh.warnings)


def test_cache_not_used_for_small_inputs_or_when_off(tmp_path, monkeypatch, cache_dir, reads):
    path = _rank_trace(0, 1).write(tmp_path / "t.json")
    monkeypatch.setattr(C, "CACHE_MIN_BYTES", path.stat().st_size + 1)
    ta.analyze(path, Options(jobs=1))
    assert not cache_dir.exists()
    monkeypatch.setattr(C, "CACHE_MIN_BYTES", 0)
    out = tmp_path / "r.json"
    result = CliRunner().invoke(main, ["report", str(path), "--no-cache", "-q", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert not cache_dir.exists()


def test_cache_invalidated_when_the_file_changes(tmp_path, cache_dir, reads):
    path = _rank_trace(0, 1).write(tmp_path / "t.json")
    ta.analyze(path, Options(jobs=1))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000))  # touched: same size, new mtime
    ta.analyze(path, Options(jobs=1))
    _rank_trace(0, 1, steps=5).write(path)  # rewritten
    after = ta.analyze(path, Options(jobs=1))
    assert reads == [path, path, path]
    assert after.ranks[0].steps == 5


@pytest.mark.parametrize("damage", ["garbage", "truncated", "foreign"])
def test_damaged_or_foreign_entry_is_ignored_and_replaced(tmp_path, cache_dir, reads, damage):
    path = _rank_trace(0, 1).write(tmp_path / "t.json")
    good = ta.analyze(path, Options(jobs=1)).to_json()
    (entry,) = cache_dir.glob("*.npz")
    if damage == "garbage":
        entry.write_bytes(b"PK\x03\x04 not a zip at all")
    elif damage == "truncated":
        entry.write_bytes(entry.read_bytes()[: entry.stat().st_size // 2])
    else:  # a well-formed entry written for another file, under this file's name
        other = _rank_trace(1, 2).write(tmp_path / "other.json")
        ident = C.identity(other, Options().max_input_bytes)
        C.store(entry, ident, formats.read_file(other, ReadOptions()))
    assert ta.analyze(path, Options(jobs=1)).to_json() == good
    assert reads.count(path) == 2  # the bad entry was not trusted ...
    ta.analyze(path, Options(jobs=1))
    assert reads.count(path) == 2  # ... and was replaced by a good one


def test_cache_entries_hold_no_pickles(tmp_path, cache_dir):
    path = _rank_trace(0, 1).write(tmp_path / "t.json")
    ta.analyze(path, Options(jobs=1))
    (entry,) = cache_dir.glob("*.npz")
    with np.load(entry, allow_pickle=False) as npz:
        assert all(npz[name].dtype != object for name in npz.files)


def test_cache_size_is_bounded_oldest_first(tmp_path, cache_dir, monkeypatch):
    paths = [_rank_trace(r, 4).write(tmp_path / f"t{r}.json") for r in range(3)]
    for i, p in enumerate(paths):
        ta.analyze(p, Options(jobs=1))
        entry = C.entry_path(C.identity(p, Options().max_input_bytes))
        os.utime(entry, ns=(10**18 + i, 10**18 + i))  # distinct use times, paths[0] the oldest
    sizes = sorted(e.stat().st_size for e in cache_dir.glob("*.npz"))
    assert len(sizes) == 3
    C.trim(cache_dir, sizes[-1] + sizes[-2])  # room for two: the least recently used goes
    left = set(cache_dir.glob("*.npz"))
    assert C.entry_path(C.identity(paths[0], Options().max_input_bytes)) not in left and len(left) == 2
    monkeypatch.setenv("TRACEANALYZER_CACHE_MAX_SIZE", "1KiB")
    assert C.max_bytes() == 1024
    big = _rank_trace(3, 4).write(tmp_path / "t3.json")
    ta.analyze(big, Options(jobs=1))
    assert not C.entry_path(C.identity(big, Options().max_input_bytes)).exists()  # over the bound: not kept


def test_per_rank_extras_reach_the_job_reducers(job, monkeypatch):
    """The seam job-wide analyses plug into: a compact value per rank, a reduce over all ranks."""

    from traceanalyzer.run import combine as combine_module
    from traceanalyzer.run import map as P

    monkeypatch.setitem(P.RANK_EXTRAS, "kernels", lambda tl, i: int((tl.rank_events(i)["kind"] == "kernel").sum()))
    seen = []

    def reducer(outputs, ranks, diagnosis, stage):  # type: ignore[no-untyped-def]
        seen.extend((r.rank, o.extras["kernels"]) for o, r in zip(outputs, ranks))
        return stage.then(warnings=("reduced",))

    monkeypatch.setattr(combine_module, "JOB_REDUCERS", [reducer])
    a = ta.analyze(job, Options(jobs=1))
    assert a.warnings[-1] == "reduced"
    assert seen == [(n, 4 * 300 + 4) for n in range(4)]  # 4 steps of 300 kernels and an all-reduce


def test_cli_jobs_gives_the_api_bytes(job, tmp_path):
    out = tmp_path / "r.json"
    result = CliRunner().invoke(main, ["report", *map(str, job), "--jobs", "2", "--no-cache", "-q", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == ta.analyze(job, Options(jobs=1)).to_json()
    result = CliRunner().invoke(main, ["report", str(job[0]), "--jobs", "0", "-o", str(tmp_path / "x.json")])
    assert result.exit_code == 2 and "--jobs" in result.output


def _die(code: int) -> int:
    os._exit(code)  # a worker killed (e.g. by the kernel's out-of-memory killer)


def test_a_worker_that_dies_is_one_clear_error():
    with pytest.raises(UsageError, match="worker process ended abruptly.*fewer --jobs"):
        X.map_tasks(_die, [3, 3], jobs=2)


def test_cache_stores_every_table_of_a_timeline():
    """A table added to Timeline must be added to the cache too (else a cache hit would drop it)."""
    import dataclasses

    from traceanalyzer.timeline import Timeline

    tables = {f.name for f in dataclasses.fields(Timeline) if isinstance(getattr(Timeline(), f.name), pd.DataFrame)}
    assert tables == set(C.TABLES)


def test_memory_events_survive_the_cache(cache_dir, reads):
    from conftest import SAMPLES

    path = SAMPLES / "torch_memory_leak.json.gz"
    first = ta.analyze(path, Options(jobs=1))
    again = ta.analyze(path, Options(jobs=1))
    assert reads == [path] and again.to_json() == first.to_json()
    assert again.ranks[0].host_memory is not None  # a CPU capture: host memory events


def test_straggler_job_alike_in_parallel(tmp_path):
    """An 8-rank job on two hosts with a clock offset and one slow-input rank: the clocks, waits and
    the straggler come out the same with 1 or 2 processes."""
    from test_stragglers import write_job

    paths = write_job(tmp_path, steps=12, offsets_us={r: 5_000 for r in range(4, 8)},
                      hosts={r: "a" if r < 4 else "b" for r in range(8)})
    one = ta.analyze(paths, Options(jobs=1)).to_json()
    two = ta.analyze(paths, Options(jobs=2))
    assert two.to_json() == one
    assert two.diagnosis is not None and [s.rank for s in two.diagnosis.stragglers][:1] == [5]

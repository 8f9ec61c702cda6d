"""One big uncompressed trace decoded in ranges by several processes gives exactly what streaming it
in one process gives: the same events table, counts, warnings, errors (with their line and column)
and truncation salvage, on layouts built to fool a splitter (`}, {` inside strings at range edges,
keys after the events, pretty-printed CRLF JSON, a byte-order mark). Ranges are made tiny here
(`chunk_bytes`), and the size above which a file is split is lowered, so small files take the path.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_chunked_decode import layouts, tricky_trace

from traceanalyzer.errors import InputError
from traceanalyzer.formats import ReadOptions, chrome_parallel, kineto

CHUNK = 4096


@pytest.fixture
def split_small_files(monkeypatch):
    """Files of any size are split (only the parent process reads these two constants)."""
    monkeypatch.setattr(chrome_parallel, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(chrome_parallel, "TAIL_BYTES", 1024)


def big_tricky_doc(copies: int = 40) -> dict:
    """The tricky trace's events repeated (shifted in time) with long names full of `}, {` so that
    range edges fall inside strings."""
    base = tricky_trace()
    doc = base.document()
    events = []
    for c in range(copies):
        for e in base.events:
            e = dict(e)
            if "ts" in e and isinstance(e["ts"], (int, float)):
                e["ts"] = e["ts"] + c * 10_000
            if isinstance(e.get("name"), str) and e["name"].startswith("ProfilerStep#"):
                e["name"] = f"ProfilerStep#{c * 10 + int(e['name'][13:])}"
            events.append(e)
        events.append({"ph": "X", "cat": "cpu_op", "name": "long " + '}, {"ph": "X"}, {' * 700, "pid": 4242,
                       "tid": 4243, "ts": c * 10_000 + 500, "dur": 2, "args": {}})
    doc["traceEvents"] = events
    return doc


def read_both(path: Path) -> tuple:
    one = kineto.read_path(path, ReadOptions(), chunk_bytes=CHUNK)
    two = kineto.read_path(path, ReadOptions(decode_workers=2), chunk_bytes=CHUNK)
    return one, two


def assert_same(one, two) -> None:
    pd.testing.assert_frame_equal(two.events, one.events)
    pd.testing.assert_frame_equal(two.memory, one.memory)
    assert two.sources == one.sources
    assert two.ranks == one.ranks and two.devices == one.devices
    assert two.warnings == one.warnings


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["default", "minified", "pretty_crlf", "events_middle", "non_ascii_raw"])
def test_ranges_decode_like_the_stream(tmp_path, split_small_files, layout):
    path = tmp_path / "t.json"
    path.write_bytes(layouts(big_tricky_doc())[layout])
    assert path.stat().st_size > 20 * CHUNK
    one, two = read_both(path)
    assert_same(one, two)
    assert two.sources[0].events_read == 40 * (len(tricky_trace().events) + 1)


def test_ranges_meet_at_the_same_boundary(tmp_path):
    """Each range ends where the next one starts, unless the next one started inside a string: then
    it starts elsewhere, and the parent streams from the last boundary both agree on."""
    path = tmp_path / "t.json"
    path.write_bytes(json.dumps(big_tricky_doc()).encode())
    data = path.read_bytes()
    at = data.index(b'"traceEvents": [') + len(b'"traceEvents": ')
    end = len(data) - 1024
    tasks = [chrome_parallel.RangeTask(str(path), lo, min(lo + CHUNK, end), lo == at, CHUNK)
             for lo in range(at, end, CHUNK)]
    results = [kineto.decode_range_task(t) for t in tasks]
    met = fake = 0
    for before, after in zip(results, results[1:]):
        if not before.complete:  # it started inside a string itself: its end means nothing
            continue
        assert data[before.end + 1:before.end + 2] == b"{"  # a true boundary: an event starts right after
        if after.start == before.end:
            met += 1
        else:  # its first boundary sat inside a string, before the true one: it is not accepted
            fake += 1
            assert after.start < before.end
    assert met > 10 and fake > 0


@pytest.mark.slow
def test_a_bad_event_is_reported_at_the_same_line_and_column(tmp_path, split_small_files):
    text = json.dumps(big_tricky_doc(), indent=1)
    cut = text.index('"dur"', len(text) // 2)
    path = tmp_path / "t.json"
    path.write_text(text[:cut] + '"dur": tru, ' + text[cut:])
    with pytest.raises(InputError) as a:
        kineto.read_path(path, ReadOptions(), chunk_bytes=CHUNK)
    with pytest.raises(InputError) as b:
        kineto.read_path(path, ReadOptions(decode_workers=2), chunk_bytes=CHUNK)
    assert "line" in a.value.message and b.value.message == a.value.message


@pytest.mark.slow
@pytest.mark.parametrize("where", [0.5, 0.97])
def test_a_cut_file_is_salvaged_the_same(tmp_path, split_small_files, where):
    data = json.dumps(big_tricky_doc()).encode()
    path = tmp_path / "t.json"
    path.write_bytes(data[:int(len(data) * where)])
    one, two = read_both(path)
    assert_same(one, two)
    assert two.sources[0].warnings[0].startswith("TRUNCATED")


@pytest.mark.slow
def test_byte_order_mark_and_keys_after_a_short_array(tmp_path, split_small_files):
    doc = big_tricky_doc(copies=4)
    doc["zz_after"] = [{"k": "}, {" * 50} for _ in range(2000)]  # the array ends well before the file does
    path = tmp_path / "t.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(doc).encode())
    one, two = read_both(path)
    assert_same(one, two)
    assert two.ranks[0].rank == 1


def test_gzip_and_small_files_are_streamed(tmp_path, monkeypatch):
    """No process is started for them: they are streamed here, with the same result."""
    calls = []
    monkeypatch.setattr(chrome_parallel, "_run_ranges", lambda *a: calls.append(a))
    small = tricky_trace().write(tmp_path / "t.json")
    assert_same(kineto.read_path(small, ReadOptions()), kineto.read_path(small, ReadOptions(decode_workers=2)))
    monkeypatch.setattr(chrome_parallel, "PARALLEL_MIN_BYTES", 0)
    zipped = tricky_trace().write(tmp_path / "t.json.gz")
    assert_same(kineto.read_path(zipped, ReadOptions()), kineto.read_path(zipped, ReadOptions(decode_workers=2)))
    assert not calls


@pytest.mark.parametrize("jobs, files, want", [(2, 1, [2]), (1, 1, [1]), (None, 2, [1, 1])])
def test_one_file_gets_the_jobs_a_job_of_several_files_gives_each_one(tmp_path, monkeypatch, jobs, files, want):
    """`--jobs` decodes one file's ranges in that many processes; with several files, the processes
    go to the files and each file is decoded by one (small files: read here, one after the other)."""
    from traceanalyzer import Options, analyze

    seen = []
    real = kineto.read_path

    def spy(path, options, *a, **k):
        seen.append(options.decode_workers)
        return real(path, options, *a, **k)

    monkeypatch.setattr(kineto, "read_path", spy)
    paths = []
    for i in range(files):
        t = tricky_trace()
        t.header["distributedInfo"] = {"backend": "nccl", "rank": i, "world_size": files}
        paths.append(t.write(tmp_path / f"rank{i}.json"))
    analyze(paths if files > 1 else paths[0], Options(jobs=jobs, cache=False))
    assert seen == want


@pytest.mark.slow
def test_a_long_blank_stretch_between_events(tmp_path, split_small_files):
    """Ranges that hold only blanks find no boundary and give up; the stream squeezes the blanks."""
    doc = big_tricky_doc(copies=3)
    text = json.dumps(doc).encode()
    cut = text.index(b', {"ph": "X", "cat": "kernel"', len(text) // 2) + 1  # a true boundary
    path = tmp_path / "t.json"
    path.write_bytes(text[:cut] + b" \n" * (40 * CHUNK) + text[cut:])
    one, two = read_both(path)
    assert_same(one, two)


class _HereExecutor:
    """A stand-in for the process pool that runs each range at once, here: the acceptance logic is
    fuzzed without starting processes."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def submit(self, fn, *args):
        from concurrent.futures import Future

        fut: Future = Future()
        try:
            fut.set_result(fn(*args))
        except Exception as exc:  # noqa: BLE001 - handed over as a lost worker would be
            fut.set_exception(exc)
        return fut

    def shutdown(self, wait=True, cancel_futures=False) -> None:
        pass


_SEED = json.dumps(big_tricky_doc(copies=6)).encode()


@settings(max_examples=60, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_mutated_files_read_in_ranges_like_the_stream(tmp_path, monkeypatch, data):
    """Cut, overwritten or spliced bytes anywhere: the ranges give the same table, counts and
    warnings as the stream, or the same error message."""
    monkeypatch.setattr(chrome_parallel, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(chrome_parallel, "TAIL_BYTES", 1024)
    monkeypatch.setattr(chrome_parallel, "ProcessPoolExecutor", _HereExecutor)
    buf = bytearray(_SEED)
    for _ in range(data.draw(st.integers(0, 3))):
        at = data.draw(st.integers(0, len(buf) - 1))
        what = data.draw(st.sampled_from([b"}, {", b'"', b"]", b"\n", b"\x00", b"{", b"}, {\"ph\": \"X\"}"]))
        buf[at:at + data.draw(st.integers(0, 3))] = what
    if data.draw(st.booleans()):
        del buf[data.draw(st.integers(len(buf) // 3, len(buf))):]
    path = tmp_path / "t.json"
    path.write_bytes(bytes(buf))
    outcomes = []
    for workers in (1, 2):
        try:
            tl = kineto.read_path(path, ReadOptions(decode_workers=workers), chunk_bytes=CHUNK)
            outcomes.append(("ok", tl))
        except InputError as exc:
            outcomes.append(("error", exc.message))
    (kind1, one), (kind2, two) = outcomes
    assert kind1 == kind2
    if kind1 == "ok":
        assert_same(one, two)
    else:
        assert one == two


class _IdleWorkerExecutor:
    """A pool whose worker starts nothing until the first range's result is asked for: every other
    range stays queued (cancellable), so this process must take them back rather than wait."""

    def __init__(self, *args, **kwargs) -> None:
        self.submitted = 0
        self.cancelled = 0

    def submit(self, fn, *args):
        from concurrent.futures import Future

        pool = self

        class _Deferred(Future):
            def result(self, timeout=None):
                if not self.done():
                    self.set_result(fn(*args))
                return super().result(timeout)

            def cancel(self):
                ok = super().cancel()
                pool.cancelled += ok
                return ok

        self.submitted += 1
        return _Deferred()

    def shutdown(self, wait=True, cancel_futures=False) -> None:
        pass


def test_ranges_a_worker_has_not_started_are_taken_back(tmp_path, monkeypatch, split_small_files):
    pools: list[_IdleWorkerExecutor] = []

    def make_pool(*args, **kwargs):
        pools.append(_IdleWorkerExecutor())
        return pools[-1]

    monkeypatch.setattr(chrome_parallel, "ProcessPoolExecutor", make_pool)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(big_tricky_doc()))
    one, two = read_both(path)
    assert_same(one, two)
    pool = pools[0]
    # every range but the first (which the worker holds) came back here
    assert pool.submitted >= 3 and pool.cancelled == pool.submitted - 1


def test_a_range_reads_on_after_decoding_without_a_copy(tmp_path):
    """Ranges decode straight from their window (no copy, see `_decode`'s `transient`): the events of
    a piece must be let go of before the window grows. Here an event longer than the window's slack
    follows the first piece, so the window grows right after it was decoded (BufferError if the
    decoded args still pointed into it)."""
    t = tricky_trace()
    doc = t.document()
    head = [dict(e, ts=e.get("ts", 0)) for e in doc["traceEvents"]][:20]
    long_event = {"ph": "X", "cat": "kernel", "name": "k" * (2 * chrome_parallel._SLACK_BYTES), "pid": 0, "tid": 7,
                  "ts": 5, "dur": 1, "args": {"device": 0, "stream": 7, "correlation": 77}}
    doc["traceEvents"] = head + [long_event] + head
    path = tmp_path / "t.json"
    text = json.dumps(doc).encode()
    path.write_bytes(text)
    at = text.index(b"[", text.index(b'"traceEvents"'))
    long_at = text.index(b'"kkkk')
    task = chrome_parallel.RangeTask(str(path), at, long_at + 100, True, 512)  # ends inside the long event
    res = chrome_parallel.decode_range(task, kineto.TYPED_DECODER, kineto._Collector)
    assert res.complete and res.part.events_read == 21  # the head, then the long event
    assert 77 in np.concatenate(res.part.parts["correlation"]).tolist()



class _BreakingExecutor(_HereExecutor):
    """A pool that loses its worker after two ranges: the next hand-out raises BrokenProcessPool at
    submit, as a real pool does once a worker was killed (out of memory) between hand-outs."""

    def __init__(self, *args, **kwargs) -> None:
        self.submitted = 0

    def submit(self, fn, *args):
        from concurrent.futures.process import BrokenProcessPool

        self.submitted += 1
        if self.submitted > 2:
            raise BrokenProcessPool("A child process terminated abruptly")
        return super().submit(fn, *args)


def test_a_pool_that_breaks_while_ranges_are_handed_out(tmp_path, monkeypatch, split_small_files):
    """What the accepted ranges did not reach is streamed here, with the stream's table (no traceback)."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps(big_tricky_doc()))
    monkeypatch.setattr(chrome_parallel, "ProcessPoolExecutor", _BreakingExecutor)
    one, two = read_both(path)
    assert_same(one, two)

"""A big gzip trace is inflated once to a temporary plain file and decoded in parallel ranges
(`chrome_parallel.spool_gzip`), with exactly what streaming it in one process gives: events, counts,
warnings, errors naming the .gz file and its line and column; a cut or hostile stream, a temporary
folder in memory or a small file are streamed as before. The sizes that choose the path are lowered
here so small files take it."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from test_chunked_decode import layouts
from test_parallel_decode import CHUNK, assert_same, big_tricky_doc

from traceanalyzer.errors import InputError
from traceanalyzer.formats import ReadOptions, chrome_parallel, kineto
from traceanalyzer.processes import pid_alive


@pytest.fixture
def spool_small_files(monkeypatch):
    monkeypatch.setattr(chrome_parallel, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(chrome_parallel, "TAIL_BYTES", 1024)
    monkeypatch.setattr(chrome_parallel, "SPOOL_MIN_COMPRESSED_BYTES", 0)
    spooled = []
    real = chrome_parallel.spool_gzip

    def spy(stream, min_compressed=None):
        out = real(stream, min_compressed)
        spooled.append(out)
        return out

    monkeypatch.setattr(chrome_parallel, "spool_gzip", spy)
    return spooled


def both(path):
    one = kineto.read_path(path, ReadOptions(), chunk_bytes=CHUNK)
    two = kineto.read_path(path, ReadOptions(decode_workers=2), chunk_bytes=CHUNK)
    return one, two


@pytest.mark.parametrize("layout", ["default", "pretty_crlf"])
def test_a_spooled_gzip_reads_like_the_stream(tmp_path, spool_small_files, layout):
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(b"\xef\xbb\xbf" + layouts(big_tricky_doc(copies=12))[layout]))
    one, two = both(path)
    assert_same(one, two)
    assert spool_small_files and spool_small_files[0] is not None  # it took the spooled path
    assert spool_small_files[0].closed  # and gave its space back
    if sys.platform.startswith("linux"):
        assert spool_small_files[0].name is None  # unlinked from the start: a killed process leaves no file
    assert two.sources[0].path == str(path)


def test_a_cut_gzip_is_streamed_with_its_salvage(tmp_path, spool_small_files):
    data = gzip.compress(json.dumps(big_tricky_doc(copies=12)).encode())
    path = tmp_path / "t.json.gz"
    path.write_bytes(data[:len(data) * 2 // 3])
    one, two = both(path)
    assert spool_small_files == [None]  # the cut stream: not spooled
    assert_same(one, two)
    assert two.sources[0].warnings[0].startswith("TRUNCATED")


def test_a_long_whitespace_run_is_streamed_not_spooled(tmp_path, spool_small_files):
    text = json.dumps(big_tricky_doc(copies=4))
    cut = text.index("}, {", len(text) // 2) + 2
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress((text[:cut] + " " * 200_000 + text[cut:]).encode()))
    one, two = both(path)
    assert spool_small_files == [None]
    assert_same(one, two)


def test_a_bad_event_names_the_gzip_file_at_the_same_line_and_column(tmp_path, spool_small_files):
    text = json.dumps(big_tricky_doc(copies=12), indent=1)
    cut = text.index('"dur"', len(text) // 2)
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress((text[:cut] + '"dur": tru, ' + text[cut:]).encode()))
    with pytest.raises(InputError) as a:
        kineto.read_path(path, ReadOptions(), chunk_bytes=CHUNK)
    with pytest.raises(InputError) as b:
        kineto.read_path(path, ReadOptions(decode_workers=2), chunk_bytes=CHUNK)
    assert spool_small_files and spool_small_files[0] is not None
    assert "line" in a.value.message and b.value.message == a.value.message
    assert b.value.path == a.value.path == str(path)


def test_progress_counts_the_gzip_files_bytes_once(tmp_path, spool_small_files):
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps(big_tricky_doc(copies=12)).encode()))
    told = []
    kineto.read_path(path, ReadOptions(decode_workers=2, progress=told.append), chunk_bytes=CHUNK)
    assert spool_small_files[0] is not None
    assert 0 < sum(told) <= os.path.getsize(path)


def test_small_gzip_and_memory_folders_are_streamed(tmp_path, monkeypatch):
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps(big_tricky_doc(copies=2)).encode()))
    stream = kineto.stream_events(path)
    assert chrome_parallel.spool_gzip(stream) is None  # under SPOOL_MIN_COMPRESSED_BYTES
    monkeypatch.setattr(chrome_parallel, "_in_memory", lambda folder: True)
    assert chrome_parallel.spool_gzip(stream, min_compressed=0) is None
    if os.path.isdir("/dev/shm") and os.path.isfile("/proc/self/mounts"):
        monkeypatch.undo()
        assert chrome_parallel._in_memory("/dev/shm") == any(
            line.split()[1] == "/dev/shm" and line.split()[2] == "tmpfs" for line in open("/proc/self/mounts"))


def test_a_killed_read_leaves_nothing_behind(tmp_path):
    """SIGKILL while the spooled content and a range folder exist (a read killed for memory): no spooled
    file remains on Linux, and the next read removes the range folder the dead process left."""
    temp = tmp_path / "temp"
    temp.mkdir()
    trace = tmp_path / "t.json.gz"
    trace.write_bytes(gzip.compress(json.dumps(big_tricky_doc(copies=4)).encode()))
    script = textwrap.dedent(f"""\
        import sys, tempfile, time
        from traceanalyzer.formats import chrome_parallel, kineto
        spooled = chrome_parallel.spool_gzip(kineto.stream_events({str(trace)!r}), min_compressed=0)
        tempfile.mkdtemp(prefix=chrome_parallel._TEMP_PREFIX + "ranges-" + str(__import__("os").getpid()) + "-")
        print(spooled.path, flush=True)
        time.sleep(60)
        """)
    env = dict(os.environ, TMPDIR=str(temp))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    try:
        spooled = proc.stdout.readline().strip()
        assert spooled, "the script did not spool"
        left = sorted(p.name for p in temp.iterdir())
        assert any(n.startswith("traceanalyzer-ranges-") for n in left)
        if sys.platform.startswith("linux"):
            assert spooled.startswith("/proc/") and not any(n.endswith(".json") for n in left)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 10
    while pid_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(p.name for p in temp.iterdir()) == left  # the kill removed nothing itself
    assert chrome_parallel.sweep_left_behind(str(temp)) == len(left)
    assert list(temp.iterdir()) == []


def test_the_sweep_leaves_running_processes_and_other_names_alone(tmp_path):
    mine = tmp_path / f"traceanalyzer-ranges-{os.getpid()}-abcd1234"
    mine.mkdir()
    other = tmp_path / "traceanalyzer-12-notours.json"  # not a name this package makes
    other.write_text("{}")
    assert chrome_parallel.sweep_left_behind(str(tmp_path)) == 0
    assert mine.exists() and other.exists()

"""Hostile and broken inputs at the readers: bounded work, bounded memory, and every bad value a
count or a one-line error naming the file and where (exit 0 or 2, never 3).

Each test builds its input in code. Work is asserted by counting decoder calls or buffer sizes
(what quadratic behaviour or unbounded memory would blow up), and the command line runs under a
wall-clock limit where a hang was reported.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from dmon_builder import trace_with_dated_log
from kineto_builder import KinetoTrace
from timelines import load_paths

from traceanalyzer.commands import main
from traceanalyzer.errors import InputError
from traceanalyzer.formats import chrome_json, kineto, logdir
from traceanalyzer.formats._base import MAX_DEVICES, ReadOptions
from traceanalyzer.formats._columns import MAX_NAME_CHARS
from traceanalyzer.formats._counters import MAX_LOG_COLUMNS

ROOT = Path(__file__).resolve().parent.parent


def _trace(**kw) -> KinetoTrace:
    t = KinetoTrace(**kw)
    for i in range(3):
        t.step(i, i * 1000, 900).launched(i * 1000 + 10, 5, i * 1000 + 20, 500)
    return t


def _text(**kw) -> str:
    return json.dumps(_trace(**kw).document())


def _cli(args: list, limit_s: int = 60) -> subprocess.CompletedProcess:
    """The real command in a subprocess, killed after `limit_s` (a hang fails, not blocks)."""
    return subprocess.run(["timeout", str(limit_s), sys.executable, "-m", "traceanalyzer", *map(str, args)],
                          capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def _report(path: Path, tmp_path: Path) -> tuple[int, str, dict]:
    """`report PATH --format json` in-process: exit code, stderr, the JSON written."""
    out = tmp_path / (path.name + ".out.json")
    res = CliRunner().invoke(main, ["report", str(path), "-o", str(out), "--force", "-q"])
    data = json.loads(out.read_text()) if res.exit_code == 0 else {}
    return res.exit_code, res.stderr if hasattr(res, "stderr") else res.output, data


def _source(data: dict) -> dict:
    inputs = data["inputs"]
    return (inputs["sources"] if isinstance(inputs, dict) else inputs)[0]


class _Counting:
    """Wraps chrome_json._decode to count piece decodes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = chrome_json._decode

        def counted(piece, decoder, *rest):
            self.calls += 1
            return real(piece, decoder, *rest)

        monkeypatch.setattr(chrome_json, "_decode", counted)


# --- hangs ----------------------------------------------------------------------------------------


def test_many_nested_trace_events_keys_before_the_real_one_are_one_pass(tmp_path, monkeypatch):
    n = 20_000
    keys = ",".join(f'"k{i}": {{"traceEvents": [1]}}, "s{i}": "\\"traceEvents\\": ["' for i in range(n))
    path = tmp_path / "nested.json"
    path.write_text("{" + keys + "," + _text()[1:])
    decodes = []
    real = chrome_json._ENVELOPE_DECODER

    class Counting:
        def decode(self, data):
            decodes.append(len(data))
            return real.decode(data)

    monkeypatch.setattr(chrome_json, "_ENVELOPE_DECODER", Counting())
    tl = kineto.read_path(path, ReadOptions())
    assert len(decodes) <= 2  # the header once (plus the keys after the list), not once per key
    assert tl.sources[0].events_read == 12
    assert (tl.events["kind"] == "kernel").sum() == 3


def test_nested_trace_events_keys_report_in_bounded_time(tmp_path):
    keys = ",".join(f'"k{i}": {{"traceEvents": [1]}}' for i in range(100_000))  # 3 MB
    path = tmp_path / "nested.json"
    path.write_text("{" + keys + "," + _text()[1:])
    res = _cli(["report", path, "-o", tmp_path / "r.json", "-q"], limit_s=60)
    assert res.returncode == 0, res.stderr


def test_many_split_candidates_inside_one_string_decode_a_few_times(tmp_path, monkeypatch):
    """A name holding 50,000 `},{`: each candidate inside it used to re-decode the piece."""
    doc = _trace().document()
    pad = [{"ph": "X", "cat": "cpu_op", "name": "p" * 100, "pid": 1, "tid": 1, "ts": 1, "dur": 1}] * 50
    hostile = {"ph": "X", "cat": "cpu_op", "name": "},{" * 50_000, "pid": 1, "tid": 1, "ts": 1, "dur": 1}
    doc["traceEvents"] = pad + [hostile] + doc["traceEvents"]
    path = tmp_path / "boundary.json"
    path.write_text(json.dumps(doc))
    counter = _Counting(monkeypatch)
    tl = kineto.read_path(path, ReadOptions(), chunk_bytes=2048)
    assert counter.calls < 40  # was about 50,000
    assert tl.sources[0].events_read == 50 + 1 + 12
    named = tl.events["name"].astype(str)
    assert named.str.startswith("},{").sum() == 1
    # the whole-content path splits the same way
    counter.calls = 0
    env = chrome_json.parse_envelope(path.read_bytes(), path)
    events = sum(len(c) for c in chrome_json.iter_event_chunks(env, path, chunk_bytes=2048))
    assert events == 63 and counter.calls < 40


@pytest.mark.slow
def test_split_candidates_across_the_piece_boundary_report_in_bounded_time(tmp_path):
    doc = _trace().document()
    pad = {"ph": "X", "cat": "cpu_op", "name": "x" * 1000, "pid": 1, "tid": 1, "ts": 1, "dur": 1}
    hostile = {"ph": "X", "cat": "cpu_op", "name": "},{" * (4 << 20), "pid": 1, "tid": 1, "ts": 1, "dur": 1}
    doc["traceEvents"] = [pad] * 30_000 + [hostile] + doc["traceEvents"]  # the string spans 32 MB
    path = tmp_path / "boundary.json"
    path.write_text(json.dumps(doc))
    res = _cli(["report", path, "-o", tmp_path / "r.json", "-q"], limit_s=90)
    assert res.returncode == 0, res.stderr
    src = _source(json.loads((tmp_path / "r.json").read_text()))
    assert src["events_read"] == 30_000 + 1 + 12
    assert any("names cut" in w for w in src["warnings"])


def _whitespace_gzip(path: Path, mib: int, block: bytes) -> Path:
    events = [json.dumps(e) for e in _trace().events]
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(b'{"schemaVersion": 1, "traceEvents": [' + ",".join(events[:4]).encode() + b",")
        chunk = block * ((1 << 20) // len(block))
        for _ in range(mib):
            f.write(chunk)
        f.write(",".join(events[4:]).encode() + b"]}")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("block", [b" ", b"\n \t"])
def test_gigabytes_of_whitespace_in_the_event_list_do_not_accumulate(tmp_path, monkeypatch, block):
    path = _whitespace_gzip(tmp_path / "blank.json.gz", 200, block)
    biggest = [0]
    real_more = chrome_json.StreamReader.more

    def more(self):
        real_more(self)
        biggest[0] = max(biggest[0], len(self.buf))

    monkeypatch.setattr(chrome_json.StreamReader, "more", more)
    tl = kineto.read_path(path, ReadOptions())
    assert tl.sources[0].events_read == 12
    assert (tl.events["kind"] == "kernel").sum() == 3
    assert biggest[0] < 40 << 20  # 200 MiB of blanks read, a few blocks held


def test_whitespace_skipped_keeps_error_offsets_in_file_coordinates(tmp_path):
    events = [json.dumps(e) for e in _trace().events]
    blanks = b" " * (3 << 20)
    content = b'{"traceEvents": [' + events[0].encode() + b"," + blanks + b"{oops}, " + events[1].encode() + b"]}"
    path = tmp_path / "bad.json.gz"
    path.write_bytes(gzip.compress(content, compresslevel=1))
    with pytest.raises(InputError) as err:
        kineto.read_path(path, ReadOptions())
    assert f"(byte {content.index(b'{oops}') + 1})" in str(err.value)


def test_a_piece_without_an_event_end_is_refused_not_held(tmp_path, monkeypatch):
    monkeypatch.setattr(chrome_json, "_MAX_PIECE_BYTES", 1 << 20)
    numbers = " ".join(["1"] * (1 << 20))
    path = tmp_path / "nums.json"
    path.write_text('{"traceEvents": [' + json.dumps(_trace().events[0]) + ', {"a": [' + numbers + "]}]}")
    with pytest.raises(InputError, match=r"no end of an event in \d+ bytes from byte \d+"):
        kineto.read_path(path, ReadOptions(), chunk_bytes=1024)


# --- memory: long names -----------------------------------------------------------------------------


def test_names_longer_than_the_bound_are_cut_and_counted(tmp_path):
    t = _trace()
    long = "K" * (MAX_NAME_CHARS * 3)
    t.kernel(2500, 100, name=long).kernel(2700, 100, name=long).kernel(2900, 100, name="L" * (MAX_NAME_CHARS + 1))
    path = t.write(tmp_path / "long.json")
    tl = kineto.read_path(path, ReadOptions())
    names = tl.events["name"].astype(str)
    cut = names[names.str.len() > 1000]
    assert len(cut) == 3 and (cut.str.len() <= MAX_NAME_CHARS + 10).all()
    assert any(w.startswith("names cut: 2 names") for w in tl.sources[0].warnings)


# --- internal errors -> clear errors or counts ----------------------------------------------------


def _variant(tmp_path: Path, name: str, old: str, new: str) -> Path:
    text = _text()
    assert old in text
    path = tmp_path / f"{name}.json"
    path.write_text(text.replace(old, new, 1))
    return path


# (name, replaced, replacement, reason counted in not_kept or None)
VARIANTS = [
    ("id_2_63", '"correlation": 1,', '"correlation": 9223372036854775808,', None),  # uint64: kept, exact
    ("id_2_64", '"correlation": 1,', '"correlation": 18446744073709551616,', "id_out_of_range"),
    ("pid_2_64", '"pid": 4242', '"pid": 18446744073709551616', "id_out_of_range"),
    ("step_huge", "ProfilerStep#1", "ProfilerStep#99999999999", None),
    ("step_digits", "ProfilerStep#1", "ProfilerStep#" + "9" * 5000, None),
    ("dur_1e400", '"dur": 900', '"dur": 1e400', "malformed_event"),
    ("ts_digits", '"ts": 0,', '"ts": ' + "9" * 5000 + ",", "malformed_event"),
    ("args_string", '"args": {"correlation": 1}', '"args": "oops"', "malformed_event"),  # a runtime call's
    ("device_list", '"device": 0', '"device": [0]', None),
    ("device_object", '"device": 0', '"device": {"a": 1}', None),
    ("stream_list", '"stream": 7', '"stream": [7]', None),
    ("name_object", '"name": "gemm_kernel"', '"name": {"a": [1]}', None),
    ("duplicate_keys", '"ph": "X"', '"ph": "X", "ph": "B"', "phase_B"),
    ("phase_list", '"ph": "X"', '"ph": [1]', "phase_list"),
    ("rank_huge", '"schemaVersion": 1', '"schemaVersion": 1, "distributedInfo": {"rank": 99999999999999999999}', None),
    ("props_wrong_types", '"deviceProperties": [{"id": 0, "name": "Test GPU"}]',
     '"deviceProperties": [{"id": [0], "name": {"x": 1}, "totalGlobalMem": "x" }, 7, null]', None),
    ("props_not_a_list", '"deviceProperties": [{"id": 0, "name": "Test GPU"}]', '"deviceProperties": "x"', None),
]


@pytest.mark.parametrize("name,old,new,reason", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_hostile_values_are_counted_not_internal_errors(tmp_path, name, old, new, reason):
    path = _variant(tmp_path, name, old, new)
    code, err, data = _report(path, tmp_path)
    assert code == 0, err
    src = _source(data)
    if reason:
        assert src["not_kept"].get(reason, 0) >= 1
    assert src["events_read"] == src["events_kept"] + sum(src["not_kept"].values())


REFUSED = [
    ("base_time_beyond_int64", '"schemaVersion": 1', '"schemaVersion": 1, "baseTimeNanoseconds": 99999999999999999999999',
     "baseTimeNanoseconds 99999999999999999999999 is out of range"),
    ("base_time_negative", '"schemaVersion": 1', '"schemaVersion": 1, "baseTimeNanoseconds": -5',
     "baseTimeNanoseconds -5 is out of range"),
    ("nan_literal", '"ts": 0,', '"ts": NaN,', "malformed JSON at line 1"),
]


@pytest.mark.parametrize("name,old,new,message", REFUSED, ids=[v[0] for v in REFUSED])
def test_hostile_headers_are_one_line_errors(tmp_path, name, old, new, message):
    path = _variant(tmp_path, name, old, new)
    code, err, _ = _report(path, tmp_path)
    assert code == 2
    line = err.strip()
    assert "\n" not in line and f"{name}.json" in line and message in line


def test_host_thread_ids_beyond_32_bits_are_analysed(tmp_path):
    path = tmp_path / "pids.json"
    path.write_text(_text().replace('"pid": 4242', '"pid": 1099511627776').replace('"tid": 4243', '"tid": 4398046511104'))
    code, err, data = _report(path, tmp_path)
    assert code == 0, err
    assert _source(data)["events_kept"] == 12


def test_tf_metadata_ids_of_wrong_shape_are_no_internal_error(tmp_path):
    doc = _tf([])
    doc["traceEvents"][1]["pid"] = [[1, 2]]
    path = tmp_path / "host.trace.json"
    path.write_text(json.dumps(doc))
    src = load_paths([path]).sources[0]
    assert src.events_read == src.events_kept + sum(src.not_kept.values())


def test_many_devices_are_refused_with_a_clear_error(tmp_path):
    t = _trace()
    for d in range(MAX_DEVICES + 1):
        t.kernel(100 + d % 800, 5, device=d)
    code, err, _ = _report(t.write(tmp_path / "devices.json"), tmp_path)
    assert code == 2 and f"{MAX_DEVICES + 1} distinct GPUs" in err and "devices.json" in err


# --- TF trace-viewer JSON ---------------------------------------------------------------------------


def _tf(events: list[dict]) -> dict:
    return {"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "Stream #2(Kernel)"}},
        {"ph": "M", "name": "process_name", "pid": 3, "args": {"name": "/host:CPU"}},
        {"ph": "X", "name": "k", "pid": 1, "tid": 2, "ts": 10, "dur": 5},
        *events]}


def test_tf_events_without_ts_or_with_absurd_times_are_dropped_and_counted(tmp_path):
    path = tmp_path / "host.trace.json"
    path.write_text(json.dumps(_tf([
        {"ph": "X", "name": "no_ts", "pid": 1, "tid": 2, "dur": 5},
        {"ph": "X", "name": "text_ts", "pid": 1, "tid": 2, "ts": "abc", "dur": 5},
        {"ph": "X", "name": "far", "pid": 1, "tid": 2, "ts": 1e300, "dur": 5},
        {"ph": "X", "name": "long", "pid": 1, "tid": 2, "ts": 10, "dur": 1e200},
    ])))
    tl = load_paths([path])
    src = tl.sources[0]
    assert src.not_kept == {"metadata": 3, "no_timestamp": 2, "time_out_of_range": 1, "duration_out_of_range": 1}
    assert src.events_read == src.events_kept + sum(src.not_kept.values()) and src.events_kept == 1
    assert any("no timestamp" in w for w in src.warnings)


def test_tf_device_and_stream_numbers_beyond_int32_are_not_wrapped(tmp_path):
    doc = _tf([])
    doc["traceEvents"][0]["args"]["name"] = "/device:GPU:99999999999"
    doc["traceEvents"][1]["args"]["name"] = "Stream #99999999999999999999(Kernel)"
    path = tmp_path / "host.trace.json"
    path.write_text(json.dumps(doc))
    tl = load_paths([path])  # the GPU is a device on a free index (not wrapped, not lost), its stream the line's
    assert "plane /device:GPU:99999999999: its GPU number is beyond int32, shown as device 0" in tl.sources[0].warnings
    assert [d.index for d in tl.devices] == [0]
    assert tl.events[["name", "device", "stream"]].values.tolist() == [["k", 0, 2]]


# --- counter logs -------------------------------------------------------------------------------------


def test_dmon_with_thousands_of_columns_is_refused_fast(tmp_path):
    n = 40_000
    path = tmp_path / "wide.log"
    path.write_text(f"# gpu {' '.join(f'c{i}' for i in range(n))}\n# Idx {' '.join(['%'] * n)}\n"
                    + "".join("    0 " + " ".join(["1"] * n) + "\n" for _ in range(3)))
    with pytest.raises(InputError, match=rf"line 1: a header of {n + 1} columns; counter logs have at most"):
        load_paths([path])


def test_dmon_at_the_column_bound_reads_every_column(tmp_path):
    names = [f"c{i}" for i in range(MAX_LOG_COLUMNS - 2)]
    path = tmp_path / "wide.log"
    path.write_text(f"# gpu sm {' '.join(names)}\n"
                    + "".join(f"    {g} 50 " + " ".join(str(i) for i in range(len(names))) + "\n"
                              for _ in range(2) for g in range(2)))
    tl = load_paths([path])
    c = tl.counters
    assert c["metric"].nunique() == len(names) + 1
    assert c.loc[c["metric"] == "dmon_c7", "value"].tolist() == [7.0] * 4


def test_dmon_gpu_index_beyond_int32_is_refused_not_wrapped(tmp_path):
    path = tmp_path / "gpu.log"
    path.write_text("# gpu sm\n# Idx %\n    0 5\n99999999999 7\n")
    with pytest.raises(InputError, match=r"line 4: GPU index 1e\+11 is not a GPU index"):
        load_paths([path])


def test_dmon_with_thousands_of_gpus_is_refused(tmp_path):
    path = tmp_path / "gpus.log"
    path.write_text("# gpu sm\n# Idx %\n" + "".join(f"{d} 5\n" for d in range(MAX_DEVICES + 1)))
    with pytest.raises(InputError, match=rf"{MAX_DEVICES + 1} distinct GPUs in one file"):
        load_paths([path])


@pytest.mark.parametrize("date", ["16000101", "22990101"])
def test_dmon_dates_out_of_range_are_refused_not_shifted(tmp_path, date):
    path = tmp_path / "dated.log"
    path.write_text(f"#Date Time gpu sm\n#YYYYMMDD HH:MM:SS Idx %\n20240101 10:00:00 0 5\n{date} 10:00:01 0 6\n")
    with pytest.raises(InputError, match="line 4:"):
        load_paths([path])


def test_smi_csv_dates_before_1970_are_refused(tmp_path):
    path = tmp_path / "q.csv"
    path.write_text("timestamp, index, utilization.gpu [%]\n2024/01/16 14:44:16.977, 0, 5 %\n"
                    "1900/01/16 14:44:17.977, 0, 6 %\n")
    with pytest.raises(InputError, match=r"line 3: time '1900/01/16 14:44:17.977' is out of range"):
        load_paths([path])


def test_dcgm_rows_with_extra_fields_are_dropped_and_counted(tmp_path):
    path = tmp_path / "dcgm.csv"
    t0 = 1_700_000_000_000_000
    path.write_text("GPUId,TimeStampUs,Field,Values\n"
                    f"0,{t0},gpu_utilization,50\n"
                    f"0,{t0 + 1_000_000},gpu_utilization,60,extra\n"
                    f"0,{t0 + 2_000_000},gpu_utilization,70\n")
    tl = load_paths([path])
    src = tl.sources[0]
    assert src.not_kept == {"wrong_value_count": 1} and src.events_read == 3 and src.events_kept == 2
    assert sorted(tl.counters["value"]) == [50.0, 70.0]
    assert any("(lines 3)" in w for w in src.warnings)


def test_dcgm_errors_name_the_file_line(tmp_path):
    path = tmp_path / "dcgm.csv"
    path.write_text("GPUId,TimeStampUs,Field,Values\n\n0,1700000000000000,gpu_utilization,50\n"
                    "x,y,z,w,v\n99999999999,1700000000000001,gpu_utilization,50\n")
    with pytest.raises(InputError, match=r"line 5: GPUId 1e\+11 is not a GPU index"):
        load_paths([path])


# --- log dirs ------------------------------------------------------------------------------------------


def test_log_dir_thousands_of_levels_deep_is_bounded_and_said(tmp_path):
    root = tmp_path / "logs"
    root.mkdir()
    _trace().write(root / "w.1.pt.trace.json")
    deep = root
    cwd = os.getcwd()
    try:  # build 1,200 levels with relative paths (an absolute one would pass PATH_MAX)
        os.chdir(root)
        for _ in range(1200):
            os.mkdir("d")
            os.chdir("d")
        Path("w.9.pt.trace.json").write_text(_text())
    finally:
        os.chdir(cwd)
    try:
        found = logdir.discover(deep)
        assert found is not None and [r.files[0].name for r in found.runs] == ["w.1.pt.trace.json"]
        assert any(f"more than {logdir.MAX_DEPTH} levels" in s for s in found.skipped)
        code, err, data = _report(root, tmp_path)
        assert code == 0, err
    finally:
        _remove_chain(root)


def _remove_chain(root: Path) -> None:
    """Remove a chain of nested `d` folders without recursion (shutil.rmtree recurses per level)."""
    cwd = os.getcwd()
    try:
        os.chdir(root)
        depth = 0
        while os.path.isdir("d"):
            os.chdir("d")
            depth += 1
        for _ in range(depth):
            for name in os.listdir("."):
                os.remove(name)
            os.chdir("..")
            os.rmdir("d")
    finally:
        os.chdir(cwd)


def test_unreadable_folder_in_a_log_dir_is_said(tmp_path, monkeypatch):
    root = tmp_path / "logs"
    (root / "old").mkdir(parents=True)
    _trace().write(root / "old" / "w.1.pt.trace.json")
    (root / "new").mkdir()
    real_scandir = os.scandir

    def scandir(path="."):
        if str(path).endswith("new"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    found = logdir.discover(root)
    assert found is not None
    assert any(s.startswith("folder new: cannot be read (Permission denied)") and "may not be the newest" in s
               for s in found.skipped)


def test_every_reader_accounts_for_every_event(tmp_path):
    """events_read == kept + not kept, with every kind of drop at once."""
    text = _text()
    text = text.replace('"dur": 500', '"dur": -500', 1).replace('"args": {"correlation": 1}', '"args": "oops"', 1)
    doc = json.loads(text)
    doc["traceEvents"] += [{"ph": "X", "name": "far", "cat": "kernel", "pid": 0, "tid": 7, "ts": 1e17, "dur": 1},
                           {"ph": "i", "name": "mark", "pid": 1, "tid": 1, "ts": 5},
                           {"ph": "X", "name": "nodur", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 5}]
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(doc))
    src = kineto.read_path(path, ReadOptions()).sources[0]
    assert src.events_read == src.events_kept + sum(src.not_kept.values())
    assert {"negative_duration", "malformed_event", "time_out_of_range", "instant", "no_duration"} <= set(src.not_kept)
    assert np.isfinite(src.events_kept)


# --- XSpace ----------------------------------------------------------------------------------------


def _xspace_variant(tmp_path: Path, change) -> Path:
    from test_tf_xplane import _space

    from traceanalyzer.formats._xplane_pb import XSpace

    space = XSpace()
    space.ParseFromString(_space())
    change(space)
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(space.SerializeToString())
    return path


def test_xspace_times_beyond_int64_are_dropped_and_counted_not_wrapped(tmp_path):
    def far(space):
        [line for plane in space.planes for line in plane.lines][0].timestamp_ns = 2**63 - 1

    src = load_paths([_xspace_variant(tmp_path, far)]).sources[0]
    assert src.not_kept["time_out_of_range"] >= 1
    assert src.events_read == src.events_kept + sum(src.not_kept.values())


def test_xspace_stats_beyond_int64_and_huge_gpu_numbers_are_no_internal_error(tmp_path):
    def hostile(space):
        for plane in space.planes:
            if plane.name.startswith("/device:GPU"):
                plane.name = "/device:GPU:99999999999999999999999"
            for stat in plane.stats:
                stat.uint64_value = 2**64 - 1
            for line in plane.lines:
                for event in line.events:
                    for stat in event.stats:
                        stat.uint64_value = 2**64 - 1

    src = load_paths([_xspace_variant(tmp_path, hostile)]).sources[0]
    # profile_start_time 2^64-1 puts every timed event beyond 2200: dropped and counted
    assert src.not_kept == {"time_out_of_range": 11, "aggregated": 1}

    def gpu_only(space):
        for plane in space.planes:
            if plane.name.startswith("/device:GPU"):
                plane.name = "/device:GPU:99999999999999999999999"

    tl = load_paths([_xspace_variant(tmp_path, gpu_only)])
    src = tl.sources[0]  # a GPU plane numbered beyond int32 is still a GPU: its work kept, on a free index
    assert "plane /device:GPU:99999999999999999999999: its GPU number is beyond int32, shown as device 0" \
        in src.warnings
    assert [d.index for d in tl.devices] == [0] and (tl.events["device"] == 0).sum() > 0
    assert src.events_read == src.events_kept + sum(src.not_kept.values())


def test_tf_json_malformed_events_are_counted(tmp_path):
    path = tmp_path / "host.trace.json"
    path.write_text(json.dumps(_tf([{"ph": "X", "name": "bad", "pid": 1, "tid": 2, "ts": 1, "dur": 1,
                                     "args": "oops"}])))
    src = load_paths([path]).sources[0]
    assert src.not_kept.get("malformed_event") == 1
    assert src.events_read == src.events_kept + sum(src.not_kept.values())


@pytest.mark.parametrize("args,message", [
    # the command line refuses these with the accepted range before any reading
    (["--dmon-interval", "0s"], "'--dmon-interval': '0s' is out of range: accepted 1ms to 1h"),
    (["--dmon-interval", "99999999h"], "'--dmon-interval': '99999999h' is out of range: accepted 1ms to 1h"),
])
def test_absurd_sample_spacing_is_a_one_line_usage_error(tmp_path, args, message):
    path = tmp_path / "s.log"
    path.write_text("# gpu sm\n# Idx %\n 0 5\n 0 6\n")
    res = CliRunner().invoke(main, ["report", str(path), "-o", str(tmp_path / "x.json"), "-q", *args])
    assert res.exit_code == 2 and message in res.output


def test_leading_blanks_of_any_length_are_skipped_not_held(tmp_path):
    event = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 5, "args": {"device": 0}}
    lead, blank = tmp_path / "lead.json.gz", tmp_path / "blank.json.gz"
    with gzip.open(lead, "wb", compresslevel=1) as f:
        f.write(b" " * (20 << 20) + json.dumps({"traceEvents": [event]}).encode())
    blank.write_bytes(gzip.compress(b" \n" * (10 << 20), compresslevel=1))
    assert load_paths([lead]).sources[0].events_kept == 1
    with pytest.raises(InputError, match="no content: expected a profiler trace"):
        load_paths([blank])


def test_a_newest_run_that_cannot_be_used_is_said_when_an_older_one_is_analysed(tmp_path):
    root = tmp_path / "logs"
    old = root / "plugins" / "profile" / "2024_01_01_10_00_00"
    new = root / "plugins" / "profile" / "2024_06_01_10_00_00"
    old.mkdir(parents=True)
    new.mkdir(parents=True)
    from test_tf_xplane import _space

    (old / "host.xplane.pb").write_bytes(_space())
    (new / "overview_page.pb").write_bytes(b"\x00")
    found = logdir.discover(root)
    assert found is not None and found.left_out == ["plugins/profile/2024_06_01_10_00_00"]
    lines = logdir.describe(found, logdir.select(found, None, False), False)
    assert "the only run that could be used (1 left out: plugins/profile/2024_06_01_10_00_00" in lines[1]
    assert any("no <host>.xplane.pb" in line for line in lines)


@pytest.mark.parametrize("field,value", [("Total Allocated", 1e308), ("Bytes", 1e308), ("Total Reserved", 1e308),
                                         ("Device Id", [[0]]), ("Total Allocated", [1])])
def test_memory_instants_with_absurd_sizes_are_no_internal_error(tmp_path, field, value):
    doc = _trace().document()
    for i in range(3):
        args = {"Device Type": 1, "Device Id": 0, "Total Allocated": 1000 * i, "Total Reserved": 4000, "Bytes": 1000}
        if i == 1:
            args[field] = value
        doc["traceEvents"].append({"ph": "i", "s": "t", "name": "[memory]", "pid": 4242, "tid": 4243,
                                   "ts": i * 500, "args": args})
    path = tmp_path / "mem.json"
    path.write_text(json.dumps(doc))
    code, err, data = _report(path, tmp_path)
    assert code == 0, err
    src = _source(data)
    assert src["events_read"] == src["events_kept"] + sum(src["not_kept"].values())
    if field == "Total Allocated":  # no usable allocated total: the instant is dropped and counted
        assert src["not_kept"]["memory_event_unusable"] == 1


@pytest.mark.parametrize("args,message", [
    (["--dmon-offset", "99999999999h"], "'--dmon-offset': '99999999999h' is out of range: accepted -8784h to 8784h"),
    (["--dmon-offset", "-99999999999h"], "is out of range: accepted -8784h to 8784h"),
    (["--dmon-gpu", "0=99999999999"], "indices up to 2147483647"),
])
def test_absurd_alignment_options_are_usage_errors(tmp_path, args, message):
    trace_with_dated_log(tmp_path)
    res = CliRunner().invoke(main, ["report", str(tmp_path / "t.json"), "--dmon", str(tmp_path / "g.log"),
                                    "-o", str(tmp_path / "x.json"), "-q", *args])
    assert res.exit_code == 2 and message in res.output


# --- leftovers of issue 25: each a clear error (exit 2, file and what was expected) or a counted warning ---
def _run_report(tmp_path: Path, path: Path, fmt: str = "json"):
    out = tmp_path / f"out.{fmt}"
    res = CliRunner().invoke(main, ["report", str(path), "-o", str(out), "--format", fmt, "-q", "--force"])
    return res, (json.loads(out.read_text()) if res.exit_code == 0 and fmt == "json" else None)


def _leftover_doc(tmp_path: Path, events: list, name: str = "t.json", **header) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"schemaVersion": 1, **header, "traceEvents": events}))
    return path


_STEP = {"ph": "X", "name": "ProfilerStep#1", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": 1000, "dur": 500}
_KERNEL = {"ph": "X", "name": "gemm", "cat": "kernel", "pid": 0, "tid": 7, "ts": 1040, "dur": 300,
           "args": {"device": 0, "stream": 7, "correlation": 5}}


def test_every_event_of_zero_duration_is_a_result_with_a_warning(tmp_path):
    path = _leftover_doc(tmp_path, [dict(_STEP, dur=0), dict(_KERNEL, dur=0)])
    for fmt in ("json", "md", "html"):
        res, _ = _run_report(tmp_path, path, fmt)
        assert res.exit_code == 0, res.output
    res, data = _run_report(tmp_path, path)
    (inp,) = data["inputs"]
    assert inp["events_kept"] == 2
    assert "every one of the 2 events has zero duration" in inp["warnings"][0]
    assert data["summary"]["steps_per_s"] is None


@pytest.mark.parametrize("layout", ["file_loop", "pt_trace_loop", "tf_run_loop", "folder_loop"])
def test_symlink_loops_are_input_errors(tmp_path, layout):
    d = tmp_path / "logs"
    d.mkdir()
    if layout == "file_loop":
        (d / "a.json").symlink_to(d / "b.json")
        (d / "b.json").symlink_to(d / "a.json")
        target = d / "a.json"
        expected = "a symbolic link that loops"
    elif layout == "pt_trace_loop":
        (d / "w.1.pt.trace.json").symlink_to(d / "w.2.pt.trace.json")
        (d / "w.2.pt.trace.json").symlink_to(d / "w.1.pt.trace.json")
        target, expected = d, "2 symbolic link(s) that loop left out in folder .: w.1.pt.trace.json, w.2.pt.trace.json"
    elif layout == "tf_run_loop":
        run = d / "plugins" / "profile" / "2024_01_01_00_00_00"
        run.mkdir(parents=True)
        (run / "h.xplane.pb").symlink_to(run / "h.xplane.pb")
        target, expected = d, "1 symbolic link(s) that loop left out in folder plugins/profile/2024_01_01_00_00_00"
    else:  # a folder linking to itself, and a trace beside it: the trace is read once, the loop not followed
        (d / "self").symlink_to(d)
        _trace().write(d / "w.1.pt.trace.json")
        res, data = _run_report(tmp_path, d)
        assert res.exit_code == 0, res.output
        assert len(data["ranks"]) == 1
        return
    res, _ = _run_report(tmp_path, target)
    assert res.exit_code == 2, res.output
    assert str(target) in res.output and expected in res.output


@pytest.mark.parametrize("event, reason", [
    (dict(_STEP, name="old", cat="cpu_op", ts=-5000, dur=10), "time_before_1970"),
    (dict(_STEP, name="b", cat="cpu_op", ts=True, dur=10), "no_timestamp"),
    (dict(_STEP, name="b", cat="cpu_op", ts=1100, dur=False), "no_duration"),
    (dict(_KERNEL, pid=-3, args={"device": -3, "stream": 7}), "device_id_out_of_range"),
    (dict(_KERNEL, args={"device": 2**31 + 5, "stream": 7}), "device_id_out_of_range"),
])
def test_implausible_times_and_device_ids_are_counted_not_kept(tmp_path, event, reason):
    res, data = _run_report(tmp_path, _leftover_doc(tmp_path, [_STEP, _KERNEL, event]))
    assert res.exit_code == 0, res.output
    (inp,) = data["inputs"]
    assert inp["events_read"] == 3 and inp["events_kept"] == 2
    assert inp["not_kept"] == {reason: 1}
    assert any(reason.replace("_", " ") in w for w in inp["warnings"])


def test_memory_events_before_1970_are_counted_not_kept(tmp_path):
    mem = {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "s": "t", "ts": -10,
           "args": {"Device Type": 1, "Device Id": 0, "Bytes": 10, "Total Allocated": 10}}
    res, data = _run_report(tmp_path, _leftover_doc(tmp_path, [_STEP, _KERNEL, mem]))
    assert res.exit_code == 0
    assert data["inputs"][0]["not_kept"]["memory_event_unusable"] == 1


@pytest.mark.parametrize("ids", [[-1, 0], [2**31 + 1, 0], [True, 0]])
def test_odd_device_property_ids_are_said(tmp_path, ids):
    props = [{"id": i, "name": f"GPU {i}"} for i in ids]
    res, data = _run_report(tmp_path, _leftover_doc(tmp_path, [_STEP, _KERNEL], deviceProperties=props))
    assert res.exit_code == 0
    (w,) = [w for w in data["inputs"][0]["warnings"] if w.startswith("deviceProperties")]
    assert "1 entries whose id is no device index" in w
    assert data["ranks"][0]["devices"][0]["name"] == "GPU 0"


@pytest.mark.parametrize("events", [[1, 2, "x", None, []], [[{"ph": "X"}]], ["{}"]])
def test_trace_events_without_any_object_are_refused(tmp_path, events):
    path = _leftover_doc(tmp_path, events)
    res, _ = _run_report(tmp_path, path)
    assert res.exit_code == 2, res.output
    assert str(path) in res.output
    assert f"its 'traceEvents' list holds {len(events)} values and not one event object" in res.output


def test_empty_trace_events_stay_an_empty_result(tmp_path):
    res, data = _run_report(tmp_path, _leftover_doc(tmp_path, []))
    assert res.exit_code == 0 and data["inputs"][0]["events_read"] == 0


# --- the Trace Event Format's JSON Array Format: a bare list of events, closing ']' optional ---------------
_ARRAY = [_STEP, {"ph": "X", "name": "cudaLaunchKernel", "cat": "cuda_runtime", "pid": 1, "tid": 1, "ts": 1020,
                  "dur": 10, "args": {"correlation": 5}}, _KERNEL]


@pytest.mark.parametrize("ending", ["]", "]\n\n", "", ",", ",\n", "\n"])
def test_json_array_format_is_read_closed_or_not(tmp_path, ending):
    text = json.dumps(_ARRAY, indent=1)
    path = tmp_path / "array.json"
    path.write_text(text[:-1].rstrip() + ending)
    res, data = _run_report(tmp_path, path)
    assert res.exit_code == 0, res.output
    (inp,) = data["inputs"]
    assert inp["events_read"] == 3 and inp["events_kept"] == 3 and inp["warnings"] == []
    (d,) = data["ranks"][0]["devices"]
    assert d["device"] == "cuda:0" and d["gpu_busy_us"] == 300.0


def test_json_array_format_cut_inside_an_event_is_truncated(tmp_path):
    text = json.dumps(_ARRAY)
    path = tmp_path / "array.json"
    path.write_text(text[:text.rindex('"dur"')])
    res, data = _run_report(tmp_path, path)
    assert res.exit_code == 0, res.output
    (inp,) = data["inputs"]
    assert inp["events_read"] == 2
    assert inp["warnings"][0].startswith("TRUNCATED: the JSON document ends inside the event list")


@pytest.mark.parametrize("doc", [[{"cols": [], "rows": []}], [[1, 2, 3, "alloc"]], [], [1, 2]])
def test_other_json_lists_are_refused(tmp_path, doc):
    path = tmp_path / "list.json"
    path.write_text(json.dumps(doc))
    res, _ = _run_report(tmp_path, path)
    assert res.exit_code == 2, res.output
    assert "not a trace: the JSON document is a list whose first element is no trace event" in res.output

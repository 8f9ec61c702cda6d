"""The compiled field scanner (formats/_scan.c) against the pure-Python reader: identical Timelines (every
column, every count and warning) or identical errors, on the samples, the corpus, hostile inputs and
fuzzed ones; and the scanner reads the usual traces itself rather than leaving them to Python."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import kineto_corpus_files
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kineto_builder import KinetoTrace
from scan_compare import assert_same, needs_scanner, read_both, was_scanned
from test_fuzz import FOUND, mutated

from traceanalyzer.commands import main
from traceanalyzer.formats import kineto, scanner
from traceanalyzer.formats._base import ReadOptions
from traceanalyzer.formats._columns import MAX_NAME_CHARS

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted(p for p in (ROOT / "sample_traces").iterdir()
                 if p.name.endswith((".json", ".json.gz")) and not p.name.endswith(".expected.json"))

pytestmark = needs_scanner


def _base() -> KinetoTrace:
    t = KinetoTrace(rank=0, base_ns=1_700_000_000_000_000_000)
    for i in range(3):
        t.step(i, i * 1000, 900).launched(i * 1000 + 10, 5, i * 1000 + 20, 500, op="aten::mm")
    t.gpu("Memcpy HtoD (Pageable -> Device)", 2950, 20, cat="gpu_memcpy", bytes=4096)
    t.gpu("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 2700, 100, Collective_name="allreduce", dtype="Float",
          **{"In msg nelems": 1024, "Out msg nelems": 1024, "Process Group Name": "0",
             "Process Group Ranks": [0, 1]})
    t.events.append({"ph": "i", "name": "[memory]", "pid": 4242, "tid": 4243, "ts": 100, "s": "t",
                     "args": {"Device Type": 1, "Device Id": 0, "Bytes": 512, "Total Allocated": 1024,
                              "Total Reserved": 2048}})
    t.events.append({"ph": "C", "name": "sm__throughput", "pid": "GPU 0 Counters", "tid": 0, "ts": 200,
                     "args": {"": 42.5}})
    t.events.append({"ph": "s", "id": 1, "pid": 4242, "tid": 4243, "ts": 10, "cat": "ac2g", "name": "ac2g"})
    t.events.append({"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "python"}})
    return t


def _doc_text() -> str:
    return json.dumps(_base().document())


def _same_split(data: bytes) -> None:
    """The scan in two threads (cut at the middle, however small) gives what one gives."""
    one = scanner._scan.scan(data, MAX_NAME_CHARS, 1 << 28)
    two = scanner._scan.scan(data, MAX_NAME_CHARS, 1 << 28, False, 2, 0)
    assert type(one) is type(two)
    if isinstance(one, dict):
        one.pop("split"), two.pop("split")
        assert one == two


def _same(tmp_path: Path, content: bytes | str, name: str = "t.json") -> bool:
    """Both readers on `content` agree, and the scan in one or two threads; whether the scanner read it."""
    path = tmp_path / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    if not name.endswith(".gz"):
        _same_split(path.read_bytes())
    a, b = read_both(path)
    assert_same(a, b)
    return was_scanned(path)


@pytest.mark.parametrize("path", SAMPLES, ids=[p.name for p in SAMPLES])
def test_samples_read_identically_and_by_the_scanner(path):
    a, b = read_both(path)
    assert_same(a, b)
    assert was_scanned(path)  # every sample is read by the scanner itself, not left to Python


@pytest.mark.slow
def test_corpus_reads_identically():
    files = [p for p in kineto_corpus_files() if p.stat().st_size < 1 << 20]  # lean: the small ones
    if not files:
        pytest.skip("corpus not found")
    scanned = 0
    for path in files:
        a, b = read_both(path)
        assert_same(a, b)
        scanned += not isinstance(a, str) and was_scanned(path)
    assert scanned >= len(files) // 2  # the usual trace is read by the scanner


def test_a_built_trace_is_scanned_with_its_collectives_memory_and_counters(tmp_path):
    assert _same(tmp_path, _doc_text())
    tl = kineto.read_path(tmp_path / "t.json", ReadOptions())
    ev = tl.events
    assert int(ev["comm"].sum()) == 1 and int(ev.loc[ev["comm"], "bytes"].iloc[0]) == 4096  # 1024 x Float
    assert list(ev.loc[ev["comm"], "comm_group"].astype(str)) == ["0,1"]
    assert len(tl.memory) == 1 and float(tl.memory["allocated_bytes"].iloc[0]) == 1024
    assert len(tl.counters) == 1
    assert tl.sources[0].not_kept == {"flow": 1, "metadata": 1}


def test_a_cuda_sync_names_the_event_record_it_waits_on_with_either_reader(tmp_path):
    """`wait_on_cuda_event_record_corr_id` / `wait_on_stream` of a cuda_sync row reach the Timeline's
    `wait_corr` / `wait_stream` columns from the scanner as from the pure-Python reader."""
    t = _base()
    t.gpu("Wait on CUDA event", 2960, 1, cat="gpu_user_annotation", stream=7, correlation=4321,
          wait_on_cuda_event_record_corr_id=1234, wait_on_stream=9)
    assert _same(tmp_path, json.dumps(t.document()))
    ev = kineto.read_path(tmp_path / "t.json", ReadOptions()).events
    waits = ev[ev["wait_corr"] >= 0]
    assert list(waits["wait_corr"]) == [1234] and list(waits["wait_stream"]) == [9]


def _replace(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


# (name, old, new, whether the scanner reads the result itself)
CASES = [
    ("escaped_name", '"gemm_kernel"', '"\\u0067emm_kernel"', True),
    ("surrogate_pair", '"gemm_kernel"', '"gemm\\ud83d\\ude00"', True),
    ("lone_surrogate", '"gemm_kernel"', '"gemm\\ud800"', False),
    ("escaped_key", '"ph": "X"', '"\\u0070h": "X"', False),
    ("duplicate_ts", '"ts": 0,', '"ts": 0, "ts": 5,', False),
    ("duplicate_arg", '"correlation": 1,', '"correlation": 1, "correlation": 2,', True),
    ("duplicate_top_key", '"schemaVersion": 1', '"schemaVersion": 1, "schemaVersion": 2', False),
    ("second_trace_events", '"schemaVersion": 1', '"schemaVersion": 1, "traceEvents": []', False),
    ("ts_1e400", '"ts": 0,', '"ts": 1e400,', False),
    ("ts_1e-400", '"ts": 0,', '"ts": 1e-400,', False),
    ("ts_minus_zero", '"ts": 0,', '"ts": -0.0,', True),
    ("ts_30_digits", '"ts": 0,', '"ts": ' + "9" * 30 + ",", False),
    ("ts_leading_zero", '"ts": 1000,', '"ts": 01000,', False),
    ("ts_nan", '"ts": 0,', '"ts": NaN,', False),
    ("ts_string", '"ts": 0,', '"ts": "0",', False),
    ("corr_2_64_minus_1", '"correlation": 1,', '"correlation": 18446744073709551615,', True),
    ("corr_2_64", '"correlation": 1,', '"correlation": 18446744073709551616,', True),
    ("corr_min_int64", '"correlation": 1,', '"correlation": -9223372036854775808,', True),
    ("corr_string", '"correlation": 1,', '"correlation": "corr 1",', True),
    ("corr_float", '"correlation": 1,', '"correlation": 1.0,', True),
    ("corr_null", '"correlation": 1,', '"correlation": null,', True),
    ("device_string", '"device": 0', '"device": "cuda:0"', True),
    ("device_2_63", '"device": 0', '"device": 9223372036854775808', True),
    ("stream_list", '"stream": 7', '"stream": [7]', True),
    ("graph_null_camel", '"device": 0', '"device": 0, "graph id": null, "graphId": 5', True),
    ("seq_huge", '"device": 0', '"device": 0, "Seq": 9223372036854775808', True),
    ("kind_arg", '"device": 0', '"device": 0, "kind": "DtoH"', True),
    ("pid_spans", '"pid": 4242', '"pid": "Spans"', True),
    ("pid_underscores", '"pid": 4242', '"pid": "4_242"', False),
    ("pid_padded", '"pid": 4242', '"pid": "  4242 "', True),
    ("pid_trailing", '"pid": 4242', '"pid": "host-7"', True),
    ("pid_long_digits", '"pid": 4242', '"pid": "' + "7" * 40 + '"', True),
    ("pid_float", '"pid": 4242', '"pid": 4242.0', False),
    ("pid_bool", '"pid": 4242', '"pid": true', False),
    ("pid_2_64", '"pid": 4242', '"pid": 18446744073709551616', False),
    ("name_null", '"name": "gemm_kernel"', '"name": null', False),
    ("ph_null", '"ph": "X"', '"ph": null', True),
    ("ph_list", '"ph": "X"', '"ph": [1]', False),
    ("args_string", '"args": {"correlation": 1}', '"args": "oops"', False),
    ("args_null", '"args": {"correlation": 1}', '"args": null', True),
    ("deep_unused_arg", '"device": 0', '"device": 0, "x": ' + "[" * 40 + "]" * 40, True),
    ("too_deep_arg", '"device": 0', '"device": 0, "x": ' + "[" * 600 + "]" * 600, False),
    ("control_char", '"gemm_kernel"', '"gemm\tkernel"', False),
    ("bad_escape", '"gemm_kernel"', '"gemm\\xkernel"', False),
    ("trailing_comma", '"dur": 900', '"dur": 900,', False),
    ("nested_trace_events_key", '"schemaVersion": 1', '"schemaVersion": {"traceEvents": 5}', True),
]


@pytest.mark.parametrize("name,old,new,scanned", CASES, ids=[c[0] for c in CASES])
def test_hostile_values_give_the_same_timeline_or_error(tmp_path, name, old, new, scanned):
    assert _same(tmp_path, _replace(_doc_text(), old, new)) == scanned


def test_the_hostile_reader_cases_give_the_same_timeline_or_error(tmp_path):
    from test_hostile_readers import REFUSED, VARIANTS, _text

    text = _text()
    for name, old, new, *_ in VARIANTS + REFUSED:
        _same(tmp_path, _replace(text, old, new), f"{name}.json")


@pytest.mark.parametrize("content", [
    b"", b"   ", b"{}", b"[]", b"null", b'{"traceEvents": 5}', b'{"traceEvents": [1, 2]}',
    b'{"traceEvents": [{"ph": "X"}]} x', b'\xef\xbb\xbf{"traceEvents": [{"ph": "X", "ts": 1, "dur": 2}]}',
    '{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2}]}'.encode("utf-16"),
    b'[{"ph": "X", "name": "a", "ts": 1, "dur": 2}]', b'[{"ph": "X", "name": "a", "ts": 1, "dur": 2}',
    b'{"traceEvents": [{"ph": "X", "name": "a\xff", "ts": 1, "dur": 2}]}',
    b'{"traceEvents": [{"ph": "X", "name": "a\xc0\xaf", "ts": 1, "dur": 2}]}',
    b'{"traceEvents": [{"ph": "X", "name": "a\xed\xa0\x80", "ts": 1, "dur": 2}]}',
    b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "args": {"x": "\xff"}}]}',
    b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2}], "baseTimeNanoseconds": -5}',
    b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2}], "baseTimeNanoseconds": 1e999}',
], ids=lambda c: repr(c[:24]))
def test_odd_documents_give_the_same_timeline_or_error(tmp_path, content):
    _same(tmp_path, content)


def test_columns_in_small_pieces_give_the_same_timeline(tmp_path, monkeypatch):
    monkeypatch.setattr(scanner, "PIECE_ROWS", 3)  # collectives, copies and launches fall in different pieces
    assert _same(tmp_path, _doc_text())
    assert _same(tmp_path, _replace(_doc_text(), '"correlation": 1,', '"correlation": "corr 1",'))


def test_two_threads_take_the_second_half_only_at_an_event_boundary():
    events = [{"ph": "X", "name": f"op{i % 7}", "cat": "cpu_op", "pid": 1, "tid": 2, "ts": i, "dur": 1}
              for i in range(200)]
    doc = json.dumps({"traceEvents": events}).encode()
    one = scanner._scan.scan(doc, MAX_NAME_CHARS, 1 << 28)
    two = scanner._scan.scan(doc, MAX_NAME_CHARS, 1 << 28, False, 2, 0)
    assert two.pop("split") and not one.pop("split")
    assert one == two and len(two["names"]) == 7 and two["events"] == 200
    # the middle falls inside a list in an event's args that holds event-like objects: the second thread
    # parses them as events, and its work is dropped
    trap = {"ph": "X", "name": "trap", "cat": "cpu_op", "ts": 0, "dur": 1,
            "args": {"x": [{"ph": "X", "name": f"fake{i}"} for i in range(300)]}}
    doc = json.dumps({"traceEvents": [events[0], trap, events[1]]}).encode()
    one = scanner._scan.scan(doc, MAX_NAME_CHARS, 1 << 28)
    two = scanner._scan.scan(doc, MAX_NAME_CHARS, 1 << 28, False, 2, 0)
    assert not two.pop("split") and not one.pop("split")
    assert one == two and two["names"] == ["op0", "trap", "op1"]


def test_every_cut_of_a_trace_gives_the_same_result(tmp_path):
    data = _doc_text().encode()
    for at in range(0, len(data), max(1, len(data) // 60)):
        assert not _same(tmp_path, data[:at])  # a cut document is always left to the Python reader


def test_gzip_is_scanned_and_a_cut_gzip_left_to_python(tmp_path, monkeypatch):
    packed = gzip.compress(_doc_text().encode())
    assert _same(tmp_path, packed, "t.json.gz")
    bom = gzip.compress(b"\xef\xbb\xbf\xef\xbb\xbf" + _doc_text().encode())  # one mark removed, the second not
    assert not _same(tmp_path, bom, "bom.json.gz")
    spaces = gzip.compress(_replace(_doc_text(), '"dur": 900', '"dur": 900' + " " * 200_000).encode())
    assert not _same(tmp_path, spaces, "spaces.json.gz")  # a whitespace run: left to the streaming reader
    monkeypatch.setattr(scanner, "_SPOOL_MIN_COMPRESSED", 0)  # spooled to a temporary file and mapped
    assert _same(tmp_path, packed, "spooled.json.gz")
    assert not _same(tmp_path, bom, "spooled_bom.json.gz")
    assert not _same(tmp_path, spaces, "spooled_spaces.json.gz")
    assert not _same(tmp_path, packed[: len(packed) * 2 // 3], "cut.json.gz")


def test_names_beyond_the_bound_are_left_to_python(tmp_path):
    assert not _same(tmp_path, _replace(_doc_text(), '"gemm_kernel"', '"' + "K" * (MAX_NAME_CHARS + 1) + '"'))
    assert _same(tmp_path, _replace(_doc_text(), '"gemm_kernel"', '"' + "K" * MAX_NAME_CHARS + '"'))


def test_without_the_compiled_module_the_python_reader_reads_and_says_so(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    path.write_text(_doc_text())
    monkeypatch.setattr(scanner, "_scan", None)
    assert not scanner.available()
    assert scanner.status() == ("JSON traces are read by the pure-Python reader: the compiled scanner is not "
                                "built here")
    assert len(kineto.read_path(path, ReadOptions()).events) == 17  # 3 x (step, its GPU copy, op, kernel, launch) + copy + collective
    res = CliRunner().invoke(main, ["report", str(path), "-o", str(tmp_path / "r.json"), "-q", "--verbose"])
    assert res.exit_code == 0
    assert "the compiled scanner is not built here" in res.output


# --- fuzzing both readers against each other ------------------------------------------------------

_IDS = st.one_of(st.integers(-2**64, 2**64 + 5), st.sampled_from(["Spans", "7", "stream 3", "1_0", " 12 ", "-5",
                                                                   "GPU 0 Counters", "", "x" * 3, "٣"]))
_ANY = st.one_of(st.none(), st.booleans(), st.integers(-2**65, 2**65), st.floats(allow_nan=False),
                 st.text(max_size=6), st.lists(st.integers(0, 3), max_size=2), _IDS)
_ARG_KEYS = ["device", "stream", "original_stream", "correlation", "bytes", "graph id", "graphId", "Seq", "seq",
             "kind", "Collective name", "In msg nelems", "dtype", "Process Group Ranks", "Process Group Name",
             "Device Type", "Total Allocated", "Bytes", "", "other"]
_ARG_VALUES = {"kind": st.sampled_from(["HtoD", "DtoH", ""]), "dtype": st.sampled_from(["Float", "Half", "x"]),
               "Collective name": st.sampled_from(["allreduce", "broadcast"]),
               "Process Group Ranks": st.lists(st.integers(0, 3), max_size=3)}
_CATS = ["kernel", "cpu_op", "cuda_runtime", "gpu_memcpy", "gpu_memset", "user_annotation", "python_function",
         "gpu_user_annotation", "cuda_sync", "Trace", "odd"]
_NAMES = ["ProfilerStep#1", "gemm", "ncclDevKernel_AllReduce", "Memcpy DtoH (Device -> Pinned)", "cudaGraphLaunch",
          "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", "[memory]", "ProfilerStep#99999999999"]


@st.composite
def _events(draw):
    n = draw(st.integers(0, 12))
    out = []
    for _ in range(n):
        odd = draw(st.integers(0, 9)) == 0  # now and then any value at all in a field
        e = {}
        for key, usual in (("ph", st.sampled_from(["X", "X", "X", "i", "C", "M", "f", None])),
                           ("name", st.sampled_from(_NAMES) | st.text(max_size=5)), ("cat", st.sampled_from(_CATS)),
                           ("pid", _IDS), ("tid", _IDS),
                           ("ts", st.integers(-10, 10**6) | st.floats(-1e3, 1e16, allow_nan=False)),
                           ("dur", st.integers(-5, 10**5) | st.floats(0, 1e12, allow_nan=False))):
            if draw(st.integers(0, 7)):
                e[key] = draw(_ANY if odd and draw(st.booleans()) else usual)
        if draw(st.integers(0, 3)):
            keys = draw(st.lists(st.sampled_from(_ARG_KEYS), max_size=5, unique=True))
            e["args"] = {k: draw(_ARG_VALUES.get(k, _IDS) if not odd else _ANY) for k in keys}
        out.append(e)
    return out


_FUZZ = settings(max_examples=int(os.environ.get("TRACEANALYZER_FUZZ_EXAMPLES", "40")), deadline=None,
                 suppress_health_check=list(HealthCheck), derandomize=True)


@_FUZZ
@given(events=_events(), ascii_only=st.booleans(), base=st.sampled_from([None, 0, 1_700_000_000_000_000_000]))
def test_fuzzed_traces_read_identically(events, ascii_only, base):
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "G"}], "traceEvents": events}
    if base is not None:
        doc["baseTimeNanoseconds"] = base
    with tempfile.TemporaryDirectory() as tmp:
        _same(Path(tmp), json.dumps(doc, ensure_ascii=ascii_only))


@_FUZZ
@given(cuts=st.lists(st.tuples(st.integers(0, 10**6), st.binary(max_size=3)), min_size=1, max_size=3))
def test_fuzzed_bytes_read_identically(cuts):
    data = bytearray(_doc_text().encode())
    for at, new in cuts:  # bytes replaced, inserted or removed at random places
        at %= len(data) + 1
        data[at:at + (at % 3)] = new
    with tempfile.TemporaryDirectory() as tmp:
        _same(Path(tmp), bytes(data))


@_FUZZ
@given(case=mutated(seeds=("kineto", "kineto_comm", "kineto_cpu", "hostile_names", "kineto_gz")))
def test_the_pipeline_fuzzers_mutations_read_identically(case):
    name, data = case
    with tempfile.TemporaryDirectory() as tmp:
        _same(Path(tmp), data, name)


@pytest.mark.parametrize("case", [k for k, (name, _) in FOUND.items() if ".json" in name])
def test_the_inputs_fuzzing_found_read_identically(tmp_path, case):
    _same(tmp_path, FOUND[case][1], FOUND[case][0])


# --- the same report both ways ----------------------------------------------------------------------

@pytest.mark.slow
def test_reports_on_the_samples_are_byte_identical_either_way(tmp_path, monkeypatch):
    for path in SAMPLES:
        outs = []
        for pure in ("0", "1"):
            monkeypatch.setenv(scanner.PURE_PYTHON_ENV, pure)
            out = tmp_path / f"{path.name}.{pure}.json"
            res = CliRunner().invoke(main, ["report", str(path), "-o", str(out), "--format", "json", "-q"])
            assert res.exit_code in (0, 1), res.output
            outs.append(out.read_bytes())
        assert outs[0] == outs[1], path.name


# --- a sanitizer build over the hostile inputs -------------------------------------------------------

_SANITIZED_RUN = r"""
import importlib.util, sys, pathlib
spec = importlib.util.spec_from_file_location("_scan", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
n = 0
for path in sorted(pathlib.Path(sys.argv[2]).iterdir()):
    data = path.read_bytes()
    for at in range(0, len(data) + 1, max(1, len(data) // 400)):  # every cut too
        mod.scan(data[:at], 65536, 1 << 28)
        mod.scan(data[:at], 65536, 1 << 28, False, 2, 0, 2)  # and in two threads, in pieces of 2 rows
        n += 1
    mod.scan(memoryview(data)[1:], 8, 64)
print("scanned", n)
"""


@pytest.mark.slow
def test_sanitizer_build_is_clean_on_the_hostile_inputs(tmp_path):
    gcc = shutil.which("gcc")
    include = sysconfig.get_paths().get("include")
    if not gcc or not include or not Path(include, "Python.h").exists():
        pytest.skip("no C compiler or Python headers")
    libasan = subprocess.run([gcc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    if not libasan or not Path(libasan).exists():
        pytest.skip("no AddressSanitizer runtime")
    module = tmp_path / "_scan_sanitized.so"
    build = subprocess.run([gcc, "-shared", "-fPIC", "-O1", "-g", "-fno-omit-frame-pointer",
                            "-fsanitize=address,undefined", "-fno-sanitize-recover=all", f"-I{include}",
                            str(ROOT / "traceanalyzer" / "formats" / "_scan.c"), "-o", str(module)],
                           capture_output=True, text=True)
    if build.returncode:
        pytest.skip(f"the sanitizer build failed: {build.stderr[-300:]}")
    docs = tmp_path / "docs"
    docs.mkdir()
    text = _doc_text()
    for name, old, new, _ in CASES:
        (docs / f"{name}.json").write_text(_replace(text, old, new))
    (docs / "utf8.json").write_bytes(text.encode().replace(b"gemm_kernel", b"gemm\xf0\x9f\x98\x80\xe0\xa0", 1))
    (docs / "deep.json").write_text('{"traceEvents": [{"args": {"x": ' + "[" * 5000 + "]" * 5000 + "}}]}")
    run = subprocess.run([sys.executable, "-c", _SANITIZED_RUN, str(module), str(docs)], capture_output=True,
                         text=True, timeout=300,
                         env={**os.environ, "LD_PRELOAD": libasan, "ASAN_OPTIONS": "detect_leaks=0",
                              "UBSAN_OPTIONS": "print_stacktrace=1"})
    assert run.returncode == 0, run.stderr[-2000:]
    assert "ERROR" not in run.stderr and "runtime error" not in run.stderr
    assert int(run.stdout.split()[-1]) > 1000


def test_wheels_are_built_for_every_platform_from_pyproject():
    tomllib = pytest.importorskip("tomllib")
    yaml = pytest.importorskip("yaml")

    flow = yaml.safe_load((ROOT / ".github" / "workflows" / "wheels.yml").read_text())
    matrix = flow["jobs"]["wheels"]["strategy"]["matrix"]["include"]
    archs = {a for row in matrix for a in row["archs"].split()}
    assert {"x86_64", "aarch64", "arm64", "AMD64"} <= archs
    assert any("cibuildwheel" in step.get("uses", "") for step in flow["jobs"]["wheels"]["steps"])
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["cibuildwheel"]
    assert "scanner.available()" in config["test-command"]
    assert "musllinux" not in config["skip"].replace("musllinux_i686", "")  # musllinux wheels are built
    assert "optional=True" in (ROOT / "setup.py").read_text()  # no compiler: the install goes on

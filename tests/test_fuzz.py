"""Property-based fuzzing of real inputs: traces and nvidia-smi logs truncated, bit-flipped, given
hostile names and extreme numbers.

Whatever the bytes, the pipeline either succeeds or raises a `TraceAnalyzerError` of the bad-input
family (exit 2) -- never another exception, never a numpy RuntimeWarning, never a hang -- and the
command line exits 0 or 2 with at most one line on stderr, no traceback, and the input unchanged.
Examples are derandomized, so CI sees the same inputs on every run.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import shutil
import signal
import subprocess
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import traceanalyzer as ta  # noqa: E402
from traceanalyzer.errors import EXIT_BAD_INPUT, TraceAnalyzerError  # noqa: E402
from traceanalyzer.report import render  # noqa: E402
from traceanalyzer.report.text import render_text  # noqa: E402

ROOT = Path(__file__).parent.parent
SAMPLES = ROOT / "sample_traces"
EXAMPLE_SECONDS = 30  # one analysis of a mutated small input; a hang is far beyond it

SMI_CSV = (b"timestamp, index, name, utilization.gpu [%], utilization.memory [%], power.draw [W]\n"
           + b"".join(f"2024/01/04 13:00:{s:02d}.000, {g}, NVIDIA Test GPU, {(s * 7 + g * 50) % 101} %, "
                      f"{s % 40} %, {60 + s}.50 W\n".encode() for s in range(20) for g in range(2)))
DCGM_CSV = (b"GPUId,TimeStampUs,Field,Values\n"
            + b"".join(f"{g},{1718783836956328 + s * 500_000},{f},{v}\n".encode()
                       for s in range(20) for g in range(2)
                       for f, v in (("power_usage_instant", 70 + s), ("gpu_utilization", (s * 13) % 100))))

# name -> (file name to write it as, its bytes)
SEEDS: dict[str, tuple[str, bytes]] = {
    "kineto": ("t.json", (SAMPLES / "basic.json").read_bytes()),
    "kineto_comm": ("t.json", (SAMPLES / "comm_rank0.json").read_bytes()),
    "kineto_cpu": ("t.json", (SAMPLES / "cpu_only.json").read_bytes()),
    "hostile_names": ("t.json", (SAMPLES / "hostile_names.json").read_bytes()),
    "kineto_gz": ("t.json.gz", gzip.compress((SAMPLES / "basic.json").read_bytes(), mtime=0)),
    "dmon": ("gpu.log", (SAMPLES / "dmon" / "idle_runs.log").read_bytes()),
    "smi_csv": ("gpu.csv", SMI_CSV),
    "dcgm_csv": ("gpu.csv", DCGM_CSV),
    "glances_csv": ("host.csv", (SAMPLES / "glances" / "cpu_aug.csv").read_bytes()),
    "glances_json": ("host.json", (SAMPLES / "glances" / "cpu_aug.json").read_bytes()),
}
TEXT_SEEDS = [k for k in SEEDS if not SEEDS[k][0].endswith(".gz")]

HOSTILE_STRINGS = [
    "\x1b[2J\x1b]0;owned\x07", "\u202egnp.exe", "@octocat @org/team", "#123 owner/repo#1", "https://evil.example/x",
    "<script>alert(1)</script>", "\x00\x01\x7f", "\ud800", "{{7*7}}", "a" * 70_000, "ProfilerStep#99999999999",
    "ProfilerStep#-1", "\n\r\t", "]]}}", '","ph":"X","ts":1e308,"name":"', "\\u0000", "😀" * 100,
]
EXTREME_NUMBERS = ["1e308", "-1e308", "-1", "0", "-0", "18446744073709551616", "9223372036854775807",
                   "9223372036854775808", "-9223372036854775809", "NaN", "Infinity", "-Infinity", "1e-320",
                   "99999999999999999999999999999", "4294967296", "2147483648", "1.5", "1e16", "\"12\"", "null",
                   "[]", "{}", "true", "[1, 2]", "\"stream 99999999999999999999999\""]
_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")


@contextmanager
def time_limit(seconds: int):
    """Fail an example that runs longer than `seconds` (a hang), instead of blocking the suite."""
    def _alarm(signum, frame):
        raise TimeoutError(f"analysis still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@st.composite
def mutated(draw, seeds=tuple(SEEDS), table=SEEDS):
    """(file name, mutated bytes) from one seed of `table` and a few mutations of it."""
    name, data = table[draw(st.sampled_from(seeds))]
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["truncate", "flip", "insert", "hostile", "number", "delete"]))
        pos = draw(st.integers(0, max(len(buf) - 1, 0)))
        if kind == "truncate":
            del buf[pos:]
        elif kind == "flip" and buf:
            buf[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "insert":
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del buf[pos:pos + draw(st.integers(1, 64))]
        elif kind == "hostile":
            text = draw(st.sampled_from(HOSTILE_STRINGS))
            quote = buf.find(b'"name": "', pos)
            at = quote + len(b'"name": "') if quote >= 0 else pos
            if ".json" in name and draw(st.booleans()):  # a valid JSON string body
                encoded = json.dumps(text, ensure_ascii=draw(st.booleans()))[1:-1].encode("utf-8", "surrogatepass")
            else:
                encoded = text.encode("utf-8", "surrogatepass")
            buf[at:at] = encoded
        elif kind == "number":
            numbers = list(_NUMBER.finditer(bytes(buf)))
            if numbers:
                m = numbers[draw(st.integers(0, len(numbers) - 1))]
                buf[m.start():m.end()] = draw(st.sampled_from(EXTREME_NUMBERS)).encode()
    if name.endswith(".gz") and draw(st.booleans()):
        buf = bytearray(gzip.compress(bytes(buf)[: draw(st.integers(0, len(buf)))], mtime=0))
    return name, bytes(buf)


def analyse_in_process(folder: Path, name: str, data: bytes) -> None:
    """The pipeline on one mutated file: success or a bad-input error, no warning, in bounded time."""
    path = folder / name
    path.write_bytes(data)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # numpy's "invalid value", "divide by zero"...
        with time_limit(EXAMPLE_SECONDS):
            try:
                analysis = ta.analyze(path, ta.Options(cache=False, jobs=1))
            except TraceAnalyzerError as exc:
                assert exc.exit_code == EXIT_BAD_INPUT, exc
                assert "\n" not in str(exc), str(exc)
                return
            render_text(analysis)
            render(analysis, "md")
            render(analysis, "json")


FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


@FUZZ
@given(case=mutated())
def test_mutated_inputs_never_crash_the_pipeline(tmp_path_factory, case):
    analyse_in_process(tmp_path_factory.mktemp("fuzz"), *case)


@pytest.mark.slow
@settings(FUZZ, max_examples=300)
@given(case=mutated())
def test_mutated_inputs_never_crash_the_pipeline_more(tmp_path_factory, case):
    analyse_in_process(tmp_path_factory.mktemp("fuzz"), *case)


@pytest.mark.slow
@FUZZ
@given(seed=st.sampled_from(TEXT_SEEDS), cut=st.floats(0, 1))
def test_truncated_inputs_never_crash_the_pipeline(tmp_path_factory, seed, cut):
    name, data = SEEDS[seed]
    analyse_in_process(tmp_path_factory.mktemp("cut"), name, data[: int(len(data) * cut)])


def corpus_seeds() -> dict[str, tuple[str, bytes]]:
    """Small real files of other kinds: a TF XSpace profile, its trace-viewer JSON, nvidia-smi CSVs."""
    from conftest import corpus_path

    root = corpus_path()
    tf = root / "local_tf_input_bound" / "xprof_converted"
    files = {"xplane": ("vm.xplane.pb", tf / "xspace_copy" / "vm.xplane.pb"),
             "tf_trace_json": ("vm.trace.json.gz", next((tf / "plugins" / "profile").glob("*/vm.trace.json.gz"))),
             "smi_csv": ("gpu.csv", root / "smi_csv_1gpu_15s" / "gpu_usage.csv"),
             "smi_lms": ("gpu.csv", root / "dmon_doc_xuesongtap" / "query_gpu_lms.csv")}
    return {k: (name, path.read_bytes()) for k, (name, path) in files.items() if path.is_file()}


@pytest.mark.slow
@settings(FUZZ, max_examples=150)
@given(data=st.data())
def test_mutated_corpus_files_never_crash_the_pipeline(tmp_path_factory, data):
    seeds = corpus_seeds()
    name, mutant = data.draw(mutated(tuple(sorted(seeds)), seeds))
    analyse_in_process(tmp_path_factory.mktemp("corpus"), name, mutant)


BASIC = SEEDS["kineto"][1]
# Inputs the fuzzer found, kept as plain regression cases (each crashed or warned before its fix).
FOUND = {
    "invalid UTF-8 in a header key": ("t.json", BASIC.replace(b'"schemaVersion"', b'"\xf3chemaVersion"', 1)),
    "lists as pid and tid": ("t.json", BASIC.replace(b'"pid": 4242, "tid": 4243', b'"pid": [1, 2], "tid": [3, 4]')),
    "one list among int pids": ("t.json", BASIC.replace(b'"pid": 4242', b'"pid": [1, 2]', 1)),
    "lists as times": ("t.json", BASIC.replace(b'"ts": 1700000000000000', b'"ts": [1, 2]')),
    "an object as a pid": ("t.json", BASIC.replace(b'"pid": 4242', b'"pid": {"a": 1}', 1)),
    "dmon GPU index inf": ("gpu.log", SEEDS["dmon"][1].replace(b"       0    250", b"     inf    250", 1)),
    "dmon GPU index 1e308": ("gpu.log", SEEDS["dmon"][1].replace(b"       0    250", b"   1e308    250", 1)),
    "dmon GPU index 2^40": ("gpu.log", SEEDS["dmon"][1].replace(b"       0    250", b"1099511627776    250", 1)),
    "DCGM time stamp 2^63": ("gpu.csv", DCGM_CSV.replace(b"0,1718783836956328", b"0,9223372036854775807", 1)),
    "DCGM GPU id 2^40": ("gpu.csv", DCGM_CSV.replace(b"0,1718783836956328", b"1099511627776,1718783836956328", 1)),
    "DCGM row with an empty field name": ("gpu.csv", DCGM_CSV.replace(b",power_usage_instant,", b",,", 1)),
    "glances CSV with a bare carriage return in a row": (
        "host.csv", SEEDS["glances_csv"][1].replace(b"\n", b"\n\rx,", 3).replace(b"\n\rx,", b"\n", 2)),
}


@pytest.mark.parametrize("case", FOUND)
def test_inputs_found_by_fuzzing(tmp_path, case):
    analyse_in_process(tmp_path, *FOUND[case])


def run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "traceanalyzer", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def cli_checks(folder: Path, name: str, data: bytes, fmt: str, mode: str = "report") -> None:
    """End to end: exit 0 or 2, at most one line on stderr (besides notes), no traceback, input unchanged.
    `mode`: the mutated file reported alone, as the HEAD of a diff, or as the --dmon log of a good trace."""
    path = folder / name
    path.write_bytes(data)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    good = str(SAMPLES / "basic.json")
    args = {"report": ["report", name], "diff": ["diff", good, name], "dmon": ["report", good, "--dmon", name]}[mode]
    res = run_cli([*args, "-o", f"out.{fmt}", "--force", "-q"], folder)
    assert res.returncode in (0, 2), res.stderr
    assert "Traceback" not in res.stderr and "Warning" not in res.stderr, res.stderr
    errors = [line for line in res.stderr.splitlines() if "error" in line]
    assert len(errors) <= 1 and (res.returncode == 0 or len(errors) == 1), res.stderr
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    shutil.rmtree(folder)


@pytest.mark.slow
@settings(FUZZ, max_examples=6)
@given(case=mutated(), fmt=st.sampled_from(["html", "md", "json"]))
def test_cli_on_mutated_inputs(tmp_path_factory, case, fmt):
    cli_checks(tmp_path_factory.mktemp("cli"), *case, fmt)


@pytest.mark.slow
@settings(FUZZ, max_examples=25)
@given(case=mutated(), fmt=st.sampled_from(["html", "md", "json"]), mode=st.sampled_from(["report", "diff", "dmon"]))
def test_cli_on_mutated_inputs_more(tmp_path_factory, case, fmt, mode):
    cli_checks(tmp_path_factory.mktemp("cli"), *case, fmt, mode)


OPTION_TEXT = st.one_of(
    st.text(max_size=30),
    st.from_regex(r"\A[+-]?[0-9]{0,25}(\.[0-9]{0,5})?(ns|us|ms|s|m|h|B|KB|GiB|TB|%)?\Z"),
    st.sampled_from(["nan", "inf", "-inf", "1e308", "0", "-0", "9" * 400 + "h", "0=0", "1=99999999999",
                     "0001-01-01", "9999-12-31T23:59:59+14:00", "\x1b[2J", "+99:00", "UTC+99"]),
)
FUZZED_OPTIONS = ["--min-gap", "--max-input-size", "--dmon-offset", "--dmon-interval", "--dmon-start", "--dmon-gpu",
                  "--dmon-tz", "--run", "--fail-on", "--tolerance", "--batch-size", "--jobs", "--host-log"]


@pytest.mark.slow
@settings(FUZZ, max_examples=80)
@given(option=st.sampled_from(FUZZED_OPTIONS), value=OPTION_TEXT)
def test_option_values_never_crash(tmp_path_factory, option, value):
    """Any option value: accepted, or one usage line (exit 2); never an internal error."""
    from click.testing import CliRunner

    from traceanalyzer.commands import main

    folder = tmp_path_factory.mktemp("opt")
    command = "diff" if option == "--tolerance" else "report"
    trace = str(SAMPLES / "basic.json")
    args = [command, trace, *([trace] if command == "diff" else []), "--dmon", str(SAMPLES / "dmon" / "idle_runs.log"),
            "-o", str(folder / "out.json"), "-q", option, value]
    with time_limit(EXAMPLE_SECONDS):
        res = CliRunner().invoke(main, args)
    assert res.exit_code in (0, 1, 2), (res.exit_code, res.output)  # 1: a --fail-on gate that holds
    assert "internal error" not in res.output and "Traceback" not in res.output, res.output
    if res.exit_code == 2:
        errors = [line for line in res.output.splitlines() if "error" in line]
        assert len(errors) == 1, res.output


def test_absurd_host_log_values_beside_a_trace(tmp_path):
    """Found by fuzzing: a glances value of 1e308 overflowed the wait-weighted mean (RuntimeWarning)."""
    data = (SAMPLES / "glances" / "cpu_aug.csv").read_bytes()
    log = tmp_path / "host.csv"
    log.write_bytes(re.sub(rb"(?<=,)\d+\.\d+(?=,)", b"1e308", data))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        analysis = ta.analyze(SAMPLES / "glances" / "cpu_aug.trace.json",
                              ta.Options(host_logs=(log,), cache=False, jobs=1))
    render_text(analysis)


@pytest.mark.slow
@settings(FUZZ, max_examples=80)
@given(case=mutated(("glances_csv", "glances_json", "dmon", "smi_csv", "dcgm_csv")))
def test_mutated_logs_beside_a_trace_never_crash(tmp_path_factory, case):
    """A mutated host log (--host-log) or counter log (--dmon) put on a good trace's clock."""
    name, data = case
    log = tmp_path_factory.mktemp("log") / name
    log.write_bytes(data)
    host = name.startswith("host")
    options = ta.Options(host_logs=(log,) if host else (), counter_logs=() if host else (log,), cache=False, jobs=1)
    trace = SAMPLES / "glances" / "cpu_aug.trace.json" if host else SAMPLES / "basic.json"
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with time_limit(EXAMPLE_SECONDS):
            try:
                analysis = ta.analyze(trace, options)
            except TraceAnalyzerError as exc:
                assert exc.exit_code == EXIT_BAD_INPUT, exc
                return
            render_text(analysis)
            render(analysis, "md")

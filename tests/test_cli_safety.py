"""The command line never writes over an input, says every option error in one line with the
accepted range, and ends quietly when its reader goes away."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from dmon_builder import trace_with_dated_log
from kineto_builder import KinetoTrace

from traceanalyzer.commands._output import unique_targets

ROOT = Path(__file__).parent.parent
SAMPLES = ROOT / "sample_traces"
DMON_LOG = SAMPLES / "dmon" / "idle_runs.log"


def run(args, cwd=None, capture=True, **kw):
    """The real command in a subprocess, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "traceanalyzer", *map(str, args)], cwd=cwd, capture_output=capture,
                          text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, **kw)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def one_error_line(res: subprocess.CompletedProcess, *needles: str) -> str:
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def work(tmp_path):
    trace = KinetoTrace().step(1, 0, 1000).kernel(100, 300).write(tmp_path / "t.json")
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.json").symlink_to(trace)
    os.link(trace, tmp_path / "hard.json")
    shutil.copytree(SAMPLES / "torch_cpu_logdir", tmp_path / "logdir")
    shutil.copy(DMON_LOG, tmp_path / "gpu.log")
    return tmp_path


# (inputs, output) pairs where the output is an input by another name
CLASHES = {
    "same name": (["t.json"], "t.json"),
    "dot slash": (["t.json"], "./t.json"),
    "through a folder": (["t.json"], "sub/../t.json"),
    "absolute": (["t.json"], "{tmp}/t.json"),
    "symlink": (["t.json"], "link.json"),
    "hard link": (["t.json"], "hard.json"),
    "the symlink's target": (["link.json"], "t.json"),
    "dmon log": (["t.json", "--dmon", "gpu.log"], "gpu.log"),
    "log among the inputs": (["t.json", "gpu.log"], "gpu.log"),
    "log found beside the trace": (["t.json"], "gpu.log"),
    "trace of the chosen run": (["logdir"], "logdir/worker0.1795323317686400188.pt.trace.json"),
    "trace of another run": (["logdir"], "logdir/worker0.1795323317679782944.pt.trace.json"),
}


@pytest.mark.slow
@pytest.mark.parametrize("force", [False, True], ids=["", "force"])
@pytest.mark.parametrize("case", CLASHES)
def test_report_never_writes_over_an_input(work, case, force):
    inputs, output = CLASHES[case]
    output = output.format(tmp=work)
    before = {p: digest(p) for p in work.rglob("*") if p.is_file()}
    res = run(["report", *inputs, "-o", output, "--format", "json", *(["--force"] if force else [])], cwd=work)
    assert res.returncode == 2, res.stderr
    errors = [line for line in res.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "is an input" in errors[0] and "Traceback" not in res.stderr, res.stderr
    assert {p: digest(p) for p in work.rglob("*") if p.is_file()} == before


@pytest.mark.slow
def test_report_and_diff_refuse_an_input_even_with_force(work):
    before = digest(work / "t.json")
    one_error_line(run(["report", "t.json", "-o", "hard.json", "--force"], cwd=work), "is an input", "(it is t.json)")
    one_error_line(run(["diff", "t.json", "link.json", "-o", "t.json", "--force"], cwd=work), "is an input")
    one_error_line(run(["diff", "t.json", "t.json", "--dmon", "gpu.log", "-o", "gpu.log", "--force"], cwd=work),
                   "is an input")
    assert digest(work / "t.json") == before
    # a file that is no input is still replaced with --force
    (work / "out.md").write_text("old")
    assert run(["report", "t.json", "-o", "out.md", "--force", "-q"], cwd=work).returncode == 0
    assert (work / "out.md").read_text().startswith("## ")


def test_all_runs_outputs_never_collide(tmp_path):
    """Runs 'a_b' and 'a/b' both map to out.a_b_...json: the second gets a distinct name."""
    for folder in ("a_b", "a/b"):
        (tmp_path / "logs" / folder).mkdir(parents=True)
        KinetoTrace().step(1, 0, 1000).kernel(100, 300).write(tmp_path / "logs" / folder / "w.1.pt.trace.json")
    res = run(["report", "logs", "--all-runs", "-o", "out.json", "-q"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    outputs = sorted(p.name for p in tmp_path.glob("out.*.json"))
    assert len(outputs) == 2, outputs
    assert unique_targets([Path("o.x.json"), Path("o.x.json"), Path("o.x.2.json")]) == [
        Path("o.x.json"), Path("o.x.2.json"), Path("o.x.2.2.json")]
    # runs named alike but for case are one file on case-insensitive file systems (macOS, Windows)
    assert unique_targets([Path("o.Run.json"), Path("o.run.json"), Path("o.RUN.2.json")]) == [
        Path("o.Run.json"), Path("o.run.2.json"), Path("o.RUN.2.2.json")]


BAD_OPTIONS = [
    (["--dmon-offset", "99999999h"], "accepted -8784h to 8784h"),
    (["--dmon-offset", "-9000h"], "accepted -8784h to 8784h"),
    (["--dmon-interval", "0"], "accepted 1ms to 1h"),
    (["--dmon-interval", "-1s"], "accepted 1ms to 1h"),
    (["--dmon-interval", "99999999999999999999999h"], "accepted 1ms to 1h"),
    (["--dmon-start", "0001-01-01 00:00:00"], "from 1970-01-01 to before 2200-01-01"),
    (["--dmon-start", "9999-12-31T23:59:59+05:00"], "from 1970-01-01 to before 2200-01-01"),
    (["--dmon-gpu", "0=99999999999"], "up to 2147483647"),
    (["--dmon-gpu", "9" * 5000 + "=0"], "up to 2147483647"),
    (["--dmon-gpu", "-1=0"], "DMON_INDEX=DEVICE"),
    (["--min-gap", "-5us"], "accepted 0 to 24h"),
    (["--min-gap", "100000h"], "accepted 0 to 24h"),
    (["--max-input-size", "0"], "accepted 1B to 1PiB"),
    (["--max-input-size", "9" * 400 + "TB"], "accepted 1B to 1PiB"),
    (["--dmon-tz", "+99:00"], "out of range: expected -23:59 to +23:59"),
    (["--dmon-tz", "9" * 300 + "h"], "unknown time zone"),
    (["--fail-on", "gpu_idle>nan"], "is not a number"),
    (["--fail-on", "step_time_ms>1e999"], "is not a number"),
    (["--batch-size", "9" * 30], "is not in the range 1<=x<=1000000000000"),
    (["--jobs", "99999999999999999999"], "is not in the range 1<=x<=4096"),
    (["--no-such-option"], "No such option"),
    (["--format", "pdf"], "'pdf' is not one of"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("args", "says"), BAD_OPTIONS, ids=[" ".join(a)[:40] for a, _ in BAD_OPTIONS])
def test_absurd_option_values_are_one_line_usage_errors(tmp_path, args, says):
    trace = KinetoTrace().step(1, 0, 1000).kernel(100, 300).write(tmp_path / "t.json")
    help_hint = () if args[0] == "--fail-on" else ("(see traceanalyzer report --help)",)  # checked after parsing
    line = one_error_line(run(["report", trace, "-q", "-o", tmp_path / "r.html", *args]), says, *help_hint)
    assert line.startswith("traceanalyzer: error: ") and "Usage:" not in line
    assert not (tmp_path / "r.html").exists()


def invoke(args):
    """In process (fast), stdout and stderr apart."""
    from click.testing import CliRunner

    from traceanalyzer.commands import main

    res = CliRunner().invoke(main, [str(a) for a in args], prog_name="traceanalyzer")
    return subprocess.CompletedProcess(args, res.exit_code, res.stdout, res.stderr)


def test_diff_option_errors_are_one_line(tmp_path):
    trace = KinetoTrace().step(1, 0, 1000).kernel(100, 300).write(tmp_path / "t.json")
    one_error_line(invoke(["diff", trace, trace, "--tolerance", "nan%"]), "--tolerance")
    one_error_line(invoke(["diff", trace]), "Missing argument", "(see traceanalyzer diff --help)")
    one_error_line(invoke(["nosuchcommand"]), "No such command", "(see traceanalyzer --help)")


def test_an_input_is_never_an_output_in_process(work):
    """The quick check of the slow subprocess cases above: a hard link and a dmon log, --force."""
    before = {p: digest(p) for p in (work / "t.json", work / "gpu.log")}
    one_error_line(invoke(["report", work / "t.json", "-o", work / "hard.json", "--force"]), "is an input")
    one_error_line(invoke(["diff", work / "t.json", work / "t.json", "--dmon", work / "gpu.log",
                           "-o", work / "gpu.log", "--force"]), "is an input")
    assert {p: digest(p) for p in before} == before


def test_error_lines_are_inert(tmp_path):
    """A file name with a newline and an escape sequence cannot forge a line or steer the terminal."""
    name = tmp_path / "evil\n\x1b[2Jtraceanalyzer: all fine\u202e.json"
    line = one_error_line(run(["report", name, "-q"]), "no such file")
    assert "\x1b" not in line and "\u202e" not in line and "evil\\ntraceanalyzer: all fine" in line


@pytest.mark.slow
def test_closed_pipe_ends_quietly(tmp_path):
    """`report ... -o - | head -c1`: the reader went away; exit 141 (128 + SIGPIPE), nothing on stderr."""
    trace = KinetoTrace().step(1, 0, 1000).kernel(100, 300).write(tmp_path / "t.json")
    for args in (["-o", "-", "--format", "json"], ["-o", "-", "-q"], ["-o", tmp_path / "r.html"]):
        r, w = os.pipe()
        os.close(r)
        try:
            res = run(["report", trace, *args, "--force"], stdout=w, stderr=subprocess.PIPE, capture=False)
        finally:
            os.close(w)
        assert res.returncode == 141 and res.stderr == "", (args, res.returncode, res.stderr)


@pytest.mark.slow
def test_closed_stdout(tmp_path):
    """stdout closed before the start (`>&-`): a report to stdout is one error line; to a file, fine."""
    trace = KinetoTrace().step(1, 0, 1000).kernel(100, 300).write(tmp_path / "t.json")
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    cmd = [sys.executable, "-m", "traceanalyzer", "report", str(trace)]
    res = subprocess.run(["/bin/bash", "-c", '"$@" >&-', "sh", *cmd, "-o", "-", "--format", "json"],
                         stderr=subprocess.PIPE, text=True, env=env, timeout=120)
    one_error_line(res, "standard output", "closed")
    res = subprocess.run(["/bin/bash", "-c", '"$@" >&-', "sh", *cmd, "-o", str(tmp_path / "r.md")],
                         stderr=subprocess.PIPE, text=True, env=env, timeout=120)
    assert res.returncode == 0 and res.stderr == "" and (tmp_path / "r.md").exists(), res.stderr


def test_library_checks_stay_behind_the_option_ranges(tmp_path):
    """The API (no option parsing) still refuses the values the command line keeps out."""
    import traceanalyzer as ta
    from traceanalyzer.errors import UsageError

    log = tmp_path / "s.log"
    log.write_text("# gpu sm\n# Idx %\n 0 5\n 0 6\n")
    with pytest.raises(UsageError, match="--dmon-interval must be longer than 0"):
        ta.analyze(log, ta.Options(dmon_interval_ns=0, cache=False))
    trace_with_dated_log(tmp_path)
    with pytest.raises(ta.errors.TraceAnalyzerError, match="beyond the times that can be represented"):
        ta.analyze(tmp_path / "t.json", ta.Options(counter_logs=(tmp_path / "g.log",), cache=False,
                                                   dmon_offset_ns=99999999999 * 3_600_000_000_000))


def _edge_inputs(folder: Path) -> list[Path]:
    """Degenerate but valid inputs, where divisions by zero and empty reductions hide."""
    docs = {
        "no_events.json": {"traceEvents": []},
        "metadata_only.json": {"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "x"}}]},
        "one_kernel.json": {"traceEvents": [{"ph": "X", "name": "k", "cat": "kernel", "ts": 5, "dur": 1, "pid": 0,
                                             "tid": 7, "args": {"device": 0, "stream": 7}}]},
    }
    paths = []
    for name, doc in docs.items():
        (folder / name).write_text(json.dumps(doc))
        paths.append(folder / name)
    paths.append(KinetoTrace().step(1, 0, 1000).write(folder / "step_without_kernels.json"))
    paths.append(KinetoTrace().step(1, 0, 0).kernel(0, 0).write(folder / "zero_length.json"))
    paths.append(KinetoTrace().step(1, 0, 1000).memcpy(10, 0, nbytes=0).write(folder / "empty_copy.json"))
    (folder / "dashes.log").write_text("#Date Time gpu pwr sm\n#YYYYMMDD HH:MM:SS Idx W %\n"
                                       + "".join(f"20240104 13:00:{s:02d} 0 - -\n" for s in range(5)))
    paths.append(folder / "dashes.log")
    return paths


@pytest.mark.slow
def test_no_runtime_warnings_on_degenerate_inputs(tmp_path):
    """Warnings are prevented where they arise: with the command line's safety net off
    (TRACEANALYZER_DEBUG) and RuntimeWarning an error, every degenerate input still reports."""
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "TRACEANALYZER_DEBUG": "1"}
    for i, path in enumerate(_edge_inputs(tmp_path)):
        for fmt in (("html", "md", "json")[i % 3],):
            res = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "traceanalyzer", "report",
                                  str(path), "-o", str(tmp_path / f"out.{fmt}"), "--force", "-q"],
                                 capture_output=True, text=True, timeout=120, env=env)
            assert res.returncode in (0, 2) and "Warning" not in res.stderr, (path.name, res.stderr[-800:])


def test_a_stray_warning_never_reaches_stderr(tmp_path, monkeypatch):
    """The safety net: a warning raised anyway is not printed (with its source path) on stderr."""
    import warnings

    from click.testing import CliRunner

    import traceanalyzer.report as report
    from traceanalyzer.commands import main

    real = report.render

    def noisy(*args, **kwargs):
        warnings.warn("invalid value encountered in divide", RuntimeWarning, stacklevel=1)
        return real(*args, **kwargs)

    monkeypatch.setattr(report, "render", noisy)
    trace = KinetoTrace().step(1, 0, 1000).kernel(100, 300).write(tmp_path / "t.json")
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        res = CliRunner().invoke(main, ["report", str(trace), "-o", str(tmp_path / "r.json"), "-q"])
    assert res.exit_code == 0 and "Warning" not in res.output and "divide" not in res.output, res.output
    assert not [w for w in shown if "divide" in str(w.message)]  # never shown, not merely captured
    monkeypatch.setenv("TRACEANALYZER_DEBUG", "1")  # debugging: the warning is shown
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        CliRunner().invoke(main, ["report", str(trace), "-o", str(tmp_path / "r.json"), "-q", "--force"])
    assert [w for w in shown if "divide" in str(w.message)]

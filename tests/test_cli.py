"""The command line: output naming, formats, and one-line errors (exit 2, no traceback)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from kineto_builder import KinetoTrace

from traceanalyzer.commands import main


def run(args, cwd=None):
    """Run the real command in a subprocess, as a user would."""
    return subprocess.run([sys.executable, "-m", "traceanalyzer", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, env={"PYTHONPATH": str(Path(__file__).parent.parent),
                                                               "PATH": "/usr/bin:/bin"})


def small_trace(path: Path) -> Path:
    return KinetoTrace().step(1, 0, 1000).kernel(100, 300).write(path)


@pytest.mark.slow
def test_default_output_name_and_no_overwrite(tmp_path):
    trace = small_trace(tmp_path / "mytrace.json.gz")
    first = run(["report", trace], cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    out = tmp_path / "mytrace.report.html"
    assert out.exists() and "Report (html) written to" in first.stdout
    again = run(["report", trace], cwd=tmp_path)
    assert again.returncode == 2 and "--force" in again.stderr and "Traceback" not in again.stderr
    assert run(["report", trace, "--force"], cwd=tmp_path).returncode == 0


def test_format_from_extension_and_flag(tmp_path):
    trace = small_trace(tmp_path / "t.json")
    runner = CliRunner()
    res = runner.invoke(main, ["report", str(trace), "-o", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["schema"] == "traceanalyzer/3"
    assert doc["ranks"][0]["devices"][0]["gpu_busy_us"] == 300
    res = runner.invoke(main, ["report", str(trace), "--format", "md", "-o", str(tmp_path / "r.txt")])
    assert res.exit_code == 0 and (tmp_path / "r.txt").read_text().startswith("## ")
    res = runner.invoke(main, ["report", str(trace), "--min-gap", "2ms", "--format", "json", "-o", "-"])
    assert json.loads(res.stdout)["options"]["min_gap_us"] == 2000


def test_bad_min_gap_is_a_usage_error(tmp_path):
    trace = small_trace(tmp_path / "t.json")
    res = CliRunner().invoke(main, ["report", str(trace), "--min-gap", "100"])
    assert res.exit_code == 2 and "unit" in res.output


def _bad_inputs(tmp: Path) -> dict[str, tuple[Path, str]]:
    good = json.dumps(KinetoTrace().step(1, 0, 10).kernel(1, 2).document()).encode()
    files = {
        "empty": (b"", "empty"),
        "not_json": (b"hello, this is not a trace\n", "not a supported trace"),
        "truncated_gzip": (gzip.compress(good)[:40], "truncated gzip"),
        "no_trace_events": (b'{"schema": "1.0.1", "nodes": []}', "without a 'traceEvents' list"),
        "json_list": (b"[[1, 2, 3, 4]]", "is a list"),
        "malformed": (good.replace(b'"ph"', b'"ph" "', 1), "malformed JSON at line 1"),
    }
    out = {}
    for name, (data, expected) in files.items():
        p = tmp / f"{name}.pt.trace.json"
        p.write_bytes(data)
        out[name] = (p, expected)
    return out


@pytest.mark.parametrize("case", ["empty", "not_json", "truncated_gzip", "no_trace_events",
                                  "json_list", "malformed"])
def test_bad_input_one_line_exit_2(tmp_path, case):
    path, expected = _bad_inputs(tmp_path)[case]
    res = run(["report", path, "-o", tmp_path / "out.html"])
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert str(path) in lines[0] and expected in lines[0]
    assert "Traceback" not in res.stderr and not (tmp_path / "out.html").exists()


def test_missing_file(tmp_path):
    res = run(["report", tmp_path / "nope.json"])
    assert res.returncode == 2 and "no such file" in res.stderr


def test_help_teaches():
    res = CliRunner().invoke(main, ["report", "--help"])
    assert res.exit_code == 0
    for word in ("--min-gap", "--format", "--force", "ProfilerStep", "Exit status"):
        assert word in res.output


@pytest.mark.slow
def test_decompression_is_bounded(tmp_path):
    """A gzip bomb (50 MB of JSON whitespace in ~50 KB) is refused under a 1 MB limit, in one line."""
    good = json.dumps(KinetoTrace().step(1, 0, 10).kernel(1, 2).document()).encode()
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(good[:-1] + b" " * 50_000_000 + b"}", compresslevel=9))
    assert bomb.stat().st_size < 200_000
    res = run(["report", bomb, "--max-input-size", "1MB", "-o", tmp_path / "o.json"])
    assert res.returncode == 2 and "decompresses to more than the input limit of 1000000 bytes" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    plain = tmp_path / "big.json"
    plain.write_bytes(good[:-1] + b" " * 2_000_000 + b"}")
    res = run(["report", plain, "--max-input-size", "1MiB", "-o", tmp_path / "o.json"])
    assert res.returncode == 2 and "larger than the input limit of 1048576 bytes" in res.stderr
    # a plain file over the limit is refused from its size, before any of it is read (a sparse 64 GiB file)
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as fh:
        fh.write(good[:-1])
        fh.truncate(64 * 1024**3)
    res = run(["report", huge, "--max-input-size", "1MiB", "-o", tmp_path / "o.json"])
    assert res.returncode == 2 and f"(it holds {64 * 1024**3} bytes)" in res.stderr
    assert "--max-input-size" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    # within the default limit the same files are fine
    assert run(["report", bomb, "-o", tmp_path / "ok.json"]).returncode == 0


def test_size_units():
    from traceanalyzer.units import parse_size_bytes

    assert parse_size_bytes("16GiB") == 16 * 1024**3
    assert parse_size_bytes("500MB") == 500_000_000
    assert parse_size_bytes("2G") == 2 * 1024**3
    assert parse_size_bytes("123") == 123
    with pytest.raises(ValueError):
        parse_size_bytes("lots")


def test_truncated_trace_is_reported_with_a_prominent_warning(tmp_path):
    doc = KinetoTrace().step(1, 0, 100).kernel(1, 20).kernel(40, 20).step(2, 100, 100).kernel(120, 20).document()
    good = json.dumps(doc).encode()
    path = tmp_path / "cut.pt.trace.json"
    path.write_bytes(good[: good.rindex(b'"ph"') - 3])  # cut inside the last event
    res = run(["report", path, "-o", tmp_path / "out.md"])
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[1].startswith("WARNING: ") and "TRUNCATED" in res.stdout
    md = (tmp_path / "out.md").read_text()
    assert "> [!WARNING]" in md and "TRUNCATED" in md

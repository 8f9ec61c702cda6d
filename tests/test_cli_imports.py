"""The command line answers `--version` and `--help` without loading the analysis code (issue 45): neither
pandas nor numpy is imported by the entry point, by `--version`, by `--help` or by any subcommand's `--help`.
A test of imports, not of time (benchmarks/cli_startup.py measures the time, against a bare `import numpy`).
The constants the help text shows without importing their modules are checked against those modules here."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

HEAVY = ("pandas", "numpy")

PROBE = """
import sys
from click.testing import CliRunner
from traceanalyzer.commands import main
result = CliRunner().invoke(main, {args!r})
assert result.exit_code == 0, (result.exit_code, result.output)
assert {expect!r} in result.output, result.output
loaded = sorted(m for m in {heavy!r} if m in sys.modules)
print("LOADED", loaded)
"""


@pytest.mark.parametrize(("args", "expect"), [
    (["--version"], "traceanalyzer, version"),
    (["--help"], "Why is my training slow?"),
    (["report", "--help"], "Analyse TRACES and write a report"),
    (["diff", "--help"], "Compare BASE (before a change) with HEAD"),
    (["serve", "--help"], "Usage: main serve"),
    (["upload", "--help"], "Usage: main upload"),
    (["whatif", "--help"], "Project what a change would save"),
])
def test_version_and_help_load_neither_pandas_nor_numpy(args, expect):
    code = PROBE.format(args=args, expect=expect, heavy=HEAVY)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "LOADED []" in done.stdout, f"{' '.join(args)} imported {done.stdout.strip()}"


def test_importing_the_package_loads_neither_and_its_names_still_resolve():
    code = ("import sys, traceanalyzer as ta\n"
            f"assert not any(m in sys.modules for m in {HEAVY!r})\n"
            "assert callable(ta.analyze) and callable(ta.load) and ta.Analysis and ta.Options\n"
            "assert 'pandas' in sys.modules\n"
            "from traceanalyzer import analyze, Analysis\n"
            "print('OK')\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "OK" in done.stdout, done.stderr


def test_constants_written_for_the_help_are_the_library_s():
    from traceanalyzer import compare, timeline
    from traceanalyzer.causes import DATALOADER_KIND
    from traceanalyzer.commands.diff import RUN_NOISE_DEFAULT, TOLERANCE_DEFAULT

    assert DATALOADER_KIND == timeline.DATALOADER
    assert RUN_NOISE_DEFAULT == f"{compare.RUN_NOISE:.0%}"
    assert TOLERANCE_DEFAULT == f"{compare.DEFAULT_TOLERANCE:.0%}"


REPORT_PROBE = """
import sys
from click.testing import CliRunner
from traceanalyzer.commands import main
result = CliRunner().invoke(main, ["report", {trace!r}, "-o", {out!r}, "-q", "--no-cache"])
assert result.exit_code == 0, (result.exit_code, result.output)
print("LOADED", sorted(m for m in {unneeded!r} if m in sys.modules))
"""


@pytest.mark.slow
def test_a_report_of_a_chrome_trace_loads_no_comparison_and_no_protobuf(tmp_path):
    """What a report of a Kineto JSON does not need: the comparison (`report` gates read the run's metrics
    only) and protobuf (the XSpace reader imports it when it reads, not when the registry sniffs)."""
    unneeded = ("traceanalyzer.compare", "google.protobuf", "traceanalyzer.formats._xplane_pb")
    code = REPORT_PROBE.format(trace=str(ROOT / "sample_traces" / "input_bound.json"),
                               out=str(tmp_path / "r.html"), unneeded=unneeded)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "LOADED []" in done.stdout, done.stdout

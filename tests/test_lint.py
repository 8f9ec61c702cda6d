"""ruff and mypy are part of the test suite, so CI keeps the package clean."""

import shutil
import subprocess
import sys

import pytest
from conftest import ROOT


def _tool(name: str) -> list[str]:
    exe = shutil.which(name, path=str(ROOT / ".venv" / "bin")) or shutil.which(name)
    return [exe] if exe else [sys.executable, "-m", name]


def test_ruff_clean():
    res = subprocess.run([*_tool("ruff"), "check", "traceanalyzer", "tests", "benchmarks"], cwd=ROOT,
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.slow
def test_mypy_clean():
    res = subprocess.run([sys.executable, "-m", "mypy", "traceanalyzer"], cwd=ROOT, capture_output=True,
                         text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr

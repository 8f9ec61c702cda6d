"""Shared fixtures. Real traces live in ../shared/corpus (never copied into this repository).

Tests that need the corpus use the `corpus` fixture: it skips when the folder is absent on a
developer machine, but fails loudly when the CI environment variable is set.

The fast set (`pytest -m "not slow"`, about a minute) leaves out the tests marked `slow` by hand and
those recorded at `SLOW_S` seconds or more in `durations.json`. The run records itself: with
TRACEANALYZER_RECORD_DURATIONS=1 (CI) its durations are merged into `durations.json` when it ends, and the
tests over `record_durations.HAND_SLOW_S` not marked `slow` by hand are listed (`test_durations.py` fails
on them once recorded).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("TRACEANALYZER_CORPUS", ROOT.parent / "shared" / "corpus"))
SAMPLES = ROOT / "sample_traces"
DURATIONS = Path(__file__).resolve().parent / "durations.json"
SLOW_S = 0.15  # a test recorded at this or more (in CI, on 2 cores) is in the full set only


_TOOK: dict[str, float] = {}  # this run's durations (setup + call + teardown), by test id


def pytest_collection_modifyitems(config, items):
    """Tests recorded as slow in `durations.json` are marked `slow` (the fast set leaves them out)."""
    recorded = json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}
    for item in items:
        if recorded.get(item.nodeid, 0.0) >= SLOW_S:
            item.add_marker(pytest.mark.slow)


def pytest_runtest_logreport(report):
    """Each test's duration, summed over its phases (with xdist, the controller hears every worker's)."""
    _TOOK[report.nodeid] = _TOOK.get(report.nodeid, 0.0) + report.duration


def _recording(config) -> bool:
    from record_durations import RECORD_ENV

    return bool(os.environ.get(RECORD_ENV)) and not hasattr(config, "workerinput")


def pytest_sessionfinish(session, exitstatus):
    """With TRACEANALYZER_RECORD_DURATIONS set: the run's durations merged into `durations.json`."""
    if _recording(session.config) and _TOOK:
        from record_durations import merge

        merge(_TOOK, DURATIONS)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """When recording: the tests of this run over HAND_SLOW_S that are not marked `slow` by hand."""
    if not _recording(config) or not _TOOK:
        return
    from record_durations import HAND_SLOW_S, unmarked_slow, written_tests

    late = unmarked_slow(_TOOK, written_tests(DURATIONS.parent))
    if late:
        terminalreporter.write_sep("-", f"tests over {HAND_SLOW_S:g} s not marked slow (mark them @pytest.mark.slow)")
        for test_id, seconds in late:
            terminalreporter.write_line(f"{seconds:6.2f} s  {test_id}")


@pytest.fixture(autouse=True, scope="session")
def _private_cache_dir(tmp_path_factory):
    """The cache of decoded big traces goes to a folder of this test session, not the user's."""
    if not os.environ.get("TRACEANALYZER_CACHE_DIR"):
        os.environ["TRACEANALYZER_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    yield


def corpus_path() -> Path:
    if not CORPUS.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"the real-trace corpus is missing at {CORPUS} (CI is set, so this is an error)")
        pytest.skip(f"corpus not found at {CORPUS}")
    return CORPUS


@pytest.fixture
def corpus() -> Path:
    return corpus_path()


def kineto_corpus_files() -> list[Path]:
    """Every JSON / JSON.gz file in the corpus (traces and the non-trace look-alikes)."""
    if not CORPUS.is_dir():
        return []
    return sorted(p for p in CORPUS.rglob("*") if p.is_file() and (p.name.endswith(".json") or p.name.endswith(".json.gz")))


@pytest.fixture
def machine_in_new_york(monkeypatch):
    """This machine's zone is New York, unlike the zone of the machine that wrote a log: tests of
    clock alignment set TZ explicitly so they never depend on where they run."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()

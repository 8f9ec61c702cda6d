"""The oldest versions CI tests against (.ci/oldest.txt) are the lower bounds pyproject.toml declares:
a bound raised or lowered without the pin (or the other way round) fails here, not at a user's."""

from __future__ import annotations

from importlib.metadata import requires
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


def _lower_bounds() -> dict[str, str]:
    """The core dependencies' lower bounds, from the installed package's metadata (pyproject.toml's)."""
    out = {}
    for text in requires("traceanalyzer-ml") or []:
        req = Requirement(text)
        if req.marker is not None:  # an extra's
            continue
        (spec,) = req.specifier  # one plain lower bound each
        assert spec.operator == ">=", f"dependency without a plain lower bound: {text!r}"
        out[req.name.lower()] = spec.version
    return out


def _pins() -> dict[str, str]:
    out = {}
    for line in (ROOT / ".ci" / "oldest.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            out[name.lower()] = version
    return out


def test_every_core_dependency_is_pinned_at_its_lower_bound():
    pins, bounds = _pins(), _lower_bounds()
    assert set(pins) == set(bounds)
    assert {k: Version(v) for k, v in pins.items()} == {k: Version(v) for k, v in bounds.items()}


def test_ci_runs_the_fast_set_against_the_pins():
    run = (ROOT / ".ci" / "run").read_text()
    assert "-c .ci/oldest.txt" in run and '-m "not slow"' in run

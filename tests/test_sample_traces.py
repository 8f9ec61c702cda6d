"""sample_traces/: the committed synthetic traces are exactly what make_synthetic.py writes.

Re-runs the generator into a temporary folder and compares every file with the committed
copy, so that the generator, the traces and their expected answers never drift apart.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("synthetic")
    subprocess.run([sys.executable, str(SAMPLES / "make_synthetic.py"), str(out)], check=True)
    return out


def _generated_files(root: Path) -> list[Path]:
    return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())


def _gunzip_prefix(data: bytes) -> bytes:
    """Whatever a (possibly cut) gzip stream decompresses to."""
    d = zlib.decompressobj(wbits=31)
    return d.decompress(data)


def test_generator_matches_committed_files(regenerated: Path) -> None:
    rels = _generated_files(regenerated)
    assert rels, "make_synthetic.py wrote nothing"
    for rel in rels:
        committed = SAMPLES / rel
        assert committed.is_file(), f"{rel} is generated but not committed"
        new, old = (regenerated / rel).read_bytes(), committed.read_bytes()
        if rel.name == "truncated.json.gz":
            # compressed bytes may differ between zlib builds; what they inflate to must not
            assert _gunzip_prefix(old) and (SAMPLES / "basic.json").read_bytes().startswith(_gunzip_prefix(old))
            assert len(old) < len(gzip.compress((SAMPLES / "basic.json").read_bytes()))
        elif rel.suffix == ".gz":
            assert gzip.decompress(new) == gzip.decompress(old), f"{rel} drifted from make_synthetic.py"
        else:
            assert new == old, f"{rel} drifted from make_synthetic.py"


def test_every_synthetic_trace_has_a_sidecar() -> None:
    for trace in list(SAMPLES.glob("*.json")) + list(SAMPLES.glob("*.json.gz")):
        if trace.name.endswith(".expected.json"):
            continue
        stem = trace.name.removesuffix(".gz").removesuffix(".json")
        assert (SAMPLES / f"{stem}.expected.json").is_file(), f"{trace.name} has no sidecar"


def test_files_are_small() -> None:
    for p in SAMPLES.rglob("*"):
        if p.is_file():
            assert p.stat().st_size < 200_000, f"{p} is too big"


def test_sidecars_are_consistent() -> None:
    for side in SAMPLES.glob("*.expected.json"):
        exp = json.loads(side.read_text())
        if exp.get("made_by") != "sample_traces/make_synthetic.py" or exp.get("gpu_busy_us") is None:
            continue
        w = exp["window"]["window_us"]
        assert exp["gpu_busy_us"] + exp["gpu_idle_us"] == w
        assert sum(s["duration_us"] for s in exp["steps"]) == w
        assert exp["idle_gaps_total_us"] == sum(g["duration_us"] for g in exp["idle_gaps"])
        assert all(g["duration_us"] >= exp["idle_gap_threshold_us"] for g in exp["idle_gaps"])


def test_bad_inputs_are_bad() -> None:
    bad = SAMPLES / "bad"
    assert (bad / "empty.json").stat().st_size == 0
    for name in ("not_json.json", "truncated.json"):
        with pytest.raises(ValueError):
            json.loads((bad / name).read_bytes())
    with pytest.raises((EOFError, OSError)):
        gzip.decompress((bad / "truncated.json.gz").read_bytes())
    assert "traceEvents" not in json.loads((bad / "no_trace_events.json").read_text())
    assert isinstance(json.loads((bad / "list.json").read_text()), list)

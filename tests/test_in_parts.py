"""A trace analysed whole equals the same trace analysed in parts (issue 36, item 4): a replica of N
copies of a capture against the capture itself (`benchmarks/in_parts.py`, the check a 21 GB replica
of a real capture passed whole, verdict included), on built traces here; the script's own comparison
fails when a figure disagrees.

The built samples are a few steps long, so the stretch between two copies (the replica's seam: the
next copy's first work was queued before the previous copy's GPU work ended) is a large part of the
window: shares of the window and the verdict are compared on the real replica only."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pytest

import traceanalyzer as ta

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_large import build_replica  # noqa: E402
from in_parts import compare  # noqa: E402

SAMPLES = ROOT / "sample_traces"
SEAM_DEPENDENT = {"gpu_idle_fraction", "memcpy_share_of_busy", "dataloader_wait_fraction", "verdict"}


def _report(path: Path) -> dict:
    return orjson.loads(ta.analyze(path, ta.Options(cache=False, jobs=1)).to_json())


@pytest.mark.parametrize("sample", ["host_bound.json", "gpu_bound.json", "sync_bound.json"])
def test_a_replica_is_its_parts(tmp_path, sample):
    source = SAMPLES / sample
    one = tmp_path / "one.json"
    many = tmp_path / "many.json"
    copies_one, _ = build_replica(source, one, 1)
    copies, _ = build_replica(source, many, 7 * source.stat().st_size)
    assert copies_one == 1 and copies >= 5
    whole, part = _report(many), _report(one)
    assert whole["summary"]["steps"] == copies * part["summary"]["steps"]
    rows = [r for r in compare(whole, [part], share_tolerance=0.02) if r[0] not in SEAM_DEPENDENT]
    assert len(rows) == 9 and all(ok for *_, ok in rows), [r for r in rows if not r[3]]


def test_a_disagreement_is_found(tmp_path):
    one = tmp_path / "one.json"
    build_replica(SAMPLES / "host_bound.json", one, 1)
    part = _report(one)
    whole = orjson.loads(orjson.dumps(part))
    whole["ranks"][0]["per_step"][0]["idle_us"] += 5.0  # one step of the whole idles 5 us longer
    whole["summary"]["step_time_median_us"] += 1.0
    failed = {name for name, _, _, ok in compare(whole, [part], share_tolerance=0.02) if not ok}
    assert {"distinct per-step rows", "step_time_median_us"} <= failed
    assert any(name.startswith("idle_us in steps") for name in failed)

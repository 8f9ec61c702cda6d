"""The verdict benchmark: real public traces whose truth was established from their raw events
(`benchmarks/verdicts/truth.py`, which reads them without this package) and their sources, with the
verdict a good tool must give (`benchmarks/verdicts/TABLE.tsv`).

Corpus rows read `../shared/corpus` (absent corpus: skip, or fail under CI, as in conftest); fetched
rows read the folder `benchmarks/verdicts/fetch_traces.py` fills and skip when a file is absent. A row
the analyzer gets wrong today carries its reason in `known_miss` and is a strict xfail, so fixing it
shows as an unexpected pass until the row is flipped. `python benchmarks/verdicts/score.py` prints the
accuracy table that `docs/diagnosis.md` publishes.
"""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

import pytest
from conftest import CORPUS, ROOT, corpus_path

from traceanalyzer.diagnosis import VERDICTS

BENCH = ROOT / "benchmarks" / "verdicts"
TABLE = BENCH / "TABLE.tsv"
FETCHED = Path(os.environ.get("TRACEANALYZER_FETCHED", CORPUS.parent / "corpus_fetched"))
COLUMNS = ["id", "category", "origin", "file", "source_repo", "commit", "source_path", "source_says", "gpu_framework", "truth",
           "expected", "acceptable", "must_not", "known_miss"]
CATEGORIES = ("training", "inference", "serving", "micro-benchmark", "cpu", "multi-rank", "logs")
SLOW_BYTES = 200_000  # rows with a larger file run with the full suite only


def _rows() -> list[dict[str, str]]:
    with TABLE.open(newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


ROWS = _rows()


def _split(cell: str) -> set[str]:
    return {v.strip() for v in cell.split(",") if v.strip()}


def _size(row: dict[str, str]) -> int:
    base = CORPUS if row["origin"] == "corpus" else FETCHED
    return sum((base / f).stat().st_size for f in row["file"].split(";") if (base / f).is_file())


def _param(row: dict[str, str]):
    marks = []
    if row["known_miss"]:
        marks.append(pytest.mark.xfail(strict=True, reason=row["known_miss"]))
    if _size(row) > SLOW_BYTES:
        marks.append(pytest.mark.slow)
    return pytest.param(row, id=row["id"], marks=marks)


def _files(row: dict[str, str]) -> list[Path]:
    if row["origin"] == "corpus":
        files = [corpus_path() / f for f in row["file"].split(";")]
        absent = [str(f) for f in files if not f.exists()]
        if absent:
            if os.environ.get("CI"):
                pytest.fail(f"corpus file(s) missing under CI: {', '.join(absent)}")
            pytest.skip(f"corpus file(s) absent: {', '.join(absent)}")
        return files
    files = [FETCHED / f for f in row["file"].split(";")]
    if not all(f.is_file() for f in files):
        pytest.skip(f"fetched trace absent (run benchmarks/verdicts/fetch_traces.py): {row['file']}")
    return files


@pytest.mark.slow
@pytest.mark.parametrize("row", [_param(r) for r in ROWS])
def test_verdict(row):
    import traceanalyzer as ta

    files = _files(row)
    got = ta.analyze(files[0] if len(files) == 1 else files).diagnosis.primary
    assert got not in _split(row["must_not"]), f"{row['id']}: {got} is a verdict this trace must not get"
    assert got in {row["expected"]} | _split(row["acceptable"]), (
        f"{row['id']}: verdict {got}, expected {row['expected']} (truth: {row['truth']})")


def test_table_is_well_formed():
    with TABLE.open(newline="") as f:
        assert next(csv.reader(f, delimiter="\t")) == COLUMNS
    assert len(ROWS) >= 100
    assert len({r["id"] for r in ROWS}) == len(ROWS)
    for r in ROWS:
        assert r["origin"] in ("corpus", "fetched"), r["id"]
        assert r["category"] in CATEGORIES, r["id"]
        assert r["truth"] and r["source_says"] and r["source_repo"] and r["file"], r["id"]
        named = {r["expected"]} | _split(r["acceptable"]) | _split(r["must_not"])
        assert named <= set(VERDICTS), (r["id"], named - set(VERDICTS))
        assert not ({r["expected"]} | _split(r["acceptable"])) & _split(r["must_not"]), r["id"]
        if r["origin"] == "fetched":  # the fetch script needs the commit to extract it
            assert len(r["commit"]) == 40 and r["source_path"], r["id"]


def test_truth_script_stands_apart_from_the_package():
    """The truth is read with orjson and numpy only: a script importing the analyzer could not check it."""
    text = (BENCH / "truth.py").read_text()
    assert "traceanalyzer" not in text.replace("`traceanalyzer`", "")
    assert "pandas" not in text


def test_docs_publish_every_row():
    doc = (ROOT / "docs" / "diagnosis.md").read_text()
    section = doc[doc.index("<!-- verdict-accuracy: begin -->"):doc.index("<!-- verdict-accuracy: end -->")]
    for r in ROWS:
        assert f"| {r['id']} |" in section, r["id"]


def test_truth_on_a_built_trace(tmp_path):
    """The truth script's gap rule on a trace built here: a gap whose next kernel was launched before it
    began is device-side; one launched after it began is host-caused up to the launch's return (held by
    the DataLoader wait here), device-side after it."""
    import orjson

    def x(name, cat, ts, dur, **args):
        return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": args}

    def k(name, ts, dur, corr):
        return {"ph": "X", "name": name, "cat": "kernel", "ts": ts, "dur": dur, "pid": 0, "tid": 7,
                "args": {"device": 0, "stream": 7, "correlation": corr}}

    events = [
        x("ProfilerStep#1", "user_annotation", 0, 2000),
        x("cudaLaunchKernel", "cuda_runtime", -10, 5, correlation=1),
        x("cudaLaunchKernel", "cuda_runtime", 20, 5, correlation=2),  # queued before the gap at 100-300
        x("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "user_annotation", 400, 500),
        x("cudaLaunchKernel", "cuda_runtime", 950, 10, correlation=3),  # returns as the gap 500-960 ends
        x("cudaLaunchKernel", "cuda_runtime", 1010, 5, correlation=4),  # queued 15 us into the gap 1000-1800
        k("a", 0, 100, 1), k("b", 300, 200, 2), k("c", 960, 40, 3), k("d", 1800, 200, 4),
    ]
    path = tmp_path / "built.json"
    path.write_bytes(orjson.dumps({"traceEvents": events}))
    sys.path.insert(0, str(BENCH))
    from truth import truth

    (rank,) = truth([path])["ranks"]
    (dev,) = rank["devices"]
    assert rank["steps"] == 1 and rank["span_us"] == 2000
    assert dev["busy_us"] == 540 and dev["idle_us"] == 1460
    # 100-300 queued before; 1000-1800: the host held the GPU only until its launch returned (15 us)
    assert dev["idle_split_us"]["device_side"] == 200 + 785
    assert dev["idle_split_us"]["host_caused"] == 460 + 15
    assert dev["host_caused_by_us"] == {"dataloader": 460, "host work: ProfilerStep#1": 15}
    assert rank["dataloader_total_us"] == 500

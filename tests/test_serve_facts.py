"""What the run page says of a stored file (its format, whether Perfetto opens it) is found by the analysis,
never by the web server reading the trace; runs analysed before it was stored get it from their saved report
at the next start (migration blob_0006)."""

from __future__ import annotations

import shutil
from pathlib import Path

import traceanalyzer as ta
from traceanalyzer.serve.jobs import backfill_metrics
from traceanalyzer.serve.settings import Settings
from traceanalyzer.serve.store import Store, StoredFile, jobs

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"


def test_runs_analysed_before_the_facts_were_stored_get_them_from_their_saved_report(tmp_path, monkeypatch):
    settings = Settings(tmp_path / "data")
    settings.make_dirs()
    store = Store(settings.database_url)
    store.migrate()
    try:
        names = ("basic.json", "basic.pftrace")
        run_ids = [store.create_run("old", None, None, [StoredFile(f"{i:064x}", name, 100, "file")])
                   for i, name in enumerate(names)]
        gone = store.create_run("old", None, None, [StoredFile("f" * 64, "lost.json", 100, "file")])
        with store.engine.begin() as c:  # analysed by an older version: done, facts unknown
            c.execute(jobs.update().values(status="done"))
        for run_id, name in zip(run_ids, names, strict=True):  # its saved report, as its analysis process saw it
            work = tmp_path / f"work-{run_id}"
            (work / "0").mkdir(parents=True)
            shutil.copy(SAMPLES / name, work / "0" / name)
            monkeypatch.chdir(work)
            (settings.reports / run_id).mkdir()
            ta.analyze(Path("0") / name, ta.Options(cache=False)).save(settings.reports / run_id / "report.json")
        assert [f.perfetto for r in (*run_ids, gone) for f in store.files(r)] == [None, None, None]
        backfill_metrics(settings, store)
        facts = {r: [(f.format, f.perfetto) for f in store.files(r)] for r in (*run_ids, gone)}
        assert store.runs_without_file_facts() == []  # not tried again
    finally:
        store.close()
    assert facts == {run_ids[0]: [("kineto", True)], run_ids[1]: [("pftrace", True)], gone: [(None, False)]}

"""Edges of the service, in process: a killed worker's job folders are removed by the next worker (of
any host) once no worker holds their try; absolute links come only from --public-url (never the Host
header; one warning when a proxy header is seen without it); the Perfetto hand-off carries no address
but the public one."""

from __future__ import annotations

import pytest
from serve_helpers import SAMPLES

pytest.importorskip("starlette")

from starlette.testclient import TestClient  # noqa: E402

from traceanalyzer.serve.app import create_app  # noqa: E402
from traceanalyzer.serve.jobs import remove_stale_work  # noqa: E402
from traceanalyzer.serve.settings import Settings  # noqa: E402
from traceanalyzer.serve.store import Store, StoredFile  # noqa: E402


def test_a_killed_workers_job_folders_are_removed_by_the_next_worker(tmp_path):
    settings = Settings(data=tmp_path / "data")
    settings.make_dirs()
    store = Store(settings.database_url)
    try:
        store.migrate()
        f = StoredFile("a" * 64, "t.json", 10, "file")
        run = store.create_run("p", None, None, [f])
        dead = store.claim("elsewhere:4242:x", lease_s=0.01)  # a worker on another host, then killed
        assert dead is not None and dead.run_id == run
        old = settings.data / "work" / "elsewhere-4242" / f"{dead.id}-{dead.tries}"
        (old / "in").mkdir(parents=True)
        (old / "in" / "t.json").write_bytes(b"x" * 100)
        assert remove_stale_work(settings, store) == 0 and old.exists()  # its try is held (the lease aside)
        import time

        time.sleep(0.05)
        again = store.claim("here:1:y", lease_s=60)  # the next worker takes the job (try 2)
        assert again is not None and again.tries == 2
        new = settings.data / "work" / "here-1" / f"{again.id}-{again.tries}"
        new.mkdir(parents=True)
        unrelated = settings.data / "work" / "elsewhere-4242" / "notes"
        unrelated.mkdir()
        assert remove_stale_work(settings, store) == 1
        assert not old.exists() and new.exists() and unrelated.exists()  # only job folders, only stale ones
        assert store.finish(again, run, None, {"verdict": "ok"})
        assert remove_stale_work(settings, store) == 1 and not new.exists()
    finally:
        store.close()


def test_absolute_links_come_from_public_url_never_the_host_header(tmp_path, capfd):
    app = create_app(Settings(data=tmp_path / "data"), run_jobs=False)
    with TestClient(app, base_url="http://testserver") as client:
        token = app.state.ctx.db.create_token("links", False)
        auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/octet-stream"}
        body = (SAMPLES / "basic.json").read_bytes()
        r = client.post("/api/v1/projects/links/runs", content=body, headers={**auth, "Host": "evil.example"})
        assert r.status_code == 201 and r.json()["url"].startswith("http://testserver/runs/"), r.json()
        assert "proxy" not in capfd.readouterr().err
        for _ in range(3):
            r = client.get(f"/api/v1/runs/{r.json()['id']}", headers={"X-Forwarded-Host": "evil.example",
                                                                       "X-Forwarded-Proto": "https"})
            assert "evil.example" not in r.text and r.json()["url"].startswith("http://testserver/")
        assert capfd.readouterr().err.count("--public-url is not set") == 1  # one warning, not one a request
        # what its analysis finds (no worker here): a file the Perfetto UI opens
        app.state.ctx.db.set_file_facts(r.json()["id"], [{"format": "kineto", "perfetto": True}])
        page = client.get(f"/runs/{r.json()['id']}")
        assert 'class="open-perfetto"' in page.text and "data-url" not in page.text  # no address handed over
    public = create_app(Settings(data=tmp_path / "data", public_url="https://perf.example.com"), run_jobs=False)
    with TestClient(public, base_url="http://testserver") as client:
        run = client.get("/api/v1/runs").json()["runs"][0]
        assert run["url"] == f"https://perf.example.com/runs/{run['id']}"
        page = client.get(f"/runs/{run['id']}", headers={"X-Forwarded-Host": "x"})
        assert f'data-url="https://perf.example.com/runs/{run["id"]}"' in page.text
        assert "--public-url is not set" not in capfd.readouterr().err


def test_runs_of_one_setting_are_the_same_commit_and_label_or_marked_repeats_never_other_commits(tmp_path):
    settings = Settings(data=tmp_path / "data")
    settings.make_dirs()
    store = Store(settings.database_url)
    try:
        store.migrate()

        def run(commit, setting=None, repeat_of=None, branch="main", project="p"):
            f = StoredFile(f"{len(made):064x}", "t.json", 10, "file")
            root = store.repeat_root(project, repeat_of) if repeat_of else None
            run_id = store.create_run(project, branch, commit, [f], setting=setting, repeat_of=root)
            job = store.claim("w:1:x")
            assert job is not None and job.run_id == run_id and store.finish(job, run_id, None, {"verdict": "ok"})
            made.append(run_id)
            return run_id

        made: list[str] = []
        history = [run(f"c{i}") for i in range(4)]  # a branch's runs of four commits
        assert store.repeats(store.run(history[3])) == []  # never other commits
        same = run("c3")  # the same commit, no label on either: one setting
        labelled = run("c3", setting="bs64")  # the same commit, another setting
        other_project = run("c3", project="q")
        assert set(store.repeats(store.run(history[3]))) == {same}
        assert store.repeats(store.run(labelled)) == []
        assert other_project not in store.repeats(store.run(same))
        first = run("c9", branch="pr")
        again = run(None, repeat_of=first)  # marked: no commit needed
        third = run(None, repeat_of=again)  # a repeat of a repeat: recorded against the first
        assert store.run(third)["repeat_of"] == first
        assert set(store.repeats(store.run(first))) == {again, third}
        assert set(store.repeats(store.run(third))) == {first, again}
        assert store.repeats(store.run(first), exclude=[third]) == [again]
        assert store.repeat_root("q", first) is None and store.repeat_root("p", "0" * 12) is None
    finally:
        store.close()


def test_uploads_past_the_cap_get_503_with_retry_after_before_their_body_is_read(tmp_path):
    app = create_app(Settings(data=tmp_path / "data", max_uploads=2), run_jobs=False)
    with TestClient(app, base_url="http://testserver") as client:
        ctx = app.state.ctx
        token = ctx.db.create_token("busy", False)
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/octet-stream"}
        body = (SAMPLES / "basic.json").read_bytes()
        ctx.uploads_active = 2  # two uploads under way
        r = client.post("/api/v1/projects/busy/runs", content=body, headers=headers)
        assert r.status_code == 503 and r.headers["retry-after"] == "2", r.text
        assert r.headers["connection"] == "close" and "2 uploads are under way" in r.json()["error"]
        assert client.get("/api/v1/runs").json()["total"] == 0 and ctx.uploads_active == 2
        ctx.uploads_active = 1
        r = client.post("/api/v1/projects/busy/runs", content=body, headers=headers)
        assert r.status_code == 201 and ctx.uploads_active == 1  # its slot given back
        assert client.get("/runs").status_code == 200

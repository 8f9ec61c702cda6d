"""The service over HTTP: a real `traceanalyzer serve` (uvicorn on a free loopback port, one analysis
worker) driven with httpx, once on SQLite and once on a PostgreSQL server the tests start themselves.

What CI scripts rely on (README, "Serving reports"): upload -> 201 {id, status, url}; the run goes
queued -> done and its report, JSON, Markdown and PR comment are served; the same trace twice is stored
once; over --max-upload is 413 with nothing left on disk; a token only reaches its own project; every
bad request is a 4xx with one line.
"""

from __future__ import annotations

import gzip
import io
import tarfile
import time
import zipfile

import httpx
import pytest
from serve_helpers import BACKENDS, SAMPLES, Server, db_url

MAX_UPLOAD = 2 * 1024**2
TRACE = SAMPLES / "input_bound.json"
DMON = next((SAMPLES / "dmon").glob("*.log"))  # a GPU counter log: analysed, but no trace Perfetto opens


@pytest.fixture(scope="module", params=BACKENDS)
def server(request, tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("serve") / "data", db_url(request.param), "--max-upload", "2MiB",
               "--max-unpacked", "64MiB", "--jobs", "2", "--max-failures", "0")  # tests refuse by the dozen
    s.start()
    yield s
    s.stop()


def files_on_disk(server: Server) -> list[str]:
    return sorted(str(p.relative_to(server.data)) for p in (server.data / "traces").rglob("*") if p.is_file()) + \
        sorted(str(p.relative_to(server.data)) for p in (server.data / "tmp").rglob("*"))


def one_line_error(r: httpx.Response, status: int) -> str:
    assert r.status_code == status, (r.status_code, r.text)
    message = r.json()["error"]
    assert message and "\n" not in message and "Traceback" not in message
    return message


@pytest.mark.slow
def test_upload_is_analysed_and_served(server):
    token = server.token("demo")
    r = server.upload(token, TRACE, branch="main", commit="0123456789abcdef")
    assert r.status_code == 201, r.text
    created = r.json()
    assert set(created) == {"id", "status", "url"} and created["status"] == "queued"
    assert created["url"] == f"{server.url}/runs/{created['id']}"
    run = server.wait(created["id"])
    assert run["status"] == "done", run
    assert run["project"] == "demo" and run["branch"] == "main" and run["commit"] == "0123456789abcdef"
    assert run["error"] is None and run["verdict"] == "input_bound" and run["step_time_ms"] == pytest.approx(10.0)
    assert run["url"] == created["url"] and len(run["sha256"]) == 1 and len(run["sha256"][0]) == 64

    page = server.get(f"/runs/{run['id']}")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert f'src="/runs/{run["id"]}/report.html"' in page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]
    report = server.get(f"/runs/{run['id']}/report.html")
    assert report.status_code == 200 and "Input bound" in report.text
    csp = report.headers["content-security-policy"]
    assert "sandbox allow-scripts" in csp and "'unsafe-inline'" not in csp.split("style-src-attr")[0]
    saved = server.get(f"/api/v1/runs/{run['id']}/report.json").json()
    assert saved["schema"].startswith("traceanalyzer/")
    md = server.get(f"/runs/{run['id']}/report.md")
    assert md.status_code == 200 and "Input bound" in md.text
    comment = server.get(f"/runs/{run['id']}/comment.md").text
    assert f"]({server.url}/runs/{run['id']})" in comment and "Input bound" in comment
    assert server.get(f"/runs/{run['id']}/files/0").content == TRACE.read_bytes()

    listed = server.get("/api/v1/runs", params={"project": "demo", "branch": "main"}).json()
    assert run["id"] in [x["id"] for x in listed["runs"]]
    runs_page = server.get("/runs", params={"project": "demo"})
    assert runs_page.status_code == 200 and run["id"] in runs_page.text and "input_bound" in runs_page.text
    projects = server.get("/api/v1/projects").json()["projects"]
    assert {"name": "demo", "runs": 1, "last_upload": run["created_at"]} in projects
    assert "/runs?project=demo" in server.get("/projects").text
    assert server.get("/projects/demo").headers["location"] == "/runs?project=demo"


@pytest.mark.slow
def test_multipart_with_several_files_and_fields(server):
    token = server.token("multi")
    files = [("file", ("rank0.json", (SAMPLES / "comm_rank0.json").read_bytes(), "application/json")),
             ("file", ("rank1.json", (SAMPLES / "comm_rank1.json").read_bytes(), "application/json"))]
    r = httpx.post(f"{server.url}/api/v1/projects/multi/runs", files=files, data={"branch": "feature/x"},
                   headers={"Authorization": f"Bearer {token}"}, timeout=60)
    assert r.status_code == 201, r.text
    run = server.wait(r.json()["id"])
    assert run["status"] == "done", run
    assert run["branch"] == "feature/x" and run["files"] == 2 and len(run["sha256"]) == 2
    # a trace with the glances log recorded beside it: one job, the log on the trace's clock
    files = [("file", (p.name, p.read_bytes())) for p in (SAMPLES / "glances" / "cpu_aug.trace.json",
                                                          SAMPLES / "glances" / "cpu_aug.csv")]
    r = httpx.post(f"{server.url}/api/v1/projects/multi/runs", files=files,
                   headers={"Authorization": f"Bearer {token}"}, timeout=60)
    run = server.wait(r.json()["id"])
    assert run["status"] == "done", run
    assert "CPU-bound" in server.get(f"/runs/{run['id']}/report.md").text


@pytest.mark.slow
def test_zipped_log_dir_is_unpacked_and_analysed(server):
    token = server.token("logdir")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for p in sorted((SAMPLES / "torch_cpu_logdir").glob("worker0.*")):  # one rank of each span
            z.write(p, f"logdir/{p.name}")
    r = server.upload(token, project="logdir", data=buf.getvalue(), name="logdir.zip")
    assert r.status_code == 201, r.text
    run = server.wait(r.json()["id"])
    assert run["status"] == "done", run


@pytest.mark.slow
def test_same_trace_twice_is_stored_once(server):
    token = server.token("twice")
    data = (SAMPLES / "gpu_bound.json").read_bytes()
    a = server.upload(token, project="twice", data=data, name="a.json").json()
    b = server.upload(token, project="twice", data=data, name="../../b.json").json()
    assert a["id"] != b["id"]
    ra, rb = server.wait(a["id"]), server.wait(b["id"])
    assert ra["status"] == rb["status"] == "done"
    assert ra["sha256"] == rb["sha256"]
    sha = ra["sha256"][0]
    stored = [p for p in (server.data / "traces").rglob("*") if p.is_file() and p.parent.name + p.name == sha]
    assert len(stored) == 1 and stored[0].read_bytes() == data
    assert stored[0].relative_to(server.data).as_posix() == f"traces/{sha[:2]}/{sha[2:]}"
    assert not list(server.data.rglob("b.json"))  # the uploaded name is never a path


def test_upload_over_the_limit_is_413_and_leaves_nothing(server):
    token = server.token("big")
    before = files_on_disk(server)
    big = b"x" * (MAX_UPLOAD + 1)
    one_line_error(server.upload(token, project="big", data=big, name="big.json"), 413)  # Content-Length says so

    def chunks():  # no Content-Length: counted while streaming
        for _ in range(MAX_UPLOAD // 65536 + 2):
            yield b"y" * 65536

    try:
        r = httpx.post(f"{server.url}/api/v1/projects/big/runs", content=chunks(), timeout=60,
                       headers={"Authorization": f"Bearer {token}", "Content-Type": "application/octet-stream"})
        one_line_error(r, 413)
    except httpx.HTTPError:
        pass  # the server answered 413 and closed while the client was still sending
    assert files_on_disk(server) == before
    assert server.get("/api/v1/runs", params={"project": "big"}).json()["total"] == 0


def test_a_token_reaches_only_its_own_project(server):
    mine, other = server.token("alpha"), server.token("beta")
    run = server.upload(mine, project="alpha", data=(SAMPLES / "basic.json").read_bytes()).json()
    one_line_error(server.upload(other, project="alpha", data=b"{}"), 403)
    one_line_error(server.get(f"/api/v1/runs/{run['id']}", headers={"Authorization": f"Bearer {other}"}), 404)
    one_line_error(server.get(f"/api/v1/runs/{run['id']}/report.json",
                              headers={"Authorization": f"Bearer {other}"}), 404)
    assert server.get("/api/v1/runs", headers={"Authorization": f"Bearer {other}"},
                      params={"project": "alpha"}).json()["total"] == 0
    reader = server.token("alpha", read_only=True)
    one_line_error(server.upload(reader, project="alpha", data=b"{}"), 403)
    assert server.get(f"/api/v1/runs/{run['id']}", headers={"Authorization": f"Bearer {reader}"}).status_code == 200
    one_line_error(server.upload("ta_not-a-token", project="alpha", data=b"{}"), 401)
    one_line_error(httpx.post(f"{server.url}/api/v1/projects/alpha/runs", content=b"{}",
                              headers={"Content-Type": "application/octet-stream"}), 401)


def _tar(members: dict[str, bytes], link: str | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        if link:
            info = tarfile.TarInfo("logdir/link.json")
            info.type = tarfile.SYMTYPE
            info.linkname = link
            t.addfile(info)
    return buf.getvalue()


@pytest.mark.slow
def test_bad_requests_get_a_4xx_with_one_line(server):
    token = server.token("bad")
    before = files_on_disk(server)
    zip_up = io.BytesIO()
    with zipfile.ZipFile(zip_up, "w") as z:
        z.writestr("../../etc/evil.json", b"{}")
    assert "'..'" in one_line_error(server.upload(token, project="bad", data=zip_up.getvalue(), name="a.zip"), 400)
    abs_zip = io.BytesIO()
    with zipfile.ZipFile(abs_zip, "w") as z:
        z.writestr("/etc/evil.json", b"{}")
    assert "absolute" in one_line_error(server.upload(token, project="bad", data=abs_zip.getvalue()), 400)
    one_line_error(server.upload(token, project="bad", data=_tar({"../x.json": b"{}"})), 400)
    assert "link" in one_line_error(server.upload(token, project="bad", data=_tar({"a.json": b"{}"}, "/etc/passwd")),
                                    400)
    bomb = gzip.compress(bytes(100 * 1024**2), compresslevel=9)  # 100 MiB of zeros in ~100 KiB
    assert "inflates to more than 64.0 MiB" in one_line_error(server.upload(token, project="bad", data=bomb), 413)
    one_line_error(server.upload(token, project="bad", data=b""), 400)
    assert "gzip" in one_line_error(server.upload(token, project="bad", data=b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03garbage"),
                                    400)
    one_line_error(httpx.post(f"{server.url}/api/v1/projects/bad/runs", content=b"{}",
                              headers={"Authorization": f"Bearer {token}", "Content-Type": "text/plain"}), 415)
    one_line_error(httpx.post(f"{server.url}/api/v1/projects/bad/runs", content=b"--x\r\nbroken",
                              headers={"Authorization": f"Bearer {token}",
                                       "Content-Type": "multipart/form-data; boundary=x"}), 400)
    one_line_error(server.upload(token, project="bad project", data=b"{}"), 400)
    one_line_error(server.upload(token, project="bad", data=b"{}", branch="a\nb"), 400)
    one_line_error(httpx.post(f"{server.url}/api/v1/projects/bad/runs", files={"file": ("a.json", b"{}")},
                              data={"branch": "x" * 300}, headers={"Authorization": f"Bearer {token}"}), 400)
    one_line_error(httpx.post(f"{server.url}/api/v1/projects/bad/runs", content=b"{}",
                              headers={"Authorization": "Basic abc", "Content-Type": "application/octet-stream"}), 401)
    one_line_error(server.get("/api/v1/runs/0123456789ab"), 404)
    one_line_error(server.get("/api/v1/runs/<script>"), 404)
    one_line_error(server.get("/api/v1/runs", params={"status": "nope"}), 400)
    one_line_error(server.get("/api/v1/runs", params={"page": "x"}), 400)
    one_line_error(httpx.delete(f"{server.url}/api/v1/runs/0123456789ab"), 401)
    one_line_error(httpx.put(f"{server.url}/api/v1/runs/0123456789ab"), 405)
    page = server.get("/runs/0123456789ab", headers={"Accept": "text/html"})
    assert page.status_code == 404 and "<h1>404</h1>" in page.text
    assert files_on_disk(server) == before


@pytest.mark.slow
def test_a_bad_trace_fails_with_the_clis_one_line(server):
    token = server.token("junk")
    r = server.upload(token, project="junk", data=b"this is not a trace\n", name="junk.json")
    assert r.status_code == 201
    run = server.wait(r.json()["id"])
    assert run["status"] == "failed" and run["error"].startswith("error: ") and "\n" not in run["error"]
    assert "/work/" not in run["error"]  # the server's folders are not shown
    assert server.get(f"/runs/{run['id']}").status_code == 200
    assert server.get(f"/api/v1/runs/{run['id']}/report.json").status_code == 409


@pytest.mark.slow
def test_hostile_names_are_escaped(server):
    token = server.token("esc")
    r = server.upload(token, project="esc", data=(SAMPLES / "hostile_names.json").read_bytes(),
                      name='<script>alert(1)</script>.json', branch='<img src=x onerror=alert(1)>')
    run = server.wait(r.json()["id"])
    page = server.get(f"/runs/{run['id']}").text
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<script>alert" not in page
    listing = server.get("/runs", params={"project": "esc"}).text
    assert "<img src=x" not in listing


@pytest.mark.slow
def test_compare_two_runs(server):
    token = server.token("cmp")
    ids = [server.upload(token, SAMPLES / name, project="cmp").json()["id"] for name in ("basic.json", "gpu_bound.json")]
    for i in ids:
        assert server.wait(i)["status"] == "done"
    diff = server.get("/api/v1/compare", params={"base": ids[0], "head": ids[1]})
    assert diff.status_code == 200 and "step_time" in diff.json()
    page = server.get("/compare", params={"base": ids[0], "head": ids[1]})
    assert page.status_code == 200 and "/compare/diff.html?" in page.text
    html = server.get("/compare/diff.html", params={"base": ids[0], "head": ids[1]})
    assert html.status_code == 200 and "sandbox" in html.headers["content-security-policy"]
    one_line_error(server.get("/api/v1/compare", params={"base": ids[0], "head": "0123456789ab"}), 404)


def test_the_runs_list_filters_and_pages(server):
    token = server.token("pages")
    data = (SAMPLES / "basic.json").read_bytes()
    for i in range(3):
        assert server.upload(token, project="pages", data=data, branch=f"b{i % 2}").status_code == 201
    listed = server.get("/api/v1/runs", params={"project": "pages"}).json()
    assert listed["total"] == 3
    assert server.get("/api/v1/runs", params={"project": "pages", "branch": "b0"}).json()["total"] == 2
    assert server.get("/api/v1/runs", params={"project": "pages", "page": "2"}).json()["runs"] == []


def test_forms_need_their_csrf_token(server):
    token = server.token("forms", read_only=True)
    login = server.get("/login")
    csrf = login.cookies["ta_csrf"]
    assert f'value="{csrf}"' in login.text
    r = httpx.post(f"{server.url}/login", data={"token": token}, timeout=30)  # no cookie, no field
    assert r.status_code == 403
    r = httpx.post(f"{server.url}/login", data={"token": token, "csrf": csrf}, cookies={"ta_csrf": csrf},
                   headers={"Origin": "https://evil.example"}, timeout=30)
    assert r.status_code == 403
    r = httpx.post(f"{server.url}/login", data={"token": token, "csrf": csrf}, cookies={"ta_csrf": csrf}, timeout=30)
    assert r.status_code == 303 and r.cookies.get("ta_session") and token not in r.headers["set-cookie"]


@pytest.mark.slow
def test_token_create_prints_the_token_alone_and_stores_its_hash(tmp_path):
    from serve_helpers import cli

    from traceanalyzer.serve.store import Store, hash_token

    token = Server(tmp_path, None).token("p1", cli_=True)  # checks: the token alone, one line
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("traceanalyzer.db*"))  # with the WAL, if any
    assert token.encode() not in stored and hash_token(token).encode() in stored
    assert Store(f"sqlite:///{tmp_path / 'traceanalyzer.db'}").token(token)[1:] == ("p1", False)
    bad = cli("serve", "token", "create", "--data", str(tmp_path), "--project", "../x", check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_the_migrations_make_the_tables_the_code_uses(tmp_path):
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from traceanalyzer.serve.store import Store, metadata

    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    store.migrate()
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diff == []


@pytest.mark.slow
def test_a_gzip_bomb_is_refused_while_it_arrives():
    from traceanalyzer.serve.uploads import BOMB_MIN_BYTES, Inflater, UploadError

    bomb = gzip.compress(bytes(BOMB_MIN_BYTES + 1024**2), compresslevel=9)
    inflater = Inflater(limit=1 << 40)
    with pytest.raises(UploadError, match="decompression bomb") as refused:
        for i in range(0, len(bomb), 65536):
            inflater.feed(bomb[i:i + 65536])
    assert refused.value.status == 400
    trace = gzip.compress((SAMPLES / "input_bound.json").read_bytes())
    fine = Inflater(limit=1 << 40)
    fine.feed(trace + trace)  # two gzip members
    assert fine.inflated == 2 * TRACE.stat().st_size and fine.head.startswith(b"{")
    padded = Inflater(limit=1 << 40)
    for i in range(0, len(trace), 1000):  # in pieces, then zero padding after the member
        padded.feed(trace[i:i + 1000])
    padded.feed(bytes(512))
    assert padded.inflated == TRACE.stat().st_size and not padded.broken


def test_a_zip_bomb_is_refused_at_upload_and_when_unpacked(tmp_path, monkeypatch):
    from traceanalyzer.serve import uploads
    from traceanalyzer.serve.uploads import UploadError, check_archive, unpack

    monkeypatch.setattr(uploads, "BOMB_MIN_BYTES", 1 << 20)  # the real floor is 256 MiB
    path = tmp_path / "bomb.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("a.json", bytes(8 << 20))  # 8 MiB of zeros in ~8 KiB
    with pytest.raises(UploadError, match="decompression bomb"):
        check_archive(path, "zip", 10, 1 << 40)
    with pytest.raises(UploadError, match="decompression bomb"):  # if the declared sizes lied
        unpack(path, "zip", tmp_path / "out", 10, 1 << 40)
    assert sum(p.stat().st_size for p in (tmp_path / "out").rglob("*") if p.is_file()) < 8 << 20  # stopped early


def test_archive_members_are_checked():
    from traceanalyzer.serve.uploads import UploadError, member_parts

    assert member_parts("./a/b//c.json") == ["a", "b", "c.json"]
    for bad in ("../a", "a/../../b", "/etc/passwd", "C:/x", "a\\..\\b", "a\x00b", ""):
        with pytest.raises(UploadError):
            member_parts(bad)


@pytest.mark.slow
def test_deleting_a_run_removes_its_trace_unless_another_run_has_it(server):
    token, reader, other = server.token("del"), server.token("del", read_only=True), server.token("del2")
    data = (SAMPLES / "basic.json").read_bytes() + b"\n" * 3  # content no other test uploads
    first, second = (server.upload(token, project="del", data=data).json()["id"] for _ in range(2))
    run = server.wait(first)
    server.wait(second)
    blob = server.data / "traces" / run["sha256"][0][:2] / run["sha256"][0][2:]
    auth = {"Authorization": f"Bearer {token}"}
    one_line_error(httpx.delete(f"{server.url}/api/v1/runs/{first}", headers={"Authorization": f"Bearer {reader}"}),
                   403)
    one_line_error(httpx.delete(f"{server.url}/api/v1/runs/{first}", headers={"Authorization": f"Bearer {other}"}),
                   404)
    assert httpx.delete(f"{server.url}/api/v1/runs/{first}", headers=auth).status_code == 204
    one_line_error(server.get(f"/api/v1/runs/{first}"), 404)
    assert not (server.data / "reports" / first).exists() and blob.exists()  # the second run has it too
    # the page's form: logged in with the cookie, with the page's CSRF token
    page = server.get(f"/runs/{second}")
    csrf = page.cookies["ta_csrf"]
    login = server.login(token)
    forged = httpx.post(f"{server.url}/runs/{second}/delete", data={"csrf": "x"}, cookies={"ta_csrf": csrf, **login})
    assert forged.status_code == 403 and server.get(f"/api/v1/runs/{second}").status_code == 200
    r = httpx.post(f"{server.url}/runs/{second}/delete", data={"csrf": csrf}, cookies={"ta_csrf": csrf, "ta_token": token})
    assert r.status_code == 401 and server.get(f"/api/v1/runs/{second}").status_code == 200  # a token is no login
    r = httpx.post(f"{server.url}/runs/{second}/delete", data={"csrf": csrf}, cookies={"ta_csrf": csrf, **login})
    assert r.status_code == 303 and server.get(f"/api/v1/runs/{second}").status_code == 404
    assert not blob.exists()


@pytest.mark.slow
def test_a_private_service_needs_a_token_to_read(tmp_path):
    server = Server(tmp_path / "data", None, "--private").start()
    try:
        token = server.token("secret")
        reader = server.token("secret", read_only=True)
        run = server.upload(token, SAMPLES / "basic.json", project="secret").json()["id"]
        one_line_error(server.get(f"/api/v1/runs/{run}"), 401)
        one_line_error(server.get("/api/v1/runs"), 401)
        one_line_error(server.get(f"/runs/{run}/comment.md"), 401)
        assert server.get("/runs").status_code == 303 and server.get("/runs").headers["location"] == "/login"
        assert server.get(f"/api/v1/runs/{run}", headers={"Authorization": f"Bearer {reader}"}).status_code == 200
        reading = server.login(reader)
        assert server.get("/runs", cookies=reading).status_code == 200
        assert server.get("/runs", cookies={"ta_token": reader}).headers["location"] == "/login"  # a token: no login
        assert server.get("/runs", cookies={"ta_session": "stale"}).headers["location"] == "/login"  # logged out
        one_line_error(server.get(f"/api/v1/runs/{run}", cookies={"ta_session": "stale"}), 401)
        one_line_error(httpx.post(f"{server.url}/api/v1/projects/secret/runs", content=b"{}",
                                  cookies=server.login(token),
                                  headers={"Content-Type": "application/octet-stream"}), 401)  # never by cookie
        # the trace that "Open in Perfetto" hands over: served to who may read the run, as uploaded
        one_line_error(server.get(f"/runs/{run}/files/0"), 401)
        one_line_error(server.get("/api/v1/projects/secret/history"), 401)
        got = server.get(f"/runs/{run}/files/0", cookies=reading)
        assert got.status_code == 200 and got.content == (SAMPLES / "basic.json").read_bytes()
        for _ in range(600):  # the button comes with the analysis (it says what the file is)
            if server.get(f"/api/v1/runs/{run}", cookies=reading).json()["status"] == "done":
                break
            time.sleep(0.1)
        page = server.get(f"/runs/{run}", cookies=reading)
        assert f'data-trace="/runs/{run}/files/0"' in page.text and "sends the trace to no third party" in page.text
        assert page.headers["cross-origin-opener-policy"] == "same-origin-allow-popups"  # the opener link stays
        assert server.get("/runs", cookies=reading).headers["cross-origin-opener-policy"] == "same-origin"
    finally:
        server.stop()


def test_a_zip_declaring_too_many_members_is_refused_before_it_is_listed(tmp_path):
    from traceanalyzer.serve.uploads import UploadError, check_archive, zip_entries

    path = tmp_path / "many.zip"
    with zipfile.ZipFile(path, "w") as z:
        for i in range(30):
            z.writestr(f"d/{i}.json", b"{}")
    assert zip_entries(path) == 30
    check_archive(path, "zip", 30, 1 << 20)
    with pytest.raises(UploadError, match="more than 29 members"):
        check_archive(path, "zip", 29, 1 << 20)
    with zipfile.ZipFile(tmp_path / "twice.zip", "w") as z:
        z.writestr("d/a.json", b"{}")
        with pytest.warns(UserWarning, match="Duplicate name"):
            z.writestr("d/a.json", b"[]")
    with pytest.raises(UploadError, match="named twice"):
        check_archive(tmp_path / "twice.zip", "zip", 30, 1 << 20)
    with zipfile.ZipFile(tmp_path / "clash.zip", "w") as z:
        z.writestr("d/a", b"{}")
        z.writestr("d/a/b.json", b"[]")
    with pytest.raises(UploadError, match="both a file and a folder"):
        check_archive(tmp_path / "clash.zip", "zip", 30, 1 << 20)
    with zipfile.ZipFile(tmp_path / "z64.zip", "w", allowZip64=True) as z:
        z.writestr("a.json", b"{}")
    assert zip_entries(tmp_path / "z64.zip") == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_job_is_taken_by_one_worker(tmp_path, backend):
    from concurrent.futures import ThreadPoolExecutor

    from traceanalyzer.serve.store import Store, StoredFile

    store = Store(db_url(backend) or f"sqlite:///{tmp_path / 'db.sqlite'}")
    store.migrate()
    f = StoredFile("a" * 64, "t.json", 1, "file")
    runs = {store.create_run("p", None, None, [f]) for _ in range(40)}

    def worker(_: int) -> list[str]:
        taken = []
        while (job := store.claim()) is not None:
            taken.append(job[1])
        return taken

    with ThreadPoolExecutor(4) as pool:
        taken = [r for rs in pool.map(worker, range(4)) for r in rs]
    assert sorted(taken) == sorted(runs)  # every job once, none twice
    assert store.queued() == 0
    store.close()


def test_a_stalled_upload_is_cut_off(tmp_path, monkeypatch):
    """An upload that stops sending gets 408 after the idle limit, and leaves nothing (checked on the
    body reader itself: the real limit is a minute)."""
    import asyncio

    from traceanalyzer.serve import body
    from traceanalyzer.serve.settings import Settings
    from traceanalyzer.serve.uploads import UploadError

    monkeypatch.setattr(body, "IDLE_S", 0.2)
    settings = Settings(tmp_path)
    settings.make_dirs()

    async def run():
        sent = [{"type": "http.request", "body": b"{" * 1000, "more_body": True}]

        async def receive():
            if sent:
                return sent.pop()
            await asyncio.sleep(10)

        from starlette.requests import Request

        scope = {"type": "http", "method": "POST", "path": "/", "headers": [(b"content-type", b"application/octet-stream")],
                 "query_string": b""}
        with pytest.raises(UploadError) as refused:
            await body.receive(Request(scope, receive), settings)
        return refused.value

    refused = asyncio.run(run())
    assert refused.status == 408 and list(settings.tmp.iterdir()) == []


@pytest.mark.slow
def test_the_command_line_says_what_is_wrong_in_one_line(tmp_path):
    from serve_helpers import cli

    bad_db = cli("serve", "--data", str(tmp_path), "--db", "postgresql://u:secret@127.0.0.1:9/x", "--port", "0",
                 check=False)
    assert bad_db.returncode == 2 and bad_db.stderr.count("\n") == 1 and "secret" not in bad_db.stderr
    assert "cannot open the database" in bad_db.stderr
    bad_size = cli("serve", "--data", str(tmp_path), "--max-upload", "lots", check=False)
    assert bad_size.returncode == 2 and bad_size.stderr.count("\n") == 1
    bad_age = cli("serve", "--data", str(tmp_path), "--keep-traces", "forever", check=False)
    assert bad_age.returncode == 2 and "--keep-traces" in bad_age.stderr
    assert "token create" in cli("serve", "--help").stdout


@pytest.mark.slow
def test_tokens_are_named_listed_revoked_and_expire_and_runs_show_their_uploader(server):
    import time

    from serve_helpers import cli

    from traceanalyzer.serve.store import Store, tokens

    where = ["--data", str(server.data)] + (["--db", server.db] if server.db else [])
    made = cli("serve", "token", "create", *where, "--project", "people", "--name", "ci of people",
               "--created-by", "alice", "--expires", "30d")
    token = made.stdout.strip()
    listed = cli("serve", "token", "list", *where, "--project", "people").stdout.splitlines()
    assert listed[0].split()[:3] == ["ID", "PROJECT", "ROLE"] and len(listed) == 2, listed
    row = listed[1].split()
    token_id = row[0]
    assert row[1:3] == ["people", "upload"] and "ci of people" in listed[1] and "alice" in listed[1]
    assert row[-1] == "active" and token not in "\n".join(listed)
    run = server.upload(token, SAMPLES / "basic.json", project="people", commit="c0ffee" + "0" * 34).json()
    shown = server.wait(run["id"])
    assert shown["uploaded_by"] == f"ci of people (token #{token_id})"
    page = server.get(f"/runs/{run['id']}")
    assert f"by ci of people (token #{token_id})" in page.text
    assert cli("serve", "token", "list", *where, "--project", "people").stdout.splitlines()[1].split()[-4] != "-"
    # revoked: refused at once, listed as revoked; a second revoke is an error
    assert cli("serve", "token", "revoke", *where, token_id).returncode == 0
    r = server.upload(token, SAMPLES / "basic.json", project="people")
    assert r.status_code == 401 and "revoked" in r.json()["error"]
    assert server.get("/api/v1/runs", headers={"Authorization": f"Bearer {token}"}).status_code == 401
    assert cli("serve", "token", "list", *where, "--project", "people").stdout.splitlines()[1].split()[-1] == "revoked"
    again = cli("serve", "token", "revoke", *where, token_id, check=False)
    assert again.returncode == 2 and again.stderr.count("\n") == 1
    # expired
    late = server.token("people")
    store = Store(server.db or f"sqlite:///{server.data / 'traceanalyzer.db'}")
    with store.engine.begin() as c:
        c.execute(tokens.update().where(tokens.c.project == "people", tokens.c.name.is_(None))
                  .values(expires_at=time.time() - 1))
    store.close()
    assert server.upload(late, SAMPLES / "basic.json", project="people").status_code == 401


@pytest.mark.slow
def test_runs_are_searched_by_commit_verdict_and_date(server):
    import time
    from datetime import datetime, timezone

    token = server.token("search")
    ids = {}
    for name, commit in (("input_bound.json", "abc123" + "0" * 34), ("gpu_bound.json", "def456" + "0" * 34)):
        ids[name] = server.upload(token, SAMPLES / name, project="search", commit=commit).json()["id"]
        server.wait(ids[name])

    def found(**params: str) -> list[str]:
        r = server.get("/api/v1/runs", params={"project": "search", **params})
        assert r.status_code == 200, r.text
        return sorted(run["id"] for run in r.json()["runs"])

    assert found(commit="abc1") == [ids["input_bound.json"]]
    assert found(commit="def456" + "0" * 34) == [ids["gpu_bound.json"]]
    assert found(commit="%") == [] and found(commit="_bc") == []  # no wildcards
    assert found(verdict="gpu_bound") == [ids["gpu_bound.json"]]
    today = datetime.fromtimestamp(time.time(), timezone.utc).strftime("%Y-%m-%d")
    assert found(since=today, until=today) == sorted(ids.values())
    assert found(until="2001-01-01") == [] and found(since="2999-01-01") == []
    one_line_error(server.get("/api/v1/runs", params={"since": "yesterday"}), 400)
    one_line_error(server.get("/api/v1/runs", params={"verdict": "<b>"}), 400)
    page = server.get("/runs", params={"project": "search", "commit": "abc1"})
    assert ids["input_bound.json"] in page.text and ids["gpu_bound.json"] not in page.text
    assert 'name="commit" value="abc1"' in page.text


def test_pages_show_the_login_state_once_and_have_a_favicon(server):
    token = server.token("faces", read_only=True)
    out = server.get("/runs").text
    assert ">Log in<" in out and ">Log out<" not in out
    logged = server.get("/runs", cookies=server.login(token)).text
    assert ">Log out<" in logged and ">Log in<" not in logged and "faces" in logged
    icon = server.get("/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    assert 'rel="icon" href="/favicon.ico"' in out


def test_cross_site_unsafe_requests_are_refused_once_for_every_route(server):
    token = server.token("xsite")
    for path in ("/login", "/logout", "/runs/0123456789ab/delete", "/no/such/route"):
        for headers in ({"Sec-Fetch-Site": "cross-site"}, {"Origin": "https://evil.example"}):
            one_line_error(httpx.post(f"{server.url}{path}", data={"csrf": "x"}, headers=headers, timeout=30), 403)
    one_line_error(httpx.delete(f"{server.url}/api/v1/runs/0123456789ab", headers={"Sec-Fetch-Site": "same-site"}),
                   403)
    # a bearer token is not sent by a browser on its own: API calls with one are not cross-site requests
    r = server.upload(token, SAMPLES / "basic.json", project="xsite")
    assert r.status_code == 201
    r = httpx.post(f"{server.url}/api/v1/projects/xsite/runs", content=b"{}", timeout=30,
                   headers={"Authorization": f"Bearer {token}", "Sec-Fetch-Site": "cross-site",
                            "Content-Type": "application/octet-stream"})
    assert r.status_code == 201
    same = httpx.post(f"{server.url}/login", data={"csrf": "x"}, headers={"Sec-Fetch-Site": "same-origin"})
    assert same.status_code == 403 and "CSRF" in same.json()["error"]  # past the middleware, the form's own check


def test_perfetto_is_offered_only_for_traces_it_reads(server):
    token = server.token("perf")
    data = (SAMPLES / "basic.json").read_bytes()
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("basic.json", data)  # a folder of one trace, once unpacked
    runs = {kind: server.upload(token, project="perf", data=body, name=name).json()["id"]
            for kind, body, name in (("json", data, "basic.json"), ("gzip", gzip.compress(data + b" "), "b.json.gz"),
                                     ("zip", zipped.getvalue(), "logdir.zip"),
                                     ("pftrace", (SAMPLES / "basic.pftrace").read_bytes(), "basic.pftrace"),
                                     ("dmon", DMON.read_bytes(), DMON.name))}
    from traceanalyzer.serve.settings import Settings
    from traceanalyzer.serve.store import Store

    for kind, run in runs.items():  # what the page offers is found by the analysis (the web server reads no trace)
        done = server.wait(run)
        assert done["status"] == "done", (kind, done["error"])
    store = Store(Settings(server.data, server.db).database_url)
    try:
        formats = {kind: [(f.format, f.perfetto) for f in store.files(run)] for kind, run in runs.items()}
    finally:
        store.close()
    assert formats == {"json": [("kineto", True)], "gzip": [("kineto", True)], "zip": [(None, False)],
                       "pftrace": [("pftrace", True)], "dmon": [("nvidia-smi-dmon", False)]}
    for kind, run in runs.items():
        page = server.get(f"/runs/{run}")
        offered = kind in ("json", "gzip", "pftrace")  # what the Perfetto UI opens: not archives, not counter logs
        fmt = formats[kind][0][0]
        assert (f"({fmt}, " in page.text) == (fmt is not None), kind  # the file's format, beside its size
        assert ('class="open-perfetto"' in page.text) == offered, kind
        opener = page.headers["cross-origin-opener-policy"]
        assert opener == ("same-origin-allow-popups" if offered else "same-origin"), kind


@pytest.mark.slow
def test_the_history_in_public_mode_needs_no_token_and_shows_none(server):
    token, other = server.token("pubhist"), server.token("pubhist-other")
    ids = [server.upload(token, SAMPLES / name, project="pubhist", branch="main").json()["id"]
           for name in ("basic.json", "input_bound.json")]
    for run in ids:
        assert server.wait(run)["status"] == "done"
    api = server.get("/api/v1/projects/pubhist/history", params={"branch": "main"})
    assert api.status_code == 200 and "set-cookie" not in api.headers
    assert [p["run"] for p in api.json()["series"]["verdict"]["points"]] == ids
    page = server.get("/projects/pubhist/history", headers={"Accept": "text/html"})
    assert page.status_code == 200 and ids[1] in page.text
    assert [c for c in page.cookies] == ["ta_csrf"]  # no login made for the reader
    logged = server.get("/projects/pubhist/history", cookies=server.login(token))
    for r in (api, page, logged):
        assert token not in r.text and other not in r.text and "ta_token" not in r.text
        assert "Bearer" not in r.text
    assert "ta_token" not in str(logged.headers)
    stale = server.get("/projects/pubhist/history", cookies={"ta_session": "revoked-or-expired"})
    assert stale.status_code == 200 and ids[1] in stale.text  # a stale login reads as no login
    assert server.get("/api/v1/projects/pubhist/history", cookies={"ta_session": "stale"}).status_code == 200
    # a token narrows what its holder sees to its project, in public mode too
    one_line_error(server.get("/api/v1/projects/pubhist/history", headers={"Authorization": f"Bearer {other}"}), 404)


@pytest.mark.slow  # a server of its own (the shared one does not throttle)
def test_failed_logins_are_throttled_and_audited_and_the_cookie_is_never_the_token(tmp_path):
    from traceanalyzer.serve.store import Store

    server = Server(tmp_path / "data", None, "--max-failures", "5").start()
    try:
        token = server.token("people")
        csrf = server.get("/login").cookies["ta_csrf"]

        def login(value: str) -> httpx.Response:
            return httpx.post(f"{server.url}/login", data={"token": value, "csrf": csrf}, cookies={"ta_csrf": csrf},
                              timeout=30)

        ok = login(token)
        assert ok.status_code == 303 and token not in str(ok.headers) and ok.cookies["ta_session"] != token
        for i in range(5):
            assert login(f"ta_guess{i}").status_code == 401
        for r in (login(token), server.get("/api/v1/runs", headers={"Authorization": f"Bearer {token}"})):
            assert r.status_code == 429 and 1 <= int(r.headers["retry-after"]) <= 60, r.text
        assert server.get("/api/v1/runs").status_code == 200  # reading without a credential goes on
        store = Store(f"sqlite:///{server.data / 'traceanalyzer.db'}")
        try:
            actions = [a["action"] for a in store.audit_log(limit=50)]
        finally:
            store.close()
        assert actions[:6] == ["client.throttle"] + ["login.fail"] * 5, actions
        log = server.log.read_text()
        assert log.count("login.fail from 127.0.0.1") == 5 and token not in log and "ta_guess" not in log
    finally:
        server.stop()

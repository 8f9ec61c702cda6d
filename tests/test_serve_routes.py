"""The service's routes in process (Starlette's test client, no analysis worker): every write is
authorised once, before its route runs, whatever the route (a route added later included); every write
is in the audit, with who, what, when and from where; `serve audit` shows it."""

from __future__ import annotations

import json
import re

import pytest
from serve_helpers import SAMPLES, session_of

pytest.importorskip("starlette")

from click.testing import CliRunner  # noqa: E402
from starlette.routing import Route  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from traceanalyzer.commands.serve import serve_command  # noqa: E402
from traceanalyzer.serve.app import create_app  # noqa: E402
from traceanalyzer.serve.routes import BEARER, FORM, OIDC, OPEN_FORM, TOKEN, UNSAFE, bind, write_kind  # noqa: E402
from traceanalyzer.serve.settings import Settings  # noqa: E402

PARAMS = {"run_id": "0123456789ab", "project": "guarded", "n": "0", "name": "serve.css"}


@pytest.fixture()
def service(tmp_path):
    app = create_app(Settings(data=tmp_path / "data", max_failures=0), run_jobs=False)  # refusals by the dozen
    with TestClient(app, base_url="http://testserver") as client:
        yield app, client


def concrete(path: str) -> str:
    return re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: PARAMS[m.group(1)], path)


def cookie(**values: str) -> dict[str, str]:
    return {"Cookie": "; ".join(f"{k}={v}" for k, v in values.items())}


def test_every_write_of_every_route_is_checked_before_the_route_runs(service):
    app, client = service
    ctx = app.state.ctx
    writer, reader = ctx.db.create_token("guarded", False), ctx.db.create_token("guarded", True)
    writer_s, reader_s = session_of(ctx.db, writer), session_of(ctx.db, reader)
    form = {"csrf": "c" * 32}
    seen = 0
    paths: dict[str, dict[str, object]] = {}  # a route's path -> the endpoint of each method it takes
    for route in app.router.routes:
        assert isinstance(route, Route)
        paths.setdefault(route.path, {}).update({m: route.endpoint for m in route.methods or ()})
    for template, endpoints in paths.items():
        path = concrete(template)
        for method in UNSAFE:
            declared = method in endpoints
            kind = write_kind(endpoints.get(method))
            # a browser on another site, even logged in and with the page's CSRF token: refused, every route
            for hostile in ({"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"},
                            {"Origin": "https://evil.example"}):
                r = client.request(method, path, data=form, headers={**hostile, **cookie(ta_csrf=form["csrf"],
                                                                                          ta_session=writer_s)})
                assert r.status_code == 403 and r.json()["error"] == "cross-site request refused", (method, path)
            # no token at all
            r = client.request(method, path, data=form, headers=cookie(ta_csrf=form["csrf"]))
            if not declared:
                assert r.status_code == 405, (method, path, r.status_code)
                continue
            seen += 1
            if kind in (BEARER, FORM, TOKEN, OIDC):
                assert r.status_code == 401, (method, path, r.text)
            if kind == OIDC:  # any bearer is a JWT the route checks: a token of ours is none
                for bearer in (writer, reader):
                    r = client.request(method, path, headers={"Authorization": f"Bearer {bearer}"})
                    assert r.status_code == 401 and "not a JWT" in r.json()["error"], (method, path, r.text)
                continue
            # a read-only token may write nothing
            r = client.request(method, path, data=form, headers={"Authorization": f"Bearer {reader}",
                                                                 **cookie(ta_csrf=form["csrf"], ta_session=reader_s)})
            if kind in (BEARER, FORM):
                assert r.status_code == 403 and "read-only" in r.json()["error"], (method, path, r.text)
            if kind == TOKEN:  # any role passes the guard: the route decides what a read-only token may do
                assert r.status_code != 401 and "read-only" not in r.text, (method, path, r.text)
            if kind in (FORM, OPEN_FORM):  # a form without its page's CSRF token, even logged in
                r = client.request(method, path, data={"csrf": "x"},
                                   headers=cookie(ta_csrf=form["csrf"], ta_session=writer_s))
                assert r.status_code == 403 and "CSRF" in r.json()["error"], (method, path)
                r = client.request(method, path, content=b"{}", headers={**cookie(ta_csrf=form["csrf"], ta_session=writer_s),
                                                                         "Content-Type": "application/json"})
                assert r.status_code == 415, (method, path)
            if kind in (BEARER, TOKEN):  # the login cookie is no bearer token (nor is a token sent as a cookie)
                r = client.request(method, path, content=b"{}", headers={**cookie(ta_session=writer_s, ta_token=writer),
                                                                         "Content-Type": "application/octet-stream"})
                assert r.status_code == 401, (method, path)
    assert seen == 7  # upload, DELETE of a run, the delete form, log in, log out, /mcp, the OIDC exchange


def test_a_route_added_later_is_guarded_without_saying_so(service):
    app, client = service
    ctx = app.state.ctx
    ran = []

    def new_write(ctx, request):  # says nothing about how it is authorised
        from starlette.responses import JSONResponse

        ran.append(request.state.who.project)
        return JSONResponse({"ok": True})

    app.router.routes.append(Route("/api/v1/new-write", bind(ctx, new_write), methods=["POST"]))
    writer, reader = ctx.db.create_token("guarded", False), ctx.db.create_token("guarded", True)
    assert client.post("/api/v1/new-write").status_code == 401
    assert client.post("/api/v1/new-write", headers=cookie(ta_session=session_of(ctx.db, writer))).status_code == 401
    assert client.post("/api/v1/new-write", headers=cookie(ta_token=writer)).status_code == 401
    assert client.post("/api/v1/new-write", headers={"Authorization": f"Bearer {reader}"}).status_code == 403
    assert client.post("/api/v1/new-write", headers={"Authorization": "Bearer ta_unknown"}).status_code == 401
    assert ran == []
    assert client.post("/api/v1/new-write", headers={"Authorization": f"Bearer {writer}"}).status_code == 200
    assert ran == ["guarded"]


def test_writes_are_audited_and_serve_audit_shows_them(service, tmp_path):
    app, client = service
    ctx = app.state.ctx
    data = str(tmp_path / "data")
    cli = CliRunner()
    made = cli.invoke(serve_command, ["token", "create", "--data", data, "--project", "audited", "--name", "ci",
                                      "--created-by", "alice"])
    assert made.exit_code == 0, made.output
    token = made.output.strip().splitlines()[-1]
    auth = {"Authorization": f"Bearer {token}"}
    body = (SAMPLES / "basic.json").read_bytes()
    up = client.post("/api/v1/projects/audited/runs?branch=main&commit=abc", content=body,
                     headers={**auth, "Content-Type": "application/octet-stream", "X-Filename": "basic.json"})
    assert up.status_code == 201, up.text
    first = up.json()["id"]
    assert client.delete(f"/api/v1/runs/{first}", headers=auth).status_code == 204
    second = client.post("/api/v1/projects/audited/runs", content=body + b"\n",
                         headers={**auth, "Content-Type": "application/octet-stream"}).json()["id"]
    assert ctx.db.claim("w:1:x") is not None  # a worker holds its job: the delete cancels it
    assert client.delete(f"/api/v1/runs/{second}", headers=auth).status_code == 202
    refused = client.delete(f"/api/v1/runs/{second}", headers={"Authorization": "Bearer ta_nope"})
    assert refused.status_code == 401
    token_id = ctx.db.list_tokens("audited")[0]["id"]
    assert cli.invoke(serve_command, ["token", "revoke", "--data", data, str(token_id)]).exit_code == 0

    rows = ctx.db.audit_log("audited")
    assert [r["action"] for r in rows] == ["token.revoke", "run.cancel", "run.upload", "run.delete", "run.upload",
                                           "project.create", "token.create"]
    by: dict[str, dict] = {}
    for r in reversed(rows):  # the first of each
        by.setdefault(r["action"], r)
    assert by["token.create"]["actor"] == "alice" and by["token.create"]["source"].startswith("cli ")
    assert by["token.create"]["target"] == f"token #{token_id}" and "role upload, name ci" in by["token.create"]["detail"]
    for action in ("project.create", "run.upload", "run.delete", "run.cancel"):
        assert by[action]["actor"] == f"ci (#{token_id})" and by[action]["token_id"] == token_id, action
        assert by[action]["source"] == "testclient" and by[action]["project"] == "audited"
    assert by["run.upload"]["target"] == first and "basic.json" in by["run.upload"]["detail"]
    assert "branch main; commit abc" in by["run.upload"]["detail"]
    assert by["run.delete"]["target"] == first and by["run.cancel"]["target"] == second
    assert all(r["at"] > 0 for r in rows) and rows == sorted(rows, key=lambda r: -r["at"])

    table = cli.invoke(serve_command, ["audit", "--data", data, "--project", "audited"])
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert lines[0].split() == ["WHEN", "WHO", "FROM", "ACTION", "PROJECT", "TARGET", "DETAIL"] and len(lines) == 8
    assert " token.revoke " in lines[1] and " token.create " in lines[-1] and f"ci (#{token_id})" in lines[2]
    as_json = cli.invoke(serve_command, ["audit", "--data", data, "--json", "--action", "run.", "--limit", "2"])
    got = [json.loads(line) for line in as_json.output.splitlines()]
    assert [g["action"] for g in got] == ["run.cancel", "run.upload"] and got[0]["target"] == second
    assert cli.invoke(serve_command, ["audit", "--data", data, "--project", "nobody"]).output.count("\n") == 1

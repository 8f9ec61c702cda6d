"""People on the service, in process (Starlette's test client): the login cookie is a server-side session
(random, short-lived, revocable, HttpOnly, SameSite=Strict, rotated at login), never the token; failed
logins, unknown tokens and refused writes are throttled per client (429 + Retry-After) and audited; a
private service's health says only up or down without a token; health reports storage that refuses
writes."""

from __future__ import annotations

import time

import pytest
from serve_helpers import session_of

pytest.importorskip("starlette")

from starlette.testclient import TestClient  # noqa: E402

from traceanalyzer.serve import sessions  # noqa: E402
from traceanalyzer.serve.app import create_app  # noqa: E402
from traceanalyzer.serve.settings import Settings  # noqa: E402
from traceanalyzer.serve.throttle import Throttle  # noqa: E402


def make(tmp_path, **kw):
    app = create_app(Settings(data=tmp_path / "data", **kw), run_jobs=False)
    return app, TestClient(app, base_url="http://testserver")


def login(client: TestClient, token: str, cookies: dict[str, str] | None = None):
    csrf = client.get("/login").cookies.get("ta_csrf") or client.cookies.get("ta_csrf")
    return client.post("/login", data={"token": token, "csrf": csrf}, follow_redirects=False,
                       headers={"Cookie": "; ".join(f"{k}={v}" for k, v in {"ta_csrf": csrf, **(cookies or {})}.items())})


def test_the_login_cookie_is_a_session_never_the_token(tmp_path):
    app, client = make(tmp_path, max_failures=0)
    with client:
        db = app.state.ctx.db
        token = db.create_token("people", False)
        r = login(client, token)
        assert r.status_code == 303
        set_cookie = [v for k, v in r.headers.multi_items() if k == "set-cookie" and v.startswith("ta_session=")]
        assert len(set_cookie) == 1
        attrs = set_cookie[0].lower()
        assert "httponly" in attrs and "samesite=strict" in attrs and "max-age=28800" in attrs and "path=/" in attrs
        sid = r.cookies["ta_session"]
        assert token not in r.headers.get("set-cookie", "") and token not in str(r.headers)  # never the token
        assert sid != token and len(sid) >= 40 and sessions.lookup(db, sid).project == "people"
        stored = b"".join(p.read_bytes() for p in (tmp_path / "data").glob("traceanalyzer.db*"))
        assert sid.encode() not in stored and token.encode() not in stored  # both kept as hashes only
        # a token sent as a cookie logs nobody in
        client.cookies.clear()
        assert "Log out" not in client.get("/runs", headers={"Cookie": f"ta_token={token}"}).text
        assert "Log out" in client.get("/runs", headers={"Cookie": f"ta_session={sid}"}).text
        # logging in again from the same browser rotates the id: the old session ends
        again = login(client, token, {"ta_session": sid})
        new = again.cookies["ta_session"]
        assert new != sid and sessions.lookup(db, sid) is None and sessions.lookup(db, new) is not None
        # logout ends the session on the server (a copy of the cookie is worth nothing after)
        csrf = client.get("/login").cookies.get("ta_csrf") or client.cookies.get("ta_csrf")
        out = client.post("/logout", data={"csrf": csrf}, follow_redirects=False,
                          headers={"Cookie": f"ta_csrf={csrf}; ta_session={new}"})
        assert out.status_code == 303 and sessions.lookup(db, new) is None
        client.cookies.clear()
        assert "Log out" not in client.get("/runs", headers={"Cookie": f"ta_session={new}"}).text
        # a session ends with its token, and at its expiry
        live = session_of(db, token)
        assert sessions.lookup(db, live) is not None
        assert db.revoke_token(db.list_tokens("people")[0]["id"])
        assert sessions.lookup(db, live) is None
        other = db.create_token("people", False)
        short = session_of(db, other, ttl_s=0.2)
        assert sessions.lookup(db, short) is not None
        time.sleep(0.3)
        assert sessions.lookup(db, short) is None
        assert sessions.lookup(db, "x" * 1000) is None


def test_the_throttle_blocks_after_its_limit_for_its_time():
    now = [0.0]
    t = Throttle(limit=3, window_s=60, block_s=30, clock=lambda: now[0])
    assert [t.failed("a") for _ in range(2)] == [False, False] and t.blocked("a") == 0
    now[0] = 61.0  # the first two left the window
    assert [t.failed("a") for _ in range(2)] == [False, False] and t.blocked("a") == 0
    assert t.failed("a") is True and t.blocked("a") == 30 and t.blocked("b") == 0
    now[0] = 61.0 + 29.5
    assert t.blocked("a") == 1
    now[0] = 61.0 + 30.0
    assert t.blocked("a") == 0
    assert Throttle(limit=0).failed("a") is False  # 0: never


def test_failed_tokens_and_logins_are_throttled_per_client_and_audited(tmp_path):
    app, client = make(tmp_path)  # the default: 10 failures a minute
    with client:
        db = app.state.ctx.db
        token = db.create_token("people", False)
        reader = db.create_token("people", True)
        bad = {"Authorization": "Bearer ta_guess"}
        for _ in range(4):
            assert client.get("/api/v1/runs", headers=bad).status_code == 401
        for _ in range(3):
            assert login(client, "ta_guess").status_code == 401
        for _ in range(2):  # refused writes count too
            assert client.delete("/api/v1/runs/0123456789ab", headers={"Authorization": f"Bearer {reader}"}
                                 ).status_code == 403
        assert client.post("/api/v1/projects/people/runs", content=b"{}").status_code == 401  # the 10th
        for r in (client.get("/api/v1/runs", headers={"Authorization": f"Bearer {token}"}),  # even a good token
                  login(client, token),
                  client.post("/api/v1/projects/people/runs", content=b"{}",
                              headers={"Authorization": f"Bearer {token}", "Content-Type": "application/octet-stream"})):
            assert r.status_code == 429, r.text
            assert 55 <= int(r.headers["retry-after"]) <= 60 and "too many failed" in r.text
        assert client.get("/api/v1/runs").status_code == 200  # reading without a credential is not refused
        rows = db.audit_log(limit=100)
        actions = [r["action"] for r in reversed(rows)]
        assert actions == ["token.fail"] * 4 + ["login.fail"] * 3 + ["write.refuse"] * 3 + ["client.throttle"]
        assert all(r["source"] == "testclient" for r in rows)
        refused = [r for r in rows if r["action"] == "write.refuse"]
        assert refused[-1]["project"] == "people" and "read-only" in refused[-1]["detail"]
        assert refused[-1]["target"] == "DELETE /api/v1/runs/0123456789ab" and refused[-1]["token_id"] is not None
        assert not any(token in str(r) or reader in str(r) or "ta_guess" in str(r) for r in rows)  # no token shown


def test_private_health_says_only_up_or_down_without_a_token(tmp_path):
    app, client = make(tmp_path, private=True)
    with client:
        token = app.state.ctx.db.create_token("p", True)
        r = client.get("/api/v1/health")
        assert r.status_code == 200 and r.json() == {"ok": True}
        full = client.get("/api/v1/health", headers={"Authorization": f"Bearer {token}"}).json()
        assert full["ok"] is True and full["database"] == "ok" and full["storage"] == "ok" and "queued" in full


def test_health_reports_storage_that_refuses_writes(tmp_path):
    import shutil

    app, client = make(tmp_path)
    with client:
        ctx = app.state.ctx
        assert client.get("/api/v1/health").json()["storage"] == "ok"
        ctx.disk_full()  # an upload just found the disk full: health says so, though space shows free
        r = client.get("/api/v1/health")
        assert r.status_code == 503 and r.json()["storage"].startswith("full: an upload was refused")
        assert r.headers["retry-after"]
        ctx.disk_full_at = -1e9
        tmp = ctx.settings.tmp
        shutil.rmtree(tmp)
        tmp.write_bytes(b"")  # a write under DATA/tmp fails
        try:
            r = client.get("/api/v1/health")
            assert r.status_code == 503 and r.json()["storage"].startswith("refuses writes"), r.text
        finally:
            tmp.unlink()
            tmp.mkdir()
        assert client.get("/api/v1/health").status_code == 200

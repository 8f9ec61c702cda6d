"""CI without stored secrets, against a local OIDC issuer on loopback (a tiny HTTP server serving its
discovery document and its JWKS; tokens signed with a key made here): a CI job's token that satisfies the
project's policy is exchanged for a short-lived token that uploads; a wrong audience, issuer, claim, key,
algorithm or an expired token is refused (and counted against the client, audited); the keys are fetched
from the policy's JWKS URL only, and cached; long-lived tokens still work."""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest
from serve_helpers import SAMPLES

pytest.importorskip("starlette")
jwt = pytest.importorskip("jwt")
pytest.importorskip("cryptography")

from click.testing import CliRunner  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from traceanalyzer.commands.serve import serve_command  # noqa: E402
from traceanalyzer.serve import oidc  # noqa: E402
from traceanalyzer.serve.app import create_app  # noqa: E402
from traceanalyzer.serve.settings import Settings  # noqa: E402

AUD = "traceanalyzer"
REPO = "acme/resnet"


class Issuer:
    """An OIDC issuer on loopback: /.well-known/openid-configuration, /jwks; counts every path fetched."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = "k1"
        self.fetched: list[str] = []
        issuer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                issuer.fetched.append(self.path)
                if self.path.startswith("/gh-token?"):  # GitHub Actions' ID-token request endpoint
                    from urllib.parse import parse_qs, urlsplit

                    assert self.headers["Authorization"] == "Bearer gh-request-token"
                    audience = parse_qs(urlsplit(self.path).query)["audience"][0]
                    body = json.dumps({"value": issuer.token(aud=audience)}).encode()
                elif self.path == "/.well-known/openid-configuration":
                    body = json.dumps({"issuer": issuer.url, "jwks_uri": issuer.url + "/jwks"}).encode()
                elif self.path == "/jwks":
                    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(issuer.key.public_key()))
                    body = json.dumps({"keys": [{**jwk, "kid": issuer.kid, "use": "sig", "alg": "RS256"}]}).encode()
                else:
                    self.send_response(302 if self.path == "/moved" else 404)
                    self.send_header("Location", issuer.url + "/jwks")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def token(self, key=None, kid=None, alg="RS256", **claims) -> str:
        now = int(time.time())
        body = {"iss": self.url, "aud": AUD, "sub": f"repo:{REPO}:ref:refs/heads/main", "repository": REPO,
                "ref": "refs/heads/main", "iat": now, "nbf": now, "exp": now + 300, **claims}
        return jwt.encode({k: v for k, v in body.items() if v is not None}, key or self.key, algorithm=alg,
                          headers={"kid": kid or self.kid})


@pytest.fixture()
def issuer():
    i = Issuer()
    yield i
    i.server.shutdown()


def test_a_ci_jobs_oidc_token_is_exchanged_for_a_short_lived_token_that_uploads(tmp_path, issuer):
    data = tmp_path / "data"
    made = CliRunner().invoke(serve_command, ["oidc", "add", "--data", str(data), "--project", "resnet",
                                              "--issuer", issuer.url, "--audience", AUD, "--claim",
                                              f"repository={REPO}", "--ttl", "10min"])
    assert made.exit_code == 0, made.output
    assert issuer.fetched == ["/.well-known/openid-configuration"]  # the keys' address, found once and stored
    listed = CliRunner().invoke(serve_command, ["oidc", "list", "--data", str(data)])
    assert f"keys {issuer.url}/jwks" in listed.output and '"repository": "acme/resnet"' in listed.output
    app = create_app(Settings(data=data, max_failures=100), run_jobs=False)
    with TestClient(app, base_url="http://testserver") as client:
        db = app.state.ctx.db
        long_lived = db.create_token("resnet", False)

        def exchange(jwt_text: str, project: str = "resnet"):
            return client.post(f"/api/v1/projects/{project}/oidc-token",
                               headers={"Authorization": f"Bearer {jwt_text}"})

        r = exchange(issuer.token())
        assert r.status_code == 201, r.text
        given = r.json()
        assert given["project"] == "resnet" and given["role"] == "upload" and given["token"].startswith("ta_")
        assert abs(given["expires_at"] - (time.time() + 600)) < 5 and r.headers["cache-control"] == "no-store"
        body = (SAMPLES / "basic.json").read_bytes()
        for token in (given["token"], long_lived):  # the given token uploads; a long-lived one still does
            up = client.post("/api/v1/projects/resnet/runs", content=body + b" " * len(token[:3]),
                             headers={"Authorization": f"Bearer {token}", "Content-Type": "application/octet-stream"})
            assert up.status_code == 201, up.text
        listed = db.list_tokens("resnet")
        mine = next(t for t in listed if t["name"] == f"oidc {REPO}")
        assert mine["expires_at"] == pytest.approx(given["expires_at"]) and mine["role"] == "upload"
        assert [a["action"] for a in db.audit_log("resnet", action="token.create")] == ["token.create"]
        assert exchange(issuer.token()).status_code == 201
        assert issuer.fetched.count("/jwks") == 1  # cached

        other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        refusals = {
            "wrong audience": (issuer.token(aud="someone-else"), 401, "another audience"),
            "wrong repository": (issuer.token(repository="mallory/resnet"), 403, "repository"),
            "no repository": (issuer.token(repository=None), 403, "repository"),
            "expired": (issuer.token(exp=int(time.time()) - 3600, iat=int(time.time()) - 4000), 401, "expired"),
            "another key, same kid": (issuer.token(key=other_key), 401, "not valid"),
            "another issuer": (issuer.token(iss="https://evil.example"), 401, "no OIDC token of issuer"),
            "a shared-secret algorithm": (jwt.encode({"iss": issuer.url, "aud": AUD}, "s" * 32, algorithm="HS256"),
                                          401, "only RS256"),
            "not a JWT": ("ta_not-a-jwt", 401, "not a JWT"),
        }
        for what, (text, status, words) in refusals.items():
            r = exchange(text)
            assert r.status_code == status and words in r.json()["error"], (what, r.text)
        assert exchange(issuer.token(), project="other").status_code == 401  # no policy for that project
        # an unknown key id refetches the keys, at most once a minute; an address a token names is never fetched
        rogue = jwt.encode({"iss": issuer.url, "aud": AUD}, other_key, algorithm="RS256",
                           headers={"kid": "k2", "jku": issuer.url + "/rogue-jwks", "x5u": issuer.url + "/rogue"})
        for _ in range(3):
            assert exchange(rogue).status_code == 401
        assert issuer.fetched.count("/jwks") == 1 and not any("rogue" in p for p in issuer.fetched)
        failures = [a for a in db.audit_log(action="oidc.fail", limit=100)]
        assert len(failures) == len(refusals) + 1 + 3 and all(a["source"] == "testclient" for a in failures)


def test_the_keys_are_fetched_again_for_an_unknown_key_after_a_minute_and_never_past_a_redirect(issuer):
    fetched: list[str] = []

    def fetch(url):
        fetched.append(url)
        return oidc.fetch_json(url)

    keys = oidc.KeyCache(fetch)
    url = issuer.url + "/jwks"
    assert keys.key(url, "k1") is not None and keys.key(url, "k9") is None and len(fetched) == 1
    keys._sets[url] = (time.monotonic() - oidc.REFETCH_MIN_S - 1, keys._sets[url][1])  # a minute later
    assert keys.key(url, "k9") is None and len(fetched) == 2
    with pytest.raises(oidc.OidcError, match="answered 302"):
        oidc.fetch_json(issuer.url + "/moved")
    assert issuer.fetched[-1] == "/moved" and issuer.fetched.count("/jwks") == 2  # not followed
    with pytest.raises(oidc.OidcError, match="https"):
        oidc.check_url("http://example.com/jwks", "JWKS URL")  # plain http only on loopback


@pytest.mark.slow  # a real server and the upload client
def test_the_upload_client_exchanges_the_jobs_oidc_token_and_stores_no_secret(tmp_path, issuer):
    import os
    import subprocess
    import sys

    from serve_helpers import Server

    from traceanalyzer.serve.store import Store

    server = Server(tmp_path / "data", None, "--jobs", "0").start()
    try:
        store = Store(Settings(server.data, None).database_url)
        try:
            oidc.add_policy(store, "resnet", issuer.url, AUD, issuer.url + "/jwks", {"repository": REPO})
        finally:
            store.close()
        trace = tmp_path / "t.json"
        trace.write_bytes((SAMPLES / "basic.json").read_bytes())
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TRACEANALYZER_", "ACTIONS_", "GITHUB_"))}

        def client(extra_env, *args):
            return subprocess.run([sys.executable, "-m", "traceanalyzer", "upload", str(trace), "--server",
                                   server.url, "--project", "resnet", *args], capture_output=True, text=True,
                                  timeout=120, env={**env, **extra_env})

        # GitHub Actions: the job asks its CI for a token of the audience, then the service for its own
        gh = {"ACTIONS_ID_TOKEN_REQUEST_URL": issuer.url + "/gh-token?api-version=2.0",
              "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "gh-request-token"}
        done = client(gh, "--oidc-audience", AUD)
        assert done.returncode == 0 and done.stdout.startswith(f"{server.url}/runs/"), done.stderr
        run = server.get("/api/v1/runs/" + done.stdout.strip().rsplit("/", 1)[-1]).json()
        assert run["uploaded_by"].startswith(f"oidc {REPO} (token #")
        # another CI: the JWT in the environment; one for another repository is refused (exit 2, one line)
        assert client({"TRACEANALYZER_OIDC_TOKEN": issuer.token()}, "--oidc-audience", AUD).returncode == 0
        refused = client({"TRACEANALYZER_OIDC_TOKEN": issuer.token(repository="mallory/x")}, "--oidc-audience", AUD)
        assert refused.returncode == 2 and "refused (403)" in refused.stderr and "repository" in refused.stderr
        none = client({}, "--oidc-audience", AUD)
        assert none.returncode == 2 and "no OIDC token" in none.stderr
    finally:
        server.stop()

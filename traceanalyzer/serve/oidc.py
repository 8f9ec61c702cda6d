"""CI without stored secrets: a CI job proves who it is with its OIDC token (a JWT its CI service signs:
GitHub Actions, GitLab, ...) and gets a short-lived token of a project in exchange, so no long-lived
token sits in the repository's secrets.

A project's *policy* (`traceanalyzer serve oidc add`) names the issuer, the audience, the claims a token
must carry (e.g. `repository=owner/repo`), the role and the life of the tokens it gives, and the JWKS URL
the issuer's keys are fetched from (found once, when the policy is made, from the issuer's discovery
document, and stored). At an exchange the service verifies the JWT's RS256 signature with a key of that
URL (fetched with no redirect, bounded in time and size, cached `JWKS_CACHE_S`; fetched again for an
unknown key id at most every `REFETCH_MIN_S`), its issuer, audience, expiry (`LEEWAY_S` of clock skew)
and every claim of the policy. It never fetches an address a token names (`jku`, `x5u`): only the
stored JWKS URL of a policy of the project. The token it gives is an ordinary token of the project
(audited as made, expiring after the policy's life), named after the job's repository.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import sqlalchemy as sa

from .store import Actor, Store, oidc_policies

MAX_JWT_CHARS = 16_000  # a CI job's token is 1-2 KB
MAX_JWKS_BYTES = 1 << 20
FETCH_TIMEOUT_S = 5.0
JWKS_CACHE_S = 600.0  # an issuer's keys are kept this long (issuers rotate keys over days)
REFETCH_MIN_S = 60.0  # a token with an unknown key id fetches the keys again at most this often
LEEWAY_S = 60  # clock skew allowed between the issuer and this server
DEFAULT_TTL_S = 900.0  # the life of a token given for a CI job: its upload and its wait for the analysis
ALGORITHMS = ["RS256"]  # what CI issuers sign with; never "none" nor a shared-secret algorithm


class OidcError(Exception):
    """A refused exchange: HTTP status and one line."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Policy:
    id: int
    project: str
    issuer: str
    audience: str
    jwks_url: str
    claims: dict[str, str]
    read_only: bool
    ttl_s: float


def _loopback(host: str | None) -> bool:
    return host in ("127.0.0.1", "::1", "localhost")


def check_url(url: str, what: str) -> str:
    """An https URL (http only on loopback, for tests and a local issuer), without credentials."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname or parts.username or parts.password:
        raise OidcError(400, f"bad {what} {url[:200]!r}: an https URL")
    if parts.scheme == "http" and not _loopback(parts.hostname):
        raise OidcError(400, f"bad {what} {url[:200]!r}: https (http only on loopback)")
    return url


def fetch_json(url: str) -> Any:
    """GET `url` as JSON: no redirect followed, `FETCH_TIMEOUT_S`, at most `MAX_JWKS_BYTES`."""
    import http.client

    parts = urlsplit(check_url(url, "URL"))
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname or "", parts.port, timeout=FETCH_TIMEOUT_S)
    try:
        conn.request("GET", (parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
                     headers={"Accept": "application/json", "User-Agent": "traceanalyzer-serve"})
        resp = conn.getresponse()
        data = resp.read(MAX_JWKS_BYTES + 1)
    except (OSError, http.client.HTTPException) as exc:
        raise OidcError(503, f"cannot fetch {url[:200]}: {type(exc).__name__}") from None
    finally:
        conn.close()
    if resp.status != 200:
        raise OidcError(503, f"{url[:200]} answered {resp.status} (no redirect is followed)")
    if len(data) > MAX_JWKS_BYTES:
        raise OidcError(503, f"{url[:200]}: more than {MAX_JWKS_BYTES} bytes")
    try:
        return json.loads(data)
    except ValueError:
        raise OidcError(503, f"{url[:200]}: not JSON") from None


def discover_jwks_url(issuer: str) -> str:
    """The issuer's JWKS URL, from its discovery document; it must be on the issuer's own host."""
    check_url(issuer, "issuer")
    doc = fetch_json(issuer.rstrip("/") + "/.well-known/openid-configuration")
    jwks = doc.get("jwks_uri") if isinstance(doc, dict) else None
    if not isinstance(jwks, str) or not jwks:
        raise OidcError(400, "the issuer's discovery document has no jwks_uri: give --jwks-url")
    if doc.get("issuer") not in (issuer, issuer.rstrip("/")):
        raise OidcError(400, f"the discovery document is of issuer {str(doc.get('issuer'))[:200]!r}, not {issuer!r}")
    a, b = urlsplit(issuer), urlsplit(check_url(jwks, "jwks_uri"))
    if (a.scheme, a.hostname, a.port) != (b.scheme, b.hostname, b.port):
        raise OidcError(400, f"the issuer's jwks_uri {jwks[:200]!r} is on another host: give --jwks-url to trust it")
    return jwks


# -- policies
def add_policy(store: Store, project: str, issuer: str, audience: str, jwks_url: str, claims: dict[str, str],
               read_only: bool = False, ttl_s: float = DEFAULT_TTL_S, created_by: str | None = None,
               actor: Actor | None = None) -> int:
    check_url(issuer, "issuer")
    check_url(jwks_url, "JWKS URL")
    with store.engine.begin() as c:
        made = c.execute(oidc_policies.insert().values(
            project=project, issuer=issuer, audience=audience, jwks_url=jwks_url, claims=json.dumps(claims),
            read_only=read_only, ttl_s=ttl_s, created_at=time.time(), created_by=created_by))
        policy_id = int((made.inserted_primary_key or [0])[0])
        if actor is not None:
            store._audit(c, actor, "oidc.add", project, f"oidc policy #{policy_id}",
                         f"issuer {issuer}, audience {audience}, claims {json.dumps(claims)}, keys {jwks_url}")
    return policy_id


def policies(store: Store, project: str | None = None) -> list[Policy]:
    q = sa.select(oidc_policies).order_by(oidc_policies.c.id)
    if project:
        q = q.where(oidc_policies.c.project == project)
    with store.engine.connect() as c:
        rows = c.execute(q).all()
    return [Policy(int(r.id), r.project, r.issuer, r.audience, r.jwks_url, json.loads(r.claims), bool(r.read_only),
                   float(r.ttl_s)) for r in rows]


def remove_policy(store: Store, policy_id: int, actor: Actor | None = None) -> bool:
    with store.engine.begin() as c:
        project = c.execute(sa.select(oidc_policies.c.project).where(oidc_policies.c.id == policy_id)).scalar()
        done = bool(c.execute(oidc_policies.delete().where(oidc_policies.c.id == policy_id)).rowcount)
        if done and actor is not None:
            store._audit(c, actor, "oidc.remove", project, f"oidc policy #{policy_id}", None)
    return done


# -- keys
class KeyCache:
    """The keys of each JWKS URL, fetched on demand and kept `JWKS_CACHE_S`."""

    def __init__(self, fetch: Any = fetch_json) -> None:
        self.fetch = fetch
        self._sets: dict[str, tuple[float, dict[str, Any]]] = {}  # url -> (fetched at, kid -> key)
        self._lock = threading.Lock()

    def _load(self, url: str) -> dict[str, Any]:
        import jwt

        doc = self.fetch(url)
        try:
            keys = jwt.PyJWKSet.from_dict(doc).keys
        except (jwt.PyJWKSetError, jwt.InvalidKeyError, TypeError, ValueError, KeyError):
            raise OidcError(503, f"{url[:200]}: no usable key") from None
        found = {str(k.key_id or ""): k for k in keys if k.key_type == "RSA"}
        self._sets[url] = (time.monotonic(), found)
        return found

    def key(self, url: str, kid: str) -> Any:
        """The key `kid` of the set at `url` (the set's only key when the token names none), or None."""
        with self._lock:
            fetched_at, found = self._sets.get(url, (-1e18, {}))
            age = time.monotonic() - fetched_at
            if age > JWKS_CACHE_S or (kid not in found and age > REFETCH_MIN_S):
                found = self._load(url)
        if kid in found:
            return found[kid]
        if not kid and len(found) == 1:
            return next(iter(found.values()))
        return None


# -- the exchange
class Exchanger:
    def __init__(self, store: Store, keys: KeyCache | None = None) -> None:
        self.store = store
        self.keys = keys or KeyCache()

    def verify(self, project: str, text: str) -> tuple[Policy, dict[str, Any]]:
        """The policy of `project` the JWT `text` satisfies, and its claims; OidcError when none does."""
        import jwt

        if not text or len(text) > MAX_JWT_CHARS:
            raise OidcError(401, "send the CI job's OIDC token: Authorization: Bearer JWT")
        try:
            header = jwt.get_unverified_header(text)
            unverified = jwt.decode(text, options={"verify_signature": False})
        except jwt.PyJWTError:
            raise OidcError(401, "not a JWT") from None
        if header.get("alg") not in ALGORITHMS:
            raise OidcError(401, f"a JWT signed with {str(header.get('alg'))[:20]!r}: only RS256 is taken")
        issuer = unverified.get("iss")
        candidates = [p for p in policies(self.store, project) if p.issuer == issuer]
        if not candidates:
            raise OidcError(401, f"project {project} takes no OIDC token of issuer {str(issuer)[:200]!r} "
                                 f"(traceanalyzer serve oidc add)")
        kid = str(header.get("kid") or "")
        refused = OidcError(401, "the OIDC token does not match the project's policy")
        for policy in candidates:
            key = self.keys.key(policy.jwks_url, kid)
            if key is None:
                refused = OidcError(401, "the OIDC token is signed with a key its issuer does not publish")
                continue
            try:
                claims = jwt.decode(text, key.key, algorithms=ALGORITHMS, audience=policy.audience,
                                    issuer=policy.issuer, leeway=LEEWAY_S,
                                    options={"require": ["exp", "iat", "iss", "aud", "sub"]})
            except jwt.ExpiredSignatureError:
                refused = OidcError(401, "the OIDC token has expired")
                continue
            except jwt.InvalidAudienceError:
                refused = OidcError(401, "the OIDC token is for another audience")
                continue
            except jwt.PyJWTError as exc:
                refused = OidcError(401, f"the OIDC token is not valid ({type(exc).__name__})")
                continue
            wrong = sorted(k for k, v in policy.claims.items() if str(claims.get(k)) != v)
            if wrong:
                refused = OidcError(403, f"the OIDC token's {', '.join(wrong)} is not what the project's policy "
                                         f"requires")
                continue
            return policy, claims
        raise refused

    def exchange(self, project: str, text: str, source: str) -> dict[str, Any]:
        """A short-lived token of `project` for a verified CI job: {token, project, role, expires_at}."""
        policy, claims = self.verify(project, text)
        who = str(claims.get("repository") or claims.get("project_path") or claims.get("sub"))[:60]
        expires_at = time.time() + policy.ttl_s
        actor = Actor(f"oidc {str(claims.get('sub'))[:150]}", None, source)
        token = self.store.create_token(project, policy.read_only, name=f"oidc {who}"[:100],
                                        created_by=f"oidc policy #{policy.id}", expires_at=expires_at, actor=actor)
        return {"token": token, "project": project, "role": "read" if policy.read_only else "upload",
                "expires_at": expires_at}

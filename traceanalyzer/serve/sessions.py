"""Browser sessions: what the login cookie holds instead of a token.

A login (a token typed into /login) makes a session: 256 random bits, sent to the browser once in the
cookie `ta_session` (HttpOnly, SameSite=Strict, Secure behind https) and stored only as its SHA-256 with
the token it logged in with. A session ends at its expiry (`Settings.session_s`, a few hours: no
sliding renewal), at logout, when the same browser logs in again (the id is rotated: the old one is
revoked), and with its token (revoked or expired: every lookup checks the token too). The token itself
never leaves the login form.
"""

from __future__ import annotations

import secrets
import time

import sqlalchemy as sa

from .store import Store, TokenInfo, hash_token, sessions, tokens

COOKIE = "ta_session"
MAX_ID_CHARS = 100  # a cookie longer than any id we make is not looked up


def create(store: Store, token_id: int, ttl_s: float, source: str, replaces: str | None = None) -> str:
    """A new session of this token (its id, for the cookie); `replaces`: the browser's previous session,
    revoked in the same transaction (a login rotates the id)."""
    sid = secrets.token_urlsafe(32)
    now = time.time()
    with store.engine.begin() as c:
        if replaces:
            c.execute(sessions.update().where(sessions.c.id_hash == hash_token(replaces[:MAX_ID_CHARS]),
                                              sessions.c.revoked_at.is_(None)).values(revoked_at=now))
        c.execute(sessions.delete().where(sessions.c.expires_at < now - 86400))  # long dead: no need to keep
        c.execute(sessions.insert().values(id_hash=hash_token(sid), token_id=token_id, created_at=now,
                                           expires_at=now + ttl_s, source=source[:200]))
    return sid


def lookup(store: Store, sid: str | None) -> TokenInfo | None:
    """The token of a live session: None when the id is unknown, expired or revoked, or its token is."""
    if not sid or len(sid) > MAX_ID_CHARS:
        return None
    now = time.time()
    q = (sa.select(tokens.c.id, tokens.c.project, tokens.c.read_only)
         .select_from(sessions.join(tokens, tokens.c.id == sessions.c.token_id))
         .where(sessions.c.id_hash == hash_token(sid), sessions.c.revoked_at.is_(None), sessions.c.expires_at > now,
                tokens.c.revoked_at.is_(None),
                sa.or_(tokens.c.expires_at.is_(None), tokens.c.expires_at > now)))
    with store.engine.connect() as c:
        row = c.execute(q).first()
    return None if row is None else TokenInfo(int(row.id), row.project, bool(row.read_only))


def revoke(store: Store, sid: str | None) -> bool:
    """Ends a session (logout). False: no such live session."""
    if not sid or len(sid) > MAX_ID_CHARS:
        return False
    with store.engine.begin() as c:
        return bool(c.execute(sessions.update().where(sessions.c.id_hash == hash_token(sid),
                                                      sessions.c.revoked_at.is_(None))
                              .values(revoked_at=time.time())).rowcount)


def revoke_all(store: Store, token_id: int) -> int:
    """Ends every session of a token (its sessions end with it anyway; this also ends them while it lives)."""
    with store.engine.begin() as c:
        return int(c.execute(sessions.update().where(sessions.c.token_id == token_id, sessions.c.revoked_at.is_(None))
                             .values(revoked_at=time.time())).rowcount)

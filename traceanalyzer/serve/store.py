"""The service's database, through SQLAlchemy Core: the same queries on SQLite (the default, a file in
DATA) and on PostgreSQL (`--db postgresql://...`). The schema is made and changed only by the Alembic
migrations in `migrations/versions` (run by `migrate()` at start); the tables below describe it for
queries, and a test checks that the two agree.

Tokens are stored as their SHA-256 (a token is 256 random bits, so a fast hash is enough): one shown
once, never stored. A token has a name, a role (upload or read), who made it, when it was made, last used,
expires and was revoked; a revoked or expired token is unknown at once.

A job belongs to one run: queued -> running -> done | failed, or canceled (its run deleted while it
ran). A worker *claims* a job with a lease (its id, `lease_until`, a heartbeat that renews it):
`FOR UPDATE SKIP LOCKED` on PostgreSQL, `BEGIN IMMEDIATE` on SQLite, so one job goes to one worker.
A running job whose lease expired (its worker killed or cut off) is claimed again by any worker, until
it has used `max_tries`; a job whose worker is alive is never taken from it. `finish`, `requeue` and
the heartbeat are fenced on (job, worker, try): a worker that lost its job changes nothing.

Trace files are stored by content; each has a row in `blobs` that uploads and deletes lock (upload:
lock, put the file in place, record the run, commit; delete: lock, check no run uses it, remove the
file, commit), so a delete never removes a file a new upload of the same content uses.

Every write a person or a CI job makes (an upload, a project made by its first upload, a delete or a
cancel, a token made or revoked) is recorded in `audit`, in the same transaction as the write (and so
are the writes refused, failed logins and unknown tokens, each in a row of its own: `record`): who (the
token's name and id, or the user of the command line), what, when, and from where (the client's address,
or the command line's user@host).
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Engine

metadata = sa.MetaData()

projects = sa.Table(
    "projects", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(64), nullable=False, unique=True),
    sa.Column("created_at", sa.Float, nullable=False),
)
tokens = sa.Table(
    "tokens", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("project", sa.String(64), nullable=False, index=True),
    sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("read_only", sa.Boolean, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("name", sa.String(100), nullable=True),  # migration 0003: who and what a token is for
    sa.Column("created_by", sa.String(100), nullable=True),
    sa.Column("last_used_at", sa.Float, nullable=True),
    sa.Column("expires_at", sa.Float, nullable=True),
    sa.Column("revoked_at", sa.Float, nullable=True),
)
runs = sa.Table(
    "runs", metadata,
    sa.Column("id", sa.String(16), primary_key=True),
    sa.Column("project_id", sa.Integer, sa.ForeignKey("projects.id"), nullable=False, index=True),
    sa.Column("branch", sa.String(200), nullable=True, index=True),
    sa.Column("commit", sa.String(100), nullable=True),
    sa.Column("created_at", sa.Float, nullable=False, index=True),
    sa.Column("size_bytes", sa.BigInteger, nullable=False),
    sa.Column("files", sa.Integer, nullable=False),
    sa.Column("verdict", sa.String(40), nullable=True),
    # step_time_ms and gpu_idle: in run_metrics only, with the run's other metrics (migration 0004)
    sa.Column("commit_order", sa.Float, nullable=True),  # optional: orders a branch's history (migration 0002)
    sa.Column("token_id", sa.Integer, nullable=True),  # the token that uploaded it (migration 0003)
    sa.Column("setting", sa.String(100), nullable=True),  # the upload's setting label (migration 0007)
    sa.Column("repeat_of", sa.String(16), nullable=True, index=True),  # the first run of the setting it repeats
)
run_files = sa.Table(
    "run_files", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.String(16), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False, index=True),
    sa.Column("position", sa.Integer, nullable=False),
    sa.Column("sha256", sa.String(64), nullable=False, index=True),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("size_bytes", sa.BigInteger, nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    # what the run page shows without reading the file, written when its analysis finishes (migration blob_0006)
    sa.Column("format", sa.String(32), nullable=True),  # the reader the analysis used (kineto, pftrace, ...)
    sa.Column("perfetto", sa.Boolean, nullable=True),  # the Perfetto UI opens the file as stored
)
run_metrics = sa.Table(  # one row per run and figure, written when its analysis is done (migration 0002)
    "run_metrics", metadata,
    sa.Column("run_id", sa.String(16), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("metric", sa.String(40), primary_key=True),
    sa.Column("value", sa.Float, nullable=True),
)
jobs = sa.Table(
    "jobs", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.String(16), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False, unique=True),
    sa.Column("status", sa.String(16), nullable=False, index=True),
    sa.Column("tries", sa.Integer, nullable=False),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("pid", sa.Integer, nullable=True),
    sa.Column("queued_at", sa.Float, nullable=False),
    sa.Column("started_at", sa.Float, nullable=True),
    sa.Column("finished_at", sa.Float, nullable=True),
    sa.Column("worker_id", sa.String(100), nullable=True),  # migration 0003: the lease
    sa.Column("lease_until", sa.Float, nullable=True),  # running: expiry of the lease; queued: not before
    sa.Column("heartbeat_at", sa.Float, nullable=True),
)
blobs = sa.Table(  # one row per stored trace file: the lock that uploads and deletes take (migration 0003)
    "blobs", metadata,
    sa.Column("sha256", sa.String(64), primary_key=True),
    sa.Column("touched_at", sa.Float, nullable=False),
)

audit = sa.Table(  # one row per write (migration 0005)
    "audit", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("at", sa.Float, nullable=False, index=True),
    sa.Column("actor", sa.String(200), nullable=False),  # the token's name (#id), or the command line's user
    sa.Column("token_id", sa.Integer, nullable=True),
    sa.Column("source", sa.String(200), nullable=False),  # the client's address, or "cli user@host"
    sa.Column("action", sa.String(40), nullable=False),  # e.g. run.upload, run.delete, token.revoke
    sa.Column("project", sa.String(64), nullable=True, index=True),
    sa.Column("target", sa.String(200), nullable=True),  # the run id, or "token #id"
    sa.Column("detail", sa.Text, nullable=True),
)

sessions = sa.Table(  # one row per browser login; the cookie holds the id, the row its SHA-256 (migration 0006)
    "sessions", metadata,
    sa.Column("id_hash", sa.String(64), primary_key=True),
    sa.Column("token_id", sa.Integer, nullable=False, index=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("expires_at", sa.Float, nullable=False),
    sa.Column("revoked_at", sa.Float, nullable=True),
    sa.Column("source", sa.String(200), nullable=True),  # the client's address at login
)

oidc_policies = sa.Table(  # who may exchange a CI job's OIDC token for a short-lived one (migration 0008)
    "oidc_policies", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("project", sa.String(64), nullable=False, index=True),
    sa.Column("issuer", sa.String(500), nullable=False),
    sa.Column("audience", sa.String(500), nullable=False),
    sa.Column("jwks_url", sa.String(1000), nullable=False),  # the only address its keys are fetched from
    sa.Column("claims", sa.Text, nullable=False),  # JSON: claim -> the value it must have (e.g. repository)
    sa.Column("read_only", sa.Boolean, nullable=False),
    sa.Column("ttl_s", sa.Float, nullable=False),  # life of the tokens it gives
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("created_by", sa.String(100), nullable=True),
)

counters = sa.Table(  # the service's counters for /metrics, one row each (migration blob_0006)
    "counters", metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("value", sa.BigInteger, nullable=False),
)

STATUSES = ("queued", "running", "done", "failed", "canceled")
SHOWN_METRICS = ("step_time_ms", "gpu_idle")  # the run's metrics (result/metrics.py) a run's row carries
ROLES = ("upload", "read")


class Claim(NamedTuple):
    """A job a worker holds: what `finish`, `requeue` and `heartbeat` are fenced on."""

    id: int
    run_id: str
    tries: int
    worker_id: str


class Actor(NamedTuple):
    """Who makes a write, for the audit."""

    name: str
    token_id: int | None
    source: str


def cli_actor(user: str | None = None) -> Actor:
    """The person at the command line (a token command): $USER (or `user`) at this host."""
    import getpass
    import socket

    try:
        login = getpass.getuser()
    except Exception:  # no user name in the environment or the password database
        login = "unknown"
    return Actor((user or login)[:200], None, f"cli {login}@{socket.gethostname()}"[:200])


class TokenInfo(NamedTuple):
    id: int
    project: str
    read_only: bool


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def engine_for(url: str) -> Engine:
    """An engine for `url`; a bare postgresql:// URL uses psycopg 3 (the driver the `serve` extra installs)."""
    if url.startswith(("postgresql://", "postgres://")):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    if url.startswith("sqlite"):
        engine = sa.create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None  # we begin each transaction ourselves (below)
            cur = dbapi_connection.cursor()
            cur.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        @sa.event.listens_for(engine, "begin")
        def _begin(conn: sa.Connection) -> None:  # a write that reads first takes the write lock first
            conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("immediate") else "BEGIN")

        return engine
    return sa.create_engine(url, pool_pre_ping=True)


@dataclass(frozen=True)
class StoredFile:
    sha256: str
    name: str  # for display only (sanitised); never a path on the server
    size_bytes: int
    kind: str  # file | gzip | zip | tar | tar.gz
    format: str | None = None  # the reader its analysis used; None before (or for an archive)
    perfetto: bool | None = None  # the Perfetto UI opens it as stored; None: not known yet


class Store:
    def __init__(self, url: str) -> None:
        self.engine = engine_for(url)

    def migrate(self) -> None:
        """Bring the schema to the newest migration (creates it in an empty database)."""
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(Path(__file__).with_name("migrations")))
        with self.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    def close(self) -> None:
        self.engine.dispose()

    @contextlib.contextmanager
    def _write(self) -> Iterator[sa.Connection]:
        """A transaction that takes the write lock at its start on SQLite (BEGIN IMMEDIATE): what it reads
        is what it changes. On PostgreSQL a plain transaction (its statements lock the rows they need)."""
        with self.engine.connect() as c:
            c.execution_options(immediate=True)
            with c.begin():
                yield c

    # -- tokens and projects
    def create_token(self, project: str, read_only: bool, name: str | None = None, created_by: str | None = None,
                     expires_at: float | None = None, actor: Actor | None = None) -> str:
        token = "ta_" + secrets.token_urlsafe(32)
        with self.engine.begin() as c:
            made = c.execute(tokens.insert().values(project=project, token_hash=hash_token(token), read_only=read_only,
                                                    created_at=time.time(), name=name, created_by=created_by,
                                                    expires_at=expires_at))
            if actor is not None:
                token_id = (made.inserted_primary_key or [None])[0]
                role = "read" if read_only else "upload"
                self._audit(c, actor, "token.create", project, f"token #{token_id}",
                            f"role {role}" + (f", name {name}" if name else "")
                            + (f", expires {_utc(expires_at)}" if expires_at is not None else ""))
        return token

    def token(self, token: str) -> TokenInfo | None:
        """(id, project, read_only) of a token, or None when it is unknown, revoked or expired. Its last use
        is recorded (at most once a minute, so reads do not each write)."""
        now = time.time()
        with self.engine.connect() as c:
            row = c.execute(sa.select(tokens.c.id, tokens.c.project, tokens.c.read_only, tokens.c.last_used_at,
                                      tokens.c.expires_at, tokens.c.revoked_at)
                            .where(tokens.c.token_hash == hash_token(token))).first()
        if row is None or row.revoked_at is not None or (row.expires_at is not None and row.expires_at <= now):
            return None
        if row.last_used_at is None or row.last_used_at < now - 60:
            with self.engine.begin() as c:
                c.execute(tokens.update().where(tokens.c.id == row.id).values(last_used_at=now))
        return TokenInfo(int(row.id), row.project, bool(row.read_only))

    def list_tokens(self, project: str | None = None) -> list[dict[str, Any]]:
        q = sa.select(tokens.c.id, tokens.c.project, tokens.c.name, tokens.c.read_only, tokens.c.created_by,
                      tokens.c.created_at, tokens.c.last_used_at, tokens.c.expires_at, tokens.c.revoked_at)
        if project:
            q = q.where(tokens.c.project == project)
        with self.engine.connect() as c:
            out = [dict(r) for r in c.execute(q.order_by(tokens.c.id)).mappings()]
        for t in out:
            t["role"] = "read" if t.pop("read_only") else "upload"
        return out

    def revoke_token(self, token_id: int, actor: Actor | None = None) -> bool:
        """Revokes a token (refused at once on every server: each request looks its token up). False: no
        such token, or revoked already."""
        with self.engine.begin() as c:
            done = bool(c.execute(tokens.update().where(tokens.c.id == token_id, tokens.c.revoked_at.is_(None))
                                  .values(revoked_at=time.time())).rowcount)
            if done and actor is not None:
                project = c.execute(sa.select(tokens.c.project).where(tokens.c.id == token_id)).scalar()
                self._audit(c, actor, "token.revoke", project, f"token #{token_id}", None)
        return done

    # -- the audit of writes
    @staticmethod
    def _audit(c: sa.Connection, actor: Actor, action: str, project: str | None, target: str | None,
               detail: str | None) -> None:
        c.execute(audit.insert().values(at=time.time(), actor=actor.name[:200], token_id=actor.token_id,
                                        source=actor.source[:200], action=action, project=project,
                                        target=None if target is None else target[:200], detail=detail))

    def record(self, actor: Actor, action: str, project: str | None, target: str | None,
               detail: str | None) -> None:
        """An audit row of its own: a failed login or token, a refused write, a throttled client."""
        with self.engine.begin() as c:
            self._audit(c, actor, action, project, target, detail)

    def audit_log(self, project: str | None = None, since: float | None = None, action: str | None = None,
                  limit: int = 100) -> list[dict[str, Any]]:
        """The newest writes first: `project`, `action` (or its start, e.g. "run."), at or after `since`."""
        q = sa.select(audit)
        if project:
            q = q.where(audit.c.project == project)
        if since is not None:
            q = q.where(audit.c.at >= since)
        if action:
            q = q.where(audit.c.action.like(action.replace("%", "").replace("_", "\\_") + "%", escape="\\"))
        with self.engine.connect() as c:
            return [dict(r) for r in c.execute(q.order_by(audit.c.at.desc(), audit.c.id.desc()).limit(limit))
                    .mappings()]

    def token_names(self, ids: Sequence[int]) -> dict[int, str]:
        """'name (#id)' of tokens, for the runs they uploaded."""
        if not ids:
            return {}
        with self.engine.connect() as c:
            rows = c.execute(sa.select(tokens.c.id, tokens.c.name).where(tokens.c.id.in_(sorted(set(ids)))))
            return {int(r.id): f"{r.name} (#{r.id})" if r.name else f"token #{r.id}" for r in rows}

    def project_names(self) -> list[str]:
        with self.engine.connect() as c:
            return [r.name for r in c.execute(sa.select(projects.c.name).order_by(projects.c.name))]

    def project_summaries(self) -> list[dict[str, Any]]:
        """Every project with its number of runs and its last upload, by name."""
        q = (sa.select(projects.c.name, sa.func.count(runs.c.id).label("runs"),
                       sa.func.max(runs.c.created_at).label("last_upload"))
             .select_from(projects.outerjoin(runs, runs.c.project_id == projects.c.id))
             .group_by(projects.c.name).order_by(projects.c.name))
        with self.engine.connect() as c:
            return [dict(r) for r in c.execute(q).mappings()]

    # -- runs
    def create_run(self, project: str, branch: str | None, commit: str | None, files: Sequence[StoredFile],
                   commit_order: float | None = None, token_id: int | None = None,
                   place: Callable[[], None] | None = None, actor: Actor | None = None,
                   setting: str | None = None, repeat_of: str | None = None) -> str:
        """The run, its files and its queued job, in one transaction (the project made on first use).
        `place` puts the files at their content address; it runs inside the transaction, after the
        files' `blobs` rows are locked, so no delete removes them between their check and the commit.
        `setting`, `repeat_of`: see `repeats` (`repeat_of` is resolved by `repeat_root` first)."""
        now = time.time()
        run_id = secrets.token_hex(6)
        pid = self._project_id(project, now, actor)
        with self._write() as c:
            self._lock_blobs(c, [f.sha256 for f in files], now)
            if place is not None:
                place()
            c.execute(runs.insert().values(id=run_id, project_id=pid, branch=branch, commit=commit, created_at=now,
                                           size_bytes=sum(f.size_bytes for f in files), files=len(files),
                                           commit_order=commit_order, token_id=token_id, setting=setting,
                                           repeat_of=repeat_of))
            c.execute(run_files.insert(), [dict(run_id=run_id, position=i, sha256=f.sha256, name=f.name,
                                                size_bytes=f.size_bytes, kind=f.kind) for i, f in enumerate(files)])
            c.execute(jobs.insert().values(run_id=run_id, status="queued", tries=0, queued_at=now))
            self.bump(c, "uploads", 1)
            self.bump(c, "upload_bytes", sum(f.size_bytes for f in files))
            if actor is not None:
                names = ", ".join(f.name for f in files)
                self._audit(c, actor, "run.upload", project, run_id,
                            f"{len(files)} file(s), {sum(f.size_bytes for f in files)} bytes: {names[:300]}"
                            + (f"; branch {branch}" if branch else "") + (f"; commit {commit}" if commit else ""))
        return run_id

    def _lock_blobs(self, c: sa.Connection, shas: Sequence[str], now: float, touch: bool = True) -> None:
        """Makes or locks the `blobs` rows of these hashes until the transaction ends (sorted: no deadlock)."""
        if not shas:
            return
        from sqlalchemy.dialects import postgresql, sqlite

        insert: Any = postgresql.insert if self.engine.dialect.name == "postgresql" else sqlite.insert
        for sha in sorted(set(shas)):
            stmt = insert(blobs).values(sha256=sha, touched_at=now)
            c.execute(stmt.on_conflict_do_update(index_elements=["sha256"],
                                                 set_={"touched_at": now} if touch else {"sha256": sha}))

    def bump(self, c: sa.Connection, name: str, by: int) -> None:
        """Adds `by` to a counter (/metrics), in the caller's transaction."""
        from sqlalchemy.dialects import postgresql, sqlite

        insert: Any = postgresql.insert if self.engine.dialect.name == "postgresql" else sqlite.insert
        c.execute(insert(counters).values(name=name, value=by)
                  .on_conflict_do_update(index_elements=["name"], set_={"value": counters.c.value + by}))

    def counter_values(self) -> dict[str, int]:
        with self.engine.connect() as c:
            return {r.name: int(r.value) for r in c.execute(sa.select(counters))}

    def drop_blob(self, sha256: str, remove: Callable[[], None], unused_since: float | None = None) -> bool:
        """Removes a trace file (`remove`) if no run uses it, or with `unused_since` if every run that uses
        it was uploaded before then (retention), under the lock uploads of the same content take."""
        with self._write() as c:
            self._lock_blobs(c, [sha256], time.time(), touch=False)
            users = sa.select(run_files.c.id).join(runs, runs.c.id == run_files.c.run_id).where(
                run_files.c.sha256 == sha256)
            if unused_since is not None:
                users = users.where(runs.c.created_at >= unused_since)
            if c.execute(users.limit(1)).first() is not None:
                return False
            remove()
            if unused_since is None:
                c.execute(blobs.delete().where(blobs.c.sha256 == sha256))
        return True

    def _project_id(self, project: str, now: float, actor: Actor | None = None) -> int:
        select = sa.select(projects.c.id).where(projects.c.name == project)
        with self.engine.connect() as c:
            pid = c.execute(select).scalar()
        if pid is not None:
            return int(pid)
        try:
            with self.engine.begin() as c:
                c.execute(projects.insert().values(name=project, created_at=now))
                if actor is not None:
                    self._audit(c, actor, "project.create", project, project, "made by its first upload")
        except sa.exc.IntegrityError:  # made meanwhile by another upload
            pass
        with self.engine.connect() as c:
            return int(c.execute(select).scalar_one())

    def _run_query(self) -> sa.Select:
        """A run's row with its project, its job and the metrics a run list shows (from run_metrics, the
        one place a run's figures are stored)."""
        shown = {key: run_metrics.alias(f"m_{key}") for key in SHOWN_METRICS}
        joined = runs.join(projects, projects.c.id == runs.c.project_id).join(jobs, jobs.c.run_id == runs.c.id)
        for key, m in shown.items():
            joined = joined.outerjoin(m, sa.and_(m.c.run_id == runs.c.id, m.c.metric == key))
        return (sa.select(runs, projects.c.name.label("project"), jobs.c.status, jobs.c.error, jobs.c.tries,
                          jobs.c.started_at, jobs.c.finished_at, jobs.c.pid, jobs.c.worker_id,
                          tokens.c.name.label("token_name"),
                          *(m.c.value.label(key) for key, m in shown.items()))
                .select_from(joined.outerjoin(tokens, tokens.c.id == runs.c.token_id)))

    def run(self, run_id: str) -> dict[str, Any] | None:
        with self.engine.connect() as c:
            row = c.execute(self._run_query().where(runs.c.id == run_id)).mappings().first()
            return dict(row) if row else None

    def files(self, run_id: str) -> list[StoredFile]:
        with self.engine.connect() as c:
            rows = c.execute(sa.select(run_files).where(run_files.c.run_id == run_id).order_by(run_files.c.position))
            return [StoredFile(r.sha256, r.name, r.size_bytes, r.kind, r.format, r.perfetto) for r in rows]

    def shas_of(self, run_ids: Sequence[str]) -> dict[str, list[str]]:
        """The file hashes of several runs in one query, in file order."""
        out: dict[str, list[str]] = {i: [] for i in run_ids}
        if not run_ids:
            return out
        with self.engine.connect() as c:
            for r in c.execute(sa.select(run_files.c.run_id, run_files.c.sha256)
                               .where(run_files.c.run_id.in_(list(run_ids))).order_by(run_files.c.position)):
                out[r.run_id].append(r.sha256)
        return out

    def list_runs(self, project: str | None = None, branch: str | None = None, status: str | None = None,
                  limit: int = 50, offset: int = 0, commit: str | None = None, verdict: str | None = None,
                  since: float | None = None, until: float | None = None) -> tuple[list[dict[str, Any]], int]:
        """One page of runs, newest first, and how many match. `commit`: the commit or its start (a short
        hash); `since`/`until`: uploaded at or after / before these times."""
        q = self._run_query()
        where = []
        if project:
            where.append(projects.c.name == project)
        if branch:
            where.append(runs.c.branch == branch)
        if status:
            where.append(jobs.c.status == status)
        if commit:
            escaped = commit.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            where.append(runs.c.commit.like(escaped + "%", escape="\\"))
        if verdict:
            where.append(runs.c.verdict == verdict)
        if since is not None:
            where.append(runs.c.created_at >= since)
        if until is not None:
            where.append(runs.c.created_at < until)
        q = q.where(*where)
        count = (sa.select(sa.func.count()).select_from(runs.join(projects, projects.c.id == runs.c.project_id)
                                                        .join(jobs, jobs.c.run_id == runs.c.id)).where(*where))
        with self.engine.connect() as c:
            rows = c.execute(q.order_by(runs.c.created_at.desc(), runs.c.id).limit(limit).offset(offset)).mappings()
            page = [dict(r) for r in rows]
            total = c.execute(count).scalar_one()
        return page, int(total)

    def sha_in_use(self, sha256: str) -> bool:
        with self.engine.connect() as c:
            return c.execute(sa.select(run_files.c.id).where(run_files.c.sha256 == sha256).limit(1)).first() is not None

    def all_shas(self) -> set[str]:
        with self.engine.connect() as c:
            return {r[0] for r in c.execute(sa.select(run_files.c.sha256).distinct())}

    def delete_run(self, run_id: str, actor: Actor | None = None) -> tuple[str, list[str]]:
        """Removes the run, or cancels its job when a worker holds it (the worker stops the analysis and
        removes the run). Returns ('deleted' | 'canceled' | 'missing', hashes of its files no run uses
        now: remove them with `drop_blob`, which checks again under the lock)."""
        with self._write() as c:
            job = c.execute(sa.select(jobs.c.status).where(jobs.c.run_id == run_id).with_for_update()).first()
            if job is None:
                return "missing", []
            if actor is not None:
                project = c.execute(sa.select(projects.c.name).join(runs, runs.c.project_id == projects.c.id)
                                    .where(runs.c.id == run_id)).scalar()
                canceling = job.status in ("running", "canceled")
                self._audit(c, actor, "run.cancel" if canceling else "run.delete", project, run_id,
                            f"was {job.status}" + ("; its worker stops the analysis and removes it" if canceling
                                                   else ""))
            if job.status in ("running", "canceled"):
                c.execute(jobs.update().where(jobs.c.run_id == run_id).values(status="canceled"))
                return "canceled", []
            return "deleted", self._delete_rows(c, run_id)

    @staticmethod
    def _delete_rows(c: sa.Connection, run_id: str) -> list[str]:
        shas = [r[0] for r in c.execute(sa.select(run_files.c.sha256).where(run_files.c.run_id == run_id))]
        c.execute(jobs.delete().where(jobs.c.run_id == run_id))
        c.execute(run_metrics.delete().where(run_metrics.c.run_id == run_id))
        c.execute(run_files.delete().where(run_files.c.run_id == run_id))
        c.execute(runs.delete().where(runs.c.id == run_id))
        used = {r[0] for r in c.execute(sa.select(run_files.c.sha256).where(run_files.c.sha256.in_(shas)))}
        return sorted(set(shas) - used)

    def purge_canceled(self, job: Claim | None = None,
                       expired_before: float | None = None) -> list[tuple[str, list[str]]]:
        """Removes canceled runs: the one this worker held (`job`), or those whose worker's lease ended
        before `expired_before` (it died meanwhile). Returns (run id, hashes no run uses now) of each."""
        where = [jobs.c.status == "canceled"]
        if job is not None:
            where += [jobs.c.id == job.id, jobs.c.worker_id == job.worker_id]
        elif expired_before is not None:
            where.append(sa.or_(jobs.c.lease_until.is_(None), jobs.c.lease_until < expired_before))
        out = []
        with self._write() as c:
            for (run_id,) in c.execute(sa.select(jobs.c.run_id).where(*where).with_for_update()).all():
                out.append((run_id, self._delete_rows(c, run_id)))
        return out

    def stale_shas(self, cutoff: float) -> list[str]:
        """Hashes of the files whose every run was uploaded before `cutoff` (retention: --keep-traces)."""
        q = (sa.select(run_files.c.sha256).join(runs, runs.c.id == run_files.c.run_id)
             .group_by(run_files.c.sha256).having(sa.func.max(runs.c.created_at) < cutoff))
        with self.engine.connect() as c:
            return [r[0] for r in c.execute(q)]

    # -- jobs
    def claim(self, worker_id: str = "local", lease_s: float = 60.0, max_tries: int | None = None) -> Claim | None:
        """Takes the oldest job that is queued (and not held back), or running with an expired lease,
        for `worker_id` until now + `lease_s`: (job id, run id, try number, worker id), or None. A job whose
        lease expired after `max_tries` tries fails instead. The row is picked `FOR UPDATE SKIP LOCKED`
        (PostgreSQL: another worker's pick is skipped, not waited for) in a transaction that holds the
        write lock from its start (SQLite), then re-checked by the UPDATE: one job, one worker."""
        now = time.time()
        expired = sa.and_(jobs.c.status == "running", sa.or_(jobs.c.lease_until.is_(None), jobs.c.lease_until < now))
        ready = sa.and_(jobs.c.status == "queued", sa.or_(jobs.c.lease_until.is_(None), jobs.c.lease_until <= now))
        pick = (sa.select(jobs.c.id).where(sa.or_(ready, expired)).order_by(jobs.c.id).limit(1)
                .with_for_update(skip_locked=True).scalar_subquery())
        take = (jobs.update().where(jobs.c.id == pick, sa.or_(ready, expired))
                .values(status="running", tries=jobs.c.tries + 1, started_at=now, pid=None, error=None,
                        worker_id=worker_id, lease_until=now + lease_s, heartbeat_at=now)
                .returning(jobs.c.id, jobs.c.run_id, jobs.c.tries))
        with self._write() as c:
            lapsed = 0  # leases that expired (their worker killed or cut off): counted for /metrics
            if max_tries is not None:
                lapsed += c.execute(jobs.update().where(expired, jobs.c.tries >= max_tries)
                                    .values(status="failed", pid=None, finished_at=now, lease_until=None,
                                            error=f"the analysis was interrupted {max_tries} times (its worker "
                                                  f"stopped or was killed); not tried again")).rowcount
            was_expired = set(c.execute(sa.select(jobs.c.id).where(expired)).scalars())
            row = c.execute(take).first()
            lapsed += int(row is not None and row.id in was_expired)
            if lapsed:
                self.bump(c, "lease_expiries", lapsed)
        return None if row is None else Claim(int(row.id), str(row.run_id), int(row.tries), worker_id)

    @staticmethod
    def _held(job: Claim | int) -> list[Any]:
        """The fence of a change to a job: the worker and try that hold it (an int: the job alone, for tools)."""
        if isinstance(job, Claim):
            return [jobs.c.id == job.id, jobs.c.worker_id == job.worker_id, jobs.c.tries == job.tries,
                    jobs.c.status == "running"]
        return [jobs.c.id == job]

    def heartbeat(self, job: Claim, lease_s: float, pid: int | None = None) -> str:
        """Renews the lease: 'held', or 'canceled' (the run was deleted), or 'lost' (the lease expired
        and another worker took the job, or the job is gone): stop the analysis."""
        now = time.time()
        values: dict[str, Any] = {"lease_until": now + lease_s, "heartbeat_at": now}
        if pid is not None:
            values["pid"] = pid
        with self.engine.begin() as c:
            if c.execute(jobs.update().where(*self._held(job)).values(**values)).rowcount:
                return "held"
            row = c.execute(sa.select(jobs.c.status, jobs.c.worker_id, jobs.c.tries)
                            .where(jobs.c.id == job.id)).first()
        if row is not None and row.status == "canceled" and row.worker_id == job.worker_id and row.tries == job.tries:
            return "canceled"
        return "lost"

    def set_pid(self, job: Claim | int, pid: int | None) -> None:
        with self.engine.begin() as c:
            c.execute(jobs.update().where(*self._held(job)).values(pid=pid))

    def finish(self, job: Claim | int, run_id: str, error: str | None, headline: dict[str, Any] | None = None,
               metrics: dict[str, float | None] | None = None,
               file_facts: Sequence[dict[str, Any]] | None = None) -> bool:
        """Marks the job done (or failed with `error`) and stores its figures and what it found of each file
        (`file_facts`, in file order: format, perfetto), if `job` still holds it: False when its lease was
        lost (another worker has the job) or its run was deleted."""
        with self.engine.begin() as c:
            changed = c.execute(jobs.update().where(*self._held(job))
                                .values(status="failed" if error else "done", error=error, finished_at=time.time(),
                                        pid=None, lease_until=None)).rowcount
            if not changed:
                return False
            if headline:
                c.execute(runs.update().where(runs.c.id == run_id).values(**headline))
            if metrics is not None:
                self._write_metrics(c, run_id, metrics)
            self._write_file_facts(c, run_id, file_facts or ())
        return True

    @staticmethod
    def _write_file_facts(c: sa.Connection, run_id: str, file_facts: Sequence[dict[str, Any]]) -> None:
        for position, facts in enumerate(file_facts):
            c.execute(run_files.update().where(run_files.c.run_id == run_id, run_files.c.position == position)
                      .values(format=facts.get("format"), perfetto=bool(facts.get("perfetto"))))

    def set_file_facts(self, run_id: str, file_facts: Sequence[dict[str, Any]]) -> None:
        with self.engine.begin() as c:
            self._write_file_facts(c, run_id, file_facts)

    def runs_without_file_facts(self, limit: int = 1000) -> list[str]:
        """Done runs whose files' facts were never stored (analysed before migration blob_0006)."""
        unknown = sa.select(run_files.c.id).where(run_files.c.run_id == runs.c.id, run_files.c.perfetto.is_(None))
        q = (sa.select(runs.c.id).join(jobs, jobs.c.run_id == runs.c.id)
             .where(jobs.c.status == "done", unknown.exists()).order_by(runs.c.created_at).limit(limit))
        with self.engine.connect() as c:
            return [r[0] for r in c.execute(q)]

    def requeue(self, job: Claim | int, count_try: bool = True, delay_s: float = 0.0) -> bool:
        """Back to the queue (held back `delay_s`), if `job` still holds it; `count_try=False`: the try
        it used is given back (the worker was stopped, not the analysis)."""
        values: dict[str, Any] = {"status": "queued", "pid": None, "started_at": None, "worker_id": None,
                                  "lease_until": time.time() + delay_s if delay_s else None}
        if not count_try:
            values["tries"] = jobs.c.tries - 1
        with self.engine.begin() as c:
            return bool(c.execute(jobs.update().where(*self._held(job)).values(**values)).rowcount)

    def release_dead(self, host: str, alive: Callable[[int], bool]) -> int:
        """At start: the leases of workers of this host whose process is gone end now (their jobs are
        claimed again at once rather than when their lease expires). A worker id is 'host:pid:nonce'."""
        with self.engine.connect() as c:
            held = c.execute(sa.select(jobs.c.id, jobs.c.worker_id, jobs.c.tries)
                             .where(jobs.c.status.in_(("running", "canceled")),
                                    jobs.c.worker_id.like(host + ":%"))).all()
        ended = 0
        for row in held:
            parts = str(row.worker_id).split(":")
            if len(parts) != 3 or parts[0] != host or not parts[1].isdigit() or alive(int(parts[1])):
                continue
            with self.engine.begin() as c:
                ended += c.execute(jobs.update().where(jobs.c.id == row.id, jobs.c.worker_id == row.worker_id,
                                                       jobs.c.tries == row.tries).values(lease_until=0.0)).rowcount
        return ended

    # -- history: each run's figures, in a table of their own
    @staticmethod
    def _write_metrics(c: sa.Connection, run_id: str, metrics: dict[str, float | None]) -> None:
        c.execute(run_metrics.delete().where(run_metrics.c.run_id == run_id))
        if metrics:
            c.execute(run_metrics.insert(), [{"run_id": run_id, "metric": k, "value": v} for k, v in metrics.items()])

    def set_metrics(self, run_id: str, metrics: dict[str, float | None]) -> None:
        with self.engine.begin() as c:
            self._write_metrics(c, run_id, metrics)

    def runs_without_metrics(self, limit: int = 1000) -> list[str]:
        """Done runs whose figures were never extracted (analysed before migration 0002)."""
        has = sa.select(run_metrics.c.run_id).where(run_metrics.c.run_id == runs.c.id).exists()
        q = (sa.select(runs.c.id).join(jobs, jobs.c.run_id == runs.c.id)
             .where(jobs.c.status == "done", ~has).order_by(runs.c.created_at).limit(limit))
        with self.engine.connect() as c:
            return [r[0] for r in c.execute(q)]

    def history(self, project: str, branch: str | None, limit: int, before: float | None = None,
                exclude: str | None = None) -> list[dict[str, Any]]:
        """The newest `limit` done runs of a project's branch (None: runs without a branch), oldest first,
        each with its figures under "metrics"; `before`: uploaded before that time; `exclude`: not that run."""
        where = [projects.c.name == project, jobs.c.status == "done",
                 runs.c.branch == branch if branch is not None else runs.c.branch.is_(None)]
        if before is not None:
            where.append(runs.c.created_at < before)
        if exclude is not None:
            where.append(runs.c.id != exclude)
        q = (sa.select(runs.c.id, runs.c.commit, runs.c.created_at, runs.c.commit_order, runs.c.verdict)
             .join(projects, projects.c.id == runs.c.project_id).join(jobs, jobs.c.run_id == runs.c.id)
             .where(*where).order_by(runs.c.created_at.desc(), runs.c.id).limit(limit))
        with self.engine.connect() as c:
            rows = [dict(r) for r in c.execute(q).mappings()]
            values: dict[str, dict[str, float | None]] = {r["id"]: {} for r in rows}
            if rows:
                for m in c.execute(sa.select(run_metrics).where(run_metrics.c.run_id.in_(list(values)))):
                    values[m.run_id][m.metric] = m.value
        for r in rows:
            r["metrics"] = values[r["id"]]
        rows.reverse()
        return rows

    def repeat_root(self, project: str, run_id: str) -> str | None:
        """The run a new repeat of `run_id` is recorded against: the first run of its setting (repeats of a
        repeat point at the first one). None: no such run in this project."""
        q = (sa.select(runs.c.id, runs.c.repeat_of).join(projects, projects.c.id == runs.c.project_id)
             .where(runs.c.id == run_id, projects.c.name == project))
        with self.engine.connect() as c:
            row = c.execute(q).first()
        return None if row is None else str(row.repeat_of or row.id)

    def repeats(self, run: dict[str, Any], exclude: Sequence[str] = (), limit: int = 20) -> list[str]:
        """The done runs of one setting with `run` (not itself): marked as repeats of the same first run
        (`repeat_of`), or of the same project, commit and setting label (no label on both counts as the
        same). Never runs of other commits: a branch's history mixes code changes with run-to-run noise."""
        root = run.get("repeat_of") or run["id"]
        same = [sa.func.coalesce(runs.c.repeat_of, runs.c.id) == root]
        if run.get("commit"):
            same.append(sa.and_(runs.c.commit == run["commit"],
                                sa.func.coalesce(runs.c.setting, "") == (run.get("setting") or "")))
        q = (sa.select(runs.c.id).join(projects, projects.c.id == runs.c.project_id)
             .join(jobs, jobs.c.run_id == runs.c.id)
             .where(projects.c.name == run["project"], jobs.c.status == "done", runs.c.id != run["id"],
                    runs.c.id.not_in(list(exclude)) if exclude else sa.true(), sa.or_(*same))
             .order_by(runs.c.created_at.desc(), runs.c.id).limit(limit))
        with self.engine.connect() as c:
            return [r[0] for r in c.execute(q)]

    def branches(self, project: str) -> list[str]:
        """The branches of a project's runs, by name."""
        q = (sa.select(runs.c.branch).join(projects, projects.c.id == runs.c.project_id)
             .where(projects.c.name == project, runs.c.branch.is_not(None)).distinct().order_by(runs.c.branch))
        with self.engine.connect() as c:
            return [r[0] for r in c.execute(q)]

    def queued(self) -> int:
        with self.engine.connect() as c:
            return int(c.execute(sa.select(sa.func.count()).where(jobs.c.status == "queued")).scalar_one())


def _utc(t: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")

"""The service's database, through SQLAlchemy Core: the same queries on SQLite (the default, a file in
DATA) and on PostgreSQL (`--db postgresql://...`). The schema is made and changed only by the Alembic
migrations in `migrations/versions` (run by `migrate()` at start); the tables below describe it for
queries, and a test checks that the two agree.

Tokens are stored as their SHA-256 (a token is 256 random bits, so a fast hash is enough): one shown
once, never stored. A job belongs to one run: queued -> running -> done | failed; a job found
`running` at start was interrupted and goes back to the queue until it has used `max_tries`.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    # step_time_ms and gpu_idle: in run_metrics only, with the run's other metrics (migration 0003)
    sa.Column("commit_order", sa.Float, nullable=True),  # optional: orders a branch's history (migration 0002)
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
)

STATUSES = ("queued", "running", "done", "failed")
SHOWN_METRICS = ("step_time_ms", "gpu_idle")  # the run's metrics (result/metrics.py) a run's row carries


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
            cur = dbapi_connection.cursor()
            cur.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        return engine
    return sa.create_engine(url, pool_pre_ping=True)


@dataclass(frozen=True)
class StoredFile:
    sha256: str
    name: str  # for display only (sanitised); never a path on the server
    size_bytes: int
    kind: str  # file | gzip | zip | tar | tar.gz


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

    # -- tokens and projects
    def create_token(self, project: str, read_only: bool) -> str:
        token = "ta_" + secrets.token_urlsafe(32)
        with self.engine.begin() as c:
            c.execute(tokens.insert().values(project=project, token_hash=hash_token(token), read_only=read_only,
                                             created_at=time.time()))
        return token

    def token(self, token: str) -> tuple[str, bool] | None:
        """(project, read_only) of a token, or None."""
        with self.engine.connect() as c:
            row = c.execute(sa.select(tokens.c.project, tokens.c.read_only)
                            .where(tokens.c.token_hash == hash_token(token))).first()
        return (row.project, bool(row.read_only)) if row else None

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
                   commit_order: float | None = None) -> str:
        """The run, its files and its queued job, in one transaction (the project made on first use)."""
        now = time.time()
        run_id = secrets.token_hex(6)
        pid = self._project_id(project, now)
        with self.engine.begin() as c:
            c.execute(runs.insert().values(id=run_id, project_id=pid, branch=branch, commit=commit, created_at=now,
                                           size_bytes=sum(f.size_bytes for f in files), files=len(files),
                                           commit_order=commit_order))
            c.execute(run_files.insert(), [dict(run_id=run_id, position=i, sha256=f.sha256, name=f.name,
                                                size_bytes=f.size_bytes, kind=f.kind) for i, f in enumerate(files)])
            c.execute(jobs.insert().values(run_id=run_id, status="queued", tries=0, queued_at=now))
        return run_id

    def _project_id(self, project: str, now: float) -> int:
        select = sa.select(projects.c.id).where(projects.c.name == project)
        with self.engine.connect() as c:
            pid = c.execute(select).scalar()
        if pid is not None:
            return int(pid)
        try:
            with self.engine.begin() as c:
                c.execute(projects.insert().values(name=project, created_at=now))
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
                          jobs.c.started_at, jobs.c.finished_at, jobs.c.pid,
                          *(m.c.value.label(key) for key, m in shown.items()))
                .select_from(joined))

    def run(self, run_id: str) -> dict[str, Any] | None:
        with self.engine.connect() as c:
            row = c.execute(self._run_query().where(runs.c.id == run_id)).mappings().first()
            return dict(row) if row else None

    def files(self, run_id: str) -> list[StoredFile]:
        with self.engine.connect() as c:
            rows = c.execute(sa.select(run_files).where(run_files.c.run_id == run_id).order_by(run_files.c.position))
            return [StoredFile(r.sha256, r.name, r.size_bytes, r.kind) for r in rows]

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
                  limit: int = 50, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
        """One page of runs, newest first, and how many match."""
        q = self._run_query()
        where = []
        if project:
            where.append(projects.c.name == project)
        if branch:
            where.append(runs.c.branch == branch)
        if status:
            where.append(jobs.c.status == status)
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

    def delete_run(self, run_id: str) -> list[str]:
        """Removes the run; returns the hashes of its files that no other run uses."""
        with self.engine.begin() as c:
            shas = [r[0] for r in c.execute(sa.select(run_files.c.sha256).where(run_files.c.run_id == run_id))]
            c.execute(jobs.delete().where(jobs.c.run_id == run_id))
            c.execute(run_metrics.delete().where(run_metrics.c.run_id == run_id))
            c.execute(run_files.delete().where(run_files.c.run_id == run_id))
            c.execute(runs.delete().where(runs.c.id == run_id))
            used = {r[0] for r in c.execute(sa.select(run_files.c.sha256).where(run_files.c.sha256.in_(shas)))}
        return sorted(set(shas) - used)

    def stale_shas(self, cutoff: float) -> list[str]:
        """Hashes of the files whose every run was uploaded before `cutoff` (retention: --keep-traces)."""
        q = (sa.select(run_files.c.sha256).join(runs, runs.c.id == run_files.c.run_id)
             .group_by(run_files.c.sha256).having(sa.func.max(runs.c.created_at) < cutoff))
        with self.engine.connect() as c:
            return [r[0] for r in c.execute(q)]

    # -- jobs
    def claim(self) -> tuple[int, str, int] | None:
        """Takes the oldest queued job: (job id, run id, try number), or None. One UPDATE ... RETURNING, so
        it is safe between threads and processes: a job another worker took meanwhile is no longer queued
        (PostgreSQL re-checks the row after its lock; SQLite runs one writer at a time)."""
        oldest = (sa.select(jobs.c.id).where(jobs.c.status == "queued").order_by(jobs.c.id).limit(1)
                  .scalar_subquery())
        take = (jobs.update().where(jobs.c.id == oldest, jobs.c.status == "queued")
                .values(status="running", tries=jobs.c.tries + 1, started_at=time.time(), pid=None, error=None)
                .returning(jobs.c.id, jobs.c.run_id, jobs.c.tries))
        for _ in range(5):
            with self.engine.begin() as c:
                row = c.execute(take).first()
                if row is not None:
                    return int(row.id), str(row.run_id), int(row.tries)
                if c.execute(sa.select(jobs.c.id).where(jobs.c.status == "queued").limit(1)).first() is None:
                    return None
        return None

    def set_pid(self, job_id: int, pid: int | None) -> None:
        with self.engine.begin() as c:
            c.execute(jobs.update().where(jobs.c.id == job_id).values(pid=pid))

    def finish(self, job_id: int, run_id: str, error: str | None, headline: dict[str, Any] | None = None,
               metrics: dict[str, float | None] | None = None) -> None:
        with self.engine.begin() as c:
            c.execute(jobs.update().where(jobs.c.id == job_id)
                      .values(status="failed" if error else "done", error=error, finished_at=time.time(), pid=None))
            if headline:
                c.execute(runs.update().where(runs.c.id == run_id).values(**headline))
            if metrics is not None:
                self._write_metrics(c, run_id, metrics)

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

    def branches(self, project: str) -> list[str]:
        """The branches of a project's runs, by name."""
        q = (sa.select(runs.c.branch).join(projects, projects.c.id == runs.c.project_id)
             .where(projects.c.name == project, runs.c.branch.is_not(None)).distinct().order_by(runs.c.branch))
        with self.engine.connect() as c:
            return [r[0] for r in c.execute(q)]

    def requeue(self, job_id: int, count_try: bool = True) -> None:
        with self.engine.begin() as c:
            values: dict[str, Any] = {"status": "queued", "pid": None, "started_at": None}
            if not count_try:
                values["tries"] = jobs.c.tries - 1
            c.execute(jobs.update().where(jobs.c.id == job_id, jobs.c.status == "running").values(**values))

    def recover(self, max_tries: int) -> tuple[int, int]:
        """At start: jobs left `running` by a stopped server go back to the queue, or fail once they have
        used `max_tries`. Returns (requeued, failed)."""
        with self.engine.begin() as c:
            failed = c.execute(jobs.update().where(jobs.c.status == "running", jobs.c.tries >= max_tries)
                               .values(status="failed", pid=None, finished_at=time.time(),
                                       error=f"the analysis was interrupted {max_tries} times (worker stopped or "
                                             f"killed); not tried again")).rowcount
            requeued = c.execute(jobs.update().where(jobs.c.status == "running")
                                 .values(status="queued", pid=None, started_at=None)).rowcount
        return requeued, failed

    def queued(self) -> int:
        with self.engine.connect() as c:
            return int(c.execute(sa.select(sa.func.count()).where(jobs.c.status == "queued")).scalar_one())

"""The service's settings: what `traceanalyzer serve` was started with."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

GiB = 1024**3


@dataclass(frozen=True)
class Settings:
    data: Path  # DATA: the SQLite database (by default), traces, reports
    db_url: str | None = None  # None: sqlite:///DATA/traceanalyzer.db
    max_upload_bytes: int = 8 * GiB  # one request's bytes, refused with 413 before they are passed
    max_unpacked_bytes: int = 16 * GiB  # a gzip stream or an archive, unpacked (also the analysis' input limit)
    max_members: int = 10_000  # files in an archive
    jobs: int = 1  # analyses at the same time in this process (0: a web server only; `serve worker` analyses)
    job_timeout_s: float = 3600.0  # wall clock per analysis
    job_memory_bytes: int = 8 * GiB  # address space per analysis process
    max_tries: int = 3  # an analysis interrupted (worker killed, server restarted) is retried this often
    private: bool = False  # reading needs a token too
    public_url: str | None = None  # base of absolute links (PR comments); None: from the request
    scheduler: str | None = None  # a Dask scheduler: each analysis' per-rank tasks run there
    keep_traces_s: float | None = None  # traces older than this are removed (their analyses kept); None: kept
    lease_s: float = 60.0  # a worker's hold on a job, renewed every third of it; another takes it once expired
    header_timeout_s: float = 10.0  # a connection that has not sent a request's headers by then is closed
    max_connections: int = 2000  # connections served at once; past it, new requests get 503
    max_uploads: int = 4  # upload requests handled at once (benchmarks/serve_load.py); past it 503 + Retry-After
    max_failures: int = 10  # failed tokens, logins and refused writes per client a minute before 429 (0: never)
    session_s: float = 8 * 3600.0  # a browser login's life (no renewal): a working day, then log in again
    blob_store: str | None = None  # s3://BUCKET/PREFIX: traces and reports there (blobs.py); None: in DATA
    blob_retry_s: float = 30.0  # a job that could not reach the object store is queued again this much later
    instance: str = ""  # this process' own folder in tmp/ and work/ ('host-pid'): several share DATA

    @property
    def database_url(self) -> str:
        return self.db_url or f"sqlite:///{self.data / 'traceanalyzer.db'}"

    @property
    def traces(self) -> Path:
        return self.data / "traces"

    @property
    def reports(self) -> Path:
        return self.data / "reports"

    @property
    def tmp(self) -> Path:
        return self.data / "tmp" / self.instance if self.instance else self.data / "tmp"

    @property
    def work(self) -> Path:
        return self.data / "work" / self.instance if self.instance else self.data / "work"

    def make_dirs(self) -> None:
        for d in (self.data, self.traces, self.reports, self.tmp, self.work):
            d.mkdir(parents=True, exist_ok=True)


def instance_name() -> str:
    """'host-pid': the folder of this process in DATA/tmp and DATA/work."""
    import os
    import socket

    host = "".join(c if c.isalnum() or c in ".-_" else "_" for c in socket.gethostname())[:60] or "host"
    return f"{host}-{os.getpid()}"

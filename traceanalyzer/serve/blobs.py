"""Where the service keeps its large objects: the uploaded trace files (by content: their SHA-256) and each
run's saved report (report.json, .html, .md, headline.json). Two stores behind one interface:

* `LocalBlobs` (the default): files in DATA (`traces/ab/cdef...`, `reports/<run>/`), as always.
* `S3Blobs` (`--blob-store s3://BUCKET/PREFIX`): objects `PREFIX/traces/ab/cdef...` and
  `PREFIX/reports/<run>/<name>` in any S3-compatible store. Endpoint, region and credentials come from the
  standard AWS environment variables and files (AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, AWS_REGION,
  AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, ~/.aws/credentials and config), as every AWS tool reads them.
  Servers and workers on several machines then share nothing but the database and the bucket: a worker
  copies a run's traces into its private work folder, analyses them and puts the report in the bucket
  (keeping nothing); a web server keeps the reports it shows in DATA/cache (a report never changes once
  written).

An upload is received into DATA/tmp (hashed and checked as it arrives: its address is its hash), then
`stage`d (S3: uploaded, in parts when large, before any database lock is held) and `place`d while the
upload holds the lock of its hashes (`Store.create_run`): local, a rename; S3, a check that the object is
still there (a delete of another run with the same content may have removed it since), uploaded again
if not. A delete removes the object under the same lock (`Store.drop_blob`).

A store that cannot be reached raises `BlobUnavailable`: an upload gets 503 + Retry-After and nothing is
recorded; a job that cannot read its traces or write its report is queued again `--blob-retry` later (30 s),
its try not counted.
"""

from __future__ import annotations

import functools
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .settings import Settings
    from .uploads import Received

REPORT_NAMES = ("report.json", "report.html", "report.md", "headline.json")  # what an analysis saves
PART_BYTES = 64 * 1024**2  # S3 multipart: files past this go up in parts of this size (S3 allows 10,000 parts)
READ_CHUNK = 1 << 20


class BlobUnavailable(Exception):
    """The object store cannot be reached (or refuses for a while): try again later; nothing was recorded."""


class BlobRefused(BlobUnavailable):
    """The object store answers but refuses (no such bucket, access denied): its settings are wrong."""


class Blobs(Protocol):
    """The large objects of the service (see the module's docstring)."""

    where: str  # for messages: the folder or s3://bucket/prefix

    def check(self) -> None: ...
    def stage(self, received: list[Received]) -> None: ...
    def place(self, received: list[Received]) -> None: ...
    def has_trace(self, sha256: str) -> bool: ...
    def trace_shas(self) -> Iterator[str]: ...
    def drop_trace(self, sha256: str) -> None: ...
    def local_trace(self, sha256: str, work: Path) -> Path: ...
    def trace_chunks(self, sha256: str) -> Iterator[bytes] | None: ...
    def trace_file(self, sha256: str) -> Path | None: ...
    def put_report(self, run_id: str, folder: Path) -> None: ...
    def report(self, run_id: str, name: str) -> Path | None: ...
    def drop_report(self, run_id: str) -> None: ...


def blob_path(traces: Path, sha256: str) -> Path:
    return traces / sha256[:2] / sha256[2:]


class LocalBlobs:
    """Trace files and reports in DATA (one machine, or a folder every machine mounts)."""

    def __init__(self, traces: Path, reports: Path) -> None:
        self.traces = traces
        self.reports = reports
        self.where = str(traces.parent)

    def check(self) -> None:
        """Nothing to reach: DATA's own space and writes are health's storage check."""

    def stage(self, received: list[Received]) -> None:
        pass  # the received files are in DATA already: `place` renames them

    def place(self, received: list[Received]) -> None:
        """Moves received files to their content address (one already there keeps its copy; ours is removed
        by the caller)."""
        for r in received:
            target = blob_path(self.traces, r.sha256)
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(r.tmp, target)

    def has_trace(self, sha256: str) -> bool:
        return blob_path(self.traces, sha256).is_file()

    def trace_shas(self) -> Iterator[str]:
        for sub in self.traces.iterdir():
            if sub.is_dir():
                for f in sub.iterdir():
                    yield sub.name + f.name

    def drop_trace(self, sha256: str) -> None:
        blob_path(self.traces, sha256).unlink(missing_ok=True)

    def local_trace(self, sha256: str, work: Path) -> Path:
        return blob_path(self.traces, sha256)  # linked into the work folder by the analysis process

    def trace_chunks(self, sha256: str) -> Iterator[bytes] | None:
        return None  # served as a file (trace_file)

    def trace_file(self, sha256: str) -> Path | None:
        path = blob_path(self.traces, sha256)
        return path if path.is_file() else None

    def put_report(self, run_id: str, folder: Path) -> None:
        pass  # the analysis wrote it in place

    def report(self, run_id: str, name: str) -> Path | None:
        path = self.reports / run_id / name
        return path if path.is_file() else None

    def drop_report(self, run_id: str) -> None:
        shutil.rmtree(self.reports / run_id, ignore_errors=True)


def parse_s3_url(url: str) -> tuple[str, str]:
    """'s3://bucket/some/prefix' -> ('bucket', 'some/prefix') (the prefix without slashes at its ends)."""
    if not url.startswith("s3://"):
        raise ValueError(f"{url!r}: a blob store is s3://BUCKET or s3://BUCKET/PREFIX")
    bucket, _, prefix = url[5:].partition("/")
    if not bucket or not all(c.isalnum() or c in ".-_" for c in bucket) or len(bucket) > 63:
        raise ValueError(f"{url!r}: bad bucket name")
    prefix = prefix.strip("/")
    if any(part in ("", ".", "..") for part in prefix.split("/")) and prefix:
        raise ValueError(f"{url!r}: bad prefix")
    return bucket, prefix


class S3Blobs:
    """Trace files and reports as objects in an S3-compatible store (through boto3: see pyproject.toml)."""

    def __init__(self, url: str, cache: Path) -> None:
        self.bucket, prefix = parse_s3_url(url)
        self.prefix = prefix + "/" if prefix else ""
        self.where = url
        self.cache = cache  # reports a web server has shown (they never change once written)
        self._client: Any = None
        self._lock = threading.Lock()

    # -- the client and its errors
    @property
    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = _s3_client()
            return self._client

    def _call(self, what: str, fn: Any, *args: Any, **kw: Any) -> Any:
        """`fn(*args, **kw)`, with the store's failures as BlobUnavailable (a missing object: KeyError)."""
        from boto3.exceptions import S3UploadFailedError
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(*args, **kw)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in ("404", "NoSuchKey", "NotFound"):
                raise KeyError(what) from None
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            kind = BlobUnavailable if status >= 500 or code in ("SlowDown", "RequestTimeout") else BlobRefused
            raise kind(f"the object store {self.where} refused {what}: {code or exc}") from None
        except (BotoCoreError, S3UploadFailedError, OSError) as exc:
            if isinstance(exc, OSError) and not _network_error(exc):
                raise
            raise BlobUnavailable(f"the object store {self.where} cannot be reached ({what}): "
                                  f"{type(exc).__name__}") from None

    def check(self) -> None:
        """Raises BlobRefused when the bucket cannot be read (at start: a bad bucket or credentials),
        BlobUnavailable when the store cannot be reached."""
        try:
            self._call("a look at the bucket", self.client.head_bucket, Bucket=self.bucket)
        except KeyError:
            raise BlobRefused(f"the object store {self.where}: no bucket {self.bucket!r}") from None

    def _trace_key(self, sha256: str) -> str:
        return f"{self.prefix}traces/{sha256[:2]}/{sha256[2:]}"

    def _report_key(self, run_id: str, name: str) -> str:
        return f"{self.prefix}reports/{run_id}/{name}"

    def _upload(self, src: Path, key: str) -> None:
        from boto3.s3.transfer import TransferConfig

        config = TransferConfig(multipart_threshold=PART_BYTES, multipart_chunksize=PART_BYTES, max_concurrency=4)
        self._call(f"the upload of {key}", self.client.upload_file, str(src), self.bucket, key, Config=config)

    # -- traces
    def stage(self, received: list[Received]) -> None:
        for r in received:
            if not self.has_trace(r.sha256):
                self._upload(r.tmp, self._trace_key(r.sha256))

    def place(self, received: list[Received]) -> None:
        self.stage(received)  # under the lock: what a delete removed since `stage` goes up again

    def has_trace(self, sha256: str) -> bool:
        try:
            self._call(f"a look at trace {sha256[:12]}", self.client.head_object, Bucket=self.bucket,
                       Key=self._trace_key(sha256))
        except KeyError:
            return False
        return True

    def trace_shas(self) -> Iterator[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                        Prefix=f"{self.prefix}traces/")
        start = len(self.prefix) + len("traces/")
        for page in self._call("the list of traces", list, pages):
            for obj in page.get("Contents", []):
                sha = str(obj["Key"])[start:].replace("/", "")
                if len(sha) == 64:
                    yield sha

    def drop_trace(self, sha256: str) -> None:
        self._call(f"the removal of trace {sha256[:12]}", self.client.delete_object, Bucket=self.bucket,
                   Key=self._trace_key(sha256))

    def local_trace(self, sha256: str, work: Path) -> Path:
        """A copy of the trace in the job's work folder (removed with it)."""
        target = work / "blobs" / sha256
        target.parent.mkdir(parents=True, exist_ok=True)
        self._call(f"the download of trace {sha256[:12]}", self.client.download_file, self.bucket,
                   self._trace_key(sha256), str(target))
        return target

    def trace_chunks(self, sha256: str) -> Iterator[bytes] | None:
        try:
            obj = self._call(f"the download of trace {sha256[:12]}", self.client.get_object, Bucket=self.bucket,
                             Key=self._trace_key(sha256))
        except KeyError:
            return None
        return iter(functools.partial(obj["Body"].read, READ_CHUNK), b"")

    def trace_file(self, sha256: str) -> Path | None:
        return None  # streamed (trace_chunks)

    # -- reports
    def put_report(self, run_id: str, folder: Path) -> None:
        """The report the analysis wrote in `folder` goes to the store (headline.json last: a report whose
        headline is there is whole), and the folder goes (a worker keeps nothing; a web server fetches
        what it shows into its cache)."""
        names = [n for n in REPORT_NAMES if (folder / n).is_file()]
        for name in sorted(names, key=lambda n: n == "headline.json"):
            self._upload(folder / name, self._report_key(run_id, name))
        shutil.rmtree(folder, ignore_errors=True)

    def report(self, run_id: str, name: str) -> Path | None:
        """The report's file, from this server's cache, or fetched from the store into it."""
        path = self.cache / "reports" / run_id / name
        if path.is_file():
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{name}.part{os.getpid()}-{threading.get_ident()}")
        try:
            self._call(f"the download of {run_id}/{name}", self.client.download_file, self.bucket,
                       self._report_key(run_id, name), str(part))
        except KeyError:
            part.unlink(missing_ok=True)
            return None
        os.replace(part, path)
        return path

    def drop_report(self, run_id: str) -> None:
        shutil.rmtree(self.cache / "reports" / run_id, ignore_errors=True)
        keys = [{"Key": self._report_key(run_id, n)} for n in REPORT_NAMES]
        self._call(f"the removal of report {run_id}", self.client.delete_objects, Bucket=self.bucket,
                   Delete={"Objects": keys, "Quiet": True})


def _network_error(exc: OSError) -> bool:
    import errno

    return isinstance(exc, ConnectionError) or exc.errno in (errno.ECONNREFUSED, errno.ECONNRESET, errno.ETIMEDOUT,
                                                             errno.EHOSTUNREACH, errno.ENETUNREACH)


def _s3_client() -> Any:
    """A client configured as the AWS tools are (environment, ~/.aws); path-style addressing with an endpoint
    of its own (S3-compatible stores rarely serve bucket subdomains); short timeouts and few retries, so an
    outage is a quick 503 rather than a request held for minutes."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise BlobUnavailable("--blob-store s3://... needs pip install 'traceanalyzer-ml[s3]' (boto3)") from None
    custom = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    config = Config(connect_timeout=5, read_timeout=60, retries={"max_attempts": 2, "mode": "standard"},
                    s3={"addressing_style": "path"} if custom else {})
    session = boto3.session.Session()
    region = session.region_name or "us-east-1"
    return session.client("s3", region_name=region, config=config)


@functools.lru_cache(maxsize=16)
def _blobs(url: str | None, traces: Path, reports: Path, cache: Path) -> Blobs:
    if url:
        return S3Blobs(url, cache)
    return LocalBlobs(traces, reports)


def blobs_of(settings: Settings) -> Blobs:
    """The store of these settings (one per process and settings)."""
    return _blobs(settings.blob_store, settings.traces, settings.reports, settings.data / "cache")

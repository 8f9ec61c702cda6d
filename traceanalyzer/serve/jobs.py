"""Durable analysis jobs: queued -> running -> done | failed (or canceled), kept in the database.

`JobRunner` is a worker: `--jobs` threads, in the server (the default) or in a process of its own
(`traceanalyzer serve worker`, any number of them on any machine that sees the database and DATA).
Each thread claims a job with a lease (`Store.claim`: worker id, lease expiry), which a heartbeat
thread renews every third of `--lease` while the job runs; a worker killed or cut off from the
database loses its lease when it expires and any worker then claims the job again (up to `max_tries`).
A worker that finds its lease lost (another has the job) or its job canceled (its run deleted) stops
the analysis and changes nothing. Marking the job done is retried with backoff while the database is
away: a job is finished once the database is back, without a restart.

Each job runs in a fresh process that sets its die-with-parent signal in its first instruction (a
`python -c` bootstrap, before any import), limits its own address space (`--job-memory`), unpacks and
links the run's files into a private work folder, runs `traceanalyzer.analyze` with the CLI's limits
(`max_input_bytes`; one process, or the per-rank tasks on a Dask cluster with `--scheduler`: its workers
must see DATA at the same path), saves the Analysis JSON and renders the HTML and Markdown pages *from
that saved JSON* into `DATA/reports/<run>/` (written in a side folder, then renamed: a report is there
whole or not at all). The thread kills a process that runs past `--job-timeout`.

A failure is the one line the CLI would print; a crash keeps the end of the process' standard error.
A process killed from outside (SIGKILL/SIGTERM: the worker stopped, the kernel's OOM killer) is
retried up to `max_tries`; a full disk queues the job again a minute later, its try not counted.

Stopping is graceful: an analysis process runs in a session of its own, so a SIGTERM (or Ctrl-C) sent
to the server's process group (systemd's default stop) reaches the server alone; the server then stops
taking jobs at once (`drain`), and `stop` kills the analyses under way and queues their jobs again
with their try given back. An analysis is never started during shutdown, nor a try counted for it.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ..processes import pid_alive
from ..units import format_bytes
from .blobs import BlobUnavailable, blobs_of
from .settings import Settings
from .store import Claim, Store

RETRIED_SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
EXIT_FAILED = 2  # the child wrote its one-line error
EXIT_NO_SPACE = 3  # the disk is full: the job is queued again later
NO_SPACE_DELAY_S = 60.0
T = TypeVar("T")

# The analysis process' first instruction: die with the thread that started it (PR_SET_PDEATHSIG), and
# stop at once if that parent is already gone; only then import anything.
BOOTSTRAP = ("import ctypes,os,sys\n"
             "try: ctypes.CDLL(None).prctl(1, 9)\n"
             "except Exception: pass\n"
             "if os.getppid() != int(sys.argv[2]): os._exit(1)\n"
             "from traceanalyzer.serve.jobs import child_main\n"
             "sys.exit(child_main(sys.argv[1]))\n")


def new_worker_id() -> str:
    """'host:pid:nonce': a restart on the same host ends the leases of its dead workers at once."""
    return f"{socket.gethostname()[:60]}:{os.getpid()}:{secrets.token_hex(4)}"


def is_db_error(exc: BaseException) -> bool:
    import sqlalchemy as sa

    return isinstance(exc, (sa.exc.OperationalError, sa.exc.InterfaceError, sa.exc.DBAPIError, ConnectionError))


class JobRunner:
    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store
        self.worker_id = new_worker_id()
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.draining = threading.Event()  # set first on shutdown: no job is claimed after it
        self._threads: list[threading.Thread] = []
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._held: dict[int, Claim] = {}
        self._lost: dict[int, str] = {}  # job id -> 'lost' | 'canceled'
        self._lock = threading.Lock()

    def start(self) -> None:
        for i in range(self.settings.jobs):
            t = threading.Thread(target=self._loop, name=f"traceanalyzer-job-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        for target, name in ((self._heartbeat, "heartbeat"), (self._janitor, "janitor")):
            t = threading.Thread(target=target, name=f"traceanalyzer-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def _janitor(self) -> None:
        """Every minute: runs canceled whose worker died, job folders no worker holds (remove_stale_work);
        every ten minutes, with --keep-traces, the trace
        files whose every run is older than that."""
        last_retention = 0.0
        while not self.stopping.is_set():
            try:
                for run_id, shas in self.store.purge_canceled(expired_before=time.time()):
                    remove_run_files(self.settings, self.store, run_id, shas)
                remove_stale_work(self.settings, self.store)
                if self.settings.keep_traces_s is not None and time.monotonic() - last_retention > 600:
                    remove_old_traces(self.settings, self.store)
                    last_retention = time.monotonic()
            except Exception as exc:
                print(f"traceanalyzer serve: janitor: {type(exc).__name__}: {exc}", file=sys.stderr)
            self.stopping.wait(60)

    def _heartbeat(self) -> None:
        """Renews the lease of every job this worker holds; stops an analysis whose job it lost."""
        every = max(0.2, self.settings.lease_s / 3)
        while not self.stopping.wait(every):
            with self._lock:
                held = list(self._held.values())
            for job in held:
                try:
                    state = self.store.heartbeat(job, self.settings.lease_s)
                except Exception:  # the database is away: the lease runs on; try again
                    continue
                if state != "held":
                    with self._lock:
                        self._lost[job.id] = state
                        proc = self._children.get(job.id)
                    if proc is not None:
                        proc.kill()

    def drain(self) -> None:
        """Takes no new job from now on (the process is shutting down); analyses under way go on until `stop`."""
        self.draining.set()
        self.wake.set()

    def stop(self) -> None:
        """Stops taking jobs; an analysis under way is stopped and its job queued again (the try not counted)."""
        self.draining.set()
        self.stopping.set()
        self.wake.set()
        with self._lock:
            for proc in self._children.values():
                proc.kill()
        for t in self._threads:
            t.join(timeout=10)

    def _loop(self) -> None:
        s = self.settings
        while not self.stopping.is_set():
            if self.draining.is_set():
                self.stopping.wait(0.5)
                continue
            try:
                claimed = self.store.claim(self.worker_id, s.lease_s, s.max_tries)
            except Exception as exc:  # the database went away for a moment: try again later
                print(f"traceanalyzer serve: cannot take a job: {type(exc).__name__}: {str(exc)[:200]}",
                      file=sys.stderr)
                claimed = None
            if claimed is None:
                self.wake.wait(1.0)
                self.wake.clear()
                continue
            with self._lock:
                self._held[claimed.id] = claimed
            try:
                self._run(claimed)
            except Exception as exc:  # never let one job end the worker thread
                print(f"traceanalyzer serve: job {claimed.id}: {type(exc).__name__}: {exc}", file=sys.stderr)
                try:
                    self.store.finish(claimed, claimed.run_id, f"internal error: {type(exc).__name__}: {exc}")
                except Exception:
                    pass
            finally:
                with self._lock:
                    self._held.pop(claimed.id, None)
                    self._lost.pop(claimed.id, None)

    def _persist(self, what: Callable[[], T]) -> T | None:
        """`what` (a write of a job's end), retried with backoff while the database is away (None when
        the worker stops first: the lease then expires and another worker takes the job)."""
        delay = 0.5
        while True:
            try:
                return what()
            except Exception as exc:
                if not is_db_error(exc):
                    raise
                print(f"traceanalyzer serve: database away ({type(exc).__name__}); retrying in {delay:g} s",
                      file=sys.stderr)
            if self.stopping.wait(delay):
                return None
            delay = min(delay * 2, 15.0)

    def _run(self, job: Claim) -> None:
        s = self.settings
        run_id = job.run_id
        work = s.work / f"{job.id}-{job.tries}"
        shutil.rmtree(work, ignore_errors=True)
        blobs = blobs_of(s)
        try:
            work.mkdir(parents=True)
            spec = {
                "files": [[str(blobs.local_trace(f.sha256, work)), f.name, f.kind] for f in self.store.files(run_id)],
                "work": str(work), "out": str(s.reports / run_id), "error": str(work / "error.txt"),
                "max_unpacked": s.max_unpacked_bytes, "max_members": s.max_members, "memory": s.job_memory_bytes,
                "scheduler": s.scheduler,
            }
            (work / "spec.json").write_text(json.dumps(spec))
        except BlobUnavailable as exc:  # the object store is away: the job waits for it, its try not counted
            shutil.rmtree(work, ignore_errors=True)
            print(f"traceanalyzer serve: job {job.id}: {exc}; queued again in {s.blob_retry_s:g} s", file=sys.stderr)
            self._persist(lambda: self.store.requeue(job, count_try=False, delay_s=s.blob_retry_s))
            return
        except KeyError:  # removed from the store (--keep-traces) before it was analysed
            shutil.rmtree(work, ignore_errors=True)
            self._persist(lambda: self.store.finish(job, run_id, "this run's trace was removed before its analysis"))
            return
        except OSError as exc:
            shutil.rmtree(work, ignore_errors=True)
            if exc.errno != errno.ENOSPC:
                raise
            self._persist(lambda: self.store.requeue(job, count_try=False, delay_s=NO_SPACE_DELAY_S))
            return
        env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                   MKL_NUM_THREADS="1", MALLOC_ARENA_MAX="2")
        with open(work / "stderr.txt", "wb") as err:
            # -I: no folder of ours (nor PYTHON* variables) on the module path of a process that unpacks uploads
            proc = subprocess.Popen([sys.executable, "-I", "-W", "ignore", "-c", BOOTSTRAP, str(work / "spec.json"),
                                     str(os.getpid())],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env,
                                    cwd=work, start_new_session=True)  # a signal to our group is ours alone
        with self._lock:
            self._children[job.id] = proc
        timed_out = False
        try:
            try:
                self.store.heartbeat(job, s.lease_s, pid=proc.pid)
            except Exception:
                pass
            try:
                rc = proc.wait(timeout=s.job_timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
                timed_out = True
        finally:
            with self._lock:
                self._children.pop(job.id, None)
                lost = self._lost.get(job.id)
        path = Path(str(spec["error"]))
        line = path.read_text("utf-8", "replace").strip() if path.exists() else ""
        tail = _stderr_tail(work / "stderr.txt", str(work / "in"))
        shutil.rmtree(work, ignore_errors=True)  # before the job is marked: nothing of it is left then
        for side in s.reports.glob(f"{run_id}.tmp*"):  # a report cut off while it was written
            if side.name == f"{run_id}.tmp{proc.pid}":
                shutil.rmtree(side, ignore_errors=True)
        if lost == "canceled":  # the run was deleted while it was analysed: removed now, report and all
            for gone, shas in self._persist(lambda: self.store.purge_canceled(job)) or []:
                remove_run_files(s, self.store, gone, shas)
            return
        if lost == "lost":  # another worker holds the job now: leave it and its report to that one
            return
        self._end(job, rc, timed_out, line, tail)

    def _end(self, job: Claim, rc: int, timed_out: bool, line: str, tail: str) -> None:
        s = self.settings
        run_id = job.run_id

        def finish(error: str | None, headline: dict[str, Any] | None = None,
                   metrics: dict[str, float | None] | None = None) -> None:
            self._persist(lambda: self.store.finish(job, run_id, error, headline, metrics))

        if timed_out:
            finish(f"the analysis took longer than the limit of {s.job_timeout_s:g} s (--job-timeout)")
        elif (self.stopping.is_set() and rc != 0) or (self.draining.is_set() and rc < 0 and -rc in RETRIED_SIGNALS):
            try:
                self.store.requeue(job, count_try=False)
            except Exception:  # the database is away: the lease expires and another worker takes the job
                pass
        elif rc == 0:
            headline = json.loads((s.reports / run_id / "headline.json").read_text())
            try:
                blobs_of(s).put_report(run_id, s.reports / run_id)
            except BlobUnavailable as exc:  # analysed again once the store is back, the try not counted
                shutil.rmtree(s.reports / run_id, ignore_errors=True)
                print(f"traceanalyzer serve: job {job.id}: {exc}; queued again in {s.blob_retry_s:g} s",
                      file=sys.stderr)
                self._persist(lambda: self.store.requeue(job, count_try=False, delay_s=s.blob_retry_s))
                return
            metrics = headline.get("metrics")  # (an older version's process also wrote two of them apart)
            self._persist(lambda: self.store.finish(job, run_id, None, {"verdict": headline.get("verdict")}, metrics,
                                                    headline.get("files")))
            if metrics is None:  # an analysis process of an older version (an upgrade mid-job): from the JSON
                backfill_metrics(s, self.store)
        elif rc == EXIT_NO_SPACE:
            print(f"traceanalyzer serve: job {job.id}: {line or 'the disk is full'}; queued again in "
                  f"{NO_SPACE_DELAY_S:g} s", file=sys.stderr)
            self._persist(lambda: self.store.requeue(job, count_try=False, delay_s=NO_SPACE_DELAY_S))
        elif rc < 0 and -rc in RETRIED_SIGNALS:
            if job.tries < s.max_tries:
                self._persist(lambda: self.store.requeue(job))
                self.wake.set()
            else:
                finish(f"the analysis was interrupted {job.tries} times (its process was killed); not tried again")
        elif rc < 0:
            limit = format_bytes(s.job_memory_bytes)
            finish(f"the analysis process crashed (signal {-rc}); it may have needed more memory than the "
                   f"limit of {limit} (--job-memory)" + (f"; its last output: {tail}" if tail else ""))
        else:
            finish(line or f"the analysis process ended with status {rc}" + (f": {tail}" if tail else ""))


def _stderr_tail(path: Path, root: str, limit: int = 600) -> str:
    """The end of a crashed analysis' standard error, on one line (its work folder is removed after)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4 * limit))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    one = _one_line(text, root)
    return ("..." + one[-limit:]) if len(one) > limit else one


def remove_run_files(settings: Settings, store: Store, run_id: str, shas: list[str]) -> None:
    """A removed run's report, and its trace files that no run uses (checked again under the lock). With
    the object store away, what is left is removed by the next start's sweep (`clean_leftovers`)."""
    blobs = blobs_of(settings)
    shutil.rmtree(settings.reports / run_id, ignore_errors=True)
    try:
        blobs.drop_report(run_id)
        for sha in shas:
            store.drop_blob(sha, functools.partial(blobs.drop_trace, sha))
    except BlobUnavailable as exc:
        print(f"traceanalyzer serve: run {run_id} removed, its objects left for later: {exc}", file=sys.stderr)


def backfill_metrics(settings: Settings, store: Store, limit: int = 1000) -> int:
    """The history's figures of runs analysed before they were extracted (migration 0002), from their
    saved JSON; a run whose report is missing or unreadable gets an empty set (it is not tried again).
    Also their files' facts (migration blob_0006: facts.py)."""
    from ..pipeline import load
    from .facts import backfill_file_facts
    from .history import metrics_of

    backfill_file_facts(store, functools.partial(blobs_of(settings).report, name="report.json"), limit)
    done = 0
    for run_id in store.runs_without_metrics(limit):
        try:
            path = blobs_of(settings).report(run_id, "report.json")
            metrics = metrics_of(load(path)) if path is not None else {}
        except BlobUnavailable:  # the object store is away: the rest at the next start
            break
        except Exception:
            metrics = {}
        store.set_metrics(run_id, metrics or {"step_time_ms": None})
        done += 1
    return done


def _dead_instance(name: str, host: str) -> bool:
    """A folder 'host-pid' of a process of this host that is gone (another host's: left to it)."""
    head, _, pid = name.rpartition("-")
    return head == host and pid.isdigit() and not pid_alive(int(pid))


def clean_leftovers(settings: Settings, store: Store) -> int:
    """At start: what processes of this host that are gone left (uploads and analyses cut off, their
    jobs' leases), the report side folders of no running job, and trace files no run uses (each checked
    under the lock uploads take). Folders of live processes and of other hosts are left alone."""
    import sqlalchemy as sa

    from .settings import instance_name
    from .store import jobs

    host = instance_name().rpartition("-")[0]
    released = store.release_dead(socket.gethostname()[:60], pid_alive)
    for top in (settings.data / "tmp", settings.data / "work"):
        for p in top.iterdir():
            if not p.is_dir():  # the layout before per-process folders
                p.unlink(missing_ok=True)
            elif _dead_instance(p.name, host) or p.name.isdigit():
                shutil.rmtree(p, ignore_errors=True)
    remove_stale_work(settings, store)  # a killed worker's job folders, of any host
    sides = list(settings.reports.glob("*.tmp*"))
    if sides:
        with store.engine.connect() as c:
            running = {r[0] for r in c.execute(sa.select(jobs.c.run_id).where(jobs.c.status == "running"))}
        for side in sides:
            if side.name.split(".tmp")[0] not in running:
                shutil.rmtree(side, ignore_errors=True)
    used = store.all_shas()
    blobs = blobs_of(settings)
    try:
        for sha in blobs.trace_shas():
            if sha not in used:
                store.drop_blob(sha, functools.partial(blobs.drop_trace, sha))
    except BlobUnavailable as exc:
        print(f"traceanalyzer serve: unused traces not swept: {exc}", file=sys.stderr)
    return released


def remove_stale_work(settings: Settings, store: Store) -> int:
    """The job folders (`DATA/work/INSTANCE/JOB-TRY`) of every worker, on any host, whose try no worker
    holds any more (its worker was killed: the job was taken again, finished or failed meanwhile; a lease
    that merely expired is no proof, as the database may have been away), and
    the empty folders of this host's processes that are gone. A job's folder is made after its claim
    and removed before its end is written, so a held try is never touched. Returns folders removed."""
    import sqlalchemy as sa

    from .settings import instance_name
    from .store import jobs

    top = settings.data / "work"
    found: list[tuple[Path, int, int]] = []
    for inst in top.iterdir() if top.is_dir() else []:
        if not inst.is_dir():
            continue
        for f in inst.iterdir():
            head, _, tail = f.name.partition("-")
            if head.isdigit() and tail.isdigit():
                found.append((f, int(head), int(tail)))
    removed = 0
    if found:  # held: running (or canceled, not yet purged) at that try, whatever its lease says
        with store.engine.connect() as c:
            held = {(int(r.id), int(r.tries)) for r in c.execute(
                sa.select(jobs.c.id, jobs.c.tries).where(jobs.c.id.in_(sorted({j for _, j, _ in found})),
                                                         jobs.c.status.in_(("running", "canceled"))))}
        for f, job_id, tries in found:
            if (job_id, tries) not in held:
                shutil.rmtree(f, ignore_errors=True)
                removed += 1
    host = instance_name().rpartition("-")[0]
    for inst in top.iterdir() if top.is_dir() else []:
        if inst.is_dir() and _dead_instance(inst.name, host) and not any(inst.iterdir()):
            inst.rmdir()
    return removed


def remove_old_traces(settings: Settings, store: Store) -> int:
    if settings.keep_traces_s is None:
        return 0
    removed = 0
    cutoff = time.time() - settings.keep_traces_s
    blobs = blobs_of(settings)
    for sha in store.stale_shas(cutoff):
        if blobs.has_trace(sha) and store.drop_blob(sha, functools.partial(blobs.drop_trace, sha),
                                                    unused_since=cutoff):
            removed += 1
    return removed


# -- the analysis process
PRELOADED = ("numpy", "pandas", "msgspec", "orjson", "jinja2", "traceanalyzer.formats", "traceanalyzer.analyses",
             "traceanalyzer.diagnosis", "traceanalyzer.report", "traceanalyzer.report.html")


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):  # the server (or its worker thread) gone: stop at once
        import ctypes

        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def _limit_memory(memory: int) -> None:
    """Limits the address space after our own modules are loaded: the limit is there for what an input
    makes the analysis allocate, and a module that cannot be mapped would fail with a misleading error."""
    import importlib
    import resource

    for name in PRELOADED:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))


def _inputs(spec: dict[str, Any]) -> list[Path]:
    """The run's files under their shown names (the readers recognise a log dir by names), archives unpacked."""
    from .uploads import unpack

    root = Path(spec["work"]) / "in"
    root.mkdir()
    out = []
    for i, (blob, name, kind) in enumerate(spec["files"]):
        if kind in ("zip", "tar", "tar.gz"):
            target = root / f"{i}"
            unpack(Path(blob), kind, target, spec["max_members"], spec["max_unpacked"])
            out.append(target)
            continue
        folder = root / f"{i}"
        folder.mkdir()
        target = folder / name
        try:
            os.link(blob, target)
        except OSError:
            shutil.copyfile(blob, target)
        out.append(target)
    return out


def _one_line(text: str, root: str) -> str:
    text = text.replace(root.rstrip("/") + "/", "")
    return " ".join(text.split())[:1000]


def child_main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    _die_with_parent()
    error_file = Path(spec["error"])
    in_root = str(Path(spec["work"]) / "in")
    memory_error = (f"error: the analysis needed more memory than the limit of {format_bytes(int(spec['memory']))} "
                    f"(--job-memory)")
    _limit_memory(int(spec["memory"]))
    try:
        import traceanalyzer as ta
        from traceanalyzer.result.metrics import VERDICT

        from .facts import file_facts
        from .history import metrics_of
        from .uploads import UploadError

        try:
            inputs = _inputs(spec)
            scheduler = spec.get("scheduler")
            if not scheduler:  # Dask workers need absolute paths; else the report shows no server folder
                os.chdir(in_root)
                inputs = [p.relative_to(in_root) for p in inputs]
            options = ta.Options(max_input_bytes=int(spec["max_unpacked"]), jobs=None if scheduler else 1,
                                 scheduler=scheduler, cache=False)
            analysis = ta.analyze(inputs if len(inputs) > 1 else inputs[0], options)
            out = Path(spec["out"])
            side = out.with_name(f"{out.name}.tmp{os.getpid()}")
            shutil.rmtree(side, ignore_errors=True)
            side.mkdir(parents=True)
            analysis.save(side / "report.json")
            saved = ta.load(side / "report.json")  # every page comes from the saved JSON
            (side / "report.html").write_text(saved.to_html(), "utf-8")
            (side / "report.md").write_text(saved.to_markdown(), "utf-8")
            # the run's metrics (result/metrics.py), stored once (run_metrics); the verdict on the run's row
            headline: dict[str, Any] = {"verdict": VERDICT.of(saved), "metrics": metrics_of(saved),
                                        "files": file_facts(saved, inputs, [kind for _, _, kind in spec["files"]])}
            (side / "headline.json").write_text(json.dumps(headline))
            shutil.rmtree(out, ignore_errors=True)
            os.replace(side, out)
            return 0
        except (ta.TraceAnalyzerError, UploadError) as exc:
            error_file.write_text(_one_line(f"error: {exc}", in_root))
        except MemoryError:
            error_file.write_text(memory_error)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:  # the disk, not the input: the job is tried again later
                shutil.rmtree(Path(spec["out"]).with_name(f"{Path(spec['out']).name}.tmp{os.getpid()}"),
                              ignore_errors=True)
                with contextlib.suppress(OSError):
                    error_file.write_text("error: no space left on the server's disk")
                return EXIT_NO_SPACE
            if exc.errno != errno.ENOMEM and "memory" not in str(exc).lower():
                raise
            error_file.write_text(memory_error)
        except RecursionError:
            error_file.write_text("error: the input is nested too deeply to analyse")
        except Exception as exc:
            error_file.write_text(_one_line(f"internal error: {type(exc).__name__}: {exc}", in_root))
    except MemoryError:
        error_file.write_text(memory_error)
    return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1]))

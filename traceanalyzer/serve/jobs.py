"""Durable analysis jobs: queued -> running -> done | failed, kept in the database.

`JobRunner` runs `--jobs` threads in the server; each takes the oldest queued job and runs it in a
fresh process (`python -m traceanalyzer.serve.jobs SPEC`) that limits its own address space
(`--job-memory`), dies with its parent, unpacks and links the run's files into a private work folder,
runs `traceanalyzer.analyze` with the CLI's limits (`max_input_bytes`; one process, or the per-rank tasks
on a Dask cluster with `--scheduler`: its workers must see DATA at the same path), saves the Analysis
JSON and renders the HTML and Markdown pages *from that saved JSON* into `DATA/reports/<run>/`
(written in a side folder, then renamed: a report is there whole or not at all). The thread kills a
process that runs past `--job-timeout`.

A failure is the one line the CLI would print. A process killed from outside (SIGKILL/SIGTERM: the
server or the worker stopped, the kernel's OOM killer) is retried up to `max_tries`; so is a job
found `running` when the server starts (`Store.recover`).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from ..units import format_bytes
from .settings import Settings
from .store import Store
from .uploads import blob_path

RETRIED_SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
EXIT_FAILED = 2  # the child wrote its one-line error


class JobRunner:
    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()

    def start(self) -> None:
        for i in range(self.settings.jobs):
            t = threading.Thread(target=self._loop, name=f"traceanalyzer-job-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        if self.settings.keep_traces_s is not None:
            t = threading.Thread(target=self._retention, name="traceanalyzer-retention", daemon=True)
            t.start()
            self._threads.append(t)

    def _retention(self) -> None:
        """Every ten minutes: removes the trace files whose every run is older than --keep-traces."""
        while not self.stopping.is_set():
            try:
                remove_old_traces(self.settings, self.store)
            except Exception as exc:
                print(f"traceanalyzer serve: retention: {type(exc).__name__}: {exc}", file=sys.stderr)
            self.stopping.wait(600)

    def stop(self) -> None:
        """Stops taking jobs; an analysis under way is stopped and its job queued again (the try not counted)."""
        self.stopping.set()
        self.wake.set()
        with self._lock:
            for proc in self._children.values():
                proc.kill()
        for t in self._threads:
            t.join(timeout=10)

    def _loop(self) -> None:
        while not self.stopping.is_set():
            try:
                claimed = self.store.claim()
            except Exception as exc:  # the database went away for a moment: try again later
                print(f"traceanalyzer serve: cannot take a job: {type(exc).__name__}: {exc}", file=sys.stderr)
                claimed = None
            if claimed is None:
                self.wake.wait(1.0)
                self.wake.clear()
                continue
            try:
                self._run(*claimed)
            except Exception as exc:  # never let one job end the worker thread
                print(f"traceanalyzer serve: job {claimed[0]}: {type(exc).__name__}: {exc}", file=sys.stderr)
                try:
                    self.store.finish(claimed[0], claimed[1], f"internal error: {type(exc).__name__}: {exc}")
                except Exception:
                    pass

    def _run(self, job_id: int, run_id: str, try_no: int) -> None:
        s = self.settings
        work = s.work / str(job_id)
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        spec = {
            "files": [[str(blob_path(s.traces, f.sha256)), f.name, f.kind] for f in self.store.files(run_id)],
            "work": str(work), "out": str(s.reports / run_id), "error": str(work / "error.txt"),
            "max_unpacked": s.max_unpacked_bytes, "max_members": s.max_members, "memory": s.job_memory_bytes,
            "scheduler": s.scheduler,
        }
        (work / "spec.json").write_text(json.dumps(spec))
        env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                   MKL_NUM_THREADS="1", MALLOC_ARENA_MAX="2")
        with open(work / "stderr.txt", "wb") as err:
            # -I: no folder of ours (nor PYTHON* variables) on the module path of a process that unpacks uploads
            proc = subprocess.Popen([sys.executable, "-I", "-W", "ignore", "-m", "traceanalyzer.serve.jobs",
                                     str(work / "spec.json")],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env,
                                    cwd=work)
        with self._lock:
            self._children[job_id] = proc
        timed_out = False
        try:
            self.store.set_pid(job_id, proc.pid)
            try:
                rc = proc.wait(timeout=s.job_timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
                timed_out = True
        finally:
            with self._lock:
                self._children.pop(job_id, None)
        path = Path(str(spec["error"]))
        line = path.read_text("utf-8", "replace").strip() if path.exists() else ""
        shutil.rmtree(work, ignore_errors=True)  # before the job is marked: nothing of it is left then
        for side in s.reports.glob(f"{run_id}.tmp*"):  # a report cut off while it was written
            shutil.rmtree(side, ignore_errors=True)
        if timed_out:
            self.store.finish(job_id, run_id, f"the analysis took longer than the limit of {s.job_timeout_s:g} s "
                                              f"(--job-timeout)")
        elif self.stopping.is_set() and rc != 0:
            self.store.requeue(job_id, count_try=False)
        elif rc == 0:
            headline = json.loads((s.reports / run_id / "headline.json").read_text())
            metrics = headline.get("metrics")  # (an older version's process also wrote two of them apart)
            self.store.finish(job_id, run_id, None, {"verdict": headline.get("verdict")}, metrics)
            if metrics is None:  # an analysis process of an older version (an upgrade mid-job): from the JSON
                backfill_metrics(s, self.store)
        elif rc < 0 and -rc in RETRIED_SIGNALS:
            if try_no < s.max_tries:
                self.store.requeue(job_id)
                self.wake.set()
            else:
                self.store.finish(job_id, run_id, f"the analysis was interrupted {try_no} times (its process "
                                                  f"was killed); not tried again")
        elif rc < 0:
            limit = format_bytes(s.job_memory_bytes)
            self.store.finish(job_id, run_id, f"the analysis process crashed (signal {-rc}); it may have "
                                              f"needed more memory than the limit of {limit} (--job-memory)")
        else:
            self.store.finish(job_id, run_id, line or f"the analysis process ended with status {rc}")


def backfill_metrics(settings: Settings, store: Store, limit: int = 1000) -> int:
    """The history's figures of runs analysed before they were extracted (migration 0002), from their
    saved JSON; a run whose report is missing or unreadable gets an empty set (it is not tried again)."""
    from ..pipeline import load
    from .history import metrics_of

    done = 0
    for run_id in store.runs_without_metrics(limit):
        try:
            metrics = metrics_of(load(settings.reports / run_id / "report.json"))
        except Exception:
            metrics = {}
        store.set_metrics(run_id, metrics or {"step_time_ms": None})
        done += 1
    return done


def remove_old_traces(settings: Settings, store: Store) -> int:
    import time

    if settings.keep_traces_s is None:
        return 0
    removed = 0
    for sha in store.stale_shas(time.time() - settings.keep_traces_s):
        path = blob_path(settings.traces, sha)
        if path.exists():
            path.unlink(missing_ok=True)
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
            headline: dict[str, Any] = {"verdict": VERDICT.of(saved), "metrics": metrics_of(saved)}
            (side / "headline.json").write_text(json.dumps(headline))
            shutil.rmtree(out, ignore_errors=True)
            os.replace(side, out)
            return 0
        except (ta.TraceAnalyzerError, UploadError) as exc:
            error_file.write_text(_one_line(f"error: {exc}", in_root))
        except MemoryError:
            error_file.write_text(memory_error)
        except OSError as exc:
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

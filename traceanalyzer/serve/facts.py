"""What the run page says of each stored file without reading it: the format its analysis read it as, and
whether the Perfetto UI opens it as stored. Found once, by the analysis process from its own saved result
(the inputs' formats), and stored with the job's end (`run_files.format`, `run_files.perfetto`); runs
analysed before that are filled in at start from their saved reports. The web server never opens a trace
to draw a page. The size and container (file, gzip, zip, tar) are known when
the upload is accepted."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# The Perfetto UI (ui.perfetto.dev) opens Chrome-trace JSON (Kineto's, TensorFlow's; gzip-compressed too)
# and Perfetto protobuf traces: the run page offers those to it, never archives or counter logs.
PERFETTO_FORMATS = ("kineto", "tf_json", "pftrace")
PLAIN_KINDS = ("file", "gzip")  # stored as the reader reads them (an archive is unpacked first)


def _tail(path: str | Path) -> tuple[str, ...]:
    """A file's last two path parts: its position's folder and its shown name (`in/<i>/<name>`), the same
    whether the analysis was given relative or absolute paths."""
    return tuple(os.path.normpath(str(path)).split(os.sep)[-2:])


def file_facts(saved: Any, inputs: Sequence[str | Path], kinds: Sequence[str]) -> list[dict[str, Any]]:
    """For each uploaded file (in upload order: `inputs` as given to `analyze`, `kinds` as stored), the
    format the analysis read it as (None: an archive, or a file it did not read) and whether the Perfetto
    UI opens it. `saved` is the analysis' result (its inputs, counter logs and host logs name their paths)."""
    formats: dict[tuple[str, ...], str] = {}
    for item in (*saved.inputs, *saved.counter_logs, *saved.host_logs):
        formats.setdefault(_tail(item.path), item.format)
    out = []
    for path, kind in zip(inputs, kinds, strict=True):
        fmt = formats.get(_tail(path)) if kind in PLAIN_KINDS else None
        out.append({"format": fmt, "perfetto": fmt in PERFETTO_FORMATS})
    return out


def backfill_file_facts(store: Any, report_of: Callable[[str], Path | None], limit: int = 1000) -> int:
    """The facts of the files of runs analysed before they were stored (migration blob_0006), from their
    saved report (the inputs it names), never from the traces; a run whose report is missing or unreadable
    gets "not known" (no format, no Perfetto), and is not tried again."""
    from ..pipeline import load
    from .blobs import BlobUnavailable

    done = 0
    for run_id in store.runs_without_file_facts(limit):
        files = store.files(run_id)
        facts = [{"format": None, "perfetto": False} for _ in files]
        try:
            path = report_of(run_id)
            if path is not None:
                facts = file_facts(load(path), [f"{i}/{f.name}" for i, f in enumerate(files)],
                                   [f.kind for f in files])
        except BlobUnavailable:  # the object store is away: the rest at the next start
            return done
        except Exception:  # an unreadable report (of any kind): its files stay "not known"
            pass
        store.set_file_facts(run_id, facts)
        done += 1
    return done

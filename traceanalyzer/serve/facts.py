"""What the run page says of each stored file without reading it: the format its analysis read it as, and
whether the Perfetto UI opens it as stored. Found once, by the analysis process from its own saved result
(the inputs' formats), and stored with the job's end (`run_files.format`, `run_files.perfetto`); the web
server never opens a trace to draw a page. The size and container (file, gzip, zip, tar) are known when
the upload is accepted."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# The Perfetto UI (ui.perfetto.dev) opens Chrome-trace JSON (Kineto's, TensorFlow's; gzip-compressed too)
# and Perfetto protobuf traces: the run page offers those to it, never archives or counter logs.
PERFETTO_FORMATS = ("kineto", "tf_json", "pftrace")
PLAIN_KINDS = ("file", "gzip")  # stored as the reader reads them (an archive is unpacked first)


def file_facts(saved: Any, inputs: Sequence[Path], kinds: Sequence[str]) -> list[dict[str, Any]]:
    """For each uploaded file (in upload order: `inputs` as given to `analyze`, `kinds` as stored), the
    format the analysis read it as (None: an archive, or a file it did not read) and whether the Perfetto
    UI opens it. `saved` is the analysis' result (its inputs, counter logs and host logs name their paths)."""
    formats: dict[str, str] = {}
    for item in (*saved.inputs, *saved.counter_logs, *saved.host_logs):
        formats.setdefault(os.path.normpath(item.path), item.format)
    out = []
    for path, kind in zip(inputs, kinds, strict=True):
        fmt = formats.get(os.path.normpath(str(path))) if kind in PLAIN_KINDS else None
        out.append({"format": fmt, "perfetto": fmt in PERFETTO_FORMATS})
    return out

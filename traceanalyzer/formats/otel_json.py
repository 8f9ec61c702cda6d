"""OpenTelemetry span exports (OTLP/JSON) -> a `Timeline` holding a serving engine's request spans
(`requests`), to be joined to the engine's iterations in a trace of the same run.

Detected by content, never by name: a JSON object (or JSON Lines of them, as the OpenTelemetry
Collector's file exporter writes) whose first key is `resourceSpans`. Spans are read from
`resourceSpans[].scopeSpans[].spans[]` (`instrumentationLibrarySpans`, the older name, too).

A span is a request when it carries a request id (`gen_ai.request.id`) or is named `llm_request` (vLLM's
request-lifecycle span); other spans are counted, not kept. Several spans of one request id (an API server's
and the engine's) are one request: the span with the most latency figures is kept, the others counted. Its
start (`startTimeUnixNano`: the request's arrival) and end are ns since the Unix epoch (OTLP writes them as
strings or numbers); its queue, prefill, decode, TTFT and end-to-end times are the engine's own attributes
(`gen_ai.latency.time_in_queue`, `..._time_in_model_prefill`, `..._time_in_model_decode`,
`..._time_to_first_token`, `..._e2e`), in seconds as vLLM writes them; token counts from
`gen_ai.usage.prompt_tokens` / `completion_tokens`.

Bounded: the file by `ReadOptions.max_input_bytes`, the spans by MAX_SPANS, the nesting by orjson's own
depth limit; an attribute value that is not a scalar is ignored. Bad input raises one `InputError`
naming the file and what was expected.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from ..errors import InputError
from ..timeline import Source, Timeline, requests_frame
from ._base import ReadOptions

KIND = "requests"
FORMAT = "opentelemetry json"

# Spans read from one export (request spans and others): a capture of a serving run beside a trace holds
# seconds to minutes of requests, thousands of spans; this many means the export is not of one capture.
MAX_SPANS = 2_000_000
# Longest request id kept (an id is echoed in reports; a longer one is cut).
MAX_ID_CHARS = 128
# Times beyond the year 2200 in epoch ns are not a request's.
MAX_EPOCH_NS = 7_258_118_400 * 10**9

REQUEST_SPAN_NAMES = ("llm_request",)
ID_KEY = "gen_ai.request.id"
# attribute (seconds) -> column (ns)
LATENCY_KEYS = {
    "gen_ai.latency.time_in_queue": "queue_ns",
    "gen_ai.latency.time_in_model_prefill": "prefill_ns",
    "gen_ai.latency.time_in_model_decode": "decode_ns",
    "gen_ai.latency.time_to_first_token": "ttft_ns",
    "gen_ai.latency.e2e": "e2e_ns",
}
TOKEN_KEYS = {"gen_ai.usage.prompt_tokens": "prompt_tokens", "gen_ai.usage.completion_tokens": "output_tokens"}
_EXPECTED = ("expected an OpenTelemetry span export in OTLP/JSON: an object {\"resourceSpans\": [{\"scopeSpans\": "
             "[{\"spans\": [...]}]}]} per file or per line")


def sniff(head: bytes) -> bool:
    """An OTLP/JSON trace export: a JSON object whose first key is `resourceSpans`."""
    h = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return h.startswith(b"{") and h[1:].lstrip(b" \t\r\n").startswith(b'"resourceSpans"')


def read(path: Path, data: bytes, options: ReadOptions) -> Timeline:
    """The export's request spans as a Timeline (`requests`, one source)."""
    docs = _documents(path, data)
    cols: dict[str, list[Any]] = {c: [] for c in ("request_id", "ts_ns", "end_ns", "queue_ns", "prefill_ns",
                                                   "decode_ns", "ttft_ns", "e2e_ns", "prompt_tokens",
                                                   "output_tokens")}
    seen = other = bad = 0
    for doc in docs:
        for span in _spans(path, doc):
            seen += 1
            if seen > MAX_SPANS:
                raise InputError(path, f"more than {MAX_SPANS:,} spans: not the export of one capture")
            row = _request(span)
            if row is None:
                other += 1
            elif not row:
                bad += 1
            else:
                for k, v in row.items():
                    cols[k].append(v)
    if not seen:
        raise InputError(path, f"no spans: {_EXPECTED}")
    dupes = _drop_duplicates(cols)
    n = len(cols["ts_ns"])
    source = Source(str(path), FORMAT, events_read=seen, events_kept=n)
    if dupes:
        source.not_kept["another span of the same request"] = dupes
    if other:
        source.not_kept["not a request span"] = other
    if bad:
        source.not_kept["request span without valid times"] = bad
        source.warnings.append(f"{bad} request span(s) without valid start and end times left out")
    if not n:
        source.warnings.append(f"no request spans among its {seen} spans (a span named llm_request or carrying "
                               f"{ID_KEY}): nothing to join to the serving iterations")
    frame = requests_frame({**cols, "source": np.zeros(n, dtype=np.int32)})
    return Timeline(requests=frame.sort_values("ts_ns", kind="stable").reset_index(drop=True),
                    sources=[source], warnings=[f"{path}: {w}" for w in source.warnings]).validate()


def _drop_duplicates(cols: dict[str, list[Any]]) -> int:
    """One row per request id: an engine may write several spans of one request (an API server's and the engine
    core's); the one carrying the most of the engine's latency figures is kept (then the longest, then the
    first). Returns how many were dropped."""
    best: dict[str, int] = {}
    for j, rid in enumerate(cols["request_id"]):
        score = (sum(cols[c][j] >= 0 for c in LATENCY_KEYS.values()), cols["end_ns"][j] - cols["ts_ns"][j])
        k = best.get(rid)
        if k is None or score > (sum(cols[c][k] >= 0 for c in LATENCY_KEYS.values()),
                                 cols["end_ns"][k] - cols["ts_ns"][k]):
            best[rid] = j
    keep = sorted(best.values())
    dropped = len(cols["request_id"]) - len(keep)
    if dropped:
        for c in cols:
            cols[c] = [cols[c][j] for j in keep]
    return dropped


def _documents(path: Path, data: bytes) -> list[Any]:
    """The file as one JSON object, or JSON Lines of them."""
    try:
        return [orjson.loads(data)]
    except orjson.JSONDecodeError as whole:
        docs = []
        for number, line in enumerate(data.splitlines(), 1):
            if not line.strip():
                continue
            try:
                docs.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                raise InputError(path, f"not valid JSON ({_short(str(whole))}; line {number} is not a JSON "
                                       f"object either): {_EXPECTED}") from None
        return docs


def _spans(path: Path, doc: Any) -> Any:
    """The spans of one export object, checked for the OTLP shape on the way."""
    if not isinstance(doc, dict) or not isinstance(doc.get("resourceSpans"), list):
        raise InputError(path, f"no resourceSpans list: {_EXPECTED}")
    for rs in doc["resourceSpans"]:
        if not isinstance(rs, dict):
            raise InputError(path, f"resourceSpans holds a {type(rs).__name__}, not an object: {_EXPECTED}")
        scopes = rs.get("scopeSpans", rs.get("instrumentationLibrarySpans", []))
        if not isinstance(scopes, list):
            raise InputError(path, f"scopeSpans is a {type(scopes).__name__}, not a list: {_EXPECTED}")
        for sc in scopes:
            spans = sc.get("spans", []) if isinstance(sc, dict) else None
            if not isinstance(spans, list):
                raise InputError(path, f"a scopeSpans entry without a spans list: {_EXPECTED}")
            for span in spans:
                if not isinstance(span, dict):
                    raise InputError(path, f"a span is a {type(span).__name__}, not an object: {_EXPECTED}")
                yield span


def _request(span: dict[str, Any]) -> dict[str, Any] | None:
    """One request span's row; None when the span is not a request's, {} when its times are unusable."""
    attrs = _attributes(span.get("attributes"))
    rid = attrs.get(ID_KEY)
    if rid is None and span.get("name") not in REQUEST_SPAN_NAMES:
        return None
    start, end = _epoch_ns(span.get("startTimeUnixNano")), _epoch_ns(span.get("endTimeUnixNano"))
    if start is None or end is None or end < start:
        return {}
    if rid is None:
        rid = span.get("spanId") if isinstance(span.get("spanId"), str) else ""
    row: dict[str, Any] = {"request_id": str(rid)[:MAX_ID_CHARS], "ts_ns": start, "end_ns": end}
    for key, col in LATENCY_KEYS.items():
        row[col] = _seconds_ns(attrs.get(key))
    if row["e2e_ns"] < 0:
        row["e2e_ns"] = end - start
    for key, col in TOKEN_KEYS.items():
        v = attrs.get(key)
        row[col] = int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 2**53 else -1
    return row


def _attributes(items: Any) -> dict[str, Any]:
    """OTLP attributes ([{key, value: {stringValue|intValue|doubleValue|boolValue: ...}}]) -> {key: scalar};
    entries of another shape, and values that are arrays or maps, are ignored."""
    out: dict[str, Any] = {}
    if not isinstance(items, list):
        return out
    for kv in items:
        if not isinstance(kv, dict) or not isinstance(kv.get("key"), str) or not isinstance(kv.get("value"), dict):
            continue
        v = kv["value"]
        if "stringValue" in v and isinstance(v["stringValue"], str):
            out[kv["key"]] = v["stringValue"]
        elif "intValue" in v:  # int64 is a string in OTLP/JSON
            iv = _int(v["intValue"])
            if iv is not None:
                out[kv["key"]] = iv
        elif "doubleValue" in v and isinstance(v["doubleValue"], (int, float)) and not isinstance(v["doubleValue"],
                                                                                                    bool):
            out[kv["key"]] = float(v["doubleValue"])
    return out


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and 0 < len(v) <= 20:
        try:
            return int(v)
        except ValueError:
            return None
    return None


def _epoch_ns(v: Any) -> int | None:
    ns = _int(v)
    return ns if ns is not None and 0 < ns < MAX_EPOCH_NS else None


def _seconds_ns(v: Any) -> int:
    """An engine's latency attribute (seconds) in ns; -1 when absent, negative or not a finite number."""
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or not 0 <= v < 1e7:
        return -1
    return int(round(v * 1e9))


def _short(message: str) -> str:
    return message.splitlines()[0][:120] if message else "unreadable"


__all__ = ["FORMAT", "KIND", "MAX_SPANS", "read", "sniff"]

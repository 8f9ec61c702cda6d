"""A serving engine's requests (`serving.requests`): an OpenTelemetry span export (OTLP/JSON, vLLM's
`llm_request` spans) given with a Kineto trace of the same run, both built here with known answers; the
requests' own queue / prefill / decode / TTFT times and the iterations each one overlapped, on one clock.
The export alone is refused with one line; mangled exports give one-line errors naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kineto_builder import KinetoTrace

import traceanalyzer as ta
from traceanalyzer.errors import InputError
from traceanalyzer.formats import otel_json
from traceanalyzer.formats.registry import REQUESTS, file_kind

BASE_NS = 1_765_000_000_000_000_000  # the trace's baseTimeNanoseconds: its ts (us) + this = epoch ns
MS = 1_000_000
GEMM = "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT_bf16"


def serving_trace(base_ns: int | None = BASE_NS) -> KinetoTrace:
    """A vLLM prefill iteration of 20 ms at 10 ms, then 8 decode iterations of 10 ms back to back (30 .. 110 ms),
    each with GPU work inside its range."""
    t = KinetoTrace(base_ns=base_ns)
    t.host("execute_context_3(600_600)_generation_0(0)", 10_000, 20_000, cat="user_annotation")
    t.launched(10_010, 5, 10_100, 19_000, GEMM)
    for i in range(8):
        s = 30_000 + i * 10_000
        t.host("execute_context_0(0)_generation_3(3)", s, 10_000, cat="user_annotation")
        t.launched(s + 10, 5, s + 100, 9_000, GEMM)
    return t


def attr(key: str, value: object) -> dict:
    if isinstance(value, str):
        return {"key": key, "value": {"stringValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"doubleValue": value}}


def request_span(rid: str, arrival_ms: float, end_ms: float, queue_s: float | None = None,
                 prefill_s: float | None = None, decode_s: float | None = None, ttft_s: float | None = None,
                 e2e_s: float | None = None, prompt: int | None = None, output: int | None = None) -> dict:
    attrs = [attr("gen_ai.request.id", rid)]
    for key, v in (("time_in_queue", queue_s), ("time_in_model_prefill", prefill_s),
                   ("time_in_model_decode", decode_s), ("time_to_first_token", ttft_s), ("e2e", e2e_s)):
        if v is not None:
            attrs.append(attr(f"gen_ai.latency.{key}", v))
    if prompt is not None:
        attrs += [attr("gen_ai.usage.prompt_tokens", prompt), attr("gen_ai.usage.completion_tokens", output)]
    return {"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": f"{abs(hash(rid)) % 10**16:016x}",
            "parentSpanId": "", "name": "llm_request", "kind": 2,
            "startTimeUnixNano": str(BASE_NS + int(arrival_ms * MS)), "endTimeUnixNano": str(BASE_NS + int(end_ms * MS)),
            "attributes": attrs}


# Four requests (arrival and end in ms after the trace's base):
#  A: 5 -> 70, queue 5 ms, prefill 20, decode 40, TTFT 25, e2e 65: iterations #0 (prefill 10-30) .. #4 (60-70)
#  B: 8 -> 90, queue 2, prefill 22, decode 60, TTFT 22, e2e 82: #0 .. #6 (80-90)
#  C: 35 -> 100, queue 35, prefill 10, decode 20, TTFT 45, e2e 65: #1 (30-40) .. #7 (90-100; #8 starts at its end:
#     not overlapped); it waited in the queue longer than its prefill
#  D: 200 -> 250, no latency attributes (e2e from the span: 50 ms): after the capture, no iteration
SPANS = [
    request_span("cmpl-A", 5, 70, 0.005, 0.020, 0.040, 0.025, 0.065, prompt=300, output=5),
    request_span("cmpl-B", 8, 90, 0.002, 0.022, 0.060, 0.022, 0.082, prompt=300, output=7),
    request_span("cmpl-C", 35, 100, 0.035, 0.010, 0.020, 0.045, 0.065, prompt=10, output=3),
    request_span("cmpl-D", 200, 250),
]


def otlp(spans: list[dict], other: int = 1) -> dict:
    others = [{"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "POST /v1/completions", "kind": 2,
               "startTimeUnixNano": str(BASE_NS), "endTimeUnixNano": str(BASE_NS + 5 * MS), "attributes": []}] * other
    return {"resourceSpans": [{"resource": {"attributes": [attr("service.name", "vllm")]},
                               "scopeSpans": [{"scope": {"name": "vllm.llm_engine"}, "spans": spans + others}]}]}


def write_json(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def run(tmp_path: Path, base_ns: int | None = BASE_NS) -> ta.Analysis:
    trace = serving_trace(base_ns).write(tmp_path / "vllm.json")
    return ta.analyze([trace, write_json(tmp_path / "spans.json", otlp(SPANS))])


def test_requests_joined_to_the_iterations_with_exact_figures(tmp_path):
    a = run(tmp_path)
    sv = a.ranks[0].serving
    assert [p.phase for p in sv.phases] == ["prefill", "decode"] and len(sv.iterations) == 9
    q = sv.requests
    assert (q.requests, q.joined, q.with_iterations, q.queued_longer_than_prefill, q.rows_omitted) == (4, True, 3, 1, 0)
    stats = {s.figure: (s.requests, s.median_us, s.p90_us) for s in q.stats}
    # medians and p90 (linear between ranks) over the requests carrying each figure
    assert stats == {"queue": (3, 5_000.0, 29_000.0), "prefill": (3, 20_000.0, 21_600.0),
                     "decode": (3, 40_000.0, 56_000.0), "ttft": (3, 25_000.0, 41_000.0),
                     "e2e": (4, 65_000.0, 76_900.0)}
    rows = {x.request_id: x for x in q.rows}
    assert [x.request_id for x in q.rows] == ["cmpl-A", "cmpl-B", "cmpl-C", "cmpl-D"]  # arrival order
    assert [(rows[k].iterations, rows[k].first_iteration, rows[k].last_iteration) for k in "ABCD" for k in
            [f"cmpl-{k}"]] == [(5, 0, 4), (7, 0, 6), (7, 1, 7), (0, None, None)]
    a_ = rows["cmpl-A"]
    # arrival from the rank's window start (its first GPU work, at 10.1 ms): 5.1 ms before it
    assert (a_.start_us, a_.queue_us, a_.prefill_us, a_.decode_us, a_.ttft_us, a_.e2e_us) == (
        -5_100.0, 5_000.0, 20_000.0, 40_000.0, 25_000.0, 65_000.0)
    assert (a_.prompt_tokens, a_.output_tokens) == (300, 5)
    d = rows["cmpl-D"]
    assert (d.queue_us, d.prefill_us, d.decode_us, d.ttft_us, d.e2e_us, d.prompt_tokens) == (
        None, None, None, None, 50_000.0, None)
    # the export as an input: 5 spans read, 4 kept, the other counted
    (spans_in,) = [i for i in a.inputs if i.format == "opentelemetry json"]
    assert (spans_in.events_read, spans_in.events_kept, spans_in.not_kept) == (5, 4, {"not a request span": 1})
    # the JSON edge, a saved report loads back equal, and the notebook view
    data = a.to_data()["ranks"][0]["serving"]["requests"]
    assert data["stats"][3] == {"figure": "ttft", "requests": 3, "median_us": 25_000.0, "p90_us": 41_000.0}
    assert ta.load(a.save(tmp_path / "r.json")).ranks[0].serving == sv
    df = a.requests()
    assert list(df["request_id"]) == ["cmpl-A", "cmpl-B", "cmpl-C", "cmpl-D"]
    assert list(df["iterations"]) == [5, 7, 7, 0] and df["ttft_us"].iloc[2] == 45_000.0


def test_a_timeline_handed_in_with_its_requests_gives_the_same_join(tmp_path):
    """A notebook's Timeline: the trace's and the export's read and joined (Timeline.concat), then analysed."""
    from traceanalyzer.formats import ReadOptions, read_file, read_request_log
    from traceanalyzer.timeline import Timeline

    trace = serving_trace().write(tmp_path / "vllm.json")
    spans = write_json(tmp_path / "spans.json", otlp(SPANS))
    tl = Timeline.concat([read_file(trace, ReadOptions()), read_request_log(spans, ReadOptions())])
    assert len(tl.requests) == 4 and set(tl.requests["source"]) == {1}
    q = ta.analyze(tl).ranks[0].serving.requests
    assert q == run(tmp_path).ranks[0].serving.requests


def test_the_faces_say_the_requests_in_one_line(tmp_path):
    a = run(tmp_path)
    line = ("requests: 4, median TTFT 25.0 ms (p90 41.0 ms), queue 5.0 ms, prefill 20.0 ms, decode 40.0 ms, "
            "end-to-end 65.0 ms; 1 waited in the queue longer than its prefill; 3 overlap the captured iterations")
    assert f"- {line}" in a.to_markdown()
    assert "| cmpl-C | 24.9 ms | 35.0 ms | 10.0 ms | 20.0 ms | 45.0 ms | 65.0 ms | 7 (#1–#7) |" in a.to_markdown()
    html = a.to_html()
    assert f'<p class="serving-requests">{line}</p>' in html
    assert "requests: 4, median TTFT" in a.to_text()


def test_a_hostile_request_id_is_escaped(tmp_path):
    spans = [request_span("<script>alert(1)</script>", 5, 70, 0.005, 0.02, 0.04, 0.025, 0.065)]
    trace = serving_trace().write(tmp_path / "vllm.json")
    a = ta.analyze([trace, write_json(tmp_path / "spans.json", otlp(spans))])
    html = a.to_html()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "\\<script\\>" in a.to_markdown() or "&lt;script&gt;" in a.to_markdown()


def test_a_trace_without_epoch_times_keeps_the_requests_unjoined(tmp_path):
    """No baseTimeNanoseconds and relative times: the spans' epoch times cannot be placed; each request's own
    figures stay, no iteration is joined, and a warning says why."""
    a = run(tmp_path, base_ns=None)
    q = a.ranks[0].serving.requests
    assert (q.joined, q.with_iterations, q.requests) == (False, 0, 4)
    assert all(x.first_iteration is None for x in q.rows) and q.rows[1].start_us == 3_000.0  # from the first arrival
    assert any("not on the Unix epoch clock" in w for w in a.warnings)
    assert "not on the trace's clock, so not joined to its iterations" in a.to_markdown()


def test_the_export_alone_is_refused_with_one_line(tmp_path):
    spans = write_json(tmp_path / "spans.json", otlp(SPANS))
    assert file_kind(spans) == REQUESTS
    with pytest.raises(InputError) as e:
        ta.analyze(spans)
    assert "no GPU work, so no GPU verdict" in str(e.value) and str(spans) in str(e.value)
    assert "\n" not in str(e.value)


def test_json_lines_as_the_collector_writes_them(tmp_path):
    """The OpenTelemetry Collector's file exporter: one export object per line."""
    lines = "\n".join(json.dumps(otlp([s], other=0)) for s in SPANS)
    path = tmp_path / "spans.jsonl"
    path.write_text(lines + "\n", encoding="utf-8")
    tl = otel_json.read(path, path.read_bytes(), None)  # type: ignore[arg-type]
    assert list(tl.requests["request_id"]) == ["cmpl-A", "cmpl-B", "cmpl-C", "cmpl-D"]
    assert list(tl.requests["queue_ns"]) == [5 * MS, 2 * MS, 35 * MS, -1]


@pytest.mark.parametrize(("content", "says"), [
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [1, 2]}]}]}', "a span is a int, not an object"),
    (b'{"resourceSpans": {"scopeSpans": []}}', "no resourceSpans list"),
    (b'{"resourceSpans": [{"scopeSpans": "x"}]}', "scopeSpans is a str, not a list"),
    (b'{"resourceSpans": []}', "no spans"),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "llm_request", "startTimeUnixNano": "x"', "not valid JSON"),
    # 5,000 deep: orjson's depth limit refuses it, or (older orjson, which parses it) the shape does
    (b'{"resourceSpans": ' + b"[" * 5000 + b"]" * 5000 + b"}", ("not valid JSON", "resourceSpans holds a list")),
])
def test_a_mangled_export_gives_one_line_naming_the_file(tmp_path, content, says):
    path = tmp_path / "spans.json"
    path.write_bytes(content)
    trace = serving_trace().write(tmp_path / "vllm.json")
    with pytest.raises(InputError) as e:
        ta.analyze([trace, path])
    message = str(e.value)
    assert any(s in message for s in ((says,) if isinstance(says, str) else says)), message
    assert message.startswith(str(path)) and "\n" not in message


def test_two_spans_of_one_request_are_one_request(tmp_path):
    """An API server's span and the engine's span of the same request id: the one with the engine's figures stays."""
    api = request_span("cmpl-A", 4, 71)  # no latency attributes, longer
    path = write_json(tmp_path / "spans.json", otlp([api, *SPANS], other=0))
    tl = otel_json.read(path, path.read_bytes(), None)  # type: ignore[arg-type]
    assert list(tl.requests["request_id"]) == ["cmpl-A", "cmpl-B", "cmpl-C", "cmpl-D"]
    assert tl.requests["queue_ns"].iloc[0] == 5 * MS and tl.requests["ts_ns"].iloc[0] == BASE_NS + 5 * MS
    assert tl.sources[0].not_kept == {"another span of the same request": 1}


def test_request_spans_with_bad_times_are_counted_not_kept(tmp_path):
    bad = dict(SPANS[0], startTimeUnixNano="-5")
    backwards = dict(SPANS[1], endTimeUnixNano=str(BASE_NS))
    path = write_json(tmp_path / "spans.json", otlp([bad, backwards, SPANS[2]], other=0))
    tl = otel_json.read(path, path.read_bytes(), None)  # type: ignore[arg-type]
    assert list(tl.requests["request_id"]) == ["cmpl-C"]
    assert tl.sources[0].not_kept == {"request span without valid times": 2}
    assert any("2 request span(s) without valid start and end times" in w for w in tl.warnings)

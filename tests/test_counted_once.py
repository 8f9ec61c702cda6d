"""Time counted once, every duration bounded by the window it speaks of.

An operator's total is the inclusive time of its outermost calls on each thread (analyses/operators.py): a
call nested in another call of the same name adds nothing, so a total never exceeds the time its threads
were recorded. GPU figures are bounded per device by the device's window, per-step figures by the step,
the time lost by the window summed over devices, and every share by 100%. Asserted exactly on a built
trace, and as bounds on every sample trace and every corpus trace."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import CORPUS, SAMPLES
from kineto_builder import HOST_PID, KinetoTrace

import traceanalyzer as ta
from traceanalyzer.errors import InputError
from traceanalyzer.formats import ReadOptions, read_file

OPTS = ta.Options(cache=False, find_logs_beside=False)
EPS_US = 1.0  # rounding of the report's microseconds
# A percentage written in a text (not a signed change such as "+12%").
PERCENT = re.compile(r"(?<![+\-\d.])(\d+(?:\.\d+)?)%")
TRACE_SUFFIXES = (".json", ".json.gz", ".pb")


def _nested_copies(path: Path) -> Path:
    """`aten::copy_` 1000 us holding another `aten::copy_` of 900 us on the main thread, and one of 500 us on a
    second thread, inside two steps; a kernel keeps it a GPU trace."""
    t = KinetoTrace()
    t.step(1, 0, 1500)
    t.step(2, 1500, 1500)
    t.host("aten::copy_", 100, 1000)
    t.host("aten::copy_", 150, 900)
    t.host("aten::copy_", 2000, 500, tid=HOST_PID + 7)
    t.launched(1200, 5, 1210, 200)
    return t.write(path)


def test_nested_calls_of_one_operator_count_once(tmp_path):
    a = ta.analyze(_nested_copies(tmp_path / "nested.json"), OPTS)
    (op,) = [x for x in a.ranks[0].operators.ops if x.name == "aten::copy_"]
    assert op.count == 3 and op.threads == 2
    assert op.total_us == 1000 + 500  # the outer call on the main thread, the call on the other thread
    assert op.self_us == (1000 - 900) + 900 + 500  # every call's own time
    assert op.in_steps_us == 1000 + 500
    assert op.share_of_steps == pytest.approx(1500 / 3000)


# --- the bounds ----------------------------------------------------------------------------------------------
def _texts_over_100(x: Any, path: str, out: list[str]) -> None:
    """Shares above 1 and percentages above 100% anywhere in the result (drawing payloads and the definitions
    left out: they quote no figure of this run)."""
    if isinstance(x, dict):
        for k, v in x.items():
            if k in ("definitions", "drawing"):
                continue
            p = f"{path}.{k}"
            if isinstance(v, (int, float)) and not isinstance(v, bool) and ("share" in k or "fraction" in k):
                if not -1e-6 <= v <= 1 + 1e-6:
                    out.append(f"{p} = {v}")
            else:
                _texts_over_100(v, p, out)
    elif isinstance(x, list):
        for i, v in enumerate(x):
            _texts_over_100(v, f"{path}[{i}]", out)
    elif isinstance(x, str):
        out += [f"{path}: {m.group(0)} in {x[:120]!r}" for m in PERCENT.finditer(x) if float(m.group(1)) > 100.05]


def out_of_bounds(data: dict[str, Any], host_span_us: float | None = None) -> list[str]:
    """Every duration of a report (`Analysis.to_data()`) above the window it speaks of, every share above 100%.
    `host_span_us`: the longest recorded host time of a rank of the input (an operator's bound per thread)."""
    out: list[str] = []
    _texts_over_100(data, "", out)
    for r in data.get("ranks", []):
        who = f"rank {r.get('rank')}"
        for d in r.get("devices", []):  # per device: its window
            w = d["window_us"]
            for k in ("gpu_busy_us", "kernel_us", "communication_us", "exposed_communication_us", "memcpy_us"):
                if (d.get(k) or 0) > w + EPS_US:
                    out.append(f"{who} {d['device']} {k} {d[k]} > its window {w}")
            if d["gaps"]["total_us"] > w + EPS_US:
                out.append(f"{who} {d['device']} gaps {d['gaps']['total_us']} > its window {w}")
        for s in r.get("per_step", []):  # per step: the step
            for k in ("gpu_busy_us", "idle_us", "memcpy_us", "dataloader_wait_us", "comm_us", "exposed_comm_us"):
                if (s.get(k) or 0) > s["duration_us"] + EPS_US:
                    out.append(f"{who} step {s['step']} {k} {s[k]} > the step {s['duration_us']}")
        dg = r.get("diagnosis")
        if dg and dg.get("devices"):  # per rank: the window summed over its devices
            window = sum(d["window_us"] for d in dg["devices"])
            for k in ("lost_us", "idle_us"):
                if dg[k] > window + EPS_US:
                    out.append(f"{who} GPU time {k} {dg[k]} > window x devices {window}")
            steady = (dg.get("headline_figures") or {}).get("steady_lost_us")
            if steady is not None and steady > dg["lost_us"] + EPS_US:
                out.append(f"{who} steady-state time lost {steady} > time lost {dg['lost_us']}")
            for f in dg["findings"]:
                if f["explains_us"] > window + EPS_US:
                    out.append(f"{who} finding {f['id']} explains {f['explains_us']} > window x devices {window}")
            for d in dg["devices"]:
                lost = d["idle_us"] + d["exposed_memcpy_us"] + d["exposed_communication_us"]
                if lost > d["window_us"] + EPS_US:
                    out.append(f"{who} {d['device']} time lost {lost} > its window {d['window_us']}")
        o = r.get("operators")
        for x in (o or {}).get("ops", []):  # per thread: its recorded time
            if o.get("steps_us") is not None and (x.get("in_steps_us") or 0) > o["steps_us"] + EPS_US:
                out.append(f"{who} op {x['name'][:60]} in steps {x['in_steps_us']} > the steps {o['steps_us']}")
            if x["self_us"] > x["total_us"] + EPS_US:
                out.append(f"{who} op {x['name'][:60]} self {x['self_us']} > total {x['total_us']}")
            if host_span_us is not None and x["total_us"] > x["threads"] * host_span_us + EPS_US:
                out.append(f"{who} op {x['name'][:60]} total {x['total_us']} > {x['threads']} thread(s) x "
                           f"{host_span_us}")
    return out


def _host_span_us(tl: Any) -> float:
    """The longest span of host events of a rank (first start to last end), in us."""
    longest = 0
    for info in tl.ranks:
        ev = tl.rank_events(info.index)
        host = ev[ev["device"].to_numpy() < 0]
        if len(host):
            ts = host["ts_ns"].to_numpy()
            longest = max(longest, int((ts + host["dur_ns"].to_numpy()).max() - ts.min()))
    return longest / 1000


def check_file(path: Path) -> list[str]:
    try:
        tl = read_file(path, ReadOptions())
    except InputError:
        pytest.skip(f"{path.name} is not a trace this tool reads")
    return out_of_bounds(ta.analyze(tl, OPTS).to_data(), _host_span_us(tl))


def _samples() -> list[Path]:
    return sorted(p for p in SAMPLES.iterdir() if p.name.endswith((".json", ".json.gz"))
                  and not p.name.endswith(".expected.json"))


def _corpus() -> list[str]:
    if not CORPUS.is_dir():
        return []
    return sorted(str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*") if p.is_file() and p.name.endswith(TRACE_SUFFIXES))


@pytest.mark.parametrize("path", _samples(), ids=lambda p: p.name)
def test_sample_figures_stay_inside_their_windows(path):
    assert check_file(path) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", _corpus() or ["(corpus absent)"])
def test_corpus_figures_stay_inside_their_windows(corpus, name):
    assert check_file(corpus / name) == []


def test_the_check_catches_a_total_above_its_window():
    """The check itself: an operator total above its threads' time, a lost time above the window and a share
    above 100% are each reported."""
    data = {"ranks": [{"rank": 0, "devices": [], "per_step": [], "operators": {"steps_us": 10.0, "ops": [
        {"name": "aten::copy_", "total_us": 926.0, "self_us": 1.0, "in_steps_us": 5.0, "threads": 1,
         "share_of_steps": 0.5}]}, "diagnosis": {
        "lost_us": 3840.0, "idle_us": 1.0, "devices": [{"device": "cuda:0", "window_us": 3390.0, "idle_us": 1.0,
                                                       "exposed_memcpy_us": 0.0, "exposed_communication_us": 0.0}],
        "findings": [{"id": "x", "explains_us": 1.0, "share_of_idle": 1.2, "title": "idle 130% of the window"}]}}]}
    found = out_of_bounds(data, host_span_us=473.7)
    assert any("op aten::copy_ total 926.0 > 1 thread(s) x 473.7" in f for f in found)
    assert any("GPU time lost_us 3840.0 > window x devices 3390.0" in f for f in found)
    assert any(f.endswith("share_of_idle = 1.2") for f in found)
    assert any("130%" in f for f in found)
    assert np.isfinite(473.7)

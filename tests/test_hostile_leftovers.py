"""What the hostile-input harness still found: each is now a one-line error (exit 2) or a counted warning.

- a folder missing in a path: exit 2 naming it, never "internal error: FileNotFoundError";
- a Perfetto GPU id of 2^32 (a proto int32 field) is not wrapped onto GPU 0;
- the page's embedded data is valid JSON whatever the numbers (NaN / infinity as null, counted);
- a log value `inf` / `nan` is a missing reading, counted;
- a folder whose traces sit beside a symlink loop, and a run kept 33 folders deep, are read (with a note).
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

import msgspec
from click.testing import CliRunner
from dmon_builder import trace_with_dated_log
from kineto_builder import KinetoTrace

from traceanalyzer.commands import main
from traceanalyzer.formats import pftrace as pf
from traceanalyzer.formats import read_file
from traceanalyzer.formats._base import ReadOptions
from traceanalyzer.formats._perfetto_pb import f_bytes, f_double, f_string, f_varint
from traceanalyzer.report.html import page_json


def _report(tmp_path: Path, *inputs: Path | str, fmt: str = "json", extra: tuple[str, ...] = ()):
    out = tmp_path / f"out.{fmt}"
    res = CliRunner().invoke(main, ["report", *map(str, inputs), *extra, "-o", str(out), "--format", fmt, "-q",
                                    "--force"])
    return res, out


def _trace(path: Path) -> Path:
    t = KinetoTrace()
    for i in range(3):
        t.step(i, i * 1000, 900).launched(i * 1000 + 10, 5, i * 1000 + 20, 500)
    return t.write(path)


def test_a_folder_missing_in_the_input_path_is_one_line_exit_2(tmp_path):
    res, _ = _report(tmp_path, tmp_path / "no" / "such" / "t.json")
    assert res.exit_code == 2, res.output
    assert "no such file or directory" in res.output and "internal error" not in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_an_output_in_a_missing_folder_is_one_line_exit_2(tmp_path):
    trace = _trace(tmp_path / "t.json")
    res = CliRunner().invoke(main, ["report", str(trace), "-o", str(tmp_path / "gone" / "o.html"), "-q"])
    assert res.exit_code == 2, res.output
    assert "cannot write" in res.output and "internal error" not in res.output


def _gpu_counter_packet(gpu_id: int, value: float, ts: int) -> bytes:
    spec = f_bytes(1, f_varint(1, 3) + f_string(2, "Cycles"))  # GpuCounterDescriptor.specs
    event = f_bytes(52, f_bytes(1, spec) + f_varint(3, gpu_id) + f_bytes(2, f_varint(1, 3) + f_double(3, value)))
    return f_bytes(1, f_varint(8, ts) + f_varint(10, 7) + event)


def test_perfetto_gpu_id_2_to_the_32_is_not_wrapped_onto_gpu_0():
    data = _gpu_counter_packet(0, 1.5, 2000) + _gpu_counter_packet(2**32, 9.5, 3000)
    dec = pf.decode(data, Path("x.pftrace"), 1 << 30)
    counters = [(e["pid"], e["args"]) for e in msgspec.json.decode(pf.kineto_document(dec))["traceEvents"]
                if e["ph"] == "C"]
    assert counters == [("GPU 0 Counters", {"": 1.5})]  # the 2^32 sample is not GPU 0's
    assert dec.not_kept["gpu_id_out_of_range"] == 1


def test_perfetto_gpu_id_2_to_the_32_is_counted_in_the_report(tmp_path):
    path = tmp_path / "t.pftrace"
    path.write_bytes(_gpu_counter_packet(0, 1.5, 2000) + _gpu_counter_packet(2**32, 9.5, 3000))
    src = read_file(path, ReadOptions()).sources[0]
    assert src.not_kept["gpu_id_out_of_range"] == 1
    assert any("1 GPU counter samples dropped: their GPU id is beyond int32" in w for w in src.warnings)


def test_page_json_is_valid_with_non_finite_numbers_and_counts_them(caplog):
    with caplog.at_level(logging.WARNING, logger="traceanalyzer"):
        text = page_json({"b": [1.5, float("nan")], "a": {"x": float("inf"), "y": -float("inf")}}, sort_keys=True)
    assert json.loads(text, parse_constant=lambda c: 1 / 0) == {"a": {"x": None, "y": None}, "b": [1.5, None]}
    assert "3 numbers in the page's data are not finite" in caplog.text
    assert page_json({"a": [1.0, 2]}) == '{"a": [1.0, 2]}'  # finite data: as json.dumps writes it


def _embedded(html: str) -> object:
    found = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S)
    assert found is not None
    return json.loads(found.group(1), parse_constant=lambda c: 1 / 0)  # NaN / Infinity refused


def test_dmon_inf_and_nan_keep_the_page_data_valid_and_are_counted(tmp_path):
    trace, log = trace_with_dated_log(tmp_path)
    text = log.read_text().splitlines()
    text[3] = text[3].rsplit(" ", 1)[0] + " inf"
    text[5] = text[5].rsplit(" ", 1)[0] + " nan"
    log.write_text("\n".join(text) + "\n")
    res, out = _report(tmp_path, trace, fmt="html", extra=("--dmon", str(log)))
    assert res.exit_code == 0, res.output
    _embedded(out.read_text())
    res, out = _report(tmp_path, trace, extra=("--dmon", str(log)))
    data = json.loads(out.read_text())
    warnings = [w for s in data["counter_logs"] for w in s.get("warnings", [])] if "counter_logs" in data else []
    warnings += [w for i in data["inputs"] for w in i.get("warnings", [])]
    assert any("2 values that are neither numbers nor '-' read as missing" in w for w in warnings), warnings


def test_folder_with_a_symlink_loop_beside_its_trace_is_read_with_a_count(tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    _trace(folder / "t.json")
    (folder / "a.json").symlink_to(folder / "b.json")
    (folder / "b.json").symlink_to(folder / "a.json")
    res, out = _report(tmp_path, folder)
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert len(data["ranks"]) == 1
    assert "skipped 2 symbolic link(s) that loop in folder runs: a.json, b.json" in data["warnings"]


def test_a_run_33_folders_deep_is_read_with_a_note(tmp_path):
    root = tmp_path / "logs"
    deep = root.joinpath(*[f"d{i}" for i in range(33)])
    deep.mkdir(parents=True)
    shutil.copy(_trace(tmp_path / "w.json"), deep / "w.1.pt.trace.json")
    res, out = _report(tmp_path, root)
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert len(data["ranks"]) == 1
    assert any("no run within 32 levels of the log dir: searched down to 256 levels" in w for w in data["warnings"])

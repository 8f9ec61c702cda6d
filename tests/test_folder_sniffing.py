"""A folder given as input is searched by the readers' sniffing (issue 45, part 5): a trace or a counter log is
found by its content whatever its name (a `.csv`, `.txt` or suffix-less file), other files are not, with the
same limits as before (links that loop left out and counted; a bounded number of files read to sniff)."""

from __future__ import annotations

import shutil

from conftest import SAMPLES
from kineto_builder import KinetoTrace

import traceanalyzer as ta
from traceanalyzer.formats import registry
from traceanalyzer.formats.inputs import folder_files


def _trace(rank: int) -> KinetoTrace:
    return KinetoTrace(rank=rank).step(1, 0, 1000).kernel(100, 300)


def test_a_trace_without_a_suffix_and_a_log_named_csv_are_found_by_content(tmp_path):
    _trace(0).write(tmp_path / "rank0")  # no suffix
    _trace(1).write(tmp_path / "rank1.txt")
    shutil.copy(SAMPLES / "dmon" / "idle_runs.log", tmp_path / "gpu_metrics")  # an nvidia-smi dmon log
    (tmp_path / "notes.md").write_text("# what this run was\n")
    (tmp_path / "weights.bin").write_bytes(bytes(range(256)) * 16)
    (tmp_path / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1" + b"\x00" * 64)
    said: list[str] = []
    assert [f.name for f in folder_files(tmp_path, said)] == ["gpu_metrics", "rank0", "rank1.txt"]
    assert said == []
    a = ta.analyze(tmp_path, ta.Options(cache=False, jobs=1))
    assert len(a.ranks) == 2 and len(a.counter_logs) == 1
    assert [r.steps for r in a.ranks] == [1, 1]


def test_a_file_named_like_a_trace_is_still_read_and_said_unreadable(tmp_path):
    _trace(0).write(tmp_path / "rank0.json")
    (tmp_path / "broken.json").write_text("{not json")
    assert [f.name for f in folder_files(tmp_path)] == ["broken.json", "rank0.json"]


def test_the_files_read_to_sniff_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "MAX_FOLDER_SNIFFS", 2)
    monkeypatch.setattr("traceanalyzer.formats.inputs.MAX_FOLDER_SNIFFS", 2)
    for name in ("a", "b", "c"):
        _trace(0).write(tmp_path / name)
    said: list[str] = []
    assert [f.name for f in folder_files(tmp_path, said)] == ["a", "b"]
    assert said == ["folder " + tmp_path.name + ": only the first 2 of its 3 files not named like a trace were read "
                    "to see whether they are traces or logs"]


def test_a_link_that_loops_is_left_out_and_counted(tmp_path):
    _trace(0).write(tmp_path / "rank0")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    said: list[str] = []
    assert [f.name for f in folder_files(tmp_path, said)] == ["rank0"]
    assert said == [f"skipped 1 symbolic link(s) that loop in folder {tmp_path.name}: loop"]

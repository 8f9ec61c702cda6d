"""TensorBoard log-dir discovery: PyTorch spans, TF/JAX run folders, the choice of run, and the
acceptance figures of issue 4 through the real command line."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from kineto_builder import KinetoTrace
from timelines import load_paths, load_runs

from traceanalyzer.commands import main
from traceanalyzer.errors import InputError
from traceanalyzer.formats import ReadOptions, input_sets
from traceanalyzer.formats.logdir import PT_TRACE, discover


def _report(args: list[str], out: Path) -> tuple[dict, str]:
    res = CliRunner().invoke(main, ["report", *args, "--format", "json", "-o", str(out), "-q"])
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text()), res.stderr


# --- PyTorch tensorboard_trace_handler dirs -------------------------------------------------
def _pytorch_logdir(root: Path) -> Path:
    """Two workers x two spans; span numbers are per-worker epoch ms, as the handler writes them.
    Span 1 kernels last 100 us, span 2 kernels 300 us."""
    d = root / "tb" / "run1"
    d.mkdir(parents=True)
    for rank, worker in enumerate(["node.a_11", "node.b_12"]):
        for span, (number, kernel_us) in enumerate([(1_700_000_000_000 + rank, 100),
                                                     (1_700_000_060_000 + rank, 300)]):
            trace = KinetoTrace(rank=rank).step(1, 0, 1000).kernel(100, kernel_us)
            trace.write(d / f"{worker}.{number}.pt.trace.json{'.gz' if span else ''}")
    return root / "tb"


def test_worker_and_span_from_file_names():
    m = PT_TRACE.match("host.example.com_1234.1700000000000.pt.trace.json.gz")
    assert m and (m["worker"], m["span"]) == ("host.example.com_1234", "1700000000000")
    m = PT_TRACE.match("worker0.pt.trace.json")
    assert m and (m["worker"], m["span"]) == ("worker0", None)


def test_two_workers_two_spans_gives_two_ranks_of_the_newest_span(tmp_path):
    logdir = _pytorch_logdir(tmp_path)
    said: list[str] = []
    tl = load_paths([logdir], ReadOptions(notify=said.append))
    assert [r.rank for r in tl.ranks] == [0, 1]
    assert [Path(s.path).name.split(".")[2] for s in tl.sources] == ["1700000060000", "1700000060001"]
    assert "2 PyTorch profiler spans" in said[0]
    assert "run1/span2" in said[1] and "newest" in said[1]

    doc, stderr = _report([str(logdir)], tmp_path / "r.json")
    assert [d["devices"][0]["gpu_busy_us"] for d in doc["ranks"]] == [300, 300]
    assert "analysing run1/span2" in stderr


def test_run_option_and_all_runs(tmp_path):
    logdir = _pytorch_logdir(tmp_path)
    doc, _ = _report([str(logdir), "--run", "span1"], tmp_path / "r1.json")
    assert [d["devices"][0]["gpu_busy_us"] for d in doc["ranks"]] == [100, 100]
    doc, _ = _report([str(logdir), "--run", "1700000000001"], tmp_path / "r2.json")  # a raw span number
    assert len(doc["ranks"]) == 2 and doc["ranks"][0]["devices"][0]["gpu_busy_us"] == 100

    runs = load_runs([logdir], ReadOptions(notify=lambda _: None))
    assert [label for label, _ in runs] == ["run1/span1", "run1/span2"]
    assert all(len(tl.ranks) == 2 for _, tl in runs)
    res = CliRunner().invoke(main, ["report", str(logdir), "--all-runs", "-o", str(tmp_path / "all.json"), "-q"])
    assert res.exit_code == 0, res.output
    assert not (tmp_path / "all.json").exists()
    assert sorted(p.name for p in tmp_path.glob("all.*.json")) == ["all.run1_span1.json", "all.run1_span2.json"]
    assert "--all-runs" in res.stderr
    doc = json.loads((tmp_path / "all.run1_span1.json").read_text())
    assert [d["devices"][0]["gpu_busy_us"] for d in doc["ranks"]] == [100, 100]

    with pytest.raises(InputError) as err:
        load_paths([logdir], ReadOptions(run="span9", notify=lambda _: None))
    assert "span1, span2" in err.value.message


def test_plain_directory_keeps_the_old_rule(tmp_path):
    for rank in (0, 1):
        KinetoTrace(rank=rank).step(1, 0, 1000).kernel(100, 200).write(tmp_path / f"rank{rank}.json")
    said: list[str] = []
    tl = load_paths([tmp_path], ReadOptions(notify=said.append))
    assert len(tl.ranks) == 2 and said == []
    assert discover(tmp_path) is None


# --- TF / JAX plugins/profile/<run>/ --------------------------------------------------------
def test_tf_runs_newest_by_folder_name_not_mtime(corpus, tmp_path):
    src = next((corpus / "local_tf_well_fed" / "logs").rglob("*.xplane.pb"))
    profile = tmp_path / "logs" / "train" / "plugins" / "profile"
    old, new = profile / "2024_01_02_10_00_00", profile / "2024_03_01_09_00_00"
    for run in (old, new):
        run.mkdir(parents=True)
        shutil.copy(src, run / "vm.xplane.pb")
    shutil.copy(next((corpus / "tfprof_demo_gpu_input_bound").glob("*.overview_page.pb")),
                new / "vm.overview_page.pb")
    (new / "vm2.xplane.pb").write_bytes(b"\x0a\x05/host:" + b"\xef\xbf\xbd" * 20)  # damaged 2nd host
    os.utime(new / "vm.xplane.pb", (1_000_000, 1_000_000))  # the newer run has the older file
    said: list[str] = []
    tl = load_paths([tmp_path / "logs"], ReadOptions(notify=said.append))
    assert len(tl.ranks) == 1 and tl.ranks[0].framework == "tensorflow"
    assert "2024_03_01_09_00_00" in Path(tl.sources[0].path).parent.name
    assert any("newest by run time" in s for s in said)
    assert any("vm.overview_page.pb" in s and s.startswith("skipped") for s in said)
    assert any("vm2.xplane.pb" in w and "UTF-8" in w for w in tl.warnings)
    sets = input_sets([tmp_path / "logs"], ReadOptions(run="2024_01_02_10_00_00", notify=lambda _: None))
    assert sets[0].files == [old / "vm.xplane.pb"]


def test_dir_with_only_tool_outputs_is_one_line_error(corpus, tmp_path):
    run = tmp_path / "plugins" / "profile" / "2020_05_01_00_00_00"
    run.mkdir(parents=True)
    for f in (corpus / "tfprof_demo_gpu_input_bound").glob("*.pb"):
        shutil.copy(f, run / f.name)
    res = CliRunner().invoke(main, ["report", str(tmp_path), "-o", "-", "--format", "json"])
    assert res.exit_code == 2 and res.stderr.count("\n") == 1
    assert "no <host>.xplane.pb" in res.stderr and "Traceback" not in res.output
    res = CliRunner().invoke(main, ["report", str(corpus / "tfprof_demo_gpu_input_bound"), "-o", "-"])
    assert res.exit_code == 2 and res.stderr.count("\n") == 1


# --- acceptance: input-wait fraction from the TF 2.21 log dirs and their conversions ---------
@pytest.mark.parametrize("scenario, low, high", [("local_tf_input_bound", 0.85, 0.97),
                                                 ("local_tf_well_fed", 0.0, 0.1)])
def test_tf_input_wait_fraction(corpus, tmp_path, scenario, low, high):
    doc, stderr = _report([str(corpus / scenario / "logs")], tmp_path / "logs.json")
    rank = doc["ranks"][0]
    assert low <= rank["dataloader_wait_fraction"] < high
    assert rank["steps"] == 5 and rank["window_basis"] == "steps"
    assert rank["framework"] == "tensorflow" and rank["input"].endswith(".xplane.pb")
    assert "found 1 TensorFlow/JAX profile run" in stderr
    conv, _ = _report([str(corpus / scenario / "xprof_converted")], tmp_path / "conv.json")
    crank = conv["ranks"][0]
    assert crank["input"].endswith(".trace.json.gz")
    for key in ("dataloader_wait_fraction", "dataloader_wait_us", "window_us", "steps"):
        assert crank[key] == rank[key], key
    assert [s["dataloader_wait_us"] for s in crank["per_step"]] == [s["dataloader_wait_us"] for s in rank["per_step"]]

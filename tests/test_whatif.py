"""`traceanalyzer whatif` (commands/whatif.py) on built traces with known answers: the base and projected
median step in text and JSON, several ranks of one job, and one-line errors for bad rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_critical_path import preprocess_then_kernel, two_ranks, two_streams

from traceanalyzer.commands import main


def run(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, list(args))
    return res.exit_code, res.output


def test_text_says_base_projected_and_saving(tmp_path: Path) -> None:
    trace = two_streams().write(tmp_path / "t.json")
    code, out = run("whatif", str(trace), "--remove", "elementwise")
    assert code == 0, out
    assert out.splitlines()[0] == "step: 20.0 ms -> 20.0 ms, saving 0 us (0.0%)"
    assert "elementwise: removed, 1 event(s) matched" in out
    code, out = run("whatif", str(trace), "--remove", "gemm")
    assert out.splitlines()[0] == "step: 20.0 ms -> 14.1 ms, saving 5.9 ms (29.5%)"


def test_json_has_base_projected_saving_and_each_step(tmp_path: Path) -> None:
    trace = preprocess_then_kernel().write(tmp_path / "t.json")
    code, out = run("whatif", str(trace), "--scale", "preprocess=0.5", "--format", "json")
    assert code == 0, out
    doc = json.loads(out)
    assert (doc["base_step_us"], doc["projected_step_us"], doc["saving_us"]) == (8100.0, 5600.0, 2500.0)
    assert doc["per_step"] == [{"step": 3, "base_us": 8100.0, "projected_us": 5600.0}]
    assert doc["rules"] == [{"glob": "preprocess", "factor": 0.5}] and doc["rules_matched"] == {"preprocess": 1}
    assert doc["assumptions"] == {"a stream synchronize with no stream recorded waits for every stream of the rank": 1}


def test_removing_the_blocking_call_removes_its_wait(tmp_path: Path) -> None:
    trace = preprocess_then_kernel().write(tmp_path / "t.json")
    _, out = run("whatif", str(trace), "--remove", "cudaStreamSynchronize", "--format", "json")
    # the host no longer waits for the 3 ms kernel, but the step still holds that kernel (it ended inside the
    # step): the step ends with it (8.03 ms) and the step's untraced tail after its last work (60 us)
    assert json.loads(out)["projected_step_us"] == 8090.0


def test_ranks_of_one_job_the_step_is_the_slowest_rank_s(tmp_path: Path) -> None:
    r0, r1 = two_ranks()
    paths = [str(r0.write(tmp_path / "r0.json")), str(r1.write(tmp_path / "r1.json"))]
    code, out = run("whatif", *paths, "--scale", "preprocess_late=0.5", "--format", "json")
    assert code == 0, out
    doc = json.loads(out)
    assert (doc["base_step_us"], doc["projected_step_us"]) == (8100.0, 5100.0)
    assert [r["projected_step_us"] for r in doc["ranks"]] == [5100.0, 5100.0]  # rank 0 waited for rank 1
    assert doc["rules_matched"] == {"preprocess_late": 1}


@pytest.mark.parametrize("args, message", [
    ((), "nothing to change: give --remove GLOB or --scale GLOB=FACTOR"),
    (("--scale", "gemm"), "--scale 'gemm': expected GLOB=FACTOR"),
    (("--scale", "gemm=fast"), "the factor 'fast' is not a number"),
    (("--scale", "gemm=-2"), "the factor must be a finite number >= 0"),
    (("--remove", "gem"), "'gem' matches no operator, kernel, annotation, runtime call or Python frame"),
])
def test_bad_rules_are_one_line_errors(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    trace = two_streams().write(tmp_path / "t.json")
    code, out = run("whatif", str(trace), *args)
    assert code == 2
    assert message in out and "Traceback" not in out
    assert len([line for line in out.splitlines() if line.strip()]) == 1


def test_help_teaches_with_examples() -> None:
    code, out = run("whatif", "--help")
    assert code == 0
    assert "--remove 'ampere_sgemm*'" in out and "--scale 'aten::mm=0.5'" in out and "smallest factor wins" in out

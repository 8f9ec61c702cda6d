"""`diff` reads the result: each side's per-step parts are the result's step rows over the steady steps the
step time uses, and a run's step time, GPU idle, DataLoader wait, exposed communication and memcpy share
are the same in the report (JSON), BMF, `diff` (both sides) and gates (issue 45, part 2).

The built job: 2 ranks, 8 steps, the first a 40 ms warm-up and 7 steady steps of 10 ms. Each step: the
DataLoader 1 ms (GPU idle), a 1.5 ms GEMM, a 0.5 ms copy, then an all-reduce running alone of 2 ms in even
steps and 6 ms in odd ones (the head: 3 ms and 7 ms), the rest idle. Rank-level exposed communication spread
evenly over the steps (4,000 us) is not what any step measured.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from kineto_builder import KinetoTrace

import traceanalyzer as ta
from traceanalyzer.commands import main
from traceanalyzer.compare import COMPUTE, EXPOSED_COMM, MEMCPY_PART, compare
from traceanalyzer.gates import evaluate, parse_rule
from traceanalyzer.report.bmf import bmf_figures
from traceanalyzer.result import metrics as M

AR = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
BASE_NS = 1_700_000_000_000_000_000
STEPS, WARMUP_US, STEP_US = 8, 40_000, 10_000


def _rank(rank: int, comm: tuple[int, int]) -> KinetoTrace:
    tr = KinetoTrace(rank=rank, base_ns=BASE_NS)
    t = 0
    for s in range(STEPS):
        dur = WARMUP_US if s == 0 else STEP_US
        tr.step(s, t, dur)
        tr.dataloader(t, 1000)
        tr.launched(t + 1000, 20, t + 1000, 1500, name="gemm_kernel")
        tr.copy(t + 2500, 20, t + 2500, 500, nbytes=4096)
        tr.launched(t + 3000, 20, t + 3000, comm[s % 2], name=AR)
        t += dur
    return tr


def _job(folder: Path, comm: tuple[int, int]) -> list[Path]:
    folder.mkdir()
    return [_rank(r, comm).write(folder / f"rank{r}.json") for r in range(2)]


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> tuple[ta.Analysis, ta.Analysis, dict, Path]:
    tmp = tmp_path_factory.mktemp("job")
    opts = ta.Options(cache=False, jobs=1)
    base = ta.analyze(_job(tmp / "base", (2000, 6000)), opts)
    head = ta.analyze(_job(tmp / "head", (3000, 7000)), opts)
    b, h = base.save(tmp / "base.json"), head.save(tmp / "head.json")
    res = CliRunner().invoke(main, ["diff", str(b), str(h), "--format", "json", "-o", str(tmp / "d.json")])
    assert res.exit_code == 0, res.output
    return base, head, json.loads((tmp / "d.json").read_text()), tmp


def test_the_built_job_has_a_warm_up_step_and_uneven_communication(sides):
    base, _, _, _ = sides
    for r in base.ranks:
        assert r.diagnosis is not None and r.diagnosis.warmup_steps == (0,)
        assert [s.exposed_comm_us for s in r.per_step] == [2000.0, 6000.0] * 4
        assert [s.idle_us for s in r.per_step] == [36000.0] + [2000.0, 6000.0] * 3 + [2000.0]
        (d,) = r.devices
        assert d.exposed_communication_us == 32000.0  # 4,000 us a step if spread evenly: no step had that
    assert base.summary.step_time_median_us == 10000.0


@pytest.mark.parametrize("side, comm", [("base", (2000, 6000)), ("head", (3000, 7000))])
def test_each_sides_parts_are_its_step_rows_over_the_steady_steps(sides, side, comm):
    a = sides[0] if side == "base" else sides[1]
    doc = sides[2][side]
    steps, _ = M.job_steps(a)
    assert steps == list(range(1, STEPS))  # the warm-up step left out, as the step time leaves it
    exposed = [float(comm[s % 2]) for s in steps]
    parts = doc["step_parts_us"]
    assert parts[EXPOSED_COMM] == exposed  # the step rows' own, not the rank's total spread evenly
    assert parts[MEMCPY_PART] == [500.0] * 7
    assert parts[COMPUTE] == [1500.0] * 7
    # every steady step splits exactly into its parts
    assert [sum(v[k] for v in parts.values()) for k in range(7)] == [float(STEP_US)] * 7
    rows = [s for r in a.ranks for s in r.per_step if s.step in steps]
    idle = sum(s.idle_us for s in rows) / len(rows)
    assert doc["gpu_idle_per_step_us"] == round(idle, 3) == {(2000, 6000): 3714.286, (3000, 7000): 2714.286}[comm]
    assert doc["gpu_busy_per_step_us"] == round(sum(s.gpu_busy_us for s in rows) / len(rows), 3)
    assert doc["dataloader_wait_per_step_us"] == 1000.0
    assert doc["mean_step_us"] == 10000.0 and doc["steps"] == 7


def test_the_part_test_reads_the_measured_steps(sides):
    _, _, doc, _ = sides
    (comm,) = [p for p in doc["attribution"] if p["cause"] == EXPOSED_COMM]
    # the evidence is the per-step values as measured: 2,000 / 6,000 against 3,000 / 7,000
    assert (comm["base_min_us"], comm["base_max_us"]) == (2000.0, 6000.0)
    assert (comm["head_min_us"], comm["head_max_us"]) == (3000.0, 7000.0)
    assert comm["base_per_step_us"] == round((4 * 6000 + 3 * 2000) / 7, 3)
    assert comm["head_per_step_us"] == round((4 * 7000 + 3 * 3000) / 7, 3)
    assert not comm["separated"] and not comm["decisive"]  # evenly spread (4,000 vs 5,000) looked separated
    assert doc["change_verdict"] == "unchanged"


def test_a_runs_figures_are_the_same_in_the_report_bmf_diff_and_gates(sides):
    base, head, doc, tmp = sides
    for a, side in ((base, doc["base"]), (head, doc["head"])):
        saved = json.loads(a.to_json())["summary"]
        bmf = bmf_figures(a)
        for key, diff_key, summary_key in (("gpu_idle", "gpu_idle_fraction", "gpu_idle_fraction"),
                                           ("dataloader_wait", "dataloader_wait_fraction", "dataloader_wait_fraction"),
                                           ("memcpy_share", "memcpy_share_of_busy", "memcpy_share_of_busy")):
            m = M.BY_KEY[key]
            gate = evaluate(parse_rule(f"{key}>2"), a)
            assert side[diff_key] == saved[summary_key] == bmf[m.bmf]["value"] == gate.value, key
        exposed = M.BY_KEY["exposed_comm"]
        assert bmf[exposed.bmf]["value"] == evaluate(parse_rule("exposed_comm>2"), a).value == round(
            sum(d.exposed_communication_us or 0 for r in a.ranks for d in r.devices)
            / sum(d.window_us or 0 for r in a.ranks for d in r.devices), 6)
        step_ms = bmf[M.BY_KEY["step_time_ms"].bmf]["value"]
        assert step_ms * 1000 == saved["step_time_median_us"] == 10000.0
        assert evaluate(parse_rule("step_time_ms>1000"), a).value == step_ms
    assert doc["step_time"]["base_median_us"] == doc["step_time"]["head_median_us"] == 10000.0
    assert doc["base"]["gpu_idle_fraction"] == 0.563636


def test_the_library_and_the_command_line_compare_alike(sides):
    base, head, doc, _ = sides
    c = compare(base, head)
    assert c.base.step_parts_us[EXPOSED_COMM] == tuple(doc["base"]["step_parts_us"][EXPOSED_COMM])
    assert c.head.gpu_idle_per_step_us == doc["head"]["gpu_idle_per_step_us"]

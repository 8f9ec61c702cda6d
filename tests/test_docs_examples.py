"""Every example in the README and docs/ that can run on a bundled sample is run here, as written.

Command examples (`traceanalyzer ...` lines of ```sh blocks) run in a shell, in a folder that holds
`sample_traces/` and a bundled sample under each placeholder name the examples use (`trace.json`,
`ranks/`, `gpu.log`, ...); their exit status must be 0, or 1 where the example says `exit 1`. An
example that cannot run here (a Dask cluster) is listed in NOT_RUN with the reason, so a new example
is either run or named. The Python blocks run in order, one scope per page; the GitHub Actions
workflow of docs/ci.md runs its shell steps in a simulated Actions environment."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

SAMPLES = ROOT / "sample_traces"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Placeholder names in the examples -> the bundled sample that stands for them.
PLACEHOLDERS = {
    "trace.json.gz": "launch_bound.json.gz",
    "trace.json": "glances/cpu_aug.trace.json",
    "host.csv": "glances/cpu_aug.csv",
    "gpu.log": "dmon/idle_runs.log",
    "big.json": "input_bound.json",
    "base.json": "gpu_bound.json",
    "head.json": "input_bound.json",
    "ranks/comm_rank0.json": "comm_rank0.json",
    "ranks/comm_rank1.json": "comm_rank1.json",
    # the examples of --help
    "head_trace.json.gz": "launch_bound.json.gz",
    "head.json.gz": "launch_bound.json.gz",
    "base/comm_rank0.json": "comm_rank0.json",
    "base/comm_rank1.json": "comm_rank1.json",
    "head/comm_rank0.json": "comm_rank0.json",
    "head/comm_rank1.json": "comm_rank1.json",
    "logdir/worker0.1795323317679782944.pt.trace.json": "torch_cpu_logdir/worker0.1795323317679782944.pt.trace.json",
    "logdir/worker0.1795323317686400188.pt.trace.json": "torch_cpu_logdir/worker0.1795323317686400188.pt.trace.json",
    "LOGDIR/worker0.1795323317679782944.pt.trace.json": "torch_cpu_logdir/worker0.1795323317679782944.pt.trace.json",
}
SAVED_REPORTS = {"base.report.json": "gpu_bound.json"}  # made by `traceanalyzer report` in the fixture
NOT_RUN = {
    "--scheduler": "needs a running Dask cluster (tests/test_executors.py runs one)",
    "--blob-store": "a service on PostgreSQL and an S3-compatible store (tests/test_serve_blobs.py starts both)",
    "serve oidc": "reads the CI issuer's discovery document over the network (tests/test_serve_oidc.py runs a "
                  "local issuer)",
    "vllm_trace/": "a vLLM server's capture and its span export (tests/test_serving_requests.py builds both)",
}


def _blocks(page: Path, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL)


def _examples() -> list[tuple[str, tuple[str, ...]]]:
    """(page, the block's `traceanalyzer` lines): a block's lines run in order, in one folder."""
    found = []
    for page in PAGES:
        for block in _blocks(page, "sh"):
            lines = tuple(re.sub(r"^.*&& \.venv/bin/(?=traceanalyzer )", "", line.strip()) for line in block.splitlines())
            commands = tuple(c for c in lines if c.startswith("traceanalyzer "))
            if commands:
                found.append((page.name, commands))
    return found


EXAMPLES = _examples()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "sample_traces").symlink_to(SAMPLES)
    for name, sample in PLACEHOLDERS.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SAMPLES / sample, tmp_path / name)
    shims = tmp_path / "bin"
    shims.mkdir()
    shim = shims / "traceanalyzer"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m traceanalyzer "$@"\n')
    shim.chmod(0o755)
    for name, sample in SAVED_REPORTS.items():
        assert _shell(f"traceanalyzer report sample_traces/{sample} -o {name} -q", tmp_path).returncode == 0
    return tmp_path


def _expected(command: str) -> set[int]:
    """An example's exit status: 1 where it says `# exit 1` (or `# exit 1: why`), 0 or 1 with a gate
    that may or may not trip (`# exit 1 when ...`), else 0."""
    if re.search(r"#\s*exit 1(?!\s+when)\b", command):
        return {1}
    return {0, 1} if "--fail-on" in command else {0}


def _shell(command: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    path = f"{cwd / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "PATH": path, **(env or {})})


def test_the_examples_are_found():
    pages = {page for page, _ in EXAMPLES}
    assert {"README.md", "report.md", "ci.md", "clusters.md"} <= pages
    assert any("sample_traces/" in c for _, block in EXAMPLES for c in block)


@pytest.mark.slow
@pytest.mark.parametrize(("page", "commands"), EXAMPLES, ids=[f"{p}:{c[0][:50]}" for p, c in EXAMPLES])
def test_every_command_example_runs(page: str, commands: tuple[str, ...], workdir: Path):
    ran = 0
    for command in commands:
        if any(flag in command for flag in NOT_RUN):
            continue
        res = _shell(command, workdir)
        assert res.returncode in _expected(command), (page, command, res.stdout[-2000:], res.stderr[-2000:])
        ran += 1
    if not ran:
        pytest.skip("; ".join(why for flag, why in NOT_RUN.items() if any(flag in c for c in commands)))


def _help_examples() -> list[tuple[str, str]]:
    from click.testing import CliRunner

    from traceanalyzer.commands import main

    found = []
    for args in ([], ["report"], ["diff"]):
        text = CliRunner().invoke(main, [*args, "--help"]).output
        found += [(" ".join(["traceanalyzer", *args]), line.strip()) for line in text.splitlines()
                  if line.strip().startswith("traceanalyzer ")]
    return found


HELP_EXAMPLES = _help_examples()


def test_every_subcommand_help_has_examples_and_every_verdict():
    from click.testing import CliRunner

    from traceanalyzer.causes import VERDICTS
    from traceanalyzer.commands import main

    for command in ("report", "diff"):
        text = CliRunner().invoke(main, [command, "--help"], terminal_width=100).output
        assert "Examples:" in text and f"traceanalyzer {command} " in text
        for verdict in VERDICTS:
            assert f"  {verdict} " in text, (command, verdict)
    assert {c for c, _ in HELP_EXAMPLES} == {"traceanalyzer", "traceanalyzer report", "traceanalyzer diff"}


def test_the_verdicts_in_help_come_from_the_registry(monkeypatch):
    from test_add_a_cause import GC_VERDICT

    from traceanalyzer import causes as C
    from traceanalyzer.commands.report import verdicts_help

    monkeypatch.setattr(C, "VERDICT_LIST", (*C.VERDICT_LIST, GC_VERDICT))
    monkeypatch.setattr(C, "VERDICTS", (*C.VERDICTS, GC_VERDICT.id))
    assert f"gc_bound             {GC_VERDICT.title}" in verdicts_help()


@pytest.mark.slow
@pytest.mark.parametrize(("where", "command"), HELP_EXAMPLES, ids=[c[:60] for _, c in HELP_EXAMPLES])
def test_every_help_example_runs(where: str, command: str, workdir: Path):
    res = _shell(command, workdir, {"GITHUB_STEP_SUMMARY": str(workdir / "summary")})
    assert res.returncode in _expected(command), (where, command, res.stdout[-2000:], res.stderr[-2000:])


def _python_blocks(page: Path) -> str:
    return "\n".join(_blocks(page, "python"))


@pytest.mark.slow
@pytest.mark.parametrize("page", ["README.md", "python.md"])
def test_the_python_examples_run(page: str, workdir: Path, monkeypatch: pytest.MonkeyPatch):
    import traceanalyzer as ta

    path = ROOT / page if page == "README.md" else ROOT / "docs" / page
    code = _python_blocks(path)
    assert "ta.analyze(" in code
    monkeypatch.chdir(workdir)
    scope: dict = {"Path": Path}
    exec(code, scope)  # noqa: S102
    a = scope["a"]
    assert isinstance(a, ta.Analysis)
    steps, gaps, kernels = a.steps(), a.gaps(), a.kernels()
    assert len(steps) == a.ranks[0].steps > 0 and len(kernels) > 0
    assert len(gaps) == sum(d.gaps.count for d in a.ranks[0].devices)


# --- the GitHub Actions workflow of docs/ci.md, its shell steps in a simulated Actions environment ------
def _workflow_steps() -> dict[str, dict]:
    yaml = pytest.importorskip("yaml")
    text = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    workflow = yaml.safe_load(re.search(r"```yaml\n(.*?)```", text, re.DOTALL).group(1))
    (job,) = workflow["jobs"].values()
    return {step["name"]: step for step in job["steps"] if "name" in step}


def _run_step(step: dict, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = step["run"].replace("${{ github.base_ref }}", "main")
    return _shell("set -eo pipefail\n" + script, cwd, env)  # GitHub's default `bash -e {0}` shell


def _actions_env(cwd: Path) -> dict[str, str]:
    for name in ("env", "summary"):
        (cwd / name).write_text("")
    return {"GITHUB_ENV": str(cwd / "env"), "GITHUB_STEP_SUMMARY": str(cwd / "summary"), "GH_TOKEN": "x"}


@pytest.mark.slow
def test_the_workflow_first_pull_request_has_no_base_report(workdir: Path):
    """`gh` finds no successful run of the base branch: the comment says so and nothing fails."""
    steps = _workflow_steps()
    gh = workdir / "bin" / "gh"
    gh.write_text("#!/bin/sh\n[ \"$2\" = list ] && exit 0\nexit 1\n")  # no run found; download fails
    gh.chmod(0o755)
    env = _actions_env(workdir)
    assert _run_step(steps["Base branch's stored report"], workdir, env).returncode == 0
    assert (workdir / "diff.md").read_text().startswith("<!-- traceanalyzer-diff -->\nNo stored report")
    assert 'hashFiles(\'base-report/report.json\')' in steps["Compare with the base branch"]["if"]


@pytest.mark.slow
def test_the_workflow_gate_and_a_broken_trace(workdir: Path):
    """A regressed pull request: the gate's exit 1 is recorded for the last step and the comment is
    written; a broken trace fails the step with exit 2 and records no gate."""
    from test_diff import training

    steps = _workflow_steps()
    env = _actions_env(workdir)
    training(workdir / "trace.json", wait_us=2000, seed=5)  # the head: much slower steps
    training(workdir / "base.json", seed=6)
    (workdir / "base-report").mkdir()
    assert _shell("traceanalyzer report base.json -o base-report/report.json -q", workdir).returncode == 0
    assert _run_step(steps["Report"], workdir, env).returncode == 0
    compare = _run_step(steps["Compare with the base branch"], workdir, env)
    assert compare.returncode == 0, compare.stderr
    assert "GATE_FAILED=1" in (workdir / "env").read_text()
    assert (workdir / "diff.md").read_text().startswith("<!-- traceanalyzer-diff -->")
    assert "<!-- traceanalyzer-diff -->" in (workdir / "summary").read_text()
    assert steps["Fail on gates"]["if"] == "env.GATE_FAILED == '1'"

    (workdir / "trace.json").write_text("{not json")
    env = _actions_env(workdir)
    broken = _run_step(steps["Compare with the base branch"], workdir, env)
    assert broken.returncode == 2 and "gate" not in broken.stderr.lower()
    assert "GATE_FAILED" not in (workdir / "env").read_text()

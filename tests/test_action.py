"""The composite GitHub Action (action.yml): its script, action/run.sh, run as the action runs it, in a
simulated Actions environment (a workspace, RUNNER_TEMP, GITHUB_OUTPUT, GITHUB_STEP_SUMMARY, the
inputs as the `env:` of action.yml sets them), with the tool of this checkout instead of the install
step (TRACEANALYZER_SKIP_INSTALL=1). Three pull requests: the first (no baseline), a regressed one
behind a gate, and one with a broken trace."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from test_diff import training
from test_docs_examples import _actions_env, _shell
from test_docs_examples import workdir as workdir  # noqa: F401  (the fixture: samples and a `traceanalyzer` shim)

yaml = pytest.importorskip("yaml")
ACTION = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
(STEP,) = ACTION["runs"]["steps"]


def test_the_action_passes_every_input_through_env_only():
    assert ACTION["runs"]["using"] == "composite"
    assert set(ACTION["inputs"]) >= {"trace", "base", "fail-on", "comment-file", "summary"}
    assert set(ACTION["outputs"]) == {"verdict", "change", "report-json", "comment", "gate", "run-url"}
    for name, out in ACTION["outputs"].items():
        assert out["value"] == f"${{{{ steps.run.outputs.{name} }}}}"
    assert STEP["id"] == "run" and STEP["shell"] == "bash"
    assert "${{" not in STEP["run"]  # no expression in shell code: inputs are untrusted
    assert STEP["run"].strip("'\"") == "$GITHUB_ACTION_PATH/action/run.sh"
    assert {f"${{{{ inputs.{name} }}}}" for name in ACTION["inputs"]} == set(STEP["env"].values())
    script = (ROOT / "action" / "run.sh").read_text(encoding="utf-8")
    assert "set -Eeuo pipefail" in script and not re.search(r"\beval\b", script) and "${{" not in script
    assert 'pip install --quiet --disable-pip-version-check "${GITHUB_ACTION_PATH:?}"' in script


def _action(workdir: Path, **inputs: str) -> tuple[int, str, dict[str, str], str, str]:
    """Runs the action's step: (exit status, stdout+stderr, outputs, comment, job summary)."""
    env = _actions_env(workdir)
    (workdir / "runner").mkdir(exist_ok=True)
    (workdir / "output").write_text("")
    env |= {"GITHUB_OUTPUT": str(workdir / "output"), "RUNNER_TEMP": str(workdir / "runner"),
            "GITHUB_WORKSPACE": str(workdir), "GITHUB_ACTION_PATH": str(ROOT),
            "TRACEANALYZER_SKIP_INSTALL": "1", "TRACEANALYZER_PYTHON": sys.executable}
    defaults = {name: str(spec.get("default", "")) for name, spec in ACTION["inputs"].items()}
    for name, value in {**defaults, **inputs}.items():
        env[f"INPUT_{name.upper().replace('-', '_')}"] = value
    assert set(STEP["env"]) <= {k for k in env if k.startswith("INPUT_")}
    run = _shell(STEP["run"].strip("'\"").replace("$GITHUB_ACTION_PATH", str(ROOT)), workdir, env)
    outputs = {k: v for k, _, v in re.findall(r"^([\w-]+)<<(\S+)\n(.*?)\n\2$", (workdir / "output").read_text(), re.M | re.S)}
    comment = (workdir / outputs["comment"]).read_text(encoding="utf-8") if "comment" in outputs else ""
    return run.returncode, run.stdout + run.stderr, outputs, comment, (workdir / "summary").read_text()


@pytest.mark.slow
def test_the_first_pull_request_has_no_baseline(workdir: Path):
    code, log, out, comment, summary = _action(workdir, trace="head.json", base="base-report/report.json",
                                               **{"fail-on": "step_time:+5%"})
    assert code == 0, log
    assert out["change"] == "no-baseline" and out["gate"] == "none" and out["verdict"] == "input_bound"
    assert out["comment"] == str(workdir / "runner" / "traceanalyzer-comment.md")
    assert comment.startswith("<!-- traceanalyzer-diff -->\n") and "No stored report of the base branch" in comment
    assert "**input\\_bound**" in comment and "the gates were not evaluated" in comment
    assert summary == comment
    assert Path(out["report-json"]).is_file()  # the next pull request's base
    assert _action(workdir, trace="head.json")[2]["change"] == "no-baseline"  # base left empty


@pytest.mark.slow
def test_a_regressed_pull_request_fails_its_gate_after_the_comment(workdir: Path):
    training(workdir / "slow.json", wait_us=2000, seed=5)  # the head: the GPU waits 2 ms per step for data
    training(workdir / "fast.json", seed=6)
    assert _shell("traceanalyzer report fast.json -o main.report.json -q", workdir).returncode == 0
    code, log, out, comment, summary = _action(workdir, trace="slow.json", base="main.report.json",
                                               **{"fail-on": "step_time:+5%", "comment-file": "perf/pr.md",
                                                  "summary": "false"})
    assert code == 1, log
    assert out["change"] == "regressed" and out["gate"] == "failed" and out["verdict"] == "input_bound"
    assert out["comment"] == "perf/pr.md" and comment == (workdir / "perf" / "pr.md").read_text(encoding="utf-8")
    assert comment.startswith("<!-- traceanalyzer-diff -->\n## 🔴 traceanalyzer diff · Regressed: HEAD is ")
    median = re.search(r"\| median step \| (\d+) us \| ([\d.]+) ms \| \+([\d.]+)% \|", comment)
    assert median and 800 <= int(median[1]) <= 860 and 2.6 <= float(median[2]) <= 2.8 and float(median[3]) > 200
    gate = re.search(r"❌ `step_time:\+5%`: step time \+([\d.]+)% \(95% CI \+([\d.]+)% to", comment)
    assert gate and float(gate[1]) > 200 and float(gate[2]) > 5  # the whole interval is past the limit
    assert re.search(r"\| GPU idle: DataLoader wait \| [\d.]+ us \| [\d.]+ ms \| \+[\d.]+ ms \| 100% \|", comment)
    assert "gate failed: step_time:+5%" in log and summary == ""  # summary: false

    code, log, out, comment, _ = _action(workdir, trace="fast.json", base="main.report.json",
                                         **{"fail-on": "step_time:+5%, gpu_idle>0.90"})
    assert code == 0, log
    assert out["gate"] == "passed" and out["change"] == "unchanged"
    assert "✅ `step_time:+5%`" in comment and "✅ `gpu_idle>0.90`" in comment


def test_a_broken_trace_fails_loudly_and_names_no_gate(workdir: Path):
    bad = "not_json.json"
    code, log, out, comment, summary = _action(workdir, trace=f"sample_traces/bad/{bad}", base="base.report.json",
                                               **{"fail-on": "step_time:+5%"})
    assert code == 2
    assert re.search(rf"^::error title=traceanalyzer::traceanalyzer: error: sample_traces/bad/{bad}: ", log, re.M)
    assert "gate" not in comment.lower() and "gate" not in summary.lower() and out["gate"] == "none"
    assert out["change"] == "error" and "verdict" not in out and "report-json" not in out
    assert comment.startswith("<!-- traceanalyzer-diff -->\n") and "could not analyse" in comment


@pytest.mark.slow
def test_a_bad_gate_and_inputs_that_look_like_code(workdir: Path):
    code, log, out, comment, _ = _action(workdir, trace="base.json", base="base.report.json",
                                         **{"fail-on": "step_time~5"})
    assert code == 2 and "error" in log and "gate failed" not in log and out["gate"] == "none"
    assert "bad input or usage" in comment

    # inputs are never code
    code, log, out, comment, _ = _action(workdir, trace="$(touch pwned)", base="`touch pwned2`",
                                         **{"fail-on": "$(touch pwned3); touch pwned4"})
    assert code == 2 and not list(workdir.glob("pwned*"))


def test_the_documented_workflows_use_the_action_as_it_is():
    """docs/ci.md's two workflows: the unprivileged one runs the action with its real inputs and
    outputs on `pull_request`, never on a fork's code on the GPU runner; the companion posts with a
    write token and runs no code of the pull request."""
    text = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    section = text[text.index("## The GitHub Action"):]
    assert "uses: OWNER/traceanalyzer@v1" in section
    perf, companion = (yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", section, re.DOTALL))
    on = perf[True]  # YAML 1.1 reads the key `on` as true
    assert "pull_request" in on and "pull_request_target" not in on and "write" not in str(perf["permissions"])
    (job,) = perf["jobs"].values()
    assert "self-hosted" in job["runs-on"]
    assert job["if"] == "github.event_name == 'push' || github.event.pull_request.head.repo.full_name == github.repository"
    (step,) = (s for s in job["steps"] if str(s.get("uses", "")).startswith("OWNER/traceanalyzer@"))
    assert set(step["with"]) <= set(ACTION["inputs"])
    used = set(re.findall(r"steps\.perf\.outputs\.([\w-]+)", yaml.safe_dump(perf)))
    assert used and used <= set(ACTION["outputs"])
    assert companion[True] == {"workflow_run": {"workflows": [perf["name"]], "types": ["completed"]}}
    assert companion["permissions"]["pull-requests"] == "write"
    (cjob,) = companion["jobs"].values()
    assert not any("checkout" in str(s.get("uses", "")) or "run" in s for s in cjob["steps"])
    names = {s["with"]["name"] for j in (job, cjob) for s in j["steps"] if "artifact" in str(s.get("uses", "")) and "name" in s.get("with", {})}
    assert "perf-comment" in names


@pytest.mark.slow  # a real service analysing real uploads
def test_the_action_compares_with_the_services_base_branch(workdir: Path, tmp_path: Path):
    """With `server`, the action uploads the trace and compares it there with the base branch's last runs:
    the first pull request of a project with no base run passes with a comment saying so; a regressed
    one posts its comment (links to the served run), sets the outputs, then fails its gate (exit 1)."""
    from history_builder import training_trace
    from serve_helpers import Server
    from test_upload import upload

    server = Server(tmp_path / "data", None, "--jobs", "2").start()
    try:
        token = server.token("perf")
        (workdir / "first.json").write_bytes(training_trace(500.0, seed=1))
        code, log, out, comment, _ = _action(workdir, trace="first.json", server=server.url, project="perf",
                                             token=token, branch="feature/first", commit="a" * 40,
                                             **{"fail-on": "step_time:+5%"})
        assert code == 0, log
        assert out["change"] == "no-baseline" and out["gate"] == "none"
        assert out["run-url"].startswith(f"{server.url}/runs/")
        assert comment.startswith("<!-- traceanalyzer-diff -->") and "main" in comment
        for i in range(3):
            base = tmp_path / f"main{i}.json"
            base.write_bytes(training_trace(500.0, seed=10 + i))
            assert upload(token, base, "--server", server.url, "--project", "perf", "--branch", "main",
                          "--commit", f"{i:040x}", "--wait").returncode == 0
        (workdir / "slow.json").write_bytes(training_trace(4000.0, seed=2))
        code, log, out, comment, summary = _action(workdir, trace="slow.json", server=server.url, project="perf",
                                                   token=token, branch="feature/slow", commit="b" * 40,
                                                   **{"fail-on": "step_time:+5%"})
        assert code == 1, log
        assert out["change"] == "regressed" and out["gate"] == "failed" and out["verdict"]
        # three commits of main: the latest is the base, and one run of a setting measures no variation
        assert "Compared with the latest run of `main`" in comment and out["run-url"] in comment
        assert "one run of its setting: run-to-run variation allowed for, not measured" in comment
        assert comment in summary and token not in log + comment
        assert server.get(out["run-url"].replace(server.url, "")).status_code == 200
    finally:
        server.stop()

"""`traceanalyzer upload`, the CI client, against a real `traceanalyzer serve` started here: the base branch
gets a few runs, then a pull request's run is uploaded, waited for, compared with the base branch's last
runs on the server and gated. Exit 0 on an unchanged run, 1 on a regressed one with the gate named, 2 on
bad usage or a trace the service cannot analyse, 3 on a server that cannot be reached; the comment's links
all answer 200. The GitHub Actions workflows of docs/ci-service.md are read here and their
`traceanalyzer upload` steps checked against the command's options."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT
from history_builder import training_trace
from serve_helpers import Server, free_port


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("upload") / "data", None, "--jobs", "2").start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def base_runs(server, tmp_path_factory):
    """Three runs of main's latest commit (one setting) at 0.5 ms of DataLoader wait a step, uploaded with the
    client itself."""
    token = server.token("perf")
    folder = tmp_path_factory.mktemp("traces")
    for i in range(3):
        trace = folder / f"main{i}.json"
        trace.write_bytes(training_trace(500.0, seed=100 + i))
        res = upload(token, trace, "--server", server.url, "--project", "perf", "--branch", "main",
                     "--commit", "0" * 40, "--wait")
        assert res.returncode == 0, res.stderr
    return token, folder


def upload(token: str | None, *args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("TRACEANALYZER_TOKEN", "GITHUB_STEP_SUMMARY")}
    if token is not None:
        environ["TRACEANALYZER_TOKEN"] = token
    environ["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "traceanalyzer", "upload", *map(str, args)], capture_output=True,
                          text=True, timeout=300, env={**environ, **(env or {})})


def links(markdown: str) -> list[str]:
    return re.findall(r"\]\((https?://[^)\s]+)\)", markdown)


@pytest.mark.slow  # a real server analysing real uploads
def test_an_unchanged_run_passes_and_its_comment_links_work(server, base_runs, tmp_path):
    token, folder = base_runs
    head = tmp_path / "head.json"
    head.write_bytes(training_trace(500.0, seed=7))
    comment = tmp_path / "out" / "comment.md"
    res = upload(token, head, "--server", server.url, "--project", "perf", "--branch", "feature/same",
                 "--commit", "f" * 40, "--base-branch", "main", "--fail-on", "step_time:+5%", "--comment", comment)
    assert res.returncode == 0, res.stderr
    run_url = res.stdout.strip()
    assert re.fullmatch(rf"{re.escape(server.url)}/runs/[0-9a-f]{{12}}", run_url)
    assert "uploading 100%" in res.stderr and ("Unchanged: step time" in res.stderr or "Inconclusive" in res.stderr)
    text = comment.read_text()
    assert text.startswith("<!-- traceanalyzer-diff -->") and "Compared with the latest run of `main`" in text
    assert "and 2 run(s) of its setting" in text
    assert re.search(r"traceanalyzer diff · (Unchanged|Inconclusive)", text) and "✅ `step_time:+5%`" in text
    # run-to-run variation from the base branch's three runs, and the run counts stated as they are
    assert "Run-to-run variation from 3 runs of one setting" in text and "3 base runs and 1 head run" in text
    assert "one run on a side" not in text
    found = links(text)
    assert run_url in found
    assert any("/compare?base=" in u for u in found) and any("/history?branch=main" in u for u in found)
    for url in found:
        assert server.get(url.replace(server.url, "")).status_code == 200, url


@pytest.mark.slow  # a real server analysing real uploads
def test_a_regressed_run_trips_the_gate_and_names_it(server, base_runs, tmp_path):
    token, folder = base_runs
    head = tmp_path / "slow.json.gz"
    import gzip

    head.write_bytes(gzip.compress(training_trace(4000.0, seed=8)))
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    res = upload(token, head, "--server", server.url, "--project", "perf", "--branch", "feature/slow",
                 "--commit", "e" * 40, "--fail-on", "step_time:+5%", "--fail-on", "gpu_idle>0.9",
                 env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert res.returncode == 1, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("traceanalyzer: error: gate failed: step_time:+5% (step time +") and "gpu_idle" not in last
    text = summary.read_text()
    assert text.startswith("earlier step\n<!-- traceanalyzer-diff -->") and "regressed" in text
    assert "DataLoader" in text or "dataloader" in text


@pytest.mark.slow  # a real server analysing real uploads
def test_usage_errors_a_failed_analysis_and_an_unreachable_server(server, base_runs, tmp_path):
    token, folder = base_runs
    trace = folder / "main0.json"
    no_token = upload(None, trace, "--server", server.url, "--project", "perf")
    assert no_token.returncode == 2 and "TRACEANALYZER_TOKEN" in no_token.stderr
    wrong = upload("ta_wrong", trace, "--server", server.url, "--project", "perf")
    assert wrong.returncode == 2 and "refused (401): unknown token" in wrong.stderr
    assert "ta_wrong" not in wrong.stderr + wrong.stdout
    bad_rule = upload(token, trace, "--server", server.url, "--project", "perf", "--fail-on", "nonsense")
    assert bad_rule.returncode == 2 and "--fail-on 'nonsense'" in bad_rule.stderr
    broken = tmp_path / "broken.json"
    broken.write_text("this is not a trace\n")
    failed = upload(token, broken, "--server", server.url, "--project", "perf", "--wait", "-q")
    assert failed.returncode == 2 and "the analysis failed" in failed.stderr and failed.stderr.count("\n") == 1
    down = upload(token, trace, "--server", f"http://127.0.0.1:{free_port()}", "--project", "perf", "-q")
    assert down.returncode == 3 and "cannot reach the service" in down.stderr
    assert upload(token, trace, "--server", "ftp://x", "--project", "perf").returncode == 2


@pytest.mark.slow  # a real server analysing real uploads
def test_a_directory_of_ranks_goes_up_as_one_archive(server, base_runs, tmp_path):
    token, _ = base_runs
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for r in (0, 1):
        (ranks / f"comm_rank{r}.json").write_bytes((ROOT / "sample_traces" / f"comm_rank{r}.json").read_bytes())
    res = upload(token, ranks, "--server", server.url, "--project", "perf", "--branch", "ranks", "--wait", "-q")
    assert res.returncode == 0, res.stderr
    run = server.get("/api/v1/runs/" + res.stdout.strip().rsplit("/", 1)[1]).json()
    assert run["status"] == "done" and run["files"] == 1


def test_the_workflows_of_the_docs_call_upload_with_options_it_has():
    yaml = pytest.importorskip("yaml")
    from click.testing import CliRunner

    from traceanalyzer.commands import main

    help_text = CliRunner().invoke(main, ["upload", "--help"]).output
    text = (ROOT / "docs" / "ci-service.md").read_text(encoding="utf-8")
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)]
    workflows = [b for b in blocks if isinstance(b, dict) and "jobs" in b]
    assert len(workflows) >= 3
    # the action's step (a fragment of steps) uses only inputs the action has, with a server
    action_inputs = set(yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))["inputs"])
    action_steps = [s for b in blocks if isinstance(b, list) for s in b if "traceanalyzer@" in str(s.get("uses"))]
    assert action_steps and all(set(s["with"]) <= action_inputs and "server" in s["with"] for s in action_steps)
    calls = [line for w in workflows for job in w["jobs"].values() for step in job["steps"]
             for line in str(step.get("run", "")).replace("\\\n", " ").splitlines() if "traceanalyzer upload" in line]
    assert calls
    for call in calls:
        for option in re.findall(r"(?:^|\s)(--[a-z-]+)", re.sub(r"\$\([^)]*\)", "N", call)):
            assert f"{option} " in help_text or f"{option}," in help_text, (option, call)
    triggers = [w.get("on", w.get(True)) for w in workflows]  # YAML 1.1 reads `on:` as True
    fork = next(w for w, on in zip(workflows, triggers, strict=True) if "workflow_run" in on)
    assert fork["permissions"] == {"actions": "read", "pull-requests": "write"}
    assert "checkout" not in str(fork)  # the upload workflow never checks out the pull request's code
    unprivileged = next(w for w, on in zip(workflows, triggers, strict=True) if list(on) == ["pull_request"])
    assert unprivileged["permissions"] == {"contents": "read"} and "secrets" not in str(unprivileged)


@pytest.mark.slow
@pytest.mark.parametrize("status", [307, 302, 200, 204])
def test_an_upload_answered_other_than_201_is_an_error_and_no_redirect_is_followed(tmp_path, status):
    """A proxy that redirects (or a server that answers 200/204 to the upload) is an error, exit 3, and the
    token never goes to the redirect's target."""
    import http.server
    import threading

    seen: list[tuple[int, str | None]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            seen.append((self.server.server_port, self.headers.get("Authorization")))
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(status)
            if status in (302, 307):
                self.send_header("Location", f"http://127.0.0.1:{target.server_port}/api/v1/projects/p/runs")
            body = b'{"id": "abc"}' if status == 200 else b""
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    front = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    target = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    for srv in (front, target):
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        trace = tmp_path / "t.json"
        trace.write_text('{"traceEvents": []}')
        res = upload("ta_secret", trace, "--server", f"http://127.0.0.1:{front.server_port}", "--project", "p")
        assert res.returncode == 3, (res.returncode, res.stdout, res.stderr)
        last = res.stderr.strip().splitlines()[-1]
        assert res.stdout == "" and "Traceback" not in res.stderr, res.stderr
        assert last.startswith("traceanalyzer: error:") and f"({status})" in last, res.stderr
        assert seen == [(front.server_port, "Bearer ta_secret")]  # one request, to --server only
    finally:
        front.shutdown()
        target.shutdown()


def test_an_upload_answered_503_with_retry_after_is_sent_again(tmp_path):
    """A busy service (its uploads at their cap: 503 + Retry-After, answered before the body is read) is
    tried again after the wait it asks for; the whole file goes each time."""
    import http.server
    import threading

    got: list[int] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            if not got:
                got.append(0)  # the first: refused at once, its body left unread
                body = b'{"error": "4 uploads are under way: try again in 1 s"}'
                self.send_response(503)
                self.send_header("Retry-After", "1")
                self.send_header("Connection", "close")
            else:
                got.append(len(self.rfile.read(int(self.headers["Content-Length"]))))
                body = b'{"id": "0123456789ab", "status": "queued", "url": "http://x/runs/0123456789ab"}'
                self.send_response(201)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        trace = tmp_path / "t.json"
        trace.write_bytes(b'{"traceEvents": []}' + b" " * 3_000_000)  # more than a socket buffer
        res = upload("ta_secret", trace, "--server", f"http://127.0.0.1:{srv.server_port}", "--project", "p")
        assert res.returncode == 0 and res.stdout.strip() == "http://x/runs/0123456789ab", res.stderr
        assert got == [0, trace.stat().st_size] and "busy; trying again in 1 s" in res.stderr
    finally:
        srv.shutdown()

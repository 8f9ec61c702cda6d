"""Traces and reports in an S3-compatible object store (`serve --blob-store s3://BUCKET/PREFIX`), against a
real S3 server on loopback: moto's standalone server (an HTTP S3 endpoint, started in this process so that
stopping it for an outage and starting it again keeps its objects). SeaweedFS would do as well, but no
package of the index ships its binary. Skipped when moto or boto3 is not installed.

What is checked: an upload is analysed by a worker on another machine's DATA (same database, same bucket),
its bytes are in the bucket and nowhere under either DATA; the web server shows the report from the bucket
and hands out the trace; a delete removes the objects; an outage of the store during an analysis refuses
uploads with 503 and loses nothing (the job whose report could not go up waits for the store, its tries
given back, and is analysed once it is back); a large file goes up in parts."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import httpx
import pytest
from serve_helpers import SAMPLES, Server, Worker, analysis_processes, cli, free_port, kineto_trace, postgres

pytest.importorskip("boto3")
moto_server = pytest.importorskip("moto.server")
pytestmark = pytest.mark.slow  # an S3 server, service processes, a PostgreSQL database

BUCKET = "traces"


class S3:
    """moto's S3 server on a loopback port; `stop` / `start` make an outage (its objects are kept)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.server = None
        self.start()

    def start(self) -> None:
        self.server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()

    def stop(self) -> None:
        self.server.stop()

    @property
    def env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{self.port}", "AWS_ACCESS_KEY_ID": "test-key",
                "AWS_SECRET_ACCESS_KEY": "test-secret", "AWS_REGION": "us-east-1"}

    def client(self):  # noqa: ANN201
        import boto3

        return boto3.client("s3", endpoint_url=self.env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                            aws_access_key_id="test-key", aws_secret_access_key="test-secret")

    def keys(self, prefix: str = "") -> list[str]:
        out = self.client().list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
        return sorted(o["Key"] for o in out)


@pytest.fixture
def s3(monkeypatch):
    store = S3()
    for k, v in store.env.items():  # the servers and workers started by the test inherit them
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    store.client().create_bucket(Bucket=BUCKET)
    yield store
    store.stop()


def holding(folder: Path, needle: bytes) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_traces_live_in_the_bucket_and_a_worker_on_another_data_folder_analyses_them(tmp_path, s3):
    db = postgres().new_database()
    blob = ("--blob-store", f"s3://{BUCKET}/ta")
    web = Server(tmp_path / "web", db, "--jobs", "0", *blob).start()  # a web server alone
    worker = Worker(tmp_path / "worker", db, "--jobs", "1", *blob).start()  # "another machine": its own DATA
    try:
        token = web.token("s3")
        body = kineto_trace(400_000)
        sha = hashlib.sha256(body).hexdigest()
        r = web.upload(token, data=body, name="train.json", project="s3")
        assert r.status_code == 201, r.text
        run_id = r.json()["id"]
        run = web.wait(run_id, timeout=120)
        assert run["status"] == "done", run
        assert s3.client().get_object(Bucket=BUCKET, Key=f"ta/traces/{sha[:2]}/{sha[2:]}")["Body"].read() == body
        assert s3.keys(f"ta/reports/{run_id}/") == [f"ta/reports/{run_id}/{n}" for n in
                                                     ("headline.json", "report.html", "report.json", "report.md")]
        needle = body[len(body) // 2: len(body) // 2 + 256]  # the trace's own bytes, in no report
        assert holding(web.data, needle) == [] and holding(worker.data, needle) == []
        assert not (web.data / "reports" / run_id).exists()  # the web server analysed nothing
        assert not (worker.data / "reports" / run_id).exists()  # the worker keeps nothing of it
        # the web server's pages come from the bucket: the report the worker saved, the trace as uploaded
        report = web.get(f"/api/v1/runs/{run_id}/report.json")
        assert report.status_code == 200 and report.json()["inputs"][0]["format"] == "kineto"
        assert web.get(f"/runs/{run_id}/report.html").status_code == 200
        assert (web.data / "cache" / "reports" / run_id / "report.html").is_file()  # shown from its cache since
        assert web.get(f"/runs/{run_id}/files/0").content == body
        assert 'class="open-perfetto"' in web.get(f"/runs/{run_id}").text  # stored by the worker's analysis
        # a delete removes the trace and the report from the bucket
        gone = httpx.delete(f"{web.url}/api/v1/runs/{run_id}", headers={"Authorization": f"Bearer {token}"})
        assert gone.status_code == 204, gone.text
        assert s3.keys("ta/") == []
    finally:
        web.stop()
        worker.stop()


def test_an_outage_of_the_store_refuses_uploads_with_503_and_loses_nothing(tmp_path, s3):
    data = tmp_path / "data"
    blob = ("--blob-store", f"s3://{BUCKET}/ta", "--blob-retry", "1s")
    web = Server(data, None, "--jobs", "0", *blob).start()
    worker = Worker(data, None, "--jobs", "1", *blob).start()
    try:
        token = web.token("out")
        before = web.upload(token, data=kineto_trace(12_000_000), name="big.json", project="out")
        assert before.status_code == 201
        run_id = before.json()["id"]
        deadline = time.monotonic() + 60
        while not any(spec.startswith(str(data.resolve())) for _, spec in analysis_processes().values()):
            assert time.monotonic() < deadline, "the analysis never started"
            time.sleep(0.02)
        s3.stop()  # while it is analysed: its report cannot go to the store, nor its trace come again
        outage = time.monotonic()
        refused = web.upload(token, SAMPLES / "input_bound.json", project="out")
        assert refused.status_code == 503 and refused.headers["retry-after"], refused.text
        assert "store" in refused.json()["error"]
        health = web.get("/api/v1/health")
        assert health.status_code == 503 and health.json()["object_store"] == "down: cannot be reached", health.text
        assert "127.0.0.1" not in health.text  # the store's address stays out of the answer
        assert web.get("/api/v1/runs", params={"project": "out"}).json()["total"] == 1  # nothing recorded
        assert not [p for p in (data / "tmp").rglob("*") if p.is_file()]  # its bytes went with it
        time.sleep(max(0.0, 10 - (time.monotonic() - outage)))
        waiting = web.get(f"/api/v1/runs/{run_id}").json()
        assert waiting["status"] in ("queued", "running") and waiting["tries"] <= 1, waiting
        s3.start()
        assert web.wait(run_id, timeout=120)["status"] == "done"
        assert web.get("/api/v1/health").json()["object_store"] == "ok"
        again = web.upload(token, SAMPLES / "input_bound.json", project="out")
        assert again.status_code == 201
        assert web.wait(again.json()["id"], timeout=60)["status"] == "done"
        assert web.get(f"/api/v1/runs/{run_id}/report.json").status_code == 200
    finally:
        web.stop()
        worker.stop()
    log = worker.log.read_text()
    # its report could not go up, then its trace could not come down: queued again each time, tries given back
    assert f"(the upload of ta/reports/{run_id}/" in log and "(the download of trace" in log
    assert "queued again in 1 s" in log


def test_a_large_file_goes_up_in_parts(tmp_path, s3, monkeypatch):
    from traceanalyzer.serve import blobs
    from traceanalyzer.serve.uploads import Received

    monkeypatch.setattr(blobs, "PART_BYTES", 5 * 1024**2)  # S3's smallest part
    store = blobs.S3Blobs(f"s3://{BUCKET}/p", tmp_path / "cache")
    big = tmp_path / "big.part"
    payload = bytes(range(256)) * (11 * 1024**2 // 256)  # 11 MiB: three parts
    big.write_bytes(payload)
    sha = hashlib.sha256(payload).hexdigest()
    store.stage([Received(big, sha, len(payload), "file", "big.json")])
    head = s3.client().head_object(Bucket=BUCKET, Key=f"p/traces/{sha[:2]}/{sha[2:]}")
    assert head["ContentLength"] == len(payload) and head["ETag"].strip('"').endswith("-3")
    assert store.has_trace(sha) and list(store.trace_shas()) == [sha]
    assert b"".join(store.trace_chunks(sha)) == payload
    store.drop_trace(sha)
    assert not store.has_trace(sha) and s3.keys("p/") == []


def test_a_bad_blob_store_is_one_line_at_start(tmp_path, s3):
    for url, said in (("s3://no-such-bucket/ta", "no bucket 'no-such-bucket'"), ("gs://traces", "s3://BUCKET")):
        res = cli("serve", "worker", "--data", str(tmp_path / "d"), "--blob-store", url, check=False)
        assert res.returncode == 2 and res.stderr.count("\n") == 1 and said in res.stderr, res.stderr

"""The HTTP API without Ray (``--api-only``): real uvicorn on loopback, real SQLite, real HTTP clients."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from conftest import EXAMPLES, Served, assert_no_server_errors, free_port
from typer.testing import CliRunner

from tessera.cli import app as cli_app
from tessera.service.config import ServiceConfig, is_loopback
from tessera.service.server import Service, ensure_token

TINY = {
    "name": "tiny",
    "model": "gpt-tiny",
    "global_batch": 8,
    "seq_len": 64,
    "steps": 20,
    "precision": "fp32",
}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    state = tmp_path_factory.mktemp("api")
    service = Service(ServiceConfig(cluster="local", state_dir=state, scheduler=False))
    service.start()
    s = Served(service)
    yield s
    s.close()
    service.stop()


@pytest.mark.timeout(120)
def test_1000_concurrent_submissions_stored_exactly_once(served):
    """1,000 submissions at once, plus 200 retries of the first 200 (same Idempotency-Key) racing them:
    exactly 1,000 jobs, each key once, every retry answered with the job stored the first time."""

    async def run():
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        async with httpx.AsyncClient(base_url=served.url, limits=limits, timeout=60) as c:

            async def submit(i: int):
                for attempt in range(
                    4
                ):  # a dropped connection is retried with the same key, as a client should
                    try:
                        r = await c.post(
                            "/api/jobs",
                            json={**TINY, "name": f"burst-{i}"},
                            headers={"Idempotency-Key": f"burst-{i}"},
                        )
                        return i, r.status_code, r.json()
                    except httpx.TransportError:
                        if attempt == 3:
                            raise
                        await asyncio.sleep(0.5)

            return await asyncio.gather(*[submit(i) for i in list(range(1000)) + list(range(200))])

    out = asyncio.run(run())
    assert all(code in (200, 201) for _, code, _ in out), {code for _, code, _ in out}
    assert sum(code == 201 for _, code, _ in out) <= 1000  # a retried first try may have been stored already
    assert sum(code == 200 for _, code, _ in out) >= 200
    ids: dict[int, set[int]] = {}
    for i, _, body in out:
        ids.setdefault(i, set()).add(body["job"]["id"])
    assert all(len(v) == 1 for v in ids.values())  # a retry returns the same job
    stored = [j for j in served.service.store.list_jobs() if j.name.startswith("burst-")]
    assert len(stored) == 1000
    assert sorted(j.submission_key for j in stored) == sorted(f"burst-{i}" for i in range(1000))
    assert {next(iter(v)) for v in ids.values()} == {j.id for j in stored}


@pytest.mark.parametrize(
    "change, field",
    [
        ({"global_batch": 0}, "global_batch"),
        ({"global_batch": None}, "global_batch"),
        ({"steps": None}, "steps or samples"),
        ({"gpus": 4}, "'gpus' is not allowed"),
        ({"model": "lama2-7b"}, "model"),
        ({"precision": "fp8"}, "precision"),
        ({"exclude_gpu_types": ["A99"]}, "exclude_gpu_types"),
        ({"steps": 2**60}, "steps"),
        ({"entrypoint": "no colon here"}, "entrypoint"),
        ({"entrypoint": "/nonexistent/model.py:Net", "model": "mine"}, "entrypoint"),
        ({"entrypoint": f"{EXAMPLES / 'blob_classifier.py'}:Nope", "model": "mine"}, "entrypoint"),
        ({"data": "/nonexistent/corpus.txt"}, "data"),
        ({"seq_len": 65}, "seq_len"),  # gpt-tiny has 64 positions
    ],
)
def test_malformed_spec_gets_422_naming_the_field(served, change, field):
    body = {k: v for k, v in {**TINY, **change}.items() if v is not None}
    before = len(served.service.store.list_jobs())
    r = httpx.post(f"{served.url}/api/jobs", json=body, timeout=120)  # an entrypoint is checked in a child
    assert r.status_code == 422, r.text
    out = r.json()
    text = json.dumps(out["detail"]) + out.get("message", "")
    assert field in text, text
    assert len(served.service.store.list_jobs()) == before  # nothing stored


def test_entrypoint_model_is_accepted(served):
    body = {"name": "blobs", "model": "blob-classifier", "entrypoint": f"{EXAMPLES / 'blob_classifier.py'}:BlobClassifier",
            "global_batch": 32, "steps": 10, "precision": "fp32"}  # fmt: skip
    r = httpx.post(f"{served.url}/api/jobs", json=body, timeout=120)
    assert r.status_code == 201, r.text
    assert r.json()["job"]["state"] == "PENDING"


def test_get_list_logs_cancel(served):
    r = httpx.post(f"{served.url}/api/jobs", json={**TINY, "name": "lifecycle"})
    jid = r.json()["job"]["id"]
    job = httpx.get(f"{served.url}/api/jobs/{jid}").json()
    assert job["state"] == "PENDING" and job["spec"]["model"] == "gpt-tiny" and job["total_steps"] == 20
    assert job["reason"] == "Submitted" and job["history"] == []
    by_name = httpx.get(f"{served.url}/api/jobs/lifecycle").json()
    assert by_name["id"] == jid
    listed = httpx.get(f"{served.url}/api/jobs", params={"state": "PENDING", "limit": 5000}).json()
    assert jid in [j["id"] for j in listed["jobs"]] and listed["counts"]["PENDING"] >= 1
    assert httpx.post(f"{served.url}/api/jobs/{jid}/cancel").json()["state"] == "CANCELLED"
    logs = httpx.get(f"{served.url}/api/jobs/{jid}/logs").json()
    assert logs["done"] and [x["line"] for x in logs["lines"]][-1] == "cancelled while pending"
    again = httpx.get(f"{served.url}/api/jobs/{jid}/logs", params={"after": logs["next"]}).json()
    assert again["lines"] == []
    assert httpx.get(f"{served.url}/api/jobs/999999").status_code == 404
    for ref in ("%C2%B9", "9" * 30, "-1"):  # a Unicode digit, beyond 64 bits, a name that is no job: 404s
        assert httpx.get(f"{served.url}/api/jobs/{ref}/telemetry").status_code == 404


@pytest.mark.timeout(120)
def test_dry_run_plans_without_storing(served):
    before = len(served.service.store.list_jobs())
    r = httpx.post(f"{served.url}/api/jobs/dry-run", json=TINY, timeout=120)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["chosen"] and out["cells"] and out["plan"]["model"] == "gpt-tiny"
    assert {d["gpu_type"] for s in out["plan"]["stages"] for d in s["devices"]} <= {"A100-40GB", "V100-32GB"}
    assert out["estimated_time_s"] > 0 and out["estimate"]["feasible"]
    assert len(served.service.store.list_jobs()) == before
    big = httpx.post(
        f"{served.url}/api/jobs/dry-run", json={**TINY, "model": "llama2-70b", "seq_len": 4096}, timeout=120
    )
    assert big.status_code == 200 and big.json()["chosen"] is None
    assert big.json()["reason"].startswith("Infeasible")


def test_cluster_and_openapi(served):
    c = httpx.get(f"{served.url}/api/cluster").json()
    assert c["mode"] == "none" and c["by_type"] == {
        "A100-40GB": {"total": 2, "used": 0, "free": 2},
        "V100-32GB": {"total": 2, "used": 0, "free": 2},
    }
    schema = httpx.get(f"{served.url}/openapi.json").json()
    assert "/api/jobs" in schema["paths"] and "JobSpec" in schema["components"]["schemas"]
    assert "entrypoint" in schema["components"]["schemas"]["JobSpec"]["properties"]
    page = httpx.get(f"{served.url}/")
    assert page.status_code == 200 and "cluster-map" in page.text


def test_token_required_when_set(tmp_path):
    service = Service(ServiceConfig(cluster="local", state_dir=tmp_path, scheduler=False, token="s3cret"))
    service.start()
    s = Served(service)
    try:
        assert httpx.get(f"{s.url}/api/jobs").status_code == 401
        assert httpx.get(f"{s.url}/api/jobs", headers={"Authorization": "Bearer nope"}).status_code == 401
        ok = httpx.get(f"{s.url}/api/jobs", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        assert httpx.get(f"{s.url}/api/health").status_code == 200  # liveness needs no token
    finally:
        s.close()
        service.stop()


def test_non_loopback_bind_always_has_a_token(tmp_path):
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")
    cfg = ensure_token(ServiceConfig(cluster="local", host="0.0.0.0", state_dir=tmp_path))
    assert cfg.token and (tmp_path / "token").read_text().strip() == cfg.token
    assert oct((tmp_path / "token").stat().st_mode & 0o777) == "0o600"
    assert (
        ensure_token(ServiceConfig(cluster="local", host="0.0.0.0", state_dir=tmp_path)).token == cfg.token
    )  # stable
    assert ensure_token(ServiceConfig(cluster="local", host="127.0.0.1", state_dir=tmp_path)).token is None


# ------------------------------------------------------------------------------------------------ CLI
runner = CliRunner()


def test_cli_submit_list_status_logs_cancel(served, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: cli-job\nmodel: gpt-tiny\nglobal_batch: 8\nseq_len: 64\nsteps: 20\nprecision: fp32\n"
    )
    url = ["--url", served.url]
    r = runner.invoke(cli_app, ["submit", str(spec), *url, "--key", "cli-1"])
    assert r.exit_code == 0, r.output
    assert "submitted: job" in r.output
    r2 = runner.invoke(cli_app, ["submit", str(spec), *url, "--key", "cli-1"])
    assert "already submitted" in r2.output
    r = runner.invoke(cli_app, ["list", *url])
    assert r.exit_code == 0 and "cli-job" in r.output and "REASON" in r.output and "Submitted" in r.output
    r = runner.invoke(cli_app, ["status", "cli-job", *url, "--json"])
    jid = json.loads(r.stdout)["id"]
    r = runner.invoke(cli_app, ["cancel", str(jid), *url])
    assert r.exit_code == 0 and "cancelled" in r.output
    r = runner.invoke(cli_app, ["logs", "-f", str(jid), *url])
    assert r.exit_code == 0 and "cancelled while pending" in r.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: gpt-tiny\nglobal_batch: 8\nsteps: 5\ngpus: 4\n")
    r = runner.invoke(cli_app, ["submit", str(bad), *url])
    assert r.exit_code == 2 and "gpus" in r.output


@pytest.mark.timeout(120)
def test_cli_dry_run_without_a_server(tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text("name: dry\nmodel: gpt-tiny\nglobal_batch: 8\nseq_len: 64\nsteps: 100\nprecision: fp32\n")
    port = free_port()  # nothing listens there
    r = runner.invoke(cli_app, ["submit", str(spec), "--dry-run", "--url", f"http://127.0.0.1:{port}"])
    assert r.exit_code == 0, r.output
    for text in (
        "chosen Cell",
        "predicted memory",
        "estimated",
        "Nothing was submitted",
        "no server reachable",
    ):
        assert text in r.output


# ------------------------------------------------------------------------------------------------ schemathesis
@pytest.mark.timeout(600)
def test_schemathesis_finds_no_server_error(served):
    """Generated requests for every operation of the OpenAPI schema — valid and invalid bodies, paths and
    queries — against the running server: never a 5xx."""
    seen = assert_no_server_errors(served.url, max_examples=15, timeout_s=120)
    assert "POST /api/jobs" in seen and "GET /api/jobs/{job}/logs" in seen and "GET /api/cluster" in seen

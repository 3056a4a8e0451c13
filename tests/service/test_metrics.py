"""``/metrics``: a real app (API-only Service on real SQLite) scraped over HTTP, parsed as Prometheus parses it."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tessera.service.config import ServiceConfig
from tessera.service.server import Service
from tessera.service.states import JobState

TINY = {"name": "m", "model": "gpt-tiny", "global_batch": 8, "seq_len": 64, "steps": 20, "precision": "fp32"}


def scrape(client: TestClient, **headers: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """{sample name: {sorted labels: value}} of one scrape."""
    r = client.get("/metrics", headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


@pytest.fixture()
def service(tmp_path):
    svc = Service(ServiceConfig(cluster="local", state_dir=tmp_path / "state", scheduler=False, round_s=30.0))
    svc.start()
    yield svc
    svc.stop()


def _advance(svc: Service, jid: int, *states: JobState, **fields) -> None:
    """Walk a job through the lifecycle as the controller does (the store enforces the transitions)."""
    for s in states[:-1]:
        svc.store.update(jid, state=s)
    svc.store.update(jid, state=states[-1], **fields)


@pytest.mark.timeout(120)
def test_metrics_after_submissions(service):
    client = TestClient(service.app())
    empty = scrape(client)
    assert empty["tessera_jobs_submitted_total"][()] == 0
    assert empty["tessera_queue_length"][()] == 0
    assert all(v == 0 for v in empty["tessera_jobs"].values())
    assert len(empty["tessera_jobs"]) == len(JobState)  # every state listed, zeros included
    assert "tessera_scheduler_last_decision_seconds" not in empty  # no round yet

    ids = []
    for i in range(4):
        r = client.post("/api/jobs", json={**TINY, "name": f"m{i}"}, headers={"Idempotency-Key": f"k{i}"})
        assert r.status_code == 201, r.text
        ids.append(r.json()["job"]["id"])
    retry = client.post("/api/jobs", json={**TINY, "name": "m0"}, headers={"Idempotency-Key": "k0"})
    assert retry.status_code == 200  # an idempotent retry is not a new submission

    now = time.time()
    run, done, _, _ = ids
    _advance(
        service, run, JobState.STARTING, JobState.RUNNING,
        allocation={"gpus": {"A100-40GB": 2}, "slots": [], "cell": "2xA100-40GB S1"},
        estimate={"iteration_time_s": 0.05}, started_at=now - 3, measured_iter_s=0.04, steps_done=7, restarts=2,
    )  # fmt: skip
    _advance(service, done, JobState.STARTING, JobState.RUNNING, JobState.SUCCEEDED, started_at=now - 100,
             rescales=1)  # fmt: skip
    service.store.update(run, submitted_at=now - 5.5)  # waited 2.5 s in the queue
    service.store.update(done, submitted_at=now - 140)  # waited 40 s
    service.controller.last_round = {"at": now, "policy": "tessera", "decided": True, "decision_s": 0.012,
                                     "changes": [{"job": run, "kind": "start", "note": ""}]}  # fmt: skip

    m = scrape(client)
    jobs = {dict(k)["state"]: v for k, v in m["tessera_jobs"].items()}
    assert jobs["PENDING"] == 2 and jobs["RUNNING"] == 1 and jobs["SUCCEEDED"] == 1 and jobs["FAILED"] == 0
    assert m["tessera_queue_length"][()] == 2
    assert 0 <= m["tessera_queue_oldest_wait_seconds"][()] < 600
    assert m["tessera_jobs_submitted_total"][()] == 4
    assert m["tessera_job_restarts_total"][()] == 2
    assert m["tessera_job_rescales_total"][()] == 1
    # GPUs: the local preset's 2 + 2, two A100-40GB held by the running job
    assert m["tessera_gpus"] == {(("gpu_type", "A100-40GB"),): 2, (("gpu_type", "V100-32GB"),): 2}
    assert m["tessera_gpus_allocated"][(("gpu_type", "A100-40GB"),)] == 2
    assert m["tessera_gpus_allocated"][(("gpu_type", "V100-32GB"),)] == 0
    # queue wait: both started jobs, one after 2.5 s, the other after 40 s
    assert m["tessera_job_queue_wait_seconds_count"][()] == 2
    le = {dict(k)["le"]: v for k, v in m["tessera_job_queue_wait_seconds_bucket"].items()}
    assert le["1.0"] == 0 and le["5.0"] == 1 and le["30.0"] == 1 and le["60.0"] == 2 and le["+Inf"] == 2
    # the scheduler's last round
    assert m["tessera_scheduler_last_decision_seconds"][()] == pytest.approx(0.012)
    assert m["tessera_scheduler_last_round_changes"][()] == 1
    assert m["tessera_scheduler_last_round_decided"][()] == 1
    assert m["tessera_scheduler_round_interval_seconds"][()] == 30.0
    # per-job throughput of the running job: 8 samples / 0.04 s
    key = (("job_id", str(run)), ("name", "m0"))
    assert m["tessera_job_samples_per_second"][key] == pytest.approx(200.0)
    assert m["tessera_job_iteration_seconds"][key] == pytest.approx(0.04)
    assert m["tessera_job_estimated_iteration_seconds"][key] == pytest.approx(0.05)
    assert m["tessera_job_steps_done"][key] == 7 and m["tessera_job_total_steps"][key] == 20
    assert len(m["tessera_job_steps_done"]) == 1  # only active jobs carry per-job series


@pytest.mark.timeout(120)
def test_metrics_need_the_token_when_the_server_has_one(tmp_path):
    svc = Service(ServiceConfig(cluster="local", state_dir=tmp_path / "s", scheduler=False, token="s3cret"))
    svc.start()
    try:
        client = TestClient(svc.app())
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert "tessera_jobs" in scrape(client, Authorization="Bearer s3cret")
    finally:
        svc.stop()


def test_two_apps_have_their_own_registries(tmp_path):
    """A per-app registry: two services in one process report their own jobs."""
    a = Service(ServiceConfig(cluster="local", state_dir=tmp_path / "a", scheduler=False))
    b = Service(ServiceConfig(cluster="local", state_dir=tmp_path / "b", scheduler=False))
    a.start()
    b.start()
    try:
        ca, cb = TestClient(a.app()), TestClient(b.app())
        assert ca.post("/api/jobs", json=TINY).status_code == 201
        assert scrape(ca)["tessera_jobs_submitted_total"][()] == 1
        assert scrape(cb)["tessera_jobs_submitted_total"][()] == 0
    finally:
        a.stop()
        b.stop()

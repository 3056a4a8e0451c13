"""The job store on a real PostgreSQL 15 (a throwaway cluster on loopback, see conftest's ``postgres``): the same
contract as on SQLite — versioned schema, submit/list/get/cancel, idempotency, state and allocation history,
exactly-once under concurrent submissions, every job back after a restart — through the real API-only server
(FastAPI on uvicorn, and ``tessera server --api-only --db URL`` as a process) wherever that is practical."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import uuid

import httpx
import pytest
from conftest import Served, assert_no_server_errors, free_port, start_server_process
from sqlalchemy import create_engine, inspect, text

from tessera.jobs import parse_job
from tessera.service.config import ServiceConfig
from tessera.service.server import Service
from tessera.service.states import JobState
from tessera.service.store import SCHEMA_VERSION, Store, StoreError

TINY = {
    "name": "tiny",
    "model": "gpt-tiny",
    "global_batch": 8,
    "seq_len": 64,
    "steps": 20,
    "precision": "fp32",
}
SPEC = parse_job({"name": "j", "model": "gpt-tiny", "global_batch": 8, "steps": 10})
PLAN = {  # the parts of a Plan the API's history reads
    "model": "gpt-tiny",
    "stages": [
        {"layer_start": 0, "layer_end": 2, "dp_degree": 2, "tp_degree": 1,
         "devices": [{"gpu_type": "A100-40GB"}, {"gpu_type": "A100-40GB"}]},
        {"layer_start": 2, "layer_end": 4, "dp_degree": 1, "tp_degree": 2,
         "devices": [{"gpu_type": "V100-32GB"}, {"gpu_type": "V100-32GB"}]},
    ],
}  # fmt: skip


@pytest.fixture
def db_url(postgres) -> str:
    """A fresh, empty database for one test."""
    return postgres.create_database(f"t_{uuid.uuid4().hex[:12]}")


@pytest.fixture(scope="module")
def served(postgres_url, tmp_path_factory):
    """The API-only service (no Ray) on the session's PostgreSQL database, on a real uvicorn on loopback."""
    service = Service(
        ServiceConfig(
            cluster="local", state_dir=tmp_path_factory.mktemp("pg-api"), db_url=postgres_url, scheduler=False
        )
    )
    service.start()
    s = Served(service)
    yield s
    s.close()
    service.stop()


@pytest.mark.timeout(60)
def test_schema_created_and_versioned_on_first_open(db_url):
    s = Store(db_url)
    try:
        assert s.engine.dialect.name == "postgresql" and s.engine.dialect.driver == "psycopg"
        assert s.schema_version() == SCHEMA_VERSION
        insp = inspect(s.engine)
        assert {"schema_meta", "jobs", "allocations", "telemetry", "logs"} <= set(insp.get_table_names())
        assert {ix["name"] for ix in insp.get_indexes("jobs")} >= {"ix_jobs_state"}
        assert any(u["column_names"] == ["submission_key"] for u in insp.get_unique_constraints("jobs"))
        _assert_64_bit(s.engine)
    finally:
        s.close()
    again = Store(db_url)  # a second open finds the schema current and changes nothing
    assert again.schema_version() == SCHEMA_VERSION
    again.close()
    eng = create_engine(db_url.replace("postgresql://", "postgresql+psycopg://"))
    with eng.begin() as conn:
        assert conn.execute(text("SELECT count(*) FROM schema_meta")).scalar_one() == 1
        conn.execute(
            text("UPDATE schema_meta SET value = :v WHERE key = 'schema_version'"),
            {"v": str(SCHEMA_VERSION + 1)},
        )
    eng.dispose()
    with pytest.raises(StoreError, match="newer than this Tessera"):
        Store(db_url)


def _assert_64_bit(engine) -> None:
    """Ids and the counters the API accepts up to 2**53 (steps) or that pass 2**31 (bytes) are 64-bit, as on
    SQLite, and so are the id sequences."""
    insp = inspect(engine)
    for table, names in (("jobs", ("id", "total_steps", "steps_done", "checkpoint_step")),
                         ("allocations", ("id", "job_id", "from_step", "to_step")),
                         ("telemetry", ("id", "job_id", "step", "peak_memory_bytes")),
                         ("logs", ("id", "job_id"))):  # fmt: skip
        cols = {c["name"]: str(c["type"]) for c in insp.get_columns(table)}
        assert all(cols[n] == "BIGINT" for n in names), (table, cols)
    with engine.connect() as conn:
        seqs = dict(
            conn.execute(text("SELECT sequence_name, data_type FROM information_schema.sequences")).all()
        )
    assert seqs == {f"{t}_id_seq": "bigint" for t in ("jobs", "allocations", "telemetry", "logs")}, seqs


@pytest.mark.timeout(60)
def test_v1_database_is_migrated_to_64_bit_counters(db_url):
    """A database made by schema 1 (32-bit INTEGER step and byte counters on PostgreSQL) is migrated on open,
    its jobs kept, and then holds a step count of 2**40 and 80 GB of peak memory."""
    eng = create_engine(db_url)
    with eng.begin() as conn:  # schema 1 as Tessera 0.1.0 created it on PostgreSQL
        conn.execute(text("CREATE TABLE schema_meta (key VARCHAR(64) PRIMARY KEY, value TEXT NOT NULL)"))
        conn.execute(text("INSERT INTO schema_meta VALUES ('schema_version', '1')"))
        conn.execute(text(
            "CREATE TABLE jobs (id SERIAL PRIMARY KEY, submission_key VARCHAR(128) NOT NULL UNIQUE, "
            "name VARCHAR(128) NOT NULL, spec_json TEXT NOT NULL, state VARCHAR(16) NOT NULL, reason TEXT, "
            "priority INTEGER NOT NULL, submitted_at FLOAT NOT NULL, started_at FLOAT, finished_at FLOAT, "
            "updated_at FLOAT NOT NULL, total_steps INTEGER NOT NULL, steps_done INTEGER NOT NULL, "
            "checkpoint_step INTEGER, first_loss FLOAT, last_loss FLOAT, attempt INTEGER NOT NULL, "
            "restarts INTEGER NOT NULL, rescales INTEGER NOT NULL, allocation_json TEXT, estimate_json TEXT, "
            "measured_iter_s FLOAT, cancel_requested BOOLEAN NOT NULL, error TEXT)"
        ))  # fmt: skip
        conn.execute(text(
            "CREATE TABLE allocations (id SERIAL PRIMARY KEY, job_id INTEGER NOT NULL REFERENCES jobs (id), "
            "attempt INTEGER NOT NULL, kind VARCHAR(16) NOT NULL, gpus_json TEXT NOT NULL, "
            "cell VARCHAR(128) NOT NULL, plan_json TEXT NOT NULL, estimate_iter_s FLOAT, measured_iter_s FLOAT, "
            "started_at FLOAT NOT NULL, ended_at FLOAT, end_reason TEXT, from_step INTEGER NOT NULL, to_step INTEGER)"
        ))  # fmt: skip
        conn.execute(text(
            "CREATE TABLE telemetry (id SERIAL PRIMARY KEY, job_id INTEGER NOT NULL REFERENCES jobs (id), "
            "attempt INTEGER NOT NULL, step INTEGER NOT NULL, ts FLOAT NOT NULL, loss FLOAT NOT NULL, "
            "iter_time_s FLOAT NOT NULL, samples_per_s FLOAT NOT NULL, peak_memory_bytes INTEGER NOT NULL, "
            "record_json TEXT NOT NULL)"
        ))  # fmt: skip
        conn.execute(text(
            "CREATE TABLE logs (id SERIAL PRIMARY KEY, job_id INTEGER NOT NULL REFERENCES jobs (id), "
            "ts FLOAT NOT NULL, line TEXT NOT NULL)"
        ))  # fmt: skip
        conn.execute(text(
            "INSERT INTO jobs (submission_key, name, spec_json, state, priority, submitted_at, updated_at, "
            "total_steps, steps_done, attempt, restarts, rescales, cancel_requested) VALUES "
            "('old-key', 'old', :spec, 'PENDING', 0, 1.0, 1.0, 10, 0, 0, 0, 0, false)"
        ), {"spec": SPEC.model_dump_json()})  # fmt: skip
    eng.dispose()
    s = Store(db_url)
    try:
        assert s.schema_version() == SCHEMA_VERSION
        _assert_64_bit(s.engine)
        old = s.by_key("old-key")
        assert old is not None and old.name == "old" and old.spec == SPEC
        big = parse_job({**TINY, "name": "big", "steps": 2**40})
        rec, _ = s.submit(big)
        assert s.get(rec.id).total_steps == 2**40
        s.add_steps(rec.id, 1, [{"step": 2**33, "loss": 1.0, "iter_time_s": 0.1, "samples_per_s": 80.0,
                                 "peak_memory_bytes": {"0": 80 * 10**9}}])  # fmt: skip
        assert s.get(rec.id).steps_done == 2**33 + 1
        assert s.steps(rec.id)[0]["peak_memory_bytes"] == 80 * 10**9
        assert s.logs(rec.id, after=2**62) == [] and s.get(2**40) is None
        assert s.submit(SPEC)[0].id == rec.id + 1  # the widened sequence goes on where it was
    finally:
        s.close()


@pytest.mark.timeout(60)
def test_url_schemes_and_missing_driver(db_url, monkeypatch):
    """``postgresql://`` (what users write, what ``--db`` documents) uses psycopg 3 whichever SQLAlchemy 2.x is
    installed; an explicit driver is kept; a driver that is not installed is one clear StoreError."""
    for url in (db_url, db_url.replace("postgresql://", "postgresql+psycopg://")):
        s = Store(url)
        assert s.engine.dialect.driver == "psycopg" and s.schema_version() == SCHEMA_VERSION
        s.close()
    explicit = db_url.replace("postgresql://", "postgresql+nosuchdriver://")
    with pytest.raises(StoreError, match="--db"):
        Store(explicit)
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if psycopg were not installed
    with pytest.raises(
        StoreError, match=r"driver is not installed \(psycopg\).*pip install 'psycopg\[binary\]'"
    ) as e:
        Store(db_url)
    assert "postgres@" not in str(e.value)  # no user name (or password) in the message


@pytest.mark.timeout(60)
def test_api_submit_get_list_cancel_idempotent(served):
    url = served.url
    r = httpx.post(
        f"{url}/api/jobs", json={**TINY, "name": "pg-life"}, headers={"Idempotency-Key": "pg-life-1"}
    )
    assert r.status_code == 201, r.text
    jid = r.json()["job"]["id"]
    again = httpx.post(
        f"{url}/api/jobs", json={**TINY, "name": "pg-life"}, headers={"Idempotency-Key": "pg-life-1"}
    )
    assert again.status_code == 200 and again.json()["job"]["id"] == jid and again.json()["created"] is False
    job = httpx.get(f"{url}/api/jobs/{jid}").json()
    assert job["state"] == "PENDING" and job["reason"] == "Submitted" and job["history"] == []
    assert job["spec"]["model"] == "gpt-tiny" and job["total_steps"] == 20
    assert httpx.get(f"{url}/api/jobs/pg-life").json()["id"] == jid
    listed = httpx.get(f"{url}/api/jobs", params={"state": "PENDING", "limit": 5000}).json()
    assert jid in [j["id"] for j in listed["jobs"]] and listed["counts"]["PENDING"] >= 1
    assert httpx.post(f"{url}/api/jobs/{jid}/cancel").json()["state"] == "CANCELLED"
    assert httpx.post(f"{url}/api/jobs/{jid}/cancel").json()["state"] == "CANCELLED"  # idempotent
    logs = httpx.get(f"{url}/api/jobs/{jid}/logs").json()
    assert logs["done"] and [x["line"] for x in logs["lines"]] == [
        "submitted pg-life (gpt-tiny)",
        "cancelled while pending",
    ]
    assert httpx.get(f"{url}/api/jobs/{jid}/logs", params={"after": logs["next"]}).json()["lines"] == []
    assert httpx.get(f"{url}/api/jobs/{jid}/logs", params={"after": 2**62}).json()["lines"] == []
    # ids beyond PostgreSQL's 32-bit SERIAL, beyond 64 bits, a Unicode digit, no such name: 404, never a 500
    for ref in ("999999", str(2**31), str(2**63 - 1), "9" * 30, "%C2%B9", "no-such-job"):
        assert httpx.get(f"{url}/api/jobs/{ref}").status_code == 404, ref
        assert httpx.post(f"{url}/api/jobs/{ref}/cancel").status_code == 404, ref
    huge = httpx.post(  # the API's maximum: ~10^8 days of work, so it must ask to wait for a larger cluster
        f"{url}/api/jobs", json={**TINY, "name": "pg-huge", "steps": 2**53, "wait_for_resources": True}
    )
    assert (
        httpx.post(f"{url}/api/jobs", json={**TINY, "name": "pg-huge", "steps": 2**53}).status_code == 422
    )  # refused as infeasible without it
    assert huge.status_code == 201, huge.text
    assert httpx.get(f"{url}/api/jobs/{huge.json()['job']['id']}").json()["total_steps"] == 2**53


@pytest.mark.timeout(60)
def test_state_transitions_and_rescale_history_persist(db_url, tmp_path):
    """What the controller writes over a job's life — start, steps, a resize, success — read back through a
    new engine and through the API of a new API-only service."""
    s = Store(db_url)
    rec, created = s.submit(SPEC, "life")
    assert created and rec.state == JobState.PENDING
    gpus_a = [{"node": "n0", "gpu_type": "A100-40GB", "index": i} for i in range(2)]
    alloc = {"gpus": {"A100-40GB": 2}, "cell": "2xA100-40GB", "estimate_iter_s": 0.2}
    s.update(rec.id, state=JobState.STARTING, reason=None, attempt=1, allocation=alloc, started_at=100.0,
             estimate={"cell": "2xA100-40GB", "iteration_time_s": 0.2}, log="start: attempt 1")  # fmt: skip
    s.open_allocation(rec.id, 1, "start", gpus_a, "2xA100-40GB", json_dumps(PLAN), 0.2, 0)
    s.update(rec.id, state=JobState.RUNNING)
    s.add_steps(rec.id, 1, [{"step": i, "loss": 4.0 - i / 10, "iter_time_s": 0.25, "samples_per_s": 32.0,
                             "peak_memory_bytes": {"0": 38 * 2**30, "1": 39 * 2**30}} for i in range(5)],
                log_every=5)  # fmt: skip
    s.update(rec.id, checkpoint_step=4, measured_iter_s=0.25)
    s.update(rec.id, state=JobState.RESIZING, log="resize: checkpointing to relaunch on 2xV100-32GB")
    s.close_allocation(rec.id, "resize", 5, 0.25)
    alloc_b = {"gpus": {"V100-32GB": 2}, "cell": "2xV100-32GB", "estimate_iter_s": 0.4}
    s.update(rec.id, state=JobState.STARTING, attempt=2, rescales=1, allocation=alloc_b)
    s.open_allocation(rec.id, 2, "resize", gpus_a, "2xV100-32GB", json_dumps(PLAN), 0.4, 5)
    s.add_steps(rec.id, 2, [{"step": i, "loss": 3.0, "iter_time_s": 0.4, "samples_per_s": 20.0,
                             "peak_memory_bytes": {"0": 30 * 2**30}} for i in range(5, 10)])  # fmt: skip
    s.close_allocation(rec.id, "finished", 10, 0.4)
    s.update(rec.id, state=JobState.SUCCEEDED, finished_at=200.0, log="succeeded")
    other, _ = s.submit(SPEC)
    s.update(other.id, state=JobState.STARTING, attempt=1)  # the lifecycle's order (states.TRANSITIONS)
    s.update(other.id, state=JobState.RUNNING)
    assert s.request_cancel(other.id).cancel_requested  # a running job: marked, not cancelled yet
    before = {j.id: j for j in s.list_jobs()}
    s.close()

    s2 = Store(db_url)  # a new engine: everything comes back from the server
    try:
        assert {j.id: j for j in s2.list_jobs()} == before
        job = s2.get(rec.id)
        assert job.state == JobState.SUCCEEDED and job.steps_done == 10 and job.checkpoint_step == 4
        assert job.first_loss == 4.0 and job.last_loss == 3.0 and job.rescales == 1 and job.attempt == 2
        assert job.allocation == alloc_b and job.estimate["cell"] == "2xA100-40GB"
        hist = s2.allocations(rec.id)
        assert [(a["kind"], a["from_step"], a["to_step"], a["end_reason"]) for a in hist] == [
            ("start", 0, 5, "resize"),
            ("resize", 5, 10, "finished"),
        ]
        assert hist[0]["gpus"] == gpus_a and hist[0]["plan"] == PLAN
        steps = s2.steps(rec.id)
        assert [x["step"] for x in steps] == list(range(10)) and steps[0]["peak_memory_bytes"] == 39 * 2**30
        assert len(s2.step_records(rec.id, 1)) == 5
        assert s2.get(other.id).state == JobState.RUNNING and s2.get(other.id).cancel_requested
        assert s2.count() == {"SUCCEEDED": 1, "RUNNING": 1}
    finally:
        s2.close()

    service = Service(ServiceConfig(cluster="local", state_dir=tmp_path, db_url=db_url, scheduler=False))
    service.start()
    served = Served(service)
    try:
        out = httpx.get(f"{served.url}/api/jobs/{rec.id}").json()
        assert out["state"] == "SUCCEEDED" and out["rescales"] == 1 and out["cell"] == "2xV100-32GB"
        assert [(h["kind"], h["cell"], h["from_step"], h["to_step"]) for h in out["history"]] == [
            ("start", "2xA100-40GB", 0, 5),
            ("resize", "2xV100-32GB", 5, 10),
        ]
        assert out["history"][0]["stages"][1] == {
            "layers": [2, 4],
            "dp": 1,
            "tp": 2,
            "gpu_types": ["V100-32GB"],
        }
        lines = [x["line"] for x in httpx.get(f"{served.url}/api/jobs/{rec.id}/logs").json()["lines"]]
        assert lines[0].startswith("submitted") and "step 5 loss" in lines[2] and lines[-1] == "succeeded"
        tel = httpx.get(f"{served.url}/api/jobs/{rec.id}/telemetry").json()
        assert len(tel["steps"]) == 10 and len(tel["allocations"]) == 2
        timeline = httpx.get(f"{served.url}/api/timeline").json()
        assert {a["job_name"] for a in timeline["allocations"]} == {"j"}
    finally:
        served.close()
        service.stop()


def json_dumps(x) -> str:
    import json

    return json.dumps(x)


@pytest.mark.timeout(60)
def test_concurrent_store_writers_same_keys_stored_exactly_once(db_url):
    """8 threads submit the same 50 keys each (unique-key races on PostgreSQL's row locks, no process lock):
    50 jobs, every key once, every caller answered with the stored job."""
    s = Store(db_url)
    results: list[tuple[str, int, bool]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for i in range(50):
                rec, created = s.submit(SPEC, f"key-{i}")
                with lock:
                    results.append((rec.submission_key, rec.id, created))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=50)
    try:
        assert not errors, errors
        assert len(results) == 400
        stored = s.list_jobs()
        assert len(stored) == 50 and len({j.submission_key for j in stored}) == 50
        assert sum(created for _, _, created in results) == 50
        by_key = {j.submission_key: j.id for j in stored}
        assert all(by_key[k] == jid for k, jid, _ in results)
    finally:
        s.close()


@pytest.mark.timeout(90)
def test_concurrent_api_submissions_stored_exactly_once(served):
    """600 submissions at once through the API, plus 150 retries of the first 150 (same Idempotency-Key)
    racing them: exactly 600 jobs, each key once, every retry answered with the job stored the first time."""
    n, retries = 600, 150

    async def run():
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        async with httpx.AsyncClient(base_url=served.url, limits=limits, timeout=60) as c:

            async def submit(i: int):
                for attempt in range(4):  # a dropped connection is retried with the same key
                    try:
                        r = await c.post("/api/jobs", json={**TINY, "name": f"pgburst-{i}"},
                                         headers={"Idempotency-Key": f"pgburst-{i}"})  # fmt: skip
                        return i, r.status_code, r.json()
                    except httpx.TransportError:
                        if attempt == 3:
                            raise
                        await asyncio.sleep(0.5)

            return await asyncio.gather(*[submit(i) for i in list(range(n)) + list(range(retries))])

    out = asyncio.run(run())
    assert all(code in (200, 201) for _, code, _ in out), {code for _, code, _ in out}
    assert sum(code == 200 for _, code, _ in out) >= retries
    ids: dict[int, set[int]] = {}
    for i, _, body in out:
        ids.setdefault(i, set()).add(body["job"]["id"])
    assert all(len(v) == 1 for v in ids.values())
    stored = [j for j in served.service.store.list_jobs() if j.name.startswith("pgburst-")]
    assert len(stored) == n
    assert sorted(j.submission_key for j in stored) == sorted(f"pgburst-{i}" for i in range(n))
    assert {next(iter(v)) for v in ids.values()} == {j.id for j in stored}


def _start_server(state, port: int, db_url: str) -> subprocess.Popen:
    return start_server_process(["--api-only", "--db", db_url], state, port, timeout_s=45, interval_s=0.2)


@pytest.mark.timeout(120)
def test_server_process_killed_and_restarted_recovers_every_job(db_url, tmp_path):
    """``tessera server --api-only --db postgresql://…`` as its own process: jobs submitted, one cancelled, the
    process SIGKILLed, a new one started on the same database: every job back, exactly once, unchanged."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []
    try:
        procs.append(_start_server(tmp_path, port, db_url))
        health = httpx.get(f"{url}/api/health").json()
        assert health["ok"] and health["scheduler"] is False
        with httpx.Client(base_url=url, timeout=30) as c:
            ids = [c.post("/api/jobs", json={**TINY, "name": f"kept-{i}"}, headers={"Idempotency-Key": f"kept-{i}"})
                   .json()["job"]["id"] for i in range(40)]  # fmt: skip
            assert c.post(f"/api/jobs/{ids[3]}/cancel").json()["state"] == "CANCELLED"
            before = {j["id"]: j for j in c.get("/api/jobs", params={"limit": 5000}).json()["jobs"]}
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(timeout=30)

        procs.append(_start_server(tmp_path, port, db_url))  # a new process: a new engine, a new pool
        with httpx.Client(base_url=url, timeout=30) as c:
            after = {j["id"]: j for j in c.get("/api/jobs", params={"limit": 5000}).json()["jobs"]}
            assert after == before and sorted(after) == sorted(ids)
            assert after[ids[3]]["state"] == "CANCELLED" and after[ids[0]]["state"] == "PENDING"
            retry = c.post(
                "/api/jobs", json={**TINY, "name": "kept-7"}, headers={"Idempotency-Key": "kept-7"}
            )
            assert retry.status_code == 200 and retry.json()["job"]["id"] == ids[7]  # the key survived too
        procs[1].send_signal(signal.SIGTERM)
        assert procs[1].wait(timeout=30) == 0
    finally:
        for p in procs:  # only the process groups this test started
            if p.poll() is None:
                p.kill()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)


@pytest.mark.timeout(120)
def test_schemathesis_finds_no_server_error_on_postgresql(served):
    """Generated requests for every operation (valid and invalid bodies, paths, queries: ids and cursors far
    beyond 32 bits among them) against the API on PostgreSQL: never a 5xx."""
    # /api/jobs/dry-run plans without touching the store (covered on SQLite)
    seen = assert_no_server_errors(served.url, max_examples=10, timeout_s=60, skip=("/api/jobs/dry-run",))
    assert "POST /api/jobs" in seen and "GET /api/jobs/{job}/logs" in seen

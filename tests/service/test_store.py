"""The job store on real SQLite: WAL, versioned schema, exactly-once submission under concurrent writers."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from tessera.jobs import parse_job
from tessera.service.states import JobState
from tessera.service.store import SCHEMA_VERSION, Store, StoreError, sqlite_url

SPEC = parse_job({"name": "j", "model": "gpt-tiny", "global_batch": 8, "steps": 10})


def test_wal_and_schema_version(tmp_path):
    db = tmp_path / "t.db"
    s = Store(sqlite_url(db))
    assert s.schema_version() == SCHEMA_VERSION
    s.close()
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    con.execute("UPDATE schema_meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="newer than this Tessera"):
        Store(sqlite_url(db))


def test_reopen_keeps_jobs(tmp_path):
    url = sqlite_url(tmp_path / "t.db")
    s = Store(url)
    rec, created = s.submit(SPEC, "k1")
    s.close()
    s2 = Store(url)
    assert created and s2.get(rec.id).name == "j" and s2.get(rec.id).state == JobState.PENDING
    assert s2.get(rec.id).spec == SPEC


def test_concurrent_submissions_stored_exactly_once(tmp_path):
    """8 threads submit the same 50 keys each: 50 jobs, every key once, ids unique."""
    s = Store(sqlite_url(tmp_path / "t.db"))
    results: list[tuple[int, bool]] = []
    lock = threading.Lock()

    def worker():
        for i in range(50):
            rec, created = s.submit(SPEC, f"key-{i}")
            with lock:
                results.append((rec.id, created))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    jobs = s.list_jobs()
    assert len(jobs) == 50
    assert len({j.submission_key for j in jobs}) == 50
    assert sum(created for _, created in results) == 50
    assert {jid for jid, _ in results} == {j.id for j in jobs}


def test_cancel_pending_logs_and_steps(tmp_path):
    s = Store(sqlite_url(tmp_path / "t.db"))
    rec, _ = s.submit(SPEC)
    s.add_steps(rec.id, 1, [{"step": 0, "loss": 4.0, "iter_time_s": 0.1, "samples_per_s": 80.0,
                             "peak_memory_bytes": {"0": 5}}], log_every=1)  # fmt: skip
    assert s.get(rec.id).steps_done == 1 and s.get(rec.id).first_loss == 4.0
    out = s.request_cancel(rec.id)
    assert out.state == JobState.CANCELLED and out.finished_at is not None
    lines = s.logs(rec.id)
    assert [line for _, _, line in lines][-1] == "cancelled while pending"
    assert s.logs(rec.id, after=lines[-2][0]) == lines[-1:]
    assert s.request_cancel(10**6) is None


def test_schema_compiles_for_postgresql():
    """The SQL is portable: every table and index compiles for PostgreSQL (no server needed for that)."""
    from sqlalchemy.dialects import postgresql
    from sqlalchemy.engine import make_url
    from sqlalchemy.schema import CreateIndex, CreateTable

    from tessera.service import store

    dialect = postgresql.dialect()
    for table in store.metadata.sorted_tables:
        ddl = str(CreateTable(table).compile(dialect=dialect))
        assert "CREATE TABLE" in ddl and "AUTOINCREMENT" not in ddl
        for index in table.indexes:
            assert "CREATE INDEX" in str(CreateIndex(index).compile(dialect=dialect))
    assert "SERIAL" in str(CreateTable(store.jobs).compile(dialect=dialect))
    assert make_url("postgresql://u@db/tessera").get_dialect().name == "postgresql"


def test_bad_database_url_is_one_clear_error():
    with pytest.raises(StoreError, match="--db"):
        Store("not a url")


def _step(step: int, loss: float) -> dict:
    return {
        "step": step,
        "loss": loss,
        "iter_time_s": 0.1,
        "samples_per_s": 80.0,
        "peak_memory_bytes": {"0": 5},
    }


def test_nonfinite_loss_is_stored_json_safe(tmp_path):
    """A NaN or infinite loss used to fail the insert (NOT NULL): it is stored, and read back JSON-safe."""
    import json

    s = Store(sqlite_url(tmp_path / "t.db"))
    rec, _ = s.submit(SPEC)
    s.add_steps(rec.id, 0, [_step(0, 4.0), _step(1, float("nan")), _step(2, float("inf"))], log_every=1)
    s.add_steps(rec.id, 0, [_step(3, float("-inf"))])
    rows = s.steps(rec.id)
    assert [(r["step"], r["loss"], r["loss_nonfinite"]) for r in rows] == [
        (0, 4.0, None), (1, None, "NaN"), (2, None, "inf"), (3, None, "-inf"),
    ]  # fmt: skip
    json.dumps(rows, allow_nan=False)  # what the API serializes: no NaN token anywhere
    job = s.get(rec.id)
    assert job.steps_done == 4 and job.first_loss == 4.0 and job.last_loss is None
    json.dumps(job.to_dict(), allow_nan=False)
    assert "loss nan" in s.logs(rec.id)[2][2]
    assert (
        json.loads(s.step_records(rec.id, 0)[1])["loss"] != json.loads(s.step_records(rec.id, 0)[1])["loss"]
    )


def test_relaunch_supersedes_redone_steps(tmp_path):
    """Attempt 1 ran steps 0-5, checkpointed at 3; attempt 2 resumes from 3: the counting curve is steps 0-2 of
    attempt 1 then 3.. of attempt 2 (it never backtracks), and the abandoned steps stay stored, marked."""
    s = Store(sqlite_url(tmp_path / "t.db"))
    rec, _ = s.submit(SPEC)
    s.update(rec.id, state=JobState.STARTING, attempt=1)
    s.open_allocation(rec.id, 1, "start", [], "c", "{}", 0.1, 0)
    s.add_steps(rec.id, 1, [_step(i, 5.0 - i * 0.1) for i in range(6)])
    s.update(rec.id, state=JobState.RECOVERING, attempt=2, steps_done=3)
    s.open_allocation(rec.id, 2, "recover", [], "c", "{}", 0.1, 3, note="worker failure")
    s.add_steps(rec.id, 2, [_step(3, 4.65), _step(4, 4.55)])
    s.add_steps(rec.id, 1, [_step(6, 4.4)])  # a late record of the abandoned attempt: stored, never counted
    counted = s.steps(rec.id)
    assert [(r["step"], r["attempt"]) for r in counted] == [(0, 1), (1, 1), (2, 1), (3, 2), (4, 2)]
    every = s.steps(rec.id, include_superseded=True)
    assert sorted((r["step"], r["attempt"]) for r in every if r["superseded"]) == [
        (3, 1),
        (4, 1),
        (5, 1),
        (6, 1),
    ]
    job = s.get(rec.id)
    assert job.steps_done == 5 and job.last_loss == 4.55
    assert s.allocations(rec.id)[-1]["note"] == "worker failure"


def test_illegal_transition_is_refused(tmp_path):
    from tessera.service.states import IllegalTransition

    s = Store(sqlite_url(tmp_path / "t.db"))
    rec, _ = s.submit(SPEC)
    with pytest.raises(IllegalTransition, match=rf"job {rec.id}: state PENDING → RUNNING is not allowed"):
        s.update(rec.id, state=JobState.RUNNING)
    s.update(rec.id, state=JobState.STARTING)
    s.update(rec.id, state=JobState.FAILED, reason="loss diverged (NaN) at step 2")
    with pytest.raises(IllegalTransition, match="terminal"):
        s.update(rec.id, state=JobState.RECOVERING)
    assert s.get(rec.id).state == JobState.FAILED  # the refused change left nothing behind
    s.update(rec.id, error="x")  # fields without a state change are fine on a finished job


def test_v2_database_migrates_to_v4_keeping_telemetry(tmp_path):
    """A v2 SQLite file (telemetry.loss NOT NULL, no superseded column, no measured_step_s) opens as v4 with its
    rows intact."""
    db = tmp_path / "t.db"
    con = sqlite3.connect(db)
    con.executescript(
        """
        CREATE TABLE schema_meta (key VARCHAR(64) PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO schema_meta VALUES ('schema_version', '2');
        CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, submission_key VARCHAR(128) NOT NULL UNIQUE,
          name VARCHAR(128) NOT NULL, spec_json TEXT NOT NULL, state VARCHAR(16) NOT NULL, reason TEXT,
          priority INTEGER NOT NULL, submitted_at FLOAT NOT NULL, started_at FLOAT, finished_at FLOAT,
          updated_at FLOAT NOT NULL, total_steps BIGINT NOT NULL, steps_done BIGINT NOT NULL, checkpoint_step BIGINT,
          first_loss FLOAT, last_loss FLOAT, attempt INTEGER NOT NULL, restarts INTEGER NOT NULL,
          rescales INTEGER NOT NULL, allocation_json TEXT, estimate_json TEXT, measured_iter_s FLOAT,
          cancel_requested BOOLEAN NOT NULL, error TEXT);
        CREATE TABLE allocations (id INTEGER PRIMARY KEY AUTOINCREMENT, job_id BIGINT NOT NULL REFERENCES jobs(id),
          attempt INTEGER NOT NULL, kind VARCHAR(16) NOT NULL, gpus_json TEXT NOT NULL, cell VARCHAR(128) NOT NULL,
          plan_json TEXT NOT NULL, estimate_iter_s FLOAT, measured_iter_s FLOAT, started_at FLOAT NOT NULL,
          ended_at FLOAT, end_reason TEXT, from_step BIGINT NOT NULL, to_step BIGINT);
        CREATE TABLE telemetry (id INTEGER PRIMARY KEY AUTOINCREMENT, job_id BIGINT NOT NULL REFERENCES jobs(id),
          attempt INTEGER NOT NULL, step BIGINT NOT NULL, ts FLOAT NOT NULL, loss FLOAT NOT NULL,
          iter_time_s FLOAT NOT NULL, samples_per_s FLOAT NOT NULL, peak_memory_bytes BIGINT NOT NULL,
          record_json TEXT NOT NULL);
        CREATE INDEX ix_tel_job_step ON telemetry (job_id, step);
        CREATE TABLE logs (id INTEGER PRIMARY KEY AUTOINCREMENT, job_id BIGINT NOT NULL REFERENCES jobs(id),
          ts FLOAT NOT NULL, line TEXT NOT NULL);
        INSERT INTO jobs VALUES (1, 'k', 'j', '{}', 'RUNNING', NULL, 0, 1.0, 1.0, NULL, 1.0, 10, 1, NULL, 4.0,
          4.0, 1, 0, 0, NULL, NULL, NULL, 0, NULL);
        INSERT INTO telemetry VALUES (7, 1, 1, 0, 1.0, 4.0, 0.1, 80.0, 5, '{}');
        """
    )
    con.commit()
    con.close()
    s = Store(sqlite_url(db))
    assert s.schema_version() == SCHEMA_VERSION == 4
    assert [(r["step"], r["loss"], r["superseded"]) for r in s.steps(1)] == [(0, 4.0, False)]
    s.add_steps(1, 1, [_step(1, float("nan"))])
    assert s.steps(1)[-1]["loss_nonfinite"] == "NaN"
    assert s.allocations(1) == []
    assert s.get(1).measured_step_s is None
    s.update(1, measured_iter_s=0.1, measured_step_s=0.12)  # the v4 columns exist
    s.open_allocation(1, 2, "start", [], "1xA S1", "{}", 0.1, 1)
    s.close_allocation(1, "finished", 10, measured_iter_s=0.1, measured_step_s=0.12)
    assert s.get(1).measured_step_s == 0.12 and s.allocations(1)[0]["measured_step_s"] == 0.12


def test_every_gang_end_maps_to_one_stop_reason():
    """The controller's lifecycle: what the ranks reported outranks why the gang was asked to stop; a cancel
    outranks a stop; an end nobody asked for is a failure (relaunched), a diverged loss never is."""
    from tessera.service.controller import _stop_reason
    from tessera.service.states import StopReason as S

    assert _stop_reason("finished", S.RESIZE, True) == S.COMPLETED
    assert _stop_reason("diverged", S.PREEMPTED, True) == S.DIVERGED and not S.DIVERGED.relaunches
    assert _stop_reason("stopped", S.RESIZE, True) == S.CANCELLED
    assert _stop_reason("killed", None, True) == S.CANCELLED
    assert _stop_reason("stopped", S.MIGRATE, False) == S.MIGRATE and S.MIGRATE.relaunches
    assert _stop_reason("killed", S.NODE_LOST, False) == S.NODE_LOST
    assert _stop_reason("stopped", None, False) == S.PREEMPTED
    assert _stop_reason("killed", None, False) == S.FAILED and S.FAILED.relaunches
    assert _stop_reason("failed", S.RESIZE, False) == S.FAILED

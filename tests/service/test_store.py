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

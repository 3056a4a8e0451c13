"""The job store: every job, its state and reason, allocations (the rescale history), telemetry and logs.

SQLAlchemy Core over SQLite by default (WAL, ``synchronous=NORMAL``, 5 s busy timeout, ``BEGIN IMMEDIATE`` for
writes so two writers never deadlock upgrading a read lock) or PostgreSQL given a ``postgresql://`` URL (driven
by psycopg 3 whichever SQLAlchemy 2.x is installed; ``postgresql+DRIVER://`` picks another driver). The SQL is
portable (no SQLite-only upserts); read-modify-write transactions lock their row (``SELECT … FOR UPDATE`` on
PostgreSQL, whose writers run concurrently; SQLite's ``BEGIN IMMEDIATE`` already serializes them). Ids and the
counters that can pass 2**31 (steps: the API takes up to 2**53; memory bytes) are 64-bit on both: SQLite's
INTEGER always was, on PostgreSQL they are BIGINT since schema 2. The schema is versioned in ``schema_meta``:
an older database is migrated forward on open, a newer one is refused with a clear message, never silently
misread.

Telemetry is exact in the record: a non-finite loss (a diverging job) is stored as NULL with its kind in
``loss_nonfinite`` ("NaN", "inf", "-inf"), so reads are JSON-safe and nothing is lost; a relaunch from a
checkpoint marks the steps its predecessors ran past that checkpoint ``superseded`` (they were redone), and
:meth:`Store.steps` returns by default only the steps that count — one per step, the latest attempt's — so
loss curves never backtrack.

Exactly-once submission: every job row carries a unique ``submission_key`` (the client's ``Idempotency-Key``
or a fresh UUID); a retried submission hits the unique index and gets the job stored the first time.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
    func,
    insert,
    inspect,
    select,
    update,
)
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import IntegrityError
from sqlalchemy.pool import QueuePool

from tessera.jobs import JobSpec, parse_job
from tessera.service.states import TERMINAL, JobState, Reason, check_transition

SCHEMA_VERSION = 4

# Row ids: 64-bit everywhere (BIGSERIAL on PostgreSQL; on SQLite only INTEGER PRIMARY KEY is the 64-bit rowid).
ID = BigInteger().with_variant(Integer, "sqlite")

metadata = MetaData()

schema_meta = Table(
    "schema_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

jobs = Table(
    "jobs",
    metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("submission_key", String(128), nullable=False, unique=True),
    Column("name", String(128), nullable=False),
    Column("spec_json", Text, nullable=False),
    Column("state", String(16), nullable=False),
    Column("reason", Text, nullable=True),
    Column("priority", Integer, nullable=False, default=0),
    Column("submitted_at", Float, nullable=False),
    Column("started_at", Float, nullable=True),
    Column("finished_at", Float, nullable=True),
    Column("updated_at", Float, nullable=False),
    Column("total_steps", BigInteger, nullable=False),
    Column("steps_done", BigInteger, nullable=False, default=0),
    Column("checkpoint_step", BigInteger, nullable=True),
    Column("first_loss", Float, nullable=True),
    Column("last_loss", Float, nullable=True),
    Column("attempt", Integer, nullable=False, default=0),  # launches so far (any cause)
    Column("restarts", Integer, nullable=False, default=0),  # relaunches after failures
    Column("rescales", Integer, nullable=False, default=0),  # resizes + migrations
    Column("allocation_json", Text, nullable=True),  # the current allocation: GPUs, Cell, Plan, estimate
    Column(
        "estimate_json", Text, nullable=True
    ),  # the first schedule's estimate (what the user was promised)
    Column("measured_iter_s", Float, nullable=True),  # median of the current allocation's steps
    Column("measured_step_s", Float, nullable=True),  # median loop iteration, checkpoints left out (v4)
    Column("cancel_requested", Boolean, nullable=False, default=False),
    Column("error", Text, nullable=True),
)
Index("ix_jobs_state", jobs.c.state)

allocations = Table(
    "allocations",
    metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("job_id", BigInteger, ForeignKey("jobs.id"), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("kind", String(16), nullable=False),  # start | resize | migrate | recover | restart
    Column("gpus_json", Text, nullable=False),
    Column("cell", String(128), nullable=False),
    Column("plan_json", Text, nullable=False),
    Column("estimate_iter_s", Float, nullable=True),
    Column("measured_iter_s", Float, nullable=True),
    Column("measured_step_s", Float, nullable=True),  # v4
    Column("started_at", Float, nullable=False),
    Column("ended_at", Float, nullable=True),
    Column("end_reason", Text, nullable=True),
    Column("from_step", BigInteger, nullable=False),
    Column("to_step", BigInteger, nullable=True),
    Column("note", Text, nullable=True),  # why it was opened: the scheduler's reason with its figures (v3)
)
Index("ix_alloc_job", allocations.c.job_id)

telemetry = Table(
    "telemetry",
    metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("job_id", BigInteger, ForeignKey("jobs.id"), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("step", BigInteger, nullable=False),
    Column("ts", Float, nullable=False),
    Column("loss", Float, nullable=True),  # NULL: not a finite number (see loss_nonfinite) — v3
    Column("loss_nonfinite", String(8), nullable=True),  # "NaN" | "inf" | "-inf" when loss is NULL (v3)
    Column("iter_time_s", Float, nullable=False),
    Column("samples_per_s", Float, nullable=False),
    Column("peak_memory_bytes", BigInteger, nullable=False),
    Column("record_json", Text, nullable=False),  # the runtime's StepRecord, for calibration
    # a later attempt resumed from a checkpoint before this step and ran it again: this row does not count (v3)
    Column("superseded", Boolean, nullable=False, default=False),
)
Index("ix_tel_job_step", telemetry.c.job_id, telemetry.c.step)

logs = Table(
    "logs",
    metadata,
    Column("id", ID, primary_key=True, autoincrement=True),
    Column("job_id", BigInteger, ForeignKey("jobs.id"), nullable=False),
    Column("ts", Float, nullable=False),
    Column("line", Text, nullable=False),
)
Index("ix_logs_job", logs.c.job_id, logs.c.id)


class StoreError(ValueError):
    """The store cannot be used as asked (a bad --db URL, a missing driver, a newer schema): one clear line."""


@dataclass(frozen=True)
class JobRecord:
    """One job as stored (immutable snapshot)."""

    id: int
    submission_key: str
    name: str
    spec_json: str
    state: JobState
    reason: str | None
    priority: int
    submitted_at: float
    started_at: float | None
    finished_at: float | None
    updated_at: float
    total_steps: int
    steps_done: int
    checkpoint_step: int | None
    first_loss: float | None
    last_loss: float | None
    attempt: int
    restarts: int
    rescales: int
    allocation: dict[str, Any] | None
    estimate: dict[str, Any] | None
    measured_iter_s: float | None
    cancel_requested: bool
    error: str | None
    # the whole loop iteration but its checkpoint (training step plus stop flag, validation, data): the job's
    # real seconds per step of progress, what its speed is corrected by; None before three steps
    measured_step_s: float | None = None

    @property
    def spec(self) -> JobSpec:
        return parse_job(json.loads(self.spec_json), f"job {self.id}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "state": self.state.value,
            "reason": self.reason,
            "priority": self.priority,
            "submitted_at": self.submitted_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "total_steps": self.total_steps,
            "steps_done": self.steps_done,
            "checkpoint_step": self.checkpoint_step,
            "first_loss": self.first_loss,
            "last_loss": self.last_loss,
            "attempt": self.attempt,
            "restarts": self.restarts,
            "rescales": self.rescales,
            "allocation": self.allocation,
            "estimate": self.estimate,
            "measured_iter_s": self.measured_iter_s,
            "measured_step_s": self.measured_step_s,
            "cancel_requested": self.cancel_requested,
            "error": self.error,
            "spec": json.loads(self.spec_json),
        }


def _record(row: Any) -> JobRecord:
    m = row._mapping
    return JobRecord(
        id=m["id"],
        submission_key=m["submission_key"],
        name=m["name"],
        spec_json=m["spec_json"],
        state=JobState(m["state"]),
        reason=m["reason"],
        priority=m["priority"],
        submitted_at=m["submitted_at"],
        started_at=m["started_at"],
        finished_at=m["finished_at"],
        updated_at=m["updated_at"],
        total_steps=m["total_steps"],
        steps_done=m["steps_done"],
        checkpoint_step=m["checkpoint_step"],
        first_loss=m["first_loss"],
        last_loss=m["last_loss"],
        attempt=m["attempt"],
        restarts=m["restarts"],
        rescales=m["rescales"],
        allocation=json.loads(m["allocation_json"]) if m["allocation_json"] else None,
        estimate=json.loads(m["estimate_json"]) if m["estimate_json"] else None,
        measured_iter_s=m["measured_iter_s"],
        cancel_requested=bool(m["cancel_requested"]),
        error=m["error"],
        measured_step_s=m["measured_step_s"],
    )


def sqlite_url(path: str | Path) -> str:
    return f"sqlite:///{Path(path).resolve()}"


def _engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        if url in ("sqlite://", "sqlite:///:memory:"):
            raise StoreError("store: an in-memory SQLite database cannot be shared; give a file path")
        # Pooled connections: closing the last connection of a WAL database checkpoints it (slow); kept open,
        # a commit under synchronous=NORMAL costs no fsync.
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 5.0},
            poolclass=QueuePool,
            pool_size=8,
            max_overflow=56,
        )

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # we issue BEGIN ourselves (below)
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA busy_timeout=5000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            immediate = conn.get_execution_options().get("immediate", False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

        return engine
    try:
        parsed = make_url(url)
        # SQLAlchemy 2.0 maps a bare postgresql:// to psycopg2, 2.1 to psycopg (3): always the one we ship with.
        if parsed.drivername in ("postgresql", "postgres"):
            parsed = parsed.set(drivername="postgresql+psycopg")
        return create_engine(parsed, pool_pre_ping=True, pool_size=10, max_overflow=20)
    except ModuleNotFoundError as e:
        raise StoreError(
            f"--db {url.split('@')[-1]}: the database driver is not installed ({e.name}); for PostgreSQL: "
            "pip install 'psycopg[binary]'"
        ) from None
    except Exception as e:  # a malformed URL
        raise StoreError(f"--db: {e}") from None


class Store:
    """Thread-safe: every method opens its own short transaction."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = _engine(url)
        # SQLite has one writer at a time: threads of this process queue here instead of in SQLite's busy
        # handler (which sleeps in growing steps); other processes still wait on busy_timeout.
        self._write_lock = threading.Lock() if url.startswith("sqlite") else None
        self._migrate()

    # ------------------------------------------------------------------ plumbing
    @contextmanager
    def _write(self) -> Iterator[Connection]:
        with (
            self._write_lock or contextlib.nullcontext(),
            self.engine.connect().execution_options(immediate=True) as conn,
            conn.begin(),
        ):
            yield conn

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self.engine.connect() as conn, conn.begin():
            yield conn

    def _migrate(self) -> None:
        with self._write() as conn:
            metadata.create_all(conn, tables=[schema_meta])
            row = conn.execute(
                select(schema_meta.c.value).where(schema_meta.c.key == "schema_version")
            ).first()
            version = int(row[0]) if row else 0
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"store {self.url}: schema version {version} is newer than this Tessera's "
                    f"({SCHEMA_VERSION}); upgrade Tessera or use another database"
                )
            for v in range(version + 1, SCHEMA_VERSION + 1):
                MIGRATIONS[v](conn)
            if version == 0:
                conn.execute(insert(schema_meta).values(key="schema_version", value=str(SCHEMA_VERSION)))
            elif version < SCHEMA_VERSION:
                conn.execute(
                    update(schema_meta)
                    .where(schema_meta.c.key == "schema_version")
                    .values(value=str(SCHEMA_VERSION))
                )

    def schema_version(self) -> int:
        with self._read() as conn:
            return int(
                conn.execute(
                    select(schema_meta.c.value).where(schema_meta.c.key == "schema_version")
                ).scalar_one()
            )

    def close(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------------ jobs
    def submit(
        self, spec: JobSpec, key: str | None = None, *, now: float | None = None
    ) -> tuple[JobRecord, bool]:
        """Store a new PENDING job; (record, created). A ``key`` seen before returns the job stored with it."""
        key = key or uuid.uuid4().hex
        now = time.time() if now is None else now
        values = {
            "submission_key": key,
            "name": spec.name,
            "spec_json": json.dumps(spec.model_dump(mode="json")),
            "state": JobState.PENDING.value,
            "reason": Reason.NEW,
            "priority": spec.priority,
            "submitted_at": now,
            "updated_at": now,
            "total_steps": spec.total_steps,
            "steps_done": 0,
            "attempt": 0,
            "restarts": 0,
            "rescales": 0,
            "cancel_requested": False,
        }
        try:
            with self._write() as conn:
                job_id = conn.execute(insert(jobs).values(**values)).inserted_primary_key[0]
                conn.execute(
                    insert(logs).values(job_id=job_id, ts=now, line=f"submitted {spec.name} ({spec.model})")
                )
        except IntegrityError:
            existing = self.by_key(key)
            if existing is None:  # pragma: no cover - a constraint other than the key failed
                raise
            return existing, False
        rec = self.get(int(job_id))
        assert rec is not None
        return rec, True

    def by_key(self, key: str) -> JobRecord | None:
        with self._read() as conn:
            row = conn.execute(select(jobs).where(jobs.c.submission_key == key)).first()
        return _record(row) if row else None

    def get(self, job_id: int) -> JobRecord | None:
        with self._read() as conn:
            row = conn.execute(select(jobs).where(jobs.c.id == job_id)).first()
        return _record(row) if row else None

    def find(self, ref: str) -> JobRecord | None:
        """A job by id, or the latest job of that name."""
        if ref.isascii() and ref.isdigit():  # "¹" is a digit to str.isdigit, not to int()
            n = int(ref)
            return self.get(n) if n < 2**63 else None
        with self._read() as conn:
            row = conn.execute(
                select(jobs).where(jobs.c.name == ref).order_by(jobs.c.id.desc()).limit(1)
            ).first()
        return _record(row) if row else None

    def list_jobs(
        self,
        states: Sequence[JobState] | None = None,
        *,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[JobRecord]:
        q = select(jobs)
        if states:
            q = q.where(jobs.c.state.in_([s.value for s in states]))
        q = q.order_by(jobs.c.id.desc() if newest_first else jobs.c.id)
        if limit:
            q = q.limit(limit)
        with self._read() as conn:
            return [_record(r) for r in conn.execute(q)]

    def count(self) -> dict[str, int]:
        with self._read() as conn:
            rows = conn.execute(select(jobs.c.state, func.count()).group_by(jobs.c.state)).all()
        return {s: int(n) for s, n in rows}

    def update(self, job_id: int, *, log: str | None = None, **fields: Any) -> None:
        """Set columns of a job (dicts are stored as JSON), optionally with a log line, in one transaction."""
        values = dict(fields)
        for k in ("allocation", "estimate"):
            if k in values:
                v = values.pop(k)
                values[f"{k}_json"] = json.dumps(v) if v is not None else None
        if "state" in values and isinstance(values["state"], JobState):
            values["state"] = values["state"].value
        now = time.time()
        values["updated_at"] = now
        with self._write() as conn:
            if "state" in values:  # the lifecycle's transition table (states.TRANSITIONS) is enforced here
                row = conn.execute(select(jobs.c.state).where(jobs.c.id == job_id).with_for_update()).first()
                if row is not None:
                    check_transition(JobState(row[0]), JobState(values["state"]), job_id)
            conn.execute(update(jobs).where(jobs.c.id == job_id).values(**values))
            if log:
                conn.execute(insert(logs).values(job_id=job_id, ts=now, line=log))

    def request_cancel(self, job_id: int) -> JobRecord | None:
        """Mark for cancellation; a job that never ran is cancelled at once. None if there is no such job."""
        now = time.time()
        with self._write() as conn:
            row = conn.execute(select(jobs.c.state).where(jobs.c.id == job_id).with_for_update()).first()
            if row is None:
                return None
            state = JobState(row[0])
            if state in TERMINAL:
                pass
            elif state == JobState.PENDING:
                check_transition(state, JobState.CANCELLED, job_id)
                conn.execute(
                    update(jobs)
                    .where(jobs.c.id == job_id)
                    .values(
                        state=JobState.CANCELLED.value,
                        reason=None,
                        cancel_requested=True,
                        finished_at=now,
                        updated_at=now,
                    )
                )
                conn.execute(insert(logs).values(job_id=job_id, ts=now, line="cancelled while pending"))
            else:
                conn.execute(
                    update(jobs).where(jobs.c.id == job_id).values(cancel_requested=True, updated_at=now)
                )
                conn.execute(insert(logs).values(job_id=job_id, ts=now, line="cancel requested"))
        return self.get(job_id)

    # ------------------------------------------------------------------ logs
    def log(self, job_id: int, line: str) -> None:
        with self._write() as conn:
            conn.execute(insert(logs).values(job_id=job_id, ts=time.time(), line=line))

    def logs(self, job_id: int, after: int = 0, limit: int = 1000) -> list[tuple[int, float, str]]:
        with self._read() as conn:
            rows = conn.execute(
                select(logs.c.id, logs.c.ts, logs.c.line)
                .where(logs.c.job_id == job_id, logs.c.id > after)
                .order_by(logs.c.id)
                .limit(limit)
            ).all()
        return [(int(i), float(t), str(line)) for i, t, line in rows]

    # ------------------------------------------------------------------ telemetry
    def add_steps(
        self, job_id: int, attempt: int, records: Sequence[dict[str, Any]], *, log_every: int = 0
    ) -> None:
        """Store per-step records (the runtime's merged StepRecord as a dict) and advance the job's progress.

        A non-finite loss is stored as NULL plus its kind (never an error: a diverging job keeps its record).
        Records of an attempt older than the job's current one (late arrivals) are stored, marked superseded
        where the current attempt redoes them, and never move the job's progress."""
        if not records:
            return
        now = time.time()
        ordered = sorted(records, key=lambda r: r["step"])
        with self._write() as conn:
            cur = conn.execute(
                select(jobs.c.first_loss, jobs.c.steps_done, jobs.c.attempt)
                .where(jobs.c.id == job_id)
                .with_for_update()
            ).first()
            redo_from: int | None = None  # steps from here on are redone by the job's current attempt
            if cur is not None and attempt < (cur[2] or 0):
                row = conn.execute(
                    select(allocations.c.from_step).where(
                        allocations.c.job_id == job_id, allocations.c.attempt == cur[2]
                    )
                ).first()
                redo_from = int(row[0]) if row is not None else 0
            rows = [
                {
                    "job_id": job_id,
                    "attempt": attempt,
                    "step": r["step"],
                    "ts": now,
                    "loss": finite_or_none(r["loss"]),
                    "loss_nonfinite": nonfinite_kind(r["loss"]),
                    "iter_time_s": float(r["iter_time_s"]),
                    "samples_per_s": float(r["samples_per_s"]),
                    "peak_memory_bytes": int(max(r.get("peak_memory_bytes", {0: 0}).values() or [0])),
                    "record_json": json.dumps(r),
                    "superseded": redo_from is not None and r["step"] >= redo_from,
                }
                for r in ordered
            ]
            conn.execute(insert(telemetry), rows)
            if redo_from is not None:
                return
            last = ordered[-1]
            values: dict[str, Any] = {"last_loss": finite_or_none(last["loss"]), "updated_at": now}
            if cur is not None and cur[0] is None:
                first = next((x for r in ordered if (x := finite_or_none(r["loss"])) is not None), None)
                if first is not None:
                    values["first_loss"] = first
            if cur is None or last["step"] + 1 > (cur[1] or 0):
                values["steps_done"] = int(last["step"]) + 1
            conn.execute(update(jobs).where(jobs.c.id == job_id).values(**values))
            if log_every:
                for r in ordered:
                    if (r["step"] + 1) % log_every == 0:
                        conn.execute(
                            insert(logs).values(
                                job_id=job_id,
                                ts=now,
                                line=f"step {r['step'] + 1} loss {float(r['loss']):.4f} "
                                f"iter {r['iter_time_s'] * 1e3:.1f} ms {r['samples_per_s']:.1f} samples/s",
                            )
                        )

    def steps(
        self, job_id: int, *, attempt: int | None = None, include_superseded: bool = False
    ) -> list[dict[str, Any]]:
        """The job's steps in step order, JSON-safe (``loss`` None where ``loss_nonfinite`` names NaN/inf).

        By default only the steps that count: each step once, from the latest attempt that ran it (steps a
        relaunch redid from an earlier checkpoint are left out), so a loss curve never backtracks."""
        q = select(
            telemetry.c.step,
            telemetry.c.attempt,
            telemetry.c.ts,
            telemetry.c.loss,
            telemetry.c.loss_nonfinite,
            telemetry.c.iter_time_s,
            telemetry.c.samples_per_s,
            telemetry.c.peak_memory_bytes,
            telemetry.c.superseded,
            telemetry.c.record_json,
        ).where(telemetry.c.job_id == job_id)
        if attempt is not None:
            q = q.where(telemetry.c.attempt == attempt)
        if not include_superseded:
            q = q.where(telemetry.c.superseded.is_(False))
        with self._read() as conn:
            rows = conn.execute(q.order_by(telemetry.c.step, telemetry.c.id)).all()
        out = []
        for r in rows:
            d = dict(r._mapping)
            d["superseded"] = bool(d["superseded"])
            d["loss"] = finite_or_none(d["loss"])  # PostgreSQL can hold NaN: never hand one to a JSON encoder
            # the held-out loss of validating steps, read from the stored record (no column: no migration)
            record = json.loads(d.pop("record_json"))
            d["val_loss"] = finite_or_none(record.get("val_loss"))
            # the whole loop iteration and its checkpoint's share (service steps; None for older rows)
            d["wall_s"], d["checkpoint_s"] = record.get("wall_s"), record.get("checkpoint_s")
            out.append(d)
        return out

    def last_val_loss(self, job_id: int) -> tuple[int, float] | None:
        """(step, validation loss) of the job's latest validating step that counts, if any."""
        with self._read() as conn:
            row = conn.execute(
                select(telemetry.c.step, telemetry.c.record_json)
                .where(
                    telemetry.c.job_id == job_id,
                    telemetry.c.superseded.is_(False),
                    telemetry.c.record_json.like('%"val_loss": %'),
                    telemetry.c.record_json.not_like('%"val_loss": null%'),
                )
                .order_by(telemetry.c.step.desc(), telemetry.c.id.desc())
                .limit(1)
            ).first()
        if row is None:
            return None
        val = finite_or_none(json.loads(row[1]).get("val_loss"))
        return None if val is None else (int(row[0]), val)

    def step_records(self, job_id: int, attempt: int) -> list[str]:
        """The runtime's StepRecord JSON lines of one attempt (what calibration reads)."""
        with self._read() as conn:
            rows = conn.execute(
                select(telemetry.c.record_json)
                .where(telemetry.c.job_id == job_id, telemetry.c.attempt == attempt)
                .order_by(telemetry.c.step)
            ).all()
        return [r[0] for r in rows]

    # ------------------------------------------------------------------ allocations
    def open_allocation(
        self,
        job_id: int,
        attempt: int,
        kind: str,
        gpus: list[dict[str, Any]],
        cell: str,
        plan_json: str,
        estimate_iter_s: float | None,
        from_step: int,
        note: str | None = None,
    ) -> int:
        """Record a launch (``note``: the scheduler's reason for it). Steps earlier attempts ran from
        ``from_step`` on are marked superseded in the same transaction: this attempt runs them again."""
        with self._write() as conn:
            conn.execute(
                update(telemetry)
                .where(
                    telemetry.c.job_id == job_id,
                    telemetry.c.attempt < attempt,
                    telemetry.c.step >= from_step,
                    telemetry.c.superseded.is_(False),
                )
                .values(superseded=True)
            )
            return int(
                conn.execute(
                    insert(allocations).values(
                        job_id=job_id,
                        attempt=attempt,
                        kind=kind,
                        gpus_json=json.dumps(gpus),
                        cell=cell,
                        plan_json=plan_json,
                        estimate_iter_s=estimate_iter_s,
                        started_at=time.time(),
                        from_step=from_step,
                        note=note,
                    )
                ).inserted_primary_key[0]
            )

    def close_allocation(
        self,
        job_id: int,
        reason: str,
        to_step: int | None,
        measured_iter_s: float | None = None,
        measured_step_s: float | None = None,
    ) -> None:
        """End the job's open allocation (if any)."""
        with self._write() as conn:
            conn.execute(
                update(allocations)
                .where(allocations.c.job_id == job_id, allocations.c.ended_at.is_(None))
                .values(
                    ended_at=time.time(),
                    end_reason=reason,
                    to_step=to_step,
                    measured_iter_s=measured_iter_s,
                    measured_step_s=measured_step_s,
                )  # fmt: skip
            )

    def allocations(self, job_id: int | None = None) -> list[dict[str, Any]]:
        q = select(allocations)
        if job_id is not None:
            q = q.where(allocations.c.job_id == job_id)
        with self._read() as conn:
            rows = conn.execute(q.order_by(allocations.c.id)).all()
        out = []
        for r in rows:
            d = dict(r._mapping)
            d["gpus"] = json.loads(d.pop("gpus_json"))
            d["plan"] = json.loads(d.pop("plan_json"))
            out.append(d)
        return out


def _create_v1(conn: Connection) -> None:
    metadata.create_all(conn, tables=[jobs, allocations, telemetry, logs])


# Ids, step and byte counters past 2**31: 64-bit columns (SQLite's INTEGER always was; PostgreSQL's is 32-bit,
# and a step count of 2**31, 80 GB of peak memory or a log cursor past 2**31 failed there with a 500).
_WIDENED_V2 = {
    "jobs": ("id", "total_steps", "steps_done", "checkpoint_step"),
    "allocations": ("id", "job_id", "from_step", "to_step"),
    "telemetry": ("id", "job_id", "step", "peak_memory_bytes"),
    "logs": ("id", "job_id"),
}


def _widen_v2(conn: Connection) -> None:
    if conn.dialect.name != "postgresql":
        return
    for table, columns in _WIDENED_V2.items():
        alters = ", ".join(f"ALTER COLUMN {c} TYPE BIGINT" for c in columns)
        conn.exec_driver_sql(f"ALTER TABLE {table} {alters}")
        seq = conn.exec_driver_sql(f"SELECT pg_get_serial_sequence('{table}', 'id')").scalar()
        if seq:
            conn.exec_driver_sql(f"ALTER SEQUENCE {seq} AS BIGINT")


def _v3_nonfinite_and_superseded(conn: Connection) -> None:
    """telemetry.loss nullable + loss_nonfinite (a NaN loss used to fail the insert: NOT NULL), telemetry.
    superseded (steps redone after a relaunch), allocations.note (the scheduler's reason for a launch).
    A database created at v1 by this code already has them (v1 creates the current tables): nothing to do."""
    tel = {c["name"] for c in inspect(conn).get_columns("telemetry")}
    if "superseded" not in tel:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql(
                "ALTER TABLE telemetry ALTER COLUMN loss DROP NOT NULL, "
                "ADD COLUMN loss_nonfinite VARCHAR(8), ADD COLUMN superseded BOOLEAN NOT NULL DEFAULT false"
            )
        else:  # SQLite cannot drop a NOT NULL: rebuild the table (ids kept)
            old = [c.name for c in telemetry.columns if c.name not in ("loss_nonfinite", "superseded")]
            cols = ", ".join(old)
            conn.exec_driver_sql("DROP INDEX IF EXISTS ix_tel_job_step")
            conn.exec_driver_sql("ALTER TABLE telemetry RENAME TO telemetry_v2")
            metadata.create_all(conn, tables=[telemetry])
            conn.exec_driver_sql(
                f"INSERT INTO telemetry ({cols}, superseded) SELECT {cols}, 0 FROM telemetry_v2"
            )
            conn.exec_driver_sql("DROP TABLE telemetry_v2")
    if "note" not in {c["name"] for c in inspect(conn).get_columns("allocations")}:
        conn.exec_driver_sql("ALTER TABLE allocations ADD COLUMN note TEXT")


def finite_or_none(x: Any) -> float | None:
    """A float, or None where it is not a finite number (what a JSON reply can carry)."""
    if x is None:
        return None
    f = float(x)
    return f if math.isfinite(f) else None


def nonfinite_kind(x: Any) -> str | None:
    """ "NaN", "inf" or "-inf" for a non-finite number, None for a finite one."""
    f = float(x) if x is not None else 0.0
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    return None


def _v4_step_wall(conn: Connection) -> None:
    """jobs/allocations.measured_step_s: the loop iteration per step (checkpoints left out), beside the
    training step alone.
    A database created at v1 by this code already has them (v1 creates the current tables): nothing to do."""
    for table in ("jobs", "allocations"):
        if "measured_step_s" not in {c["name"] for c in inspect(conn).get_columns(table)}:
            conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN measured_step_s FLOAT")


MIGRATIONS = {1: _create_v1, 2: _widen_v2, 3: _v3_nonfinite_and_superseded, 4: _v4_step_wall}

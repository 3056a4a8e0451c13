"""The control loop: store ↔ scheduler ↔ Ray gangs.

One thread owns every state change of a job (gangs report through a queue): rounds of the scheduler (at
events, and every ``round_s``), launches (one gang per allocation), rescales and migrations (checkpoint →
tear down → relaunch with the new Plan), failures (relaunch from the last checkpoint after a backoff, at most
``max_restarts`` times), cancellations, and recovery after a server restart (reattach to gangs still running
on an external cluster, else relaunch from checkpoints). Telemetry goes to the store as it arrives and, when
an allocation ends, into the cost model's calibration.

The job lifecycle is the state machine of :mod:`tessera.service.states`: every gang ends with a
:class:`StopReason` (why it was asked to stop, else what its ranks reported) and that reason alone decides the
next state — SUCCEEDED, CANCELLED, FAILED (a diverged loss at once; a failure once restarts run out),
PENDING (Preempted), or a relaunch (resize, migrate, node lost, failure) — and the store refuses any change the
transition table does not allow. Every launch and stop for a scheduling change logs the scheduler's note (what
moved, why, with its figures) in the job's log and keeps it in the allocation history.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import queue
import statistics
import threading
import time
from typing import Any

from tessera.hardware import get_gpu
from tessera.jobs import JobSpec
from tessera.perf.compute import Profile
from tessera.perf.costmodel import CostModel
from tessera.service.config import ServiceConfig
from tessera.service.device_worker import RunSpec
from tessera.service.job_files import Shipper
from tessera.service.model_source import ModelSourceError, factory_for, vocab_of
from tessera.service.profiles import ProfileKeeper
from tessera.service.ray_backend import Gang, GangEvents, RayCluster, emulated_spec, find_gang_actors
from tessera.service.scheduling import (
    MEASURED_FILE,
    RESTART_FILE,
    Assignment,
    JobInput,
    LiveCluster,
    SchedulingAdapter,
)
from tessera.service.states import ACTIVE, JobState, Reason, StopReason
from tessera.service.store import JobRecord, Store

log = logging.getLogger("tessera.service")


class Controller:
    def __init__(self, store: Store, config: ServiceConfig, cluster: RayCluster | None = None) -> None:
        self.store = store
        self.config = config
        self.cluster = cluster
        self.adapter: SchedulingAdapter | None = None
        self.live: LiveCluster | None = None
        self.profiles: ProfileKeeper | None = None
        self.shipper = Shipper(config.job_files_limit_bytes)  # a job's files, sent to other machines
        self.gangs: dict[int, Gang] = {}
        # job → the relaunch waiting for its gang to stop: (kind, assignment, the scheduler's note)
        self._next: dict[int, tuple[str, Assignment, str]] = {}
        self._stopping_for: dict[int, StopReason] = {}  # job → why its gang was asked to stop
        self._stop_notes: dict[int, str] = {}  # job → the scheduler's note for a preemption (its end reason)
        self._not_before: dict[int, float] = {}
        self._move_asked_at: dict[int, float] = {}  # job → when its gang was asked to stop for a move
        self._iters: dict[int, list[float]] = {}  # the current allocation's training steps (iter_s)
        self._walls: dict[int, list[float]] = {}  # and its whole loop iterations (wall_s)
        # warm spares: a completed gang's actors (process up, torch imported, pinned to their node), kept for
        # a few seconds so the next launch on their nodes adopts them instead of starting workers cold
        self._spares: list[tuple[Any, Any, Any, float]] = []  # (actor, placement group, Device, expires at)
        self._events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_round = 0.0
        self._next_tick = 0.0
        self.last_round: dict[str, Any] = {}
        self.started_at = time.time()
        self.error: str | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        cost = CostModel.load(self.config.cost_dir)
        if self.cluster is not None:
            self.cluster.start()
            _serialize_first_here()
            self.live = self.cluster.refresh()
        else:
            self.live = LiveCluster.from_spec(emulated_spec(self.config.cluster))
        self.adapter = SchedulingAdapter(
            self.live, cost, policy=self.config.policy, round_s=self.config.round_s,
            restart_cost_s=self.config.restart_cost_s, measured_path=self.config.cost_dir / MEASURED_FILE,
            restart_path=self.config.cost_dir / RESTART_FILE,
        )  # fmt: skip
        self.profiles = self._profile_keeper()
        if self.config.scheduler:
            if self.profiles is not None:
                self.profiles.start()
            self._recover()
            self._thread = threading.Thread(target=self._loop, name="tessera-controller", daemon=True)
            self._thread.start()

    def _profile_keeper(self) -> ProfileKeeper | None:
        """The embedded cluster of CPU device types is priced from profiles of this machine (None otherwise:
        GPU types keep their datasheet and the user's profiles)."""
        if self.cluster is None or not self.cluster.embedded or self.live is None:
            return None
        types = sorted({n.gpu_type for n in self.live.nodes})
        if not types or any(get_gpu(t).arch != "cpu" or get_gpu(t).threads is None for t in types):
            return None
        devices = sum(n.n_gpus for n in self.live.nodes)
        return ProfileKeeper(
            self.config.cost_dir, tuple(types), devices, lambda p: self._events.put(("profiled", p))
        )

    def _merge_profile(self, profile: Profile) -> None:
        """A model's new profile joins the cost model (saved) and every estimate is recomputed with it."""
        assert self.adapter is not None
        cost = self.adapter.cost
        cost.profile.update(profile)
        with contextlib.suppress(OSError):
            cost.save(self.config.cost_dir)
        self.adapter.set_cost(cost)
        self._dirty.set()

    def stop(self, *, checkpoint_timeout_s: float = 60.0) -> None:
        """Stop scheduling. Embedded: checkpoint every running gang and shut Ray down (jobs resume from those
        checkpoints on the next start). External cluster: leave the gangs running for the next server."""
        self._stop.set()
        if self.profiles is not None:
            self.profiles.stop()
        if self._thread is not None:
            self._thread.join(timeout=30)
        gangs = list(self.gangs.values())
        with contextlib.suppress(Exception):
            self._expire_spares(time.time(), all_=True)
        if self.cluster is not None and self.cluster.embedded:
            for g in gangs:
                self._stopping_for[g.job_id] = StopReason.SERVER_STOPPED
                g.request_stop()
            deadline = time.time() + checkpoint_timeout_s
            for g in gangs:
                g.join(max(0.1, deadline - time.time()))
            for g in gangs:
                if g.alive:
                    g.kill()
                    g.join(10)
            self._drain()
        else:
            for g in gangs:
                g.kill()  # stops watching; detached actors on an external cluster keep training
        if self.cluster is not None:
            self.cluster.shutdown()

    @property
    def ships_files(self) -> bool:
        """Whether a job's files travel to its nodes (:mod:`tessera.service.job_files`): on a Ray cluster of
        other machines, unless the operator says they are on every node already (``--shared-files``). The
        embedded cluster's nodes are all this machine: its paths are right as they are."""
        return self.cluster is not None and not self.cluster.embedded and not self.config.shared_files

    def wake(self) -> None:
        """Something changed (a submission, a cancel): run a round soon."""
        self._dirty.set()

    # ------------------------------------------------------------------ recovery
    def _recover(self) -> None:
        active = self.store.list_jobs(list(ACTIVE))
        if self.ships_files:  # archives of jobs that ended while no server ran leave the object store
            self.shipper.keep_only({job.id for job in active})
        for job in active:
            a = Assignment.from_dict(job.allocation) if job.allocation else None
            if (
                a is not None
                and self.cluster is not None
                and not self.cluster.embedded
                and find_gang_actors(job.id, job.attempt, a.plan.world_size)
            ):
                gang = self._gang(job, a, job.attempt, reattach=True)
                self.gangs[job.id] = gang
                gang.start(reattach=True)
                self.store.update(job.id, state=JobState.RUNNING, log=f"reattached to attempt {job.attempt}")
                continue
            ck = self._disk_checkpoint(job.id)
            self.store.close_allocation(job.id, StopReason.SERVER_RESTART, ck)
            where = f"checkpoint step {ck}" if ck else "the start (no checkpoint yet)"
            self.store.update(
                job.id,
                state=JobState.RECOVERING,
                reason=Reason.RESOURCES,
                allocation=None,
                checkpoint_step=ck,
                log=f"server restarted: relaunching from {where}",
            )
        self._dirty.set()

    # ------------------------------------------------------------------ the loop
    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._drain()
                self._cancels()
                now = time.time()
                self._expire_spares(now)
                periodic = now >= self._next_round
                on_tick = now >= self._next_tick  # rounds on the wall clock's ticks: what one tick sees, one
                if on_tick:  # decision sees (as the replay's ticks do), not one round per submission
                    self._next_tick = self._grid_after(now, self.config.tick_s)
                due = self._dirty.is_set() or periodic or any(t <= now for t in self._not_before.values())
                if on_tick and due:
                    self._dirty.clear()
                    self._round(
                        now,
                        force=periodic or any(t <= now for t in self._not_before.values()),
                        boundary=periodic,
                    )
                    if periodic:  # on the wall clock's multiples of the round: a replay can place them
                        self._next_round = self._grid_after(now, self.config.round_s)
                self.error = None
            except Exception as e:  # noqa: BLE001 - the loop must survive; the error is shown in /healthz
                log.exception("control loop")
                self.error = f"{type(e).__name__}: {e}"
                time.sleep(1.0)
            with contextlib.suppress(queue.Empty):
                item = self._events.get(timeout=max(0.0, self._next_tick - time.time()))
                self._handle_safely(item)

    @staticmethod
    def _grid_after(now: float, step_s: float) -> float:
        """The first multiple of ``step_s`` on the wall clock after ``now``."""
        return (math.floor(now / step_s) + 1) * step_s

    def _drain(self) -> None:
        while True:
            try:
                item = self._events.get_nowait()
            except queue.Empty:
                return
            self._handle_safely(item)

    def _handle_safely(self, item: tuple[str, Any]) -> None:
        """One gang event; an error in it (a refused state change is a bug) is logged, shown in /healthz and
        in the job's log, and never ends the control loop or the handling of the events after it."""
        try:
            self._handle(item)
        except Exception as e:  # noqa: BLE001 - the loop must survive
            log.exception("gang event %s", item[0])
            self.error = f"{type(e).__name__}: {e}"
            gang = item[1][0] if isinstance(item[1], tuple) and item[1] else None
            if isinstance(gang, Gang):
                with contextlib.suppress(Exception):
                    self.store.log(
                        gang.job_id, f"internal error handling '{item[0]}': {type(e).__name__}: {e}"
                    )

    # ------------------------------------------------------------------ rounds
    def _inputs(self, now: float) -> list[JobInput]:
        out = []
        for j in self.store.list_jobs([JobState.PENDING, *ACTIVE]):
            try:
                spec = j.spec
            except ValueError:
                continue
            g = self.gangs.get(j.id)
            wait = self.profiles.wait_reason(spec) if self.profiles is not None and g is None else None
            if wait is not None:  # priced only once this machine's profile of its model is in
                if j.reason != wait:
                    self.store.update(j.id, reason=wait)
                continue
            out.append(
                JobInput(
                    j.id, spec, j.submitted_at, assignment=g.assignment if g else None,
                    steps_done=j.steps_done, measured_iter_s=j.measured_iter_s, measured_step_s=j.measured_step_s,
                    measured_own=g is None or not self._profiled_beside(g),
                    not_before=self._not_before.get(j.id, 0.0), launching=g is not None and g.ready_at is None,
                )
            )  # fmt: skip
        for jid in [k for k, t in self._not_before.items() if t <= now]:
            del self._not_before[jid]
        return out

    def _refresh_cluster(self) -> None:
        """Ray's view of the nodes into the scheduler; gangs on nodes that died are stopped as NODE_LOST."""
        assert self.adapter is not None and self.cluster is not None
        live = self.cluster.refresh()
        if self.live is not None and live != self.live:
            for jid in self.adapter.set_cluster(live):
                if jid in self.gangs:
                    self._stopping_for[jid] = StopReason.NODE_LOST
                    self.gangs[jid].kill()
        self.live = live

    def _round(self, now: float, *, force: bool, boundary: bool) -> None:
        """``boundary``: the periodic round (time-sharing policies decide only there, as in the replay)."""
        assert self.adapter is not None
        if self.cluster is not None:
            self._refresh_cluster()
        self.adapter.sync(self._inputs(now), now)
        r = self.adapter.round(now, force=force, boundary=boundary)
        self.last_round = {
            "at": now, "policy": r.policy, "decided": r.decided, "decision_s": r.decision_s,
            "changes": [{"job": c.job_id, "kind": _kind(c.kind), "note": _note(c)} for c in r.changes],
        }  # fmt: skip
        for c in r.changes:
            job = self.store.get(c.job_id)
            if job is None or job.state.terminal:
                continue
            kind, note = _kind(c.kind), _note(c)
            if c.new is None:
                self._stop_gang(job, StopReason.PREEMPTED, None, note)
            elif c.job_id in self.gangs:
                why = StopReason.MIGRATE if kind == "migrate" else StopReason.RESIZE
                self._stop_gang(job, why, c.new, note)
            else:
                self._launch(job, c.new, kind, note)
        for jid, reason in r.reasons.items():
            job = self.store.get(jid)
            if job is None or job.state.terminal or jid in self.gangs:
                continue
            if job.state == JobState.PENDING and (job.reason or "").startswith(Reason.PREEMPTED):
                reason = f"{Reason.PREEMPTED}: {reason}"  # still says it was preempted, and what it waits for
            if job.reason != reason:
                self.store.update(jid, reason=reason)

    # ------------------------------------------------------------------ gangs
    def _checkpoint_dir(self, job_id: int):
        return self.config.checkpoint_root / str(job_id) / "checkpoints"

    def _disk_checkpoint(self, job_id: int) -> int | None:
        """The step of the job's latest complete checkpoint on disk (the truth a relaunch resumes from: a
        checkpoint may complete just before a failure is noticed, before its message reaches the service)."""
        import json

        from tessera.runtime.checkpoint import resolve

        try:
            return int(json.loads((resolve(self._checkpoint_dir(job_id)) / "meta.json").read_text())["step"])
        except (FileNotFoundError, OSError, ValueError, KeyError):
            return None

    def _run_spec(self, job: JobRecord, spec: JobSpec, attempt: int) -> dict[str, Any]:
        ckdir = self._checkpoint_dir(job.id)
        ckdir.mkdir(parents=True, exist_ok=True)
        resume = self._disk_checkpoint(job.id) is not None
        assert self.adapter is not None
        cells = self.adapter.cells_of(spec)
        every = spec.checkpoint_interval_steps
        backend = "gloo" if self.cluster is None or self.cluster.embedded else "auto"
        files = self.shipper.ship(job.id, spec) if self.ships_files else None
        if files is not None:
            self.store.log(
                job.id, f"job files: archive {files['digest']} ({files['bytes'] / 2**20:.1f} MiB: "
                f"{', '.join(files['paths'])}) travels to the nodes",
            )  # fmt: skip
        run = RunSpec(
            job_id=job.id, attempt=attempt, total_steps=spec.total_steps, learning_rate=spec.learning_rate,
            seed=spec.seed, checkpoint_dir=str(ckdir.resolve()), checkpoint_every=every, resume=resume,
            backend=backend, pg_timeout_s=self.config.pg_timeout_s, model_factory=factory_for(spec),
            data_path=spec.data if isinstance(spec.data, str) else None, vocab=vocab_of(cells.spec),
            data_config=None if isinstance(spec.data, str) else spec.data_options(),
            training=spec.training_options(), force_data_change=spec.force_data_change,
            loopback=self.cluster is None or self.cluster.embedded, on_nonfinite_loss=spec.on_nonfinite_loss,
            files=files,
        )  # fmt: skip
        return {
            f.name: getattr(run, f.name) for f in dataclasses.fields(run)
        }  # shallow: the factory stays an object

    def _gang(self, job: JobRecord, a: Assignment, attempt: int, *, reattach: bool = False) -> Gang:
        assert self.cluster is not None
        spec = job.spec
        run = self._run_spec(job, spec, attempt) if not reattach else {}
        events = GangEvents(
            on_ready=lambda g, step: self._events.put(("ready", (g, step))),
            on_steps=self._on_steps,
            on_end=lambda g, outcome, err, ck: self._events.put(("end", (g, outcome, err, ck))),
            on_checkpoint=lambda g, step: self.store.update(g.job_id, checkpoint_step=step),
        )
        gang = Gang(
            self.cluster, job.id, attempt, a, run, events, watchdog_s=self.config.watchdog_s,
            placement_timeout_s=max(60.0, self.config.pg_timeout_s),
        )  # fmt: skip
        gang.keep_on_finish = self._warm_workers()
        gang.handing_over = lambda: self._held_by_others(job.id, a)
        return gang

    def _held_by_others(self, job_id: int, a: Assignment) -> bool:
        """Whether a gang of another job still holds one of ``a``'s GPUs (stopping for this round's change:
        the launch on them waits for its checkpoint and teardown, however long)."""
        mine = {(d.node, d.local_index) for d in a.plan.devices}
        return any(
            g.job_id != job_id
            and g.outcome is None
            and mine & {(d.node, d.local_index) for d in g.plan.devices}
            for g in list(self.gangs.values())
        )

    def _warm_workers(self) -> bool:
        """Workers outlive their gang for the next launch (fast rescale and spares): embedded only — on an
        external cluster a restarted server reattaches to actors by their attempt's names."""
        return _fast_rescale() and self.cluster is not None and self.cluster.embedded

    def _with_spares(self, a: Assignment, reuse: list[Any] | None) -> list[Any] | None:
        """The actors a launch of ``a`` adopts: the job's own kept ones plus spares on its nodes (as many as
        its ranks there still need). The other spares on those nodes are stopped now — they hold GPUs the
        new gang may have to place on."""
        need: dict[str, int] = {}
        for d in a.plan.devices:
            need[d.node] = need.get(d.node, 0) + 1
        for _, _, d in reuse or []:
            if d.node in need:
                need[d.node] -= 1
        taken, stop, keep = [], [], []
        for actor, pg, d, until in self._spares:
            if need.get(d.node, 0) > 0:
                need[d.node] -= 1
                taken.append((actor, pg, d))
            elif d.node in need:
                stop.append((actor, pg))
            else:
                keep.append((actor, pg, d, until))
        self._spares = keep
        if stop:
            Gang.release_now(stop)
        return [*(reuse or []), *taken] or None

    def _expire_spares(self, now: float, *, all_: bool = False) -> None:
        gone = [(a, pg) for a, pg, _, until in self._spares if all_ or until <= now]
        if gone:
            self._spares = [x for x in self._spares if not (all_ or x[3] <= now)]
            Gang.release_now(gone)

    def _launch(
        self, job: JobRecord, a: Assignment, kind: str, note: str = "", reuse: list[Any] | None = None
    ) -> None:
        """Start a gang for ``a`` from the job's latest checkpoint on disk. Its progress restarts there
        (``steps_done`` = the checkpoint's step) and the steps earlier attempts ran past it are superseded.
        ``reuse``: the previous gang's actors, kept alive for a fast rescale (the gang adopts those on nodes
        of ``a`` and stops the rest)."""
        if self.cluster is None:
            return
        attempt = job.attempt + 1
        if job.state == JobState.RECOVERING:
            kind = "recover"
        try:
            gang = self._gang(job, a, attempt)
            gang.reuse = self._with_spares(a, reuse) if gang.keep_on_finish else reuse
        except ModelSourceError as e:
            self.store.update(
                job.id, state=JobState.FAILED, error=str(e), finished_at=time.time(), log=str(e)
            )
            return
        self.gangs[job.id] = gang
        from_step = self._disk_checkpoint(job.id) or 0
        fields: dict[str, Any] = {
            "checkpoint_step": from_step or None,
            "steps_done": from_step,
            "state": JobState.STARTING if job.state != JobState.RECOVERING else JobState.RECOVERING,
            "reason": None,
            "attempt": attempt,
            "allocation": a.to_dict(),
            "measured_iter_s": None,
            "measured_step_s": None,
        }
        if job.estimate is None:
            fields["estimate"] = {"cell": a.cell, "iteration_time_s": a.estimate_iter_s, **a.estimate}
        gpus = ", ".join(f"{n}×{t}" for t, n in a.gpus.items())
        why = f" — {note}" if note else ""
        self.store.update(
            job.id,
            log=f"{kind}: attempt {attempt} on {gpus} ({a.cell}) from step {from_step}, {_plan_text(a)}{why}",
            **fields,
        )
        self.store.open_allocation(
            job.id, attempt, kind, [s.to_dict() for s in a.slots], a.cell, a.plan.to_json(indent=None),
            a.estimate_iter_s, from_step, note=note or None,
        )  # fmt: skip
        self._iters[job.id] = []
        self._walls[job.id] = []
        gang.start()

    def _stop_gang(self, job: JobRecord, why: StopReason, new: Assignment | None, note: str = "") -> None:
        """Ask the gang to checkpoint and stop, for a scheduling change (the relaunch on ``new`` follows)."""
        gang = self.gangs[job.id]
        if new is not None:
            self._next[job.id] = (why.value, new, note)
            self._move_asked_at.setdefault(job.id, time.time())
        else:  # a move decided earlier, still checkpointing, is superseded: the job waits instead (live, the
            # stale move was launched anyway, onto GPUs the core had since given to another job)
            self._next.pop(job.id, None)
            self._move_asked_at.pop(job.id, None)
        self._stopping_for[job.id] = why
        if new is None and note:
            self._stop_notes[job.id] = note
        state = {StopReason.RESIZE: JobState.RESIZING, StopReason.MIGRATE: JobState.MIGRATING}.get(why)
        msg = f"{why}: checkpointing to relaunch on {new.cell}" if new else "preempted: checkpointing"
        if note:
            msg += f" — {note}"
        if state is not None:
            self.store.update(job.id, state=state, log=msg)
        else:
            self.store.log(job.id, msg)
        # fast rescale: keep the workers alive through the stop, for the relaunch to adopt. Embedded only:
        # on an external cluster a restarted server reattaches to actors by their attempt's names.
        gang.keep_on_stop = new is not None and self._warm_workers()
        gang.request_stop()

    def _on_steps(self, gang: Gang, records: list[dict[str, Any]]) -> None:
        """From the gang's thread: store telemetry and the measured step time right away."""
        job = self.store.get(gang.job_id)
        done = job.steps_done if job else 0
        fresh = [r for r in records if r["step"] >= done or gang.reattached is False]
        self.store.add_steps(gang.job_id, gang.attempt, fresh, log_every=self.config.log_every)
        self._iters.setdefault(gang.job_id, []).extend(r["iter_time_s"] for r in fresh)
        walls = self._walls.setdefault(gang.job_id, [])
        # a checkpoint is a cost per job (about ten a run, whatever its length), not per step: left out here
        walls.extend(r["wall_s"] - r.get("checkpoint_s", 0.0) for r in fresh if r.get("wall_s") is not None)
        iter_s, step_s = self._measured(gang.job_id)
        if iter_s is not None:
            self.store.update(gang.job_id, measured_iter_s=iter_s, measured_step_s=step_s)

    def _measured(self, jid: int, final: bool = False) -> tuple[float | None, float | None]:
        """The current allocation's median training step and median whole loop iteration, leaving out the
        first two steps (they carry first-call costs a steady step does not): while it runs, from three steps
        on and only once more than five are in; when it ends (``final``), whatever it ran."""

        def steady(xs: list[float]) -> float | None:
            if len(xs) < (1 if final else 3):
                return None
            return statistics.median((xs[2:] or xs) if final else (xs[2:] if len(xs) > 5 else xs))

        return steady(self._iters.get(jid, [])), steady(self._walls.get(jid, []))

    # ------------------------------------------------------------------ events
    def _handle(self, item: tuple[str, Any]) -> None:
        kind, payload = item
        if kind == "ready":
            gang, step = payload
            self._on_ready(gang, step)
        elif kind == "end":
            gang, outcome, err, ck = payload
            self._on_end(gang, outcome, err, ck)
        elif kind == "profiled":
            self._merge_profile(payload)

    def _on_ready(self, gang: Gang, step: int) -> None:
        job = self.store.get(gang.job_id)
        if job is None or self.gangs.get(gang.job_id) is not gang:
            return
        fields: dict[str, Any] = {"state": JobState.RUNNING}
        if job.state in (
            JobState.RESIZING,
            JobState.MIGRATING,
        ):  # asked to stop before it was ready: stays so
            del fields["state"]
        if job.started_at is None:
            fields["started_at"] = time.time()
        asked = self._move_asked_at.pop(gang.job_id, None)
        if asked is not None and self.adapter is not None:  # a move's pause: stop asked → running again
            self.adapter.observe_restart(time.time() - asked, relaunch=gang.reused == 0)
        took = gang.startup_text()
        msg = f"running from step {step} (attempt {gang.attempt}{'; ' + took if took else ''})"
        self.store.update(gang.job_id, log=msg, **fields)

    def _on_end(self, gang: Gang, outcome: str, err: str | None, ck: int | None) -> None:
        """A gang ended: its stop reason decides the job's next state (see the module docstring)."""
        try:
            self._ended(gang, outcome, err, ck)
        finally:
            gang.release_kept()  # actors kept for a fast rescale that no relaunch took
            job = self.store.get(gang.job_id)
            if self.ships_files and (job is None or job.state.terminal):
                self.shipper.forget(gang.job_id)

    def _ended(self, gang: Gang, outcome: str, err: str | None, ck: int | None) -> None:
        jid = gang.job_id
        if self.gangs.get(jid) is gang:
            del self.gangs[jid]
        job = self.store.get(jid)
        if job is None:
            return
        now = time.time()
        measured = self._measured(jid, final=True)
        asked = self._stopping_for.pop(jid, None)
        stop_note = self._stop_notes.pop(jid, None)
        nxt = self._next.pop(jid, None)
        if nxt is None:  # no relaunch follows at once: not a move's pause
            self._move_asked_at.pop(jid, None)
        disk = self._disk_checkpoint(jid)
        ck = disk if disk is not None else (ck if ck is not None else job.checkpoint_step)
        if ck is not None and ck != job.checkpoint_step:
            self.store.update(jid, checkpoint_step=ck)
        assert self.adapter is not None
        why = _stop_reason(outcome, asked, job.cancel_requested)
        if why in (StopReason.COMPLETED, StopReason.PREEMPTED, StopReason.RESIZE, StopReason.MIGRATE):
            self._observe_final(gang, job, measured[1] or measured[0])
        if why == StopReason.COMPLETED:
            self.store.close_allocation(jid, why, job.total_steps, *measured)
            self.store.update(
                jid, state=JobState.SUCCEEDED, finished_at=now, reason=None, steps_done=job.total_steps,
                log=f"succeeded: {job.total_steps} steps, final loss {job.last_loss}",
            )  # fmt: skip
            self._calibrate(gang, job, measured[0])
            if gang.kept:  # warm spares for the next launch on these nodes (released unless adopted soon)
                until = now + SPARE_S
                self._spares += [(actor, pg, d, until) for actor, pg, d in gang.kept]
                gang.kept = None
            self._dirty.set()
            return
        if why == StopReason.DIVERGED:  # the training's own outcome: a relaunch would diverge again
            text = err or "loss diverged"
            self.store.close_allocation(jid, f"{why}: {text}", ck, *measured)
            self.adapter.release(jid, now)
            self.store.update(
                jid, state=JobState.FAILED, finished_at=now, reason=text, error=text,
                log=f"failed: {text} (not relaunched; on_nonfinite_loss: skip would skip such steps)",
            )  # fmt: skip
            self._not_before.pop(jid, None)
            self._dirty.set()
            return
        if why == StopReason.CANCELLED:
            self.store.close_allocation(jid, why, ck, *measured)
            self.store.update(jid, state=JobState.CANCELLED, finished_at=now, reason=None, log="cancelled")
            self._dirty.set()
            return
        if why != StopReason.FAILED:  # stopped on purpose: checkpointed (or, node lost, killed)
            ended = f"{why}: {stop_note}" if why == StopReason.PREEMPTED and stop_note else why
            self.store.close_allocation(jid, ended, ck, *measured)
            self._calibrate(gang, job, measured[0])
            if why == StopReason.SERVER_STOPPED:
                self.store.update(
                    jid, state=JobState.RECOVERING, log=f"server stopped at checkpoint step {ck}"
                )
                return
            if nxt is not None:
                kind, a, note = nxt
                self.store.update(jid, rescales=job.rescales + 1)
                fresh = self.store.get(jid)
                assert fresh is not None
                reuse = gang.kept
                self._launch(fresh, a, kind, note, reuse=reuse)
                if self.gangs.get(jid) not in (None, gang):
                    gang.kept = None  # the new gang owns them now (else the caller stops them)
                if reuse is None and gang.keep_on_stop and jid in self.gangs:
                    self.gangs[jid].fast_note = f"fast rescale not used: the gang ended {outcome}"
                return
            if why == StopReason.NODE_LOST:
                self.store.update(
                    jid, state=JobState.RECOVERING, reason=Reason.RESOURCES, log="lost its node"
                )
            else:
                self.store.update(
                    jid, state=JobState.PENDING, reason=Reason.PREEMPTED, log=f"preempted at step {ck}"
                )
            self.adapter.release(jid, now)
            self._dirty.set()
            return
        lost = (
            self.cluster.probe_lost({d.node for d in gang.plan.devices}) if self.cluster is not None else []
        )
        if lost:  # its node died under it: not the job's failure — no restart charged, no backoff
            self.store.close_allocation(jid, f"{StopReason.NODE_LOST}: {', '.join(lost)}", ck, *measured)
            self.adapter.release(jid, now)
            self._refresh_cluster()
            where = f"checkpoint step {ck}" if ck else "the start"
            self.store.update(
                jid, state=JobState.RECOVERING, reason=Reason.RESOURCES,
                log=f"lost node {', '.join(lost)} ({err}); relaunching from {where} on the GPUs left "
                "(no restart charged)",
            )  # fmt: skip
            self._dirty.set()
            return
        # failed (or killed without a reason): relaunch from the checkpoint unless out of restarts
        restarts = job.restarts + 1
        self.store.close_allocation(jid, f"{why}: {err}", ck, *measured)
        self.adapter.release(jid, now)
        spec = job.spec
        if restarts > spec.max_restarts:
            self.store.update(
                jid, state=JobState.FAILED, finished_at=now, restarts=restarts, error=err, reason=None,
                log=f"failed: {err} (gave up after {spec.max_restarts} restart(s))",
            )  # fmt: skip
        else:
            delay = self.config.backoff(restarts)
            self._not_before[jid] = now + delay
            where = f"checkpoint step {ck}" if ck else "the start"
            self.store.update(
                jid, state=JobState.RECOVERING, restarts=restarts, reason=f"{Reason.BACKOFF} ({delay:.0f} s)",
                error=err, log=f"worker failure: {err}; relaunching from {where} in {delay:.0f} s "
                f"(restart {restarts} of {spec.max_restarts})",
            )  # fmt: skip
        self._dirty.set()

    def _cancels(self) -> None:
        for job in self.store.list_jobs(list(ACTIVE)):
            if not job.cancel_requested:
                continue
            g = self.gangs.get(job.id)
            if g is not None:
                if g.outcome is None:
                    g.kill()
            else:
                self.store.close_allocation(job.id, StopReason.CANCELLED, job.checkpoint_step)
                self.store.update(
                    job.id, state=JobState.CANCELLED, finished_at=time.time(), reason=None, log="cancelled"
                )
                self._not_before.pop(job.id, None)
                if self.ships_files:
                    self.shipper.forget(job.id)
                self._dirty.set()

    # ------------------------------------------------------------------ calibration
    def _calibrate(self, gang: Gang, job: JobRecord, measured: float | None) -> None:
        """Fold the allocation's measured iteration time into the cost model (α = 0.5) and re-plan with it."""
        if not self.config.calibrate or self.adapter is None or measured is None:
            return
        lines = self.store.step_records(job.id, gang.attempt)
        if len(lines) < 5:
            return
        why_not = self._no_calibration(gang, job)
        if why_not:
            self.store.log(job.id, f"calibration skipped: {why_not}")
            return
        try:
            from tessera.perf.calibrate import calibrate, parse_telemetry

            cells = self.adapter.cells_of(job.spec)
            measured_t = parse_telemetry(lines, source=f"job {job.id}", n_stages=gang.plan.n_stages)
            report, updated = calibrate(
                gang.plan, cells.spec, measured_t, self.adapter.cost,
                cluster_or_gpu_map=self.adapter.cluster.spec, alpha=0.5,
                save_to=self.config.cost_dir,
            )  # fmt: skip
        except Exception as e:  # noqa: BLE001 - calibration is advisory; the job's outcome stands
            self.store.log(job.id, f"calibration skipped: {type(e).__name__}: {e}")
            return
        self.adapter.set_cost(updated)
        self.store.log(
            job.id,
            f"calibrated the cost model: estimate {report.before.iteration_time_s * 1e3:.2f} ms → "
            f"{report.after.iteration_time_s * 1e3:.2f} ms, measured {report.measured.iteration_time_s * 1e3:.2f} ms",
        )

    def _observe_final(self, gang: Gang, job: JobRecord, step_s: float | None) -> None:
        """The allocation's steady step over its whole run, for its configuration's measured speed (not when a
        profile loaded this machine's CPU meanwhile: those timings are not the devices' own)."""
        if self.adapter is None or step_s is None or self._profiled_beside(gang):
            return
        steps = len(self._walls.get(job.id) or self._iters.get(job.id) or [])
        self.adapter.observe_final(job.spec, gang.assignment.gpus, step_s, steps)

    def _no_calibration(self, gang: Gang, job: JobRecord) -> str | None:
        """Why this allocation's timings must not move the cost model's scales (None: they may). On the
        embedded cluster GPU types are labels on CPU processes, and a job priced from the datasheet (no
        profile of its model here) would teach the device type a correction of the wrong estimate."""
        if self.cluster is None or not self.cluster.embedded:
            return None
        if any(get_gpu(d.gpu_type).arch != "cpu" for d in gang.plan.devices):
            return (
                "the embedded cluster's GPU types are labels on this machine's CPU (use --cluster embedded)"
            )
        if self.profiles is not None and not self.profiles.profiled(job.spec):
            return "no profile of this model on this machine (its estimate is the datasheet's)"
        if self._profiled_beside(gang):
            return "another model was profiled on this machine's CPU meanwhile (its timings are disturbed)"
        return None

    def _profiled_beside(self, gang: Gang) -> bool:
        """Whether a profiling child loaded this machine's CPU while the allocation ran (its timings are not
        the devices' own)."""
        return self.profiles is not None and self.profiles.busy_during(gang.created_s, time.time())

    # ------------------------------------------------------------------ views
    def cluster_view(self) -> dict[str, Any]:
        live = self.live
        assert live is not None
        holders: dict[tuple[str, int], int] = {}
        for j in self.store.list_jobs(list(ACTIVE)):
            if j.allocation:
                for s in j.allocation["slots"]:
                    holders[(s["node"], int(s["index"]))] = j.id
        names = {j.id: j.name for j in self.store.list_jobs(list(ACTIVE))}
        nodes, by_type = [], {}
        for n in live.nodes:
            slots = []
            for i in range(n.n_gpus):
                jid = holders.get((n.name, i))
                slots.append({"index": i, "job_id": jid, "job_name": names.get(jid) if jid else None})
            nodes.append(
                {"name": n.name, "gpu_type": n.gpu_type, "n_gpus": n.n_gpus, "alive": n.alive, "gpus": slots}
            )
            t = by_type.setdefault(n.gpu_type, {"total": 0, "used": 0, "free": 0})
            used = sum(1 for s in slots if s["job_id"] is not None)
            t["total"] += n.n_gpus
            t["used"] += used
            t["free"] += (n.n_gpus - used) if n.alive else 0
        mode = "none" if self.cluster is None else ("embedded" if self.cluster.embedded else "external")
        return {
            "name": live.spec.name,
            "mode": mode,
            "ray_address": self.cluster.address if self.cluster is not None else None,
            "nodes": nodes,
            "by_type": by_type,
            "policy": self.adapter.active_policy if self.adapter else None,
            "round_s": self.config.round_s,
            "last_round": self.last_round,
        }

    def gang_pids(self, job_id: int) -> list[int]:
        g = self.gangs.get(job_id)
        return list(g.pids) if g else []


SPARE_S = 15.0  # how long a completed gang's workers wait to be adopted by the next launch on their nodes


def _fast_rescale() -> bool:
    """Whether a rescale or migration keeps the workers that stay (``TESSERA_FAST_RESCALE=0``: always tear
    down and relaunch, the slow path, e.g. to measure what the fast path saves)."""
    return os.environ.get("TESSERA_FAST_RESCALE", "1") != "0"


def _stop_reason(outcome: str, asked: StopReason | None, cancel_requested: bool) -> StopReason:
    """Why a gang ended: what its ranks reported (finished, diverged), else why it was asked to stop."""
    if outcome == "finished":
        return StopReason.COMPLETED
    if outcome == "diverged":
        return StopReason.DIVERGED
    if cancel_requested:
        return StopReason.CANCELLED
    if outcome == "stopped" or (outcome == "killed" and asked is not None):
        return asked or StopReason.PREEMPTED  # a stop nobody asked for (a reattached gang): back to the queue
    return StopReason.FAILED


def _kind(kind: Any) -> str:
    """A change's kind as the allocation history writes it (start | resume | resize | migrate | preempt)."""
    text = str(getattr(kind, "value", kind)).lower()
    return {"rescale": "resize"}.get(text, text)


def _note(change: Any) -> str:
    """The scheduler's reason for a change, with its figures ("" when it gave none)."""
    return str(getattr(change, "note", "") or getattr(change, "reason", "") or "")


def _plan_text(a: Assignment) -> str:
    return " → ".join(
        f"layers [{s.layer_start},{s.layer_end}) dp{s.dp_degree}×tp{s.tp_degree} on "
        + "+".join(sorted({d.gpu_type for d in s.devices}))
        for s in a.plan.stages
    )


def _serialize_first_here() -> None:
    """Make this process's first Ray serialization now, in the thread that starts the service, before any
    gang thread or the HTTP API runs.

    Ray builds its serialization context at a process's first put/get/task and imports ``pydantic.v1`` then
    (``ray._common.pydantic_compat``); FastAPI imports ``pydantic.v1`` when it builds its routes. That package
    imports itself in a cycle, and two threads importing it for the first time at once break it: the second
    gets ``KeyError: 'pydantic.v1'``. A restarted server's reattached gang threads made their first Ray call
    beside the main thread building the app; on a loaded box the reattach failed so, and every relaunch then
    waited for GPUs the failed reattach's placement groups still held."""
    import ray

    ray.put(None)

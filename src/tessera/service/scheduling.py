"""The service's one door to scheduling: live jobs + the live cluster in, GPU assignments with Plans out.

The decisions come from the shared scheduler core (:class:`tessera.scheduler.Scheduler`) running the active
policy (``tessera`` by default; any registered policy by name), priced by the shared speed source
(:class:`tessera.scheduler.speed.SpeedSource`) — the very code and figures the simulator runs. This module only
translates between the service's world and the core's:

* jobs: the store's rows ↔ the core's ``Job`` (keyed by its :class:`~tessera.scheduler.state.JobConfig`) /
  ``JobState`` (events: arrival, completion, node failure); the measured seconds per step of progress (the
  service's loop iteration, not only the training step; checkpoints, a cost per job, left out) become the
  speed source's factors per configuration and GPU types;
* allocations: the core's (node, count) placement ↔ concrete GPUs (node, index) and the Cell's Plan, tuned
  inside the Cell and pinned to those GPUs (:class:`~tessera.service.slots.Assignment`);
* pending reasons (``Resources``, ``Priority``, ``Infeasible: …``, ``Backoff``), which the core does not keep.

:meth:`SchedulingAdapter.dry_run` (``tessera submit --dry-run``) runs the next round on a copy of all this.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import math
import os
import statistics
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from tessera.hardware import get_gpu
from tessera.jobs import JobSpec
from tessera.perf.costmodel import CostModel
from tessera.plan import Device
from tessera.scheduler import (
    Allocation,
    ClusterState,
    Decision,
    PerfTable,
    Policy,
    Scheduler,
    get_policy,
    gpus_of,
)
from tessera.scheduler.factors import SpeedFactors, TypesKey, types_of
from tessera.scheduler.restart import RestartBelief
from tessera.scheduler.speed import ConfigError, JobSpeed, SpeedSource, config_of, job_of
from tessera.scheduler.state import GPUs, JobConfig
from tessera.service.dry_run import DryRun, dry_run_of
from tessera.service.job_models import ServiceModels
from tessera.service.model_source import ModelSourceError
from tessera.service.slots import Assignment, LiveCluster, LiveNode, Slot, pin_plan
from tessera.service.states import Reason


@dataclass(frozen=True)
class JobInput:
    """What the adapter needs to know about one job of the store."""

    id: int
    spec: JobSpec
    submitted_at: float
    terminal: bool = False
    assignment: Assignment | None = None  # held now (the job is launched or being launched on it)
    steps_done: int = 0
    measured_iter_s: float | None = None  # on the current assignment
    measured_step_s: float | None = None  # its whole loop iteration: the seconds a step of progress costs
    measured_own: bool = True  # the devices' own timings (no profiling loaded this machine's CPU meanwhile)
    not_before: float = 0.0  # backoff after a failure: not (re)started before this time
    launching: bool = False  # its gang is being launched on ``assignment`` (not every rank ready yet)


@dataclass(frozen=True)
class Change:
    """One thing the backend must do: ``kind`` = start | resume | resize | migrate | preempt; ``note`` says
    what moved and (when the core gives one) why."""

    job_id: int
    kind: str
    old: Assignment | None
    new: Assignment | None
    note: str = ""


@dataclass(frozen=True)
class Round:
    changes: tuple[Change, ...]
    reasons: dict[int, str]  # every pending job's reason
    policy: str
    decided: bool
    decision_s: float


def _kind(ch: Any) -> str:
    """The core's change kind as a string (an enum's value, or the string itself)."""
    k = ch.kind
    return str(getattr(k, "value", k))


class SchedulingAdapter:
    """Owns the core :class:`~tessera.scheduler.Scheduler` of the live service and keeps it in step with the
    store (:meth:`sync`), runs rounds (:meth:`round`), dry runs (:meth:`dry_run`) and says when a job can never
    run (:meth:`infeasible`). Thread-safe.

    ``restart_cost_s``: the configured guess of what a move costs (checkpoint → tear down → relaunch), used
    until a move is measured; :meth:`observe_restart` folds each measured move's pause into the belief
    (:class:`~tessera.scheduler.restart.RestartBelief`), kept in ``restart_path`` so a restarted service starts
    from what it learnt. The core is told the belief as each moved job's pause.
    """

    def __init__(
        self,
        cluster: LiveCluster,
        cost: CostModel | None = None,
        *,
        policy: str = "tessera",
        round_s: float = 300.0,
        restart_cost_s: float = 30.0,
        measured_path: Path | None = None,
        restart_path: Path | None = None,
    ) -> None:
        self.cluster = cluster
        self.cost = cost or CostModel()
        self.restart_path = restart_path
        self.restart = load_restart_belief(restart_path, restart_cost_s)
        self.round_s = round_s
        self.policy_name = policy
        self._lock = threading.RLock()
        self.models = ServiceModels()
        self.held_back: set[int] = set()  # in backoff: not to be started this round
        self._specs: dict[int, JobSpec] = {}
        self._assignments: dict[int, Assignment] = {}
        # per configuration and GPU types: the measured seconds per step of progress and on which GPUs (kept
        # in ``measured_path``, so a restarted service prices with what it learnt), and from them the speed
        # source's factors — estimated iteration ÷ measured, always against the current cost model (a
        # calibration that moved the estimates towards the measured times is not counted twice)
        self.measured_path = measured_path
        self._measured: dict[MeasuredKey, Measured] = load_measured(measured_path) if measured_path else {}
        self._unplannable: dict[int, str] = {}  # job → why the GPUs it was given could not hold a plan
        self._infeasible: dict[tuple[JobConfig, int], str | None] = {}
        self._build_speed()
        self._build_core()

    # -------------------------------------------------------------- the core and the speed source
    def _policy(self) -> Policy:
        return get_policy(self.policy_name)  # an unknown name raises, listing the known ones

    def _build_speed(self) -> None:
        """The speed source of the whole cluster (every node: a Cell's feasibility does not depend on which
        nodes are up), with the factors of what was measured."""
        self.speed = SpeedSource(self.cluster.spec, self.cost, models=self.models)
        self.speed.factors = SpeedFactors(factors_of(self.speed, self._measured))
        self._infeasible.clear()

    def _build_core(self) -> None:
        self.state = ClusterState.from_spec(self.cluster.spec)
        for i, n in enumerate(self.cluster.nodes):
            self.state.up[i] = n.alive
        self.knowledge = PerfTable(self.speed, self.cluster.gpu_counts())
        self.policy = self._policy()
        self.core = Scheduler(
            self.state, self.policy, self.knowledge.view(), round_s=self.round_s,
            restart_estimate=lambda job: self.restart.restart_s,
            relaunch_estimate=lambda job: self.restart.relaunch_cost_s,
        )  # fmt: skip

    def _refresh_knowledge(self) -> None:
        """New rates (speed factors changed): a fresh memo, and the policy forgets its copies."""
        self.knowledge = PerfTable(self.speed, self.cluster.gpu_counts())
        self.core.knowledge = self.knowledge.view()
        self.policy.knowledge_changed()

    @property
    def active_policy(self) -> str:
        return self.policy.name or type(self.policy).__name__

    # -------------------------------------------------------------- knowledge updates
    def set_cost(self, cost: CostModel) -> None:
        """New calibration: every estimate is recomputed; the core, its jobs (arrivals, attained service, last
        moves) and the policy's own state stay. Rebuilding the core here re-submitted every job as a new arrival:
        a time-sharing policy forgot whom it had served and re-decided at once, a move's hysteresis forgot the
        move — after every calibration, which the simulator (one cost model per run) never does."""
        with self._lock:
            self.cost = cost
            self._build_speed()
            self._refresh_knowledge()

    def set_cluster(self, cluster: LiveCluster) -> list[int]:
        """Nodes died or came back; returns the ids of jobs that lost GPUs (they go back to the queue)."""
        with self._lock:
            if cluster.spec != self.cluster.spec:
                self.cluster = cluster
                self._build_speed()
                self._rebuild_keeping_state()
                return []
            evicted: list[int] = []
            for i, (old, new) in enumerate(zip(self.cluster.nodes, cluster.nodes, strict=True)):
                if old.alive and not new.alive:
                    evicted += self.core.node_failed(i, _now())
                elif new.alive and not old.alive:
                    self.core.node_repaired(i, _now())
            self.cluster = cluster
            for jid in evicted:
                self._assignments.pop(jid, None)
            return evicted

    @property
    def restart_cost_s(self) -> float:
        """What the policy is told a move costs now."""
        return self.restart.restart_s

    def observe_restart(self, seconds: float, *, relaunch: bool = False) -> None:
        """Fold one measured move's pause (stop asked → running again) into the belief, and keep it
        (``relaunch``: the new gang adopted no worker, it started afresh)."""
        with self._lock:
            self.restart = self.restart.observed(seconds, relaunch=relaunch)
            if self.restart_path is not None:
                save_restart_belief(self.restart_path, self.restart)

    def _rebuild_keeping_state(self) -> None:
        """A new core for a new cluster shape: the jobs are submitted again at their own arrival times (the
        queue's order is theirs), those holding GPUs bound to them again."""
        specs, assignments = dict(self._specs), dict(self._assignments)
        arrivals = {jid: self.core.jobs[jid].job.arrival_s for jid in specs if jid in self.core.jobs}
        self._specs.clear()
        self._assignments.clear()
        self._build_core()
        for jid in sorted(specs, key=lambda j: (arrivals.get(j, 0.0), j)):
            self._submit(jid, specs[jid], arrivals.get(jid, 0.0))
        self._restore(assignments)

    # -------------------------------------------------------------- a job's speeds
    def cells_of(self, spec: JobSpec) -> JobSpeed:
        """The job's Cells, estimates and plans (shared by jobs of one configuration); raises
        ModelSourceError when its model cannot be loaded or planned."""
        with self._lock:
            config = self.models.register(spec)
            try:
                return self.speed.job(config)
            except ModelSourceError:
                raise
            except ConfigError as e:
                raise ModelSourceError(e.field, e.reason) from None

    def infeasible(self, spec: JobSpec) -> str | None:
        """The planner's reason (``Infeasible: …``) when no Cell of the whole cluster — every node, busy or
        not — can run the job: nothing fits in memory on any GPU type it may use, or the fastest Cell needs
        more than 365 days for its steps; None when some Cell can. Cached per (configuration, steps). Raises
        ModelSourceError when the model cannot be loaded."""
        with self._lock:
            key = (config_of(spec), spec.total_steps)
            if key not in self._infeasible:
                why = self.cells_of(spec).infeasible(spec.total_steps)
                self._infeasible[key] = None if why is None else f"{Reason.INFEASIBLE}: {why}"
            return self._infeasible[key]

    # -------------------------------------------------------------- keeping the core in step with the store
    def _submit(self, jid: int, spec: JobSpec, arrival_s: float) -> None:
        # Cells first: an unloadable model is remembered (it waits with its reason), not retried per rate
        with contextlib.suppress(ModelSourceError):
            self.cells_of(spec)
        self._specs[jid] = spec
        self.core.submit(job_of(spec, jid, arrival_s), arrival_s)

    def _restore(self, assignments: Mapping[int, Assignment]) -> None:
        """Bind jobs that already hold GPUs (server restart, rebuild) without asking the policy."""
        allocs = {jid: self._core_alloc(a) for jid, a in assignments.items() if jid in self.core.pending}
        if allocs:
            d = Decision({**{j: s.allocation for j, s in self.core.running.items()}, **allocs})
            self.core.bind(d, _now())
            self._assignments.update({j: assignments[j] for j in allocs})

    def _core_alloc(self, a: Assignment) -> Allocation:
        per_node: dict[int, int] = {}
        for s in a.slots:
            i = self.cluster.index_of(s.node)
            per_node[i] = per_node.get(i, 0) + 1
        return Allocation(tuple(sorted(per_node.items())), gpus_of(a.gpus), a.plan.n_stages)

    def sync(self, jobs: Sequence[JobInput], now: float) -> None:
        """Tell the core what changed in the store: new jobs (arrivals), jobs that ended (completions or
        removals), jobs that already hold GPUs (restored), measured progress and speed."""
        with self._lock:
            live = {j.id: j for j in jobs if not j.terminal}
            for jid in [j for j in self._specs if j not in live]:
                self._remove(jid, now)
            restore: dict[int, Assignment] = {}
            for jid, j in sorted(live.items()):
                if jid not in self._specs:
                    self._submit(jid, j.spec, j.submitted_at)
                    if j.assignment is not None:
                        restore[jid] = j.assignment
                js = self.core.jobs[jid]
                js.done_iterations = float(j.steps_done)
                js.as_of_s = now
                # a launch in progress is a restart in progress, as the simulator's start and restart delays:
                # policies do not move a job before its gang has come up (live, a second arrival a tick
                # later had migrated a job still launching, which the replay never does)
                js.paused_until_s = now + LAUNCHING_PAUSE_S if j.launching else min(js.paused_until_s, now)
                if _progress_s(j):
                    js.rate_iters_per_s = 1.0 / _progress_s(j)
            self._restore(restore)
            self.held_back = {j.id for j in jobs if not j.terminal and j.not_before > now}
            self._update_factors(live.values())

    def _update_factors(self, jobs: Any) -> None:
        """Each configuration's measured seconds per step of progress per GPU types (its median running job's
        there, on that job's GPUs, once it has done :data:`MEASURED_MIN_STEPS`, from the devices' own timings)
        and from it the factor against the current estimate; a move of more than 15 % refreshes the rates the
        policy sees."""
        seen: dict[MeasuredKey, list[Measured]] = {}
        for j in jobs:
            a = j.assignment
            if a is not None and _progress_s(j) and j.steps_done >= MEASURED_MIN_STEPS and j.measured_own:
                m = Measured(gpus_of(a.gpus), _progress_s(j))
                seen.setdefault((config_of(j.spec).speed_key, types_of(m.gpus)), []).append(m)
        factors = dict(self.speed.factors.measured)
        changed = False
        for key, vals in seen.items():
            m = sorted(vals, key=lambda m: m.step_s)[len(vals) // 2]
            was = self._measured.get(key)
            if was is not None and was.gpus == m.gpus and not _moved(m.step_s, was.step_s):
                continue  # on the same GPUs the factor moves as the measurement does: not enough to refresh
            f = factors_of(self.speed, {key: m}).get(key)
            old = factors.get(key)
            if f is not None and (old is None or _moved(f, old)):
                self._measured[key] = Measured(m.gpus, m.step_s, _finals_on(was, m.gpus))
                factors[key] = f
                changed = True
        if changed:
            if self.measured_path is not None:
                save_measured(self.measured_path, self._measured)
            self.speed.factors = SpeedFactors(factors)
            self._refresh_knowledge()

    def observe_final(self, spec: JobSpec, gpus: Mapping[str, int], step_s: float, steps: int) -> None:
        """An ended allocation's steady seconds per step of progress over its whole run (``steps`` steps) on
        ``gpus``: from :data:`FINAL_MIN_STEPS` steps on it joins the configuration's last figures there, whose
        median becomes its measurement (saved: a restarted service, and a replay of its next run, start from
        it — a running job's first steps, kept until they moved 15 %, were what both started from). The rates
        the policy sees move, as while running, only when the factor moves more than 15 %."""
        if steps < FINAL_MIN_STEPS or not (step_s > 0 and math.isfinite(step_s)):
            return
        with self._lock:
            held = gpus_of(gpus.items())
            key = (config_of(spec).speed_key, types_of(held))
            was = self._measured.get(key)
            finals = (_finals_on(was, held) + (step_s,))[-FINALS_KEPT:]
            m = Measured(held, statistics.median(finals), finals)
            self._measured[key] = m
            if self.measured_path is not None:
                save_measured(self.measured_path, self._measured)
            f = factors_of(self.speed, {key: m}).get(key)
            old = self.speed.factors.measured.get(key)
            if f is not None and (old is None or _moved(f, old)):
                self.speed.factors = SpeedFactors({**self.speed.factors.measured, key: f})
                self._refresh_knowledge()

    def _remove(self, jid: int, now: float) -> None:
        self._unplannable.pop(jid, None)
        self._specs.pop(jid, None)
        self._assignments.pop(jid, None)
        if jid in self.core.running:
            self.core.complete(jid, now)
        elif jid in self.core.pending:
            keep = {j: s.allocation for j, s in self.core.running.items()}
            self.core.bind(Decision(keep, frozenset({jid})), now)

    def release(self, jid: int, now: float) -> None:
        """A job gives its GPUs back but stays (preempted or waiting for a relaunch after a failure)."""
        with self._lock:
            if jid in self.core.running:
                keep = {j: s.allocation for j, s in self.core.running.items() if j != jid}
                self.core.bind(Decision(keep), now)
            self._assignments.pop(jid, None)

    # -------------------------------------------------------------- rounds
    def round(self, now: float, *, force: bool = False, boundary: bool = True) -> Round:
        """One round: the core's tick (``force``: the policy is asked even when no event happened — the
        periodic round: a job out of backoff, or measured speeds that changed the picture; ``boundary``
        False: a tick on an event between periodic rounds, see ``Scheduler.tick``); each changed
        allocation becomes an Assignment with its Plan; pending jobs get their reasons."""
        with self._lock:
            for spec in self._specs.values():  # build Cells before the policy asks (errors → reasons)
                with contextlib.suppress(ModelSourceError):
                    self.cells_of(spec)
            result = self.core.tick(now, force=force, boundary=boundary)
            changes: list[Change] = []
            moved = {ch.job_id for ch in result.changes}
            # GPUs this round leaves where they are; jobs that held GPUs before pick theirs first
            taken = {x for j, a in self._assignments.items() if j not in moved for x in a.slots}
            order = sorted(result.changes, key=lambda ch: (ch.job_id not in self._assignments, ch.job_id))
            for ch in order:
                if ch.job_id in self.held_back and ch.old is None and ch.new is not None:
                    self.release(ch.job_id, now)  # still in backoff after a failure: not yet
                    continue
                old = self._assignments.get(ch.job_id)
                why = str(getattr(ch, "reason", "") or "")
                if ch.new is None:
                    self._assignments.pop(ch.job_id, None)
                    changes.append(Change(ch.job_id, "preempt", old, None, why))
                    continue
                try:
                    new = self._assign(ch.job_id, ch.new, taken)
                except ValueError as e:  # no plan on these GPUs after all: back to the queue, say why
                    self.release(ch.job_id, now)
                    self._unplannable[ch.job_id] = str(e)
                    continue
                taken |= set(new.slots)
                self._unplannable.pop(ch.job_id, None)
                self._assignments[ch.job_id] = new
                # the core's kinds, as the simulator records them: a rescale (here "resize") is other GPU counts
                # or types, a migration the same GPUs on other nodes (a type change read "migrate" here and
                # "rescale" in a replay of the same round)
                kind = {"rescale": "resize"}.get(_kind(ch), _kind(ch))
                note = why
                if old is not None:
                    note = f"{kind}: {old.cell} → {new.cell}" + (f" ({why})" if why else "")
                changes.append(Change(ch.job_id, kind, old, new, note))
            return Round(
                tuple(changes), self._reasons(), self.active_policy, result.decided, result.decision_s
            )

    def _assign(self, jid: int, a: Allocation, held: set[Slot]) -> Assignment:
        """Concrete GPUs for the core's (node, count) placement — the job's own GPUs first, then the lowest
        indices not in ``held`` — and the Cell's Plan pinned to them. Raises ValueError when none fits."""
        from tessera.perf.estimate import estimate_plan
        from tessera.perf.extras import StepExtras

        spec = self._specs[jid]
        cells = self.cells_of(spec)
        mine = self._assignments.get(jid)
        slots: list[Slot] = []
        for i, n in a.placement:
            node = self.cluster.nodes[i]
            own = [s for s in (mine.slots if mine else ()) if s.node == node.name and s not in held][:n]
            rest = [Slot(node.name, k, node.gpu_type) for k in range(node.n_gpus)]
            rest = [s for s in rest if s not in held and s not in own]
            slots += own + rest[: n - len(own)]
        if len(slots) != a.n_gpus:
            raise ValueError(f"job {jid}: the placement {a.placement} has no free GPUs left on its nodes")
        gpus = a.gpus
        stages = a.n_stages or cells.best_stages(gpus) or 1
        devices = None
        if cells.user_model:  # the annotations' plan directly on the placed GPUs (largest memory first)
            order = sorted(slots, key=lambda s: (-get_gpu(s.gpu_type).memory_bytes, s.node, s.index))
            devices = [Device(r, s.gpu_type, node=s.node, local_index=s.index) for r, s in enumerate(order)]
        tuned = cells.tuned(gpus, stages, devices)
        if tuned is None:
            stages = cells.best_stages(gpus) or 1
            tuned = cells.tuned(gpus, stages, devices)
        if tuned is None:
            raise ValueError(f"job {jid}: no plan of {spec.model} fits {dict(gpus)}")
        plan = tuned.plan if devices is not None else pin_plan(tuned.plan, slots)
        # the job's clipping and validation cost time on top of the plan (perf.extras): priced into the estimate
        est = estimate_plan(
            plan, cells.spec, self.cluster.spec, cost=self.cost, extras=StepExtras.of_job(spec)
        )
        label = tuned.label
        # what the policy believes: the cost model's step ÷ the configuration's measured speed factor there (the
        # loop's own per-step work, which the cost model does not price, is in it); the breakdown stays the
        # cost model's. Shown against the runtime's measured step, which has no validation passes in it
        factor, basis = self.speed.factors.resolve(config_of(spec), gpus)
        step_s = est.step_time_s / factor
        meta = {"cell": label, "estimate_basis": basis.value, "speed_factor": factor}
        plan = plan.with_(meta={**plan.meta, **meta})
        detail = {**est.to_dict(), "step_time_s": step_s, "cost_model_step_time_s": est.step_time_s, **meta}
        return Assignment(tuple(slots), label, plan, step_s, detail)

    def _reasons(self) -> dict[int, str]:
        """Why each pending job waits: Backoff, Infeasible (nothing of this cluster can run it), Priority (it
        would fit the GPUs free now, the policy held it back), or Resources."""
        out: dict[int, str] = {}
        for jid in self.core.pending:
            spec = self._specs[jid]
            if jid in self.held_back:
                out[jid] = Reason.BACKOFF
                continue
            if jid in self._unplannable:
                out[jid] = f"{Reason.RESOURCES} ({self._unplannable[jid]})"
                continue
            try:
                why = self.infeasible(spec)
            except ModelSourceError as e:
                out[jid] = f"{Reason.INFEASIBLE}: {e.reason}"
                continue
            if why is not None:
                out[jid] = why
                continue
            opts = self.knowledge.cells(self.core.jobs[jid].job)
            free = self.core.cluster.free_by_type()
            fits_now = any(all(free.get(t, 0) >= n for t, n in c.gpus) for c in opts)
            out[jid] = Reason.PRIORITY if fits_now else Reason.RESOURCES
        return out

    def assignment(self, jid: int) -> Assignment | None:
        with self._lock:
            return self._assignments.get(jid)

    # -------------------------------------------------------------- dry runs
    def _clone(self) -> SchedulingAdapter:
        """A copy whose rounds change nothing here: the core (queue, allocations, free GPUs, pending events)
        and the policy (its state between rounds) deep-copied; the speed source and its memo shared (pure
        caches of the same figures)."""
        c = object.__new__(SchedulingAdapter)
        c.__dict__.update(self.__dict__)
        c._lock = threading.RLock()
        c.held_back = set(self.held_back)
        c._specs = dict(self._specs)
        c._assignments = dict(self._assignments)
        c._unplannable = dict(self._unplannable)
        shared = (self.knowledge, self.core.knowledge, self.speed, self.models, self.cluster, self.cost)
        memo: dict[int, Any] = {id(x): x for x in shared}
        c.core = copy.deepcopy(self.core, memo)
        c.policy = c.core.policy
        c.state = c.core.cluster
        return c

    def dry_run(self, spec: JobSpec, *, job_id: int | None = None, now: float | None = None) -> DryRun:
        """What the next round would give ``spec`` if it were submitted at ``now`` (default: now) as job
        ``job_id`` (default: after every job known): the active policy runs that round on a copy of the live
        state; nothing here changes. Raises ModelSourceError when its model cannot be loaded."""
        with self._lock:
            now = _now() if now is None else now
            speed = self.cells_of(spec)
            jid = job_id if job_id is not None else max((*self.core.jobs, *self._specs, 0)) + 1
            if jid in self.core.jobs:
                raise ValueError(f"job_id {jid} is already known to the scheduler")
            clone = self._clone()
            clone._submit(jid, spec, now)
            r = clone.round(now)
            return dry_run_of(spec, speed, r, jid, clone.assignment(jid))


def _now() -> float:
    import time

    return time.time()


__all__ = [
    "Assignment",
    "Change",
    "DryRun",
    "JobInput",
    "LiveCluster",
    "LiveNode",
    "Round",
    "SchedulingAdapter",
    "Slot",
    "pin_plan",
]


def _moved(new: float, old: float) -> bool:
    """Whether a measurement or factor moved enough (more than 15 %) to re-price what the policy sees: smaller
    moves are noise on a shared machine, and every re-pricing makes the policy forget its copies."""
    return abs(math.log(new / old)) > math.log(1.15)


def _finals_on(was: Measured | None, gpus: GPUs) -> tuple[float, ...]:
    """The ended allocations' figures a configuration's measurement keeps: those on the same GPUs only."""
    return was.finals_s if was is not None and was.gpus == gpus else ()


def _progress_s(job: JobInput) -> float | None:
    """Seconds a step of progress costs the job now: its loop iteration where measured (the training step
    plus what the service's loop adds to every step: stop flag, validation, data; checkpoints, a cost per
    job, left out), else the training step alone. A job's time to finish, so its rate, follows the former."""
    return job.measured_step_s or job.measured_iter_s


_log = logging.getLogger(__name__)
MEASURED_FILE = "speed_measured.json"  # in the cost directory: what the factors refine it with
RESTART_FILE = "restart_measured.json"  # in the cost directory: the restart-cost belief learnt from moves
# a job's first steps carry first-call costs (a 3-step warm-up job's measurement read 2.8x its estimate): a
# configuration's factor on a GPU type is kept only from jobs that did at least this many
MEASURED_MIN_STEPS = 10
# an ended allocation's steady step joins its configuration's measurement from this many steps on; the median
# of the last FINALS_KEPT such figures is the measurement (on this 2-core box one configuration's figure moved
# 15-20 % from run to run with what ran on the other core)
FINAL_MIN_STEPS = 20
FINALS_KEPT = 5
# how far past a round a launching job's pause reaches: past ``now`` (so it is not movable this round),
# never long enough to matter to a remaining-time estimate
LAUNCHING_PAUSE_S = 1e-3


@dataclass(frozen=True)
class Measured:
    """A configuration's measured seconds per step of progress, and the GPUs it ran on. ``finals_s``: the
    whole-allocation steady steps of its last allocations on these GPUs (at most :data:`FINALS_KEPT`), whose
    median ``step_s`` is once one has ended — one allocation's figure moves with whatever ran beside it."""

    gpus: GPUs
    step_s: float
    finals_s: tuple[float, ...] = ()


MeasuredKey = tuple[JobConfig, TypesKey]  # a configuration's speed_key and the GPU types it ran on


def factors_of(speed: SpeedSource, measured: Mapping[MeasuredKey, Measured]) -> dict[MeasuredKey, float]:
    """Each measurement's factor against ``speed``'s cost model: the configuration's estimated iteration on
    the measured GPUs ÷ the measured seconds (left out where it cannot be planned there any more)."""
    out = {}
    for key, m in measured.items():
        try:
            rate = speed.job(key[0]).true_rate(m.gpus)
        except ValueError:
            continue
        if rate > 0 and m.step_s > 0:
            out[key] = (1.0 / rate) / m.step_s
    return out


def save_measured(path: Path, measured: Mapping[MeasuredKey, Measured]) -> None:
    """The measurements as JSON rows (each configuration's fields, its GPUs and seconds), replaced atomically."""
    rows = [
        {**{f.name: getattr(k, f.name) for f in fields(k) if f.init}, "gpus": [list(g) for g in m.gpus],
         "step_s": m.step_s, "finals_s": list(m.finals_s)}
        for (k, _), m in measured.items()
    ]  # fmt: skip
    _replace_json(path, rows)


def _replace_json(path: Path, value: object) -> None:
    """``value`` as ``path``'s JSON, replaced atomically; a write that fails is dropped (what the service
    learnt refines its estimates; its next measurements learn it again)."""
    tmp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(value, indent=1))
        os.replace(tmp, path)


def load_measured(path: Path) -> dict[MeasuredKey, Measured]:
    """The measurements :func:`save_measured` wrote; none where the file is missing, and none (logged) where it
    cannot be read: they refine estimates the service re-learns from its next steps."""
    if not path.exists():
        return {}
    try:
        out = {}
        for row in json.loads(path.read_text()):
            m = Measured(
                gpus_of((str(t), int(n)) for t, n in row.pop("gpus")), float(row.pop("step_s")),
                tuple(float(x) for x in row.pop("finals_s", ()) or ()),
            )  # fmt: skip
            for k in ("gpu_types", "exclude_gpu_types"):
                row[k] = tuple(row.get(k) or ())
            if m.step_s > 0 and math.isfinite(m.step_s) and m.gpus:
                out.setdefault(
                    (JobConfig(**row).speed_key, types_of(m.gpus)), m
                )  # rows saved before speed_key: first kept
        return out
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
        _log.warning(
            "speed measurements %s: unreadable (%s: %s); starting without them", path, type(e).__name__, e
        )
        return {}


def save_restart_belief(path: Path, belief: RestartBelief) -> None:
    """The belief as JSON, replaced atomically (beside the speed measurements, same rules)."""
    _replace_json(path, {
        "restart_s": belief.restart_s, "moves_seen": belief.moves_seen,
        "relaunch_s": belief.relaunch_cost_s, "relaunches_seen": belief.relaunches_seen,
    })  # fmt: skip


def load_restart_belief(path: Path | None, guess_s: float) -> RestartBelief:
    """The belief :func:`save_restart_belief` kept, or the configured guess where there is none (no file, or
    one that cannot be read — logged: the next measured move re-learns it)."""
    if path is None or not path.exists():
        return RestartBelief(guess_s)
    try:
        row = json.loads(path.read_text())
        relaunch = row.get("relaunch_s")  # absent in a belief kept before relaunches were told apart
        return RestartBelief(
            float(row["restart_s"]), int(row["moves_seen"]),
            None if relaunch is None else float(relaunch), int(row.get("relaunches_seen", 0)),
        )  # fmt: skip
    except (OSError, ValueError, TypeError, KeyError) as e:
        _log.warning("restart belief %s: unreadable (%s: %s); starting from %.1f s", path, type(e).__name__, e,
                     guess_s)  # fmt: skip
        return RestartBelief(guess_s)

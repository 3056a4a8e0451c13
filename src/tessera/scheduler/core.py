"""The scheduler core, shared by the simulator and the live service: queue, running jobs, allocations, events.

Backends report events — :meth:`Scheduler.submit` (arrival), :meth:`~Scheduler.complete`, :meth:`~Scheduler.
node_failed` / :meth:`~Scheduler.node_repaired`, :meth:`~Scheduler.rescale_done` — and call :meth:`~Scheduler.
tick` at every round boundary. A tick asks the policy for a decision when something happened (or every round
for time-sharing policies), validates it (capacity, nodes up, memory fit) and binds it: it returns the
:class:`Change` list the backend must carry out (start, resume, rescale, migrate, preempt, drop).

Progress is a linear model per job (``JobState.done_at``): the core folds it up to ``now`` whenever a job's
allocation changes; the backend sets the new speed (``rate_iters_per_s``) and restart delay
(``paused_until_s``) of every changed job — the simulator from the cost model's truth, the service from
telemetry.
"""

from __future__ import annotations

import bisect
import enum
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tessera.scheduler.knowledge import Knowledge
from tessera.scheduler.policy import (
    ActiveJobs,
    Decision,
    Policy,
    PolicyError,
    RoundEvents,
    SchedulingContext,
    Why,
    fmt_gpus,
)
from tessera.scheduler.state import Allocation, ClusterState, Job, JobState, JobStatus


class ChangeKind(enum.StrEnum):
    """What a :class:`Change` asks of the backend. A ``str``, so ``kind == "start"`` keeps working."""

    START = "start"  # first launch
    RESUME = "resume"  # launch again after a preemption or a lost node
    RESCALE = "rescale"  # other GPU counts or types: checkpoint, relaunch on the new GPUs
    MIGRATE = "migrate"  # the same GPU counts and types on other nodes
    PREEMPT = "preempt"  # back to the queue
    DROP = "drop"  # given up for good (a deadline that cannot be met)


@dataclass(frozen=True)
class Change:
    """One thing the backend must do after a round: ``old`` / ``new`` the allocations before and after, and
    ``reason`` why, with figures — the policy's (:attr:`Decision.reasons`) or, when it gave none, the core's
    generic one — for the job's log, the API and the dashboard."""

    job_id: int
    kind: ChangeKind
    old: Allocation | None
    new: Allocation | None
    why: Why = ""  # the reason as given: worded when ``reason`` is first read (a simulation never reads it)

    @property
    def reason(self) -> str:
        if callable(self.why):
            object.__setattr__(self, "why", self.why())  # worded once, then kept
        return str(self.why)


@dataclass(frozen=True)
class RoundResult:
    changes: tuple[Change, ...]
    decided: bool  # the policy was called
    decision_s: float  # wall time the policy took (0 when not called)


class Scheduler:
    """Queue + running jobs + the real cluster state; one policy decides, the core validates and binds."""

    def __init__(
        self,
        cluster: ClusterState,
        policy: Policy,
        knowledge: Knowledge,
        *,
        round_s: float = 300.0,
        keep_in_node: bool = True,
        restart_estimate: Callable[[Job], float] | None = None,
        relaunch_estimate: Callable[[Job], float] | None = None,
    ) -> None:
        if round_s <= 0:
            raise ValueError(f"round_s must be > 0, got {round_s}")
        self.cluster = cluster.copy()
        self.policy = policy
        self.knowledge = knowledge
        self.round_s = round_s
        self.keep_in_node = keep_in_node
        self.restart_estimate = restart_estimate
        self.relaunch_estimate = relaunch_estimate
        self.jobs: dict[int, JobState] = {}
        self.pending: dict[int, JobState] = {}
        self.running: dict[int, JobState] = {}
        # the running jobs in (arrival, id) order, as every round's context lists them; None when running changed
        self._running_order: list[JobState] | None = None
        # pending jobs kept sorted by (arrival, id) incrementally: bursts queue thousands of jobs
        self._pkeys: list[tuple[float, int]] = []
        self._pvals: list[JobState] = []
        self._arrived: list[int] = []
        self._finished: list[int] = []
        self._evicted: list[int] = []
        self._failed: list[int] = []
        self._repaired: list[int] = []
        self._resumed: list[int] = []

    # ------------------------------------------------------------------ events from the backend
    def submit(self, job: Job, now_s: float) -> JobState:
        if job.job_id in self.jobs:
            raise ValueError(f"job {job.job_id} was already submitted")
        js = JobState(job=job, as_of_s=now_s, last_change_s=now_s)
        self.jobs[job.job_id] = js
        self._to_pending(js)
        self._arrived.append(job.job_id)
        return js

    def complete(self, job_id: int, now_s: float) -> JobState:
        js = self.running.pop(job_id, None)
        if js is None:
            raise ValueError(f"job {job_id} is not running, it cannot complete")
        self._running_order = None
        self._fold(js, now_s)
        assert js.allocation is not None
        self.cluster.give(js.allocation.placement)
        js.done_iterations = js.job.total_iterations
        js.status, js.finish_s, js.allocation = JobStatus.FINISHED, now_s, None
        js.rate_iters_per_s = 0.0
        self._finished.append(job_id)
        return js

    def rescale_done(self, job_id: int, now_s: float) -> None:
        """A restart finished: the job is computing again (informational for policies)."""
        self._resumed.append(job_id)

    def node_failed(self, node: int, now_s: float) -> list[int]:
        """The node goes down; the jobs on it lose their GPUs (back to the queue). Returns their ids."""
        if not self.cluster.up[node]:
            return []
        hit = [js for js in self.running.values() if js.allocation and node in js.allocation.nodes]
        for js in hit:
            self._fold(js, now_s)
            assert js.allocation is not None
            self.cluster.give(js.allocation.placement)
            js.allocation, js.rate_iters_per_s, js.last_change_s = None, 0.0, now_s
            del self.running[js.job_id]
            self._running_order = None
            self._to_pending(js)
            self._evicted.append(js.job_id)
        self.cluster.up[node] = False
        self._failed.append(node)
        return [js.job_id for js in hit]

    def node_repaired(self, node: int, now_s: float) -> None:
        self.cluster.up[node] = True
        self._repaired.append(node)

    # ------------------------------------------------------------------ rounds
    @property
    def active(self) -> bool:
        return bool(self.pending or self.running)

    def pending_in_order(self) -> list[JobState]:
        return self._pvals

    def _unpend(self, jid: int) -> JobState | None:
        js = self.pending.pop(jid, None)
        if js is not None:
            k = bisect.bisect_left(self._pkeys, (js.job.arrival_s, jid))
            del self._pkeys[k], self._pvals[k]
        return js

    def events(self) -> RoundEvents:
        return RoundEvents(
            arrived=tuple(self._arrived),
            finished=tuple(self._finished),
            evicted=tuple(self._evicted),
            nodes_failed=tuple(self._failed),
            nodes_repaired=tuple(self._repaired),
            resumed=tuple(self._resumed),
        )

    def context(self, now_s: float, *, at_round: bool = True) -> SchedulingContext:
        return SchedulingContext(
            now_s=now_s,
            cluster=self.cluster,
            knowledge=self.knowledge,
            pending=self.pending_in_order(),
            running=self.running_in_order(),
            events=self.events(),
            round_s=self.round_s,
            keep_in_node=self.keep_in_node,
            restart_estimate=self.restart_estimate,
            relaunch_estimate=self.relaunch_estimate,
            jobs=ActiveJobs(self.running, self.pending),
            at_round=at_round,
        )

    def running_in_order(self) -> list[JobState]:
        """The running jobs by (arrival, id), sorted again only after the running set changed: at scale most
        rounds change a few of thousands."""
        if self._running_order is None:
            self._running_order = sorted(self.running.values(), key=lambda j: (j.job.arrival_s, j.job_id))
        return self._running_order

    def tick(self, now_s: float, *, force: bool = False, boundary: bool = True) -> RoundResult:
        """A round boundary: decide (when due), validate, bind. ``force`` asks the policy even when no event
        happened (the live service's periodic round: a job out of backoff, or measured speeds that moved).
        ``boundary`` False: a control tick between rounds (the live service's on an event, and a replay's of
        it), where the policy is asked on events only — an ``every_round`` policy time-shares by rounds, so
        asking it at every tick swapped jobs between rounds, and at other ticks live than replayed."""
        ev = self.events()
        due = (force or ev.any or (self.policy.every_round and boundary)) and bool(
            self.pending or self.running
        )
        self._clear_events()
        if not due:
            return RoundResult((), False, 0.0)
        t0 = time.perf_counter()
        ctx = self.context(now_s, at_round=boundary)
        ctx.events = ev
        decision = self.policy.schedule(ctx)
        if decision is None:
            decision = ctx.decision()
        dt = time.perf_counter() - t0
        self.validate(decision)
        return RoundResult(tuple(self.bind(decision, now_s)), True, dt)

    def _clear_events(self) -> None:
        for lst in (
            self._arrived,
            self._finished,
            self._evicted,
            self._failed,
            self._repaired,
            self._resumed,
        ):
            lst.clear()

    def validate(self, d: Decision) -> None:
        """Every allocation names an active job, fits in memory, matches its nodes' types, and the total on
        every node is within what the node has (and the node is up)."""
        name = self.policy.name or type(self.policy).__name__
        # GPUs in use after the decision: what is held now, minus what changes hands, plus the new allocations
        used = self.cluster.capacity - self.cluster.free
        changed: list[tuple[int, Allocation]] = []
        for jid, a in d.allocations.items():
            js = self.running.get(jid)
            if js is not None and js.allocation is a:
                continue  # unchanged: valid when it was bound
            if js is None and jid not in self.pending:
                raise PolicyError(f"policy {name}: job {jid} is not pending or running")
            if jid in d.dropped:
                raise PolicyError(f"policy {name}: job {jid} is both allocated and dropped")
            if not a.placement or self.cluster.gpus_of_placement(a.placement) != a.gpus:
                raise PolicyError(f"policy {name}: job {jid}: placement {a.placement} does not hold {a.gpus}")
            for i, n in a.placement:
                if n <= 0 or not self.cluster.up[i]:
                    raise PolicyError(f"policy {name}: job {jid}: node {i} is down or given {n} GPUs")
                used[i] += n
            changed.append((jid, a))
        for jid, js in self.running.items():
            a = d.allocations.get(jid)
            if a is not js.allocation and js.allocation is not None:
                for i, n in js.allocation.placement:
                    used[i] -= n
        over = used > self.cluster.capacity
        if over.any():
            i = int(over.nonzero()[0][0])
            raise PolicyError(
                f"policy {name}: node {self.cluster.nodes[i].name} given {used[i]} GPUs of {self.cluster.capacity[i]}"
            )
        for jid, a in changed:
            job = self.jobs[jid].job
            if not self.knowledge.fits(job, a.gpus):
                raise PolicyError(f"policy {name}: job {jid} ({job.model}) does not fit in {dict(a.gpus)}")
        for jid in d.dropped:
            if jid not in self.pending and jid not in self.running:
                raise PolicyError(f"policy {name}: dropped job {jid} is not active")

    def bind(self, d: Decision, now_s: float) -> list[Change]:
        """Finalize a validated decision: release, then take; update every changed job's state."""
        changes: list[Change] = []
        # 1. jobs that stop holding GPUs (preempted, dropped) or change them: release first
        for jid, js in list(self.running.items()):
            new = d.allocations.get(jid)
            old = js.allocation
            assert old is not None
            if new is old:
                continue  # kept as it was (most jobs of a round at scale)
            if new is not None and new.same_gpus(old):
                if new.n_stages != old.n_stages and new.n_stages is not None:
                    js.allocation = Allocation(old.placement, old.gpus, new.n_stages)
                continue
            self._fold(js, now_s)
            self.cluster.give(old.placement)
            js.allocation, js.rate_iters_per_s = None, 0.0
            del self.running[jid]
            self._running_order = None
            if new is None:
                js.last_change_s = now_s
                if jid in d.dropped:
                    js.status = JobStatus.DROPPED
                    js.finish_s = now_s
                    changes.append(self._change(d, js, ChangeKind.DROP, old, None))
                else:
                    self._to_pending(js)
                    changes.append(self._change(d, js, ChangeKind.PREEMPT, old, None))
            else:
                js.meta["_old"] = old
        for jid in d.dropped:
            js = self._unpend(jid)
            if js is not None:
                js.status, js.finish_s, js.last_change_s = JobStatus.DROPPED, now_s, now_s
                changes.append(self._change(d, js, ChangeKind.DROP, None, None))
        # 2. take the new allocations
        for jid, a in d.allocations.items():
            js = self.jobs[jid]
            if js.status is JobStatus.RUNNING and js.allocation is not None:
                continue  # kept
            old = js.meta.pop("_old", None)
            self.cluster.take(a.placement)
            if js.status is JobStatus.PENDING:
                self._unpend(jid)
            self._fold(js, now_s)
            js.status, js.allocation, js.last_change_s = JobStatus.RUNNING, a, now_s
            self.running[jid] = js
            self._running_order = None
            if old is not None:
                kind = ChangeKind.MIGRATE if old.gpus == a.gpus else ChangeKind.RESCALE
                js.restarts += 1
            elif js.first_start_s is None:
                kind = ChangeKind.START
                js.first_start_s = now_s
            else:
                kind = ChangeKind.RESUME
                js.restarts += 1
            changes.append(self._change(d, js, kind, old, a))
        return changes

    def _change(
        self, d: Decision, js: JobState, kind: ChangeKind, old: Allocation | None, new: Allocation | None
    ) -> Change:
        why = d.why(js.job_id) or (lambda: self.generic_reason(js.job, kind, old, new))
        return Change(js.job_id, kind, old, new, why)

    def generic_reason(
        self, job: Job, kind: ChangeKind, old: Allocation | None, new: Allocation | None
    ) -> str:
        """What the core can say about a change the policy did not explain: the GPUs and the Cell estimate
        (``start: 2×A100-40GB, est. 1.9 it/s``; ``rescale 1×A100-40GB → 2×A100-40GB: est. 1.0 → 1.9 it/s``)."""
        name = self.policy.name or type(self.policy).__name__

        def est(a: Allocation) -> float:
            return self.knowledge.cell_rate(job, a.gpus, a.n_stages)

        if kind in (ChangeKind.START, ChangeKind.RESUME) and new is not None:
            r = est(new)
            return f"{kind}: {fmt_gpus(new.gpus)}" + (f", est. {r:.3g} it/s" if r > 0 else "")
        if kind in (ChangeKind.RESCALE, ChangeKind.MIGRATE) and old is not None and new is not None:
            r0, r1 = est(old), est(new)
            figures = f": est. {r0:.3g} → {r1:.3g} it/s" if r0 > 0 and r1 > 0 else ""
            return f"{kind} {fmt_gpus(old.gpus)} → {fmt_gpus(new.gpus)}{figures} (policy {name})"
        if kind is ChangeKind.PREEMPT:
            return f"preempted by policy {name} (no reason given)"
        return f"dropped by policy {name}"

    # ------------------------------------------------------------------ helpers
    def _to_pending(self, js: JobState) -> None:
        js.status = JobStatus.PENDING
        self.pending[js.job_id] = js
        key = (js.job.arrival_s, js.job_id)
        k = bisect.bisect_left(self._pkeys, key)
        self._pkeys.insert(k, key)
        self._pvals.insert(k, js)

    @staticmethod
    def _fold(js: JobState, now_s: float) -> None:
        """Fold the linear progress model up to ``now_s`` (before the allocation or speed changes)."""
        js.done_iterations = js.done_at(now_s)
        js.attained_gpu_s = js.attained_at(now_s)
        js.as_of_s = now_s

    def finished(self) -> Iterable[JobState]:
        return (js for js in self.jobs.values() if js.status is JobStatus.FINISHED)

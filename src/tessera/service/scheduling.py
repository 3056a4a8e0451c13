"""The service's one door to scheduling: live jobs + the live cluster in, GPU assignments with Plans out.

The decisions come from the shared scheduler core (:class:`tessera.scheduler.Scheduler`) running the
``tessera`` policy (Crius's Cell scheduling with Frenzy's placement; any registered policy by name) — the very
code the simulator runs. This module only translates between the service's world and the core's:

* jobs: the store's rows ↔ the core's ``Job`` / ``JobState`` (events: arrival, completion, node failure);
* knowledge: each job's Cells come from its own ModelSpec (zoo, Hugging Face config or traced entrypoint)
  through :class:`ServiceRates`, honouring ``exclude_gpu_types`` and ``max_gpus``;
* allocations: the core's (node, count) placement ↔ concrete GPUs (node, index) and the Cell's Plan, tuned
  inside the Cell and pinned to those GPUs (:class:`Assignment`);
* pending reasons (``Resources``, ``Priority``, ``Infeasible: …``), which the core does not keep.

:meth:`SchedulingAdapter.dry_run` is what ``tessera submit --dry-run`` shows.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tessera.hardware import ClusterSpec
from tessera.jobs import JobSpec
from tessera.perf.costmodel import CostModel
from tessera.plan import Device, Plan
from tessera.scheduler import (
    Allocation,
    ClusterState,
    Decision,
    Job,
    PerfTable,
    Policy,
    Scheduler,
    get_policy,
    gpus_of,
)
from tessera.service.model_source import ModelSourceError, model_spec, seq_len_for
from tessera.service.states import Reason


# ------------------------------------------------------------------------------------------ the live world
@dataclass(frozen=True)
class Slot:
    """One GPU: its node (the cluster spec's node name), index within the node, and type."""

    node: str
    index: int
    gpu_type: str

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "index": self.index, "gpu_type": self.gpu_type}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Slot:
        return cls(str(d["node"]), int(d["index"]), str(d["gpu_type"]))


@dataclass(frozen=True)
class LiveNode:
    name: str
    gpu_type: str
    n_gpus: int
    alive: bool = True


@dataclass(frozen=True)
class LiveCluster:
    """The cluster as the backend sees it now: its spec (names, links) and which nodes are alive. Node order
    is the spec's (``spec.nodes()``), which is also the core's node index."""

    spec: ClusterSpec
    nodes: tuple[LiveNode, ...]

    @classmethod
    def from_spec(cls, spec: ClusterSpec) -> LiveCluster:
        return cls(spec, tuple(LiveNode(n.name, n.gpu_type, n.n_gpus) for n in spec.nodes()))

    def slots(self) -> list[Slot]:
        return [Slot(n.name, i, n.gpu_type) for n in self.nodes if n.alive for i in range(n.n_gpus)]

    def gpu_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for n in self.nodes:
            if n.alive:
                out[n.gpu_type] = out.get(n.gpu_type, 0) + n.n_gpus
        return out

    def index_of(self, node: str) -> int:
        for i, n in enumerate(self.nodes):
            if n.name == node:
                return i
        raise KeyError(node)


@dataclass(frozen=True)
class Assignment:
    """What a job runs on: concrete GPUs, the Cell, the Plan pinned to those GPUs and its estimate."""

    slots: tuple[Slot, ...]
    cell: str
    plan: Plan
    estimate_iter_s: float
    estimate: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def gpus(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.slots:
            out[s.gpu_type] = out.get(s.gpu_type, 0) + 1
        return dict(sorted(out.items()))

    @property
    def n_gpus(self) -> int:
        return len(self.slots)

    def same_gpus(self, other: Assignment | None) -> bool:
        return other is not None and set(self.slots) == set(other.slots)

    def to_dict(self) -> dict[str, Any]:
        return {
            "slots": [s.to_dict() for s in self.slots],
            "gpus": self.gpus,
            "cell": self.cell,
            "plan": self.plan.to_dict(),
            "estimate_iter_s": self.estimate_iter_s,
            "estimate": self.estimate,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Assignment:
        return cls(
            tuple(Slot.from_dict(s) for s in d["slots"]),
            str(d["cell"]),
            Plan.from_dict(d["plan"]),
            float(d["estimate_iter_s"]),
            dict(d.get("estimate") or {}),
        )


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
    not_before: float = 0.0  # backoff after a failure: not (re)started before this time


@dataclass(frozen=True)
class Change:
    """One thing the backend must do: ``kind`` = start | resume | resize | migrate | preempt."""

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


# ------------------------------------------------------------------------------------------ per-job Cells
_PLANNING_FIELDS = (
    "model", "entrypoint", "global_batch", "seq_len", "precision", "optimizer", "recompute", "gpu_types",
    "exclude_gpu_types", "max_gpus",
)  # fmt: skip


def planning_key(spec: JobSpec) -> str:
    """What a job's Cells depend on: jobs equal in these share one estimator (and one throughput config)."""
    return repr(tuple(getattr(spec, f) for f in _PLANNING_FIELDS))


@dataclass(frozen=True)
class CellChoice:
    shape: Any  # planning.cells.CellShape
    iteration_time_s: float
    samples_per_s: float
    max_device_bytes: float
    feasible: bool

    @property
    def gpus(self) -> dict[str, int]:
        return dict(self.shape.gpus)

    @property
    def n_gpus(self) -> int:
        return int(self.shape.n_gpus)

    @property
    def label(self) -> str:
        return str(self.shape.label)


@dataclass(frozen=True)
class Tuned:
    """The Plan chosen inside a Cell (devices not yet pinned) with its estimate."""

    plan: Plan
    estimate: Any  # perf.estimate.Estimate
    label: str


def packed_devices(cluster: ClusterSpec, gpus: Mapping[str, int]) -> list[Device]:
    """Devices of these types packed node by node in the cluster's order, largest memory first (Whale: the
    first pipeline stages hold the most activations); ranks in that order."""
    from tessera.hardware import get_gpu

    out: list[Device] = []
    for t in sorted(gpus, key=lambda t: (-get_gpu(t).memory_bytes, t)):
        left = gpus[t]
        for node in cluster.nodes():
            if node.gpu_type != t or left <= 0:
                continue
            for k in range(min(left, node.n_gpus)):
                out.append(Device(len(out), t, node=node.name, local_index=k))
            left -= min(left, node.n_gpus)
        for k in range(left):
            out.append(Device(len(out), t, node=f"{t.lower()}-extra", local_index=k))
    return out


class JobCells:
    """A job's Cells on the cluster (estimated lazily, cached by the estimator) and the Plan of any of them.

    Zoo and Hugging Face models get the Cell-guided tuner's plan. A user's own model (entrypoint) gets its
    Whale annotations (or data-parallel stages when it has none) with hardware-aware balance: the runtime
    cannot tensor-shard layers it does not know, so only GPU counts its annotations can use are allowed."""

    def __init__(
        self, job: JobSpec, cluster: ClusterSpec, available: Mapping[str, int], cost: CostModel
    ) -> None:
        from tessera.planning.cells import CellEstimator
        from tessera.planning.planner import settings_for

        self.job = job
        self.cluster = cluster
        self.cost = cost
        self.spec = model_spec(job)
        self.settings = settings_for(job, self.spec)
        if job.entrypoint:
            self.settings = replace(self.settings, seq_len=seq_len_for(job) or self.settings.seq_len)
        self.available = dict(available)
        self.estimator = CellEstimator(self.spec, self.settings, cluster, cost, recompute=job.recompute)
        self._tuned: dict[Any, Tuned | None] = {}
        self._ranked: list[CellChoice] | None = None
        self._usable: dict[tuple[tuple[str, int], ...], bool] = {}

    @property
    def user_model(self) -> bool:
        return self.job.entrypoint is not None

    def allowed(self, gpus: Mapping[str, int]) -> bool:
        if any(t in self.job.exclude_gpu_types for t in gpus):
            return False
        if self.job.max_gpus and sum(gpus.values()) > self.job.max_gpus:
            return False
        if self.user_model:
            key = tuple(sorted(gpus.items()))
            if key not in self._usable:
                S = self.stage_options(gpus)
                plan = self._entry_plan(gpus, S[0]) if S else None
                self._usable[key] = plan is not None and plan.world_size == sum(gpus.values())
            return self._usable[key]
        return True

    def stage_options(self, gpus: Mapping[str, int]) -> tuple[int, ...]:
        from tessera.planning.cells import stage_counts

        n = sum(gpus.values())
        if self.user_model:
            from tessera.service.model_source import annotated, entrypoint_module

            if annotated(self.job):
                from tessera.runtime.annotations import _groups, current_config

                return (len(_groups(entrypoint_module(self.job), current_config())),)
        return tuple(stage_counts(n, self.spec.n_layers, self.settings.global_batch))

    def cell(self, gpus: Mapping[str, int], n_stages: int) -> Any:
        """The planning Cell (None when the shape cannot hold the model or is not allowed for the job)."""
        from tessera.planning.cells import CellShape

        if not self.allowed(gpus):
            return None
        return self.estimator.estimate(CellShape.of(gpus, n_stages))

    def rate(self, gpus: Mapping[str, int], n_stages: int) -> float:
        """Iterations/s of the Cell (0.0: does not fit, not allowed, or the estimator failed on it)."""
        try:
            c = self.cell(gpus, n_stages)
        except (ValueError, KeyError, ArithmeticError):
            return 0.0
        return 1.0 / c.iteration_time_s if c is not None and c.feasible and c.iteration_time_s > 0 else 0.0

    def best_stages(self, gpus: Mapping[str, int]) -> int | None:
        best, arg = 0.0, None
        for s in self.stage_options(gpus):
            r = self.rate(gpus, s)
            if r > best:
                best, arg = r, s
        return arg

    def ranked(self) -> list[CellChoice]:
        """Every Cell shape of the job on the whole cluster (Crius/Frenzy: N/2, N, 2N per type and mixes)."""
        if self._ranked is None:
            from tessera.planning.cells import job_shapes

            shapes = job_shapes(
                self.spec, self.settings, self.available, prefer=self.job.gpu_types,
                exclude=self.job.exclude_gpu_types, max_gpus=self.job.max_gpus,
            )  # fmt: skip
            shapes = [sh for sh in shapes if self.allowed(dict(sh.gpus))]
            if self.user_model:
                shapes = [sh for sh in shapes if sh.n_stages in self.stage_options(dict(sh.gpus))]
            self._ranked = [
                CellChoice(
                    c.shape,
                    c.iteration_time_s,
                    c.samples_per_s,
                    float(max(c.estimate.device_bytes_per_device or (0.0,))),
                    c.feasible,
                )
                for c in self.estimator.estimate_many(shapes)
            ]
        return self._ranked

    def _entry_plan(
        self, gpus: Mapping[str, int], n_stages: int, devices: Sequence[Device] | None = None
    ) -> Plan | None:
        from tessera.service.model_source import entrypoint_plan

        devs = list(devices) if devices is not None else packed_devices(self.cluster, gpus)
        try:
            return entrypoint_plan(self.job, devs, n_stages, self.settings.seq_len)
        except ValueError:
            return None

    def tuned(
        self, gpus: Mapping[str, int], n_stages: int, devices: Sequence[Device] | None = None
    ) -> Tuned | None:
        """The Plan inside the Cell: Cell-guided tuning (zoo / HF models), or the user model's annotations on
        ``devices`` (default: packed on the cluster's nodes)."""
        from tessera.planning.cells import CellShape

        shape = CellShape.of(gpus, n_stages)
        if self.user_model:
            from tessera.perf.estimate import estimate_plan

            plan = self._entry_plan(gpus, n_stages, devices)
            if plan is None:
                return None
            est = estimate_plan(plan, self.spec, self.cluster, cost=self.cost)
            return Tuned(plan, est, shape.label)
        if shape not in self._tuned:
            from tessera.planning.tuner import tune

            t = tune(self.estimator, shape)
            self._tuned[shape] = Tuned(t.plan, t.estimate, t.cell.label) if t is not None else None
        return self._tuned[shape]


class ServiceRates:
    """The core's RateSource over the jobs' own Cells (iterations/s; 0.0 = does not fit or not allowed).

    Every rate is the Cell estimate times the job configuration's *speed factor* — estimated ÷ measured
    iteration time of its running allocations (the cluster-wide median for configurations not measured yet).
    Relative speeds (which Cell is faster) stay the estimator's; absolute time is what was measured, so a
    policy weighing a restart against the time a job has left weighs seconds that are real."""

    def __init__(self, adapter: SchedulingAdapter) -> None:
        self.adapter = adapter

    def _cells(self, config: tuple[str, int]) -> JobCells | None:
        return self.adapter.cells_for_key(config[0])

    def stages(self, config: tuple[str, int], gpus: tuple[tuple[str, int], ...]) -> tuple[int, ...]:
        c = self._cells(config)
        return c.stage_options(dict(gpus)) if c else ()

    def cell(self, config: tuple[str, int], gpus: tuple[tuple[str, int], ...], n_stages: int) -> float:
        c = self._cells(config)
        return c.rate(dict(gpus), n_stages) * self.adapter.speed_factor(config[0]) if c else 0.0

    def dp(self, config: tuple[str, int], gpu_type: str, n_gpus: int) -> float:
        c = self._cells(config)
        return c.rate({gpu_type: n_gpus}, 1) * self.adapter.speed_factor(config[0]) if c else 0.0

    def true(self, config: tuple[str, int], gpus: tuple[tuple[str, int], ...]) -> float:
        c = self._cells(config)
        if c is None:
            return 0.0
        best = max((c.rate(dict(gpus), s) for s in c.stage_options(dict(gpus))), default=0.0)
        return best * self.adapter.speed_factor(config[0])


def infeasible_reason(job: JobSpec, available: Mapping[str, int]) -> str:
    types = [t for t in available if t not in job.exclude_gpu_types]
    if not types:
        return f"{Reason.INFEASIBLE}: every GPU type of the cluster is excluded"
    cap = f" within max_gpus {job.max_gpus}" if job.max_gpus else ""
    return f"{Reason.INFEASIBLE}: no plan fits in memory on {', '.join(sorted(types))}{cap}"


# ------------------------------------------------------------------------------------------ slots and Plans
def pin_plan(plan: Plan, slots: Sequence[Slot]) -> Plan:
    """The Plan with every device moved onto the placed GPUs of its type (stage order kept)."""
    by_type: dict[str, list[Slot]] = {}
    for s in sorted(slots, key=lambda s: (s.node, s.index)):
        by_type.setdefault(s.gpu_type, []).append(s)
    stages = []
    for st in plan.stages:
        devs = []
        for d in st.devices:
            pool = by_type.get(d.gpu_type)
            if not pool:
                raise ValueError(f"plan device {d.rank} wants a {d.gpu_type}, the placement has none left")
            s = pool.pop(0)
            devs.append(Device(d.rank, s.gpu_type, node=s.node, local_index=s.index))
        stages.append(st.__class__(**{**st.__dict__, "devices": tuple(devs)}))
    return plan.with_(stages=tuple(stages))


# ------------------------------------------------------------------------------------------ the adapter
@dataclass(frozen=True)
class DryRun:
    """What ``tessera submit --dry-run`` shows."""

    job: JobSpec
    cells: list[CellChoice]
    chosen: CellChoice | None
    chosen_now: bool  # the chosen Cell fits the GPUs free right now
    plan: Plan | None
    estimate: dict[str, Any]
    estimated_time_s: float | None
    reason: str | None

    def to_dict(self, top: int = 10) -> dict[str, Any]:
        return {
            "job": self.job.name,
            "model": self.job.model,
            "cells": [
                {
                    "cell": c.label,
                    "gpus": c.gpus,
                    "n_gpus": c.n_gpus,
                    "n_stages": int(c.shape.n_stages),
                    "iteration_time_s": c.iteration_time_s,
                    "samples_per_s": c.samples_per_s,
                    "max_device_bytes": c.max_device_bytes,
                    "feasible": c.feasible,
                }
                for c in self.cells[:top]
            ],
            "chosen": self.chosen.label if self.chosen else None,
            "chosen_now": self.chosen_now,
            "plan": self.plan.to_dict() if self.plan else None,
            "estimate": self.estimate,
            "estimated_time_s": self.estimated_time_s,
            "reason": self.reason,
        }


class SchedulingAdapter:
    """Owns the core :class:`~tessera.scheduler.Scheduler` of the live service and keeps it in step with the
    store (:meth:`sync`), runs rounds (:meth:`round`) and plans dry runs. Thread-safe.

    ``restart_cost_s``: what a relaunch costs (checkpoint → tear down → relaunch), updated from the backend's
    measurements by :meth:`observe_restart`; the core is told it as each restarted job's pause.
    """

    def __init__(
        self,
        cluster: LiveCluster,
        cost: CostModel | None = None,
        *,
        policy: str = "tessera",
        round_s: float = 300.0,
        restart_cost_s: float = 30.0,
        min_gain: float = 1.15,
    ) -> None:
        self.cluster = cluster
        self.cost = cost or CostModel()
        self.restart_cost_s = restart_cost_s
        self.min_gain = min_gain
        self.round_s = round_s
        self.policy_name = policy
        self._lock = threading.RLock()
        self._cells: dict[str, JobCells | None] = {}
        self._errors: dict[str, str] = {}
        self.held_back: set[int] = set()  # in backoff: not to be started this round
        self._specs: dict[int, JobSpec] = {}
        self._assignments: dict[int, Assignment] = {}
        self._factors: dict[str, float] = {}  # planning key → estimated / measured iteration time
        self._unplannable: dict[int, str] = {}  # job → why the GPUs it was given could not hold a plan
        self._build_core()

    # -------------------------------------------------------------- the core
    def _policy(self) -> Policy:
        return get_policy(self.policy_name)  # an unknown name raises, listing the known ones

    def _build_core(self) -> None:
        self.state = ClusterState.from_spec(self.cluster.spec)
        for i, n in enumerate(self.cluster.nodes):
            self.state.up[i] = n.alive
        self.knowledge = PerfTable(ServiceRates(self), self.cluster.gpu_counts())
        self.policy = self._policy()
        self.core = Scheduler(
            self.state, self.policy, self.knowledge.view(), round_s=self.round_s,
            restart_estimate=lambda job: self.restart_cost_s,
        )  # fmt: skip

    def _refresh_knowledge(self) -> None:
        """New rates (speed factors or calibration changed): a fresh memo, and the policy forgets its copies."""
        self.knowledge = PerfTable(ServiceRates(self), self.cluster.gpu_counts())
        self.core.knowledge = self.knowledge.view()
        self.policy.reset()

    def speed_factor(self, key: str) -> float:
        f = self._factors.get(key)
        if f is not None:
            return f
        if self._factors:
            vals = sorted(self._factors.values())
            return vals[len(vals) // 2]
        return 1.0

    @property
    def active_policy(self) -> str:
        return self.policy.name or type(self.policy).__name__

    # -------------------------------------------------------------- knowledge updates
    def set_cost(self, cost: CostModel) -> None:
        """New calibration: every estimate is recomputed (the jobs and allocations stay)."""
        with self._lock:
            self.cost = cost
            self._cells.clear()
            self._rebuild_keeping_state()

    def set_cluster(self, cluster: LiveCluster) -> list[int]:
        """Nodes died or came back; returns the ids of jobs that lost GPUs (they go back to the queue)."""
        with self._lock:
            if cluster.spec != self.cluster.spec:
                self.cluster = cluster
                self._cells.clear()
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

    def observe_restart(self, seconds: float) -> None:
        """Fold one measured relaunch time into the restart cost (moving average)."""
        with self._lock:
            self.restart_cost_s = 0.5 * self.restart_cost_s + 0.5 * max(0.0, seconds)

    def _rebuild_keeping_state(self) -> None:
        specs, assignments = dict(self._specs), dict(self._assignments)
        self._specs.clear()
        self._assignments.clear()
        self._build_core()
        for jid in sorted(specs):
            self._submit(jid, specs[jid], 0.0)
        self._restore(assignments)

    # -------------------------------------------------------------- Cells
    def cells_for_key(self, key: str) -> JobCells | None:
        with self._lock:
            return self._cells.get(key)

    def cells_of(self, spec: JobSpec) -> JobCells:
        """The job's Cells (shared by jobs with equal planning inputs); raises ModelSourceError."""
        with self._lock:
            key = planning_key(spec)
            if key in self._errors:
                raise ModelSourceError("model", self._errors[key])
            if self._cells.get(key) is None:
                try:
                    self._cells[key] = JobCells(spec, self.cluster.spec, self.cluster.gpu_counts(), self.cost)
                except ModelSourceError as e:
                    self._errors[key] = e.reason
                    raise
                except Exception as e:  # a planning bug or an input it cannot take: this job waits, not all
                    self._errors[key] = f"planning failed: {type(e).__name__}: {e}"
                    raise ModelSourceError("model", self._errors[key]) from None
            cells = self._cells[key]
            assert cells is not None
            return cells

    # -------------------------------------------------------------- keeping the core in step with the store
    def _job(self, jid: int, spec: JobSpec, arrival_s: float) -> Job:
        return Job(
            job_id=jid,
            model=planning_key(spec),
            global_batch=spec.global_batch,
            arrival_s=arrival_s,
            total_iterations=float(spec.total_steps),
            requested_type=spec.gpu_types[0] if spec.gpu_types else None,
            deadline_s=(arrival_s + spec.deadline_s) if spec.deadline_s else None,
            name=spec.name,
            priority=spec.priority,
        )

    def _submit(self, jid: int, spec: JobSpec, arrival_s: float) -> None:
        with contextlib.suppress(ModelSourceError):  # Cells first: the rate memo must not see a job without
            self.cells_of(spec)
        self._specs[jid] = spec
        self.core.submit(self._job(jid, spec, arrival_s), arrival_s)

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
                if j.measured_iter_s:
                    js.rate_iters_per_s = 1.0 / j.measured_iter_s
            self._restore(restore)
            self.held_back = {j.id for j in jobs if not j.terminal and j.not_before > now}
            self._update_factors(live.values())

    def _update_factors(self, jobs: Any) -> None:
        seen: dict[str, list[float]] = {}
        for j in jobs:
            a = j.assignment
            if a is not None and j.measured_iter_s and a.estimate_iter_s > 0:
                seen.setdefault(planning_key(j.spec), []).append(a.estimate_iter_s / j.measured_iter_s)
        changed = False
        for key, vals in seen.items():
            f = sorted(vals)[len(vals) // 2]
            old = self._factors.get(key)
            if old is None or abs(math.log(f / old)) > math.log(1.15):
                self._factors[key] = f
                changed = True
        if changed:
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
    def round(self, now: float, *, force: bool = False) -> Round:
        """One round: the core asks the policy when something happened (``force``: always) and binds; each
        changed allocation becomes an Assignment with its Plan; pending jobs get their reasons."""
        with self._lock:
            for _jid, spec in self._specs.items():  # build Cells before the policy asks (errors → reasons)
                with contextlib.suppress(ModelSourceError):
                    self.cells_of(spec)
            result = self._tick(now, force)
            changes: list[Change] = []
            if result is not None:
                moved = {ch.job_id for ch in result.changes}
                # GPUs this round leaves where they are; jobs that held GPUs before pick theirs first
                taken = {x for j, a in self._assignments.items() if j not in moved for x in a.slots}
                order = sorted(result.changes, key=lambda ch: (ch.job_id not in self._assignments, ch.job_id))
                for ch in order:
                    if ch.job_id in self.held_back and ch.old is None and ch.new is not None:
                        self.release(ch.job_id, now)  # still in backoff after a failure: not yet
                        continue
                    old = self._assignments.get(ch.job_id)
                    if ch.new is None:
                        self._assignments.pop(ch.job_id, None)
                        changes.append(Change(ch.job_id, "preempt", old, None))
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
                    kind = {"rescale": "resize"}.get(ch.kind, ch.kind)
                    note = ""
                    if old is not None:
                        if kind == "migrate" or set(new.gpus) != set(old.gpus):
                            kind = "migrate"
                        note = f"{kind}: {old.cell} → {new.cell}"
                    changes.append(Change(ch.job_id, kind, old, new, note))
            return Round(
                tuple(changes),
                self._reasons(),
                self.active_policy,
                bool(result and result.decided),
                result.decision_s if result else 0.0,
            )

    def _tick(self, now: float, force: bool) -> Any:
        """The core's round; ``force`` asks the policy even when no event happened (the periodic round: a job
        out of backoff, or measured speeds that changed the picture)."""
        ev = self.core.events()
        if not force or ev.any or self.policy.every_round:
            return self.core.tick(now)
        if not (self.core.pending or self.core.running):
            return None
        import time

        from tessera.scheduler import RoundResult

        ctx = self.core.context(now)
        t0 = time.perf_counter()
        decision = self.policy.schedule(ctx) or ctx.decision()
        dt = time.perf_counter() - t0
        self.core.validate(decision)
        return RoundResult(tuple(self.core.bind(decision, now)), True, dt)

    def _assign(self, jid: int, a: Allocation, held: set[Slot]) -> Assignment:
        """Concrete GPUs for the core's (node, count) placement — the job's own GPUs first, then the lowest
        indices not in ``held`` — and the Cell's Plan pinned to them. Raises ValueError when none fits."""
        from tessera.perf.estimate import estimate_plan

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
        gpus = dict(a.gpus)
        stages = a.n_stages or cells.best_stages(gpus) or 1
        devices = None
        if cells.user_model:  # the annotations' plan directly on the placed GPUs (largest memory first)
            from tessera.hardware import get_gpu

            order = sorted(slots, key=lambda s: (-get_gpu(s.gpu_type).memory_bytes, s.node, s.index))
            devices = [Device(r, s.gpu_type, node=s.node, local_index=s.index) for r, s in enumerate(order)]
        tuned = cells.tuned(gpus, stages, devices)
        if tuned is None:
            stages = cells.best_stages(gpus) or 1
            tuned = cells.tuned(gpus, stages, devices)
        if tuned is None:
            raise ValueError(f"job {jid}: no plan of {spec.model} fits {gpus}")
        plan = tuned.plan if devices is not None else pin_plan(tuned.plan, slots)
        est = estimate_plan(plan, cells.spec, self.cluster.spec, cost=self.cost)
        label = tuned.label
        plan = plan.with_(meta={**plan.meta, "cell": label})
        return Assignment(tuple(slots), label, plan, est.iteration_time_s, est.to_dict())

    def _reasons(self) -> dict[int, str]:
        """Why each pending job waits: Infeasible (nothing of this cluster can hold it), Backoff, Priority (it
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
                cells = self.cells_of(spec)
            except ModelSourceError as e:
                out[jid] = f"{Reason.INFEASIBLE}: {e.reason}"
                continue
            opts = self.knowledge.cells(self.core.jobs[jid].job)
            if not opts:
                out[jid] = infeasible_reason(spec, cells.available)
                continue
            fits_now = any(all(self.state_free_of(t) >= n for t, n in c.gpus) for c in opts)
            out[jid] = Reason.PRIORITY if fits_now else Reason.RESOURCES
        return out

    def state_free_of(self, gpu_type: str) -> int:
        return self.core.cluster.free_of(gpu_type)

    def assignment(self, jid: int) -> Assignment | None:
        with self._lock:
            return self._assignments.get(jid)

    # -------------------------------------------------------------- dry runs
    def dry_run(self, spec: JobSpec) -> DryRun:
        """Plan ``spec`` as if submitted now; raises ModelSourceError when its model cannot be loaded."""
        with self._lock:
            cells = JobCells(spec, self.cluster.spec, self.cluster.gpu_counts(), self.cost)
            ranked = cells.ranked()
            feasible = [c for c in ranked if c.feasible]
            free = self.core.cluster.free_by_type()
            fitting = [c for c in feasible if all(free.get(t, 0) >= n for t, n in c.gpus.items())]
            pick = fitting or feasible
            chosen = (
                max(pick, key=lambda c: (c.samples_per_s / c.n_gpus, c.samples_per_s, -c.n_gpus))
                if pick
                else None
            )
            plan, estimate, total, reason = None, {}, None, None
            if chosen is not None:
                tuned = cells.tuned(chosen.gpus, int(chosen.shape.n_stages))
                if tuned is not None:
                    plan = tuned.plan
                    estimate = tuned.estimate.to_dict()
                    total = tuned.estimate.iteration_time_s * spec.total_steps
                if not fitting:
                    reason = Reason.RESOURCES
            else:
                reason = infeasible_reason(spec, cells.available)
            return DryRun(spec, ranked, chosen, bool(fitting), plan, estimate, total, reason)


def _now() -> float:
    import time

    return time.time()

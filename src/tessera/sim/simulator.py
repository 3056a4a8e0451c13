"""The event-driven simulator: the scheduler core as its backend, the cost model as the truth.

Events — arrivals, completions, restarts done, node failures and repairs — come off one heap; round ticks
(default every 300 s) let the policy decide. With ``tick_s`` set, an arrival or completion between rounds is also
decided at the next multiple of ``tick_s`` (the core asks the policy on events only there, and time-sharing
policies re-share only at rounds), as the live service's control loop reacts to events between its rounds: with
rounds alone, a finished job's GPUs idle until the next round. Between events every running job advances
linearly at its true speed: the tuned plan's estimate on its GPUs (:meth:`PerfTable.true_rate`), times an
optional per-(job, GPUs) lognormal error factor that models what the estimates get wrong. Every allocation change
costs the job a restart: start-up for a first start; checkpoint save + load (model parameters × bytes per
parameter over the checkpoint bandwidth) + start-up for a rescale, migration or resume. Everything random derives
from the seed, so one seed gives one result.
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import math
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache

import numpy as np

from tessera.hardware import ClusterSpec
from tessera.scheduler.core import Change, Scheduler
from tessera.scheduler.knowledge import PerfTable
from tessera.scheduler.policy import Policy
from tessera.scheduler.state import ClusterState, GPUs, Job, JobState, JobStatus

# a job status's name, read once per job at the end of a run (an Enum's .value costs a descriptor call)
_STATUS = {s: s.value for s in JobStatus}
# runs of at least this many jobs freeze the heap before they start (:func:`_frozen_heap`)
FREEZE_MIN_JOBS = 1000

# event kinds, in the order events at the same instant are handled
COMPLETE, FAIL, REPAIR, ARRIVE, RESUME, TICK, ROUND = range(7)


@dataclass(frozen=True)
class SimConfig:
    round_s: float = 300.0
    seed: int = 0
    noise_sigma: float = 0.0  # lognormal σ of the true speed around the tuned estimate, per (job, GPUs)
    startup_s: float = 30.0  # launching a job (Pollux / Sia: 30 s)
    checkpoint_bandwidth_Bps: float = 5e9  # to and from shared storage
    checkpoint_bytes_per_param: float = 16.0  # bf16 weights + fp32 master + Adam moments
    node_mtbf_s: float | None = None  # mean time between failures per node (None: no failures)
    repair_s: float = 3600.0
    horizon_s: float | None = None  # stop here even if jobs remain (None: run until all are done)
    window_s: float | None = None  # the trace window, for metrics (throughput average, jobs finished)
    keep_in_node: bool = True
    record_allocations: bool = False  # keep every allocation change (for invariant checks)
    # control ticks between rounds: an arrival or completion is decided at the next multiple of tick_s, as the
    # live service's control loop does (None: only at round boundaries)
    tick_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("round_s", "checkpoint_bandwidth_Bps", "repair_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.tick_s is not None and not 0 < self.tick_s <= self.round_s:
            raise ValueError(f"tick_s must be > 0 and <= round_s ({self.round_s}), got {self.tick_s}")
        if self.noise_sigma < 0 or self.startup_s < 0:
            raise ValueError("noise_sigma and startup_s must be >= 0")
        if self.node_mtbf_s is not None and self.node_mtbf_s <= 0:
            raise ValueError(f"node_mtbf_s must be > 0, got {self.node_mtbf_s}")


@dataclass(frozen=True)
class JobRecord:
    job_id: int
    model: str
    arrival_s: float
    requested: GPUs | None
    total_iterations: float
    status: str
    first_start_s: float | None
    finish_s: float | None
    restarts: int
    held_s: float  # time holding GPUs
    gpu_s: float  # GPU-seconds held
    done_iterations: float
    deadline_s: float | None
    alone_s: float = float("nan")  # its run time on its requested GPUs alone (the unit of JCT slowdown)


@dataclass(frozen=True)
class AllocationEvent:
    time_s: float
    job_id: int
    kind: str
    placement: tuple[tuple[int, int], ...]
    gpus: GPUs
    rate_iters_per_s: float
    paused_until_s: float


@dataclass
class SimResult:
    policy: str
    jobs: list[JobRecord]
    timeline_s: np.ndarray  # change points
    throughput: np.ndarray  # normalized cluster throughput from each change point on
    busy: np.ndarray  # [change point, GPU type] GPUs held
    gpu_types: tuple[str, ...]
    capacity: dict[str, int]
    decision_s: list[float]
    rounds: int
    end_s: float
    wall_s: float
    config: SimConfig
    allocation_log: list[AllocationEvent] = field(default_factory=list)


@cache
def _params(model: str) -> int:
    try:
        from tessera.models.zoo import get_spec

        return get_spec(model).params
    except (KeyError, ValueError):
        return 0


def reference_rate(table: PerfTable, job: Job, rate: Callable[[Job, GPUs], float]) -> float:
    """A job's speed (by ``rate``) on its requested GPUs — the unit of normalized throughput; with no request, or
    one it does not fit, its best single-type speed at its smallest count (1.0 when nothing fits)."""
    req = job.requested
    r = rate(job, req) if req is not None else 0.0
    if r <= 0:
        best = 0.0
        for t in table.gpu_types:
            n = table.min_gpus(job, t)
            if n:
                best = max(best, rate(job, ((t, n),)))
        r = best or 1.0
    return r


@contextlib.contextmanager
def _frozen_heap(n_jobs: int) -> Iterator[None]:
    """What exists before a run (the tables, the jobs, the caller's objects) out of the garbage collector's
    sight while it runs: its full collections then walk only what the run creates. Over 100 hours of ten Philly
    copies on 12,800 GPUs this cut the tessera policy's p99 decision time 244 → 201 ms with identical decisions
    (``bench/sched_profile.py --gc-freeze``). Only for runs of :data:`FREEZE_MIN_JOBS` jobs or more: the
    collection before the freeze costs 0.1-0.5 s in a large process, more than a small run takes (a test
    suite's hundreds of tiny runs paid it every time).

    The run then freezes again after every round (no collection, only the move of the young generations to the
    frozen one, which costs nothing): what survives a round is the run's state — jobs, their changes, the
    policy's memos — and the collector's full passes walked it again and again, inside the policy's rounds
    (over the 12,800-GPU window, 95 of the slowest 1 % of rounds' 233 ms were collections; after: 3 of 154 ms,
    tessera's p99 137 → 102 ms, peak memory unchanged at 0.61 GiB). Cyclic garbage a round leaves behind waits
    for the unfreeze at the end; a round leaves little (the peak says so)."""
    if n_jobs < FREEZE_MIN_JOBS:
        yield
        return
    gc.collect()
    gc.freeze()  # the run freezes again after every round (Simulator._run): no collection there, only the move
    try:
        yield
    finally:
        gc.unfreeze()


class Simulator:
    def __init__(
        self,
        cluster: ClusterSpec | ClusterState,
        jobs: Sequence[Job],
        table: PerfTable,
        policy: Policy,
        config: SimConfig = SimConfig(),
        *,
        progress: Callable[[float, int, int], None] | None = None,
    ) -> None:
        self.state = cluster if isinstance(cluster, ClusterState) else ClusterState.from_spec(cluster)
        ids = [j.job_id for j in jobs]
        if len(set(ids)) != len(ids):
            raise ValueError("job ids must be unique")
        self.jobs = sorted(jobs, key=lambda j: (j.arrival_s, j.job_id))
        self.table = table
        self.policy = policy
        self.cfg = config
        self.progress = progress
        self.sched = Scheduler(
            self.state,
            policy,
            table.view(),
            round_s=config.round_s,
            keep_in_node=config.keep_in_node,
            restart_estimate=self.restart_s,
        )
        self._heap: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self._version: dict[int, int] = {}
        self._norm: dict[int, float] = {}  # normalized throughput of each computing job
        self._computing: set[int] = set()
        self._ref: dict[int, float] = {}
        self._held_since: dict[int, float] = {}
        self._held: dict[int, float] = {}
        self._gpu_s: dict[int, float] = {}
        self._cur_norm = 0.0
        self._busy = np.zeros(len(self.state.types))
        self._tl_t: list[float] = []
        self._tl_v: list[float] = []
        self._tl_b: list[np.ndarray] = []
        self._log: list[AllocationEvent] = []

    # ------------------------------------------------------------------ truth
    def noise(self, job: Job, gpus: GPUs) -> float:
        if self.cfg.noise_sigma <= 0:
            return 1.0
        key = f"{self.cfg.seed}/{job.job_id}/{gpus}".encode()
        rng = np.random.default_rng(zlib.crc32(key))
        return float(math.exp(self.cfg.noise_sigma * rng.standard_normal()))

    def true_rate(self, job: Job, gpus: GPUs) -> float:
        return self.table.true_rate(job, gpus) * self.noise(job, gpus)

    def restart_s(self, job: Job) -> float:
        """Checkpoint save + load + start-up."""
        ckpt = _params(job.model) * self.cfg.checkpoint_bytes_per_param
        return self.cfg.startup_s + 2 * ckpt / self.cfg.checkpoint_bandwidth_Bps

    def reference_rate(self, job: Job) -> float:
        """The job's true speed on its requested GPUs — the unit of normalized throughput."""
        r = self._ref.get(job.job_id)
        if r is None:
            r = self._ref[job.job_id] = reference_rate(self.table, job, self.true_rate)
        return r

    # ------------------------------------------------------------------ events
    def _push(self, t: float, kind: int, a: int = 0, b: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, kind, self._seq, a, b))

    def _mark(self, t: float) -> None:
        if self._tl_t and self._tl_t[-1] == t:
            self._tl_v[-1] = self._cur_norm
            self._tl_b[-1] = self._busy.copy()
        else:
            self._tl_t.append(t)
            self._tl_v.append(self._cur_norm)
            self._tl_b.append(self._busy.copy())

    def _stop_computing(self, jid: int) -> None:
        if jid in self._computing:
            self._computing.discard(jid)
            self._cur_norm -= self._norm.pop(jid)

    def start_s(self, job: Job, placement: Sequence[tuple[int, int]], now: float) -> float:
        """The pause before a first start computes (a launch): ``startup_s`` here."""
        return self.cfg.startup_s

    def pause_s(self, ch: Change, job: Job, now: float) -> float:
        """The pause before a changed job computes: a launch for its first start, a restart (checkpoint save and
        load, start-up) for any other change."""
        assert ch.new is not None
        return self.start_s(job, ch.new.placement, now) if ch.kind == "start" else self.restart_s(job)

    def _release_gpus(self, jid: int, placement: Sequence[tuple[int, int]], now: float) -> None:
        for i, n in placement:
            self._busy[self.state.type_index[i]] -= n
        since = self._held_since.pop(jid, None)
        if since is not None:
            self._held[jid] = self._held.get(jid, 0.0) + now - since
            self._gpu_s[jid] = self._gpu_s.get(jid, 0.0) + (now - since) * sum(n for _, n in placement)

    def _apply(self, ch: Change, now: float) -> None:
        jid = ch.job_id
        js = self.sched.jobs[jid]
        self._version[jid] = self._version.get(jid, 0) + 1
        if ch.old is not None:
            self._stop_computing(jid)
            self._release_gpus(jid, ch.old.placement, now)
        if ch.new is None:
            if self.cfg.record_allocations:
                self._log.append(AllocationEvent(now, jid, ch.kind, (), (), 0.0, now))
            return
        for i, n in ch.new.placement:
            self._busy[self.state.type_index[i]] += n
        self._held_since[jid] = now
        rate = self.true_rate(js.job, ch.new.gpus)
        delay = self.pause_s(ch, js.job, now)
        js.rate_iters_per_s = rate
        js.paused_until_s = now + delay
        js.as_of_s = now
        if self.cfg.record_allocations:
            self._log.append(
                AllocationEvent(now, jid, ch.kind, ch.new.placement, ch.new.gpus, rate, js.paused_until_s)
            )
        v = self._version[jid]
        self._push(js.paused_until_s, RESUME, jid, v)
        remaining = js.job.total_iterations - js.done_iterations
        self._push(js.paused_until_s + max(0.0, remaining) / rate, COMPLETE, jid, v)

    def _on_resume(self, jid: int, v: int, now: float) -> None:
        if self._version.get(jid) != v:
            return
        js = self.sched.jobs[jid]
        n = js.rate_iters_per_s / self.reference_rate(js.job)
        self._norm[jid] = n
        self._computing.add(jid)
        self._cur_norm += n
        self.sched.rescale_done(jid, now)

    def _on_complete(self, jid: int, v: int, now: float) -> bool:
        if self._version.get(jid) != v:
            return False
        js = self.sched.jobs[jid]
        assert js.allocation is not None
        self._stop_computing(jid)
        self._release_gpus(jid, js.allocation.placement, now)
        if self.cfg.record_allocations:
            self._log.append(AllocationEvent(now, jid, "finish", (), (), 0.0, now))
        self._version[jid] = v + 1
        self.sched.complete(jid, now)
        return True

    def _on_fail(self, node: int, now: float) -> None:
        hit = {
            jid: js.allocation.placement
            for jid, js in self.sched.running.items()
            if js.allocation is not None and node in js.allocation.nodes
        }
        self.sched.node_failed(node, now)
        for jid, placement in hit.items():
            self._version[jid] = self._version.get(jid, 0) + 1
            self._stop_computing(jid)
            self._release_gpus(jid, placement, now)
            if self.cfg.record_allocations:
                self._log.append(AllocationEvent(now, jid, "evict", (), (), 0.0, now))

    def seen_at(self, job: Job) -> float:
        """When the scheduler first sees ``job``: on arrival (a replay of the service sees it a tick later)."""
        return job.arrival_s

    def _decide(self, now: float, decision_s: list[float], *, boundary: bool) -> None:
        """A round (``boundary``) or a control tick: the core decides when due, and its changes are applied."""
        res = self.sched.tick(now, boundary=boundary)
        if res.decided:
            decision_s.append(res.decision_s)
        for ch in res.changes:
            self._apply(ch, now)
        if res.changes:
            self._mark(now)

    # ------------------------------------------------------------------ run
    def run(self) -> SimResult:
        with _frozen_heap(len(self.jobs)):
            return self._run()

    def _run(self) -> SimResult:
        t0 = time.perf_counter()
        self.policy.reset()
        cfg = self.cfg
        for j in self.jobs:
            self._push(self.seen_at(j), ARRIVE, j.job_id)
        by_id = {j.job_id: j for j in self.jobs}
        rng = np.random.default_rng(cfg.seed)
        if cfg.node_mtbf_s is not None:
            for i in range(len(self.state.nodes)):
                self._push(float(rng.exponential(cfg.node_mtbf_s)), FAIL, i)
        start = self.jobs[0].arrival_s if self.jobs else 0.0
        next_round = math.floor(start / cfg.round_s) * cfg.round_s
        if next_round < start:
            next_round += cfg.round_s
        self._push(next_round, ROUND)
        arrivals_left = len(self.jobs)
        rounds = 0
        freeze_rounds = len(self.jobs) >= FREEZE_MIN_JOBS
        decision_s: list[float] = []
        done_jobs = 0
        now = start
        self._mark(start)
        last_progress = 0.0
        last_tick = -math.inf

        def control_tick(t: float) -> None:
            """An event between rounds is decided at the next tick (when ticks are on), unless the round comes
            first or that tick is already due (events come in time order, so a tick pushed is never later)."""
            nonlocal last_tick
            if cfg.tick_s is None:
                return
            at = math.ceil(t / cfg.tick_s - 1e-9) * cfg.tick_s
            if last_tick < at < next_round:
                last_tick = at
                self._push(at, TICK)

        while self._heap:
            t, kind, _, a, b = heapq.heappop(self._heap)
            if cfg.horizon_s is not None and t > cfg.horizon_s:
                now = cfg.horizon_s
                break
            now = t
            if kind == COMPLETE:
                if self._on_complete(a, b, now):
                    done_jobs += 1
                    self._mark(now)
                    control_tick(now)
            elif kind == RESUME:
                self._on_resume(a, b, now)
                self._mark(now)
            elif kind == ARRIVE:
                self.sched.submit(by_id[a], now)
                arrivals_left -= 1
                control_tick(now)
            elif kind == FAIL:
                if self.state.up[a] and self.sched.cluster.up[a]:
                    self._on_fail(a, now)
                    self._push(now + cfg.repair_s, REPAIR, a)
                    self._mark(now)
            elif kind == REPAIR:
                self.sched.node_repaired(a, now)
                if cfg.node_mtbf_s is not None:
                    self._push(now + float(rng.exponential(cfg.node_mtbf_s)), FAIL, a)
            elif kind == TICK:
                self._decide(now, decision_s, boundary=False)
            elif kind == ROUND:
                rounds += 1
                next_round = now + cfg.round_s
                self._decide(now, decision_s, boundary=True)
                if freeze_rounds:
                    gc.freeze()  # what this round left is the run's state now (see _frozen_heap)
                if self.progress is not None and now - last_progress >= 3600.0:
                    last_progress = now
                    self.progress(now, done_jobs, len(self.jobs))
                if arrivals_left == 0 and not self.sched.active:
                    break
                nxt = next_round
                if not self.sched.active and arrivals_left:
                    # idle: jump to the round boundary at or after the next arrival
                    first = min(e[0] for e in self._heap if e[1] == ARRIVE)
                    nxt = max(nxt, math.ceil(first / cfg.round_s) * cfg.round_s)
                next_round = nxt
                self._push(nxt, ROUND)
        end = now
        self._mark(end)
        if self.progress is not None:
            self.progress(end, done_jobs, len(self.jobs))
        records = [self._record(js, end) for js in sorted(self.sched.jobs.values(), key=lambda s: s.job_id)]
        # jobs never submitted (horizon before arrival) are recorded as pending
        seen = {r.job_id for r in records}
        for j in self.jobs:
            if j.job_id not in seen:
                records.append(
                    JobRecord(
                        j.job_id,
                        j.model,
                        j.arrival_s,
                        j.requested,
                        j.total_iterations,
                        "pending",
                        None,
                        None,
                        0,
                        0.0,
                        0.0,
                        0.0,
                        j.deadline_s,
                        j.total_iterations / self.reference_rate(j),
                    )  # fmt: skip
                )
        return SimResult(
            policy=self.policy.name or type(self.policy).__name__,
            jobs=records,
            timeline_s=np.array(self._tl_t),
            throughput=np.array(self._tl_v),
            busy=np.array(self._tl_b).reshape(len(self._tl_t), len(self.state.types)),
            gpu_types=self.state.types,
            capacity=self.state.capacity_by_type(),
            decision_s=decision_s,
            rounds=rounds,
            end_s=end,
            wall_s=time.perf_counter() - t0,
            config=cfg,
            allocation_log=self._log,
        )

    def _record(self, js: JobState, end: float) -> JobRecord:
        held = self._held.get(js.job_id, 0.0)
        gpu_s = self._gpu_s.get(js.job_id, 0.0)
        since = self._held_since.get(js.job_id)
        if since is not None and js.allocation is not None:
            held += end - since
            gpu_s += (end - since) * js.allocation.n_gpus
        return JobRecord(
            job_id=js.job_id,
            model=js.job.model,
            arrival_s=js.job.arrival_s,
            requested=js.job.requested,
            total_iterations=js.job.total_iterations,
            status=_STATUS[js.status],
            first_start_s=js.first_start_s,
            finish_s=js.finish_s,
            restarts=js.restarts,
            held_s=held,
            gpu_s=gpu_s,
            done_iterations=js.done_at(end),
            deadline_s=js.job.deadline_s,
            alone_s=js.job.total_iterations / self.reference_rate(js.job),
        )


def simulate(
    cluster: ClusterSpec | ClusterState,
    jobs: Sequence[Job],
    table: PerfTable,
    policy: Policy | str,
    config: SimConfig = SimConfig(),
    **policy_options: object,
) -> SimResult:
    """Run one policy over the jobs (a policy name is looked up in the registry)."""
    from tessera.scheduler.policy import get_policy

    p = get_policy(policy, **policy_options) if isinstance(policy, str) else policy
    return Simulator(cluster, jobs, table, p, config).run()

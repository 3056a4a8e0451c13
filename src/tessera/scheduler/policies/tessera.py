"""Tessera — Crius's Cell-based scheduling (Crius §6, Algorithm 1) with Frenzy's HAS placement.

Rules implemented:

* **Cells per job** (Crius §6.1 "Initializing Cells"): for every GPU type, counts N/2, N, 2N — N the requested
  count raised to the fewest GPUs the model fits in (the memory module; N from memory alone when none is
  requested) — × the stage counts 1, 2, 4, … × GPU types and even two-type mixes; each Cell carries its
  estimate (Crius §5.1), and the best stage count per GPUs is the Cell the job gets. ``max_scale`` (default 4)
  extends the ladder to 4N (Crius: 2N).
* **Objective** (§6): maximum cluster throughput, each job's throughput normalized so that a small model's many
  iterations per second do not outweigh a large one's. By default (``normalize="best"``) a job is normalized by
  its fastest Cell at its requested GPU count on any type; ``normalize="request"`` uses its estimate on the GPU
  type it named, as the simulator's throughput metric does — but then a job that named a slow type counts 2.5×
  on a fast GPU and one that named the fast type 0.4× on a slow one, so under contention the latter are parked
  on slow GPUs and take several times longer (on the Philly benchmark at 4× density: average JCT 5,400 s vs
  5,000 s, for 0.5% of throughput).
* **CellBasedSched as one search** (Algorithm 1 lines 14-20): Crius explores, per scheduled job, the choices of
  placing it and rescaling running jobs (ScaleResource: adaptivity scaling to another GPU count, heterogeneity
  scaling to another type), and keeps the one of maximum cluster throughput (BestPerf). Scored one job at a time
  this is myopic under contention — a job that takes four fast GPUs for a 2.5× speed-up leaves three jobs
  without one, and a large job placed while fast GPUs were idle keeps them when small jobs would gain far more
  there — so BestPerf is solved for all jobs of the round together, as Crius suggests solvers may (§6): the
  throughput LP over the Cells of the queued and running jobs (:mod:`tessera.scheduler.cell_lp`). A running
  job's Cells other than its own are worth their normalized throughput less the restart they cost
  (:meth:`Tessera.penalty`), and it keeps some Cell (suspending is the rules below' call). Jobs restarting or
  past their restart budget stay as they are. The LP's duals price each GPU type for the round.
* **LP weights**: a job's normalized throughput is weighted by its user priority (``PRIORITY_WEIGHT`` × per
  level) and by 1 + θ ÷ t, t the seconds it still needs on its smallest Cell (at least ``srpt_floor_s``) and
  θ = ``srpt_horizon_s`` (a round): throughput alone does not care which job finishes first; this term prefers
  the jobs about to finish (shortest-remaining-first), while long jobs weigh ≈ 1 as in pure throughput.
* **VirtualAlloc** (line 19): the running jobs the LP rescales change first — at most ``depth`` (the search
  depth, default 3) per arrival or departure of the round, the most valuable changes at the GPU prices first,
  all released together so two jobs can trade GPU types, each falling back to the LP's other Cells for it or
  its own GPUs — then queued jobs take the LP's Cells in queue order (the first in order gets its group's best).
  Queued jobs the LP leaves out may still start on free GPUs with a Cell worth its GPUs' prices (backfill), and
  jobs admitted this round grow into GPUs left idle before they start (no restart yet), best gain per GPU first.
* **FinalizeAlloc** (lines 8 and 13): the virtual allocation becomes real at the end of the round (the core binds
  it).
* **Queue order** (Crius §6 takes the queue in arrival order; under contention that leaves short jobs behind
  long ones): queued jobs are taken shortest-remaining-first — the GPU-seconds the job still needs on its
  smallest Cell (the work it reports ÷ the Cell estimate), divided by its response ratio 1 + waited ÷ needed
  (HRRN aging, so a long job that has waited comes up). ``order="arrival"`` restores Crius's order (and drops
  the shortest-remaining weight). A user priority ranks first, in the queue and in the LP.
* **Opportunistic execution** (§6.1): a job that has waited a round may suspend the jobs launched while it
  waited — started after it began waiting, on fewer GPUs than its smallest Cell (a large job's GPUs taken
  piecemeal: one large job does not suspend another) — once that frees its smallest Cell, when that Cell is
  worth its GPUs at the round's prices (always, without contention; otherwise the job is waiting by the LP's
  choice, not starved by smaller ones); not jobs ``preempt_factor`` × shorter than it. A job just suspended has
  only begun to wait, so suspensions do not chain.
* **Shortest-remaining preemption** (SRPT / Tiresias-style): a queued job that finds no room may suspend
  running jobs needing more than ``preempt_factor`` (32) × its GPU-seconds, longest first, once that frees its
  smallest Cell. Against thrashing, a victim must have run a round and twice its restart time since its last
  change and be within its restart budget; ``preempt_attempts`` per round. (The LP already serves short jobs;
  suspending a job costs it a restart and the LP's plan, so only a large SRPT gain is worth it.)
* **Restart budget** (as Pollux and Sia discount a job's re-allocation by the share of its life restarts took):
  a running job is rescaled or suspended for others only while its restarts so far cost at most
  ``restart_budget`` (10%) of its time in the system.
* **Deadline-aware mode** (§8.5, ``tessera-ddl``): jobs are taken earliest deadline first, and a job that cannot
  meet its deadline even on its fastest Cell is dropped early.
* **Ablations** (§8.6): ``tessera-na`` has no adaptivity scaling (GPU count fixed at N), ``tessera-nh`` no
  heterogeneity scaling (the requested GPU type only).
* Placement: HAS best-fit, a job that fits one node kept in one node (Frenzy §IV-B); a mixed-type Cell only when
  no single type can hold the job (it pins two types' GPUs and cannot shrink type by type).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from tessera.scheduler import cell_lp
from tessera.scheduler.knowledge import CellOption
from tessera.scheduler.policy import Policy, SchedulingContext, register
from tessera.scheduler.state import Allocation, GPUs, Job, JobState

PRIORITY_WEIGHT = 4.0  # LP weight of one user-priority level over the next lower one


@dataclass(frozen=True)
class _Cell:
    """One allowed Cell of a job, flattened for the hot loops."""

    norm: float  # estimated rate ÷ the job's reference rate (:meth:`Tessera._reference`)
    rate: float
    gpus: GPUs
    n_stages: int | None
    n_gpus: int
    mix: bool


@dataclass
class _JobInfo:
    key: tuple  # (configuration, requested count, requested type): jobs with one key share their Cells
    cells: list[_Cell]  # allowed Cells, fastest first
    ref: float  # the reference rate its throughput is normalized by
    by_gpus: dict[GPUs, _Cell]
    min_cells: list[_Cell]  # per single type, the Cell with the fewest GPUs (fewest first)
    lp_cells: list[_Cell] = field(default_factory=list)  # what the LP chooses from: single types, else mixes
    _arrays: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)

    def lp_arrays(self, types: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The LP Cells as arrays: normalized throughputs, rates, and GPUs per Cell and type (in ``types``)."""
        out = self._arrays.get(types)
        if out is None:
            col = {t: k for k, t in enumerate(types)}
            gpus = np.zeros((len(self.lp_cells), len(types)))
            for i, c in enumerate(self.lp_cells):
                for t, n in c.gpus:
                    gpus[i, col[t]] = n
            norm = np.array([c.norm for c in self.lp_cells])
            out = self._arrays[types] = (norm, np.array([c.rate for c in self.lp_cells]), gpus)
        return out


@dataclass
class _Owner:
    """The jobs one LP group stands for — queued ones in queue order, or running ones on the same GPUs, longest
    first — and the Cells its options are (for running ones, the Cell held first)."""

    members: list[JobState]
    cells: list[_Cell]
    running: bool


@dataclass
class _Plan:
    """The LP's outcome for one round: new Cells of running jobs (changes only, with their worth at the GPU
    prices) and the Cells each queued group gets (best first)."""

    running: dict[int, tuple[float, list[_Cell]]]  # job → (worth of the change, new Cell and fallbacks)
    queued: dict[int, list[_Cell]]  # LP group → its Cells
    group_of: dict[int, int]  # queued job → its LP group


def _subset(placement: tuple[tuple[int, int], ...], n: int) -> tuple[tuple[int, int], ...]:
    """``n`` of a job's own GPUs to keep when it shrinks: its fullest nodes first (compact, no new nodes)."""
    out: list[tuple[int, int]] = []
    for i, k in sorted(placement, key=lambda p: (-p[1], p[0])):
        if n <= 0:
            break
        out.append((i, min(k, n)))
        n -= min(k, n)
    return tuple(sorted(out))


@register("tessera")
@register("tessera-na", count_scaling=False)
@register("tessera-nh", type_scaling=False)
@register("tessera-ddl", deadline_aware=True)
class Tessera(Policy):
    every_round = False

    def __init__(
        self,
        depth: int = 3,
        *,
        count_scaling: bool = True,
        type_scaling: bool = True,
        mixes: bool = True,
        opportunistic: bool = True,
        deadline_aware: bool = False,
        upgrades_per_round: int | None = None,
        opportunistic_attempts: int = 8,
        min_gain: float = 0.02,
        max_scale: int = 4,
        max_gpus: int = 64,
        grow: bool = True,
        order: str = "srpt",
        preempt_factor: float = 32.0,
        preempt_attempts: int = 64,
        restart_budget: float = 0.1,
        aging: bool = True,
        normalize: str = "best",
        srpt_horizon_s: float = 300.0,
        srpt_floor_s: float = 30.0,
    ) -> None:
        if depth < 0:
            raise ValueError(f"depth must be >= 0, got {depth}")
        if order not in ("srpt", "arrival"):
            raise ValueError(f"order must be 'srpt' or 'arrival', got {order!r}")
        if normalize not in ("request", "best"):
            raise ValueError(f"normalize must be 'request' or 'best', got {normalize!r}")
        self.depth = depth
        self.count_scaling = count_scaling
        self.type_scaling = type_scaling
        self.mixes = mixes and type_scaling
        self.opportunistic = opportunistic
        self.deadline_aware = deadline_aware
        self.upgrades_per_round = upgrades_per_round  # None: depth per arrival or departure of the round
        self.opportunistic_attempts = opportunistic_attempts
        self.min_gain = min_gain
        self.max_scale, self.max_gpus = max_scale, max_gpus
        self.grow = grow
        self.order = order
        self.preempt_factor = preempt_factor
        self.preempt_attempts = preempt_attempts
        self.restart_budget = restart_budget
        self.aging = aging
        self.normalize = normalize
        self.srpt_horizon_s, self.srpt_floor_s = srpt_horizon_s, srpt_floor_s
        self._prio_w: dict[int, float] = {}
        self._info: dict[int, _JobInfo] = {}
        self._shared: dict[tuple, _JobInfo] = {}
        self._touched: set[int] = set()  # jobs whose allocation changed this round (changed at most once)
        self._prices: dict[str, float] = {}  # this round's GPU shadow prices (empty: all free of charge)
        self._memo_rem: dict[int, tuple[float, float]] = {}  # per round: remaining (s, GPU-s) per job
        self._memo_restart: dict[int, float] = {}  # per round: restart seconds per job
        self._victims: list[tuple[int, float, int]] | None = None  # per round: preemptible jobs

    def reset(self) -> None:
        self._info.clear()
        self._shared.clear()
        self._prices = {}

    # ------------------------------------------------------------------ Cells of a job
    def info(self, ctx: SchedulingContext, job: Job) -> _JobInfo:
        inf = self._info.get(job.job_id)
        if inf is not None:
            return inf
        # jobs of one configuration and request share their Cells (a trace has thousands of each)
        key = (job.config, job.requested_gpus, job.requested_type)
        inf = self._shared.get(key)
        if inf is not None:
            self._info[job.job_id] = inf
            return inf
        kn = ctx.knowledge
        opts: list[CellOption] = kn.cells(
            job, gpu_types=self._types(ctx, job), counts=self._ladder(ctx, job), mixes=self.mixes
        )
        ref = self._reference(ctx, job, opts)
        cells = [
            _Cell(c.rate_iters_per_s / ref, c.rate_iters_per_s, c.gpus, c.n_stages, c.n_gpus, c.is_mix)
            for c in opts
        ]
        mins: dict[str, _Cell] = {}
        for c in cells:
            if not c.mix:
                t = c.gpus[0][0]
                if t not in mins or (c.n_gpus, -c.rate) < (mins[t].n_gpus, -mins[t].rate):
                    mins[t] = c
        singles = [c for c in cells if not c.mix]
        inf = _JobInfo(
            key,
            cells,
            ref,
            {c.gpus: c for c in cells},
            sorted(mins.values(), key=lambda c: c.n_gpus),
            singles or cells,
        )
        self._info[job.job_id] = self._shared[key] = inf
        return inf

    def _types(self, ctx: SchedulingContext, job: Job) -> list[str]:
        types = list(ctx.knowledge.gpu_types)
        if not self.type_scaling and job.requested_type:
            types = [job.requested_type]
        return types

    def _ladder(self, ctx: SchedulingContext, job: Job) -> dict[str, list[int]]:
        """Per GPU type the counts N/2, N, 2N, … max_scale·N (Crius: max_scale = 2); N alone without
        adaptivity scaling."""
        counts: dict[str, list[int]] = {}
        for t in self._types(ctx, job):
            n = ctx.knowledge.base_count(job, t)
            if not n:
                counts[t] = []
            elif not self.count_scaling:
                counts[t] = [n]
            else:
                ladder = {max(1, n // 2)}
                k = n
                while k <= self.max_scale * n and k <= self.max_gpus:
                    ladder.add(k)
                    k *= 2
                counts[t] = sorted(ladder)
        return counts

    def _reference(self, ctx: SchedulingContext, job: Job, opts: list[CellOption]) -> float:
        """The rate a job's throughput is normalized by: its estimate on the requested GPUs, or (no request, it
        does not fit, or ``normalize="best"``) its fastest single-type Cell at the base count."""
        kn = ctx.knowledge
        req = job.requested
        ref = kn.cell_rate(job, req) if req is not None and self.normalize == "request" else 0.0
        if ref <= 0:
            base = [c for c in opts if not c.is_mix and c.n_gpus == kn.base_count(job, c.gpus[0][0])]
            ref = max((c.rate_iters_per_s for c in base or opts), default=1.0)
        return ref

    def norm(self, ctx: SchedulingContext, job: Job, gpus: GPUs) -> float:
        inf = self.info(ctx, job)
        c = inf.by_gpus.get(gpus)
        return c.norm if c is not None else ctx.knowledge.cell_rate(job, gpus) / inf.ref

    def held_cell(self, ctx: SchedulingContext, js: JobState, a: Allocation) -> _Cell:
        """The Cell a running job holds (one of its Cells, or built for GPUs outside its ladder)."""
        inf = self.info(ctx, js.job)
        c = inf.by_gpus.get(a.gpus)
        if c is None:
            rate = ctx.knowledge.cell_rate(js.job, a.gpus)
            c = _Cell(rate / inf.ref, rate, a.gpus, a.n_stages, a.n_gpus, len(a.gpus) > 1)
        return c

    def value(self, c: _Cell, w: float = 1.0) -> float:
        """A Cell's worth to the cluster this round: its normalized throughput (× the job's LP weight ``w``) less
        its GPUs' shadow prices."""
        return w * c.norm - sum(self._prices.get(t, 0.0) * n for t, n in c.gpus)

    def penalty(self, ctx: SchedulingContext, js: JobState, new: _Cell) -> float:
        """A rescale's restart in throughput terms: over the job's remaining time on the new Cell (T), a
        restart of c seconds leaves an average of new × T / (c + T); the penalty is the difference."""
        T = js.remaining_at(ctx.now_s) / new.rate
        c = self.restart_s(ctx, js)
        return new.norm * c / (c + T) if c + T > 0 else 0.0

    # ------------------------------------------------------------------ the round
    def schedule(self, ctx: SchedulingContext) -> None:
        for jid in ctx.events.finished:
            self._info.pop(jid, None)
        self._touched = set()
        self._prices = {}
        self._memo_rem, self._memo_restart, self._victims, self._prio_w = {}, {}, None, {}
        if self.deadline_aware:
            self._drop_hopeless(ctx)
        queue = self.queue(ctx)
        plan = self.plan(ctx, queue)
        if plan is not None:
            self.rescale_running(ctx, plan)
        admitted = self.admit(ctx, queue, plan)
        if self.grow:
            self.grow_new(ctx, admitted)

    def queue(self, ctx: SchedulingContext) -> list[JobState]:
        """Queued jobs (not dropped) in the order they are served: user priority, then shortest-remaining-first
        (or arrival; earliest deadline first in the deadline-aware mode)."""
        dropped = ctx.dropped
        pending = [js for js in ctx.pending if js.job_id not in dropped]
        if self.deadline_aware:
            pending.sort(key=lambda js: (-js.job.priority,
                                         js.job.deadline_s if js.job.deadline_s is not None else math.inf,
                                         js.job.arrival_s, js.job_id))  # fmt: skip
        elif self.order == "srpt":
            pending.sort(
                key=lambda js: (-js.job.priority, self.priority(ctx, js), js.job.arrival_s, js.job_id)
            )
        else:
            pending.sort(key=lambda js: -js.job.priority)  # stable: arrival order within a user priority
        return pending

    def remaining_gpu_s(self, ctx: SchedulingContext, js: JobState) -> tuple[float, float]:
        """(seconds, GPU-seconds) the job still needs on its smallest Cell, from the work it reports and the
        Cell estimate (memoized for the round)."""
        out = self._memo_rem.get(js.job_id)
        if out is None:
            inf = self.info(ctx, js.job)
            if not inf.min_cells:
                out = (math.inf, math.inf)
            else:
                c = inf.min_cells[0]
                t = js.remaining_at(ctx.now_s) / c.rate if c.rate > 0 else math.inf
                out = (t, t * c.n_gpus)
            self._memo_rem[js.job_id] = out
        return out

    def restart_s(self, ctx: SchedulingContext, js: JobState) -> float:
        """The job's restart cost (the backend's estimate, memoized for the round)."""
        out = self._memo_restart.get(js.job_id)
        if out is None:
            out = self._memo_restart[js.job_id] = ctx.restart_s(js.job)
        return out

    def priority(self, ctx: SchedulingContext, js: JobState) -> float:
        """Queue order (smaller first): the GPU-seconds the job still needs on its smallest Cell, shortened by
        its response ratio (1 + waited ÷ needed, HRRN) so a long job that has waited long enough comes up."""
        t, g = self.remaining_gpu_s(ctx, js)
        if not math.isfinite(g) or not self.aging:
            return g
        waited = max(0.0, ctx.now_s - max(js.job.arrival_s, js.last_change_s))
        return g / (1.0 + waited / max(t, ctx.round_s))

    def _drop_hopeless(self, ctx: SchedulingContext) -> None:
        for js in (*ctx.running, *ctx.pending):
            d = js.job.deadline_s
            if d is None:
                continue
            inf = self.info(ctx, js.job)
            best = inf.cells[0].rate if inf.cells else 0.0
            if best <= 0:
                ctx.drop(js.job_id)
                continue
            start_cost = 0.0 if ctx.allocation(js.job_id) is not None else self.restart_s(ctx, js)
            if ctx.now_s + start_cost + js.remaining_at(ctx.now_s) / best > d:
                ctx.drop(js.job_id)

    def _may_restart(self, ctx: SchedulingContext, js: JobState) -> bool:
        """The restart budget: a running job is rescaled or suspended for others only while the restarts it has
        had cost at most ``restart_budget`` of its time in the system — a lifetime count would leave a long job
        that was often rescaled unmovable for good."""
        age = ctx.now_s - js.job.arrival_s
        return js.restarts * self.restart_s(ctx, js) <= self.restart_budget * age

    def _movable(self, ctx: SchedulingContext, js: JobState) -> bool:
        """Whether a running job may be rescaled this round: not restarting and within its restart budget (the
        restart penalty in its values does the rest)."""
        if js.job_id in self._touched or js.paused_until_s > ctx.now_s:
            return False
        return self._may_restart(ctx, js)

    # ------------------------------------------------------------------ BestPerf: the throughput LP
    def plan(self, ctx: SchedulingContext, queue: list[JobState]) -> _Plan | None:
        """Solve the round's throughput LP (:mod:`~tessera.scheduler.cell_lp`) over the queued jobs and the
        running jobs that may change; jobs that may not change (all of them when the round may rescale none)
        only take their GPUs off the capacity. Interchangeable jobs share one LP group: same job key, user
        priority and weight (:meth:`weight`, to a quarter octave); running ones also the same GPUs held and
        remaining time within a factor of two (which sets their restart penalty). None: nothing to decide."""
        self._prio_w = self._priority_weights(ctx, queue)
        types = ctx.cluster.types
        cap = ctx.capacity_by_type()
        capacity = np.array([float(cap.get(t, 0)) for t in types])
        queued: dict[tuple, list[JobState]] = {}
        for js in queue:
            inf = self.info(ctx, js.job)
            if inf.lp_cells:
                queued.setdefault((inf.key, js.job.priority, self._weight_bucket(ctx, js)), []).append(js)
        owners = [_Owner(m, self.info(ctx, m[0].job).lp_cells, False) for m in queued.values()]
        owners += self._running_owners(ctx, capacity)
        if not owners:
            return None
        groups = [self._lp_group(ctx, o, types) for o in owners]
        sol = cell_lp.solve(groups, np.maximum(capacity, 0.0))
        if sol is None:
            return None
        self._prices = {t: float(p) for t, p in zip(types, sol.prices, strict=True)}
        return self._read_plan(ctx, sol, owners)

    def weight(self, ctx: SchedulingContext, js: JobState) -> float:
        """A job's weight in the LP: its user priority's (:meth:`_priority_weights`) × 1 + θ ÷ t, t the seconds
        it still needs on its smallest Cell and θ = ``srpt_horizon_s`` (t at least θ/10). Throughput alone does
        not care which job finishes first; this term does (shortest-remaining-first, as the queue order): a job
        that would finish within θ counts up to 11× — long jobs ≈ 1×, as pure throughput."""
        w = self._prio_w.get(js.job.priority, 1.0)
        if self.srpt_horizon_s > 0 and self.order == "srpt" and not self.deadline_aware:
            t = self.remaining_gpu_s(ctx, js)[0]
            w *= 1.0 + self.srpt_horizon_s / max(t, self.srpt_floor_s)
        return w

    def _weight_bucket(self, ctx: SchedulingContext, js: JobState) -> int:
        return int(4 * math.log2(self.weight(ctx, js)))

    def _running_owners(self, ctx: SchedulingContext, capacity: np.ndarray) -> list[_Owner]:
        """Running jobs that may change, grouped (longest first in each group); the GPUs of those that may not
        are taken off ``capacity`` (in place)."""
        frozen = self.rescale_limit(ctx) <= 0
        col = {t: k for k, t in enumerate(ctx.cluster.types)}
        running: dict[tuple, list[JobState]] = {}
        for js in ctx.running:
            a = ctx.allocation(js.job_id)
            if a is None:
                continue
            if frozen or not self._movable(ctx, js):
                for t, n in a.gpus:
                    capacity[col[t]] -= n
                continue
            rate = js.rate_iters_per_s or self.held_cell(ctx, js, a).rate
            left = int(math.log2(max(js.remaining_at(ctx.now_s) / max(rate, 1e-12), 1.0)))
            key = (self.info(ctx, js.job).key, js.job.priority, a.gpus, left, self._weight_bucket(ctx, js))
            running.setdefault(key, []).append(js)
        owners = []
        for members in running.values():
            members.sort(
                key=lambda js: (-js.remaining_at(ctx.now_s), js.job_id)
            )  # longest first: moved first
            a = ctx.allocation(members[0].job_id)
            assert a is not None
            cur = self.held_cell(ctx, members[0], a)
            others = [c for c in self.info(ctx, members[0].job).lp_cells if c.gpus != a.gpus]
            owners.append(_Owner(members, [cur, *others], True))
        return owners

    def _lp_group(self, ctx: SchedulingContext, o: _Owner, types: tuple[str, ...]) -> cell_lp.Group:
        """An owner's LP group: each Cell's weighted normalized throughput; for running jobs every Cell but the
        one held less the restart it costs (judged on the group's median member)."""
        inf = self.info(ctx, o.members[0].job)
        norm, rate, gpus = inf.lp_arrays(types)
        rep = o.members[len(o.members) // 2]
        w = self.weight(ctx, rep)
        if not o.running:
            return cell_lp.Group(len(o.members), w * norm, gpus)
        cur = o.cells[0]
        keep = np.array([c.gpus != cur.gpus for c in inf.lp_cells], dtype=bool)
        restart = self.restart_s(ctx, rep)
        left = rep.remaining_at(ctx.now_s) / rate[keep]  # the seconds each other Cell would take
        values = np.concatenate([[cur.norm], norm[keep] * left / (restart + left)])
        row = np.zeros((1, len(types)))
        for t, n in cur.gpus:
            row[0, types.index(t)] = n
        return cell_lp.Group(len(o.members), w * values, np.vstack([row, gpus[keep]]), True)

    def _read_plan(self, ctx: SchedulingContext, sol: cell_lp.Solution, owners: list[_Owner]) -> _Plan:
        """The LP's rounded counts as Cells: queued groups get theirs best first; in a running group the members
        that change are the longest-running ones (a restart costs them least), best new Cell first, with the
        group's other Cells the LP used as fallbacks should it not place."""
        plan = _Plan({}, {}, {})
        for g, (o, counts) in enumerate(zip(owners, sol.counts, strict=True)):
            chosen = [c for c, k in zip(o.cells, counts, strict=True) for _ in range(k)]
            if not o.running:
                plan.queued[g] = sorted(chosen, key=lambda c: -c.norm)
                plan.group_of.update((js.job_id, g) for js in o.members)
                continue
            w = self.weight(ctx, o.members[0])
            used = [c for c, x in zip(o.cells[1:], sol.shares[g][1:], strict=True) if x > 1e-6]
            moves = sorted((c for c in chosen if c is not o.cells[0]), key=lambda c: -self.value(c, w))
            for js, new in zip(o.members, moves, strict=False):
                gain = self.value(new, w) - w * self.penalty(ctx, js, new) - self.value(o.cells[0], w)
                alts = sorted((c for c in used if c is not new), key=lambda c: -self.value(c, w))
                plan.running[js.job_id] = (gain, [new, *alts])
        return plan

    def _priority_weights(self, ctx: SchedulingContext, queue: list[JobState]) -> dict[int, float]:
        """LP weight per user priority: ``PRIORITY_WEIGHT`` ** its rank among the priorities present."""
        levels = sorted({js.job.priority for js in (*queue, *ctx.running)})
        return {p: PRIORITY_WEIGHT**k for k, p in enumerate(levels)}

    # ------------------------------------------------------------------ VirtualAlloc
    def rescale_running(self, ctx: SchedulingContext, plan: _Plan) -> None:
        """Apply the LP's rescales of running jobs (ScaleResource), most valuable first — at most ``depth`` per
        arrival or departure of the round (``upgrades_per_round`` when set). All are released first so two jobs
        can trade GPU types; a shrink keeps part of its own GPUs; a job whose new Cell cannot be placed goes back
        to its own GPUs."""
        changes = sorted(plan.running.items(), key=lambda kv: (-kv[1][0], kv[0]))[: self.rescale_limit(ctx)]
        old: dict[int, Allocation] = {}
        for jid, _ in changes:
            a = ctx.release(jid)
            assert a is not None
            old[jid] = a

        # shrinks on their own type first (they keep GPUs they hold), then the largest Cells (fragmentation)
        def order(kv: tuple[int, tuple[float, list[_Cell]]]) -> tuple:
            jid, (_, (c, *_)) = kv
            shrink = c.gpus[0][0] == old[jid].gpus[0][0] and len(c.gpus) == len(old[jid].gpus) == 1
            return (not shrink, -c.n_gpus, jid)

        for jid, (_, cells) in sorted(changes, key=order):
            a = old[jid]
            if any(self._reserve_from(ctx, jid, a, c) for c in cells):
                self._touched.add(jid)
            elif ctx.reserve(jid, a.gpus, a.n_stages, placement=a.placement) is None:
                self._fallback(ctx, ctx.jobs[jid], a)

    def _reserve_from(self, ctx: SchedulingContext, jid: int, a: Allocation, c: _Cell) -> bool:
        """Reserve Cell ``c`` for a job that held ``a``; a shrink on the same type keeps part of its own GPUs."""
        keep = None
        if len(c.gpus) == len(a.gpus) == 1 and c.gpus[0][0] == a.gpus[0][0] and c.n_gpus < a.n_gpus:
            keep = _subset(a.placement, c.n_gpus)
        return ctx.reserve(jid, c.gpus, c.n_stages, placement=keep) is not None

    def rescale_limit(self, ctx: SchedulingContext) -> int:
        """Running jobs a round may rescale: ``depth`` per arrival or departure (Crius's search depth bounds the
        jobs one scheduling choice scales), or ``upgrades_per_round`` when set."""
        if self.upgrades_per_round is not None:
            return self.upgrades_per_round
        ev = ctx.events
        return self.depth * max(
            1, len(ev.arrived) + len(ev.finished) + len(ev.evicted) + len(ev.nodes_repaired)
        )

    def _fallback(self, ctx: SchedulingContext, js: JobState, a: Allocation) -> None:
        """A rescaled job whose new Cell and old GPUs are both taken: the best Cell that fits (else it waits)."""
        inf = self.info(ctx, js.job)
        for c in [self.held_cell(ctx, js, a)] + inf.cells:
            if ctx.reserve(js.job_id, c.gpus, c.n_stages) is not None:
                self._touched.add(js.job_id)
                return

    def admit(self, ctx: SchedulingContext, queue: list[JobState], plan: _Plan | None) -> list[int]:
        """Queued jobs in order: first each takes its group's best remaining LP Cell; then those left try free
        GPUs (a Cell worth its prices), opportunistic execution and shortest-remaining preemption. Returns the
        jobs started this round."""
        admitted: list[int] = []
        given = {k: list(v) for k, v in plan.queued.items()} if plan is not None else {}
        group_of = plan.group_of if plan is not None else {}
        for js in queue:
            cells = given.get(group_of.get(js.job_id, -1))
            while cells:
                c = cells.pop(0)
                if ctx.reserve(js.job_id, c.gpus, c.n_stages) is not None:
                    self._touched.add(js.job_id)
                    admitted.append(js.job_id)
                    break
        self._admit_rest(ctx, queue, admitted)
        return admitted

    def _admit_rest(self, ctx: SchedulingContext, queue: list[JobState], admitted: list[int]) -> None:
        """The jobs the LP left out (or whose Cell did not place): free GPUs, then the starvation and SRPT rules.
        A burst of identical jobs that found nothing is tried once while nothing changes."""
        failed: dict[tuple, int] = {}
        version = 0
        attempts = preempts = 0
        preempt_failed: set[tuple] = set()
        work = list(queue)
        k = 0
        while k < len(work):
            js = work[k]
            k += 1
            if ctx.allocation(js.job_id) is not None:
                continue
            key = (js.job.config, js.job.requested)
            if failed.get(key) != version:
                if self._backfill(ctx, js):
                    admitted.append(js.job_id)
                    version += 1
                    continue
                failed[key] = version
            freed = None
            if (
                self.opportunistic
                and attempts < self.opportunistic_attempts
                and max(js.job.arrival_s, js.last_change_s) < ctx.now_s - ctx.round_s
            ):
                attempts += 1
                freed = self.opportunistic_start(ctx, js)
            if (
                freed is None
                and self.preempt_factor > 0
                and preempts < self.preempt_attempts
                and key not in preempt_failed
            ):
                preempts += 1
                freed = self.preempt_for(ctx, js)
                if freed is None:
                    preempt_failed.add(key)
            if freed is not None:
                version += 1
                admitted.append(js.job_id)
                work.extend(freed)  # the suspended jobs queue again behind it

    def _backfill(self, ctx: SchedulingContext, js: JobState) -> bool:
        """Start a queued job on free GPUs: its best-valued Cell that places now and is worth its GPUs' prices (a
        mixed Cell only when no single type places)."""
        free = ctx.free_by_type()
        inf = self.info(ctx, js.job)
        mix: _Cell | None = None
        w = self.weight(ctx, js)
        for c in sorted(inf.cells, key=lambda c: -self.value(c, w)):
            if self.value(c, w) < -1e-9:
                break  # worth less than its GPUs' prices (at zero prices nothing is)
            if not all(free.get(t, 0) >= n for t, n in c.gpus) or ctx.place(c.gpus) is None:
                continue
            if c.mix:
                mix = mix or c
                continue
            mix = c
            break
        if mix is None or ctx.reserve(js.job_id, mix.gpus, mix.n_stages) is None:
            return False
        self._touched.add(js.job_id)
        return True

    # ------------------------------------------------------------------ opportunistic execution
    def opportunistic_start(self, ctx: SchedulingContext, js: JobState) -> list[JobState] | None:
        """Suspend the jobs launched opportunistically while ``js`` waited — started after it began waiting (its
        arrival, or losing its GPUs) — when that frees its smallest Cell on some type where that Cell is worth
        its GPUs at the round's prices (always, without contention); not jobs changed this
        round, nor ones ``preempt_factor`` × shorter than ``js`` (shortest-remaining-first would preempt them
        back). Only jobs on fewer GPUs than the Cell needs yield — the starvation this guards against is a large
        job's GPUs taken piecemeal by smaller ones; one large job does not suspend another. A job just suspended
        has only begun to wait, so suspensions do not chain. Returns the suspended jobs, or None."""
        inf = self.info(ctx, js.job)
        free = ctx.free_by_type()
        since = max(js.job.arrival_s, js.last_change_s)
        # jobs far shorter than this one are not suspended for it (it could preempt them back: no ping-pong)
        floor = self.priority(ctx, js) / self.preempt_factor if self.preempt_factor > 0 else -math.inf
        for c in inf.min_cells:
            if self.value(c, self.weight(ctx, js)) < -1e-9:
                continue  # the LP judges it not worth its GPUs now: waiting is not starvation by smaller jobs
            t, n = c.gpus[0]
            later = [
                (ctx.jobs[jid], a)
                for jid, a in ctx.allocations.items()
                if max(ctx.jobs[jid].first_start_s or 0.0, ctx.jobs[jid].last_change_s) > since
                and a.n_gpus < n
                and ctx.jobs[jid].job.priority <= js.job.priority
                and t in dict(a.gpus)
                and jid not in self._touched
                and self.remaining_gpu_s(ctx, ctx.jobs[jid])[1] >= floor
            ]
            if free.get(t, 0) >= n or free.get(t, 0) + sum(dict(a.gpus)[t] for _, a in later) < n:
                continue  # free GPUs suffice (the LP judged the job not worth them), or suspending cannot help
            later.sort(key=lambda oa: (-oa[0].job.arrival_s, -oa[0].job_id))  # latest first
            out = self._suspend_for(ctx, js, c, later)
            if out is not None:
                return out
        return None

    def _suspend_for(
        self, ctx: SchedulingContext, js: JobState, c: _Cell, victims: list[tuple[JobState, Allocation]]
    ) -> list[JobState] | None:
        """Release ``victims`` in order until Cell ``c`` fits, start ``js`` on it and give back what was not
        needed. Returns the suspended jobs, or None (everything restored) when ``c`` still does not fit."""
        released: list[tuple[JobState, Allocation]] = []
        for o, a in victims:
            if ctx.place(c.gpus) is not None:
                break
            released.append((o, a))
            ctx.release(o.job_id)
        if ctx.reserve(js.job_id, c.gpus, c.n_stages) is None:
            for o, a in released:
                ctx.reserve(o.job_id, a.gpus, a.n_stages, placement=a.placement)
            return None
        self._touched.add(js.job_id)
        out = []
        for o, a in released:  # give back what was suspended but not needed
            if ctx.reserve(o.job_id, a.gpus, a.n_stages, placement=a.placement) is None:
                out.append(o)
                self._touched.add(o.job_id)
        return out

    def preempt_for(self, ctx: SchedulingContext, js: JobState) -> list[JobState] | None:
        """Shortest-remaining-first under contention: suspend running jobs of a lower user priority, or of the
        same one when they need far more GPU-time (``preempt_factor`` × this job's priority), when that frees
        this job's smallest Cell (the best-valued type first); victims lowest priority and longest first, only
        jobs that have run at least a round and a restart's worth since their last change and are within their
        restart budget. Returns the suspended jobs, or None."""
        inf = self.info(ctx, js.job)
        mine = self.priority(ctx, js)
        if not inf.min_cells or not math.isfinite(mine):
            return None
        free = ctx.free_by_type()
        victims: dict[str, list[tuple[float, JobState, Allocation]]] = {}
        for prio, g, jid in self._preemptible(ctx):
            a = ctx.allocation(jid)
            if a is None or jid in self._touched or prio > js.job.priority:
                continue  # gone, changed this round, or a job the user ranked higher
            if prio == js.job.priority and g <= self.preempt_factor * mine:
                continue  # within one user priority, only far longer jobs make way
            for t, _ in a.gpus:
                victims.setdefault(t, []).append((g, ctx.jobs[jid], a))
        w = self.weight(ctx, js)
        for c in sorted(inf.min_cells, key=lambda c: (c.n_gpus, -self.value(c, w))):
            t, n = c.gpus[0]
            cand = victims.get(t, [])
            if free.get(t, 0) + sum(dict(a.gpus)[t] for _, _, a in cand) < n:
                continue
            cand.sort(key=lambda x: (x[1].job.priority, -x[0], -x[1].job_id))  # lowest priority, then longest
            out = self._suspend_for(ctx, js, c, [(o, a) for _, o, a in cand])
            if out is not None:
                return out
        return None

    def _preemptible(self, ctx: SchedulingContext) -> list[tuple[int, float, int]]:
        """(user priority, remaining GPU-seconds, id) of the jobs running at the round's start that have run a
        round and two restarts' time since their last change and are within their restart budget (once a
        round)."""
        if self._victims is None:
            now = ctx.now_s
            self._victims = [
                (js.job.priority, self.remaining_gpu_s(ctx, js)[1], js.job_id)
                for js in ctx.running
                if now - js.last_change_s >= max(ctx.round_s, 2 * self.restart_s(ctx, js))
                and self._may_restart(ctx, js)
            ]
        return self._victims

    # ------------------------------------------------------------------ growing what was just admitted
    def grow_new(self, ctx: SchedulingContext, ids: list[int]) -> None:
        """Jobs admitted this round have not started: growing them costs no restart (the allocation is still
        virtual). Spread the GPUs left idle over them, best gain in worth (at this round's prices) per extra
        GPU first."""
        heap: list[tuple[float, int, int, _Cell]] = []
        seq = 0
        free = ctx.free_by_type()
        for jid in ids:
            b = self._best_growth(ctx, jid, free)
            if b is not None:
                heapq.heappush(heap, (-b[0], seq, jid, b[1]))
                seq += 1
        while heap and sum(free.values()) > 0:
            _, _, jid, c = heapq.heappop(heap)
            old = ctx.allocation(jid)
            assert old is not None
            have = dict(old.gpus)
            if all(free.get(t, 0) + have.get(t, 0) >= n for t, n in c.gpus):
                ctx.release(jid)
                if ctx.reserve(jid, c.gpus, c.n_stages) is None:
                    ctx.reserve(jid, old.gpus, old.n_stages, placement=old.placement)
                    continue  # placement failed: this job stays as it is
                free = ctx.free_by_type()
            b = self._best_growth(ctx, jid, free)
            if b is not None:
                heapq.heappush(heap, (-b[0], seq, jid, b[1]))
                seq += 1

    def _best_growth(
        self, ctx: SchedulingContext, jid: int, free: dict[str, int]
    ) -> tuple[float, _Cell] | None:
        """(gain per extra GPU, Cell) of the job's best larger single-type Cell the free GPUs allow, if any."""
        a = ctx.allocation(jid)
        if a is None:
            return None
        js = ctx.jobs[jid]
        cur = self.held_cell(ctx, js, a)
        w = self.weight(ctx, js)
        have = dict(a.gpus)
        best: tuple[float, _Cell] | None = None
        for c in self.info(ctx, js.job).cells:
            if c.norm <= cur.norm * (1 + self.min_gain):
                break  # fastest first: nothing further is faster
            extra = c.n_gpus - a.n_gpus
            if c.mix or extra <= 0 or not all(free.get(t, 0) + have.get(t, 0) >= n for t, n in c.gpus):
                continue
            gain = self.value(c, w) - self.value(cur, w)
            if gain > self.min_gain * cur.norm and (best is None or gain / extra > best[0]):
                best = (gain / extra, c)
        return best

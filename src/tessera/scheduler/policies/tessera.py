"""Tessera — Crius's Cell-based scheduling (Crius §6, Algorithm 1) with Frenzy's HAS placement.

Rules implemented:

* **Cells per job** (Crius §6.1 "Initializing Cells"): for every GPU type, counts N/2, N, 2N — N the requested
  count raised to the fewest GPUs the model fits in (the memory module; N from memory alone when none is
  requested) — × the stage counts 1, 2, 4, … × GPU types and even two-type mixes; each Cell carries its
  estimate (Crius §5.1), and the best stage count per GPUs is the Cell the job gets.
* **Objective** (§6): maximum cluster throughput, each job's throughput normalized by its estimate on the GPUs it
  requested (so a small model's many iterations per second do not outweigh a large one).
* **CellBasedSched** (Algorithm 1, lines 14-20) for every queued job in arrival order (SchedArrival / the
  pending retry of SchedDeparture): choices place the job on one of its Cells with the free GPUs, or after
  scaling up to ``depth`` running jobs (the search depth, default 3) down to a smaller Cell of theirs or over
  to another GPU type with room (ScaleResource); the choice with the best throughput gain, net of the restart
  cost of the jobs it rescales, wins (BestPerf) and is applied virtually (VirtualAlloc). No gain: the job
  pends.
* **Extra scheduling** (Algorithm 1 line 12): GPUs still idle go to running jobs — to a larger Cell or a faster
  GPU type — best gain per extra GPU first, at most ``depth`` × 2 rescales a round, each only when the speed-up
  over the job's remaining time repays its restart.
* **FinalizeAlloc** (lines 8 and 13): the virtual allocation becomes real at the end of the round (the core binds
  it).
* **Queue order** (Crius §6 takes the queue in arrival order; under contention that leaves short jobs behind
  long ones): queued jobs are taken shortest-remaining-first — the GPU-seconds the job still needs on its
  smallest Cell (the work it reports ÷ the Cell estimate), divided by its response ratio 1 + waited ÷ needed
  (HRRN aging, so a long job that has waited comes up). ``order="arrival"`` restores Crius's order.
* **Opportunistic execution** (§6.1): a job that waited a round and still finds no room may suspend jobs that
  arrived after it (they ran opportunistically on GPUs it was waiting for) once that frees its smallest Cell —
  but not jobs ``preempt_factor`` × shorter than it (the next rule would preempt them back).
* **Shortest-remaining preemption** (SRPT / Tiresias-style; Crius's throughput objective per GPU agrees: many
  short jobs on the GPUs of one long job run more normalized throughput): a queued job that finds no room may
  suspend running jobs needing more than ``preempt_factor`` (8) × its GPU-seconds, longest first, once that
  frees its smallest Cell. Against thrashing, a victim must have run a round and twice its restart time since
  its last change, and has restarted fewer than ``max_restarts`` times; ``preempt_attempts`` per round.
* **Deadline-aware mode** (§8.5, ``tessera-ddl``): jobs are taken earliest deadline first, and a job that cannot
  meet its deadline even on its fastest Cell is dropped early.
* **Ablations** (§8.6): ``tessera-na`` has no adaptivity scaling (GPU count fixed at N), ``tessera-nh`` no
  heterogeneity scaling (the requested GPU type only).
* Placement: HAS best-fit, a job that fits one node kept in one node (Frenzy §IV-B).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from tessera.scheduler.knowledge import CellOption
from tessera.scheduler.policy import Policy, SchedulingContext, register
from tessera.scheduler.state import Allocation, GPUs, Job, JobState


@dataclass(frozen=True)
class _Cell:
    """One allowed Cell of a job, flattened for the hot loops."""

    norm: float  # estimated rate ÷ the job's estimated rate on its request
    rate: float
    gpus: GPUs
    n_stages: int | None
    n_gpus: int
    mix: bool


@dataclass
class _JobInfo:
    cells: list[_Cell]  # allowed Cells, fastest first
    ref: float  # estimated rate on the requested GPUs (the normalization)
    by_gpus: dict[GPUs, _Cell]
    min_cells: list[_Cell]  # per single type, the Cell with the fewest GPUs (fewest first)


def _subset(placement: tuple[tuple[int, int], ...], n: int) -> tuple[tuple[int, int], ...]:
    """``n`` of a job's own GPUs to keep when it shrinks: its fullest nodes first (compact, no new nodes)."""
    out: list[tuple[int, int]] = []
    for i, k in sorted(placement, key=lambda p: (-p[1], p[0])):
        if n <= 0:
            break
        out.append((i, min(k, n)))
        n -= min(k, n)
    return tuple(sorted(out))


# a way to free GPUs of one type: (loss per freed GPU, GPUs freed, job id, its new GPUs, new type, new count)
_Donor = tuple[float, int, int, GPUs, str, int]


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
        upgrade_candidates: int = 256,
        opportunistic_attempts: int = 8,
        min_gain: float = 0.02,
        max_scale: int = 4,
        max_gpus: int = 64,
        spread: bool | str = False,
        grow: bool = True,
        mix_margin: float = math.inf,
        order: str = "srpt",
        preempt_factor: float = 8.0,
        preempt_attempts: int = 64,
        max_restarts: int = 8,
        aging: bool = True,
    ) -> None:
        if depth < 0:
            raise ValueError(f"depth must be >= 0, got {depth}")
        self.depth = depth
        self.count_scaling = count_scaling
        self.type_scaling = type_scaling
        self.mixes = mixes and type_scaling
        self.opportunistic = opportunistic
        self.deadline_aware = deadline_aware
        self.upgrades_per_round = upgrades_per_round  # None: depth per departure (and per round at least)
        self.upgrade_candidates = upgrade_candidates
        self.opportunistic_attempts = opportunistic_attempts
        self.min_gain = min_gain
        self.max_scale, self.max_gpus = max_scale, max_gpus
        self.spread = spread
        self.grow = grow
        self.mix_margin = mix_margin
        if order not in ("srpt", "arrival"):
            raise ValueError(f"order must be 'srpt' or 'arrival', got {order!r}")
        self.order = order
        self.preempt_factor = preempt_factor
        self.preempt_attempts = preempt_attempts
        self.max_restarts = max_restarts
        self.aging = aging
        self._info: dict[int, _JobInfo] = {}
        self._shared: dict[tuple, _JobInfo] = {}
        self._touched: set[int] = set()  # jobs whose allocation changed this round (rescaled at most once)
        self._donors: dict[str, list[_Donor]] | None = None

    def reset(self) -> None:
        self._info.clear()
        self._shared.clear()

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
        types = list(kn.gpu_types)
        if not self.type_scaling and job.requested_type:
            types = [job.requested_type]
        counts: dict[str, list[int]] = {}
        for t in types:
            n = kn.base_count(job, t)
            if not n:
                counts[t] = []
            elif not self.count_scaling:
                counts[t] = [n]
            else:  # N/2, N, 2N, … max_scale·N (Crius: max_scale = 2)
                ladder = {max(1, n // 2)}
                k = n
                while k <= self.max_scale * n and k <= self.max_gpus:
                    ladder.add(k)
                    k *= 2
                counts[t] = sorted(ladder)
        opts: list[CellOption] = kn.cells(job, gpu_types=types, counts=counts, mixes=self.mixes)
        req = job.requested
        ref = kn.cell_rate(job, req) if req is not None else 0.0
        if ref <= 0:  # no request (or it does not fit): the fastest Cell at the base count
            base = [c for c in opts if not c.is_mix and c.n_gpus == kn.base_count(job, c.gpus[0][0])]
            ref = max((c.rate_iters_per_s for c in base or opts), default=1.0)
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
        inf = _JobInfo(cells, ref, {c.gpus: c for c in cells}, sorted(mins.values(), key=lambda c: c.n_gpus))
        self._info[job.job_id] = self._shared[key] = inf
        return inf

    def norm(self, ctx: SchedulingContext, job: Job, gpus: GPUs) -> float:
        inf = self.info(ctx, job)
        c = inf.by_gpus.get(gpus)
        return c.norm if c is not None else ctx.knowledge.cell_rate(job, gpus) / inf.ref

    def penalty(self, ctx: SchedulingContext, js: JobState, new: _Cell) -> float:
        """A rescale's restart in throughput terms: over the job's remaining time on the new Cell (T), a
        restart of c seconds leaves an average of new × T / (c + T); the penalty is the difference."""
        T = js.remaining_at(ctx.now_s) / new.rate
        c = ctx.restart_s(js.job)
        return new.norm * c / (c + T) if c + T > 0 else 0.0

    # ------------------------------------------------------------------ the round
    def schedule(self, ctx: SchedulingContext) -> None:
        for jid in ctx.events.finished:
            self._info.pop(jid, None)
        self._touched = set()
        self._donors = None
        if self.deadline_aware:
            self._drop_hopeless(ctx)
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
        # (config, request) of jobs that found no choice, at the state version they failed at: a burst of
        # identical jobs is tried once while nothing changes
        failed: dict[tuple, int] = {}
        version = 0
        queue = list(pending)
        # GPUs the queue needs at its smallest Cells, to tell contention from plenty
        demand = sum(self._min_gpus(ctx, js) for js in queue)
        k = 0
        attempts = 0
        preempts = 0
        preempt_failed: set[tuple] = set()
        while k < len(queue):
            js = queue[k]
            k += 1
            if ctx.allocation(js.job_id) is not None:
                continue
            need = self._min_gpus(ctx, js)
            demand -= need
            key = (js.job.config, js.job.requested)
            placed = False
            if failed.get(key) != version:
                free_total = sum(ctx.free_by_type().values())
                spare = free_total - need - max(0, demand)
                if self.spread == "share":  # a fair share of what is free among the jobs still queued
                    spare = free_total // max(1, len(queue) - k + 1) - self._min_gpus(ctx, js)
                placed = self.cell_based_sched(ctx, js, spare, max(0, demand))
                if placed:
                    version += 1
                else:
                    failed[key] = version
            if (
                not placed
                and self.opportunistic
                and attempts < self.opportunistic_attempts
                and js.job.arrival_s < ctx.now_s - ctx.round_s
            ):
                attempts += 1
                freed = self.opportunistic_start(ctx, js)
                if freed is not None:
                    version += 1
                    queue.extend(freed)  # the suspended jobs queue again behind it
                    demand += sum(self._min_gpus(ctx, o) for o in freed)
                    placed = True
            if (
                not placed
                and self.preempt_factor > 0
                and preempts < self.preempt_attempts
                and key not in preempt_failed
                and ctx.allocation(js.job_id) is None
            ):
                preempts += 1
                freed = self.preempt_for(ctx, js)
                if freed is None:
                    preempt_failed.add(key)
                else:
                    version += 1
                    queue.extend(freed)
                    demand += sum(self._min_gpus(ctx, o) for o in freed)
        if self.grow:
            self.grow_new(ctx, [js.job_id for js in queue if js.status.value == "pending"])
        self.extra_scheduling(ctx)

    def remaining_gpu_s(self, ctx: SchedulingContext, js: JobState) -> tuple[float, float]:
        """(seconds, GPU-seconds) the job still needs on its smallest Cell, from the work it reports and the
        Cell estimate."""
        inf = self.info(ctx, js.job)
        if not inf.min_cells:
            return math.inf, math.inf
        c = inf.min_cells[0]
        t = js.remaining_at(ctx.now_s) / c.rate if c.rate > 0 else math.inf
        return t, t * c.n_gpus

    def priority(self, ctx: SchedulingContext, js: JobState) -> float:
        """Queue order (smaller first): the GPU-seconds the job still needs on its smallest Cell, shortened by
        its response ratio (1 + waited ÷ needed, HRRN) so a long job that has waited long enough comes up."""
        t, g = self.remaining_gpu_s(ctx, js)
        if not math.isfinite(g) or not self.aging:
            return g
        waited = max(0.0, ctx.now_s - max(js.job.arrival_s, js.last_change_s))
        return g / (1.0 + waited / max(t, ctx.round_s))

    def _min_gpus(self, ctx: SchedulingContext, js: JobState) -> int:
        inf = self.info(ctx, js.job)
        return inf.min_cells[0].n_gpus if inf.min_cells else 0

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
            start_cost = 0.0 if ctx.allocation(js.job_id) is not None else ctx.restart_s(js.job)
            if ctx.now_s + start_cost + js.remaining_at(ctx.now_s) / best > d:
                ctx.drop(js.job_id)

    # ------------------------------------------------------------------ CellBasedSched
    def cell_based_sched(
        self, ctx: SchedulingContext, js: JobState, spare: int | None = None, behind: int = 0
    ) -> bool:
        """Place a queued job on its best choice (free GPUs, or scaling ≤ depth running jobs); False: pend.

        ``spare``: free GPUs beyond what the jobs still queued behind this one need at their smallest Cells.
        When GPUs are contended (a Cell would eat into that), the job takes no more than its smallest Cell's
        GPUs plus the spare: cluster throughput is higher spread over more jobs (scaling is sublinear), and
        extra scheduling grows jobs once the queue is served. ``behind``: GPUs the jobs queued behind this one
        need — GPUs a rescale frees beyond this job's need serve them, so only the rest is charged here."""
        inf = self.info(ctx, js.job)
        if not inf.cells:
            return False
        free = ctx.free_by_type()
        cap = math.inf
        if self.spread and spare is not None and behind > 0 and inf.min_cells:
            cap = inf.min_cells[0].n_gpus + max(0, spare)
        # direct choices: the first Cell (fastest first) within the cap that fits the free GPUs now
        direct: _Cell | None = None
        mix: _Cell | None = None
        for c in inf.cells:
            if c.n_gpus > cap:
                continue
            if all(free.get(t, 0) >= n for t, n in c.gpus) and ctx.place(c.gpus) is not None:
                if c.mix:
                    mix = mix or c
                    continue
                direct = c
                break
        # a mixed Cell pins two types' GPUs and cannot shrink type by type: it has to be clearly faster
        if mix is not None and (direct is None or mix.norm > direct.norm * (1 + self.mix_margin)):
            direct = mix
        g_direct = direct.norm if direct is not None else 0.0
        # scaling choices: Cells better than the direct one, made room for by rescaling ≤ depth jobs
        choices: list[tuple[float, _Cell, list[_Donor]]] = []
        if self.depth > 0:
            for c in inf.cells:
                if c.norm <= g_direct + self.min_gain:
                    break
                if c.mix or c.n_gpus > cap:
                    continue  # mixes are taken only when free; donors free one type at a time
                plan = self._room_for(ctx, c, free, behind)
                if plan is None:
                    continue
                loss, moves = plan
                net = c.norm - loss
                if net > g_direct + self.min_gain and net > 0:
                    choices.append((net, c, moves))
        # the best choice that can be placed (fragmentation may defeat one), a few tries at most
        choices.sort(key=lambda x: -x[0])
        for _, c, moves in choices[:4]:
            if self._apply_moves(ctx, js, c, moves):
                return True
        if direct is not None:
            ok = ctx.reserve(js.job_id, direct.gpus, direct.n_stages) is not None
            if ok:
                self._touched.add(js.job_id)
            return ok
        return False

    def _build_donors(self, ctx: SchedulingContext) -> dict[str, list[_Donor]]:
        """Per GPU type, ways to free its GPUs from running jobs, cheapest loss per GPU first: shrink to half
        the count (adaptivity scaling) or move to another type (heterogeneity scaling; whether the target has
        room is checked when used)."""
        out: dict[str, list[_Donor]] = {}
        for jid, a in ctx.allocations.items():
            if len(a.gpus) != 1 or jid in self._touched:
                continue
            js = ctx.jobs[jid]
            t, n = a.gpus[0]
            inf = self.info(ctx, js.job)
            cur = inf.by_gpus[a.gpus].norm if a.gpus in inf.by_gpus else self.norm(ctx, js.job, a.gpus)
            if self.count_scaling and n >= 2:
                half = ((t, n // 2),)
                c = inf.by_gpus.get(half)
                if c is not None:
                    loss = cur - c.norm + self.penalty(ctx, js, c)
                    out.setdefault(t, []).append((loss / (n - n // 2), n - n // 2, jid, half, t, n // 2))
            if self.type_scaling:
                seen: set[str] = set()
                for c in inf.cells:
                    if c.mix or c.gpus[0][0] == t or c.gpus[0][0] in seen:
                        continue
                    u, m = c.gpus[0]
                    seen.add(u)
                    loss = cur - c.norm + self.penalty(ctx, js, c)
                    out.setdefault(t, []).append((loss / n, n, jid, c.gpus, u, m))
        for lst in out.values():
            lst.sort(key=lambda x: (x[0], x[2]))
        return out

    def _room_for(
        self, ctx: SchedulingContext, c: _Cell, free: dict[str, int], behind: int = 0
    ) -> tuple[float, list[_Donor]] | None:
        """Cheapest donors (≤ depth jobs) that free enough GPUs for Cell ``c`` (counts only; placement is
        checked when applied)."""
        if self._donors is None:
            self._donors = self._build_donors(ctx)
        moves: list[_Donor] = []
        used: set[int] = set()
        room = dict(free)
        cell_types = {t for t, _ in c.gpus}
        loss = 0.0
        for t, n in c.gpus:
            need = n - room.get(t, 0)
            for d in self._donors.get(t, ()):
                if need <= 0:
                    break
                per_gpu, k, jid, _, u, m = d
                if jid in used or jid in self._touched:
                    continue
                if u != t and (u in cell_types or room.get(u, 0) < m):
                    continue  # a move needs room on its new type, and not GPUs this Cell needs
                if len(moves) >= self.depth:
                    return None
                moves.append(d)
                used.add(jid)
                # GPUs freed beyond this Cell's need go to the jobs queued behind: charge only the rest
                surplus = max(0, k - need)
                taken = min(surplus, behind)
                behind -= taken
                loss += per_gpu * (k - taken)
                need -= k
                if u != t:
                    room[u] = room.get(u, 0) - m
            if need > 0:
                return None
        return loss, moves

    def _apply_moves(self, ctx: SchedulingContext, js: JobState, c: _Cell, moves: list[_Donor]) -> bool:
        """Rescale the donors (a shrink keeps part of its own GPUs, a move goes to its new type), then place the
        job; roll everything back when something does not fit."""
        before: list[tuple[int, Allocation]] = []
        ok = True
        for d in moves:
            jid, new = d[2], d[3]
            a = ctx.allocation(jid)
            if a is None:
                ok = False
                break
            before.append((jid, a))
            ctx.release(jid)
            cell = self.info(ctx, ctx.jobs[jid].job).by_gpus[new]
            keep = _subset(a.placement, new[0][1]) if new[0][0] == a.gpus[0][0] else None
            if ctx.reserve(jid, new, cell.n_stages, placement=keep) is None:
                ok = False
                break
        if ok and ctx.reserve(js.job_id, c.gpus, c.n_stages) is not None:
            self._touched.add(js.job_id)
            self._touched.update(d[2] for d in moves)
            return True
        for jid, _ in before:
            ctx.release(jid)
        for jid, a in before:
            ctx.reserve(jid, a.gpus, a.n_stages, placement=a.placement)
        return False

    # ------------------------------------------------------------------ opportunistic execution
    def opportunistic_start(self, ctx: SchedulingContext, js: JobState) -> list[JobState] | None:
        """Suspend jobs that arrived after ``js`` (they ran opportunistically) when that frees its smallest
        Cell on some type — not jobs changed this round, nor ones ``preempt_factor`` × shorter than ``js``
        (shortest-remaining-first would preempt them back). Returns the suspended jobs, or None."""
        inf = self.info(ctx, js.job)
        free = ctx.free_by_type()
        arrival = js.job.arrival_s
        # jobs far shorter than this one are not suspended for it (it could preempt them back: no ping-pong)
        floor = self.priority(ctx, js) / self.preempt_factor if self.preempt_factor > 0 else -math.inf
        for c in inf.min_cells:
            t, n = c.gpus[0]
            later = [
                (ctx.jobs[jid], a)
                for jid, a in ctx.allocations.items()
                if ctx.jobs[jid].job.arrival_s > arrival
                and ctx.jobs[jid].job.priority <= js.job.priority
                and t in dict(a.gpus)
                and jid not in self._touched
                and self.remaining_gpu_s(ctx, ctx.jobs[jid])[1] >= floor
            ]
            if free.get(t, 0) + sum(dict(a.gpus)[t] for _, a in later) < n:
                continue
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
        self._donors = None
        return out

    def preempt_for(self, ctx: SchedulingContext, js: JobState) -> list[JobState] | None:
        """Shortest-remaining-first under contention: suspend running jobs of a lower user priority, or of the
        same one when they need far more GPU-time (``preempt_factor`` × this job's priority), when that frees
        this job's smallest Cell; victims lowest priority and longest first, only jobs that have run at least a
        round and a restart's worth since their last change and have restarted fewer than ``max_restarts`` times. Returns the suspended jobs, or None."""
        inf = self.info(ctx, js.job)
        mine = self.priority(ctx, js)
        if not inf.min_cells or not math.isfinite(mine):
            return None
        now = ctx.now_s
        free = ctx.free_by_type()
        victims: dict[str, list[tuple[float, JobState, Allocation]]] = {}
        for jid, a in ctx.allocations.items():
            if jid in self._touched:
                continue
            o = ctx.jobs[jid]
            if o.restarts >= self.max_restarts:
                continue
            if now - o.last_change_s < max(ctx.round_s, 2 * ctx.restart_s(o.job)):
                continue
            if o.job.priority > js.job.priority:
                continue  # never for a job the user ranked lower
            g = self.remaining_gpu_s(ctx, o)[1]
            if o.job.priority == js.job.priority and g <= self.preempt_factor * mine:
                continue  # within one user priority, only far longer jobs make way
            for t, _ in a.gpus:
                victims.setdefault(t, []).append((g, o, a))
        for c in inf.min_cells:
            t, n = c.gpus[0]
            cand = victims.get(t, [])
            if free.get(t, 0) + sum(dict(a.gpus)[t] for _, _, a in cand) < n:
                continue
            cand.sort(key=lambda x: (x[1].job.priority, -x[0], -x[1].job_id))  # lowest priority, then longest
            out = self._suspend_for(ctx, js, c, [(o, a) for _, o, a in cand])
            if out is not None:
                return out
        return None

    # ------------------------------------------------------------------ extra scheduling (scale up)
    def grow_new(self, ctx: SchedulingContext, ids: list[int]) -> None:
        """Jobs admitted this round have not started: growing them costs no restart (the allocation is still
        virtual). Spread the GPUs left after admission over them, best throughput gain per extra GPU first."""
        heap: list[tuple[float, int, int, _Cell]] = []
        seq = 0

        def best_for(jid: int, free: dict[str, int]) -> tuple[float, _Cell] | None:
            a = ctx.allocation(jid)
            if a is None:
                return None
            inf = self.info(ctx, ctx.jobs[jid].job)
            cur = self.norm(ctx, ctx.jobs[jid].job, a.gpus)
            have = dict(a.gpus)
            best: tuple[float, _Cell] | None = None
            for c in inf.cells:
                if c.norm <= cur * (1 + self.min_gain):
                    break
                if c.mix:
                    continue  # mixes only as a fallback at admission
                extra = c.n_gpus - a.n_gpus
                if extra <= 0 or not all(free.get(t, 0) + have.get(t, 0) >= n for t, n in c.gpus):
                    continue
                score = (c.norm - cur) / extra
                if best is None or score > best[0]:
                    best = (score, c)
            return best

        free = ctx.free_by_type()
        for jid in ids:
            b = best_for(jid, free)
            if b is not None:
                heapq.heappush(heap, (-b[0], seq, jid, b[1]))
                seq += 1
        while heap and sum(free.values()) > 0:
            neg, _, jid, c = heapq.heappop(heap)
            old = ctx.allocation(jid)
            assert old is not None
            have = dict(old.gpus)
            if all(free.get(t, 0) + have.get(t, 0) >= n for t, n in c.gpus):
                ctx.release(jid)
                if ctx.reserve(jid, c.gpus, c.n_stages) is None:
                    ctx.reserve(jid, old.gpus, old.n_stages, placement=old.placement)
                    continue  # placement failed: this job stays as it is
                free = ctx.free_by_type()
            b = best_for(jid, free)
            if b is not None:
                heapq.heappush(heap, (-b[0], seq, jid, b[1]))
                seq += 1

    def extra_scheduling(self, ctx: SchedulingContext) -> None:
        """Give idle GPUs to running jobs: a larger Cell or a faster type, best gain per extra GPU first,
        among the jobs with the most time left (where a restart pays off best)."""
        limit = self.upgrades_per_round
        if limit is None:  # Algorithm 1 line 12: one CellBasedSched (≤ depth rescales) per departure
            limit = self.depth * max(1, len(ctx.events.finished) + len(ctx.events.nodes_repaired))
        if limit <= 0:
            return
        free = ctx.free_by_type()
        if sum(free.values()) == 0:
            return
        now = ctx.now_s
        held = [(jid, a) for jid, a in ctx.allocations.items() if jid not in self._touched]
        kn = ctx.knowledge

        def time_left(item: tuple[int, Allocation]) -> float:
            js = ctx.jobs[item[0]]
            r = js.rate_iters_per_s or kn.cell_rate(js.job, item[1].gpus) or 1.0
            return js.remaining_at(now) / r

        held.sort(key=lambda x: (-time_left(x), x[0]))
        cands: list[tuple[float, int, _Cell]] = []
        for jid, a in held[: self.upgrade_candidates]:
            js = ctx.jobs[jid]
            inf = self.info(ctx, js.job)
            cur = self.norm(ctx, js.job, a.gpus)
            have = dict(a.gpus)
            for c in inf.cells:
                if c.norm <= cur * (1 + self.min_gain):
                    break  # fastest first: nothing further is faster
                if c.mix:
                    continue  # mixes only as a fallback at admission
                if not all(free.get(t, 0) + have.get(t, 0) >= n for t, n in c.gpus):
                    continue
                gain = c.norm - cur - self.penalty(ctx, js, c)
                if gain > self.min_gain * max(cur, 1e-9):
                    cands.append((gain / max(1, c.n_gpus - a.n_gpus), jid, c))
                break  # the fastest reachable Cell of this job
        cands.sort(key=lambda x: (-x[0], x[1]))
        done = 0
        for _, jid, c in cands:
            if done >= limit:
                break
            old = ctx.allocation(jid)
            assert old is not None
            have = dict(old.gpus)
            free = ctx.free_by_type()
            if not all(free.get(t, 0) + have.get(t, 0) >= n for t, n in c.gpus):
                continue
            ctx.release(jid)
            if ctx.reserve(jid, c.gpus, c.n_stages) is None:
                ctx.reserve(jid, old.gpus, old.n_stages, placement=old.placement)
                continue
            self._touched.add(jid)
            done += 1

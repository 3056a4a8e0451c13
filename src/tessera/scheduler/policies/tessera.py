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
* **Opportunistic execution** (§6.1): a job that waited a round and still finds no room may suspend jobs that
  arrived after it (they ran opportunistically on GPUs it was waiting for) once that frees its smallest Cell.
* **Deadline-aware mode** (§8.5, ``tessera-ddl``): jobs are taken earliest deadline first, and a job that cannot
  meet its deadline even on its fastest Cell is dropped early.
* **Ablations** (§8.6): ``tessera-na`` has no adaptivity scaling (GPU count fixed at N), ``tessera-nh`` no
  heterogeneity scaling (the requested GPU type only).
* Placement: HAS best-fit, a job that fits one node kept in one node (Frenzy §IV-B).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tessera.scheduler.knowledge import CellOption
from tessera.scheduler.policy import Policy, SchedulingContext, register
from tessera.scheduler.state import Allocation, GPUs, Job, JobState


@dataclass
class _JobInfo:
    cells: list[CellOption]  # allowed Cells, fastest first
    ref: float  # estimated rate on the requested GPUs (normalization)
    by_gpus: dict[GPUs, CellOption]
    min_cells: list[CellOption]  # per type, the Cell with the fewest GPUs


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
        min_gain: float = 0.02,
    ) -> None:
        if depth < 0:
            raise ValueError(f"depth must be >= 0, got {depth}")
        self.depth = depth
        self.count_scaling = count_scaling
        self.type_scaling = type_scaling
        self.mixes = mixes and type_scaling
        self.opportunistic = opportunistic
        self.deadline_aware = deadline_aware
        self.upgrades_per_round = 2 * depth if upgrades_per_round is None else upgrades_per_round
        self.min_gain = min_gain
        self._info: dict[int, _JobInfo] = {}
        self._version = 0  # bumped whenever the virtual allocation changes (memo key)
        self._donors: tuple[int, dict] | None = None

    def reset(self) -> None:
        self._info.clear()

    # ------------------------------------------------------------------ Cells of a job
    def info(self, ctx: SchedulingContext, job: Job) -> _JobInfo:
        inf = self._info.get(job.job_id)
        if inf is not None:
            return inf
        kn = ctx.knowledge
        types = list(kn.gpu_types)
        if not self.type_scaling and job.requested_type:
            types = [job.requested_type]
        counts = None
        if not self.count_scaling:
            counts = {}
            for t in types:
                n = kn.base_count(job, t)
                counts[t] = [n] if n else []
        cells = kn.cells(job, gpu_types=types, counts=counts, mixes=self.mixes)
        req = job.requested
        ref = kn.cell_rate(job, req) if req is not None else 0.0
        if ref <= 0:
            base = [c for c in cells if c.n_gpus == kn.base_count(job, c.gpus[0][0]) and not c.is_mix]
            ref = max((c.rate_iters_per_s for c in base), default=0.0) or max(
                (c.rate_iters_per_s for c in cells), default=1.0
            )
        min_cells: dict[str, CellOption] = {}
        for c in cells:
            if c.is_mix:
                continue
            t = c.gpus[0][0]
            if t not in min_cells or (c.n_gpus, -c.rate_iters_per_s) < (
                min_cells[t].n_gpus,
                -min_cells[t].rate_iters_per_s,
            ):
                min_cells[t] = c
        inf = _JobInfo(
            cells, ref, {c.gpus: c for c in cells}, sorted(min_cells.values(), key=lambda c: c.n_gpus)
        )
        self._info[job.job_id] = inf
        return inf

    def norm(self, ctx: SchedulingContext, job: Job, gpus: GPUs) -> float:
        inf = self.info(ctx, job)
        c = inf.by_gpus.get(gpus)
        r = c.rate_iters_per_s if c is not None else ctx.knowledge.cell_rate(job, gpus)
        return r / inf.ref

    def penalty(self, ctx: SchedulingContext, js: JobState, new_norm: float) -> float:
        """A rescale's restart in throughput terms: over the job's remaining time on the new Cell (T), a restart
        of c seconds leaves an average of new × T / (c + T) — the penalty is the difference."""
        if new_norm <= 0:
            return 0.0
        rate = new_norm * self.info(ctx, js.job).ref
        T = js.remaining_at(ctx.now_s) / rate
        c = ctx.restart_s(js.job)
        return new_norm * c / (c + T) if c + T > 0 else 0.0

    # ------------------------------------------------------------------ the round
    def schedule(self, ctx: SchedulingContext) -> None:
        for jid in ctx.events.finished:
            self._info.pop(jid, None)
        if self.deadline_aware:
            self._drop_hopeless(ctx)
        dropped = ctx.dropped
        pending = [js for js in ctx.pending if js.job_id not in dropped]
        if self.deadline_aware:
            pending.sort(key=lambda js: (js.job.deadline_s if js.job.deadline_s is not None else math.inf,
                                         js.job.arrival_s, js.job_id))  # fmt: skip
        failed: dict[tuple, int] = {}  # (config, requested) of jobs that found no choice, at state version
        self._version += 1
        queue = list(pending)
        k = 0
        opportunistic_done = 0
        while k < len(queue):
            js = queue[k]
            k += 1
            if ctx.allocation(js.job_id) is not None:
                continue
            key = (js.job.config, js.job.requested)
            if failed.get(key) == self._version:
                placed = False
            else:
                placed = self.cell_based_sched(ctx, js)
                if placed:
                    self._version += 1
                else:
                    failed[key] = self._version
            if (
                not placed
                and self.opportunistic
                and opportunistic_done < 2
                and js.job.arrival_s < ctx.now_s - ctx.round_s
            ):
                freed = self.opportunistic_start(ctx, js)
                if freed is not None:
                    opportunistic_done += 1
                    self._version += 1
                    queue.extend(freed)  # the suspended jobs queue again behind it
        self.extra_scheduling(ctx)

    def _drop_hopeless(self, ctx: SchedulingContext) -> None:
        for js in (*ctx.running, *ctx.pending):
            d = js.job.deadline_s
            if d is None:
                continue
            inf = self.info(ctx, js.job)
            best = max((c.rate_iters_per_s for c in inf.cells), default=0.0)
            if best <= 0:
                ctx.drop(js.job_id)
                continue
            held = ctx.allocation(js.job_id)
            start_cost = 0.0 if held is not None else ctx.restart_s(js.job)
            if ctx.now_s + start_cost + js.remaining_at(ctx.now_s) / best > d:
                ctx.drop(js.job_id)

    # ------------------------------------------------------------------ CellBasedSched
    def cell_based_sched(self, ctx: SchedulingContext, js: JobState) -> bool:
        """Place a queued job on its best choice (free GPUs, or scaling ≤ depth running jobs); False: pend."""
        inf = self.info(ctx, js.job)
        if not inf.cells:
            return False
        free = ctx.free_by_type()
        # direct choices: the first Cell (fastest first) that fits the free GPUs now
        best_direct: CellOption | None = None
        for c in inf.cells:
            if all(free.get(t, 0) >= n for t, n in c.gpus) and ctx.place(c.gpus) is not None:
                best_direct = c
                break
        g_direct = best_direct.rate_iters_per_s / inf.ref if best_direct is not None else 0.0
        # scaling choices: Cells better than the direct one, made room for by rescaling ≤ depth jobs
        best_scaled: tuple[float, CellOption, list[tuple[JobState, GPUs | None]]] | None = None
        if self.depth > 0:
            donors = None
            for c in inf.cells:
                g = c.rate_iters_per_s / inf.ref
                if g <= g_direct + self.min_gain:
                    break
                if donors is None:
                    if self._donors is None or self._donors[0] != self._version:
                        self._donors = (self._version, self._donor_options(ctx))
                    donors = self._donors[1]
                plan = self._room_for(ctx, c, free, donors)
                if plan is None:
                    continue
                loss, moves = plan
                net = g - loss
                if (
                    net > g_direct + self.min_gain
                    and net > 0
                    and (best_scaled is None or net > best_scaled[0])
                ):
                    best_scaled = (net, c, moves)
        if best_scaled is not None:
            _, c, moves = best_scaled
            if self._apply_moves(ctx, js, c, moves):
                return True
        if best_direct is not None:
            return ctx.reserve(js.job_id, best_direct.gpus, best_direct.n_stages) is not None
        return False

    def _donor_options(
        self, ctx: SchedulingContext
    ) -> dict[str, list[tuple[float, int, JobState, GPUs | None]]]:
        """Per GPU type, ways to free GPUs of that type from running jobs: (loss per freed GPU, GPUs freed,
        the job, its new GPUs) — shrink to half the count (adaptivity) or move to another type (heterogeneity)."""
        out: dict[str, list[tuple[float, int, JobState, GPUs | None]]] = {}
        free = ctx.free_by_type()
        for jid, a in ctx.allocations.items():
            if len(a.gpus) != 1:
                continue
            js = ctx.jobs[jid]
            t, n = a.gpus[0]
            inf = self.info(ctx, js.job)
            cur = self.norm(ctx, js.job, a.gpus)
            if self.count_scaling and n >= 2:
                half = ((t, n // 2),)
                c = inf.by_gpus.get(half)
                if c is not None:
                    new = c.rate_iters_per_s / inf.ref
                    loss = cur - new + self.penalty(ctx, js, new)
                    out.setdefault(t, []).append((loss / (n - n // 2), n - n // 2, js, half))
            if self.type_scaling:
                for c in inf.cells:
                    if c.is_mix or c.gpus[0][0] == t:
                        continue
                    u, m = c.gpus[0]
                    if free.get(u, 0) >= m:
                        new = c.rate_iters_per_s / inf.ref
                        loss = cur - new + self.penalty(ctx, js, new)
                        out.setdefault(t, []).append((loss / n, n, js, c.gpus))
                        break  # fastest first: the best move of this job
        for lst in out.values():
            lst.sort(key=lambda x: (x[0], x[2].job_id))
        return out

    def _room_for(
        self,
        ctx: SchedulingContext,
        c: CellOption,
        free: dict[str, int],
        donors: dict[str, list[tuple[float, int, JobState, GPUs | None]]],
    ) -> tuple[float, list[tuple[JobState, GPUs | None]]] | None:
        """Cheapest donors (≤ depth jobs) that free enough GPUs for Cell ``c`` (counts only; placement is
        checked when applied)."""
        moves: list[tuple[JobState, GPUs | None]] = []
        used: set[int] = set()
        loss = 0.0
        for t, n in c.gpus:
            need = n - free.get(t, 0)
            for per_gpu, k, js, new in donors.get(t, ()):
                if need <= 0:
                    break
                if js.job_id in used:
                    continue
                if len(moves) >= self.depth:
                    return None
                # a move to another type must not eat GPUs this Cell needs
                if new is not None and new[0][0] != t and new[0][0] in dict(c.gpus):
                    continue
                moves.append((js, new))
                used.add(js.job_id)
                loss += per_gpu * k
                need -= k
            if need > 0:
                return None
        return loss, moves

    def _apply_moves(
        self, ctx: SchedulingContext, js: JobState, c: CellOption, moves: list[tuple[JobState, GPUs | None]]
    ) -> bool:
        """Rescale the donors, then place the job; roll everything back when placement fails."""
        before: list[tuple[int, Allocation]] = []
        for d, _ in moves:
            a = ctx.allocation(d.job_id)
            assert a is not None
            before.append((d.job_id, a))
            ctx.release(d.job_id)
        ok = ctx.reserve(js.job_id, c.gpus, c.n_stages) is not None
        if ok:
            for d, new in moves:
                if (
                    new is None
                    or ctx.reserve(d.job_id, new, self.info(ctx, d.job).by_gpus[new].n_stages) is None
                ):
                    ok = False
                    break
        if ok:
            return True
        # roll back
        ctx.release(js.job_id)
        for d, _ in moves:
            ctx.release(d.job_id)
        for jid, a in before:
            ctx.reserve(jid, a.gpus, a.n_stages, placement=a.placement)
        return False

    # ------------------------------------------------------------------ opportunistic execution
    def opportunistic_start(self, ctx: SchedulingContext, js: JobState) -> list[JobState] | None:
        """Suspend jobs that arrived after ``js`` (they ran opportunistically) when that frees its smallest
        Cell on some type. Returns the suspended jobs, or None."""
        inf = self.info(ctx, js.job)
        free = ctx.free_by_type()
        for c in inf.min_cells:
            t, n = c.gpus[0]
            later = [
                ctx.jobs[jid]
                for jid, a in ctx.allocations.items()
                if t in a.gpu_types and ctx.jobs[jid].job.arrival_s > js.job.arrival_s
            ]
            held = sum(dict(ctx.allocation(o.job_id).gpus).get(t, 0) for o in later)  # type: ignore[union-attr]
            if free.get(t, 0) + held < n:
                continue
            later.sort(key=lambda o: (-o.job.arrival_s, -o.job_id))  # latest first
            released: list[tuple[JobState, Allocation]] = []
            for o in later:
                if ctx.place(c.gpus) is not None:
                    break
                a = ctx.allocation(o.job_id)
                assert a is not None
                released.append((o, a))
                ctx.release(o.job_id)
            if ctx.reserve(js.job_id, c.gpus, c.n_stages) is not None:
                # give back what was suspended but not needed
                out = []
                for o, a in released:
                    if ctx.reserve(o.job_id, a.gpus, a.n_stages, placement=a.placement) is None:
                        out.append(o)
                return out
            for o, a in released:
                ctx.reserve(o.job_id, a.gpus, a.n_stages, placement=a.placement)
        return None

    # ------------------------------------------------------------------ extra scheduling (scale up)
    def extra_scheduling(self, ctx: SchedulingContext) -> None:
        """Give idle GPUs to running jobs: a larger Cell or a faster type, best gain per extra GPU first."""
        if self.upgrades_per_round <= 0:
            return
        done = 0
        tried: set[int] = set()
        while done < self.upgrades_per_round:
            free = ctx.free_by_type()
            if sum(free.values()) == 0:
                return
            best: tuple[float, int, GPUs, int | None] | None = None
            for jid, a in ctx.allocations.items():
                if jid in tried:
                    continue
                js = ctx.jobs[jid]
                inf = self.info(ctx, js.job)
                cur = self.norm(ctx, js.job, a.gpus)
                have = dict(a.gpus)
                for c in inf.cells:
                    new = c.rate_iters_per_s / inf.ref
                    if new <= cur * (1 + self.min_gain):
                        break  # fastest first: nothing further is faster
                    if not all(free.get(t, 0) + have.get(t, 0) >= n for t, n in c.gpus):
                        continue
                    gain = new - cur - self.penalty(ctx, js, new)
                    if gain <= self.min_gain * max(cur, 1e-9):
                        continue
                    extra = max(1, c.n_gpus - a.n_gpus)
                    score = gain / extra
                    if best is None or score > best[0]:
                        best = (score, jid, c.gpus, c.n_stages)
                    break  # the first (fastest) reachable Cell of this job
            if best is None:
                return
            _, jid, gpus, stages = best
            tried.add(jid)
            old = ctx.allocation(jid)
            assert old is not None
            ctx.release(jid)
            if ctx.reserve(jid, gpus, stages) is None:
                ctx.reserve(jid, old.gpus, old.n_stages, placement=old.placement)
                continue
            done += 1

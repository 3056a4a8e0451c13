"""ElasticFlow (Gu et al., ASPLOS'23): deadline-aware admission and elastic scaling, with a homogeneous view.

Rules implemented (ElasticFlow §4 and its simulator, ``ElasticFlow/scheduler/scheduler.py``):

* **Throughput curve per job**: iterations/s against GPU count from data-parallel-only profiles (Crius §8.1),
  at power-of-two counts (ElasticFlow's buddy allocation), up to the global batch and 64 GPUs.
* **Homogeneous view** (Crius §8.1: "elastic scaling … in a homogeneous cluster"): ElasticFlow knows one
  curve per job and one pool of GPUs. Here the curve is the capacity-weighted mean over the GPU types the job
  can run on, and the pool is every GPU of the cluster; a job's GPUs are then taken from a single type it
  fits (its current type first, else the type with the most free GPUs) — never chosen for speed.
* **Admission control with minimum satisfactory shares** (§4.1, Algorithm 1, ``ef_sim_allocation``): time is
  cut into slots (the round length); the pool's free GPUs per future slot are what the admitted jobs have not
  reserved. A new job with a deadline gets *progressive filling*: for quota q = 1, 2, 4, … its share in
  each slot is min(q, the largest power of two that is free there), until the iterations it would do by its
  deadline cover its work; the first such q is admitted and its per-slot shares are reserved. If no quota
  meets the deadline the job is **dropped** at once. New jobs of a round are admitted earliest deadline
  first against the reservations of jobs already admitted (which are not re-packed).
* **Elastic resource allocation** (§4.2): every round each admitted job gets at least its reserved share of
  the current slot; GPUs left over go, one doubling at a time, to the job with the largest marginal return
  — throughput gained per extra GPU, relative to the job's throughput on its requested GPUs — so jobs
  scale up when the cluster is idle and back down to their minimum share when it is busy. A job that falls
  behind its plan (restarts, estimation error) is re-planned against the current reservations.
* Jobs without a deadline (or without DP-only data to plan with) are best effort: after the admitted jobs'
  shares they receive their minimum share (the fewest GPUs they run on) in arrival order, then compete for
  leftovers by marginal return.
* **ElasticFlow-LS** (Crius §8: "the primary ElasticFlow policy with loosened job deadline"): deadlines are
  loosened until every job is admitted — nothing is dropped and every job is served as above, minimum share
  first in arrival order, then by marginal return; this is the throughput-oriented variant.

Scale: reservations live in one integer vector over absolute slots, so admission costs O(levels × slots to
the deadline) per arriving job and allocation O(GPUs · log jobs) per round.
"""

from __future__ import annotations

import bisect
import heapq
import math

import numpy as np

from tessera.scheduler.knowledge import powers_of_two
from tessera.scheduler.policies.gavel import DPProfile
from tessera.scheduler.policy import Policy, SchedulingContext, register
from tessera.scheduler.state import Job, JobState

MAX_HORIZON_SLOTS = 30 * 24 * 12  # 30 days of 5-minute slots: deadlines beyond are planned up to here


def progressive_fill(
    remaining_iters: float,
    levels: np.ndarray,
    rates: np.ndarray,
    free: np.ndarray,
    durations_s: np.ndarray,
) -> np.ndarray | None:
    """ElasticFlow's minimum satisfactory share by progressive filling: the per-slot GPU counts of the smallest
    quota q (over ``levels``, ascending powers of two with iteration ``rates``) for which running
    min(q, largest level ≤ free GPUs) in every slot finishes ``remaining_iters`` within the slots (of
    ``durations_s`` each). Returns the shares up to the finishing slot, or None when no quota does it."""
    if remaining_iters <= 0:
        return np.zeros(0, dtype=np.int64)
    if len(levels) == 0 or len(free) == 0:
        return None
    # the largest level ≤ free in each slot (index −1: none)
    fit = np.searchsorted(levels, np.maximum(free, 0), side="right") - 1
    for qi in range(len(levels)):
        idx = np.minimum(fit, qi)
        work = np.where(idx >= 0, rates[np.maximum(idx, 0)], 0.0) * durations_s
        done = np.cumsum(work)
        if done[-1] >= remaining_iters * (1 - 1e-9):
            last = int(np.searchsorted(done, remaining_iters * (1 - 1e-9)))
            return np.where(idx[: last + 1] >= 0, levels[np.maximum(idx[: last + 1], 0)], 0).astype(np.int64)
    return None


@register("elasticflow")
@register("elasticflow-ls", loosened=True)
class ElasticFlow(Policy):
    """ElasticFlow's admission control and elastic allocation (see the module doc)."""

    def __init__(self, loosened: bool = False, max_gpus: int = 64) -> None:
        self.loosened = loosened
        # reservations may start a job in a later slot, so the deadline mode runs every round; -LS changes
        # only when jobs arrive or finish
        self.every_round = not loosened  # type: ignore[misc]
        self.max_gpus = max_gpus
        self.reset()

    def reset(self) -> None:
        self._prof: DPProfile | None = None
        self._curves: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self._in_round = False
        self._round_cap: tuple[dict[str, int], tuple] | None = (
            None  # this round's capacity (:meth:`_capacity`)
        )
        self._grid = np.zeros(0, dtype=np.int64)  # GPUs reserved per absolute slot
        self._plans: dict[int, tuple[int, np.ndarray]] = {}  # admitted job → (first slot, shares)
        self._seen: set[int] = set()
        self.admitted: set[int] = set()
        self.dropped: set[int] = set()

    # ------------------------------------------------------------------ the homogeneous curve
    def curve(self, ctx: SchedulingContext, job: Job) -> tuple[np.ndarray, np.ndarray]:
        """(levels, iterations/s): power-of-two GPU counts the job runs on and its pool-wide mean rate there."""
        cap, cap_key = self._capacity(ctx)
        key = (job.config, cap_key)
        c = self._curves.get(key)
        if c is None:
            assert self._prof is not None
            prof = self._prof
            counts = powers_of_two(1, min(self.max_gpus, job.global_batch, max(cap.values(), default=0)))
            for rate in (prof.rate, prof.standin):  # the stand-in only when the DP-only data allows nothing
                levels, rates = [], []
                for n in counts:
                    w = [(cap[t], r) for t in cap if cap[t] >= n and (r := rate(job, t, n)) > 0]
                    if w:
                        levels.append(n)
                        rates.append(sum(c * r for c, r in w) / sum(c for c, _ in w))
                if levels:
                    break
            c = self._curves[key] = (np.array(levels, dtype=np.int64), np.array(rates, dtype=np.float64))
        return c

    def _capacity(self, ctx: SchedulingContext) -> tuple[dict[str, int], tuple]:
        """The pool's GPUs per type (nodes up) and their sorted items, read once a round: :meth:`curve` is asked
        for every job many times a round (a bincount each at 12,800 GPUs cost half the round)."""
        c = self._round_cap
        if c is None:
            cap = ctx.capacity_by_type()
            c = (cap, tuple(sorted(cap.items())))
            if self._in_round:
                self._round_cap = c
        return c

    # ------------------------------------------------------------------ reservations
    def _slot(self, ctx: SchedulingContext) -> int:
        return int(ctx.now_s // ctx.round_s)

    def _ensure(self, n_slots: int) -> None:
        if len(self._grid) < n_slots:
            self._grid = np.concatenate(
                [self._grid, np.zeros(n_slots - len(self._grid) + 1024, dtype=np.int64)]
            )

    def _unreserve(self, jid: int, from_slot: int) -> None:
        plan = self._plans.pop(jid, None)
        if plan is not None:
            start, shares = plan
            lo = max(start, from_slot)
            if lo < start + len(shares):
                self._grid[lo : start + len(shares)] -= shares[lo - start :]

    def _plan(self, ctx: SchedulingContext, js: JobState, pool: int) -> bool:
        """Progressive filling for one job against the current reservations; reserves on success."""
        job = js.job
        assert job.deadline_s is not None
        levels, rates = self.curve(ctx, job)
        now, slot_s = ctx.now_s, ctx.round_s
        s0 = self._slot(ctx)
        horizon = min(MAX_HORIZON_SLOTS, max(0, math.ceil((job.deadline_s - s0 * slot_s) / slot_s)))
        if horizon == 0 or len(levels) == 0:
            return False
        self._ensure(s0 + horizon)
        starts = (s0 + np.arange(horizon)) * slot_s
        dur = np.minimum(starts + slot_s, job.deadline_s) - np.maximum(starts, now)
        shares = progressive_fill(
            js.remaining_at(now), levels, rates, pool - self._grid[s0 : s0 + horizon], dur
        )
        if shares is None:
            return False
        self._grid[s0 : s0 + len(shares)] += shares
        self._plans[js.job_id] = (s0, shares)
        return True

    def _behind(self, ctx: SchedulingContext, js: JobState) -> bool:
        """The job's reservation would no longer finish its remaining work by the deadline."""
        plan = self._plans.get(js.job_id)
        if plan is None or js.job.deadline_s is None:
            return False
        start, shares = plan
        s0 = self._slot(ctx)
        rest = shares[max(0, s0 - start) :]
        levels, rates = self.curve(ctx, js.job)
        r = np.where(rest > 0, rates[np.searchsorted(levels, np.maximum(rest, 1))], 0.0)
        return float((r * ctx.round_s).sum()) < js.remaining_at(ctx.now_s) * (1 - 1e-6)

    # ------------------------------------------------------------------ the round
    def knowledge_changed(self) -> None:
        """New rates: the DP profile and its curves are rebuilt from them (on the next round, which sees the new
        knowledge); the admitted jobs' reserved slots are kept."""
        self._prof, self._curves = None, {}

    def schedule(self, ctx: SchedulingContext) -> None:
        self._in_round, self._round_cap = True, None
        try:
            self._schedule(ctx)
        finally:
            self._in_round, self._round_cap = False, None

    def _schedule(self, ctx: SchedulingContext) -> None:
        kn = ctx.knowledge
        if self._prof is None or self._prof.kn is not kn:
            self._prof, self._curves = DPProfile(kn), {}
        cap = ctx.capacity_by_type()
        pool = sum(cap.values())
        s0 = self._slot(ctx)
        states = [*ctx.running, *ctx.pending]
        active = {js.job_id for js in states}
        for jid in [j for j in self._plans if j not in active]:  # finished (or gone): give back the rest
            self._unreserve(jid, s0)
        self.admitted &= active
        self._seen &= active

        # 1. admission control for the newcomers, earliest deadline first
        new = [js for js in states if js.job_id not in self._seen]
        self._seen |= {js.job_id for js in new}
        if not self.loosened:
            for js in sorted(new, key=lambda j: (j.job.deadline_s or math.inf, j.job.arrival_s, j.job_id)):
                if js.job.deadline_s is None or not self._prof.has_dp(js.job):
                    continue  # best effort
                if self._plan(ctx, js, pool):
                    self.admitted.add(js.job_id)
                else:
                    self.dropped.add(js.job_id)
                    ctx.drop(
                        js.job_id,
                        "dropped: no GPU quota finishes it by its deadline against the GPUs already reserved "
                        "(admission control, ElasticFlow §4.1)",
                    )
            for js in states:  # re-plan admitted jobs that fell behind (they keep running if they cannot)
                if js.job_id in self.admitted and self._behind(ctx, js):
                    self._unreserve(js.job_id, s0)
                    self._plan(ctx, js, pool)

        # 2. shares: reserved minimum first, then best-effort minimum shares in arrival order, then leftovers
        live = [js for js in states if js.job_id not in self.dropped and len(self.curve(ctx, js.job)[0])]
        target: dict[int, int] = {}
        left = pool
        for js in live:
            plan = self._plans.get(js.job_id)
            if plan is not None and s0 - plan[0] < len(plan[1]):
                n = int(plan[1][s0 - plan[0]])
                if 0 < n <= left:
                    target[js.job_id] = n
                    left -= n
        for js in sorted(live, key=lambda j: (j.job.arrival_s, j.job_id)):
            if js.job_id in target or js.job_id in self._plans:
                continue
            n = int(self.curve(ctx, js.job)[0][0])
            if n <= left:
                target[js.job_id] = n
                left -= n
        self._leftovers(ctx, live, target, left)

        # 3. placement on single types, largest first; unchanged counts keep their GPUs
        self._place(ctx, live, target)

    def _leftovers(
        self, ctx: SchedulingContext, live: list[JobState], target: dict[int, int], left: int
    ) -> None:
        """Give the remaining pool GPUs away one doubling at a time by marginal return (§4.2)."""
        heap: list[tuple[float, int, int]] = []
        ref: dict[int, float] = {}
        # each job's curve as Python lists, searched by bisection (the numpy calls on a few levels cost more than
        # the search, and this runs for every live job and every doubling a round)
        curves: dict[int, tuple[list[int], list[float]]] = {}

        def push(js: JobState) -> None:
            levels, rates = curves[js.job_id]
            n = target.get(js.job_id, 0)
            i = bisect.bisect_right(levels, n)
            if i >= len(levels):
                return
            r0 = 0.0 if n == 0 else rates[i - 1]
            gain = (rates[i] - r0) / ref[js.job_id] / (levels[i] - n)
            if gain > 0:
                heapq.heappush(heap, (-gain, js.job_id, levels[i]))

        by_id = {}
        for js in live:
            lv, rt = self.curve(ctx, js.job)
            levels, rates = curves[js.job_id] = ([int(x) for x in lv], [float(x) for x in rt])
            want = js.job.requested_gpus or levels[0]
            k = min(bisect.bisect_left(levels, want), len(levels) - 1)
            ref[js.job_id] = rates[k]
            by_id[js.job_id] = js
            push(js)
        while heap and left > 0:
            _, jid, n = heapq.heappop(heap)
            extra = n - target.get(jid, 0)
            if extra <= left:
                target[jid] = n
                left -= extra
                push(by_id[jid])

    def _place(self, ctx: SchedulingContext, live: list[JobState], target: dict[int, int]) -> None:
        for js in live:
            a = ctx.allocation(js.job_id)
            if a is not None and (target.get(js.job_id, 0) != a.n_gpus or len(a.gpus) != 1):
                ctx.release(js.job_id)
                if not target.get(js.job_id, 0):
                    ctx.explain(
                        js.job_id,
                        "preempted: the pool's GPUs go to deadline jobs' reserved shares and earlier jobs' minimum "
                        "shares this slot (ElasticFlow §4.2)",
                    )
        assert self._prof is not None
        prev_type = {s.job_id: s.allocation.gpu_types[0] for s in ctx.running if s.allocation is not None}
        for js in sorted(live, key=lambda j: (-target.get(j.job_id, 0), j.job.arrival_s, j.job_id)):
            n = target.get(js.job_id, 0)
            if n == 0 or ctx.allocation(js.job_id) is not None:
                continue
            prev = prev_type.get(js.job_id)
            levels = self.curve(ctx, js.job)[0]
            for m in [int(x) for x in levels[::-1] if x <= n]:  # fragmentation: fall back to fewer GPUs
                free = ctx.free_by_type()
                types = sorted(free, key=lambda t: (t != prev, -free[t], t))
                if any(
                    free[t] >= m and ctx.fits(js.job, ((t, m),)) and ctx.reserve(js.job_id, ((t, m),))
                    for t in types
                ):
                    plan = self._plans.get(js.job_id)
                    share = "its reserved share for the deadline" if plan is not None else "its minimum share"
                    ctx.explain(
                        js.job_id,
                        f"{ctx.verb(js.job_id)}: {m} GPUs ({share}, then leftover GPUs by marginal return, "
                        "ElasticFlow §4.2)",
                    )
                    break

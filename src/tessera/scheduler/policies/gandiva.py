"""Gandiva (Xiao et al., OSDI'18): introspective scheduling — affinity packing, migration, grow-shrink.

Rules implemented (Gandiva §3–4; Crius §8.1: "it could adjust the GPU quota and topology, it ignores the GPU
heterogeneity"):

* **Heterogeneity-unaware**: every GPU is alike to Gandiva. A job gets its requested GPU count on whichever
  nodes its placement rule picks, of any type its memory fits (the memory module); speeds are never
  compared across types, and a job that grows stays on its type.
* **Queue**: first come, first served, each job placed as soon as its GPUs exist (no head-of-line block).
* **Affinity packing** (§4.2, "scheduling policy"): a node's *affinity* is the GPU count of the jobs it runs.
  A job smaller than a node goes to a node with the same affinity that still has room (the fullest such
  node — packing like-sized jobs together), else to an empty node, else to any node with room; a job that
  spans nodes takes whole free nodes first (best-fit). This keeps whole nodes free for large jobs.
* **Migration** (§3.2, defragmentation): each round, up to ``max_migrations`` moves: a job spread over more
  nodes than it needs moves onto one node that now has room; and when the oldest waiting job needs a whole
  node that fragmentation denies it, the jobs on the least-occupied node of a type it fits are migrated to
  other nodes (when they all fit elsewhere) to make room.
* **Grow-shrink with introspection** (§3.3): when no queued job can use the idle GPUs, a running job doubles
  its GPUs on its own type if its profiled (DP-only) speedup promises at least ``grow_gain``; after the
  restart, Gandiva *introspects* — if the measured speed did not rise by ``grow_gain`` it shrinks the job
  back and never grows it again. When a queued job cannot be placed, grown jobs on types it fits shrink
  back to their requested size (the most recently grown first) until it can.
* Time-slicing (suspend/resume of oversubscribed GPUs) and GPU sharing are not modelled: the simulator gives
  each GPU to one job and charges every resume a checkpoint restart, where Gandiva relies on sub-second
  in-memory suspend; Crius characterises Gandiva by its quota and topology adjustments, which are here.

Scale: placement is vectorized over nodes; queued jobs whose (configuration, count) already failed to place
this round are skipped, so a round costs O(queue + nodes).
"""

from __future__ import annotations

import numpy as np

from tessera.scheduler.policies.gavel import DPProfile
from tessera.scheduler.policy import Policy, SchedulingContext, fmt_gpus, register
from tessera.scheduler.state import Allocation, Job, JobState


@register("gandiva")
class Gandiva(Policy):
    """Affinity packing, migration and introspective grow-shrink, heterogeneity-unaware (see the module doc)."""

    every_round = True  # introspection and defragmentation run every round

    def __init__(self, grow_gain: float = 1.5, max_migrations: int = 8, max_gpus: int = 64) -> None:
        self.grow_gain = grow_gain
        self.max_migrations = max_migrations
        self.max_gpus = max_gpus
        self.reset()

    def reset(self) -> None:
        self._prof: DPProfile | None = None
        self._fits: dict[tuple, np.ndarray] = {}  # (configuration, count, types) → fits per type
        self.grown: dict[int, tuple[int, float]] = {}  # job → (size before growing, measured rate before)
        self.no_grow: set[int] = set()

    def knowledge_changed(self) -> None:
        """New rates: the DP profile is rebuilt from them; which jobs grew (and their speed before) is kept."""
        self._prof = None
        self._fits = {}

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def size(ctx: SchedulingContext, job: Job) -> int | None:
        """The job's requested GPU count (the fewest it fits in on any type when it requested none)."""
        if job.requested_gpus:
            return job.requested_gpus
        counts = [n for t in ctx.knowledge.gpu_types if (n := ctx.knowledge.min_gpus(job, t))]
        return min(counts) if counts else None

    @staticmethod
    def affinity(ctx: SchedulingContext) -> np.ndarray:
        """Per node: 0 = empty, k > 0 = every job there has k GPUs, −1 = mixed sizes."""
        # a list: numpy element reads cost more than the rest of the loop (every round, every running job)
        aff = [0] * len(ctx.cluster.nodes)
        for a in ctx.allocations.values():
            n = a.n_gpus
            for i, _ in a.placement:
                x = aff[i]
                aff[i] = n if x == 0 or x == n else -1
        return np.array(aff, dtype=np.int64)

    def _type_ok(self, ctx: SchedulingContext, job: Job, n: int) -> np.ndarray:
        """Per node: the job fits ``n`` GPUs of the node's type."""
        cl = ctx.cluster
        key = (job.config, n, cl.types)
        ok_type = self._fits.get(key)
        if ok_type is None:  # the memory fit is the configuration's (asked for every queued job, every round)
            ok_type = self._fits[key] = np.array([ctx.fits(job, ((t, n),)) for t in cl.types])
        return ok_type[cl.type_index] & cl.up

    def place_affinity(self, ctx: SchedulingContext, job: Job, n: int, aff: np.ndarray) -> tuple | None:
        """Gandiva's placement for ``n`` GPUs (see the module doc), or None."""
        cl = ctx.cluster
        ok = self._type_ok(ctx, job, n)
        if not ok.any():
            return None
        single = ok & (cl.capacity >= n)  # nodes of types on which n GPUs fit in one node
        cand = np.flatnonzero(single & (cl.free >= n))
        if len(cand):
            a = aff[cand]
            tier = np.where(a == n, 0, np.where(a == 0, 1, 2))
            j = cand[np.lexsort((cand, cl.free[cand], tier))[0]]  # best tier, fullest node, lowest index
            return (((cl.nodes[j].gpu_type, n),), ((int(j), n),))
        # types whose nodes are too small for n: whole free nodes first (best-fit)
        for t in sorted({cl.types[k] for k in cl.type_index[ok & ~single]}):
            p = ctx.place(((t, n),))
            if p is not None:
                return (((t, n),), p)
        return None

    # ------------------------------------------------------------------ the round
    def schedule(self, ctx: SchedulingContext) -> None:
        kn = ctx.knowledge
        if self._prof is None or self._prof.kn is not kn:
            self._prof, self._fits = DPProfile(kn), {}
        active = set(ctx.jobs)
        self.grown = {j: v for j, v in self.grown.items() if j in active}
        self.no_grow &= active
        now = ctx.now_s

        # 1. introspection: a grown job that did not speed up enough shrinks back for good
        for js in ctx.running:
            g = self.grown.get(js.job_id)
            measured = g is not None and js.paused_until_s <= now and js.rate_iters_per_s > 0
            if measured and js.rate_iters_per_s < g[1] * self.grow_gain:  # type: ignore[index]
                self._resize(
                    ctx, js, g[0],  # type: ignore[index]
                    f"introspection (Gandiva §3.3): measured {js.rate_iters_per_s:.3g} it/s after growing, less "
                    f"than {self.grow_gain:g}× the {g[1]:.3g} it/s before; shrinks back for good",  # type: ignore[index]
                )  # fmt: skip
                self.no_grow.add(js.job_id)
                del self.grown[js.job_id]

        # 2. queued jobs, first come first served, affinity placement
        aff = self.affinity(ctx)
        failed: set[tuple] = set()
        blocked: list[tuple[JobState, int]] = []
        for js in ctx.pending:
            n = self.size(ctx, js.job)
            if not n:
                continue
            key = (js.job.config, n)
            if key in failed or not self._try_place(ctx, js, n, aff):
                failed.add(key)
                blocked.append((js, n))

        # 3. contention: grown jobs shrink back (latest grown first) until the blocked jobs fit
        if blocked and self.grown:
            still: list[tuple[JobState, int]] = []
            # (configuration, count) that neither placed nor found a grown job to shrink since the cluster last
            # changed: the next job of that key would fail the same way (placement and the shrink test read the
            # job's configuration and count only), so it is not tried again — thousands are blocked at scale
            dead: set[tuple] = set()
            for js, n in blocked:
                key = (js.job.config, n)
                if key in dead:
                    still.append((js, n))
                    continue
                changed = False
                while not self._try_place(ctx, js, n, aff):
                    if not self._shrink_one(ctx, js.job, n):
                        break
                    changed = True
                    aff = self.affinity(ctx)
                if ctx.allocation(js.job_id) is None:
                    still.append((js, n))
                    if changed:
                        dead.clear()
                    dead.add(key)
                else:
                    dead.clear()
            blocked = still

        # 4. migration: make room for the oldest blocked job, and restore locality
        migrations = self._defragment(ctx, blocked[:1], aff)
        self._consolidate(ctx, self.max_migrations - migrations)

        # 5. grow into idle GPUs when nobody is waiting for them
        if not blocked:
            self._grow(ctx)

    def _try_place(self, ctx: SchedulingContext, js: JobState, n: int, aff: np.ndarray) -> bool:
        if int((ctx.cluster.free * ctx.cluster.up).sum()) < n:
            return False
        got = self.place_affinity(ctx, js.job, n, aff)
        if got is None:
            return False
        gpus, placement = got
        if ctx.reserve(js.job_id, gpus, placement=placement) is None:
            return False
        for i, _ in placement:
            aff[i] = n if aff[i] in (0, n) else -1
        return True

    def _shrink_one(self, ctx: SchedulingContext, job: Job, n: int) -> bool:
        """Shrink the most recently grown job on a type ``job`` fits; False when there is none."""
        for jid in reversed(list(self.grown)):
            a = ctx.allocation(jid)
            if a is None:
                del self.grown[jid]
                continue
            if len(a.gpus) == 1 and ctx.fits(job, ((a.gpu_types[0], n),)):
                size, _ = self.grown.pop(jid)
                self._resize(
                    ctx, ctx.jobs[jid], size,
                    f"grow-shrink (Gandiva §3.3): shrinks back to its {size} GPUs so queued job {job.job_id} can start",
                )  # fmt: skip
                return True
        return False

    def _resize(self, ctx: SchedulingContext, js: JobState, n: int, why: str) -> None:
        a = ctx.allocation(js.job_id)
        if a is None or a.n_gpus == n:
            return
        t = a.gpu_types[0]
        ctx.release(js.job_id)
        if ctx.reserve(js.job_id, ((t, n),)) is None:
            ctx.reserve(js.job_id, a.gpus, a.n_stages, placement=a.placement)
        else:
            ctx.explain(js.job_id, f"rescale {a.n_gpus}×{t} → {n}×{t}: {why}")

    def _grow(self, ctx: SchedulingContext) -> None:
        assert self._prof is not None
        now, alloc, no_grow, grown = ctx.now_s, ctx.allocations, self.no_grow, self.grown
        # what this loop changes is the job at hand's GPUs: every other job's test reads the same state as in order
        cands = [
            js
            for js in ctx.running
            if js.paused_until_s <= now
            and js.rate_iters_per_s > 0
            and js.job_id not in no_grow
            and js.job_id not in grown
        ]
        free: dict[str, int] = {}  # free GPUs per type, read once until a grow changes that type
        for js in cands:
            a = alloc.get(js.job_id)
            if a is None or len(a.gpus) != 1:
                continue
            t, n = a.gpus[0]
            m = 2 * n
            if m > min(self.max_gpus, js.job.global_batch):
                continue
            f = free.get(t)
            if f is None:
                f = free[t] = ctx.cluster.free_of(t)
            if f < n:
                continue
            r0, r1 = self._prof.rate(js.job, t, n), self._prof.rate(js.job, t, m)
            if r0 <= 0 or r1 < self.grow_gain * r0:
                continue
            ctx.release(js.job_id)
            free.pop(t, None)
            if ctx.reserve(js.job_id, ((t, m),)) is None:
                ctx.reserve(js.job_id, a.gpus, a.n_stages, placement=a.placement)
            else:
                self.grown[js.job_id] = (n, js.rate_iters_per_s)
                ctx.explain(
                    js.job_id,
                    f"rescale {n}×{t} → {m}×{t}: grow-shrink (Gandiva §3.3), profiled DP speed-up {r1 / r0:.2f}× ≥ "
                    f"{self.grow_gain:g}× and nobody waits for idle GPUs (shrinks back if the measured speed-up is less)",
                )

    def _consolidate(self, ctx: SchedulingContext, budget: int) -> int:
        """Move jobs spread over more nodes than they need onto one node with room (locality)."""
        done = 0
        cl = ctx.cluster
        if budget <= 0:
            return 0
        now, alloc = ctx.now_s, ctx.allocations
        # spread jobs, in order (a move changes only the moved job's GPUs, so the others' tests read as in order)
        spread = [
            js
            for js in ctx.running
            if (a := alloc.get(js.job_id)) is not None and len(a.placement) >= 2 and js.paused_until_s <= now
        ]
        for js in spread:
            if done >= budget:
                break
            a = ctx.allocation(js.job_id)
            if a is None or len(a.placement) < 2 or len(a.gpus) != 1 or js.paused_until_s > ctx.now_s:
                continue
            t, n = a.gpus[0]
            idx = cl.nodes_of_type(t)
            idx = idx[cl.up[idx] & (cl.free[idx] >= n)]
            if len(idx) == 0:
                continue
            j = int(idx[np.argmin(cl.free[idx])])
            if ctx.reserve(js.job_id, a.gpus, a.n_stages, placement=((j, n),)) is not None:
                done += 1
                ctx.explain(
                    js.job_id,
                    f"migrate {n}×{t} from {len(a.placement)} nodes onto node {cl.nodes[j].name} "
                    "(locality, Gandiva §3.2)",
                )
        return done

    def _defragment(
        self, ctx: SchedulingContext, blocked: list[tuple[JobState, int]], aff: np.ndarray
    ) -> int:
        """Free one node for the oldest blocked job by migrating the jobs on it elsewhere (if they all fit)."""
        if not blocked or self.max_migrations <= 0:
            return 0
        js, n = blocked[0]
        cl = ctx.cluster
        ok = self._type_ok(ctx, js.job, n) & (cl.capacity >= n)
        if not ok.any() or int((cl.free * cl.up).sum()) < n:
            return 0
        on_node: dict[int, list[tuple[int, Allocation]]] = {}
        for jid, a in ctx.allocations.items():
            for i, _ in a.placement:
                on_node.setdefault(i, []).append((jid, a))
        # the least-occupied candidate nodes first
        order = [int(i) for i in np.flatnonzero(ok)]
        order.sort(key=lambda i: (cl.capacity[i] - cl.free[i], i))
        for i in order[:8]:
            movers = on_node.get(i, [])
            if not movers or len(movers) > self.max_migrations:
                continue
            if any(len(a.placement) != 1 or ctx.jobs[jid].paused_until_s > ctx.now_s for jid, a in movers):
                continue
            trial = ctx.cluster.copy()
            new: list[tuple[int, tuple]] = []
            for jid, a in sorted(movers, key=lambda m: -m[1].n_gpus):
                t, m = a.gpus[0]
                idx = trial.nodes_of_type(t)
                idx = idx[trial.up[idx] & (trial.free[idx] >= m) & (idx != i)]  # elsewhere than node i
                if len(idx) == 0:
                    break
                j = int(idx[np.argmin(trial.free[idx])])
                trial.free[j] -= m
                new.append((jid, ((j, m),)))
            if len(new) != len(movers):
                continue
            for jid, _ in movers:
                ctx.release(jid)
            for (jid, p), (_, a) in zip(new, sorted(movers, key=lambda m: -m[1].n_gpus), strict=True):
                ctx.reserve(jid, a.gpus, a.n_stages, placement=p)
                ctx.explain(
                    jid,
                    f"migrate {fmt_gpus(a.gpus)} off node {cl.nodes[i].name} to {cl.nodes[p[0][0]].name} so queued "
                    f"job {js.job_id} can take the whole node (defragmentation, Gandiva §3.2)",
                )
            t = cl.nodes[i].gpu_type
            if ctx.reserve(js.job_id, ((t, n),), placement=((i, n),)) is not None:
                aff[i] = n
            return len(movers)
        return 0

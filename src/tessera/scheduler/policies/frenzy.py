"""Frenzy (Chang et al., arXiv 2412.14479): MARP resource plans + HAS placement, first come first served.

Rules implemented:

* **MARP** (§IV-A): a plan is Job(n, s) — n GPUs of at least s bytes each. Per GPU type, n is the fewest GPUs
  of that type on which a data × tensor parallel plan fits (Frenzy's N = d · t; here the memory module, i.e.
  MARP made exact, through :meth:`Knowledge.min_gpus`). s is the per-GPU memory n GPUs need: the memory
  module answers "fits" per GPU type, not in bytes, so s is the smallest GPU memory size of the cluster on
  which n GPUs fit — to HAS, which compares s only with those sizes, the same as the exact need. When the
  workload gives a requested count (a trace's GPU count, on which the job's work was measured) it is a
  floor: n = max(memory n, request), rounded up to a power of two, as Crius also does.
* **Plan priority** (§IV-A, Fig. 2): plans ranked by estimated training speed on the type they came from
  (HAS "considers the estimated training time for the model on different GPU types") — the one-stage
  (d × t) Cell estimate, the closest to Frenzy's plans, falling back to the best Cell when no one-stage plan
  fits. Plans with the same (n, s) are one plan (the first, fastest, kept).
* **HAS** (§IV-B, Algorithm 1, :func:`tessera.scheduler.placement.has`): walk the ranked plans and take the
  first the cluster can satisfy *now* (lines 1–10: enough free GPUs of at least s); place it on the smallest
  adequate memory size first, the tightest node of that size (lines 14–15), else the most-free node of that
  size whole and repeat. A plan may so land on another GPU type than the one it was ranked for: a job whose
  2 GPUs need ≥ 32 GB takes a free V100-32GB node, else an A100-40GB node, and an 80 GB one only after those,
  even when the 80 GB type is the fastest. A job that fits one node stays in one node (Tessera's topology
  awareness; then the next plan is tried).
* **FCFS order**: queued jobs in arrival order; when none of the head job's plans can be satisfied it waits
  and blocks the queue behind it (no backfilling), unless no plan of it could ever fit the cluster. Running
  jobs are never preempted or rescaled.

Written as phases (:class:`~tessera.scheduler.policy.PhasedPolicy`): ``candidates`` is HAS's one answer,
``reserve`` takes HAS's placement as is, ``on_unplaced`` is the head-of-line block. Jobs run the best plan for
the GPUs they get (the planner picks the stage count).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from tessera.scheduler.knowledge import CellOption, Knowledge, next_power_of_two
from tessera.scheduler.placement import Placement, has
from tessera.scheduler.policy import Candidate, PhasedPolicy, SchedulingContext, register
from tessera.scheduler.state import Allocation, Job, JobState


@dataclass(frozen=True)
class ResourcePlan:
    """One MARP plan, Job(n, s): ``n_gpus`` GPUs of at least ``min_memory_bytes`` each, ranked by
    ``rate_iters_per_s`` estimated on ``gpu_type`` (the type the plan was derived from)."""

    n_gpus: int
    min_memory_bytes: int
    gpu_type: str
    rate_iters_per_s: float


@dataclass(frozen=True)
class HASCandidate(CellOption):
    """HAS's answer for one job: the GPUs (by type) and the exact placement it chose."""

    placement: Placement = ()


def resource_plans(
    kn: Knowledge, job: Job, capacity: Mapping[str, int], memory_bytes: Mapping[str, int]
) -> list[ResourcePlan]:
    """Frenzy's ranked plans on a cluster with ``capacity`` GPUs and ``memory_bytes`` per GPU of each type:
    one per type (its n; s the smallest size n GPUs fit), fastest on its type first; duplicates of (n, s)
    dropped (the fastest kept)."""
    types = sorted(t for t, c in capacity.items() if c > 0)
    out: list[ResourcePlan] = []
    for t in types:
        n = kn.min_gpus(job, t)
        if n is None:
            continue
        if job.requested_gpus:
            n = max(n, next_power_of_two(job.requested_gpus))
        if n > capacity[t]:
            continue
        gpus = ((t, n),)
        need = min(int(memory_bytes[u]) for u in types if u == t or kn.fits(job, ((u, n),)))
        rate = kn.cell_rate(job, gpus, 1) or kn.cell_rate(job, gpus)
        out.append(ResourcePlan(n, need, t, rate))
    out.sort(key=lambda p: (-p.rate_iters_per_s, p.n_gpus, p.gpu_type))
    seen: set[tuple[int, int]] = set()
    uniq = []
    for p in out:
        if (p.n_gpus, p.min_memory_bytes) not in seen:
            seen.add((p.n_gpus, p.min_memory_bytes))
            uniq.append(p)
    return uniq


@register("frenzy")
class Frenzy(PhasedPolicy):
    """MARP plans, HAS retrieval and memory-size best-fit placement, FCFS (see the module doc)."""

    def __init__(self) -> None:
        self._plans: dict[tuple, list[ResourcePlan]] = {}

    def reset(self) -> None:
        self._plans.clear()

    def plans(self, ctx: SchedulingContext, job: Job) -> list[ResourcePlan]:
        """The job's ranked plans on this cluster (memoized per configuration, request and capacity)."""
        cap = ctx.capacity_by_type()
        key = (job.config, job.requested_gpus, tuple(sorted(cap.items())))
        p = self._plans.get(key)
        if p is None:
            mem = {n.gpu_type: n.gpu_memory_bytes for n in ctx.cluster.nodes}
            p = self._plans[key] = resource_plans(ctx.knowledge, job, cap, mem)
        return p

    def candidates(self, ctx: SchedulingContext, js: JobState) -> Iterator[Candidate]:
        plans = self.plans(ctx, js.job)
        got = has(ctx.cluster, [(p.n_gpus, p.min_memory_bytes) for p in plans], keep_in_node=ctx.keep_in_node)
        if got is not None:
            k, placement = got
            gpus = ctx.cluster.gpus_of_placement(placement)
            yield HASCandidate(gpus, None, plans[k].rate_iters_per_s, placement)

    def reserve(self, ctx: SchedulingContext, js: JobState, cand: Candidate) -> Allocation | None:
        placement = cand.placement if isinstance(cand, HASCandidate) else None
        return ctx.reserve(js.job_id, cand.gpus, cand.n_stages, placement=placement)

    def on_unplaced(self, ctx: SchedulingContext, js: JobState) -> bool:
        # the head waits for its plans, and so does everyone behind it (FCFS); a job no plan of which could
        # ever fit the cluster does not block it
        return not self.plans(ctx, js.job)

"""Frenzy (Chang et al., arXiv 2412.14479): MARP resource plans + HAS placement, first come first served.

Rules implemented:

* **MARP** (§IV-A): the job's GPU count per GPU type comes from predicted memory — the fewest GPUs of that
  type on which a data × tensor parallel plan fits (Frenzy's N = d · t; here the memory module, i.e. MARP
  made exact, through :meth:`Knowledge.min_gpus` and one-stage Cells). When the workload gives a requested
  count (a trace's GPU count, on which the job's work was measured) it is a floor: N = max(memory N,
  request), rounded up to a power of two, as Crius also does.
* **Plan priority** (§IV-A, Fig. 2): one plan per GPU type (its N), ranked by estimated training speed on it
  (HAS "considers the estimated training time for the model on different GPU types") — the one-stage
  (d × t) Cell estimate, the closest to Frenzy's plans, falling back to the best Cell when no one-stage
  plan fits.
* **HAS plan retrieval** (§IV-B, Algorithm 1 lines 1–10): walk the ranked plans and take the first the
  cluster can satisfy *now*.
* **HAS best-fit placement** (Algorithm 1 lines 11–36): the tightest single node that fits; otherwise the
  node with the most free GPUs, whole, and repeat; a job that fits one node stays in one node — the core's
  :func:`tessera.scheduler.placement.place`, used by ``ctx.reserve``.
* **FCFS order**: queued jobs in arrival order; when none of the head job's plans can be satisfied it waits
  and blocks the queue behind it (no backfilling), unless no plan of it could ever fit the cluster. Running
  jobs are never preempted or rescaled.

Jobs run the best plan for the GPUs they get (the planner picks the stage count).
"""

from __future__ import annotations

from collections.abc import Mapping

from tessera.scheduler.knowledge import Knowledge, next_power_of_two
from tessera.scheduler.policy import Policy, SchedulingContext, register
from tessera.scheduler.state import GPUs, Job


def resource_plans(kn: Knowledge, job: Job, capacity: Mapping[str, int]) -> list[tuple[GPUs, float]]:
    """Frenzy's ranked plans on a cluster with ``capacity`` GPUs per type: per type, (its N GPUs, estimated
    iterations/s), fastest first."""
    out: list[tuple[GPUs, float]] = []
    for t in sorted(t for t, c in capacity.items() if c > 0):
        n = kn.min_gpus(job, t)
        if n is None:
            continue
        if job.requested_gpus:
            n = max(n, next_power_of_two(job.requested_gpus))
        if n > capacity[t]:
            continue
        gpus = ((t, n),)
        rate = kn.cell_rate(job, gpus, 1) or kn.cell_rate(job, gpus)
        out.append((gpus, rate))
    out.sort(key=lambda p: (-p[1], p[0][0][1], p[0][0][0]))
    return out


@register("frenzy")
class Frenzy(Policy):
    """MARP plans, HAS retrieval and best-fit placement, FCFS (see the module doc)."""

    def __init__(self) -> None:
        self._plans: dict[tuple, list[tuple[GPUs, float]]] = {}

    def reset(self) -> None:
        self._plans.clear()

    def plans(self, kn: Knowledge, job: Job, capacity: Mapping[str, int]) -> list[tuple[GPUs, float]]:
        key = (job.config, job.requested_gpus, tuple(sorted(capacity.items())))
        p = self._plans.get(key)
        if p is None:
            p = self._plans[key] = resource_plans(kn, job, capacity)
        return p

    def schedule(self, ctx: SchedulingContext) -> None:
        cap = ctx.capacity_by_type()
        for js in ctx.pending:
            plans = self.plans(ctx.knowledge, js.job, cap)
            free = ctx.free_by_type()
            if any(
                free.get(g[0][0], 0) >= g[0][1] and ctx.reserve(js.job_id, g) is not None for g, _ in plans
            ):
                continue
            if plans:  # the head waits for its plans, and so does everyone behind it (FCFS)
                break

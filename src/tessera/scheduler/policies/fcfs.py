"""FCFS — first come, first served (Crius §8.1 baseline; the default of Kubernetes and YARN).

Rules: jobs start strictly in arrival order on exactly the GPUs they asked for — the requested count of the
requested GPU type (any type, in catalog order, when none was requested; the fewest GPUs that fit when no
count was requested); the queue head blocks every job behind it (no backfilling); running jobs are never
preempted, moved or rescaled. Placement is HAS best-fit. It decides with no throughput data at all; the job
still runs the best plan for its GPUs.

This is also the reference for writing a policy as phases (:class:`~tessera.scheduler.policy.PhasedPolicy`):
``candidates`` lists what the job may run on, the default ``filter`` keeps what fits memory and free GPUs,
``score`` keeps the candidates' order, and ``on_unplaced`` returning False is the head-of-line block.
"""

from __future__ import annotations

from collections.abc import Iterator

from tessera.scheduler.policy import Candidate, PhasedPolicy, SchedulingContext, register
from tessera.scheduler.state import JobState


@register("fcfs")
class FCFS(PhasedPolicy):
    def candidates(self, ctx: SchedulingContext, js: JobState) -> Iterator[Candidate]:
        job, kn = js.job, ctx.knowledge
        types = [job.requested_type] if job.requested_type else list(kn.gpu_types)
        for t in types:
            n = job.requested_gpus or kn.min_gpus(job, t)
            if n:
                yield Candidate(((t, n),), None, 0.0)

    def on_unplaced(self, ctx: SchedulingContext, js: JobState) -> bool:
        # a job that could never run (no candidate fits the memory) must not block the queue forever
        return not any(ctx.fits(js.job, c.gpus) for c in self.candidates(ctx, js))

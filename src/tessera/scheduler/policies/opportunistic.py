"""Opportunistic scheduling — Frenzy's baseline (Frenzy §V-A, "Opportunistic Scheduling" [23]).

Rules implemented:

* **FCFS, greedy**: queued jobs are taken in arrival order and each gets idle GPUs as soon as they exist
  ("greedily allocating idle resources to newly submitted tasks"), on exactly the GPU count it asked for
  (the fewest GPUs that fit its memory when it asked for none).
* **Fastest GPUs first**: "always prioritizes nodes with higher computational power" — GPU types are tried
  in descending peak FLOP/s (then larger memory), the requested type is ignored; the job takes the first type
  whose memory holds it and whose nodes can place it now (HAS best-fit within the type).
* **Opportunistic jobs and yielding**: a job that starts while an older job is left waiting runs
  *opportunistically*. When a waiting job's requirement can be met by the idle GPUs plus those of
  opportunistic jobs that arrived after it, those opportunistic jobs (latest arrival first, only as many as
  needed) are suspended back to the queue and the waiting job starts — the same starvation guard as Crius's
  opportunistic execution (§6). Jobs that started with nobody waiting ahead are never preempted.

Scale: a (configuration, request) that found no place in a round is not tried again that round, so a round
costs O(queue + running · types).

Information: no throughput data at all — GPU peak FLOP/s and the memory module's fit. Jobs still run the
best plan for their GPUs.
"""

from __future__ import annotations

from tessera.hardware import get_gpu
from tessera.scheduler.knowledge import Knowledge
from tessera.scheduler.policy import Policy, SchedulingContext, register
from tessera.scheduler.state import Job, JobState


def speed_order(types: tuple[str, ...] | list[str]) -> list[str]:
    """GPU types by computational power: peak fp16 FLOP/s, then memory, descending (then name)."""

    def key(t: str) -> tuple[float, float, str]:
        g = get_gpu(t)
        return (-g.peak_flops("fp16"), -g.memory_bytes, t)

    return sorted(types, key=key)


def wanted_gpus(kn: Knowledge, job: Job, gpu_type: str) -> int | None:
    """The job's GPU count on a type: what it asked for, or the fewest GPUs its memory fits."""
    return job.requested_gpus or kn.min_gpus(job, gpu_type)


@register("opportunistic")
class Opportunistic(Policy):
    """FCFS on the fastest GPUs first, with opportunistic backfilling that yields to waiting jobs."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.opportunistic: set[int] = set()  # running jobs started while an older job waited

    def knowledge_changed(self) -> None:
        """New rates: nothing to forget (it keeps no copy); which jobs run opportunistically is kept."""

    def schedule(self, ctx: SchedulingContext) -> None:
        self.opportunistic &= {js.job_id for js in ctx.running}
        types = speed_order(ctx.cluster.types)
        preempted: list[JobState] = []
        waiting_ahead = False
        failed: set[tuple] = (
            set()
        )  # (configuration, request) that found no place this round: nor will the next
        for js in ctx.pending:
            key = (js.job.config, js.job.requested_gpus)
            placed = key not in failed and (
                self._place(ctx, js, types) or self._yield_to(ctx, js, types, preempted)
            )
            if placed:
                if waiting_ahead:
                    self.opportunistic.add(js.job_id)
                continue
            failed.add(key)
            if not waiting_ahead and self._could_ever_run(ctx, js, types):
                waiting_ahead = True
        # suspended jobs take whatever is still idle (opportunistically: someone older is waiting)
        for js in sorted(preempted, key=lambda j: (j.job.arrival_s, j.job_id)):
            if ctx.allocation(js.job_id) is None and self._place(ctx, js, types):
                self.opportunistic.add(js.job_id)
            elif ctx.allocation(js.job_id) is None:
                self.opportunistic.discard(js.job_id)

    @staticmethod
    def _place(ctx: SchedulingContext, js: JobState, types: list[str]) -> bool:
        for t in types:
            n = wanted_gpus(ctx.knowledge, js.job, t)
            if n and ctx.free_by_type().get(t, 0) >= n and ctx.reserve(js.job_id, ((t, n),)) is not None:
                return True
        return False

    @staticmethod
    def _could_ever_run(ctx: SchedulingContext, js: JobState, types: list[str]) -> bool:
        cap = ctx.capacity_by_type()
        return any(
            (n := wanted_gpus(ctx.knowledge, js.job, t))
            and n <= cap.get(t, 0)
            and ctx.fits(js.job, ((t, n),))
            for t in types
        )

    def _yield_to(
        self, ctx: SchedulingContext, js: JobState, types: list[str], preempted: list[JobState]
    ) -> bool:
        """Suspend opportunistic jobs younger than ``js`` on one type, latest first, until ``js`` places there."""
        for t in types:
            n = wanted_gpus(ctx.knowledge, js.job, t)
            if not n or not ctx.fits(js.job, ((t, n),)):
                continue
            victims = sorted(
                (
                    v
                    for v in ctx.running
                    if v.job_id in self.opportunistic
                    and v.job.arrival_s >= js.job.arrival_s
                    and (a := ctx.allocation(v.job_id)) is not None
                    and a.gpu_types == (t,)
                ),
                key=lambda v: (-v.job.arrival_s, -v.job_id),
            )
            if ctx.free_by_type().get(t, 0) + sum(ctx.allocation(v.job_id).n_gpus for v in victims) < n:  # type: ignore[union-attr]
                continue
            out = ctx.preempt_until_fits(
                js.job_id, ((t, n),), None, [v.job_id for v in victims],
                why=f"it ran opportunistically (started while job {js.job_id}, older, waited)",
            )  # fmt: skip
            if out is not None:
                ctx.explain(
                    js.job_id,
                    f"{ctx.verb(js.job_id)}: {n}×{t} (fastest type that holds it); opportunistic jobs that arrived "
                    "after it yield" + (f" ({', '.join(f'job {v}' for v in out)})" if out else ""),
                )
                preempted.extend(ctx.jobs[v] for v in out)
                return True
        return False

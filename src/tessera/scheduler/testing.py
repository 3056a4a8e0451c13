"""Simulator-free helpers for testing a policy on a hand-built situation.

    from tessera.scheduler.testing import make_context, table_knowledge, job
    kn = table_knowledge({("m", 8): {("A100-40GB", 1): 2.0, ("V100-32GB", 1): 1.0}})   # DP-only = Cell = truth
    ctx = make_context([("A100-40GB", 4), ("V100-32GB", 4)], kn,
                       pending=[job(1, "m", 8, gpus=1)], running={job(0, "m", 8, gpus=1): {"V100-32GB": 1}})
    get_policy("fcfs").schedule(ctx)
    ctx.decision().allocations   # {0: Allocation(...V100...), 1: Allocation(...)}

``table_knowledge`` takes rates per (model, global batch) and (GPU type, count) — or (GPUs tuple) for mixes —
with separate optional ``dp`` and ``cells`` tables when the three figures should differ; a (type, count) not
in the table does not fit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tessera.scheduler.knowledge import Config, PerfTable, powers_of_two
from tessera.scheduler.placement import place
from tessera.scheduler.policy import RoundEvents, SchedulingContext
from tessera.scheduler.state import (
    Allocation,
    ClusterState,
    GPUs,
    Job,
    JobState,
    JobStatus,
    as_config,
    gpus_of,
)

RateTable = Mapping[Config | tuple[str, int], Mapping[tuple[str, int] | GPUs, float]]


def _norm(key: tuple[str, int] | GPUs) -> GPUs:
    if len(key) == 2 and isinstance(key[0], str):
        return ((key[0], int(key[1])),)  # type: ignore[index]
    return gpus_of(key)  # type: ignore[arg-type]


class TableSource:
    """A :class:`~tessera.scheduler.knowledge.RateSource` from hand-written rates (missing = does not fit)."""

    def __init__(self, true: RateTable, dp: RateTable | None = None, cells: RateTable | None = None):
        self._true = {as_config(c): {_norm(k): float(v) for k, v in t.items()} for c, t in true.items()}
        self._dp = {as_config(c): {_norm(k): float(v) for k, v in t.items()} for c, t in (dp or true).items()}
        self._cells = {
            as_config(c): {_norm(k): float(v) for k, v in t.items()} for c, t in (cells or true).items()
        }

    def stages(self, config: Config, gpus: GPUs) -> tuple[int, ...]:
        return (1,)

    def cell(self, config: Config, gpus: GPUs, n_stages: int) -> float:
        return self._cells.get(config, {}).get(gpus, 0.0)

    def dp(self, config: Config, gpu_type: str, n_gpus: int) -> float:
        return self._dp.get(config, {}).get(((gpu_type, n_gpus),), 0.0)

    def true(self, config: Config, gpus: GPUs) -> float:
        return self._true.get(config, {}).get(gpus, 0.0)


def table_knowledge(
    true: RateTable,
    *,
    dp: RateTable | None = None,
    cells: RateTable | None = None,
    capacity: Mapping[str, int] | None = None,
) -> PerfTable:
    """A :class:`PerfTable` over hand-written rates (iterations/s). ``capacity`` defaults to 64 of every type
    named in the tables (it bounds ``min_gpus`` and the Cells a policy sees)."""
    if capacity is None:
        types = {
            t
            for tab in (true, dp or {}, cells or {})
            for rows in tab.values()
            for k in rows
            for t, _ in _norm(k)
        }
        capacity = {t: 64 for t in types}
    return PerfTable(TableSource(true, dp, cells), capacity)


def job(
    job_id: int,
    model: str = "m",
    global_batch: int = 8,
    *,
    gpus: int | None = 1,
    gpu_type: str | None = None,
    iterations: float = 1000.0,
    arrival_s: float = 0.0,
    deadline_s: float | None = None,
    priority: int = 0,
) -> Job:
    return Job(
        job_id=job_id,
        model=model,
        global_batch=global_batch,
        arrival_s=arrival_s if arrival_s else float(job_id),
        total_iterations=iterations,
        requested_gpus=gpus,
        requested_type=gpu_type,
        deadline_s=deadline_s,
        priority=priority,
    )


def make_context(
    cluster: ClusterState | Sequence[tuple[str, int]],
    knowledge: PerfTable,
    *,
    pending: Sequence[Job] = (),
    running: Mapping[Job, Mapping[str, int] | GPUs | Allocation] | None = None,
    now_s: float = 0.0,
    done: Mapping[int, float] | None = None,
    events: RoundEvents | None = None,
    keep_in_node: bool = True,
) -> SchedulingContext:
    """A one-round context: ``cluster`` (a ClusterState or (type, GPUs per node) pairs), queued jobs, and
    running jobs with their GPUs (placed best-fit in the given order unless an Allocation is given).
    ``done`` sets iterations already done per job id. Policies see ``knowledge.view()``."""
    cs = cluster if isinstance(cluster, ClusterState) else ClusterState.of(cluster)
    cs = cs.copy()
    run_states: list[JobState] = []
    for j, g in (running or {}).items():
        if isinstance(g, Allocation):
            a = g
        else:
            gpus = g if isinstance(g, tuple) else gpus_of(g)
            p = place(cs, gpus, keep_in_node=False)
            if p is None:
                raise ValueError(f"running job {j.job_id}: {dict(gpus)} does not fit the cluster")
            a = Allocation(p, gpus)
        cs.take(a.placement)
        js = JobState(job=j, status=JobStatus.RUNNING, allocation=a, first_start_s=j.arrival_s, as_of_s=now_s)
        js.rate_iters_per_s = knowledge.true_rate(j, a.gpus)
        run_states.append(js)
    pend_states = [
        JobState(job=j, as_of_s=now_s) for j in sorted(pending, key=lambda j: (j.arrival_s, j.job_id))
    ]
    for js in (*run_states, *pend_states):
        js.done_iterations = (done or {}).get(js.job_id, 0.0)
    arrived = tuple(js.job_id for js in pend_states)
    return SchedulingContext(
        now_s=now_s,
        cluster=cs,
        knowledge=knowledge.view(),
        pending=pend_states,
        running=run_states,
        events=events if events is not None else RoundEvents(arrived=arrived),
        keep_in_node=keep_in_node,
    )


__all__ = ["TableSource", "job", "make_context", "powers_of_two", "table_knowledge"]

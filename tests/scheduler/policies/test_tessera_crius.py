"""tessera-crius: Crius Algorithm 1 as published — scale-downs that raise cluster throughput (and none that
lower it), the search depth bounding the moves, departures retrying pending jobs before growing running ones,
and opportunistic execution, on a small synthetic cluster."""

from __future__ import annotations

import pytest

from tessera.scheduler import RoundEvents, get_policy
from tessera.scheduler.core import Scheduler
from tessera.scheduler.knowledge import SyntheticModel, synthetic_table
from tessera.scheduler.state import ClusterState
from tessera.scheduler.testing import job, make_context

A100, A10 = "A100-40GB", "A10"
BIG = 1e9

MODELS = {
    ("s", 8): SyntheticModel(memory_gib=1, scaling=0.2),  # scales poorly: its 2N Cell is worth little over N
    ("b", 8): SyntheticModel(memory_gib=1, scaling=0.9),  # scales well
    ("big", 8): SyntheticModel(memory_gib=300, scaling=0.9),  # fits 8 x 40 GB, not 4
}


def _kn(capacity: dict[str, int] | None = None):
    return synthetic_table(MODELS, capacity or {A100: 8})


def _full_of(model: str, n_each: int, req: int) -> dict:
    """Four running jobs of ``model`` (requested ``req`` GPUs) holding ``n_each`` A100s each."""
    return {job(i, model, gpus=req, iterations=BIG): {A100: n_each} for i in range(4)}


def _shrunk(ctx, ids) -> list[int]:
    d = ctx.decision().allocations
    return [i for i in ids if d[i].n_gpus < 2]


@pytest.mark.parametrize(("depth", "moves", "new_gpus"), [(1, 0, None), (2, 2, 2), (3, 2, 2), (4, 4, 4)])
def test_search_depth_bounds_the_running_jobs_rescaled_for_an_arrival(depth, moves, new_gpus):
    # 8 A100s held by four 's' jobs at 2N = 2 each; each shrink to N = 1 frees one GPU and costs 0.15 (2^0.2 - 1)
    # of normalized throughput. The 'b' arrival (N = 4) is worth 0.54 on 2 GPUs (2 shrinks), 1.0 on 4 (4 shrinks)
    ctx = make_context([(A100, 8)], _kn(), running=_full_of("s", 2, 1),
                       pending=[job(9, "b", gpus=4, iterations=BIG, arrival_s=100)], now_s=300)  # fmt: skip
    get_policy("tessera-crius", depth=depth).schedule(ctx)
    d = ctx.decision().allocations
    assert len(_shrunk(ctx, range(4))) == moves
    if new_gpus is None:
        assert 9 not in d
    else:
        assert d[9].gpus == ((A100, new_gpus),)
        shrunk = _shrunk(ctx, range(4))
        assert "scaled down 2×A100-40GB → 1×A100-40GB" in ctx.reason(shrunk[0])
        assert "cluster throughput +" in ctx.reason(9)


def test_no_scale_down_when_it_would_lower_cluster_throughput():
    # four 'b' jobs at their N = 2: a shrink to 1 costs 0.46 each; the arrival's best choice (2 shrinks for a
    # Cell worth 0.54, or 4 for one worth 1.0) lowers the total, so it waits and nobody moves
    running = _full_of("b", 2, 2)
    ctx = make_context([(A100, 8)], _kn(), running=running,
                       pending=[job(9, "b", gpus=4, iterations=BIG, arrival_s=100)], now_s=300)  # fmt: skip
    get_policy("tessera-crius", depth=4).schedule(ctx)
    d = ctx.decision().allocations
    assert 9 not in d
    assert all(d[i].gpus == ((A100, 2),) for i in range(4))


def test_an_arrival_takes_its_fastest_cell_on_free_gpus():
    ctx = make_context([(A100, 8)], _kn(), pending=[job(9, "b", gpus=4, iterations=BIG)])
    get_policy("tessera-crius").schedule(ctx)
    assert ctx.decision().allocations[9].gpus == ((A100, 8),)  # 2N: the most throughput


def test_a_running_job_moves_to_another_type_to_make_room_when_that_pays():
    # 4 A100 + 4 A10. 'b' (N = 4) holds the 4 A100s; a second 'b' arrives: it can take the A10s (0.27x speed),
    # or the first moves to the A10s... the best choice keeps the total highest; either way both run
    kn = _kn({A100: 4, A10: 4})
    ctx = make_context([(A100, 4), (A10, 4)], kn, running={job(0, "b", gpus=4, iterations=BIG): {A100: 4}},
                       pending=[job(9, "b", gpus=4, iterations=BIG, arrival_s=100)], now_s=300)  # fmt: skip
    get_policy("tessera-crius").schedule(ctx)
    d = ctx.decision().allocations
    assert {d[0].gpu_types, d[9].gpu_types} == {(A100,), (A10,)}


def test_departure_retries_pending_jobs_before_growing_running_ones():
    # job 5 waited (not a new arrival); a departure frees 4 GPUs: the pending job gets them, the running
    # job does not grow into them
    ctx = make_context([(A100, 8)], _kn(), running={job(0, "b", gpus=4, iterations=BIG): {A100: 4}},
                       pending=[job(5, "b", gpus=4, iterations=BIG)], now_s=600,
                       events=RoundEvents(finished=(77,)))  # fmt: skip
    get_policy("tessera-crius").schedule(ctx)
    d = ctx.decision().allocations
    assert d[0].gpus == ((A100, 4),) and d[5].gpus == ((A100, 4),)


def test_departure_gives_released_gpus_to_running_jobs_and_no_event_changes_nothing():
    running = {job(0, "b", gpus=4, iterations=BIG): {A100: 4}}
    ctx = make_context([(A100, 8)], _kn(), running=running, now_s=600, events=RoundEvents(finished=(77,)))
    get_policy("tessera-crius").schedule(ctx)
    assert ctx.decision().allocations[0].gpus == ((A100, 8),)
    assert "scaled up 4×A100-40GB → 8×A100-40GB" in ctx.reason(0)
    # arrivals only trigger SchedArrival: a pending job that is not new is not retried, nothing grows
    ctx = make_context([(A100, 8)], _kn(), running=running, pending=[job(5, "b", gpus=4, iterations=BIG)],
                       now_s=600, events=RoundEvents())  # fmt: skip
    get_policy("tessera-crius").schedule(ctx)
    d = ctx.decision().allocations
    assert 5 not in d and d[0].gpus == ((A100, 4),)


def _kind(change) -> str:
    return str(getattr(change.kind, "value", change.kind))


def test_opportunistic_execution_suspends_jobs_launched_while_a_large_job_waited():
    table = _kn()
    sched = Scheduler(ClusterState.of([(A100, 8)]), get_policy("tessera-crius"), table.view())
    r = job(0, "b", gpus=4, iterations=BIG, arrival_s=0.0)
    p = job(1, "big", gpus=8, iterations=BIG, arrival_s=300.0)  # fits 8 x A100 only
    s = job(2, "b", gpus=2, iterations=BIG, arrival_s=600.0)
    sched.submit(r, 0.0)
    sched.tick(0.0)
    assert sched.running[0].allocation.n_gpus == 8  # 2N on an empty cluster
    sched.submit(p, 300.0)
    sched.tick(300.0)
    assert 1 in sched.pending  # r can shrink to 2 at most: 6 free < 8
    sched.submit(s, 600.0)
    sched.tick(600.0)
    assert 2 in sched.running  # launched on GPUs r gave up while the large job waits
    sched.complete(0, 900.0)
    res = sched.tick(900.0)
    kinds = {c.job_id: _kind(c) for c in res.changes}
    # r's 4 GPUs + s's GPUs satisfy the large job's minimum Cell: s is suspended and the large job starts
    assert kinds == {2: "preempt", 1: "start"}
    assert sched.running[1].allocation.gpus == ((A100, 8),)
    assert 2 in sched.pending


def test_no_opportunistic_suspension_of_jobs_older_than_the_waiting_job():
    # the same, but s arrived before the large job: it is not opportunistic, so it is never suspended
    table = _kn()
    sched = Scheduler(ClusterState.of([(A100, 8)]), get_policy("tessera-crius"), table.view())
    sched.submit(job(2, "b", gpus=2, iterations=BIG, arrival_s=0.0), 0.0)
    sched.submit(job(0, "b", gpus=4, iterations=BIG, arrival_s=1.0), 1.0)
    sched.tick(300.0)
    sched.submit(job(1, "big", gpus=8, iterations=BIG, arrival_s=400.0), 400.0)
    sched.tick(600.0)
    assert 1 in sched.pending
    sched.complete(0, 900.0)
    res = sched.tick(900.0)
    assert all(_kind(c) != "preempt" for c in res.changes)
    assert 1 in sched.pending


def test_bad_options_name_the_field():
    with pytest.raises(ValueError, match="depth"):
        get_policy("tessera-crius", depth=-1)
    with pytest.raises(ValueError, match="branch"):
        get_policy("tessera-crius", branch=0)

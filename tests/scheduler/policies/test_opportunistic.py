"""Opportunistic (Frenzy's baseline): fastest GPUs first, FCFS backfilling, and yielding to waiting jobs."""

from __future__ import annotations

from tessera.scheduler.policies.opportunistic import speed_order
from tessera.scheduler.policy import RoundEvents, get_policy
from tessera.scheduler.testing import job, make_context, table_knowledge

A100, V100, A10 = "A100-40GB", "V100-32GB", "A10"


def _kn():
    rates = {(t, n): 1.0 * n for t in (A100, V100, A10) for n in (1, 2, 3, 4)}
    return table_knowledge({("m", 8): rates})


def test_speed_order_is_by_peak_flops():
    assert speed_order([V100, A10, A100])[0] == A100


def test_takes_the_fastest_gpus_first_whatever_was_requested():
    ctx = make_context([(V100, 4), (A100, 4)], _kn(), pending=[job(1, gpus=2, gpu_type=V100)])
    get_policy("opportunistic").schedule(ctx)
    assert ctx.decision().allocations[1].gpus == ((A100, 2),)


def test_falls_back_to_slower_gpus_and_skips_types_the_job_does_not_fit():
    # 'big' fits only on A100; the A100 node is busy, so it waits while a small job takes the V100s
    kn = table_knowledge({("big", 8): {(A100, 2): 2.0}, ("m", 8): {(A100, 2): 2.0, (V100, 2): 1.0}})
    busy = job(0, "m", gpus=2)
    ctx = make_context([(A100, 2), (V100, 2)], kn, running={busy: {A100: 2}},
                       pending=[job(1, "big", gpus=2), job(2, "m", gpus=2)])  # fmt: skip
    get_policy("opportunistic").schedule(ctx)
    allocs = ctx.decision().allocations
    assert 1 not in allocs and allocs[2].gpus == ((V100, 2),)


def test_opportunistic_jobs_yield_when_the_pending_large_job_fits():
    kn, policy = _kn(), get_policy("opportunistic")
    owner, large, small1, small2 = job(0, gpus=2), job(1, gpus=4), job(2, gpus=1), job(3, gpus=1)
    # round 1: the owner holds 2 of the 4 A100s; the large job cannot start; the small ones backfill
    ctx = make_context([(A100, 4)], kn, running={owner: {A100: 2}}, pending=[large, small1, small2])
    policy.schedule(ctx)
    r1 = ctx.decision().allocations
    assert 1 not in r1 and {2, 3} <= set(r1)
    assert policy.opportunistic == {2, 3}
    # round 2: the owner finished: free (2) + opportunistic (2) = 4 ≥ 4, so both small jobs yield
    ctx = make_context([(A100, 4)], kn, running={small1: r1[2], small2: r1[3]}, pending=[large], now_s=300.0,
                       events=RoundEvents(finished=(0,)))  # fmt: skip
    policy.schedule(ctx)
    r2 = ctx.decision().allocations
    assert r2[1].gpus == ((A100, 4),)
    assert 2 not in r2 and 3 not in r2


def test_only_as_many_opportunistic_jobs_as_needed_yield_latest_first():
    kn, policy = _kn(), get_policy("opportunistic")
    owner, large, a, b = job(0, gpus=2), job(1, gpus=3), job(2, gpus=1), job(3, gpus=1)
    ctx = make_context([(A100, 4)], kn, running={owner: {A100: 2}}, pending=[large, a, b])
    policy.schedule(ctx)
    r1 = ctx.decision().allocations
    assert 1 not in r1 and policy.opportunistic == {2, 3}
    # the owner finished: 2 idle; the large job needs 3, so only the latest opportunistic job (b) yields
    ctx = make_context([(A100, 4)], kn, running={a: r1[2], b: r1[3]}, pending=[large], now_s=300.0)
    policy.schedule(ctx)
    r2 = ctx.decision().allocations
    assert r2[1].gpus == ((A100, 3),) and r2[2] == r1[2] and 3 not in r2
    why = ctx.decision().reasons
    victim = why[3]
    assert victim.startswith("preempted to make room for job 1 (priority 0): it ran opportunistically"), (
        victim
    )
    assert why[1].startswith("start: 3×A100-40GB") and "(job 3)" in why[1], why[1]
    assert 2 not in why  # kept its GPUs: nothing to explain


def test_no_one_yields_when_idle_gpus_suffice():
    kn, policy = _kn(), get_policy("opportunistic")
    owner, large, a = job(0, gpus=3), job(1, gpus=2), job(2, gpus=1)
    ctx = make_context([(A100, 4)], kn, running={owner: {A100: 3}}, pending=[large, a])
    policy.schedule(ctx)
    r1 = ctx.decision().allocations
    assert 1 not in r1 and policy.opportunistic == {2}
    ctx = make_context([(A100, 4)], kn, running={a: r1[2]}, pending=[large], now_s=300.0)
    policy.schedule(ctx)
    r2 = ctx.decision().allocations
    assert r2[2] == r1[2] and r2[1].gpus == ((A100, 2),)


def test_jobs_that_started_with_nobody_waiting_never_yield():
    kn, policy = _kn(), get_policy("opportunistic")
    first, large = job(0, gpus=2), job(1, gpus=4)
    ctx = make_context([(A100, 4)], kn, pending=[first])
    policy.schedule(ctx)
    r1 = ctx.decision().allocations
    assert policy.opportunistic == set()
    ctx = make_context([(A100, 4)], kn, running={first: r1[0]}, pending=[large], now_s=300.0)
    policy.schedule(ctx)
    assert ctx.decision().allocations == {0: r1[0]}

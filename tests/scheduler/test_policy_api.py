"""The Policy interface: registry, the virtual allocation of a SchedulingContext, phases, FCFS."""

from __future__ import annotations

import pytest

from tessera.errors import UnknownNameError
from tessera.scheduler import Allocation, PhasedPolicy, get_policy, policy_names
from tessera.scheduler.knowledge import SyntheticModel, synthetic_table
from tessera.scheduler.testing import job, make_context, table_knowledge

A100, V100, A10 = "A100-40GB", "V100-32GB", "A10"
KN = table_knowledge(
    {
        ("m", 8): {(A100, 1): 2.0, (A100, 2): 3.6, (A100, 4): 6.0, (V100, 1): 1.0, (V100, 2): 1.8},
        ("big", 8): {(A100, 4): 1.0, (V100, 4): 0.5},  # needs 4 GPUs
    }
)


def test_registry_finds_fcfs_and_rejects_unknown_names():
    assert "fcfs" in policy_names()
    p = get_policy("fcfs")
    assert p.name == "fcfs" and isinstance(p, PhasedPolicy)
    with pytest.raises(UnknownNameError, match="unknown policy 'fcfsx'"):
        get_policy("fcfsx")


def test_context_starts_from_current_allocations_and_reserve_release_are_virtual():
    ctx = make_context([(A100, 4), (V100, 2)], KN, pending=[job(1, gpus=2)], running={job(0): {A100: 1}})
    assert ctx.free_by_type() == {A100: 3, V100: 2}
    a = ctx.reserve(1, {A100: 2})
    assert a is not None and a.gpus == ((A100, 2),) and ctx.free_by_type()[A100] == 1
    assert ctx.reserve(1, {A100: 4}) is None  # does not fit: keeps what it had
    assert ctx.allocation(1) == a
    ctx.release(0)
    assert ctx.free_by_type()[A100] == 2 and ctx.allocation(0) is None
    d = ctx.decision()
    assert set(d.allocations) == {1}


def test_reserve_filters_memory_fit_and_keeps_identical_gpus():
    ctx = make_context(
        [(A100, 4), (V100, 4)], KN, pending=[job(2, "big", gpus=4)], running={job(0): {A100: 1}}
    )
    assert ctx.reserve(2, {A100: 2}) is None  # the model does not fit 2 GPUs
    assert ctx.reserve(2, {V100: 4}) is not None
    held = ctx.allocation(0)
    assert ctx.reserve(0, {A100: 1}) is held  # same GPU counts: same GPUs, no restart


def test_fcfs_blocks_behind_the_queue_head_and_uses_requested_type():
    pending = [job(1, "big", gpus=4, gpu_type=A100), job(2, gpus=1, gpu_type=V100)]
    ctx = make_context([(A100, 4), (V100, 4)], KN, pending=pending, running={job(0): {A100: 1}})
    get_policy("fcfs").schedule(ctx)
    d = ctx.decision()
    assert set(d.allocations) == {0}  # job 1 cannot start (3 A100 free) and blocks job 2
    ctx2 = make_context([(A100, 4), (V100, 4)], KN, pending=pending)
    get_policy("fcfs").schedule(ctx2)
    d2 = ctx2.decision().allocations
    assert d2[1].gpus == ((A100, 4),) and d2[2].gpus == ((V100, 1),)


def test_fcfs_never_preempts_or_rescales():
    ctx = make_context([(A100, 2)], KN, pending=[job(1, gpus=2, gpu_type=A100)], running={job(0): {A100: 1}})
    get_policy("fcfs").schedule(ctx)
    assert set(ctx.decision().allocations) == {0}


def test_knowledge_cells_follow_crius_counts_and_mixes():
    kn = synthetic_table({("m", 8): SyntheticModel(memory_gib=60)}, {A100: 16, A10: 16})
    j = job(1, gpus=2)
    cells = kn.cells(j)
    shapes = {c.gpus for c in cells}
    # A100 (40 GiB): N = 2 → 1 (does not fit), 2, 4; A10 (24 GiB): N = 4 (smallest fit) → 2 (no), 4, 8
    assert ((A100, 2),) in shapes and ((A100, 4),) in shapes and ((A100, 1),) not in shapes
    assert ((A10, 4),) in shapes and ((A10, 8),) in shapes and ((A10, 2),) not in shapes
    assert any(len(g) == 2 for g in shapes)  # even two-type mixes
    rates = [c.rate_iters_per_s for c in cells]
    assert rates == sorted(rates, reverse=True)
    assert kn.min_gpus(j, A10) == 4 and kn.min_gpus(j, A10, dp_only=True) == 8
    assert kn.dp_rate(j, A10, 4) == 0.0 and kn.dp_rate(j, A10, 8) > 0


def test_knowledge_view_hides_the_truth():
    view = KN.view()
    assert not hasattr(view, "true_rate")
    assert view.fits(job(0), ((A100, 1),)) and not view.fits(job(0, "big"), ((A100, 1),))


def test_preempt_until_fits_suspends_in_order_gives_back_what_was_not_needed_and_explains():
    # node 0: 4 A100 held by three jobs (2 + 1 + 1); a 2-GPU job needs room. Victims in order 1, 2, 0: releasing
    # job 1 (1 GPU) is not enough, job 2 (1 more) is — job 0 is never touched; nothing is given back
    run = {job(0, gpus=2): {A100: 2}, job(1): {A100: 1}, job(2): {A100: 1}}
    ctx = make_context([(A100, 4)], KN, pending=[job(5, gpus=2, priority=3)], running=run)
    out = ctx.preempt_until_fits(5, {A100: 2}, None, [1, 2, 0], why=lambda v: f"job {v} is the shortest")
    assert out == [1, 2] and ctx.allocation(5).gpus == ((A100, 2),) and ctx.allocation(0) is not None
    assert ctx.reason(1) == "preempted to make room for job 5 (priority 3): job 1 is the shortest"
    assert ctx.decision().reasons[2].startswith("preempted to make room for job 5")
    assert ctx.reason(0) == ""


def test_preempt_until_fits_undoes_everything_when_the_job_still_does_not_fit():
    run = {job(0, gpus=2): {A100: 2}, job(1): {A100: 1}}
    ctx = make_context([(A100, 4)], KN, pending=[job(5, "big", gpus=4)], running=run)
    before = dict(ctx.allocations)
    assert ctx.preempt_until_fits(5, {A100: 4}, None, [1], why="x") is None  # job 0 is not a victim
    assert dict(ctx.allocations) == before and ctx.free_by_type()[A100] == 1
    assert ctx.decision().reasons == {}


def test_preempt_until_fits_gives_back_a_victim_released_but_not_needed():
    # node 0: job 1 on both GPUs; node 1: jobs 0 and 2 on one GPU each. Victims in order 0, 1: releasing job 0
    # frees one GPU of node 1 (not enough for two in one node), job 1 frees node 0 — then job 0 needed not go
    run = {
        job(0): Allocation(((1, 1),), ((A100, 1),)),
        job(1, gpus=2): Allocation(((0, 2),), ((A100, 2),)),
        job(2): Allocation(((1, 1),), ((A100, 1),)),
    }
    ctx = make_context([(A100, 2), (A100, 2)], KN, pending=[job(5, gpus=2)], running=run)
    out = ctx.preempt_until_fits(5, {A100: 2}, None, [0, 1])
    assert out == [1] and ctx.allocation(5).placement == ((0, 2),)
    assert ctx.allocation(0) == run[job(0)] and ctx.reason(0) == ""  # back on its own GPU: no restart

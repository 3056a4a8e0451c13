"""Frenzy: MARP plans (memory-derived GPU count per type), HAS retrieval and best-fit placement, FCFS."""

from __future__ import annotations

from tessera.scheduler.policies.frenzy import resource_plans
from tessera.scheduler.policy import get_policy
from tessera.scheduler.state import Allocation
from tessera.scheduler.testing import job, make_context, table_knowledge

A100, V100, A80 = "A100-40GB", "V100-32GB", "A100-80GB"
GB = 2**30

# 'llm' needs 2 A100-40GB or 4 V100-32GB to fit (anything smaller is absent = does not fit); A100 is faster
LLM = {(A100, 2): 4.0, (A100, 4): 7.0, (V100, 4): 3.0, (V100, 8): 5.0}


def test_plans_take_the_memory_derived_count_per_type_fastest_first():
    kn = table_knowledge({("llm", 8): LLM})
    cap, mem = {A100: 8, V100: 8}, {A100: 40 * GB, V100: 32 * GB}
    plans = resource_plans(kn, job(1, "llm", gpus=None), cap, mem)
    assert [(p.n_gpus, p.min_memory_bytes, p.gpu_type) for p in plans] == [
        (2, 40 * GB, A100),
        (4, 32 * GB, V100),
    ]
    # a requested count is a floor (the trace's job ran on that many)
    plans = resource_plans(kn, job(1, "llm", gpus=4), cap, mem)
    # 4 GPUs fit 32 GB ones, so the A100 and V100 plans are one: (4, >= 32 GB), ranked on the faster A100
    assert [(p.n_gpus, p.min_memory_bytes, p.gpu_type) for p in plans] == [(4, 32 * GB, A100)]


def test_has_takes_the_first_plan_the_cluster_can_satisfy_now():
    kn = table_knowledge({("llm", 8): LLM, ("m", 8): {(A100, 3): 1.0}})
    busy = job(0, "m", gpus=3)
    # only 1 A100 free: the A100 plan cannot be satisfied, the V100 plan can
    ctx = make_context(
        [(A100, 4), (V100, 8)], kn, running={busy: {A100: 3}}, pending=[job(1, "llm", gpus=None)]
    )
    get_policy("frenzy").schedule(ctx)
    assert ctx.decision().allocations[1].gpus == ((V100, 4),)
    # with the A100s free it takes the faster plan
    ctx = make_context([(A100, 4), (V100, 8)], kn, pending=[job(1, "llm", gpus=None)])
    get_policy("frenzy").schedule(ctx)
    assert ctx.decision().allocations[1].gpus == ((A100, 2),)


def test_best_fit_prefers_the_tightest_node():
    kn = table_knowledge({("llm", 8): LLM, ("m", 8): {(A100, 1): 1.0}})
    busy = job(0, "m", gpus=1)
    # node 0: 4 free; node 1: 3 free (one busy). Job(2 A100) goes to node 1, leaving node 0 whole
    on_node1 = Allocation(((1, 1),), ((A100, 1),))
    ctx = make_context(
        [(A100, 4), (A100, 4)], kn, pending=[job(1, "llm", gpus=None)], running={busy: on_node1}
    )
    get_policy("frenzy").schedule(ctx)
    assert ctx.decision().allocations[1].placement == ((1, 2),)


def test_fcfs_head_blocks_the_queue():
    kn = table_knowledge({("llm", 8): LLM, ("m", 8): {(A100, 1): 1.0, (A100, 3): 2.0}})
    busy = job(0, "m", gpus=3)
    # only 1 A100 free and no V100: the llm head waits, and the 1-GPU job behind it waits too
    ctx = make_context([(A100, 4)], kn, running={busy: {A100: 3}},
                       pending=[job(1, "llm", gpus=None), job(2, "m", gpus=1)])  # fmt: skip
    get_policy("frenzy").schedule(ctx)
    assert set(ctx.decision().allocations) == {0}


def test_a_job_no_plan_can_ever_hold_does_not_block():
    kn = table_knowledge({("huge", 8): {(A100, 64): 1.0}, ("m", 8): {(A100, 1): 1.0}})
    ctx = make_context([(A100, 4)], kn, pending=[job(1, "huge", gpus=None), job(2, "m", gpus=1)])
    get_policy("frenzy").schedule(ctx)
    assert set(ctx.decision().allocations) == {2}


def test_has_places_on_the_smallest_adequate_memory_size_first():
    # a 2-GPU job fitting 2 x 32 GB: a free 40 GB node is taken before an 80 GB one, even when the 80 GB node
    # is the tighter fit (Frenzy Algorithm 1 lines 14-15)
    kn = table_knowledge({("j", 8): {(V100, 2): 1.0, (A100, 2): 2.0, (A80, 2): 2.5}})
    ctx = make_context([(A80, 2), (A100, 4)], kn, pending=[job(1, "j", gpus=2)])
    get_policy("frenzy").schedule(ctx)
    a = ctx.decision().allocations[1]
    assert a.gpus == ((A100, 2),) and a.placement == ((1, 2),)


def test_plans_need_the_smallest_size_that_fits_and_merge():
    # 2 GPUs fit on V100-32GB, A100-40GB and A100-80GB: all three plans are (2, >= 32 GB), one plan, ranked by
    # the fastest type; an 'xl' job needs 80 GB at 2 GPUs but 40 GB at 4
    kn = table_knowledge(
        {
            ("j", 8): {(V100, 2): 1.0, (A100, 2): 2.0, (A80, 2): 2.5},
            ("xl", 8): {(A80, 2): 3.0, (A100, 4): 2.0},
        }
    )
    cap, mem = {A100: 8, V100: 8, A80: 8}, {A100: 40 * GB, V100: 32 * GB, A80: 80 * GB}
    plans = resource_plans(kn, job(1, "j", gpus=2), cap, mem)
    assert [(p.n_gpus, p.min_memory_bytes, p.gpu_type) for p in plans] == [(2, 32 * GB, A80)]
    plans = resource_plans(kn, job(2, "xl", gpus=None), cap, mem)
    assert [(p.n_gpus, p.min_memory_bytes) for p in plans] == [(2, 80 * GB), (4, 40 * GB)]


def test_without_the_smaller_sizes_free_the_job_takes_the_80gb_node():
    kn = table_knowledge(
        {
            ("j", 8): {(V100, 2): 1.0, (A100, 2): 2.0, (A80, 2): 2.5},
            ("m", 8): {(V100, 4): 1.0, (A100, 4): 1.0},
        }
    )
    ctx = make_context(
        [(V100, 4), (A80, 2), (A100, 4)],
        kn,
        running={job(0, "m", gpus=4): {V100: 4}, job(2, "m", gpus=4): {A100: 4}},
        pending=[job(1, "j", gpus=2)],
    )
    get_policy("frenzy").schedule(ctx)
    assert ctx.decision().allocations[1].gpus == ((A80, 2),)
    # with a V100 node free it goes there first (smallest adequate size), though the 80 GB GPUs are fastest
    ctx = make_context(
        [(V100, 4), (A80, 2), (A100, 4)],
        kn,
        running={job(2, "m", gpus=4): {A100: 4}},
        pending=[job(1, "j", gpus=2)],
    )
    get_policy("frenzy").schedule(ctx)
    assert ctx.decision().allocations[1].gpus == ((V100, 2),)

"""Frenzy: MARP plans (memory-derived GPU count per type), HAS retrieval and best-fit placement, FCFS."""

from __future__ import annotations

from tessera.scheduler.policies.frenzy import resource_plans
from tessera.scheduler.policy import get_policy
from tessera.scheduler.state import Allocation
from tessera.scheduler.testing import job, make_context, table_knowledge

A100, V100 = "A100-40GB", "V100-32GB"

# 'llm' needs 2 A100-40GB or 4 V100-32GB to fit (anything smaller is absent = does not fit); A100 is faster
LLM = {(A100, 2): 4.0, (A100, 4): 7.0, (V100, 4): 3.0, (V100, 8): 5.0}


def test_plans_take_the_memory_derived_count_per_type_fastest_first():
    kn = table_knowledge({("llm", 8): LLM})
    plans = resource_plans(kn, job(1, "llm", gpus=None), {A100: 8, V100: 8})
    assert [g for g, _ in plans] == [((A100, 2),), ((V100, 4),)]
    # a requested count is a floor (the trace's job ran on that many)
    plans = resource_plans(kn, job(1, "llm", gpus=4), {A100: 8, V100: 8})
    assert [g for g, _ in plans] == [((A100, 4),), ((V100, 4),)]


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

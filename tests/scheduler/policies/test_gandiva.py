"""Gandiva: affinity packing, migration (defragmentation and locality), introspective grow-shrink."""

from __future__ import annotations

from tessera.scheduler.policy import get_policy
from tessera.scheduler.state import Allocation
from tessera.scheduler.testing import job, make_context, table_knowledge

A100, V100 = "A100-40GB", "V100-32GB"


def _kn(true=None, dp=None):
    rates = {(t, n): 1.0 * n for t in (A100, V100) for n in (1, 2, 4, 8)}
    return table_knowledge({("m", 8): true or rates}, dp={("m", 8): dp or rates})


def _on(node: int, n: int, t: str = A100) -> Allocation:
    return Allocation(((node, n),), ((t, n),))


def test_affinity_packs_like_sized_jobs_together():
    # node 0 runs a 2-GPU job, node 1 a 1-GPU job, node 2 is empty
    run = {job(0, gpus=2): _on(0, 2), job(1, gpus=1): _on(1, 1)}
    ctx = make_context([(A100, 4)] * 3, _kn(), running=run, pending=[job(2, gpus=1), job(3, gpus=2)])
    get_policy("gandiva").schedule(ctx)
    allocs = ctx.decision().allocations
    assert allocs[2].placement == ((1, 1),)  # with the other 1-GPU job
    assert allocs[3].placement == ((0, 2),)  # with the other 2-GPU job; node 2 stays whole


def test_heterogeneity_unaware_and_requested_type_ignored():
    # an empty V100 node comes first: Gandiva takes it though the A100 is faster and was requested
    ctx = make_context([(V100, 4), (A100, 4)], _kn(), pending=[job(1, gpus=1, gpu_type=A100)])
    get_policy("gandiva", grow_gain=100.0).schedule(ctx)
    assert ctx.decision().allocations[1].gpus == ((V100, 1),)


def test_migration_defragments_a_node_for_a_blocked_job():
    # node 0: two 1-GPU jobs; node 1: one 2-GPU job → 4 GPUs free but no node has 4 for the 4-GPU job.
    # Gandiva migrates the two 1-GPU jobs of node 0 (the least occupied, lowest index) onto node 1
    run = {job(0, gpus=1): _on(0, 1), job(1, gpus=1): _on(0, 1), job(2, gpus=2): _on(1, 2)}
    ctx = make_context([(A100, 4)] * 2, _kn(), running=run, pending=[job(3, gpus=4)])
    p = get_policy("gandiva")
    p.schedule(ctx)
    allocs = ctx.decision().allocations
    assert allocs[3].placement == ((0, 4),)
    assert allocs[0].placement == allocs[1].placement == ((1, 1),)
    assert allocs[2].placement == ((1, 2),)
    for jid in (0, 1):  # both moves say why, naming the job they make room for
        assert "defragmentation" in ctx.reason(jid) and "job 3" in ctx.reason(jid)
    assert ctx.reason(2) == ""  # not moved


def test_migration_consolidates_a_spread_job():
    spread = Allocation(((0, 1), (1, 1)), ((A100, 2),))
    run = {job(0, gpus=2): spread, job(1, gpus=3): _on(0, 3), job(2, gpus=3): _on(1, 3)}
    ctx = make_context([(A100, 4)] * 3, _kn(), running=run)
    get_policy("gandiva", grow_gain=100.0).schedule(ctx)
    assert ctx.decision().allocations[0].placement == ((2, 2),)


def test_grow_then_introspect_and_shrink_back():
    # DP-only profile promises 2x on 2 GPUs; the measured speed on 2 GPUs is only 1.1x
    true = {(A100, 1): 1.0, (A100, 2): 1.1, (A100, 4): 1.2}
    dp = {(A100, 1): 1.0, (A100, 2): 2.0, (A100, 4): 4.0}
    kn, p = _kn(true, dp), get_policy("gandiva")
    j = job(0, gpus=1)
    ctx = make_context([(A100, 4)], kn, running={j: _on(0, 1)})
    p.schedule(ctx)
    grown = ctx.decision().allocations[0]
    assert grown.n_gpus == 2 and p.grown == {0: (1, 1.0)}
    ctx = make_context([(A100, 4)], kn, running={j: grown}, now_s=300.0)  # measured 1.1 < 1.5 × 1.0
    p.schedule(ctx)
    assert ctx.decision().allocations[0].n_gpus == 1 and 0 in p.no_grow
    ctx = make_context([(A100, 4)], kn, running={j: ctx.decision().allocations[0]}, now_s=600.0)
    p.schedule(ctx)
    assert ctx.decision().allocations[0].n_gpus == 1  # never grows again


def test_grown_jobs_shrink_when_jobs_queue():
    kn, p = _kn(), get_policy("gandiva")
    j = job(0, gpus=2)
    ctx = make_context([(A100, 4)], kn, running={j: _on(0, 2)})
    p.schedule(ctx)
    assert ctx.decision().allocations[0].n_gpus == 4  # linear scaling: grows into the idle node
    ctx = make_context([(A100, 4)], kn, running={j: ctx.decision().allocations[0]}, pending=[job(1, gpus=2)],
                       now_s=300.0)  # fmt: skip
    p.schedule(ctx)
    allocs = ctx.decision().allocations
    assert allocs[0].n_gpus == 2 and allocs[1].n_gpus == 2

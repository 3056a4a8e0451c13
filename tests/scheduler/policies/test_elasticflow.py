"""ElasticFlow: progressive filling, admission by deadline as computed by hand, elastic leftovers, -LS."""

from __future__ import annotations

import numpy as np

from tessera.scheduler.policies.elasticflow import progressive_fill
from tessera.scheduler.policy import RoundEvents, get_policy
from tessera.scheduler.testing import job, make_context, table_knowledge

A100, V100 = "A100-40GB", "V100-32GB"
LEVELS, RATES = np.array([1, 2, 4]), np.array([1.0, 2.0, 4.0])


def test_progressive_fill_takes_the_smallest_quota_that_meets_the_deadline():
    # 500 iterations in three 100 s slots: q = 1 does 300, q = 2 does 600 → two GPUs, all three slots
    shares = progressive_fill(500, LEVELS, RATES, np.array([4, 4, 4]), np.full(3, 100.0))
    np.testing.assert_array_equal(shares, [2, 2, 2])
    # only one GPU free in the first slot: q = 2 gives 1, 2, 2 → 100 + 200 + 200 = 500, just enough
    shares = progressive_fill(500, LEVELS, RATES, np.array([1, 4, 4]), np.full(3, 100.0))
    np.testing.assert_array_equal(shares, [1, 2, 2])
    # a share is the largest power of two that is free: with 3 free, q = 4 runs on 2 → 200 + 400 = 600
    shares = progressive_fill(600, LEVELS, RATES, np.array([3, 4]), np.full(2, 100.0))
    np.testing.assert_array_equal(shares, [2, 4])
    assert progressive_fill(2000, LEVELS, RATES, np.array([4, 4, 4]), np.full(3, 100.0)) is None


def _linear():
    return table_knowledge({("m", 8): {(A100, n): 1.0 * n for n in (1, 2, 4)}})


def test_admission_and_drops_follow_the_hand_computed_reservations():
    # 4 A100s, 300 s slots, 1 it/s per GPU. Earliest deadline first:
    #   B: 600 it by t=300 → q=2 in slot 0;   C: 600 it by t=300 → q=2 in slot 0 (2 left);
    #   A: 1200 it by t=600 → slot 0 full, slot 1 free 4: q=1 → 300, q=2 → 600, q=4 → 1200 ✓ → [0, 4];
    #   D: 1500 it by t=600 → nothing left in either slot → dropped
    kn, p = _linear(), get_policy("elasticflow")
    a = job(1, iterations=1200, deadline_s=600.0, gpus=1)
    b = job(2, iterations=600, deadline_s=300.0, gpus=1)
    c = job(3, iterations=600, deadline_s=300.0, gpus=1)
    d = job(4, iterations=1500, deadline_s=600.0, gpus=1)
    ctx = make_context([(A100, 4)], kn, pending=[a, b, c, d])
    p.schedule(ctx)
    dec = ctx.decision()
    assert dec.dropped == {4}
    assert dec.reasons[4].startswith("dropped: no GPU quota finishes it by its deadline"), dec.reasons[4]
    assert dec.reasons[2] == (
        "start: 2 GPUs (its reserved share for the deadline, then leftover GPUs by marginal return, ElasticFlow §4.2)"
    )
    assert p.admitted == {1, 2, 3}
    assert {j: x.n_gpus for j, x in dec.allocations.items()} == {2: 2, 3: 2}
    np.testing.assert_array_equal(p._plans[1][1], [0, 4])
    # next round B and C are done: A gets its reserved 4 GPUs for the slot [300, 600)
    assert p.every_round
    ctx = make_context([(A100, 4)], kn, pending=[a], now_s=300.0, events=RoundEvents(finished=(2, 3)))
    p.schedule(ctx)
    assert ctx.decision().allocations[1].n_gpus == 4


def test_a_job_that_cannot_meet_its_deadline_even_alone_is_dropped():
    ctx = make_context([(A100, 4)], _linear(), pending=[job(1, iterations=5000, deadline_s=300.0)])
    get_policy("elasticflow").schedule(ctx)
    assert ctx.decision().dropped == {1}


def test_leftovers_go_by_marginal_return_and_ls_drops_nothing():
    # 8 GPUs; 'lin' scales linearly, 'flat' barely (1, 1.1, 1.15, 1.2); job 3 is a 'lin' job with a hopeless
    # deadline, which -LS keeps. Minimum shares 1 + 1 + 1 (5 left), then by gain per GPU relative to the
    # 1-GPU rate, ties by age: job 1 1→2 (1.0), job 1 2→4 (1.0), job 1 4→8 needs 4 > 2 left, job 3 1→2 (1.0),
    # job 3 2→4 needs 2 > 1 left, job 2 1→2 (0.1) → 4, 2, 2
    kn = table_knowledge(
        {
            ("lin", 8): {(A100, n): 1.0 * n for n in (1, 2, 4, 8)},
            ("flat", 8): {(A100, 1): 1.0, (A100, 2): 1.1, (A100, 4): 1.15, (A100, 8): 1.2},
        }
    )
    hopeless = job(3, "lin", iterations=1e9, deadline_s=300.0)
    ctx = make_context([(A100, 8)], kn, pending=[job(1, "lin"), job(2, "flat"), hopeless])
    get_policy("elasticflow-ls").schedule(ctx)
    dec = ctx.decision()
    assert dec.dropped == frozenset()  # loosened deadlines: even the hopeless job stays
    assert {j: x.n_gpus for j, x in dec.allocations.items()} == {1: 4, 2: 2, 3: 2}


def test_busy_cluster_shrinks_everyone_to_minimum_shares():
    kn = _linear()
    jobs = [job(i) for i in range(4)]
    ctx = make_context([(A100, 4)], kn, pending=jobs)
    get_policy("elasticflow-ls").schedule(ctx)
    assert all(a.n_gpus == 1 for a in ctx.decision().allocations.values())
    assert len(ctx.decision().allocations) == 4


def test_homogeneous_view_places_by_free_gpus_not_speed():
    # A100 is 4x faster, but ElasticFlow sees one pool: the job lands where most GPUs are free
    kn = table_knowledge({("m", 8): {(A100, 1): 4.0, (V100, 1): 1.0}})
    ctx = make_context([(A100, 2), (V100, 4)], kn, pending=[job(1)])
    get_policy("elasticflow-ls", max_gpus=1).schedule(ctx)
    assert ctx.decision().allocations[1].gpus == ((V100, 1),)


def test_minimum_share_comes_from_dp_only_data():
    # any plan fits 1 GPU, DP-only needs 4: ElasticFlow-LS's minimum share is 4 (it over-estimates, Crius §8)
    kn = table_knowledge({("m", 8): {(A100, n): 1.0 * n for n in (1, 2, 4)}}, dp={("m", 8): {(A100, 4): 3.0}})
    ctx = make_context([(A100, 4)], kn, pending=[job(1), job(2)])
    get_policy("elasticflow-ls").schedule(ctx)
    assert {j: a.n_gpus for j, a in ctx.decision().allocations.items()} == {1: 4}

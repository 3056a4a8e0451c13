"""Gavel: the max-sum-throughput LP against hand-solved cases, the round mechanism, and the policy."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.scheduler.policies.gavel import assign_round, max_sum_throughput
from tessera.scheduler.policy import get_policy
from tessera.scheduler.testing import job, make_context, table_knowledge

A100, V100 = "A100-40GB", "V100-32GB"


def test_lp_matches_hand_solved_two_jobs_two_types():
    # One A100 and one V100. Job a: 3 it/s on A100, 2 on V100; job b: 3 on A100, 1 on V100.
    # Hand: (a→A100, b→V100) = 3 + 1 = 4; (a→V100, b→A100) = 2 + 3 = 5 is the optimum; sharing cannot beat it
    # because the LP's vertex is integral here (a 2×2 assignment polytope).
    X = max_sum_throughput(np.array([[3.0, 2.0], [3.0, 1.0]]), [1, 1], [1, 1])
    np.testing.assert_allclose(X, [[0.0, 1.0], [1.0, 0.0]], atol=1e-9)


def test_lp_fractional_shares_and_capacity():
    # two 2-GPU jobs, 2 A100 and 2 V100: each gets a whole type; with only 2 A100 and 0 V100 they must share
    T = np.array([[1.0, 0.5], [1.0, 0.5]])
    X = max_sum_throughput(T, [2, 2], [2, 0])
    assert X[:, 1].sum() == pytest.approx(0.0)
    assert X[:, 0].sum() == pytest.approx(1.0)  # 2 GPUs / scale 2 = one job-share in total
    X = max_sum_throughput(T, [2, 2], [2, 2])
    assert (T * X).sum() == pytest.approx(1.5)


def test_lp_over_classes_equals_per_job_optimum():
    # three identical jobs on 1 A100 + 1 V100: per job or as one class of 3, the optimum is 1 + 0.5
    T = np.array([[1.0, 0.5]] * 3)
    per_job = max_sum_throughput(T, [1, 1, 1], [1, 1])
    cls = max_sum_throughput(T[:1], [1], [1, 1], count=[3])
    assert (T * per_job).sum() == pytest.approx(1.5)
    assert (T[:1] * cls).sum() == pytest.approx(1.5)
    np.testing.assert_allclose(cls[0], [1.0, 1.0])


def test_lp_never_allocates_where_the_job_cannot_run():
    X = max_sum_throughput(np.array([[0.0, 1.0]]), [1], [4, 4])
    assert X[0, 0] == 0.0 and X[0, 1] == pytest.approx(1.0)


def test_round_priority_serves_the_least_served_first():
    # equal shares; job 0 already ran its share on A100, job 1 never ran: job 1 goes first to A100
    X = np.array([[0.5, 0.0], [0.5, 0.0]])
    out = assign_round(
        X, np.array([[300.0, 0], [0, 0]]), np.array([600.0, 600.0]), np.ones((2, 2)), [1, 1], [1, 1]
    )
    assert out[1] == 0
    assert out[0] == 1  # the V100 is left, and Gavel fills it (priority 0 still runs when there is room)


def _rounds(policy, kn, cluster, jobs, n_rounds, round_s=300.0, remeasured=False):
    """Run the policy round after round (no progress model: jobs never finish); returns time per job and type.
    ``remeasured``: the rates change before every round, as the service's measured speeds make them."""
    time_on: dict[tuple[int, str], float] = {}
    running = {}
    for r in range(n_rounds):
        if remeasured:
            policy.knowledge_changed()
        ctx = make_context(cluster, kn, pending=[j for j in jobs if j not in running], running=running,
                           now_s=r * round_s)  # fmt: skip
        policy.schedule(ctx)
        allocs = ctx.decision().allocations
        running = {j: allocs[j.job_id] for j in jobs if j.job_id in allocs}
        for j, a in running.items():
            key = (j.job_id, a.gpu_types[0])
            time_on[key] = time_on.get(key, 0.0) + round_s
    return time_on


def test_policy_time_shares_follow_the_lp():
    # 3 identical 1-GPU jobs, 1 A100 + 1 V100: the LP gives each 1/3 of each type; over 30 rounds the
    # priority mechanism delivers those shares (each job ≈ 10 rounds on each type)
    kn = table_knowledge({("m", 8): {(A100, 1): 2.0, (V100, 1): 1.0}})
    jobs = [job(i) for i in range(3)]
    time_on = _rounds(get_policy("gavel"), kn, [(A100, 1), (V100, 1)], jobs, 30)
    for j in range(3):
        for t in (A100, V100):
            assert time_on.get((j, t), 0.0) / 300 == pytest.approx(10, abs=1)


def test_time_shares_survive_new_rates():
    """The service refreshes the rates whenever a measured speed moves: Gavel keeps the time each job received,
    so the shares still follow the LP (forgetting it made every job look starved every round: job 2 never ran)."""
    kn = table_knowledge({("m", 8): {(A100, 1): 2.0, (V100, 1): 1.0}})
    jobs = [job(i) for i in range(3)]
    time_on = _rounds(get_policy("gavel"), kn, [(A100, 1), (V100, 1)], jobs, 30, remeasured=True)
    for j in range(3):
        for t in (A100, V100):
            assert time_on.get((j, t), 0.0) / 300 == pytest.approx(10, abs=1)


def test_policy_places_jobs_on_their_best_relative_type_and_keeps_them():
    # job a is 1.5x faster on A100, job b 3x: b gets the A100, a the V100, and both stay put next round
    kn = table_knowledge(
        {("a", 8): {(A100, 1): 3.0, (V100, 1): 2.0}, ("b", 8): {(A100, 1): 3.0, (V100, 1): 1.0}}
    )
    p = get_policy("gavel")
    ja, jb = job(1, "a"), job(2, "b")
    ctx = make_context([(A100, 1), (V100, 1)], kn, pending=[ja, jb])
    p.schedule(ctx)
    allocs = ctx.decision().allocations
    assert allocs[1].gpus == ((V100, 1),) and allocs[2].gpus == ((A100, 1),)
    ctx = make_context([(A100, 1), (V100, 1)], kn, running={ja: allocs[1], jb: allocs[2]}, now_s=300.0)
    p.schedule(ctx)
    assert ctx.decision().allocations == allocs
    assert p.lp_solves == 1  # the same jobs: no new LP


def test_policy_never_changes_gpu_count():
    kn = table_knowledge({("m", 8): {(A100, 2): 4.0, (A100, 4): 7.0, (V100, 2): 2.0}})
    ctx = make_context([(A100, 4), (V100, 4)], kn, pending=[job(1, gpus=2)])
    get_policy("gavel").schedule(ctx)
    assert ctx.decision().allocations[1].gpus == ((A100, 2),)


def test_dp_profile_is_dp_only_data_with_a_stand_in_only_for_jobs_dp_cannot_hold_anywhere():
    from tessera.hardware import get_gpu
    from tessera.scheduler.policies.gavel import DPProfile

    # DP-only fits from 4 A100s; other plans fit 2 A100 or 2 V100, but the baseline does not know them
    true = {(A100, 2): 3.0, (A100, 4): 5.0, (V100, 2): 1.0}
    kn = table_knowledge({("m", 8): true, ("big", 8): true}, dp={("m", 8): {(A100, 4): 4.0}, ("big", 8): {}})
    prof = DPProfile(kn.view())
    j, big = job(1), job(2, "big")
    assert prof.has_dp(j) and not prof.has_dp(big)
    assert prof.rate(j, A100, 4) == 4.0
    assert prof.rate(j, A100, 2) == 0.0 and prof.rate(j, V100, 2) == 0.0  # DP-only needs 4 GPUs
    # no DP-only data anywhere: linear in GPUs × peak FLOP/s wherever the memory fits
    ratio = get_gpu(V100).peak_flops("fp16") / get_gpu(A100).peak_flops("fp16")
    assert prof.rate(big, A100, 2) == pytest.approx(2.0)
    assert prof.rate(big, V100, 2) == pytest.approx(2.0 * ratio)
    assert prof.rate(big, V100, 1) == 0.0  # does not fit at all


def test_a_job_dp_only_cannot_hold_at_its_scale_still_runs():
    # DP-only needs 4 GPUs, the job asked for 2 (another plan fits 2): Gavel keeps its count, so it falls back
    # to the stand-in rather than leaving the job queued forever
    kn = table_knowledge({("m", 8): {(A100, 2): 3.0, (V100, 2): 1.0}}, dp={("m", 8): {(A100, 4): 4.0}})
    ctx = make_context([(A100, 4), (V100, 4)], kn, pending=[job(1, gpus=2)])
    get_policy("gavel").schedule(ctx)
    assert ctx.decision().allocations[1].gpus == ((A100, 2),)


def test_a_time_share_preemption_says_so_with_the_shares():
    # two identical jobs, one A100: Gavel gives each half of the time; the one that ran yields next round
    kn = table_knowledge({("m", 8): {(A100, 1): 1.0}})
    p = get_policy("gavel")
    j1, j2 = job(1), job(2)
    ctx = make_context([(A100, 1)], kn, pending=[j1, j2])
    p.schedule(ctx)
    first = ctx.decision()
    (ran,) = first.allocations
    assert (
        first.reasons[ran]
        == f"start: 1×{A100}, Gavel round (§5): time share {A100} 0.50, received 0.00 of its time so far"
    )
    other = ({1, 2} - {ran}).pop()
    ctx = make_context([(A100, 1)], kn, pending=[(j1, j2)[other - 1]], running={(j1, j2)[ran - 1]: first.allocations[ran]},
                       now_s=300.0)  # fmt: skip
    p.schedule(ctx)
    second = ctx.decision()
    assert set(second.allocations) == {other}
    assert second.reasons[ran] == (
        f"preempted: Gavel round (§5): time share {A100} 0.50, received 1.00 of its time so far"
    ), second.reasons[ran]

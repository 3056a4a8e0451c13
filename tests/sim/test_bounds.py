"""Upper bounds on average throughput (metrics.throughput_bounds): hand-checked cases, and no policy beats them."""

from __future__ import annotations

import pytest

from tessera.scheduler import ClusterState, Job, get_policy, policy_names
from tessera.scheduler.knowledge import SyntheticModel, synthetic_table
from tessera.scheduler.testing import table_knowledge
from tessera.sim.metrics import compute_metrics, throughput_bounds
from tessera.sim.simulator import SimConfig, Simulator

A100, A10 = "A100-40GB", "A10"


def test_a_lone_job_is_bounded_by_its_fastest_allocation_after_the_first_round_and_start_up():
    # 1,000 normalized seconds of work (1 it/s on its one requested GPU); two GPUs run it 1.9x. Arriving at
    # 100 s, it can compute from the round boundary at 300 s + 30 s start-up. With a job at 0 s opening a 900 s
    # window it could do 1.9 × (900 − 330) = 1,083 > 1,000 → all of it (plus the other job's 1 s); alone it
    # opens the window itself, [100, 700): 1.9 × (700 − 330) = 703.
    table = table_knowledge({("m", 8): {(A100, 1): 1.0, (A100, 2): 1.9}})
    jobs = [Job(0, "m", 8, 100.0, 1000.0, 1, A100)]
    cfg = SimConfig(round_s=300, startup_s=30, window_s=900)
    b = throughput_bounds([Job(9, "m", 8, 0.0, 1.0, 1, A100), *jobs], table, cfg)
    assert b is not None and b["demand_bound_throughput"] == pytest.approx((1.0 + 1000.0) / 900)
    b = throughput_bounds(jobs, table, SimConfig(round_s=300, startup_s=30, window_s=600))
    assert b is not None and b["demand_bound_throughput"] == pytest.approx(1.9 * 370 / 600)


def test_the_capacity_bound_counts_the_gpu_time_the_cluster_has():
    # two one-GPU jobs of 1,000 s each on a one-GPU cluster over 1,230 s (from 0, start-up 30 s): each alone
    # could finish (demand bound 2,000 / 1,230), but one GPU gives 1,230 GPU-seconds at most
    table = table_knowledge({("m", 8): {(A100, 1): 1.0}}, capacity={A100: 1})
    jobs = [Job(i, "m", 8, 0.0, 1000.0, 1, A100) for i in range(2)]
    b = throughput_bounds(jobs, table, SimConfig(round_s=300, startup_s=30, window_s=1230))
    assert b is not None
    assert b["demand_bound_throughput"] == pytest.approx(2000 / 1230)
    assert b["capacity_bound_throughput"] == pytest.approx(1.0)


def test_no_bound_with_noisy_speeds():
    table = table_knowledge({("m", 8): {(A100, 1): 1.0}})
    assert throughput_bounds([Job(0, "m", 8, 0.0, 10.0, 1, A100)], table, SimConfig(noise_sigma=0.1)) is None


@pytest.mark.parametrize("policy", policy_names())
def test_no_policy_beats_the_bounds(policy):
    models = {
        ("s", 8): SyntheticModel(memory_gib=10, base_rate=2.0, scaling=0.9),
        ("l", 8): SyntheticModel(memory_gib=90, base_rate=0.5, scaling=0.8),
    }
    cs = ClusterState.of([(A100, 4), (A10, 2), (A10, 2)])
    table = synthetic_table(models, cs.capacity_by_type())
    jobs = []
    for i in range(24):
        model, gpu_type = ("s", A10) if i % 3 else ("l", A100)
        n = 1 if model == "s" else 4
        rate = table.true_of((model, 8), ((gpu_type, n),))
        jobs.append(Job(i, model, 8, 250.0 * i, (600.0 + 170 * i) * rate, n, gpu_type))
    cfg = SimConfig(round_s=300, window_s=3600)
    m = compute_metrics(Simulator(cs, jobs, table, get_policy(policy), cfg).run())
    b = throughput_bounds(jobs, table, cfg)
    assert b is not None
    assert (
        m["avg_throughput"]
        <= b["capacity_bound_throughput"] * (1 + 1e-9)
        <= b["demand_bound_throughput"] * (1 + 1e-9)
    )

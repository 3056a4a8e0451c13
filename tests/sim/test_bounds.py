"""Upper bounds on average throughput (metrics.throughput_bounds): hand-checked cases, and no policy beats them."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera.scheduler import ClusterState, Job, get_policy, policy_names
from tessera.scheduler.knowledge import SyntheticModel, synthetic_table
from tessera.scheduler.testing import table_knowledge
from tessera.sim.metrics import (
    _BoundInputs,
    _timed_capacity_bound,
    _undominated,
    capacity_bound_by_request,
    compute_metrics,
    throughput_bounds,
    throughput_by_request,
)
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
    # with a 60 s control tick a policy can start it at 120 s: 1.9 × (700 − 150) = 1,045 > 1,000 → all of it
    b = throughput_bounds(jobs, table, SimConfig(round_s=300, tick_s=60, startup_s=30, window_s=600))
    assert b is not None and b["demand_bound_throughput"] == pytest.approx(1000 / 600)


def test_the_capacity_bound_counts_the_gpu_time_the_cluster_has():
    # two one-GPU jobs of 1,000 s each on a one-GPU cluster over 1,230 s (from 0, start-up 30 s): each alone
    # could finish (demand bound 2,000 / 1,230), but one GPU gives 1,230 GPU-seconds at most — and, time-indexed
    # (41 intervals of 30 s), none of the first 30 s, when both jobs are still starting
    table = table_knowledge({("m", 8): {(A100, 1): 1.0}}, capacity={A100: 1})
    jobs = [Job(i, "m", 8, 0.0, 1000.0, 1, A100) for i in range(2)]
    b = throughput_bounds(jobs, table, SimConfig(round_s=300, startup_s=30, window_s=1230), intervals=41)
    assert b is not None
    assert b["demand_bound_throughput"] == pytest.approx(2000 / 1230)
    assert b["capacity_bound_untimed_throughput"] == pytest.approx(1.0)
    assert b["capacity_bound_throughput"] == pytest.approx(1200 / 1230)


def test_gpus_idle_before_the_jobs_arrive_are_not_counted_by_the_time_indexed_bound():
    # two GPUs over [0, 2,000 s); a 1-second job opens the window and four one-GPU jobs of 1,000 s arrive at
    # 1,000 s (a round boundary, no start-up). Untimed, the window's 4,000 GPU-seconds fit all 4,001 s of work
    # but one; time-indexed, the second half has 2,000 GPU-seconds for the four late jobs
    table = table_knowledge({("m", 8): {(A100, 1): 1.0}}, capacity={A100: 2})
    jobs = [Job(0, "m", 8, 0.0, 1.0, 1, A100)] + [
        Job(i, "m", 8, 1000.0, 1000.0, 1, A100) for i in range(1, 5)
    ]
    for intervals in (2, 20, 7):  # 7: the edge at 1,000 s falls inside an interval, which can only loosen it
        b = throughput_bounds(
            jobs, table, SimConfig(round_s=100, startup_s=0, window_s=2000), intervals=intervals
        )
        assert b is not None
        assert b["demand_bound_throughput"] == pytest.approx(4001 / 2000)
        assert b["capacity_bound_untimed_throughput"] == pytest.approx(4000 / 2000)
        if intervals == 7:
            assert 2001 / 2000 - 1e-9 <= b["capacity_bound_throughput"] <= 4000 / 2000
        else:
            assert b["capacity_bound_throughput"] == pytest.approx(2001 / 2000)


def test_a_job_computes_no_faster_than_its_fastest_allocation_in_each_interval():
    # one job alone with all the GPUs it could use: its bound is its fastest speed over the time it is there
    # (1.9 × (600 − 330) of 1,000 s of work), untimed and time-indexed alike
    table = table_knowledge({("m", 8): {(A100, 1): 1.0, (A100, 2): 1.9}}, capacity={A100: 4})
    jobs = [Job(9, "m", 8, 0.0, 1.0, 1, A100), Job(0, "m", 8, 100.0, 1000.0, 1, A100)]
    b = throughput_bounds(jobs, table, SimConfig(round_s=300, startup_s=30, window_s=600), intervals=5)
    assert b is not None
    want = (1.0 + 1.9 * 270) / 600
    assert b["capacity_bound_throughput"] == pytest.approx(want)
    assert b["capacity_bound_untimed_throughput"] == pytest.approx(want)


def test_the_capacity_bound_spends_the_gpu_time_on_the_cheapest_work_first():
    # two GPUs over [0, 1,000 s), both jobs computing from 0 s: a 1-GPU job does a unit of normalized work per
    # GPU-second on one GPU; a 2-GPU job half a unit on its two, 0.6 on one. So the bound gives the 1-GPU job one
    # GPU (1,000 units) and the 2-GPU job the other (0.6 × 1,000 = 600), not its request (500); the 1-GPU job on
    # both GPUs (1.5 units per 2 GPU-seconds) would leave the 2-GPU job none and do 1,500 in all
    table = table_knowledge(
        {("a", 8): {(A100, 1): 1.0, (A100, 2): 1.5}, ("b", 8): {(A100, 1): 0.6, (A100, 2): 1.0}},
        capacity={A100: 2},
    )
    jobs = [Job(0, "a", 8, 0.0, 2000.0, 1, A100), Job(1, "b", 8, 0.0, 2000.0, 2, A100)]
    cfg = SimConfig(round_s=100, startup_s=0, window_s=1000)
    split = capacity_bound_by_request(jobs, table, cfg, intervals=4)
    b = throughput_bounds(jobs, table, cfg, intervals=4)
    assert split is not None and b is not None
    assert sorted(split) == [1, 2]
    assert split[1].jobs == split[2].jobs == 1
    # alone, the 1-GPU job would run on both GPUs (1.5 × 1,000), the 2-GPU job on its request (1,000)
    assert split[1].demand_throughput == pytest.approx(1.5)
    assert split[2].demand_throughput == pytest.approx(1.0)
    assert split[1].capacity_throughput == pytest.approx(1.0)
    assert split[2].capacity_throughput == pytest.approx(0.6)
    assert b["capacity_bound_throughput"] == pytest.approx(1.6)


def test_no_bound_with_noisy_speeds():
    table = table_knowledge({("m", 8): {(A100, 1): 1.0}})
    assert throughput_bounds([Job(0, "m", 8, 0.0, 10.0, 1, A100)], table, SimConfig(noise_sigma=0.1)) is None


@pytest.mark.parametrize("tick_s", [None, 60.0])
@pytest.mark.parametrize("policy", policy_names())
def test_no_policy_beats_the_bounds(policy, tick_s):
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
    cfg = SimConfig(round_s=300, tick_s=tick_s, window_s=3600)
    m = compute_metrics(Simulator(cs, jobs, table, get_policy(policy), cfg).run())
    b = throughput_bounds(jobs, table, cfg)
    assert b is not None
    assert (
        m["avg_throughput"]
        <= b["capacity_bound_throughput"] * (1 + 1e-6)
        <= b["capacity_bound_untimed_throughput"] * (1 + 1e-6)
        <= b["demand_bound_throughput"] * (1 + 1e-6)
    )


TYPES = (A100, A10, "V100-32GB")
RANDOM_POLICIES = ("tessera", "sia", "gavel", "fcfs", "gandiva")


@st.composite
def small_cases(draw):
    """A cluster of 1-3 nodes of 1-4 GPUs of 1-2 types, and 2-10 jobs of two models arriving over an hour."""
    types = draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=2, unique=True))
    nodes = draw(
        st.lists(st.tuples(st.sampled_from(types), st.sampled_from((1, 2, 4))), min_size=1, max_size=3)
    )
    cs = ClusterState.of(nodes)
    models = {
        ("s", 8): SyntheticModel(memory_gib=10, base_rate=2.0, scaling=draw(st.floats(0.6, 1.0))),
        ("l", 8): SyntheticModel(memory_gib=30, base_rate=0.5, scaling=draw(st.floats(0.6, 1.0))),
    }
    table = synthetic_table(models, cs.capacity_by_type())
    n_jobs = draw(st.integers(2, 10))
    jobs = []
    for i in range(n_jobs):
        model = draw(st.sampled_from(("s", "l")))
        gpu_type = draw(st.sampled_from(sorted(cs.capacity_by_type())))
        n = draw(st.sampled_from([k for k in (1, 2, 4) if k <= cs.capacity_by_type()[gpu_type]]))
        rate = table.true_of((model, 8), ((gpu_type, n),))
        if rate <= 0:
            n, rate = 1, 1.0  # a request it does not fit: normalized by its best single-type speed instead
        arrival = 0.0 if i == 0 else draw(st.floats(0.0, 3600.0))
        run_s = draw(st.floats(60.0, 7200.0))
        jobs.append(Job(i, model, 8, arrival, run_s * rate, n, gpu_type))
    window_s = draw(st.sampled_from((1800.0, 3600.0, 7200.0)))
    intervals = draw(st.integers(1, 12))
    return cs, table, jobs, SimConfig(round_s=300, window_s=window_s, horizon_s=window_s + 600), intervals


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_cases())
def test_the_time_indexed_bound_is_below_the_untimed_one_and_above_every_policy(case):
    cs, table, jobs, cfg, intervals = case
    b = throughput_bounds(jobs, table, cfg, intervals=intervals)
    assert b is not None
    assert b["capacity_bound_throughput"] <= b["capacity_bound_untimed_throughput"] * (1 + 1e-9)
    assert b["capacity_bound_untimed_throughput"] <= b["demand_bound_throughput"] * (1 + 1e-6)
    for policy in RANDOM_POLICIES:
        m = compute_metrics(Simulator(cs, jobs, table, get_policy(policy), cfg).run())
        assert m["avg_throughput"] <= b["capacity_bound_throughput"] * (1 + 1e-6) + 1e-9, policy


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_cases())
def test_the_splits_by_request_add_up_to_the_bound_and_to_the_policy_throughput(case):
    cs, table, jobs, cfg, intervals = case
    b = throughput_bounds(jobs, table, cfg, intervals=intervals)
    split = capacity_bound_by_request(jobs, table, cfg, intervals=intervals)
    assert b is not None and split is not None
    assert sum(s.jobs for s in split.values()) == len(jobs)
    assert sum(s.demand_throughput for s in split.values()) == pytest.approx(b["demand_bound_throughput"])
    # the split is the master's schedule, within the bound's stopping gap (tol 1e-5) below it
    total = sum(s.capacity_throughput for s in split.values())
    assert total <= b["capacity_bound_throughput"] * (1 + 1e-9) + 1e-9
    assert total == pytest.approx(b["capacity_bound_throughput"], rel=1.1e-5, abs=1e-9)
    for s in split.values():
        assert s.capacity_throughput <= s.demand_throughput * (1 + 1e-6) + 1e-9
    # a run stopped at the window's end: its split by request is its average throughput over the window
    stopped = replace(cfg, horizon_s=cfg.window_s)
    for policy in ("tessera", "sia"):
        r = Simulator(cs, jobs, table, get_policy(policy), stopped).run()
        by_request = throughput_by_request(r)
        assert set(by_request) == set(split)
        assert sum(by_request.values()) == pytest.approx(
            compute_metrics(r)["avg_throughput"], rel=1e-6, abs=1e-9
        )


def test_a_job_that_finished_lends_no_time_to_another_of_its_key():
    # two GPUs over [0, 1,000 s), one interval, both jobs computing from 0 s: one key, run 0.75 on 1 GPU or 1.0
    # on 2 (the request); a 10 s job and a 2,000 s one (1,000 inside the window, only on 2 GPUs throughout).
    # The key-pooled LP let the long job compute on 1 GPU, GPU-thrifty, for the short job's time too: all
    # 1,010 of work fit 1,347 GPU-seconds and 2,000 s of the key's clock. With its own clock the long job needs
    # 2 GPUs to do 1,000 in 1,000 s: the short job's 13.3 GPU-seconds (10 at 0.75) cost the long one
    # τ1 = 13.3 s on 1 GPU (τ1 + 2 τ2 ≤ 2,000 − 13.3, τ1 + τ2 ≤ 1,000): 10 + 0.75 τ1 + τ2 = 1,006.7, which a
    # schedule reaches (both on 1 GPU for 13.3 s, then the long job on 2), so the per-job bound is exact here
    table = table_knowledge({("m", 8): {(A100, 1): 0.75, (A100, 2): 1.0}}, capacity={A100: 2})
    jobs = [Job(0, "m", 8, 0.0, 10.0, 2, A100), Job(1, "m", 8, 0.0, 2000.0, 2, A100)]
    cfg = SimConfig(round_s=100, startup_s=0, window_s=1000)
    inp = _BoundInputs.of(jobs, table, cfg, 64)
    assert inp is not None
    pooled, _ = _pooled_timed_capacity_bound(inp, table.capacity, 1)
    per_job, _ = _timed_capacity_bound(inp, table.capacity, 1)
    assert pooled == pytest.approx(1010.0)
    assert per_job == pytest.approx(10 + 0.75 * 40 / 3 + (1000 - 40 / 3), rel=1e-6)
    assert per_job < pooled


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_cases())
def test_the_per_job_bound_is_below_the_key_pooled_one_and_above_every_policy(case):
    cs, table, jobs, cfg, intervals = case
    inp = _BoundInputs.of(jobs, table, cfg, 64)
    assert inp is not None
    pooled, _ = _pooled_timed_capacity_bound(inp, table.capacity, intervals)
    # solved to a gap of 1e-9 (the default 1e-5 lets the figure sit up to that far above the LP's optimum)
    per_job, by_key = _timed_capacity_bound(inp, table.capacity, intervals, tol=1e-9)
    assert per_job <= pooled * (1 + 1e-6) + 1e-6
    # the master's schedule is feasible: its work is at most the bound, and within the stopping gap of it
    assert sum(by_key.values()) <= per_job * (1 + 1e-9) + 1e-9
    assert sum(by_key.values()) >= per_job * (1 - 1e-6) - 1e-9
    for policy in ("tessera", "sia", "gavel"):
        m = compute_metrics(Simulator(cs, jobs, table, get_policy(policy), cfg).run())
        assert m["avg_throughput"] * inp.window_s <= per_job * (1 + 1e-6) + 1e-6, policy


def _pooled_timed_capacity_bound(
    inp: _BoundInputs, capacity: dict[str, int], intervals: int
) -> tuple[float, dict[tuple, float]]:
    """The earlier, looser time-indexed LP of ``tessera.sim.metrics`` (kept to compare
    ``_timed_capacity_bound`` with: its per-job clocks make it never above this): most normalized work inside [edges[0], edges[-1]) when
    interval k = [edges[k], edges[k+1]) has its own GPU-time. Jobs of one (configuration, request) key whose
    earliest start e_j falls in one interval form a cohort i. With L_jk = |[max(e_j, edges[k]), edges[k+1])| the
    time job j can compute in interval k (0 before its interval; a partial first interval counts from e_j):

    * y[i, k] = cohort i's work in interval k, 0 ≤ y[i, k] ≤ Σ_{j∈i} min(w_j, s_j · L_jk); Σ_k y[i, k] ≤ Σ_{j∈i} u_j;
    * x[key, k, c] = the key's work on allocation c in interval k: Σ_c x[key, k, c] ≥ Σ_{i of key} y[i, k], and
      its compute time Σ_c x[key, k, c] ÷ s(c) ≤ Σ_{j of key} L_jk (a job holds one allocation at a time);
    * per GPU type t and interval k: Σ x[key, k, c] · n_t(c) ÷ s(c) ≤ capacity_t · |interval k|.

    Maximize Σ y. Any schedule (grid allocations, true speeds) gives a feasible point: set y and x to the work
    its jobs actually did in each interval on each allocation; a job computes only after e_j and at most at s_j,
    at most its work, and GPUs held without computing (start-up, restarts) only add to the GPU-time used. So the
    optimum bounds the work inside the window. Summing the per-interval rows gives the untimed LP's rows, so it
    is never above ``_capacity_bound``. Allocations another option dominates (no slower, no more GPU-time of
    any type per unit of work) are dropped: swapping to the dominating one keeps every row feasible.

    Returns the optimum and its work per key (``intervals`` equal intervals of the window)."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    speeds, key_of, start_s, work, s_max = inp.speeds, inp.key_of, inp.start_s, inp.work, inp.s_max
    edges = np.linspace(inp.t0_s, inp.t1_s, max(1, intervals) + 1)
    types = sorted(capacity)
    col = {t: k for k, t in enumerate(types)}
    n_types, n_int = len(types), len(edges) - 1
    length = np.diff(edges)
    t1 = edges[-1]
    keys = list(dict.fromkeys(key_of))
    kid = {k: i for i, k in enumerate(keys)}
    key_idx = np.array([kid[k] for k in key_of])
    # time each job can compute in each interval, and the most work it can do there
    lo = np.maximum(edges[:-1][None, :], start_s[:, None])
    L = np.clip(edges[1:][None, :] - lo, 0.0, None)  # jobs × intervals
    cap_work = np.minimum(work[:, None], s_max[:, None] * L)
    u = inp.inside_of
    live = (u > 0) & (start_s < t1)
    first = np.clip(np.searchsorted(edges, start_s, side="right") - 1, 0, n_int - 1)
    # cohorts: (key, interval of e_j)
    cohort_code = key_idx * n_int + first
    codes, cohort = np.unique(cohort_code[live], return_inverse=True)
    n_coh = len(codes)
    if n_coh == 0:
        return 0.0, {}
    coh_key, coh_first = codes // n_int, codes % n_int
    coh_u = np.bincount(cohort, weights=u[live], minlength=n_coh)
    coh_cap = np.zeros((n_coh, n_int))
    np.add.at(coh_cap, cohort, cap_work[live])
    key_time = np.zeros((len(keys), n_int))
    np.add.at(key_time, key_idx[live], L[live])

    rows, cols, vals = [], [], []
    ub_rows: list[float] = []

    def new_row(bound: float) -> int:
        ub_rows.append(bound)
        return len(ub_rows) - 1

    gpu_row = np.array([[new_row(capacity[t] * length[k]) for t in types] for k in range(n_int)]).reshape(
        n_int, n_types
    )
    n_var = 0
    upper: list[float] = []
    objective: list[float] = []
    # y variables, and each cohort's total-work row
    y_of: dict[tuple[int, int], int] = {}
    for i in range(n_coh):
        r = new_row(float(coh_u[i]))
        for k in range(int(coh_first[i]), n_int):
            if coh_cap[i, k] <= 0:
                continue
            y_of[(i, k)] = n_var
            rows.append(r), cols.append(n_var), vals.append(1.0)
            upper.append(float(coh_cap[i, k])), objective.append(-1.0)
            n_var += 1
    # x variables per (key, interval): work balance and compute-time rows, GPU-time per type
    coh_by_key: dict[int, list[int]] = {}
    for i in range(n_coh):
        coh_by_key.setdefault(int(coh_key[i]), []).append(i)
    for ki, cohorts in coh_by_key.items():
        opts = _undominated(speeds[keys[ki]], col, n_types)
        if not opts:
            continue
        k_from = min(int(coh_first[i]) for i in cohorts)
        for k in range(k_from, n_int):
            ys = [y_of[(i, k)] for i in cohorts if (i, k) in y_of]
            if not ys:
                continue
            balance, clock = new_row(0.0), new_row(float(key_time[ki, k]))
            for v in ys:
                rows.append(balance), cols.append(v), vals.append(1.0)
            for s, gpu in opts:
                rows += [balance, clock]
                cols += [n_var, n_var]
                vals += [-1.0, 1.0 / s]
                for t, g in enumerate(gpu):
                    if g > 0:
                        rows.append(int(gpu_row[k, t])), cols.append(n_var), vals.append(float(g))
                upper.append(math.inf), objective.append(0.0)
                n_var += 1
    A = coo_matrix((vals, (rows, cols)), shape=(len(ub_rows), n_var)).tocsr()
    res = linprog(
        np.array(objective), A_ub=A, b_ub=np.array(ub_rows), bounds=np.column_stack([np.zeros(n_var), upper]),
        method="highs",
    )  # fmt: skip
    if res.status != 0:
        raise RuntimeError(f"the time-indexed throughput bound's LP failed: {res.message}")
    by_key: dict[tuple, float] = {}
    for (i, _), v in y_of.items():
        key = keys[int(coh_key[i])]
        by_key[key] = by_key.get(key, 0.0) + float(res.x[v])
    return float(-res.fun), by_key

"""Simulator properties (hypothesis) over every registered policy, and hand-checkable behaviour."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera.scheduler import ClusterState, Job, get_policy, policy_names
from tessera.scheduler.knowledge import SyntheticModel, synthetic_table
from tessera.sim.metrics import compute_metrics
from tessera.sim.simulator import SimConfig, SimResult, Simulator

A100, A10 = "A100-40GB", "A10"
MODELS = {
    ("s", 8): SyntheticModel(memory_gib=10, base_rate=2.0, scaling=0.9),
    ("m", 8): SyntheticModel(memory_gib=40, base_rate=1.0, scaling=0.85),
    ("l", 8): SyntheticModel(memory_gib=90, base_rate=0.5, scaling=0.8),
}


def _setup(nodes, specs):
    cs = ClusterState.of(nodes)
    table = synthetic_table(MODELS, cs.capacity_by_type())
    jobs = []
    for i, (model, gtype, arrival, dur_s, want) in enumerate(specs):
        probe = Job(i, model, 8, arrival, 1.0)
        if table.min_gpus(probe, gtype) is None or not cs.capacity_by_type().get(gtype):
            gtype = A100
        n = max(want, table.min_gpus(probe, gtype) or 1)
        n = min(n, cs.capacity_by_type()[gtype])
        if not table.fits(probe, ((gtype, n),)):
            continue
        rate = table.true_of((model, 8), ((gtype, n),))
        jobs.append(Job(i, model, 8, arrival, dur_s * rate, n, gtype))
    return cs, table, jobs


def check_invariants(res: SimResult, cs: ClusterState, table, jobs: list[Job]) -> None:
    by_id = {j.job_id: j for j in jobs}
    held: dict[int, tuple] = {}
    used = defaultdict(int)
    segments: dict[int, list] = defaultdict(list)
    finishes: dict[int, int] = defaultdict(int)
    log = res.allocation_log
    for k, ev in enumerate(log):
        old = held.pop(ev.job_id, None)
        if old is not None:
            for i, n in old:
                used[i] -= n
        if segments[ev.job_id] and segments[ev.job_id][-1][3] is None:
            segments[ev.job_id][-1][3] = ev.time_s
        if ev.placement:
            held[ev.job_id] = ev.placement
            for i, n in ev.placement:
                used[i] += n
            # memory fit: some plan of the job fits these GPUs
            assert table.fits(by_id[ev.job_id], ev.gpus), (ev.job_id, ev.gpus)
            assert cs.gpus_of_placement(ev.placement) == ev.gpus
            segments[ev.job_id].append([ev.time_s, ev.paused_until_s, ev.rate_iters_per_s, None])
        if ev.kind == "finish":
            finishes[ev.job_id] += 1
        last_at_t = k + 1 == len(log) or log[k + 1].time_s > ev.time_s
        if last_at_t:  # capacity holds once every change of an instant is applied
            for i, n in used.items():
                assert 0 <= n <= cs.capacity[i], (ev.time_s, i, n)
    recs = {r.job_id: r for r in res.jobs}
    assert set(recs) == set(by_id)  # no job lost
    for jid, r in recs.items():
        assert r.status in ("finished", "dropped"), (jid, r.status)
        if r.status == "finished":
            assert finishes[jid] == 1  # finished exactly once
            work = sum(
                rate * max(0.0, end - max(start, paused)) for start, paused, rate, end in segments[jid]
            )
            assert work == pytest.approx(by_id[jid].total_iterations, rel=1e-6)
            assert r.finish_s >= r.arrival_s
        else:
            assert finishes[jid] == 0


job_specs = st.lists(
    st.tuples(
        st.sampled_from(["s", "m", "l"]),
        st.sampled_from([A100, A10]),
        st.floats(0, 4000),
        st.floats(60, 5000),
        st.sampled_from([1, 2, 4]),
    ),
    min_size=1,
    max_size=14,
)
clusters = st.lists(
    st.tuples(st.sampled_from([A100, A10]), st.sampled_from([1, 2, 4])), min_size=1, max_size=4
).map(lambda n: [(A100, 4), *n])


@pytest.mark.parametrize("policy", policy_names())
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=clusters, specs=job_specs, mtbf=st.sampled_from([None, 5000.0]))
def test_simulation_invariants(policy, nodes, specs, mtbf):
    cs, table, jobs = _setup(nodes, specs)
    if not jobs:
        return
    cfg = SimConfig(round_s=300, node_mtbf_s=mtbf, repair_s=600, record_allocations=True, noise_sigma=0.1)
    res = Simulator(cs, jobs, table, get_policy(policy), cfg).run()
    check_invariants(res, cs, table, jobs)


@pytest.mark.parametrize("policy", ["fcfs", "tessera"])
def test_same_seed_same_result(policy):
    specs = [("s", A100, 100.0 * i, 900.0 + 37 * i, 1 + i % 3) for i in range(20)]
    cs, table, jobs = _setup([(A100, 4), (A10, 2), (A10, 2)], specs)
    cfg = SimConfig(seed=7, noise_sigma=0.2, node_mtbf_s=3000.0, repair_s=600, record_allocations=True)
    a = Simulator(cs, jobs, table, get_policy(policy), cfg).run()
    b = Simulator(cs, jobs, table, get_policy(policy), cfg).run()
    strip = ("sim_wall_s", "decision_ms_p50", "decision_ms_p99")
    ma = {k: v for k, v in compute_metrics(a).items() if k not in strip}
    mb = {k: v for k, v in compute_metrics(b).items() if k not in strip}
    assert ma == mb and a.allocation_log == b.allocation_log
    c = Simulator(cs, jobs, table, get_policy(policy), SimConfig(seed=8, noise_sigma=0.2)).run()
    assert [r.finish_s for r in c.jobs] != [r.finish_s for r in a.jobs]


def test_fcfs_on_requested_gpus_runs_exactly_the_trace_duration():
    # one job alone: it starts at the first round boundary, pays start-up, then runs its trace duration
    cs, table, jobs = _setup([(A100, 4)], [("m", A100, 0.0, 3600.0, 2)])
    res = Simulator(cs, jobs, table, get_policy("fcfs"), SimConfig(startup_s=30)).run()
    r = res.jobs[0]
    assert r.first_start_s == 0.0 and r.finish_s == pytest.approx(30 + 3600.0)
    m = compute_metrics(res)
    assert m["avg_jct_s"] == pytest.approx(3630.0) and m["restarts_per_job"] == 0


def test_throughput_is_normalized_to_the_request():
    cs, table, jobs = _setup([(A100, 4)], [("m", A100, 0.0, 36000.0, 2)])
    res = Simulator(cs, jobs, table, get_policy("fcfs"), SimConfig(startup_s=0)).run()
    m = compute_metrics(res)
    assert m["peak_throughput"] == pytest.approx(1.0)
    assert m["utilization"][A100] == pytest.approx(0.5)


def test_restart_cost_grows_with_model_size():
    from tessera.scheduler.testing import job

    cs = ClusterState.of([(A100, 4)])
    table = synthetic_table(MODELS, cs.capacity_by_type())
    sim = Simulator(
        cs, [job(0)], table, get_policy("fcfs"), SimConfig(startup_s=30, checkpoint_bandwidth_Bps=1e9)
    )
    small = sim.restart_s(Job(0, "bert-0.76b", 8, 0, 1))
    big = sim.restart_s(Job(0, "moe-27b", 8, 0, 1))
    assert 30 < small < big and big == pytest.approx(30 + 2 * 16 * 27e9 / 1e9, rel=0.05)
    assert sim.restart_s(Job(0, "unknown-model", 8, 0, 1)) == 30


def test_simulator_runs_on_the_shared_speed_source(tmp_path, monkeypatch):
    """Wiring: the simulator's truth is the speed source's tuned plans (``cell_table``), the same figures the
    live service prices with; jobs of non-default configurations (fp32, sequence length, GPU limits) run
    within their limits."""
    from tessera.hardware import get_cluster
    from tessera.scheduler import JobConfig
    from tessera.scheduler.speed import cell_table

    monkeypatch.setenv("TESSERA_HOME", str(tmp_path))
    local = get_cluster("local")
    cfgs = [
        JobConfig("gpt-tiny", 8, seq_len=64, precision="fp32"),
        JobConfig("gpt-tiny", 8, seq_len=64, precision="fp32", max_gpus=1, exclude_gpu_types=(A100,)),
    ]
    table = cell_table(local, cfgs, max_gpus=4, workers=1)
    jobs = [
        Job(
            i,
            "gpt-tiny",
            8,
            10.0 * i,
            2000.0,
            config=cfgs[i % 2],
            requested_gpus=1,
            requested_type="V100-32GB",
        )
        for i in range(4)
    ]
    res = Simulator(local, jobs, table, get_policy("tessera"), SimConfig(record_allocations=True)).run()
    assert all(r.status == "finished" for r in res.jobs)
    for ev in res.allocation_log:
        if ev.job_id % 2 and ev.gpus:  # the limited configuration: one V100 at most
            assert ev.gpus == (("V100-32GB", 1),)
        if ev.gpus:
            assert ev.rate_iters_per_s == table.true_rate(jobs[ev.job_id], ev.gpus) > 0


def test_slowdown_and_longest_wait():
    # two jobs each asking for all 4 GPUs, arriving together: the second waits the first's whole run
    cs, table, jobs = _setup([(A100, 4)], [("m", A100, 0.0, 3600.0, 4), ("m", A100, 0.0, 3600.0, 4)])
    res = Simulator(cs, jobs, table, get_policy("fcfs"), SimConfig(startup_s=0)).run()
    assert [r.alone_s for r in res.jobs] == pytest.approx([3600.0, 3600.0])
    m = compute_metrics(res)
    assert m["max_slowdown"] == pytest.approx(2.0)  # the second: 7,200 s for 3,600 s of work
    assert 1.0 < m["p99_slowdown"] <= 2.0
    assert m["max_wait_s"] == pytest.approx(3600.0)


@pytest.mark.parametrize("policy", policy_names())
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=clusters, specs=job_specs)
def test_simulation_invariants_with_control_ticks(policy, nodes, specs):
    cs, table, jobs = _setup(nodes, specs)
    if not jobs:
        return
    cfg = SimConfig(round_s=300, tick_s=60, record_allocations=True, noise_sigma=0.1)
    res = Simulator(cs, jobs, table, get_policy(policy), cfg).run()
    check_invariants(res, cs, table, jobs)


def test_control_ticks_decide_arrivals_and_completions_between_rounds():
    # two 2-GPU jobs want the same 2 GPUs: the second arrives mid-round and waits for the first to finish
    cs, table, jobs = _setup([(A100, 2)], [("m", A100, 0.0, 1000.0, 2), ("m", A100, 100.0, 1000.0, 2)])

    def starts(cfg: SimConfig) -> list[float | None]:
        res = Simulator(cs, jobs, table, get_policy("fcfs"), cfg).run()
        return [r.first_start_s for r in sorted(res.jobs, key=lambda r: r.job_id)]

    # rounds only: the first finishes at 1,030 s and the second starts at the round after, 1,200 s
    assert starts(SimConfig(startup_s=30)) == [0.0, 1200.0]
    # with a 60 s tick it starts at the first tick after the completion, 1,080 s
    assert starts(SimConfig(startup_s=30, tick_s=60)) == [0.0, 1080.0]
    # and an arrival on a free cluster starts at the next tick, not the next round
    cs1, table1, alone = _setup([(A100, 2)], [("m", A100, 100.0, 1000.0, 2)])
    res = Simulator(cs1, alone, table1, get_policy("fcfs"), SimConfig(tick_s=60)).run()
    assert res.jobs[0].first_start_s == 120.0


def test_a_tick_must_fit_in_a_round():
    with pytest.raises(ValueError, match="tick_s"):
        SimConfig(round_s=300, tick_s=600)
    with pytest.raises(ValueError, match="tick_s"):
        SimConfig(tick_s=0)

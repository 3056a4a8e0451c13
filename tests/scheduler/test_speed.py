"""The one speed source: configuration keys, the disk cache, infeasibility, and the simulator and the
service pricing and deciding identically on the same jobs and cluster."""

from __future__ import annotations

import pickle

import pytest

from tessera.hardware import get_cluster
from tessera.jobs import parse_job
from tessera.scheduler import Job, JobConfig, get_policy
from tessera.scheduler.speed import SpeedSource, cell_table, config_of, job_of
from tessera.scheduler.state import default_config
from tessera.service.scheduling import JobInput, LiveCluster, SchedulingAdapter
from tessera.sim.simulator import SimConfig, Simulator

LOCAL = get_cluster("local")
TINY = {"model": "gpt-tiny", "seq_len": 64, "precision": "fp32"}


def spec(name: str, **kw):
    return parse_job({"name": name, "steps": 400, "global_batch": 8, **TINY, **kw})


def test_job_config_is_a_real_key():
    j = Job(1, "gpt-tiny", 8, 0.0, 10.0)
    assert j.config == JobConfig("gpt-tiny", 8) and j.config is default_config("gpt-tiny", 8)
    assert hash(j.config) == hash(JobConfig("gpt-tiny", 8))
    assert j.config.slug() == "gpt-tiny-b8"
    full = config_of(spec("x", exclude_gpu_types=["A100-40GB"], max_gpus=2))
    assert full != JobConfig("gpt-tiny", 8) and full.exclude_gpu_types == ("A100-40GB",)
    assert full.slug().startswith("gpt-tiny-b8-") and "/" not in JobConfig("/a/b/config.json", 4).slug()
    again = pickle.loads(pickle.dumps(full))
    assert again == full and hash(again) == hash(full)
    assert sorted([JobConfig("b", 2), full, JobConfig("a", 4, seq_len=3), JobConfig("a", 4)])[0] == JobConfig(
        "a", 4
    )
    with pytest.raises(ValueError, match="global_batch"):
        Job(2, "gpt-tiny", 16, 0.0, 1.0, config=full)


def test_baselines_see_dp_only_data_not_cells():
    """Crius §8.1: the DP-only figure is its own (pure data parallelism), not the one-stage Cell estimate."""
    src = SpeedSource(LOCAL)
    # (at batch 4 and 8 both are plain DP on two A100s: NVLink one way is 300 GB/s, and since the estimate prices
    # the gradient all-reduce overlapped with the last backward as the runtime runs it, batch 4's Cell no longer
    # tensor-shards; at batch 2, one sample per replica, TP2 is still ~9 % faster than DP)
    big = JobConfig("gpt-1.3b", 2)
    dp2, cell2 = src.dp(big, "A100-40GB", 2), src.cell(big, (("A100-40GB", 2),), 1)
    assert 0 < dp2 < cell2  # the one-stage Cell may tensor-shard; DP-only may not
    assert src.dp(big, "A100-40GB", 16) == 0.0  # more GPUs than the local cluster's two: nothing to price
    tiny = JobConfig("gpt-tiny", 8, seq_len=64, precision="fp32")
    dp, cell = src.dp(tiny, "A100-40GB", 2), src.cell(tiny, (("A100-40GB", 2),), 1)
    assert 0 < dp <= cell * 1.0000001  # the Cell's best layout is at least as fast as DP-only


def test_constraints_of_the_configuration_are_honoured():
    src = SpeedSource(LOCAL)
    c = config_of(spec("c", exclude_gpu_types=["A100-40GB"], max_gpus=1))
    assert src.true(c, (("A100-40GB", 1),)) == 0.0 and src.dp(c, "A100-40GB", 1) == 0.0
    assert src.true(c, (("V100-32GB", 2),)) == 0.0  # over max_gpus
    assert src.true(c, (("V100-32GB", 1),)) > 0


def test_cell_table_cache_round_trips(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_HOME", str(tmp_path))
    configs = [JobConfig("gpt-tiny", 8), config_of(spec("s", max_gpus=2))]
    first = cell_table(LOCAL, configs, max_gpus=4, workers=1)
    files = sorted(p.name for p in tmp_path.rglob("*.json"))
    assert files == sorted(f"{c.slug()}.json" for c in configs)
    second = cell_table(LOCAL, configs, max_gpus=4, workers=1)  # loaded from disk, nothing recomputed
    for c in configs:
        assert second.export(c) == first.export(c) and first.export(c)["true"]
    assert second.true_of(configs[1], (("A100-40GB", 2),)) > 0


def test_infeasible_says_why_and_is_cached():
    a = SchedulingAdapter(LiveCluster.from_spec(LOCAL))
    assert a.infeasible(spec("ok")) is None
    huge = parse_job({"name": "huge", "model": "llama2-70b", "global_batch": 8, "steps": 5})
    assert a.infeasible(huge).startswith("Infeasible: no plan fits in memory")
    slow = spec("slow", steps=10**13)
    why = a.infeasible(slow)
    assert why.startswith("Infeasible") and "365 days" in why
    enormous = spec("enormous", global_batch=10**15)
    assert a.infeasible(enormous).startswith("Infeasible")
    assert a.infeasible(slow) is why  # cached per (configuration, steps)


def _allocs(core) -> dict:
    return {
        j: (s.allocation.placement, s.allocation.gpus, s.allocation.n_stages) for j, s in core.running.items()
    }


def test_simulator_and_service_price_and_decide_identically():
    """The same jobs and cluster through the simulator's path (cell_table → PerfTable, the Simulator's core)
    and the service adapter's path: identical DP-only, Cell and true rates, identical decisions over rounds."""
    specs = {
        1: spec("a", steps=300),
        2: spec("b", steps=3000, global_batch=16),
        3: spec("c", steps=3000, max_gpus=1),
        4: spec("d", steps=3000, exclude_gpu_types=["V100-32GB"]),
    }
    configs = sorted({config_of(s) for s in specs.values()})
    table = cell_table(LOCAL, configs, max_gpus=4, workers=1, use_cache=False)
    jobs = {j: job_of(s, j, float(j)) for j, s in specs.items()}
    sim = Simulator(LOCAL, list(jobs.values()), table, get_policy("tessera"), SimConfig(round_s=60.0))
    adapter = SchedulingAdapter(
        LiveCluster.from_spec(LOCAL), round_s=60.0, restart_cost_s=sim.restart_s(jobs[1])
    )
    assert {sim.restart_s(j) for j in jobs.values()} == {adapter.restart_cost_s}

    # rates: every figure of every configuration on the table's grid
    for c in configs:
        for g in table.grid(c, max_gpus=4):
            assert adapter.knowledge.true_of(c, g) == table.true_of(c, g), (c, g)
            assert adapter.knowledge.cell_of(c, g) == table.cell_of(c, g), (c, g)
            if len(g) == 1:
                assert adapter.knowledge.dp_of(c, *g[0]) == table.dp_of(c, *g[0]), (c, g)
    assert table.true_of(configs[0], (("A100-40GB", 2),)) > 0

    def both_round(now: float, inputs: list[JobInput], *, done: dict[int, float]) -> list[str]:
        for j in inputs:
            if j.terminal and j.id in sim.sched.running:
                sim.sched.complete(j.id, now)
            elif not j.terminal and j.id not in sim.sched.jobs:
                sim.sched.submit(jobs[j.id], j.submitted_at)
        for jid, js in sim.sched.jobs.items():  # what the service's sync does with the store's progress
            if jid in sim.sched.running or jid in sim.sched.pending:
                js.done_iterations, js.as_of_s = done.get(jid, 0.0), now
        adapter.sync(inputs, now)
        r_sim = sim.sched.tick(now)
        r_live = adapter.round(now)
        assert r_sim.decided == r_live.decided
        assert _allocs(sim.sched) == _allocs(adapter.core)
        for jid, (_, gpus, stages) in _allocs(sim.sched).items():
            a = adapter.assignment(jid)
            assert tuple(sorted(a.gpus.items())) == gpus
            if stages is not None:
                assert a.plan.n_stages == stages
        assert sorted(c.job_id for c in r_sim.changes) == sorted(c.job_id for c in r_live.changes)
        return [f"{c.job_id}:{c.kind}" for c in r_live.changes]

    t = 10.0
    first = both_round(t, [JobInput(j, specs[j], float(j)) for j in (1, 2, 3)], done={})
    assert _allocs(adapter.core)  # something started
    held = {j: adapter.assignment(j) for j in (1, 2, 3)}
    t = 70.0
    inputs = [
        JobInput(j, specs[j], float(j), terminal=(j == 1), assignment=held[j], steps_done=100)
        for j in (1, 2, 3)
    ]
    second = both_round(t, inputs, done={2: 100.0, 3: 100.0})
    t = 130.0
    held = {j: adapter.assignment(j) for j in (2, 3)}
    inputs = [JobInput(j, specs[j], float(j), assignment=held[j], steps_done=200) for j in (2, 3)]
    inputs.append(JobInput(4, specs[4], 120.0))
    third = both_round(t, inputs, done={2: 200.0, 3: 200.0})
    assert first and (second or third)  # the rounds moved jobs, in both paths alike

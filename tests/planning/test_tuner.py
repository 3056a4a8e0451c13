"""Cell-guided vs exhaustive tuning, feasibility of tuned plans, resource plans and the job planner."""

from __future__ import annotations

import pytest

from tessera.hardware import get_cluster, get_gpu
from tessera.jobs import parse_job
from tessera.models.zoo import get_spec
from tessera.perf.estimate import estimate_plan
from tessera.plan import Plan
from tessera.planning.cells import CellEstimator, CellShape
from tessera.planning.planner import parse_gpus, plan_job
from tessera.planning.resources import resource_plans
from tessera.planning.space import TrainSettings, micro_batch_options
from tessera.planning.tuner import favoured_half, tune


@pytest.fixture(scope="module")
def est():
    spec = get_spec("gpt3-2.7b")
    settings = TrainSettings(model=spec.name, global_batch=128, seq_len=spec.seq_len, precision="bf16")
    return CellEstimator(spec, settings, get_cluster("crius-sim-1280"))


def test_favoured_half_prunes_to_one_side_of_half_hybrid():
    spec = get_spec("gpt3-350m")
    settings = TrainSettings(model=spec.name, global_batch=128, seq_len=spec.seq_len, precision="bf16")
    est = CellEstimator(spec, settings, get_cluster("crius-sim-1280"))
    space = est.space(CellShape.of({"A100-40GB": 16}, 1), est.rungs[0])
    tps = [st.tp_degree for st in space.options[0]]
    assert tps == [1, 2, 4, 8, 16]
    assert [tps[j] for j in favoured_half(space, 0, "dp")] == [1, 2, 4]
    assert [tps[j] for j in favoured_half(space, 0, "tp")] == [4, 8, 16]
    space8 = est.space(CellShape.of({"A100-40GB": 8}, 1), est.rungs[0])  # √8 between 2 and 4: both in both
    assert [space8.options[0][j].tp_degree for j in favoured_half(space8, 0, "dp")] == [1, 2, 4]


def test_favoured_half_widens_when_nothing_in_it_fits(est):
    """GPT-3 2.7B, 128 samples on 16 A100-40GB in one stage: no DP-leaning layout fits at the first rung,
    so the stage searches its whole range rather than return nothing that fits."""
    space = est.space(CellShape.of({"A100-40GB": 16}, 1), est.rungs[0])
    assert not any(space.stage_cost(0, j).feasible for j in range(3))
    assert favoured_half(space, 0, "dp") == list(range(5))
    assert micro_batch_options(4, 128) == [4, 8, 16, 32, 128]


@pytest.mark.parametrize("gpus,stages", [({"A100-40GB": 16}, 2), ({"A100-40GB": 8, "V100-32GB": 8}, 4)])
def test_the_cell_space_check_agrees_with_building_the_plan(est, gpus, stages):
    """The tuner keeps the Cell's own options only in the space whose plan of them is the Cell's plan: read off
    the space's fields, it must say so in exactly the spaces where building that plan gives the Cell's."""
    shape = CellShape.of(gpus, stages)
    cell = est.estimate(shape)
    seen = set()
    for rung in est.rungs:
        for count in micro_batch_options(stages, est.settings.global_batch):
            space = est.space(shape, rung, count)
            picks = [
                next(j for j, st in enumerate(o) if st == cell.plan.stages[s])
                for s, o in enumerate(space.options)
            ]
            same = space.plan(tuple(picks)) == cell.plan
            assert space.holds_settings_of(cell.plan) == same
            seen.add(same)
    assert seen == {True, False}


@pytest.mark.parametrize(
    "gpus,stages",
    [({"A100-40GB": 16}, 2), ({"A40": 16}, 4), ({"A10": 16}, 8), ({"A100-40GB": 8, "V100-32GB": 8}, 4)],
)
def test_guided_tuner_is_cheaper_and_close_to_exhaustive(est, gpus, stages):
    shape = CellShape.of(gpus, stages)
    g = tune(est, shape, guided=True)
    x = tune(est, shape, guided=False)
    assert g.evaluations < x.evaluations
    assert x.iteration_time_s <= g.iteration_time_s + 1e-12  # exhaustive is the optimum of the space
    assert g.iteration_time_s <= 1.05 * x.iteration_time_s
    assert g.iteration_time_s <= g.cell.iteration_time_s + 1e-12  # tuning never loses to the Cell's sample
    for r in (g, x):
        assert r.estimate.feasible
        again = estimate_plan(Plan.from_json(r.plan.to_json()), est.spec, est.cluster)
        assert again.iteration_time_s == pytest.approx(r.iteration_time_s, rel=1e-9)


def test_tuner_never_returns_an_infeasible_plan_when_one_fits():
    """GPT-3 6.7B on 8 A10s: most layouts overflow 24 GB; the tuned plan fits and every device fits."""
    spec = get_spec("gpt3-6.7b")
    settings = TrainSettings(model=spec.name, global_batch=32, seq_len=spec.seq_len, precision="bf16")
    est = CellEstimator(spec, settings, get_cluster("crius-sim-1280"))
    for S in (1, 2, 4):
        r = tune(est, CellShape.of({"A10": 8}, S), guided=True)
        assert r is not None and r.estimate.feasible
        assert all(b <= get_gpu("A10").memory_bytes for b in r.estimate.device_bytes_per_device)


def test_resource_plans_are_feasible_and_ranked(est):
    plans = resource_plans(est, {"A100-40GB": 8, "V100-32GB": 8}, max_gpus=8)
    assert plans and all(p.max_device_bytes < 40e9 for p in plans)
    times = [p.iteration_time_s for p in plans]
    assert times == sorted(times)
    assert {p.gpu_type for p in plans} == {"A100-40GB", "V100-32GB"}
    assert all(p.dp * p.tp * p.pp == p.n_gpus for p in plans)
    priced = resource_plans(est, {"A100-40GB": 8, "V100-32GB": 8}, max_gpus=8,
                            prices_per_gpu_hour={"A100-40GB": 4.0, "V100-32GB": 1.0}, steps=1000)  # fmt: skip
    costs = [p.job_cost for p in priced]
    assert None not in costs and costs == sorted(costs)


def test_parse_gpus_names_the_bad_item():
    assert parse_gpus("4xA100-40GB, 2x v100-32gb") == {"A100-40GB": 4, "V100-32GB": 2}
    with pytest.raises(ValueError, match="--gpus: 'A100' is not COUNTxTYPE"):
        parse_gpus("A100")
    with pytest.raises(ValueError, match="--gpus"):
        parse_gpus("4xA1OO")


def test_plan_job_on_the_local_cluster_returns_a_runnable_plan():
    job = parse_job({"model": "gpt-tiny", "global_batch": 8, "seq_len": 64, "steps": 2, "precision": "fp32"})
    result = plan_job(job, "local")
    assert result.cells and result.chosen is not None
    assert result.chosen.estimate.feasible
    plan = result.chosen.plan
    assert plan.global_batch == 8 and plan.model == "gpt-tiny"
    assert Plan.from_json(plan.to_json()) == plan
    only_v100 = plan_job(job, "local", "2xV100-32GB")
    assert {d.gpu_type for c in only_v100.cells for d in c.plan.devices} == {"V100-32GB"}
    with pytest.raises(ValueError, match="--gpus: cluster local has 2 A100-40GB, asked for 8"):
        plan_job(job, "local", "8xA100-40GB")

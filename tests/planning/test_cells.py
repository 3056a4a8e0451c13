"""Cells: 2^S assembly against brute-force estimate_plan, favours, caching, mixed types and job shapes."""

from __future__ import annotations

import itertools

import pytest

from tessera.hardware import get_cluster
from tessera.models.zoo import get_spec
from tessera.perf.estimate import estimate_plan
from tessera.planning.cells import CellEstimator, CellShape, job_shapes, stage_counts
from tessera.planning.partition import partition_by_speed
from tessera.planning.space import Rung, TrainSettings, factorizations


@pytest.fixture(scope="module")
def gpt():
    return get_spec("gpt3-1.3b")


@pytest.fixture(scope="module")
def est(gpt):
    settings = TrainSettings(model=gpt.name, global_batch=64, seq_len=gpt.seq_len, precision="bf16")
    return CellEstimator(gpt, settings, get_cluster("crius-sim-1280"))


def test_factorizations_run_from_dp_only_to_tp_only():
    assert factorizations(8) == ((8, 1), (4, 2), (2, 4), (1, 8))
    assert factorizations(6) == ((6, 1), (3, 2))
    assert stage_counts(8, 26, 64) == [1, 2, 4, 8]
    assert stage_counts(8, 3, 64) == [1, 2]


def test_assembly_equals_brute_force_over_all_2_to_the_s_plans(gpt, est):
    """Every combination of DP-only/TP-only per stage, priced from scratch by estimate_plan: the assembly's
    best is the brute-force best, and its figures are estimate_plan's to the last bit."""
    shape = CellShape.of({"A100-40GB": 8}, 4)
    space = est.space(shape, Rung())
    pure = [[0, len(o) - 1] for o in space.options]
    choice = space.assemble(pure)
    brute = {}
    for combo in itertools.product(*pure):
        e = estimate_plan(space.plan(combo), gpt, est.cluster)
        brute[combo] = (not e.feasible, e.iteration_time_s)
    assert len(brute) == 2**4 == choice.evaluations
    assert choice.options == min(brute, key=brute.get)
    assert choice.iteration_time_s == pytest.approx(brute[choice.options][1], rel=1e-12)
    assert space.estimate(choice.options) == estimate_plan(space.plan(choice.options), gpt, est.cluster)


def test_assembly_keeps_the_best_feasible_not_the_fastest(gpt):
    """A model too big for DP-only on 24 GB A10s: the fastest combination overflows, the assembly returns the
    best one whose every device fits."""
    spec = get_spec("gpt3-6.7b")
    settings = TrainSettings(model=spec.name, global_batch=16, seq_len=spec.seq_len, precision="bf16")
    est = CellEstimator(spec, settings, get_cluster("crius-sim-1280"), recompute="none")
    space = est.space(CellShape.of({"A10": 16}, 2), Rung("none", 0))
    choice = space.assemble()
    assert choice.feasible
    assert choice.unconstrained_s < choice.iteration_time_s  # the unconstrained best does not fit
    for combo in itertools.product(*[range(len(o)) for o in space.options]):
        e = space.estimate(combo)
        if e.feasible:
            assert e.iteration_time_s >= choice.iteration_time_s - 1e-12


def test_cell_reports_favours_and_is_cached(est):
    shape = CellShape.of({"A100-40GB": 8}, 2)
    cell = est.estimate(shape)
    assert cell is not None and cell.feasible
    assert len(cell.favour) == 2 and set(cell.favour) <= {"dp", "tp"}
    for st, fav in zip(cell.plan.stages, cell.favour, strict=True):
        assert (st.tp_degree == 1) == (fav == "dp") and st.dp_degree * st.tp_degree == 4
    assert est.estimate(shape) is cell  # cached: the scheduler may ask again at no cost
    assert cell.iteration_time_s == pytest.approx(
        estimate_plan(cell.plan, est.spec, est.cluster).iteration_time_s
    )


def test_more_gpus_make_a_cell_faster_within_a_node(est):
    """crius-sim-1280's A100 nodes hold 4 GPUs: up to 4, more GPUs are faster; the 8-GPU Cell pays a gradient
    sync over 100 Gb/s InfiniBand that the runtime does not overlap with the backward."""
    cells = {n: est.estimate(CellShape.of({"A100-40GB": n}, 1)) for n in (1, 2, 4, 8)}
    t = [cells[n].iteration_time_s for n in (1, 2, 4)]
    assert t[0] > t[1] > t[2]
    # (the 4-GPU Cell's ZeRO-1 reduce-scatter and all-gather stay on NVLink)
    assert cells[8].estimate.comm_s > 4 * cells[4].estimate.comm_s


def test_mixed_cell_puts_big_memory_first_and_more_layers_on_fast_gpus(est, gpt):
    cell = est.estimate(CellShape.of({"A100-40GB": 4, "A10": 4}, 2))
    first, second = cell.plan.stages
    assert {d.gpu_type for d in first.devices} == {"A100-40GB"}  # 40 GB before 24 GB
    assert {d.gpu_type for d in second.devices} == {"A10"}
    assert first.n_layers > second.n_layers  # A100 (312 TFLOP/s) takes more layers than A10 (125)


def test_mixed_single_stage_balances_batch_shares_to_speed(est):
    cell = est.estimate(CellShape.of({"A100-40GB": 2, "V100-32GB": 2}, 1))
    st = cell.plan.stages[0]
    if st.tp_degree == 1:
        shares = dict(zip([d.gpu_type for d in st.devices], st.shares(64), strict=True))
        assert shares["A100-40GB"] > shares["V100-32GB"]
    else:
        assert max(st.ratios()) > min(st.ratios())


def test_partition_by_speed_balances_time():
    flops = [1.0] * 12
    bounds = partition_by_speed(flops, [2.0, 1.0])
    assert bounds == ((0, 8), (8, 12))
    assert partition_by_speed(flops, [1.0] * 12) == tuple((i, i + 1) for i in range(12))
    with pytest.raises(ValueError):
        partition_by_speed(flops, [1.0] * 13)


def test_job_shapes_cover_counts_stages_types_and_mixes(gpt):
    settings = TrainSettings(model=gpt.name, global_batch=64, seq_len=gpt.seq_len, precision="bf16")
    shapes = job_shapes(gpt, settings, {"A100-40GB": 64, "V100-32GB": 16}, base_count={"A100-40GB": 4,
                        "V100-32GB": 4})  # fmt: skip
    counts = {(s.gpus, s.n_stages) for s in shapes}
    assert ((("A100-40GB", 2),), 1) in counts and ((("A100-40GB", 8),), 8) in counts
    assert not any(s.n_gpus > 8 for s in shapes)
    assert any(len(s.gpus) == 2 for s in shapes)
    excluded = job_shapes(gpt, settings, {"A100-40GB": 64, "V100-32GB": 16}, exclude=("V100-32GB",),
                          base_count={"A100-40GB": 4})  # fmt: skip
    assert all(s.gpu_types == ("A100-40GB",) for s in excluded)


def test_bad_cell_shapes():
    with pytest.raises(ValueError, match="at least one GPU"):
        CellShape.of({"A100-40GB": 0}, 1)
    with pytest.raises(KeyError):
        CellShape.of({"A1OO": 2}, 1)


def _settings(model: str, batch: int):
    spec = get_spec(model)
    return spec, TrainSettings(model=model, global_batch=batch, seq_len=spec.seq_len, precision="bf16")


def test_memory_only_fits_is_the_stage_costs_feasible():
    spec, settings = _settings("gpt3-2.7b", 64)
    est = CellEstimator(spec, settings, get_cluster("crius-sim-1280"))
    seen = set()
    for shape in (CellShape.of({"A10": 4}, 2), CellShape.of({"A100-40GB": 2, "A10": 2}, 2)):
        for rung in est.rungs:
            space = est.space(shape, rung, 8)
            for s, opts in enumerate(space.options):
                for j in range(len(opts)):
                    fit = space.fits(s, j)  # asked first: memory alone
                    assert fit == space.stage_cost(s, j).feasible
                    seen.add(fit)
    assert seen == {True, False}


@pytest.mark.parametrize(
    "model,batch,gpus,stages",
    [
        ("gpt3-6.7b", 64, {"A10": 1}, 1),
        ("gpt3-6.7b", 64, {"A10": 2}, 2),
        ("gpt3-2.7b", 64, {"V100-32GB": 1}, 1),
    ],
)
def test_a_cell_where_nothing_fits_walks_only_the_first_rung(model, batch, gpus, stages):
    """No DP-only or TP-only option fits even with full recompute and ZeRO-1: the estimate is the first rung's
    fastest plan, infeasible, and no later rung's plans were priced (their memory alone was asked)."""
    spec, settings = _settings(model, batch)
    est = CellEstimator(spec, settings, get_cluster("crius-sim-1280"))
    shape = CellShape.of(gpus, stages)
    cell = est.estimate(shape)
    assert cell is not None and not cell.feasible
    assert (cell.plan.recompute.value, cell.plan.zero) == (est.rungs[0].recompute, est.rungs[0].zero)
    priced = {key[1] for key, space in est._spaces.items() if key[0] == shape and space._costs}
    assert priced == {est.rungs[0]}
    for rung in est.rungs:  # and indeed nothing fits anywhere
        for B in (4 * stages, batch):
            space = est.space(shape, rung, B)
            assert not space.assemble(space.pure_options()).feasible


@pytest.mark.parametrize("model,batch", [("gpt3-2.7b", 64), ("llama2-7b", 32), ("moe-2.4b", 256)])
def test_the_last_rung_fits_whatever_an_earlier_rung_fits(model, batch):
    """What the hopeless-Cell shortcut assumes: full recompute and ZeRO-1 never need more memory than a rung
    before them, so an option that fits on some rung fits on the last."""
    spec, settings = _settings(model, batch)
    est = CellEstimator(spec, settings, get_cluster("crius-sim-1280"))
    checked = 0
    for gpus in ({"A10": 2}, {"A100-40GB": 4}, {"V100-32GB": 8}, {"A40": 2, "A10": 2}):
        for S in (1, 2):
            shape = CellShape.of(gpus, S)
            for B in (4 * S, batch):
                last = est.space(shape, est.rungs[-1], B)
                for rung in est.rungs[:-1]:
                    space = est.space(shape, rung, B)
                    for s, opts in enumerate(space.options):
                        for j in range(len(opts)):
                            if space.fits(s, j):
                                assert last.fits(s, j), (gpus, S, B, rung, s, j)
                                checked += 1
    assert checked > 5

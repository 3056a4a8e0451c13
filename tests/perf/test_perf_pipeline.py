"""Pipeline iteration time on hand-computable cases.

Formula (tessera.perf.pipeline): iteration = Σ_i t_i + 2·Σ_j p_j + (B − 1)·max_i t_i + dp_sync,
with t_i = forward + backward of stage i for one micro-batch.
"""

from __future__ import annotations

import pytest

from tessera.perf.pipeline import pipeline_time


def test_two_stages_one_and_three_seconds_four_micro_batches():
    """Stage 0 takes 1 s (1/3 fwd + 2/3 bwd), stage 1 takes 3 s (1 + 2), B = 4, no communication.

    The first micro-batch goes through both stages forward and back: 1 + 3 = 4 s. Then the 3-s stage is the
    bottleneck for the 3 remaining micro-batches: 3 · 3 = 9 s. Total 13 s = 4·3 (steady) + 1 (bubble).
    """
    t = pipeline_time([1 / 3, 1.0], [2 / 3, 2.0], 4)
    assert t.iteration_time_s == pytest.approx(13.0)
    assert t.steady_s == pytest.approx(12.0)
    assert t.bubble_s == pytest.approx(1.0)
    assert t.bottleneck_stage == 1
    assert pipeline_time([1 / 3, 1.0], [2 / 3, 2.0], 4, schedule="gpipe").iteration_time_s == pytest.approx(
        13.0
    )


def test_first_pass_pays_each_boundary_twice_and_dp_sync_is_added():
    """Four equal 1-s stages, B = 8, 0.1 s per boundary crossing, DP syncs of 0.5/0.2/0.2/0.2 s.

    Fill/drain: Σ t = 4 s; steady: 7 · 1 = 7 s; the first micro-batch crosses 3 boundaries forward and 3 back:
    6 · 0.1 = 0.6 s; the DP sync adds the slowest stage's exposed 0.5 s: 4 + 7 + 0.6 + 0.5 = 12.1 s. (What of
    a sync the last backward hides is priced by the estimate, tests/perf/test_dp_overlap_pricing.py.)
    """
    fwd, bwd = [0.4] * 4, [0.6] * 4
    t = pipeline_time(fwd, bwd, 8, p2p_s=[0.1] * 3, dp_sync_s=[0.5, 0.2, 0.2, 0.2])
    assert t.iteration_time_s == pytest.approx(12.1)
    assert (t.p2p_s, t.dp_sync_s) == (pytest.approx(0.6), pytest.approx(0.5))


def test_single_stage_is_b_times_stage_time():
    assert pipeline_time([1.0], [2.0], 5).iteration_time_s == pytest.approx(15.0)


def test_bad_input():
    with pytest.raises(ValueError):
        pipeline_time([1.0, 1.0], [1.0], 2)
    with pytest.raises(ValueError):
        pipeline_time([1.0, 1.0], [1.0, 1.0], 2, p2p_s=[0.1, 0.1])
    with pytest.raises(ValueError):
        pipeline_time([1.0], [1.0], 2, schedule="zb")


def test_interleaved_1f1b_divides_the_bubble_and_multiplies_p2p():
    """Interleaved 1F1B with v chunks per device: bubble (S − 1)/(v·B) of the steady time, p2p v× plus the
    last device's v − 1 hand-backs to the first."""
    import pytest

    from tessera.perf.pipeline import pipeline_time

    f, b, m = [1.0] * 4, [2.0] * 4, 8
    plain = pipeline_time(f, b, m, p2p_s=[0.1, 0.1, 0.1])
    inter = pipeline_time(f, b, m, p2p_s=[0.1, 0.1, 0.1], virtual_stages=2)
    assert plain.bubble_s == pytest.approx(9.0) and inter.bubble_s == pytest.approx(4.5)
    assert inter.bubble_s / inter.steady_s == pytest.approx((4 - 1) / (2 * m))
    assert inter.p2p_s == pytest.approx(2 * plain.p2p_s + 2 * 1 * 0.1)
    assert inter.iteration_time_s < plain.iteration_time_s
    assert pipeline_time(f, b, m, virtual_stages=1) == pipeline_time(f, b, m)
    with pytest.raises(ValueError, match="multiple of the stages"):
        pipeline_time(f, b, 6, virtual_stages=2)
    with pytest.raises(ValueError, match="1F1B"):
        pipeline_time(f, b, 8, schedule="gpipe", virtual_stages=2)
    with pytest.raises(ValueError, match="virtual_stages"):
        pipeline_time(f, b, 8, virtual_stages=0)


def test_estimate_and_planner_space_take_virtual_stages():
    import pytest

    from tessera.models.zoo import get_spec
    from tessera.perf.estimate import estimate_plan
    from tessera.plan import simple_plan

    spec = get_spec("gpt2")
    plan = simple_plan(spec.name, n_layers=spec.n_layers, seq_len=spec.seq_len, global_batch=16, pp=4,
                       gpu_type="A100-40GB", micro_batches=8, precision="bf16")  # fmt: skip
    plain = estimate_plan(plan, spec)
    inter = estimate_plan(plan.with_(virtual_stages=3), spec)  # the plan's own interleaving
    assert inter.bubble_s == pytest.approx(plain.bubble_s / 3)
    assert inter.iteration_time_s < plain.iteration_time_s

    from tessera.perf.estimate import Topology
    from tessera.plan import Device
    from tessera.planning.space import StageSpace, TrainSettings

    assert TrainSettings("gpt2", 16, 1024).virtual_stages == 1
    bounds = [(st.layer_start, st.layer_end) for st in plan.stages]
    devices = [[Device(0, "A100-40GB")] for _ in bounds]

    def space(v: int) -> StageSpace:
        settings = TrainSettings("gpt2", 16, spec.seq_len, precision="bf16", virtual_stages=v)
        return StageSpace(spec, settings, bounds, devices, Topology(), micro_batches=8)

    choice = [0] * len(bounds)
    one, three = space(1).estimate(choice), space(3).estimate(choice)
    assert three.bubble_s == pytest.approx(one.bubble_s / 3) and one.bubble_s > 0
    # the space's plans carry the interleaving it prices, so the chosen Plan runs what was priced
    assert space(3).plan(choice).virtual_stages == 3 and space(1).plan(choice).virtual_stages == 1
    assert three == estimate_plan(space(3).plan(choice), spec)


def test_planner_assembly_prices_interleaving_as_the_estimate():
    """The space's assembly (enumerated and bottleneck-threshold) gives the interleaved plan's estimate; a
    setting the stages cannot carry (micro-batches not a multiple of the stages) falls back to plain 1F1B."""
    import pytest

    from tessera.models.zoo import get_spec
    from tessera.perf.estimate import Topology, estimate_plan
    from tessera.plan import Device, simple_plan
    from tessera.planning import space as space_mod
    from tessera.planning.space import StageSpace, TrainSettings

    spec = get_spec("gpt2")
    plan = simple_plan(spec.name, n_layers=spec.n_layers, seq_len=spec.seq_len, global_batch=64, pp=2,
                       gpu_type="A100-40GB", micro_batches=8, precision="bf16")  # fmt: skip
    bounds = [(st.layer_start, st.layer_end) for st in plan.stages]
    # 3 (dp, tp) options per stage plain; interleaved, only TP = 1 (dp 4: 2 samples per replica and micro-batch)
    devices = [[Device(0, "A100-40GB") for _ in range(4)] for _ in bounds]

    def space(v: int, micro: int = 8) -> StageSpace:
        settings = TrainSettings("gpt2", 64, spec.seq_len, precision="bf16", virtual_stages=v)
        return StageSpace(spec, settings, bounds, devices, Topology(), micro_batches=micro)

    inter = space(2)
    best = inter.assemble()
    assert best is not None and inter.plan(best.options).virtual_stages == 2
    priced = estimate_plan(inter.plan(best.options), spec)
    assert best.iteration_time_s == pytest.approx(priced.iteration_time_s, rel=1e-12)
    old = space_mod.MAX_ENUMERATED
    space_mod.MAX_ENUMERATED = 1  # force the threshold search
    try:
        searched = space(2).assemble()
    finally:
        space_mod.MAX_ENUMERATED = old
    assert searched is not None and searched.options == best.options
    assert searched.iteration_time_s == pytest.approx(best.iteration_time_s, rel=1e-9)
    assert [len(o) for o in inter.options] == [1, 1] and [len(o) for o in space(1).options] == [3, 3]
    assert space(2, micro=7).virtual_stages == 1 and space(2, micro=7).plan(best.options).virtual_stages == 1
    # 16 samples over 8 micro-batches leave each of 4 replicas empty pieces: no option torch's schedule runs
    small = StageSpace(spec, TrainSettings("gpt2", 16, spec.seq_len, precision="bf16", virtual_stages=2), bounds,
                       devices, Topology(), micro_batches=8)  # fmt: skip
    assert small.virtual_stages == 2 and small.options == [[], []] and small.assemble() is None

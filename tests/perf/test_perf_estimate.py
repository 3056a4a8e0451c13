"""Whole-plan estimates: composition, heterogeneity, TP/DP communication, profiles and memory feasibility."""

from __future__ import annotations

import dataclasses

import pytest

from tessera.hardware import get_cluster
from tessera.models.zoo import get_spec
from tessera.perf.comm import Arrival
from tessera.perf.compute import Profile, layer_time, optimizer_time
from tessera.perf.costmodel import CostModel
from tessera.perf.estimate import Estimate, Topology, _arrival, estimate_plan, stage_cost, tp_allreduces
from tessera.plan import Device, Plan, Stage, simple_plan


@pytest.fixture(scope="module")
def gpt2():
    return get_spec("gpt2")


def _plan(spec, **kw):
    kw.setdefault("global_batch", 16)
    return simple_plan(spec.name, n_layers=spec.n_layers, seq_len=spec.seq_len, **kw)


def _hetero_dp(spec, shares=()):
    devs = (Device(0, "A100-40GB"), Device(1, "V100-32GB"))
    stage = Stage(0, spec.n_layers, devs, dp_degree=2, batch_shares=shares)
    return Plan(spec.name, 16, spec.seq_len, (stage,), micro_batches=1, precision="fp16")


def test_estimate_is_frozen_and_parts_add_up(gpt2):
    e = estimate_plan(
        _plan(gpt2, dp=2, tp=2, pp=2, gpu_type="A100-40GB", micro_batches=4, precision="bf16"), gpt2
    )
    assert isinstance(e, Estimate)
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.iteration_time_s = 0  # type: ignore[misc]
    assert e.iteration_time_s == pytest.approx(e.compute_s + e.comm_s + e.bubble_s)
    assert e.comm_s > 0 and e.bubble_s > 0
    assert 0 < e.mfu < 1
    assert e.samples_per_s == pytest.approx(16 / e.iteration_time_s)
    assert e.tokens_per_s_per_gpu == pytest.approx(16 * gpt2.seq_len / e.iteration_time_s / 8)
    assert len(e.peak_bytes_per_device) == 8 and e.feasible


def test_single_stage_single_device_matches_layer_sum(gpt2):
    """One device, one micro-batch: iteration = Σ layers (fwd + bwd + optimizer step) — nothing else to add."""
    from tessera.hardware import get_gpu
    from tessera.perf.compute import block_shape

    plan = _plan(gpt2, gpu_type="A100-40GB", micro_batches=1, precision="bf16")
    e = estimate_plan(plan, gpt2)
    gpu = get_gpu("A100-40GB")
    # blocks priced by kernel class; AMP over fp32 parameters keeps the residual stream fp32 (4-byte elements)
    shape = block_shape(gpt2.arch, gpt2.seq_len, plan.attention.value, stream_bytes=4.0)
    expect = sum(
        layer_time(
            layer, gpu, micro_batch=16, precision="bf16", shape=shape if layer.kind == "transformer" else None
        ).total_s
        for layer in gpt2.layers
    )
    step = sum(optimizer_time(layer, gpu, precision="bf16")[0] for layer in gpt2.layers)
    assert step > 0 and e.optimizer_s == pytest.approx(step)
    assert e.iteration_time_s == pytest.approx(expect + step)
    assert e.comm_s == 0 and e.bubble_s == 0


def test_faster_gpu_is_faster(gpt2):
    a100 = estimate_plan(_plan(gpt2, gpu_type="A100-40GB", precision="bf16"), gpt2)
    t4 = estimate_plan(_plan(gpt2, gpu_type="T4", precision="fp16"), gpt2)
    assert a100.iteration_time_s < t4.iteration_time_s


def test_slowest_replica_bounds_the_stage_and_shares_fix_it(gpt2):
    even = estimate_plan(_hetero_dp(gpt2), gpt2)
    v100_only = estimate_plan(
        _plan(gpt2, global_batch=8, gpu_type="V100-32GB", micro_batches=1, precision="fp16"), gpt2
    )
    # the even split's V100 replica does 8 samples, exactly the single-V100 plan's compute
    assert even.compute_s == pytest.approx(v100_only.compute_s)
    skewed = estimate_plan(_hetero_dp(gpt2, shares=(12, 4)), gpt2)
    assert skewed.iteration_time_s < even.iteration_time_s


def test_tp_adds_allreduces_and_dp_sync_depends_on_the_link(gpt2):
    tp1 = estimate_plan(_plan(gpt2, tp=1, gpu_type="A100-40GB", micro_batches=1), gpt2)
    tp2 = estimate_plan(_plan(gpt2, tp=2, gpu_type="A100-40GB", micro_batches=1), gpt2)
    assert tp1.comm_s == 0 and tp2.comm_s > 0
    cluster = get_cluster("whale-hetero-16")
    same = tuple(Device(i, "V100-32GB", node="v100-0", local_index=i) for i in range(2))
    split = (
        Device(0, "V100-32GB", node="v100-0", local_index=0),
        Device(1, "P100-16GB", node="p100-0", local_index=0),
    )
    times = {}
    for name, devs in (("nvlink", same), ("ethernet", split)):
        plan = Plan(
            gpt2.name, 16, gpt2.seq_len, (Stage(0, gpt2.n_layers, devs, dp_degree=2),), precision="fp16"
        )
        times[name] = estimate_plan(plan, gpt2, cluster)
    assert times["ethernet"].comm_s > 10 * times["nvlink"].comm_s


def test_profile_overrides_the_roofline(gpt2):
    plan = _plan(gpt2, gpu_type="A100-40GB", global_batch=8, micro_batches=1, precision="bf16")
    prof = Profile()
    for layer in gpt2.layers:
        prof.put(layer, "A100-40GB", 1, 8, "bf16", fwd_s=0.01, bwd_s=0.02)
        prof.put_optimizer(layer, "A100-40GB", 1, "bf16", "adamw", time_s=0.001)
    e = estimate_plan(plan, gpt2, cost=CostModel(profile=prof))
    # a tied head's profiled step holds its copy of the embedding, which a stage with both counts once
    assert e.optimizer_s < gpt2.n_layers * 0.001
    assert e.iteration_time_s == pytest.approx(gpt2.n_layers * 0.03 + e.optimizer_s)
    assert e.optimizer_s > (gpt2.n_layers - 1) * 0.001


def test_a_launch_bound_gpu_step_costs_its_launch_time(gpt2):
    """Profiled launch times floor each pass: kernels of 10 + 20 ms per layer launched in 15 + 15 ms run at
    15 + 20 ms (the forward waits on its launches, the backward on its kernels); without launch times the
    kernels alone."""
    plan = _plan(gpt2, gpu_type="A100-40GB", global_batch=8, micro_batches=1, precision="bf16")
    prof = Profile()
    for layer in gpt2.layers:
        prof.put(layer, "A100-40GB", 1, 8, "bf16", fwd_s=0.01, bwd_s=0.02, host=(0.015, 0.015))
    e = estimate_plan(plan, gpt2, cost=CostModel(profile=prof))
    assert e.iteration_time_s - e.optimizer_s == pytest.approx(gpt2.n_layers * (0.015 + 0.02))
    bare = Profile(entries=dict(prof.entries))
    e = estimate_plan(plan, gpt2, cost=CostModel(profile=bare))
    assert e.iteration_time_s - e.optimizer_s == pytest.approx(gpt2.n_layers * 0.03)


def test_memory_feasibility():
    spec = get_spec("gpt3-1.3b")
    t4 = estimate_plan(_plan(spec, global_batch=8, gpu_type="T4", micro_batches=8), spec)
    assert not t4.feasible  # 1.3 B params × 16 B of fp32 AdamW state do not fit 16 GB
    a100 = estimate_plan(
        _plan(spec, global_batch=8, gpu_type="A100-80GB", micro_batches=8, precision="bf16"), spec
    )
    assert a100.feasible
    assert max(a100.device_bytes_per_device) > max(a100.peak_bytes_per_device)  # + CUDA context


def test_seq_len_mismatch_is_an_error(gpt2):
    plan = simple_plan(gpt2.name, n_layers=gpt2.n_layers, global_batch=4, seq_len=128)
    with pytest.raises(ValueError, match="seq_len"):
        estimate_plan(plan, gpt2)


def test_tp_allreduces_of_blocks_vocab_embedding_and_head(gpt2):
    """Per micro-batch sample: a GELU block 2 forward + 4 backward of its b·s·h output; the vocab-parallel
    embedding 1 forward of its output; the head 1 backward of its input gradient plus the parallel
    cross-entropy's 3 all-reduces of one fp32 value per token."""
    hidden_bytes = gpt2.seq_len * gpt2.arch.hidden * 4
    block = tp_allreduces(gpt2, 1)
    assert (block.fwd, block.bwd, block.loss) == (2, 4, 0) and block.act_bytes_per_sample == hidden_bytes
    emb = tp_allreduces(gpt2, 0)
    assert (emb.fwd, emb.bwd, emb.loss) == (1, 0, 0) and emb.act_bytes_per_sample == hidden_bytes
    head = tp_allreduces(gpt2, gpt2.n_layers - 1)
    assert (head.fwd, head.bwd, head.loss) == (0, 1, 3)
    assert head.act_bytes_per_sample == hidden_bytes and head.loss_bytes_per_sample == gpt2.seq_len * 4


def test_full_recompute_repeats_the_forward_all_reduces_of_blocks_only(gpt2):
    """The runtime checkpoints blocks, not the embedding: under full recompute a block's 2 forward all-reduces
    run again in backward (8 instead of 6 per micro-batch), the vocab-parallel embedding's stays 1."""
    plan = _plan(gpt2, tp=2, pp=3, layer_cuts=(1, 2), gpu_type="A100-40GB", micro_batches=4)
    full = dataclasses.replace(plan, recompute="full")
    emb_none, emb_full = (stage_cost(p, gpt2, 0, Topology()).tp_comm_s for p in (plan, full))
    assert emb_full == pytest.approx(emb_none) and emb_none > 0
    block_none, block_full = (stage_cost(p, gpt2, 1, Topology()).tp_comm_s for p in (plan, full))
    assert block_full == pytest.approx(block_none * 8 / 6)


def test_tp_splits_the_head_of_a_last_stage(gpt2):
    """The runtime's head is vocab-parallel: a last stage holding only the head computes half of it at TP 2."""
    head_only = {}
    for tp in (1, 2):
        devs = (Device(0, "A100-40GB"),) + tuple(
            Device(1 + k, "A100-40GB", local_index=1 + k) for k in range(tp)
        )
        stages = (
            Stage(0, gpt2.n_layers - 1, devs[:1]),
            Stage(gpt2.n_layers - 1, gpt2.n_layers, devs[1:], tp_degree=tp),
        )
        est = estimate_plan(Plan(gpt2.name, 16, gpt2.seq_len, stages, micro_batches=4), gpt2)
        head_only[tp] = est.stage_times_s[1]
    assert 0.4 < head_only[2] / head_only[1] < 0.75


def test_dp_sync_prices_the_bucket_and_its_copies():
    """Plain DP: the measured all-reduce of the gradient bucket plus the flatten / copy-back around it (4 × the
    bytes at the device's memory bandwidth) — the runtime's GradSync does both."""
    from tessera.hardware import get_gpu

    spec = get_spec("gpt-small-cpu", seq_len=128)
    grad_bytes = 4.0 * sum(layer.params for layer in spec.layers)
    cost = CostModel()
    for nbytes in (2**20, 2**26):  # grad_bytes lies between: one bucket, interpolated to the flat 5 ms
        cost.comm_table.add("all_reduce", "loopback", 2, nbytes, 0.005)
    plan = simple_plan(spec.name, n_layers=spec.n_layers, global_batch=8, seq_len=128, dp=2, micro_batches=1)
    e = estimate_plan(plan, spec, cost=cost)
    copies = 4.0 * grad_bytes / get_gpu("cpu").memory_bandwidth_Bps
    assert grad_bytes < 25 * 2**20 and copies > 0.001
    assert e.comm_s == pytest.approx(0.005 + copies)


def test_the_slow_rank_of_an_uneven_tp_group_pays_the_late_arrival_all_reduce():
    """Uneven TP shards: the rank with the bigger shard arrives last at every all-reduce and pays the table's
    ``last`` time; an even split pays ``together``. Without a ``last`` measurement both read ``together``."""
    spec = get_spec("llama-small-cpu", seq_len=128)
    even = simple_plan(spec.name, n_layers=spec.n_layers, global_batch=8, seq_len=128, tp=2, micro_batches=1)
    uneven = dataclasses.replace(even, stages=(dataclasses.replace(even.stages[0], tp_ratios=(0.75, 0.25)),))
    together = CostModel()
    together.comm_table.add_many("all_reduce", "loopback", 2, [(1.0, 0.005), (2.0**30, 0.005)])
    both = CostModel()
    both.comm_table.points = dict(together.comm_table.points)
    both.comm_table.add_many("all_reduce", "loopback", 2, [(1.0, 0.002), (2.0**30, 0.002)], Arrival.LAST)
    topo = Topology()
    tp_s = {
        (name, c): stage_cost(plan, spec, 0, topo, cost).tp_comm_s
        for name, plan in (("even", even), ("uneven", uneven))
        for c, cost in (("together", together), ("both", both))
    }
    ops = tp_s[("even", "together")] / 0.005
    assert ops == pytest.approx(round(ops)) and ops > 10  # a whole number of all-reduces at 5 ms
    assert tp_s[("even", "both")] == pytest.approx(tp_s[("even", "together")])
    assert tp_s[("uneven", "together")] == pytest.approx(tp_s[("even", "together")])
    assert tp_s[("uneven", "both")] == pytest.approx(ops * 0.002)


def test_who_arrives_last():
    assert _arrival([3.0, 1.0]) == Arrival.LAST
    assert _arrival([1.0, 1.05]) == Arrival.TOGETHER  # within the 10 % a rank's jitter covers
    assert _arrival([3.0, 3.0, 1.0]) == Arrival.TOGETHER  # two slowest ranks meet each other
    assert _arrival([2.0]) == Arrival.TOGETHER


def test_micro_batches_after_the_first_add_their_gradients_into_the_parameters():
    """Gradient accumulation: each micro-batch after the first reads both gradients and writes one (3 × the
    parameter bytes at the device's memory bandwidth), averaged into the per-micro-batch backward."""
    from tessera.hardware import get_gpu

    spec = get_spec("gpt-small-cpu", seq_len=128)
    one = simple_plan(spec.name, n_layers=spec.n_layers, global_batch=2, seq_len=128, micro_batches=1)
    four = dataclasses.replace(one, global_batch=8, micro_batches=4)  # the same micro-batch of 2
    topo = Topology()
    extra = stage_cost(four, spec, 0, topo).bwd_s - stage_cost(one, spec, 0, topo).bwd_s
    per_pass = 3.0 * 4.0 * sum(layer.params for layer in spec.layers) / get_gpu("cpu").memory_bandwidth_Bps
    assert extra == pytest.approx(per_pass * 3 / 4)
    half = dataclasses.replace(four, precision="bf16-master")
    bf16_one = dataclasses.replace(one, precision="bf16-master")
    extra_bf16 = stage_cost(half, spec, 0, topo).bwd_s - stage_cost(bf16_one, spec, 0, topo).bwd_s
    assert extra_bf16 == pytest.approx(extra / 2)  # bf16 parameters accumulate bf16 gradients
    # DP2: a replica computes only the micro-batches holding its samples (4 of 8, 8 of 16; the same half
    # sample per micro-batch on average), so it accumulates 3 times over 8 micro-batches, 7 over 16
    dp8 = simple_plan(spec.name, n_layers=spec.n_layers, global_batch=8, seq_len=128, dp=2, micro_batches=8)
    dp16 = dataclasses.replace(dp8, global_batch=16, micro_batches=16)
    gap = stage_cost(dp16, spec, 0, topo).bwd_s - stage_cost(dp8, spec, 0, topo).bwd_s
    assert gap == pytest.approx(per_pass * (7 / 16 - 3 / 8))


def test_a_replica_with_fewer_samples_than_micro_batches_computes_whole_samples():
    """DP4 over 8 samples: with 8 micro-batches or with 2, each replica computes two micro-batches of one
    sample (it skips those holding none of its samples), so the stage's compute per iteration is the same —
    not 8 passes of a quarter sample."""
    spec = get_spec("gpt-small-cpu", seq_len=128)
    two = simple_plan(spec.name, n_layers=spec.n_layers, global_batch=8, seq_len=128, dp=4, micro_batches=2)
    eight = dataclasses.replace(two, micro_batches=8)
    topo = Topology()
    a, b = stage_cost(two, spec, 0, topo), stage_cost(eight, spec, 0, topo)
    assert 8 * b.fwd_s == pytest.approx(2 * a.fwd_s)
    one_sample = layer_time(spec.layers[1], topo.gpu(two.devices[0]), tp=1, micro_batch=1, precision="fp32")
    quarter = layer_time(spec.layers[1], topo.gpu(two.devices[0]), tp=1, micro_batch=0.25, precision="fp32")
    assert 4 * quarter.fwd_s != pytest.approx(one_sample.fwd_s)  # the fractional pricing would differ

"""Roofline compute cost, efficiency curve and profile override."""

from __future__ import annotations

import dataclasses

import pytest

from tessera.hardware import get_gpu
from tessera.models.spec import Layer, TPShard
from tessera.perf.compute import (
    DEFAULT_CURVES,
    EfficiencyCurve,
    Profile,
    curve_for,
    forward_roofline,
    layer_time,
)

BIG = Layer("block", "transformer", params=12 * 4096**2, fwd_flops_per_sample=2 * 12 * 4096**2 * 2048,
            act_bytes_per_sample=2048 * 4096 * 4 * 16, out_bytes_per_sample=2048 * 4096 * 4,
            tp_shard=TPShard.HEADS, tp_units=32)  # fmt: skip
TINY = Layer("tiny", "transformer", params=64 * 64 * 12, fwd_flops_per_sample=2 * 12 * 64 * 64 * 16,
             act_bytes_per_sample=16 * 64 * 4 * 16, out_bytes_per_sample=16 * 64 * 4,
             tp_shard=TPShard.HEADS, tp_units=4)  # fmt: skip
A100 = get_gpu("A100-40GB")


def test_efficiency_curve_drops_for_small_work_and_saturates():
    c = EfficiencyCurve(max_fraction=0.6, half_flops=1e9, min_fraction=0.01)
    assert c.fraction(1e9) == pytest.approx(0.3)
    assert c.fraction(1e15) == pytest.approx(0.6, rel=1e-5)
    assert c.fraction(1.0) == 0.01
    assert c.fraction(1e8) < c.fraction(1e9) < c.fraction(1e10)


def test_curve_lookup_prefers_calibrated_type_then_arch():
    calibrated = EfficiencyCurve(max_fraction=0.42)
    assert curve_for(A100) is DEFAULT_CURVES["ampere"]
    assert curve_for(A100, {"A100-40GB": calibrated}) is calibrated
    assert curve_for(A100, {"ampere": calibrated}) is calibrated


def test_large_layer_is_compute_bound_at_near_max_efficiency():
    t = forward_roofline(BIG, A100, micro_batch=4, precision="bf16")
    assert t.compute_s > t.memory_s
    eff = DEFAULT_CURVES["ampere"].fraction(t.flops)
    assert t.time_s == pytest.approx(t.flops / (A100.peak_flops("bf16") * eff))
    assert eff > 0.6  # big matmuls run near the curve's maximum


def test_small_layer_achieves_lower_flop_rate():
    big = forward_roofline(BIG, A100, micro_batch=4, precision="bf16")
    tiny = forward_roofline(TINY, A100, micro_batch=1, precision="bf16")
    assert tiny.flops / tiny.time_s < 0.1 * big.flops / big.time_s


def test_backward_is_twice_forward_and_recompute_adds_a_forward():
    base = layer_time(BIG, A100, micro_batch=2, precision="bf16")
    assert base.bwd_s == pytest.approx(2 * base.fwd_s)
    full = layer_time(BIG, A100, micro_batch=2, precision="bf16", recompute="full")
    assert full.bwd_s == pytest.approx(3 * base.fwd_s)
    sel = layer_time(
        BIG, A100, micro_batch=2, precision="bf16", recompute="selective", attention_core_fraction=0.1
    )
    assert sel.bwd_s == pytest.approx(2.1 * base.fwd_s)
    with pytest.raises(ValueError, match="recompute"):
        layer_time(BIG, A100, recompute="sometimes")
    # the runtime checkpoints blocks only: a head (or embedding) runs its forward once under full recompute
    head = dataclasses.replace(BIG, name="head", kind="head")
    assert layer_time(head, A100, micro_batch=2, precision="bf16", recompute="full") == layer_time(
        head, A100, micro_batch=2, precision="bf16"
    )


def test_tp_shards_the_work_and_uneven_ratio_scales_it():
    one = forward_roofline(BIG, A100, micro_batch=4, precision="bf16")
    half = forward_roofline(BIG, A100, tp=2, micro_batch=4, precision="bf16")
    assert half.flops == pytest.approx(one.flops / 2)
    big_share = forward_roofline(BIG, A100, tp=2, micro_batch=4, precision="bf16", ratio=0.75)
    assert big_share.flops == pytest.approx(0.75 * one.flops)
    replicated = Layer("ln", "head", 10, 1e6, 0, 0, TPShard.REPLICATED)
    assert forward_roofline(replicated, A100, tp=4).flops == 1e6


def test_profile_overrides_roofline_and_round_trips(tmp_path):
    p = Profile()
    p.put(BIG, "A100-40GB", 2, 4, "bf16", fwd_s=0.010, bwd_s=0.025)
    t = layer_time(BIG, A100, tp=2, micro_batch=4, precision="bf16", profile=p)
    assert (t.fwd_s, t.bwd_s, t.source) == (0.010, 0.025, "profile")
    # an uneven shard scales the even-shard measurement
    t = layer_time(BIG, A100, tp=2, micro_batch=4, precision="bf16", ratio=0.75, profile=p)
    assert t.fwd_s == pytest.approx(0.015)
    # another micro-batch of the same key scales the one profiled size; other keys fall back to the roofline
    t8 = layer_time(BIG, A100, tp=2, micro_batch=8, precision="bf16", profile=p)
    assert (t8.source, t8.fwd_s) == ("profile", pytest.approx(0.020))
    assert layer_time(BIG, A100, tp=2, micro_batch=4, precision="fp32", profile=p).source == "roofline"
    assert layer_time(BIG, A100, tp=4, micro_batch=4, precision="bf16", profile=p).source == "roofline"
    assert (
        layer_time(BIG, get_gpu("V100-32GB"), tp=2, micro_batch=4, precision="bf16", profile=p).source
        == "roofline"
    )
    # with the whole layer profiled too, an uneven shard lies on the line through the even shard and the whole
    # layer (its fixed costs stay): 3/4 of a layer whose half takes 10 ms and whole 16 ms takes 13 ms, not 15
    p.put(BIG, "A100-40GB", 1, 4, "bf16", fwd_s=0.016, bwd_s=0.050)
    t = layer_time(BIG, A100, tp=2, micro_batch=4, precision="bf16", ratio=0.75, profile=p)
    assert (t.fwd_s, t.bwd_s) == (pytest.approx(0.013), pytest.approx(0.0375))  # bwd: whole = 2 × half
    small = layer_time(BIG, A100, tp=2, micro_batch=4, precision="bf16", ratio=0.25, profile=p)
    assert small.fwd_s == pytest.approx(0.007)  # below the even shard too: 10 − 6 × 0.5
    # a line whose value at 0 is below zero: proportional again
    p.put(BIG, "A100-40GB", 1, 4, "bf16", fwd_s=0.030, bwd_s=0.025)
    t = layer_time(BIG, A100, tp=2, micro_batch=4, precision="bf16", ratio=0.25, profile=p)
    assert (t.fwd_s, t.bwd_s) == (pytest.approx(0.005), pytest.approx(0.0125))
    # selective recompute: the block timed with it wins over the attention-core FLOP share
    assert layer_time(BIG, A100, tp=2, micro_batch=4, precision="bf16", recompute="selective",
                      attention_core_fraction=0.1, profile=p).bwd_s == pytest.approx(0.025 + 0.001)  # fmt: skip
    p.put(BIG, "A100-40GB", 2, 4, "bf16", fwd_s=0.010, bwd_s=0.031, recompute="selective")
    sel = layer_time(BIG, A100, tp=2, micro_batch=4, precision="bf16", recompute="selective", profile=p)
    assert (sel.fwd_s, sel.bwd_s, sel.source) == (0.010, 0.031, "profile")
    # full recompute likewise: the checkpointed block's timing wins over forward + forward + backward
    assert layer_time(
        BIG, A100, tp=2, micro_batch=4, precision="bf16", recompute="full", profile=p
    ).bwd_s == (pytest.approx(0.025 + 0.010))
    p.put(BIG, "A100-40GB", 2, 4, "bf16", fwd_s=0.011, bwd_s=0.037, recompute="full")
    full = layer_time(BIG, A100, tp=2, micro_batch=4, precision="bf16", recompute="full", profile=p)
    assert (full.fwd_s, full.bwd_s, full.source) == (0.011, 0.037, "profile")
    with pytest.raises(ValueError, match="recompute"):
        p.put(BIG, "A100-40GB", 2, 4, "bf16", fwd_s=0.010, bwd_s=0.031, recompute="sometimes")
    path = tmp_path / "profile.json"
    p.save(path)
    q = Profile.load(path)
    assert q.get(BIG, "A100-40GB", 2, 4, "bf16") == (0.010, 0.025)
    assert q.get(BIG, "A100-40GB", 2, 4, "bf16", recompute="selective") == (0.010, 0.031)
    # the signature ignores the layer's name: block 7 shares block 0's profile
    renamed = Layer("block7", **{k: v for k, v in BIG.__dict__.items() if k != "name"})
    assert q.get(renamed, "A100-40GB", 2, 4, "bf16") == (0.010, 0.025)


def test_gpu_profile_keeps_launch_times_beside_kernel_times(tmp_path):
    """A GPU profile's host launch seconds travel with its kernel seconds: looked up (and interpolated) like
    them, returned by layer_time (full recompute launches the forward again), saved and loaded, and dropped
    when a newer measurement without them replaces the entry."""
    p = Profile()
    p.put(BIG, "A100-40GB", 1, 2, "bf16", fwd_s=0.002, bwd_s=0.004, host=(0.003, 0.005))
    p.put(BIG, "A100-40GB", 1, 4, "bf16", fwd_s=0.004, bwd_s=0.008, host=(0.0031, 0.0052))
    assert p.lookup(BIG, "A100-40GB", 1, 3, "bf16", launches=True) == (
        pytest.approx(0.00305),
        pytest.approx(0.0051),
    )
    t = layer_time(BIG, A100, micro_batch=2, precision="bf16", profile=p)
    assert (t.fwd_s, t.bwd_s, t.host_fwd_s, t.host_bwd_s) == (0.002, 0.004, 0.003, 0.005)
    full = layer_time(BIG, A100, micro_batch=2, precision="bf16", profile=p, recompute="full")
    assert (full.bwd_s, full.host_bwd_s) == (pytest.approx(0.006), pytest.approx(0.008))
    path = tmp_path / "p.json"
    p.save(path)
    back = Profile.load(path)
    assert back.host == p.host and back.entries == p.entries
    newer = Profile()
    newer.put(BIG, "A100-40GB", 1, 2, "bf16", fwd_s=0.0021, bwd_s=0.0041)  # a CPU-style row: no launch times
    p.update(newer)
    assert len(p.host) == 1  # the replaced entry's launch times are gone; the other size's stay
    # ... and stand for every size (a launch count does not grow with the batch)
    assert p.lookup(BIG, "A100-40GB", 1, 2, "bf16", launches=True) == (0.0031, 0.0052)
    cpu = layer_time(BIG, A100, micro_batch=2, precision="bf16", profile=Profile(entries=dict(newer.entries)))
    assert (cpu.fwd_s, cpu.host_fwd_s, cpu.host_bwd_s) == (0.0021, 0.0, 0.0)
    with pytest.raises(ValueError, match="host"):
        p.put(BIG, "A100-40GB", 1, 2, "bf16", fwd_s=0.1, bwd_s=0.1, host=(-1.0, 0.0))

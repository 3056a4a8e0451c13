"""Whale's Algorithm 1 (memory-constraint load balancing)."""

from __future__ import annotations

import pytest

from tessera.hardware import get_gpu
from tessera.models.zoo import get_spec
from tessera.perf.estimate import estimate_plan
from tessera.plan import Device, Plan, Stage
from tessera.planning.balance import (
    balance_batch,
    balance_plan,
    balance_shards,
    balance_stage,
    order_by_memory,
)

GB = 1e9


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_whale_v100_t4_example_gives_a_4_to_2_batch_split(precision):
    """Whale §2 / Figure 4: a batch of 6 on one V100 and one T4 → 4 samples on the V100, 2 on the T4."""
    v100, t4 = get_gpu("V100-16GB"), get_gpu("T4")
    b = balance_batch(
        6,
        [v100.peak_flops(precision), t4.peak_flops(precision)],
        [v100.memory_bytes, t4.memory_bytes],
        bytes_per_sample=1 * GB,
    )
    assert b.shares == (4, 2)
    assert b.feasible and b.shifts == 0


def test_overflowing_device_sheds_load_to_the_device_with_room():
    """FLOP/s 3:1 puts 12 of 16 samples on device 0, which holds only (10 − 2) / 1 = 8; 4 move to device 1."""
    b = balance_batch(16, [3.0, 1.0], [10 * GB, 40 * GB], bytes_per_sample=1 * GB, fixed_bytes=2 * GB)
    assert b.shares == (8, 8)
    assert b.feasible and b.shifts == 1
    assert b.mem_utils[0] == pytest.approx(1.0)


def test_load_goes_to_the_least_loaded_device_first():
    """Device 0 overflows by 3; device 2 has the lowest FLOP utilization so it takes the load, not device 1."""
    b = balance_batch(12, [2.0, 1.0, 1.0], [5 * GB, 100 * GB, 100 * GB], bytes_per_sample=1 * GB)
    # proportional: 6, 3, 3 → device 0 holds 5: one sample moves to the first least-loaded device (1)
    assert b.shares == (5, 4, 3)
    b = balance_batch(12, [2.0, 1.0, 1.5], [3 * GB, 100 * GB, 100 * GB], bytes_per_sample=1 * GB)
    # proportional 5.33, 2.67, 4 → 5, 3, 4 (largest remainder); device 0 holds 3: 2 move to device 1
    # (flop util 3/1 = 3 vs device 2's 4/1.5 = 2.67 → device 2 is least loaded)
    assert b.shares == (3, 3, 6)


def test_valley_that_fills_up_passes_the_rest_on():
    """FLOP/s 4:2:1 → shares 7, 3, 2; device 0 holds 2 and must shed 5. Device 1 is least loaded (3/2 < 2/1)
    but has room for 1 only; it takes 1 and is full; device 2 takes the remaining 4 → 2, 4, 6."""
    b = balance_batch(12, [4.0, 2.0, 1.0], [2 * GB, 4 * GB, 100 * GB], bytes_per_sample=1 * GB)
    assert b.shares == (2, 4, 6)
    assert b.feasible and b.shifts == 2


def test_infeasible_when_nobody_has_room():
    b = balance_batch(10, [1.0, 1.0], [3 * GB, 3 * GB], bytes_per_sample=1 * GB)
    assert not b.feasible
    assert sum(b.shares) == 10


def test_shard_ratios_proportional_then_memory_capped():
    b = balance_shards([2.0, 1.0, 1.0], [100 * GB] * 3, shardable_bytes=30 * GB)
    assert b.loads == pytest.approx((0.5, 0.25, 0.25))
    b = balance_shards([2.0, 1.0, 1.0], [10 * GB, 100 * GB, 100 * GB], shardable_bytes=30 * GB)
    assert sum(b.loads) == pytest.approx(1.0)
    assert b.loads[0] == pytest.approx(1 / 3)  # 10 GB / 30 GB
    assert b.loads[1] == pytest.approx(0.25 + 0.5 - 1 / 3)
    assert b.feasible


# ------------------------------------------------------------------------------ on plans, with the formula
def _dp_plan(spec, gpus, global_batch, **kw):
    devices = tuple(Device(i, g) for i, g in enumerate(gpus))
    stage = Stage(0, spec.n_layers, devices, dp_degree=len(devices))
    return Plan(spec.name, global_batch, spec.seq_len, (stage,), precision="bf16", **kw)


def test_balanced_hetero_dp_plan_is_faster():
    """A100-40GB (312 TF bf16) + V100 (125 TF fp16 fallback): batch 16 → 11:5, and the estimate improves."""
    spec = get_spec("gpt2")
    plan = _dp_plan(spec, ["A100-40GB", "V100-32GB"], 16)
    balanced = balance_plan(plan, spec)
    assert balanced.stages[0].batch_shares == (11, 5)
    assert estimate_plan(balanced, spec).iteration_time_s < 0.8 * estimate_plan(plan, spec).iteration_time_s


def test_memory_overflow_moves_samples_off_the_small_fast_gpu():
    """L40S (362 TF, 48 GB) + A100-80GB (312 TF): FLOP/s put 15 of 28 samples on the L40S, which overflows;
    Algorithm 1 moves samples to the A100 until the L40S fits, and the memory module agrees."""
    spec = get_spec("gpt3-350m")
    plan = _dp_plan(spec, ["L40S", "A100-80GB"], 28)
    assert not estimate_plan(plan, spec).feasible  # the even 14:14 split overflows the L40S
    stage, batch, shards = balance_stage(plan, spec, 0)
    assert shards is None and batch is not None and batch.shifts >= 1
    assert stage.batch_shares[0] < 15 and sum(stage.batch_shares) == 28
    est = estimate_plan(balance_plan(plan, spec), spec)
    assert est.feasible


def test_stage_order_puts_big_memory_first():
    devs = [Device(0, "T4"), Device(1, "A100-80GB"), Device(2, "V100-32GB"), Device(3, "A100-80GB")]
    assert [d.rank for d in order_by_memory(devs)] == [1, 3, 2, 0]


def test_uneven_tp_ratios_follow_flops_and_speed_up_the_stage():
    """A100-80GB (312 TF) + A10 (125 TF) in one TP group: ratios 312:125 instead of 1:1."""
    spec = get_spec("gpt2")
    devices = (Device(0, "A100-80GB"), Device(1, "A10"))
    plan = Plan(
        spec.name, 8, spec.seq_len, (Stage(0, spec.n_layers, devices, tp_degree=2),), precision="bf16"
    )
    balanced = balance_plan(plan, spec)
    assert balanced.stages[0].tp_ratios == pytest.approx((312 / 437, 125 / 437))
    assert estimate_plan(balanced, spec).iteration_time_s < estimate_plan(plan, spec).iteration_time_s

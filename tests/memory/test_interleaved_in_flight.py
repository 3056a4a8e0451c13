"""Interleaved 1F1B's in-flight activations: the count the memory estimate prices is what torch's
``ScheduleInterleaved1F1B`` holds (its own action lists, no process group)."""

from __future__ import annotations

import math

import pytest
from torch.distributed.pipelining.schedules import ScheduleInterleaved1F1B, _ComputationType

from tessera.memory.layout import interleaved_chunk_passes, pipeline_in_flight


def _torch_peak(stages: int, v: int, micro_batches: int, rank: int) -> int:
    """Most chunk forwards awaiting their backward on ``rank`` in torch's interleaved schedule."""
    schedule = object.__new__(ScheduleInterleaved1F1B)  # the action lists only: no stages, no process group
    schedule.n_local_stages, schedule.pp_group_size, schedule._n_microbatches = v, stages, micro_batches
    schedule.number_of_rounds = max(1, micro_batches // stages)
    schedule.microbatches_per_round = micro_batches // schedule.number_of_rounds
    held = peak = 0
    for action in schedule._calculate_single_rank_operations(rank):
        if action is None:
            continue
        if action.computation_type == _ComputationType.FORWARD:
            held += 1
        elif action.computation_type == _ComputationType.FULL_BACKWARD:
            held -= 1
        peak = max(peak, held)
    assert held == 0
    return peak


@pytest.mark.parametrize(
    "stages,v,micro", [(2, 2, 4), (2, 3, 2), (3, 2, 6), (4, 2, 8), (4, 3, 4), (4, 2, 16)]
)
def test_in_flight_chunk_passes_are_torch_schedules(stages, v, micro):
    for rank in range(stages):
        passes = interleaved_chunk_passes(stages, rank, micro, v)
        assert passes == _torch_peak(stages, v, micro, rank)
        assert pipeline_in_flight("1f1b", stages, rank, micro, v) == min(math.ceil(passes / v), micro)
        assert pipeline_in_flight("1f1b", stages, rank, micro, v) >= pipeline_in_flight(
            "1f1b", stages, rank, micro
        )


def test_estimate_prices_interleaving_s_extra_activations():
    from tessera.models.zoo import get_spec
    from tessera.perf.estimate import estimate_plan, stage_view
    from tessera.plan import simple_plan

    spec = get_spec("gpt2")
    plain = simple_plan(spec.name, n_layers=spec.n_layers, seq_len=spec.seq_len, global_batch=16, pp=4,
                        gpu_type="A100-40GB", micro_batches=8, precision="bf16")  # fmt: skip
    inter = plain.with_(virtual_stages=2)
    assert [stage_view(plain, i, 2).in_flight for i in range(4)] == [4, 3, 2, 1]
    assert [stage_view(inter, i, 2).in_flight for i in range(4)] == [
        6,
        5,
        4,
        3,
    ]  # ceil((4 + 2·(3 − i) + 1) / 2)
    a, b = estimate_plan(plain, spec), estimate_plan(inter, spec)
    assert all(x < y for x, y in zip(a.peak_bytes_per_device, b.peak_bytes_per_device, strict=True))

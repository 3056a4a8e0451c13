"""Pure-Python pieces of the runtime: batch splitting, schedules, shard specs, loss weighting."""

from __future__ import annotations

import torch

from tessera.plan import Schedule
from tessera.runtime import weighted_loss
from tessera.runtime.groups import micro_ranges, overlaps, replica_rows
from tessera.runtime.pipeline import BWD, FWD, actions
from tessera.runtime.shards import ShardSpec, assemble


def test_micro_ranges_tile_the_batch():
    assert micro_ranges(10, 4) == ((0, 3), (3, 6), (6, 8), (8, 10))


def test_replica_rows_give_exact_shares_and_tile_each_micro_batch():
    micro = micro_ranges(8, 4)
    rows = replica_rows((6, 2), micro)
    assert [sum(b - a for a, b in r) for r in rows] == [6, 2]
    for m, (a, b) in enumerate(micro):
        spans = [rows[r][m] for r in range(2)]
        assert spans[0][0] == 0 and spans[-1][1] == b - a
        assert all(spans[i][1] == spans[i + 1][0] for i in range(len(spans) - 1))


def test_replica_may_skip_a_micro_batch():
    rows = replica_rows((3, 1), micro_ranges(4, 4))
    assert [b - a for a, b in rows[1]].count(0) == 3


def test_overlaps():
    assert overlaps((2, 6), [(0, 3), (3, 5), (5, 8)]) == [(0, 2, 3), (1, 3, 5), (2, 5, 6)]


def test_1f1b_schedule_orders():
    assert actions(Schedule.ONE_F_ONE_B, 2, 0, 3) == [
        (FWD, 0),
        (FWD, 1),
        (BWD, 0),
        (FWD, 2),
        (BWD, 1),
        (BWD, 2),
    ]
    assert actions(Schedule.ONE_F_ONE_B, 2, 1, 3) == [
        (FWD, 0),
        (BWD, 0),
        (FWD, 1),
        (BWD, 1),
        (FWD, 2),
        (BWD, 2),
    ]
    assert actions(Schedule.GPIPE, 2, 0, 2) == [(FWD, 0), (FWD, 1), (BWD, 0), (BWD, 1)]


def test_shard_spec_fused_chunks_roundtrip():
    full = torch.arange(24.0).reshape(12, 2)
    a = ShardSpec((12, 2), 0, ((0, 3), (4, 7), (8, 11)))
    b = ShardSpec((12, 2), 0, ((3, 4), (7, 8), (11, 12)))
    pieces = [("w", a, a.slice(full)), ("w", b, b.slice(full))]
    assert torch.equal(assemble(pieces)["w"], full)


def test_weighted_loss_sums_to_full_batch_mean():
    per_sample = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
    parts = [per_sample[:6], per_sample[6:]]
    total = sum(weighted_loss(p.mean(), len(p), 8) for p in parts)
    assert torch.isclose(total, per_sample.mean())
    # averaging reducers (DDP / FSDP default) need the group size folded in
    assert torch.isclose(weighted_loss(parts[1].mean(), 2, 8, averaging_group=2), parts[1].mean() * 0.5)

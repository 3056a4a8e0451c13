"""Whale-style annotations → Plan, and the annotated ResNet-features + big-FC example runs exactly."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import max_rel, reference, rel

import tessera.runtime as tr
from tessera.plan import Device

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import whale_resnet_classifier as ex  # noqa: E402


def _model(replicas=2, shards=2):
    return ex.Factory(replicas, shards)(layer_range=None, tp=None)


def test_replicate_and_split_become_two_stages():
    tr.init(tr.Config(num_micro_batch=4))
    plan = tr.plan_from_annotations(_model(), 4, model_name="m", global_batch=16)
    s0, s1 = plan.stages
    assert (s0.layer_start, s0.layer_end, s0.dp_degree, s0.tp_degree) == (0, 4, 2, 1)
    assert (s1.layer_start, s1.layer_end, s1.dp_degree, s1.tp_degree) == (4, 5, 1, 2)
    assert [d.rank for d in s1.devices] == [2, 3]
    assert plan.micro_batches == 4 and plan.schedule.value == "1f1b"


def test_nested_data_parallelism_when_devices_are_a_multiple():
    tr.init(tr.Config(num_micro_batch=2))
    plan = tr.plan_from_annotations(_model(), 8, model_name="m", global_batch=16)
    s0, s1 = plan.stages
    assert (s0.dp_degree, s0.tp_degree, s1.dp_degree, s1.tp_degree) == (4, 1, 2, 2)


def test_hardware_aware_shares_and_ratios():
    devs = [Device(i, t, local_index=i) for i, t in enumerate(["a100", "v100", "a100", "v100"])]
    tr.init(tr.Config(num_micro_batch=2))
    plan = tr.plan_from_annotations(
        _model(), devs, model_name="m", global_batch=16, device_flops={"a100": 312.0, "v100": 125.0}
    )
    assert plan.stages[0].batch_shares == (11, 5)
    assert plan.stages[1].tp_ratios[0] == pytest.approx(312 / 437)


def test_auto_parallel_partitions_unannotated_models():
    import torch.nn as nn

    class Plain(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(6))

    cfg = tr.Config(num_micro_batch=4, num_task_graph=3, auto_parallel=True)
    plan = tr.plan_from_annotations(Plain(), 3, model_name="m", global_batch=8, config=cfg)
    assert [(s.layer_start, s.layer_end) for s in plan.stages] == [(0, 2), (2, 4), (4, 6)]


def test_annotations_do_not_leak_outside_their_scope():
    import torch.nn as nn

    with tr.replicate(2):
        inside = nn.Sequential(nn.Linear(2, 2))
    outside = nn.Sequential(nn.Linear(2, 2))
    from tessera.runtime.annotations import taskgraph_of

    assert taskgraph_of(inside).kind == "replicate"
    assert taskgraph_of(outside) is None


@pytest.mark.timeout(120)
def test_annotated_model_runs_exactly():
    flops = {"fast": 3.0, "slow": 1.0}
    tr.init(tr.Config(num_micro_batch=4))
    devs = [Device(i, t, local_index=i) for i, t in enumerate(["fast", "slow", "fast"])]
    dp_split = tr.plan_from_annotations(
        _model(2, 1), devs, model_name="m", global_batch=8, device_flops=flops
    )
    devs = [Device(i, t, local_index=i) for i, t in enumerate(["fast", "fast", "slow"])]
    tp_split = tr.plan_from_annotations(
        _model(1, 2), devs, model_name="m", global_batch=8, device_flops=flops
    )
    assert dp_split.stages[0].batch_shares == (6, 2) and tp_split.stages[1].tp_ratios == (0.75, 0.25)
    jobs = [
        (
            p,
            tr.RunOptions(
                steps=2, model=ex.Factory(r, s), capture_grads=True, pg_timeout_s=60, watchdog_s=90
            ),
        )
        for p, (r, s) in ((dp_split, (2, 1)), (tp_split, (1, 2)))
    ]
    for (p, o), res in zip(jobs, tr.launch_many(jobs), strict=True):
        losses, grads = reference(o.model, p, steps=2)
        assert max(rel(a, b) for a, b in zip(res.losses, losses, strict=True)) < 1e-5
        assert max_rel(res.grads, grads) < 1e-5

"""The optimizer over a TP rank's parameters: DTensor shards beside plain tensors must survive the
multi-tensor (foreach) update torch picks on CUDA (found on an H200: every TP plan's first step failed)."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

from tessera.dtensor_tp import fake_process_group
from tessera.runtime.engine import make_optimizer


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["adamw", "adam", "sgd"])
def test_mixed_dtensor_and_plain_parameters_step_with_foreach(kind, monkeypatch):
    with fake_process_group(2, 0):
        mesh = init_device_mesh("cpu", (2,))
        sharded = torch.nn.Parameter(distribute_tensor(torch.randn(4, 4), mesh, [Shard(0)]))
        plain = torch.nn.Parameter(torch.randn(4))
        for p in (sharded, plain):
            p.grad = torch.ones_like(p)
        opt = make_optimizer(kind, [sharded, plain], lr=0.1)
        for group in opt.param_groups:
            group["foreach"] = True  # what CUDA gets by default
        before = plain.detach().clone()
        opt.step()
        assert not torch.equal(plain.detach(), before)
        assert isinstance(sharded, DTensor) and set(opt.state) == {sharded, plain}
        assert [len(g["params"]) for g in opt.param_groups] == [1, 1]

"""The optimizer over a TP rank's parameters: DTensor shards beside plain tensors must survive the
multi-tensor (foreach) update torch picks on CUDA (found on an H200: every TP plan's first step failed)."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

from tessera.nn.dtensor_tp import fake_process_group
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


def test_fused_optimizer_choice(monkeypatch):
    p = [torch.nn.Parameter(torch.randn(4, 4))]
    monkeypatch.setenv("TESSERA_FUSED_OPTIMIZER", "auto")
    assert make_optimizer("adamw", p, lr=0.1).param_groups[0].get("fused") is None  # CPU: foreach, as before
    monkeypatch.setenv("TESSERA_FUSED_OPTIMIZER", "1")
    assert make_optimizer("adamw", p, lr=0.1).param_groups[0]["fused"] is True
    assert not make_optimizer("sgd", p, lr=0.1).param_groups[0].get("fused")  # SGD has no fused kernel here
    monkeypatch.setenv("TESSERA_FUSED_OPTIMIZER", "maybe")
    with pytest.raises(ValueError, match="TESSERA_FUSED_OPTIMIZER"):
        make_optimizer("adamw", p, lr=0.1)


@pytest.mark.timeout(300)
def test_fused_optimizer_resumes_from_a_checkpoint_exactly(tmp_path, monkeypatch):
    # the fused kernel keeps its step counters on the parameters' device: a resume must put them there
    from helpers import plan, stage
    from models import factory, n_layers

    from tessera.runtime import RunOptions, launch

    monkeypatch.setenv("TESSERA_FUSED_OPTIMIZER", "1")  # the spawned workers inherit it
    one = plan("gpt-tiny", [stage(0, n_layers("gpt-tiny"), [0])], micro=2)
    base = dict(model=factory("gpt-tiny"), pg_timeout_s=60, watchdog_s=120)
    full = launch(one, RunOptions(steps=4, **base))
    launch(one, RunOptions(steps=2, checkpoint_dir=str(tmp_path / "ck"), checkpoint_every=2, **base))
    rest = launch(one, RunOptions(steps=4, resume_from=str(tmp_path / "ck"), **base))
    assert [r.step for r in rest.records] == [2, 3]
    for a, b in zip(rest.losses, full.losses[2:], strict=True):
        assert abs(a - b) <= 1e-6 * abs(b), (rest.losses, full.losses)

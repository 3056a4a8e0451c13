"""ZeRO-3 under bf16 AMP runs as FSDP2 with a ``MixedPrecisionPolicy``: the layers compute on bf16 gathered
parameters (a forward pre-hook sees them), the optimizer steps fp32 shards with fp32 gradients, and the loss
and gradients stay within bf16 rounding of the fp32 single-process reference.

Tolerances: bf16 keeps 8 mantissa bits (relative rounding 2**-9 ≈ 2e-3 per operand); through a 4-layer tiny
model the loss lands within ~1e-3 and gradients within a few 1e-2 of fp32 (asserted: 1e-2 and 1.5e-1).
"""

from __future__ import annotations

import pytest
import torch
from helpers import max_rel, plan, reference, rel, run_on_gloo, stage
from models import factory, n_layers

NAME = "gpt-tiny"
LOSS_TOL = 1e-2
GRAD_TOL = 1.5e-1


def _plan():
    n = n_layers(NAME)
    return plan(NAME, [stage(0, n, [0, 1], dp=2, shares=(5, 3))], micro=2, zero=3, precision="bf16")


def _worker(rank: int, out: dict) -> None:
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from tessera.runtime import SyntheticData
    from tessera.runtime.engine import Trainer
    from tessera.runtime.shards import assemble

    p = _plan()
    t = Trainer(p, rank, factory(NAME), seed=0, learning_rate=1e-3, device=torch.device("cpu"))
    seen: list[torch.dtype] = []
    for layer in t.stage.layers:
        for sub in layer.modules():
            if isinstance(sub, torch.nn.Linear):
                sub.register_forward_pre_hook(lambda m, _: seen.append(m.weight.dtype))
    data = SyntheticData(0)
    inputs, targets = data.batch(t.stage.module, 0, p.global_batch, p.seq_len)
    torch.manual_seed(0)
    stats = t.step(0, inputs, targets, capture_grads=True)
    loss = torch.tensor([stats.loss])
    dist.all_reduce(loss)
    gathered: list = [None, None]
    dist.all_gather_object(gathered, t.captured_grads)
    if rank == 0:
        out["fsdp"] = t.fsdp
        out["gathered_dtypes"] = sorted({str(d) for d in seen})
        out["shard_dtypes"] = sorted({str(e.param.dtype) for e in t.entries if isinstance(e.param, DTensor)})
        out["grad_dtypes"] = sorted({str(m.grad.dtype) for m in t.masters if m.grad is not None})
        out["loss"] = float(loss.item())
        out["grads"] = assemble([piece for pieces in gathered for piece in pieces])
    t.close()


@pytest.mark.timeout(180)
def test_zero3_bf16_gathers_bf16_and_stays_close_to_reference():
    got = run_on_gloo(_worker)
    assert got["fsdp"]
    assert got["gathered_dtypes"] == ["torch.bfloat16"]  # every block Linear computed on bf16 weights
    assert got["shard_dtypes"] == ["torch.float32"]  # the optimizer's shards stay fp32
    assert got["grad_dtypes"] == ["torch.float32"]
    losses, grads = reference(factory(NAME), _plan(), steps=1)
    loss_err = rel(got["loss"], losses[0])
    grad_err = max_rel(got["grads"], grads)
    print(f"bf16 FSDP2 vs fp32 reference: loss {loss_err:.2e} grad {grad_err:.2e}")
    assert loss_err < LOSS_TOL
    assert grad_err < GRAD_TOL

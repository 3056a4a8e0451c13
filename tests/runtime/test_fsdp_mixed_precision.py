"""ZeRO-3 (and ZeRO-2) under bf16 AMP run as FSDP2 with a ``MixedPrecisionPolicy``: the layers compute on bf16 gathered
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


def _plan(zero: int):
    n = n_layers(NAME)
    return plan(NAME, [stage(0, n, [0, 1], dp=2, shares=(5, 3))], micro=2, zero=zero, precision="bf16")


def _worker(rank: int, out: dict) -> None:
    for zero in (3, 2):
        _one(rank, zero, out)


def _one(rank: int, zero: int, out: dict) -> None:
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from tessera.runtime import SyntheticData
    from tessera.runtime.engine import Trainer
    from tessera.runtime.shards import assemble

    p = _plan(zero)
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
        out[zero] = {
            "fsdp": t.fsdp,
            "gathered_dtypes": sorted({str(d) for d in seen}),
            "shard_dtypes": sorted({str(e.param.dtype) for e in t.entries if isinstance(e.param, DTensor)}),
            "grad_dtypes": sorted({str(m.grad.dtype) for m in t.masters if m.grad is not None}),
            "loss": float(loss.item()),
            "grads": assemble([piece for pieces in gathered for piece in pieces]),
        }
    t.close()


@pytest.mark.timeout(240)
def test_zero3_and_zero2_bf16_gather_bf16_and_stay_close_to_reference():
    runs = run_on_gloo(_worker)
    losses, grads = reference(factory(NAME), _plan(3), steps=1)
    for zero, got in runs.items():
        assert got["fsdp"], zero
        assert got["gathered_dtypes"] == ["torch.bfloat16"], zero  # every block Linear ran on bf16 weights
        assert got["shard_dtypes"] == ["torch.float32"], zero  # the optimizer's shards stay fp32
        assert got["grad_dtypes"] == ["torch.float32"], zero
        loss_err = rel(got["loss"], losses[0])
        grad_err = max_rel(got["grads"], grads)
        print(f"ZeRO-{zero} bf16 FSDP2 vs fp32 reference: loss {loss_err:.2e} grad {grad_err:.2e}")
        assert loss_err < LOSS_TOL, zero
        assert grad_err < GRAD_TOL, zero

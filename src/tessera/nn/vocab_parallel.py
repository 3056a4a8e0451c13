"""Megatron's parallel cross-entropy over logits sharded along the classes — shared by the runtime (the loss of
a vocab-parallel head) and the profiler (which times that head's loss on one device under a fake group).

It imports only torch, so a runtime worker that uses it loads nothing of Tessera but the plan and the torch
side.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Per-row cross-entropy of logits sharded along the classes (Megatron's parallel cross-entropy).

    Forward: the rows' max (MAX all-reduce), the target's logit from the rank that holds it and the sum of
    exponentials (SUM all-reduces of one value per row each). Backward needs no communication: the local
    softmax minus the one-hot of the local target columns. The softmax is kept in the exponentials' buffer, so
    the loss holds one fp32 copy of the local logits, as ``F.cross_entropy`` does of the full ones.
    """

    @staticmethod
    def forward(
        ctx, logits: torch.Tensor, targets: torch.Tensor, start: int, group: dist.ProcessGroup | None
    ):  # type: ignore[override]
        row_max = logits.max(dim=-1).values
        dist.all_reduce(row_max, op=dist.ReduceOp.MAX, group=group)
        shifted = logits - row_max.unsqueeze(-1)
        local = targets - start
        outside = (local < 0) | (local >= logits.shape[-1])
        local = local.masked_fill(outside, 0)
        picked = shifted.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
        dist.all_reduce(picked, group=group)
        softmax = shifted.exp_()
        sum_exp = softmax.sum(dim=-1)
        dist.all_reduce(sum_exp, group=group)
        softmax.div_(sum_exp.unsqueeze(-1))
        ctx.save_for_backward(softmax, local, outside)
        return sum_exp.log_() - picked

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        softmax, local, outside = ctx.saved_tensors
        rows = torch.arange(softmax.shape[0], device=softmax.device)
        softmax[rows, local] -= (~outside).to(softmax.dtype)
        return softmax.mul_(grad.unsqueeze(-1)), None, None, None


def vocab_parallel_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, start: int, group: dist.ProcessGroup | None
) -> torch.Tensor:
    """Mean cross-entropy over every row of ``logits`` [..., local classes] whose columns are classes
    ``start`` .. ``start + local`` of the full output — the same value on every rank of ``group``."""
    flat = logits.reshape(-1, logits.shape[-1]).float()
    return _VocabParallelCrossEntropy.apply(flat, targets.reshape(-1), start, group).mean()

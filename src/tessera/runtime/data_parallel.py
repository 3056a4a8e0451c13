"""Uneven data parallelism (Whale's hardware-aware replicate): loss weighting and Tessera's own gradient sync.

Replicas may compute different numbers of samples (batch shares ∝ device speed) and different numbers of
micro-batches. A local *mean* loss would then weight a slow replica's samples more than a fast one's (pitfall
1: 2.5e-2 gradient error). ``weighted_loss`` — the one helper every DP flavour uses — scales each local mean
by its share of the global batch, so a plain SUM of gradients over replicas is the full-batch gradient.

Gradients are synchronized by Tessera after the whole step (bucketed all-reduce, or reduce-to-owner under
ZeRO), never by DDP hooks: a DDP reducer armed per micro-batch issues a different number of collectives on
replicas with different micro-batch counts and hangs (pitfalls 2-3).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from tessera.runtime.shards import ShardSpec
from tessera.runtime.torch_parallel import local

BUCKET_BYTES = 25 * 2**20


def weighted_loss(
    local_mean: torch.Tensor, local_samples: int, global_samples: int, averaging_group: int = 1
):
    """``local_mean × local/global`` (× the group size when the reducer averages instead of summing).

    Every sample carries the same number of tokens here, so sample weighting equals token weighting.
    """
    return local_mean * (local_samples / global_samples * averaging_group)


def _buckets(params: Sequence[nn.Parameter], bucket_bytes: int) -> list[list[nn.Parameter]]:
    """Consecutive parameters of one dtype packed up to ``bucket_bytes``, in reverse (backward) order."""
    out: list[list[nn.Parameter]] = []
    cur: list[nn.Parameter] = []
    size = 0
    for p in reversed(list(params)):
        nbytes = p.numel() * p.element_size()
        if cur and (size + nbytes > bucket_bytes or cur[0].dtype != p.dtype):
            out.append(cur)
            cur, size = [], 0
        cur.append(p)
        size += nbytes
    if cur:
        out.append(cur)
    return out


def _grads(bucket: list[nn.Parameter]) -> list[torch.Tensor]:
    for p in bucket:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    return [local(p.grad) for p in bucket]  # type: ignore[arg-type]  # DTensor (TP) grads: the local shards


@dataclass
class GradSync:
    """SUM of gradients over one DP group; with ZeRO ≥ 2 each bucket is reduced only to its owner."""

    params: list[nn.Parameter]
    group: dist.ProcessGroup | None
    group_ranks: tuple[int, ...]
    owners: dict[int, int] | None = None  # id(param) -> owning group index (ZeRO); None = everyone
    reduce_to_owner: bool = False
    bucket_bytes: int = BUCKET_BYTES

    def __post_init__(self) -> None:
        if self.owners is None:
            self._buckets = [(None, b) for b in _buckets(self.params, self.bucket_bytes)]
        else:
            by_owner: dict[int, list[nn.Parameter]] = {}
            for p in self.params:
                by_owner.setdefault(self.owners[id(p)], []).append(p)
            self._buckets = [
                (o, b) for o, ps in sorted(by_owner.items()) for b in _buckets(ps, self.bucket_bytes)
            ]

    def __call__(self) -> None:
        if self.group is None:
            for p in self.params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            return
        works = []
        for owner, bucket in self._buckets:
            grads = _grads(bucket)
            flat = _flatten_dense_tensors(grads)
            if self.reduce_to_owner and owner is not None:
                work = dist.reduce(flat, dst=self.group_ranks[owner], group=self.group, async_op=True)
            else:
                work = dist.all_reduce(flat, group=self.group, async_op=True)
            works.append((work, flat, grads))
        for work, flat, grads in works:
            work.wait()
            for g, f in zip(grads, _unflatten_dense_tensors(flat, grads), strict=True):
                g.copy_(f)


def assign_owners(params: Sequence[nn.Parameter], n: int) -> dict[int, int]:
    """ZeRO ownership: largest parameters first, each to the least-loaded member (deterministic)."""
    load = [0] * n
    owners: dict[int, int] = {}
    order = sorted(range(len(params)), key=lambda i: (-params[i].numel(), i))
    for i in order:
        o = min(range(n), key=lambda k: (load[k], k))
        owners[id(params[i])] = o
        load[o] += params[i].numel()
    return owners


def broadcast_from_owners(
    params: Sequence[nn.Parameter],
    owners: dict[int, int],
    group: dist.ProcessGroup,
    group_ranks: tuple[int, ...],
) -> None:
    """After the owners' optimizer step, every replica receives the updated parameters (ZeRO-1/2)."""
    by_owner: dict[int, list[nn.Parameter]] = {}
    for p in params:
        by_owner.setdefault(owners[id(p)], []).append(p)
    works = []
    for owner, ps in sorted(by_owner.items()):
        for bucket in _buckets(ps, BUCKET_BYTES):
            data = [local(p.data) for p in bucket]
            flat = _flatten_dense_tensors(data)
            works.append(
                (dist.broadcast(flat, src=group_ranks[owner], group=group, async_op=True), flat, data)
            )
    for work, flat, data in works:
        work.wait()
        for d, f in zip(data, _unflatten_dense_tensors(flat, data), strict=True):
            d.copy_(f)


def sync_tied(
    params: Sequence[nn.Parameter],
    specs: Sequence[ShardSpec],
    groups: Sequence[dist.ProcessGroup],
    tp_rank: int,
) -> None:
    """Sum a tied parameter's gradient over every stage holding a member, in place of its DP sync.

    Every rank places its gradient in a zero tensor of the full shape — a vocab shard in its rows, a
    replicated copy whole but only from TP rank 0 (its siblings hold identical copies) — so one SUM over the
    tie group yields exactly (embedding use + head use) summed over all replicas, whatever TP degree and
    split each stage has; each rank keeps its own rows of it.
    """
    for p, spec, g in zip(params, specs, groups, strict=True):
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        if spec.replicated:
            if tp_rank != 0:
                p.grad.zero_()
            dist.all_reduce(p.grad, group=g)
            continue
        full = p.grad.new_zeros(spec.full_shape)
        spec.place(full, p.grad)
        dist.all_reduce(full, group=g)
        p.grad.copy_(spec.slice(full))

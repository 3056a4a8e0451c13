"""Uneven data parallelism (Whale's hardware-aware replicate): loss weighting and Tessera's own gradient sync.

Replicas may compute different numbers of samples (batch shares ∝ device speed) and different numbers of
micro-batches. A local *mean* loss would then weight a slow replica's samples more than a fast one's (pitfall
1: 2.5e-2 gradient error). ``weighted_loss`` — the one helper every DP flavour uses — scales each local mean
by its share of the global batch, so a plain SUM of gradients over replicas is the full-batch gradient.

Gradients are synchronized by Tessera (bucketed all-reduce, or reduce-to-owner under ZeRO), never by DDP's
reducer: one armed per micro-batch issues a different number of collectives on replicas with different
micro-batch counts and hangs (pitfalls 2-3). Tessera overlaps the sync with backward as DDP does, but only
during each replica's own LAST micro-batch (``GradSync.arm``): every replica then issues each bucket's
collective exactly once, in bucket order.
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
    """SUM of gradients over one DP group; with ZeRO ≥ 2 each bucket is reduced only to its owner.

    With ``overlap`` (DDP's overlap, done so uneven replicas stay exact): ``arm(n)`` before a step tells the
    sync how many backward passes this replica runs; a post-accumulate-grad hook counts each parameter's
    accumulations, and a bucket whose every parameter has received its n-th — the replica's LAST
    micro-batch — is reduced asynchronously while backward goes on. Buckets launch strictly in bucket order
    (a ready bucket waits for its predecessors, as DDP's reducer does), so every replica issues the same
    collectives in the same order whatever its micro-batch count; ``__call__`` launches the buckets that
    were not ready (a parameter without a gradient, a replica without rows) and waits for all. The values
    reduced are the ones the after-backward sync reduced, so results are bit-identical to it.
    """

    params: list[nn.Parameter]
    group: dist.ProcessGroup | None
    group_ranks: tuple[int, ...]
    owners: dict[int, int] | None = None  # id(param) -> owning group index (ZeRO); None = everyone
    reduce_to_owner: bool = False
    bucket_bytes: int = BUCKET_BYTES
    overlap: bool = False

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
        self._bucket_of = {id(p): i for i, (_, b) in enumerate(self._buckets) for p in b}
        self._works: list[tuple[object, torch.Tensor, list[torch.Tensor]]] = []
        self._launched = 0  # buckets [0, _launched) are in flight this step
        self._early = 0
        self._armed = False
        self._passes = 0
        self._counts: dict[int, int] = {}
        self._pending = [0] * len(self._buckets)  # parameters of each bucket not yet complete this step
        self._handles = []
        if self.overlap and self.group is not None:
            self._handles = [p.register_post_accumulate_grad_hook(self._on_grad) for p in self.params]

    @property
    def launched_in_backward(self) -> int:
        """Buckets of the last step whose reduction started during backward (the rest: after it)."""
        return self._early

    def arm(self, backward_passes: int) -> None:
        """Count gradients from now on: this replica runs ``backward_passes`` backward passes this step."""
        self._armed = bool(self._handles) and backward_passes > 0
        self._passes = backward_passes
        self._counts = {}
        self._pending = [len(b) for _, b in self._buckets]
        self._works, self._launched, self._early = [], 0, 0

    def _on_grad(self, p: nn.Parameter) -> None:
        if not self._armed:
            return
        n = self._counts.get(id(p), 0) + 1
        self._counts[id(p)] = n
        i = self._bucket_of[id(p)]
        if n > self._passes or i < self._launched:
            raise RuntimeError(
                f"gradient sync: a parameter received gradient {n} of {self._passes} expected backward "
                "passes after its bucket was reduced (a backward ran outside the step's micro-batches?)"
            )
        if n == self._passes:
            self._pending[i] -= 1
            while self._launched < len(self._buckets) and self._pending[self._launched] == 0:
                self._launch(self._launched)
                self._early += 1

    def _launch(self, i: int) -> None:
        owner, bucket = self._buckets[i]
        grads = _grads(bucket)
        flat = _flatten_dense_tensors(grads)
        if self.reduce_to_owner and owner is not None:
            work = dist.reduce(flat, dst=self.group_ranks[owner], group=self.group, async_op=True)
        else:
            work = dist.all_reduce(flat, group=self.group, async_op=True)
        self._works.append((work, flat, grads))
        self._launched = i + 1

    def __call__(self) -> None:
        self._armed = False
        if self.group is None:
            for p in self.params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            return
        while self._launched < len(self._buckets):
            self._launch(self._launched)
        for work, flat, grads in self._works:
            work.wait()  # type: ignore[attr-defined]
            for g, f in zip(grads, _unflatten_dense_tensors(flat, grads), strict=True):
                g.copy_(f)
        self._works, self._launched = [], 0

    def close(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


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

"""DDP-style overlap of the DP gradient sync: buckets reduced during each replica's LAST micro-batch backward.

Two gloo replicas run different numbers of micro-batches (3 and 1) over a small MLP with a parameter that
gets no gradient; the overlapped sync must give bit-identical gradients to the sync after backward, start
every bucket whose parameters all received their gradient during backward, and issue the same collectives
in the same order on both replicas (else gloo would hang or mismatch sizes).
"""

from __future__ import annotations

import pytest
import torch
from helpers import run_on_gloo
from torch import nn


def _model() -> nn.Module:
    torch.manual_seed(0)
    m = nn.Sequential(*[nn.Linear(16, 16) for _ in range(6)])
    m.unused = nn.Parameter(torch.ones(3))  # never receives a gradient: its bucket launches after backward
    return m


def _grads(rank: int, overlap: bool, reduce_to_owner: bool) -> tuple[dict, int, int]:
    import torch.distributed as dist

    from tessera.runtime.data_parallel import GradSync, assign_owners

    m = _model()
    params = list(m.parameters())
    owners = assign_owners(params, 2) if reduce_to_owner else None
    sync = GradSync(
        params,
        dist.group.WORLD,
        (0, 1),
        owners=owners,
        reduce_to_owner=reduce_to_owner,
        bucket_bytes=2 * 17 * 16 * 4,  # two Linear layers per bucket
        overlap=overlap,
    )
    passes = 3 if rank == 0 else 1
    sync.arm(passes)
    gen = torch.Generator().manual_seed(10 + rank)
    for _ in range(passes):
        m(torch.randn(4, 16, generator=gen)).pow(2).sum().backward()
    sync()
    grads = {n: p.grad.clone() for n, p in m.named_parameters()}
    sync.close()
    return grads, sync.launched_in_backward, len(sync._buckets)


def _worker(rank: int, out: dict) -> None:
    for zero in (False, True):
        ref, _, _ = _grads(rank, overlap=False, reduce_to_owner=zero)
        got, early, n_buckets = _grads(rank, overlap=True, reduce_to_owner=zero)
        owners_ok = all(torch.equal(ref[k], got[k]) for k in ref)
        out[(rank, zero)] = (owners_ok, early, n_buckets)


@pytest.mark.timeout(120)
def test_overlapped_sync_is_bit_identical_and_starts_in_backward():
    got = run_on_gloo(_worker)
    for (rank, zero), (equal, early, n_buckets) in got.items():
        assert equal, (rank, zero)
        assert n_buckets >= 3
        # every bucket but those holding the never-used parameter started during backward
        assert 1 <= early < n_buckets, (rank, zero, early, n_buckets)

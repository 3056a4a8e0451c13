"""Shard specs: where a rank's local tensor lives inside the full (unsharded) tensor.

One description serves three jobs — loading the initial weights into uneven TP shards, writing checkpoints
that any plan can read back, and assembling full gradients for exactness tests — so a layout change (fused
QKV, uneven heads) is described once and every consumer agrees on it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ShardSpec:
    """The local tensor is ``cat(full.narrow(dim, a, b - a) for a, b in ranges)`` along ``dim``.

    ``dim = -1`` (no ranges) means the tensor is replicated: the local tensor is the full tensor.
    """

    full_shape: tuple[int, ...]
    dim: int = -1
    ranges: tuple[tuple[int, int], ...] = ()

    @property
    def replicated(self) -> bool:
        return self.dim < 0

    @property
    def local_shape(self) -> tuple[int, ...]:
        """The shape of the local tensor: the full shape with ``dim`` cut to the ranges' total length."""
        if self.replicated:
            return self.full_shape
        shape = list(self.full_shape)
        shape[self.dim] = sum(b - a for a, b in self.ranges)
        return tuple(shape)

    def slice(self, full: torch.Tensor) -> torch.Tensor:
        if tuple(full.shape) != self.full_shape:
            raise ValueError(f"full tensor of shape {tuple(full.shape)}, spec expects {self.full_shape}")
        if self.replicated:
            return full.clone()
        return torch.cat([full.narrow(self.dim, a, b - a) for a, b in self.ranges], dim=self.dim).clone()

    def place(self, full: torch.Tensor, local: torch.Tensor) -> None:
        """Write ``local`` into its place in ``full`` (the inverse of ``slice``)."""
        if self.replicated:
            full.copy_(local)
            return
        pos = 0
        for a, b in self.ranges:
            full.narrow(self.dim, a, b - a).copy_(local.narrow(self.dim, pos, b - a))
            pos += b - a


def replicated(shape: Iterable[int]) -> ShardSpec:
    return ShardSpec(tuple(shape))


def assemble(pieces: Iterable[tuple[str, ShardSpec, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Full tensors from (fqn, spec, local) pieces; every element must be covered by some piece."""
    out: dict[str, torch.Tensor] = {}
    covered: dict[str, torch.Tensor] = {}
    for fqn, spec, local in pieces:
        if fqn not in out:
            out[fqn] = torch.zeros(spec.full_shape, dtype=local.dtype)
            covered[fqn] = torch.zeros(spec.full_shape, dtype=torch.bool)
        spec.place(out[fqn], local.detach().cpu().to(out[fqn].dtype))
        spec.place(covered[fqn], torch.ones_like(local, dtype=torch.bool, device="cpu"))
    missing = [k for k, c in covered.items() if not bool(c.all())]
    if missing:
        raise ValueError(f"shards do not cover the full tensors of {', '.join(sorted(missing)[:5])}")
    return out

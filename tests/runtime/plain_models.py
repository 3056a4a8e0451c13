"""A user's plain model with no shard-aware code: Whale's ``split`` must shard it by itself.

Four layers, one per pattern Tessera's automatic split knows: token + position embeddings summed into a
Linear (both embeddings cut along their columns, the Linear row-parallel, no communication before it), a
pre-norm GELU MLP with a residual (column → row), a pre-norm SwiGLU with a residual (gate and up columns →
down row), and a norm + output head (a lone Linear: columns, output all-gathered). ``tp`` is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

import tessera.runtime as tr

VOCAB, HIDDEN, FFN, SEQ = 50, 32, 48, 16


class Embed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok, self.pos, self.mix = (
            nn.Embedding(VOCAB, HIDDEN),
            nn.Embedding(SEQ, HIDDEN),
            nn.Linear(HIDDEN, HIDDEN),
        )

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.mix(self.tok(ids) + self.pos(torch.arange(ids.shape[1])))


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.fc1, self.fc2 = nn.LayerNorm(HIDDEN), nn.Linear(HIDDEN, FFN), nn.Linear(FFN, HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class SwiGLU(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(HIDDEN)
        self.gate, self.up = nn.Linear(HIDDEN, FFN, bias=False), nn.Linear(HIDDEN, FFN, bias=False)
        self.down = nn.Linear(FFN, HIDDEN, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.out = nn.LayerNorm(HIDDEN), nn.Linear(HIDDEN, VOCAB)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(x))


MAKERS = (Embed, Mlp, SwiGLU, Head)


class PlainLM(nn.Module):
    """``split_from``: the first layer inside ``tr.split(shards)`` (the ones before it in ``tr.replicate(1)``)."""

    def __init__(
        self, *, layer_range=None, tp=None, attention="flash", recompute="none", split_from=0, shards=None
    ) -> None:
        super().__init__()
        start, end = layer_range or (0, len(MAKERS))
        built = [make() if start <= i < end else None for i, make in enumerate(MAKERS)]
        for scope, part in ((tr.replicate(1), built[:split_from]), (tr.split(shards), built[split_from:])):
            with scope:  # registration inside the scope tags the layers
                nn.ModuleList([m for m in part if m is not None])
        self.layers = nn.Sequential(*[m for m in built if m is not None])

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.layers(ids)

    def loss(self, output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output.reshape(-1, VOCAB).float(), targets.reshape(-1))

    def make_batch(self, batch_size, seq_len=SEQ, *, device=None, generator=None):
        ids = torch.randint(0, VOCAB, (batch_size, seq_len), generator=generator)
        return ids, torch.randint(0, VOCAB, (batch_size, seq_len), generator=generator)


@dataclass(frozen=True)
class PlainFactory:
    split_from: int = 0
    shards: int | None = None

    def __call__(self, *, layer_range, tp, attention="flash", recompute="none") -> PlainLM:
        return PlainLM(layer_range=layer_range, tp=tp, split_from=self.split_from, shards=self.shards)

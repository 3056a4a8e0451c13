"""Tiny GPT / LLaMA with the zoo's BlockModel interface, for runtime tests before (and beside) the zoo.

Same contract as ``tessera.models.zoo.build_model``: ``layer_range`` selects model layers
[embedding, block_0..block_{L-1}, head]; ``tp=TPShare(...)`` builds blocks with LOCAL shard shapes (whole
heads, FFN columns) and no communication — the runtime adds it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class TPShare:
    degree: int
    rank: int
    ratios: tuple[float, ...] = ()


def _split(units: int, share: TPShare | None) -> int:
    if share is None or share.degree == 1:
        return units
    ratios = share.ratios or tuple(1.0 / share.degree for _ in range(share.degree))
    raw = [units * r for r in ratios]
    base = [max(1, math.floor(x)) for x in raw]
    order = sorted(range(len(raw)), key=lambda i: raw[i] - math.floor(raw[i]), reverse=True)
    i = 0
    while sum(base) < units:
        base[order[i % len(order)]] += 1
        i += 1
    return base[share.rank]


@dataclass(frozen=True)
class TinyArch:
    family: str = "gpt"
    hidden: int = 32
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 4
    ffn: int = 64
    vocab: int = 64
    max_pos: int = 64
    tied: bool = False


class Embedding(nn.Module):
    def __init__(self, a: TinyArch) -> None:
        super().__init__()
        self.tok = nn.Embedding(a.vocab, a.hidden)
        self.pos = nn.Embedding(a.max_pos, a.hidden) if a.family == "gpt" else None

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.tok(idx)
        if self.pos is not None:
            h = h + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return h


def _rope(x: torch.Tensor) -> torch.Tensor:
    b, t, n, d = x.shape
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    ang = torch.outer(torch.arange(t, dtype=torch.float32), inv)
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, a: TinyArch, tp: TPShare | None) -> None:
        super().__init__()
        self.hd = a.hidden // a.n_heads
        self.gqa = a.family == "llama"
        if self.gqa:  # split whole kv groups so every local q head keeps its own k/v head
            kv = _split(a.n_kv_heads, tp)
            heads = kv * (a.n_heads // a.n_kv_heads)
            self.q = nn.Linear(a.hidden, heads * self.hd, bias=False)
            self.k = nn.Linear(a.hidden, kv * self.hd, bias=False)
            self.v = nn.Linear(a.hidden, kv * self.hd, bias=False)
        else:
            heads = _split(a.n_heads, tp)
            self.qkv = nn.Linear(a.hidden, 3 * heads * self.hd)
        self.proj = nn.Linear(heads * self.hd, a.hidden, bias=not self.gqa)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        if self.gqa:
            q = self.q(x).view(b, t, -1, self.hd)
            k = self.k(x).view(b, t, -1, self.hd)
            v = self.v(x).view(b, t, -1, self.hd)
            q, k = _rope(q), _rope(k)
            rep = q.shape[2] // k.shape[2]
            k = k.repeat_interleave(rep, dim=2)
            v = v.repeat_interleave(rep, dim=2)
        else:
            q, k, v = self.qkv(x).view(b, t, 3, -1, self.hd).unbind(2)
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        return self.proj(y.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, a: TinyArch, tp: TPShare | None) -> None:
        super().__init__()
        cols = _split(a.ffn, tp)
        self.swiglu = a.family == "llama"
        if self.swiglu:
            self.gate = nn.Linear(a.hidden, cols, bias=False)
            self.up = nn.Linear(a.hidden, cols, bias=False)
            self.down = nn.Linear(cols, a.hidden, bias=False)
        else:
            self.fc_in = nn.Linear(a.hidden, cols)
            self.fc_out = nn.Linear(cols, a.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu:
            return self.down(F.silu(self.gate(x)) * self.up(x))
        return self.fc_out(F.gelu(self.fc_in(x)))


class Block(nn.Module):
    def __init__(self, a: TinyArch, tp: TPShare | None) -> None:
        super().__init__()
        norm = nn.RMSNorm if a.family == "llama" else nn.LayerNorm
        self.ln1, self.ln2 = norm(a.hidden), norm(a.hidden)
        self.attn = Attention(a, tp)
        self.mlp = MLP(a, tp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Head(nn.Module):
    def __init__(self, a: TinyArch) -> None:
        super().__init__()
        self.ln = nn.RMSNorm(a.hidden) if a.family == "llama" else nn.LayerNorm(a.hidden)
        self.out = nn.Linear(a.hidden, a.vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.ln(x))


class BlockModel(nn.Module):
    def __init__(self, a: TinyArch, layer_range: tuple[int, int] | None, tp: TPShare | None) -> None:
        super().__init__()
        self.arch = a
        total = a.n_layers + 2
        start, end = layer_range or (0, total)
        mods: list[nn.Module] = []
        for i in range(start, end):
            if i == 0:
                mods.append(Embedding(a))
            elif i == total - 1:
                mods.append(Head(a))
            else:
                mods.append(Block(a, tp))
        self.layers = nn.ModuleList(mods)
        if a.tied and start == 0 and end == total:
            mods[-1].out.weight = mods[0].tok.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x

    def loss(self, output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output.flatten(0, -2).float(), targets.flatten())

    def make_batch(self, batch_size: int, seq_len: int, device=None, generator=None):
        tok = torch.randint(0, self.arch.vocab, (batch_size, seq_len + 1), generator=generator)
        tok = tok.to(device) if device is not None else tok
        return tok[:, :-1].contiguous(), tok[:, 1:].contiguous()


ARCHS = {
    "gpt-tiny": TinyArch("gpt"),
    "llama-tiny": TinyArch("llama", n_heads=8, n_kv_heads=4),
    "gpt-tiny-tied": TinyArch("gpt", tied=True),
}


def build_model(name, *, attention="flash", recompute="none", layer_range=None, tp=None) -> BlockModel:
    return BlockModel(ARCHS[name], layer_range, tp)


@dataclass(frozen=True)
class TinyModel:
    """A runtime ``ModelFactory`` for the tiny models (picklable, so it travels to spawned workers)."""

    name: str

    def __call__(self, *, layer_range, tp, attention="flash", recompute="none") -> BlockModel:
        return build_model(
            self.name, attention=attention, recompute=recompute, layer_range=layer_range, tp=tp
        )

    @property
    def n_layers(self) -> int:
        return ARCHS[self.name].n_layers + 2

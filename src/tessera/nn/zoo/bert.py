"""BERT (masked LM) in PyTorch: embeddings, post-LN bidirectional encoder blocks, MLM head.

TP names: ``embedding.tok`` (vocab rows, partial-sum output), ``block.attn.{q,k,v,proj}``,
``block.mlp.{fc_in,fc_out}``, ``head.decoder`` (vocab rows and bias; tied to ``embedding.tok``); the
head's ``transform`` and all LayerNorms are replicated. Every sequence is one segment (token type 0).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tessera.models.spec import TransformerArch
from tessera.nn.common import BlockModel, BuildOptions, Dropout, GeluMLP, linear
from tessera.nn.zoo.transformer import (
    TransformerBlock,
    VocabEmbedding,
    VocabHead,
    transformer_model,
    vocab_shard,
)

NORM_EPS = 1e-12


class BertEmbedding(VocabEmbedding):
    """Token + position + token-type-0 embeddings, LayerNorm, dropout (positions/types by slicing)."""

    def __init__(self, arch: TransformerArch, opts: BuildOptions) -> None:
        super().__init__(arch, opts)
        self.pos = nn.Parameter(torch.empty(arch.max_positions, arch.hidden))
        self.token_type = nn.Parameter(torch.empty(arch.type_vocab, arch.hidden))
        self.norm = nn.LayerNorm(arch.hidden, eps=NORM_EPS)
        self.dropout = Dropout(arch.dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.pos, std=0.02)
        nn.init.normal_(self.token_type, std=0.02)

    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids) + self.pos[: ids.shape[1]] + self.token_type[0]
        return self.dropout(self.norm(x))


class BertBlock(TransformerBlock):
    """Post-LN: x = ln_1(x + attn(x)); x = ln_2(x + mlp(x))."""

    def __init__(self, arch: TransformerArch, i: int, opts: BuildOptions) -> None:
        super().__init__(arch, i, opts)
        self.attn = self.self_attention(arch, opts)
        self.ln_1 = nn.LayerNorm(arch.hidden, eps=NORM_EPS)
        self.mlp = GeluMLP(arch, tp=opts.tp)
        self.ln_2 = nn.LayerNorm(arch.hidden, eps=NORM_EPS)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln_1(x + self.attn(x))
        return self.ln_2(x + self.mlp(x))


class BertHead(VocabHead):
    """MLM head: GELU(transform(x)) -> LayerNorm -> decoder to (this rank's rows of) the vocabulary."""

    projection = "decoder"

    def __init__(self, arch: TransformerArch, opts: BuildOptions) -> None:
        super().__init__(arch)
        self.transform = linear(arch.hidden, arch.hidden, bias=True)
        self.norm = nn.LayerNorm(arch.hidden, eps=NORM_EPS)
        self.decoder = linear(arch.hidden, vocab_shard(arch, opts.tp)[0], bias=True)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.norm(F.gelu(self.transform(x))))


def build(arch: TransformerArch, **options: Any) -> BlockModel:
    """Layers ``layer_range`` of a BERT (all by default), ``options`` a ``BuildOptions``'s fields."""
    opts = BuildOptions(**options)
    return transformer_model(arch, opts, embedding=BertEmbedding, block=BertBlock, head=BertHead)

"""GPT in PyTorch (nanoGPT-like): embedding, pre-LN blocks, head — one pipeline-cuttable layer each.

TP names: ``embedding.tok`` (vocab rows; its output is a partial sum under TP), ``block.attn.{q,k,v,proj}``,
``block.mlp.{fc_in,fc_out}``, ``head.out`` (vocab rows, tied to ``embedding.tok`` when both are built).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tessera.models.spec import TransformerArch
from tessera.nn.common import BlockModel, BuildOptions, Dropout, GeluMLP
from tessera.nn.zoo.transformer import LMHead, TransformerBlock, VocabEmbedding, transformer_model


class GPTEmbedding(VocabEmbedding):
    """Token + learned position embeddings, then dropout. Positions are added by slicing the table
    (no saved position ids); they stay whole under TP."""

    def __init__(self, arch: TransformerArch, opts: BuildOptions) -> None:
        super().__init__(arch, opts)
        self.pos = nn.Parameter(torch.empty(arch.max_positions, arch.hidden))
        self.dropout = Dropout(arch.dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.pos, std=0.01)

    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.tok(ids) + self.pos[: ids.shape[1]])


class GPTBlock(TransformerBlock):
    """x + attn(ln_1(x)), then x + mlp(ln_2(x)); ``mlp`` given (MoE's) or a GELU MLP."""

    def __init__(
        self, arch: TransformerArch, i: int, opts: BuildOptions, *, mlp: nn.Module | None = None
    ) -> None:
        super().__init__(arch, i, opts)
        self.ln_1 = nn.LayerNorm(arch.hidden)
        self.attn = self.self_attention(arch, opts)
        self.ln_2 = nn.LayerNorm(arch.hidden)
        self.mlp = mlp if mlp is not None else GeluMLP(arch, tp=opts.tp)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPTHead(LMHead):
    """Final LayerNorm and the output projection ``out`` (tied to ``embedding.tok`` when both are built)."""

    def __init__(self, arch: TransformerArch, opts: BuildOptions) -> None:
        super().__init__(arch, opts, norm=nn.LayerNorm(arch.hidden))


def build(arch: TransformerArch, **options: Any) -> BlockModel:
    """Layers ``layer_range`` of a GPT (all by default), ``options`` a ``BuildOptions``'s fields."""
    return transformer_model(
        arch, BuildOptions(**options), embedding=GPTEmbedding, block=GPTBlock, head=GPTHead
    )

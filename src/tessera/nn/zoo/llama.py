"""LLaMA in PyTorch: token embedding, pre-RMSNorm blocks with RoPE + GQA + SwiGLU, untied head.

TP names: ``embedding.tok`` (vocab rows, partial-sum output), ``block.attn.{q,k,v,proj}`` (whole kv groups
per rank), ``block.mlp.{gate,up,down}``, ``head.out`` (vocab rows). Each block keeps its own RoPE cos/sin
tables as non-persistent buffers of ``max_seq_len`` rows (recomputed, never checkpointed).
"""

from __future__ import annotations

from typing import Any

import torch

from tessera.models.spec import TransformerArch
from tessera.nn.common import BlockModel, BuildOptions, RMSNorm, SwiGLU
from tessera.nn.zoo.transformer import LMHead, TransformerBlock, VocabEmbedding, transformer_model

NORM_EPS = 1e-5


class LlamaBlock(TransformerBlock):
    """x + attn(attn_norm(x)), then x + mlp(mlp_norm(x)); RoPE tables of ``max_seq_len`` rows (default
    ``arch.max_positions``)."""

    def __init__(self, arch: TransformerArch, i: int, opts: BuildOptions) -> None:
        super().__init__(arch, i, opts)
        self.attn_norm = RMSNorm(arch.hidden, NORM_EPS)
        self.attn = self.self_attention(arch, opts, rope_rows=opts.max_seq_len or arch.max_positions)
        self.mlp_norm = RMSNorm(arch.hidden, NORM_EPS)
        self.mlp = SwiGLU(arch, tp=opts.tp)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class LlamaHead(LMHead):
    """Final RMSNorm and the untied output projection ``out``."""

    def __init__(self, arch: TransformerArch, opts: BuildOptions) -> None:
        super().__init__(arch, opts, norm=RMSNorm(arch.hidden, NORM_EPS))


def build(arch: TransformerArch, **options: Any) -> BlockModel:
    """Layers ``layer_range`` of a LLaMA (all by default), ``options`` a ``BuildOptions``'s fields."""
    opts = BuildOptions(**options)
    return transformer_model(arch, opts, embedding=VocabEmbedding, block=LlamaBlock, head=LlamaHead)

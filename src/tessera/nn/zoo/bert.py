"""BERT (masked LM) in PyTorch: embeddings, post-LN bidirectional encoder blocks, MLM head.

TP names: ``embedding.tok`` (vocab rows, partial-sum output), ``block.attn.{q,k,v,proj}``,
``block.mlp.{fc_in,fc_out}``, ``head.decoder`` (vocab rows and bias; tied to ``embedding.tok``); the
head's ``transform`` and all LayerNorms are replicated. Every sequence is one segment (token type 0).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tessera.models.spec import TPShard, TransformerArch
from tessera.nn.common import (
    Block,
    BlockModel,
    Dropout,
    GeluMLP,
    SelfAttention,
    TokenEmbedding,
    TPShare,
    check_modes,
    linear,
)
from tessera.nn.zoo.gpt import transformer_model, vocab_shard

NORM_EPS = 1e-12


class BertEmbedding(Block):
    """Token + position + token-type-0 embeddings, LayerNorm, dropout (positions/types by slicing)."""

    kind = "embedding"
    tp_shard = TPShard.VOCAB

    def __init__(self, arch: TransformerArch, *, tp: TPShare | None) -> None:
        super().__init__("embedding")
        rows, start, sharded = vocab_shard(arch, tp)
        self.tp_units = arch.vocab
        self.tok = TokenEmbedding(rows, arch.hidden, start, sharded)
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


class BertBlock(Block):
    """Post-LN: x = ln_1(x + attn(x)); x = ln_2(x + mlp(x))."""

    kind = "transformer"
    tp_shard = TPShard.HEADS

    def __init__(
        self, arch: TransformerArch, i: int, *, attention: str, recompute: str, tp: TPShare | None
    ) -> None:
        super().__init__(f"block_{i}", recompute_full=recompute == "full")
        self.tp_units = arch.n_kv_heads
        self.attn = SelfAttention(arch, attention=attention, selective=recompute == "selective", tp=tp)
        self.ln_1 = nn.LayerNorm(arch.hidden, eps=NORM_EPS)
        self.mlp = GeluMLP(arch, tp=tp)
        self.ln_2 = nn.LayerNorm(arch.hidden, eps=NORM_EPS)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln_1(x + self.attn(x))
        return self.ln_2(x + self.mlp(x))


class BertHead(Block):
    """MLM head: GELU(transform(x)) -> LayerNorm -> decoder to (this rank's rows of) the vocabulary."""

    kind = "head"
    tp_shard = TPShard.VOCAB

    def __init__(self, arch: TransformerArch, *, tp: TPShare | None) -> None:
        super().__init__("head")
        self.tp_units = arch.vocab
        self.transform = linear(arch.hidden, arch.hidden, bias=True)
        self.norm = nn.LayerNorm(arch.hidden, eps=NORM_EPS)
        self.decoder = linear(arch.hidden, vocab_shard(arch, tp)[0], bias=True)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.norm(F.gelu(self.transform(x))))


def build(
    arch: TransformerArch,
    *,
    attention: str = "flash",
    recompute: str = "none",
    layer_range: tuple[int, int] | None = None,
    tp: TPShare | None = None,
    max_seq_len: int | None = None,
    device: torch.device | str | None = None,
) -> BlockModel:
    check_modes(attention, recompute)
    return transformer_model(
        arch,
        layer_range=layer_range,
        tp=tp,
        device=device,
        embedding=lambda: BertEmbedding(arch, tp=tp),
        block=lambda i: BertBlock(arch, i, attention=attention, recompute=recompute, tp=tp),
        head=lambda: BertHead(arch, tp=tp),
        head_out="decoder",
    )

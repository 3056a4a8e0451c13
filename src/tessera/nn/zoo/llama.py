"""LLaMA in PyTorch: token embedding, pre-RMSNorm blocks with RoPE + GQA + SwiGLU, untied head.

TP names: ``embedding.tok`` (vocab rows, partial-sum output), ``block.attn.{q,k,v,proj}`` (whole kv groups
per rank), ``block.mlp.{gate,up,down}``, ``head.out`` (vocab rows). Each block keeps its own RoPE cos/sin
tables as non-persistent buffers of ``max_seq_len`` rows (recomputed, never checkpointed).
"""

from __future__ import annotations

import torch

from tessera.models.spec import TPShard, TransformerArch
from tessera.nn.common import (
    Block,
    BlockModel,
    RMSNorm,
    SelfAttention,
    SwiGLU,
    TokenEmbedding,
    TPShare,
    check_modes,
    linear,
)
from tessera.nn.zoo.gpt import transformer_model, vocab_shard

NORM_EPS = 1e-5


class LlamaEmbedding(Block):
    kind = "embedding"
    tp_shard = TPShard.VOCAB

    def __init__(self, arch: TransformerArch, *, tp: TPShare | None) -> None:
        super().__init__("embedding")
        rows, start, sharded = vocab_shard(arch, tp)
        self.tp_units = arch.vocab
        self.tok = TokenEmbedding(rows, arch.hidden, start, sharded)

    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.tok(ids)


class LlamaBlock(Block):
    """x + attn(attn_norm(x)), then x + mlp(mlp_norm(x))."""

    kind = "transformer"
    tp_shard = TPShard.HEADS

    def __init__(
        self,
        arch: TransformerArch,
        i: int,
        *,
        attention: str,
        recompute: str,
        tp: TPShare | None,
        max_seq_len: int,
    ) -> None:
        super().__init__(f"block_{i}", recompute_full=recompute == "full")
        self.tp_units = arch.n_kv_heads
        self.attn_norm = RMSNorm(arch.hidden, NORM_EPS)
        self.attn = SelfAttention(
            arch, attention=attention, selective=recompute == "selective", tp=tp, rope_rows=max_seq_len
        )
        self.mlp_norm = RMSNorm(arch.hidden, NORM_EPS)
        self.mlp = SwiGLU(arch, tp=tp)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class LlamaHead(Block):
    kind = "head"
    tp_shard = TPShard.VOCAB

    def __init__(self, arch: TransformerArch, *, tp: TPShare | None) -> None:
        super().__init__("head")
        self.tp_units = arch.vocab
        self.norm = RMSNorm(arch.hidden, NORM_EPS)
        self.out = linear(arch.hidden, vocab_shard(arch, tp)[0], bias=False)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(x))


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
    rows = max_seq_len or arch.max_positions
    return transformer_model(
        arch,
        layer_range=layer_range,
        tp=tp,
        device=device,
        embedding=lambda: LlamaEmbedding(arch, tp=tp),
        block=lambda i: LlamaBlock(
            arch, i, attention=attention, recompute=recompute, tp=tp, max_seq_len=rows
        ),
        head=lambda: LlamaHead(arch, tp=tp),
        head_out="out",
    )

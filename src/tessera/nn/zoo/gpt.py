"""GPT in PyTorch (nanoGPT-like): embedding, pre-LN blocks, head — one pipeline-cuttable layer each.

TP names: ``embedding.tok`` (vocab rows; its output is a partial sum under TP), ``block.attn.{q,k,v,proj}``,
``block.mlp.{fc_in,fc_out}``, ``head.out`` (vocab rows, tied to ``embedding.tok`` when both are built).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
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
    build_context,
    check_modes,
    linear,
    resolve_range,
)


def vocab_shard(arch: TransformerArch, tp: TPShare | None) -> tuple[int, int, bool]:
    """(rows, first row, sharded) of this rank's slice of the vocabulary."""
    if tp is None or tp.degree == 1:
        return arch.vocab, 0, False
    return tp.local(arch.vocab), tp.offset(arch.vocab), True


class GPTEmbedding(Block):
    """Token + learned position embeddings, then dropout. Positions are added by slicing the table
    (no saved position ids); they stay whole under TP."""

    kind = "embedding"
    tp_shard = TPShard.VOCAB

    def __init__(self, arch: TransformerArch, *, tp: TPShare | None) -> None:
        super().__init__("embedding")
        rows, start, sharded = vocab_shard(arch, tp)
        self.tp_units = arch.vocab
        self.tok = TokenEmbedding(rows, arch.hidden, start, sharded)
        self.pos = nn.Parameter(torch.empty(arch.max_positions, arch.hidden))
        self.dropout = Dropout(arch.dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.pos, std=0.01)

    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.tok(ids) + self.pos[: ids.shape[1]])


class GPTBlock(Block):
    """x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

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
        mlp: nn.Module | None = None,
    ) -> None:
        super().__init__(f"block_{i}", recompute_full=recompute == "full")
        self.tp_units = arch.n_kv_heads
        self.ln_1 = nn.LayerNorm(arch.hidden)
        self.attn = SelfAttention(arch, attention=attention, selective=recompute == "selective", tp=tp)
        self.ln_2 = nn.LayerNorm(arch.hidden)
        self.mlp = mlp if mlp is not None else GeluMLP(arch, tp=tp)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPTHead(Block):
    """Final LayerNorm and the output projection to (this rank's rows of) the vocabulary."""

    kind = "head"
    tp_shard = TPShard.VOCAB

    def __init__(self, arch: TransformerArch, *, tp: TPShare | None) -> None:
        super().__init__("head")
        self.tp_units = arch.vocab
        self.norm = nn.LayerNorm(arch.hidden)
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
    block_factory: Callable[[int], nn.Module] | None = None,
) -> BlockModel:
    """Layers ``layer_range`` of a GPT (all by default); ``block_factory(i)`` lets MoE swap blocks in."""
    check_modes(attention, recompute)
    block = block_factory or (lambda i: GPTBlock(arch, i, attention=attention, recompute=recompute, tp=tp))
    return transformer_model(
        arch,
        layer_range=layer_range,
        tp=tp,
        device=device,
        embedding=lambda: GPTEmbedding(arch, tp=tp),
        block=block,
        head=lambda: GPTHead(arch, tp=tp),
        head_out="out",
    )


def transformer_model(
    arch: TransformerArch,
    *,
    layer_range: tuple[int, int] | None,
    tp: TPShare | None,
    device: torch.device | str | None,
    embedding: Callable[[], nn.Module],
    block: Callable[[int], nn.Module],
    head: Callable[[], nn.Module],
    head_out: str,
) -> BlockModel:
    """The layer list every zoo transformer shares — [embedding, block_0 .. block_{L-1}, head] — cut to
    ``layer_range`` and built on ``device``, with the tied head wired when the range holds both ends."""
    n = arch.n_layers + 2
    start, end = resolve_range(layer_range, n)
    with build_context(device):
        layers = [
            embedding() if j == 0 else head() if j == n - 1 else block(j - 1) for j in range(start, end)
        ]
    return BlockModel(
        arch,
        layers,
        layer_start=start,
        n_model_layers=n,
        tp=tp,
        input_kind="tokens" if start == 0 else "hidden",
        ties=ties(arch, start, end, n, head_out),
    )


def ties(arch: TransformerArch, start: int, end: int, n: int, head_out: str) -> list[tuple[str, str]]:
    """The output projection shares the token embedding when this range holds both (else it owns a copy
    the runtime keeps in sync)."""
    if arch.tied_embeddings and start == 0 and end == n:
        return [(f"layers.{end - start - 1}.{head_out}", "layers.0.tok")]
    return []

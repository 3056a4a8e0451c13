"""What the zoo's transformers (GPT, LLaMA, BERT, MoE) share: the vocabulary-sharded embedding and head, the
block header, and the layer list ``[embedding, block_0 .. block_{L-1}, head]`` cut to a layer range.

Each family module keeps only what makes it that family (its norms, position tables, block wiring). The
bases here register their modules (``tok``; ``norm`` then ``out``) first and in the order the families
always built them, so state_dict keys, TP names and seeded initial weights did not change when the families
began sharing them (``tests/nn/test_zoo_pins.py`` holds them to it). Not a family: ``build_model`` never
builds this module by name.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from tessera.models.spec import TPShard, TransformerArch
from tessera.nn.common import (
    Block,
    BlockModel,
    BuildOptions,
    SelfAttention,
    TokenEmbedding,
    TPShare,
    build_context,
    linear,
    resolve_range,
)

# how a family builds its pieces: the embedding and the head from (arch, options), block i from (arch, i, options)
LayerFactory = Callable[[TransformerArch, BuildOptions], nn.Module]
BlockFactory = Callable[[TransformerArch, int, BuildOptions], nn.Module]


def vocab_shard(arch: TransformerArch, tp: TPShare | None) -> tuple[int, int, bool]:
    """(rows, first row, sharded) of this rank's slice of the vocabulary."""
    if tp is None or tp.degree == 1:
        return arch.vocab, 0, False
    return tp.local(arch.vocab), tp.offset(arch.vocab), True


class VocabEmbedding(Block):
    """The token embedding ``tok`` over this rank's vocabulary rows (a partial sum under TP) — LLaMA's whole
    embedding layer, and the first module of GPT's and BERT's, which add their position tables after it."""

    kind = "embedding"
    tp_shard = TPShard.VOCAB

    def __init__(self, arch: TransformerArch, opts: BuildOptions) -> None:
        super().__init__("embedding")
        rows, start, sharded = vocab_shard(arch, opts.tp)
        self.tp_units = arch.vocab
        self.tok = TokenEmbedding(rows, arch.hidden, start, sharded)

    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.tok(ids)


class VocabHead(Block):
    """Base of the heads whose output projection (the module named ``projection``) holds this rank's
    vocabulary rows, so logits are vocab-sharded; that projection is what a tied embedding shares."""

    kind = "head"
    tp_shard = TPShard.VOCAB
    projection = "out"

    def __init__(self, arch: TransformerArch) -> None:
        super().__init__("head")
        self.tp_units = arch.vocab


class LMHead(VocabHead):
    """The final ``norm`` (LayerNorm for GPT and MoE, RMSNorm for LLaMA: the only difference between their
    heads) and the bias-free output projection ``out`` to this rank's vocabulary rows."""

    def __init__(self, arch: TransformerArch, opts: BuildOptions, *, norm: nn.Module) -> None:
        super().__init__(arch)
        self.norm = norm
        self.out = linear(arch.hidden, vocab_shard(arch, opts.tp)[0], bias=False)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(x))


class TransformerBlock(Block):
    """Base of the zoo's transformer blocks: spec name ``block_{i}``, TP over whole kv heads, full recompute
    when asked. Subclasses register their norms, ``attn`` (from :meth:`self_attention`) and ``mlp``."""

    kind = "transformer"
    tp_shard = TPShard.HEADS

    def __init__(self, arch: TransformerArch, i: int, opts: BuildOptions) -> None:
        super().__init__(f"block_{i}", recompute_full=opts.recompute == "full")
        self.tp_units = arch.n_kv_heads

    @staticmethod
    def self_attention(arch: TransformerArch, opts: BuildOptions, *, rope_rows: int = 0) -> SelfAttention:
        """This rank's heads of the block's attention, with the build's kernel and selective recompute."""
        return SelfAttention(
            arch,
            attention=opts.attention,
            selective=opts.recompute == "selective",
            tp=opts.tp,
            rope_rows=rope_rows,
        )


def transformer_model(
    arch: TransformerArch,
    opts: BuildOptions,
    *,
    embedding: LayerFactory,
    block: BlockFactory,
    head: LayerFactory,
) -> BlockModel:
    """The layer list every zoo transformer shares — [embedding, block_0 .. block_{L-1}, head] — cut to
    ``opts.layer_range`` and built on ``opts.device``, with the tied head wired when the range holds both
    ends. Only the layers in the range are built (a pipeline stage allocates nothing else)."""
    n = arch.n_layers + 2
    start, end = resolve_range(opts.layer_range, n)
    with build_context(opts.device):
        layers = [
            embedding(arch, opts) if j == 0 else head(arch, opts) if j == n - 1 else block(arch, j - 1, opts)
            for j in range(start, end)
        ]
    # The output projection shares the token embedding when this range holds both (else it owns a copy
    # the runtime keeps in sync).
    tied = arch.tied_embeddings and start == 0 and end == n
    return BlockModel(
        arch,
        layers,
        layer_start=start,
        n_model_layers=n,
        tp=opts.tp,
        input_kind="tokens" if start == 0 else "hidden",
        ties=[(f"layers.{n - 1}.{layers[-1].projection}", "layers.0.tok")] if tied else [],
    )

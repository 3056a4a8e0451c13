"""GShard MoE family: a GPT-style decoder (learned positions, pre-LN, tied embeddings) whose every other
block's FFN is a top-2 gated mixture of experts with capacity factor 1 (Lepikhin et al. 2021).

Crius's Table 2 MoEs are Alpa's GShard benchmark models (``suite_manual_moe``): vocab 32,000, 16 heads,
FFN 8h (dense and per expert), 1024 tokens: 0.69B = h 768 x 8 layers x 16 experts, 1.3B = 768 x 16 x 16,
2.4B = 1024 x 16 x 16, 10B = 1536 x 16 x 32, 27B = 2048 x 16 x 48. Alpa's experts are BERT-like
(post-LN, ReLU); this family keeps their sizes in the GPT layout. Expert FFNs have no biases.
"""

from __future__ import annotations

import math

from tessera.models.spec import ModelSpec, TransformerArch
from tessera.models.zoo import costs, gpt
from tessera.models.zoo.base import ModelInfo

FAMILY = "moe"


def moe_arch(
    hidden: int,
    n_layers: int,
    n_heads: int,
    n_experts: int,
    *,
    vocab: int = 32000,
    max_positions: int = 1024,
    ffn_mult: int = 8,
    dropout: float = 0.1,
) -> TransformerArch:
    return TransformerArch(
        hidden=hidden,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_heads,
        ffn_hidden=ffn_mult * hidden,
        vocab=vocab,
        dropout=dropout,
        max_positions=max_positions,
        n_experts=n_experts,
        moe_every=2,
        top_k=2,
    )


def _crius(h: int, l: int, e: int, what: str) -> ModelInfo:  # noqa: E741
    return ModelInfo(moe_arch(h, l, 16, e), 1024, f"GShard MoE {what} of Crius Table 2 (Alpa's shape)")


MODELS: dict[str, ModelInfo] = {
    "moe-0.69b": _crius(768, 8, 16, "0.69B"),
    "moe-1.3b": _crius(768, 16, 16, "1.3B"),
    "moe-2.4b": _crius(1024, 16, 16, "2.4B"),
    "moe-10b": _crius(1536, 16, 32, "10B"),
    "moe-27b": _crius(2048, 16, 48, "27B"),
    "moe-tiny": ModelInfo(
        moe_arch(64, 4, 4, 4, vocab=128, max_positions=64, ffn_mult=4),
        64,
        "tiny MoE (4 experts, top-2) for CPU tests",
    ),
}


def capacity(a: TransformerArch, T: int) -> int:
    """Expert slots per sequence: ceil(capacity_factor * top_k * T / n_experts), at least 1."""
    return max(1, math.ceil(a.capacity_factor * a.top_k * T / a.n_experts))


def moe_mlp_cost(a: TransformerArch, T: int) -> costs.Cost:
    """Router, top-k, scatter dispatch, two expert bmm's, gather combine (see ``tessera.nn.zoo.moe.MoEMLP``)."""
    h, f, e, k = a.hidden, a.ffn_hidden, a.n_experts, a.top_k
    c = capacity(a, T)
    params = h * e + 2 * e * h * f
    flops = 2 * T * h * e + 2 * 2 * e * c * h * f
    act = costs.F32 * T * e  # softmax output
    act += costs.I64 * T * k + costs.F32 * T * k + costs.F32 * T  # top-k indices, top-k probs, their sum
    act += costs.F32 * k * T + costs.I64 * k * T  # keep column (float), slot indices
    act += costs.F32 * e * c * h + 2 * costs.F32 * e * c * f  # expert input buffer, GELU in / out
    act += costs.F32 * k * T * h + costs.F32 * k * T  # gathered rows and their weights
    act += costs.dropout_mask(a.dropout, T * h)
    return costs.Cost(params, flops, act)


def spec(name: str, a: TransformerArch, seq_len: int) -> ModelSpec:
    gpt.check_positions(name, a, seq_len)
    blocks = [
        ("moe", gpt.block_cost(a, seq_len, moe_mlp_cost(a, seq_len)))
        if a.is_moe_block(i)
        else ("transformer", gpt.block_cost(a, seq_len))
        for i in range(a.n_layers)
    ]
    layers = costs.transformer_layers(
        a, seq_len, gpt.embedding_cost(a, seq_len), blocks, gpt.head_cost(a, seq_len)
    )
    return ModelSpec(name=name, family=FAMILY, seq_len=seq_len, layers=layers, arch=a)

"""GPT family (GPT-2 / GPT-3 shapes): learned positions, pre-LayerNorm, GELU MLP 4h, tied embeddings, biases.

GPT-3 shapes follow Brown et al. 2020, Table 2.1, with two fixes of the table's typos: 1.3B has 16 heads
of 128 (24 x 128 != 2048) and 13B has d_model 5120 (40 heads x 128, not 5140). GPT-3's alternating
sparse attention is not modelled (dense everywhere).
"""

from __future__ import annotations

from tessera.models.spec import ModelSpec, TransformerArch
from tessera.models.zoo import costs
from tessera.models.zoo.base import ModelInfo

FAMILY = "gpt"
VOCAB = 50257


def gpt_arch(
    hidden: int,
    n_layers: int,
    n_heads: int,
    *,
    vocab: int = VOCAB,
    max_positions: int = 1024,
    dropout: float = 0.1,
) -> TransformerArch:
    return TransformerArch(
        hidden=hidden,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_heads,
        ffn_hidden=4 * hidden,
        vocab=vocab,
        dropout=dropout,
        max_positions=max_positions,
    )


def _gpt2(h: int, l: int, a: int, what: str) -> ModelInfo:  # noqa: E741
    return ModelInfo(gpt_arch(h, l, a), 1024, f"GPT-2 {what} (Radford et al. 2019)")


def _gpt3(h: int, l: int, a: int, what: str) -> ModelInfo:  # noqa: E741
    return ModelInfo(gpt_arch(h, l, a, max_positions=2048), 2048, f"GPT-3 {what} (Brown et al. 2020)")


MODELS: dict[str, ModelInfo] = {
    "gpt2": _gpt2(768, 12, 12, "small, 124M"),
    "gpt2-medium": _gpt2(1024, 24, 16, "medium, 355M"),
    "gpt2-large": _gpt2(1280, 36, 20, "large, 774M"),
    "gpt2-xl": _gpt2(1600, 48, 25, "XL, 1.5B"),
    "gpt3-125m": _gpt3(768, 12, 12, "Small 125M"),
    "gpt3-350m": _gpt3(1024, 24, 16, "Medium 350M"),
    "gpt3-760m": _gpt3(1536, 24, 16, "Large 760M"),
    "gpt3-1.3b": _gpt3(2048, 24, 16, "XL 1.3B (16 heads of 128)"),
    "gpt3-2.7b": _gpt3(2560, 32, 32, "2.7B"),
    "gpt3-6.7b": _gpt3(4096, 32, 32, "6.7B"),
    "gpt3-13b": _gpt3(5120, 40, 40, "13B (d_model 5120)"),
    "gpt3-175b": _gpt3(12288, 96, 96, "175B"),
    "gpt-1.3b": ModelInfo(
        gpt_arch(2048, 24, 16, max_positions=2048),
        2048,
        "1.3B GPT of the memory notes: h 2048, 24 layers, 16 heads",
    ),
    "gpt-tiny": ModelInfo(gpt_arch(64, 4, 4, vocab=128, max_positions=64), 64, "tiny GPT for CPU tests"),
    "gpt-small-cpu": ModelInfo(
        gpt_arch(256, 4, 8, vocab=2048, max_positions=256),
        128,
        "small GPT (h 256, 4 layers) whose step is compute-bound on a CPU: estimator benchmarks",
    ),
}


def embedding_cost(a: TransformerArch, T: int) -> costs.Cost:
    """Token + learned position lookup (saves the int64 ids) and embedding dropout."""
    return costs.Cost(
        params=(a.vocab + a.max_positions) * a.hidden,
        act=costs.I64 * T + costs.dropout_mask(a.dropout, T * a.hidden),
    )


def block_cost(a: TransformerArch, T: int, mlp: costs.Cost | None = None) -> costs.Cost:
    """Pre-LN block: x + attn(ln_1(x)), then + mlp(ln_2(.)); ``mlp`` replaces the GELU MLP (MoE)."""
    h = a.hidden
    attn = costs.layernorm(h, T) + costs.block_input(h, T) + costs.attention(a, T)
    ffn = costs.layernorm(h, T) + costs.block_input(h, T) + (mlp if mlp is not None else costs.gelu_mlp(a, T))
    return attn + ffn


def head_cost(a: TransformerArch, T: int) -> costs.Cost:
    """Final LayerNorm + output projection (no bias); the tied weight is counted in the embedding."""
    own = 0 if a.tied_embeddings else a.vocab * a.hidden
    return (
        costs.layernorm(a.hidden, T)
        + costs.block_input(a.hidden, T)
        + costs.Cost(params=own, flops=2 * T * a.hidden * a.vocab)
    )


def spec(name: str, a: TransformerArch, seq_len: int) -> ModelSpec:
    check_positions(name, a, seq_len)
    blocks = [("transformer", block_cost(a, seq_len)) for _ in range(a.n_layers)]
    layers = costs.transformer_layers(a, seq_len, embedding_cost(a, seq_len), blocks, head_cost(a, seq_len))
    return ModelSpec(name=name, family=FAMILY, seq_len=seq_len, layers=layers, arch=a)


def check_positions(name: str, a: TransformerArch, seq_len: int) -> None:
    if seq_len < 1:
        raise ValueError(f"model {name!r}: seq_len must be >= 1, got {seq_len}")
    if a.position == "learned" and seq_len > a.max_positions:
        raise ValueError(f"model {name!r}: seq_len {seq_len} exceeds its {a.max_positions} learned positions")

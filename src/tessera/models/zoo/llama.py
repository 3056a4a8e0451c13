"""LLaMA family: RMSNorm, SwiGLU, RoPE, grouped-query attention, untied output head, no biases.

Shapes from Touvron et al. 2023 (LLaMA-2) and Meta's LLaMA-3 model cards / HF configs.
"""

from __future__ import annotations

from tessera.models.spec import ModelSpec, TransformerArch
from tessera.models.zoo import costs
from tessera.models.zoo.base import ModelInfo
from tessera.models.zoo.gpt import check_positions

FAMILY = "llama"


def llama_arch(
    hidden: int,
    n_layers: int,
    n_heads: int,
    n_kv_heads: int,
    ffn_hidden: int,
    *,
    vocab: int = 32000,
    max_positions: int = 4096,
    rope_theta: float = 10000.0,
) -> TransformerArch:
    return TransformerArch(
        hidden=hidden,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        ffn_hidden=ffn_hidden,
        vocab=vocab,
        norm="rmsnorm",
        mlp="swiglu",
        position="rope",
        tied_embeddings=False,
        dropout=0.0,
        max_positions=max_positions,
        bias=False,
        rope_theta=rope_theta,
    )


def _llama3(h: int, l: int, a: int, kv: int, f: int, what: str) -> ModelInfo:  # noqa: E741
    arch = llama_arch(h, l, a, kv, f, vocab=128256, max_positions=8192, rope_theta=500000.0)
    return ModelInfo(arch, 8192, f"LLaMA-3 {what} (Meta 2024)")


MODELS: dict[str, ModelInfo] = {
    "llama2-7b": ModelInfo(llama_arch(4096, 32, 32, 32, 11008), 4096, "LLaMA-2 7B (Touvron et al. 2023)"),
    "llama2-13b": ModelInfo(llama_arch(5120, 40, 40, 40, 13824), 4096, "LLaMA-2 13B (Touvron et al. 2023)"),
    "llama2-70b": ModelInfo(llama_arch(8192, 80, 64, 8, 28672), 4096, "LLaMA-2 70B, GQA with 8 kv heads"),
    "llama3-8b": _llama3(4096, 32, 32, 8, 14336, "8B, GQA with 8 kv heads"),
    "llama3-70b": _llama3(8192, 80, 64, 8, 28672, "70B, GQA with 8 kv heads"),
    "llama-tiny": ModelInfo(
        llama_arch(64, 4, 4, 2, 176, vocab=128, max_positions=64),
        64,
        "tiny LLaMA (GQA 4 heads / 2 kv heads) for CPU tests",
    ),
    "llama-small-cpu": ModelInfo(
        llama_arch(256, 4, 8, 4, 688, vocab=2048, max_positions=256),
        128,
        "small LLaMA (h 256, 4 layers, GQA 8/4) whose step is compute-bound on a CPU: estimator benchmarks",
    ),
}


def embedding_cost(a: TransformerArch, T: int) -> costs.Cost:
    """Token lookup only (RoPE lives in the attention): saves the int64 ids."""
    return costs.Cost(params=a.vocab * a.hidden, act=costs.I64 * T)


def block_cost(a: TransformerArch, T: int) -> costs.Cost:
    """x + attn(rmsnorm(x)), then + swiglu(rmsnorm(.))."""
    h = a.hidden
    attn = costs.rmsnorm(h, T) + costs.block_input(h, T) + costs.attention(a, T)
    return attn + costs.rmsnorm(h, T) + costs.block_input(h, T) + costs.swiglu(a, T)


def head_cost(a: TransformerArch, T: int) -> costs.Cost:
    own = 0 if a.tied_embeddings else a.vocab * a.hidden
    return (
        costs.rmsnorm(a.hidden, T)
        + costs.block_input(a.hidden, T)
        + costs.Cost(params=own, flops=2 * T * a.hidden * a.vocab)
    )


def spec(name: str, a: TransformerArch, seq_len: int) -> ModelSpec:
    check_positions(name, a, seq_len)
    blocks = [("transformer", block_cost(a, seq_len)) for _ in range(a.n_layers)]
    layers = costs.transformer_layers(a, seq_len, embedding_cost(a, seq_len), blocks, head_cost(a, seq_len))
    return ModelSpec(name=name, family=FAMILY, seq_len=seq_len, layers=layers, arch=a)

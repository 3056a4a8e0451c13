"""Closed-form parameter, FLOP and saved-activation figures of the zoo's building blocks (torch-free).

Each figure mirrors what the PyTorch implementation (``tessera.nn.zoo``) does, op by op, for one sample of T
tokens in fp32 with flash attention and no recompute: ``act`` is the bytes of the unique storages autograd
saves for backward (parameters and buffers excluded), FLOPs count 2 per multiply-add of matmuls and of
attention's two score/value matmuls, as ``torch.utils.flop_counter.FlopCounterMode`` does. The tests hold
these formulas to the trace of the real modules, byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera.models.spec import Layer, TPShard, TransformerArch

F32 = 4  # bytes per fp32 element
I64 = 8  # bytes per int64 element (token ids, indices)
MASK = 1  # bytes per element of a dropout mask (bool)
FLASH_RNG = 24  # flash attention saves its philox seed (2 x uint64) and offset (uint64) on every call


@dataclass(frozen=True)
class Cost:
    """Figures of one module for one sample."""

    params: int = 0
    flops: int = 0
    act: int = 0

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.params + other.params, self.flops + other.flops, self.act + other.act)


def dropout_mask(p: float, numel: int) -> int:
    """A dropout with p > 0 saves a 1-byte mask; p = 0 is skipped and saves nothing."""
    return MASK * numel if p > 0 else 0


def layernorm(h: int, T: int) -> Cost:
    """LayerNorm saves its input and per-token mean and rstd."""
    return Cost(params=2 * h, act=F32 * T * h + 2 * F32 * T)


def rmsnorm(h: int, T: int) -> Cost:
    """Written-out RMSNorm saves its input, per-token rstd and the normalized x * rstd."""
    return Cost(params=h, act=2 * F32 * T * h + F32 * T)


def attention(a: TransformerArch, T: int) -> Cost:
    """Self-attention without its input (saved once per block): q, k, v, flash out + logsumexp, proj.

    q, k and v reach the kernel as h-wide tensors either way: as views of the projections (MHA), after
    RoPE (new tensors), or as the kv-group expansion the flash kernel needs under GQA.
    """
    h, kv = a.hidden, a.kv_hidden
    bias = 2 * h + 2 * kv if a.bias else 0
    params = 2 * h * h + 2 * h * kv + bias
    flops = 2 * T * h * (2 * h + 2 * kv) + 4 * T * T * h
    act = 3 * F32 * T * h  # q, k, v as the kernel sees them
    act += F32 * T * h + F32 * a.n_heads * T + FLASH_RNG  # out (also proj's input) + logsumexp + rng state
    act += dropout_mask(a.dropout, T * h)  # residual dropout after proj
    return Cost(params, flops, act)


def gelu_mlp(a: TransformerArch, T: int) -> Cost:
    """fc_in output (GELU input), GELU output (fc_out input), residual dropout; not the block input."""
    h, f = a.hidden, a.ffn_hidden
    params = 2 * h * f + (f + h if a.bias else 0)
    return Cost(params, 4 * T * h * f, 2 * F32 * T * f + dropout_mask(a.dropout, T * h))


def swiglu(a: TransformerArch, T: int) -> Cost:
    """gate output, silu output, up output and their product (down's input)."""
    h, f = a.hidden, a.ffn_hidden
    params = 3 * h * f + (2 * f + h if a.bias else 0)
    return Cost(params, 6 * T * h * f, 4 * F32 * T * f + dropout_mask(a.dropout, T * h))


def block_input(h: int, T: int) -> Cost:
    """A tensor saved by the linears that read it (a norm's output, or the post-LN block's input)."""
    return Cost(act=F32 * T * h)


def transformer_layers(
    a: TransformerArch, T: int, embedding: Cost, blocks: list[tuple[str, Cost]], head: Cost
) -> tuple[Layer, ...]:
    """[embedding, block_0 .. block_{L-1}, head] with the TP sharding every zoo transformer uses.

    Blocks shard by heads; under GQA the indivisible unit is a kv group (a kv head with its q heads), so
    ``tp_units`` is ``n_kv_heads`` (= ``n_heads`` without GQA). Embedding and head shard the vocabulary.
    """
    h = a.hidden
    layers = [
        Layer(
            "embedding",
            "embedding",
            embedding.params,
            embedding.flops,
            embedding.act,
            F32 * T * h,
            TPShard.VOCAB,
            a.vocab,
        ),
    ]
    for i, (kind, c) in enumerate(blocks):
        layers.append(
            Layer(f"block_{i}", kind, c.params, c.flops, c.act, F32 * T * h, TPShard.HEADS, a.n_kv_heads)
        )
    layers.append(
        Layer("head", "head", head.params, head.flops, head.act, F32 * T * a.vocab, TPShard.VOCAB, a.vocab)
    )
    return tuple(layers)

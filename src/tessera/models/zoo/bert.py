"""BERT family: post-LN bidirectional encoder, learned positions + token types, GELU, MLM head tied to the
token embedding (Devlin et al. 2019).

The model is BertForMaskedLM: embeddings, encoder and the MLM head (transform h x h + GELU + LayerNorm,
decoder with a vocab bias). It has no pooler, which MLM training never uses; published BERT sizes count
the pooler instead of the MLM head (bert-large-uncased: 335,141,888 = embeddings + encoder + pooler).

Crius's Table 2 BERTs (0.76B .. 6.7B) are Alpa's benchmark BERTs, which reuse Alpa's GPT shapes and vocab
(51,200): 0.76B = h 1536 x 24 layers x 16 heads, 1.3B = 2048 x 24 x 32, 2.6B = 2560 x 32 x 32,
6.7B = 4096 x 32 x 32, 512 positions. They count 0.764, 1.32, 2.66 and 6.69 B; 2.6B keeps Alpa's label
(its GPT-3 "2.7B" shape) rather than a shape invented to round to 2.6.
"""

from __future__ import annotations

from tessera.models.spec import ModelSpec, TransformerArch
from tessera.models.zoo import costs
from tessera.models.zoo.base import ModelInfo
from tessera.models.zoo.gpt import check_positions

FAMILY = "bert"


def bert_arch(
    hidden: int,
    n_layers: int,
    n_heads: int,
    *,
    vocab: int = 30522,
    max_positions: int = 512,
    dropout: float = 0.1,
) -> TransformerArch:
    return TransformerArch(
        hidden=hidden,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_heads,
        ffn_hidden=4 * hidden,
        vocab=vocab,
        causal=False,
        dropout=dropout,
        max_positions=max_positions,
        type_vocab=2,
    )


def _crius(h: int, l: int, a: int, what: str) -> ModelInfo:  # noqa: E741
    return ModelInfo(bert_arch(h, l, a, vocab=51200), 512, f"BERT {what} of Crius Table 2 (Alpa's GPT shape)")


MODELS: dict[str, ModelInfo] = {
    "bert-base": ModelInfo(bert_arch(768, 12, 12), 512, "BERT-base uncased (110M)"),
    "bert-large": ModelInfo(bert_arch(1024, 24, 16), 512, "BERT-large uncased (336M with pooler)"),
    "bert-0.76b": _crius(1536, 24, 16, "0.76B"),
    "bert-1.3b": _crius(2048, 24, 32, "1.3B"),
    "bert-2.6b": _crius(2560, 32, 32, "2.6B"),
    "bert-6.7b": _crius(4096, 32, 32, "6.7B"),
    "bert-tiny": ModelInfo(bert_arch(64, 4, 4, vocab=128, max_positions=64), 64, "tiny BERT for CPU tests"),
}


def embedding_cost(a: TransformerArch, T: int) -> costs.Cost:
    """Token + position + token-type embeddings (positions and type 0 by slicing), LayerNorm, dropout."""
    h = a.hidden
    params = (a.vocab + a.max_positions + a.type_vocab) * h
    return costs.Cost(
        params=params, act=costs.I64 * T + costs.dropout_mask(a.dropout, T * h)
    ) + costs.layernorm(h, T)


def block_cost(a: TransformerArch, T: int) -> costs.Cost:
    """Post-LN: x = ln_1(x + attn(x)); x = ln_2(x + mlp(x))."""
    h = a.hidden
    attn = costs.block_input(h, T) + costs.attention(a, T) + costs.layernorm(h, T)
    return attn + costs.block_input(h, T) + costs.gelu_mlp(a, T) + costs.layernorm(h, T)


def head_cost(a: TransformerArch, T: int) -> costs.Cost:
    """MLM head: transform (h x h + bias; GELU; LayerNorm) then the decoder (tied weight + vocab bias)."""
    h = a.hidden
    own = 0 if a.tied_embeddings else a.vocab * h
    transform = costs.Cost(
        params=h * h + h, flops=2 * T * h * h, act=2 * costs.F32 * T * h
    )  # its input, GELU input
    act_out = costs.block_input(h, T) + costs.layernorm(h, T)  # GELU output (LN input) and LN output
    return transform + act_out + costs.Cost(params=own + a.vocab, flops=2 * T * h * a.vocab)


def spec(name: str, a: TransformerArch, seq_len: int) -> ModelSpec:
    check_positions(name, a, seq_len)
    blocks = [("transformer", block_cost(a, seq_len)) for _ in range(a.n_layers)]
    layers = costs.transformer_layers(a, seq_len, embedding_cost(a, seq_len), blocks, head_cost(a, seq_len))
    return ModelSpec(name=name, family=FAMILY, seq_len=seq_len, layers=layers, arch=a)

"""ModelSpec: a model as an ordered list of layers — the planner's and memory model's view of a network.

A spec is built for one sequence length (tokens per sample), so per-sample figures are exact for it. The
zoo's analytic specs and specs traced from `nn.Module`s (``tessera.nn.trace``) must agree field for field.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any


class TPShard(StrEnum):
    """How a layer shards under tensor parallelism (Megatron / Whale split patterns)."""

    HEADS = "heads"  # attention split by whole heads, the block's MLP by columns
    COLUMNS = "columns"  # MLP / conv channels split by output columns
    VOCAB = "vocab"  # embedding or output head split along the vocabulary
    REPLICATED = "replicated"  # every TP rank holds the whole layer


@dataclass(frozen=True)
class Layer:
    """One pipeline-cuttable block of a model.

    Byte figures are for fp32 training with the model's attention as built (flash unless stated), no
    recompute; the memory module refines them per precision, attention and recompute.
    """

    name: str
    kind: str  # "embedding" | "transformer" | "moe" | "head" | "stem" | "conv" | "classifier"
    params: int
    fwd_flops_per_sample: float  # multiply-add = 2 FLOPs, at the spec's seq_len
    act_bytes_per_sample: int  # bytes saved for backward by this layer (unique storages)
    out_bytes_per_sample: int  # bytes of the output passed to the next layer / pipeline stage
    tp_shard: TPShard = TPShard.REPLICATED
    tp_units: int = 1  # indivisible units along the TP dimension (heads, columns, vocab rows)


# Layer kinds the zoo builds with activation checkpointing under full recompute (their forward runs again in
# backward); embeddings, stems and heads run once whatever the plan's recompute.
RECOMPUTED_KINDS = frozenset({"transformer", "moe", "conv"})


@dataclass(frozen=True)
class TransformerArch:
    """Shape of a transformer, enough for the closed-form memory and compute models."""

    hidden: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_hidden: int
    vocab: int
    norm: str = "layernorm"  # "layernorm" | "rmsnorm"
    mlp: str = "gelu"  # "gelu" | "swiglu"
    position: str = "learned"  # "learned" | "rope"
    causal: bool = True
    tied_embeddings: bool = True
    dropout: float = 0.0
    max_positions: int = 2048
    n_experts: int = 0  # >0: GShard MoE FFN in every `moe_every`-th block
    moe_every: int = 2
    top_k: int = 2
    bias: bool = True
    capacity_factor: float = 1.0  # MoE: expert capacity = ceil(capacity_factor * top_k * tokens / n_experts)
    type_vocab: int = 0  # BERT token-type (segment) embeddings; 0 = none
    rope_theta: float = 10000.0  # RoPE base (LLaMA-3: 500000); values only, never shapes

    @property
    def kv_hidden(self) -> int:
        """Width of the K (or V) projection: n_kv_heads * head_dim (= hidden without GQA)."""
        return self.n_kv_heads * self.head_dim

    def is_moe_block(self, i: int) -> bool:
        """GShard places an MoE FFN in every `moe_every`-th block: blocks moe_every-1, 2*moe_every-1, ..."""
        return self.n_experts > 0 and i % self.moe_every == self.moe_every - 1

    @property
    def head_dim(self) -> int:
        return self.hidden // self.n_heads


@dataclass(frozen=True)
class ConvArch:
    """Shape of a (Wide-)ResNet."""

    depth: int
    width: int
    image_size: int
    n_classes: int
    base_channels: int = 64


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str  # "gpt" | "llama" | "bert" | "moe" | "wide_resnet" | "custom"
    seq_len: int  # tokens per sample (1 for image models)
    layers: tuple[Layer, ...]
    arch: TransformerArch | ConvArch | None = None
    meta: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.layers:
            raise ValueError(f"model {self.name!r}: a spec needs at least one layer")

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def params(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def fwd_flops_per_sample(self) -> float:
        return sum(layer.fwd_flops_per_sample for layer in self.layers)

    def layer_flops_per_token(self, i: int) -> float:
        return self.layers[i].fwd_flops_per_sample / self.seq_len

    def stage(self, start: int, end: int) -> tuple[Layer, ...]:
        if not 0 <= start < end <= self.n_layers:
            raise ValueError(
                f"layer range [{start}, {end}) outside model {self.name!r} of {self.n_layers} layers"
            )
        return self.layers[start:end]

    def even_partition(self, n_stages: int) -> tuple[tuple[int, int], ...]:
        """Layer ranges of ``n_stages`` stages with the repeated blocks split evenly (extra ones to the first
        stages); embedding/stem layers join the first stage and head layers the last, as Megatron does."""
        first = 0
        while first < self.n_layers and self.layers[first].kind in ("embedding", "stem"):
            first += 1
        last = self.n_layers
        while last > first and self.layers[last - 1].kind in ("head", "classifier"):
            last -= 1
        n_blocks = last - first
        if not 1 <= n_stages <= max(1, n_blocks):
            raise ValueError(f"pp: {n_stages} stages for the {n_blocks} blocks of {self.name!r}")
        base, extra = divmod(n_blocks, n_stages)
        bounds = [0]
        pos = first
        for i in range(n_stages):
            pos += base + (1 if i < extra else 0)
            bounds.append(pos)
        bounds[-1] = self.n_layers
        return tuple((bounds[i], bounds[i + 1]) for i in range(n_stages))

    def with_seq_len(self, seq_len: int) -> ModelSpec:
        """Only valid for image models, where seq_len does not change per-sample figures."""
        if self.seq_len != 1:
            raise ValueError("rebuild transformer specs for a new seq_len (attention cost depends on it)")
        return replace(self, seq_len=seq_len)


def per_spec(table: dict[int, tuple[Any, Any]], spec: ModelSpec, make: Callable[[], Any]) -> Any:
    """``make()`` kept per spec object in ``table`` — for memos that planners read thousands of times. Keyed
    by id(spec) (specs carry a dict, so they do not hash); an entry goes when its spec is collected, and is
    remade if the spec's layers were replaced."""
    key = id(spec)
    hit = table.get(key)
    if hit is None or hit[0] is not spec.layers:
        if key not in table:
            weakref.finalize(spec, table.pop, key, None)
        hit = table[key] = (spec.layers, make())
    return hit[1]

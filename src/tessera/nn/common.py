"""Building blocks shared by the zoo's PyTorch models: TP shares, dropout, norms, attention, MLPs, BlockModel.

Every model is a flat sequence of pipeline-cuttable layers (``BlockModel.layers``), and every layer can be
built as one rank's tensor-parallel shard (``TPShare``): it then holds only its local heads / FFN columns /
vocab rows / channels and contains no communication — the runtime wraps the named modules with it.
Names the runtime relies on (Megatron column -> row pairs; "partial sum" = all-reduce the output):

* ``embedding.tok``: vocab rows (``vocab_start`` .. + rows); its output is a partial sum. Position /
  token-type tables and the embedding LayerNorm stay whole.
* ``attn.q``, ``attn.k``, ``attn.v``: column-parallel over whole heads (GQA: whole kv groups, the q heads of
  a kv head stay with it); ``attn.proj``: row-parallel, partial sum.
* ``mlp.fc_in`` -> ``mlp.fc_out`` (GELU), ``mlp.gate`` + ``mlp.up`` -> ``mlp.down`` (SwiGLU): column -> row.
* MoE: ``mlp.router`` whole; ``mlp.experts`` (``w_in`` [E, h, f_local], ``w_out`` [E, f_local, h]) splits
  every expert by columns: identity/all-reduce on its input ``x``, partial-sum output.
* ``head.out`` (GPT, LLaMA, MoE) / ``head.decoder`` (BERT, with its bias): vocab rows, so logits are
  vocab-sharded (vocab-parallel cross-entropy); ``head.norm`` and BERT's ``head.transform`` stay whole.
* Wide-ResNet: ``conv2`` (+ ``bn2``) split by output channels, ``conv3`` by input channels (partial sum
  before ``bn3``); ``classifier.fc`` by classes; everything else whole.
* Row-parallel biases (``attn.proj``, ``mlp.fc_out``) are whole on every rank: add them once, after the
  reduction. ``BlockModel.loss`` assumes an unsharded head.

Everything here works on meta tensors and under ``FakeTensorMode``: no Python branch reads a tensor value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import is_fake
from torch.utils.checkpoint import checkpoint

from tessera.models.spec import ConvArch, TPShard, TransformerArch

ATTENTION_MODES = ("flash", "math")
RECOMPUTE_MODES = ("none", "selective", "full")


# --------------------------------------------------------------------------------------------- TP shares
def shard_sizes(total_units: int, ratios: Sequence[float]) -> list[int]:
    """Split ``total_units`` whole units by ``ratios`` (largest remainder), every rank getting at least one.

    Uneven TP (Whale/HexiScale) gives faster GPUs more heads or columns; units are never split.
    """
    n = len(ratios)
    if n < 1:
        raise ValueError("shard_sizes: need at least one ratio")
    if any(r <= 0 for r in ratios):
        raise ValueError(f"shard_sizes: every ratio must be > 0, got {list(ratios)}")
    if total_units < n:
        raise ValueError(f"shard_sizes: {total_units} units cannot give each of {n} ranks at least one")
    total = float(sum(ratios))
    # Reserve one unit per rank, then share the rest by largest remainder of the ideal quota.
    free = total_units - n
    quotas = [free * r / total for r in ratios]
    sizes = [int(math.floor(q)) for q in quotas]
    left = free - sum(sizes)
    order = sorted(range(n), key=lambda i: (-(quotas[i] - sizes[i]), i))
    for i in order[:left]:
        sizes[i] += 1
    return [s + 1 for s in sizes]


@dataclass(frozen=True)
class TPShare:
    """One rank's share of a tensor-parallel group: ``degree`` ranks, this is ``rank``; even if no ratios."""

    degree: int
    rank: int
    ratios: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.degree < 1:
            raise ValueError(f"TPShare.degree must be >= 1, got {self.degree}")
        if not 0 <= self.rank < self.degree:
            raise ValueError(f"TPShare.rank {self.rank} outside [0, {self.degree})")
        if self.ratios is not None:
            object.__setattr__(self, "ratios", tuple(float(r) for r in self.ratios))
            if len(self.ratios) != self.degree:
                raise ValueError(f"TPShare.ratios: {len(self.ratios)} ratios for degree {self.degree}")

    def sizes(self, total_units: int) -> list[int]:
        return shard_sizes(total_units, self.ratios or (1.0,) * self.degree)

    def local(self, total_units: int) -> int:
        """Units this rank holds."""
        return self.sizes(total_units)[self.rank]

    def offset(self, total_units: int) -> int:
        """Index of this rank's first unit."""
        return sum(self.sizes(total_units)[: self.rank])


def local_units(tp: TPShare | None, total: int) -> int:
    return total if tp is None or tp.degree == 1 else tp.local(total)


def check_modes(attention: str, recompute: str) -> None:
    if attention not in ATTENTION_MODES:
        raise ValueError(f"attention: {attention!r} is not one of {', '.join(ATTENTION_MODES)}")
    if recompute not in RECOMPUTE_MODES:
        raise ValueError(f"recompute: {recompute!r} is not one of {', '.join(RECOMPUTE_MODES)}")


@dataclass(frozen=True)
class BuildOptions:
    """The keywords every zoo family's ``build(arch, **options)`` takes, checked once here so the families
    share one signature instead of repeating it (``tessera.nn.zoo.build_model`` documents them).

    ``layer_range`` (start, end) of the spec's layers (``None``: all); ``tp`` one rank's ``TPShare``;
    ``max_seq_len`` rows of the RoPE tables (LLaMA; ``None``: ``arch.max_positions``); ``device`` to build on.
    A family without attention (Wide-ResNet) or RoPE ignores those fields.
    """

    attention: str = "flash"
    recompute: str = "none"
    layer_range: tuple[int, int] | None = None
    tp: TPShare | None = None
    max_seq_len: int | None = None
    device: torch.device | str | None = None

    def __post_init__(self) -> None:
        check_modes(self.attention, self.recompute)


# ------------------------------------------------------------------------------------------ small layers
class Dropout(nn.Module):
    """Dropout through ``native_dropout`` so every device saves the same 1-byte mask (CUDA's kernel does;
    ``F.dropout`` on CPU/meta would save a 4-byte float mask). p = 0 is a no-op that saves nothing."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = float(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.p == 0.0 or not self.training:
            return x
        return torch.native_dropout(x, self.p, True)[0]


class RMSNorm(nn.Module):
    """RMSNorm written out so every device runs (and saves) the same ops: x, rstd and x * rstd."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x * rstd) * self.weight


class TokenEmbedding(nn.Module):
    """Token lookup over rows [vocab_start, vocab_start + n_rows) of the vocabulary (Megatron's
    VocabParallelEmbedding without its all-reduce): ids outside the shard give zeros, so under TP the
    output is a partial sum that the runtime all-reduces."""

    def __init__(self, n_rows: int, dim: int, vocab_start: int = 0, sharded: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_rows, dim))
        self.vocab_start = vocab_start
        self.sharded = sharded
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if not self.sharded:
            return F.embedding(ids, self.weight)
        local = ids - self.vocab_start
        outside = (local < 0) | (local >= self.weight.shape[0])
        out = F.embedding(local.masked_fill(outside, 0), self.weight)
        return out.masked_fill(outside.unsqueeze(-1), 0.0)


def linear(n_in: int, n_out: int, bias: bool) -> nn.Linear:
    layer = nn.Linear(n_in, n_out, bias=bias)
    nn.init.normal_(layer.weight, std=0.02)
    if bias:
        nn.init.zeros_(layer.bias)
    return layer


# ------------------------------------------------------------------------------------------------- RoPE
def weight_out_dim(mod: nn.Module) -> int | None:
    """The weight dimension holding a projection's outputs: 0 for ``nn.Linear`` (``[out, in]``), 1 for
    ``transformers``' ``Conv1D`` (``[in, out]``, recognized by name and its ``nf`` width so the runtime needs no
    ``transformers`` import); ``None`` for any other module."""
    if isinstance(mod, nn.Linear):
        return 0
    if type(mod).__name__ == "Conv1D" and isinstance(getattr(mod, "nf", None), int):
        return 1
    return None


def rope_tables(head_dim: int, max_seq_len: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables [max_seq_len, head_dim] for the rotate-half RoPE convention (LLaMA/HF)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    freqs = torch.outer(torch.arange(max_seq_len, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [B, T, H, d]; cos/sin: [T, d]. Only cos/sin (buffers) are saved for backward."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    cos = cos.to(x.dtype)[:, None, :]
    sin = sin.to(x.dtype)[:, None, :]
    return x * cos + rotated * sin


# -------------------------------------------------------------------------------------------- attention
def flash_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, dropout_p: float
) -> torch.Tensor:
    """Memory-efficient attention that saves out + logsumexp. q: [B, H, T, d]; k, v: [B, Hkv, T, d].

    CPU runs ``F.scaled_dot_product_attention`` (no flash kernel there). Meta and fake tensors — the
    memory tracer's "cuda" device, where SDPA would fall back to the math path in a CPU-only build — call
    the flash aten op directly so the trace sees what a GPU saves. Real GPUs run SDPA, which picks flash
    for 16-bit inputs (fp32 gets the memory-efficient kernel, whose logsumexp pads to 32 rows).
    """
    rep = q.shape[1] // k.shape[1]
    if q.device.type == "cpu":
        return F.scaled_dot_product_attention(
            q, k, v, dropout_p=dropout_p, is_causal=causal, enable_gqa=rep > 1
        )
    if rep > 1:  # the flash kernel has no GQA: expand whole kv groups (copies, saved for backward)
        k, v = repeat_kv(k, rep), repeat_kv(v, rep)
    if q.is_meta or is_fake(q):
        return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, dropout_p, causal, False)[0]
    return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=causal)


def repeat_kv(x: torch.Tensor, rep: int) -> torch.Tensor:
    """[B, Hkv, T, d] -> [B, Hkv * rep, T, d], each kv head repeated for the q heads of its group.

    Always a dense copy (a reshape alone stays a stride-0 view when Hkv = 1), as the kernels expect."""
    b, hkv, t, d = x.shape
    return x[:, :, None].expand(b, hkv, rep, t, d).contiguous().view(b, hkv * rep, t, d)


def math_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, dropout_p: float, training: bool
) -> torch.Tensor:
    """Explicit softmax(q k^T / sqrt(d)) v with dropout on the probabilities (saves the s x s scores)."""
    rep = q.shape[1] // k.shape[1]
    if rep > 1:
        k, v = repeat_kv(k, rep), repeat_kv(v, rep)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        t = q.shape[-2]
        mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if dropout_p > 0.0 and training:
        probs = torch.native_dropout(probs, dropout_p, True)[0]
    return probs @ v


class SelfAttention(nn.Module):
    """Multi-head / grouped-query self-attention over this rank's heads.

    ``q``/``k``/``v`` are column-parallel, ``proj`` row-parallel. All reshapes use ``view(B, T, -1, d)`` so
    a shard with fewer local heads runs unchanged. With GQA the shard holds whole kv groups: its q heads
    are exactly the ones its kv heads serve.
    """

    def __init__(
        self,
        arch: TransformerArch,
        *,
        attention: str,
        selective: bool,
        tp: TPShare | None,
        rope_rows: int = 0,
    ) -> None:
        super().__init__()
        if tp is not None and tp.degree > arch.n_kv_heads:
            raise ValueError(
                f"tp degree {tp.degree} exceeds the {arch.n_kv_heads} kv heads (ranks hold whole kv groups; "
                "kv-head replication is not supported)"
            )
        d = arch.head_dim
        group = arch.n_heads // arch.n_kv_heads
        self.n_kv_heads = local_units(tp, arch.n_kv_heads)
        self.n_heads = self.n_kv_heads * group
        self.head_dim = d
        self.causal = arch.causal
        self.attention = attention
        self.selective = selective
        self.attn_dropout = float(arch.dropout)
        self.q = linear(arch.hidden, self.n_heads * d, arch.bias)
        self.k = linear(arch.hidden, self.n_kv_heads * d, arch.bias)
        self.v = linear(arch.hidden, self.n_kv_heads * d, arch.bias)
        self.proj = linear(self.n_heads * d, arch.hidden, arch.bias)
        self.resid_dropout = Dropout(arch.dropout)
        self.rope = rope_rows > 0  # RoPE tables of rope_rows positions (LLaMA), else no rotary embedding
        self.rope_theta = arch.rope_theta
        if self.rope:
            self.register_buffer("rope_cos", torch.empty(rope_rows, d), persistent=False)
            self.register_buffer("rope_sin", torch.empty(rope_rows, d), persistent=False)
            self.reset_rope()

    @torch.no_grad()
    def reset_rope(self) -> None:
        """(Re)compute the RoPE tables, e.g. after ``to_empty`` of a model built on meta."""
        if self.rope and self.rope_cos.device.type != "meta":
            cos, sin = rope_tables(self.head_dim, self.rope_cos.shape[0], self.rope_theta)
            self.rope_cos.copy_(cos)
            self.rope_sin.copy_(sin)

    @torch.no_grad()
    def _grow_rope(self, rows: int) -> None:
        """RoPE has no learned positions: a sequence longer than the tables were built for (a plan's seq_len
        beyond the config's ``max_positions``, as long-context training runs) gets longer tables, not an error."""
        self.rope_cos = torch.empty(rows, self.head_dim, device=self.rope_cos.device)
        self.rope_sin = torch.empty(rows, self.head_dim, device=self.rope_sin.device)
        self.reset_rope()

    def core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Scores, softmax, dropout and probs @ v: what selective recompute recomputes."""
        p = self.attn_dropout if self.training else 0.0
        if self.attention == "flash":
            return flash_attention(q, k, v, causal=self.causal, dropout_p=p)
        return math_attention(q, k, v, causal=self.causal, dropout_p=p, training=self.training)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q(x).view(b, t, -1, self.head_dim)
        k = self.k(x).view(b, t, -1, self.head_dim)
        v = self.v(x).view(b, t, -1, self.head_dim)
        if self.rope:
            if t > self.rope_cos.shape[0]:
                self._grow_rope(t)
            q = apply_rope(q, self.rope_cos[:t], self.rope_sin[:t])
            k = apply_rope(k, self.rope_cos[:t], self.rope_sin[:t])
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        y = checkpoint(self.core, q, k, v, use_reentrant=False) if self.selective else self.core(q, k, v)
        y = y.transpose(1, 2).reshape(b, t, -1)
        return self.resid_dropout(self.proj(y))


# ------------------------------------------------------------------------------------------------- MLPs
class GeluMLP(nn.Module):
    """h -> ffn -> h with GELU; ``fc_in`` column-parallel, ``fc_out`` row-parallel."""

    def __init__(self, arch: TransformerArch, *, tp: TPShare | None) -> None:
        super().__init__()
        f = local_units(tp, arch.ffn_hidden)
        self.fc_in = linear(arch.hidden, f, arch.bias)
        self.fc_out = linear(f, arch.hidden, arch.bias)
        self.dropout = Dropout(arch.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.fc_out(F.gelu(self.fc_in(x))))


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)); ``gate``/``up`` column-parallel, ``down`` row-parallel."""

    def __init__(self, arch: TransformerArch, *, tp: TPShare | None) -> None:
        super().__init__()
        f = local_units(tp, arch.ffn_hidden)
        self.gate = linear(arch.hidden, f, arch.bias)
        self.up = linear(arch.hidden, f, arch.bias)
        self.down = linear(f, arch.hidden, arch.bias)
        self.dropout = Dropout(arch.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.down(F.silu(self.gate(x)) * self.up(x)))


# ---------------------------------------------------------------------------------------------- blocks
class Block(nn.Module):
    """Base of every pipeline-cuttable layer: declares its spec name, kind and TP sharding for tracing,
    and runs ``_forward`` under full activation checkpointing when asked."""

    kind: str = "custom"
    tp_shard: TPShard = TPShard.REPLICATED
    tp_units: int = 1

    def __init__(self, spec_name: str, *, recompute_full: bool = False) -> None:
        super().__init__()
        self.spec_name = spec_name
        self.recompute_full = recompute_full

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recompute_full and torch.is_grad_enabled():
            return checkpoint(self._forward, x, use_reentrant=False)
        return self._forward(x)


@dataclass(frozen=True)
class BatchLayout:
    """What a layer range's random batch looks like: the first layer's input shape, the loss's target shape
    and class count, and the vocabulary of token inputs (``None``: the first layer takes float features)."""

    input_shape: tuple[int, ...]
    target_shape: tuple[int, ...]
    n_targets: int
    token_vocab: int | None


class LayerRange(nn.Module):
    """Layers ``[layer_start, layer_start + len(layers))`` of a model run in order, the loss on the head's
    output — what a stage is to the runtime, whoever built the layers (the zoo's or a Hugging Face model's).
    Subclasses say their ``batch_layout``."""

    def __init__(self, layers: Sequence[nn.Module], *, layer_start: int, n_model_layers: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.layer_start = layer_start
        self.n_model_layers = n_model_layers

    @property
    def layer_end(self) -> int:
        return self.layer_start + len(self.layers)

    @property
    def has_head(self) -> bool:
        return self.layer_end == self.n_model_layers

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x

    def loss(self, output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy over every token (or image); only meaningful when the range has the head."""
        if not self.has_head:
            raise ValueError(
                f"layers [{self.layer_start}, {self.layer_end}) have no head: no loss to compute"
            )
        return F.cross_entropy(output.reshape(-1, output.shape[-1]).float(), targets.reshape(-1))

    def batch_layout(self, batch_size: int, seq_len: int) -> BatchLayout:
        """The shapes ``make_batch`` draws for this range; each kind of layer list says its own."""
        raise NotImplementedError

    def make_batch(
        self,
        batch_size: int,
        seq_len: int,
        *,
        device: torch.device | str | None = None,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs for the first layer of the range, targets for the model's loss), drawn the one way for the
        zoo's and the Hugging Face layer lists, so a seeded batch is the same whichever built the model:
        targets first, then token ids or standard-normal features in the range's float dtype; drawn on the
        generator's device, moved to ``device`` (default: the range's). On meta, empty tensors of those shapes."""
        layout = self.batch_layout(batch_size, seq_len)
        device = torch.device(device) if device is not None else _param_device(self)
        gen_device = generator.device if generator is not None else device
        if device.type == "meta":
            targets = torch.empty(layout.target_shape, dtype=torch.long, device=device)
            dtype = torch.long if layout.token_vocab is not None else _param_dtype(self)
            return torch.empty(layout.input_shape, dtype=dtype, device=device), targets
        targets = torch.randint(
            0, layout.n_targets, layout.target_shape, generator=generator, device=gen_device
        ).to(device)
        if layout.token_vocab is not None:
            inputs = torch.randint(
                0, layout.token_vocab, layout.input_shape, generator=generator, device=gen_device
            )
        else:
            inputs = torch.randn(
                layout.input_shape, generator=generator, device=gen_device, dtype=_param_dtype(self)
            )
        return inputs.to(device), targets


class BlockModel(LayerRange):
    """Layers ``[layer_start, layer_start + len(layers))`` of a zoo model; the runtime cuts stages by slicing.

    ``layers[i]`` is spec layer ``layer_start + i``. ``input_kind`` says what the first layer takes:
    "tokens" (int64 [B, T]), "hidden" (float [B, T, h]), "image" ([B, 3, H, W]) or "features"
    ([B, C, H, W], a middle stage of a conv net, shape given by ``feature_shape``).
    """

    def __init__(
        self,
        arch: TransformerArch | ConvArch,
        layers: Sequence[nn.Module],
        *,
        layer_start: int,
        n_model_layers: int,
        input_kind: str,
        feature_shape: tuple[int, ...] = (),
        tp: TPShare | None = None,
        ties: Sequence[tuple[str, str]] = (),
    ) -> None:
        super().__init__(layers, layer_start=layer_start, n_model_layers=n_model_layers)
        self.arch = arch
        self.input_kind = input_kind
        self.feature_shape = feature_shape
        self.tp = tp
        self.ties = tuple(ties)  # (module path, module path): the first's .weight is the second's
        self.tie_weights()

    def tie_weights(self) -> None:
        """Re-share tied weights (``to_empty``/``to`` across devices gives each module its own copy)."""
        for dst, src in self.ties:
            self.get_submodule(dst).weight = self.get_submodule(src).weight

    @torch.no_grad()
    def init_weights(self) -> None:
        """Fresh weights and RoPE tables, for a model built on meta and materialized with ``to_empty``."""
        self.tie_weights()
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, SelfAttention):
                m.reset_rope()
            elif m is not self and hasattr(m, "reset_parameters"):
                m.reset_parameters()

    def stage_input_shape(self, batch_size: int, seq_len: int) -> tuple[int, ...]:
        a = self.arch
        if self.input_kind == "tokens":
            return (batch_size, seq_len)
        if self.input_kind == "hidden":
            assert isinstance(a, TransformerArch)
            return (batch_size, seq_len, a.hidden)
        if self.input_kind == "image":
            assert isinstance(a, ConvArch)
            return (batch_size, 3, a.image_size, a.image_size)
        return (batch_size, *self.feature_shape)

    def batch_layout(self, batch_size: int, seq_len: int) -> BatchLayout:
        """A transformer's target is a token per position, a conv net's a class per image."""
        a, inputs = self.arch, self.stage_input_shape(batch_size, seq_len)
        if isinstance(a, TransformerArch):
            tokens = a.vocab if self.input_kind == "tokens" else None
            return BatchLayout(inputs, (batch_size, seq_len), a.vocab, tokens)
        return BatchLayout(inputs, (batch_size,), a.n_classes, None)


def _param_device(m: nn.Module) -> torch.device:
    p = next(m.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def _param_dtype(m: nn.Module) -> torch.dtype:
    for p in m.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.float32


def resolve_range(layer_range: tuple[int, int] | None, n_layers: int) -> tuple[int, int]:
    start, end = layer_range if layer_range is not None else (0, n_layers)
    if not 0 <= start < end <= n_layers:
        raise ValueError(f"layer_range ({start}, {end}) outside the model's {n_layers} layers")
    return start, end


def build_context(device: torch.device | str | None) -> Any:
    """Build under ``torch.device(device)`` so a meta model allocates nothing."""
    return torch.device(device) if device is not None else _NullContext()


class _NullContext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None

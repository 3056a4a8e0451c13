"""Tessera's fast memory formula: phase-aware, precision-, recompute-, attention-, TP-, PP- and ZeRO-aware.

Peak = max over the moments where it can fall (notes/memory-and-time-estimation.md §6), not states +
activations:

* **forward end** — weights, optimizer state, in-flight micro-batches' saved activations, the head's
  logits and log-softmax (and, under 1F1B's steady state, the full gradients);
* **backward start / end** — the same plus the backward's transients: cross-entropy gradients at the head,
  one block's recomputed activations under full recompute, gradients growing while activations shrink;
* **optimizer step** — weights, gradients (fp32 master gradients with bf16-master), optimizer state and
  foreach AdamW's parameter-sized ``_foreach_sqrt`` temporary.

Saved activations are counted tensor by tensor from the zoo blocks' ops, with PyTorch's dtype rules per
precision (CUDA autocast: matmuls in half precision, norms / softmax / loss in fp32, one half-precision
copy of a linear's input per linear), every storage rounded up to the caching allocator's 512 B block.
Parameter counts come from the zoo's own TP shards (built once on the meta device and cached), so the
formula is exact where the model is. Everything per configuration is numpy arithmetic over arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from tessera.memory.layout import DeviceView
from tessera.models.spec import ModelSpec, TransformerArch

BLOCK = 512.0
PHASES = ("fwd", "bwd", "opt")
_PREC = {"fp32": 0, "bf16": 1, "fp16": 2, "bf16-master": 3}
_RECOMPUTE = {"none": 0, "selective": 1, "full": 2}
_OPT = {"adamw": 0, "adam": 1, "sgd": 2}
_FAMILY = {"gpt": 0, "llama": 1, "bert": 2, "moe": 0}


def r(x: Any) -> Any:
    """Round a storage up to the caching allocator's block."""
    return np.ceil(np.asarray(x, dtype=np.float64) / BLOCK) * BLOCK


# ---------------------------------------------------------------------------------------- parameters
@dataclass(frozen=True)
class ParamProfile:
    """Per-device parameter storage of one layer (or a stage): exact, from the zoo's TP shard."""

    numel: float = 0.0
    fp32_bytes: float = 0.0  # Σ r(4n) over tensors
    half_bytes: float = 0.0  # Σ r(2n)
    n_tensors: float = 0.0
    cast_bytes: float = 0.0  # Σ r(2n) of weights autocast casts for matmuls (saved until backward)
    largest_fp32: float = 0.0  # r(4n) of the largest tensor
    buffer_bytes: float = 0.0  # Σ r(bytes) of buffers (RoPE tables), fp32 (halved with bf16-master)
    bias_cast_bytes: float = 0.0  # Σ r(2n) of linear biases: autocast's cache holds them during a forward

    def __add__(self, o: ParamProfile) -> ParamProfile:
        return ParamProfile(
            self.numel + o.numel,
            self.fp32_bytes + o.fp32_bytes,
            self.half_bytes + o.half_bytes,
            self.n_tensors + o.n_tensors,
            self.cast_bytes + o.cast_bytes,
            max(self.largest_fp32, o.largest_fp32),
            self.buffer_bytes + o.buffer_bytes,
            self.bias_cast_bytes + o.bias_cast_bytes,
        )

    def scale(self, k: float) -> ParamProfile:
        return ParamProfile(*(k * x for x in (self.numel, self.fp32_bytes, self.half_bytes, self.n_tensors,
                                              self.cast_bytes)), self.largest_fp32)  # fmt: skip


def _arch_key(arch: TransformerArch) -> tuple:
    return tuple(sorted(arch.__dict__.items()))


@lru_cache(maxsize=4096)
def _layer_profile(family: str, arch_items: tuple, layer: int, tp: int, zero_d: int) -> ParamProfile:
    """Build one layer's TP shard on the meta device and measure its parameters."""
    import torch

    from tessera.models.nn_common import TPShare
    from tessera.models.zoo import build_model

    arch = TransformerArch(**dict(arch_items))
    share = TPShare(tp, 0) if tp > 1 else None
    m = build_model(arch, family=family, layer_range=(layer, layer + 1), tp=share, device="meta")
    seen: set[int] = set()
    numel = f32 = half = n = cast = largest = bias_cast = 0.0
    for mod in m.modules():
        for name, p in mod.named_parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            k = p.numel()
            if zero_d > 1:
                k = -(-k // zero_d)
            numel += k
            f32 += r(4 * k)
            half += r(2 * k)
            largest = max(largest, float(r(4 * k)))
            n += 1
            if isinstance(mod, torch.nn.Linear) and name == "weight":
                cast += r(2 * p.numel())
            if isinstance(mod, torch.nn.Linear) and name == "bias":
                bias_cast += r(2 * p.numel())
    buffers = float(sum(r(bf.numel() * bf.element_size()) for bf in m.buffers()))
    return ParamProfile(numel, float(f32), float(half), n, float(cast), largest, buffers, float(bias_cast))


def stage_params(spec: ModelSpec, start: int, end: int, tp: int, zero_d: int = 1) -> ParamProfile:
    """Parameters one device of a stage holds (tied embedding/head counted once when both are held)."""
    arch = spec.arch
    assert isinstance(arch, TransformerArch)
    key = _arch_key(arch)
    total = ParamProfile()
    for j in range(start, end):
        total = total + _layer_profile(spec.family, key, j if spec.layers[j].kind == "moe" else _canon(spec, j),
                                       tp, zero_d)  # fmt: skip
    n = spec.n_layers
    if arch.tied_embeddings and start == 0 and end == n:
        head_out = _layer_profile(spec.family, key, n - 1, tp, zero_d)
        emb_only = _tied_weight(arch, tp, zero_d)
        total = (
            total + ParamProfile(-emb_only[0], -emb_only[1], -emb_only[2], -1, 0, 0) if head_out else total
        )
    return total


def _canon(spec: ModelSpec, j: int) -> int:
    """Identical blocks share one cache entry: map block j to block 1 (index 1 of the layer list)."""
    kind = spec.layers[j].kind
    if kind == "transformer":
        return 1
    return j


def _tied_weight(arch: TransformerArch, tp: int, zero_d: int) -> tuple[float, float, float]:
    rows = -(-arch.vocab // tp) if tp > 1 else arch.vocab
    k = rows * arch.hidden
    if zero_d > 1:
        k = -(-k // zero_d)
    return float(k), float(r(4 * k)), float(r(2 * k))


# --------------------------------------------------------------------------------- saved activations
def _dtype_sizes(prec: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(residual stream, matmul output, softmax) element sizes for each precision code."""
    res = np.where(prec == 3, 2.0, 4.0)
    mm = np.where(prec == 0, 4.0, 2.0)
    sm = np.where(prec == 3, 2.0, 4.0)
    return res, mm, sm


def block_activation_bytes(
    *,
    family: np.ndarray,
    T: np.ndarray,
    b: np.ndarray,
    s: np.ndarray,
    h: np.ndarray,
    hq: np.ndarray,
    hkv: np.ndarray,
    heads: np.ndarray,
    head_dim: np.ndarray,
    f: np.ndarray,
    dropout: np.ndarray,
    causal: np.ndarray,
    prec: np.ndarray,
    recompute: np.ndarray,
    math: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(bytes saved by one block for backward, bytes of one block's full activations when recomputed)."""
    res, mm, sm = _dtype_sizes(prec)
    amp = (prec == 1) | (prec == 2)
    llama = family == 1
    drop = dropout > 0
    stats = np.where(llama, r(4 * T), 2 * r(4 * T))  # RMSNorm: rstd; LayerNorm: mean + rstd
    # norm inputs (pre-LN blocks save their input and the mid residual; BERT's post-LN saves two sums)
    norm_in = 2 * r(res * T * h)
    rms_extra = np.where(llama, 2 * r(res * T * h), 0.0)  # x * rstd saved by the weight multiply, per norm
    # inputs of the linears reading a norm output: fp32/bf16-master share one tensor; AMP casts per linear
    attn_in = np.where(amp, 3 * r(2 * T * h), r(res * T * h))  # q, k, v
    mlp_linears_in = np.where(llama, 2.0, 1.0)
    mlp_in = np.where(amp, mlp_linears_in * r(2 * T * h), r(res * T * h))
    # q, k, v as attention sees them (GQA expands k, v to the q width)
    rep = hq / np.maximum(hkv, 1)
    kv_width = np.where(rep > 1, hq, hkv)
    qkv = r(mm * T * hq) + 2 * r(mm * T * kv_width)
    rope_tabs = np.where(llama & amp, 4 * r(2 * s * head_dim), 0.0)
    # attention core
    flash_core = r(4 * b * heads * s) + 2 * BLOCK  # logsumexp + philox seed/offset
    # math core: softmax output (fp32 under autocast) + dropout mask + what probs @ v saves (a half copy
    # under autocast, else the dropped probabilities; without dropout the softmax output itself)
    scores = b * heads * s * s
    math_core = np.where(
        drop,
        r(sm * scores) + r(scores) + np.where(amp, r(2 * scores), r(sm * scores)),
        np.where(amp, r(4 * scores) + r(2 * scores), r(sm * scores)),
    )
    math_core = math_core + np.where(causal, r(s * s), 0.0)
    core = np.where(math, math_core, flash_core)
    core = np.where(recompute == 1, 0.0, core)
    out = r(mm * T * hq)  # attention output = proj input
    resid_masks = np.where(drop, 2 * r(T * h), 0.0)
    # MLP internals
    gelu_mlp = 2 * r(mm * T * f)
    swiglu = 4 * r(mm * T * f)
    mlp = np.where(llama, swiglu, gelu_mlp)
    full = (
        norm_in + stats * 2 + rms_extra + attn_in + qkv + rope_tabs + core + out + resid_masks + mlp_in + mlp
    )
    saved = np.where(recompute == 2, r(res * T * h), full)
    return saved, full


# ------------------------------------------------------------------------------------------ the formula
@dataclass(frozen=True)
class FormulaOut:
    peak_bytes: np.ndarray
    phase: np.ndarray  # index into PHASES
    phase_bytes: np.ndarray  # [n, 3]
    breakdown: dict[str, np.ndarray]

    @property
    def phase_names(self) -> list[str]:
        return [PHASES[i] for i in self.phase]


def evaluate(spec: ModelSpec, views: list[DeviceView]) -> FormulaOut:
    """Peak bytes of each device view of one model (see :func:`peak_arrays` for the vectorized core)."""
    return peak_arrays(inputs_for(spec, views))


def inputs_for(spec: ModelSpec, views: list[DeviceView], **extra: Any) -> dict[str, np.ndarray]:
    """Arrays the vectorized formula reads, one entry per view."""
    arch = spec.arch
    if not isinstance(arch, TransformerArch):
        raise ValueError(f"model {spec.name!r}: the memory formula covers transformer models")
    rows: dict[str, list[float]] = {}

    def put(k: str, v: float) -> None:
        rows.setdefault(k, []).append(float(v))

    n = spec.n_layers
    for v in views:
        zd = v.dp if v.zero >= 1 else 1
        full = stage_params(spec, v.layer_start, v.layer_end, v.tp)
        shard = stage_params(spec, v.layer_start, v.layer_end, v.tp, zd) if zd > 1 else full
        tp = v.tp
        put("family", _FAMILY.get(spec.family, 0))
        put("b", v.micro_batch)
        put("s", spec.seq_len)
        put("h", arch.hidden)
        put("heads", arch.n_heads // tp)
        put("hq", arch.n_heads // tp * arch.head_dim)
        put("hkv", max(1, arch.n_kv_heads // tp) * arch.head_dim)
        put("head_dim", arch.head_dim)
        put("f", -(-arch.ffn_hidden // tp))
        put("V", -(-arch.vocab // tp))
        put("dropout", arch.dropout)
        put("causal", arch.causal)
        put("tied", arch.tied_embeddings)
        put(
            "n_blocks",
            sum(
                1 for j in range(v.layer_start, v.layer_end) if spec.layers[j].kind in ("transformer", "moe")
            ),
        )
        put("has_embed", v.layer_start == 0)
        put("has_head", v.layer_end == n)
        put("in_flight", v.in_flight)
        put("micro_batches", v.micro_batches)
        put("prec", _PREC[v.precision])
        put("recompute", _RECOMPUTE[v.recompute])
        put("math", v.attention == "math")
        put("opt", _OPT[v.optimizer])
        put("zero", v.zero)
        put("dp", v.dp)
        put("tp", tp)
        put("P4", full.fp32_bytes)
        layer_bytes = [
            _layer_profile(
                spec.family, _arch_key(arch), j if spec.layers[j].kind == "moe" else _canon(spec, j), tp, 1
            )
            for j in range(v.layer_start, v.layer_end)
        ]
        put("Lmax4", max(lp.fp32_bytes for lp in layer_bytes))
        put("P2", full.half_bytes)
        put("Pn", full.n_tensors)
        put("Pcast", full.cast_bytes)
        put("S4", shard.fp32_bytes)
        put("S2", shard.half_bytes)
        put("Sn", shard.n_tensors)
        put("Plarge", full.largest_fp32)
        put("buffers", full.buffer_bytes)
        put("Pbias_cast", full.bias_cast_bytes)
        head = _layer_profile(spec.family, _arch_key(arch), n - 1, v.tp, 1) if v.layer_end == n else None
        put("head_cast", head.cast_bytes if head else 0.0)
        put("head_P4", head.fp32_bytes if head else 0.0)
        emb = _layer_profile(spec.family, _arch_key(arch), 0, v.tp, 1) if v.layer_start == 0 else None
        put("emb_P4", emb.fp32_bytes if emb else 0.0)
    out = {k: np.asarray(v, dtype=np.float64) for k, v in rows.items()}
    for k, v in extra.items():
        out[k] = np.asarray(v, dtype=np.float64)
    return out


def peak_arrays(x: dict[str, np.ndarray]) -> FormulaOut:
    """The vectorized core: every argument an array over configurations."""
    prec = x["prec"].astype(int)
    rec = x["recompute"].astype(int)
    fam = x["family"].astype(int)
    b, s, h, V, f = x["b"], x["s"], x["h"], x["V"], x["f"]
    T = b * s
    res, mm, sm = _dtype_sizes(prec)
    amp = (prec == 1) | (prec == 2)
    master = prec == 3
    m = x["in_flight"]
    has_head = x["has_head"] > 0
    has_embed = x["has_embed"] > 0
    zero = x["zero"]
    opt = x["opt"].astype(int)
    nb = x["n_blocks"]
    has_blocks = nb > 0

    saved, full = block_activation_bytes(
        family=fam, T=T, b=b, s=s, h=h, hq=x["hq"], hkv=x["hkv"], heads=x["heads"], head_dim=x["head_dim"],
        f=f, dropout=x["dropout"], causal=x["causal"] > 0, prec=prec, recompute=rec, math=x["math"] > 0,
    )  # fmt: skip
    # BERT's post-LN blocks under autocast keep one more fp32 h-wide tensor each (measured on the trace)
    bert_amp = np.where((fam == 2) & amp & (rec != 2), r(4 * T * h), 0.0)
    saved = saved + bert_amp
    full = full + np.where((fam == 2) & amp, r(4 * T * h), 0.0)
    hidden = r(res * T * h)
    # embedding: dropout mask (GPT/BERT), BERT's embedding LayerNorm, the vocab-shard masks under TP
    emb_act = np.where(x["dropout"] > 0, r(T * h), 0.0) + np.where(fam == 2, hidden + 2 * r(4 * T), 0.0)
    emb_act = emb_act + np.where(x["tp"] > 1, r(8 * T) + r(T), 0.0)
    emb_act = np.where(has_embed, emb_act, 0.0)
    # head: final norm input + stats + linear input (+ AMP cast), logits, log-softmax output
    head_norm = hidden + np.where(fam == 1, r(4 * T) + hidden, 2 * r(4 * T))
    head_lin_in = np.where(amp, r(2 * T * h), hidden)
    logits = r(mm * T * V)
    lsm = r(4 * T * V)
    head_act = np.where(has_head, head_norm + head_lin_in + logits + lsm, 0.0)
    # what a non-last stage holds until the backward: its output, per in-flight micro-batch
    held_out = np.where(has_head, 0.0, hidden)
    # autocast caches casts of leaf parameters only; ZeRO-3 re-gathers (new, uncached) copies per use
    weights_cast = np.where(amp & (x["zero"] < 3), x["Pcast"], 0.0)
    # casts saved by the graph: every layer outside full recompute; checkpointed blocks' casts live only in
    # the cache of the forward that made them (only the head's projection stays saved)
    cast_saved = np.where(
        amp, weights_cast * np.where(has_blocks & (rec == 2), _non_block_share(x), 1.0), 0.0
    )
    cast_cache = np.where(amp & (x["zero"] < 3), weights_cast - cast_saved + x["Pbias_cast"], 0.0)
    # a later stage's first block saves the received activation, already counted as an input
    first_in = np.where(~has_embed & has_blocks, hidden, 0.0)
    per_mb = nb * saved + emb_act + head_act + held_out + cast_saved - first_in

    # ---- states
    P4, P2, S4 = x["P4"], x["P2"], x["S4"]
    weights = np.where(master, P2 + x["buffers"] / 2, P4 + x["buffers"])
    master_w = np.where(master, np.where(zero >= 1, S4, P4), 0.0)
    n_state = np.where(opt == 2, 1.0, 2.0)
    opt_state = n_state * np.where(zero >= 1, S4, P4) + np.where(opt == 2, 0.0, 4.0 * x["Sn"])
    grads_model = np.where(master, P2, P4)  # grads of the model's own params at the end of backward
    grads_opt = np.where(zero >= 1, S4, P4)  # grads the optimizer reads (fp32)
    # ZeRO-2/3 (FSDP2): weights, masters, grads and optimizer state sharded. Forward: the gathered compute
    # copies (ZeRO-2: every layer's, kept until backward; ZeRO-3: one layer's) plus one layer's all-gather
    # buffer; backward: ZeRO-2 keeps every gathered layer, ZeRO-3 one layer and its buffer.
    fsdp = zero >= 2
    c_size = np.where(master, 2.0, 4.0) / 4.0
    layer_c = x["Lmax4"] * c_size
    fsdp_fwd = np.where(fsdp, np.where(zero == 3, 2 * layer_c, P4 * c_size + layer_c), 0.0)
    fsdp_bwd = np.where(fsdp, np.where(zero == 3, 2 * layer_c, P4 * c_size), 0.0)
    weights = np.where(
        fsdp, np.where(master, 0.0, S4) + np.where(master, x["buffers"] / 2, x["buffers"]), weights
    )
    grads_model = np.where(fsdp, S4, grads_model)
    states = weights + master_w + opt_state
    stage_in = np.where(has_embed, r(8 * T), hidden)  # token ids, or a received activation
    inputs = m * stage_in + np.where(has_head, m * r(8 * T), 0.0)

    steady = x["micro_batches"] > m  # 1F1B steady state: full grads already exist during later forwards
    # ---- forward end (the last forward's cross-entropy moment: fp32 copy of half-precision logits)
    g0 = np.where(steady, grads_model, 0.0)
    ce_copy = np.where(has_head & (prec != 0), r(4 * T * V), 0.0)
    base = states + inputs + g0 + m * per_mb
    fwd = base + cast_cache + ce_copy + fsdp_fwd
    # ZeRO-3 reshards the head right after its matmul: gathered copies and log-softmax never coexist
    fwd_z3_head = np.maximum(base + cast_cache + ce_copy, base - lsm + fsdp_fwd)
    fwd = np.where((zero == 3) & has_head, fwd_z3_head, fwd)
    # full recompute: the last checkpointed block still builds its internal tensors during its forward
    # (measured on the trace: GPT 3·T·h + T·f, LLaMA 2·T·h + 1.5·T·f, BERT 2 (fp32) / 3 (half) ·T·h)
    rec_fwd = np.where(
        fam == 0,
        3 * mm * T * h + mm * T * f,
        np.where(fam == 1, 2 * mm * T * h + 1.5 * mm * T * f, np.where(prec == 0, 2.0, 3.0) * mm * T * h),
    )
    fwd = np.maximum(fwd, np.where((rec == 2) & has_blocks, base + cast_cache + fsdp_fwd + rec_fwd, 0.0))
    # ---- backward: top of the stage (cross-entropy grads or the received grad + top block's transient),
    # bottom of the stage (grads of everything above, only the bottom block's activations left)
    a_h, a_f, c_w = _bwd_coefficients(fam, prec, rec)
    x_block = a_h * (mm * T * h) + a_f * (mm * T * f) + c_w * (4 * h * f)
    math_extra = np.where(
        (x["math"] > 0) & (rec >= 1), _math_core(b, s, x["heads"], x["dropout"] > 0, prec), 0.0
    )
    x_block = x_block + math_extra
    # BERT's post-LN block under full recompute keeps two more h-wide tensors in its backward (measured)
    x_block = x_block + np.where((fam == 2) & (rec == 2), 2 * mm * T * h, 0.0)
    # with gradients already there (1F1B steady state) each weight's new gradient is a temporary first
    x_block = x_block + np.where(steady, r(4 * h * f) + np.where(amp, r(2 * h * f), 0.0), 0.0)
    ce_grads = 2 * r(4 * T * V)
    # top of the stage: cross-entropy grads at the head, or the top block's transient
    # ZeRO-2/3 backward: gathered compute copies plus one layer's unsharded gradient before reduce-scatter
    # (ZeRO-3 gathers the head only after the cross-entropy gradients are made and freed)
    bwd_top = base + np.where(has_head, ce_grads, np.where(has_blocks, x_block, hidden))
    bwd_top = bwd_top + np.where(has_head & (zero == 3), 0.0, fsdp_bwd)
    base = base + fsdp_bwd
    # the top block's backward under the head: head stuff of this micro-batch gone, its grads made
    head_now = head_act - np.where(has_head, logits, 0.0)  # the logits stay: the caller holds the output
    g_head = np.where(has_head & ~((x["tied"] > 0) & has_embed), x["head_P4"], 0.0)
    after_head = base - head_now + np.where(g0 > 0, 0.0, g_head) + x_block
    # bottom of the stage: every upper block's grads, only the bottom block's activations left
    per_block_g = grads_model - np.where(has_head, x["head_P4"], 0.0) - np.where(has_embed, x["emb_P4"], 0.0)
    per_block_g = per_block_g / np.maximum(nb, 1)
    g_above = np.where(g0 > 0, 0.0, per_block_g * np.maximum(nb - 1, 0) + g_head)
    bwd_bottom = base - head_now - np.maximum(nb - 1, 0) * saved + g_above + x_block
    # the embedding's backward: a dense V×h gradient and its scratch; a tied head's gradient waits in the
    # autograd input buffer until the embedding's part is added to it
    pe = np.where(master, 2.0, 4.0)
    vh = r(pe * V * h)
    tied = has_embed & has_head & (x["tied"] > 0)
    emb_g = np.where(master, x["emb_P4"] / 2, x["emb_P4"])
    # (measured: untied 1 + [first backward]; tied 3 in fp32, 2 under autocast / bf16 params)
    emb_tmp = vh * np.where(tied, 2.0 + (prec == 0), 1.0 + (g0 == 0))
    held = np.where(has_head, logits, 0.0)
    bwd_emb = states + inputs + (m - 1) * per_mb + np.where(g0 > 0, g0, grads_model - emb_g) + emb_tmp + held
    # non-reentrant checkpointing: the bottom block's recomputed tensors outlive its backward
    bwd_emb = bwd_emb + fsdp_bwd + np.where((rec == 2) & has_blocks, full - hidden, 0.0)
    bwd_emb = np.where(has_embed, bwd_emb, 0.0)
    after_head = after_head + np.where(tied, vh, 0.0)
    bwd_bottom = bwd_bottom + np.where(tied, vh, 0.0)
    bwd = np.maximum(bwd_top, np.where(has_blocks, np.maximum(after_head, bwd_bottom), 0.0))
    bwd = np.maximum(bwd, bwd_emb)
    # ---- optimizer step: fp32 grads, foreach AdamW's param-sized temporary
    foreach_tmp = np.where(opt == 2, 0.0, np.where(zero >= 1, S4, P4))
    loader = m * (np.where(has_embed, r(8 * T), 0.0) + np.where(has_head, r(8 * T), 0.0))
    opt_phase = (
        weights
        + master_w
        + opt_state
        + loader
        + np.maximum(
            grads_opt + foreach_tmp,
            # ZeRO-1 / bf16-master: the model's full grads are still there when the first fp32 slice is made
            np.where(
                (zero >= 1) | master, grads_model + x["Plarge"] / np.where(zero >= 1, x["dp"], 1.0), 0.0
            ),
        )
    )
    phase_bytes = np.stack([fwd, bwd, opt_phase], axis=1)
    phase = np.argmax(phase_bytes, axis=1)
    peak = phase_bytes[np.arange(len(phase)), phase]
    breakdown = {
        "weights": weights,
        "master_weights": master_w,
        "gradients": np.where(phase == 2, grads_opt, g0),
        "optimizer_state": opt_state,
        "activations": m * per_mb + inputs,
        "temporaries": np.where(phase == 2, foreach_tmp, np.where(phase == 1, bwd - base, fwd - base)),
    }
    return FormulaOut(peak_bytes=peak, phase=phase, phase_bytes=phase_bytes, breakdown=breakdown)


def _math_core(
    b: np.ndarray, s: np.ndarray, heads: np.ndarray, drop: np.ndarray, prec: np.ndarray
) -> np.ndarray:
    """Scores a recomputed math-attention core re-materializes in the backward."""
    amp = (prec == 1) | (prec == 2)
    sm = np.where(prec == 3, 2.0, 4.0)
    n = b * heads * s * s
    return np.where(amp, r(4 * n) + r(2 * n), r(sm * n)) + np.where(drop, r(n) + r(sm * n), 0.0)


def _non_block_share(x: dict[str, np.ndarray]) -> np.ndarray:
    """Fraction of matmul weights outside the transformer blocks (the head's projection)."""
    return np.where(x["has_head"] > 0, x["head_cast"] / np.maximum(x["Pcast"], 1.0), 0.0)


# Backward transient of the top block of a stage (with the received gradient, and the recomputed block under
# full recompute), over the forward-end level: a_h·(T·h·e) + a_f·(T·f·e) + c·(4·h·f), f this rank's FFN
# columns, e the matmul element size. Measured by bench/memory_calibrate.py on the trace of one block at two
# token counts and two TP degrees; the memory benchmark checks them on other widths, batches and layouts.
_BWD_COEF: dict[tuple[str, str, str], tuple[float, float, float]] = {
    ("bert", "amp", "full"): (8.501, 2.09, 0.834),
    ("bert", "amp", "none"): (0.828, 0.913, 0.5),
    ("bert", "amp", "selective"): (0.828, 0.913, 0.5),
    ("bert", "fp32", "full"): (4.918, 2.087, 1.003),
    ("bert", "fp32", "none"): (1.744, 0.999, 1.003),
    ("bert", "fp32", "selective"): (1.744, 0.999, 1.003),
    ("bert", "master", "full"): (4.835, 2.173, 0.502),
    ("bert", "master", "none"): (1.486, 0.999, 0.502),
    ("bert", "master", "selective"): (1.486, 0.999, 0.502),
    ("gpt", "amp", "full"): (10.843, 1.257, 0.833),
    ("gpt", "amp", "none"): (0.824, 0.916, 0.499),
    ("gpt", "amp", "selective"): (0.824, 0.916, 0.499),
    ("gpt", "fp32", "full"): (3.921, 2.087, 1.002),
    ("gpt", "fp32", "none"): (0.747, 1.0, 1.002),
    ("gpt", "fp32", "selective"): (0.747, 1.0, 1.002),
    ("gpt", "master", "full"): (4.175, 2.09, 0.502),
    ("gpt", "master", "none"): (0.493, 0.999, 0.502),
    ("gpt", "master", "selective"): (0.493, 0.999, 0.502),
    ("llama", "amp", "full"): (11.834, 6.58, 1.563),
    ("llama", "amp", "none"): (1.992, 3.999, 1.002),
    ("llama", "amp", "selective"): (1.992, 3.999, 1.002),
    ("llama", "fp32", "full"): (6.0, 6.457, 2.002),
    ("llama", "fp32", "none"): (0.996, 4.0, 2.002),
    ("llama", "fp32", "selective"): (0.996, 4.0, 2.002),
    ("llama", "master", "full"): (5.997, 6.459, 1.002),
    ("llama", "master", "none"): (0.992, 3.999, 1.002),
    ("llama", "master", "selective"): (0.992, 3.999, 1.002),
}

_FAM_NAMES = ("gpt", "llama", "bert")
_CLS = ("fp32", "amp", "amp", "master")


def _bwd_coefficients(
    fam: np.ndarray, prec: np.ndarray, rec: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a = np.zeros(len(fam))
    af = np.zeros(len(fam))
    c = np.zeros(len(fam))
    for fi, fname in enumerate(_FAM_NAMES):
        for pi, cls in enumerate(_CLS):
            for ri, rname in enumerate(("none", "selective", "full")):
                sel = (fam == fi) & (prec == pi) & (rec == ri)
                if sel.any():
                    a[sel], af[sel], c[sel] = _BWD_COEF[(fname, cls, rname)]
    return a, af, c

"""Compute cost of one layer on one GPU type and TP degree: a roofline with an efficiency curve, overridden by
measured profiles wherever one exists.

Why a roofline: a layer's time is bounded below both by its arithmetic (FLOPs at the achievable FLOP/s) and by
the bytes it must move through device memory (weights, saved activations, outputs at the achievable bandwidth);
whichever bound is larger wins. Peak FLOP/s is never reached by small matmuls (kernel launch and tile
under-occupancy), so the achievable fraction of peak follows a per-GPU-type :class:`EfficiencyCurve`.
Measured truth beats the model: a :class:`Profile` entry for the same layer signature, device type, TP degree,
micro-batch and precision replaces the roofline (Crius §5.1's single-device profiles land here).

Dense transformer blocks whose shape the caller passes (:class:`BlockShape`; the estimator does for GPT/LLaMA/BERT
specs) are priced kernel class by kernel class instead (:func:`block_terms`): each GEMM at the efficiency measured
for its size, the attention core at FlashAttention's measured rate, and the elementwise work as memory traffic
added to them — the published measurements live in ``tessera/hardware/efficiency.yaml``, one citation per figure.
A whole-layer roofline hides that a small model's GEMMs are small and its norms and activations cost as much
as they do; the per-kernel sum does not.

Backward = 2 × forward FLOPs (gradients w.r.t. inputs and weights); full recompute adds one more forward to the
backward of the layers the runtime checkpoints (blocks: ``RECOMPUTED_KINDS``; embeddings and heads run once),
selective recompute adds only the attention core's forward — where no profiled variant of the block was timed.

The optimizer step is a third cost per layer (:func:`optimizer_time`): once per iteration, not per micro-batch, a
memory-bound pass over parameters, gradients and optimizer state (``OPTIMIZER_BYTES_PER_PARAM``), or its
measured time where the profiler took one.

On the CPU stand-in device the "device" of one process is the cores it is given: the runtime gives each of the
``P`` processes on a host ``cpus // P`` threads, so a profile taken with 2 threads says nothing about a
1-thread rank. :func:`profile_device` names that device (``cpu@1t``) for profile keys; GPUs are their type.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from functools import cache, cached_property
from importlib import resources
from pathlib import Path

import numpy as np
import yaml

from tessera.hardware import GPUSpec
from tessera.models.spec import RECOMPUTED_KINDS, Layer, TPShard, TransformerArch

HALF_PRECISIONS = ("bf16", "fp16", "bf16-master")

# Bytes of device memory traffic per parameter of one optimizer step (fp32 state), counted pass by pass over
# PyTorch's foreach implementation (the single-tensor one makes the same passes): AdamW = lerp of m (12) + v·β₂
# (8) + addcmul into v (12) + weight decay (8) + sqrt, ÷ bias correction, + eps on a temporary (3 × 8) +
# addcdiv into p (16) = 80; Adam has no weight-decay pass; SGD with momentum = buf·μ (8) + buf + g (12) +
# p − lr·buf (12).
OPTIMIZER_BYTES_PER_PARAM = {"adamw": 80.0, "adam": 72.0, "sgd": 32.0}
# Extra per-parameter traffic of the precision's bookkeeping around the step: bf16 masters copy the bf16 grad
# into the fp32 master (2 + 4) and the updated master back (4 + 2); fp16 unscales the grads and checks them
# for inf/nan (8 + 5).
PRECISION_STEP_BYTES_PER_PARAM = {"bf16-master": 12.0, "fp16": 13.0}


@dataclass(frozen=True)
class EfficiencyCurve:
    """Achieved fraction of peak as a function of the work of one layer on one device.

    ``fraction(F) = max(min_fraction, max_fraction · F / (F + half_flops))`` — a saturating curve: a layer
    doing ``half_flops`` FLOPs per pass reaches half of ``max_fraction``; large layers approach
    ``max_fraction`` (the best sustained matmul efficiency of the part, ~0.5-0.7 of datasheet peak), tiny ones
    fall towards ``min_fraction``. ``memory_fraction`` is the achievable share of datasheet memory bandwidth.
    Frozen and small on purpose: calibration (``tessera.perf`` consumers) replaces a whole curve per GPU type.
    """

    max_fraction: float = 0.6
    half_flops: float = 2.0e9
    min_fraction: float = 0.02
    memory_fraction: float = 0.8

    def fraction(self, flops: float) -> float:
        if flops <= 0:
            return self.max_fraction
        return max(self.min_fraction, self.max_fraction * flops / (flops + self.half_flops))


# Defaults per architecture. Newer parts need bigger matmuls to fill (more SMs, bigger tensor-core tiles), so
# half_flops grows with the generation; max_fraction follows the sustained GEMM efficiency usually reported for
# transformer training (Megatron-LM reports ~50-57 % MFU on A100/H100 at scale; V100/T4 sustain somewhat less).
# Ampere is checked against Megatron-LM's published A100 MFU by bench/published.py (Korthikanti et al. 2022).
DEFAULT_CURVES: dict[str, EfficiencyCurve] = {
    "pascal": EfficiencyCurve(max_fraction=0.55, half_flops=0.5e9),
    "volta": EfficiencyCurve(max_fraction=0.55, half_flops=1.0e9),
    "turing": EfficiencyCurve(max_fraction=0.5, half_flops=1.0e9),
    # A100 cuBLAS bf16 GEMMs of transformer shapes sustain ~230-250 TFLOP/s (0.74-0.80 of 312); Megatron's
    # 1T run reaches ~63 % MFU per stage (56.3 % over its 512/575 1F1B efficiency) with TP comm, so >= 0.7.
    "ampere": EfficiencyCurve(max_fraction=0.75, half_flops=2.0e9),
    "ada": EfficiencyCurve(max_fraction=0.6, half_flops=2.0e9),
    "hopper": EfficiencyCurve(max_fraction=0.6, half_flops=4.0e9),
    "cpu": EfficiencyCurve(max_fraction=0.5, half_flops=1.0e7, memory_fraction=0.6),
}


@dataclass(frozen=True)
class AttentionEfficiency:
    """FlashAttention's achieved fraction of peak on the FLOPs it computes (a causal mask: half the score
    matrix), forward and backward, by sequence length: ``(seq_len, fwd, bwd)`` points, causal and not (one
    list standing for both where only one was measured). Short sequences run well below long ones (a 512-token
    causal forward at 0.19 of an H100's peak, 0.33 from 16k), so one figure for all lengths misprices both."""

    causal: tuple[tuple[float, float, float], ...]
    full: tuple[tuple[float, float, float], ...]

    @cached_property
    def _tables(self) -> dict[bool, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(log lengths, forward, backward) per mask, built once: the estimate asks for every block it prices."""
        return {
            causal: (
                np.log([p[0] for p in pts]),
                np.array([p[1] for p in pts]),
                np.array([p[2] for p in pts]),
            )
            for causal, pts in ((True, self.causal), (False, self.full))
        }

    def fractions(self, seq_len: float, causal: bool) -> tuple[float, float]:
        """(forward, backward) at ``seq_len``: interpolated in log length, held beyond the measured ends."""
        x, fwd, bwd = self._tables[causal]
        at = math.log(max(seq_len, 1.0))
        return float(np.interp(at, x, fwd)), float(np.interp(at, x, bwd))

    @staticmethod
    def flat(fwd: float, bwd: float) -> AttentionEfficiency:
        """One figure for every length (a source that did not resolve lengths)."""
        pts = ((1.0, fwd, bwd),)
        return AttentionEfficiency(causal=pts, full=pts)


@dataclass(frozen=True)
class MeasuredKernels:
    """Kernel measurements of one GPU type (``tessera/hardware/efficiency.yaml``): published, or profiled on a
    lent GPU of the type.

    ``gemm``: a curve fitted to measured single-GEMM throughputs by size (None: no size-resolved table, the
    arch curve stays); ``attention``: FlashAttention's achieved fractions by sequence length (None: not
    measured). ``sources`` names where each figure was published or measured."""

    gemm: EfficiencyCurve | None = None
    attention: AttentionEfficiency | None = None
    sources: tuple[str, ...] = ()


def fit_curve(points: list[tuple[float, float]], memory_fraction: float = 0.8) -> EfficiencyCurve:
    """The saturating curve ``max · F / (F + half)`` closest in log space to measured (FLOPs, fraction) points:
    a grid over max ∈ [0.30, 0.99] and half ∈ [1e6, 1e13] FLOPs (fine enough for the tables' scatter)."""
    best: tuple[float, float, float] | None = None
    for i in range(30, 100):
        mx = i / 100
        for j in range(120, 261):
            half = 10 ** (j / 20)
            err = sum((math.log(mx * F / (F + half)) - math.log(f)) ** 2 for F, f in points)
            if best is None or err < best[0]:
                best = (err, mx, half)
    assert best is not None
    return EfficiencyCurve(
        max_fraction=best[1], half_flops=best[2], min_fraction=0.001, memory_fraction=memory_fraction
    )


def _entry_kernels(entry: dict, peak: float) -> MeasuredKernels:
    gemm = entry.get("gemm") or {}
    sources = [str(gemm["source"])] if gemm.get("points") else []
    curve = None
    if gemm.get("points"):
        pts = [(2.0 * b * m * n * k, float(v) / peak) for b, m, n, k, v in gemm["points"]]
        curve = fit_curve(pts)
    att = entry.get("attention") or {}
    attention = _attention(att, peak)
    if attention is not None:
        sources.append(str(att["source"]))
        if att.get("backward_over_forward") is not None:
            sources.append(str(att["backward_source"]))
    return MeasuredKernels(gemm=curve, attention=attention, sources=tuple(sources))


def _attention(att: dict, peak: float) -> AttentionEfficiency | None:
    """The data file's attention entry as fractions: ``by_seq`` tables, or one forward figure (``points`` of
    FLOP/s averaged, or ``forward_fraction``) with a backward figure or a backward/forward ratio."""
    if att.get("by_seq"):
        table = att["by_seq"]

        def pts(key: str) -> tuple[tuple[float, float, float], ...]:
            return tuple((float(s), float(f), float(b)) for s, f, b in sorted(table[key]))

        causal = pts("causal") if table.get("causal") else pts("full")
        return AttentionEfficiency(causal=causal, full=pts("full") if table.get("full") else causal)
    if att.get("points"):
        fwd = sum(float(p[-1]) for p in att["points"]) / len(att["points"]) / peak
    elif att.get("forward_fraction") is not None:
        fwd = float(att["forward_fraction"])
    else:
        return None
    if att.get("backward_fraction") is not None:
        bwd = float(att["backward_fraction"])
    elif att.get("backward_over_forward") is not None:
        bwd = fwd * float(att["backward_over_forward"])
    else:
        bwd = fwd
    return AttentionEfficiency.flat(fwd, bwd)


@cache
def _measured_table() -> dict[str, dict]:
    text = resources.files("tessera.hardware").joinpath("efficiency.yaml").read_text()
    table: dict[str, dict] = {}
    for group, entry in (yaml.safe_load(text) or {}).items():
        for name in entry.get("gpus", ()):
            table[str(name)] = {**entry, "group": group}
    return table


_KERNELS: dict[tuple[str, float], MeasuredKernels] = {}


def measured_kernels(gpu: GPUSpec) -> MeasuredKernels:
    """The published kernel measurements for ``gpu`` (empty where the data file has none for its type)."""
    entry = _measured_table().get(gpu.name)
    if entry is None:
        return MeasuredKernels()
    key = (gpu.name, gpu.peak_flops("bf16"))
    hit = _KERNELS.get(key)
    if hit is None:
        hit = _KERNELS[key] = _entry_kernels(entry, key[1])
    return hit


# Bytes of device memory each elementwise kernel moves per element, in units of the activation element (``e``:
# 2 in half precision, 4 in fp32) plus 1-byte dropout masks; every kernel reads its inputs and writes its output
# once, a view moves nothing. Two implementations (:class:`Kernels`):
#
# * eager — Tessera's runtime, op by op over ``tessera.nn.common``:
#     LayerNorm (``F.layer_norm``, one kernel): read x, write y = 2
#     RMSNorm written out: ``x.pow(2)`` r+w, ``.mean`` r, ``x * rstd`` r+w, ``* weight`` r+w = 7
#     residual add ``x + f(x)``: read 2, write 1 = 3; residual dropout (``native_dropout``): r+w 2 + a mask byte
#     RoPE ``x·cos + rotate_half(x)·sin`` on q and k: neg of a half r+w 1, cat r+w 2, two products r+w 2
#       each, the sum r 2 + w 1 = 10
#     attention output ``transpose(1, 2).reshape``: a copy, r+w = 2
#     GELU r+w = 2 over the FFN width; SwiGLU ``silu(gate) * up``: silu r+w 2, product r 2 + w 1 = 5
#     math attention, per s × s score element: ``q @ kᵀ`` writes it (1), ``* scale`` r+w (2), the causal
#       ``masked_fill`` r+w (2), ``softmax`` r+w (2), dropout r+w (2, + a mask byte), ``probs @ v`` reads it (1)
# * fused — Megatron-LM's kernels (megatron/model/fused_layer_norm.py, fused_bias_gelu.py, fused_softmax.py and
#   the bias-dropout-add fusion of transformer.py), which NeMo and Megatron-DeepSpeed run too:
#     LayerNorm (apex ``FusedLayerNormAffineFunction``) 2; bias + dropout + residual add in one kernel: read 2,
#     write 1 (+ the mask byte) = 3; bias-GeLU r+w 2; the context layer's ``permute(...).contiguous()`` 2;
#     scores: ``baddbmm`` writes them (1), ``FusedScaleMaskSoftmax`` r+w (2, scale and causal mask inside),
#     attention dropout r+w (2, + the mask byte), ``bmm`` with v reads them (1); RMSNorm, RoPE and SwiGLU
#     fused like LayerNorm / bias-GeLU (2, 2 on q and k, r 2 + w 1 = 3). With sequence parallelism
#     (Korthikanti et al. 2022) the norms and the dropout-add run on the rank's 1/TP of the tokens.
#
# AMP with fp32 parameters (``fp16``/``bf16`` plans whose layers are not FSDP-sharded) keeps the residual stream in
# fp32: the embedding's lookup of an fp32 table is fp32, and an op outside autocast's cast lists runs in its
# widest input's dtype, so every residual add of a half Linear output to the stream is fp32, and so are the norms
# and dropout-adds on it (PyTorch's "Automatic Mixed Precision package" docs: "CUDA Ops that can autocast to
# float32" and the widest-input-type rule for the ops it does not list). The kernels on the stream then move
# 4-byte elements: a norm r+w at 4, a residual add reads the half output and the fp32 stream and writes fp32,
# and the Linear after each norm casts its fp32 input to half first (read 4, write ``e``).
#
# Backward runs each kernel's gradient: it reads the saved input(s) and the incoming gradient and writes the
# outgoing one, about twice the forward's traffic (``BlockTerms.bwd_s``).
NORM_BYTES = {"layernorm": 2.0, "rmsnorm": 7.0}
FUSED_NORM_BYTES = 2.0
MLP_ACT_BYTES = {"gelu": 2.0, "swiglu": 5.0}
FUSED_MLP_ACT_BYTES = {"gelu": 2.0, "swiglu": 3.0}
RESIDUAL_BYTES = 3.0
DROPOUT_BYTES = 2.0  # eager: its own kernel; fused: inside the residual add's
ROPE_BYTES = 10.0
FUSED_ROPE_BYTES = 2.0
LAYOUT_COPY_BYTES = 2.0
SCORE_BYTES = 4.0  # eager: q @ kᵀ write, scale r+w, probs @ v read
FUSED_SCORE_BYTES = 2.0  # fused: baddbmm write (scale inside), bmm read
SCORE_CAUSAL_BYTES = 2.0  # eager only: the masked_fill (fused: inside the softmax)
SCORE_SOFTMAX_BYTES = 2.0
SCORE_DROPOUT_BYTES = 2.0


@dataclass(frozen=True)
class Kernels:
    """Which kernels run a dense block's memory-bound work: Tessera's eager runtime (the default: what the
    estimator prices for the plans Tessera runs), or Megatron-LM's fused kernels, optionally with sequence
    parallelism — how a published Megatron, NeMo or Megatron-DeepSpeed run is priced (``NORM_BYTES`` … above)."""

    fused: bool = False
    sequence_parallel: bool = False


EAGER = Kernels()


@dataclass(frozen=True)
class BlockShape:
    """The GEMM and attention shape of one dense transformer block, per sample: what the measured kernel curves
    are indexed by (a block's FLOPs alone hide that a 125M model's GEMMs are small and its elementwise traffic
    large next to them). Widths are the whole layer's; a TP rank runs its share of the output widths. The
    norm, MLP activation, RoPE, causality, dropout and head count name the block's elementwise kernels
    (:meth:`elementwise_bytes`)."""

    hidden: int
    qkv_width: int  # q + k + v output width
    ffn_in_width: int  # fc_in (gate + up under SwiGLU)
    ffn_hidden: int
    seq_len: int
    attention: str = "flash"  # the plan's attention kernel: flash | math
    norm: str = "layernorm"
    mlp: str = "gelu"
    rope: bool = False
    causal: bool = True
    dropout: float = 0.0
    heads: int = 0
    kernels: Kernels = EAGER
    stream_bytes: float = 0.0  # bytes of a residual-stream element where not the activations' (AMP: 4)

    def gemms(self, tokens: float, frac: float) -> tuple[tuple[float, float, float], ...]:
        """(m, n, k) of the block's four forward GEMMs on a rank doing ``frac`` of the layer."""
        h = self.hidden
        return (
            (tokens, self.qkv_width * frac, h),
            (tokens, h, h * frac),
            (tokens, self.ffn_in_width * frac, h),
            (tokens, h, self.ffn_hidden * frac),
        )

    def elementwise_bytes(self, samples: float, frac: float, elem: float) -> tuple[float, float]:
        """(token-wise, score) bytes the block's memory-bound kernels move in one forward of ``samples``
        sequences on a rank doing ``frac`` of the layer (``elem``: bytes of an activation element), kernel by
        kernel (``NORM_BYTES`` … above, eager or fused as ``kernels`` says). Norms, residual adds and residual
        dropouts run on the whole hidden width on every TP rank, or on 1/TP of the tokens under sequence
        parallelism; the attention and MLP kernels on the rank's heads and FFN columns. ``score``: the s × s
        scores that math attention materializes (flash attention keeps them on chip: 0)."""
        h = self.hidden
        drop = self.dropout > 0
        fused = self.kernels.fused
        mask = 1.0 if drop else 0.0
        stream = self.stream_bytes or elem
        # a residual add reads the half output and the stream, writes the stream; a wider stream is cast back
        # to half for the Linear after each norm
        add_bytes = (RESIDUAL_BYTES - 1.0) * stream + elem
        cast = stream + elem if stream > elem else 0.0
        if fused:
            norm, add = FUSED_NORM_BYTES, add_bytes + mask
        else:
            norm = NORM_BYTES.get(self.norm, 2.0)
            add = add_bytes + ((DROPOUT_BYTES * elem + 1.0) if drop else 0.0)
        replicated = frac if self.kernels.sequence_parallel else 1.0
        per_token = 2 * (norm * stream + add + cast) * h * replicated
        q_width = h * frac
        if self.rope:
            rope = FUSED_ROPE_BYTES if fused else ROPE_BYTES
            per_token += rope * (q_width + (self.qkv_width - h) / 2 * frac) * elem
        per_token += LAYOUT_COPY_BYTES * q_width * elem
        act = (FUSED_MLP_ACT_BYTES if fused else MLP_ACT_BYTES).get(self.mlp, 2.0)
        per_token += act * self.ffn_hidden * frac * elem
        score = 0.0
        if self.attention == "math" and self.heads:
            if fused:
                per_elem = FUSED_SCORE_BYTES + SCORE_SOFTMAX_BYTES
            else:
                per_elem = SCORE_BYTES + SCORE_SOFTMAX_BYTES + (SCORE_CAUSAL_BYTES if self.causal else 0.0)
            per_elem = per_elem * elem + ((SCORE_DROPOUT_BYTES * elem + 1.0) if drop else 0.0)
            score = per_elem * samples * self.heads * frac * self.seq_len**2
        return per_token * samples * self.seq_len, score


def block_shape(
    arch: TransformerArch,
    seq_len: int,
    attention: str = "flash",
    kernels: Kernels = EAGER,
    stream_bytes: float = 0.0,
) -> BlockShape:
    """The dense block shape of ``arch`` (MoE blocks are not dense: callers pass none for them), its
    memory-bound work run by ``kernels`` on a residual stream of ``stream_bytes`` elements (0: the
    activations' width)."""
    gated = 2 if arch.mlp == "swiglu" else 1
    return BlockShape(
        hidden=arch.hidden,
        qkv_width=arch.hidden + 2 * arch.kv_hidden,
        ffn_in_width=gated * arch.ffn_hidden,
        ffn_hidden=arch.ffn_hidden,
        seq_len=seq_len,
        attention=attention,
        norm=arch.norm,
        mlp=arch.mlp,
        rope=arch.position == "rope",
        causal=arch.causal,
        dropout=arch.dropout,
        heads=arch.n_heads,
        kernels=kernels,
        stream_bytes=stream_bytes,
    )


@dataclass(frozen=True)
class BlockTerms:
    """One forward of a dense block on one rank, kernel class by kernel class (they run one after another)."""

    gemm_s: float
    attention_fwd_s: float
    attention_bwd_s: float  # the attention core's backward (2 × its forward FLOPs, at its backward rate)
    elementwise_s: float  # norms, activations, dropout, residuals: memory-bound, not hidden behind GEMMs
    # math attention's s × s score traffic (scale, mask, softmax, dropout): memory-bound
    scores_s: float = 0.0

    @property
    def fwd_s(self) -> float:
        return self.gemm_s + self.attention_fwd_s + self.elementwise_s + self.scores_s

    @property
    def bwd_s(self) -> float:
        return 2.0 * (self.gemm_s + self.elementwise_s + self.scores_s) + self.attention_bwd_s

    @property
    def core_fwd_s(self) -> float:
        """The attention core's forward (its two matmuls and, under math attention, the score kernels):
        what selective recompute runs again in backward."""
        return self.attention_fwd_s + self.scores_s


def block_terms(
    layer: Layer,
    shape: BlockShape,
    gpu: GPUSpec,
    *,
    tp: int = 1,
    micro_batch: float = 1,
    precision: str = "fp32",
    ratio: float | None = None,
    curves: Mapping[str, EfficiencyCurve] | None = None,
) -> BlockTerms:
    """A dense block priced kernel class by kernel class from measured efficiencies.

    * GEMMs, each at the GEMM curve's fraction for its own FLOPs: the curve fitted to the GPU's published GEMM
      table (``efficiency.yaml``), else the arch curve; a calibrated curve for the type (``curves``) wins.
    * The attention core (the layer's FLOPs beyond its GEMMs: QKᵀ and softmax·V) at FlashAttention's measured
      forward and backward fraction for the sequence length where measured and the plan uses flash (half the
      score matrix under a causal mask), else at the GEMM curve.
    * Elementwise work as memory traffic, kernel by kernel (:meth:`BlockShape.elementwise_bytes`: each norm,
      residual add, dropout, RoPE, layout copy and activation reads its inputs and writes its output) at the
      achievable bandwidth, added rather than overlapped — separate memory-bound kernels, a large share of a
      small block's time and more of it on a GPU whose FLOP/s grew faster than its bandwidth (H100: 3.2× an
      A100's bf16 peak, 1.6× its bandwidth). Math attention adds the traffic of its materialized s × s scores
      (``scores_s``); flash attention keeps them on chip.
    """
    frac = shard_fraction(layer, tp, ratio)
    tokens = micro_batch * shape.seq_len
    peak = gpu.peak_flops(precision)
    measured = measured_kernels(gpu)
    table = curves or {}
    curve = table.get(gpu.name) or measured.gemm or curve_for(gpu, curves)
    gemm_s = gemm_flops = 0.0
    for m, n, k in shape.gemms(tokens, frac):
        f = 2.0 * m * n * k
        gemm_flops += f
        gemm_s += f / (peak * curve.fraction(f)) if f > 0 else 0.0
    core = max(0.0, layer.fwd_flops_per_sample * micro_batch * frac - gemm_flops)
    if shape.attention == "flash" and measured.attention is not None and gpu.name not in table:
        # the spec counts the whole score matrix; under a causal mask flash skips the blocks above the
        # diagonal and computes half of it (math attention computes all of it, then masks)
        work = core / 2.0 if shape.causal else core
        fwd_f, bwd_f = measured.attention.fractions(shape.seq_len, shape.causal)
        att_f = work / (peak * fwd_f)
        att_b = 2.0 * work / (peak * bwd_f)
    else:
        att_f = core / (peak * curve.fraction(core)) if core > 0 else 0.0
        att_b = 2.0 * att_f
    elem = 2.0 if precision in HALF_PRECISIONS else 4.0
    token_bytes, score_bytes = shape.elementwise_bytes(micro_batch, frac, elem)
    bw = gpu.memory_bandwidth_Bps * curve_for(gpu, curves).memory_fraction
    return BlockTerms(
        gemm_s=gemm_s,
        attention_fwd_s=att_f,
        attention_bwd_s=att_b,
        elementwise_s=token_bytes / bw,
        scores_s=score_bytes / bw,
    )


def curve_for(gpu: GPUSpec, curves: Mapping[str, EfficiencyCurve] | None = None) -> EfficiencyCurve:
    """The efficiency curve of a GPU: by type name first (calibrated), then by architecture, else default."""
    table = curves or {}
    return table.get(gpu.name) or table.get(gpu.arch) or DEFAULT_CURVES.get(gpu.arch) or EfficiencyCurve()


def profile_device(gpu_name: str, threads: int | None = None) -> str:
    """The device-type key of a profile: the GPU type, or for the CPU stand-in ``cpu@{threads}t`` — a process
    given fewer cores is a slower device (``threads=None``: the plain name)."""
    return f"{gpu_name}@{int(threads)}t" if threads else gpu_name


def reruns_forward(layer: Layer, recompute: str) -> bool:
    """Whether the runtime runs ``layer``'s forward again in backward: under full recompute, the layers it
    checkpoints (blocks; embeddings, stems and heads run once)."""
    return recompute == "full" and layer.kind in RECOMPUTED_KINDS


def runtime_splits(layer: Layer) -> bool:
    """Whether Tessera's runtime actually splits ``layer`` across a TP group.

    It splits the Linears of dense transformer blocks (attention by heads, MLP by columns; own layers or
    DTensor), embeddings and output heads along the vocabulary (vocab-parallel lookup and cross-entropy) and a
    classifier along its classes. MoE experts and conv channels (parameters that are not Linears) stay
    replicated, so each TP rank computes all of them and no TP all-reduce follows. The cost model prices what
    runs, not what the spec could shard.
    """
    if layer.kind == "transformer":
        return layer.tp_shard == TPShard.HEADS
    if layer.kind in ("embedding", "head"):
        return layer.tp_shard == TPShard.VOCAB
    return layer.kind == "classifier" and layer.tp_shard == TPShard.COLUMNS


def layer_signature(layer: Layer) -> tuple:
    """What makes two layers cost the same: everything but the name (blocks 0..L-1 of a GPT share one)."""
    return (
        layer.kind,
        layer.params,
        float(layer.fwd_flops_per_sample),
        layer.act_bytes_per_sample,
        layer.out_bytes_per_sample,
        str(layer.tp_shard),
        layer.tp_units,
    )


@dataclass(frozen=True)
class LayerTime:
    """Forward and backward seconds of one layer for one micro-batch on one device (rank)."""

    fwd_s: float
    bwd_s: float  # includes any recompute
    source: str = "roofline"  # "roofline" | "kernels" (measured kernel curves by shape) | "profile"
    # on a GPU, the host's seconds to launch the layer's kernels (profiled): a stage whose launches take longer
    # than its kernels runs at the launch rate, so it costs the larger of the two sums (0: not measured)
    host_fwd_s: float = 0.0
    host_bwd_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.fwd_s + self.bwd_s


ProfileKey = tuple[tuple, str, int, int, str, str, str]
TP_IMPLS = ("own", "dtensor")  # how a TP shard is executed: Tessera's own layers, or PyTorch DTensor
# block variants the profiler times: a checkpointed block's first forward runs under saved-tensor hooks and its
# backward re-runs the forward, 3–6 % more than forward + forward + backward of the plain block on this CPU
PROFILED_RECOMPUTES = ("none", "selective", "full")
OptimizerKey = tuple[tuple, str, int, str, str]


@dataclass
class Profile:
    """Measured layer times keyed by (layer signature, device type, TP degree, micro-batch, precision, TP
    implementation), and measured optimizer steps keyed by (layer signature, device type, TP degree, precision,
    optimizer). The implementation is ``own`` (Tessera's shard layers; also every TP-1 figure) or ``dtensor``
    (the block under PyTorch's ``parallelize_module``, what the runtime runs for even splits — DTensor's
    dispatch costs a small model's rank ~15 % more, so it is timed, not assumed).

    Times are for an even TP shard (the cost model places uneven shard ratios between profiled shards) and,
    per ``recompute``, for the layer built without recompute or with selective recompute (the attention core
    re-run in backward costs far more than its FLOP share on a small model, so it is timed). Full recompute
    is the no-recompute figures plus one more forward. A layer's optimizer time is one step
    over that layer's parameters as built alone (a tied head owns its copy of the embedding).

    On a GPU the (fwd, bwd) entries are the kernels' time with the launch queue kept full, and ``host`` holds
    the host's time to launch them under the same key: a small model's step runs at its launch rate, not its
    kernels' (a 125M GPT at micro-batch 4 on an H200: host 27.9 ms, kernels 21.8 ms, step 30.6 ms;
    ``bench/results/gpu_diagnose.json``), and a wall-clock figure per layer sums to neither.
    """

    entries: dict[ProfileKey, tuple[float, float]] = field(default_factory=dict)
    optimizer: dict[OptimizerKey, float] = field(default_factory=dict)
    host: dict[ProfileKey, tuple[float, float]] = field(default_factory=dict)

    @staticmethod
    def key(
        layer: Layer,
        device_type: str,
        tp: int,
        micro_batch: int,
        precision: str,
        impl: str = "own",
        recompute: str = "none",
    ) -> ProfileKey:
        if impl not in TP_IMPLS:
            raise ValueError(f"impl: {impl!r} is not one of {', '.join(TP_IMPLS)}")
        if recompute not in PROFILED_RECOMPUTES:
            raise ValueError(f"recompute: {recompute!r} is not one of {', '.join(PROFILED_RECOMPUTES)}")
        sig = layer_signature(layer)
        return (sig, device_type, int(tp), int(micro_batch), str(precision), impl, recompute)

    @staticmethod
    def optimizer_key(
        layer: Layer, device_type: str, tp: int, precision: str, optimizer: str
    ) -> OptimizerKey:
        return (layer_signature(layer), device_type, int(tp), str(precision), str(optimizer))

    def put(
        self,
        layer: Layer,
        device_type: str,
        tp: int,
        micro_batch: int,
        precision: str,
        *,
        fwd_s: float,
        bwd_s: float,
        impl: str = "own",
        recompute: str = "none",
        host: tuple[float, float] | None = None,
    ) -> None:
        """``host``: the (fwd, bwd) seconds the host took to launch the kernels (GPU profiles)."""
        if fwd_s < 0 or bwd_s < 0 or (host is not None and min(host) < 0):
            raise ValueError(f"profiled times must be >= 0, got fwd {fwd_s}, bwd {bwd_s}, host {host}")
        key = self.key(layer, device_type, tp, micro_batch, precision, impl, recompute)
        self.entries[key] = (fwd_s, bwd_s)
        if host is not None:
            self.host[key] = host
        else:
            self.host.pop(key, None)

    def get(
        self,
        layer: Layer,
        device_type: str,
        tp: int,
        micro_batch: int,
        precision: str,
        impl: str = "own",
        recompute: str = "none",
    ) -> tuple[float, float] | None:
        return self.entries.get(self.key(layer, device_type, tp, micro_batch, precision, impl, recompute))

    def lookup(
        self,
        layer: Layer,
        device_type: str,
        tp: int,
        micro_batch: float,
        precision: str,
        impl: str = "own",
        recompute: str = "none",
        *,
        launches: bool = False,
    ) -> tuple[float, float] | None:
        """Times at ``micro_batch`` samples: the entry itself, else piecewise-linear in the micro-batch between
        (or beyond) the profiled sizes of the same layer, device, TP degree and precision — a layer's time is
        affine in its batch once past launch overhead, and uneven batch shares give fractional per-micro-batch
        sizes. A single profiled size scales proportionally. ``impl="dtensor"`` falls back to the ``own``
        figures where the DTensor variant was not timed (layers without a DTensor plan run on Tessera's own).
        None when nothing was profiled for the key (``recompute``: the variant built with it).

        ``launches``: the host's (fwd, bwd) launch seconds instead (:attr:`host`; a single profiled size kept
        as it is: the launches do not grow with the batch); None for CPU profiles and GPU profiles taken before
        launch times were recorded."""
        table = self.host if launches else self.entries
        want = self.key(layer, device_type, tp, 0, precision, impl, recompute)
        if float(micro_batch).is_integer():
            hit = table.get(want[:3] + (int(micro_batch),) + want[4:])
            if hit is not None:
                return hit
        rest = want[:3] + want[4:]  # every coordinate but the micro-batch
        pts = sorted((k[3], v) for k, v in table.items() if k[:3] + k[4:] == rest)
        if not pts:
            if impl == "own":
                return None
            return self.lookup(
                layer, device_type, tp, micro_batch, precision, recompute=recompute, launches=launches
            )
        if len(pts) == 1:
            (b0, (f0, w0)), scale = pts[0], (1.0 if launches else micro_batch / pts[0][0])
            return f0 * scale, w0 * scale
        i = 1
        while i < len(pts) - 1 and pts[i][0] < micro_batch:
            i += 1
        (b0, (f0, w0)), (b1, (f1, w1)) = pts[i - 1], pts[i]
        w = (micro_batch - b0) / (b1 - b0)
        return max(0.0, f0 + w * (f1 - f0)), max(0.0, w0 + w * (w1 - w0))

    def put_optimizer(
        self, layer: Layer, device_type: str, tp: int, precision: str, optimizer: str, *, time_s: float
    ) -> None:
        if time_s < 0:
            raise ValueError(f"profiled optimizer time must be >= 0, got {time_s}")
        self.optimizer[self.optimizer_key(layer, device_type, tp, precision, optimizer)] = time_s

    def get_optimizer(
        self, layer: Layer, device_type: str, tp: int, precision: str, optimizer: str
    ) -> float | None:
        return self.optimizer.get(self.optimizer_key(layer, device_type, tp, precision, optimizer))

    def update(self, other: Profile) -> None:
        """Take every measurement of ``other`` (newer wins)."""
        self.entries.update(other.entries)
        self.optimizer.update(other.optimizer)
        for k in other.entries:  # a newer measurement without launch times replaces one with them
            self.host.pop(k, None)
        self.host.update(other.host)

    def __len__(self) -> int:
        return len(self.entries)

    def to_json(self) -> str:
        rows = [
            {"signature": list(k[0]), "device_type": k[1], "tp": k[2], "micro_batch": k[3], "precision": k[4],
             "impl": k[5], "recompute": k[6], "fwd_s": v[0], "bwd_s": v[1],
             **({"host_fwd_s": self.host[k][0], "host_bwd_s": self.host[k][1]} if k in self.host else {})}
            for k, v in self.entries.items()
        ] + [
            {"signature": list(k[0]), "device_type": k[1], "tp": k[2], "precision": k[3], "optimizer": k[4],
             "optimizer_s": v}
            for k, v in self.optimizer.items()
        ]  # fmt: skip
        return json.dumps(rows, indent=1)

    @classmethod
    def from_json(cls, text: str) -> Profile:
        p = cls()
        for row in json.loads(text):
            sig = tuple(row["signature"])
            if "optimizer_s" in row:
                okey = (sig, row["device_type"], int(row["tp"]), row["precision"], row["optimizer"])
                p.optimizer[okey] = float(row["optimizer_s"])
                continue
            key = (sig, row["device_type"], int(row["tp"]), int(row["micro_batch"]), row["precision"],
                   row.get("impl", "own"), row.get("recompute", "none"))  # fmt: skip
            p.entries[key] = (float(row["fwd_s"]), float(row["bwd_s"]))
            if "host_fwd_s" in row:
                p.host[key] = (float(row["host_fwd_s"]), float(row["host_bwd_s"]))
        return p

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json())

    @classmethod
    def load(cls, path: str | Path) -> Profile:
        return cls.from_json(Path(path).read_text())


@dataclass(frozen=True)
class RooflineTerms:
    """The two bounds of one forward pass, for inspection and tests."""

    flops: float
    bytes_moved: float
    compute_s: float
    memory_s: float

    @property
    def time_s(self) -> float:
        return max(self.compute_s, self.memory_s)

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def shard_fraction(layer: Layer, tp: int, ratio: float | None = None) -> float:
    """Share of the layer's work one TP rank does: its ratio for sharded layers, all of it when replicated."""
    if tp <= 1 or layer.tp_shard == TPShard.REPLICATED:
        return 1.0
    return ratio if ratio is not None else 1.0 / tp


def _shard_time(even_s: float, whole_s: float | None, even: float, frac: float) -> float:
    """A rank's time for shard fraction ``frac`` from the even shard's (``even``) and the whole layer's times:
    on the line through both (a shard keeps the layer's fixed costs: norms, launches, small-matmul
    inefficiency, so 3/4 of a layer takes less than 1.5× its half), proportional to the even shard where no
    whole-layer time exists or the line would give a shard a negative fixed cost."""
    if whole_s is None or whole_s <= even_s or even >= 1.0:
        return even_s * frac / even
    slope = (whole_s - even_s) / (1.0 - even)
    if even_s - slope * even < 0.0:
        return even_s * frac / even
    return even_s + slope * (frac - even)


def forward_roofline(
    layer: Layer,
    gpu: GPUSpec,
    *,
    tp: int = 1,
    micro_batch: float = 1,
    precision: str = "fp32",
    ratio: float | None = None,
    curves: Mapping[str, EfficiencyCurve] | None = None,
) -> RooflineTerms:
    """Forward of one micro-batch on one TP rank: max(FLOPs / (peak × eff), bytes / (bandwidth × eff_mem)).

    Bytes moved: the rank's weights read once, and its saved activations plus output written once (the spec's
    byte figures are fp32; half precisions halve activations and read half-width weights).
    """
    frac = shard_fraction(layer, tp, ratio)
    flops = layer.fwd_flops_per_sample * micro_batch * frac
    half = precision in HALF_PRECISIONS
    weight_bytes = layer.params * frac * (2 if half else 4)
    act_bytes = (layer.act_bytes_per_sample * frac + layer.out_bytes_per_sample) * micro_batch
    bytes_moved = weight_bytes + act_bytes * (0.5 if half else 1.0)
    curve = curve_for(gpu, curves)
    compute_s = flops / (gpu.peak_flops(precision) * curve.fraction(flops)) if flops > 0 else 0.0
    memory_s = bytes_moved / (gpu.memory_bandwidth_Bps * curve.memory_fraction)
    return RooflineTerms(flops=flops, bytes_moved=bytes_moved, compute_s=compute_s, memory_s=memory_s)


def layer_time(
    layer: Layer,
    gpu: GPUSpec,
    *,
    tp: int = 1,
    micro_batch: float = 1,
    precision: str = "fp32",
    recompute: str = "none",
    ratio: float | None = None,
    attention_core_fraction: float = 0.0,
    profile: Profile | None = None,
    curves: Mapping[str, EfficiencyCurve] | None = None,
    device_type: str | None = None,
    impl: str = "own",
    shape: BlockShape | None = None,
) -> LayerTime:
    """Forward and backward seconds of ``layer`` for one micro-batch on one rank of a TP group.

    ``ratio`` is this rank's shard ratio (uneven TP); ``attention_core_fraction`` the share of the layer's
    forward FLOPs that selective recompute repeats (the attention core: QKᵀ and softmax·V). ``device_type``
    is the profile key of the device (:func:`profile_device`; default the GPU's name, also the fallback);
    ``impl`` the TP implementation the runtime uses for this shard (``dtensor`` for even splits); ``shape``
    the dense block's GEMM shape: where given (and nothing was profiled) a GPU prices the block kernel class
    by kernel class from measured efficiencies (:func:`block_terms`, source ``kernels``) instead of the
    whole-layer roofline.
    """
    if micro_batch <= 0:
        return LayerTime(0.0, 0.0)
    keys = tuple(dict.fromkeys((device_type or gpu.name, gpu.name)))

    def first(t: int, how: str, variant: str) -> tuple[float, float] | None:
        """The profile's figures under the first device key that has them."""
        found = (profile.lookup(layer, k, t, micro_batch, precision, how, variant) for k in keys)  # type: ignore[union-attr]
        return next((m for m in found if m is not None), None)

    def profiled(variant: str) -> tuple[float, float] | None:
        """This rank's (fwd, bwd) from the profile's ``variant`` figures; an uneven share lies between the
        even shard and the whole layer."""
        if profile is None:
            return None
        found = first(tp, impl, variant)
        even, frac = shard_fraction(layer, tp), shard_fraction(layer, tp, ratio)
        if found is None or frac == even:
            return found
        whole = first(1, "own", variant)
        return (
            _shard_time(found[0], whole[0] if whole else None, even, frac),
            _shard_time(found[1], whole[1] if whole else None, even, frac),
        )

    def host(variant: str) -> tuple[float, float]:
        """The host's launch seconds of the variant (a TP shard launches as many kernels as the even one)."""
        if profile is None:
            return 0.0, 0.0
        found = (
            profile.lookup(layer, k, tp, micro_batch, precision, impl, variant, launches=True) for k in keys
        )
        return next((m for m in found if m is not None), (0.0, 0.0))

    if recompute in ("selective", "full") and (timed := profiled(recompute)) is not None:
        # the re-run forward (or attention core) is in the timed backward
        return LayerTime(timed[0], timed[1], "profile", *host(recompute))
    measured = profiled("none")
    host_s = (0.0, 0.0)
    if measured is not None:
        fwd, bwd = measured
        host_s = host("none")
        source = "profile"
    elif shape is not None and layer.kind == "transformer" and gpu.arch != "cpu":
        terms = block_terms(
            layer, shape, gpu, tp=tp, micro_batch=micro_batch, precision=precision, ratio=ratio, curves=curves
        )
        fwd, bwd = terms.fwd_s, terms.bwd_s
        if recompute == "selective":  # the attention core again, score kernels included
            return LayerTime(fwd, bwd + terms.core_fwd_s, "kernels")
        source = "kernels"
    else:
        fwd = forward_roofline(
            layer, gpu, tp=tp, micro_batch=micro_batch, precision=precision, ratio=ratio, curves=curves
        ).time_s
        bwd = 2.0 * fwd  # backward = 2 × forward FLOPs (and roughly 2 × the traffic)
        source = "roofline"
    host_fwd, host_bwd = host_s
    if reruns_forward(layer, recompute):
        bwd += fwd
        host_bwd += host_fwd
    elif recompute == "selective":
        bwd += fwd * attention_core_fraction
    elif recompute not in ("none", "full"):
        raise ValueError(f"recompute: {recompute!r} is not one of none, selective, full")
    return LayerTime(fwd, bwd, source, host_fwd, host_bwd)


def optimizer_time(
    layer: Layer,
    gpu: GPUSpec,
    *,
    tp: int = 1,
    precision: str = "fp32",
    optimizer: str = "adamw",
    ratio: float | None = None,
    profile: Profile | None = None,
    curves: Mapping[str, EfficiencyCurve] | None = None,
    device_type: str | None = None,
) -> tuple[float, str]:
    """(seconds, source) of one optimizer step over this rank's parameters of ``layer``.

    Measured where the profiler timed it (rescaled for an uneven shard), else a memory-bound pass of
    ``OPTIMIZER_BYTES_PER_PARAM`` (+ the precision's bookkeeping) per parameter at the achievable bandwidth.
    """
    if profile is not None:
        for key in dict.fromkeys((device_type or gpu.name, gpu.name)):
            t = profile.get_optimizer(layer, key, tp, precision, optimizer)
            if t is not None:
                return t * shard_fraction(layer, tp, ratio) / shard_fraction(layer, tp), "profile"
    params = layer.params * shard_fraction(layer, tp, ratio)
    per_param = OPTIMIZER_BYTES_PER_PARAM.get(optimizer, OPTIMIZER_BYTES_PER_PARAM["adamw"])
    per_param += PRECISION_STEP_BYTES_PER_PARAM.get(precision, 0.0)
    bw = gpu.memory_bandwidth_Bps * curve_for(gpu, curves).memory_fraction
    return params * per_param / bw, "roofline"

"""Compute cost of one layer on one GPU type and TP degree: a roofline with an efficiency curve, overridden by
measured profiles wherever one exists.

Why a roofline: a layer's time is bounded below both by its arithmetic (FLOPs at the achievable FLOP/s) and by
the bytes it must move through device memory (weights, saved activations, outputs at the achievable bandwidth);
whichever bound is larger wins. Peak FLOP/s is never reached by small matmuls (kernel launch and tile
under-occupancy), so the achievable fraction of peak follows a per-GPU-type :class:`EfficiencyCurve`.
Measured truth beats the model: a :class:`Profile` entry for the same layer signature, device type, TP degree,
micro-batch and precision replaces the roofline (Crius §5.1's single-device profiles land here).

Backward = 2 × forward FLOPs (gradients w.r.t. inputs and weights); full recompute adds one more forward to the
backward, selective recompute adds only the attention core's forward.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tessera.hardware import GPUSpec
from tessera.models.spec import Layer, TPShard

HALF_PRECISIONS = ("bf16", "fp16", "bf16-master")


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
DEFAULT_CURVES: dict[str, EfficiencyCurve] = {
    "pascal": EfficiencyCurve(max_fraction=0.55, half_flops=0.5e9),
    "volta": EfficiencyCurve(max_fraction=0.55, half_flops=1.0e9),
    "turing": EfficiencyCurve(max_fraction=0.5, half_flops=1.0e9),
    "ampere": EfficiencyCurve(max_fraction=0.62, half_flops=2.0e9),
    "ada": EfficiencyCurve(max_fraction=0.6, half_flops=2.0e9),
    "hopper": EfficiencyCurve(max_fraction=0.6, half_flops=4.0e9),
    "cpu": EfficiencyCurve(max_fraction=0.5, half_flops=1.0e7, memory_fraction=0.6),
}


def curve_for(gpu: GPUSpec, curves: Mapping[str, EfficiencyCurve] | None = None) -> EfficiencyCurve:
    """The efficiency curve of a GPU: by type name first (calibrated), then by architecture, else default."""
    table = curves or {}
    return table.get(gpu.name) or table.get(gpu.arch) or DEFAULT_CURVES.get(gpu.arch) or EfficiencyCurve()


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
    source: str = "roofline"  # "roofline" | "profile"

    @property
    def total_s(self) -> float:
        return self.fwd_s + self.bwd_s


ProfileKey = tuple[tuple, str, int, int, str]


@dataclass
class Profile:
    """Measured layer times keyed by (layer signature, device type, TP degree, micro-batch, precision).

    Times are for an even TP shard and no recompute (what the single-device profiler measures); the cost
    model scales them for uneven shard ratios and adds recompute itself.
    """

    entries: dict[ProfileKey, tuple[float, float]] = field(default_factory=dict)

    @staticmethod
    def key(layer: Layer, device_type: str, tp: int, micro_batch: int, precision: str) -> ProfileKey:
        return (layer_signature(layer), device_type, int(tp), int(micro_batch), str(precision))

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
    ) -> None:
        if fwd_s < 0 or bwd_s < 0:
            raise ValueError(f"profiled times must be >= 0, got fwd {fwd_s}, bwd {bwd_s}")
        self.entries[self.key(layer, device_type, tp, micro_batch, precision)] = (fwd_s, bwd_s)

    def get(
        self, layer: Layer, device_type: str, tp: int, micro_batch: int, precision: str
    ) -> tuple[float, float] | None:
        return self.entries.get(self.key(layer, device_type, tp, micro_batch, precision))

    def __len__(self) -> int:
        return len(self.entries)

    def to_json(self) -> str:
        rows = [
            {"signature": list(k[0]), "device_type": k[1], "tp": k[2], "micro_batch": k[3], "precision": k[4],
             "fwd_s": v[0], "bwd_s": v[1]}
            for k, v in self.entries.items()
        ]  # fmt: skip
        return json.dumps(rows, indent=1)

    @classmethod
    def from_json(cls, text: str) -> Profile:
        p = cls()
        for row in json.loads(text):
            key = (
                tuple(row["signature"]),
                row["device_type"],
                row["tp"],
                row["micro_batch"],
                row["precision"],
            )
            p.entries[key] = (float(row["fwd_s"]), float(row["bwd_s"]))
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
) -> LayerTime:
    """Forward and backward seconds of ``layer`` for one micro-batch on one rank of a TP group.

    ``ratio`` is this rank's shard ratio (uneven TP); ``attention_core_fraction`` the share of the layer's
    forward FLOPs that selective recompute repeats (the attention core: QKᵀ and softmax·V).
    """
    if micro_batch <= 0:
        return LayerTime(0.0, 0.0)
    measured = None
    if profile is not None and float(micro_batch).is_integer():
        measured = profile.get(layer, gpu.name, tp, int(micro_batch), precision)
    if measured is not None:
        # Profiles are for even shards: rescale by this rank's share relative to an even one.
        scale = shard_fraction(layer, tp, ratio) / shard_fraction(layer, tp)
        fwd, bwd = measured[0] * scale, measured[1] * scale
        source = "profile"
    else:
        fwd = forward_roofline(
            layer, gpu, tp=tp, micro_batch=micro_batch, precision=precision, ratio=ratio, curves=curves
        ).time_s
        bwd = 2.0 * fwd  # backward = 2 × forward FLOPs (and roughly 2 × the traffic)
        source = "roofline"
    if recompute == "full":
        bwd += fwd
    elif recompute == "selective":
        bwd += fwd * attention_core_fraction
    elif recompute != "none":
        raise ValueError(f"recompute: {recompute!r} is not one of none, selective, full")
    return LayerTime(fwd, bwd, source)

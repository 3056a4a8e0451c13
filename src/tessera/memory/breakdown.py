"""Result types of the exact memory trace (plain frozen dataclasses: no torch import, JSON round-trip)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

#: Categories of the peak breakdown, in display order.
#: weights: model parameters and buffers as the device holds them (FSDP: sharded + gathered copies);
#: master_weights: fp32 copies the optimizer updates (bf16-master, FSDP mixed precision shards);
#: gradients: parameter gradients (model and master); optimizer_state: Adam moments, momentum, steps;
#: inputs: micro-batch inputs and targets, received pipeline activations; activations: tensors made in
#: forward (and recomputed in backward); bwd_tmp / opt_tmp: other tensors made in backward / optimizer
#: step; other: persistent tensors nobody claimed (comm buffers, RNG state).
CATEGORIES: tuple[str, ...] = (
    "weights",
    "master_weights",
    "gradients",
    "optimizer_state",
    "inputs",
    "activations",
    "bwd_tmp",
    "opt_tmp",
    "other",
)

#: Phases of a training step: forward, backward, optimizer step (+ zero_grad).
PHASES: tuple[str, ...] = ("fwd", "bwd", "opt")


@dataclass(frozen=True)
class TraceResult:
    """Peak tensor memory of one device during one training step (iteration 2), with where it came from.

    ``peak_bytes`` is what ``torch.cuda.max_memory_allocated()`` would report for the step (tensor
    storages rounded up to 512 B), not counting the CUDA context, workspaces, NCCL buffers or fragmentation.
    ``breakdown`` sums to ``peak_bytes``; ``phase_peaks`` holds the highest total seen in each phase.
    """

    peak_bytes: int
    peak_phase: str
    breakdown: dict[str, int]
    phase_peaks: dict[str, int]
    wall_s: float
    start_bytes: int = 0  # live bytes when the tracked iteration began (states, params, buffers)
    phase_breakdowns: dict[str, dict[str, int]] = field(default_factory=dict)  # breakdown at each phase peak
    bwd_end_breakdown: dict[str, int] = field(default_factory=dict)  # live when the optimizer step begins
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def peak_gib(self) -> float:
        return self.peak_bytes / 2**30

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TraceResult:
        return cls(
            peak_bytes=int(data["peak_bytes"]),
            peak_phase=str(data["peak_phase"]),
            breakdown={str(k): int(v) for k, v in data["breakdown"].items()},
            phase_peaks={str(k): int(v) for k, v in data["phase_peaks"].items()},
            wall_s=float(data["wall_s"]),
            start_bytes=int(data.get("start_bytes", 0)),
            phase_breakdowns={
                str(p): {str(k): int(v) for k, v in b.items()}
                for p, b in data.get("phase_breakdowns", {}).items()
            },
            bwd_end_breakdown={str(k): int(v) for k, v in data.get("bwd_end_breakdown", {}).items()},
            meta=dict(data.get("meta", {})),
        )

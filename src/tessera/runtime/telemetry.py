"""Per-step telemetry: what each rank measured, merged into one JSONL record per step.

The estimator calibrates itself from these records, so they carry the quantities its cost model has:
iteration time and, per pipeline stage, compute and communication time (the slowest rank of the stage, which
is what gates the pipeline), plus each device's peak memory.
"""

from __future__ import annotations

import json
import resource
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch


@dataclass(frozen=True)
class RankStep:
    job: int
    rank: int
    stage: int
    step: int
    loss: float
    reports_loss: bool
    iter_s: float
    compute_s: float
    comm_s: float
    peak_memory_bytes: int
    skipped: bool = False
    val_loss: float | None = None  # this rank's share of the validation loss, on steps that validate
    grad_norm: float | None = None  # the global gradient norm before clipping (when clipping)
    learning_rate: float | None = None
    # the rank's whole loop iteration (data, training, validation, stop flag and this step's checkpoint): what a
    # step of progress really costs a job, where ``iter_s`` is the training step alone
    wall_s: float | None = None
    checkpoint_s: float = 0.0  # the share of ``wall_s`` spent writing this step's checkpoint (0: none)


@dataclass(frozen=True)
class StageTimes:
    stage: int
    compute_s: float
    comm_s: float


@dataclass(frozen=True)
class StepRecord:
    step: int
    loss: float
    iter_time_s: float
    samples_per_s: float
    stages: tuple[StageTimes, ...]
    peak_memory_bytes: dict[int, int] = field(default_factory=dict)
    skipped: bool = False
    val_loss: float | None = None  # loss on the held-out split, after this step's update (validating steps)
    grad_norm: float | None = None  # global gradient norm before clipping (with grad_clip_norm)
    learning_rate: float | None = None  # the rate this step's update used
    wall_s: float | None = None  # the slowest rank's whole loop iteration (see RankStep.wall_s)
    checkpoint_s: float = 0.0  # the slowest rank's checkpoint of this step (0: none)

    def to_json(self) -> str:
        d: dict[str, Any] = asdict(self)
        d["peak_memory_bytes"] = {str(k): v for k, v in self.peak_memory_bytes.items()}
        return json.dumps(d)


def peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB


def merge(parts: list[RankStep], global_batch: int) -> StepRecord:
    """One step's record from every rank's report."""
    iter_s = max(p.iter_s for p in parts)
    stages: dict[int, list[RankStep]] = {}
    for p in parts:
        stages.setdefault(p.stage, []).append(p)
    return StepRecord(
        step=parts[0].step,
        loss=sum(p.loss for p in parts if p.reports_loss),
        iter_time_s=iter_s,
        samples_per_s=global_batch / iter_s if iter_s > 0 else 0.0,
        stages=tuple(
            StageTimes(s, max(p.compute_s for p in ps), max(p.comm_s for p in ps))
            for s, ps in sorted(stages.items())
        ),
        peak_memory_bytes={p.rank: p.peak_memory_bytes for p in sorted(parts, key=lambda p: p.rank)},
        skipped=any(p.skipped for p in parts),
        val_loss=_sum_reported([p.val_loss for p in parts if p.reports_loss]),
        grad_norm=next((p.grad_norm for p in parts if p.grad_norm is not None), None),
        learning_rate=next((p.learning_rate for p in parts if p.learning_rate is not None), None),
        wall_s=max((p.wall_s for p in parts if p.wall_s is not None), default=None),
        checkpoint_s=max((p.checkpoint_s for p in parts), default=0.0),
    )


def _sum_reported(values: list[float | None]) -> float | None:
    """The step's value from the loss-reporting ranks' shares; None where none reported one."""
    present = [v for v in values if v is not None]
    return sum(present) if present else None


class JsonlWriter:
    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = open(self.path, "a")  # noqa: SIM115 - kept open for the run

    def write(self, record: StepRecord) -> None:
        if self.path:
            self._f.write(record.to_json() + "\n")
            self._f.flush()

    def close(self) -> None:
        if self.path:
            self._f.close()

"""What a launch needs besides the Plan: amount of work, data, model factory, checkpoints, timeouts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tessera.runtime.data import DataSource
from tessera.runtime.model import ModelFactory
from tessera.runtime.schedule import Training


@dataclass(frozen=True)
class Fault:
    """Test hook: make ``rank`` die, hang or raise when it reaches ``step``."""

    rank: int
    step: int
    kind: Literal["kill", "hang", "raise"] = "kill"


@dataclass(frozen=True)
class RunOptions:
    steps: int = (
        1  # train until this many steps are done (a resumed run continues from its checkpoint's step)
    )
    learning_rate: float = 1e-3  # the peak rate of the schedule below
    warmup_steps: int = 0
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"  # decay after warm-up over ``steps``
    min_learning_rate: float = 0.0
    grad_clip_norm: float | None = None  # clip to this global L2 norm (one extra 1-element all-reduce)
    weight_decay: float | None = None  # None: the optimizer's default (adamw 0.01)
    dropout: float | None = None  # None: the model's own
    seed: int = 0  # initial weights and synthetic data
    model: ModelFactory | None = None  # default: the zoo model the Plan names
    data: DataSource | None = None  # default: synthetic tokens from ``seed``
    # a checkpoint records its data's identity; resuming on other data raises unless this is set
    force_data_change: bool = False
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0  # 0: only after the last step (when checkpoint_dir is set)
    resume_from: str | None = None  # a checkpoint root (its ``latest``) or one step directory
    telemetry_path: str | None = None  # per-step JSONL
    pg_timeout_s: float = 300.0  # process-group timeout: a collective waiting on a dead peer fails after it
    watchdog_s: float = 600.0  # launcher: a rank silent this long is declared hung and the job ends
    progress: bool = False  # live Rich progress on the console
    capture_grads: bool = False  # return the full gradient of the first step (tests)
    capture_params: bool = False  # return the full parameters at the end (tests)
    backend: Literal["auto", "gloo", "nccl"] = "auto"
    fault: Fault | None = None
    # a NaN or infinite loss: "fail" ends the job at that step (LaunchError "loss diverged (NaN) at step N");
    # "skip" skips that step's optimizer update on every rank (and a step whose gradient is non-finite)
    on_nonfinite_loss: Literal["fail", "skip"] = "fail"

    def training(self) -> Training:
        return Training(
            learning_rate=self.learning_rate,
            warmup_steps=self.warmup_steps,
            lr_schedule=self.lr_schedule,
            min_learning_rate=self.min_learning_rate,
            grad_clip_norm=self.grad_clip_norm,
            weight_decay=self.weight_decay,
            dropout=self.dropout,
        )

"""Training hyper-parameters besides the Plan: learning-rate schedule, clipping, weight decay, dropout.

The learning rate of step ``k`` is a pure function of ``(k, total_steps)`` — no scheduler state — so a run
resumed from a checkpoint at step ``k`` (on any Plan) continues the schedule exactly where it was.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from torch import nn


@dataclass(frozen=True)
class Training:
    learning_rate: float = 1e-3  # the peak rate (after warm-up)
    warmup_steps: int = 0  # step k < warmup uses learning_rate · (k + 1) / warmup_steps
    lr_schedule: Literal["constant", "linear", "cosine"] = (
        "constant"  # after warm-up, down to min_learning_rate
    )
    min_learning_rate: float = 0.0  # reached at the end of the last step (linear, cosine: as Hugging Face's)
    grad_clip_norm: float | None = None  # global L2 norm over the whole model, every rank agreeing
    weight_decay: float | None = None  # None: the optimizer's default (adamw 0.01, adam / sgd 0)
    dropout: float | None = None  # None: the model's own dropout probabilities

    def __post_init__(self) -> None:
        if self.lr_schedule not in ("constant", "linear", "cosine"):
            raise ValueError(f"lr_schedule: {self.lr_schedule!r} is not constant, linear or cosine")
        if self.min_learning_rate > self.learning_rate:
            raise ValueError("min_learning_rate: above learning_rate")

    def lr_at(self, step: int, total_steps: int) -> float:
        """The learning rate of step ``step`` (counted from 0) of a run of ``total_steps`` steps: after
        warm-up, decay progress is ``(step - warmup_steps) / (total_steps - warmup_steps)``."""
        peak, low, warm = self.learning_rate, self.min_learning_rate, self.warmup_steps
        if step < warm:
            return peak * (step + 1) / warm
        if self.lr_schedule == "constant":
            return peak
        span = max(1, total_steps - warm)
        p = min(1.0, max(0.0, (step - warm) / span))
        if self.lr_schedule == "linear":
            return low + (peak - low) * (1.0 - p)
        return low + (peak - low) * 0.5 * (1.0 + math.cos(math.pi * p))


def set_dropout(module: nn.Module, p: float) -> int:
    """Set every dropout probability in ``module`` to ``p``: dropout modules (torch's, and any module class
    named ``*Dropout`` with a float ``p``, as the zoo's) and the float ``attention_dropout`` /
    ``attn_dropout`` / ``dropout`` attributes attention modules pass to SDPA (Hugging Face's, the zoo's).
    Returns how many were set."""
    n = 0
    for m in module.modules():
        if isinstance(m, nn.modules.dropout._DropoutNd) or (
            type(m).__name__.endswith("Dropout") and isinstance(getattr(m, "p", None), float)
        ):
            m.p = p
            n += 1
            continue
        for attr in ("attention_dropout", "attn_dropout", "dropout"):
            if isinstance(getattr(m, attr, None), float):
                setattr(m, attr, p)
                n += 1
    return n

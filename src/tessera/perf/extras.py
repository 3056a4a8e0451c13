"""What a job's training essentials add to a step's time: gradient clipping and validation passes.

The estimator prices one iteration of a Plan (``tessera.perf.estimate``); a job spec also asks for things the
Plan does not carry (``JobSpec.grad_clip_norm``, ``weight_decay``, ``dropout``, the learning-rate schedule and
``data.val_*``). :class:`StepExtras` is the part of them that costs time, as plain data built from the job
spec, so ``estimate_plan(..., extras=StepExtras.of_job(spec))`` prices it (the pricing itself lives in
``tessera.perf.estimate``: :func:`~tessera.perf.estimate.clip_s` and
:func:`~tessera.perf.estimate.forward_pass_s`).

What is priced, following the runtime (``runtime.engine.Trainer.step`` / ``clip_grads``,
``runtime.loop.validation_loss``):

* **gradient clipping by global norm** — a pass over each rank's counted gradients for the squared norm, one
  1-element all-reduce over all ranks, then a scaling pass over the rank's gradients.
* **validation** — every ``val_every_steps`` steps (and after the last step), forward-only passes over the
  validation split, ``max(1, held-out sequences // global_batch)`` batches of ``global_batch`` samples each
  (``runtime.dataset.TokenizedData.val_batch_count``), amortized over the steps.

What is not priced, and why:

* **weight decay** — AdamW applies it inside its parameter update (``p -= lr·wd·p`` in the same ``foreach``
  pass that reads and writes ``p``), so the optimizer step's memory-bound pass already covers it; Adam and
  SGD fold it into the gradient within their step too.
* **learning-rate schedule** — one Python float per step set on the optimizer's parameter groups.
* **dropout** — a mask per activation element, generated and applied elementwise inside the layers the
  profiles time with dropout on (``perf.profiler`` runs the zoo's layers in ``train()``), and in the roofline
  part of the memory-bound elementwise term (``perf.compute.BlockTerms.elementwise_s``); changing its
  probability changes neither the kernels launched nor the bytes moved (p = 0 aside, where the runtime skips
  it: a saving of a few percent of a block's elementwise time at most, left unpriced).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tessera.jobs import JobSpec
from tessera.jobs.spec import DataSpec


@dataclass(frozen=True)
class StepExtras:
    """The time-costing training extras of a job, as the estimator needs them.

    ``grad_clip``: whether the job clips (``grad_clip_norm`` set). Its threshold does not change the cost —
    except that the runtime scales the gradients only when their norm exceeds it, so pricing the scaling pass
    always is an upper bound (early in training, when norms are large, it is what happens); leaving the
    threshold out keeps jobs that differ only in it one speed configuration. ``val_every_steps``: steps
    between validations (the runtime's resolved interval), ``val_batches``: global batches per validation
    (0: the job validates nothing), ``total_steps``: the run's length, for the extra validation after the last
    step (None: amortize as one validation every ``val_every_steps`` steps)."""

    grad_clip: bool = False
    val_every_steps: int | None = None
    val_batches: int = 0
    total_steps: int | None = None

    def __post_init__(self) -> None:
        if self.val_batches < 0:
            raise ValueError(f"StepExtras.val_batches must be >= 0, got {self.val_batches}")
        if self.val_batches and (self.val_every_steps is None or self.val_every_steps < 1):
            raise ValueError("StepExtras.val_every_steps must be >= 1 when there are validation batches")
        if self.total_steps is not None and self.total_steps < 1:
            raise ValueError(f"StepExtras.total_steps must be >= 1, got {self.total_steps}")

    @property
    def validations_per_step(self) -> float:
        """Validations per training step, amortized: the runtime validates when ``done % every == 0`` and
        after the last step, so ``ceil(total / every)`` times in a run of ``total`` steps."""
        if not self.val_batches or self.val_every_steps is None:
            return 0.0
        if self.total_steps is None:
            return 1.0 / self.val_every_steps
        return math.ceil(self.total_steps / self.val_every_steps) / self.total_steps

    def __bool__(self) -> bool:
        return self.grad_clip or self.validations_per_step > 0

    @classmethod
    def of_job(cls, spec: JobSpec, *, dataset_sequences: int | None = None) -> StepExtras:
        """The extras of a job spec. ``dataset_sequences``: packed sequences of ``seq_len`` tokens in the job's
        dataset, where known, to turn ``data.val_fraction`` into held-out sequences as the runtime does;
        without it a ``val_fraction`` job is priced at the one batch the runtime runs at least (a lower
        bound). Synthetic data and a plain text file have no validation split: nothing to price."""
        total = spec.total_steps
        data = spec.data
        batches, every = 0, None
        if isinstance(data, DataSpec) and (data.val_samples is not None or data.val_fraction > 0):
            held_out = data.val_samples
            if held_out is None and dataset_sequences is not None:
                held_out = max(1, int(round(data.val_fraction * dataset_sequences)))
            batches = 1 if held_out is None else max(1, held_out // spec.global_batch)
            every = data.val_every_steps or max(1, total // 10)
        return cls(
            grad_clip=spec.grad_clip_norm is not None,
            val_every_steps=every,
            val_batches=batches,
            total_steps=total,
        )

"""The one training loop of a rank: ``tessera train``'s workers (:mod:`tessera.runtime.worker`) and the service's
device workers (``tessera.service.device_worker``) both train through it.

Why one: the two had grown into copies (seeding, data, validation, divergence, checkpoints, telemetry) that
differed in what they reported — the service's records carried each step's whole loop time and checkpoint
share, ``tessera train``'s did not. What differs between the callers is passed in: where a step's record goes,
what a checkpoint tells the caller, whether the ranks must agree each step on a cooperative stop (the service's
rescales), and a hook before each step (fault injection in tests).

Each step, in order: the dropout seed, the batch, the optimizer step (capturing the first step's gradients when
asked), validation when due, the ranks' agreement on stopping (a stop request or a non-finite loss, all-reduced
so every rank ends at the same step), the checkpoint when due — never of non-finite parameters — and the
step's record (its whole loop iteration as ``wall_s``, the checkpoint's share as ``checkpoint_s``).
"""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from tessera.plan import Plan
from tessera.runtime import checkpoint
from tessera.runtime.data import DataSource, same_data
from tessera.runtime.engine import Trainer
from tessera.runtime.schedule import Training
from tessera.runtime.telemetry import RankStep, peak_memory_bytes


class LoopEnd(enum.StrEnum):
    FINISHED = "finished"
    STOPPED = "stopped"  # a cooperative stop (the service checkpoints and relaunches elsewhere)
    DIVERGED = "diverged"  # a non-finite loss with ``on_nonfinite_loss="fail"``


@dataclass(frozen=True)
class RankRun:
    """What one rank trains, and how (the parts both callers share)."""

    plan: Plan
    rank: int
    seed: int
    total_steps: int
    training: Training
    on_nonfinite_loss: str = "fail"  # fail | skip | ... (the Trainer skips non-finite steps under "skip")
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0
    force_data_change: bool = False
    job: int = 0  # the job's index in the caller's records


@dataclass(frozen=True)
class LoopResult:
    end: LoopEnd
    steps_done: int
    last_saved: int | None  # the step of the last checkpoint this loop wrote (None: none)
    diverged: str | None = None  # "loss diverged (NaN) at step N"
    grads: Any = None  # the first step's synchronized gradient pieces, when captured


class DataChanged(RuntimeError):
    """A resume on data other than the checkpoint's (``force_data_change`` allows it)."""


def identity_of(data: DataSource, plan: Plan) -> dict[str, Any]:
    """What the data is and how it is cut into batches (step k's batch depends on both): the checkpoint's."""
    return {**data.identity(), "global_batch": plan.global_batch, "seq_len": plan.seq_len}


def check_resume_data(saved: dict[str, Any] | None, current: dict[str, Any], where: str, force: bool) -> None:
    """Refuse to continue a run on other data than its checkpoint's, unless forced."""
    if force or same_data(saved, current):
        return
    assert saved is not None
    raise DataChanged(
        f"data: the checkpoint {where} was written while training on {_describe(saved)}, but this run reads "
        f"{_describe(current)}; resume on the original data, or set force_data_change to continue anyway"
    )


def _describe(ident: dict[str, Any]) -> str:
    kind = ident.get("kind")
    if kind == "synthetic":
        return f"synthetic tokens (seed {ident.get('seed')})"
    src = ident.get("source", "?")
    content = str(ident.get("content", ""))[:12]
    if kind == "dataset":
        return f"dataset {src} (content {content}, val_fraction {ident.get('val_fraction')}, val_samples {ident.get('val_samples')})"
    return f"{kind} {src} (content {content})"


@dataclass(frozen=True)
class Prepared:
    trainer: Trainer
    data_identity: dict[str, Any]  # what the checkpoints record of the data (a resume must match it)
    start: int  # the step to start from


def prepare(
    run: RankRun, factory: Any, data: DataSource, device: torch.device, resume_from: str | None
) -> Prepared:
    """The rank's Trainer, with its pieces of the checkpoint at ``resume_from`` loaded (None: a fresh start)."""
    trainer = Trainer(
        run.plan, run.rank, factory, seed=run.seed, learning_rate=run.training.lr_at(0, run.total_steps),
        device=device, skip_nonfinite=run.on_nonfinite_loss == "skip", training=run.training,
    )  # fmt: skip
    identity = identity_of(data, run.plan)
    if resume_from is None:
        return Prepared(trainer, identity, 0)
    found, meta = checkpoint.read_meta(resume_from)
    check_resume_data(meta.get("data"), identity, str(found), run.force_data_change)
    ckpt = checkpoint.load(found, trainer.checkpoint_want())  # only this rank's pieces
    trainer.load_local(ckpt.params, ckpt.optim)
    return Prepared(trainer, identity, ckpt.step)


def should_validate(data: DataSource, done: int, total_steps: int) -> bool:
    every = getattr(data, "val_every", None)
    return every is not None and (done % every(total_steps) == 0 or done == total_steps)


def validation_loss(trainer: Trainer, data: DataSource, plan: Plan, needs_data: bool) -> float | None:
    """This rank's share of the mean loss over the validation split's batches (None: the data has none)."""
    count = getattr(data, "val_batch_count", None)
    n = count(plan.global_batch, plan.seq_len) if count is not None else 0
    if n == 0:
        return None
    total = 0.0
    for b in range(n):
        inputs = targets = None
        if needs_data:
            inputs, targets = data.val_batch(b, plan.global_batch, plan.seq_len)  # type: ignore[union-attr]
        total += trainer.evaluate(inputs, targets)
    return total / n


def nonfinite_kind(loss: float) -> str | None:
    """ "NaN", "inf" or "-inf" for a non-finite loss, else None."""
    if math.isfinite(loss):
        return None
    return "NaN" if math.isnan(loss) else ("inf" if loss > 0 else "-inf")


def divergence(loss: float, step: int) -> str | None:
    """ "loss diverged (NaN) at step N" (N counted from 1, as progress is) for a non-finite loss, else None."""
    kind = nonfinite_kind(loss)
    return None if kind is None else _diverged(kind, step + 1)


def _diverged(kind: str, done: int) -> str:
    return f"loss diverged ({kind}) at step {done}"


# A non-finite loss as a number all ranks can MAX-reduce: NaN beats -inf beats inf (a sum with NaN is NaN).
_NONFINITE_CODE = {"inf": 1.0, "-inf": 2.0, "NaN": 3.0}


def train_steps(
    run: RankRun,
    prepared: Prepared,
    data: DataSource,
    *,
    device: torch.device,
    on_record: Callable[[RankStep], None],
    on_checkpoint: Callable[[int], None] | None = None,
    stop_requested: Callable[[], bool] | None = None,
    before_step: Callable[[int], None] | None = None,
    capture_grads: bool = False,
) -> LoopResult:
    """Train steps ``start`` .. ``run.total_steps`` (see the module docstring).

    ``stop_requested``: asked every step; the ranks all-reduce it with the loss's finiteness, so every rank
    stops (after a checkpoint) or ends a divergence at the same step. Without it, a rank that reports the loss
    ends the loop alone at a non-finite one (the launcher then ends the others)."""
    trainer, start = prepared.trainer, prepared.start
    plan, lay = run.plan, trainer.layout
    needs_data = lay.first or lay.last
    agree = stop_requested is not None
    flag = torch.zeros(2, device=device) if agree else None  # [stop requested, non-finite loss code]
    grads, last_saved = None, None
    loop_t = time.perf_counter()  # each record's wall_s: the loop iteration that produced it
    for step in range(start, run.total_steps):
        if before_step is not None:
            before_step(step)
        # Dropout RNG: a pure function of (seed, step, stage, replica) — identical on the TP ranks of a
        # replica, whose replicated activations must see the same masks, and reproducible after a resume.
        torch.manual_seed(hash((run.seed, step, lay.stage_index, lay.replica)) % (2**63))
        inputs = targets = None
        if needs_data:
            inputs, targets = data.batch(trainer.stage.module, step, plan.global_batch, plan.seq_len)
        capture = capture_grads and step == start
        stats = trainer.step(
            step,
            inputs,
            targets,
            capture_grads=capture,
            learning_rate=run.training.lr_at(step, run.total_steps),
        )
        if capture:
            grads = trainer.captured_grads
        val = (
            validation_loss(trainer, data, plan, needs_data)
            if should_validate(data, step + 1, run.total_steps)
            else None
        )
        done = step + 1
        watch = stats.reports_loss and run.on_nonfinite_loss == "fail"
        kind = nonfinite_kind(stats.loss) if watch else None
        stopped = False
        if flag is not None:
            flag[0] = 1.0 if stop_requested() else 0.0  # type: ignore[misc]
            flag[1] = _NONFINITE_CODE.get(kind or "", 0.0)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # every rank stops at the same step
            code = float(flag[1].item())
            kind = next((k for k, v in _NONFINITE_CODE.items() if v == code), None)
            stopped = kind is None and bool(flag[0].item() > 0) and done < run.total_steps
        every = run.checkpoint_every
        saved_s: float | None = None  # seconds this step's checkpoint took, if it wrote one
        # a diverged step ends the run before any checkpoint of non-finite parameters
        if (
            run.checkpoint_dir
            and kind is None
            and ((every and done % every == 0) or done == run.total_steps or stopped)
        ):
            meta = {"plan": plan.to_dict(), "seed": run.seed, "data_position": done, "data": prepared.data_identity,
                    "model": plan.model}  # fmt: skip
            t_save = time.perf_counter()
            checkpoint.save(
                run.checkpoint_dir, done, run.rank, trainer.param_pieces(), trainer.optim_pieces(), meta
            )
            saved_s = time.perf_counter() - t_save
            last_saved = done
        # the step's record after its checkpoint: its wall time is the whole iteration, the checkpoint's share
        # named apart (a job writes about ten, whatever its length)
        on_record(
            RankStep(
                job=run.job, rank=run.rank, stage=lay.stage_index, step=step, loss=stats.loss,
                reports_loss=stats.reports_loss, iter_s=stats.iter_s, compute_s=stats.compute_s,
                comm_s=stats.comm_s, peak_memory_bytes=peak_memory_bytes(device), skipped=stats.skipped,
                val_loss=val, grad_norm=stats.grad_norm, learning_rate=stats.learning_rate,
                wall_s=time.perf_counter() - loop_t, checkpoint_s=saved_s or 0.0,
            )
        )  # fmt: skip
        loop_t = time.perf_counter()
        if kind is not None:
            return LoopResult(LoopEnd.DIVERGED, done, last_saved, _diverged(kind, done), grads)
        if saved_s is not None and on_checkpoint is not None:
            on_checkpoint(done)
        if stopped:
            return LoopResult(LoopEnd.STOPPED, done, last_saved, None, grads)
    return LoopResult(LoopEnd.FINISHED, run.total_steps, last_saved, None, grads)

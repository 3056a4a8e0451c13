"""The per-device worker process: join the process group, run each job's Plan, report every step.

Everything a worker sends the launcher is plain bytes (tensors go through ``torch.save``), so a worker may
exit the moment it is done without the parent losing shared-memory handles.
"""

from __future__ import annotations

import faulthandler
import io
import math
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from tessera import cpu_affinity
from tessera.plan import Plan
from tessera.runtime import checkpoint
from tessera.runtime.data import DataSource, SyntheticData, same_data
from tessera.runtime.engine import Trainer
from tessera.runtime.model import ZooModel
from tessera.runtime.options import RunOptions
from tessera.runtime.shards import assemble
from tessera.runtime.telemetry import RankStep, peak_memory_bytes


def to_bytes(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def from_bytes(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)


@dataclass(frozen=True)
class WorkerArgs:
    rank: int
    world_size: int
    port: int
    backend: str
    jobs: tuple[tuple[Plan, RunOptions], ...]
    # the launcher's environment: a forkserver's children inherit the server's, taken at its first use
    env: tuple[tuple[str, str], ...] = ()


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


def should_validate(data: DataSource, done: int, total_steps: int) -> bool:
    every = getattr(data, "val_every", None)
    return every is not None and (done % every(total_steps) == 0 or done == total_steps)


class LossDiverged(RuntimeError):
    """The loss became NaN or infinite and the job asked to fail on it (``on_nonfinite_loss="fail"``)."""


def divergence(loss: float, step: int) -> str | None:
    """ "loss diverged (NaN) at step N" (N counted from 1, as progress is) for a non-finite loss, else None."""
    if math.isfinite(loss):
        return None
    kind = "NaN" if math.isnan(loss) else ("inf" if loss > 0 else "-inf")
    return f"loss diverged ({kind}) at step {step + 1}"


def device_for(plan: Plan, rank: int, backend: str) -> torch.device:
    if backend != "nccl":
        return torch.device("cpu")
    dev = plan.devices[[d.rank for d in plan.devices].index(rank)]
    index = dev.local_index if dev.local_index is not None else rank % torch.cuda.device_count()
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def _inject(options: RunOptions, rank: int, step: int) -> None:
    f = options.fault
    if f is None or f.rank != rank or f.step != step:
        return
    if f.kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif f.kind == "hang":
        time.sleep(10**6)
    else:
        raise RuntimeError(f"injected failure on rank {rank} at step {step}")


def run_job(index: int, plan: Plan, options: RunOptions, rank: int, backend: str, queue: Any) -> None:
    device = device_for(plan, rank, backend)
    factory = options.model or ZooModel(plan.model)
    training = options.training()
    trainer = Trainer(
        plan, rank, factory, seed=options.seed, learning_rate=training.lr_at(0, options.steps), device=device,
        skip_nonfinite=options.on_nonfinite_loss == "skip", training=training,
    )  # fmt: skip
    data = options.data or SyntheticData(options.seed)
    data_identity = identity_of(data, plan)
    start = 0
    if options.resume_from:
        where, meta = checkpoint.read_meta(options.resume_from)
        check_resume_data(meta.get("data"), data_identity, str(where), options.force_data_change)
        ckpt = checkpoint.load(where, trainer.checkpoint_want())  # only this rank's pieces
        trainer.load_local(ckpt.params, ckpt.optim)
        start = ckpt.step
    queue.put(("ready", index, rank, None))
    lay = trainer.layout
    needs_data = lay.first or lay.last
    grads = None
    last_saved = None
    for step in range(start, options.steps):
        _inject(options, rank, step)
        # Dropout RNG: a pure function of (seed, step, stage, replica) — identical on the TP ranks of a
        # replica, whose replicated activations must see the same masks, and reproducible after a resume.
        torch.manual_seed(hash((options.seed, step, lay.stage_index, lay.replica)) % (2**63))
        inputs = targets = None
        if needs_data:
            inputs, targets = data.batch(trainer.stage.module, step, plan.global_batch, plan.seq_len)
        capture = options.capture_grads and step == start
        lr = training.lr_at(step, options.steps)
        stats = trainer.step(step, inputs, targets, capture_grads=capture, learning_rate=lr)
        if capture:
            grads = trainer.captured_grads
        val = None
        if should_validate(data, step + 1, options.steps):
            val = validation_loss(trainer, data, plan, needs_data)
        report = RankStep(
            job=index,
            rank=rank,
            stage=lay.stage_index,
            step=step,
            loss=stats.loss,
            reports_loss=stats.reports_loss,
            iter_s=stats.iter_s,
            compute_s=stats.compute_s,
            comm_s=stats.comm_s,
            peak_memory_bytes=peak_memory_bytes(device),
            skipped=stats.skipped,
            val_loss=val,
            grad_norm=stats.grad_norm,
            learning_rate=stats.learning_rate,
        )
        queue.put(("step", index, rank, report))
        diverged = divergence(stats.loss, step) if stats.reports_loss else None
        if diverged and options.on_nonfinite_loss == "fail":
            raise LossDiverged(diverged)  # before any checkpoint: the updated parameters are not finite
        done = step + 1
        every = options.checkpoint_every
        if options.checkpoint_dir and ((every and done % every == 0) or done == options.steps):
            meta = {
                "plan": plan.to_dict(),
                "seed": options.seed,
                "data_position": done,
                "data": data_identity,
                "model": plan.model,
            }
            checkpoint.save(
                options.checkpoint_dir, done, rank, trainer.param_pieces(), trainer.optim_pieces(), meta
            )
            last_saved = done
    result: dict[str, Any] = {"checkpoint_step": last_saved}
    if grads is not None:
        result["grads"] = grads
    if options.capture_params:
        result["params"] = trainer.param_pieces()
    queue.put(("done", index, rank, to_bytes(result)))
    trainer.close()


def adopt_environment(env: dict[str, str]) -> None:
    """Take the launcher's environment in place of this process's: a forkserver's children inherit the
    server's, taken when it started."""
    os.environ.clear()
    os.environ.update(env)


def main(args: WorkerArgs, queue: Any) -> None:
    rank = args.rank
    if args.env:
        adopt_environment(dict(args.env))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    try:
        timeout = min(o.pg_timeout_s for _, o in args.jobs)
        watchdog = max(o.watchdog_s for _, o in args.jobs)
        faulthandler.dump_traceback_later(watchdog, exit=False, file=sys.stderr)
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // args.world_size))
        if args.backend == "gloo":
            cpu_affinity.pin(rank, args.world_size)  # before gloo starts its threads: they inherit the core
        dist.init_process_group(
            args.backend,
            init_method=f"tcp://127.0.0.1:{args.port}",
            rank=rank,
            world_size=args.world_size,
            timeout=timedelta(seconds=timeout),
        )
        for i, (plan, options) in enumerate(args.jobs):
            run_job(i, plan, options, rank, args.backend, queue)
        dist.barrier()
        faulthandler.cancel_dump_traceback_later()
        dist.destroy_process_group()
        queue.put(("exit", -1, rank, None))
    except BaseException as e:  # noqa: BLE001 - every failure must reach the launcher
        msg = f"{type(e).__name__}: {e}".strip()
        queue.put(
            (
                "error",
                -1,
                rank,
                (msg.splitlines()[0][:500] if msg else type(e).__name__, traceback.format_exc()),
            )
        )
        sys.stderr.flush()
        queue.close()
        queue.join_thread()  # the message must be on the pipe before the hard exit
        os._exit(1)


__all__ = ["WorkerArgs", "assemble", "from_bytes", "main", "to_bytes"]

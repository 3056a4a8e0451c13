"""The per-device worker process: join the process group, run each job's Plan, report every step.

Everything a worker sends the launcher is plain bytes (tensors go through ``torch.save``), so a worker may
exit the moment it is done without the parent losing shared-memory handles.
"""

from __future__ import annotations

import faulthandler
import io
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

from tessera.nn import cpu_affinity
from tessera.plan import Plan
from tessera.runtime.data import SyntheticData
from tessera.runtime.loop import LoopEnd, RankRun, divergence, prepare, train_steps
from tessera.runtime.model import ZooModel
from tessera.runtime.options import RunOptions
from tessera.runtime.shards import assemble


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


class LossDiverged(RuntimeError):
    """The loss became NaN or infinite and the job asked to fail on it (``on_nonfinite_loss="fail"``)."""


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
    data = options.data or SyntheticData(options.seed)
    run = RankRun(
        plan, rank, options.seed, options.steps, options.training(), on_nonfinite_loss=options.on_nonfinite_loss,
        checkpoint_dir=options.checkpoint_dir, checkpoint_every=options.checkpoint_every,
        force_data_change=options.force_data_change, job=index,
    )  # fmt: skip
    prepared = prepare(run, options.model or ZooModel(plan.model), data, device, options.resume_from)
    queue.put(("ready", index, rank, None))
    out = train_steps(
        run, prepared, data, device=device,
        on_record=lambda rec: queue.put(("step", index, rank, rec)),
        before_step=lambda step: _inject(options, rank, step), capture_grads=options.capture_grads,
    )  # fmt: skip
    if out.end is LoopEnd.DIVERGED:
        raise LossDiverged(out.diverged)  # before any checkpoint: the updated parameters are not finite
    result: dict[str, Any] = {"checkpoint_step": out.last_saved}
    if out.grads is not None:
        result["grads"] = out.grads
    if options.capture_params:
        result["params"] = prepared.trainer.param_pieces()
    queue.put(("done", index, rank, to_bytes(result)))
    prepared.trainer.close()


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


__all__ = ["LossDiverged", "WorkerArgs", "assemble", "divergence", "from_bytes", "main", "to_bytes"]

"""Runtime overhead: Tessera's own DP and 1F1B against plain PyTorch on the same model, batch and machine.

* ``dp_vs_ddp_ratio``: Tessera DP on 2 processes (loss weighting + bucketed all-reduce, each bucket started
  as soon as its gradients are ready during the last micro-batch's backward) vs ``DistributedDataParallel``
  (bucketed all-reduce overlapped with backward), both with ``--bucket-mb`` buckets (gpt-tiny is 0.8 MiB:
  the default 25 MiB would make one bucket and leave nothing to overlap). In the same run, Tessera DP with
  the sync after backward (``dp_no_overlap_vs_ddp_ratio``) shows what the overlap changes
  (``dp_overlap_speedup`` = no-overlap / overlap time).
* ``pp_vs_torch_ratio``: Tessera 1F1B on a 2-stage regular plan (own transport) vs
  ``torch.distributed.pipelining.Schedule1F1B`` with ``PipelineStage`` on the same layer split.

Each pair is measured alternately step by step in one run (same processes, same thermal/cache state), after
warm-up; figures are medians over ``--iters`` steps of the slower rank. Writes
``bench/results/runtime_overhead.json`` and prints it. Gloo on CPU here, NCCL when GPUs are present.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tessera.plan import simple_plan
from tessera.runtime import SyntheticData, Trainer, ZooModel, make_optimizer
from tessera.runtime.data_parallel import GradSync
from tessera.runtime.model import initial_state

OUT = Path(__file__).parent / "results" / "runtime_overhead.json"


def _timed(fn) -> float:
    dist.barrier()
    t0 = time.perf_counter()
    fn()
    dist.barrier()
    return time.perf_counter() - t0


def _syncs(trainer: Trainer, bucket_bytes: int) -> tuple[GradSync, GradSync]:
    """The trainer's gradient sync rebuilt with ``bucket_bytes`` buckets: (overlapped, after backward)."""
    old = trainer.sync
    old.close()
    kw = {"owners": old.owners, "reduce_to_owner": old.reduce_to_owner, "bucket_bytes": bucket_bytes}
    overlapped = GradSync(old.params, old.group, old.group_ranks, overlap=True, **kw)
    after = GradSync(old.params, old.group, old.group_ranks, overlap=False, **kw)
    return overlapped, after


def _dp_pair(rank: int, args, factory, data) -> tuple[list[float], ...]:
    n = args.n_layers
    plan = simple_plan(
        args.model, n_layers=n, global_batch=args.batch, seq_len=args.seq, dp=2, micro_batches=1
    )
    trainer = Trainer(plan, rank, factory, seed=0, learning_rate=1e-4, device=torch.device("cpu"))
    model = factory(layer_range=None, tp=None, attention="flash", recompute="none")
    model.load_state_dict(initial_state(factory, n, 0))
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb)
    overlapped, after = _syncs(trainer, int(args.bucket_mb * 2**20))
    opt = make_optimizer("adamw", list(ddp.parameters()), 1e-4)
    half = args.batch // 2
    inputs, targets = data.batch(trainer.stage.module, 0, args.batch, args.seq)
    mine = slice(rank * half, (rank + 1) * half)

    def tessera_step() -> None:
        trainer.sync = overlapped
        trainer.step(0, inputs, targets)
        started[0] = overlapped.launched_in_backward

    def tessera_after_step() -> None:
        trainer.sync = after
        trainer.step(0, inputs, targets)

    def ddp_step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = model.loss(ddp(inputs[mine]), targets[mine])
        loss.backward()
        opt.step()

    started = [0]
    times = _alternate(args, tessera_step, ddp_step, tessera_after_step)
    return (*times, [float(len(overlapped._buckets)), float(started[0])])


def _ce(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(output.reshape(-1, output.shape[-1]).float(), target.reshape(-1))


def _pp_pair(rank: int, args, factory, data) -> tuple[list[float], list[float]]:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    n = args.n_layers
    cut = n // 2
    plan = simple_plan(
        args.model,
        n_layers=n,
        global_batch=args.batch,
        seq_len=args.seq,
        pp=2,
        micro_batches=args.micro,
        layer_cuts=(cut,),
        schedule="1f1b",
    )
    trainer = Trainer(plan, rank, factory, seed=0, learning_rate=1e-4, device=torch.device("cpu"))
    rng = (0, cut) if rank == 0 else (cut, n)
    part = factory(layer_range=rng, tp=None, attention="flash", recompute="none")
    state = initial_state(factory, n, 0)
    local = {}
    for key, value in state.items():
        layer = int(key.split(".")[1])
        if rng[0] <= layer < rng[1]:
            local[f"layers.{layer - rng[0]}.{key.split('.', 2)[2]}"] = value
    part.load_state_dict(local)
    stage = PipelineStage(part, rank, 2, torch.device("cpu"))
    sched = Schedule1F1B(stage, args.micro, loss_fn=_ce)  # on every rank: it also switches backward on
    opt = make_optimizer("adamw", list(part.parameters()), 1e-4)
    inputs, targets = data.batch(trainer.stage.module, 0, args.batch, args.seq)

    def tessera_step() -> None:
        trainer.step(0, inputs if rank == 0 else None, targets if rank == 1 else None)

    def torch_step() -> None:
        opt.zero_grad(set_to_none=True)
        if rank == 0:
            sched.step(inputs)
        else:
            sched.step(target=targets, losses=[])
        opt.step()

    return _alternate(args, tessera_step, torch_step)


def _alternate(args, *fns) -> tuple[list[float], ...]:
    for _ in range(args.warmup):
        for f in fns:
            f()
    times: list[list[float]] = [[] for _ in fns]
    for i in range(args.iters):
        for k in range(len(fns)):  # rotate which goes first so none always runs on a warmer cache
            j = (i + k) % len(fns)
            times[j].append(_timed(fns[j]))
    return tuple(times)


def _worker(rank: int, args, port: int, queue) -> None:
    os.environ["TESSERA_PIPELINE_IMPL"] = "own"  # Tessera's own 1F1B, not its torch fast path
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=timedelta(seconds=60)
    )
    factory = ZooModel(args.model, overrides=(("dropout", 0.0),))
    data = SyntheticData(0)
    dp = _dp_pair(rank, args, factory, data)
    pp = _pp_pair(rank, args, factory, data)
    queue.put((rank, dp, pp))
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt-small-bench")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--bucket-mb", type=float, default=0.1, help="DP bucket size, Tessera and DDP alike")
    args = ap.parse_args()
    if args.model == "gpt-small-bench":
        args.model = "gpt-tiny"
    from tessera.models import zoo

    args.n_layers = len(
        ZooModel(args.model)(layer_range=None, tp=None, attention="flash", recompute="none").layers
    )
    del zoo
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, args, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    got = []
    while len(got) < len(procs):
        try:
            got.append(queue.get(timeout=1.0))
        except Exception:  # noqa: BLE001 - queue.Empty: check the workers are alive
            if any(p.exitcode not in (None, 0) for p in procs):
                for p in procs:
                    p.kill()
                raise SystemExit("bench: a worker failed (see its traceback above)") from None
    for p in procs:
        p.join()
    # the slower rank gates a step: per step, max over ranks (barriers make them nearly equal anyway)
    by_rank = {r: (dp, pp) for r, dp, pp in got}
    dp_t = [max(by_rank[0][0][0][i], by_rank[1][0][0][i]) for i in range(args.iters)]
    dp_d = [max(by_rank[0][0][1][i], by_rank[1][0][1][i]) for i in range(args.iters)]
    dp_a = [max(by_rank[0][0][2][i], by_rank[1][0][2][i]) for i in range(args.iters)]
    n_buckets, started = by_rank[0][0][3]
    pp_t = [max(by_rank[0][1][0][i], by_rank[1][1][0][i]) for i in range(args.iters)]
    pp_p = [max(by_rank[0][1][1][i], by_rank[1][1][1][i]) for i in range(args.iters)]
    med = statistics.median
    result = {
        "model": args.model,
        "global_batch": args.batch,
        "seq_len": args.seq,
        "micro_batches_pp": args.micro,
        "iterations": args.iters,
        "warmup": args.warmup,
        "backend": "gloo",
        "machine": f"{platform.machine()} {os.cpu_count()} cores, torch {torch.__version__}",
        "tessera_dp_s": med(dp_t),
        "ddp_s": med(dp_d),
        "dp_vs_ddp_ratio": med(dp_t) / med(dp_d),
        "dp_bucket_mb": args.bucket_mb,
        "dp_buckets": int(n_buckets),
        "dp_buckets_started_in_backward": int(started),
        "tessera_dp_no_overlap_s": med(dp_a),
        "dp_no_overlap_vs_ddp_ratio": med(dp_a) / med(dp_d),
        "dp_overlap_speedup": med(dp_a) / med(dp_t),
        "tessera_1f1b_s": med(pp_t),
        "torch_1f1b_s": med(pp_p),
        "pp_vs_torch_ratio": med(pp_t) / med(pp_p),
        "target": "both ratios <= 1.05",
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

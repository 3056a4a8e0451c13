"""Single-process references and comparison helpers for the runtime tests."""

from __future__ import annotations

from datetime import timedelta

import torch

from tessera.plan import Device, Plan, Stage
from tessera.runtime import SyntheticData, make_optimizer, reference_model


def reference(factory, plan: Plan, *, seed: int = 0, steps: int = 1, lr: float = 1e-3):
    """(loss per step, full gradient of the first step) of the whole model in one process, full batch."""
    n_layers = plan.stages[-1].layer_end
    model = reference_model(
        factory, n_layers, seed, attention=plan.attention.value, recompute=plan.recompute.value
    )
    opt = make_optimizer(plan.optimizer, list(model.parameters()), lr)
    data = SyntheticData(seed)
    losses, grads = [], None
    for step in range(steps):
        inputs, targets = data.batch(model, step, plan.global_batch, plan.seq_len)
        opt.zero_grad(set_to_none=True)
        loss = model.loss(model(inputs), targets)
        loss.backward()
        if grads is None:
            grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        opt.step()
        losses.append(float(loss.detach()))
    return losses, grads


FLOOR = 1e-4  # of the model's largest gradient entry


def max_rel(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """Largest per-tensor relative error max|a-b| / max|b| over all tensors (keys must match).

    Gradients that are mathematically zero (attention key biases: softmax ignores them) are rounding noise
    of ~1e-11 in both runs; the denominator never drops below ``FLOOR`` × the model's largest gradient entry.
    """
    assert set(a) == set(b), f"keys differ: {sorted(set(a) ^ set(b))[:6]}"
    worst = 0.0
    floor = FLOOR * max(float(t.abs().max()) for t in b.values())
    for k in b:
        denom = max(float(b[k].abs().max()), floor)
        worst = max(worst, float((a[k] - b[k]).abs().max()) / denom)
    return worst


def rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def stage(start: int, end: int, ranks: list[int], dp: int = 1, tp: int = 1, shares=(), ratios=()) -> Stage:
    devs = tuple(Device(rank=r, gpu_type="cpu", local_index=r) for r in ranks)
    return Stage(
        start, end, devs, dp_degree=dp, tp_degree=tp, batch_shares=tuple(shares), tp_ratios=tuple(ratios)
    )


def plan(model: str, stages: list[Stage], *, batch: int = 8, seq: int = 16, micro: int = 1, **kw) -> Plan:
    return Plan(model=model, global_batch=batch, seq_len=seq, stages=tuple(stages), micro_batches=micro, **kw)


def _gloo_entry(rank: int, worker, port: int, world: int, out: dict, env: dict[str, str]) -> None:
    import torch.distributed as dist

    from tessera.runtime.worker import adopt_environment

    adopt_environment(env)  # the test's environment, not the forkserver's (taken at its first use)

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=30),
    )
    try:
        worker(rank, out)
    finally:
        dist.destroy_process_group()


def run_on_gloo(worker, world: int = 2) -> dict:
    """``worker(rank, out)`` on ``world`` processes sharing one gloo group on loopback (30 s process-group
    timeout; the caller's test carries the outer one); returns what they put in ``out``. They fork from the
    runtime launcher's forkserver (torch imported once), as the runtime's own workers do."""
    import os

    import torch.multiprocessing as mp

    from tessera.runtime.launcher import free_port, worker_context

    port = free_port()
    with mp.Manager() as manager:
        out = manager.dict()
        args = (worker, port, world, out, dict(os.environ))
        mp.start_processes(_gloo_entry, args=args, nprocs=world, join=True,
                           start_method=worker_context().get_start_method())  # fmt: skip
        return dict(out)

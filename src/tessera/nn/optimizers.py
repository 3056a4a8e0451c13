"""The optimizers a Plan names, one factory for the runtime and for the profiler that times them (so an
estimate prices the update training runs)."""

from __future__ import annotations

import torch
from torch import nn

from tessera.plan import Optimizer


def make_optimizer(
    kind: Optimizer | str, params: list[nn.Parameter], lr: float, weight_decay: float | None = None
) -> torch.optim.Optimizer:
    """The optimizers a Plan names, with fixed hyper-parameters so every plan (and the reference) agree.

    ``weight_decay`` None keeps each optimizer's default here (AdamW 0.01, Adam and SGD 0); it applies to
    every parameter (decoupled for AdamW, L2 for Adam and SGD, as torch defines them)."""
    kind = Optimizer(kind)
    groups = _dtensor_groups(params)
    if kind != Optimizer.SGD and _fused(params):
        for g in groups:  # the fused kernel on plain tensors; DTensor shards keep the foreach update
            g["fused"] = not _has_dtensor(g["params"])
    if kind == Optimizer.ADAMW:
        return torch.optim.AdamW(groups, lr=lr, weight_decay=0.01 if weight_decay is None else weight_decay)
    if kind == Optimizer.ADAM:
        return torch.optim.Adam(groups, lr=lr, weight_decay=weight_decay or 0.0)
    return torch.optim.SGD(groups, lr=lr, momentum=0.9, weight_decay=weight_decay or 0.0)


def _fused(params: list[nn.Parameter]) -> bool:
    """Adam(W)'s fused kernel: on CUDA by default (one kernel per step instead of a dozen foreach passes:
    39.2 % MFU instead of 37.6 % for a GPT-1.3B on an H200, ``bench/results/gpu_mfu.json``); on the CPU
    stand-in device the foreach update as before. ``TESSERA_FUSED_OPTIMIZER`` = 1 / 0 forces it on / off."""
    import os

    mode = os.environ.get("TESSERA_FUSED_OPTIMIZER", "auto").strip().lower() or "auto"
    if mode not in ("auto", "1", "0"):
        raise ValueError(f"TESSERA_FUSED_OPTIMIZER must be auto, 1 or 0, got {mode!r}")
    if mode != "auto":
        return mode == "1"
    return bool(params) and all(p.device.type == "cuda" for p in params)


def _has_dtensor(params: list[nn.Parameter]) -> bool:
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in params)


def _dtensor_groups(params: list[nn.Parameter]) -> list[dict[str, list[nn.Parameter]]]:
    """DTensor (TP-sharded) and plain parameters in separate groups: the multi-tensor (foreach) update, which
    torch picks on CUDA, runs one op over a whole group and refuses a DTensor beside a plain tensor. Same
    hyper-parameters in both; state is kept per parameter, so checkpoints do not see the split."""
    from torch.distributed.tensor import DTensor

    sharded = [p for p in params if isinstance(p, DTensor)]
    plain = [p for p in params if not isinstance(p, DTensor)]
    return [{"params": g} for g in (plain, sharded) if g] or [{"params": []}]

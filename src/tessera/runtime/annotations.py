"""Whale-style parallel primitives: ``replicate(n)`` and ``split(n)`` annotate submodules; a Plan comes out.

Used inside a model's ``__init__``::

    with tessera.runtime.replicate(2):
        self.features = ResNetFeatures()        # one TaskGraph, data-parallel on 2 devices
    with tessera.runtime.split(2):
        self.classifier = BigClassifier(tp=tp)  # one TaskGraph, tensor-parallel on 2 devices

Nothing is rewritten: a global module-registration hook (``register_module_module_registration_hook``)
records which TaskGraph was open when each submodule was registered. ``plan_from_annotations`` then maps
the model's pipeline-cuttable ``layers`` onto TaskGraphs, gives each its own devices in order (Whale's
VirtualDevices, not shared by default), applies nested data parallelism when the devices are a multiple of
what the TaskGraphs request, and — given per-GPU-type speeds — balances batch shares and TP ratios to the
devices (Whale's hardware-aware intra-TaskGraph balance). The result is an ordinary ``Plan``.
"""

from __future__ import annotations

import contextlib
import math
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn
from torch.nn.modules.module import register_module_module_registration_hook

from tessera.plan import Device, Plan, Schedule, Stage


@dataclass(frozen=True)
class Config:
    """Whale's config: micro-batches of the pipeline, TaskGraph count for automatic partitioning."""

    num_micro_batch: int = 1
    num_task_graph: int = 1
    auto_parallel: bool = False


@dataclass(frozen=True)
class TaskGraph:
    index: int
    kind: Literal["replicate", "split"]
    device_count: int | None


_config = Config()
_stack: list[TaskGraph] = []
_counter = [0]
_owner: weakref.WeakKeyDictionary[nn.Module, TaskGraph] = weakref.WeakKeyDictionary()


def init(config: Config | Mapping[str, Any] | None = None) -> Config:
    """Set the global config (``wh.init(wh.Config({...}))``); returns it."""
    global _config
    if config is None:
        _config = Config()
    elif isinstance(config, Config):
        _config = config
    else:
        _config = Config(**dict(config))
    return _config


def current_config() -> Config:
    return _config


def _hook(parent: nn.Module, name: str, sub: nn.Module | None) -> None:
    if _stack and sub is not None and sub not in _owner:
        _owner[sub] = _stack[-1]


@contextlib.contextmanager
def _scope(kind: Literal["replicate", "split"], device_count: int | None) -> Iterator[TaskGraph]:
    if device_count is not None and device_count < 1:
        raise ValueError(f"{kind}: device_count must be >= 1, got {device_count}")
    tg = TaskGraph(_counter[0], kind, device_count)
    _counter[0] += 1
    handle = register_module_module_registration_hook(_hook)
    _stack.append(tg)
    try:
        yield tg
    finally:
        _stack.pop()
        handle.remove()


def replicate(device_count: int | None = None) -> contextlib.AbstractContextManager[TaskGraph]:
    """Submodules registered inside form one data-parallel TaskGraph on ``device_count`` devices."""
    return _scope("replicate", device_count)


def split(device_count: int | None = None) -> contextlib.AbstractContextManager[TaskGraph]:
    """Submodules registered inside form one tensor-parallel TaskGraph sharded over ``device_count`` devices."""
    return _scope("split", device_count)


def taskgraph_of(module: nn.Module) -> TaskGraph | None:
    """The TaskGraph covering ``module``: its own, else that of its first annotated descendant."""
    if module in _owner:
        return _owner[module]
    for sub in module.modules():
        if sub in _owner:
            return _owner[sub]
    return None


def layer_taskgraphs(model: nn.Module) -> list[TaskGraph | None]:
    return [taskgraph_of(layer) for layer in model.layers]  # type: ignore[attr-defined]


def _groups(model: nn.Module, config: Config) -> list[tuple[int, int, TaskGraph]]:
    """Consecutive layers with the same TaskGraph → (start, end, TaskGraph); unannotated layers join the
    TaskGraph before them (or after, at the front)."""
    tgs = layer_taskgraphs(model)
    n = len(tgs)
    if all(t is None for t in tgs):
        if not config.auto_parallel and config.num_task_graph == 1:
            return [(0, n, TaskGraph(-1, "replicate", None))]
        k = config.num_task_graph
        if k > n:
            raise ValueError(f"num_task_graph: {k} TaskGraphs for {n} layers")
        bounds = [round(i * n / k) for i in range(k + 1)]
        return [(bounds[i], bounds[i + 1], TaskGraph(-1 - i, "replicate", None)) for i in range(k)]
    first = next(t for t in tgs if t is not None)
    filled: list[TaskGraph] = []
    for t in tgs:
        filled.append(t if t is not None else (filled[-1] if filled else first))
    out: list[tuple[int, int, TaskGraph]] = []
    for i, t in enumerate(filled):
        if out and out[-1][2] == t:
            out[-1] = (out[-1][0], i + 1, t)
        else:
            out.append((i, i + 1, t))
    seen = [g[2].index for g in out]
    if len(set(seen)) != len(seen):
        raise ValueError("annotations: a TaskGraph must cover consecutive layers of the model")
    return out


def _apportion(total: int, weights: Sequence[float]) -> tuple[int, ...]:
    """Integers ∝ weights summing to ``total``, each ≥ 1 (largest remainder)."""
    free = total - len(weights)
    s = sum(weights)
    quotas = [free * w / s for w in weights]
    sizes = [math.floor(q) for q in quotas]
    for i in sorted(range(len(weights)), key=lambda i: (-(quotas[i] - sizes[i]), i))[: free - sum(sizes)]:
        sizes[i] += 1
    return tuple(x + 1 for x in sizes)


def plan_from_annotations(
    model: nn.Module,
    devices: int | Sequence[Device],
    *,
    model_name: str,
    global_batch: int,
    seq_len: int = 1,
    config: Config | None = None,
    device_flops: Mapping[str, float] | None = None,
    **plan_options: Any,
) -> Plan:
    """The Plan the annotations (or ``auto_parallel``) describe on ``devices``.

    ``device_flops`` (GPU type → FLOP/s) turns on hardware-aware balance: a replicate TaskGraph's batch shares
    and a split TaskGraph's TP ratios become proportional to its devices' speeds.
    """
    config = config or _config
    devs = (
        tuple(Device(rank=i, gpu_type="cpu", local_index=i) for i in range(devices))
        if isinstance(devices, int)
        else tuple(devices)
    )
    groups = _groups(model, config)
    unspecified = [g for g in groups if g[2].device_count is None]
    fixed = sum(g[2].device_count or 0 for g in groups)
    free = len(devs) - fixed
    if unspecified:
        if free < len(unspecified):
            raise ValueError(
                f"devices: {len(devs)} devices, the TaskGraphs need at least {fixed + len(unspecified)}"
            )
        each = free // len(unspecified)
        counts = [g[2].device_count or each for g in groups]
    else:
        counts = [g[2].device_count or 0 for g in groups]
    requested = sum(counts)
    if requested > len(devs):
        raise ValueError(f"devices: the TaskGraphs request {requested} devices, only {len(devs)} given")
    nested = len(devs) // requested if len(devs) % requested == 0 else 1  # Whale's nested data parallelism
    stages = []
    pos = 0
    for (start, end, tg), count in zip(groups, counts, strict=True):
        n = count * nested
        sdevs = tuple(devs[pos : pos + n])
        pos += n
        if tg.kind == "split":
            dp, tp = nested, count
        else:
            dp, tp = n, 1
        shares: tuple[int, ...] = ()
        ratios: tuple[float, ...] = ()
        if device_flops:
            speed = [device_flops[d.gpu_type] for d in sdevs]
            if dp > 1:
                per_replica = [sum(speed[r * tp : (r + 1) * tp]) for r in range(dp)]
                shares = _apportion(global_batch, per_replica)
            if tp > 1:
                first = speed[:tp]
                ratios = tuple(s / sum(first) for s in first)
        stages.append(
            Stage(start, end, sdevs, dp_degree=dp, tp_degree=tp, batch_shares=shares, tp_ratios=ratios)
        )
    micro = max(config.num_micro_batch, 1)
    schedule = Schedule.ONE_F_ONE_B if micro >= len(stages) else Schedule.GPIPE
    return Plan(
        model=model_name,
        global_batch=global_batch,
        seq_len=seq_len,
        stages=tuple(stages),
        micro_batches=micro,
        schedule=plan_options.pop("schedule", schedule),
        model_layers=len(model.layers),  # type: ignore[arg-type]
        **plan_options,
    )


def annotated_model(factory: Any, **kwargs: Any) -> nn.Module:
    """Build the whole model on the meta device so its annotations can be read without allocating it."""
    with torch.device("meta"):
        return factory(layer_range=None, tp=None, attention="flash", recompute="none", **kwargs)

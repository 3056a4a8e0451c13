"""Intra-stage load balance on heterogeneous devices: Whale §3.3.1, Algorithm 1 (memory-constraint balancing).

Why: with an even split the fastest device idles at the synchronization barrier that ends every step (the DP
gradient sync, the TP all-reduce). Giving each device work ∝ its FLOP/s removes the idle time — unless that
overflows a device's memory, in which case load moves from the most over-full device to the device with room
and the lowest compute load (Whale's ``shift_load``), until nothing overflows or nobody has room.

Memory model per device ``i`` holding load ``L_i``: ``fixed_bytes_i + L_i · load_bytes`` ≤ ``memory_bytes_i``
(Whale's ``L_i · TG_mem ≤ DM_i`` with a load-independent part added, e.g. a replica's weights and optimizer
state). Two granularities:

* **replicate** (:func:`balance_batch`): integer batch shares of a global batch, every replica ≥ 1 sample;
* **split** (:func:`balance_shards`): continuous shard ratios summing to 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tessera.hardware import GPUSpec, get_gpu
from tessera.memory.formula import evaluate
from tessera.memory.overhead import DEFAULT_HEADROOM_FRACTION, usable_bytes
from tessera.models.spec import ModelSpec
from tessera.perf.estimate import stage_view
from tessera.plan import Device, Plan, Stage


@dataclass(frozen=True)
class Balance:
    """Per-device loads after Algorithm 1 (batch samples for replicate, ratios for split)."""

    loads: tuple[float, ...]
    mem_utils: tuple[float, ...]  # device bytes / capacity at these loads
    flop_utils: tuple[float, ...]  # load / FLOP/s, relative: the device's busy time up to a constant
    feasible: bool  # no device overflows
    shifts: int  # successful load shifts Algorithm 1 made

    @property
    def shares(self) -> tuple[int, ...]:
        return tuple(int(round(x)) for x in self.loads)


def _proportional_integers(total: int, weights: Sequence[float], minimum: int = 1) -> list[int]:
    """Largest-remainder apportionment of ``total`` ∝ ``weights``, each at least ``minimum``."""
    n = len(weights)
    if total < minimum * n:
        raise ValueError(f"cannot give {n} devices at least {minimum} of {total}")
    wsum = sum(weights)
    exact = [total * w / wsum for w in weights]
    out = [max(minimum, math.floor(x)) for x in exact]
    while sum(out) < total:
        i = max(range(n), key=lambda j: exact[j] - out[j])
        out[i] += 1
    while sum(out) > total:
        i = max((j for j in range(n) if out[j] > minimum), key=lambda j: out[j] - exact[j])
        out[i] -= 1
    return out


def _algorithm1(
    loads: list[float],
    flops_per_s: Sequence[float],
    capacity: Sequence[float],
    *,
    integer: bool,
    minimum: float,
) -> tuple[list[float], int]:
    """Whale's Algorithm 1 over loads in units where device ``i`` can hold at most ``capacity[i]``."""
    n = len(loads)

    def mem(i: int) -> float:
        return loads[i] / capacity[i] if capacity[i] > 0 else math.inf

    def flop(i: int) -> float:
        return loads[i] / flops_per_s[i]

    oom = [i for i in range(n) if mem(i) > 1 + 1e-12]
    free = [i for i in range(n) if i not in oom]
    shifts = 0
    while oom and free:
        peak = max(oom, key=mem)
        valley = min(free, key=lambda i: (flop(i), mem(i)))
        excess = loads[peak] - max(capacity[peak], minimum)
        room = capacity[valley] - loads[valley]
        if integer:
            excess, room = math.ceil(excess - 1e-9), math.floor(room + 1e-9)
        if excess <= 0:  # already at its minimum: it can shed nothing and stays over-full
            oom.remove(peak)
            continue
        b = min(excess, room)
        if b > 0:
            loads[peak] -= b
            loads[valley] += b
            shifts += 1
        if b >= excess:  # the peak device fits now (or is down to its minimum)
            oom.remove(peak)
        if b >= room or b <= 0:  # the valley device is full
            free.remove(valley)
    return loads, shifts


def _result(
    loads: list[float],
    flops: Sequence[float],
    memory: Sequence[float],
    fixed: Sequence[float],
    unit: float,
    shifts: int,
) -> Balance:
    mem_utils = tuple((f + x * unit) / m for x, f, m in zip(loads, fixed, memory, strict=True))
    return Balance(
        loads=tuple(loads),
        mem_utils=mem_utils,
        flop_utils=tuple(x / f for x, f in zip(loads, flops, strict=True)),
        feasible=all(u <= 1 + 1e-9 for u in mem_utils),
        shifts=shifts,
    )


def _broadcast(x: float | Sequence[float], n: int, name: str) -> list[float]:
    if isinstance(x, int | float):
        return [float(x)] * n
    if len(x) != n:
        raise ValueError(f"{name}: {len(x)} values for {n} devices")
    return [float(v) for v in x]


def balance_batch(
    global_batch: int,
    flops_per_s: Sequence[float],
    memory_bytes: Sequence[float],
    bytes_per_sample: float,
    fixed_bytes: float | Sequence[float] = 0.0,
) -> Balance:
    """Batch shares of DP replicas (Whale's *replicate*): ∝ FLOP/s, then Algorithm 1 under memory.

    ``bytes_per_sample``: memory one more sample costs a replica (activations); ``fixed_bytes``: what a
    replica holds regardless of its batch (weights, gradients, optimizer state).
    """
    n = len(flops_per_s)
    if n == 0 or len(memory_bytes) != n:
        raise ValueError(f"need FLOP/s and memory for every device, got {n} and {len(memory_bytes)}")
    fixed = _broadcast(fixed_bytes, n, "fixed_bytes")
    loads = [float(x) for x in _proportional_integers(global_batch, flops_per_s)]
    capacity = [max(0.0, (m - f) / bytes_per_sample) if bytes_per_sample > 0 else math.inf
                for m, f in zip(memory_bytes, fixed, strict=True)]  # fmt: skip
    loads, shifts = _algorithm1(loads, flops_per_s, capacity, integer=True, minimum=1.0)
    return _result(loads, flops_per_s, memory_bytes, fixed, bytes_per_sample, shifts)


def balance_shards(
    flops_per_s: Sequence[float],
    memory_bytes: Sequence[float],
    shardable_bytes: float,
    fixed_bytes: float | Sequence[float] = 0.0,
) -> Balance:
    """Shard ratios of TP ranks (Whale's *split*): ∝ FLOP/s, then Algorithm 1 under memory.

    ``shardable_bytes``: memory of the whole split part (a rank with ratio ``L`` holds ``L ·
    shardable_bytes``); ``fixed_bytes``: what every rank holds regardless (replicated layers).
    """
    n = len(flops_per_s)
    if n == 0 or len(memory_bytes) != n:
        raise ValueError(f"need FLOP/s and memory for every device, got {n} and {len(memory_bytes)}")
    fixed = _broadcast(fixed_bytes, n, "fixed_bytes")
    total = sum(flops_per_s)
    loads = [f / total for f in flops_per_s]
    capacity = [max(0.0, (m - f) / shardable_bytes) if shardable_bytes > 0 else math.inf
                for m, f in zip(memory_bytes, fixed, strict=True)]  # fmt: skip
    loads, shifts = _algorithm1(loads, flops_per_s, capacity, integer=False, minimum=0.0)
    return _result(loads, flops_per_s, memory_bytes, fixed, shardable_bytes, shifts)


# ------------------------------------------------------------------------------------ plans and stages
def order_by_memory(
    devices: Sequence[Device], gpu_of: Callable[[Device], GPUSpec] | None = None
) -> list[Device]:
    """Whale §3.3.2: earlier pipeline stages hold more in-flight activations (1F1B stage i keeps S − i), so
    they go to the devices with the most memory: devices sorted by capacity, largest first (stable)."""
    gpu = gpu_of or (lambda d: get_gpu(d.gpu_type))
    return sorted(devices, key=lambda d: -gpu(d).memory_bytes)


def balance_stage(
    plan: Plan,
    spec: ModelSpec,
    index: int,
    *,
    precision_flops: str | None = None,
    gpu_of: Callable[[Device], GPUSpec] | None = None,
) -> tuple[Stage, Balance | None, Balance | None]:
    """Stage ``index`` of ``plan`` with Whale-balanced batch shares and TP shard ratios.

    Speeds are datasheet FLOP/s at the plan's precision (a replica runs at TP × its slowest rank, since ranks
    meet at every layer). Memory comes from the memory module's formula: a replica's bytes per extra sample
    of its share and its fixed bytes are read off the formula at micro-batch 1 and 2; capacities are the
    memory module's usable bytes per GPU. Shard ratios treat the stage's even-TP peak as fully shardable (a
    rank with ratio L holds L · tp · that peak) — an approximation until the formula takes uneven shards.
    Returns the new stage and the two Algorithm-1 results (None where the degree is 1).
    """
    stage = plan.stages[index]
    gpu = gpu_of or (lambda d: get_gpu(d.gpu_type))
    prec = precision_flops or plan.precision.value
    dp, tp = stage.dp_degree, stage.tp_degree
    cap = {d.rank: _usable(gpu(d)) for d in stage.devices}
    batch = shards = None
    new = stage
    if tp > 1:
        rank_flops = [min(gpu(stage.replica(r)[k]).peak_flops(prec) for r in range(dp)) for k in range(tp)]
        rank_mem = [min(cap[stage.replica(r)[k].rank] for r in range(dp)) for k in range(tp)]
        mb = max(1, math.ceil(max(stage.shares(plan.global_batch)) / plan.micro_batches))
        even_peak = float(evaluate(spec, [stage_view(plan, index, mb)]).peak_bytes[0])
        shards = balance_shards(rank_flops, rank_mem, shardable_bytes=tp * even_peak)
        new = replace(new, tp_ratios=tuple(shards.loads))
    if dp > 1:
        flops = [tp * min(gpu(d).peak_flops(prec) for d in stage.replica(r)) for r in range(dp)]
        mem = [min(cap[d.rank] for d in stage.replica(r)) for r in range(dp)]
        p1, p2 = evaluate(spec, [stage_view(plan, index, m) for m in (1, 2)]).peak_bytes
        per_sample = float(p2 - p1) / plan.micro_batches
        fixed = float(p1) - float(p2 - p1)
        batch = balance_batch(plan.global_batch, flops, mem, bytes_per_sample=per_sample, fixed_bytes=fixed)
        new = replace(new, batch_shares=batch.shares)
    return new, batch, shards


def balance_plan(plan: Plan, spec: ModelSpec, **kw: Any) -> Plan:
    """Every stage of ``plan`` balanced with :func:`balance_stage`."""
    stages = tuple(balance_stage(plan, spec, i, **kw)[0] for i in range(plan.n_stages))
    return replace(plan, stages=stages)


def _usable(gpu: GPUSpec) -> float:
    try:
        return usable_bytes(gpu.name)
    except Exception:  # a GPU only the caller knows: its capacity less its context, 5 % headroom
        return gpu.memory_bytes * (1 - DEFAULT_HEADROOM_FRACTION) - gpu.context_bytes

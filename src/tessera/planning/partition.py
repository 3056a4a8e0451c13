"""Stage determination of a Cell (Crius §4.2, Figure 7): FLOPs-proportional GPU mapping, cuts at the smallest
inter-layer traffic.

Crius maps the Cell's ``N`` GPUs onto the operators (here: the spec's layers) in proportion to their FLOPs —
operator ``i`` gets ``N · F_i / ΣF`` GPUs, so every operator would take the same time on its share — and then
clusters consecutive operators into ``S`` stages, cutting where the traffic between neighbours is smallest.
A stage's GPUs are the sum of its operators' shares.

Cutting purely at the ``S − 1`` smallest traffics can leave wildly unequal stages (on a transformer every
boundary carries the same b·s·h activation, so traffic cannot choose at all). We therefore cut at the smallest
total traffic *among partitions whose largest stage is within* ``balance_tolerance`` *of the best achievable
largest stage*: ``balance_tolerance=math.inf`` is Crius's literal rule, ``0`` the most balanced partition with
the least traffic among equally balanced ones. Both are exact dynamic programs, O(S·n²).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tessera.models.spec import ModelSpec


@dataclass(frozen=True)
class StagePartition:
    """Layer ranges of the stages and the GPUs mapped to each."""

    bounds: tuple[tuple[int, int], ...]  # [start, end) per stage
    mapped_gpus: tuple[float, ...]  # Σ of the stage's operators' FLOPs-proportional GPU shares
    gpus: tuple[int, ...]  # whole GPUs per stage (largest remainder, ≥ 1 each), summing to N
    cut_traffic_bytes: float  # Σ traffic across the chosen cuts

    @property
    def cuts(self) -> tuple[int, ...]:
        """Indices of the first layer of every stage but the first."""
        return tuple(a for a, _ in self.bounds[1:])


def map_gpus(flops: Sequence[float], n_gpus: int) -> tuple[float, ...]:
    """Each operator's FLOPs-proportional share of ``n_gpus`` (Crius: T = FLOPs / GPUs is then equal)."""
    total = float(sum(flops))
    if total <= 0:
        raise ValueError("operators need positive total FLOPs to map GPUs onto")
    return tuple(n_gpus * f / total for f in flops)


def _whole_gpus(mapped: Sequence[float], n_gpus: int) -> tuple[int, ...]:
    n = len(mapped)
    if n_gpus < n:
        raise ValueError(f"{n} stages need at least {n} GPUs, got {n_gpus}")
    out = [max(1, math.floor(x + 1e-9)) for x in mapped]
    while sum(out) < n_gpus:
        i = max(range(n), key=lambda j: mapped[j] - out[j])
        out[i] += 1
    while sum(out) > n_gpus:
        i = max((j for j in range(n) if out[j] > 1), key=lambda j: out[j] - mapped[j])
        out[i] -= 1
    return tuple(out)


def partition_stages(
    flops: Sequence[float],
    traffic_bytes: Sequence[float],
    n_gpus: int,
    n_stages: int,
    *,
    balance_tolerance: float = 0.25,
) -> StagePartition:
    """Cut ``len(flops)`` operators into ``n_stages`` stages (see the module docstring).

    ``traffic_bytes[j]`` is what operator ``j`` sends operator ``j + 1``.
    """
    n = len(flops)
    if len(traffic_bytes) != n - 1:
        raise ValueError(f"{len(traffic_bytes)} traffics for {n} operators (need {n - 1})")
    if not 1 <= n_stages <= n:
        raise ValueError(f"{n_stages} stages for {n} operators")
    mapped = map_gpus(flops, n_gpus)
    prefix = [0.0]
    for g in mapped:
        prefix.append(prefix[-1] + g)

    def seg(i: int, j: int) -> float:
        return prefix[j] - prefix[i]

    inf = math.inf
    # 1) the most balanced partition's largest stage (minimax).
    best = [[inf] * (n + 1) for _ in range(n_stages + 1)]
    best[0][0] = 0.0
    for k in range(1, n_stages + 1):
        for j in range(k, n + 1):
            best[k][j] = min(max(best[k - 1][i], seg(i, j)) for i in range(k - 1, j))
    bound = best[n_stages][n] * (1 + balance_tolerance) + 1e-9
    # 2) least cut traffic among partitions within the bound; ties → the smaller largest stage.
    cost: list[list[tuple[float, float]]] = [[(inf, inf)] * (n + 1) for _ in range(n_stages + 1)]
    back = [[-1] * (n + 1) for _ in range(n_stages + 1)]
    cost[0][0] = (0.0, 0.0)
    for k in range(1, n_stages + 1):
        for j in range(k, n + 1):
            for i in range(k - 1, j):
                if cost[k - 1][i][0] == inf or seg(i, j) > bound:
                    continue
                cand = (cost[k - 1][i][0] + (traffic_bytes[i - 1] if i > 0 else 0.0),
                        max(cost[k - 1][i][1], seg(i, j)))  # fmt: skip
                if cand < cost[k][j]:
                    cost[k][j], back[k][j] = cand, i
    bounds: list[tuple[int, int]] = []
    j = n
    for k in range(n_stages, 0, -1):
        i = back[k][j]
        bounds.append((i, j))
        j = i
    bounds.reverse()
    stage_mapped = tuple(seg(a, b) for a, b in bounds)
    return StagePartition(
        bounds=tuple(bounds),
        mapped_gpus=stage_mapped,
        gpus=_whole_gpus(stage_mapped, n_gpus),
        cut_traffic_bytes=cost[n_stages][n][0],
    )


EDGE_KINDS = frozenset({"embedding", "head", "stem", "classifier"})  # layers that are not a repeated block


def block_range(spec: ModelSpec) -> tuple[int, int]:
    """[start, end) of the spec's repeated blocks: everything but its leading and trailing edge layers
    (embedding/stem, head/classifier). Megatron divides these evenly among stages; the edges ride with the
    first and last stage (:func:`tessera.plan.even_cuts`)."""
    kinds = [layer.kind for layer in spec.layers]
    start, end = 0, len(kinds)
    while start < end and kinds[start] in EDGE_KINDS:
        start += 1
    while end > start and kinds[end - 1] in EDGE_KINDS:
        end -= 1
    return start, end


def partition_model(
    spec: ModelSpec, n_gpus: int, n_stages: int, *, balance_tolerance: float = 0.25
) -> StagePartition:
    """Crius stage determination on a model spec: layer forward FLOPs, layer output bytes as the traffic."""
    return partition_stages(
        [layer.fwd_flops_per_sample for layer in spec.layers],
        [layer.out_bytes_per_sample for layer in spec.layers[:-1]],
        n_gpus,
        n_stages,
        balance_tolerance=balance_tolerance,
    )


def partition_by_speed(flops: Sequence[float], speeds: Sequence[float]) -> tuple[tuple[int, int], ...]:
    """Contiguous layer ranges for stages of given speeds (FLOP/s), minimizing the slowest stage's time
    (Whale §3.3.2's inter-TaskGraph balance: a stage on faster devices takes more layers).

    Bisection on the bottleneck time τ: stages greedily take layers while FLOPs ≤ τ · speed; every stage
    keeps at least one layer. Exact up to the bisection tolerance; O(n · iterations).
    """
    n, S = len(flops), len(speeds)
    if not 1 <= S <= n:
        raise ValueError(f"{S} stages for {n} layers")
    if any(v <= 0 for v in speeds):
        raise ValueError("stage speeds must be > 0")

    def cut(tau: float) -> list[tuple[int, int]] | None:
        out, i = [], 0
        for s in range(S):
            left = S - s - 1  # stages after this one, each needing a layer
            j, work = i, 0.0
            while j < n - left and (j == i or work + flops[j] <= tau * speeds[s]):
                work += flops[j]
                j += 1
            if s == S - 1 and j < n:
                return None
            out.append((i, j))
            i = j
        return out

    lo, hi = 0.0, sum(flops) / min(speeds) * (1 + 1e-9)  # any one stage can hold it all (rounding slack)
    best = cut(hi)
    for _ in range(60):
        mid = (lo + hi) / 2
        got = cut(mid)
        if got is None:
            lo = mid
        else:
            hi, best = mid, got
    assert best is not None
    return tuple(best)

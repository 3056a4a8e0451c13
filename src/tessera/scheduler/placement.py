"""Placement: Frenzy's HAS (heterogeneity-aware scheduler, Frenzy §IV-B Algorithm 1) with topology awareness.

HAS has two steps. *Plan retrieval* walks a job's resource plans (GPU count, minimum GPU memory), best first,
and takes the first the cluster can satisfy now (:func:`first_satisfiable`). *Best-fit placement* then puts
the chosen plan on nodes: the single node whose free GPUs fit the job most tightly (fewest idle GPUs that
still suffice); when no single node can hold it, the node with the most free GPUs is taken whole and the rest
is placed again the same way (:func:`best_fit`). So Job(2, ≥32 GB) lands on Node(3 × 40 GB) rather than
Node(6 × 80 GB), and Job(4, 35 GB) on one Node(4 × 40 GB) rather than four Node(1 × 40 GB).

Topology awareness (``keep_in_node``): a job small enough for one node of its kind never spreads over
several — it waits for a node to free up instead, since cross-node links would slow it down (Frenzy §IV-B).

Tessera's Cells name GPU types, so :func:`place` runs best-fit per type of a Cell; :func:`place_by_memory` is
Frenzy's memory-size form (any node whose GPUs are large enough).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tessera.scheduler.state import ClusterState, GPUs

Placement = tuple[tuple[int, int], ...]


def best_fit(
    free: np.ndarray,
    capacity: np.ndarray,
    nodes: np.ndarray,
    n_gpus: int,
    *,
    keep_in_node: bool = True,
) -> Placement | None:
    """Frenzy's best-fit over candidate ``nodes`` (indices into ``free``/``capacity``): ``n_gpus`` GPUs as
    (node, GPUs) pairs sorted by node, or None when they cannot be placed now. ``free`` is not modified."""
    if n_gpus <= 0:
        return ()
    if len(nodes) == 0:
        return None
    f = free[nodes].astype(np.int64, copy=True)
    if int(f.sum()) < n_gpus:
        return None
    out: list[tuple[int, int]] = []
    need = n_gpus
    if keep_in_node and n_gpus <= int(capacity[nodes].max()):
        # fits in one node of this kind: only a single node will do (topology awareness)
        ok = np.flatnonzero(f >= n_gpus)
        if len(ok) == 0:
            return None
        j = ok[np.argmin(f[ok])]  # tightest fit; argmin takes the lowest index among ties
        return ((int(nodes[j]), n_gpus),)
    while need > 0:
        ok = np.flatnonzero(f >= need)
        if len(ok):
            j = ok[np.argmin(f[ok])]
            out.append((int(nodes[j]), need))
            need = 0
            break
        j = int(np.argmax(f))  # greedy: the node with the most free GPUs, whole
        if f[j] <= 0:
            return None
        out.append((int(nodes[j]), int(f[j])))
        need -= int(f[j])
        f[j] = 0
    return tuple(sorted(out))


def place(cluster: ClusterState, gpus: GPUs, *, keep_in_node: bool = True) -> Placement | None:
    """Best-fit placement of a Cell's GPUs, type by type (all or nothing). ``cluster`` is not modified."""
    out: list[tuple[int, int]] = []
    for t, n in gpus:
        idx = cluster.nodes_of_type(t)
        if len(idx) == 0:
            return None
        idx = idx[cluster.up[idx]]
        p = best_fit(cluster.free, cluster.capacity, idx, n, keep_in_node=keep_in_node)
        if p is None:
            return None
        out.extend(p)
    return tuple(sorted(out))


def place_by_memory(
    cluster: ClusterState, n_gpus: int, min_memory_bytes: float, *, keep_in_node: bool = True
) -> Placement | None:
    """Frenzy's Job(n, s): ``n_gpus`` GPUs of at least ``min_memory_bytes`` each, on any type, best-fit."""
    idx = np.flatnonzero(cluster.up & (cluster.memory >= min_memory_bytes))
    return best_fit(cluster.free, cluster.capacity, idx, n_gpus, keep_in_node=keep_in_node)


def first_satisfiable(cluster: ClusterState, plans: Sequence[tuple[int, float]]) -> int | None:
    """HAS plan retrieval: the index of the first (GPU count, minimum GPU memory) plan whose count of free GPUs
    with enough memory suffices, or None."""
    avail = cluster.free * cluster.up
    for k, (n, mem) in enumerate(plans):
        if int(avail[cluster.memory >= mem].sum()) >= n:
            return k
    return None

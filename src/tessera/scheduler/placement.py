"""Placement: Frenzy's HAS (heterogeneity-aware scheduler, Frenzy §IV-B Algorithm 1) with topology awareness.

HAS has two steps (:func:`has`). *Plan retrieval* walks a job's resource plans (GPU count, minimum GPU
memory), best first, and takes the first the cluster can satisfy now (:func:`first_satisfiable`).
*Placement* (:func:`place_by_memory`) then first restricts to the smallest adequate GPU memory size among
the free GPUs and puts the plan on the node of that size whose free GPUs fit it most tightly; when no single
node can hold it, the node of that size with the most free GPUs is taken whole and the rest is placed again
the same way. So Job(2, ≥32 GB) lands on a 40 GB node before an 80 GB one, Node(3 × 40 GB) rather than
Node(6 × 80 GB), and Job(4, 35 GB) on one Node(4 × 40 GB) rather than four Node(1 × 40 GB).

Topology awareness (``keep_in_node``): a job small enough for one node of its kind never spreads over
several — it waits for a node to free up instead, since cross-node links would slow it down (Frenzy §IV-B).

Tessera's Cells name GPU types, so :func:`place` runs the same best-fit per type of a Cell (:func:`best_fit`;
within one type there is one memory size). The ``frenzy`` policy places by memory size (:func:`has`).
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
    max_capacity: int | None = None,
) -> Placement | None:
    """Frenzy's best-fit over candidate ``nodes`` (indices into ``free``/``capacity``): ``n_gpus`` GPUs as
    (node, GPUs) pairs sorted by node, or None when they cannot be placed now. ``free`` is not modified.
    ``max_capacity``: the largest of ``capacity[nodes]`` when the caller knows it (placement runs tens of
    thousands of times a round at scale)."""
    if n_gpus <= 0:
        return ()
    if len(nodes) == 0:
        return None
    if max_capacity is None:
        max_capacity = int(capacity[nodes].max())
    return _best_fit(free[nodes], nodes, n_gpus, keep_in_node, max_capacity)


def _best_fit(
    f: np.ndarray, nodes: np.ndarray, n_gpus: int, keep_in_node: bool, max_capacity: int
) -> Placement | None:
    """:func:`best_fit` on ``f``, the free GPUs of ``nodes`` (read, never written: it may be a view)."""
    if f.dtype != np.int64:
        f = f.astype(np.int64)
    # the tightest node that holds the job, the lowest index among ties (argmin's first), if any: as unsigned,
    # the nodes short of GPUs (free - n < 0) rank after every node that holds it
    spare = f - n_gpus
    j = int(spare.view(np.uint64).argmin())
    if spare[j] >= 0:
        return ((int(nodes[j]), n_gpus),)
    if keep_in_node and n_gpus <= max_capacity:
        return None  # it fits one node of this kind: only a single node will do (topology awareness)
    if int(f.sum()) < n_gpus:
        return None
    return _spread(f, nodes, n_gpus)


def _spread(f: np.ndarray, nodes: np.ndarray, n_gpus: int) -> Placement:
    """Frenzy's greedy over ``f`` (free GPUs of ``nodes``, at least ``n_gpus`` in all): while no node holds the
    rest, the node with the most free GPUs whole (the first among ties); then the tightest node that holds the
    rest (the first among ties). Free counts are small integers, so it walks them by value from a count of the
    nodes per value rather than sorting nodes — a 64-GPU Cell spans eight nodes, and at scale a type has a
    thousand nodes: only the nodes taken are looked up (of one value, by index, the first ones)."""
    left = np.bincount(f).tolist()  # nodes per free count, not yet taken
    used = [0] * len(left)  # nodes of each free count taken whole (the first ones by index)
    out: list[tuple[int, int]] = []
    rest, v = n_gpus, len(left) - 1
    while True:
        while left[v] == 0:
            v -= 1  # the most free GPUs any node not taken has (Σ f >= n_gpus: one remains while rest > 0)
        if v >= rest:  # a node holds the rest: the tightest, the first of its count not taken whole
            u = rest
            while left[u] == 0:
                u += 1
            j = int(np.flatnonzero(f == u)[used[u]])
            out.append((int(nodes[j]), rest))
            return tuple(sorted(out))
        k = min(left[v], (rest - 1) // v)  # whole nodes of this count while none holds what is left
        for j in np.flatnonzero(f == v)[used[v] : used[v] + k].tolist():
            out.append((int(nodes[j]), v))
        used[v] += k
        left[v] -= k
        rest -= k * v


def _of(values: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """``values[nodes]`` for ``nodes`` ascending without repeats (non-empty): a view when they are consecutive
    indices (a type's nodes usually are) rather than a copy — placement reads a thousand nodes' figures tens of
    thousands of times a round at scale."""
    lo = int(nodes[0])
    hi = int(nodes[-1]) + 1
    return values[lo:hi] if hi - lo == len(nodes) else values[nodes]


def place(cluster: ClusterState, gpus: GPUs, *, keep_in_node: bool = True) -> Placement | None:
    """Best-fit placement of a Cell's GPUs, type by type (all or nothing). ``cluster`` is not modified."""
    out: list[tuple[int, int]] = []
    for t, n in gpus:
        idx = cluster.nodes_of_type(t)
        if len(idx) == 0:
            return None
        up = _of(cluster.up, idx)
        if up.all():
            cap = cluster.max_capacity_of_type(t)
        else:
            idx = idx[up]
            cap = int(cluster.capacity[idx].max()) if len(idx) else 0
        if n <= 0:
            p: Placement | None = ()
        elif len(idx) == 0:
            p = None
        else:  # the type's nodes (up) ascend without repeats, as flatnonzero gives them: ``_of`` may take a view
            p = _best_fit(_of(cluster.free, idx), idx, n, keep_in_node, cap)
        if p is None:
            return None
        if len(gpus) == 1:
            return p  # one type: already sorted by node
        out.extend(p)
    return tuple(sorted(out))


def place_by_memory(
    cluster: ClusterState, n_gpus: int, min_memory_bytes: float, *, keep_in_node: bool = True
) -> Placement | None:
    """Frenzy's HAS placement of Job(n, s) (Algorithm 1 lines 11–36): ``n_gpus`` GPUs of at least
    ``min_memory_bytes`` each, on nodes that are up. ``cluster`` is not modified.

    Each step restricts to the *smallest adequate GPU memory size* among the free GPUs (line 14; the paper's
    line 15 reads ``gpusize > fitSz``, which would exclude the size just chosen — we read it as ``==``), then
    takes the tightest node of that size that holds the rest (lines 16–26), else the node of that size with
    the most free GPUs whole (lines 29–33), and repeats — so a job may spill to the next size up. Job(2, ≥32
    GB) goes to a free 40 GB node before an 80 GB one, even one with exactly 2 free.

    With ``keep_in_node`` (Tessera's topology awareness) a job no larger than some adequate node is never
    split: it gets the tightest node of the smallest adequate size among nodes that can hold it whole, or
    None (it waits).
    """
    if n_gpus <= 0:
        return ()
    adequate = cluster.up & (cluster.memory >= min_memory_bytes)
    f = np.where(adequate, cluster.free, 0).astype(np.int64)
    if int(f.sum()) < n_gpus:
        return None
    if keep_in_node and n_gpus <= int(cluster.capacity[adequate].max(initial=0)):
        holds = np.flatnonzero(f >= n_gpus)
        if len(holds) == 0:
            return None
        fit_sz = cluster.memory[holds].min()
        same = holds[cluster.memory[holds] == fit_sz]
        j = same[np.argmin(f[same])]  # tightest; argmin takes the lowest index among ties
        return ((int(j), n_gpus),)
    out: list[tuple[int, int]] = []
    need = n_gpus
    while need > 0:
        avail = np.flatnonzero(f > 0)
        fit_sz = cluster.memory[avail].min()  # line 14: the smallest adequate size still free
        nlst = avail[cluster.memory[avail] == fit_sz]  # line 15: its nodes only
        ok = nlst[f[nlst] >= need]
        if len(ok):  # lines 18–26: the tightest single node that holds the rest
            j = int(ok[np.argmin(f[ok])])
            out.append((j, need))
            break
        j = int(nlst[np.argmax(f[nlst])])  # lines 29–33: the most free GPUs of that size, whole
        out.append((j, int(f[j])))
        need -= int(f[j])
        f[j] = 0
    return tuple(sorted(out))


def first_satisfiable(
    cluster: ClusterState, plans: Sequence[tuple[int, float]], start: int = 0
) -> int | None:
    """HAS plan retrieval (Algorithm 1 lines 1–10): the index of the first (GPU count, minimum GPU memory)
    plan, from ``start`` on, whose count of free GPUs with enough memory suffices, or None."""
    avail = cluster.free * cluster.up
    for k in range(start, len(plans)):
        n, mem = plans[k]
        if int(avail[cluster.memory >= mem].sum()) >= n:
            return k
    return None


def has(
    cluster: ClusterState, plans: Sequence[tuple[int, float]], *, keep_in_node: bool = True
) -> tuple[int, Placement] | None:
    """Frenzy's HAS (Algorithm 1) end to end: the first plan the cluster can satisfy now, placed by
    :func:`place_by_memory`; (plan index, placement), or None. A plan whose count is free but which topology
    awareness will not split gives way to the next plan (the paper has no such rule: it always places)."""
    k = first_satisfiable(cluster, plans)
    while k is not None:
        n, mem = plans[k]
        p = place_by_memory(cluster, n, mem, keep_in_node=keep_in_node)
        if p is not None:
            return k, p
        k = first_satisfiable(cluster, plans, k + 1)
    return None

"""Frenzy HAS best-fit placement: the paper's hand-checkable cases and topology awareness."""

from __future__ import annotations

import numpy as np

from tessera.scheduler.placement import best_fit, first_satisfiable, has, place, place_by_memory
from tessera.scheduler.state import ClusterState, NodeInfo

GB = 10**9


def _cluster(nodes: list[tuple[int, int]], free: list[int] | None = None) -> ClusterState:
    """Nodes as (GPUs, GB per GPU); optional free counts."""
    infos = [NodeInfo(i, f"n{i}", f"T{mem}", n, mem * GB) for i, (n, mem) in enumerate(nodes)]
    cs = ClusterState(infos)
    if free is not None:
        cs.free[:] = free
    return cs


def test_has_prefers_tightest_node_job_2x32_on_3x40_not_6x80():
    # Frenzy §IV-B: Job(2, 32) goes to Node(3, 40) rather than Node(6, 80)
    cs = _cluster([(6, 80), (3, 40)])
    assert place_by_memory(cs, 2, 32 * GB) == ((1, 2),)


def test_has_restricts_to_smallest_adequate_size_before_tightest_node():
    # Frenzy Algorithm 1 lines 14-15: a free 40 GB node before an 80 GB one, even when the 80 GB node is the
    # tighter fit (exactly 2 free); a plain tightest-node rule would take node 0
    cs = _cluster([(2, 80), (4, 40)])
    assert place_by_memory(cs, 2, 32 * GB) == ((1, 2),)
    # 24 GB GPUs are not adequate; with the 40 GB node busy the job goes to the 80 GB node
    cs = _cluster([(2, 80), (4, 40), (8, 24)], free=[2, 1, 8])
    assert place_by_memory(cs, 2, 32 * GB) == ((0, 2),)


def test_has_spills_to_the_next_size_when_the_smallest_runs_out():
    # 3 GPUs >= 32 GB, only 1 + 1 free at 40 GB: both 40 GB GPUs (most-free first, lowest index on ties),
    # then the rest at 80 GB (lines 13-36 repeat with the size recomputed)
    cs = _cluster([(4, 40), (4, 40), (4, 80)], free=[1, 1, 4])
    assert place_by_memory(cs, 3, 32 * GB, keep_in_node=False) == ((0, 1), (1, 1), (2, 1))
    # topology awareness: it fits one node, so one node of the smallest size that can hold it whole
    assert place_by_memory(cs, 3, 32 * GB) == ((2, 3),)
    cs.free[2] = 2
    assert place_by_memory(cs, 3, 32 * GB) is None


def test_has_keeps_job_4x35_on_one_node_not_four():
    # Frenzy §IV-B: Job(4, 35) on one Node(4, 40) rather than four Node(1, 40)
    cs = _cluster([(1, 40), (1, 40), (1, 40), (1, 40), (4, 40)])
    assert place_by_memory(cs, 4, 35 * GB) == ((4, 4),)


def test_has_skips_gpus_too_small():
    cs = _cluster([(8, 24), (2, 40)])
    assert place_by_memory(cs, 2, 32 * GB) == ((1, 2),)
    assert place_by_memory(cs, 3, 32 * GB) is None


def test_greedy_spread_from_the_node_with_most_free_when_no_node_fits():
    cs = _cluster([(4, 40), (4, 40), (4, 40)], free=[3, 1, 2])
    # 5 GPUs exceed any node: take the most-free node (3) whole, then best-fit the remaining 2 (node 2)
    assert place_by_memory(cs, 5, 1) == ((0, 3), (2, 2))


def test_topology_awareness_waits_instead_of_spreading_a_job_that_fits_one_node():
    cs = _cluster([(4, 40), (4, 40)], free=[2, 2])
    assert place_by_memory(cs, 4, 1) is None  # fits a 4-GPU node: never split over two
    assert place_by_memory(cs, 4, 1, keep_in_node=False) == ((0, 2), (1, 2))


def test_best_fit_does_not_modify_free_and_ties_take_lowest_index():
    free = np.array([2, 2, 4])
    cap = np.array([4, 4, 4])
    assert best_fit(free, cap, np.arange(3), 2) == ((0, 2),)
    assert list(free) == [2, 2, 4]


def test_place_by_type_all_or_nothing():
    cs = ClusterState.of([("A100-40GB", 4), ("A10", 2), ("A10", 2)])
    assert place(cs, (("A10", 2), ("A100-40GB", 4))) == ((0, 4), (1, 2))
    assert place(cs, (("A10", 4), ("A100-40GB", 4))) == ((0, 4), (1, 2), (2, 2))
    assert place(cs, (("A10", 6),)) is None
    assert place(cs, (("V100-32GB", 1),)) is None


def test_place_skips_nodes_that_are_down():
    cs = ClusterState.of([("A10", 2), ("A10", 2)])
    cs.up[0] = False
    assert place(cs, (("A10", 2),)) == ((1, 2),)


def test_first_satisfiable_walks_plans_in_order():
    cs = _cluster([(2, 40), (4, 24)], free=[1, 4])
    plans = [(1, 45 * GB), (2, 35 * GB), (4, 20 * GB)]
    assert first_satisfiable(cs, plans) == 2
    cs.free[0] = 2
    assert first_satisfiable(cs, plans) == 1


def test_has_retrieves_the_first_satisfiable_plan_then_places_it_by_memory():
    cs = _cluster([(2, 80), (4, 40), (8, 24)], free=[2, 4, 8])
    # plan 0 wants 4 x >= 45 GB (only 2 such free); plan 1 wants 2 x >= 32 GB: the 40 GB node
    plans = [(4, 45 * GB), (2, 32 * GB), (8, 20 * GB)]
    assert has(cs, plans) == (1, ((1, 2),))
    cs.free[:] = [2, 0, 8]
    assert has(cs, plans) == (1, ((0, 2),))
    cs.free[:] = [0, 1, 8]
    assert has(cs, plans) == (2, ((2, 8),))
    cs.free[:] = [0, 1, 7]
    assert has(cs, plans) is None


def test_has_passes_a_plan_topology_awareness_will_not_split():
    cs = _cluster([(4, 40), (4, 40), (8, 24)], free=[2, 2, 8])
    plans = [(4, 32 * GB), (8, 20 * GB)]
    # 4 x 40 GB are free, but only split over two nodes: the next plan is taken
    assert has(cs, plans) == (1, ((2, 8),))
    assert has(cs, plans, keep_in_node=False) == (0, ((0, 2), (1, 2)))


def _spread_by_argmax(free: np.ndarray, nodes: np.ndarray, n_gpus: int) -> tuple | None:
    """Frenzy's greedy spread as a loop: one argmax per node taken whole (the reference)."""
    f = free[nodes].astype(np.int64)
    if int(f.sum()) < n_gpus:
        return None
    out, need = [], n_gpus
    while need > 0:
        ok = np.flatnonzero(f >= need)
        if len(ok):
            j = ok[np.argmin(f[ok])]
            out.append((int(nodes[j]), need))
            break
        j = int(np.argmax(f))
        out.append((int(nodes[j]), int(f[j])))
        need -= int(f[j])
        f[j] = 0
    return tuple(sorted(out))


def test_greedy_spread_equals_one_argmax_per_node():
    # the nodes taken whole are found as a prefix of a stable sort, not by an argmax per node: the same
    # placement on random free counts — ties, busy nodes, mixed node sizes, nodes given out of order
    rng = np.random.default_rng(0)
    for _ in range(4000):
        n_nodes = int(rng.integers(1, 40))
        cap = rng.choice([4, 8], size=n_nodes + 5).astype(np.int64)
        free = np.minimum(rng.integers(0, 9, size=n_nodes + 5), cap) * (rng.random(n_nodes + 5) < 0.6)
        nodes = (
            np.sort(rng.permutation(n_nodes + 5)[:n_nodes])
            if rng.random() < 0.5
            else rng.permutation(n_nodes)
        )
        n = int(rng.integers(1, 80))
        got = best_fit(free, cap, nodes, n, keep_in_node=False)
        assert got == _spread_by_argmax(free, nodes, n), (free[nodes].tolist(), n)


def test_place_reads_a_types_nodes_as_a_view_or_a_copy_alike():
    # place() reads a type's free GPUs as a view when its nodes are consecutive, else by index: the same
    # placements as best_fit over the type's nodes that are up, for types laid out in blocks or interleaved
    rng = np.random.default_rng(1)
    for trial in range(600):
        n_nodes = int(rng.integers(2, 30))
        types = (
            sorted(rng.choice(["A", "B"], size=n_nodes))
            if trial % 2
            else list(rng.choice(["A", "B"], size=n_nodes))
        )
        sizes = rng.choice([4, 8], size=n_nodes)
        cs = ClusterState(
            [
                NodeInfo(i, f"n{i}", f"T{t}", int(k), 40 * GB)
                for i, (t, k) in enumerate(zip(types, sizes, strict=True))
            ]
        )
        cs.free[:] = np.minimum(rng.integers(0, 9, size=n_nodes), cs.capacity)
        cs.up[:] = rng.random(n_nodes) < 0.9
        for t in ("TA", "TB"):
            idx = cs.nodes_of_type(t)
            n, kin = int(rng.integers(1, 40)), bool(rng.random() < 0.5)
            want = best_fit(cs.free, cs.capacity, idx[cs.up[idx]], n, keep_in_node=kin) if len(idx) else None
            assert place(cs, ((t, n),), keep_in_node=kin) == want

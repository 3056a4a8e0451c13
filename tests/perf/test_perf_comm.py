"""Alpha-beta collectives and the measured, log-log interpolated CommTable."""

from __future__ import annotations

import math

import pytest

from tessera.hardware import get_gpu
from tessera.perf.comm import (
    Arrival,
    Collective,
    CommTable,
    Link,
    alpha_beta,
    comm_time,
    hierarchical_link,
    inter_node_link,
    intra_node_link,
)

L = Link("test", bandwidth_Bps=1e9, latency_s=1e-5)


def test_ring_formulas():
    nbytes = 8e8
    # all-reduce: 2(n-1) steps, 2(n-1)/n * bytes: n=4 -> 6 * 10us + 1.5 * 0.8 s
    assert alpha_beta("all_reduce", nbytes, 4, L) == pytest.approx(6e-5 + 1.2)
    # all-gather / reduce-scatter: (n-1) steps, (n-1)/n * bytes -> 3 * 10us + 0.6 s
    assert alpha_beta("all_gather", nbytes, 4, L) == pytest.approx(3e-5 + 0.6)
    assert alpha_beta("reduce_scatter", nbytes, 4, L) == pytest.approx(3e-5 + 0.6)
    assert alpha_beta("send_recv", nbytes, 2, L) == pytest.approx(1e-5 + 0.8)
    assert alpha_beta("all_reduce", nbytes, 1, L) == 0.0
    assert alpha_beta("all_reduce", 0, 8, L) == 0.0


def test_link_classes():
    assert intra_node_link(get_gpu("A100-80GB")).kind == "nvlink3"
    assert intra_node_link(get_gpu("T4")).kind == "pcie3"
    assert intra_node_link(get_gpu("cpu")).kind == "loopback"
    assert inter_node_link(25e9).kind == "infiniband"
    assert inter_node_link(6.25e9).kind == "ethernet"
    nv, pcie = intra_node_link(get_gpu("H100-80GB")), intra_node_link(get_gpu("T4"))
    assert alpha_beta("all_reduce", 1e8, 8, nv) < alpha_beta("all_reduce", 1e8, 8, pcie)
    assert nv.latency_s < inter_node_link(6.25e9).latency_s


def test_table_interpolates_in_log_log_and_falls_back_outside():
    t = CommTable()
    t.add_many(Collective.ALL_REDUCE, "test", 4, [(1e6, 1e-3), (1e8, 1e-1)])
    # geometric midpoint of sizes -> geometric midpoint of times
    assert t.time("all_reduce", 1e7, 4, L) == pytest.approx(1e-2)
    w = math.log(3e6 / 1e6) / math.log(100)
    assert t.lookup("all_reduce", "test", 4, 3e6) == pytest.approx(
        math.exp(math.log(1e-3) + w * math.log(100))
    )
    # exact points
    assert t.time("all_reduce", 1e8, 4, L) == pytest.approx(1e-1)
    # outside the range, other group sizes and other links: alpha-beta
    assert t.time("all_reduce", 1e9, 4, L) == pytest.approx(alpha_beta("all_reduce", 1e9, 4, L))
    assert t.time("all_reduce", 1e7, 8, L) == pytest.approx(alpha_beta("all_reduce", 1e7, 8, L))
    assert comm_time("all_reduce", 1e7, 4, L, None) == pytest.approx(alpha_beta("all_reduce", 1e7, 4, L))
    assert comm_time("all_reduce", 1e7, 4, L, t) == pytest.approx(1e-2)


def test_table_round_trip(tmp_path):
    t = CommTable()
    t.add_many("send_recv", "nvlink3", 2, [(1e3, 1e-5), (1e9, 4e-3)])
    path = tmp_path / "comm.json"
    t.save(path)
    assert CommTable.load(path).points == t.points
    with pytest.raises(ValueError):
        t.add("send_recv", "nvlink3", 2, 0, 1.0)


def test_late_arrival_points_are_their_own_and_fall_back_to_together(tmp_path):
    t = CommTable()
    t.add_many("all_reduce", "loopback", 2, [(1e3, 3e-3), (1e6, 4e-3)])
    # nothing measured for a late rank: it reads the together points
    assert t.lookup("all_reduce", "loopback", 2, 1e3, Arrival.LAST) == pytest.approx(3e-3)
    t.add_many("all_reduce", "loopback", 2, [(1e3, 2e-3), (1e6, 2.5e-3)], Arrival.LAST)
    assert t.lookup("all_reduce", "loopback", 2, 1e3, "last") == pytest.approx(2e-3)
    assert t.lookup("all_reduce", "loopback", 2, 1e3) == pytest.approx(3e-3)
    assert t.time("all_reduce", 1e6, 2, Link("loopback", 1e9, 1e-5), Arrival.LAST) == pytest.approx(2.5e-3)
    path = tmp_path / "comm.json"
    t.save(path)
    assert CommTable.load(path).points == t.points
    # a table saved before arrivals were measured: its rows were taken together
    old = '[{"collective": "all_reduce", "link": "loopback", "n": 2, "points": [[1000.0, 0.003]]}]'
    assert CommTable.from_json(old).lookup("all_reduce", "loopback", 2, 1e3, "together") == pytest.approx(
        3e-3
    )
    with pytest.raises(ValueError):
        t.add("all_reduce", "loopback", 2, 1e3, 1e-3, "early")


NVL = Link("nvlink3", bandwidth_Bps=300e9, latency_s=5e-6)
IB = Link("infiniband", bandwidth_Bps=200e9, latency_s=15e-6)


def _textbook(level_ranks: int, nbytes: float, bw: float, factor: float) -> float:
    """factor · (n−1)/n · bytes / bw: the bandwidth term of a ring at one level (2 for all-reduce)."""
    return factor * (level_ranks - 1) / level_ranks * nbytes / bw


@pytest.mark.parametrize("nodes", [2, 4, 16])
def test_hierarchical_all_reduce_is_the_textbook_sum_of_two_levels(nodes):
    """8 ranks per node on ``nodes`` nodes: 2(L−1)/L · bytes / intra + 2(N−1)/N · bytes / inter, plus the
    latency steps (ring inside, ring or tree between the nodes)."""
    link = hierarchical_link(IB, NVL, 8)
    nbytes = 1e9  # bandwidth-bound: the ring between nodes is faster than the tree
    n = 8 * nodes
    want = _textbook(8, nbytes, NVL.bandwidth_Bps, 2) + _textbook(nodes, nbytes, IB.bandwidth_Bps, 2)
    latency = 2 * 7 * NVL.latency_s + 2 * (nodes - 1) * IB.latency_s
    assert alpha_beta("all_reduce", nbytes, n, link) == pytest.approx(want + latency)
    for c in ("all_gather", "reduce_scatter"):
        want = _textbook(8, nbytes, NVL.bandwidth_Bps, 1) + _textbook(nodes, nbytes, IB.bandwidth_Bps, 1)
        # between the nodes: recursive halving / doubling's ⌈log2 N⌉ steps where fewer than the ring's N − 1
        latency = 7 * NVL.latency_s + min(nodes - 1, math.ceil(math.log2(nodes))) * IB.latency_s
        assert alpha_beta(c, nbytes, n, link) == pytest.approx(want + latency)


def test_hierarchical_latency_grows_with_log_of_nodes_for_small_messages():
    """A 1 KiB all-reduce across 512 nodes: the tree's 2⌈log2 N⌉ steps, not the ring's 2(N−1)."""
    link = hierarchical_link(IB, NVL, 8)
    small = 1024.0
    t = alpha_beta("all_reduce", small, 8 * 512, link)
    # 1 GB over 64 nodes: the ring's 126 latency steps outweigh its 1.6 % volume edge, the tree is taken
    big = 1e9
    ring = 2 * 63 * IB.latency_s + 2 * 63 / 64 * big / IB.bandwidth_Bps
    tree = 12 * IB.latency_s + 2 * big / IB.bandwidth_Bps
    inside = 2 * 7 * NVL.latency_s + 2 * 7 / 8 * big / NVL.bandwidth_Bps
    assert tree < ring
    assert alpha_beta("all_reduce", big, 8 * 64, link) == pytest.approx(inside + tree)
    intra = 2 * 7 * NVL.latency_s + 2 * 7 / 8 * small / NVL.bandwidth_Bps
    assert t == pytest.approx(intra + 18 * IB.latency_s + 2 * small / IB.bandwidth_Bps)
    flat = alpha_beta("all_reduce", small, 8 * 512, IB)
    assert t < flat / 50  # the flat ring pays 2(n−1) = 8190 latency steps


def test_hierarchical_degenerate_cases():
    link = hierarchical_link(IB, NVL, 8)
    # one node: only the intra level
    assert alpha_beta("all_reduce", 1e9, 8, link) == pytest.approx(alpha_beta("all_reduce", 1e9, 8, NVL))
    # one rank per node: only the network level, the flat ring's volume in log2(16) = 4 latency steps
    one = hierarchical_link(IB, NVL, 1)
    flat = alpha_beta("all_gather", 1e9, 16, IB)
    assert alpha_beta("all_gather", 1e9, 16, one) == pytest.approx(flat - (15 - 4) * IB.latency_s)
    # uneven spread (12 ranks, 8 per node): a flat ring on the network
    assert alpha_beta("all_reduce", 1e9, 12, link) == pytest.approx(alpha_beta("all_reduce", 1e9, 12, IB))
    # send/recv crosses the network once
    assert alpha_beta("send_recv", 1e9, 2, link) == pytest.approx(alpha_beta("send_recv", 1e9, 2, IB))
    with pytest.raises(ValueError, match="ranks_per_node"):
        Link("x", 1e9, 0.0, ranks_per_node=0)


def test_bucketed_reduce_scatter_latency_grows_with_log_of_nodes():
    """A 25 MiB ZeRO-2 bucket across 8 → 512 nodes: the per-bucket latency is ⌈log2 N⌉ network steps, so
    thousands of buckets do not add a term linear in the node count."""
    link = hierarchical_link(IB, NVL, 8)
    bucket = 25 * 2**20
    times = {nodes: alpha_beta("reduce_scatter", bucket, 8 * nodes, link) for nodes in (8, 64, 512)}
    bw = {nodes: (nodes - 1) / nodes * bucket / IB.bandwidth_Bps + 7 / 8 * bucket / NVL.bandwidth_Bps
          for nodes in times}  # fmt: skip
    for nodes, t in times.items():
        assert t - bw[nodes] == pytest.approx(7 * NVL.latency_s + math.ceil(math.log2(nodes)) * IB.latency_s)
    assert times[512] < 1.5 * times[8]
    ring_latency = 7 * NVL.latency_s + 511 * IB.latency_s  # what N − 1 ring steps would have cost
    assert times[512] < (bw[512] + ring_latency) / 10

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

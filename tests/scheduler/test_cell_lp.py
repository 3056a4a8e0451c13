"""The throughput LP over Cells (Crius's BestPerf for all jobs at once): hand-solved cases."""

from __future__ import annotations

import numpy as np

from tessera.scheduler.cell_lp import Group, round_shares, solve


def group(count: int, options: list[tuple[float, list[int]]], running: bool = False) -> Group:
    return Group(
        count, np.array([v for v, _ in options]), np.array([g for _, g in options], dtype=float), running
    )


def test_two_queued_jobs_share_four_gpus_rather_than_one_taking_them_all():
    # Cells on 1, 2, 4 GPUs worth 1.0, 1.9, 2.0: two jobs on two GPUs each (3.8) beat one on four (2.0)
    sol = solve([group(2, [(1.0, [1]), (1.9, [2]), (2.0, [4])])], np.array([4.0]))
    assert sol is not None and sol.counts == [[0, 2, 0]]


def test_running_jobs_keep_a_cell_and_trade_gpu_types_when_that_adds_throughput():
    # types (fast, slow), one GPU each; S runs on slow (1.0) and would make 2.5 on fast, L on fast (1.0) and
    # would make 0.9 on slow: both must keep some Cell, and swapping gives 3.4 > 2.0
    s = group(1, [(1.0, [0, 1]), (2.5, [1, 0])], running=True)
    big = group(1, [(1.0, [1, 0]), (0.9, [0, 1])], running=True)
    sol = solve([s, big], np.array([1.0, 1.0]))
    assert sol is not None and sol.counts == [[0, 1], [0, 1]]


def test_prices_are_what_one_more_gpu_of_a_type_adds():
    # three queued one-GPU jobs worth 1.0 each on two GPUs of type 0: one more GPU runs one more job (1.0); type
    # 1 is not wanted at all (0)
    sol = solve([group(3, [(1.0, [1, 0])])], np.array([2.0, 5.0]))
    assert sol is not None and sol.counts == [[2]]
    assert np.allclose(sol.prices, [1.0, 0.0])


def test_cells_larger_than_the_cluster_and_worthless_ones_are_never_chosen():
    sol = solve([group(1, [(9.0, [8]), (0.0, [1]), (1.0, [2])])], np.array([4.0]))
    assert sol is not None and sol.counts == [[0, 0, 1]]


def test_rounding_keeps_whole_parts_then_the_largest_remainders_within_the_count():
    assert round_shares(np.array([0.6, 0.4]), 1) == [1, 0]
    assert round_shares(np.array([1.7, 0.3]), 2) == [2, 0]
    assert round_shares(np.array([0.3, 0.1]), 1) == [0, 0]  # the LP's total rounds to none
    assert round_shares(np.array([2.0, 1.0]), 3) == [2, 1]

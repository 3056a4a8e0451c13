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


def _random_groups(rng: np.random.Generator, n_t: int = 3) -> list[Group]:
    groups = []
    for _ in range(int(rng.integers(3, 25))):
        k = int(rng.integers(1, 6))
        gpus = np.zeros((k, n_t))
        for i in range(k):
            gpus[i, int(rng.integers(n_t))] = float(2 ** rng.integers(0, 4))
        running = bool(rng.random() < 0.4)
        groups.append(Group(float(rng.integers(1, 9)), rng.random(k) * 3.0, gpus, running))
    return groups


def test_the_direct_highs_call_gives_linprogs_solution_bit_for_bit(monkeypatch):
    # the LP is handed to HiGHS as scipy's linprog hands it (same rows, options): the same vertex and duals
    from tessera.scheduler import cell_lp

    rng = np.random.default_rng(7)
    for _ in range(40):
        groups = _random_groups(rng)
        cap = rng.integers(4, 60, size=3).astype(float)
        direct = cell_lp.maximize(groups, cap)
        monkeypatch.setattr(cell_lp, "_h", None)  # the public linprog path
        via_linprog = cell_lp.maximize(groups, cap)
        monkeypatch.undo()
        assert (direct is None) == (via_linprog is None)
        if direct is not None and via_linprog is not None:
            assert np.array_equal(direct[0], via_linprog[0]) and np.array_equal(direct[1], via_linprog[1])


def test_when_every_groups_best_cell_fits_the_solver_is_skipped_with_the_same_answer(monkeypatch):
    from tessera.scheduler import cell_lp

    groups = [
        group(2, [(1.0, [1, 0]), (1.9, [2, 0]), (0.5, [0, 1])]),
        group(1, [(1.0, [0, 2]), (1.2, [2, 0])], running=True),
    ]
    cap = np.array([16.0, 16.0])
    fast = cell_lp.maximize(groups, cap)
    calls = []
    monkeypatch.setattr(cell_lp, "_unique_fit", lambda *a: calls.append(1))  # force the solver
    slow = cell_lp.maximize(groups, cap)
    assert calls and fast is not None and slow is not None
    assert np.allclose(fast[0], slow[0]) and np.array_equal(fast[1], slow[1])
    assert list(fast[0]) == [0.0, 2.0, 0.0, 0.0, 1.0] and not fast[1].any()
    # a tie for the best, or a capacity the best Cells exhaust, goes to the solver
    tie = [group(1, [(1.0, [1, 0]), (1.0, [0, 1])])]
    assert cell_lp._unique_fit(*_fit_args(tie, cap)) is None
    assert cell_lp._unique_fit(*_fit_args(groups, np.array([6.0, 16.0]))) is None


def _fit_args(groups: list[Group], cap: np.ndarray) -> tuple:
    sizes = np.array([len(g.values) for g in groups])
    values = np.concatenate([g.values for g in groups])
    gpus = np.vstack([g.gpus for g in groups])
    running = np.array([g.running for g in groups])
    ok = (gpus <= cap).all(axis=1) & ((values > 0) | running[np.repeat(np.arange(len(groups)), sizes)])
    return values, gpus, ok, sizes, np.array([g.count for g in groups], dtype=float), running, cap


def _check_optimum(groups: list[Group], cap: np.ndarray, x: np.ndarray, best: float) -> None:
    """``x`` is feasible (queued groups at most, running ones exactly their count; capacities) and worth ``best``."""
    values = np.concatenate([g.values for g in groups])
    gpus = np.vstack([g.gpus for g in groups])
    bounds = np.cumsum([0] + [len(g.values) for g in groups])
    for g, grp in enumerate(groups):
        used = x[bounds[g] : bounds[g + 1]].sum()
        assert used <= grp.count + 1e-6 and (not grp.running or used >= grp.count - 1e-6)
    assert (x >= -1e-9).all() and (gpus.T @ x <= cap + 1e-6).all()
    assert np.isclose(values @ x, best, rtol=1e-9, atol=1e-9)


def test_column_generation_finds_an_optimum_of_the_whole_lp(monkeypatch):
    # columns=True: the LP over a few options per group, grown by reduced cost until none would add — an optimum
    # of the whole LP (the same objective; where that is unique, the same x and prices up to the last bits)
    from tessera.scheduler import cell_lp

    models: list[int] = []  # columns HiGHS was given, per model
    runs: list[int] = []
    model, run = cell_lp._highs_model, cell_lp._run
    monkeypatch.setattr(cell_lp, "_highs_model", lambda *a: models.append(a[1].shape[1]) or model(*a))
    monkeypatch.setattr(cell_lp, "_run", lambda h: runs.append(1) or run(h))
    rng = np.random.default_rng(11)
    grew = 0
    for _ in range(60):
        groups = _random_groups(rng)
        cap = rng.integers(4, 60, size=3).astype(float)
        models.clear()
        whole = cell_lp.maximize(groups, cap)
        if not models:
            continue  # the solver was skipped (every best Cell fits)
        runs.clear()
        cols = cell_lp.maximize(groups, cap, columns=True, hint=rng.random(3))
        assert (whole is None) == (cols is None)
        if whole is None or cols is None:
            continue
        values = np.concatenate([g.values for g in groups])
        _check_optimum(groups, cap, cols[0], float(values @ whole[0]))
        assert (cols[1] >= 0).all()
        assert models[1] < models[0]  # column generation started from fewer columns than the whole LP
        grew += len(runs) > 1  # and priced more in, HiGHS going on from its basis
    assert grew >= 5


def test_the_matrix_built_column_by_column_is_scipys_canonical_csc():
    # constraint_matrix builds the CSC arrays HiGHS is handed directly: the same indptr, indices and data as
    # COO → CSC with duplicates summed and indices sorted (how it was built), queued and running groups mixed
    from scipy.sparse import csc_matrix

    from tessera.scheduler.cell_lp import constraint_matrix

    rng = np.random.default_rng(3)
    for _ in range(200):
        n_t, n_v = int(rng.integers(1, 7)), int(rng.integers(1, 60))
        n_ub_groups, n_eq_groups = int(rng.integers(0, 8)), int(rng.integers(0, 8))
        if n_ub_groups + n_eq_groups == 0:
            continue
        gpus = rng.choice([0.0, 0.0, 1.0, 2.0, 8.0, 0.5], size=(n_v, n_t))
        rows = np.concatenate([np.arange(n_ub_groups), n_ub_groups + n_t + np.arange(n_eq_groups)])
        group_row = rng.choice(rows, size=n_v)
        n_rows = n_ub_groups + n_t + n_eq_groups
        nz_v, nz_t = np.nonzero(gpus)
        want = csc_matrix(
            (
                np.concatenate([np.ones(n_v), gpus[nz_v, nz_t]]),
                (np.concatenate([group_row, n_ub_groups + nz_t]), np.concatenate([np.arange(n_v), nz_v])),
            ),
            shape=(n_rows, n_v),
        )
        want.sum_duplicates()
        want.sort_indices()
        got = constraint_matrix(group_row, gpus, n_ub_groups, n_rows)
        assert got.shape == want.shape
        assert np.array_equal(got.indptr, want.indptr)
        assert np.array_equal(got.indices, want.indices)
        assert np.array_equal(got.data, want.data)

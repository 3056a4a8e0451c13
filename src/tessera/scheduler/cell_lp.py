"""The cluster-throughput LP over Cells: Crius's BestPerf (§6, Algorithm 1 line 18) solved for all jobs at once.

Crius picks, among the scheduling choices of a job, the one of maximum cluster throughput, and notes that
"techniques based on solvers could also be applied to enhance Crius" (§6). This module is that solver. Every
group of interchangeable jobs has options — Cells, each with a value (normalized throughput, less the restart a
rescale would cost) and the GPUs it holds per type. The LP relaxation

    maximize   Σ_g Σ_c value[g, c] · x[g, c]
    subject to Σ_c x[g, c] ≤ count[g]          (queued jobs: at most one Cell per member)
               Σ_c x[g, c] = count[g]          (running jobs: each keeps some Cell — suspending is not the LP's call)
               Σ_g Σ_c gpus[c, t] · x[g, c] ≤ capacity[t]   for every GPU type t
               x ≥ 0

is a multiple-choice knapsack relaxation: at an optimal vertex only a few choices stay fractional (about one per
GPU type), so rounding changes the outcome of a few jobs in hundreds. Its duals are per-type *shadow prices* of
GPUs — what one more GPU of each type would add — which rank how much a change is worth to the cluster.
Solved with scipy's HiGHS; the matrix is built with numpy (a round has thousands of options).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import csc_matrix

try:  # scipy's own HiGHS binding (what linprog calls); absent in some builds: then linprog itself
    import scipy.optimize._highspy._core as _h
    from scipy.optimize._highspy._core import simplex_constants as _sc

    _simplex_dual = _sc.SimplexStrategy.kSimplexStrategyDual
except ImportError:  # pragma: no cover
    _h = None


@dataclass(frozen=True)
class Group:
    """Interchangeable jobs: how many, their options' values ``(k,)`` and GPUs per option and type ``(k, T)`` (the
    solver's type order), and whether they are running (each must keep one option)."""

    count: float
    values: np.ndarray
    gpus: np.ndarray
    running: bool = False


@dataclass(frozen=True)
class Solution:
    """Per group, the LP's (fractional) members per option and their rounding (integers, Σ ≤ count), and the
    price per GPU of each type."""

    shares: list[np.ndarray]
    counts: list[list[int]]
    prices: np.ndarray


def solve(
    groups: Sequence[Group],
    capacity: np.ndarray,
    *,
    columns: bool = False,
    hint: np.ndarray | None = None,
) -> Solution | None:
    """The LP of the module doc over GPU types of ``capacity`` ``(T,)``, rounded (:func:`round_shares`); None when
    it cannot be solved (the running jobs alone no longer fit: the caller changes nothing). ``columns`` and
    ``hint``: see :func:`maximize`."""
    sizes = np.fromiter((len(g.values) for g in groups), dtype=np.int64, count=len(groups))
    n_t = len(capacity)
    if len(groups) == 0 or sizes.sum() == 0:
        return _empty(sizes, n_t)
    found = maximize(groups, capacity, columns=columns, hint=hint)
    if found is None:
        return None
    x, prices = found
    # group bounds as Python ints: the per-group loops below index them hundreds of times a round
    bounds = [0, *np.cumsum(sizes).tolist()]
    shares = [x[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]
    # whole parts at once; only the groups with a fractional share (a few at a vertex) need the remainders
    whole = np.floor(x + 1e-6)
    frac = (x - whole) > 1e-6
    owner = np.repeat(np.arange(len(groups)), sizes)
    has_frac = (np.bincount(owner[frac], minlength=len(groups)) > 0).tolist()
    whole_i = whole.astype(np.int64).tolist()
    counts = [
        round_shares(sh, int(grp.count)) if has_frac[g] else whole_i[bounds[g] : bounds[g + 1]]
        for g, (sh, grp) in enumerate(zip(shares, groups, strict=True))
    ]
    return Solution(shares, counts, prices)


def maximize(
    groups: Sequence[Group],
    capacity: np.ndarray,
    *,
    columns: bool = False,
    hint: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray] | None:
    """The LP alone: its optimal x over all groups' options in order, and the per-type prices; None when HiGHS
    finds no optimum. ``count`` may be fractional (an amount of work rather than of jobs).

    When every group's best option (strictly best, worth something) fits the capacity with room to spare, that
    choice is the LP's only optimum and its prices are zero (every capacity row is slack), so HiGHS is not asked
    (a quiet round at scale: most groups' best Cells fit).

    ``columns``: solve the LP by column generation (:func:`_by_columns`, seeded by each group's best options at
    zero and at ``hint`` prices, e.g. the last round's; HiGHS goes on from its basis as options are priced in) —
    about 5x faster on the LPs of 12,800 GPUs, where a round has thousands of options of which a few hundred
    matter. It finds an optimum of the same LP (the same objective
    value), but where the optimum is not unique (ties, degenerate vertices) possibly another vertex or other
    prices than HiGHS on the whole LP, and its figures may differ in the last bits (another factorization) — so a
    policy's decisions may change: off by default."""
    n_g, n_t = len(groups), len(capacity)
    sizes = np.fromiter((len(g.values) for g in groups), dtype=np.int64, count=n_g)
    values = np.concatenate([g.values for g in groups], dtype=np.float64)
    gpus = np.concatenate(
        [g.gpus if g.gpus.ndim == 2 else g.gpus.reshape(-1, n_t) for g in groups], dtype=np.float64
    )
    owner = np.repeat(np.arange(n_g), sizes)
    running = np.fromiter((g.running for g in groups), dtype=bool, count=n_g)
    count = np.fromiter((float(g.count) for g in groups), dtype=np.float64, count=n_g)
    # options worth nothing (queued) or needing more of a type than there is never enter
    ok = (gpus <= capacity + 1e-9).all(axis=1) & ((values > 0) | running[owner])
    x = np.zeros(len(values))
    live = np.flatnonzero(ok)
    n_v = len(live)
    if n_v == 0:
        return x, np.zeros(n_t)
    best = _unique_fit(values, gpus, ok, sizes, count, running, capacity)
    if best is not None:
        return best, np.zeros(n_t)
    # rows: the queued groups' "at most count" and the capacities (<=), then the running groups' "= count"
    # — the order and form scipy's linprog(A_ub, A_eq) hands HiGHS, so the solve is the same one
    ub_groups = np.flatnonzero(~running)
    row_of = np.empty(n_g, dtype=np.int64)
    row_of[ub_groups] = np.arange(len(ub_groups))
    eq_groups = np.flatnonzero(running)
    row_of[eq_groups] = len(ub_groups) + n_t + np.arange(len(eq_groups))
    n_ub = len(ub_groups) + n_t
    g_live = gpus[live]
    a = constraint_matrix(row_of[owner[live]], g_live, len(ub_groups), n_ub + len(eq_groups))
    rhs = np.concatenate([count[ub_groups], capacity, count[eq_groups]]).astype(np.float64)
    lhs = np.concatenate([np.full(n_ub, -np.inf), count[eq_groups]]).astype(np.float64)
    cost = -values[live]
    found = None
    if columns and _h is not None:
        # a few options per group: the best at zero prices and at the hint, and a running group's held one
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        held = np.zeros(len(values), dtype=bool)
        held[starts[running & (sizes > 0)]] = True
        seed = held[live] | _group_argmax(-cost, owner[live])
        if hint is not None and len(hint) == n_t:
            seed |= _group_argmax(-cost - g_live @ np.asarray(hint, dtype=np.float64), owner[live])
        found = _by_columns(cost, a, lhs, rhs, seed, row_of[owner[live]], g_live, slice(len(ub_groups), n_ub))
    if found is None:
        found = _highs(-values[live], a, lhs, rhs)
    if found is None:
        return None
    x[live] = found[0]
    return x, np.maximum(0.0, -found[1][len(ub_groups) : n_ub])


def constraint_matrix(group_row: np.ndarray, gpus: np.ndarray, type_row: int, n_rows: int) -> csc_matrix:
    """The LP's matrix, a column per option: 1 in its group's row (``group_row``), its GPUs ``(n, T)`` in the
    type rows ``type_row`` … ``type_row + T - 1``; row indices ascending in each column. Built directly in
    that canonical form — what COO → CSC with duplicates summed (there are none) and indices sorted gives, the
    same arrays HiGHS is handed — since scipy's conversions, each checking and copying, cost a millisecond a
    round at scale."""
    n_v = len(group_row)
    nz_v, nz_t = np.nonzero(gpus)  # row-major: per option its types ascending
    indptr = np.zeros(n_v + 1, dtype=np.int32)
    np.cumsum(np.bincount(nz_v, minlength=n_v) + 1, out=indptr[1:])
    # the group's entry is first in its column when its row is above the type rows (queued), else last
    at = np.where(group_row < type_row, indptr[:-1], indptr[1:] - 1)
    types = np.ones(int(indptr[-1]), dtype=bool)
    types[at] = False
    indices = np.empty(len(types), dtype=np.int32)
    indices[at] = group_row
    indices[types] = type_row + nz_t
    data = np.empty(len(types))
    data[at] = 1.0
    data[types] = gpus[nz_v, nz_t]
    return csc_matrix((data, indices, indptr), shape=(n_rows, n_v))


def _group_argmax(score: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """A mask of each owner's first option of the highest score (``owner`` non-decreasing)."""
    order = np.lexsort((-score, owner))
    first = np.ones(len(order), dtype=bool)
    first[1:] = owner[order][1:] != owner[order][:-1]
    out = np.zeros(len(score), dtype=bool)
    out[order[first]] = True
    return out


def _by_columns(
    cost: np.ndarray,
    a: csc_matrix,
    lhs: np.ndarray,
    rhs: np.ndarray,
    seed: np.ndarray,
    row: np.ndarray,
    gpus: np.ndarray,
    cap_rows: slice,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Column generation (minimizing ``cost``): solve the LP over the columns in ``seed`` (every row kept), add the
    columns whose reduced cost at its duals is negative (HiGHS goes on from the basis it holds), and repeat until
    none is — then its x (over all columns) and row duals are an optimum of the whole LP. None when the restricted LP has no optimum (the caller solves
    the whole LP). ``row``: each column's group row; ``gpus``: each column's GPUs per type, the rows ``cap_rows``."""
    order = np.flatnonzero(seed)  # the columns HiGHS holds, in its order
    highs = _highs_model(cost[order], a[:, order], lhs, rhs)
    if highs is None:
        return None
    sel = seed.copy()
    while True:
        got = _run(highs)
        if got is None:
            return None
        xs, y = got
        d = cost - y[row] - gpus @ y[cap_rows]  # reduced costs of all columns
        add = np.flatnonzero((d < -1e-9) & ~sel)
        if len(add) == 0:
            break
        sel[add] = True
        order = np.concatenate([order, add])
        new = a[:, add]  # priced in: HiGHS goes on from its basis
        n = len(add)
        if (
            highs.addCols(n, cost[add], np.zeros(n), np.full(n, _h.kHighsInf), new.nnz,
                          new.indptr[:-1].astype(np.int32), new.indices.astype(np.int32), new.data)
            == _h.HighsStatus.kError
        ):  # fmt: skip
            return None
    x = np.zeros(len(cost))
    x[order] = xs
    return x, y


def _unique_fit(
    values: np.ndarray,
    gpus: np.ndarray,
    ok: np.ndarray,
    sizes: np.ndarray,
    count: np.ndarray,
    running: np.ndarray,
    capacity: np.ndarray,
) -> np.ndarray | None:
    """x with every group's whole count on its strictly best entering option, when those fit strictly within
    every capacity (then it is the only optimum: any other solution moves some count to a worse option or
    leaves a queued member out, and the slack capacity rows price at zero); None otherwise."""
    n_g = len(sizes)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    v = np.where(ok, values, -np.inf)
    nonempty = sizes > 0
    top = np.full(n_g, -np.inf)
    top[nonempty] = np.maximum.reduceat(v, starts[nonempty])
    owner = np.repeat(np.arange(n_g), sizes)
    is_top = (v == top[owner]) & np.isfinite(v)
    n_top = np.bincount(owner, weights=is_top, minlength=n_g)
    # a running group with nothing that enters (or a tie for the best) is the solver's to settle
    if (n_top[running] != 1).any() or (n_top > 1).any():
        return None
    pick = np.flatnonzero(is_top)
    x = np.zeros(len(values))
    x[pick] = count[owner[pick]]
    use = (gpus[pick] * count[owner[pick], None]).sum(axis=0)
    if not (use < capacity - 1e-6).all():
        return None
    return x


def _highs(
    cost: np.ndarray, a: csc_matrix, lhs: np.ndarray, rhs: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """Minimize ``cost`` · x over lhs <= a x <= rhs, x >= 0 with HiGHS's dual simplex: the primal x and the row
    duals, or None without an optimum. HiGHS is called as scipy's ``linprog(method="highs")`` calls it (the same
    options, so the same vertex) without the wrapper's per-column Python loops, which at thousands of options cost
    as much as the solve; scipy's ``linprog`` when its HiGHS binding is not there."""
    if _h is None:
        return _linprog(cost, a, lhs, rhs)
    highs = _highs_model(cost, a, lhs, rhs)
    return None if highs is None else _run(highs)


def _highs_model(cost: np.ndarray, a: csc_matrix, lhs: np.ndarray, rhs: np.ndarray) -> object | None:
    """HiGHS with the LP of :func:`_highs` passed and its options set (None when it refuses them). The model
    goes in as arrays in one call (HiGHS's ``passModel`` by pointers: the same LP, copied from the buffers)
    rather than through ``HighsLp``'s fields, whose setters convert element by element: at 12,800 GPUs that
    was a millisecond or more a round."""
    n_r, n_c = a.shape
    highs = _h._Highs()
    if highs.passOptions(_options()) == _h.HighsStatus.kError:
        return None
    status = highs.passModel(
        n_c,
        n_r,
        int(a.indptr[-1]),
        int(_h.MatrixFormat.kColwise),
        int(_h.ObjSense.kMinimize),
        0.0,
        np.ascontiguousarray(cost, dtype=np.float64),
        np.zeros(n_c),
        np.full(n_c, _h.kHighsInf),
        np.where(np.isinf(lhs), -_h.kHighsInf, lhs).astype(np.float64),
        np.where(np.isinf(rhs), _h.kHighsInf, rhs).astype(np.float64),
        np.ascontiguousarray(a.indptr, dtype=np.int32),
        np.ascontiguousarray(a.indices, dtype=np.int32),
        np.ascontiguousarray(a.data, dtype=np.float64),
        np.zeros(n_c, dtype=np.int32),  # every column continuous: an LP
    )
    return None if status == _h.HighsStatus.kError else highs


@cache
def _options() -> object:
    """HiGHS's options as scipy's ``linprog(method="highs")`` sets them (dual simplex; quiet), made once: each
    model copies them in."""
    opts = _h.HighsOptions()
    opts.presolve = "on"
    opts.highs_debug_level = _h.HighsDebugLevel.kHighsDebugLevelNone
    opts.log_to_console = False
    opts.output_flag = False
    opts.simplex_strategy = _simplex_dual
    return opts


def _run(highs: object) -> tuple[np.ndarray, np.ndarray] | None:
    """Solve (from the basis HiGHS holds, if any): the primal x and the row duals, or None without an optimum."""
    if highs.run() == _h.HighsStatus.kError or highs.getModelStatus() != _h.HighsModelStatus.kOptimal:
        return None
    sol = highs.getSolution()
    return np.array(sol.col_value), np.array(sol.row_dual)


def _linprog(
    cost: np.ndarray, a: csc_matrix, lhs: np.ndarray, rhs: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`_highs` through scipy's public ``linprog`` (rows with lhs == rhs as equalities)."""
    eq = lhs == rhs
    a = a.tocsr()
    res = linprog(
        cost,
        A_ub=a[~eq],
        b_ub=rhs[~eq],
        A_eq=a[eq] if eq.any() else None,
        b_eq=rhs[eq] if eq.any() else None,
        bounds=(0, None),
        method="highs",
    )
    if res.status != 0 or res.x is None:
        return None
    duals = np.empty(len(rhs))
    duals[~eq] = res.ineqlin.marginals
    if eq.any():
        duals[eq] = res.eqlin.marginals
    return np.asarray(res.x), duals


def _empty(sizes: np.ndarray, n_t: int) -> Solution:
    return Solution([np.zeros(int(k)) for k in sizes], [[0] * int(k) for k in sizes], np.zeros(n_t))


def round_shares(shares: np.ndarray, count: int) -> list[int]:
    """Integer members per option from the LP's fractional shares: the whole parts, then the largest remainders
    while the total stays within ``count`` and the LP's total rounded half up."""
    whole = np.floor(shares + 1e-6)
    rest = shares - whole
    total = min(count, math.floor(float(shares.sum()) + 0.5))
    short = int(total - whole.sum())
    if short > 0:
        for o in np.argsort(-rest, kind="stable")[:short]:
            if rest[o] > 1e-6:
                whole[o] += 1
    return [int(v) for v in whole]


__all__ = ["Group", "Solution", "constraint_matrix", "maximize", "round_shares", "solve"]

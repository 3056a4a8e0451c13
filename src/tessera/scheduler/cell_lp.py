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

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import csr_matrix


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


def solve(groups: Sequence[Group], capacity: np.ndarray) -> Solution | None:
    """The LP of the module doc over GPU types of ``capacity`` ``(T,)``, rounded (:func:`round_shares`); None when
    it cannot be solved (the running jobs alone no longer fit: the caller changes nothing)."""
    sizes = np.array([len(g.values) for g in groups], dtype=np.int64)
    n_t = len(capacity)
    if len(groups) == 0 or sizes.sum() == 0:
        return _empty(sizes, n_t)
    found = maximize(groups, capacity)
    if found is None:
        return None
    x, prices = found
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    shares = [x[bounds[g] : bounds[g + 1]] for g in range(len(groups))]
    counts = [round_shares(sh, int(grp.count)) for sh, grp in zip(shares, groups, strict=True)]
    return Solution(shares, counts, prices)


def maximize(groups: Sequence[Group], capacity: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The LP alone: its optimal x over all groups' options in order, and the per-type prices; None when HiGHS
    finds no optimum. ``count`` may be fractional (an amount of work rather than of jobs)."""
    n_g, n_t = len(groups), len(capacity)
    sizes = np.array([len(g.values) for g in groups], dtype=np.int64)
    values = np.concatenate([g.values for g in groups]).astype(np.float64)
    gpus = np.vstack([g.gpus.reshape(-1, n_t) for g in groups]).astype(np.float64)
    owner = np.repeat(np.arange(n_g), sizes)
    running = np.array([g.running for g in groups], dtype=bool)
    # options worth nothing (queued) or needing more of a type than there is never enter
    live = np.flatnonzero((gpus <= capacity + 1e-9).all(axis=1) & ((values > 0) | running[owner]))
    x = np.zeros(len(values))
    n_v = len(live)
    if n_v == 0:
        return x, np.zeros(n_t)
    g_rows = owner[live]
    nz_v, nz_t = np.nonzero(gpus[live])
    a = csr_matrix(
        (
            np.concatenate([np.ones(n_v), gpus[live][nz_v, nz_t]]),
            (np.concatenate([g_rows, n_g + nz_t]), np.concatenate([np.arange(n_v), nz_v])),
        ),
        shape=(n_g + n_t, n_v),
    )
    count = np.array([float(g.count) for g in groups])
    ub = np.concatenate([np.flatnonzero(~running), n_g + np.arange(n_t)])
    eq = np.flatnonzero(running)
    res = linprog(
        -values[live],
        A_ub=a[ub],
        b_ub=np.concatenate([count[~running], capacity]),
        A_eq=a[eq] if len(eq) else None,
        b_eq=count[running] if len(eq) else None,
        bounds=(0, None),
        method="highs",
    )
    if res.status != 0 or res.x is None:
        return None
    x[live] = res.x
    return x, np.maximum(0.0, -np.asarray(res.ineqlin.marginals)[-n_t:])


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


__all__ = ["Group", "Solution", "maximize", "round_shares", "solve"]

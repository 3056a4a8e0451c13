"""The tessera policy's LP values of running groups, figured for all groups in one numpy pass
(``lp._move_values``), equal to the last bit what one group at a time gives (as ``_lp_group`` did)."""

from __future__ import annotations

import numpy as np

from tessera.scheduler.policies.tessera.lp import _move_values


def _one_group(held: float, work: float, restart: float, relaunch: float, w: float, norm: np.ndarray,
               rate: np.ndarray, fresh: np.ndarray):  # fmt: skip
    left = work / rate
    values = np.empty(len(norm) + 1)
    values[0] = held
    values[1:] = norm * left / (np.where(fresh, relaunch, restart) + left)
    values *= w
    return values


def test_values_of_all_running_groups_at_once_equal_one_group_at_a_time_bit_for_bit():
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(1, 12))
        norms = [rng.random(int(rng.integers(0, 9))) * 3 for _ in range(n)]
        rates = [rng.random(len(x)) * 50 + 1e-3 for x in norms]
        fresh = [rng.random(len(x)) < 0.5 for x in norms]  # Cells that keep no worker: the relaunch applies
        scalars = np.array([rng.random(5) * [2.0, 1e6, 600.0, 900.0, 11.0] for _ in range(n)])
        got = _move_values(norms, rates, fresh, scalars.T)
        want = np.concatenate(
            [_one_group(*s, x, r, f) for s, x, r, f in zip(scalars, norms, rates, fresh, strict=True)]
        )
        assert got.tobytes() == want.tobytes()

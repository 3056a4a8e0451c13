"""The fast table path (exact bottleneck-bound assembly, memory priced in bulk) gives the planner's figures."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tessera.hardware import get_cluster
from tessera.scheduler import speed
from tessera.scheduler.knowledge import PerfTable
from tessera.scheduler.speed import SpeedSource, _min_combination, table_digest, warm_config
from tessera.scheduler.state import default_config

CLUSTER = get_cluster("crius-sim-1280")


def _brute(t, sync, p2p, mask, B):
    best = None
    for combo in itertools.product(*[np.flatnonzero(m) for m in mask]):
        T = [t[s][j] for s, j in enumerate(combo)]
        v = sum(T) + (B - 1) * max(T) + max(sync[s][j] for s, j in enumerate(combo))
        v += sum(2.0 * p2p[s][combo[s], combo[s + 1]] for s in range(len(combo) - 1))
        if best is None or v < best[0]:
            best = (v, list(combo))
    return best


@pytest.mark.parametrize("seed", range(30))
def test_min_combination_is_the_enumerated_minimum(seed):
    rng = np.random.default_rng(seed)
    S = int(rng.integers(1, 6))
    n = [int(rng.integers(1, 5)) for _ in range(S)]
    t = [rng.uniform(0.1, 1.0, k) for k in n]
    sync = [rng.uniform(0.0, 0.5, k) for k in n]
    p2p = [rng.uniform(0.0, 0.1, (n[s], n[s + 1])) for s in range(S - 1)]
    mask = [rng.random(k) < 0.7 for k in n]
    B = int(rng.integers(1, 16))
    got = _min_combination(t, sync, p2p, mask, B)
    want = _brute(t, sync, p2p, mask, B) if all(m.any() for m in mask) else None
    if want is None:
        assert got is None
    else:
        assert got is not None and got[0] == pytest.approx(want[0], rel=1e-12)
        assert all(mask[s][j] for s, j in enumerate(got[1]))


def _grid_figures(fast: bool, config, max_gpus: int) -> dict:
    src = SpeedSource(CLUSTER, fast=fast)
    if fast:
        return warm_config(CLUSTER, config, src.capacity, max_gpus=max_gpus, source=src)
    table = PerfTable(src, src.capacity)
    table.warm([config], max_gpus=max_gpus)
    return table.export(config)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("model,batch", [("wrn-0.5b", 256), ("bert-1.3b", 128), ("moe-1.3b", 256)])
def test_fast_tables_match_the_planner(model, batch, monkeypatch):
    """Every GPU type of crius-sim-1280 (A100, A40, A10, V100), alone and mixed, 1–8 GPUs: Cell, DP-only and
    tuned rates of the fast path equal the planner's within 1e-6 (the bound program on every space, however
    small: the planner enumerates them)."""
    monkeypatch.setattr(speed, "_SMALL_ENUMERATION", 0)
    config = default_config(model, batch)
    fast, slow = _grid_figures(True, config, 8), _grid_figures(False, config, 8)
    for kind in ("cell", "dp", "true"):
        a = {repr(x[:-1]): x[-1] for x in fast[kind]}
        b = {repr(x[:-1]): x[-1] for x in slow[kind]}
        assert a.keys() == b.keys(), kind
        for k in a:
            assert a[k] == pytest.approx(b[k], rel=1e-6, abs=1e-12), (kind, k)
    types = {g[0][0] for g, _ in fast["true"]}
    assert types == {"A100-40GB", "A40", "A10", "V100-32GB"}
    assert any(r > 0 for _, r in fast["true"])


def test_table_cache_is_shared_by_presets_of_the_same_node_shapes():
    small, big = get_cluster("crius-sim-1280"), get_cluster("crius-sim-12800")
    kw = dict(max_gpus=64, mixes=True, tuned_cells=2)
    assert table_digest(small, **kw) == table_digest(big, **kw)
    assert table_digest(small, **kw) != table_digest(get_cluster("sia-sim-64"), **kw)
    assert table_digest(small, **kw) != table_digest(small, **{**kw, "max_gpus": 32})


@pytest.mark.timeout(600)
def test_warm_grid_prices_later_rungs_only_where_the_first_overflows():
    """The bulk memory call prices every rung of a Cell whose DP-only option overflows on the first
    (its estimate walks on) and only the first rung of one where it fits; the estimates are those of an
    estimator that priced nothing in bulk."""
    from tessera.planning.cells import CellShape

    cases = [
        (("bert-6.7b", 512), CellShape.of({"A100-40GB": 2}, 1)),
        (("wrn-0.5b", 256), CellShape.of({"A100-40GB": 8}, 1)),
    ]
    for (model, batch), shape in cases:
        config = default_config(model, batch)
        warm = SpeedSource(CLUSTER)._get(config).estimator
        cold = SpeedSource(CLUSTER)._get(config).estimator
        warm.warm_grid([shape])
        rungs = {key[1] for key in warm._spaces if key[0] == shape}
        overflows = warm.overflows_first(shape)
        assert rungs == (set(warm.rungs) if overflows else {warm.rungs[0]}), (model, overflows)
        a, b = warm.estimate(shape), cold.estimate(shape)
        assert a is not None and b is not None
        assert (a.plan, a.iteration_time_s, a.feasible) == (b.plan, b.iteration_time_s, b.feasible)
    assert SpeedSource(CLUSTER)._get(default_config("bert-6.7b", 512)).estimator.overflows_first(cases[0][1])
    assert (
        not SpeedSource(CLUSTER)._get(default_config("wrn-0.5b", 256)).estimator.overflows_first(cases[1][1])
    )

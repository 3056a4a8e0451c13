"""Layer times kept across stage costs (stage_cost's ``memo``, shared by a CellEstimator's spaces) change no
figure: every stage option priced with a shared memo equals the same option priced alone."""

from __future__ import annotations

import copy

from tessera.hardware import get_cluster
from tessera.models.zoo import get_spec
from tessera.perf.estimate import stage_cost
from tessera.planning.cells import CellEstimator, CellShape
from tessera.planning.space import TrainSettings


def _estimator(model: str, batch: int) -> CellEstimator:
    spec = copy.deepcopy(get_spec(model))
    settings = TrainSettings(model=model, global_batch=batch, seq_len=spec.seq_len, precision="fp16")
    return CellEstimator(spec, settings, get_cluster("crius-sim-1280"))


def test_shared_memo_equals_no_memo():
    est = _estimator("llama2-7b", 64)
    shapes = [CellShape.of({"A100-40GB": 4, "A10": 4}, 2), CellShape.of({"A40": 8}, 4),
              CellShape.of({"V100-32GB": 8, "A10": 8}, 1)]  # fmt: skip
    priced = 0
    for shape in shapes:
        assert est.estimate(shape) is not None
    assert est._times  # the estimator's spaces filled the shared memo
    for space in est._spaces.values():
        for (s, j), cached in space._costs.items():
            alone = stage_cost(space._carrier(s, j), est.spec, s, est.topo, est.cost,
                               headroom_fraction=space.headroom_fraction)  # fmt: skip
            assert cached == alone
            priced += 1
    assert priced > 20


def test_memo_across_estimators_equals_fresh_ones():
    a = _estimator("gpt3-2.7b", 128)
    shapes = [CellShape.of({"A100-40GB": 8}, 2), CellShape.of({"A40": 4, "A10": 4}, 2)]
    warm = [a.estimate(s) for s in shapes]
    cold = [_estimator("gpt3-2.7b", 128).estimate(s) for s in shapes]
    assert [(c.iteration_time_s, c.plan, c.estimate) for c in warm] == [
        (c.iteration_time_s, c.plan, c.estimate) for c in cold
    ]

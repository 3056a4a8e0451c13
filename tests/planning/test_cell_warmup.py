"""Pricing several memory-setting tries of a Cell in one formula call changes no Cell."""

from __future__ import annotations

import copy

from tessera.hardware import get_cluster
from tessera.models.zoo import get_spec
from tessera.planning.cells import CellEstimator, job_shapes
from tessera.planning.space import TrainSettings


def _cells(model, batch, base, warm):
    cluster = get_cluster("crius-sim-1280")
    spec = copy.deepcopy(get_spec(model))  # a new spec: cold memory memo
    settings = TrainSettings(model=model, global_batch=batch, seq_len=spec.seq_len, precision="fp16")
    est = CellEstimator(spec, settings, cluster)
    if not warm:
        est._warm = lambda shape, tries: None  # type: ignore[method-assign]
    cells = est.estimate_many(job_shapes(spec, settings, cluster.gpu_counts(), base_count=base))
    return [(c.label, c.iteration_time_s, c.feasible, c.favour, c.plan, c.estimate) for c in cells]


def test_warmed_cells_equal_cold_ones():
    base = {"A100-40GB": 2, "A10": 4}
    assert _cells("gpt3-2.7b", 128, base, True) == _cells("gpt3-2.7b", 128, base, False)

"""Workload synthesis: model by GPU-time bucket, requested GPUs from memory, work from the trace duration."""

from __future__ import annotations

import pytest

from tessera.scheduler.knowledge import SyntheticModel, synthetic_table
from tessera.sim.trace import Trace, TraceJob
from tessera.sim.workload import WorkloadSpec, build_jobs

A100, A10 = "A100-40GB", "A10"


def _table():
    models = {
        ("tiny", 8): SyntheticModel(memory_gib=10),
        ("huge", 8): SyntheticModel(memory_gib=150),  # 4 A100 (40 GiB) or 8 A10 (24 GiB)
    }
    return synthetic_table(models, {A100: 16, A10: 16})


SPEC = WorkloadSpec(
    seed=3, size_classes=(("tiny",), ("huge",)), bucket_hours=(10.0,), batches={"tiny": (8,), "huge": (8,)}
)


def _trace(rows):
    return Trace(tuple(TraceJob(str(i), s, d, g, i + 2) for i, (s, d, g) in enumerate(rows)))


def test_bucket_picks_model_and_memory_raises_the_request():
    tr = _trace([(0, 3600, 1), (10, 3600 * 20, 1), (20, 600, 2)])
    jobs = build_jobs(tr, _table(), SPEC)
    assert [j.model for j in jobs] == ["tiny", "huge", "tiny"]
    huge = jobs[1]
    assert huge.requested_gpus == (4 if huge.requested_type == A100 else 8)
    assert jobs[2].requested_gpus == 2  # the trace's count when the model fits it


def test_work_reproduces_the_trace_duration_on_the_request():
    table = _table()
    tr = _trace([(0, 5000, 3)])  # 3 GPUs → a request of 4
    (j,) = build_jobs(tr, table, SPEC)
    assert j.requested_gpus == 4
    assert j.total_iterations / table.true_rate(j, j.requested) == pytest.approx(5000)


def test_seeded_and_deadlines_follow_elasticflow():
    tr = _trace([(i * 10.0, 1000.0 + i, 1) for i in range(50)])
    spec = WorkloadSpec(seed=1, size_classes=SPEC.size_classes, bucket_hours=SPEC.bucket_hours,
                        batches=SPEC.batches, deadlines=True)  # fmt: skip
    a, b = build_jobs(tr, _table(), spec), build_jobs(tr, _table(), spec)
    assert a == b
    types = {j.requested_type for j in a}
    assert types == {A100, A10}  # drawn in proportion to capacity (16 and 16)
    for j, t in zip(a, tr.jobs, strict=True):
        assert 0.5 * t.duration_s <= j.deadline_s - j.arrival_s <= 1.5 * t.duration_s


def test_a_model_that_fits_nowhere_is_an_error_naming_the_line():
    table = synthetic_table({("x", 8): SyntheticModel(memory_gib=10_000)}, {A100: 8})
    spec = WorkloadSpec(size_classes=(("x",),), bucket_hours=(), batches={"x": (8,)})
    with pytest.raises(ValueError, match="trace line 2: x"):
        build_jobs(_trace([(0, 100, 1)]), table, spec)

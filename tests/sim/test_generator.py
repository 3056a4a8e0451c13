"""The workload generator: seeded, its knobs visible in what it generates, and runnable end to end."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.sim.generator import FAMILIES, GeneratorSpec, family, generate
from tessera.sim.report import run_study

mixes = st.lists(
    st.tuples(st.sampled_from([1, 2, 4, 8, 16]), st.floats(0.05, 1.0)),
    min_size=1,
    max_size=4,
    unique_by=lambda x: x[0],
)


@settings(max_examples=40, deadline=None)
@given(
    jobs=st.integers(1, 400),
    gap=st.floats(1.0, 5000.0),
    cv=st.floats(0.2, 4.0),
    median=st.floats(60.0, 86400.0),
    sigma=st.floats(0.0, 2.5),
    mix=mixes,
    seed=st.integers(0, 2**16),
)
def test_rows_respect_the_knobs(jobs, gap, cv, median, sigma, mix, seed):
    spec = GeneratorSpec("t", jobs=jobs, mean_interarrival_s=gap, burstiness=cv, duration_median_s=median,
                         duration_sigma=sigma, gpu_mix=tuple(mix), seed=seed)  # fmt: skip
    tr = generate(spec)
    assert len(tr) == jobs and tr.jobs[0].submit_s == 0.0
    submits = [j.submit_s for j in tr.jobs]
    assert submits == sorted(submits)
    assert all(spec.min_duration_s <= j.duration_s <= spec.max_duration_s for j in tr.jobs)
    assert {j.num_gpus for j in tr.jobs} <= {c for c, _ in mix}
    assert generate(spec) == tr  # the seed decides everything


def test_statistics_follow_the_knobs():
    # large samples: the gap mean and CV, the duration median and the GPU-count shares land near the knobs
    for cv in (0.5, 1.0, 3.0):
        spec = GeneratorSpec("t", jobs=20000, mean_interarrival_s=100.0, burstiness=cv, duration_median_s=3600.0,
                             gpu_mix=((1, 0.7), (8, 0.3)), seed=1)  # fmt: skip
        tr = generate(spec)
        gaps = np.diff([j.submit_s for j in tr.jobs])
        assert gaps.mean() == pytest.approx(100.0, rel=0.1)
        assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.15)
        assert np.median([j.duration_s for j in tr.jobs]) == pytest.approx(3600.0, rel=0.1)
        assert np.mean([j.num_gpus == 8 for j in tr.jobs]) == pytest.approx(0.3, abs=0.02)


def test_bad_knobs_name_the_field():
    with pytest.raises(ValueError, match="burstiness"):
        GeneratorSpec("t", burstiness=0)
    with pytest.raises(ValueError, match="model_classes"):
        GeneratorSpec("t", model_classes=("tiny",))
    with pytest.raises(ValueError, match="unknown family 'nope'.*bursty-short"):
        family("nope")


def test_families_are_distinct_and_run(tmp_path):
    assert len(FAMILIES) >= 3
    shapes = {(s.burstiness, s.gpu_mix, s.model_classes, s.deadline_lambda) for s in FAMILIES.values()}
    assert len(shapes) == len(FAMILIES)
    small = GeneratorSpec("small", jobs=30, mean_interarrival_s=600.0, duration_median_s=1800.0,
                          gpu_mix=((1, 0.5), (2, 0.5)), deadline_lambda=(1.0, 2.0))  # fmt: skip
    assert small.workload().deadlines
    # a named family end to end through the same study path as Philly (a short slice and one small model keep
    # the rate table cheap; the family's deadlines stay)
    fam = family("deadline-mixed")
    wl = replace(fam.workload(), size_classes=(("bert-0.76b",),) * 4)
    st_ = run_study(trace="gen:deadline-mixed", cluster="crius-sim-1280", policies="fcfs,tessera", plots=False,
                    end=6 * 3600.0, out_dir=None, max_gpus=8, workload=wl)  # fmt: skip
    assert st_.trace == "gen:deadline-mixed" and st_.n_jobs > 10
    for m in st_.metrics.values():
        assert m["finished_total"] > 0 and m["deadline_ratio"] is not None


def test_the_long_trace_is_another_shape_at_philly_size():
    """months-16k (the cold-start target's other trace): 16,000 jobs over months, far more multi-GPU jobs than
    the Philly window; named like a family, never run by the study families."""
    from tessera.sim.generator import LONG_TRACES
    from tessera.sim.trace import load_philly

    assert "months-16k" in LONG_TRACES and "months-16k" not in FAMILIES
    trace = generate(family("months-16k", seed=3))
    arrivals = np.array([r.submit_s for r in trace.jobs])
    gpus = np.array([r.num_gpus for r in trace.jobs])
    assert len(trace) == 16000
    assert arrivals.max() - arrivals.min() > 60 * 86400  # months, not the two-week window
    philly = np.array([r.num_gpus for r in load_philly().jobs])
    assert (gpus > 1).mean() > (philly > 1).mean() + 0.2 and gpus.max() >= 32

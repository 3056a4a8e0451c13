"""Speed factors are kept per (configuration, GPU types): a factor measured on one device type does not price
another type as if its estimate were off in the same way."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tessera.hardware import get_cluster
from tessera.scheduler import JobConfig
from tessera.scheduler.factors import FactorBasis, SpeedFactors, types_of
from tessera.scheduler.speed import SpeedSource

A, B, C = JobConfig("gpt-tiny", 8), JobConfig("llama-tiny", 8), JobConfig("gpt-tiny", 16)
CORE, HALF = (("cpu-core", 1),), (("cpu-half", 1),)


def test_types_of_ignores_counts_and_order():
    assert types_of((("V100-32GB", 2), ("A100-40GB", 1))) == ("A100-40GB", "V100-32GB")
    assert types_of((("A100-40GB", 4), ("V100-32GB", 0))) == ("A100-40GB",)


def test_a_factor_applies_where_it_was_measured():
    f = SpeedFactors({(A, ("cpu-core",)): 0.9, (A, ("cpu-half",)): 0.6})
    assert f.of(A, CORE) == 0.9
    assert f.of(A, (("cpu-core", 3),)) == 0.9  # the count is the cost model's to scale
    assert f.of(A, HALF) == 0.6


def test_another_type_carries_the_configuration_and_the_type_parts():
    """A measured on cpu-half only; B on both: A on cpu-core is A's factor × B's (core ÷ half)."""
    f = SpeedFactors({(A, ("cpu-half",)): 0.6, (B, ("cpu-half",)): 0.5, (B, ("cpu-core",)): 1.0})
    assert f.of(A, CORE) == pytest.approx(0.6 * 1.0 / 0.5)
    # a type nobody measured: the configuration's own factor as it is
    assert f.of(A, (("A100-40GB", 1),)) == 0.6
    # a configuration never measured: the type's part, else the median of all
    assert f.of(C, CORE) == 1.0
    assert f.of(C, HALF) == pytest.approx(0.55)
    assert f.of(C, (("A100-40GB", 1),)) == 0.6


def test_limits_on_where_a_job_runs_share_its_measurements():
    """A job capped at one GPU, or kept off a type, steps as fast where it runs as the same training free of
    limits: one measurement prices both (and two factors for one speed_key are refused)."""
    capped = replace(A, max_gpus=1, exclude_gpu_types=("cpu-half",))
    assert capped.speed_key == A and A.speed_key is A
    f = SpeedFactors(
        {(capped, ("cpu-core",)): 0.9, (replace(A, gpu_types=("cpu-half",)), ("cpu-half",)): 0.6}
    )
    assert f.of(A, CORE) == 0.9 and f.of(capped, CORE) == 0.9
    assert f.of(replace(A, max_gpus=2), HALF) == 0.6
    with pytest.raises(ValueError, match="speed_key"):
        SpeedFactors({(capped, ("cpu-core",)): 0.9, (A, ("cpu-core",)): 0.8})


def test_nothing_measured_is_one():
    assert SpeedFactors().of(A, CORE) == 1.0


def test_the_speed_source_prices_each_type_by_its_own_factor():
    """Every rate a policy or the truth sees is the estimate × the factor for those GPUs' types."""
    source = SpeedSource(get_cluster("local"))
    c = JobConfig("gpt-tiny", 8)
    a100, v100 = (("A100-40GB", 1),), (("V100-32GB", 1),)
    base = (source.true(c, a100), source.true(c, v100), source.dp(c, "V100-32GB", 1))
    other = JobConfig("gpt-tiny", 4)
    source.factors = SpeedFactors(
        {(c, ("A100-40GB",)): 0.5, (other, ("V100-32GB",)): 0.8, (other, ("A100-40GB",)): 0.4}
    )
    assert source.true(c, a100) == pytest.approx(base[0] * 0.5)
    # V100 for c: never measured there; the configuration measured on both has V100's factor 2× A100's
    assert source.true(c, v100) == pytest.approx(base[1] * 0.5 * 0.8 / 0.4)
    assert source.dp(c, "V100-32GB", 1) == pytest.approx(base[2] * 1.0)


def test_each_factor_says_what_it_was_read_from():
    f = SpeedFactors({(A, ("cpu-half",)): 0.6, (B, ("cpu-half",)): 0.5, (B, ("cpu-core",)): 1.0})
    assert f.resolve(A, HALF) == (0.6, FactorBasis.THESE_TYPES)
    assert f.resolve(A, CORE)[1] is FactorBasis.OTHER_TYPES
    assert f.resolve(C, HALF) == (pytest.approx(0.55), FactorBasis.DEVICE_TYPES)
    assert f.resolve(C, (("A100-40GB", 1),)) == (0.6, FactorBasis.ALL)
    assert SpeedFactors().resolve(A, CORE) == (1.0, FactorBasis.NONE)
    assert [b.knows_configuration for b in FactorBasis] == [True, True, False, False, False]


def test_the_ratio_between_types_comes_only_from_configurations_measured_on_both():
    """The embedded demo's case: llama measured on cpu-half only, gpt and a small model whose loop overhead the
    cost model does not price (factor 0.5) on cpu-core only. llama moved to cpu-core keeps its own factor (no
    configuration says how the two types' errors differ); the unpaired medians (0.75 on core ÷ llama's own 0.8
    on half) had made it 0.75 whatever llama's own measurement said."""
    blob = JobConfig("blob-classifier", 32)
    f = SpeedFactors({(B, ("cpu-half",)): 0.8, (A, ("cpu-core",)): 1.0, (blob, ("cpu-core",)): 0.5})
    assert f.resolve(B, CORE) == (0.8, FactorBasis.OTHER_TYPES)
    assert f.ratio(("cpu-core",), ("cpu-half",)) == 1.0
    # once one configuration ran on both, its ratio moves the others
    g = SpeedFactors({**f.measured, (A, ("cpu-half",)): 0.8})
    assert g.ratio(("cpu-core",), ("cpu-half",)) == pytest.approx(1.25)
    assert g.of(B, CORE) == pytest.approx(1.0)
    assert g.of(blob, HALF) == pytest.approx(0.4)

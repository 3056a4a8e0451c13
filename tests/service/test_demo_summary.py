"""The demo's "estimated vs measured" figure (issue 17 item 2): which estimates come after the configuration's
first calibration, and what they are compared with."""

from __future__ import annotations

import pytest

from tessera.commands.common import knew_configuration
from tessera.commands.demo import after_calibration


def alloc(
    attempt: int,
    steps: int,
    est: float | None,
    step_s: float | None,
    iter_s: float | None = None,
    basis: str | None = "these_types",
) -> dict:
    return {"attempt": attempt, "from_step": 100 * attempt, "to_step": 100 * attempt + steps,
            "estimate_iter_s": est, "measured_step_s": step_s, "measured_iter_s": iter_s,
            "estimate_basis": basis}  # fmt: skip


def test_only_estimates_that_knew_the_configuration_and_ran_long_enough_count():
    hist = [
        alloc(2, 40, 0.030, 0.020, basis="none"),  # before any calibration
        alloc(1, 5, 0.010, 0.020),  # too short to say what its step was
        alloc(3, 30, 0.011, 0.010),  # corrected by the configuration's own measurement
        alloc(4, 30, 0.009, 0.010, basis="other_types"),  # measured on other types, carried here
        alloc(5, 30, 0.012, 0.010, basis="device_types"),  # only how these device types err
        alloc(6, 30, 0.012, 0.010, basis=None),  # planned before estimates recorded their basis
    ]
    assert after_calibration(hist, 20) == pytest.approx([0.1, -0.1])
    assert after_calibration(hist, 50) == []


def test_the_estimate_is_compared_with_the_loop_step_where_it_was_timed():
    # a calibrated estimate predicts a step of progress (loop iteration), not the bare training step
    hist = [alloc(2, 50, 0.012, 0.012, iter_s=0.010), alloc(3, 50, 0.011, None, 0.010)]
    assert after_calibration(hist, 20) == pytest.approx([0.0, 0.1])


def test_every_basis_the_service_writes_is_read():
    from tessera.scheduler.factors import FactorBasis

    knows = {b.value: knew_configuration({"estimate_basis": b.value}) for b in FactorBasis}
    assert knows == {
        "these_types": True,
        "other_types": True,
        "device_types": False,
        "all": False,
        "none": False,
    }


def test_the_correction_reads_as_what_the_cost_model_was_multiplied_by():
    from tessera.commands.common import correction_text

    assert correction_text({"estimate_basis": "these_types", "speed_factor": 0.5}) == "×2.00 (these types)"
    assert correction_text({"estimate_basis": "none", "speed_factor": 1.0}) == "×1.00 (none)"
    assert correction_text({"estimate_iter_s": 0.01}) == "-"  # planned before estimates recorded it

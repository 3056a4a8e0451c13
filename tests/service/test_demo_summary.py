"""The demo's "estimated vs measured" figure (issue 17 item 2): which estimates come after a job's own first
calibration, and what they are compared with."""

from __future__ import annotations

import pytest

from tessera.commands.demo import after_calibration


def alloc(
    attempt: int, steps: int, est: float | None, step_s: float | None, iter_s: float | None = None
) -> dict:
    return {"attempt": attempt, "from_step": 100 * attempt, "to_step": 100 * attempt + steps,
            "estimate_iter_s": est, "measured_step_s": step_s, "measured_iter_s": iter_s}  # fmt: skip


def test_only_estimates_made_after_a_long_enough_measured_allocation_count():
    hist = [alloc(2, 40, 0.030, 0.020), alloc(1, 5, 0.010, 0.020), alloc(3, 30, 0.011, 0.010)]
    # attempt 1 ran 5 steps (not a calibration), attempt 2 is the first calibration: only attempt 3 follows it
    assert after_calibration(hist, 20) == pytest.approx([0.1])
    assert after_calibration(hist, 50) == []  # no allocation long enough: nothing after a calibration
    assert after_calibration(hist[:1], 20) == []  # a job that ran once was never estimated knowing itself


def test_the_estimate_is_compared_with_the_loop_step_where_it_was_timed():
    # a calibrated estimate predicts a step of progress (loop iteration), not the bare training step
    hist = [
        alloc(1, 50, 0.02, 0.02),
        alloc(2, 50, 0.012, 0.012, iter_s=0.010),
        alloc(3, 50, 0.011, None, 0.010),
    ]
    assert after_calibration(hist, 20) == pytest.approx([0.0, 0.1])

"""A rank that dies, raises or hangs ends the whole job with a clear error inside the timeout."""

from __future__ import annotations

import math
import time

import pytest
import torch
from helpers import plan, stage
from models import factory, n_layers

from tessera.runtime import Fault, LaunchError, RunOptions, launch


def _pp_plan():
    n = n_layers("gpt-tiny")
    return plan("gpt-tiny", [stage(0, 2, [0]), stage(2, n, [1])], micro=2, seq=8)


@pytest.mark.timeout(60)
def test_killed_rank_ends_job_naming_rank():
    opts = RunOptions(
        steps=4, model=factory("gpt-tiny"), pg_timeout_s=10, watchdog_s=20, fault=Fault(1, 2, "kill")
    )
    t0 = time.monotonic()
    with pytest.raises(LaunchError) as e:
        launch(_pp_plan(), opts)
    assert e.value.rank == 1
    assert "rank 1 died (killed by SIGKILL)" in str(e.value)
    assert time.monotonic() - t0 < 30


@pytest.mark.timeout(60)
def test_raising_rank_reports_its_error():
    opts = RunOptions(
        steps=3, model=factory("gpt-tiny"), pg_timeout_s=10, watchdog_s=20, fault=Fault(0, 1, "raise")
    )
    with pytest.raises(LaunchError) as e:
        launch(_pp_plan(), opts)
    assert e.value.rank == 0
    assert "injected failure on rank 0 at step 1" in str(e.value)


@pytest.mark.timeout(60)
def test_hung_rank_is_named_within_the_timeout():
    opts = RunOptions(
        steps=3, model=factory("gpt-tiny"), pg_timeout_s=6, watchdog_s=8, fault=Fault(1, 1, "hang")
    )
    t0 = time.monotonic()
    with pytest.raises(LaunchError) as e:
        launch(_pp_plan(), opts)
    assert e.value.rank == 1
    assert time.monotonic() - t0 < 30


DIVERGING_LR = 1e6  # gpt-tiny fp32 with AdamW: step 1's loss is finite, step 2's is NaN (a real divergence)


def _dp_plan():
    n = n_layers("gpt-tiny")
    return plan("gpt-tiny", [stage(0, n, [0, 1], dp=2)], batch=8, seq=16)


@pytest.mark.timeout(120)
def test_diverging_loss_fails_the_job_at_its_step_without_a_checkpoint(tmp_path):
    """The default: the first non-finite loss ends the job with "loss diverged (NaN) at step 2", blaming no
    rank, and no checkpoint of the non-finite parameters is written (steps 2.. would have been saved)."""
    ck = tmp_path / "ck"
    opts = RunOptions(steps=6, model=factory("gpt-tiny"), learning_rate=DIVERGING_LR, pg_timeout_s=20,
                      watchdog_s=60, checkpoint_dir=str(ck), checkpoint_every=1)  # fmt: skip
    with pytest.raises(LaunchError) as e:
        launch(_pp_plan(), opts)
    assert str(e.value) == "job failed: loss diverged (NaN) at step 2" and e.value.rank is None
    saved = sorted(p.name for p in ck.iterdir() if p.name.startswith("step-")) if ck.exists() else []
    assert saved == ["step-00000001"], saved  # step 1 (finite) only


@pytest.mark.timeout(120)
def test_skip_mode_skips_the_update_of_every_nonfinite_step():
    """on_nonfinite_loss="skip": every step from the first NaN on is skipped on both DP ranks (no optimizer
    update), so the parameters at the end are exactly those after step 1, and finite; without the skip they
    would be NaN."""
    from tessera.runtime import launch_many

    common = dict(model=factory("gpt-tiny"), learning_rate=DIVERGING_LR, pg_timeout_s=20, watchdog_s=60,
                  capture_params=True)  # fmt: skip
    one, skipped = launch_many(
        [
            (_dp_plan(), RunOptions(steps=1, **common)),
            (_dp_plan(), RunOptions(steps=5, on_nonfinite_loss="skip", **common)),
        ]
    )
    losses = skipped.losses
    assert math.isfinite(losses[0]) and all(math.isnan(x) for x in losses[1:]), losses
    assert [r.skipped for r in skipped.records] == [False, True, True, True, True]
    assert set(one.params) == set(skipped.params)
    for name, p in skipped.params.items():
        assert torch.isfinite(p).all(), name
        assert torch.equal(p, one.params[name]), name

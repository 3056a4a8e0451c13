"""A rank that dies, raises or hangs ends the whole job with a clear error inside the timeout."""

from __future__ import annotations

import time

import pytest
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

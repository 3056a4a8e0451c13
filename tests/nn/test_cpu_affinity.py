"""CPU pinning: where it applies, that it really sets the core, and that in-process pinning is undone."""

from __future__ import annotations

import os

import pytest

from tessera.nn import cpu_affinity

CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
pytestmark = pytest.mark.skipif(len(CPUS) < 2, reason="needs at least 2 usable cores")


def test_core_for_pins_only_several_ranks_that_fit_the_cores(monkeypatch):
    monkeypatch.delenv(cpu_affinity.ENV, raising=False)
    assert cpu_affinity.core_for(0, 2) == CPUS[0]
    assert cpu_affinity.core_for(1, 2) == CPUS[1]
    assert cpu_affinity.core_for(0, 1) is None  # one rank keeps every core (its threads use them)
    assert cpu_affinity.core_for(0, len(CPUS) + 1) is None  # more ranks than cores: the OS balances
    assert cpu_affinity.core_for(2, 2) is None
    monkeypatch.setenv(cpu_affinity.ENV, "0")
    assert cpu_affinity.core_for(1, 2) is None


def test_pinned_sets_the_core_and_restores_the_callers_affinity(monkeypatch):
    monkeypatch.delenv(cpu_affinity.ENV, raising=False)
    before = os.sched_getaffinity(0)
    with cpu_affinity.pinned(1, 2) as core:
        assert core == CPUS[1]
        assert os.sched_getaffinity(0) == {CPUS[1]}
    assert os.sched_getaffinity(0) == before
    with cpu_affinity.pinned(0, 1) as core:  # not applicable: nothing changes
        assert core is None
        assert os.sched_getaffinity(0) == before

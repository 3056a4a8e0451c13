"""The scheduler core: events, rounds, validation and binding (restart accounting, preemption, failures)."""

from __future__ import annotations

import pytest

from tessera.scheduler import (
    Allocation,
    ClusterState,
    Decision,
    JobStatus,
    Policy,
    PolicyError,
    Scheduler,
    SchedulingContext,
    get_policy,
)
from tessera.scheduler.testing import job, table_knowledge

A100, V100 = "A100-40GB", "V100-32GB"
KN = table_knowledge({("m", 8): {(A100, 1): 2.0, (A100, 2): 3.6, (V100, 1): 1.0, (V100, 2): 1.8}})


class Scripted(Policy):
    """Returns the decisions it is given, one per call."""

    def __init__(self, decisions):
        self.decisions = list(decisions)

    def schedule(self, ctx: SchedulingContext):
        return self.decisions.pop(0)


def _cluster() -> ClusterState:
    return ClusterState.of([(A100, 2), (V100, 2)])


def test_round_starts_jobs_and_is_event_driven():
    s = Scheduler(_cluster(), get_policy("fcfs"), KN)
    s.submit(job(1, gpus=1, gpu_type=A100), 0.0)
    r = s.tick(300.0)
    assert r.decided and [c.kind for c in r.changes] == ["start"]
    assert s.jobs[1].status is JobStatus.RUNNING and s.jobs[1].first_start_s == 300.0
    assert not s.tick(600.0).decided  # nothing happened since: the policy is not called
    s.jobs[1].rate_iters_per_s = 2.0
    s.complete(1, 700.0)
    assert s.jobs[1].status is JobStatus.FINISHED and s.cluster.free_by_type() == {A100: 2, V100: 2}
    assert not s.tick(900.0).decided  # a completion with nothing left to schedule


def test_a_time_sharing_policy_decides_at_round_boundaries_and_on_events_only():
    """``every_round`` is every round, not every control tick: between the live service's periodic rounds
    (and a replay's of them) a tick with no event leaves a time-sharing policy alone; an arrival or the
    periodic boundary asks it."""

    class Counting(Policy):
        every_round = True

        def __init__(self) -> None:
            self.calls: list[float] = []

        def schedule(self, ctx: SchedulingContext):
            self.calls.append(ctx.now_s)
            return ctx.decision()

    pol = Counting()
    s = Scheduler(_cluster(), pol, KN)
    s.submit(job(1, gpus=1, gpu_type=A100), 0.0)
    assert s.tick(0.25, boundary=False).decided  # the arrival: asked between boundaries too
    assert not s.tick(0.5, boundary=False).decided  # a tick with nothing new
    assert s.tick(2.0).decided  # the periodic boundary
    assert s.tick(2.25, boundary=False, force=True).decided  # forced: asked
    assert pol.calls == [0.25, 2.0, 2.25]


def test_bind_classifies_rescale_migrate_preempt_resume_and_counts_restarts():
    a1 = Allocation(((0, 1),), ((A100, 1),))
    a2 = Allocation(((0, 2),), ((A100, 2),))
    v1 = Allocation(((1, 1),), ((V100, 1),))
    pol = Scripted([Decision({1: a1}), Decision({1: a2}), Decision({1: v1}), Decision({}), Decision({1: a1})])
    s = Scheduler(_cluster(), pol, KN)
    s.submit(job(1), 0.0)
    kinds = []
    for t in range(5):
        s._arrived.append(1)  # force a decision every round
        kinds += [c.kind for c in s.tick(300.0 * (t + 1)).changes]
    assert kinds == ["start", "rescale", "rescale", "preempt", "resume"]
    assert s.jobs[1].restarts == 3


def test_progress_is_folded_when_allocation_changes():
    a1 = Allocation(((0, 1),), ((A100, 1),))
    a2 = Allocation(((0, 2),), ((A100, 2),))
    s = Scheduler(_cluster(), Scripted([Decision({1: a1}), Decision({1: a2})]), KN)
    s.submit(job(1, iterations=1e6), 0.0)
    s.tick(0.0)
    js = s.jobs[1]
    js.rate_iters_per_s = 2.0
    s._arrived.append(1)
    s.tick(100.0)
    assert js.done_iterations == pytest.approx(200.0)
    assert js.attained_gpu_s == pytest.approx(100.0)


@pytest.mark.parametrize(
    "decision, msg",
    [
        (Decision({1: Allocation(((0, 3),), ((A100, 3),))}), "given 3 GPUs"),
        (Decision({1: Allocation(((0, 1),), ((V100, 1),))}), "does not hold"),
        (Decision({7: Allocation(((0, 1),), ((A100, 1),))}), "not pending or running"),
        (
            Decision({1: Allocation(((0, 2),), ((A100, 2),)), 2: Allocation(((0, 1),), ((A100, 1),))}),
            "given 3 GPUs",
        ),
    ],
)
def test_invalid_decisions_are_rejected(decision, msg):
    s = Scheduler(_cluster(), Scripted([decision]), KN)
    s.submit(job(1), 0.0)
    s.submit(job(2), 0.0)
    with pytest.raises(PolicyError, match=msg):
        s.tick(0.0)


def test_memory_fit_is_enforced():
    kn = table_knowledge({("m", 8): {(A100, 2): 1.0}})
    s = Scheduler(_cluster(), Scripted([Decision({1: Allocation(((0, 1),), ((A100, 1),))})]), kn)
    s.submit(job(1), 0.0)
    with pytest.raises(PolicyError, match="does not fit"):
        s.tick(0.0)


def test_node_failure_evicts_jobs_and_repair_brings_the_node_back():
    s = Scheduler(_cluster(), get_policy("fcfs"), KN)
    s.submit(job(1, gpus=2, gpu_type=A100), 0.0)
    s.tick(0.0)
    assert s.node_failed(0, 50.0) == [1]
    assert s.jobs[1].status is JobStatus.PENDING and s.cluster.free_by_type()[A100] == 0
    r = s.tick(300.0)
    assert r.decided and r.changes == ()  # no A100 is up
    s.node_repaired(0, 400.0)
    r = s.tick(600.0)
    assert [c.kind for c in r.changes] == ["resume"] and s.jobs[1].restarts == 1


def test_drop_removes_a_job_for_good():
    s = Scheduler(_cluster(), Scripted([Decision({}, frozenset({1}))]), KN)
    s.submit(job(1), 0.0)
    r = s.tick(0.0)
    assert [c.kind for c in r.changes] == ["drop"] and s.jobs[1].status is JobStatus.DROPPED
    assert not s.active


def test_changes_carry_an_enum_kind_and_a_reason_the_policy_gave_or_the_cores_own():
    from tessera.scheduler.core import ChangeKind

    a2 = Allocation(((0, 2),), ((A100, 2),))
    v1 = Allocation(((1, 1),), ((V100, 1),))
    pol = Scripted(
        [Decision({1: a2}), Decision({1: v1}, reasons={1: "migrate: the V100 is free"}), Decision({})]
    )
    s = Scheduler(_cluster(), pol, KN)
    s.submit(job(1), 0.0)
    got = []
    for t in range(3):
        s._arrived.append(1)  # force a decision every round
        got += s.tick(300.0 * (t + 1)).changes
    assert [c.kind for c in got] == [ChangeKind.START, ChangeKind.RESCALE, ChangeKind.PREEMPT]
    assert got[0].kind == "start" and isinstance(got[0].kind, str)  # string comparisons keep working
    assert got[0].reason == "start: 2×A100-40GB, est. 3.6 it/s"  # the core's: GPUs and the Cell estimate
    assert got[1].reason == "migrate: the V100 is free"  # the policy's, as given
    assert got[2].reason == "preempted by policy Scripted (no reason given)"


def test_a_policy_preemption_reaches_the_change_with_the_job_it_made_room_for():
    kn = table_knowledge({("m", 8): {(A100, 2): 3.6, (V100, 2): 1.8}, ("big", 8): {(A100, 2): 1.0}})
    s = Scheduler(_cluster(), get_policy("tessera", depth=0), kn)  # no rescales: only preemption makes room
    s.submit(job(1, gpus=2, gpu_type=A100, iterations=1e9), 0.0)
    s.submit(job(2, gpus=2, gpu_type=V100, iterations=1e9), 0.0)
    s.tick(0.0)
    for js in s.running.values():
        js.rate_iters_per_s = 1.0
    # a short job that only fits two A100s arrives on a full cluster
    s.submit(job(3, "big", gpus=2, gpu_type=A100, iterations=10.0, arrival_s=5000.0), 5000.0)
    r = s.tick(5000.0)
    by_job = {c.job_id: c for c in r.changes}
    assert by_job[3].kind == "start" and "suspends job" in by_job[3].reason, by_job[3].reason
    (victim,) = [c for c in r.changes if c.kind == "preempt"]
    assert victim.reason.startswith("preempted to make room for job 3 (priority 0): it needs"), victim.reason
    assert "shortest-remaining-first" in victim.reason

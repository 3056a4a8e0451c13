"""The scheduling adapter: the shared core + ``tessera`` policy on the live cluster, Plans pinned to GPUs."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import EXAMPLES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessera.hardware import get_cluster
from tessera.jobs import parse_job
from tessera.service.scheduling import JobInput, LiveCluster, LiveNode, SchedulingAdapter
from tessera.service.states import Reason

TINY = {"model": "gpt-tiny", "global_batch": 8, "seq_len": 64, "precision": "fp32"}


def spec(name: str, **kw):
    return parse_job({"name": name, "steps": 100, **TINY, **kw})


POOL = [
    spec("p-short", steps=30),
    spec("p-long", steps=4000),
    spec("p-one", steps=3000, max_gpus=1),
    spec("p-a100", steps=3000, exclude_gpu_types=["V100-32GB"]),
    spec("p-urgent", steps=2000, priority=40),
]


def node_types(adapter: SchedulingAdapter) -> dict[str, str]:
    return {n.name: n.gpu_type for n in adapter.cluster.nodes}


def check_pinned(adapter: SchedulingAdapter, a) -> None:
    """Every Plan device sits on a placed GPU of its own type, one device per GPU."""
    types = node_types(adapter)
    devs = a.plan.devices
    assert len(devs) == a.n_gpus
    assert {(d.node, d.local_index) for d in devs} == {(s.node, s.index) for s in a.slots}
    for d in devs:
        assert types[d.node] == d.gpu_type


@pytest.fixture
def adapter():
    return SchedulingAdapter(LiveCluster.from_spec(get_cluster("local")), restart_cost_s=5.0)


def test_round_places_jobs_on_their_gpu_types(adapter):
    jobs = [JobInput(1, spec("a"), 0.0), JobInput(2, spec("b"), 1.0), JobInput(3, spec("c"), 2.0)]
    adapter.sync(jobs, 10.0)
    r = adapter.round(10.0)
    assert r.policy == "tessera" and r.decided
    started = {c.job_id: c.new for c in r.changes}
    assert started and all(c.kind == "start" for c in r.changes)
    used = [s for a in started.values() for s in a.slots]
    assert len(used) == len(set(used)) <= 4  # no GPU given twice
    for a in started.values():
        check_pinned(adapter, a)
    for jid in {1, 2, 3} - set(started):
        assert r.reasons[jid] in (Reason.RESOURCES, Reason.PRIORITY)


def test_exclude_and_max_gpus_are_honoured(adapter):
    jobs = [
        JobInput(1, spec("no-a100", exclude_gpu_types=["A100-40GB"]), 0.0),
        JobInput(2, spec("one", max_gpus=1), 1.0),
    ]
    adapter.sync(jobs, 5.0)
    r = adapter.round(5.0)
    got = {c.job_id: c.new for c in r.changes}
    assert set(got[1].gpus) == {"V100-32GB"}
    assert got[2].n_gpus == 1


def test_infeasible_job_says_why(adapter):
    adapter.sync(
        [JobInput(1, parse_job({"name": "huge", "model": "llama2-70b", "global_batch": 8, "steps": 5}), 0.0)],
        1.0,
    )
    r = adapter.round(1.0)
    assert not r.changes and r.reasons[1].startswith(Reason.INFEASIBLE)


def test_freed_gpus_go_to_a_running_job(adapter):
    """A finishes; the running job that started on one GPU is given more (a rescale), since its long
    remaining work repays the restart."""
    a = spec("short", steps=20)
    c = spec("capped", max_gpus=1, steps=5000)
    b = spec("long", steps=5000)
    adapter.sync([JobInput(1, a, 0.0), JobInput(2, c, 1.0), JobInput(3, b, 2.0)], 3.0)
    r1 = adapter.round(3.0)
    first = {x.job_id: x.new for x in r1.changes}
    assert first[1].n_gpus == 2 and first[2].n_gpus == 1 and first[3].n_gpus == 1
    running = [
        JobInput(2, c, 1.0, assignment=first[2], steps_done=100, measured_iter_s=0.05),
        JobInput(3, b, 2.0, assignment=first[3], steps_done=100, measured_iter_s=0.05),
        JobInput(1, a, 0.0, terminal=True),
    ]
    adapter.sync(running, 60.0)
    r2 = adapter.round(60.0)
    changed = {x.job_id: x for x in r2.changes}
    assert 3 in changed and changed[3].new.n_gpus == 2 and changed[3].old.n_gpus == 1
    # the core's kind, as a replay records it: other GPU counts or types are a rescale ("resize" here)
    assert changed[3].kind == "resize", (changed[3].old.gpus, changed[3].new.gpus)
    check_pinned(adapter, changed[3].new)
    assert 1 not in changed  # a finished job is gone from the core


def test_a_job_still_launching_is_not_moved(adapter):
    """A job whose gang is still being launched is restarting, as the simulator's start delay holds it: the
    round that would grow it onto freed GPUs (the test above) leaves it alone until its gang is up."""
    a = spec("short", steps=20)
    c = spec("capped", max_gpus=1, steps=5000)
    b = spec("long", steps=5000)
    adapter.sync([JobInput(1, a, 0.0), JobInput(2, c, 1.0), JobInput(3, b, 2.0)], 3.0)
    first = {x.job_id: x.new for x in adapter.round(3.0).changes}

    def inputs(launching: bool) -> list[JobInput]:
        return [
            JobInput(2, c, 1.0, assignment=first[2], steps_done=100, measured_iter_s=0.05),
            JobInput(
                3, b, 2.0, assignment=first[3], steps_done=100, measured_iter_s=0.05, launching=launching
            ),
            JobInput(1, a, 0.0, terminal=True),
        ]

    adapter.sync(inputs(launching=True), 60.0)
    assert adapter.core.jobs[3].paused_until_s > 60.0
    assert 3 not in {x.job_id for x in adapter.round(60.0).changes}
    adapter.sync(inputs(launching=False), 61.0)
    assert adapter.core.jobs[3].paused_until_s <= 61.0
    changed = {x.job_id: x for x in adapter.round(61.0, force=True).changes}
    assert 3 in changed and changed[3].new.n_gpus == 2  # up: now it grows


def test_backoff_holds_a_failed_job(adapter):
    s = spec("flaky")
    adapter.sync([JobInput(1, s, 0.0, not_before=100.0)], 10.0)
    r = adapter.round(10.0, force=True)
    assert not r.changes and r.reasons[1] == Reason.BACKOFF
    adapter.sync([JobInput(1, s, 0.0)], 101.0)
    r = adapter.round(101.0, force=True)
    assert [x.job_id for x in r.changes] == [1]


def test_node_loss_evicts_and_restore_after_restart(adapter):
    s = spec("x", gpu_types=["V100-32GB"], max_gpus=2, exclude_gpu_types=["A100-40GB"])
    adapter.sync([JobInput(1, s, 0.0)], 1.0)
    a = adapter.round(1.0).changes[0].new
    # a new adapter (server restart) restores the job on its GPUs without asking the policy
    fresh = SchedulingAdapter(LiveCluster.from_spec(get_cluster("local")))
    fresh.sync([JobInput(1, s, 0.0, assignment=a)], 2.0)
    assert fresh.assignment(1) == a and 1 in fresh.core.running
    # its node dies: the job loses its GPUs
    nodes = tuple(
        LiveNode(n.name, n.gpu_type, n.n_gpus, alive=n.gpu_type != "V100-32GB") for n in fresh.cluster.nodes
    )
    evicted = fresh.set_cluster(LiveCluster(fresh.cluster.spec, nodes))
    assert evicted == [1] and fresh.assignment(1) is None
    fresh.sync([JobInput(1, s, 0.0)], 3.0)
    r = fresh.round(3.0, force=True)
    assert not r.changes  # no V100 is left and the job excludes the A100s
    assert r.reasons[1] == Reason.RESOURCES or r.reasons[1].startswith(Reason.INFEASIBLE)


def test_entrypoint_model_gets_its_annotated_plan(adapter):
    s = parse_job({"name": "blobs", "model": "blob-classifier", "entrypoint": f"{EXAMPLES / 'blob_classifier.py'}:BlobClassifier",
                   "global_batch": 32, "steps": 50, "precision": "fp32"})  # fmt: skip
    d = adapter.dry_run(s)
    assert d.chosen is not None and d.plan is not None
    assert all(st.tp_degree == 1 for st in d.plan.stages)  # never TP the model did not ask for
    adapter.sync([JobInput(7, s, 0.0)], 1.0)
    a = adapter.round(1.0).changes[0].new
    check_pinned(adapter, a)
    if a.n_gpus > 1 and len(a.gpus) > 1:  # a mix: faster GPUs get larger batch shares (Whale)
        shares = a.plan.stages[0].batch_shares
        assert shares and sum(shares) == 32


def test_gpus_freed_and_taken_in_one_round_are_never_shared(adapter):
    """One round frees a finished job's GPUs, may rescale running jobs and starts the queued one: every GPU
    has one holder, and the adapter's GPUs agree with the core's per-node counts."""
    blob = parse_job({"name": "blobs", "model": "blob-classifier", "global_batch": 32, "steps": 150, "precision": "fp32",
                      "entrypoint": f"{EXAMPLES / 'blob_classifier.py'}:BlobClassifier"})  # fmt: skip
    specs = {
        1: spec("short", steps=20),
        2: spec("capped", max_gpus=1, steps=5000),
        3: spec("long", steps=5000),
        4: blob,
        5: spec("extra", max_gpus=1, steps=5000),
    }
    adapter.sync([JobInput(j, s, float(j)) for j, s in specs.items()], 5.0)
    adapter.round(5.0)
    held = {j: adapter.assignment(j) for j in specs}
    queued = [j for j, a in held.items() if a is None]
    assert queued  # five jobs, four GPUs: some job waits
    done = next(
        j for j in specs if held[j] is not None
    )  # a running job finishes; its GPUs go back this round
    jobs = [JobInput(done, specs[done], float(done), terminal=True)]
    for j in specs:
        if j == done:
            continue
        if held[j] is None:
            jobs.append(JobInput(j, specs[j], float(j)))
        else:
            jobs.append(
                JobInput(j, specs[j], float(j), assignment=held[j], steps_done=50, measured_iter_s=0.05)
            )
    adapter.sync(jobs, 60.0)
    adapter.round(60.0)
    now = {j: adapter.assignment(j) for j in specs if j != done}
    assert any(now[j] is not None for j in queued)  # the freed GPUs start a waiting job in the same round
    slots = [s for a in now.values() if a for s in a.slots]
    assert len(slots) == len(set(slots))
    for j, a in now.items():
        check_pinned(adapter, a)
        per_node = {}
        for s in a.slots:
            i = adapter.cluster.index_of(s.node)
            per_node[i] = per_node.get(i, 0) + 1
        assert tuple(sorted(per_node.items())) == adapter.core.jobs[j].allocation.placement


def test_job_spec_priority_goes_first(adapter):
    # five one-GPU jobs for the four GPUs of `local`: the last to arrive has the highest priority and runs
    jobs = [JobInput(i, spec(f"j{i}", max_gpus=1), float(i)) for i in range(1, 5)]
    jobs.append(JobInput(5, spec("urgent", max_gpus=1, priority=50), 5.0))
    adapter.sync(jobs, 10.0)
    r = adapter.round(10.0)
    started = {c.job_id for c in r.changes if c.kind == "start"}
    assert 5 in started and len(started) == 4
    (waiting,) = {1, 2, 3, 4} - started
    assert r.reasons[waiting] in (Reason.RESOURCES, Reason.PRIORITY)


# ------------------------------------------------------------------------------------------------ dry runs
def _live_state(adapter: SchedulingAdapter) -> tuple:
    core = adapter.core
    return (
        {j: s.allocation for j, s in core.running.items()},
        sorted(core.pending),
        core.cluster.free.tolist(),
        {j: a for j, a in adapter._assignments.items()},
        core.events(),
    )


def _check_dry_run_is_next_round(adapter: SchedulingAdapter, inputs: list, new, now: float, jid: int) -> None:
    """The dry run changes nothing live, and the live round that follows gives the job exactly what it said."""
    before = _live_state(adapter)
    d = adapter.dry_run(new, job_id=jid, now=now)
    assert _live_state(adapter) == before
    adapter.sync([*inputs, JobInput(jid, new, now)], now)
    r = adapter.round(now)
    got = adapter.assignment(jid)
    if d.chosen_now:
        assert got is not None, r.reasons.get(jid)
        assert got.cell == d.chosen.label and [s.to_dict() for s in got.slots] == list(d.slots)
        assert got.plan == d.plan
    else:
        assert got is None and r.reasons[jid] == d.reason


def test_dry_run_is_the_next_round_on_an_idle_cluster(adapter):
    s = spec("solo", steps=5000)
    d = adapter.dry_run(s, job_id=1, now=10.0)
    assert (
        d.chosen_now and d.reason is None and d.plan is not None and d.to_dict()["chosen"] == d.chosen.label
    )
    assert set(d.to_dict()) >= {"job", "model", "cells", "chosen", "chosen_now", "plan", "estimate",
                                "estimated_time_s", "reason"}  # fmt: skip
    _check_dry_run_is_next_round(adapter, [], s, 10.0, 1)


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    first=st.lists(st.sampled_from(range(len(POOL))), min_size=0, max_size=5),
    finished=st.sets(st.integers(0, 4), max_size=2),
    round_before=st.booleans(),
    new=st.sampled_from(range(len(POOL))),
)
def test_dry_run_is_the_next_live_round(first, finished, round_before, new):
    """Over random cluster states (jobs running and queued, some finished, a round due or not), the next
    live round gives the job exactly the Cell and GPUs its dry run said, or it waits for the reason given."""
    adapter = SchedulingAdapter(LiveCluster.from_spec(get_cluster("local")), restart_cost_s=5.0)
    jobs = [JobInput(i + 1, POOL[k], float(i + 1)) for i, k in enumerate(first)]
    adapter.sync(jobs, 10.0)
    adapter.round(10.0)
    later = []
    for i, j in enumerate(jobs):
        a = adapter.assignment(j.id)
        if i in finished and a is not None:
            later.append(JobInput(j.id, j.spec, j.submitted_at, terminal=True))
        elif a is not None:
            later.append(
                JobInput(j.id, j.spec, j.submitted_at, assignment=a, steps_done=50, measured_iter_s=0.02)
            )
        else:
            later.append(j)
    adapter.sync(later, 60.0)
    if round_before:
        adapter.round(60.0)
    _check_dry_run_is_next_round(adapter, later, POOL[new], 60.0, 100)


def test_measured_speed_scales_every_figure_of_the_configuration(adapter):
    """Telemetry: a configuration measured at twice its estimated iteration time has every rate (DP-only,
    Cell, true) halved; an unmeasured configuration takes the median factor."""
    from tessera.scheduler.speed import config_of

    s, other = spec("m", steps=5000), spec("u", steps=5000, global_batch=16)
    adapter.sync([JobInput(1, s, 0.0)], 1.0)
    a = adapter.round(1.0).changes[0].new
    c, g = config_of(s), (("A100-40GB", 2),)
    before = (
        adapter.knowledge.true_of(c, g),
        adapter.knowledge.cell_of(c, g),
        adapter.knowledge.dp_of(c, *g[0]),
    )
    assert all(x > 0 for x in before)
    # a job's first steps carry first-call costs: too few steps, no factor
    adapter.sync(
        [JobInput(1, s, 0.0, assignment=a, steps_done=3, measured_iter_s=9 * a.estimate_iter_s)], 1.5
    )
    assert adapter.knowledge.true_of(c, g) == pytest.approx(before[0])
    # timings taken while a profiler loaded the CPU are not the devices' own: no factor either
    adapter.sync(
        [
            JobInput(
                1,
                s,
                0.0,
                assignment=a,
                steps_done=50,
                measured_iter_s=9 * a.estimate_iter_s,
                measured_own=False,
            )
        ],
        1.7,
    )
    assert adapter.knowledge.true_of(c, g) == pytest.approx(before[0])
    adapter.sync(
        [JobInput(1, s, 0.0, assignment=a, steps_done=10, measured_iter_s=2 * a.estimate_iter_s)], 2.0
    )
    after = (
        adapter.knowledge.true_of(c, g),
        adapter.knowledge.cell_of(c, g),
        adapter.knowledge.dp_of(c, *g[0]),
    )
    assert after == pytest.approx(tuple(x / 2 for x in before))
    u = config_of(other)
    assert adapter.knowledge.true_of(u, g) == pytest.approx(adapter.speed.job(u).true_rate(g) / 2)
    # the seconds a step of progress costs (the whole loop iteration) rule over the training step alone
    adapter.sync(
        [JobInput(1, s, 0.0, assignment=a, steps_done=20, measured_iter_s=2 * a.estimate_iter_s,
                  measured_step_s=4 * a.estimate_iter_s)], 3.0,
    )  # fmt: skip
    assert adapter.knowledge.true_of(c, g) == pytest.approx(before[0] / 4)
    assert adapter.core.jobs[1].rate_iters_per_s == pytest.approx(1 / (4 * a.estimate_iter_s))


def test_the_estimate_shown_is_the_one_the_policy_believes(adapter):
    """An allocation's estimate is the cost model's step ÷ the configuration's speed factor there, with what
    the factor was read from: a second job of a configuration measured at twice its estimate is shown the
    measured step, not the cost model's, and a configuration never measured is shown the cost model's."""
    s = spec("m", steps=5000)
    adapter.sync([JobInput(1, s, 0.0)], 1.0)
    a = adapter.round(1.0).changes[0].new
    assert a.estimate["estimate_basis"] == "none" and a.estimate["speed_factor"] == 1.0
    assert a.estimate_iter_s == pytest.approx(a.estimate["cost_model_step_time_s"])
    measured = JobInput(1, s, 0.0, assignment=a, steps_done=20, measured_step_s=2 * a.estimate_iter_s)
    adapter.sync([measured], 2.0)
    twin = spec("m2", steps=5000)  # the same configuration
    adapter.sync([JobInput(2, twin, 2.5)], 3.0)  # job 1 has ended; its GPUs are free
    b = next(ch.new for ch in adapter.round(3.0).changes if ch.job_id == 2)
    assert b.gpus == a.gpus
    assert b.estimate["estimate_basis"] == "these_types"
    assert b.estimate_iter_s == pytest.approx(2 * a.estimate_iter_s, rel=1e-6)
    assert b.estimate_iter_s == pytest.approx(
        b.estimate["cost_model_step_time_s"] / b.estimate["speed_factor"]
    )
    assert b.plan.meta["estimate_basis"] == "these_types"  # kept with the allocation's plan (its history)


def test_speed_measurements_survive_a_restart_and_a_recalibration(tmp_path):
    """What an adapter measures (seconds per step, on which GPUs) is saved beside the cost model; a new adapter
    (a restarted service) starts with the same factors; the factors follow the cost model they refine (a
    calibration that halves every estimate halves them: not counted twice); an unreadable file is ignored."""
    from tessera.perf.costmodel import CostModel
    from tessera.scheduler import gpus_of
    from tessera.scheduler.speed import config_of
    from tessera.service.scheduling import Measured, load_measured, save_measured

    path = tmp_path / "perf" / "speed_measured.json"
    first = SchedulingAdapter(LiveCluster.from_spec(get_cluster("local")), measured_path=path)
    s = spec("m", steps=5000)
    first.sync([JobInput(1, s, 0.0)], 1.0)
    a = first.round(1.0).changes[0].new
    first.sync([JobInput(1, s, 0.0, assignment=a, steps_done=10, measured_step_s=2 * a.estimate_iter_s)], 2.0)
    assert path.exists()
    c, g = config_of(s), (("A100-40GB", 2),)
    again = SchedulingAdapter(LiveCluster.from_spec(get_cluster("local")), measured_path=path)
    assert again.knowledge.true_of(c, g) == pytest.approx(first.knowledge.true_of(c, g))
    held = gpus_of(a.gpus)  # where it was measured, the rate is the measured one under either cost model
    assert again.speed.factor(c, held) == pytest.approx(0.5, rel=1e-6)
    faster = CostModel(compute_scale={"A100-40GB": 0.5, "V100-32GB": 0.5})
    again.set_cost(faster)
    assert (
        again.speed.factor(c, held) < 0.5
    )  # its estimates are faster now: the same measurement, a smaller factor
    assert again.knowledge.true_of(c, held) == pytest.approx(1 / (2 * a.estimate_iter_s), rel=1e-6)
    odd = {
        (replace(c, gpu_types=("A100-40GB",), max_gpus=2), ("A100-40GB",)): Measured(
            (("A100-40GB", 2),), 0.25
        ),
        (c, ("A100-40GB", "V100-32GB")): Measured((("A100-40GB", 1), ("V100-32GB", 1)), 0.5),
    }
    save_measured(path, odd)
    # read back by speed_key: the limits on where a job may run are not part of how fast it runs there
    assert load_measured(path) == {(k.speed_key, t): m for (k, t), m in odd.items()}
    path.write_text("{not json")
    assert load_measured(path) == {}


@pytest.mark.parametrize("policy", ["gavel", "tessera"])
def test_a_recalibration_reprices_without_resubmitting_the_jobs(policy):
    """``set_cost`` re-prices every job and keeps the core, its jobs' arrivals and the policy's own state. It used
    to rebuild the core: every job arrived again, so the very next tick asked the policy (Gavel re-decided its
    time shares between rounds, having forgotten whom it had served), which a simulator replay never does."""
    from tessera.perf.costmodel import CostModel

    ad = SchedulingAdapter(LiveCluster.from_spec(get_cluster("local")), policy=policy, round_s=20.0)
    jobs = [JobInput(i + 1, spec(f"r{i}", steps=5000), float(i)) for i in range(5)]
    ad.sync(jobs, 5.0)
    assert ad.round(5.0).changes
    core, chosen, rate = ad.core, ad.policy, ad.knowledge.true_of
    before = {jid: js.allocation for jid, js in core.running.items()}
    ad.set_cost(CostModel(compute_scale={"A100-40GB": 0.5, "V100-32GB": 0.5}))
    assert ad.core is core and ad.policy is chosen
    assert [ad.core.jobs[i].job.arrival_s for i in range(1, 6)] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert ad.knowledge.true_of is not rate  # new rates
    later = ad.round(6.0, boundary=False)  # a tick between rounds where nothing happened: nothing is decided
    assert not later.decided and not later.changes
    assert {jid: js.allocation for jid, js in ad.core.running.items()} == before


def test_ended_allocations_set_the_measurement_as_the_median_of_their_whole_runs(tmp_path):
    """An ended allocation's steady step (20 steps or more) joins its configuration's last figures on those
    GPUs; their median is the measurement saved for the next start (and a replay of the next run), and the
    factor the policy prices with moves only when it moved more than 15 %."""
    from tessera.scheduler import gpus_of
    from tessera.scheduler.speed import config_of
    from tessera.service.scheduling import FINALS_KEPT, load_measured

    path = tmp_path / "speed_measured.json"
    ad = SchedulingAdapter(LiveCluster.from_spec(get_cluster("local")), measured_path=path)
    s = spec("m", steps=5000)
    ad.sync([JobInput(1, s, 0.0)], 1.0)
    a = ad.round(1.0).changes[0].new
    est, held = a.estimate_iter_s, gpus_of(a.gpus)
    c = config_of(s)
    ad.observe_final(s, a.gpus, 3 * est, steps=5)  # too short to count
    assert not path.exists() and ad.speed.factor(c, held) == 1.0
    ad.observe_final(s, a.gpus, 2 * est, steps=100)
    assert ad.speed.factor(c, held) == pytest.approx(0.5, rel=1e-6)
    ad.observe_final(s, a.gpus, 2.2 * est, steps=100)  # the median moved 5 %: rates stay
    assert ad.speed.factor(c, held) == pytest.approx(0.5, rel=1e-6)
    (m,) = load_measured(path).values()
    assert m.step_s == pytest.approx(2.1 * est) and m.finals_s == pytest.approx((2 * est, 2.2 * est))
    for _ in range(FINALS_KEPT):
        ad.observe_final(s, a.gpus, 4 * est, steps=100)
    (m,) = load_measured(path).values()
    assert len(m.finals_s) == FINALS_KEPT and m.step_s == pytest.approx(4 * est)
    assert ad.speed.factor(c, held) == pytest.approx(0.25, rel=1e-6)  # moved past 15 %: re-priced
    again = SchedulingAdapter(LiveCluster.from_spec(get_cluster("local")), measured_path=path)
    assert again.speed.factor(c, held) == pytest.approx(0.25, rel=1e-6)

"""The replay helpers of bench/fidelity.py: decisions from the service's history, round matching, and a replay
on the embedded ``local`` cluster that records Cells (fast, no Ray)."""

from __future__ import annotations

import pytest

from tessera.hardware.cluster import get_cluster, parse_cluster
from tessera.jobs.spec import parse_job
from tessera.scheduler.policy import get_policy
from tessera.scheduler.restart import RestartBelief
from tessera.scheduler.speed import SpeedSource, job_of, speed_table
from tessera.sim.replay import (
    Decision,
    ReplaySimulator,
    cell_label,
    decision_match,
    gpus_of_cell,
    group_rounds,
    live_decisions,
    normalize_cell,
    relative_error,
    throughput,
)
from tessera.sim.simulator import SimConfig


def test_cell_labels_compare_regardless_of_type_order() -> None:
    assert cell_label((("V100-32GB", 1), ("A100-40GB", 1)), 1) == "1xA100-40GB+1xV100-32GB S1"
    assert normalize_cell("1xV100-32GB+1xA100-40GB S2") == "1xA100-40GB+1xV100-32GB S2"
    assert normalize_cell(None) == ""


def test_live_decisions_map_kinds_and_add_preemptions() -> None:
    history = [
        {"job_id": 1, "kind": "start", "cell": "2xA100-40GB S1", "started_at": 10.0, "ended_at": 20.0,
         "end_reason": "resize"},
        {"job_id": 1, "kind": "resize", "cell": "1xA100-40GB S1", "started_at": 25.0, "ended_at": 30.0,
         "end_reason": "preempted"},
        {"job_id": 2, "kind": "recover", "cell": "1xA100-40GB S1", "started_at": 26.0, "ended_at": None,
         "end_reason": None},
    ]  # fmt: skip
    got = live_decisions(history)
    assert [(d.job_id, d.kind, d.cell) for d in got] == [
        (1, "start", "2xA100-40GB S1"),
        (1, "rescale", "1xA100-40GB S1"),
        (1, "preempt", ""),
    ]  # a failure relaunch ("recover") is no scheduling decision
    # an allocation ended "preempt" whose job starts again at once was moved, not preempted
    moved = [
        {"job_id": 3, "kind": "start", "cell": "1xA100-40GB S1", "started_at": 1.0, "ended_at": 5.0,
         "end_reason": "preempt: preempted: Gavel round"},
        {"job_id": 3, "kind": "migrate", "cell": "1xV100-32GB S1", "started_at": 5.01, "ended_at": None,
         "end_reason": None},
    ]  # fmt: skip
    assert [d.kind for d in live_decisions(moved, move_window_s=1.0)] == ["start", "migrate"]
    assert [d.kind for d in live_decisions(moved[:1], move_window_s=1.0)] == ["start", "preempt"]
    # a resume soon after is a time-sharing round's preemption and resumption, two decisions
    resumed = [moved[0], {**moved[1], "kind": "resume", "cell": "1xA100-40GB S1", "started_at": 5.5}]
    assert [d.kind for d in live_decisions(resumed, move_window_s=20.0)] == ["start", "preempt", "resume"]
    # ... and a move of the resumed job soon after does not hide that preemption
    later = [*resumed, {**moved[1], "kind": "resize", "started_at": 9.0}]
    assert [d.kind for d in live_decisions(later, move_window_s=20.0)] == [
        "start",
        "preempt",
        "resume",
        "rescale",
    ]


def test_rounds_group_within_the_window() -> None:
    ds = [Decision(0.0, 1, "start", "a"), Decision(0.5, 2, "start", "b"), Decision(5.0, 3, "start", "c")]
    assert [[d.job_id for d in r] for r in group_rounds(ds, 1.0)] == [[1, 2], [3]]


def test_decision_match_counts_rounds_of_both_runs() -> None:
    live = [Decision(0.0, 1, "start", "2xA100-40GB S1"), Decision(0.3, 2, "start", "2xV100-32GB S1"),
            Decision(10.0, 2, "rescale", "2xA100-40GB S1")]  # fmt: skip
    same = [Decision(0.0, 1, "start", "2xA100-40GB S1"), Decision(0.0, 2, "start", "2xV100-32GB S1"),
            Decision(12.0, 2, "rescale", "2xA100-40GB S1")]  # fmt: skip
    assert decision_match(live, same, window_s=1.0) == 1.0
    # the replay never rescales job 2: the live rescale round misses; the replay's one round still matches
    missing = same[:2]
    assert decision_match(live, missing, window_s=1.0) == pytest.approx(2 / 3)
    # another Cell for job 1: the first round of each run misses
    other = [Decision(0.0, 1, "start", "1xA100-40GB S1"), *same[1:]]
    assert decision_match(live, other, window_s=1.0) == pytest.approx(2 / 4)
    assert decision_match([], [], window_s=1.0) == 1.0


def test_errors_name_the_bad_figure() -> None:
    assert relative_error(11.0, 10.0) == pytest.approx(0.1)
    assert throughput(100.0, 4.0) == 25.0
    with pytest.raises(ValueError, match="live figure"):
        relative_error(1.0, 0.0)
    with pytest.raises(ValueError, match="makespan_s"):
        throughput(1.0, 0.0)


def test_replay_records_cells_and_charges_the_measured_restart() -> None:
    cluster = get_cluster("local")
    speed = SpeedSource(cluster)
    specs = [
        {"name": "a", "model": "gpt-tiny", "global_batch": 8, "seq_len": 64, "steps": 2000},
        {"name": "b", "model": "llama-tiny", "global_batch": 8, "seq_len": 64, "steps": 500, "max_gpus": 1},
    ]
    jobs = [job_of(parse_job(s), i + 1, float(i)) for i, s in enumerate(specs)]
    sim = ReplaySimulator(
        cluster, jobs, speed_table(speed), get_policy("fcfs"), SimConfig(round_s=2.0, startup_s=3.0),
        restart_s=7.0, believed=RestartBelief(20.0),
    )  # fmt: skip
    res = sim.run()
    assert {r.job_id for r in res.jobs if r.finish_s is not None} == {1, 2}
    starts = [d for d in sim.decisions if d.kind == "start"]
    assert sorted(d.job_id for d in starts) == [1, 2]
    for d in starts:
        assert d.cell.endswith(tuple(f" S{s}" for s in range(1, 9))), d.cell
        assert "x" in d.cell
    assert sim.restart_s(jobs[0]) == 7.0
    assert sim.sched.restart_estimate(jobs[0]) == 20.0
    # the capped job gets one GPU
    assert next(d for d in starts if d.job_id == 2).cell.startswith("1x")


def test_gpus_of_cell_parses_labels_and_names_a_bad_one() -> None:
    assert gpus_of_cell("1xV100-32GB+1xA100-40GB S1") == (("A100-40GB", 1), ("V100-32GB", 1))
    assert gpus_of_cell("2xA100-40GB") == (("A100-40GB", 2),)
    with pytest.raises(ValueError, match="A100"):
        gpus_of_cell("A100-40GB S1")


def test_service_rounds_start_an_arrival_at_the_next_tick_not_the_next_round() -> None:
    cluster = get_cluster("local")
    spec = {"name": "a", "model": "gpt-tiny", "global_batch": 8, "seq_len": 64, "steps": 500}
    jobs = [job_of(parse_job(spec), 1, 0.0), job_of(parse_job({**spec, "name": "b"}), 2, 1.1)]
    sim = ReplaySimulator(
        cluster, jobs, speed_table(SpeedSource(cluster)), get_policy("fcfs"), SimConfig(round_s=0.25),
        restart_s=1.0, believed=RestartBelief(20.0), service_round_s=5.0,
    )  # fmt: skip
    sim.run()
    started = {d.job_id: d.time_s for d in sim.decisions if d.kind == "start"}
    assert started[2] == pytest.approx(1.25)  # the tick after its arrival, not the 5 s round
    assert started[1] == pytest.approx(0.25)  # live sees a submission at its next tick, never at once
    assert sim.sched.round_s == 5.0
    # two submissions 35 ms apart, the first at a tick boundary: one round decides both, as live
    both = [jobs[0], job_of(parse_job({**spec, "name": "b"}), 2, 0.035)]
    sim = ReplaySimulator(
        cluster, both, speed_table(SpeedSource(cluster)), get_policy("fcfs"), SimConfig(round_s=0.25),
        restart_s=1.0, believed=RestartBelief(20.0), service_round_s=5.0,
    )  # fmt: skip
    sim.run()
    assert sorted(d.time_s for d in sim.decisions if d.kind == "start") == pytest.approx([0.25, 0.25])
    with pytest.raises(ValueError, match="service_round_s"):
        ReplaySimulator(
            cluster, jobs, speed_table(SpeedSource(cluster)), get_policy("fcfs"), SimConfig(round_s=2.0),
            restart_s=1.0, believed=RestartBelief(20.0), service_round_s=1.0,
        )  # fmt: skip


def test_forced_rounds_fall_where_the_live_servers_do() -> None:
    """The live server forces a round at every multiple of its round on the wall clock; the replay places its
    forced rounds at the same instants (``service_round_phase_s``: where the first falls after the first
    arrival), so a time-sharing policy decides at the same moments live and replayed."""
    from tessera.scheduler import Policy, SchedulingContext

    class Recorder(Policy):
        every_round = True

        def __init__(self) -> None:
            self.calls: list[float] = []

        def schedule(self, ctx: SchedulingContext):
            self.calls.append(ctx.now_s)
            return get_policy("fcfs").schedule(ctx) or ctx.decision()

    cluster = get_cluster("local")
    spec = {"name": "a", "model": "gpt-tiny", "global_batch": 8, "seq_len": 64, "steps": 3000}
    pol = Recorder()
    sim = ReplaySimulator(
        cluster, [job_of(parse_job(spec), 1, 0.0)], speed_table(SpeedSource(cluster)), pol, SimConfig(round_s=0.25),
        restart_s=1.0, believed=RestartBelief(20.0), service_round_s=2.0, service_round_phase_s=0.75,
    )  # fmt: skip
    sim.run()
    forced = [t for t in pol.calls if t > 0.25]  # after the arrival's round
    assert forced[:4] == pytest.approx([0.75, 2.75, 4.75, 6.75])


def test_a_launch_onto_a_finished_jobs_spare_workers_starts_warm() -> None:
    # one GPU: job 2 arrives while job 1 runs and starts on its GPU when it finishes (job 1's worker is kept
    # as a spare: warm, 0.5 s); job 3 arrives long after the spare expired (cold, 6 s)
    one = parse_cluster(
        {"name": "one", "node_groups": [{"name": "a", "count": 1, "gpu": "A100-40GB", "gpus_per_node": 1}]}
    )
    short = {"model": "gpt-tiny", "global_batch": 8, "seq_len": 64, "steps": 40, "max_gpus": 1}
    jobs = [job_of(parse_job({**short, "name": f"j{i}"}), i + 1, t) for i, t in enumerate([0.0, 0.5, 400.0])]
    sim = ReplaySimulator(
        one, jobs, speed_table(SpeedSource(one)), get_policy("fcfs"),
        SimConfig(round_s=0.25, startup_s=6.0, record_allocations=True), restart_s=1.0, believed=RestartBelief(20.0),
        warm_start_s=0.5, spare_s=15.0,
    )  # fmt: skip
    res = sim.run()
    pauses = {e.job_id: e.paused_until_s - e.time_s for e in res.allocation_log if e.kind == "start"}
    assert pauses[1] == pytest.approx(6.0)  # nothing was warm
    assert pauses[2] == pytest.approx(0.5)  # job 1's worker, kept as a spare
    assert pauses[3] == pytest.approx(6.0)  # the spare expired long before


def _fidelity_bench():
    """bench/fidelity.py as a module (it is a script, not a package module)."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "fidelity.py"
    spec = importlib.util.spec_from_file_location("bench_fidelity", path)
    fid = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = fid
    spec.loader.exec_module(fid)
    return fid


def test_estimate_errors_compare_each_long_enough_allocation_with_its_measured_step() -> None:
    """bench/fidelity.py's estimate figure (issue 17 item 2): estimate ÷ measured step of progress − 1 per live
    allocation of at least FINAL_MIN_STEPS steps, and the fraction within 15 %."""
    fid = _fidelity_bench()

    def alloc(steps, est, step_s, iter_s=None):
        return {"job_id": 1, "job_name": "j", "attempt": 1, "gpus": [{"gpu_type": "cpu-core"}], "from_step": 10,
                "to_step": 10 + steps, "estimate_iter_s": est, "measured_step_s": step_s, "measured_iter_s": iter_s}  # fmt: skip

    got = fid.estimate_errors([
        alloc(100, 0.011, 0.010), alloc(50, 0.008, 0.010), alloc(5, 0.1, 0.010),  # too short: left out
        alloc(40, 0.012, None, iter_s=0.010), alloc(60, None, 0.01),  # no estimate: left out
    ])  # fmt: skip
    assert [r["error"] for r in got["allocations"]] == pytest.approx([0.1, -0.2, 0.2])
    assert got["within_tolerance"] == pytest.approx(1 / 3) and got["max_abs"] == pytest.approx(0.2)
    assert got["median_abs"] == pytest.approx(0.2) and got["allocations"][0]["gpu_types"] == ["cpu-core"]
    assert fid.estimate_errors([])["within_tolerance"] is None


def test_allocation_overheads_split_cold_warm_and_restart_launches() -> None:
    """bench/fidelity.py's prior restart costs: an allocation's span minus its steps × seconds per step of
    progress, grouped as the replay charges them (a device's first launch is cold, one onto a finished job's
    spares within SPARE_S warm, a rescale a restart), the median per kind from earlier runs."""
    fid = _fidelity_bench()

    def alloc(job, kind, node, start, end, steps, step_s, iter_s=None):
        return {"job_id": job, "kind": kind, "gpus": [{"node": node}], "started_at": start, "ended_at": end,
                "from_step": 0, "to_step": steps, "measured_step_s": step_s, "measured_iter_s": iter_s or step_s}  # fmt: skip

    run = {"allocations": [
        alloc(1, "start", "core-0", 0.0, 14.0, 100, 0.1),  # cold: 14 − 10 = 4 s
        alloc(2, "start", "core-0", 15.0, 21.0, 50, 0.1),  # onto job 1's spares 1 s later: warm, 1 s
        alloc(3, "start", "half-0", 0.0, 8.0, 10, 0.5),  # another device's first: cold, 3 s
        alloc(2, "resize", "half-0", 8.5, 11.0, 10, 0.2),  # a restart, 0.5 s
        alloc(4, "start", "half-0", 11.0 + fid.SPARE_S + 1, 30.0 + fid.SPARE_S, 10, 0.5),  # spares expired: cold
    ]}  # fmt: skip
    over = fid.allocation_overheads(run)
    assert over["cold"] == pytest.approx([4.0, 3.0, 13.0]) and over["warm"] == pytest.approx([1.0])
    assert over["restart"] == pytest.approx([0.5])
    bench = {"startup_s": 9.0, "warm_start_s": 0.9, "restart_s": 1.1}  # bench/service.py's figures
    costs = fid.earlier_allocation_costs([run], bench)
    assert (costs["startup_s"], costs["warm_start_s"], costs["restart_s"]) == pytest.approx((4.0, 1.0, 0.5))
    # no restart in the earlier runs: the measured rescale pause stands for it, not a launch's overhead
    launches_only = {"allocations": [a for a in run["allocations"] if a["kind"] == "start"]}
    costs = fid.earlier_allocation_costs([launches_only], bench)
    assert (costs["startup_s"], costs["restart_s"]) == pytest.approx((4.0, 1.1))
    # without the whole loop iteration (an older server), the training step stands in for it
    old = {"allocations": [{**a, "measured_step_s": None} for a in run["allocations"]]}
    assert fid.allocation_overheads(old) == over
    assert fid.earlier_allocation_costs([{"allocations": []}], bench) is None
    # with each step's record (loop time, checkpoints included) the loop is summed, not steps × the median
    rows = [{"step": k, "attempt": None, "wall_s": 0.12, "checkpoint_s": 0.02 if k % 10 == 9 else 0.0}
            for k in range(100)]  # fmt: skip
    timed = {**run, "steps": {1: rows}}
    assert fid.allocation_overheads(timed)["cold"][0] == pytest.approx(14.0 - 12.0)
    spec = {"name": "j", "model": "gpt-tiny", "global_batch": 8, "seq_len": 64, "steps": 100}
    # a checkpoint of 0.02 s beside steps of 0.12 s: a sixth of a step; on a device half as fast (another
    # attempt) both take twice as long, and it is still a sixth of a step there
    slow = [{**r, "attempt": 2, "wall_s": 0.24, "checkpoint_s": 2 * r["checkpoint_s"]} for r in rows]
    per = fid.checkpoint_steps([{**run, "steps": {1: rows + slow}}], {1: spec})
    assert list(per.values()) == [pytest.approx(1 / 6)]
    # a job of 100 steps writes 10 checkpoints; one of 15 steps (interval 1) 15; an unknown config the median
    extra = fid.checkpoint_work({"ids": [5, 6]}, {5: spec, 6: {**spec, "steps": 15, "global_batch": 4}}, per)
    assert extra == {5: pytest.approx(10 / 6), 6: pytest.approx(15 / 6)}


def test_a_resume_after_a_preemption_is_a_launch() -> None:
    # one GPU, Gavel time-sharing two long jobs: each swap preempts one and resumes the other. The service
    # releases a preempted gang's workers, so a resume launches cold (6 s) — not the 1 s a rescale that keeps
    # its workers pays
    one = parse_cluster(
        {"name": "one", "node_groups": [{"name": "a", "count": 1, "gpu": "A100-40GB", "gpus_per_node": 1}]}
    )
    long = {"model": "gpt-tiny", "global_batch": 8, "seq_len": 64, "steps": 400_000, "max_gpus": 1}
    jobs = [job_of(parse_job({**long, "name": f"j{i}"}), i + 1, t) for i, t in enumerate([0.0, 1.0])]
    sim = ReplaySimulator(
        one, jobs, speed_table(SpeedSource(one)), get_policy("gavel"),
        SimConfig(round_s=0.25, startup_s=6.0, record_allocations=True), restart_s=1.0, believed=RestartBelief(20.0),
        service_round_s=20.0,
    )  # fmt: skip
    res = sim.run()
    resumes = [e.paused_until_s - e.time_s for e in res.allocation_log if e.kind == "resume"]
    assert resumes and all(p == pytest.approx(6.0) for p in resumes), resumes

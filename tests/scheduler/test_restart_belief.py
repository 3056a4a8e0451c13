"""The restart-cost belief: one rule learns it from measured moves, live (kept on disk) and in a replay."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tessera.hardware.cluster import get_cluster
from tessera.jobs.spec import parse_job
from tessera.scheduler.policy import get_policy
from tessera.scheduler.restart import RestartBelief
from tessera.scheduler.speed import SpeedSource, job_of, speed_table
from tessera.service.scheduling import LiveCluster, SchedulingAdapter, load_restart_belief
from tessera.sim.replay import ReplaySimulator
from tessera.sim.simulator import SimConfig


def test_the_first_measured_move_replaces_the_guess_later_ones_average() -> None:
    b = RestartBelief(20.0)
    b = b.observed(2.0)
    assert (b.restart_s, b.moves_seen) == (2.0, 1)  # a guess is not data
    b = b.observed(4.0)
    assert (b.restart_s, b.moves_seen) == (3.0, 2)
    assert b.observed(-1.0).restart_s == 1.5  # a clock step backwards is no negative pause


def test_relaunches_are_learnt_apart_from_moves_that_keep_workers() -> None:
    b = RestartBelief(20.0)
    assert b.relaunch_cost_s == 20.0  # one configured guess for both
    b = b.observed(0.5).observed(4.0, relaunch=True)
    assert (b.restart_s, b.moves_seen, b.relaunch_cost_s, b.relaunches_seen) == (0.5, 1, 4.0, 1)
    b = b.observed(3.0, relaunch=True)
    assert (b.restart_s, b.relaunch_cost_s, b.relaunches_seen) == (0.5, 3.5, 2)
    with pytest.raises(ValueError, match="relaunches_seen"):
        RestartBelief(1.0, 0, 1.0, -1)


@pytest.mark.parametrize(("restart_s", "moves", "field"), [(-1.0, 0, "restart_s"), (float("inf"), 0, "restart_s"),
                                                            (float("nan"), 0, "restart_s"), (1.0, -1, "moves_seen")])  # fmt: skip
def test_a_bad_belief_names_its_field(restart_s: float, moves: int, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        RestartBelief(restart_s, moves)


def test_the_service_keeps_what_it_learnt_across_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "perf" / "restart_measured.json"
    live = LiveCluster.from_spec(get_cluster("local"))
    a = SchedulingAdapter(live, restart_cost_s=20.0, restart_path=path)
    assert a.restart_cost_s == 20.0 and not path.exists()
    a.observe_restart(3.0)
    a.observe_restart(5.0)
    assert a.restart_cost_s == 4.0
    # a new server on the same state starts from the learnt figure, not from its configured guess
    a.observe_restart(6.0, relaunch=True)
    assert a.restart_cost_s == 4.0 and a.core.relaunch_estimate(None) == 6.0  # type: ignore[arg-type, misc]
    b = SchedulingAdapter(live, restart_cost_s=20.0, restart_path=path)
    assert b.restart == RestartBelief(4.0, 2, 6.0, 1)
    assert b.core.restart_estimate(None) == 4.0  # type: ignore[arg-type, misc]
    assert b.core.relaunch_estimate(None) == 6.0  # type: ignore[arg-type, misc]


def test_an_unreadable_belief_falls_back_to_the_guess_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "restart_measured.json"
    path.write_text(json.dumps({"restart_s": -3, "moves_seen": 1}))
    with caplog.at_level(logging.WARNING):
        b = load_restart_belief(path, 20.0)
    assert b == RestartBelief(20.0)
    assert "restart_s" in caplog.text and str(path) in caplog.text


def _replay(belief_s: float | RestartBelief) -> ReplaySimulator:
    """A long job on the V100s while the A100s serve two short ones; once they finish, moving it pays only
    if a move is believed cheap."""
    cluster = get_cluster("local")
    specs = [
        {"name": "a", "model": "gpt-tiny", "global_batch": 8, "seq_len": 64, "steps": 400_000},
        {"name": "b", "model": "llama-tiny", "global_batch": 8, "seq_len": 64, "steps": 60_000},
        {"name": "c", "model": "llama-tiny", "global_batch": 8, "seq_len": 64, "steps": 30_000},
    ]
    jobs = [job_of(parse_job(s), i + 1, float(i)) for i, s in enumerate(specs)]
    sim = ReplaySimulator(
        cluster, jobs, speed_table(SpeedSource(cluster)), get_policy("tessera"),
        SimConfig(round_s=2.0, startup_s=3.0), restart_s=2.0,
        believed=belief_s if isinstance(belief_s, RestartBelief) else RestartBelief(belief_s),
    )  # fmt: skip
    sim.result = sim.run()  # type: ignore[attr-defined]
    return sim


def test_a_replay_learns_from_its_own_moves_by_the_live_rule() -> None:
    dear, cheap = _replay(20.0), _replay(1.0)
    assert not [d for d in dear.decisions if d.kind in ("rescale", "migrate")]
    assert dear.belief == RestartBelief(20.0)
    moves = [d for d in cheap.decisions if d.kind in ("rescale", "migrate")]
    assert moves, cheap.decisions
    # each move went to other nodes (V100s → A100s): no worker kept, so each was charged a cold launch (3 s), and
    # the belief folded each one into its relaunch figure (the first replacing the guess); the fast figure stays
    assert cheap.belief == RestartBelief(1.0, 0, 3.0, len(moves))
    jct = {s: {r.job_id: r.finish_s - r.arrival_s for r in s.result.jobs} for s in (dear, cheap)}  # type: ignore[attr-defined]
    assert jct[cheap][1] < jct[dear][1]


def test_a_move_to_other_gpu_types_is_weighed_at_the_relaunch_figure() -> None:
    """Moves that keep workers believed cheap, relaunches dear: the V100 → A100 move (other nodes) is not made,
    as when every move is believed dear."""
    sim = _replay(RestartBelief(1.0, 1, 20.0, 1))
    assert not [d for d in sim.decisions if d.kind in ("rescale", "migrate")], sim.decisions
    assert sim.belief == RestartBelief(1.0, 1, 20.0, 1)


def test_a_belief_kept_before_relaunches_were_told_apart_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "restart_measured.json"
    path.write_text(json.dumps({"restart_s": 3.0, "moves_seen": 2}))
    assert load_restart_belief(path, 20.0) == RestartBelief(3.0, 2, 3.0, 0)

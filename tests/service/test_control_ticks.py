"""The control loop decides on the wall clock's ticks, as the replay does: submissions that arrive within one
tick are decided in one round (not one round per submission), and no event round runs before the tick after
the event. Why: the fidelity bench replays the live run on ticks from a wall-clock origin; a live round run
the instant the first of two near-simultaneous submissions arrived decided them apart (and migrated one)."""

from __future__ import annotations

import math
import threading
import time

import pytest

from tessera.service.config import ServiceConfig
from tessera.service.controller import Controller
from tessera.service.store import Store

TICK_S = 0.2


@pytest.mark.timeout(120)
def test_event_rounds_fall_on_ticks_and_batch_a_tick(tmp_path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'jobs.db'}")
    ctl = Controller(store, ServiceConfig(state_dir=tmp_path / "state", tick_s=TICK_S, round_s=3600.0))
    rounds: list[float] = []
    ctl._round = lambda now, *, force, boundary: rounds.append(now)  # type: ignore[method-assign]
    ctl._next_round = math.inf  # no periodic round: only the wakes below ask for one
    thread = threading.Thread(target=ctl._loop, daemon=True)
    thread.start()
    try:
        deadline = time.time() + 60
        while not rounds and time.time() < deadline:  # the first iteration is on a tick; let it pass
            ctl.wake()
            time.sleep(0.01)
        conclusive = 0
        for _ in range(12):
            time.sleep(TICK_S * 2.5)
            before = len(rounds)
            # just after a tick, two wakes 10 ms apart: both fall before the next tick
            now = time.time()
            time.sleep(math.floor(now / TICK_S) * TICK_S + TICK_S + 0.02 - now)
            woke = time.time()
            ctl.wake()
            time.sleep(0.01)
            ctl.wake()
            second = time.time()
            next_tick = (math.floor(woke / TICK_S) + 1) * TICK_S
            time.sleep(TICK_S * 3)  # generous: a busy box may run the loop late, never early
            new = rounds[before:]
            assert new and new[0] >= next_tick - 1e-6, (new, next_tick)  # never before the tick after
            if second < next_tick:  # (this thread was not held past the tick between its two wakes)
                assert len(new) == 1, (new, woke, second)
                conclusive += 1
            if conclusive >= 3:
                break
        assert conclusive >= 1
    finally:
        ctl._stop.set()
        thread.join(10)
    assert not thread.is_alive()

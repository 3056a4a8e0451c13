"""What the scheduler believes a move costs, and the one rule that learns it from measured moves.

A policy weighs every rescale or migration against the pause it costs the job (checkpoint, teardown,
relaunch). The live service measures that pause on each move and the replay of a live run charges its own;
both fold what they see into a :class:`RestartBelief` by the same rule, so the replay's policy is told what the
live one was told, move after move. The service keeps its belief on disk (``service/scheduling.py``): a
restarted server starts from what it learnt, not from its configured guess again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# weight of the newest measurement: a move's pause on a shared machine moves 2-3x with what runs beside it,
# so one measurement does not replace the belief (after the first, which replaces the configured guess)
NEWEST_WEIGHT = 0.5


@dataclass(frozen=True)
class RestartBelief:
    """``restart_s``: the pause a move is believed to cost when workers of the job stay on the new allocation's
    nodes (the fast rescale keeps them); ``relaunch_s``: when none does and the gang starts afresh there (a
    migration to other nodes: about a cold launch — live, 3.5-3.9 s against 0.5 s for a fast rescale); None:
    the same figure as ``restart_s`` (one configured guess for both). ``moves_seen`` / ``relaunches_seen``: how
    many measured moves each folds in (0: the configured guess, replaced whole by the first measurement — a
    guess is not data)."""

    restart_s: float
    moves_seen: int = 0
    relaunch_s: float | None = None
    relaunches_seen: int = 0

    def __post_init__(self) -> None:
        if self.relaunch_s is None:
            object.__setattr__(self, "relaunch_s", self.restart_s)
        for name in ("restart_s", "relaunch_s"):
            v = getattr(self, name)
            if not (v >= 0.0) or v == float("inf"):
                raise ValueError(f"{name}: must be a finite number >= 0, got {v!r}")
        for name in ("moves_seen", "relaunches_seen"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)!r}")

    @property
    def relaunch_cost_s(self) -> float:
        """``relaunch_s`` as a float (set from ``restart_s`` when not given)."""
        assert self.relaunch_s is not None
        return self.relaunch_s

    def observed(self, pause_s: float, *, relaunch: bool = False) -> RestartBelief:
        """The belief after one more measured move that paused its job ``pause_s`` seconds (``relaunch``: no
        worker was kept, the gang started afresh)."""
        if relaunch:
            s, n = _fold(self.relaunch_cost_s, self.relaunches_seen, pause_s)
            return replace(self, relaunch_s=s, relaunches_seen=n)
        s, n = _fold(self.restart_s, self.moves_seen, pause_s)
        return replace(self, restart_s=s, moves_seen=n)


def _fold(belief_s: float, seen: int, pause_s: float) -> tuple[float, int]:
    """One figure of the belief after one more measurement: the first replaces the guess, later ones average."""
    pause_s = max(0.0, pause_s)
    if seen == 0:
        return pause_s, 1
    return (1.0 - NEWEST_WEIGHT) * belief_s + NEWEST_WEIGHT * pause_s, seen + 1

"""What the scheduler believes a move costs, and the one rule that learns it from measured moves.

A policy weighs every rescale or migration against the pause it costs the job (checkpoint, teardown,
relaunch). The live service measures that pause on each move and the replay of a live run charges its own;
both fold what they see into a :class:`RestartBelief` by the same rule, so the replay's policy is told what the
live one was told, move after move. The service keeps its belief on disk (``service/scheduling.py``): a
restarted server starts from what it learnt, not from its configured guess again.
"""

from __future__ import annotations

from dataclasses import dataclass

# weight of the newest measurement: a move's pause on a shared machine moves 2-3x with what runs beside it,
# so one measurement does not replace the belief (after the first, which replaces the configured guess)
NEWEST_WEIGHT = 0.5


@dataclass(frozen=True)
class RestartBelief:
    """``restart_s``: the pause a move is believed to cost; ``moves_seen``: how many measured moves it folds in
    (0: the configured guess, replaced whole by the first measurement — a guess is not data)."""

    restart_s: float
    moves_seen: int = 0

    def __post_init__(self) -> None:
        if not (self.restart_s >= 0.0) or self.restart_s == float("inf"):
            raise ValueError(f"restart_s: must be a finite number >= 0, got {self.restart_s!r}")
        if self.moves_seen < 0:
            raise ValueError(f"moves_seen: must be >= 0, got {self.moves_seen!r}")

    def observed(self, pause_s: float) -> RestartBelief:
        """The belief after one more measured move that paused its job ``pause_s`` seconds."""
        pause_s = max(0.0, pause_s)
        if self.moves_seen == 0:
            return RestartBelief(pause_s, 1)
        return RestartBelief(
            (1.0 - NEWEST_WEIGHT) * self.restart_s + NEWEST_WEIGHT * pause_s, self.moves_seen + 1
        )

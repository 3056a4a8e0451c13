"""Job states and pending reasons, as users of SLURM / Kueue / Ray expect them.

``PENDING(reason) → STARTING → RUNNING ↔ RESIZING | MIGRATING | RECOVERING → SUCCEEDED | FAILED | CANCELLED``.
A pending job always carries a reason (``Resources``, ``Priority``, ``Infeasible: …``), the thing users miss
most in Ray Jobs.
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    PENDING = "PENDING"  # waiting for the scheduler to give it GPUs (see the reason)
    STARTING = "STARTING"  # placement group and one actor per device being created
    RUNNING = "RUNNING"
    RESIZING = "RESIZING"  # checkpoint → tear down → relaunch on more or fewer GPUs
    MIGRATING = "MIGRATING"  # the same, onto other GPU types or nodes
    RECOVERING = "RECOVERING"  # a worker failed (or the server restarted): relaunch from the last checkpoint
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL

    @property
    def active(self) -> bool:
        """Holds (or is about to hold) GPUs."""
        return self in ACTIVE


TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
ACTIVE = frozenset(
    {JobState.STARTING, JobState.RUNNING, JobState.RESIZING, JobState.MIGRATING, JobState.RECOVERING}
)


class Reason:
    """Pending reasons (SLURM's NODELIST(REASON), Kueue's admission conditions)."""

    RESOURCES = "Resources"  # fits the cluster, not the GPUs free now
    PRIORITY = "Priority"  # a job of higher priority (or earlier, at equal priority) waits for the same GPUs
    INFEASIBLE = "Infeasible"  # no GPU type / count of this cluster can hold it (followed by why)
    BACKOFF = "Backoff"  # failed recently; relaunched after the backoff
    NEW = "Submitted"  # not yet seen by a scheduling round
    NO_SCHEDULER = "NoScheduler"  # the server runs without a scheduler (API-only role)

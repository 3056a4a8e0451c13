"""Job states, pending reasons, why a gang stopped, and which state changes are legal.

``PENDING(reason) → STARTING → RUNNING ↔ RESIZING | MIGRATING | RECOVERING → SUCCEEDED | FAILED | CANCELLED``.
A pending job always carries a reason (``Resources``, ``Priority``, ``Preempted``, ``Infeasible: …``), the thing
users miss most in Ray Jobs. The lifecycle is an explicit state machine: :data:`TRANSITIONS` lists every legal
change and the store refuses any other (:func:`check_transition`), so a controller bug surfaces as an error
naming the job and both states instead of a job silently resurrected from a terminal state.
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    PENDING = "PENDING"  # waiting for the scheduler to give it GPUs (see the reason)
    STARTING = "STARTING"  # placement group and one actor per device being created
    RUNNING = "RUNNING"
    RESIZING = (
        "RESIZING"  # checkpoint → tear down → relaunch on other GPU counts or types (the core's rescale)
    )
    MIGRATING = "MIGRATING"  # the same, onto the same GPU counts and types on other nodes
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

_S = JobState
_ENDS = frozenset({_S.SUCCEEDED, _S.FAILED, _S.CANCELLED})
# Every legal change of state (staying in a state is always legal: a reason or a counter changes). Why each:
#   PENDING → STARTING (launched) | FAILED (its model source cannot be loaded at launch) | CANCELLED
#   STARTING/RUNNING/RECOVERING → RUNNING (every rank ready) | RESIZING | MIGRATING (a scheduling change)
#           | PENDING (preempted) | RECOVERING (a worker failed, its node was lost, the server stopped) | an end
#   RESIZING/MIGRATING → STARTING | RECOVERING (relaunched) | PENDING (preempted instead) | an end
#           | RUNNING (a restarted server reattached to the gang on an external cluster: the stop was abandoned)
#   a terminal state → nothing
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    _S.PENDING: frozenset({_S.STARTING, _S.FAILED, _S.CANCELLED}),
    _S.STARTING: frozenset({_S.RUNNING, _S.RESIZING, _S.MIGRATING, _S.PENDING, _S.RECOVERING}) | _ENDS,
    _S.RUNNING: frozenset({_S.RESIZING, _S.MIGRATING, _S.PENDING, _S.RECOVERING}) | _ENDS,
    _S.RESIZING: frozenset({_S.STARTING, _S.RECOVERING, _S.PENDING, _S.MIGRATING, _S.RUNNING}) | _ENDS,
    _S.MIGRATING: frozenset({_S.STARTING, _S.RECOVERING, _S.PENDING, _S.RESIZING, _S.RUNNING}) | _ENDS,
    _S.RECOVERING: frozenset({_S.RUNNING, _S.RESIZING, _S.MIGRATING, _S.PENDING}) | _ENDS,
    _S.SUCCEEDED: frozenset(),
    _S.FAILED: frozenset(),
    _S.CANCELLED: frozenset(),
}


class IllegalTransition(ValueError):
    """A job was asked to change state in a way the lifecycle does not allow (a controller bug)."""


def check_transition(old: JobState, new: JobState, job_id: int | None = None) -> None:
    """Raise :class:`IllegalTransition` naming the job and both states unless ``old → new`` is legal."""
    if old == new or new in TRANSITIONS[old]:
        return
    allowed = ", ".join(sorted(TRANSITIONS[old])) or "nothing (terminal)"
    who = f"job {job_id}" if job_id is not None else "a job"
    raise IllegalTransition(f"{who}: state {old} → {new} is not allowed (from {old}: {allowed})")


class StopReason(StrEnum):
    """Why a gang ended (the allocation history's ``end_reason`` starts with this value)."""

    COMPLETED = "finished"  # every step done
    CANCELLED = "cancelled"  # the user cancelled
    PREEMPTED = "preempt"  # the scheduler took its GPUs for another job; back to PENDING (Preempted)
    RESIZE = "resize"  # checkpoint → relaunch on other GPU counts or types
    MIGRATE = "migrate"  # checkpoint → relaunch on the same GPU counts and types on other nodes
    FAILED = "failed"  # a worker died, raised or hung: relaunch from the checkpoint unless out of restarts
    DIVERGED = "diverged"  # a NaN or infinite loss: FAILED at once, never relaunched
    NODE_LOST = "node lost"  # its node left the cluster: relaunch elsewhere
    SERVER_STOPPED = "server stopped"  # a clean server stop checkpointed it: the next server relaunches it
    SERVER_RESTART = "server restart"  # the server died under it: relaunched from the checkpoint on disk

    @property
    def relaunches(self) -> bool:
        """Whether the job goes on after a stop for this reason (vs. ending it)."""
        return self not in (StopReason.COMPLETED, StopReason.CANCELLED, StopReason.DIVERGED)


class Reason:
    """Pending reasons (SLURM's NODELIST(REASON), Kueue's admission conditions)."""

    RESOURCES = "Resources"  # fits the cluster, not the GPUs free now
    PRIORITY = "Priority"  # a job of higher priority (or earlier, at equal priority) waits for the same GPUs
    INFEASIBLE = "Infeasible"  # no GPU type / count of this cluster can hold it (followed by why)
    BACKOFF = "Backoff"  # failed recently; relaunched after the backoff
    PREEMPTED = "Preempted"  # was running; its GPUs went to another job (followed by what it waits for now)
    NEW = "Submitted"  # not yet seen by a scheduling round
    NO_SCHEDULER = "NoScheduler"  # the server runs without a scheduler (API-only role)

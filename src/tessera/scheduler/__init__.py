"""The scheduler shared by the simulator and the live service: state, knowledge, placement, policies, core.

* :mod:`~tessera.scheduler.state` — ``Job`` (keyed by its ``JobConfig``), ``JobState``, ``Allocation``, ``ClusterState``
* :mod:`~tessera.scheduler.knowledge` — what policies know of job speed (DP-only data, Cells) and the truth
* :mod:`~tessera.scheduler.speed` — the one speed source behind it, shared by the simulator and the service
* :mod:`~tessera.scheduler.placement` — Frenzy's HAS best-fit with topology awareness
* :mod:`~tessera.scheduler.policy` — the ``Policy`` interface, ``SchedulingContext``, the registry
* :mod:`~tessera.scheduler.core` — the ``Scheduler`` state machine (events, rounds, validate, bind)
* :mod:`~tessera.scheduler.testing` — simulator-free helpers to test a policy
* ``policies/`` — one file per policy
"""

from tessera.scheduler.core import Change, RoundResult, Scheduler
from tessera.scheduler.knowledge import CellOption, Knowledge, PerfTable
from tessera.scheduler.policy import (
    Candidate,
    Decision,
    PhasedPolicy,
    Policy,
    PolicyError,
    RoundEvents,
    SchedulingContext,
    get_policy,
    policy_names,
    register,
)
from tessera.scheduler.state import (
    Allocation,
    ClusterState,
    GPUs,
    Job,
    JobConfig,
    JobState,
    JobStatus,
    NodeInfo,
    gpus_of,
)

__all__ = [
    "Allocation",
    "Candidate",
    "CellOption",
    "Change",
    "ClusterState",
    "Decision",
    "GPUs",
    "Job",
    "JobConfig",
    "JobState",
    "JobStatus",
    "Knowledge",
    "NodeInfo",
    "PerfTable",
    "PhasedPolicy",
    "Policy",
    "PolicyError",
    "RoundEvents",
    "RoundResult",
    "Scheduler",
    "SchedulingContext",
    "get_policy",
    "gpus_of",
    "policy_names",
    "register",
]

"""What ``tessera submit --dry-run`` (and ``POST /api/jobs/dry-run``) shows: the scheduler's own next decision.

:meth:`SchedulingAdapter.dry_run <tessera.service.scheduling.SchedulingAdapter.dry_run>` submits the job to a
copy of the live scheduler and runs the active policy's next round there; this module turns that round into
the report: the Cell the job would be given (with its Plan pinned to the GPUs it would get), or the reason it
would wait — beside every Cell of the job on the whole cluster, ranked by estimate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tessera.jobs import JobSpec
from tessera.plan import Plan
from tessera.scheduler.speed import CellChoice, JobSpeed
from tessera.service.slots import Assignment
from tessera.service.states import Reason

if TYPE_CHECKING:
    from tessera.service.scheduling import Round


@dataclass(frozen=True)
class DryRun:
    """The job's next round. ``chosen_now``: the next round starts it on ``chosen`` (``slots``); otherwise
    ``reason`` says why it would wait and ``chosen`` is its fastest Cell on the whole cluster (None when
    none can run it)."""

    job: JobSpec
    cells: list[CellChoice]
    chosen: CellChoice | None
    chosen_now: bool
    plan: Plan | None
    estimate: dict[str, Any]
    estimated_time_s: float | None
    reason: str | None
    slots: tuple[dict[str, Any], ...] = ()
    others: tuple[dict[str, Any], ...] = field(default=())  # what the same round does to other jobs

    def to_dict(self, top: int = 10) -> dict[str, Any]:
        return {
            "job": self.job.name,
            "model": self.job.model,
            "cells": [
                {
                    "cell": c.label,
                    "gpus": c.gpus,
                    "n_gpus": c.n_gpus,
                    "n_stages": int(c.shape.n_stages),
                    "iteration_time_s": c.iteration_time_s,
                    "samples_per_s": c.samples_per_s,
                    "max_device_bytes": c.max_device_bytes,
                    "feasible": c.feasible,
                }
                for c in self.cells[:top]
            ],
            "chosen": self.chosen.label if self.chosen else None,
            "chosen_now": self.chosen_now,
            "plan": self.plan.to_dict() if self.plan else None,
            "estimate": self.estimate,
            "estimated_time_s": self.estimated_time_s,
            "reason": self.reason,
            "slots": list(self.slots),
            "others": list(self.others),
        }


def dry_run_of(spec: JobSpec, speed: JobSpeed, r: Round, job_id: int, got: Assignment | None) -> DryRun:
    """The report of round ``r`` (run on a copy, the job submitted as ``job_id``) for the job: ``got`` is the
    Assignment the round gave it (None: it waits, with ``r.reasons[job_id]``)."""
    ranked = speed.ranked()
    others = tuple({"job": c.job_id, "kind": c.kind, "note": c.note} for c in r.changes if c.job_id != job_id)
    if got is not None:
        chosen = speed.choice(_gpus(got), got.plan.n_stages)
        return DryRun(
            spec, ranked, chosen, True, got.plan, dict(got.estimate), got.estimate_iter_s * spec.total_steps,
            None, tuple(s.to_dict() for s in got.slots), others,
        )  # fmt: skip
    reason = r.reasons.get(job_id) or Reason.RESOURCES
    best = None if reason.startswith(Reason.INFEASIBLE) else next((c for c in ranked if c.feasible), None)
    plan, estimate, total = None, {}, None
    if best is not None:
        tuned = speed.tuned(best.shape.gpus, int(best.shape.n_stages))
        if tuned is not None:
            plan, estimate = tuned.plan, tuned.estimate.to_dict()
            total = tuned.estimate.iteration_time_s * spec.total_steps
    return DryRun(spec, ranked, best, False, plan, estimate, total, reason, (), others)


def _gpus(a: Assignment) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(a.gpus.items()))


__all__ = ["DryRun", "dry_run_of"]

"""From a job spec to a Plan: the job's Cells on a cluster, ranked by estimate, and the tuned plan of the best.

This is what ``tessera plan`` and ``tessera.plan()`` run. The scheduler will ask the same
:class:`~tessera.planning.cells.CellEstimator` for Cells; here the job simply takes the best ones that exist.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tessera.hardware import ClusterSpec, get_cluster, get_gpu
from tessera.jobs import JobSpec, load_job
from tessera.models.spec import ModelSpec
from tessera.nn.resolve import resolve_spec
from tessera.perf.costmodel import CostModel
from tessera.perf.extras import StepExtras
from tessera.planning.cells import Cell, CellEstimator, CellShape, job_shapes, rank_cells, stage_counts
from tessera.planning.space import TrainSettings
from tessera.planning.tuner import TuneResult, tune

TUNED_CELLS = 3  # the best Cells by estimate that get tuned; the best tuned plan wins

_GPUS_ITEM = re.compile(r"^\s*(\d+)\s*[xX×]\s*(\S+?)\s*$")


def parse_gpus(text: str, flag: str = "--gpus") -> dict[str, int]:
    """``4xA100-40GB,4xV100-32GB`` → {"A100-40GB": 4, "V100-32GB": 4} (catalog names; errors name the item)."""
    out: dict[str, int] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        m = _GPUS_ITEM.match(item)
        if not m:
            raise ValueError(f"{flag}: {item.strip()!r} is not COUNTxTYPE (e.g. 4xA100-40GB)")
        n = int(m.group(1))
        if n < 1:
            raise ValueError(f"{flag}: {item.strip()!r} needs a count >= 1")
        try:
            name = get_gpu(m.group(2)).name
        except KeyError as e:
            raise ValueError(f"{flag}: {e.args[0] if e.args else e}") from None
        out[name] = out.get(name, 0) + n
    if not out:
        raise ValueError(f"{flag}: no GPUs given")
    return out


def settings_for(job: JobSpec, spec: ModelSpec) -> TrainSettings:
    return TrainSettings(
        model=job.model,
        global_batch=job.global_batch,
        seq_len=job.seq_len or spec.seq_len,
        precision=job.precision,
        optimizer=job.optimizer,
    )


@dataclass(frozen=True)
class PlanningResult:
    """The ranked Cells of a job and the tuned plan of the best of them (None when nothing fits)."""

    job: JobSpec
    cells: tuple[Cell, ...]
    chosen: TuneResult | None

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        cells = self.cells[:top] if top else self.cells
        out: dict[str, Any] = {
            "job": self.job.name,
            "model": self.job.model,
            "cells": [c.to_dict() for c in cells],
        }
        if self.chosen is not None:
            e = self.chosen.estimate
            out["chosen"] = {
                "cell": self.chosen.cell.label,
                "iteration_time_s": e.iteration_time_s,
                "samples_per_s": e.samples_per_s,
                "mfu": e.mfu,
                "feasible": e.feasible,
                "clip_s": e.clip_s,
                "validation_s": e.validation_s,
                "evaluations": self.chosen.evaluations,
                "plan": self.chosen.plan.to_dict(),
            }
        return out


def _available(cluster: ClusterSpec, gpus: Mapping[str, int] | None) -> dict[str, int]:
    have = cluster.gpu_counts()
    if gpus is None:
        return dict(have)
    for t, n in gpus.items():
        if have.get(t, 0) < n:
            raise ValueError(f"--gpus: cluster {cluster.name} has {have.get(t, 0)} {t}, asked for {n}")
    return dict(gpus)


def plan_job(
    job: JobSpec | str | Path,
    cluster: ClusterSpec | str = "local",
    gpus: Mapping[str, int] | str | None = None,
    *,
    cost: CostModel | None = None,
    guided: bool = True,
    mixes: bool = True,
    estimator: CellEstimator | None = None,
    extras: StepExtras | None = None,
) -> PlanningResult:
    """Rank the job's Cells on ``cluster`` (only within ``gpus`` when given, e.g. ``"4xA100-40GB"``) and tune
    the best ones; the chosen plan is the fastest feasible tuned plan.

    Plans are ranked by the job's whole step: with its gradient clipping and validation passes
    (``extras``; default :meth:`StepExtras.of_job` of the job, which prices a ``data.val_fraction`` split at
    the one batch the runtime runs at least — a caller that can read the dataset passes its packed sequence
    count through ``StepExtras.of_job(job, dataset_sequences=)``, as ``tessera plan`` does). An
    ``estimator`` given prices with its own extras."""
    job = job if isinstance(job, JobSpec) else load_job(job)
    cl = cluster if isinstance(cluster, ClusterSpec) else get_cluster(cluster)
    asked = parse_gpus(gpus) if isinstance(gpus, str) else gpus
    available = _available(cl, asked)
    spec = resolve_spec(job.model, job.seq_len)
    settings = settings_for(job, spec)
    if extras is None:
        extras = StepExtras.of_job(job)
    est = estimator or CellEstimator(spec, settings, cl, cost, recompute=job.recompute, extras=extras)
    shapes = set(
        job_shapes(
            spec, settings, available, prefer=job.gpu_types, exclude=job.exclude_gpu_types,
            max_gpus=job.max_gpus, mixes=mixes,
        )
    )  # fmt: skip
    if asked is not None:  # the GPUs asked for, all of them, at every stage count
        n = sum(asked.values())
        shapes |= {CellShape.of(asked, S) for S in stage_counts(n, spec.n_layers, settings.global_batch)}
    cells = rank_cells(est.estimate_many(sorted(shapes)))
    tuned = [t for c in cells[:TUNED_CELLS] if c.feasible and (t := tune(est, c.shape, guided=guided))]
    tuned = [t for t in tuned if t.estimate.feasible]
    chosen = min(tuned, key=lambda t: t.iteration_time_s) if tuned else None
    return PlanningResult(job=job, cells=tuple(cells), chosen=chosen)

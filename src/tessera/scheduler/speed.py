"""The one speed source of both backends: for a job configuration and GPUs, what a policy may know and what
is true.

Crius §8.1: baselines decide with data-parallel-only data while every job runs with the best plan for its
allocation. So, per configuration (:class:`~tessera.scheduler.state.JobConfig`) and GPUs:

* **Cell estimate** (Crius §5.1) — :meth:`CellEstimator.estimate` of (GPUs, stages): what Cell policies
  schedule with;
* **DP-only** — the one-stage Cell's pure data-parallel variant (dp = n, tp = 1) at the cheapest memory setting
  that fits (recompute, ZeRO-1: still data parallelism): what the baselines profile;
* **truth** — the tuned plan (Crius §5.2) of the best ``tuned_cells`` Cells on those GPUs by estimate, the
  fastest of them: "the best plan for its allocation" — what the simulator runs a job at, and what the service
  launches (a user model's plan is its own annotations, balanced to the devices).

In the live service every figure is also multiplied by the configuration's *speed factor* on those GPUs'
types: estimated ÷ measured iteration time (:class:`~tessera.scheduler.factors.SpeedFactors`: measured
there, else carried over from other types or other configurations), so relative speeds stay the estimator's
while absolute time is what was measured. The simulator sets no factors (1.0).

Rates are iterations/s of the job's global batch (0.0: does not fit, or not allowed for the job). The
:class:`~tessera.scheduler.knowledge.PerfTable` in front of :class:`SpeedSource` memoizes them; policies see
its :class:`~tessera.scheduler.knowledge.KnowledgeView` (never the truth).

Models: zoo names and Hugging Face ``config.json`` paths resolve here; a user's own model (``entrypoint``) needs
a :class:`ModelSource` from the backend that may load user code (the service's), which also supplies its
annotation-derived stage count and Plan. A configuration's ``exclude_gpu_types`` / ``max_gpus`` make other
GPUs "not allowed" (rate 0).

Estimating a configuration's grid costs seconds, so :func:`cell_table` estimates it fast and saves it:

* **fast, exact** — :class:`FastCellEstimator` is the planner's estimator on :class:`FastStageSpace` spaces,
  which find the fastest combination of per-stage options with an exact bottleneck-bound program instead of
  listing up to 2^20 combinations, and price the memory of a whole space (and, in :func:`warm_config`, of every
  GPU type, count and stage count of the grid) in one vectorized formula call. The figures are the planner's
  (``tests/scheduler/test_speed_fast.py``); the service uses the same estimator.
* **parallel per configuration** — one pool task per configuration, largest model first, so the workers
  finish together and progress is reported per configuration; an interrupt terminates the workers (they also
  die with their parent).
* **cached by what it depends on** — under ``$TESSERA_HOME/sim/`` (or ``~/.cache/tessera/sim``), keyed by
  :func:`table_digest`: the GPU types' catalog entries and node shapes (not node counts), the calibration and
  the source of every package the figures come from — one cache for every trace and for presets that share
  their node shapes (``crius-sim-1280`` and ``crius-sim-12800``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from tessera.hardware import ClusterSpec, get_gpu
from tessera.jobs import JobSpec
from tessera.perf.extras import StepExtras
from tessera.plan import Device, Plan
from tessera.planning.cells import CellEstimator
from tessera.planning.space import StageSpace
from tessera.scheduler.factors import SpeedFactors
from tessera.scheduler.knowledge import PerfTable
from tessera.scheduler.state import GPUs, Job, JobConfig, as_config

DIGEST_PACKAGES = ("hardware", "models", "memory", "perf", "planning")
CACHE_VERSION = 1
YEAR_S = 365 * 24 * 3600.0  # a job whose best Cell needs longer than this is reported infeasible

# errors the planning layer raises on a Cell it cannot lay out: the Cell counts as infeasible
_CELL_ERRORS = (AssertionError, ValueError, KeyError, ArithmeticError)


class ConfigError(ValueError):
    """A configuration cannot be planned at all (its model cannot be loaded or the planner fails on it);
    ``field`` names the job spec field to fix."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def config_of(spec: JobSpec) -> JobConfig:
    """The configuration key of a job spec: the fields its speed depends on (its clipping and validation too:
    :class:`~tessera.perf.extras.StepExtras`)."""
    extras = StepExtras.of_job(spec)
    return JobConfig(
        model=spec.model,
        global_batch=spec.global_batch,
        seq_len=spec.seq_len,
        precision=spec.precision,
        optimizer=spec.optimizer,
        recompute=spec.recompute,
        entrypoint=spec.entrypoint,
        gpu_types=tuple(spec.gpu_types),
        exclude_gpu_types=tuple(spec.exclude_gpu_types),
        max_gpus=spec.max_gpus,
        grad_clip=extras.grad_clip,
        val_every_steps=extras.val_every_steps,
        val_batches=extras.val_batches,
    )


def extras_of(config: JobConfig) -> StepExtras | None:
    """The training extras a configuration prices (None: none). Validation is amortized as one every
    ``val_every_steps`` steps: a configuration is shared by jobs of any length."""
    if not (config.grad_clip or config.val_batches):
        return None
    return StepExtras(
        grad_clip=config.grad_clip, val_every_steps=config.val_every_steps, val_batches=config.val_batches
    )


def job_of(spec: JobSpec, job_id: int, arrival_s: float) -> Job:
    """The scheduler core's job for a job spec submitted at ``arrival_s`` — what the service schedules, and
    what a simulator replay of the service's arrivals must feed its core to decide alike."""
    return Job(
        job_id=job_id,
        model=spec.model,
        global_batch=spec.global_batch,
        arrival_s=arrival_s,
        total_iterations=float(spec.total_steps),
        requested_type=spec.gpu_types[0] if spec.gpu_types else None,
        deadline_s=(arrival_s + spec.deadline_s) if spec.deadline_s else None,
        name=spec.name,
        priority=spec.priority,
        config=config_of(spec),
    )


# ---------------------------------------------------------------------------------------------- models
class ModelSource(Protocol):
    """Where a configuration's model comes from. The default (:class:`CatalogModels`) knows zoo names and
    Hugging Face configs; a backend that may import user code supplies one that also knows entrypoints."""

    def spec(self, config: JobConfig) -> Any:
        """The analytic ModelSpec (raises ConfigError or a ValueError with ``field`` / ``reason``)."""
        ...

    def annotation_stage_count(self, config: JobConfig) -> int | None:
        """A user model's stage count from its Whale annotations (None: not annotated, or not a user model)."""
        ...

    def entry_plan(self, config: JobConfig, devices: Sequence[Device], n_stages: int, seq_len: int) -> Plan:
        """A user model's Plan on ``devices`` (raises ValueError when it has none there)."""
        ...


class CatalogModels:
    """Zoo models and Hugging Face ``config.json`` paths; no user code."""

    def spec(self, config: JobConfig) -> Any:
        if config.entrypoint:
            raise ConfigError("entrypoint", "a user model is planned only where its code may be loaded")
        from tessera.nn.resolve import resolve_spec

        try:
            return resolve_spec(config.model, config.seq_len)
        except (KeyError, ValueError) as e:
            raise ConfigError("model", e.args[0] if isinstance(e, KeyError) and e.args else str(e)) from None

    def annotation_stage_count(self, config: JobConfig) -> int | None:
        return None

    def entry_plan(self, config: JobConfig, devices: Sequence[Device], n_stages: int, seq_len: int) -> Plan:
        raise ValueError("no user model here")


# ---------------------------------------------------------------------------------------------- per configuration
@dataclass(frozen=True)
class CellChoice:
    """One Cell of a job on the whole cluster with its estimate (what a dry run lists)."""

    shape: Any  # planning.cells.CellShape
    iteration_time_s: float
    samples_per_s: float
    max_device_bytes: float
    feasible: bool

    @property
    def gpus(self) -> dict[str, int]:
        return dict(self.shape.gpus)

    @property
    def n_gpus(self) -> int:
        return int(self.shape.n_gpus)

    @property
    def label(self) -> str:
        return str(self.shape.label)


@dataclass(frozen=True)
class Tuned:
    """The Plan chosen inside a Cell (devices packed, not yet pinned to GPUs) with its estimate."""

    plan: Plan
    estimate: Any  # perf.estimate.Estimate
    label: str


def packed_devices(cluster: ClusterSpec, gpus: Mapping[str, int]) -> list[Device]:
    """Devices of these types packed node by node in the cluster's order, largest memory first (Whale: the
    first pipeline stages hold the most activations); ranks in that order."""
    out: list[Device] = []
    for t in sorted(gpus, key=lambda t: (-get_gpu(t).memory_bytes, t)):
        left = gpus[t]
        for node in cluster.nodes():
            if node.gpu_type != t or left <= 0:
                continue
            for k in range(min(left, node.n_gpus)):
                out.append(Device(len(out), t, node=node.name, local_index=k))
            left -= min(left, node.n_gpus)
        for k in range(left):
            out.append(Device(len(out), t, node=f"{t.lower()}-extra", local_index=k))
    return out


# ---------------------------------------------------------------------------------------------- fast assembly
# Below this many combinations a space is enumerated outright (cheaper than the threshold program's set-up).
_SMALL_ENUMERATION = 512


def _min_combination(
    t: Sequence[np.ndarray],
    sync: Sequence[np.ndarray],
    p2p: Sequence[np.ndarray],
    mask: Sequence[np.ndarray],
    B: int,
) -> tuple[float, list[int]] | None:
    """The exact minimum over per-stage options (``mask[s]`` allowed) of

        Σ_s t_s + (B − 1) · max_s t_s + max_s sync_s + 2 · Σ_s p2p(s, s + 1)

    and its options, without listing the combinations: for every pair of bounds (τ on the stage time, σ on
    the tail) a Viterbi pass (vectorized over all pairs) minimizes Σ t + 2 Σ p2p over options within both
    bounds; the best pair's ``value + (B − 1) τ + σ`` is the minimum, since the optimum's own maxima are one of
    the pairs and every pass's path costs at most its bound. None when a stage allows no option."""
    S = len(t)
    if any(not m.any() for m in mask):
        return None
    t_lo = max(float(t[s][mask[s]].min()) for s in range(S))
    y_lo = max(float(sync[s][mask[s]].min()) for s in range(S))
    taus = np.unique(np.concatenate([t[s][mask[s]] for s in range(S)]))
    taus = taus[taus >= t_lo]
    sigmas = np.unique(np.concatenate([sync[s][mask[s]] for s in range(S)]))
    sigmas = sigmas[sigmas >= y_lo]
    tau = np.repeat(taus, len(sigmas))[:, None]  # every (τ, σ) pair, one row each
    sig = np.tile(sigmas, len(taus))[:, None]
    inf = np.inf
    cost = np.where(mask[0] & (t[0] <= tau) & (sync[0] <= sig), t[0], inf)
    back: list[np.ndarray] = []
    for s in range(1, S):
        trans = cost[:, :, None] + 2.0 * p2p[s - 1][None, :, :]
        arg = np.argmin(trans, axis=1)
        # (the minimum is the element argmin points at: the same float, without gathering it back)
        cost = trans.min(axis=1) + np.where(mask[s] & (t[s] <= tau) & (sync[s] <= sig), t[s], inf)
        back.append(arg)
    end = np.argmin(cost, axis=1)
    value = cost.min(axis=1) + (B - 1) * tau[:, 0] + sig[:, 0]
    row = int(np.argmin(value))
    if not np.isfinite(value[row]):
        return None
    path = [int(end[row])]
    for arg in reversed(back):
        path.append(int(arg[row, path[-1]]))
    path.reverse()
    times = [float(t[s][path[s]]) for s in range(S)]
    total = sum(times) + (B - 1) * max(times) + max(float(sync[s][path[s]]) for s in range(S))
    total += sum(2.0 * float(p2p[s][path[s], path[s + 1]]) for s in range(S - 1))
    return total, path


class FastStageSpace(StageSpace):
    """A :class:`~tessera.planning.space.StageSpace` whose enumeration branch is replaced by the exact
    bottleneck-bound program of :func:`_min_combination`: the same fastest feasible combination (and the same
    fastest one ignoring memory) as listing every combination, at a cost linear in the stage count instead of
    exponential. Spaces past ``MAX_ENUMERATED`` combinations keep the planner's own threshold search, so every
    figure equals the planner's (up to ties between equally fast combinations)."""

    _warmed = False
    _owner: Any = None  # (estimator, Cell shape) when a FastCellEstimator made the space

    def stage_cost(self, s: int, j: int) -> Any:
        """As the planner's, but a first miss whose memory is not priced yet prices the memory of every
        option of the space in one formula call (the tuner then asks for most of them one by one) — and of
        the spaces the tuner tries next (:meth:`FastCellEstimator.warm_tuning`); a miss whose memory a bulk
        call already priced (:meth:`FastCellEstimator.warm_grid`) prices nothing more."""
        hit = self._costs.get((s, j))
        if hit is not None:
            return hit
        if not self._warmed and (s, j) not in self._priced:
            self._warmed = True
            if self._owner is not None:
                self._owner[0].warm_tuning(self._owner[1], self.rung, self.micro_batches)
            else:
                self.warm_memory()
        return super().stage_cost(s, j)

    def assemble(self, allowed: Sequence[Sequence[int]] | None = None) -> Any:
        from tessera.planning.space import MAX_ENUMERATED, Choice

        allowed = [list(a) for a in (allowed or [range(len(o)) for o in self.options])]
        total = math.prod(len(a) for a in allowed)
        if any(not a for a in allowed):
            return None
        if total <= _SMALL_ENUMERATION or total > MAX_ENUMERATED or self.virtual_stages > 1 or self.extras:
            # (interleaved, or a job's clipping and validation: the planner's own assembly prices them)
            return super().assemble(allowed)
        self.warm_memory([(s, j) for s, a in enumerate(allowed) for j in a])
        S = self.n_stages
        costs = [[self.stage_cost(s, j) for j in a] for s, a in enumerate(allowed)]
        t = [np.array([c.time_s for c in cs]) for cs in costs]
        sync = [np.array([c.tail_s for c in cs]) for cs in costs]
        ok = [np.array([c.feasible for c in cs]) for cs in costs]
        p2p = [
            np.array([[self.p2p(s, j, k) for k in allowed[s + 1]] for j in allowed[s]]) for s in range(S - 1)
        ]
        free = [np.ones(len(a), dtype=bool) for a in allowed]
        fastest = _min_combination(t, sync, p2p, free, self.micro_batches)
        assert fastest is not None
        fits = _min_combination(t, sync, p2p, ok, self.micro_batches)
        it, path = fits if fits is not None else fastest
        return Choice(
            options=tuple(allowed[s][path[s]] for s in range(S)),
            iteration_time_s=it,
            feasible=fits is not None,
            evaluations=total,
            unconstrained_s=fastest[0],
        )


class FastCellEstimator(CellEstimator):
    """The planner's :class:`~tessera.planning.cells.CellEstimator` on :class:`FastStageSpace` spaces (same
    Cells, same tuned plans), plus :meth:`warm_grid`: the memory of every GPU set's spaces in one vectorized
    formula call."""

    space_class = FastStageSpace  # the same spaces, assembled faster

    def space(self, shape: Any, rung: Any, micro_batches: int | None = None) -> Any:
        space = super().space(shape, rung, micro_batches)
        if space is not None and space._owner is None:
            space._owner = (self, shape)
        return space

    def _space_or_none(self, shape: Any, rung: Any, micro_batches: int) -> Any:
        """:meth:`space`, or None where the Cell cannot hold that space (what the warmers skip)."""
        try:
            return self.space(shape, rung, micro_batches)
        except _CELL_ERRORS:
            return None

    def warm_dp(self, gpus: Iterable[tuple[str, int]]) -> int:
        """Price, in one formula call, the memory of the pure data-parallel option (dp = n, tp = 1, one stage)
        of each (GPU type, count) on every rung and micro-batch count :meth:`JobSpeed.dp_rate` may try (it
        stops at the first rung that fits; a call costs about the same for one view or a few hundred).
        Returns the views."""
        from tessera.planning.cells import CellShape
        from tessera.planning.space import estimate_micro_batches

        gb = self.settings.global_batch
        views: list = []
        for t, n in gpus:
            if n > gb or n < 1:
                continue
            shape = CellShape.of({t: n}, 1)
            for rung in self.rungs:
                for B in sorted(set(estimate_micro_batches(1, gb))):
                    space = self._space_or_none(shape, rung, B)
                    j = None if space is None else next(
                        (j for j in range(len(space.options[0])) if space.degrees(0, j) == (n, 1)), None
                    )  # fmt: skip
                    if space is not None and j is not None:
                        views.extend(space.memory_views([(0, j)]))
        return self._price(views)

    def warm_tuning(self, shape: Any, rung: Any, micro_batches: int) -> int:
        """Price, in one formula call, the memory of every option of the tuner's next spaces of a Cell: this
        (rung, micro-batches) space, the rung's later micro-batch counts and the next rung's (the tuner walks
        them in that order; a call costs about the same for one view or a few hundred). Returns the views."""
        from tessera.planning.space import micro_batch_options

        counts = micro_batch_options(shape.n_stages, self.settings.global_batch)
        at = self.rungs.index(rung) if rung in self.rungs else len(self.rungs)
        tries = [(rung, micro_batches)] + [(rung, B) for B in counts if micro_batches < B]
        tries += [(r, B) for r in self.rungs[at + 1 : at + 2] for B in counts]
        views: list = []
        for r, B in tries:
            space = self._space_or_none(shape, r, B)
            if space is None:
                break
            space._warmed = True
            views.extend(
                space.memory_views(
                    [(s, j) for s in range(space.n_stages) for j in range(len(space.options[s]))]
                )
            )
        return self._price(views)

    def warm_grid(self, shapes: Iterable[Any], *, tuning: bool = False) -> int:
        """Price the memory of many Cells' options at once (the formula is numpy over views: one call for
        every GPU type, count, stage count and memory setting costs a fraction of one call per Cell).

        Without ``tuning``: the DP-only and TP-only options a Cell estimate assembles, on the first rung in
        one call; then, in a second, on every later rung for the Cells whose DP-only option overflows on the
        first (their walk goes on: :meth:`CellEstimator.overflows_first`). With it: every option of every
        micro-batch count the tuner tries, on the rungs up to the one the Cell's own estimate settled on (the
        tuner stops at the first rung whose fastest plan fits). Returns the views."""
        shapes = list(shapes)
        if tuning:
            return self._price(self._tuning_views(shapes))
        n = self._price(self._grid_views(shapes, self.rungs[:1]))
        later = [shape for shape in shapes if self.overflows_first(shape)]
        return n + self._price(self._grid_views(later, self.rungs[1:]))

    def _grid_views(self, shapes: Sequence[Any], rungs: Sequence[Any]) -> list:
        """:meth:`_pure_views` of the Cells' estimate spaces on ``rungs`` (a space that cannot be made is
        skipped: the Cell's estimate reports why)."""
        from tessera.planning.space import estimate_micro_batches

        views: list = []
        for shape in shapes:
            counts = sorted(set(estimate_micro_batches(shape.n_stages, self.settings.global_batch)))
            for rung, B in itertools.product(rungs, counts):
                try:
                    views.extend(self._pure_views(shape, [(rung, B)]))
                except _CELL_ERRORS:
                    continue
        return views

    def _tuning_views(self, shapes: Sequence[Any]) -> list:
        """Memory views of every option of every count the tuner tries, on the rungs up to the Cell's."""
        from tessera.planning.space import micro_batch_options

        views: list = []
        for shape in shapes:
            cell = self._cells.get(shape)
            if cell is None:
                continue
            last = next(
                (i for i, r in enumerate(self.rungs)
                 if r.recompute == cell.plan.recompute.value and r.zero == cell.plan.zero),
                len(self.rungs) - 1,
            )  # fmt: skip
            for rung in self.rungs[: last + 1]:
                for B in micro_batch_options(shape.n_stages, self.settings.global_batch):
                    space = self._space_or_none(shape, rung, B)
                    if space is None:
                        break
                    opts = [(s, j) for s in range(space.n_stages) for j in range(len(space.options[s]))]
                    views.extend(space.memory_views(opts))
        return views


class JobSpeed:
    """One configuration's Cells on a cluster: estimates, DP-only figures, tuned plans (all cached).

    Zoo and Hugging Face models get the Cell-guided tuner's plan. A user's own model (entrypoint) gets its
    Whale annotations (or data-parallel stages when it has none) with hardware-aware balance: the runtime
    cannot tensor-shard layers it does not know, so only GPU counts its annotations can use are allowed."""

    def __init__(
        self,
        config: JobConfig,
        cluster: ClusterSpec,
        capacity: Mapping[str, int],
        cost: Any,
        models: ModelSource,
        *,
        tuned_cells: int = 2,
        fast: bool = True,
    ) -> None:
        from tessera.planning.space import TrainSettings

        self.config = config
        self.cluster = cluster
        self.cost = cost
        self.models = models
        self.tuned_cells = tuned_cells
        self.available = dict(capacity)
        self.spec = models.spec(config)
        seq = config.seq_len or (1 if config.entrypoint else self.spec.seq_len)
        self.settings = TrainSettings(
            model=config.model,
            global_batch=config.global_batch,
            seq_len=seq,
            precision=config.precision,
            optimizer=config.optimizer,
        )
        est = FastCellEstimator if fast else CellEstimator  # the same figures; the fast one assembles faster
        # clipping and validation priced into every plan compared (the ranking is the job's whole step's)
        self.extras = extras_of(config)
        self.estimator = est(
            self.spec, self.settings, cluster, cost, recompute=config.recompute, extras=self.extras
        )
        self.annotated_stages = models.annotation_stage_count(config) if config.entrypoint else None
        self.failures: list[str] = []
        self._tuned: dict[tuple[Any, tuple | None], Tuned | None] = {}
        self._usable: dict[GPUs, bool] = {}
        self._ranked: list[CellChoice] | None = None

    @property
    def user_model(self) -> bool:
        return self.config.entrypoint is not None

    # ------------------------------------------------------------------ what the job may use
    def allowed(self, gpus: GPUs) -> bool:
        """Whether the job may run on these GPUs: none excluded, within ``max_gpus``, and (a user model) a
        plan of its annotations uses exactly these GPUs."""
        c = self.config
        if any(t in c.exclude_gpu_types for t, _ in gpus):
            return False
        if c.max_gpus and sum(n for _, n in gpus) > c.max_gpus:
            return False
        if self.user_model:
            ok = self._usable.get(gpus)
            if ok is None:
                S = self.stage_options(gpus)
                plan = self._entry_plan(dict(gpus), S[0]) if S else None
                ok = self._usable[gpus] = plan is not None and plan.world_size == sum(n for _, n in gpus)
            return ok
        return True

    def stage_options(self, gpus: GPUs) -> tuple[int, ...]:
        """Crius's stage counts 1, 2, 4, … (a user model's annotated stage count when it has one)."""
        from tessera.planning.cells import stage_counts

        if self.annotated_stages is not None:
            return (self.annotated_stages,)
        n = sum(k for _, k in gpus)
        return tuple(stage_counts(n, self.spec.n_layers, self.settings.global_batch))

    # ------------------------------------------------------------------ estimates (iterations/s)
    def cell(self, gpus: GPUs, n_stages: int) -> Any:
        """The planning Cell (None when the shape cannot hold the model or is not allowed for the job)."""
        from tessera.planning.cells import CellShape

        if not self.allowed(gpus):
            return None
        return self.estimator.estimate(CellShape.of(gpus, n_stages))

    def cell_rate(self, gpus: GPUs, n_stages: int) -> float:
        try:
            c = self.cell(gpus, n_stages)
        except _CELL_ERRORS as e:  # kept for reports: the Cell counts as infeasible
            self.failures.append(f"{self._name()} {dict(gpus)} S{n_stages}: {type(e).__name__} {e}")
            return 0.0
        if c is None or not c.feasible:
            return 0.0
        return c.samples_per_s / self.config.global_batch

    def best_stages(self, gpus: GPUs) -> int | None:
        best, arg = 0.0, None
        for s in self.stage_options(gpus):
            r = self.cell_rate(gpus, s)
            if r > best:
                best, arg = r, s
        return arg

    def dp_rate(self, gpu_type: str, n_gpus: int) -> float:
        """The pure data-parallel plan (dp = n, tp = 1, one stage) at the cheapest memory setting that fits."""
        from tessera.planning.cells import CellShape
        from tessera.planning.space import estimate_micro_batches

        gb = self.config.global_batch
        gpus = ((gpu_type, n_gpus),)
        if n_gpus > gb or n_gpus < 1 or not self.allowed(gpus):
            return 0.0
        shape = CellShape.of(gpus, 1)
        best = 0.0
        try:
            for rung in self.estimator.rungs:
                for B in sorted(set(estimate_micro_batches(1, gb))):
                    space = self.estimator.space(shape, rung, B)
                    if space is None:
                        return 0.0
                    opts = range(len(space.options[0]))
                    j = next((j for j in opts if space.degrees(0, j) == (n_gpus, 1)), None)
                    if j is None:
                        return 0.0
                    choice = space.assemble([[j]])
                    if choice is not None and choice.feasible:  # (the job's extras included)
                        best = max(best, gb / choice.iteration_time_s)
                if best > 0:
                    break  # the cheapest memory setting that fits: more recompute only costs time
        except _CELL_ERRORS as e:
            self.failures.append(f"{self._name()} DP {n_gpus}x{gpu_type}: {type(e).__name__} {e}")
            return 0.0
        return best / gb

    def true_rate(self, gpus: GPUs) -> float:
        """The tuned plan's speed: the fastest of the best ``tuned_cells`` Cells' plans (the best Cell's
        estimate when tuning finds none)."""
        ranked = sorted(((self.cell_rate(gpus, s), s) for s in self.stage_options(gpus)), key=lambda x: -x[0])
        best = 0.0
        for rate, s in ranked[: self.tuned_cells]:
            if rate <= 0:
                break
            try:
                t = self.tuned(gpus, s)
            except _CELL_ERRORS as e:
                self.failures.append(f"{self._name()} {dict(gpus)} S{s} tune: {type(e).__name__} {e}")
                t = None
            if t is not None and t.estimate.feasible:
                best = max(best, t.estimate.samples_per_s / self.config.global_batch)
        if best == 0.0 and ranked and ranked[0][0] > 0:
            best = ranked[0][0]
        return best

    # ------------------------------------------------------------------ plans
    def _entry_plan(
        self, gpus: Mapping[str, int], n_stages: int, devices: Sequence[Device] | None = None
    ) -> Plan | None:
        devs = list(devices) if devices is not None else packed_devices(self.cluster, gpus)
        try:
            return self.models.entry_plan(self.config, devs, n_stages, self.settings.seq_len)
        except ValueError:
            return None

    def tuned(
        self, gpus: GPUs | Mapping[str, int], n_stages: int, devices: Sequence[Device] | None = None
    ) -> Tuned | None:
        """The Plan inside the Cell: Cell-guided tuning (zoo / HF models), or the user model's annotations on
        ``devices`` (default: packed on the cluster's nodes). Cached."""
        from tessera.planning.cells import CellShape

        shape = CellShape.of(gpus, n_stages)
        key = (shape, tuple(devices) if devices is not None and self.user_model else None)
        if key in self._tuned:
            return self._tuned[key]
        if self.user_model:
            from tessera.perf.estimate import estimate_plan

            plan = self._entry_plan(dict(shape.gpus), n_stages, devices)
            out = None
            if plan is not None:
                est = estimate_plan(plan, self.spec, self.cluster, cost=self.cost, extras=self.extras)
                out = Tuned(plan, est, shape.label)
        else:
            from tessera.planning.tuner import tune

            t = tune(self.estimator, shape)
            out = None
            if t is not None:  # ranked and estimated with the job's clipping and validation
                out = Tuned(t.plan, t.estimate, t.cell.label)
        self._tuned[key] = out
        return out

    def ranked(self) -> list[CellChoice]:
        """Every Cell of the job on the whole cluster (Crius/Frenzy: N/2, N, 2N per type and mixes, each stage
        count), feasible first, fastest first."""
        if self._ranked is None:
            from tessera.planning.cells import job_shapes

            c = self.config
            shapes = job_shapes(
                self.spec, self.settings, self.available, prefer=c.gpu_types,
                exclude=c.exclude_gpu_types, max_gpus=c.max_gpus,
            )  # fmt: skip
            shapes = [sh for sh in shapes if self.allowed(sh.gpus)]
            if self.annotated_stages is not None:
                shapes = [sh for sh in shapes if sh.n_stages == self.annotated_stages]
            self._ranked = [
                CellChoice(
                    x.shape,
                    x.iteration_time_s,
                    x.samples_per_s,
                    float(max(x.estimate.device_bytes_per_device or (0.0,))),
                    x.feasible,
                )  # fmt: skip
                for x in self.estimator.estimate_many(shapes)
            ]
        return self._ranked

    def choice(self, gpus: GPUs, n_stages: int) -> CellChoice | None:
        """One Cell as a :class:`CellChoice` (None when the shape cannot hold the model)."""
        c = self.cell(gpus, n_stages)
        if c is None:
            return None
        peak = float(max(c.estimate.device_bytes_per_device or (0.0,)))
        return CellChoice(c.shape, c.iteration_time_s, c.samples_per_s, peak, c.feasible)

    def infeasible(self, total_steps: int) -> str | None:
        """Why no Cell of the whole cluster can run the job (None when one can): nothing fits, or the best
        Cell's estimated total time (iteration time × steps) exceeds a year."""
        c = self.config
        types = [t for t, n in self.available.items() if n > 0 and t not in c.exclude_gpu_types]
        if not types:
            return "every GPU type of the cluster is excluded"
        best = next((x for x in self.ranked() if x.feasible), None)
        if best is None:
            cap = f" within max_gpus {c.max_gpus}" if c.max_gpus else ""
            return f"no plan fits in memory on {', '.join(sorted(types))}{cap}"
        total = best.iteration_time_s * total_steps
        if not math.isfinite(total) or total > YEAR_S:
            return (
                f"the fastest Cell ({best.label}) needs {best.iteration_time_s:.3g} s per step, "
                f"{total / 86400:.3g} days for {total_steps} steps (more than 365 days)"
            )
        return None

    def _name(self) -> str:
        return f"{self.config.model} b{self.config.global_batch}"


# ---------------------------------------------------------------------------------------------- the source
class SpeedSource:
    """The :class:`~tessera.scheduler.knowledge.RateSource` of both backends: every configuration's
    :class:`JobSpeed` on one cluster, and speed factors per configuration and GPU types (the service's telemetry)."""

    def __init__(
        self,
        cluster: ClusterSpec,
        cost: Any = None,
        *,
        capacity: Mapping[str, int] | None = None,
        models: ModelSource | None = None,
        tuned_cells: int = 2,
        fast: bool = True,
    ) -> None:
        from tessera.perf.costmodel import CostModel

        self.cluster = cluster
        self.cost = cost if cost is not None else CostModel()
        self._cost_given = cost is not None
        self.capacity = dict(
            capacity
            if capacity is not None
            else {get_gpu(t).name: n for t, n in cluster.gpu_counts().items()}
        )
        self.models = models or CatalogModels()
        self.tuned_cells = tuned_cells
        self.fast = fast
        self.factors = SpeedFactors()
        self.failures: list[str] = []
        self._jobs: dict[JobConfig, JobSpeed] = {}
        self._errors: dict[JobConfig, Exception] = {}

    def job(self, config: JobConfig | tuple[str, int]) -> JobSpeed:
        """The configuration's speeds (built once); raises what loading its model raised, every time."""
        config = as_config(config)
        js = self._jobs.get(config)
        if js is not None:
            return js
        err = self._errors.get(config)
        if err is not None:
            raise err
        try:
            js = JobSpeed(
                config, self.cluster, self.capacity, self.cost, self.models, tuned_cells=self.tuned_cells,
                fast=self.fast,
            )  # fmt: skip
        except Exception as e:
            if not (isinstance(e, ValueError) and hasattr(e, "field") and hasattr(e, "reason")):
                # a planning bug or an input it cannot take: this configuration is unplannable, not all
                e = ConfigError("model", f"planning failed: {type(e).__name__}: {e}")
            self._errors[config] = e
            raise e from None
        js.failures = self.failures  # one list for reports
        self._jobs[config] = js
        return js

    def _get(self, config: JobConfig) -> JobSpeed | None:
        try:
            return self.job(config)
        except ValueError:
            return None

    # ------------------------------------------------------------------ telemetry
    def factor(self, config: JobConfig, gpus: GPUs) -> float:
        """Estimated ÷ measured iteration time of this configuration on these GPUs (:meth:`SpeedFactors.of`;
        1.0 when nothing was measured)."""
        return self.factors.of(config, gpus)

    # ------------------------------------------------------------------ RateSource
    def stages(self, config: JobConfig, gpus: GPUs) -> tuple[int, ...]:
        js = self._get(config)
        return js.stage_options(gpus) if js else ()

    def cell(self, config: JobConfig, gpus: GPUs, n_stages: int) -> float:
        js = self._get(config)
        return js.cell_rate(gpus, n_stages) * self.factor(config, gpus) if js else 0.0

    def dp(self, config: JobConfig, gpu_type: str, n_gpus: int) -> float:
        js = self._get(config)
        return js.dp_rate(gpu_type, n_gpus) * self.factor(config, ((gpu_type, n_gpus),)) if js else 0.0

    def true(self, config: JobConfig, gpus: GPUs) -> float:
        js = self._get(config)
        return js.true_rate(gpus) * self.factor(config, gpus) if js else 0.0

    # ------------------------------------------------------------------ the planner's verdict
    def infeasible(self, config: JobConfig, total_steps: int) -> str | None:
        """Why no Cell of the whole cluster (busy or not) can run the job, else None (cached per input)."""
        return self.job(config).infeasible(total_steps)

    def digest(self) -> str:
        """What the figures depend on besides the configuration: cluster, calibration, source, settings."""
        h = hashlib.sha256()
        h.update(json.dumps(self.cluster.model_dump(mode="json"), sort_keys=True).encode())
        cal = self.cost.calibration_dict() if self._cost_given else {}
        h.update(json.dumps(cal, sort_keys=True, default=str).encode())
        h.update(f"{_source_digest()}/{self.tuned_cells}/{CACHE_VERSION}".encode())
        return h.hexdigest()[:16]


def cache_dir() -> Path:
    home = os.environ.get("TESSERA_HOME")
    return (Path(home) if home else Path.home() / ".cache" / "tessera") / "sim"


@cache
def _source_digest() -> str:
    """A digest of the source (and data files) of every package the figures come from."""
    h = hashlib.sha256()
    root = resources.files("tessera")
    for pkg in DIGEST_PACKAGES:
        base = Path(str(root.joinpath(pkg)))
        for f in sorted(base.rglob("*")):
            if f.suffix in (".py", ".yaml", ".json") and "__pycache__" not in f.parts:
                h.update(str(f.relative_to(base)).encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:16]


def speed_table(source: SpeedSource, capacity: Mapping[str, int] | None = None) -> PerfTable:
    """A :class:`PerfTable` memoizing ``source`` (capacity: the source's)."""
    return PerfTable(source, capacity if capacity is not None else source.capacity)


# ---------------------------------------------------------------------------------------------- warmed tables
def table_digest(
    cluster: ClusterSpec, *, max_gpus: int, mixes: bool, tuned_cells: int, cost: Any = None
) -> str:
    """What a configuration's warmed grid depends on besides the configuration itself — and nothing else, so
    one cache serves every trace and every preset that shares it: per GPU type its catalog entry, its node
    groups' shape (GPUs per node, links, NICs — not how many nodes: a Cell of at most ``max_gpus`` GPUs sees
    the same nodes either way) and its count capped at ``max_gpus`` (what the grid spans); the cluster's
    default network; the calibration; the source of every package the figures come from; the table's
    settings. ``crius-sim-1280`` and ``crius-sim-12800`` share one."""
    from dataclasses import asdict

    counts: dict[str, int] = {}
    groups: dict[str, list] = {}
    for g in cluster.node_groups:
        t = get_gpu(g.gpu).name
        counts[t] = counts.get(t, 0) + g.count * g.gpus_per_node
        groups.setdefault(t, []).append(g.model_dump(mode="json", exclude={"count"}))
    types = {
        t: {"gpu": asdict(get_gpu(t)), "groups": groups[t], "capped": min(counts[t], max_gpus)}
        for t in sorted(counts)
    }
    net = cluster.model_dump(
        mode="json", include={"inter_node_bandwidth_Bps", "nics_per_node", "nic_bandwidth_Bps"}
    )
    cal = cost.calibration_dict() if cost is not None else {}
    h = hashlib.sha256()
    for part in (types, net, cal):
        h.update(json.dumps(part, sort_keys=True, default=str).encode())
    h.update(f"{_source_digest()}/{tuned_cells}/{max_gpus}/{mixes}/{CACHE_VERSION}".encode())
    return h.hexdigest()[:16]


def warm_config(
    cluster: ClusterSpec,
    config: JobConfig,
    capacity: Mapping[str, int],
    *,
    max_gpus: int = 64,
    mixes: bool = True,
    tuned_cells: int = 2,
    source: SpeedSource | None = None,
) -> dict:
    """One configuration's grid (every GPU type and count at once): the memory of every Cell's options priced
    in one vectorized formula call per phase, Cells estimated, the tuner's memory priced for the best Cells,
    then DP-only and tuned rates. Returns :meth:`PerfTable.export`'s figures plus ``failures``."""
    from tessera.planning.cells import CellShape

    src = source or SpeedSource(cluster, capacity=capacity, tuned_cells=tuned_cells)
    table = PerfTable(src, capacity)
    grid = table.grid(config, max_gpus=max_gpus, mixes=mixes)
    js = src._get(config)
    if js is not None and isinstance(js.estimator, FastCellEstimator) and not js.user_model:
        shapes = [CellShape.of(g, s) for g in grid if js.allowed(g) for s in js.stage_options(g)]
        js.estimator.warm_grid(shapes)
        for g in grid:
            table.cell_of(config, g)
        top = []
        for g in grid:
            ranked = sorted(
                ((table.cell_of(config, g, s), s) for s in table.stages_of(config, g)), key=lambda x: -x[0]
            )
            top += [CellShape.of(g, s) for r, s in ranked[: src.tuned_cells] if r > 0]
        js.estimator.warm_grid(top, tuning=True)
        js.estimator.warm_dp([g[0] for g in grid if len(g) == 1 and js.allowed(g)])
    table.warm([config], max_gpus=max_gpus, mixes=mixes)
    data = table.export(config)
    data["failures"] = list(src.failures)
    return data


def _warm_many(
    args: tuple[ClusterSpec, list[JobConfig], dict[str, int], int, bool, int],
) -> list[tuple[JobConfig, dict]]:
    """A pool task: some configurations (one, from :func:`cell_table`), built with rare GC collections."""
    cluster, configs, capacity, max_gpus, mixes, tuned = args
    out = []
    with _rare_collections():
        for c in configs:
            src = SpeedSource(cluster, capacity=capacity, tuned_cells=tuned)
            out.append((c, warm_config(cluster, c, capacity, max_gpus=max_gpus, mixes=mixes, source=src)))
    return out


@contextmanager
def _rare_collections(threshold: int = 100_000) -> Iterator[None]:
    """Run the cyclic garbage collector rarely while a table is built: a build makes millions of small
    objects that live in its memos, and the default thresholds spent about a fifth of its time scanning
    them again and again. Reference counting still frees what is garbage; the old thresholds come back."""
    import gc

    old = gc.get_threshold()
    gc.set_threshold(max(threshold, old[0]), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


def _preload() -> None:
    """Import in the parent what every pool worker imports for its first configuration (torch among it:
    ~2.4 CPU-s a process), where workers are forked: they then share it instead of each importing it."""
    import importlib
    import multiprocessing

    if multiprocessing.get_start_method(allow_none=False) != "fork":
        return
    for name in ("tessera.models.hf_weights", "tessera.nn.common", "tessera.nn.resolve", "tessera.nn.zoo",
                 "tessera.memory.formula", "tessera.planning.tuner"):  # fmt: skip
        importlib.import_module(name)


def _worker_init() -> None:
    """Pool workers die with their parent (Linux: even a kill -9 of it) and leave interrupts to it: the
    parent tears the pool down on SIGINT / SIGTERM, so an interrupted study leaves no process behind."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _kill_pool(pool: ProcessPoolExecutor) -> None:
    """Terminate every worker of ``pool`` now (running tasks are abandoned) and reap them."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for p in procs:
        if p.is_alive():
            p.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        p.join(5)
        if p.is_alive():
            p.kill()
            p.join(5)


def _model_cost(configs: Sequence[JobConfig]) -> float:
    """A guess of a pool task's cost (bigger models have more stage counts and climb more memory rungs), so
    the largest start first and the pool's workers finish together."""
    try:
        from tessera.nn.resolve import resolve_spec

        spec = resolve_spec(configs[0].model, configs[0].seq_len)
        return float(spec.params) * len(configs)
    except Exception:
        return 0.0


def cell_table(
    cluster: ClusterSpec,
    configs: Iterable[JobConfig | tuple[str, int]],
    *,
    max_gpus: int = 64,
    mixes: bool = True,
    workers: int | None = None,
    use_cache: bool = True,
    tuned_cells: int = 2,
    progress: Callable[[JobConfig], None] | None = None,
) -> PerfTable:
    """A :class:`PerfTable` of every configuration on ``cluster``, its grid warmed (from the disk cache where
    present, else estimated — per model, in ``workers`` processes — and saved as each finishes). Lookups
    outside the grid are computed on demand. ``progress`` is called once per configuration done. Zoo and
    Hugging Face models only. The cache (:func:`table_digest`) is shared by every trace and preset with the
    same GPU types and node shapes. An interrupt (SIGINT, or SIGTERM while building) terminates the pool's
    workers before it propagates."""
    src = SpeedSource(cluster, tuned_cells=tuned_cells)
    capacity = src.capacity
    table = PerfTable(src, capacity)
    todo_configs = sorted({as_config(c) for c in configs})
    d = (
        cache_dir()
        / f"tables-{table_digest(cluster, max_gpus=max_gpus, mixes=mixes, tuned_cells=tuned_cells)}"
    )
    todo: list[JobConfig] = []
    for c in todo_configs:
        f = d / f"{c.slug()}.json"
        if use_cache and f.exists():
            try:
                data = json.loads(f.read_text())
                table.load(c, data)
                src.failures.extend(data.get("failures", []))
                if progress:
                    progress(c)
                continue
            except (ValueError, KeyError, TypeError):
                pass  # a damaged cache file is recomputed
        todo.append(c)
    if not todo:
        return table

    def done(c: JobConfig, data: dict) -> None:
        table.load(c, data)
        src.failures.extend(data.get("failures", []))
        if use_cache:  # saved as each configuration finishes, so an interrupted warm-up keeps its work
            d.mkdir(parents=True, exist_ok=True)
            tmp = d / f".{c.slug()}.{os.getpid()}.json.tmp"
            tmp.write_text(json.dumps(data))
            tmp.replace(d / f"{c.slug()}.json")
        if progress:
            progress(c)

    # one task per configuration, the costliest first (a model's configurations share little beyond what a
    # worker keeps for the next one anyway): the workers finish together and progress moves one at a time
    tasks = sorted(([c] for c in todo), key=_model_cost, reverse=True)
    jobs = [(cluster, cs, capacity, max_gpus, mixes, tuned_cells) for cs in tasks]
    n = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
    if n == 1:
        for j in jobs:
            for c, data in _warm_many(j):
                done(c, data)
        return table
    import signal
    from concurrent.futures import as_completed

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    main = __import__("threading").current_thread() is __import__("threading").main_thread()
    old = signal.signal(signal.SIGTERM, on_term) if main else None
    _preload()
    pool = ProcessPoolExecutor(n, initializer=_worker_init)
    try:
        futures = [pool.submit(_warm_many, j) for j in jobs]
        for fut in as_completed(futures):
            for c, data in fut.result():
                done(c, data)
    except BaseException:
        _kill_pool(pool)
        raise
    else:
        pool.shutdown(wait=True)
    finally:
        if main:
            signal.signal(signal.SIGTERM, old)
    return table


__all__ = [
    "CatalogModels",
    "CellChoice",
    "ConfigError",
    "JobSpeed",
    "ModelSource",
    "SpeedSource",
    "Tuned",
    "cache_dir",
    "cell_table",
    "config_of",
    "job_of",
    "packed_devices",
    "speed_table",
    "table_digest",
    "warm_config",
]

"""The plan inside a Cell (Crius §5.2): Cell-guided tuning, and exhaustive search to compare it with.

Each stage of a Cell may run any (dp, tp) factorization of its devices. The exhaustive tuner assembles every
combination; the Cell-guided tuner keeps, for each stage, only the half of the range its Cell estimate favoured
— from DP-only to the half-hybrid point √g × √g when the stage's sampled variant was DP-only, from there to
TP-only when it was TP-only — which prunes the product of the per-stage ranges to (about) half per stage.
Both search the same micro-batch counts and memory-saving settings, and both never return a plan whose
devices overflow while a fitting one exists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tessera.perf.estimate import Estimate
from tessera.plan import Plan
from tessera.planning.cells import Cell, CellEstimator, CellShape
from tessera.planning.space import StageSpace, micro_batch_options


@dataclass(frozen=True)
class TuneResult:
    """The tuned plan of a Cell, its estimate and what the search cost."""

    plan: Plan
    estimate: Estimate
    evaluations: int  # plan combinations assembled
    guided: bool
    cell: Cell

    @property
    def iteration_time_s(self) -> float:
        return self.estimate.iteration_time_s


def favoured_half(space: StageSpace, stage: int, favour: str) -> list[int]:
    """Option indices of ``stage`` in the favoured half of its DP-only → TP-only range, split at the
    half-hybrid point √g × √g. Where √g falls between two powers of two (g = 8, 32, …) both neighbours belong
    to both halves, since either may be "the" half-hybrid; with g = 2 each half is one variant. When no
    option of the half fits in memory (the stage's memory does not depend on the others), the other half is
    searched too: a guided search must not miss a plan that fits."""
    k = math.log2(len(space.devices[stage]))
    lo, hi = (math.floor(k / 2), math.ceil(k / 2)) if k >= 3 else (k / 2, k / 2)
    out = []
    for j, st in enumerate(space.options[stage]):
        level = math.log2(st.tp_degree)
        if (favour == "dp" and level <= hi + 1e-9) or (favour == "tp" and level >= lo - 1e-9):
            out.append(j)
    if not out or not any(space.stage_cost(stage, j).feasible for j in out):
        return list(range(len(space.options[stage])))
    return out


def _with_cell_choice(space: StageSpace, cell: Cell, allowed: list[list[int]]) -> list[list[int]]:
    """``allowed`` plus, in the space the Cell was sampled from, the Cell's own option of every stage: the
    favour is a per-stage judgement, while the pipeline's tail (the slowest stage's sync and step) can make a
    stage's other variant the better one, and the tuner must never return less than the Cell already found."""
    if not space.holds_settings_of(cell.plan):
        return allowed
    picks = []
    for s, stages in enumerate(space.options):
        j = next((j for j, st in enumerate(stages) if st == cell.plan.stages[s]), None)
        if j is None:
            return allowed
        picks.append(j)
    return [sorted({*a, j}) for a, j in zip(allowed, picks, strict=True)]


def tune(
    estimator: CellEstimator,
    shape: CellShape,
    *,
    guided: bool = True,
    micro_batches: list[int] | None = None,
) -> TuneResult | None:
    """The best plan of a Cell (None when the Cell cannot hold the model)."""
    cell = estimator.estimate(shape)
    if cell is None:
        return None
    options = micro_batches or micro_batch_options(shape.n_stages, estimator.settings.global_batch)

    def allowed_of(space: StageSpace) -> list[list[int]]:
        if not guided:
            return [list(range(len(o))) for o in space.options]
        return _with_cell_choice(
            space, cell, [favoured_half(space, s, cell.favour[s]) for s in range(space.n_stages)]
        )

    found = estimator.walk(shape, allowed_of, options)
    if found is None:
        return None
    space, choice, evaluations = found
    chosen = choice.options
    return TuneResult(
        plan=space.plan(chosen),
        estimate=space.estimate(chosen),
        evaluations=evaluations,
        guided=guided,
        cell=cell,
    )

"""Calibration: runtime telemetry → the cost model's ``compute_scale`` / ``comm_scale``, so that re-estimating the
plan that was measured lands on (α = 1) or moves toward (α < 1) what was measured.

Why: profiles and communication tables fix what can be measured in isolation; what is left — framework
overhead, the optimizer step, kernel launch gaps, contention, gloo's latency — only shows up when a whole plan
runs. The runtime reports it per step (``tessera.runtime.telemetry``); this module turns it into the two kinds
of correction factor the estimator already applies, one per device type and one per link kind, persisted in
the :class:`~tessera.perf.costmodel.CostModel` directory so every later estimate (Cells, tuner) uses them.

What the telemetry measures, and what it is compared with (like with like):

* ``iter_time_s`` — the slowest rank's whole step ↔ :attr:`Estimate.iteration_time_s`.
* ``stages[s].compute_s`` — the slowest rank of stage ``s``: every forward/backward of its micro-batches
  (TP all-reduces included, they run inside the layers) plus the optimizer step, without the time blocked in
  stage-to-stage receives or the gradient sync ↔ the stage's *busy* time, ``micro_batches × (fwd + bwd +
  tp_comm) + optimizer_s`` of :func:`~tessera.perf.estimate.stage_cost` (where the estimator has no optimizer
  term, the step is learned into the compute scale: it is compute, and it grows with the stage).
  Exception: a regular pipeline run by PyTorch's schedules (DP = TP = 1 everywhere, see
  ``tessera.runtime.torch_pipeline``) times the whole schedule as compute, bubble and p2p included; there the
  stages' compute says nothing about busy time and only the iteration time is used (``compute_includes_waits``).
* ``stages[s].comm_s`` — *not* fitted directly: it is the maximum over the stage's ranks taken separately from
  compute, so the fast replica's wait for the slow one at the gradient all-reduce counts as communication
  (on a 2-process CPU run compute + comm of the stage exceeds the iteration by ~10 %), and under Tessera's own
  pipeline it also holds the bubble (time blocked in receives). The communication that is on the critical path
  is what the iteration time has left once the busy time is accounted for — the estimate's own definition of
  ``comm_s`` (exposed communication) — so communication is fitted through the iteration time. The telemetry's
  comm is still reported beside the estimate's DP sync.

The fit: unknowns are θ = log scale for each device type and link kind the plan uses. Residuals are
log(measured / estimated) of the iteration time (weight :data:`ITERATION_WEIGHT`, so that the number every
consumer of the estimate reads is matched) and of each stage's busy time (weight 1), solved by Gauss–Newton in
log space with the Jacobian taken by finite differences of the estimator itself (the estimator stays the one
source of truth on how scales combine: max over TP ranks and replicas, the bottleneck stage, the bubble).
Why least squares in log space over the stages, not "attribute everything to the bottleneck stage": with
several device types, every stage that runs on a type says something about that type, relative errors are
what matter (a 2× slowdown of a 1 ms stage and of a 100 ms stage are the same evidence), and the estimator's
Jacobian apportions a stage mixing types (heterogeneous replicas or TP) to the types that actually gate it.
Directions the telemetry cannot see (e.g. compute vs comm in a PyTorch pipeline, or two link kinds that only
appear summed in one stage) get the minimum-norm change: the correction is spread by each scale's share of
the time, and scales with no influence stay where they were.

The damped update is applied to the fitted result: ``new = old × (fit / old)^α`` (half-way in log space for
α = 0.5), clamped to ``bounds``; telemetry is noisy, and damping lets many runs average into the model.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from tessera.hardware import ClusterSpec, GPUSpec
from tessera.models.spec import ModelSpec
from tessera.perf.costmodel import CostModel
from tessera.perf.estimate import Estimate, StageCost, Topology, estimate_plan, stage_cost
from tessera.plan import Plan, torch_schedule_refusal

DEFAULT_WARMUP = 2  # steps dropped at the start of each run in a file (allocator, first p2p headers)
DEFAULT_BOUNDS = (0.01, 100.0)  # a scale outside this says the model is broken, not miscalibrated
ITERATION_WEIGHT = 10.0  # weight of the iteration-time residual against each stage's (weight 1)
_FD_STEP = 1e-4  # finite-difference step in log space
_MAX_ITERS = 30
_TOL = 1e-7  # stop when no log scale moves by more than this


# ---------------------------------------------------------------------------------------------- telemetry
@dataclass(frozen=True)
class Measured:
    """Medians over the usable steps of a telemetry file (per stage: the slowest rank, as the runtime merged)."""

    iteration_time_s: float
    stage_compute_s: tuple[float, ...]
    stage_comm_s: tuple[float, ...]
    steps: tuple[int, ...]  # the steps the medians are over
    rows: int  # rows read, all kept or not
    warmup_dropped: int
    skipped_dropped: int
    source: str = "<telemetry>"

    @property
    def n_stages(self) -> int:
        return len(self.stage_compute_s)

    def to_dict(self) -> dict[str, Any]:
        return {
            "iteration_time_s": self.iteration_time_s,
            "stage_compute_s": list(self.stage_compute_s),
            "stage_comm_s": list(self.stage_comm_s),
            "steps": list(self.steps),
            "rows": self.rows,
            "warmup_dropped": self.warmup_dropped,
            "skipped_dropped": self.skipped_dropped,
            "source": self.source,
        }


@dataclass(frozen=True)
class _Row:
    step: int
    iter_time_s: float
    compute_s: tuple[float, ...]
    comm_s: tuple[float, ...]
    skipped: bool


class _BadRow(ValueError):
    pass


def _number(obj: Mapping[str, Any], key: str, where: str, *, positive: bool) -> float:
    if key not in obj:
        raise _BadRow(f"field '{where}{key}': missing")
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise _BadRow(f"field '{where}{key}': expected a finite number, got {v!r}")
    if positive and v <= 0:
        raise _BadRow(f"field '{where}{key}': must be > 0, got {v!r}")
    if v < 0:
        raise _BadRow(f"field '{where}{key}': must be >= 0, got {v!r}")
    return float(v)


def _parse_row(text: str, n_stages: int | None, why: str) -> _Row:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise _BadRow(f"not valid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(obj, dict):
        raise _BadRow(f"expected a JSON object, got {type(obj).__name__}")
    step = obj.get("step")
    if "step" not in obj:
        raise _BadRow("field 'step': missing")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise _BadRow(f"field 'step': expected an integer >= 0, got {step!r}")
    iter_s = _number(obj, "iter_time_s", "", positive=True)
    skipped = obj.get("skipped", False)
    if not isinstance(skipped, bool):
        raise _BadRow(f"field 'skipped': expected true or false, got {skipped!r}")
    stages = obj.get("stages")
    if not isinstance(stages, list) or not stages:
        raise _BadRow(f"field 'stages': expected a non-empty list, got {stages!r}")
    if n_stages is not None and len(stages) != n_stages:
        raise _BadRow(f"field 'stages': {len(stages)} stages, expected {n_stages} ({why})")
    by_index: dict[int, tuple[float, float]] = {}
    for i, st in enumerate(stages):
        where = f"stages[{i}]."
        if not isinstance(st, dict):
            raise _BadRow(f"field 'stages[{i}]': expected an object, got {st!r}")
        idx = st.get("stage", i)
        if isinstance(idx, bool) or not isinstance(idx, int) or not 0 <= idx < len(stages) or idx in by_index:
            raise _BadRow(
                f"field '{where}stage': expected a distinct index in 0..{len(stages) - 1}, got {idx!r}"
            )
        by_index[idx] = (
            _number(st, "compute_s", where, positive=False),
            _number(st, "comm_s", where, positive=False),
        )
    ordered = [by_index[k] for k in range(len(stages))]
    return _Row(step, iter_s, tuple(c for c, _ in ordered), tuple(m for _, m in ordered), skipped)


def parse_telemetry(
    lines: Iterable[str],
    *,
    source: str = "<telemetry>",
    warmup: int = DEFAULT_WARMUP,
    n_stages: int | None = None,
) -> Measured:
    """Medians of the usable steps of telemetry JSONL ``lines``.

    A file may hold several runs appended one after another (the runtime opens it in append mode; a resumed
    run starts again at its checkpoint's step): a new run starts wherever ``step`` does not increase, and each
    run's first ``warmup`` rows are dropped — every start pays the warm-up again. (A resume that continues
    right after the last step written cannot be told apart: rows carry no timestamps; its warm-up then counts
    as ordinary steps, which the medians absorb.) Steps the runtime marked
    ``skipped`` (fp16 overflow: no optimizer step) are dropped too. Medians, not means, because a busy host
    makes single steps slow, never fast.

    Raises ValueError naming ``source``, the line number and the field of the first bad row, or saying why no
    step is left.
    """
    if warmup < 0:
        raise ValueError(f"warmup: must be >= 0, got {warmup}")
    rows: list[_Row] = []
    expected = n_stages
    keep: list[_Row] = []
    n_warm = n_skip = 0
    in_segment = 0
    last_step: int | None = None
    for lineno, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            row = _parse_row(text, expected, "the plan's" if n_stages is not None else "as the rows before")
        except _BadRow as e:
            raise ValueError(f"{source}:{lineno}: {e}") from None
        expected = len(row.compute_s)
        rows.append(row)
        if last_step is None or row.step <= last_step:
            in_segment = 0  # a new run (or a resumed one) starts here
        last_step = row.step
        in_segment += 1
        if in_segment <= warmup:
            n_warm += 1
        elif row.skipped:
            n_skip += 1
        else:
            keep.append(row)
    if not keep:
        raise ValueError(
            f"{source}: no usable steps ({len(rows)} rows: {n_warm} warm-up, {n_skip} skipped); "
            f"run more steps or lower the warm-up ({warmup})"
        )
    n = len(keep[0].compute_s)
    return Measured(
        iteration_time_s=statistics.median(r.iter_time_s for r in keep),
        stage_compute_s=tuple(statistics.median(r.compute_s[s] for r in keep) for s in range(n)),
        stage_comm_s=tuple(statistics.median(r.comm_s[s] for r in keep) for s in range(n)),
        steps=tuple(r.step for r in keep),
        rows=len(rows),
        warmup_dropped=n_warm,
        skipped_dropped=n_skip,
        source=source,
    )


def read_telemetry(
    path: str | Path, *, warmup: int = DEFAULT_WARMUP, n_stages: int | None = None
) -> Measured:
    """:func:`parse_telemetry` of a JSONL file (``tessera train`` writes ``runs/<job>/telemetry.jsonl``)."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"telemetry: no such file {str(p)!r}")
    with p.open() as f:
        return parse_telemetry(f, source=str(p), warmup=warmup, n_stages=n_stages)


# ---------------------------------------------------------------------------------------------- the fit
@dataclass(frozen=True)
class StageFigures:
    """One stage of one estimate, in the telemetry's terms."""

    busy_s: (
        float  # micro_batches × (fwd + bwd + tp_comm) + optimizer step: what the stage's compute_s measures
    )
    dp_sync_s: float


@dataclass(frozen=True)
class CalibrationReport:
    """What calibration saw and did. Scales are the full maps after the update (types not in the plan kept)."""

    plan_model: str
    measured: Measured
    before: Estimate
    after: Estimate
    stages_before: tuple[StageFigures, ...]
    stages_after: tuple[StageFigures, ...]
    compute_scale_before: dict[str, float]
    compute_scale_after: dict[str, float]
    comm_scale_before: dict[str, float]
    comm_scale_after: dict[str, float]
    device_types: tuple[str, ...]  # the plan's (the compute scales fitted)
    link_kinds: tuple[str, ...]  # the links it communicates over (the comm scales fitted)
    alpha: float
    busy_observed: bool  # whether the stages' compute entered the fit (False: iteration time only)
    saved_to: str | None = None

    @property
    def error_before(self) -> float:
        """Relative error of the estimated iteration time before calibration (+ = over-estimate)."""
        return self.before.iteration_time_s / self.measured.iteration_time_s - 1.0

    @property
    def error_after(self) -> float:
        return self.after.iteration_time_s / self.measured.iteration_time_s - 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.plan_model,
            "measured": self.measured.to_dict(),
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
            "stages_before": [vars(s) for s in self.stages_before],
            "stages_after": [vars(s) for s in self.stages_after],
            "error_before": self.error_before,
            "error_after": self.error_after,
            "compute_scale_before": self.compute_scale_before,
            "compute_scale_after": self.compute_scale_after,
            "comm_scale_before": self.comm_scale_before,
            "comm_scale_after": self.comm_scale_after,
            "device_types": list(self.device_types),
            "link_kinds": list(self.link_kinds),
            "alpha": self.alpha,
            "busy_observed": self.busy_observed,
            "saved_to": self.saved_to,
        }


def compute_includes_waits(plan: Plan) -> bool:
    """Whether the runtime will have timed this plan's whole pipeline schedule as compute: the plans PyTorch's
    pipelining runs (:func:`tessera.plan.torch_schedule_refusal`, which the runtime asks too), under the
    process's ``TESSERA_PIPELINE_IMPL``."""
    return torch_schedule_refusal(plan) is None


def _device_types(plan: Plan, topo: Topology) -> tuple[str, ...]:
    return tuple(sorted({topo.gpu(d).name for d in plan.devices}))


def _link_kinds(plan: Plan, topo: Topology) -> tuple[str, ...]:
    """Every link class the plan's collectives and p2p go over (the groups the estimator costs)."""
    kinds: set[str] = set()
    for st in plan.stages:
        if st.tp_degree > 1:
            kinds.update(topo.link(st.replica(r)).kind for r in range(st.dp_degree))
        if st.dp_degree > 1:
            for k in range(st.tp_degree):
                group = tuple(st.devices[r * st.tp_degree + k] for r in range(st.dp_degree))
                kinds.add(topo.link(group).kind)
    for a, b in zip(plan.stages, plan.stages[1:], strict=False):
        kinds.add(topo.link(a.devices + b.devices).kind)
    return tuple(sorted(kinds))


def _optimizer_s(c: StageCost) -> float:
    """The stage's optimizer step where the estimator models it (the runtime times it as compute)."""
    return float(getattr(c, "optimizer_s", 0.0))


class _Model:
    """The estimator seen as a function of the log scales: (iteration time, busy time per stage)."""

    def __init__(
        self,
        plan: Plan,
        spec: ModelSpec,
        topo: Topology,
        cost: CostModel,
        params: list[tuple[str, str]],
    ) -> None:
        self.plan, self.spec, self.topo, self.cost, self.params = plan, spec, topo, cost, params

    def with_theta(self, theta: np.ndarray) -> CostModel:
        compute = dict(self.cost.compute_scale)
        comm = dict(self.cost.comm_scale)
        for (kind, name), t in zip(self.params, theta, strict=True):
            (compute if kind == "compute" else comm)[name] = float(math.exp(t))
        return replace(self.cost, compute_scale=compute, comm_scale=comm)

    def theta_of(self, cost: CostModel) -> np.ndarray:
        return np.array(
            [
                math.log(cost.compute_factor(n) if k == "compute" else cost.comm_factor(n))
                for k, n in self.params
            ]
        )

    def figures(self, cost: CostModel) -> tuple[Estimate, tuple[StageFigures, ...]]:
        est = estimate_plan(self.plan, self.spec, self.topo, cost=cost)
        stages = []
        for i in range(self.plan.n_stages):
            c = stage_cost(self.plan, self.spec, i, self.topo, cost)
            busy = self.plan.micro_batches * c.time_s + _optimizer_s(c)
            stages.append(StageFigures(busy, c.dp_sync_s))
        return est, tuple(stages)

    def predict(self, theta: np.ndarray) -> np.ndarray:
        est, stages = self.figures(self.with_theta(theta))
        return np.array([est.iteration_time_s] + [s.busy_s for s in stages])


def _fit(
    model: _Model,
    theta0: np.ndarray,
    observed: np.ndarray,
    weights: np.ndarray,
    bounds: tuple[float, float],
) -> np.ndarray:
    """Weighted least squares of log(observed / predicted) over θ, Gauss–Newton with step halving.

    Observations with weight 0 (or a non-positive value) are left out; minimum-norm steps leave unobserved
    directions alone."""
    lo, hi = math.log(bounds[0]), math.log(bounds[1])
    use = (weights > 0) & (observed > 0)
    log_obs = np.log(np.where(use, observed, 1.0))
    w = weights[use]

    def residual(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pred = model.predict(theta)
        ok = pred[use] > 0
        r = np.where(ok, log_obs[use] - np.log(np.where(ok, pred[use], 1.0)), 0.0)
        return r, pred

    theta = np.clip(theta0, lo, hi)
    if not len(theta) or not use.any():
        return theta
    r, _ = residual(theta)
    for _ in range(_MAX_ITERS):
        jac = np.zeros((int(use.sum()), len(theta)))
        for j in range(len(theta)):
            t = theta.copy()
            t[j] += _FD_STEP
            rj, _ = residual(t)
            jac[:, j] = (r - rj) / _FD_STEP  # d log(pred) / d theta_j
        delta = np.linalg.lstsq(jac * w[:, None], r * w, rcond=None)[0]
        cost0 = float(np.sum((w * r) ** 2))
        step = 1.0
        while True:
            cand = np.clip(theta + step * delta, lo, hi)
            rc, _ = residual(cand)
            if float(np.sum((w * rc) ** 2)) <= cost0 or step < 1e-3:
                break
            step /= 2
        moved = float(np.max(np.abs(cand - theta)))
        theta, r = cand, rc
        if moved < _TOL:
            break
    return theta


def calibrate(
    plan: Plan,
    spec: ModelSpec,
    telemetry: Measured | str | Path,
    cost: CostModel | None = None,
    *,
    cluster_or_gpu_map: ClusterSpec | Mapping[str, GPUSpec] | Topology | None = None,
    alpha: float = 1.0,
    warmup: int = DEFAULT_WARMUP,
    bounds: tuple[float, float] = DEFAULT_BOUNDS,
    busy_observed: bool | None = None,
    save_to: str | Path | None = None,
) -> tuple[CalibrationReport, CostModel]:
    """Fit the compute scales of ``plan``'s device types and the comm scales of its link kinds to the run
    ``telemetry`` measured (see the module docstring) and return (report, updated cost model).

    ``cost`` is not modified (default: an empty CostModel). ``alpha`` in (0, 1]: 1 fits directly, smaller
    moves the scales that fraction of the way in log space. ``busy_observed``: whether the stages' compute_s
    is their busy time (default: yes unless :func:`compute_includes_waits`). ``save_to``: a directory to save
    the updated bundle into (``CostModel.save``).
    """
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"alpha: must be in (0, 1], got {alpha}")
    if not 0.0 < bounds[0] <= 1.0 <= bounds[1]:
        raise ValueError(f"bounds: need 0 < low <= 1 <= high, got {bounds}")
    cost = cost or CostModel()
    measured = (
        telemetry
        if isinstance(telemetry, Measured)
        else read_telemetry(telemetry, warmup=warmup, n_stages=plan.n_stages)
    )
    if measured.n_stages != plan.n_stages:
        raise ValueError(
            f"{measured.source}: telemetry has {measured.n_stages} stages per step, the plan has {plan.n_stages}"
        )
    topo = cluster_or_gpu_map if isinstance(cluster_or_gpu_map, Topology) else Topology(cluster_or_gpu_map)
    types = _device_types(plan, topo)
    links = _link_kinds(plan, topo)
    params = [("compute", t) for t in types] + [("comm", k) for k in links]
    model = _Model(plan, spec, topo, cost, params)
    before, stages_before = model.figures(cost)

    busy = (not compute_includes_waits(plan)) if busy_observed is None else busy_observed
    observed = np.array([measured.iteration_time_s, *measured.stage_compute_s])
    weights = np.array([ITERATION_WEIGHT] + [1.0 if busy else 0.0] * plan.n_stages)
    theta0 = model.theta_of(cost)
    fitted = _fit(model, theta0, observed, weights, bounds)
    lo, hi = math.log(bounds[0]), math.log(bounds[1])
    theta = np.clip(theta0 + alpha * (fitted - theta0), lo, hi)
    updated = model.with_theta(theta)
    after, stages_after = model.figures(updated)

    saved = None
    if save_to is not None:
        saved = str(updated.save(save_to))
    report = CalibrationReport(
        plan_model=plan.model,
        measured=measured,
        before=before,
        after=after,
        stages_before=stages_before,
        stages_after=stages_after,
        compute_scale_before=dict(cost.compute_scale),
        compute_scale_after=dict(updated.compute_scale),
        comm_scale_before=dict(cost.comm_scale),
        comm_scale_after=dict(updated.comm_scale),
        device_types=types,
        link_kinds=links,
        alpha=alpha,
        busy_observed=busy,
        saved_to=saved,
    )
    return report, updated


__all__ = [
    "DEFAULT_BOUNDS",
    "DEFAULT_WARMUP",
    "ITERATION_WEIGHT",
    "CalibrationReport",
    "Measured",
    "StageFigures",
    "calibrate",
    "compute_includes_waits",
    "parse_telemetry",
    "read_telemetry",
]

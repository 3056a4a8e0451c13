"""Cells (Crius §4): a job's candidate resources — GPU type(s) × count × pipeline stages — each with an
estimated iteration time, so a scheduler can compare them without tuning any of them.

A Cell's estimate (Crius §5.1) samples its plan space cheaply: stage determination fixes each stage's layers
and devices, each stage gets two variants — DP-only and TP-only — and the 2^S combinations are assembled from
the 2·S stage costs (:class:`tessera.planning.space.StageSpace`); the fastest one whose every device fits is the
Cell's estimate, and each stage's variant in it is that stage's *favour*, which the Cell-guided tuner uses to
prune its search. Memory settings (recompute, ZeRO-1) are walked cheapest first until a setting's fastest plan
fits — the tuner's own walk (:meth:`CellEstimator.walk`) — so a Cell is priced at the setting its tuned plan
will run, not at the first one where anything fits.

Stage determination: with one GPU type, Crius's FLOPs-proportional partition (cuts at the least traffic among
balanced partitions); with two, Whale's inter-stage balance — devices ordered by memory capacity, largest
first (earlier 1F1B stages hold more in-flight activations), and layers partitioned ∝ each stage's FLOP/s.

Cells are cached per estimator, so a scheduler may ask for the same Cell again and again at no cost.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tessera.hardware import ClusterSpec, GPUSpec, get_gpu
from tessera.memory.overhead import DEFAULT_HEADROOM_FRACTION
from tessera.models.spec import ModelSpec
from tessera.perf.costmodel import CostModel
from tessera.perf.estimate import Estimate, Topology, peak_bytes
from tessera.perf.extras import StepExtras
from tessera.plan import Device, Plan
from tessera.planning.partition import partition_by_speed, partition_model
from tessera.planning.space import (
    Choice,
    Rung,
    StageSpace,
    TrainSettings,
    default_micro_batches,
    estimate_micro_batches,
    rungs_for,
)

DEFAULT_GPUS_PER_NODE = 8  # where no cluster says otherwise


@dataclass(frozen=True, order=True)
class CellShape:
    """What a Cell is made of: GPU types with their counts (sorted by type name) and the stage count."""

    gpus: tuple[tuple[str, int], ...]
    n_stages: int

    @property
    def n_gpus(self) -> int:
        return sum(n for _, n in self.gpus)

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(t for t, _ in self.gpus)

    @property
    def label(self) -> str:
        return "+".join(f"{n}x{t}" for t, n in self.gpus) + f" S{self.n_stages}"

    @classmethod
    def of(cls, gpus: Mapping[str, int] | Iterable[tuple[str, int]], n_stages: int) -> CellShape:
        items = gpus.items() if isinstance(gpus, Mapping) else gpus
        merged: dict[str, int] = {}
        for t, n in items:
            name = get_gpu(t).name
            merged[name] = merged.get(name, 0) + int(n)
        if not merged or any(n < 1 for n in merged.values()):
            raise ValueError(f"a Cell needs at least one GPU of each type it names, got {dict(merged)}")
        if n_stages < 1:
            raise ValueError(f"n_stages must be >= 1, got {n_stages}")
        return cls(tuple(sorted(merged.items())), n_stages)


@dataclass(frozen=True)
class Cell:
    """A Cell with its estimate: the best sampled plan (DP-only/TP-only per stage) and its figures."""

    shape: CellShape
    iteration_time_s: float
    samples_per_s: float
    feasible: bool
    favour: tuple[str, ...]  # per stage: "dp" or "tp", the variant in the best sampled plan
    plan: Plan
    estimate: Estimate
    evaluations: int  # plans assembled to estimate this Cell
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def label(self) -> str:
        return self.shape.label

    def to_dict(self) -> dict[str, Any]:
        return {
            "cell": self.label,
            "gpus": dict(self.shape.gpus),
            "n_gpus": self.shape.n_gpus,
            "n_stages": self.shape.n_stages,
            "iteration_time_s": self.iteration_time_s,
            "samples_per_s": self.samples_per_s,
            "feasible": self.feasible,
            "favour": list(self.favour),
            "stages": [f"{s.dp_degree}x{s.tp_degree}" for s in self.plan.stages],
            "micro_batches": self.plan.micro_batches,
            "recompute": self.plan.recompute.value,
            "zero": self.plan.zero,
            "mfu": self.estimate.mfu,
            "max_device_bytes": max(self.estimate.device_bytes_per_device),
        }


class CellEstimator:
    """Estimates Cells of one job on one cluster (or the catalog), caching every Cell and stage space.

    ``extras``: the job's gradient clipping and validation (:class:`~tessera.perf.extras.StepExtras`; none by
    default). Given, every plan the Cells and the tuner compare is priced with them, so the ranking and the
    chosen plan's estimate are those of the job's whole step, not of the plan alone with the extras added
    after the choice."""

    space_class: type[StageSpace] = StageSpace  # the stage-space implementation (the simulator's is faster)

    def __init__(
        self,
        spec: ModelSpec,
        settings: TrainSettings,
        cluster: ClusterSpec | None = None,
        cost: CostModel | None = None,
        *,
        recompute: str = "auto",
        headroom_fraction: float = DEFAULT_HEADROOM_FRACTION,
        extras: StepExtras | None = None,
    ) -> None:
        self.spec, self.settings, self.cluster = spec, settings, cluster
        self.extras = extras if extras else None
        self.cost = cost or CostModel()
        self.rungs = rungs_for(recompute)
        self.headroom_fraction = headroom_fraction
        self.topo = Topology(cluster)
        self._times: dict[tuple, Any] = {}  # per-layer compute / optimizer times (stage_cost's memo)
        self._cells: dict[CellShape, Cell | None] = {}
        self._spaces: dict[tuple[CellShape, Rung, int], StageSpace] = {}
        self._nodes = self._node_slots()
        self._even_bounds: dict[int, list[tuple[int, int]]] = {}
        self._speed_bounds: dict[tuple[float, ...], list[tuple[int, int]]] = {}
        self._layouts: dict[CellShape, tuple[list[tuple[int, int]], list[list[Device]]] | None] = {}

    # ------------------------------------------------------------------------------- placement
    def _node_slots(self) -> dict[str, list[str]]:
        """Per GPU type, the node name of each successive GPU (packed node by node) — where a Cell's devices
        of that type are assumed to sit, so links between them are the cluster's real ones."""
        slots: dict[str, list[str]] = {}
        if self.cluster is not None:
            for node in self.cluster.nodes():
                slots.setdefault(node.gpu_type, []).extend([node.name] * node.n_gpus)
        return slots

    def _devices(self, shape: CellShape) -> list[Device]:
        """The Cell's devices, largest memory first (Whale: early stages hold the most activations)."""
        out: list[Device] = []
        for t, n in shape.gpus:
            nodes = self._nodes.get(t, [])
            for i in range(n):
                node = nodes[i] if i < len(nodes) else f"{t.lower()}-{i // DEFAULT_GPUS_PER_NODE}"
                out.append(Device(rank=0, gpu_type=t, node=node))
        gpu = self.topo.gpu
        out.sort(key=lambda d: (-gpu(d).memory_bytes, -gpu(d).peak_flops(self.settings.precision)))
        return out

    def _layout(self, shape: CellShape) -> tuple[list[tuple[int, int]], list[list[Device]]] | None:
        """Stage layer ranges and devices, or None when the shape cannot be cut into equal stages (kept per
        shape: a Cell's spaces under every rung and micro-batch count share it)."""
        if shape not in self._layouts:
            self._layouts[shape] = self._make_layout(shape)
        return self._layouts[shape]

    def _make_layout(self, shape: CellShape) -> tuple[list[tuple[int, int]], list[list[Device]]] | None:
        n, S = shape.n_gpus, shape.n_stages
        if n % S or self.spec.n_layers < S or self.settings.global_batch < S:
            return None
        g = n // S
        devices = self._devices(shape)
        groups = [devices[s * g : (s + 1) * g] for s in range(S)]
        if len(shape.gpus) == 1:
            # FLOPs-proportional mapping scales with N, so the cut positions depend on S alone
            if S not in self._even_bounds:
                self._even_bounds[S] = list(partition_model(self.spec, S, S).bounds)
            bounds = self._even_bounds[S]
        else:
            prec = self.settings.precision
            speeds = tuple(sum(self.topo.gpu(d).peak_flops(prec) for d in grp) for grp in groups)
            if speeds not in self._speed_bounds:
                flops = [x.fwd_flops_per_sample for x in self.spec.layers]
                self._speed_bounds[speeds] = list(partition_by_speed(flops, speeds))
            bounds = self._speed_bounds[speeds]
        return bounds, groups

    def space(self, shape: CellShape, rung: Rung, micro_batches: int | None = None) -> StageSpace | None:
        """The (cached) plan space of a Cell under one setting rung."""
        B = micro_batches or default_micro_batches(shape.n_stages, self.settings.global_batch)
        key = (shape, rung, B)
        if key not in self._spaces:
            layout = self._layout(shape)
            if layout is None:
                return None
            bounds, groups = layout
            self._spaces[key] = self.space_class(
                self.spec, self.settings, bounds, groups, self.topo, self.cost,
                micro_batches=B, rung=rung, headroom_fraction=self.headroom_fraction, memo=self._times,
                extras=self.extras,
            )  # fmt: skip
        return self._spaces[key]

    # ------------------------------------------------------------------------------ estimation
    def estimate(self, shape: CellShape) -> Cell | None:
        """The Cell's estimate (cached); None when the shape cannot hold the model at all (too many stages,
        or a stage with no runnable DP/TP variant)."""
        if shape not in self._cells:
            self._cells[shape] = self._estimate(shape)
        return self._cells[shape]

    def _estimate(self, shape: CellShape) -> Cell | None:
        first, lever = estimate_micro_batches(shape.n_stages, self.settings.global_batch)
        counts = sorted({first, lever})
        # memory in bulk (a formula call costs about the same for one view or hundreds): the first space, then,
        # where a DP-only option overflows (the walk goes on, mostly to the end), every rung at both counts
        self._warm(shape, [(self.rungs[0], first)])
        rungs = self.rungs
        if self.overflows_first(shape):
            self._warm(shape, [(r, c) for r in self.rungs for c in counts])
            if not self._may_fit(shape, counts):
                rungs = self.rungs[:1]  # nothing fits on any rung: the first's fastest plan, which overflows
        found = self.walk(shape, StageSpace.pure_options, [first], fallback=lever, rungs=rungs)
        if found is None:
            return None
        space, choice, evaluations = found
        est = space.estimate(choice.options)
        favour = self._favour(space, choice.options)
        return Cell(
            shape=shape,
            iteration_time_s=est.iteration_time_s,
            samples_per_s=est.samples_per_s,
            feasible=est.feasible,
            favour=favour,
            plan=space.plan(choice.options),
            estimate=est,
            evaluations=evaluations,
        )

    def walk(
        self,
        shape: CellShape,
        allowed_of: Callable[[StageSpace], Sequence[Sequence[int]]],
        counts: Sequence[int],
        *,
        fallback: int | None = None,
        rungs: Sequence[Rung] | None = None,
    ) -> tuple[StageSpace, Choice, int] | None:
        """The best combination of ``allowed_of(space)`` over a Cell's memory settings and micro-batch counts,
        feasible first, then fastest, with the combinations assembled; None when the shape cannot hold the
        model. The estimate and the tuner take this one walk: every count of a rung, rung after rung
        (cheapest first) until a rung's fastest plan fits, since later rungs only add recompute or
        sharding. Stopping at the first rung where *anything* fits instead left the estimate on a tensor-
        parallel plan that ZeRO-1 (free in time) would have let a faster data-parallel one replace (moe-27b,
        batch 1024, on 32 A100s: 9.5× slower than its tuned plan).
        ``fallback``: a count a rung tries only where its fastest plan at ``counts`` does not fit (the
        estimate's memory lever: smaller micro-batches hold fewer activations but run less efficiently).
        ``rungs``: the memory settings to walk (all by default)."""
        best: tuple[tuple[bool, float], StageSpace, Choice] | None = None
        evaluations = 0
        tries = [*counts, *([fallback] if fallback is not None and fallback not in counts else [])]
        for rung in self.rungs if rungs is None else rungs:
            fastest, rung_fits = math.inf, False
            for k, count in enumerate(tries):
                is_fallback = k == len(counts)
                if is_fallback and rung_fits:
                    continue
                space = self.space(shape, rung, count)
                if space is None:
                    return None
                choice = space.assemble(allowed_of(space))
                if choice is None:
                    continue  # a stage has no runnable variant at this micro-batch size
                evaluations += choice.evaluations
                fastest = min(fastest, choice.unconstrained_s)
                rung_fits = rung_fits or (
                    choice.feasible and choice.iteration_time_s <= fastest * (1 + 1e-12)
                )
                score = (not choice.feasible, choice.iteration_time_s)
                if best is None or score < best[0]:
                    best = (score, space, choice)
            if best is not None and not best[0][0] and best[0][1] <= fastest * (1 + 1e-12):
                break  # the rung's fastest plan fits
        if best is None:
            return None
        return best[1], best[2], evaluations

    def overflows_first(self, shape: CellShape) -> bool:
        """Whether the DP-only option of a stage of the Cell's first estimate space (first rung, GPipe's count)
        overflows: its estimate then walks past the first rung, since DP-only is mostly a stage's fastest
        option (where only TP-only overflows, the walk mostly stops there: small models, whose TP-only options
        hold the whole batch's activations). Memory alone: no time is priced."""
        B = estimate_micro_batches(shape.n_stages, self.settings.global_batch)[0]
        try:
            space = self.space(shape, self.rungs[0], B)
            if space is None:
                return False
            return not all(space.fits(s, 0) for s in range(space.n_stages) if space.options[s])
        except ValueError:  # not a valid plan: the walk reports it
            return False

    def _may_fit(self, shape: CellShape, counts: Sequence[int]) -> bool:
        """Whether every stage has a DP-only or TP-only option that fits on the last rung (the one that saves
        the most memory) at one of ``counts`` — else no combination of them fits on any rung. Memory alone:
        no time is priced."""
        last = self.rungs[-1]
        try:
            for count in counts:
                space = self.space(shape, last, count)
                if space is None:
                    return True  # the walk finds out that the shape cannot hold the model
                if all(any(space.fits(s, j) for j in js) for s, js in enumerate(space.pure_options())):
                    return True
        except ValueError:  # the last rung's settings make no valid plan here: walk them all
            return True
        return False

    def _warm(self, shape: CellShape, tries: Sequence[tuple[Rung, int]]) -> None:
        """Memory of the DP-only and TP-only options of several (rung, micro-batches) spaces of a Cell in one
        formula call (a call costs about the same for one view or hundreds); the figures are the same."""
        self._price(self._pure_views(shape, tries))

    def _pure_views(self, shape: CellShape, tries: Sequence[tuple[Rung, int]]) -> list:
        """Memory views, not yet priced, of the DP-only and TP-only options of a Cell's (rung, micro-batches)
        spaces."""
        views = []
        for rung, B in tries:
            space = self.space(shape, rung, B)
            if space is not None:
                views.extend(
                    space.memory_views([(s, j) for s, js in enumerate(space.pure_options()) for j in js])
                )
        return views

    def _price(self, views: list) -> int:
        """Price memory views in one formula call; returns how many."""
        if views:
            peak_bytes(self.spec, views)
        return len(views)

    @staticmethod
    def _favour(space: StageSpace, chosen: tuple[int, ...]) -> tuple[str, ...]:
        """Each stage's favoured parallelism: the faster of its two variants on compute and communication,
        memory aside — where DP-only overflows, the best plan is still the most DP-like hybrid that fits, so
        the tuner must search the DP half; the chosen (feasible) variant decides only a tie."""
        out = []
        for s, j in enumerate(chosen):
            last = len(space.options[s]) - 1
            dp, tp = space.stage_cost(s, 0), space.stage_cost(s, last)
            # the sync as the runtime leaves it exposed (the rest hides under the last backward)
            t_dp, t_tp = (
                dp.time_s + dp.dp_exposed_s / space.micro_batches,
                tp.time_s + tp.dp_exposed_s / space.micro_batches,
            )
            if t_dp == t_tp:
                out.append("dp" if space.options[s][j].tp_degree == 1 else "tp")
            else:
                out.append("dp" if t_dp < t_tp else "tp")
        return tuple(out)

    def estimate_many(self, shapes: Iterable[CellShape]) -> list[Cell]:
        """Estimates of the shapes that can hold the model, fastest feasible first."""
        cells = [c for c in (self.estimate(s) for s in shapes) if c is not None]
        return rank_cells(cells)


def rank_cells(cells: Sequence[Cell]) -> list[Cell]:
    """Feasible before infeasible, then by iteration time, then fewer GPUs."""
    return sorted(cells, key=lambda c: (not c.feasible, c.iteration_time_s, c.shape.n_gpus, c.shape))


def stage_counts(n_gpus: int, n_layers: int, global_batch: int) -> list[int]:
    """Crius's stage counts: 1, 2, 4, … up to the GPU count (and the layers and samples to share out)."""
    out, s = [], 1
    while s <= min(n_gpus, n_layers, global_batch):
        if n_gpus % s == 0:
            out.append(s)
        s *= 2
    return out


def gpu_count_options(n: int, available: int, max_gpus: int | None = None) -> list[int]:
    """Frenzy/Crius GPU counts around the smallest fitting count ``n``: N/2, N and 2N, within what exists."""
    cap = min(available, max_gpus or available)
    return sorted({c for c in (max(1, n // 2), n, 2 * n) if 1 <= c <= cap})


def usable_types(
    available: Mapping[str, int], prefer: Sequence[str] = (), exclude: Sequence[str] = ()
) -> list[str]:
    types = [t for t, n in available.items() if n > 0 and t not in set(exclude)]
    return sorted(types, key=lambda t: (t not in prefer, prefer.index(t) if t in prefer else 0, t))


def smallest_count(
    spec: ModelSpec, settings: TrainSettings, gpu: GPUSpec, *, max_gpus: int = 1024
) -> int | None:
    """N of the issue: the fewest GPUs of this type any layout fits in (the memory module's answer)."""
    from tessera.memory.estimate import smallest_fitting_layouts
    from tessera.memory.layout import Layout

    base = Layout(
        global_batch=settings.global_batch,
        precision=settings.precision,
        optimizer=settings.optimizer,
        attention=settings.attention,
        schedule=settings.schedule,
    )
    try:
        rows = smallest_fitting_layouts(spec, base, gpu.name, top=1, max_gpus=max_gpus)
    except ValueError:  # a model the formula does not cover (convolutional): weights + Adam state alone
        need = 16.0 * spec.params / (gpu.memory_bytes * (1 - DEFAULT_HEADROOM_FRACTION) - gpu.context_bytes)
        n = 1
        while n < need:
            n *= 2
        return n if n <= max_gpus else None
    return rows[0].n_gpus if rows else None


def job_shapes(
    spec: ModelSpec,
    settings: TrainSettings,
    available: Mapping[str, int],
    *,
    prefer: Sequence[str] = (),
    exclude: Sequence[str] = (),
    max_gpus: int | None = None,
    mixes: bool = True,
    base_count: Mapping[str, int] | None = None,
) -> list[CellShape]:
    """Every Cell shape of a job (Crius §4.1 + Frenzy): for each GPU type, counts N/2, N, 2N with N the
    smallest fitting count (``base_count`` overrides it) and stage counts 1, 2, 4, …; for each pair of
    types, the same totals split evenly between the two."""
    types = usable_types(available, prefer, exclude)
    n_of: dict[str, int] = {}
    for t in types:
        n = (base_count or {}).get(t)
        if n is None:
            n = smallest_count(spec, settings, get_gpu(t), max_gpus=max(1, available[t]))
        if n is not None:
            n_of[t] = n
    shapes: set[CellShape] = set()
    for t, n in n_of.items():
        for count in gpu_count_options(n, available[t], max_gpus):
            for S in stage_counts(count, spec.n_layers, settings.global_batch):
                shapes.add(CellShape.of({t: count}, S))
    if mixes:
        fit = sorted(n_of)
        for i, a in enumerate(fit):
            for b in fit[i + 1 :]:
                n = max(n_of[a], n_of[b])
                for total in gpu_count_options(n, available[a] + available[b], max_gpus):
                    half = total // 2
                    if half < 1 or half > available[a] or half > available[b] or 2 * half != total:
                        continue
                    for S in stage_counts(total, spec.n_layers, settings.global_batch):
                        shapes.add(CellShape.of({a: half, b: half}, S))
    return sorted(shapes)

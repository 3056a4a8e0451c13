"""The plan space of one Cell and its fast, exact assembly from per-stage costs.

A Cell fixes the devices of every pipeline stage and the stages' layer ranges; what is left to choose is each
stage's (dp, tp) factorization of its device count, plus plan-wide settings (micro-batches, recompute, ZeRO).
Because the cost model prices stages independently (:func:`tessera.perf.estimate.stage_cost`) and only the
boundary send/recv couples neighbours, a plan's iteration time is

    Σ_s t_s + (B − 1) · max_s t_s + 2 · Σ_s p2p(s, s + 1) + max_s (dp_sync_s + optimizer_s)

(interleaved 1F1B with v chunks per device, where the settings ask for it and the plan can carry it:
``B · max_s t_s + (Σ_s t_s − max_s t_s) / v`` and each boundary weighing :func:`p2p_weight`), so the cost of
every combination of per-stage options can be assembled from ``Σ options`` stage costs (Crius
§5.1's 2^S assembly from two profiled variants per stage) instead of pricing every combination from scratch.
:meth:`StageSpace.assemble` enumerates the combinations with numpy — exactly the figures
:func:`tessera.perf.estimate.estimate_plan` would give each of them, at a fraction of the cost.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tessera.memory.overhead import DEFAULT_HEADROOM_FRACTION
from tessera.models.spec import ModelSpec, TransformerArch
from tessera.perf.costmodel import CostModel
from tessera.perf.estimate import (
    Estimate,
    StageCost,
    Topology,
    boundary_s,
    clip_allreduce_s,
    clip_stage_s,
    compose,
    distinct_option_views,
    peak_bytes,
    plan_wide,
    stage_cost,
    stage_memory,
)
from tessera.perf.extras import StepExtras
from tessera.plan import (
    Attention,
    Device,
    Optimizer,
    Plan,
    PlanError,
    Precision,
    Recompute,
    Schedule,
    Stage,
    uneven_pieces,
)
from tessera.planning.balance import balance_batch, balance_shards

# Beyond this many combinations the assembly switches from full enumeration to the bottleneck-threshold search.
MAX_ENUMERATED = 1 << 20


@dataclass(frozen=True)
class TrainSettings:
    """The plan-wide settings a job fixes (everything but the layout)."""

    model: str
    global_batch: int
    seq_len: int
    precision: str = "bf16"
    optimizer: str = "adamw"
    attention: str = "flash"
    schedule: str = "1f1b"
    # interleaved 1F1B chunks per device (1: plain); a space's plans carry it where it applies (see
    # ``StageSpace.virtual_stages``), so the chosen Plan runs the schedule that was priced
    virtual_stages: int = 1


def applicable_virtual_stages(
    settings: TrainSettings, bounds: Sequence[tuple[int, int]], micro_batches: int
) -> int:
    """The settings' interleaving where a plan of these stages can carry it (``Plan.virtual_stages``'s rules:
    1F1B, >= 2 stages, micro-batches a multiple of the stages, a layer in every chunk), else 1 (plain)."""
    v = settings.virtual_stages
    if v <= 1 or settings.schedule != "1f1b" or len(bounds) < 2 or micro_batches % len(bounds):
        return 1
    return v if all(b - a >= v for a, b in bounds) else 1


def p2p_weight(virtual_stages: int, n_stages: int) -> float:
    """What one boundary's send/recv time weighs in the iteration: 2 (there and back, first micro-batch);
    interleaved, every boundary is crossed v times each way and the last device's v − 1 hand-backs to the
    first, priced as the mean boundary (``perf.pipeline.pipeline_time``), spread over the S − 1 boundaries."""
    v = virtual_stages
    if v == 1 or n_stages < 2:
        return 2.0
    return 2.0 * v + 2.0 * (v - 1) / (n_stages - 1)


@dataclass(frozen=True)
class Rung:
    """One memory-saving setting the planner may fall back to: recompute mode and ZeRO stage."""

    recompute: str = "none"
    zero: int = 0


def rungs_for(recompute: str) -> tuple[Rung, ...]:
    """Settings to try, cheapest first: a job's fixed recompute, or none → selective → full when ``auto``;
    ZeRO-1 beside ZeRO-0 on each (it costs no time in the model and frees optimizer state)."""
    modes = ("none", "selective", "full") if recompute == "auto" else (recompute,)
    return tuple(Rung(m, z) for m in modes for z in (0, 1))


def default_micro_batches(n_stages: int, global_batch: int) -> int:
    """Crius (following GPipe): 4 × the stage count, within [stages, global batch]."""
    return max(n_stages, min(4 * n_stages, global_batch))


def estimate_micro_batches(n_stages: int, global_batch: int) -> tuple[int, int]:
    """The micro-batch counts a Cell estimate (and a DP-only figure) samples: GPipe's 4 × S first, then one
    sample per micro-batch (the global batch), the memory lever — activations shrink, efficiency with them."""
    return default_micro_batches(n_stages, global_batch), global_batch


def micro_batch_options(n_stages: int, global_batch: int) -> list[int]:
    """Micro-batch counts to try: S, 2S, 4S, 8S and the global batch (one sample per micro-batch), within the
    global batch (GPipe's 4S among them)."""
    opts = sorted({min(global_batch, k * n_stages) for k in (1, 2, 4, 8)} | {global_batch})
    return [b for b in opts if n_stages <= b <= global_batch]


def factorizations(n: int) -> tuple[tuple[int, int], ...]:
    """(dp, tp) with dp · tp = n and tp a power of two, from DP-only to TP-only."""
    out = []
    tp = 1
    while tp <= n:
        if n % tp == 0:
            out.append((n // tp, tp))
        tp *= 2
    return tuple(out)


@dataclass(frozen=True)
class Choice:
    """The best combination found: per-stage option indices and the composed estimate."""

    options: tuple[int, ...]
    iteration_time_s: float
    feasible: bool
    evaluations: int  # combinations assembled
    unconstrained_s: float = math.inf  # the fastest combination ignoring memory (a bound for cheaper rungs)


def _unchecked(base: Plan, stages: tuple[Stage, ...]) -> Plan:
    """``base`` with other stages, built without validating it again (see :meth:`StageSpace._base`)."""
    plan = object.__new__(Plan)
    plan.__dict__.update(base.__dict__, stages=stages, meta={})
    return plan


class StageSpace:
    """Per-stage (dp, tp) options of a Cell's stages under one set of plan-wide settings, costed lazily.

    ``stage_devices[s]`` are stage ``s``'s devices in order (ranks are assigned here); ``bounds[s]`` its layer
    range. Options that cannot run (TP degree not dividing the heads, more replicas than samples) are absent.
    ``extras``: the job's gradient clipping and validation (:class:`~tessera.perf.extras.StepExtras`), priced
    into every combination's iteration time, so the search ranks plans by what a step of the job costs (a
    validation pass is forward-only, a clipping pass reads every gradient: they favour other plans than the
    training step alone does).
    """

    def __init__(
        self,
        spec: ModelSpec,
        settings: TrainSettings,
        bounds: Sequence[tuple[int, int]],
        stage_devices: Sequence[Sequence[Device]],
        topo: Topology,
        cost: CostModel | None = None,
        *,
        micro_batches: int | None = None,
        rung: Rung = Rung(),
        headroom_fraction: float = DEFAULT_HEADROOM_FRACTION,
        memo: dict[tuple, Any] | None = None,
        extras: StepExtras | None = None,
    ) -> None:
        if len(bounds) != len(stage_devices):
            raise ValueError(f"{len(bounds)} layer ranges for {len(stage_devices)} stages")
        self.spec, self.settings, self.topo = spec, settings, topo
        self.cost = cost or CostModel()
        self.rung = rung
        self.headroom_fraction = headroom_fraction
        self.extras = extras if extras else None
        # per-layer times shared by spaces of one spec, topology and cost model (stage_cost's memo)
        self._memo: dict[tuple, Any] = {} if memo is None else memo
        self.n_stages = len(bounds)
        self.micro_batches = micro_batches or default_micro_batches(self.n_stages, settings.global_batch)
        self.bounds = tuple(bounds)
        self.virtual_stages = applicable_virtual_stages(settings, self.bounds, self.micro_batches)
        arch = spec.arch
        self.heads = arch.n_heads if isinstance(arch, TransformerArch) else None
        self.kv_heads = arch.n_kv_heads if isinstance(arch, TransformerArch) else None
        # the spaces of one layout (layer ranges, devices, settings) — one Cell under each rung and micro-batch
        # count — have the same ranked devices and options: made once per layout in the shared memo, with a
        # token under which they share the stage parts that do not depend on those settings (see
        # perf.estimate.stage_cost's ``shared``) and their boundaries
        # (interleaved options depend on the micro-batch count: torch's schedule needs equal pieces)
        inter = (self.virtual_stages, self.micro_batches) if self.virtual_stages > 1 else None
        key = ("layout", self.bounds, tuple(tuple(g) for g in stage_devices), settings, inter)
        hit = self._memo.get(key)
        if hit is None:
            rank = 0
            devs: list[tuple[Device, ...]] = []
            for group in stage_devices:
                devs.append(tuple(replace(d, rank=rank + k) for k, d in enumerate(group)))
                rank += len(group)
            self.devices = tuple(devs)
            options = [
                [st for dp, tp in factorizations(len(d)) if (st := self._stage(s, dp, tp)) is not None]
                for s, d in enumerate(self.devices)
            ]
            hit = self._memo[key] = (self.devices, options, object())
        self.devices, options, self._layout = hit
        self.options: list[list[Stage]] = [list(o) for o in options]
        self._costs: dict[tuple[int, int], StageCost] = {}
        self._p2p: dict[tuple[int, int, int], float] = {}
        self._clip: dict[tuple[int, int], tuple[float, float]] = {}
        self._carriers: dict[tuple[int, int], Plan] = {}
        self._priced: set[tuple[int, int]] = set()  # (stage, option) pairs whose memory views are priced
        self._fits: dict[tuple[int, int], bool] = {}  # memory alone, where the time is not priced yet
        # the plan-wide fields of this space's plans that memory views read (perf.estimate.plan_wide)
        wide = [(Schedule, settings.schedule), (Precision, settings.precision), (Recompute, rung.recompute),
                (Attention, settings.attention), (Optimizer, settings.optimizer)]  # fmt: skip
        try:
            named = [enum(v).value for enum, v in wide]
        except ValueError:  # not a valid plan: its carriers raise the PlanError when they are built
            named = [v for _, v in wide]
        self._wide = (
            self.n_stages, self.micro_batches, settings.global_batch, *named, rung.zero, self.virtual_stages
        )  # fmt: skip

    # ---------------------------------------------------------------------------------- options
    def _stage(self, s: int, dp: int, tp: int) -> Stage | None:
        a, b = self.bounds[s]
        devices = self.devices[s]
        if dp > self.settings.global_batch:
            return None
        if tp > 1 and self.virtual_stages > 1:
            return None  # interleaving runs on torch's schedule: one device per stage and replica (TP = 1)
        if tp > 1 and self.heads and self.kv_heads and (self.heads % tp or self.kv_heads % tp):
            return None  # even TP splits whole heads and key/value groups
        stage = Stage(a, b, devices, dp_degree=dp, tp_degree=tp)
        if len({d.gpu_type for d in devices}) > 1:
            stage = self._balanced(stage)
        gb = self.settings.global_batch
        if self.virtual_stages > 1 and uneven_pieces(stage.shares(gb), gb, self.micro_batches):
            return None  # torch's schedule needs each replica's micro-batch pieces equal and non-empty
        return stage

    def _balanced(self, stage: Stage) -> Stage:
        """Whale's intra-stage balance for a stage that mixes GPU types: batch shares and shard ratios ∝ the
        devices' FLOP/s (memory shifting happens only where the plan's estimate says a device overflows)."""
        gpu = self.topo.gpu
        prec = self.settings.precision
        dp, tp = stage.dp_degree, stage.tp_degree
        if tp > 1:
            speeds = [min(gpu(stage.replica(r)[k]).peak_flops(prec) for r in range(dp)) for k in range(tp)]
            shards = balance_shards(speeds, [1.0] * tp, shardable_bytes=0.0)
            stage = replace(stage, tp_ratios=tuple(shards.loads))
        if dp > 1:
            speeds = [tp * min(gpu(d).peak_flops(prec) for d in stage.replica(r)) for r in range(dp)]
            batch = balance_batch(self.settings.global_batch, speeds, [math.inf] * dp, bytes_per_sample=0.0)
            stage = replace(stage, batch_shares=batch.shares)
        return stage

    def degrees(self, s: int, j: int) -> tuple[int, int]:
        st = self.options[s][j]
        return st.dp_degree, st.tp_degree

    # ------------------------------------------------------------------------------------ plans
    def plan(self, choice: Sequence[int]) -> Plan:
        """The Plan of one combination of options."""
        stages = tuple(self.options[s][j] for s, j in enumerate(choice))
        st = self.settings
        return Plan(
            model=st.model,
            global_batch=st.global_batch,
            seq_len=st.seq_len,
            stages=stages,
            micro_batches=self.micro_batches,
            schedule=st.schedule,
            precision=st.precision,
            recompute=self.rung.recompute,
            attention=st.attention,
            optimizer=st.optimizer,
            zero=self.rung.zero,
            model_layers=self.spec.n_layers,
            model_heads=self.heads,
            model_kv_heads=self.kv_heads,
            virtual_stages=self.virtual_stages,
        )

    def _carrier(self, s: int, j: int) -> Plan:
        """A valid plan holding option ``j`` at stage ``s`` (the others' first options), to price it in
        (built once: memory warm-up, stage cost and boundaries all price the same carrier)."""
        key = (s, j)
        hit = self._carriers.get(key)
        if hit is None:
            choice = [j if k == s else 0 for k in range(self.n_stages)]
            base = self._base()
            checked = ("carrier-ok", self._layout, s, j)
            if base is not None and (j == 0 or checked in self._memo):
                hit = (
                    base
                    if j == 0
                    else _unchecked(base, tuple(self.options[k][c] for k, c in enumerate(choice)))
                )
            else:
                hit = self.plan(choice)
                self._memo[checked] = True
            self._carriers[key] = hit
        return hit

    def _base(self) -> Plan | None:
        """The plan of every stage's first option (None when it is not a valid plan).

        A carrier differs from it in one stage, and whether it is valid depends on its plan-wide fields (the
        base's: valid here) and on that stage alone (its layers, devices and option, the layout's): so once
        one space of the layout has validated a carrier of option j at stage s, the other spaces' carriers of
        it are the base with that stage swapped in, without validating them again (the same Plans)."""
        if not hasattr(self, "_base_plan"):
            try:
                self._base_plan: Plan | None = self.plan([0] * self.n_stages)
            except PlanError:
                self._base_plan = None
        return self._base_plan

    def holds_settings_of(self, plan: Plan) -> bool:
        """Whether ``plan``'s plan-wide fields (:func:`~tessera.perf.estimate.plan_wide`: micro-batches, the
        rung's recompute and ZeRO stage, interleaving, the settings) are this space's: a plan of the space's
        options is then this space's plan of them, known without building and validating one."""
        return plan_wide(plan) == self._wide

    def pure_options(self) -> list[list[int]]:
        """Per stage, its DP-only and TP-only options (the first and last): what a Cell assembles first."""
        return [sorted({0, len(o) - 1}) if o else [] for o in self.options]

    def memory_views(self, pairs: Sequence[tuple[int, int]]) -> list:
        """Memory views of the (stage, option) pairs not yet priced, to price many in one formula call (the
        caller prices them: they are not listed again)."""
        views = []
        priced = self._priced
        for p in pairs:
            if p not in priced and p not in self._costs:
                priced.add(p)
                views.extend(distinct_option_views(self.options[p[0]][p[1]], p[0], self._wide))
        return views

    def warm_memory(self, pairs: Sequence[tuple[int, int]] | None = None) -> None:
        """Evaluate the memory of many (stage, option) pairs in one formula call (it costs the same as one)."""
        pairs = pairs or [(s, j) for s in range(self.n_stages) for j in range(len(self.options[s]))]
        views = self.memory_views(pairs)
        if views:
            peak_bytes(self.spec, views)

    def stage_cost(self, s: int, j: int) -> StageCost:
        key = (s, j)
        if key not in self._costs:
            self._costs[key] = stage_cost(
                self._carrier(s, j),
                self.spec,
                s,
                self.topo,
                self.cost,
                headroom_fraction=self.headroom_fraction,
                memo=self._memo,
                shared=(self._layout, s, j),
            )
        return self._costs[key]

    def fits(self, s: int, j: int) -> bool:
        """Whether option ``j`` of stage ``s`` fits in memory here: its stage cost's ``feasible``, without
        pricing its time where that is not priced yet."""
        hit = self._costs.get((s, j))
        if hit is not None:
            return hit.feasible
        fit = self._fits.get((s, j))
        if fit is None:
            fit = self._fits[(s, j)] = stage_memory(
                self._carrier(s, j), self.spec, s, self.topo,
                headroom_fraction=self.headroom_fraction, memo=self._memo,
            ).feasible  # fmt: skip
        return fit

    def p2p(self, s: int, j: int, k: int) -> float:
        """Boundary s → s + 1 with option j before and k after. It depends on the options only through the
        fewer replicas of the two (the stages' devices and layers are the layout's), so it is priced once
        per (boundary, micro-batch count, that degree) for every space of the layout."""
        key = (s, j, k)
        hit = self._p2p.get(key)
        if hit is None:
            a, b = self.options[s][j], self.options[s + 1][k]
            shared = ("p2p", self._layout, s, self.micro_batches, min(a.dp_degree, b.dp_degree))
            hit = self._memo.get(shared)
            if hit is None:
                hit = self._memo[shared] = boundary_s(
                    self._carrier(s, j), self.spec, a, b, self.topo, self.cost
                )
            self._p2p[key] = hit
        return hit

    def estimate(self, choice: Sequence[int]) -> Estimate:
        """The full estimate of one combination, from the cached stage costs (equals ``estimate_plan``)."""
        plan = self.plan(choice)
        costs = [self.stage_cost(s, j) for s, j in enumerate(choice)]
        p2p = [self.p2p(s, choice[s], choice[s + 1]) for s in range(self.n_stages - 1)]
        return compose(plan, self.spec, costs, p2p, self.topo, extras=self.extras, cost=self.cost)

    def clip(self, s: int, j: int) -> tuple[float, float]:
        """(norm_s, scale_s) of gradient clipping on option ``j`` of stage ``s`` (:func:`clip_stage_s`)."""
        hit = self._clip.get((s, j))
        if hit is None:
            carrier = self._carrier(s, j)
            hit = self._clip[(s, j)] = clip_stage_s(
                carrier, self.spec, carrier.stages[s], self.topo, self.cost
            )
        return hit

    def _extras_s(
        self, allowed: Sequence[Sequence[int]], idx: np.ndarray, p2p: Sequence[np.ndarray]
    ) -> np.ndarray | float:
        """Seconds the extras add to each combination (rows of ``idx``, local indices into ``allowed``): the
        clipping passes' slowest stage each plus the norm's all-reduce, and the validation passes'
        :func:`~tessera.perf.estimate.forward_pass_s` times the validation batches per step — the figures
        :func:`~tessera.perf.estimate.extras_s` gives each plan."""
        ex = self.extras
        if ex is None:
            return 0.0
        S = self.n_stages
        out = np.zeros(len(idx))
        if ex.grad_clip:
            parts = [np.array([self.clip(s, j) for j in a]).reshape(-1, 2) for s, a in enumerate(allowed)]
            norm = np.stack([parts[s][idx[:, s], 0] for s in range(S)], axis=1).max(axis=1)
            scale = np.stack([parts[s][idx[:, s], 1] for s in range(S)], axis=1).max(axis=1)
            reduce = clip_allreduce_s(self._carrier(0, allowed[0][0]), self.topo, self.cost)
            out += norm + scale + reduce
        per_batch = ex.val_batches * ex.validations_per_step
        if per_batch:
            fwd = [
                np.array([(c := self.stage_cost(s, j)).fwd_s + c.tp_comm_s / 2 for j in a])
                for s, a in enumerate(allowed)
            ]
            F = np.stack([fwd[s][idx[:, s]] for s in range(S)], axis=1)
            one = self.micro_batches * F.max(axis=1) + F.sum(axis=1) - F.max(axis=1)
            for s in range(S - 1):
                one += p2p[s][idx[:, s], idx[:, s + 1]]
            out += per_batch * one
        return out

    # --------------------------------------------------------------------------------- assembly
    def assemble(self, allowed: Sequence[Sequence[int]] | None = None) -> Choice | None:
        """The fastest feasible combination among ``allowed[s]`` options per stage (all by default); None when
        a stage has no option. Falls back to the fastest infeasible one when nothing fits."""
        allowed = [list(a) for a in (allowed or [range(len(o)) for o in self.options])]
        if any(not a for a in allowed):
            return None
        self.warm_memory([(s, j) for s, a in enumerate(allowed) for j in a])
        B = self.micro_batches
        S = self.n_stages
        costs = [[self.stage_cost(s, j) for j in a] for s, a in enumerate(allowed)]
        t = [np.array([c.time_s for c in cs]) for cs in costs]
        sync = [np.array([c.tail_s for c in cs]) for cs in costs]
        ok = [np.array([c.feasible for c in cs]) for cs in costs]
        p2p = [
            np.array([[self.p2p(s, j, k) for k in allowed[s + 1]] for j in allowed[s]]) for s in range(S - 1)
        ]
        total = math.prod(len(a) for a in allowed)
        if total <= MAX_ENUMERATED:
            idx = np.array(list(itertools.product(*[range(len(a)) for a in allowed])), dtype=np.int64)
            if idx.ndim == 1:
                idx = idx.reshape(-1, S)
            T = np.stack([t[s][idx[:, s]] for s in range(S)], axis=1)
            v = self.virtual_stages
            if v == 1:
                it = T.sum(axis=1) + (B - 1) * T.max(axis=1)
            else:  # interleaved: the fill and drain shrink v-fold (perf.pipeline.pipeline_time)
                it = B * T.max(axis=1) + (T.sum(axis=1) - T.max(axis=1)) / v
            it += np.stack([sync[s][idx[:, s]] for s in range(S)], axis=1).max(axis=1)
            w = p2p_weight(v, S)
            for s in range(S - 1):
                it += w * p2p[s][idx[:, s], idx[:, s + 1]]
            it += self._extras_s(allowed, idx, p2p)
            feas = np.stack([ok[s][idx[:, s]] for s in range(S)], axis=1).all(axis=1)
            pick = np.where(feas, it, np.inf)
            best = int(np.argmin(pick)) if feas.any() else int(np.argmin(it))
            local = idx[best]
            return Choice(
                options=tuple(allowed[s][int(local[s])] for s in range(S)),
                iteration_time_s=float(it[best]),
                feasible=bool(feas[best]),
                evaluations=total,
                unconstrained_s=float(it.min()),
            )
        return self._threshold_search(allowed, t, sync, ok, p2p, total)

    def _threshold_search(
        self,
        allowed: list[list[int]],
        t: list[np.ndarray],
        sync: list[np.ndarray],
        ok: list[np.ndarray],
        p2p: list[np.ndarray],
        total: int,
    ) -> Choice | None:
        """Too many combinations to list: fix the bottleneck stage time τ (one of the options' times), then
        a Viterbi pass minimizes Σ t + 2 Σ p2p over options with t ≤ τ; the best over τ of the exact total.
        Exact but for the tail (DP sync + optimizer step) and the extras, which are added after the choice."""
        B, S, v = self.micro_batches, self.n_stages, self.virtual_stages
        w = v * p2p_weight(v, S)  # the pass minimizes v × (Σ t / v + weighted Σ p2p)
        taus = np.unique(np.concatenate([x[o] for x, o in zip(t, ok, strict=True)]))
        best: tuple[float, list[int]] | None = None
        evaluations = 0
        for tau in taus:
            cost = np.where((t[0] <= tau) & ok[0], t[0], np.inf)
            back: list[np.ndarray] = []
            for s in range(1, S):
                trans = cost[:, None] + w * p2p[s - 1]
                arg = np.argmin(trans, axis=0)
                here = np.where((t[s] <= tau) & ok[s], t[s], np.inf)
                cost = trans[arg, np.arange(len(arg))] + here
                back.append(arg)
                evaluations += trans.size
            j = int(np.argmin(cost))
            if not np.isfinite(cost[j]):
                continue
            path = [j]
            for arg in reversed(back):
                path.append(int(arg[path[-1]]))
            path.reverse()
            times = [float(t[s][path[s]]) for s in range(S)]
            if v == 1:
                total_s = float(cost[j]) + (B - 1) * max(times)
            else:
                total_s = float(cost[j]) / v + (B - 1 / v) * max(times)
            total_s += max(float(sync[s][path[s]]) for s in range(S))
            if self.extras is not None:  # exact for the path, though the pass that found it left them out
                total_s += float(self._extras_s(allowed, np.array([path]), p2p)[0])
            if best is None or total_s < best[0]:
                best = (total_s, path)
        if best is None:
            return None
        return Choice(
            options=tuple(allowed[s][best[1][s]] for s in range(S)),
            iteration_time_s=best[0],
            feasible=True,
            evaluations=evaluations,
        )

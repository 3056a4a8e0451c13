"""Memory answers for whole layouts: per-stage peaks from the fast formula, the exact trace on request,
and the smallest layouts that fit each GPU type (Frenzy's resource plans, with an accurate predictor)."""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from tessera.hardware import get_gpu
from tessera.memory.formula import check_covered, evaluate
from tessera.memory.layout import Layout, LayoutError, device_views
from tessera.memory.overhead import DEFAULT_HEADROOM_FRACTION, overhead_for
from tessera.models.spec import ModelSpec, per_spec


@dataclass(frozen=True)
class StageMemory:
    stage: int
    layer_start: int
    layer_end: int
    n_devices: int
    in_flight: int
    peak_bytes: float  # tensor bytes at the peak (what max_memory_allocated reports)
    peak_phase: str
    breakdown: dict[str, float]
    device_bytes: float  # peak × fragmentation + CUDA context
    fits: bool
    exact_peak_bytes: float | None = None
    exact_phase: str | None = None
    exact_breakdown: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _fits(gpu_type: str, tensor_bytes: float, headroom_fraction: float) -> tuple[float, bool]:
    gpu = get_gpu(gpu_type)
    device = overhead_for(gpu.name).device_bytes(tensor_bytes)
    return device, device <= gpu.memory_bytes * (1 - headroom_fraction)


def estimate_layout(
    spec: ModelSpec,
    layout: Layout,
    gpu_type: str,
    *,
    exact: bool = False,
    headroom_fraction: float = DEFAULT_HEADROOM_FRACTION,
) -> list[StageMemory]:
    """Per-stage per-device memory of a regular layout; with ``exact`` each stage is also traced."""
    views = device_views(spec, layout)
    out = evaluate(spec, views)
    stages = []
    for i, v in enumerate(views):
        peak = float(out.peak_bytes[i])
        device, fits = _fits(gpu_type, peak, headroom_fraction)
        s = StageMemory(
            stage=i,
            layer_start=v.layer_start,
            layer_end=v.layer_end,
            n_devices=layout.dp * layout.tp,
            in_flight=v.in_flight,
            peak_bytes=peak,
            peak_phase=out.phase_names[i],
            breakdown={k: float(a[i]) for k, a in out.breakdown.items()},
            device_bytes=device,
            fits=fits,
        )
        if exact:
            from tessera.memory.trace import trace_view

            r = trace_view(spec, v)
            s = replace(
                s, exact_peak_bytes=float(r.peak_bytes), exact_phase=r.peak_phase, exact_breakdown=r.breakdown
            )
        stages.append(s)
    return stages


@dataclass(frozen=True)
class FitRow:
    gpu_type: str
    n_gpus: int
    dp: int
    tp: int
    pp: int
    micro_batch: int
    recompute: str
    zero: int
    peak_bytes: float
    headroom_bytes: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def candidate_layouts(spec: ModelSpec, base: Layout, max_gpus: int = 1024) -> list[Layout]:
    """Layouts with power-of-two degrees that keep the base's batch, precision and optimizer."""
    powers = [2**k for k in range(11) if 2**k <= max_gpus]
    out = []
    for dp, tp, pp in itertools.product(powers, powers, powers):
        if dp * tp * pp > max_gpus or tp > 8:
            continue
        for mb in (1, 2, 4, 8):
            for recompute in ("none", "selective", "full"):
                for zero in (0, 1, 2, 3) if dp > 1 else (0,):
                    cand = replace(base, dp=dp, tp=tp, pp=pp, micro_batch=mb, recompute=recompute, zero=zero)
                    if base.global_batch is None:
                        cand = replace(cand, global_batch=base.batch)
                    try:
                        cand.validate(spec)
                    except LayoutError:
                        continue
                    out.append(cand)
    return out


def smallest_fitting_layouts(
    spec: ModelSpec,
    base: Layout,
    gpu_type: str,
    *,
    top: int = 3,
    headroom_fraction: float = DEFAULT_HEADROOM_FRACTION,
    max_gpus: int = 1024,
) -> list[FitRow]:
    """For one GPU type: the layouts with the fewest GPUs whose every stage fits, most headroom first."""
    gpu = get_gpu(gpu_type)
    layouts = candidate_layouts(spec, base, max_gpus)
    if not layouts:
        return []
    o = overhead_for(gpu.name)
    capacity = gpu.memory_bytes * (1 - headroom_fraction)
    # GPU counts in increasing order; the first count with a fitting layout is the answer, so larger ones
    # are never evaluated (their peaks could not change it). A model or layer class the formula does not
    # cover raises as if every layout had been evaluated.
    check_covered(spec, [v for lay in _representatives(layouts) for v in device_views(spec, lay)])
    memo: dict[Layout, float] = per_spec(_WORST, spec, dict)
    counts = np.array([lay.n_gpus for lay in layouts])
    for n in np.unique(counts):
        group = np.flatnonzero(counts == n)  # in candidate order
        todo = [layouts[j] for j in group if layouts[j] not in memo]
        if todo:
            views, owner = [], []
            for k, lay in enumerate(todo):
                for v in device_views(spec, lay):
                    views.append(v)
                    owner.append(k)
            peaks = evaluate(spec, views).peak_bytes
            got = np.zeros(len(todo))
            np.maximum.at(got, np.asarray(owner), peaks)
            memo.update(zip(todo, got.tolist(), strict=True))
        worst = np.array([memo[layouts[j]] for j in group])
        device = worst * o.fragmentation + o.context_bytes
        fit = np.flatnonzero(device <= capacity)
        if fit.size:
            chosen = sorted(fit.tolist(), key=lambda i: device[i])[:top]
            return [
                FitRow(
                    gpu_type=gpu.name,
                    n_gpus=int(n),
                    dp=lay.dp,
                    tp=lay.tp,
                    pp=lay.pp,
                    micro_batch=lay.micro_batch,
                    recompute=lay.recompute,
                    zero=lay.zero,
                    peak_bytes=float(worst[i]),
                    headroom_bytes=float(gpu.memory_bytes - device[i]),
                )
                for i in chosen
                for lay in (layouts[int(group[i])],)
            ]
    return []


# Per spec object, layout → its worst stage's tensor peak: the smallest-layout search asks the same layouts
# once per GPU type.
_WORST: dict[int, tuple[Any, dict[Layout, float]]] = {}


def _representatives(layouts: list[Layout]) -> list[Layout]:
    """One layout per combination of what picks the formula's layer classes (TP or not, one stage or
    several — a tied model's ends together —, one-sample micro-batches, recompute mode)."""
    seen: dict[tuple, Layout] = {}
    for lay in layouts:
        seen.setdefault((lay.tp == 1, lay.pp == 1, lay.micro_batch == 1, lay.recompute), lay)
    return list(seen.values())

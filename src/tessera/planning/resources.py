"""Frenzy's resource plans (§IV): every feasible (GPU type, GPU count, layout) for a job, ranked.

A serverless user never names GPUs, so the system lists what could run the job: for each GPU type and each
power-of-two count, every regular dp × tp × pp layout whose devices all fit (the memory module, with the
cheapest recompute/ZeRO setting that fits), with its estimated iteration time — and, when GPU prices are
given, the job's cost. Each layout is one combination of a Cell's plan space, so it is priced from the same
cached stage costs the Cells use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from tessera.planning.cells import CellEstimator, CellShape, stage_counts, usable_types


@dataclass(frozen=True)
class ResourcePlan:
    gpu_type: str
    n_gpus: int
    dp: int
    tp: int
    pp: int
    micro_batches: int
    recompute: str
    zero: int
    iteration_time_s: float
    samples_per_s: float
    max_device_bytes: float
    job_cost: float | None = None  # price × GPUs × the job's steps × iteration time, when priced

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _powers_up_to(n: int) -> list[int]:
    out, k = [], 1
    while k <= n:
        out.append(k)
        k *= 2
    return out


def resource_plans(
    estimator: CellEstimator,
    available: Mapping[str, int],
    *,
    max_gpus: int = 64,
    prefer: tuple[str, ...] = (),
    exclude: tuple[str, ...] = (),
    prices_per_gpu_hour: Mapping[str, float] | None = None,
    steps: int | None = None,
) -> list[ResourcePlan]:
    """All feasible resource plans, fastest first — or cheapest first when prices (per GPU-hour) and the
    job's step count are given."""
    spec, settings = estimator.spec, estimator.settings
    out: list[ResourcePlan] = []
    for t in usable_types(available, prefer, exclude):
        for n in _powers_up_to(min(available[t], max_gpus)):
            for S in stage_counts(n, spec.n_layers, settings.global_batch):
                shape = CellShape.of({t: n}, S)
                best: dict[tuple[int, int], ResourcePlan] = {}
                for rung in estimator.rungs:
                    space = estimator.space(shape, rung)
                    if space is None:
                        break
                    degrees = [
                        {space.degrees(s, j): j for j in range(len(o))} for s, o in enumerate(space.options)
                    ]
                    for dp_tp in degrees[0]:
                        if dp_tp in best or not all(dp_tp in d for d in degrees):
                            continue
                        choice = space.assemble([[d[dp_tp]] for d in degrees])
                        if choice is None or not choice.feasible:
                            continue
                        est = space.estimate(choice.options)
                        price = (prices_per_gpu_hour or {}).get(t)
                        cost = price * n * steps * est.iteration_time_s / 3600 if price and steps else None
                        best[dp_tp] = ResourcePlan(
                            gpu_type=t, n_gpus=n, dp=dp_tp[0], tp=dp_tp[1], pp=S,
                            micro_batches=space.micro_batches, recompute=space.rung.recompute,
                            zero=space.rung.zero, iteration_time_s=est.iteration_time_s,
                            samples_per_s=est.samples_per_s, max_device_bytes=max(est.device_bytes_per_device),
                            job_cost=cost,
                        )  # fmt: skip
                out.extend(best.values())
    if prices_per_gpu_hour and steps:
        out.sort(key=lambda r: (r.job_cost is None, r.job_cost or 0.0, r.iteration_time_s))
    else:
        out.sort(key=lambda r: (r.iteration_time_s, r.n_gpus))
    return out

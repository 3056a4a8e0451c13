"""Synthetic workloads with knobs: traces of other shapes than Philly, seeded and reproducible.

A generated workload is a :class:`~tessera.sim.trace.Trace` (arrival, duration on the requested GPUs, GPU count)
plus the :class:`~tessera.sim.workload.WorkloadSpec` that turns its rows into jobs (model mix, deadlines), so it
runs through the same simulator, policies and bounds as a real trace. The knobs:

* **arrivals** — ``jobs`` arrivals with mean gap ``mean_interarrival_s``; ``burstiness`` is the coefficient of
  variation of the gaps (1: Poisson; above 1: gamma gaps of shape 1/cv², i.e. bursts and lulls; below 1: more
  regular than Poisson);
* **durations** — lognormal around ``duration_median_s`` with log-σ ``duration_sigma``, clipped to
  [``min_duration_s``, ``max_duration_s``];
* **GPU counts** — ``gpu_mix``: (count, weight) pairs;
* **model mix** — ``model_classes``: the zoo size classes jobs draw from, by the job's GPU-time bucket
  (``bucket_hours``), as :mod:`tessera.sim.workload` does for Philly;
* **deadline tightness** — ``deadline_lambda``: a deadline at arrival + λ × duration, λ uniform in the range
  (ElasticFlow's rule), or none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

import numpy as np

from tessera.sim.trace import Trace, TraceJob
from tessera.sim.workload import SIZE_CLASSES, WorkloadSpec


@dataclass(frozen=True)
class GeneratorSpec:
    """One workload family's knobs (see the module doc); every draw comes from ``seed``."""

    name: str
    jobs: int = 1500
    mean_interarrival_s: float = 300.0
    burstiness: float = 1.0
    duration_median_s: float = 3600.0
    duration_sigma: float = 1.2
    min_duration_s: float = 60.0
    max_duration_s: float = 7 * 86400.0
    gpu_mix: tuple[tuple[int, float], ...] = ((1, 0.6), (2, 0.15), (4, 0.15), (8, 0.1))
    model_classes: tuple[str, ...] = ("small", "medium", "large", "xl")
    bucket_hours: tuple[float, ...] = (1.0, 10.0, 100.0)
    deadline_lambda: tuple[float, float] | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        checks = {
            "jobs": self.jobs >= 1,
            "mean_interarrival_s": self.mean_interarrival_s > 0,
            "burstiness": self.burstiness > 0,
            "duration_median_s": self.duration_median_s > 0,
            "duration_sigma": self.duration_sigma >= 0,
            "min_duration_s": 0 < self.min_duration_s <= self.max_duration_s,
            "gpu_mix": bool(self.gpu_mix) and all(c >= 1 and w >= 0 for c, w in self.gpu_mix)
            and sum(w for _, w in self.gpu_mix) > 0,
            "model_classes": all(c in SIZE_CLASSES for c in self.model_classes)
            and len(self.model_classes) == len(self.bucket_hours) + 1,
            "deadline_lambda": self.deadline_lambda is None
            or 0 < self.deadline_lambda[0] <= self.deadline_lambda[1],
        }  # fmt: skip
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"generator {self.name!r}: invalid {bad[0]} ({getattr(self, bad[0])!r})")

    def knobs(self) -> dict[str, object]:
        """The settings as plain JSON values (what a bench writes beside its figures)."""
        return asdict(self)

    def workload(self) -> WorkloadSpec:
        """How this family's rows become jobs: its model mix and deadlines."""
        return WorkloadSpec(
            seed=self.seed,
            size_classes=tuple(SIZE_CLASSES[c] for c in self.model_classes),
            bucket_hours=self.bucket_hours,
            deadlines=self.deadline_lambda is not None,
            deadline_lambda=self.deadline_lambda or (0.5, 1.5),
        )


def generate(spec: GeneratorSpec) -> Trace:
    """The family's trace: arrivals from t = 0, rows in arrival order."""
    rng = np.random.default_rng(spec.seed)
    cv = spec.burstiness
    shape = 1.0 / (cv * cv)
    gaps = rng.gamma(shape, spec.mean_interarrival_s / shape, size=spec.jobs)
    gaps[0] = 0.0
    arrivals = np.cumsum(gaps)
    durations = np.clip(
        spec.duration_median_s * np.exp(spec.duration_sigma * rng.standard_normal(spec.jobs)),
        spec.min_duration_s,
        spec.max_duration_s,
    )
    counts = np.array([c for c, _ in spec.gpu_mix])
    weights = np.array([w for _, w in spec.gpu_mix], dtype=float)
    gpus = rng.choice(counts, size=spec.jobs, p=weights / weights.sum())
    rows = tuple(
        TraceJob(f"{spec.name}-{i}", float(a), float(d), int(g), line=i + 1)
        for i, (a, d, g) in enumerate(zip(arrivals, durations, gpus, strict=True))
    )
    return Trace(rows, None, f"generated:{spec.name}")


#: Three families unlike Philly's dense, mostly single-GPU window (each with its reason).
FAMILIES: Mapping[str, GeneratorSpec] = {
    # many short single-GPU jobs in bursts (a notebook / hyper-parameter sweep cluster): queueing decides
    "bursty-short": GeneratorSpec(
        "bursty-short", jobs=2000, mean_interarrival_s=90.0, burstiness=3.0, duration_median_s=1200.0,
        duration_sigma=1.0, gpu_mix=((1, 0.8), (2, 0.15), (4, 0.05)),
        model_classes=("small", "small", "medium", "large"),
    ),
    # fewer, long, large multi-GPU jobs (a pre-training cluster): packing and growth decide
    "large-long": GeneratorSpec(
        "large-long", jobs=400, mean_interarrival_s=1800.0, burstiness=1.0, duration_median_s=6 * 3600.0,
        duration_sigma=0.8, gpu_mix=((4, 0.2), (8, 0.4), (16, 0.3), (32, 0.1)),
        model_classes=("medium", "large", "xl", "xl"),
    ),
    # a regular mixed stream with tight deadlines (ElasticFlow's setting): deadline-aware policies shine here
    "deadline-mixed": GeneratorSpec(
        "deadline-mixed", jobs=1200, mean_interarrival_s=240.0, burstiness=0.5, duration_median_s=2 * 3600.0,
        duration_sigma=1.0, gpu_mix=((1, 0.4), (2, 0.2), (4, 0.2), (8, 0.2)), deadline_lambda=(1.1, 2.0),
    ),
}  # fmt: skip


#: Traces of another shape than Philly at its size, for the cold-start target (a study from a cold cache in a
#: minute on any trace): not study families, so ``bench/sim_philly.py`` does not run them unless asked.
LONG_TRACES: Mapping[str, GeneratorSpec] = {
    # 16,000 jobs over about three months (a 500 s mean gap), half of them multi-GPU up to 32 (Philly's window:
    # mostly single-GPU jobs over two weeks)
    "months-16k": GeneratorSpec(
        "months-16k", jobs=16000, mean_interarrival_s=500.0, burstiness=1.5, duration_median_s=2 * 3600.0,
        duration_sigma=1.4, max_duration_s=14 * 86400.0,
        gpu_mix=((1, 0.5), (2, 0.15), (4, 0.15), (8, 0.12), (16, 0.05), (32, 0.03)),
    ),
}  # fmt: skip


def family(name: str, seed: int = 0) -> GeneratorSpec:
    """A named family (or long trace) with its seed; an unknown name is one clear error listing the known ones."""
    known = {**FAMILIES, **LONG_TRACES}
    try:
        spec = known[name]
    except KeyError:
        raise ValueError(f"--trace gen:FAMILY: unknown family {name!r} (known: {', '.join(known)})") from None
    return GeneratorSpec(**{**asdict(spec), "seed": seed})

"""From trace rows to scheduler jobs: model assignment, requested GPUs, amount of work, deadlines.

Crius §8.1 / §8.4 adapt Philly to a heterogeneous cluster by drawing each job's model from Table 2 (Fig. 15 gives
the size distribution) and its GPU type at random; the work follows from the trace. The rules here, all seeded:

* **Model** — by the trace row's GPU-time bucket (Sia/Pollux's convention: < 1 h, < 10 h, < 100 h, more), one
  of the Table 2 models of the matching size class (small 0.5–0.76 B, medium 1–1.3 B, large 2–4 B, XL 6.7–27 B),
  with a global batch from Table 2's choices for its family. Bigger jobs train bigger models, as in Fig. 15.
* **Requested GPUs** — a GPU type drawn in proportion to each type's share of the cluster; the count is the
  trace's GPU count rounded up to a power of two, raised to the fewest GPUs of that type the model fits in
  (N from the memory module). Types the model cannot fit within ``max_gpus`` are skipped.
* **Work** — iterations = trace duration × the job's true speed on its requested GPUs (the tuned plan), so on
  exactly what it asked for the job runs as long as it did in the trace.
* **Deadlines** (optional, ElasticFlow's rule) — arrival + λ × duration with λ ~ U[0.5, 1.5].
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from tessera.scheduler.knowledge import Config, PerfTable, next_power_of_two
from tessera.scheduler.state import Job, default_config
from tessera.sim.trace import Trace

# Crius Table 2: model sizes (zoo names) and global batch choices per family
TABLE2_BATCHES: dict[str, tuple[int, ...]] = {
    "wrn": (256, 512, 1024),
    "bert": (128, 256, 512),
    "moe": (256, 512, 1024),
}
SIZE_CLASSES: dict[str, tuple[str, ...]] = {
    "small": ("wrn-0.5b", "bert-0.76b", "moe-0.69b"),
    "medium": ("wrn-1b", "bert-1.3b", "moe-1.3b"),
    "large": ("wrn-2b", "wrn-4b", "bert-2.6b", "moe-2.4b"),
    "xl": ("wrn-6.8b", "bert-6.7b", "moe-10b", "moe-27b"),
}
BUCKET_HOURS: tuple[float, ...] = (1.0, 10.0, 100.0)  # GPU-time thresholds between the size classes
DEFAULT_BATCHES: tuple[int, ...] = (128, 256)  # families Table 2 does not list


def family(model: str) -> str:
    return model.split("-")[0]


@dataclass(frozen=True)
class WorkloadSpec:
    """How trace rows become jobs (see the module doc). ``size_classes`` in bucket order."""

    seed: int = 0
    size_classes: tuple[tuple[str, ...], ...] = tuple(SIZE_CLASSES.values())
    bucket_hours: tuple[float, ...] = BUCKET_HOURS
    batches: Mapping[str, tuple[int, ...]] = field(default_factory=lambda: dict(TABLE2_BATCHES))
    max_gpus: int = 64
    deadlines: bool = False
    deadline_lambda: tuple[float, float] = (0.5, 1.5)

    @classmethod
    def of_models(cls, models: list[str], **kw: object) -> WorkloadSpec:
        """Every job draws from these models, whatever its size (one size class)."""
        if not models:
            raise ValueError("--models: no model given")
        return cls(size_classes=(tuple(models),), bucket_hours=(), **kw)  # type: ignore[arg-type]

    def configs(self) -> list[Config]:
        """Every configuration (model, global batch; defaults otherwise) the workload may use."""
        out = set()
        for cls in self.size_classes:
            for m in cls:
                for b in self.batches.get(family(m), DEFAULT_BATCHES):
                    out.add(default_config(m, b))
        return sorted(out)


def build_jobs(trace: Trace, table: PerfTable, spec: WorkloadSpec = WorkloadSpec()) -> list[Job]:
    """Jobs for every trace row (ids 0.. in submit order). ``table`` must know every configuration."""
    if len(spec.size_classes) != len(spec.bucket_hours) + 1:
        raise ValueError("size_classes must have one more entry than bucket_hours")
    rng = np.random.default_rng(spec.seed)
    types = list(table.gpu_types)
    share = np.array([table.capacity[t] for t in types], dtype=float)
    share /= share.sum()
    n = len(trace.jobs)
    # every random draw is made up front, so one job's outcome never shifts another's
    u_model, u_batch, u_lambda = rng.random(n), rng.random(n), rng.random(n)
    type_order = [rng.choice(len(types), size=len(types), replace=False, p=share) for _ in range(n)]
    jobs: list[Job] = []
    for i, tj in enumerate(trace.jobs):
        gpu_h = tj.duration_s * tj.num_gpus / 3600.0
        bucket = int(np.searchsorted(spec.bucket_hours, gpu_h, side="right"))
        models = spec.size_classes[bucket]
        model = models[min(int(u_model[i] * len(models)), len(models) - 1)]
        batches = spec.batches.get(family(model), DEFAULT_BATCHES)
        gb = batches[min(int(u_batch[i] * len(batches)), len(batches) - 1)]
        probe = Job(job_id=i, model=model, global_batch=gb, arrival_s=tj.submit_s, total_iterations=1.0)
        want = next_power_of_two(tj.num_gpus)
        chosen: tuple[str, int] | None = None
        for k in type_order[i]:
            t = types[k]
            need = table.min_gpus(probe, t)
            if need is None:
                continue
            count = max(want, need)
            if count <= min(spec.max_gpus, table.capacity[t]):
                chosen = (t, count)
                break
        if chosen is None:
            raise ValueError(
                f"trace line {tj.line}: {model} (batch {gb}) fits no GPU type within {spec.max_gpus} GPUs"
            )
        rate = table.true_of(probe.config, (chosen,))
        deadline = None
        if spec.deadlines:
            lo, hi = spec.deadline_lambda
            deadline = tj.submit_s + (lo + (hi - lo) * u_lambda[i]) * tj.duration_s
        jobs.append(
            Job(
                job_id=i,
                model=model,
                global_batch=gb,
                arrival_s=tj.submit_s,
                total_iterations=max(1.0, tj.duration_s * rate),
                requested_gpus=chosen[1],
                requested_type=chosen[0],
                deadline_s=deadline,
                name=tj.trace_id,
            )
        )
    return jobs


def demand_gpu_hours(jobs: Sequence[Job], table: PerfTable) -> float:
    """GPU-hours the jobs need on their requested GPUs (their load on the cluster as submitted)."""
    total = 0.0
    for j in jobs:
        req = j.requested
        if req is None:
            continue
        rate = table.true_of(j.config, req)
        total += j.total_iterations / rate * req[0][1] / 3600.0 if rate > 0 else 0.0
    return total

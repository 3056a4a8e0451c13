"""Rates from the planning layer's Cells, with a disk cache and a parallel warm-up.

For a job configuration (zoo model, global batch) on a cluster:

* Cell estimate (Crius §5.1): :meth:`CellEstimator.estimate` of (GPUs, stages) — samples/s ÷ global batch;
* DP-only: the one-stage Cell's pure data-parallel variant (dp = n, tp = 1), cheapest memory setting that fits
  (recompute, ZeRO-1 — both still data parallelism) — what the baselines profile;
* truth: the Cell-guided tuner's plan (Crius §5.2) of the best ``tuned_cells`` Cells on those GPUs by estimate,
  the fastest of them — "the best plan for its allocation".

Estimating a configuration's grid costs seconds (tuning dominates), so a warmed table is saved per
configuration under ``$TESSERA_HOME/sim/`` (or ``~/.cache/tessera/sim``), keyed by a digest of the cluster,
the cost model and the source of every module the figures depend on — any change there recomputes them.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from tessera.hardware import ClusterSpec
from tessera.scheduler.knowledge import Config, PerfTable
from tessera.scheduler.state import GPUs

DIGEST_PACKAGES = ("hardware", "models", "memory", "perf", "planning")
CACHE_VERSION = 1


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


class CellSource:
    """A :class:`~tessera.scheduler.knowledge.RateSource` backed by :class:`CellEstimator` per configuration."""

    def __init__(self, cluster: ClusterSpec, cost: Any = None, *, tuned_cells: int = 2) -> None:
        self.cluster = cluster
        self.cost = cost
        self.tuned_cells = tuned_cells
        self._est: dict[Config, Any] = {}
        self.failures: list[str] = []

    def digest(self) -> str:
        h = hashlib.sha256()
        h.update(json.dumps(self.cluster.model_dump(mode="json"), sort_keys=True).encode())
        cal = self.cost.calibration_dict() if self.cost is not None else {}
        h.update(json.dumps(cal, sort_keys=True, default=str).encode())
        h.update(f"{_source_digest()}/{self.tuned_cells}/{CACHE_VERSION}".encode())
        return h.hexdigest()[:16]

    def estimator(self, config: Config) -> Any:
        est = self._est.get(config)
        if est is None:
            from tessera.models.zoo import get_spec
            from tessera.perf.costmodel import CostModel
            from tessera.planning.cells import CellEstimator
            from tessera.planning.space import TrainSettings

            model, gb = config
            spec = get_spec(model)
            settings = TrainSettings(model=model, global_batch=gb, seq_len=spec.seq_len)
            est = self._est[config] = CellEstimator(spec, settings, self.cluster, self.cost or CostModel())
        return est

    def stages(self, config: Config, gpus: GPUs) -> tuple[int, ...]:
        from tessera.planning.cells import stage_counts

        est = self.estimator(config)
        return tuple(stage_counts(sum(n for _, n in gpus), est.spec.n_layers, config[1]))

    def cell(self, config: Config, gpus: GPUs, n_stages: int) -> float:
        from tessera.planning.cells import CellShape

        try:
            c = self.estimator(config).estimate(CellShape.of(gpus, n_stages))
        except (AssertionError, ValueError, ZeroDivisionError) as e:
            # a Cell the planning layer cannot lay out counts as infeasible; the failure is kept for reports
            self.failures.append(f"{config[0]} b{config[1]} {dict(gpus)} S{n_stages}: {type(e).__name__} {e}")
            return 0.0
        return c.samples_per_s / config[1] if c is not None and c.feasible else 0.0

    def dp(self, config: Config, gpu_type: str, n_gpus: int) -> float:
        from tessera.planning.cells import CellShape
        from tessera.planning.space import default_micro_batches

        est = self.estimator(config)
        gb = config[1]
        if n_gpus > gb:
            return 0.0
        shape = CellShape.of({gpu_type: n_gpus}, 1)
        best = 0.0
        for rung in est.rungs:
            for B in sorted({default_micro_batches(1, gb), gb}):
                space = est.space(shape, rung, B)
                if space is None:
                    return 0.0
                j = next(
                    (j for j in range(len(space.options[0])) if space.degrees(0, j) == (n_gpus, 1)), None
                )
                if j is None:
                    return 0.0
                choice = space.assemble([[j]])
                if choice is not None and choice.feasible:
                    best = max(best, gb / choice.iteration_time_s)
            if best > 0:
                break  # the cheapest memory setting that fits: more recompute only costs time
        return best / gb

    def true(self, config: Config, gpus: GPUs) -> float:
        from tessera.planning.cells import CellShape
        from tessera.planning.tuner import tune

        est = self.estimator(config)
        ranked = sorted(
            ((self.cell(config, gpus, s), s) for s in self.stages(config, gpus)), key=lambda x: -x[0]
        )
        best = 0.0
        for rate, s in ranked[: self.tuned_cells]:
            if rate <= 0:
                break
            r = tune(est, CellShape.of(gpus, s))
            if r is not None and r.estimate.feasible:
                best = max(best, r.estimate.samples_per_s / config[1])
        if best == 0.0 and ranked and ranked[0][0] > 0:
            best = ranked[0][0]
        return best


def _warm_one(args: tuple[ClusterSpec, Config, dict[str, int], int, bool, int]) -> tuple[Config, dict]:
    cluster, config, capacity, max_gpus, mixes, tuned = args
    src = CellSource(cluster, tuned_cells=tuned)
    table = PerfTable(src, capacity)
    table.warm([config], max_gpus=max_gpus, mixes=mixes)
    data = table.export(config)
    data["failures"] = src.failures
    return config, data


def cell_table(
    cluster: ClusterSpec,
    configs: Iterable[Config],
    *,
    max_gpus: int = 64,
    mixes: bool = True,
    workers: int | None = None,
    use_cache: bool = True,
    tuned_cells: int = 2,
    progress: Callable[[Config], None] | None = None,
) -> PerfTable:
    """A :class:`PerfTable` of every configuration on ``cluster``, its grid warmed (from the disk cache where
    present, else estimated — in ``workers`` processes — and saved). Lookups outside the grid are computed on
    demand. ``progress`` is called once per configuration done."""
    from tessera.hardware import get_gpu

    capacity = {get_gpu(t).name: n for t, n in cluster.gpu_counts().items()}
    src = CellSource(cluster, tuned_cells=tuned_cells)
    table = PerfTable(src, capacity)
    configs = sorted(set(configs))
    d = cache_dir() / f"{cluster.name}-{src.digest()}-g{max_gpus}{'m' if mixes else ''}"
    todo: list[Config] = []
    for c in configs:
        f = d / f"{c[0]}-b{c[1]}.json"
        if use_cache and f.exists():
            try:
                data = json.loads(f.read_text())
                table.load(c, data)
                src.failures.extend(data.get("failures", []))
                if progress:
                    progress(c)
                continue
            except (ValueError, KeyError):
                pass  # a damaged cache file is recomputed
        todo.append(c)
    if todo:
        jobs = [(cluster, c, capacity, max_gpus, mixes, tuned_cells) for c in todo]
        n = max(1, min(workers or os.cpu_count() or 1, len(jobs)))

        def done(c: Config, data: dict) -> None:
            table.load(c, data)
            src.failures.extend(data.get("failures", []))
            if use_cache:  # saved as each configuration finishes, so an interrupted warm-up keeps its work
                d.mkdir(parents=True, exist_ok=True)
                tmp = d / f".{c[0]}-b{c[1]}.json.tmp"
                tmp.write_text(json.dumps(data))
                tmp.replace(d / f"{c[0]}-b{c[1]}.json")
            if progress:
                progress(c)

        if n == 1:
            for j in jobs:
                done(*_warm_one(j))
        else:
            with ProcessPoolExecutor(n) as pool:
                for c, data in pool.map(_warm_one, jobs):
                    done(c, data)
    return table

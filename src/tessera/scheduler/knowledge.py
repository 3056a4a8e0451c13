"""What a policy may know about job speed, and the table behind it.

Crius §8.1: baselines decide with *data-parallel-only* throughput data, while every job *runs* with the best plan
for its allocation. So three figures exist per job configuration (:class:`~tessera.scheduler.state.JobConfig`: model, global batch,
sequence length, precision, …) and GPUs:

* ``dp_rate``   — iterations/s of the DP-only plan on n GPUs of one type (0 when DP-only does not fit): what
  Gavel, Sia, ElasticFlow, Gandiva… measure and schedule with;
* ``cell_rate`` — the Crius Cell estimate (GPU types × count × stages): what Tessera schedules with;
* ``true_rate`` — the tuned plan's speed on the allocation: what the simulator makes the job run at. Policies
  never see it: they get a :class:`KnowledgeView`.

:class:`PerfTable` memoizes all three in front of a :class:`RateSource` — the planning layer's Cells
(:class:`tessera.scheduler.speed.SpeedSource`, shared by the simulator and the service) for real runs, or :class:`SyntheticSource` (a closed form)
for tests and toy examples. Rates are iterations per second of the job's global batch.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from tessera.scheduler.state import GPUs, Job, JobConfig, as_config, gpus_of

# the rate tables' key; the raw ``*_of`` lookups also take a (model, global batch) pair for the defaults
Config = JobConfig


@dataclass(frozen=True)
class CellOption:
    """One candidate Cell of a job with its estimated speed (Crius §4: GPUs × stage count)."""

    gpus: GPUs
    n_stages: int | None  # None: the planner picks the best stage count (baselines choose GPUs only)
    rate_iters_per_s: float

    @property
    def n_gpus(self) -> int:
        return sum(n for _, n in self.gpus)

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(t for t, _ in self.gpus)

    @property
    def is_mix(self) -> bool:
        return len(self.gpus) > 1


def powers_of_two(lo: int, hi: int) -> list[int]:
    out, k = [], 1
    while k <= hi:
        if k >= lo:
            out.append(k)
        k *= 2
    return out


def next_power_of_two(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


class Knowledge(ABC):
    """The speed information a policy decides with. Every method is cheap (table lookups after warm-up)."""

    gpu_types: tuple[str, ...]
    capacity: Mapping[str, int]  # GPUs per type in the cluster (the most a Cell may use)

    @abstractmethod
    def dp_rate(self, job: Job, gpu_type: str, n_gpus: int) -> float:
        """Iterations/s of the data-parallel-only plan on ``n_gpus`` of ``gpu_type`` (0.0 when it does not
        fit in memory) — the profiling data the baselines have (Crius §8.1)."""

    @abstractmethod
    def cell_rate(self, job: Job, gpus: GPUs, n_stages: int | None = None) -> float:
        """The Cell estimate of ``gpus`` with ``n_stages`` stages (the best stage count when None), in
        iterations/s; 0.0 when no plan of the Cell fits in memory."""

    @abstractmethod
    def cell_stages(self, job: Job, gpus: GPUs) -> tuple[int, ...]:
        """Stage counts a Cell of these GPUs may have (1, 2, 4, … dividing the GPU count)."""

    @abstractmethod
    def fits(self, job: Job, gpus: GPUs) -> bool:
        """Whether any plan of the job fits these GPUs' memory (the memory module; the core enforces it)."""

    def best_stages(self, job: Job, gpus: GPUs) -> int | None:
        """The stage count of the fastest Cell on these GPUs (None when nothing fits)."""
        best, arg = 0.0, None
        for s in self.cell_stages(job, gpus):
            r = self.cell_rate(job, gpus, s)
            if r > best:
                best, arg = r, s
        return arg

    def min_gpus(self, job: Job, gpu_type: str, *, dp_only: bool = False) -> int | None:
        """The fewest GPUs (a power of two) of ``gpu_type`` the job fits in — with any plan, or DP-only."""
        for n in powers_of_two(1, self.capacity.get(gpu_type, 0)):
            ok = self.dp_rate(job, gpu_type, n) > 0 if dp_only else self.fits(job, ((gpu_type, n),))
            if ok:
                return n
        return None

    def base_count(self, job: Job, gpu_type: str) -> int | None:
        """Crius's N on one type: the requested count (a power of two at least) raised to the smallest count
        that fits the type's memory (N from the memory module when the user gave none)."""
        need = self.min_gpus(job, gpu_type)
        if need is None:
            return None
        return max(need, next_power_of_two(job.requested_gpus or 1))

    def cells(
        self,
        job: Job,
        *,
        gpu_types: Sequence[str] | None = None,
        counts: Mapping[str, Sequence[int]] | None = None,
        mixes: bool = True,
        per_stage: bool = False,
    ) -> list[CellOption]:
        """Crius's Cells of a job (§6.1 "Initializing Cells"): per GPU type, counts N/2, N, 2N (N from
        :meth:`base_count`; ``counts`` overrides) and, with ``mixes``, the same totals split evenly over two
        types. One option per GPUs with its best stage count, or every stage count with ``per_stage``. Only
        Cells that fit in memory; fastest first."""
        types = [t for t in (gpu_types or self.gpu_types) if self.capacity.get(t, 0) > 0]
        n_of: dict[str, list[int]] = {}
        for t in types:
            if counts is not None and t in counts:
                n_of[t] = [c for c in counts[t] if 1 <= c <= self.capacity[t]]
                continue
            n = self.base_count(job, t)
            if n is None:
                continue
            n_of[t] = sorted({c for c in (max(1, n // 2), n, 2 * n) if c <= self.capacity[t]})
        shapes: set[GPUs] = {((t, c),) for t, cs in n_of.items() for c in cs}
        if mixes:
            fit = sorted(n_of)
            for i, a in enumerate(fit):
                for b in fit[i + 1 :]:
                    for total in sorted(set(n_of[a]) | set(n_of[b])):
                        half = total // 2
                        if (
                            total >= 2
                            and 2 * half == total
                            and half <= self.capacity[a]
                            and half <= self.capacity[b]
                        ):
                            shapes.add(((a, half), (b, half)))
        out: list[CellOption] = []
        for g in shapes:
            if per_stage:
                for s in self.cell_stages(job, g):
                    r = self.cell_rate(job, g, s)
                    if r > 0:
                        out.append(CellOption(g, s, r))
            else:
                s = self.best_stages(job, g)
                if s is not None:
                    out.append(CellOption(g, s, self.cell_rate(job, g, s)))
        out.sort(key=lambda c: (-c.rate_iters_per_s, c.n_gpus, c.gpus, c.n_stages))
        return out


class RateSource(Protocol):
    """Where a :class:`PerfTable` gets figures it has not memoized (all in iterations/s, 0.0 = does not fit)."""

    def stages(self, config: Config, gpus: GPUs) -> tuple[int, ...]: ...

    def cell(self, config: Config, gpus: GPUs, n_stages: int) -> float: ...

    def dp(self, config: Config, gpu_type: str, n_gpus: int) -> float: ...

    def true(self, config: Config, gpus: GPUs) -> float: ...


class PerfTable(Knowledge):
    """Memoized rates of every job configuration: DP-only, Cell estimates and truth (see the module doc)."""

    def __init__(self, source: RateSource, capacity: Mapping[str, int]):
        self.source = source
        self.capacity = dict(capacity)
        self.gpu_types = tuple(sorted(t for t, n in self.capacity.items() if n > 0))
        self._cell: dict[tuple[Config, GPUs, int], float] = {}
        self._best: dict[tuple[Config, GPUs], float] = {}
        self._stages: dict[tuple[Config, GPUs], tuple[int, ...]] = {}
        self._dp: dict[tuple[Config, str, int], float] = {}
        self._true: dict[tuple[Config, GPUs], float] = {}

    # the memos' own object of each configuration, and by id the object found for each other one seen (built
    # lazily; not pickled: ids are per process)
    _canon: dict[JobConfig, JobConfig] | None = None
    _alias: dict[int, tuple[JobConfig, JobConfig]] | None = None
    _MAX_ALIASES = 100_000  # other objects remembered (the service makes one per job spec): then start over

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_canon", None)
        state.pop("_alias", None)
        return state

    def _own(self, config: Config) -> JobConfig:
        """The object the memos hold for ``config``. A dict compares an equal key that is another object field
        by field (13 fields, in Python), which was most of a lookup when the jobs' configurations are not the
        objects the table was built or loaded with (tables built in worker processes, unpickled): looked up by
        the memos' own object, a key hits by identity. An object seen before is found by its id (the entry
        holds the object, so its id is not reused while there)."""
        alias = self._alias
        if alias is not None:
            hit = alias.get(id(config))
            if hit is not None and hit[0] is config:
                return hit[1]
        if self._canon is None or alias is None or len(alias) >= self._MAX_ALIASES:
            memos = (self._cell, self._best, self._stages, self._dp, self._true)
            self._canon = {k[0]: k[0] for m in memos for k in m}
            self._alias = alias = {}
        c = as_config(config)
        own = self._canon.setdefault(c, c)
        if type(config) is JobConfig:  # (model, global batch) pairs are not remembered: a new tuple each time
            alias[id(config)] = (config, own)
        return own

    # ------------------------------------------------------------------ raw lookups by configuration
    def stages_of(self, config: Config, gpus: GPUs) -> tuple[int, ...]:
        config = self._own(config)
        key = (config, gpus)
        s = self._stages.get(key)
        if s is None:
            s = self._stages[key] = tuple(self.source.stages(config, gpus))
        return s

    def cell_of(self, config: Config, gpus: GPUs, n_stages: int | None = None) -> float:
        config = self._own(config)
        if n_stages is None:
            key = (config, gpus)
            r = self._best.get(key)
            if r is None:
                r = self._best[key] = max(
                    (self.cell_of(config, gpus, s) for s in self.stages_of(config, gpus)), default=0.0
                )
            return r
        k3 = (config, gpus, n_stages)
        r = self._cell.get(k3)
        if r is None:
            r = self._cell[k3] = (
                float(self.source.cell(config, gpus, n_stages))
                if n_stages in self.stages_of(config, gpus)
                else 0.0
            )
        return r

    def dp_of(self, config: Config, gpu_type: str, n_gpus: int) -> float:
        config = self._own(config)
        key = (config, gpu_type, n_gpus)
        r = self._dp.get(key)
        if r is None:
            r = self._dp[key] = float(self.source.dp(config, gpu_type, n_gpus)) if n_gpus >= 1 else 0.0
        return r

    def true_of(self, config: Config, gpus: GPUs) -> float:
        config = self._own(config)
        key = (config, gpus)
        r = self._true.get(key)
        if r is None:
            r = self._true[key] = float(self.source.true(config, gpus)) if gpus else 0.0
        return r

    # ------------------------------------------------------------------ Knowledge
    def dp_rate(self, job: Job, gpu_type: str, n_gpus: int) -> float:
        return self.dp_of(job.config, gpu_type, n_gpus)

    def cell_rate(self, job: Job, gpus: GPUs, n_stages: int | None = None) -> float:
        return self.cell_of(job.config, gpus, n_stages)

    def cell_stages(self, job: Job, gpus: GPUs) -> tuple[int, ...]:
        return self.stages_of(job.config, gpus)

    def fits(self, job: Job, gpus: GPUs) -> bool:
        return self.true_of(job.config, gpus) > 0

    # ------------------------------------------------------------------ truth (simulator only)
    def true_rate(self, job: Job, gpus: GPUs) -> float:
        """The tuned plan's speed on these GPUs — what the job really runs at. Not for policies."""
        return self.true_of(job.config, gpus)

    def view(self) -> KnowledgeView:
        return KnowledgeView(self)

    # ------------------------------------------------------------------ warm-up and persistence
    def grid(self, config: Config, *, max_gpus: int = 64, mixes: bool = True) -> list[GPUs]:
        """The GPUs a table precomputes for a configuration: powers of two per type up to ``max_gpus``, and
        even two-type mixes of those totals."""
        out: list[GPUs] = []
        for t in self.gpu_types:
            out += [((t, n),) for n in powers_of_two(1, min(max_gpus, self.capacity[t]))]
        if mixes:
            for i, a in enumerate(self.gpu_types):
                for b in self.gpu_types[i + 1 :]:
                    for total in powers_of_two(2, max_gpus):
                        h = total // 2
                        if h <= self.capacity[a] and h <= self.capacity[b]:
                            out.append(((a, h), (b, h)))
        return out

    def warm(self, configs: Iterable[Config], *, max_gpus: int = 64, mixes: bool = True) -> None:
        """Fill the memo for every configuration's grid (Cells of every stage count, DP-only, truth)."""
        for c in map(as_config, configs):
            for g in self.grid(c, max_gpus=max_gpus, mixes=mixes):
                self.cell_of(c, g)
                self.true_of(c, g)
                if len(g) == 1:
                    self.dp_of(c, g[0][0], g[0][1])

    def export(self, config: Config) -> dict:
        """The memoized figures of one configuration as JSON-able lists (for a disk cache)."""
        config = as_config(config)
        return {
            "stages": [[list(map(list, g)), list(s)] for (c, g), s in self._stages.items() if c == config],
            "cell": [[list(map(list, g)), s, r] for (c, g, s), r in self._cell.items() if c == config],
            "dp": [[t, n, r] for (c, t, n), r in self._dp.items() if c == config],
            "true": [[list(map(list, g)), r] for (c, g), r in self._true.items() if c == config],
        }

    def load(self, config: Config, data: Mapping) -> None:
        """Inverse of :meth:`export`."""
        config = self._own(config)

        def g_of(x: list) -> GPUs:
            return tuple((str(t), int(n)) for t, n in x)

        for g, s in data.get("stages", []):
            self._stages[(config, g_of(g))] = tuple(int(v) for v in s)
        for g, s, r in data.get("cell", []):
            self._cell[(config, g_of(g), int(s))] = float(r)
        for t, n, r in data.get("dp", []):
            self._dp[(config, str(t), int(n))] = float(r)
        for g, r in data.get("true", []):
            self._true[(config, g_of(g))] = float(r)


class KnowledgeView(Knowledge):
    """A policy's window on a :class:`PerfTable`: DP-only data, Cells and memory fit — never the truth."""

    def __init__(self, table: PerfTable):
        self._t = table
        self.capacity = table.capacity
        self.gpu_types = table.gpu_types

    def dp_rate(self, job: Job, gpu_type: str, n_gpus: int) -> float:
        return self._t.dp_of(job.config, gpu_type, n_gpus)

    def cell_rate(self, job: Job, gpus: GPUs, n_stages: int | None = None) -> float:
        return self._t.cell_of(job.config, gpus, n_stages)

    def cell_stages(self, job: Job, gpus: GPUs) -> tuple[int, ...]:
        return self._t.stages_of(job.config, gpus)

    def fits(self, job: Job, gpus: GPUs) -> bool:
        return self._t.true_of(job.config, gpus) > 0


# ---------------------------------------------------------------------------------------------- synthetic
@dataclass(frozen=True)
class SyntheticModel:
    """A closed-form job configuration for tests and toy examples: memory need and how it scales."""

    memory_gib: float  # total memory the model needs across its GPUs (weights, optimizer, activations)
    base_rate: float = 1.0  # iterations/s on one GPU of speed 1.0 (if it fitted)
    scaling: float = 0.9  # rate ∝ n^scaling on n GPUs
    dp_memory_factor: float = 2.0  # DP-only replicates: it needs this × memory per GPU over the sharded plan
    cell_error: float = 0.0  # the Cell estimate is off by this fraction (estimation error)
    dp_penalty: float = 0.85  # the DP-only plan's speed relative to the tuned plan (it is not the best plan)
    max_stages: int = 8


class SyntheticSource:
    """Rates from a formula: a job fits ``gpus`` when their total memory covers its need (and each GPU holds
    its share); speed = base × Σ per-type speed share × n^scaling, mixes paying a small imbalance tax."""

    def __init__(
        self,
        models: Mapping[Config | tuple[str, int], SyntheticModel]
        | Callable[[tuple[str, int]], SyntheticModel],
        gpu_speed: Mapping[str, float],
        gpu_memory_gib: Mapping[str, float],
    ):
        self.models = models if callable(models) else {as_config(k): v for k, v in models.items()}
        self.gpu_speed, self.gpu_memory_gib = dict(gpu_speed), dict(gpu_memory_gib)

    def _model(self, config: Config) -> SyntheticModel:
        if callable(self.models):
            return self.models((config.model, config.global_batch))
        return self.models[config]

    def _fits(self, m: SyntheticModel, gpus: GPUs, factor: float = 1.0) -> bool:
        n = sum(k for _, k in gpus)
        return all(self.gpu_memory_gib[t] * n >= m.memory_gib * factor for t, _ in gpus)

    def _rate(self, m: SyntheticModel, gpus: GPUs) -> float:
        n = sum(k for _, k in gpus)
        mean_speed = sum(self.gpu_speed[t] * k for t, k in gpus) / n
        slowest = min(self.gpu_speed[t] for t, _ in gpus)
        speed = 0.5 * (mean_speed + slowest) if len(gpus) > 1 else mean_speed
        return m.base_rate * speed * n**m.scaling

    def stages(self, config: Config, gpus: GPUs) -> tuple[int, ...]:
        n = sum(k for _, k in gpus)
        return tuple(s for s in powers_of_two(1, min(n, self._model(config).max_stages)) if n % s == 0)

    def cell(self, config: Config, gpus: GPUs, n_stages: int) -> float:
        m = self._model(config)
        if not self._fits(m, gpus):
            return 0.0
        # more stages cost a little pipeline bubble; the best Cell is the fewest stages that fit
        return self._rate(m, gpus) * (1 + m.cell_error) * (1 - 0.02 * math.log2(n_stages))

    def dp(self, config: Config, gpu_type: str, n_gpus: int) -> float:
        m = self._model(config)
        # DP-only replicates more state than the best plan: it needs dp_memory_factor × the memory to fit
        if not self._fits(m, ((gpu_type, n_gpus),), m.dp_memory_factor):
            return 0.0
        return self._rate(m, ((gpu_type, n_gpus),)) * m.dp_penalty

    def true(self, config: Config, gpus: GPUs) -> float:
        m = self._model(config)
        return self._rate(m, gpus) if self._fits(m, gpus) else 0.0


def synthetic_table(
    models: Mapping[Config | tuple[str, int], SyntheticModel] | Callable[[tuple[str, int]], SyntheticModel],
    capacity: Mapping[str, int],
    gpu_speed: Mapping[str, float] | None = None,
    gpu_memory_gib: Mapping[str, float] | None = None,
) -> PerfTable:
    """A :class:`PerfTable` over :class:`SyntheticSource` (speeds and memories default to the catalog's bf16
    peak relative to A100-40GB, and the catalog's memory)."""
    from tessera.hardware import get_gpu

    types = [t for t in capacity]
    if gpu_speed is None:
        ref = get_gpu("A100-40GB").peak_flops("bf16")
        gpu_speed = {t: get_gpu(t).peak_flops("bf16") / ref for t in types}
    if gpu_memory_gib is None:
        gpu_memory_gib = {t: get_gpu(t).memory_bytes / 2**30 for t in types}
    return PerfTable(SyntheticSource(models, gpu_speed, gpu_memory_gib), capacity)


__all__ = [
    "CellOption",
    "Config",
    "JobConfig",
    "Knowledge",
    "KnowledgeView",
    "PerfTable",
    "RateSource",
    "SyntheticModel",
    "SyntheticSource",
    "gpus_of",
    "next_power_of_two",
    "powers_of_two",
    "synthetic_table",
]

"""The scheduler's nouns: jobs as submitted, their live state, allocations, and the cluster's free GPUs.

Both backends (the simulator and the live service) share these. ``Job`` is immutable (what the user asked
for); ``JobState`` is the scheduler's mutable record of one job (status, allocation, progress), owned by the
:class:`~tessera.scheduler.core.Scheduler` — policies read it and never write it. ``Allocation`` is what a
policy decides for one job: GPUs by type, the concrete (node, GPUs) placement and optionally the Cell's stage
count. ``ClusterState`` keeps free GPUs per node in a numpy array so placement and "what is free" are cheap.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache

import numpy as np

from tessera.hardware import ClusterSpec, get_gpu

# A Cell's GPUs: (GPU type, count) pairs sorted by type name — the same form as ``CellShape.gpus``.
GPUs = tuple[tuple[str, int], ...]


def gpus_of(gpus: Mapping[str, int] | Iterable[tuple[str, int]]) -> GPUs:
    """Normalize {type: count} or pairs into the sorted ``GPUs`` tuple (zero counts dropped, types merged)."""
    items = gpus.items() if isinstance(gpus, Mapping) else gpus
    merged: dict[str, int] = {}
    for t, n in items:
        if n < 0:
            raise ValueError(f"GPU count for {t} must be >= 0, got {n}")
        if n:
            merged[t] = merged.get(t, 0) + int(n)
    return tuple(sorted(merged.items()))


def n_gpus_of(gpus: GPUs) -> int:
    return sum(n for _, n in gpus)


@dataclass(frozen=True)
class JobConfig:
    """What a job's speed depends on — the key of every rate table: jobs equal in these run at the same speed.

    ``model`` is a zoo name or a Hugging Face ``config.json`` path (with ``entrypoint``: the user model's
    name); ``seq_len`` None means the model's own. ``gpu_types`` (preferred, best first),
    ``exclude_gpu_types`` and ``max_gpus`` restrict the Cells a job may be given. The simulator's jobs use
    the defaults beside (model, global batch); the service fills every field from the job spec.
    ``grad_clip``, ``val_every_steps`` and ``val_batches`` are the job's time-costing training extras
    (:class:`~tessera.perf.extras.StepExtras`: clipping, and validation batches every so many steps): they
    change a step's time, so jobs that differ in them are different configurations.
    """

    model: str
    global_batch: int
    seq_len: int | None = None
    precision: str = "bf16"
    optimizer: str = "adamw"
    recompute: str = "auto"
    entrypoint: str | None = None
    gpu_types: tuple[str, ...] = ()
    exclude_gpu_types: tuple[str, ...] = ()
    max_gpus: int | None = None
    grad_clip: bool = False
    val_every_steps: int | None = None
    val_batches: int = 0
    _hash: int = field(default=0, init=False, repr=False, compare=False)
    _sort_key: tuple | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("JobConfig.model must not be empty")
        if self.global_batch < 1:
            raise ValueError(f"JobConfig.global_batch must be >= 1, got {self.global_batch}")
        # hashed on every rate lookup (policies key their memos by it): computed once
        object.__setattr__(self, "_hash", hash(self._fields()))

    def _fields(self) -> tuple:
        return (
            self.model, self.global_batch, self.seq_len, self.precision, self.optimizer, self.recompute,
            self.entrypoint, self.gpu_types, self.exclude_gpu_types, self.max_gpus, self.grad_clip,
            self.val_every_steps, self.val_batches,
        )  # fmt: skip

    def __hash__(self) -> int:
        return self._hash

    @property
    def speed_key(self) -> JobConfig:
        """This configuration without the limits on where it may run (``gpu_types``, ``exclude_gpu_types``,
        ``max_gpus``): what a measured speed on given GPUs depends on. A job capped at one GPU runs a step on
        that GPU exactly as fast as the same training uncapped, so measurements are shared between them."""
        if not (self.gpu_types or self.exclude_gpu_types or self.max_gpus is not None):
            return self
        return replace(self, gpu_types=(), exclude_gpu_types=(), max_gpus=None)

    def _order(self) -> tuple:
        """Sort key (None as the smallest value): configurations sort by model, then global batch, …"""
        key = self._sort_key
        if key is None:
            key = tuple((v is not None, v if v is not None else 0) for v in self._fields())
            object.__setattr__(self, "_sort_key", key)
        return key

    def __lt__(self, other: JobConfig) -> bool:
        return self._order() < other._order()

    def __le__(self, other: JobConfig) -> bool:
        return self._order() <= other._order()

    def __gt__(self, other: JobConfig) -> bool:
        return self._order() > other._order()

    def __ge__(self, other: JobConfig) -> bool:
        return self._order() >= other._order()

    def __deepcopy__(self, memo: dict) -> JobConfig:
        return self  # immutable

    def __reduce__(self) -> tuple:
        return (JobConfig, self._fields())  # rebuilt, so the hash is the receiving process's

    @property
    def is_default(self) -> bool:
        """Only (model, global batch) set: a simulator job."""
        return self == JobConfig(self.model, self.global_batch)

    def slug(self) -> str:
        """A file name for this configuration (the rate table's disk cache): ``model-bBATCH`` for a default
        configuration, followed by a digest of the other fields otherwise."""
        import hashlib
        import re

        name = re.sub(r"[^A-Za-z0-9_.\-]+", "_", self.model.rsplit("/", 1)[-1])[:64]
        base = f"{name}-b{self.global_batch}"
        if self.is_default and name == self.model:
            return base
        fields = self._fields()
        if not (self.grad_clip or self.val_batches):
            fields = fields[:10]  # without training extras: the digest configurations had before them
        return f"{base}-{hashlib.sha256(repr(fields).encode()).hexdigest()[:12]}"

    def to_dict(self) -> dict:
        return {f: getattr(self, f) for f in self.__dataclass_fields__ if not f.startswith("_")}


@cache
def default_config(model: str, global_batch: int) -> JobConfig:
    """The shared (interned) default configuration of (model, global batch): one object per key, so the rate
    memos mostly hit by identity."""
    return JobConfig(model, int(global_batch))


def as_config(key: JobConfig | tuple[str, int]) -> JobConfig:
    """A configuration from a ``JobConfig`` or a (model, global batch) pair (tests and tables use pairs)."""
    if isinstance(key, JobConfig):
        return key
    model, gb = key
    return default_config(str(model), int(gb))


@dataclass(frozen=True)
class Job:
    """A training job as submitted: model and batch, amount of work, arrival, and what the user requested.

    ``requested_gpus`` / ``requested_type`` are the user's request (a trace's GPU count, a GPU type); either
    may be None for a serverless job (Frenzy), in which case policies derive N from memory. ``total_iterations``
    is the work: iterations of ``global_batch`` samples. ``deadline_s`` is absolute simulation time.
    ``config`` is the rate-table key (:class:`JobConfig`); by default (model, global batch) with defaults.
    """

    job_id: int
    model: str
    global_batch: int
    arrival_s: float
    total_iterations: float
    requested_gpus: int | None = None
    requested_type: str | None = None
    deadline_s: float | None = None
    name: str = ""
    priority: int = (
        0  # the user's, -100..100: a higher one is queued first and never preempted for a lower one
    )
    config: JobConfig = None  # type: ignore[assignment]  # filled in __post_init__ when not given

    def __post_init__(self) -> None:
        if self.config is None:
            object.__setattr__(self, "config", default_config(self.model, self.global_batch))
        elif self.config.global_batch != self.global_batch:
            raise ValueError(
                f"job {self.job_id}: config.global_batch {self.config.global_batch} != global_batch {self.global_batch}"
            )

    def __deepcopy__(self, memo: dict) -> Job:
        return self  # immutable

    @property
    def requested(self) -> GPUs | None:
        """The requested GPUs as a ``GPUs`` tuple, when both type and count are known."""
        if self.requested_gpus is None or self.requested_type is None:
            return None
        return ((self.requested_type, self.requested_gpus),)


@dataclass(frozen=True)
class Allocation:
    """GPUs held by one job: ``placement`` = (node index, GPUs on it) sorted by node index, ``gpus`` = the
    same GPUs by type, and the stage count of the Cell chosen (None: the planner picks the best)."""

    placement: tuple[tuple[int, int], ...]
    gpus: GPUs
    n_stages: int | None = None
    # GPUs held, summed once (policies ask millions of times a run; a large job spans a dozen nodes)
    n_gpus: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "n_gpus", sum(n for _, n in self.placement))

    @property
    def nodes(self) -> tuple[int, ...]:
        return tuple(i for i, _ in self.placement)

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(t for t, _ in self.gpus)

    def same_gpus(self, other: Allocation | None) -> bool:
        """Same physical GPUs (the job keeps running without a restart)."""
        return other is not None and self.placement == other.placement

    def to_dict(self) -> dict:
        return {
            "gpus": dict(self.gpus),
            "placement": [list(p) for p in self.placement],
            "n_stages": self.n_stages,
        }


class JobStatus(enum.Enum):
    PENDING = "pending"  # submitted, not holding GPUs (never started, preempted, or lost its node)
    RUNNING = "running"  # holding GPUs (possibly still restarting: see ``JobState.paused_until_s``)
    FINISHED = "finished"
    DROPPED = "dropped"  # a deadline-aware policy gave up on it


@dataclass
class JobState:
    """The scheduler's live record of one job. Policies read it; only the scheduler core writes it.

    Progress is kept as a linear model the backend updates: ``done_iterations`` as of ``as_of_s``, advancing at
    ``rate_iters_per_s`` once ``paused_until_s`` (restart / rescale in progress) has passed.
    """

    job: Job
    status: JobStatus = JobStatus.PENDING
    allocation: Allocation | None = None
    done_iterations: float = 0.0
    as_of_s: float = 0.0
    rate_iters_per_s: float = 0.0  # measured speed on the current allocation (0 when not running)
    paused_until_s: float = 0.0
    restarts: int = 0  # allocation changes after the first start (rescale, migration, resume, failure)
    first_start_s: float | None = None
    finish_s: float | None = None
    last_change_s: float = 0.0  # when the allocation last changed (start, rescale, preemption)
    attained_gpu_s: float = 0.0  # GPU-seconds received so far (as of ``as_of_s``), for LAS-style policies
    meta: dict = field(default_factory=dict)  # per-policy scratch space (the policy's own bookkeeping)
    # the job's id, kept beside it: policies read it millions of times a run (a property cost a call each)
    job_id: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.job_id = self.job.job_id

    def done_at(self, now_s: float) -> float:
        """Iterations done by ``now_s`` (extrapolated from the last report)."""
        if self.status is not JobStatus.RUNNING or self.rate_iters_per_s <= 0:
            return self.done_iterations
        start = max(self.as_of_s, self.paused_until_s)
        return min(
            self.job.total_iterations, self.done_iterations + self.rate_iters_per_s * max(0.0, now_s - start)
        )

    def remaining_at(self, now_s: float) -> float:
        return max(0.0, self.job.total_iterations - self.done_at(now_s))

    def attained_at(self, now_s: float) -> float:
        """GPU-seconds attained by ``now_s``."""
        if self.status is not JobStatus.RUNNING or self.allocation is None:
            return self.attained_gpu_s
        return self.attained_gpu_s + self.allocation.n_gpus * max(0.0, now_s - self.as_of_s)

    @property
    def n_gpus(self) -> int:
        return self.allocation.n_gpus if self.allocation else 0


@dataclass(frozen=True)
class NodeInfo:
    """One node of the cluster as the scheduler sees it."""

    index: int
    name: str
    gpu_type: str
    n_gpus: int
    gpu_memory_bytes: int


class ClusterState:
    """Nodes and their free GPUs (a numpy vector), with per-type views and take/give operations.

    Cheap to :meth:`copy` (one small array), so a policy's virtual allocation works on a copy.
    """

    def __init__(
        self, nodes: Sequence[NodeInfo], free: np.ndarray | None = None, up: np.ndarray | None = None
    ):
        self.nodes = tuple(nodes)
        self.capacity = np.array([n.n_gpus for n in self.nodes], dtype=np.int64)
        self.free = self.capacity.copy() if free is None else free.astype(np.int64, copy=True)
        self.up = np.ones(len(self.nodes), dtype=bool) if up is None else up.copy()
        self.types: tuple[str, ...] = tuple(sorted({n.gpu_type for n in self.nodes}))
        self.type_index = np.array([self.types.index(n.gpu_type) for n in self.nodes], dtype=np.int64)
        self.memory = np.array([n.gpu_memory_bytes for n in self.nodes], dtype=np.int64)
        self._nodes_of_type = {t: np.flatnonzero(self.type_index == i) for i, t in enumerate(self.types)}
        self._max_capacity = {t: int(self.capacity[idx].max()) for t, idx in self._nodes_of_type.items()}

    @classmethod
    def from_spec(cls, spec: ClusterSpec) -> ClusterState:
        return cls(
            [
                NodeInfo(i, n.name, n.gpu_type, n.n_gpus, get_gpu(n.gpu_type).memory_bytes)
                for i, n in enumerate(spec.nodes())
            ]
        )

    @classmethod
    def of(cls, nodes: Iterable[tuple[str, int]]) -> ClusterState:
        """A cluster from (GPU type, GPUs per node) pairs, one per node — handy in tests."""
        return cls(
            [
                NodeInfo(i, f"{get_gpu(t).name.lower()}-{i}", get_gpu(t).name, n, get_gpu(t).memory_bytes)
                for i, (t, n) in enumerate(nodes)
            ]
        )

    def copy(self) -> ClusterState:
        out = object.__new__(ClusterState)
        out.nodes, out.capacity, out.types = self.nodes, self.capacity, self.types
        out.type_index, out.memory, out._nodes_of_type = self.type_index, self.memory, self._nodes_of_type
        out._max_capacity = self._max_capacity
        out.free, out.up = self.free.copy(), self.up.copy()
        return out

    def nodes_of_type(self, gpu_type: str) -> np.ndarray:
        return self._nodes_of_type.get(gpu_type, np.empty(0, dtype=np.int64))

    def max_capacity_of_type(self, gpu_type: str) -> int:
        """The most GPUs one node of this type has (up or not)."""
        return self._max_capacity[gpu_type]

    def capacity_by_type(self) -> dict[str, int]:
        """GPUs per type on nodes that are up."""
        cap = np.bincount(self.type_index, weights=self.capacity * self.up, minlength=len(self.types))
        return {t: int(cap[i]) for i, t in enumerate(self.types)}

    def free_by_type(self) -> dict[str, int]:
        f = np.bincount(self.type_index, weights=self.free * self.up, minlength=len(self.types))
        return {t: int(f[i]) for i, t in enumerate(self.types)}

    def free_of(self, gpu_type: str) -> int:
        idx = self.nodes_of_type(gpu_type)
        return int((self.free[idx] * self.up[idx]).sum())

    @property
    def total_gpus(self) -> int:
        return int(self.capacity.sum())

    def gpus_of_placement(self, placement: Iterable[tuple[int, int]]) -> GPUs:
        return gpus_of((self.nodes[i].gpu_type, n) for i, n in placement)

    def can_take(self, placement: Iterable[tuple[int, int]]) -> bool:
        return all(self.up[i] and 0 < n <= self.free[i] for i, n in placement)

    def take(self, placement: Iterable[tuple[int, int]]) -> None:
        for i, n in placement:
            if not self.up[i] or n > self.free[i] or n <= 0:
                raise ValueError(
                    f"node {self.nodes[i].name}: cannot take {n} GPUs ({self.free[i]} free, up={bool(self.up[i])})"
                )
            self.free[i] -= n

    def give(self, placement: Iterable[tuple[int, int]]) -> None:
        for i, n in placement:
            self.free[i] += n
            if self.free[i] > self.capacity[i]:
                raise ValueError(f"node {self.nodes[i].name}: freed more GPUs than it has")

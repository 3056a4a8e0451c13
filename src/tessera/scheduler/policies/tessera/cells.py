"""A job's Cells as the tessera policy sees them (Crius §6.1 "Initializing Cells"), kept across rounds.

For every GPU type the counts N/2, N, 2N, … ``max_scale`` × N for the LP and on to ``grow_scale`` × N for growing
into idle GPUs (N: the requested count raised to the fewest GPUs the model fits in, from the memory module), × stage
counts × even two-type mixes, each with its estimate (Crius
§5.1) normalized by the job's reference rate, so that a small model's many iterations per second do not outweigh a
large one's. Jobs of one configuration and request share their Cells (a trace has thousands of each).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from tessera.scheduler.knowledge import CellOption
from tessera.scheduler.policy import SchedulingContext
from tessera.scheduler.state import Allocation, GPUs, Job, JobState


def shares_type(a: GPUs, b: GPUs) -> bool:
    """Whether two GPU sets have a GPU type in common: a move between them keeps a worker (the fast rescale);
    one between GPU sets of no common type lands on other nodes and relaunches the gang."""
    return any(t == u for t, _ in a for u, _ in b)


def fits_in(gpus: GPUs, free: Mapping[str, int], held: GPUs = ()) -> bool:
    """Whether ``gpus`` fit, by count per type, in the ``free`` GPUs plus those ``held`` (a job's own, given back
    when it moves); placement is the reservation's to check."""
    have = dict(held)
    return all(free.get(t, 0) + have.get(t, 0) >= n for t, n in gpus)


@dataclass(frozen=True)
class Cell:
    """One allowed Cell of a job, flattened for the hot loops."""

    norm: float  # estimated rate ÷ the job's reference rate (:meth:`CellCatalog.reference`)
    rate: float  # estimated iterations/s
    gpus: GPUs
    n_stages: int | None
    n_gpus: int
    mix: bool
    # rate and norm are the speed measured on these GPUs, not the estimate (RoundState.held_cell)
    measured: bool = False


@dataclass
class JobCells:
    """The Cells of a job (shared by the jobs of one key), and their views the rules use."""

    key: tuple  # (configuration, requested count, requested type): jobs with one key share their Cells
    cells: list[Cell]  # allowed Cells, fastest first
    ref: float  # the reference rate its throughput is normalized by
    by_gpus: dict[GPUs, Cell]
    min_cells: list[Cell]  # per single type, the Cell with the fewest GPUs (fewest first)
    lp_cells: list[Cell] = field(default_factory=list)  # what the LP chooses from: single types, else mixes
    _arrays: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)
    _moves: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)
    _others: dict[GPUs, list[Cell]] = field(default_factory=dict)

    def lp_arrays(self, types: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The LP Cells as arrays: normalized throughputs, rates, and GPUs per Cell and type (in ``types``)."""
        out = self._arrays.get(types)
        if out is None:
            col = {t: k for k, t in enumerate(types)}
            gpus = np.zeros((len(self.lp_cells), len(types)))
            for i, c in enumerate(self.lp_cells):
                for t, n in c.gpus:
                    gpus[i, col[t]] = n
            norm = np.array([c.norm for c in self.lp_cells])
            out = self._arrays[types] = (norm, np.array([c.rate for c in self.lp_cells]), gpus)
        return out

    def lp_others(self, held: GPUs) -> list[Cell]:
        """The LP Cells on other GPUs than ``held`` (a running job's moves; kept per GPUs held)."""
        out = self._others.get(held)
        if out is None:
            out = self._others[held] = [c for c in self.lp_cells if c.gpus != held]
        return out

    def lp_moves(
        self, types: tuple[str, ...], held: GPUs
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """For a running job that holds ``held``: its LP Cells on other GPUs — their normalized throughputs and
        rates — the GPUs per option and type with the held GPUs as the first row (the LP group's rows), and
        which of those Cells share no GPU type with ``held`` (a move there keeps no worker: a relaunch). Kept,
        since thousands of running jobs share a few (key, GPUs held)."""
        out = self._moves.get((types, held))
        if out is None:
            norm, rate, gpus = self.lp_arrays(types)
            keep = np.array([c.gpus != held for c in self.lp_cells], dtype=bool)
            fresh = np.array([not shares_type(c.gpus, held) for c in self.lp_cells], dtype=bool)[keep]
            row = np.zeros((1, len(types)))
            for t, n in held:
                row[0, types.index(t)] = n
            out = self._moves[(types, held)] = (norm[keep], rate[keep], np.vstack([row, gpus[keep]]), fresh)
        return out


class CellOptions(Protocol):
    """The policy options that shape a job's Cells."""

    count_scaling: bool
    type_scaling: bool
    mixes: bool
    max_scale: int
    grow_scale: int
    max_gpus: int
    normalize: str


class CellCatalog:
    """Every active job's :class:`JobCells`, built on first use and kept until the job finishes (or the policy
    is reset: new estimates)."""

    def __init__(self, options: CellOptions) -> None:
        self.opt = options
        self._info: dict[int, JobCells] = {}
        self._shared: dict[tuple, JobCells] = {}

    def clear(self) -> None:
        self._info.clear()
        self._shared.clear()

    def forget(self, job_ids: Iterable[int]) -> None:
        for jid in job_ids:
            self._info.pop(jid, None)

    def info(self, ctx: SchedulingContext, job: Job) -> JobCells:
        inf = self._info.get(job.job_id)
        if inf is not None:
            return inf
        key = (job.config, job.requested_gpus, job.requested_type)
        inf = self._shared.get(key)
        if inf is not None:
            self._info[job.job_id] = inf
            return inf
        opts: list[CellOption] = ctx.knowledge.cells(
            job, gpu_types=self.types(ctx, job), counts=self.ladder(ctx, job), mixes=self.opt.mixes
        )
        ref = self.reference(ctx, job, opts)
        cells = [
            Cell(c.rate_iters_per_s / ref, c.rate_iters_per_s, c.gpus, c.n_stages, c.n_gpus, c.is_mix)
            for c in opts
        ]
        mins: dict[str, Cell] = {}
        for c in cells:
            if not c.mix:
                t = c.gpus[0][0]
                if t not in mins or (c.n_gpus, -c.rate) < (mins[t].n_gpus, -mins[t].rate):
                    mins[t] = c
        singles = [c for c in cells if not c.mix]
        # the LP chooses up to max_scale x N; the Cells above it are for idle GPUs only (grow, sprint, backfill)
        cap = {
            t: self.opt.max_scale * (ctx.knowledge.base_count(job, t) or 0)
            for t in {c.gpus[0][0] for c in singles}
        }
        lp = [c for c in singles if c.n_gpus <= cap[c.gpus[0][0]]]
        inf = JobCells(
            key,
            cells,
            ref,
            {c.gpus: c for c in cells},
            sorted(mins.values(), key=lambda c: c.n_gpus),
            lp or singles or cells,
        )
        self._info[job.job_id] = self._shared[key] = inf
        return inf

    def types(self, ctx: SchedulingContext, job: Job) -> list[str]:
        """The GPU types a job may run on: all, or only the requested one without heterogeneity scaling."""
        types = list(ctx.knowledge.gpu_types)
        if not self.opt.type_scaling and job.requested_type:
            types = [job.requested_type]
        return types

    def ladder(self, ctx: SchedulingContext, job: Job) -> dict[str, list[int]]:
        """Per GPU type the counts N/2, N, 2N, … up to max(max_scale, grow_scale)·N (Crius: max_scale = 2); N
        alone without adaptivity scaling."""
        counts: dict[str, list[int]] = {}
        top = max(self.opt.max_scale, self.opt.grow_scale)
        for t in self.types(ctx, job):
            n = ctx.knowledge.base_count(job, t)
            if not n:
                counts[t] = []
            elif not self.opt.count_scaling:
                counts[t] = [n]
            else:
                ladder = {max(1, n // 2)}
                k = n
                while k <= top * n and k <= self.opt.max_gpus:
                    ladder.add(k)
                    k *= 2
                counts[t] = sorted(ladder)
        return counts

    def reference(self, ctx: SchedulingContext, job: Job, opts: list[CellOption]) -> float:
        """The rate a job's throughput is normalized by: its estimate on the requested GPUs, or (no request, it
        does not fit, or ``normalize="best"``) its fastest single-type Cell at the base count."""
        kn = ctx.knowledge
        req = job.requested
        ref = kn.cell_rate(job, req) if req is not None and self.opt.normalize == "request" else 0.0
        if ref <= 0:
            base = [c for c in opts if not c.is_mix and c.n_gpus == kn.base_count(job, c.gpus[0][0])]
            ref = max((c.rate_iters_per_s for c in base or opts), default=1.0)
        return ref

    def held_cell(self, ctx: SchedulingContext, js: JobState, a: Allocation) -> Cell:
        """The Cell a running job holds (one of its Cells, or built for GPUs outside its ladder)."""
        inf = self.info(ctx, js.job)
        c = inf.by_gpus.get(a.gpus)
        if c is None:
            rate = ctx.knowledge.cell_rate(js.job, a.gpus)
            c = Cell(rate / inf.ref, rate, a.gpus, a.n_stages, a.n_gpus, len(a.gpus) > 1)
        return c


__all__ = ["Cell", "CellCatalog", "JobCells", "fits_in", "shares_type"]

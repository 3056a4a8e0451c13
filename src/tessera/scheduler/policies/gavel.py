"""Gavel (Narayanan et al., OSDI'20): heterogeneity-aware max-sum-throughput, one LP, round-based time shares.

Rules implemented:

* **Effective throughput** (Gavel §3.1): a job's throughput under an allocation X is Σ_t T[j, t] · X[j, t],
  where X[j, t] is the fraction of wall time job j spends on GPU type t and T[j, t] its throughput on its
  *requested* GPU count of type t (Gavel never changes a job's GPU count — its ``scale_factor``).
* **Max-sum-throughput policy** (Gavel §4.1, ``policies/max_sum_throughput.py``):
  maximize Σ_j Σ_t T[j, t] · X[j, t]  s.t.  X ≥ 0,  Σ_t X[j, t] ≤ 1,  Σ_j scale_j · X[j, t] ≤ capacity_t.
  Throughputs are normalized per job (÷ its fastest type's, so every row tops at 1, as Gavel's policies
  with packing normalize each job's row): iterations/s of different models are not comparable, and a small
  model's many steps per second would otherwise drown a large one. Solved with scipy's HiGHS
  (:func:`max_sum_throughput`).
* **Round-based mechanism** (Gavel §5, ``scheduler.py`` ``_update_priorities`` /
  ``_schedule_jobs_on_workers_helper``): each round, priority[j, t] = X[j, t] / (fraction of time j has
  received on t since the allocation was computed); entries (job, type) are taken greedily in descending
  (priority, deficit, allocation) order, a job at most once, when its scale factor still fits the type's
  free GPUs (:func:`assign_round`). A job that keeps its type keeps its GPUs (Gavel's lease extension).
* The allocation is recomputed when the set of active jobs changes (arrivals, completions), as Gavel does.

Information: DP-only throughput (Crius §8.1), never Tessera's Cells, through :class:`DPProfile`; the job
still runs the best plan for the GPUs it gets. Where DP-only cannot hold a job at its requested count on any
type, its row falls back to the profile's linear stand-in (else it would never run).

Scale: jobs with the same normalized throughput row and scale factor are interchangeable in the LP, so it
is solved over *job classes* (variables per class and type, Σ_t X[c, t] ≤ |c|) and each member gets an equal
share — an optimal solution of the per-job LP by symmetry. The LP has (#classes × #types) variables however
long the queue is.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from tessera.hardware import get_gpu
from tessera.scheduler.knowledge import Knowledge, powers_of_two
from tessera.scheduler.policy import Policy, SchedulingContext, register
from tessera.scheduler.state import Job

# Gavel gives a never-run job with a positive allocation an effectively infinite priority.
UNSERVED_PRIORITY = 1e9


def max_sum_throughput(
    throughput: np.ndarray,
    scale: Sequence[int] | np.ndarray,
    capacity: Sequence[int] | np.ndarray,
    count: Sequence[int] | np.ndarray | None = None,
) -> np.ndarray:
    """Gavel's max-sum-throughput LP. ``throughput[m, k]`` of job (class) m on type k (0 = cannot run there),
    ``scale[m]`` GPUs per job, ``capacity[k]`` GPUs per type, ``count[m]`` jobs in the class (default 1).
    Returns X[m, k]: the time share of class m on type k, summed over its members (Σ_k X[m, k] ≤ count[m])."""
    T = np.asarray(throughput, dtype=np.float64)
    if T.ndim != 2:
        raise ValueError(f"throughput must be a 2-D (jobs × types) array, got shape {T.shape}")
    m, k = T.shape
    if m == 0 or k == 0:
        return np.zeros((m, k))
    s = np.asarray(scale, dtype=np.float64)
    cap = np.asarray(capacity, dtype=np.float64)
    cnt = np.ones(m) if count is None else np.asarray(count, dtype=np.float64)
    if s.shape != (m,) or cnt.shape != (m,) or cap.shape != (k,):
        raise ValueError("scale and count need one entry per job, capacity one per type")
    # variable (i, t) ↦ i·k + t
    rows_job = np.repeat(np.arange(m), k)
    rows_type = m + np.tile(np.arange(k), m)
    cols = np.arange(m * k)
    data = np.concatenate([np.ones(m * k), np.repeat(s, k)])
    A = coo_matrix(
        (data, (np.concatenate([rows_job, rows_type]), np.concatenate([cols, cols]))), shape=(m + k, m * k)
    ).tocsr()
    b = np.concatenate([cnt, cap])
    upper = np.where(T.ravel() > 0, np.repeat(cnt, k), 0.0)
    res = linprog(
        -T.ravel(), A_ub=A, b_ub=b, bounds=np.column_stack([np.zeros(m * k), upper]), method="highs"
    )
    if res.status != 0:  # the zero allocation is always feasible, so this is a solver failure
        raise RuntimeError(f"Gavel LP failed: {res.message}")
    return np.clip(res.x.reshape(m, k), 0.0, None)


def priorities(allocation: np.ndarray, received_s: np.ndarray, elapsed_s: np.ndarray) -> np.ndarray:
    """Gavel's per-(job, type) priority: allocation ÷ the fraction of time received there so far; a job with a
    positive share and no time yet gets :data:`UNSERVED_PRIORITY` × its share."""
    X = np.asarray(allocation, dtype=np.float64)
    rec = np.asarray(received_s, dtype=np.float64)
    el = np.asarray(elapsed_s, dtype=np.float64)[:, None]
    frac = np.divide(rec, el, out=np.zeros_like(rec), where=el > 0)
    return np.where(frac > 0, X / np.where(frac > 0, frac, 1.0), X * UNSERVED_PRIORITY)


def assign_round(
    allocation: np.ndarray,
    received_s: np.ndarray,
    elapsed_s: np.ndarray,
    throughput: np.ndarray,
    scale: Sequence[int] | np.ndarray,
    free: Sequence[int] | np.ndarray,
) -> list[int | None]:
    """One Gavel round: per job, the type index it runs on this round, or None. Entries are taken in
    descending (priority, deficit, allocation) order over all (job, type) pairs — Gavel's global queue —
    skipping jobs already placed, zero throughputs and scale factors that no longer fit."""
    X = np.asarray(allocation, dtype=np.float64)
    m, k = X.shape
    prio = priorities(X, received_s, elapsed_s)
    deficit = X * np.asarray(elapsed_s, dtype=np.float64)[:, None] - np.asarray(received_s, dtype=np.float64)
    T = np.asarray(throughput, dtype=np.float64)
    left = np.array(free, dtype=np.int64)
    s = np.asarray(scale, dtype=np.int64)
    # lexsort sorts by the last key first; negate for descending; job index, then type, break ties stably
    order = np.lexsort((np.tile(np.arange(k), m), np.repeat(np.arange(m), k), -X.ravel(), -deficit.ravel(),
                        -prio.ravel()))  # fmt: skip
    out: list[int | None] = [None] * m
    if m == 0 or k == 0:
        return out
    # the walk below in plain Python lists over the entries that can run at all (thousands of jobs × types a round
    # at scale); it stops once no type has room for even the smallest scale factor — nothing more could be taken
    order = order[T.ravel()[order] > 0]
    jobs, kinds = np.divmod(order, k)
    room = left.tolist()
    need = s.tolist()
    smallest = min(need)
    open_types = sum(1 for x in room if x >= smallest)
    for j, t in zip(jobs.tolist(), kinds.tolist(), strict=True):
        if open_types == 0:
            break
        if out[j] is not None or need[j] > room[t]:
            continue
        out[j] = t
        before = room[t]
        room[t] = before - need[j]
        if before >= smallest > room[t]:
            open_types -= 1
    return out


class DPProfile:
    """The baselines' throughput data (Crius §8.1: "only allow them to schedule jobs with data profiled from
    data parallelism"): the DP-only rate of a job on n GPUs of a type, 0 where DP-only does not fit — so a
    baseline believes a job needs the GPUs data parallelism needs (Crius §8: ElasticFlow-LS "overestimates
    the minimum required share of large jobs").

    The largest models fit data-parallel-only nowhere, so no profile of them exists at all; rather than never
    scheduling them, a baseline then assumes such a job scales linearly with GPU count × peak FLOP/s wherever
    the memory module says it fits (in arbitrary units: the policies here use a job's rates only relative to
    each other, or treat such jobs as best effort). Shared by the baseline policies; cached per configuration.
    """

    def __init__(self, kn: Knowledge) -> None:
        self.kn = kn
        self._rate: dict[tuple, float] = {}
        self._has: dict[tuple, bool] = {}

    def has_dp(self, job: Job) -> bool:
        """Whether DP-only data exists for the job at all (some type and count holds it)."""
        h = self._has.get(job.config)
        if h is None:
            h = self._has[job.config] = any(
                self.kn.dp_rate(job, t, n) > 0
                for t in self.kn.gpu_types
                for n in powers_of_two(1, min(64, self.kn.capacity.get(t, 0)))
            )
        return h

    def rate(self, job: Job, gpu_type: str, n_gpus: int) -> float:
        """Iterations/s the baseline believes the job runs at on ``n_gpus`` of ``gpu_type`` (0: cannot run)."""
        key = (job.config, gpu_type, n_gpus)
        r = self._rate.get(key)
        if r is None:
            r = (
                self.kn.dp_rate(job, gpu_type, n_gpus)
                if self.has_dp(job)
                else self.standin(job, gpu_type, n_gpus)
            )
            self._rate[key] = r
        return r

    def standin(self, job: Job, gpu_type: str, n_gpus: int) -> float:
        """The linear stand-in (GPUs × peak FLOP/s relative to one A100) where the memory fits, else 0. Also
        the policies' last resort when the DP-only data allows a job nothing the policy may give it (e.g. a
        fixed GPU count DP-only cannot hold), so that no job waits forever."""
        if n_gpus < 1 or not self.kn.fits(job, ((gpu_type, n_gpus),)):
            return 0.0
        return n_gpus * get_gpu(gpu_type).peak_flops("fp16") / get_gpu("A100-40GB").peak_flops("fp16")


def job_scale(kn: Knowledge, job: Job) -> int | None:
    """Gavel's scale factor: the requested GPU count (the fewest GPUs that fit on some type when the job
    requested none)."""
    if job.requested_gpus:
        return job.requested_gpus
    counts = [n for t in kn.gpu_types if (n := kn.min_gpus(job, t))]
    return min(counts) if counts else None


@register("gavel")
class Gavel(Policy):
    """Gavel max-sum-throughput with its round-based priority mechanism (see the module doc)."""

    every_round = True  # time-sharing: priorities change every round

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._lp_key: tuple | None = None
        self._share: dict[int, np.ndarray] = {}  # job id → X row (time share per type)
        # job id → seconds run per type since the LP (made when the job first runs after it: a zero row before)
        self._received: dict[int, np.ndarray] = {}
        self._lp_jobs: frozenset[int] = frozenset()  # the jobs of the LP (active since it was computed)
        self._elapsed_s = 0.0  # seconds since the LP: the same for every one of its jobs
        self._scale: dict[int, int | None] = {}  # job id → its scale factor (job_scale), read once
        self._class_of: dict[int, int] = {}  # job id → its LP class (configuration, scale factor) as an index
        self._class_ids: dict[tuple, int] = {}
        self._rows: dict[tuple, np.ndarray] = {}  # (config, scale, types) → normalized DP throughput row
        self._job_rows: dict[int, np.ndarray] = {}  # job id → its row (the same arrays; a config hash per job
        # per round costs more than the round's other work on a long queue)
        self._job_types: tuple[str, ...] | None = None
        self._last_now: float | None = None
        self._prof: DPProfile | None = None
        self.lp_solves = 0

    def knowledge_changed(self) -> None:
        """New rates: the throughput rows are rebuilt from them; the allocation stands until the active set
        changes (as the simulator's does), and so does the time each job received since it was computed —
        zeroing that live on every measured speed made every job look starved, and the rounds swapped jobs
        that had just started."""
        self._prof, self._rows, self._job_rows = None, {}, {}
        self._scale, self._class_of, self._class_ids = {}, {}, {}

    def _job_row(self, prof: DPProfile, job: Job, scale: int, types: tuple[str, ...]) -> np.ndarray:
        """:meth:`_row` kept per job (a job's configuration and scale factor never change)."""
        row = self._job_rows.get(job.job_id)
        if row is None:
            row = self._job_rows[job.job_id] = self._row(prof, job, scale, types)
        return row

    def _row(self, prof: DPProfile, job: Job, scale: int, types: tuple[str, ...]) -> np.ndarray:
        key = (job.config, scale, types)
        row = self._rows.get(key)
        if row is None:
            row = np.array([prof.rate(job, t, scale) for t in types], dtype=np.float64)
            if (
                not row.any()
            ):  # DP-only cannot hold it at its scale on any type: the stand-in, or it never runs
                row = np.array([prof.standin(job, t, scale) for t in types], dtype=np.float64)
            top = row.max(initial=0.0)
            row = row / top if top > 0 else row
            self._rows[key] = row
        return row

    def schedule(self, ctx: SchedulingContext) -> None:
        kn, types = ctx.knowledge, ctx.cluster.types
        if self._prof is None or self._prof.kn is not kn or self._job_types != types:
            self._prof, self._rows, self._job_rows, self._job_types = DPProfile(kn), {}, {}, types
            self._scale, self._class_of, self._class_ids = {}, {}, {}
        prof = self._prof
        k = len(types)
        states = [*ctx.running, *ctx.pending]
        if not states:
            return
        # 1. time accounting since the last round (Gavel's job_time_so_far / worker_time_so_far)
        dt = 0.0 if self._last_now is None else max(0.0, ctx.now_s - self._last_now)
        self._last_now = ctx.now_s
        if dt > 0:
            received, lp_jobs = self._received, self._lp_jobs
            col = {t: i for i, t in enumerate(types)}
            for js in ctx.running:
                if js.allocation is not None and js.job_id in lp_jobs:
                    rec = received.get(js.job_id)
                    if rec is None:
                        rec = received[js.job_id] = np.zeros(k)
                    rec[col[js.allocation.gpus[0][0]]] += dt
            self._elapsed_s += dt

        known = self._scale
        for js in states:
            if js.job_id not in known:
                known[js.job_id] = job_scale(kn, js.job)
        scales = {js.job_id: known[js.job_id] for js in states}
        live = [js for js in states if scales[js.job_id]]
        cap = ctx.capacity_by_type()
        capacity = np.array([cap.get(t, 0) for t in types], dtype=np.float64)

        # 2. the allocation: recomputed when the active set or the capacity changes
        key = (frozenset(js.job_id for js in live), tuple(capacity))
        if key != self._lp_key:
            self._lp_key = key
            classes: dict[int, list[int]] = {}  # in order of first member, as keyed by (config, scale)
            class_of, class_ids = self._class_of, self._class_ids
            for js in live:
                c = class_of.get(js.job_id)
                if c is None:
                    c = class_of[js.job_id] = class_ids.setdefault(
                        (js.job.config, scales[js.job_id]), len(class_ids)
                    )
                classes.setdefault(c, []).append(js.job_id)
            members = list(classes.values())
            first = {js.job_id: js for js in live}
            T = np.array([self._row(prof, first[m[0]].job, scales[m[0]], types) for m in members]).reshape(
                -1, k
            )
            X = max_sum_throughput(T, [scales[m[0]] for m in members], capacity, [len(m) for m in members])
            self.lp_solves += 1
            # each member's share of its class's (one division for all classes; rows of it per job)
            per_job = X / np.array([len(m) for m in members], dtype=np.float64)[:, None]
            self._share = {jid: per_job[i] for i, m in enumerate(members) for jid in m}
            self._received, self._lp_jobs, self._elapsed_s = {}, key[0], 0.0
            if len(self._job_rows) > 2 * len(live) + 1024:  # forget finished jobs' figures now and then
                keep = [js.job_id for js in live]
                for d in (self._job_rows, self._scale, self._class_of):
                    kept = {j: d[j] for j in keep if j in d}
                    d.clear()
                    d.update(kept)

        # 3. this round's assignment by priority
        ids = [js.job_id for js in live]
        row = {j: i for i, j in enumerate(ids)}
        X = np.array([self._share[j] for j in ids]).reshape(-1, k)
        T = np.array([self._job_row(prof, js.job, scales[js.job_id], types) for js in live]).reshape(-1, k)
        s = np.array([scales[j] for j in ids], dtype=np.int64)
        received = np.zeros((len(ids), k))
        for j, rec in self._received.items():  # the jobs that ran since the LP (all of them are live)
            received[row[j]] = rec
        chosen = assign_round(
            X,
            received,
            np.full(len(ids), self._elapsed_s),  # every live job is one of the LP's (the key says so)
            T,
            s,
            capacity.astype(np.int64),
        )

        # 4. bind virtually: jobs keeping their type keep their GPUs (lease extension); the rest move
        target = {j: (types[c] if c is not None else None) for j, c in zip(ids, chosen, strict=True)}
        for js in ctx.running:
            a = ctx.allocation(js.job_id)
            if a is not None and (
                target.get(js.job_id) is None or a.gpus != ((target[js.job_id], a.n_gpus),)
            ):
                ctx.release(js.job_id)
                if target.get(js.job_id) is None:
                    ctx.explain(js.job_id, "preempted: " + self._why(js.job_id, row, X, types))
        todo = [(j, t) for j, t in target.items() if t is not None and ctx.allocation(j) is None]
        todo.sort(key=lambda jt: -scales[jt[0]])  # largest first, against fragmentation (Gavel does the same)
        for j, t in todo:
            if ctx.reserve(j, ((t, scales[j]),)) is not None:
                ctx.explain(j, f"{ctx.verb(j)}: {scales[j]}×{t}, " + self._why(j, row, X, types))

    def _why(self, jid: int, row: dict[int, int], X: np.ndarray, types: tuple[str, ...]) -> str:
        """Gavel's figures for one job this round: its LP time share per type and the share it has received."""
        i = row.get(jid)
        if i is None:
            return "Gavel round (§5)"
        el = self._elapsed_s if jid in self._lp_jobs else 0.0
        rec = self._received.get(jid)
        got = float(rec.sum()) / el if rec is not None and el > 0 else 0.0
        share = ", ".join(f"{t} {X[i, k]:.2f}" for k, t in enumerate(types) if X[i, k] > 1e-3) or "none"
        return f"Gavel round (§5): time share {share}, received {got:.2f} of its time so far"

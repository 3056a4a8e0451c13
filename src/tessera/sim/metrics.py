"""Metrics of a simulation (Crius §8.4, ElasticFlow, Sia §5.6).

* JCT (finish − arrival) of finished jobs: average, median, p95, p99; makespan (last finish − first arrival).
* Fairness: JCT slowdown (JCT ÷ the job's run time on its requested GPUs alone) p99 and max, and the longest
  wait of any job (finished or not) from arrival to its first start (to the end of the run if it never started).
* Queueing time: time a finished job spent without GPUs (waiting to start, preempted, evicted).
* Cluster throughput: Σ over computing jobs of (true speed ÷ the job's true speed on its requested GPUs), so a
  job on exactly what it asked for counts 1 — averaged per round; ``avg_throughput`` is the mean over the rounds
  of the trace window (the whole run when no window is given), ``peak_throughput`` the largest round.
* GPU utilization by type (GPUs held ÷ GPUs of that type, over the window), restarts per job, deadline
  satisfactory ratio (ElasticFlow: jobs finished by their deadline ÷ jobs with a deadline), jobs finished
  (within the window, as Crius Fig. 17b; and in total), policy decision time per round (p50 / p99).
* Upper bounds on ``avg_throughput`` whatever the policy (:func:`throughput_bounds`): a job's normalized
  throughput integrates over its life to its normalized work (total iterations ÷ its speed on the requested
  GPUs — the trace duration), so no policy averages more than the normalized work that can fall inside the
  window, divided by the window.
* Where the bound's throughput comes from (:func:`capacity_bound_by_request`) beside a run's
  (:func:`throughput_by_request`), split by the GPU count jobs requested: a job counts 1 a second on its request
  whatever its size, so the bound spends GPU-time on the work a GPU-second buys most of, and leaves the largest
  jobs' work past the window's end; a policy that serves every job in turn cannot.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from tessera.scheduler.cell_lp import Group, maximize
from tessera.scheduler.knowledge import PerfTable
from tessera.scheduler.state import GPUs, Job
from tessera.sim.simulator import SimConfig, SimResult, reference_rate


def per_round(result: SimResult, values: np.ndarray, t0: float, t1: float, round_s: float) -> np.ndarray:
    """Averages of a piecewise-constant series (value from each change point on) over rounds in [t0, t1)."""
    t = result.timeline_s
    if t1 <= t0 or len(t) == 0:
        return np.zeros((0,) + values.shape[1:])
    n = max(1, math.ceil((t1 - t0) / round_s - 1e-9))
    edges = t0 + round_s * np.arange(n + 1, dtype=float)
    edges[-1] = t1
    # cumulative integral at each change point
    dt = np.diff(np.append(t, max(t[-1], edges[-1])))
    seg = values * dt.reshape((-1,) + (1,) * (values.ndim - 1))
    cum = np.concatenate([np.zeros((1,) + values.shape[1:]), np.cumsum(seg, axis=0)])

    def integral(x: np.ndarray) -> np.ndarray:
        k = np.searchsorted(t, x, side="right") - 1  # the change point in force at x
        k = np.clip(k, 0, len(t) - 1)
        before = cum[k]
        extra = values[k] * np.maximum(0.0, x - t[k]).reshape((-1,) + (1,) * (values.ndim - 1))
        out = before + extra
        out[x < t[0]] = 0.0
        return out

    I = integral(edges)  # noqa: E741
    return np.diff(I, axis=0) / np.diff(edges).reshape((-1,) + (1,) * (values.ndim - 1))


def compute_metrics(result: SimResult) -> dict[str, Any]:
    cfg = result.config
    jobs = result.jobs
    arrivals = np.array([j.arrival_s for j in jobs]) if jobs else np.zeros(0)
    t0 = float(arrivals.min()) if len(arrivals) else 0.0
    window_end = t0 + cfg.window_s if cfg.window_s else result.end_s
    fin = [j for j in jobs if j.status == "finished"]
    jct = np.array([j.finish_s - j.arrival_s for j in fin]) if fin else np.zeros(0)
    queue = np.array([(j.finish_s - j.arrival_s) - j.held_s for j in fin]) if fin else np.zeros(0)
    wait_start = np.array([j.first_start_s - j.arrival_s for j in jobs if j.first_start_s is not None])
    slowdown = np.array([(j.finish_s - j.arrival_s) / j.alone_s for j in fin if j.alone_s > 0])
    submitted = [j for j in jobs if j.arrival_s <= result.end_s]
    longest_wait = max(
        ((j.first_start_s if j.first_start_s is not None else result.end_s) - j.arrival_s for j in submitted),
        default=float("nan"),
    )
    tput = per_round(result, result.throughput, t0, window_end, cfg.round_s)
    busy = per_round(result, result.busy, t0, window_end, cfg.round_s)
    cap = np.array([result.capacity.get(t, 0) for t in result.gpu_types], dtype=float)
    util = {
        t: (float(busy[:, i].mean() / cap[i]) if len(busy) and cap[i] else 0.0)
        for i, t in enumerate(result.gpu_types)
    }
    with_deadline = [j for j in jobs if j.deadline_s is not None]
    met = [
        j
        for j in with_deadline
        if j.finish_s is not None and j.status == "finished" and j.finish_s <= j.deadline_s
    ]
    dec = np.array(result.decision_s) * 1000.0

    def pct(x: np.ndarray, q: float) -> float:
        return float(np.percentile(x, q)) if len(x) else float("nan")

    def mean(x: np.ndarray) -> float:
        return float(x.mean()) if len(x) else float("nan")

    return {
        "policy": result.policy,
        "jobs": len(jobs),
        "finished": sum(1 for j in fin if j.finish_s <= window_end + 1e-9),
        "finished_total": len(fin),
        "dropped": sum(1 for j in jobs if j.status == "dropped"),
        "unfinished": sum(1 for j in jobs if j.status in ("pending", "running")),
        "avg_jct_s": mean(jct),
        "median_jct_s": pct(jct, 50),
        "p95_jct_s": pct(jct, 95),
        "p99_jct_s": pct(jct, 99),
        "avg_queue_s": mean(queue),
        "avg_wait_to_start_s": mean(wait_start),
        "p99_slowdown": pct(slowdown, 99),
        "max_slowdown": float(slowdown.max()) if len(slowdown) else float("nan"),
        "max_wait_s": float(longest_wait),
        "makespan_s": float(max(j.finish_s for j in fin) - t0) if fin else float("nan"),
        "avg_throughput": mean(tput),
        "peak_throughput": float(tput.max()) if len(tput) else float("nan"),
        "utilization": util,
        "avg_utilization": float(busy.sum(axis=1).mean() / cap.sum()) if len(busy) and cap.sum() else 0.0,
        "restarts_per_job": float(np.mean([j.restarts for j in jobs])) if jobs else 0.0,
        "deadline_ratio": len(met) / len(with_deadline) if with_deadline else None,
        "decision_ms_p50": pct(dec, 50),
        "decision_ms_p99": pct(dec, 99),
        "decisions": len(dec),
        "rounds": result.rounds,
        "sim_wall_s": result.wall_s,
    }


def throughput_series(result: SimResult, end_s: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(round start times relative to the first arrival, normalized throughput per round) — Crius Fig. 16."""
    t0 = min((j.arrival_s for j in result.jobs), default=0.0)
    t1 = end_s if end_s is not None else result.end_s
    v = per_round(result, result.throughput, t0, t1, result.config.round_s)
    return np.arange(len(v)) * result.config.round_s, v


def throughput_bounds(
    jobs: Sequence[Job], table: PerfTable, config: SimConfig, *, max_gpus: int = 64, intervals: int = 16
) -> dict[str, float] | None:
    """Upper bounds on any policy's ``avg_throughput`` for these jobs (None when ``config.noise_sigma`` > 0: the
    bounds use the table's truth, and noisy speeds could exceed it).

    A job j of normalized work w_j (total iterations ÷ its true speed on the requested GPUs) arriving at a_j can
    compute from e_j = the first round boundary (tick, with ``tick_s``) at or after a_j, plus the start-up (no
    policy decides between them, and a first start costs ``startup_s``), at most at speed s_j = its fastest
    allocation on the rate table's grid ÷ its requested speed (powers of two per type up to ``max_gpus`` and even two-type mixes — the
    allocations every policy here makes; s_j > 1 when more or faster GPUs speed it up). So its normalized work
    inside the window [t0, t1) is at most u_j = min(w_j, s_j · max(0, t1 − e_j)).

    * ``demand_bound_throughput`` = Σ_j u_j ÷ (t1 − t0): as if every job had its fastest allocation at once —
      capacity ignored. (Restarts after the first start only lower what a job does, so they are left out.)
    * ``capacity_bound_untimed_throughput``: the same, with GPU-time spent no faster than the cluster has it over
      the whole window: the LP max Σ x[j, c] s.t. Σ_c x[j, c] ≤ u_j and, per GPU type t, Σ x[j, c] · n_t(c) ÷
      s_j(c) ≤ capacity_t · (t1 − t0), x[j, c] being j's normalized work on allocation c at speed s_j(c). Loose
      where the load varies in time: GPUs idle before the jobs arrive count as usable by jobs that arrive later.
    * ``capacity_bound_throughput``: the time-indexed (fluid) version, never above the untimed one
      (:func:`_timed_capacity_bound`): the window is cut into ``intervals`` equal intervals, and a job's work in
      interval k is spent on GPU-time of interval k only, in the time that job is there to use (each job its own
      clock, not its key's pooled). Valid because any schedule's per-interval work is a feasible point of that
      LP, and the figure reported is a Lagrangian (priced GPU-time) bound on that LP's optimum (see there).

    The metric averages per-round averages; over a window of whole rounds (the benchmark's two weeks are 4,032
    rounds of 300 s) that equals the time average bounded here."""
    inp = _BoundInputs.of(jobs, table, config, max_gpus)
    if inp is None:
        return None
    untimed = _capacity_bound(inp.speeds, inp.inside, table.capacity, inp.window_s)
    timed, _ = _timed_capacity_bound(inp, table.capacity, intervals)
    return {
        "demand_bound_throughput": sum(inp.inside.values()) / inp.window_s,
        # the LP's optimum up to HiGHS' tolerance; never reported above the untimed bound it tightens
        "capacity_bound_throughput": min(timed, untimed) / inp.window_s,
        "capacity_bound_untimed_throughput": untimed / inp.window_s,
    }


@dataclass(frozen=True)
class RequestShare:
    """What the jobs requesting one GPU count can add to ``avg_throughput`` (normalized work inside the window ÷
    the window): at most ``demand_throughput``; ``capacity_throughput`` in the optimum of the time-indexed
    capacity bound's LP (which of its optima HiGHS returns: the split, not the sum, may differ between optima)."""

    jobs: int
    demand_throughput: float
    capacity_throughput: float


def capacity_bound_by_request(
    jobs: Sequence[Job], table: PerfTable, config: SimConfig, *, max_gpus: int = 64, intervals: int = 16
) -> dict[int, RequestShare] | None:
    """The time-indexed capacity bound's optimum split by the GPU count jobs requested (0: no request): which
    jobs' work the bound lets fill the window — beside :func:`throughput_by_request`, where a policy's falls short
    of it. None where :func:`throughput_bounds` is None."""
    inp = _BoundInputs.of(jobs, table, config, max_gpus)
    if inp is None:
        return None
    _, by_key = _timed_capacity_bound(inp, table.capacity, intervals)
    n_jobs: dict[int, int] = {}
    demand: dict[int, float] = {}
    capacity: dict[int, float] = {}
    for j, u in zip(jobs, inp.inside_of, strict=True):
        n = _requested_count(j.requested)
        n_jobs[n] = n_jobs.get(n, 0) + 1
        demand[n] = demand.get(n, 0.0) + u
    for key, w in by_key.items():
        n = _requested_count(key[1])
        capacity[n] = capacity.get(n, 0.0) + w
    return {
        n: RequestShare(n_jobs[n], demand[n] / inp.window_s, capacity.get(n, 0.0) / inp.window_s)
        for n in sorted(n_jobs)
    }


def throughput_by_request(result: SimResult) -> dict[int, float]:
    """A run's normalized work (done ÷ total iterations × the job's run time alone on its requested GPUs) by the
    GPU count jobs requested (0: no request), ÷ the window (``config.window_s``, else the run): the split of
    ``avg_throughput`` by request size for a run stopped at the window's end (``SimConfig.horizon_s``)."""
    t0 = min((j.arrival_s for j in result.jobs), default=0.0)
    window = result.config.window_s or (result.end_s - t0)
    out: dict[int, float] = {}
    for j in result.jobs:
        n = _requested_count(j.requested)
        done = j.done_iterations / j.total_iterations * j.alone_s if j.total_iterations > 0 else 0.0
        out[n] = out.get(n, 0.0) + done / window
    return dict(sorted(out.items()))


def _requested_count(requested: GPUs | None) -> int:
    return sum(n for _, n in requested) if requested else 0


@dataclass(frozen=True)
class _BoundInputs:
    """Per job what the bounds read (see :func:`throughput_bounds`): its (configuration, request) key, earliest
    compute start e_j, normalized work w_j, fastest speed s_j and u_j; per key its grid allocations as (speed ÷
    reference, GPUs) (and Σ u_j, :attr:`inside`, summed from the jobs')."""

    t0_s: float
    t1_s: float
    speeds: dict[tuple, list[tuple[float, GPUs]]]
    key_of: list[tuple]
    inside_of: np.ndarray
    start_s: np.ndarray
    work: np.ndarray
    s_max: np.ndarray

    @property
    def window_s(self) -> float:
        return self.t1_s - self.t0_s

    @cached_property
    def inside(self) -> dict[tuple, float]:
        """Σ u_j per key."""
        out: dict[tuple, float] = {}
        for key, u in zip(self.key_of, self.inside_of, strict=True):
            out[key] = out.get(key, 0.0) + float(u)
        return out

    @classmethod
    def of(
        cls, jobs: Sequence[Job], table: PerfTable, config: SimConfig, max_gpus: int
    ) -> _BoundInputs | None:
        """None when the bounds do not apply: estimation noise (the truth could beat the table), no jobs, an
        empty window."""
        if config.noise_sigma > 0 or not jobs:
            return None
        t0 = min(j.arrival_s for j in jobs)
        t1 = t0 + (config.window_s if config.window_s else max(j.arrival_s for j in jobs) - t0)
        if t1 <= t0:
            return None
        speeds: dict[tuple, list[tuple[float, GPUs]]] = {}
        key_of: list[tuple] = []
        inside_of, start_s, work, s_max_of = (np.zeros(len(jobs)) for _ in range(4))
        decide_s = config.tick_s or config.round_s  # the first instant a policy can decide on an arrival
        for i, j in enumerate(jobs):
            ref = reference_rate(table, j, table.true_rate)
            key = (j.config, j.requested)
            opts = speeds.get(key)
            if opts is None:
                opts = speeds[key] = [
                    (r / ref, g)
                    for g in table.grid(j.config, max_gpus=max_gpus)
                    if (r := table.true_of(j.config, g)) > 0
                ]
            s_max = max((s for s, _ in opts), default=0.0)
            start = math.ceil(j.arrival_s / decide_s - 1e-9) * decide_s + config.startup_s
            u = min(j.total_iterations / ref, s_max * max(0.0, t1 - start))
            key_of.append(key)
            inside_of[i], start_s[i], work[i], s_max_of[i] = u, start, j.total_iterations / ref, s_max
        return cls(t0, t1, speeds, key_of, inside_of, start_s, work, s_max_of)


def _capacity_bound(
    speeds: dict[tuple, list[tuple[float, GPUs]]],
    inside: dict[tuple, float],
    capacity: dict[str, int],
    window: float,
) -> float:
    """The LP of :func:`throughput_bounds`: most normalized work inside the window under per-type GPU-time — the
    scheduler's Cell LP with work for jobs (each key's options worth 1 per unit of work, using n ÷ s GPU-seconds
    of each type per unit)."""
    types = sorted(capacity)
    col = {t: k for k, t in enumerate(types)}
    groups = []
    for k in (k for k in inside if inside[k] > 0 and speeds[k]):
        gpus = np.zeros((len(speeds[k]), len(types)))
        for o, (s, alloc) in enumerate(speeds[k]):
            for t, n in alloc:
                gpus[o, col[t]] = n / s
        groups.append(Group(count=inside[k], values=np.ones(len(speeds[k])), gpus=gpus))
    if not groups:
        return 0.0
    found = maximize(groups, np.array([capacity[t] * window for t in types], dtype=float))
    return float(found[0].sum()) if found is not None else float(sum(g.count for g in groups))


def _timed_capacity_bound(
    inp: _BoundInputs, capacity: dict[str, int], intervals: int, *, tol: float = 1e-5, max_iter: int = 300
) -> tuple[float, dict[tuple, float]]:
    """The time-indexed bound of :func:`throughput_bounds`, each job with its own clock: interval k =
    [edges[k], edges[k+1]) has its own GPU-time. With L_jk = |[max(e_j, edges[k]), edges[k+1])| the time job j
    can compute in interval k (0 before its interval; a partial first interval counts from e_j), and its key's
    undominated allocations c (:func:`_undominated`) at speed s(c) on n_t(c) GPUs of type t, the LP

    * x[j, k, c] = job j's work in interval k on allocation c: Σ_{k, c} x[j, k, c] ≤ u_j, and its compute time
      Σ_c x[j, k, c] ÷ s(c) ≤ L_jk (a job holds one allocation at a time);
    * per GPU type t and interval k: Σ_{j, c} x[j, k, c] · n_t(c) ÷ s(c) ≤ capacity_t · |interval k|;

    maximize Σ x. Any schedule (grid allocations, true speeds) gives a feasible point. First swap every stretch a
    job computes on a dominated allocation c (another c' no slower that uses no more GPU-time of any type per unit
    of work) for c' over s(c) ÷ s(c') of that time: the job does the same work in each interval, computes for no
    longer and holds no more GPU-time of any type. Then set x[j, k, c] to the work job j did in interval k on c:
    it computes only after e_j, on one allocation at a time, so for at most L_jk there; it does at most u_j inside
    the window (at most its work, at most s_j per second after e_j); and GPUs held without computing (start-up,
    restarts, idle holds) only add to the GPU-time used. So the LP's optimum bounds the work inside the window.

    The earlier LP (``tests/sim/test_bounds.py`` keeps it, to compare) summed these rows over the jobs of a key: a job could
    then compute on a slow, GPU-thrifty allocation for longer than it is there, on the time of the key's jobs that
    had finished. Each point of this LP sums to one of that LP's, so this one is never above it, nor (summing
    the per-interval rows) above :func:`_capacity_bound`.

    Solved by pricing the GPU rows (Lagrangian relaxation): for any prices π[k, t] ≥ 0,
    UB(π) = Σ_{k, t} π[k, t] · capacity_t · |interval k| + Σ_j φ_j(π), with φ_j(π) the most Σ x (1 − GPU-time ·
    π) job j's own rows allow, is at least Σ x for every feasible x (each GPU row's slack times its price is
    ≥ 0) — so every UB(π) is itself a valid bound, however π was found. φ_j is exact and cheap: in interval k a
    job computing at rate r (work per second, mixing allocations over time) earns at most h_k(r), the upper
    concave hull of (0, 0) and (s(c), s(c) − Σ_t π[k, t] n_t(c)); maximizing Σ_k L_jk h_k(r_k) under
    Σ_k L_jk r_k ≤ u_j is a fractional knapsack over the hulls' pieces, taken greedily by slope while it is
    positive. The prices come from a Dantzig–Wolfe master LP whose columns are, per key, the sum of its jobs'
    priced-out schedules (so any master point is a schedule of the per-job LP: its optimum is a lower bound on
    the LP's), with the prices smoothed toward the best found (Wentges); it stops when the best UB is within
    ``tol`` of the master's optimum (1e-5: a smaller gap costs the Philly window minutes), or after ``max_iter``
    rounds. Returns the best UB and the master's optimum split by key (the work per key of a schedule within
    that gap of it)."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    edges = np.linspace(inp.t0_s, inp.t1_s, max(1, intervals) + 1)
    n_int = len(edges) - 1
    span = (inp.t1_s - inp.t0_s) / n_int
    types = sorted(capacity)
    col = {t: i for i, t in enumerate(types)}
    n_types = len(types)
    gpu_time = np.array([[capacity[t] * span for t in types]] * n_int)  # intervals × types
    keys = list(dict.fromkeys(inp.key_of))
    kid = {k: i for i, k in enumerate(keys)}
    key_idx = np.array([kid[k] for k in inp.key_of], dtype=int)
    opts: list[tuple[np.ndarray, np.ndarray]] = []  # per key: speeds, GPUs by type
    for k in keys:
        und = _undominated(inp.speeds[k], col, n_types)
        s = np.array([o[0] for o in und], dtype=float)
        g = np.array([o[1] for o in und], dtype=float).reshape(len(und), n_types)
        opts.append((s, g * s[:, None]))
    u, start = inp.inside_of, inp.start_s
    first = np.clip(np.searchsorted(edges, start, side="right") - 1, 0, n_int - 1)
    l_first = np.clip(edges[first + 1] - np.maximum(edges[first], start), 0.0, None)
    has_opts = np.array([len(opts[k][0]) > 0 for k in key_idx], dtype=bool)
    live = np.flatnonzero((u > 0) & (start < inp.t1_s) & has_opts)
    if len(live) == 0:
        return 0.0, {}
    # the jobs of each (key, first interval)
    code = key_idx[live] * n_int + first[live]
    order = np.argsort(code, kind="stable")
    codes, at = np.unique(code[order], return_index=True)
    cohorts: dict[int, list[tuple[int, np.ndarray]]] = {}
    for c, a, b in zip(codes, at, [*at[1:], len(order)], strict=True):
        cohorts.setdefault(int(c // n_int), []).append((int(c % n_int), live[order[a:b]]))
    group_keys = sorted(cohorts)
    gid = {ki: i for i, ki in enumerate(group_keys)}
    n_g = len(group_keys)

    def price(pi: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        """UB(π); per key the work, GPU-time (intervals × types) and φ of its jobs' priced-out schedules."""
        work = np.zeros(n_g)
        usage = np.zeros((n_g, n_int, n_types))
        for ki, coh in cohorts.items():
            s, n = opts[ki]
            value = s[None, :] - pi @ n.T  # intervals × allocations: value per second computing
            seg_k, seg_w, seg_m, seg_g = [], [], [], []
            for k in range(min(f for f, _ in coh), n_int):
                hull = _upper_hull(s, value[k])
                for c0, c1 in itertools.pairwise(hull):
                    s0, v0, n0 = (0.0, 0.0, 0.0) if c0 < 0 else (s[c0], value[k, c0], n[c0])
                    w = s[c1] - s0
                    seg_k.append(k), seg_w.append(w), seg_m.append((value[k, c1] - v0) / w)
                    seg_g.append((n[c1] - n0) / w)
            if not seg_k:
                continue
            o = np.argsort(-np.array(seg_m), kind="stable")  # the knapsack's order: by slope
            sk, sw, sg = np.array(seg_k)[o], np.array(seg_w)[o], np.array(seg_g).reshape(-1, n_types)[o]
            g = gid[ki]
            for f, js in coh:
                sel = sk >= f
                if not sel.any():
                    continue
                k_of, w_of, g_of = sk[sel], sw[sel], sg[sel]
                cap_first = np.where(k_of == f, w_of, 0.0)  # × the job's L_j,first
                cap_rest = np.where(k_of == f, 0.0, w_of) * span
                lf, uj = l_first[js], u[js]
                cum = lf[:, None] * np.cumsum(cap_first)[None, :] + np.cumsum(cap_rest)[None, :]
                m = (cum < uj[:, None]).sum(axis=1)  # the piece each job's work runs out in
                n_seg = len(k_of)
                done = np.where(m > 0, cum[np.arange(len(js)), np.maximum(m - 1, 0)], 0.0)
                part = np.where(m < n_seg, uj - done, 0.0)
                past = np.cumsum(np.bincount(m, minlength=n_seg + 1)[::-1])[::-1][1:]  # jobs with m > piece
                past_l = np.cumsum(np.bincount(m, weights=lf, minlength=n_seg + 1)[::-1])[::-1][1:]
                taken = (
                    cap_first * past_l
                    + cap_rest * past
                    + np.bincount(m, weights=part, minlength=n_seg + 1)[:-1]
                )
                work[g] += taken.sum()
                np.add.at(usage[g], k_of, taken[:, None] * g_of)
        phi = work - np.einsum("gkt,kt->g", usage, pi)
        return float((pi * gpu_time).sum() + phi.sum()), work, usage, phi

    col_work: list[float] = []
    col_use: list[np.ndarray] = []
    col_g: list[int] = []
    pi_m = np.zeros((n_int, n_types))
    rho = np.zeros(n_g)
    best, pi_best, lower, lam = math.inf, pi_m, 0.0, np.zeros(0)
    for it in range(max_iter):
        pi = 0.7 * pi_best + 0.3 * pi_m if it else pi_m
        for at_pi in (pi, pi_m):
            ub, work, usage, phi = price(at_pi)
            if ub < best:
                best, pi_best = ub, at_pi
            # reduced cost at the master's own prices: a column priced out elsewhere may still improve it
            gain = work - np.einsum("gkt,kt->g", usage, pi_m) - rho
            add = np.flatnonzero(gain > 1e-9 * max(1.0, best))
            if len(add) or at_pi is pi_m:
                break
        if not len(add) or best - lower <= tol * best:
            break
        for g in add:
            col_work.append(float(work[g])), col_use.append(usage[g].ravel()), col_g.append(int(g))
        use = np.array(col_use)
        r, c = np.nonzero(use)
        A = coo_matrix(
            (np.concatenate([np.ones(len(col_g)), use[r, c]]),
             (np.concatenate([col_g, n_g + c]), np.concatenate([np.arange(len(col_g)), r]))),
            shape=(n_g + n_int * n_types, len(col_g)),
        ).tocsr()  # fmt: skip
        res = linprog(
            -np.array(col_work), A_ub=A, b_ub=np.concatenate([np.ones(n_g), gpu_time.ravel()]),
            bounds=(0, None), method="highs",
        )  # fmt: skip
        if res.status != 0:
            raise RuntimeError(f"the time-indexed throughput bound's master LP failed: {res.message}")
        lower, lam = float(-res.fun), res.x
        duals = -res.ineqlin.marginals
        rho, pi_m = np.maximum(duals[:n_g], 0.0), np.maximum(duals[n_g:].reshape(n_int, n_types), 0.0)
    by_key: dict[tuple, float] = {}
    for q, g in enumerate(col_g[: len(lam)]):
        key = keys[group_keys[g]]
        by_key[key] = by_key.get(key, 0.0) + float(lam[q] * col_work[q])
    return best, by_key


def _upper_hull(s: np.ndarray, value: np.ndarray) -> list[int]:
    """The upper concave hull of (0, 0) and the points (s[c], value[c]) (s > 0), from the origin while it rises:
    its vertices as indices, −1 the origin."""
    hull, hx, hy = [-1], [0.0], [0.0]
    last = None
    for c in np.lexsort((-value, s)):
        x, y = float(s[c]), float(value[c])
        if x == last:
            continue  # as fast, worth no more
        last = x
        while len(hull) >= 2 and (hx[-1] - hx[-2]) * (y - hy[-2]) - (hy[-1] - hy[-2]) * (x - hx[-2]) >= 0:
            hull.pop(), hx.pop(), hy.pop()
        hull.append(int(c)), hx.append(x), hy.append(y)
    for i in range(1, len(hull)):
        if hy[i] <= hy[i - 1]:
            return hull[:i]
    return hull


def _undominated(
    opts: Sequence[tuple[float, GPUs]], col: dict[str, int], n_types: int
) -> list[tuple[float, np.ndarray]]:
    """(speed, GPU-seconds per unit of work by type) of the allocations no other one dominates: one at least as
    fast that uses no more GPU-time of any type per unit of work (ties keep the first)."""
    if not opts:
        return []
    s = np.array([o[0] for o in opts])
    g = np.zeros((len(opts), n_types))
    for o, (sp, alloc) in enumerate(opts):
        for t, n in alloc:
            g[o, col[t]] = n / sp
    keep = []
    for o in range(len(opts)):
        no_worse = (s >= s[o]) & np.all(g <= g[o], axis=1)
        better = no_worse & ((s > s[o]) | np.any(g < g[o], axis=1))
        tie_before = no_worse & ~better & (np.arange(len(opts)) < o)
        if not (better.any() or tie_before.any()):
            keep.append(o)
    return [(float(s[o]), g[o]) for o in keep]

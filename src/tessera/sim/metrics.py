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
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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
    jobs: Sequence[Job], table: PerfTable, config: SimConfig, *, max_gpus: int = 64
) -> dict[str, float] | None:
    """Upper bounds on any policy's ``avg_throughput`` for these jobs (None when ``config.noise_sigma`` > 0: the
    bounds use the table's truth, and noisy speeds could exceed it).

    A job j of normalized work w_j (total iterations ÷ its true speed on the requested GPUs) arriving at a_j can
    compute from e_j = the first round boundary at or after a_j, plus the start-up (no policy decides between
    rounds, and a first start costs ``startup_s``), at most at speed s_j = its fastest allocation on the rate
    table's grid ÷ its requested speed (powers of two per type up to ``max_gpus`` and even two-type mixes — the
    allocations every policy here makes; s_j > 1 when more or faster GPUs speed it up). So its normalized work
    inside the window [t0, t1) is at most u_j = min(w_j, s_j · max(0, t1 − e_j)).

    * ``demand_bound_throughput`` = Σ_j u_j ÷ (t1 − t0): as if every job had its fastest allocation at once —
      capacity ignored. (Restarts after the first start only lower what a job does, so they are left out.)
    * ``capacity_bound_throughput``: the same, with GPU-time spent no faster than the cluster has it: the LP
      max Σ x[j, c] s.t. Σ_c x[j, c] ≤ u_j and, per GPU type t, Σ x[j, c] · n_t(c) ÷ s_j(c) ≤ capacity_t ·
      (t1 − t0), x[j, c] being j's normalized work on allocation c at speed s_j(c). Still optimistic (GPUs idle
      before a job arrives count as usable), so it is a valid bound; jobs of one (configuration, request) share
      their rows, which leaves the LP exact and small.

    The metric averages per-round averages; over a window of whole rounds (the benchmark's two weeks are 4,032
    rounds of 300 s) that equals the time average bounded here."""
    if config.noise_sigma > 0 or not jobs:
        return None
    t0 = min(j.arrival_s for j in jobs)
    t1 = t0 + (config.window_s if config.window_s else max(j.arrival_s for j in jobs) - t0)
    if t1 <= t0:
        return None
    speeds: dict[tuple, list[tuple[float, GPUs]]] = {}  # (config, request) → (speed ÷ reference, GPUs)
    inside: dict[tuple, float] = {}  # (config, request) → Σ u_j
    for j in jobs:
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
        start = math.ceil(j.arrival_s / config.round_s - 1e-9) * config.round_s + config.startup_s
        u = min(j.total_iterations / ref, s_max * max(0.0, t1 - start))
        inside[key] = inside.get(key, 0.0) + u
    window = t1 - t0
    return {
        "demand_bound_throughput": sum(inside.values()) / window,
        "capacity_bound_throughput": _capacity_bound(speeds, inside, table.capacity, window) / window,
    }


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

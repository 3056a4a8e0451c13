"""Metrics of a simulation (Crius §8.4, ElasticFlow, Sia §5.6).

* JCT (finish − arrival) of finished jobs: average, median, p95, p99; makespan (last finish − first arrival).
* Queueing time: time a finished job spent without GPUs (waiting to start, preempted, evicted).
* Cluster throughput: Σ over computing jobs of (true speed ÷ the job's true speed on its requested GPUs), so a
  job on exactly what it asked for counts 1 — averaged per round; ``avg_throughput`` is the mean over the rounds
  of the trace window (the whole run when no window is given), ``peak_throughput`` the largest round.
* GPU utilization by type (GPUs held ÷ GPUs of that type, over the window), restarts per job, deadline
  satisfactory ratio (ElasticFlow: jobs finished by their deadline ÷ jobs with a deadline), jobs finished
  (within the window, as Crius Fig. 17b; and in total), policy decision time per round (p50 / p99).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tessera.sim.simulator import SimResult


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

"""A simulation study end to end: trace → jobs → rate table → every policy → metrics, table, JSON and plots.

:func:`run_study` is what ``tessera simulate`` and ``bench/sim_philly.py`` call. Plots (matplotlib, PNG):
throughput over time (Crius Fig. 16), JCT and queueing-time CDFs, utilization by GPU type, per-policy bars,
and the search-depth sweep (Crius Fig. 21) when one was run.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from tessera.hardware import ClusterSpec, get_cluster
from tessera.scheduler.knowledge import PerfTable
from tessera.scheduler.policy import get_policy, policy_names
from tessera.scheduler.state import Job
from tessera.sim.generator import family as generator_family
from tessera.sim.generator import generate
from tessera.sim.metrics import compute_metrics, throughput_bounds, throughput_series
from tessera.sim.simulator import SimConfig, SimResult, Simulator
from tessera.sim.trace import Trace, densify, load_csv, load_philly, window, window_length
from tessera.sim.workload import WorkloadSpec, build_jobs, demand_gpu_hours

BASELINES = ("fcfs", "gandiva", "gavel", "elasticflow-ls", "sia", "opportunistic", "frenzy")
PUBLISHED_JCT_REDUCTION = {
    "gavel": 0.664,
    "elasticflow-ls": 0.758,
    "gandiva": 0.801,
    "fcfs": 0.813,
}  # Crius §8.4


def resolve_policies(spec: str | Sequence[str]) -> list[str]:
    """``all`` (every registered policy but the deadline-only ones), or a comma list of names."""
    names = policy_names()
    items = [p.strip() for p in (spec.split(",") if isinstance(spec, str) else spec) if p.strip()]
    if not items:
        raise ValueError("--policies: no policy given")
    out: list[str] = []
    for p in items:
        if p == "all":
            out += [n for n in names if n not in ("tessera-ddl", "elasticflow") and n not in out]
        elif p not in names:
            get_policy(p)  # raises the "unknown policy … did you mean" error
        elif p not in out:
            out.append(p)
    # tessera first, then the rest as given
    return sorted(out, key=lambda n: (not n.startswith("tessera"), out.index(n)))


@dataclass
class Study:
    cluster: str
    trace: str
    n_jobs: int
    window_s: float | None
    demand_gpu_hours: float
    table_s: float
    metrics: dict[str, dict[str, Any]]
    results: dict[str, SimResult] = field(repr=False)
    depth_sweep: list[dict[str, Any]] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    bounds: dict[str, float] | None = None  # upper bounds on avg_throughput (metrics.throughput_bounds)
    first_event_s: float | None = None  # study start (trace load) → the first policy's first simulated event

    def to_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "trace": self.trace,
            "jobs": self.n_jobs,
            "window_s": self.window_s,
            "demand_gpu_hours": self.demand_gpu_hours,
            "table_build_s": self.table_s,
            "first_event_s": self.first_event_s,
            "policies": self.metrics,
            "ratios": ratios(self.metrics),
            "depth_sweep": self.depth_sweep,
            "throughput_bounds": self.bounds,
            "files": self.files,
        }


def ratios(metrics: dict[str, dict[str, Any]], ours: str = "tessera") -> dict[str, Any]:
    """Our JCT reduction and throughput gain against every other policy, beside Crius's published ones."""
    if ours not in metrics:
        return {}
    m0 = metrics[ours]
    out: dict[str, Any] = {}
    for name, m in metrics.items():
        if name == ours:
            continue
        row = {
            "jct_reduction": 1 - m0["avg_jct_s"] / m["avg_jct_s"] if m["avg_jct_s"] else None,
            "throughput_ratio": m0["avg_throughput"] / m["avg_throughput"] if m["avg_throughput"] else None,
        }
        if name in PUBLISHED_JCT_REDUCTION:
            row["crius_published_jct_reduction"] = PUBLISHED_JCT_REDUCTION[name]
        out[name] = row
    base = [metrics[b]["avg_throughput"] for b in metrics if not b.startswith("tessera")]
    if base:
        out["vs_best_baseline_throughput"] = m0["avg_throughput"] / max(base)
    return out


def jct_change(reduction: float) -> str:
    """A JCT reduction (1 − ours ÷ theirs) as a signed change: "−37%" when ours is lower, "+337%" (ours
    higher) otherwise — never "−-337%"."""
    if reduction >= 0:
        return f"−{reduction:.0%}"
    return f"+{-reduction:.0%}"


def trace_label(path: str | Path) -> str:
    """A trace file's study label: its name without ``.gz`` / ``.csv`` (``philly-2018.csv.gz`` →
    ``philly-2018``)."""
    name = Path(path).name
    for ext in (".gz", ".csv"):
        name = name.removesuffix(ext)
    return name or str(path)


def load_trace(
    trace: str, trace_file: str | None, columns: dict[str, str] | None = None
) -> tuple[Trace, str]:
    if trace == "philly":
        # a Philly-format file of one's own is that file's study, not "philly"
        return load_philly(trace_file), trace_label(trace_file) if trace_file else "philly"
    if trace == "csv":
        if not trace_file:
            raise ValueError("--trace csv needs --trace-file")
        cols = columns or {}
        return (
            load_csv(
                trace_file,
                submit=cols.get("submit", "submit_time_s"),
                duration=cols.get("duration", "duration_s"),
                gpus=cols.get("gpus", "num_gpus"),
                job_id=cols.get("id"),
            ),
            trace_label(trace_file),
        )
    raise ValueError(f"--trace: {trace!r} is not one of philly, csv, gen:FAMILY")


def prepare(
    cluster: ClusterSpec,
    trace: Trace,
    workload: WorkloadSpec,
    *,
    max_gpus: int = 64,
    workers: int | None = None,
    on_config: Callable[[int, int], None] | None = None,
) -> tuple[PerfTable, list[Job], float]:
    """The rate table of every configuration the workload may use (disk-cached) and the jobs."""
    from tessera.scheduler.speed import cell_table

    configs = workload.configs()
    done = [0]

    def tick(_c: object) -> None:
        done[0] += 1
        if on_config:
            on_config(done[0], len(configs))

    t0 = time.perf_counter()
    if on_config:
        on_config(0, len(configs))  # the build has begun (a cold one takes a while: say so at once)
    table = cell_table(cluster, configs, max_gpus=max_gpus, workers=workers, progress=tick)
    table_s = time.perf_counter() - t0
    return table, build_jobs(trace, table, workload), table_s


def run_policy(
    cluster: ClusterSpec,
    jobs: Sequence[Job],
    table: PerfTable,
    policy: str,
    config: SimConfig,
    *,
    progress: Callable[[float, int, int], None] | None = None,
    **options: Any,
) -> SimResult:
    return Simulator(cluster, jobs, table, get_policy(policy, **options), config, progress=progress).run()


@dataclass(frozen=True)
class StudyInputs:
    """What a study simulates: the cluster, the trace's name, the rate table, the jobs and the simulator's
    configuration (its ``window_s`` the trace window's length ÷ the density)."""

    cluster: ClusterSpec
    trace: str
    table: PerfTable
    jobs: list[Job]
    config: SimConfig
    table_s: float  # building (or loading) the rate table


def study_inputs(
    *,
    cluster: str = "crius-sim-1280",
    trace: str = "philly",
    trace_file: str | None = None,
    columns: dict[str, str] | None = None,
    start: str | float | None = None,
    end: str | float | None = None,
    seed: int = 0,
    config: SimConfig | None = None,
    workload: WorkloadSpec | None = None,
    workers: int | None = None,
    max_gpus: int = 64,
    density: float = 1.0,
    on_config: Callable[[int, int], None] | None = None,
) -> StudyInputs:
    """The trace's window (``start``–``end``) with arrivals ``density`` times as dense, its jobs and rate table
    on ``cluster``: what :func:`run_study` simulates every policy on, for benches that simulate it otherwise."""
    spec = get_cluster(cluster)
    generated = generator_family(trace[len("gen:") :], seed) if trace.startswith("gen:") else None
    if generated is not None:
        tr, trace_name = generate(generated), trace
    else:
        tr, trace_name = load_trace(trace, trace_file, columns)
    w_len = window_length(tr, start, end)
    tr = densify(window(tr, start, end), density)
    if w_len is not None:
        w_len /= density
    if not tr.jobs:
        raise ValueError("the trace window holds no jobs")
    wl = workload or (generated.workload() if generated is not None else WorkloadSpec(seed=seed))
    cfg = config or SimConfig(seed=seed)
    if cfg.window_s is None:
        cfg = replace(cfg, window_s=w_len or tr.jobs[-1].submit_s - tr.jobs[0].submit_s)
    table, jobs, table_s = prepare(spec, tr, wl, max_gpus=max_gpus, workers=workers, on_config=on_config)
    return StudyInputs(spec, trace_name, table, jobs, cfg, table_s)


def run_study(
    *,
    cluster: str = "crius-sim-1280",
    trace: str = "philly",
    trace_file: str | None = None,
    columns: dict[str, str] | None = None,
    start: str | float | None = None,
    end: str | float | None = None,
    policies: str | Sequence[str] = "all",
    seed: int = 0,
    config: SimConfig | None = None,
    workload: WorkloadSpec | None = None,
    depth_sweep: Sequence[int] = (),
    out_dir: str | Path | None = None,
    plots: bool = True,
    workers: int | None = None,
    max_gpus: int = 64,
    density: float = 1.0,
    on_phase: Callable[[str, float, float], None] | None = None,
) -> Study:
    """Simulate every policy on one workload; write ``study.json`` and the plots under ``out_dir``.
    ``on_phase(label, done, total)`` reports progress (rate table, then each policy's simulated time).
    ``Study.first_event_s``: from the call to the first simulated event (trace, rate table and jobs ready)."""
    t_start = time.perf_counter()
    names = resolve_policies(policies)

    def phase(label: str) -> Callable[[float, float], None]:
        return lambda d, t: on_phase(label, d, t) if on_phase else None

    inp = study_inputs(
        cluster=cluster, trace=trace, trace_file=trace_file, columns=columns, start=start, end=end, seed=seed,
        config=config, workload=workload, workers=workers, max_gpus=max_gpus, density=density,
        on_config=phase("rate table"),
    )  # fmt: skip
    spec, table, jobs, cfg, table_s = inp.cluster, inp.table, inp.jobs, inp.config, inp.table_s
    metrics: dict[str, dict[str, Any]] = {}
    results: dict[str, SimResult] = {}
    first_event_s = time.perf_counter() - t_start
    for name in names:
        cb = phase(name)

        def prog(t: float, done: int, total: int, cb: Callable[[float, float], None] = cb) -> None:
            cb(done, total)

        res = run_policy(spec, jobs, table, name, cfg, progress=prog)
        results[name] = res
        metrics[name] = compute_metrics(res)
        cb(len(jobs), len(jobs))
    sweep: list[dict[str, Any]] = []
    for d in depth_sweep:
        res = run_policy(spec, jobs, table, "tessera", cfg, depth=d)
        m = compute_metrics(res)
        sweep.append({"depth": d, **{k: m[k] for k in ("avg_jct_s", "avg_throughput", "decision_ms_p50",
                                                        "decision_ms_p99", "restarts_per_job")}})  # fmt: skip
        phase("depth sweep")(len(sweep), len(depth_sweep))
    study = Study(
        cluster=spec.name,
        trace=inp.trace,
        n_jobs=len(jobs),
        window_s=cfg.window_s,
        demand_gpu_hours=demand_gpu_hours(jobs, table),
        table_s=table_s,
        metrics=metrics,
        results=results,
        depth_sweep=sweep,
        bounds=throughput_bounds(jobs, table, cfg, max_gpus=max_gpus),
        first_event_s=first_event_s,
    )
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        if plots:
            study.files += write_plots(study, out)
        p = out / "study.json"
        study.files.append(str(p))
        p.write_text(json.dumps(clean_nan(study.to_dict()), indent=1, default=_json_default))
    return study


def _json_default(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"not JSON-serializable: {type(x).__name__}")


def clean_nan(x: Any) -> Any:
    """NaN → None, recursively (JSON has no NaN)."""
    if isinstance(x, dict):
        return {k: clean_nan(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [clean_nan(v) for v in x]
    if isinstance(x, float) and math.isnan(x):
        return None
    return x


# ---------------------------------------------------------------------------------------------- plots
def write_plots(study: Study, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files: list[str] = []
    names = list(study.results)
    colors = {n: plt.get_cmap("tab20")(i % 20) for i, n in enumerate(names)}

    def save(fig: Any, name: str) -> None:
        p = out / name
        fig.tight_layout()
        fig.savefig(p, dpi=110)
        plt.close(fig)
        files.append(str(p))

    # throughput over time (Crius Fig. 16)
    fig, ax = plt.subplots(figsize=(11, 4))
    for n, r in study.results.items():
        t0 = min(j.arrival_s for j in r.jobs)
        end = t0 + (study.window_s or (r.end_s - t0))
        x, y = throughput_series(r, end)
        ax.plot(x / 3600, y, label=n, lw=1.2 if n.startswith("tessera") else 0.8, color=colors[n])
    ax.set_xlabel("hours since the window start")
    ax.set_ylabel("cluster throughput (normalized)")
    ax.set_title(
        f"Cluster throughput per {study.results[names[0]].config.round_s:.0f} s round — {study.trace} on {study.cluster}"
    )
    ax.legend(ncol=4, fontsize=8)
    save(fig, "throughput.png")

    # JCT and queueing CDFs
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for n, r in study.results.items():
        fin = [j for j in r.jobs if j.status == "finished"]
        jct = np.sort([j.finish_s - j.arrival_s for j in fin])
        q = np.sort([(j.finish_s - j.arrival_s) - j.held_s for j in fin])
        y = np.arange(1, len(jct) + 1) / max(1, len(jct))
        axes[0].plot(np.maximum(jct, 1) / 3600, y, label=n, color=colors[n])
        axes[1].plot(np.maximum(q, 1) / 3600, y, label=n, color=colors[n])
    for ax, what in zip(axes, ("JCT", "queueing time"), strict=True):
        ax.set_xscale("log")
        ax.set_xlabel(f"{what} (hours, log)")
        ax.set_ylabel("fraction of finished jobs")
        ax.set_title(f"{what} CDF")
    axes[0].legend(fontsize=8)
    save(fig, "cdf.png")

    # utilization by GPU type
    types = list(study.results[names[0]].gpu_types)
    fig, ax = plt.subplots(figsize=(11, 4))
    wbar = 0.8 / max(1, len(names))
    for i, n in enumerate(names):
        u = study.metrics[n]["utilization"]
        ax.bar(np.arange(len(types)) + i * wbar, [u.get(t, 0) for t in types], wbar, label=n, color=colors[n])
    ax.set_xticks(np.arange(len(types)) + 0.4 - wbar / 2, types)
    ax.set_ylabel("GPU utilization (held / capacity)")
    ax.set_title("Utilization by GPU type over the trace window")
    ax.legend(ncol=4, fontsize=8)
    save(fig, "utilization.png")

    # per-policy bars
    keys = [("avg_jct_s", "avg JCT (h)", 3600), ("avg_queue_s", "avg queueing (h)", 3600),
            ("avg_throughput", "avg throughput", 1), ("restarts_per_job", "restarts per job", 1)]  # fmt: skip
    fig, axes = plt.subplots(1, len(keys), figsize=(14, 4))
    for ax, (k, label, scale) in zip(axes, keys, strict=True):
        vals = [(study.metrics[n][k] or 0) / scale for n in names]
        ax.bar(range(len(names)), vals, color=[colors[n] for n in names])
        ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=8)
        ax.set_title(label)
    save(fig, "policies.png")

    if study.depth_sweep:
        d = [r["depth"] for r in study.depth_sweep]
        fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
        axes[0].plot(d, [r["decision_ms_p99"] for r in study.depth_sweep], "o-")
        axes[0].set_title("decision time p99 (ms)")
        axes[1].plot(d, [r["avg_jct_s"] / 3600 for r in study.depth_sweep], "o-")
        axes[1].set_title("avg JCT (h)")
        axes[2].plot(d, [r["avg_throughput"] for r in study.depth_sweep], "o-")
        axes[2].set_title("avg throughput")
        for ax in axes:
            ax.set_xlabel("search depth")
        save(fig, "depth_sweep.png")
    return files


def comparison_rows(metrics: dict[str, dict[str, Any]]) -> list[list[str]]:
    rows = []
    for n, m in metrics.items():
        rows.append(
            [
                n,
                f"{m['avg_jct_s'] / 3600:.2f}",
                f"{m['median_jct_s'] / 3600:.2f}",
                f"{m['p99_jct_s'] / 3600:.1f}",
                f"{m['avg_queue_s'] / 3600:.2f}",
                f"{m['avg_throughput']:.1f}",
                f"{m['peak_throughput']:.1f}",
                f"{m['finished']}",
                f"{m['restarts_per_job']:.2f}",
                f"{m['avg_utilization']:.0%}",
                f"{m['decision_ms_p99']:.1f}",
                f"{m['sim_wall_s']:.1f}",
            ]
        )
    return rows


COLUMNS = ("policy", "avg JCT h", "median JCT h", "p99 JCT h", "avg queue h", "avg tput", "peak tput",
           "finished", "restarts/job", "util", "decide p99 ms", "sim s")  # fmt: skip

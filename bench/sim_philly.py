"""Benchmark: the dense two-week Philly window on crius-sim-1280 under every policy (Crius §8.4).

``--policies all`` is every registered policy: ``tessera-crius`` (Crius Algorithm 1 as published) runs beside
``tessera`` (the project's rework of it), in the main run and in the load sweep.

    python bench/sim_philly.py [--policies all] [--depth-sweep 1,2,3,4,10] [--workers 2] [--densities 0.25,0.5,1,2,4,8] [--noise 0.1,0.2,0.3] [--tick-s 60]

Every run in it (``tick_s`` in the JSON) decides arrivals and completions between the 300 s rounds at the next
60 s tick (``SimConfig.tick_s``), as the live service's control loop decides them as they happen; ``--tick-s 0``
decides only at rounds (``bench/results/sim_philly_rounds_only.json`` is such a run). The saturation table is also
drawn as ``sim_philly_saturation.png`` (``--plot-only`` redraws it from ``--from``'s JSON).

Writes bench/results/sim_philly.json (per policy under ``policies.<name>``: avg_jct_s, avg_queue_s,
avg_throughput, peak_throughput, finished, restarts_per_job, decision_ms_p99, sim_wall_s, and more) and the
plots bench/results/sim_philly_*.png. Targets: sim_wall_s <= 120 for every policy; tessera decision_ms_p99
<= 200; tessera has the lowest avg_jct_s and >= 1.3x the best baseline's avg_throughput. The rate table is
estimated once and cached under $TESSERA_HOME/sim; its time is reported apart (table_build_s), and with an empty
cache the time from the start to the first simulated event is ``cold_table_s`` (target <= 60 s).

``saturation.<density>`` replays the same window with arrivals ``--densities`` times as dense (0.25: four times
as sparse) under ``--sweep-policies``: per policy ``capacity_fraction`` and ``demand_fraction`` (avg_throughput
over each bound), avg and p99 JCT, p99 and max JCT slowdown (JCT over the job's run time on its requested GPUs
alone), the longest wait to a first start, queueing. ``noise.<sigma>.<policy>`` replays it with the truth departing
from every policy's belief by a lognormal σ (``--noise``) under ``--noise-policies``. ``workloads.<family>`` runs
the generated families (``tessera.sim.generator``, ``--families``) with their knobs.

``demand_bound_throughput`` / ``capacity_bound_throughput`` / ``capacity_bound_untimed_throughput`` (top level,
and per density): upper bounds on any policy's avg_throughput (``tessera.sim.metrics.throughput_bounds``: the jobs'
normalized work that can fall inside the window, each at its fastest allocation from its first possible start; the
capacity bounds also within the GPU-time the cluster has — the untimed one over the whole window, the
time-indexed one (``capacity_bound_throughput``, the tighter) interval by interval, so GPUs idle before the jobs
arrive do not count). ``capacity_fraction`` is over the time-indexed bound, ``capacity_untimed_fraction`` over the
untimed one. ``targets.max_reachable_ratio_vs_best_baseline`` = demand bound ÷ best baseline throughput: whether
the 1.3x throughput target can be met at all.

``--bounds-only`` computes just the bounds at each of ``--densities`` (no simulation) and each policy's fractions
of them from the avg_throughput in ``--from`` (default the committed bench/results/sim_philly.json); it writes
bench/results/sim_bounds.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from provenance import run_header

from tessera.sim.generator import FAMILIES, family
from tessera.sim.report import COLUMNS, clean_nan, comparison_rows, run_study
from tessera.sim.simulator import SimConfig

KEYS = ("avg_jct_s", "avg_queue_s", "avg_throughput", "peak_throughput", "finished", "restarts_per_job",
        "decision_ms_p99", "sim_wall_s")  # fmt: skip
SWEEP_KEYS = ("avg_jct_s", "p99_jct_s", "avg_queue_s", "avg_throughput", "p99_slowdown", "max_slowdown", "max_wait_s",
              "finished", "decision_ms_p99", "sim_wall_s")  # fmt: skip
PhaseFn = Callable[[str, float, float], None]
RESULTS = Path(__file__).resolve().parent / "results"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default="all")
    ap.add_argument("--depth-sweep", default="1,2,3,4,10")
    ap.add_argument("--start", default="2017-10-09")
    ap.add_argument("--end", default="2017-10-23")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument(
        "--densities", default="0.25,0.5,1,2,4,8", help="arrival densities of the saturation table"
    )
    ap.add_argument("--sweep-policies", default="tessera,tessera-crius,sia,gavel,elasticflow-ls,gandiva,fcfs")
    ap.add_argument(
        "--tick-s",
        type=float,
        default=60.0,
        help="decide arrivals and completions between rounds at this tick, as the live service does (0: rounds only)",
    )
    ap.add_argument("--noise", default="0.1,0.2,0.3", help="estimation-noise σ of the robustness curve")
    ap.add_argument("--noise-policies", default="tessera,sia,gavel")
    ap.add_argument(
        "--families", default=",".join(FAMILIES), help="generated workload families ('' skips them)"
    )
    ap.add_argument(
        "--bounds-only", action="store_true", help="only the bounds per density (sim_bounds.json)"
    )
    ap.add_argument(
        "--from",
        dest="source",
        default=str(RESULTS / "sim_philly.json"),
        help="with --bounds-only / --plot-only",
    )
    ap.add_argument(
        "--plot-only", action="store_true", help="only the saturation plot, from --from's saturation table"
    )
    args = ap.parse_args()
    args.tick_s = args.tick_s or None
    if args.bounds_only:
        return _bounds_only(args)
    if args.plot_only:
        print(
            f"wrote {plot_saturation(json.loads(Path(args.source).read_text())['saturation'], Path(args.out))}"
        )
        return 0
    depths = [int(x) for x in args.depth_sweep.split(",") if x.strip()]
    out = Path(args.out)
    work = out / "sim_philly_report"
    t0 = time.perf_counter()

    tenths: dict[str, int] = {}  # per phase, the last tenth of it reported: plain lines, no terminal needed

    def on_phase(label: str, done: float, total: float) -> None:
        tenth = min(10, int(10 * done / total)) if total > 0 else 10
        if tenth > tenths.get(label, -1):  # each tenth once (a phase may report its end more than once)
            tenths[label] = tenth
            said = "done" if tenth == 10 else f"{10 * tenth} %"
            print(f"  {label}: {said} ({time.perf_counter() - t0:.0f} s)", flush=True)

    from tessera.scheduler.speed import cache_dir

    cold = not any(cache_dir().glob("tables-*/*.json"))  # an empty table cache: the first event is a cold one
    window = dict(
        cluster="crius-sim-1280", trace="philly", start=args.start, end=args.end, seed=args.seed, workers=args.workers
    )  # fmt: skip
    config = SimConfig(seed=args.seed, tick_s=args.tick_s)  # every run's, noise aside
    study = run_study(
        **window,
        config=config,
        policies=args.policies,
        depth_sweep=depths,
        out_dir=work,
        on_phase=on_phase,
    )
    print(" | ".join(COLUMNS))
    for row in comparison_rows(study.metrics):
        print(" | ".join(row))
    full = study.to_dict()
    m = study.metrics
    base = {n: v for n, v in m.items() if not n.startswith("tessera")}
    bounds = study.bounds or {}
    targets = {}
    if "tessera" in m:
        best_base_tput = max((v["avg_throughput"] for v in base.values()), default=float("nan"))
        targets = {
            "sim_wall_s_le_120_all": all(v["sim_wall_s"] <= 120 for v in m.values()),
            "tessera_decision_ms_p99_le_200": m["tessera"]["decision_ms_p99"] <= 200,
            "tessera_lowest_avg_jct": all(m["tessera"]["avg_jct_s"] <= v["avg_jct_s"] for v in m.values()),
            "tessera_throughput_vs_best_baseline": m["tessera"]["avg_throughput"] / best_base_tput,
            "tessera_throughput_ge_1_3x_best_baseline": m["tessera"]["avg_throughput"]
            >= 1.3 * best_base_tput,
            "max_reachable_ratio_vs_best_baseline": bounds.get("demand_bound_throughput", float("nan"))
            / best_base_tput,
        }
    print(
        "throughput bounds: demand {:.1f}, capacity {:.1f} (untimed {:.1f}) (any policy's avg_throughput is at most"
        " these)".format(
            bounds.get("demand_bound_throughput", float("nan")),
            bounds.get("capacity_bound_throughput", float("nan")),
            bounds.get("capacity_bound_untimed_throughput", float("nan")),
        )
    )
    saturation = {
        f"{d:g}": _saturation_row(window, args.sweep_policies, d, config, on_phase)
        for d in [float(x) for x in args.densities.split(",") if x.strip()]
    }
    workloads = {
        name: _workload_row(name, args.sweep_policies, config, on_phase)
        for name in [x.strip() for x in args.families.split(",") if x.strip()]
    }
    noise = {
        f"{sigma:g}": _noise_row(window, args.noise_policies, replace(config, noise_sigma=sigma), on_phase)
        for sigma in [float(x) for x in args.noise.split(",") if x.strip()]
    }
    payload = {
        **run_header("sim_philly", "sim_philly.py"),
        "cluster": study.cluster,
        "window": [args.start, args.end],
        "tick_s": args.tick_s,
        "jobs": study.n_jobs,
        "demand_gpu_hours": study.demand_gpu_hours,
        **bounds,
        "table_build_s": study.table_s,
        "first_event_s": study.first_event_s,
        # start → first simulated event from an empty table cache (None: the cache held tables already)
        "cold_table_s": study.first_event_s if cold else None,
        "policies": {
            n: {k: v[k] for k in KEYS} | {k: v[k] for k in v if k not in KEYS} for n, v in m.items()
        },
        "ratios": full["ratios"],
        "depth_sweep": full["depth_sweep"],
        "targets": targets,
        "saturation": saturation,
        "noise": noise,
        "workloads": workloads,
        "total_wall_s": time.perf_counter() - t0,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "sim_philly.json").write_text(json.dumps(clean_nan(payload), indent=1))
    for f in work.glob("*.png"):
        shutil.copy(f, out / f"sim_philly_{f.name}")
    plot_saturation(clean_nan(saturation), out)
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(clean_nan(targets), indent=1))
    print(f"wrote {out / 'sim_philly.json'}")
    return 0


def _saturation_row(
    window: dict, policies: str, density: float, config: SimConfig, on_phase: PhaseFn
) -> dict:
    """One density of the saturation table: per policy the bounds' fractions, JCT, slowdown and waits."""
    st = run_study(
        **window,
        config=config,
        policies=policies,
        out_dir=None,
        plots=False,
        density=density,
        on_phase=lambda label, done, total: on_phase(f"density {density:g}: {label}", done, total),
    )
    bounds = st.bounds or {}
    rows = {
        n: {k: v[k] for k in SWEEP_KEYS} | _fractions(v["avg_throughput"], bounds)
        for n, v in st.metrics.items()
    }
    row = {"jobs": st.n_jobs, **bounds, "policies": rows}
    if "tessera" in rows:
        others = {n: v for n, v in rows.items() if not n.startswith("tessera")}
        best = min((v["avg_jct_s"] for v in others.values()), default=float("nan"))
        row["tessera_jct_vs_best_baseline"] = rows["tessera"]["avg_jct_s"] / best
        row["tessera_lowest_avg_jct"] = all(
            rows["tessera"]["avg_jct_s"] <= v["avg_jct_s"] for v in others.values()
        )
    print(f"density {density:g}: " + "; ".join(
        f"{n} JCT {v['avg_jct_s'] / 3600:.2f} h, cap. fraction {v['capacity_fraction'] or float('nan'):.2f}, "
        f"p99 slowdown {v['p99_slowdown']:.1f}" for n, v in rows.items()
    ), flush=True)  # fmt: skip
    return row


def plot_saturation(saturation: dict, out: Path) -> Path:
    """The saturation table as four panels against arrival density, one line per policy: average JCT, the share
    of the capacity bound reached, p99 JCT slowdown and the longest wait (where starvation would show)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    densities = sorted(saturation, key=float)
    policies = list(dict.fromkeys(n for d in densities for n in saturation[d]["policies"]))
    panels = (
        ("avg_jct_s", "average JCT (h)", 1 / 3600, True),
        ("capacity_fraction", "avg throughput ÷ capacity bound", 1.0, False),
        ("p99_slowdown", "p99 JCT slowdown", 1.0, True),
        ("max_wait_s", "longest wait to a first start (h)", 1 / 3600, True),
    )
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for ax, (key, label, scale, log) in zip(axes.ravel(), panels, strict=True):
        for n in policies:
            pts = [
                (float(d), v * scale)
                for d in densities
                if (v := saturation[d]["policies"].get(n, {}).get(key)) is not None
            ]
            ax.plot(
                [x for x, _ in pts], [y for _, y in pts], marker="o", label=n, lw=2.5 if n == "tessera" else 1
            )
        ax.set_xscale("log", base=2)
        if log:
            ax.set_yscale("log")
        ax.set_xlabel("arrival density (× the Philly window's)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    fig.suptitle("Philly window on crius-sim-1280 under saturation")
    fig.tight_layout()
    path = out / "sim_philly_saturation.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _fractions(throughput: float, bounds: dict) -> dict:
    """A policy's avg_throughput over each bound (None where the bound is missing or zero)."""
    cap, untimed = bounds.get("capacity_bound_throughput"), bounds.get("capacity_bound_untimed_throughput")
    dem = bounds.get("demand_bound_throughput")
    return {
        "capacity_fraction": throughput / cap if cap else None,
        "capacity_untimed_fraction": throughput / untimed if untimed else None,
        "demand_fraction": throughput / dem if dem else None,
    }


def _bounds_only(args: argparse.Namespace) -> int:
    """The bounds at each density without simulating, and the fractions of the policies' avg_throughput in
    ``args.source`` (a sim_philly.json of the same window) against them."""
    from tessera.sim.metrics import throughput_bounds
    from tessera.sim.report import study_inputs

    t0 = time.perf_counter()
    source = json.loads(Path(args.source).read_text()) if Path(args.source).exists() else {}
    rows = {}
    for d in [float(x) for x in args.densities.split(",") if x.strip()]:
        inp = study_inputs(
            start=args.start, end=args.end, seed=args.seed, density=d, workers=args.workers,
            config=SimConfig(seed=args.seed, tick_s=args.tick_s),
        )  # fmt: skip
        table, jobs, cfg = inp.table, inp.jobs, inp.config
        t = time.perf_counter()
        bounds = throughput_bounds(jobs, table, cfg) or {}
        bound_s = time.perf_counter() - t
        measured = source.get("saturation", {}).get(f"{d:g}", {}).get("policies", {})
        policies = {
            n: {"avg_throughput": v["avg_throughput"]} | _fractions(v["avg_throughput"], bounds)
            for n, v in measured.items()
        }
        rows[f"{d:g}"] = {
            "jobs": len(jobs),
            "window_s": cfg.window_s,
            **bounds,
            "bound_s": bound_s,
            "policies": policies,
        }
        print(
            f"density {d:g}: demand {bounds.get('demand_bound_throughput', float('nan')):.1f}, capacity untimed "
            f"{bounds.get('capacity_bound_untimed_throughput', float('nan')):.1f}, time-indexed "
            f"{bounds.get('capacity_bound_throughput', float('nan')):.1f} ({bound_s:.1f} s); "
            + "; ".join(
                f"{n} {v['avg_throughput']:.1f} = {v['capacity_fraction'] or float('nan'):.3f} "
                f"(untimed {v['capacity_untimed_fraction'] or float('nan'):.3f})"
                for n, v in policies.items()
            ),
            flush=True,
        )
    payload = {
        **run_header("sim_bounds", "sim_philly.py"),
        "cluster": "crius-sim-1280",
        "window": [args.start, args.end],
        "throughputs_from": source.get("command"),
        "saturation": rows,
        "total_wall_s": time.perf_counter() - t0,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sim_bounds.json").write_text(json.dumps(clean_nan(payload), indent=1))
    print(f"wrote {out / 'sim_bounds.json'}")
    return 0


def _workload_row(name: str, policies: str, config: SimConfig, on_phase: PhaseFn) -> dict:
    """A generated workload family (tessera.sim.generator) on the same cluster: its knobs and every policy."""
    seed = config.seed
    st = run_study(
        cluster="crius-sim-1280",
        trace=f"gen:{name}",
        seed=seed,
        config=config,
        policies=policies,
        out_dir=None,
        plots=False,
        on_phase=lambda label, done, total: on_phase(f"{name}: {label}", done, total),
    )
    rows = {
        n: {k: v[k] for k in SWEEP_KEYS} | {"deadline_ratio": v["deadline_ratio"]}
        for n, v in st.metrics.items()
    }
    row = {"knobs": family(name, seed).knobs(), "jobs": st.n_jobs, **(st.bounds or {}), "policies": rows}
    if "tessera" in rows:
        others = [v["avg_jct_s"] for n, v in rows.items() if not n.startswith("tessera")]
        row["tessera_jct_vs_best_baseline"] = rows["tessera"]["avg_jct_s"] / min(others, default=float("nan"))
    print(
        f"{name}: " + "; ".join(f"{n} JCT {v['avg_jct_s'] / 3600:.2f} h" for n, v in rows.items()), flush=True
    )
    return row


def _noise_row(window: dict, policies: str, config: SimConfig, on_phase: PhaseFn) -> dict:
    """The truth departs from every policy's belief by a lognormal σ (``config.noise_sigma``) per (job,
    allocation)."""
    sigma = config.noise_sigma
    st = run_study(
        **window,
        policies=policies,
        out_dir=None,
        plots=False,
        config=config,
        on_phase=lambda label, done, total: on_phase(f"noise {sigma:g}: {label}", done, total),
    )
    rows = {n: {k: v[k] for k in SWEEP_KEYS} for n, v in st.metrics.items()}
    print(f"noise {sigma:g}: " + "; ".join(f"{n} JCT {v['avg_jct_s'] / 3600:.2f} h" for n, v in rows.items()))
    return rows


if __name__ == "__main__":
    sys.exit(main())

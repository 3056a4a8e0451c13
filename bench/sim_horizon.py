"""Throughput against JCT under saturation: tessera's SRPT horizon θ swept on the Philly window at one density.

    python bench/sim_horizon.py [--density 4] [--horizons 0,1800,3600,7200,28800,115200] [--workers 2]

Tessera weights a job's normalized throughput in its LP by 1 + θ ÷ t (t: the seconds it still needs; see
``tessera.scheduler.policies.tessera.order``). θ = 0 is pure throughput; a θ far above most jobs' length is, in
effect, Smith's rule (the rate at which jobs complete). Issue 21 asks for both ≥ 0.90 of the capacity bound and an
average JCT ≤ 0.75× the best baseline's at 4× density: this bench shows where each θ lands on that plane, beside
Sia from the same run, so a miss can be told apart from a loose bound. Writes ``bench/results/sim_horizon.json``
(``rows.<θ>``: ``avg_jct_s``, ``avg_throughput``, ``capacity_fraction``, ``p99_slowdown``, ``jct_vs_sia``,
``max_wait_s``) and ``sim_horizon.png``; plain progress lines, no terminal needed.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from provenance import run_header

from tessera.sim.metrics import compute_metrics, throughput_bounds
from tessera.sim.report import StudyInputs, run_policy, study_inputs
from tessera.sim.simulator import SimConfig

RESULTS = Path(__file__).resolve().parent / "results"
KEYS = ("avg_jct_s", "p99_jct_s", "avg_throughput", "p99_slowdown", "max_wait_s", "finished", "restarts_per_job",
        "sim_wall_s")  # fmt: skip
WINDOW = dict(start="2017-10-09", end="2017-10-23", seed=0)


@functools.cache
def _inputs(density: float, tick_s: float) -> StudyInputs:
    """The window's jobs and rate table, loaded once a process: the parent loads them for the bound before the
    pool forks, so its workers start with them (every run of a study reuses one set, as ``run_study`` does)."""
    return study_inputs(**WINDOW, density=density, config=SimConfig(seed=0, tick_s=tick_s), workers=1)


def _run(policy: str, options: dict[str, float], density: float, tick_s: float) -> dict[str, float]:
    """One policy (with its options) simulated on the window: the metrics kept in the JSON."""
    inp = _inputs(density, tick_s)
    m = compute_metrics(run_policy(inp.cluster, inp.jobs, inp.table, policy, inp.config, **options))
    return {k: m[k] for k in KEYS}


def _bound(density: float, tick_s: float) -> float:
    inp = _inputs(density, tick_s)
    return (throughput_bounds(inp.jobs, inp.table, inp.config) or {})["capacity_bound_throughput"]


def plot(payload: dict, out: Path) -> Path:
    """Capacity fraction against average JCT ÷ Sia's, one point per θ, with the issue's two targets."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    rows = payload["rows"]
    xs = [r["jct_vs_sia"] for r in rows.values()]
    ys = [r["capacity_fraction"] for r in rows.values()]
    ax.plot(xs, ys, "o", color="tab:blue", label="tessera, one point per θ")
    for theta, r in rows.items():
        ax.annotate(f"θ={float(theta) / 3600:g} h", (r["jct_vs_sia"], r["capacity_fraction"]), fontsize=8,
                    xytext=(4, 4), textcoords="offset points")  # fmt: skip
    sia = payload["sia"]
    ax.plot([1.0], [sia["capacity_fraction"]], "s", color="tab:red", label="sia")
    ax.axhline(0.90, color="grey", ls="--", lw=0.8, label="target: capacity fraction ≥ 0.90")
    ax.axvline(0.75, color="grey", ls=":", lw=0.8, label="target: avg JCT ≤ 0.75× Sia")
    ax.set_xlabel("average JCT ÷ Sia's")
    ax.set_ylabel("avg throughput ÷ capacity bound")
    ax.set_title(f"Philly window at {payload['density']:g}× density: the SRPT horizon θ")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path = out / "sim_horizon.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--density", type=float, default=4.0)
    ap.add_argument("--horizons", default="0,1800,3600,7200,28800,115200", help="θ values in seconds")
    ap.add_argument("--tick-s", type=float, default=60.0)
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()
    t0 = time.perf_counter()
    horizons = [float(x) for x in args.horizons.split(",") if x.strip()]
    print(f"tables for density {args.density:g} (built once, then cached) ...", flush=True)
    bound = _bound(args.density, args.tick_s)
    print(f"capacity bound {bound:.1f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    # by row name: Sia first (the longest run), then tessera at each θ (its row named by θ in seconds)
    tasks = {"sia": ("sia", {})} | {f"{h:g}": ("tessera", {"srpt_horizon_s": h}) for h in horizons}
    found: dict[str, dict[str, float]] = {}
    with ProcessPoolExecutor(max(1, args.workers)) as pool:
        futures = {pool.submit(_run, *task, args.density, args.tick_s): name for name, task in tasks.items()}
        for k, fut in enumerate(as_completed(futures), 1):
            name, m = futures[fut], fut.result()
            found[name] = m | {"capacity_fraction": m["avg_throughput"] / bound}
            print(f"  [{k}/{len(tasks)}] {' '.join(map(str, tasks[name]))}: avg JCT {m['avg_jct_s']:.0f} s, capacity "
                  f"fraction {found[name]['capacity_fraction']:.3f} ({time.perf_counter() - t0:.0f} s)", flush=True)  # fmt: skip
    sia = found.pop("sia")
    rows = {
        n: found[n] | {"jct_vs_sia": found[n]["avg_jct_s"] / sia["avg_jct_s"]} for n in tasks if n != "sia"
    }
    payload = {
        **run_header("sim_horizon", "sim_horizon.py"),
        "window": [WINDOW["start"], WINDOW["end"]],
        "density": args.density,
        "tick_s": args.tick_s,
        "capacity_bound_throughput": bound,
        "sia": sia,
        "rows": rows,
        "both_targets_met": [
            t for t, r in rows.items() if r["capacity_fraction"] >= 0.90 and r["jct_vs_sia"] <= 0.75
        ],
        "total_wall_s": time.perf_counter() - t0,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sim_horizon.json").write_text(json.dumps(payload, indent=1))
    print(f"wrote {out / 'sim_horizon.json'} and {plot(payload, out)}")
    for t, r in rows.items():
        print(f"θ {float(t) / 3600:5.2f} h: capacity fraction {r['capacity_fraction']:.3f}, JCT ÷ Sia "
              f"{r['jct_vs_sia']:.3f}, p99 slowdown {r['p99_slowdown']:.2f}")  # fmt: skip
    print(f"sia: capacity fraction {sia['capacity_fraction']:.3f}, p99 slowdown {sia['p99_slowdown']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark: where the capacity bound's throughput comes from, split by the GPU count jobs requested, beside each
policy's (issue 21 item 3: "if the bound itself is loose, say how").

    python bench/sim_bound_split.py [--densities 2,4,8] [--policies tessera,sia] [--tick-s 60] [--out bench/results]

On the Philly two-week window on ``crius-sim-1280`` at each arrival density (as ``bench/sim_philly.py`` makes it,
with its 60 s control tick): the time-indexed capacity bound's optimum split by requested GPU count
(``tessera.sim.metrics.capacity_bound_by_request``: how much each request size's work adds to the bound, and how
much it could add alone, its demand), and each policy's normalized work inside the window split the same way, from
a run stopped at the window's end (``throughput_by_request``; their sum is the policy's ``avg_throughput`` in
``sim_philly.json``). The bound is the most normalized work any schedule fits in the window; a job counts 1 a
second on its requested GPUs, whatever their number, so the bound spends the GPU-time where a GPU-second buys the
most: on small requests, and on jobs whose request is slow for their model and that run many times faster on
other GPUs, leaving the largest jobs' work past the window's end. A policy that starts every job in turn spends
GPU-time on those too.

Writes ``bench/results/sim_bound_split.json`` (``densities.<d>.bound``: ``capacity_bound_throughput``,
``demand_bound_throughput``; ``densities.<d>.by_request.<gpus>``: ``jobs``, ``demand``, ``bound``, and per policy
its share; ``densities.<d>.policies.<name>``: ``avg_throughput``, ``capacity_fraction``) and
``sim_bound_split.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--densities", default="2,4,8")
    ap.add_argument("--policies", default="tessera,sia")
    ap.add_argument("--tick-s", type=float, default=60.0, help="control tick (0: rounds only)")
    ap.add_argument("--start", default="2017-10-09")
    ap.add_argument("--end", default="2017-10-23")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()

    from dataclasses import replace

    from tessera.sim.metrics import capacity_bound_by_request, throughput_by_request
    from tessera.sim.report import resolve_policies, run_policy, study_inputs
    from tessera.sim.simulator import SimConfig

    t_all = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t_all:7.1f} s] {msg}", flush=True)

    names = resolve_policies(args.policies)
    out: dict[str, Any] = {
        "benchmark": "sim_bound_split",
        "command": "python bench/sim_bound_split.py " + " ".join(sys.argv[1:]),
        "cluster": "crius-sim-1280",
        "window": [args.start, args.end],
        "tick_s": args.tick_s or None,
        "densities": {},
    }
    for d in [float(x) for x in args.densities.split(",") if x.strip()]:
        inp = study_inputs(
            start=args.start, end=args.end, seed=args.seed, density=d, workers=args.workers,
            config=SimConfig(seed=args.seed, tick_s=args.tick_s or None),
        )  # fmt: skip
        spec, table, jobs, cfg = inp.cluster, inp.table, inp.jobs, inp.config
        split = capacity_bound_by_request(jobs, table, cfg) or {}
        # the bounds are the splits' sums (the time-indexed LP solved once, not again by throughput_bounds)
        bounds = {
            "capacity_bound_throughput": sum(r.capacity_throughput for r in split.values()),
            "demand_bound_throughput": sum(r.demand_throughput for r in split.values()),
        }
        log(f"density {d:g}: {len(jobs)} jobs, capacity bound {bounds['capacity_bound_throughput']:.1f}")
        t0 = min(j.arrival_s for j in jobs)
        stopped = replace(cfg, horizon_s=t0 + cfg.window_s)  # work inside the window only
        shares: dict[str, dict[int, float]] = {}
        policies: dict[str, dict[str, float]] = {}
        for name in names:
            by = shares[name] = throughput_by_request(run_policy(spec, jobs, table, name, stopped))
            tput = sum(by.values())
            policies[name] = {
                "avg_throughput": tput,
                "capacity_fraction": tput / bounds["capacity_bound_throughput"],
            }
            log(f"density {d:g} {name}: avg_throughput {tput:.1f}, capacity fraction "
                f"{policies[name]['capacity_fraction']:.3f}")  # fmt: skip
        rows = {
            str(n): {
                "jobs": s.jobs,
                "demand": s.demand_throughput,
                "bound": s.capacity_throughput,
                **{name: shares[name].get(n, 0.0) for name in names},
            }
            for n, s in split.items()
        }
        out["densities"][f"{d:g}"] = {
            "jobs": len(jobs),
            "bound": bounds,
            "by_request": rows,
            "policies": policies,
        }
        print(f"  {'GPUs':>4} {'jobs':>6} {'demand':>8} {'bound':>8} " + " ".join(f"{n:>10}" for n in names))
        for n, row in rows.items():
            print(f"  {n:>4} {row['jobs']:6d} {row['demand']:8.1f} {row['bound']:8.1f} "
                  + " ".join(f"{row[name]:10.1f}" for name in names))  # fmt: skip
    out["load_avg_at_end"] = os.getloadavg()
    out["total_wall_s"] = time.perf_counter() - t_all
    dest = Path(args.out)
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "sim_bound_split.json"
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path}")
    plot(out, names, dest / "sim_bound_split.png")
    return 0


def plot(out: dict[str, Any], names: list[str], path: Path) -> None:
    """Per density, grouped bars by requested GPU count: the demand, the bound's share, each policy's share."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    dens = list(out["densities"])
    fig, axes = plt.subplots(1, len(dens), figsize=(5.5 * len(dens), 4.2), squeeze=False)
    series = ["demand", "bound", *names]
    for ax, d in zip(axes[0], dens, strict=True):
        rows = out["densities"][d]["by_request"]
        x = np.arange(len(rows))
        width = 0.8 / len(series)
        for i, s in enumerate(series):
            ax.bar(x + (i - (len(series) - 1) / 2) * width, [r[s] for r in rows.values()], width, label=s)
        ax.set_xticks(x, list(rows))
        ax.set_xlabel("GPUs requested")
        ax.set_title(f"{d}x density")
        ax.set_ylabel("normalized throughput (work in window / window)")
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())

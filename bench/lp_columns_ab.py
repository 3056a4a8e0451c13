"""Benchmark: tessera's LP solved whole by HiGHS against by column generation (``lp_columns``), on the Philly
two-week window on ``crius-sim-1280`` at arrival densities 1× and 4× (as ``bench/sim_philly.py`` makes them):
average JCT, capacity fraction, finished jobs, decision p99, for choosing the default (issue 21 item 2).

    python bench/lp_columns_ab.py [--densities 1,4] [--out bench/results]

Both LPs have the same optimum (tests/scheduler/test_tessera_decisions.py), but column generation may stop at a
different optimal vertex, so the decisions, and so the figures, may differ. Writes ``lp_columns_ab.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--densities", default="1,4")
    ap.add_argument("--start", default="2017-10-09")
    ap.add_argument("--end", default="2017-10-23")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()

    from tessera.sim.metrics import compute_metrics, throughput_bounds
    from tessera.sim.report import run_policy, study_inputs
    from tessera.sim.simulator import SimConfig

    t0 = time.perf_counter()
    out: dict = {
        "benchmark": "lp_columns_ab",
        "command": "python " + " ".join(sys.argv),
        "cluster": "crius-sim-1280",
        "window": [args.start, args.end],
        "densities": {},
    }
    for d in [float(x) for x in args.densities.split(",") if x.strip()]:
        inp = study_inputs(
            start=args.start, end=args.end, seed=args.seed, density=d, workers=args.workers,
            config=SimConfig(seed=args.seed),
        )  # fmt: skip
        spec, table, jobs, cfg = inp.cluster, inp.table, inp.jobs, inp.config
        cap = (throughput_bounds(jobs, table, cfg) or {}).get("capacity_bound_throughput")
        row: dict = {"jobs": len(jobs), "capacity_bound_throughput": cap}
        for label, cols in (("highs_full", False), ("lp_columns", True)):
            res = run_policy(spec, jobs, table, "tessera", cfg, lp_columns=cols)
            m = compute_metrics(res)
            row[label] = {
                "avg_jct_s": m["avg_jct_s"],
                "p99_jct_s": m.get("p99_jct_s"),
                "capacity_fraction": m["avg_throughput"] / cap if cap else None,
                "avg_throughput": m["avg_throughput"],
                "finished": m["finished"],
                "restarts": sum(j.restarts for j in res.jobs),
                "decision_ms_p99": m.get("decision_ms_p99"),
                "sim_wall_s": res.wall_s,
            }
            print(f"density {d:g} {label}: " + json.dumps(row[label]), flush=True)
        a, b = row["highs_full"], row["lp_columns"]
        row["jct_ratio_columns_vs_full"] = b["avg_jct_s"] / a["avg_jct_s"]
        if a["capacity_fraction"] and b["capacity_fraction"]:
            row["capacity_fraction_ratio_columns_vs_full"] = b["capacity_fraction"] / a["capacity_fraction"]
        out["densities"][f"{d:g}"] = row
    out["load_avg_at_end"] = os.getloadavg()
    out["total_wall_s"] = time.perf_counter() - t0
    p = Path(args.out) / "lp_columns_ab.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(out, indent=1))
    print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

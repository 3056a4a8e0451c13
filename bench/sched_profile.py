"""Profile one policy's scheduling rounds at scale (issue 21 item 2): a reproducible harness for the hot spots.

    python bench/sched_profile.py [--copies 10] [--policy tessera] [--hours 24] [--profile out.prof]
        [--[no-]lp-columns] [--check] [--digest]

Replays the Philly two-week window as ``--copies`` interleaved copies on ``crius-sim-1280`` with every node group
× copies (10: ``crius-sim-12800``'s shape), for the first ``--hours`` simulated hours (``--hours 0``: the whole
window), and prints the policy's decision time per round (mean, p50, p99, max), the simulator's wall per round,
and — with ``--check`` — the run's average JCT and finished count, the figures a speed-up must leave unchanged (``--digest``: and a digest of every allocation
change).
``--profile FILE`` writes a cProfile of the run (``python -m pstats FILE``) and prints its top functions.
``Simulator.run`` keeps everything built before the run out of the garbage collector's sight (``gc.freeze``;
once this bench's ``--gc-freeze``). ``--phases`` (the tessera family): CPU ms per decision in each of the policy's rules and in HiGHS's solve
(``phase_cpu_ms``; CPU time, so a box shared with other work skews it less than wall time).
``--home`` is the table cache (``$TESSERA_HOME``; reuse a warm one, the tables are built once).
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import os
import pickle
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--policy", default="tessera")
    ap.add_argument("--hours", type=float, default=24.0, help="simulated hours to run (0: the whole window)")
    ap.add_argument("--start", default="2017-10-09")
    ap.add_argument("--end", default="2017-10-23")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--home", default=None, help="TESSERA_HOME (the table cache)")
    ap.add_argument("--profile", default=None, help="write a cProfile here and print its top functions")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--check", action="store_true", help="print avg JCT and finished count (equivalence)")
    ap.add_argument("--digest", action="store_true", help="also a digest of the allocation log (equivalence)")
    ap.add_argument("--json", default=None, help="write the figures here")
    ap.add_argument("--pickle", default=None, help="keep the prepared table and jobs here (built once)")
    ap.add_argument("--phases", action="store_true", help="tessera: CPU ms per round in each rule, HiGHS")
    ap.add_argument("--lp-columns", action=argparse.BooleanOptionalAction, default=None,
                    help="tessera's LP by column generation (--no-lp-columns: whole by HiGHS); default: the policy's")  # fmt: skip
    args = ap.parse_args()
    if args.home:
        os.environ["TESSERA_HOME"] = args.home

    import numpy as np
    from sim_scale import copies, lp_columns_in_effect, make_policy, scaled_cluster

    from tessera.hardware import get_cluster
    from tessera.sim.metrics import compute_metrics
    from tessera.sim.report import prepare
    from tessera.sim.simulator import SimConfig, Simulator
    from tessera.sim.trace import load_philly, window, window_length
    from tessera.sim.workload import WorkloadSpec

    t0 = time.perf_counter()
    full = load_philly(None)
    tr = window(full, args.start, args.end)
    w_len = window_length(full, args.start, args.end) or (tr.jobs[-1].submit_s - tr.jobs[0].submit_s)
    cl = scaled_cluster(get_cluster("crius-sim-1280"), args.copies)
    pk = Path(args.pickle) if args.pickle else None
    if pk is not None and pk.exists():
        table, jobs = pickle.loads(pk.read_bytes())
    else:
        wl = WorkloadSpec(seed=args.seed)
        table, jobs, _ = prepare(cl, copies(tr, args.copies), wl, workers=args.workers)
        if pk is not None:
            pk.write_bytes(pickle.dumps((table, jobs)))
    horizon = jobs[0].arrival_s + 3600.0 * args.hours if args.hours > 0 else None
    cfg = SimConfig(seed=args.seed, window_s=w_len, horizon_s=horizon, record_allocations=args.digest)
    gpus = sum(cl.gpu_counts().values())
    print(f"{cl.name}: {gpus} GPUs, {len(jobs)} jobs ready in {time.perf_counter() - t0:.1f} s", flush=True)

    phases = time_phases() if args.phases else None
    sim = Simulator(cl, jobs, table, make_policy(args.policy, args.lp_columns), cfg)
    prof = cProfile.Profile() if args.profile else None
    if prof:
        prof.enable()
    res = sim.run()
    if prof:
        prof.disable()
        prof.dump_stats(args.profile)
        pstats.Stats(args.profile).sort_stats("cumulative").print_stats(args.top)
        pstats.Stats(args.profile).sort_stats("tottime").print_stats(args.top)
    dec = np.array(res.decision_s) * 1000.0
    out = {
        "benchmark": "sched_profile",
        "command": "python bench/sched_profile.py " + " ".join(sys.argv[1:]),
        "policy": args.policy,
        "lp_columns": lp_columns_in_effect(args.lp_columns, gpus),
        "gpus": gpus,
        "jobs": len(jobs),
        "hours": args.hours,
        "rounds": res.rounds,
        "decisions": int(dec.size),
        "decision_ms_mean": float(dec.mean()) if dec.size else 0.0,
        "decision_ms_p50": float(np.percentile(dec, 50)) if dec.size else 0.0,
        "decision_ms_p99": float(np.percentile(dec, 99)) if dec.size else 0.0,
        "decision_ms_max": float(dec.max()) if dec.size else 0.0,
        "sim_wall_s": res.wall_s,
        "wall_ms_per_round": 1000.0 * res.wall_s / max(1, res.rounds),
        "load_avg": os.getloadavg(),
    }
    if args.check:
        m = compute_metrics(res)
        out |= {
            "avg_jct_s": m["avg_jct_s"],
            "finished": m["finished"],
            "restarts": sum(j.restarts for j in res.jobs),
            "gpu_s": sum(j.gpu_s for j in res.jobs),
        }
    if args.digest:  # as tests/scheduler/test_tessera_decisions.py hashes it
        h = hashlib.sha256()
        for ev in res.allocation_log:
            h.update(repr((round(ev.time_s, 6), ev.job_id, str(ev.kind), ev.placement, ev.gpus)).encode())
        out |= {"allocation_digest": h.hexdigest()[:16], "allocation_events": len(res.allocation_log)}
    if phases is not None:
        acc, per_round = phases
        n = max(1, int(dec.size))
        out["phase_cpu_ms"] = {k: round(1000.0 * v / n, 2) for k, v in acc.items()}
        out["phase_cpu_ms_slowest_1pct"] = slowest_phases(per_round, 0.01)
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


def slowest_phases(per_round: list[dict[str, float]], fraction: float) -> dict[str, float]:
    """CPU ms per rule averaged over the slowest ``fraction`` of rounds (by the whole ``schedule``): where the
    decision p99 goes, which the run's means hide."""
    ranked = sorted(per_round, key=lambda r: -r.get("schedule", 0.0))
    top = ranked[: max(1, int(len(ranked) * fraction))]
    keys = sorted({k for r in top for k in r})
    return {k: round(1000.0 * sum(r.get(k, 0.0) for r in top) / len(top), 2) for k in keys} | {
        "rounds": len(top)
    }


def time_phases() -> tuple[dict[str, float], list[dict[str, float]]]:
    """Wrap the tessera policy's rules, its LP's parts and HiGHS's solve with CPU-time accumulators (seconds,
    summed over the run; nested: ``plan`` holds ``lp_build`` and ``lp_solve``, which holds ``highs_model`` and
    ``highs_run``). The functions are looked up by name where they are called, so wrapping the module
    attributes suffices. The second value holds each round's own figures (one dict per ``schedule`` call)."""
    import importlib

    from tessera.scheduler import cell_lp

    pol = importlib.import_module("tessera.scheduler.policies.tessera")
    lp = importlib.import_module("tessera.scheduler.policies.tessera.lp")
    acc: dict[str, float] = {}
    per_round: list[dict[str, float]] = []

    def wrap(mod: object, name: str, key: str) -> None:
        f = getattr(mod, name)

        def timed(*a: object, **k: object) -> object:
            before = dict(acc) if key == "schedule" else None
            t = time.process_time()
            try:
                return f(*a, **k)
            finally:
                acc[key] = acc.get(key, 0.0) + time.process_time() - t
                if before is not None:
                    per_round.append(
                        {k: v - before.get(k, 0.0) for k, v in acc.items() if v != before.get(k, 0.0)}
                    )

        setattr(mod, name, timed)

    for name in ("queue", "plan", "rescale_running", "admit", "grow_new"):
        wrap(pol, name, name)
    wrap(pol.Tessera, "schedule", "schedule")
    wrap(lp, "_running_owners", "lp_running_owners")
    wrap(lp, "_lp_groups", "lp_build")
    wrap(lp, "_read_plan", "lp_read_plan")
    wrap(cell_lp, "solve", "lp_solve")
    wrap(cell_lp, "_highs_model", "highs_model")
    wrap(cell_lp, "_run", "highs_run")
    return acc, per_round


if __name__ == "__main__":
    sys.exit(main())

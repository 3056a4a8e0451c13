"""Benchmark: the simulator and every policy at ten times the cluster (issue 21 item 2), and a cold table build.

    python bench/sim_scale.py [--policies all] [--copies 10] [--curve 1,2,4,10] [--cap-s 300] [--cold-only]
                              [--[no-]lp-columns] [--cold-only --trace gen:months-16k] [--tick-s 60]

Every run decides at rounds only unless ``--tick-s`` gives the simulator's control tick (an arrival or completion
decided at the next multiple of it, as ``bench/sim_philly.py`` runs by default): a decision is then timed at every
tick the core asks the policy, and ``round_ms_by_gpus``'s simulator ms is per 300 s round of simulated time.

1. **Cold tables** — with an empty table cache (a fresh ``$TESSERA_HOME``), the time from loading the Philly
   two-week window to the first simulated event on ``crius-sim-1280`` (trace, every configuration's rate
   table, jobs): ``cold_table_s`` (target <= 60 s on the 2-core dev box). The cache it fills is then shared by
   every run below (``crius-sim-12800``'s node shapes are ``crius-sim-1280``'s). ``--cold-only`` stops here
   and writes bench/results/sim_cold.json (``cold_table_s``, ``cold_cpu_s``, ``cold_jobs``, ``configs``); with
   ``--trace gen:FAMILY`` it times a generated trace of another shape instead, whole (``gen:months-16k``:
   16,000 jobs over about three months, half multi-GPU), into ``sim_cold_<family>.json``.
2. **Ten times the cluster** — ``crius-sim-12800`` (each node group of ``crius-sim-1280`` x10) replaying the
   same window as ``--copies`` interleaved copies (every row ``--copies`` times, copy i submitted i seconds
   later: arrivals ten times as dense, the same two weeks). Per policy ``sim_wall_s`` (target <= 120 s),
   tessera's ``decision_ms_p99`` per round (<= 100 ms) and peak RSS (<= 8 GiB). Each policy runs in a forked
   child (the table and jobs are shared copy-on-write) with a wall-clock cap ``--cap-s``: a policy past it is
   stopped and reported with ``timed_out`` and ``sim_wall_s`` = the cap (a lower bound).
3. **Growth curve** — tessera on the window with k copies on crius-sim-1280 with every node group xk, for k in
   ``--curve`` (the same load per GPU): ``round_ms_by_gpus[gpus]`` = mean and p99 decision ms per round and
   simulator wall ms per round.

Writes bench/results/sim_scale.json (``gpus``, ``cold_table_s``, ``policies.<name>.sim_wall_s``,
``tessera_decision_ms_p99``, ``peak_rss_gib``, ``round_ms_by_gpus``, ``targets``) and sim_scale.png.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from provenance import run_header

RESULTS = Path(__file__).resolve().parent / "results"
GIB = 1024.0**3


def scaled_cluster(base: Any, k: int) -> Any:
    """``base`` with every node group's node count times ``k`` (named ``<base>-x<k>``)."""
    if k == 1:
        return base
    groups = tuple(g.model_copy(update={"count": g.count * k}) for g in base.node_groups)
    return base.model_copy(update={"name": f"{base.name}-x{k}", "node_groups": groups})


def copies(trace: Any, k: int) -> Any:
    """Every row ``k`` times, copy i submitted i seconds later with its id suffixed ``~i``."""
    from tessera.sim.trace import Trace

    rows = [
        replace(j, trace_id=f"{j.trace_id}~{i}" if i else j.trace_id, submit_s=j.submit_s + i)
        for j in trace.jobs
        for i in range(k)
    ]
    rows.sort(key=lambda j: j.submit_s)
    return Trace(tuple(rows), trace.epoch, trace.source)


def cpu_s() -> float:
    """CPU seconds of this process and its reaped children (user + system)."""
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def rss_gib() -> float:
    """This process's peak resident set (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0 / GIB


def make_policy(name: str, lp_columns: bool | None = None) -> Any:
    """The policy by name; ``lp_columns``: whether the tessera family solves its LP by column generation (faster at
    scale, the same optimum; see ``cell_lp.maximize``) or whole by HiGHS; None: the policy's default."""
    from tessera.scheduler.policies.tessera import Tessera
    from tessera.scheduler.policy import get_policy

    p = get_policy(name)
    if lp_columns is not None and isinstance(p, Tessera):
        p.lp_columns = lp_columns
    return p


def lp_columns_in_effect(lp_columns: bool | None, gpus: int) -> bool:
    """Whether the tessera family solves its LP by columns on ``gpus``: the flag, else Tessera's rule by size."""
    from tessera.scheduler.policies.tessera import Tessera

    return Tessera(lp_columns=lp_columns).solves_by_columns(gpus)


def _child(
    conn: Any,
    shared: Any,
    cluster: Any,
    jobs: Any,
    table: Any,
    policy: str,
    cfg: Any,
    lp_columns: bool | None,
) -> None:
    import numpy as np

    from tessera.sim.metrics import compute_metrics
    from tessera.sim.simulator import Simulator

    t0 = time.perf_counter()
    ticks: list[float] = []

    def progress(now: float, done: int, total: int) -> None:
        # what a run stopped at the cap still tells: simulated time, wall, ticks and their p99 so far
        shared[0], shared[1] = now - jobs[0].arrival_s, time.perf_counter() - t0
        shared[2] = len(ticks)
        shared[3] = float(np.percentile(ticks, 99)) * 1000.0 if ticks else float("nan")
        shared[4] = float(np.mean(ticks)) * 1000.0 if ticks else float("nan")
        shared[5] = rss_gib()

    sim = Simulator(cluster, jobs, table, make_policy(policy, lp_columns), cfg, progress=progress)
    tick = sim.sched.tick

    def timed(now_s: float, **kw: Any) -> Any:
        a = time.perf_counter()
        out = tick(now_s, **kw)
        ticks.append(time.perf_counter() - a)
        return out

    sim.sched.tick = timed  # type: ignore[method-assign]
    res = sim.run()
    m = compute_metrics(res)
    dec = [1000.0 * x for x in res.decision_s]
    conn.send(
        {
            "sim_wall_s": res.wall_s,
            "rounds": res.rounds,
            "decision_ms_p50": m["decision_ms_p50"],
            "decision_ms_p99": m["decision_ms_p99"],
            "decision_ms_mean": sum(dec) / len(dec) if dec else 0.0,
            "wall_ms_per_round": 1000.0 * res.wall_s / max(1, res.rounds),
            "avg_jct_s": m["avg_jct_s"],
            "finished": m["finished"],
            "peak_rss_gib": rss_gib(),
        }
    )
    conn.close()


def run_capped(
    cluster: Any, jobs: Any, table: Any, policy: str, cfg: Any, cap_s: float, lp_columns: bool | None = None
) -> dict[str, Any]:
    """One policy in a forked child, stopped after ``cap_s`` seconds (then its peak RSS is read from /proc)."""
    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    shared = ctx.Array("d", [float("nan")] * 6)
    p = ctx.Process(target=_child, args=(send, shared, cluster, jobs, table, policy, cfg, lp_columns))
    t0 = time.perf_counter()
    p.start()
    send.close()
    out: dict[str, Any] | None = None
    if recv.poll(cap_s):
        try:
            out = recv.recv()
        except EOFError:
            out = None
    if out is None:
        hwm = 0.0
        try:
            for line in Path(f"/proc/{p.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    hwm = float(line.split()[1]) * 1024.0 / GIB
        except OSError:
            pass
        p.terminate()
        p.join(10)
        if p.is_alive():
            p.kill()
        p.join()
        wall = time.perf_counter() - t0
        sim_s, at_wall, n_ticks, p99, mean, rss = list(shared)
        rounds = sim_s / cfg.round_s if sim_s == sim_s else float("nan")
        return {
            "sim_wall_s": wall,
            "timed_out": wall >= cap_s,
            "peak_rss_gib": max(hwm, rss if rss == rss else 0.0),
            "exitcode": p.exitcode,
            # the part simulated before the cap (core ticks timed around the policy)
            "partial": {
                "simulated_s": sim_s,
                "of_window_s": cfg.window_s,
                "wall_s": at_wall,
                "ticks": n_ticks,
            },
            "decision_ms_p99": p99,
            "decision_ms_mean": mean,
            "wall_ms_per_round": 1000.0 * at_wall / rounds if rounds and rounds == rounds else float("nan"),
        }
    p.join()
    return out | {"timed_out": False}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default="all")
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--curve", default="1,2,4,10", help="copies (= cluster multiples) of the growth curve")
    ap.add_argument("--start", default="2017-10-09")
    ap.add_argument("--end", default="2017-10-23")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cap-s", type=float, default=300.0, help="wall-clock cap per policy run")
    ap.add_argument("--tick-s", type=float, default=0.0,
                    help="control ticks: decide an arrival or completion at the next multiple of this (0: rounds only)")  # fmt: skip
    ap.add_argument("--workers", type=int, default=None, help="processes building the cold tables")
    ap.add_argument("--home", default=None, help="TESSERA_HOME for the table cache (default: a fresh one)")
    ap.add_argument("--models", default=None, help="zoo models only (a smoke test), default: the Philly mix")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--lp-columns", action=argparse.BooleanOptionalAction, default=None,
                    help="the tessera family solves its LP by column generation (Tessera(lp_columns=True)), or "
                         "with --no-lp-columns whole by HiGHS; default: the policy's rule (by columns on 4,096 GPUs or more)")  # fmt: skip
    ap.add_argument("--trace", default="philly",
                    help="philly (the window of --start/--end), or gen:FAMILY — a generated trace of another shape, "
                         "e.g. gen:months-16k (16,000 jobs over months) — with --cold-only")  # fmt: skip
    ap.add_argument("--cold-only", action="store_true",
                    help="stop after the cold table build; write its figures to sim_cold.json")  # fmt: skip
    args = ap.parse_args()
    if args.trace != "philly" and not (args.trace.startswith("gen:") and args.cold_only):
        ap.error(f"--trace: {args.trace!r}: only philly, or gen:FAMILY with --cold-only")
    load_at_start = os.getloadavg()  # the machine is shared: the figures say how busy it was
    home = args.home or tempfile.mkdtemp(prefix="tessera-sim-scale-")
    os.environ["TESSERA_HOME"] = home  # read when the cache is opened: the cold phase starts empty
    t_all = time.perf_counter()

    from tessera.hardware import get_cluster
    from tessera.sim.report import prepare, resolve_policies
    from tessera.sim.simulator import SimConfig
    from tessera.sim.trace import load_philly, window, window_length
    from tessera.sim.workload import WorkloadSpec

    names = resolve_policies(args.policies)
    models = [m for m in (args.models or "").split(",") if m]
    wl = WorkloadSpec.of_models(models, seed=args.seed) if models else WorkloadSpec(seed=args.seed)

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t_all:7.1f} s] {msg}", flush=True)

    # 1. cold tables: trace → tables → jobs on crius-sim-1280, from an empty cache
    t0 = time.perf_counter()
    cpu0 = cpu_s()
    if args.trace.startswith("gen:"):  # the whole generated trace, with its family's model mix
        from tessera.sim.generator import family, generate

        fam = family(args.trace[len("gen:") :], seed=args.seed)
        tr = generate(fam)
        w_len = tr.jobs[-1].submit_s - tr.jobs[0].submit_s
        wl = fam.workload()
    else:
        full = load_philly(None)
        tr = window(full, args.start, args.end)
        w_len = window_length(full, args.start, args.end) or (tr.jobs[-1].submit_s - tr.jobs[0].submit_s)
    base = get_cluster("crius-sim-1280")
    cached = any(Path(home, "sim").glob("tables-*/*.json"))

    def on_config(done: int, total: int) -> None:
        log(f"rate table: {done}/{total}")

    table1, jobs1, table_s = prepare(base, tr, wl, workers=args.workers, on_config=on_config)
    cold_table_s = time.perf_counter() - t0
    cold_cpu_s = (
        cpu_s() - cpu0
    )  # this process and its (reaped) pool workers: the figure load does not inflate
    log(f"cold_table_s {cold_table_s:.1f} (CPU {cold_cpu_s:.1f} s; tables {table_s:.1f} s, {len(jobs1)} jobs, cache was "
        f"{'warm' if cached else 'empty'})")  # fmt: skip
    cfg = SimConfig(seed=args.seed, window_s=w_len, tick_s=args.tick_s or None)

    def header(benchmark: str) -> dict[str, Any]:
        """What every JSON this bench writes starts with: the run and the machine it ran on."""
        head = run_header(benchmark, "sim_scale.py")
        head["machine"] |= {"load_avg_at_start": load_at_start, "load_avg_at_end": os.getloadavg()}
        return {
            **head,
            "window": [args.start, args.end],
            "tick_s": args.tick_s or None,
            "lp_columns": args.lp_columns if args.lp_columns is not None else "by cluster size",
        }

    def write(payload: dict[str, Any]) -> Path:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{payload['benchmark']}.json"
        path.write_text(json.dumps(payload, indent=1, default=float))
        print(f"wrote {path}")
        return path

    if args.cold_only:
        name = "sim_cold" if args.trace == "philly" else f"sim_cold_{args.trace[len('gen:') :]}"
        cold = {
            **header(name),
            "trace": args.trace,
            "trace_jobs": len(tr.jobs),
            "trace_span_days": w_len / 86400.0,
            "cluster": base.name,
            "cold_table_s": cold_table_s,
            "cold_cpu_s": cold_cpu_s,
            "cold_cache_was_empty": not cached,
            "cold_jobs": len(jobs1),
            "configs": len(wl.configs()),
            "workers": args.workers,
        }
        write(cold)
        return 0

    # 2. every policy at ten times the cluster
    big = get_cluster("crius-sim-12800") if args.copies == 10 else scaled_cluster(base, args.copies)
    t0 = time.perf_counter()
    tr_k = copies(tr, args.copies)
    table_k, jobs_k, _ = prepare(big, tr_k, wl, workers=args.workers)
    log(f"{big.name}: {len(jobs_k)} jobs ready in {time.perf_counter() - t0:.1f} s")
    policies: dict[str, dict[str, Any]] = {}
    for name in names:
        load_before = os.getloadavg()
        policies[name] = r = run_capped(big, jobs_k, table_k, name, cfg, args.cap_s, args.lp_columns)
        r["load_avg_before"], r["load_avg_after"] = load_before, os.getloadavg()  # 1, 5, 15 min
        log(f"{name}: sim_wall_s {r['sim_wall_s']:.1f}{' (capped)' if r['timed_out'] else ''}, "
            f"decision p99 {r.get('decision_ms_p99', float('nan')):.1f} ms, peak RSS {r['peak_rss_gib']:.2f} GiB")  # fmt: skip

    # 3. growth curve: tessera at k copies on the k-times cluster
    curve: dict[str, dict[str, Any]] = {}
    for k in [int(x) for x in args.curve.split(",") if x.strip()]:
        if k == args.copies and "tessera" in policies:  # the run above (its partial figures when capped)
            r, gpus = policies["tessera"], sum(big.gpu_counts().values())
        else:
            cl = big if k == args.copies else scaled_cluster(base, k)
            gpus = sum(cl.gpu_counts().values())
            if k == 1:
                t_k, j_k = table1, jobs1
            else:
                t_k, j_k, _ = prepare(cl, copies(tr, k), wl, workers=args.workers)
            r = run_capped(cl, j_k, t_k, "tessera", cfg, args.cap_s, args.lp_columns)
        curve[str(gpus)] = {
            "copies": k,
            "jobs": len(tr.jobs) * k,
            "lp_columns": lp_columns_in_effect(args.lp_columns, gpus),
            **{x: r.get(x) for x in ("decision_ms_mean", "decision_ms_p99", "wall_ms_per_round", "rounds",
                                     "sim_wall_s", "timed_out", "peak_rss_gib")},
        }  # fmt: skip
        log(f"curve {gpus} GPUs: decision mean {r.get('decision_ms_mean', float('nan')):.1f} ms, "
            f"wall/round {r.get('wall_ms_per_round', float('nan')):.1f} ms")  # fmt: skip

    peak = max([rss_gib()] + [v["peak_rss_gib"] for v in policies.values()] + [v["peak_rss_gib"] or 0 for v in curve.values()])  # fmt: skip
    t_ms = policies.get("tessera", {}).get("decision_ms_p99")
    payload = {
        **header("sim_scale"),
        "models": models or "philly mix (Crius Table 2 by GPU-time bucket)",
        "cold_cpu_s": cold_cpu_s,
        "cold_table_s": cold_table_s,
        "cold_cache_was_empty": not cached,
        "cold_jobs": len(jobs1),
        "cluster": big.name,
        "gpus": sum(big.gpu_counts().values()),
        "copies": args.copies,
        "jobs": len(jobs_k),
        "cap_s": args.cap_s,
        "policies": policies,
        "tessera_decision_ms_p99": t_ms,
        "peak_rss_gib": peak,
        "round_ms_by_gpus": curve,
        "targets": {
            "cold_table_s_le_60": cold_table_s <= 60,
            "sim_wall_s_le_120_all": all(
                not v["timed_out"] and v["sim_wall_s"] <= 120 for v in policies.values()
            ),
            "tessera_decision_ms_p99_le_100": t_ms is not None and t_ms <= 100,
            "peak_rss_gib_le_8": peak <= 8,
        },
        "total_wall_s": time.perf_counter() - t_all,
    }
    path = write(payload)
    plot(payload, path.with_suffix(".png"))
    print(json.dumps(payload["targets"], indent=1))
    return 0


def plot(payload: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4))
    pol = payload["policies"]
    names = list(pol)
    a.barh(names, [pol[n]["sim_wall_s"] for n in names],
           color=["tab:red" if pol[n]["timed_out"] else "tab:blue" for n in names])  # fmt: skip
    a.axvline(120, color="k", ls="--", lw=1)
    a.set_xlabel(f"sim wall s at {payload['gpus']} GPUs (red: stopped at the cap)")
    curve = payload["round_ms_by_gpus"]
    g = sorted(curve, key=int)
    x = [int(k) for k in g]
    for key, label in (("decision_ms_mean", "tessera decision ms (mean)"),
                       ("decision_ms_p99", "tessera decision ms (p99)"),
                       ("wall_ms_per_round", "simulator wall ms per round")):  # fmt: skip
        b.plot(
            x, [curve[k][key] if curve[k][key] is not None else float("nan") for k in g], "o-", label=label
        )
    if g:  # an empty --curve: nothing to scale
        b.set_xscale("log")
        b.set_yscale("log")
    b.set_xlabel("GPUs (load per GPU constant)")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())

"""Memory estimators against the exact trace: Tessera's fast formula and Frenzy's MARP.

Prints the figures and writes bench/results/memory_accuracy.json. Accuracy = 1 − |est − trace| / trace
(the Crius/Frenzy definition). The grid (tessera.memory.grid) spans GPT, LLaMA and BERT shapes, sequence,
micro-batch, precision, recompute, attention, tp ∈ {1, 2, 4, 8}, pipeline stage position, ZeRO and optimizer.

    python bench/memory_accuracy.py [--configs 320] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
from rich.progress import Progress

from tessera.memory.formula import evaluate, inputs_for, peak_arrays
from tessera.memory.grid import GridPoint, make_grid, point_spec_and_view
from tessera.memory.marp import marp_bytes
from tessera.memory.trace import StageTraceRequest, trace_stages

RESULTS = Path(__file__).parent / "results"


def marp_for(p: GridPoint) -> float:
    """MARP applied to one device of a stage: the stage's blocks as l, the vocabulary term only where the
    stage holds the embedding or head, B = micro-batch × dp (so B/d is this rank's micro-batch)."""
    a = p.transformer_arch()
    n_total = a.n_layers + 2
    start, end = p.layer_range
    blocks = sum(1 for j in range(start, end) if 0 < j < n_total - 1)
    vocab = a.vocab if (start == 0 or end == n_total) else 0
    return float(
        marp_bytes(
            vocab=vocab,
            hidden=a.hidden,
            layers=blocks,
            heads=a.n_heads,
            seq_len=p.seq_len,
            batch=p.micro_batch * p.dp,
            dp=p.dp,
            tp=p.tp,
        )
    )


def accuracy(est: float, truth: float) -> float:
    return 1.0 - abs(est - truth) / truth


def trace_grid(points: list[GridPoint], chunk: int = 16) -> list[dict]:
    out: list[dict] = []
    with Progress() as progress:
        task = progress.add_task("exact traces", total=len(points))
        for i in range(0, len(points), chunk):
            part = points[i : i + chunk]
            for r in trace_stages([p.trace_request() for p in part], in_process=False, timeout_s=1800):
                out.append(r.to_dict())
            progress.advance(task, len(part))
            if not progress.console.is_terminal:  # a log or a pipe: plain progress lines
                print(f"exact traces: {min(i + chunk, len(points))}/{len(points)}", flush=True)
    return out


def formula_speed(points: list[GridPoint], n: int = 200_000) -> float:
    """Configurations per second of the vectorized formula (inputs prepared, as a search loop holds them)."""
    rows = [inputs_for(*map(lambda x: x, _sv(p))) for p in points[:64]]
    keys = rows[0].keys()
    base = {k: np.concatenate([r[k] for r in rows]) for k in keys}
    reps = -(-n // len(base["b"]))
    big = {k: np.tile(v, reps)[:n] for k, v in base.items()}
    peak_arrays(big)  # warm
    t0 = time.perf_counter()
    peak_arrays(big)
    return n / (time.perf_counter() - t0)


def _sv(p: GridPoint) -> tuple:
    spec, view = point_spec_and_view(p)
    return spec, [view]


def trace_time_gpt_1_3b() -> float:
    req = StageTraceRequest(
        model="gpt3-1.3b", seq_len=2048, micro_batch_size=1, precision="bf16", attention="flash"
    )
    r = trace_stages([req], in_process=False)[0]
    return float(r.wall_s)


def plot(rows: list[dict], path: Path) -> None:
    """Estimate vs trace for both estimators, log-log, with the y = x line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gib = 2**30
    truth = np.array([r["trace_bytes"] for r in rows]) / gib
    fig, axes = plt.subplots(1, 2, figsize=(11, 5), sharex=True, sharey=True)
    for ax, key, title in (
        (axes[0], "formula_bytes", "Tessera formula"),
        (axes[1], "marp_bytes", "Frenzy MARP"),
    ):
        est = np.array([r[key] for r in rows]) / gib
        zero = np.array([r["point"]["zero"] for r in rows])
        sc = ax.scatter(truth, np.maximum(est, 1e-3), c=zero, cmap="viridis", s=12, alpha=0.8)
        lo, hi = truth.min() * 0.5, truth.max() * 2
        ax.plot([lo, hi], [lo, hi], "k--", lw=1)
        acc = np.mean([r[key.replace("_bytes", "_accuracy")] for r in rows])
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="exact trace peak (GiB)",
            title=f"{title}: mean accuracy {acc:.3f}",
        )
    axes[0].set_ylabel("estimated peak (GiB)")
    fig.colorbar(sc, ax=axes, label="ZeRO stage")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--configs", type=int, default=320)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--reuse-traces",
        type=Path,
        default=None,
        help="re-score the estimators on the traces stored in an earlier results file (same grid)",
    )
    args = ap.parse_args()

    points = make_grid(args.configs, seed=args.seed)
    if args.reuse_traces is not None:
        old = json.loads(args.reuse_traces.read_text())["rows"]
        by_point = {json.dumps(r["point"], sort_keys=True): r["trace"] for r in old}
        traces = [by_point[json.dumps(p.to_dict(), sort_keys=True)] for p in points]
    else:
        traces = trace_grid(points)
    rows = []
    for p, t in zip(points, traces, strict=True):
        spec, view = point_spec_and_view(p)
        est = float(evaluate(spec, [view]).peak_bytes[0])
        marp = marp_for(p)
        truth = float(t["peak_bytes"])
        rows.append(
            {
                "point": p.to_dict(),
                "trace": t,
                "trace_bytes": truth,
                "trace_phase": t["peak_phase"],
                "formula_bytes": est,
                "marp_bytes": marp,
                "formula_accuracy": accuracy(est, truth),
                "marp_accuracy": accuracy(marp, truth),
            }
        )
    f_acc = [r["formula_accuracy"] for r in rows]
    m_acc = [r["marp_accuracy"] for r in rows]
    slices: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        p = r["point"]
        for key in ("family", "precision", "recompute", "attention", "zero", "tp"):
            slices[f"{key}={p[key]}"].append(r["formula_accuracy"])
    speed = formula_speed(points)
    t13 = trace_time_gpt_1_3b()
    result = {
        "configs": len(rows),
        "formula_mean_accuracy": statistics.fmean(f_acc),
        "formula_worst_accuracy": min(f_acc),
        "marp_mean_accuracy": statistics.fmean(m_acc),
        "marp_worst_accuracy": min(m_acc),
        "marp_underestimates": sum(r["marp_bytes"] < r["trace_bytes"] for r in rows),
        "formula_configs_per_s": speed,
        "trace_s_gpt_1_3b": t13,
        "formula_by_slice": {
            k: {"n": len(v), "mean": statistics.fmean(v), "worst": min(v)} for k, v in sorted(slices.items())
        },
        "rows": rows,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "memory_accuracy.json").write_text(json.dumps(result, indent=1))
    plot(rows, RESULTS / "memory_accuracy.png")
    print(f"configs                 {result['configs']}")
    print(
        f"formula mean / worst    {result['formula_mean_accuracy']:.4f} / {result['formula_worst_accuracy']:.4f}"
    )
    print(
        f"MARP mean / worst       {result['marp_mean_accuracy']:.4f} / {result['marp_worst_accuracy']:.4f}"
        f"  (under-estimates {result['marp_underestimates']}/{len(rows)})"
    )
    for z in range(4):
        sl = result["formula_by_slice"].get(f"zero={z}")
        if sl:
            print(f"  ZeRO-{z} ({sl['n']:3d})         {sl['mean']:.4f} / {sl['worst']:.4f}")
    print(f"formula configs/s       {speed:,.0f}")
    print(f"trace GPT-1.3B step     {t13:.2f} s")
    worst = sorted(rows, key=lambda r: r["formula_accuracy"])[:5]
    for r in worst:
        p = r["point"]
        print(
            f"  worst {r['formula_accuracy']:.4f}: {p['family']} h{p['arch']['hidden']} s{p['seq_len']} b{p['micro_batch']} "
            f"{p['layer_range']} {p['precision']} {p['recompute']} {p['attention']} tp{p['tp']} dp{p['dp']} z{p['zero']}"
        )


if __name__ == "__main__":
    main()

"""Cell-guided tuning vs exhaustive search (Crius §5.2, Figure 13) under Tessera's cost model.

Over Cells of the ``crius-sim-1280`` cluster — every GPU type and two-type mixes, 4 to 32 GPUs, 1 to 8 stages —
and the models of Crius Table 2 (Wide-ResNet, BERT, GShard MoE at their sizes and global batches), each Cell is
tuned twice: exhaustively (every per-stage dp × tp combination, every micro-batch count and memory setting)
and Cell-guided (each stage restricted to the half of its range its Cell estimate favoured). Reported:

* ``within_2pct_fraction``: Cells whose guided plan is within 2 % of the exhaustive optimum's iteration time;
* ``evaluation_reduction``: total plan combinations the exhaustive search assembles / the guided search's
  (and the per-Cell median);
* Crius reports 96.2 % tuning accuracy and a 5.48× cut in tuning time.

Only Cells where exhaustive search finds a plan that fits are counted. Writes ``bench/results/tuner.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

from rich.console import Console
from rich.progress import track
from rich.table import Table

from tessera.hardware import get_cluster
from tessera.models.zoo import get_spec
from tessera.planning.cells import CellEstimator, CellShape
from tessera.planning.space import TrainSettings
from tessera.planning.tuner import tune

OUT = Path(__file__).parent / "results" / "tuner.json"
# Crius Table 2: model → global batch sizes (one is drawn per Cell).
MODELS = {
    "wrn-0.5b": (256, 512, 1024), "wrn-1b": (256, 512, 1024), "wrn-2b": (256, 512, 1024),
    "wrn-4b": (256, 512, 1024), "wrn-6.8b": (256, 512, 1024),
    "bert-0.76b": (128, 256, 512), "bert-1.3b": (128, 256, 512), "bert-2.6b": (128, 256, 512),
    "bert-6.7b": (128, 256, 512),
    "moe-0.69b": (256, 512, 1024), "moe-1.3b": (256, 512, 1024), "moe-2.4b": (256, 512, 1024),
    "moe-10b": (256, 512, 1024), "moe-27b": (256, 512, 1024),
}  # fmt: skip
TYPES = ("A100-40GB", "A40", "A10", "V100-32GB")


def candidate_shapes(rng: random.Random) -> list[CellShape]:
    shapes = []
    for n in (4, 8, 16, 32):
        for S in (1, 2, 4, 8):
            if n < S:
                continue
            for t in TYPES:
                shapes.append(CellShape.of({t: n}, S))
            for i, a in enumerate(TYPES):
                for b in TYPES[i + 1 :]:
                    shapes.append(CellShape.of({a: n // 2, b: n // 2}, S))
    rng.shuffle(shapes)
    return shapes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=240, help="Cells to tune (each with a random Table 2 model)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    cluster = get_cluster("crius-sim-1280")
    estimators: dict[tuple[str, int], CellEstimator] = {}
    rows = []
    shapes = candidate_shapes(rng)
    t0 = time.perf_counter()
    for i in track(range(args.cells), description="tuning Cells"):
        shape = shapes[i % len(shapes)]
        model = rng.choice(sorted(MODELS))
        batch = rng.choice(MODELS[model])
        key = (model, batch)
        if key not in estimators:
            spec = get_spec(model)
            settings = TrainSettings(model=model, global_batch=batch, seq_len=spec.seq_len, precision="fp16")
            estimators[key] = CellEstimator(spec, settings, cluster)
        est = estimators[key]
        x = tune(est, shape, guided=False)
        g = tune(est, shape, guided=True)
        if x is None or g is None or not x.estimate.feasible:
            continue
        rows.append({
            "model": model, "global_batch": batch, "cell": shape.label,
            "exhaustive_s": x.iteration_time_s, "guided_s": g.iteration_time_s,
            "ratio": g.iteration_time_s / x.iteration_time_s,
            "exhaustive_evaluations": x.evaluations, "guided_evaluations": g.evaluations,
            "favour": list(g.cell.favour),
            "exhaustive_plan": [f"{s.dp_degree}x{s.tp_degree}" for s in x.plan.stages],
            "guided_plan": [f"{s.dp_degree}x{s.tp_degree}" for s in g.plan.stages],
        })  # fmt: skip
    wall = time.perf_counter() - t0
    within = sum(r["ratio"] <= 1.02 for r in rows) / len(rows)
    reduction = sum(r["exhaustive_evaluations"] for r in rows) / sum(r["guided_evaluations"] for r in rows)
    per_cell = statistics.median(r["exhaustive_evaluations"] / r["guided_evaluations"] for r in rows)
    result = {
        "cluster": "crius-sim-1280",
        "cells": len(rows),
        "within_2pct_fraction": within,
        "evaluation_reduction": reduction,
        "evaluation_reduction_median_per_cell": per_cell,
        "worst_ratio": max(r["ratio"] for r in rows),
        "mean_ratio": statistics.mean(r["ratio"] for r in rows),
        "targets": {"within_2pct_fraction": 0.95, "evaluation_reduction": 5.0},
        "meets_targets": within >= 0.95 and reduction >= 5.0,
        "wall_s": wall,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    t = Table(title="Cell-guided vs exhaustive tuning (cost model)")
    for col in ("cells", "within 2%", "evaluation reduction", "median per Cell", "worst ratio", "meets"):
        t.add_column(col, justify="right")
    t.add_row(str(len(rows)), f"{within:.1%}", f"{reduction:.2f}×", f"{per_cell:.2f}×",
              f"{result['worst_ratio']:.3f}", str(result["meets_targets"]))  # fmt: skip
    Console().print(t)
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))


if __name__ == "__main__":
    main()

"""Re-measure the memory formula's backward-transient coefficients from the exact trace.

For every (family, precision class, recompute) the trace of ONE block (a middle pipeline stage, one
micro-batch, SGD) is taken at two token counts (T = 512, 2048) with tp = 1 and at T = 2048 with tp = 4.
The backward's rise over the forward-end level is then solved for

    rise = a_h · (T·h·e) + a_f · (T·f_local·e) + c · (4·h·f_local)

(e = matmul element size). The printed table is what ``tessera.memory.formula._BWD_COEF`` holds; the memory
benchmark checks the formula on a different, random grid.

    python bench/memory_calibrate.py
"""

from __future__ import annotations

import itertools
import json

import numpy as np

from tessera.memory.grid import FAMILY_SHAPES, GridPoint
from tessera.memory.trace import trace_stages

CLASSES = {"fp32": "fp32", "bf16": "amp", "bf16-master": "master"}


def _point(fam: str, prec: str, rec: str, seq: int, batch: int, tp: int) -> GridPoint:
    shape = dict(FAMILY_SHAPES[fam][0])
    shape.update(n_layers=4, max_positions=512)
    return GridPoint(
        family=fam, arch=shape, seq_len=seq, micro_batch=batch, layer_range=(1, 2), n_stages=1, stage_index=0,
        micro_batches=1, precision=prec, recompute=rec, attention="flash", optimizer="sgd", tp=tp, dp=1, zero=0,
    )  # fmt: skip


def main() -> None:
    keys = list(itertools.product(("gpt", "llama", "bert"), CLASSES, ("none", "selective", "full")))
    settings = ((256, 2, 1), (512, 4, 1), (512, 4, 4))  # (seq, batch, tp): T = 512, 2048, 2048
    points = [_point(f, p, r, s, b, t) for f, p, r in keys for s, b, t in settings]
    traces = trace_stages([p.trace_request() for p in points], in_process=False, timeout_s=3600)
    table = {}
    for i, (fam, prec, rec) in enumerate(keys):
        t1, t2, t3 = traces[3 * i : 3 * i + 3]
        sh = FAMILY_SHAPES[fam][0]
        h, f = sh["hidden"], sh["ffn_hidden"]
        e = 4 if prec == "fp32" else 2
        rise = [t.phase_peaks["bwd"] - t.phase_peaks["fwd"] for t in (t1, t2, t3)]
        a = (rise[1] - rise[0]) / ((2048 - 512) * h * e)
        c = (rise[0] - a * 512 * h * e) / (h * f * 4)
        lhs = np.array([[h, f], [2048 * h * e, 2048 * f / 4 * e]])
        rhs = np.array([a * h, rise[2] - c * h * f])
        a_h, a_f = np.linalg.solve(lhs, rhs)
        table[f"{fam}/{CLASSES[prec]}/{rec}"] = (
            round(float(a_h), 3),
            round(float(a_f), 3),
            round(float(c), 3),
        )
        print(f"{fam:5} {CLASSES[prec]:6} {rec:9}  a_h {a_h:7.3f}  a_f {a_f:7.3f}  c {c:6.3f}")
    print(json.dumps(table))


if __name__ == "__main__":
    main()

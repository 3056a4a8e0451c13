"""The fast cold rate-table build (issue 21 item 1) keeps every figure: rates, stage counts, DP-only and tuned
rates of three small configurations equal a snapshot taken with the table path before it was sped up
(``data/cold_tables_snapshot.json``: ``warm_config`` on ``crius-sim-1280`` up to 16 GPUs per Cell).

Regenerate it only when the figures are meant to change (the cost model, the memory formula or the planner):
``python tests/sim/test_cold_tables.py --write``."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

SNAPSHOT = Path(__file__).resolve().parent / "data" / "cold_tables_snapshot.json"
CONFIGS = [("wrn-0.5b", 256), ("bert-0.76b", 128), ("moe-0.69b", 512)]
MAX_GPUS = 16
PARTS = ("stages", "cell", "dp", "true")


def build() -> dict[str, dict[str, list]]:
    """The three configurations' exported figures, each part sorted (the order a table fills in is free)."""
    from tessera.hardware import get_cluster
    from tessera.scheduler.speed import SpeedSource, warm_config
    from tessera.scheduler.state import default_config

    cluster = get_cluster("crius-sim-1280")
    out = {}
    for model, batch in CONFIGS:
        src = SpeedSource(cluster)
        data = warm_config(cluster, default_config(model, batch), src.capacity, max_gpus=MAX_GPUS, source=src)
        out[f"{model}/{batch}"] = {k: sorted(data[k]) for k in PARTS}
    return out


@pytest.mark.timeout(300)
def test_cold_tables_equal_the_snapshot():
    want = json.loads(SNAPSHOT.read_text())
    got = build()
    assert sorted(got) == sorted(want)
    for key in want:
        for part in PARTS:
            w, g = want[key][part], got[key][part]
            assert len(g) == len(w), f"{key} {part}: {len(g)} entries, the snapshot has {len(w)}"
            for a, b in zip(w, g, strict=True):
                if part == "stages":
                    assert a == b, f"{key} stages: {b} != {a}"
                    continue
                assert a[:-1] == b[:-1], f"{key} {part}: {b[:-1]} where the snapshot has {a[:-1]}"
                assert math.isclose(a[-1], b[-1], rel_tol=1e-9, abs_tol=1e-12), (
                    f"{key} {part} {a[:-1]}: {b[-1]} != {a[-1]}"
                )


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        SNAPSHOT.write_text(json.dumps(build(), indent=0))
        print(f"wrote {SNAPSHOT}")

"""Validation is the pipeline's forwards alone (no autograd): the held-out loss is the same under every plan
kind — one device, a 1F1B pipeline whose tie spans both stages, uneven DP under ZeRO-3 (FSDP2), uneven TP —
and it neither deadlocks nor leaves gradients behind (the training losses that follow it still agree)."""

from __future__ import annotations

import json

import pytest
from helpers import plan, stage
from models import factory, n_layers

from tessera.runtime import RunOptions, launch, launch_many
from tessera.runtime.dataset import TokenizedData


@pytest.mark.timeout(300)
def test_validation_loss_agrees_across_plans(tmp_path):
    rows = [{"text": f"line {i}: " + "klmnopqrst"[i % 10] * (4 + i % 11)} for i in range(240)]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    data = TokenizedData(
        path=str(tmp_path / "d.jsonl"), tokenizer="bytes", val_samples=6, val_every_steps=2,
        cache_dir=str(tmp_path / "c"), seed=3,
    )  # fmt: skip
    n = n_layers("gpt-tiny")
    one = plan("gpt-tiny", [stage(0, n, [0])], micro=2)
    plans = {
        "pp2-1f1b-tied": plan(
            "gpt-tiny", [stage(0, 2, [0]), stage(2, n, [1])], micro=4
        ),  # torch's pipelining
        # 8 rows in 3 micro-batches: unequal chunks, so Tessera's own transport runs it
        "pp2-own-uneven-micro": plan("gpt-tiny", [stage(0, 3, [0]), stage(3, n, [1])], micro=3),
        "dp2-uneven-zero3": plan("gpt-tiny", [stage(0, n, [0, 1], dp=2, shares=(5, 3))], micro=2, zero=3),
        "tp2-uneven": plan("gpt-tiny", [stage(0, n, [0, 1], tp=2, ratios=(0.75, 0.25))], micro=2),
    }
    opts = dict(model=factory("gpt-tiny"), data=data, steps=4, pg_timeout_s=60, watchdog_s=120)
    ref = launch(one, RunOptions(**opts))
    results = dict(zip(plans, launch_many([(p, RunOptions(**opts)) for p in plans.values()]), strict=True))
    ref_vals = {r.step: r.val_loss for r in ref.records if r.val_loss is not None}
    assert sorted(ref_vals) == [1, 3]
    for key, res in results.items():
        vals = {r.step: r.val_loss for r in res.records if r.val_loss is not None}
        assert sorted(vals) == [1, 3], key
        for step, v in vals.items():
            assert abs(v - ref_vals[step]) <= 1e-5 * ref_vals[step], (key, step, v, ref_vals[step])
        for a, b in zip(res.losses, ref.losses, strict=True):  # validating changed nothing the step sees
            assert abs(a - b) <= 1e-5 * abs(b), (key, res.losses, ref.losses)

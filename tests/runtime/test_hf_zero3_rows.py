"""ZeRO-3 of a pretrained Hugging Face model built from each rank's own rows, exact against the plain model.

Under FSDP2 every rank reads only its ``Shard(0)`` rows of its stage's tensors (tests/runtime/
test_stage_hf_shards.py checks the reads); these runs check that training from those rows is the plain
single-process ``transformers`` model's (loss and every gradient within 1e-5 relative, fp32) where the rows
are uneven — 3 ranks over tensors of 32 rows (11, 11, 10) and 48 (16 each) — and where a tied head sits on the
FSDP stage while its embedding is on another stage (FSDP leaves it whole: read whole, synced by the tie).
"""

from __future__ import annotations

import pytest
from helpers import max_rel, rel, stage
from hf_models import N_DECODER, hf_reference, save_tiny

from tessera.nn.hf import HFModel
from tessera.plan import Plan
from tessera.runtime import RunOptions, launch_many

TOL = 1e-5
STEPS = 2
N = N_DECODER + 2


def _plan(stages, *, micro: int, zero: int = 3) -> Plan:
    return Plan(model="hf", global_batch=9, seq_len=16, stages=tuple(stages), micro_batches=micro, zero=zero)


@pytest.mark.timeout(600)
def test_zero3_from_own_rows_is_exact(tmp_path):
    dirs = {fam: save_tiny(fam, tmp_path / fam, seed=i) for i, fam in enumerate(("llama", "gpt2"))}
    variants = {
        "llama/dp3-zero3-4:3:2": _plan([stage(0, N, [0, 1, 2], dp=3, shares=(4, 3, 2))], micro=1),
        "gpt2/pp2-1->dp2(5:4)-zero3-tied": _plan(
            [stage(0, 2, [0]), stage(2, N, [1, 2], dp=2, shares=(5, 4))], micro=3
        ),
    }
    opts = dict(steps=STEPS, capture_grads=True, pg_timeout_s=60, watchdog_s=120)
    results = launch_many(
        [(p, RunOptions(model=HFModel(str(dirs[k.split("/")[0]])), **opts)) for k, p in variants.items()]
    )
    for (key, plan), result in zip(variants.items(), results, strict=True):
        losses, grads = hf_reference(dirs[key.split("/")[0]], plan, steps=STEPS)
        loss_err = max(rel(a, b) for a, b in zip(result.losses, losses, strict=True))
        grad_err = max_rel(result.grads, grads)
        print(f"{key}: loss {loss_err:.2e} grad {grad_err:.2e}")
        assert loss_err < TOL and grad_err < TOL, (key, loss_err, grad_err)

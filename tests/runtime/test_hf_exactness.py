"""Real ``transformers`` models under Tessera's plans against the plain single-process ``AutoModelForCausalLM``.

Tiny llama, mistral, qwen2 (tied) and gpt2 (tied) models are written with ``save_pretrained`` into a temporary
directory; every variant loads them through ``HFModel`` (each rank reading its own layers' tensors, a TP rank
only its slices) and must give the plain model's loss and every gradient within 1e-5 relative (fp32, dropout
off). gpt2's TP (fused ``Conv1D`` c_attn cut by heads, even and uneven, alone and beside a pipeline stage) is
checked here as llama's is.
"""

from __future__ import annotations

import os

import pytest
from helpers import max_rel, rel, stage
from hf_models import FAMILY_NAMES, N_DECODER, hf_reference, save_tiny

from tessera.nn.hf import HFModel
from tessera.plan import Plan
from tessera.runtime import RunOptions, initial_state, launch_many

TOL = 1e-5
STEPS = 2
N = N_DECODER + 2  # embedding, decoder layers, head


def _plan(stages, *, batch: int = 8, seq: int = 16, micro: int = 1, **kw) -> Plan:
    return Plan(model="hf", global_batch=batch, seq_len=seq, stages=tuple(stages), micro_batches=micro, **kw)


def _variants_2() -> dict[str, Plan]:
    out: dict[str, Plan] = {}
    for fam in FAMILY_NAMES:
        out |= {
            f"{fam}/dp2-uneven-6:2": _plan([stage(0, N, [0, 1], dp=2, shares=(6, 2))], micro=2),
            # tied embedding/head split over the stages (qwen2, gpt2): the tie group syncs them
            f"{fam}/pp2-1f1b-uneven": _plan([stage(0, 2, [0]), stage(2, N, [1])], micro=3),
            f"{fam}/dp2-zero3-fsdp2-5:3": _plan([stage(0, N, [0, 1], dp=2, shares=(5, 3))], micro=2, zero=3),
        }
    out |= {
        "llama/tp2-uneven-3:1": _plan([stage(0, N, [0, 1], tp=2, ratios=(0.75, 0.25))], micro=2),
        "qwen2/tp2-even-recompute-full": _plan([stage(0, N, [0, 1], tp=2)], recompute="full"),
        "mistral/tp2-even": _plan([stage(0, N, [0, 1], tp=2)]),
        "llama/pp2-gpipe-recompute-selective": _plan(
            [stage(0, 3, [0]), stage(3, N, [1])], micro=4, schedule="gpipe", recompute="selective"
        ),
        "gpt2/pp2-1f1b-torch-schedule-recompute-full": _plan(
            [stage(0, 2, [0]), stage(2, N, [1])], micro=4, recompute="full"
        ),
        "qwen2/dp2-zero1": _plan([stage(0, N, [0, 1], dp=2, shares=(5, 3))], micro=2, zero=1),
        "mistral/dp2-zero2": _plan([stage(0, N, [0, 1], dp=2, shares=(3, 5))], zero=2),
        "llama-scratch/dp2-uneven-5:3": _plan([stage(0, N, [0, 1], dp=2, shares=(5, 3))]),
        # gpt2 TP: Tessera's own Conv1D shards whatever the split (DTensor's plans know only nn.Linear)
        "gpt2/tp2-even": _plan([stage(0, N, [0, 1], tp=2)]),
        "gpt2/tp2-uneven-3:1-recompute-selective": _plan(
            [stage(0, N, [0, 1], tp=2, ratios=(0.75, 0.25))], micro=2, recompute="selective"
        ),
        "gpt2-scratch/tp2-uneven-1:3": _plan([stage(0, N, [0, 1], tp=2, ratios=(0.25, 0.75))]),
    }
    return out


def _variants_3() -> dict[str, Plan]:
    return {
        "llama/mixed-dp2(3:1)->1-1f1b": _plan(
            [stage(0, 2, [0, 1], dp=2, shares=(6, 2)), stage(2, N, [2])], micro=4
        ),
        "qwen2/mixed-1->tp2(3:1)-gpipe": _plan(
            [stage(0, 3, [0]), stage(3, N, [1, 2], tp=2, ratios=(0.75, 0.25))], micro=3, schedule="gpipe"
        ),
        "gpt2/pp3-1f1b": _plan([stage(0, 2, [0]), stage(2, 3, [1]), stage(3, N, [2])], micro=4),
        "gpt2/mixed-tp2(3:1)->1-1f1b": _plan(
            [stage(0, 3, [0, 1], tp=2, ratios=(0.75, 0.25)), stage(3, N, [2])], micro=4
        ),
        "gpt2/mixed-1->tp2-gpipe": _plan(
            [stage(0, 2, [0]), stage(2, N, [1, 2], tp=2)], micro=2, schedule="gpipe"
        ),
        "mistral/dpxpp-1->dp2(1:3)-zero2": _plan(
            [stage(0, 2, [0]), stage(2, N, [1, 2], dp=2, shares=(2, 6))], micro=2, zero=2
        ),
    }


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return {fam: save_tiny(fam, root / fam, seed=i) for i, fam in enumerate(FAMILY_NAMES)}


def _factory(key: str, dirs) -> HFModel:
    fam = key.split("/")[0]
    if fam.endswith("-scratch"):
        return HFModel(str(dirs[fam.removesuffix("-scratch")]), from_scratch=True)
    return HFModel(str(dirs[fam]))


def _run(variants: dict[str, Plan], dirs) -> dict:
    jobs = [
        (
            p,
            RunOptions(
                steps=STEPS, model=_factory(k, dirs), capture_grads=True, pg_timeout_s=60, watchdog_s=120
            ),
        )
        for k, p in variants.items()
    ]
    results = launch_many(jobs)
    return {k: (p, r) for (k, p), r in zip(variants.items(), results, strict=True)}


@pytest.fixture(scope="module")
def two_proc(model_dirs):
    return _run(_variants_2(), model_dirs)


@pytest.fixture(scope="module")
def three_proc(model_dirs):
    return _run(_variants_3(), model_dirs)


def _check(key: str, plan: Plan, result, dirs) -> None:
    factory = _factory(key, dirs)
    state = initial_state(factory, N, 0) if factory.from_scratch else None
    losses, grads = hf_reference(
        dirs[key.split("/")[0].removesuffix("-scratch")], plan, steps=STEPS, state=state
    )
    loss_err = max(rel(a, b) for a, b in zip(result.losses, losses, strict=True))
    grad_err = max_rel(result.grads, grads)
    print(f"{key}: loss {loss_err:.2e} grad {grad_err:.2e}")
    assert loss_err < TOL, (result.losses, losses)
    assert grad_err < TOL


@pytest.mark.timeout(600)
@pytest.mark.parametrize("key", list(_variants_2()))
def test_two_process_hf_variant(two_proc, model_dirs, key):
    _check(key, *two_proc[key], model_dirs)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("key", list(_variants_3()))
def test_three_process_hf_variant(three_proc, model_dirs, key):
    _check(key, *three_proc[key], model_dirs)


@pytest.mark.timeout(600)
@pytest.mark.skipif(not os.environ.get("TESSERA_TEST_4PROC"), reason="4 processes: set TESSERA_TEST_4PROC=1")
def test_four_process_gpt2_dp_x_tp(model_dirs):
    """gpt2's Conv1D TP under data parallelism: DP x uneven TP in one stage, and a DP stage feeding a TP one."""
    variants = {
        "gpt2/dp2xtp2(3:1)": _plan(
            [stage(0, N, [0, 1, 2, 3], dp=2, tp=2, shares=(5, 3), ratios=(0.75, 0.25))], micro=2
        ),
        "gpt2/mixed-dp2(3:1)->tp2": _plan(
            [stage(0, 2, [0, 1], dp=2, shares=(6, 2)), stage(2, N, [2, 3], tp=2)], micro=4
        ),
    }
    for key, (p, r) in _run(variants, model_dirs).items():
        _check(key, p, r, model_dirs)

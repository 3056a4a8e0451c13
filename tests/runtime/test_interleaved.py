"""Interleaved 1F1B (``Plan.virtual_stages``) on ``ScheduleInterleaved1F1B`` against the single-process
reference, and checkpoints crossing between interleaved and plain pipelines.

Two ranks, two stages of two chunks each (four virtual stages), four micro-batches: loss and every gradient
within 1e-5 relative (fp32) of the full-batch reference, for the zoo's tiny GPT (its embedding/head tie crosses
the ranks: chunk 0 of stage 0 and chunk 1 of stage 1), tiny LLaMA and a tiny Hugging Face llama. A plan with
more than one virtual stage runs only on torch's schedule, so a pass is the interleaved schedule's.
"""

from __future__ import annotations

import pytest
import torch
from helpers import max_rel, plan, reference, rel, run_on_gloo, stage
from hf_models import N_DECODER, hf_reference, save_tiny
from models import factory, n_layers

from tessera.nn.hf import HFModel
from tessera.plan import PlanError
from tessera.runtime import RunOptions, launch_many
from tessera.runtime.engine import Trainer

TOL = 1e-5
STEPS = 2
NAMES = ("gpt-tiny", "llama-tiny")


def _interleaved(name: str, n: int, cut: int, v: int = 2):
    return plan(name, [stage(0, cut, [0]), stage(cut, n, [1])], micro=4, virtual_stages=v)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("interleaved")
    hf_dir = save_tiny("llama", root / "llama")
    opts = dict(pg_timeout_s=60, watchdog_s=120)
    jobs = []
    for name in NAMES:
        n = n_layers(name)
        jobs.append(
            (
                _interleaved(name, n, 3),
                RunOptions(steps=STEPS, model=factory(name), capture_grads=True, **opts),
            )
        )
    hf = _interleaved("hf", N_DECODER + 2, 2)  # chunks [0,1) [3,4) on rank 0, [1,3) [4,5) on rank 1
    jobs.append((hf, RunOptions(steps=STEPS, model=HFModel(str(hf_dir)), capture_grads=True, **opts)))
    # checkpoints: interleaved -> plain -> interleaved against an uninterrupted plain run (gpt-tiny)
    n = n_layers("gpt-tiny")
    plain = _interleaved("gpt-tiny", n, 3, v=1)
    inter = _interleaved("gpt-tiny", n, 3)
    a, b = str(root / "a"), str(root / "b")
    ck = dict(model=factory("gpt-tiny"), learning_rate=3e-3, **opts)
    jobs += [
        (plain, RunOptions(steps=5, **ck)),
        (inter, RunOptions(steps=2, checkpoint_dir=a, **ck)),
        (plain, RunOptions(steps=4, resume_from=a, checkpoint_dir=b, **ck)),
        (inter, RunOptions(steps=5, resume_from=b, **ck)),
    ]
    results = launch_many(jobs)
    return hf_dir, [p for p, _ in jobs], results


@pytest.mark.timeout(300)
@pytest.mark.parametrize("index", [0, 1, 2], ids=[*NAMES, "hf-llama"])
def test_interleaved_matches_single_process_reference(runs, index):
    hf_dir, plans, results = runs
    p, result = plans[index], results[index]
    assert p.virtual_stages == 2
    if index < len(NAMES):
        losses, grads = reference(factory(NAMES[index]), p, steps=STEPS)
    else:
        losses, grads = hf_reference(hf_dir, p, steps=STEPS)
    loss_err = max(rel(x, y) for x, y in zip(result.losses, losses, strict=True))
    grad_err = max_rel(result.grads, grads)
    print(f"interleaved {index}: loss {loss_err:.2e} grad {grad_err:.2e}")
    assert loss_err < TOL, (result.losses, losses)
    assert grad_err < TOL


@pytest.mark.timeout(300)
def test_checkpoints_cross_between_interleaved_and_plain(runs):
    _, _, results = runs
    full, first, second, third = results[3:7]
    assert [r.step for r in second.records] == [2, 3] and [r.step for r in third.records] == [4]
    resumed = first.losses + second.losses + third.losses
    worst = max(rel(x, y) for x, y in zip(resumed, full.losses, strict=True))
    assert len(resumed) == 5 and worst < 1e-5, (resumed, full.losses)


def test_plan_torch_cannot_run_is_refused_naming_virtual_stages():
    n = n_layers("gpt-tiny")
    p = plan("gpt-tiny", [stage(0, 3, [0, 1], dp=2), stage(3, n, [2])], micro=4, virtual_stages=2)
    with pytest.raises(PlanError, match="virtual_stages.*DP = TP = 1"):
        Trainer(p, 0, factory("gpt-tiny"), seed=0, learning_rate=1e-3, device=torch.device("cpu"))


def _evaluate_worker(rank: int, out: dict) -> None:
    from tessera.runtime import SyntheticData

    n = n_layers("gpt-tiny")
    for v in (1, 2):
        p = _interleaved("gpt-tiny", n, 3, v=v)
        t = Trainer(p, rank, factory("gpt-tiny"), seed=0, learning_rate=1e-3, device=torch.device("cpu"))
        inputs, targets = SyntheticData(0).batch(t.stage.module, 0, p.global_batch, p.seq_len)
        out[(v, rank)] = (t.evaluate(inputs, targets), type(t.runner.schedule).__name__, len(t.chunks))
        t.close()


@pytest.mark.timeout(120)
def test_interleaved_runs_torch_schedule_and_evaluates_like_plain():
    got = run_on_gloo(_evaluate_worker)
    assert got[(2, 0)][1:] == got[(2, 1)][1:] == ("ScheduleInterleaved1F1B", 2)
    assert got[(1, 1)][1:] == ("Schedule1F1B", 1)
    assert got[(2, 1)][0] == pytest.approx(got[(1, 1)][0], rel=1e-6) and got[(2, 0)][0] == 0.0

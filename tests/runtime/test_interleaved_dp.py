"""Interleaved 1F1B (and torch's plain 1F1B) with data parallelism: d pipeline replicas on torch's schedules,
each on its own process group, gradients summed across replicas by Tessera's DP sync after the step.

Four gloo ranks, two stages of two ranks each (DP = 2), two chunks per stage (four virtual stages), four
micro-batches: loss and every gradient within 1e-5 relative (fp32) of the single-process full-batch reference,
for the zoo's tiny GPT (its embedding/head tie crosses stages and replicas), tiny LLaMA, uneven batch shares
12:4 (each replica's micro-batch pieces still one shape), ZeRO-2 (Tessera's reduce-to-owner: FSDP2 is not used
under torch's schedule) and a plain (v = 1) DP pipeline asked onto torch's schedule; a checkpoint crosses from
interleaved to plain and back. Plans torch cannot run are refused before any process group is touched, the
PlanError naming the field at fault.
"""

from __future__ import annotations

import os

import pytest
import torch
from helpers import max_rel, plan, reference, rel, run_on_gloo, stage
from models import factory, n_layers

from tessera.plan import PlanError
from tessera.runtime import RunOptions, launch_many
from tessera.runtime.engine import Trainer

TOL = 1e-5
STEPS = 2


def _dp_pipeline(name: str, cut: int, *, v: int = 2, batch: int = 8, shares=(), **kw):
    """Stage 0 on ranks 0, 1 and stage 1 on ranks 2, 3: replica 0 = ranks (0, 2), replica 1 = (1, 3)."""
    n = n_layers(name)
    return plan(
        name,
        [stage(0, cut, [0, 1], dp=2, shares=shares), stage(cut, n, [2, 3], dp=2, shares=shares)],
        batch=batch,
        micro=4,
        virtual_stages=v,
        **kw,
    )


CASES = {
    "gpt-tiny": ("gpt-tiny", _dp_pipeline("gpt-tiny", 3)),
    "llama-tiny": ("llama-tiny", _dp_pipeline("llama-tiny", 3)),
    "gpt-uneven-12-4": ("gpt-tiny", _dp_pipeline("gpt-tiny", 3, batch=16, shares=(12, 4))),
    "gpt-zero2": ("gpt-tiny", _dp_pipeline("gpt-tiny", 3, zero=2)),
    "gpt-plain-torch": ("gpt-tiny", _dp_pipeline("gpt-tiny", 3, v=1)),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("interleaved_dp")
    opts = dict(pg_timeout_s=60, watchdog_s=150)
    jobs = [
        (p, RunOptions(steps=STEPS, model=factory(name), capture_grads=True, **opts))
        for name, p in CASES.values()
    ]
    # checkpoints: interleaved DP -> plain DP -> interleaved DP against an uninterrupted plain DP run
    inter, flat = _dp_pipeline("gpt-tiny", 3), _dp_pipeline("gpt-tiny", 3, v=1)
    a, b = str(root / "a"), str(root / "b")
    ck = dict(model=factory("gpt-tiny"), learning_rate=3e-3, **opts)
    jobs += [
        (flat, RunOptions(steps=5, **ck)),
        (inter, RunOptions(steps=2, checkpoint_dir=a, **ck)),
        (flat, RunOptions(steps=4, resume_from=a, checkpoint_dir=b, **ck)),
        (inter, RunOptions(steps=5, resume_from=b, **ck)),
    ]
    old = os.environ.get("TESSERA_PIPELINE_IMPL")
    os.environ["TESSERA_PIPELINE_IMPL"] = "torch"  # the plain DP pipeline onto torch's 1F1B (workers inherit)
    try:
        return launch_many(jobs)
    finally:
        if old is None:
            os.environ.pop("TESSERA_PIPELINE_IMPL")
        else:
            os.environ["TESSERA_PIPELINE_IMPL"] = old


@pytest.mark.timeout(400)
@pytest.mark.parametrize("key", list(CASES))
def test_dp_pipeline_on_torch_schedule_matches_single_process_reference(runs, key):
    name, p = CASES[key]
    result = runs[list(CASES).index(key)]
    losses, grads = reference(factory(name), p, steps=STEPS)
    loss_err = max(rel(x, y) for x, y in zip(result.losses, losses, strict=True))
    grad_err = max_rel(result.grads, grads)
    print(f"{key}: loss {loss_err:.2e} grad {grad_err:.2e}")
    assert len(result.losses) == STEPS
    assert loss_err < TOL, (result.losses, losses)
    assert grad_err < TOL


@pytest.mark.timeout(400)
def test_checkpoints_cross_between_interleaved_and_plain_dp_pipelines(runs):
    full, first, second, third = runs[len(CASES) :]
    assert [r.step for r in second.records] == [2, 3] and [r.step for r in third.records] == [4]
    resumed = first.losses + second.losses + third.losses
    worst = max(rel(x, y) for x, y in zip(resumed, full.losses, strict=True))
    assert len(resumed) == 5 and worst < 1e-5, (resumed, full.losses)


def _schedule_worker(rank: int, out: dict) -> None:
    """Which runner and schedule each plan gets, the replica group, and the evaluation loss share."""
    from torch.distributed import get_world_size

    from tessera.runtime import SyntheticData
    from tessera.runtime.torch_pipeline import TorchPipelineRunner

    cases = {"v2": ("auto", 2), "v1-auto": ("auto", 1), "v1-torch": ("torch", 1)}
    for key, (impl, v) in cases.items():
        os.environ["TESSERA_PIPELINE_IMPL"] = impl
        p = _dp_pipeline("gpt-tiny", 3, v=v)
        t = Trainer(p, rank, factory("gpt-tiny"), seed=0, learning_rate=1e-3, device=torch.device("cpu"))
        inputs, targets = SyntheticData(0).batch(t.stage.module, 0, p.global_batch, p.seq_len)
        loss = t.evaluate(inputs, targets)
        torch_path = isinstance(t.runner, TorchPipelineRunner)
        schedule = type(t.runner.schedule).__name__ if torch_path else type(t.runner).__name__
        group = get_world_size(t.runner.group) if torch_path else None
        out[(key, rank)] = (schedule, group, t.fsdp, loss)
        t.close()


@pytest.mark.timeout(180)
def test_dp_pipelines_take_torch_schedule_per_replica_group_and_evaluate_alike():
    got = run_on_gloo(_schedule_worker, world=4)
    for rank in range(4):
        assert got[("v2", rank)][:3] == ("ScheduleInterleaved1F1B", 2, False)
        assert got[("v1-auto", rank)][:2] == ("PipelineRunner", None)  # auto keeps Tessera's transport
        assert got[("v1-torch", rank)][:2] == ("Schedule1F1B", 2)
    for key in ("v2", "v1-auto", "v1-torch"):
        assert got[(key, 0)][3] == got[(key, 1)][3] == 0.0  # the first stage reports no loss
    total = {key: got[(key, 2)][3] + got[(key, 3)][3] for key in ("v2", "v1-auto", "v1-torch")}
    assert total["v1-auto"] > 0
    assert total["v2"] == pytest.approx(total["v1-auto"], rel=1e-6)
    assert total["v1-torch"] == pytest.approx(total["v1-auto"], rel=1e-6)


def _refused(p) -> PlanError:
    with pytest.raises(PlanError) as err:
        Trainer(p, 0, factory("gpt-tiny"), seed=0, learning_rate=1e-3, device=torch.device("cpu"))
    return err.value


def test_uneven_dp_degrees_or_tp_are_refused_naming_virtual_stages():
    n = n_layers("gpt-tiny")
    uneven = plan("gpt-tiny", [stage(0, 3, [0, 1], dp=2), stage(3, n, [2])], micro=4, virtual_stages=2)
    e = _refused(uneven)
    assert e.field == "virtual_stages" and "dp_degree [2, 1]" in str(e)
    tp = plan("gpt-tiny", [stage(0, 3, [0, 1], tp=2), stage(3, n, [2, 3], tp=2)], micro=4, virtual_stages=2)
    e = _refused(tp)
    assert e.field == "virtual_stages" and "tp_degree [2, 2]" in str(e)


def test_replica_ranks_must_increase_along_the_pipeline():
    n = n_layers("gpt-tiny")
    p = plan("gpt-tiny", [stage(0, 3, [2, 3], dp=2), stage(3, n, [0, 1], dp=2)], micro=4, virtual_stages=2)
    e = _refused(p)
    assert e.field == "virtual_stages" and "increasing ranks" in str(e) and "[2, 0]" in str(e)


def test_batch_shares_torch_buffers_cannot_take_are_refused_naming_the_field():
    # 6:2 over 4 micro-batches of 2: replica 0 gets pieces of 2, 1, 2, 1 samples
    e = _refused(_dp_pipeline("gpt-tiny", 3, shares=(6, 2)))
    assert e.field == "stages[0].batch_shares" and "[2, 1, 2, 1]" in str(e)
    # even shares of 12 over 4 micro-batches of 3: pieces of 2 and 1
    e = _refused(_dp_pipeline("gpt-tiny", 3, batch=12))
    assert e.field == "global_batch" and "2 virtual stages" in str(e) and "[2, 1, 2, 1]" in str(e)
    # the stages split the batch differently: a replica would not be one pipeline
    n = n_layers("gpt-tiny")
    p = plan(
        "gpt-tiny",
        [stage(0, 3, [0, 1], dp=2, shares=(12, 4)), stage(3, n, [2, 3], dp=2, shares=(8, 8))],
        batch=16,
        micro=4,
        virtual_stages=2,
    )
    e = _refused(p)
    assert e.field == "stages[1].batch_shares" and "[8, 8]" in str(e)


def test_even_and_uneven_shares_torch_can_run_pass_the_plan_checks():
    """Without a process group the only refusal left is the world's: the plan itself is accepted."""
    for p in (_dp_pipeline("gpt-tiny", 3), _dp_pipeline("gpt-tiny", 3, batch=16, shares=(12, 4))):
        e = _refused(p)
        assert e.field == "virtual_stages" and "exactly the plan's devices" in str(e)

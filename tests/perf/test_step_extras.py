"""Training extras in the estimate: gradient clipping and validation passes (``tessera.perf.extras``)."""

from __future__ import annotations

import json
import math
import statistics

import pytest
from typer.testing import CliRunner

from tessera.cli import app
from tessera.hardware import get_gpu
from tessera.jobs import JobSpec
from tessera.models.zoo import get_spec
from tessera.perf.compute import curve_for
from tessera.perf.costmodel import CostModel
from tessera.perf.estimate import (
    CLIP_NORM_BYTES_PER_ELEM,
    CLIP_SCALE_BYTES_PER_ELEM,
    Topology,
    boundary_s,
    clip_s,
    estimate_plan,
    forward_pass_s,
    stage_cost,
)
from tessera.perf.extras import StepExtras
from tessera.plan import Device, Plan, Stage, simple_plan

CLIP = StepExtras(grad_clip=True)
GPU = "A100-80GB"


@pytest.fixture(scope="module")
def gpt2():
    return get_spec("gpt2")


def _plan(spec, **kw) -> Plan:
    kw.setdefault("global_batch", 16)
    kw.setdefault("gpu_type", GPU)
    return simple_plan(spec.name, n_layers=spec.n_layers, seq_len=spec.seq_len, **kw)


def _bw(gpu: str) -> float:
    g = get_gpu(gpu)
    return g.memory_bandwidth_Bps * curve_for(g).memory_fraction


# ------------------------------------------------------------------------------------------- no extras
@pytest.mark.parametrize("kw", [{}, {"dp": 2, "zero": 1}, {"tp": 2}, {"pp": 2, "micro_batches": 4}])
def test_no_extras_is_the_plain_estimate(gpt2, kw):
    plan = _plan(gpt2, **kw)
    plain = estimate_plan(plan, gpt2)
    assert estimate_plan(plan, gpt2, extras=None) == plain
    assert estimate_plan(plan, gpt2, extras=StepExtras()) == plain  # an empty StepExtras prices nothing
    assert plain.clip_s == plain.validation_s == 0.0
    assert plain.iteration_time_s == pytest.approx(plain.compute_s + plain.comm_s + plain.bubble_s)


def test_extras_add_into_the_iteration_and_keep_the_plan_breakdown(gpt2):
    plan = _plan(gpt2, dp=2, micro_batches=2)
    plain = estimate_plan(plan, gpt2)
    e = estimate_plan(plan, gpt2, extras=StepExtras(grad_clip=True, val_every_steps=5, val_batches=2))
    assert e.clip_s > 0 and e.validation_s > 0
    assert (e.compute_s, e.comm_s, e.bubble_s) == (plain.compute_s, plain.comm_s, plain.bubble_s)
    assert e.iteration_time_s == pytest.approx(plain.iteration_time_s + e.clip_s + e.validation_s)
    assert e.step_time_s == pytest.approx(plain.iteration_time_s + e.clip_s)
    assert e.samples_per_s == pytest.approx(plan.global_batch / e.iteration_time_s)


# ------------------------------------------------------------------------------------------- clipping
def test_clipping_on_one_device_is_two_memory_bound_passes(gpt2):
    """One rank, no collective: the norm pass over every gradient and the scaling pass, at the GPU's
    achievable memory bandwidth."""
    plan = _plan(gpt2)
    params = sum(layer.params for layer in gpt2.layers)
    want = (CLIP_NORM_BYTES_PER_ELEM + CLIP_SCALE_BYTES_PER_ELEM) * params / _bw(GPU)
    assert estimate_plan(plan, gpt2, extras=CLIP).clip_s == pytest.approx(want)


def test_clipping_grows_with_the_local_gradient_bytes(gpt2):
    big_spec = get_spec("gpt2-medium")
    t_small = estimate_plan(_plan(gpt2), gpt2, extras=CLIP).clip_s
    t_big = estimate_plan(_plan(big_spec), big_spec, extras=CLIP).clip_s
    ratio = sum(x.params for x in big_spec.layers) / sum(x.params for x in gpt2.layers)
    assert t_big == pytest.approx(t_small * ratio)
    # a slower memory costs more for the same gradients
    assert estimate_plan(_plan(gpt2, gpu_type="V100-32GB"), gpt2, extras=CLIP).clip_s > t_small


def test_clipping_shrinks_per_rank_under_zero_and_tp_sharding(gpt2):
    dp = estimate_plan(_plan(gpt2, dp=4), gpt2, extras=CLIP).clip_s
    zero = estimate_plan(_plan(gpt2, dp=4, zero=1), gpt2, extras=CLIP).clip_s
    fsdp = estimate_plan(_plan(gpt2, dp=4, zero=3), gpt2, extras=CLIP).clip_s
    tp = estimate_plan(_plan(gpt2, tp=4), gpt2, extras=CLIP).clip_s
    pp = estimate_plan(_plan(gpt2, pp=2, micro_batches=2), gpt2, extras=CLIP).clip_s
    one = estimate_plan(_plan(gpt2), gpt2, extras=CLIP).clip_s
    # plain DP: replica 0 counts every gradient and every replica scales its whole copy, plus the all-reduce
    assert dp > one
    assert zero < dp and fsdp < zero  # ZeRO: ~1/dp counted; FSDP also scales only its shard
    assert tp < one and pp < one  # a TP rank's shard, a stage's layers


def test_the_norm_all_reduce_is_priced_on_the_plans_links(gpt2):
    """Two ranks on two nodes all-reduce the norm over the network: slower than over NVLink in one node."""
    one_node = _plan(gpt2, dp=2, zero=1)
    two_nodes = one_node.with_(
        stages=(one_node.stages[0].__class__(**{
            **one_node.stages[0].__dict__,
            "devices": tuple(Device(d.rank, d.gpu_type, node=f"n{d.rank}") for d in one_node.stages[0].devices),
        }),)
    )  # fmt: skip
    near = clip_s(one_node, gpt2, Topology())
    far = clip_s(two_nodes, gpt2, Topology())
    assert far > near > 0


# ------------------------------------------------------------------------------------------- validation
@pytest.mark.parametrize("kw", [{}, {"dp": 2}, {"tp": 2}, {"pp": 2, "micro_batches": 4}])
def test_validation_is_forward_time_times_batches_over_every(gpt2, kw):
    plan = _plan(gpt2, **kw)
    topo, cost = Topology(), CostModel()
    costs = [stage_cost(plan, gpt2, i, topo, cost) for i in range(plan.n_stages)]
    p2p = [
        boundary_s(plan, gpt2, a, b, topo, cost) for a, b in zip(plan.stages, plan.stages[1:], strict=False)
    ]
    fwd = forward_pass_s(plan, costs, p2p)
    e = estimate_plan(plan, gpt2, extras=StepExtras(val_every_steps=10, val_batches=3))
    assert e.validation_s == pytest.approx(fwd * 3 / 10)
    # with the run's length: ceil(total / every) validations (the last step validates too)
    e = estimate_plan(plan, gpt2, extras=StepExtras(val_every_steps=10, val_batches=3, total_steps=25))
    assert e.validation_s == pytest.approx(fwd * 3 * 3 / 25)
    # a forward-only pass is cheaper than a training step's pipeline, and costs at least every stage's forward
    plain = estimate_plan(plan, gpt2)
    assert sum(c.fwd_s for c in costs) <= fwd < plain.iteration_time_s


def test_forward_pass_of_a_pipeline_fills_once():
    """Stages of 1 and 2 s per micro-batch forward, 4 micro-batches, one 0.5 s boundary: 4 × 2 + 1 + 0.5."""
    from tessera.perf.estimate import StageCost

    def c(f: float) -> StageCost:
        return StageCost(fwd_s=f, bwd_s=9.0, tp_comm_s=0.0, dp_sync_s=0.0, peak_bytes=(), device_bytes=(),
                         feasible=True)  # fmt: skip

    plan = Plan("gpt2", 8, 1024, (Stage(0, 6, (Device(0, GPU),)), Stage(6, 14, (Device(1, GPU),))), 4)
    assert forward_pass_s(plan, [c(1.0), c(2.0)], [0.5]) == pytest.approx(9.5)


# ------------------------------------------------------------------------------------------- from the job spec
def _job(**kw) -> JobSpec:
    return JobSpec(**{"model": "gpt2", "global_batch": 8, "steps": 100, **kw})


def test_extras_of_a_job_spec_count_the_runtimes_validation_batches():
    assert not StepExtras.of_job(_job())  # synthetic data, no clipping: nothing
    assert StepExtras.of_job(_job(grad_clip_norm=1.0)).grad_clip
    data = {"path": "x.txt", "val_samples": 40}
    e = StepExtras.of_job(_job(data=data))
    assert (e.val_batches, e.val_every_steps, e.total_steps) == (5, 10, 100)  # 40 // 8; ~10 per run
    e = StepExtras.of_job(_job(data={**data, "val_samples": 3, "val_every_steps": 7}))
    assert (e.val_batches, e.val_every_steps) == (1, 7)  # fewer than a batch: one batch, wrapped
    assert e.validations_per_step == pytest.approx(math.ceil(100 / 7) / 100)
    frac = {"path": "x.txt", "val_fraction": 0.1}
    assert StepExtras.of_job(_job(data=frac)).val_batches == 1  # dataset size unknown: the runtime's least
    assert StepExtras.of_job(_job(data=frac), dataset_sequences=1000).val_batches == 12  # 100 // 8
    assert not StepExtras.of_job(_job(data={"path": "x.txt", "val_every_steps": 5}))  # no held-out split
    with pytest.raises(ValueError, match="val_every_steps"):
        StepExtras(val_batches=2)


def test_the_runtimes_count_of_validation_batches_is_the_same(tmp_path):
    """``TokenizedData.val_batch_count`` on a real byte-level dataset agrees with ``StepExtras.of_job``."""
    from tessera.runtime.dataset import TokenizedData

    text = tmp_path / "t.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 400)
    seq = 16
    for val in ({"val_samples": 40}, {"val_samples": 5}, {"val_fraction": 0.25}):
        data = TokenizedData(path=str(text), tokenizer="bytes", cache_dir=str(tmp_path / "c"), **val)
        runtime = data.val_batch_count(8, seq)
        n = (len(text.read_bytes()) - 1) // seq
        spec = _job(data={"path": str(text), "tokenizer": "bytes", **val})
        assert StepExtras.of_job(spec, dataset_sequences=n).val_batches == runtime, val


# ------------------------------------------------------------------------------------------- the CLI
def test_cli_estimate_shows_the_extra_seconds():
    base = ["estimate", "--model", "gpt2", "--gpu", GPU, "--dp", "2", "--micro-batch", "4", "--json"]
    r0 = CliRunner().invoke(app, base)
    r1 = CliRunner().invoke(
        app, [*base, "--grad-clip-norm", "1", "--val-every-steps", "10", "--val-samples", "32"]
    )
    assert r0.exit_code == 0 and r1.exit_code == 0, r1.output
    a, b = json.loads(r0.output), json.loads(r1.output)
    assert a["clip_s"] == a["validation_s"] == 0.0
    assert b["clip_s"] > 0 and b["validation_s"] > 0
    assert b["iteration_time_s"] == pytest.approx(a["iteration_time_s"] + b["clip_s"] + b["validation_s"])
    bad = CliRunner().invoke(app, [*base, "--val-every-steps", "10"])
    assert bad.exit_code != 0 and "--val-samples" in bad.output


# ------------------------------------------------------------------------------------------- a real run
@pytest.mark.timeout(240)
def test_a_real_run_spends_what_the_estimate_says_clipping_costs():
    """gpt-tiny on one CPU process, with and without clipping: the runtime times the clip inside the step's
    comm (norm + all-reduce + scaling); the estimator prices a positive clip, and the measured one is positive
    and of its order (a loose factor: the CPU's per-tensor launches are not priced, the host is shared)."""
    from tessera.runtime import RunOptions, launch

    seq = 64
    spec = get_spec("gpt-tiny", seq_len=seq)
    plan = simple_plan("gpt-tiny", n_layers=spec.n_layers, global_batch=8, seq_len=seq, precision="fp32")
    opts = dict(steps=8, pg_timeout_s=60, watchdog_s=120)
    plain = launch(plan, RunOptions(**opts))
    clipped = launch(plan, RunOptions(grad_clip_norm=0.05, **opts))  # well under the norm: every step clips

    def comm(result) -> float:  # steps 2.. (warm), the one stage's comm
        return statistics.median(r.stages[0].comm_s for r in result.records[2:])

    measured = comm(clipped) - comm(plain)
    predicted = estimate_plan(plan, spec, extras=StepExtras(grad_clip=True)).clip_s
    print(f"clip: measured {measured * 1e3:.3f} ms, estimated {predicted * 1e3:.3f} ms")
    assert all(r.grad_norm is not None and r.grad_norm > 0.05 for r in clipped.records)
    assert predicted > 0 and measured > 0
    assert 0.05 < predicted / measured < 20


# ------------------------------------------------------------------------------------------- the speed source
def test_the_speed_source_prices_a_jobs_extras_under_its_own_configuration():
    """A job that clips and validates is its own configuration, slower on every Cell, DP-only figure and tuned
    plan than the same training without them; a job without them keeps the configuration (and figures) it
    had."""
    from tessera.hardware import get_cluster
    from tessera.scheduler.speed import SpeedSource, config_of
    from tessera.scheduler.state import JobConfig

    tiny = {"model": "gpt-tiny", "seq_len": 64, "precision": "fp32", "global_batch": 8, "steps": 400}
    plain = config_of(JobSpec(**tiny))
    assert plain == JobConfig("gpt-tiny", 8, seq_len=64, precision="fp32")  # as before the extras
    extra = config_of(
        JobSpec(**tiny, grad_clip_norm=1.0, data={"path": "x.txt", "val_samples": 32, "val_every_steps": 20})
    )
    assert (extra.grad_clip, extra.val_every_steps, extra.val_batches) == (True, 20, 4)
    assert extra != plain and extra.slug() != plain.slug()
    src = SpeedSource(get_cluster("local"))
    gpus = (("A100-40GB", 2),)
    assert 0 < src.cell(extra, gpus, 1) < src.cell(plain, gpus, 1)
    assert 0 < src.dp(extra, "A100-40GB", 2) < src.dp(plain, "A100-40GB", 2)
    assert 0 < src.true(extra, gpus) < src.true(plain, gpus)
    tuned = src.job(extra).tuned(gpus, 1)
    assert tuned is not None and tuned.estimate.clip_s > 0 and tuned.estimate.validation_s > 0
    # the Cell's rate is its plan's iteration with the extras (validation as one every 20 steps)
    cell = src.job(extra).cell(gpus, 1)
    with_extras = estimate_plan(cell.plan, src.job(extra).spec, get_cluster("local"), cost=src.job(extra).cost,
                                extras=StepExtras(grad_clip=True, val_every_steps=20, val_batches=4))  # fmt: skip
    assert src.cell(extra, gpus, 1) == pytest.approx(1.0 / with_extras.iteration_time_s, rel=1e-9)
    # ranked with the extras, as the planner ranks them: the same Cell plan as the planner's own estimator's
    from tessera.planning.cells import CellEstimator, CellShape

    js = src.job(extra)
    planner = CellEstimator(js.spec, js.settings, get_cluster("local"), js.cost, recompute=extra.recompute,
                            extras=js.extras)  # fmt: skip
    mine = planner.estimate(CellShape.of(gpus, 1))
    assert mine is not None and mine.plan == cell.plan
    assert mine.iteration_time_s == pytest.approx(cell.iteration_time_s, rel=1e-9)


def _time_steps_and_evaluations(rank: int, out: dict) -> None:
    """In a one-rank gloo group: the runtime's training step and its validation pass (``Trainer.evaluate``,
    forward-only) on the same gpt-tiny batches, medians after two warm-up rounds."""
    import time

    import torch

    from tessera.runtime import SyntheticData, Trainer, ZooModel

    plan = simple_plan("gpt-tiny", n_layers=6, global_batch=8, seq_len=64, precision="fp32")
    trainer = Trainer(
        plan, rank, ZooModel("gpt-tiny"), seed=0, learning_rate=1e-3, device=torch.device("cpu")
    )
    data = SyntheticData(0)
    steps, evals = [], []
    for i in range(8):
        x, y = data.batch(trainer.stage.module, i, plan.global_batch, plan.seq_len)
        t0 = time.perf_counter()
        trainer.step(i, x, y)
        t1 = time.perf_counter()
        trainer.evaluate(x, y)
        t2 = time.perf_counter()
        steps.append(t1 - t0)
        evals.append(t2 - t1)
    out["step_s"] = statistics.median(steps[2:])
    out["eval_s"] = statistics.median(evals[2:])


@pytest.mark.timeout(240)
def test_a_real_validation_pass_costs_what_the_estimate_says_against_a_step():
    """gpt-tiny on one CPU process: the runtime's forward-only validation pass takes a fraction of a training
    step, and the estimator's forward pass is that fraction of its iteration, within a loose factor (ratios
    measured back to back in one process, so the shared host's load cancels; no wall-clock assertion)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "runtime"))
    from helpers import run_on_gloo

    got = run_on_gloo(_time_steps_and_evaluations, world=1)
    spec = get_spec("gpt-tiny", seq_len=64)
    plan = simple_plan("gpt-tiny", n_layers=spec.n_layers, global_batch=8, seq_len=64, precision="fp32")
    e = estimate_plan(plan, spec, extras=StepExtras(val_every_steps=1, val_batches=1))
    predicted, measured = e.validation_s / e.step_time_s, got["eval_s"] / got["step_s"]
    print(f"validation pass / step: measured {measured:.3f} ({got['eval_s'] * 1e3:.2f} ms / "
          f"{got['step_s'] * 1e3:.2f} ms), estimated {predicted:.3f}")  # fmt: skip
    assert 0 < measured < 1 and 0 < predicted < 1
    assert 0.33 < predicted / measured < 3.0

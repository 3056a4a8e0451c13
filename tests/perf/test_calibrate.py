"""Calibration moves an estimate toward a measurement: a real run, and synthetic telemetry with known factors.

Synthetic telemetry is written by the estimator itself under "true" scales, so calibration from an empty cost
model must recover those scales; the real run (2-process data parallel on gloo) checks that the numbers the
runtime actually writes are read like for like.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tessera.cli import app
from tessera.models.zoo import get_spec
from tessera.perf.calibrate import calibrate, compute_includes_waits, parse_telemetry, read_telemetry
from tessera.perf.costmodel import CostModel
from tessera.perf.estimate import Topology, estimate_plan, stage_cost
from tessera.plan import Device, Plan, Stage, simple_plan

SEQ = 64
SPEC = get_spec("gpt-tiny", seq_len=SEQ)


def _dp_plan(dp: int = 2) -> Plan:
    return simple_plan("gpt-tiny", n_layers=SPEC.n_layers, global_batch=8, seq_len=SEQ, dp=dp)


def _hetero_pipeline() -> Plan:
    """Two stages of DP 2 on different GPU types: Tessera's own pipeline, so stage compute is busy time."""
    a = tuple(Device(rank=r, gpu_type="A100-80GB", local_index=r) for r in (0, 1))
    v = tuple(Device(rank=r, gpu_type="V100-32GB", local_index=r) for r in (2, 3))
    return Plan(
        model="gpt-tiny",
        global_batch=8,
        seq_len=SEQ,
        stages=(Stage(0, 3, a, dp_degree=2), Stage(3, SPEC.n_layers, v, dp_degree=2)),
        micro_batches=2,
        model_layers=SPEC.n_layers,
    )


def _rows(plan: Plan, truth: CostModel, *, steps: int = 8, warmup_slowdown: float = 5.0) -> list[str]:
    """Telemetry the runtime would write if the estimator under ``truth`` were exact: iteration time, and per
    stage the busy compute and the DP sync as comm. The warm-up steps are much slower (they must be dropped);
    one step is skipped with an absurd time (it must be dropped too); the rest carry ±1 % jitter."""
    topo = Topology()
    it = estimate_plan(plan, SPEC, topo, cost=truth).iteration_time_s
    costs = [stage_cost(plan, SPEC, i, topo, truth) for i in range(plan.n_stages)]
    rows = []
    for step in range(steps):
        jitter = 1.0 + 0.01 * math.sin(step)
        slow = warmup_slowdown if step < 2 else 1.0
        skipped = step == 4
        f = jitter * slow * (100.0 if skipped else 1.0)
        rows.append(
            json.dumps(
                {
                    "step": step,
                    "loss": 4.0,
                    "iter_time_s": it * f,
                    "samples_per_s": plan.global_batch / (it * f),
                    "stages": [
                        {
                            "stage": i,
                            "compute_s": (plan.micro_batches * c.time_s + getattr(c, "optimizer_s", 0.0)) * f,
                            "comm_s": c.dp_sync_s * f,
                        }
                        for i, c in enumerate(costs)
                    ],
                    "peak_memory_bytes": {},
                    "skipped": skipped,
                }
            )
        )
    return rows


def _write(path: Path, rows: list[str]) -> Path:
    path.write_text("\n".join(rows) + "\n")
    return path


# ------------------------------------------------------------------------------------------- the real run
@pytest.mark.timeout(120)
def test_real_run_calibration_moves_estimate_onto_measurement(tmp_path):
    from tessera.runtime import RunOptions, launch

    plan = _dp_plan(2)
    tel = tmp_path / "telemetry.jsonl"
    launch(plan, RunOptions(steps=6, telemetry_path=str(tel), pg_timeout_s=60, watchdog_s=90))
    report, cost = calibrate(plan, SPEC, tel)
    measured = report.measured.iteration_time_s
    before, after = report.before.iteration_time_s, report.after.iteration_time_s
    print(
        f"real run: before {before * 1e3:.2f} ms, after {after * 1e3:.2f} ms, measured {measured * 1e3:.2f} ms"
    )
    print(f"scales: compute {report.compute_scale_after}, comm {report.comm_scale_after}")
    assert report.measured.steps == (2, 3, 4, 5)  # the first two steps are warm-up
    assert abs(after - measured) < abs(before - measured)
    assert abs(after - measured) / measured < 0.10
    # the stage's busy time is matched too, and the cost model now carries the factors for the plan's kinds
    assert report.stages_after[0].busy_s == pytest.approx(report.measured.stage_compute_s[0], rel=0.10)
    assert set(cost.compute_scale) == {"cpu"} and set(cost.comm_scale) == {"loopback"}
    again = estimate_plan(plan, SPEC, cost=cost).iteration_time_s
    assert again == pytest.approx(after)


# ------------------------------------------------------------------------------------------- synthetic
def test_known_slowdown_is_recovered(tmp_path):
    plan = _dp_plan(2)
    truth = CostModel(compute_scale={"cpu": 2.0}, comm_scale={"loopback": 3.0})
    tel = _write(tmp_path / "t.jsonl", _rows(plan, truth))
    report, cost = calibrate(plan, SPEC, tel)
    assert cost.compute_scale["cpu"] == pytest.approx(2.0, rel=0.02)
    assert cost.comm_scale["loopback"] == pytest.approx(3.0, rel=0.05)
    assert report.measured.steps == (2, 3, 5, 6, 7)  # warm-up 0-1 and the skipped step 4 dropped
    assert report.error_before < -0.4 and abs(report.error_after) < 1e-3
    assert report.busy_observed and report.saved_to is None


def test_heterogeneous_pipeline_fits_each_device_type(tmp_path):
    plan = _hetero_pipeline()
    assert not compute_includes_waits(plan)
    truth = CostModel(
        compute_scale={"A100-80GB": 2.0, "V100-32GB": 1.25}, comm_scale={"nvlink2": 1.5, "nvlink3": 1.5}
    )
    tel = _write(tmp_path / "t.jsonl", _rows(plan, truth))
    report, cost = calibrate(plan, SPEC, tel)
    assert report.device_types == ("A100-80GB", "V100-32GB")
    assert cost.compute_scale["A100-80GB"] == pytest.approx(2.0, rel=0.03)
    assert cost.compute_scale["V100-32GB"] == pytest.approx(1.25, rel=0.03)
    assert abs(report.error_after) < 0.01
    for s, m in zip(report.stages_after, report.measured.stage_compute_s, strict=True):
        assert s.busy_s == pytest.approx(m, rel=0.03)


def test_pytorch_pipeline_fits_iteration_time_only(tmp_path):
    """PyTorch's schedules time bubble and p2p as compute: only the iteration time is trusted there."""
    plan = simple_plan("gpt-tiny", n_layers=SPEC.n_layers, global_batch=8, seq_len=SEQ, pp=2, micro_batches=2)
    assert compute_includes_waits(plan)
    rows = [json.loads(r) for r in _rows(plan, CostModel(compute_scale={"cpu": 3.0}))]
    for r in rows:  # every stage's compute is the whole schedule, as TorchPipelineRunner reports it
        for st in r["stages"]:
            st["compute_s"], st["comm_s"] = r["iter_time_s"], 0.0
    report, cost = calibrate(plan, SPEC, _write(tmp_path / "t.jsonl", [json.dumps(r) for r in rows]))
    assert not report.busy_observed
    assert abs(report.error_after) < 1e-3
    assert cost.compute_scale["cpu"] == pytest.approx(3.0, rel=0.05)  # compute dominates the iteration


def test_damping_moves_half_way_in_log_space(tmp_path):
    plan = _dp_plan(2)
    truth = CostModel(compute_scale={"cpu": 2.0}, comm_scale={"loopback": 3.0})
    tel = _write(tmp_path / "t.jsonl", _rows(plan, truth))
    prior = CostModel(compute_scale={"cpu": 4.0, "A100-80GB": 0.7})
    report, cost = calibrate(plan, SPEC, tel, prior, alpha=0.5)
    assert cost.compute_scale["cpu"] == pytest.approx(math.sqrt(4.0 * 2.0), rel=0.02)
    assert cost.comm_scale["loopback"] == pytest.approx(math.sqrt(1.0 * 3.0), rel=0.05)
    assert cost.compute_scale["A100-80GB"] == 0.7  # types the plan does not use are left alone
    assert prior.compute_scale == {"cpu": 4.0, "A100-80GB": 0.7}  # the input is not modified
    m = report.measured.iteration_time_s
    assert abs(report.after.iteration_time_s - m) < abs(report.before.iteration_time_s - m)
    full, _ = calibrate(plan, SPEC, tel, prior, alpha=1.0)
    assert abs(full.error_after) < abs(report.error_after)


def test_scales_are_clamped(tmp_path):
    plan = _dp_plan(1)
    tel = _write(tmp_path / "t.jsonl", _rows(plan, CostModel(compute_scale={"cpu": 500.0})))
    _, cost = calibrate(plan, SPEC, tel, bounds=(0.1, 10.0))
    assert cost.compute_scale["cpu"] == pytest.approx(10.0)


# ------------------------------------------------------------------------------------------- bad input
def test_bad_line_names_line_and_field(tmp_path):
    rows = _rows(_dp_plan(2), CostModel())
    bad = json.loads(rows[2])
    del bad["stages"][0]["compute_s"]
    path = _write(tmp_path / "t.jsonl", [rows[0], rows[1], "", json.dumps(bad)])
    with pytest.raises(ValueError, match=r"t\.jsonl:4: field 'stages\[0\]\.compute_s': missing"):
        read_telemetry(path)
    cases = [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"iter_time_s": 1, "stages": [{"compute_s": 1, "comm_s": 0}]}', "field 'step': missing"),
        ('{"step": 0, "iter_time_s": -1, "stages": []}', "field 'iter_time_s': must be > 0"),
        ('{"step": 0, "iter_time_s": 1, "stages": []}', "field 'stages': expected a non-empty list"),
        (
            '{"step": 0, "iter_time_s": 1, "stages": [{"compute_s": 1, "comm_s": "x"}]}',
            r"field 'stages\[0\]\.comm_s': expected a finite number",
        ),
        (
            '{"step": 0, "iter_time_s": 1, "skipped": 1, "stages": [{"compute_s": 1, "comm_s": 0}]}',
            "field 'skipped'",
        ),
    ]
    for text, message in cases:
        with pytest.raises(ValueError, match=r"x\.jsonl:2: " + message):
            parse_telemetry([rows[0], text], source="x.jsonl")
    with pytest.raises(ValueError, match=r":1: field 'stages': 1 stages, expected 2 \(the plan's\)"):
        parse_telemetry(rows, n_stages=2)
    two = json.loads(rows[2])
    two["stages"].append({"stage": 1, "compute_s": 1.0, "comm_s": 0.0})
    with pytest.raises(ValueError, match=r":3: field 'stages': 2 stages, expected 1 \(as the rows before\)"):
        parse_telemetry([*rows[:2], json.dumps(two)])
    with pytest.raises(ValueError, match="no usable steps"):
        parse_telemetry(rows[:2])
    with pytest.raises(ValueError, match="no such file"):
        read_telemetry(tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match="alpha"):
        calibrate(_dp_plan(2), SPEC, path, alpha=0.0)


def test_appended_runs_each_drop_their_warmup():
    """The runtime appends to the file: a rerun, or a resume from an earlier checkpoint, starts a new run."""
    rows = _rows(_dp_plan(2), CostModel(), steps=6, warmup_slowdown=1.0)
    m = parse_telemetry(rows[:4] + rows[:4] + rows[2:], warmup=2)
    assert m.steps == (2, 3, 2, 3, 5)  # third run: steps 2, 3 warm-up, 4 skipped
    assert m.rows == 12 and m.warmup_dropped == 6 and m.skipped_dropped == 1


# ------------------------------------------------------------------------------------------- CLI
def test_cli_round_trip_saves_into_cost_dir(tmp_path):
    plan = _dp_plan(2)
    plan_path = tmp_path / "plan.json"
    plan.save(plan_path)
    tel = _write(tmp_path / "telemetry.jsonl", _rows(plan, CostModel(compute_scale={"cpu": 2.0})))
    cost_dir = tmp_path / "perf"
    CostModel(compute_scale={"A100-80GB": 0.8}).save(cost_dir)  # what was there survives
    runner = CliRunner()
    args = ["calibrate", str(tel), "--plan", str(plan_path), "--cost-dir", str(cost_dir)]
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["compute_scale_after"]["cpu"] == pytest.approx(2.0, rel=0.02)
    assert abs(out["error_after"]) < 1e-3 and out["saved_to"] == str(cost_dir)
    loaded = CostModel.load(cost_dir)
    assert loaded.compute_scale["cpu"] == pytest.approx(2.0, rel=0.02)
    assert loaded.compute_scale["A100-80GB"] == 0.8
    # the table, from the calibrated model: nothing left to correct
    r = runner.invoke(app, [*args, "--model", "gpt-tiny", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "iteration error" in r.stdout and "not saved" in r.stdout
    # user errors: one line, exit code 2
    (tmp_path / "bad.jsonl").write_text('{"step": 0}\n')
    for bad in (
        ["calibrate", str(tmp_path / "bad.jsonl"), "--plan", str(plan_path), "--cost-dir", str(cost_dir)],
        [*args, "--alpha", "1.5"],
        ["calibrate", str(tel), "--plan", str(tmp_path / "nope.json")],
        [*args, "--model", "gpt2"],
    ):
        r = runner.invoke(app, bad)
        assert r.exit_code == 2, r.output
        assert "error:" in r.output and "Traceback" not in r.output


def test_compute_includes_waits_is_the_runtimes_own_rule(monkeypatch):
    """The calibration asks the runtime's rule (tessera.plan.torch_schedule_refusal): a data-parallel
    interleaved pipeline runs on PyTorch's schedule (whole schedule timed as compute), a data-parallel plain
    one only under TESSERA_PIPELINE_IMPL=torch, and nothing does under =own."""
    kw = dict(n_layers=SPEC.n_layers, global_batch=8, seq_len=SEQ, pp=2, dp=2, micro_batches=2)
    monkeypatch.delenv("TESSERA_PIPELINE_IMPL", raising=False)
    inter = simple_plan("gpt-tiny", **kw, virtual_stages=2)
    plain = simple_plan("gpt-tiny", **kw)
    assert compute_includes_waits(inter) and not compute_includes_waits(plain)
    monkeypatch.setenv("TESSERA_PIPELINE_IMPL", "torch")
    assert compute_includes_waits(inter) and compute_includes_waits(plain)
    monkeypatch.setenv("TESSERA_PIPELINE_IMPL", "own")
    assert not compute_includes_waits(inter) and not compute_includes_waits(plain)
    monkeypatch.delenv("TESSERA_PIPELINE_IMPL")
    uneven = simple_plan("gpt-tiny", **{**kw, "global_batch": 6}, virtual_stages=2)  # pieces of 2 and 1
    assert not compute_includes_waits(uneven)

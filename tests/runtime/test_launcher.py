"""Launcher surface: telemetry JSONL, text data, precision options, the `tessera train` command."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from helpers import plan, stage
from models import factory, n_layers

from tessera.runtime import RunOptions, TextData, launch_many


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    text = root / "corpus.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    n = n_layers("gpt-tiny")
    pp = plan("gpt-tiny", [stage(0, 3, [0]), stage(3, n, [1])], micro=2)
    dp = plan("gpt-tiny", [stage(0, n, [0, 1], dp=2, shares=(3, 5))], micro=2)
    base = dict(model=factory("gpt-tiny"), pg_timeout_s=60, watchdog_s=120, steps=3)
    jobs = [
        (pp, RunOptions(**base, telemetry_path=str(root / "tel.jsonl"))),
        (dp, RunOptions(**base, data=TextData(str(text), vocab=128))),
        (pp.with_(precision="bf16"), RunOptions(**base)),
        (dp.with_(precision="bf16-master"), RunOptions(**base)),
        (dp.with_(precision="fp16"), RunOptions(**base)),
    ]
    return root, launch_many(jobs)


@pytest.mark.timeout(180)
def test_telemetry_jsonl_has_per_stage_compute_and_comm(runs):
    root, results = runs
    lines = [json.loads(x) for x in (root / "tel.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [0, 1, 2]
    for rec in lines:
        assert rec["iter_time_s"] > 0 and rec["samples_per_s"] > 0
        assert [s["stage"] for s in rec["stages"]] == [0, 1]
        assert all(s["compute_s"] > 0 and s["comm_s"] >= 0 for s in rec["stages"])
        assert set(rec["peak_memory_bytes"]) == {"0", "1"}
    assert results[0].losses == [x["loss"] for x in lines]


def test_text_data_trains(runs):
    _, results = runs
    losses = results[1].losses
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]


@pytest.mark.parametrize("i", [2, 3, 4], ids=["bf16", "bf16-master", "fp16"])
def test_mixed_precision_tracks_fp32(runs, i):
    _, results = runs
    fp32 = results[0].losses[0]
    assert abs(results[i].losses[0] - fp32) / fp32 < 2e-2


@pytest.mark.timeout(120)
def test_train_command_runs_a_job_spec(tmp_path):
    from tessera.commands.train import train_command

    job = tmp_path / "job.yaml"
    job.write_text("model: gpt-tiny\nname: t\nglobal_batch: 4\nseq_len: 16\nsteps: 2\nprecision: fp32\n")
    result = train_command(job, devices=2, run_dir=tmp_path / "run", checkpoint_every=1, progress=False)
    assert len(result.records) == 2
    assert (tmp_path / "run" / "telemetry.jsonl").is_file()
    assert (tmp_path / "run" / "checkpoints" / "latest").is_file()
    # the service's training loop: each record has its whole loop iteration and the checkpoint's share of it
    for r in result.records:
        assert r.wall_s is not None and r.wall_s >= r.iter_time_s
        assert 0 < r.checkpoint_s < r.wall_s


@pytest.mark.timeout(180)
def test_train_command_trains_a_users_own_model_from_its_entrypoint(tmp_path):
    # the job spec the service runs (examples/demo/blob-classifier.yaml) trains under `tessera train` as well:
    # the user's model is built from its entrypoint on every rank and its loss falls on its own data
    import shutil

    import typer

    from tessera.commands.train import train_command

    examples = Path(__file__).resolve().parents[2] / "examples"
    shutil.copytree(examples, tmp_path / "examples")
    job = tmp_path / "examples" / "demo" / "blob-classifier.yaml"
    result = train_command(job, devices=2, steps=40, run_dir=tmp_path / "run", progress=False)
    assert len(result.records) == 40
    assert result.losses[-1] < 0.7 * result.losses[0]
    broken = tmp_path / "broken.yaml"
    broken.write_text("model: mine\nentrypoint: nowhere.py:Model\nglobal_batch: 4\nsteps: 1\n")
    with pytest.raises(typer.Exit) as e:
        train_command(broken, devices=1, progress=False)
    assert e.value.exit_code == 2


def test_train_command_rejects_plan_and_devices(tmp_path):
    import typer

    from tessera.commands.train import train_command

    job = tmp_path / "job.yaml"
    job.write_text("model: gpt-tiny\nglobal_batch: 4\nsteps: 1\n")
    with pytest.raises(typer.Exit) as e:
        train_command(job, plan=tmp_path / "p.json", devices=2, progress=False)
    assert e.value.exit_code == 2

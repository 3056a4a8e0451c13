"""HF models through checkpoints: a resharded resume continues the exact trajectory, and `tessera export`
writes a directory ``AutoModelForCausalLM.from_pretrained`` loads with the trained weights, bit for bit."""

from __future__ import annotations

import pytest
import torch
from helpers import rel, stage
from hf_models import N_DECODER, save_tiny
from typer.testing import CliRunner

from tessera.cli import app
from tessera.models.zoo.hf_nn import FAMILIES, hf_key
from tessera.plan import Plan
from tessera.runtime import RunOptions, launch_many

N = N_DECODER + 2


def _plan(model: str, stages, micro: int = 2) -> Plan:
    return Plan(model=model, global_batch=8, seq_len=16, stages=tuple(stages), micro_batches=micro)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """qwen2 (tied head): 4 steps on DP; 2 steps on a 2-stage pipeline, resumed on uneven DP to step 4.

    The plans name the model directory itself, with no factory: the runtime's default builds the HF model."""
    root = tmp_path_factory.mktemp("hfrun")
    model = str(save_tiny("qwen2", root / "qwen2"))
    dp = _plan(model, [stage(0, N, [0, 1], dp=2, shares=(5, 3))])
    pp = _plan(model, [stage(0, 2, [0]), stage(2, N, [1])], micro=4)
    run_a, run_b = root / "run-a", root / "run-b"
    base = dict(pg_timeout_s=60, watchdog_s=120, learning_rate=3e-3)
    results = launch_many(
        [
            (dp, RunOptions(steps=4, **base)),
            (pp, RunOptions(steps=2, checkpoint_dir=str(run_a / "checkpoints"), **base)),
            (
                dp,
                RunOptions(
                    steps=4,
                    resume_from=str(run_a / "checkpoints"),
                    checkpoint_dir=str(run_b / "checkpoints"),
                    capture_params=True,
                    **base,
                ),
            ),
        ]
    )
    return root, model, results, run_b


@pytest.mark.timeout(600)
def test_resharded_resume_continues_the_exact_trajectory(runs):
    _, _, (whole, first, resumed), _ = runs
    losses = first.losses + resumed.losses
    assert len(losses) == 4
    assert max(rel(a, b) for a, b in zip(losses, whole.losses, strict=True)) < 1e-5


@pytest.mark.timeout(600)
def test_export_round_trip(runs, tmp_path):
    from transformers import AutoModelForCausalLM

    _, model, (_, _, resumed), run_b = runs
    out = tmp_path / "exported"
    r = CliRunner().invoke(app, ["export", str(run_b), str(out)])
    assert r.exit_code == 0, r.output
    assert "exported step 4" in r.output
    assert {"config.json", "model.safetensors"} <= {p.name for p in out.iterdir()}
    loaded = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    family = FAMILIES[loaded.config.model_type]
    state = loaded.state_dict()
    for fqn, value in resumed.params.items():
        assert torch.equal(state[hf_key(family, N, fqn)], value), fqn
    assert loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()  # re-tied
    original = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).state_dict()
    assert set(state) == set(original)
    assert any(not torch.equal(state[k], original[k]) for k in state)  # it did train


@pytest.mark.timeout(120)
def test_export_errors_are_one_line(runs, tmp_path):
    root, _, _, run_b = runs
    runner = CliRunner()
    r = runner.invoke(app, ["export", str(root / "nowhere"), str(tmp_path / "x")])
    assert r.exit_code == 2 and "RUN_DIR" in r.output and "Traceback" not in r.output
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    r = runner.invoke(app, ["export", str(run_b), str(out)])
    assert r.exit_code == 2 and "not empty" in r.output
    r = runner.invoke(app, ["export", str(run_b), str(tmp_path / "y"), "--model", str(tmp_path / "no-model")])
    assert r.exit_code == 2 and "Hugging Face cache" in r.output

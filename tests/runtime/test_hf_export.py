"""HF models through checkpoints: a resharded resume continues the exact trajectory, and `tessera export`
writes a directory ``AutoModelForCausalLM.from_pretrained`` loads with the trained weights, bit for bit."""

from __future__ import annotations

import pytest
import torch
import torch.distributed.checkpoint as dcp
from helpers import rel, stage
from hf_models import N_DECODER, save_tiny
from typer.testing import CliRunner

from tessera.cli import app
from tessera.nn.hf import FAMILIES, hf_key
from tessera.plan import Plan
from tessera.runtime import RunOptions, checkpoint, launch_many

N = N_DECODER + 2
BASE = dict(pg_timeout_s=60, watchdog_s=120, learning_rate=3e-3)  # every run's options besides steps/paths


def _plan(model: str, stages, micro: int = 2) -> Plan:
    return Plan(model=model, global_batch=8, seq_len=16, stages=tuple(stages), micro_batches=micro)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """qwen2 (tied head): 4 steps on DP; 2 steps on a 2-stage pipeline, resumed on uneven TP to step 4 (so the
    exported checkpoint holds each weight in uneven TP chunks, which export must reassemble).

    The plans name the model directory itself, with no factory: the runtime's default builds the HF model."""
    root = tmp_path_factory.mktemp("hfrun")
    model = str(save_tiny("qwen2", root / "qwen2"))
    dp = _plan(model, [stage(0, N, [0, 1], dp=2, shares=(5, 3))])
    pp = _plan(model, [stage(0, 2, [0]), stage(2, N, [1])], micro=4)
    tp = _plan(model, [stage(0, N, [0, 1], tp=2, ratios=(0.75, 0.25))])
    run_a, run_b = root / "run-a", root / "run-b"
    results = launch_many(
        [
            (dp, RunOptions(steps=4, **BASE)),
            (pp, RunOptions(steps=2, checkpoint_dir=str(run_a / "checkpoints"), **BASE)),
            (
                tp,
                RunOptions(
                    steps=4,
                    resume_from=str(run_a / "checkpoints"),
                    checkpoint_dir=str(run_b / "checkpoints"),
                    capture_params=True,
                    **BASE,
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


def _export_and_compare(run_dir, out, params, model: str) -> str:
    """``tessera export RUN_DIR OUT``, then: the directory loads with the run's weights bit for bit, the head
    re-tied to the embedding, the same keys as the model it started from, and some of them trained. Returns
    the command's output."""
    from transformers import AutoModelForCausalLM

    r = CliRunner().invoke(app, ["export", str(run_dir), str(out)])
    assert r.exit_code == 0, r.output
    loaded = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    family = FAMILIES[loaded.config.model_type]
    state = loaded.state_dict()
    for fqn, value in params.items():
        assert torch.equal(state[hf_key(family, N, fqn)], value), fqn
    tied = loaded.get_output_embeddings().weight, loaded.get_input_embeddings().weight
    assert tied[0].data_ptr() == tied[1].data_ptr()  # re-tied
    original = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).state_dict()
    assert set(state) == set(original)
    assert any(not torch.equal(state[k], original[k]) for k in state)  # it did train
    return r.output


@pytest.mark.timeout(600)
def test_export_round_trip(runs, tmp_path):
    _, model, (_, _, resumed), run_b = runs
    out = tmp_path / "exported"
    assert "exported step 4" in _export_and_compare(run_b, out, resumed.params, model)
    saved = (
        dcp.FileSystemReader(checkpoint.resolve(run_b / "checkpoints")).read_metadata().state_dict_metadata
    )
    assert any(len({tuple(c.sizes) for c in md.chunks}) > 1 for md in saved.values())  # uneven TP chunks
    assert {"config.json", "model.safetensors"} <= {p.name for p in out.iterdir()}


@pytest.mark.timeout(600)
def test_export_of_a_gpt2_uneven_tp_checkpoint(tmp_path):
    """gpt2 under uneven TP (fused Conv1D c_attn cut by heads, stored [in, out]; tied wte/lm_head cut along the
    vocabulary): the exported directory loads with the run's weights, bit for bit, and the head re-tied."""
    model = str(save_tiny("gpt2", tmp_path / "gpt2"))
    tp = _plan(model, [stage(0, N, [0, 1], tp=2, ratios=(0.75, 0.25))])
    run = tmp_path / "run"
    (res,) = launch_many(
        [(tp, RunOptions(steps=2, checkpoint_dir=str(run / "checkpoints"), capture_params=True, **BASE))]
    )
    _export_and_compare(run, tmp_path / "exported", res.params, model)


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


@pytest.mark.timeout(300)
@pytest.mark.parametrize("from_scratch", [False, True])
def test_tessera_train_a_job_naming_the_model_directory(tmp_path, from_scratch):
    """`tessera train` on a job whose model is a save_pretrained directory (from its weights, or from seeded
    random ones), then `tessera export`: the exported weights are the run's, not the directory's."""
    import subprocess
    import sys
    from pathlib import Path

    from transformers import AutoModelForCausalLM

    save_tiny("llama", tmp_path / "tiny-llama")
    job = tmp_path / "job.yaml"
    job.write_text(
        "version: 1\nname: hf-job\nmodel: tiny-llama\nglobal_batch: 8\nseq_len: 16\nsteps: 2\n"
        f"from_scratch: {str(from_scratch).lower()}\n"
    )
    tessera = str(Path(sys.executable).parent / "tessera")
    run = [tessera, "train", "job.yaml", "--devices", "2", "--run-dir", "runs/hf", "--timeout", "120"]
    r = subprocess.run(run, cwd=tmp_path, capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run([tessera, "export", "runs/hf", "out"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    trained = AutoModelForCausalLM.from_pretrained(str(tmp_path / "out"), dtype=torch.float32).state_dict()
    original = AutoModelForCausalLM.from_pretrained(
        str(tmp_path / "tiny-llama"), dtype=torch.float32
    ).state_dict()
    from tessera.nn.hf import HFModel
    from tessera.runtime.model import initial_state

    family = FAMILIES["llama"]
    scratch = initial_state(HFModel(str(tmp_path / "tiny-llama"), from_scratch=True), N, 0)  # the job's seed
    start = {hf_key(family, N, k): v for k, v in scratch.items()} if from_scratch else original
    other = original if from_scratch else {hf_key(family, N, k): v for k, v in scratch.items()}
    for key in ("model.embed_tokens.weight", "model.layers.1.mlp.up_proj.weight"):
        assert 0 < (trained[key] - start[key]).abs().max() < 0.01, key  # 2 small steps from where it started
        assert (trained[key] - other[key]).abs().max() > 0.02, key  # not from the other initialization

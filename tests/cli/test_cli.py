"""The `tessera` command end to end (typer's runner drives the real app)."""

import json

from typer.testing import CliRunner

from tessera.cli import app

runner = CliRunner()


def test_catalog_commands():
    r = runner.invoke(app, ["gpus", "--json"])
    assert r.exit_code == 0
    assert any(g["name"] == "H100-80GB" for g in json.loads(r.stdout))
    r = runner.invoke(app, ["clusters"])
    assert r.exit_code == 0 and "crius-sim-1280" in r.stdout
    r = runner.invoke(app, ["models", "--json"])
    assert r.exit_code == 0 and any(m["name"] == "llama2-7b" for m in json.loads(r.stdout))


def test_memory_json_has_peak_bytes_per_device():
    args = ["memory", "--model", "llama2-7b", "--gpu", "A100-40GB", "--global-batch", "64", "--micro-batch", "2",
            "--seq", "2048", "--dp", "4", "--tp", "2", "--pp", "2", "--precision", "bf16",
            "--recompute", "selective", "--zero", "1", "--json"]  # fmt: skip
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert len(out["devices"]) == 16
    assert all(d["peak_bytes"] > 1e9 for d in out["devices"])
    assert out["layout"]["micro_batches"] == 8


def test_memory_table_and_fit():
    r = runner.invoke(app, ["memory", "--model", "gpt2", "--gpu", "A10", "--micro-batch", "4"])
    assert r.exit_code == 0 and "peak GiB" in r.stdout
    r = runner.invoke(app, ["memory", "--model", "gpt3-1.3b", "--global-batch", "32", "--fit"])
    assert r.exit_code == 0 and "A100-80GB" in r.stdout


def test_bad_input_is_one_clear_line():
    r = runner.invoke(app, ["memory", "--model", "llama2-7", "--gpu", "A100-40GB"])
    assert r.exit_code == 2 and "llama2-7b" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["memory", "--model", "llama2-7b", "--gpu", "A100-4GB"])
    assert r.exit_code == 2 and "A100-40GB" in r.output
    r = runner.invoke(app, ["memory", "--model", "llama2-7b", "--tp", "3"])
    assert r.exit_code == 2 and "tp: 3 does not divide" in r.output
    r = runner.invoke(app, ["memory", "--model", "gpt2", "--pp", "20", "--global-batch", "40"])
    assert r.exit_code == 2 and "pp:" in r.output


def test_memory_exact_agrees_with_the_formula_on_a_small_model():
    args = ["memory", "--model", "gpt-tiny", "--gpu", "T4", "--micro-batch", "2", "--pp", "2", "--global-batch", "4",
            "--precision", "fp32", "--exact", "--json"]  # fmt: skip
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    stages = json.loads(r.stdout)["stages"]
    assert len(stages) == 2
    for s in stages:
        assert s["exact_peak_bytes"] > 0
        assert abs(s["peak_bytes"] - s["exact_peak_bytes"]) / s["exact_peak_bytes"] < 0.1

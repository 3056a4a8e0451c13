"""`tessera simulate` end to end on a small cluster, a short CSV trace and tiny zoo models (real Cells)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tessera.cli import app

runner = CliRunner()
CLUSTER = """name: tiny-hetero
node_groups:
  - {count: 2, gpu: A100-40GB, gpus_per_node: 4}
  - {count: 2, gpu: A10, gpus_per_node: 2}
"""


@pytest.fixture()
def setup(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_HOME", str(tmp_path / "home"))
    (tmp_path / "c.yaml").write_text(CLUSTER)
    rows = ["id,t,dur,g"] + [f"j{i},{i * 400},{1800 + 600 * (i % 5)},{1 + (i % 3 == 0)}" for i in range(24)]
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    return tmp_path


def _args(tmp: Path, *extra: str) -> list[str]:
    return ["simulate", "--cluster", str(tmp / "c.yaml"), "--trace", "csv", "--trace-file", str(tmp / "t.csv"),
            "--submit-col", "t", "--duration-col", "dur", "--gpus-col", "g", "--id-col", "id",
            "--models", "bert-tiny", "--max-gpus", "8", "--workers", "1", "--out", str(tmp / "out"), *extra]  # fmt: skip


def test_simulate_writes_json_and_plots(setup):
    r = runner.invoke(app, _args(setup, "--policies", "fcfs,tessera", "--depth-sweep", "0,3", "--json"))
    assert r.exit_code == 0, r.output
    study = json.loads(r.stdout)
    assert set(study["policies"]) == {"tessera", "fcfs"}
    for m in study["policies"].values():
        assert m["jobs"] == 24 and m["finished_total"] == 24
        assert m["avg_jct_s"] > 0 and m["avg_throughput"] > 0
    assert [d["depth"] for d in study["depth_sweep"]] == [0, 3]
    out = setup / "out"
    for name in (
        "study.json",
        "throughput.png",
        "cdf.png",
        "utilization.png",
        "policies.png",
        "depth_sweep.png",
    ):
        assert (out / name).stat().st_size > 0, name
    # the table: the second run reads the rate table from the cache
    r = runner.invoke(app, _args(setup, "--policies", "fcfs", "--no-plots", "--tick", "60"))
    assert r.exit_code == 0, r.output
    assert "fcfs" in r.stdout and "avg JCT h" in r.stdout


@pytest.mark.parametrize(
    "extra, msg",
    [
        (["--policies", "fcfz"], "unknown policy 'fcfz'"),
        (["--models", "bert-tinyy"], "--models: unknown model 'bert-tinyy'"),
        (["--round", "0"], "--round: must be > 0"),
        (["--tick", "600"], "--tick: must be > 0 and <= --round (300), got 600"),
        (["--start", "yesterday"], "--start: 'yesterday' is neither seconds nor a date"),
    ],
)
def test_bad_flags_are_one_clear_error(setup, extra, msg):
    r = runner.invoke(app, _args(setup, *extra))
    assert r.exit_code == 2
    assert msg in " ".join(r.output.split())


def test_malformed_trace_row_names_the_line(setup):
    (setup / "t.csv").write_text("id,t,dur,g\nj0,0,100,1\nj1,5,oops,1\n")
    r = runner.invoke(app, _args(setup, "--policies", "fcfs"))
    out = " ".join(r.output.split())
    assert r.exit_code == 2 and "line 3" in out and "'dur'" in out


def test_jct_change_is_signed_once():
    from tessera.sim.report import jct_change

    assert jct_change(0.37) == "−37%"
    assert jct_change(-3.37) == "+337%"  # tessera worse: no "−-337%"
    assert jct_change(0.0) == "−0%"

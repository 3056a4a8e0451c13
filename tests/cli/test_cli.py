"""The `tessera` command end to end (typer's runner drives the real app)."""

import ast
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import typer
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


# ------------------------------------------------------------------------------ what a new user trips on
ROOT = Path(__file__).resolve().parents[2]


def _all_commands(cmd, path=()):
    """Every command path of the app (groups included), e.g. ("profile", "layers")."""
    yield path
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _all_commands(sub, (*path, name))


def test_version_prints_the_installed_version():
    from importlib.metadata import version

    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == f"tessera {version('tessera')}"


def test_help_shows_boolean_flags_as_flags():
    """Typer's rich help printed `--json <bool>` as if the flag took a value; every command's help is checked."""
    paths = list(_all_commands(typer.main.get_command(app)))
    assert ("profile", "layers") in paths and ("submit",) in paths
    for path in paths:
        r = runner.invoke(app, [*path, "--help"], terminal_width=200)
        assert r.exit_code == 0, (path, r.output)
        assert "<bool>" not in r.output, (path, r.output)
    r = runner.invoke(app, ["list", "--help"], terminal_width=200)
    assert re.search(r"--json\s+machine-readable output", r.output), r.output
    assert "--active" in r.output  # a --x/--y pair keeps both names


def test_shell_completion_is_enabled():
    r = runner.invoke(app, ["--help"], terminal_width=200)
    assert "--install-completion" in r.output and "--show-completion" in r.output
    exe = Path(sys.executable).parent / "tessera"  # the installed console script, as a shell runs it
    script = subprocess.run([exe, "--show-completion", "bash"], capture_output=True, text=True, timeout=120)
    assert script.returncode == 0, script.stderr
    assert "_TESSERA_COMPLETE=complete_bash" in script.stdout
    words = subprocess.run(
        [exe], capture_output=True, text=True, timeout=120,
        env={**os.environ, "_TESSERA_COMPLETE": "complete_bash", "COMP_WORDS": "tessera clu", "COMP_CWORD": "1"},
    )  # fmt: skip
    assert words.stdout.split() == ["clusters"], (words.stdout, words.stderr)
    for line, expected in (("tessera memory --gpu A10", {"A10", "A100-40GB", "A100-80GB"}),
                           ("tessera plan x.yaml --cluster crius", {"crius-sim-1280", "crius-sim-12800", "crius-testbed-64"}),
                           ("tessera estimate --model llama2-1", {"llama2-13b"})):  # fmt: skip
        env = {**os.environ, "_TESSERA_COMPLETE": "complete_bash", "COMP_WORDS": line}
        env["COMP_CWORD"] = str(len(line.split()) - 1)
        got = subprocess.run([exe], capture_output=True, text=True, timeout=120, env=env).stdout.split()
        assert set(got) == expected, (line, got)


def test_plan_with_gpus_and_no_cluster_plans_on_exactly_those_gpus(tmp_path):
    """The README's `tessera plan examples/tiny-gpt.yaml --gpus 4xA100-40GB,4xV100-32GB` failed: --gpus was a
    subset of the default 4-GPU `local` preset. Without --cluster the GPUs given are the cluster."""
    out = tmp_path / "plan.json"
    args = ["plan", str(ROOT / "examples" / "tiny-gpt.yaml"), "--gpus", "4xA100-40GB,4xV100-32GB", "--json",
            "--out", str(out)]  # fmt: skip
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert {"A100-40GB": 4, "V100-32GB": 4} in [c["gpus"] for c in data["cells"]]
    assert data["plan_path"] == str(out) and out.is_file()
    # with an explicit --cluster, --gpus still means "of that cluster", and asking too much is one line
    r = runner.invoke(app, [*args[:4], "--cluster", "local", "--out", str(out)])
    assert r.exit_code == 2 and "cluster local has 2 A100-40GB, asked for 4" in r.output
    assert "Traceback" not in r.output
    # the Python API means the same (it planned on a subset of `local` and raised)
    import tessera

    api = tessera.plan(ROOT / "examples" / "tiny-gpt.yaml", gpus="4xA100-40GB,4xV100-32GB")
    assert {"A100-40GB": 4, "V100-32GB": 4} in [c.to_dict()["gpus"] for c in api.cells]
    with pytest.raises(ValueError, match="asked for 4"):
        tessera.plan(ROOT / "examples" / "tiny-gpt.yaml", cluster="local", gpus="4xA100-40GB")


def test_state_lives_under_tessera_home(tmp_path, monkeypatch):
    """Measured profiles, simulator caches, compiled shims and the server's store: one home directory."""
    from tessera.memory.fakecuda import cache_dir as shim_dir
    from tessera.perf.costmodel import default_dir as perf_dir
    from tessera.service.config import default_state_dir

    try:  # the speed source's rate-table cache (the module was renamed from cell_source)
        from tessera.scheduler.speed import cache_dir as sim_dir
    except ImportError:  # pragma: no cover
        from tessera.scheduler.cell_source import cache_dir as sim_dir
    dirs = (perf_dir, sim_dir, shim_dir, default_state_dir)
    monkeypatch.delenv("TESSERA_CACHE_DIR", raising=False)
    monkeypatch.setenv("TESSERA_HOME", str(tmp_path / "home"))
    for d in dirs:
        assert d().is_relative_to(tmp_path / "home"), (d.__module__, d())
    monkeypatch.delenv("TESSERA_HOME")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    for d in dirs:
        assert d().is_relative_to(tmp_path / ".cache" / "tessera"), (d.__module__, d())


def test_cli_and_commands_do_not_import_each_other():
    """Shared helpers live in tessera.commands.common; no command module imports tessera.cli."""
    for path in (ROOT / "src" / "tessera" / "commands").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not any(n == "tessera.cli" or n.startswith("tessera.cli.") for n in names), path.name


class _Server:
    """An API-only Service on real uvicorn on loopback (no scheduler, no Ray)."""

    def __init__(self, state: Path) -> None:
        import uvicorn

        from tessera.service.config import ServiceConfig
        from tessera.service.server import Service

        self.service = Service(ServiceConfig(cluster="local", state_dir=state, scheduler=False))
        self.service.start()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        cfg = uvicorn.Config(self.service.app(), host="127.0.0.1", port=port, log_level="warning")
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.time() + 30
        while not self.server.started:
            assert time.time() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.05)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)
        self.service.stop()


@pytest.mark.timeout(180)
def test_status_never_prints_none_or_unrounded_floats(tmp_path):
    srv = _Server(tmp_path / "state")
    try:
        r = runner.invoke(
            app, ["submit", str(ROOT / "examples" / "tiny-gpt.yaml"), "--url", srv.url, "--json"]
        )
        assert r.exit_code == 0, r.output
        jid = json.loads(r.stdout)["job"]["id"]
        fresh = runner.invoke(app, ["status", str(jid), "--url", srv.url], terminal_width=200)
        assert fresh.exit_code == 0, fresh.output
        assert "None" not in fresh.output and "no loss yet" in fresh.output, fresh.output
        srv.service.store.update(
            jid, first_loss=5.123456789012, last_loss=2.718281828459045, measured_iter_s=0.012345678901,
            steps_done=7, checkpoint_step=5,
        )  # fmt: skip
        for cmd in (["status", str(jid)], ["list"]):
            out = runner.invoke(app, [*cmd, "--url", srv.url], terminal_width=200)
            assert out.exit_code == 0, out.output
            assert "None" not in out.output, out.output
            assert not re.search(r"\d\.\d{5,}", out.output), out.output
        assert "5.123 → 2.718" in runner.invoke(app, ["status", str(jid), "--url", srv.url]).output
    finally:
        srv.close()


@pytest.mark.timeout(180)
def test_tensorboard_export_reads_back(tmp_path):
    """`tessera tensorboard JOB --out DIR` writes event files TensorBoard's own reader loads: one point per step,
    the relaunched attempt's value where a step ran twice."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    srv = _Server(tmp_path / "state")
    try:
        r = runner.invoke(
            app, ["submit", str(ROOT / "examples" / "tiny-gpt.yaml"), "--url", srv.url, "--json"]
        )
        jid = json.loads(r.stdout)["job"]["id"]

        def rec(step: int, loss: float) -> dict:
            return {"step": step, "loss": loss, "iter_time_s": 0.02, "samples_per_s": 400.0,
                    "peak_memory_bytes": {"0": 2**30}}  # fmt: skip

        srv.service.store.add_steps(jid, 0, [rec(s, 5.0 - 0.1 * s) for s in range(6)])
        srv.service.store.add_steps(jid, 1, [rec(s, 4.0 - 0.1 * s) for s in range(4, 10)])  # relaunched at 4
        out = tmp_path / "tb"
        r = runner.invoke(app, ["tensorboard", "tiny-gpt", "--out", str(out), "--url", srv.url])
        assert r.exit_code == 0, r.output
        assert "10 steps written" in r.output
        again = runner.invoke(app, ["tensorboard", str(jid), "--out", str(out), "--url", srv.url])
        assert again.exit_code == 0, again.output  # re-exported: replaced, not doubled
        acc = EventAccumulator(str(out))
        acc.Reload()
        assert {"train/loss", "train/iteration_time_s", "train/samples_per_s", "memory/peak_GiB"} <= set(
            acc.Tags()["scalars"]
        )
        loss = acc.Scalars("train/loss")
        assert [e.step for e in loss] == list(range(1, 11))
        assert [round(e.value, 4) for e in loss] == [5.0, 4.9, 4.8, 4.7, 3.6, 3.5, 3.4, 3.3, 3.2, 3.1]
        assert acc.Scalars("memory/peak_GiB")[0].value == 1.0
        r = runner.invoke(app, ["tensorboard", "nope", "--out", str(out), "--url", srv.url])
        assert r.exit_code == 1 and "nope" in r.output and "Traceback" not in r.output
    finally:
        srv.close()


def _plan_json(job: Path, gpus: str, v: int, out: Path) -> dict:
    """``tessera plan JOB --gpus GPUS --json --virtual-stages V`` through its command function."""
    import contextlib
    import io

    from rich.console import Console

    from tessera.commands.plan import plan_command

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        plan_command(console=Console(), job=str(job), cluster=None, gpus=gpus, out=str(out), top=5,
                     exhaustive=False, cost_dir=None, as_json=True, virtual_stages=v)  # fmt: skip
    return json.loads(buf.getvalue())


def test_plan_virtual_stages_reach_the_priced_cells_and_the_written_plan(tmp_path):
    """`tessera plan --virtual-stages N` (the job spec has no such field): the Cells' plans are priced as
    interleaved 1F1B where they can carry it, plain 1F1B is planned too, and the faster chosen plan that the
    runtime can run is written — interleaved where it wins (llama2-7b, batch 16, on 8 L4s), plain where it
    does not (batch 64 on 16 V100s, where TP = 2 pays)."""
    from rich.console import Console

    from tessera.commands.plan import plan_command
    from tessera.plan import Plan, torch_schedule_refusal

    job = tmp_path / "llama.yaml"
    spec = ("version: 1\nname: llama-pp\nmodel: llama2-7b\nglobal_batch: {b}\nseq_len: {s}\nsteps: 10\n"
            "optimizer: adamw\nprecision: bf16\nrecompute: full\n")  # fmt: skip
    job.write_text(spec.format(b=16, s=2048))
    plain = _plan_json(job, "8xL4", 1, tmp_path / "plain.json")
    inter = _plan_json(job, "8xL4", 2, tmp_path / "inter.json")
    assert plain["chosen"]["plan"]["virtual_stages"] == 1 and "interleaving" not in plain
    chosen = inter["chosen"]["plan"]
    assert len(chosen["stages"]) >= 2 and chosen["virtual_stages"] == 2
    choice = inter["interleaving"]
    assert choice["chosen"] == "interleaved" and choice["interleaved_virtual_stages"] == 2
    assert choice["plain_iteration_time_s"] == pytest.approx(plain["chosen"]["iteration_time_s"])
    assert choice["interleaved_iteration_time_s"] < choice["plain_iteration_time_s"]
    written = Plan.load(tmp_path / "inter.json")
    assert written.virtual_stages == 2 and torch_schedule_refusal(written) is None  # the runtime runs it
    times = {
        name: {(c["n_stages"], tuple(c["stages"])): c["iteration_time_s"] for c in d["cells"]}
        for name, d in (("plain", plain), ("inter", inter))
    }
    both = [k for k in times["plain"] if k in times["inter"]]
    assert any(k[0] >= 2 and times["plain"][k] != times["inter"][k] for k in both)  # interleaving priced
    assert all(times["plain"][k] == times["inter"][k] for k in both if k[0] == 1)  # one stage: nothing to cut
    assert all(
        s.endswith("x1") or k[0] == 1 for k in times["inter"] for s in k[1]
    )  # interleaved: TP = 1 only
    console = Console(record=True, width=400)
    plan_command(console=console, job=str(job), cluster=None, gpus="8xL4", out=str(tmp_path / "t.json"),
                 top=3, exhaustive=False, cost_dir=None, as_json=False, virtual_stages=2)  # fmt: skip
    assert (
        "interleaved 1F1B, 2 virtual stages per device (interleaved 1F1B is faster" in console.export_text()
    )

    job.write_text(spec.format(b=64, s=4096))
    lost = _plan_json(job, "16xV100-32GB", 2, tmp_path / "lost.json")
    assert lost["interleaving"]["chosen"] == "plain" and lost["chosen"]["plan"]["virtual_stages"] == 1
    assert (
        lost["interleaving"]["plain_iteration_time_s"] <= lost["interleaving"]["interleaved_iteration_time_s"]
    )
    assert "faster" in lost["interleaving"]["reason"]


def test_plan_virtual_stages_are_validated(tmp_path):
    tiny = ROOT / "examples" / "tiny-gpt.yaml"
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match=r"--virtual-stages: must be an integer >= 1"):
            _plan_json(tiny, "4xA100-40GB", bad, tmp_path / "p.json")  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"--virtual-stages: 4 chunks per stage need at least 8 layers.*has 6"
    ):
        _plan_json(tiny, "4xA100-40GB", 4, tmp_path / "p.json")
    # a job whose plans cannot carry it (one stage wins) still plans, plainly
    data = _plan_json(tiny, "4xA100-40GB", 2, tmp_path / "p.json")
    assert data["chosen"]["plan"]["virtual_stages"] == 1


def test_plan_cli_takes_virtual_stages(tmp_path):
    """The flag reaches the command: a bad value is one clear error naming it, a good one is planned."""
    tiny = ROOT / "examples" / "tiny-gpt.yaml"
    r = runner.invoke(app, ["plan", str(tiny), "--gpus", "4xA100-40GB", "--virtual-stages", "4", "--json",
                            "--out", str(tmp_path / "p.json")])  # fmt: skip
    assert r.exit_code != 0 and "--virtual-stages" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["plan", str(tiny), "--gpus", "4xA100-40GB", "--virtual-stages", "2", "--json",
                            "--out", str(tmp_path / "p.json")])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["chosen"]["plan"]["virtual_stages"] == 1  # one stage wins: nothing to cut

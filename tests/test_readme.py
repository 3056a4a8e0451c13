"""The README stays true: every Python snippet and every `tessera …` command line in it is run.

Each snippet and command runs as a user would run it — a fresh process in an empty working directory holding the
repository's `examples/`, with `$TESSERA_HOME` in a temporary directory — under a timeout. The few things that
cannot run here are listed in SKIP below with the reason; the service's commands run against a real server
with one documented substitution (see ``test_service_commands``). Budget: about 2 minutes on 2 busy cores.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TEXT = README.read_text()
BIN = Path(sys.executable).parent  # the environment's `tessera` console script, as a shell finds it

# What is not run, and why (a snippet or block is matched by a substring of it).
SKIP = {
    # The main job and the test suite: CI runs these two blocks itself (<!-- ci:main --> / <!-- ci:test -->).
    "pip install torch": "a fresh virtualenv and install; CI runs the ci:main / ci:test blocks as its own steps",
    # A day of the Philly trace under three policies on 1,280 GPUs builds a cold rate table: ~10 minutes on
    # 2 cores; the same run_study path is tested on small windows in tests/sim.
    "run_study(": "a 1,280-GPU trace study (minutes); tests/sim/test_simulate_cli.py runs run_study small",
    # Needs a Ray cluster of GPU nodes at HEAD:6379 and a server at SERVER:8470.
    "--ray-address HEAD:6379": "needs an external Ray cluster with GPUs",
}


def fenced(lang: str) -> list[tuple[int, str]]:
    """(line number, body) of every ```lang block."""
    out = []
    for m in re.finditer(rf"^```{lang}\n(.*?)^```", TEXT, re.S | re.M):
        out.append((TEXT[: m.start()].count("\n") + 1, m.group(1)))
    return out


def skip_reason(body: str) -> str | None:
    return next((why for key, why in SKIP.items() if key in body), None)


def commands(body: str) -> list[str]:
    """The shell commands of a bash block: continuation lines joined, comments kept for the shell to drop."""
    return [c for c in body.replace("\\\n", " ").splitlines() if c.strip()]


@pytest.fixture()
def workdir(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """An empty working directory with the repository's examples, and an environment whose state is in tmp."""
    from tessera.memory.fakecuda import cache_dir

    cwd = tmp_path / "work"
    cwd.mkdir()
    (cwd / "examples").symlink_to(ROOT / "examples")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TESSERA_", "PYTEST_"))}
    # the compiled fake-CUDA shim is a build product keyed by the torch install: reuse the one already built
    shim = os.environ.get("TESSERA_CACHE_DIR") or str(cache_dir())
    env.update(
        TESSERA_HOME=str(tmp_path / "home"),
        TESSERA_CACHE_DIR=shim,
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
        RAY_AUTH_MODE="disabled",
        RAY_USAGE_STATS_ENABLED="0",
        COLUMNS="200",
    )
    return cwd, env


def run(
    cmd: list[str] | str, cwd: Path, env: dict[str, str], timeout_s: float
) -> subprocess.CompletedProcess:
    """Run in its own session; on timeout the whole group is killed and the test fails with the output so far."""
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, shell=isinstance(cmd, str), executable="/bin/bash" if isinstance(cmd, str) else None,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"timed out after {timeout_s:.0f} s: {cmd}\n{out[-2000:]}\n{err[-2000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


# ------------------------------------------------------------------------------------------------ Python
PYTHON = fenced("python")


@pytest.mark.timeout(400)
@pytest.mark.parametrize("line, body", PYTHON, ids=[f"README.md:{n}" for n, _ in PYTHON])
def test_python_snippet_runs(line: int, body: str, workdir) -> None:
    if why := skip_reason(body):
        pytest.skip(why)
    cwd, env = workdir
    (cwd / "snippet.py").write_text(body)
    r = run([sys.executable, "snippet.py"], cwd, env, timeout_s=360)
    assert r.returncode == 0, f"README.md:{line} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"


def test_there_are_snippets_to_run() -> None:
    assert len(PYTHON) >= 4 and sum(skip_reason(b) is None for _, b in PYTHON) >= 3


@pytest.mark.timeout(200)
def test_launch_snippet_without_its_guard_fails_with_one_clear_error(workdir) -> None:
    """Saved without `if __name__ == "__main__":`, the runtime snippet used to fail with a spawn RuntimeError in a
    child's traceback; the launcher now refuses before starting any process and says what to change."""
    body = next(b for _, b in PYTHON if "launch(" in b and "__main__" in b)
    head, _, guarded = body.partition('if __name__ == "__main__":')
    cwd, env = workdir
    (cwd / "unguarded.py").write_text(head + textwrap.dedent(guarded.split("\n", 1)[1]))
    r = run([sys.executable, "unguarded.py"], cwd, env, timeout_s=150)
    assert r.returncode != 0
    assert 'without an `if __name__ == "__main__":` guard (' in r.stderr and "unguarded.py:" in r.stderr
    assert "bootstrapping phase" not in r.stderr  # no child ever started
    assert "tessera-rank" not in r.stderr


# ------------------------------------------------------------------------------------------------ YAML
def test_yaml_specs_parse() -> None:
    from tessera.hardware.cluster import parse_cluster
    from tessera.jobs import parse_job

    blocks = [yaml.safe_load(b) for _, b in fenced("yaml")]
    jobs = [b for b in blocks if "model" in b]
    clusters = [b for b in blocks if "node_groups" in b]
    assert jobs and clusters and len(jobs) + len(clusters) == len(blocks)
    for j in jobs:
        assert parse_job(j, "README job spec").name
    for c in clusters:
        assert parse_cluster(c, "README cluster spec").total_gpus > 0


# ------------------------------------------------------------------------------------------------ commands
BASH = fenced("bash")
SERVICE_BLOCK = next(b for _, b in BASH if b.lstrip().startswith("tessera server &"))


LONG_RUNNING = {"server", "demo"}


def plain_blocks() -> list[tuple[int, str]]:
    """Bash blocks other than the service's and the skipped ones."""
    return [(n, b) for n, b in BASH if b is not SERVICE_BLOCK and skip_reason(b) is None]


@pytest.mark.timeout(400)
def test_command_blocks_run(workdir) -> None:
    """Every `tessera …` line of the README's other bash blocks succeeds."""
    cwd, env = workdir
    lines = [(n, c) for n, b in plain_blocks() for c in commands(b) if c.startswith("tessera ")]
    # a server or the demo runs until stopped (the service block is run below, the demo by CI's ci:main step)
    lines = [(n, c) for n, c in lines if c.split()[1] not in LONG_RUNNING]
    assert len(lines) >= 2, lines
    for n, c in lines:
        r = run(c, cwd, env, timeout_s=300)
        assert r.returncode == 0, f"README.md:{n}: {c}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(300)
def test_service_commands(workdir) -> None:
    """The Service block, line by line, against a real server. One substitution: `tessera server &` runs with
    `--api-only` (no embedded Ray: starting one takes most of a minute on 2 cores and is tested in
    tests/service) on a free port, which replaces 8470 in the other lines."""
    cwd, env = workdir
    cmds = commands(SERVICE_BLOCK)
    assert cmds[0].startswith("tessera server &")
    port = _free_port()
    env = {**env, "TESSERA_URL": f"http://127.0.0.1:{port}"}
    log = (cwd / "server.log").open("w")
    server = subprocess.Popen(
        [str(BIN / "tessera"), "server", "--api-only", "--port", str(port)],
        cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        import httpx

        deadline = time.time() + 120
        while True:
            assert server.poll() is None, (cwd / "server.log").read_text()[-2000:]
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2).status_code == 200:
                    break
            assert time.time() < deadline, "the server did not answer in 120 s"
            time.sleep(0.5)
        for c in cmds[1:]:
            if c.startswith("curl") and shutil.which("curl") is None:
                continue  # documented: the curl lines need curl
            r = run(c.replace("8470", str(port)), cwd, env, timeout_s=120)
            assert r.returncode == 0, f"{c}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
            if "/metrics" in c:
                assert "tessera_jobs_submitted_total 2.0" in r.stdout, r.stdout[-2000:]
        assert (Path(env["TESSERA_HOME"]) / "service" / "tessera.db").is_file()  # state under $TESSERA_HOME
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
        log.close()


def test_cli_synopses_name_real_commands_and_options() -> None:
    """Every `tessera …` in inline code (the CLI table, the prose) names a real command, and each --option it
    shows is one that command takes."""
    from tessera.cli import app

    root = typer.main.get_command(app)
    runner = CliRunner()
    spans = set(re.findall(r"`(tessera [^`]+)`", TEXT))
    assert len(spans) >= 20
    helps: dict[tuple[str, ...], str] = {}
    for span in sorted(spans):
        words = span.split()[1:]
        path: list[str] = []
        cmd = root
        while words and words[0] in getattr(cmd, "commands", {}):
            cmd = cmd.commands[words[0]]
            path.append(words.pop(0))
        if not path and (not words or not words[0].startswith("--")):
            pytest.fail(f"README: `{span}` names no tessera command")
        key = tuple(path)
        if key not in helps:
            r = runner.invoke(app, [*path, "--help"], terminal_width=400)
            assert r.exit_code == 0, (span, r.output)
            helps[key] = r.output
        for opt in re.findall(r"(--[a-z][a-z0-9-]*)", span):
            assert re.search(rf"{re.escape(opt)}\b", helps[key]), f"README: `{span}`: {opt} is not an option"

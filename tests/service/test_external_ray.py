"""`tessera server --ray-address`: join a Ray cluster started elsewhere (here: two emulated GPU nodes that
advertise only Ray's own accelerator types, as real GPU nodes do). Kill the server mid-run: the job's actors
keep training (they are detached), and the restarted server reattaches to them — same attempt, no relaunch,
no step lost from the telemetry. The job's data file travels to the nodes (their own ``TESSERA_HOME``), and the
restarted server runs with a loaded box's thread timing (``interleave/sitecustomize.py``): its gang threads'
first Ray call overlaps the main thread building the HTTP app, which once failed the reattach with
``KeyError: 'pydantic.v1'``."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from conftest import EXAMPLES, free_port, ray_tmpdir, start_server_process, wait_for

pytestmark = pytest.mark.ray
INTERLEAVE = Path(__file__).parent / "interleave"  # the thread-timing aid (its sitecustomize.py)


@pytest.fixture(scope="module")
def external_ray(tmp_path_factory):
    """A Ray cluster this test starts and owns: A100-40G ×2 on the head, V100 ×2 on a second node, each node's
    workers with their own TESSERA_HOME (where shipped job files are unpacked)."""
    from ray.cluster_utils import Cluster

    homes = [tmp_path_factory.mktemp("home-a100"), tmp_path_factory.mktemp("home-v100")]
    common = {"node_ip_address": "127.0.0.1", "num_cpus": 2, "num_gpus": 2, "object_store_memory": 100 * 2**20,
              "dashboard_agent_listen_port": None}  # fmt: skip
    with ray_tmpdir("ext") as tmp:
        cluster = Cluster(
            initialize_head=True,
            head_node_args={**common, "include_dashboard": False, "resources": {"accelerator_type:A100-40G": 1},
                            "labels": {"ray.io/accelerator-type": "A100-40G"},
                            "env_vars": {"TESSERA_HOME": str(homes[0])}},
        )  # fmt: skip
        cluster.add_node(
            **common, resources={"accelerator_type:V100": 1}, labels={"ray.io/accelerator-type": "V100"},
            env_vars={"TESSERA_HOME": str(homes[1])},
        )  # fmt: skip
        try:
            yield cluster.address, tmp, homes
        finally:
            cluster.shutdown()


def start(state, port: int, address: str, tmp: str, *, interleave: bool = False) -> subprocess.Popen:
    env = {
        **os.environ,
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_AUTH_MODE": "disabled",
        "RAY_TMPDIR": tmp,
    }
    if interleave:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(INTERLEAVE), os.environ.get("PYTHONPATH")) if p)
    return start_server_process(
        ["--round", "2", "--ray-address", address], state, port, env=env, timeout_s=90
    )


@pytest.mark.timeout(300)
def test_join_existing_cluster_and_reattach_after_server_kill(external_ray, tmp_path):
    address, tmp, homes = external_ray
    state = tmp_path / "state"
    state.mkdir()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    corpus = state / "corpus.txt"
    corpus.write_text((EXAMPLES / "data" / "corpus.txt").read_text())
    procs = [start(state, port, address, tmp)]
    try:
        c = httpx.get(f"{url}/api/cluster", timeout=60).json()
        assert c["mode"] == "external" and c["by_type"] == {  # Ray's accelerator types → the GPU catalog
            "A100-40GB": {"total": 2, "used": 0, "free": 2},
            "V100-32GB": {"total": 2, "used": 0, "free": 2},
        }
        body = {"name": "ext", "model": "gpt-tiny", "global_batch": 8, "seq_len": 64, "steps": 400, "precision": "fp32",
                "learning_rate": 3e-3, "data": str(corpus), "checkpoint_every_steps": 100}  # fmt: skip
        jid = httpx.post(f"{url}/api/jobs", json=body, timeout=60).json()["job"]["id"]
        before = wait_for(lambda: (j := httpx.get(f"{url}/api/jobs/{jid}", timeout=60).json())["state"] == "RUNNING" and j["steps_done"] >= 20 and j,
                          150, "the job to run")  # fmt: skip
        # on a loaded box the first launch may fail and be relaunched before the kill; what the kill must not
        # cause is another relaunch, so the attempt running at the kill is the one compared below
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(timeout=30)
        time.sleep(2.0)  # the detached actors train on without a server
        procs.append(start(state, port, address, tmp, interleave=True))
        final = wait_for(
            lambda: (j := httpx.get(f"{url}/api/jobs/{jid}", timeout=60).json())["state"] in ("SUCCEEDED", "FAILED") and j,
            200, "the reattached job to finish",
        )  # fmt: skip
        logs = [x["line"] for x in httpx.get(f"{url}/api/jobs/{jid}/logs", timeout=60).json()["lines"]]
        assert final["state"] == "SUCCEEDED", (final["error"], logs)
        assert (
            final["restarts"] == before["restarts"]
            and final["attempt"] == before["attempt"]
            and len(final["history"]) == len(before["history"])
        ), logs  # never relaunched
        assert any(f"reattached to attempt {before['attempt']}" in line for line in logs)
        # the data file travelled: unpacked on the nodes that ran the ranks, read from there
        digest = next(line for line in logs if "job files: archive" in line).split("archive ")[1].split()[0]
        copies = [h / "job-files" / digest / "data" / "corpus.txt" for h in homes]
        assert any(c.is_file() for c in copies), copies
        assert all(c.read_bytes() == corpus.read_bytes() for c in copies if c.exists())
        steps = httpx.get(
            f"{url}/api/jobs/{jid}/telemetry", params={"max_points": 100000}, timeout=60
        ).json()["steps"]
        assert sorted(x["step"] for x in steps) == list(range(400))  # every step once, none lost or repeated
        procs[1].send_signal(signal.SIGTERM)
        assert procs[1].wait(timeout=60) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)

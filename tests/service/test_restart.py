"""Kill the server (SIGKILL) in the middle of training and start it again on the same state directory:
every job is still there, exactly once, and the running ones resume from their checkpoints and finish; their
telemetry counts each step once (the steps the killed attempt ran past its checkpoint are superseded)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from conftest import EXAMPLES, free_port, start_server_process, wait_for

from tessera.service.config import ServiceConfig
from tessera.service.ray_backend import kill_leftovers

pytestmark = pytest.mark.ray

TEXT = {"global_batch": 8, "seq_len": 64, "precision": "fp32", "learning_rate": 3e-3, "max_gpus": 2}


def start_server(state: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled"}
    return start_server_process(["--round", "2"], state, port, env=env)


def job(url: str, jid: int) -> dict:
    return httpx.get(f"{url}/api/jobs/{jid}", timeout=30).json()


@pytest.mark.timeout(400)
def test_server_killed_and_restarted_recovers_every_job(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    corpus = state / "corpus.txt"
    corpus.write_text((EXAMPLES / "data" / "corpus.txt").read_text())
    marker = ServiceConfig(cluster="local", state_dir=state).ray_tmp_dir
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []
    try:
        procs.append(start_server(state, port))
        ids = []
        for name, model in (("r-gpt", "gpt-tiny"), ("r-llama", "llama-tiny")):
            body = {
                "name": name,
                "model": model,
                "steps": 240,
                "checkpoint_every_steps": 20,
                "data": str(corpus),
                **TEXT,
            }
            ids.append(httpx.post(f"{url}/api/jobs", json=body, timeout=30).json()["job"]["id"])
        queued = httpx.post(
            f"{url}/api/jobs",
            json={
                "name": "r-queued",
                "model": "llama2-70b",
                "global_batch": 8,
                "steps": 5,
                "wait_for_resources": True,
            },
            timeout=30,
        ).json()["job"]["id"]  # fmt: skip  (no Cell here: it waits, queued)

        def both_checkpointed():
            js = [job(url, j) for j in ids]
            return (
                js if all(j["state"] == "RUNNING" and (j["checkpoint_step"] or 0) >= 20 for j in js) else None
            )

        before = wait_for(both_checkpointed, 200, "both jobs running with a checkpoint", interval_s=1.0)
        procs[0].send_signal(signal.SIGKILL)  # no shutdown of any kind
        procs[0].wait(timeout=30)
        seen_ckpt = {
            j["id"]: j["checkpoint_step"] for j in before
        }  # training went on for a moment after this

        procs.append(start_server(state, port))  # same state dir: same store, same checkpoints
        listed = httpx.get(f"{url}/api/jobs", timeout=30).json()["jobs"]
        assert sorted(j["id"] for j in listed) == sorted([*ids, queued])  # none lost, none duplicated
        assert job(url, queued)["state"] == "PENDING"

        def finished():
            js = [job(url, j) for j in ids]
            return js if all(j["state"] in ("SUCCEEDED", "FAILED") for j in js) else None

        final = wait_for(finished, 240, "the recovered jobs to finish", interval_s=2.0)
        for j in final:
            assert j["state"] == "SUCCEEDED", j["error"]
            assert j["steps_done"] == 240 and j["last_loss"] < j["first_loss"] - 0.5
            kinds = [(h["kind"], h["end_reason"]) for h in j["history"]]
            cut = next(i for i, h in enumerate(j["history"]) if h["end_reason"] == "server restart")
            resumed = j["history"][cut + 1]
            assert resumed["kind"] == "recover", kinds
            assert seen_ckpt[j["id"]] <= resumed["from_step"] < 240 and resumed["from_step"] % 20 == 0
            steps = httpx.get(f"{url}/api/jobs/{j['id']}/telemetry", params={"max_points": 100000}).json()[
                "steps"
            ]
            assert min(x["step"] for x in steps if x["attempt"] == resumed["attempt"]) == resumed["from_step"]
            # exact in the record: each step at most once, in order, from the attempt that counts (the curve
            # never backtracks); steps the gang ran while no server listened may be missing, never repeated
            xs = [x["step"] for x in steps]
            assert xs == sorted(set(xs)) and xs[-1] == 239
            assert [x for x in xs if x >= resumed["from_step"]] == list(range(resumed["from_step"], 240))
            assert all(x["attempt"] < resumed["attempt"] for x in steps if x["step"] < resumed["from_step"])
        assert len(httpx.get(f"{url}/api/jobs", timeout=30).json()["jobs"]) == 3
        procs[1].send_signal(signal.SIGTERM)  # a clean stop checkpoints and shuts its Ray down
        assert procs[1].wait(timeout=90) == 0
        time.sleep(1.0)
        assert kill_leftovers(marker) == []  # nothing of either server's Ray is left running
    finally:
        for p in procs:  # safety net: only the process groups this test started
            if p.poll() is None:
                p.kill()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
        kill_leftovers(marker)

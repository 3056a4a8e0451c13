"""Faults in the live service, on a real embedded Ray (emulated GPU nodes, real gloo gangs):

* a job whose loss really diverges (gpt-tiny, fp32, AdamW at learning rate 1e6: step 1's loss is finite, step
  2's is NaN) ends FAILED at that step with "loss diverged (NaN) at step 2", is never relaunched, and keeps its
  telemetry (the NaN step stored, served as JSON null with its kind); with ``on_nonfinite_loss: skip`` the same
  job skips those steps and succeeds;
* a relaunch from a checkpoint is exact in the record: progress restarts at the checkpoint's step and the steps
  the killed attempt ran past it are superseded, so the loss curve never backtracks;
* nothing outlives the server: after a ``kill -9`` of ``tessera server`` every process it started (Ray's GCS,
  raylets, agents, workers, and its watchdog) is gone within seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import httpx
import pytest
from conftest import Served, free_port, job, start_server_process, submit, wait_for

from tessera.service.config import ServiceConfig
from tessera.service.ray_backend import kill_leftovers
from tessera.service.server import Service

pytestmark = pytest.mark.ray

DIVERGING = {"model": "gpt-tiny", "global_batch": 8, "seq_len": 64, "precision": "fp32", "learning_rate": 1e6,
             "max_gpus": 1}  # fmt: skip


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    state = tmp_path_factory.mktemp("faults")
    config = ServiceConfig(
        cluster="local", state_dir=state, round_s=2.0, restart_cost_s=3.0, pg_timeout_s=20.0, watchdog_s=90.0, backoff_s=1.0,
        log_every=0,
    )  # fmt: skip
    service = Service(config)
    service.start()
    s = Served(service)
    yield s
    s.close()
    service.stop()


def ended(s: Served, jid: int) -> dict | None:
    j = job(s, jid)
    return j if j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") else None


@pytest.mark.timeout(400)
@pytest.mark.timeout(180)
def test_a_launch_behind_a_stopping_gang_is_not_timed_out(served):
    """A launch whose GPUs another gang still holds while it stops (a final checkpoint may take minutes) waits
    for them past the placement timeout; with nothing being handed over, the timeout stands; a stop asked
    while it waits ends the wait (the job had been moved on: it must not sit behind the jobs given its GPUs)."""
    import threading

    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    from tessera.service.ray_backend import PlacementCancelled, wait_placed

    gpus = int(ray.cluster_resources().get("GPU", 0))
    blocker = placement_group([{"GPU": 1}] * gpus, strategy="PACK")  # every GPU: the "stopping gang"
    ray.get(blocker.ready(), timeout=60)
    want = placement_group([{"GPU": 1}])
    released = threading.Event()

    def release() -> None:
        remove_placement_group(blocker)
        released.set()

    timer = threading.Timer(12.0, release)
    try:
        with pytest.raises(RuntimeError, match="not ready after 2 s"):
            wait_placed(ray, [want], 2.0)
        # a stop asked while placing (the next round moved the job on) ends the wait at once, hand-over or not
        t0 = time.time()
        with pytest.raises(PlacementCancelled):
            wait_placed(
                ray, [want], 30.0, handing_over=lambda: True, cancelled=lambda: time.time() - t0 > 1.0
            )
        assert time.time() - t0 < 10.0
        timer.start()
        t0 = time.time()
        wait_placed(ray, [want], 8.0, handing_over=lambda: not released.is_set())
        assert released.is_set() and time.time() - t0 > 8.0  # placed after the hand-over, past the timeout
    finally:
        if timer.is_alive():
            timer.join()
        if not released.is_set():
            release()
        remove_placement_group(want)


def test_diverging_job_fails_at_its_step_without_relaunch_and_skip_mode_succeeds(served):
    fail = submit(served, {"name": "diverge", "steps": 40, **DIVERGING})
    skip = submit(served, {"name": "diverge-skip", "steps": 6, "on_nonfinite_loss": "skip", **DIVERGING})
    final = wait_for(lambda: ended(served, fail), 300, "the diverging job to end", interval_s=1.0)
    assert final["state"] == "FAILED", final
    assert final["reason"] == "loss diverged (NaN) at step 2" and final["error"] == final["reason"]
    assert final["restarts"] == 0 and final["attempt"] == 1 and len(final["history"]) == 1  # never relaunched
    assert final["history"][0]["end_reason"] == "diverged: loss diverged (NaN) at step 2"
    assert final["steps_done"] == 2 and final["last_loss"] is None and final["first_loss"] > 0
    r = httpx.get(f"{served.url}/api/jobs/{fail}/telemetry", timeout=30)
    json.loads(r.text, parse_constant=lambda c: pytest.fail(f"telemetry JSON holds {c}"))
    steps = r.json()["steps"]
    assert [(x["step"], x["loss"] is None, x["loss_nonfinite"]) for x in steps] == [
        (0, False, None), (1, True, "NaN"),
    ]  # fmt: skip
    lines = [x["line"] for x in httpx.get(f"{served.url}/api/jobs/{fail}/logs", timeout=30).json()["lines"]]
    assert any("failed: loss diverged (NaN) at step 2 (not relaunched" in line for line in lines), lines
    assert not any("worker failure" in line for line in lines)

    done = wait_for(lambda: ended(served, skip), 300, "the skipping job to end", interval_s=1.0)
    assert done["state"] == "SUCCEEDED", done
    assert done["steps_done"] == 6 and done["restarts"] == 0
    kinds = [x["loss_nonfinite"] for x in served.service.store.steps(skip)]
    assert kinds[0] is None and kinds[1:] == ["NaN"] * 5, kinds
    records = served.service.store.step_records(skip, done["attempt"])
    assert [json.loads(x)["skipped"] for x in records] == [False] + [True] * 5


@pytest.mark.timeout(400)
def test_relaunch_restarts_progress_at_the_checkpoint_and_supersedes_redone_steps(served):
    jid = submit(served, {"name": "kill-one", "model": "gpt-tiny", "global_batch": 8, "seq_len": 64,
                          "precision": "fp32", "learning_rate": 3e-3, "max_gpus": 2, "steps": 200,
                          "checkpoint_every_steps": 20})  # fmt: skip
    wait_for(lambda: (j := job(served, jid))["state"] == "RUNNING" and (j["checkpoint_step"] or 0) >= 20
             and j["steps_done"] >= (j["checkpoint_step"] or 0) + 8, 250, "a running job past a checkpoint",
             interval_s=0.3)  # fmt: skip
    pids = served.service.controller.gang_pids(jid)
    os.kill(pids[-1], signal.SIGKILL)  # one rank's actor process
    relaunched = wait_for(
        lambda: (j := job(served, jid))["attempt"] == 2 and j, 200, "the relaunch", interval_s=0.2
    )
    from_step = relaunched["checkpoint_step"]
    # the store's steps_done lags the gang (telemetry comes in batches), so the gang may have checkpointed
    # past what was read before the kill: the record below is what shows progress went back to the checkpoint
    assert from_step is not None and from_step % 20 == 0 and from_step >= 20
    assert from_step <= relaunched["steps_done"]
    final = wait_for(lambda: ended(served, jid), 300, "the job to end", interval_s=1.0)
    assert final["state"] == "SUCCEEDED", final
    assert final["restarts"] == 1 and final["steps_done"] == 200
    second = final["history"][1]
    assert second["kind"] == "recover" and second["from_step"] == from_step
    counted = httpx.get(f"{served.url}/api/jobs/{jid}/telemetry", params={"max_points": 100000}).json()[
        "steps"
    ]
    xs = [x["step"] for x in counted]  # each step at most once, in order: the curve never backtracks
    assert xs == sorted(set(xs)) and [x for x in xs if x >= from_step] == list(range(from_step, 200))
    # (records a killed rank's gang had not yet sent before the checkpoint it wrote may be missing)
    assert all(x["attempt"] == (1 if x["step"] < from_step else 2) for x in counted)
    every = served.service.store.steps(jid, include_superseded=True)
    abandoned = sorted(x["step"] for x in every if x["superseded"])
    assert not abandoned or abandoned[0] == from_step  # none when the kill landed right at the checkpoint
    assert all(x["attempt"] == 1 for x in every if x["superseded"])
    assert len(every) == len(xs) + len(abandoned)


def _proc_alive(pid: int) -> bool:
    """Running (a zombie left for PID 1 to reap counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


@pytest.mark.timeout(240)
def test_nothing_outlives_a_server_killed_with_sigkill(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    marker = ServiceConfig(cluster="local", state_dir=state).ray_tmp_dir
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled"}
    port = free_port()
    proc = start_server_process([], state, port, env=env)
    try:

        def ray_up() -> dict[int, str] | None:
            names = {}
            for p in _descendants(proc.pid):
                with contextlib.suppress(OSError):
                    names[p] = Path(f"/proc/{p}/comm").read_text().strip()
            comms = " ".join(names.values())
            return names if "raylet" in comms and "gcs_server" in comms and len(names) >= 4 else None

        names = wait_for(ray_up, 60, "the server's Ray processes (gcs_server, raylet)")
        started = set(names)
        proc.send_signal(signal.SIGKILL)  # no shutdown of any kind
        proc.wait(timeout=30)
        t0 = time.monotonic()

        def survivors() -> dict[int, str]:
            out = {}
            for p in started:
                if _proc_alive(p):
                    with contextlib.suppress(OSError):
                        out[p] = (
                            Path(f"/proc/{p}/cmdline")
                            .read_bytes()
                            .replace(b"\0", b" ")
                            .decode()
                            .strip()[:200]
                        )
            return out

        deadline = time.monotonic() + 30
        while survivors() and time.monotonic() < deadline:
            time.sleep(0.25)
        assert not survivors(), f"alive 30 s after the server's kill -9: {survivors()}"
        gone_s = time.monotonic() - t0
        assert kill_leftovers(marker) == []
        print(f"{len(started)} processes gone {gone_s:.1f} s after the kill: {sorted(set(names.values()))}")
    finally:
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        kill_leftovers(marker)


def test_device_workers_run_at_this_process_priority(served):
    """Ray starts its workers at niceness 15; the embedded devices are priced from profiles taken at the default
    priority, so their workers run at the server's (else any other process on the machine takes their CPU
    first and the measured steps part from the estimates)."""
    import ray

    own = os.getpriority(os.PRIO_PROCESS, 0)

    @ray.remote(num_cpus=0)
    def niceness() -> int:
        return os.getpriority(os.PRIO_PROCESS, 0)

    # a worker of the pool the devices' actors come from (the earlier tests' workers may have been reaped)
    assert ray.get(niceness.remote(), timeout=120) == own
    names = {}
    for pid in _descendants(os.getpid()):
        with contextlib.suppress(OSError):
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
            if cmd.startswith("ray::"):
                names[pid] = (cmd, os.getpriority(os.PRIO_PROCESS, pid))
    assert any(cmd.startswith(("ray::IDLE", "ray::DeviceWorker")) for cmd, _ in names.values()), names
    assert {p: n for p, (_, n) in names.items()} == dict.fromkeys(names, own), names

"""Honest devices on the embedded cluster (issue 17 item 2): the default preset is this machine's CPU as a
``cpu-core`` and a ``cpu-half`` device, jobs are priced from profiles of this machine taken once per model in a
child process before their first launch, and calibration only ever moves the CPU device types' scales."""

from __future__ import annotations

import json

import httpx
import pytest
from conftest import EXAMPLES, Served, job, submit, wait_for

from tessera.hardware import get_cluster, get_gpu
from tessera.service.config import ServiceConfig
from tessera.service.profiles import LEDGER, target_of
from tessera.service.server import Service

pytestmark = pytest.mark.ray


def test_the_embedded_preset_is_this_cpu_with_two_real_device_types():
    spec = get_cluster("embedded")
    types = {n.gpu_type for n in spec.nodes()}
    assert types == {"cpu-core", "cpu-half"}
    for t in types:
        gpu = get_gpu(t)
        assert gpu.arch == "cpu" and gpu.threads == 1  # one pinned core, one torch thread
    assert ServiceConfig().cluster == "embedded"


def test_zoo_and_entrypoint_models_both_need_a_profile_of_this_machine():
    from tessera.jobs import JobSpec

    zoo = JobSpec.model_validate({"model": "gpt-tiny", "global_batch": 8, "steps": 5, "seq_len": 64})
    assert target_of(zoo).micro_batches == (1, 2, 4, 8) and target_of(zoo).entrypoint is None
    entry = f"{EXAMPLES / 'blob_classifier.py'}:BlobClassifier"
    user = JobSpec.model_validate({"model": "blob", "entrypoint": entry, "global_batch": 8, "steps": 5})
    got = target_of(user)
    # a user's model is profiled from its own code, at the length the service traces it at (1 without seq_len)
    assert (got.entrypoint, got.seq_len) == (entry, 1)
    assert got.key != target_of(user.model_copy(update={"entrypoint": entry + "x"})).key


def test_no_job_launches_while_a_profile_is_being_taken(tmp_path):
    # the profiler holds this machine's cores: a job whose own profile is in waits until the profiler is done
    from tessera.jobs import JobSpec
    from tessera.service.profiles import ProfileKeeper

    keeper = ProfileKeeper(tmp_path, ("cpu-core",), processes=1, on_profiled=lambda p: None)
    gpt = JobSpec.model_validate({"model": "gpt-tiny", "global_batch": 8, "steps": 5, "seq_len": 64})
    llama = JobSpec.model_validate({"model": "llama-tiny", "global_batch": 8, "steps": 5, "seq_len": 64})
    keeper._ledger[target_of(gpt).key] = {"state": "done"}
    assert keeper.wait_reason(gpt) is None
    assert keeper.wait_reason(llama).startswith("profiling llama-tiny")  # queued (the thread is not started)
    assert "while llama-tiny is profiled" in keeper.wait_reason(gpt)
    keeper._queue.clear()  # the profile is done
    keeper._ledger[target_of(llama).key] = {"state": "done"}
    assert keeper.wait_reason(gpt) is None and keeper.wait_reason(llama) is None


@pytest.mark.timeout(600)
def test_a_job_waits_for_its_profile_runs_on_cpu_devices_and_calibrates_them(tmp_path):
    config = ServiceConfig(state_dir=tmp_path / "state", round_s=2.0, restart_cost_s=3.0, pg_timeout_s=20.0,
                           watchdog_s=120.0, backoff_s=1.0)  # fmt: skip
    service = Service(config)
    service.start()
    s = Served(service)
    try:
        jid = submit(s, {"name": "gpt", "model": "gpt-tiny", "steps": 60, "global_batch": 8, "seq_len": 64,
                         "precision": "fp32", "learning_rate": 3e-3})  # fmt: skip
        first = job(s, jid)
        assert first["state"] == "PENDING"
        wait_for(
            lambda: (job(s, jid)["reason"] or "").startswith("profiling gpt-tiny"), 60, "the profiling wait"
        )
        end = wait_for(
            lambda: (j := job(s, jid))["state"] in ("SUCCEEDED", "FAILED") and j, 540, "the job to end", 2.0
        )
        assert end["state"] == "SUCCEEDED", end
        ledger = json.loads((config.cost_dir / LEDGER).read_text())
        assert [v["state"] for k, v in ledger.items() if k.startswith("gpt-tiny|")] == ["done"]
        profile = json.loads((config.cost_dir / "profile.json").read_text())
        assert {"cpu-core@1t", "cpu-half@1t"} <= set(json.dumps(profile).split('"')), (
            "both device types profiled"
        )
        history = end["history"]
        assert history and all(t in ("cpu-core", "cpu-half") for h in history for st in h["stages"]
                               for t in st["gpu_types"])  # fmt: skip
        a = history[-1]
        assert a["estimate_iter_s"] and a["measured_iter_s"]
        # an estimate for the device that ran: same order as measured (the GPU labels were 45× off)
        assert 0.2 < a["measured_iter_s"] / a["estimate_iter_s"] < 5.0, a
        # a step of progress costs the training step and what the loop adds to it (flag, data; checkpoints,
        # a cost per job, apart): every step's record has its loop time, the checkpointing ones their share
        assert a["measured_step_s"] and a["measured_step_s"] >= 0.9 * a["measured_iter_s"], a
        steps = httpx.get(f"{s.url}/api/jobs/{jid}/telemetry", params={"max_points": 1000}, timeout=60).json()
        rows = steps["steps"]
        assert rows and all(r["wall_s"] >= r["iter_time_s"] for r in rows), rows[:3]
        saved = [r["step"] + 1 for r in rows if r["checkpoint_s"]]
        assert (
            saved
            and saved[-1] == 60
            and all(0 < r["checkpoint_s"] < r["wall_s"] for r in rows if r["checkpoint_s"])
        )
        cal = json.loads((config.cost_dir / "calibration.json").read_text())
        assert cal["compute_scale"] and set(cal["compute_scale"]) <= {"cpu-core", "cpu-half"}, cal
        logs = [x["line"] for x in httpx.get(f"{s.url}/api/jobs/{jid}/logs", timeout=60).json()["lines"]]
        assert any(line.startswith("calibrated the cost model") for line in logs), logs
    finally:
        s.close()
        service.stop()


@pytest.mark.timeout(180)
def test_timings_taken_while_a_profile_ran_are_marked_disturbed(tmp_path):
    # a profiling child loads the cores the embedded devices run on: calibration must not learn from a job's
    # timings of that time. A real (failing: no such model) profiling run is timed by the keeper.
    import time

    from tessera.service.profiles import ProfileKeeper, ProfileTarget

    keeper = ProfileKeeper(tmp_path, ("cpu-core",), processes=1, on_profiled=lambda p: None)
    before = time.time()
    assert not keeper.busy_during(before - 10, before)
    state = keeper._profile(ProfileTarget("no-such-model", None, "fp32", "adamw", (1,)))
    after = time.time()
    assert state["state"] == "failed"
    assert keeper.busy_during(before - 1, before + 0.01)  # overlaps the run's start
    assert keeper.busy_during(after - 0.01, after + 5)  # and its end
    assert not keeper.busy_during(after + 1, after + 2)  # nothing ran then


@pytest.mark.timeout(300)
def test_each_emulated_node_runs_its_worker_processes_on_its_devices_cores(tmp_path):
    # a launch (a worker's interpreter, Ray, the preloaded torch) runs on the core of the device it launches
    # for, never on another device's: unpinned, the OS put it on the cpu-core device's core, beside a job there
    import os

    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from tessera.service.ray_backend import RayCluster

    @ray.remote(num_cpus=0)
    class Where:
        def cores(self) -> list[int]:
            return sorted(os.sched_getaffinity(0))  # as the process started: the device worker pins later

    cluster = RayCluster(
        emulate=get_cluster("embedded"), tmp_dir=ServiceConfig(state_dir=tmp_path).ray_tmp_dir
    )
    cluster.start()
    try:
        for node in ("core-0", "half-0"):
            core, _ = cluster.device_core(node, 0)
            assert core is not None
            actor = Where.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(cluster.node_id(node), soft=False)
            ).remote()
            assert ray.get(actor.cores.remote(), timeout=120) == [core], node
    finally:
        cluster.shutdown()

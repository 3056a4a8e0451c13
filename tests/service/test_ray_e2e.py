"""End to end on a local Ray emulating two GPU types (2×A100-40GB and 2×V100-32GB on separate nodes):
jobs without GPU counts train to completion, one is rescaled when another finishes, a killed worker resumes
from its checkpoint, a cancel frees GPUs, and the dashboard shows it all in headless Chromium.

One Ray cluster for the whole module (it takes ~10 s to start); tiny models, real gloo process groups with
a 20 s process-group timeout, and an outer timeout on every test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from pathlib import Path

import httpx
import pytest
from conftest import EXAMPLES, Served, job, submit, wait_for

from tessera.service.config import ServiceConfig
from tessera.service.server import Service

pytestmark = pytest.mark.ray

TEXT = {"global_batch": 8, "seq_len": 64, "precision": "fp32", "learning_rate": 3e-3}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    state = tmp_path_factory.mktemp("svc")
    corpus = state / "corpus.txt"
    corpus.write_text((EXAMPLES / "data" / "corpus.txt").read_text())
    config = ServiceConfig(
        cluster="local", state_dir=state, round_s=2.0, restart_cost_s=1.0, pg_timeout_s=20.0, watchdog_s=90.0, backoff_s=1.0,
        log_every=10,
    )  # fmt: skip
    service = Service(config)
    service.start()  # the embedded Ray starts in the main thread
    s = Served(service)
    s.corpus = str(corpus)
    yield s
    s.close()
    service.stop()
    assert not service.controller.gangs


def done(s: Served, ids: list[int]) -> list[dict] | None:
    jobs = [job(s, j) for j in ids]
    return jobs if all(j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") for j in jobs) else None


def check_plans_respect_gpu_types(s: Served, jid: int) -> None:
    types = {n["name"]: n["gpu_type"] for n in httpx.get(f"{s.url}/api/cluster").json()["nodes"]}
    allocs = s.service.store.allocations(jid)
    assert allocs
    for a in allocs:
        devices = [d for st in a["plan"]["stages"] for d in st["devices"]]
        assert len(devices) == len(a["gpus"])
        for d in devices:
            assert d["gpu_type"] == types[d["node"]], (jid, d)
        assert {(d["node"], d["local_index"]) for d in devices} == {
            (g["node"], g["index"]) for g in a["gpus"]
        }


@pytest.mark.timeout(420)
def test_three_jobs_train_rescale_and_respect_gpu_types(served):
    """No GPU counts anywhere: A (short) takes the fastest Cell, C (capped at one GPU) and B take what is left;
    when A finishes, its GPUs go to a running job (a rescale: checkpoint → tear down → relaunch)."""
    a = submit(served, {"name": "a-short", "model": "gpt-tiny", "steps": 40, **TEXT, "data": served.corpus})
    c = submit(served, {"name": "c-capped", "model": "gpt-tiny", "steps": 300, "max_gpus": 1, **TEXT,
                        "data": served.corpus, "checkpoint_every_steps": 50})  # fmt: skip
    b = submit(served, {"name": "b-long", "model": "llama-tiny", "steps": 1500, **TEXT, "data": served.corpus,
                        "checkpoint_every_steps": 100})  # fmt: skip
    ends = ("SUCCEEDED", "FAILED", "CANCELLED")

    def rescaled_after_an_end(jobs: list[dict]) -> list[tuple[int, dict]]:
        """(job, allocation) of each resize or migration that started after another job had finished."""
        finished = {j["id"]: j["finished_at"] for j in jobs if j["state"] in ends}
        return [(j["id"], h) for j in jobs for h in j["history"][1:]
                if h["kind"] in ("resize", "migrate")
                and any(h["started_at"] >= t for i, t in finished.items() if i != j["id"])]  # fmt: skip

    def settled() -> list[dict] | None:
        """A and C ended, and B either ended or rescaled and trained 20 steps on (the rest of its 1,500 would
        only show the same again: it is cancelled then)."""
        jobs = [job(served, x) for x in (a, c, b)]
        if any(j["state"] not in ends for j in jobs[:2]):
            return None
        if jobs[2]["state"] in ends:
            return jobs
        moved = [h for jid, h in rescaled_after_an_end(jobs) if jid == b]
        return (
            jobs if moved and len(served.service.store.steps(b, attempt=moved[0]["attempt"])) >= 20 else None
        )

    wait_for(settled, 400, "A and C to end and B to rescale and train on", interval_s=2.0)
    assert httpx.post(f"{served.url}/api/jobs/{b}/cancel").status_code == 200
    wait_for(lambda: job(served, b)["state"] in ends, 120, "B to stop")
    jobs = [job(served, x) for x in (a, c, b)]
    by_id = {j["id"]: j for j in jobs}
    for j in jobs:
        if j["id"] == b:
            assert j["state"] in ("CANCELLED", "SUCCEEDED"), (j["name"], j["error"], j["history"])
        else:
            assert j["state"] == "SUCCEEDED", (j["name"], j["error"], j["history"])
            assert j["steps_done"] == j["total_steps"]
        assert j["last_loss"] < j["first_loss"] - 0.5, (
            j["name"],
            j["first_loss"],
            j["last_loss"],
        )  # loss falls
        check_plans_respect_gpu_types(served, j["id"])
    assert by_id[c]["history"] and all(len(h["gpus"]) == 1 for h in by_id[c]["history"])  # max_gpus: 1
    # at least one job was rescaled after another one finished
    rescaled = rescaled_after_an_end(jobs)
    assert rescaled, [(j["name"], [(h["kind"], h["cell"]) for h in j["history"]]) for j in jobs]
    jid, h = rescaled[0]
    prev = by_id[jid]["history"][by_id[jid]["history"].index(h) - 1]
    assert (
        prev["end_reason"] in ("resize", "migrate") and prev["to_step"] == h["from_step"]
    )  # resumed where it stopped
    assert by_id[jid]["rescales"] >= 1
    steps = httpx.get(f"{served.url}/api/jobs/{jid}/telemetry", params={"max_points": 100000}).json()["steps"]
    after = [x["step"] for x in steps if x["attempt"] == h["attempt"]]
    assert after and min(after) == h["from_step"]  # the relaunch continued from its checkpoint
    # telemetry reached the allocation's record; on GPU labels (the `local` preset on this CPU) calibration
    # must not teach A100/V100 scales CPU timings (the honest path is tests/service/test_embedded_devices.py)
    assert prev["measured_iter_s"] and prev["estimate_iter_s"]
    cal_file = served.service.config.cost_dir / "calibration.json"
    assert not cal_file.exists() or not json.loads(cal_file.read_text())["compute_scale"]
    logs = [x["line"] for x in httpx.get(f"{served.url}/api/jobs/{a}/logs").json()["lines"]]
    assert not any(line.startswith("calibrated the cost model") for line in logs)
    assert any("calibration skipped: the embedded cluster's GPU types are labels" in line for line in logs), (
        logs
    )


@pytest.mark.timeout(300)
def test_killed_worker_resumes_from_last_checkpoint(served):
    jid = submit(served, {"name": "kill-me", "model": "gpt-tiny", "steps": 160, "max_gpus": 2, **TEXT,
                          "data": served.corpus, "checkpoint_every_steps": 20})  # fmt: skip
    wait_for(lambda: (j := job(served, jid))["state"] == "RUNNING" and (j["checkpoint_step"] or 0) >= 20
             and j["steps_done"] >= 30, 200, "a running job with a checkpoint")  # fmt: skip
    pids = served.service.controller.gang_pids(jid)
    assert pids
    os.kill(pids[-1], signal.SIGKILL)  # a real kill of one rank's actor process
    final = wait_for(
        lambda: (j := job(served, jid))["state"] in ("SUCCEEDED", "FAILED") and j, 240, "the job to end"
    )
    assert final["state"] == "SUCCEEDED", final["error"]
    assert final["restarts"] == 1 and "worker" in (final["error"] or "") or final["restarts"] == 1
    first, second = final["history"][0], final["history"][1]
    assert first["end_reason"].startswith("failed")
    assert second["kind"] == "recover" and second["from_step"] >= 20 and second["from_step"] % 20 == 0
    steps = httpx.get(f"{served.url}/api/jobs/{jid}/telemetry", params={"max_points": 100000}).json()["steps"]
    resumed = sorted(x["step"] for x in steps if x["attempt"] == second["attempt"])
    assert resumed[0] == second["from_step"] and resumed[-1] == 159
    logs = httpx.get(f"{served.url}/api/jobs/{jid}/logs").json()["lines"]
    assert any("worker failure" in x["line"] for x in logs)
    assert any(f"relaunching from checkpoint step {second['from_step']}" in x["line"] for x in logs)


@pytest.mark.timeout(200)
def test_cancel_running_job_frees_its_gpus(served):
    jid = submit(served, {"name": "cancel-me", "model": "gpt-tiny", "steps": 100000, **TEXT})
    wait_for(lambda: job(served, jid)["state"] == "RUNNING", 150, "the job to run")
    assert httpx.post(f"{served.url}/api/jobs/{jid}/cancel").status_code == 200
    wait_for(lambda: job(served, jid)["state"] == "CANCELLED", 60, "the cancel")
    holders = [g["job_id"] for n in httpx.get(f"{served.url}/api/cluster").json()["nodes"] for g in n["gpus"]]
    assert jid not in holders


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Loopback only: no background networking, component updates or sync lookups to Google's hosts.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]  # fmt: skip


@pytest.mark.timeout(180)
@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install -y chromium)")
def test_dashboard_in_headless_chromium(served, tmp_path):
    from playwright.sync_api import sync_playwright

    if not any(j["steps_done"] > 0 for j in httpx.get(f"{served.url}/api/jobs").json()["jobs"]):
        jid = submit(
            served, {"name": "dash", "model": "gpt-tiny", "steps": 30, **TEXT, "data": served.corpus}
        )
        wait_for(lambda: job(served, jid)["state"] == "SUCCEEDED", 150, "a finished job")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1800})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(served.url + "/")
            page.wait_for_selector("body[data-ready='1']", timeout=30000)
            # cluster map: every GPU by type and holder
            gpus = page.locator(".gpu")
            assert gpus.count() == 4
            types = {gpus.nth(i).get_attribute("data-gpu-type") for i in range(4)}
            assert types == {"A100-40GB", "V100-32GB"}
            assert "A100-40GB" in page.inner_text("#by-type")
            # queue with states and reasons
            rows = page.locator("#queue tbody tr")
            assert rows.count() >= 2
            assert "SUCCEEDED" in page.inner_text("#queue")
            # per-job loss and throughput curves
            page.wait_for_selector("#loss-chart path.series", timeout=15000)
            assert int(page.locator("#loss-chart path.series").first.get_attribute("data-points")) > 5
            for chart in ("throughput", "iter", "memory"):
                assert page.locator(f"#{chart}-chart path.series").count() >= 1
            # allocation timeline and estimated vs measured iteration time
            assert page.locator("#timeline g.alloc").count() >= 3
            assert page.locator("#estimate-chart rect.bar-meas").count() >= 1
            # a row with both figures (an allocation that ended before a measured step shows "–")
            pairs = [
                (r.locator("td.est").inner_text(), r.locator("td.meas").inner_text())
                for r in page.locator("#estimates tbody tr").all()
            ]
            both = [(float(e), float(m)) for e, m in pairs if e.strip() != "–" and m.strip() != "–"]
            assert both and all(e > 0 and m > 0 for e, m in both), pairs
            # each estimate says how it corrected the cost model's, and from what
            bases = [r.locator("td.basis").inner_text() for r in page.locator("#estimates tbody tr").all()]
            pattern = r"×[0-9.]+ \((these types|other types|device types|all|none)\)"
            assert bases and all(re.fullmatch(pattern, b) for b in bases), bases
            # clicking a job focuses the charts on it
            rows.first.click()
            page.wait_for_timeout(500)
            page.wait_for_selector("#queue tbody tr.selected", timeout=10000)
            assert page.locator("#legend .chip").count() == 1
            page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
            assert not errors, errors
        finally:
            browser.close()
    assert (tmp_path / "dashboard.png").stat().st_size > 10000


def test_state_dir_layout(served):
    """Checkpoints live under the state dir, one folder per job (what a restarted server resumes from)."""
    root = Path(served.service.config.checkpoint_root)
    assert any((d / "checkpoints" / "latest").is_file() for d in root.iterdir())
    time.sleep(0)

"""Service benchmark: how long a submitted job takes to run, and how many submissions the API stores per second.

    python bench/service.py [--jobs 5] [--submits 2000]

* ``submit_to_running_s_p50`` — the embedded default (local Ray emulating 2×A100-40GB + 2×V100-32GB): wall
  time from the HTTP submission of a tiny job (gpt-tiny, no GPU count) to its state RUNNING (scheduler round,
  Cell → Plan, placement group, one actor per device started with torch, model built, process group up).
  Jobs run one after another on an otherwise idle cluster; the median of ``--jobs``.
* ``api_submits_per_s`` — submissions stored per second through the HTTP API (``tessera server --api-only``
  in its own process: uvicorn, SQLite in WAL mode), ``--submits`` sent by 64 concurrent connections, each with
  its own Idempotency-Key; the run counts only if every one of them is found stored afterwards.
* ``rescale_pause_s_p50`` — in the same run, a second embedded service set like the service tests (2 s
  rounds, 3 s initial restart-cost guess): ``--rescales`` rounds of a short job (one A100) beside a long one
  (A100s only); when the short one finishes the long one grows onto its GPU (a resize). The pause is the server's own telemetry timestamps: the last step stored of the attempt
  before → the first step stored of the attempt after (checkpoint, stop, re-form, reshard, first step).
  A resize keeps the workers that stay (fast rescale); ``TESSERA_FAST_RESCALE=0`` measures the slow path.
* ``cold_launch_s_p50`` — the same rounds' fresh gangs (their first attempt): launch (allocation start) →
  first step stored, on the same clock, so the two compare.

Writes ``bench/results/service.json``. Timings depend on the machine (on a busy 2-core box, Ray actor start-up
dominates the first figure); compare runs on the same machine only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

for _k, _v in {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
}.items():
    os.environ.setdefault(_k, _v)

from tessera.service.config import ServiceConfig  # noqa: E402
from tessera.service.server import Service  # noqa: E402

OUT = Path(__file__).parent / "results" / "service.json"
JOB = {"model": "gpt-tiny", "global_batch": 8, "seq_len": 64, "steps": 5, "precision": "fp32"}


def serve(service: Service):
    import socket

    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(service.app(), host="127.0.0.1", port=port, log_level="warning"))
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    while not server.started:
        time.sleep(0.05)
    return server, t, f"http://127.0.0.1:{port}"


def _wait_done(c: httpx.Client, jid: int, timeout_s: float = 900.0) -> dict:
    deadline = time.time() + timeout_s
    while True:
        j = c.get(f"/api/jobs/{jid}").json()
        if j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            if j["state"] != "SUCCEEDED":
                raise RuntimeError(f"bench job {jid} ended {j['state']}: {j['error']}")
            return j
        if time.time() > deadline:
            raise RuntimeError(f"bench job {jid} not done after {timeout_s:.0f} s")
        time.sleep(0.2)


def rescale_rounds(service: Service, c: httpx.Client, n: int) -> dict:
    """``n`` rounds: a short 1-GPU job and a long job on the A100 node only; when the short one ends the long
    one grows onto its GPU. Pauses and cold launches from the server's telemetry timestamps."""
    pauses, colds, rounds = [], [], []
    only_a100 = {"exclude_gpu_types": ["V100-32GB"]}
    for i in range(n):
        short = c.post("/api/jobs", json={**JOB, **only_a100, "name": f"short-{i}", "steps": 30,
                                          "max_gpus": 1}).json()["job"]["id"]  # fmt: skip
        # long enough that growing pays the tessera policy's settling rule (a job that just started moves
        # only for a gain of 3 restarts): at 600 steps (~15 s here) it never grew
        long_ = c.post("/api/jobs", json={**JOB, **only_a100, "name": f"long-{i}", "steps": 2400,
                                          "checkpoint_every_steps": 1000}).json()["job"]["id"]  # fmt: skip
        for jid in (short, long_):
            _wait_done(c, jid)
        for jid in (short, long_):
            allocs = service.store.allocations(jid)
            steps = service.store.steps(jid, include_superseded=True)
            ts = {}
            for x in steps:
                lo, hi = ts.get(x["attempt"], (x["ts"], x["ts"]))
                ts[x["attempt"]] = (min(lo, x["ts"]), max(hi, x["ts"]))
            first = allocs[0]
            if first["attempt"] in ts:
                colds.append(ts[first["attempt"]][0] - first["started_at"])
            for prev, nxt in zip(allocs, allocs[1:], strict=False):
                if nxt["kind"] in ("resize", "migrate") and prev["attempt"] in ts and nxt["attempt"] in ts:
                    pause = ts[nxt["attempt"]][0] - ts[prev["attempt"]][1]
                    pauses.append(pause)
                    log = [ln for _, _, ln in service.store.logs(jid) if "running from step" in ln]
                    rounds.append({"job": jid, "kind": nxt["kind"], "from": prev["cell"], "to": nxt["cell"],
                                   "pause_s": pause, "startup": log[-1] if log else ""})  # fmt: skip
                    print(f"  job {jid}: {nxt['kind']} {prev['cell']} → {nxt['cell']}: pause {pause:.2f} s",
                          flush=True)  # fmt: skip
    if not pauses:
        why = [ln for _, _, ln in service.store.logs(long_) if not ln.startswith("step ")][-8:]
        raise RuntimeError(f"no rescale happened in {n} rounds; the last long job's log: {why}")
    return {
        "rescale_pause_s_p50": statistics.median(pauses),
        "rescale_pause_s_all": pauses,
        "cold_launch_s_p50": statistics.median(colds),
        "cold_launch_s_all": colds,
        "fast_rescale": os.environ.get("TESSERA_FAST_RESCALE", "1") != "0",
        "rescales": rounds,
    }


def rescale_service(n: int) -> dict:
    """The rescale rounds in their own embedded service, set like the service tests (2 s rounds, a 3 s
    initial restart-cost guess): with the default 20 s guess the scheduler rightly judges growing a job
    that has ~a minute left not worth a relaunch, and no resize happens to measure."""
    with tempfile.TemporaryDirectory(prefix="tsr-bench-") as d:
        service = Service(
            ServiceConfig(
                cluster="local", state_dir=Path(d), round_s=2.0, restart_cost_s=3.0, pg_timeout_s=30.0
            )
        )
        service.start()
        server, thread, url = serve(service)
        try:
            with httpx.Client(base_url=url, timeout=60) as c:
                return rescale_rounds(service, c, n)
        finally:
            server.should_exit = True
            thread.join(30)
            service.stop()


def submit_to_running(n_jobs: int, n_rescales: int = 0) -> dict:
    with tempfile.TemporaryDirectory(prefix="tsr-bench-") as d:
        service = Service(ServiceConfig(cluster="local", state_dir=Path(d), round_s=5.0, pg_timeout_s=30.0))
        t0 = time.perf_counter()
        service.start()
        startup = time.perf_counter() - t0
        server, thread, url = serve(service)
        times, runs = [], []
        try:
            with httpx.Client(base_url=url, timeout=60) as c:
                for i in range(n_jobs):
                    t = time.perf_counter()
                    jid = c.post("/api/jobs", json={**JOB, "name": f"bench-{i}"}).json()["job"]["id"]
                    while True:
                        j = c.get(f"/api/jobs/{jid}").json()
                        if j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
                            break
                        time.sleep(0.05)
                    if j["state"] != "SUCCEEDED":
                        raise RuntimeError(f"bench job {jid} ended {j['state']}: {j['error']}")
                    running = j["started_at"] - j["submitted_at"]  # the server's own clock: state RUNNING set
                    times.append(running)
                    runs.append({"job": jid, "submit_to_running_s": running, "cell": j["cell"],
                                 "submit_to_done_s": time.perf_counter() - t})  # fmt: skip
                    print(f"  job {jid}: RUNNING after {running:.2f} s on {j['cell']}", flush=True)
        finally:
            server.should_exit = True
            thread.join(30)
            service.stop()
    rescale = rescale_service(n_rescales) if n_rescales else {}
    return {
        "submit_to_running_s_p50": statistics.median(times),
        "submit_to_running_s_min": min(times),
        "submit_to_running_s_max": max(times),
        "service_start_s": startup,
        "jobs": runs,
        **rescale,
    }


def api_submits(n: int, concurrency: int = 64) -> dict:
    """The API server runs in its own process (``tessera server --api-only``), as in production, so the load
    generator does not share its interpreter."""
    import signal
    import socket
    import subprocess

    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="tsr-bench-") as d:
        cmd = [
            sys.executable,
            "-m",
            "tessera.cli",
            "server",
            "--api-only",
            "--state-dir",
            d,
            "--port",
            str(port),
        ]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 60
            while True:
                try:
                    if httpx.get(f"{url}/api/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.time() > deadline or proc.poll() is not None:
                    raise RuntimeError("the API server did not start")
                time.sleep(0.2)

            async def run():
                limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
                async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as c:
                    sem = asyncio.Semaphore(concurrency)

                    async def one(i: int):
                        async with sem:
                            r = await c.post(
                                "/api/jobs",
                                json={**JOB, "name": f"s{i}"},
                                headers={"Idempotency-Key": f"k{i}"},
                            )
                            return r.status_code

                    t = time.perf_counter()
                    codes = await asyncio.gather(*[one(i) for i in range(n)])
                    return time.perf_counter() - t, codes

            elapsed, codes = asyncio.run(run())
            stored = (
                httpx.get(f"{url}/api/jobs", params={"limit": 1}, timeout=60)
                .json()["counts"]
                .get("PENDING", 0)
            )
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    if stored != n or any(c != 201 for c in codes):
        raise RuntimeError(f"{stored} of {n} submissions stored; status codes {sorted(set(codes))}")
    return {
        "api_submits_per_s": n / elapsed,
        "api_submits": n,
        "api_concurrency": concurrency,
        "api_elapsed_s": elapsed,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=5)
    ap.add_argument("--submits", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=OUT, help="where to write the figures")
    ap.add_argument("--skip-api", action="store_true", help="keep the stored api_submits_per_s (reduced run)")
    ap.add_argument("--rescales", type=int, default=2, help="short-beside-long rounds (each gives a resize)")
    args = ap.parse_args()
    print(f"API: {args.submits} submissions over 64 connections (API-only server, SQLite WAL)…", flush=True)
    if args.skip_api and OUT.exists():
        old = json.loads(OUT.read_text())  # the committed figures
        api = {k: old[k] for k in ("api_submits_per_s", "api_submits", "api_concurrency", "api_elapsed_s")}
        api["api_from_earlier_run"] = True
    else:
        api = api_submits(args.submits)
    print(f"  api_submits_per_s = {api['api_submits_per_s']:.0f}", flush=True)
    print(f"embedded service: {args.jobs} tiny jobs, submit → RUNNING…", flush=True)
    run = submit_to_running(args.jobs, args.rescales)
    print(f"  submit_to_running_s_p50 = {run['submit_to_running_s_p50']:.2f} "
          f"(min {run['submit_to_running_s_min']:.2f}, max {run['submit_to_running_s_max']:.2f}); "
          f"service start {run['service_start_s']:.1f} s", flush=True)  # fmt: skip
    if "rescale_pause_s_p50" in run:
        print(f"  rescale_pause_s_p50 = {run['rescale_pause_s_p50']:.2f}, "
              f"cold_launch_s_p50 = {run['cold_launch_s_p50']:.2f}", flush=True)  # fmt: skip
    result = {
        "submit_to_running_s_p50": run["submit_to_running_s_p50"],
        "api_submits_per_s": api["api_submits_per_s"],
        **{k: run[k] for k in ("rescale_pause_s_p50", "cold_launch_s_p50") if k in run},
        **{k: v for k, v in run.items() if k != "submit_to_running_s_p50"},
        **{k: v for k, v in api.items() if k != "api_submits_per_s"},
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

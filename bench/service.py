"""Service benchmark: how long a submitted job takes to run, and how many submissions the API stores per second.

    python bench/service.py [--jobs 5] [--submits 2000]

* ``submit_to_running_s_p50`` — the embedded default (local Ray emulating 2×A100-40GB + 2×V100-32GB): wall
  time from the HTTP submission of a tiny job (gpt-tiny, no GPU count) to its state RUNNING (scheduler round,
  Cell → Plan, placement group, one actor per device started with torch, model built, process group up).
  Jobs run one after another on an otherwise idle cluster; the median of ``--jobs``.
* ``api_submits_per_s`` — submissions stored per second through the HTTP API (``tessera server --api-only``
  in its own process: uvicorn, SQLite in WAL mode), ``--submits`` sent by 64 concurrent connections, each with
  its own Idempotency-Key; the run counts only if every one of them is found stored afterwards.

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


def submit_to_running(n_jobs: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="tsr-bench-") as d:
        service = Service(ServiceConfig(state_dir=Path(d), round_s=5.0, pg_timeout_s=30.0))
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
    return {
        "submit_to_running_s_p50": statistics.median(times),
        "submit_to_running_s_min": min(times),
        "submit_to_running_s_max": max(times),
        "service_start_s": startup,
        "jobs": runs,
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
    args = ap.parse_args()
    print(f"API: {args.submits} submissions over 64 connections (API-only server, SQLite WAL)…", flush=True)
    api = api_submits(args.submits)
    print(f"  api_submits_per_s = {api['api_submits_per_s']:.0f}", flush=True)
    print(f"embedded service: {args.jobs} tiny jobs, submit → RUNNING…", flush=True)
    run = submit_to_running(args.jobs)
    print(f"  submit_to_running_s_p50 = {run['submit_to_running_s_p50']:.2f} "
          f"(min {run['submit_to_running_s_min']:.2f}, max {run['submit_to_running_s_max']:.2f}); "
          f"service start {run['service_start_s']:.1f} s", flush=True)  # fmt: skip
    result = {
        "submit_to_running_s_p50": run["submit_to_running_s_p50"],
        "api_submits_per_s": api["api_submits_per_s"],
        **{k: v for k, v in run.items() if k != "submit_to_running_s_p50"},
        **{k: v for k, v in api.items() if k != "api_submits_per_s"},
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
        },
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()

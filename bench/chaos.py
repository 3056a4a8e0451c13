"""Chaos benchmark: kill the embedded service every way it can die while tiny jobs train, then check the record.

    python bench/chaos.py [--quick] [--seed 0] [--no-fuzz]

A ``tessera server`` (embedded Ray emulating the ``local`` cluster: node ``a100-0`` with 2×A100-40GB, the head,
and node ``v100-0`` with 2×V100-32GB) runs as a subprocess on a free loopback port with a throwaway state
directory. A rolling workload of tiny jobs (gpt-tiny, fp32, a checkpoint every ``CHECKPOINT_EVERY`` steps) keeps
``--active`` jobs in flight while, at seeded random moments (a seeded random wait once the service is steady),
the benchmark:

* **kills the server** (``kill -9`` of the server process only, as an operator's mistake or the OOM killer
  would; its Ray processes are orphaned) and starts it again on the same state directory and port;
* **kills one device worker** (``kill -9`` of a ``ray::DeviceWorker`` process of this service, found in
  ``/proc`` by the service's ``RAY_TMPDIR`` marker);
* **kills a whole emulated Ray node** (``kill -9`` of node ``v100-0``'s raylet and every process under it —
  its device workers and agents really die); its jobs must be re-placed on the GPUs left;
* **kills the server during a burst of keyed submissions** (``Idempotency-Key`` on each, every acknowledged
  key recorded); after the restart every key is submitted again: an acknowledged key must come back as the
  job stored the first time (200), never as a new one, and no key may be stored twice. Burst jobs exclude
  every GPU type of the cluster and ask to wait for resources (they stay PENDING and cost no GPU time) and are
  cancelled once checked.

The time to recover is measured from starting the new server process until every job that was RUNNING
before the kill is RUNNING again (or has ended). Steps redone per kill: the job's ``steps_done`` read just
before the kill minus the ``from_step`` of the allocation that replaced the killed one (and, where the
telemetry endpoint returns steps of several attempts, the steps a later attempt recorded again) — what the
service *recorded*; steps that workers ran but never reported are invisible to it.

Then schemathesis (its Python API) sends ``--fuzz-requests`` generated requests — valid and invalid paths,
queries, headers and bodies for every operation of the live server's ``/openapi.json`` — and counts 5xx
answers (every job a generated request creates is cancelled at once).

Writes ``bench/results/chaos.json`` (keys: server_kills, worker_kills, node_kills, jobs, jobs_lost,
jobs_duplicated, acks_missing, not_succeeded, max_steps_redone, checkpoint_interval_steps, recover_s_p50,
fuzz_requests, fuzz_server_errors, plus the details of every kill and every failure). ``--quick`` does fewer
kills with fewer, shorter jobs, and says ``"mode": "quick"`` in the file.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

for _k, _v in {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
}.items():
    os.environ.setdefault(_k, _v)

from tessera.service.config import ServiceConfig  # noqa: E402
from tessera.service.ray_backend import kill_leftovers  # noqa: E402

OUT = Path(__file__).parent / "results" / "chaos.json"
CHECKPOINT_EVERY = 10  # steps between checkpoints: the bound on steps redone per kill
KILLABLE_NODE = (
    "v100-0"  # the embedded `local` cluster's one non-head node (the head's raylet hosts the driver)
)
TRAIN = {
    "model": "gpt-tiny",
    "global_batch": 8,
    "seq_len": 64,
    "precision": "fp32",
    "learning_rate": 1e-3,
    "checkpoint_every_steps": CHECKPOINT_EVERY,
    "max_gpus": 2,
    "max_restarts": 20,  # the bench kills workers on purpose; their restarts must not fail a job
}
BURST = {"model": "gpt-tiny", "global_batch": 8, "seq_len": 64, "precision": "fp32", "steps": 5}
ENDED = ("SUCCEEDED", "FAILED", "CANCELLED")
UNSETTLED = ("STARTING", "RECOVERING", "RESIZING", "MIGRATING")


@dataclass(frozen=True)
class Plan:
    """How much chaos: counts of each kill, the workload's size and the fuzz budget."""

    server_kills: int
    burst_kills: int
    worker_kills: int
    node_kills: int
    active_jobs: int  # training jobs kept in flight while kills remain
    steps_per_job: int
    burst_size: int
    fuzz_requests: int
    settle_timeout_s: float
    drain_timeout_s: float


FULL = Plan(10, 3, 10, 3, 3, 1200, 300, 1000, 240.0, 900.0)
QUICK = Plan(2, 1, 2, 1, 2, 500, 150, 200, 180.0, 420.0)


# ------------------------------------------------------------------------------------------------ output
class Log:
    """Plain timestamped lines; with Rich progress of the kill schedule when stdout is a terminal."""

    def __init__(self) -> None:
        self.t0 = time.time()
        self.progress: Any = None

    def start(self, total_events: int) -> None:
        if sys.stdout.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(
                TextColumn("chaos"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True
            )
            self.task = self.progress.add_task("kills", total=total_events)
            self.progress.start()

    def __call__(self, msg: str) -> None:
        line = f"[{time.time() - self.t0:7.1f} s] {msg}"
        if self.progress is not None:
            self.progress.console.print(line, markup=False, highlight=False)
        else:
            print(line, flush=True)

    def advance(self) -> None:
        if self.progress is not None:
            self.progress.advance(self.task)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


# ------------------------------------------------------------------------------------------------ processes
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_env_has(pid: int, needle: bytes) -> bool:
    try:
        return needle in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def our_pids(marker: str) -> list[int]:
    """Processes of this service's embedded Ray (they carry ``RAY_TMPDIR=<marker>``)."""
    needle = f"RAY_TMPDIR={marker}".encode()
    return [
        int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and proc_env_has(int(p.name), needle)
    ]


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(p.name))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def device_worker_pids(marker: str) -> list[int]:
    return sorted(p for p in our_pids(marker) if (cmdline(p) or [""])[0].startswith("ray::DeviceWorker"))


def raylet_of(marker: str, node: str) -> int | None:
    for p in our_pids(marker):
        args = cmdline(p)
        if (
            args
            and args[0].endswith("/raylet")
            and any(a.startswith("--labels=") and f'"tessera.io/node": "{node}"' in a for a in args)
        ):
            return p
    return None


def sigkill(pids: list[int]) -> list[int]:
    done = []
    for p in pids:
        with contextlib.suppress(OSError):
            os.kill(p, signal.SIGKILL)
            done.append(p)
    return done


class Server:
    """``tessera server`` on a fixed port and state dir, started again after every kill."""

    def __init__(self, state: Path, port: int, round_s: float) -> None:
        self.state = state
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.round_s = round_s
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.marker = ServiceConfig(state_dir=state).ray_tmp_dir
        self.all: list[subprocess.Popen] = []

    def start(self, timeout_s: float = 240.0) -> float:
        """Start it; returns the seconds until /api/health answered."""
        self.starts += 1
        cmd = [sys.executable, "-m", "tessera.cli", "server", "--state-dir", str(self.state),
               "--port", str(self.port), "--round", str(self.round_s), "--cluster", "local"]  # fmt: skip
        log = self.state / f"server-{self.starts:02d}.log"
        t0 = time.time()
        with log.open("w") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.all.append(self.proc)
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/api/health", timeout=3).status_code == 200:
                    return time.time() - t0
            if time.time() - t0 > timeout_s:
                raise RuntimeError(
                    f"server did not answer within {timeout_s:.0f} s: {log.read_text()[-3000:]}"
                )
            time.sleep(0.3)

    def kill9(self) -> int:
        assert self.proc is not None
        pid = self.proc.pid
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=60)
        return pid

    def stop(self) -> None:
        """SIGTERM the live one (it checkpoints and shuts its Ray down), then make sure nothing of ours is left."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=90)
        for p in self.all:
            if p.poll() is None:
                p.kill()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
        kill_leftovers(self.marker)


# ------------------------------------------------------------------------------------------------ the API
class Api:
    """HTTP calls that wait out a server restart (connection errors are retried until ``patience_s``)."""

    def __init__(self, url: str) -> None:
        self.c = httpx.Client(base_url=url, timeout=60)

    def call(self, method: str, path: str, patience_s: float = 120.0, **kw: Any) -> httpx.Response:
        deadline = time.time() + patience_s
        while True:
            try:
                return self.c.request(method, path, **kw)
            except httpx.TransportError:
                if time.time() > deadline:
                    raise
                time.sleep(0.5)

    def jobs(self) -> list[dict[str, Any]]:
        r = self.call("GET", "/api/jobs", params={"limit": 10000})
        r.raise_for_status()
        return r.json()["jobs"]

    def job(self, jid: int) -> dict[str, Any]:
        r = self.call("GET", f"/api/jobs/{jid}")
        r.raise_for_status()
        return r.json()


# ------------------------------------------------------------------------------------------------ the run
@dataclass
class Chaos:
    plan: Plan
    seed: int
    server: Server
    log: Log
    rng: random.Random = field(init=False)
    api: Api = field(init=False)
    train_keys: dict[str, int] = field(default_factory=dict)  # Idempotency-Key → job id acknowledged
    submitted: int = 0
    kills: list[dict[str, Any]] = field(default_factory=list)
    snapshots: list[dict[str, Any]] = field(default_factory=list)  # (kill, job, attempt, steps_done)
    recover_s: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    bursts: list[dict[str, Any]] = field(default_factory=list)
    burst_body: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.api = Api(self.server.url)

    def fail(self, msg: str) -> None:
        self.failures.append(msg)
        self.log(f"FINDING: {msg}")

    # ------------------------------------------------------------ workload
    def train_jobs(self) -> list[dict[str, Any]]:
        return [j for j in self.api.jobs() if j["name"].startswith("chaos-t")]

    def top_up(self, more: bool) -> None:
        """Keep ``active_jobs`` training jobs in flight while kills remain."""
        if not more:
            return
        live = [j for j in self.train_jobs() if j["state"] not in ENDED]
        for _ in range(self.plan.active_jobs - len(live)):
            key = f"chaos-t{self.submitted:03d}"
            body = {**TRAIN, "name": key, "steps": self.plan.steps_per_job, "seed": self.submitted}
            r = self.api.call("POST", "/api/jobs", json=body, headers={"Idempotency-Key": key})
            if r.status_code not in (200, 201):
                self.fail(f"training submission {key} refused: {r.status_code} {r.text[:300]}")
                return
            self.train_keys[key] = r.json()["job"]["id"]
            self.submitted += 1
            self.log(f"submitted {key} → job {self.train_keys[key]} ({self.plan.steps_per_job} steps)")

    def settle(self, what: str) -> None:
        """Wait until no training job is starting or recovering and at least one runs (or none is left)."""
        t0 = time.time()
        while time.time() - t0 < self.plan.settle_timeout_s:
            js = [j for j in self.train_jobs() if j["state"] not in ENDED]
            if not any(j["state"] in UNSETTLED for j in js) and (
                any(j["state"] == "RUNNING" for j in js) or not js
            ):
                return
            time.sleep(0.5)
        states = {j["id"]: j["state"] for j in self.train_jobs() if j["state"] not in ENDED}
        self.fail(f"not settled {self.plan.settle_timeout_s:.0f} s {what}: {states}; {self.scheduler_age()}")

    def scheduler_age(self) -> str:
        """How long ago the scheduler last ran a round (a dead control loop stops them; /api/health may not say)."""
        with contextlib.suppress(Exception):
            at = self.api.call("GET", "/api/cluster", patience_s=10).json()["last_round"]["at"]
            return f"the scheduler's last round was {time.time() - at:.0f} s ago"
        return "the scheduler's last round is unknown"

    def server_log_errors(self) -> list[str]:
        """Uncaught exceptions in the servers' logs (a thread that died, the control loop's errors)."""
        out: dict[str, str] = {}  # the exception's line → where it was first seen
        for f in sorted(self.server.state.glob("server-*.log")):
            lines = f.read_text(errors="replace").splitlines()
            for i, line in enumerate(lines):
                if line.startswith(("Exception in thread", "Traceback")) or "control loop" in line:
                    end = next((k for k in range(i + 1, min(i + 80, len(lines)))
                                if lines[k] and not lines[k].startswith((" ", "Traceback"))), None)  # fmt: skip
                    if end is not None:
                        out.setdefault(lines[end].strip()[:400], f"{f.name}: {line.strip()[:80]}")
        return [f"{where} … {exc}" for exc, where in out.items()]

    def snapshot(self, kill: int, only: set[int] | None = None) -> list[dict[str, Any]]:
        """Just before a kill: every running training job's attempt and steps done."""
        snap = []
        for j in self.train_jobs():
            if j["state"] not in ENDED and (only is None or j["id"] in only):
                d = self.api.job(j["id"])
                if d["state"] not in ENDED and d["attempt"] > 0:
                    snap.append({"kill": kill, "job": d["id"], "attempt": d["attempt"], "steps_done": d["steps_done"],
                                 "state": d["state"], "nodes": sorted({s["node"] for s in
                                                                      (d["allocation"] or {}).get("slots", [])})})  # fmt: skip
        self.snapshots.extend(snap)
        return snap

    def affected(self, kill: int, jobs: set[int]) -> None:
        """Keep only the snapshots of the jobs this kill hit (the others' next attempts have other causes)."""
        self.snapshots = [s for s in self.snapshots if s["kill"] != kill or s["job"] in jobs]

    def wait_running(self, ids: set[int], timeout_s: float) -> float | None:
        """Seconds until every job in ``ids`` is RUNNING or ended (None: timed out)."""
        t0 = time.time()
        while time.time() - t0 < timeout_s:
            js = {j["id"]: j["state"] for j in self.train_jobs()}
            if all(js.get(i) == "RUNNING" or js.get(i) in ENDED for i in ids):
                return time.time() - t0
            time.sleep(0.25)
        return None

    # ------------------------------------------------------------ kills
    def pause(self) -> float:
        d = self.rng.uniform(1.0, 6.0)
        time.sleep(d)
        return d

    def kill_server(self, n: int, burst: bool) -> None:
        self.settle(f"before server kill {n}")
        wait = self.pause()
        snap = self.snapshot(n)
        running = {s["job"] for s in snap if s["state"] == "RUNNING"}
        rec: dict[str, Any] = {"n": n, "kind": "burst" if burst else "server", "after_s": round(wait, 2)}
        if burst:
            rec.update(self.burst_and_kill(n))
        else:
            rec["pid"] = self.server.kill9()
        t_kill = time.time()
        up_s = self.server.start()
        rec["server_up_s"] = round(up_s, 2)
        rec["running_before"] = sorted(running)
        rec["steps_done_before"] = {s["job"]: s["steps_done"] for s in snap}
        if burst:
            rec.update(self.check_burst(rec))
        back = self.wait_running(running, self.plan.settle_timeout_s)
        if back is None:
            self.fail(f"kill {n} ({rec['kind']}): jobs {sorted(running)} not all RUNNING again "
                      f"{self.plan.settle_timeout_s:.0f} s after the restart")  # fmt: skip
        else:
            rec["recover_s"] = round(up_s + back, 2)
            if running:  # with no job running there is nothing to recover: not a sample
                self.recover_s.append(up_s + back)
        rec["down_s"] = round(time.time() - t_kill, 2)
        self.kills.append(rec)
        self.log(f"kill {n}: {rec['kind']} kill -9 after {wait:.1f} s; server up in {up_s:.1f} s; "
                 f"jobs {sorted(running)} RUNNING again "
                 + (f"{rec['recover_s']:.1f} s after the restart" if "recover_s" in rec else "— NOT within the limit"))  # fmt: skip

    def kill_worker(self, n: int) -> None:
        self.settle(f"before worker kill {n}")
        wait = self.pause()
        pids = device_worker_pids(self.server.marker)
        if not pids:
            self.log(f"kill {n}: no device worker alive (jobs between allocations); waiting for one")
            t0 = time.time()
            while not pids and time.time() - t0 < 60:
                time.sleep(0.5)
                pids = device_worker_pids(self.server.marker)
            if not pids:
                self.fail(f"kill {n}: no device worker process found to kill")
                return
        before = {j["id"]: (j["restarts"], j["state"]) for j in self.train_jobs()}
        snap = self.snapshot(n)
        victim = self.rng.choice(pids)
        sigkill([victim])
        t0 = time.time()
        # which job lost it: the one whose restarts count goes up (or that leaves RUNNING)
        job = None
        while time.time() - t0 < 120 and job is None:
            for j in self.train_jobs():
                r, _ = before.get(j["id"], (j["restarts"], None))
                if j["restarts"] > r:
                    job = j["id"]
            time.sleep(0.3)
        rec = {"n": n, "kind": "worker", "after_s": round(wait, 2), "pid": victim, "job": job,
               "steps_done_before": {s["job"]: s["steps_done"] for s in snap}}  # fmt: skip
        self.affected(n, {job} if job is not None else set())
        if job is None:
            self.fail(f"kill {n}: worker pid {victim} killed, but no job's restart count rose within 120 s")
        else:
            back = self.wait_running({job}, self.plan.settle_timeout_s)
            rec["recover_s"] = round(time.time() - t0, 2) if back is not None else None
            if back is None:
                self.fail(f"kill {n}: job {job} (worker pid {victim}) not RUNNING again within the limit")
        self.kills.append(rec)
        self.log(f"kill {n}: worker pid {victim} (job {job}) kill -9 after {wait:.1f} s; "
                 f"running again after {rec.get('recover_s')} s")  # fmt: skip

    def kill_node(self, n: int) -> None:
        self.settle(f"before node kill {n}")
        wait = self.pause()
        raylet = raylet_of(self.server.marker, KILLABLE_NODE)
        if raylet is None:
            self.fail(f"kill {n}: no raylet of node {KILLABLE_NODE} found")
            return
        cl = self.api.call("GET", "/api/cluster").json()
        on_node = {g["job_id"] for nd in cl["nodes"] if nd["name"] == KILLABLE_NODE for g in nd["gpus"]
                   if g["job_id"] is not None}  # fmt: skip
        snap = self.snapshot(n)
        procs = [raylet, *descendants(raylet)]
        killed = sigkill(procs)
        t0 = time.time()
        time.sleep(1.0)
        survivors = [p for p in killed if Path(f"/proc/{p}").exists() and not _zombie(p)]
        rec: dict[str, Any] = {"n": n, "kind": "node", "node": KILLABLE_NODE, "after_s": round(wait, 2),
                               "pids": killed, "jobs_on_node": sorted(on_node),
                               "steps_done_before": {s["job"]: s["steps_done"] for s in snap}}  # fmt: skip
        self.affected(n, on_node)
        if survivors:
            self.fail(f"kill {n}: node {KILLABLE_NODE} processes {survivors} still alive after SIGKILL")
        # the service must notice the node is gone, and re-place its jobs on the GPUs left
        dead_s = None
        while time.time() - t0 < 120:
            nodes = {nd["name"]: nd["alive"] for nd in self.api.call("GET", "/api/cluster").json()["nodes"]}
            if nodes.get(KILLABLE_NODE) is False:
                dead_s = time.time() - t0
                break
            time.sleep(0.5)
        rec["node_seen_dead_s"] = round(dead_s, 2) if dead_s is not None else None
        if dead_s is None:
            self.fail(
                f"kill {n}: /api/cluster still shows {KILLABLE_NODE} alive 120 s after its processes died"
            )
        deadline = time.time() + self.plan.settle_timeout_s
        replaced: dict[int, Any] = {}
        while time.time() < deadline and len(replaced) < len(on_node):
            for jid in on_node - set(replaced):
                d = self.api.job(jid)
                nodes_now = {s["node"] for s in (d["allocation"] or {}).get("slots", [])}
                if d["state"] in ENDED:
                    replaced[jid] = d["state"]
                elif d["state"] == "RUNNING" and nodes_now and KILLABLE_NODE not in nodes_now:
                    replaced[jid] = sorted(nodes_now)
            time.sleep(0.5)
        rec["replaced"] = {str(k): v for k, v in replaced.items()}
        rec["recover_s"] = round(time.time() - t0, 2)
        missing = sorted(on_node - set(replaced))
        if missing:
            states = {j: self.api.job(j)["state"] for j in missing}
            self.fail(f"kill {n}: jobs {missing} of node {KILLABLE_NODE} not re-placed on the GPUs left "
                      f"within {self.plan.settle_timeout_s:.0f} s (states {states})")  # fmt: skip
        self.kills.append(rec)
        self.log(f"kill {n}: node {KILLABLE_NODE} (raylet {raylet} + {len(killed) - 1} processes) kill -9 after "
                 f"{wait:.1f} s; seen dead after {rec['node_seen_dead_s']} s; its jobs {sorted(on_node)} → "
                 f"{rec['replaced']} after {rec['recover_s']} s")  # fmt: skip

    # ------------------------------------------------------------ bursts
    def pick_burst_body(self) -> dict[str, Any]:
        """A job no GPU of the cluster may run (every type excluded): stored and PENDING, never launched."""
        if self.burst_body is None:
            types = sorted(self.api.call("GET", "/api/cluster").json()["by_type"])
            unplaceable = {**BURST, "exclude_gpu_types": types, "priority": -100}
            # a server that refuses infeasible jobs queues them when asked to wait for resources
            for body in ({**unplaceable, "wait_for_resources": True}, unplaceable):
                r = self.api.call("POST", "/api/jobs", json={**body, "name": "chaos-probe"})
                if r.status_code == 201:
                    self.api.call("POST", f"/api/jobs/{r.json()['job']['id']}/cancel")
                    break
            else:  # refused: plain tiny jobs instead, cancelled right after the check
                self.log(f"an unplaceable burst job is refused ({r.status_code} {r.text[:200]}); bursts use "
                         "runnable tiny jobs")  # fmt: skip
                body = {**BURST, "priority": -100}
            self.log(f"burst jobs: {body}")
            self.burst_body = body
        return self.burst_body

    def burst_and_kill(self, n: int) -> dict[str, Any]:
        body = self.pick_burst_body()
        size = self.plan.burst_size
        kill_after = self.rng.randint(size // 5, size * 3 // 5)  # acknowledged answers before the kill
        acked: dict[str, int] = {}
        errors: Counter[str] = Counter()

        async def run() -> int:
            limits = httpx.Limits(max_connections=16, max_keepalive_connections=16)
            async with httpx.AsyncClient(base_url=self.server.url, limits=limits, timeout=30) as c:
                sem = asyncio.Semaphore(16)
                killed = asyncio.Event()
                pid_box: list[int] = []

                async def one(i: int) -> None:
                    key = f"chaos-b{n:02d}-{i:04d}"
                    async with sem:
                        if killed.is_set():
                            errors["not sent (server dead)"] += 1
                            return
                        try:
                            r = await c.post(
                                "/api/jobs", json={**body, "name": key}, headers={"Idempotency-Key": key}
                            )
                        except httpx.HTTPError as e:
                            errors[type(e).__name__] += 1
                            return
                    if r.status_code in (200, 201):
                        acked[key] = r.json()["job"]["id"]
                        if len(acked) >= kill_after and not killed.is_set():
                            killed.set()
                            pid_box.append(self.server.kill9())
                    else:
                        errors[f"HTTP {r.status_code}"] += 1

                await asyncio.gather(*[one(i) for i in range(size)])
                if not killed.is_set():
                    pid_box.append(self.server.kill9())
                return pid_box[0]

        pid = asyncio.run(run())
        self.log(f"burst {n}: {len(acked)} of {size} keyed submissions acknowledged before kill -9 of pid {pid}; "
                 f"unanswered: {dict(errors)}")  # fmt: skip
        return {"pid": pid, "burst_size": size, "burst_acked": dict(acked), "burst_errors": dict(errors)}

    def check_burst(self, rec: dict[str, Any]) -> dict[str, Any]:
        """After the restart: every key again. Acknowledged ones must come back as the same job (200)."""
        body = self.pick_burst_body()
        acked: dict[str, int] = rec.pop("burst_acked")
        n = rec["n"]
        missing, changed, new, ids = [], [], 0, set()
        for i in range(rec["burst_size"]):
            key = f"chaos-b{n:02d}-{i:04d}"
            r = self.api.call(
                "POST", "/api/jobs", json={**body, "name": key}, headers={"Idempotency-Key": key}
            )
            if r.status_code not in (200, 201):
                self.fail(f"burst {n}: resubmitting {key} got {r.status_code} {r.text[:200]}")
                continue
            jid = r.json()["job"]["id"]
            ids.add(jid)
            if key in acked:
                if r.status_code == 201:
                    missing.append(key)
                elif jid != acked[key]:
                    changed.append((key, acked[key], jid))
            elif r.status_code == 201:
                new += 1
        for key in missing:
            self.fail(
                f"burst {n}: {key} was acknowledged as job {acked[key]} but is not stored after the restart"
            )
        for key, a, b in changed:
            self.fail(f"burst {n}: {key} was acknowledged as job {a} but the retry returned job {b}")
        for jid in ids:  # they have been checked: out of the way
            self.api.call("POST", f"/api/jobs/{jid}/cancel")
        self.bursts.append({"n": n, "acked": len(acked), "acks_missing": len(missing), "acks_changed": len(changed),
                            "stored_by_retry": new})  # fmt: skip
        self.log(f"burst {n}: after the restart {len(acked)} acknowledged keys checked: {len(missing)} missing, "
                 f"{len(changed)} changed; {new} unacknowledged keys stored by the retry")  # fmt: skip
        return {
            "burst_acked": len(acked),
            "burst_acks_missing": len(missing),
            "burst_acks_changed": len(changed),
        }

    # ------------------------------------------------------------ the schedule
    def schedule(self) -> list[str]:
        """Seeded: segments between server kills; worker kills spread over them; node kills in distinct
        segments (a killed node comes back only with the next server start)."""
        p = self.plan
        restarts = ["server"] * p.server_kills + ["burst"] * p.burst_kills
        self.rng.shuffle(restarts)
        segments: list[list[str]] = [[] for _ in range(len(restarts) + 1)]
        for _ in range(p.worker_kills):
            segments[self.rng.randrange(len(segments))].append("worker")
        for s in self.rng.sample(range(len(segments)), min(p.node_kills, len(segments))):
            segments[s].append("node")
        out: list[str] = []
        for i, seg in enumerate(segments):
            self.rng.shuffle(seg)
            out.extend(seg)
            if i < len(restarts):
                out.append(restarts[i])
        return out

    def run(self, events: list[str]) -> None:
        for n, kind in enumerate(events, 1):
            self.top_up(True)
            if kind in ("server", "burst"):
                self.kill_server(n, burst=kind == "burst")
            elif kind == "worker":
                self.kill_worker(n)
            else:
                self.kill_node(n)
            self.log.advance()

    def drain(self) -> list[dict[str, Any]]:
        t0 = time.time()
        last, last_t = "", 0.0
        while time.time() - t0 < self.plan.drain_timeout_s:
            js = self.train_jobs()
            live = [j for j in js if j["state"] not in ENDED]
            states = ", ".join(f"{j['id']}:{j['state']}" for j in live)
            if states != last or time.time() - last_t > 30:
                text = ", ".join(f"{j['id']}:{j['state']}@{j['steps_done']}" for j in live)
                self.log(f"draining: {len(live)} training jobs left ({text})")
                last, last_t = states, time.time()
            if not live:
                return js
            time.sleep(2.0)
        self.fail(f"training jobs still not ended {self.plan.drain_timeout_s:.0f} s after the last kill")
        return self.train_jobs()

    # ------------------------------------------------------------ the record
    def steps_redone(self) -> tuple[int | None, list[dict[str, Any]]]:
        per_kill = []
        details: dict[int, dict[str, Any]] = {}
        for s in self.snapshots:
            d = details.get(s["job"]) or details.setdefault(s["job"], self.api.job(s["job"]))
            nxt = sorted((h for h in d["history"] if h["attempt"] > s["attempt"]), key=lambda h: h["attempt"])
            if not nxt:
                continue  # finished in the attempt it had
            redone = max(0, s["steps_done"] - (nxt[0]["from_step"] or 0))
            per_kill.append({"kill": s["kill"], "job": s["job"], "attempt": s["attempt"], "steps_done": s["steps_done"],
                             "next_attempt": nxt[0]["attempt"], "next_kind": nxt[0]["kind"],
                             "from_step": nxt[0]["from_step"], "redone": redone})  # fmt: skip
        # the telemetry's own view, where it shows the same step recorded by more than one attempt
        for jid in sorted(details):
            r = self.api.call("GET", f"/api/jobs/{jid}/telemetry", params={"max_points": 100000})
            if r.status_code != 200:
                continue
            by_attempt: dict[int, set[int]] = {}
            for row in r.json().get("steps", []):
                by_attempt.setdefault(int(row.get("attempt") or 0), set()).add(int(row["step"]))
            seen: set[int] = set()
            for a in sorted(by_attempt):
                again = len(by_attempt[a] & seen)
                if again:
                    per_kill.append({"job": jid, "attempt": a, "source": "telemetry", "redone": again})
                seen |= by_attempt[a]
        return (max((p["redone"] for p in per_kill), default=0) if per_kill else None), per_kill


def p50(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 2) if xs else None


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


# ------------------------------------------------------------------------------------------------ fuzz
def fuzz(url: str, target: int, seed: int, log: Log, timeout_s: float = 60.0) -> dict[str, Any]:
    """Schemathesis against the live server: at least ``target`` generated requests (valid and invalid, every
    operation); every 5xx recorded with its request. Jobs the generated requests create are cancelled."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    ops = [r.ok() for r in schema.get_all_operations()]
    count = Counter()
    errors: list[str] = []
    timeouts: list[str] = []
    per_op = max(10, math.ceil(target / (2 * len(ops))))
    rounds = 0
    while sum(count.values()) < target and rounds < 6:
        for op in ops:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

                @hseed(seed + rounds)
                @given(case=op.as_strategy(generation_mode=mode))
                @settings(max_examples=per_op, deadline=None, suppress_health_check=list(HealthCheck),
                          database=None)  # fmt: skip
                def one(case: Any) -> None:
                    name = f"{case.method.upper()} {case.operation.path}"
                    count[name] += 1
                    try:
                        r = case.call(timeout=timeout_s)
                    except Exception as e:  # noqa: BLE001 - a hung or dropped request is a finding, not a crash
                        timeouts.append(f"{name} {case.formatted_path}: {type(e).__name__}")
                        return
                    if r.status_code >= 500:
                        errors.append(f"{name} {case.formatted_path} body={str(case.body)[:200]!r}: "
                                      f"{r.status_code} {r.text[:300]}")  # fmt: skip
                    elif r.status_code == 201 and case.operation.path == "/api/jobs":
                        with contextlib.suppress(Exception):
                            httpx.post(f"{url}/api/jobs/{r.json()['job']['id']}/cancel", timeout=30)

                with contextlib.suppress(Unsatisfiable):  # nothing invalid to generate for this operation
                    one()
        rounds += 1
        log(
            f"fuzz: {sum(count.values())} requests so far, {len(errors)} server errors, {len(timeouts)} timeouts"
        )
    return {
        "fuzz_requests": sum(count.values()),
        "fuzz_server_errors": len(errors),
        "fuzz_timeouts": len(timeouts),
        "fuzz_by_operation": dict(sorted(count.items())),
        "fuzz_errors": errors[:20],
        "fuzz_timeout_samples": timeouts[:10],
    }


# ------------------------------------------------------------------------------------------------ main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer kills, fewer and shorter jobs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-fuzz", action="store_true", help="skip the schemathesis run")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument(
        "--keep-state", action="store_true", help="keep the state dir (server logs) for inspection"
    )
    args = ap.parse_args()
    plan = QUICK if args.quick else FULL
    state = Path(tempfile.mkdtemp(prefix="tsr-chaos-"))
    server = Server(state, free_port(), round_s=2.0)
    log = Log()
    chaos = Chaos(plan, args.seed, server, log)
    events = chaos.schedule()
    log.start(len(events))
    t_start = time.time()
    log(f"chaos ({'quick' if args.quick else 'full'}, seed {args.seed}): {Counter(events)} over {len(events)} "
        f"events; state {state}; server on {server.url}")  # fmt: skip
    result: dict[str, Any] = {"mode": "quick" if args.quick else "full", "seed": args.seed}
    try:
        up = server.start()
        log(f"server up in {up:.1f} s")
        chaos.run(events)
        chaos.top_up(False)
        log("all kills done; waiting for the training jobs to end")
        final_train = chaos.drain()
        everything = chaos.api.jobs()
        names = Counter(j["name"] for j in everything)
        dup = {k: v for k, v in names.items() if v > 1}
        by_id = {j["id"]: j for j in everything}
        lost = [k for k, jid in chaos.train_keys.items() if jid not in by_id or by_id[jid]["name"] != k]
        for k in lost:
            chaos.fail(f"training job {k} (acknowledged as job {chaos.train_keys[k]}) is missing at the end")
        for k, v in dup.items():
            chaos.fail(f"job name {k} stored {v} times")
        bad = [j for j in final_train if j["state"] != "SUCCEEDED"]
        for j in bad:
            d = chaos.api.job(j["id"])
            chaos.fail(
                f"job {j['id']} ({j['name']}) ended {j['state']} at step {j['steps_done']}: {d['error']}"
            )
        max_redone, redone = chaos.steps_redone()
        log(f"steps redone per kill: max {max_redone} (checkpoint interval {CHECKPOINT_EVERY})")
        if max_redone is not None and max_redone > CHECKPOINT_EVERY:
            for r in redone:
                if r["redone"] > CHECKPOINT_EVERY:
                    chaos.fail(f"more steps redone than the checkpoint interval: {r}")
        fz: dict[str, Any] = {"fuzz_requests": 0, "fuzz_server_errors": None}
        if not args.no_fuzz:
            log(
                f"fuzz: schemathesis, ≥ {plan.fuzz_requests} generated requests against {server.url}/openapi.json"
            )
            fz = fuzz(server.url, plan.fuzz_requests, args.seed, log)
            for e in fz.get("fuzz_errors", []):
                chaos.fail(f"fuzz: {e}")
        for e in chaos.server_log_errors():
            chaos.fail(f"server log: {e}")
        kinds = Counter(k["kind"] for k in chaos.kills)
        acks = sum(b["acks_missing"] + b["acks_changed"] for b in chaos.bursts)
        result = {
            "mode": "quick" if args.quick else "full",
            "seed": args.seed,
            "server_kills": kinds["server"] + kinds["burst"],
            "worker_kills": kinds["worker"],
            "node_kills": kinds["node"],
            "jobs": len(chaos.train_keys),
            "jobs_lost": len(lost),
            "jobs_duplicated": sum(v - 1 for v in dup.values()),
            "acks_missing": acks,
            "not_succeeded": len(bad),
            "max_steps_redone": max_redone,
            "checkpoint_interval_steps": CHECKPOINT_EVERY,
            "recover_s_p50": round(statistics.median(chaos.recover_s), 2) if chaos.recover_s else None,
            "fuzz_requests": fz["fuzz_requests"],
            "fuzz_server_errors": fz["fuzz_server_errors"],
            "burst_kills": kinds["burst"],
            "burst_acked": sum(b["acked"] for b in chaos.bursts),
            "recover_s_max": round(max(chaos.recover_s), 2) if chaos.recover_s else None,
            "server_up_s_p50": p50([k["server_up_s"] for k in chaos.kills if "server_up_s" in k]),
            "worker_recover_s_p50": p50([k["recover_s"] for k in chaos.kills if k["kind"] == "worker"]),
            "node_recover_s_p50": p50([k["recover_s"] for k in chaos.kills if k["kind"] == "node"]),
            "node_seen_dead_s_p50": p50([k["node_seen_dead_s"] for k in chaos.kills if k["kind"] == "node"]),
            "steps_per_job": plan.steps_per_job,
            "wall_s": round(time.time() - t_start, 1),
            "failures": chaos.failures,
            "kills": chaos.kills,
            "bursts": chaos.bursts,
            "steps_redone": redone,
            "jobs_final": [
                {k: j[k] for k in ("id", "name", "state", "steps_done", "restarts", "rescales")}
                for j in final_train
            ],  # fmt: skip
            **{k: v for k, v in fz.items() if k not in ("fuzz_requests", "fuzz_server_errors")},
            "machine": {
                "cpus": os.cpu_count(),
                "python": sys.version.split()[0],
                "platform": platform.platform(),
            },
        }
    except BaseException as e:  # an interrupted run still leaves its record (marked) behind
        result.update({"interrupted": f"{type(e).__name__}: {e}", "failures": chaos.failures, "kills": chaos.kills,
                       "bursts": chaos.bursts, "wall_s": round(time.time() - t_start, 1)})  # fmt: skip
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        raise
    finally:
        log("stopping the server")
        server.stop()
        log.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for k in ("mode", "server_kills", "worker_kills", "node_kills", "jobs", "jobs_lost", "jobs_duplicated",
              "acks_missing", "not_succeeded", "max_steps_redone", "checkpoint_interval_steps", "recover_s_p50",
              "fuzz_requests", "fuzz_server_errors", "burst_acked", "server_up_s_p50", "worker_recover_s_p50",
              "node_recover_s_p50", "node_seen_dead_s_p50", "wall_s"):  # fmt: skip
        print(f"  {k} = {result[k]}", flush=True)
    print(f"  failures: {len(chaos.failures)}", flush=True)
    for f in chaos.failures:
        print(f"    - {f}", flush=True)
    print(f"wrote {args.out}")
    if not args.keep_state:
        import shutil

        shutil.rmtree(state, ignore_errors=True)
    else:
        print(f"state kept in {state}")


if __name__ == "__main__":
    main()

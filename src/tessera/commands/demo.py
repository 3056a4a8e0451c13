"""`tessera demo`: the whole service in one command, on a laptop.

Starts the embedded service (a local Ray whose two nodes are this machine's CPU as two device types: a
``cpu-core`` — one pinned core — and a ``cpu-half`` that shares its core with a busy neighbour, so it really runs
slower), submits the example jobs through the HTTP API without any GPU counts, shows a live table until every
job has finished, and prints a summary: per job the devices and plan it ran on, its rescales, its completion
time, and the estimated vs measured iteration time — estimates for the devices that ran, from profiles of this
machine taken once per model. Everything it started (Ray processes
included) is stopped before it returns; its state lives in a temporary directory unless ``--state-dir``.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from tessera.commands.common import allocation_steps, estimate_error, knew_configuration, measured_step
from tessera.commands.jobs import duration, gpus_text, jobs_table, plan_text

console = Console()
if not console.is_terminal:
    console = Console(width=200)
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"  # a source checkout's examples folder


def demo_jobs(data_path: str) -> list[dict[str, Any]]:
    """The demo's jobs: what to train, never which or how many GPUs (``max_gpus`` caps one of them, as a user
    might). The same specs are in ``examples/demo/*.yaml``."""
    text = {"global_batch": 8, "seq_len": 64, "precision": "fp32", "learning_rate": 3e-3, "data": data_path}
    jobs = [
        {"name": "gpt-short", "model": "gpt-tiny", "steps": 40, **text, "checkpoint_every_steps": 20},
        {
            "name": "gpt-capped",
            "model": "gpt-tiny",
            "steps": 240,
            "max_gpus": 1,
            **text,
            "checkpoint_every_steps": 40,
        },
        {"name": "llama-long", "model": "llama-tiny", "steps": 600, **text, "checkpoint_every_steps": 100},
    ]
    model = EXAMPLES / "blob_classifier.py"
    if model.is_file():  # a user's own model through an entrypoint (present in a source checkout)
        jobs.append(
            {
                "name": "blob-classifier",
                "model": "blob-classifier",
                "entrypoint": f"{model}:BlobClassifier",
                "global_batch": 32,
                "steps": 150,
                "precision": "fp32",
                "learning_rate": 3e-3,
                "checkpoint_every_steps": 50,
            }
        )
    return jobs


def _listening_socket(host: str, port: int) -> socket.socket:
    """The API's socket, bound now (``port`` 0: any free one): a port only looked up here and bound after the
    embedded Ray started was once taken by one of Ray's processes in between ("address already in use")."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def demo(
    state_dir: Path | None = typer.Option(
        None, "--state-dir", help="keep the store here (default: a temporary directory)"
    ),
    port: int = typer.Option(0, "--port", help="API/dashboard port (default: any free port)"),
    round_s: float = typer.Option(5.0, "--round", min=0.5, help="seconds between scheduling rounds"),
    timeout_s: float = typer.Option(900.0, "--timeout", help="give up after this many seconds"),
) -> None:
    """Start the embedded service, submit the example jobs (no GPU counts), watch them to the end, summarize."""
    import uvicorn

    from tessera.service.client import Client, ClientError
    from tessera.service.config import ServiceConfig
    from tessera.service.corpus import CORPUS
    from tessera.service.server import Service

    tmp = None
    if state_dir is None:
        tmp = Path(tempfile.mkdtemp(prefix="tessera-demo-"))
        state_dir = tmp
    state_dir.mkdir(parents=True, exist_ok=True)
    data = state_dir / "corpus.txt"
    data.write_text(CORPUS)
    sock = _listening_socket(ServiceConfig().host, port)
    config = ServiceConfig(
        port=sock.getsockname()[1], state_dir=state_dir, round_s=round_s, restart_cost_s=5.0, pg_timeout_s=30.0,
        watchdog_s=120.0, backoff_s=2.0, log_every=20,
    )  # fmt: skip
    service = Service(config)
    server = uvicorn.Server(
        uvicorn.Config(service.app(), host=config.host, port=config.port, log_level="warning")
    )
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="tessera-demo-api", daemon=True
    )
    ok = False
    t0 = time.time()
    try:
        with console.status(
            f"starting the embedded service (local Ray, cluster {config.cluster}: this machine's CPU as devices)…"
        ):
            service.start()  # in the main thread: Ray installs signal handlers
            thread.start()
            while not server.started:
                if not thread.is_alive():
                    raise typer.Exit(1)
                time.sleep(0.1)
        console.print(
            f"service up in {time.time() - t0:.0f} s: dashboard [bold]{config.url}/[/] · API {config.url}/docs",
            highlight=False,
        )
        with Client(config.url) as c:
            for spec in demo_jobs(str(data)):
                j = c.submit(spec)["job"]
                console.print(
                    f"submitted job {j['id']} {j['name']} ({j['model']}, {j['total_steps']} steps) — no GPU count",
                    highlight=False,
                )
            ok = _watch(c, timeout_s)
            _summary(c)
    except ClientError as e:
        console.print(f"[bold red]error:[/] {e}", highlight=False)
    finally:
        with console.status("stopping the service and its Ray processes…"):
            server.should_exit = True
            thread.join(timeout=60)
            sock.close()
            service.stop()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    console.print(
        f"demo {'finished' if ok else 'did not finish'} in {duration(time.time() - t0)}", highlight=False
    )
    if not ok:
        raise typer.Exit(1)


def _watch(c: Any, timeout_s: float) -> bool:
    """A live table on a terminal; elsewhere (CI logs) one line per job whenever its state or GPUs change."""
    deadline = time.time() + timeout_s
    if console.is_terminal:
        with Live(console=console, refresh_per_second=2, transient=False) as live:
            while True:
                jobs, cluster = c.jobs()["jobs"], c.cluster()
                live.update(Group(_cluster_table(cluster), jobs_table(jobs, title="jobs (tessera list)")))
                if _ended(jobs) or time.time() > deadline:
                    return _ended(jobs) and all(j["state"] == "SUCCEEDED" for j in jobs)
                time.sleep(1.0)
    seen: dict[int, tuple] = {}
    t0 = time.time()
    while True:
        jobs = c.jobs()["jobs"]
        for j in jobs:
            key = (j["state"], j["reason"], j["cell"])
            if seen.get(j["id"]) != key:
                seen[j["id"]] = key
                where = f" on {gpus_text(j['gpus'])} ({j['cell']})" if j["gpus"] else ""
                why = f" [{j['reason']}]" if j["reason"] else ""
                loss = f", loss {j['last_loss']:.3f}" if j["last_loss"] is not None else ""
                console.print(f"{time.time() - t0:6.1f}s job {j['id']} {j['name']}: {j['state']}{why}{where}, "
                              f"step {j['steps_done']}/{j['total_steps']}{loss}", highlight=False)  # fmt: skip
        if _ended(jobs) or time.time() > deadline:
            console.print(jobs_table(jobs, title="jobs (tessera list)"))
            return _ended(jobs) and all(j["state"] == "SUCCEEDED" for j in jobs)
        time.sleep(1.0)


def _ended(jobs: list[dict[str, Any]]) -> bool:
    return bool(jobs) and all(j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") for j in jobs)


def _cluster_table(cluster: dict[str, Any]) -> Table:
    t = Table(title=f"cluster {cluster['name']} ({cluster['mode']} Ray, policy {cluster['policy']})")
    for col in ("node", "GPU type", "GPUs (holder)"):
        t.add_column(col)
    for n in cluster["nodes"]:
        held = " ".join(
            f"[{g['index']}:{('#' + str(g['job_id'])) if g['job_id'] else 'free'}]" for g in n["gpus"]
        )
        t.add_row(n["name"], n["gpu_type"], held)
    return t


def after_calibration(history: list[dict[str, Any]], min_steps: int) -> list[float]:
    """The estimate errors of a job's allocations whose estimate knew its configuration's measured speed (made
    after that configuration's first calibration, by this job or another of the same configuration), over
    those that ran at least ``min_steps`` steps (the service's rule for an allocation's steady step)."""
    return [
        e
        for h in sorted(history, key=lambda h: h["attempt"])
        if knew_configuration(h) and allocation_steps(h) >= min_steps and (e := estimate_error(h)) is not None
    ]


def _pct(e: float | None) -> str:
    return "-" if e is None else f"{e:+.0%}"


def _summary(c: Any) -> None:
    from tessera.service.scheduling import FINAL_MIN_STEPS

    t = Table(title="summary")
    for col in ("job", "state", "GPUs of each allocation", "plan (last)", "rescales", "restarts", "JCT", "loss",
                "est step ms", "measured step ms", "est. error (first)", "est. error after calibration"):  # fmt: skip
        t.add_column(col)
    after: list[float] = []
    for j in c.jobs()["jobs"]:
        d = c.job(j["id"])
        hist = d["history"]
        # each later allocation with its kind: a preempted job started again is not counted as a rescale
        gpus = (
            " → ".join(
                (f"{h['kind']} " if i else "")
                + (gpus_text(h["gpus_by_type"]) if "gpus_by_type" in h else h["cell"])
                for i, h in enumerate(hist)
            )
            or "-"
        )
        last = hist[-1] if hist else None
        jct = (d["finished_at"] - d["submitted_at"]) if d["finished_at"] else None
        est = [h["estimate_iter_s"] for h in hist if h["estimate_iter_s"]]
        meas = [m for h in hist if (m := measured_step(h))]
        mine = after_calibration(hist, FINAL_MIN_STEPS)
        after += mine
        t.add_row(
            f"{d['id']} {d['name']}", d["state"], gpus, plan_text(last["stages"]) if last else "-", str(d["rescales"]),
            str(d["restarts"]), duration(jct), f"{d['first_loss'] or 0:.2f} → {d['last_loss'] or 0:.2f}",
            " / ".join(f"{x * 1e3:.2f}" for x in est) or "-", " / ".join(f"{x * 1e3:.1f}" for x in meas) or "-",
            _pct(estimate_error(hist[0]) if hist else None), " / ".join(_pct(e) for e in mine) or "-",
        )  # fmt: skip
    console.print(t)
    console.print(
        "estimates are for the devices that ran (this machine's CPU, profiled once per model before a job's "
        "first launch); each allocation's measured time calibrates the device type and the job's configuration "
        "for later estimates."
    )
    if after:
        worst = max(after, key=abs)
        console.print(
            f"estimates made after the configuration's first calibration: {len(after)}, "
            f"{sum(abs(e) <= 0.15 for e in after)} within 15 % of the measured step (largest error {worst:+.0%})",
            highlight=False,
        )

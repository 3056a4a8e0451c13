"""`tessera tensorboard JOB --out DIR`: a job's telemetry as TensorBoard event files.

Operators who already watch runs in TensorBoard get Tessera's per-step loss, iteration time, throughput and peak
memory there, with each allocation's estimated iteration time beside the measured one. The server keeps the
telemetry; this command fetches it over the API and writes it with PyTorch's ``SummaryWriter``, so the server
never needs TensorBoard and a run can be exported again at any time (the files are rewritten).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import typer

from tessera.commands.common import console, fail
from tessera.service.client import Client, ClientError

#: every point the server holds (the API down-samples to this many at most)
MAX_POINTS = 100_000


def latest_attempt_per_step(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One point per step: after a relaunch from a checkpoint the steps after it are run again, and the curve
    shows the attempt that counts (the latest), never a line that backtracks."""
    best: dict[int, dict[str, Any]] = {}
    for s in steps:
        cur = best.get(s["step"])
        if cur is None or s.get("attempt", 0) >= cur.get("attempt", 0):
            best[s["step"]] = s
    return [best[k] for k in sorted(best)]


def write_events(telemetry: dict[str, Any], out: Path) -> int:
    """Write ``telemetry`` (the API's ``/jobs/{id}/telemetry``) under ``out``; returns the steps written."""
    from torch.utils.tensorboard import SummaryWriter

    if out.exists():  # a re-export replaces the previous one instead of doubling every curve
        for f in out.glob("events.out.tfevents.*"):
            f.unlink()
    out.mkdir(parents=True, exist_ok=True)
    steps = latest_attempt_per_step(telemetry.get("steps") or [])
    writer = SummaryWriter(log_dir=str(out))
    try:
        for s in steps:
            step, wall = int(s["step"]) + 1, s.get("ts")
            for tag, value in (
                ("train/loss", s.get("loss")),
                ("val/loss", s.get("val_loss")),  # steps that validated on the held-out split
                ("train/iteration_time_s", s.get("iter_time_s")),
                ("train/samples_per_s", s.get("samples_per_s")),
                ("memory/peak_GiB", (s.get("peak_memory_bytes") or 0) / 2**30),
                ("train/attempt", s.get("attempt")),
            ):
                if value is not None:
                    writer.add_scalar(tag, float(value), step, walltime=wall)
        for a in telemetry.get("allocations") or []:
            if a.get("estimate_iter_s") is not None:
                writer.add_scalar(
                    "train/estimated_iteration_time_s", float(a["estimate_iter_s"]), int(a["from_step"]) + 1,
                    walltime=a.get("started_at"),
                )  # fmt: skip
    finally:
        writer.close()
    return len(steps)


def tensorboard(
    job: str = typer.Argument(..., help="job id or name"),
    out: Path = typer.Option(..., "--out", help="directory for the event files (`tensorboard --logdir` it)"),
    url: str | None = typer.Option(
        None, "--url", envvar="TESSERA_URL", help="server URL (default: http://127.0.0.1:8470)"
    ),
    token: str | None = typer.Option(
        None, "--token", envvar="TESSERA_TOKEN", help="the server's token, if it has one"
    ),
) -> None:
    """Write a job's telemetry (loss, iteration time, samples/s, peak memory, estimate) as TensorBoard events."""
    if out.exists() and not out.is_dir():
        raise fail(f"--out: {str(out)!r} is not a directory", 2)
    try:
        with Client(url, token) as c:
            j = c.job(job)
            tel = c._call("GET", f"/jobs/{j['id']}/telemetry", params={"max_points": MAX_POINTS})
    except ClientError as e:
        raise fail(str(e)) from None
    n = write_events(tel, out)
    hint = f"tensorboard --logdir {out}" if shutil.which("tensorboard") else f"--logdir {out}"
    console.print(f"job {j['id']} {j['name']}: {n} steps written to {out} ({hint})", highlight=False)

"""`tessera submit | list | status | logs | cancel`: talk to a running `tessera server`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from tessera.commands.common import console, correction_text, estimate_error, fail, measured_step, ms, num
from tessera.service.client import Client, ClientError

URL = typer.Option(None, "--url", envvar="TESSERA_URL", help="server URL (default: http://127.0.0.1:8470)")
TOKEN = typer.Option(None, "--token", envvar="TESSERA_TOKEN", help="the server's token, if it has one")
JSON = typer.Option(False, "--json", help="machine-readable output")


def _client(url: str | None, token: str | None) -> Client:
    return Client(url, token)


def gib(x: float | None) -> str:
    return "-" if x is None else f"{x / 2**30:.2f}"


def duration(s: float | None) -> str:
    if s is None:
        return "-"
    s = max(0.0, s)
    if s < 120:
        return f"{s:.0f}s"
    if s < 7200:
        return f"{s / 60:.1f}m"
    return f"{s / 3600:.1f}h"


def gpus_text(g: dict[str, int]) -> str:
    return " + ".join(f"{n}×{t}" for t, n in g.items()) or "-"


def plan_text(stages: list[dict[str, Any]]) -> str:
    return " → ".join(
        f"[{s['layers'][0]},{s['layers'][1]}) {s['dp']}×{s['tp']} {'+'.join(s['gpu_types'])}" for s in stages
    )


# --------------------------------------------------------------------------------------------- submit
def submit(
    job: Path = typer.Argument(..., help="job spec (YAML or JSON): what to train, never which GPUs"),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="show predicted memory, ranked plans, the chosen Cell and estimated time; submit nothing",
    ),
    cluster: str = typer.Option(
        "local", "--cluster", help="--dry-run without a server: plan against this preset or YAML"
    ),
    key: str | None = typer.Option(
        None, "--key", help="idempotency key: submitting twice with it stores the job once"
    ),
    url: str | None = URL,
    token: str | None = TOKEN,
    as_json: bool = JSON,
) -> None:
    """Submit a job (no GPU counts: the scheduler chooses GPU types, counts and the parallel plan)."""
    from tessera.jobs import JobSpecError, load_job

    try:
        spec = load_job(job)
    except JobSpecError as e:
        raise fail(str(e), 2) from None
    body = spec.model_dump(mode="json")
    if dry_run:
        _dry_run(body, spec, cluster, url, token, as_json)
        return
    try:
        with _client(url, token) as c:
            out = c.submit(body, key=key)
    except ClientError as e:
        raise fail(str(e), 2 if e.status == 422 else 1) from None
    if as_json:
        print(json.dumps(out, indent=2))
        return
    j = out["job"]
    verb = "submitted" if out["created"] else "already submitted (same --key)"
    console.print(f"{verb}: job [bold]{j['id']}[/] {j['name']} ({j['model']}), {j['state']}", highlight=False)


def _dry_run(
    body: dict[str, Any], spec: Any, cluster: str, url: str | None, token: str | None, as_json: bool
) -> None:
    where = None
    try:
        with _client(url, token) as c:
            out = c.dry_run(body)
            where = f"server {c.url}"
    except ClientError as e:
        if e.status is not None:
            raise fail(str(e), 2 if e.status == 422 else 1) from None
        out, where = _local_dry_run(spec, cluster), f"cluster {cluster!r} (no server reachable)"
    if as_json:
        print(json.dumps(out, indent=2))
        return
    t = Table(title=f"{spec.name} ({spec.model}) on {where}: Cells, best first")
    for col in ("#", "GPUs", "stages", "iter s", "samples/s", "max GiB/device", "fits"):
        t.add_column(col, justify="left" if col == "GPUs" else "right")
    for i, c in enumerate(out["cells"], 1):
        mark = " ◀ chosen" if c["cell"] == out["chosen"] else ""
        t.add_row(
            str(i), gpus_text(c["gpus"]) + mark, str(c["n_stages"]), f"{c['iteration_time_s']:.4g}",
            f"{c['samples_per_s']:.4g}", gib(c["max_device_bytes"]), "yes" if c["feasible"] else "no",
        )  # fmt: skip
    console.print(t)
    if out["chosen"] is None:
        console.print(f"[bold red]{out['reason']}[/]", highlight=False)
        return
    est = out["estimate"]
    peak = max(est.get("device_bytes_per_device") or [0])
    now = "fits the GPUs free now" if out["chosen_now"] else f"would wait: {out['reason']}"
    console.print(f"chosen Cell: [bold]{out['chosen']}[/] ({now})", highlight=False)
    if out.get("plan"):
        stages = out["plan"]["stages"]
        desc = " → ".join(
            f"layers [{s['layer_start']},{s['layer_end']}) dp{s['dp_degree']}×tp{s['tp_degree']} on "
            + "+".join(sorted({d["gpu_type"] for d in s["devices"]}))
            for s in stages
        )
        console.print(f"plan: {desc}; {out['plan']['micro_batches']} micro-batches", highlight=False)
    console.print(
        f"predicted memory: {gib(peak)} GiB per device (peak); estimated {est.get('iteration_time_s', 0):.4g} s/iteration, "
        f"{duration(out['estimated_time_s'])} for {spec.total_steps} steps. Nothing was submitted.",
        highlight=False,
    )


def _local_dry_run(spec: Any, cluster: str) -> dict[str, Any]:
    from tessera.perf.costmodel import CostModel
    from tessera.service.model_source import ModelSourceError
    from tessera.service.ray_backend import emulated_spec
    from tessera.service.scheduling import LiveCluster, SchedulingAdapter

    try:
        adapter = SchedulingAdapter(LiveCluster.from_spec(emulated_spec(cluster)), CostModel.load())
        return adapter.dry_run(spec).to_dict()
    except ModelSourceError as e:
        raise fail(str(e), 2) from None


# --------------------------------------------------------------------------------------------- list / status
def list_jobs(
    all_jobs: bool = typer.Option(True, "--all/--active", help="include ended jobs"),
    url: str | None = URL,
    token: str | None = TOKEN,
    as_json: bool = JSON,
) -> None:
    """Jobs with state and pending REASON (like squeue)."""
    try:
        with _client(url, token) as c:
            out = c.jobs(all_jobs=all_jobs)
    except ClientError as e:
        raise fail(str(e)) from None
    if as_json:
        print(json.dumps(out, indent=2))
        return
    console.print(jobs_table(out["jobs"]))


def jobs_table(jobs: list[dict[str, Any]], title: str | None = None) -> Table:
    t = Table(title=title)
    for col in ("ID", "NAME", "STATE", "REASON", "GPUS", "CELL", "STEPS", "LOSS", "RESCALES", "TIME"):
        t.add_column(col, justify="right" if col in ("ID", "STEPS", "LOSS", "RESCALES", "TIME") else "left")
    now = time.time()
    for j in jobs:
        start = j["started_at"] or j["submitted_at"]
        end = j["finished_at"] or now
        t.add_row(
            str(j["id"]), j["name"], j["state"], j["reason"] or "", gpus_text(j["gpus"]), j["cell"] or "-",
            f"{j['steps_done']}/{j['total_steps']}", num(j["last_loss"], ".3f"),
            str(j["rescales"]), duration(end - start),
        )  # fmt: skip
    return t


def status(
    job: str = typer.Argument(..., help="job id or name"),
    url: str | None = URL,
    token: str | None = TOKEN,
    as_json: bool = JSON,
) -> None:
    """One job: state and reason, GPUs, Cell and Plan, estimate vs measured, progress, allocation history."""
    try:
        with _client(url, token) as c:
            j = c.job(job)
    except ClientError as e:
        raise fail(str(e)) from None
    if as_json:
        print(json.dumps(j, indent=2))
        return
    reason = f" ({j['reason']})" if j["reason"] else ""
    console.print(
        f"[bold]job {j['id']}[/] {j['name']} ({j['model']}): [bold]{j['state']}[/]{reason}", highlight=False
    )
    loss = "no loss yet" if j["last_loss"] is None else f"loss {num(j['first_loss'])} → {num(j['last_loss'])}"
    ck = "no checkpoint yet" if j["checkpoint_step"] is None else f"checkpoint at step {j['checkpoint_step']}"
    if j.get("val_loss") is not None:
        loss += f", validation loss {num(j['val_loss'])} (step {j['val_step']})"
    console.print(f"progress: {j['steps_done']}/{j['total_steps']} steps, {loss}, {ck}", highlight=False)
    if j["allocation"]:
        a = j["allocation"]
        console.print(
            f"GPUs: {gpus_text(a['gpus'])} on "
            + ", ".join(sorted({f"{s['node']}[{s['index']}]" for s in a["slots"]}))
            + f"; Cell {a['cell']}",
            highlight=False,
        )
    est, meas, err = j["estimate_iter_s"], measured_step(j), estimate_error(j)
    if est or meas:
        off = f" (estimate {err:+.0%})" if err is not None else ""
        step = f" (training step {ms(j['measured_iter_s'])})" if j.get("measured_step_s") else ""
        console.print(
            f"iteration: estimated {ms(est)}, measured {ms(meas)} per step of progress{step}{off}",
            highlight=False,
        )
    if j["error"]:
        console.print(f"[red]last error:[/] {j['error']}", highlight=False)
    if j["history"]:
        t = Table(title="allocations (rescale / migration / recovery history)")
        cols = ("attempt", "kind", "GPUs", "plan", "steps", "est ms", "est. corrected by", "measured step ms",
                "ended")  # fmt: skip
        for col in cols:
            t.add_column(col)
        for h in j["history"]:
            t.add_row(
                str(h["attempt"]), h["kind"], h["cell"], plan_text(h["stages"]),
                f"{h['from_step']}→{h['to_step'] if h['to_step'] is not None else '…'}",
                ms(h["estimate_iter_s"], unit=""), correction_text(h), ms(measured_step(h), unit=""),
                h["end_reason"] or "running",
            )  # fmt: skip
        console.print(t)


# --------------------------------------------------------------------------------------------- logs / cancel
def logs(
    job: str = typer.Argument(..., help="job id or name"),
    follow: bool = typer.Option(False, "--follow", "-f", help="keep printing new lines until the job ends"),
    url: str | None = URL,
    token: str | None = TOKEN,
) -> None:
    """A job's log: scheduling decisions, launches, progress every few steps, failures and recoveries."""
    after = 0
    try:
        with _client(url, token) as c:
            while True:
                out = c.logs(job, after)
                for line in out["lines"]:
                    stamp = time.strftime("%H:%M:%S", time.localtime(line["ts"]))
                    print(f"{stamp} {line['line']}", flush=True)
                after = out["next"]
                if not follow or out["done"]:
                    return
                time.sleep(1.0)
    except ClientError as e:
        raise fail(str(e)) from None
    except KeyboardInterrupt:
        return


def cancel(
    job: str = typer.Argument(..., help="job id or name"),
    url: str | None = URL,
    token: str | None = TOKEN,
) -> None:
    """Cancel a job (a running one stops at once; its GPUs go back to the queue)."""
    try:
        with _client(url, token) as c:
            j = c.cancel(job)
    except ClientError as e:
        raise fail(str(e)) from None
    what = "cancelled" if j["state"] == "CANCELLED" else f"cancel requested ({j['state']})"
    console.print(f"job {j['id']} {j['name']}: {what}", highlight=False)

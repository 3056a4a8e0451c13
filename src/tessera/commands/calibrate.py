"""`tessera calibrate TELEMETRY.jsonl --plan PLAN.json`: learn the cost model's correction factors from a run.

The plan must be the one that produced the telemetry (``tessera train JOB.yaml --plan PLAN.json`` writes
``runs/<job>/telemetry.jsonl``): calibration compares what that plan was estimated to cost with what it
measured, and saves the updated compute/comm scales into the CostModel directory every later estimate reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from tessera.perf.calibrate import CalibrationReport
    from tessera.plan import Plan


def _load_plan(path: str) -> Plan:
    from tessera.plan import Plan

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"--plan: no such file {path!r}")
    try:
        return Plan.load(p)
    except json.JSONDecodeError as e:
        raise ValueError(f"--plan {path}: not valid JSON ({e.msg}, line {e.lineno})") from None
    except ValueError as e:
        raise ValueError(f"--plan {path}: {e}") from None


def _scale(scales: dict[str, float], key: str) -> str:
    return f"{scales.get(key, 1.0):.3g}"


def _ms(x: float) -> str:
    return f"{x * 1e3:.3f}"


def calibrate(
    telemetry: str = typer.Argument(..., help="telemetry JSONL written by `tessera train` (runs/<job>/…)"),
    plan: str = typer.Option(..., "--plan", help="the Plan JSON that produced the telemetry"),
    model: str | None = typer.Option(
        None, "--model", "-m", help="zoo name or Hugging Face config.json (default: the plan's model)"
    ),
    cluster: str | None = typer.Option(
        None, "--cluster", help="cluster preset or YAML the plan's nodes are in (its links; default: catalog)"
    ),
    cost_dir: str | None = typer.Option(
        None, "--cost-dir", help="CostModel directory to read and update (default $TESSERA_HOME/perf)"
    ),
    alpha: float = typer.Option(1.0, "--alpha", help="damping in (0, 1]: 1 fits directly, 0.5 goes half-way"),
    warmup: int = typer.Option(2, "--warmup", help="steps dropped at the start of each run in the file"),
    dry_run: bool = typer.Option(False, "--dry-run", help="report only; do not save the updated scales"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Update the compute/comm scales from a run's measured times; the plan's estimate moves onto them."""
    from tessera.nn.resolve import resolve_spec
    from tessera.perf.calibrate import calibrate as run_calibration
    from tessera.perf.costmodel import CostModel, default_dir

    p = _load_plan(plan)
    spec = resolve_spec(model or p.model, p.seq_len)
    topology = None
    if cluster is not None:
        from tessera.hardware import get_cluster

        topology = get_cluster(cluster)
    directory = Path(cost_dir) if cost_dir else default_dir()
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"--cost-dir: {str(directory)!r} is not a directory")
    cost = CostModel.load(directory)
    report, _ = run_calibration(
        p,
        spec,
        telemetry,
        cost,
        cluster_or_gpu_map=topology,
        alpha=alpha,
        warmup=warmup,
        save_to=None if dry_run else directory,
    )
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
        return
    _render(report)


def _render(report: CalibrationReport) -> None:
    from rich.table import Table

    from tessera.commands.common import console

    m = report.measured
    t = Table(title=f"{report.plan_model}: estimate vs measured")
    for col in ("ms", "before", "after", "measured"):
        t.add_column(col, justify="left" if col == "ms" else "right")
    t.add_row(
        "iteration",
        _ms(report.before.iteration_time_s),
        _ms(report.after.iteration_time_s),
        _ms(m.iteration_time_s),
    )
    for s, (b, a) in enumerate(zip(report.stages_before, report.stages_after, strict=True)):
        measured_busy = (
            _ms(m.stage_compute_s[s]) if report.busy_observed else f"({_ms(m.stage_compute_s[s])})"
        )
        t.add_row(f"stage {s} compute", _ms(b.busy_s), _ms(a.busy_s), measured_busy)
        t.add_row(f"stage {s} comm", _ms(b.dp_sync_s), _ms(a.dp_sync_s), _ms(m.stage_comm_s[s]))
    console.print(t)
    s = Table(title="scales")
    for col in ("", "name", "before", "after"):
        s.add_column(col)
    for name in report.device_types:
        s.add_row(
            "compute",
            name,
            _scale(report.compute_scale_before, name),
            _scale(report.compute_scale_after, name),
        )
    for name in report.link_kinds:
        s.add_row("comm", name, _scale(report.comm_scale_before, name), _scale(report.comm_scale_after, name))
    console.print(s)
    console.print(
        f"{m.source}: medians of {len(m.steps)} steps ({m.warmup_dropped} warm-up and {m.skipped_dropped} "
        "skipped steps dropped)",
        highlight=False,
    )
    console.print(
        f"iteration error {report.error_before:+.1%} → {report.error_after:+.1%}"
        + (
            ""
            if report.busy_observed
            else " (stage compute includes pipeline waits: fitted on iteration time)"
        ),
        highlight=False,
    )
    console.print(
        "comm: estimated DP sync vs the telemetry's (slowest rank, waits included)",
        style="dim",
        highlight=False,
    )
    if report.saved_to:
        console.print(f"saved to {report.saved_to}", highlight=False)
    else:
        console.print("not saved (--dry-run)", highlight=False)

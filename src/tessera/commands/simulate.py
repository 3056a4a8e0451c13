"""`tessera simulate`: replay a job trace on a simulated cluster under every policy; table, JSON and plots."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table


class PlainProgress:
    """Progress as plain lines on stderr, for runs without a terminal: a phase's first step, then at most one
    line every ``every_s`` seconds per phase, and its end."""

    def __init__(self, every_s: float = 10.0) -> None:
        self.every_s = every_s
        self.t0 = time.perf_counter()
        self.last: dict[str, float] = {}

    def __call__(self, label: str, done: float, total: float) -> None:
        now = time.perf_counter()
        finished = done >= total
        if not finished and label in self.last and now - self.last[label] < self.every_s:
            return
        self.last[label] = now
        print(
            f"{label}: {done:g}/{total:g}{' done' if finished else ''} ({now - self.t0:.0f} s)",
            file=sys.stderr,
            flush=True,
        )


def simulate(
    cluster: str = typer.Option("crius-sim-1280", "--cluster", help="cluster preset or YAML file"),
    trace: str = typer.Option(
        "philly",
        "--trace",
        help="philly | csv (with --trace-file) | gen:FAMILY (bursty-short, large-long, deadline-mixed; months-16k: 16,000 jobs)",
    ),
    trace_file: str | None = typer.Option(None, "--trace-file", help="trace CSV (default: the Philly trace)"),
    start: str | None = typer.Option(None, "--start", help="window start: YYYY-MM-DD[ HH:MM:SS] or seconds"),
    end: str | None = typer.Option(None, "--end", help="window end (exclusive)"),
    policies: str = typer.Option("all", "--policies", help="comma list of policies, or all"),
    seed: int = typer.Option(0, "--seed", help="seeds model assignment, noise and failures"),
    round_s: float = typer.Option(300.0, "--round", help="seconds between scheduling rounds"),
    tick_s: float | None = typer.Option(
        None,
        "--tick",
        help="decide arrivals and completions at the next multiple of this many seconds, between "
        "rounds, as the live service does (default: only at rounds)",
    ),
    noise: float = typer.Option(0.0, "--noise", help="lognormal σ of true speed around the estimate"),
    mtbf_h: float | None = typer.Option(None, "--mtbf", help="mean hours between failures per node (off)"),
    deadlines: bool = typer.Option(False, "--deadlines", help="give jobs ElasticFlow deadlines"),
    depth_sweep: str | None = typer.Option(None, "--depth-sweep", help="tessera search depths, e.g. 1,2,3,4"),
    submit_col: str = typer.Option("submit_time_s", "--submit-col", help="CSV column: submit time"),
    duration_col: str = typer.Option("duration_s", "--duration-col", help="CSV column: duration (s)"),
    gpus_col: str = typer.Option("num_gpus", "--gpus-col", help="CSV column: GPU count"),
    id_col: str | None = typer.Option(None, "--id-col", help="CSV column: job id"),
    out: str | None = typer.Option(
        None, "--out", help="report directory (default runs/sim/<trace>-<cluster>)"
    ),
    models: str | None = typer.Option(
        None, "--models", help="zoo models to draw from (default: Crius Table 2 by GPU-time bucket)"
    ),
    density: float = typer.Option(1.0, "--density", help="arrival density multiplier (load scaling)"),
    max_gpus: int = typer.Option(64, "--max-gpus", help="largest GPU count the rate table covers per job"),
    no_plots: bool = typer.Option(False, "--no-plots", help="skip the PNG plots"),
    workers: int | None = typer.Option(None, "--workers", help="processes estimating the rate table"),
    as_json: bool = typer.Option(False, "--json", help="print the study as JSON instead of the table"),
) -> None:
    """Replay a trace under every policy: comparison table, study.json and PNG plots."""
    from tessera.sim.report import (
        COLUMNS,
        clean_nan,
        comparison_rows,
        jct_change,
        resolve_policies,
        run_study,
        trace_label,
    )
    from tessera.sim.simulator import SimConfig
    from tessera.sim.workload import WorkloadSpec

    if round_s <= 0:
        raise ValueError(f"--round: must be > 0, got {round_s}")
    if tick_s is not None and not 0 < tick_s <= round_s:
        raise ValueError(f"--tick: must be > 0 and <= --round ({round_s:g}), got {tick_s:g}")
    if noise < 0:
        raise ValueError(f"--noise: must be >= 0, got {noise}")
    if mtbf_h is not None and mtbf_h <= 0:
        raise ValueError(f"--mtbf: must be > 0 hours, got {mtbf_h}")
    depths: list[int] = []
    if depth_sweep:
        try:
            depths = [int(x) for x in depth_sweep.split(",") if x.strip()]
        except ValueError:
            raise ValueError(f"--depth-sweep: {depth_sweep!r} is not a comma list of integers") from None
        if any(d < 0 for d in depths):
            raise ValueError("--depth-sweep: depths must be >= 0")
    names = resolve_policies(policies)
    if max_gpus < 1:
        raise ValueError(f"--max-gpus: must be >= 1, got {max_gpus}")
    if models:
        from tessera.models.zoo import get_spec

        names_m = [m.strip() for m in models.split(",") if m.strip()]
        for m in names_m:
            try:
                get_spec(m)
            except KeyError as e:
                raise ValueError(f"--models: {e}") from None
        workload = WorkloadSpec.of_models(names_m, seed=seed, deadlines=deadlines, max_gpus=max_gpus)
    else:
        workload = WorkloadSpec(seed=seed, deadlines=deadlines, max_gpus=max_gpus)
    label = trace_label(trace_file) if trace_file else trace
    out_dir = Path(out) if out else Path("runs") / "sim" / f"{label}-{Path(cluster).stem}"
    cfg = SimConfig(
        round_s=round_s,
        tick_s=tick_s,
        seed=seed,
        noise_sigma=noise,
        node_mtbf_s=mtbf_h * 3600 if mtbf_h else None,
    )
    columns = {"submit": submit_col, "duration": duration_col, "gpus": gpus_col}
    if id_col:
        columns["id"] = id_col
    err = Console(stderr=True)
    study_kw = dict(
        cluster=cluster,
        trace=trace,
        trace_file=trace_file,
        columns=columns,
        start=start,
        end=end,
        policies=names,
        seed=seed,
        config=cfg,
        workload=workload,
        depth_sweep=depths,
        out_dir=out_dir,
        plots=not no_plots,
        workers=workers,
        max_gpus=max_gpus,
        density=density,
    )
    if not err.is_terminal:  # a log, a pipe, a batch job: plain progress lines on stderr
        study = run_study(**study_kw, on_phase=PlainProgress())  # type: ignore[arg-type]
    else:
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
            transient=False,
        ) as bar:
            tasks: dict[str, int] = {}

            def on_phase(label: str, done: float, total: float) -> None:
                if label not in tasks:
                    tasks[label] = bar.add_task(label, total=total)
                bar.update(tasks[label], completed=done, total=total)

            study = run_study(**study_kw, on_phase=on_phase)  # type: ignore[arg-type]
    if as_json:
        print(json.dumps(clean_nan(study.to_dict()), indent=1))
        return
    console = Console() if Console().is_terminal else Console(width=200)
    t = Table(title=f"{study.trace} on {study.cluster}: {study.n_jobs} jobs")
    for c in COLUMNS:
        t.add_column(c, justify="left" if c == "policy" else "right")
    for row in comparison_rows(study.metrics):
        t.add_row(*row)
    console.print(t)
    r = study.to_dict()["ratios"]
    if r:
        parts = [
            f"{n}: JCT {jct_change(v['jct_reduction'])}"
            + (
                f" (Crius {jct_change(v['crius_published_jct_reduction'])})"
                if "crius_published_jct_reduction" in v
                else ""
            )
            for n, v in r.items()
            if isinstance(v, dict) and v.get("jct_reduction") is not None
        ]
        console.print("tessera vs " + "; ".join(parts))
        if "vs_best_baseline_throughput" in r:
            console.print(
                f"tessera avg throughput ÷ best baseline's: {r['vs_best_baseline_throughput']:.2f}×"
            )
    console.print(f"report: {out_dir}/study.json" + ("" if no_plots else " and PNG plots"))

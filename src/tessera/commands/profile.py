"""`tessera profile layers|comm`: measure what the cost model would otherwise assume.

Both save into the CostModel directory (``$TESSERA_HOME/perf`` or ``--cost-dir``) that ``tessera estimate``,
``tessera plan`` and the scheduler read, so a measurement taken once replaces the roofline / alpha-beta guess
everywhere afterwards.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from tessera.commands.common import Typer, clean_errors, console

if TYPE_CHECKING:
    from tessera.models.spec import ModelSpec
    from tessera.perf.profiler import ModelFactory

profile_app = Typer(
    help="Measure layer times and collective tables on the machine at hand; saved for every later estimate.",
    no_args_is_help=True,
)


def _ints(text: str, flag: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{flag}: expected comma-separated integers, got {text!r}") from None
    if not out or any(x < 1 for x in out):
        raise ValueError(f"{flag}: expected positive integers, got {text!r}")
    return out


def _cost_dir(cost_dir: str | None) -> Path:
    from tessera.perf.costmodel import default_dir

    directory = Path(cost_dir) if cost_dir else default_dir()
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"--cost-dir: {str(directory)!r} is not a directory")
    return directory


@profile_app.command("layers")
def layers(
    model: str = typer.Option(..., "--model", "-m", help="zoo name or Hugging Face config.json"),
    seq: int | None = typer.Option(None, "--seq", help="sequence length (default: the model's)"),
    micro_batch: str = typer.Option("1,2,4", "--micro-batch", help="micro-batch sizes, comma-separated"),
    tp: str = typer.Option("1,2", "--tp", help="TP degrees, comma-separated"),
    precision: str = typer.Option("fp32", "--precision", help="fp32 | bf16 | fp16 | bf16-master"),
    optimizer: str = typer.Option("adamw", "--optimizer", help="adamw | adam | sgd"),
    attention: str = typer.Option("flash", "--attention", help="flash | math"),
    processes: int = typer.Option(
        1, "--processes", help="ranks that will share this host (CPU: the threads each one gets)"
    ),
    repeats: int = typer.Option(6, "--repeats", help="timed runs per figure, split over the passes"),
    passes: int = typer.Option(
        3, "--passes", help="times everything is timed over; each figure keeps the median of its passes"
    ),
    recompute: str = typer.Option(
        "none",
        "--recompute",
        help="block variants to time, comma-separated: none, selective, full (none always)",
    ),
    cost_dir: str | None = typer.Option(
        None, "--cost-dir", help="CostModel directory (default $TESSERA_HOME/perf)"
    ),
    device_type: str | None = typer.Option(
        None,
        "--device-type",
        help="CPU: profile as this device type of the embedded service (cpu-core, cpu-half: one thread; "
        "cpu-half = the core's figures × the slowdown measured beside a busy neighbour); "
        "`cpu-core,cpu-half` stores both from one run",
    ),
    entrypoint: str | None = typer.Option(
        None,
        "--entrypoint",
        help="a user's own model, FILE.py:ATTR as in a job spec (--model names it; its code runs in this process)",
    ),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Time every distinct layer's per-device shard (DP-only and TP-only) on this device (Crius §5.1)."""
    clean_errors(_layers)(
        model, seq, micro_batch, tp, precision, optimizer, attention, processes, repeats, passes, recompute,
        cost_dir, as_json, device_type, entrypoint,
    )  # fmt: skip


def _layers(
    model: str,
    seq: int | None,
    micro_batch: str,
    tp: str,
    precision: str,
    optimizer: str,
    attention: str,
    processes: int,
    repeats: int,
    passes: int,
    recompute: str,
    cost_dir: str | None,
    as_json: bool,
    device_type: str | None = None,
    entrypoint: str | None = None,
) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from tessera.hardware import get_gpu
    from tessera.nn import cpu_affinity
    from tessera.perf.costmodel import CostModel
    from tessera.perf.profiler import as_half_core, count_steps, half_core_slowdown, profile_layers

    if processes < 1:
        raise ValueError(f"--processes: must be >= 1, got {processes}")
    if repeats < 1:
        raise ValueError(f"--repeats: must be >= 1, got {repeats}")
    if passes < 1:
        raise ValueError(f"--passes: must be >= 1, got {passes}")
    # the names are checked by profile_layers
    recomputes = tuple(r.strip() for r in recompute.split(",") if r.strip()) or ("none",)
    spec, factory = _model(model, seq, entrypoint)
    mbs, tps = _ints(micro_batch, "--micro-batch"), _ints(tp, "--tp")
    directory = _cost_dir(cost_dir)
    types = [t.strip() for t in (device_type or "").split(",") if t.strip()]
    cost = CostModel.load(directory)
    total = count_steps(spec, mbs, tps, passes=passes, recomputes=recomputes, factory=factory)
    with Progress(
        TextColumn("[bold]profiling"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
        disable=as_json,
        transient=True,
    ) as bar:
        task = bar.add_task("", total=total)
        run = profile_layers(
            spec,
            micro_batches=mbs,
            tp_degrees=tps,
            precision=precision,
            optimizer=optimizer,
            attention=attention,
            processes=processes,
            repeats=repeats,
            passes=passes,
            recomputes=recomputes,
            device_type=types[0] if types else None,
            profile=cost.profile,
            on_step=lambda label: bar.update(task, advance=1, description=label),
            factory=factory,
        )
    for extra in types[1:]:  # the half core from the same measurements (one run, consistent types)
        if get_gpu(extra).name != "cpu-half" or get_gpu(types[0]).name != "cpu-core":
            raise ValueError("--device-type: only `cpu-core,cpu-half` may be combined")
        with cpu_affinity.pinned(0, 2) as core:
            half = as_half_core(run, half_core_slowdown(core))
        half.store(spec, cost.profile)
    cost.save(directory)
    if as_json:
        print(json.dumps({**run.to_dict(), "saved_to": str(directory)}, indent=2))
        return
    t = Table(title=f"{spec.name} on {run.device_type} ({precision}, {optimizer}): ms per micro-batch")
    for col in ("layer", "tp", "impl", "recompute", "micro-batch", "forward", "backward", "optimizer step"):
        t.add_column(col, justify="left" if col in ("layer", "impl", "recompute") else "right")
    for r in run.rows:
        t.add_row(
            r.name, str(r.tp), r.impl, r.recompute, str(r.micro_batch), f"{r.fwd_s * 1e3:.3f}",
            f"{r.bwd_s * 1e3:.3f}", f"{r.optimizer_s * 1e3:.3f}",
        )  # fmt: skip
    console.print(t)
    console.print(f"saved {len(run.rows)} measurements to {directory}", highlight=False)


def _model(model: str, seq: int | None, entrypoint: str | None) -> tuple[ModelSpec, ModelFactory | None]:
    """The model to profile and what builds it: the zoo's (or a Hugging Face config's) spec, or a user's own
    model traced as the service traces it (so its layer signatures are the ones its jobs are priced by)."""
    from tessera.nn.resolve import resolve_spec

    if entrypoint is None:
        return resolve_spec(model, seq), None
    from tessera.service.model_source import EntrypointModel, inspect_entrypoint, spec_from_json

    return spec_from_json(inspect_entrypoint(entrypoint, model, seq or 1)["spec"]), EntrypointModel(
        entrypoint
    )


@profile_app.command("comm")
def comm(
    procs: int = typer.Option(2, "--procs", help="processes in the group"),
    max_bytes: int = typer.Option(16 * 2**20, "--max-bytes", help="largest message (bytes)"),
    backend: str | None = typer.Option(None, "--backend", help="gloo | nccl (default: nccl when GPUs allow)"),
    repeats: int = typer.Option(7, "--repeats", help="timed runs per point (the median is kept)"),
    timeout: float = typer.Option(120.0, "--timeout", help="process-group timeout, seconds"),
    cost_dir: str | None = typer.Option(
        None, "--cost-dir", help="CostModel directory (default $TESSERA_HOME/perf)"
    ),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Time all-reduce, all-gather, reduce-scatter and send/recv over message sizes (Crius's offline tables)."""
    clean_errors(_comm)(procs, max_bytes, backend, repeats, timeout, cost_dir, as_json)


def _comm(
    procs: int,
    max_bytes: int,
    backend: str | None,
    repeats: int,
    timeout: float,
    cost_dir: str | None,
    as_json: bool,
) -> None:
    from rich.table import Table

    from tessera.perf.comm_profile import profile_comm
    from tessera.perf.costmodel import CostModel

    if repeats < 1:
        raise ValueError(f"--repeats: must be >= 1, got {repeats}")
    if timeout <= 0:
        raise ValueError(f"--timeout: must be > 0, got {timeout}")
    directory = _cost_dir(cost_dir)
    cost = CostModel.load(directory)
    with (
        console.status(f"timing collectives on {procs} processes", spinner="dots") if not as_json else _null()
    ):
        run = profile_comm(procs, max_bytes=max_bytes, backend=backend, repeats=repeats, timeout_s=timeout)
    run.fill(cost.comm_table)
    cost.save(directory)
    if as_json:
        print(json.dumps({**run.to_dict(), "saved_to": str(directory)}, indent=2))
        return
    t = Table(title=f"{run.backend} on {run.link_kind}, {procs} processes")
    for col in ("collective", "arrival", "n", "bytes", "ms", "GB/s"):
        t.add_column(col, justify="left" if col in ("collective", "arrival") else "right")
    for p in run.points:
        t.add_row(
            p.collective,
            p.arrival,
            str(p.n),
            f"{p.nbytes:,}",
            f"{p.time_s * 1e3:.3f}",
            f"{p.bandwidth_Bps / 1e9:.2f}",
        )
    console.print(t)
    console.print(f"saved {len(run.points)} points to {directory}", highlight=False)


def _null() -> contextlib.AbstractContextManager:
    return contextlib.nullcontext()

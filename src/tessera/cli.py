"""The `tessera` command. Thin: parses flags, calls the library, renders tables; errors are one clear line."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from tessera.commands.common import (
    GiB,
    Typer,
    clean_errors,
    complete_clusters,
    complete_gpus,
    complete_models,
    console,
    err_console,
    tessera_version,
)
from tessera.hardware import cluster_presets, gpu_catalog

app = Typer(
    name="tessera",
    help="Train large models on heterogeneous GPU clusters: memory, Cells, scheduling, balanced plans.\n\n"
    "State (measured profiles, simulator caches, the server's store) lives under $TESSERA_HOME "
    "(default ~/.cache/tessera).",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish, PowerShell
    pretty_exceptions_enable=False,
)
__all__ = ["GiB", "app", "console", "err_console"]


def _print_version(value: bool) -> None:
    if value:
        print(f"tessera {tessera_version()}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="print the version and exit"
    ),
) -> None:
    """Options of `tessera` itself (the app's help text is the Typer's)."""


def _tflops(x: float | None) -> str:
    return f"{x / 1e12:.1f}" if x else "-"


@app.command()
@clean_errors
def gpus(as_json: bool = typer.Option(False, "--json", help="machine-readable output")) -> None:
    """List the GPU catalog."""
    cat = gpu_catalog()
    if as_json:
        rows = [
            {
                "name": g.name,
                "memory_bytes": g.memory_bytes,
                "flops": g.flops,
                "memory_bandwidth_Bps": g.memory_bandwidth_Bps,
                "link": g.link.kind,
                "link_bandwidth_Bps": g.link.bandwidth_Bps,
            }
            for g in cat.values()
        ]
        print(json.dumps(rows, indent=2))
        return
    t = Table(title="GPU catalog (dense peak TFLOP/s)")
    for col in ("GPU", "arch", "memory GiB", "FP32", "TF32", "FP16", "BF16", "HBM GB/s", "intra-node link"):
        t.add_column(col, justify="right" if col not in ("GPU", "arch", "intra-node link") else "left")
    for g in cat.values():
        t.add_row(
            g.name,
            g.arch,
            f"{g.memory_gib:.0f}",
            _tflops(g.flops.get("fp32")),
            _tflops(g.flops.get("tf32")),
            _tflops(g.flops.get("fp16")),
            _tflops(g.flops.get("bf16")),
            f"{g.memory_bandwidth_Bps / 1e9:.0f}",
            f"{g.link.kind} {g.link.bandwidth_Bps / 1e9:.0f} GB/s",
        )
    console.print(t)


@app.command()
@clean_errors
def clusters(as_json: bool = typer.Option(False, "--json", help="machine-readable output")) -> None:
    """List the shipped cluster presets."""
    presets = cluster_presets()
    if as_json:
        print(json.dumps({n: c.model_dump(mode="json") for n, c in presets.items()}, indent=2))
        return
    t = Table(title="Cluster presets")
    for col in ("name", "GPUs", "nodes", "by type", "description"):
        t.add_column(col)
    for name, c in presets.items():
        by_type = ", ".join(f"{n}×{k}" for k, n in c.gpu_counts().items())
        t.add_row(name, str(c.total_gpus), str(sum(g.count for g in c.node_groups)), by_type, c.description)
    console.print(t)


@app.command()
@clean_errors
def models(as_json: bool = typer.Option(False, "--json", help="machine-readable output")) -> None:
    """List the model zoo."""
    from tessera.models.zoo import list_models

    entries = list_models()
    if as_json:
        print(
            json.dumps([{"name": e.name, "family": e.family, "params": e.params} for e in entries], indent=2)
        )
        return
    t = Table(title="Model zoo")
    for col in ("name", "family", "params", "description"):
        t.add_column(col, justify="right" if col == "params" else "left")
    for e in entries:
        t.add_row(e.name, e.family, _count(e.params), e.description)
    console.print(t)


def _count(n: int) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f}{unit}"
    return str(n)


@app.command()
@clean_errors
def memory(
    model: str = typer.Option(
        ...,
        "--model",
        "-m",
        help="zoo name or path to a Hugging Face config.json",
        autocompletion=complete_models,
    ),
    gpu: str = typer.Option(
        "A100-80GB", "--gpu", help="GPU type (see `tessera gpus`)", autocompletion=complete_gpus
    ),
    global_batch: int | None = typer.Option(None, "--global-batch", help="samples per step"),
    micro_batch: int = typer.Option(1, "--micro-batch", help="samples per micro-batch per DP rank"),
    seq: int | None = typer.Option(None, "--seq", help="sequence length (default: the model's)"),
    dp: int = typer.Option(1, "--dp"),
    tp: int = typer.Option(1, "--tp"),
    pp: int = typer.Option(1, "--pp"),
    precision: str = typer.Option("bf16", "--precision", help="fp32 | bf16 | fp16 | bf16-master"),
    recompute: str = typer.Option("none", "--recompute", help="none | selective | full"),
    attention: str = typer.Option("flash", "--attention", help="flash | math"),
    optimizer: str = typer.Option("adamw", "--optimizer", help="adamw | adam | sgd"),
    zero: int = typer.Option(0, "--zero", help="ZeRO stage 0-3 over the DP group"),
    schedule: str = typer.Option("1f1b", "--schedule", help="1f1b | gpipe"),
    exact: bool = typer.Option(False, "--exact", help="also run the exact fake-tensor trace per stage"),
    fit: bool = typer.Option(False, "--fit", help="for every GPU type, the smallest layouts that fit"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Per-stage, per-device peak memory of a training layout (fast formula; --exact adds the trace)."""
    from tessera.commands.memory import memory_command

    memory_command(
        console=console,
        model=model,
        gpu=gpu,
        global_batch=global_batch,
        micro_batch=micro_batch,
        seq=seq,
        dp=dp,
        tp=tp,
        pp=pp,
        precision=precision,
        recompute=recompute,
        attention=attention,
        optimizer=optimizer,
        zero=zero,
        schedule=schedule,
        exact=exact,
        fit=fit,
        as_json=as_json,
    )


@app.command()
@clean_errors
def plan(
    job: str = typer.Argument(..., help="job spec (YAML or JSON)"),
    cluster: str | None = typer.Option(
        None,
        "--cluster",
        help="cluster preset or YAML file (see `tessera clusters`; default: local, or exactly --gpus when given)",
        autocompletion=complete_clusters,
    ),
    gpus: str | None = typer.Option(
        None, "--gpus", help="only these GPUs, e.g. 4xA100-40GB,4xV100-32GB (of --cluster, when given)"
    ),
    out: str | None = typer.Option(
        None, "--out", help="where the chosen Plan JSON goes (default runs/<job>/plan.json)"
    ),
    top: int = typer.Option(15, "--top", help="Cells to show"),
    exhaustive: bool = typer.Option(False, "--exhaustive", help="tune exhaustively instead of Cell-guided"),
    nics_per_node: int | None = typer.Option(
        None, "--nics-per-node", help="restate the cluster's NICs per node"
    ),
    nic_bandwidth_Bps: float | None = typer.Option(
        None, "--nic-bandwidth-Bps", help="per NIC, one direction (25e9 = 200 Gb/s)"
    ),
    inter_node_bandwidth_Bps: float | None = typer.Option(
        None, "--inter-node-bandwidth-Bps", help="a node's whole network, where no NIC bandwidth is given"
    ),
    cost_dir: str | None = typer.Option(
        None, "--cost-dir", help="measured profiles/calibration (default $TESSERA_HOME/perf)"
    ),
    virtual_stages: int = typer.Option(
        1, "--virtual-stages", help="interleaved 1F1B: N chunks per device where a plan can carry them"
    ),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Rank the job's Cells (GPU types × counts × stages) and write the tuned Plan of the best."""
    from tessera.commands.plan import plan_command

    plan_command(
        console=console, job=job, cluster=cluster, gpus=gpus, out=out, top=top, exhaustive=exhaustive,
        cost_dir=cost_dir, as_json=as_json, nics_per_node=nics_per_node, nic_bandwidth_Bps=nic_bandwidth_Bps,
        inter_node_bandwidth_Bps=inter_node_bandwidth_Bps, virtual_stages=virtual_stages,
    )  # fmt: skip


@app.command()
@clean_errors
def estimate(
    model: str = typer.Option(
        ...,
        "--model",
        "-m",
        help="zoo name or path to a Hugging Face config.json",
        autocompletion=complete_models,
    ),
    gpu: str = typer.Option(..., "--gpu", help="GPU type (see `tessera gpus`)", autocompletion=complete_gpus),
    num_gpus: int | None = typer.Option(None, "--num-gpus", help="must equal dp × tp × pp when given"),
    dp: int = typer.Option(1, "--dp"),
    tp: int = typer.Option(1, "--tp"),
    pp: int = typer.Option(1, "--pp"),
    micro_batch: int = typer.Option(1, "--micro-batch", help="samples per micro-batch per DP replica"),
    global_batch: int | None = typer.Option(
        None, "--global-batch", help="samples per step (default dp × micro-batch × pp)"
    ),
    seq: int | None = typer.Option(None, "--seq", help="sequence length (default: the model's)"),
    precision: str = typer.Option("bf16", "--precision", help="fp32 | bf16 | fp16 | bf16-master"),
    recompute: str = typer.Option("none", "--recompute", help="none | selective | full"),
    zero: int = typer.Option(0, "--zero", help="ZeRO stage 0-3 (3 = fully sharded data parallel)"),
    schedule: str = typer.Option("1f1b", "--schedule", help="1f1b | gpipe"),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="ranks per node (TP groups innermost)"),
    cluster: str | None = typer.Option(
        None,
        "--cluster",
        help="preset name or YAML file whose links price the collectives",
        autocompletion=complete_clusters,
    ),  # fmt: skip
    intra_node_link: str | None = typer.Option(
        None, "--intra-node-link", help="nvlink3, pcie4, … (default: the GPU's)"
    ),
    intra_node_bandwidth_Bps: float | None = typer.Option(
        None, "--intra-node-bandwidth-Bps", help="per GPU, one direction"
    ),
    nics_per_node: int | None = typer.Option(None, "--nics-per-node", help="network cards per node"),
    nic_bandwidth_Bps: float | None = typer.Option(
        None, "--nic-bandwidth-Bps", help="per NIC, one direction (25e9 = 200 Gb/s)"
    ),
    inter_node_bandwidth_Bps: float | None = typer.Option(
        None, "--inter-node-bandwidth-Bps", help="a node's whole network (default 12.5e9)"
    ),
    cost_dir: str | None = typer.Option(
        None, "--cost-dir", help="measured profiles/calibration (default $TESSERA_HOME/perf)"
    ),
    grad_clip_norm: float | None = typer.Option(
        None, "--grad-clip-norm", help="price clipping to this global gradient norm (the job spec's field)"
    ),
    val_every_steps: int | None = typer.Option(
        None, "--val-every-steps", help="price a validation every N steps (with --val-samples)"
    ),
    val_samples: int | None = typer.Option(
        None, "--val-samples", help="held-out sequences each validation runs forward (data.val_samples)"
    ),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Estimated iteration time, throughput, MFU and peak memory of one dp × tp × pp layout."""
    from tessera.commands.estimate import estimate_command

    estimate_command(
        console=console, as_json=as_json, cost_dir=cost_dir, model=model, gpu=gpu, num_gpus=num_gpus, dp=dp,
        tp=tp, pp=pp, micro_batch=micro_batch, global_batch=global_batch, seq=seq, precision=precision,
        recompute=recompute, zero=zero, schedule=schedule, gpus_per_node=gpus_per_node, cluster=cluster,
        intra_node_link=intra_node_link, intra_node_bandwidth_Bps=intra_node_bandwidth_Bps,
        nics_per_node=nics_per_node, nic_bandwidth_Bps=nic_bandwidth_Bps,
        inter_node_bandwidth_Bps=inter_node_bandwidth_Bps, grad_clip_norm=grad_clip_norm,
        val_every_steps=val_every_steps, val_samples=val_samples,
    )  # fmt: skip


@app.command()
def train(
    job: str = typer.Argument(..., help="job spec (YAML or JSON)"),
    plan: str | None = typer.Option(None, "--plan", help="Plan JSON to execute"),
    devices: int | None = typer.Option(
        None, "--devices", help="local processes (data parallel) when no plan"
    ),
    steps: int | None = typer.Option(None, "--steps", help="override the job's amount of work"),
    run_dir: str | None = typer.Option(
        None, "--run-dir", help="telemetry and checkpoints (default runs/<job>)"
    ),
    checkpoint_every: int = typer.Option(
        0, "--checkpoint-every", help="steps between checkpoints (0: at the end)"
    ),
    resume: bool = typer.Option(False, "--resume", help="continue from the run dir's latest checkpoint"),
    data: str | None = typer.Option(
        None, "--data", help="local text file (byte-level tokens); default synthetic"
    ),
    timeout_s: float = typer.Option(600.0, "--timeout", help="seconds before a silent rank fails the job"),
) -> None:
    """Train a job for real on local processes (gloo on CPU, NCCL on GPUs), with live progress."""
    from tessera.commands.train import train_command

    train_command(
        job=job,
        plan=plan,
        devices=devices,
        steps=steps,
        run_dir=run_dir,
        checkpoint_every=checkpoint_every,
        resume=resume,
        data=data,
        timeout_s=timeout_s,
        console=err_console,
    )


def _register_subcommands() -> None:
    """Commands whose modules own their options (imported light; heavy imports stay inside them)."""
    from tessera.commands.calibrate import calibrate
    from tessera.commands.demo import demo
    from tessera.commands.export import export
    from tessera.commands.jobs import cancel, list_jobs, logs, status, submit
    from tessera.commands.profile import profile_app
    from tessera.commands.server import server
    from tessera.commands.tensorboard import tensorboard

    app.add_typer(profile_app, name="profile")
    app.command()(clean_errors(calibrate))
    app.command()(clean_errors(__import__("tessera.commands.simulate", fromlist=["simulate"]).simulate))
    app.command()(clean_errors(server))
    app.command()(submit)
    app.command(name="list")(list_jobs)
    app.command()(status)
    app.command()(logs)
    app.command()(cancel)
    app.command()(tensorboard)
    app.command()(clean_errors(demo))
    app.command()(clean_errors(export))


_register_subcommands()

if __name__ == "__main__":  # pragma: no cover
    app()

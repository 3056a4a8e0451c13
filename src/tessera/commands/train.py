"""`tessera train JOB.yaml [--plan PLAN.json | --devices N]`: run a job for real on local processes.

Without a plan, the job runs data-parallel on ``--devices`` local processes (1 by default); with one, exactly
the plan's layout. Progress is live; per-step telemetry goes to ``runs/<job>/telemetry.jsonl``.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from tessera.jobs import JobSpecError, load_job
from tessera.plan import Plan, PlanError, simple_plan


def _plan_for(job, plan: str | Path | None, devices: int | None) -> Plan:
    if plan is not None:
        if devices is not None:
            raise ValueError("give either --plan or --devices, not both")
        p = Plan.load(plan)
        if p.model != job.model:
            raise ValueError(f"plan {plan}: model {p.model!r} differs from the job's {job.model!r}")
        if p.global_batch != job.global_batch:
            raise ValueError(
                f"plan {plan}: global_batch {p.global_batch} differs from the job's {job.global_batch}"
            )
        return p
    from tessera.service.model_source import model_spec

    spec = model_spec(job)  # a user's own model traced in a child process, as the service traces it
    n = devices or 1
    if n > job.global_batch:
        raise ValueError(f"--devices: {n} devices for a global batch of {job.global_batch}")
    return simple_plan(
        job.model,
        n_layers=spec.n_layers,
        global_batch=job.global_batch,
        seq_len=job.seq_len or spec.seq_len,
        dp=n,
        micro_batches=1,
        precision=job.precision,
        recompute="none" if job.recompute == "auto" else job.recompute,
        optimizer=job.optimizer,
    )


def _check_resume_data(ckpt: Path, source, spec, plan: Plan) -> None:
    """Refuse, before any process starts, to resume a checkpoint written on other data (the ranks check too)."""
    import json

    from tessera.runtime import SyntheticData
    from tessera.runtime.checkpoint import resolve
    from tessera.runtime.loop import check_resume_data, identity_of

    try:
        where = resolve(ckpt)
        saved = json.loads((where / "meta.json").read_text()).get("data")
    except (OSError, ValueError):
        return  # no readable checkpoint metadata here: the ranks decide
    current = identity_of(source or SyntheticData(spec.seed), plan)
    check_resume_data(saved, current, str(where), spec.force_data_change)


def _model_factory(job):
    """What the ranks build the model from: a user's own model from its entrypoint; a Hugging Face model
    directory or cached repository as the real ``transformers`` model, from its weights or, with
    ``from_scratch``, from seeded random ones; ``None``: the zoo model the Plan names."""
    from tessera.models.resolve import is_hf_model_dir

    if job.entrypoint:
        from tessera.service.model_source import EntrypointModel

        return EntrypointModel(job.entrypoint)
    if not is_hf_model_dir(job.model):
        return None
    from tessera.nn.hf import HFModel

    return HFModel(job.model, from_scratch=job.from_scratch)


def train_command(
    job: str | Path,
    plan: str | Path | None = None,
    devices: int | None = None,
    *,
    steps: int | None = None,
    run_dir: str | Path | None = None,
    checkpoint_every: int = 0,
    resume: bool = False,
    data: str | None = None,
    timeout_s: float = 600.0,
    progress: bool = True,
    console: Console | None = None,
):
    """Run ``job`` (under ``plan`` or plain DP on ``devices``); returns the runtime's ``LaunchResult``.

    Errors are one red line and exit code 2 (bad input) or 1 (the run failed, naming the rank and cause).
    """
    from tessera.runtime import LaunchError, RunOptions, TextData, launch
    from tessera.runtime.data import data_source

    console = console or Console(stderr=True)
    try:
        spec = load_job(job)
        p = _plan_for(spec, plan, devices)
        source = (
            TextData(data) if data else data_source(spec.data_options(), seed=spec.seed, model=spec.model)
        )
        if source is not None and hasattr(source, "check"):
            source.check()  # a missing file or tokenizer is one line here, not an error on every rank
    except (JobSpecError, PlanError, ValueError, KeyError, FileNotFoundError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        console.print(f"[bold red]error:[/] {msg}", highlight=False)
        raise typer.Exit(2) from None
    out = Path(run_dir) if run_dir else Path("runs") / spec.name
    ckpt = out / "checkpoints"
    if resume and ckpt.exists():
        try:
            _check_resume_data(ckpt, source, spec, p)
        except RuntimeError as e:
            console.print(f"[bold red]error:[/] {e}", highlight=False)
            raise typer.Exit(2) from None
    options = RunOptions(
        steps=steps or spec.total_steps,
        **spec.training_options(),
        seed=spec.seed,
        model=_model_factory(spec),
        data=source,
        force_data_change=spec.force_data_change,
        checkpoint_dir=str(ckpt),
        checkpoint_every=checkpoint_every,
        resume_from=str(ckpt) if resume and ckpt.exists() else None,
        telemetry_path=str(out / "telemetry.jsonl"),
        pg_timeout_s=timeout_s,
        watchdog_s=timeout_s * 1.5,
        progress=progress,
    )
    desc = " → ".join(f"[{s.layer_start},{s.layer_end}) dp{s.dp_degree}×tp{s.tp_degree}" for s in p.stages)
    console.print(f"training {spec.name} ({p.model}) on {p.world_size} process(es): {desc}", highlight=False)
    try:
        result = launch(p, options)
    except LaunchError as e:
        console.print(f"[bold red]error:[/] {e}", highlight=False)
        raise typer.Exit(1) from None
    if result.records:
        times = sorted(r.iter_time_s for r in result.records)
        median = times[len(times) // 2]
        vals = [r.val_loss for r in result.records if r.val_loss is not None]
        val = f", validation loss {vals[-1]:.4f}" if vals else ""
        console.print(
            f"done: {len(result.records)} steps, final loss {result.losses[-1]:.4f}{val}, median step {median:.3f} s "
            f"({p.global_batch / median:.1f} samples/s); telemetry {options.telemetry_path}",
            highlight=False,
        )
    return result

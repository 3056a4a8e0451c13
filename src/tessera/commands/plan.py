"""`tessera plan JOB.yaml --cluster NAME [--gpus 4xA100-40GB,…] [--virtual-stages N]`: ranked Cells and the
chosen, tuned Plan.

``--virtual-stages N`` asks for interleaved 1F1B (Megatron's virtual pipeline, ``Plan.virtual_stages``): the
planner prices N chunks per device wherever a plan can carry them (1F1B, >= 2 stages, micro-batches a multiple
of the stages, >= N layers per stage; ``planning.space.applicable_virtual_stages``), plans plain 1F1B as well,
and writes the faster of the two chosen plans that the runtime can run (interleaving runs on torch's schedule
only: ``tessera.plan.torch_schedule_refusal``). The job spec has no such field, so the option is the only way
to ask for it when planning.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tessera.api import job_extras
from tessera.commands.common import GiB
from tessera.hardware.cluster import ClusterSpec, cluster_of_gpus, get_cluster, with_network
from tessera.jobs import JobSpec, load_job
from tessera.nn.resolve import resolve_spec
from tessera.perf.costmodel import CostModel
from tessera.perf.estimate import Estimate
from tessera.perf.extras import StepExtras
from tessera.plan import Plan, torch_schedule_refusal
from tessera.planning.cells import CellEstimator
from tessera.planning.planner import PlanningResult, parse_gpus, plan_job, settings_for

DEFAULT_CLUSTER = "local"


def _table(result: PlanningResult, top: int) -> Table:
    t = Table(title=f"Cells of {result.job.name} ({result.job.model}), best first")
    for col in ("#", "GPUs", "stages", "dp×tp per stage", "µbatches", "recompute/ZeRO", "max GiB/dev",
                "iter s", "samples/s", "MFU", "fits"):  # fmt: skip
        t.add_column(col, justify="right" if col not in ("GPUs", "dp×tp per stage") else "left")
    for i, c in enumerate(result.cells[:top], 1):
        d = c.to_dict()
        t.add_row(
            str(i),
            " + ".join(f"{n}×{g}" for g, n in d["gpus"].items()),
            str(d["n_stages"]),
            " ".join(d["stages"]),
            str(d["micro_batches"]),
            f"{d['recompute']}/{d['zero']}",
            f"{d['max_device_bytes'] / GiB:.1f}",
            f"{d['iteration_time_s']:.3g}",
            f"{d['samples_per_s']:.3g}",
            f"{d['mfu']:.0%}",
            "yes" if d["feasible"] else "[red]no[/]",
        )
    return t


def plan_command(
    *,
    console: Console,
    job: str,
    cluster: str | None,
    gpus: str | None,
    out: str | None,
    top: int,
    exhaustive: bool,
    cost_dir: str | None,
    as_json: bool,
    nics_per_node: int | None = None,
    nic_bandwidth_Bps: float | None = None,
    inter_node_bandwidth_Bps: float | None = None,
    virtual_stages: int = 1,
) -> None:
    """The link options restate the chosen cluster's network (:func:`~tessera.hardware.cluster.with_network`);
    ``virtual_stages`` > 1 plans interleaved 1F1B with that many chunks per device where it applies."""
    if top < 1:
        raise ValueError(f"--top: must be >= 1, got {top}")
    if isinstance(virtual_stages, bool) or not isinstance(virtual_stages, int) or virtual_stages < 1:
        raise ValueError(f"--virtual-stages: must be an integer >= 1, got {virtual_stages!r}")
    target: ClusterSpec | str = cluster or DEFAULT_CLUSTER
    if gpus is not None and cluster is None:
        target = cluster_of_gpus(parse_gpus(gpus))
    network = dict(nics_per_node=nics_per_node, nic_bandwidth_Bps=nic_bandwidth_Bps,
                   inter_node_bandwidth_Bps=inter_node_bandwidth_Bps)  # fmt: skip
    if any(v is not None for v in network.values()):
        target = with_network(get_cluster(target) if isinstance(target, str) else target, **network)
    where = target if isinstance(target, str) else f"the cluster of {target.name}"
    cost = CostModel.load(cost_dir)
    spec_job = load_job(job)
    # the job's clipping and validation, a val_fraction counted on the local dataset: plans are ranked with them
    extras = job_extras(spec_job)
    estimator = (
        _interleaved_estimator(spec_job, target, cost, virtual_stages, extras) if virtual_stages > 1 else None
    )
    with console.status("estimating Cells…") if not as_json else _Null():
        result = plan_job(spec_job, target, gpus, cost=cost, guided=not exhaustive, extras=extras)
        choice = None
        if estimator is not None:
            inter = plan_job(spec_job, target, gpus, cost=cost, guided=not exhaustive, estimator=estimator)
            result, choice = _faster_schedule(result, inter, virtual_stages)
    path = Path(out) if out else Path("runs") / result.job.name / "plan.json"
    if result.chosen is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        result.chosen.plan.save(path)
    if as_json:
        data = result.to_dict(top)
        data["plan_path"] = str(path) if result.chosen is not None else None
        if choice is not None:
            data["interleaving"] = choice
        print(json.dumps(data, indent=2))
        return
    console.print(_table(result, top))
    if result.chosen is None:
        raise ValueError(f"no Cell of {result.job.name} fits on {where}{' within ' + gpus if gpus else ''}")
    ch = result.chosen
    stages = " | ".join(
        f"layers {s.layer_start}-{s.layer_end - 1}: {s.dp_degree}×{s.tp_degree} {s.devices[0].gpu_type}"
        for s in ch.plan.stages
    )
    console.print(
        f"chosen: [bold]{ch.cell.label}[/] tuned over {ch.evaluations} plans → "
        f"{ch.iteration_time_s:.3g} s/iteration, {ch.estimate.samples_per_s:.3g} samples/s, "
        f"MFU {ch.estimate.mfu:.0%}\n  {stages}\n{_extras_line(ch.estimate)}"
        f"{_interleaving(ch.plan, virtual_stages, choice)}"
        f"plan written to {path}",
        highlight=False,
    )


def _interleaved_estimator(
    spec_job: JobSpec, target: ClusterSpec | str, cost: CostModel, virtual_stages: int, extras: StepExtras
) -> CellEstimator:
    """``plan_job``'s own estimator, its settings asking for ``virtual_stages`` chunks per device (the Cells'
    spaces carry them into the plans where they apply, priced as the interleaved schedule), with the job's
    ``extras`` as the plain search's."""
    spec = resolve_spec(spec_job.model, spec_job.seq_len)
    if spec.n_layers < 2 * virtual_stages:
        raise ValueError(
            f"--virtual-stages: {virtual_stages} chunks per stage need at least {2 * virtual_stages} layers "
            f"(two stages of {virtual_stages}); {spec_job.model} has {spec.n_layers}"
        )
    settings = replace(settings_for(spec_job, spec), virtual_stages=virtual_stages)
    cluster = target if isinstance(target, ClusterSpec) else get_cluster(target)
    return CellEstimator(spec, settings, cluster, cost, recompute=spec_job.recompute, extras=extras)


_NOT_APPLIED = (
    "the interleaved search's best (plain: --virtual-stages {asked} does not apply to it; interleaving needs "
    "1F1B, >= 2 stages, micro-batches a multiple of the stages, >= {asked} layers per stage, TP = 1 and equal "
    "non-empty pieces per replica)"
)


def _faster_schedule(
    plain: PlanningResult, inter: PlanningResult, asked: int
) -> tuple[PlanningResult, dict[str, object]]:
    """The plain and the interleaved planning's chosen plans compared: the faster one that the runtime can run
    wins (an interleaved plan runs on torch's schedule only; the interleaved search's best may be a plain plan
    where no chunks apply). Returns the winner and what was compared, with the reason."""
    p = plain.chosen.iteration_time_s if plain.chosen is not None else None
    i = inter.chosen.iteration_time_s if inter.chosen is not None else None
    v = inter.chosen.plan.virtual_stages if inter.chosen is not None else 1
    refusal = torch_schedule_refusal(inter.chosen.plan) if inter.chosen is not None and v > 1 else None
    what = "interleaved 1F1B" if v > 1 else _NOT_APPLIED.format(asked=asked)
    if i is None:
        won, reason = plain, "no interleaved plan fits"
    elif refusal is not None:
        won, reason = (
            plain,
            f"the interleaved plan is one the runtime cannot run ({refusal.field}: {refusal})",
        )
    elif p is not None and p <= i:
        won, reason = (
            plain,
            f"plain 1F1B's plan is faster: {p:.4g} s against {i:.4g} s per iteration for {what}",
        )
    else:
        than = "no plain plan fits" if p is None else f"{i:.4g} s against {p:.4g} s per iteration plain"
        won, reason = inter, f"{what} is faster: {than}"
    choice: dict[str, object] = {
        "asked_virtual_stages": asked,
        "plain_iteration_time_s": p,
        "interleaved_iteration_time_s": i,
        "interleaved_virtual_stages": v,
        "chosen": "interleaved" if won is inter else "plain",
        "reason": reason,
    }
    return won, choice


def _extras_line(e: Estimate) -> str:
    """What the job's clipping and validation add to the chosen plan's iteration (ranked with them)."""
    if not (e.clip_s or e.validation_s):
        return ""
    return (
        f"  of which grad clipping {e.clip_s:.3g} s, validation {e.validation_s:.3g} s (amortized per step)\n"
    )


def _interleaving(plan: Plan, asked: int, choice: dict[str, object] | None) -> str:
    """A line on the chosen plan's schedule and why, when interleaving was asked for."""
    if asked <= 1 or choice is None:
        return ""
    v = plan.virtual_stages
    what = f"interleaved 1F1B, {v} virtual stages per device" if v > 1 else plan.schedule.value
    return f"  schedule: {what} ({choice['reason']})\n"


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None

"""`tessera plan JOB.yaml --cluster NAME [--gpus 4xA100-40GB,…]`: ranked Cells and the chosen, tuned Plan."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tessera.commands.common import GiB
from tessera.hardware.cluster import ClusterSpec, cluster_of_gpus, get_cluster, with_network
from tessera.perf.costmodel import CostModel
from tessera.planning.planner import PlanningResult, parse_gpus, plan_job

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
) -> None:
    """The link options restate the chosen cluster's network (:func:`~tessera.hardware.cluster.with_network`)."""
    if top < 1:
        raise ValueError(f"--top: must be >= 1, got {top}")
    target: ClusterSpec | str = cluster or DEFAULT_CLUSTER
    if gpus is not None and cluster is None:
        target = cluster_of_gpus(parse_gpus(gpus))
    network = dict(nics_per_node=nics_per_node, nic_bandwidth_Bps=nic_bandwidth_Bps,
                   inter_node_bandwidth_Bps=inter_node_bandwidth_Bps)  # fmt: skip
    if any(v is not None for v in network.values()):
        target = with_network(get_cluster(target) if isinstance(target, str) else target, **network)
    where = target if isinstance(target, str) else f"the cluster of {target.name}"
    with console.status("estimating Cells…") if not as_json else _Null():
        result = plan_job(job, target, gpus, cost=CostModel.load(cost_dir), guided=not exhaustive)
    path = Path(out) if out else Path("runs") / result.job.name / "plan.json"
    if result.chosen is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        result.chosen.plan.save(path)
    if as_json:
        data = result.to_dict(top)
        data["plan_path"] = str(path) if result.chosen is not None else None
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
        f"MFU {ch.estimate.mfu:.0%}\n  {stages}\nplan written to {path}",
        highlight=False,
    )


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None

"""The public Python API: the same entry points as the CLI, returning objects instead of tables.

import tessera
est = tessera.estimate(model="gpt3-1.3b", gpu="A100-40GB", dp=4, tp=2, global_batch=64, micro_batch=2)
result = tessera.plan("examples/llama2-7b.yaml", cluster="crius-testbed-64")
result.chosen.plan.save("plan.json")
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tessera.hardware import ClusterSpec, Node, get_cluster, get_gpu
from tessera.hardware.cluster import cluster_of_gpus
from tessera.jobs import JobSpec, load_job
from tessera.jobs.spec import DataSpec
from tessera.nn.resolve import resolve_spec
from tessera.perf.costmodel import CostModel
from tessera.perf.estimate import Estimate, estimate_plan
from tessera.perf.extras import StepExtras
from tessera.plan import Device, Plan, simple_plan
from tessera.planning.partition import block_range
from tessera.planning.planner import PlanningResult, parse_gpus, plan_job

GPUS_PER_NODE = 8


def layout_plan(
    *,
    model: str,
    n_layers: int,
    gpu: str,
    dp: int,
    tp: int,
    pp: int,
    micro_batch: int,
    global_batch: int,
    seq_len: int,
    gpus_per_node: int = GPUS_PER_NODE,
    **options: Any,
) -> Plan:
    """A regular dp × tp × pp plan on one GPU type, ranks packed ``gpus_per_node`` to a node (TP groups
    innermost, so they share a node when they fit in one)."""
    for name, v in (("dp", dp), ("tp", tp), ("pp", pp), ("micro_batch", micro_batch)):
        if v < 1:
            raise ValueError(f"--{name.replace('_', '-')}: must be >= 1, got {v}")
    if global_batch % (dp * micro_batch):
        raise ValueError(
            f"--global-batch: {global_batch} is not a multiple of dp × micro-batch = {dp * micro_batch}"
        )
    name = get_gpu(gpu).name
    plan = simple_plan(
        model, n_layers=n_layers, global_batch=global_batch, seq_len=seq_len, dp=dp, tp=tp, pp=pp,
        gpu_type=name, micro_batches=global_batch // (dp * micro_batch), **options,
    )  # fmt: skip
    stages = []
    for st in plan.stages:
        devs = tuple(
            Device(d.rank, name, node=f"node{d.rank // gpus_per_node}", local_index=d.rank % gpus_per_node)
            for d in st.devices
        )
        stages.append(st.__class__(**{**st.__dict__, "devices": devs}))
    return plan.with_(stages=tuple(stages))


def estimate(
    *,
    model: str,
    gpu: str,
    num_gpus: int | None = None,
    dp: int = 1,
    tp: int = 1,
    pp: int = 1,
    micro_batch: int = 1,
    global_batch: int | None = None,
    seq: int | None = None,
    precision: str = "bf16",
    recompute: str = "none",
    zero: int = 0,
    attention: str = "flash",
    optimizer: str = "adamw",
    schedule: str = "1f1b",
    gpus_per_node: int = GPUS_PER_NODE,
    cost: CostModel | None = None,
    cluster: ClusterSpec | str | None = None,
    extras: StepExtras | None = None,
) -> Estimate:
    """Iteration time, throughput, MFU and memory of one regular layout (``tessera estimate``).

    ``model``: a zoo name or a Hugging Face ``config.json``; ``zero=3`` is fully sharded data parallelism.
    ``cost``: measured profiles/tables/calibration (default: whatever is saved in ``$TESSERA_HOME/perf``).
    ``cluster``: the machine whose links price the collectives (a preset name, a YAML path or a spec, e.g.
    :func:`tessera.hardware.cluster.network_cluster`); the ranks fill its ``gpu`` nodes in order, at their
    own GPUs per node. Without one, ``gpus_per_node`` ranks to a node on a 12.5 GB/s network. ``extras``:
    gradient clipping and validation to price with the step (:class:`~tessera.perf.extras.StepExtras`).
    """
    if num_gpus is not None and num_gpus != dp * tp * pp:
        raise ValueError(f"--num-gpus: {num_gpus} != dp × tp × pp = {dp * tp * pp}")
    machine = get_cluster(cluster) if isinstance(cluster, str) else cluster
    nodes = _gpu_nodes(machine, gpu, dp * tp * pp) if machine is not None else ()
    if nodes:
        gpus_per_node = nodes[0].n_gpus
    spec = resolve_spec(model, seq)
    batch = global_batch if global_batch is not None else dp * micro_batch * pp
    plan = layout_plan(
        model=model, n_layers=spec.n_layers, gpu=gpu, dp=dp, tp=tp, pp=pp, micro_batch=micro_batch,
        global_batch=batch, seq_len=spec.seq_len, gpus_per_node=gpus_per_node, precision=precision,
        recompute=recompute, zero=zero, attention=attention, optimizer=optimizer, schedule=schedule,
        blocks=block_range(spec),
    )  # fmt: skip
    if nodes:
        plan = _place(plan, nodes)
    cost = cost if cost is not None else CostModel.load()
    return estimate_plan(plan, spec, machine, cost=cost, extras=extras)


def _gpu_nodes(machine: ClusterSpec, gpu: str, n_gpus: int) -> tuple[Node, ...]:
    """The cluster's ``gpu`` nodes that a layout of ``n_gpus`` ranks fills, in order."""
    name = get_gpu(gpu).name
    out: list[Node] = []
    for node in machine.nodes():
        if sum(n.n_gpus for n in out) >= n_gpus:
            break
        if node.gpu_type == name:
            out.append(node)
    have = sum(n.n_gpus for n in out)
    if have < n_gpus:
        raise ValueError(f"--cluster: {machine.name} has {have} {name} GPUs, the layout needs {n_gpus}")
    return tuple(out)


def _place(plan: Plan, nodes: tuple[Node, ...]) -> Plan:
    """The plan's ranks on the cluster's nodes, filling each in order (TP groups innermost stay together)."""
    where = [(node.name, i) for node in nodes for i in range(node.n_gpus)]
    stages = []
    for st in plan.stages:
        devs = tuple(
            Device(d.rank, d.gpu_type, node=where[d.rank][0], local_index=where[d.rank][1])
            for d in st.devices
        )
        stages.append(st.__class__(**{**st.__dict__, "devices": devs}))
    return plan.with_(stages=tuple(stages))


def plan(
    job: JobSpec | str | Path,
    *,
    cluster: ClusterSpec | str | None = None,
    gpus: Mapping[str, int] | str | None = None,
    cost: CostModel | None = None,
    guided: bool = True,
) -> PlanningResult:
    """The job's Cells on the cluster, ranked, and the tuned plan of the best (``tessera plan``). As the CLI:
    ``gpus`` alone plans on exactly those GPUs; with ``cluster``, on those GPUs of it (default cluster:
    ``local``). Plans are ranked with the job's clipping and validation (:func:`job_extras`)."""
    if cluster is None:
        cluster = (
            cluster_of_gpus(parse_gpus(gpus) if isinstance(gpus, str) else dict(gpus)) if gpus else "local"
        )
    spec = job if isinstance(job, JobSpec) else load_job(job)
    cost = cost if cost is not None else CostModel.load()
    return plan_job(spec, cluster, gpus, cost=cost, guided=guided, extras=job_extras(spec))


def job_extras(job: JobSpec, seq_len: int | None = None) -> StepExtras:
    """The job's gradient clipping and validation as its run will spend them (:meth:`StepExtras.of_job`).

    A ``data.val_fraction`` split is a fraction of the dataset's packed sequences, so it is counted here, on
    this machine, through the runtime's own tokenized cache (``runtime.dataset.TokenizedData``: tokenized
    once, the run then reuses the cache) at ``seq_len`` tokens (default: the job's, else the model's). Only
    the CLI and this API call it, in the user's own process: the service never tokenizes user data in the
    server and prices such a job at the one validation batch the runtime runs at least. Where the dataset
    cannot be read here (its files lie on the cluster only, its tokenizer is missing), the same lower bound."""
    data = job.data
    if not isinstance(data, DataSpec) or data.val_samples is not None or data.val_fraction <= 0:
        return StepExtras.of_job(job)
    from tessera.runtime.data import data_source
    from tessera.runtime.dataset import DataError, TokenizedData

    seq = seq_len or job.seq_len or resolve_spec(job.model, None).seq_len
    source = data_source(job.data_options(), seed=job.seed, model=job.model)
    try:
        n = source.sequence_count(seq) if isinstance(source, TokenizedData) else None
    except (DataError, OSError):
        n = None
    return StepExtras.of_job(job, dataset_sequences=n)

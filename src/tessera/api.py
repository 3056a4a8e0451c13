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

from tessera.hardware import ClusterSpec, get_gpu
from tessera.jobs import JobSpec
from tessera.models.resolve import resolve_spec
from tessera.perf.costmodel import CostModel
from tessera.perf.estimate import Estimate, estimate_plan
from tessera.plan import Device, Plan, simple_plan
from tessera.planning.partition import block_range
from tessera.planning.planner import PlanningResult, plan_job

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
) -> Estimate:
    """Iteration time, throughput, MFU and memory of one regular layout (``tessera estimate``).

    ``model``: a zoo name or a Hugging Face ``config.json``; ``zero=3`` is fully sharded data parallelism.
    ``cost``: measured profiles/tables/calibration (default: whatever is saved in ``$TESSERA_HOME/perf``).
    """
    if num_gpus is not None and num_gpus != dp * tp * pp:
        raise ValueError(f"--num-gpus: {num_gpus} != dp × tp × pp = {dp * tp * pp}")
    spec = resolve_spec(model, seq)
    batch = global_batch if global_batch is not None else dp * micro_batch * pp
    plan = layout_plan(
        model=model, n_layers=spec.n_layers, gpu=gpu, dp=dp, tp=tp, pp=pp, micro_batch=micro_batch,
        global_batch=batch, seq_len=spec.seq_len, gpus_per_node=gpus_per_node, precision=precision,
        recompute=recompute, zero=zero, attention=attention, optimizer=optimizer, schedule=schedule,
        blocks=block_range(spec),
    )  # fmt: skip
    return estimate_plan(plan, spec, cost=cost if cost is not None else CostModel.load())


def plan(
    job: JobSpec | str | Path,
    *,
    cluster: ClusterSpec | str = "local",
    gpus: Mapping[str, int] | str | None = None,
    cost: CostModel | None = None,
    guided: bool = True,
) -> PlanningResult:
    """The job's Cells on the cluster, ranked, and the tuned plan of the best (``tessera plan``)."""
    return plan_job(job, cluster, gpus, cost=cost if cost is not None else CostModel.load(), guided=guided)

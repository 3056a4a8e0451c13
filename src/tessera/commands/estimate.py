"""`tessera estimate --model M --gpu T --dp D --tp T --pp P …`: one layout's time, throughput, MFU, memory."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table

from tessera.api import estimate
from tessera.hardware import ClusterSpec
from tessera.hardware.cluster import network_cluster
from tessera.perf.costmodel import CostModel
from tessera.perf.extras import StepExtras

GiB = 2**30


LINK_OPTIONS = ("intra_node_link", "intra_node_bandwidth_Bps", "nics_per_node", "nic_bandwidth_Bps",
                "inter_node_bandwidth_Bps")  # fmt: skip


def estimate_command(
    *, console: Console, as_json: bool, cost_dir: str | None, cluster: str | None = None, **kw: Any
) -> None:
    """``--cluster`` (a preset or YAML file) or the explicit link options price the collectives; both at once
    would leave it unclear which network is meant, so that is refused."""
    links = {k: kw.pop(k) for k in LINK_OPTIONS if kw.get(k) is not None}
    for k in LINK_OPTIONS:
        kw.pop(k, None)
    machine: ClusterSpec | str | None = cluster
    if cluster is not None and links:
        named = ", ".join("--" + k.replace("_", "-") for k in links)
        raise ValueError(f"--cluster: give a cluster or link options ({named}), not both")
    if links:
        machine = network_cluster(
            kw["gpu"], kw["dp"] * kw["tp"] * kw["pp"], gpus_per_node=kw.get("gpus_per_node", 8), **links
        )
    extras = _extras(kw)
    e = estimate(cost=CostModel.load(cost_dir), cluster=machine, extras=extras, **kw)
    row = {
        "iteration_time_s": e.iteration_time_s,
        "samples_per_s": e.samples_per_s,
        "tokens_per_s_per_gpu": e.tokens_per_s_per_gpu,
        "mfu": e.mfu,
        "peak_bytes": max(e.peak_bytes_per_device),
        "device_bytes": max(e.device_bytes_per_device),
        "feasible": e.feasible,
        "compute_s": e.compute_s,
        "comm_s": e.comm_s,
        "bubble_s": e.bubble_s,
        "stage_times_s": list(e.stage_times_s),
        "clip_s": e.clip_s,
        "validation_s": e.validation_s,
    }
    if as_json:
        print(json.dumps(row, indent=2))
        return
    t = Table(
        title=f"{kw['model']} on {kw['dp'] * kw['tp'] * kw['pp']}×{kw['gpu']} (dp {kw['dp']}, tp {kw['tp']}, pp {kw['pp']})"
    )
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_row("iteration time", f"{e.iteration_time_s:.4g} s")
    t.add_row("  compute / comm / bubble", f"{e.compute_s:.3g} / {e.comm_s:.3g} / {e.bubble_s:.3g} s")
    if extras:
        t.add_row("  + grad clipping / validation", f"{e.clip_s:.3g} / {e.validation_s:.3g} s")
    t.add_row("samples/s", f"{e.samples_per_s:.4g}")
    t.add_row("tokens/s per GPU", f"{e.tokens_per_s_per_gpu:.4g}")
    t.add_row("MFU", f"{e.mfu:.1%}")
    t.add_row("peak tensor memory (max device)", f"{max(e.peak_bytes_per_device) / GiB:.2f} GiB")
    t.add_row("device memory incl. context", f"{max(e.device_bytes_per_device) / GiB:.2f} GiB")
    t.add_row("fits", "yes" if e.feasible else "[red]no[/]")
    if isinstance(machine, ClusterSpec):
        t.add_row("network", machine.name)
    elif machine is not None:
        t.add_row("cluster", machine)
    console.print(t)


def _extras(kw: dict[str, Any]) -> StepExtras | None:
    """The job spec's time-costing training fields given as options (popped from ``kw``): clipping, and a
    validation of ``val_samples`` held-out sequences every ``val_every_steps`` steps, run as the runtime runs
    it (``max(1, val_samples // global_batch)`` batches of the global batch). None when none is given."""
    clip = kw.pop("grad_clip_norm", None)
    every = kw.pop("val_every_steps", None)
    samples = kw.pop("val_samples", None)
    if (every is None) != (samples is None):
        raise ValueError("--val-every-steps and --val-samples: give both to price validation, or neither")
    if clip is None and every is None:
        return None
    if clip is not None and not clip > 0:
        raise ValueError(f"--grad-clip-norm: must be > 0, got {clip}")
    batches = 0
    if samples is not None:
        if every < 1 or samples < 1:
            raise ValueError("--val-every-steps and --val-samples: must be >= 1")
        batch = kw.get("global_batch") or kw["dp"] * kw.get("micro_batch", 1) * kw["pp"]
        batches = max(1, samples // batch)
    return StepExtras(grad_clip=clip is not None, val_every_steps=every, val_batches=batches)

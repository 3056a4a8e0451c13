"""`tessera memory`: per-stage per-device peak memory tables, exact traces on request, and `--fit` search."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table

from tessera.hardware import get_gpu, gpu_catalog
from tessera.memory.estimate import StageMemory, estimate_layout, smallest_fitting_layouts
from tessera.memory.layout import Layout
from tessera.nn.resolve import resolve_spec

GiB = 2**30


def _gib(x: float) -> str:
    return f"{x / GiB:.2f}"


def memory_command(
    *,
    console: Console,
    model: str,
    gpu: str,
    global_batch: int | None,
    micro_batch: int,
    seq: int | None,
    dp: int,
    tp: int,
    pp: int,
    precision: str,
    recompute: str,
    attention: str,
    optimizer: str,
    zero: int,
    schedule: str,
    exact: bool,
    fit: bool,
    as_json: bool,
) -> None:
    spec = resolve_spec(model, seq)
    gpu_spec = get_gpu(gpu)
    layout = Layout(
        dp=dp,
        tp=tp,
        pp=pp,
        micro_batch=micro_batch,
        global_batch=global_batch,
        precision=precision,
        recompute=recompute,
        attention=attention,
        optimizer=optimizer,
        zero=zero,
        schedule=schedule,
    )
    if fit:
        _fit(console, spec, layout, as_json)
        return
    if exact:  # one fake-tensor training step per stage: seconds each, so show that work is going on
        with console.status(f"tracing {layout.pp} stage(s) of {spec.name} with fake tensors…"):
            stages = estimate_layout(spec, layout, gpu_spec.name, exact=True)
    else:
        stages = estimate_layout(spec, layout, gpu_spec.name)
    if as_json:
        print(json.dumps(_as_dict(spec.name, gpu_spec.name, layout, stages), indent=2))
        return
    title = (
        f"{spec.name} ({spec.params / 1e9:.2f}B params, seq {spec.seq_len}) on {gpu_spec.name} "
        f"({gpu_spec.memory_gib:.0f} GiB): dp {dp} × tp {tp} × pp {pp}, micro-batch {micro_batch}, "
        f"{layout.micro_batches} micro-batches, {precision}, recompute {recompute}, ZeRO-{zero}"
    )
    t = Table(title=title, title_justify="left")
    cols = ["stage", "layers", "devices", "in-flight", "weights", "grads", "optimizer", "activations", "temp"]
    cols += ["peak GiB", "phase", "+context GiB", "fits"]
    if exact:
        cols += ["exact GiB", "exact phase"]
    for c in cols:
        t.add_column(
            c, justify="left" if c in ("stage", "layers", "phase", "fits", "exact phase") else "right"
        )
    for s in stages:
        b = s.breakdown
        row = [
            str(s.stage),
            f"{s.layer_start}–{s.layer_end - 1}",
            f"{s.n_devices}",
            str(s.in_flight),
            _gib(b.get("weights", 0) + b.get("master_weights", 0)),
            _gib(b.get("gradients", 0)),
            _gib(b.get("optimizer_state", 0)),
            _gib(b.get("activations", 0)),
            _gib(b.get("temporaries", 0)),
            _gib(s.peak_bytes),
            s.peak_phase,
            _gib(s.device_bytes),
            "[green]yes[/]" if s.fits else "[red]no[/]",
        ]
        if exact:
            row += [_gib(s.exact_peak_bytes or 0), s.exact_phase or "-"]
        t.add_row(*row)
    console.print(t)


def _as_dict(model: str, gpu: str, layout: Layout, stages: list[StageMemory]) -> dict[str, Any]:
    devices = []
    for s in stages:
        for r in range(s.n_devices):
            devices.append({"stage": s.stage, "device": r, "peak_bytes": int(s.peak_bytes)})
    return {
        "model": model,
        "gpu": gpu,
        "layout": {
            "dp": layout.dp,
            "tp": layout.tp,
            "pp": layout.pp,
            "micro_batch": layout.micro_batch,
            "global_batch": layout.batch,
            "micro_batches": layout.micro_batches,
            "precision": layout.precision,
            "recompute": layout.recompute,
            "attention": layout.attention,
            "optimizer": layout.optimizer,
            "zero": layout.zero,
            "schedule": layout.schedule,
        },
        "stages": [s.to_dict() for s in stages],
        "devices": devices,
        "peak_bytes": int(max(s.peak_bytes for s in stages)),
        "fits": all(s.fits for s in stages),
    }


def _fit(console: Console, spec: Any, layout: Layout, as_json: bool) -> None:
    results = {name: smallest_fitting_layouts(spec, layout, name) for name in gpu_catalog()}
    if as_json:
        print(json.dumps({g: [r.to_dict() for r in rows] for g, rows in results.items()}, indent=2))
        return
    t = Table(
        title=f"Smallest layouts that fit {spec.name} (global batch {layout.batch}, seq {spec.seq_len}, "
        f"{layout.precision}) per GPU type",
        title_justify="left",
    )
    for c in ("GPU", "GPUs", "dp×tp×pp", "micro-batch", "recompute", "ZeRO", "peak GiB", "headroom GiB"):
        t.add_column(c, justify="left" if c in ("GPU", "dp×tp×pp", "recompute") else "right")
    for g, rows in results.items():
        if not rows:
            t.add_row(g, "-", "does not fit within the search", "", "", "", "", "")
            continue
        for i, r in enumerate(rows):
            t.add_row(
                g if i == 0 else "",
                str(r.n_gpus),
                f"{r.dp}×{r.tp}×{r.pp}",
                str(r.micro_batch),
                r.recompute,
                str(r.zero),
                _gib(r.peak_bytes),
                _gib(r.headroom_bytes),
            )
    console.print(t)

"""GPU MFU: Tessera's single-device engine against a plain PyTorch training loop of the same model, same call.

Issue 22 items 3 and 4a. On one GPU, for a GPT-1.3B-shaped model (h 2048, 24 layers, 16 heads, vocab 50257)
at seq 2048 in bf16 AMP (autocast, fp32 parameters: the runtime's ``bf16`` precision, ``tessera train``'s
default) with flash attention (SDPA):

* **plain**: the zoo model as one ``nn.Module`` and a standard loop — per micro-batch forward, loss / m,
  backward; then ``optimizer.step()`` and ``zero_grad(set_to_none=True)``;
* **tessera**: the runtime's ``Trainer`` (what each worker of ``tessera train`` runs) for a world-size-1 plan
  on the NCCL backend (gloo on CPU), stepped exactly as ``runtime.worker.run_job`` steps it (the step's RNG
  seed, the step's learning rate, the peak-memory read);

in one process, both resident, the same initial weights (the plain model loads the Trainer's), the same
synthetic batch already on the device (neither side's data loading is timed), the same micro-batching and
the same optimizer (``tessera.runtime.make_optimizer``: ``torch.optim.AdamW`` with torch's default
implementation for the parameters' device — foreach on CUDA — in both). Steps alternate plain, tessera,
tessera, plain, ... after warm-up, each timed between two device synchronizations; figures are medians.

Model FLOPs (Megatron, Narayanan et al. 2021, no recompute counted; MFU never counts recompute):
``6 N + 12 L h s`` per token, N = the parameters that take part in matmuls (every layer but the input
embedding, the output head counted even when tied to it), L layers, h hidden, s sequence; causal attention
is not halved (Megatron's and PaLM's convention). MFU = model FLOP/s / the GPU's dense bf16 peak from
``src/tessera/hardware/gpus.yaml`` (H100 and H200: 989.4 TFLOP/s).

Memory: ``tessera memory -m gpt-1.3b --gpu H100-80GB --micro-batch 4 --seq 2048`` gives 38.4 GiB peak for one
model (4.9 weights, 9.8 AdamW, 20.6 activations); two resident models + grads fit 80 GB at micro-batch 4,
hence 2 micro-batches of 4 (16,384 tokens a step); an out-of-memory error retries once with micro-batches of
half the size (same tokens a step). Dropout is 0 in both (so step 0's losses must agree: ``loss_step0``).
When Tessera is below 0.95x the plain loop (or with ``--profile always``), two steps of each run under
``torch.profiler`` and the ops whose time differs most are written to the JSON. Then, as a what-if for the
MFU target, both loops are re-timed with ``AdamW(fused=True)`` (``fused_adamw_what_if``; the runtime itself
keeps torch's default).

Then ``python3 -m tessera train`` runs a small job for 20 steps on one rank (NCCL on a GPU: the launcher's
``backend: auto``), and, budget permitting, the same 1.3B plan through ``runtime.launch`` (a spawned worker,
as ``tessera train`` runs it) for a cross-check of the in-process figure.

    python3 bench/gpu_mfu.py --device cuda --budget-s 100 --out $OUT      # GPU
    python3 bench/gpu_mfu.py --device cpu --smoke                        # CPU smoke (gpt-small-cpu, seq 64)
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from tessera.plan import simple_plan
from tessera.runtime import RunOptions, SyntheticData, Trainer, ZooModel, launch, make_optimizer
from tessera.runtime.launcher import free_port, pick_backend
from tessera.runtime.telemetry import peak_memory_bytes
from tessera.runtime.worker import device_for

OUT = Path(__file__).parent / "results"
GIB = 2**30


# ------------------------------------------------------------------------------------------------ helpers
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device) -> float:
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def environment(device: torch.device) -> dict[str, Any]:
    env: dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": f"{platform.machine()} {os.cpu_count()} cores",
        "device": str(device),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(
            gpu=torch.cuda.get_device_name(device),
            gpu_memory_gib=round(props.total_memory / GIB, 1),
            cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version(),
            flash_sdp_enabled=torch.backends.cuda.flash_sdp_enabled(),
        )
    else:
        env["gpu"] = None
    return env


def peak_flops(device: torch.device, precision: str) -> tuple[float, str]:
    """(dense peak FLOP/s, where it came from): gpus.yaml for a CUDA device, the catalog's CPU placeholder
    otherwise (CPU MFU is only a smoke figure)."""
    from tessera.hardware.catalog import get_gpu
    from tessera.perf.profiler import catalog_name

    key = "bf16" if precision.startswith("bf16") else precision
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        name = catalog_name(props.name, int(props.total_memory))
        if name is None:
            return float("nan"), f"no gpus.yaml entry matches {props.name!r}"
        return get_gpu(name).peak_flops(key), f"src/tessera/hardware/gpus.yaml {name} {key} dense"
    return get_gpu("cpu").peak_flops(
        key
    ), f"src/tessera/hardware/gpus.yaml placeholder cpu {key} (not a peak)"


def model_flops_per_token(model: nn.Module, seq: int) -> tuple[float, int, str]:
    """(FLOPs per token, matmul parameters N, formula): ``6 N + 12 L h s`` (Megatron, no recompute)."""
    arch = model.arch  # type: ignore[attr-defined]
    seen: set[int] = set()
    n = 0
    for layer in list(model.layers)[1:]:  # the input embedding is a lookup; a tied head is counted here
        for p in layer.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                n += p.numel()
    attn = 12 * arch.n_layers * arch.hidden * seq
    return 6.0 * n + attn, n, "6*N + 12*L*h*s per token (Megatron; no recompute; causal not halved)"


def flash_available(device: torch.device, heads: int, head_dim: int, seq: int) -> bool | str:
    """Whether SDPA's flash kernel runs this model's attention shape in bf16 (False/str: why not)."""
    if device.type != "cuda":
        return "cpu: SDPA math/flash-cpu kernel"
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(1, heads, seq, head_dim, device=device, dtype=torch.bfloat16)
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
        return True
    except RuntimeError as e:
        return f"False: {str(e).splitlines()[0][:200]}"


def optimizer_impl(opt: torch.optim.Optimizer) -> str:
    """Which AdamW implementation ``opt`` runs (torch picks foreach for CUDA params when neither is set)."""
    d = opt.defaults
    if d.get("fused"):
        return "fused"
    if d.get("foreach") is not None:
        return "foreach" if d["foreach"] else "for-loop"
    from torch.optim.optimizer import _default_to_fused_or_foreach

    params = [p for g in opt.param_groups for p in g["params"]]
    fused, foreach = _default_to_fused_or_foreach(params, differentiable=False, use_fused=False)
    return "fused" if fused else "foreach" if foreach else "for-loop"


# ------------------------------------------------------------------------------------------- the pair
class Pair:
    """The plain loop and Tessera's Trainer on the same model, batch and optimizer."""

    def __init__(self, args: argparse.Namespace, device: torch.device, backend: str) -> None:
        self.args = args
        self.device = device
        self.factory = ZooModel(args.model, overrides=(("dropout", 0.0),))
        with torch.device("meta"):
            meta = self.factory(layer_range=None, tp=None, attention="flash", recompute="none")
        self.n_layers = len(meta.layers)
        self.global_batch = args.micro_batch * args.micro_batches
        gpu_type = "cpu"
        if device.type == "cuda":
            from tessera.perf.profiler import catalog_name

            props = torch.cuda.get_device_properties(device)
            gpu_type = catalog_name(props.name, int(props.total_memory)) or "cpu"
        self.plan = simple_plan(
            args.model,
            n_layers=self.n_layers,
            global_batch=self.global_batch,
            seq_len=args.seq,
            dp=1,
            micro_batches=args.micro_batches,
            precision=args.precision,
            gpu_type=gpu_type,
        )
        self.options = RunOptions(
            steps=10**6, learning_rate=args.lr, seed=0, model=self.factory, backend=backend
        )
        self.training = self.options.training()
        t0 = time.perf_counter()
        dev = device_for(self.plan, 0, backend)  # what the worker does (sets the CUDA device)
        assert dev.type == device.type, (dev, device)
        self.trainer = Trainer(
            self.plan, 0, self.factory, seed=0, learning_rate=self.training.lr_at(0, self.options.steps),
            device=device, skip_nonfinite=False, training=self.training,
        )  # fmt: skip
        self.build_tessera_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        with torch.device(device):
            plain = self.factory(layer_range=None, tp=None, attention="flash", recompute="none")
        plain.to(device)
        plain.load_state_dict(self.trainer.stage.module.state_dict())
        plain.train()
        self.plain = plain
        self.opt = make_optimizer(
            self.plan.optimizer, list(plain.parameters()), args.lr, self.training.weight_decay
        )
        self.build_plain_s = time.perf_counter() - t0
        self.inputs, self.targets = SyntheticData(0).batch(
            self.trainer.stage.module, 0, self.global_batch, args.seq
        )
        self.autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
        self.t_step = 0
        self.p_step = 0
        self.losses: dict[str, list[float]] = {"plain": [], "tessera": []}

    def plain_step(self) -> None:
        """The textbook loop: forward, loss, backward per micro-batch; step; zero_grad."""
        m, mb = self.args.micro_batches, self.args.micro_batch
        total = None
        for k in range(m):
            x = self.inputs[k * mb : (k + 1) * mb].to(self.device, non_blocking=True)
            y = self.targets[k * mb : (k + 1) * mb].to(self.device, non_blocking=True)
            ctx = (
                torch.autocast(self.device.type, dtype=self.autocast_dtype)
                if self.autocast_dtype is not None
                else contextlib.nullcontext()
            )
            with ctx:
                loss = self.plain.loss(self.plain(x), y) / m
            loss.backward()
            total = loss.detach() if total is None else total + loss.detach()
        lr = self.training.lr_at(self.p_step, self.options.steps)
        for g in self.opt.param_groups:
            g["lr"] = lr
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.losses["plain"].append(float(total))  # the loop's one host read, for logging
        self.p_step += 1

    def tessera_step(self) -> None:
        """One iteration of ``runtime.worker.run_job``'s loop, minus the queue message."""
        step = self.t_step
        torch.manual_seed(hash((self.options.seed, step, 0, 0)) % (2**63))
        lr = self.training.lr_at(step, self.options.steps)
        stats = self.trainer.step(step, self.inputs, self.targets, learning_rate=lr)
        peak_memory_bytes(self.device)
        self.losses["tessera"].append(stats.loss)
        self.t_step += 1

    def close(self) -> None:
        self.trainer.close()
        del self.trainer, self.plain, self.opt


def run_pair(args, device: torch.device, backend: str, peak: float, deadline: float) -> dict[str, Any]:
    row: dict[str, Any] = {"model": args.model}
    pair = Pair(args, device, backend)
    try:
        fpt, n, formula = model_flops_per_token(pair.plain, args.seq)
        arch = pair.plain.arch  # type: ignore[attr-defined]
        row.update(
            seq=args.seq,
            micro_batch=args.micro_batch,
            micro_batches=args.micro_batches,
            global_batch=pair.global_batch,
            tokens_per_step=pair.global_batch * args.seq,
            precision=f"{args.precision} (AMP: autocast bf16, fp32 parameters and AdamW state)"
            if args.precision == "bf16"
            else args.precision,
            dropout=0.0,
            attention="flash (SDPA)",
            flash_attention_available=flash_available(
                device, arch.n_heads, arch.hidden // arch.n_heads, args.seq
            ),
            optimizer=f"AdamW ({optimizer_impl(pair.opt)}) via tessera.runtime.make_optimizer, both sides",
            tessera_optimizer_impl=optimizer_impl(pair.trainer.optimizer),
            params=sum(p.numel() for p in pair.plain.parameters()),
            matmul_params=n,
            flops_per_token=fpt,
            flops_formula=formula,
            build_tessera_s=round(pair.build_tessera_s, 2),
            build_plain_s=round(pair.build_plain_s, 2),
        )
        fns = {"plain": pair.plain_step, "tessera": pair.tessera_step}
        for _ in range(args.warmup):
            for f in fns.values():
                f()
        row["loss_step0"] = {k: v[0] for k, v in pair.losses.items()}
        times: dict[str, list[float]] = {"plain": [], "tessera": []}
        truncated = False
        for i in range(args.iters):
            if i >= 2 and time.monotonic() > deadline:
                truncated = True
                break
            order = ("plain", "tessera") if i % 2 == 0 else ("tessera", "plain")
            for k in order:
                times[k].append(timed(fns[k], device))
        med = {k: statistics.median(v) for k, v in times.items()}
        tokens = pair.global_batch * args.seq
        tps = {k: tokens / v for k, v in med.items()}
        mfu = {k: fpt * v / peak for k, v in tps.items()}
        row.update(
            timed_steps=len(times["tessera"]),
            warmup_steps=args.warmup,
            truncated=truncated,
            tessera_step_s=med["tessera"],
            plain_step_s=med["plain"],
            step_times_s={k: [round(t, 5) for t in v] for k, v in times.items()},
            tokens_per_s=tps["tessera"],
            plain_tokens_per_s=tps["plain"],
            mfu=mfu["tessera"],
            plain_mfu=mfu["plain"],
            ratio_vs_plain=tps["tessera"] / tps["plain"],
            final_loss={k: v[-1] for k, v in pair.losses.items()},
        )
        if device.type == "cuda":
            row["peak_memory_gib_both_models"] = round(torch.cuda.max_memory_allocated(device) / GIB, 2)
        if args.profile == "always" or (args.profile == "auto" and row["ratio_vs_plain"] < 0.95):
            if time.monotonic() < deadline:
                try:  # the runtime's own optimizer still: before the what-if swaps it
                    row["profile"] = profile_pair(fns, device, args.profile_steps)
                except Exception as e:  # noqa: BLE001
                    row["profile"] = {"error": f"{type(e).__name__}: {e}"[:500]}
            else:
                row["profile"] = "skipped: budget spent"
        if args.fused_what_if:
            if time.monotonic() < deadline:
                try:
                    row["fused_adamw_what_if"] = fused_what_if(pair, args, device, fpt, peak)
                except Exception as e:  # noqa: BLE001 - a what-if must not cost the row
                    row["fused_adamw_what_if"] = {"error": f"{type(e).__name__}: {e}"[:500]}
            else:
                row["fused_adamw_what_if"] = "skipped: budget spent"
    finally:
        pair.close()
        del pair
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
    return row


def fused_what_if(pair: Pair, args, device: torch.device, fpt: float, peak: float) -> dict[str, Any]:
    """Both loops again with ``torch.optim.AdamW(fused=True)`` in place of the runtime's optimizer (the
    Trainer's swapped by hand: a what-if for the lead, not what the runtime runs today)."""
    wd = pair.training.weight_decay
    wd = 0.01 if wd is None else wd  # make_optimizer's AdamW default
    tr = pair.trainer
    mine = [p for g in tr.optimizer.param_groups for p in g["params"]]
    lr = tr.optimizer.param_groups[0]["lr"]
    tr.optimizer = torch.optim.AdamW(mine, lr=lr, weight_decay=wd, fused=True)
    pair.opt = torch.optim.AdamW(list(pair.plain.parameters()), lr=lr, weight_decay=wd, fused=True)
    gc.collect()
    fns = {"plain": pair.plain_step, "tessera": pair.tessera_step}
    for _ in range(args.fused_warmup):
        for f in fns.values():
            f()
    times: dict[str, list[float]] = {"plain": [], "tessera": []}
    for i in range(args.fused_iters):
        for k in ("plain", "tessera") if i % 2 == 0 else ("tessera", "plain"):
            times[k].append(timed(fns[k], device))
    tokens = pair.global_batch * args.seq
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "optimizer": "torch.optim.AdamW(fused=True), both loops",
        "timed_steps": args.fused_iters,
        "tessera_step_s": med["tessera"],
        "plain_step_s": med["plain"],
        "tokens_per_s": tokens / med["tessera"],
        "plain_tokens_per_s": tokens / med["plain"],
        "mfu": fpt * tokens / med["tessera"] / peak,
        "plain_mfu": fpt * tokens / med["plain"] / peak,
        "ratio_vs_plain": med["plain"] / med["tessera"],
    }


def profile_pair(fns: dict[str, Any], device: torch.device, steps: int, top: int = 12) -> dict[str, Any]:
    """Per step, each op's self device and CPU time for both loops; the ops whose times differ most."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    per: dict[str, dict[str, dict[str, float]]] = {}
    for name, fn in fns.items():
        sync(device)
        with profile(activities=acts) as prof:
            for _ in range(steps):
                fn()
            sync(device)
        ops: dict[str, dict[str, float]] = {}
        for e in prof.key_averages():
            dev_us = getattr(e, "self_device_time_total", 0.0) or 0.0
            ops[e.key[:120]] = {
                "device_ms": dev_us / 1e3 / steps,
                "cpu_ms": e.self_cpu_time_total / 1e3 / steps,
                "calls": e.count / steps,
            }
        per[name] = ops
    out: dict[str, Any] = {"steps": steps}
    for name, ops in per.items():
        out[f"{name}_total"] = {
            "device_ms": round(sum(o["device_ms"] for o in ops.values()), 3),
            "cpu_ms": round(sum(o["cpu_ms"] for o in ops.values()), 3),
            "kernel_launches": sum(o["calls"] for k, o in ops.items() if "LaunchKernel" in k),
        }
        key = "device_ms" if device.type == "cuda" else "cpu_ms"
        out[f"{name}_top"] = [
            {"op": k, **{f: round(v, 3) for f, v in o.items()}}
            for k, o in sorted(ops.items(), key=lambda kv: -kv[1][key])[:top]
        ]
    diffs = []
    zero = {"device_ms": 0.0, "cpu_ms": 0.0, "calls": 0.0}
    for k in set(per["plain"]) | set(per["tessera"]):
        a, b = per["plain"].get(k, zero), per["tessera"].get(k, zero)
        diffs.append(
            {
                "op": k,
                "device_ms_tessera_minus_plain": round(b["device_ms"] - a["device_ms"], 3),
                "cpu_ms_tessera_minus_plain": round(b["cpu_ms"] - a["cpu_ms"], 3),
                "calls_tessera_minus_plain": round(b["calls"] - a["calls"], 2),
            }
        )
    diffs.sort(
        key=lambda d: -(abs(d["device_ms_tessera_minus_plain"]) + 0.1 * abs(d["cpu_ms_tessera_minus_plain"]))
    )
    out["largest_differences"] = diffs[: 2 * top]
    return out


# ------------------------------------------------------------------------------ runtime.launch cross-check
def run_launch(args, backend: str, peak: float, fpt: float) -> dict[str, Any]:
    """The same plan through ``runtime.launch`` (one spawned worker, as ``tessera train`` runs it)."""
    factory = ZooModel(args.model, overrides=(("dropout", 0.0),))
    with torch.device("meta"):
        n_layers = len(factory(layer_range=None, tp=None, attention="flash", recompute="none").layers)
    gb = args.micro_batch * args.micro_batches
    gpu_type = "cpu"
    if torch.cuda.is_available() and backend == "nccl":
        from tessera.perf.profiler import catalog_name

        props = torch.cuda.get_device_properties(0)
        gpu_type = catalog_name(props.name, int(props.total_memory)) or "cpu"
    plan = simple_plan(
        args.model, n_layers=n_layers, global_batch=gb, seq_len=args.seq, dp=1,
        micro_batches=args.micro_batches, precision=args.precision, gpu_type=gpu_type,
    )  # fmt: skip
    steps = args.warmup + args.launch_iters
    t0 = time.perf_counter()
    res = launch(plan, RunOptions(steps=steps, learning_rate=args.lr, model=factory, backend=backend))
    times = [r.iter_time_s for r in res.records[args.warmup :]]
    med = statistics.median(times)
    tps = gb * args.seq / med
    return {
        "ran": True,
        "backend": backend,
        "steps": len(res.records),
        "timed_steps": len(times),
        "step_s": med,
        "tokens_per_s": tps,
        "mfu": fpt * tps / peak,
        "final_loss": res.losses[-1],
        "wall_s": round(time.perf_counter() - t0, 2),
        "note": "median Trainer.step time the worker reports (iter_time_s telemetry), after warm-up",
    }


# ----------------------------------------------------------------------------------- tessera train (CLI)
def run_nccl_train(args, device: torch.device, timeout_s: float) -> dict[str, Any]:
    """``python3 -m tessera train JOB --devices 1`` on a small job: NCCL on a GPU (``backend: auto``)."""
    backend = pick_backend(RunOptions(), 1)
    work = Path(tempfile.mkdtemp(prefix="tessera-gpu-mfu-"))
    job = work / "job.yaml"
    job.write_text(
        "version: 1\n"
        "name: gpu-mfu-nccl\n"
        f"model: {'gpt-tiny' if args.smoke else 'gpt-small-cpu'}\n"
        "global_batch: 8\n"
        f"seq_len: {64 if device.type == 'cpu' else 128}\n"
        f"steps: {args.nccl_steps}\n"
        "optimizer: adamw\n"
        f"precision: {'fp32' if device.type == 'cpu' else 'bf16'}\n"
        "learning_rate: 1.0e-3\n"
    )
    run_dir = work / "run"
    cmd = [sys.executable, "-m", "tessera", "train", str(job), "--devices", "1", "--run-dir", str(run_dir)]
    cmd += ["--steps", str(args.nccl_steps), "--timeout", "120"]
    out: dict[str, Any] = {
        "command": " ".join(["python3", *cmd[1:]]),
        "backend": backend,
        "backend_note": "the launcher's backend 'auto' (pick_backend): nccl when CUDA is available, else gloo",
        "job": job.read_text(),
    }
    t0 = time.perf_counter()
    env = {**os.environ, "COLUMNS": "400"}  # Rich wraps the CLI's summary line at the terminal width
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    if (
        proc.returncode != 0
        and "ModuleNotFoundError" in proc.stderr
        and not (run_dir / "telemetry.jsonl").exists()
    ):
        # the CLI's own imports failed on this machine (not the training): the same command function, called
        # directly, still shows whether training on one NCCL rank works
        out["cli_error"] = proc.stderr[-1500:]
        call = (
            "from tessera.commands.train import train_command; "
            f"train_command({str(job)!r}, devices=1, steps={args.nccl_steps}, run_dir={str(run_dir)!r}, timeout_s=120)"
        )
        cmd = [sys.executable, "-c", call]
        out["command"] = f"python3 -c {call!r}  (fallback: python3 -m tessera failed to import)"
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    out["wall_s"] = round(time.perf_counter() - t0, 2)
    out["returncode"] = proc.returncode
    tel = run_dir / "telemetry.jsonl"
    recs = [json.loads(line) for line in tel.read_text().splitlines()] if tel.exists() else []
    out["ran"] = proc.returncode == 0 and len(recs) == args.nccl_steps
    out["steps"] = len(recs)
    if recs:
        out["first_loss"] = recs[0]["loss"]
        out["final_loss"] = recs[-1]["loss"]
        out["median_step_s"] = statistics.median(r["iter_time_s"] for r in recs)
    keep = ("done:", "error:", "training ")
    out["cli_lines"] = [ln.strip()[:400] for ln in proc.stderr.splitlines() if any(k in ln for k in keep)][
        -3:
    ]
    if not out["ran"]:
        out["stderr_tail"] = proc.stderr[-2000:]
        out["stdout_tail"] = proc.stdout[-1000:]
    return out


# ------------------------------------------------------------------------------------------------- main
def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu"
    )
    ap.add_argument("--smoke", action="store_true", help="tiny model (gpt-small-cpu, seq 64), few steps")
    ap.add_argument("--out", default=str(OUT), help="folder for gpu_mfu.json")
    ap.add_argument("--budget-s", type=float, default=100.0, help="wall-clock budget of the whole script")
    ap.add_argument("--model", default=None, help="zoo model (default gpt-1.3b; smoke gpt-small-cpu)")
    ap.add_argument("--seq", type=int, default=None, help="default 2048; smoke 64")
    ap.add_argument(
        "--micro-batch", type=int, default=None, help="samples per micro-batch (default 4; smoke 2)"
    )
    ap.add_argument("--micro-batches", type=int, default=2, help="accumulated micro-batches per step")
    ap.add_argument("--precision", default=None, choices=("bf16", "fp32"), help="default bf16; CPU fp32")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument(
        "--warmup", type=int, default=None, help="warm-up steps of each loop (default 3; smoke 1)"
    )
    ap.add_argument("--iters", type=int, default=None, help="timed steps of each loop (default 12; smoke 3)")
    ap.add_argument("--launch-iters", type=int, default=None, help="timed steps of the launch cross-check")
    ap.add_argument("--profile", choices=("auto", "always", "never"), default="auto")
    ap.add_argument("--profile-steps", type=int, default=2)
    ap.add_argument("--nccl-steps", type=int, default=None, help="tessera train steps (default 20; smoke 5)")
    ap.add_argument("--no-launch", action="store_true", help="skip the runtime.launch cross-check")
    ap.add_argument(
        "--no-fused-what-if", dest="fused_what_if", action="store_false",
        help="skip re-timing both loops with AdamW(fused=True)",
    )  # fmt: skip
    ap.add_argument(
        "--fused-iters", type=int, default=None, help="timed steps of the fused what-if (6; smoke 2)"
    )
    args = ap.parse_args(argv)
    smoke = args.smoke
    args.model = args.model or ("gpt-small-cpu" if smoke else "gpt-1.3b")
    args.seq = args.seq or (64 if smoke else 2048)
    args.micro_batch = args.micro_batch or (2 if smoke else 4)
    args.warmup = args.warmup if args.warmup is not None else (1 if smoke else 3)
    args.iters = args.iters or (3 if smoke else 12)
    args.launch_iters = args.launch_iters or (2 if smoke else 8)
    args.nccl_steps = args.nccl_steps or (5 if smoke else 20)
    args.fused_iters = args.fused_iters or (2 if smoke else 6)
    args.fused_warmup = 1 if smoke else 2
    args.precision = args.precision or ("bf16" if args.device == "cuda" else "fp32")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    t_start = time.monotonic()
    deadline = t_start + args.budget_s
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device here (use --device cpu --smoke)")
    device = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    backend = "nccl" if device.type == "cuda" else "gloo"
    env = environment(device)
    print("environment: " + json.dumps(env), flush=True)
    if device.type == "cpu":
        torch.set_num_threads(max(1, os.cpu_count() or 1))
    peak, peak_src = peak_flops(device, args.precision)
    result: dict[str, Any] = {
        "gpu": env["gpu"],
        "torch": torch.__version__,
        "environment": env,
        "command": " ".join(["python3", *sys.argv]) if argv is None else f"main({argv})",
        "smoke": args.smoke,
        "budget_s": args.budget_s,
        "backend": backend,
        "peak_flops": peak,
        "peak_flops_source": peak_src,
        "target": "ratio_vs_plain >= 0.95 and mfu >= 0.40 on an H100",
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every part: a run killed by its cap keeps what it measured
        result["wall_s"] = round(time.monotonic() - t_start, 1)
        (out / "gpu_mfu.json").write_text(json.dumps(result, indent=2) + "\n")

    def on_term(signum: int, frame: Any) -> None:  # a cap's SIGTERM: stop workers (launch's finally), save
        result["interrupted"] = f"signal {signum}"
        raise SystemExit(128 + signum)

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, on_term) if main_thread else None
    result["truncated"] = False
    try:
        run_parts(args, device, backend, peak, deadline, result, save)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
        result["truncated"] = bool(result["truncated"] or result.get("interrupted"))
        save()
        summary(result)
    return result


def run_parts(args, device, backend, peak, deadline, result: dict[str, Any], save) -> None:
    """The pair (the headline figures), then tessera train on one rank, then the launch cross-check."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    own_group = not dist.is_initialized()
    if own_group:  # a world of one, as the worker of a one-rank `tessera train` joins
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    rows: list[dict[str, Any]] = []
    try:
        row: dict[str, Any] = {}
        for attempt in range(2):
            oom = False
            try:
                row = run_pair(args, device, backend, peak, deadline - 0.45 * args.budget_s)
            except Exception as e:  # noqa: BLE001 - one failure must not cost the run
                row = {
                    "model": args.model,
                    "micro_batch": args.micro_batch,
                    "error": f"{type(e).__name__}: {e}"[:1000],
                    "trace": traceback.format_exc()[-3000:],
                }
                oom = isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower()
            # out of the except block: the traceback's frames (and the tensors they hold) are gone
            if attempt == 0 and oom and args.micro_batch > 1 and time.monotonic() < deadline - 60:
                # retry: the same tokens per step in twice the micro-batches of half the size
                rows.append(row)
                args.micro_batch //= 2
                args.micro_batches *= 2
                gc.collect()
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                continue
            break
        rows.append(row)
    finally:
        if own_group:
            dist.destroy_process_group()
    result["rows"] = rows
    first = rows[-1]  # the measured row (after an out-of-memory retry, the retry)
    for k in (
        "model", "mfu", "tokens_per_s", "ratio_vs_plain", "plain_tokens_per_s", "plain_mfu", "tessera_step_s",
        "plain_step_s", "step_times_s", "seq", "micro_batch", "micro_batches", "global_batch", "precision",
        "optimizer", "flops_per_token", "flops_formula", "error",
    ):  # fmt: skip
        if k in first:
            result[k] = first[k]
    result["truncated"] = bool(first.get("truncated"))
    save()
    # tessera train on one rank (NCCL on a GPU)
    left = deadline - time.monotonic()
    if left > 20:
        try:
            result["nccl_train"] = run_nccl_train(args, device, timeout_s=max(30.0, left - 5))
        except Exception as e:  # noqa: BLE001
            result["nccl_train"] = {"ran": False, "error": f"{type(e).__name__}: {e}"[:1000]}
    else:
        result["nccl_train"] = {"ran": False, "error": "skipped: budget spent"}
        result["truncated"] = True
    save()
    if torch.cuda.is_available() and device.type == "cuda":
        torch.cuda.empty_cache()
    # the 1.3B plan through runtime.launch (a worker process), if the budget allows
    left = deadline - time.monotonic()
    need = 12 if args.smoke else 40
    if args.no_launch:
        result["tessera_launch"] = {"ran": False, "error": "skipped: --no-launch"}
    elif "flops_per_token" not in first:
        result["tessera_launch"] = {"ran": False, "error": "skipped: the in-process pair failed"}
    elif left < need:
        result["tessera_launch"] = {"ran": False, "error": f"skipped: {left:.0f} s of budget left (< {need})"}
        result["truncated"] = True
    else:
        try:
            result["tessera_launch"] = run_launch(args, backend, peak, first["flops_per_token"])
        except Exception as e:  # noqa: BLE001
            result["tessera_launch"] = {"ran": False, "error": f"{type(e).__name__}: {e}"[:1000]}


def summary(r: dict[str, Any]) -> None:
    def f(x: Any, spec: str) -> str:
        return format(x, spec) if isinstance(x, (int, float)) else "-"

    print()
    print(
        f"gpu {r['gpu']} · torch {r['torch']} · peak {f(r['peak_flops'] / 1e12, '.1f')} TFLOP/s ({r['peak_flops_source']})"
    )
    print(f"{'loop':<16}{'step s':>10}{'tokens/s':>12}{'MFU':>8}")
    print(
        f"{'plain':<16}{f(r.get('plain_step_s'), '10.4f')}{f(r.get('plain_tokens_per_s'), '12.0f')}{f(r.get('plain_mfu'), '8.3f')}"
    )
    print(
        f"{'tessera':<16}{f(r.get('tessera_step_s'), '10.4f')}{f(r.get('tokens_per_s'), '12.0f')}{f(r.get('mfu'), '8.3f')}"
    )
    la = r.get("tessera_launch", {})
    if la.get("ran"):
        print(
            f"{'tessera launch':<16}{f(la['step_s'], '10.4f')}{f(la['tokens_per_s'], '12.0f')}{f(la['mfu'], '8.3f')}"
        )
    fw = next((x.get("fused_adamw_what_if") for x in r.get("rows", []) if x.get("fused_adamw_what_if")), None)
    if isinstance(fw, dict) and "mfu" in fw:
        for name, pre in (("plain fused", "plain_"), ("tessera fused", "")):
            print(
                f"{name:<16}{f(fw[pre + 'step_s' if pre else 'tessera_step_s'], '10.4f')}"
                f"{f(fw[pre + 'tokens_per_s'], '12.0f')}{f(fw[pre + 'mfu'], '8.3f')}"
            )
    print(
        f"ratio tessera/plain: {f(r.get('ratio_vs_plain'), '.3f')}   model {r.get('model')} seq {r.get('seq')} "
        f"micro-batch {r.get('micro_batch')} x {r.get('micro_batches')}   {r.get('error', '')}"
    )
    nt = r.get("nccl_train", {})
    print(
        f"tessera train ({nt.get('backend')}, 1 rank): ran {nt.get('ran')}, steps {nt.get('steps')}, "
        f"final loss {f(nt.get('final_loss'), '.4f')}   {nt.get('error', '')}"
    )
    print(f"wall {r['wall_s']} s{' (truncated)' if r['truncated'] else ''}")


if __name__ == "__main__":
    main()

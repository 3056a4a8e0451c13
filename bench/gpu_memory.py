"""GPU truth for memory (issue 22 item 1): the exact trace and the fast formula against a real GPU.

Two phases, because the exact trace runs on a fake CUDA device (a C++ shim compiled against this
machine's CPU-only torch) that a CUDA build of torch cannot host:

* ``predict`` (here, CPU): for each configuration, the exact trace (``trace_stages``, fake CUDA, worker
  process) and the fast formula (``tessera.memory.formula.evaluate``); writes
  ``bench/results/gpu_memory_predicted.json`` with every request as a dict. ``--smoke`` configurations
  are also traced on fake "cpu" tensors, so ``measure --device cpu --smoke`` has a like-for-like
  prediction.
* ``measure`` (on the GPU): reads the predicted file, runs each request for real with the same
  two-iteration protocol (``tessera.memory.measure.measure_step_peak``) and compares the trace's peak
  with ``torch.cuda.max_memory_allocated`` of iteration 2, relative to what the allocator held before
  the model was built (the cuBLAS/cuBLASLt workspaces, created up front and reported separately; the
  raw, workspace-included error is reported too). Also reserved vs allocated and the CUDA context
  (``mem_get_info``, NVML when present) against the catalog's per-GPU ``context_bytes``.

    python bench/gpu_memory.py predict                      # here (a few minutes of tracing)
    python3 bench/gpu_memory.py measure --device cuda --budget-s 150 --out $OUT   # on the GPU
    python bench/gpu_memory.py measure --device cpu --smoke --out /tmp/gm         # CPU check of the path
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import statistics
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
PREDICTED = RESULTS / "gpu_memory_predicted.json"
MAX_PREDICTED_BYTES = 70e9  # every configuration must fit an H100 80GB with room for fragmentation
GB = 1e9


# ============================================================================ configurations
def gpt(h: int, layers: int, seq: int) -> dict[str, Any]:
    return dict(
        hidden=h, n_heads=h // 64, n_kv_heads=h // 64, ffn_hidden=4 * h, vocab=50257, dropout=0.1,
        n_layers=layers, max_positions=max(seq, 1024),
    )  # fmt: skip


def llama(h: int, kv: int, ffn: int, layers: int, seq: int) -> dict[str, Any]:
    return dict(
        hidden=h, n_heads=h // 128, n_kv_heads=kv, ffn_hidden=ffn, vocab=32000, norm="rmsnorm", mlp="swiglu",
        position="rope", tied_embeddings=False, dropout=0.0, bias=False, n_layers=layers,
        max_positions=max(seq, 1024),
    )  # fmt: skip


SHAPES = {
    # label: (family, arch maker(seq))
    "gpt-125m": ("gpt", lambda s: gpt(768, 12, s)),
    "gpt-350m": ("gpt", lambda s: gpt(1024, 24, s)),
    "gpt-1.3b": ("gpt", lambda s: gpt(2048, 24, s)),
    "llama-250m": ("llama", lambda s: llama(1024, 4, 2816, 16, s)),
    "llama-1b": ("llama", lambda s: llama(2048, 8, 5632, 16, s)),
    "llama-7b": ("llama", lambda s: llama(4096, 8, 11008, 32, s)),
    # smoke: tiny shapes that run on a 2-core CPU in seconds
    "gpt-tiny": (
        "gpt",
        lambda s: dict(gpt(128, 2, s), n_heads=2, n_kv_heads=2, vocab=1000, max_positions=512),
    ),
    "llama-tiny": ("llama", lambda s: dict(llama(256, 1, 512, 2, s), vocab=1000, max_positions=512)),
}

# (shape, precision, recompute, attention, seq, micro-batch, extra GridPoint fields)
FULL: list[tuple[str, str, str, str, int, int, dict[str, Any]]] = [
    ("gpt-125m", "fp32", "none", "flash", 1024, 8, {}),
    ("gpt-125m", "bf16", "none", "flash", 1024, 8, {}),
    ("gpt-125m", "bf16-master", "none", "flash", 1024, 8, {}),
    ("gpt-125m", "fp32", "none", "math", 1024, 4, {}),
    ("gpt-125m", "bf16", "none", "math", 2048, 2, {}),
    ("gpt-125m", "bf16", "selective", "math", 4096, 1, {}),
    ("gpt-125m", "bf16", "full", "flash", 8192, 2, {}),
    ("gpt-125m", "bf16", "full", "math", 8192, 1, {}),
    ("gpt-125m", "bf16-master", "selective", "flash", 4096, 4, {}),
    ("gpt-350m", "bf16", "none", "flash", 2048, 4, {}),
    ("gpt-350m", "fp32", "full", "flash", 2048, 8, {}),
    ("gpt-350m", "bf16-master", "full", "math", 2048, 2, {}),
    ("gpt-350m", "bf16", "selective", "flash", 8192, 1, {}),
    ("gpt-350m", "fp32", "selective", "math", 1024, 4, {}),
    ("gpt-1.3b", "bf16", "none", "flash", 2048, 1, {}),
    ("gpt-1.3b", "bf16", "full", "flash", 2048, 8, {}),
    ("gpt-1.3b", "bf16-master", "selective", "flash", 1024, 4, {}),
    ("gpt-1.3b", "fp32", "full", "flash", 512, 8, {}),
    ("gpt-1.3b", "bf16", "none", "math", 1024, 2, {}),
    ("llama-250m", "fp32", "none", "flash", 2048, 4, {}),
    ("llama-250m", "bf16", "none", "flash", 4096, 2, {}),
    ("llama-250m", "bf16-master", "none", "flash", 2048, 4, {}),
    ("llama-250m", "bf16", "selective", "math", 2048, 2, {}),
    ("llama-250m", "bf16", "full", "flash", 8192, 4, {}),
    ("llama-250m", "fp32", "none", "math", 512, 8, {}),
    ("llama-1b", "bf16", "none", "flash", 2048, 2, {}),
    ("llama-1b", "bf16-master", "full", "flash", 4096, 4, {}),
    ("llama-1b", "fp32", "selective", "flash", 1024, 2, {}),
    ("llama-1b", "bf16", "full", "math", 4096, 1, {}),
    # TP shards (rank 0 of the group, run alone: TP's all-reduces are in place)
    ("gpt-1.3b", "bf16", "none", "flash", 2048, 4, {"tp": 2}),
    ("gpt-350m", "fp32", "none", "math", 1024, 4, {"tp": 4}),
    ("llama-1b", "bf16-master", "selective", "flash", 4096, 2, {"tp": 4}),
    # pipeline stages (1F1B, the stage's in-flight micro-batches), some also TP shards
    ("gpt-1.3b", "bf16", "none", "flash", 2048, 2, {"stage": (4, 0, (0, 7)), "micro_batches": 8}),
    ("gpt-1.3b", "bf16-master", "selective", "flash", 2048, 2, {"stage": (4, 1, (7, 13)), "micro_batches": 8}),
    ("gpt-1.3b", "fp32", "full", "flash", 1024, 4, {"stage": (4, 3, (19, 26)), "micro_batches": 8}),
    ("llama-7b", "bf16", "none", "flash", 4096, 1, {"stage": (4, 1, (9, 17)), "micro_batches": 8, "tp": 4}),
    ("llama-7b", "bf16-master", "full", "flash", 2048, 2, {"stage": (8, 0, (0, 5)), "micro_batches": 8, "tp": 2}),
    ("llama-7b", "fp32", "selective", "math", 1024, 2, {"stage": (4, 3, (25, 34)), "micro_batches": 8, "tp": 4}),
    # ZeRO on a fake DP group (one rank's slice; ZeRO-3 is FSDP2 on real CUDA with the fake backend)
    ("gpt-350m", "bf16-master", "none", "flash", 1024, 4, {"dp": 4, "zero": 1}),
    ("gpt-350m", "bf16", "none", "flash", 1024, 4, {"dp": 2, "zero": 3}),
]  # fmt: skip

SMOKE: list[tuple[str, str, str, str, int, int, dict[str, Any]]] = [
    ("gpt-tiny", "fp32", "none", "flash", 128, 2, {}),
    ("gpt-tiny", "bf16", "full", "math", 128, 2, {}),
    (
        "llama-tiny",
        "bf16-master",
        "selective",
        "flash",
        128,
        2,
        {"stage": (2, 0, (0, 2)), "micro_batches": 2},
    ),
]


def make_point(
    shape: str, precision: str, recompute: str, attention: str, seq: int, mb: int, extra: dict
) -> Any:
    from tessera.memory.grid import GridPoint

    family, arch_of = SHAPES[shape]
    arch = arch_of(seq)
    n_stages, stage_index, layer_range = extra.get("stage", (1, 0, (0, arch["n_layers"] + 2)))
    return GridPoint(
        family=family,
        arch=arch,
        seq_len=seq,
        micro_batch=mb,
        layer_range=tuple(layer_range),
        n_stages=n_stages,
        stage_index=stage_index,
        micro_batches=extra.get("micro_batches", 1),
        precision=precision,
        recompute=recompute,
        attention=attention,
        optimizer=extra.get("optimizer", "adamw"),
        tp=extra.get("tp", 1),
        dp=extra.get("dp", 1),
        zero=extra.get("zero", 0),
    )


def config_name(shape: str, p: Any) -> str:
    parts = [shape, p.precision, f"rc={p.recompute}", p.attention, f"s{p.seq_len}", f"b{p.micro_batch}"]
    if p.tp > 1:
        parts.append(f"tp{p.tp}")
    if p.n_stages > 1:
        parts.append(f"stage{p.stage_index}/{p.n_stages}")
    if p.zero:
        parts.append(f"zero{p.zero}/dp{p.dp}")
    return " ".join(parts)


def _trace_summary(t: dict[str, Any]) -> dict[str, Any]:
    keep = ("peak_bytes", "start_bytes", "peak_phase", "breakdown", "phase_peaks", "wall_s")
    out = {k: t[k] for k in keep if k in t}
    out["end_bytes"] = t.get("meta", {}).get("end_bytes")
    return out


# ============================================================================ predict (CPU, here)
def predict(args: argparse.Namespace) -> None:
    from rich.progress import Progress

    from tessera.memory.formula import evaluate
    from tessera.memory.grid import point_spec_and_view
    from tessera.memory.trace import trace_stages

    def traced(reqs: list[Any]) -> list[dict[str, Any] | str]:
        """One worker for a chunk; if any request fails, each again alone so the error lands on its row."""
        try:
            return [_trace_summary(t.to_dict()) for t in trace_stages(reqs, in_process=False, timeout_s=1800)]
        except Exception:
            out: list[dict[str, Any] | str] = []
            for q in reqs:
                try:
                    out.append(_trace_summary(trace_stages([q], in_process=False)[0].to_dict()))
                except Exception as e:
                    out.append(f"{type(e).__name__}: {str(e)[-2000:]}")
            return out

    def rows_for(configs: list, cpu_too: bool, chunk: int = 6) -> list[dict[str, Any]]:
        rows = []
        points = [(c[0], make_point(*c)) for c in configs]
        with Progress() as progress:
            task = progress.add_task("exact traces (fake CUDA)", total=len(points))
            for lo in range(0, len(points), chunk):
                part = points[lo : lo + chunk]
                reqs = [p.trace_request() for _, p in part]
                cuda = traced(reqs)
                cpu = traced([replace(q, device="cpu") for q in reqs]) if cpu_too else [None] * len(part)
                for (shape, p), req, tc, tcpu in zip(part, reqs, cuda, cpu, strict=True):
                    row: dict[str, Any] = {
                        "name": config_name(shape, p),
                        "shape": shape,
                        "point": p.to_dict(),
                    }
                    row["request"] = req.to_dict()
                    row["trace"] = {}
                    for dev, t in (("cuda", tc), ("cpu", tcpu)):
                        if isinstance(t, dict):
                            row["trace"][dev] = t
                        elif isinstance(t, str):
                            row[f"trace_error_{dev}"] = t
                    try:
                        spec, view = point_spec_and_view(p)
                        out = evaluate(spec, [view])
                        row["formula_bytes"] = float(out.peak_bytes[0])
                        row["formula_phase"] = out.phase_names[0]
                    except Exception as e:
                        row["formula_error"] = f"{type(e).__name__}: {e}"
                    peak = row["trace"].get("cuda", {}).get("peak_bytes")
                    if peak is not None and peak > MAX_PREDICTED_BYTES:
                        row["too_big"] = True
                    progress.console.print(
                        f"{row['name']:66s} trace {peak / GB if peak else float('nan'):7.2f} GB  "
                        f"formula {row.get('formula_bytes', float('nan')) / GB:7.2f} GB"
                    )
                    rows.append(row)
                progress.advance(task, len(part))
        return rows

    import torch

    t0 = time.perf_counter()
    smoke = rows_for(SMOKE, cpu_too=True)
    full = [] if args.smoke else rows_for(FULL, cpu_too=False)
    out_path = Path(args.out) / "gpu_memory_predicted.json" if args.out else PREDICTED
    out_path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "command": " ".join(["python", *sys.argv]),
        "torch": torch.__version__,
        "trace_device": "fake cuda (tessera.memory.fakecuda)",
        "max_predicted_bytes": MAX_PREDICTED_BYTES,
        "wall_s": time.perf_counter() - t0,
        "configs": full,
        "smoke": smoke,
    }
    out_path.write_text(json.dumps(doc, indent=1))
    big = [r["name"] for r in full if r.get("too_big")]
    errors = [r["name"] for r in full + smoke if "trace_error_cuda" in r or "trace_error_cpu" in r]
    print(f"wrote {out_path}: {len(full)} configs + {len(smoke)} smoke in {doc['wall_s']:.0f} s")
    if big:
        print(f"over {MAX_PREDICTED_BYTES / GB:.0f} GB (measure skips them): {big}")
    if errors:
        print(f"trace errors: {errors}")


# ============================================================================ measure (GPU)
def _nvml_process_bytes() -> int | None:
    """This process's device memory as NVML sees it (context + kernels + everything the allocator holds)."""
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        import torch

        pynvml.nvmlInit()
        idx = torch.cuda.current_device()
        handle = pynvml.nvmlDeviceGetHandleByIndex(idx)
        pid = os.getpid()
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.pid == pid and proc.usedGpuMemory is not None:
                return int(proc.usedGpuMemory)
    except Exception:
        return None
    return None


def _device_used_bytes() -> int:
    """Bytes in use on the whole device (this process is alone on it): total − free."""
    import torch

    free, total = torch.cuda.mem_get_info()
    return int(total - free)


def _catalog_gpu(device_name: str) -> Any:
    """The catalog entry whose longest name or alias appears in the device name (None if none does)."""
    from tessera.hardware.catalog import gpu_catalog

    best, best_len = None, 0
    low = device_name.lower()
    for spec in gpu_catalog().values():
        for name in (spec.name, *spec.aliases):
            key = name.lower().replace("-", " ")
            if re.search(rf"\b{re.escape(key)}\b", low.replace("-", " ")) and len(key) > best_len:
                best, best_len = spec, len(key)
    return best


def _sdpa_kernels() -> dict[str, str]:
    """Which SDPA kernel torch picks on this GPU for the zoo's attention calls (causal, dropout 0.1, head
    dims 64 / 128): the first of flash > memory-efficient > math (torch's priority) that accepts the inputs.
    The trace always calls the flash op; fp32 on a real GPU is expected to take the efficient kernel."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out: dict[str, str] = {}
    for dtype in (torch.float32, torch.bfloat16):
        for d in (64, 128):
            q = torch.randn(2, 4, 256, d, device="cuda", dtype=dtype)
            key = f"{str(dtype).removeprefix('torch.')}/d{d}"
            out[key] = "none"
            for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH):
                try:
                    with sdpa_kernel(backend):
                        torch.nn.functional.scaled_dot_product_attention(
                            q, q, q, dropout_p=0.1, is_causal=True
                        )
                    out[key] = backend.name
                    break
                except RuntimeError:
                    continue
            del q
    return out


def _err(est: float | None, truth: float | None) -> float | None:
    if est is None or truth is None or truth <= 0:
        return None
    return (est - truth) / truth


def _stats(xs: list[float | None]) -> dict[str, Any]:
    vals = [abs(x) for x in xs if x is not None]
    if not vals:
        return {"n": 0, "mean_abs": None, "worst_abs": None}
    return {"n": len(vals), "mean_abs": statistics.fmean(vals), "worst_abs": max(vals)}


def measure(args: argparse.Namespace) -> int:
    import torch

    from tessera.memory.measure import measure_step_peak, warm_blas_workspaces
    from tessera.memory.trace import StageTraceRequest

    t_start = time.perf_counter()
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        print("--device cuda but torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    predicted = json.loads(Path(args.predicted).read_text())
    rows_in = predicted["smoke"] if args.smoke else predicted["configs"]
    if args.only:
        rows_in = [r for r in rows_in if re.search(args.only, r["name"])]
    # every 4th first: a run cut short by --budget-s still spans shapes, precisions, TP, PP and ZeRO
    rows_in = [r for _, r in sorted(enumerate(rows_in), key=lambda ir: (ir[0] % 4, ir[0]))]

    env: dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": device,
        "cuda": getattr(torch.version, "cuda", None),
        "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
    }
    gpu_name = "cpu"
    if device == "cuda":
        torch.cuda.init()
        props = torch.cuda.get_device_properties(0)
        gpu_name = torch.cuda.get_device_name(0)
        env.update(
            gpu=gpu_name, total_memory_bytes=int(props.total_memory), capability=[props.major, props.minor]
        )
        print(f"torch {torch.__version__}, {gpu_name}, {props.total_memory / GB:.1f} GB", flush=True)
        used0 = _device_used_bytes()  # right after context creation
        env["context_initial_bytes"] = used0 - torch.cuda.memory_reserved()
        try:
            env["sdpa_kernel"] = _sdpa_kernels()
        except Exception as e:  # an API that moved: say so, measure anyway
            env["sdpa_kernel"] = f"probe failed: {type(e).__name__}: {e}"
        workspace = warm_blas_workspaces("cuda")
        used1 = _device_used_bytes()
        env.update(
            after_blas_device_used_bytes=used1,
            after_blas_reserved_bytes=torch.cuda.memory_reserved(),
        )
    else:
        workspace = 0
    print("environment:", json.dumps(env))
    print(f"cuBLAS/cuBLASLt workspace bytes (allocated, no tensor): {workspace:,d}")
    print(f"{len(rows_in)} configurations from {args.predicted}")

    # rows stream to a JSON-lines journal: a CUDA error that kills the context (a device-side assert) ends
    # this process, and `--resume` starts a fresh one that records the config it died in and goes on
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    journal = out_dir / ("gpu_memory_smoke_rows.jsonl" if args.smoke else "gpu_memory_rows.jsonl")
    rows: list[dict[str, Any]] = []
    if args.resume and journal.exists():
        for line in journal.read_text().splitlines():
            entry = json.loads(line)
            if "started" in entry:
                continue
            rows.append(entry)
        done = {x["name"] for x in rows}
        started = [json.loads(x)["started"] for x in journal.read_text().splitlines() if '"started"' in x]
        for name in started:
            if name not in done:
                crashed = {
                    "name": name,
                    "error": "the process died in this configuration (CUDA context lost)",
                }
                rows.append(crashed)
                done.add(name)
                with journal.open("a") as f:
                    f.write(json.dumps(crashed) + "\n")
        rows_in = [r for r in rows_in if r["name"] not in done]
        print(f"resuming: {len(rows)} configurations already in {journal}")
    elif journal.exists():
        journal.unlink()
    n_before = len(rows)
    truncated = False
    for i, r in enumerate(rows_in, start=n_before):
        elapsed = time.perf_counter() - t_start
        if args.budget_s is not None and elapsed > args.budget_s:
            truncated = True
            print(f"budget of {args.budget_s:.0f} s spent after {i} configurations: stopping")
            break
        row: dict[str, Any] = {"name": r["name"], "point": r["point"]}
        trace = r.get("trace", {}).get(device)
        row["trace_peak_bytes"] = trace["peak_bytes"] if trace else None
        row["trace_start_bytes"] = trace["start_bytes"] if trace else None
        row["trace_phase"] = trace["peak_phase"] if trace else None
        row["formula_bytes"] = r.get("formula_bytes")
        if r.get("too_big"):
            row["error"] = "skipped: predicted over the size limit"
            rows.append(row)
            continue
        with journal.open("a") as f:
            f.write(json.dumps({"started": r["name"]}) + "\n")
        try:
            req = StageTraceRequest.from_dict(r["request"])
            m = measure_step_peak(req, device=device)
            row["measured"] = m.to_dict()
            meas = m.peak_bytes
            row["trace_error"] = _err(row["trace_peak_bytes"], meas)
            row["trace_error_raw"] = _err(row["trace_peak_bytes"], m.raw_peak_bytes)
            row["start_error"] = _err(row["trace_start_bytes"], m.start_bytes)
            row["formula_error"] = _err(row["formula_bytes"], meas)
            if device == "cuda":
                row["reserved_minus_allocated_bytes"] = m.peak_reserved_bytes - m.raw_peak_bytes
                row["fragmentation"] = m.peak_reserved_bytes / m.raw_peak_bytes
                row["device_used_bytes"] = _device_used_bytes()
                row["non_allocator_bytes"] = row["device_used_bytes"] - torch.cuda.memory_reserved()
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e)[:1500]}"
            row["traceback"] = traceback.format_exc()[-3000:]
        gc.collect()
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        te, fe = row.get("trace_error"), row.get("formula_error")
        print(
            f"[{i + 1:2d}/{n_before + len(rows_in)}] {r['name']:62s} "
            + (
                f"measured {row['measured']['peak_bytes'] / GB:7.3f} GB  trace {_fmt(te)}  formula {_fmt(fe)}"
                if "measured" in row
                else f"ERROR {row['error'][:120]}"
            ),
            flush=True,
        )
        rows.append(row)
        with journal.open("a") as f:
            f.write(json.dumps(row) + "\n")
        if "error" in row and "CUDA error" in row["error"]:
            print("the CUDA context is lost: stopping (run again with --resume)", flush=True)
            _write_result(args, rows, env, gpu_name, workspace, truncated, t_start)
            return 3

    return _write_result(args, rows, env, gpu_name, workspace, truncated, t_start)


def _write_result(
    args: argparse.Namespace,
    rows: list[dict[str, Any]],
    env: dict[str, Any],
    gpu_name: str,
    workspace: int,
    truncated: bool,
    t_start: float,
) -> int:
    import torch

    device = args.device
    ok = [x for x in rows if "measured" in x]
    trace_s = _stats([x.get("trace_error") for x in ok])
    raw_s = _stats([x.get("trace_error_raw") for x in ok])
    formula_s = _stats([x.get("formula_error") for x in ok])
    start_s = _stats([x.get("start_error") for x in ok])
    result: dict[str, Any] = {
        "gpu": gpu_name,
        "torch": torch.__version__,
        "command": " ".join(["python3", *sys.argv]),
        "environment": env,
        "smoke": bool(args.smoke),
        "truncated": truncated,
        "configs": len(ok),
        "configs_attempted": len(rows),
        "configs_failed": [x["name"] for x in rows if "error" in x],
        "trace_error_basis": (
            "tensor bytes: (trace peak - measured) / measured, measured = max_memory_allocated of iteration 2 "
            "minus memory_allocated before the model was built (the cuBLAS/cuBLASLt workspaces, no tensors); "
            "trace_*_raw_* use max_memory_allocated as reported"
        ),
        "trace_mean_abs_error": trace_s["mean_abs"],
        "trace_worst_abs_error": trace_s["worst_abs"],
        "trace_mean_abs_error_raw": raw_s["mean_abs"],
        "trace_worst_abs_error_raw": raw_s["worst_abs"],
        "trace_start_mean_abs_error": start_s["mean_abs"],
        "formula_mean_abs_error": formula_s["mean_abs"],
        "formula_worst_abs_error": formula_s["worst_abs"],
        "formula_configs": formula_s["n"],
        "formula_note": (
            "the formula models CUDA semantics; on device cpu its error is not like for like"
            if device == "cpu"
            else "tensor bytes, same basis as trace_mean_abs_error"
        ),
        "targets": {"trace_mean_abs_error": 0.03, "trace_worst_abs_error": 0.05},
        "cublas_workspace_bytes": workspace,
        "trace_underestimates": sum(1 for x in ok if (x.get("trace_error") or 0) < 0),
    }
    if device == "cuda" and ok:
        result.update(_overhead(gpu_name, ok, workspace, env))
    result["wall_s"] = time.perf_counter() - t_start
    result["rows"] = rows
    out_dir = Path(args.out)
    name = "gpu_memory_smoke.json" if args.smoke else "gpu_memory.json"
    (out_dir / name).write_text(json.dumps(result, indent=1))
    _print_table(result, rows, out_dir / name)
    return 0 if ok else 1


def _overhead(gpu_name: str, ok: list[dict[str, Any]], workspace: int, env: dict[str, Any]) -> dict[str, Any]:
    """Reserved vs allocated and the non-allocator context against the catalog's ``context_bytes``."""
    import torch

    from tessera.memory.overhead import calibrate

    frag = [x["fragmentation"] for x in ok]
    slack = [x["reserved_minus_allocated_bytes"] for x in ok]
    non_alloc = [x["non_allocator_bytes"] for x in ok]
    context_end = _device_used_bytes() - torch.cuda.memory_reserved()
    nvml = _nvml_process_bytes()
    measured = (
        max([*non_alloc, context_end]) + workspace
    )  # everything no tensor trace sees, but fragmentation
    out: dict[str, Any] = {
        "fragmentation_median": statistics.median(frag),
        "fragmentation_mean": statistics.fmean(frag),
        "fragmentation_max": max(frag),
        "reserved_minus_allocated_median_bytes": statistics.median(slack),
        "reserved_minus_allocated_max_bytes": max(slack),
        "context_initial_bytes": env.get("context_initial_bytes"),
        "context_end_bytes": context_end,
        "non_allocator_max_bytes": max(non_alloc),
        "nvml_process_bytes": nvml,
        "overhead_measured_bytes": measured,
        "overhead_measured_definition": (
            "max over the run of (total - free from mem_get_info) - memory_reserved (CUDA context, kernel images, "
            "cuBLAS handles; this process alone on the GPU) + cuBLAS/cuBLASLt workspace bytes"
        ),
    }
    spec = _catalog_gpu(gpu_name)
    if spec is not None:
        out["catalog_gpu"] = spec.name
        out["overhead_catalog_bytes"] = spec.context_bytes
        out["overhead_moved_bytes"] = measured - spec.context_bytes
        out["overhead_moved_fraction"] = (measured - spec.context_bytes) / spec.context_bytes
        big = max(ok, key=lambda x: x["measured"]["raw_peak_bytes"])
        m = big["measured"]
        try:
            o = calibrate(
                spec.name,
                process_used_bytes=m["peak_reserved_bytes"] + max([*non_alloc, context_end]),
                max_reserved_bytes=m["peak_reserved_bytes"],
                max_allocated_bytes=m["raw_peak_bytes"],
            )
            out["overhead_calibrate_from_largest"] = {
                "config": big["name"],
                "context_bytes": o.context_bytes,
                "fragmentation": o.fragmentation,
            }
        except ValueError as e:
            out["overhead_calibrate_from_largest"] = {"error": str(e)}
    else:
        out["catalog_gpu"] = None
        out["overhead_catalog_bytes"] = None
    return out


def _fmt(x: float | None, spec: str = "+.4f") -> str:
    return "n/a" if x is None else format(x, spec)


def _print_table(result: dict[str, Any], rows: list[dict[str, Any]], path: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"GPU memory truth on {result['gpu']} (torch {result['torch']})")
    for col in ("config", "measured GB", "trace err", "raw err", "formula err", "frag"):
        table.add_column(col, justify="left" if col == "config" else "right")
    for x in rows:
        if "measured" not in x:
            table.add_row(x["name"], "ERROR", "", "", "", x.get("error", "")[:40])
            continue
        table.add_row(
            x["name"],
            f"{x['measured']['peak_bytes'] / GB:.3f}",
            _fmt(x.get("trace_error")),
            _fmt(x.get("trace_error_raw")),
            _fmt(x.get("formula_error")),
            _fmt(x.get("fragmentation"), ".3f"),
        )
    console = Console(width=160)
    console.print(table)
    lines = [
        f"configs measured            {result['configs']} / {result['configs_attempted']}"
        + ("  (TRUNCATED by --budget-s)" if result["truncated"] else ""),
        f"trace mean / worst |err|    {_fmt(result['trace_mean_abs_error'], '.4f')} / "
        f"{_fmt(result['trace_worst_abs_error'], '.4f')}   (target 0.03 / 0.05; workspace-excluded)",
        f"  raw (workspace included)  {_fmt(result['trace_mean_abs_error_raw'], '.4f')} / "
        f"{_fmt(result['trace_worst_abs_error_raw'], '.4f')}",
        f"formula mean / worst |err|  {_fmt(result['formula_mean_abs_error'], '.4f')} / "
        f"{_fmt(result['formula_worst_abs_error'], '.4f')}   ({result['formula_configs']} configs)",
        f"cuBLAS workspace            {result['cublas_workspace_bytes']:,d} B",
    ]
    if "overhead_measured_bytes" in result:
        lines += [
            f"fragmentation median / max {result['fragmentation_median']:.4f} / {result['fragmentation_max']:.4f}",
            f"overhead catalog/measured  {_fmt(result.get('overhead_catalog_bytes'), ',')} / "
            f"{result['overhead_measured_bytes']:,d} B (catalog entry {result.get('catalog_gpu')})",
        ]
    lines.append(f"wrote {path}  ({result['wall_s']:.0f} s)")
    print("\n".join(lines))


# ============================================================================ main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("phase", choices=("predict", "measure"))
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--smoke", action="store_true", help="tiny configurations only")
    ap.add_argument("--out", default=None, help="output folder (default bench/results)")
    ap.add_argument("--budget-s", type=float, default=None, help="stop measuring after this many seconds")
    ap.add_argument("--predicted", default=str(PREDICTED), help="the predict phase's JSON")
    ap.add_argument(
        "--resume", action="store_true", help="go on from the rows journal of an earlier run in --out"
    )
    ap.add_argument("--only", default=None, help="measure only configurations whose name matches this regex")
    args = ap.parse_args()
    if args.phase == "predict":
        predict(args)
        return 0
    if args.out is None:
        args.out = str(RESULTS)
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())

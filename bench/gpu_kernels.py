"""Kernel efficiency on a lent GPU against what the cost model prices kernels with (issue 20, item 4).

    python3 bench/gpu_kernels.py measure --device cuda [--out DIR] [--budget-s 150]   # on the GPU: torch only
    python bench/gpu_kernels.py report RAW.json                                          # here: the comparison

``tessera/hardware/efficiency.yaml`` prices a block's GEMMs with a curve fitted to a published GEMM table and
its attention core at FlashAttention's published fraction of peak. ``measure`` times, on the device it runs on,
bf16 GEMMs at the shapes of that table and at the shapes of GPT blocks (hidden 768 to 8192, 512 to 32k tokens
per micro-batch), and the flash SDPA kernel forward and backward, causal and not, from 512 to 32k tokens, with
PyTorch alone (the device's own); then one whole block of zoo models by Tessera's profiler (``--parts blocks``,
which needs Tessera's dependencies there). ``report`` puts each measurement beside
the catalog's figure for the GPU type the device is (the fraction of the datasheet's dense bf16 peak) and writes
``bench/results/gpu_kernels.json``: per-shape rows, the mean and worst error of the catalog's GEMM curve, and
the attention fraction by sequence length — counted with the FLOPs the cost model counts for the attention core
(``4·s²·h`` per sequence) halved under a causal mask, as FlashAttention computes it.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = Path(__file__).resolve().parents[1]

CATALOG_SHAPES = [  # (batch, m, n, k): the rows efficiency.yaml's hopper table holds
    (1, 256, 256, 256),
    (1, 512, 512, 512),
    (1, 1024, 1024, 1024),
    (1, 2048, 2048, 2048),
    (1, 4096, 4096, 4096),
    (2, 4096, 4096, 4096),
    (4, 4096, 4096, 4096),
    (1, 4096, 4096, 256),
    (1, 4096, 4096, 512),
    (1, 4096, 4096, 1024),
    (1, 4096, 4096, 2048),
    (1, 256, 4096, 4096),
    (1, 512, 4096, 4096),
    (1, 1024, 4096, 4096),
    (1, 2048, 4096, 4096),
    (4, 2048, 4096, 4096),
    (1, 4096, 1024, 4096),
    (1, 1024, 1024, 4096),
    (1, 256, 2048, 256),
    (1, 256, 1024, 1024),
    (1, 512, 1024, 1024),
    (1, 1024, 2048, 1024),
    (1, 2048, 2048, 1024),
    (1, 4096, 1024, 1024),
]
HIDDENS = (768, 1024, 2048, 4096, 8192)
TOKENS = (512, 2048, 8192, 32768)
SEQS = (512, 1024, 2048, 4096, 8192, 16384, 32768)
HEAD_DIM = 128
PARTS = ("gemm", "attention", "blocks")
ATTN_TOKENS = (
    32768  # tokens per call (batch = ATTN_TOKENS // seq): the same work per row, more of it per pair
)


def block_shapes(hidden: int, tokens: int) -> list[tuple[str, int, int, int]]:
    """(name, m, n, k) of a GPT block's four forward GEMMs, as ``BlockShape.gemms`` lists them."""
    return [
        ("qkv", tokens, 3 * hidden, hidden),
        ("proj", tokens, hidden, hidden),
        ("fc1", tokens, 4 * hidden, hidden),
        ("fc2", tokens, hidden, 4 * hidden),
    ]


def _time_s(fn, warmup: int, repeats: int, device: torch.device, back_to_back: int = 10) -> float:
    """Median seconds of one ``fn`` call: ``repeats`` CUDA-event-timed regions (wall clock on a CPU) of
    ``back_to_back`` calls each, so the launch queue stays full as in training and a small kernel's figure is
    its run time, not one launch's latency."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(back_to_back):
                fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3 / back_to_back)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(args: argparse.Namespace) -> int:
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    smoke = args.smoke or device.type != "cuda"
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    started = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    raw: dict = {
        "benchmark": "gpu_kernels",
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "dtype": str(dtype).removeprefix("torch."),
        "smoke": smoke,
        "command": " ".join(sys.argv),
        "gemm": [],
        "attention": [],
        "truncated": False,
    }
    path = out / "gpu_kernels_raw.json"

    def save() -> None:
        raw["elapsed_s"] = time.monotonic() - started
        path.write_text(json.dumps(raw, indent=1))

    reps = 3 if smoke else 20
    shapes = [("catalog", b, m, n, k) for b, m, n, k in CATALOG_SHAPES]
    for h in HIDDENS:
        for t in TOKENS:
            shapes += [(f"block h{h} t{t} {name}", 1, m, n, k) for name, m, n, k in block_shapes(h, t)]
    if smoke:
        shapes = [("catalog", 1, 64, 64, 64), ("block h64 t128 fc1", 1, 128, 256, 64)]
    if "gemm" not in args.parts:
        shapes = []
    for label, b, m, n, k in shapes:
        if time.monotonic() - started > args.budget_s * 0.6:
            raw["truncated"] = True
            break
        x = torch.randn(b, m, k, device=device, dtype=dtype)
        w = torch.randn(b, k, n, device=device, dtype=dtype)
        s = _time_s(functools.partial(torch.bmm, x, w), 5, reps, device)
        raw["gemm"].append({"label": label, "shape": [b, m, n, k], "flops": 2.0 * b * m * n * k, "time_s": s})
        print(f"gemm {label:24s} {b}x{m}x{n}x{k}: {2.0 * b * m * n * k / s / 1e12:8.1f} TFLOP/s", flush=True)
    save()
    heads = 16
    seqs = () if "attention" not in args.parts else (64, 128) if smoke else SEQS
    for seq in seqs:
        for causal in (True, False):
            if time.monotonic() - started > args.budget_s:
                raw["truncated"] = True
                break
            batch = max(1, (256 if smoke else ATTN_TOKENS) // seq)
            q, k, v = (
                torch.randn(batch, heads, seq, HEAD_DIM, device=device, dtype=dtype, requires_grad=True)
                for _ in range(3)
            )
            grad = torch.randn_like(q)
            backend = SDPBackend.FLASH_ATTENTION if device.type == "cuda" else SDPBackend.MATH
            with sdpa_kernel(backend):

                def fwd(q=q, k=k, v=v, causal=causal):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                def fwd_bwd(q=q, k=k, v=v, causal=causal, grad=grad):
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    torch.autograd.grad(o, (q, k, v), grad)

                f_s = _time_s(fwd, 3, reps, device)
                fb_s = _time_s(fwd_bwd, 3, reps, device)
            # the cost model's count: QKᵀ and probs·V over the whole s × s matrix, 4·s²·d per head and sequence
            flops = 4.0 * batch * heads * seq * seq * HEAD_DIM
            raw["attention"].append(
                {
                    "seq": seq,
                    "causal": causal,
                    "batch": batch,
                    "heads": heads,
                    "head_dim": HEAD_DIM,
                    "fwd_flops_full": flops,
                    "fwd_s": f_s,
                    "bwd_s": max(0.0, fb_s - f_s),
                }
            )
            print(
                f"attention s{seq:6d} causal={causal!s:5s} b{batch}: fwd {flops / f_s / 1e12:6.1f}, "
                f"bwd {2 * flops / max(fb_s - f_s, 1e-12) / 1e12:6.1f} TFLOP/s (full-matrix FLOPs)",
                flush=True,
            )
        save()
    save()
    if "blocks" in args.parts:
        raw["blocks"] = _measure_blocks(device, smoke, started, args.budget_s * 1.5)
    save()
    print(f"wrote {path} in {raw['elapsed_s']:.0f} s")
    return 0


BLOCKS = [  # GPT-3 has 2,048 learned positions; LLaMA (RoPE) any
    ("gpt3-1.3b", 2048),
    ("gpt3-6.7b", 2048),
    ("llama2-7b", 2048),
    ("llama2-7b", 8192),
    ("llama2-7b", 32768),
    ("llama3-8b", 16384),
]


def _measure_blocks(device, smoke: bool, started: float, budget_s: float) -> list[dict]:
    """One transformer block of zoo models, forward and backward at micro-batch 1, timed by Tessera's own
    profiler (bf16 AMP, flash attention): the ground truth for the catalog-priced block (``report``)."""
    try:
        sys.path.insert(0, str(ROOT / "src"))
        from tessera.models.zoo import get_spec
        from tessera.perf.profiler import profile_layers
    except ImportError as e:  # the device lacks a dependency: the kernel figures stand alone
        print(f"blocks skipped: {e}", flush=True)
        return []
    rows = []
    for model, seq in [("gpt-tiny", 64)] if smoke else BLOCKS:
        if time.monotonic() - started > budget_s:
            break
        spec = get_spec(model, seq_len=seq)
        run = profile_layers(
            spec, precision="bf16" if device.type == "cuda" else "fp32", device=device, layer_range=(1, 2)
        )
        for r in run.rows:
            rows.append(
                {
                    "model": model,
                    "seq": seq,
                    "layer": r.layer,
                    "name": r.name,
                    "fwd_s": r.fwd_s,
                    "bwd_s": r.bwd_s,
                    "precision": run.precision,
                }
            )
            print(
                f"block {model} s{seq} {r.name}: fwd {r.fwd_s * 1e3:.2f} ms, bwd {r.bwd_s * 1e3:.2f} ms",
                flush=True,
            )
    return rows


def report(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(ROOT / "src"))
    from tessera.hardware import get_gpu
    from tessera.models.zoo import get_arch, get_spec
    from tessera.perf.compute import EAGER, block_shape, layer_time, measured_kernels

    raw = json.loads(Path(args.raw).read_text())
    gpu = get_gpu(args.gpu)
    peak = gpu.peak_flops("bf16")
    kernels = measured_kernels(gpu)
    if kernels.gemm is None or kernels.attention is None:
        print(f"efficiency.yaml has no GEMM curve or attention figure for {gpu.name}", file=sys.stderr)
        return 2
    rows = []
    for g in raw["gemm"]:
        measured = g["flops"] / g["time_s"] / peak
        priced = kernels.gemm.fraction(g["flops"])
        rows.append(
            {**g, "measured_fraction": measured, "catalog_fraction": priced, "error": priced / measured - 1}
        )
    attn = []
    for a in raw["attention"]:
        work = a["fwd_flops_full"] / (2.0 if a["causal"] else 1.0)  # flash computes half a causal matrix
        fwd = work / a["fwd_s"] / peak
        bwd = 2 * work / a["bwd_s"] / peak if a["bwd_s"] > 0 else math.nan
        cat_fwd, cat_bwd = kernels.attention.fractions(a["seq"], a["causal"])
        attn.append(
            {
                **a,
                "fwd_fraction": fwd,
                "bwd_fraction": bwd,
                "catalog_fwd_fraction": cat_fwd,
                "catalog_bwd_fraction": cat_bwd,
            }
        )

    blocks = []
    for b in raw.get("blocks", []):
        spec = get_spec(b["model"], seq_len=b["seq"])
        amp = b["precision"] in ("bf16", "fp16")  # AMP over fp32 parameters: an fp32 residual stream
        shape = block_shape(get_arch(b["model"]), b["seq"], "flash", EAGER, 4.0 if amp else 0.0)
        t = layer_time(spec.layers[b["layer"]], gpu, precision=b["precision"], shape=shape)
        measured = b["fwd_s"] + b["bwd_s"]
        blocks.append(
            {**b, "catalog_fwd_s": t.fwd_s, "catalog_bwd_s": t.bwd_s, "error": t.total_s / measured - 1}
        )

    def errs(pred) -> list[float]:
        # |time priced − time measured| / time measured = |measured fraction / priced fraction − 1|
        return [abs(r["measured_fraction"] / r["catalog_fraction"] - 1) for r in rows if pred(r)]

    cat = errs(lambda r: r["label"] == "catalog")
    blk = errs(lambda r: r["label"] != "catalog")
    result = {
        "benchmark": "gpu_kernels",
        "gpu": raw["gpu"],
        "catalog_gpu": gpu.name,
        "torch": raw["torch"],
        "smoke": raw["smoke"],
        "truncated": raw["truncated"],
        "command": raw["command"],
        "peak_bf16_flops": peak,
        "gemm_rows": len(rows),
        "gemm_catalog_shapes_mean_abs_time_error": statistics.mean(cat) if cat else None,
        "gemm_block_shapes_mean_abs_time_error": statistics.mean(blk) if blk else None,
        "gemm_block_shapes_worst_abs_time_error": max(blk) if blk else None,
        "attention_fraction_basis": "FLOPs the kernel computes: 4*s^2*d per head and sequence, half under a causal mask",
        "attention_fwd_fraction_by_seq": {
            f"{a['seq']}{'c' if a['causal'] else ''}": a["fwd_fraction"] for a in attn
        },
        "attention_bwd_fraction_by_seq": {
            f"{a['seq']}{'c' if a['causal'] else ''}": a["bwd_fraction"] for a in attn
        },
        "block_errors": {f"{b['model']} s{b['seq']}": b["error"] for b in blocks},
        "blocks": blocks,
        "gemm": rows,
        "attention": attn,
        "elapsed_s": raw.get("elapsed_s"),
    }
    out = Path(args.out)
    out.write_text(json.dumps(result, indent=1))
    print(f"{raw['gpu']} (priced as {gpu.name}, bf16 peak {peak / 1e12:.0f} TFLOP/s), torch {raw['torch']}")
    print(
        f"GEMM, catalog shapes: mean |time error| of the fitted curve {result['gemm_catalog_shapes_mean_abs_time_error']}"
    )
    print(
        f"GEMM, GPT block shapes: mean {result['gemm_block_shapes_mean_abs_time_error']}, "
        f"worst {result['gemm_block_shapes_worst_abs_time_error']}"
    )
    for a in attn:
        print(
            f"attention s{a['seq']:6d} causal={a['causal']!s:5s}: fwd {a['fwd_fraction']:.3f} "
            f"bwd {a['bwd_fraction']:.3f} of peak (catalog {a['catalog_fwd_fraction']:.3f} / "
            f"{a['catalog_bwd_fraction']:.3f})"
        )
    for b in blocks:
        print(
            f"block {b['model']} s{b['seq']}: measured {(b['fwd_s'] + b['bwd_s']) * 1e3:.2f} ms, catalog-priced "
            f"{(b['catalog_fwd_s'] + b['catalog_bwd_s']) * 1e3:.2f} ms ({b['error']:+.1%})"
        )
    print(f"wrote {out}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="time the kernels on this device (torch only)")
    m.add_argument("--device", default="cuda")
    m.add_argument("--out", default=str(ROOT / "bench" / "results"))
    m.add_argument("--budget-s", type=float, default=150.0)
    m.add_argument("--smoke", action="store_true", help="two tiny shapes (a CPU check of the script)")
    m.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="what to time")
    m.set_defaults(fn=measure)
    r = sub.add_parser("report", help="compare a measure run with the catalog")
    r.add_argument("raw", help="gpu_kernels_raw.json from measure")
    r.add_argument("--gpu", default="H100-80GB", help="catalog GPU type the device is")
    r.add_argument("--out", default=str(ROOT / "bench" / "results" / "gpu_kernels.json"))
    r.set_defaults(fn=report)
    args = parser.parse_args()
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())

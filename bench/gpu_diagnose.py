"""Why small plans are over-estimated on a GPU: a real training step against the profiler's per-layer figures.

    python3 bench/gpu_diagnose.py --device cuda [--budget-s 150] [--out DIR] [--smoke]

``bench/gpu_estimate.py`` found every plan over-estimated on an H200, GPT-3 125M-350M by up to 2.7x (a 125M
step at micro-batch 1 and at 4 both measured ~38 ms). The estimate is the sum of per-layer figures from
``tessera profile layers``; this bench takes one configuration at a time and puts side by side:

* **the real step** (the zoo model whole, bf16 autocast, fp32 parameters, train mode): forward + loss +
  backward, median of the wall time between synchronizations (``real_fb_s``); the host's share of it — the time
  until ``backward()`` returns, before the synchronization (``real_fb_host_s``: close to the wall time when the
  step is launch-bound); the GPU's busy time, the sum of its kernels' durations from ``torch.profiler``
  (``real_fb_kernel_s``); and the optimizer step over the whole model (foreach and fused AdamW);
* **the profiler's sum** (what the estimate adds up): every layer's forward + backward from ``profile_layers``
  as it runs today (``profiled_fb_s``), with 16 copies per timed region instead of 4 (``profiled_fb_b2b16_s``:
  does the per-region synchronization inflate a figure?), and with the GPU kept busy up to each timed region
  (``profiled_fb_hot_s``: do clocks drop between the short timed bursts?); and its optimizer sum.

Writes ``gpu_diagnose.json`` (rows per configuration; ``gpu``, ``torch``, ``command``) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tessera.models.zoo import get_spec  # noqa: E402
from tessera.nn.optimizers import make_optimizer  # noqa: E402
from tessera.nn.zoo import build_model  # noqa: E402
from tessera.perf import profiler  # noqa: E402
from tessera.perf.compute import layer_signature  # noqa: E402

CONFIGS = [  # (model, seq, micro-batch): the worst small plans of gpt_estimate.json, and a 1.3B control
    ("gpt3-125m", 1024, 1),
    ("gpt3-125m", 1024, 4),
    ("gpt3-350m", 2048, 2),
    ("gpt3-1.3b", 2048, 4),
]
SMOKE = [("gpt-tiny", 64, 2)]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_of(fn: Callable[[], tuple[float, ...]], warmup: int, repeats: int) -> tuple[float, ...]:
    for _ in range(warmup):
        fn()
    runs = [fn() for _ in range(repeats)]
    return tuple(statistics.median(r[i] for r in runs) for i in range(len(runs[0])))


def real_step(name: str, seq: int, mb: int, device: torch.device, repeats: int) -> dict[str, float]:
    """The whole model's forward + loss + backward (wall, host share, kernel sum) and its optimizer step."""
    spec = get_spec(name, seq_len=seq)
    torch.manual_seed(0)
    model = build_model(spec.arch, family=spec.family, attention="flash").to(device)  # type: ignore[arg-type]
    model.train()
    vocab = spec.arch.vocab  # type: ignore[union-attr]
    x = torch.randint(0, vocab, (mb, seq), device=device)
    y = torch.randint(0, vocab, (mb, seq), device=device)
    amp = torch.bfloat16  # the runtime's bf16 precision: autocast over fp32 parameters

    def fb() -> tuple[float, float]:
        for p in model.parameters():
            p.grad = None
        sync(device)
        t0 = time.perf_counter()
        with torch.autocast(device.type, dtype=amp):
            loss = model.loss(model(x), y)  # type: ignore[operator]
        loss.backward()
        t1 = time.perf_counter()
        sync(device)
        return time.perf_counter() - t0, t1 - t0

    wall, host = median_of(fb, 3, repeats)
    kernel_s = float("nan")
    if device.type == "cuda":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fb()
        kernel_s = sum(e.self_device_time_total for e in prof.key_averages()) / 1e6
    out = {"real_fb_s": wall, "real_fb_host_s": host, "real_fb_kernel_s": kernel_s}
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    for fused in (False, True) if device.type == "cuda" else (False,):
        os.environ["TESSERA_FUSED_OPTIMIZER"] = "1" if fused else "0"  # make_optimizer's switch
        opt = make_optimizer("adamw", params, lr=1e-4)

        def step(opt: Any = opt) -> tuple[float]:
            sync(device)
            t0 = time.perf_counter()
            opt.step()
            sync(device)
            return (time.perf_counter() - t0,)

        out[f"real_opt_{'fused' if fused else 'foreach'}_s"] = median_of(step, 2, repeats)[0]
    return out


def profiled(
    name: str, seq: int, mb: int, device: torch.device, back_to_back: int | None, hot: bool
) -> tuple[float, float]:
    """The estimate's sum over the model's layers of the profiled forward + backward, and of the optimizer."""
    spec = get_spec(name, seq_len=seq)
    original = profiler._median_time
    if hot and device.type == "cuda":
        a = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)

        def busy_then(fn: Callable[[], tuple[float, ...]], warmup: int, repeats: int) -> tuple[float, ...]:
            def hot_fn() -> tuple[float, ...]:
                for _ in range(20):  # ~20 ms of matmuls queued: the GPU is busy up to the timed region
                    torch.mm(a, a)
                return fn()

            return original(hot_fn, warmup, repeats)

        profiler._median_time = busy_then  # type: ignore[assignment]
    try:
        run = profiler.profile_layers(
            spec, micro_batches=[mb], precision="bf16", device=device, back_to_back=back_to_back
        )
    finally:
        profiler._median_time = original  # type: ignore[assignment]
    by_sig = {(layer_signature(spec.layers[r.layer])): r for r in run.rows if r.tp == 1}
    fb = sum(
        by_sig[layer_signature(layer)].fwd_s + by_sig[layer_signature(layer)].bwd_s for layer in spec.layers
    )
    opt = sum(by_sig[layer_signature(layer)].optimizer_s for layer in spec.layers)
    return fb, opt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--budget-s", type=float, default=150.0)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    device = torch.device(args.device)
    gpu = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    print(f"torch {torch.__version__} on {gpu}", flush=True)
    t_all = time.perf_counter()
    rows: list[dict[str, Any]] = []
    truncated = False
    for name, seq, mb in SMOKE if args.smoke else CONFIGS:
        if time.perf_counter() - t_all > args.budget_s:
            truncated = True
            break
        row: dict[str, Any] = {"model": name, "seq_len": seq, "micro_batch": mb, "precision": "bf16"}
        try:
            row.update(real_step(name, seq, mb, device, args.repeats))
            for key, b2b, hot in (
                ("profiled", None, False),
                ("profiled_b2b16", 16, False),
                ("profiled_hot", None, True),
            ):
                fb, opt = profiled(name, seq, mb, device, b2b, hot)
                row[f"{key}_fb_s"], row[f"{key}_opt_s"] = fb, opt
            row["profiled_over_real_fb"] = row["profiled_fb_s"] / row["real_fb_s"]
        except Exception as e:  # one failing configuration must not cost the others
            row["error"] = f"{type(e).__name__}: {e}"
        if device.type == "cuda":
            torch.cuda.empty_cache()
        rows.append(row)
        print(json.dumps({k: round(v * 1e3, 2) if isinstance(v, float) and k.endswith("_s") else v
                          for k, v in row.items()}), flush=True)  # fmt: skip
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": "gpu_diagnose", "gpu": gpu, "torch": torch.__version__,
        "command": "python3 bench/gpu_diagnose.py " + " ".join(sys.argv[1:]), "truncated": truncated,
        "elapsed_s": time.perf_counter() - t_all, "rows": rows,
    }  # fmt: skip
    (out / "gpu_diagnose.json").write_text(json.dumps(payload, indent=1))
    print(f"{'config':<26}{'real fb':>9}{'host':>8}{'kernels':>9}{'prof':>8}{'b2b16':>8}{'hot':>8}"
          f"{'opt fe':>8}{'opt fu':>8}{'prof opt':>9}  (ms)")  # fmt: skip
    for r in rows:
        if "error" in r:
            print(f"{r['model']} s{r['seq_len']} mb{r['micro_batch']}: {r['error']}")
            continue
        ms = [r.get(k, float("nan")) * 1e3 for k in ("real_fb_s", "real_fb_host_s", "real_fb_kernel_s", "profiled_fb_s",
              "profiled_b2b16_fb_s", "profiled_hot_fb_s", "real_opt_foreach_s", "real_opt_fused_s", "profiled_opt_s")]  # fmt: skip
        print(f"{r['model'] + ' s' + str(r['seq_len']) + ' mb' + str(r['micro_batch']):<26}"
              + "".join(f"{v:>9.1f}" if i == 2 or i == 8 else f"{v:>8.1f}" for i, v in enumerate(ms)))  # fmt: skip
    print(f"wrote {out / 'gpu_diagnose.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

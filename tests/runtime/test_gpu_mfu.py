"""bench/gpu_mfu.py: the MFU formula, the plain-vs-Tessera pair on CPU (their losses agree step for step, which
also covers the runtime's one-read-per-step loss of ``PipelineRunner.run`` over several micro-batches), and the
whole script on a real GPU (skipped without CUDA)."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from tessera.runtime import ZooModel
from tessera.runtime.launcher import free_port

BENCH = Path(__file__).resolve().parents[2] / "bench" / "gpu_mfu.py"


def _bench():
    spec = importlib.util.spec_from_file_location("gpu_mfu_bench", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gpu_mfu_bench", mod)
    spec.loader.exec_module(mod)
    return mod


def test_flops_per_token_is_megatrons_formula():
    bench = _bench()
    with torch.device("meta"):
        model = ZooModel("gpt-tiny")(layer_range=None, tp=None, attention="flash", recompute="none")
    a = model.arch
    fpt, n, _ = bench.model_flops_per_token(model, seq=32)
    total = sum(p.numel() for p in model.parameters())  # the tied head/embedding counted once
    assert n == total - a.max_positions * a.hidden  # all but the position table (a lookup, no FLOPs)
    assert fpt == 6 * n + 12 * a.n_layers * a.hidden * 32


@pytest.mark.timeout(240)
def test_pair_on_cpu_agrees_with_the_plain_loop():
    bench = _bench()
    args = bench.parse(
        ["--device", "cpu", "--smoke", "--model", "gpt-tiny", "--seq", "16", "--micro-batch", "2"]
        + [
            "--micro-batches",
            "3",
            "--warmup",
            "1",
            "--iters",
            "2",
            "--profile",
            "always",
            "--profile-steps",
            "1",
        ]
    )
    own = not dist.is_initialized()
    if own:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        row = bench.run_pair(args, torch.device("cpu"), "gloo", 1e11, time.monotonic() + 600)
    finally:
        if own:
            dist.destroy_process_group()
    assert "error" not in row
    # same weights, batch, micro-batching and optimizer: the same losses (fp32 on CPU)
    assert row["loss_step0"]["tessera"] == pytest.approx(row["loss_step0"]["plain"], rel=1e-5)
    assert row["final_loss"]["tessera"] == pytest.approx(row["final_loss"]["plain"], rel=1e-4)
    assert row["timed_steps"] == 2 and row["global_batch"] == 6
    assert row["ratio_vs_plain"] > 0 and row["mfu"] > 0
    prof = row["profile"]
    assert prof["plain_top"] and prof["tessera_top"] and prof["largest_differences"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.timeout(600)
def test_gpu_mfu_script_on_cuda(tmp_path):
    bench = _bench()
    r = bench.main(
        ["--device", "cuda", "--smoke", "--out", str(tmp_path), "--no-launch", "--budget-s", "300"]
    )
    assert "error" not in r, r.get("error")
    assert r["gpu"] and r["peak_flops"] > 1e12
    assert r["ratio_vs_plain"] > 0 and 0 < r["mfu"] < 1
    assert r["nccl_train"]["ran"] and r["nccl_train"]["backend"] == "nccl", r["nccl_train"]
    assert (tmp_path / "gpu_mfu.json").exists()


@pytest.mark.timeout(120)
def test_out_of_memory_retries_with_half_the_micro_batch(tmp_path, monkeypatch):
    bench = _bench()
    calls = []

    def fake_pair(args, device, backend, peak, deadline):
        calls.append((args.micro_batch, args.micro_batches))
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return {"model": args.model, "micro_batch": args.micro_batch, "flops_per_token": 1.0, "mfu": 0.5}

    monkeypatch.setattr(bench, "run_pair", fake_pair)
    monkeypatch.setattr(bench, "run_nccl_train", lambda *a, **k: {"ran": True, "steps": 0})
    r = bench.main(["--device", "cpu", "--smoke", "--out", str(tmp_path), "--no-launch", "--budget-s", "600"])
    assert calls == [(2, 2), (1, 4)]  # same tokens per step, micro-batches of half the size
    assert "OutOfMemoryError" in r["rows"][0]["error"] and r["mfu"] == 0.5 and r["micro_batch"] == 1
    assert (tmp_path / "gpu_mfu.json").exists()

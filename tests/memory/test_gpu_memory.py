"""The real-device measurement (tessera.memory.measure) against the exact trace.

CPU: the measurement on device 'cpu' (the CPU allocator, same two-iteration protocol) and a fake-'cpu'
trace of the same zoo request agree. CUDA (skipped without a GPU): a smoke configuration of
bench/results/gpu_memory_predicted.json, traced on the fake CUDA device, against the real GPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tessera.memory.grid import GridPoint
from tessera.memory.measure import measure_step_peak, warm_blas_workspaces
from tessera.memory.trace import StageTraceRequest, trace_stages

PREDICTED = Path(__file__).resolve().parents[2] / "bench" / "results" / "gpu_memory_predicted.json"

TINY_GPT = dict(
    hidden=128,
    n_heads=2,
    n_kv_heads=2,
    ffn_hidden=512,
    vocab=1000,
    dropout=0.1,
    n_layers=2,
    max_positions=512,
)


def _request(precision: str, recompute: str) -> StageTraceRequest:
    p = GridPoint(
        family="gpt", arch=TINY_GPT, seq_len=64, micro_batch=2, layer_range=(0, 4), n_stages=1, stage_index=0,
        micro_batches=1, precision=precision, recompute=recompute, attention="flash", optimizer="adamw",
        tp=1, dp=1, zero=0,
    )  # fmt: skip
    from dataclasses import replace

    return replace(p.trace_request(), device="cpu")


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("precision", "recompute"), [("fp32", "none"), ("bf16-master", "selective")])
def test_cpu_measurement_matches_trace(precision: str, recompute: str) -> None:
    req = _request(precision, recompute)
    traced = trace_stages([req], in_process=True)[0]
    real = measure_step_peak(req)
    assert real.device == "cpu" and real.base_bytes == 0
    assert real.start_bytes == traced.start_bytes  # the same persistent state when iteration 2 starts
    assert abs(real.peak_bytes - traced.peak_bytes) / real.peak_bytes < 1e-4


def test_blas_warm_is_a_noop_on_cpu() -> None:
    assert warm_blas_workspaces("cpu") == 0


@pytest.mark.timeout(600)
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a real CUDA GPU")
def test_cuda_measurement_matches_committed_trace() -> None:
    """The smoke rows' fake-CUDA traces (committed) against the real GPU, workspaces excluded."""
    rows = json.loads(PREDICTED.read_text())["smoke"]
    warm_blas_workspaces("cuda")
    for row in rows:
        trace = row["trace"]["cuda"]
        real = measure_step_peak(StageTraceRequest.from_dict(row["request"]), device="cuda")
        assert real.peak_reserved_bytes is not None and real.peak_reserved_bytes >= real.raw_peak_bytes
        # Adam's step counters live on the host on a GPU; the trace counts them (4 B each)
        assert abs(real.start_bytes - trace["start_bytes"]) / trace["start_bytes"] < 0.01, row["name"]
        assert abs(real.peak_bytes - trace["peak_bytes"]) / real.peak_bytes < 0.05, row["name"]

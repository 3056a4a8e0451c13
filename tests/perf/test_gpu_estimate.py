"""bench/gpu_estimate.py: the GPU's catalog entry from its CUDA name, the plans it runs, and its code path end to
end (one tiny plan on the CPU here; one real plan where a CUDA device is present)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from tessera.perf.profiler import catalog_name

BENCH = Path(__file__).resolve().parents[2] / "bench" / "gpu_estimate.py"
KEYS = ("gpu", "plans", "mean_accuracy", "worst_accuracy", "uncalibrated_mean_accuracy", "command", "rows")
ROW_KEYS = ("label", "estimate_s", "measured_s", "accuracy", "uncalibrated_estimate_s", "command")


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_gpu_estimate", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve their module while the class is built
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(
    ("name", "memory_bytes", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", 85_520_809_984, "H100-80GB"),
        ("NVIDIA H100 PCIe", 85_520_809_984, "H100-80GB"),
        ("NVIDIA H200", 150_754_820_096, "H200"),
        ("NVIDIA A100-SXM4-40GB", 42_298_834_944, "A100-40GB"),
        ("NVIDIA A100-SXM4-80GB", 85_198_045_184, "A100-80GB"),
        ("Some Unknown Accelerator", None, None),
    ],
)
def test_cuda_device_names_map_to_the_catalog(name, memory_bytes, expected):
    """What the bench's plans and profiles are keyed by on the GPU (``torch.cuda.get_device_name()``)."""
    assert catalog_name(name, memory_bytes) == expected


def test_gpu_plans_cover_the_brief(bench):
    """≥ 24 valid single-device plans: GPT and LLaMA shapes 125M–1.3B, micro-batch 1–8, seq 512–4096,
    bf16 and fp32, recompute none/selective/full, and TP shards."""
    cases = bench.gpu_cases()
    assert len(cases) >= 24
    assert len({c.label for c in cases}) == len(cases)
    for c in cases:
        c.plan("H100-80GB")  # validates
    singles = [c for c in cases if c.tp == 1]
    sizes = [c.model.spec(c.seq_len).params for c in singles]
    assert min(sizes) < 0.2e9 and max(sizes) > 1.0e9 and max(sizes) < 1.5e9
    assert {c.model.spec(c.seq_len).family for c in singles} == {"gpt", "llama"}
    assert {c.micro_batch for c in cases} >= {1, 8}
    assert min(c.seq_len for c in cases) == 512 and max(c.seq_len for c in cases) == 4096
    assert {"bf16", "fp32"} <= {c.precision for c in cases}
    assert {c.recompute for c in cases} == {"none", "selective", "full"}
    assert sum(c.tp > 1 for c in cases) >= 3


@pytest.mark.timeout(300)
def test_smoke_plan_runs_end_to_end_on_cpu(bench, tmp_path):
    """Two tiny plans (world 1 under gloo; a TP2 shard under the fake group) through profile → both
    estimates → a real run, and the JSON the lead reads."""
    assert bench.main(["--device", "cpu", "--smoke", "--only", "s64 mb2 fp32", "--out", str(tmp_path)]) == 0
    out = json.loads((tmp_path / "gpu_estimate_smoke.json").read_text())
    for k in KEYS:
        assert k in out, k
    assert out["plans"] == 2 and not out["truncated"], out["rows"]
    for row in out["rows"]:
        for k in ROW_KEYS:
            assert k in row, k
        assert row["measured_s"] > 0 and row["estimate_s"] > 0 and row["uncalibrated_estimate_s"] > 0
    assert out["profiles"][0]["device_type"] == "cpu-core@1t"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.timeout(600)
def test_one_plan_on_the_gpu(bench, tmp_path):
    """The GPU path: catalog type from the device name, profiled estimate and a measured step."""
    assert bench.main(["--device", "cuda", "--only", "gpt3-125m s1024 mb1 bf16", "--out", str(tmp_path)]) == 0
    out = json.loads((tmp_path / "gpu_estimate.json").read_text())
    assert out["gpu"] == torch.cuda.get_device_name()
    assert out["plans"] == 1, out["rows"]
    assert out["rows"][0]["measured_s"] > 0
    assert out["profiles"][0]["device_type"] == catalog_name(torch.cuda.get_device_name())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_layer_timing_reads_kernels_and_launches_apart():
    """On a GPU a layer's figures are its kernels' time with the launch queue kept full and the host's launch
    time beside it; a tiny block launches slower than its kernels run, a large one the other way round."""
    from tessera.models.zoo import get_spec
    from tessera.nn.zoo import build_model
    from tessera.perf import profiler

    dev = torch.device("cuda")
    for name, seq, mb in (("gpt-tiny", 64, 1), ("gpt3-1.3b", 2048, 4)):
        spec = get_spec(name, seq_len=seq)
        model = build_model(spec.arch, family=spec.family, layer_range=(1, 2), attention="flash").to(dev)
        x = torch.randn(mb, seq, spec.arch.hidden, device=dev)
        fwd, bwd, host_fwd, host_bwd = profiler.time_layer(
            model, x, None, device=dev, precision="bf16", warmup=2, repeats=5
        )
        assert min(fwd, bwd, host_fwd, host_bwd) > 0
        if name == "gpt-tiny":
            assert host_fwd + host_bwd > fwd + bwd
        else:
            assert fwd + bwd > host_fwd + host_bwd

"""The fake CUDA device: building the shim, where it can be loaded, and the note's exact hand count."""

from __future__ import annotations

import os

import pytest

from tessera.memory import fakecuda
from tessera.memory.breakdown import TraceResult
from tessera.memory.trace import StageTraceRequest, TraceError, schedule_order, trace_stages


def test_shim_is_built_once_and_cached(fake_cuda_shim) -> None:
    assert fake_cuda_shim.exists()
    assert fake_cuda_shim.name.startswith("fakecuda-")
    mtime = fake_cuda_shim.stat().st_mtime_ns
    assert fakecuda.build_shim() == fake_cuda_shim
    assert fake_cuda_shim.stat().st_mtime_ns == mtime  # no rebuild


def test_missing_compiler_is_a_clear_error(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no g++ / c++ on it
    with pytest.raises(fakecuda.FakeCudaError, match="g\\+\\+ not found"):
        fakecuda.build_shim()
    assert not list(tmp_path.glob("*.so"))


def test_loading_after_torch_import_is_refused() -> None:
    import torch  # noqa: F401  (the test process has torch already)

    assert not fakecuda.can_load_in_process()
    with pytest.raises(fakecuda.FakeCudaError, match="before `import torch`"):
        fakecuda.load()


def test_worker_reports_failures_with_the_cause(fake_cuda_shim) -> None:
    bad = StageTraceRequest(model="no-such-model-xyz", seq_len=8)
    with pytest.raises(TraceError, match="no-such-model-xyz"):
        trace_stages([bad], in_process=False)


def test_hand_count_mlp_adamw_foreach(fake_cuda_traces) -> None:
    """Linear(256,1024)-GELU-Linear(1024,256), batch 64, AdamW foreach on the fake GPU (note §2):
    params + grads + m + v + one param-sized _foreach_sqrt temp + input + four 4-B CPU step tensors."""
    r: TraceResult = fake_cuda_traces["hand_count"]
    params = (256 * 1024 + 1024 + 1024 * 256 + 256) * 4
    assert params == 2_102_272
    assert r.peak_bytes == 5 * params + 64 * 256 * 4 + 4 * 4 == 10_576_912
    assert r.peak_phase == "opt"
    assert r.breakdown == {
        "weights": params,
        "gradients": params,
        "optimizer_state": 2 * params + 16,
        "inputs": 65_536,
        "opt_tmp": params,
    }
    assert sum(r.breakdown.values()) == r.peak_bytes


def test_breakdowns_add_up(fake_cuda_traces) -> None:
    for name, r in fake_cuda_traces.items():
        assert sum(r.breakdown.values()) == r.peak_bytes, name
        assert r.peak_bytes == max(r.phase_peaks.values()), name
        for phase, level in r.phase_peaks.items():
            assert sum(r.phase_breakdowns[phase].values()) == level, (name, phase)
        assert r.start_bytes <= min(r.phase_peaks.values()), name


def test_result_round_trips_through_json(fake_cuda_traces) -> None:
    r: TraceResult = fake_cuda_traces["bf16"]
    again = TraceResult.from_dict(r.to_dict())
    assert again == r
    assert set(r.phase_peaks) == {"fwd", "bwd", "opt"}
    assert r.peak_bytes == max(r.phase_peaks.values())
    assert r.meta["device"] == "cuda"


def test_gpt_1p3b_amp_flash_step_is_cheap(fake_cuda_traces) -> None:
    """1.3B GPT, s 2048, b 1, AMP bf16, flash: a few seconds on 2 cores (note: 2-6 s); AdamW step peak."""
    r: TraceResult = fake_cuda_traces["gpt_1p3b"]
    print(f"\n1.3B trace: {r.wall_s:.2f} s, peak {r.peak_gib:.2f} GiB ({r.peak_phase}) {r.phase_peaks}")
    limit_s = float(os.environ.get("TESSERA_TRACE_1P3B_LIMIT_S", "20"))  # 10 s measured budget, CI slack
    assert r.wall_s < limit_s
    n_params = r.breakdown["weights"] // 4
    assert 1.30e9 < n_params < 1.33e9
    # the optimizer step holds params, grads, two moments and the sqrt temp: 20 B/param (note §5a)
    assert r.peak_phase == "opt"
    assert abs(r.peak_bytes - 20 * n_params) / r.peak_bytes < 0.01


@pytest.mark.parametrize(
    ("schedule", "stages", "index", "mbs", "in_flight"),
    [("1f1b", 4, 0, 8, 4), ("1f1b", 4, 3, 8, 1), ("1f1b", 2, 0, 1, 1), ("gpipe", 2, 1, 3, 3)],
)
def test_schedule_in_flight(schedule: str, stages: int, index: int, mbs: int, in_flight: int) -> None:
    order = schedule_order(schedule, stages, index, mbs)
    live = peak = 0
    for op, _ in order:
        live += 1 if op == "F" else -1
        peak = max(peak, live)
    assert peak == in_flight
    assert live == 0
    assert [i for op, i in order if op == "F"] == sorted(i for op, i in order if op == "B")

"""The trace checked against a real allocator: the same step run un-instrumented on CPU.

Like is compared with like: both sides run on the CPU device with CPU kernels, CPU autocast policy and
torch's CPU optimizer default (per-parameter loop), through the same step protocol; the trace runs on
fake CPU tensors (no 512-B rounding on CPU), the reference on real ones, its peak read from the profiler's
allocation / free events (running sum, max inside iteration 2). What the two may differ by: tensors made
outside dispatch (checkpoint's CPU RNG-state copies, 5 KB per checkpointed block here, host memory on a
GPU) and 8-B wrapped-number scalars that kernels create internally.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from conftest import TinyGPT
from torch import nn

from tessera.memory.trace import StepOptions, reference_cpu_peak, trace_step


def _batch(batch: int, seq: int) -> Callable:
    return lambda model, i: model.make_batch(batch, seq, device="cpu")


def _loss(model: nn.Module, out: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return model.loss(out, targets)


CONFIGS = {
    # name: (model kwargs, batch, options, tolerance)
    "fp32-adamw": ({}, 4, {}, 1e-4),
    "amp-bf16": ({}, 4, {"precision": "bf16"}, 1e-4),
    "amp-fp16-scaler": ({}, 4, {"precision": "fp16"}, 1e-4),
    "bf16-master": ({}, 4, {"precision": "bf16-master"}, 1e-4),
    "checkpointed": ({"ckpt": True}, 4, {}, 1e-2),
    "sgd-momentum": ({}, 4, {"optimizer": "sgd"}, 1e-4),
    "batch8-dropout": ({"dropout": 0.1, "n_layers": 3}, 8, {}, 1e-4),
    "grad-accum-2": ({}, 2, {"micro_batches": 2}, 1e-4),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_trace_matches_cpu_allocator(name: str) -> None:
    kwargs, batch, opt_kwargs, tol = CONFIGS[name]
    opts = StepOptions(device="cpu", **opt_kwargs)

    def build() -> TinyGPT:
        return TinyGPT(**kwargs)

    traced = trace_step(build, _batch(batch, 32), _loss, opts)
    real = reference_cpu_peak(build, _batch(batch, 32), _loss, opts)
    err = abs(traced.peak_bytes - real.peak_bytes) / real.peak_bytes
    print(
        f"\n{name:16s} trace {traced.peak_bytes:>10,d} ({traced.peak_phase}) "
        f"cpu allocator {real.peak_bytes:>10,d}  rel err {err:.2e}"
    )
    assert traced.start_bytes == real.start_bytes  # the same persistent state at the start of the step
    assert err < tol
    assert real.peak_bytes - traced.peak_bytes >= 0  # the trace never invents memory


class _TwoUses(nn.Module):
    """A parameter of N floats feeding two ops: two gradients meet in autograd's input buffer."""

    N = 1 << 20

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(self.N))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.w * 2).sum() + (self.w * 3).sum() * x


def test_inplace_gradient_accumulation_pitfall_1() -> None:
    """A plain run sums the two gradients in place (peak w + momentum + g1 + g2 = 4N floats); under any
    dispatch mode the engine adds out of place (5N). The tracker re-applies the engine's rule."""
    make = lambda model, i: (torch.ones(()), None)  # noqa: E731
    loss = lambda model, out, targets: out  # noqa: E731
    n_bytes = 4 * _TwoUses.N
    real = reference_cpu_peak(_TwoUses, make, loss, StepOptions(device="cpu", optimizer="sgd"))
    fixed = trace_step(_TwoUses, make, loss, StepOptions(device="cpu", optimizer="sgd"))
    naive = trace_step(
        _TwoUses, make, loss, StepOptions(device="cpu", optimizer="sgd", emulate_inplace_accumulation=False)
    )
    assert round(real.peak_bytes / n_bytes, 3) == 4.0
    assert abs(fixed.peak_bytes - real.peak_bytes) < 64  # wrapped scalars only
    assert fixed.meta["inplace_accumulations"] == 1
    assert naive.peak_bytes - fixed.peak_bytes == n_bytes

"""Real peak memory of one training step on a real device: the ground truth the exact trace predicts.

:func:`measure_step_peak` runs the SAME two-iteration protocol as :mod:`tessera.memory.trace` (the
``_Step`` class itself, with a null tracker and real tensors): build the request's model shard under
``torch.device``, iteration 1 (optimizer state), then iteration 2 measured. On CUDA it reads the caching
allocator: ``memory_allocated()`` just before iteration 2 (after ``synchronize`` and
``reset_peak_memory_stats``) and ``max_memory_allocated()`` / ``max_memory_reserved()`` after it. On CPU it
delegates to :func:`tessera.memory.trace.reference_cpu_peak` (the CPU allocator's profiler events).

Like with like: the trace counts every live tensor from zero (parameters and optimizer state included), so
the measured figures are given relative to ``base_bytes``, what the allocator held before the model was
built — in a process that only runs these measurements, the cuBLAS / cuBLASLt workspaces (allocator blocks
that are no tensor: :func:`warm_blas_workspaces` creates them up front) and nothing else. The raw
(absolute) figures are kept too.

ZeRO requests run under the same fake process group as the trace (collectives allocate their outputs,
move nothing); with FSDP2 on real CUDA that may or may not work in a given torch: callers should expect
an exception for ``zero >= 2``.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any

from tessera.memory.trace import (
    StageTraceRequest,
    _NullTracker,
    _Session,
    _Step,
    build_stage_model,
    reference_cpu_peak,
)
from tessera.nn.dtensor_tp import fake_process_group


@dataclass(frozen=True)
class MeasuredPeak:
    """Iteration 2 of one request on a real device. ``*_bytes`` without ``raw_`` are relative to
    ``base_bytes`` (comparable with a trace's ``peak_bytes`` / ``start_bytes``)."""

    device: str
    peak_bytes: int  # max_memory_allocated during iteration 2 − base_bytes
    start_bytes: int  # memory_allocated when iteration 2 starts − base_bytes
    end_bytes: int  # memory_allocated when iteration 2 has ended − base_bytes
    base_bytes: int  # allocated before the model was built (workspaces; 0 on CPU)
    raw_peak_bytes: int  # max_memory_allocated, absolute
    peak_reserved_bytes: int | None  # max_memory_reserved during iteration 2, absolute (CUDA only)
    base_reserved_bytes: int | None  # memory_reserved before the model was built (CUDA only)
    iteration_s: float  # wall time of iteration 2 (synchronized)
    wall_s: float  # build + both iterations

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _closures(req: StageTraceRequest) -> tuple[Any, Any]:
    def make_batch(model: Any, i: int) -> tuple[Any, Any]:
        return model.make_batch(req.micro_batch_size, req.seq_len, device=req.device)

    def loss(model: Any, out: Any, targets: Any) -> Any:
        if not getattr(model, "has_head", True):
            return None
        import torch

        if req.tp_degree > 1 and targets.dtype == torch.long and out.shape[-1] < int(targets.max()) + 1:
            # a TP shard's head holds vocab / tp classes; the runtime's vocab-parallel loss maps the
            # targets onto it, and so must a real device (a CPU-free fake trace never checks the range)
            targets = targets.remainder(out.shape[-1])
        return model.loss(out, targets)

    return make_batch, loss


@contextlib.contextmanager
def _real_session(req: StageTraceRequest) -> Iterator[_Session]:
    """The trace's session without fake tensors: the fake process group and device mesh for ZeRO only."""
    opts = req.step_options()
    with contextlib.ExitStack() as stack:
        mesh = None
        if opts.zero >= 2 or (opts.zero == 1 and opts.dp_degree > 1):
            stack.enter_context(fake_process_group(opts.dp_degree, opts.dp_rank))
        if opts.zero >= 2:
            from torch.distributed.device_mesh import init_device_mesh

            mesh = init_device_mesh(opts.device, (opts.dp_degree,))
        yield _Session(tracker=_NullTracker(), mesh=mesh, fake=False)


def _first_stage(model: Any, req: StageTraceRequest) -> bool:
    kind = getattr(model, "input_kind", None)
    return kind in ("tokens", "image") if kind is not None else req.stage_index == 0


def measure_step_peak(req: StageTraceRequest, *, device: str | None = None, seed: int = 0) -> MeasuredPeak:
    """Run ``req`` for real on ``device`` (default: the request's) and measure iteration 2's peak."""
    import torch

    if device is not None and device != req.device:
        req = replace(req, device=device)
    if req.device == "cpu":
        return _measure_cpu(req, seed)
    if not torch.cuda.is_available():
        raise RuntimeError("measure_step_peak: device 'cuda' needs a real GPU (torch.cuda.is_available())")
    opts = req.step_options()
    make_batch, loss = _closures(req)
    t0 = time.perf_counter()
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    base_reserved = torch.cuda.memory_reserved()
    torch.manual_seed(seed)
    with _real_session(req) as session:
        with torch.device("cuda"):
            model = build_stage_model(req)
        step = _Step(model, opts, session, make_batch, loss, None, _first_stage(model, req))
        step.warm_up()
        torch.cuda.synchronize()
        start = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        t1 = time.perf_counter()
        step.run()
        torch.cuda.synchronize()
        iteration_s = time.perf_counter() - t1
        peak = torch.cuda.max_memory_allocated()
        peak_reserved = torch.cuda.max_memory_reserved()
        end = torch.cuda.memory_allocated()
        del step, model
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return MeasuredPeak(
        device="cuda",
        peak_bytes=peak - base,
        start_bytes=start - base,
        end_bytes=end - base,
        base_bytes=base,
        raw_peak_bytes=peak,
        peak_reserved_bytes=peak_reserved,
        base_reserved_bytes=base_reserved,
        iteration_s=iteration_s,
        wall_s=time.perf_counter() - t0,
    )


def _measure_cpu(req: StageTraceRequest, seed: int) -> MeasuredPeak:
    make_batch, loss = _closures(req)
    t0 = time.perf_counter()
    ref = reference_cpu_peak(lambda: build_stage_model(req), make_batch, loss, req.step_options(), seed=seed)
    wall = time.perf_counter() - t0
    return MeasuredPeak(
        device="cpu",
        peak_bytes=ref.peak_bytes,
        start_bytes=ref.start_bytes,
        end_bytes=-1,  # the profiler's running sum ends with the profile, not the iteration
        base_bytes=0,
        raw_peak_bytes=ref.peak_bytes,
        peak_reserved_bytes=None,
        base_reserved_bytes=None,
        iteration_s=ref.wall_s,
        wall_s=wall,
    )


def warm_blas_workspaces(device: str = "cuda") -> int:
    """Run a small linear layer forward and backward in fp32, bf16 and fp16 (the forward on this thread's
    cuBLAS / cuBLASLt handle, the backward on autograd's device thread, each with its own workspace) and
    return the bytes the allocator still holds once every tensor is gone: the workspaces. They would
    otherwise appear inside the first measured step. 0 on CPU."""
    import torch

    if device != "cuda":
        return 0
    gc.collect()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        x = torch.randn(64, 256, device=device, dtype=dtype, requires_grad=True)
        w = torch.randn(512, 256, device=device, dtype=dtype, requires_grad=True)
        b = torch.randn(512, device=device, dtype=dtype, requires_grad=True)
        y = torch.nn.functional.linear(x, w, b)
        (y @ w).float().sum().backward()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            z = torch.nn.functional.linear(x.float(), w.float(), b.float())
        z.float().sum().backward()
        del x, w, b, y, z
    gc.collect()
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated() - before

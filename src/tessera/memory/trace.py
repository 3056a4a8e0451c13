"""Exact per-device peak memory of one training step, traced with fake tensors (no GPU, no real memory).

One trace covers ONE device: one TP rank's shard of one pipeline stage, in one DP replica, for one real
training step. Iteration 1 only creates what lasts (optimizer state: zero grads + one optimizer step; with
FSDP a full iteration, whose first forward does FSDP's lazy init); iteration 2 is tracked — forward(s),
backward(s), optimizer step, ``zero_grad(set_to_none=True)`` (notes/memory-and-time-estimation.md §2).
The result is what ``torch.cuda.max_memory_allocated()`` would report for that step.

Entry points:

* :func:`trace_step` — the core, in-process: any module builder + batch maker + loss. Runs on the fake
  "cuda" device when this process loaded :mod:`tessera.memory.fakecuda` before ``import torch``, or on
  fake "cpu" tensors anywhere (CPU kernels and CPU autocast policy; used to validate against the CPU
  allocator with :func:`reference_cpu_peak`, the same protocol run for real).
* :func:`trace_stage` / :func:`trace_stages` — zoo models (by name or ``arch``) or ``"module:function"``
  factories, described by a JSON-able :class:`StageTraceRequest`; run in a fresh worker process
  (``python -m tessera.memory.trace_worker``) that loads the fake CUDA device before torch.
* :func:`trace_plan` (every device of a ``Plan``, identical devices once) and :func:`trace_view` /
  :func:`trace_views` (the analytic estimator's ``DeviceView``).

What each option models:

* precision ``fp32``; ``bf16`` / ``fp16``: fp32 params, ``torch.autocast`` (fp16 also: GradScaler's
  tensors — scale, growth tracker, found-inf, inverse scale — and its in-place unscale; GradScaler itself
  cannot run on fake tensors, it reads found-inf); ``bf16-master``: bf16 params and activations, an fp32
  master copy (``master_weights``), fp32 master grads, optimizer on the masters; each bf16 grad is cast to
  its master grad and dropped, one parameter at a time; updated masters are copied back in place.
* optimizers with torch's defaults (AdamW wd 0.01, Adam wd 0) and ``foreach`` as torch picks it on the
  real device (CUDA: foreach, so one param-sized ``_foreach_sqrt`` temp; CPU: the per-parameter loop;
  fake tensors would defeat torch's own choice); SGD with momentum 0.9.
* ZeRO over a DP group of ``dp_degree`` (fake process group: collectives allocate their outputs, move
  nothing). ZeRO-3 = FSDP2 ``fully_shard`` per layer + root, ``reshard_after_forward=True``; ZeRO-2 =
  the same with ``reshard_after_forward=False`` (params stay gathered from forward to backward; grads and
  optimizer state sharded); with ``bf16-master`` both use ``MixedPrecisionPolicy(bf16 params, fp32
  reduce)``, so the fp32 shards are the masters. Layers sharing a parameter (tied embedding / head) are
  left to the root unit. FSDP's all-gather staging buffers count as "other", reduce-scatter outputs as
  gradients. ZeRO-1 (hand-written, DeepSpeed stage-1 semantics): full params and full grads; the
  optimizer owns a contiguous 1/d slice of every flattened parameter (a view of it in fp32 / AMP, an fp32
  copy with ``bf16-master``); at the step each full grad is reduce-scattered into its slice (a slice
  copy) and freed, then the slices are updated and all-gathered back in place.
* pipeline: 1F1B stage i of S holds S - i micro-batches in flight (warm-up forwards, one forward / one
  backward, cool-down backwards); ``min(M, S - i + 1)`` micro-batches are simulated, which already
  repeats the steady state (grads present + S - i in flight). GPipe runs all M forwards, then all M
  backwards. A stage without the head runs backward from a received output gradient; received
  activations arrive in the sending stage's compute dtype (bf16 under bf16-master, also when FSDP holds
  fp32 shards) and are freed after their backward; data-loader tensors (tokens; targets at the head
  stage) live until the end of the step.
* ``timeline=True``: the result's ``meta["timeline"]`` lists the tracked iteration's events (every
  storage's birth with shape and dtype, its death, resizes) with layer marks (forward start / end,
  backward start, autocast exit): what ``bench/memory_calibrate.py`` compiles into the fast formula's
  per-layer tables.
* TP: the zoo builds the rank's shard (``TPShare``); its all-reduces are in place, so none is traced.

Not modelled: CUDA context, cuBLAS workspaces, NCCL buffers, fragmentation (the note, §4); for ZeRO-0
with dp > 1, the gradient all-reduce's bucket copies (the runtime's 25 MB flatten buffers, DDP's buckets);
sequence-parallel all-gather buffers; tensors created outside dispatch (checkpoint's RNG-state copies,
host memory on a GPU anyway). Host tensors that do pass dispatch (Adam's step counters) are counted at
their exact size, unrounded.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, TextIO

from tessera.memory import fakecuda
from tessera.memory.breakdown import PHASES, TraceResult
from tessera.nn.dtensor_tp import fake_process_group

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from torch import nn

PRECISIONS = ("fp32", "bf16", "fp16", "bf16-master")
OPTIMIZERS = ("adamw", "adam", "sgd")
SCHEDULES = ("1f1b", "gpipe")


class TraceError(RuntimeError):
    """A trace could not run; the message carries the worker's error."""


# ============================================================================ schedule
def schedule_order(
    schedule: str, n_stages: int, stage_index: int, micro_batches: int
) -> list[tuple[str, int]]:
    """The (op, micro-batch) sequence one stage runs; 1F1B is cut to the micro-batches that set its peak."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule: {schedule!r} is not one of {', '.join(SCHEDULES)}")
    if not 0 <= stage_index < n_stages:
        raise ValueError(f"stage_index {stage_index} outside [0, {n_stages})")
    if micro_batches < 1:
        raise ValueError(f"micro_batches must be >= 1, got {micro_batches}")
    if schedule == "gpipe":
        return [("F", i) for i in range(micro_batches)] + [("B", i) for i in range(micro_batches)]
    in_flight = n_stages - stage_index
    m = min(micro_batches, in_flight + 1)
    warmup = min(in_flight - 1, m)
    order = [("F", i) for i in range(warmup)]
    f = warmup
    b = 0
    while f < m:
        order.append(("F", f))
        f += 1
        order.append(("B", b))
        b += 1
    order.extend(("B", i) for i in range(b, m))
    return order


# ============================================================================ core
@dataclass(frozen=True)
class StepOptions:
    """How the step runs, independent of the model (see the module docstring for what each models)."""

    precision: str = "fp32"
    optimizer: str = "adamw"
    zero: int = 0
    dp_degree: int = 1
    dp_rank: int = 0
    schedule: str = "1f1b"
    n_stages: int = 1
    stage_index: int = 0
    micro_batches: int = 1
    device: str = "cuda"
    lr: float = 1e-4
    warmup: str = "state"  # iteration 1: "state" (grads + optimizer step only) | "full" (fwd + bwd + step)
    emulate_inplace_accumulation: bool = True  # False shows pitfall 1 (out-of-place sums under any mode)
    #: keep the tracked iteration's events, with layer marks (what bench/memory_calibrate.py compiles)
    timeline: bool = False

    def __post_init__(self) -> None:
        if self.warmup not in ("state", "full"):
            raise ValueError(f"warmup: {self.warmup!r} must be 'state' or 'full'")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision: {self.precision!r} is not one of {', '.join(PRECISIONS)}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer: {self.optimizer!r} is not one of {', '.join(OPTIMIZERS)}")
        if self.zero not in (0, 1, 2, 3):
            raise ValueError(f"zero: stage must be 0-3, got {self.zero}")
        if self.dp_degree < 1 or not 0 <= self.dp_rank < self.dp_degree:
            raise ValueError(f"dp_rank {self.dp_rank} outside a DP group of {self.dp_degree}")
        if self.device not in ("cuda", "cpu"):
            raise ValueError(f"device: {self.device!r} must be 'cuda' (fake GPU) or 'cpu'")
        schedule_order(self.schedule, self.n_stages, self.stage_index, self.micro_batches)


BatchMaker = Callable[["nn.Module", int], tuple[Any, Any]]
LossFn = Callable[["nn.Module", Any, Any], Any]


def trace_step(
    build: Callable[[], nn.Module],
    make_batch: BatchMaker,
    loss: LossFn | None,
    options: StepOptions | None = None,
    *,
    fsdp_units: Callable[[nn.Module], Sequence[nn.Module]] | None = None,
    is_first_stage: bool | None = None,
) -> TraceResult:
    """Trace iteration 2 of a training step of ``build()`` on one device, in this process.

    ``build()`` runs under FakeTensorMode and ``torch.device(options.device)``; ``make_batch(model, i)``
    gives micro-batch i's (inputs, targets); ``loss(model, output, targets)`` its loss; ``loss=None`` or a
    loss returning None marks a stage without the head (backward starts from a received output gradient).
    ``fsdp_units(model)`` lists the modules ZeRO-2/3 shard one by one (default: ``model.layers`` if present,
    else children). ``is_first_stage`` says whether inputs come from the data loader (default: the model's
    ``input_kind`` is tokens/image, else ``stage_index == 0``); later stages' inputs are received
    activations that require grad and die after their backward.
    """
    import torch

    opts = options or StepOptions()
    if opts.device == "cuda" and not fakecuda.is_loaded():
        raise TraceError(
            "device 'cuda' needs the fake CUDA device in this process (tessera.memory.fakecuda.load() "
            "before `import torch`); use trace_stage(), which runs a worker process, or device='cpu'"
        )
    t0 = time.perf_counter()
    with _session(opts) as session:
        tracker = session.tracker
        tracker.calibrate(opts.device)
        with torch.device(opts.device):
            model = build()
        if is_first_stage is None:
            kind = getattr(model, "input_kind", None)
            first = kind in ("tokens", "image") if kind is not None else opts.stage_index == 0
        else:
            first = is_first_stage
        step = _Step(model, opts, session, make_batch, loss, fsdp_units, first)
        if opts.timeline:
            _mark_layers(step.model, tracker)
        step.warm_up()  # iteration 1: optimizer state, FSDP lazy init
        step.label_state()
        tracker.phase = "fwd"
        tracker.reset_peak()
        step.run()
        tracker.mark("end")
        snap = tracker.snapshot()
        bwd_end = step.bwd_end_breakdown
        meta = {
            "micro_batches_run": len({i for _, i in step.order}),
            "in_flight": _max_in_flight(step.order),
            "inplace_accumulations": tracker.inplace_accumulations,
            "end_bytes": snap.current_bytes,
            "device": opts.device,
            **({"timeline": tracker.timeline} if opts.timeline else {}),
        }
        del step, model
    return TraceResult(
        peak_bytes=snap.peak_bytes,
        peak_phase=snap.peak_phase,
        breakdown=snap.breakdown,
        phase_peaks={k: v for k, v in snap.phase_peaks.items() if k in PHASES},
        wall_s=time.perf_counter() - t0,
        start_bytes=snap.start_bytes,
        phase_breakdowns={k: v for k, v in snap.phase_breakdowns.items() if k in PHASES},
        bwd_end_breakdown=bwd_end,
        meta=meta,
    )


def _no_mark(label: str, layer: int = -1) -> None:
    return None


def _mark_layers(model: nn.Module, tracker: Any) -> None:
    """Timeline marks at each layer's forward start (``F0``) and end (``F1``) and when the gradient of its
    output is complete (``Bgo``: its backward starts). Pre-hooks go first so FSDP's all-gathers fall inside
    the layer; the gradient hook of the output is registered before FSDP's pre-backward hook."""
    import torch

    layers = getattr(model, "layers", None)
    if layers is None:
        return
    start = getattr(model, "layer_start", 0)
    for i, layer in enumerate(layers):
        index = start + i

        def pre(mod: Any, args: Any, index: int = index) -> None:
            tracker.mark("F0", index)

        def post(mod: Any, args: Any, out: Any, index: int = index) -> None:
            tracker.mark("F1", index)
            if isinstance(out, torch.Tensor) and out.requires_grad:
                out.register_hook(lambda g, index=index: tracker.mark("Bgo", index))

        layer.register_forward_pre_hook(pre, prepend=True)
        layer.register_forward_hook(post, prepend=True)


def _max_in_flight(order: Sequence[tuple[str, int]]) -> int:
    live = peak = 0
    for op, _ in order:
        live += 1 if op == "F" else -1
        peak = max(peak, live)
    return peak


@dataclass
class _Session:
    tracker: Any
    mesh: Any = None
    fake: bool = True  # False: the same step on real tensors (reference_cpu_peak)


@contextlib.contextmanager
def _session(opts: StepOptions) -> Iterator[_Session]:
    """Fake process group (ZeRO), AMP / FSDP patches for the fake device, FakeTensorMode + tracker."""
    import torch

    from tessera.memory.tracker import MemoryTracker

    with contextlib.ExitStack() as stack:
        mesh = None
        if opts.zero >= 2 or (opts.zero == 1 and opts.dp_degree > 1):
            stack.enter_context(fake_process_group(opts.dp_degree, opts.dp_rank))
        if opts.device == "cuda":
            stack.enter_context(fakecuda.amp_patches())
            if opts.zero >= 2:
                stack.enter_context(_fsdp_device_handle_patch())
        if opts.zero >= 2:
            from torch.distributed.device_mesh import init_device_mesh

            mesh = init_device_mesh(opts.device, (opts.dp_degree,))  # outside FakeTensorMode: reads ranks
        tracker = MemoryTracker(
            emulate_inplace_accumulation=opts.emulate_inplace_accumulation, timeline=opts.timeline
        )
        stack.enter_context(_fake_mode_class()())
        stack.enter_context(tracker)
        stack.enter_context(torch.random.fork_rng(devices=[]))
        yield _Session(tracker=tracker, mesh=mesh)


def _fake_mode_class() -> type:
    """FakeTensorMode that skips its dispatch cache for foreach ops: hashing the metadata of every tensor
    in a 300-tensor list costs more than the meta kernel, and foreach results are not cached anyway."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    class _FakeMode(FakeTensorMode):
        def _cached_dispatch_impl(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
            if getattr(func, "_opname", "").startswith("_foreach_"):
                return self._dispatch_impl(func, types, args, kwargs)
            return super()._cached_dispatch_impl(func, types, args, kwargs)

    return _FakeMode


@contextlib.contextmanager
def _fsdp_device_handle_patch() -> Iterator[None]:
    """FSDP2 asks ``torch.cuda`` for streams and events, absent from a CPU build: give it torch.cpu's no-op
    ones. Memory is unaffected: FSDP2 keeps tensors alive across streams by reference, not record_stream."""
    import types

    import torch
    import torch.distributed.device_mesh as dm

    modules = [dm]
    for name in ("_fsdp_collectives", "_fsdp_init", "_fsdp_param_group", "_fsdp_state"):
        with contextlib.suppress(ImportError):
            modules.append(importlib.import_module(f"torch.distributed.fsdp._fully_shard.{name}"))
    original = dm._get_device_handle
    handle = types.SimpleNamespace(
        Stream=torch.cpu.Stream,
        Event=torch.cpu.Event,
        current_stream=torch.cpu.current_stream,
        stream=torch.cpu.stream,
        synchronize=lambda *a, **k: None,
        current_device=lambda: 0,
        set_device=lambda *a, **k: None,
        device_count=lambda: 8,
        is_available=lambda: True,
    )

    def get_handle(device_type: str = "cuda") -> Any:
        return handle if device_type == "cuda" else original(device_type)

    saved = [(m, m.__dict__.get("_get_device_handle")) for m in modules]
    for m, _ in saved:
        m._get_device_handle = get_handle
    try:
        yield
    finally:
        for m, fn in saved:
            if fn is not None:
                m._get_device_handle = fn


class _Step:
    """One training iteration of one device; ``run()`` twice, tracking the second."""

    def __init__(
        self,
        model: nn.Module,
        opts: StepOptions,
        session: _Session,
        make_batch: BatchMaker,
        loss: LossFn | None,
        fsdp_units: Callable[[nn.Module], Sequence[nn.Module]] | None,
        first_stage: bool,
    ) -> None:
        import torch

        self.opts = opts
        self.tracker = session.tracker
        self.make_batch = make_batch
        self.loss = loss
        self.first_stage = first_stage
        self.fake = session.fake
        self.device = torch.device(opts.device)
        self.order = schedule_order(opts.schedule, opts.n_stages, opts.stage_index, opts.micro_batches)
        self.autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(opts.precision)
        self.compute_dtype = torch.bfloat16 if opts.precision == "bf16-master" else None
        self.masters: list[torch.Tensor] = []
        self.zero1_pairs: list[tuple[torch.Tensor, torch.Tensor, slice]] = []
        self.fsdp = opts.zero >= 2
        master = opts.precision == "bf16-master"

        if self.fsdp:
            model = self._fully_shard(model, session.mesh, fsdp_units)
            opt_params = [p for p in model.parameters() if p.requires_grad]
        else:
            if master:
                _cast_floating(model, torch.bfloat16)
            params = [p for p in model.parameters() if p.requires_grad]
            if opts.zero == 1:
                opt_params = self._zero1_slices(params, master)
            elif master:
                with torch.no_grad():
                    self.masters = [p.detach().float() for p in params]
                opt_params = self.masters
            else:
                opt_params = params
        self.model = model
        self.opt_params = opt_params
        self.optimizer = self._make_optimizer(opt_params)
        self.tracker.watch_grads(p for p in model.parameters())
        self.scaler: dict[str, torch.Tensor] | None = None
        if opts.precision == "fp16":
            # GradScaler's tensors, made once on the device (it cannot run on fake tensors: it reads found_inf)
            self.scaler = {
                "scale": torch.full((), 2.0**16, dtype=torch.float32, device=self.device),
                "growth": torch.full((), 0, dtype=torch.int32, device=self.device),
            }

    # ------------------------------------------------------------------ setup
    def _fully_shard(
        self,
        model: nn.Module,
        mesh: Any,
        units: Callable[[nn.Module], Sequence[nn.Module]] | None,
    ) -> nn.Module:
        import torch
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = (
            MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            if self.opts.precision == "bf16-master"
            else MixedPrecisionPolicy()
        )
        reshard = self.opts.zero == 3
        layers = list(units(model)) if units is not None else _default_units(model)
        holders: dict[int, set[int]] = {}
        for i, layer in enumerate(layers):
            for p in layer.parameters():
                holders.setdefault(id(p), set()).add(i)
        shared = {i for held_by in holders.values() if len(held_by) > 1 for i in held_by}
        for i, layer in enumerate(layers):
            if i not in shared and any(True for _ in layer.parameters()):
                fully_shard(layer, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp)
        return model

    def _zero1_slices(self, params: list[torch.Tensor], master: bool) -> list[torch.Tensor]:
        """The optimizer's 1/d slice of each flattened parameter (a view, or an fp32 copy as the master)."""
        import torch

        d, r = self.opts.dp_degree, self.opts.dp_rank
        out = []
        with torch.no_grad():
            for p in params:
                n = p.numel()
                chunk = -(-n // d)
                sl = slice(min(r * chunk, n), min((r + 1) * chunk, n))
                view = p.detach().view(-1)[sl]
                shard = view.float() if master else view
                if master:
                    self.masters.append(shard)
                self.zero1_pairs.append((p, shard, sl))
                out.append(shard)
        return out

    def _make_optimizer(self, params: list[torch.Tensor]) -> torch.optim.Optimizer:
        import torch

        foreach = self.device.type != "cpu"  # torch's default on the real device (fake tensors defeat it)
        if self.opts.optimizer == "adamw":
            return torch.optim.AdamW(params, lr=self.opts.lr, foreach=foreach)
        if self.opts.optimizer == "adam":
            return torch.optim.Adam(params, lr=self.opts.lr, foreach=foreach)
        return torch.optim.SGD(params, lr=self.opts.lr, momentum=0.9, foreach=foreach)

    def label_state(self) -> None:
        """Name what survives iteration 1; anything unclaimed is "other" (FSDP buffers, RNG state)."""
        tr = self.tracker
        tr.relabel_live(tuple(tr.by_category), "other")
        weights: list[Any] = list(self.model.buffers())
        masters: list[Any] = list(self.masters)
        for p in self.model.parameters():
            (masters if self.fsdp and self.opts.precision == "bf16-master" else weights).append(p)
        if self.fsdp:
            weights.extend(_fsdp_unsharded_tensors(self.model))
        tr.label(weights, "weights")
        tr.label(masters, "master_weights")
        states = [t for s in self.optimizer.state.values() for t in s.values() if _is_tensor(t)]
        tr.label(states, "optimizer_state")
        if self.scaler is not None:
            tr.label(self.scaler.values(), "optimizer_state")

    # -------------------------------------------------------------- iteration
    def warm_up(self) -> None:
        """Iteration 1. With FSDP it runs in full (lazy init happens in the first forward); otherwise only
        its lasting effect is reproduced, at a third of the cost: zero grads and one optimizer step create
        the optimizer state exactly as a full iteration would."""
        import torch

        if self.fsdp or self.opts.warmup == "full":
            self.run()
            return
        self.tracker.phase = "opt"
        with torch.no_grad():
            for p in self.opt_params:
                p.grad = torch.zeros_like(p)
        with _ShapeOnlyForeach() if self.fake else contextlib.nullcontext():
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def run(self) -> None:
        import torch

        tr = self.tracker
        loader: list[Any] = []  # data-loader tensors: alive until the step ends
        pending: dict[int, tuple[Any, Any, Any]] = {}
        for op, i in self.order:
            if op == "F":
                tr.phase = "fwd"
                inputs, targets = self.make_batch(self.model, i)
                if (
                    self.compute_dtype is not None
                    and not self.first_stage
                    and _is_tensor(inputs)
                    and inputs.is_floating_point()
                ):
                    # a received activation arrives in the sending stage's compute dtype (bf16 under
                    # bf16-master, also when FSDP holds fp32 shards and make_batch would pick fp32)
                    inputs = inputs.to(self.compute_dtype)
                tr.label([x for x in (inputs, targets) if _is_tensor(x)], "inputs")
                if self.first_stage:
                    loader.append(inputs)
                elif _is_tensor(inputs) and inputs.is_floating_point():
                    inputs.requires_grad_(True)  # a received activation: its grad is sent back
                with self._autocast():
                    out = self.model(inputs)
                    loss = self.loss(self.model, out, targets) if self.loss is not None else None
                    getattr(tr, "mark", _no_mark)("autocast-exit")  # the cast cache dies on leaving
                if loss is not None:
                    loader.append(targets)  # a stage without the head loads no targets
                if loss is not None and self.scaler is not None:
                    loss = loss * self.scaler["scale"]
                pending[i] = (inputs, out, loss)
                del inputs, targets, out, loss
            else:
                tr.phase = "bwd"
                inputs, out, loss = pending.pop(i)
                if loss is not None:
                    loss.backward()
                else:
                    grad = torch.empty_like(out)  # received from the next stage
                    torch.autograd.backward(out, grad)
                    del grad
                del inputs, out, loss
        self.bwd_end_breakdown = dict(getattr(tr, "live_by_category", dict)())
        tr.phase = "opt"
        self._step()
        del loader

    def _autocast(self) -> Any:
        import torch

        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def _step(self) -> None:
        import torch

        params = [p for p in self.model.parameters() if p.requires_grad]
        if self.fsdp:
            self.tracker.label([p.grad for p in params if p.grad is not None], "gradients")
        with torch.no_grad():
            if self.zero1_pairs:
                self._zero1_reduce()
            elif self.masters:
                for p, m in zip(params, self.masters, strict=True):
                    if p.grad is not None:
                        m.grad = p.grad.float()
                        p.grad = None
                self.tracker.label([m.grad for m in self.masters if m.grad is not None], "gradients")
            if self.scaler is not None:
                self._unscale()
        self.optimizer.step()
        with torch.no_grad():
            if self.masters and not self.zero1_pairs:
                torch._foreach_copy_(params, self.masters)
            elif self.masters:
                for p, shard, sl in self.zero1_pairs:
                    p.view(-1)[sl].copy_(shard)
            if self.scaler is not None:
                s = self.scaler
                torch._amp_update_scale_(s["scale"], s["growth"], self._found_inf, 2.0, 0.5, 2000)
                self._found_inf = None
        self.optimizer.zero_grad(set_to_none=True)
        self.model.zero_grad(set_to_none=True)

    def _zero1_reduce(self) -> None:
        """Reduce-scatter each full grad into the optimizer's slice (a slice copy), then free it."""
        for p, shard, sl in self.zero1_pairs:
            if p.grad is None:
                continue
            g = p.grad.view(-1)[sl].clone()
            p.grad = None
            shard.grad = g.float() if g.dtype != shard.dtype else g
            del g
            self.tracker.label(shard.grad, "gradients")

    def _unscale(self) -> None:
        """GradScaler.unscale_: inverse scale, found-inf flag, in-place unscale of every grad."""
        import torch

        s = self.scaler
        assert s is not None
        inv_scale = s["scale"].double().reciprocal().float()
        self._found_inf = torch.full((), 0.0, dtype=torch.float32, device=self.device)
        grads = [p.grad for p in self.opt_params if p.grad is not None]
        local = [g._local_tensor if hasattr(g, "_local_tensor") else g for g in grads]
        if local:
            torch._amp_foreach_non_finite_check_and_unscale_(local, self._found_inf, inv_scale)


def _ShapeOnlyForeach() -> Any:  # noqa: N802 - used like a class
    """A mode for the warm-up optimizer step only: elementwise foreach ops, whose values fake tensors do not
    have anyway, are answered from shapes (in-place: nothing; out-of-place: ``empty_like``) instead of
    running 300-tensor meta kernels. The state tensors it creates are real ``zeros_like`` calls."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Mode(TorchDispatchMode):
        def __torch_dispatch__(
            self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
        ) -> Any:
            name = getattr(func, "_opname", "")
            if name.startswith("_foreach_") and name.rstrip("_") in _ELEMENTWISE_FOREACH and args:
                first = args[0]
                # 0-dim tensors (Adam's step counters) keep their values: the update reads them
                if isinstance(first, (list, tuple)) and all(
                    isinstance(t, torch.Tensor) and t.dim() > 0 for t in first
                ):
                    if name.endswith("_"):
                        return None
                    return [torch.empty_like(t) for t in first]
            return func(*args, **(kwargs or {}))

    return _Mode()


_ELEMENTWISE_FOREACH = frozenset(
    "_foreach_" + n
    for n in (
        "add", "sub", "mul", "div", "addcmul", "addcdiv", "lerp", "sqrt", "neg", "abs", "exp",
        "reciprocal", "maximum", "minimum", "copy", "zero", "sign", "clamp_min", "clamp_max",
    )
)  # fmt: skip


def _cast_floating(model: nn.Module, dtype: torch.dtype) -> None:
    """``model.to(dtype)`` by re-registering parameters (tied ones stay tied). ``Module.to`` swaps tensors
    in place for subclasses like FakeTensor, which fails once anything holds a weak reference to them."""
    import torch
    from torch import nn

    new: dict[int, nn.Parameter] = {}
    with torch.no_grad():
        for module in model.modules():
            for name, p in list(module._parameters.items()):
                if p is None or not p.is_floating_point():
                    continue
                if id(p) not in new:
                    new[id(p)] = nn.Parameter(p.detach().to(dtype), requires_grad=p.requires_grad)
                module._parameters[name] = new[id(p)]
            for name, b in list(module._buffers.items()):
                if b is not None and b.is_floating_point():
                    module._buffers[name] = b.to(dtype)


def _is_tensor(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor)


def _default_units(model: nn.Module) -> list[nn.Module]:
    layers = getattr(model, "layers", None)
    if layers is not None:
        return list(layers)
    return list(model.children())


def _fsdp_unsharded_tensors(model: nn.Module) -> list[Any]:
    """FSDP2's per-parameter unsharded storages (resized to 0 between uses, kept across iterations)."""
    out: list[Any] = []
    for m in model.modules():
        get_state = getattr(m, "_get_fsdp_state", None)
        if get_state is None:
            continue
        group = getattr(get_state(), "_fsdp_param_group", None)
        for fp in getattr(group, "fsdp_params", ()) or ():
            out.extend(getattr(fp, "all_gather_outputs", ()) or ())
            unsharded = getattr(fp, "_unsharded_param", None)
            if unsharded is not None:
                out.append(unsharded)
    return out


# ============================================================================ reference (real CPU allocator)
class _NullTracker:
    """Stands in for the tracker when the same step runs on real tensors."""

    def __init__(self) -> None:
        self.phase = "setup"
        self.by_category: dict[str, int] = {}
        self.inplace_accumulations = 0

    def label(self, tensors: Any, category: str) -> None:
        return None

    def relabel_live(self, from_categories: Any, to_category: str) -> None:
        return None

    def watch_grads(self, params: Any) -> list[Any]:
        return []


@dataclass(frozen=True)
class ReferencePeak:
    """Peak of a real (un-instrumented) CPU run, from the CPU allocator's profiler memory events."""

    peak_bytes: int
    start_bytes: int
    n_events: int
    wall_s: float


def reference_cpu_peak(
    build: Callable[[], nn.Module],
    make_batch: BatchMaker,
    loss: LossFn | None,
    options: StepOptions | None = None,
    *,
    is_first_stage: bool | None = None,
    seed: int = 0,
) -> ReferencePeak:
    """Run the same two-iteration protocol for real on CPU and read the allocator's peak of iteration 2.

    ``torch.profiler`` (``profile_memory=True``) records every CPU allocation and free with its size; the
    running sum from model construction on is the live total, and its maximum inside iteration 2 is the
    peak. Only ZeRO-0/1 without a process group (dp 1) and fp32/bf16/fp16/bf16-master on device 'cpu'.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    opts = options or StepOptions(device="cpu")
    if opts.device != "cpu" or opts.zero >= 2 or (opts.zero == 1 and opts.dp_degree > 1):
        raise ValueError("reference_cpu_peak runs on device 'cpu' without a process group")
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    session = _Session(tracker=_NullTracker(), fake=False)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with torch.device("cpu"):
            model = build()
        if is_first_stage is None:
            kind = getattr(model, "input_kind", None)
            first = kind in ("tokens", "image") if kind is not None else opts.stage_index == 0
        else:
            first = is_first_stage
        step = _Step(model, opts, session, make_batch, loss, None, first)
        step.warm_up()
        with record_function("tessera_iteration_2"):
            step.run()
        del step, model
    events = list(prof.profiler.kineto_results.events())
    window = [e for e in events if e.name() == "tessera_iteration_2"]
    if len(window) != 1:
        raise RuntimeError("profiler lost the iteration marker")
    lo, hi = window[0].start_ns(), window[0].start_ns() + window[0].duration_ns()
    mem = sorted(
        (e.start_ns(), e.nbytes())
        for e in events
        if e.name() == "[memory]" and str(e.device_type()) == "DeviceType.CPU"
    )
    live = 0
    start = None
    peak = 0
    for ts, nbytes in mem:
        if ts >= lo and start is None:
            start = live
            peak = live
        live += nbytes
        if lo <= ts <= hi:
            peak = max(peak, live)
    return ReferencePeak(
        peak_bytes=peak, start_bytes=start or 0, n_events=len(mem), wall_s=time.perf_counter() - t0
    )


# ============================================================================ requests (zoo / factories)
@dataclass(frozen=True)
class StageTraceRequest:
    """One device of one plan, JSON-able: what :func:`trace_stage` builds and runs in the worker.

    ``model`` is a zoo name (``tessera.nn.zoo.build_model``) or ``"package.module:function"`` /
    ``"/path/file.py:function"``: a factory called with ``attention``, ``recompute``, ``layer_range``,
    ``tp`` (``TPShare`` or None) and ``**model_kwargs``, returning a zoo-like ``BlockModel`` (``layers``,
    ``make_batch(batch, seq_len, device=...)``, ``loss(out, targets)``, ``has_head``).
    ``micro_batch_size`` is this replica's samples per micro-batch. ``arch`` (the fields of a
    ``TransformerArch``, or of a ``ConvArch`` when it has ``depth``) builds that shape with the zoo's family
    implementation instead of a named model; ``model`` is then only a label.
    """

    model: str
    seq_len: int
    micro_batch_size: int = 1
    precision: str = "fp32"
    optimizer: str = "adamw"
    recompute: str = "none"
    attention: str = "flash"
    layer_range: tuple[int, int] | None = None
    tp_degree: int = 1
    tp_rank: int = 0
    tp_ratios: tuple[float, ...] | None = None
    dp_degree: int = 1
    dp_rank: int = 0
    zero: int = 0
    n_stages: int = 1
    stage_index: int = 0
    schedule: str = "1f1b"
    micro_batches: int = 1
    device: str = "cuda"
    timeline: bool = False  # return the tracked iteration's events in meta["timeline"]
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    arch: dict[str, Any] | None = None  # a TransformerArch / ConvArch as a dict: traced instead of a zoo name

    def __post_init__(self) -> None:
        if self.layer_range is not None:
            object.__setattr__(self, "layer_range", tuple(int(x) for x in self.layer_range))
        if self.tp_ratios is not None:
            object.__setattr__(self, "tp_ratios", tuple(float(x) for x in self.tp_ratios))
        if self.seq_len < 1 or self.micro_batch_size < 1:
            raise ValueError("seq_len and micro_batch_size must be >= 1")
        if not 0 <= self.tp_rank < self.tp_degree:
            raise ValueError(f"tp_rank {self.tp_rank} outside a TP group of {self.tp_degree}")
        self.step_options()  # validates the rest

    def step_options(self) -> StepOptions:
        return StepOptions(
            precision=self.precision,
            optimizer=self.optimizer,
            zero=self.zero,
            dp_degree=self.dp_degree,
            dp_rank=self.dp_rank,
            schedule=self.schedule,
            n_stages=self.n_stages,
            stage_index=self.stage_index,
            micro_batches=self.micro_batches,
            device=self.device,
            timeline=self.timeline,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StageTraceRequest:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown trace request fields: {', '.join(sorted(unknown))}")
        return cls(**data)


def _load_factory(spec: str) -> Callable[..., Any]:
    mod_name, _, attr = spec.rpartition(":")
    if mod_name.endswith(".py"):
        loaded = importlib.util.spec_from_file_location(
            f"_tessera_trace_factory_{abs(hash(mod_name))}", mod_name
        )
        if loaded is None or loaded.loader is None:
            raise TraceError(f"cannot import factory file {mod_name!r}")
        module = importlib.util.module_from_spec(loaded)
        sys.modules[loaded.name] = module
        loaded.loader.exec_module(module)
    else:
        module = importlib.import_module(mod_name)
    return getattr(module, attr)


def build_stage_model(req: StageTraceRequest) -> nn.Module:
    """Build the request's model shard (call under the trace's fake mode and device)."""
    tp = None
    if req.tp_degree > 1:
        from tessera.nn.common import TPShare

        tp = TPShare(req.tp_degree, req.tp_rank, req.tp_ratios)
    kwargs: dict[str, Any] = {"attention": req.attention, "recompute": req.recompute, "tp": tp}
    if req.layer_range is not None:
        kwargs["layer_range"] = req.layer_range
    kwargs.update(req.model_kwargs)
    if req.arch is not None:
        from tessera.models.spec import ConvArch, TransformerArch
        from tessera.nn.zoo import build_model

        arch = ConvArch(**req.arch) if "depth" in req.arch else TransformerArch(**req.arch)
        return build_model(arch, **kwargs)  # model_kwargs may carry family=
    if ":" in req.model:
        return _load_factory(req.model)(**kwargs)
    from tessera.nn.zoo import build_model

    return build_model(req.model, **kwargs)


def trace_request_in_process(req: StageTraceRequest) -> TraceResult:
    """Run one request here (needs the fake CUDA device for device 'cuda')."""
    opts = req.step_options()

    def make_batch(model: nn.Module, i: int) -> tuple[Any, Any]:
        return model.make_batch(req.micro_batch_size, req.seq_len, device=opts.device)  # type: ignore[operator]

    def loss(model: nn.Module, out: Any, targets: Any) -> Any:
        return model.loss(out, targets) if getattr(model, "has_head", True) else None  # type: ignore[operator]

    result = trace_step(lambda: build_stage_model(req), make_batch, loss, opts)
    return TraceResult(**{**asdict(result), "meta": {**result.meta, "request": req.to_dict()}})


# ============================================================================ specs, views, plans
def _model_fields(spec: Any) -> dict[str, Any]:
    """``model`` / ``arch`` request fields for a ModelSpec: its zoo name when it is one, else its arch."""
    from dataclasses import asdict as dc_asdict

    try:
        from tessera.models.zoo import get_arch

        if get_arch(spec.name) == spec.arch:
            return {"model": spec.name}
    except (KeyError, ImportError):
        pass
    if spec.arch is None:
        raise ValueError(f"model {spec.name!r}: a spec without an arch cannot be built for tracing")
    family = getattr(spec, "family", None)
    kwargs = {"family": family} if family and family != "custom" else {}
    return {"model": spec.name, "arch": dc_asdict(spec.arch), "model_kwargs": kwargs}


def view_request(spec: Any, view: Any, *, device: str = "cuda") -> StageTraceRequest:
    """The request tracing a ``tessera.memory.layout.DeviceView`` of ``spec``: its stage's layers, TP rank 0,
    DP rank 0, and a 1F1B position holding ``view.in_flight`` micro-batches."""
    in_flight = max(1, int(view.in_flight))
    micro_batches = max(in_flight, int(getattr(view, "micro_batches", in_flight)))
    return StageTraceRequest(
        **_model_fields(spec),
        seq_len=spec.seq_len,
        micro_batch_size=view.micro_batch,
        precision=view.precision,
        optimizer=view.optimizer,
        recompute=view.recompute,
        attention=view.attention,
        layer_range=(view.layer_start, view.layer_end),
        tp_degree=view.tp,
        dp_degree=view.dp,
        zero=view.zero,
        n_stages=in_flight,
        stage_index=0,
        micro_batches=micro_batches,
        device=device,
    )


def trace_views(spec: Any, views: Sequence[Any], **kwargs: Any) -> list[TraceResult]:
    """Exact traces of several device views (one worker)."""
    return trace_stages([view_request(spec, v) for v in views], **kwargs)


def trace_view(spec: Any, view: Any, **kwargs: Any) -> TraceResult:
    """Exact trace of one device view (``tessera.memory.estimate``'s exact mode)."""
    return trace_views(spec, [view], **kwargs)[0]


def plan_requests(plan: Any, *, spec: Any = None, device: str = "cuda") -> dict[int, StageTraceRequest]:
    """One request per device (global rank) of a ``tessera.plan.Plan``.

    Each replica's micro-batch is ``ceil(share / micro_batches)`` samples (its largest micro-batch) over
    ``min(micro_batches, share)`` micro-batches; uneven TP ratios give each TP rank its own shard. The DP
    rank is 0 for every replica (rank 0 holds the largest ZeRO slice). ``spec`` (a ModelSpec) is needed
    when ``plan.model`` is not a zoo name.
    """
    model = _model_fields(spec) if spec is not None else {"model": plan.model}
    out: dict[int, StageTraceRequest] = {}
    n_stages = len(plan.stages)
    for i, stage in enumerate(plan.stages):
        shares = stage.shares(plan.global_batch)
        ratios = tuple(stage.tp_ratios) if stage.tp_ratios else None
        for j, dev in enumerate(stage.devices):
            replica, tp_rank = divmod(j, stage.tp_degree)
            share = shares[replica]
            m = min(plan.micro_batches, share)
            out[dev.rank] = StageTraceRequest(
                **model,
                seq_len=plan.seq_len,
                micro_batch_size=-(-share // m),
                precision=str(plan.precision.value if hasattr(plan.precision, "value") else plan.precision),
                optimizer=str(getattr(plan.optimizer, "value", plan.optimizer)),
                recompute=str(getattr(plan.recompute, "value", plan.recompute)),
                attention=str(getattr(plan.attention, "value", plan.attention)),
                layer_range=(stage.layer_start, stage.layer_end),
                tp_degree=stage.tp_degree,
                tp_rank=tp_rank,
                tp_ratios=ratios if ratios and stage.tp_degree > 1 else None,
                dp_degree=stage.dp_degree,
                zero=plan.zero,
                n_stages=n_stages,
                stage_index=i,
                schedule=str(getattr(plan.schedule, "value", plan.schedule)),
                micro_batches=m,
                device=device,
            )
    return out


def trace_plan(plan: Any, *, spec: Any = None, **kwargs: Any) -> dict[int, TraceResult]:
    """Peak memory of every device of a Plan; identical devices are traced once."""
    reqs = plan_requests(plan, spec=spec)
    unique: dict[str, StageTraceRequest] = {}
    for r in reqs.values():
        unique.setdefault(json.dumps(r.to_dict(), sort_keys=True), r)
    results = dict(zip(unique, trace_stages(list(unique.values()), **kwargs), strict=True))
    return {rank: results[json.dumps(r.to_dict(), sort_keys=True)] for rank, r in reqs.items()}


# ============================================================================ worker process
def _worker_can_run_here(reqs: Sequence[StageTraceRequest]) -> bool:
    return all(r.device == "cpu" for r in reqs) or fakecuda.is_loaded()


def trace_stages(
    requests: Sequence[StageTraceRequest],
    *,
    in_process: bool | None = None,
    timeout_s: float | None = 600.0,
) -> list[TraceResult]:
    """Trace several devices; one worker process serves them all (torch imported once).

    ``in_process=None`` runs here when possible (fake CUDA loaded, or only 'cpu' requests), else in a
    worker; ``True`` forces here, ``False`` forces a worker (isolates AMP patches and process groups).
    """
    reqs = list(requests)
    if not reqs:
        return []
    here = _worker_can_run_here(reqs) if in_process is None else in_process
    if here:
        return [trace_request_in_process(r) for r in reqs]
    fakecuda.build_shim()  # compile here, so a missing g++ fails with its clear message
    payload = json.dumps({"requests": [r.to_dict() for r in reqs]})
    env = dict(os.environ)
    src_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = src_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run(
        [sys.executable, "-m", "tessera.memory.trace_worker"],
        input=payload,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
        check=False,
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        raise TraceError(f"trace worker failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}")
    try:
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
    except json.JSONDecodeError as e:
        raise TraceError(f"trace worker sent no result: {e}\n{proc.stderr[-4000:]}") from None
    out = []
    for req, item in zip(reqs, answer["results"], strict=True):
        if "error" in item:
            raise TraceError(f"trace of {req.model!r} failed in the worker:\n{item['error']}")
        out.append(TraceResult.from_dict(item))
    return out


def trace_stage(request: StageTraceRequest | None = None, /, **fields_: Any) -> TraceResult:
    """Trace one device: ``trace_stage(StageTraceRequest(...))`` or ``trace_stage(model=..., seq_len=...)``."""
    req = request if request is not None else StageTraceRequest(**fields_)
    return trace_stages([req])[0]


def _serve(stdin: TextIO, stdout: TextIO) -> int:
    """Worker loop body: JSON ``{"requests": [...]}`` in, ``{"results": [...]}`` out (one line)."""
    data = json.loads(stdin.read())
    results: list[dict[str, Any]] = []
    real_stdout = stdout
    with contextlib.redirect_stdout(io.StringIO()) as chatter:
        for item in data["requests"]:
            try:
                req = StageTraceRequest.from_dict(item)
                results.append(trace_request_in_process(req).to_dict())
            except Exception:  # report per request, keep serving the others
                results.append({"error": traceback.format_exc()})
    sys.stderr.write(chatter.getvalue())
    real_stdout.write(json.dumps({"results": results}) + "\n")
    real_stdout.flush()
    return 0

"""Single-device distributed profiling (Crius §5.1): every layer's per-device shard timed on the one device at hand.

Why one device is enough: under a DP-only plan a device runs the whole layer on its micro-batch, under a
TP-only plan the ``1/tp`` shard of it plus all-reduces. The shard's compute does not depend on where its peers
are, and the all-reduces are costed by the communication model (``tessera profile comm``), so building rank 0's
shard (the zoo's ``TPShare``, no process group) and timing its forward and backward gives the compute term of
every (TP degree, micro-batch) a planner will ask about — without the cluster.

What is timed mirrors what the runtime runs on a rank:

* the layer as the zoo builds it (dropout on, ``train()``), fed the input the previous layer produces (the chain
  is traced once on real tensors), with a gradient flowing into that input (stage inputs and intermediate
  activations both need one);
* forward under the precision's autocast (bf16-master: bf16 parameters and activations), and for the head the
  loss (``BlockModel.loss``: cross-entropy on fp32 logits) inside the forward, as the last stage computes it;
* the optimizer step over the layer's parameters (AdamW/Adam/SGD with the runtime's hyper-parameters, fp32
  masters for bf16-master) — once per iteration, so timed apart;
* layers the runtime keeps replicated under TP (MoE, conv: :func:`tessera.perf.compute.runtime_splits`) are
  timed only at TP 1; the estimate prices them there at every TP degree; a vocab-sharded head is timed with
  the loss over its local logits (the parallel cross-entropy's compute; its all-reduces are costed apart);
* on the CPU stand-in device under the thread count the runtime gives each of ``processes`` ranks sharing the
  host (``cpus // processes``), keyed ``cpu@{threads}t`` — and with ``processes − 1`` co-runner processes doing
  the same work at the same time, because ranks on one host share its caches and memory bandwidth (alone, a
  1-thread rank ran a TP shard ~25 % faster than beside its peer); on CUDA keyed by the catalog name of the
  GPU (GPUs share nothing), the way a training step runs it: the host queues kernels ahead of the GPU, so a
  layer costs the larger of its launch and its kernel time, not their sum, and per-call costs are shared by
  the whole model. So on a GPU a shape-preserving layer (a block) is timed as a chain of ``back_to_back``
  copies in one forward and one backward (the autograd engine and autocast entered once, as in the model),
  other layers ``back_to_back`` times between two synchronizations. Timed one region per sync, a 125M GPT's
  estimate was 1.6-2.6x its step on an H200 and a 1.3B GPT's optimizer 4x (``bench/results/gpu_estimate.json``).
  On every device the optimizer step is timed over ``OPTIMIZER_REPLICAS`` copies of the layer's parameters in
  one step, the figure per copy: the runtime steps a stage in one call, whose fixed cost is paid once per
  stage, not once per layer.

Identical layers (same :func:`~tessera.perf.compute.layer_signature`, e.g. blocks 0..L-1 of a GPT) are timed
once; each figure is the median over ``passes`` passes of the median of ``repeats / passes`` runs after ``warmup``
untimed ones. CPU ranks are pinned one per core as the
runtime pins them (:mod:`tessera.nn.cpu_affinity`): this process takes rank 0's core, the co-runners the next.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
from torch import nn

from tessera.hardware import GPUSpec, get_gpu, gpu_catalog
from tessera.hardware.catalog import CPU_HALF_DEVICE
from tessera.models.spec import Layer, ModelSpec
from tessera.nn import cpu_affinity
from tessera.nn.dtensor_tp import block_tp_plan, fake_process_group
from tessera.nn.optimizers import make_optimizer
from tessera.nn.vocab_parallel import vocab_parallel_cross_entropy
from tessera.perf.compute import PROFILED_RECOMPUTES, Profile, layer_signature, profile_device, runtime_splits

PRECISIONS = ("fp32", "bf16", "fp16", "bf16-master")
OPTIMIZERS = ("adamw", "adam", "sgd")


@dataclass(frozen=True)
class LayerMeasurement:
    """One profiled (layer, TP degree, micro-batch): medians in seconds on one device."""

    layer: int  # first spec layer with this signature
    name: str
    tp: int
    micro_batch: int
    fwd_s: float
    bwd_s: float
    optimizer_s: float  # one step over this layer's (shard's) parameters
    impl: str = "own"  # TP implementation timed: Tessera's own shard layers, or PyTorch DTensor (even splits)
    recompute: str = "none"  # the layer built without recompute, or with selective recompute
    # on a GPU: fwd_s/bwd_s are the kernels' time with the launch queue full, these the host's launch time
    host_fwd_s: float | None = None
    host_bwd_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ProfileRun:
    """What one profiling run measured, and the device key its figures were stored under."""

    model: str
    device_type: str  # the Profile key (``cpu@2t``, ``H100-80GB``, …)
    threads: int | None  # CPU threads per rank; None on GPUs
    precision: str
    optimizer: str
    seq_len: int
    rows: tuple[LayerMeasurement, ...]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rows"] = [r.to_dict() for r in self.rows]
        return d

    def store(self, spec: ModelSpec, profile: Profile) -> None:
        """Put the figures into ``profile`` under this run's device key (the optimizer step from the
        smallest micro-batch's own-layer rows: it does not depend on the micro-batch)."""
        smallest = min((r.micro_batch for r in self.rows), default=0)
        for r in self.rows:
            layer = spec.layers[r.layer]
            if r.impl == "own" and r.recompute == "none" and r.micro_batch == smallest:
                profile.put_optimizer(
                    layer, self.device_type, r.tp, self.precision, self.optimizer, time_s=r.optimizer_s
                )
            host = (
                (r.host_fwd_s, r.host_bwd_s)
                if r.host_fwd_s is not None and r.host_bwd_s is not None
                else None
            )
            profile.put(
                layer, self.device_type, r.tp, r.micro_batch, self.precision, fwd_s=r.fwd_s, bwd_s=r.bwd_s,
                impl=r.impl, recompute=r.recompute, host=host,
            )  # fmt: skip


# ---------------------------------------------------------------------------------------------- devices
def catalog_name(device_name: str, total_memory_bytes: int | None = None) -> str | None:
    """The catalog GPU type of a CUDA device name (``NVIDIA H100 80GB HBM3`` → ``H100-80GB``), or None.

    Candidates are catalog names and aliases found inside the device name (ignoring case, spaces and dashes);
    the longest wins, ties broken by the memory size closest to the device's."""
    norm = _norm(device_name.replace("NVIDIA", "").replace("Tesla", ""))
    best: tuple[int, float, str] | None = None
    for name, spec in gpu_catalog().items():
        for alias in (name, *spec.aliases):
            a = _norm(alias)
            if len(a) >= 2 and a in norm:
                mem_gap = abs(spec.memory_bytes - total_memory_bytes) if total_memory_bytes else 0.0
                cand = (-len(a), mem_gap, name)
                if best is None or cand < best:
                    best = cand
    return best[2] if best else None


def _norm(s: str) -> str:
    return "".join(ch for ch in s.lower() if ch.isalnum())


def cpu_threads(processes: int = 1) -> int:
    """Threads the runtime gives each of ``processes`` ranks on this host (``runtime.worker`` does the same)."""
    return max(1, (os.cpu_count() or 1) // max(1, processes))


def device_type_of(device: torch.device, threads: int | None = None) -> str:
    """The Profile key of ``device``: ``cpu@{threads}t`` on CPU, the catalog name of a CUDA GPU (its raw
    name when the catalog has no match)."""
    if device.type == "cpu":
        return profile_device(get_gpu("cpu").name, threads or torch.get_num_threads())
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return catalog_name(props.name, int(props.total_memory)) or props.name
    return device.type


def default_device() -> torch.device:
    return (
        torch.device("cuda", torch.cuda.current_device())
        if torch.cuda.is_available()
        else torch.device("cpu")
    )


@contextlib.contextmanager
def _threads(n: int | None) -> Iterator[None]:
    if n is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _co_runner(kwargs: dict[str, Any], ready: Any, stop: Any, batch: Any) -> None:
    """A peer rank's load while the main process profiles: its whole stage training, step after step.

    A steady forward/backward over the same layers at the same thread count is what a real peer does beside
    this rank; re-running the profiler here instead spent most of its time building modules, so the main
    process's medians drifted with the peer's phase (±40 % on small micro-batches). ``batch`` (shared) is the
    micro-batch the main process is timing: peers run the same size, as in a real step."""
    from tessera.nn.zoo import build_model

    spec: ModelSpec = kwargs["spec"]
    start, end = kwargs["layer_range"] or (0, spec.n_layers)
    torch.set_num_threads(cpu_threads(kwargs["processes"]))
    cpu_affinity.pin(kwargs["slot"], kwargs["processes"])  # the peer's core, as the runtime pins its rank
    dev = torch.device("cpu")
    precision, attention = kwargs["precision"], kwargs["attention"]
    factory = kwargs.get("factory")  # None: the zoo model
    inputs, targets = trace_inputs(
        spec,
        max(kwargs["micro_batches"]),
        device=dev,
        precision=precision,
        attention=attention,
        factory=factory,
    )
    x = inputs[layer_signature(spec.layers[start])]
    torch.manual_seed(1)
    whole = dict(layer_range=(start, end), tp=None, attention=attention, recompute="none")
    model = factory(**whole) if factory is not None else build_model(spec.arch, family=spec.family, **whole)  # type: ignore[arg-type]
    if precision == "bf16-master":
        model.to(torch.bfloat16)
    model.train()
    layers = list(model.layers)  # type: ignore[arg-type]

    def step() -> None:
        b = max(1, batch.value)
        h = x[:b].clone().requires_grad_(x.is_floating_point())
        with _autocast(dev, precision):
            for layer in layers:
                h = layer(h)
            out = model.loss(h, targets[:b]) if end == spec.n_layers else h.float().square().mean()  # type: ignore[operator]
        out.backward()
        model.zero_grad(set_to_none=True)

    step()
    ready.set()
    while not stop.is_set():
        step()


@contextlib.contextmanager
def _co_runners(n: int, kwargs: dict[str, Any]) -> Iterator[Any]:
    """Run ``n`` co-runner processes (spawned, daemonic) for the duration of the block; yields the shared
    micro-batch size they run (set it to what is being timed), or None without co-runners."""
    if n <= 0:
        yield None
        return
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    batch = ctx.Value("i", max(kwargs["micro_batches"]), lock=False)
    procs, events = [], []
    for i in range(n):
        ready = ctx.Event()
        p = ctx.Process(
            target=_co_runner,
            args=({**kwargs, "slot": i + 1}, ready, stop, batch),
            daemon=True,
            name=f"tessera-corun{i}",
        )
        p.start()
        procs.append(p)
        events.append(ready)
    try:
        for p, e in zip(procs, events, strict=True):
            while not e.wait(timeout=0.2):
                if not p.is_alive():
                    raise RuntimeError(
                        f"profile: co-runner process {p.name} exited with code {p.exitcode} before it was ready "
                        "(under the spawn start method the calling script needs an `if __name__ == '__main__':` guard)"
                    )
        yield batch
    finally:
        stop.set()
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)


# --------------------------------------------------------------------------------------------- building
# What builds a model's layers ``[start, end)``: the runtime's model-factory contract (keywords ``layer_range``,
# ``tp``, ``attention``, ``recompute``; the module has ``layers``, ``loss`` and ``make_batch``). None: the zoo's.
ModelFactory = Callable[..., nn.Module]


def _check_spec(spec: ModelSpec, factory: ModelFactory | None = None) -> None:
    if factory is not None:
        return  # a user's own model: its factory builds every layer
    if spec.arch is None or spec.family not in ("gpt", "llama", "bert", "moe", "wide_resnet"):
        raise ValueError(f"model: {spec.name!r} has no PyTorch implementation in the zoo to profile")


def _build(
    spec: ModelSpec,
    index: int,
    tp: int,
    attention: str,
    recompute: str = "none",
    factory: ModelFactory | None = None,
) -> nn.Module:
    """Layer ``index`` alone (rank 0's shard when ``tp > 1``), the way the runtime builds it: from the zoo, or
    from ``factory`` (a user's own model, which the runtime builds the same way)."""
    from tessera.nn.common import TPShare
    from tessera.nn.zoo import build_model

    share = TPShare(degree=tp, rank=0) if tp > 1 else None
    kw = dict(layer_range=(index, index + 1), tp=share, attention=attention, recompute=recompute)
    if factory is not None:
        return factory(**kw)
    return build_model(spec.arch, family=spec.family, **kw)  # type: ignore[arg-type]


@contextlib.contextmanager
def _dtensor_shard(
    spec: ModelSpec,
    index: int,
    tp: int,
    attention: str,
    device: torch.device,
    precision: str,
    recompute: str = "none",
    factory: ModelFactory | None = None,
):
    """Layer ``index`` as the runtime runs an even TP split: the full block under ``parallelize_module`` over a
    ``tp``-rank mesh — here a fake process group, so this rank's compute and DTensor's dispatch are timed and
    the (no-op) collectives are left to the communication model. Yields None when the block has no DTensor
    plan or a real process group is live in this process (it must not be torn down)."""
    import torch.distributed as dist

    if factory is not None or (dist.is_available() and dist.is_initialized()):
        yield None  # a user's own model runs its TP as its code says: no DTensor variant to time
        return
    model = _build(spec, index, 1, attention, recompute).to(device)
    plan = block_tp_plan(model.layers[0])  # type: ignore[index]
    if plan is None:
        yield None
        return
    if precision == "bf16-master":
        model.to(torch.bfloat16)
    with fake_process_group(tp, 0):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import parallelize_module

        mesh = init_device_mesh(device.type, (tp,))
        parallelize_module(model.layers[0], mesh, plan)  # type: ignore[index, arg-type]
        model.train()
        yield model


def _autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    return torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def trace_inputs(
    spec: ModelSpec,
    batch: int,
    *,
    device: torch.device,
    precision: str = "fp32",
    attention: str = "flash",
    factory: ModelFactory | None = None,
) -> tuple[dict[tuple, torch.Tensor], torch.Tensor]:
    """(input of the first layer of each signature, targets) for ``batch`` samples, by running the model's
    layers once in order on real tensors (identical layers reuse one module). Values are what the model
    produces, shapes and dtypes exactly what each layer receives in training."""
    built: dict[tuple, nn.Module] = {}
    inputs: dict[tuple, torch.Tensor] = {}
    g = torch.Generator().manual_seed(0)
    first = _build(spec, 0, 1, attention, factory=factory)
    x, _ = first.make_batch(batch, spec.seq_len, generator=g)  # type: ignore[operator]
    last = _build(spec, spec.n_layers - 1, 1, attention, factory=factory)
    _, targets = last.make_batch(batch, spec.seq_len, generator=g)  # type: ignore[operator]
    x = x.to(device)
    with torch.no_grad():
        for i, layer in enumerate(spec.layers):
            sig = layer_signature(layer)
            if sig not in built:
                built[sig] = (
                    first
                    if i == 0
                    else last
                    if i == spec.n_layers - 1
                    else _build(spec, i, 1, attention, factory=factory)
                )
                built[sig].to(device)
                if precision == "bf16-master":
                    built[sig].to(torch.bfloat16)
                if x.is_floating_point() and precision == "bf16-master":
                    x = x.to(torch.bfloat16)
                inputs[sig] = x
            module = built[sig]
            if i < spec.n_layers - 1:
                with _autocast(device, precision):
                    x = module.layers[0](x)  # type: ignore[index]
    return inputs, targets.to(device)


# ---------------------------------------------------------------------------------------------- timing
def _median_time(fn: Callable[[], tuple[float, ...]], warmup: int, repeats: int) -> tuple[float, ...]:
    for _ in range(warmup):
        fn()
    runs = [fn() for _ in range(max(1, repeats))]
    return tuple(statistics.median(r[k] for r in runs) for k in range(len(runs[0])))


#: timed regions run this many times between two synchronizations on a GPU (see the module docstring)
CUDA_BACK_TO_BACK = 4


#: copies of a layer's parameters one timed optimizer step covers (bounded by OPTIMIZER_REPLICA_BYTES): the runtime
#: steps a stage's parameters in one call, so a call's fixed cost is paid once per stage, not once per layer (on a
#: CPU core, one layer per call read ~0.35 ms for each layer of a 4-layer MLP, 8 copies per call ~0.13-0.18 ms)
OPTIMIZER_REPLICAS = 8
OPTIMIZER_REPLICA_BYTES = 4 * 2**30


def _optimizer_replicas(device: torch.device, params: list[nn.Parameter], replicas: int | None) -> int:
    if replicas is not None:
        return max(1, replicas)
    per_copy = sum(p.numel() for p in params) * 16  # parameter, gradient and two moments in fp32
    return max(1, min(OPTIMIZER_REPLICAS, OPTIMIZER_REPLICA_BYTES // max(1, per_copy)))


def _chain(
    layer: nn.Module, x: torch.Tensor, k: int, device: torch.device, precision: str
) -> list[nn.Module]:
    """``k`` copies of ``layer`` to run one after another when it maps ``x`` to the same shape and dtype (a
    block of a residual stream); else just the layer (timed back to back instead)."""
    from torch.distributed.tensor import DTensor

    if k <= 1 or any(isinstance(p, DTensor) for p in layer.parameters()):
        return [layer]  # (a DTensor shard's copies would share its mesh: timed back to back)
    with torch.no_grad(), _autocast(device, precision):
        out = layer(x)
    same = isinstance(out, torch.Tensor) and out.shape == x.shape and out.dtype == x.dtype
    del out
    if not same:
        return [layer]
    import copy

    return [layer, *(copy.deepcopy(layer) for _ in range(k - 1))]


def _back_to_back(device: torch.device, back_to_back: int | None) -> int:
    if back_to_back is not None:
        if back_to_back < 1:
            raise ValueError(f"back_to_back: must be >= 1, got {back_to_back}")
        return back_to_back
    return CUDA_BACK_TO_BACK if device.type == "cuda" else 1


def time_layer(
    model: nn.Module,
    x: torch.Tensor,
    targets: torch.Tensor | None,
    *,
    device: torch.device,
    precision: str,
    warmup: int,
    repeats: int,
    back_to_back: int | None = None,
) -> tuple[float, float, float | None, float | None]:
    """Median (forward s, backward s, host forward s, host backward s) of ``model.layers[0]`` on input ``x``;
    ``targets``: add the loss. ``back_to_back`` forwards, then as many backwards, between synchronizations
    (default: 4 on CUDA, 1 on CPU, where the host runs the kernels itself); the figures are per pass.

    On CUDA each timed region is queued behind a sleeping kernel that outlasts the host's launching, so the
    events around it time the kernels alone, back to back; the host's launch time is taken apart (a layer
    runs at the slower of the two, and a stage's step at the slower of their sums). On CPU the host figures
    are None (the host runs the kernels: the wall time is both)."""
    layer = model.layers[0]  # type: ignore[index]
    x = x.detach().clone()
    if x.is_floating_point():
        x.requires_grad_(True)
    grad_out: list[torch.Tensor] = []
    k = _back_to_back(device, back_to_back)
    chain = _chain(layer, x, k, device, precision) if targets is None else [layer]
    params = [p for p in model.parameters() if p.requires_grad]
    params += [p for m in chain[1:] for p in m.parameters() if p.requires_grad]

    def forwards() -> list[torch.Tensor]:
        """One timed pass: the chain of copies once, or the layer (with its loss) ``k`` times back to back."""
        if len(chain) > 1:
            with _autocast(device, precision):
                out = x
                for m in chain:
                    out = m(out)
            return [out]
        outs = []
        for _ in range(k):
            with _autocast(device, precision):
                out = layer(x)
                if targets is not None:
                    out = model.loss(out, targets)  # type: ignore[operator]
            outs.append(out)
        return outs

    def backwards(outs: list[torch.Tensor]) -> None:
        for out in outs:
            if targets is not None:
                out.backward()
            else:
                if not grad_out:
                    grad_out.append(torch.randn_like(out) * 1e-3)
                out.backward(grad_out[0])

    def run() -> tuple[float, float]:
        for p in params:
            p.grad = None
        x.grad = None
        _sync(device)
        t0 = time.perf_counter()
        outs = forwards()
        _sync(device)
        t1 = time.perf_counter()
        backwards(outs)
        del outs
        _sync(device)
        return (t1 - t0) / k, (time.perf_counter() - t1) / k

    if device.type != "cuda":
        fwd, bwd = _median_time(run, warmup, repeats)
        return fwd, bwd, None, None
    hold = _LaunchHold(device)

    def run_cuda() -> tuple[float, float, float, float]:
        for p in params:
            p.grad = None
        x.grad = None
        _sync(device)
        fwd_k, fwd_h, outs = hold.time(forwards)
        bwd_k, bwd_h, _ = hold.time(functools.partial(backwards, outs))
        outs.clear()
        _sync(device)
        return fwd_k / k, bwd_k / k, fwd_h / k, bwd_h / k

    fwd, bwd, host_fwd, host_bwd = _median_time(run_cuda, warmup, repeats)
    return fwd, bwd, host_fwd, host_bwd


class _LaunchHold:
    """Times a region's kernels apart from its launches: a sleeping kernel queued first holds the GPU while
    the host launches the region, so the kernels then run back to back between two events (their own time,
    not the launch rate's), and the host's launch time is read beside it. The sleep is sized from the
    region's last launch time (x2, at least 2 ms); a region that waited on the GPU (a synchronizing op) is
    timed by the wall clock instead."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cycles_per_s = _sleep_rate(device)
        self.last_host_s: dict[int, float] = {}

    def time(self, region: Callable[[], Any]) -> tuple[float, float, Any]:
        """(kernel seconds, host launch seconds, the region's result)."""
        slot = id(getattr(region, "func", region))  # forwards, or the backwards' partial: one hold each
        hold_s = max(2e-3, 2.0 * self.last_host_s.get(slot, 0.0))
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(hold_s * self.cycles_per_s))
        start.record()
        t0 = time.perf_counter()
        out = region()
        host_s = time.perf_counter() - t0
        end.record()
        end.synchronize()
        self.last_host_s[slot] = host_s
        kernel_s = start.elapsed_time(end) / 1e3
        if host_s > 0.8 * hold_s:  # the launches outlasted the hold (or waited on the GPU): the wall is all
            kernel_s = max(kernel_s, host_s)
        return kernel_s, host_s, out


_SLEEP_RATES: dict[int, float] = {}


def _sleep_rate(device: torch.device) -> float:
    """``torch.cuda._sleep`` cycles per second on ``device`` (measured once)."""
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _SLEEP_RATES:
        cycles = 20_000_000
        torch.cuda._sleep(1000)  # warm the kernel
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        _SLEEP_RATES[idx] = cycles / max(1e-6, start.elapsed_time(end) / 1e3)
    return _SLEEP_RATES[idx]


def time_optimizer(
    model: nn.Module,
    *,
    device: torch.device,
    precision: str,
    optimizer: str,
    warmup: int,
    repeats: int,
    back_to_back: int | None = None,
    replicas: int | None = None,
) -> float:
    """Median seconds of one optimizer step over ``model``'s parameters, with the precision's bookkeeping
    around it as the runtime does it (bf16-master: grads into fp32 masters and back; fp16: unscale + check);
    ``back_to_back`` steps between synchronizations (as :func:`time_layer`), per step; each step covers
    ``replicas`` copies of the parameters (default: up to 8, within 4 GiB), the figure per copy."""
    k = _back_to_back(device, back_to_back)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        return 0.0
    r = _optimizer_replicas(device, params, replicas)
    own = list(params)
    params = own + [nn.Parameter(p.detach().clone()) for _ in range(r - 1) for p in own]
    masters = (
        [nn.Parameter(p.detach().float().clone()) for p in params] if precision == "bf16-master" else params
    )
    opt = make_optimizer(optimizer, masters, lr=1e-3)
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3

    def one() -> None:
        if precision == "bf16-master":
            for p, m in zip(params, masters, strict=True):
                m.grad = p.grad.float()  # type: ignore[union-attr]
        if precision == "fp16":
            found = torch.zeros(1, device=device)
            for p in masters:
                g = p.grad
                assert g is not None
                g.mul_(1.0)
                if not torch.isfinite(g).all():
                    found.fill_(1.0)
        opt.step()
        if precision == "bf16-master":
            with torch.no_grad():
                for p, m in zip(params, masters, strict=True):
                    p.copy_(m)

    def run() -> tuple[float]:
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(k):
            one()
        _sync(device)
        return ((time.perf_counter() - t0) / (k * r),)

    return _median_time(run, max(1, warmup), repeats)[0]


# -------------------------------------------------------------------------------------------- profiling
def profile_layers(
    spec: ModelSpec,
    *,
    micro_batches: Sequence[int] = (1,),
    tp_degrees: Sequence[int] = (1,),
    precision: str = "fp32",
    optimizer: str = "adamw",
    attention: str = "flash",
    processes: int = 1,
    device: torch.device | str | None = None,
    layer_range: tuple[int, int] | None = None,
    warmup: int = 2,
    repeats: int = 6,
    passes: int = 3,
    profile: Profile | None = None,
    on_step: Callable[[str], None] | None = None,
    co_run: bool = True,
    recomputes: Sequence[str] = ("none",),
    device_type: str | None = None,
    back_to_back: int | None = None,
    factory: ModelFactory | None = None,
) -> ProfileRun:
    """Time every distinct layer of ``spec`` (or of ``layer_range``) at each TP degree and micro-batch.

    ``processes``: how many ranks will share this host (CPU only: sets the thread count and the device key,
    as the runtime does). Results go into ``profile`` (if given) under the device key; ``on_step(label)`` is
    called after each measurement (progress bars). ``co_run``: on CPU with ``processes > 1``, load the host with
    the peer ranks' work while timing (see the module docstring). ``passes``: time everything that many times
    over, ``repeats / passes`` runs each, and keep the median of the passes — a host's slow spell (a second or
    two on a shared VM) then spoils one pass of a figure, not all its consecutive repeats. ``recomputes``: also
    time transformer blocks built with these recompute modes (``selective``: plans that use it are priced
    from the timed block, not from the attention core's FLOP share). ``device_type``: on CPU, profile as this
    catalog CPU device type with a fixed thread count (the embedded service's ``cpu-core``/``cpu-half``: its
    thread count, and for ``cpu-half`` the busy neighbour on this process's core that the device has too).
    ``factory``: build the layers with it (a user's own model, picklable for the co-runners) instead of the zoo.
    """
    cpu_type = _cpu_device_type(device_type)
    _check_spec(spec, factory)
    for rc in recomputes:
        if rc not in PROFILED_RECOMPUTES:
            raise ValueError(f"recompute: {rc!r} is not one of {', '.join(PROFILED_RECOMPUTES)}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision: {precision!r} is not one of {', '.join(PRECISIONS)}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer: {optimizer!r} is not one of {', '.join(OPTIMIZERS)}")
    if not micro_batches or any(b < 1 for b in micro_batches):
        raise ValueError(f"micro-batch: every size must be >= 1, got {list(micro_batches)}")
    if not tp_degrees or any(t < 1 for t in tp_degrees):
        raise ValueError(f"tp: every degree must be >= 1, got {list(tp_degrees)}")
    if repeats < 1 or passes < 1:
        raise ValueError(f"repeats: repeats and passes must be >= 1, got {repeats} and {passes}")
    dev = torch.device(device) if device is not None else default_device()
    if cpu_type is not None and dev.type != "cpu":
        raise ValueError(f"device-type: {cpu_type.name} is a CPU device type; the device here is {dev}")
    threads = (cpu_type.threads if cpu_type else cpu_threads(processes)) if dev.type == "cpu" else None
    half = cpu_type is not None and cpu_type.name == CPU_HALF_DEVICE.name
    start, end = layer_range or (0, spec.n_layers)
    if not 0 <= start < end <= spec.n_layers:
        raise ValueError(f"layers: range [{start}, {end}) outside {spec.name}'s {spec.n_layers} layers")
    for t in tp_degrees:
        for layer in spec.layers[start:end]:
            if runtime_splits(layer) and t > layer.tp_units:
                raise ValueError(f"tp: {t} ranks for the {layer.tp_units} units of {layer.name}")
    rows: list[LayerMeasurement] = []
    peers = processes - 1 if (co_run and dev.type == "cpu") else 0
    peer_kwargs = dict(
        spec=spec, micro_batches=tuple(micro_batches), precision=precision, attention=attention,
        processes=processes, layer_range=layer_range, factory=factory,
    )  # fmt: skip
    per_pass = max(1, math.ceil(repeats / passes))
    slots = processes if dev.type == "cpu" else 1  # this process takes rank 0's core, the peers the next ones
    with (
        _co_runners(peers, peer_kwargs) as peer_batch,
        _threads(threads),
        cpu_affinity.pinned(0, max(slots, 2) if half else slots) as core,
        torch.random.fork_rng(devices=[]),
    ):
        torch.manual_seed(0)
        key = profile_device(cpu_type.name, threads) if cpu_type else device_type_of(dev, threads)
        inputs, targets = trace_inputs(
            spec, max(micro_batches), device=dev, precision=precision, attention=attention, factory=factory
        )
        for _ in range(passes):
            rows += _profile_pass(
                spec, start, end, tp_degrees, micro_batches, inputs, targets, device=dev, precision=precision,
                optimizer=optimizer, attention=attention, warmup=warmup, repeats=per_pass, peer_batch=peer_batch,
                on_step=on_step, recomputes=recomputes, back_to_back=_back_to_back(dev, back_to_back),
                factory=factory,
            )  # fmt: skip
        run = ProfileRun(
            spec.name, key, threads, precision, optimizer, spec.seq_len, tuple(_median_rows(rows))
        )
        if half:  # the core's figures × the share the neighbour leaves (see half_core_slowdown)
            run = as_half_core(run, half_core_slowdown(core))
    if profile is not None:
        run.store(spec, profile)
    return run


def as_half_core(run: ProfileRun, factor: float) -> ProfileRun:
    """``run`` (a ``cpu-core`` profile) as the ``cpu-half`` device's: every figure × the measured slowdown
    ``factor`` of a core shared with the busy neighbour. From the same measurements, so the two types differ
    by exactly what was measured between them, not by two runs' noise."""
    rows = tuple(
        replace(r, fwd_s=r.fwd_s * factor, bwd_s=r.bwd_s * factor, optimizer_s=r.optimizer_s * factor)
        for r in run.rows
    )
    return replace(run, device_type=profile_device(CPU_HALF_DEVICE.name, run.threads), rows=rows)


def half_core_slowdown(core: int | None, work_s: float = 0.25, repeats: int = 3) -> float:
    """How much slower this thread computes beside the busy neighbour of a ``cpu-half`` device than alone
    (about 2 on an idle core): measured, never assumed. Why not profile the layers beside the neighbour: the
    OS shares the core in time slices of milliseconds, so a sub-millisecond layer mostly runs in one slice and
    its median hides the half it waits; a whole step of many layers pays it. So the profile is the core's,
    scaled by this ratio of a fixed matmul workload's time (a few time slices long), median of ``repeats``."""
    a = torch.randn(128, 128)

    def work(n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            torch.mm(a, a)
        return time.perf_counter() - t0

    work(20)
    t_one = max(work(50) / 50, 1e-7)
    n = max(50, int(work_s / t_one))
    alone = statistics.median(work(n) for _ in range(repeats))
    with cpu_affinity.neighboured(True, core):
        time.sleep(0.05)  # the neighbour is running
        shared = statistics.median(work(n) for _ in range(repeats))
    return max(1.0, shared / alone)


def _cpu_device_type(name: str | None) -> GPUSpec | None:
    if name is None:
        return None
    gpu = get_gpu(name)
    if gpu.arch != "cpu" or gpu.threads is None:
        raise ValueError(
            f"device-type: {name!r} is not a CPU device type with a fixed thread count (cpu-core, cpu-half)"
        )
    return gpu


def _median_rows(rows: list[LayerMeasurement]) -> list[LayerMeasurement]:
    """One row per (layer, TP degree, micro-batch, impl): the median of each figure over the passes (each
    pass's own figure is a median over its repeats). Not the least: beside a co-runner a pass can also be
    lucky (the peer in a light phase): with the least pass every two-process plan came out under-estimated."""
    groups: dict[tuple, list[LayerMeasurement]] = {}
    for r in rows:
        groups.setdefault((r.layer, r.tp, r.micro_batch, r.impl, r.recompute), []).append(r)

    def median_of(xs: list[float | None]) -> float | None:
        present = [x for x in xs if x is not None]
        return statistics.median(present) if present else None

    return [
        replace(
            g[0],
            fwd_s=statistics.median(r.fwd_s for r in g),
            bwd_s=statistics.median(r.bwd_s for r in g),
            optimizer_s=statistics.median(r.optimizer_s for r in g),
            host_fwd_s=median_of([r.host_fwd_s for r in g]),
            host_bwd_s=median_of([r.host_bwd_s for r in g]),
        )
        for g in groups.values()
    ]


def _profile_pass(
    spec: ModelSpec,
    start: int,
    end: int,
    tp_degrees: Sequence[int],
    micro_batches: Sequence[int],
    inputs: dict[tuple, torch.Tensor],
    targets: torch.Tensor,
    *,
    device: torch.device,
    precision: str,
    optimizer: str,
    attention: str,
    warmup: int,
    repeats: int,
    peer_batch: Any,
    on_step: Callable[[str], None] | None,
    recomputes: Sequence[str] = ("none",),
    back_to_back: int = 1,
    factory: ModelFactory | None = None,
) -> list[LayerMeasurement]:
    """One timing of every distinct layer in [start, end) at each TP degree and micro-batch."""
    rows: list[LayerMeasurement] = []
    seen: set[tuple] = set()
    timing = dict(
        device=device, precision=precision, warmup=warmup, repeats=repeats, peer_batch=peer_batch,
        back_to_back=back_to_back,
    )  # fmt: skip

    def timed(model: nn.Module, x: torch.Tensor, y: torch.Tensor | None, what: LayerMeasurement) -> None:
        """Time ``model`` at every micro-batch into ``rows``; ``what`` says what it is (figures filled in)."""
        tag = (
            ""
            if (what.impl, what.recompute) == ("own", "none")
            else f" ({what.impl}, {what.recompute} recompute)"
        )
        for b, (fwd, bwd, hf, hb) in _time_micro_batches(model, x, y, micro_batches, **timing):
            rows.append(replace(what, micro_batch=b, fwd_s=fwd, bwd_s=bwd, host_fwd_s=hf, host_bwd_s=hb))
            if on_step is not None:
                on_step(f"{what.name} tp{what.tp} mb{b}{tag}")

    for i in range(start, end):
        layer = spec.layers[i]
        sig = layer_signature(layer)
        if sig in seen:
            continue
        seen.add(sig)
        y = targets if i == spec.n_layers - 1 else None
        for t in sorted(set(tp_degrees)):
            if t > 1 and not runtime_splits(layer):
                continue  # replicated in the TP group: its TP-1 figure is what every TP rank runs
            opt_s = 0.0
            for rc in _variants(layer, recomputes):  # "none" first: it times the optimizer step
                model = _build(spec, i, t, attention, rc, factory).to(device)
                if precision == "bf16-master":
                    model.to(torch.bfloat16)
                model.train()
                if rc == "none":
                    opt_s = time_optimizer(
                        model, device=device, precision=precision, optimizer=optimizer, warmup=warmup,
                        repeats=repeats, back_to_back=back_to_back,
                    )  # fmt: skip
                what = LayerMeasurement(i, layer.name, t, 0, 0.0, 0.0, opt_s, "own", rc)
                with _vocab_parallel_loss(model, t if y is not None else 1):
                    timed(model, inputs[sig], y, what)
                del model
                if t > 1:  # the DTensor variant of the even TP shard (none without a DTensor plan)
                    with _dtensor_shard(spec, i, t, attention, device, precision, rc, factory) as dt:
                        if dt is not None:
                            timed(dt, inputs[sig], y, replace(what, impl="dtensor"))
    return rows


def _variants(layer: Layer, recomputes: Sequence[str]) -> tuple[str, ...]:
    """The recompute variants to time for ``layer``: always none; selective and full only where they change
    the layer (a transformer block: its attention core, or the whole block checkpointed)."""
    extra = tuple(r for r in dict.fromkeys(recomputes) if r != "none")
    return ("none", *extra) if layer.kind in ("transformer", "moe") else ("none",)


@contextlib.contextmanager
def _vocab_parallel_loss(model: nn.Module, tp: int) -> Iterator[None]:
    """A head shard of ``tp > 1`` ranks computes the runtime's parallel cross-entropy over its local logits, its
    all-reduces on a fake group (they are costed by the communication model)."""
    if tp <= 1:
        yield
        return
    model.loss = lambda out, targets: vocab_parallel_cross_entropy(out, targets, 0, None)  # type: ignore[method-assign]
    with fake_process_group(tp, 0):
        yield


def _time_micro_batches(
    model: nn.Module,
    x: torch.Tensor,
    targets: torch.Tensor | None,
    micro_batches: Sequence[int],
    *,
    device: torch.device,
    precision: str,
    warmup: int,
    repeats: int,
    peer_batch: Any,
    back_to_back: int = 1,
) -> Iterator[tuple[int, tuple[float, float, float | None, float | None]]]:
    """(micro-batch, (fwd s, bwd s, host fwd s, host bwd s)) of ``model.layers[0]`` at each size, co-runners
    set to the same size (host figures on CUDA only: :func:`time_layer`)."""
    for b in sorted(set(micro_batches)):
        if peer_batch is not None:
            peer_batch.value = b
        y = targets[:b] if targets is not None else None
        yield b, time_layer(
            model, x[:b], y, device=device, precision=precision, warmup=warmup, repeats=repeats,
            back_to_back=back_to_back,
        )  # fmt: skip


def count_steps(
    spec: ModelSpec,
    micro_batches: Sequence[int],
    tp_degrees: Sequence[int],
    layer_range: tuple[int, int] | None = None,
    passes: int = 3,
    recomputes: Sequence[str] = ("none",),
    factory: ModelFactory | None = None,
) -> int:
    """How many measurements :func:`profile_layers` will take over its ``passes`` (for progress bars)."""
    start, end = layer_range or (0, spec.n_layers)
    sigs = {layer_signature(layer): i for i, layer in enumerate(spec.layers[start:end], start)}
    n = 0
    for i in sigs.values():
        layer = spec.layers[i]
        degrees = {t for t in tp_degrees if t == 1 or runtime_splits(layer)}
        if any(t > 1 for t in degrees) and factory is None and _has_dtensor_plan(spec, i):
            degrees |= {-t for t in degrees if t > 1}  # the DTensor variant of each TP degree
        n += len(degrees) * len(set(micro_batches)) * len(_variants(layer, recomputes))
    return n * passes


def _has_dtensor_plan(spec: ModelSpec, index: int) -> bool:
    with torch.device("meta"):
        model = _build(spec, index, 1, "flash")
    return block_tp_plan(model.layers[0]) is not None  # type: ignore[index]

"""Iteration time, throughput, MFU and per-device memory of a Plan on given GPUs.

Composition (Crius §5.1: computation and communication are estimated apart and summed):

* **stage compute** — every layer's forward/backward on every device of the stage at that device's batch
  share (replica ``r`` runs ``batch_shares[r] / micro_batches`` samples per micro-batch) and shard ratio. TP
  ranks synchronize at every layer, so a replica's time is Σ over layers of the slowest rank; the slowest
  replica bounds the stage (DP replicas meet at the gradient sync).
* **TP all-reduces** — inside the stage's critical path, never overlapped: a transformer block (heads-sharded)
  does 2 in forward and 2 in backward of its output (b·s·h elements), a column- or vocab-sharded layer 1 + 1;
  full recompute repeats the forward ones.
* **pipeline** — :func:`tessera.perf.pipeline.pipeline_time` over the stage times, with the boundary
  send/recv of one micro-batch's activation and the DP gradient all-reduce of each stage over its slowest link.
* **memory** — the memory module's fast formula per (stage, replica); feasible when every device's peak plus
  its CUDA context fits the GPU with the memory module's headroom.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from tessera.hardware import ClusterSpec, GPUSpec, Node, get_gpu
from tessera.memory.formula import evaluate
from tessera.memory.layout import DeviceView
from tessera.memory.overhead import DEFAULT_HEADROOM_FRACTION, overhead_for
from tessera.models.spec import Layer, ModelSpec, TPShard, TransformerArch
from tessera.perf.comm import (
    Collective,
    Link,
    comm_time,
    inter_node_link,
    intra_node_link,
)
from tessera.perf.compute import (
    HALF_PRECISIONS,
    layer_signature,
    layer_time,
    shard_fraction,
)
from tessera.perf.costmodel import CostModel
from tessera.perf.pipeline import pipeline_time
from tessera.plan import Device, Plan, Stage

DEFAULT_INTER_NODE_BPS = 12.5e9  # ClusterSpec's default: 100 Gb/s InfiniBand / RoCE
# TP all-reduces per pass, per layer sharding (Megatron: attention + MLP each end in one all-reduce).
_TP_ALLREDUCES = {TPShard.HEADS: 2, TPShard.COLUMNS: 1, TPShard.VOCAB: 1, TPShard.REPLICATED: 0}


@dataclass(frozen=True)
class Estimate:
    """What one iteration of a plan costs. iteration_time_s = compute_s + comm_s + bubble_s."""

    iteration_time_s: float
    compute_s: float  # bottleneck stage's compute, all micro-batches
    comm_s: float  # exposed communication: TP inside the bottleneck stage, first-pass p2p, DP sync
    bubble_s: float  # pipeline fill and drain
    samples_per_s: float
    tokens_per_s_per_gpu: float
    mfu: float  # model FLOPs (3 × forward, no recompute) / (time × Σ device peaks)
    peak_bytes_per_device: tuple[float, ...]  # tensor peak per global rank (the memory module's figure)
    feasible: bool  # every device fits its GPU
    stage_times_s: tuple[float, ...] = ()  # per micro-batch fwd + bwd (incl. TP comm) of each stage
    device_bytes_per_device: tuple[float, ...] = ()  # peak × fragmentation + CUDA context, per rank

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Topology:
    """Resolves a plan's devices to GPU specs and the links between them."""

    def __init__(self, cluster_or_gpu_map: ClusterSpec | Mapping[str, GPUSpec] | None = None) -> None:
        self.gpu_map: Mapping[str, GPUSpec] = {}
        self.nodes: dict[str, Node] = {}
        self.inter_Bps = DEFAULT_INTER_NODE_BPS
        if isinstance(cluster_or_gpu_map, ClusterSpec):
            self.nodes = {n.name: n for n in cluster_or_gpu_map.nodes()}
            self.inter_Bps = cluster_or_gpu_map.inter_node_bandwidth_Bps
        elif cluster_or_gpu_map is not None:
            self.gpu_map = cluster_or_gpu_map

    def gpu(self, d: Device) -> GPUSpec:
        return self.gpu_map.get(d.gpu_type) or get_gpu(d.gpu_type)

    def link(self, devices: tuple[Device, ...]) -> Link:
        """The slowest link a group of devices communicates over."""
        if len({d.node for d in devices}) > 1:
            bws = [self.nodes[d.node].inter_bandwidth_Bps for d in devices if d.node in self.nodes]
            return inter_node_link(min(bws, default=self.inter_Bps))
        links = []
        for d in devices:
            node = self.nodes.get(d.node)
            gpu = self.gpu(d)
            if node is not None:
                links.append(intra_node_link(gpu, node.intra_link, node.intra_bandwidth_Bps))
            else:
                links.append(intra_node_link(gpu))
        return min(links, key=lambda link: link.bandwidth_Bps)


def _attention_core_fraction(spec: ModelSpec, layer: Layer) -> float:
    """Share of a block's forward FLOPs in QKᵀ and softmax·V (4·s²·h per sample): what selective recompute
    repeats."""
    if not isinstance(spec.arch, TransformerArch) or layer.kind not in ("transformer", "moe"):
        return 0.0
    if layer.fwd_flops_per_sample <= 0:
        return 0.0
    core = 4.0 * spec.seq_len**2 * spec.arch.n_heads * spec.arch.head_dim
    return min(1.0, core / layer.fwd_flops_per_sample)


def _comm(cost: CostModel, collective: Collective, nbytes: float, n: int, link: Link) -> float:
    return comm_time(collective, nbytes, n, link, cost.comm_table) * cost.comm_factor(link.kind)


def _stage_time(
    plan: Plan, spec: ModelSpec, stage: Stage, topo: Topology, cost: CostModel
) -> tuple[float, float, float]:
    """(fwd_s, bwd_s, tp_comm_s) per micro-batch of the stage's slowest replica."""
    precision = plan.precision.value
    recompute = plan.recompute.value
    layers = spec.layers[stage.layer_start : stage.layer_end]
    ratios = stage.ratios()
    elem = 0.5 if precision in HALF_PRECISIONS else 1.0  # spec byte figures are fp32
    cache: dict[tuple, tuple[float, float]] = {}
    best = (0.0, 0.0, 0.0)
    seen: set[tuple] = set()
    for r, share in enumerate(stage.shares(plan.global_batch)):
        mb = share / plan.micro_batches
        devices = stage.replica(r)
        what = (mb, tuple(d.gpu_type for d in devices))
        if what in seen and stage.tp_degree == 1:
            continue  # an identical replica costs the same (TP replicas may differ in their links)
        seen.add(what)
        fwd = bwd = 0.0
        for layer in layers:
            lf = lb = 0.0
            for k, d in enumerate(devices):
                gpu = topo.gpu(d)
                ratio = ratios[k] if stage.tp_degree > 1 else None
                key = (layer_signature(layer), gpu.name, ratio, mb)
                if key not in cache:
                    t = layer_time(
                        layer, gpu, tp=stage.tp_degree, micro_batch=mb, precision=precision,
                        recompute=recompute, ratio=ratio, profile=cost.profile, curves=cost.curves,
                        attention_core_fraction=_attention_core_fraction(spec, layer),
                    )  # fmt: skip
                    f = cost.compute_factor(gpu.name)
                    cache[key] = (t.fwd_s * f, t.bwd_s * f)
                lf, lb = max(lf, cache[key][0]), max(lb, cache[key][1])
            fwd += lf
            bwd += lb
        tp_comm = 0.0
        if stage.tp_degree > 1:
            link = topo.link(devices)
            passes = 3 if recompute == "full" else 2  # fwd, bwd (+ the recomputed fwd)
            for layer in layers:
                n_ar = _TP_ALLREDUCES[layer.tp_shard]
                if not n_ar:
                    continue
                nbytes = layer.out_bytes_per_sample * mb * elem
                tp_comm += n_ar * passes * _comm(cost, Collective.ALL_REDUCE, nbytes, stage.tp_degree, link)
        if fwd + bwd + tp_comm > sum(best):
            best = (fwd, bwd, tp_comm)
    return best


def _dp_sync_s(plan: Plan, spec: ModelSpec, stage: Stage, topo: Topology, cost: CostModel) -> float:
    """Gradient all-reduce of the stage (fp32 gradients) across its replicas, per TP rank; the slowest rank."""
    if stage.dp_degree <= 1:
        return 0.0
    layers = spec.layers[stage.layer_start : stage.layer_end]
    ratios = stage.ratios()
    worst = 0.0
    for k in range(stage.tp_degree):
        ratio = ratios[k] if stage.tp_degree > 1 else None
        grad_bytes = 4.0 * sum(
            layer.params * shard_fraction(layer, stage.tp_degree, ratio) for layer in layers
        )
        group = tuple(stage.devices[r * stage.tp_degree + k] for r in range(stage.dp_degree))
        t = _comm(cost, Collective.ALL_REDUCE, grad_bytes, stage.dp_degree, topo.link(group))
        if plan.zero == 3:
            t *= 1.5  # reduce-scatter of grads + all-gather of params in forward and again in backward
        worst = max(worst, t)
    return worst


def boundary_s(
    plan: Plan, spec: ModelSpec, a: Stage, b: Stage, topo: Topology, cost: CostModel | None = None
) -> float:
    """Send/recv of one micro-batch's activation from stage ``a`` to ``b``; replicas send their parts in
    parallel (the bridge between different degrees splits the micro-batch over the fewer replicas)."""
    elem = 0.5 if plan.precision.value in HALF_PRECISIONS else 1.0
    samples = plan.global_batch / plan.micro_batches / min(a.dp_degree, b.dp_degree)
    nbytes = spec.layers[a.layer_end - 1].out_bytes_per_sample * samples * elem
    return _comm(cost or CostModel(), Collective.SEND_RECV, nbytes, 2, topo.link(a.devices + b.devices))


# The memory formula costs ~2 ms per call whatever the batch, so Cells and tuners that ask for the same
# (stage, replica) view again and again read it from here: per spec object, view → tensor peak bytes.
# Keyed by id(spec) (specs carry a dict, so they do not hash); an entry goes when its spec is collected.
_PEAKS: dict[int, dict[DeviceView, float]] = {}


def _memo(spec: ModelSpec) -> dict[DeviceView, float]:
    key = id(spec)
    if key not in _PEAKS:
        _PEAKS[key] = {}
        weakref.finalize(spec, _PEAKS.pop, key, None)
    return _PEAKS[key]


def stage_views(plan: Plan, index: int) -> list[DeviceView]:
    """The memory module's view of every replica of stage ``index`` (uneven TP as the even shard)."""
    st = plan.stages[index]
    B = plan.micro_batches
    in_flight = B if plan.schedule.value == "gpipe" else min(plan.n_stages - index, B)
    return [
        DeviceView(
            layer_start=st.layer_start,
            layer_end=st.layer_end,
            micro_batch=max(1, math.ceil(share / B)),
            in_flight=in_flight,
            dp=st.dp_degree,
            tp=st.tp_degree,
            precision=plan.precision.value,
            recompute=plan.recompute.value,
            attention=plan.attention.value,
            optimizer=plan.optimizer.value,
            zero=plan.zero,
            micro_batches=B,
        )
        for share in st.shares(plan.global_batch)
    ]


def peak_bytes(spec: ModelSpec, views: list[DeviceView]) -> list[float]:
    """Tensor peak of each view (memoized per spec; the uncached ones evaluated in one formula call)."""
    memo = _memo(spec)
    todo = list(dict.fromkeys(v for v in views if v not in memo))
    if todo:
        try:
            got = [float(x) for x in evaluate(spec, todo).peak_bytes]
        except (ValueError, KeyError, NotImplementedError):
            got = [_rough_peak(spec, v) for v in todo]
        memo.update(zip(todo, got, strict=True))
    return [memo[v] for v in views]


def _device_bytes(gpu: GPUSpec, peak: float) -> float:
    try:
        return overhead_for(gpu.name).device_bytes(peak)
    except Exception:  # a GPU only the caller's map knows: use its own context figure
        return peak + gpu.context_bytes


def _rough_peak(spec: ModelSpec, v: DeviceView) -> float:
    """Fallback for models the formula does not cover: 16 B/param (AdamW, fp32) + in-flight activations."""
    layers = spec.layers[v.layer_start : v.layer_end]
    params = sum(layer.params * shard_fraction(layer, v.tp) for layer in layers)
    acts = sum(layer.act_bytes_per_sample * shard_fraction(layer, v.tp) for layer in layers)
    return 16.0 * params + acts * v.micro_batch * v.in_flight


@dataclass(frozen=True)
class StageCost:
    """One stage's share of an estimate: per-micro-batch times of its slowest replica, its gradient sync, and
    the memory of each of its devices. Stages are costed independently, so Cells can mix them."""

    fwd_s: float
    bwd_s: float
    tp_comm_s: float  # per micro-batch, on the critical path, split evenly between fwd and bwd
    dp_sync_s: float
    peak_bytes: tuple[float, ...]  # per device of the stage, in stage order
    device_bytes: tuple[float, ...]
    feasible: bool

    @property
    def time_s(self) -> float:
        return self.fwd_s + self.bwd_s + self.tp_comm_s


def stage_cost(
    plan: Plan,
    spec: ModelSpec,
    index: int,
    topo: Topology,
    cost: CostModel | None = None,
    *,
    headroom_fraction: float = DEFAULT_HEADROOM_FRACTION,
) -> StageCost:
    """Time and memory of stage ``index`` of ``plan`` (see the module docstring)."""
    cost = cost or CostModel()
    st = plan.stages[index]
    fwd, bwd, tp_comm = _stage_time(plan, spec, st, topo, cost)
    peaks = peak_bytes(spec, stage_views(plan, index))
    dev_peak, dev_bytes = [], []
    feasible = True
    for r, peak in enumerate(peaks):
        for d in st.replica(r):
            gpu = topo.gpu(d)
            b = _device_bytes(gpu, peak)
            dev_peak.append(peak)
            dev_bytes.append(b)
            feasible &= b <= gpu.memory_bytes * (1 - headroom_fraction)
    return StageCost(
        fwd_s=fwd,
        bwd_s=bwd,
        tp_comm_s=tp_comm,
        dp_sync_s=_dp_sync_s(plan, spec, st, topo, cost),
        peak_bytes=tuple(dev_peak),
        device_bytes=tuple(dev_bytes),
        feasible=feasible,
    )


def compose(
    plan: Plan,
    spec: ModelSpec,
    costs: list[StageCost],
    p2p_s: list[float],
    topo: Topology,
    *,
    overlap_dp: bool = False,
) -> Estimate:
    """The plan's estimate from its stages' costs and its boundaries' send/recv times."""
    fwd = [c.fwd_s + c.tp_comm_s / 2 for c in costs]
    bwd = [c.bwd_s + c.tp_comm_s / 2 for c in costs]
    pt = pipeline_time(
        fwd,
        bwd,
        plan.micro_batches,
        schedule=plan.schedule.value,
        p2p_s=p2p_s,
        dp_sync_s=[c.dp_sync_s for c in costs],
        overlap_dp=overlap_dp,
    )
    tp_in_steady = plan.micro_batches * costs[pt.bottleneck_stage].tp_comm_s
    it = pt.iteration_time_s
    peak_flops = sum(topo.gpu(d).peak_flops(plan.precision.value) for d in plan.devices)
    model_flops = 3.0 * spec.fwd_flops_per_sample * plan.global_batch
    by_rank: dict[int, tuple[float, float]] = {}
    for st, c in zip(plan.stages, costs, strict=True):
        for d, p, b in zip(st.devices, c.peak_bytes, c.device_bytes, strict=True):
            by_rank[d.rank] = (p, b)
    ranks = sorted(by_rank)
    return Estimate(
        iteration_time_s=it,
        compute_s=pt.steady_s - tp_in_steady,
        comm_s=tp_in_steady + pt.p2p_s + pt.dp_sync_s,
        bubble_s=pt.bubble_s,
        samples_per_s=plan.global_batch / it,
        tokens_per_s_per_gpu=plan.global_batch * plan.seq_len / it / plan.world_size,
        mfu=model_flops / (it * peak_flops),
        peak_bytes_per_device=tuple(by_rank[k][0] for k in ranks),
        feasible=all(c.feasible for c in costs),
        stage_times_s=tuple(f + b for f, b in zip(fwd, bwd, strict=True)),
        device_bytes_per_device=tuple(by_rank[k][1] for k in ranks),
    )


def check_plan_fits_spec(plan: Plan, spec: ModelSpec) -> None:
    if spec.seq_len != 1 and plan.seq_len != spec.seq_len:
        raise ValueError(f"seq_len: plan has {plan.seq_len}, the model spec was built for {spec.seq_len}")
    if plan.stages[-1].layer_end != spec.n_layers:
        raise ValueError(f"stages cover {plan.stages[-1].layer_end} layers, {spec.name} has {spec.n_layers}")


def estimate_plan(
    plan: Plan,
    spec: ModelSpec,
    cluster_or_gpu_map: ClusterSpec | Mapping[str, GPUSpec] | Topology | None = None,
    *,
    cost: CostModel | None = None,
    overlap_dp: bool = False,
    headroom_fraction: float = DEFAULT_HEADROOM_FRACTION,
) -> Estimate:
    """Estimate one iteration of ``plan`` for model ``spec``.

    ``cluster_or_gpu_map``: a ClusterSpec (devices' ``node`` names its nodes, for links), or a map from the
    plan's ``gpu_type`` names to GPUSpecs, or None (catalog lookup, all devices on one node). ``cost``: the
    measured profiles, communication tables and calibration to prefer over datasheets (none by default).
    """
    check_plan_fits_spec(plan, spec)
    cost = cost or CostModel()
    topo = cluster_or_gpu_map if isinstance(cluster_or_gpu_map, Topology) else Topology(cluster_or_gpu_map)
    costs = [
        stage_cost(plan, spec, i, topo, cost, headroom_fraction=headroom_fraction)
        for i in range(plan.n_stages)
    ]
    p2p = [
        boundary_s(plan, spec, a, b, topo, cost) for a, b in zip(plan.stages, plan.stages[1:], strict=False)
    ]
    return compose(plan, spec, costs, p2p, topo, overlap_dp=overlap_dp)

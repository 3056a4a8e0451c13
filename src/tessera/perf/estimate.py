"""Iteration time, throughput, MFU and per-device memory of a Plan on given GPUs.

Composition (Crius §5.1: computation and communication are estimated apart and summed), following what
Tessera's runtime does in one step (``runtime.engine``: pipeline schedule → gradient sync → optimizer step):

* **stage compute** — every layer's forward/backward on every device of the stage at that device's batch
  share (replica ``r`` runs ``batch_shares[r] / micro_batches`` samples per micro-batch; with fewer samples
  than micro-batches, one sample in ``batch_shares[r]`` of them, as the runtime skips the rest) and shard
  ratio. TP ranks synchronize at every layer, so a replica's time is Σ over layers of the slowest rank; the
  slowest replica bounds the stage (DP replicas meet at the gradient sync). Embeddings and heads split along the
  vocabulary; layers the runtime keeps replicated in a TP group (MoE, conv:
  :func:`~tessera.perf.compute.runtime_splits`) cost their full time on every TP rank. Profiles are looked
  up under the device's profile key: the GPU type, or on the CPU stand-in the thread count the runtime gives
  each process sharing the host (``cpu@1t`` for 2 ranks on 2 cores).
* **TP all-reduces** — inside the stage's critical path, never overlapped. The runtime's column-parallel
  Linears (q, k, v and fc_in | gate, up) each all-reduce their input gradient in backward, the row-parallel
  ones (proj, fc_out | down) their output in forward: 2 forward and 4 (GELU) or 5 (SwiGLU) backward all-reduces
  of a block's b·s·h activation (in the autocast dtype); full recompute repeats a block's forward ones. A
  vocab-parallel embedding all-reduces its output, a head its input gradient plus the parallel
  cross-entropy's three fp32 values per token (:func:`tp_allreduces`).
* **pipeline** — :func:`tessera.perf.pipeline.pipeline_time` over the stage times, with the boundary send/recv
  of one micro-batch's activation.
* **after the pipeline** — each stage's gradient sync (the runtime's bucketed all-reduce of fp32 gradients,
  25 MiB buckets issued back to back; ZeRO adds the owners' broadcast; a tied embedding split across stages
  adds its all-reduce over both stages), of which only what the last micro-batch's backward does not hide
  counts where the runtime overlaps the buckets with it (every precision but bf16-master:
  :func:`tessera.plan.overlaps_grad_sync`; the last bucket and an embedding table always stay exposed,
  :func:`_dp_sync_s`), and then its optimizer step (a
  memory-bound pass over the stage's parameters, or its profiled time; under ZeRO each replica steps only
  the parameters it owns). Stages do this concurrently, so the slowest stage's sync + step is added.
* **communication times** — the measured table (``tessera profile comm``) where it covers the message: below
  its smallest size the smallest size's time (latency-bound), above its largest one that point's bandwidth;
  alpha-beta where nothing was measured.
* **memory** — the memory module's fast formula per (stage, replica); feasible when every device's peak plus
  its CUDA context fits the GPU with the memory module's headroom.
* **training extras** (``extras``: :class:`~tessera.perf.extras.StepExtras`, none by default) — gradient
  clipping between the optimizer's gradient sync and its step (:func:`clip_s`), and validation's forward-only
  passes amortized per step (:func:`forward_pass_s`); weight decay, the learning-rate schedule and dropout
  cost nothing apart (the extras module says why).
"""

from __future__ import annotations

import itertools
import math
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from tessera.hardware import ClusterSpec, GPUSpec, Node, get_gpu
from tessera.memory.formula import evaluate
from tessera.memory.layout import DeviceView, pipeline_in_flight
from tessera.memory.overhead import DEFAULT_HEADROOM_FRACTION, overhead_for
from tessera.models.spec import Layer, ModelSpec, TPShard, TransformerArch, per_spec
from tessera.nn.dtensor_tp import uses_dtensor
from tessera.perf.comm import (
    Arrival,
    Collective,
    Link,
    alpha_beta,
    hierarchical_link,
    inter_node_link,
    interpolate,
    intra_node_link,
)
from tessera.perf.compute import (
    EAGER,
    HALF_PRECISIONS,
    BlockShape,
    Kernels,
    block_shape,
    curve_for,
    layer_signature,
    layer_time,
    optimizer_time,
    profile_device,
    reruns_forward,
    runtime_splits,
    shard_fraction,
)
from tessera.perf.costmodel import CostModel
from tessera.perf.extras import StepExtras
from tessera.perf.pipeline import pipeline_time
from tessera.plan import (
    Device,
    Plan,
    Precision,
    Stage,
    fsdp_stage,
    overlaps_grad_sync,
    torch_schedule_refusal,
)

DEFAULT_INTER_NODE_BPS = 12.5e9  # ClusterSpec's default: 100 Gb/s InfiniBand / RoCE
GRAD_BUCKET_BYTES = (
    25 * 2**20
)  # the runtime's gradient all-reduce bucket (runtime.data_parallel.BUCKET_BYTES)


@dataclass(frozen=True)
class Estimate:
    """What one iteration of a plan costs.

    iteration_time_s = compute_s + comm_s + bubble_s + clip_s + validation_s: the training extras are kept
    apart so the plan's own breakdown is the same with or without them. ``step_time_s`` leaves validation out:
    it is what the runtime's per-step time (``iter_s``) measures, validation running between steps."""

    iteration_time_s: float
    compute_s: float  # bottleneck stage's compute, all micro-batches, + the optimizer step (optimizer_s)
    comm_s: float  # exposed communication: TP inside the bottleneck stage, first-pass p2p, DP sync
    bubble_s: float  # pipeline fill and drain
    samples_per_s: float
    tokens_per_s_per_gpu: float
    mfu: float  # model FLOPs (3 × forward, no recompute) / (time × Σ device peaks)
    peak_bytes_per_device: tuple[float, ...]  # tensor peak per global rank (the memory module's figure)
    feasible: bool  # every device fits its GPU
    stage_times_s: tuple[float, ...] = ()  # per micro-batch fwd + bwd (incl. TP comm) of each stage
    device_bytes_per_device: tuple[float, ...] = ()  # peak × fragmentation + CUDA context, per rank
    optimizer_s: float = 0.0  # the optimizer step on the critical path (part of compute_s)
    clip_s: float = 0.0  # gradient clipping by global norm: norm pass + 1-element all-reduce + scaling pass
    validation_s: float = 0.0  # validation's forward-only passes, amortized per training step

    @property
    def step_time_s(self) -> float:
        """One training step as the runtime times it: the iteration without the amortized validation."""
        return self.iteration_time_s - self.validation_s

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
        self._gpus: dict[str, GPUSpec] = {}  # resolved names: Cells ask thousands of times per job
        self._links: dict[tuple[tuple[str | None, str], ...], Link] = {}
        # by the identity of device tuples (held, so their ids stay theirs): a stage's devices are one tuple
        # shared by all its options, and its boundary and DP groups are priced again for every option
        self._by_ids: dict[tuple, tuple[tuple, Any]] = {}

    def gpu(self, d: Device) -> GPUSpec:
        hit = self._gpus.get(d.gpu_type)
        if hit is None:
            hit = self._gpus[d.gpu_type] = self.gpu_map.get(d.gpu_type) or get_gpu(d.gpu_type)
        return hit

    def link(self, devices: tuple[Device, ...]) -> Link:
        """The slowest link a group of devices communicates over (memoized by the devices' nodes, types and
        ranks per node)."""
        key = tuple(sorted(Counter((d.node, d.gpu_type) for d in devices).items(), key=str))
        hit = self._links.get(key)
        if hit is None:
            hit = self._links[key] = self._link(devices)
        return hit

    def link_of(self, *groups: tuple[Device, ...]) -> Link:
        """:meth:`link` of the groups' devices together, kept by the groups' identities."""
        key = ("link", *map(id, groups))
        hit = self._by_ids.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], groups, strict=True)):
            return hit[1]
        link = self.link(groups[0] if len(groups) == 1 else tuple(itertools.chain(*groups)))
        self._by_ids[key] = (groups, link)
        return link

    def dp_group(
        self, devices: tuple[Device, ...], k: int, tp: int
    ) -> tuple[tuple[Device, ...], Link, float]:
        """TP rank ``k``'s DP group of a stage's ``devices`` (every ``tp``-th from ``k``), its link and its
        members' slowest memory bandwidth, kept by the devices' identity."""
        key = ("dp", id(devices), k, tp)
        hit = self._by_ids.get(key)
        if hit is not None and hit[0] is devices:
            return hit[1]
        group = devices[k::tp]
        out = (group, self.link(group), min(self.gpu(d).memory_bandwidth_Bps for d in group))
        self._by_ids[key] = (devices, out)
        return out

    def _link(self, devices: tuple[Device, ...]) -> Link:
        per_node = Counter(d.node for d in devices)
        if len(per_node) > 1:
            return self._network_link(devices, per_node)
        return self._intra_link(devices)

    def _network_link(self, devices: tuple[Device, ...], per_node: Counter) -> Link:
        """A group across nodes: two levels (:func:`~tessera.perf.comm.hierarchical_link`), the intra-node
        link under the network. The group gets the share of each node's network that its ranks hold of the
        node's GPUs (NCCL's rails: the other GPUs' groups run the same collective at the same time, one
        DP group per TP rank); the slowest node bounds it. Nodes the topology does not know get
        ``inter_Bps`` whole."""
        shares = []
        for name, count in per_node.items():
            node = self.nodes.get(name)
            if node is None:
                shares.append(self.inter_Bps)
            else:
                shares.append(node.inter_bandwidth_Bps * min(1.0, count / max(1, node.n_gpus)))
        network = inter_node_link(min(shares))
        ranks = set(per_node.values())
        if len(ranks) != 1:  # uneven spread: a flat ring on the network
            return network
        by_node: dict[str | None, list[Device]] = {}
        for d in devices:
            by_node.setdefault(d.node, []).append(d)
        intra = min(
            (self._intra_link(tuple(group)) for group in by_node.values()),
            key=lambda link: link.bandwidth_Bps,
        )
        return hierarchical_link(network, intra, ranks.pop())

    def _intra_link(self, devices: tuple[Device, ...]) -> Link:
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


def _comm(
    cost: CostModel,
    collective: Collective,
    nbytes: float,
    n: int,
    link: Link,
    arrival: Arrival = Arrival.TOGETHER,
) -> float:
    """Seconds of one collective: the measured table, clamped to its measured range, else alpha-beta.

    Below the smallest measured message the time is the smallest one's (latency-bound: gloo and NCCL pay a
    fixed cost per call), above the largest it grows at that point's bandwidth (bandwidth-bound); the table's
    own interpolation covers everything between."""
    if nbytes <= 0 or (n <= 1 and collective != Collective.SEND_RECV):
        return 0.0
    pts = cost.comm_table.measured(collective, link.kind, n, arrival)
    if not pts:
        t = alpha_beta(collective, nbytes, n, link)
    elif nbytes < pts[0][0]:
        t = pts[0][1]
    elif nbytes > pts[-1][0]:
        t = pts[-1][1] * nbytes / pts[-1][0]
    else:
        t = interpolate(pts, nbytes)
    return t * cost.comm_factor(link.kind)


UNEVEN_GAP = 0.1  # a TP rank computing this share more than every other arrives last at each collective


def _arrival(totals: list[float]) -> Arrival:
    """How the slowest rank of a TP group reaches its collectives, from each rank's compute per micro-batch:
    last (the others wait for it) when it computes clearly more than the next slowest, else together."""
    if len(totals) < 2:
        return Arrival.TOGETHER
    top, second = sorted(totals)[-2:][::-1]
    return Arrival.LAST if top - second >= UNEVEN_GAP * top else Arrival.TOGETHER


def _host_cpus() -> int:
    return os.cpu_count() or 1


def device_key(plan: Plan, d: Device, topo: Topology) -> str:
    """The profile key of device ``d`` in ``plan``: its GPU type; on the CPU stand-in, the threads its process
    gets when all of the plan's processes on its node share the host's cores (as the runtime sets them), or
    the fixed thread count of a CPU device type that has one (the embedded service's pinned-core devices)."""
    gpu = topo.gpu(d)
    if gpu.arch != "cpu":
        return gpu.name
    if gpu.threads:
        return profile_device(gpu.name, gpu.threads)
    sharing = sum(1 for x in plan.devices if x.node == d.node)
    return profile_device(gpu.name, max(1, _host_cpus() // max(1, sharing)))


@dataclass(frozen=True)
class TPAllReduces:
    """The all-reduces one micro-batch costs in a layer split over a TP group (per sample of it).

    ``fwd``/``bwd`` move an activation of ``act_bytes_per_sample`` (fp32 figure, scaled to the autocast dtype);
    full recompute repeats the forward ones. ``loss`` moves one fp32 value per row of logits
    (``loss_bytes_per_sample``): the vocab-parallel cross-entropy's max, target logit and sum of exponentials.
    """

    fwd: int = 0
    bwd: int = 0
    act_bytes_per_sample: float = 0.0
    loss: int = 0
    loss_bytes_per_sample: float = 0.0

    def __bool__(self) -> bool:
        return bool(self.fwd or self.bwd or self.loss)


def tp_allreduces(spec: ModelSpec, index: int) -> TPAllReduces:
    """What the runtime all-reduces when it splits layer ``index`` of ``spec`` over a TP group.

    Blocks (own layers and DTensor alike): the output of every row-parallel Linear in forward (attention proj,
    fc_out | down) and the input gradient of every column-parallel Linear in backward (q, k, v each, fc_in |
    gate and up). A vocab-parallel embedding: its output (each rank looked up only its rows). An output head:
    its input gradient, and the parallel cross-entropy's three all-reduces per row of logits. Layers it keeps
    replicated communicate nothing."""
    layer = spec.layers[index]
    if not runtime_splits(layer):
        return TPAllReduces()
    if layer.kind == "embedding":
        return TPAllReduces(fwd=1, act_bytes_per_sample=layer.out_bytes_per_sample)
    if layer.kind in ("head", "classifier"):
        into = spec.layers[index - 1].out_bytes_per_sample if index else 0.0
        per_row = layer.out_bytes_per_sample / max(1, layer.tp_units)
        return TPAllReduces(bwd=1, act_bytes_per_sample=into, loss=3, loss_bytes_per_sample=per_row)
    swiglu = isinstance(spec.arch, TransformerArch) and spec.arch.mlp == "swiglu"
    return TPAllReduces(fwd=2, bwd=3 + (2 if swiglu else 1), act_bytes_per_sample=layer.out_bytes_per_sample)


def _elem_scale(precision: str) -> float:
    """Activation bytes relative to the spec's fp32 figures: autocast and bf16 parameters halve them."""
    return 0.5 if precision in HALF_PRECISIONS else 1.0


def _runs_at(tp_degree: int, splits: bool) -> int:
    """The TP degree a layer really runs at: the stage's where the runtime splits it, else 1 (replicated)."""
    return tp_degree if splits else 1


def _layer_rows(spec: ModelSpec) -> tuple[tuple, ...]:
    """Per layer of the spec: (layer, signature, runtime splits it, attention core fraction, TP all-reduces),
    computed once per spec object (stage costs walk the same layers thousands of times)."""
    return per_spec(
        _LAYER_ROWS,
        spec,
        lambda: tuple(
            (
                layer,
                layer_signature(layer),
                runtime_splits(layer),
                _attention_core_fraction(spec, layer),
                tp_allreduces(spec, index),
            )
            for index, layer in enumerate(spec.layers)
        ),
    )


_LAYER_ROWS: dict[int, tuple[Any, tuple[tuple, ...]]] = {}


def _layer_runs(spec: ModelSpec, start: int, end: int) -> tuple[tuple, ...]:
    """Layers ``start``..``end`` of the spec as runs of identical rows — (layer, signature, splits, attention
    core fraction, TP all-reduces, count) — kept per spec and range: a stage's blocks cost the same, so a
    stage is priced per run, not per layer."""
    memo: dict[tuple[int, int], tuple[tuple, ...]] = per_spec(_LAYER_RUNS, spec, dict)
    hit = memo.get((start, end))
    if hit is None:
        same = itertools.groupby(_layer_rows(spec)[start:end], key=lambda row: (row[0].params, *row[1:]))
        hit = memo[(start, end)] = tuple((*first, 1 + len(rest)) for _, (first, *rest) in same)
    return hit


_LAYER_RUNS: dict[int, tuple[Any, dict[tuple[int, int], tuple[tuple, ...]]]] = {}


def _active_micro_batches(plan: Plan, share: int) -> int:
    """Micro-batches a replica of ``share`` samples computes: the runtime deals each micro-batch's samples over
    the replicas and a replica skips those holding none of its samples, so with fewer samples than
    micro-batches it computes ``share`` of them, one sample each."""
    return min(plan.micro_batches, share)


@dataclass(frozen=True)
class _Replicas:
    """What a stage's replicas are on one topology at one global batch — built once per stage object (a
    Cell's spaces under every memory rung and micro-batch count share their stage objects, and each prices
    them again at its own micro-batch count): batch shares, shard ratios, and the distinct replicas in
    first-occurrence order — (share, per device its GPU and profile key, TP link or None) — so a stage of
    64 alike replicas is priced once, not walked 64 times per price. Only GPU devices (a CPU stand-in's
    profile key depends on the plan)."""

    shares: tuple[int, ...]
    ratios: tuple[float, ...]
    even_tp: bool
    groups: tuple[tuple[int, tuple[tuple[GPUSpec, str], ...], Link | None], ...]
    max_share: int


def _replicas(plan: Plan, st: Stage, topo: Topology, memo: dict[tuple, Any] | None) -> _Replicas | None:
    """The stage's :class:`_Replicas`, kept in ``memo`` (by the stage object, which the entry holds so its id
    stays its own, the topology and the global batch); None without a memo or on a CPU device (its profile
    key depends on the plan)."""
    if memo is None:
        return None
    key = ("replicas", id(st), id(topo), plan.global_batch)
    hit = memo.get(key)
    if hit is not None and hit[0] is st and hit[1] is topo:
        return hit[2]
    info: _Replicas | None = None
    if all(topo.gpu(d).arch != "cpu" for d in st.devices):
        shares = st.shares(plan.global_batch)
        ratios = st.ratios()
        even = all(math.isclose(x, ratios[0], rel_tol=1e-9) for x in ratios)  # Stage.even_tp
        groups = tuple(_replica_groups(plan, st, topo))
        info = _Replicas(shares, ratios, even, groups, max(shares))
    memo[key] = (st, topo, info)
    return info


def _replica_rows(plan: Plan, stage: Stage, topo: Topology, info: _Replicas | None) -> Any:
    """(share, per device (GPU, profile key), TP link or None) of each replica the stage time must price:
    the distinct ones of ``info``, else :func:`_replica_groups` afresh."""
    return info.groups if info is not None else _replica_groups(plan, stage, topo)


def _replica_groups(plan: Plan, stage: Stage, topo: Topology) -> Any:
    """(share, per device (GPU, profile key), TP link or None) of each distinct replica, in first-occurrence
    order: one alike to an earlier one (its share, GPU types and TP link) costs the same and is skipped, so
    a stage of 64 alike replicas is priced once."""
    tp_degree = stage.tp_degree
    seen: set[tuple] = set()
    devs: dict[tuple[str, str], tuple[GPUSpec, str]] = {}  # (type, node) -> (GPU, profile key)
    links: dict[tuple, Link] = {}
    for r, share in enumerate(stage.shares(plan.global_batch)):
        devices = stage.replica(r)
        link = None
        if tp_degree > 1:
            where = tuple((d.node, d.gpu_type) for d in devices)  # what the topology's link depends on
            link = links.get(where)
            if link is None:
                link = links[where] = topo.link(devices)
        what = (share, tuple(d.gpu_type for d in devices), link)  # the share fixes (samples, weight)
        if what in seen:
            continue
        seen.add(what)
        per_dev = []
        for d in devices:
            hit = devs.get((d.gpu_type, d.node))
            if hit is None:
                hit = devs[(d.gpu_type, d.node)] = (topo.gpu(d), device_key(plan, d, topo))
            per_dev.append(hit)
        yield share, tuple(per_dev), link


def _stage_time(
    plan: Plan,
    spec: ModelSpec,
    stage: Stage,
    topo: Topology,
    cost: CostModel,
    memo: dict[tuple, Any] | None = None,
    kernels: Kernels = EAGER,
) -> tuple[float, float, float]:
    """(fwd_s, bwd_s, tp_comm_s) per micro-batch of the stage's slowest replica.

    ``memo``: layer times kept across calls (one spec, topology and cost model per memo), and the stage's
    replicas (:func:`_replicas`); ``kernels``: which kernels run the blocks' memory-bound work (Tessera's
    eager runtime unless a caller prices another)."""
    precision = plan.precision.value
    recompute = plan.recompute.value
    runs = _layer_runs(spec, stage.layer_start, stage.layer_end)
    info = _replicas(plan, stage, topo, memo)
    ratios = info.ratios if info is not None else stage.ratios()
    tp_degree = stage.tp_degree
    even = info.even_tp if info is not None else stage.even_tp
    impl = "dtensor" if uses_dtensor(tp_degree, even) else "own"
    # AMP over fp32 parameters keeps the residual stream fp32; FSDP2 gathers bf16 parameters, so its stream is
    # half like bf16-master's (tessera.perf.compute: the AMP note above NORM_BYTES)
    amp = plan.precision in (Precision.FP16, Precision.BF16) and not _uses_fsdp(plan, stage)
    shape = _block_shape(spec, plan.attention.value, kernels, 4.0 if amp else 0.0)
    elem = _elem_scale(precision)
    cache: dict[tuple, tuple[float, float, float, float]] = {} if memo is None else memo
    best = (0.0, 0.0, 0.0)
    # replicas that compute alike, and TP groups on alike links that arrive alike: kept in ``memo`` by what
    # they depend on (stages of other Cells hold the same layers on the same GPU types at the same samples)
    computed: dict[tuple, tuple[float, float, list[float], Arrival]] = {} if memo is None else memo
    comms: dict[tuple, float] = {} if memo is None else memo
    where = ("stage-c", stage.layer_start, stage.layer_end, ratios, tp_degree, precision, recompute, impl,
             plan.attention.value, kernels, amp)  # fmt: skip
    B = plan.micro_batches
    for share, per_dev, link in _replica_rows(plan, stage, topo, info):
        # averaged over the B micro-batches: not B passes of a fractional sample
        active = min(B, share)  # _active_micro_batches
        mb, weight = share / active, active / B
        # the compute of a replica depends on its devices' GPUs and profile keys, its samples and weight
        ckey = (where, mb, weight, tuple((gpu.name, dkey) for gpu, dkey in per_dev))
        done = computed.get(ckey)
        if done is None:
            # ranks alike (GPU, profile key and, where the layer is split, shard ratio) price a layer once
            alike: dict[bool, dict[tuple, tuple[GPUSpec, list[int]]]] = {True: {}, False: {}}
            for k, (gpu, dkey) in enumerate(per_dev):
                alike[True].setdefault((gpu.name, dkey, ratios[k]), (gpu, []))[1].append(k)
                alike[False].setdefault((gpu.name, dkey, None), (gpu, []))[1].append(k)
            fwd = bwd = host_fwd = host_bwd = 0.0
            totals = [0.0] * len(per_dev)  # each rank's compute: who arrives last at the collectives
            # per (signature, TP degree) within this replica: the slowest rank's times and each group's sum
            # (a stage whose blocks alternate, dense and MoE, repeats them run after run)
            per_layer: dict[tuple, tuple[float, float, float, float, list[tuple[float, list[int]]]]] = {}
            for layer, sig, splits, acf, _, count in runs:
                tp = _runs_at(tp_degree, splits)
                got = per_layer.get((sig, tp))
                if got is None:
                    lf = lb = hf = hb = 0.0
                    sums = []
                    for (name, dkey, ratio), (gpu, ranks) in alike[tp > 1].items():
                        key = ("t", sig, name, dkey, tp, ratio, mb, precision, recompute, impl, kernels, amp)
                        hit = cache.get(key)
                        if hit is None:
                            t = layer_time(
                                layer, gpu, tp=tp, micro_batch=mb, precision=precision,
                                recompute=recompute, ratio=ratio, profile=cost.profile, curves=cost.curves,
                                attention_core_fraction=acf, device_type=dkey, impl=impl,
                                shape=shape if layer.kind == "transformer" else None,
                            )  # fmt: skip
                            f = cost.compute_factor(name)
                            hit = cache[key] = (t.fwd_s * f, t.bwd_s * f, t.host_fwd_s, t.host_bwd_s)
                        lf, lb = max(lf, hit[0]), max(lb, hit[1])
                        hf, hb = max(hf, hit[2]), max(hb, hit[3])
                        sums.append((hit[0] + hit[1], ranks))
                    got = per_layer[(sig, tp)] = (lf, lb, hf, hb, sums)
                lf, lb, hf, hb, sums = got
                for both_per_layer, ranks in sums:
                    both = both_per_layer * count
                    for k in ranks:
                        totals[k] += both
                fwd += lf * count * weight
                bwd += lb * count * weight
                host_fwd += hf * count * weight
                host_bwd += hb * count * weight
            # a GPU runs a pass at the slower of its kernels and the host launching them (profiled launch
            # times; 0 where none were measured): a small model's step is launch-bound
            done = computed[ckey] = (max(fwd, host_fwd), max(bwd, host_bwd), totals, _arrival(totals))
        fwd, bwd, totals, arrival = done
        tp_comm = 0.0
        if tp_degree > 1:
            assert link is not None
            tkey = ("stage-tp", where, link, arrival, mb, weight)
            tp_comm = comms.get(tkey, -1.0)
            if tp_comm < 0.0:
                counts: dict[float, int] = {}  # all-reduces by size: most layers move the same activation
                for layer, _, _, _, ar, count in runs:
                    if not ar:
                        continue
                    passes = ar.bwd + ar.fwd * (2 if reruns_forward(layer, recompute) else 1)
                    if passes:
                        nbytes = ar.act_bytes_per_sample * mb * elem
                        counts[nbytes] = counts.get(nbytes, 0) + passes * count
                    if ar.loss:
                        nbytes = ar.loss_bytes_per_sample * mb
                        counts[nbytes] = counts.get(nbytes, 0) + ar.loss * count
                tp_comm = comms[tkey] = weight * sum(
                    c * _comm(cost, Collective.ALL_REDUCE, nbytes, tp_degree, link, arrival)
                    for nbytes, c in counts.items()
                )
        if fwd + bwd + tp_comm > sum(best):
            best = (fwd, bwd, tp_comm)
    return best


_BLOCK_SHAPES: dict[int, tuple[Any, dict[tuple, BlockShape | None]]] = {}


def _block_shape(
    spec: ModelSpec, attention: str, kernels: Kernels = EAGER, stream_bytes: float = 0.0
) -> BlockShape | None:
    """The dense block shape of a transformer spec (GPT/LLaMA/BERT families), for the measured kernel curves;
    None for other families (their layers keep the whole-layer roofline)."""
    memo: dict[tuple, BlockShape | None] = per_spec(_BLOCK_SHAPES, spec, dict)  # asked once per stage price
    key = (attention, kernels, stream_bytes)
    if key in memo:
        return memo[key]
    arch = spec.arch
    if not isinstance(arch, TransformerArch) or spec.seq_len < 1:
        out = None
    else:
        out = block_shape(arch, spec.seq_len, attention, kernels, stream_bytes)
    memo[key] = out
    return out


def _uses_fsdp(plan: Plan, stage: Stage) -> bool:
    """Whether the runtime runs this stage's ZeRO-2/3 through FSDP2 (:func:`tessera.plan.fsdp_stage`, not on
    PyTorch's pipeline schedule, where ZeRO-2/3 take Tessera's reduce-to-owner ZeRO-2)."""
    return fsdp_stage(plan, stage) and torch_schedule_refusal(plan) is not None


def _tied_split(plan: Plan, spec: ModelSpec) -> tuple[int, int] | None:
    """(first, last) stage when a tied embedding/head pair lives on two stages (each holds a copy and the
    runtime sums its gradient over both), else None."""
    arch = spec.arch
    if not isinstance(arch, TransformerArch) or not arch.tied_embeddings or plan.n_stages < 2:
        return None
    if spec.layers[0].kind != "embedding" or spec.layers[-1].kind != "head":
        return None
    return 0, plan.n_stages - 1


def _tied_params(spec: ModelSpec) -> int:
    arch = spec.arch
    return arch.vocab * arch.hidden if isinstance(arch, TransformerArch) else 0


def _bucketed_s(
    cost: CostModel,
    collective: Collective,
    nbytes: float,
    group: tuple[Device, ...],
    topo: Topology,
    known: tuple[Link, float] | None = None,
) -> float:
    """The runtime's gradient buckets, issued back to back on one group (they run one after another), plus
    the copies around them: each bucket is flattened from the gradients and copied back after the collective
    (read + write twice, at the slowest member's memory bandwidth: on CPU, where the loopback all-reduce runs
    at memory speed too, the copies are a sizeable share of the sync)."""
    link, n = (known[0] if known else topo.link(group)), len(group)  # known: (link, slowest bandwidth)
    full, rest = divmod(nbytes, GRAD_BUCKET_BYTES)
    t = full * _comm(cost, collective, GRAD_BUCKET_BYTES, n, link) if full else 0.0
    t += _comm(cost, collective, rest, n, link) if rest else 0.0
    bandwidth = known[1] if known else min(topo.gpu(d).memory_bandwidth_Bps for d in group)
    return t + 4.0 * nbytes / bandwidth


def _param_sums(spec: ModelSpec) -> tuple[list[float], list[float]]:
    """Running totals over the spec's layers of all parameters and of those a TP group splits, so any
    stage's per-rank parameter count is two subtractions (Cells ask for thousands of stages)."""

    def make() -> tuple[list[float], list[float]]:
        every, split = [0.0], [0.0]
        for layer, _, splits, _, _ in _layer_rows(spec):
            every.append(every[-1] + layer.params)
            sharded = splits and layer.tp_shard != TPShard.REPLICATED
            split.append(split[-1] + (layer.params if sharded else 0.0))
        return every, split

    return per_spec(_PARAM_SUMS, spec, make)


_PARAM_SUMS: dict[int, tuple[Any, tuple[list[float], list[float]]]] = {}


def _rank_params(spec: ModelSpec, stage: Stage, k: int) -> float:
    """Parameters TP rank ``k`` of the stage holds: its shard of each split layer, all of a replicated one."""
    every, split = _param_sums(spec)
    a, b = stage.layer_start, stage.layer_end
    total = every[b] - every[a]
    if stage.tp_degree <= 1:
        return total
    return total - (split[b] - split[a]) * (1.0 - stage.ratios()[k])


def _accumulate_s(
    plan: Plan, spec: ModelSpec, stage: Stage, topo: Topology, memo: dict[tuple, Any] | None = None
) -> float:
    """Gradient accumulation per micro-batch, averaged over the iteration: every micro-batch after the first
    that a replica computes adds its gradients into the parameters' (read both, write one, in the parameters'
    dtype) — a pass the layer profiles, timed from cleared gradients, leave out; over the micro-batches each
    replica computes (:func:`_active_micro_batches`). The slowest TP rank. ``memo``: the stage's replicas
    (:func:`_replicas`) and its per-pass time, kept across the micro-batch counts a Cell's spaces try."""
    m = plan.micro_batches
    info = _replicas(plan, stage, topo, memo)
    if info is not None:
        passes = min(m, info.max_share) - 1  # the most micro-batches a replica computes, less the first
    else:
        passes = max(_active_micro_batches(plan, share) for share in stage.shares(plan.global_batch)) - 1
    if passes <= 0:
        return 0.0
    elem = 2.0 if plan.precision == Precision.BF16_MASTER else 4.0
    owned = stage.dp_degree if _uses_fsdp(plan, stage) else 1  # FSDP keeps only its gradient shard
    key = ("accumulate", id(stage), id(topo), elem, owned)
    hit = memo.get(key) if info is not None and memo is not None else None
    if hit is not None and hit[0] is stage and hit[1] is topo:
        slowest = hit[2]
    else:
        nbytes = [3.0 * elem * _rank_params(spec, stage, k) / owned for k in range(stage.tp_degree)]
        tp = stage.tp_degree
        alike = {(j % tp, d.gpu_type): d for j, d in enumerate(stage.devices)}  # replicas repeat ranks' pairs
        slowest = max(nbytes[k] / topo.gpu(d).memory_bandwidth_Bps for (k, _), d in alike.items())
        if info is not None and memo is not None:
            memo[key] = (stage, topo, slowest)
    return slowest * passes / m


@dataclass(frozen=True)
class DPSync:
    """A stage's data-parallel gradient sync (its slowest TP rank) and the part of it the runtime can run
    while the replica's last micro-batch's backward still computes (:func:`_dp_sync_s` says which part)."""

    total_s: float  # the whole sync: gradient buckets, ZeRO's broadcast, a split tied embedding's all-reduce
    hideable_s: float = 0.0  # buckets that may be reduced under the last backward (0: none overlap)
    window_fraction: float = 0.0  # share of that backward they can run under (the first waits for its grads)


def dp_exposed_s(sync: DPSync, bwd_s: float) -> float:
    """What of ``sync`` stays on the critical path after a last backward of ``bwd_s`` seconds: everything not
    hideable, plus what of the hideable buckets that backward's ``window_fraction`` does not hide
    (:func:`overlap_exposed_s`). Between the unhideable part and ``total_s``."""
    left = overlap_exposed_s(sync.hideable_s, sync.window_fraction * bwd_s)
    return sync.total_s - sync.hideable_s + left


def overlap_exposed_s(comm_s: float, window_s: float) -> float:
    """What of ``comm_s`` of communication, run beside ``window_s`` of compute, is added to the time.

    Hidden communication is not free: the compute beside it runs ``OVERLAP_COMPUTE_SLOWDOWN`` (σ) slower
    (Lee et al. 2025). Compute ``W`` beside communication ``C`` progresses at 1/(1+σ) while ``C`` runs, so the
    pair takes ``W + C·σ/(1+σ)`` when ``C ≤ W·(1+σ)``, else ``C`` (the communication bound); what exceeds
    ``W`` is exposed. The one overlap rule for FSDP's prefetched collectives and DP's gradient buckets."""
    slow = OVERLAP_COMPUTE_SLOWDOWN
    if comm_s <= window_s * (1.0 + slow):
        return comm_s * slow / (1.0 + slow)
    return comm_s - window_s


def _embedding_bytes(spec: ModelSpec, stage: Stage, k: int) -> float:
    """fp32 gradient bytes TP rank ``k`` holds of the embedding table when the stage starts with it (one
    tensor, so a bucket of its own, and the last gradient the backward produces), else 0."""
    if stage.layer_start != 0 or spec.layers[0].kind != "embedding":
        return 0.0
    every, split = _param_sums(spec)
    total, sharded = every[1] - every[0], split[1] - split[0]
    ratio = stage.ratios()[k] if stage.tp_degree > 1 else 1.0
    return 4.0 * (total - sharded * (1.0 - ratio))


def _tied_rank_bytes(spec: ModelSpec, stage: Stage, k: int, layer_index: int) -> float:
    """fp32 bytes TP rank ``k`` holds of the tied embedding/head table through layer ``layer_index`` (the
    embedding, whose spec counts the table, or the head, whose spec leaves its copy out): its vocab rows when
    the layer is split over the TP group, else the whole table."""
    layer, _, splits, _, _ = _layer_rows(spec)[layer_index]
    sharded = stage.tp_degree > 1 and splits and layer.tp_shard != TPShard.REPLICATED
    return 4.0 * _tied_params(spec) * (stage.ratios()[k] if sharded else 1.0)


def _dp_sync_s(plan: Plan, spec: ModelSpec, stage: Stage, topo: Topology, cost: CostModel) -> DPSync:
    """Gradient sync of the stage, per TP rank; the slowest rank, with what of it may overlap the backward.

    fp32 gradients (masters under bf16-master) in 25 MiB buckets: all-reduced (ZeRO-0/1), or reduced to their
    owner (ZeRO-2, ~ a reduce-scatter's volume); ZeRO-1/2 then broadcast the owners' updated parameters (~ an
    all-gather) after the optimizer step. FSDP2 (ZeRO-2/3 where :func:`tessera.plan.fsdp_stage` says so)
    communicates per micro-batch inside the stage instead (:func:`_fsdp_s`). A tied embedding split over the
    first and last stage adds one all-reduce of it over both stages' ranks, after backward, in place of its
    share of the buckets: the runtime keeps a tied table out of ``GradSync`` (``engine``: ``sync_tied`` sums
    it over the tie group, then the buckets sync the rest), so the first stage's buckets carry the embedding
    layer less the table. ZeRO's broadcast does carry it (the owners' step updates every master, the tied
    ones too), on the first stage in the embedding and on the last in the head's copy, which the spec's
    head leaves out.

    **Overlap** (where :func:`tessera.plan.overlaps_grad_sync` says the runtime does it): buckets are packed in
    backward order and each is reduced as soon as its gradients from the replica's LAST micro-batch are all
    there, strictly in bucket order (``runtime.data_parallel.GradSync``, as DDP's reducer). Gradients appear
    at a steady rate through that backward, so with ``K`` buckets the first is ready after ``1/K`` of it and
    the reductions can run under the remaining ``(K − 1)/K`` (``window_fraction``). What cannot hide however
    fast the network is: the last bucket (up to 25 MiB: the stage's first parameters, whose gradients end the
    backward), an embedding table at the stage's start (one tensor, a bucket of its own, produced last), ZeRO's
    broadcast (after the step) and the tied all-reduce. Under ZeRO-1/2 buckets are grouped by owner, owner 0's
    first (``GradSync``): only owner 0's buckets (~1/dp of the bytes, the largest tensor, the embedding, among
    them) are launched during backward; every other owner's wait behind owner 0's last, which ends the
    backward, so they are exposed too. :func:`dp_exposed_s` prices the rest beside the backward. Modelled so
    because full overlap, ``max(0, sync − backward)``, would hide the tail DDP always leaves exposed."""
    index = plan.stages.index(stage)
    tied_sync = 0.0
    tied = _tied_split(plan, spec)
    if tied is not None and index in tied:
        group = plan.stages[tied[0]].devices + plan.stages[tied[1]].devices
        tied_sync = _comm(cost, Collective.ALL_REDUCE, 4.0 * _tied_params(spec), len(group), topo.link(group))
    if stage.dp_degree <= 1 or _uses_fsdp(plan, stage):
        return DPSync(tied_sync)
    overlap = overlaps_grad_sync(plan.precision)
    owners = stage.dp_degree if plan.zero >= 1 else 1
    worst = DPSync(tied_sync)
    for k in range(stage.tp_degree):
        held = 4.0 * _rank_params(spec, stage, k)
        # the tied table: synced by sync_tied, not in the buckets (first stage); broadcast under ZeRO (both)
        tied_first = _tied_rank_bytes(spec, stage, k, 0) if tied is not None and index == tied[0] else 0.0
        tied_head = _tied_rank_bytes(spec, stage, k, -1) if tied is not None and index == tied[1] else 0.0
        grad_bytes = held - tied_first
        # (every tp-th device from k: the rank's replicas, dp of them)
        group, link, bandwidth = topo.dp_group(stage.devices, k, stage.tp_degree)
        reduce = Collective.REDUCE_SCATTER if plan.zero >= 2 else Collective.ALL_REDUCE
        reduce_s = _bucketed_s(cost, reduce, grad_bytes, group, topo, (link, bandwidth))
        t = reduce_s
        if plan.zero >= 1:  # the owners' updated fp32 parameters, broadcast back
            bcast = held + tied_head
            t += _bucketed_s(cost, Collective.ALL_GATHER, bcast, group, topo, (link, bandwidth))
        if t + tied_sync <= worst.total_s:
            continue
        hideable, window = 0.0, 0.0
        if overlap and grad_bytes > 0:
            # owner 0's buckets (every bucket without ZeRO) but its embedding table and its last bucket
            emb = _embedding_bytes(spec, stage, k) - tied_first
            first_owner = max(0.0, grad_bytes / owners - emb)
            buckets = math.ceil(first_owner / GRAD_BUCKET_BYTES)
            hideable = reduce_s * max(0.0, first_owner - GRAD_BUCKET_BYTES) / grad_bytes
            window = (buckets - 1) / buckets if buckets else 0.0
        worst = DPSync(t + tied_sync, hideable, window)
    return worst


# FSDP2's MixedPrecisionPolicy as the runtime asks for it, by plan precision: (bytes per parameter all-gathered,
# bytes per gradient element reduce-scattered). fp32 plans gather and reduce fp32; bf16 plans gather bf16
# parameters (param_dtype=bf16) and reduce-scatter gradients in fp32 (reduce_dtype=fp32, as torchtitan
# configures FSDP2 by default).
FSDP_GATHER_BYTES = {"fp32": 4.0, "bf16": 2.0}
FSDP_REDUCE_BYTES = {"fp32": 4.0, "bf16": 4.0}
# Compute that runs beside a collective is slower than alone: NCCL's kernels hold SMs (a GEMM sized to one wave
# of all SMs spills into a second) and share HBM bandwidth and power. Lee et al. 2025, "Characterizing
# Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning: Performance and Power
# Implications" (arXiv 2507.03114), abstract: over GPT and LLaMA training on A100, H100, MI250 and MI210,
# "overlapping computation and communication can result in an average computational slowdown of 18.9%, with a
# maximum of 40.0%" against the same compute with no communication beside it. Their mean is used as is.
OVERLAP_COMPUTE_SLOWDOWN = 0.189


@dataclass(frozen=True)
class FSDPComm:
    """One micro-batch's FSDP2 traffic of a stage and what of it compute does not hide."""

    gather_fwd_s: float  # all-gathers of the forward (every unit)
    gather_bwd_s: float  # all-gathers again for the backward (reshard after forward)
    reduce_s: float  # gradient reduce-scatters
    exposed_s: float  # what stays on the critical path after prefetch overlap


def fsdp_comm(
    plan: Plan,
    spec: ModelSpec,
    stage: Stage,
    topo: Topology,
    cost: CostModel,
    fwd_s: float = 0.0,
    bwd_s: float = 0.0,
) -> FSDPComm:
    """FSDP2 traffic of a ZeRO-2/3 stage per micro-batch (``fully_shard`` per layer, forward and backward
    prefetch; ZeRO-3 reshards after forward, ZeRO-2 keeps the parameters gathered until backward ends),
    priced with its overlap.

    Each layer is one FSDP unit: its parameters are all-gathered (``FSDP_GATHER_BYTES``) before its forward
    and, under ZeRO-3 only, again before its backward, and its gradients reduce-scattered after its backward
    (``FSDP_REDUCE_BYTES``). Prefetch issues unit ``i + 1``'s all-gather while unit ``i`` computes, and unit
    ``i``'s reduce-scatter runs under unit ``i − 1``'s backward, so per direction only the first unit's
    collective and whatever communication exceeds the other units' compute is exposed:
    ``exposed = c_first + max(0, C − c_first − compute · (U − 1) / U)`` with ``C`` the direction's
    communication, ``U`` the units and ``compute`` the stage's forward (or backward) time per micro-batch. In
    backward the all-gathers and reduce-scatters share the network, so their sum is what compute must hide.

    Hidden communication slows the compute beside it (:func:`overlap_exposed_s`). A tied embedding split
    over the first and last stage is left out of FSDP by the runtime (``ignored_params``) and summed over
    both stages by hand (:func:`_dp_sync_s` prices that), so the first stage's embedding unit goes without it.
    """
    if not _uses_fsdp(plan, stage):
        return FSDPComm(0.0, 0.0, 0.0, 0.0)
    params = [layer.params for layer in spec.layers[stage.layer_start : stage.layer_end]]
    tied = _tied_split(plan, spec)
    if tied is not None and plan.stages.index(stage) == tied[0]:
        params[0] -= _tied_params(spec)  # the tied table stays out of FSDP (``ignored_params``)
    layers = [p for p in params if p > 0]
    if not layers:
        return FSDPComm(0.0, 0.0, 0.0, 0.0)
    precision = plan.precision.value
    gather_b, reduce_b = FSDP_GATHER_BYTES.get(precision, 4.0), FSDP_REDUCE_BYTES.get(precision, 4.0)
    link = topo.link_of(stage.devices)
    n = stage.dp_degree
    memo: dict[tuple[str, float], float] = {}

    def coll(c: Collective, nbytes: float) -> float:
        key = (c.value, nbytes)
        if key not in memo:
            memo[key] = _comm(cost, c, nbytes, n, link)
        return memo[key]

    gathers = [coll(Collective.ALL_GATHER, gather_b * p) for p in layers]
    reduces = [coll(Collective.REDUCE_SCATTER, reduce_b * p) for p in layers]
    units = len(layers)
    hide = (units - 1) / units

    def exposed(first: float, total: float, compute: float) -> float:
        return first + overlap_exposed_s(max(0.0, total - first), compute * hide)

    ag = sum(gathers)
    fwd_exposed = exposed(gathers[0], ag, fwd_s)
    # backward walks the units in reverse: the last unit's gather comes first, the first unit's reduce last
    ag_bwd, first_bwd = (ag, gathers[-1]) if plan.zero >= 3 else (0.0, 0.0)
    bwd_exposed = exposed(first_bwd + reduces[0], ag_bwd + sum(reduces), bwd_s)
    return FSDPComm(ag, ag_bwd, sum(reduces), fwd_exposed + bwd_exposed)


def _fsdp_s(
    plan: Plan,
    spec: ModelSpec,
    stage: Stage,
    topo: Topology,
    cost: CostModel,
    fwd_s: float = 0.0,
    bwd_s: float = 0.0,
) -> float:
    """Exposed FSDP2 communication per micro-batch of a ZeRO-2/3 stage (:func:`fsdp_comm`)."""
    return fsdp_comm(plan, spec, stage, topo, cost, fwd_s, bwd_s).exposed_s


def _optimizer_s(
    plan: Plan,
    spec: ModelSpec,
    stage: Stage,
    topo: Topology,
    cost: CostModel,
    memo: dict[tuple, Any] | None = None,
) -> float:
    """The optimizer step of the stage's slowest device over the parameters it updates.

    Per layer from the profile (or the memory-bound roofline), for the rank's shard of split layers. A tied
    head's profiled step includes its copy of the embedding (it was timed alone, as on a last stage); where the
    stage also holds the embedding the pair is one parameter, so that copy's share comes off. Under ZeRO each
    replica updates only the parameters it owns (~1/dp of them). ``memo``: per-layer optimizer times kept
    across calls (one spec, topology and cost model per memo)."""
    precision, opt = plan.precision.value, plan.optimizer.value
    runs = _layer_runs(spec, stage.layer_start, stage.layer_end)
    tp_degree = stage.tp_degree
    tied = _tied_params(spec)
    holds_embedding = stage.layer_start == 0
    split_tie = _tied_split(plan, spec) is not None
    tied_head = bool(tied) and isinstance(spec.arch, TransformerArch) and spec.arch.tied_embeddings
    ratios = stage.ratios()
    worst = 0.0
    done: set[tuple[str, int]] = set()
    seen: dict[tuple, tuple[float, str]] = {} if memo is None else memo  # blocks 0..L-1 share one signature
    for j, d in enumerate(stage.devices):
        k = j % tp_degree
        gpu = topo.gpu(d)
        dkey = device_key(plan, d, topo)
        if (dkey, k) in done:
            continue  # replicas of one device type update the same parameters
        done.add((dkey, k))
        total = 0.0
        for layer, lsig, splits, _, _, count in runs:
            tp = _runs_at(tp_degree, splits)
            ratio = ratios[k] if tp > 1 else None
            sig = ("o", lsig, gpu.name, dkey, tp, ratio, precision, opt)
            hit = seen.get(sig)
            if hit is None:
                hit = seen[sig] = optimizer_time(
                    layer, gpu, tp=tp, precision=precision, optimizer=opt, ratio=ratio,
                    profile=cost.profile, curves=cost.curves, device_type=dkey,
                )  # fmt: skip
            t, source = hit
            if layer.kind == "head" and tied_head:
                own = max(layer.params, 1)
                if source == "profile" and holds_embedding:
                    t *= layer.params / (own + tied)
                elif source == "roofline" and split_tie and not holds_embedding:
                    t *= (own + tied) / own
            total += t * count
        total *= cost.compute_factor(gpu.name)
        if plan.zero >= 1 and stage.dp_degree > 1:
            total /= stage.dp_degree
        worst = max(worst, total)
    return worst


def boundary_s(
    plan: Plan, spec: ModelSpec, a: Stage, b: Stage, topo: Topology, cost: CostModel | None = None
) -> float:
    """Send/recv of one micro-batch's activation from stage ``a`` to ``b``; replicas send their parts in
    parallel (the bridge between different degrees splits the micro-batch over the fewer replicas)."""
    elem = 0.5 if plan.precision.value in HALF_PRECISIONS else 1.0
    samples = plan.global_batch / plan.micro_batches / min(a.dp_degree, b.dp_degree)
    nbytes = spec.layers[a.layer_end - 1].out_bytes_per_sample * samples * elem
    return _comm(cost or CostModel(), Collective.SEND_RECV, nbytes, 2, topo.link_of(a.devices, b.devices))


# The memory formula costs ~2 ms per call whatever the batch, so Cells and tuners that ask for the same
# (stage, replica) view again and again read it from here: per spec object, view → tensor peak bytes.
_PEAKS: dict[int, tuple[Any, dict[DeviceView, float]]] = {}


def _memo(spec: ModelSpec) -> dict[DeviceView, float]:
    return per_spec(_PEAKS, spec, dict)


def stage_view(plan: Plan, index: int, micro_batch: int) -> DeviceView:
    """The memory module's view of one replica of stage ``index`` running ``micro_batch`` samples per
    micro-batch (uneven TP as the even shard; in flight as ``memory.layout.pipeline_in_flight`` counts them)."""
    return _view(plan.stages[index], index, micro_batch, plan_wide(plan))


def plan_wide(plan: Plan) -> tuple:
    """What a stage's memory view takes from its plan: (stages, micro-batches, global batch, schedule,
    precision, recompute, attention, optimizer, ZeRO stage, virtual stages)."""
    return (plan.n_stages, plan.micro_batches, plan.global_batch, plan.schedule.value, plan.precision.value,
            plan.recompute.value, plan.attention.value, plan.optimizer.value, plan.zero,
            plan.virtual_stages)  # fmt: skip


def _view(st: Stage, index: int, micro_batch: int, wide: tuple) -> DeviceView:
    n_stages, B, _, schedule, precision, recompute, attention, optimizer, zero, v = wide
    return DeviceView(
        layer_start=st.layer_start,
        layer_end=st.layer_end,
        micro_batch=micro_batch,
        in_flight=pipeline_in_flight(schedule, n_stages, index, B, v),
        dp=st.dp_degree,
        tp=st.tp_degree,
        precision=precision,
        recompute=recompute,
        attention=attention,
        optimizer=optimizer,
        zero=zero,
        micro_batches=B,
    )


def stage_views(plan: Plan, index: int) -> list[DeviceView]:
    """:func:`stage_view` of every replica of stage ``index``, at its batch share."""
    return option_views(plan.stages[index], index, plan_wide(plan))


def option_views(st: Stage, index: int, wide: tuple) -> list[DeviceView]:
    """:func:`stage_views` of stage ``st`` at position ``index`` of a plan whose plan-wide fields are
    ``wide`` (:func:`plan_wide`'s tuple) — for a planner that has the stage and the settings but no plan."""
    made: dict[int, DeviceView] = {}  # one view per distinct micro-batch size (replicas mostly share one)
    out = []
    for mb in _micro_sizes(st.shares(wide[2]), wide[1]):
        if mb not in made:
            made[mb] = _view(st, index, mb, wide)
        out.append(made[mb])
    return out


def _micro_sizes(shares: tuple[int, ...] | list[int], micro_batches: int) -> list[int]:
    """Each replica's micro-batch in samples: the largest of its batch share split into ``micro_batches``."""
    return [max(1, math.ceil(share / micro_batches)) for share in shares]


_PEAKS_BY_KEY: dict[int, tuple[Any, dict[tuple, float]]] = {}


def _stage_peaks(spec: ModelSpec, st: Stage, index: int, sizes: Any, wide: tuple) -> dict[int, float]:
    """Tensor peak per micro-batch size of a stage's views (:func:`peak_bytes`), read by a plain tuple that
    names the view (its layers, degrees, position and the plan-wide fields): cheaper to hash than the view,
    and no view is built where the peak is known."""
    memo: dict[tuple, float] = per_spec(_PEAKS_BY_KEY, spec, dict)
    out: dict[int, float] = {}
    missing = []
    for mb in sizes:
        k = (st.layer_start, st.layer_end, st.dp_degree, st.tp_degree, index, mb, wide)
        hit = memo.get(k)
        if hit is None:
            missing.append((mb, k))
        else:
            out[mb] = hit
    if missing:
        got = peak_bytes(spec, [_view(st, index, mb, wide) for mb, _ in missing])
        for (mb, k), peak in zip(missing, got, strict=True):
            memo[k] = out[mb] = peak
    return out


def distinct_option_views(st: Stage, index: int, wide: tuple) -> list[DeviceView]:
    """:func:`option_views` without repeats, in first-occurrence order (what pricing them needs: one view
    per distinct micro-batch size)."""
    sizes = dict.fromkeys(_micro_sizes(st.shares(wide[2]), wide[1]))
    return [_view(st, index, mb, wide) for mb in sizes]


def peak_bytes(spec: ModelSpec, views: list[DeviceView]) -> list[float]:
    """Tensor peak of each view (memoized per spec; the uncached ones evaluated in one formula call)."""
    memo = _memo(spec)
    hits = [memo.get(v) for v in views]
    if None not in hits:
        return hits  # type: ignore[return-value]
    todo = list(dict.fromkeys(v for v, h in zip(views, hits, strict=True) if h is None))
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
    the memory of each of its devices. Stages are costed independently, so Cells can mix them.

    The gradient sync is kept whole (``dp_sync_s``) with the part of it the runtime overlaps with the last
    micro-batch's backward (``dp_hideable_s``, ``dp_window_fraction``: :class:`DPSync`); what stays exposed
    (:attr:`dp_exposed_s`) follows from the stage's own backward, so any assembly of stage costs prices it
    alike."""

    fwd_s: float
    bwd_s: float
    tp_comm_s: float  # per micro-batch, on the critical path, split evenly between fwd and bwd
    dp_sync_s: float  # the whole gradient sync, as if it ran after backward
    peak_bytes: tuple[float, ...]  # per device of the stage, in stage order
    device_bytes: tuple[float, ...]
    feasible: bool
    optimizer_s: float = 0.0  # one optimizer step of the stage's slowest device, after the DP sync
    dp_hideable_s: float = 0.0  # of dp_sync_s: the buckets that may run under the last backward
    dp_window_fraction: float = 0.0  # of that backward: the share they can run under

    @property
    def time_s(self) -> float:
        """Per micro-batch: forward + backward + TP all-reduces."""
        return self.fwd_s + self.bwd_s + self.tp_comm_s

    @property
    def dp_exposed_s(self) -> float:
        """The gradient sync left on the critical path once the last micro-batch's backward (with its half
        of the TP communication, as :func:`compose` splits it) has hidden what it can (:func:`dp_exposed_s`)."""
        sync = DPSync(self.dp_sync_s, self.dp_hideable_s, self.dp_window_fraction)
        return dp_exposed_s(sync, self.bwd_s + self.tp_comm_s / 2)

    @property
    def tail_s(self) -> float:
        """Once per iteration, after the stage's last backward: exposed gradient sync + optimizer step."""
        return self.dp_exposed_s + self.optimizer_s


@dataclass(frozen=True)
class StageMemory:
    """The memory half of a :class:`StageCost`: what a planner can ask without pricing any time (whether a
    Cell can fit at all)."""

    peak_bytes: tuple[float, ...]  # per device of the stage, in stage order
    device_bytes: tuple[float, ...]
    feasible: bool


def stage_memory(
    plan: Plan,
    spec: ModelSpec,
    index: int,
    topo: Topology,
    *,
    headroom_fraction: float = DEFAULT_HEADROOM_FRACTION,
    memo: dict[tuple, Any] | None = None,
) -> StageMemory:
    """Tensor peak and device memory of each device of stage ``index`` of ``plan``, and whether all fit."""
    st = plan.stages[index]
    info = _replicas(plan, st, topo, memo)
    if info is not None:  # one view per distinct micro-batch size, looked up once (views hash field by field)
        wide = plan_wide(plan)
        sizes = _micro_sizes(info.shares, plan.micro_batches)
        by_size = _stage_peaks(spec, st, index, dict.fromkeys(sizes), wide)
        peaks = [by_size[mb] for mb in sizes]
    else:
        peaks = peak_bytes(spec, stage_views(plan, index))
    dev_peak, dev_bytes = [], []
    feasible = True
    fits: dict[tuple[str, float], tuple[float, bool]] = {}  # replicas mostly share one GPU type and peak
    for r, peak in enumerate(peaks):
        for d in st.replica(r):
            hit = fits.get((d.gpu_type, peak))
            if hit is None:
                gpu = topo.gpu(d)
                b = _device_bytes(gpu, peak)
                hit = fits[(d.gpu_type, peak)] = (b, b <= gpu.memory_bytes * (1 - headroom_fraction))
            dev_peak.append(peak)
            dev_bytes.append(hit[0])
            feasible &= hit[1]
    return StageMemory(tuple(dev_peak), tuple(dev_bytes), feasible)


def stage_cost(
    plan: Plan,
    spec: ModelSpec,
    index: int,
    topo: Topology,
    cost: CostModel | None = None,
    *,
    headroom_fraction: float = DEFAULT_HEADROOM_FRACTION,
    memo: dict[tuple, Any] | None = None,
    shared: tuple | None = None,
    kernels: Kernels = EAGER,
) -> StageCost:
    """Time and memory of stage ``index`` of ``plan`` (see the module docstring).

    ``memo``: a dict that keeps per-layer compute and optimizer times across calls that share one spec,
    topology and cost model (a Cell's stage options ask for the same layers on the same devices); the
    figures are the same as without it.

    ``shared`` (with ``memo``): a key naming this stage — its layers, devices and (dp, tp) option, and the
    plan's devices elsewhere — among plans that differ only in their plan-wide settings (a Cell's spaces under
    each memory rung and micro-batch count). The stage's parts are then kept in ``memo`` by what each depends
    on, so plans that share it price it once: its compute, accumulation and TP time by micro-batches and
    recompute (not by ZeRO-0/1, which leave them alone), its gradient sync by ZeRO stage (and under ZeRO-2/3
    by micro-batch count, which decides whether FSDP2 runs it), its optimizer step by whether ZeRO shards it."""
    cost = cost or CostModel()
    st = plan.stages[index]
    if shared is not None and memo is not None:
        base = (shared, plan.global_batch, plan.precision, plan.attention, plan.optimizer, plan.schedule)
        zero = plan.zero
        kt = ("stage-t", base, plan.micro_batches, plan.recompute, zero if zero >= 2 else 0, kernels)
        times = memo.get(kt)
        if times is None:
            times = memo[kt] = _stage_times(plan, spec, st, topo, cost, memo, kernels)
        # (under ZeRO-2/3 whether FSDP2 runs the sync depends on the micro-batch count: torch's schedule)
        ky = ("stage-y", base, zero, plan.micro_batches if zero >= 2 else 0)
        sync = memo.get(ky)
        if sync is None:
            sync = memo[ky] = _dp_sync_s(plan, spec, st, topo, cost)
        ko = ("stage-o", base, zero >= 1 and st.dp_degree > 1)
        opt = memo.get(ko)
        if opt is None:
            opt = memo[ko] = _optimizer_s(plan, spec, st, topo, cost, memo)
    else:
        times = _stage_times(plan, spec, st, topo, cost, memo, kernels)
        sync = _dp_sync_s(plan, spec, st, topo, cost)
        opt = _optimizer_s(plan, spec, st, topo, cost, memo)
    fwd, bwd, tp_comm = times
    mem = stage_memory(plan, spec, index, topo, headroom_fraction=headroom_fraction, memo=memo)
    return StageCost(
        fwd_s=fwd,
        bwd_s=bwd,
        tp_comm_s=tp_comm,
        dp_sync_s=sync.total_s,
        peak_bytes=mem.peak_bytes,
        device_bytes=mem.device_bytes,
        feasible=mem.feasible,
        optimizer_s=opt,
        dp_hideable_s=sync.hideable_s,
        dp_window_fraction=sync.window_fraction,
    )


def _stage_times(
    plan: Plan,
    spec: ModelSpec,
    st: Stage,
    topo: Topology,
    cost: CostModel,
    memo: dict[tuple, Any] | None,
    kernels: Kernels = EAGER,
) -> tuple[float, float, float]:
    """(fwd_s, bwd_s, tp_comm_s) of a stage per micro-batch: compute, gradient accumulation, TP and FSDP."""
    fwd, bwd, tp_comm = _stage_time(plan, spec, st, topo, cost, memo, kernels)
    bwd += _accumulate_s(plan, spec, st, topo, memo)
    tp_comm += _fsdp_s(plan, spec, st, topo, cost, fwd, bwd)
    return fwd, bwd, tp_comm


# The runtime's norm pass reads each counted fp32 gradient once and, per element, writes and reads an fp64 copy
# (``grad.double()``: 4 read + 8 written), squares it (``pow(2)``: 8 read + 8 written) and sums it (8 read).
CLIP_NORM_BYTES_PER_ELEM = 36.0
# The scaling pass (``grad.mul_(coef)``): each local fp32 gradient read and written once.
CLIP_SCALE_BYTES_PER_ELEM = 8.0
CLIP_NORM_ALLREDUCE_BYTES = 8.0  # the fp64 sum of squares, all-reduced over every rank


def _counted_params(spec: ModelSpec, stage: Stage, k: int) -> float:
    """Gradient elements TP rank ``k`` of a stage's first replica counts in the global norm: its shard of the
    split layers, and the layers a TP group replicates only on TP rank 0 (each element counted once)."""
    every, split = _param_sums(spec)
    a, b = stage.layer_start, stage.layer_end
    total, sharded = every[b] - every[a], split[b] - split[a]
    if stage.tp_degree <= 1:
        return total
    return sharded * stage.ratios()[k] + (total - sharded if k == 0 else 0.0)


def clip_s(plan: Plan, spec: ModelSpec, topo: Topology, cost: CostModel | None = None) -> float:
    """Gradient clipping by global norm (``runtime.engine.Trainer.clip_grads``), once per step.

    Every rank sums the squares of the gradients it counts (:func:`_counted_params`: a DP group's first replica
    counts them all, or under ZeRO / FSDP each replica its owned ~1/dp), the ranks all-reduce that one value
    over the whole world (it waits for the slowest rank's pass), then each rank scales its local gradients
    (all of them; FSDP's shard). Both passes are memory-bound, at the device's achievable memory bandwidth
    and calibration factor, as the optimizer step's roofline; stages' passes run concurrently, so the
    slowest rank's pass of each kind is on the critical path. Per-tensor kernel launches are not priced
    (a few microseconds each; they matter only for models of a few million parameters). A tied embedding
    split over two stages is counted on both (the runtime counts it once: a small overestimate)."""
    cost = cost or CostModel()
    parts = [clip_stage_s(plan, spec, st, topo, cost) for st in plan.stages]
    norm = max(n for n, _ in parts)
    scale = max(c for _, c in parts)
    return norm + clip_allreduce_s(plan, topo, cost) + scale


def clip_stage_s(
    plan: Plan, spec: ModelSpec, st: Stage, topo: Topology, cost: CostModel
) -> tuple[float, float]:
    """(norm_s, scale_s): the slowest rank of stage ``st`` in each of :func:`clip_s`'s two passes. A stage's
    figures depend on the stage and on plan-wide settings only (ZeRO, and whether the plan runs its ZeRO-2/3
    through FSDP2), so a planner prices each stage option once, in a plan carrying it, and assembles any
    combination (``planning.space``, as it does the stages' times)."""
    norm = scale = 0.0
    tp = st.tp_degree
    sharded = plan.zero >= 1 and st.dp_degree > 1
    fsdp = _uses_fsdp(plan, st)
    for j, d in enumerate(st.devices):
        k, replica = j % tp, j // tp
        gpu = topo.gpu(d)
        bw = gpu.memory_bandwidth_Bps * curve_for(gpu, cost.curves).memory_fraction
        f = cost.compute_factor(gpu.name)
        if sharded:
            counted = _counted_params(spec, st, k) / st.dp_degree
        else:
            counted = _counted_params(spec, st, k) if replica == 0 else 0.0
        local = _rank_params(spec, st, k) / (st.dp_degree if fsdp else 1)
        norm = max(norm, CLIP_NORM_BYTES_PER_ELEM * counted / bw * f)
        scale = max(scale, CLIP_SCALE_BYTES_PER_ELEM * local / bw * f)
    return norm, scale


def clip_allreduce_s(plan: Plan, topo: Topology, cost: CostModel) -> float:
    """The 1-element all-reduce of the squared norm over every rank of the plan (its world and links)."""
    return _comm(cost, Collective.ALL_REDUCE, CLIP_NORM_ALLREDUCE_BYTES, plan.world_size,
                 topo.link(plan.devices))  # fmt: skip


def forward_pass_s(plan: Plan, costs: list[StageCost], p2p_s: list[float]) -> float:
    """One forward-only pass of a global batch through the pipeline (``PipelineRunner.run(forward_only=True)``:
    every micro-batch's forward in micro-batch order, without autograd): the slowest stage's forward for each
    micro-batch, the others' once to fill, and each boundary's send once. A stage's forward is its compute
    plus half its TP (and FSDP) communication, as :func:`compose` splits it; interleaved chunks are priced as
    their stage's whole forward (forward-only passes have no 1F1B interleaving to shorten the fill)."""
    fwd = [c.fwd_s + c.tp_comm_s / 2 for c in costs]
    slowest = max(fwd)
    return plan.micro_batches * slowest + sum(fwd) - slowest + sum(p2p_s)


def extras_s(
    plan: Plan,
    spec: ModelSpec,
    costs: list[StageCost],
    p2p_s: list[float],
    topo: Topology,
    cost: CostModel | None,
    extras: StepExtras | None,
) -> tuple[float, float]:
    """(clip_s, validation_s) of a step: :func:`clip_s` when the job clips, and the validation batches'
    :func:`forward_pass_s` times the validations per step (:attr:`StepExtras.validations_per_step`)."""
    if not extras:
        return 0.0, 0.0
    clip = clip_s(plan, spec, topo, cost) if extras.grad_clip else 0.0
    per_step = extras.validations_per_step
    val = forward_pass_s(plan, costs, p2p_s) * extras.val_batches * per_step if per_step else 0.0
    return clip, val


def compose(
    plan: Plan,
    spec: ModelSpec,
    costs: list[StageCost],
    p2p_s: list[float],
    topo: Topology,
    *,
    extras: StepExtras | None = None,
    cost: CostModel | None = None,
) -> Estimate:
    """The plan's estimate from its stages' costs and its boundaries' send/recv times.

    A plan with ``virtual_stages`` > 1 is priced as the interleaved 1F1B schedule it runs, each stage by its
    own layer count (:func:`~tessera.perf.pipeline.pipeline_time`; the last device's hand-back to the first is
    priced as the mean boundary send: it moves the same hidden-state activation).

    iteration = pipeline (steady + bubble + first-pass p2p) + the slowest stage's tail (exposed gradient sync
    + optimizer step): stages sync and step concurrently on disjoint devices, after their last backward.
    The sync is what the runtime leaves exposed (:attr:`StageCost.dp_exposed_s`): the plan's precision says
    whether its buckets overlap the last backward (:func:`tessera.plan.overlaps_grad_sync`), the stage costs
    carry what of the sync can hide. ``extras`` (priced with ``cost``) add gradient clipping and amortized
    validation (:func:`extras_s`)."""
    fwd = [c.fwd_s + c.tp_comm_s / 2 for c in costs]
    bwd = [c.bwd_s + c.tp_comm_s / 2 for c in costs]
    pt = pipeline_time(
        fwd,
        bwd,
        plan.micro_batches,
        schedule=plan.schedule.value,
        p2p_s=p2p_s,
        virtual_stages=plan.virtual_stages,
    )
    syncs = [c.dp_exposed_s for c in costs]
    tails = [s + c.optimizer_s for s, c in zip(syncs, costs, strict=True)]
    last = max(range(len(costs)), key=lambda i: tails[i])
    sync_s, opt_s = syncs[last], costs[last].optimizer_s
    tp_in_steady = plan.micro_batches * costs[pt.bottleneck_stage].tp_comm_s
    clip, val = extras_s(plan, spec, costs, p2p_s, topo, cost, extras)
    it = pt.iteration_time_s + sync_s + opt_s + clip + val
    peak_flops = sum(topo.gpu(d).peak_flops(plan.precision.value) for d in plan.devices)
    model_flops = 3.0 * spec.fwd_flops_per_sample * plan.global_batch
    by_rank: dict[int, tuple[float, float]] = {}
    for st, c in zip(plan.stages, costs, strict=True):
        for d, p, b in zip(st.devices, c.peak_bytes, c.device_bytes, strict=True):
            by_rank[d.rank] = (p, b)
    ranks = sorted(by_rank)
    return Estimate(
        iteration_time_s=it,
        compute_s=pt.steady_s - tp_in_steady + opt_s,
        comm_s=tp_in_steady + pt.p2p_s + sync_s,
        bubble_s=pt.bubble_s,
        samples_per_s=plan.global_batch / it,
        tokens_per_s_per_gpu=plan.global_batch * plan.seq_len / it / plan.world_size,
        mfu=model_flops / (it * peak_flops),
        peak_bytes_per_device=tuple(by_rank[k][0] for k in ranks),
        feasible=all(c.feasible for c in costs),
        stage_times_s=tuple(f + b for f, b in zip(fwd, bwd, strict=True)),
        device_bytes_per_device=tuple(by_rank[k][1] for k in ranks),
        optimizer_s=opt_s,
        clip_s=clip,
        validation_s=val,
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
    headroom_fraction: float = DEFAULT_HEADROOM_FRACTION,
    extras: StepExtras | None = None,
    kernels: Kernels = EAGER,
) -> Estimate:
    """Estimate one iteration of ``plan`` for model ``spec``.

    ``cluster_or_gpu_map``: a ClusterSpec (devices' ``node`` names its nodes, for links), or a map from the
    plan's ``gpu_type`` names to GPUSpecs, or None (catalog lookup, all devices on one node). ``cost``: the
    measured profiles, communication tables and calibration to prefer over datasheets (none by default).
    The plan's ``virtual_stages`` (interleaved 1F1B) is priced as it runs. ``extras``: the job's gradient
    clipping and validation (:meth:`StepExtras.of_job`), reported as ``clip_s`` / ``validation_s`` and added
    to the iteration time; None (the default) prices the plan alone. ``kernels``: which kernels run the
    blocks' memory-bound work — Tessera's eager runtime by default; :class:`~tessera.perf.compute.Kernels`
    with ``fused`` prices a run on Megatron-LM's fused kernels (published runs, ``bench/published.py``).
    """
    check_plan_fits_spec(plan, spec)
    cost = cost or CostModel()
    topo = cluster_or_gpu_map if isinstance(cluster_or_gpu_map, Topology) else Topology(cluster_or_gpu_map)
    costs = [
        stage_cost(plan, spec, i, topo, cost, headroom_fraction=headroom_fraction, kernels=kernels)
        for i in range(plan.n_stages)
    ]
    p2p = [
        boundary_s(plan, spec, a, b, topo, cost) for a, b in zip(plan.stages, plan.stages[1:], strict=False)
    ]
    return compose(plan, spec, costs, p2p, topo, extras=extras, cost=cost)

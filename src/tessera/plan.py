"""Plan: the one contract between planner, scheduler, service and runtime.

A Plan is stage-centric (Whale's TaskGraphs): each pipeline stage owns a layer range and its own devices,
with its own DP degree (per-replica batch shares, possibly uneven) and TP degree (per-rank split ratios,
possibly uneven). Stages may differ in degree — the runtime bridges them. Devices within a stage are ordered
replica-major: replica r holds ``devices[r * tp : (r + 1) * tp]``.

This module imports nothing of Tessera but itself so that runtime workers stay light.
"""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

PLAN_VERSION = 1


class Precision(StrEnum):
    FP32 = "fp32"
    BF16 = "bf16"  # AMP: fp32 params, bf16 autocast
    FP16 = "fp16"  # AMP: fp32 params, fp16 autocast (+ loss scaling)
    BF16_MASTER = "bf16-master"  # bf16 params and activations, fp32 master weights, grads and optimizer

    @property
    def autocast_dtype_name(self) -> str | None:
        return {"bf16": "bfloat16", "fp16": "float16"}.get(self.value)


class Recompute(StrEnum):
    NONE = "none"
    SELECTIVE = "selective"  # recompute the attention core only (Korthikanti et al.)
    FULL = "full"  # keep only each block's input, recompute the block in backward


class Schedule(StrEnum):
    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"


class Attention(StrEnum):
    FLASH = "flash"  # memory-efficient kernel: saves out + logsumexp
    MATH = "math"  # explicit softmax(QK^T)V: saves the s x s scores


class Optimizer(StrEnum):
    ADAMW = "adamw"
    ADAM = "adam"
    SGD = "sgd"


class PlanError(ValueError):
    """A plan that cannot run; the message names the field and the reason."""

    def __init__(self, field_name: str, reason: str) -> None:
        super().__init__(f"{field_name}: {reason}")
        self.field = field_name
        self.reason = reason


def kv_heads_reason(tp_degree: int, even: bool, kv_heads: int) -> str | None:
    """Why ``tp_degree`` ranks cannot split ``kv_heads`` key/value heads, or ``None`` when they can.

    Every TP rank holds whole key/value heads (with grouped-query attention, whole groups of query heads
    with them): an even split (DTensor's equal chunks of k_proj / v_proj) needs the degree to divide them,
    else it cuts a head in half; an uneven one (Tessera's own whole-group shards) needs one per rank. The plan
    checks it against ``model_kv_heads``, the runtime against the model's layers."""
    if tp_degree > 1 and even and kv_heads % tp_degree:
        return (
            f"{tp_degree} does not divide the model's {kv_heads} key/value heads (grouped-query "
            "attention): an even split would cut a key/value head in half"
        )
    if tp_degree > kv_heads:
        return (
            f"{tp_degree} ranks for the model's {kv_heads} key/value heads (grouped-query attention): "
            "every rank must hold whole key/value heads"
        )
    return None


@dataclass(frozen=True)
class Device:
    """One accelerator of the job: global rank, GPU type (catalog name) and the node holding it."""

    rank: int
    gpu_type: str
    node: str = "local"
    local_index: int | None = None  # index of the GPU within its node (None: not pinned yet)


@dataclass(frozen=True)
class Stage:
    """A pipeline stage: layers [layer_start, layer_end) on dp_degree x tp_degree devices."""

    layer_start: int
    layer_end: int
    devices: tuple[Device, ...]
    dp_degree: int = 1
    tp_degree: int = 1
    batch_shares: tuple[int, ...] = ()  # samples per step of each DP replica; empty = even split
    tp_ratios: tuple[float, ...] = ()  # shard ratio of each TP rank; empty = even split

    @property
    def n_layers(self) -> int:
        return self.layer_end - self.layer_start

    def replica(self, r: int) -> tuple[Device, ...]:
        return self.devices[r * self.tp_degree : (r + 1) * self.tp_degree]

    def shares(self, global_batch: int) -> tuple[int, ...]:
        """Batch shares, filled in evenly (remainder to the first replicas) when the plan leaves them out."""
        if self.batch_shares:
            return self.batch_shares
        base, extra = divmod(global_batch, self.dp_degree)
        return tuple(base + (1 if r < extra else 0) for r in range(self.dp_degree))

    def ratios(self) -> tuple[float, ...]:
        return self.tp_ratios or tuple(1.0 / self.tp_degree for _ in range(self.tp_degree))

    @property
    def even_tp(self) -> bool:
        r = self.ratios()
        return all(math.isclose(x, r[0], rel_tol=1e-9) for x in r)


@dataclass(frozen=True)
class Plan:
    """The parallel execution plan of one job. ``validate`` is called on construction and on load."""

    model: str
    global_batch: int
    seq_len: int
    stages: tuple[Stage, ...]
    micro_batches: int = 1
    schedule: Schedule = Schedule.ONE_F_ONE_B
    precision: Precision = Precision.FP32
    recompute: Recompute = Recompute.NONE
    attention: Attention = Attention.FLASH
    optimizer: Optimizer = Optimizer.ADAMW
    zero: int = 0
    model_layers: int | None = None  # layer count of the model, checked against the stage ranges
    model_heads: int | None = None  # attention heads, checked against even TP degrees
    # key/value heads (fewer than model_heads under grouped-query attention): TP ranks hold whole ones
    model_kv_heads: int | None = None
    # interleaved 1F1B (Megatron's virtual pipeline): each stage's layers run as this many chunks, placed
    # round-robin over the stages (see ``stage_chunks``); 1 = the plain schedule
    virtual_stages: int = 1
    version: int = PLAN_VERSION
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        for name, enum in (
            ("schedule", Schedule),
            ("precision", Precision),
            ("recompute", Recompute),
            ("attention", Attention),
            ("optimizer", Optimizer),
        ):
            value = getattr(self, name)
            if not isinstance(value, enum):
                try:
                    object.__setattr__(self, name, enum(value))
                except ValueError:
                    allowed = ", ".join(e.value for e in enum)
                    raise PlanError(name, f"{value!r} is not one of {allowed}") from None
        self.validate()

    # ---------------------------------------------------------------- derived
    @property
    def devices(self) -> tuple[Device, ...]:
        return tuple(d for s in self.stages for d in s.devices)

    @property
    def world_size(self) -> int:
        return len(self.devices)

    @property
    def n_stages(self) -> int:
        return len(self.stages)

    def stage_of_rank(self, rank: int) -> tuple[int, int, int]:
        """(stage index, dp replica, tp rank) of a global rank."""
        for i, s in enumerate(self.stages):
            for j, d in enumerate(s.devices):
                if d.rank == rank:
                    return i, j // s.tp_degree, j % s.tp_degree
        raise KeyError(f"rank {rank} is not in the plan")

    def stage_chunks(self) -> tuple[tuple[tuple[int, int], ...], ...]:
        """``[stage][chunk]`` model-layer ranges [start, end) each stage runs, as Megatron interleaves them.

        Stage ``s`` keeps its layer count ``n_s`` (what its ``layer_start``/``layer_end`` say, so memory and
        time estimates price it by that count), split into ``virtual_stages`` chunks as evenly as possible
        (the remainder to the first chunks). Chunk ``c`` of stage ``s`` is virtual stage ``k = c·S + s``; the
        virtual stages take consecutive layers from layer 0 in ``k`` order, so a micro-batch visits every
        stage ``virtual_stages`` times, the embedding stays on stage 0 and the head on the last. With one
        virtual stage these are the stages' own ranges."""
        v, n = self.virtual_stages, self.n_stages
        if v == 1:
            return tuple(((s.layer_start, s.layer_end),) for s in self.stages)
        sizes = []
        for st in self.stages:
            base, extra = divmod(st.n_layers, v)
            sizes.append([base + (1 if c < extra else 0) for c in range(v)])
        out: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        pos = self.stages[0].layer_start
        for k in range(v * n):
            c, s = divmod(k, n)
            out[s].append((pos, pos + sizes[s][c]))
            pos += sizes[s][c]
        return tuple(tuple(chunks) for chunks in out)

    def stage_of_layer(self, layer: int) -> int:
        """The stage whose devices hold model layer ``layer`` (under interleaving, in one of its chunks)."""
        for s, chunks in enumerate(self.stage_chunks()):
            if any(a <= layer < b for a, b in chunks):
                return s
        raise KeyError(f"layer {layer} is not in the plan's stages")

    # ------------------------------------------------------------- validation
    def validate(self) -> None:
        if self.version != PLAN_VERSION:
            raise PlanError(
                "version", f"plan version {self.version} is not supported (expected {PLAN_VERSION})"
            )
        if self.global_batch < 1:
            raise PlanError("global_batch", f"must be >= 1, got {self.global_batch}")
        if self.seq_len < 1:
            raise PlanError("seq_len", f"must be >= 1, got {self.seq_len}")
        if not self.stages:
            raise PlanError("stages", "a plan needs at least one stage")
        if self.micro_batches < 1:
            raise PlanError("micro_batches", f"must be >= 1, got {self.micro_batches}")
        if self.micro_batches > self.global_batch:
            raise PlanError(
                "micro_batches", f"{self.micro_batches} micro-batches for a batch of {self.global_batch}"
            )
        if self.zero not in (0, 1, 2, 3):
            raise PlanError("zero", f"ZeRO stage must be 0, 1, 2 or 3, got {self.zero}")
        if self.schedule == Schedule.ONE_F_ONE_B and self.micro_batches < self.n_stages:
            raise PlanError(
                "micro_batches",
                f"1F1B needs micro_batches >= stages ({self.micro_batches} < {self.n_stages})",
            )
        kv = self.model_kv_heads
        if kv is not None:
            if kv < 1:
                raise PlanError("model_kv_heads", f"must be >= 1, got {kv}")
            if self.model_heads and self.model_heads % kv:
                raise PlanError(
                    "model_kv_heads",
                    f"{kv} key/value heads do not divide the model's {self.model_heads} attention heads",
                )
        expected_start = 0
        seen: dict[int, int] = {}
        seen_slots: dict[tuple[str, int], int] = {}
        for i, s in enumerate(self.stages):
            where = f"stages[{i}]"
            if s.layer_start != expected_start:
                raise PlanError(
                    f"{where}.layer_start",
                    f"expected {expected_start} (stages must tile the layers in order)",
                )
            if s.layer_end <= s.layer_start:
                raise PlanError(f"{where}.layer_end", f"must exceed layer_start {s.layer_start}")
            expected_start = s.layer_end
            if s.dp_degree < 1 or s.tp_degree < 1:
                raise PlanError(f"{where}.dp_degree", "dp_degree and tp_degree must be >= 1")
            if len(s.devices) != s.dp_degree * s.tp_degree:
                raise PlanError(
                    f"{where}.devices",
                    f"{len(s.devices)} devices for dp {s.dp_degree} x tp {s.tp_degree} = {s.dp_degree * s.tp_degree}",
                )
            for d in s.devices:
                if d.rank in seen:
                    raise PlanError(f"{where}.devices", f"rank {d.rank} already used by stage {seen[d.rank]}")
                seen[d.rank] = i
                slot = (d.node, d.local_index)
                if d.local_index is not None and slot in seen_slots:
                    raise PlanError(
                        f"{where}.devices",
                        f"GPU {d.local_index} of node {d.node!r} already used by rank {seen_slots[slot]}",
                    )
                seen_slots[slot] = d.rank
            if s.batch_shares:
                if len(s.batch_shares) != s.dp_degree:
                    raise PlanError(
                        f"{where}.batch_shares", f"{len(s.batch_shares)} shares for dp_degree {s.dp_degree}"
                    )
                if any(b < 1 for b in s.batch_shares):
                    raise PlanError(
                        f"{where}.batch_shares", f"every share must be >= 1, got {list(s.batch_shares)}"
                    )
                if sum(s.batch_shares) != self.global_batch:
                    raise PlanError(
                        f"{where}.batch_shares",
                        f"shares sum to {sum(s.batch_shares)}, not the global batch {self.global_batch}",
                    )
            elif self.global_batch < s.dp_degree:
                raise PlanError(
                    f"{where}.dp_degree", f"{s.dp_degree} replicas for a global batch of {self.global_batch}"
                )
            if s.tp_ratios:
                if len(s.tp_ratios) != s.tp_degree:
                    raise PlanError(
                        f"{where}.tp_ratios", f"{len(s.tp_ratios)} ratios for tp_degree {s.tp_degree}"
                    )
                if any(r <= 0 for r in s.tp_ratios):
                    raise PlanError(f"{where}.tp_ratios", f"every ratio must be > 0, got {list(s.tp_ratios)}")
                if not math.isclose(sum(s.tp_ratios), 1.0, abs_tol=1e-6):
                    raise PlanError(f"{where}.tp_ratios", f"ratios sum to {sum(s.tp_ratios):.6g}, not 1")
            if self.model_heads and s.tp_degree > 1 and s.even_tp and self.model_heads % s.tp_degree:
                raise PlanError(
                    f"{where}.tp_degree",
                    f"{s.tp_degree} does not divide the model's {self.model_heads} heads",
                )
            if self.model_heads and s.tp_degree > self.model_heads:
                raise PlanError(f"{where}.tp_degree", f"{s.tp_degree} ranks for {self.model_heads} heads")
            reason = kv_heads_reason(s.tp_degree, s.even_tp, kv) if kv else None
            if reason:
                raise PlanError(f"{where}.tp_degree", reason)
        if self.model_layers is not None and expected_start != self.model_layers:
            raise PlanError(
                f"stages[{len(self.stages) - 1}].layer_end",
                f"stages cover {expected_start} layers, the model has {self.model_layers}",
            )
        ranks = sorted(seen)
        if ranks != list(range(len(ranks))):
            raise PlanError("stages", f"ranks must be 0..{len(ranks) - 1}, got {ranks}")
        self._validate_virtual_stages()

    def _validate_virtual_stages(self) -> None:
        """Interleaving is 1F1B's (Megatron's schedule, torch's ``ScheduleInterleaved1F1B``), over several
        stages, with whole rounds of micro-batches (one per stage) and at least one layer in every chunk."""
        v = self.virtual_stages
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise PlanError("virtual_stages", f"must be an integer >= 1, got {v!r}")
        if v == 1:
            return
        if self.schedule != Schedule.ONE_F_ONE_B:
            raise PlanError("virtual_stages", f"interleaving is a 1F1B schedule, not {self.schedule.value}")
        if self.n_stages < 2:
            raise PlanError("virtual_stages", f"{v} virtual stages need a pipeline of >= 2 stages")
        if self.micro_batches % self.n_stages:
            raise PlanError(
                "virtual_stages",
                f"interleaved 1F1B needs micro_batches ({self.micro_batches}) to be a multiple of the "
                f"stages ({self.n_stages})",
            )
        for i, st in enumerate(self.stages):
            if st.n_layers < v:
                raise PlanError(
                    "virtual_stages",
                    f"stages[{i}] has {st.n_layers} layers, fewer than its {v} chunks",
                )

    # ------------------------------------------------------------ serialization
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("schedule", "precision", "recompute", "attention", "optimizer"):
            d[k] = str(getattr(self, k).value)
        return d

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        data = dict(data)
        try:
            stages = tuple(
                Stage(
                    **{
                        **s,
                        "devices": tuple(Device(**d) for d in s["devices"]),
                        "batch_shares": tuple(s.get("batch_shares", ())),
                        "tp_ratios": tuple(s.get("tp_ratios", ())),
                    }
                )
                for s in data.pop("stages")
            )
        except KeyError as e:
            raise PlanError("stages", f"missing field {e}") from None
        except TypeError as e:
            raise PlanError("stages", str(e)) from None
        try:
            return cls(stages=stages, **data)
        except TypeError as e:
            raise PlanError("plan", str(e)) from None

    @classmethod
    def from_json(cls, text: str) -> Plan:
        return cls.from_dict(json.loads(text))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json())

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        return cls.from_json(Path(path).read_text())

    def with_(self, **changes: Any) -> Plan:
        return replace(self, **changes)


def even_cuts(n_layers: int, pp: int, blocks: tuple[int, int] | None = None) -> tuple[int, ...]:
    """The ``pp − 1`` cut positions (first layer of every stage but the first) of an even partition.

    With ``blocks`` = [start, end) and at least ``pp`` blocks, the blocks are divided evenly and the layers
    outside the range join the first/last stage; blocks that do not divide evenly go one each to the first
    stages (as ``ModelSpec.even_partition``, which the memory layouts use). Otherwise every layer counts alike
    and the first ``n_layers mod pp`` stages take one more."""
    if blocks is not None and blocks[1] - blocks[0] >= pp:
        start, end = blocks
        base, extra = divmod(end - start, pp)
        sizes = [base + (1 if i < extra else 0) for i in range(pp)]
        return tuple(start + sum(sizes[: i + 1]) for i in range(pp - 1))
    base, extra = divmod(n_layers, pp)
    sizes = [base + (1 if i < extra else 0) for i in range(pp)]
    return tuple(sum(sizes[: i + 1]) for i in range(pp - 1))


def simple_plan(
    model: str,
    *,
    n_layers: int,
    global_batch: int,
    seq_len: int,
    dp: int = 1,
    tp: int = 1,
    pp: int = 1,
    gpu_type: str = "cpu",
    micro_batches: int | None = None,
    layer_cuts: tuple[int, ...] | None = None,
    blocks: tuple[int, int] | None = None,
    **options: Any,
) -> Plan:
    """A regular dp x tp x pp plan with even shares and an even (or given) layer partition.

    ``blocks``: the [start, end) range of the model's repeated blocks among its ``n_layers`` (an embedding
    before, a head after). Given, the default cut divides the *blocks* evenly, as Megatron does: the layers
    before them ride with the first stage and those after with the last, taking no block's slot (counting
    them as layers would put a third block on one stage of a 64-stage pipeline of 128 blocks). Without it, or
    with fewer blocks than stages, all layers are divided evenly."""
    if pp > n_layers:
        raise PlanError("pp", f"{pp} stages for {n_layers} layers")
    if blocks is not None and not 0 <= blocks[0] <= blocks[1] <= n_layers:
        raise PlanError("blocks", f"block range {blocks} outside the model's {n_layers} layers")
    if layer_cuts is None:
        layer_cuts = even_cuts(n_layers, pp, blocks)
    bounds = (0, *layer_cuts, n_layers)
    if len(bounds) != pp + 1:
        raise PlanError("layer_cuts", f"{len(layer_cuts)} cuts for {pp} stages")
    stages = []
    rank = 0
    for i in range(pp):
        devs = tuple(Device(rank=rank + j, gpu_type=gpu_type, local_index=rank + j) for j in range(dp * tp))
        rank += dp * tp
        stages.append(Stage(bounds[i], bounds[i + 1], devs, dp_degree=dp, tp_degree=tp))
    mb = micro_batches if micro_batches is not None else max(1, pp)
    return Plan(
        model=model,
        global_batch=global_batch,
        seq_len=seq_len,
        stages=tuple(stages),
        micro_batches=mb,
        model_layers=n_layers,
        **options,
    )


# ---------------------------------------------------------------- how a step splits the batch
def micro_ranges(global_batch: int, micro_batches: int) -> tuple[tuple[int, int], ...]:
    """Global sample range of each micro-batch: even sizes, the remainder to the first ones."""
    base, extra = divmod(global_batch, micro_batches)
    out, pos = [], 0
    for m in range(micro_batches):
        n = base + (1 if m < extra else 0)
        out.append((pos, pos + n))
        pos += n
    return tuple(out)


def replica_rows(
    shares: tuple[int, ...], micro: tuple[tuple[int, int], ...]
) -> tuple[tuple[tuple[int, int], ...], ...]:
    """rows[r][m] = (lo, hi) offsets inside micro-batch m computed by replica r.

    Samples are dealt one at a time to the replica furthest behind its share (ties to the lower index), which
    never gives a replica more than its share and ends with exactly ``shares[r]`` samples each.
    """
    total = sum(shares)
    given = [0] * len(shares)
    owner: list[int] = []
    for n in range(1, total + 1):
        r = max(range(len(shares)), key=lambda i: (shares[i] * n / total - given[i], -i))
        given[r] += 1
        owner.append(r)
    rows: list[list[tuple[int, int]]] = [[] for _ in shares]
    for a, b in micro:
        counts = [0] * len(shares)
        for s in range(a, b):
            counts[owner[s]] += 1
        pos = 0
        for r, c in enumerate(counts):
            rows[r].append((pos, pos + c))
            pos += c
    return tuple(tuple(r) for r in rows)


@functools.lru_cache(maxsize=4096)
def every_replica_in_every_micro_batch(
    shares: tuple[int, ...], global_batch: int, micro_batches: int
) -> bool:
    """Whether :func:`replica_rows` gives every replica a non-empty row of every micro-batch. Equal shares are
    dealt round-robin, so there it is every micro-batch holding at least one sample per replica; other
    shares deal the rows (a pass over the batch, kept per shares: the estimate asks per stage and plan)."""
    if len(set(shares)) == 1:
        return global_batch // micro_batches >= len(shares)
    rows = replica_rows(shares, micro_ranges(global_batch, micro_batches))
    return all(a < b for replica in rows for a, b in replica)


def fsdp_stage(plan: Plan, stage: Stage) -> bool:
    """Whether ``zero`` 2 or 3 of this stage runs through FSDP2 (ZeRO-3: ``reshard_after_forward``; ZeRO-2:
    parameters stay gathered from forward to the end of backward, PyTorch's SHARD_GRAD_OP) rather than
    Tessera's reduce-to-owner ZeRO-2. FSDP2 needs a DP stage of identical devices, without TP, in fp32 or bf16
    (its ``MixedPrecisionPolicy``: bf16 gathers, fp32 gradient reduction), whose replicas all compute every
    micro-batch (FSDP's per-micro-batch all-gathers must line up). One rule for the runtime, which obeys it
    (except under torch's pipeline schedule), and the estimate, which prices what it runs."""
    if plan.zero < 2 or stage.dp_degree < 2 or stage.tp_degree > 1:
        return False
    if len({d.gpu_type for d in stage.devices}) != 1:
        return False
    if plan.precision not in (Precision.FP32, Precision.BF16):
        return False
    return every_replica_in_every_micro_batch(
        stage.shares(plan.global_batch), plan.global_batch, plan.micro_batches
    )


def overlaps_grad_sync(precision: Precision) -> bool:
    """Whether the runtime reduces a stage's data-parallel gradient buckets while the replica's last
    micro-batch's backward still runs (DDP's overlap, ``runtime.data_parallel.GradSync``), rather than after it.
    Every precision but bf16-master: there the sync reduces the fp32 masters' gradients, which exist only once
    backward has ended and the bf16 parameters' gradients are copied into them. One rule for the runtime,
    which obeys it, and the estimate, which prices only the sync the overlap leaves exposed."""
    return precision != Precision.BF16_MASTER


# ---------------------------------------------------------------- which plans torch's pipelining runs
def pipeline_impl() -> str:
    """``TESSERA_PIPELINE_IMPL`` (own, torch or auto): which transport runs pipelines in this process. The
    runtime obeys it; the estimate and the calibration read it to price and fit what the runtime runs."""
    value = os.environ.get("TESSERA_PIPELINE_IMPL", "auto").strip().lower() or "auto"
    if value not in ("own", "torch", "auto"):
        raise ValueError(f"TESSERA_PIPELINE_IMPL must be own, torch or auto, got {value!r}")
    return value


@dataclass(frozen=True)
class Refusal:
    """Why torch's pipelining cannot run a plan: the plan field at fault and the reason."""

    field: str
    reason: str

    def __str__(self) -> str:
        return self.reason


def replica_pipeline_ranks(plan: Plan, replica: int) -> tuple[int, ...]:
    """Global ranks of pipeline replica ``replica``: the ``replica``-th device of every stage, in stage order
    (TP = 1 in every stage)."""
    return tuple(st.devices[replica].rank for st in plan.stages)


def torch_schedule_refusal(plan: Plan, impl: str | None = None) -> Refusal | None:
    """Why ``torch.distributed.pipelining`` cannot run ``plan`` (None: it can), from the plan alone.

    ``impl``: own, torch or auto (default: :func:`pipeline_impl`). The runtime adds its process-group check;
    the calibration and the estimate read the same answer (what the runtime timed as compute, where FSDP2 is
    not used)."""
    impl = pipeline_impl() if impl is None else impl
    v = "virtual_stages"
    if plan.n_stages < 2:
        return Refusal(v, "a single stage is no pipeline")
    if impl == "own":
        return Refusal(v, "TESSERA_PIPELINE_IMPL=own asks for Tessera's own transport")
    dps = [s.dp_degree for s in plan.stages]
    tps = [s.tp_degree for s in plan.stages]
    if any(t != 1 for t in tps) or len(set(dps)) != 1:
        return Refusal(
            v,
            "torch's pipeline stages hold one device each per pipeline replica (DP = TP = 1 within a "
            f"replica): every stage needs the same dp_degree and tp_degree 1, got dp_degree {dps}, "
            f"tp_degree {tps}",
        )
    d = dps[0]
    if d > 1 and plan.virtual_stages == 1 and impl != "torch":
        return Refusal(
            v,
            "a data-parallel plain pipeline keeps Tessera's transport unless TESSERA_PIPELINE_IMPL=torch",
        )
    for r in range(d):
        ranks = replica_pipeline_ranks(plan, r)
        if list(ranks) != sorted(set(ranks)):  # strictly increasing
            if d == 1:
                return Refusal(v, "stage s must be on global rank s")
            return Refusal(
                v,
                f"replica {r}'s stages must be on increasing ranks (stage s at rank s of the replica's "
                f"group), got {list(ranks)}",
            )
    if plan.schedule not in (Schedule.GPIPE, Schedule.ONE_F_ONE_B):
        return Refusal("schedule", f"no torch schedule for {plan.schedule.value}")
    if plan.schedule == Schedule.ONE_F_ONE_B and plan.micro_batches < plan.n_stages:
        return Refusal("micro_batches", "1F1B needs micro_batches >= stages")
    return _share_refusal(plan, d)


@functools.lru_cache(maxsize=4096)
def uneven_pieces(
    shares: tuple[int, ...], global_batch: int, micro_batches: int
) -> tuple[int, tuple[int, ...]] | None:
    """The first replica whose rows of the micro-batches (``replica_rows``) differ in size or are empty, with
    those sizes; None when every replica's pieces are equal and non-empty (what torch's ``PipelineStage``
    needs: its p2p buffers have one shape)."""
    rows = replica_rows(shares, micro_ranges(global_batch, micro_batches))
    for r, ranges in enumerate(rows):
        sizes = tuple(hi - lo for lo, hi in ranges)
        if len(set(sizes)) != 1 or sizes[0] == 0:
            return r, sizes
    return None


def _share_refusal(plan: Plan, d: int) -> Refusal | None:
    """Every replica's micro-batch pieces must have one shape (PipelineStage's p2p buffers), and a replica is
    one pipeline, so every stage must give it the same share."""
    b, m = plan.global_batch, plan.micro_batches
    shares = plan.stages[0].shares(b)
    for i, st in enumerate(plan.stages[1:], start=1):
        if st.shares(b) != shares:
            return Refusal(
                f"stages[{i}].batch_shares",
                f"every stage must split the batch the same way (each pipeline replica is one pipeline): "
                f"stages[{i}] gives {list(st.shares(b))}, stages[0] {list(shares)}",
            )
    if d == 1:
        if b % m:
            return Refusal(
                "micro_batches",
                f"micro-batches must be equal (global_batch {b} is not a multiple of micro_batches {m})",
            )
        return None
    uneven = uneven_pieces(shares, b, m)
    if uneven is None:
        return None
    r, sizes = uneven
    explicit = next((i for i, st in enumerate(plan.stages) if st.batch_shares), None)
    field = "global_batch" if explicit is None else f"stages[{explicit}].batch_shares"
    return Refusal(
        field,
        f"replica {r}'s share of {shares[r]} samples (batch_shares {list(shares)} of global_batch "
        f"{b}) falls into pieces of {list(sizes)} samples over the {m} micro-batches; torch's "
        "PipelineStage needs them equal and non-empty (its p2p buffers have one shape)",
    )

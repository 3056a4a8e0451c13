"""Build one rank's piece of the model: its stage's layers, TP-sharded when the stage is tensor-parallel.

Every parameter is recorded with its model-layer FQN (``layers.{i}.{name}``) and its ``ShardSpec`` — the
keys under which checkpoints, gradients and resharding all meet, whatever the plan.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import parallelize_module

from tessera.nn.dtensor_tp import block_tp_plan
from tessera.nn.vocab_parallel import vocab_parallel_cross_entropy
from tessera.plan import PlanError, kv_heads_reason
from tessera.runtime.auto_tp import cut_in_place, plan_auto_shards
from tessera.runtime.model import ModelFactory, TPSpec, build_layer, layer_of
from tessera.runtime.shards import ShardSpec
from tessera.runtime.tensor_parallel import install_tp, plan_layer_shards
from tessera.runtime.torch_parallel import dtensor_spec, is_dtensor, local, mesh_of, parallelize_block


@dataclass(frozen=True)
class ParamEntry:
    fqn: str
    param: nn.Parameter
    spec: ShardSpec


@dataclass
class StageModel:
    module: nn.Module  # the zoo's BlockModel for layers [start, end)
    entries: list[ParamEntry]
    layer_start: int
    cross_stage: list[ParamEntry]  # tied parameters whose other members live on other stages
    root_forward: bool = False  # call the root module (FSDP2's root hooks all-gather its own parameters)
    # (first class of this rank's logits, TP group) when the head's output is sharded along the classes
    vocab_output: tuple[int, dist.ProcessGroup] | None = None

    @property
    def layers(self) -> nn.ModuleList:
        return self.module.layers  # type: ignore[return-value]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.root_forward:
            return self.module(x)
        for layer in self.layers:
            x = layer(x)
        return x

    def loss(self, output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self.vocab_output is None:
            return self.module.loss(output, targets)  # type: ignore[operator]
        start, group = self.vocab_output
        return vocab_parallel_cross_entropy(output, targets, start, group)


class _ChunkModules(nn.Module):
    """One rank's chunk modules under one root: what dropout, dtype casts, train/eval and the data's
    ``make_batch`` (a model-level sampler, the same on every chunk) reach."""

    def __init__(self, modules: list[nn.Module]) -> None:
        super().__init__()
        self.chunks = nn.ModuleList(modules)

    def make_batch(self, *args: object, **kwargs: object) -> object:
        return self.chunks[0].make_batch(*args, **kwargs)  # type: ignore[operator]


@dataclass
class StageChunks:
    """One rank's stage of an interleaved pipeline (``Plan.virtual_stages`` > 1): one ``StageModel`` per chunk,
    in chunk order. It offers what the trainer reads of a ``StageModel`` (``module``, ``entries``,
    ``cross_stage``, ``loss``) over the union of the chunks, so the optimizer, gradient sync, norms and
    checkpoints see every parameter the rank holds; the pipeline runs each chunk as its own virtual stage."""

    chunks: list[StageModel]
    module: nn.Module

    @classmethod
    def of(cls, chunks: list[StageModel], where: str = "virtual_stages") -> StageChunks:
        """The chunks as one stage; a parameter tied across two chunks of this rank is refused (each chunk
        would hold its own copy of it)."""
        seen: set[str] = set()
        for e in (e for c in chunks for e in c.cross_stage):
            if e.fqn in seen:
                raise PlanError(
                    where, f"{e.fqn} is tied across two chunks of one stage, which is not supported"
                )
            seen.add(e.fqn)
        return cls(chunks, _ChunkModules([c.module for c in chunks]))

    @property
    def entries(self) -> list[ParamEntry]:
        return [e for c in self.chunks for e in c.entries]

    @property
    def cross_stage(self) -> list[ParamEntry]:
        return [e for c in self.chunks for e in c.cross_stage]

    def loss(self, output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.chunks[-1].loss(output, targets)  # the last chunk holds the head, on the last stage


def build_stage(
    factory: ModelFactory,
    layer_range: tuple[int, int],
    seed: int,
    *,
    tp: TPSpec | None,
    tp_group: dist.ProcessGroup | None,
    attention: str,
    recompute: str,
    device: torch.device,
    ties: tuple[tuple[str, ...], ...] = (),
    dtensor_tp: bool = False,
    fully_shard: Callable[[StageModel], None] | None = None,
    where: str = "tp_degree",
) -> StageModel:
    """The stage's layers holding the canonical initial weights (TP-sliced), tied parameters re-tied locally.

    A tied parameter whose members live on other stages too is listed in ``StageModel.cross_stage`` so the
    gradient sync can add the other stage's contribution (Megatron's embedding group).

    Under TP a layer is normally built whole (its canonical weights) and this rank's shard cut from it. A model
    whose layer list says ``loads_own_shards`` (a pretrained Hugging Face model: its TP build reads only this
    rank's slices from the safetensors files) is never built whole: the whole layer exists on the meta device
    only, for the shapes the shard specs are taken against, so a TP rank reads its own stage's slices and
    nothing more. (A layer that stays replicated in the TP group is read whole: it is all this rank's.)

    With ``dtensor_tp`` (an even split) the blocks are handed to DTensor's ``parallelize_module`` (the zoo's plan
    by Linear names, or the plan a layer gives by ``dtensor_tp_plan()``, as the Hugging Face decoder layers
    do); their parameters become DTensors whose specs come from their placements. Built whole, the layer is
    distributed by DTensor; built from this rank's shard (``loads_own_shards``), the shard's tensors become the
    local tensors of the placements DTensor gives the whole layer on meta (:func:`_dtensor_from_shard`). Layers
    DTensor has no plan for (embedding, vocab head) take Tessera's own vocab-parallel shard in either case.

    ``fully_shard`` (ZeRO-2/3 through FSDP2, no TP) shards the built stage over its DP group in place. A model
    that ``loads_own_shards`` and can read rows (``without_weights`` / ``read_rows``) is then never read whole
    on any rank: its skeleton (parameters on meta) is sharded first, and each rank fills its ``Shard(0)``
    local tensors with the rows it keeps (:func:`_fill_fsdp_shards`), torchtitan's meta-init way.
    """
    with torch.device("meta"):  # the stage's layers whole, shapes only: what the checks below read
        probe = factory(layer_range=layer_range, tp=None, attention=attention, recompute=recompute)
    if tp is not None and tp.degree > 1:
        for layer in probe.layers:
            _check_heads(layer, tp, even=dtensor_tp, where=where)
    if fully_shard is not None and _reads_rows(factory, probe):
        assert tp is None or tp.degree == 1, "FSDP2 stages are not tensor-parallel"
        return _build_fsdp_from_rows(
            factory, layer_range, seed, attention, recompute, device, ties, fully_shard
        )
    stage = _build(
        factory, layer_range, seed, tp=tp, tp_group=tp_group, attention=attention, recompute=recompute,
        device=device, ties=ties, dtensor_tp=dtensor_tp, probe=probe,
    )  # fmt: skip
    if fully_shard is not None:
        fully_shard(stage)
    return stage


def _reads_rows(factory: ModelFactory, module: nn.Module) -> bool:
    """Whether the model (``module``, built by ``factory``) loads its own weights and can read them by rows
    (``ModelFactory``'s options)."""
    if not (hasattr(factory, "without_weights") and hasattr(factory, "read_rows")):
        return False
    return bool(getattr(module, "loads_own_shards", False))


def _build_fsdp_from_rows(
    factory: ModelFactory,
    layer_range: tuple[int, int],
    seed: int,
    attention: str,
    recompute: str,
    device: torch.device,
    ties: tuple[tuple[str, ...], ...],
    fully_shard: Callable[[StageModel], None],
) -> StageModel:
    """The stage's skeleton (parameters on meta, buffers built), ``fully_shard``-ed, then filled by rows."""
    start, end = layer_range
    skeleton: ModelFactory = factory.without_weights()  # type: ignore[attr-defined]
    kw = {"attention": attention, "recompute": recompute}
    with torch.device("meta"):
        module = skeleton(layer_range=layer_range, tp=None, **kw)
    raw: list[ParamEntry] = []
    for j, i in enumerate(range(start, end)):
        layer = module.layers[j] = build_layer(skeleton, i, seed, **kw)
        for name, p in layer.named_parameters():
            raw.append(ParamEntry(f"layers.{i}.{name}", p, ShardSpec(tuple(p.shape))))
    entries, cross = _apply_ties(module, raw, ties, start, end, skeleton, seed, attention, recompute, True)
    stage = StageModel(module, entries, start, cross)
    fully_shard(stage)  # FSDP2 keeps meta parameters on meta (deferred init); buffers go to the mesh's device
    _fill_fsdp_shards(stage, factory, device)
    return stage


def _fill_fsdp_shards(stage: StageModel, factory: ModelFactory, device: torch.device) -> None:
    """Allocate the sharded skeleton's parameters and read into each only the rows this rank keeps.

    A ``Shard(0)`` DTensor parameter of FSDP2 keeps rows ``dtensor_spec`` names (``torch.chunk``'s ceil-sized
    chunks, the last ones short or empty; FSDP2 pads its storage up to the chunk size behind the unpadded local
    view, which is what is filled here). A parameter FSDP leaves whole (tied to another stage: ``ignored``) is
    read whole. ``FSDPModule._apply`` re-registers the padded local storage after allocation."""
    module = stage.module
    paths = {id(p): n for n, p in module.named_parameters()}
    entry_paths = [paths[id(e.param)] for e in stage.entries]
    cross_paths = [paths[id(e.param)] for e in stage.cross_stage]
    module._apply(lambda t: torch.empty_like(t, device=device) if t.is_meta else t)
    entries = [
        ParamEntry(e.fqn, module.get_parameter(path), e.spec)
        for e, path in zip(stage.entries, entry_paths, strict=True)
    ]
    rows: dict[str, tuple[int, int] | None] = {}
    for e in entries:
        if e.spec.replicated:
            rows[e.fqn] = None
        else:
            assert e.spec.dim == 0 and len(e.spec.ranges) == 1, e.spec
            rows[e.fqn] = e.spec.ranges[0]
    values = factory.read_rows(rows)  # type: ignore[attr-defined]
    with torch.no_grad():
        for e in entries:
            local(e.param).copy_(values[e.fqn])
    stage.entries = entries
    by_fqn = {e.fqn: e.param for e in entries}
    stage.cross_stage = [
        ParamEntry(e.fqn, by_fqn.get(e.fqn, module.get_parameter(path)), e.spec)
        for e, path in zip(stage.cross_stage, cross_paths, strict=True)
    ]


def _build(
    factory: ModelFactory,
    layer_range: tuple[int, int],
    seed: int,
    *,
    tp: TPSpec | None,
    tp_group: dist.ProcessGroup | None,
    attention: str,
    recompute: str,
    device: torch.device,
    ties: tuple[tuple[str, ...], ...],
    dtensor_tp: bool,
    probe: nn.Module,
) -> StageModel:
    """``build_stage`` without FSDP's own-rows path; ``probe``: the stage built on meta without TP."""
    start, end = layer_range
    use_tp = tp is not None and tp.degree > 1
    mesh = None
    if use_tp and dtensor_tp:
        assert tp_group is not None
        mesh = mesh_of(tp_group, device, "tp")
    # The container only, on meta: every layer is then built alone with its canonical weights (a pretrained
    # model's tensors are read once per layer, not also for a throw-away copy).
    module = probe  # without Tessera's own TP shards the container is the probe
    if use_tp and mesh is None:
        with torch.device("meta"):
            module = factory(layer_range=layer_range, tp=tp, attention=attention, recompute=recompute)
    loads = bool(getattr(module, "loads_own_shards", False))  # its layers hold their values as built
    own = use_tp and loads
    kw = {"attention": attention, "recompute": recompute}
    raw: list[ParamEntry] = []
    vocab_output = None
    last_layer = end - 1 if getattr(module, "has_head", False) else -1
    for j, i in enumerate(range(start, end)):
        full = build_layer(factory, i, seed, meta=own, **kw)  # own: shapes only, nothing read
        local = module.layers[j] = full
        shards = None
        if mesh is not None:
            layer_plan = block_tp_plan(full)
            if layer_plan is None and hasattr(full, "dtensor_tp_plan"):  # a layer naming its own (HF blocks)
                layer_plan = full.dtensor_tp_plan()
            if layer_plan is not None:
                placed = None
                if own:
                    assert tp is not None
                    placed = _dtensor_from_shard(factory, i, seed, tp, full, layer_plan, mesh, device, kw)
                    if placed is None:  # DTensor's chunks are not the shard the model reads: read it whole
                        full = build_layer(factory, i, seed, **kw)
                if placed is None:
                    placed = full.to(device)
                    parallelize_block(placed, layer_plan, mesh)
                module.layers[j] = placed
                for name, p in placed.named_parameters():
                    spec = dtensor_spec(p) if is_dtensor(p) else ShardSpec(tuple(p.shape))  # type: ignore[arg-type]
                    raw.append(ParamEntry(f"layers.{i}.{name}", p, spec))
                continue
        if use_tp:
            assert tp is not None and tp_group is not None
            # Tessera's own shard (uneven TP; under DTensor the layers it has no plan for)
            local = module.layers[j] = build_layer(factory, i, seed, tp=tp, **kw)
            shards = plan_layer_shards(factory, i, seed, local, full, tp, last=i == last_layer, **kw)
            if shards is None and not own and _came_back_whole(local, full):  # plain code: Whale's split
                shards = plan_auto_shards(local, tp)
                if shards is not None:
                    cut_in_place(local, shards.specs)
            if shards is None:  # MoE experts, conv channels: replicated in the TP group
                if own:
                    full = build_layer(factory, i, seed, **kw)
                module.layers[j] = local = full
            elif shards.vocab_output is not None:
                vocab_output = (shards.vocab_output, tp_group)
        full_params = dict(full.named_parameters())
        cut = local is not full and not own  # own: the TP build already holds its shard's canonical values
        with torch.no_grad():
            for name, p in local.named_parameters():
                spec = shards.specs[name] if shards is not None else ShardSpec(tuple(full_params[name].shape))
                if cut:
                    p.copy_(spec.slice(full_params[name].detach()))
                raw.append(ParamEntry(f"layers.{i}.{name}", p, spec))
            full_buffers = dict(full.named_buffers())
            for name, b in local.named_buffers():
                if cut and name in full_buffers and full_buffers[name].shape == b.shape:
                    b.copy_(full_buffers[name])
        if shards is not None:
            install_tp(local, shards, tp_group)  # type: ignore[arg-type]
    entries, cross = _apply_ties(module, raw, ties, start, end, factory, seed, attention, recompute, loads)
    module.to(device)
    return StageModel(module, entries, start, cross, vocab_output=vocab_output)


def _came_back_whole(local: nn.Module, full: nn.Module) -> bool:
    """Whether the factory ignored ``tp``: every parameter of the TP build has the whole layer's shape."""
    shapes = {n: p.shape for n, p in full.named_parameters()}
    return all(shapes.get(n) == p.shape for n, p in local.named_parameters())


def _check_heads(layer: nn.Module, tp: TPSpec, *, even: bool, where: str) -> None:
    """An attention layer's key/value heads (its ``tp_units``) split whole over the TP ranks, before anything
    is cut: a plan written without ``model_kv_heads`` is checked against the model itself (one clear error
    naming the plan's field, not a wrong result or an error deep in a reshape)."""
    kv = getattr(layer, "tp_units", None)
    if getattr(layer, "tp_shard", None) != "heads" or not kv:
        return
    reason = kv_heads_reason(tp.degree, even, int(kv))
    if reason:
        raise PlanError(where, reason)


def _dtensor_from_shard(
    factory: ModelFactory,
    layer: int,
    seed: int,
    tp: TPSpec,
    full: nn.Module,
    plan: dict[str, object],
    mesh: object,
    device: torch.device,
    kw: dict[str, str],
) -> nn.Module | None:
    """Layer ``layer`` under DTensor's ``plan`` built from this rank's shard alone (torchtitan's meta-init way).

    ``full`` (the whole layer, on meta) is parallelized first, which on meta moves no data: it gives every
    parameter its placements and global shape. The shard the model's TP build read (nothing else) then becomes
    the local tensors of those placements (``DTensor.from_local``), and the plan applied to the shard itself
    finds its parameters already placed and only installs its input/output hooks. ``None``, having read
    nothing, when DTensor's even chunks are not the shard the model cuts (both compared on meta): then only the
    whole layer can be distributed.
    """
    shape_only = build_layer(factory, layer, seed, tp=tp, meta=True, **kw)
    shards = plan_layer_shards(factory, layer, seed, shape_only, full, tp, last=False, **kw)
    if shards is None:
        return None
    parallelize_module(full, mesh, plan, src_data_rank=None)  # type: ignore[arg-type]
    placed = dict(full.named_parameters())
    if set(placed) != set(shards.specs) or any(
        (dtensor_spec(p) if is_dtensor(p) else ShardSpec(tuple(p.shape))) != shards.specs[name]  # type: ignore[arg-type]
        for name, p in placed.items()
    ):
        return None
    local = build_layer(factory, layer, seed, tp=tp, **kw).to(device)  # reads this rank's slices only
    for name, p in list(local.named_parameters()):
        target = placed[name]
        if is_dtensor(target):
            owner, _, attr = name.rpartition(".")
            value = DTensor.from_local(
                p.detach(),
                mesh,  # type: ignore[arg-type]
                target.placements,  # type: ignore[attr-defined]
                run_check=False,
                shape=target.shape,
                stride=target.stride(),
            )
            local.get_submodule(owner).register_parameter(attr, nn.Parameter(value, p.requires_grad))
    parallelize_module(local, mesh, plan, src_data_rank=None)  # type: ignore[arg-type]
    return local


def _apply_ties(
    module: nn.Module,
    raw: list[ParamEntry],
    ties: tuple[tuple[str, ...], ...],
    start: int,
    end: int,
    factory: ModelFactory,
    seed: int,
    attention: str,
    recompute: str,
    loads: bool = False,
) -> tuple[list[ParamEntry], list[ParamEntry]]:
    canonical = {alias: g[0] for g in ties for alias in g}
    by_fqn = {e.fqn: e for e in raw}
    cross: list[ParamEntry] = []
    for group in ties:
        local = [f for f in group if start <= layer_of(f) < end and f in by_fqn]
        if not local:
            continue
        keep = by_fqn[local[0]]
        # The tied value is the canonical member's initial value (loading the members one by one may have
        # left another member's value in a Parameter the module already shares). A model loading its own
        # shards read every member from the canonical member's tensor already (a stage without the canonical
        # member's layer must not read that layer).
        if not loads:
            value = build_layer(factory, layer_of(group[0]), seed, attention=attention, recompute=recompute)
            with torch.no_grad():
                keep.param.copy_(keep.spec.slice(value.state_dict()[group[0].split(".", 2)[2]]))
        for alias in local[1:]:  # several members here: one Parameter, as in the full model
            if by_fqn[alias].spec != keep.spec:
                raise ValueError(
                    f"tied {alias} is sharded unlike {local[0]}: {by_fqn[alias].spec} vs {keep.spec}"
                )
            path = f"layers.{layer_of(alias) - start}." + alias.split(".", 2)[2]
            owner_path, _, attr = path.rpartition(".")
            setattr(module.get_submodule(owner_path), attr, keep.param)
        if len(local) < len(group):
            cross.append(ParamEntry(group[0], keep.param, keep.spec))
    seen: set[int] = set()
    entries: list[ParamEntry] = []
    for e in raw:
        e_fqn = canonical.get(e.fqn, e.fqn)
        p = by_fqn[e.fqn].param
        if e.fqn in canonical:
            p = _resolve(module, e.fqn, start)
        if id(p) in seen:
            continue
        seen.add(id(p))
        entries.append(ParamEntry(e_fqn, p, e.spec))
    return entries, cross


def _resolve(module: nn.Module, fqn: str, start: int) -> nn.Parameter:
    path = f"layers.{layer_of(fqn) - start}." + fqn.split(".", 2)[2]
    return module.get_parameter(path)

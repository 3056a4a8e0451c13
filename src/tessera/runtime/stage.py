"""Build one rank's piece of the model: its stage's layers, TP-sharded when the stage is tensor-parallel.

Every parameter is recorded with its model-layer FQN (``layers.{i}.{name}``) and its ``ShardSpec`` — the
keys under which checkpoints, gradients and resharding all meet, whatever the plan.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from tessera.dtensor_tp import block_tp_plan
from tessera.runtime.model import ModelFactory, TPSpec, build_layer, layer_of
from tessera.runtime.shards import ShardSpec
from tessera.runtime.tensor_parallel import install_tp, plan_layer_shards
from tessera.runtime.torch_parallel import dtensor_spec, is_dtensor, mesh_of, parallelize_block
from tessera.vocab_parallel import vocab_parallel_cross_entropy


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
) -> StageModel:
    """The stage's layers holding the canonical initial weights (TP-sliced), tied parameters re-tied locally.

    A tied parameter whose members live on other stages too is listed in ``StageModel.cross_stage`` so the
    gradient sync can add the other stage's contribution (Megatron's embedding group).

    With ``dtensor_tp`` (an even split) the blocks are built with full shapes and handed to DTensor's
    ``parallelize_module`` (the zoo's plan by Linear names, or the plan a layer gives by ``dtensor_tp_plan()``,
    as the Hugging Face decoder layers do); their parameters become DTensors whose specs come from their
    placements. Layers
    DTensor has no plan for (embedding, vocab head) take Tessera's own vocab-parallel shard in either case.
    """
    start, end = layer_range
    use_tp = tp is not None and tp.degree > 1
    mesh = None
    if use_tp and dtensor_tp:
        assert tp_group is not None
        mesh = mesh_of(tp_group, device, "tp")
    # The container only, on meta: every layer is then built alone with its canonical weights (a pretrained
    # model's tensors are read once per layer, not also for a throw-away copy).
    with torch.device("meta"):
        module = factory(
            layer_range=layer_range,
            tp=tp if use_tp and mesh is None else None,
            attention=attention,
            recompute=recompute,
        )
    raw: list[ParamEntry] = []
    vocab_output = None
    last_layer = end - 1 if getattr(module, "has_head", False) else -1
    for j, i in enumerate(range(start, end)):
        full = build_layer(factory, i, seed, attention=attention, recompute=recompute)
        local = module.layers[j] = full
        shards = None
        if use_tp and mesh is None:
            local = module.layers[j] = build_layer(
                factory, i, seed, tp=tp, attention=attention, recompute=recompute
            )
        if mesh is not None:
            layer_plan = block_tp_plan(local)
            if layer_plan is None and hasattr(local, "dtensor_tp_plan"):  # a layer naming its own (HF blocks)
                layer_plan = local.dtensor_tp_plan()
            if layer_plan is not None:
                local.to(device)
                parallelize_block(local, layer_plan, mesh)
                for name, p in local.named_parameters():
                    spec = dtensor_spec(p) if is_dtensor(p) else ShardSpec(tuple(p.shape))  # type: ignore[arg-type]
                    raw.append(ParamEntry(f"layers.{i}.{name}", p, spec))
                continue
            # no DTensor plan (embedding, vocab head): Tessera's own shard of it
            local = module.layers[j] = build_layer(
                factory, i, seed, tp=tp, attention=attention, recompute=recompute
            )
        if use_tp:
            assert tp is not None and tp_group is not None
            shards = plan_layer_shards(
                factory,
                i,
                seed,
                local,
                full,
                tp,
                attention=attention,
                recompute=recompute,
                last=i == last_layer,
            )
            if shards is None:  # MoE experts, conv channels: replicated in the TP group
                module.layers[j] = local = full
            elif shards.vocab_output is not None:
                vocab_output = (shards.vocab_output, tp_group)
        full_params = dict(full.named_parameters())
        with torch.no_grad():
            for name, p in local.named_parameters():
                spec = shards.specs[name] if shards is not None else ShardSpec(tuple(full_params[name].shape))
                if local is not full:
                    p.copy_(spec.slice(full_params[name].detach()))
                raw.append(ParamEntry(f"layers.{i}.{name}", p, spec))
            full_buffers = dict(full.named_buffers())
            for name, b in local.named_buffers():
                if local is not full and name in full_buffers and full_buffers[name].shape == b.shape:
                    b.copy_(full_buffers[name])
        if shards is not None:
            install_tp(local, shards, tp_group)  # type: ignore[arg-type]
    entries, cross = _apply_ties(module, raw, ties, start, end, factory, seed, attention, recompute)
    module.to(device)
    return StageModel(module, entries, start, cross, vocab_output=vocab_output)


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
        # left another member's value in a Parameter the module already shares).
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

"""Build a ModelSpec from any ``nn.Module`` made of a sequence of blocks, by running it on meta tensors.

Each layer runs once, alone, on meta tensors (no memory, no compute) under ``FlopCounterMode`` (forward
FLOPs, 2 per multiply-add) and ``saved_tensors_hooks`` (the unique storages autograd keeps for backward,
parameters and buffers excluded). This is the ground truth the zoo's closed forms are tested against,
and the way a user's own model enters the planner.

Conventions: a parameter shared by several layers (tied embeddings) is counted in the first layer that
holds it; per-sample figures are the trace at ``example_batch`` samples divided by it (batch-independent
constants such as flash attention's RNG state therefore count fully at the default of 1 sample).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence

import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils.flop_counter import FlopCounterMode

from tessera.models.spec import ConvArch, Layer, ModelSpec, TPShard, TransformerArch

META = torch.device("meta")


def model_layers(model: nn.Module) -> Sequence[nn.Module]:
    """The block sequence of a model: its ``.layers`` (ModuleList/Sequential) or the model if Sequential."""
    layers = getattr(model, "layers", None)
    if isinstance(layers, nn.ModuleList | nn.Sequential):
        return list(layers)
    if isinstance(model, nn.Sequential):
        return list(model)
    raise TypeError(
        f"trace_spec: {type(model).__name__} has no `.layers` ModuleList and is not an nn.Sequential; "
        "give the model its blocks as `self.layers = nn.ModuleList([...])`"
    )


def trace_spec(
    model: nn.Module,
    seq_len: int,
    *,
    name: str,
    family: str = "custom",
    arch: TransformerArch | ConvArch | None = None,
    example_batch: int = 1,
    example_input: torch.Tensor | None = None,
) -> ModelSpec:
    """Trace ``model`` layer by layer into a ModelSpec for ``seq_len`` tokens per sample.

    The first layer's input comes from ``example_input`` (any device; only its shape and dtype are used)
    or, for zoo models, ``model.make_batch``. Every later layer gets its predecessor's output.
    """
    if example_batch < 1:
        raise ValueError(f"trace_spec: example_batch must be >= 1, got {example_batch}")
    layers = model_layers(model)
    if not layers:
        raise ValueError(f"trace_spec: model {name!r} has no layers")
    x = _first_input(model, seq_len, example_batch, example_input)
    was_training = [m.training for m in layers]
    seen_params: set[int] = set()
    out: list[Layer] = []
    for i, layer in enumerate(layers):
        params = _new_params(layer, seen_params)
        meta_layer = _on_meta(layer)
        meta_layer.train()
        x_in = x.detach().requires_grad_(x.is_floating_point())
        flops, act, y = _trace_layer(meta_layer, x_in)
        if not isinstance(y, torch.Tensor):
            raise TypeError(f"trace_spec: layer {i} ({type(layer).__name__}) must return one tensor")
        out.append(
            Layer(
                name=str(getattr(layer, "spec_name", None) or f"layer_{i}"),
                kind=str(getattr(layer, "kind", "custom")),
                params=params,
                fwd_flops_per_sample=flops / example_batch,
                act_bytes_per_sample=act // example_batch,
                out_bytes_per_sample=_nbytes(y) // example_batch,
                tp_shard=TPShard(str(getattr(layer, "tp_shard", TPShard.REPLICATED))),
                tp_units=int(getattr(layer, "tp_units", 1)),
            )
        )
        x = y.detach()
    for m, t in zip(layers, was_training, strict=True):
        m.train(t)
    arch = arch if arch is not None else getattr(model, "arch", None)
    return ModelSpec(name=name, family=family, seq_len=seq_len, layers=tuple(out), arch=arch)


def _first_input(
    model: nn.Module, seq_len: int, batch: int, example_input: torch.Tensor | None
) -> torch.Tensor:
    if example_input is not None:
        return torch.empty_like(example_input, device=META)
    make_batch = getattr(model, "make_batch", None)
    if make_batch is None:
        raise ValueError("trace_spec: pass `example_input` (the model has no make_batch)")
    inputs, _ = make_batch(batch, seq_len, device=META)
    return inputs


def _new_params(layer: nn.Module, seen: set[int]) -> int:
    """Parameters of ``layer`` not already counted in an earlier layer (tied weights count once)."""
    n = 0
    for p in layer.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            n += p.numel()
    return n


def _on_meta(layer: nn.Module) -> nn.Module:
    """The layer itself if it already lives on meta, else a meta copy (only shapes are needed)."""
    tensors = list(layer.parameters()) + list(layer.buffers())
    if all(t.device.type == "meta" for t in tensors):
        return layer
    return copy.deepcopy(layer).to(META)


def _storages(tensors: Iterable[torch.Tensor]) -> set[StorageWeakRef]:
    return {StorageWeakRef(t.untyped_storage()) for t in tensors}


def _trace_layer(layer: nn.Module, x: torch.Tensor) -> tuple[float, int, torch.Tensor]:
    """(forward FLOPs, bytes of unique non-parameter storages saved for backward, output) of one call."""
    owned = _storages(list(layer.parameters()) + list(layer.buffers()))
    saved: dict[StorageWeakRef, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ref = StorageWeakRef(t.untyped_storage())
        if ref not in owned:
            saved[ref] = t.untyped_storage().nbytes()
        return t

    counter = FlopCounterMode(display=False)
    with counter, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = layer(x)
    return float(counter.get_total_flops()), sum(saved.values()), y


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()

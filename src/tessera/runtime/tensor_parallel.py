"""Uneven tensor parallelism: Tessera's own column/row-parallel layers (Whale's hardware-aware split).

DTensor can only shard by ``torch.chunk`` (no 3:1 heads, pytorch/pytorch#144109), so uneven splits are
hand-written the Megatron way: the zoo builds each block with LOCAL shapes (whole heads, FFN columns) and
this module adds the two communication points —
``f`` (identity forward, all-reduce backward) in front of every column-parallel Linear and
``g`` (all-reduce forward, identity backward) behind every row-parallel Linear, whose bias is added once,
after the reduction. Outputs stay sharded between the column and the row layer, so uneven shards are never
all-gathered. Replicated parameters (norms) need no extra sync: ``f``'s backward already makes their
gradients complete on every rank.

Which Linear is which is read from the shapes, not from names: a Linear whose output dimension shrank under
``tp`` is column-parallel, one whose input shrank is row-parallel. The offsets of each rank's slice come from
building the layer on the meta device for every TP rank, so they match the zoo's own rounding of ratios.
"""

from __future__ import annotations

import types
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from tessera.runtime.model import ModelFactory, TPSpec, build_layer
from tessera.runtime.shards import ShardSpec

# Linears whose output is several equal chunks sharded independently (fused q/k/v, fused gate/up).
FUSED_CHUNKS = {"qkv": 3, "c_attn": 3, "gate_up": 2, "w13": 2}


class _CopyToGroup(torch.autograd.Function):
    """f: identity forward, all-reduce of the input gradient backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:  # type: ignore[override]
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromGroup(torch.autograd.Function):
    """g: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:  # type: ignore[override]
        out = x.contiguous().clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        return grad, None


def copy_to_group(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    return _CopyToGroup.apply(x, group)


def reduce_from_group(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    return _ReduceFromGroup.apply(x, group)


def make_column_parallel(linear: nn.Linear, group: dist.ProcessGroup) -> None:
    """In place, so parameter names (checkpoint FQNs) stay those of the zoo."""

    def forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        return F.linear(copy_to_group(x, group), self.weight, self.bias)

    linear.forward = types.MethodType(forward, linear)  # type: ignore[method-assign]


def make_row_parallel(linear: nn.Linear, group: dist.ProcessGroup) -> None:
    def forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        y = reduce_from_group(F.linear(x, self.weight), group)
        return y if self.bias is None else y + self.bias

    linear.forward = types.MethodType(forward, linear)  # type: ignore[method-assign]


@dataclass(frozen=True)
class LayerShards:
    """How one model layer is sharded on this TP rank: a spec per parameter, and the Linear roles."""

    specs: dict[str, ShardSpec]
    columns: tuple[str, ...]
    rows: tuple[str, ...]


def _ranges(full: int, sizes: list[int], rank: int, chunks: int) -> tuple[tuple[int, int], ...]:
    if full % chunks or any(s % chunks for s in sizes):
        raise ValueError(f"fused Linear of {full} rows cannot be cut into {chunks} chunks of sizes {sizes}")
    chunk_full = full // chunks
    off = sum(sizes[:rank]) // chunks
    size = sizes[rank] // chunks
    return tuple((k * chunk_full + off, k * chunk_full + off + size) for k in range(chunks))


def plan_layer_shards(
    factory: ModelFactory,
    layer: int,
    seed: int,
    local: nn.Module,
    full: nn.Module,
    tp: TPSpec,
    *,
    attention: str,
    recompute: str,
) -> LayerShards | None:
    """Shard specs of ``local`` (built with ``tp``) against ``full``; ``None`` when the layer must stay replicated.

    A layer stays replicated (embeddings, output heads) when a non-Linear parameter changed shape (vocab
    sharding needs a vocab-parallel loss this runtime does not use), or when it has column-parallel Linears but
    no row-parallel one to reduce their sharded output.
    """
    full_params = dict(full.named_parameters())
    local_params = dict(local.named_parameters())
    if set(full_params) != set(local_params):
        return None
    columns: list[str] = []
    rows: list[str] = []
    linear_params: set[str] = set()
    for name, mod in local.named_modules():
        if not isinstance(mod, nn.Linear):
            continue
        prefix = f"{name}." if name else ""
        fw = full_params[prefix + "weight"]
        linear_params.add(prefix + "weight")
        if mod.bias is not None:
            linear_params.add(prefix + "bias")
        out_changed = mod.weight.shape[0] != fw.shape[0]
        in_changed = mod.weight.shape[1] != fw.shape[1]
        if out_changed and in_changed:
            raise ValueError(f"layer {layer}: Linear {name!r} sharded on both dimensions")
        if out_changed:
            columns.append(name)
        elif in_changed:
            rows.append(name)
    for name, p in local_params.items():
        if name not in linear_params and p.shape != full_params[name].shape:
            return None
    if not columns or not rows:
        return None
    metas = [
        build_layer(
            factory,
            layer,
            seed,
            tp=TPSpec(tp.degree, r, tp.ratios),
            attention=attention,
            recompute=recompute,
            meta=True,
        )
        for r in range(tp.degree)
    ]
    meta_params = [dict(m.named_parameters()) for m in metas]
    specs: dict[str, ShardSpec] = {}
    for name, p in local_params.items():
        fshape = tuple(full_params[name].shape)
        if tuple(p.shape) == fshape:
            specs[name] = ShardSpec(fshape)
            continue
        dim = next(d for d in range(p.dim()) if p.shape[d] != fshape[d])
        sizes = [int(mp[name].shape[dim]) for mp in meta_params]
        module_name = name.rsplit(".", 1)[0].rsplit(".", 1)[-1] if "." in name else ""
        chunks = FUSED_CHUNKS.get(module_name, 1) if dim == 0 else 1
        specs[name] = ShardSpec(fshape, dim, _ranges(fshape[dim], sizes, tp.rank, chunks))
    return LayerShards(specs, tuple(columns), tuple(rows))


def install_tp(local: nn.Module, shards: LayerShards, group: dist.ProcessGroup) -> None:
    """Add the f/g communication to the Linears of an uneven-TP layer."""
    mods = dict(local.named_modules())
    for name in shards.columns:
        make_column_parallel(mods[name], group)
    for name in shards.rows:
        make_row_parallel(mods[name], group)

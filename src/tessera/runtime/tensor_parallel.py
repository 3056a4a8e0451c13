"""Uneven tensor parallelism: Tessera's own column/row-parallel layers (Whale's hardware-aware split).

DTensor can only shard by ``torch.chunk`` (no 3:1 heads, pytorch/pytorch#144109), so uneven splits are
hand-written the Megatron way: the zoo builds each block with LOCAL shapes (whole heads, FFN columns) and
this module adds the two communication points —
``f`` (identity forward, all-reduce backward) in front of every column-parallel Linear and
``g`` (all-reduce forward, identity backward) behind every row-parallel Linear, whose bias is added once,
after the reduction. Outputs stay sharded between the column and the row layer, so uneven shards are never
all-gathered. Replicated parameters (norms) need no extra sync: ``f``'s backward already makes their
gradients complete on every rank.

Embeddings and output heads split along the vocabulary (Megatron's VocabParallelEmbedding and parallel
cross-entropy), so the last stage of a deep pipeline holds and computes only its share of the V x h head:
a vocab-sharded token embedding (a module with ``vocab_start``, ids outside its rows give zeros) is followed
by ``g``; a column-parallel Linear with no row-parallel partner is the model's output, its logits stay
vocab-sharded and :func:`tessera.nn.vocab_parallel.vocab_parallel_cross_entropy` computes the loss with three
small all-reduces.

Which Linear is which is read from the shapes, not from names: a Linear whose output dimension shrank under
``tp`` is column-parallel, one whose input shrank is row-parallel. ``transformers``' ``Conv1D`` (GPT-2's
projections: a Linear whose weight is stored transposed, ``[in, out]``) counts as a Linear with its dimensions
swapped. The offsets of each rank's slice come from building the layer on the meta device for every TP rank,
so they match the zoo's own rounding of ratios.
"""

from __future__ import annotations

import types
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from tessera.nn.common import weight_out_dim
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


def _project(mod: nn.Module, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    if weight_out_dim(mod) == 1:  # Conv1D: x @ W (+ b), as its own forward computes it
        y = x.reshape(-1, x.shape[-1])
        y = torch.mm(y, mod.weight) if bias is None else torch.addmm(bias, y, mod.weight)
        return y.view(*x.shape[:-1], y.shape[-1])
    return F.linear(x, mod.weight, bias)


def make_column_parallel(linear: nn.Module, group: dist.ProcessGroup) -> None:
    """In place, so parameter names (checkpoint FQNs) stay those of the zoo."""

    def forward(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return _project(self, copy_to_group(x, group), self.bias)

    linear.forward = types.MethodType(forward, linear)  # type: ignore[method-assign]


def make_vocab_parallel(embedding: nn.Module, group: dist.ProcessGroup) -> None:
    """A vocab-sharded lookup gives each row from one rank and zeros elsewhere: ``g`` sums it."""
    inner = embedding.forward

    def forward(ids: torch.Tensor) -> torch.Tensor:
        return reduce_from_group(inner(ids), group)

    embedding.forward = forward  # type: ignore[method-assign]


class _GatherFromGroup(torch.autograd.Function):
    """All-gather along the last dimension of uneven pieces (padded to the widest: gloo gathers equal sizes);
    backward keeps this rank's columns of the gradient, which every rank holds whole."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: dist.ProcessGroup, sizes: tuple[int, ...], rank: int):  # type: ignore[override]
        ctx.offset, ctx.size = sum(sizes[:rank]), sizes[rank]
        padded = F.pad(x.contiguous(), (0, max(sizes) - x.shape[-1]))
        pieces = [torch.empty_like(padded) for _ in sizes]
        dist.all_gather(pieces, padded, group=group)
        return torch.cat([p[..., :s] for p, s in zip(pieces, sizes, strict=True)], dim=-1)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        return grad.narrow(-1, ctx.offset, ctx.size).contiguous(), None, None, None


def gather_from_group(
    x: torch.Tensor, group: dist.ProcessGroup, sizes: tuple[int, ...], rank: int
) -> torch.Tensor:
    return _GatherFromGroup.apply(x, group, sizes, rank)


@dataclass(frozen=True)
class Gathered:
    """A module cut along its output columns whose output is all-gathered (Whale's lone split): its name,
    every rank's width, this rank's index; a Linear's input gradient is all-reduced too (``f``)."""

    name: str
    sizes: tuple[int, ...]
    rank: int
    linear: bool


def make_gathered(mod: nn.Module, gathered: Gathered, group: dist.ProcessGroup) -> None:
    inner = mod.forward

    def forward(x: torch.Tensor) -> torch.Tensor:
        y = inner(copy_to_group(x, group) if gathered.linear else x)
        return gather_from_group(y, group, gathered.sizes, gathered.rank)

    mod.forward = forward  # type: ignore[method-assign]


def make_row_parallel(linear: nn.Module, group: dist.ProcessGroup) -> None:
    def forward(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
        y = reduce_from_group(_project(self, x, None), group)
        return y if self.bias is None else y + self.bias

    linear.forward = types.MethodType(forward, linear)  # type: ignore[method-assign]


@dataclass(frozen=True)
class LayerShards:
    """How one model layer is sharded on this TP rank: a spec per parameter, and the module roles.

    ``vocab_output``: the first class of this rank's logits when the layer's output stays sharded along the
    classes (a column-parallel Linear with no row-parallel partner: the model's output head), else ``None``.
    ``gathered``: modules whose cut output is all-gathered (:mod:`tessera.runtime.auto_tp`'s lone sources).
    """

    specs: dict[str, ShardSpec]
    columns: tuple[str, ...]
    rows: tuple[str, ...]
    embeddings: tuple[str, ...] = ()
    vocab_output: int | None = None
    gathered: tuple[Gathered, ...] = ()


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
    last: bool,
) -> LayerShards | None:
    """Shard specs of ``local`` (built with ``tp``) against ``full``; ``None`` when the layer must stay replicated.

    Vocab-sharded token embeddings are split; a layer stays replicated when another non-Linear parameter
    changed shape (MoE experts, conv channels), or when it has column-parallel Linears but no row-parallel one
    to reduce their sharded output — unless it is the model's ``last`` layer, whose class-sharded logits go to
    the vocab-parallel loss.
    """
    full_params = dict(full.named_parameters())
    local_params = dict(local.named_parameters())
    if set(full_params) != set(local_params):
        return None
    columns: list[str] = []
    rows: list[str] = []
    out_dims: dict[str, int] = {}  # Linear parameter -> its output dimension
    for name, mod in local.named_modules():
        od = weight_out_dim(mod)
        if od is None:
            continue
        prefix = f"{name}." if name else ""
        fw = full_params[prefix + "weight"]
        out_dims[prefix + "weight"] = od
        if mod.bias is not None:
            out_dims[prefix + "bias"] = 0
        out_changed = mod.weight.shape[od] != fw.shape[od]
        in_changed = mod.weight.shape[1 - od] != fw.shape[1 - od]
        if out_changed and in_changed:
            raise ValueError(f"layer {layer}: Linear {name!r} sharded on both dimensions")
        if out_changed:
            columns.append(name)
        elif in_changed:
            rows.append(name)
    embeddings: set[str] = set()
    for name, p in local_params.items():
        if name in out_dims or p.shape == full_params[name].shape:
            continue
        owner = name.rpartition(".")[0]
        if (
            not hasattr(local.get_submodule(owner), "vocab_start")
            or p.shape[1:] != full_params[name].shape[1:]
        ):
            return None
        embeddings.add(owner)
    vocab_output = len(columns) == 1 and not rows and last
    if not embeddings and not (columns and (rows or vocab_output)):
        return None
    if embeddings and (columns or rows):
        raise ValueError(f"layer {layer}: a vocab-sharded embedding beside sharded Linears")
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
        chunks = FUSED_CHUNKS.get(module_name, 1) if dim == out_dims.get(name, 0) else 1
        specs[name] = ShardSpec(fshape, dim, _ranges(fshape[dim], sizes, tp.rank, chunks))
    first_class = None
    if vocab_output:
        (first_class, _), *_ = specs[f"{columns[0]}.weight"].ranges
    return LayerShards(specs, tuple(columns), tuple(rows), tuple(sorted(embeddings)), first_class)


def install_tp(local: nn.Module, shards: LayerShards, group: dist.ProcessGroup) -> None:
    """Add the f/g communication to the Linears and vocab-sharded embeddings of a TP layer, and the gathers."""
    mods = dict(local.named_modules())
    for name in shards.embeddings:
        make_vocab_parallel(mods[name], group)
    for name in shards.columns:
        make_column_parallel(mods[name], group)
    for name in shards.rows:
        make_row_parallel(mods[name], group)
    for gathered in shards.gathered:
        make_gathered(mods[gathered.name], gathered, group)

"""Whale's ``split`` for plain user code: Tessera shards a layer's Linear and Embedding modules itself.

Whale (§3.2) lets a user mark a module with ``split(n)`` and write no shard-aware code: the framework picks,
by pattern, how each weight is cut so that the least is communicated. A layer whose factory ignores ``tp``
(it comes back whole) is traced with ``torch.fx`` and cut by three rules, applied in this order:

1. **Pairs** (Megatron's MLP pattern, one all-reduce forward and one backward per pair): column-parallel
   sources — Linears, or Embeddings split along their hidden columns — whose outputs reach, through
   elementwise ops only (activations, dropout, sums and products of sharded values, scalars), nothing but the
   inputs of Linears; those Linears become row-parallel. SwiGLU's gate and up projections are two sources of
   one pair; an embedding feeding a Linear needs no all-reduce at all.
2. **Lone sources**: any other Linear or Embedding is split along its output columns and its output
   all-gathered (a gather moves half the bytes of the all-reduce a row split would need).
3. Everything else (norms, convolutions, a module called twice, a layer fx cannot trace) stays replicated
   in the TP group.

The result is a :class:`~tessera.runtime.tensor_parallel.LayerShards` like the one the zoo's own shard-aware
layers produce (its ``install_tp`` adds the communication), so checkpoints, gradient assembly and resharding
treat both alike.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Iterator

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

from tessera.nn.common import shard_sizes
from tessera.runtime.model import TPSpec
from tessera.runtime.shards import ShardSpec
from tessera.runtime.tensor_parallel import Gathered, LayerShards

log = logging.getLogger(__name__)

# Ops that act on each element alone (or broadcast a scalar): a tensor sharded along its last dimension stays
# sharded the same way through them.
_ELEMENTWISE_FUNCTIONS = {
    operator.add, operator.sub, operator.mul, operator.truediv, operator.neg,
    torch.add, torch.sub, torch.mul, torch.div, torch.neg, torch.relu, torch.sigmoid, torch.tanh, torch.exp,
    F.relu, F.gelu, F.silu, F.sigmoid, F.tanh, F.leaky_relu, F.elu, F.mish, F.dropout,
}  # fmt: skip
_ELEMENTWISE_METHODS = {
    "add", "sub", "mul", "div", "neg", "relu", "sigmoid", "tanh", "exp", "contiguous", "float", "to",
}  # fmt: skip
_ELEMENTWISE_MODULES = (
    nn.ReLU, nn.GELU, nn.SiLU, nn.Sigmoid, nn.Tanh, nn.LeakyReLU, nn.ELU, nn.Mish, nn.Dropout, nn.Identity,
)  # fmt: skip


class _Graph:
    """The traced layer with the questions the rules ask of its nodes."""

    def __init__(self, layer: nn.Module, graph: fx.Graph) -> None:
        self.layer = layer
        self.nodes = list(graph.nodes)
        calls: dict[str, int] = {}
        for n in self.nodes:
            if n.op == "call_module":
                calls[str(n.target)] = calls.get(str(n.target), 0) + 1
        read = {str(n.target).rpartition(".")[0] for n in self.nodes if n.op == "get_attr"}
        self.called_once = {t for t, c in calls.items() if c == 1 and t not in read}

    def module(self, node: fx.Node) -> nn.Module | None:
        """The module a node calls, when it may be cut: called once, its weights not read elsewhere."""
        if node.op != "call_module" or str(node.target) not in self.called_once:
            return None
        return self.layer.get_submodule(str(node.target))

    def is_linear(self, node: fx.Node) -> bool:
        return type(self.module(node)) is nn.Linear

    def is_source(self, node: fx.Node) -> bool:
        mod = self.module(node)
        return mod is not None and _is_source(mod)

    def width(self, node: fx.Node) -> int:
        return _width(self.module(node))  # type: ignore[arg-type]

    def is_elementwise(self, node: fx.Node) -> bool:
        if node.op == "call_function":
            return node.target in _ELEMENTWISE_FUNCTIONS
        if node.op == "call_method":
            return node.target in _ELEMENTWISE_METHODS
        if node.op == "call_module":
            return isinstance(self.layer.get_submodule(str(node.target)), _ELEMENTWISE_MODULES)
        return False


def _tensor_inputs(node: fx.Node) -> Iterator[fx.Node]:
    for a in (*node.args, *node.kwargs.values()):
        if isinstance(a, fx.Node):
            yield a
        elif isinstance(a, (tuple, list)):
            yield from (x for x in a if isinstance(x, fx.Node))


def _pair(g: _Graph, seed: fx.Node, taken: set[fx.Node]) -> tuple[set[fx.Node], set[fx.Node]] | None:
    """Rule 1 from ``seed``: (column sources, row Linears), or ``None`` when a sharded value would reach
    anything but elementwise ops and Linear inputs."""
    columns, rows, sharded = {seed}, set(), set()
    frontier = [seed]
    while frontier:
        node = frontier.pop()
        if node in sharded:
            continue
        sharded.add(node)
        for user in node.users:
            if g.is_linear(user) and user.args[0] is node and len(user.args) == 1 and not user.kwargs:
                if user in taken or user in columns:
                    return None
                rows.add(user)
            elif g.is_elementwise(user):
                for other in _tensor_inputs(user):
                    if other in sharded or other in frontier:
                        continue
                    if not g.is_source(other) or other in taken or other in rows:
                        return None  # a replicated tensor beside a sharded one
                    columns.add(other)
                    frontier.append(other)
                frontier.append(user)
            else:
                return None
    if not rows or any(g.width(c) != g.width(seed) for c in columns):
        return None
    if any(g.module(r).in_features != g.width(seed) for r in rows):  # type: ignore[union-attr]
        return None
    return columns, rows


def _sizes(full: int, tp: TPSpec) -> tuple[int, ...]:
    return tuple(shard_sizes(full, tp.ratios or (1.0,) * tp.degree))


def _ranges(full: int, tp: TPSpec) -> tuple[tuple[int, int], ...]:
    sizes = _sizes(full, tp)
    start = sum(sizes[: tp.rank])
    return ((start, start + sizes[tp.rank]),)


def _width(mod: nn.Module) -> int:
    return mod.out_features if isinstance(mod, nn.Linear) else mod.embedding_dim  # type: ignore[return-value]


def _is_source(mod: nn.Module) -> bool:
    return type(mod) is nn.Linear or (type(mod) is nn.Embedding and mod.max_norm is None)


def plan_auto_shards(layer: nn.Module, tp: TPSpec) -> LayerShards | None:
    """Rules 1–3 on a whole ``layer`` for this rank; ``None`` when nothing can be cut (replicated). A layer
    that is itself a Linear or Embedding is a lone source."""
    if _is_source(layer):
        columns, rows, lone = [], [], ([("", layer)] if _width(layer) >= tp.degree else [])
    else:
        found = _roles(layer, tp)
        if found is None:
            return None
        columns, rows, lone = found
    if not (columns or lone):
        return None
    specs: dict[str, ShardSpec] = {}
    for name, mod in (*columns, *lone):
        cut = _ranges(_width(mod), tp)
        if isinstance(mod, nn.Linear):
            specs[_join(name, "weight")] = ShardSpec(tuple(mod.weight.shape), 0, cut)
            if mod.bias is not None:
                specs[_join(name, "bias")] = ShardSpec(tuple(mod.bias.shape), 0, cut)
        else:
            specs[_join(name, "weight")] = ShardSpec(tuple(mod.weight.shape), 1, cut)
    for name, mod in rows:
        specs[_join(name, "weight")] = ShardSpec(tuple(mod.weight.shape), 1, _ranges(mod.in_features, tp))
    for name, p in layer.named_parameters():
        specs.setdefault(name, ShardSpec(tuple(p.shape)))  # norms, a row's bias (added after the reduction)
    return LayerShards(
        specs=specs,
        columns=tuple(n for n, m in columns if isinstance(m, nn.Linear)),  # an embedding's ids need no f
        rows=tuple(n for n, _ in rows),
        gathered=tuple(
            Gathered(n, _sizes(_width(m), tp), tp.rank, isinstance(m, nn.Linear)) for n, m in lone
        ),
    )


_Named = list[tuple[str, nn.Module]]


def _roles(layer: nn.Module, tp: TPSpec) -> tuple[_Named, _Named, _Named] | None:
    """(column sources, row Linears, lone sources) of a traced layer, in graph order; ``None``: untraceable."""
    try:
        graph = fx.Tracer().trace(layer)
    except Exception as exc:  # data-dependent control flow, unsupported Python: the layer stays whole
        log.info(
            "split: %s stays replicated in its TP group: torch.fx cannot trace it (%s)", type(layer), exc
        )
        return None
    g = _Graph(layer, graph)
    taken: set[fx.Node] = set()
    columns: list[fx.Node] = []
    rows: list[fx.Node] = []
    sources = [n for n in g.nodes if g.is_source(n)]
    for node in sources:
        if node in taken:
            continue
        pair = _pair(g, node, taken) if g.width(node) >= tp.degree else None
        if pair is not None and all(g.width(c) >= tp.degree for c in pair[0]):
            taken |= pair[0] | pair[1]
            columns += sorted(pair[0], key=g.nodes.index)
            rows += sorted(pair[1], key=g.nodes.index)
    lone = [n for n in sources if n not in taken and g.width(n) >= tp.degree]

    def named(nodes: list[fx.Node]) -> _Named:
        return [(str(n.target), g.module(n)) for n in nodes]  # type: ignore[misc]

    return named(columns), named(rows), named(lone)


def _join(prefix: str, attr: str) -> str:
    return f"{prefix}.{attr}" if prefix else attr


def cut_in_place(layer: nn.Module, specs: dict[str, ShardSpec]) -> None:
    """Replace each cut parameter by its local shard (values as the whole layer had them) and keep the
    modules' size attributes true, so the layer's own forward and ``repr`` see local shapes."""
    with torch.no_grad():
        for name, spec in specs.items():
            owner_name, _, attr = name.rpartition(".")
            owner = layer.get_submodule(owner_name)
            old = getattr(owner, attr)
            setattr(owner, attr, nn.Parameter(spec.slice(old.detach()), requires_grad=old.requires_grad))
    for mod in layer.modules():
        if isinstance(mod, nn.Linear):
            mod.out_features, mod.in_features = mod.weight.shape
        elif isinstance(mod, nn.Embedding):
            mod.embedding_dim = mod.weight.shape[1]


def split_units(layer: nn.Module) -> int | None:
    """The most TP ranks the automatic split can cut ``layer`` over (the narrowest dimension it cuts: every
    rank keeps at least one column), or ``None`` when it stays whole: what the planner prices."""
    shards = plan_auto_shards(layer, TPSpec(1, 0))
    if shards is None:
        return None
    return min(spec.full_shape[spec.dim] for spec in shards.specs.values() if not spec.replicated)

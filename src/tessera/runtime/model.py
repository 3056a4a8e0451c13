"""Model factories and the canonical initial weights every plan starts from.

Exactness across plans (and resharded resumes) needs every plan to hold the *same* weights. A zoo model's
initialization consumes the global RNG layer after layer, so a stage built alone would differ from the same
layers built inside the full model. Tessera therefore defines the initial weights of model layer ``i`` as
those of layer ``i`` built alone under seed ``(seed, i)``: any rank can rebuild exactly its own layers, and a
single-process reference built the same way agrees bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn


@dataclass(frozen=True)
class TPSpec:
    """One rank's share of a tensor-parallel group (the runtime's neutral form of the zoo's ``TPShare``)."""

    degree: int
    rank: int
    ratios: tuple[float, ...] = ()


class ModelFactory(Protocol):
    """Builds model layers ``[start, end)``; with ``tp`` the blocks have LOCAL shard shapes, no communication
    — or their whole shapes, when the factory ignores ``tp`` (plain user code): the runtime then cuts them
    itself by Whale's patterns (:mod:`tessera.runtime.auto_tp`).

    The returned module has ``.layers`` (an ``nn.ModuleList``), ``.loss(output, targets)`` (mean loss) and
    ``.make_batch(batch_size, seq_len, device=, generator=)``. It must be picklable (it travels to workers).

    Optional, looked up with ``getattr`` (a factory without them has its layers built whole and then cut):

    * ``loads_own_shards`` on the returned module (``bool``, default ``False``): its layers hold their
      canonical weights as built, read from files — with ``tp`` only this rank's shard of them — so the
      runtime must never build a layer whole to cut it (a pretrained Hugging Face model; ``False`` from
      scratch, where the canonical weights are the whole layer's seeded init). ``build_stage`` then builds the
      whole layer on meta only, for the shapes its shard specs are taken against.
    * ``without_weights() -> ModelFactory`` and ``read_rows(rows) -> dict[str, Tensor]`` (with
      ``loads_own_shards``): the same model whose layers keep their parameters on meta, unread (buffers
      built), and a read of rows ``[start, stop)`` along dim 0 (``None``: whole) of parameters named
      ``layers.{i}.{name}``. A ZeRO-3 rank (FSDP2) shards the skeleton and reads only its ``Shard(0)`` rows.
    """

    def __call__(
        self, *, layer_range: tuple[int, int] | None, tp: TPSpec | None, attention: str, recompute: str
    ) -> nn.Module: ...


@dataclass(frozen=True)
class ZooModel:
    """A model of ``tessera.models.zoo`` by name (the default factory of a Plan).

    ``overrides`` replaces architecture fields, e.g. ``(("dropout", 0.0),)`` for exactness checks: dropout
    masks depend on how samples are spread over ranks, so only dropout-free runs can match a reference.

    A name that is not in the zoo but names a Hugging Face model this machine holds (a ``save_pretrained``
    directory or a repository in the local cache) builds the real ``transformers`` model with its weights
    (``tessera.nn.hf.HFModel``), so a Plan whose model is such a directory runs as it is.
    """

    name: str
    overrides: tuple[tuple[str, Any], ...] = ()

    def __call__(
        self, *, layer_range: tuple[int, int] | None, tp: TPSpec | None, attention: str, recompute: str
    ) -> nn.Module:
        from tessera.nn import hf as hf_nn

        if hf_nn.names_hf_model(self.name):
            hf = hf_nn.HFModel(self.name, overrides=self.overrides)
            return hf(layer_range=layer_range, tp=tp, attention=attention, recompute=recompute)
        from tessera.nn.common import TPShare
        from tessera.nn.zoo import build_named

        share = None
        if tp is not None:
            share = TPShare(degree=tp.degree, rank=tp.rank, ratios=tuple(tp.ratios) or None)
        return build_named(
            self.name,
            self.overrides,
            attention=attention,
            recompute=recompute,
            layer_range=layer_range,
            tp=share,
        )

    def without_weights(self) -> ModelFactory:
        """The Hugging Face model this name holds, its parameters left unread (``ModelFactory``'s option)."""
        return self._hf().without_weights()

    def read_rows(self, rows: Mapping[str, tuple[int, int] | None]) -> dict[str, torch.Tensor]:
        """Rows of the Hugging Face model's parameters (``ModelFactory``'s option)."""
        return self._hf().read_rows(rows)

    def _hf(self) -> Any:
        from tessera.nn import hf as hf_nn

        if not hf_nn.names_hf_model(self.name):
            raise TypeError(
                f"model: {self.name!r} is a zoo model; only a Hugging Face model reads its own rows"
            )
        return hf_nn.HFModel(self.name, overrides=self.overrides)


@dataclass(frozen=True)
class CallableModel:
    """Wraps ``fn(layer_range=, tp=, attention=, recompute=)`` given as an importable ``module:function``."""

    target: str

    def __call__(
        self, *, layer_range: tuple[int, int] | None, tp: TPSpec | None, attention: str, recompute: str
    ) -> nn.Module:
        import importlib

        mod, _, fn = self.target.partition(":")
        build: Callable[..., nn.Module] = getattr(importlib.import_module(mod), fn)
        return build(layer_range=layer_range, tp=tp, attention=attention, recompute=recompute)


def layer_seed(seed: int, layer: int) -> int:
    return (seed * 1_000_003 + layer * 7_919 + 17) % (2**63)


def build_layer(
    factory: ModelFactory,
    layer: int,
    seed: int,
    *,
    tp: TPSpec | None = None,
    attention: str = "flash",
    recompute: str = "none",
    meta: bool = False,
) -> nn.Module:
    """Model layer ``layer`` alone, initialized under its own seed (see the module docstring)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(layer_seed(seed, layer))
        if meta:
            with torch.device("meta"):
                m = factory(layer_range=(layer, layer + 1), tp=tp, attention=attention, recompute=recompute)
        else:
            m = factory(layer_range=(layer, layer + 1), tp=tp, attention=attention, recompute=recompute)
    return m.layers[0]


def tied_groups(
    factory: ModelFactory, attention: str = "flash", recompute: str = "none"
) -> tuple[tuple[str, ...], ...]:
    """FQN groups of parameters the whole model shares (GPT's tied embedding / output head), first = canonical.

    Found by building the full model on the meta device and looking for one Parameter under several names, so
    the runtime needs no knowledge of which zoo models tie what.
    """
    with torch.device("meta"):
        model = factory(layer_range=None, tp=None, attention=attention, recompute=recompute)
    by_id: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if name.startswith("layers."):
            by_id.setdefault(id(p), []).append(name)
    return tuple(tuple(sorted(v, key=_layer_key)) for v in by_id.values() if len(v) > 1)


def _layer_key(fqn: str) -> tuple[int, str]:
    parts = fqn.split(".")
    return (int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else -1, fqn)


def layer_of(fqn: str) -> int:
    return _layer_key(fqn)[0]


def initial_state(factory: ModelFactory, n_layers: int, seed: int) -> dict[str, torch.Tensor]:
    """Canonical initial weights keyed by model-layer FQN (``layers.{i}.{name}``) — what every plan starts from.

    Tied parameters take the value of their canonical (first) member.
    """
    state: dict[str, torch.Tensor] = {}
    for i in range(n_layers):
        for name, t in build_layer(factory, i, seed).state_dict().items():
            state[f"layers.{i}.{name}"] = t
    for group in tied_groups(factory):
        for alias in group[1:]:
            state[alias] = state[group[0]]
    return state


def reference_model(factory: ModelFactory, n_layers: int, seed: int, **kw: Any) -> nn.Module:
    """The whole model as one module holding the canonical initial weights: the single-process reference."""
    model = factory(
        layer_range=None,
        tp=None,
        attention=kw.get("attention", "flash"),
        recompute=kw.get("recompute", "none"),
    )
    model.load_state_dict(initial_state(factory, n_layers, seed))
    return model

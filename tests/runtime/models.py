"""The model factories the runtime tests use: the zoo's tiny models, dropout off so runs are deterministic."""

from __future__ import annotations

from tessera.runtime import ZooModel


def factory(name: str):
    """A zoo model (``gpt-tiny``, ``llama-tiny``, ``bert-tiny``, ``wrn-tiny``) the runtime can build stage by
    stage (Wide-ResNet has no dropout to turn off)."""
    return ZooModel(name) if name.startswith("wrn") else ZooModel(name, overrides=(("dropout", 0.0),))


def n_layers(name: str) -> int:
    m = factory(name)(layer_range=None, tp=None, attention="flash", recompute="none")
    return len(m.layers)

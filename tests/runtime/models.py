"""The model factories the runtime tests use: the zoo's tiny models when the zoo provides them."""

from __future__ import annotations

from tiny_models import TinyModel

from tessera.runtime import ZooModel


def _zoo_ready() -> bool:
    try:
        from tessera.models import zoo
        from tessera.models.nn_common import TPShare  # noqa: F401

        zoo.build_model("gpt-tiny", layer_range=(0, 1))
        return True
    except Exception:  # noqa: BLE001 - the zoo is being written concurrently
        return False


ZOO = _zoo_ready()


def factory(name: str):
    """``gpt-tiny`` / ``llama-tiny``: the zoo's when available, else the local stand-in with the same interface."""
    return ZooModel(name, overrides=(("dropout", 0.0),)) if ZOO else TinyModel(name)


def n_layers(name: str) -> int:
    if ZOO:
        m = factory(name)(layer_range=None, tp=None, attention="flash", recompute="none")
        return len(m.layers)
    return TinyModel(name).n_layers

"""The model zoo's catalog: named models of every family, as analytic ModelSpecs.

Specs (``get_spec``, ``list_models``, ``get_arch``) are closed forms and need no torch. The families' PyTorch
modules are the torch side's (``tessera.nn.zoo``, whose ``build_model`` builds a name or an arch listed here).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import cache
from types import ModuleType

from tessera.models.spec import ConvArch, ModelSpec, TransformerArch
from tessera.models.zoo import bert, gpt, llama, moe, wide_resnet
from tessera.models.zoo.base import ModelInfo

FAMILIES: dict[str, ModuleType] = {
    gpt.FAMILY: gpt,
    llama.FAMILY: llama,
    bert.FAMILY: bert,
    moe.FAMILY: moe,
    wide_resnet.FAMILY: wide_resnet,
}


class UnknownModelError(KeyError):
    """A zoo name that does not exist; the message lists the nearest names."""

    def __init__(self, name: str, known: list[str]) -> None:
        near = difflib.get_close_matches(name, known, n=5, cutoff=0.5)
        hint = (
            f"; did you mean {', '.join(repr(n) for n in near)}?"
            if near
            else f"; known models: {', '.join(known)}"
        )
        self.message = f"unknown model {name!r}{hint}"
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class ZooEntry:
    name: str
    family: str
    params: int
    description: str


def _models() -> dict[str, tuple[str, ModelInfo]]:
    return {name: (fam, info) for fam, mod in FAMILIES.items() for name, info in mod.MODELS.items()}


def _lookup(name: str) -> tuple[str, ModelInfo]:
    models = _models()
    key = name.strip().lower()
    if key not in models:
        raise UnknownModelError(name, sorted(models))
    return models[key]


def list_models() -> list[ZooEntry]:
    """Every zoo model with its family, parameter count and provenance."""
    return [
        ZooEntry(name, fam, get_spec(name).params, info.description)
        for name, (fam, info) in _models().items()
    ]


def get_arch(name: str) -> TransformerArch | ConvArch:
    return _lookup(name)[1].arch


def family_of(name: str) -> str:
    return _lookup(name)[0]


def get_spec(name: str, seq_len: int | None = None) -> ModelSpec:
    """Analytic spec of a zoo model for ``seq_len`` tokens per sample (the family's default if None)."""
    return _spec(name.strip().lower(), seq_len)


@cache
def _spec(name: str, seq_len: int | None) -> ModelSpec:
    fam, info = _lookup(name)
    return FAMILIES[fam].spec(name, info.arch, info.seq_len if seq_len is None else seq_len)


def infer_family(arch: TransformerArch | ConvArch) -> str:
    """The family whose implementation fits an arch: conv -> wide_resnet, experts -> moe, bidirectional
    -> bert, RMSNorm/SwiGLU/RoPE -> llama, otherwise gpt."""
    if isinstance(arch, ConvArch):
        return wide_resnet.FAMILY
    if arch.n_experts > 0:
        return moe.FAMILY
    if not arch.causal:
        return bert.FAMILY
    if arch.norm == "rmsnorm" or arch.mlp == "swiglu" or arch.position == "rope":
        return llama.FAMILY
    return gpt.FAMILY


__all__ = [
    "FAMILIES",
    "ModelInfo",
    "UnknownModelError",
    "ZooEntry",
    "family_of",
    "get_arch",
    "get_spec",
    "infer_family",
    "list_models",
]

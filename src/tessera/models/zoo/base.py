"""What every zoo family module exports: its models (``MODELS``) and an analytic ``spec(...)`` builder."""

from __future__ import annotations

from dataclasses import dataclass

from tessera.models.spec import ConvArch, TransformerArch


@dataclass(frozen=True)
class ModelInfo:
    """A named zoo model: its shape, default tokens per sample, and where the shape comes from."""

    arch: TransformerArch | ConvArch
    seq_len: int
    description: str

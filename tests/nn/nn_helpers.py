"""What the tests of the torch-side modules share."""

from __future__ import annotations

from torch import nn

from tessera.nn.common import Dropout, SelfAttention


def no_dropout(model: nn.Module) -> nn.Module:
    """The model with every dropout off (the zoo's and its attention's), so two builds compare exactly."""
    for m in model.modules():
        if isinstance(m, Dropout):
            m.p = 0.0
        if isinstance(m, SelfAttention):
            m.attn_dropout = 0.0
    return model

"""A zoo model as the runtime builds it: a name, and arch overrides if any, to its family's PyTorch module.

The torch side's one door into the zoo's catalog, so the runtime (which may use only the plan, the torch
model package and torch) never imports the catalog itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from tessera.models import zoo
from tessera.models.nn_common import BlockModel


def build_named(name: str, overrides: Iterable[tuple[str, Any]] = (), **kw: Any) -> BlockModel:
    """``zoo.build_model`` of ``name``, its arch with ``overrides`` (field, value) applied when given."""
    changes = dict(overrides)
    target: Any = replace(zoo.get_arch(name), **changes) if changes else name
    return zoo.build_model(target, **kw)

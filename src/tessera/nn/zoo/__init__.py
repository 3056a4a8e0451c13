"""The zoo's PyTorch modules: a zoo name or an arch to its family's ``BlockModel``.

One module per family (``gpt``, ``llama``, ``bert``, ``moe``, ``wide_resnet``), each imported on first use; what the
transformer families share (the vocabulary-sharded embedding, the LM head, the block header, the model assembly)
is in ``transformer``, which is not a family. The catalog they build from (names, archs, analytic specs) is the base layer's ``tessera.models.zoo``: this package
reads it, it never imports this one, so specs stay torch-free. The runtime (which may use only the plan, this
package and torch) builds its models here and never imports the catalog itself.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tessera.models import zoo
from tessera.models.spec import ConvArch, TransformerArch

if TYPE_CHECKING:
    from tessera.nn.common import BlockModel

# the families, each one module of this package named for it
FAMILIES = ("gpt", "llama", "bert", "moe", "wide_resnet")


def build_model(
    name_or_arch: str | TransformerArch | ConvArch, *, family: str | None = None, **kw: Any
) -> BlockModel:
    """PyTorch model of a zoo name or an arch.

    Keywords: ``attention`` "flash" | "math"; ``recompute`` "none" | "selective" | "full";
    ``layer_range`` (start, end) of the spec's layers (default all); ``tp`` a ``TPShare`` to build one
    rank's shard; ``max_seq_len`` rows of the RoPE tables (LLaMA; default ``arch.max_positions``);
    ``device`` to build on ("meta" allocates nothing). ``family`` overrides ``infer_family`` for an arch.
    """
    if isinstance(name_or_arch, str):
        arch, fam = zoo.get_arch(name_or_arch), zoo.family_of(name_or_arch)
    else:
        arch = name_or_arch
        fam = family or zoo.infer_family(arch)
    if fam not in FAMILIES:
        raise ValueError(f"family: {fam!r} is not one of {', '.join(FAMILIES)}")
    module = importlib.import_module(f"{__name__}.{fam}")
    return module.build(arch, **kw)


def build_named(name: str, overrides: Iterable[tuple[str, Any]] = (), **kw: Any) -> BlockModel:
    """``build_model`` of ``name``, its arch with ``overrides`` (field, value) applied when given."""
    changes = dict(overrides)
    target: Any = replace(zoo.get_arch(name), **changes) if changes else name
    return build_model(target, **kw)


__all__ = ["FAMILIES", "build_model", "build_named"]

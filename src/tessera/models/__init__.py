"""Models as the planner sees them: ModelSpec (ordered layers with params, FLOPs, bytes, TP sharding),
the zoo (analytic specs + PyTorch modules), Hugging Face config import and nn.Module tracing.

The lowest layer of Tessera: imports nothing else of it. Torch is needed only by ``build_model`` and
``trace_spec`` (imported on first use), so specs work in torch-free processes such as the simulator.
"""

from __future__ import annotations

from typing import Any

from tessera.models.hf import HFConfigError, arch_from_hf_config, spec_from_hf_config
from tessera.models.spec import ConvArch, Layer, ModelSpec, TPShard, TransformerArch
from tessera.models.zoo import UnknownModelError, ZooEntry, build_model, get_arch, get_spec, list_models

_LAZY = {
    "trace_spec": "tessera.models.trace",
    "TPShare": "tessera.models.nn_common",
    "shard_sizes": "tessera.models.nn_common",
    "BlockModel": "tessera.models.nn_common",
}


def __getattr__(name: str) -> Any:
    """Torch-backed names load on first access so that importing tessera.models stays torch-free."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tessera.models' has no attribute {name!r}")


__all__ = [
    "BlockModel",
    "ConvArch",
    "HFConfigError",
    "Layer",
    "ModelSpec",
    "TPShard",
    "TPShare",
    "TransformerArch",
    "UnknownModelError",
    "ZooEntry",
    "arch_from_hf_config",
    "build_model",
    "get_arch",
    "get_spec",
    "list_models",
    "shard_sizes",
    "spec_from_hf_config",
    "trace_spec",
]

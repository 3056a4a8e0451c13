"""Models as the planner sees them: ModelSpec (ordered layers with params, FLOPs, bytes, TP sharding),
the zoo's analytic specs and Hugging Face config import.

The lowest layer of Tessera: imports nothing else of it, and no torch, so specs work in torch-free processes
such as the simulator. The torch side (the zoo's modules, ``build_model``, ``trace_spec`` of a user module,
``TPShare``) is ``tessera.nn``, which reads this package and is never read by it.
"""

from __future__ import annotations

from tessera.models.hf import HFConfigError, arch_from_hf_config, spec_from_hf_config
from tessera.models.spec import ConvArch, Layer, ModelSpec, TPShard, TransformerArch
from tessera.models.zoo import UnknownModelError, ZooEntry, get_arch, get_spec, list_models

__all__ = [
    "ConvArch",
    "HFConfigError",
    "Layer",
    "ModelSpec",
    "TPShard",
    "TransformerArch",
    "UnknownModelError",
    "ZooEntry",
    "arch_from_hf_config",
    "get_arch",
    "get_spec",
    "list_models",
    "spec_from_hf_config",
]

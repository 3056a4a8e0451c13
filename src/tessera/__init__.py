"""Tessera: train large models on heterogeneous GPU clusters.

``tessera.plan(job, cluster=...)`` and ``tessera.estimate(model=..., gpu=..., ...)`` are the public entry points;
they are imported on first use so ``import tessera`` stays light for worker processes.
"""

from typing import Any

__all__ = ["estimate", "plan"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from tessera import api

        return getattr(api, name)
    raise AttributeError(f"module 'tessera' has no attribute {name!r}")

"""Tessera: train large models on heterogeneous GPU clusters.

``tessera.plan(job, cluster=...)`` and ``tessera.estimate(model=..., gpu=..., ...)`` are the public entry points;
they are imported on first use so ``import tessera`` stays light for worker processes.
"""

import types
from typing import Any

import tessera.plan as _plan_module  # the Plan contract: standard library only, light for runtime workers

__all__ = ["estimate", "plan"]


class _PlanModule(types.ModuleType):
    """``tessera.plan`` names both the Plan module and the public planning call ``tessera.plan(job, ...)``:
    importing the module must not shadow the function, so the module itself is callable. Installed here, in the
    public face, so the Plan contract imports nothing above it; the planner is imported only when called."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from tessera.api import plan

        return plan(*args, **kwargs)


_plan_module.__class__ = _PlanModule


def __getattr__(name: str) -> Any:
    if name in __all__:
        from tessera import api

        return getattr(api, name)
    raise AttributeError(f"module 'tessera' has no attribute {name!r}")

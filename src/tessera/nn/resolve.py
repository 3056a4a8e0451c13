"""What users type (a zoo name, a Hugging Face config.json, model directory or cached repository id) to the
ModelSpec that memory, the cost model, Cells and the planner price.

A Hugging Face model the runtime trains (a directory or cached repository: weights present) is described from
its ``transformers`` layers built on the meta device (:func:`~tessera.nn.hf.hf_model_spec`): the
parameters, FLOPs, activations and TP sharding of the modules that run. Everything else keeps its closed form
(:func:`tessera.models.resolve.analytic_spec`). It is on the torch side because tracing needs
torch; the closed forms stay importable without it.
"""

from __future__ import annotations

from tessera.models.resolve import analytic_spec, is_hf_model_dir
from tessera.models.spec import ModelSpec


def resolve_spec(model: str, seq_len: int | None = None) -> ModelSpec:
    """The spec a job, plan or estimate of ``model`` at ``seq_len`` tokens is priced with (see the module doc)."""
    if is_hf_model_dir(model):
        from tessera.nn.hf import hf_model_spec

        return hf_model_spec(model, seq_len)
    return analytic_spec(model, seq_len)


__all__ = ["resolve_spec"]

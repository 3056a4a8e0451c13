"""One entry point from what users type (a zoo name, a Hugging Face config.json, model directory or cached
repository id) to a ModelSpec."""

from __future__ import annotations

from pathlib import Path

from tessera.models.spec import ModelSpec


def is_config_path(model: str) -> bool:
    """Whether ``model`` names a Hugging Face model rather than a zoo entry: a config.json (or any file), a
    ``save_pretrained`` directory, or a repository id in the local Hugging Face cache."""
    return model.endswith(".json") or _is_file(model) or is_hf_model_dir(model)


def is_hf_model_dir(model: str) -> bool:
    """A model directory or cached repository (weights, not just a config) — what the runtime can train.

    A zoo name wins over a cached repository of the same name (``gpt2``: give ``openai-community/gpt2``)."""
    from tessera.models.hf_weights import is_hf_model
    from tessera.models.zoo import list_models

    if model.endswith(".json") or _is_file(model) or model in {e.name for e in list_models()}:
        return False
    return is_hf_model(model)


def _is_file(path: str) -> bool:
    """``Path.is_file`` that answers False, not OSError, for a name no file system could hold (too long)."""
    try:
        return Path(path).is_file()
    except (OSError, ValueError):
        return False


def analytic_spec(model: str, seq_len: int | None = None) -> ModelSpec:
    """The closed-form spec of a zoo model or of a Hugging Face model's config (no weights, no torch, no
    download). What plans a job is :func:`tessera.nn.resolve.resolve_spec`: it traces a Hugging Face
    model directory's own modules instead."""
    if is_hf_model_dir(model):
        from tessera.models.hf import spec_from_hf_config
        from tessera.models.hf_weights import locate_model

        return spec_from_hf_config(locate_model(model) / "config.json", seq_len=seq_len)
    if is_config_path(model):
        from tessera.models.hf import spec_from_hf_config

        if not _is_file(model):
            raise ValueError(f"model: no such config file {model!r}")
        return spec_from_hf_config(model, seq_len=seq_len)
    from tessera.models.zoo import get_spec

    return get_spec(model, seq_len=seq_len)

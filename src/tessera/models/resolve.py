"""One entry point from what users type (a zoo name or a Hugging Face config.json path) to a ModelSpec."""

from __future__ import annotations

from pathlib import Path

from tessera.models.spec import ModelSpec


def is_config_path(model: str) -> bool:
    return model.endswith(".json") or _is_file(model)


def _is_file(path: str) -> bool:
    """``Path.is_file`` that answers False, not OSError, for a name no file system could hold (too long)."""
    try:
        return Path(path).is_file()
    except (OSError, ValueError):
        return False


def resolve_spec(model: str, seq_len: int | None = None) -> ModelSpec:
    """The analytic spec of a zoo model, or of a Hugging Face ``config.json`` (no weights, no download)."""
    if is_config_path(model):
        from tessera.models.hf import spec_from_hf_config

        if not _is_file(model):
            raise ValueError(f"model: no such config file {model!r}")
        return spec_from_hf_config(model, seq_len=seq_len)
    from tessera.models.zoo import get_spec

    return get_spec(model, seq_len=seq_len)

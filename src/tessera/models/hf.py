"""Import a Hugging Face ``config.json`` as a TransformerArch / ModelSpec (no download, no transformers).

Supported ``model_type``: gpt2 (-> gpt family), llama, mistral and qwen2 (-> llama), bert (-> bert). The zoo's
single dropout rate takes the config's hidden/residual dropout; mistral's sliding window is ignored
(dense attention, the same FLOPs and memory up to the window).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from tessera.models.spec import ModelSpec, TransformerArch
from tessera.models.zoo import bert, gpt, llama
from tessera.models.zoo.bert import bert_arch
from tessera.models.zoo.llama import llama_arch

SUPPORTED = ("bert", "gpt2", "llama", "mistral", "qwen2")


class HFConfigError(ValueError):
    """A config this importer cannot read; names the field and the reason."""

    def __init__(self, field_name: str, reason: str) -> None:
        super().__init__(f"hf config: {field_name}: {reason}")
        self.field = field_name
        self.reason = reason


def load_config(path_or_dict: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """A config dict from a mapping, a config.json path, or a directory holding config.json."""
    if isinstance(path_or_dict, Mapping):
        return dict(path_or_dict)
    path = Path(path_or_dict)
    if path.is_dir():
        path = path / "config.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise HFConfigError("path", f"{path} does not exist") from None
    except json.JSONDecodeError as e:
        raise HFConfigError("path", f"{path} is not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise HFConfigError("path", f"{path} does not hold a JSON object")
    return data


def _get(cfg: Mapping[str, Any], key: str, kind: type = int, default: Any = ...) -> Any:
    if key not in cfg or cfg[key] is None:
        if default is ...:
            raise HFConfigError(key, f"missing (needed for model_type {cfg.get('model_type')!r})")
        return default
    value = cfg[key]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise HFConfigError(key, f"expected an integer, got {value!r}")
    if kind is float and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise HFConfigError(key, f"expected a number, got {value!r}")
    if kind is bool and not isinstance(value, bool):
        raise HFConfigError(key, f"expected true/false, got {value!r}")
    return kind(value)


def _check_head_dim(cfg: Mapping[str, Any], hidden: int, heads: int) -> None:
    if hidden % heads:
        raise HFConfigError("num_attention_heads", f"{heads} heads do not divide hidden size {hidden}")
    head_dim = cfg.get("head_dim")
    if head_dim is not None and head_dim != hidden // heads:
        raise HFConfigError("head_dim", f"{head_dim} != hidden / heads = {hidden // heads} is not supported")


def _gpt2(cfg: Mapping[str, Any]) -> TransformerArch:
    h, heads = _get(cfg, "n_embd"), _get(cfg, "n_head")
    _check_head_dim(cfg, h, heads)
    inner = _get(cfg, "n_inner", int, None) or 4 * h
    arch = gpt.gpt_arch(
        h,
        _get(cfg, "n_layer"),
        heads,
        vocab=_get(cfg, "vocab_size"),
        max_positions=_get(cfg, "n_positions", int, None) or _get(cfg, "n_ctx"),
        dropout=_get(cfg, "resid_pdrop", float, 0.1),
    )
    tied = _get(cfg, "tie_word_embeddings", bool, True)
    return replace(arch, ffn_hidden=inner, tied_embeddings=tied)


def _llama(cfg: Mapping[str, Any]) -> TransformerArch:
    h, heads = _get(cfg, "hidden_size"), _get(cfg, "num_attention_heads")
    _check_head_dim(cfg, h, heads)
    kv = _get(cfg, "num_key_value_heads", int, heads)
    if heads % kv:
        raise HFConfigError("num_key_value_heads", f"{kv} kv heads do not divide {heads} heads")
    if _get(cfg, "mlp_bias", bool, False):
        raise HFConfigError("mlp_bias", "MLP biases are not supported")
    arch = llama_arch(
        h,
        _get(cfg, "num_hidden_layers"),
        heads,
        kv,
        _get(cfg, "intermediate_size"),
        vocab=_get(cfg, "vocab_size"),
        max_positions=_get(cfg, "max_position_embeddings"),
        rope_theta=_get(cfg, "rope_theta", float, 10000.0),
    )
    qwen2 = cfg.get("model_type") == "qwen2"  # q/k/v biases always, no attention_bias field
    return replace(
        arch,
        tied_embeddings=_get(cfg, "tie_word_embeddings", bool, False),
        bias=_get(cfg, "attention_bias", bool, qwen2),
        dropout=_get(cfg, "attention_dropout", float, 0.0),
    )


def _bert(cfg: Mapping[str, Any]) -> TransformerArch:
    h, heads = _get(cfg, "hidden_size"), _get(cfg, "num_attention_heads")
    _check_head_dim(cfg, h, heads)
    arch = bert_arch(
        h,
        _get(cfg, "num_hidden_layers"),
        heads,
        vocab=_get(cfg, "vocab_size"),
        max_positions=_get(cfg, "max_position_embeddings"),
        dropout=_get(cfg, "hidden_dropout_prob", float, 0.1),
    )
    return replace(
        arch,
        ffn_hidden=_get(cfg, "intermediate_size"),
        type_vocab=_get(cfg, "type_vocab_size", int, 2),
        tied_embeddings=_get(cfg, "tie_word_embeddings", bool, True),
    )


_READERS = {
    "gpt2": (_gpt2, gpt),
    "llama": (_llama, llama),
    "mistral": (_llama, llama),
    "qwen2": (_llama, llama),
    "bert": (_bert, bert),
}


def _model_type(cfg: Mapping[str, Any]) -> str:
    mt = cfg.get("model_type")
    if mt is None:
        raise HFConfigError("model_type", "missing (cannot tell which architecture this is)")
    if mt not in _READERS:
        raise HFConfigError("model_type", f"{mt!r} is not supported (supported: {', '.join(SUPPORTED)})")
    return str(mt)


def arch_from_hf_config(path_or_dict: str | Path | Mapping[str, Any]) -> TransformerArch:
    cfg = load_config(path_or_dict)
    return _READERS[_model_type(cfg)][0](cfg)


def spec_from_hf_config(
    path_or_dict: str | Path | Mapping[str, Any], seq_len: int | None = None, *, name: str | None = None
) -> ModelSpec:
    """Analytic spec of the config's model for ``seq_len`` tokens (its max positions by default)."""
    cfg = load_config(path_or_dict)
    mt = _model_type(cfg)
    reader, family = _READERS[mt]
    arch = reader(cfg)
    name = name or str(cfg.get("_name_or_path") or f"hf-{mt}")
    return family.spec(name, arch, arch.max_positions if seq_len is None else seq_len)

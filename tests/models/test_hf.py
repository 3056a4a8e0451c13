"""Hugging Face config import: the two shipped configs reproduce the zoo; bad configs fail clearly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tessera.models import HFConfigError, arch_from_hf_config, get_arch, get_spec, spec_from_hf_config

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize(
    ("file", "zoo"), [("gpt2_config.json", "gpt2"), ("llama2_7b_config.json", "llama2-7b")]
)
def test_configs_reproduce_the_zoo(file: str, zoo: str) -> None:
    spec = spec_from_hf_config(DATA / file)
    ref = get_spec(zoo)
    assert arch_from_hf_config(DATA / file) == get_arch(zoo)
    assert spec.params == ref.params
    assert spec.seq_len == ref.seq_len and spec.family == ref.family
    assert spec.layers == ref.layers


def test_seq_len_and_name() -> None:
    spec = spec_from_hf_config(DATA / "llama2_7b_config.json", 2048, name="llama")
    assert spec.name == "llama" and spec.layers == get_spec("llama2-7b", 2048).layers
    assert spec_from_hf_config(DATA / "gpt2_config.json").name == "gpt2"


def test_directory_and_dict_inputs(tmp_path: Path) -> None:
    cfg = json.loads((DATA / "gpt2_config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert spec_from_hf_config(tmp_path).params == 124_439_808
    assert spec_from_hf_config(cfg).params == 124_439_808


def test_mistral_and_bert() -> None:
    mistral = {
        "model_type": "mistral",
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 32000,
        "max_position_embeddings": 32768,
        "rope_theta": 10000.0,
        "sliding_window": 4096,
    }
    assert spec_from_hf_config(mistral, 4096).params == 7_241_732_096  # Mistral-7B-v0.1
    bert = {
        "model_type": "bert",
        "hidden_size": 1024,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "intermediate_size": 4096,
        "vocab_size": 30522,
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
    }
    assert spec_from_hf_config(bert).layers == get_spec("bert-large").layers


def test_unsupported_model_type_is_named() -> None:
    with pytest.raises(HFConfigError, match=r"model_type: 't5' is not supported \(supported: bert, gpt2"):
        spec_from_hf_config({"model_type": "t5", "d_model": 512})
    with pytest.raises(HFConfigError, match="model_type: missing"):
        spec_from_hf_config({"hidden_size": 4})


def test_missing_or_bad_fields_are_named() -> None:
    cfg = json.loads((DATA / "llama2_7b_config.json").read_text())
    del cfg["intermediate_size"]
    with pytest.raises(HFConfigError, match="intermediate_size: missing") as err:
        spec_from_hf_config(cfg)
    assert err.value.field == "intermediate_size"
    with pytest.raises(HFConfigError, match="n_embd: expected an integer"):
        spec_from_hf_config({"model_type": "gpt2", "n_embd": "768"})
    with pytest.raises(HFConfigError, match="num_key_value_heads"):
        spec_from_hf_config(
            {**json.loads((DATA / "llama2_7b_config.json").read_text()), "num_key_value_heads": 5}
        )
    with pytest.raises(HFConfigError, match="does not exist"):
        spec_from_hf_config(DATA / "nope.json")

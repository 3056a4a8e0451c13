"""Writes the tiny Hugging Face llama that `examples/tiny-llama-data.yaml` fine-tunes (shipped; run this to rebuild
it): a `transformers` LlamaConfig small enough for a CPU, saved with `save_pretrained` (`config.json` and
`model.safetensors`, seeded weights) beside the shipped tokenizer of `data/`, so the model directory carries its
own tokenizer as a Hugging Face checkpoint does. Nothing is downloaded.

    python examples/make_tiny_llama.py
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, LlamaConfig

HERE = Path(__file__).parent
OUT = HERE / "tiny-llama"
TOKENIZER = HERE / "data" / "tiny_tokenizer.json"


def main() -> None:
    vocab = Tokenizer.from_file(str(TOKENIZER)).get_vocab_size()
    config = LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=vocab, max_position_embeddings=128, bos_token_id=None, eos_token_id=1, pad_token_id=None,
    )  # fmt: skip
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(OUT)
    shutil.copyfile(TOKENIZER, OUT / "tokenizer.json")
    n = sum(p.numel() for p in model.parameters())
    print(f"llama, {config.num_hidden_layers} layers, vocabulary {vocab}, {n:,} parameters: {OUT}")


if __name__ == "__main__":
    main()

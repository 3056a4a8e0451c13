"""Training data: seeded synthetic tokens (default), a local text file as bytes, or a tokenized local dataset.

The whole global batch of step ``k`` is a pure function of (seed, k): every plan sees the same samples in
the same order, which is what makes a resharded resume continue the exact loss trajectory. The data
position saved in a checkpoint is therefore just the step. Each source also names its ``identity`` (what the
data is, not where it lies), which the checkpoint records so a resume on other data is refused.

Tokenized datasets (jsonl, parquet, text, ``save_to_disk`` directories) live in ``dataset.py``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tessera.runtime.dataset import TokenizedData, tokenizer_of_model


@dataclass(frozen=True)
class SyntheticData:
    """Random tokens from the model's own ``make_batch`` (a model-aware sampler: tokens or images)."""

    seed: int = 0

    def batch(self, model: torch.nn.Module, step: int, batch_size: int, seq_len: int):
        g = torch.Generator().manual_seed((self.seed * 1_000_003 + step * 31 + 7) % (2**63))
        return model.make_batch(batch_size, seq_len, generator=g)  # type: ignore[operator]

    def identity(self) -> dict[str, Any]:
        return {"kind": "synthetic", "seed": self.seed}


@dataclass(frozen=True)
class TextData:
    """Bytes of a local text file as tokens (byte-level; ids taken modulo ``vocab`` for small models).

    Sample ``i`` of step ``k`` starts at byte ``((k * B + i) * seq_len) mod (len - seq_len - 1)``: a single
    pass over the file in order, wrapping around, reproducible from the step alone.
    """

    path: str
    vocab: int = 256

    def batch(self, model: torch.nn.Module, step: int, batch_size: int, seq_len: int):
        data = _load_bytes(self.path)
        span = len(data) - seq_len - 1
        if span < 1:
            raise ValueError(
                f"data: {self.path} has {len(data)} bytes, fewer than seq_len + 2 = {seq_len + 2}"
            )
        starts = [((step * batch_size + i) * seq_len) % span for i in range(batch_size)]
        rows = np.stack([data[s : s + seq_len + 1] for s in starts]).astype(np.int64) % self.vocab
        tok = torch.from_numpy(rows)
        return tok[:, :-1].contiguous(), tok[:, 1:].contiguous()

    def identity(self) -> dict[str, Any]:
        """The file's content hash (the same bytes elsewhere are the same data) and the id mapping."""
        return {
            "kind": "text",
            "content": hashlib.sha256(_load_bytes(self.path).tobytes()).hexdigest()[:32],
            "vocab": self.vocab,
            "source": self.path,
        }


_CACHE: dict[str, np.ndarray] = {}


def _load_bytes(path: str) -> np.ndarray:
    if path not in _CACHE:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"data: no such text file {path!r}")
        _CACHE[path] = np.frombuffer(p.read_bytes(), dtype=np.uint8)
    return _CACHE[path]


def data_source(
    config: str | dict[str, Any] | None, *, seed: int, model: str | None = None, vocab: int = 256
) -> DataSource | None:
    """The runtime's data from a job spec's ``data`` as plain data (``JobSpec.data_options()``): a path is a
    byte-level text file (as always), a mapping a tokenized dataset whose tokenizer defaults to the model
    directory's. None: synthetic tokens."""
    if config is None:
        return None
    if isinstance(config, str):
        return TextData(config, vocab=vocab)
    cfg = dict(config)
    if cfg.get("tokenizer") is None:
        cfg["tokenizer"] = tokenizer_of_model(model)
    return TokenizedData(**cfg, seed=seed)


def same_data(saved: dict[str, Any] | None, current: dict[str, Any]) -> bool:
    """Whether a checkpoint's data identity is the current one (``source``, the path, may differ). A
    checkpoint that recorded none (written before identities existed) matches anything."""
    if not saved:
        return True
    strip = lambda d: {k: v for k, v in d.items() if k != "source"}  # noqa: E731
    return strip(saved) == strip(current)


DataSource = SyntheticData | TextData | TokenizedData

"""Training data: seeded synthetic tokens (default) or a local text file through a byte-level tokenizer.

The whole global batch of step ``k`` is a pure function of (seed, k): every plan sees the same samples in
the same order, which is what makes a resharded resume continue the exact loss trajectory. The data
position saved in a checkpoint is therefore just the step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch


@dataclass(frozen=True)
class SyntheticData:
    """Random tokens from the model's own ``make_batch`` (a model-aware sampler: tokens or images)."""

    seed: int = 0

    def batch(self, model: torch.nn.Module, step: int, batch_size: int, seq_len: int):
        g = torch.Generator().manual_seed((self.seed * 1_000_003 + step * 31 + 7) % (2**63))
        return model.make_batch(batch_size, seq_len, generator=g)  # type: ignore[operator]


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


_CACHE: dict[str, np.ndarray] = {}


def _load_bytes(path: str) -> np.ndarray:
    if path not in _CACHE:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"data: no such text file {path!r}")
        _CACHE[path] = np.frombuffer(p.read_bytes(), dtype=np.uint8)
    return _CACHE[path]


DataSource = SyntheticData | TextData

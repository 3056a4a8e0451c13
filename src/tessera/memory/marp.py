"""Frenzy's MARP (Memory-Aware Resource Predictor, §IV-A), exactly as published — kept as a named baseline.

    per-GPU bytes = 20·W/t + s·B·h·l·(10/d + 24/(d·t) + 5·a·s/(d·h·t)),   W = V·h + l·(12h² + 13h)

B is the batch the d data-parallel ranks share (so B/d is each rank's micro-batch). Measured against the exact
trace it under-estimates most configurations (see notes/memory-and-time-estimation.md §5); Tessera's own
formula (``formula.py``) replaces it.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def marp_weights(vocab: ArrayLike, hidden: ArrayLike, layers: ArrayLike) -> np.ndarray:
    """Frenzy's parameter-count approximation W = V·h + l·(12h² + 13h)."""
    v, h, l = (np.asarray(x, dtype=np.float64) for x in (vocab, hidden, layers))  # noqa: E741 (the paper's symbols)
    return v * h + l * (12 * h**2 + 13 * h)


def marp_bytes(
    *,
    vocab: ArrayLike,
    hidden: ArrayLike,
    layers: ArrayLike,
    heads: ArrayLike,
    seq_len: ArrayLike,
    batch: ArrayLike,
    dp: ArrayLike = 1,
    tp: ArrayLike = 1,
) -> np.ndarray:
    """Per-GPU bytes predicted by MARP; vectorized over any broadcastable arguments."""
    h, l, a, s, big_b, d, t = (  # noqa: E741 (the paper's symbols)
        np.asarray(x, dtype=np.float64) for x in (hidden, layers, heads, seq_len, batch, dp, tp)
    )
    w = marp_weights(vocab, h, l)
    return 20 * w / t + s * big_b * h * l * (10 / d + 24 / (d * t) + 5 * a * s / (d * h * t))

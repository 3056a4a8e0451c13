"""A user's own model for `tessera submit`: a small classifier with a Whale-style annotation.

    entrypoint: examples/blob_classifier.py:BlobClassifier      # in a job spec (see examples/blob-classifier.yaml)

What the service needs from a model source (the runtime's ModelFactory contract): a callable taking
``layer_range=, tp=, attention=, recompute=`` that builds the layers ``[start, end)`` into ``self.layers``, plus
``loss(output, targets)`` and ``make_batch(batch, seq_len, generator=)``. ``tessera.runtime.replicate()`` marks
the whole network as one data-parallel TaskGraph without fixing a device count, so the scheduler may give it
any number of GPUs of any types; Whale's hardware-aware balance then hands faster GPUs larger batch shares.

The data is learnable on purpose (points around one centre per class), so the loss visibly falls.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import tessera.runtime as tr

FEATURES, HIDDEN, CLASSES, N_LAYERS = 16, 64, 8, 4


class Block(nn.Module):
    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.fc = nn.Linear(d_in, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.fc(x))


class BlobClassifier(nn.Module):
    def __init__(self, *, layer_range=None, tp=None, attention="flash", recompute="none") -> None:
        super().__init__()
        start, end = layer_range or (0, N_LAYERS)
        makers = [
            lambda: Block(FEATURES, HIDDEN),
            lambda: Block(HIDDEN, HIDDEN),
            lambda: Block(HIDDEN, HIDDEN),
            lambda: nn.Linear(HIDDEN, CLASSES),
        ]
        with tr.replicate():  # one data-parallel TaskGraph on however many GPUs the scheduler gives
            self.layers = nn.ModuleList([make() for i, make in enumerate(makers) if start <= i < end])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x

    def loss(self, output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output.float(), targets)

    def make_batch(self, batch_size, seq_len=1, *, device=None, generator=None):
        centres = torch.randn(CLASSES, FEATURES, generator=torch.Generator().manual_seed(1234))
        targets = torch.randint(0, CLASSES, (batch_size,), generator=generator)
        points = centres[targets] + 1.5 * torch.randn(batch_size, FEATURES, generator=generator)
        return points, targets

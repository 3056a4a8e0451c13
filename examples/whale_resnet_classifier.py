"""Whale's hybrid example in Tessera: replicate a small ResNet feature extractor, split a big FC classifier.

    python examples/whale_resnet_classifier.py --replicas 2 --shards 2 --steps 5

The annotations only *record* which layers form which TaskGraph; the runtime turns them into a Plan — stage 0
data-parallel over the backbone, stage 1 tensor-parallel over the classifier, bridged by Tessera's
stage-to-stage transport — and runs it. The model has no shard-aware code: under ``split`` Tessera traces the
classifier and cuts its Linears by Whale's patterns (``fc1`` column-parallel, ``fc2`` row-parallel).
GroupNorm instead of BatchNorm keeps replicas with different batch shares exact (Whale §3.3.1's caveat).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

import tessera.runtime as tr

WIDTH, IMAGE, HIDDEN, CLASSES = 16, 16, 1024, 10
N_LAYERS = 5  # stem, block, block, pool, classifier


class ResBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1, self.norm1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.GroupNorm(4, c)
        self.conv2, self.norm2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.GroupNorm(4, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.norm1(self.conv1(x)))
        return F.relu(x + self.norm2(self.conv2(y)))


class Stem(nn.Sequential):
    def __init__(self) -> None:
        super().__init__(nn.Conv2d(3, WIDTH, 3, padding=1, bias=False), nn.GroupNorm(4, WIDTH), nn.ReLU())


class Pool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(2, 3))


class Classifier(nn.Module):
    """The "big FC" part: features → HIDDEN → classes, written as for one device. Under ``split`` Tessera cuts
    it itself: ``fc1`` by its hidden columns, ``fc2`` by the matching rows (one all-reduce each way)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(WIDTH, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(x)))


class ResNetClassifier(nn.Module):
    def __init__(
        self, *, layer_range=None, tp=None, attention="flash", recompute="none", replicas=2, shards=2
    ) -> None:
        super().__init__()
        start, end = layer_range or (0, N_LAYERS)
        makers = [Stem, lambda: ResBlock(WIDTH), lambda: ResBlock(WIDTH), Pool, Classifier]
        built = [make() if start <= i < end else None for i, make in enumerate(makers)]
        with tr.replicate(replicas):  # registration inside the scope is what tags the backbone layers
            nn.ModuleList([m for m in built[:4] if m is not None])
        with tr.split(shards):
            nn.ModuleList([m for m in built[4:] if m is not None])
        self.layers = nn.ModuleList([m for m in built if m is not None])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x

    def loss(self, output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output.float(), targets)

    def make_batch(self, batch_size, seq_len=1, *, device=None, generator=None):
        targets = torch.randint(0, CLASSES, (batch_size,), generator=generator)
        images = torch.randn(batch_size, 3, IMAGE, IMAGE, generator=generator)
        return images, targets


@dataclass(frozen=True)
class Factory:
    """The runtime's ModelFactory for this model (picklable: it travels to the worker processes)."""

    replicas: int = 2
    shards: int = 2

    def __call__(self, *, layer_range, tp, attention="flash", recompute="none") -> ResNetClassifier:
        return ResNetClassifier(layer_range=layer_range, tp=tp, replicas=self.replicas, shards=self.shards)


def make_plan(replicas: int, shards: int, devices: int | None = None, global_batch: int = 16, micro: int = 4):
    tr.init(tr.Config(num_micro_batch=micro))
    model = Factory(replicas, shards)(layer_range=None, tp=None)
    return tr.plan_from_annotations(
        model, devices or replicas + shards, model_name="whale-resnet-classifier", global_batch=global_batch
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument(
        "--devices", type=int, default=None, help="a multiple of replicas + shards adds nested DP"
    )
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    plan = make_plan(args.replicas, args.shards, args.devices)
    for i, s in enumerate(plan.stages):
        print(f"stage {i}: layers [{s.layer_start}, {s.layer_end}) dp={s.dp_degree} tp={s.tp_degree}")
    result = tr.launch(
        plan, tr.RunOptions(steps=args.steps, model=Factory(args.replicas, args.shards), progress=True)
    )
    print("losses:", " ".join(f"{x:.4f}" for x in result.losses))


if __name__ == "__main__":
    main()

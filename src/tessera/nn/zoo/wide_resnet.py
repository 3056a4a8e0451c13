"""Wide-ResNet in PyTorch: stem, bottleneck blocks, classifier — one pipeline-cuttable layer each.

TP (Megatron's column -> row pair applied to the bottleneck): ``block.conv2`` (the widest, 3x3 conv) is
split by output channels and ``block.conv3`` by input channels, so ``bn2`` holds local channels and
``conv3``'s output is a partial sum the runtime all-reduces before ``bn3``; ``conv1``, ``bn1``, ``bn3``
and the projection stay whole. ``classifier.fc`` is split by classes. The stem is replicated.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tessera.models.spec import ConvArch, TPShard
from tessera.models.zoo.wide_resnet import BlockShape, block_shapes
from tessera.nn.common import (
    Block,
    BlockModel,
    BuildOptions,
    TPShare,
    build_context,
    local_units,
    resolve_range,
)


def conv(c_in: int, c_out: int, k: int, stride: int = 1) -> nn.Conv2d:
    layer = nn.Conv2d(c_in, c_out, k, stride=stride, padding=k // 2, bias=False)
    nn.init.kaiming_normal_(layer.weight, mode="fan_out", nonlinearity="relu")
    return layer


class Stem(Block):
    """7x7/2 conv, BN, ReLU, 3x3/2 max-pool."""

    kind = "stem"

    def __init__(self, arch: ConvArch) -> None:
        super().__init__("stem")
        self.conv = conv(3, arch.base_channels, 7, 2)
        self.bn = nn.BatchNorm2d(arch.base_channels)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(F.relu(self.bn(self.conv(x))), 3, 2, 1)


class Bottleneck(Block):
    """relu(bn3(conv3(relu(bn2(conv2(relu(bn1(conv1(x))))))) + shortcut(x))."""

    kind = "conv"
    tp_shard = TPShard.COLUMNS

    def __init__(self, arch: ConvArch, b: BlockShape, *, recompute: str, tp: TPShare | None) -> None:
        super().__init__(f"stage{b.stage}_block{b.index}", recompute_full=recompute == "full")
        wide = b.filters * arch.width
        self.tp_units = wide
        local = local_units(tp, wide)
        self.conv1 = conv(b.in_channels, b.filters, 1)
        self.bn1 = nn.BatchNorm2d(b.filters)
        self.conv2 = conv(b.filters, local, 3, b.stride)
        self.bn2 = nn.BatchNorm2d(local)
        self.conv3 = conv(local, b.out_channels, 1)
        self.bn3 = nn.BatchNorm2d(b.out_channels)
        self.proj: nn.Module | None = None
        self.proj_bn: nn.Module | None = None
        if b.has_projection:
            self.proj = conv(b.in_channels, b.out_channels, 1, b.stride)
            self.proj_bn = nn.BatchNorm2d(b.out_channels)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        shortcut = x if self.proj is None else self.proj_bn(self.proj(x))  # type: ignore[misc]
        return F.relu(y + shortcut)


class Classifier(Block):
    """Global average pool, then a linear layer to (this rank's share of) the classes."""

    kind = "classifier"
    tp_shard = TPShard.COLUMNS

    def __init__(self, arch: ConvArch, channels: int, *, tp: TPShare | None) -> None:
        super().__init__("classifier")
        self.tp_units = arch.n_classes
        self.fc = nn.Linear(channels, local_units(tp, arch.n_classes))

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.mean(dim=(2, 3)))


def build(arch: ConvArch, **options: Any) -> BlockModel:
    """Layers ``layer_range`` of [stem, blocks..., classifier], ``options`` a ``BuildOptions``'s fields
    (``attention``/``max_seq_len`` unused).

    Selective recompute has no attention core to recompute here and equals no recompute. Full recompute
    re-runs each block's BatchNorms in backward, so running statistics see every batch twice (gradients
    are exact; as with ``torch.utils.checkpoint`` on any BN network).
    """
    opts = BuildOptions(**options)
    recompute, tp = opts.recompute, opts.tp
    shapes = block_shapes(arch)
    n = len(shapes) + 2
    start, end = resolve_range(opts.layer_range, n)
    layers: list[nn.Module] = []
    with build_context(opts.device):
        for j in range(start, end):
            if j == 0:
                layers.append(Stem(arch))
            elif j == n - 1:
                layers.append(Classifier(arch, shapes[-1].out_channels, tp=tp))
            else:
                layers.append(Bottleneck(arch, shapes[j - 1], recompute=recompute, tp=tp))
    if start == 0:
        kind, feature = "image", ()
    elif start == n - 1:
        last = shapes[-1]
        kind, feature = "features", (last.out_channels, last.out_size, last.out_size)
    else:
        b = shapes[start - 1]
        kind, feature = "features", (b.in_channels, b.in_size, b.in_size)
    return BlockModel(
        arch, layers, layer_start=start, n_model_layers=n, input_kind=kind, feature_shape=feature, tp=tp
    )

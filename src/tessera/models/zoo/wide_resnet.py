"""Wide-ResNet family (Zagoruyko & Komodakis 2016) as Alpa builds it (``alpa/model/wide_resnet.py``).

Bottleneck ResNet v1.5: for stage i with F = base_channels * 2**i, a block is 1x1 conv to F, 3x3 conv
(stride 2 in the first block of stages 1-3) to F * width, 1x1 conv to 4F, each followed by BatchNorm,
ReLU after the first two and after the residual sum; a 1x1 projection (+ BN) where the shape changes.
Stem: 7x7/2 conv to base_channels, BN, ReLU, 3x3/2 max-pool; classifier: global average pool + linear.

Crius's Table 2 sizes are Alpa's ``wresnet_specs`` (image 224, 1000 classes, 50 layers):
0.5B = base 224 x width 2, 1B = 320 x 2, 2B = 448 x 2, 4B = 640 x 2, 6.8B = 320 x 16. They count
0.495, 1.005, 1.965, 4.000 and 6.727 B (all within 1.1% of the labels).
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera.models.spec import ConvArch, Layer, ModelSpec, TPShard
from tessera.models.zoo import costs
from tessera.models.zoo.base import ModelInfo

FAMILY = "wide_resnet"

STAGE_BLOCKS: dict[int, tuple[int, ...]] = {
    14: (1, 1, 1, 1),
    26: (2, 2, 2, 2),
    50: (3, 4, 6, 3),
    101: (3, 4, 23, 3),
    152: (3, 8, 36, 3),
    200: (3, 24, 36, 3),
}


def wrn_arch(base: int, width: int, *, depth: int = 50, image: int = 224, classes: int = 1000) -> ConvArch:
    return ConvArch(depth=depth, width=width, image_size=image, n_classes=classes, base_channels=base)


MODELS: dict[str, ModelInfo] = {
    "wrn-0.5b": ModelInfo(wrn_arch(224, 2), 1, "Wide-ResNet-50, base 224, width 2 (Crius/Alpa 0.5B)"),
    "wrn-1b": ModelInfo(wrn_arch(320, 2), 1, "Wide-ResNet-50, base 320, width 2 (Crius/Alpa 1B)"),
    "wrn-2b": ModelInfo(wrn_arch(448, 2), 1, "Wide-ResNet-50, base 448, width 2 (Crius/Alpa 2B)"),
    "wrn-4b": ModelInfo(wrn_arch(640, 2), 1, "Wide-ResNet-50, base 640, width 2 (Crius/Alpa 4B)"),
    "wrn-6.8b": ModelInfo(wrn_arch(320, 16), 1, "Wide-ResNet-50, base 320, width 16 (Crius/Alpa 6.8B)"),
    "wrn-tiny": ModelInfo(
        wrn_arch(8, 2, depth=14, image=64, classes=10), 1, "tiny Wide-ResNet-14 for CPU tests"
    ),
}


@dataclass(frozen=True)
class BlockShape:
    """One bottleneck: input channels and size, bottleneck width F, stride of its 3x3 conv."""

    stage: int
    index: int
    in_channels: int
    in_size: int
    filters: int
    stride: int

    @property
    def out_size(self) -> int:
        return (self.in_size - 1) // self.stride + 1  # 3x3 pad 1 and 1x1 pad 0 agree for any stride

    @property
    def out_channels(self) -> int:
        return 4 * self.filters

    @property
    def has_projection(self) -> bool:
        return self.stride != 1 or self.in_channels != self.out_channels


def stem_size(a: ConvArch) -> tuple[int, int]:
    """(size after the 7x7/2 conv, size after the 3x3/2 max-pool)."""
    conv = (a.image_size + 2 * 3 - 7) // 2 + 1
    return conv, (conv + 2 * 1 - 3) // 2 + 1


def block_shapes(a: ConvArch) -> list[BlockShape]:
    if a.depth not in STAGE_BLOCKS:
        raise ValueError(f"depth {a.depth} is not one of {sorted(STAGE_BLOCKS)}")
    shapes = []
    channels, size = a.base_channels, stem_size(a)[1]
    for s, n in enumerate(STAGE_BLOCKS[a.depth]):
        for j in range(n):
            b = BlockShape(s, j, channels, size, a.base_channels * 2**s, 2 if s > 0 and j == 0 else 1)
            shapes.append(b)
            channels, size = b.out_channels, b.out_size
    return shapes


def batchnorm(c: int, numel: int) -> costs.Cost:
    """Training BatchNorm saves its input and per-channel mean and inverse std."""
    return costs.Cost(params=2 * c, act=costs.F32 * numel + 2 * costs.F32 * c)


def stem_cost(a: ConvArch) -> costs.Cost:
    c, (s1, s2) = a.base_channels, stem_size(a)
    conv = costs.Cost(params=3 * 49 * c, flops=2 * c * s1 * s1 * 3 * 49, act=costs.F32 * 3 * a.image_size**2)
    relu_pool = costs.Cost(act=costs.F32 * c * s1 * s1 + costs.I64 * c * s2 * s2)  # ReLU output, pool indices
    return conv + batchnorm(c, c * s1 * s1) + relu_pool


def block_cost(a: ConvArch, b: BlockShape) -> costs.Cost:
    f, fw, o = b.filters, b.filters * a.width, b.out_channels
    hw_in, hw = b.in_size**2, b.out_size**2
    x = costs.Cost(act=costs.F32 * b.in_channels * hw_in)  # block input (conv1 and projection read it)
    conv1 = costs.Cost(params=b.in_channels * f, flops=2 * f * hw_in * b.in_channels)
    conv2 = costs.Cost(params=9 * f * fw, flops=2 * fw * hw * f * 9)
    conv3 = costs.Cost(params=fw * o, flops=2 * o * hw * fw)
    relus = costs.Cost(act=costs.F32 * (f * hw_in + fw * hw + o * hw))  # ReLU outputs (incl. the block's)
    total = (
        x + conv1 + batchnorm(f, f * hw_in) + conv2 + batchnorm(fw, fw * hw) + conv3 + batchnorm(o, o * hw)
    )
    if b.has_projection:
        total += costs.Cost(params=b.in_channels * o, flops=2 * o * hw * b.in_channels) + batchnorm(o, o * hw)
    return total + relus


def classifier_cost(a: ConvArch, channels: int) -> costs.Cost:
    """Global average pool (saves nothing) + linear with bias (saves the pooled features)."""
    n = a.n_classes
    return costs.Cost(params=channels * n + n, flops=2 * channels * n, act=costs.F32 * channels)


def spec(name: str, a: ConvArch, seq_len: int = 1) -> ModelSpec:
    """Per-image figures; ``seq_len`` (1 by default) is carried along but changes nothing (an image is one
    sample whatever a caller's sequence length says, as ``ModelSpec.with_seq_len`` assumes)."""
    if seq_len < 1:
        raise ValueError(f"model {name!r}: seq_len must be >= 1, got {seq_len}")
    blocks = block_shapes(a)
    c, (_, s2) = a.base_channels, stem_size(a)
    st = stem_cost(a)
    layers = [Layer("stem", "stem", st.params, st.flops, st.act, costs.F32 * c * s2 * s2)]
    for b in blocks:
        bc = block_cost(a, b)
        layers.append(
            Layer(
                f"stage{b.stage}_block{b.index}",
                "conv",
                bc.params,
                bc.flops,
                bc.act,
                costs.F32 * b.out_channels * b.out_size**2,
                TPShard.COLUMNS,
                b.filters * a.width,
            )
        )
    cl = classifier_cost(a, blocks[-1].out_channels)
    layers.append(
        Layer(
            "classifier",
            "classifier",
            cl.params,
            cl.flops,
            cl.act,
            costs.F32 * a.n_classes,
            TPShard.COLUMNS,
            a.n_classes,
        )
    )
    return ModelSpec(name=name, family=FAMILY, seq_len=seq_len, layers=tuple(layers), arch=a)

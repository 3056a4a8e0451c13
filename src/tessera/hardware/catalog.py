"""GPU catalog: the data file ``gpus.yaml`` loaded into immutable ``GPUSpec`` records."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from importlib import resources

import yaml

from tessera.errors import UnknownNameError

# Which peak to use for each training precision: fp32 training runs matmuls in TF32 where the part has it
# (PyTorch's default on Ampere+ for cuDNN convs; matmuls when allow_tf32 is set), else FP32.
_PRECISION_ORDER = {
    "fp32": ("fp32",),
    "tf32": ("tf32", "fp32"),
    "bf16": ("bf16", "fp16", "fp32"),
    "bf16-master": ("bf16", "fp16", "fp32"),
    "fp16": ("fp16", "fp32"),
}


@dataclass(frozen=True)
class LinkSpec:
    kind: str  # nvlink1..4, nvlink3-bridge, pcie3, pcie4, ...
    bandwidth_Bps: float


@dataclass(frozen=True)
class GPUSpec:
    name: str
    arch: str
    memory_bytes: int
    flops: dict[str, float | None]  # dense peak FLOP/s per precision; None = not supported by the part
    memory_bandwidth_Bps: float
    link: LinkSpec
    context_bytes: int
    aliases: tuple[str, ...] = ()
    threads: int | None = (
        None  # CPU stand-ins: torch threads per device (None: the host's cores shared by its ranks)
    )

    def peak_flops(self, precision: str) -> float:
        """Dense peak FLOP/s for a training precision, falling back when the part lacks that mode."""
        for key in _PRECISION_ORDER.get(precision, (precision,)):
            value = self.flops.get(key)
            if value:
                return value
        raise ValueError(f"GPU {self.name} has no peak for precision {precision!r}")

    def supports(self, precision: str) -> bool:
        """Whether the part natively runs this precision (bf16 needs Ampere or newer)."""
        key = {"bf16-master": "bf16"}.get(precision, precision)
        return bool(self.flops.get(key))

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / 2**30


def _parse(name: str, raw: dict) -> GPUSpec:
    try:
        return GPUSpec(
            name=name,
            arch=str(raw["arch"]),
            memory_bytes=int(raw["memory_bytes"]),
            flops={k: (float(v) if v is not None else None) for k, v in raw["flops"].items()},
            memory_bandwidth_Bps=float(raw["memory_bandwidth_Bps"]),
            link=LinkSpec(kind=str(raw["link"]["kind"]), bandwidth_Bps=float(raw["link"]["bandwidth_Bps"])),
            context_bytes=int(raw.get("context_bytes", 512 * 2**20)),
            aliases=tuple(str(a) for a in raw.get("aliases", ())),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"gpus.yaml entry {name!r}: bad or missing field {e}") from None


@cache
def gpu_catalog() -> dict[str, GPUSpec]:
    """All GPU types by canonical name, in file order."""
    text = resources.files("tessera.hardware").joinpath("gpus.yaml").read_text()
    return {name: _parse(name, raw) for name, raw in yaml.safe_load(text).items()}


@cache
def _alias_index() -> dict[str, str]:
    index: dict[str, str] = {}
    for name, spec in gpu_catalog().items():
        for key in (name, *spec.aliases):
            index[key.lower()] = name
    return index


def get_gpu(name: str) -> GPUSpec:
    """Look a GPU type up by name or alias (case-insensitive); unknown names list the nearest matches."""
    if name.lower() in CPU_DEVICES:
        return CPU_DEVICES[name.lower()]
    canonical = _alias_index().get(name.lower())
    if canonical is None:
        raise UnknownNameError("GPU type", name, gpu_catalog().keys())
    return gpu_catalog()[canonical]


# The emulated device of CPU-only runs: a placeholder so plans made for this machine carry a type.
CPU_DEVICE = GPUSpec(
    name="cpu",
    arch="cpu",
    memory_bytes=16 * 2**30,
    flops={"fp32": 1.0e11, "tf32": None, "fp16": None, "bf16": 1.0e11},
    memory_bandwidth_Bps=20e9,
    link=LinkSpec(kind="loopback", bandwidth_Bps=5e9),
    context_bytes=0,
)
# The embedded service cluster's devices (preset ``embedded``): one pinned core each, one torch thread, priced
# from profiles of this machine taken under the same conditions. ``cpu-half`` shares its core with a busy
# neighbour process at equal priority, so it really gets half the core: a slower device type whose speed
# difference is real and measured, never a label.
CPU_CORE_DEVICE = replace(CPU_DEVICE, name="cpu-core", memory_bytes=8 * 2**30, threads=1)
CPU_HALF_DEVICE = replace(
    CPU_CORE_DEVICE, name="cpu-half", flops={"fp32": 0.5e11, "tf32": None, "fp16": None, "bf16": 0.5e11}
)
CPU_DEVICES = {d.name: d for d in (CPU_DEVICE, CPU_CORE_DEVICE, CPU_HALF_DEVICE)}

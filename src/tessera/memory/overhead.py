"""Memory no tensor trace sees: the CUDA context, kernel images, cuBLAS/NCCL workspaces and fragmentation.

Defaults are the catalog's published typical values per GPU type (``context_bytes`` in gpus.yaml) and a
fragmentation factor of 1.0 (``expandable_segments``); a real GPU measurement calibrates both.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from tessera.hardware import get_gpu

DEFAULT_HEADROOM_FRACTION = 0.05  # keep 5% of the card free for allocator rounding and NCCL growth


@dataclass(frozen=True)
class Overhead:
    """Non-tensor memory of one process on one GPU type."""

    gpu_type: str
    context_bytes: int  # CUDA context + kernel images + library workspaces (NVML process usage − reserved)
    fragmentation: float = 1.0  # max_memory_reserved / max_memory_allocated of the training loop
    source: str = "catalog"  # "catalog" | "measured"

    def device_bytes(self, tensor_peak_bytes: float) -> float:
        """What the process occupies on the card when its tensors peak at ``tensor_peak_bytes``."""
        return tensor_peak_bytes * self.fragmentation + self.context_bytes


_calibrated: dict[str, Overhead] = {}


def overhead_for(gpu_type: str) -> Overhead:
    gpu = get_gpu(gpu_type)
    return _calibrated.get(gpu.name) or Overhead(gpu.name, gpu.context_bytes)


def calibrate(
    gpu_type: str,
    *,
    process_used_bytes: int,
    max_reserved_bytes: int,
    max_allocated_bytes: int,
) -> Overhead:
    """Calibrate from one real GPU run: NVML process usage, torch.cuda.max_memory_reserved/allocated."""
    if min(process_used_bytes, max_reserved_bytes, max_allocated_bytes) <= 0:
        raise ValueError("calibration figures must all be positive")
    if max_reserved_bytes < max_allocated_bytes:
        raise ValueError("max_reserved_bytes cannot be below max_allocated_bytes")
    gpu = get_gpu(gpu_type)
    o = Overhead(
        gpu.name,
        context_bytes=max(0, process_used_bytes - max_reserved_bytes),
        fragmentation=max_reserved_bytes / max_allocated_bytes,
        source="measured",
    )
    _calibrated[gpu.name] = o
    return o


def usable_bytes(gpu_type: str, headroom_fraction: float = DEFAULT_HEADROOM_FRACTION) -> float:
    """Tensor bytes a job may plan for on one card of this type."""
    gpu = get_gpu(gpu_type)
    o = overhead_for(gpu.name)
    return (gpu.memory_bytes * (1 - headroom_fraction) - o.context_bytes) / o.fragmentation


def save_calibration(path: str | Path) -> None:
    Path(path).write_text(json.dumps({k: asdict(v) for k, v in _calibrated.items()}, indent=2))


def load_calibration(path: str | Path) -> None:
    for k, v in json.loads(Path(path).read_text()).items():
        _calibrated[k] = Overhead(**v)

"""Hardware: the GPU catalog and cluster specs. Imports nothing else of Tessera."""

from tessera.hardware.catalog import CPU_DEVICE, GPUSpec, LinkSpec, get_gpu, gpu_catalog
from tessera.hardware.cluster import (
    ClusterSpec,
    Node,
    NodeGroupSpec,
    SpecError,
    cluster_presets,
    get_cluster,
    load_cluster_file,
    parse_cluster,
)

__all__ = [
    "CPU_DEVICE",
    "ClusterSpec",
    "GPUSpec",
    "LinkSpec",
    "Node",
    "NodeGroupSpec",
    "SpecError",
    "cluster_presets",
    "get_cluster",
    "get_gpu",
    "gpu_catalog",
    "load_cluster_file",
    "parse_cluster",
]

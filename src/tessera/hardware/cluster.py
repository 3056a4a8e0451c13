"""Cluster specs: node groups of one GPU type each, parsed from YAML with errors that name the field."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, cached_property
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tessera.errors import UnknownNameError, validation_message
from tessera.hardware.catalog import get_gpu


class SpecError(ValueError):
    """Bad user input: one line naming the file, the field and the reason."""


class NodeGroupSpec(BaseModel):
    """``count`` identical nodes, each with ``gpus_per_node`` GPUs of one type."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = None
    count: int = Field(ge=1)
    gpu: str
    gpus_per_node: int = Field(ge=1, le=64)
    intra_node_link: str | None = None  # e.g. nvlink3, pcie4; default: the GPU's typical link
    intra_node_bandwidth_Bps: float | None = Field(default=None, gt=0)
    inter_node_bandwidth_Bps: float | None = Field(
        default=None, gt=0
    )  # the node's whole network, one direction
    nics_per_node: int | None = Field(default=None, ge=1)  # default: the cluster's
    nic_bandwidth_Bps: float | None = Field(
        default=None, gt=0
    )  # per NIC, one direction; default: the cluster's

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, v: str) -> str:
        try:
            return get_gpu(v).name
        except UnknownNameError as e:
            raise ValueError(str(e)) from None


class ClusterSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str = ""
    inter_node_bandwidth_Bps: float = Field(default=12.5e9, gt=0)  # 100 Gb/s InfiniBand / RoCE, per node
    # A node's network as its NICs: with a NIC bandwidth, a node's inter-node bandwidth is nics × that (a
    # group's own inter_node_bandwidth_Bps still wins); collectives share it among the node's GPUs.
    nics_per_node: int = Field(default=1, ge=1)
    nic_bandwidth_Bps: float | None = Field(default=None, gt=0)
    node_groups: tuple[NodeGroupSpec, ...] = Field(min_length=1)

    def nodes(self) -> tuple[Node, ...]:
        """Every node, group by group (built once per spec: planners ask for it per Cell estimator)."""
        return self.node_tuple

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> ClusterSpec:
        """A copy with ``update`` applied, its nodes built afresh (pydantic copies the cached ``node_tuple``
        along with the fields: a copy with other node groups would report the original's nodes)."""
        copy = super().model_copy(update=update, deep=deep)
        copy.__dict__.pop("node_tuple", None)
        return copy

    @cached_property
    def node_tuple(self) -> tuple[Node, ...]:
        out: list[Node] = []
        for gi, g in enumerate(self.node_groups):
            gpu = get_gpu(g.gpu)
            prefix = g.name or f"{gpu.name.lower()}-g{gi}"
            nics = g.nics_per_node or self.nics_per_node
            nic_Bps = g.nic_bandwidth_Bps or self.nic_bandwidth_Bps
            inter = g.inter_node_bandwidth_Bps or (
                nics * nic_Bps if nic_Bps else self.inter_node_bandwidth_Bps
            )
            for i in range(g.count):
                out.append(
                    Node(
                        name=f"{prefix}-{i}",
                        gpu_type=gpu.name,
                        n_gpus=g.gpus_per_node,
                        intra_link=g.intra_node_link or gpu.link.kind,
                        intra_bandwidth_Bps=g.intra_node_bandwidth_Bps or gpu.link.bandwidth_Bps,
                        inter_bandwidth_Bps=inter,
                        nics=nics,
                    )
                )
        return tuple(out)

    def gpu_counts(self) -> dict[str, int]:
        counts: Counter[str] = Counter()
        for g in self.node_groups:
            counts[get_gpu(g.gpu).name] += g.count * g.gpus_per_node
        return dict(counts)

    @property
    def total_gpus(self) -> int:
        return sum(self.gpu_counts().values())


@dataclass(frozen=True)
class Node:
    name: str
    gpu_type: str
    n_gpus: int
    intra_link: str
    intra_bandwidth_Bps: float
    inter_bandwidth_Bps: float  # all of the node's NICs together, one direction
    nics: int = 1


def parse_cluster(data: dict, source: str = "cluster spec") -> ClusterSpec:
    if not isinstance(data, dict):
        raise SpecError(f"{source}: expected a mapping with name and node_groups, got {type(data).__name__}")
    try:
        return ClusterSpec.model_validate(data)
    except ValidationError as e:
        raise SpecError(validation_message(source, e)) from None


def load_cluster_file(path: str | Path) -> ClusterSpec:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise SpecError(f"{path}: not valid YAML: {e}") from None
    return parse_cluster(data, str(path))


@cache
def cluster_presets() -> dict[str, ClusterSpec]:
    out = {}
    for f in sorted(resources.files("tessera.hardware").joinpath("clusters").iterdir()):
        if f.name.endswith(".yaml"):
            spec = parse_cluster(yaml.safe_load(f.read_text()), f"preset {f.name}")
            out[spec.name] = spec
    return out


GPUS_PER_NODE = 8  # a server of the usual size: what a cluster made from GPU counts alone is built of


def cluster_of_gpus(gpus: dict[str, int], gpus_per_node: int = GPUS_PER_NODE) -> ClusterSpec:
    """A cluster holding exactly ``gpus`` (nodes of up to ``gpus_per_node`` GPUs of one type): asking to plan
    on 4×A100 + 4×V100 without naming a cluster means those GPUs, not the few of the default preset."""
    groups: list[NodeGroupSpec] = []
    for gpu, n in gpus.items():
        full, rest = divmod(n, gpus_per_node)
        if full:
            groups.append(NodeGroupSpec(count=full, gpu=gpu, gpus_per_node=gpus_per_node))
        if rest:
            groups.append(NodeGroupSpec(count=1, gpu=gpu, gpus_per_node=rest))
    name = "+".join(f"{n}x{g}" for g, n in gpus.items())
    return ClusterSpec(name=name, description="the GPUs given", node_groups=tuple(groups))


def get_cluster(name_or_path: str) -> ClusterSpec:
    """A shipped preset by name, or a YAML file by path."""
    presets = cluster_presets()
    if name_or_path in presets:
        return presets[name_or_path]
    if name_or_path.endswith((".yaml", ".yml")) or Path(name_or_path).is_file():
        return load_cluster_file(name_or_path)
    raise UnknownNameError("cluster", name_or_path, presets.keys())


def network_cluster(
    gpu: str,
    n_gpus: int,
    *,
    gpus_per_node: int,
    intra_node_link: str | None = None,
    intra_node_bandwidth_Bps: float | None = None,
    nics_per_node: int | None = None,
    nic_bandwidth_Bps: float | None = None,
    inter_node_bandwidth_Bps: float | None = None,
) -> ClusterSpec:
    """The smallest cluster of ``gpu`` nodes holding ``n_gpus``, with the given links (``tessera estimate``'s
    link options): what a layout is priced on when no preset describes the machine. Unset figures take the
    GPU's typical intra-node link and the cluster defaults; the field names in errors are the options'."""
    if gpus_per_node < 1:
        raise SpecError(f"--gpus-per-node: must be >= 1, got {gpus_per_node}")
    group: dict = {"name": "node", "count": max(1, -(-n_gpus // gpus_per_node)), "gpu": gpu,
                   "gpus_per_node": gpus_per_node}  # fmt: skip
    if intra_node_link is not None:
        group["intra_node_link"] = intra_node_link
    if intra_node_bandwidth_Bps is not None:
        group["intra_node_bandwidth_Bps"] = intra_node_bandwidth_Bps
    top: dict = {"name": f"{gpu}-x{n_gpus}", "node_groups": [group]}
    if nics_per_node is not None:
        top["nics_per_node"] = nics_per_node
    if nic_bandwidth_Bps is not None:
        top["nic_bandwidth_Bps"] = nic_bandwidth_Bps
    if inter_node_bandwidth_Bps is not None:
        top["inter_node_bandwidth_Bps"] = inter_node_bandwidth_Bps
    return parse_cluster(top, "link options")


def with_network(
    spec: ClusterSpec,
    *,
    nics_per_node: int | None = None,
    nic_bandwidth_Bps: float | None = None,
    inter_node_bandwidth_Bps: float | None = None,
) -> ClusterSpec:
    """``spec`` with its cluster-wide network restated (``tessera plan``'s link options); node groups that
    state their own inter-node bandwidth keep it. A new spec, parsed again, so nothing cached carries over."""
    over = {
        k: v
        for k, v in (
            ("nics_per_node", nics_per_node),
            ("nic_bandwidth_Bps", nic_bandwidth_Bps),
            ("inter_node_bandwidth_Bps", inter_node_bandwidth_Bps),
        )
        if v is not None
    }
    if not over:
        return spec
    return parse_cluster({**spec.model_dump(exclude_none=True), **over}, "link options")

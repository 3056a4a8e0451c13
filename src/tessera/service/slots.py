"""The live world as the service's backend sees it: GPUs (slots), nodes, the cluster, and what a job holds.

``Slot`` is one concrete GPU (node, index); ``LiveCluster`` the cluster spec with which nodes are alive (node
order = the spec's = the scheduler core's node index); ``Assignment`` the concrete GPUs a job runs on with the
Cell and the Plan pinned to them (what the store keeps and the Ray backend launches).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tessera.hardware import ClusterSpec
from tessera.plan import Device, Plan


@dataclass(frozen=True)
class Slot:
    """One GPU: its node (the cluster spec's node name), index within the node, and type."""

    node: str
    index: int
    gpu_type: str

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "index": self.index, "gpu_type": self.gpu_type}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Slot:
        return cls(str(d["node"]), int(d["index"]), str(d["gpu_type"]))


@dataclass(frozen=True)
class LiveNode:
    name: str
    gpu_type: str
    n_gpus: int
    alive: bool = True


@dataclass(frozen=True)
class LiveCluster:
    """The cluster as the backend sees it now: its spec (names, links) and which nodes are alive. Node order
    is the spec's (``spec.nodes()``), which is also the core's node index."""

    spec: ClusterSpec
    nodes: tuple[LiveNode, ...]

    @classmethod
    def from_spec(cls, spec: ClusterSpec) -> LiveCluster:
        return cls(spec, tuple(LiveNode(n.name, n.gpu_type, n.n_gpus) for n in spec.nodes()))

    def slots(self) -> list[Slot]:
        return [Slot(n.name, i, n.gpu_type) for n in self.nodes if n.alive for i in range(n.n_gpus)]

    def gpu_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for n in self.nodes:
            if n.alive:
                out[n.gpu_type] = out.get(n.gpu_type, 0) + n.n_gpus
        return out

    def index_of(self, node: str) -> int:
        for i, n in enumerate(self.nodes):
            if n.name == node:
                return i
        raise KeyError(node)


@dataclass(frozen=True)
class Assignment:
    """What a job runs on: concrete GPUs, the Cell, the Plan pinned to those GPUs and its estimate."""

    slots: tuple[Slot, ...]
    cell: str
    plan: Plan
    estimate_iter_s: float
    estimate: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def gpus(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.slots:
            out[s.gpu_type] = out.get(s.gpu_type, 0) + 1
        return dict(sorted(out.items()))

    @property
    def n_gpus(self) -> int:
        return len(self.slots)

    def same_gpus(self, other: Assignment | None) -> bool:
        return other is not None and set(self.slots) == set(other.slots)

    def to_dict(self) -> dict[str, Any]:
        return {
            "slots": [s.to_dict() for s in self.slots],
            "gpus": self.gpus,
            "cell": self.cell,
            "plan": self.plan.to_dict(),
            "estimate_iter_s": self.estimate_iter_s,
            "estimate": self.estimate,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Assignment:
        return cls(
            tuple(Slot.from_dict(s) for s in d["slots"]),
            str(d["cell"]),
            Plan.from_dict(d["plan"]),
            float(d["estimate_iter_s"]),
            dict(d.get("estimate") or {}),
        )


def pin_plan(plan: Plan, slots: Sequence[Slot]) -> Plan:
    """The Plan with every device moved onto the placed GPUs of its type (stage order kept)."""
    by_type: dict[str, list[Slot]] = {}
    for s in sorted(slots, key=lambda s: (s.node, s.index)):
        by_type.setdefault(s.gpu_type, []).append(s)
    stages = []
    for st in plan.stages:
        devs = []
        for d in st.devices:
            pool = by_type.get(d.gpu_type)
            if not pool:
                raise ValueError(f"plan device {d.rank} wants a {d.gpu_type}, the placement has none left")
            s = pool.pop(0)
            devs.append(Device(d.rank, s.gpu_type, node=s.node, local_index=s.index))
        stages.append(st.__class__(**{**st.__dict__, "devices": tuple(devs)}))
    return plan.with_(stages=tuple(stages))


__all__ = ["Assignment", "LiveCluster", "LiveNode", "Slot", "pin_plan"]

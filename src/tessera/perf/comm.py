"""Communication cost: collectives and point-to-point on each link class.

Two sources, measured first (Crius §5.1: communication is profiled offline because the interconnect does not
change after setup): a :class:`CommTable` of (message bytes → seconds) points per (collective, link, group
size), interpolated in log-log space; outside a table's measured range, or where no table exists, the
alpha-beta model ``time = steps · alpha + volume / bandwidth`` of the ring algorithms NCCL and gloo use.

Ring volumes for ``n`` ranks and a message of ``bytes`` (the full tensor):

* all-reduce: ``2(n−1)`` steps moving ``2(n−1)/n · bytes`` per rank;
* all-gather / reduce-scatter: ``n−1`` steps moving ``(n−1)/n · bytes`` (bytes = the gathered tensor);
* send/recv: one step moving ``bytes``.

A table point is the time from the last rank's arrival to the collective's end, measured under one of two
:class:`Arrival` patterns: every rank arriving together (what balanced ranks see), or one rank arriving late
while the others wait (what the slowest rank of an uneven group sees at every collective — Whale's uneven
shards, a TP group mixing GPU types). On gloo the two differ: waiting ranks have already posted their side of
the exchange, so the late rank's part is shorter.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from tessera.hardware import GPUSpec


class Collective(StrEnum):
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    SEND_RECV = "send_recv"


class Arrival(StrEnum):
    """How the ranks reach a collective: ``together``, or the timed rank ``last`` while the others wait."""

    TOGETHER = "together"
    LAST = "last"


@dataclass(frozen=True)
class Link:
    """One link class: its name (``nvlink3``, ``pcie4``, ``infiniband``, ``ethernet``, ``loopback``), per-rank
    bandwidth in bytes/s (one direction) and per-step latency in seconds.

    A group spread over several nodes is a two-level link: ``intra`` is the link inside a node and
    ``ranks_per_node`` how many of the group's ranks each node holds; ``bandwidth_Bps`` is then what the
    group gets of a node's network (all its NICs, shared by the node's ranks). Collectives on it are priced
    hierarchically (:func:`hierarchical_alpha_beta`), as NCCL's ring/tree run them across nodes."""

    kind: str
    bandwidth_Bps: float
    latency_s: float
    intra: Link | None = None
    ranks_per_node: int = 1

    def __post_init__(self) -> None:
        if self.bandwidth_Bps <= 0 or self.latency_s < 0:
            raise ValueError(f"link {self.kind}: bandwidth must be > 0 and latency >= 0")
        if self.ranks_per_node < 1:
            raise ValueError(f"link {self.kind}: ranks_per_node must be >= 1, got {self.ranks_per_node}")


# Per-step latency of each link class (NCCL small-message latencies; gloo over TCP loopback is far slower).
LATENCY_S: dict[str, float] = {
    "nvlink": 5e-6,
    "pcie": 10e-6,
    "infiniband": 15e-6,
    "ethernet": 50e-6,
    "loopback": 100e-6,
}
# Inter-node links at or above this bandwidth are treated as InfiniBand/RoCE, below as Ethernet.
INFINIBAND_MIN_BPS = 12.5e9
LOOPBACK_BANDWIDTH_BPS = 2.0e9  # gloo all-reduce over TCP loopback on one host, a few GB/s


def _latency_of(kind: str) -> float:
    for prefix, lat in LATENCY_S.items():
        if kind.startswith(prefix):
            return lat
    return LATENCY_S["ethernet"]


def make_link(kind: str, bandwidth_Bps: float, latency_s: float | None = None) -> Link:
    return Link(kind, bandwidth_Bps, _latency_of(kind) if latency_s is None else latency_s)


def intra_node_link(gpu: GPUSpec, kind: str | None = None, bandwidth_Bps: float | None = None) -> Link:
    """The GPU's own intra-node link (NVLink generation or PCIe), or the node's override; CPUs use loopback."""
    if gpu.arch == "cpu":
        return make_link("loopback", bandwidth_Bps or LOOPBACK_BANDWIDTH_BPS)
    return make_link(kind or gpu.link.kind, bandwidth_Bps or gpu.link.bandwidth_Bps)


def inter_node_link(bandwidth_Bps: float) -> Link:
    """A cluster's inter-node network: InfiniBand/RoCE when fast, Ethernet otherwise."""
    return make_link("infiniband" if bandwidth_Bps >= INFINIBAND_MIN_BPS else "ethernet", bandwidth_Bps)


def hierarchical_link(inter: Link, intra: Link, ranks_per_node: int) -> Link:
    """``inter`` (the group's share of a node's network) with ``intra`` under it: a group of
    ``ranks_per_node`` ranks on each of several nodes."""
    return Link(inter.kind, inter.bandwidth_Bps, inter.latency_s, intra=intra, ranks_per_node=ranks_per_node)


def _tree_steps(n: int) -> int:
    """Latency steps of a (double binary) tree all-reduce among ``n`` ranks: up and down, ⌈log2 n⌉ each."""
    return 2 * max(1, math.ceil(math.log2(n)))


def hierarchical_alpha_beta(collective: Collective | str, nbytes: float, n: int, link: Link) -> float:
    """One collective among ``n`` ranks, ``link.ranks_per_node`` (= L) on each of N = n / L nodes, in two
    levels as NCCL runs it across nodes.

    * all-reduce: reduce-scatter inside each node (``(L−1)/L · bytes / intra``), all-reduce of each rank's
      ``bytes / L`` shard between the nodes — the L shards cross a node's network side by side, so
      ``2(N−1)/N · bytes / inter`` with ``inter`` the node network's share of the group — then all-gather
      inside each node: ``2(L−1)/L · bytes / intra + 2(N−1)/N · bytes / inter``, the textbook
      ``2(n−1)/n · bytes / bw`` per level. The inter-node stage takes the faster of a ring (2(N−1) latency
      steps) and a tree (2⌈log2 N⌉ steps, about the ring's volume at 2 · bytes), as NCCL picks by size: the
      latency does not grow linearly with the node count for small messages.
    * all-gather / reduce-scatter (``bytes`` = the gathered tensor): ``(L−1)/L · bytes / intra +
      (N−1)/N · bytes / inter``; the inter-node stage (one rank per node on each rail) takes the fewer latency
      steps of a ring (N−1) and of recursive halving / doubling (⌈log2 N⌉, the same (N−1)/N volume: Thakur,
      Rabenseifner & Gropp 2005, "Optimization of Collective Communication Operations in MPICH"; NCCL 2.23's
      PAT algorithm runs reduce-scatter and all-gather in log steps at one GPU per node). A bucketed ZeRO-2
      sync issues thousands of these, so a per-bucket latency linear in the node count would dominate it at
      hundreds of nodes — which is not what the libraries pay.
    * send/recv: one step on the network.
    """
    c = Collective(collective)
    intra, L = link.intra, link.ranks_per_node
    if nbytes <= 0:
        return 0.0
    if c == Collective.SEND_RECV or intra is None:
        return alpha_beta(c, nbytes, n, Link(link.kind, link.bandwidth_Bps, link.latency_s))
    if n <= 1:
        return 0.0
    N = max(1, n // L) if n % L == 0 else 0
    if N == 0:  # ranks spread unevenly: one flat ring over the network
        return alpha_beta(c, nbytes, n, Link(link.kind, link.bandwidth_Bps, link.latency_s))
    a_in, b_in = intra.latency_s, intra.bandwidth_Bps
    a_ex, b_ex = link.latency_s, link.bandwidth_Bps
    if c == Collective.ALL_REDUCE:
        t_intra = 2 * (L - 1) * a_in + 2 * (L - 1) / L * nbytes / b_in if L > 1 else 0.0
        if N <= 1:
            return t_intra
        ring = 2 * (N - 1) * a_ex + 2 * (N - 1) / N * nbytes / b_ex
        tree = _tree_steps(N) * a_ex + 2 * nbytes / b_ex
        return t_intra + min(ring, tree)
    t_intra = (L - 1) * a_in + (L - 1) / L * nbytes / b_in if L > 1 else 0.0
    steps = min(N - 1, math.ceil(math.log2(N))) if N > 1 else 0
    t_inter = steps * a_ex + (N - 1) / N * nbytes / b_ex if N > 1 else 0.0
    return t_intra + t_inter


def alpha_beta(collective: Collective | str, nbytes: float, n: int, link: Link) -> float:
    """Ring-algorithm time of one collective of ``nbytes`` among ``n`` ranks on ``link`` (two levels where
    the link has an ``intra`` one: :func:`hierarchical_alpha_beta`)."""
    c = Collective(collective)
    if nbytes <= 0:
        return 0.0
    if link.intra is not None:
        return hierarchical_alpha_beta(c, nbytes, n, link)
    if c == Collective.SEND_RECV:
        return link.latency_s + nbytes / link.bandwidth_Bps
    if n <= 1:
        return 0.0
    if c == Collective.ALL_REDUCE:
        steps, volume = 2 * (n - 1), 2 * (n - 1) / n * nbytes
    else:
        steps, volume = n - 1, (n - 1) / n * nbytes
    return steps * link.latency_s + volume / link.bandwidth_Bps


def interpolate(pts: list[tuple[float, float]], nbytes: float) -> float:
    """Seconds at ``nbytes`` on sorted (bytes, seconds) points that cover it: linear in log–log between the two
    nearest, a point's own time where it is hit exactly."""
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        if x0 <= nbytes <= x1:
            w = (math.log(nbytes) - math.log(x0)) / (math.log(x1) - math.log(x0))
            return math.exp(math.log(y0) + w * (math.log(y1) - math.log(y0)))
    return pts[0][1]  # a single point, hit exactly


TableKey = tuple[str, str, int, str]  # (collective, link kind, group size, arrival)


@dataclass
class CommTable:
    """Measured (message bytes → seconds) points per (collective, link kind, group size, arrival).

    Lookup interpolates linearly in log(bytes)–log(seconds) between the two nearest measured sizes; outside
    the measured range (or without a table for that key) it falls back to :func:`alpha_beta`. A ``last``
    arrival the table never measured reads the ``together`` points.
    """

    points: dict[TableKey, list[tuple[float, float]]] = field(default_factory=dict)

    def add(
        self,
        collective: Collective | str,
        link_kind: str,
        n: int,
        nbytes: float,
        time_s: float,
        arrival: Arrival | str = Arrival.TOGETHER,
    ) -> None:
        if nbytes <= 0 or time_s <= 0:
            raise ValueError(f"table points need bytes > 0 and seconds > 0, got {nbytes}, {time_s}")
        key = (str(Collective(collective)), link_kind, int(n), str(Arrival(arrival)))
        pts = [p for p in self.points.get(key, []) if p[0] != nbytes]
        pts.append((float(nbytes), float(time_s)))
        self.points[key] = sorted(pts)

    def add_many(
        self,
        collective: Collective | str,
        link_kind: str,
        n: int,
        rows: Iterable[tuple[float, float]],
        arrival: Arrival | str = Arrival.TOGETHER,
    ) -> None:
        for nbytes, t in rows:
            self.add(collective, link_kind, n, nbytes, t, arrival)

    def measured(
        self, collective: Collective | str, link_kind: str, n: int, arrival: Arrival | str = Arrival.TOGETHER
    ) -> list[tuple[float, float]]:
        """The sorted (bytes, seconds) points for the key; a ``last`` arrival never measured reads
        ``together``'s, the nearest measurement there is."""
        c = str(collective)  # plain strings: estimates look tables up thousands of times per Cell
        pts = self.points.get((c, link_kind, n, str(arrival)))
        return pts if pts else self.points.get((c, link_kind, n, Arrival.TOGETHER.value), [])

    def lookup(
        self,
        collective: Collective | str,
        link_kind: str,
        n: int,
        nbytes: float,
        arrival: Arrival | str = Arrival.TOGETHER,
    ) -> float | None:
        """Interpolated seconds, or None outside the measured range."""
        pts = self.measured(collective, link_kind, n, arrival)
        if not pts or nbytes < pts[0][0] or nbytes > pts[-1][0]:
            return None
        return interpolate(pts, nbytes)

    def time(
        self,
        collective: Collective | str,
        nbytes: float,
        n: int,
        link: Link,
        arrival: Arrival | str = Arrival.TOGETHER,
    ) -> float:
        if nbytes <= 0 or (n <= 1 and Collective(collective) != Collective.SEND_RECV):
            return 0.0
        measured = self.lookup(collective, link.kind, n, nbytes, arrival)
        return measured if measured is not None else alpha_beta(collective, nbytes, n, link)

    def to_json(self) -> str:
        rows = [
            {"collective": k[0], "link": k[1], "n": k[2], "arrival": k[3], "points": v}
            for k, v in self.points.items()
        ]
        return json.dumps(rows, indent=1)

    @classmethod
    def from_json(cls, text: str) -> CommTable:
        """Rows written before arrivals were measured carry no ``arrival``: they were taken together."""
        t = cls()
        for row in json.loads(text):
            arrival = row.get("arrival", Arrival.TOGETHER)
            t.add_many(row["collective"], row["link"], row["n"], [tuple(p) for p in row["points"]], arrival)
        return t

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json())

    @classmethod
    def load(cls, path: str | Path) -> CommTable:
        return cls.from_json(Path(path).read_text())


def comm_time(
    collective: Collective | str, nbytes: float, n: int, link: Link, table: CommTable | None = None
) -> float:
    """Seconds of one collective: the measured table where it covers the size, else alpha-beta."""
    if table is not None:
        return table.time(collective, nbytes, n, link)
    return alpha_beta(collective, nbytes, n, link)

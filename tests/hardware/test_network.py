"""A cluster's network as NICs, and how the estimator prices collectives across its nodes."""

from __future__ import annotations

import pytest

from tessera.hardware import SpecError, get_cluster, parse_cluster
from tessera.hardware.cluster import with_network
from tessera.perf.comm import alpha_beta
from tessera.perf.estimate import Topology
from tessera.plan import Device


def _cluster(**top):
    return parse_cluster(
        {
            "name": "t",
            "node_groups": [{"name": "n", "count": 4, "gpu": "A100-80GB", "gpus_per_node": 8}],
            **top,
        }
    )


def test_nics_set_a_nodes_network():
    c = _cluster(nics_per_node=4, nic_bandwidth_Bps=50e9)
    node = c.nodes()[0]
    assert node.nics == 4 and node.inter_bandwidth_Bps == pytest.approx(200e9)
    # without a NIC bandwidth, the cluster's inter-node bandwidth (the node's whole network) stands
    assert _cluster(inter_node_bandwidth_Bps=25e9).nodes()[0].inter_bandwidth_Bps == 25e9
    # a group's own figures win over the cluster's
    g = parse_cluster(
        {
            "name": "t",
            "nic_bandwidth_Bps": 50e9,
            "node_groups": [
                {"count": 1, "gpu": "A100-80GB", "gpus_per_node": 8, "nics_per_node": 2},
                {"count": 1, "gpu": "A100-80GB", "gpus_per_node": 8, "inter_node_bandwidth_Bps": 1e9},
            ],
        }
    )
    assert [n.inter_bandwidth_Bps for n in g.nodes()] == [100e9, 1e9]
    with pytest.raises(SpecError, match="nics_per_node"):
        _cluster(nics_per_node=0)


def test_selene_preset_states_its_hcas():
    node = get_cluster("megatron-selene").nodes()[0]
    assert node.nics == 8 and node.inter_bandwidth_Bps == pytest.approx(200e9)


def _devices(cluster, ranks_per_node, nodes):
    out = []
    for k in range(nodes):
        node = cluster.nodes()[k]
        out += [Device(len(out), node.gpu_type, node=node.name, local_index=i) for i in range(ranks_per_node)]
    return tuple(out)


def test_topology_prices_a_cross_node_group_hierarchically():
    c = _cluster(nics_per_node=8, nic_bandwidth_Bps=25e9)
    topo = Topology(c)
    whole = topo.link(_devices(c, 8, 4))  # all 8 GPUs of 4 nodes: the whole network under NVLink
    assert whole.intra is not None and whole.ranks_per_node == 8
    assert whole.bandwidth_Bps == pytest.approx(200e9) and whole.intra.kind.startswith("nvlink")
    rail = topo.link(_devices(c, 1, 4))  # one rank per node (a DP group of one TP rank): one NIC's share
    assert rail.bandwidth_Bps == pytest.approx(25e9) and rail.ranks_per_node == 1
    # the hierarchical all-reduce of 32 ranks beats the flat ring over the network's 31 hops
    nbytes = 1e6
    flat = alpha_beta(
        "all_reduce", nbytes, 32, rail.__class__(whole.kind, whole.bandwidth_Bps, whole.latency_s)
    )
    assert alpha_beta("all_reduce", nbytes, 32, whole) < flat
    # one node: the intra-node link alone
    assert topo.link(_devices(c, 8, 1)).intra is None


def test_with_network_restates_a_presets_network():
    base = get_cluster("crius-testbed-64")
    fast = with_network(base, nics_per_node=2, nic_bandwidth_Bps=25e9)
    assert [n.inter_bandwidth_Bps for n in fast.nodes()] == [50e9] * len(base.nodes())
    assert base.nodes()[0].inter_bandwidth_Bps == 12.5e9  # the preset itself is untouched
    assert with_network(base) is base
    with pytest.raises(SpecError, match="nic_bandwidth_Bps"):
        with_network(base, nic_bandwidth_Bps=-1.0)


def test_plan_cli_takes_the_network(tmp_path):
    """`tessera plan --nics-per-node/--nic-bandwidth-Bps` plans on the restated network (a 16-GPU job over two
    nodes: a faster network never makes the chosen plan slower)."""
    import json
    from pathlib import Path

    from typer.testing import CliRunner

    from tessera.cli import app

    job = Path(__file__).parents[2] / "examples" / "tiny-gpt.yaml"
    runner = CliRunner()
    base = ["plan", str(job), "--gpus", "16xA100-40GB", "--json", "--top", "1"]
    slow = runner.invoke(app, [*base, "--out", str(tmp_path / "a.json"), "--inter-node-bandwidth-Bps", "1e9"])
    fast = runner.invoke(app, [*base, "--out", str(tmp_path / "b.json"), "--nics-per-node", "4",
                               "--nic-bandwidth-Bps", "25e9"])  # fmt: skip
    assert slow.exit_code == 0 and fast.exit_code == 0, slow.output + fast.output
    t_slow = json.loads(slow.output)["chosen"]["iteration_time_s"]
    t_fast = json.loads(fast.output)["chosen"]["iteration_time_s"]
    assert t_fast <= t_slow

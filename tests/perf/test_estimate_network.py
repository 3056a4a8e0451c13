"""`tessera estimate` on a stated network: a cluster preset or explicit link options price the collectives."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tessera.api import estimate
from tessera.cli import app
from tessera.hardware.cluster import network_cluster

LAYOUT = dict(model="gpt2", gpu="A100-80GB", dp=16, global_batch=64, micro_batch=4)  # 2 nodes of 8


def test_a_faster_network_shortens_the_data_parallel_sync():
    slow = estimate(
        **LAYOUT, cluster=network_cluster("A100-80GB", 16, gpus_per_node=8, nic_bandwidth_Bps=12.5e9)
    )
    fast = estimate(
        **LAYOUT,
        cluster=network_cluster("A100-80GB", 16, gpus_per_node=8, nics_per_node=8, nic_bandwidth_Bps=25e9),
    )
    assert fast.comm_s < slow.comm_s
    assert fast.compute_s == pytest.approx(slow.compute_s)
    assert fast.iteration_time_s < slow.iteration_time_s


def test_a_preset_places_the_ranks_on_its_nodes():
    selene = estimate(**LAYOUT, cluster="megatron-selene")
    one_nic = estimate(
        **LAYOUT, cluster=network_cluster("A100-80GB", 16, gpus_per_node=8, intra_node_bandwidth_Bps=300e9)
    )
    assert selene.comm_s < one_nic.comm_s  # Selene's 8 HDR HCAs vs the default 12.5 GB/s node
    with pytest.raises(ValueError, match="--cluster: megatron-selene has .* A100-40GB"):
        estimate(**{**LAYOUT, "gpu": "A100-40GB"}, cluster="megatron-selene")


def test_cli_takes_link_options_and_refuses_them_with_a_cluster():
    runner = CliRunner()
    base = ["estimate", "-m", "gpt2", "--gpu", "A100-80GB", "--dp", "16", "--global-batch", "64",
            "--micro-batch", "4", "--json"]  # fmt: skip
    slow = runner.invoke(app, base)
    fast = runner.invoke(app, [*base, "--nics-per-node", "8", "--nic-bandwidth-Bps", "25e9"])
    assert slow.exit_code == 0 and fast.exit_code == 0, slow.output + fast.output
    assert json.loads(fast.output)["comm_s"] < json.loads(slow.output)["comm_s"]
    both = runner.invoke(app, [*base, "--cluster", "megatron-selene", "--nics-per-node", "2"])
    assert both.exit_code != 0 and "--nics-per-node" in both.output

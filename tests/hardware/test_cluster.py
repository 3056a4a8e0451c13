"""Cluster specs: a copy made with other node groups builds its own nodes."""

from __future__ import annotations

from tessera.hardware.cluster import get_cluster


def test_a_copy_with_other_node_groups_reports_its_own_nodes():
    local = get_cluster("local")
    assert sum(n.n_gpus for n in local.nodes()) == 4  # the original's nodes are built (and cached) first
    group = local.node_groups[0].model_copy(update={"gpus_per_node": 1})
    one = local.model_copy(update={"name": "one", "node_groups": (group,)})
    assert [(n.gpu_type, n.n_gpus) for n in one.nodes()] == [("A100-40GB", 1)]
    assert sum(n.n_gpus for n in local.nodes()) == 4

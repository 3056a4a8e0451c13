"""The catalog's intra-node links are one direction per GPU, as the collective model prices them."""

from __future__ import annotations

import pytest

from tessera.hardware import get_gpu
from tessera.hardware.cluster import get_cluster


@pytest.mark.parametrize(
    ("name", "each_way_Bps"),
    [("V100-32GB", 150e9), ("A100-80GB", 300e9), ("A800-80GB", 200e9), ("H100-80GB", 450e9), ("H200", 450e9)],
)
def test_nvlink_is_half_the_datasheet_total_of_both_directions(name: str, each_way_Bps: float):
    """NVLink2-4 carry 25 GB/s each way per link: 6, 12, 8 and 18 links per GPU."""
    link = get_gpu(name).link
    assert link.kind.startswith("nvlink")
    assert link.bandwidth_Bps == pytest.approx(each_way_Bps)


def test_selene_preset_and_catalog_agree_on_an_a100s_nvlink():
    node = get_cluster("megatron-selene").nodes()[0]
    assert node.intra_bandwidth_Bps == pytest.approx(get_gpu("A100-80GB").link.bandwidth_Bps)

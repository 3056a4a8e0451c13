import pytest

from tessera.errors import UnknownNameError
from tessera.hardware import SpecError, cluster_presets, get_cluster, get_gpu, gpu_catalog, parse_cluster

REQUIRED = [
    "V100-16GB", "V100-32GB", "P100-16GB", "T4", "A10", "A40", "A100-40GB", "A100-80GB", "A800-80GB",
    "H100-80GB", "H200", "L4", "L40S", "RTX-2080-Ti", "RTX-3090", "RTX-4090", "RTX-6000", "Quadro-RTX-6000",
]  # fmt: skip


def test_catalog_has_required_gpus_with_sane_figures():
    cat = gpu_catalog()
    for name in REQUIRED:
        g = cat[name]
        assert 8 * 2**30 <= g.memory_bytes <= 160 * 2**30
        assert g.peak_flops("fp32") > 1e12
        assert g.peak_flops("bf16") >= g.peak_flops("fp32")
        assert g.memory_bandwidth_Bps > 1e11
        assert g.link.bandwidth_Bps > 1e9


def test_precision_fallback_and_support():
    v100 = get_gpu("V100-32GB")
    assert not v100.supports("bf16")
    assert v100.peak_flops("bf16") == v100.flops["fp16"]  # no bf16 on Volta: the fp16 tensor core rate
    assert get_gpu("H100-80GB").peak_flops("bf16") == pytest.approx(989.4e12)


def test_aliases_and_unknown_name_suggestions():
    assert get_gpu("a100").name == "A100-40GB"
    assert get_gpu("3090").name == "RTX-3090"
    with pytest.raises(UnknownNameError) as e:
        get_gpu("A100-4GB")
    assert "A100-40GB" in str(e.value)


def test_presets():
    p = cluster_presets()
    assert p["crius-sim-1280"].gpu_counts() == {"A100-40GB": 320, "A40": 320, "A10": 320, "V100-32GB": 320}
    assert p["crius-testbed-64"].total_gpus == 64
    assert p["sia-sim-64"].gpu_counts() == {"RTX-2080-Ti": 24, "A100-40GB": 16, "RTX-6000": 4}
    assert p["whale-hetero-16"].gpu_counts() == {"V100-32GB": 8, "P100-16GB": 8}
    assert p["frenzy-testbed"].total_gpus == 11
    assert len(set(p["local"].gpu_counts())) == 2
    nodes = p["crius-sim-1280"].nodes()
    assert len(nodes) == 420 and len({n.name for n in nodes}) == 420


def test_cluster_errors_name_the_field(tmp_path):
    with pytest.raises(SpecError, match=r"node_groups\.0\.gpus_per_node"):
        parse_cluster({"name": "x", "node_groups": [{"count": 1, "gpu": "A10", "gpus_per_node": 0}]})
    with pytest.raises(SpecError, match=r"node_groups\.0\.gpu: unknown GPU type 'A10x'"):
        parse_cluster({"name": "x", "node_groups": [{"count": 1, "gpu": "A10x", "gpus_per_node": 2}]})
    f = tmp_path / "c.yaml"
    f.write_text("name: mine\nnode_groups:\n  - {count: 2, gpu: T4, gpus_per_node: 4}\n")
    assert get_cluster(str(f)).total_gpus == 8
    with pytest.raises(KeyError, match="crius-sim-1280"):
        get_cluster("crius-sim-128")

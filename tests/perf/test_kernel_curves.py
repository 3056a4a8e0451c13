"""Measured kernel efficiencies (hardware/efficiency.yaml): curves bounded and monotone, every figure cited,
and small GEMMs / long sequences priced slower than the whole-layer roofline did."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from tessera.hardware import get_gpu, gpu_catalog
from tessera.models.zoo import get_arch, get_spec, gpt
from tessera.perf.compute import block_shape, curve_for, layer_time, measured_kernels


def _table() -> dict:
    return yaml.safe_load(resources.files("tessera.hardware").joinpath("efficiency.yaml").read_text())


def test_every_entry_names_catalog_gpus_and_cites_each_figure():
    for group, entry in _table().items():
        assert entry["gpus"], group
        for name in entry["gpus"]:
            assert name in gpu_catalog(), name
        for kind in ("gemm", "attention"):
            part = entry.get(kind) or {}
            if part.get("points") or part.get("by_seq") or part.get("forward_fraction") is not None:
                assert len(str(part["source"])) > 40, (group, kind)
            if part.get("max_measured"):
                assert "ml-engineering" in part["max_measured"]["source"]
            if part.get("backward_over_forward") is not None:
                assert part["backward_source"]


@pytest.mark.parametrize("name", ["H100-80GB", "H200"])
def test_measured_gemm_curve_is_monotone_bounded_and_near_the_table(name):
    gpu = get_gpu(name)
    k = measured_kernels(gpu)
    assert k.gemm is not None
    sizes = [2.0 * n**3 for n in (128, 256, 512, 1024, 2048, 4096, 8192, 16384)]
    fr = [k.gemm.fraction(f) for f in sizes]
    assert all(0 < x < 1 for x in fr)
    assert fr == sorted(fr)
    # the lent H100's profile: GPT-block GEMMs of a TFLOP and more ran at 665-721 TFLOP/s (0.67-0.73 of peak),
    # 1024 x 2048 x 1024 (4.3 GFLOP, left out of the fit: launch-bound) at 0.22
    peak = gpu.peak_flops("bf16")
    assert k.gemm.fraction(2.0 * 256**3) < 0.02
    assert k.gemm.fraction(2.0 * 8192 * 8192 * 32768) == pytest.approx(700e12 / peak, abs=0.03)
    # never above the best measured GEMM (MAMF 792.1 TFLOP/s, 80.1 %), within the fit's scatter
    assert k.gemm.max_fraction <= 0.85


def test_attention_fractions_are_bounded_and_backward_no_faster():
    for name in ("H100-80GB", "A100-80GB", "A100-40GB"):
        k = measured_kernels(get_gpu(name))
        assert k.attention is not None
        for seq in (256, 512, 2048, 6000, 32768, 131072):
            for causal in (True, False):
                fwd, bwd = k.attention.fractions(seq, causal)
                assert 0 < bwd <= fwd < 1
    a100 = measured_kernels(get_gpu("A100-80GB"))
    fwd, bwd = a100.attention.fractions(4096, True)
    assert fwd == pytest.approx((177.67 + 183.27 + 185.64) / 3 / 312.0, rel=1e-6)
    assert bwd == pytest.approx(fwd * 0.736, rel=1e-6)


def test_hopper_attention_by_sequence_length_interpolates_the_profile():
    """The lent H100's profile: short causal sequences run far below long ones; between two measured lengths
    the fraction lies between theirs (log-length interpolation); beyond the ends it is held."""
    att = measured_kernels(get_gpu("H100-80GB")).attention
    assert att is not None
    assert att.fractions(512, True) == pytest.approx((0.192, 0.090))
    assert att.fractions(32768, True) == pytest.approx((0.332, 0.257))
    assert att.fractions(128, True) == att.fractions(512, True)
    assert att.fractions(131072, False) == att.fractions(32768, False)
    mid = att.fractions(2896, True)  # ~ the geometric middle of 2048 and 4096
    assert 0.284 < mid[0] < 0.310 and 0.181 < mid[1] < 0.215
    assert mid[0] == pytest.approx((0.284 + 0.310) / 2, abs=0.002)
    assert att.fractions(512, False)[0] > att.fractions(512, True)[0]  # the diagonal blocks cost a causal run


def test_causal_flash_prices_half_the_score_matrix():
    """Flash under a causal mask computes half of the s x s scores the spec counts: the block's attention time
    is the non-causal block's, halved, at the causal fractions; math attention computes all of it either way."""
    import dataclasses

    from tessera.perf.compute import block_terms

    gpu = get_gpu("H100-80GB")
    spec = get_spec("llama2-7b", seq_len=16384)
    layer = spec.layers[1]
    causal = block_shape(get_arch("llama2-7b"), 16384, "flash")
    full = dataclasses.replace(causal, causal=False)
    tc = block_terms(layer, causal, gpu, precision="bf16")
    tf = block_terms(layer, full, gpu, precision="bf16")
    att = measured_kernels(gpu).attention
    (cf, cb), (ff, fb) = att.fractions(16384, True), att.fractions(16384, False)
    assert tc.attention_fwd_s == pytest.approx(tf.attention_fwd_s / 2 * ff / cf, rel=1e-9)
    assert tc.attention_bwd_s == pytest.approx(tf.attention_bwd_s / 2 * fb / cb, rel=1e-9)
    mc = block_terms(layer, dataclasses.replace(causal, attention="math"), gpu, precision="bf16")
    mf = block_terms(layer, dataclasses.replace(full, attention="math"), gpu, precision="bf16")
    assert mc.attention_fwd_s == pytest.approx(mf.attention_fwd_s, rel=1e-9)


def test_gpu_without_measurements_keeps_its_arch_curve():
    v100 = get_gpu("V100-32GB")
    assert measured_kernels(v100).gemm is None and measured_kernels(v100).attention is None
    a100 = get_gpu("A100-80GB")
    assert measured_kernels(a100).gemm is None  # no size-resolved A100 table was found
    assert curve_for(a100).max_fraction == 0.75


def _slowdown(gpu_name: str, hidden: int, layers: int, heads: int, seq: int) -> float:
    """Kernel-priced block time over the old whole-layer roofline time (> 1: less optimistic)."""
    gpu = get_gpu(gpu_name)
    arch = gpt.gpt_arch(hidden, layers, heads, vocab=50257, max_positions=seq)
    spec = gpt.spec("g", arch, seq)
    block, mb = spec.layers[1], max(1, 16384 // seq)
    old = layer_time(block, gpu, micro_batch=mb, precision="bf16").total_s
    new = layer_time(
        block, gpu, micro_batch=mb, precision="bf16", shape=block_shape(arch, seq, "flash")
    ).total_s
    return new / old


@pytest.mark.parametrize("gpu", ["A100-80GB", "H100-80GB"])
def test_small_models_lose_their_optimism(gpu):
    small, big = _slowdown(gpu, 768, 12, 12, 2048), _slowdown(gpu, 7168, 48, 56, 2048)
    assert small > 1.2  # a 125M block: elementwise traffic and small GEMMs now cost what they do
    assert small > big + 0.15


# One block (micro-batch 1, bf16 AMP, flash) timed by ``tessera.perf.profiler`` on a lent NVIDIA H100 80GB HBM3
# (bench/gpu_kernels.py, bench/results/gpu_kernels_raw.json): (model, seq_len, forward + backward seconds).
H100_BLOCKS = [
    ("gpt3-1.3b", 2048, 0.69e-3 + 1.35e-3),
    ("gpt3-6.7b", 2048, 1.94e-3 + 3.79e-3),
    ("llama2-7b", 2048, 2.28e-3 + 4.48e-3),
    ("llama2-7b", 8192, 8.13e-3 + 16.95e-3),
    ("llama2-7b", 32768, 41.94e-3 + 98.53e-3),
    ("llama3-8b", 16384, 18.13e-3 + 39.55e-3),
]


def _block_error(model: str, seq: int, measured_s: float) -> float:
    from tessera.perf.compute import EAGER

    gpu = get_gpu("H100-80GB")
    spec = get_spec(model, seq_len=seq)
    shape = block_shape(get_arch(model), seq, "flash", EAGER, 4.0)  # AMP over fp32 parameters
    return layer_time(spec.layers[1], gpu, precision="bf16", shape=shape).total_s / measured_s - 1


def test_kernel_priced_blocks_against_the_lent_h100():
    """The ground truth for the kernel pricing. Before the lent H100's profiles entered the catalog (GEMMs by
    size; flash attention by length, causal at half the score matrix), these blocks were priced -25 % to +61 %
    off (mean |error| 29 %): a 32k-token LLaMA block 61 % slow, 2k-token blocks 21-25 % fast. Now within 30 %
    each and 20 % on average."""
    errors = [_block_error(*b) for b in H100_BLOCKS]
    assert max(abs(e) for e in errors) <= 0.30, errors
    assert sum(abs(e) for e in errors) / len(errors) <= 0.20, errors


def test_small_model_estimate_dropped():
    """The whole estimate of GPT-2 125M on one A100 falls by over a quarter against the layer roofline."""
    from tessera.perf.estimate import estimate_plan
    from tessera.plan import simple_plan

    spec = gpt.spec("gpt-125m", gpt.gpt_arch(768, 12, 12, vocab=50257, max_positions=2048), 2048)
    plan = simple_plan(spec.name, n_layers=spec.n_layers, global_batch=8, seq_len=2048, gpu_type="A100-80GB",
                       precision="bf16")  # fmt: skip
    e = estimate_plan(plan, spec)
    gpu = get_gpu("A100-80GB")
    roofline = sum(layer_time(layer, gpu, micro_batch=8, precision="bf16").total_s for layer in spec.layers)
    assert e.iteration_time_s - e.optimizer_s > 1.25 * roofline

"""A dense block's memory-bound kernels priced kernel by kernel (eager as Tessera's runtime runs them, fused as
Megatron-LM runs them), math attention's score traffic, compute slowed beside FSDP collectives, and NVLink
priced one direction per GPU."""

from __future__ import annotations

import pytest

from tessera.hardware import get_gpu
from tessera.models.zoo import gpt, llama
from tessera.perf.compute import (
    EAGER,
    Kernels,
    block_shape,
    block_terms,
    layer_time,
)
from tessera.perf.costmodel import CostModel
from tessera.perf.estimate import OVERLAP_COMPUTE_SLOWDOWN, estimate_plan, fsdp_comm

GPT = gpt.gpt_arch(2048, 24, 16, vocab=50257, max_positions=2048)  # dropout 0.1, LayerNorm, GELU
LLAMA = llama.llama_arch(4096, 32, 32, 32, 11008, max_positions=4096)  # RMSNorm, SwiGLU, RoPE, no dropout


def test_eager_gpt_block_bytes_are_its_kernels_summed():
    h, f, e = 2048, 8192, 2.0
    shape = block_shape(GPT, 2048, "flash")
    per_token, score = shape.elementwise_bytes(1, 1.0, e)
    # two LayerNorms (r+w), two residual adds (r 2 + w 1), two dropouts (r+w + a mask byte), the attention
    # output copy (r+w), GELU (r+w over the FFN width)
    expect = 2 * 2 * e * h + 2 * 3 * e * h + 2 * (2 * e + 1) * h + 2 * e * h + 2 * e * f
    assert per_token == pytest.approx(expect * 2048)
    assert score == 0.0  # flash attention keeps the scores on chip


def test_math_attention_adds_the_score_traffic_and_selective_recompute_reruns_it():
    a100 = get_gpu("A100-80GB")
    spec = gpt.spec("g", GPT, 2048)
    block = spec.layers[1]
    flash = block_terms(block, block_shape(GPT, 2048, "flash"), a100, micro_batch=2, precision="bf16")
    math_ = block_terms(block, block_shape(GPT, 2048, "math"), a100, micro_batch=2, precision="bf16")
    assert flash.scores_s == 0.0 and math_.scores_s > 0.0
    # eager: q @ kᵀ write, scale r+w, causal masked_fill r+w, softmax r+w, dropout r+w + mask, probs @ v read
    per_elem = (1 + 2 + 2 + 2 + 2 + 1) * 2.0 + 1.0
    elems = 2 * 16 * 2048**2
    bw = a100.memory_bandwidth_Bps * 0.8
    assert math_.scores_s == pytest.approx(per_elem * elems / bw)
    plain = layer_time(block, a100, micro_batch=2, precision="bf16", shape=block_shape(GPT, 2048, "math"))
    sel = layer_time(
        block,
        a100,
        micro_batch=2,
        precision="bf16",
        recompute="selective",
        shape=block_shape(GPT, 2048, "math"),
    )
    assert sel.bwd_s == pytest.approx(plain.bwd_s + math_.attention_fwd_s + math_.scores_s)


def test_fused_kernels_move_less_and_sequence_parallel_splits_the_replicated_kernels():
    eager = block_shape(GPT, 2048, "math")
    fused = block_shape(GPT, 2048, "math", Kernels(fused=True))
    sp = block_shape(GPT, 2048, "math", Kernels(fused=True, sequence_parallel=True))
    e_tok, e_sc = eager.elementwise_bytes(1, 1 / 8, 2.0)
    f_tok, f_sc = fused.elementwise_bytes(1, 1 / 8, 2.0)
    s_tok, s_sc = sp.elementwise_bytes(1, 1 / 8, 2.0)
    assert f_tok < e_tok and f_sc < e_sc
    # Megatron's fused scale-mask-softmax: baddbmm write, softmax r+w, dropout r+w + mask, bmm read: 13 B in bf16
    assert f_sc == pytest.approx(13.0 * 16 / 8 * 2048**2)
    assert s_sc == f_sc  # the scores are split by heads either way
    # norms and the dropout-add run on 1/8 of the tokens under sequence parallelism; the rest is per head
    h = 2048
    replicated = 2 * (2 * 2.0 + 3 * 2.0 + 1.0) * h * 2048
    assert f_tok - s_tok == pytest.approx(replicated * (1 - 1 / 8))


def test_llama_eager_kernels_cost_a_larger_share_on_h100_than_on_a100():
    """The H100's bf16 peak grew 3.2x over the A100's, its bandwidth 1.6x: a block's memory-bound kernels are a
    larger share of its time there (what the PyTorch/IBM FSDP blog names for its H100 runs)."""
    spec = llama.spec("l", LLAMA, 4096)
    block = spec.layers[1]
    shape = block_shape(LLAMA, 4096, "flash")
    share = {}
    for name in ("A100-80GB", "H100-80GB"):
        t = block_terms(block, shape, get_gpu(name), micro_batch=2, precision="bf16")
        share[name] = t.elementwise_s / t.fwd_s
    assert share["H100-80GB"] > 1.5 * share["A100-80GB"]
    # RMSNorm written out, RoPE and SwiGLU move more per token than LayerNorm and GELU at the same widths
    tok_llama, _ = shape.elementwise_bytes(1, 1.0, 2.0)
    assert tok_llama > block_shape(GPT, 4096, "flash").elementwise_bytes(1, 1.0, 2.0)[0] * 2


def test_estimate_defaults_to_eager_kernels():
    from tessera.plan import simple_plan

    spec = gpt.spec("g", GPT, 2048)
    plan = simple_plan(spec.name, n_layers=spec.n_layers, global_batch=8, seq_len=2048, gpu_type="A100-80GB",
                       precision="bf16", attention="math")  # fmt: skip
    default = estimate_plan(plan, spec)
    assert estimate_plan(plan, spec, kernels=EAGER).iteration_time_s == default.iteration_time_s
    fused = estimate_plan(plan, spec, kernels=Kernels(fused=True))
    assert fused.iteration_time_s < default.iteration_time_s


def test_hidden_fsdp_traffic_still_slows_the_compute_beside_it():
    from dataclasses import replace

    from tessera.hardware.cluster import network_cluster
    from tessera.perf.estimate import Topology
    from tessera.plan import simple_plan

    spec = gpt.spec("g", GPT, 2048)
    n = 16
    plan = simple_plan(spec.name, n_layers=spec.n_layers, global_batch=2 * n, seq_len=2048, dp=n,
                       gpu_type="A100-80GB", micro_batches=1, precision="bf16", zero=3)  # fmt: skip
    stages = tuple(
        replace(st, devices=tuple(replace(d, node=f"node-{d.rank // 8}", local_index=d.rank % 8)
                                  for d in st.devices))
        for st in plan.stages
    )  # fmt: skip
    plan = replace(plan, stages=stages)
    topo = Topology(network_cluster("A100-80GB", n, gpus_per_node=8, inter_node_bandwidth_Bps=200e9))
    st = plan.stages[0]
    bare = fsdp_comm(plan, spec, st, topo, CostModel())
    hidden = fsdp_comm(plan, spec, st, topo, CostModel(), fwd_s=100.0, bwd_s=200.0)
    σ = OVERLAP_COMPUTE_SLOWDOWN
    assert σ == pytest.approx(0.189)  # Lee et al. 2025's mean
    total = bare.gather_fwd_s + bare.gather_bwd_s + bare.reduce_s
    assert bare.exposed_s == pytest.approx(total)
    # all of it hidden: what is not the first unit's costs σ/(1+σ) of itself in slower compute
    assert total * σ / (1 + σ) * 0.5 < hidden.exposed_s < total * σ / (1 + σ) + 0.2 * total


def test_amp_over_fp32_parameters_keeps_the_residual_stream_fp32():
    """AMP (fp32 parameters): the norms, residual adds and the casts into each Linear move 4-byte elements;
    under FSDP2 (bf16 parameters gathered) or bf16-master the stream is half."""
    from tessera.plan import simple_plan

    h, e = 2048, 2.0
    half = block_shape(GPT, 2048, "flash").elementwise_bytes(1, 1.0, e)[0]
    amp = block_shape(GPT, 2048, "flash", EAGER, 4.0).elementwise_bytes(1, 1.0, e)[0]
    # per norm: LayerNorm r+w at 4 (was 2), the add reads 2 + 4 and writes 4 (was 6), the cast reads 4, writes 2
    assert amp - half == pytest.approx(2 * ((2 * 4 - 2 * e) + (10 - 3 * e) + (4 + e)) * h * 2048)
    spec = gpt.spec("g", GPT, 2048)

    def est(precision: str):
        plan = simple_plan(spec.name, n_layers=spec.n_layers, global_batch=8, seq_len=2048,
                           gpu_type="A100-80GB", precision=precision)  # fmt: skip
        return estimate_plan(plan, spec)

    assert est("bf16").compute_s > est("bf16-master").compute_s

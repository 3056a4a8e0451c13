"""Traces of one device under ZeRO, TP, PP and the precisions, on the fake GPU with zoo GPT models."""

from __future__ import annotations

from conftest import ARCH

from tessera.memory.breakdown import TraceResult


def _rel(a: float, b: float) -> float:
    return a / b


def test_zero3_over_4_shards_params_grads_and_optimizer_state(fake_cuda_traces) -> None:
    z0: TraceResult = fake_cuda_traces["z0"]
    z3: TraceResult = fake_cuda_traces["z3"]
    # optimizer state lives the whole step: 1/4 of it (FSDP pads each param to a multiple of 4 rows)
    assert 3.8 < _rel(z0.breakdown["optimizer_state"], z3.breakdown["optimizer_state"]) <= 4.01
    # persistent params (+ state) at the start of the step: sharded 4 ways
    assert 3.8 < _rel(z0.start_bytes, z3.start_bytes) <= 4.01
    # gradients when the optimizer step begins: reduce-scattered shards only
    assert 3.8 < _rel(z0.bwd_end_breakdown["gradients"], z3.bwd_end_breakdown["gradients"]) <= 4.01
    assert z3.peak_bytes < z0.peak_bytes


def test_zero2_keeps_params_gathered_zero1_keeps_full_grads(fake_cuda_traces) -> None:
    z0, z1, z2, z3 = (fake_cuda_traces[k] for k in ("z0", "z1", "z2", "z3"))
    # ZeRO-1: full params and grads, optimizer state / 4
    assert z1.bwd_end_breakdown["gradients"] == z0.bwd_end_breakdown["gradients"]
    assert 3.8 < _rel(z0.breakdown["optimizer_state"], z1.breakdown["optimizer_state"]) <= 4.01
    # ZeRO-2 holds the gathered params from forward to backward; ZeRO-3 regathers per layer
    assert z2.phase_breakdowns["bwd"]["weights"] > 2 * z3.phase_breakdowns["bwd"]["weights"]
    assert 3.8 < _rel(z0.bwd_end_breakdown["gradients"], z2.bwd_end_breakdown["gradients"]) <= 4.01
    assert z3.peak_bytes < z2.peak_bytes < z0.peak_bytes
    assert z1.peak_bytes < z0.peak_bytes


def test_zero3_bf16_master_keeps_fp32_shards_as_masters(fake_cuda_traces) -> None:
    r: TraceResult = fake_cuda_traces["z3_master"]
    z3: TraceResult = fake_cuda_traces["z3"]
    # FSDP2 MixedPrecisionPolicy(bf16, fp32 reduce): the fp32 shards are the masters, grads fp32 shards
    assert r.bwd_end_breakdown["master_weights"] == z3.bwd_end_breakdown["weights"]
    assert r.bwd_end_breakdown["gradients"] == z3.bwd_end_breakdown["gradients"]
    assert "weights" not in r.bwd_end_breakdown  # gathered bf16 copies are freed after backward
    # gathered copies during forward are bf16: half of z3's gathered fp32 ones
    gathered_fp32 = z3.phase_breakdowns["fwd"]["weights"] - z3.bwd_end_breakdown["weights"]
    assert r.phase_breakdowns["fwd"]["weights"] * 2 == gathered_fp32


def test_tp2_halves_the_block_weights(fake_cuda_traces) -> None:
    t1: TraceResult = fake_cuda_traces["tp1_blocks"]
    t2: TraceResult = fake_cuda_traces["tp2_blocks"]
    # q/k/v/fc_in by columns, proj/fc_out by rows; LayerNorms and the row-parallel biases stay whole
    ratio = t2.breakdown["weights"] / t1.breakdown["weights"]
    assert 0.5 <= ratio < 0.51
    assert 0.5 <= t2.breakdown["optimizer_state"] / t1.breakdown["optimizer_state"] < 0.51


def test_1f1b_first_stage_holds_two_micro_batches_the_last_one(fake_cuda_traces) -> None:
    s0: TraceResult = fake_cuda_traces["pp_s0"]
    s1: TraceResult = fake_cuda_traces["pp_s1"]
    gp: TraceResult = fake_cuda_traces["pp_gpipe"]
    assert (s0.meta["in_flight"], s1.meta["in_flight"], gp.meta["in_flight"]) == (2, 1, 4)
    # same layers, same shard: activations at the forward peak scale with the micro-batches in flight
    a0 = s0.phase_breakdowns["fwd"]["activations"]
    a1 = s1.phase_breakdowns["fwd"]["activations"]
    ag = gp.phase_breakdowns["fwd"]["activations"]
    per_micro_batch = a0 - a1  # saved for backward; the rest is the forward's transient at its peak
    assert per_micro_batch > 0.9 * a1
    assert ag - a1 == 3 * per_micro_batch
    # received activations (inputs of a middle stage) are held per in-flight micro-batch
    received = 2 * 64 * ARCH["hidden"] * 4  # one micro-batch's hidden state: batch 2, seq 64, fp32
    assert s0.phase_breakdowns["fwd"]["inputs"] - s1.phase_breakdowns["fwd"]["inputs"] == received
    assert s0.peak_bytes > s1.peak_bytes
    assert gp.peak_bytes > s0.peak_bytes


def test_bf16_master_breakdown_has_master_weights(fake_cuda_traces) -> None:
    r: TraceResult = fake_cuda_traces["bf16_master"]
    amp: TraceResult = fake_cuda_traces["bf16"]
    assert r.breakdown["master_weights"] == amp.breakdown["weights"]  # fp32 copy of every param
    assert r.breakdown["weights"] * 2 == r.breakdown["master_weights"]  # bf16 model params
    # at the step: bf16 params + fp32 master + fp32 master grads + m + v + sqrt temp = 22 B/param (note §5a)
    opt = r.phase_breakdowns["opt"]
    assert opt["gradients"] == opt["master_weights"]
    assert "gradients" in r.bwd_end_breakdown


def test_fp16_scaler_and_sgd_state(fake_cuda_traces) -> None:
    fp16: TraceResult = fake_cuda_traces["fp16"]
    bf16: TraceResult = fake_cuda_traces["bf16"]
    sgd: TraceResult = fake_cuda_traces["sgd"]
    z0: TraceResult = fake_cuda_traces["z0"]
    # GradScaler: scale + growth tracker are two 512-B blocks of state
    assert fp16.breakdown["optimizer_state"] - bf16.breakdown["optimizer_state"] == 2 * 512
    # SGD momentum: one param-sized buffer, half of Adam's two moments (+ Adam's 4-B CPU step counters)
    steps = z0.breakdown["optimizer_state"] - 2 * sgd.breakdown["optimizer_state"]
    assert 0 < steps < 512 and steps % 4 == 0
    assert sgd.phase_breakdowns["opt"] == sgd.bwd_end_breakdown  # SGD's step allocates nothing


def test_recompute_and_attention_modes(fake_cuda_traces) -> None:
    amp: TraceResult = fake_cuda_traces["bf16"]
    full: TraceResult = fake_cuda_traces["full_recompute"]
    math_: TraceResult = fake_cuda_traces["math"]
    sel: TraceResult = fake_cuda_traces["selective_math"]
    act = {
        k: r.phase_breakdowns["fwd"]["activations"]
        for k, r in (("amp", amp), ("full", full), ("math", math_), ("sel", sel))
    }
    assert act["full"] < act["amp"] < act["math"]  # flash saves out + logsumexp, math the s x s scores
    assert act["sel"] < act["math"]  # selective recompute drops the attention core's scores


def test_custom_module_factory_on_the_fake_gpu(fake_cuda_traces) -> None:
    """Any module reaches the worker as "file.py:function": the tests' own tiny GPT (tied head)."""
    r: TraceResult = fake_cuda_traces["custom_factory"]
    assert r.meta["device"] == "cuda"
    assert r.meta["inplace_accumulations"] > 0  # tied embedding + residual stream
    assert r.breakdown["weights"] > 0


def test_view_request_holds_its_in_flight_micro_batches(fake_cuda_traces) -> None:
    r: TraceResult = fake_cuda_traces["view"]
    assert r.meta["in_flight"] == 2
    assert r.meta["request"]["layer_range"] == [0, 3]


def test_plan_requests_one_per_device() -> None:
    from dataclasses import replace

    from tessera.memory.trace import plan_requests
    from tessera.plan import simple_plan

    plan = simple_plan(
        "gpt-tiny", n_layers=6, global_batch=12, seq_len=64, dp=2, tp=2, pp=2, micro_batches=3, zero=1
    )
    reqs = plan_requests(plan)
    assert sorted(reqs) == list(range(8))
    assert {r.micro_batch_size for r in reqs.values()} == {2}
    assert [reqs[k].tp_rank for k in range(4)] == [0, 1, 0, 1]
    assert {reqs[k].layer_range for k in range(4, 8)} == {(3, 6)}
    assert {(r.stage_index, r.n_stages, r.zero, r.dp_degree) for r in reqs.values()} == {
        (0, 2, 1, 2),
        (1, 2, 1, 2),
    }
    # uneven batch shares: each replica traces its own largest micro-batch
    stages = tuple(replace(s, batch_shares=(9, 3)) for s in plan.stages)
    uneven = plan_requests(replace(plan, stages=stages))
    assert [uneven[k].micro_batch_size for k in range(4)] == [3, 3, 1, 1]

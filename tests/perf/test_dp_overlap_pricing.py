"""The estimate prices the data-parallel gradient sync the runtime overlaps with the last backward (issue 20
item 3): only what the overlap leaves exposed counts, the plan's precision says whether it overlaps (one rule,
``tessera.plan.overlaps_grad_sync``, for the runtime and the estimate), and the tail DDP-style bucketing always
leaves exposed (the last bucket, an embedding table) is never hidden."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tessera.models.zoo import gpt
from tessera.perf.estimate import (
    GRAD_BUCKET_BYTES,
    OVERLAP_COMPUTE_SLOWDOWN,
    DPSync,
    Estimate,
    StageCost,
    Topology,
    compose,
    dp_exposed_s,
    estimate_plan,
    stage_cost,
)
from tessera.plan import Plan, Precision, overlaps_grad_sync, simple_plan

# GPT-2 small: ~124 M parameters, ~497 MB of fp32 gradients, ~20 buckets of 25 MiB (the table one of them)
SPEC = gpt.spec("gpt-125m", gpt.gpt_arch(768, 12, 12, vocab=50257, max_positions=1024), 1024)
TOPO = Topology(None)


def _plan(precision: str, *, zero: int = 0, micro_batches: int = 1, dp: int = 8, spec=SPEC) -> Plan:
    return simple_plan(spec.name, n_layers=spec.n_layers, global_batch=4 * dp, seq_len=spec.seq_len, dp=dp,
                       gpu_type="A100-80GB", micro_batches=micro_batches, precision=precision,
                       zero=zero)  # fmt: skip


def _three(plan: Plan, spec=SPEC) -> tuple[Estimate, Estimate, Estimate, StageCost]:
    """(the estimate, the same with the whole sync after backward, the same without any sync), stage 0."""
    est = estimate_plan(plan, spec, TOPO)
    c = stage_cost(plan, spec, 0, TOPO)
    after = compose(plan, spec, [replace(c, dp_hideable_s=0.0)], [], TOPO)
    bare = compose(plan, spec, [replace(c, dp_sync_s=0.0, dp_hideable_s=0.0)], [], TOPO)
    return est, after, bare, c


def test_the_rule_is_every_precision_but_bf16_master():
    assert [p.value for p in Precision if overlaps_grad_sync(p)] == ["fp32", "bf16", "fp16"]
    assert not overlaps_grad_sync(Precision.BF16_MASTER)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("micro_batches", [1, 4])
def test_overlapped_sync_is_cheaper_than_after_backward_and_never_below_no_sync(precision, micro_batches):
    est, after, bare, c = _three(_plan(precision, micro_batches=micro_batches))
    assert c.dp_sync_s > 0 and 0 < c.dp_hideable_s < c.dp_sync_s
    assert bare.iteration_time_s < est.iteration_time_s < after.iteration_time_s
    # the part that cannot hide stays: the embedding table (its own bucket, produced last) + the last bucket
    table = 4.0 * SPEC.layers[0].params
    tail = c.dp_sync_s * (table + GRAD_BUCKET_BYTES) / (4.0 * sum(layer.params for layer in SPEC.layers))
    assert c.dp_sync_s - c.dp_hideable_s == pytest.approx(tail, rel=1e-9)
    assert est.iteration_time_s - bare.iteration_time_s >= tail
    # the breakdown says the same: comm_s carries only the exposed sync
    assert est.comm_s == pytest.approx(after.comm_s - (after.iteration_time_s - est.iteration_time_s))


def test_full_overlap_would_hide_the_tail_this_model_keeps():
    """max(0, sync − backward) is 0 here (the backward is far longer than the sync); the estimate keeps the
    tail and the slowdown of the compute the hidden buckets run beside."""
    _, _, _, c = _three(_plan("fp32"))
    bwd = c.bwd_s + c.tp_comm_s / 2
    assert max(0.0, c.dp_sync_s - bwd) == 0.0
    slow = OVERLAP_COMPUTE_SLOWDOWN / (1.0 + OVERLAP_COMPUTE_SLOWDOWN)
    expect = c.dp_sync_s - c.dp_hideable_s + slow * c.dp_hideable_s
    assert c.dp_exposed_s == pytest.approx(expect)


def test_bf16_master_is_priced_after_backward_as_before():
    est, after, _, c = _three(_plan("bf16-master"))
    assert c.dp_hideable_s == 0.0 and c.dp_window_fraction == 0.0
    assert c.dp_exposed_s == c.dp_sync_s > 0
    assert est.iteration_time_s == after.iteration_time_s


def test_one_bucket_has_nothing_to_hide():
    """A model whose gradients fit one 25 MiB bucket: the bucket is complete only when backward ends."""
    tiny = gpt.spec("gpt-tiny-ish", gpt.gpt_arch(128, 2, 4, vocab=1000, max_positions=256), 256)
    assert 4.0 * sum(layer.params for layer in tiny.layers) < GRAD_BUCKET_BYTES
    est, after, _, c = _three(_plan("fp32", spec=tiny), tiny)
    assert c.dp_sync_s > 0 and c.dp_hideable_s == 0.0
    assert est.iteration_time_s == after.iteration_time_s


def test_zero_buckets_by_owner_leave_the_other_owners_exposed():
    """Under ZeRO-1 GradSync groups buckets by owner, owner 0 first; owner 0 holds the largest tensor (the
    embedding table, more than 1/8 of GPT-2's parameters), so at dp = 8 nothing launches during backward; at
    dp = 2 owner 0's other buckets do, at most half of the reduction."""
    _, _, _, c8 = _three(_plan("bf16", zero=1, dp=8))
    assert c8.dp_hideable_s == 0.0 and c8.dp_exposed_s == c8.dp_sync_s
    _, _, _, plain = _three(_plan("bf16", zero=0, dp=2))
    est, after, _, c2 = _three(_plan("bf16", zero=1, dp=2))
    assert 0 < c2.dp_hideable_s < 0.5 * plain.dp_sync_s
    assert est.iteration_time_s < after.iteration_time_s


def test_communication_bound_sync_exposes_what_the_window_cannot_hold():
    sync = DPSync(total_s=1.0, hideable_s=0.8, window_fraction=0.9)
    assert dp_exposed_s(sync, 0.1) == pytest.approx(1.0 - 0.9 * 0.1)  # network-bound: the window hides 0.09
    long = dp_exposed_s(sync, 10.0)  # compute-bound: the tail + the slowdown beside the hidden 0.8
    assert long == pytest.approx(0.2 + 0.8 * OVERLAP_COMPUTE_SLOWDOWN / (1 + OVERLAP_COMPUTE_SLOWDOWN))
    assert dp_exposed_s(DPSync(1.0), 10.0) == 1.0
    # between the unhideable part and the whole sync, whatever the backward
    for bwd in (0.0, 0.01, 0.5, 0.93, 2.0, 100.0):
        assert 0.2 <= dp_exposed_s(sync, bwd) <= 1.0

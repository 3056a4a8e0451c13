"""A tied embedding split over the first and last stage is synced once, as the runtime does it.

The runtime keeps a parameter tied across stages out of the bucketed DP sync (``runtime.engine``: ``GradSync``
gets the masters less the tied ones; ``sync_tied`` sums the table over both stages' ranks) and out of FSDP2
(``ignored_params``), while ZeRO-1/2's owners still broadcast it with every other master. The estimate priced
the table twice on the first stage: in the tie group's all-reduce and again in the stage's buckets (or its
FSDP embedding unit). These tests price the runtime's collectives from the estimate's own pieces."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tessera.models.zoo import gpt
from tessera.perf.comm import Collective
from tessera.perf.costmodel import CostModel
from tessera.perf.estimate import (
    GRAD_BUCKET_BYTES,
    Topology,
    _bucketed_s,
    _comm,
    _dp_sync_s,
    _rank_params,
    estimate_plan,
    fsdp_comm,
    stage_cost,
)
from tessera.plan import Plan, simple_plan

ARCH = gpt.gpt_arch(768, 12, 12, vocab=50257, max_positions=1024)  # GPT-2 small, tied (the default)
SPEC = gpt.spec("gpt-125m", ARCH, 1024)
UNTIED = gpt.spec("gpt-125m-untied", replace(ARCH, tied_embeddings=False), 1024)
TABLE = 4.0 * ARCH.vocab * ARCH.hidden  # fp32 gradient bytes of the tied table
TOPO = Topology(None)
COST = CostModel()


def _plan(precision: str = "bf16-master", *, zero: int = 0, dp: int = 4, tp: int = 1) -> Plan:
    return simple_plan(SPEC.name, n_layers=SPEC.n_layers, global_batch=8 * dp, seq_len=SPEC.seq_len, dp=dp,
                       tp=tp, pp=2, gpu_type="A100-80GB", micro_batches=2, precision=precision,
                       zero=zero)  # fmt: skip


def _tied_all_reduce(plan: Plan) -> float:
    group = plan.stages[0].devices + plan.stages[1].devices
    return _comm(COST, Collective.ALL_REDUCE, TABLE, len(group), TOPO.link(group))


def _buckets(plan: Plan, index: int, collective: Collective, nbytes: float, k: int = 0) -> float:
    st = plan.stages[index]
    group, link, bandwidth = TOPO.dp_group(st.devices, k, st.tp_degree)
    return _bucketed_s(COST, collective, nbytes, group, TOPO, (link, bandwidth))


def test_the_spec_counts_the_table_in_the_embedding_only():
    """The premise: the tied table sits in the first stage's parameters (the embedding layer), not the head's;
    an untied model's first stage holds the same parameters."""
    assert SPEC.layers[0].params == UNTIED.layers[0].params >= ARCH.vocab * ARCH.hidden
    assert UNTIED.layers[-1].params - SPEC.layers[-1].params == ARCH.vocab * ARCH.hidden


@pytest.mark.parametrize(("dp", "tp"), [(4, 1), (2, 2)])
def test_first_stage_buckets_leave_the_tied_table_out(dp, tp):
    plan = _plan(dp=dp, tp=tp)
    st = plan.stages[0]
    tied = _dp_sync_s(plan, SPEC, st, TOPO, COST)
    untied = _dp_sync_s(plan, UNTIED, st, TOPO, COST)
    held = 4.0 * _rank_params(SPEC, st, 0)  # even TP shares: every rank alike
    table = TABLE / tp  # the rank's vocab rows of it
    assert untied.total_s == pytest.approx(_buckets(plan, 0, Collective.ALL_REDUCE, held, 0))
    expect = _tied_all_reduce(plan) + _buckets(plan, 0, Collective.ALL_REDUCE, held - table, 0)
    assert tied.total_s == pytest.approx(expect, rel=1e-12)
    # the old pricing: the tie group's all-reduce on top of the untied buckets, the table in both
    assert tied.total_s < untied.total_s + _tied_all_reduce(plan) - 1e-6


def test_zero_broadcast_carries_the_table_on_both_stages():
    """ZeRO-1: the buckets leave the table out, but the owners broadcast every master, the first stage's
    table and the last stage's copy of it in the head (which the spec's head does not count)."""
    plan = _plan(zero=1)
    first, last = plan.stages
    tied_ar = _tied_all_reduce(plan)
    held0 = 4.0 * _rank_params(SPEC, first, 0)
    s0 = _dp_sync_s(plan, SPEC, first, TOPO, COST)
    expect0 = (
        tied_ar
        + _buckets(plan, 0, Collective.ALL_REDUCE, held0 - TABLE)
        + _buckets(plan, 0, Collective.ALL_GATHER, held0)
    )
    assert s0.total_s == pytest.approx(expect0, rel=1e-12)
    held1 = 4.0 * _rank_params(SPEC, last, 0)
    s1 = _dp_sync_s(plan, SPEC, last, TOPO, COST)
    expect1 = (
        tied_ar
        + _buckets(plan, 1, Collective.ALL_REDUCE, held1)
        + _buckets(plan, 1, Collective.ALL_GATHER, held1 + TABLE)
    )
    assert s1.total_s == pytest.approx(expect1, rel=1e-12)


def test_overlap_keeps_only_the_rest_of_the_embedding_and_the_last_bucket_exposed():
    """fp32: the buckets overlap the last backward; of the embedding layer only what is not the tied table
    (the position table) is a bucket produced last, so with the last bucket it is all of the buckets that
    cannot hide (the tied all-reduce runs after backward, exposed whole)."""
    plan = _plan("fp32")
    st = plan.stages[0]
    sync = _dp_sync_s(plan, SPEC, st, TOPO, COST)
    grad_bytes = 4.0 * _rank_params(SPEC, st, 0) - TABLE
    reduce_s = _buckets(plan, 0, Collective.ALL_REDUCE, grad_bytes)
    positions = 4.0 * ARCH.max_positions * ARCH.hidden
    assert 4.0 * SPEC.layers[0].params - TABLE == pytest.approx(positions)
    exposed = _tied_all_reduce(plan) + reduce_s * (positions + GRAD_BUCKET_BYTES) / grad_bytes
    assert sync.total_s - sync.hideable_s == pytest.approx(exposed, rel=1e-12)
    assert 0 < sync.hideable_s < sync.total_s


def test_fsdp_embedding_unit_goes_without_the_tied_table():
    """ZeRO-3 on a data-parallel pipeline (Tessera's transport, so FSDP2 runs it): the first stage's
    embedding unit gathers and reduce-scatters the position table only."""
    plan = _plan("fp32", zero=3)
    st = plan.stages[0]
    tied = fsdp_comm(plan, SPEC, st, TOPO, COST)
    untied = fsdp_comm(plan, UNTIED, st, TOPO, COST)
    assert 0 < tied.reduce_s < untied.reduce_s and tied.gather_fwd_s < untied.gather_fwd_s
    link, n = TOPO.link_of(st.devices), st.dp_degree
    emb, positions = 4.0 * SPEC.layers[0].params, 4.0 * ARCH.max_positions * ARCH.hidden
    rs = Collective.REDUCE_SCATTER
    gap = _comm(COST, rs, emb, n, link) - _comm(COST, rs, positions, n, link)
    assert untied.reduce_s - tied.reduce_s == pytest.approx(gap, rel=1e-9)
    # the stage's sync is the tied all-reduce alone (FSDP2 syncs the rest per micro-batch)
    assert _dp_sync_s(plan, SPEC, st, TOPO, COST).total_s == pytest.approx(_tied_all_reduce(plan))


def test_the_estimate_of_a_tied_pipeline_prices_the_first_stage_tail_once():
    """End to end: the first stage's exposed sync (bf16-master: all of it) is the tied all-reduce plus the
    buckets without the table, and the iteration carries no more than that for it."""
    plan = _plan()
    c0 = stage_cost(plan, SPEC, 0, TOPO)
    held = 4.0 * _rank_params(SPEC, plan.stages[0], 0)
    expect = _tied_all_reduce(plan) + _buckets(plan, 0, Collective.ALL_REDUCE, held - TABLE)
    assert c0.dp_exposed_s == pytest.approx(expect, rel=1e-12)
    assert estimate_plan(plan, SPEC, TOPO).feasible

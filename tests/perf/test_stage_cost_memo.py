"""The cold table build's shortcuts change no figure (issue 21 item 1).

A stage option priced through a Cell estimator's shared memo — its replicas grouped once per stage object,
replica compute and TP all-reduces kept by what they depend on, peaks read by a plain key, links and DP
groups kept by the devices' identity — equals the same option priced alone by ``stage_cost`` without a memo
(the plain loops), to the last bit: every option (not only DP-only / TP-only), micro-batch counts from one
sample per micro-batch to more micro-batches than some replicas have samples, memory rungs up to ZeRO-2
(FSDP), mixed GPU types with balanced uneven shares, TP groups across nodes, dense and MoE models. And the
memory formula's parameter shapes, read from modules built without running their initializers, are the
initialized modules' shapes."""

from __future__ import annotations

import copy

import pytest

from tessera.hardware import get_cluster
from tessera.models.zoo import get_spec
from tessera.perf.estimate import stage_cost
from tessera.planning.cells import CellEstimator, CellShape
from tessera.planning.space import Rung, TrainSettings, micro_batch_options


def _estimator(model: str, batch: int, precision: str = "bf16") -> CellEstimator:
    spec = copy.deepcopy(get_spec(model))  # its own per-spec memos
    settings = TrainSettings(model=model, global_batch=batch, seq_len=spec.seq_len, precision=precision)
    return CellEstimator(spec, settings, get_cluster("crius-sim-1280"))


RUNGS = (Rung("none", 0), Rung("none", 1), Rung("selective", 0), Rung("full", 2))


@pytest.mark.parametrize(
    ("model", "batch", "shapes"),
    [
        # 16 A100s on two 8-GPU nodes: TP 16 spans both; one and two stages
        ("gpt3-1.3b", 64, [({"A100-40GB": 16}, 1), ({"A100-40GB": 16}, 2)]),
        # mixed types: shares and shard ratios balanced to the devices' speeds (uneven)
        ("gpt3-1.3b", 48, [({"A100-40GB": 4, "A10": 4}, 2), ({"V100-32GB": 8, "A10": 8}, 1)]),
        # MoE layers stay whole under TP; 24 samples over 16 replicas: shares below the micro-batch count
        ("moe-1.3b", 24, [({"A40": 16}, 1), ({"A40": 8, "A10": 8}, 2)]),
    ],
)
def test_memo_path_equals_plain_stage_cost(model, batch, shapes):
    est = _estimator(model, batch)
    priced = 0
    for gpus, S in shapes:
        shape = CellShape.of(gpus, S)
        for rung in RUNGS:
            for B in micro_batch_options(S, batch):
                space = est.space(shape, rung, B)
                assert space is not None
                for s, options in enumerate(space.options):
                    for j in range(len(options)):
                        fast = space.stage_cost(s, j)  # the shared memo's paths
                        again = space.stage_cost(s, j)
                        plain = stage_cost(space._carrier(s, j), est.spec, s, est.topo, est.cost,
                                           headroom_fraction=space.headroom_fraction)  # fmt: skip
                        assert fast == plain == again
                        priced += 1
    assert priced > 100


def test_memo_path_equals_a_fresh_estimator_after_other_cells():
    """Figures kept by content (replica compute, TP all-reduces, peaks) and read by another Cell's stages equal
    those a fresh estimator computes for that Cell alone."""
    shared = _estimator("gpt3-2.7b", 128)
    for gpus, S in (({"A100-40GB": 8}, 2), ({"A100-40GB": 16}, 2), ({"A100-40GB": 32}, 4)):
        shared.estimate(CellShape.of(gpus, S))
    shape = CellShape.of({"A100-40GB": 64}, 4)
    fresh = _estimator("gpt3-2.7b", 128)
    a, b = shared.estimate(shape), fresh.estimate(shape)
    assert a is not None and b is not None
    assert (a.iteration_time_s, a.plan, a.estimate) == (b.iteration_time_s, b.plan, b.estimate)


@pytest.mark.parametrize("model", ["bert-0.76b", "gpt3-1.3b", "llama2-7b", "moe-1.3b"])
def test_parameter_shapes_without_initializers(model):
    from tessera.memory import formula
    from tessera.nn.common import TPShare
    from tessera.nn.zoo import build_model

    m = formula._Model.of(get_spec(model))
    for layer in (0, 1, len(m.kinds) - 1):
        for tp in (1, 2):
            fast = formula._layer_params(m.family, m.arch_items, layer, tp)
            built = build_model(
                formula.TransformerArch(**dict(m.arch_items)), family=m.family, layer_range=(layer, layer + 1),
                tp=TPShare(tp, 0) if tp > 1 else None, device="meta",
            ).layers[0]  # fmt: skip
            want = [(n, tuple(p.shape)) for n, p in built.named_parameters()]
            want += [("buffer:" + n, tuple(b.shape)) for n, b in built.named_buffers()]
            assert list(fast) == want

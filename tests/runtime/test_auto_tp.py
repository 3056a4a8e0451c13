"""Whale's ``split`` on plain user code: Tessera picks each Linear's and Embedding's cut by pattern, and the
sharded model trains exactly as the single-process one does."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import max_rel, plan, reference, rel, stage
from plain_models import FFN, HIDDEN, VOCAB, Embed, Head, Mlp, PlainFactory, SwiGLU
from torch import nn

import tessera.runtime as tr
from tessera.plan import Device
from tessera.runtime.auto_tp import cut_in_place, plan_auto_shards, split_units
from tessera.runtime.model import TPSpec

EVEN, UNEVEN = TPSpec(2, 0), TPSpec(2, 1, (0.75, 0.25))


def test_mlp_is_a_column_row_pair():
    shards = plan_auto_shards(Mlp(), EVEN)
    assert (shards.columns, shards.rows, shards.gathered) == (("fc1",), ("fc2",), ())
    assert shards.specs["fc1.weight"].ranges == ((0, FFN // 2),) and shards.specs["fc2.weight"].dim == 1
    assert shards.specs["norm.weight"].replicated and shards.specs["fc2.bias"].replicated


def test_swiglu_gate_and_up_are_one_pair():
    shards = plan_auto_shards(SwiGLU(), UNEVEN)
    assert (shards.columns, shards.rows) == (("gate", "up"), ("down",))
    # rank 1 holds the quarter share: both columns cut alike, so their product lines up element for element
    assert shards.specs["gate.weight"].ranges == shards.specs["up.weight"].ranges
    assert shards.specs["down.weight"].ranges == shards.specs["gate.weight"].ranges


def test_embeddings_feeding_a_linear_are_cut_by_columns_without_communication():
    shards = plan_auto_shards(Embed(), EVEN)
    assert shards.columns == () and shards.rows == ("mix",) and shards.gathered == ()
    assert shards.specs["tok.weight"].dim == 1 and shards.specs["pos.weight"].dim == 1


def test_a_lone_linear_is_gathered():
    shards = plan_auto_shards(Head(), UNEVEN)
    (g,) = shards.gathered
    assert (g.name, g.rank, g.linear, sum(g.sizes)) == ("out", 1, True, VOCAB)
    assert shards.columns == shards.rows == ()


def test_cut_in_place_leaves_local_shapes_and_values():
    layer = SwiGLU()
    whole = {n: p.detach().clone() for n, p in layer.named_parameters()}
    shards = plan_auto_shards(layer, UNEVEN)
    cut_in_place(layer, shards.specs)
    for name, p in layer.named_parameters():
        spec = shards.specs[name]
        assert tuple(p.shape) == spec.local_shape and torch.equal(p, spec.slice(whole[name]))
    assert layer.gate.out_features == layer.down.in_features < FFN


def test_a_layer_that_is_one_linear_is_gathered_whole():
    shards = plan_auto_shards(nn.Linear(HIDDEN, VOCAB), UNEVEN)
    assert [g.name for g in shards.gathered] == [""] and shards.specs["weight"].ranges[0][1] == VOCAB


def test_the_planner_prices_what_the_split_cuts(tmp_path):
    """The service's trace of a plain entrypoint marks each layer the split cuts as column-sharded, with the
    narrowest cut dimension as its TP limit; a layer with nothing to cut stays replicated."""
    from pathlib import Path

    from tessera.models.spec import TPShard
    from tessera.service.model_source import inspect_entrypoint, spec_from_json

    assert (
        split_units(Mlp()) == FFN and split_units(Embed()) == HIDDEN and split_units(nn.LayerNorm(4)) is None
    )
    entry = f"{Path(__file__).with_name('plain_models.py')}:PlainLM"
    spec = spec_from_json(inspect_entrypoint(entry, "plain", 16)["spec"])
    assert [(layer.tp_shard, layer.tp_units) for layer in spec.layers] == [
        (TPShard.COLUMNS, HIDDEN), (TPShard.COLUMNS, FFN), (TPShard.COLUMNS, FFN), (TPShard.COLUMNS, VOCAB),
    ]  # fmt: skip


class _Twice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(HIDDEN, HIDDEN)

    def forward(self, x):
        return self.fc(self.fc(x))


class _Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(HIDDEN, HIDDEN)

    def forward(self, x):
        return self.fc(x) if x.sum() > 0 else x  # data-dependent: torch.fx cannot trace it


class _Softmaxed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(HIDDEN, FFN), nn.Linear(FFN, HIDDEN)

    def forward(self, x):
        return self.b(F.softmax(self.a(x), dim=-1))  # softmax mixes the columns: no pair


def test_what_cannot_be_cut_stays_whole():
    assert plan_auto_shards(_Twice(), EVEN) is None
    assert plan_auto_shards(_Branchy(), EVEN) is None
    lone = plan_auto_shards(_Softmaxed(), EVEN)
    assert lone.columns == lone.rows == () and [g.name for g in lone.gathered] == ["a", "b"]


def _plan(factory: PlainFactory, kinds: list[str], batch: int = 8):
    tr.init(tr.Config(num_micro_batch=2))
    model = factory(layer_range=None, tp=None)
    devs = [Device(i, t, local_index=i) for i, t in enumerate(kinds)]
    flops = {"fast": 3.0, "slow": 1.0} if len(set(kinds)) > 1 else None
    return tr.plan_from_annotations(
        model, devs, model_name="plain", global_batch=batch, seq_len=16, device_flops=flops
    )


def _run_exactly(pairs) -> None:
    jobs = [
        (p, tr.RunOptions(steps=2, model=f, capture_grads=True, pg_timeout_s=60, watchdog_s=150))
        for p, f in pairs
    ]
    for (p, o), res in zip(jobs, tr.launch_many(jobs), strict=True):
        losses, grads = reference(o.model, p, steps=2)
        assert max(rel(a, b) for a, b in zip(res.losses, losses, strict=True)) < 1e-5
        assert max_rel(res.grads, grads) < 1e-5


@pytest.mark.timeout(240)
def test_split_plain_model_trains_exactly_even_and_uneven():
    even = _plan(PlainFactory(), ["fast", "fast"])
    uneven = _plan(PlainFactory(), ["fast", "slow"])
    assert [s.tp_degree for s in even.stages] == [2] and uneven.stages[0].tp_ratios == (0.75, 0.25)
    _run_exactly([(even, PlainFactory()), (uneven, PlainFactory())])


@pytest.mark.timeout(240)
def test_split_plain_layers_behind_a_replicated_stage_train_exactly():
    bridged = _plan(PlainFactory(2, 2), ["fast", "fast", "slow"])
    assert [(s.dp_degree, s.tp_degree) for s in bridged.stages] == [(1, 1), (1, 2)]
    assert bridged.stages[1].tp_ratios == (0.75, 0.25)
    _run_exactly([(bridged, PlainFactory(2, 2))])


def _build_and_forward(rank: int, out) -> None:
    import torch.distributed as dist

    from tessera.runtime.model import reference_model
    from tessera.runtime.stage import build_stage

    tp = TPSpec(2, rank, (0.75, 0.25))
    stage = build_stage(
        PlainFactory(), (0, 4), 0, tp=tp, tp_group=dist.group.WORLD, attention="flash", recompute="none",
        device=torch.device("cpu"),
    )  # fmt: skip
    ids, _ = stage.module.make_batch(3, 16, generator=torch.Generator().manual_seed(5))
    out[rank] = (
        {e.fqn: tuple(e.param.shape) for e in stage.entries},
        stage.forward(ids).detach(),
        reference_model(PlainFactory(), 4, 0)(ids).detach(),
    )


@pytest.mark.timeout(120)
def test_ranks_hold_only_their_shards_and_compute_the_whole_output():
    from helpers import run_on_gloo

    out = run_on_gloo(_build_and_forward, world=2)
    shapes0, y0, ref = out[0]
    shapes1, y1, _ = out[1]
    assert torch.allclose(y0, ref, atol=1e-5) and torch.allclose(y1, ref, atol=1e-5)
    assert shapes0["layers.1.fc1.weight"][0] + shapes1["layers.1.fc1.weight"][0] == FFN
    assert shapes0["layers.1.fc1.weight"][0] > shapes1["layers.1.fc1.weight"][0]  # 3:1
    assert shapes1["layers.0.tok.weight"] == (VOCAB, HIDDEN - shapes0["layers.0.tok.weight"][1])
    assert shapes1["layers.2.down.weight"][1] < FFN and shapes1["layers.3.out.weight"][0] < VOCAB
    assert shapes1["layers.1.norm.weight"] == (HIDDEN,)


@pytest.mark.timeout(240)
def test_an_auto_split_checkpoint_resumes_on_data_parallelism(tmp_path):
    """The cut weights are saved by their specs like any TP shard: a run saved under the uneven split and
    resumed under plain data parallelism continues the uninterrupted loss trajectory."""
    split = _plan(PlainFactory(), ["fast", "slow"])
    dp = plan("plain", [stage(0, 4, [0, 1], dp=2, shares=(5, 3))], seq=16)
    base = {"model": PlainFactory(), "pg_timeout_s": 60, "watchdog_s": 150, "learning_rate": 3e-3}
    ckpt = str(tmp_path / "ckpt")
    full, first, second = tr.launch_many(
        [
            (split, tr.RunOptions(steps=4, **base)),
            (split, tr.RunOptions(steps=2, checkpoint_dir=ckpt, **base)),
            (dp, tr.RunOptions(steps=4, resume_from=ckpt, **base)),
        ]
    )
    resumed = first.losses + second.losses
    assert len(resumed) == 4 and max(rel(a, b) for a, b in zip(resumed, full.losses, strict=True)) < 1e-5

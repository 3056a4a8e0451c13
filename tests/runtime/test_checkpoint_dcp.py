"""Checkpoints are torch.distributed.checkpoint (DCP) directories: uneven TP pieces are DCP chunks, any reader of
DCP loads them, and DCP reshards them onto another Plan (each rank reading only the chunks it overlaps)."""

from __future__ import annotations

import functools
import json

import pytest
import torch
import torch.distributed.checkpoint as dcp
from helpers import plan, rel, run_on_gloo, stage
from models import factory, n_layers

from tessera.runtime import RunOptions, checkpoint, launch_many
from tessera.runtime.shards import ShardSpec

NAME = "gpt-tiny"


@pytest.fixture(scope="module")
def from_uneven_tp(tmp_path_factory):
    """Saved under uneven 2-way TP at step 2; resumed on a 2-stage pipeline (weights captured) and on uneven
    ZeRO-1 DP (the optimizer state resharded onto its owners), against an uninterrupted TP run."""
    root = tmp_path_factory.mktemp("dcp")
    n = n_layers(NAME)
    tp = plan(NAME, [stage(0, n, [0, 1], tp=2, ratios=(0.75, 0.25))])
    pp = plan(NAME, [stage(0, 2, [0]), stage(2, n, [1])], micro=2)
    zero1 = plan(NAME, [stage(0, n, [0, 1], dp=2, shares=(5, 3))], micro=2, zero=1)
    base = dict(model=factory(NAME), pg_timeout_s=60, watchdog_s=120, learning_rate=3e-3)
    ck = str(root / "ck")
    results = launch_many(
        [
            (tp, RunOptions(steps=4, **base)),
            (tp, RunOptions(steps=2, checkpoint_dir=ck, **base)),
            (pp, RunOptions(steps=2, resume_from=ck, capture_params=True, **base)),
            (zero1, RunOptions(steps=4, resume_from=ck, **base)),
        ]
    )
    return root / "ck", results


@pytest.mark.timeout(300)
@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")  # a plain single-process DCP load
def test_the_files_are_a_dcp_checkpoint_with_uneven_chunks(from_uneven_tp):
    ck, _ = from_uneven_tp
    step = checkpoint.resolve(ck)
    assert step.name == "step-00000002" and (ck / "latest").read_text() == step.name
    meta = json.loads((step / "meta.json").read_text())
    assert meta["version"] == checkpoint.CKPT_VERSION and meta["format"] == "torch.distributed.checkpoint"
    assert {p.name for p in step.iterdir()} >= {".metadata", "__0_0.distcp", "__1_0.distcp"}
    saved = dcp.FileSystemReader(step).read_metadata().state_dict_metadata
    full = checkpoint.load(ck)
    assert {f"model.{k}" for k in full.params} == {k for k in saved if k.startswith("model.")}
    assert any(k.startswith("optim.state.") and k.endswith(".exp_avg") for k in saved)
    # the uneven TP split is recorded as chunks of unequal size along the sharded dimension
    uneven = [
        k for k, md in saved.items()
        if k.startswith("model.") and len({tuple(c.sizes) for c in md.chunks}) > 1
    ]  # fmt: skip
    assert uneven, "no parameter saved in uneven TP chunks"
    # and a plain DCP load (DefaultLoadPlanner, no Tessera code) reads the same full tensors
    plain = {k: torch.empty(tuple(saved[f"model.{k}"].size)) for k in full.params}
    state = {f"model.{k}": v for k, v in plain.items()}
    dcp.load(state, checkpoint_id=str(step), no_dist=True)
    for k, v in full.params.items():
        assert torch.equal(state[f"model.{k}"], v), k


@pytest.mark.timeout(300)
def test_resume_on_a_pipeline_loads_the_same_weights(from_uneven_tp):
    ck, (_, _, pp, _) = from_uneven_tp
    assert not pp.records  # nothing left to train: the weights are those loaded
    saved = checkpoint.load(ck).params
    assert set(pp.params) == set(saved)
    for k, v in saved.items():
        assert torch.equal(pp.params[k], v), k


@pytest.mark.timeout(300)
def test_resume_on_zero1_continues_the_tp_trajectory(from_uneven_tp):
    _, (whole, first, _, zero1) = from_uneven_tp
    assert [r.step for r in zero1.records] == [2, 3]
    resumed = first.losses + zero1.losses
    assert max(rel(a, b) for a, b in zip(resumed, whole.losses, strict=True)) < 1e-5, (resumed, whole.losses)


def test_a_rank_reads_its_own_boxes_of_any_layout(tmp_path):
    """Written whole by one process, read back as a two-range slice along another dimension."""
    full = torch.arange(24.0).reshape(6, 4)
    whole = ShardSpec((6, 4))
    state = [("w::exp_avg", whole, 2 * full), ("w::step", ShardSpec(()), torch.tensor(3.0))]
    checkpoint.save(tmp_path, 5, 0, [("w", whole, full)], state, {"data_position": 5})
    spec = ShardSpec((6, 4), 1, ((0, 1), (2, 4)))
    ck = checkpoint.load(tmp_path, checkpoint.Want({"w": spec}, frozenset({"w"})))
    assert ck.step == 5 and ck.meta["data_position"] == 5
    assert torch.equal(ck.params["w"], spec.slice(full))
    assert torch.equal(ck.optim["w::exp_avg"], spec.slice(2 * full)) and float(ck.optim["w::step"]) == 3.0
    wrong = checkpoint.Want({"w": ShardSpec((6, 5))})
    with pytest.raises(ValueError, match=r"model\.w has shape \(6, 4\)"):
        checkpoint.load(tmp_path, wrong)
    with pytest.raises(ValueError, match="no parameter v"):
        checkpoint.load(tmp_path, checkpoint.Want({"v": whole}))


def _save_whole_and_part(root: str, rank: int, out: dict) -> None:
    """Rank 0 holds the tied weight whole, rank 1 only a part of it (a stage that shards it)."""
    full = torch.arange(12.0).reshape(3, 4)
    spec = ShardSpec((3, 4)) if rank == 0 else ShardSpec((3, 4), 0, ((1, 3),))
    checkpoint.save(root, 1, rank, [("tied", spec, spec.slice(full))], [], {})


@pytest.mark.timeout(120)
def test_a_whole_copy_wins_over_overlapping_parts(tmp_path):
    run_on_gloo(functools.partial(_save_whole_and_part, str(tmp_path)))
    saved = dcp.FileSystemReader(checkpoint.resolve(tmp_path)).read_metadata().state_dict_metadata
    assert [tuple(c.sizes) for c in saved["model.tied"].chunks] == [(3, 4)]
    assert torch.equal(checkpoint.load(tmp_path).params["tied"], torch.arange(12.0).reshape(3, 4))


def test_version_1_checkpoints_still_load_and_unknown_ones_are_refused(tmp_path):
    full = torch.arange(8.0).reshape(4, 2)
    step = tmp_path / "step-00000003"
    step.mkdir()
    rows = [("w", [4, 2], 0, [[0, 1], [3, 4]], full[[0, 3]]), ("w", [4, 2], 0, [[1, 3]], full[1:3])]
    torch.save({"params": rows, "optim": [], "rng": torch.get_rng_state()}, step / "rank00000.pt")
    (step / "meta.json").write_text(json.dumps({"version": 1, "step": 3}))
    assert torch.equal(checkpoint.load(tmp_path).params["w"], full)
    half = ShardSpec((4, 2), 1, ((1, 2),))
    assert torch.equal(checkpoint.load(tmp_path, checkpoint.Want({"w": half})).params["w"], full[:, 1:])
    (step / "meta.json").write_text(json.dumps({"version": 99, "step": 3}))
    with pytest.raises(ValueError, match="version 99 is not one this Tessera reads"):
        checkpoint.load(tmp_path)

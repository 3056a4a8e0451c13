"""A tensor-parallel rank of a pretrained Hugging Face model reads only its own shard of its own stage's layers.

``build_stage`` is run for each rank of a 2-way TP group in this one process (PyTorch's ``fake`` process group:
building a stage communicates nothing), on tiny llama and gpt2 models written with ``save_pretrained``. While it
builds, ``hf_weights.recording_reads`` sees every tensor read from the safetensors files: each key of the stage
once, at the shape of this rank's shard (never the whole shape of a TP-sharded weight), and no key of another
stage. The built weights are the reference model's, sliced as the stage's shard specs say, and the two ranks'
shards cover the whole tensors.
"""

from __future__ import annotations

import pytest
import torch
from hf_models import N_DECODER, tiny_config

from tessera.models import hf_weights
from tessera.nn.dtensor_tp import fake_process_group
from tessera.nn.hf import FAMILIES, HFModel, hf_key
from tessera.runtime.model import TPSpec, build_layer, tied_groups
from tessera.runtime.shards import assemble
from tessera.runtime.stage import build_stage
from tessera.runtime.torch_parallel import is_dtensor, local

N = N_DECODER + 2  # embedding, decoder layers, head
STAGES = ((0, 2), (2, N))  # the tied gpt2 head's stage does not hold the embedding


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(model directory, reference state by checkpoint key) of tiny llama (4 kv heads: 3:1 cuts heads 3:1,
    not kv groups 1:1) and gpt2 (tied wte / lm_head)."""
    from transformers import AutoModelForCausalLM

    out = {}
    for i, family in enumerate(("llama", "gpt2")):
        config = tiny_config(family)
        if family == "llama":
            config.num_key_value_heads = 4
        torch.manual_seed(i)
        model = AutoModelForCausalLM.from_config(config)
        path = tmp_path_factory.mktemp(family)
        model.save_pretrained(str(path))
        out[family] = (path, {k: v.detach().clone() for k, v in model.state_dict().items()})
    return out


def _build(path, layer_range, rank: int, ratios: tuple[float, ...], dtensor: bool):
    import torch.distributed as dist

    factory = HFModel(str(path))
    ties = tied_groups(factory)  # as the engine passes them: gpt2's head is the embedding
    with fake_process_group(2, rank), hf_weights.recording_reads() as reads:
        stage = build_stage(
            factory,
            layer_range,
            0,
            tp=TPSpec(2, rank, ratios),
            tp_group=dist.group.WORLD,
            attention="flash",
            recompute="none",
            device=torch.device("cpu"),
            ties=ties,
            dtensor_tp=dtensor,
        )
        # the local tensors, while the mesh the DTensors name still exists
        held = [(e.fqn, e.spec, local(e.param).detach().clone(), is_dtensor(e.param)) for e in stage.entries]
    return held, reads


def _check_stage(family: str, saved, ratios: tuple[float, ...], dtensor: bool) -> int:
    """Builds every (stage, rank) and checks reads and values; returns how many DTensor parameters it saw."""
    path, ref = saved[family]
    fam = FAMILIES[family]
    pieces = []
    n_dtensor = 0
    for layer_range in STAGES:
        for rank in range(2):
            held, reads = _build(path, layer_range, rank, ratios, dtensor)
            expected = {hf_key(fam, N, fqn): spec.local_shape for fqn, spec, _, _ in held}
            assert len(reads) == len(dict(reads)), f"{family} {layer_range} rank {rank}: a tensor read twice"
            assert dict(reads) == expected, (family, layer_range, rank)
            sharded = [spec for _, spec, _, _ in held if not spec.replicated]
            assert sharded and all(spec.local_shape != spec.full_shape for spec in sharded)
            for fqn, spec, value, is_dt in held:
                key = hf_key(fam, N, fqn)
                assert torch.equal(value, spec.slice(ref[key])), (family, rank, fqn)
                pieces.append((key, spec, value))
                n_dtensor += is_dt
    whole = assemble(pieces)
    assert whole.keys() == {k for k in ref if not (k == "lm_head.weight" and family == "gpt2")}
    assert all(torch.equal(whole[k], ref[k]) for k in whole)
    return n_dtensor


@pytest.mark.timeout(300)
@pytest.mark.parametrize("ratios", [(0.75, 0.25), (0.25, 0.75)], ids=["3:1", "1:3"])
@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_uneven_tp_rank_reads_only_its_shard_of_its_stage(saved, family, ratios):
    assert _check_stage(family, saved, ratios, dtensor=False) == 0


@pytest.mark.timeout(300)
def test_dtensor_even_tp_rank_reads_only_its_shard_of_its_stage(saved):
    """DTensor's placements are taken from the whole layer on meta; the shard read becomes their local tensor."""
    assert _check_stage("llama", saved, (), dtensor=True) > 0


@pytest.mark.timeout(300)
def test_dtensor_chunks_unlike_the_shard_read_the_layer_whole_once(tmp_path):
    """50 FFN columns over 4 ranks: DTensor's chunks are 13, 13, 13, 11, the model's cut 13, 13, 12, 12. Rank 3
    cannot wrap its cut as DTensor's shard, so its layer is read whole (once, and no slice read before) for
    DTensor to distribute, as before."""
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    config = tiny_config("llama")
    config.intermediate_size, config.num_key_value_heads = 50, 4
    AutoModelForCausalLM.from_config(config).save_pretrained(str(tmp_path))
    with fake_process_group(4, 3), hf_weights.recording_reads() as reads:
        stage = build_stage(
            HFModel(str(tmp_path)), (1, 2), 0, tp=TPSpec(4, 3), tp_group=dist.group.WORLD, attention="flash",
            recompute="none", device=torch.device("cpu"), dtensor_tp=True,
        )  # fmt: skip
        whole = {hf_key(FAMILIES["llama"], N, e.fqn): e.spec.full_shape for e in stage.entries}
        assert stage.entries[0].spec.local_shape != whole["model.layers.0.self_attn.q_proj.weight"]
    assert len(reads) == len(whole) and dict(reads) == whole


def _build_fsdp(path, layer_range, rank: int, world: int, zero: int):
    """One ZeRO-``zero`` (FSDP2) rank's stage, built as the engine builds it (its ``_shard_stage``)."""
    import functools
    from types import SimpleNamespace

    import torch.distributed as dist

    from tessera.runtime.engine import _shard_stage

    factory = HFModel(str(path))
    ties = tied_groups(factory)
    with fake_process_group(world, rank), hf_weights.recording_reads() as reads:
        lay = SimpleNamespace(dp_group=dist.group.WORLD)
        shard = functools.partial(
            _shard_stage, lay=lay, device=torch.device("cpu"), reshard_after_forward=zero >= 3
        )
        stage = build_stage(
            factory, layer_range, 0, tp=None, tp_group=None, attention="flash", recompute="none",
            device=torch.device("cpu"), ties=ties, fully_shard=shard,
        )  # fmt: skip
        held = [(e.fqn, e.spec, local(e.param).detach().clone(), is_dtensor(e.param)) for e in stage.entries]
        buffers = {n: b.clone() for n, b in stage.module.named_buffers()}
    return held, reads, buffers


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("family", "stages", "world", "zero"),
    [
        ("llama", ((0, N),), 2, 3),
        ("llama", ((0, N),), 3, 3),  # 96-row embedding: 32 each; 4 kv heads * 8: rows of 11, 11, 10
        ("gpt2", STAGES, 2, 3),  # the tied head on a stage without the embedding is read whole (ignored)
        ("gpt2", ((0, N),), 2, 2),  # ZeRO-2 on FSDP2 keeps Shard(0) parameters too
    ],
    ids=["llama-dp2", "llama-dp3-uneven-rows", "gpt2-pp2-tied", "gpt2-zero2"],
)
def test_fsdp_rank_reads_only_its_rows(saved, family, stages, world, zero):
    """A ZeRO-3 rank (FSDP2) of a pretrained model reads every key of its stage once, at its ``Shard(0)``
    rows (``torch.chunk``'s chunks: ceil-sized, the last short), never whole; the rows equal the reference's
    and the ranks' rows cover every tensor; the rotary tables (buffers, not read) are the model's own."""
    path, ref = saved[family]
    fam = FAMILIES[family]
    rotary = build_layer(HFModel(str(path)), 1, 0).rotary  # the tables a layer built whole has
    pieces = []
    for layer_range in stages:
        for rank in range(world):
            held, reads, buffers = _build_fsdp(path, layer_range, rank, world, zero)
            expected = {}
            for fqn, spec, _, _ in held:
                key = hf_key(fam, N, fqn)
                if key == "lm_head.weight" and family == "gpt2":
                    key = "transformer.wte.weight"
                if spec.local_shape[0] > 0:
                    expected[key] = spec.local_shape
            assert len(reads) == len(dict(reads)), f"{family} {layer_range} rank {rank}: a tensor read twice"
            assert dict(reads) == expected, (family, layer_range, rank)
            whole = [fqn for fqn, spec, _, is_dt in held if spec.replicated]
            if family == "gpt2" and len(stages) > 1:  # the tie spans both stages: FSDP leaves it whole
                assert whole == ["layers.0.wte.weight"]  # under the canonical member's name
            else:
                assert not whole and all(is_dt for *_, is_dt in held)
            for fqn, spec, value, _ in held:
                key = hf_key(fam, N, fqn)
                assert spec.dim in (-1, 0)
                assert torch.equal(value, spec.slice(ref[key])), (family, rank, fqn)
                if not spec.replicated:
                    size = -(-spec.full_shape[0] // world)
                    n_rows = spec.full_shape[0]
                    assert spec.ranges == ((min(rank * size, n_rows), min((rank + 1) * size, n_rows)),)
                pieces.append((key, spec, value))
            for name, b in buffers.items():
                assert ".rotary." in name, name
                assert torch.equal(b, rotary.get_buffer(name.rpartition(".rotary.")[2])), name
    whole = assemble(pieces)
    assert whole.keys() == {k for k in ref if not (k == "lm_head.weight" and family == "gpt2")}
    assert all(torch.equal(whole[k], ref[k]) for k in whole)


def test_zoo_model_naming_a_hf_directory_reads_rows(saved):
    """A Plan naming the model directory (``ZooModel``) offers the same rows; a zoo model offers none."""
    from tessera.runtime.model import ZooModel

    path, ref = saved["llama"]
    zoo = ZooModel(str(path))
    assert zoo.without_weights() == HFModel(str(path), unread=True)
    with hf_weights.recording_reads() as reads:
        got = zoo.read_rows(
            {"layers.1.block.mlp.up_proj.weight": (5, 9), "layers.0.embed_tokens.weight": None}
        )
    assert sorted(reads) == [
        ("model.embed_tokens.weight", (96, 32)),
        ("model.layers.0.mlp.up_proj.weight", (4, 32)),
    ]
    assert torch.equal(
        got["layers.1.block.mlp.up_proj.weight"], ref["model.layers.0.mlp.up_proj.weight"][5:9]
    )
    assert torch.equal(got["layers.0.embed_tokens.weight"], ref["model.embed_tokens.weight"])
    with pytest.raises(TypeError, match="zoo model"):
        ZooModel("gpt-tiny").read_rows({})

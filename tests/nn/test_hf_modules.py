"""The Hugging Face adapter in one process: where models are found, what a stage reads, the layer list."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "runtime"))
from hf_models import FAMILY_NAMES, N_DECODER, save_tiny  # noqa: E402

from tessera.models import hf_weights  # noqa: E402
from tessera.models.hf_weights import HFModelNotFound, locate_model  # noqa: E402
from tessera.models.resolve import is_config_path  # noqa: E402
from tessera.nn.hf import FAMILIES, HFModel, HFModelError, hf_key, tessera_key  # noqa: E402
from tessera.nn.resolve import resolve_spec  # noqa: E402
from tessera.runtime.model import TPSpec, build_layer, initial_state, tied_groups  # noqa: E402

N = N_DECODER + 2


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hfm")
    return {fam: save_tiny(fam, root / fam) for fam in FAMILY_NAMES}


def _build(source: str, layer_range=None, **kw):
    return HFModel(source, **kw)(layer_range=layer_range, tp=None, attention="flash", recompute="none")


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_layers_are_the_real_modules_and_match_the_plain_model(dirs, family):
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(str(dirs[family]), dtype=torch.float32)
    model = _build(str(dirs[family]))
    assert len(model.layers) == N
    block_type = type(getattr(ref.base_model, FAMILIES[family].layers)[0])
    assert all(type(layer.block) is block_type for layer in model.layers[1:-1])
    ids = torch.randint(0, 96, (2, 16), generator=torch.Generator().manual_seed(0))
    assert torch.equal(model(ids), ref(input_ids=ids).logits)
    state = ref.state_dict()
    for fqn, value in model.state_dict().items():
        assert torch.equal(value, state[hf_key(FAMILIES[family], N, fqn)]), fqn
        assert tessera_key(FAMILIES[family], N, hf_key(FAMILIES[family], N, fqn)) == fqn


def test_a_stage_reads_only_its_own_layers(dirs):
    with hf_weights.recording_reads() as reads:
        _build(str(dirs["llama"]), (2, 4))
    read = {k for k, _ in reads}
    assert read and all(k.startswith(("model.layers.1.", "model.layers.2.")) for k in read)
    with hf_weights.recording_reads() as reads:
        _build(str(dirs["qwen2"]), (N - 1, N))  # the tied head reads the embedding's tensor, saved once
    assert {k for k, _ in reads} == {"model.embed_tokens.weight", "model.norm.weight"}


def test_reads_are_recorded_only_inside_the_block(dirs):
    """A long-lived worker keeps no record of what it read; nested blocks each see the reads inside them."""
    _build(str(dirs["llama"]), (1, 2))
    assert hf_weights._RECORDERS == []
    with hf_weights.recording_reads() as outer:
        _build(str(dirs["llama"]), (0, 1))
        with hf_weights.recording_reads() as inner:
            _build(str(dirs["llama"]), (N - 1, N))
    _build(str(dirs["llama"]), (1, 2))
    assert inner == [("lm_head.weight", (96, 32)), ("model.norm.weight", (32,))]
    assert outer == [("model.embed_tokens.weight", (96, 32)), *inner]
    assert hf_weights._RECORDERS == []


def test_a_runtime_stage_reads_each_of_its_tensors_once(dirs):
    from tessera.runtime.stage import build_stage

    with hf_weights.recording_reads() as reads:
        stage = build_stage(
            HFModel(str(dirs["mistral"])), (1, 3), 0, tp=None, tp_group=None, attention="flash",
            recompute="none", device=torch.device("cpu"),
        )  # fmt: skip
    assert sorted(k for k, _ in reads) == sorted(
        {hf_key(FAMILIES["mistral"], N, e.fqn) for e in stage.entries}
    )
    assert all(p.device.type == "cpu" for p in stage.module.parameters())


def test_ties_are_found_across_the_layer_list(dirs):
    assert tied_groups(HFModel(str(dirs["gpt2"]))) == (
        ("layers.0.wte.weight", f"layers.{N - 1}.lm_head.weight"),
    )
    assert tied_groups(HFModel(str(dirs["llama"]))) == ()


def test_from_scratch_is_seeded_per_layer(dirs):
    f = HFModel(str(dirs["llama"]), from_scratch=True)
    a, b, c = initial_state(f, N, 0), initial_state(f, N, 0), initial_state(f, N, 1)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a)
    loaded = initial_state(HFModel(str(dirs["llama"])), N, 0)
    assert any(not torch.equal(a[k], loaded[k]) for k in a)
    norm = a["layers.1.block.input_layernorm.weight"]
    assert torch.equal(norm, torch.ones_like(norm))  # the model's own _init_weights


def test_tp_shards_whole_kv_groups(dirs):
    f = HFModel(str(dirs["llama"]))
    local = f(layer_range=(1, 2), tp=TPSpec(2, 1, (0.75, 0.25)), attention="flash", recompute="none")
    attn = local.layers[0].block.self_attn
    assert attn.q_proj.weight.shape == (16, 32) and attn.k_proj.weight.shape == (8, 32)
    assert local.layers[0].block.mlp.down_proj.weight.shape == (32, 12)
    ends = f(layer_range=(0, N), tp=TPSpec(2, 1, (0.75, 0.25)), attention="flash", recompute="none")
    emb, head = ends.layers[0].embed_tokens, ends.layers[-1].lm_head  # vocab 96 split 72:24
    assert emb.vocab_start == 72 and emb.weight.shape == (24, 32) and head.weight.shape == (24, 32)
    even = _build(str(dirs["qwen2"]), (1, 2)).layers[0].dtensor_tp_plan()  # even splits: DTensor's plan
    assert sorted(even) == sorted(
        f"block.{n}"
        for n in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj")
        + ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
    )
    assert _build(str(dirs["gpt2"]), (1, 2)).layers[0].dtensor_tp_plan() is None  # Conv1D: Tessera's own


@pytest.mark.parametrize("ratios", [(), (0.75, 0.25)], ids=["even", "3:1"])
@pytest.mark.parametrize("from_scratch", [False, True], ids=["pretrained", "scratch"])
def test_gpt2_tp_shards_whole_heads_of_the_fused_conv1d_and_reads_only_its_slices(dirs, ratios, from_scratch):
    """Each rank's Conv1D pieces are exactly its heads' q, k and v columns of c_attn (c_proj's matching rows,
    c_fc / c_proj FFN columns / rows, the vocabulary rows of the tied wte / lm_head); the shards of the two
    ranks cover the whole tensors; a pretrained rank reads from the safetensors only the slices it holds."""
    from transformers.pytorch_utils import Conv1D

    from tessera.runtime.shards import ShardSpec, assemble

    f = HFModel(str(dirs["gpt2"]), from_scratch=from_scratch)
    whole = initial_state(f, N, 0)
    heads = (3, 1) if ratios else (2, 2)  # 4 heads of 8, hidden 32, FFN 128, vocab 96
    pieces = []
    for rank in range(2):
        tp = TPSpec(2, rank, ratios)
        with hf_weights.recording_reads() as reads:  # each alone, under its seed, as the runtime
            layers = [build_layer(f, i, 0, tp=tp) for i in range(N)]
        h0, hn = sum(heads[:rank]) * 8, heads[rank] * 8
        attn, mlp = layers[1].block.attn, layers[1].block.mlp
        assert all(type(m) is Conv1D for m in (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj))
        assert (attn.split_size, attn.num_heads, attn.c_attn.nf) == (hn, heads[rank], 3 * hn)
        qkv = tuple((c * 32 + h0, c * 32 + h0 + hn) for c in range(3))
        ffn = ((h0 * 4, (h0 + hn) * 4),)  # 128 FFN columns split as the heads (same ratios, same rounding)
        vocab = ((72 * rank, 72 + 24 * rank),) if ratios else ((48 * rank, 48 + 48 * rank),)
        specs = {
            "wte.weight": ShardSpec((96, 32), 0, vocab),
            "block.attn.c_attn.weight": ShardSpec((32, 96), 1, qkv),
            "block.attn.c_attn.bias": ShardSpec((96,), 0, qkv),
            "block.attn.c_proj.weight": ShardSpec((32, 32), 0, ((h0, h0 + hn),)),
            "block.mlp.c_fc.weight": ShardSpec((32, 128), 1, ffn),
            "block.mlp.c_fc.bias": ShardSpec((128,), 0, ffn),
            "block.mlp.c_proj.weight": ShardSpec((128, 32), 0, ffn),
            "lm_head.weight": ShardSpec((96, 32), 0, vocab),
        }
        state = {
            f"layers.{i}.{k}": v for i, layer in enumerate(layers) for k, v in layer.state_dict().items()
        }
        for fqn, value in state.items():
            name = fqn.split(".", 2)[2]
            spec = specs.get(name, ShardSpec(tuple(whole[fqn].shape)))
            if not (from_scratch and name == "lm_head.weight"):  # from scratch the runtime re-ties it to wte
                assert torch.equal(value, spec.slice(whole[fqn])), fqn
                pieces.append((fqn, spec, value))
        if not from_scratch:  # the slices it holds and nothing more (the tied head reads wte's rows again)
            read = dict(reads)
            assert len(read) == len(reads) - 1
            held = {hf_key(FAMILIES["gpt2"], N, k): tuple(v.shape) for k, v in state.items()}
            assert read == {k: v for k, v in held.items() if k != "lm_head.weight"}
    full = assemble(pieces)
    assert all(torch.equal(full[k], whole[k]) for k in full)
    one = f(layer_range=(0, N), tp=TPSpec(2, 1, ratios), attention="flash", recompute="none")
    assert one.layers[-1].lm_head.weight is one.layers[0].wte.weight  # one range: still one tied Parameter


def test_models_are_found_in_a_directory_a_config_or_the_cache(dirs, tmp_path, monkeypatch):
    d = dirs["llama"]
    assert locate_model(str(d)) == d and locate_model(str(d / "config.json")) == d
    cache = tmp_path / "hf-home" / "hub"
    snap = cache / "models--acme--tiny-llama" / "snapshots" / "abc123"
    shutil.copytree(d, snap)
    (cache / "models--acme--tiny-llama" / "refs").mkdir()
    (cache / "models--acme--tiny-llama" / "refs" / "main").write_text("abc123")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    assert locate_model("acme/tiny-llama") == snap
    assert is_config_path("acme/tiny-llama") and resolve_spec("acme/tiny-llama", 16).n_layers == N
    assert torch.equal(_build("acme/tiny-llama").state_dict()["layers.0.embed_tokens.weight"],
                       _build(str(d)).state_dict()["layers.0.embed_tokens.weight"])  # fmt: skip
    with pytest.raises(HFModelNotFound) as e:
        locate_model("acme/absent")
    assert str(cache) in str(e.value) and "nothing is downloaded" in str(e.value)
    assert not is_config_path("llama-tiny")  # zoo names stay zoo names


def test_unsupported_family_is_one_error(tmp_path):
    from transformers import AutoModelForCausalLM, OPTConfig

    AutoModelForCausalLM.from_config(
        OPTConfig(
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            ffn_dim=32,
            vocab_size=64,
            word_embed_proj_dim=16,
        )  # fmt: skip
    ).save_pretrained(str(tmp_path / "opt"))
    with pytest.raises(HFModelError, match="supported families: llama, mistral, qwen2, gpt2"):
        _build(str(tmp_path / "opt"))


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_planning_description_from_the_module_agrees_with_the_zoo(dirs, family):
    """Traced from the transformers module on meta vs the zoo's closed form of the same config (TP sharding
    included: every family's blocks split by heads). The difference that is the description being truer: the
    zoo's llama form gives qwen2 biases on every Linear where the real module has them on q/k/v only."""
    from tessera.models.hf import spec_from_hf_config
    from tessera.nn.hf import hf_model_spec

    traced, zoo = hf_model_spec(str(dirs[family]), 16), spec_from_hf_config(dirs[family], 16)
    assert traced.family == zoo.family and traced.n_layers == zoo.n_layers == N
    for a, b in zip(traced.layers, zoo.layers, strict=True):
        assert (a.name, a.kind, a.fwd_flops_per_sample, a.out_bytes_per_sample) == (
            b.name, b.kind, b.fwd_flops_per_sample, b.out_bytes_per_sample
        )  # fmt: skip
        if not (family == "qwen2" and a.kind == "transformer"):
            assert a.params == b.params, a.name
        else:  # the zoo adds o_proj, gate, up and down biases (32 + 48 + 48 + 32) the module lacks
            assert b.params - a.params == 32 + 48 + 48 + 32
        assert (a.tp_shard, a.tp_units) == (b.tp_shard, b.tp_units), a.name
    # what memory, the cost model and Cells plan a model directory with (resolve_spec) is the traced one
    planned = resolve_spec(str(dirs[family]), 16)
    assert [(x.name, x.params) for x in planned.layers] == [(x.name, x.params) for x in traced.layers]


def test_the_runtime_shards_gpt2_conv1d_column_and_row_wise(dirs):
    """The runtime reads gpt2's cut Conv1Ds as column/row-parallel (not as a layer to replicate), the fused
    c_attn as three q|k|v chunks of this rank's heads — the specs the loader cut them by."""
    from tessera.runtime.tensor_parallel import plan_layer_shards

    f = HFModel(str(dirs["gpt2"]))
    tp = TPSpec(2, 1, (0.75, 0.25))  # rank 1: head 3 of 4 (8 columns of each of q, k, v), FFN 96..128
    local, full = build_layer(f, 1, 0, tp=tp), build_layer(f, 1, 0)
    shards = plan_layer_shards(f, 1, 0, local, full, tp, attention="flash", recompute="none", last=False)
    assert shards is not None
    assert shards.columns == ("block.attn.c_attn", "block.mlp.c_fc")
    assert shards.rows == ("block.attn.c_proj", "block.mlp.c_proj")
    specs = shards.specs
    assert (specs["block.attn.c_attn.weight"].dim, specs["block.attn.c_attn.weight"].ranges) == (
        1, ((24, 32), (56, 64), (88, 96))
    )  # fmt: skip
    assert specs["block.attn.c_attn.bias"].ranges == ((24, 32), (56, 64), (88, 96))
    assert (specs["block.attn.c_proj.weight"].dim, specs["block.attn.c_proj.weight"].ranges) == (
        0,
        ((24, 32),),
    )
    assert specs["block.attn.c_proj.bias"].replicated and specs["block.ln_1.weight"].replicated
    assert (specs["block.mlp.c_fc.weight"].dim, specs["block.mlp.c_fc.weight"].ranges) == (1, ((96, 128),))
    for name, p in local.named_parameters():
        assert torch.equal(p, specs[name].slice(dict(full.named_parameters())[name])), name

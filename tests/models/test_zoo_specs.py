"""The zoo's analytic specs: published parameter counts, and equality with the trace of the nn modules."""

from __future__ import annotations

import random
import subprocess
import sys
from dataclasses import replace

import pytest

from tessera.models import ConvArch, ModelSpec, TPShard, TransformerArch
from tessera.models.zoo import (
    FAMILIES,
    UnknownModelError,
    family_of,
    get_arch,
    get_spec,
    list_models,
)
from tessera.nn.trace import trace_spec
from tessera.nn.zoo import build_model

TINY = ["gpt-tiny", "llama-tiny", "bert-tiny", "moe-tiny", "wrn-tiny"]


def traced(name: str, seq_len: int) -> ModelSpec:
    model = build_model(name, device="meta")
    return trace_spec(model, seq_len, name=name, family=family_of(name), arch=get_arch(name))


def assert_same(analytic: ModelSpec, trace: ModelSpec) -> None:
    assert len(analytic.layers) == len(trace.layers)
    for a, t in zip(analytic.layers, trace.layers, strict=True):
        assert a == t, f"\nanalytic {a}\ntrace    {t}"
    assert analytic == trace


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("seq_len", [None, 24])
def test_tiny_spec_equals_trace(name: str, seq_len: int | None) -> None:
    spec = get_spec(name, seq_len)
    assert_same(spec, traced(name, spec.seq_len))


@pytest.mark.parametrize(
    ("name", "seq_len"),
    [
        ("gpt2", 1024),
        ("llama2-7b", 4096),
        ("llama2-70b", 256),  # GQA: 64 heads over 8 kv heads
        ("bert-large", 512),
        ("moe-0.69b", 1024),
        ("wrn-0.5b", 1),
    ],
)
def test_real_size_spec_equals_trace_on_meta(name: str, seq_len: int) -> None:
    assert_same(get_spec(name, seq_len), traced(name, seq_len))


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("gpt2", 124_439_808),
        ("gpt2-medium", 354_823_168),
        ("gpt2-large", 774_030_080),
        ("gpt2-xl", 1_557_611_200),
        ("llama2-7b", 6_738_415_616),
        ("llama2-13b", 13_015_864_320),
        ("llama2-70b", 68_976_648_192),
        ("llama3-8b", 8_030_261_248),
        ("llama3-70b", 70_553_706_496),
    ],
)
def test_published_param_counts(name: str, params: int) -> None:
    assert get_spec(name).params == params


@pytest.mark.parametrize(("name", "with_pooler"), [("bert-base", 109_482_240), ("bert-large", 335_141_888)])
def test_bert_counts_match_published_with_pooler(name: str, with_pooler: int) -> None:
    """Published BERT sizes count embeddings + encoder + pooler; the zoo's MLM model has the MLM head
    (transform h x h + bias, LayerNorm, decoder bias) instead of the pooler (h x h + bias)."""
    spec = get_spec(name)
    a = get_arch(name)
    h = a.hidden
    mlm_head = spec.layers[-1].params
    assert mlm_head == h * h + h + 2 * h + a.vocab
    assert spec.params - mlm_head + (h * h + h) == with_pooler
    if name == "bert-large":
        assert abs(spec.params - 336e6) / 336e6 < 0.005


@pytest.mark.parametrize(
    ("name", "billions", "tol"),
    [
        ("gpt3-1.3b", 1.3, 0.02),
        ("gpt3-6.7b", 6.7, 0.02),
        ("gpt3-175b", 175.0, 0.01),
        ("bert-0.76b", 0.76, 0.01),
        ("bert-1.3b", 1.3, 0.02),
        ("bert-2.6b", 2.6, 0.03),  # Alpa's GPT-3 "2.7B" shape, labelled 2.6B by Alpa and Crius
        ("bert-6.7b", 6.7, 0.01),
        ("moe-0.69b", 0.69, 0.01),
        ("moe-1.3b", 1.3, 0.04),
        ("moe-2.4b", 2.4, 0.01),
        ("moe-10b", 10.0, 0.02),
        ("moe-27b", 27.0, 0.02),
        ("wrn-0.5b", 0.5, 0.05),
        ("wrn-1b", 1.0, 0.05),
        ("wrn-2b", 2.0, 0.05),
        ("wrn-4b", 4.0, 0.05),
        ("wrn-6.8b", 6.8, 0.05),
    ],
)
def test_paper_sizes(name: str, billions: float, tol: float) -> None:
    assert abs(get_spec(name).params / 1e9 - billions) / billions < tol


def test_layer_layout_and_sharding() -> None:
    spec = get_spec("llama2-70b")
    assert [layer.name for layer in spec.layers[:2]] == ["embedding", "block_0"]
    assert spec.layers[-1].name == "head" and spec.n_layers == 80 + 2
    assert spec.layers[0].tp_shard == TPShard.VOCAB and spec.layers[0].tp_units == 32000
    assert spec.layers[1].tp_shard == TPShard.HEADS and spec.layers[1].tp_units == 8  # whole kv groups
    moe = get_spec("moe-tiny")
    assert [layer.kind for layer in moe.layers[1:-1]] == ["transformer", "moe", "transformer", "moe"]
    wrn = get_spec("wrn-0.5b")
    assert wrn.layers[0].name == "stem" and wrn.layers[-1].name == "classifier" and wrn.n_layers == 18
    assert wrn.layers[1].tp_shard == TPShard.COLUMNS and wrn.layers[1].tp_units == 224 * 2
    assert wrn.seq_len == 1


def test_default_seq_lens() -> None:
    assert get_spec("gpt2").seq_len == 1024
    assert get_spec("gpt3-1.3b").seq_len == 2048
    assert get_spec("llama2-7b").seq_len == 4096
    assert get_spec("bert-large").seq_len == 512
    assert get_spec("gpt-1.3b").arch == get_arch("gpt3-1.3b")


def test_flops_follow_megatron_formula() -> None:
    """72 b s l h^2 (1 + s / 6h + V / 12 l h) counts fwd+bwd (3x fwd) of a GPT with 4h MLP."""
    a, s = get_arch("gpt-1.3b"), 2048
    h, n, v = a.hidden, a.n_layers, a.vocab
    megatron = 72 * s * n * h * h * (1 + s / (6 * h) + v / (12 * n * h))
    assert get_spec("gpt-1.3b", s).fwd_flops_per_sample * 3 == pytest.approx(megatron, rel=1e-12)


def test_learned_positions_bound_seq_len() -> None:
    with pytest.raises(ValueError, match="learned positions"):
        get_spec("gpt2", 2048)


def test_unknown_name_lists_near_matches() -> None:
    with pytest.raises(UnknownModelError, match="gpt2") as err:
        get_spec("gtp2")
    assert isinstance(err.value, KeyError)
    assert "did you mean" in str(err.value)
    with pytest.raises(KeyError, match="llama2-7b"):
        build_model("llama2-7")


def test_list_models_covers_every_family() -> None:
    entries = list_models()
    assert {e.family for e in entries} == {"gpt", "llama", "bert", "moe", "wide_resnet"}
    by_name = {e.name: e for e in entries}
    assert by_name["gpt2"].params == 124_439_808
    assert all(e.description for e in entries)


def test_specs_need_no_torch() -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import tessera.models as m\n"
        "assert m.get_spec('llama2-7b').params == 6738415616\n"
        "assert len(m.list_models()) > 30\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _random_arch(family: str, rng: random.Random) -> TransformerArch | ConvArch:
    if family == "wide_resnet":
        return ConvArch(
            depth=rng.choice([14, 26]),
            width=rng.choice([1, 2, 3]),
            image_size=rng.choice([64, 72]),
            n_classes=rng.randint(3, 40),
            base_channels=rng.choice([4, 8, 12]),
        )
    kv = rng.choice([1, 2, 4])
    heads = kv * rng.choice([1, 2, 3])
    arch = TransformerArch(
        hidden=heads * rng.choice([8, 16]),
        n_layers=rng.randint(1, 4),
        n_heads=heads,
        n_kv_heads=kv,
        ffn_hidden=rng.randint(8, 100),
        vocab=rng.randint(10, 300),
        dropout=rng.choice([0.0, 0.1]),
        max_positions=128,
        bias=rng.random() < 0.5,
        tied_embeddings=rng.random() < 0.5,
    )
    if family == "llama":
        return replace(arch, norm="rmsnorm", mlp="swiglu", position="rope")
    if family == "bert":
        return replace(arch, causal=False, type_vocab=rng.randint(1, 3))
    if family == "moe":
        return replace(
            arch,
            n_experts=rng.randint(2, 6),
            top_k=rng.choice([1, 2]),
            capacity_factor=rng.choice([0.5, 1.0, 1.25]),
            moe_every=rng.choice([1, 2]),
        )
    return arch


@pytest.mark.parametrize("family", ["gpt", "llama", "bert", "moe", "wide_resnet"])
def test_random_shapes_spec_equals_trace(family: str) -> None:
    """Closed forms hold for any shape: GQA, odd FFN widths, biases on/off, untied heads, dropout 0 or not."""
    rng = random.Random(family)
    for _ in range(4):
        arch = _random_arch(family, rng)
        seq_len = 1 if family == "wide_resnet" else rng.randint(1, 100)
        analytic = FAMILIES[family].spec("random", arch, seq_len)
        model = build_model(arch, family=family, device="meta")
        assert_same(analytic, trace_spec(model, seq_len, name="random", family=family, arch=arch))

"""Tensor-parallel shards: unit splitting, local shapes, and that the shards add up to the whole layer."""

from __future__ import annotations

import pytest
import torch
from nn_helpers import no_dropout
from torch import nn

from tessera.models.zoo import get_arch
from tessera.nn.common import TPShare, shard_sizes
from tessera.nn.trace import trace_spec
from tessera.nn.zoo import build_model


@pytest.mark.parametrize(
    ("units", "ratios", "expected"),
    [
        (4, (0.75, 0.25), [3, 1]),
        (4, (0.5, 0.5), [2, 2]),
        (12, (1, 1, 1), [4, 4, 4]),
        (5, (0.99, 0.01), [4, 1]),  # every rank keeps at least one unit
        (10, (3, 2), [6, 4]),
        (7, (1, 1, 1), [3, 2, 2]),  # remainder to the first ranks on ties
        (11008, (0.6, 0.4), [6605, 4403]),
    ],
)
def test_shard_sizes(units: int, ratios: tuple[float, ...], expected: list[int]) -> None:
    sizes = shard_sizes(units, ratios)
    assert sizes == expected and sum(sizes) == units


def test_shard_sizes_rejects_impossible_splits() -> None:
    with pytest.raises(ValueError, match="at least one"):
        shard_sizes(2, (1, 1, 1))
    with pytest.raises(ValueError, match="> 0"):
        shard_sizes(4, (1, 0))
    with pytest.raises(ValueError, match="ratios"):
        TPShare(2, 0, (1.0,))
    with pytest.raises(ValueError, match="rank"):
        TPShare(2, 2)


def test_tp_share_offsets() -> None:
    shares = [TPShare(3, r, (0.5, 0.25, 0.25)) for r in range(3)]
    assert [s.local(8) for s in shares] == [4, 2, 2]
    assert [s.offset(8) for s in shares] == [0, 4, 6]
    assert TPShare(2, 1).local(5) == 2


def shards(
    name: str, ratios: tuple[float, ...], layer_range: tuple[int, int] | None = None
) -> list[nn.Module]:
    return [
        build_model(name, tp=TPShare(len(ratios), r, ratios), layer_range=layer_range, device="meta")
        for r in range(len(ratios))
    ]


@pytest.mark.parametrize(
    ("name", "ratios"),
    [
        ("gpt-tiny", (0.75, 0.25)),
        ("gpt-tiny", (0.5, 0.5)),
        ("llama-tiny", (0.5, 0.5)),
        ("bert-tiny", (0.6, 0.2, 0.2)),
        ("moe-tiny", (0.75, 0.25)),
        ("wrn-tiny", (0.75, 0.25)),
    ],
)
def test_shard_params_sum_to_the_whole(name: str, ratios: tuple[float, ...]) -> None:
    """Sum over ranks = unsharded count + (degree - 1) x replicated params (those kept whole)."""
    full = build_model(name, device="meta")
    parts = shards(name, ratios)
    for i, layer in enumerate(full.layers):
        whole = dict(layer.named_parameters())
        total = sum(p.numel() for p in whole.values())
        per_rank = [dict(part.layers[i].named_parameters()) for part in parts]
        replicated = sum(p.numel() for n, p in whole.items() if all(r[n].shape == p.shape for r in per_rank))
        assert sum(p.numel() for r in per_rank for p in r.values()) == total + (len(ratios) - 1) * replicated
        for r in per_rank:
            assert r.keys() == whole.keys()


def test_uneven_heads_and_columns() -> None:
    """4 heads 3:1 -> 3 and 1 local heads; FFN 256 columns -> 192 and 64; vocab 128 rows -> 96 and 32."""
    big, small = shards("gpt-tiny", (0.75, 0.25))
    for part, heads, cols, rows in ((big, 3, 192, 96), (small, 1, 64, 32)):
        block = part.layers[1]
        assert block.attn.n_heads == heads
        assert block.attn.q.weight.shape == (heads * 16, 64)
        assert block.attn.proj.weight.shape == (64, heads * 16)
        assert block.mlp.fc_in.weight.shape == (cols, 64) and block.mlp.fc_out.weight.shape == (64, cols)
        assert part.layers[0].tok.weight.shape == (rows, 64)
        assert part.layers[-1].out.weight.shape == (rows, 64)
        assert part.layers[-1].out.weight is part.layers[0].tok.weight
        assert block.ln_1.weight.shape == (64,)


def test_gqa_shards_whole_kv_groups() -> None:
    parts = shards("llama-tiny", (0.5, 0.5))
    for part in parts:
        attn = part.layers[1].attn
        assert (attn.n_heads, attn.n_kv_heads) == (2, 1)
        assert attn.k.weight.shape == (16, 64) and attn.q.weight.shape == (32, 64)
        assert part.layers[1].mlp.gate.weight.shape == (88, 64)
    with pytest.raises(ValueError, match="kv heads"):
        build_model("llama-tiny", tp=TPShare(4, 0), device="meta")


def _load_shards(full: nn.Module, parts: list[nn.Module]) -> None:
    """Give each shard its contiguous slice of every parameter/buffer the TP split made smaller."""
    full_state = full.state_dict()
    offsets: dict[tuple[str, int], int] = {}
    for part in parts:
        state = {}
        for key, local in part.state_dict().items():
            whole = full_state[key]
            if local.shape == whole.shape:
                state[key] = whole
                continue
            dim = next(d for d in range(whole.dim()) if local.shape[d] != whole.shape[d])
            start = offsets.get((key, dim), 0)
            state[key] = whole.narrow(dim, start, local.shape[dim]).clone()
            offsets[(key, dim)] = start + local.shape[dim]
        part.load_state_dict(state)


def _build_cpu(name: str, tp: TPShare | None) -> nn.Module:
    torch.manual_seed(0)
    return no_dropout(build_model(name, tp=tp)).eval()


@pytest.mark.parametrize(
    ("name", "ratios"),
    [
        ("gpt-tiny", (0.75, 0.25)),
        ("llama-tiny", (0.5, 0.5)),
        ("bert-tiny", (0.5, 0.25, 0.25)),
        ("moe-tiny", (0.75, 0.25)),
    ],
)
def test_transformer_shards_add_up(name: str, ratios: tuple[float, ...]) -> None:
    """Column/row layout check: summing the ranks' attention and MLP outputs (row-parallel bias once)
    and concatenating their vocab shards reproduces the unsharded layers."""
    full = _build_cpu(name, None)
    parts = [_build_cpu(name, TPShare(len(ratios), r, ratios)) for r in range(len(ratios))]
    _load_shards(full, parts)
    extra = len(parts) - 1
    ids, _ = full.make_batch(2, 12, generator=torch.Generator().manual_seed(5))
    x = torch.randn(2, 12, 64)
    with torch.no_grad():
        emb = sum(p.layers[0].tok(ids) for p in parts)
        torch.testing.assert_close(emb, full.layers[0].tok(ids))
        for i in range(1, len(full.layers) - 1):
            fb, pb = full.layers[i], [p.layers[i] for p in parts]
            attn = sum(b.attn(x) for b in pb)
            if fb.attn.proj.bias is not None:
                attn = attn - extra * fb.attn.proj.bias
            torch.testing.assert_close(attn, fb.attn(x), atol=1e-6, rtol=1e-5)
            mlp = sum(b.mlp(x) for b in pb)
            bias = getattr(getattr(fb.mlp, "fc_out", None), "bias", None)
            if bias is not None:
                mlp = mlp - extra * bias
            torch.testing.assert_close(mlp, fb.mlp(x), atol=1e-6, rtol=1e-5)
        head = torch.cat([p.layers[-1](x) for p in parts], dim=-1)
        torch.testing.assert_close(head, full.layers[-1](x), atol=1e-6, rtol=1e-5)


def test_wide_resnet_shards_add_up() -> None:
    """conv2 split by output channels and conv3 by input channels: partial sums of conv3 add up."""
    ratios = (0.75, 0.25)
    full = _build_cpu("wrn-tiny", None).train()
    parts = [_build_cpu("wrn-tiny", TPShare(2, r, ratios)).train() for r in range(2)]
    _load_shards(full, parts)
    x = torch.randn(2, 8, 16, 16)

    def partial(b: nn.Module, y: torch.Tensor) -> torch.Tensor:
        y = torch.relu(b.bn1(b.conv1(y)))
        return b.conv3(torch.relu(b.bn2(b.conv2(y))))

    with torch.no_grad():
        fb = full.layers[1]
        torch.testing.assert_close(
            sum(partial(p.layers[1], x) for p in parts), partial(fb, x), atol=1e-5, rtol=1e-4
        )
        feats = torch.randn(2, 256, 2, 2)
        logits = torch.cat([p.layers[-1](feats) for p in parts], dim=-1)
        torch.testing.assert_close(logits, full.layers[-1](feats))


def test_trace_of_a_tp_shard_runs_on_meta() -> None:
    """The memory tracer traces one rank's shard of a stage: its spec has the local sizes."""
    a = get_arch("gpt-tiny")
    stage = build_model("gpt-tiny", tp=TPShare(2, 1, (0.75, 0.25)), layer_range=(1, 3), device="meta")
    spec = trace_spec(stage, 32, name="gpt-tiny/tp1", family="gpt")
    assert [layer.name for layer in spec.layers] == ["block_0", "block_1"]
    local_attn = 2 * a.hidden * 16 + 2 * a.hidden * 16 + 16 * 3 + a.hidden  # q,k,v (1 head), proj + biases
    local_mlp = 2 * a.hidden * 64 + 64 + a.hidden
    assert spec.layers[0].params == local_attn + local_mlp + 4 * a.hidden

"""trace_spec on user modules: any sequence of blocks becomes a ModelSpec."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tessera.models import TPShard
from tessera.models.zoo import get_spec
from tessera.nn.trace import trace_spec
from tessera.nn.zoo import build_model


class Scaled(nn.Module):
    """A user block that declares how it shards under TP."""

    tp_shard = "columns"
    tp_units = 32

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 32)
        self.out = nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.fc(x)))


def test_sequential_of_cpu_modules() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), Scaled())
    x = torch.randn(3, 10, 8)
    spec = trace_spec(model, 10, name="user", example_input=x[:1])
    assert spec.family == "custom" and spec.n_layers == 3
    lin, gelu, scaled = spec.layers
    assert lin.params == 8 * 16 + 16 and lin.fwd_flops_per_sample == 2 * 10 * 8 * 16
    assert lin.act_bytes_per_sample == 4 * 10 * 8  # its input
    assert lin.out_bytes_per_sample == 4 * 10 * 16
    assert (
        gelu.params == 0 and gelu.act_bytes_per_sample == 4 * 10 * 16 and gelu.tp_shard == TPShard.REPLICATED
    )
    assert scaled.tp_shard == TPShard.COLUMNS and scaled.tp_units == 32
    assert scaled.act_bytes_per_sample == 4 * 10 * (16 + 32)  # input; ReLU output (ReLU and out save it)
    assert next(model.parameters()).device.type == "cpu"  # the user's model was not moved


def test_example_batch_divides_per_sample_figures() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.Linear(16, 4))
    one = trace_spec(model, 5, name="m", example_input=torch.zeros(1, 5, 8))
    four = trace_spec(model, 5, name="m", example_input=torch.zeros(4, 5, 8), example_batch=4)
    assert one.layers == four.layers


def test_zoo_model_with_tied_weights_counts_them_once() -> None:
    model = build_model("gpt-tiny", device="meta")
    spec = trace_spec(model, 64, name="gpt-tiny")
    assert spec.params == get_spec("gpt-tiny").params == sum(p.numel() for p in model.parameters())


def test_stage_trace_matches_the_spec_slice() -> None:
    stage = build_model("llama-tiny", layer_range=(2, 6), device="meta")
    spec = trace_spec(stage, 64, name="llama-tiny", family="llama")
    assert spec.layers == get_spec("llama-tiny").stage(2, 6)


def test_models_without_layers_are_rejected() -> None:
    with pytest.raises(TypeError, match="layers"):
        trace_spec(nn.Linear(2, 2), 1, name="x", example_input=torch.zeros(1, 2))
    with pytest.raises(ValueError, match="example_input"):
        trace_spec(nn.Sequential(nn.Linear(2, 2)), 1, name="x")

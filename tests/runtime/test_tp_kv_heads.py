"""Grouped-query attention under TP: every rank holds whole key/value heads.

An even TP degree that divides the attention heads but not the key/value heads would have DTensor cut a kv
head in half (k_proj / v_proj split in equal chunks of columns); an uneven one with more ranks than kv heads
leaves a rank without one. Both are refused with one error naming the plan's field — by ``Plan.validate``
when the plan says the model's ``model_kv_heads``, and by the runtime's ``build_stage`` against the model's
own layers (a plan written without it), before any weight is read.
"""

from __future__ import annotations

import pytest
import torch
from hf_models import tiny_config

from tessera.models import hf_weights
from tessera.nn.dtensor_tp import fake_process_group
from tessera.nn.hf import HFModel
from tessera.plan import Device, Plan, PlanError, Stage
from tessera.runtime.model import TPSpec
from tessera.runtime.stage import build_stage


def _plan(tp: int, ratios: tuple[float, ...] = (), *, heads: int = 8, kv: int | None = 2) -> Plan:
    devices = tuple(Device(rank=r, gpu_type="cpu") for r in range(tp))
    return Plan(
        model="m", global_batch=4, seq_len=8, model_layers=4, model_heads=heads, model_kv_heads=kv,
        stages=(Stage(0, 4, devices, tp_degree=tp, tp_ratios=ratios),),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("tp", "ratios", "reason"),
    [
        (4, (), "does not divide the model's 2 key/value heads"),  # 8 heads / 4 fine, 2 kv heads cut
        (3, (0.5, 0.25, 0.25), "3 ranks for the model's 2 key/value heads"),  # uneven: a rank without one
    ],
    ids=["even-cuts-a-kv-head", "uneven-more-ranks-than-kv-heads"],
)
def test_plan_refuses_a_tp_degree_that_splits_kv_heads(tp, ratios, reason):
    with pytest.raises(PlanError, match=r"stages\[0\]\.tp_degree") as err:
        _plan(tp, ratios)
    assert reason in str(err.value) and "grouped-query" in str(err.value)


def test_plan_accepts_whole_kv_heads_and_keeps_the_field():
    assert _plan(2).model_kv_heads == 2
    assert _plan(2, (0.75, 0.25)).stages[0].tp_degree == 2  # uneven: one kv head each
    assert _plan(4, kv=None).model_kv_heads is None  # not said: only the attention heads are checked
    again = Plan.from_json(_plan(2).to_json())
    assert again == _plan(2) and again.model_kv_heads == 2
    with pytest.raises(PlanError, match="model_kv_heads: 3 key/value heads do not divide"):
        _plan(1, kv=3)


@pytest.fixture(scope="module")
def gqa_model(tmp_path_factory):
    """Tiny llama with 4 attention heads over 2 key/value heads (hf_models' config)."""
    from transformers import AutoModelForCausalLM

    config = tiny_config("llama")
    assert (config.num_attention_heads, config.num_key_value_heads) == (4, 2)
    path = tmp_path_factory.mktemp("gqa")
    AutoModelForCausalLM.from_config(config).save_pretrained(str(path))
    return path


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("ratios", "dtensor", "reason"),
    [
        ((), True, "does not divide the model's 2 key/value heads"),  # DTensor's even chunks
        ((0.4, 0.2, 0.2, 0.2), False, "4 ranks for the model's 2 key/value heads"),  # Tessera's own shards
    ],
    ids=["even-dtensor", "uneven-own"],
)
def test_runtime_refuses_a_tp_degree_that_splits_the_models_kv_heads(gqa_model, ratios, dtensor, reason):
    """A plan without ``model_kv_heads`` reaches the runtime: the stage build refuses it, naming the field,
    before reading a weight."""
    import torch.distributed as dist

    refused = pytest.raises(PlanError, match=r"stages\[0\]\.tp_degree")
    with fake_process_group(4, 0), hf_weights.recording_reads() as reads, refused as err:
        build_stage(
            HFModel(str(gqa_model)), (1, 2), 0, tp=TPSpec(4, 0, ratios), tp_group=dist.group.WORLD,
            attention="flash", recompute="none", device=torch.device("cpu"), dtensor_tp=dtensor,
            where="stages[0].tp_degree",
        )  # fmt: skip
    assert reason in str(err.value)
    assert reads == []

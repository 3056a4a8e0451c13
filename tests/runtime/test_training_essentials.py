"""Training essentials: global-norm clipping exact across DP, TP, pipelines (a tie across stages) and uneven
shares against the single-process ``clip_grad_norm_``; the learning-rate schedule; weight decay; dropout."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import max_rel, plan, rel, stage
from models import factory, n_layers
from torch import nn

from tessera.runtime import RunOptions, SyntheticData, launch_many, make_optimizer, reference_model
from tessera.runtime.schedule import Training, set_dropout

TOL = 1e-5
CLIP = 0.05  # well below the tiny models' gradient norms (~1-5): every step clips


def _reference(f, p, *, steps: int, training: Training):
    """Loss per step and the clipped first-step gradient of the whole model in one process."""
    model = reference_model(
        f, p.stages[-1].layer_end, 0, attention=p.attention.value, recompute=p.recompute.value
    )
    opt = make_optimizer(p.optimizer, list(model.parameters()), training.learning_rate, training.weight_decay)
    data = SyntheticData(0)
    losses, grads = [], None
    for step in range(steps):
        inputs, targets = data.batch(model, step, p.global_batch, p.seq_len)
        opt.zero_grad(set_to_none=True)
        loss = model.loss(model(inputs), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), training.grad_clip_norm)
        if grads is None:
            grads = {n: q.grad.detach().clone() for n, q in model.named_parameters()}
        for g in opt.param_groups:
            g["lr"] = training.lr_at(step, steps)
        opt.step()
        losses.append(float(loss.detach()))
    return losses, grads


def _variants():
    n = n_layers("gpt-tiny")
    nl = n_layers("llama-tiny")
    return {
        "gpt-tiny/dp2-uneven-5:3-zero2": plan("gpt-tiny", [stage(0, n, [0, 1], dp=2, shares=(5, 3))], zero=2),
        "gpt-tiny/dp2-uneven-zero3-fsdp2": plan(
            "gpt-tiny", [stage(0, n, [0, 1], dp=2, shares=(5, 3))], micro=2, zero=3
        ),
        # GPT ties its embedding to its head: the tie spans both stages and counts once
        "gpt-tiny/pp2-1f1b-tied": plan("gpt-tiny", [stage(0, 2, [0]), stage(2, n, [1])], micro=4),
        "gpt-tiny/tp2-uneven-3:1": plan(
            "gpt-tiny", [stage(0, n, [0, 1], tp=2, ratios=(0.75, 0.25))], micro=2
        ),
        "llama-tiny/tp2-even-dtensor": plan("llama-tiny", [stage(0, nl, [0, 1], tp=2)]),
    }


@pytest.mark.timeout(300)
def test_clipped_gradients_match_the_reference():
    training = Training(learning_rate=1e-3, warmup_steps=1, lr_schedule="linear", grad_clip_norm=CLIP)
    steps = 3
    variants = _variants()
    opts = dict(
        steps=steps, capture_grads=True, grad_clip_norm=CLIP, warmup_steps=1, lr_schedule="linear",
        pg_timeout_s=60, watchdog_s=120,
    )  # fmt: skip
    results = launch_many(
        [(p, RunOptions(model=factory(k.split("/")[0]), **opts)) for k, p in variants.items()]
    )
    for (key, p), result in zip(variants.items(), results, strict=True):
        losses, grads = _reference(factory(key.split("/")[0]), p, steps=steps, training=training)
        loss_err = max(rel(a, b) for a, b in zip(result.losses, losses, strict=True))
        grad_err = max_rel(result.grads, grads)
        print(f"{key}: loss {loss_err:.2e} clipped grad {grad_err:.2e}")
        assert loss_err < TOL, (key, result.losses, losses)
        assert grad_err < TOL, key
        norm = result.records[0].grad_norm
        total = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads.values()))
        assert norm is not None and norm > CLIP and abs(total - CLIP) < 1e-4 * CLIP  # the reference clipped
        assert [r.learning_rate for r in result.records] == [training.lr_at(k, steps) for k in range(steps)]


def test_learning_rate_schedule():
    t = Training(learning_rate=1.0, warmup_steps=2, lr_schedule="cosine", min_learning_rate=0.1)
    assert [t.lr_at(k, 10) for k in range(2)] == [0.5, 1.0]
    assert t.lr_at(2, 10) == 1.0 and abs(t.lr_at(6, 10) - 0.55) < 1e-12  # half-way: the mid-point
    assert t.lr_at(9, 10) > 0.1 and abs(t.lr_at(10, 10) - 0.1) < 1e-12
    lin = Training(learning_rate=1.0, lr_schedule="linear")
    assert [lin.lr_at(k, 4) for k in range(4)] == [1.0, 0.75, 0.5, 0.25]
    assert Training(learning_rate=2.0).lr_at(99, 10) == 2.0
    with pytest.raises(ValueError, match="lr_schedule"):
        Training(lr_schedule="step")  # type: ignore[arg-type]


def test_weight_decay_and_dropout():
    p = [nn.Parameter(torch.ones(2))]
    assert make_optimizer("adamw", p, 1e-3).param_groups[0]["weight_decay"] == 0.01
    assert make_optimizer("adamw", p, 1e-3, 0.1).param_groups[0]["weight_decay"] == 0.1
    assert make_optimizer("sgd", p, 1e-3, 0.2).param_groups[0]["weight_decay"] == 0.2

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention_dropout = 0.0  # as Hugging Face's llama attention
            self.drop = nn.Dropout(0.0)

    m = nn.Sequential(Attn(), nn.Dropout(0.5))
    assert set_dropout(m, 0.2) == 3
    assert m[0].attention_dropout == 0.2 and m[0].drop.p == 0.2 and m[1].p == 0.2
    zoo = factory("gpt-tiny")(layer_range=None, tp=None, attention="flash", recompute="none")  # dropout 0
    assert set_dropout(zoo, 0.1) > 0
    drops = [x.p for x in zoo.modules() if type(x).__name__ == "Dropout"]
    attn = [x.attn_dropout for x in zoo.modules() if hasattr(x, "attn_dropout")]
    assert drops and attn and set(drops) == set(attn) == {0.1}  # the zoo's Dropout and attention's float

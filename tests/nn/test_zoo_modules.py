"""The zoo's PyTorch models on CPU: training steps, attention and recompute variants, stages, fake tensors."""

from __future__ import annotations

import pytest
import torch
from nn_helpers import no_dropout
from torch._subclasses.fake_tensor import FakeTensorMode

from tessera.models.zoo import get_arch, get_spec
from tessera.nn.common import BlockModel
from tessera.nn.zoo import build_model

TINY = ["gpt-tiny", "llama-tiny", "bert-tiny", "moe-tiny", "wrn-tiny"]
TRANSFORMERS = TINY[:4]


def step(model: BlockModel, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    inputs, targets = model.make_batch(2, 16, generator=torch.Generator().manual_seed(seed))
    out = model(inputs)
    loss = model.loss(out, targets)
    loss.backward()
    return out.detach(), loss.detach(), [p.grad.clone() for p in model.parameters()]


def built(name: str, **kw: object) -> BlockModel:
    torch.manual_seed(0)
    return no_dropout(build_model(name, **kw))  # type: ignore[return-value]


@pytest.mark.parametrize("name", TINY)
def test_training_step_on_cpu(name: str) -> None:
    torch.manual_seed(0)
    model = build_model(name)  # with the model's dropout
    out, loss, grads = step(model)
    assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in grads)
    assert len(grads) == len(list(model.parameters()))
    a = get_arch(name)
    classes = a.vocab if hasattr(a, "vocab") else a.n_classes
    assert out.shape[-1] == classes


@pytest.mark.parametrize("name", TRANSFORMERS)
def test_flash_equals_math_on_cpu(name: str) -> None:
    out_flash, _, g_flash = step(built(name, attention="flash"))
    out_math, _, g_math = step(built(name, attention="math"))
    torch.testing.assert_close(out_flash, out_math, atol=1e-5, rtol=1e-5)
    for a, b in zip(g_flash, g_math, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("attention", ["flash", "math"])
@pytest.mark.parametrize("recompute", ["selective", "full"])
def test_recompute_gives_identical_gradients(name: str, attention: str, recompute: str) -> None:
    out_ref, _, g_ref = step(built(name, attention=attention))
    out, _, g = step(built(name, attention=attention, recompute=recompute))
    torch.testing.assert_close(out, out_ref, atol=0, rtol=0)
    for a, b in zip(g, g_ref, strict=True):
        torch.testing.assert_close(a, b, atol=1e-7, rtol=1e-6)


def test_full_recompute_checkpoints_every_block() -> None:
    model = built("gpt-tiny", recompute="full")
    inputs, _ = model.make_batch(1, 8)
    x = model.layers[0](inputs)
    packed: list[torch.Size] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t.shape) or t, lambda t: t):
        model.layers[1](x)
    assert packed == [x.shape]  # only the block input is kept


@pytest.mark.parametrize("name", TINY)
def test_stages_compose_to_the_whole_model(name: str) -> None:
    """Pipeline stages built from layer ranges and fed each other's outputs reproduce the full model."""
    full = built(name)
    n = len(full.layers)
    cut = n // 2
    first, second = built(name, layer_range=(0, cut)), built(name, layer_range=(cut, n))
    assert second.layer_start == cut and first.layer_end == cut
    for part in (first, second):
        for i, layer in enumerate(part.layers):
            layer.load_state_dict(full.layers[part.layer_start + i].state_dict())
    inputs, _ = full.make_batch(2, 16, generator=torch.Generator().manual_seed(3))
    full.eval(), first.eval(), second.eval()
    with torch.no_grad():
        torch.testing.assert_close(second(first(inputs)), full(inputs))
    mid_in, targets = second.make_batch(2, 16)
    assert tuple(mid_in.shape) == second.stage_input_shape(2, 16)
    assert mid_in.is_floating_point() and not mid_in.requires_grad
    assert second.has_head and not first.has_head
    with pytest.raises(ValueError, match="no head"):
        first.loss(first(inputs), targets)


@pytest.mark.parametrize("name", ["gpt-tiny", "bert-tiny", "moe-tiny"])
def test_tied_embeddings(name: str) -> None:
    full = build_model(name)
    head = full.layers[-1]
    out = getattr(head, "out", None) or head.decoder
    assert out.weight is full.layers[0].tok.weight
    last = build_model(name, layer_range=(len(full.layers) - 1, len(full.layers)))
    assert (
        sum(p.numel() for p in last.parameters())
        == get_spec(name).layers[-1].params + full.arch.vocab * full.arch.hidden
    )


def test_llama_head_is_untied() -> None:
    model = build_model("llama-tiny")
    assert model.layers[-1].out.weight is not model.layers[0].tok.weight


@pytest.mark.parametrize("name", TINY)
def test_param_count_equals_spec(name: str) -> None:
    model = build_model(name, device="meta")
    assert sum(p.numel() for p in model.parameters()) == get_spec(name).params


@pytest.mark.parametrize("name", TINY)
def test_runs_under_fake_tensor_mode(name: str) -> None:
    with FakeTensorMode():
        model = build_model(name)
        inputs, targets = model.make_batch(2, 16)
        model.loss(model(inputs), targets).backward()
        assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("name", TRANSFORMERS)
def test_meta_uses_the_flash_kernel(name: str) -> None:
    """Off CPU (meta here, fake "cuda" in the memory tracer) attention calls the flash aten op directly."""
    from torch.utils.flop_counter import FlopCounterMode

    model = build_model(name, device="meta", layer_range=(1, 2))
    x, _ = model.make_batch(1, 32, device="meta")
    counter = FlopCounterMode(display=False)
    with counter:
        model(x.requires_grad_())
    ops = {str(op) for op in counter.get_flop_counts()["Global"]}
    assert "aten._scaled_dot_product_flash_attention" in ops


def test_build_model_from_arch_infers_family() -> None:
    from tessera.models.zoo import infer_family

    assert infer_family(get_arch("llama-tiny")) == "llama"
    assert infer_family(get_arch("bert-tiny")) == "bert"
    assert infer_family(get_arch("moe-tiny")) == "moe"
    assert infer_family(get_arch("wrn-tiny")) == "wide_resnet"
    assert infer_family(get_arch("gpt-tiny")) == "gpt"
    model = build_model(get_arch("llama-tiny"), device="meta")
    assert type(model.layers[1]).__name__ == "LlamaBlock"


def test_bad_options_fail_clearly() -> None:
    with pytest.raises(ValueError, match="attention"):
        build_model("gpt-tiny", attention="xformers")
    with pytest.raises(ValueError, match="recompute"):
        build_model("gpt-tiny", recompute="some")
    with pytest.raises(ValueError, match="layer_range"):
        build_model("gpt-tiny", layer_range=(3, 9))


@pytest.mark.parametrize("name", TINY)
def test_meta_build_materializes_with_init_weights(name: str) -> None:
    """Build on meta, ``to_empty`` on the device, ``init_weights``: ties and RoPE tables come back."""
    model = build_model(name, device="meta").to_empty(device="cpu")
    model.init_weights()
    ref = build_model(name)
    for (k, buf), (_, ref_buf) in zip(model.named_buffers(), ref.named_buffers(), strict=True):
        if "rope" in k:
            torch.testing.assert_close(buf, ref_buf)
    assert sum(p.numel() for p in model.parameters()) == get_spec(name).params
    _, loss, grads = step(model)
    assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("capacity_factor", [4.0, 1.0, 0.5])
def test_moe_routing_matches_a_token_loop(capacity_factor: float) -> None:
    """Top-2 routing with first-choice-first slots per sequence; tokens past capacity are dropped."""
    import dataclasses

    import torch.nn.functional as F

    from tessera.models.zoo.moe import capacity
    from tessera.nn.zoo.moe import MoEMLP

    torch.manual_seed(0)
    arch = dataclasses.replace(get_arch("moe-tiny"), dropout=0.0, capacity_factor=capacity_factor)
    moe = MoEMLP(arch, tp=None)
    x = torch.randn(3, 10, arch.hidden)
    with torch.no_grad():
        y = moe(x)
        top_p, top_i = torch.softmax(moe.router(x), -1).topk(2, -1)
        w = top_p / top_p.sum(-1, keepdim=True)
        ref = torch.zeros_like(x)
        cap = capacity(arch, 10)
        for b in range(3):
            used = [0] * arch.n_experts
            for k in range(2):
                for t in range(10):
                    e = int(top_i[b, t, k])
                    if used[e] < cap:
                        ex = moe.experts
                        ref[b, t] += w[b, t, k] * (F.gelu(x[b, t] @ ex.w_in[e]) @ ex.w_out[e])
                    used[e] += 1
    torch.testing.assert_close(y, ref, atol=1e-6, rtol=1e-5)


def test_rope_tables_grow_past_max_positions() -> None:
    """A LLaMA plan may train longer sequences than its config's ``max_positions`` (RoPE has no learned
    positions): the tables grow to the sequence, and the first ``max_positions`` rows do not change."""
    from tessera.nn.common import rope_tables

    model = built("llama-tiny")
    rows = get_arch("llama-tiny").max_positions
    inputs, _ = model.make_batch(1, 2 * rows, generator=torch.Generator().manual_seed(0))
    out = model(inputs)
    assert out.shape[1] == 2 * rows and torch.isfinite(out).all()
    attn = next(m for m in model.modules() if hasattr(m, "rope_cos"))
    cos, _ = rope_tables(attn.head_dim, 2 * rows, attn.rope_theta)
    assert attn.rope_cos.shape[0] == 2 * rows
    torch.testing.assert_close(attn.rope_cos, cos)

"""Tiny Hugging Face models of every supported family, written locally with ``save_pretrained`` (no download),
and the plain single-process ``transformers`` reference the runtime's HF runs are compared with."""

from __future__ import annotations

from pathlib import Path

import torch

from tessera.nn.hf import FAMILIES, HFModel, hf_key
from tessera.plan import Plan
from tessera.runtime import SyntheticData, make_optimizer

FAMILY_NAMES = ("llama", "mistral", "qwen2", "gpt2")
N_DECODER = 3  # decoder layers: the runtime sees 5 (embedding, 3 blocks, head)


def tiny_config(family: str):
    """Dropout-free fp32 configs; qwen2 and gpt2 tie the lm_head to the embedding."""
    import transformers as tf

    small = dict(
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=N_DECODER,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=96,
        max_position_embeddings=64,
    )
    if family == "llama":
        return tf.LlamaConfig(**small)
    if family == "mistral":
        return tf.MistralConfig(**small, sliding_window=8)  # shorter than the sequence: the window matters
    if family == "qwen2":
        return tf.Qwen2Config(**small, tie_word_embeddings=True)
    if family == "gpt2":
        return tf.GPT2Config(
            n_embd=32,
            n_layer=N_DECODER,
            n_head=4,
            vocab_size=96,
            n_positions=64,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            bos_token_id=0,
            eos_token_id=0,
        )
    raise KeyError(family)


def save_tiny(family: str, out: Path, seed: int = 0) -> Path:
    """A randomly initialized tiny model of ``family`` saved as a Hugging Face directory."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(family))
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    return out


def hf_reference(model_dir: Path, plan: Plan, *, seed: int = 0, steps: int = 1, lr: float = 1e-3, state=None):
    """(loss per step, first-step gradients keyed by Tessera FQN) of the plain ``AutoModelForCausalLM``.

    The batches are the runtime's (``SyntheticData`` through the Tessera model's ``make_batch``); the loss is
    the mean cross-entropy of the plain model's logits. ``state`` (Tessera FQN -> tensor) replaces the
    directory's weights (the from-scratch runs).
    """
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.config._attn_implementation = "sdpa"
    family = FAMILIES[model.config.model_type]
    n = N_DECODER + 2
    if state is not None:
        hf_state = {hf_key(family, n, k): v for k, v in state.items()}
        missing, unexpected = model.load_state_dict(hf_state, strict=False)
        assert not unexpected, unexpected
        assert all(k == "lm_head.weight" for k in missing), missing
    model.train()
    sampler = HFModel(str(model_dir))(layer_range=None, tp=None, attention="flash", recompute="none")
    opt = make_optimizer(plan.optimizer, list(model.parameters()), lr)
    data = SyntheticData(seed)
    to_fqn = {hf_key(family, n, fqn): fqn for fqn, _ in sampler.named_parameters()}
    losses, grads = [], None
    for step in range(steps):
        inputs, targets = data.batch(sampler, step, plan.global_batch, plan.seq_len)
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=inputs).logits
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1)
        )
        loss.backward()
        if grads is None:
            grads = {to_fqn[k]: p.grad.detach().clone() for k, p in model.named_parameters()}
        opt.step()
        losses.append(float(loss.detach()))
    return losses, grads

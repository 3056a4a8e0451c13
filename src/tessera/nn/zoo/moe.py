"""GShard-style MoE in PyTorch: a GPT whose every ``moe_every``-th block has a top-k mixture of experts.

Routing (Lepikhin et al. 2021): softmax router, top-k experts per token, weights renormalized over the k;
each sequence is one routing group with a static expert capacity ``C = ceil(capacity_factor * k * T / E)``,
so shapes never depend on the routing. Slots are assigned first-choice-first, then in token order;
tokens over capacity are dropped (their share is zero and the residual carries them). Dispatch and
combine are index scatter/gather (no dense one-hot einsums), and the experts are two batched matmuls.

TP names: as GPT, plus ``block.mlp.router`` (replicated) and ``block.mlp.experts`` with ``w_in``
[E, h, f_local] / ``w_out`` [E, f_local, h]: every expert's FFN split by columns, so the experts' output
is a partial sum the runtime all-reduces (before the routing weights and the residual dropout).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tessera.models.spec import TransformerArch
from tessera.models.zoo.moe import capacity
from tessera.nn.common import BlockModel, BuildOptions, Dropout, TPShare, linear, local_units
from tessera.nn.zoo import gpt as gpt_nn
from tessera.nn.zoo.transformer import transformer_model


class Experts(nn.Module):
    """``n_experts`` GELU FFNs without biases, run as two batched matmuls over the expert slots.

    Takes the tokens and their routing, returns every (choice, token)'s expert output, unweighted.
    Under TP each expert keeps ``f_local`` of its FFN columns, so the output is a partial sum: the runtime
    treats this module like a column -> row pair (identity/all-reduce on ``x``, all-reduce on the output).
    """

    def __init__(self, arch: TransformerArch, *, tp: TPShare | None) -> None:
        super().__init__()
        f = local_units(tp, arch.ffn_hidden)
        self.w_in = nn.Parameter(torch.empty(arch.n_experts, arch.hidden, f))
        self.w_out = nn.Parameter(torch.empty(arch.n_experts, f, arch.hidden))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.w_in, std=0.02)
        nn.init.normal_(self.w_out, std=0.02)

    def forward(self, x: torch.Tensor, slot: torch.Tensor, keep: torch.Tensor, cap: int) -> torch.Tensor:
        """x [b, t, h]; slot, keep [b * k * t(, 1)] in choice-major order -> [b * k * t, h]."""
        b, t, h = x.shape
        e = self.w_in.shape[0]
        k = slot.shape[0] // (b * t)
        # Dispatch: copy each (choice, token) row into its expert's slot; dropped rows add zeros.
        rows = x.unsqueeze(1).expand(b, k, t, h).reshape(b * k * t, h) * keep
        buf = x.new_zeros(e * b * cap, h).scatter_add(0, slot.unsqueeze(-1).expand(-1, h), rows)
        hidden = F.gelu(torch.bmm(buf.view(e, b * cap, h), self.w_in))
        out = torch.bmm(hidden, self.w_out).view(e * b * cap, h)
        return out.index_select(0, slot)  # gather every (choice, token)'s row back


class MoEMLP(nn.Module):
    """Top-k gated mixture of experts over each sequence's tokens: ``router`` (whole under TP), then
    ``experts``, then the routing-weighted sum over the k choices and residual dropout."""

    def __init__(self, arch: TransformerArch, *, tp: TPShare | None) -> None:
        super().__init__()
        self.arch = arch
        self.router = linear(arch.hidden, arch.n_experts, bias=False)
        self.experts = Experts(arch, tp=tp)
        self.dropout = Dropout(arch.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape
        k = self.arch.top_k
        cap = capacity(self.arch, t)  # static: a function of the token count only
        probs = torch.softmax(self.router(x), dim=-1)  # [b, t, e]
        top_p, top_i = probs.topk(k, dim=-1)  # [b, t, k]
        weights = top_p / top_p.sum(dim=-1, keepdim=True)
        slot, keep = self._slots(top_i, cap, x.dtype)
        share = weights.transpose(1, 2).reshape(b * k * t, 1) * keep  # 0 for dropped (choice, token)s
        y = (self.experts(x, slot, keep, cap) * share).view(b, k, t, h).sum(dim=1)
        return self.dropout(y)

    def _slots(self, top_i: torch.Tensor, cap: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Slot of every (choice, token) in choice-major order in the [E, b * cap] expert buffer, and a 0/1
        keep column (0 past capacity; such rows still point at a valid slot but add zeros)."""
        b, t, k = top_i.shape
        e = self.arch.n_experts
        with torch.no_grad():
            choice = top_i.transpose(1, 2).reshape(b, k * t)  # first choices of all tokens, then second...
            onehot = (choice.unsqueeze(-1) == torch.arange(e, device=top_i.device)).long()  # [b, k*t, e]
            pos = ((onehot.cumsum(dim=1) - 1) * onehot).sum(dim=-1)  # position in its expert's queue
            keep = pos < cap
            group = torch.arange(b, device=top_i.device).unsqueeze(-1)
            slot = choice * (b * cap) + group * cap + pos.clamp(max=cap - 1)
            return slot.reshape(-1), keep.reshape(-1, 1).to(dtype)


def moe_block(arch: TransformerArch, i: int, opts: BuildOptions) -> nn.Module:
    """GPT's block ``i``, with an ``MoEMLP`` as its ``mlp`` (and kind "moe") when ``arch.is_moe_block(i)``."""
    mlp = MoEMLP(arch, tp=opts.tp) if arch.is_moe_block(i) else None  # built first: its draws come first
    block = gpt_nn.GPTBlock(arch, i, opts, mlp=mlp)
    if mlp is not None:
        block.kind = "moe"
    return block


def build(arch: TransformerArch, **options: Any) -> BlockModel:
    """Layers ``layer_range`` of a GPT (``gpt_nn``) whose MoE blocks carry an ``MoEMLP``; ``options`` a
    ``BuildOptions``'s fields."""
    opts = BuildOptions(**options)
    return transformer_model(arch, opts, embedding=gpt_nn.GPTEmbedding, block=moe_block, head=gpt_nn.GPTHead)

"""Shared pieces of the memory-trace tests: a self-contained GPT-2-like model and the fake-CUDA worker.

The tiny GPT is defined here (not taken from the zoo) so the trace is checked against a model whose every
op is known: tied embedding/head (pitfall 1: two gradients into one parameter), pre-LN blocks, manual
causal attention, GELU MLP, optional per-block checkpointing and 1-byte-mask dropout.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

THIS_FILE = str(Path(__file__).resolve())


class TinyBlock(nn.Module):
    def __init__(self, hidden: int, heads: int, dropout: float, ckpt: bool) -> None:
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln_2 = nn.LayerNorm(hidden)
        self.fc_in = nn.Linear(hidden, 4 * hidden)
        self.fc_out = nn.Linear(4 * hidden, hidden)
        self.dropout = dropout
        self.ckpt = ckpt

    def _drop(self, x: torch.Tensor) -> torch.Tensor:
        if self.dropout == 0.0 or not self.training:
            return x
        return torch.native_dropout(x, self.dropout, True)[0]

    def _attn(self, x: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape
        q, k, v = self.qkv(x).split(h, dim=-1)
        q, k, v = (z.view(b, t, self.heads, h // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(h // self.heads))
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        probs = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        y = (self._drop(probs) @ v).transpose(1, 2).reshape(b, t, h)
        return self._drop(self.proj(y))

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self._attn(self.ln_1(x))
        return x + self._drop(self.fc_out(F.gelu(self.fc_in(self.ln_2(x)))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.ckpt and torch.is_grad_enabled():
            return checkpoint(self._forward, x, use_reentrant=False)
        return self._forward(x)


class TinyGPT(nn.Module):
    """GPT-2 in miniature: W = V h + l (12 h^2 + 13 h) + positions + final LN, head tied to the embedding."""

    input_kind = "tokens"
    has_head = True

    def __init__(
        self,
        *,
        vocab: int = 512,
        hidden: int = 64,
        n_layers: int = 2,
        heads: int = 4,
        max_seq: int = 64,
        dropout: float = 0.0,
        ckpt: bool = False,
    ) -> None:
        super().__init__()
        self.vocab = vocab
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Parameter(torch.randn(max_seq, hidden) * 0.01)
        self.layers = nn.ModuleList(TinyBlock(hidden, heads, dropout, ckpt) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(hidden)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.wte(ids) + self.wpe[: ids.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return F.linear(self.ln_f(x), self.wte.weight)

    def loss(self, out: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), targets.reshape(-1))

    def make_batch(self, batch: int, seq_len: int, *, device: str | torch.device = "cpu"):
        ids = torch.randint(0, self.vocab, (batch, seq_len), device=device)
        targets = torch.randint(0, self.vocab, (batch, seq_len), device=device)
        return ids, targets


def tiny_gpt(*, attention: str = "math", recompute: str = "none", tp=None, layer_range=None, **kw) -> TinyGPT:
    """Factory in the shape ``StageTraceRequest.model = "<this file>:tiny_gpt"`` expects."""
    return TinyGPT(ckpt=recompute == "full", **kw)


class MLP(nn.Module):
    """The note's hand-count model: Linear(256, 1024) -> GELU -> Linear(1024, 256)."""

    has_head = True

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)

    def loss(self, out: torch.Tensor, targets: torch.Tensor | None) -> torch.Tensor:
        return out.sum()

    def make_batch(self, batch: int, seq_len: int, *, device: str | torch.device = "cpu"):
        return torch.randn(batch, 256, device=device), None


def mlp(*, attention: str = "math", recompute: str = "none", tp=None, layer_range=None) -> MLP:
    return MLP()


@pytest.fixture(scope="session")
def fake_cuda_shim() -> Path:
    """Compile the fake CUDA shim once per session (cached on disk across sessions)."""
    from tessera.memory import fakecuda

    try:
        return fakecuda.build_shim()
    except fakecuda.FakeCudaError as e:  # pragma: no cover - machines without g++
        pytest.skip(str(e))


# ------------------------------------------------------------------------------ fake-CUDA worker batch
#: A GPT big enough that 512-B rounding of small tensors does not blur 1/d and 1/t ratios (~3.4 M params).
ARCH = dict(
    hidden=256,
    n_layers=4,
    n_heads=4,
    n_kv_heads=4,
    ffn_hidden=1024,
    vocab=1024,
    max_positions=128,
    dropout=0.0,
)
N_LAYERS_BUILT = ARCH["n_layers"] + 2  # the zoo's GPT: embedding, blocks, head


def _requests() -> dict[str, object]:
    from types import SimpleNamespace

    from tessera.memory.trace import StageTraceRequest as R
    from tessera.memory.trace import view_request
    from tessera.models.zoo import get_spec

    g = dict(model="gpt-test", arch=ARCH, seq_len=64, micro_batch_size=2)
    blocks = (1, N_LAYERS_BUILT - 1)  # a middle stage: transformer blocks only
    return {
        "hand_count": R(model=f"{THIS_FILE}:mlp", seq_len=1, micro_batch_size=64),
        "z0": R(**g, dp_degree=4),
        "z1": R(**g, zero=1, dp_degree=4),
        "z2": R(**g, zero=2, dp_degree=4),
        "z3": R(**g, zero=3, dp_degree=4),
        "z3_master": R(**g, zero=3, dp_degree=4, precision="bf16-master"),
        "tp1_blocks": R(**g, layer_range=blocks),
        "tp2_blocks": R(**g, layer_range=blocks, tp_degree=2, tp_rank=1),
        "pp_s0": R(**g, layer_range=blocks, n_stages=2, stage_index=0, micro_batches=4),
        "pp_s1": R(**g, layer_range=blocks, n_stages=2, stage_index=1, micro_batches=4),
        "pp_gpipe": R(**g, layer_range=blocks, n_stages=2, stage_index=1, micro_batches=4, schedule="gpipe"),
        "bf16": R(**g, precision="bf16"),
        "bf16_master": R(**g, precision="bf16-master"),
        "fp16": R(**g, precision="fp16"),
        "sgd": R(**g, optimizer="sgd"),
        "full_recompute": R(**g, precision="bf16", recompute="full"),
        "selective_math": R(**g, precision="bf16", recompute="selective", attention="math"),
        "math": R(**g, precision="bf16", attention="math"),
        "custom_factory": R(model=f"{THIS_FILE}:tiny_gpt", seq_len=32, micro_batch_size=4, precision="bf16"),
        "view": view_request(
            get_spec("gpt-tiny", 64),
            SimpleNamespace(
                layer_start=0,
                layer_end=3,
                micro_batch=2,
                in_flight=2,
                micro_batches=4,
                dp=1,
                tp=1,
                precision="bf16",
                recompute="none",
                attention="flash",
                optimizer="adamw",
                zero=0,
            ),
        ),  # fmt: skip
        "gpt_1p3b": R(
            model="gpt-1.3b", seq_len=2048, micro_batch_size=1, precision="bf16", attention="flash"
        ),
    }


@pytest.fixture(scope="session")
def fake_cuda_traces(fake_cuda_shim: Path) -> dict[str, object]:
    """Every fake-CUDA trace the tests look at, run in ONE worker process (torch imported once)."""
    from tessera.memory.trace import trace_stages

    reqs = _requests()
    results = trace_stages(list(reqs.values()), in_process=False)
    return dict(zip(reqs, results, strict=True))

"""Pins of the zoo's PyTorch models at their tiny configs: names, shapes, layer metadata and seeded numerics.

Checkpoints, the exact memory trace, TP sharding, the profiler and Hugging Face weight loading all read the
zoo's parameter names and layer metadata, so a refactor of ``tessera.nn.zoo`` must leave them as they were.
The digests were computed on the code before the zoo's modules shared their common pieces (issue 19, item 9);
on a mismatch the assertion shows the full description to compare.
"""

from __future__ import annotations

import hashlib

import pytest
import torch
from nn_helpers import no_dropout

from tessera.nn.common import BlockModel, TPShare
from tessera.nn.zoo import build_model

# an uneven two-way TP share (rank 1 of ratios 1:3), so sharded shapes differ from any even split
UNEVEN_TP = TPShare(2, 1, (1.0, 3.0))

# (name, TP share, layer range) -> (sha256[:16] of ``describe``, state_dict entries, parameter elements)
STRUCTURE = {
    ("gpt-tiny", None, None): ("7c93a0baba00778a", 69, 212352),
    ("gpt-tiny", UNEVEN_TP, None): ("7aca70ea623cd252", 69, 143548),
    ("gpt-tiny", None, (1, 3)): ("0065203ad824f0e1", 32, 99968),
    ("gpt-tiny", UNEVEN_TP, (3, 6)): ("ed8078d4a4de7d24", 35, 72830),
    ("llama-tiny", None, None): ("1551ea6f341c7207", 39, 201280),
    ("llama-tiny", UNEVEN_TP, None): ("4cae0bd196b31f50", 39, 137920),
    ("llama-tiny", None, (1, 3)): ("790d9d234330a7c7", 18, 92416),
    ("llama-tiny", UNEVEN_TP, (3, 6)): ("7553b7aba9dc65fa", 20, 68992),
    ("bert-tiny", None, None): ("ab90999e6e36c590", 75, 216896),
    ("bert-tiny", UNEVEN_TP, None): ("a9ebe2fdf40da4aa", 75, 148059),
    ("bert-tiny", None, (1, 3)): ("d8e17ac1d89ff351", 32, 99968),
    ("bert-tiny", UNEVEN_TP, (3, 6)): ("77651e529627b8f9", 38, 77085),
    ("moe-tiny", None, None): ("82790fd3634ac8cf", 67, 408832),
    ("moe-tiny", UNEVEN_TP, None): ("f8d0f992483dd683", 67, 290238),
    ("moe-tiny", None, (1, 3)): ("f0045ddc3bd53114", 31, 198208),
    ("moe-tiny", UNEVEN_TP, (3, 6)): ("ca0a6d1009507cd5", 34, 146175),
    ("wrn-tiny", None, None): ("6b9af1c44c810f1f", 104, 201922),
    ("wrn-tiny", UNEVEN_TP, None): ("55a58f7ac5b69c1e", 104, 164103),
    ("wrn-tiny", None, (1, 3)): ("09afbabe2bd9c593", 48, 11728),
    ("wrn-tiny", UNEVEN_TP, (3, 6)): ("bd10b4a4c7be809f", 50, 153603),
}

# name -> (loss, sum of squared gradients, sum of parameters) after ``torch.manual_seed(0)``, a build
# with full recompute and no dropout, and one seeded batch of 2 x 16
NUMERICS = {
    "gpt-tiny": (4.838969707489014, 17.798117507144678, 562.9591787598646),
    "llama-tiny": (4.862460136413574, 8.95176275589722, 573.603696019847),
    "bert-tiny": (4.838717460632324, 5.3172825361526765, 622.865294810399),
    "moe-tiny": (4.8838090896606445, 15.98254987197948, 552.1684023371229),
    "wrn-tiny": (2.3683691024780273, 473.44336953513175, 1293.6407249187187),
}


def describe(model: BlockModel) -> list[str]:
    """Everything outside the model that reads its structure: state_dict keys with shapes and dtypes (in
    order), parameters and buffers, each layer's spec name / kind / TP shard / TP units / recompute, the
    tied weights and what the first layer takes."""
    lines = [f"{k} {tuple(v.shape)} {v.dtype}" for k, v in model.state_dict().items()]
    lines += [f"param {k} {tuple(p.shape)}" for k, p in model.named_parameters()]
    lines += [f"buffer {k} {tuple(b.shape)}" for k, b in model.named_buffers()]
    for layer in model.layers:
        lines.append(
            f"layer {layer.spec_name} {layer.kind} {layer.tp_shard} {layer.tp_units} {layer.recompute_full}"
        )
    lines += [f"tie {dst} {src}" for dst, src in model.ties]
    lines.append(f"input {model.input_kind} {model.feature_shape}")
    return lines


def digest(lines: list[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


@pytest.mark.parametrize(("name", "tp", "layer_range"), list(STRUCTURE))
def test_structure_is_pinned(name: str, tp: TPShare | None, layer_range: tuple[int, int] | None) -> None:
    model = build_model(name, tp=tp, layer_range=layer_range, recompute="full", device="meta")
    lines = describe(model)  # type: ignore[arg-type]
    n_params = sum(p.numel() for p in model.parameters())
    got = (digest(lines), len(model.state_dict()), n_params)
    assert got == STRUCTURE[(name, tp, layer_range)], "\n".join(lines)


@pytest.mark.parametrize("name", list(NUMERICS))
def test_seeded_numerics_are_pinned(name: str) -> None:
    """Same init draws in the same order and the same ops: a reordered module or a changed op moves these."""
    torch.manual_seed(0)
    model: BlockModel = no_dropout(build_model(name, recompute="full"))  # type: ignore[assignment]
    inputs, targets = model.make_batch(2, 16, generator=torch.Generator().manual_seed(1))
    loss = model.loss(model(inputs), targets)
    loss.backward()
    grad_sq = sum(p.grad.double().square().sum() for p in model.parameters()).item()  # type: ignore[union-attr]
    param_sum = sum(p.double().sum() for p in model.parameters()).item()
    assert (loss.item(), grad_sq, param_sum) == pytest.approx(NUMERICS[name], rel=1e-5)

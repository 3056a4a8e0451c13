"""Vocab-parallel embedding, head and cross-entropy on a real 2-rank gloo group.

The exactness tests compare whole TP runs with the single-process reference; these check the parts: the
parallel cross-entropy against ``F.cross_entropy`` (uneven class split, targets on both ranks), and that a TP
stage really holds only its rows of the vocabulary — DTensor (even) and Tessera's own layers (uneven) alike.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from helpers import plan, run_on_gloo, stage
from models import factory, n_layers

CLASSES = 37
SPLIT = (25, 12)  # rank 0 holds classes 0..24, rank 1 25..36


def _worker(rank: int, out: dict) -> None:
    from tessera.nn.vocab_parallel import vocab_parallel_cross_entropy
    from tessera.runtime.engine import Trainer

    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, CLASSES, generator=gen) * 4.0
    targets = torch.randint(0, CLASSES, (3, 5), generator=gen)
    start = 0 if rank == 0 else SPLIT[0]
    local = logits[..., start : start + SPLIT[rank]].clone().requires_grad_(True)
    loss = vocab_parallel_cross_entropy(local, targets, start, dist.group.WORLD)
    loss.backward()
    out[f"ce-{rank}"] = (float(loss.detach()), local.grad.clone())
    for name in ("gpt-tiny", "llama-tiny"):
        n = n_layers(name)
        for key, p, impl in (
            ("even-dtensor", plan(name, [stage(0, n, [0, 1], tp=2)]), "auto"),
            ("uneven-own", plan(name, [stage(0, n, [0, 1], tp=2, ratios=(0.75, 0.25))]), "auto"),
            ("pp2", plan(name, [stage(0, 1, [0]), stage(1, n, [1])], micro=2), "auto"),
        ):
            os.environ["TESSERA_TP_IMPL"] = impl
            t = Trainer(p, rank, factory(name), seed=0, learning_rate=1e-3, device=torch.device("cpu"))
            rows = {
                e.fqn: tuple(e.param.shape)
                for e in t.entries
                if e.fqn.split(".", 2)[2] in ("tok.weight", "out.weight")
            }
            out[f"{name}/{key}/{rank}"] = (rows, t.stage.vocab_output is not None)
            t.close()


@pytest.mark.timeout(180)
def test_vocab_parallel_cross_entropy_and_vocab_sharded_stages():
    got = run_on_gloo(_worker)

    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(3, 5, CLASSES, generator=gen) * 4.0).requires_grad_(True)
    targets = torch.randint(0, CLASSES, (3, 5), generator=gen)
    ref = F.cross_entropy(logits.reshape(-1, CLASSES), targets.reshape(-1))
    ref.backward()
    assert (targets < SPLIT[0]).any() and (targets >= SPLIT[0]).any()  # both ranks hold some targets
    for rank, (lo, hi) in enumerate(((0, SPLIT[0]), (SPLIT[0], CLASSES))):
        loss, grad = got[f"ce-{rank}"]
        assert abs(loss - float(ref.detach())) < 1e-6 * abs(
            float(ref.detach())
        )  # the same loss on every rank
        torch.testing.assert_close(grad, logits.grad[..., lo:hi], rtol=1e-5, atol=1e-7)

    for name, vocab in (("gpt-tiny", 128), ("llama-tiny", 128)):
        for rank in (0, 1):
            rows, sharded_loss = got[f"{name}/even-dtensor/{rank}"]
            assert len(rows) == (1 if name == "gpt-tiny" else 2), rows  # GPT ties its head to the embedding
            assert all(shape[0] == vocab // 2 for shape in rows.values()), rows
            assert sharded_loss
            rows, sharded_loss = got[f"{name}/uneven-own/{rank}"]
            assert all(shape[0] == (96 if rank == 0 else 32) for shape in rows.values()), rows
            assert sharded_loss
            rows, sharded_loss = got[f"{name}/pp2/{rank}"]  # no TP: whole vocabulary, plain loss
            assert all(shape[0] == vocab for shape in rows.values()) and not sharded_loss

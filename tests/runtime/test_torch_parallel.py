"""The PyTorch-backed paths are the ones actually taken: even TP → DTensor, ZeRO-3 → FSDP2, a regular
pipeline → torch.distributed.pipelining (else Tessera's own layers, sync and transport)."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
from helpers import plan, run_on_gloo, stage
from models import factory, n_layers

NAME = "llama-tiny"


def _worker(rank: int, out: dict) -> None:
    from torch.distributed.tensor import DTensor

    from tessera.runtime.engine import Trainer
    from tessera.runtime.model import initial_state
    from tessera.runtime.shards import assemble
    from tessera.runtime.torch_pipeline import TorchPipelineRunner

    n = n_layers(NAME)
    cases = {
        "tp-even": (plan(NAME, [stage(0, n, [0, 1], tp=2)]), "auto"),
        "tp-even-own": (plan(NAME, [stage(0, n, [0, 1], tp=2)]), "own"),
        "tp-uneven": (plan(NAME, [stage(0, n, [0, 1], tp=2, ratios=(0.75, 0.25))]), "auto"),
        "zero3": (plan(NAME, [stage(0, n, [0, 1], dp=2, shares=(5, 3))], micro=2, zero=3), "auto"),
        "zero3-skip-mb": (plan(NAME, [stage(0, n, [0, 1], dp=2, shares=(7, 1))], micro=4, zero=3), "auto"),
    }
    full = initial_state(factory(NAME), n, 0)
    pp = plan(NAME, [stage(0, 2, [0]), stage(2, n, [1])], micro=4)
    for impl in ("auto", "own"):
        os.environ["TESSERA_PIPELINE_IMPL"] = impl
        t = Trainer(pp, rank, factory(NAME), seed=0, learning_rate=1e-3, device=torch.device("cpu"))
        if rank == 0:
            out[f"pp-{impl}"] = isinstance(t.runner, TorchPipelineRunner)
        t.close()
    for key, (p, impl) in cases.items():
        os.environ["TESSERA_TP_IMPL"] = impl
        t = Trainer(p, rank, factory(NAME), seed=0, learning_rate=1e-3, device=torch.device("cpu"))
        dtensors = sum(isinstance(e.param, DTensor) for e in t.entries)
        gathered: list = [None, None]
        dist.all_gather_object(gathered, t.param_pieces())
        state = assemble([piece for pieces in gathered for piece in pieces])
        exact = all(torch.equal(state[k], full[k]) for k in state) and set(state) <= set(full)
        if rank == 0:
            out[key] = (dtensors, t.fsdp, exact)
        t.close()


@pytest.mark.timeout(120)
def test_even_tp_uses_dtensor_and_zero3_uses_fsdp2():
    got = run_on_gloo(_worker)
    assert got["tp-even"][0] > 0 and not got["tp-even"][1]
    assert got["tp-even-own"][0] == 0 and got["tp-uneven"][0] == 0
    assert got["zero3"][0] > 0 and got["zero3"][1]
    assert got["zero3-skip-mb"][0] == 0 and not got["zero3-skip-mb"][1]  # falls back to Tessera's ZeRO-2
    assert got.pop("pp-auto") and not got.pop("pp-own")  # torch.distributed.pipelining unless forced off
    assert all(exact for _, _, exact in got.values())  # full state from the pieces, whatever the path

"""How blocks map onto PyTorch DTensor tensor parallelism — shared by the runtime (which runs it), the profiler
(which times it) and the memory trace, so the estimate prices the very implementation a rank executes.

It imports only torch (lazily), so a runtime worker that uses it still loads nothing of Tessera but the plan
and the torch side, and the estimator can ask ``uses_dtensor`` without importing torch at all.

Even TP splits go through ``parallelize_module``: q/k/v and fc_in/gate/up ``ColwiseParallel``, proj and
fc_out/down ``RowwiseParallel``; anything else (embeddings, vocab heads, fused projections) has no plan and
stays replicated or on Tessera's own layers. ``TESSERA_TP_IMPL=own|dtensor|auto`` (default auto = DTensor for
even splits) forces one implementation everywhere.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the estimator asks uses_dtensor() without importing torch
    from torch import nn

COLWISE = frozenset({"q", "k", "v", "fc_in", "gate", "up"})
ROWWISE = frozenset({"proj", "fc_out", "down"})
TP_IMPLS = ("own", "dtensor", "auto")


def tp_impl() -> str:
    """The TP implementation asked for by ``TESSERA_TP_IMPL`` (``auto`` when unset)."""
    value = os.environ.get("TESSERA_TP_IMPL", "auto").strip().lower() or "auto"
    if value not in TP_IMPLS:
        raise ValueError(f"TESSERA_TP_IMPL must be own, dtensor or auto, got {value!r}")
    return value


def uses_dtensor(tp_degree: int, even: bool) -> bool:
    """Whether a stage of this TP degree and split runs its blocks through DTensor."""
    return tp_degree > 1 and even and tp_impl() != "own"


def block_tp_plan(layer: nn.Module) -> dict[str, object] | None:
    """The DTensor plan of a zoo block, or ``None`` when it has Linears this mapping does not know
    (fused projections, vocab heads) or no column/row pair."""
    from torch import nn
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    out: dict[str, object] = {}
    for name, mod in layer.named_modules():
        if not isinstance(mod, nn.Linear):
            continue
        leaf = name.rsplit(".", 1)[-1]
        if leaf in COLWISE:
            out[name] = ColwiseParallel()
        elif leaf in ROWWISE:
            out[name] = RowwiseParallel()
        else:
            return None
    has_col = any(n.rsplit(".", 1)[-1] in COLWISE for n in out)
    has_row = any(n.rsplit(".", 1)[-1] in ROWWISE for n in out)
    return out if has_col and has_row else None


@contextlib.contextmanager
def fake_process_group(world_size: int, rank: int) -> Iterator[None]:
    """A process group of ``world_size`` in this one process whose collectives do nothing (PyTorch's
    ``fake`` backend): what one rank computes, with no peers — for traces and single-device profiling."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", rank=rank, world_size=world_size, store=FakeStore())
    try:
        yield
    finally:
        dist.destroy_process_group()

"""Pipeline schedules (GPipe, 1F1B) over Tessera's own transport, for stages of any DP/TP degree.

Each rank runs its stage's action list — the same list for every rank of the stage, minus the micro-batches
where its replica holds no rows — so TP collectives inside a replica line up, and the classic 1F1B argument
(stage s does F(m) only after B(m - warmup_s - 1), which stage s+1 finished after F(m - 2)) keeps the
pipeline deadlock-free whatever the replicas' sizes.

The stage never sees DDP: gradients simply accumulate over micro-batches, and the DP sync runs once after
the whole schedule (``data_parallel.GradSync``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from tessera.plan import Schedule
from tessera.runtime.data_parallel import weighted_loss
from tessera.runtime.groups import Layout, overlaps
from tessera.runtime.stage import StageModel
from tessera.runtime.transport import Transport

FWD, BWD = 0, 1


def actions(schedule: Schedule, n_stages: int, stage: int, micro_batches: int) -> list[tuple[int, int]]:
    """(FWD|BWD, micro-batch) in execution order for one stage."""
    m = micro_batches
    if schedule == Schedule.GPIPE:
        return [(FWD, i) for i in range(m)] + [(BWD, i) for i in range(m)]
    warmup = min(n_stages - stage - 1, m)
    out = [(FWD, i) for i in range(warmup)]
    for i in range(m - warmup):
        out += [(FWD, warmup + i), (BWD, i)]
    out += [(BWD, i) for i in range(m - warmup, m)]
    return out


@dataclass
class StepTimes:
    compute_s: float
    comm_s: float


class PipelineRunner:
    """Runs one optimizer step's forward/backward over all micro-batches on this rank."""

    def __init__(
        self,
        layout: Layout,
        stage: StageModel,
        transport: Transport,
        device: torch.device,
        autocast: Callable[[], contextlib.AbstractContextManager],
    ) -> None:
        self.layout = layout
        self.stage = stage
        self.transport = transport
        self.device = device
        self.autocast = autocast
        plan = layout.plan
        self.actions = [
            (kind, m)
            for kind, m in actions(plan.schedule, plan.n_stages, layout.stage_index, plan.micro_batches)
            if layout.my_rows(m)[0] < layout.my_rows(m)[1]
        ]

    def _peers(self, stage: int, m: int) -> list[tuple[int, int, int]]:
        """(replica, lo, hi) of the neighbouring stage's replicas overlapping my rows of micro-batch m."""
        lay = self.layout
        theirs = [lay.rows[stage][r][m] for r in range(lay.plan.stages[stage].dp_degree)]
        return overlaps(lay.my_rows(m), theirs)

    def run(
        self,
        inputs: torch.Tensor | None,
        targets: torch.Tensor | None,
        loss_scale: float = 1.0,
        *,
        forward_only: bool = False,
    ) -> tuple[float, StepTimes]:
        """Returns this rank's share of the step loss (already weighted; the step loss is the sum over the
        last stage's replicas) and the time split. ``forward_only`` (evaluation): the forwards alone, in
        micro-batch order (GPipe's first half: deadlock-free for any stage sizes), without autograd."""
        if forward_only:
            with torch.no_grad():
                return self._run([(k, m) for k, m in self.actions if k == FWD], inputs, targets, 1.0, True)
        return self._run(self.actions, inputs, targets, loss_scale, False)

    def _run(
        self,
        steps: list[tuple[int, int]],
        inputs: torch.Tensor | None,
        targets: torch.Tensor | None,
        loss_scale: float,
        forward_only: bool,
    ) -> tuple[float, StepTimes]:
        lay, tr = self.layout, self.transport
        s = lay.stage_index
        batch = lay.plan.global_batch
        saved: dict[int, tuple[torch.Tensor | None, torch.Tensor]] = {}
        # each micro-batch's loss stays on the device until the schedule is done: reading it per micro-batch
        # (``float(loss)``) would stop the host for the GPU between every forward and its backward
        losses: list[torch.Tensor] = []
        comm0 = tr.comm_s
        t0 = time.perf_counter()
        for kind, m in steps:
            lo, hi = lay.my_rows(m)
            base = lay.micro[m][0]
            if kind == FWD:
                if lay.first:
                    assert inputs is not None
                    x = inputs[base + lo : base + hi].to(self.device, non_blocking=True)
                    x_in = None
                else:
                    pieces = [
                        tr.recv(b - a, lay.replica_ranks(s - 1, r)[0], 2 * m + FWD, FWD)
                        for r, a, b in self._peers(s - 1, m)
                    ]
                    x = pieces[0] if len(pieces) == 1 else torch.cat(pieces)
                    if x.is_floating_point() and not forward_only:
                        x.requires_grad_(True)
                    x_in = x
                with self.autocast():
                    out = self.stage.forward(x)
                    if lay.last:
                        assert targets is not None
                        y = targets[base + lo : base + hi].to(self.device, non_blocking=True)
                        out = weighted_loss(self.stage.loss(out, y), hi - lo, batch)
                        losses.append(out.detach())
                if not lay.last and lay.tp_rank == 0:
                    for r, a, b in self._peers(s + 1, m):
                        for dst in lay.replica_ranks(s + 1, r):
                            tr.send(out[a - lo : b - lo], dst, 2 * m + FWD, FWD)
                if not forward_only:
                    saved[m] = (x_in, out)
            else:
                x_in, out = saved.pop(m)
                if lay.last:
                    (out * loss_scale if loss_scale != 1.0 else out).backward()
                else:
                    pieces = [
                        tr.recv(b - a, lay.replica_ranks(s + 1, r)[0], 2 * m + BWD, BWD)
                        for r, a, b in self._peers(s + 1, m)
                    ]
                    grad = pieces[0] if len(pieces) == 1 else torch.cat(pieces)
                    torch.autograd.backward(out, grad)
                if x_in is not None and lay.tp_rank == 0:
                    assert x_in.grad is not None
                    for r, a, b in self._peers(s - 1, m):
                        for dst in lay.replica_ranks(s - 1, r):
                            tr.send(x_in.grad[a - lo : b - lo], dst, 2 * m + BWD, BWD)
        tr.flush()
        # one host read for the whole step, summed in micro-batch order as Python floats (as before)
        loss_sum = 0.0
        for value in torch.stack(losses).tolist() if losses else ():
            loss_sum += value
        total = time.perf_counter() - t0
        comm = tr.comm_s - comm0
        return loss_sum, StepTimes(compute_s=total - comm, comm_s=comm)

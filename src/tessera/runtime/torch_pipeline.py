"""Regular pipelines through ``torch.distributed.pipelining`` (GPipe / 1F1B / interleaved 1F1B on ``PipelineStage``s).

Used when the plan is a regular pipeline: TP = 1 and the same ``dp_degree`` d in every stage, i.e. d identical
pipeline replicas, replica ``r`` made of the r-th device of every stage; a world made of exactly the plan's
devices, each replica's ranks increasing along the pipeline (a sorted ``new_group`` then puts stage ``s`` at
group rank ``s``); every stage splitting the batch the same way, each replica's share falling into equal,
non-empty micro-batch pieces (the stage's receive buffers have one shape); and (1F1B) at least as many
micro-batches as stages (pitfall 4). Every other plan keeps Tessera's own transport
(``pipeline.PipelineRunner``), as does ``TESSERA_PIPELINE_IMPL=own``. ``auto`` (default) takes this path for
pure pipelines (d = 1) and interleaved ones; a data-parallel plain pipeline (d > 1, one virtual stage) keeps
Tessera's transport (its gradient-sync overlap and the calibration of its timings were measured there) unless
``TESSERA_PIPELINE_IMPL=torch`` asks for this path.

With d > 1 every rank creates one process group per replica (``dist.new_group`` on every rank, replicas in
order), and each replica's ``PipelineStage``s are built on its own group (stage index and count relative to it).
Replica ``r`` is fed its rows of every micro-batch (``Layout.rows``, the same ranges Tessera's own transport
uses), concatenated in micro-batch order, so torch's ``tensor_split`` into ``micro_batches`` chunks gives back
exactly those rows. The DP gradient sync across replicas of a stage stays Tessera's, after the schedule
(``data_parallel.GradSync``); never DDP (pitfall 3).

A plan with ``virtual_stages`` = v > 1 (interleaved 1F1B) runs only here, through
``ScheduleInterleaved1F1B``: each rank holds one ``PipelineStage`` per chunk of its stage (``Plan.stage_chunks``),
chunk ``c`` of stage ``s`` as virtual stage ``c·S + s`` of ``S·v`` (torch's round-robin placement); a plan this
path cannot run is refused, the ``PlanError`` naming the field at fault (:func:`torch_pipeline_refusal`).

Micro-batches are ``torch.tensor_split`` chunks, the same ranges as ``groups.micro_ranges``; each chunk's loss
is weighted by its share of the global batch (``weighted_loss``) and ``scale_grads=False``, so the gradients
summed over replicas and the losses summed over the last stage's ranks are those of the full batch. The stage
is never DDP-wrapped; gradient sync stays after the step (tied parameters across stages: ``sync_tied``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

from tessera.plan import (
    Plan,
    Refusal,
    Schedule,
    replica_pipeline_ranks,
    torch_schedule_refusal,
)
from tessera.runtime.data_parallel import weighted_loss
from tessera.runtime.groups import Layout
from tessera.runtime.pipeline import StepTimes
from tessera.runtime.stage import StageModel


def torch_pipeline_refusal(plan: Plan) -> Refusal | None:
    """Why ``torch.distributed.pipelining`` cannot run ``plan`` in this process group (None: it can)."""
    refusal = torch_schedule_refusal(plan)
    if refusal is None and (not dist.is_initialized() or dist.get_world_size() != plan.world_size):
        return Refusal("virtual_stages", "the process group must hold exactly the plan's devices")
    return refusal


def torch_pipeline_fits(plan: Plan) -> bool:
    return torch_pipeline_refusal(plan) is None


class _Forward(nn.Module):
    def __init__(self, stage: StageModel, autocast: Callable[[], contextlib.AbstractContextManager]):
        super().__init__()
        self.inner = stage.module
        self._stage = stage
        self._autocast = autocast

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with self._autocast():
            return self._stage.forward(x)


class TorchPipelineRunner:
    """Same interface as ``PipelineRunner.run``; the schedule and the p2p are PyTorch's.

    ``chunks``: the rank's stage, or (interleaved) its chunks in chunk order, each one ``PipelineStage``."""

    def __init__(
        self,
        layout: Layout,
        chunks: list[StageModel],
        device: torch.device,
        autocast: Callable[[], contextlib.AbstractContextManager],
    ) -> None:
        from torch.distributed.pipelining import PipelineStage
        from torch.distributed.pipelining.schedules import (
            Schedule1F1B,
            ScheduleGPipe,
            ScheduleInterleaved1F1B,
        )

        plan = layout.plan
        n, v = plan.n_stages, plan.virtual_stages
        assert len(chunks) == v, (len(chunks), v)
        self.layout = layout
        self.stage = chunks[-1]  # the head's chunk on the last stage: the loss
        self.loss_scale = 1.0
        self._losses: list[torch.Tensor] = []
        # d > 1: one group per pipeline replica, created by every rank in replica order (new_group is
        # collective over the world); this rank's stages talk over its own replica's group
        self.dp_degree = plan.stages[0].dp_degree
        self.group: dist.ProcessGroup | None = None
        self._groups: list[dist.ProcessGroup] = []
        if self.dp_degree > 1:
            for r in range(self.dp_degree):
                group = dist.new_group(list(replica_pipeline_ranks(plan, r)))
                if r == layout.replica:
                    self.group = group
                    self._groups.append(group)
        self.pipe_stages = [
            PipelineStage(_Forward(c, autocast), k * n + layout.stage_index, n * v, device, group=self.group)
            for k, c in enumerate(chunks)
        ]
        self.pipe_stage = self.pipe_stages[0]
        self.schedule: object
        if v > 1:
            self.schedule = ScheduleInterleaved1F1B(
                self.pipe_stages, plan.micro_batches, loss_fn=self._loss, scale_grads=False
            )
        else:
            cls = ScheduleGPipe if plan.schedule == Schedule.GPIPE else Schedule1F1B
            self.schedule = cls(self.pipe_stage, plan.micro_batches, loss_fn=self._loss, scale_grads=False)
        self.batch = plan.global_batch

    def _mine(self, batch: torch.Tensor) -> torch.Tensor:
        """This replica's rows of every micro-batch, in micro-batch order (the whole batch when d = 1)."""
        if self.dp_degree == 1:
            return batch
        lay = self.layout
        pieces = []
        for m, (base, _) in enumerate(lay.micro):
            lo, hi = lay.my_rows(m)
            pieces.append(batch[base + lo : base + hi])
        return torch.cat(pieces)

    def close(self) -> None:
        for g in self._groups:
            dist.destroy_process_group(g)
        self._groups.clear()

    def _loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        loss = weighted_loss(self.stage.loss(output, target), target.shape[0], self.batch)
        return loss * self.loss_scale if self.loss_scale != 1.0 else loss

    def run(
        self,
        inputs: torch.Tensor | None,
        targets: torch.Tensor | None,
        loss_scale: float = 1.0,
        *,
        forward_only: bool = False,
    ) -> tuple[float, StepTimes]:
        """``forward_only``: the schedule's ``eval`` (forwards alone; a torch without it runs the step and
        the caller drops the gradients)."""
        lay = self.layout
        self.loss_scale = loss_scale
        t0 = time.perf_counter()
        losses: list[torch.Tensor] = []
        evaluating = forward_only and hasattr(self.schedule, "eval")
        go = self.schedule.eval if evaluating else self.schedule.step  # type: ignore[attr-defined]
        with torch.no_grad() if evaluating else contextlib.nullcontext():
            if lay.first:
                assert inputs is not None
                go(self._mine(inputs).to(self.pipe_stage.device))
            elif lay.last:
                assert targets is not None
                go(target=self._mine(targets).to(self.pipe_stage.device), losses=losses)
            else:
                go()
        loss = sum(float(x.detach()) for x in losses) / loss_scale if losses else 0.0
        return loss, StepTimes(compute_s=time.perf_counter() - t0, comm_s=0.0)

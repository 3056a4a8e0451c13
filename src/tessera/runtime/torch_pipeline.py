"""Regular pipelines through ``torch.distributed.pipelining`` (GPipe / 1F1B on ``PipelineStage``s).

Used when the plan is a plain pipeline: one device per stage (DP = TP = 1 everywhere), stage ``s`` on global
rank ``s`` of a world made of exactly the plan's devices, equal micro-batches (the stage's receive buffers
have one shape), and (1F1B) at least as many micro-batches as stages (pitfall 4). Every other plan keeps Tessera's own transport (``pipeline.PipelineRunner``), as does
``TESSERA_PIPELINE_IMPL=own``; ``torch`` asks for this path where it applies, ``auto`` (default) too.

A plan with ``virtual_stages`` = v > 1 (interleaved 1F1B) runs only here, through
``ScheduleInterleaved1F1B``: each rank holds one ``PipelineStage`` per chunk of its stage (``Plan.stage_chunks``),
chunk ``c`` of stage ``s`` as virtual stage ``c·S + s`` of ``S·v`` (torch's round-robin placement); a plan this
path cannot run is refused naming ``virtual_stages`` (:func:`torch_pipeline_refusal`).

Micro-batches are ``torch.tensor_split`` chunks, the same ranges as ``groups.micro_ranges``; each chunk's loss
is weighted by its share of the global batch (``weighted_loss``) and ``scale_grads=False``, so gradients and
the reported loss are those of the full batch. The stage is never DDP-wrapped; gradient sync stays after
the step (tied parameters across stages: ``sync_tied``).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

from tessera.plan import Plan, Schedule
from tessera.runtime.data_parallel import weighted_loss
from tessera.runtime.groups import Layout
from tessera.runtime.pipeline import StepTimes
from tessera.runtime.stage import StageModel


def pipeline_impl() -> str:
    value = os.environ.get("TESSERA_PIPELINE_IMPL", "auto").strip().lower() or "auto"
    if value not in ("own", "torch", "auto"):
        raise ValueError(f"TESSERA_PIPELINE_IMPL must be own, torch or auto, got {value!r}")
    return value


def torch_pipeline_refusal(plan: Plan) -> str | None:
    """Why ``torch.distributed.pipelining`` cannot run ``plan`` in this process group (None: it can)."""
    if plan.n_stages < 2:
        return "a single stage is no pipeline"
    if pipeline_impl() == "own":
        return "TESSERA_PIPELINE_IMPL=own asks for Tessera's own transport"
    if any(s.dp_degree != 1 or s.tp_degree != 1 for s in plan.stages):
        return "torch's pipeline stages hold one device each (DP = TP = 1 in every stage)"
    if [s.devices[0].rank for s in plan.stages] != list(range(plan.n_stages)):
        return "stage s must be on global rank s"
    if not dist.is_initialized() or dist.get_world_size() != plan.n_stages:
        return "the process group must hold exactly the plan's devices"
    if plan.schedule not in (Schedule.GPIPE, Schedule.ONE_F_ONE_B):
        return f"no torch schedule for {plan.schedule.value}"
    if plan.global_batch % plan.micro_batches:  # PipelineStage's p2p buffers have one micro-batch shape
        return (
            f"micro-batches must be equal (global_batch {plan.global_batch} is not a multiple of "
            f"micro_batches {plan.micro_batches})"
        )
    if plan.schedule == Schedule.ONE_F_ONE_B and plan.micro_batches < plan.n_stages:
        return "1F1B needs micro_batches >= stages"
    return None


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
        self.pipe_stages = [
            PipelineStage(_Forward(c, autocast), k * n + layout.stage_index, n * v, device)
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
                go(inputs.to(self.pipe_stage.device))
            elif lay.last:
                assert targets is not None
                go(target=targets.to(self.pipe_stage.device), losses=losses)
            else:
                go()
        loss = sum(float(x.detach()) for x in losses) / loss_scale if losses else 0.0
        return loss, StepTimes(compute_s=time.perf_counter() - t0, comm_s=0.0)

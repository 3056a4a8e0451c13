"""One rank's trainer: builds its stage, runs pipeline + DP sync + optimizer step, exposes its state pieces.

The order of a step is fixed: pipeline schedule (forward/backward of every micro-batch, gradients
accumulating) → gradients into the fp32 master copies when the plan keeps bf16 parameters → DP gradient
sync (each bucket started during the replica's last micro-batch backward as soon as its gradients are ready,
DDP's overlap; waited for here) → (fp16) unscale and skip on overflow → (``skip_nonfinite``) skip when any rank's loss or gradient is NaN or
infinite → (``grad_clip_norm``) clip to the global norm → optimizer step at the step's learning rate (the owner
only, under ZeRO) → updated parameters broadcast from their owners.

Clipping by global norm needs every element of the gradient counted exactly once across the world: a rank
counts the parameters its DP group trusts it with (replica 0, the ZeRO owner, or its own FSDP shard), a
TP-replicated one only on TP rank 0, and a parameter tied across stages only on the stage of its canonical
layer; one 1-element SUM all-reduce then gives every rank the same norm, whatever the shares and degrees.

Under interleaved 1F1B (``Plan.virtual_stages`` > 1) a rank builds one ``StageModel`` per chunk of its stage
(``Plan.stage_chunks``), held together as a ``StageChunks``: everything above (masters, optimizer, syncs, norms,
checkpoint pieces, dropout, casts) runs over the union of the chunks, and torch's ``ScheduleInterleaved1F1B``
runs each chunk as its own virtual stage. With one virtual stage the rank's stage is the ``StageModel`` itself.
When every stage has the same DP degree d > 1 (TP = 1), torch's schedule runs d pipeline replicas, each on its
own process group (``torch_pipeline``), and the DP sync above sums the replicas' gradients after it as for any
other plan; ZeRO-2/3 on such a pipeline take Tessera's reduce-to-owner ZeRO-2, not FSDP2.

A non-finite loss is otherwise the caller's to handle (the default, ``fail``: the worker ends the job at that
step); ``skip_nonfinite`` costs one 1-element all-reduce per step, so every rank skips the same steps.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from tessera.nn.dtensor_tp import uses_dtensor
from tessera.nn.optimizers import make_optimizer
from tessera.plan import Plan, PlanError, Precision, fsdp_stage, overlaps_grad_sync
from tessera.runtime.checkpoint import Want
from tessera.runtime.data_parallel import GradSync, assign_owners, broadcast_from_owners, sync_tied
from tessera.runtime.groups import Layout, build_layout
from tessera.runtime.model import ModelFactory, TPSpec, layer_of, tied_groups
from tessera.runtime.pipeline import PipelineRunner
from tessera.runtime.schedule import Training, set_dropout
from tessera.runtime.shards import ShardSpec
from tessera.runtime.stage import ParamEntry, StageChunks, StageModel, build_stage
from tessera.runtime.torch_parallel import (
    as_like,
    dtensor_spec,
    fully_shard_stage,
    is_dtensor,
    local,
    mesh_of,
)
from tessera.runtime.torch_pipeline import (
    TorchPipelineRunner,
    torch_pipeline_refusal,
)
from tessera.runtime.transport import Transport


def clip_coefficient(total_norm: float, max_norm: float) -> float:
    """``torch.nn.utils.clip_grad_norm_``'s factor: max_norm / (norm + 1e-6), at most 1."""
    return min(1.0, max_norm / (total_norm + 1e-6))


@dataclass(frozen=True)
class StepStats:
    step: int
    loss: float  # this rank's weighted share; the step loss is the sum over the last stage's TP-rank-0 ranks
    reports_loss: bool
    iter_s: float
    compute_s: float
    comm_s: float
    skipped: bool = False  # no optimizer update this step (fp16 overflow, or a skipped non-finite step)
    nonfinite: bool = False  # (skip_nonfinite) some rank's loss or gradient was NaN or infinite
    grad_norm: float | None = None  # (grad_clip_norm) the global gradient norm before clipping
    learning_rate: float | None = None  # the rate this step's update used


class _LossScaler:
    """Dynamic loss scaling for fp16, agreed across all ranks (one MAX all-reduce of the overflow flag)."""

    def __init__(self) -> None:
        self.scale = 2.0**16
        self.good_steps = 0

    def unscale_and_check(self, params: list[nn.Parameter]) -> bool:
        inv = 1.0 / self.scale
        found = torch.zeros(1)
        for p in params:
            if p.grad is not None:
                g = local(p.grad)
                g.mul_(inv)
                if not torch.isfinite(g).all():
                    found.fill_(1.0)
        dist.all_reduce(found, op=dist.ReduceOp.MAX)
        if found.item() > 0:
            self.scale /= 2
            self.good_steps = 0
            return False
        self.good_steps += 1
        if self.good_steps % 2000 == 0:
            self.scale *= 2
        return True


class Trainer:
    """Everything one rank holds for one Plan."""

    def __init__(
        self,
        plan: Plan,
        rank: int,
        factory: ModelFactory,
        *,
        seed: int,
        learning_rate: float,
        device: torch.device,
        skip_nonfinite: bool = False,
        training: Training | None = None,
    ) -> None:
        self.plan = plan
        self.training = training or Training(learning_rate=learning_rate)
        self.rank = rank
        self.device = device
        self.skip_nonfinite = skip_nonfinite
        refusal = torch_pipeline_refusal(plan)
        if plan.virtual_stages > 1 and refusal:  # interleaved 1F1B runs on torch's schedule only
            raise PlanError(
                refusal.field,
                f"interleaved 1F1B ({plan.virtual_stages} virtual stages) runs on "
                f"torch.distributed.pipelining, which cannot run this plan: {refusal.reason}",
            )
        # a regular pipeline (TP = 1, the same DP degree in every stage): PyTorch's schedules and p2p
        self.torch_pipeline = refusal is None
        ties = tied_groups(factory, plan.attention.value, plan.recompute.value)
        self.layout: Layout = build_layout(
            plan, rank, ties=tuple(tuple(layer_of(f) for f in g) for g in ties)
        )
        lay = self.layout
        st = lay.stage
        tp = TPSpec(st.tp_degree, lay.tp_rank, tuple(st.ratios())) if st.tp_degree > 1 else None
        # FSDP2 under torch's pipeline schedule is untested: those plans take Tessera's ZeRO-2 (exact)
        self.fsdp = fsdp_stage(plan, st) and not self.torch_pipeline
        shard = None
        if self.fsdp:  # a pretrained model's ZeRO-3 rank reads only its own rows (build_stage)
            shard = functools.partial(
                _shard_stage,
                lay=lay,
                device=device,
                gather_bf16=plan.precision == Precision.BF16,
                reshard_after_forward=plan.zero >= 3,
            )
        # the stage's layer ranges: its own, or (interleaved) one per chunk, each built as a stage of its own
        self.chunks: list[StageModel] = [
            build_stage(
                factory,
                chunk,
                seed,
                tp=tp,
                tp_group=lay.tp_group,
                attention=plan.attention.value,
                recompute=plan.recompute.value,
                device=device,
                ties=ties,
                dtensor_tp=uses_dtensor(st.tp_degree, st.even_tp),
                fully_shard=shard,
                where=f"stages[{lay.stage_index}].tp_degree",
            )
            for chunk in plan.stage_chunks()[lay.stage_index]
        ]
        self.stage: StageModel | StageChunks = (
            self.chunks[0] if len(self.chunks) == 1 else StageChunks.of(self.chunks)
        )
        if self.training.dropout is not None:
            set_dropout(self.stage.module, self.training.dropout)
        self.entries: list[ParamEntry] = self.stage.entries
        self.precision = plan.precision
        self.has_masters = self.precision == Precision.BF16_MASTER
        if self.has_masters:
            self.stage.module.to(torch.bfloat16)
            self.masters = [nn.Parameter(e.param.detach().float().clone()) for e in self.entries]
        else:
            self.masters = [e.param for e in self.entries]
        by_param = {id(e.param): i for i, e in enumerate(self.entries)}
        tie_index = {g[0]: t for t, g in enumerate(ties)}
        self.tied = [self.masters[by_param[id(e.param)]] for e in self.stage.cross_stage]
        self.tied_groups = [lay.tie_groups[tie_index[e.fqn]] for e in self.stage.cross_stage]
        self.tied_specs = [e.spec for e in self.stage.cross_stage]
        tied_ids = {id(p) for p in self.tied}
        dp = st.dp_degree
        self.dp_sharded = {
            id(m) for e, m in zip(self.entries, self.masters, strict=True) if self._fsdp_param(e)
        }
        zero_owned = plan.zero >= 1 and dp > 1 and not self.fsdp
        self.owners = assign_owners(self.masters, dp) if zero_owned else None
        mine = [p for p in self.masters if self.owners is None or self.owners[id(p)] == lay.replica]
        self.optimizer = make_optimizer(plan.optimizer, mine, learning_rate, self.training.weight_decay)
        self.learning_rate = learning_rate
        self.norm_counted = [
            self._counts_for_norm(e, m) for e, m in zip(self.entries, self.masters, strict=True)
        ]
        self.sync = GradSync(
            [p for p in self.masters if id(p) not in tied_ids and id(p) not in self.dp_sharded],
            lay.dp_group,
            lay.dp_ranks,
            owners=self.owners,
            reduce_to_owner=plan.zero >= 2,
            overlap=overlaps_grad_sync(plan.precision),  # not bf16-master: its masters' grads come after
        )
        # backward passes this replica runs per step (micro-batches where it holds rows): the last one's
        # gradients are reduced while it runs
        self.backward_passes = sum(
            1 for m in range(plan.micro_batches) if lay.my_rows(m)[0] < lay.my_rows(m)[1]
        )
        self.scaler = _LossScaler() if self.precision == Precision.FP16 else None
        self.transport = Transport(device)
        self.runner: PipelineRunner | TorchPipelineRunner
        if self.torch_pipeline:
            self.runner = TorchPipelineRunner(lay, self.chunks, device, self._autocast)
        else:
            self.runner = PipelineRunner(lay, self.chunks[0], self.transport, device, self._autocast)

    def _counts_for_norm(self, e: ParamEntry, m: nn.Parameter) -> bool:
        """Whether this rank's gradient piece of ``e`` enters the global norm (each element exactly once)."""
        if not self._holds(m):
            return False
        if e.spec.replicated and self.layout.tp_rank != 0:
            return False
        if any(c.fqn == e.fqn for c in self.stage.cross_stage):
            return self.plan.stage_of_layer(layer_of(e.fqn)) == self.layout.stage_index
        return True

    def _fsdp_param(self, e: ParamEntry) -> bool:
        """Sharded over the DP group by FSDP2 (its gradient is reduce-scattered by FSDP, not by GradSync)."""
        return self.fsdp and is_dtensor(e.param)

    # ------------------------------------------------------------------ step
    def _autocast(self) -> contextlib.AbstractContextManager:
        """AMP's op-level precision (fp32 norms, softmax and loss). Under FSDP2 the sharded layers already
        compute on bf16 gathered parameters (``MixedPrecisionPolicy``): autocast's weight cache is turned
        off, so no bf16 copy of any weight outlives the op that cast it."""
        name = self.precision.autocast_dtype_name
        if name is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=getattr(torch, name), cache_enabled=not self.fsdp)

    def forward_backward(
        self, inputs: torch.Tensor | None, targets: torch.Tensor | None
    ) -> tuple[float, float, float]:
        """Pipeline + gradient sync, no optimizer step: (loss share, compute s, comm s)."""
        for p in self.masters:
            p.grad = None
        for e in self.entries:
            e.param.grad = None
        scale = self.scaler.scale if self.scaler else 1.0
        self.sync.arm(self.backward_passes)
        loss, times = self.runner.run(inputs, targets, loss_scale=scale)
        if self.has_masters:
            for e, m in zip(self.entries, self.masters, strict=True):
                m.grad = None if e.param.grad is None else e.param.grad.float()
        t0 = time.perf_counter()
        if self.tied:
            sync_tied(self.tied, self.tied_specs, self.tied_groups, self.layout.tp_rank)
        self.sync()
        return loss, times.compute_s, times.comm_s + time.perf_counter() - t0

    def step(
        self,
        step: int,
        inputs: torch.Tensor | None,
        targets: torch.Tensor | None,
        *,
        capture_grads: bool = False,
        learning_rate: float | None = None,
    ) -> StepStats:
        """One optimizer step; ``learning_rate`` (the schedule's rate of this step) replaces the current one."""
        t0 = time.perf_counter()
        loss, compute_s, comm_s = self.forward_backward(inputs, targets)
        ok = self.scaler.unscale_and_check(self.masters) if self.scaler else True
        nonfinite = False
        if self.skip_nonfinite:
            t_check = time.perf_counter()
            nonfinite = self._any_nonfinite(loss)
            comm_s += time.perf_counter() - t_check
            ok = ok and not nonfinite
        grad_norm = None
        if ok and self.training.grad_clip_norm is not None:  # ``ok`` agrees on every rank: so does the call
            t_clip = time.perf_counter()
            grad_norm = self.clip_grads(self.training.grad_clip_norm)
            comm_s += time.perf_counter() - t_clip
        if capture_grads:  # the synchronized full-batch gradient the optimizer applies (clipped, if asked)
            self.captured_grads = self.grad_pieces()
        if learning_rate is not None and learning_rate != self.learning_rate:
            for group in self.optimizer.param_groups:
                group["lr"] = learning_rate
            self.learning_rate = learning_rate
        t1 = time.perf_counter()
        if ok:
            self.optimizer.step()
        compute_s += time.perf_counter() - t1
        t2 = time.perf_counter()
        if self.owners is not None:
            broadcast_from_owners(self.masters, self.owners, self.layout.dp_group, self.layout.dp_ranks)  # type: ignore[arg-type]
        comm_s += time.perf_counter() - t2
        if self.has_masters:
            with torch.no_grad():
                for e, m in zip(self.entries, self.masters, strict=True):
                    e.param.copy_(m)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        lay = self.layout
        return StepStats(
            step=step,
            loss=loss,
            reports_loss=lay.last and lay.tp_rank == 0,
            iter_s=time.perf_counter() - t0,
            compute_s=compute_s,
            comm_s=comm_s,
            skipped=not ok,
            nonfinite=nonfinite,
            grad_norm=grad_norm,
            learning_rate=self.learning_rate,
        )

    def global_grad_norm(self) -> float:
        """The L2 norm of the whole model's gradient (fp32 masters), the same on every rank."""
        sq = torch.zeros(1, dtype=torch.float64, device=self.device)
        for m, counted in zip(self.masters, self.norm_counted, strict=True):
            if counted and m.grad is not None:
                sq += local(m.grad).detach().double().pow(2).sum()
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(sq)
        return math.sqrt(float(sq.item()))

    def clip_grads(self, max_norm: float) -> float:
        """Scale every gradient by ``clip_coefficient`` of the global norm; returns the norm before."""
        norm = self.global_grad_norm()
        coef = clip_coefficient(norm, max_norm)
        if coef < 1.0:
            for m in self.masters:
                if m.grad is not None:
                    local(m.grad).mul_(coef)
        return norm

    def evaluate(self, inputs: torch.Tensor | None, targets: torch.Tensor | None) -> float:
        """This rank's share of the loss on one batch, in eval mode (no dropout), leaving no gradient and no
        update behind: the pipeline's forwards alone, without autograd (about a third of a training step's
        compute), under every plan kind."""
        module = self.stage.module
        was_training = module.training
        module.eval()
        try:
            loss, _ = self.runner.run(inputs, targets, forward_only=True)
        finally:
            module.train(was_training)
            for p in self.masters:
                p.grad = None
            for e in self.entries:
                e.param.grad = None
        return loss

    def _any_nonfinite(self, loss: float) -> bool:
        """Whether any rank's loss share or gradient is NaN or infinite (all ranks get the same answer)."""
        bad = self.layout.last and not math.isfinite(loss)
        if not bad:
            bad = any(
                m.grad is not None and not bool(torch.isfinite(local(m.grad)).all()) for m in self.masters
            )
        flag = torch.tensor([1.0 if bad else 0.0], device=self.device)  # NCCL reduces on the GPU
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item() > 0)

    # ---------------------------------------------------------------- pieces
    def _holds(self, p: nn.Parameter) -> bool:
        """Whether this rank's copy of ``p`` (grad, optimizer state) is authoritative for its DP group."""
        if self.owners is not None:
            return self.owners[id(p)] == self.layout.replica
        return self.layout.replica == 0 or id(p) in self.dp_sharded

    def grad_pieces(self) -> list[tuple[str, ShardSpec, torch.Tensor]]:
        return [
            (e.fqn, e.spec, local(m.grad).detach().float().cpu())
            for e, m in zip(self.entries, self.masters, strict=True)
            if m.grad is not None and self._holds(m)
        ]

    def param_pieces(self) -> list[tuple[str, ShardSpec, torch.Tensor]]:
        """Replica 0's pieces, plus every replica's shard of FSDP-sharded parameters (no collective)."""
        return [
            (e.fqn, e.spec, local(m).detach().cpu().clone())
            for e, m in zip(self.entries, self.masters, strict=True)
            if self.layout.replica == 0 or id(m) in self.dp_sharded
        ]

    def optim_pieces(self) -> list[tuple[str, ShardSpec, torch.Tensor]]:
        """Optimizer state as pieces keyed ``{fqn}::{state name}`` (scalars replicated)."""
        out = []
        for e, m in zip(self.entries, self.masters, strict=True):
            if not self._holds(m):
                continue
            for k, v in self.optimizer.state.get(m, {}).items():
                if not torch.is_tensor(v):
                    v = torch.tensor(v)
                spec = e.spec if v.shape == m.shape else ShardSpec(tuple(v.shape))
                out.append((f"{e.fqn}::{k}", spec, local(v).detach().cpu().clone()))
        return out

    @property
    def _device_steps(self) -> bool:
        return any(g.get("fused") or g.get("capturable") for g in self.optimizer.param_groups)

    def checkpoint_want(self) -> Want:
        """This rank's pieces of a checkpoint: its shard of every parameter it holds, and the optimizer state
        of those whose state it owns (its ZeRO share) — DCP reads only the saved chunks overlapping them."""
        mine = (e.fqn for e, m in zip(self.entries, self.masters, strict=True) if self._owns_state(m))
        return Want({e.fqn: e.spec for e in self.entries}, frozenset(mine))

    def _owns_state(self, m: nn.Parameter) -> bool:
        return self.owners is None or self.owners[id(m)] == self.layout.replica

    def load_local(self, params: dict[str, torch.Tensor], optim: dict[str, torch.Tensor]) -> None:
        """Load this rank's pieces (``checkpoint.load(path, self.checkpoint_want())``) — any plan's checkpoint."""
        with torch.no_grad():
            for e, m in zip(self.entries, self.masters, strict=True):
                if e.fqn not in params:
                    raise KeyError(f"checkpoint has no parameter {e.fqn}")
                local(m).copy_(params[e.fqn].to(m.dtype).to(m.device))
                if m is not e.param:
                    local(e.param).copy_(local(m))
                if not self._owns_state(m):
                    continue
                state = {}
                prefix = f"{e.fqn}::"
                for key, piece in optim.items():
                    if key.startswith(prefix):
                        name = key[len(prefix) :]
                        if name == "step":  # on the device for the fused kernel, a host scalar otherwise
                            state[name] = piece.to(m.device) if self._device_steps else piece
                        elif piece.dim() > 0 and piece.shape == local(m).shape:  # read with the param's spec
                            state[name] = as_like(m, piece.to(m.device))
                        else:
                            state[name] = piece.to(m.device)
                if state:
                    self.optimizer.state[m] = state

    def close(self) -> None:
        self.sync.close()
        if isinstance(self.runner, TorchPipelineRunner):
            self.runner.close()
        self.layout.destroy()


def _shard_stage(
    stage: StageModel,
    lay: Layout,
    device: torch.device,
    *,
    gather_bf16: bool = False,
    reshard_after_forward: bool = True,
) -> None:
    """``fully_shard`` the stage over its DP group and point its entries at the new DTensor parameters.

    ``gather_bf16`` (bf16 AMP): FSDP2's ``MixedPrecisionPolicy`` — bf16 all-gathers, fp32 reduce-scatters,
    fp32 shards for the optimizer. Parameters tied to another stage stay unsharded (``ignored_params``) and
    fp32: their gradient is summed over the tie group by hand, as in every other plan."""
    assert lay.dp_group is not None
    module = stage.module
    paths = {id(p): n for n, p in module.named_parameters()}
    entry_paths = [paths[id(e.param)] for e in stage.entries]
    ignored = {e.param for e in stage.cross_stage}
    fully_shard_stage(
        module,
        mesh_of(lay.dp_group, device, "dp"),
        ignored,
        param_dtype=torch.bfloat16 if gather_bf16 else None,
        reshard_after_forward=reshard_after_forward,
    )
    entries = []
    for e, path in zip(stage.entries, entry_paths, strict=True):
        p = module.get_parameter(path)
        spec = dtensor_spec(p) if is_dtensor(p) else e.spec  # type: ignore[arg-type]
        entries.append(ParamEntry(e.fqn, p, spec))
    stage.entries = entries
    new_by_fqn = {e.fqn: e.param for e in entries}
    stage.cross_stage = [ParamEntry(e.fqn, new_by_fqn[e.fqn], e.spec) for e in stage.cross_stage]
    stage.root_forward = True

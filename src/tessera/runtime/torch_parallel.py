"""Where PyTorch already does the job: DTensor TP for even splits, FSDP2 for ZeRO-2/3 in a uniform DP group.

Both replace a module's parameters by DTensor parameters; the rest of the runtime keeps working on *local*
tensors (``local``), with a ``ShardSpec`` describing where each local shard lives in the full tensor
(``dtensor_spec``), so checkpoints stay full state keyed by layer FQN and resume under any other plan.

* Even TP (``Stage.even_tp``): ``parallelize_module`` on each transformer block — q/k/v and fc_in/gate/up
  ``ColwiseParallel``, proj and fc_out/down ``RowwiseParallel``. The zoo reshapes attention with
  ``view(B, T, -1, d)`` (pitfall 9), so a block built with full shapes runs on its local heads. Embeddings
  and heads (no DTensor plan) run as Tessera's own vocab-parallel shards, as in uneven stages.
* ZeRO-3 / ZeRO-2: ``fully_shard`` per block + root over the stage's DP group (ZeRO-2 without
  ``reshard_after_forward``); gloo has no PREMUL_SUM, so every
  sharded module gets ``set_gradient_divide_factor(1.0)`` and ``set_force_sum_reduction_for_comms(True)``
  (pitfall 5): the reduction is a plain SUM of the already loss-weighted gradients (uneven shares stay exact).
  Under bf16 AMP a ``MixedPrecisionPolicy`` gathers bf16 parameters and reduces fp32 gradients.

``TESSERA_TP_IMPL=own|dtensor|auto`` (default auto = DTensor for even splits) forces one implementation.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor, Replicate, Shard

from tessera.runtime.shards import ShardSpec


def local(t: torch.Tensor) -> torch.Tensor:
    """The tensor this rank holds: a DTensor's local shard, anything else itself."""
    return t.to_local() if isinstance(t, DTensor) else t


def is_dtensor(t: torch.Tensor | None) -> bool:
    return isinstance(t, DTensor)


def _chunk_range(n: int, parts: int, index: int) -> tuple[int, int]:
    size = -(-n // parts)  # torch.chunk: ceil-sized chunks, the last ones short or empty
    return min(n, index * size), min(n, (index + 1) * size)


def dtensor_spec(p: DTensor, inner: ShardSpec | None = None) -> ShardSpec:
    """Where ``p.to_local()`` lives in the full tensor (1-D mesh, Shard(d) or Replicate)."""
    (placement,) = p.placements
    full = tuple(p.shape)
    if isinstance(placement, Replicate):
        return ShardSpec(full)
    assert isinstance(placement, Shard), placement
    mesh = p.device_mesh
    a, b = _chunk_range(full[placement.dim], mesh.size(), mesh.get_local_rank())
    return ShardSpec(full, placement.dim, ((a, b),))


def mesh_of(group: dist.ProcessGroup, device: torch.device, kind: str):
    """A 1-D mesh over ``group``, named after the group: DTensor caches specs by mesh equality, and an
    unnamed mesh over the same ranks as a destroyed group of an earlier job compares equal to its mesh."""
    from torch.distributed.device_mesh import DeviceMesh

    name = f"{kind}-{group.group_name}"
    return DeviceMesh.from_group(group, device_type=device.type, mesh_dim_names=(name,))


def parallelize_block(layer: nn.Module, plan: dict[str, object], mesh) -> None:
    from torch.distributed.tensor.parallel import parallelize_module

    parallelize_module(layer, mesh, plan)  # type: ignore[arg-type]


def fully_shard_stage(
    module: nn.Module,
    mesh,
    ignored: set[nn.Parameter],
    *,
    param_dtype: torch.dtype | None = None,
    reshard_after_forward: bool = True,
) -> None:
    """FSDP2 per layer (those sharing no parameter with another layer or ``ignored``) + root.

    ``param_dtype`` (bf16 under bf16 AMP) is FSDP2's ``MixedPrecisionPolicy``: parameters are all-gathered
    in that dtype and the layers compute on them, while gradients are reduce-scattered in fp32 into the fp32
    shards the optimizer steps — PyTorch's FSDP as it runs, half the gather bytes of fp32, and no bf16 copy
    of a gathered fp32 weight left in autocast's cache until the forward ends. ``reshard_after_forward``
    True frees each unit's gathered parameters after its forward (ZeRO-3; gathered again in backward);
    False keeps them to the end of backward (ZeRO-2). The root unit does the same (as the memory trace
    models it).
    Each layer prefetches the next one's all-gather in forward and the previous one's in backward, so the
    gathers overlap the neighbour's compute (FSDP2's explicit prefetch)."""
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32 if param_dtype else None)
    layers: nn.ModuleList = module.layers  # type: ignore[assignment]
    owners: dict[int, int] = {}
    for j, layer in enumerate(layers):
        for p in layer.parameters():
            owners[id(p)] = -1 if owners.get(id(p), j) != j else j
    ignored_ids = {id(p) for p in ignored}
    sharded: list[FSDPModule] = []
    for j, layer in enumerate(layers):
        ps = list(layer.parameters())
        if ps and all(owners[id(p)] == j and id(p) not in ignored_ids for p in ps):
            sharded.append(
                fully_shard(layer, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=mp)
            )
    fully_shard(
        module,
        mesh=mesh,
        reshard_after_forward=reshard_after_forward,
        ignored_params=set(ignored) or None,
        mp_policy=mp,
    )
    for a, b in zip(sharded, sharded[1:], strict=False):
        a.set_modules_to_forward_prefetch([b])  # type: ignore[list-item]
        b.set_modules_to_backward_prefetch([a])  # type: ignore[list-item]
    for m in module.modules():
        if isinstance(m, FSDPModule):
            m.set_gradient_divide_factor(1.0)
            m.set_force_sum_reduction_for_comms(True)


def as_like(param: torch.Tensor, local_value: torch.Tensor) -> torch.Tensor:
    """``local_value`` (this rank's shard) in the form of ``param``: a DTensor when ``param`` is one."""
    if not isinstance(param, DTensor):
        return local_value
    return DTensor.from_local(
        local_value,
        param.device_mesh,
        param.placements,
        run_check=False,
        shape=param.shape,
        stride=param.stride(),
    )

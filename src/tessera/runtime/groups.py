"""Where a rank sits in a Plan, its process groups, and which samples of each micro-batch it computes.

Micro-batch ``m`` is a contiguous range of the global batch, the same for every stage — that is what lets
stages with different DP degrees exchange it. Inside a stage, each micro-batch is cut into contiguous row
ranges, one per DP replica, so that over a step replica ``r`` gets exactly ``batch_shares[r]`` samples and,
micro-batch by micro-batch, as close to its share as integers allow (a replica may get none of a small
micro-batch and then simply skips it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch.distributed as dist

from tessera.plan import Plan, Stage, micro_ranges, replica_rows


def overlaps(mine: tuple[int, int], theirs: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(their replica, lo, hi) for every non-empty intersection of ``mine`` with their row ranges."""
    out = []
    for r, (a, b) in enumerate(theirs):
        lo, hi = max(a, mine[0]), min(b, mine[1])
        if lo < hi:
            out.append((r, lo, hi))
    return out


@dataclass
class Layout:
    """One rank's view of the Plan: its stage/replica/TP position, groups and row ranges."""

    plan: Plan
    rank: int
    stage_index: int
    replica: int
    tp_rank: int
    micro: tuple[tuple[int, int], ...]
    rows: tuple[tuple[tuple[tuple[int, int], ...], ...], ...]  # rows[stage][replica][micro]
    dp_group: dist.ProcessGroup | None = None  # same stage, same TP rank, all replicas
    tp_group: dist.ProcessGroup | None = None  # same stage, same replica, all TP ranks
    dp_ranks: tuple[int, ...] = ()
    tp_ranks: tuple[int, ...] = ()
    tie_groups: dict[int, dist.ProcessGroup] = field(default_factory=dict)  # tie index -> group, if a member
    _groups: list[dist.ProcessGroup] = field(default_factory=list, repr=False)

    @property
    def stage(self) -> Stage:
        return self.plan.stages[self.stage_index]

    @property
    def first(self) -> bool:
        return self.stage_index == 0

    @property
    def last(self) -> bool:
        return self.stage_index == self.plan.n_stages - 1

    def my_rows(self, m: int) -> tuple[int, int]:
        return self.rows[self.stage_index][self.replica][m]

    def replica_ranks(self, stage: int, replica: int) -> tuple[int, ...]:
        return tuple(d.rank for d in self.plan.stages[stage].replica(replica))

    def destroy(self) -> None:
        for g in self._groups:
            dist.destroy_process_group(g)
        self._groups.clear()


def build_layout(
    plan: Plan, rank: int, *, ties: tuple[tuple[int, ...], ...] = (), make_groups: bool = True
) -> Layout:
    """Every rank must call this with the same plan: ``new_group`` is collective over the whole world.

    ``ties`` lists, per tied parameter, the model layers holding a member; when they fall on several stages
    the ranks of those stages get a group to sum the parameter's gradient over.
    """
    stage_index, replica, tp_rank = plan.stage_of_rank(rank)
    micro = micro_ranges(plan.global_batch, plan.micro_batches)
    rows = tuple(replica_rows(s.shares(plan.global_batch), micro) for s in plan.stages)
    layout = Layout(plan, rank, stage_index, replica, tp_rank, micro, rows)
    for i, s in enumerate(plan.stages):
        ranks = [d.rank for d in s.devices]
        for t in range(s.tp_degree):
            members = tuple(ranks[r * s.tp_degree + t] for r in range(s.dp_degree))
            _maybe_group(layout, members, "dp", make_groups, i == stage_index and t == tp_rank)
        for r in range(s.dp_degree):
            members = tuple(ranks[r * s.tp_degree : (r + 1) * s.tp_degree])
            _maybe_group(layout, members, "tp", make_groups, i == stage_index and r == replica)
    for t, layers in enumerate(ties):
        stages = sorted({plan.stage_of_layer(layer) for layer in layers})  # interleaved: by its chunks
        if len(stages) < 2 or not make_groups:
            continue
        members = [d.rank for i in stages for d in plan.stages[i].devices]
        group = dist.new_group(members)
        if stage_index in stages:
            layout.tie_groups[t] = group
            layout._groups.append(group)
    return layout


def _maybe_group(layout: Layout, members: tuple[int, ...], kind: str, make: bool, mine: bool) -> None:
    if mine:
        setattr(layout, f"{kind}_ranks", members)
    if len(members) < 2 or not make:
        return
    group = dist.new_group(list(members))
    if mine:
        setattr(layout, f"{kind}_group", group)
        layout._groups.append(group)

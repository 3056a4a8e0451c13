"""BestPerf for all jobs of a round at once: the throughput LP over the Cells of queued and running jobs.

Crius explores, per scheduled job, the choices of placing it and rescaling running jobs, and keeps the one of
maximum cluster throughput (Algorithm 1 lines 14-20). Scored one job at a time this is myopic under contention,
so it is solved for all jobs together, as Crius suggests solvers may (§6): :mod:`tessera.scheduler.cell_lp`. A
running job's own Cell is worth the speed measured on it where that beats the estimate
(:meth:`RoundState.held_cell`), its other Cells their estimated normalized throughput less the restart they cost
(:meth:`RoundState.penalty`, with hysteresis), and it keeps some Cell. Jobs restarting or past their restart budget
stay as they are. The LP's duals price each GPU type for the round (:attr:`RoundState.prices`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tessera.scheduler import cell_lp
from tessera.scheduler.policies.tessera.cells import Cell
from tessera.scheduler.policies.tessera.order import remaining_on, set_priority_weights, weight, weight_bucket
from tessera.scheduler.policies.tessera.round import RoundState
from tessera.scheduler.state import JobState


@dataclass
class Owner:
    """The jobs one LP group stands for — queued ones in queue order, or running ones on the same GPUs, longest
    first — and the Cells its options are (for running ones, the Cell held first)."""

    members: list[JobState]
    cells: list[Cell]
    running: bool
    work: float = 0.0  # running: the work the median member (its restart penalty's judge) still has


@dataclass
class Plan:
    """The LP's outcome for one round: new Cells of running jobs (changes only, with their worth at the GPU
    prices) and the Cells each queued group gets (best first)."""

    running: dict[int, tuple[float, list[Cell]]]  # job → (worth of the change, new Cell and fallbacks)
    queued: dict[int, list[Cell]]  # LP group → its Cells
    group_of: dict[int, int]  # queued job → its LP group


def plan(r: RoundState, queue: list[JobState]) -> Plan | None:
    """Solve the round's throughput LP over the queued jobs and the running jobs that may change; jobs that may
    not change (all of them when the round may rescale none) only take their GPUs off the capacity.
    Interchangeable jobs share one LP group: same job key, user priority and weight (to an octave);
    running ones also the same GPUs held, whether they are settling (hysteresis) and remaining time within a
    factor of two (which set their restart penalty). Sets the round's GPU prices. None: nothing to decide."""
    ctx = r.ctx
    set_priority_weights(r, queue)
    types = ctx.cluster.types
    cap = ctx.capacity_by_type()
    capacity = np.array([float(cap.get(t, 0)) for t in types])
    queued: dict[tuple, list[JobState]] = {}
    for js in queue:
        inf = r.info(js.job)
        if inf.lp_cells:
            queued.setdefault((inf.key, js.job.priority, weight_bucket(r, js)), []).append(js)
    owners = [Owner(m, r.info(m[0].job).lp_cells, False) for m in queued.values()]
    owners += _running_owners(r, capacity)
    if not owners:
        return None
    groups = _lp_groups(r, owners, types)
    # by columns: the last round's prices seed the solve's column generation (cell_lp.maximize)
    columns = r.pol.solves_by_columns(ctx.cluster.total_gpus)
    sol = cell_lp.solve(groups, np.maximum(capacity, 0.0), columns=columns, hint=r.pol.price_hint)
    if sol is None:
        return None
    if columns:
        r.pol.price_hint = sol.prices
    r.prices = {t: float(p) for t, p in zip(types, sol.prices, strict=True)}
    return _read_plan(r, sol, owners)


def _running_owners(r: RoundState, capacity: np.ndarray) -> list[Owner]:
    """Running jobs that may change, grouped (longest first in each group); the GPUs of those that may not are
    taken off ``capacity`` (in place). One pass over thousands of running jobs a round at scale: the work a job
    still has is read once and seeds the round's memo of its remaining time (:func:`.order.remaining`, the same
    figures it would compute)."""
    ctx = r.ctx
    now = ctx.now_s
    frozen = r.rescale_limit() <= 0
    col = {t: k for k, t in enumerate(ctx.cluster.types)}
    running: dict[tuple, list[JobState]] = {}
    left_of: dict[int, float] = {}  # job → work it still has (read once: the sort below reads it again)
    info = r.pol.catalog.info
    alloc = ctx.allocations
    memo = r.remaining
    window = r.settle_window_s  # :meth:`RoundState.settling`, read once for the loop
    log2 = math.log2
    touched, may_restart = r.touched, r.may_restart
    for js in ctx.running:
        jid = js.job_id
        a = alloc.get(jid)
        if a is None:
            continue
        # RoundState.movable, inlined: this runs for every running job
        if frozen or jid in touched or js.paused_until_s > now or not may_restart(js):
            for t, n in a.gpus:
                capacity[col[t]] -= n
            continue
        inf = info(ctx, js.job)
        rate = js.rate_iters_per_s or r.held_cell(js, a).rate
        rem = left_of[jid] = js.remaining_at(now)
        if jid not in memo:  # order.remaining's memo, from the work just read
            memo[jid] = remaining_on(inf, rem)
        left = int(log2(max(rem / max(rate, 1e-12), 1.0)))
        key = (inf.key, js.job.priority, a.gpus, left, weight_bucket(r, js), now - js.last_change_s < window)
        group = running.get(key)
        if group is None:
            running[key] = [js]
        else:
            group.append(js)
    owners = []
    for members in running.values():
        if len(members) > 1:
            members.sort(key=lambda js: (-left_of[js.job_id], js.job_id))  # longest first: moved first
        a = alloc[members[0].job_id]
        cur = r.held_cell(members[0], a)
        rep = members[len(members) // 2]
        owners.append(
            Owner(members, [cur, *info(ctx, members[0].job).lp_others(a.gpus)], True, left_of[rep.job_id])
        )
    return owners


def _lp_groups(r: RoundState, owners: list[Owner], types: tuple[str, ...]) -> list[cell_lp.Group]:
    """The owners' LP groups: each Cell's weighted normalized throughput; for running jobs every Cell but the
    one held less the restart it costs (judged on the group's median member; ``settle_factor`` × the restart
    while the group is settling). The running groups' values — hundreds of groups a round at scale — are
    figured in one numpy pass over all their Cells, with the same operations per Cell as one group at a time
    (:func:`_move_values`), so the same figures to the last bit."""
    out: list[cell_lp.Group | None] = [None] * len(owners)
    moving: list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]] = []
    # per running owner: the held Cell's norm, the work left, the restart and relaunch charged, the weight
    scalars: list[tuple[float, float, float, float, float]] = []
    relaunches: list[
        np.ndarray
    ] = []  # per running owner: which other Cells share no GPU type with the held one
    for g, o in enumerate(owners):
        inf = r.info(o.members[0].job)
        rep = o.members[len(o.members) // 2]
        w = weight(r, rep)
        if not o.running:
            norm, _, gpus = inf.lp_arrays(types)
            out[g] = cell_lp.Group(len(o.members), w * norm, gpus)
            continue
        cur = o.cells[0]
        norm, rate, gpus, fresh = inf.lp_moves(types, cur.gpus)
        moving.append((g, len(o.members), norm, rate, gpus))
        k = r.restart_weight(rep)
        scalars.append((cur.norm, o.work, r.restart_s(rep) * k, r.relaunch_s(rep) * k, w))
        relaunches.append(fresh)
    if moving:
        values = _move_values([m[2] for m in moving], [m[3] for m in moving], relaunches, np.array(scalars).T)
        at = 0
        for g, count, norm, _, gpus in moving:
            n = len(norm) + 1
            out[g] = cell_lp.Group(count, values[at : at + n], gpus, True)
            at += n
    return out  # type: ignore[return-value]  # every owner's group is set above


def _move_values(
    norms: list[np.ndarray], rates: list[np.ndarray], relaunches: list[np.ndarray], scalars: np.ndarray
) -> np.ndarray:
    """Running groups' option values, one group after another: the held Cell's normalized throughput, then each
    other Cell's over the time it would take (left = work ÷ rate) less the move's cost c — the relaunch where
    ``relaunches`` marks the Cell (no worker kept), else the restart: norm · left ÷ (c + left); all × the group's
    weight. ``scalars``: per group its held norm, work, restart, relaunch and weight (rows)."""
    held, work, restart, relaunch, w = scalars
    sizes = np.array([len(n) for n in norms], dtype=np.int64)
    left = np.repeat(work, sizes) / np.concatenate(rates)  # the seconds each other Cell would take
    cost = np.where(np.concatenate(relaunches), np.repeat(relaunch, sizes), np.repeat(restart, sizes))
    moves = np.concatenate(norms) * left / (cost + left)
    heads = np.concatenate([[0], np.cumsum(sizes + 1)[:-1]])  # where each group's held Cell goes
    values = np.empty(len(moves) + len(sizes))
    body = np.ones(len(values), dtype=bool)
    body[heads] = False
    values[heads] = held
    values[body] = moves
    values *= np.repeat(w, sizes + 1)
    return values


def _read_plan(r: RoundState, sol: cell_lp.Solution, owners: list[Owner]) -> Plan:
    """The LP's rounded counts as Cells: queued groups get theirs best first; in a running group the members that
    change are the longest-running ones (a restart costs them least), best new Cell first, with the group's other
    Cells the LP used as fallbacks should it not place."""
    out = Plan({}, {}, {})
    for g, (o, counts) in enumerate(zip(owners, sol.counts, strict=True)):
        if not o.running:
            chosen = [c for c, k in zip(o.cells, counts, strict=True) for _ in range(k)]
            out.queued[g] = sorted(chosen, key=lambda c: -c.norm)
            out.group_of.update((js.job_id, g) for js in o.members)
            continue
        if not any(counts[1:]):
            continue  # every member keeps its Cell
        chosen = [c for c, k in zip(o.cells, counts, strict=True) for _ in range(k)]
        w = weight(r, o.members[0])
        used = [c for c, x in zip(o.cells[1:], sol.shares[g][1:], strict=True) if x > 1e-6]
        moves = sorted((c for c in chosen if c is not o.cells[0]), key=lambda c: -r.value(c, w))
        for js, new in zip(o.members, moves, strict=False):
            gain = r.value(new, w) - w * r.penalty(js, new, o.cells[0].gpus) - r.value(o.cells[0], w)
            alts = sorted((c for c in used if c is not new), key=lambda c: -r.value(c, w))
            out.running[js.job_id] = (gain, [new, *alts])
    return out


__all__ = ["Owner", "Plan", "plan"]

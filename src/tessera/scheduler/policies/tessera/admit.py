"""Admission of queued jobs: the LP's Cells, then backfill, opportunistic execution and shortest-remaining
preemption.

* **LP admission** (VirtualAlloc, Crius Algorithm 1 line 19): queued jobs in queue order take their LP group's
  Cells, the first in order its best.
* **Backfill**: a job the LP left out starts on free GPUs with its best-valued Cell that places now and is worth its
  GPUs' prices (a mixed Cell only when no single type places).
* **Opportunistic execution** (Crius §6.1): a job that has waited a round may suspend the jobs launched while it
  waited — started after it began waiting, on fewer GPUs than its smallest Cell (a large job's GPUs taken
  piecemeal: one large job does not suspend another) — once that frees its smallest Cell, when that Cell is worth
  its GPUs at the round's prices; not jobs ``preempt_factor`` × shorter than it. A job just suspended has only
  begun to wait, so suspensions do not chain.
* **Shortest-remaining preemption** (SRPT / Tiresias-style): a queued job that finds no room may suspend running
  jobs of a lower user priority, or of its own needing more than ``preempt_factor`` × its GPU-seconds, lowest
  priority and longest first, once that frees its smallest Cell. Against thrashing, a victim must have run a round
  and twice its restart time since its last change and be within its restart budget.

Both preemption rules suspend through :meth:`SchedulingContext.preempt_until_fits` (suspend until the Cell fits,
else undo), which explains every suspension by the job it makes room for.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable

from tessera.scheduler.policies.tessera.cells import Cell
from tessera.scheduler.policies.tessera.lp import Plan
from tessera.scheduler.policies.tessera.order import priority, remaining, weight
from tessera.scheduler.policies.tessera.round import RoundState, Victims
from tessera.scheduler.policy import fmt_s
from tessera.scheduler.state import JobState


def admit(r: RoundState, queue: list[JobState], plan: Plan | None) -> list[int]:
    """Queued jobs in order: first each takes its group's best remaining LP Cell; then those left try free GPUs
    (a Cell worth its prices), opportunistic execution and shortest-remaining preemption. Returns the jobs
    started this round."""
    ctx = r.ctx
    admitted: list[int] = []
    given = {k: list(v) for k, v in plan.queued.items()} if plan is not None else {}
    group_of = plan.group_of if plan is not None else {}
    for js in queue:
        cells = given.get(group_of.get(js.job_id, -1))
        while cells:
            c = cells.pop(0)
            if ctx.reserve(js.job_id, c.gpus, c.n_stages) is not None:
                r.touched.add(js.job_id)
                admitted.append(js.job_id)
                r.explain_start(
                    js.job_id, c, f"the LP's Cell for cluster throughput (weight {weight(r, js):.2g})"
                )
                break
    _admit_rest(r, queue, admitted)
    return admitted


def _admit_rest(r: RoundState, queue: list[JobState], admitted: list[int]) -> None:
    """The jobs the LP left out (or whose Cell did not place): free GPUs, then the starvation and SRPT rules. A
    burst of identical jobs that found nothing is tried once while nothing changes."""
    ctx, pol = r.ctx, r.pol
    failed: dict[tuple, int] = {}
    version = 0
    attempts = preempts = 0
    preempt_failed: set[tuple] = set()
    work = list(queue)
    k = 0
    while k < len(work):
        js = work[k]
        k += 1
        if ctx.allocation(js.job_id) is not None:
            continue
        key = (js.job.config, js.job.requested)
        if failed.get(key) != version:
            if backfill(r, js):
                admitted.append(js.job_id)
                version += 1
                continue
            failed[key] = version
        freed = None
        if (
            pol.opportunistic
            and attempts < pol.opportunistic_attempts
            and max(js.job.arrival_s, js.last_change_s) < ctx.now_s - ctx.round_s
        ):
            attempts += 1
            freed = opportunistic_start(r, js)
        if (
            freed is None
            and pol.preempt_factor > 0
            and preempts < pol.preempt_attempts
            and key not in preempt_failed
        ):
            preempts += 1
            freed = preempt_for(r, js)
            if freed is None:
                preempt_failed.add(key)
        if freed is not None:
            version += 1
            admitted.append(js.job_id)
            work.extend(freed)  # the suspended jobs queue again behind it


def backfill(r: RoundState, js: JobState) -> bool:
    """Start a queued job on free GPUs: its best-valued Cell that places now and is worth its GPUs' prices (a
    mixed Cell only when no single type places)."""
    ctx = r.ctx
    free = ctx.free_by_type()
    inf = r.info(js.job)
    pick: Cell | None = None
    w = weight(r, js)
    for c in sorted(inf.cells, key=lambda c: -r.value(c, w)):
        if r.value(c, w) < -1e-9:
            break  # worth less than its GPUs' prices (at zero prices nothing is)
        if not all(free.get(t, 0) >= n for t, n in c.gpus) or ctx.place(c.gpus) is None:
            continue
        if c.mix:
            pick = pick or c
            continue
        pick = c
        break
    if pick is None or ctx.reserve(js.job_id, pick.gpus, pick.n_stages) is None:
        return False
    r.touched.add(js.job_id)
    r.explain_start(
        js.job_id,
        pick,
        f"backfilled on idle GPUs, worth its GPUs at this round's prices (value {r.value(pick, w):.2f})",
    )
    return True


def opportunistic_start(r: RoundState, js: JobState) -> list[JobState] | None:
    """Suspend the jobs launched opportunistically while ``js`` waited (see the module doc). Returns the suspended
    jobs, or None."""
    ctx, pol = r.ctx, r.pol
    inf = r.info(js.job)
    free = ctx.free_by_type()
    since = max(js.job.arrival_s, js.last_change_s)
    # jobs far shorter than this one are not suspended for it (it could preempt them back: no ping-pong)
    floor = priority(r, js) / pol.preempt_factor if pol.preempt_factor > 0 else -math.inf
    for c in inf.min_cells:
        if r.value(c, weight(r, js)) < -1e-9:
            continue  # the LP judges it not worth its GPUs now: waiting is not starvation by smaller jobs
        t, n = c.gpus[0]
        later = [
            (ctx.jobs[jid], a)
            for jid, a in ctx.allocations.items()
            if max(ctx.jobs[jid].first_start_s or 0.0, ctx.jobs[jid].last_change_s) > since
            and a.n_gpus < n
            and ctx.jobs[jid].job.priority <= js.job.priority
            and t in dict(a.gpus)
            and jid not in r.touched
            and remaining(r, ctx.jobs[jid])[1] >= floor
        ]
        if free.get(t, 0) >= n or free.get(t, 0) + sum(dict(a.gpus)[t] for _, a in later) < n:
            continue  # free GPUs suffice (the LP judged the job not worth them), or suspending cannot help
        later.sort(key=lambda oa: (-oa[0].job.arrival_s, -oa[0].job_id))  # latest first
        waited = fmt_s(ctx.now_s - since)
        out = _suspend_for(
            r, js, c, [o for o, _ in later],
            why=f"it started while job {js.job_id} waited ({waited}) and holds part of that job's smallest Cell "
            "(opportunistic execution, Crius §6.1)",
            start=f"waited {waited}; suspends {{victims}}, started on its GPUs while it waited (opportunistic "
            "execution)",
        )  # fmt: skip
        if out is not None:
            return out
    return None


NO_VICTIMS = Victims([], [], [0])


def preempt_for(r: RoundState, js: JobState) -> list[JobState] | None:
    """Shortest-remaining-first under contention (see the module doc): suspend running jobs of a lower user
    priority, or of the same one when they need far more GPU-time, when that frees this job's smallest Cell (the
    best-valued type first). Returns the suspended jobs, or None."""
    ctx, pol = r.ctx, r.pol
    inf = r.info(js.job)
    mine = priority(r, js)
    if not inf.min_cells or not math.isfinite(mine):
        return None
    free = ctx.free_by_type()
    index = _victims_by_type(r)
    # the jobs that may make way come first in each type's order: lower priorities, then this one's far longer
    bound = (js.job.priority, -pol.preempt_factor * mine)
    w = weight(r, js)
    need = remaining(r, js)[1]
    for c in sorted(inf.min_cells, key=lambda c: (c.n_gpus, -r.value(c, w))):
        t, n = c.gpus[0]
        # no victims of the type: free GPUs alone may still do (placed whole, nothing suspended)
        of_type = index.get(t, NO_VICTIMS)
        k = bisect.bisect_left(of_type.keys, bound)
        if free.get(t, 0) + of_type.held[k] < n:
            continue  # even all of them, as they held at the round's start, would not free enough
        cand: list[JobState] = []
        got = 0
        for jid in of_type.ids[:k]:
            a = ctx.allocation(jid)
            if a is None or jid in r.touched:
                continue  # gone or changed this round
            cand.append(ctx.jobs[jid])
            got += dict(a.gpus)[t]
        if free.get(t, 0) + got < n:
            continue
        out = _suspend_for(
            r, js, c, cand,
            why=lambda v: _srpt_why(r, js, ctx.jobs[v], need),
            start=f"needs {need:.3g} GPU-s; suspends {{victims}} (far more work left or a lower priority: "
            "shortest-remaining-first)",
        )  # fmt: skip
        if out is not None:
            return out
    return None


def _srpt_why(r: RoundState, js: JobState, victim: JobState, need: float) -> str:
    if victim.job.priority < js.job.priority:
        return f"it ranks lower (priority {victim.job.priority})"
    return (
        f"it needs {remaining(r, victim)[1]:.3g} GPU-s more, job {js.job_id} only {need:.3g} "
        "(shortest-remaining-first)"
    )


def _suspend_for(
    r: RoundState,
    js: JobState,
    c: Cell,
    victims: list[JobState],
    *,
    why: str | Callable[[int], str],
    start: str,
) -> list[JobState] | None:
    """Suspend ``victims`` in order until Cell ``c`` fits and start ``js`` on it (else undo): the one preemption
    loop, :meth:`SchedulingContext.preempt_until_fits`."""
    ctx = r.ctx
    out = ctx.preempt_until_fits(js.job_id, c.gpus, c.n_stages, [o.job_id for o in victims], why=why)
    if out is None:
        return None
    r.touched.add(js.job_id)
    r.touched.update(out)
    names = ", ".join(f"job {v}" for v in out) or "nothing after all (the GPUs were free)"
    r.explain_start(js.job_id, c, start.format(victims=names))
    return [ctx.jobs[v] for v in out]


def _preemptible(r: RoundState) -> list[tuple[int, float, int]]:
    """(user priority, remaining GPU-seconds, id) of the jobs running at the round's start that have run a round
    and two restarts' time since their last change and are within their restart budget (once a round)."""
    if r.victims is None:
        ctx = r.ctx
        now = ctx.now_s
        r.victims = [
            (js.job.priority, remaining(r, js)[1], js.job_id)
            for js in ctx.running
            if now - js.last_change_s >= max(ctx.round_s, 2 * r.restart_s(js)) and r.may_restart(js)
        ]
    return r.victims


def _victims_by_type(r: RoundState) -> dict[str, Victims]:
    """The preemptible jobs per GPU type they hold, in the order they make way — lowest user priority, then most
    GPU-seconds left (then the later id) — with the GPUs of the type they held at the round's start summed along
    that order (once a round): a queued job asks which prefix may make way for it, not every running job."""
    if r.victims_by_type is None:
        rows: dict[str, list[tuple[int, float, int, int]]] = {}
        for prio, g, jid in sorted(_preemptible(r), key=lambda v: (v[0], -v[1], -v[2])):
            a = r.ctx.allocation(jid)
            if a is None:
                continue
            for t, n in a.gpus:
                rows.setdefault(t, []).append((prio, g, jid, n))
        r.victims_by_type = {
            t: Victims(
                [(p, -g) for p, g, _, _ in v],
                [jid for _, _, jid, _ in v],
                [0, *itertools.accumulate(n for *_, n in v)],
            )
            for t, v in rows.items()
        }
    return r.victims_by_type


__all__ = ["admit", "backfill", "opportunistic_start", "preempt_for"]

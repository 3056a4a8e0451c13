"""VirtualAlloc for running jobs (Crius Algorithm 1 line 19, ScaleResource): apply the LP's rescales and
migrations, with hysteresis.

At most ``depth`` running jobs change per arrival or departure of the round, the most valuable changes at the GPU
prices first, all released together so two jobs can trade GPU types; a shrink keeps part of its own GPUs; a job
whose new Cell cannot be placed goes back to its own GPUs. Hysteresis is in the LP's values (:func:`.lp.plan`): a
job that is settling (it moved less than max(``settle_rounds`` rounds, ``settle_s``) ago) is charged
``settle_factor`` × its restart cost for every other Cell, so the LP moves it only when the throughput the move adds
pays the restart that many times over the job's remaining work.
"""

from __future__ import annotations

from tessera.scheduler.policies.tessera.cells import Cell
from tessera.scheduler.policies.tessera.lp import Plan
from tessera.scheduler.policies.tessera.order import weight
from tessera.scheduler.policies.tessera.round import RoundState
from tessera.scheduler.state import Allocation, JobState


def subset(placement: tuple[tuple[int, int], ...], n: int) -> tuple[tuple[int, int], ...]:
    """``n`` of a job's own GPUs to keep when it shrinks: its fullest nodes first (compact, no new nodes)."""
    out: list[tuple[int, int]] = []
    for i, k in sorted(placement, key=lambda p: (-p[1], p[0])):
        if n <= 0:
            break
        out.append((i, min(k, n)))
        n -= min(k, n)
    return tuple(sorted(out))


def rescale_running(r: RoundState, plan: Plan) -> None:
    """Apply the LP's changes of running jobs (see the module doc)."""
    ctx = r.ctx
    changes = sorted(plan.running.items(), key=lambda kv: (-kv[1][0], kv[0]))[: r.rescale_limit()]
    old: dict[int, Allocation] = {}
    for jid, _ in changes:
        a = ctx.release(jid)
        assert a is not None
        old[jid] = a

    # shrinks on their own type first (they keep GPUs they hold), then the largest Cells (fragmentation)
    def order(kv: tuple[int, tuple[float, list[Cell]]]) -> tuple:
        jid, (_, (c, *_)) = kv
        shrink = c.gpus[0][0] == old[jid].gpus[0][0] and len(c.gpus) == len(old[jid].gpus) == 1
        return (not shrink, -c.n_gpus, jid)

    for jid, (gain, cells) in sorted(changes, key=order):
        a = old[jid]
        js = ctx.jobs[jid]
        for c in cells:
            if _reserve_from(r, jid, a, c):
                r.touched.add(jid)
                w = weight(r, js)
                r.explain_move(js, r.held_cell(js, a), c, gain if c is cells[0] else _gain(r, js, a, c, w), w)
                break
        else:
            if ctx.reserve(jid, a.gpus, a.n_stages, placement=a.placement) is None:
                _fallback(r, js, a)


def _gain(r: RoundState, js: JobState, a: Allocation, c: Cell, w: float) -> float:
    return r.value(c, w) - w * r.penalty(js, c, a.gpus) - r.value(r.held_cell(js, a), w)


def _reserve_from(r: RoundState, jid: int, a: Allocation, c: Cell) -> bool:
    """Reserve Cell ``c`` for a job that held ``a``; a shrink on the same type keeps part of its own GPUs."""
    keep = None
    if len(c.gpus) == len(a.gpus) == 1 and c.gpus[0][0] == a.gpus[0][0] and c.n_gpus < a.n_gpus:
        keep = subset(a.placement, c.n_gpus)
    return r.ctx.reserve(jid, c.gpus, c.n_stages, placement=keep) is not None


def _fallback(r: RoundState, js: JobState, a: Allocation) -> None:
    """A rescaled job whose new Cell and old GPUs are both taken: the best Cell that fits (else it waits)."""
    for c in [r.held_cell(js, a)] + r.info(js.job).cells:
        if r.ctx.reserve(js.job_id, c.gpus, c.n_stages) is not None:
            r.touched.add(js.job_id)
            r.explain_start(js.job_id, c, "its rescale did not place and its own GPUs were taken meanwhile")
            return
    r.ctx.explain(js.job_id, "preempted: its rescale did not place and its own GPUs were taken meanwhile")


__all__ = ["rescale_running", "subset"]

"""Growing what was just admitted: jobs admitted this round have not started, so growing them costs no restart
(the allocation is still virtual). The GPUs left idle are spread over them, best gain in worth (at this round's
prices) per extra GPU first; a gain must exceed ``min_gain`` of the Cell held."""

from __future__ import annotations

import heapq

from tessera.scheduler.policies.tessera.cells import Cell, fits_in
from tessera.scheduler.policies.tessera.order import weight
from tessera.scheduler.policies.tessera.round import RoundState
from tessera.scheduler.policy import fmt_gpus


def grow_new(r: RoundState, ids: list[int]) -> None:
    """Grow the jobs ``ids`` (admitted this round) into idle GPUs, best gain per extra GPU first."""
    ctx = r.ctx
    heap: list[tuple[float, int, int, Cell]] = []
    seq = 0
    free = ctx.free_by_type()
    for jid in ids:
        b = _best_growth(r, jid, free)
        if b is not None:
            heapq.heappush(heap, (-b[0], seq, jid, b[1]))
            seq += 1
    while heap and sum(free.values()) > 0:
        _, _, jid, c = heapq.heappop(heap)
        old = ctx.allocation(jid)
        assert old is not None
        if fits_in(c.gpus, free, old.gpus):
            if ctx.reserve(jid, c.gpus, c.n_stages) is None:
                continue  # placement failed: this job stays as it is (reserve changed nothing)
            free = ctx.free_by_type()
            cur = r.held_cell(ctx.jobs[jid], old)
            r.explain_start(
                jid, c, f"grown from {fmt_gpus(old.gpus)} (est. {cur.rate:.3g} it/s) into idle GPUs before it "
                "started, which costs no restart"
            )  # fmt: skip
        b = _best_growth(r, jid, free)
        if b is not None:
            heapq.heappush(heap, (-b[0], seq, jid, b[1]))
            seq += 1


def _best_growth(r: RoundState, jid: int, free: dict[str, int]) -> tuple[float, Cell] | None:
    """(gain per extra GPU, Cell) of the job's best larger single-type Cell the free GPUs allow, if any."""
    a = r.ctx.allocation(jid)
    if a is None:
        return None
    js = r.ctx.jobs[jid]
    cur = r.held_cell(js, a)
    w = weight(r, js)
    best: tuple[float, Cell] | None = None
    min_gain = r.pol.min_gain
    for c in r.info(js.job).cells:
        if c.norm <= cur.norm * (1 + min_gain):
            break  # fastest first: nothing further is faster
        extra = c.n_gpus - a.n_gpus
        if c.mix or extra <= 0 or not fits_in(c.gpus, free, a.gpus):
            continue
        gain = r.value(c, w) - r.value(cur, w)
        if gain > min_gain * cur.norm and (best is None or gain / extra > best[0]):
            best = (gain / extra, c)
    return best


__all__ = ["grow_new"]

"""Short jobs finish soonest: a job admitted this decision that its fastest Cell on the GPUs left idle would
finish within ``sprint_s`` moves to that Cell before it starts (the allocation is still virtual: no restart).

At a control tick (:func:`.grow.grow_new` runs at rounds only) a job takes its LP Cell, which the LP picks for
the cluster's throughput at the round's GPU prices: on the Philly window at density 1 that left jobs of tens of
seconds on one A100 or on A40s, some slower than what they requested, while A100×8 sat idle, and those jobs set
the p99 JCT slowdown (wait, launch and run over a run of seconds). Runs after every admission, so it takes only
GPUs no queued job was given; a short job gives them back within ``sprint_s``, before a grown long job would
have to be shrunk for an arrival at a restart's cost.

With ``sprint_s`` at 30 min (chosen on the Philly window over 5 min and 1 h) tessera ÷ Sia average JCT there went
0.735 → 0.720 at 2× density, 0.681 → 0.673 at 4× and 0.724 → 0.625 at 8×, the capacity fraction at 8× 0.807 → 0.820
and the p99 slowdown at 1× 2.540 → 2.532 (``bench/results/sim_philly_tessera_sia.json`` at acf50b4).
"""

from __future__ import annotations

from tessera.scheduler.policies.tessera.cells import fits_in
from tessera.scheduler.policies.tessera.round import RoundState
from tessera.scheduler.policy import fmt_gpus, fmt_s


def sprint(r: RoundState, ids: list[int]) -> None:
    """Move each short job of ``ids`` (admitted this decision, in admission order) to its fastest Cell that the
    idle GPUs and its own allow, when that finishes it within ``sprint_s`` and beats its Cell by ``min_gain``."""
    ctx = r.ctx
    for jid in ids:
        old = ctx.allocation(jid)
        if old is None:
            continue  # suspended again later in the decision
        js = ctx.jobs[jid]
        cur = r.held_cell(js, old)
        left = js.remaining_at(ctx.now_s)
        free = ctx.free_by_type()
        for c in r.info(js.job).cells:  # fastest first
            if c.rate <= cur.rate * (1 + r.pol.min_gain) or left / c.rate > r.pol.sprint_s:
                break  # no faster Cell, or not short even there: the LP's Cell stands (growing is the round's)
            if not fits_in(c.gpus, free, old.gpus) or ctx.reserve(jid, c.gpus, c.n_stages) is None:
                continue  # too few idle GPUs, or they do not place (reserve changed nothing): the next fastest
            r.explain_start(
                jid, c, f"moved from {fmt_gpus(old.gpus)} (est. {cur.rate:.3g} it/s) onto idle GPUs before it "
                f"started: done in {fmt_s(left / c.rate)} there (a short job finishes soonest)",
            )  # fmt: skip
            break


__all__ = ["sprint"]

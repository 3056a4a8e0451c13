"""Queue order and LP weights of the tessera policy.

* **Queue order** (Crius §6 takes the queue in arrival order; under contention that leaves short jobs behind long
  ones): queued jobs are taken shortest-remaining-first — the GPU-seconds the job still needs on its smallest Cell
  (the work it reports ÷ the Cell estimate), divided by its response ratio 1 + waited ÷ needed (HRRN aging, so a
  long job that has waited comes up). ``order="arrival"`` restores Crius's order. A user priority ranks first;
  the deadline-aware mode takes earliest deadline first.
* **LP weights**: a job's normalized throughput is weighted by its user priority (``PRIORITY_WEIGHT`` per level) and
  by 1 + θ ÷ t, t the seconds it still needs on its reference Cell (the rate its throughput is normalized by; at
  least ``srpt_floor_s``), θ = ``srpt_horizon_s``: throughput alone does not care which job finishes first. With θ
  far above most jobs' length the LP maximizes, in effect, the rate at which jobs complete: a Cell of rate r is then
  worth θ · (r ÷ ref) ÷ (work ÷ ref) = θ · r ÷ work, the fraction of the job it finishes per second (Smith's rule,
  the fluid form of shortest-remaining-first). t was taken on the job's smallest Cell before; for a job whose
  smallest Cell is slow for its model that undervalued it by that Cell's rate ÷ ref, and under saturation left the
  4- and 8-GPU jobs of slow requests behind. θ = 32 h (``SRPT_HORIZON_S``) was chosen on the Philly window. θ = 16 h
  (``bench/sim_philly.py`` at b0326fc, against θ = 300 s at 8322165) gave tessera ÷ best baseline average JCT 0.86 /
  0.87 / 0.94 at 2× / 4× / 8× density (0.87 / 0.94 / 1.03 before) and p99 JCT slowdown 7.7 at 8× (10.4), for a
  capacity fraction of 0.85 at 4× (0.87); light load unchanged. θ = 32 h with the rescale depth at 10
  (``bench/results/sim_philly_rounds_only.json``, rounds only): 0.82 / 0.78 / 0.72, p99 slowdown 7.4 at 8× (Sia's
  7.5), capacity fraction 0.85 at 4×. On workloads without a heavy tail it can cost: the synthetic burst of
  ``tests/scheduler/test_tessera_decisions.py`` finishes its jobs later on average with it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tessera.scheduler.policies.tessera.cells import JobCells
from tessera.scheduler.policies.tessera.round import RoundState
from tessera.scheduler.state import JobState

if TYPE_CHECKING:
    from tessera.scheduler.policies.tessera import Tessera

# LP weight of one user-priority level over the next lower one (× the largest SRPT factor: set_priority_weights)
PRIORITY_WEIGHT = 4.0
SRPT_HORIZON_S = 32 * 3600.0  # θ of the LP weight 1 + θ ÷ t (see the module doc for why this long)


def remaining(r: RoundState, js: JobState) -> tuple[float, float]:
    """(seconds, GPU-seconds) the job still needs on its smallest Cell, from the work it reports and the Cell
    estimate (memoized for the round)."""
    out = r.remaining.get(js.job_id)
    if out is None:
        out = r.remaining[js.job_id] = remaining_on(r.info(js.job), js.remaining_at(r.ctx.now_s))
    return out


def remaining_on(inf: JobCells, work: float) -> tuple[float, float]:
    """(seconds, GPU-seconds) ``work`` iterations take on the job's smallest Cell (infinite without one)."""
    if not inf.min_cells:
        return (math.inf, math.inf)
    c = inf.min_cells[0]
    t = work / c.rate if c.rate > 0 else math.inf
    return (t, t * c.n_gpus)


def priority(r: RoundState, js: JobState) -> float:
    """Queue order (smaller first): the GPU-seconds the job still needs on its smallest Cell, shortened by its
    response ratio (1 + waited ÷ needed, HRRN) so a long job that has waited long enough comes up."""
    t, g = remaining(r, js)
    if not math.isfinite(g) or not r.pol.aging:
        return g
    waited = max(0.0, r.ctx.now_s - max(js.job.arrival_s, js.last_change_s))
    return g / (1.0 + waited / max(t, r.ctx.round_s))


def queue(r: RoundState) -> list[JobState]:
    """Queued jobs (not dropped) in the order they are served: user priority, then shortest-remaining-first (or
    arrival; earliest deadline first in the deadline-aware mode)."""
    dropped = r.ctx.dropped
    pending = [js for js in r.ctx.pending if js.job_id not in dropped]
    if r.pol.deadline_aware:
        pending.sort(key=lambda js: (-js.job.priority,
                                     js.job.deadline_s if js.job.deadline_s is not None else math.inf,
                                     js.job.arrival_s, js.job_id))  # fmt: skip
    elif r.pol.order == "srpt":
        pending.sort(key=lambda js: (-js.job.priority, priority(r, js), js.job.arrival_s, js.job_id))
    else:
        pending.sort(key=lambda js: -js.job.priority)  # stable: arrival order within a user priority
    return pending


def srpt_weighted(pol: Tessera) -> bool:
    """Whether :func:`weight` multiplies by the shortest-remaining-first factor 1 + θ ÷ t."""
    return pol.srpt_horizon_s > 0 and pol.order == "srpt" and not pol.deadline_aware


def srpt_factor_max(pol: Tessera) -> float:
    """The largest shortest-remaining-first factor :func:`weight` gives (1 when it gives none)."""
    return 1.0 + pol.srpt_horizon_s / pol.srpt_floor_s if srpt_weighted(pol) else 1.0


def set_priority_weights(r: RoundState, queue: list[JobState]) -> None:
    """LP weight per user priority: (``PRIORITY_WEIGHT`` × the largest SRPT factor) ** its rank among the
    priorities present, so a job of a higher priority outweighs any of a lower one however short (the user's
    ranking comes first; shortest-remaining-first orders jobs within a priority). One priority present — the
    common case — leaves the weights as they are."""
    levels = sorted({js.job.priority for js in (*queue, *r.ctx.running)})
    step = PRIORITY_WEIGHT * srpt_factor_max(r.pol)
    r.prio_w = {p: step**k for k, p in enumerate(levels)}
    r.weights.clear()  # weights read before were by other user-priority weights


def weight(r: RoundState, js: JobState) -> float:
    """A job's weight in the LP: its user priority's × 1 + θ ÷ t, t the seconds it still needs on its reference
    Cell (the one its throughput is normalized by) and θ = ``srpt_horizon_s`` (t at least ``srpt_floor_s``): jobs
    much shorter than θ count in inverse proportion to the time they still need, jobs much longer ≈ 1×, as pure
    throughput (memoized for the round: the LP, admission and growth each ask)."""
    w = r.weights.get(js.job_id)
    if w is not None:
        return w
    w = r.prio_w.get(js.job.priority, 1.0)
    pol = r.pol
    if srpt_weighted(pol):
        t = js.remaining_at(r.ctx.now_s) / r.info(js.job).ref  # on the reference Cell: see the module doc
        w *= 1.0 + pol.srpt_horizon_s / max(t, pol.srpt_floor_s)
    r.weights[js.job_id] = w
    return w


def weight_bucket(r: RoundState, js: JobState) -> int:
    """The weight to a whole octave: jobs in one bucket may share an LP group. With SRPT weights spanning three
    orders of magnitude, quarter octaves (the rule before) cut that range four times as finely into groups, with
    no better schedule in the runs tried on the Philly window."""
    return int(math.log2(weight(r, js)))


def drop_hopeless(r: RoundState) -> None:
    """Deadline-aware mode (Crius §8.5): drop a job that cannot meet its deadline even on its fastest Cell."""
    ctx = r.ctx
    for js in (*ctx.running, *ctx.pending):
        d = js.job.deadline_s
        if d is None:
            continue
        inf = r.info(js.job)
        best = inf.cells[0].rate if inf.cells else 0.0
        if best <= 0:
            ctx.drop(
                js.job_id, "dropped: no Cell of the job fits the cluster, so it cannot meet its deadline"
            )
            continue
        start_cost = 0.0 if ctx.allocation(js.job_id) is not None else r.restart_s(js)
        need = js.remaining_at(ctx.now_s) / best
        if ctx.now_s + start_cost + need > d:
            ctx.drop(
                js.job_id,
                f"dropped: needs {need:.0f} s on its fastest Cell ({best:.3g} it/s) but its deadline is "
                f"{max(0.0, d - ctx.now_s):.0f} s away",
            )
